/*
 * fuzz_session.c — libFuzzer harness for saved-session files (engine/state.c).
 *
 * The input is a session file without its last 8 bytes: the harness appends the checksum
 * the file must end with (so the fuzzer gets past it to the header and the body), writes it
 * to a temporary file and loads it into a session of stories260K (the shared folder's,
 * $CERA_SHARED_DIR or ../shared next to the source tree; nothing to do without it). Any
 * status is fine; a session that loaded must then hold at most its context and evaluate a
 * token (or refuse logits that came out NaN from fuzzed K/V rows) and sample after it, and is
 * cut back to empty for the next input. A load that fails must leave the session as it was
 * (empty here) and say why.
 *
 * Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt when CERA_FUZZ is on,
 * otherwise linked with replay.c to replay the seed corpus as a normal test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static cera_engine *g_e;
static cera_session *g_s;
static char g_path[256];
static bool g_tried;

static void init(void) {
    g_tried = true;
    char model[1024];
    const char *env = getenv("CERA_SHARED_DIR");
    if (env) {
        snprintf(model, sizeof model, "%s/models/stories260K.gguf", env);
    } else { /* <repo>/tests/fuzz/fuzz_session.c -> <repo>/../shared/models */
        snprintf(model, sizeof model, "%s", __FILE__);
        for (int i = 0; i < 3; i++) {
            char *s = strrchr(model, '/');
            if (s) *s = 0;
        }
        strncat(model, "/../shared/models/stories260K.gguf", sizeof model - strlen(model) - 1);
    }
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 256;
    ep.device = CERA_DEVICE_CPU;
    cera_error err = {0};
    if (cera_engine_open(model, &ep, &g_e, &err)) {
        fprintf(stderr, "fuzz_session: %s (nothing to fuzz)\n", err.message);
        return;
    }
    REQUIRE(!cera_session_create(g_e, NULL, &g_s, &err));
    snprintf(g_path, sizeof g_path, "/tmp/fuzz_session-%d.bin", (int)getpid());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tried) init();
    if (!g_s) return 0;
    FILE *f = fopen(g_path, "wb");
    if (!f) return 0;
    const uint64_t sum = cera_session_file_checksum(data, size);
    const bool written = fwrite(data, 1, size, f) == size && fwrite(&sum, 8, 1, f) == 1;
    if (fclose(f) || !written) return 0;
    cera_error err = {0};
    const cera_status st = cera_session_load(g_s, g_path, &err);
    if (st == CERA_OK) {
        REQUIRE(cera_session_n_past(g_s) <= cera_engine_n_ctx(g_e));
        const cera_token t = 1;
        if (cera_session_n_past(g_s) < cera_engine_n_ctx(g_e)) {
            // fuzzed K/V rows may hold NaN: then the eval refuses its logits (CERA_ERR_FORMAT)
            const cera_status es = cera_session_eval(g_s, &t, 1, false, &err);
            REQUIRE(es == CERA_OK || es == CERA_ERR_FORMAT);
            if (es == CERA_OK) REQUIRE(cera_session_logits(g_s, -1) != NULL && cera_session_sample(g_s) >= 0);
        }
    } else {
        REQUIRE(err.message[0] && cera_session_n_past(g_s) == 0);
    }
    REQUIRE(!cera_session_truncate(g_s, 0, &err));
    remove(g_path);
    return 0;
}

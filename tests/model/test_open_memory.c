/*
 * test_open_memory.c — cera_engine_open_memory: a model opened from bytes in memory (as the
 * WebAssembly build does with a browser's file) gives the same greedy tokens as the same file
 * opened by path, and broken bytes (cut short, a wrong magic, a corrupt tensor count, none at
 * all) are errors with a message, never a crash.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "testutil.h"

enum { N_GEN = 24 };

typedef struct sink {
    cera_token ids[N_GEN];
    int n;
} sink;

static bool collect(cera_token token, const char *piece, size_t len, void *user) {
    sink *k = user;
    if (token >= 0 && k->n < N_GEN) k->ids[k->n++] = token;
    return true;
}

/* The greedy continuation of a fixed prompt: the streamed token ids into *k; false on an error. */
static bool greedy(cera_engine *e, sink *k) {
    memset(k, 0xff, sizeof *k);
    k->n = 0;
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0;
    cera_session *s = NULL;
    cera_error err;
    if (cera_session_create(e, &sp, &s, &err)) return false;
    cera_token prompt[64];
    size_t n = 0;
    const char *text = "Once upon a time";
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = N_GEN;
    const bool ok = !cera_tokenize(e, text, strlen(text), true, false, prompt, 64, &n, &err) &&
                    !cera_generate(s, prompt, n, &gp, collect, k, NULL, &err);
    cera_session_free(s);
    return ok;
}

int main(void) {
    const char *path = shared_path("models/stories260K.gguf");
    if (!file_exists(path)) {
        fprintf(stderr, "skip: %s missing\n", path);
        return TEST_SKIP_CODE;
    }
    size_t size = 0;
    uint8_t *bytes = read_file(path, &size);
    CHECK(bytes && size > 1024, "read %s", path);
    if (!bytes) return test_finish();

    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 1;
    cera_error err;
    cera_engine *file_engine = NULL, *mem_engine = NULL;
    CHECK(cera_engine_open(path, &ep, &file_engine, &err) == CERA_OK, "open by path: %s", err.message);
    CHECK(cera_engine_open_memory(bytes, size, &ep, &mem_engine, &err) == CERA_OK, "open from memory: %s",
          err.message);
    if (file_engine && mem_engine) {
        CHECK(cera_engine_n_vocab(file_engine) == cera_engine_n_vocab(mem_engine), "same vocabulary");
        CHECK(cera_engine_fingerprint(file_engine) == cera_engine_fingerprint(mem_engine),
              "same fingerprint");
        sink a, b;
        CHECK(greedy(file_engine, &a) && greedy(mem_engine, &b), "generate from both");
        CHECK(a.n > 8 && a.n == b.n, "generated %d and %d tokens", a.n, b.n);
        CHECK(memcmp(a.ids, b.ids, sizeof a.ids) == 0,
              "the same greedy tokens from the file and from memory");
    }
    cera_engine_close(file_engine);
    cera_engine_close(mem_engine);

    /* broken bytes: each an error with a message, no engine */
    uint8_t *copy = malloc(size);
    struct {
        const char *what;
        size_t len;
        int poke; /* offset to overwrite with 0xff bytes (-1: none) */
        cera_status want;
    } cases[] = {
        {"cut short", size / 3, -1, CERA_ERR_FORMAT},
        {"header only", 12, -1, CERA_ERR_FORMAT},
        {"wrong magic", size, 0, CERA_ERR_FORMAT},
        {"huge tensor count", size, 8, CERA_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(copy, bytes, size);
        if (cases[i].poke >= 0) memset(copy + cases[i].poke, 0xff, 8);
        cera_engine *e = NULL;
        const cera_status st = cera_engine_open_memory(copy, cases[i].len, &ep, &e, &err);
        CHECK(st == cases[i].want && !e, "%s: status %d (%s), want %d", cases[i].what, (int)st, err.message,
              (int)cases[i].want);
        CHECK(strstr(err.message, "<memory>") != NULL, "%s: the message names the model: %s", cases[i].what,
              err.message);
        cera_engine_close(e);
    }
    cera_engine *e = NULL;
    CHECK(cera_engine_open_memory(NULL, 0, &ep, &e, &err) == CERA_ERR_INVALID_ARG && !e, "no bytes: %s",
          err.message);
    free(copy);
    free(bytes);
    return test_finish();
}

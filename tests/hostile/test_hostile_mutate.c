/*
 * test_hostile_mutate.c — the hostile-input probe kept as a test tool: mutants of a valid
 * small GGUF (stories260K) run through every command that reads a model, asserting that
 * each one ends by itself (within a time limit) with an exit code below 128: an error
 * message is fine, a crash, a sanitizer report (the ASan build aborts) or a hang is not.
 *
 * Every fourth mutant is of a LoRA adapter (lora-stories-a.gguf) instead, run through
 * inspect, run --lora, logits --lora and lora merge.
 *
 * Mutations, chosen per mutant by a generator seeded from (seed, index), so one mutant is
 * reproduced alone with --only INDEX:
 *   - bit flips, mostly in the header (metadata and tensor infos);
 *   - truncation at a random length (often inside the header);
 *   - a header field overwritten with an interesting value (0, 1, -1, 2^31, 2^32, ...);
 *   - a header chunk copied over another place (keys, types and lengths out of step);
 *   - NaN, Inf or 1e38 written into tensor data.
 *
 *   test_hostile_mutate [-n N] [--seed S] [--budget SECONDS] [--only INDEX] [--keep]
 *
 * Defaults: 200 mutants, seed 14, 150 s (the run stops early, saying so, past the budget).
 * A failing mutant is kept as hostile_mutate/fail-SEED-INDEX.gguf with the command printed.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hostile_util.h"
#include "testutil.h"

#define RUN_LIMIT 20.0

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t below(test_rng *r, uint64_t n) { return n ? test_rng_next(r) % n : 0; }

static const char *const kind_names[] = {"bit flips", "truncation", "field overwrite", "splice",
                                         "float poison"};

/* Mutates buf (size bytes, header_end the start of tensor data) in place; may shorten
 * *size. Returns the kind. */
static int mutate(uint8_t *buf, size_t *size, size_t header_end, test_rng *r) {
    const int kind = (int)below(r, 5);
    const size_t n = *size;
    switch (kind) {
    case 0: {
        const int flips = 1 + (int)below(r, 16);
        for (int i = 0; i < flips; i++) {
            const size_t at = below(r, 100) < 85 ? below(r, header_end) : below(r, n);
            buf[at] ^= (uint8_t)(1u << below(r, 8));
        }
        break;
    }
    case 1: *size = below(r, 2) ? below(r, header_end + 1) : below(r, n); break;
    case 2: {
        static const uint64_t vals[] = {
            0,          1,          2,          0x7f,           0xff,       0xffff,
            0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull, UINT64_MAX, 0x7fffffffffffffffull,
            13,         31,         1024};
        const int width = (int)(1u << below(r, 4)); /* 1, 2, 4 or 8 bytes */
        const size_t at = below(r, header_end > (size_t)width ? header_end - (size_t)width : 1);
        const uint64_t v = below(r, 4) ? vals[below(r, sizeof vals / sizeof vals[0])] : test_rng_next(r);
        for (int b = 0; b < width; b++) buf[at + (size_t)b] = (uint8_t)(v >> (8 * b));
        break;
    }
    case 3: {
        const size_t len = 1 + below(r, 64);
        if (header_end > len) {
            const size_t from = below(r, header_end - len), to = below(r, header_end - len);
            memmove(buf + to, buf + from, len);
        }
        break;
    }
    default: {
        static const float poison[] = {0.0f / 0.0f, 1.0f / 0.0f, -1.0f / 0.0f, 1e38f};
        const int spots = 1 + (int)below(r, 4);
        for (int i = 0; i < spots && n > header_end + 4; i++) {
            const size_t at = header_end + (below(r, (n - header_end) / 4) * 4);
            memcpy(buf + at, &poison[below(r, 4)], 4);
        }
        break;
    }
    }
    return kind;
}

int main(int argc, char **argv) {
    long n_mutants = 200, only = -1;
    uint64_t seed = 14;
    double budget = 150;
    bool keep = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n_mutants = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc)
            budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = atol(argv[++i]);
        else if (!strcmp(argv[i], "--keep"))
            keep = true;
        else {
            fprintf(stderr, "usage: %s [-n N] [--seed S] [--budget SECONDS] [--only INDEX] [--keep]\n",
                    argv[0]);
            return 2;
        }
    }
    const char *dir = hostile_scratch("mutate");
    const char *model = shared_path("models/stories260K.gguf");
    const char *adapter = shared_path("golden/lora-stories-a.gguf");
    const char *bases[2] = {model, adapter};
    uint8_t *orig[2] = {NULL, NULL};
    size_t size0[2] = {0, 0}, header_end[2] = {0, 0};
    for (int b = 0; b < 2; b++) {
        orig[b] = read_file(bases[b], &size0[b]);
        gguf_file *f = NULL;
        cera_error err;
        CHECK(orig[b] && gguf_open(bases[b], &f, &err) == CERA_OK, "base %s: %s", bases[b], err.message);
        if (!orig[b] || !f) return test_finish();
        header_end[b] = (size_t)f->data_offset;
        gguf_close(f);
    }
    uint8_t *buf = malloc(size0[0] > size0[1] ? size0[0] : size0[1]);

    static char mpath[1024], opath[1024], qpath[1024], lpath[1024];
    snprintf(mpath, sizeof mpath, "%s/mutant.gguf", dir);
    snprintf(opath, sizeof opath, "%s/out.f32", dir);
    snprintf(qpath, sizeof qpath, "%s/out.gguf", dir);
    snprintf(lpath, sizeof lpath, "%s/log.txt", dir);
    static char chat_in[1024];
    snprintf(chat_in, sizeof chat_in, "%s/chat.in", dir);
    CHECK(hostile_write(chat_in, "Once upon a time\n", 17), "write the chat turn");
    const char *const model_cmds[][16] = {
        {"inspect", mpath, NULL},
        {"tokenize", "-m", mpath, "-p", "Once upon a time", NULL},
        {"run", "-m", mpath, "-p", "Once upon a time", "-n", "2", "-t", "1", "--temp", "0", NULL},
        {"run", "-m", mpath, "-p", "Once", "-n", "2", "-t", "1", "--seed", "7", NULL},
        {"logits", "-m", mpath, "-p", "Once", "-o", opath, "-t", "1", NULL},
        {"quantize", mpath, qpath, "f16", "--threads", "1", NULL},
        {"chat", "-m", mpath, "-n", "2", "-t", "1", "--temp", "0", NULL}, /* one turn, from chat_in */
    };
    const char *const adapter_cmds[][16] = {
        {"inspect", mpath, NULL},
        {"run", "-m", model, "--lora", mpath, "-p", "Once upon a time", "-n", "2", "-t", "1", "--temp", "0",
         NULL},
        {"logits", "-m", model, "--lora-scaled", mpath, "0.5", "-p", "Once", "-o", opath, "-t", "1", NULL},
        {"lora", "merge", "-m", model, "--lora", mpath, "-o", qpath, NULL},
    };
    const double t0 = now_s();
    long done = 0, n_fail = 0, n_runs = 0;
    int exits[3] = {0, 0, 0}; /* exit 0, 1, other below 128: what the mutants did */
    for (long i = only >= 0 ? only : 0; i < (only >= 0 ? only + 1 : n_mutants); i++) {
        if (now_s() - t0 > budget) {
            fprintf(stderr, "time budget of %.0f s spent after %ld of %ld mutants\n", budget, done,
                    n_mutants);
            break;
        }
        test_rng r = {seed * 1000003u + (uint64_t)i + 1};
        const int b = i % 4 == 3; /* the adapter */
        memcpy(buf, orig[b], size0[b]);
        size_t size = size0[b];
        const int kind = mutate(buf, &size, header_end[b], &r);
        CHECK(hostile_write(mpath, buf, size), "write the mutant");
        bool failed = false;
        const int n_cmds = b ? (int)(sizeof adapter_cmds / sizeof adapter_cmds[0])
                             : (int)(sizeof model_cmds / sizeof model_cmds[0]);
        for (int c = 0; c < n_cmds; c++) {
            const char *const *cmd = b ? adapter_cmds[c] : model_cmds[c];
            const int rc = hostile_run(cmd, RUN_LIMIT, strcmp(cmd[0], "chat") ? NULL : chat_in, lpath);
            const bool ok = rc >= 0 && rc < 128;
            CHECK(ok, "mutant %ld (seed %llu, %s of the %s): cera %s %s ... %s", i, (unsigned long long)seed,
                  kind_names[kind], b ? "adapter" : "model", cmd[0], cmd[1],
                  rc == HOSTILE_TIMEOUT          ? "hung (killed at the time limit)"
                  : rc == HOSTILE_SANITIZER_EXIT ? "a sanitizer report"
                  : rc >= 128                    ? "crashed (a signal)"
                                                 : "could not run");
            if (!ok) {
                failed = true;
                size_t ln = 0;
                char *log = read_file(lpath, &ln);
                if (log) fprintf(stderr, "--- its output:\n%.*s\n---\n", (int)(ln < 4000 ? ln : 4000), log);
                free(log);
            } else {
                exits[rc == 0 ? 0 : rc == 1 ? 1 : 2]++;
            }
            n_runs++;
        }
        if (failed || keep) {
            char kp[1200];
            snprintf(kp, sizeof kp, "%s/%s-%llu-%ld.gguf", dir, failed ? "fail" : "mutant",
                     (unsigned long long)seed, i);
            hostile_write(kp, buf, size);
            if (failed) fprintf(stderr, "kept as %s\n", kp);
        }
        n_fail += failed;
        done++;
    }
    fprintf(stderr, "%ld mutants, %ld runs in %.1f s: %ld mutants failed; exits 0: %d, 1: %d, other: %d\n",
            done, n_runs, now_s() - t0, n_fail, exits[0], exits[1], exits[2]);
    CHECK(done > 0, "no mutant ran");
    free(buf);
    free(orig[0]);
    free(orig[1]);
    return test_finish();
}

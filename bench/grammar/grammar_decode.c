/*
 * grammar_decode.c — decode speed with and without a grammar, through the public API:
 * grammar_decode MODEL.gguf [TOKENS] [THREADS] [GRAMMAR.gbnf|SCHEMA.json|json]...
 *
 * For no grammar and then each one given ("json": any JSON object), samples and evaluates
 * TOKENS tokens one at a time after a short prompt (temperature 1, llama.cpp's default
 * chain, seed 1) and prints the decode tok/s and the mean sample time per token (where the
 * mask is paid). When a grammar ends (its match complete, or nothing allowed) the session
 * is cut back to the prompt, which restarts the grammar, and the walk goes on, so every
 * mode times the same number of tokens. bench/RESULTS.md keeps the numbers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cera.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    *len = (size_t)n;
    return b;
}

/* Sets the mode's grammar (NULL: none); false with a message when it does not load. */
static bool set_mode(cera_session *s, const char *mode) {
    cera_error err;
    cera_status st = CERA_OK;
    if (!mode) return true;
    if (!strcmp(mode, "json")) {
        st = cera_session_set_json_schema(s, NULL, 0, &err);
    } else {
        size_t len = 0;
        char *text = slurp(mode, &len);
        if (!text) {
            fprintf(stderr, "grammar_decode: cannot read %s\n", mode);
            return false;
        }
        st = strstr(mode, ".json") ? cera_session_set_json_schema(s, text, len, &err)
                                   : cera_session_set_grammar(s, text, len, &err);
        free(text);
    }
    if (st) fprintf(stderr, "grammar_decode: %s: %s\n", mode, err.message);
    return st == CERA_OK;
}

static int run_mode(cera_engine *e, const char *mode, int n_tokens) {
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 1.0f;
    sp.sampler.seed = 1;
    cera_session *s = NULL;
    cera_error err;
    if (cera_session_create(e, &sp, &s, &err)) {
        fprintf(stderr, "grammar_decode: %s\n", err.message);
        return 1;
    }
    const char *prompt = "Here is the record, as JSON:\n";
    cera_token ptok[64];
    size_t np = 0;
    int rc = 1;
    if (!set_mode(s, mode)) goto out;
    if (cera_tokenize(e, prompt, strlen(prompt), true, false, ptok, 64, &np, &err) ||
        cera_session_eval(s, ptok, np, false, &err))
        goto fail;
    double t_sample = 0, t_all = 0;
    int restarts = 0;
    for (int i = 0; i < n_tokens; i++) {
        const double t0 = now_s();
        cera_token t = cera_session_sample(s);
        const double t1 = now_s();
        if (t < 0 || cera_engine_is_eog(e, t) || cera_session_n_past(s) + 1 >= cera_engine_n_ctx(e)) {
            /* the grammar's end (or the context's): back to the prompt, the grammar restarts */
            if (t < 0 && cera_session_grammar_state(s) == CERA_GRAMMAR_NONE) {
                fprintf(stderr, "grammar_decode: nothing to sample\n");
                goto out;
            }
            if (cera_session_truncate(s, (int)np - 1, &err) ||
                cera_session_eval(s, ptok + np - 1, 1, false, &err))
                goto fail;
            restarts++;
            i--;
            continue;
        }
        if (cera_session_eval(s, &t, 1, false, &err)) goto fail;
        const double t2 = now_s();
        t_sample += t1 - t0;
        t_all += t2 - t0;
    }
    printf("| %s | %d | %.1f | %.0f | %d |\n", mode ? mode : "none", n_tokens, n_tokens / t_all,
           1e6 * t_sample / n_tokens, restarts);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "grammar_decode: %s\n", err.message);
out:
    cera_session_free(s);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: grammar_decode MODEL.gguf [TOKENS] [THREADS] [GRAMMAR.gbnf|SCHEMA.json|json]...\n");
        return 2;
    }
    const int n_tokens = argc > 2 ? atoi(argv[2]) : 128;
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = argc > 3 ? atoi(argv[3]) : 2;
    ep.n_ctx = 512;
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    cera_error err;
    if (n_tokens <= 0 || cera_engine_open(argv[1], &ep, &e, &err)) {
        fprintf(stderr, "grammar_decode: %s\n", n_tokens <= 0 ? "TOKENS must be > 0" : err.message);
        return 1;
    }
    printf(
        "| grammar | tokens | decode tok/s | sample µs/token | grammar restarts |\n|---|---|---|---|---|\n");
    int rc = run_mode(e, NULL, n_tokens);
    for (int i = 4; i < argc; i++) rc |= run_mode(e, argv[i], n_tokens);
    cera_engine_close(e);
    return rc;
}

/*
 * grammar_mask.c — how long an allowed-token mask takes (src/grammar/tokens.c) over a
 * model's vocabulary: grammar_mask MODEL.gguf GRAMMAR.gbnf|SCHEMA.json [STEPS] [SEED].
 *
 * Walks the grammar for STEPS tokens (each a random allowed one, EOG avoided while others
 * are allowed) and times, at every state: a cold mask (a matcher copy: no automaton, no
 * cache), the mask of the matcher itself as a sampler would call it (its byte automaton
 * kept across states; a state seen before is a cache hit), and a repeated (cached) call. Prints µs per mask
 * (mean and max), the stack counts and the text generated; bench/RESULTS.md keeps the numbers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cera.h"
#include "grammar/grammar.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
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

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: grammar_mask MODEL.gguf GRAMMAR.gbnf|SCHEMA.json [STEPS] [SEED]\n");
        return 2;
    }
    int steps = argc > 3 ? atoi(argv[3]) : 64;
    unsigned seed = argc > 4 ? (unsigned)atoi(argv[4]) : 1;
    cera_engine_params ep = cera_engine_default_params();
    ep.n_ctx = 64;
    ep.n_seq_max = 1;
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    cera_error err = {0};
    if (cera_engine_open(argv[1], &ep, &e, &err) != CERA_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    int32_t nv = cera_engine_n_vocab(e);
    char **pieces = calloc((size_t)nv, sizeof *pieces);
    size_t *lens = calloc((size_t)nv, sizeof *lens);
    bool *eog = calloc((size_t)nv, 1);
    for (int32_t i = 0; i < nv; i++) {
        int n = cera_token_to_piece(e, i, NULL, 0, true);
        pieces[i] = malloc(n > 0 ? (size_t)n : 1);
        if (n > 0) cera_token_to_piece(e, i, pieces[i], (size_t)n, true);
        lens[i] = n > 0 ? (size_t)n : 0;
        eog[i] = cera_engine_is_eog(e, i);
    }
    double t0 = now_us();
    cera_grammar_tokens *t = NULL;
    if (cera_grammar_tokens_new((const char *const *)pieces, lens, eog, nv, &t, &err) != CERA_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    double t_trie = now_us() - t0;
    size_t len;
    char *text = slurp(argv[2], &len), *gbnf = NULL;
    if (!text) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    size_t plen = strlen(argv[2]);
    if (plen > 5 && !strcmp(argv[2] + plen - 5, ".json")) {
        if (cera_json_schema_to_gbnf(text, len, &gbnf, &err) != CERA_OK) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
    }
    cera_grammar *g = NULL;
    cera_grammar_matcher *m = NULL;
    if (cera_grammar_parse(gbnf ? gbnf : text, gbnf ? strlen(gbnf) : len, NULL, &g, &err) != CERA_OK ||
        cera_grammar_matcher_new(g, NULL, &m, &err) != CERA_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    uint32_t *mask = calloc((size_t)(nv + 31) / 32, 4);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
    double fresh = 0, fresh_max = 0, warm = 0, warm_max = 0, cached = 0;
    size_t stacks = 0, out_len = 0;
    char out[1 << 14];
    int done = 0;
    srand(seed);
    for (int s = 0; s < steps; s++) {
        cera_grammar_matcher *c = NULL;
        cera_grammar_matcher_clone(m, &c, &err);
        double a = now_us();
        cera_grammar_matcher_mask(c, t, mask, &err);
        double b = now_us();
        cera_grammar_matcher_free(c);
        double w0 = now_us();
        cera_grammar_matcher_mask(m, t, mask, &err); /* the real path: automaton kept, fills the cache */
        double w1 = now_us();
        warm += w1 - w0;
        if (w1 - w0 > warm_max) warm_max = w1 - w0;
        double c0 = now_us();
        cera_grammar_matcher_mask(m, t, mask, &err);
        double c1 = now_us();
        fresh += b - a;
        if (b - a > fresh_max) fresh_max = b - a;
        cached += c1 - c0;
        stacks += cera_grammar_matcher_n_stacks(m);
        int32_t n_allowed = 0, n_text = 0;
        for (int32_t k = 0; k < nv; k++)
            if (mask[k >> 5] >> (k & 31) & 1) allowed[n_allowed++] = k;
        for (int32_t k = 0; k < n_allowed; k++)
            if (!eog[allowed[k]]) allowed[n_text++] = allowed[k];
        done++;
        if (n_text == 0) break;
        int32_t pick = allowed[rand() % n_text];
        if (out_len + lens[pick] < sizeof out) {
            memcpy(out + out_len, pieces[pick], lens[pick]);
            out_len += lens[pick];
        }
        if (cera_grammar_matcher_accept_token(m, t, pick, &err) != CERA_OK) {
            fprintf(stderr, "accept: %s\n", err.message);
            break;
        }
    }
    printf("vocabulary: %d tokens, trie built in %.1f ms\n", nv, t_trie / 1e3);
    printf("%s: %d states, us per mask: cold %.1f mean / %.1f max; kept matcher %.1f / %.1f; cached %.2f; "
           "%.1f stacks\n",
           argv[2], done, fresh / done, fresh_max, warm / done, warm_max, cached / done,
           (double)stacks / done);
    printf("text: %.*s\n", (int)out_len, out);
    free(mask);
    free(allowed);
    cera_grammar_matcher_free(m);
    cera_grammar_free(g);
    free(gbnf);
    free(text);
    cera_grammar_tokens_free(t);
    for (int32_t i = 0; i < nv; i++) free(pieces[i]);
    free(pieces);
    free(lens);
    free(eog);
    cera_engine_close(e);
    return 0;
}

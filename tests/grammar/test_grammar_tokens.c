/*
 * test_grammar_tokens.c — constrained sampling over a vocabulary (src/grammar/tokens.c):
 * the allowed-token mask must agree, token by token, with the one-token reference
 * (cera_grammar_matcher_allows) in every state of random walks, including states inside
 * a code point split across tokens, token elements, end-of-generation and empty pieces;
 * the cached mask must equal a fresh one. With SmolLM2's 49k vocabulary (skipped when the
 * model is not fetched) the same is checked on a JSON-schema grammar and on llama.cpp's
 * JSON grammar, and the time per mask is printed. (The masks were also compared with
 * llama.cpp's grammar sampler on SmolLM2 along random walks of every golden grammar and
 * schema: identical, except where a token's text reaches a token element part-way, which
 * llama.cpp's mask admits and its accept then fails on; cera admits no such token.)
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cera.h"
#include "grammar/grammar.h"
#include "testutil.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static bool bit(const uint32_t *mask, int32_t i) { return mask[i >> 5] >> (i & 31) & 1; }

/* A random walk of n_steps tokens; at each state the mask is checked against the reference. */
static void walk(const char *label, const char *gbnf, const cera_grammar_tokens *t, int n_steps,
                 uint64_t seed, double *us_mask, int *n_masks) {
    cera_error err = {0};
    cera_grammar *g = NULL;
    cera_grammar_matcher *m = NULL;
    CHECK(cera_grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err) == CERA_OK, "%s: %s", label, err.message);
    if (!g) return;
    CHECK(cera_grammar_matcher_new(g, NULL, &m, &err) == CERA_OK, "%s: %s", label, err.message);
    int32_t nv = cera_grammar_tokens_n_vocab(t);
    uint32_t *mask = calloc((size_t)(nv + 31) / 32, 4), *again = calloc((size_t)(nv + 31) / 32, 4);
    int32_t *allowed = malloc((size_t)nv * sizeof *allowed);
    test_rng rng = {seed};
    int mismatches = 0;
    for (int step = 0; m && step < n_steps; step++) {
        double t0 = now_us();
        CHECK(cera_grammar_matcher_mask(m, t, mask, &err) == CERA_OK, "%s: mask: %s", label, err.message);
        *us_mask += now_us() - t0;
        (*n_masks)++;
        int32_t n_allowed = 0;
        for (int32_t k = 0; k < nv; k++) {
            int ref = cera_grammar_matcher_allows(m, t, k);
            if (ref != (int)bit(mask, k) && mismatches++ < 5)
                CHECK(false, "%s step %d: token %d: mask %d, reference %d", label, step, k, bit(mask, k),
                      ref);
            if (bit(mask, k)) allowed[n_allowed++] = k;
        }
        cera_grammar_matcher_mask(m, t, again, &err);
        CHECK(!memcmp(mask, again, (size_t)(nv + 31) / 32 * 4), "%s step %d: cached mask differs", label,
              step);
        if (n_allowed == 0) break;
        int32_t pick = allowed[test_rng_next(&rng) % (uint64_t)n_allowed];
        cera_status st = cera_grammar_matcher_accept_token(m, t, pick, &err);
        CHECK(st == CERA_OK && !cera_grammar_matcher_dead(m), "%s step %d: accepting allowed token %d: %s",
              label, step, pick, err.message);
        if (st != CERA_OK) break;
    }
    CHECK(mismatches == 0, "%s: %d mask/reference mismatches", label, mismatches);
    free(mask);
    free(again);
    free(allowed);
    cera_grammar_matcher_free(m);
    cera_grammar_free(g);
}

static void synthetic(void) {
    /* every printable byte, words, UTF-8 whole and split, an empty piece, an EOG token */
    const char *extra[] = {"ab",           "abc",  "{\"",      "\":",      "true",     "null",
                           "\xc3\xa9",     "\xc3", "\xa9",     "\xf0\x9f", "\x98\x80", "\xf0\x9f\x98\x80",
                           "\xe6\x97\xa5", "\xe6", "\x97\xa5", "\"}",      "",         "</s>",
                           "\xff",         "\n  ", "12",       "-0"};
    size_t n_extra = sizeof extra / sizeof *extra;
    int32_t nv = (int32_t)(95 + n_extra);
    const char **pieces = malloc((size_t)nv * sizeof *pieces);
    size_t *lens = malloc((size_t)nv * sizeof *lens);
    bool *eog = calloc((size_t)nv, 1);
    char *bytes = malloc(95);
    for (int i = 0; i < 95; i++) {
        bytes[i] = (char)(0x20 + i);
        pieces[i] = bytes + i;
        lens[i] = 1;
    }
    for (size_t i = 0; i < n_extra; i++) {
        pieces[95 + i] = extra[i];
        lens[95 + i] = strlen(extra[i]);
    }
    eog[95 + 17] = true;
    cera_grammar_tokens *t = NULL;
    cera_error err = {0};
    CHECK(cera_grammar_tokens_new(pieces, lens, eog, nv, &t, &err) == CERA_OK, "%s", err.message);
    double us = 0;
    int n = 0;
    const char *grammars[] = {
        "root ::= [a-c\\u00e9\\U0001F600]* \"}\"",
        "root ::= \"{\\\"\" [^\"]* \"\\\":\" (\"true\" | \"null\" | [0-9]+) \"\\\"}\"",
        "root ::= (\"\\u65e5\" | \"\\u00e9\" | [ -~])+",
        "root ::= <[97]> \"x\" | !<[0]> \"y\" | \"z\"",
        "root ::= [^\\x00-\\x7f]{2} \"!\"?",
        "root ::= [^\\u00e9\\U0001F601]+", /* a negated set: partial code points checked only at a token's end
                                            */
    };
    for (size_t i = 0; i < sizeof grammars / sizeof *grammars; i++)
        for (uint64_t seed = 1; seed <= 6; seed++)
            walk(grammars[i], grammars[i], t, 24, seed * 7919 + i, &us, &n);
    /* split UTF-8 through accept_bytes, then a whole code point */
    cera_grammar *g = NULL;
    cera_grammar_matcher *m = NULL;
    const char *gb = "root ::= \"\\u00e9\" \"a\"";
    cera_grammar_parse(gb, strlen(gb), NULL, &g, &err);
    cera_grammar_matcher_new(g, NULL, &m, &err);
    cera_grammar_matcher_accept_bytes(m, "\xc3", 1, &err);
    CHECK(!cera_grammar_matcher_dead(m) && cera_grammar_matcher_allows(m, t, 95 + 8) == 1,
          "continuation byte allowed");
    CHECK(cera_grammar_matcher_allows(m, t, 'a' - 0x20) == 0, "an ASCII byte inside a code point");
    cera_grammar_matcher_accept_bytes(m,
                                      "\xa9"
                                      "a",
                                      2, &err);
    CHECK(cera_grammar_matcher_complete(m), "é then a");
    CHECK(cera_grammar_matcher_allows(m, t, 95 + 17) == 1, "EOG when complete");
    cera_grammar_matcher_free(m);
    cera_grammar_free(g);
    /* a finished parse is dropped by any token, even one that only starts a code point
     * (llama.cpp's accept): after "a" then "\xc3", end-of-generation is not allowed */
    gb = "root ::= \"a\" | \"a\" \"\\u00e9\"";
    g = NULL;
    m = NULL;
    cera_grammar_parse(gb, strlen(gb), NULL, &g, &err);
    cera_grammar_matcher_new(g, NULL, &m, &err);
    cera_grammar_matcher_accept_token(m, t, 'a' - 0x20, &err);
    CHECK(cera_grammar_matcher_allows(m, t, 95 + 17) == 1, "EOG after a");
    cera_grammar_matcher_accept_token(m, t, 95 + 7, &err); /* "\xc3" */
    CHECK(!cera_grammar_matcher_complete(m) && cera_grammar_matcher_allows(m, t, 95 + 17) == 0,
          "EOG mid code point");
    CHECK(cera_grammar_matcher_allows(m, t, 95 + 8) == 1, "the code point's end");
    cera_grammar_matcher_accept_token(m, t, 95 + 8, &err); /* "\xa9" */
    CHECK(cera_grammar_matcher_complete(m), "a then é in two tokens");
    cera_grammar_matcher_free(m);
    cera_grammar_free(g);
    cera_grammar_tokens_free(t);
    free(pieces);
    free(lens);
    free(eog);
    free(bytes);
}

static void smollm2(void) {
    const char *path = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!file_exists(path)) {
        printf("skipping SmolLM2 part: no %s\n", path);
        return;
    }
    cera_engine_params ep = cera_engine_default_params();
    ep.n_ctx = 64;
    ep.n_seq_max = 1;
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    cera_error err = {0};
    CHECK(cera_engine_open(path, &ep, &e, &err) == CERA_OK, "%s", err.message);
    if (!e) return;
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
    cera_grammar_tokens *t = NULL;
    CHECK(cera_grammar_tokens_new((const char *const *)pieces, lens, eog, nv, &t, &err) == CERA_OK, "%s",
          err.message);
    size_t len;
    char *schema = read_file(shared_path("golden/json-schema/013.schema.json"), &len), *gbnf = NULL;
    CHECK(schema && cera_json_schema_to_gbnf(schema, len, &gbnf, &err) == CERA_OK, "%s", err.message);
    char *json = read_file(shared_path("golden/grammar/005.gbnf"), &len);
    double us = 0;
    int n = 0;
    if (t && gbnf) walk("smollm2 schema 013", gbnf, t, 12, 11, &us, &n);
    if (t && json) walk("smollm2 json.gbnf", json, t, 12, 12, &us, &n);
    if (n) printf("SmolLM2 (%d tokens): %.0f us per mask (fresh and cached, %d masks)\n", nv, us / n, n);
    free(schema);
    free(gbnf);
    free(json);
    cera_grammar_tokens_free(t);
    for (int32_t i = 0; i < nv; i++) free(pieces[i]);
    free(pieces);
    free(lens);
    free(eog);
    cera_engine_close(e);
}

int main(void) {
    synthetic();
    smollm2();
    return test_finish();
}

/*
 * fuzz_grammar.c — libFuzzer harness for src/grammar: the GBNF parser, the matcher and the
 * JSON Schema converter.
 *
 * The input is split at its first NUL: the part before is a grammar (or, when it starts
 * with '{', a JSON Schema, converted and its grammar parsed), the part after is a text fed
 * code point by code point to a matcher with small limits; the grammar text itself is
 * fed too. Then a few tokens of a small vocabulary (bytes, words, split UTF-8, an empty
 * piece, an end-of-generation token) are sampled under the grammar, the input choosing
 * among the allowed ones, and every mask must agree with the one-token reference. Whatever the bytes: a
 * grammar or an error with a message, a verdict or a limit error, no crash, no sanitizer report, no hang (the
 * parser's size and nesting limits and the matcher's stack and work limits bound everything).
 *
 * Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt when CERA_FUZZ is on,
 * otherwise linked with replay.c to replay the seed corpus as a normal test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static void feed(const cera_grammar *g, const uint8_t *s, size_t n) {
    cera_grammar_limits lim = {.max_stacks = 2048, .max_work = 1u << 16};
    cera_grammar_matcher *m = NULL;
    cera_error err = {0};
    if (cera_grammar_matcher_new(g, &lim, &m, &err) != CERA_OK) {
        REQUIRE(m == NULL && err.message[0]);
        return;
    }
    for (size_t i = 0; i < n && i < 4096 && !cera_grammar_matcher_dead(m); i++) {
        /* bytes and, now and then, a multi-byte code point */
        uint32_t cp = s[i] < 0xf0 ? s[i] : 0x10000u + s[i] * 977u;
        if (cera_grammar_matcher_accept(m, cp, &err) != CERA_OK) {
            REQUIRE(err.message[0] && cera_grammar_matcher_dead(m));
            break;
        }
    }
    (void)cera_grammar_matcher_complete(m);
    cera_grammar_matcher_free(m);
}

static cera_grammar_tokens *g_tokens;

static void sample(const cera_grammar *g, const uint8_t *choice, size_t n) {
    if (!g_tokens) {
        static const char *extra[] = {
            "ab",       "{\"",      "\":", "true", "\xc3\xa9", "\xc3", "\xa9", "\xf0\x9f\x98\x80",
            "\xf0\x9f", "\x98\x80", "",    "</s>", "\n ",      "12",   "\xff"};
        static const char *pieces[95 + 15];
        static size_t lens[95 + 15];
        static bool eog[95 + 15];
        static char bytes[95];
        for (int i = 0; i < 95; i++) {
            bytes[i] = (char)(0x20 + i);
            pieces[i] = bytes + i;
            lens[i] = 1;
        }
        for (int i = 0; i < 15; i++) {
            pieces[95 + i] = extra[i];
            lens[95 + i] = strlen(extra[i]);
        }
        eog[95 + 11] = true;
        REQUIRE(cera_grammar_tokens_new(pieces, lens, eog, 95 + 15, &g_tokens, NULL) == CERA_OK);
    }
    cera_grammar_limits lim = {.max_stacks = 1024, .max_work = 1u << 15};
    cera_grammar_matcher *m = NULL;
    if (cera_grammar_matcher_new(g, &lim, &m, NULL) != CERA_OK) return;
    uint32_t mask[4];
    for (size_t step = 0; step < 8 && !cera_grammar_matcher_dead(m); step++) {
        if (cera_grammar_matcher_mask(m, g_tokens, mask, NULL) != CERA_OK) break;
        int32_t allowed[110], n_allowed = 0;
        for (int32_t k = 0; k < 110; k++) {
            bool bit = mask[k >> 5] >> (k & 31) & 1;
            int ref = cera_grammar_matcher_allows(m, g_tokens, k);
            if (ref < 0) goto done; /* a matcher limit */
            REQUIRE(ref == (int)bit);
            if (bit) allowed[n_allowed++] = k;
        }
        if (!n_allowed) break;
        int32_t pick = allowed[(step < n ? choice[step] : step) % (size_t)n_allowed];
        if (cera_grammar_matcher_accept_token(m, g_tokens, pick, NULL) != CERA_OK) break;
    }
done:
    cera_grammar_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *input = nul ? nul + 1 : data + size;
    size_t in_len = nul ? size - glen - 1 : 0;
    cera_error err = {0};
    char *gbnf = NULL;
    const char *text = (const char *)data;
    if (glen && data[0] == '{') {
        if (cera_json_schema_to_gbnf(text, glen, &gbnf, &err) != CERA_OK) {
            REQUIRE(gbnf == NULL && err.message[0]);
            return 0;
        }
        REQUIRE(gbnf != NULL);
        text = gbnf;
        glen = strlen(gbnf);
    }
    cera_grammar *g = NULL;
    if (cera_grammar_parse(text, glen, NULL, &g, &err) != CERA_OK) {
        REQUIRE(g == NULL && err.message[0]);
        free(gbnf);
        return 0;
    }
    REQUIRE(g != NULL && cera_grammar_n_rules(g) > 0);
    feed(g, input, in_len);
    feed(g, (const uint8_t *)text, glen);
    sample(g, input, in_len);
    cera_grammar_free(g);
    free(gbnf);
    return 0;
}

/*
 * test_grammar_engine.c — the grammar parser and matcher piece by piece (src/grammar):
 * error positions, token elements with and without a vocabulary, repetition limits,
 * the matcher API (accept, dead, complete, clone), and hostile inputs: deep nesting,
 * huge repeats, a grammar whose stacks grow exponentially (bounded: an error, quickly),
 * deep right recursion and long inputs (the stack pool is compacted).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "testutil.h"

static cera_grammar *parse(const char *text, cera_error *err) {
    cera_grammar *g = NULL;
    cera_error_clear(err);
    if (cera_grammar_parse(text, strlen(text), NULL, &g, err) != CERA_OK) return NULL;
    return g;
}

/* 1 accepted, 0 rejected (at *pos), -1 an error. */
static int check(const cera_grammar *g, const char *in, size_t len, size_t *pos) {
    bool ok;
    size_t at = 0;
    cera_error err = {0};
    if (cera_grammar_check(g, in, len, &ok, &at, &err) != CERA_OK) return -1;
    if (pos) *pos = at;
    return ok;
}

static void errors(void) {
    cera_error err;
    CHECK(!parse("root ::= \"a\"\nx ::= [b-", &err) && strstr(err.message, "line 2, column 10"), "%s",
          err.message);
    CHECK(!parse("root ::= \"a\" ::= \"b\"\n", &err) && strstr(err.message, "line 1, column 14"), "%s",
          err.message);
    CHECK(!parse("root ::= undefined-one", &err) && strstr(err.message, "undefined-one"), "%s", err.message);
    CHECK(!parse("root ::= \"\\q\"", &err) && strstr(err.message, "unknown escape"), "%s", err.message);
    CHECK(!parse("root ::= \"\\x4\"", &err) && strstr(err.message, "hex"), "%s", err.message);
    CHECK(!parse("", &err) && err.status == CERA_ERR_FORMAT, "%s", err.message);
    CHECK(!parse("root ::= \"a\"{3,2}", &err), "max below min loaded");
    /* a NUL ends the text, as in llama.cpp */
    cera_grammar *g = NULL;
    CHECK(cera_grammar_parse("root ::= \"a\"\0garbage", 21, NULL, &g, &err) == CERA_OK, "%s", err.message);
    cera_grammar_free(g);
}

static int32_t fake_vocab(void *user, const char *text, size_t len) {
    (void)user;
    return len == 7 && !memcmp(text, "<think>", 7) ? 42 : -1;
}

static void tokens(void) {
    cera_error err;
    cera_grammar *g = parse("root ::= <[5]> \"a\" | !<[7]> | \"b\"", &err);
    CHECK(g, "%s", err.message);
    size_t pos;
    CHECK(check(g, "b", 1, NULL) == 1, "b");
    CHECK(check(g, "a", 1, &pos) == 0 && pos == 0, "a: a token never matches a character");
    cera_grammar_free(g);
    cera_grammar_vocab v = {NULL, fake_vocab};
    g = NULL;
    const char *t = "root ::= <think> \"x\" | \"y\"";
    CHECK(cera_grammar_parse(t, strlen(t), &v, &g, &err) == CERA_OK, "%s", err.message);
    cera_grammar_free(g);
    g = NULL;
    t = "root ::= <thought> \"x\"";
    CHECK(cera_grammar_parse(t, strlen(t), &v, &g, &err) != CERA_OK && !g, "not a single token loaded");
}

static void matcher_api(void) {
    cera_error err;
    cera_grammar *g = parse("root ::= \"ab\" | \"abc\"", &err);
    cera_grammar_matcher *m = NULL, *c = NULL;
    CHECK(g && cera_grammar_matcher_new(g, NULL, &m, &err) == CERA_OK, "%s", err.message);
    CHECK(!cera_grammar_matcher_complete(m) && !cera_grammar_matcher_dead(m), "start");
    cera_grammar_matcher_accept(m, 'a', &err);
    cera_grammar_matcher_accept(m, 'b', &err);
    CHECK(cera_grammar_matcher_complete(m), "ab complete");
    CHECK(cera_grammar_matcher_clone(m, &c, &err) == CERA_OK, "clone: %s", err.message);
    cera_grammar_matcher_accept(m, 'c', &err);
    CHECK(cera_grammar_matcher_complete(m), "abc complete");
    cera_grammar_matcher_accept(m, 'c', &err);
    CHECK(cera_grammar_matcher_dead(m), "abcc dead");
    cera_grammar_matcher_accept(c, 'x', &err);
    CHECK(cera_grammar_matcher_dead(c) && !cera_grammar_matcher_dead(m) == false, "clone independent");
    cera_grammar_matcher_free(m);
    cera_grammar_matcher_free(c);
    cera_grammar_free(g);
}

static void hostile(void) {
    cera_error err;
    /* deep group nesting: refused, no stack overflow */
    size_t n = 200000;
    char *t = malloc(2 * n + 32);
    strcpy(t, "root ::= ");
    size_t k = strlen(t);
    for (size_t i = 0; i < n; i++) t[k++] = '(';
    t[k++] = '"';
    t[k++] = 'a';
    t[k++] = '"';
    for (size_t i = 0; i < n; i++) t[k++] = ')';
    t[k] = 0;
    CHECK(!parse(t, &err) && err.message[0], "deep nesting loaded");
    free(t);
    /* repeats: the thresholds */
    cera_grammar *g = parse("root ::= \"a\"{1999}", &err);
    CHECK(g, "{1999}: %s", err.message);
    char *in = malloc(4000);
    memset(in, 'a', 4000);
    size_t pos;
    CHECK(g && check(g, in, 1999, NULL) == 1, "1999 a");
    CHECK(g && check(g, in, 2000, &pos) == 0 && pos == 1999, "2000 a");
    cera_grammar_free(g);
    CHECK(!parse("root ::= \"a\"{2000}", &err), "{2000} loaded (llama.cpp refuses it)");
    CHECK(!parse("root ::= (\"a\"{0,50}){50}", &err), "nested product 51*50 loaded");
    CHECK(!parse("root ::= \"a\"{99999999999999999999999}", &err), "huge count loaded");
    g = parse("root ::= (\"a\"{0,20}){20}", &err);
    CHECK(g, "nested product 21*20: %s", err.message);
    CHECK(g && check(g, in, 400, NULL) == 1 && check(g, in, 401, &pos) == 0, "400 a");
    cera_grammar_free(g);
    /* exponentially many stacks: bounded, reported as an error, fast */
    g = parse("root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"", &err);
    CHECK(g, "%s", err.message);
    clock_t t0 = clock();
    CHECK(g && check(g, in, 64, NULL) == -1, "exponential stacks not stopped");
    CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 20, "the limit took too long");
    cera_grammar_free(g);
    /* very ambiguous but deduplicated: many parses, few stacks */
    g = parse("root ::= (\"a\" | \"a\" | [a] | \"a\"?)*", &err);
    CHECK(g && check(g, in, 4000, NULL) == 1, "ambiguous star over 4000 chars");
    cera_grammar_free(g);
    free(in);
    /* deep right recursion over a long input: the pool is compacted, memory stays bounded */
    g = parse("root ::= \"(\" root \")\" | \"\"", &err);
    n = 300000;
    in = malloc(2 * n);
    memset(in, '(', n);
    memset(in + n, ')', n);
    CHECK(g && check(g, in, 2 * n, NULL) == 1, "deep nesting input");
    CHECK(g && check(g, in, 2 * n - 1, &pos) == 0 && pos == 2 * n - 1, "one short");
    cera_grammar_free(g);
    free(in);
    /* a long flat input */
    g = parse("root ::= ([a-z] | \" \")* \".\"", &err);
    n = 2u << 20;
    in = malloc(n);
    memset(in, 'x', n);
    in[n - 1] = '.';
    CHECK(g && check(g, in, n, NULL) == 1, "2 MiB input");
    cera_grammar_free(g);
    free(in);
    /* many rules */
    size_t cap = 1 << 20;
    t = malloc(cap);
    k = (size_t)snprintf(t, cap, "root ::= r0\n");
    for (int i = 0; i < 20000; i++)
        k += (size_t)snprintf(t + k, cap - k, "r%d ::= \"x\" r%d | \"\"\n", i, i + 1);
    k += (size_t)snprintf(t + k, cap - k, "r20000 ::= \"end\"\n");
    g = parse(t, &err);
    CHECK(g, "20000 rules: %s", err.message);
    cera_grammar_free(g);
    /* a left-recursive chain of 20000 rules is found (depth-bounded, no crash) */
    k = (size_t)snprintf(t, cap, "root ::= r0\n");
    for (int i = 0; i < 20000; i++) k += (size_t)snprintf(t + k, cap - k, "r%d ::= r%d \"x\"\n", i, i + 1);
    k += (size_t)snprintf(t + k, cap - k, "r20000 ::= root\n");
    CHECK(!parse(t, &err), "left-recursive chain loaded");
    free(t);
}

/* The schema converter beyond the goldens: llama.cpp's number texts, refusals, limits. */
static void schemas(void) {
    cera_error err = {0};
    char *out = NULL;
    const char *s = "{\"enum\": [1.0, 1e2, 2.5, 10, -0.0, 1.5e-7, 1e20]}";
    CHECK(
        cera_json_schema_to_gbnf(s, strlen(s), &out, &err) == CERA_OK && out &&
            strstr(out,
                   "root ::= (\"1.0\" | \"100.0\" | \"2.5\" | \"10\" | \"-0.0\" | \"1.5e-07\" | \"1e+20\")"),
        "numbers as nlohmann writes them: %s", out ? out : err.message);
    free(out);
    out = NULL;
    s = "{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#/$defs/missing\"}}}";
    CHECK(cera_json_schema_to_gbnf(s, strlen(s), &out, &err) != CERA_OK && !out &&
              strstr(err.message, "missing"),
          "missing $ref: %s", err.message);
    s = "{\"type\": \"string\", \"pattern\": \"^*a$\"}";
    CHECK(cera_json_schema_to_gbnf(s, strlen(s), &out, &err) != CERA_OK && !out,
          "quantifier with nothing before it");
    CHECK(cera_json_schema_to_gbnf("{", 1, &out, &err) == CERA_ERR_FORMAT && !out, "not JSON");
    /* deep nesting: refused, no stack overflow */
    size_t n = 900, k = 0;
    char *deep = malloc(n * 40 + 16);
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(deep + k, "{\"type\":\"array\",\"items\":");
    k += (size_t)sprintf(deep + k, "{}");
    for (size_t i = 0; i < n; i++) deep[k++] = '}';
    deep[k] = 0;
    cera_status st = cera_json_schema_to_gbnf(deep, k, &out, &err);
    CHECK(st != CERA_OK && !out, "deep schema: status %d", st);
    free(out);
    free(deep);
    /* an integer range and a pattern with repetitions load and match */
    s = "{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": -37, "
        "\"maximum\": "
        "4567}, \"p\": {\"type\": \"string\", \"pattern\": \"^[a-z]{2,4}(-[0-9]{1,3}){2}$\"}}, \"required\": "
        "[\"n\", "
        "\"p\"]}";
    out = NULL;
    CHECK(cera_json_schema_to_gbnf(s, strlen(s), &out, &err) == CERA_OK, "%s", err.message);
    cera_grammar *g = out ? parse(out, &err) : NULL;
    CHECK(g, "%s", err.message);
    const char *yes[] = {"{\"n\": -37, \"p\": \"ab-1-22\"}", "{\"n\":4567,\"p\":\"abcd-123-0\"}"};
    const char *no[] = {"{\"n\": -38, \"p\": \"ab-1-22\"}", "{\"n\": 4568, \"p\": \"ab-1-22\"}",
                        "{\"n\": 5, \"p\": \"a-1-22\"}", "{\"n\": 5, \"p\": \"ab-1\"}"};
    for (int i = 0; g && i < 2; i++) CHECK(check(g, yes[i], strlen(yes[i]), NULL) == 1, "%s", yes[i]);
    for (int i = 0; g && i < 4; i++) CHECK(check(g, no[i], strlen(no[i]), NULL) == 0, "%s", no[i]);
    cera_grammar_free(g);
    free(out);
}

int main(void) {
    errors();
    schemas();
    tokens();
    matcher_api();
    hostile();
    return test_finish();
}

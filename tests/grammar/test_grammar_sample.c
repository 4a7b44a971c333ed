/*
 * test_grammar_sample.c — constrained sampling through the public API (cera.h: Grammars):
 * 200 generations at temperature 1 (different seeds, llama.cpp's default chain and the
 * plain draw in turn) over golden GBNF grammars, golden JSON Schemas and JSON mode, on
 * stories260K and SmolLM2 (skipped when not fetched). A generation the grammar ended
 * (COMPLETE) must be accepted whole by cera_grammar_check and parse as JSON where JSON was
 * asked; one cut by n_predict must be a live prefix. Then the edges: a grammar that allows
 * nothing ends cleanly (CERA_OK, no token, DEAD_END), a fork continues the grammar's state
 * (its continuation is the original's), truncate restarts it, a broken grammar keeps the old
 * one, cera_batch_sample, and clearing it.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cera.h"
#include "engine_util.h"
#include "grammar/grammar.h"
#include "testutil.h"

#define MAX_GEN 512

typedef struct gen_out {
    cera_token tok[MAX_GEN];
    int n;
} gen_out;

static bool on_token(cera_token t, const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    gen_out *g = user;
    if (t >= 0 && g->n < MAX_GEN) g->tok[g->n++] = t;
    return true;
}

/* The text the grammar saw: the pieces with special tokens rendered (malloc'ed). */
static char *text_of(cera_engine *e, const cera_token *t, int n, size_t *len) {
    size_t cap = 256, k = 0;
    char *s = malloc(cap);
    for (int i = 0; s && i < n; i++) {
        const int m = cera_token_to_piece(e, t[i], NULL, 0, true);
        if (m <= 0) continue;
        if (k + (size_t)m + 1 > cap) {
            while (k + (size_t)m + 1 > cap) cap *= 2;
            char *ns = realloc(s, cap);
            if (!ns) {
                free(s);
                return NULL;
            }
            s = ns;
        }
        cera_token_to_piece(e, t[i], s + k, (size_t)m, true);
        k += (size_t)m;
    }
    if (s) s[k] = 0;
    *len = k;
    return s;
}

static cera_session *new_session(cera_engine *e, uint64_t seed) {
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 1.0f;
    sp.sampler.seed = seed;
    if (seed & 1) { /* the plain draw over everything the grammar allows */
        sp.sampler.top_k = 0;
        sp.sampler.top_p = 1.0f;
        sp.sampler.min_p = 0.0f;
    }
    cera_session *s = NULL;
    cera_error err;
    CHECK(cera_session_create(e, &sp, &s, &err) == CERA_OK, "%s", err.message);
    return s;
}

static int n_runs, n_complete, n_cut, n_json;

/* One generation under gbnf; its verdicts as the file comment says. */
static void run_one(cera_engine *e, const char *name, const char *gbnf, bool json, const char *prompt,
                    uint64_t seed, int n_predict) {
    cera_error err;
    cera_grammar *g = NULL;
    CHECK(cera_grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err) == CERA_OK, "%s: %s", name, err.message);
    cera_session *s = new_session(e, seed);
    if (!g || !s) goto out;
    CHECK(cera_session_set_grammar(s, gbnf, strlen(gbnf), &err) == CERA_OK, "%s: %s", name, err.message);
    CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_ACTIVE, "%s: state at the start", name);
    cera_token ptok[64];
    size_t np = 0;
    CHECK(cera_tokenize(e, prompt, strlen(prompt), true, false, ptok, 64, &np, &err) == CERA_OK, "%s",
          err.message);
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = n_predict;
    static gen_out out;
    out.n = 0;
    int n_gen = 0;
    const cera_status st = cera_generate(s, ptok, np, &gp, on_token, &out, &n_gen, &err);
    CHECK(st == CERA_OK, "%s seed %llu: %s", name, (unsigned long long)seed, err.message);
    const cera_grammar_state gs = cera_session_grammar_state(s);
    size_t len = 0;
    char *text = text_of(e, out.tok, out.n, &len);
    n_runs++;
    CHECK(gs != CERA_GRAMMAR_DEAD_END, "%s seed %llu: a dead end after '%s'", name, (unsigned long long)seed,
          text ? text : "");
    if (gs == CERA_GRAMMAR_COMPLETE) {
        n_complete++;
        bool ok = false;
        size_t at = 0;
        CHECK(cera_grammar_check(g, text, len, &ok, &at, &err) == CERA_OK && ok,
              "%s seed %llu: rejected at %zu: '%s'", name, (unsigned long long)seed, at, text);
        if (json) {
            cJSON *j = cJSON_ParseWithLength(text, len);
            CHECK(j, "%s seed %llu: not JSON: '%s'", name, (unsigned long long)seed, text);
            cJSON_Delete(j);
            n_json++;
        }
    } else {
        n_cut++;
        CHECK(n_gen == n_predict, "%s seed %llu: ended after %d of %d tokens without completing", name,
              (unsigned long long)seed, n_gen, n_predict);
        cera_grammar_matcher *m = NULL;
        CHECK(cera_grammar_matcher_new(g, NULL, &m, &err) == CERA_OK, "%s", err.message);
        if (m) {
            cera_grammar_matcher_accept_bytes(m, text, len, &err);
            CHECK(!cera_grammar_matcher_dead(m), "%s seed %llu: not a prefix: '%s'", name,
                  (unsigned long long)seed, text);
        }
        cera_grammar_matcher_free(m);
    }
    free(text);
out:
    cera_session_free(s);
    cera_grammar_free(g);
}

/* A golden file's text, or NULL (a failed CHECK). */
static char *golden(const char *rel) {
    size_t n;
    char *t = read_file(shared_path(rel), &n);
    CHECK(t, "cannot read %s", rel);
    return t;
}

static char *schema_gbnf(const char *schema, size_t len) {
    char *gbnf = NULL;
    cera_error err;
    CHECK(cera_json_schema_to_grammar(schema, len, &gbnf, &err) == CERA_OK, "%s", err.message);
    return gbnf;
}

typedef struct gcase {
    const char *file; /* golden/grammar/N.gbnf or golden/json-schema/N.schema.json; NULL: JSON mode */
    bool json;
} gcase;

/* Runs each case n_seeds times. */
static void sweep(cera_engine *e, const char *label, const gcase *cases, int n_cases, int n_seeds,
                  const char *prompt, int n_predict) {
    const int runs0 = n_runs, complete0 = n_complete;
    for (int c = 0; c < n_cases; c++) {
        char *gbnf = NULL;
        if (!cases[c].file) {
            gbnf = schema_gbnf("{\"type\":\"object\"}", 17);
        } else if (strstr(cases[c].file, ".schema.json")) {
            char *schema = golden(cases[c].file);
            if (schema) gbnf = schema_gbnf(schema, strlen(schema));
            free(schema);
        } else {
            char *t = golden(cases[c].file);
            if (t) gbnf = strdup(t);
            free(t);
        }
        if (!gbnf) continue;
        for (int i = 0; i < n_seeds; i++)
            run_one(e, cases[c].file ? cases[c].file : "JSON mode", gbnf, cases[c].json, prompt,
                    (uint64_t)(1000 * c + i), n_predict);
        cera_free(gbnf);
    }
    fprintf(stderr, "%s: %d generations, %d ended by the grammar\n", label, n_runs - runs0,
            n_complete - complete0);
}

/* Nothing allowed: CERA_OK, no token, DEAD_END; a complete grammar's end: COMPLETE. */
static void edges(cera_engine *e) {
    cera_error err;
    cera_session *s = new_session(e, 7);
    if (!s) return;
    const cera_token bos[1] = {1};
    const char *none = "root ::= <[100000]>"; /* a token id past the vocabulary */
    CHECK(cera_session_set_grammar(s, none, strlen(none), &err) == CERA_OK, "%s", err.message);
    gen_out *out = calloc(1, sizeof *out);
    int n_gen = -1;
    CHECK(cera_generate(s, bos, 1, NULL, on_token, out, &n_gen, &err) == CERA_OK, "%s", err.message);
    CHECK(n_gen == 0 && out->n == 0, "%d tokens from a grammar that allows none", n_gen);
    CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_DEAD_END, "state %d",
          (int)cera_session_grammar_state(s));
    CHECK(cera_session_sample(s) == -1, "a token sampled past the dead end");
    cera_token t = 5;
    cera_session *ss[1] = {s};
    CHECK(cera_batch_sample(ss, 1, &t, &err) == CERA_OK && t == -1, "batch sample at a dead end: %d", t);

    /* a grammar of one string: its text, then the end (an EOG token over a complete match) */
    const char *one = "root ::= \"Hi\"";
    CHECK(cera_session_set_grammar(s, one, strlen(one), &err) == CERA_OK, "%s", err.message);
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "%s", err.message);
    out->n = 0;
    cera_generate_params gp = cera_generate_default_params();
    gp.ignore_eog = true; /* a grammar's end is an end all the same */
    gp.n_predict = 50;
    CHECK(cera_generate(s, bos, 1, &gp, on_token, out, &n_gen, &err) == CERA_OK, "%s", err.message);
    size_t len;
    char *text = text_of(e, out->tok, out->n, &len);
    CHECK(text && !strcmp(text, "Hi") && cera_session_grammar_state(s) == CERA_GRAMMAR_COMPLETE,
          "'%s' state %d", text ? text : "", (int)cera_session_grammar_state(s));
    free(text);

    /* a grammar that does not load keeps the one set; NULL clears it */
    CHECK(cera_session_set_grammar(s, "root ::= (", 10, &err) == CERA_ERR_FORMAT, "broken grammar loaded");
    CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_COMPLETE, "the old grammar went");
    CHECK(cera_session_set_grammar(s, NULL, 0, &err) == CERA_OK &&
              cera_session_grammar_state(s) == CERA_GRAMMAR_NONE,
          "clear");
    CHECK(cera_session_set_json_schema(s, "{\"type\":", 8, &err) != CERA_OK, "a broken schema loaded");
    CHECK(cera_session_set_json_schema(s, NULL, 0, &err) == CERA_OK &&
              cera_session_grammar_state(s) == CERA_GRAMMAR_ACTIVE,
          "JSON mode: %s", err.message);
    free(out);
    cera_session_free(s);
}

/* A fork continues from the grammar's state: its continuation equals the source's (same
 * sampler state), and the whole text stays in the grammar; truncate restarts it. */
static void fork_truncate(cera_engine *e) {
    cera_error err;
    cera_session *a = new_session(e, 11), *b = NULL;
    if (!a) return;
    const char *g = "root ::= \"[\" [0-9]+ (\", \" [0-9]+)* \"]\"";
    CHECK(cera_session_set_grammar(a, g, strlen(g), &err) == CERA_OK, "%s", err.message);
    const cera_token bos[1] = {1};
    gen_out *h = calloc(1, sizeof *h), *ca = calloc(1, sizeof *ca), *cb = calloc(1, sizeof *cb),
            *full = calloc(1, sizeof *full);
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = 4;
    CHECK(cera_generate(a, bos, 1, &gp, on_token, h, NULL, &err) == CERA_OK, "%s", err.message);
    CHECK(cera_session_fork(a, &b, &err) == CERA_OK, "%s", err.message);
    gp.n_predict = 40;
    CHECK(cera_generate(a, NULL, 0, &gp, on_token, ca, NULL, &err) == CERA_OK, "%s", err.message);
    CHECK(b && cera_generate(b, NULL, 0, &gp, on_token, cb, NULL, &err) == CERA_OK, "%s", err.message);
    CHECK(ca->n == cb->n && !memcmp(ca->tok, cb->tok, (size_t)ca->n * sizeof(cera_token)),
          "the fork's continuation differs (%d vs %d tokens)", ca->n, cb->n);
    CHECK(cera_session_grammar_state(a) == cera_session_grammar_state(b), "fork state");
    memcpy(h->tok + h->n, cb->tok, (size_t)cb->n * sizeof(cera_token));
    size_t len;
    char *text = text_of(e, h->tok, h->n + cb->n, &len);
    cera_grammar *pg = NULL;
    bool ok = false;
    size_t at = 0;
    CHECK(cera_grammar_parse(g, strlen(g), NULL, &pg, &err) == CERA_OK, "%s", err.message);
    if (cera_session_grammar_state(b) == CERA_GRAMMAR_COMPLETE)
        CHECK(pg && cera_grammar_check(pg, text, len, &ok, &at, &err) == CERA_OK && ok, "fork text '%s'",
              text);
    free(text);
    /* truncate(0) restarts grammar and sampler: the same prompt gives the same generation */
    CHECK(cera_session_truncate(a, 0, &err) == CERA_OK, "%s", err.message);
    gp.n_predict = 44;
    CHECK(cera_generate(a, bos, 1, &gp, on_token, full, NULL, &err) == CERA_OK, "%s", err.message);
    CHECK(full->n == h->n + cb->n && !memcmp(full->tok, h->tok, (size_t)full->n * sizeof(cera_token)),
          "after truncate: %d tokens, first run %d", full->n, h->n + cb->n);
    cera_grammar_free(pg);
    free(h);
    free(ca);
    free(cb);
    free(full);
    cera_session_free(b);
    cera_session_free(a);
}

int main(void) {
    const clock_t t0 = clock();
    cera_engine *st = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CPU);
    if (!st) return test_finish();
    static const gcase tiny[] = {
        {"golden/grammar/000.gbnf", false},
        {"golden/grammar/002.gbnf", false},
        {"golden/grammar/003.gbnf", false},
        {"golden/grammar/005.gbnf", true},
        {"golden/grammar/006.gbnf", true},
        {"golden/grammar/007.gbnf", false},
        {"golden/grammar/016.gbnf", false},
        {"golden/grammar/018.gbnf", false},
        {"golden/grammar/023.gbnf", false},
        {"golden/json-schema/007.schema.json", true},
        {"golden/json-schema/008.schema.json", true},
        {"golden/json-schema/013.schema.json", true},
        {"golden/json-schema/021.schema.json", true},
        {"golden/json-schema/023.schema.json", true},
        {"golden/json-schema/028.schema.json", true},
        {"golden/json-schema/038.schema.json", true},
        {"golden/json-schema/041.schema.json", true},
        {NULL, true},
    };
    const int n_tiny = (int)(sizeof tiny / sizeof tiny[0]);
    edges(st);
    fork_truncate(st);

    cera_engine *sm = NULL;
    const char *smol = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (file_exists(smol)) {
        cera_engine_params ep = cera_engine_default_params();
        ep.n_threads = 2;
        ep.n_ctx = 256;
        ep.device = CERA_DEVICE_CPU;
        cera_error err;
        CHECK(cera_engine_open(smol, &ep, &sm, &err) == CERA_OK, "%s", err.message);
    } else {
        fprintf(stderr, "note: %s not fetched: stories260K only\n", smol);
    }
    /* 200 generations with both models: 18 cases x 10 on stories260K, 10 x 2 on SmolLM2 */
    sweep(st, "stories260K", tiny, n_tiny, 10, "Once upon a time", 200);
    if (sm) {
        static const gcase smol_cases[] = {
            {"golden/grammar/005.gbnf", true},
            {"golden/grammar/007.gbnf", false},
            {"golden/grammar/012.gbnf", false},
            {"golden/grammar/018.gbnf", false},
            {"golden/json-schema/008.schema.json", true},
            {"golden/json-schema/031.schema.json", true},
            {"golden/json-schema/040.schema.json", true},
            {"golden/json-schema/041.schema.json", true},
            {"golden/json-schema/047.schema.json", true},
            {NULL, true},
        };
        sweep(sm, "SmolLM2", smol_cases, (int)(sizeof smol_cases / sizeof smol_cases[0]), 2,
              "Here is the answer, as JSON:\n", 40);
        fork_truncate(sm);
    }
    fprintf(stderr,
            "%d generations: %d ended by the grammar (%d parsed as JSON), %d cut by n_predict; %.1f s\n",
            n_runs, n_complete, n_json, n_cut, (double)(clock() - t0) / CLOCKS_PER_SEC);
    CHECK(n_complete * 2 >= n_runs, "only %d of %d generations completed", n_complete, n_runs);
    cera_engine_close(sm);
    cera_engine_close(st);
    return test_finish();
}

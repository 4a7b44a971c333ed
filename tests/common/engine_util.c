/* engine_util.c — see engine_util.h. */
#include "engine_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

cera_engine *test_open_engine(const char *rel, cera_device device) {
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 256;
    ep.device = device;
    cera_engine *e = NULL;
    cera_error err = {0};
    CHECK(cera_engine_open(shared_path(rel), &ep, &e, &err) == CERA_OK, "%s: %s", rel, err.message);
    return e;
}

cera_adapter *test_load_adapter(cera_engine *e, const char *rel) {
    cera_adapter *a = NULL;
    cera_error err = {0};
    if (!e) return NULL;
    CHECK(cera_adapter_load(e, shared_path(rel), &a, &err) == CERA_OK, "%s: %s", rel, err.message);
    return a;
}

float *test_session_logits(cera_engine *e, const test_attach *at, int n_at, const int32_t *tokens, size_t n,
                           bool one_by_one) {
    cera_session *s = NULL;
    cera_error err = {0};
    if (!e || cera_session_create(e, NULL, &s, &err)) {
        CHECK(0, "session: %s", err.message);
        return NULL;
    }
    for (int i = 0; i < n_at; i++)
        CHECK(cera_session_set_adapter(s, at[i].a, at[i].scale, &err) == CERA_OK, "set_adapter: %s",
              err.message);
    const int nv = cera_engine_n_vocab(e);
    float *out = malloc(n * (size_t)nv * sizeof(float));
    bool ok = out != NULL;
    if (one_by_one) {
        for (size_t i = 0; i < n && ok; i++) {
            ok = cera_session_eval(s, &tokens[i], 1, false, &err) == CERA_OK;
            if (ok) memcpy(out + i * nv, cera_session_logits(s, -1), (size_t)nv * sizeof(float));
        }
    } else if (ok) {
        ok = cera_session_eval(s, tokens, n, true, &err) == CERA_OK;
        for (size_t i = 0; i < n && ok; i++)
            memcpy(out + i * nv, cera_session_logits(s, (int)i), (size_t)nv * sizeof(float));
    }
    CHECK(ok, "eval: %s", err.message);
    cera_session_free(s);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

bool test_mixed_make(int n_seq, const int32_t *const *tok, const int *len, test_mixed *m) {
    memset(m, 0, sizeof *m);
    if (n_seq < 1) {
        CHECK(0, "mixed batch of %d sequences", n_seq);
        return false;
    }
    for (int i = 0; i < n_seq; i++) m->n += len[i];
    m->tok = malloc((size_t)m->n * sizeof *m->tok);
    m->pos = malloc((size_t)m->n * sizeof *m->pos);
    m->seq = malloc((size_t)m->n * sizeof *m->seq);
    m->want = malloc((size_t)m->n * sizeof *m->want);
    int *next = calloc((size_t)n_seq, sizeof *next), r = 0;
    if (!m->tok || !m->pos || !m->seq || !m->want || !next) {
        CHECK(0, "mixed batch of %d rows: out of memory", m->n);
        test_mixed_free(m);
        free(next);
        return false;
    }
    while (r < m->n)
        for (int i = 0; i < n_seq; i++)
            if (next[i] < len[i]) {
                m->tok[r] = tok[i][next[i]], m->pos[r] = next[i]++, m->seq[r] = i, m->want[r] = true;
                r++;
            }
    free(next);
    return true;
}

void test_mixed_free(test_mixed *m) {
    free(m->tok), free(m->pos), free(m->seq), free(m->want);
    memset(m, 0, sizeof *m);
}

int test_argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

bool test_same_bits(const float *a, const float *b, size_t n) {
    return a && b && !memcmp(a, b, n * sizeof(float));
}

bool test_golden_load(const char *name, int n_vocab, test_golden *g) {
    size_t size = 0;
    memset(g, 0, sizeof *g);
    g->tokens = read_ints(golden_path(name, "tokens"), &g->n_tokens);
    g->greedy = read_ints(golden_path(name, "greedy"), &g->n_greedy);
    g->logits = read_file(golden_path(name, "logits.f32"), &size);
    const bool ok = g->tokens && g->logits && size == g->n_tokens * (size_t)n_vocab * sizeof(float);
    CHECK(ok, "%s: golden files missing or of the wrong size", name);
    return ok;
}

void test_golden_free(test_golden *g) {
    free(g->tokens);
    free(g->logits);
    free(g->greedy);
    memset(g, 0, sizeof *g);
}

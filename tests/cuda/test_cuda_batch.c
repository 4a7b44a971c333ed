/*
 * test_cuda_batch.c — the engine's batch API on the CUDA backend: one KV pool for every
 * session, decode steps of many sessions in one forward call, prompts and decode steps
 * mixed, forks (a shared block copied on the device before it is written).
 *
 *   - decode: 6 sessions (different prompts, each evaluated alone) then 12 steps of all six
 *     together through cera_batch_eval: every step's logits equal, bit for bit, the same
 *     session's steps taken alone (16 sessions, whose Q4_0/Q8_0 projections run on the tensor
 *     cores, the same terms summed in another order: within the bound of the mixed case below,
 *     as a last-bit difference can move an int8 activation a step; measured 1.3e-2 for Q4_0,
 *     2.4e-2 for LFM2) (the multi-row decode matvec gives each row the one-row
 *     kernel's bits; attention splits as for one token); for stories260K (F32) and
 *     synth-llama Q4_0, synth-lfm2 Q8_0 (a conv state per sequence slot) and synth-gemma3 Q8_0
 *     (sliding-window layers: a KV group of their own, GEGLU, post-branch norms), and lfm2moe Q8_0
 *     (routed experts: each slot's own expert matvec, the same kernel at any batch size);
 *   - mixed: two prompts and three decode steps in one batch (the prefill path, where the
 *     attention of several sequences is not the single prompt's kernel) within 5e-3 of the
 *     row's max |logit| of the same evals alone for F32 weights, 3e-2 for Q4_0 and 1e-1 for
 *     LFM2 Q8_0, top tokens equal at all but 3 % of the rows (few()); for prompts of 10 and 45
 *     (58 rows: Q4_0/Q8_0 on the tensor cores with int8 activations, as the prompts alone and
 *     the decode steps), of 70 and 90 (cuBLAS with F16 activations, as the prompts alone; the
 *     decode rows then differ by test_cuda_golden's prefill-vs-decode spread) and of 2 and 2
 *     (7 rows: the several-row matvec). The two numerics are not mixed within one comparison:
 *     where they were (a 78-row batch against 45-token prompts alone), random weights' near
 *     ties flipped LFM2's top tokens and lfm2moe's routing (bench/RESULTS.md);
 *   - speculative decoding's verify batch: 5 tokens of one session with every row's logits beside
 *     two decode tokens (the several-row decode step), each row bit for bit the token alone;
 *   - fork at 45 (inside a block), both continued differently (30 rows): within the same
 *     bound of fresh sessions fed the whole 60 tokens, top tokens as above, the source
 *     unchanged by the fork's writes (gemma3: a block copied in each KV group; at 60 positions
 *     its sliding layers have dropped the blocks before their window of 16);
 *   - every block back in the pool at the end.
 * Exits 77 without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "cera.h"
#include "engine/engine_impl.h"
#include "testutil.h"

static cera_engine *open_cuda(const char *rel, int n_seq_max) {
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CUDA;
    ep.n_ctx = 256;
    ep.n_batch = 256;
    ep.n_seq_max = n_seq_max;
    cera_engine *e = NULL;
    cera_error err = {0};
    CHECK(cera_engine_open(shared_path(rel), &ep, &e, &err) == CERA_OK, "%s: %s", rel, err.message);
    return e;
}

static void make_tokens(cera_token *t, int n, unsigned seed, int nv) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = 1 + (int)((seed >> 8) % (unsigned)(nv - 1));
    }
}

/* max |a - b| over the row, relative to the row's max |b|. */
static double rel_diff(const float *a, const float *b, int nv) {
    double m = 0, d = 0;
    for (int i = 0; i < nv; i++) {
        m = fmax(m, fabs(b[i]));
        const double x = fabs((double)a[i] - b[i]);
        d = isnan(x) ? INFINITY : fmax(d, x);
    }
    return m > 0 ? d / m : d;
}

/* Every block of both groups back in the pool. */
static bool pool_idle(const cera_kv_pool *p) {
    for (int g = 0; g < CERA_KV_GROUPS; g++)
        if (p->group[g].n_free != p->group[g].n_blocks) return false;
    return true;
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* The rows whose top token may differ between two runs of one batch: 3 % of n, rounded up
 * (random weights give near ties, and an int8 activation level flips where inputs differ in
 * their last bits). */
static int few(int n) { return (n * 3 + 99) / 100; }

#define N_SEQ     16  /* at most */
#define MIXED_MAX 100 /* tokens of a mixed test's prompt, continuation included */
#define STEPS     12
#define PROMPT    20

static void test_decode(const char *rel, int n_seq, double bound) {
    cera_engine *e = open_cuda(rel, 2 * n_seq);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_token tok[N_SEQ][PROMPT + STEPS];
    cera_session *s[N_SEQ], *r[N_SEQ];
    cera_error err = {0};
    double worst = 0;
    for (int i = 0; i < n_seq; i++) {
        make_tokens(tok[i], PROMPT + STEPS, 11 + 7 * i, nv);
        CHECK(!cera_session_create(e, NULL, &s[i], &err) && !cera_session_create(e, NULL, &r[i], &err),
              "sessions: %s", err.message);
        const int len = 5 + i; /* different depths */
        CHECK(!cera_session_eval(s[i], tok[i], (size_t)len, false, &err) &&
                  !cera_session_eval(r[i], tok[i], (size_t)len, false, &err),
              "prompt: %s", err.message);
    }
    int bad = 0, n = 0;
    for (int k = 0; k < STEPS; k++) {
        cera_batch_item it[N_SEQ];
        for (int i = 0; i < n_seq; i++) it[i] = (cera_batch_item){s[i], &tok[i][5 + i + k], 1, false, 0};
        CHECK(!cera_batch_eval(e, it, n_seq, &err), "step %d: %s", k, err.message);
        for (int i = 0; i < n_seq; i++) {
            CHECK(!cera_session_eval(r[i], &tok[i][5 + i + k], 1, false, &err), "alone: %s", err.message);
            const float *a = cera_session_logits(s[i], -1), *b = cera_session_logits(r[i], -1);
            bad += !a || !b || memcmp(a, b, (size_t)nv * sizeof(float)) != 0;
            if (a && b) worst = fmax(worst, rel_diff(a, b, nv));
            n++;
        }
    }
    printf("%s: %d sessions decoding together, %d of %d steps differ from the sessions alone (worst %.2e)\n",
           rel, n_seq, bad, n, worst);
    if (bound == 0)
        CHECK(bad == 0, "%s: %d of %d batched decode steps differ from the same steps alone", rel, bad, n);
    else
        CHECK(worst <= bound, "%s: batched decode steps differ from the same steps alone by %.3g", rel,
              worst);
    for (int i = 0; i < n_seq; i++) cera_session_free(s[i]), cera_session_free(r[i]);
    CHECK(pool_idle(e->kv), "blocks left taken");
    cera_engine_close(e);
}

/* Speculative decoding's verify batch: a run of 5 tokens of one session with every row's
 * logits (4 of them drafts), beside two other sessions' decode tokens (7 rows: the several-row
 * decode step), against the same tokens evaluated one at a time: every row bit for bit. */
static void test_spec_run(const char *rel) {
    cera_engine *e = open_cuda(rel, 6);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_token t[3][16];
    cera_session *s[3], *r[3];
    cera_error err = {0};
    for (int i = 0; i < 3; i++) {
        make_tokens(t[i], 16, 5 + 3 * (unsigned)i, nv);
        CHECK(!cera_session_create(e, NULL, &s[i], &err) && !cera_session_create(e, NULL, &r[i], &err),
              "sessions: %s", err.message);
        CHECK(!cera_session_eval(s[i], t[i], 9, false, &err) &&
                  !cera_session_eval(r[i], t[i], 9, false, &err),
              "prompt: %s", err.message);
    }
    const cera_batch_item it[3] = {
        {s[0], t[0] + 9, 5, false, 4}, {s[1], t[1] + 9, 1, false, 0}, {s[2], t[2] + 9, 1, false, 0}};
    CHECK(!cera_batch_eval(e, it, 3, &err), "verify batch: %s", err.message);
    int bad = 0;
    for (int k = 0; k < 5; k++) {
        CHECK(!cera_session_eval(r[0], t[0] + 9 + k, 1, false, &err), "alone: %s", err.message);
        const float *a = cera_session_logits(s[0], k), *b = cera_session_logits(r[0], -1);
        bad += !a || !b || memcmp(a, b, (size_t)nv * sizeof(float)) != 0;
    }
    for (int i = 1; i < 3; i++) {
        CHECK(!cera_session_eval(r[i], t[i] + 9, 1, false, &err), "alone: %s", err.message);
        const float *a = cera_session_logits(s[i], -1), *b = cera_session_logits(r[i], -1);
        bad += !a || !b || memcmp(a, b, (size_t)nv * sizeof(float)) != 0;
    }
    printf("%s: a verify run of 5 tokens beside 2 decode tokens: %d of 7 rows differ from the tokens alone\n",
           rel, bad);
    CHECK(bad == 0, "%s: %d rows of the verify batch differ from the tokens alone", rel, bad);
    for (int i = 0; i < 3; i++) cera_session_free(s[i]), cera_session_free(r[i]);
    CHECK(pool_idle(e->kv), "blocks left taken");
    cera_engine_close(e);
}

/* Prompts of l0 and l1 tokens and three decode steps in one batch against the same evals
 * alone; with fork, session 1 is then forked at l1 and both continued by 15 tokens. */
static void test_mixed_and_fork(const char *rel, double bound, int l0, int l1, bool fork) {
    cera_engine *e = open_cuda(rel, 16);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_error err = {0};
    cera_token t[5][MIXED_MAX];
    for (int i = 0; i < 5; i++) make_tokens(t[i], MIXED_MAX, 500 + i, nv);
    cera_session *s[5], *r[5];
    for (int i = 0; i < 5; i++)
        CHECK(!cera_session_create(e, NULL, &s[i], &err) && !cera_session_create(e, NULL, &r[i], &err),
              "create");
    /* 0, 1: prompts of l0 and l1; 2..4: 10 tokens of history, then one step each */
    for (int i = 2; i < 5; i++)
        CHECK(!cera_session_eval(s[i], t[i], 10, false, &err) &&
                  !cera_session_eval(r[i], t[i], 10, false, &err),
              "history");
    const cera_batch_item it[5] = {{s[0], t[0], (size_t)l0, true, 0},
                                   {s[1], t[1], (size_t)l1, true, 0},
                                   {s[2], t[2] + 10, 1, false, 0},
                                   {s[3], t[3] + 10, 1, false, 0},
                                   {s[4], t[4] + 10, 1, false, 0}};
    CHECK(!cera_batch_eval(e, it, 5, &err), "mixed batch: %s", err.message);
    double worst = 0;
    int top = 0, rows = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(!cera_session_eval(r[i], it[i].tokens, it[i].n_tokens, it[i].all_logits, &err), "alone");
        const int nr = it[i].all_logits ? (int)it[i].n_tokens : 1;
        for (int k = 0; k < nr; k++) {
            const int at = it[i].all_logits ? k : -1;
            const float *a = cera_session_logits(s[i], at), *b = cera_session_logits(r[i], at);
            if (!a || !b) {
                worst = INFINITY;
                continue;
            }
            worst = fmax(worst, rel_diff(a, b, nv));
            top += argmax(a, nv) == argmax(b, nv);
            rows++;
        }
    }
    printf("%s: mixed batch of %d rows vs alone %.2e, top tokens %d/%d\n", rel, l0 + l1 + 3, worst, top,
           rows);
    CHECK(worst <= bound && top >= rows - few(rows),
          "%s: mixed batch differs from the evals alone by %.3g (top %d/%d)", rel, worst, top, rows);
    if (!fork) {
        for (int i = 0; i < 5; i++) cera_session_free(s[i]), cera_session_free(r[i]);
        CHECK(pool_idle(e->kv), "blocks left taken");
        cera_engine_close(e);
        return;
    }

    /* fork session 1 (l1 tokens: a block part full), continue both differently */
    cera_session *f = NULL;
    CHECK(!cera_session_fork(s[1], &f, &err), "fork: %s", err.message);
    cera_token a[MIXED_MAX], c[MIXED_MAX];
    memcpy(a, t[1], sizeof a);
    memcpy(c, t[1], (size_t)l1 * sizeof *c);
    make_tokens(c + l1, 15, 77, nv);
    const cera_batch_item go[2] = {{s[1], a + l1, 15, true, 0}, {f, c + l1, 15, true, 0}};
    CHECK(f && !cera_batch_eval(e, go, 2, &err), "fork batch: %s", err.message);
    cera_session *fa = NULL, *fc = NULL;
    CHECK(!cera_session_create(e, NULL, &fa, &err) && !cera_session_create(e, NULL, &fc, &err), "fresh");
    CHECK(!cera_session_eval(fa, a, (size_t)l1 + 15, true, &err) &&
              !cera_session_eval(fc, c, (size_t)l1 + 15, true, &err),
          "fresh evals");
    worst = 0;
    top = 0;
    for (int k = 0; k < 15 && f; k++) {
        const float *x[2] = {cera_session_logits(s[1], k), cera_session_logits(f, k)};
        const float *y[2] = {cera_session_logits(fa, l1 + k), cera_session_logits(fc, l1 + k)};
        for (int j = 0; j < 2; j++) {
            if (!x[j] || !y[j]) {
                worst = INFINITY;
                continue;
            }
            worst = fmax(worst, rel_diff(x[j], y[j], nv));
            top += argmax(x[j], nv) == argmax(y[j], nv);
        }
    }
    printf("%s: fork at %d and its source vs fresh sessions %.2e, top tokens %d/30\n", rel, l1, worst, top);
    CHECK(worst <= bound && top >= 30 - few(30), "%s: fork vs fresh %.3g (top %d/30)", rel, worst, top);
    for (int i = 0; i < 5; i++) cera_session_free(s[i]), cera_session_free(r[i]);
    cera_session_free(f);
    cera_session_free(fa);
    cera_session_free(fc);
    CHECK(pool_idle(e->kv), "blocks left taken");
    cera_engine_close(e);
}

int main(void) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    /* 6 sessions: the several-row matvec, bit for bit; 16: Q4_0/Q8_0 on the tensor cores
     * (cu_mma_q8: the same terms summed in another order) */
    test_decode("models/stories260K.gguf", 6, 0);
    test_decode("golden/synth-llama-q4_0.gguf", 6, 0);
    test_decode("golden/synth-lfm2-q8_0.gguf", 6, 0);
    test_decode("golden/synth-llama-q4_0.gguf", 16, 3e-2);
    test_decode("golden/synth-lfm2-q8_0.gguf", 16, 1e-1);
    test_decode("golden/synth-gemma3-q8_0.gguf", 6, 0);
    test_decode("golden/synth-gemma3-q8_0.gguf", 16, 5e-2);
    test_spec_run("models/stories260K.gguf");
    test_spec_run("golden/synth-llama-q4_0.gguf");
    test_spec_run("golden/synth-gemma3-q8_0.gguf");
    /* a batch of at most 64 rows (forward.c's PREFILL_MMA_MAX): Q4_0/Q8_0 on the tensor cores
     * with int8 activations, as the prompts (10, 45), the fork's continuation and the fresh
     * sessions' 60 tokens alone; a longer one (70 + 90 + 3) through cuBLAS, as its prompts alone */
    test_mixed_and_fork("models/stories260K.gguf", 5e-3, 10, 45, true);
    test_mixed_and_fork("golden/synth-llama-q4_0.gguf", 3e-2, 10, 45, true);
    test_mixed_and_fork("golden/synth-llama-q4_0.gguf", 3e-2, 70, 90, false);
    test_mixed_and_fork("golden/synth-llama-q4_0.gguf", 3e-2, 2, 2,
                        false); /* 7 rows: the several-row matvec */
    test_mixed_and_fork("golden/synth-lfm2-q8_0.gguf", 1e-1, 10, 45, true);
    test_mixed_and_fork("golden/synth-lfm2-q8_0.gguf", 1e-1, 70, 90, false);
    /* lfm2moe (the synth_models fixture's file): each slot's expert matvecs in a decode step,
     * grouped by expert in a prompt chunk */
    test_decode("synth/lfm2moe-q8_0.gguf", 6, 0);
    test_decode("synth/lfm2moe-q8_0.gguf", 16, 1e-1);
    test_mixed_and_fork("synth/lfm2moe-q8_0.gguf", 1e-1, 10, 45, true);
    test_mixed_and_fork("synth/lfm2moe-q8_0.gguf", 1e-1, 70, 90, false);
    test_mixed_and_fork("golden/synth-gemma3-q8_0.gguf", 5e-2, 10, 45, true);
    return test_finish();
}

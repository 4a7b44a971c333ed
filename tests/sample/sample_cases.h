/*
 * sample_cases.h — sampler chains and logit vectors shared by the tests of a chain run
 * outside sampler.c: tests/sample/test_sampler_device.c (the device chain's algorithm,
 * emulated on the host against cera_sampler_sample) and tests/cuda/test_cuda_sample.c
 * (the CUDA kernel against cera_sampler_sample).
 *
 * The logit kinds are the hard ones for an exact match: ties (at the top-k boundary and
 * over the whole vocabulary), -inf, NaN, -0.0 next to +0.0, one peak, flat and near-flat
 * rows. The chains cover greedy, llama.cpp's defaults, top-k 1 and 1024, penalties over a
 * history, logit biases with -inf and duplicates, and the filters switched off.
 */
#ifndef CERA_TESTS_SAMPLE_CASES_H
#define CERA_TESTS_SAMPLE_CASES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sampler.h"
#include "testutil.h"

enum { CASE_LOGIT_KINDS = 10 };

/* Fills l[n] with logits of kind (0 .. CASE_LOGIT_KINDS-1). */
static inline void case_logits(float *l, int n, int kind, test_rng *r) {
    for (int i = 0; i < n; i++) {
        const float u = test_rng_uniform(r);
        float v = 3.0f * test_rng_normal(r);
        switch (kind) {
        case 1: v = floorf(v); break;                                  /* ties everywhere */
        case 2: v = u < 0.3f ? -INFINITY : v; break;                   /* many -inf */
        case 3: v = u < 0.01f ? NAN : v; break;                        /* a few NaN */
        case 4: v = u < 0.999f ? (u < 0.5f ? -0.0f : 0.0f) : v; break; /* signed zeros */
        case 5: v = i == (int)(n / 3) ? 30.0f : v / 3.0f; break;       /* one peak */
        case 6: v = 1.0f; break;                                       /* flat */
        case 7: v = 1.0f + 1e-6f * v; break;                           /* near-flat */
        case 8: v = u < 0.9995f ? NAN : v; break;                      /* NaN inside the top k */
        case 9: v = u < 0.9995f ? -INFINITY : floorf(v); break;        /* -inf inside the top k */
        default: break;                                                /* plain */
        }
        l[i] = v;
    }
}

enum { CASE_CHAINS = 13 };

/* The chain of case c; bias receives up to 1024 biases for the cases that have them
 * (tokens < n_vocab). */
static inline cera_sampler_params case_chain(int c, int n_vocab, cera_logit_bias *bias, test_rng *r) {
    cera_sampler_params p = cera_sampler_default_params();
    p.seed = 1000u + (uint64_t)c;
    switch (c) {
    case 0: p.temp = 0.0f; break; /* greedy */
    case 1: break;                /* defaults: top-k 40, top-p 0.95, min-p 0.05, temp 0.8 */
    case 2: p.top_k = 1; break;
    case 3: p.top_k = 1024, p.top_p = 1.0f, p.min_p = 0.0f, p.temp = 1.0f; break;
    case 4: p.top_k = 1024, p.top_p = 0.9f, p.min_p = 0.01f, p.temp = 1.5f; break;
    case 5: /* penalties over a window */
        p.repeat_penalty = 1.3f, p.freq_penalty = 0.2f, p.presence_penalty = 0.4f, p.penalty_last_n = 64;
        break;
    case 6: /* greedy with penalties over the whole history */
        p.temp = 0.0f, p.repeat_penalty = 1.5f, p.freq_penalty = 0.1f, p.penalty_last_n = -1;
        break;
    case 7:
    case 8: /* biases: duplicates, -inf, random; 8 is greedy */
        p.n_logit_bias = 64;
        bias[0] = (cera_logit_bias){5, 3.0f};
        bias[1] = (cera_logit_bias){5, 2.5f};
        bias[2] = (cera_logit_bias){17, -INFINITY};
        bias[3] = (cera_logit_bias){17, 1.0f};
        for (int i = 4; i < 64; i++)
            bias[i] = (cera_logit_bias){(cera_token)(test_rng_next(r) % (uint64_t)n_vocab),
                                        20.0f * test_rng_uniform(r) - 10.0f};
        if (c == 8) p.temp = 0.0f;
        p.repeat_penalty = 1.1f, p.penalty_last_n = 16;
        break;
    case 9: p.top_p = 1.0f, p.min_p = 0.0f, p.temp = 0.7f; break; /* top-k and temperature only */
    case 10: p.top_k = 200, p.top_p = 0.5f, p.min_p = 0.2f, p.temp = 0.3f; break;
    case 11: /* the most biases the device takes, every 7th -inf */
        p.n_logit_bias = 1024;
        for (int i = 0; i < 1024; i++)
            bias[i] = (cera_logit_bias){(cera_token)(test_rng_next(r) % (uint64_t)n_vocab),
                                        i % 7 == 0 ? -INFINITY : 4.0f * test_rng_normal(r)};
        break;
    default: /* 12: top-k 1000 with a tight top-p and a high temperature */
        p.top_k = 1000, p.top_p = 0.99f, p.min_p = 0.0f, p.temp = 2.0f;
        break;
    }
    p.logit_bias = p.n_logit_bias ? bias : NULL;
    return p;
}

/* Chain c's two samplers: the reference and the one under test, with the same parameters
 * and the same 100-token history. False (after a failed CHECK) when either could not be
 * made; then neither is left to free. */
static inline bool case_sampler_pair(int c, int n_vocab, cera_logit_bias *bias, test_rng *r,
                                     cera_sampler **ref, cera_sampler **dut) {
    const cera_sampler_params p = case_chain(c, n_vocab, bias, r);
    *ref = *dut = NULL;
    CHECK(cera_sampler_new(&p, n_vocab, ref, NULL) == CERA_OK, "sampler_new (chain %d)", c);
    if (!*ref) return false;
    for (int i = 0; i < 100; i++) cera_sampler_accept(*ref, (cera_token)(test_rng_next(r) % 64));
    CHECK(cera_sampler_clone(*ref, dut, NULL) == CERA_OK, "clone");
    if (!*dut) {
        cera_sampler_free(*ref);
        *ref = NULL;
        return false;
    }
    return true;
}

/* ---- The device chain's algorithm on the host (src/backend/cuda/sample.cu) --------- */

static inline uint32_t emu_order_key(float l) {
    if (isnan(l)) return 0xffffffffu;
    if (l == 0.0f) l = 0.0f;
    uint32_t u;
    memcpy(&u, &l, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

static inline uint64_t emu_key(const float *l, int i) {
    return (uint64_t)emu_order_key(l[i]) << 32 | (uint32_t)i;
}

static int emu_cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What the kernel computes, step for step, with sequential loops in place of the block's
 * threads: bias, penalties (from smp's window), the draw, then the argmax or the radix
 * select, gather, sort and tail. scratch [n], keys [1024], val/prob [1024]. */
static inline cera_token emu_device_sample(cera_sampler *smp, const float *logits, int n, float *l) {
    const cera_sampler_params *p = cera_sampler_params_of(smp);
    memcpy(l, logits, sizeof(float) * (size_t)n);
    for (int b = 0; b < p->n_logit_bias; b++) l[p->logit_bias[b].token] += p->logit_bias[b].bias;
    const int32_t *pt, *pc;
    const size_t np = cera_sampler_penalty_window(smp, &pt, &pc);
    for (size_t j = 0; j < np; j++) {
        float v = l[pt[j]];
        v = v <= 0.0f ? v * p->repeat_penalty : v / p->repeat_penalty;
        l[pt[j]] = v - ((float)pc[j] * p->freq_penalty + 1.0f * p->presence_penalty);
    }
    const double u = cera_sampler_draw(smp);
    if (cera_sampler_params_greedy(p)) {
        int best = -1;
        float bv = -INFINITY;
        for (int i = 0; i < n; i++)
            if (l[i] > bv) bv = l[i], best = i;
        return best < 0 ? 0 : best;
    }
    const int k = p->top_k < n ? p->top_k : n;
    static uint32_t hist[256];
    uint64_t prefix = 0, mask = 0;
    uint32_t rem = (uint32_t)k;
    for (int shift = 56; shift >= 0; shift -= 8) {
        memset(hist, 0, sizeof hist);
        for (int i = 0; i < n; i++) {
            const uint64_t key = emu_key(l, i);
            if ((key & mask) == prefix) hist[(key >> shift) & 0xff]++;
        }
        uint32_t below = 0;
        int b = 0;
        while (b < 255 && below + hist[b] < rem) below += hist[b++];
        prefix |= (uint64_t)b << shift;
        mask |= (uint64_t)0xff << shift;
        const bool done = hist[b] == rem - below;
        rem -= below;
        if (done) break;
    }
    const uint64_t kth = prefix | ~mask;
    static uint64_t keys[1024];
    static float val[1024], prob[1024];
    int got = 0;
    for (int i = 0; i < n; i++)
        if (emu_key(l, i) <= kth && got < k) keys[got++] = emu_key(l, i);
    if (got != k) return -2; /* the select is wrong */
    qsort(keys, (size_t)k, sizeof keys[0], emu_cmp_u64);
    for (int i = 0; i < k; i++) val[i] = l[(uint32_t)keys[i]];
    int m = k;
    if (p->top_p < 1.0f) {
        float sum = 0.0f;
        for (int i = 0; i < m; i++) sum += (prob[i] = expf(val[i] - val[0]));
        float cum = 0.0f;
        for (int i = 0; i < m; i++) {
            cum += prob[i] / sum;
            if (cum >= p->top_p) {
                m = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        const float min_logit = val[0] + logf(p->min_p);
        int i = 1;
        while (i < m && !(val[i] < min_logit)) i++;
        m = i;
    }
    for (int i = 0; i < m; i++) val[i] /= p->temp;
    if (m == 1) return (cera_token)(uint32_t)keys[0];
    double sum = 0.0;
    for (int i = 0; i < m; i++) sum += (prob[i] = expf(val[i] - val[0]));
    const double target = sum * u;
    double run = 0.0;
    int chosen = m - 1;
    for (int i = 0; i < m; i++) {
        run += prob[i];
        if (run >= target) {
            chosen = i;
            break;
        }
    }
    return (cera_token)(uint32_t)keys[chosen];
}

#endif

/*
 * test_repack.c — weights repacked at load (src/backend/cpu/repack.h) on fresh random inputs.
 *
 *   - the per-row activation terms (cera_packed_prep): Q4_0 -8 * sum(q) and the scale, Q4_1 the
 *     scale and s as floats, Q8_0 -128 * the sum of each 4-element word and the scale, IQ4_NL
 *     -128 * sum(q) and the scale, Q4_K the scale and the 8 sub-block sums;
 *   - the scalar reference of each packed tile (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K) agrees with the
 * scalar tier's file-layout dot within 2^-20 of M = sum |w_i a_i| (same integers, other float order), which
 * also checks the interleaving itself;
 *   - every tier's packed tile gives exactly the reference's bits, at every column count up to
 *     its maximum (so a decode step equals the same token in a prompt, on every tier);
 *   - cera_matmul_ex over a repacked weight (as the CPU backend passes it) gives each token the
 *     same bits in a batch of 37 tokens as alone, and agrees with the file-layout path (Q4_1 and
 *     Q8_0: bit for bit, their packed order being the file-layout x86 tiles').
 * Run with a seed argument to reproduce a failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_impl.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/repack.h"
#include "backend/cpu/threadpool.h"
#include "kernel_inputs.h"
#include "testutil.h"

static uint64_t seed;

/* M = sum |w_i a_i| of one weight row against one activation row, dequantized. */
static double magnitude(cera_type wt, const void *w, cera_type at, const void *a, int64_t k) {
    float *dw = malloc((size_t)k * sizeof(float)), *da = malloc((size_t)k * sizeof(float));
    cera_type_get(wt)->to_float(w, dw, k);
    cera_type_get(at)->to_float(a, da, k);
    double m = 0;
    for (int64_t i = 0; i < k; i++) m += fabs((double)dw[i] * da[i]);
    free(dw);
    free(da);
    return m;
}

/* One packed group of 16 random rows of type t, k elements, against nc random activation rows. */
static void check_group(test_rng *rng, cera_type t, int64_t k, int nc) {
    const cera_cpu_type_ops *sc = cera_cpu_ops_tier("scalar", t);
    const char *tn = cera_type_get(t)->name;
    const int64_t nb = k / (t == CERA_TYPE_Q4_K ? QK_K : 32);
    const size_t ws = cera_row_size(t, k), as = cera_row_size(sc->act_type, k);
    const size_t xs = cera_packed_aux_size(t, k);
    uint8_t *w = malloc(ws * CERA_PACK_ROWS), *a = malloc(as * (size_t)nc), *aux = malloc(xs * (size_t)nc);
    void *g = aligned_alloc(64, cera_pack_group_bytes(t, k));
    float *x = malloc((size_t)k * sizeof(float));
    float *ref = malloc(sizeof(float) * CERA_PACK_ROWS * (size_t)nc);
    float *got = malloc(sizeof(float) * CERA_PACK_ROWS * (size_t)nc);
    for (int r = 0; r < CERA_PACK_ROWS; r++) ki_fill_weights(rng, t, k, w + (size_t)r * ws);
    for (int c = 0; c < nc; c++) {
        ki_fill_acts(rng, k, x);
        sc->quantize_act(x, a + (size_t)c * as, k);
        cera_packed_prep(t, a + (size_t)c * as, aux + (size_t)c * xs, k);
        for (int64_t b = 0; b < nb; b++) {
            if (t == CERA_TYPE_Q4_K) {
                const block_q8_k *y = (const block_q8_k *)(a + (size_t)c * as) + b;
                const cera_pack_aux_q4_k *ax = (const cera_pack_aux_q4_k *)(aux + (size_t)c * xs) + b;
                bool ok = ax->d == y->d;
                for (int j = 0; j < 8; j++) {
                    int sum = 0;
                    for (int e = 0; e < 32; e++) sum += y->qs[32 * j + e];
                    ok = ok && ax->bs[j] == sum;
                }
                CHECK(ok, "prep %s k=%lld block %lld (seed %llu)", tn, (long long)k, (long long)b,
                      (unsigned long long)seed);
                continue;
            }
            if (t == CERA_TYPE_Q4_1 || t == CERA_TYPE_Q5_1) {
                const block_q8_1 *y = (const block_q8_1 *)(a + (size_t)c * as) + b;
                const cera_pack_aux_q4_1 *ax = (const cera_pack_aux_q4_1 *)(aux + (size_t)c * xs) + b;
                CHECK(ax->d == cera_f16_to_f32(y->d) && ax->s == cera_f16_to_f32(y->s),
                      "prep %s k=%lld block %lld (seed %llu)", tn, (long long)k, (long long)b,
                      (unsigned long long)seed);
                continue;
            }
            const block_q8_0 *y = (const block_q8_0 *)(a + (size_t)c * as) + b;
            int word[8] = {0}, sum = 0;
            for (int j = 0; j < QK8_0; j++) {
                word[j / 4] += y->qs[j];
                sum += y->qs[j];
            }
            if (t == CERA_TYPE_Q4_0 || t == CERA_TYPE_IQ4_NL) {
                const int off = t == CERA_TYPE_Q4_0 ? 8 : 128;
                const cera_pack_aux_q4_0 *ax = (const cera_pack_aux_q4_0 *)(aux + (size_t)c * xs) + b;
                CHECK(ax->corr == -off * sum && ax->d == cera_f16_to_f32(y->d),
                      "prep %s k=%lld block %lld: %d %g vs %d %g (seed %llu)", tn, (long long)k, (long long)b,
                      ax->corr, ax->d, -off * sum, cera_f16_to_f32(y->d), (unsigned long long)seed);
            } else {
                const cera_pack_aux_q8_0 *ax = (const cera_pack_aux_q8_0 *)(aux + (size_t)c * xs) + b;
                const int off = t == CERA_TYPE_Q8_0 ? 128 : 16;
                bool ok = ax->d == cera_f16_to_f32(y->d);
                for (int l = 0; l < 8; l++) ok = ok && ax->corr[l] == -off * word[l];
                CHECK(ok, "prep %s k=%lld block %lld (seed %llu)", tn, (long long)k, (long long)b,
                      (unsigned long long)seed);
            }
        }
    }
    cera_repack_x16(t, w, ws, k, g);
    cera_packed_tile_ref(t)(k, ref, CERA_PACK_ROWS, g, a, as, aux, xs, nc);
    /* the reference against the file layout's reference dot */
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            float s = 0;
            sc->vec_dot(k, &s, w + (size_t)r * ws, a + (size_t)c * as);
            const double m = magnitude(t, w + (size_t)r * ws, sc->act_type, a + (size_t)c * as, k);
            const double v = ref[(size_t)c * CERA_PACK_ROWS + r];
            CHECK(fabs(v - s) <= 0x1p-20 * m + 1e-30,
                  "packed %s ref k=%lld (%d,%d): %.9g vs vec_dot %.9g (seed %llu)", tn, (long long)k, r, c, v,
                  s, (unsigned long long)seed);
        }
    /* every tier's tile, bit for bit, at every column count */
    int ntiers;
    const char *const *tiers = cera_cpu_tier_list(&ntiers);
    for (int ti = 0; ti < ntiers; ti++) {
        const cera_cpu_type_ops *ops = cera_cpu_ops_tier(tiers[ti], t);
        if (!ops || !ops->packed_tile) continue;
        for (int c0 = 0; c0 < nc; c0 += ops->packed_cols) {
            for (int w_nc = 1; w_nc <= ops->packed_cols && c0 + w_nc <= nc; w_nc++) {
                memset(got, 0xff, sizeof(float) * CERA_PACK_ROWS * (size_t)nc);
                ops->packed_tile(k, got + (size_t)c0 * CERA_PACK_ROWS, CERA_PACK_ROWS, g, a + (size_t)c0 * as,
                                 as, aux + (size_t)c0 * xs, xs, w_nc);
                for (int c = c0; c < c0 + w_nc; c++)
                    for (int r = 0; r < CERA_PACK_ROWS; r++) {
                        const float e = ref[(size_t)c * CERA_PACK_ROWS + r],
                                    v = got[(size_t)c * CERA_PACK_ROWS + r];
                        CHECK(memcmp(&e, &v, sizeof e) == 0,
                              "%s packed %s tile k=%lld nc=%d (%d,%d): %.9g vs reference %.9g (seed %llu)",
                              tiers[ti], tn, (long long)k, w_nc, r, c, v, e, (unsigned long long)seed);
                    }
            }
        }
    }
    free(w);
    free(a);
    free(aux);
    free(g);
    free(x);
    free(ref);
    free(got);
}

/* cera_matmul on a repacked weight: batch vs single tokens, and vs the file layout. */
static void check_matmul(test_rng *rng, cera_type type, int64_t n, int64_t k, int n_tokens) {
    cera_error err;
    cera_pool *pool = NULL;
    CHECK(cera_pool_new(2, &pool, &err) == CERA_OK, "pool: %s", err.message);
    if (!pool) return;
    const size_t ws = cera_row_size(type, k);
    uint8_t *data = malloc(ws * (size_t)n);
    for (int64_t r = 0; r < n; r++) ki_fill_weights(rng, type, k, data + (size_t)r * ws);
    cera_weight wt = {.type = type, .k = k, .n = n, .data = data};
    float *x = malloc(sizeof(float) * (size_t)k * n_tokens);
    for (int t = 0; t < n_tokens; t++) ki_fill_acts(rng, k, x + (size_t)t * k);
    void *act = malloc(cera_matmul_scratch_size(type, k, n_tokens));
    float *plain = malloc(sizeof(float) * (size_t)n * n_tokens),
          *batch = malloc(sizeof(float) * (size_t)n * n_tokens);
    float *one = malloc(sizeof(float) * (size_t)n);
    const cera_cpu_type_ops *ops = cera_cpu_ops(type);
    cera_matmul(pool, &wt, ops, x, n_tokens, plain, (size_t)n, act);
    if (!cera_packed_wanted(&wt)) {
        printf("tier %s: %s not repacked, cera_matmul check skipped\n", cera_cpu_tier_name(),
               cera_type_get(type)->name);
    } else {
        cera_packed_weight *p = NULL;
        CHECK(cera_packed_new(&wt, pool, &p, &err) == CERA_OK, "repack: %s", err.message);
        cera_matmul_ex(pool, &wt, p, ops, x, n_tokens, batch, (size_t)n, act, NULL);
        for (int t = 0; t < n_tokens; t++) {
            cera_matmul_ex(pool, &wt, p, ops, x + (size_t)t * k, 1, one, (size_t)n, act, NULL);
            CHECK(memcmp(one, batch + (size_t)t * n, sizeof(float) * (size_t)n) == 0,
                  "matmul %s %lldx%lld: token %d alone differs from the batch of %d (seed %llu)",
                  cera_type_get(type)->name, (long long)n, (long long)k, t, n_tokens,
                  (unsigned long long)seed);
        }
        /* the same integers, other float order: within a few ulps of the largest output */
        double worst = 0, top = 0;
        for (size_t i = 0; i < (size_t)n * n_tokens; i++) {
            const double d = fabs((double)batch[i] - plain[i]);
            if (!(d <= worst)) worst = isnan(d) ? INFINITY : d; // a NaN fails the check
            if (fabs(plain[i]) > top) top = fabs(plain[i]);
        }
        CHECK(top > 0 && worst <= 1e-5 * top,
              "matmul %s %lldx%lld: repacked vs file layout differ by %.3g (largest output %.3g, seed %llu)",
              cera_type_get(type)->name, (long long)n, (long long)k, worst, top, (unsigned long long)seed);
        /* Q4_1, Q5_0, Q5_1 and Q8_0 keep the file-layout x86 tiles' order (llama.cpp's): the same bits */
        if (type != CERA_TYPE_Q4_0 && type != CERA_TYPE_IQ4_NL && type != CERA_TYPE_Q4_K)
            CHECK(memcmp(batch, plain, sizeof(float) * (size_t)n * n_tokens) == 0,
                  "matmul %s %lldx%lld: repacked not bit-identical to the file layout (seed %llu)",
                  cera_type_get(type)->name, (long long)n, (long long)k, (unsigned long long)seed);
        cera_packed_free(p);
    }
    cera_pool_free(pool);
    free(data);
    free(x);
    free(act);
    free(plain);
    free(batch);
    free(one);
}

int main(int argc, char **argv) {
    seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 0x9ac4ULL;
    test_rng rng = {seed};
    static const int64_t block_counts[] = {1, 2, 3, 5, 8, 13, 64};
    static const int col_counts[] = {1, 3, 8, 11};
    static const cera_type types[] = {CERA_TYPE_Q4_0, CERA_TYPE_Q4_1,   CERA_TYPE_Q5_0, CERA_TYPE_Q5_1,
                                      CERA_TYPE_Q8_0, CERA_TYPE_IQ4_NL, CERA_TYPE_Q4_K};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const bool k_quant = types[ti] == CERA_TYPE_Q4_K; /* 256-element super-blocks */
        const int64_t blk = k_quant ? QK_K : 32;
        for (size_t i = 0; i < sizeof block_counts / sizeof block_counts[0]; i++) {
            if (k_quant && block_counts[i] > 13) continue; /* k = 64 * 256 adds nothing but time */
            for (size_t c = 0; c < sizeof col_counts / sizeof col_counts[0]; c++)
                check_group(&rng, types[ti], block_counts[i] * blk, col_counts[c]);
        }
        check_matmul(&rng, types[ti], 96, k_quant ? 3 * QK_K : 256, 37);
        check_matmul(&rng, types[ti], 48, k_quant ? QK_K : 32 * 7, 5);
    }
    return test_finish();
}

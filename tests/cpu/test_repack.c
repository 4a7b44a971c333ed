/*
 * test_repack.c — weights repacked at load (src/backend/cpu/repack.h) on fresh random inputs.
 *
 *   - the per-row activation terms (cera_packed_prep) are -8 * sum(q) and the scale;
 *   - the scalar reference of the packed Q4_0 tile agrees with the file-layout reference dot
 *     (cera_vec_dot_q4_0_q8_0_ref) within 2^-20 of M = sum |w_i a_i| (same integers, other
 *     float order), which also checks the interleaving itself;
 *   - every tier's packed tile gives exactly the reference's bits, at every column count up to
 *     its maximum (so a decode step equals the same token in a prompt, on every tier);
 *   - cera_matmul over a repacked weight (dev set, as the CPU backend does) gives each token the
 *     same bits in a batch of 37 tokens as alone, and agrees with the file-layout path.
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

/* M = sum |w_i a_i| of one Q4_0 row against one Q8_0 row, dequantized. */
static double magnitude(const block_q4_0 *x, const block_q8_0 *y, int64_t nb) {
    double m = 0;
    for (int64_t b = 0; b < nb; b++) {
        const double d = fabs((double)cera_f16_to_f32(x[b].d) * cera_f16_to_f32(y[b].d));
        for (int j = 0; j < 16; j++)
            m += d * (abs((x[b].qs[j] & 0xF) - 8) * abs(y[b].qs[j]) +
                      abs((x[b].qs[j] >> 4) - 8) * abs(y[b].qs[j + 16]));
    }
    return m;
}

/* One packed group of 16 random rows of k elements against nc random activation rows. */
static void check_group(test_rng *rng, int64_t k, int nc) {
    const int64_t nb = k / QK4_0;
    const size_t ws = cera_row_size(CERA_TYPE_Q4_0, k), as = cera_row_size(CERA_TYPE_Q8_0, k);
    const size_t xs = cera_packed_aux_size(CERA_TYPE_Q4_0, k);
    uint8_t *w = malloc(ws * CERA_PACK_ROWS), *a = malloc(as * (size_t)nc), *aux = malloc(xs * (size_t)nc);
    void *g = aligned_alloc(64, cera_pack_q4_0_group_bytes(k));
    float *x = malloc((size_t)k * sizeof(float));
    float *ref = malloc(sizeof(float) * CERA_PACK_ROWS * (size_t)nc);
    float *got = malloc(sizeof(float) * CERA_PACK_ROWS * (size_t)nc);
    for (int r = 0; r < CERA_PACK_ROWS; r++) ki_fill_weights(rng, CERA_TYPE_Q4_0, k, w + (size_t)r * ws);
    for (int c = 0; c < nc; c++) {
        ki_fill_acts(rng, k, x);
        cera_quantize_act_q8_0(x, a + (size_t)c * as, k);
        cera_packed_prep(CERA_TYPE_Q4_0, a + (size_t)c * as, aux + (size_t)c * xs, k);
        const block_q8_0 *y = (const block_q8_0 *)(a + (size_t)c * as);
        const cera_q8_0_aux *ax = (const cera_q8_0_aux *)(aux + (size_t)c * xs);
        for (int64_t b = 0; b < nb; b++) {
            int sum = 0;
            for (int j = 0; j < QK8_0; j++) sum += y[b].qs[j];
            CHECK(ax[b].corr == -8 * sum && ax[b].d == cera_f16_to_f32(y[b].d),
                  "prep k=%lld block %lld: %d %g vs %d %g (seed %llu)", (long long)k, (long long)b,
                  ax[b].corr, ax[b].d, -8 * sum, cera_f16_to_f32(y[b].d), (unsigned long long)seed);
        }
    }
    cera_repack_q4_0x16(w, ws, k, g);
    cera_packed_tile_q4_0_ref(k, ref, CERA_PACK_ROWS, g, a, as, aux, xs, nc);
    /* the reference against the file layout's reference dot */
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            float s = 0;
            cera_vec_dot_q4_0_q8_0_ref(k, &s, w + (size_t)r * ws, a + (size_t)c * as);
            const double m = magnitude((const block_q4_0 *)(w + (size_t)r * ws),
                                       (const block_q8_0 *)(a + (size_t)c * as), nb);
            const double v = ref[(size_t)c * CERA_PACK_ROWS + r];
            CHECK(fabs(v - s) <= 0x1p-20 * m + 1e-30,
                  "packed ref k=%lld (%d,%d): %.9g vs vec_dot %.9g (seed %llu)", (long long)k, r, c, v, s,
                  (unsigned long long)seed);
        }
    /* every tier's tile, bit for bit, at every column count */
    int ntiers;
    const char *const *tiers = cera_cpu_tier_list(&ntiers);
    for (int t = 0; t < ntiers; t++) {
        const cera_cpu_type_ops *ops = cera_cpu_ops_tier(tiers[t], CERA_TYPE_Q4_0);
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
                              "%s packed tile k=%lld nc=%d (%d,%d): %.9g vs reference %.9g (seed %llu)",
                              tiers[t], (long long)k, w_nc, r, c, v, e, (unsigned long long)seed);
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
static void check_matmul(test_rng *rng, int64_t n, int64_t k, int n_tokens) {
    cera_error err;
    cera_pool *pool = NULL;
    CHECK(cera_pool_new(2, &pool, &err) == CERA_OK, "pool: %s", err.message);
    if (!pool) return;
    const size_t ws = cera_row_size(CERA_TYPE_Q4_0, k);
    uint8_t *data = malloc(ws * (size_t)n);
    for (int64_t r = 0; r < n; r++) ki_fill_weights(rng, CERA_TYPE_Q4_0, k, data + (size_t)r * ws);
    cera_weight wt = {.type = CERA_TYPE_Q4_0, .k = k, .n = n, .data = data};
    float *x = malloc(sizeof(float) * (size_t)k * n_tokens);
    for (int t = 0; t < n_tokens; t++) ki_fill_acts(rng, k, x + (size_t)t * k);
    void *act = malloc(cera_matmul_scratch_size(CERA_TYPE_Q4_0, k, n_tokens));
    float *plain = malloc(sizeof(float) * (size_t)n * n_tokens),
          *batch = malloc(sizeof(float) * (size_t)n * n_tokens);
    float *one = malloc(sizeof(float) * (size_t)n);
    const cera_cpu_type_ops *ops = cera_cpu_ops(CERA_TYPE_Q4_0);
    cera_matmul(pool, &wt, ops, x, n_tokens, plain, (size_t)n, act);
    if (!cera_packed_wanted(&wt)) {
        printf("tier %s: Q4_0 not repacked, cera_matmul check skipped\n", cera_cpu_tier_name());
    } else {
        cera_packed_weight *p = NULL;
        CHECK(cera_packed_new(&wt, &p, &err) == CERA_OK, "repack: %s", err.message);
        wt.dev = p;
        cera_matmul(pool, &wt, ops, x, n_tokens, batch, (size_t)n, act);
        for (int t = 0; t < n_tokens; t++) {
            cera_matmul(pool, &wt, ops, x + (size_t)t * k, 1, one, (size_t)n, act);
            CHECK(memcmp(one, batch + (size_t)t * n, sizeof(float) * (size_t)n) == 0,
                  "matmul %lldx%lld: token %d alone differs from the batch of %d (seed %llu)", (long long)n,
                  (long long)k, t, n_tokens, (unsigned long long)seed);
        }
        /* the same integers, other float order: within a few ulps of the largest output */
        double worst = 0, top = 0;
        for (size_t i = 0; i < (size_t)n * n_tokens; i++) {
            const double d = fabs((double)batch[i] - plain[i]);
            if (d > worst) worst = d;
            if (fabs(plain[i]) > top) top = fabs(plain[i]);
        }
        CHECK(top > 0 && worst <= 1e-5 * top,
              "matmul %lldx%lld: repacked vs file layout differ by %.3g (largest output %.3g, seed %llu)",
              (long long)n, (long long)k, worst, top, (unsigned long long)seed);
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
    for (size_t i = 0; i < sizeof block_counts / sizeof block_counts[0]; i++)
        for (size_t c = 0; c < sizeof col_counts / sizeof col_counts[0]; c++)
            check_group(&rng, block_counts[i] * QK4_0, col_counts[c]);
    check_matmul(&rng, 96, 256, 37);
    check_matmul(&rng, 48, 32 * 7, 5);
    return test_finish();
}

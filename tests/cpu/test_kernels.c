/*
 * test_kernels.c — every CPU kernel tier against the scalar reference, on fresh random inputs.
 *
 * For each weight type, each tier this CPU runs, and several row lengths:
 *   - the tier's activation quantizer gives the same bytes as the scalar one (byte-exact:
 *     llama.cpp's activations are what the goldens saw, and SIMD must not change them);
 *   - the tier's vec_dot agrees with the scalar vec_dot within a bound relative to
 *     M = sum |w_i * a_i| (dequantized): integer parts are exact in every tier, only the
 *     order of float additions differs, so the error is a few float ulps of M;
 *   - a gemm_tile, where the tier has one, agrees with its vec_dot the same way, at every
 *     tile size up to its maximum, and gives each (row, column) the same bits at every tile
 *     size (a token rounds the same in a prompt and in a decode step);
 * and the scalar reference itself agrees with a double-precision dot product of the
 * dequantized rows (through the tensor types' reference dequantizers) within the same kind
 * of bound. Run with a seed argument to reproduce a failure.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "kernel_inputs.h"
#include "testutil.h"

static const cera_type weight_types[] = {
    CERA_TYPE_F32,  CERA_TYPE_F16,  CERA_TYPE_BF16, CERA_TYPE_Q4_0,   CERA_TYPE_Q4_1,
    CERA_TYPE_Q5_0, CERA_TYPE_Q5_1, CERA_TYPE_Q8_0, CERA_TYPE_Q2_K,   CERA_TYPE_Q3_K,
    CERA_TYPE_Q4_K, CERA_TYPE_Q5_K, CERA_TYPE_Q6_K, CERA_TYPE_IQ4_NL, CERA_TYPE_IQ4_XS,
};

/* Relative bound (to M) between a tier and the scalar reference. The float sums run over
 * n/32 or n/256 block terms (n terms for the float types) in a different order; 2^-20 of M
 * leaves room for ~4k terms of 2^-24 rounding each. BF16 tiers with vdpbf16ps round inside
 * the instruction's pairwise sums, and F16/F32 sum every product, so they get 2^-18. */
static double tier_tolerance(cera_type t) {
    switch (t) {
    case CERA_TYPE_F32:
    case CERA_TYPE_F16:
    case CERA_TYPE_BF16: return 0x1p-18;
    default: return 0x1p-20;
    }
}

/* Lengths in blocks: one block, odd counts (tails), and model-sized rows. */
static const int64_t block_counts[] = {1, 2, 3, 5, 8, 13, 16, 24, 64};
static const int64_t float_lengths[] = {1, 3, 8, 15, 16, 17, 31, 32, 33, 64, 100, 255, 256, 257, 1000, 2048};

typedef struct row_pair {
    cera_type t;
    int64_t n;
    void *w;      /* [n] weights of type t */
    float *x;     /* [n] activations */
    void *a_ref;  /* x quantized by the scalar tier */
    void *a_tier; /* x quantized by the tier under test */
    double mag;   /* M = sum |w_i a_i|, dequantized */
    double exact; /* sum w_i a_i in double, dequantized; NAN when no dequantizer */
} row_pair;

static double *deq(cera_type t, const void *src, int64_t n) {
    const cera_type_traits *tt = cera_type_get(t);
    if (!tt || !tt->to_float) return NULL;
    float *f = malloc((size_t)n * sizeof *f);
    double *d = malloc((size_t)n * sizeof *d);
    tt->to_float(src, f, n);
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

/* M and the exact dot from the dequantized rows; when a dequantizer is missing, M falls back
 * to n * max|w| * max|a| over the float activations (a looser bound) and exact to NAN. */
static void magnitudes(row_pair *p, cera_type act) {
    double *dw = deq(p->t, p->w, p->n), *da = deq(act, p->a_ref, p->n);
    if (dw && da) {
        double m = 0, e = 0;
        for (int64_t i = 0; i < p->n; i++) {
            m += fabs(dw[i] * da[i]);
            e += dw[i] * da[i];
        }
        p->mag = m;
        p->exact = e;
    } else {
        static int warned;
        if (!warned++) fprintf(stderr, "note: a reference dequantizer is missing; using loose bounds\n");
        double ax = 0;
        for (int64_t i = 0; i < p->n; i++) ax = fmax(ax, fabs(p->x[i]));
        p->mag = (double)p->n * ax * 2.0;
        p->exact = NAN;
    }
    free(dw);
    free(da);
}

static bool near(double got, double want, double tol) { return fabs(got - want) <= tol; }

static void check_scalar_exact(const cera_cpu_type_ops *ref, row_pair *p, uint64_t seed) {
    float s;
    ref->vec_dot(p->n, &s, p->w, p->a_ref);
    if (isnan(p->exact)) return;
    /* Float sums of per-block terms (each itself rounded a few times). With q8_1 activations
     * the weights' minimum m multiplies the block sum s = d * sum(q), which q8_1 stores as
     * f16 and computes from the unrounded d (as ggml does), while the dequantized activations
     * use the f16 d: two f16 roundings, up to 2^-10 |m s| per block. */
    double tol = 0x1p-19 * p->mag + 1e-30;
    if (ref->act_type == CERA_TYPE_Q8_1)
        for (int64_t b = 0; b < p->n / QK8_1; b++) {
            const block_q4_1 *wb =
                (const block_q4_1 *)((const uint8_t *)p->w + b * cera_type_get(p->t)->type_size);
            const block_q8_1 *ab = (const block_q8_1 *)p->a_ref + b;
            tol += 0x1.1p-10 * fabs(cera_f16_to_f32(wb->m) * cera_f16_to_f32(ab->s));
        }
    CHECK(near(s, p->exact, tol), "scalar %s n=%lld: %.9g vs exact %.9g (M %.3g, seed %llu)",
          cera_type_get(p->t)->name, (long long)p->n, s, p->exact, p->mag, (unsigned long long)seed);
}

static void check_tier(const char *tier, const cera_cpu_type_ops *ref, const cera_cpu_type_ops *ops,
                       row_pair *p, uint64_t seed) {
    const char *tn = cera_type_get(p->t)->name;
    const size_t asz = cera_row_size(ops->act_type, p->n);
    ops->quantize_act(p->x, p->a_tier, p->n);
    CHECK(memcmp(p->a_tier, p->a_ref, asz) == 0,
          "%s %s n=%lld: activation bytes differ from scalar (seed %llu)", tier, tn, (long long)p->n,
          (unsigned long long)seed);
    float s_ref, s;
    ref->vec_dot(p->n, &s_ref, p->w, p->a_ref);
    ops->vec_dot(p->n, &s, p->w, p->a_ref);
    const double tol = tier_tolerance(p->t) * p->mag + 1e-30;
    CHECK(near(s, s_ref, tol), "%s %s n=%lld: vec_dot %.9g vs scalar %.9g (diff %.3g, tol %.3g, seed %llu)",
          tier, tn, (long long)p->n, s, s_ref, fabs(s - s_ref), tol, (unsigned long long)seed);
}

/* A tile over nr weight rows and nc activation rows vs the tier's vec_dot of each pair. */
static void check_tile(const char *tier, const cera_cpu_type_ops *ops, cera_type t, int64_t n, test_rng *r,
                       uint64_t seed) {
    if (!ops->gemm_tile) return;
    const int R = ops->tile_rows, C = ops->tile_cols;
    const size_t wsz = cera_row_size(t, n), asz = cera_row_size(ops->act_type, n);
    uint8_t *w = malloc(wsz * (size_t)R), *a = malloc(asz * (size_t)C);
    float *x = malloc((size_t)n * sizeof *x);
    for (int i = 0; i < R; i++) ki_fill_weights(r, t, n, w + i * wsz);
    for (int j = 0; j < C; j++) {
        ki_fill_acts(r, n, x);
        ops->quantize_act(x, a + j * asz, n);
    }
    float *s = malloc(sizeof(float) * (size_t)(R * C + 1) * 2);
    float *full = malloc(sizeof(float) * (size_t)(R * C));
    ops->gemm_tile(n, full, (size_t)R, w, wsz, a, asz, R, C);
    for (int nr = 1; nr <= R; nr++)
        for (int nc = 1; nc <= C; nc++) {
            const size_t stride = (size_t)nr + 1; /* a stride unequal to nr catches index mix-ups */
            for (int k = 0; k < (R * C + 1) * 2; k++) s[k] = NAN;
            ops->gemm_tile(n, s, stride, w, wsz, a, asz, nr, nc);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < nc; j++) {
                    float want;
                    ops->vec_dot(n, &want, w + i * wsz, a + j * asz);
                    const float got = s[(size_t)j * stride + i];
                    /* Same integer sums; the float order may differ: bound by |want| and a
                     * generous per-term slack (tile tests have no dequantized M). */
                    const double tol = 0x1p-18 * (fabs(want) + (double)n * 1e-3) + 1e-30;
                    CHECK(near(got, want, tol),
                          "%s %s tile %dx%d (%d,%d) n=%lld: %.9g vs vec_dot %.9g (seed %llu)", tier,
                          cera_type_get(t)->name, nr, nc, i, j, (long long)n, got, want,
                          (unsigned long long)seed);
                    /* The forward pass relies on this: a token's result has the same bits in a
                     * full tile (prompt) and in a narrower one (decode step, matrix edge). */
                    CHECK(
                        got == full[(size_t)j * R + i],
                        "%s %s tile %dx%d (%d,%d) n=%lld: %.9g differs from the full tile's %.9g (seed %llu)",
                        tier, cera_type_get(t)->name, nr, nc, i, j, (long long)n, got,
                        full[(size_t)j * R + i], (unsigned long long)seed);
                }
        }
    free(full);
    free(s);
    free(x);
    free(a);
    free(w);
}

int main(int argc, char **argv) {
    const uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 0x5eedULL;
    test_rng rng = {seed};
    int ntiers;
    const char *const *tiers = cera_cpu_tier_list(&ntiers);
    printf("selected tier: %s; available:", cera_cpu_tier_name());
    for (int k = 0; k < ntiers; k++)
        if (cera_cpu_tier_available(tiers[k])) printf(" %s", tiers[k]);
    printf("\n");
    CHECK(cera_cpu_tier_available("scalar"), "the scalar tier is always available");

    for (size_t ti = 0; ti < sizeof weight_types / sizeof weight_types[0]; ti++) {
        const cera_type t = weight_types[ti];
        const cera_cpu_type_ops *ref = cera_cpu_ops_tier("scalar", t);
        CHECK(ref && ref->vec_dot && ref->quantize_act, "scalar ops for %s", cera_type_get(t)->name);
        if (!ref) continue;
        CHECK(cera_cpu_ops(t) != NULL, "selected-tier ops for %s", cera_type_get(t)->name);
        const int bs = cera_type_get(t)->block_size;
        const bool is_float = bs == 1;
        const size_t nlen = is_float ? sizeof float_lengths / sizeof float_lengths[0]
                                     : sizeof block_counts / sizeof block_counts[0];
        for (size_t li = 0; li < nlen; li++) {
            row_pair p = {.t = t, .n = is_float ? float_lengths[li] : block_counts[li] * bs};
            const size_t asz = cera_row_size(ref->act_type, p.n);
            p.w = malloc(cera_row_size(t, p.n));
            p.x = malloc((size_t)p.n * sizeof(float));
            p.a_ref = malloc(asz);
            p.a_tier = malloc(asz);
            ki_fill_weights(&rng, t, p.n, p.w);
            ki_fill_acts(&rng, p.n, p.x);
            ref->quantize_act(p.x, p.a_ref, p.n);
            magnitudes(&p, ref->act_type);
            check_scalar_exact(ref, &p, seed);
            for (int k = 0; k < ntiers; k++) {
                const cera_cpu_type_ops *ops = cera_cpu_ops_tier(tiers[k], t);
                if (!ops || !strcmp(tiers[k], "scalar")) continue;
                CHECK(ops->act_type == ref->act_type, "%s %s: activation type as scalar's", tiers[k],
                      cera_type_get(t)->name);
                check_tier(tiers[k], ref, ops, &p, seed);
            }
            free(p.w);
            free(p.x);
            free(p.a_ref);
            free(p.a_tier);
        }
        for (int k = 0; k < ntiers; k++) {
            const cera_cpu_type_ops *ops = cera_cpu_ops_tier(tiers[k], t);
            if (ops) check_tile(tiers[k], ops, t, is_float ? 96 : 4 * bs, &rng, seed);
            if (ops) check_tile(tiers[k], ops, t, is_float ? 1031 : 16 * bs, &rng, seed);
        }
    }
    return test_finish();
}

/*
 * test_roundtrip.c — every type's reference quantize then dequantize on fresh random
 * rows: the error stays within what the format can represent, the degenerate inputs
 * (all zeros, constant blocks, a lone outlier) decode sensibly, and the derived fields
 * the dot-product kernels rely on (q8_1's s, q8_k's bsums) hold.
 *
 * Error is the RMSE relative to the data's RMS, on normally distributed rows (as LLM
 * weights roughly are), within type_bounds.h's bound for the type.
 * The seed is random per run and printed; CERA_TEST_SEED=<n> repeats a run.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/blocks.h"
#include "tensor/quant.h"
#include "tensor/types.h"
#include "testutil.h"
#include "type_bounds.h"

#define N_ROWS 8
#define N_COLS 2048 /* a multiple of every block size */

static double rel_rmse(const float *x, const float *y, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        s += (double)x[i] * x[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static void roundtrip(const cera_type_traits *tt, const float *x, float *y, void *q, int64_t n) {
    tt->from_float_ref(x, q, n);
    tt->to_float(q, y, n);
}

static void test_error_bounds(test_rng *rng, uint64_t seed) {
    const size_t n = (size_t)N_ROWS * N_COLS;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    void *q = malloc(n * 4);
    for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
        const cera_type_traits *tt = cera_type_get(bounds[k].type);
        CHECK(tt && tt->to_float && tt->from_float_ref, "type %d has reference conversions",
              (int)bounds[k].type);
        if (!tt || !tt->to_float || !tt->from_float_ref) continue;
        const size_t rs = cera_row_size(bounds[k].type, N_COLS);
        CHECK(rs == (size_t)N_COLS / (size_t)tt->block_size * tt->type_size, "%s row size", tt->name);
        /* Rows from sigma 0.01 to 30: the quantizers are scale-invariant up to f16 rounding of the
         * scales (much smaller rows would push q6_k/iq4_xs super-block scales into f16 subnormals). */
        for (int r = 0; r < N_ROWS; r++) {
            const float scale = (float)pow(10.0, r / 2.0 - 2);
            for (int i = 0; i < N_COLS; i++) x[(size_t)r * N_COLS + i] = scale * test_rng_normal(rng);
        }
        double worst = 0;
        for (int r = 0; r < N_ROWS; r++) {
            const float *xr = x + (size_t)r * N_COLS;
            float *yr = y + (size_t)r * N_COLS;
            roundtrip(tt, xr, yr, q, N_COLS);
            const double e = rel_rmse(xr, yr, N_COLS);
            if (e > worst) worst = e;
        }
        CHECK(worst <= bounds[k].bound, "%s: relative RMSE %.5f above %.5f (%s), seed %llu", tt->name, worst,
              bounds[k].bound, bounds[k].why, (unsigned long long)seed);
        printf("%-7s worst relative RMSE %.5f (bound %.5f)\n", tt->name, worst, bounds[k].bound);
    }
    free(x);
    free(y);
    free(q);
}

/* All zeros must come back as zeros (every scale 0, no NaN from 0/0); a constant block
 * must come back close; a lone outlier must not destroy the block's other elements more
 * than the format's range allows. */
static void test_degenerate(void) {
    enum { N = 256 };
    float x[N], y[N];
    uint8_t q[N * 4];
    for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
        const cera_type_traits *tt = cera_type_get(bounds[k].type);
        memset(x, 0, sizeof x);
        roundtrip(tt, x, y, q, N);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += y[i] != 0.0f;
        CHECK(bad == 0, "%s: %d of %d zeros decode as non-zero", tt->name, bad, N);

        for (int i = 0; i < N; i++) x[i] = 0.75f;
        roundtrip(tt, x, y, q, N);
        double worst = 0;
        for (int i = 0; i < N; i++) {
            const double e = fabs(y[i] - 0.75);
            if (e > worst) worst = e; /* not fmax: aarch64 gcc 12's vectorizer crashes on that reduction */
        }
        /* Every type represents a constant block to within a few % of it (q2_k's coarse
         * 4-bit scale grid is the loosest); a bug in the scale math is far off. */
        CHECK(worst <= 0.75 * 0.05, "%s: constant 0.75 decodes with error %g", tt->name, worst);

        for (int i = 0; i < N; i++) x[i] = (i % 2 ? 1.0f : -1.0f) * 0.01f;
        x[37] = 100.0f;
        roundtrip(tt, x, y, q, N);
        CHECK(fabs(y[37] - 100.0) <= 100.0 * 0.02, "%s: the outlier 100 decodes as %g", tt->name, y[37]);
        int nan = 0;
        for (int i = 0; i < N; i++) nan += isnan(y[i]);
        CHECK(nan == 0, "%s: %d NaNs after an outlier", tt->name, nan);
    }
}

/* Hostile values (NaN, infinities, FLT_MAX, subnormals) in the first block of a row: the
 * quantizer must not crash or hit undefined behaviour (the sanitizer build checks), and
 * blocks are independent, so the rest of the row gets exactly the bytes it gets alone. */
static void test_non_finite(test_rng *rng) {
    enum { N = 1024 };
    const float hostile[] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1e-45f, -1e-40f, 0.0f};
    float x[N];
    uint8_t q_all[N * 4], q_rest[N * 4];
    for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
        const cera_type_traits *tt = cera_type_get(bounds[k].type);
        const int bs = tt->block_size < 256 ? 256 : tt->block_size; /* first 256: the hostile block(s) */
        for (size_t h = 0; h < sizeof hostile / sizeof hostile[0]; h++) {
            for (int i = 0; i < N; i++) x[i] = test_rng_normal(rng);
            for (int i = 0; i < bs; i += 7) x[i] = hostile[h];
            tt->from_float_ref(x, q_all, N);
            tt->from_float_ref(x + bs, q_rest, N - bs);
            const size_t skip = cera_row_size(bounds[k].type, bs);
            CHECK(!memcmp(q_all + skip, q_rest, cera_row_size(bounds[k].type, N - bs)),
                  "%s: a block holding %g changed the blocks after it", tt->name, (double)hostile[h]);
            float y[N];
            tt->to_float(q_all, y, N); /* decoding whatever was stored must be safe too */
        }
    }
}

/* The fields that activation-side dot products read instead of recomputing. */
static void test_activation_fields(test_rng *rng) {
    enum { N = 1024 };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = test_rng_normal(rng) * 3.0f;
    block_q8_1 b1[N / QK8_1];
    cera_quantize_row_q8_1_ref(x, b1, N);
    int bad = 0;
    for (int i = 0; i < N / QK8_1; i++) {
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) sum += b1[i].qs[j];
        /* s = f16(sum * d) with the f32 d, and d is stored as f16(d): each rounding is
         * within 2^-11 relative, so s and sum * d(f16) agree to 2 * 2^-11 of |s|. */
        const double want = sum * (double)cera_f16_to_f32(b1[i].d), got = cera_f16_to_f32(b1[i].s);
        if (fabs(got - want) > 2.0 * 0x1p-11 * fabs(want) + 1e-7) bad++;
    }
    CHECK(bad == 0, "q8_1: %d of %d blocks have s != d * sum(qs)", bad, N / QK8_1);

    block_q8_k bk[N / QK_K];
    cera_quantize_row_q8_k_ref(x, bk, N);
    bad = 0;
    for (int i = 0; i < N / QK_K; i++)
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += bk[i].qs[16 * g + j];
            bad += bk[i].bsums[g] != sum;
        }
    CHECK(bad == 0, "q8_k: %d bsums differ from the sums of their 16 quants", bad);
    int out_of_range = 0;
    for (int i = 0; i < N / QK_K; i++)
        for (int j = 0; j < QK_K; j++) out_of_range += bk[i].qs[j] < -127;
    CHECK(out_of_range == 0, "q8_k: %d quants at -128 (the scale maps the extreme to +-127)", out_of_range);
}

/* The type table's sizes agree with the block structs and llama.cpp's bits per weight. */
static void test_table(void) {
    static const struct {
        cera_type t;
        const char *name;
        int block;
        size_t bytes;
    } rows[] = {
        {CERA_TYPE_Q4_0, "q4_0", 32, 18},     {CERA_TYPE_Q4_1, "q4_1", 32, 20},
        {CERA_TYPE_Q5_0, "q5_0", 32, 22},     {CERA_TYPE_Q5_1, "q5_1", 32, 24},
        {CERA_TYPE_Q8_0, "q8_0", 32, 34},     {CERA_TYPE_Q8_1, "q8_1", 32, 36},
        {CERA_TYPE_Q2_K, "q2_k", 256, 84},    {CERA_TYPE_Q3_K, "q3_k", 256, 110},
        {CERA_TYPE_Q4_K, "q4_k", 256, 144},   {CERA_TYPE_Q5_K, "q5_k", 256, 176},
        {CERA_TYPE_Q6_K, "q6_k", 256, 210},   {CERA_TYPE_Q8_K, "q8_k", 256, 292},
        {CERA_TYPE_IQ4_NL, "iq4_nl", 32, 18}, {CERA_TYPE_IQ4_XS, "iq4_xs", 256, 136},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const cera_type_traits *tt = cera_type_get(rows[i].t);
        CHECK(tt && !strcmp(tt->name, rows[i].name) && tt->block_size == rows[i].block &&
                  tt->type_size == rows[i].bytes && tt->is_quantized,
              "%s: table row", rows[i].name);
        cera_type back;
        CHECK(cera_type_from_name(rows[i].name, &back) && back == rows[i].t, "%s: lookup by name",
              rows[i].name);
    }
    CHECK(cera_row_size(CERA_TYPE_Q4_K, 100) == 0, "a row that is not whole blocks has no size");
}

int main(void) {
    uint64_t seed = (uint64_t)time(NULL);
    const char *env = getenv("CERA_TEST_SEED");
    if (env) seed = strtoull(env, NULL, 10);
    printf("seed %llu\n", (unsigned long long)seed);
    test_rng rng = {seed};
    test_table();
    test_error_bounds(&rng, seed);
    test_degenerate();
    test_non_finite(&rng);
    test_activation_fields(&rng);
    return test_finish();
}

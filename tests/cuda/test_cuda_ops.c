/*
 * test_cuda_ops.c — the CUDA kernels against the scalar references, per weight type, on
 * fresh random inputs (seed printed):
 *   - embedding lookup (cu_get_rows): the reference dequantizer's floats, to 1e-6 of the
 *     row's scale (nvcc contracts a*b+c into one FMA where ggml's C rounds twice);
 *   - decode matvec: for Q4_0/Q8_0/Q4_K/Q6_K the activation goes through llama.cpp's Q8_0
 *     quantizer first (as the kernel does), so both sides see the same int8 values and
 *     agree to float rounding (1e-5 of sum |w x|); other types against f32 x, same bound;
 *   - prefill GEMM (dequantize to F16 + cuBLAS): F32 weights to 1e-5 of sum |w x|;
 *     F16 and quantized ones see F16-rounded activations and weights: 2e-3; BF16: 1e-2.
 * Shapes have a row count that is not a multiple of 32 (the kernels' tile) and, for the
 * float types, a row length that is not either (padded rows). The types with their own
 * decode loops are checked again on long rows (the ffn_down length, 11008, or 11000 for
 * the float types), where the loops and the cp.async ring take several steps and end
 * inside one, and on 9000 rows (282 tiles: more than the persistent ring kernels' blocks,
 * so each streams several tiles). The kernel variants that CERA_CUDA_MV and
 * CERA_CUDA_MV_GRID select are checked by running this test under them
 * (bench/cuda/device_run.sh mvsweep). Exits 77 without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"
#include "tensor/types.h"
#include "testutil.h"

static const cera_type types[] = {CERA_TYPE_F32,  CERA_TYPE_F16,    CERA_TYPE_BF16,  CERA_TYPE_Q4_0,
                                  CERA_TYPE_Q4_1, CERA_TYPE_Q5_0,   CERA_TYPE_Q5_1,  CERA_TYPE_Q8_0,
                                  CERA_TYPE_Q2_K, CERA_TYPE_Q3_K,   CERA_TYPE_Q4_K,  CERA_TYPE_Q5_K,
                                  CERA_TYPE_Q6_K, CERA_TYPE_IQ4_NL, CERA_TYPE_IQ4_XS};

/* The types whose decode kernels read int8 activations (as cu_type_uses_q8_act). */
static bool q8_act(cera_type t) {
    return t == CERA_TYPE_Q4_0 || t == CERA_TYPE_Q8_0 || t == CERA_TYPE_Q4_K || t == CERA_TYPE_Q6_K;
}

/* The decode matvec of W (GGUF rows wq, dequantized wd [n][k]) against x, through the kernels'
 * path: the worst error relative to sum |w x| against a double reference on the activation the
 * kernel sees (llama.cpp's Q8_0 round trip for the int8 types), INFINITY for a NaN output, or
 * -1 when the call failed (a failed CHECK naming what). */
static double matvec_worst(cera_type t, int64_t k, int64_t n, const void *wq, const float *wd,
                           const float *x) {
    float *xr = malloc(sizeof(float) * (size_t)k), *y = malloc(sizeof(float) * (size_t)n);
    if (q8_act(t)) {
        block_q8_0 *xq = malloc(sizeof(block_q8_0) * (size_t)(k / 32));
        cera_quantize_row_q8_0_ref(x, xq, k);
        cera_dequant_row_q8_0(xq, xr, k);
        free(xq);
    } else {
        memcpy(xr, x, sizeof(float) * (size_t)k);
    }
    for (int64_t i = 0; i < n; i++) y[i] = NAN;
    cera_error err;
    const cera_status st = cera_cuda_test_matvec(t, k, n, wq, x, y, &err);
    CHECK(st == CERA_OK, "%s matvec k=%lld n=%lld: %s", cera_type_get(t)->name, (long long)k, (long long)n,
          err.message);
    double worst = st == CERA_OK ? 0 : -1;
    for (int64_t r = 0; r < n && st == CERA_OK; r++) {
        double ref = 0, mag = 0;
        for (int64_t j = 0; j < k; j++)
            ref += (double)wd[r * k + j] * xr[j], mag += fabs((double)wd[r * k + j] * xr[j]);
        const double e = isnan(y[r]) ? INFINITY : fabs(y[r] - ref) / (mag > 0 ? mag : 1);
        worst = fmax(worst, e);
    }
    free(xr), free(y);
    return worst;
}

static void check_type(cera_type t, test_rng *rng, uint64_t seed) {
    const cera_type_traits *tt = cera_type_get(t);
    const int64_t bs = tt->block_size;
    const int64_t k = bs == 1 ? 200 : (bs == 32 ? 640 : 768), n = 77, m = 5;
    const size_t row = cera_row_size(t, k);
    float *wf = malloc(sizeof(float) * (size_t)(n * k));
    float *wd = malloc(sizeof(float) * (size_t)(n * k));
    uint8_t *wq = malloc(row * (size_t)n);
    float *x = malloc(sizeof(float) * (size_t)(m * k));
    float *y = malloc(sizeof(float) * (size_t)(m * n));
    float *g = malloc(sizeof(float) * (size_t)(3 * k));
    for (int64_t i = 0; i < n * k; i++) wf[i] = test_rng_normal(rng) * 0.5f;
    for (int64_t i = 0; i < m * k; i++) x[i] = test_rng_normal(rng);
    for (int64_t r = 0; r < n; r++) {
        tt->from_float_ref(wf + r * k, wq + (size_t)r * row, k);
        tt->to_float(wq + (size_t)r * row, wd + r * k, k);
    }
    cera_error err;

    // embedding lookup
    const int32_t rows[3] = {0, (int32_t)n - 1, 3};
    for (int i = 0; i < 3 * k; i++) g[i] = NAN;
    cera_status st = cera_cuda_test_get_rows(t, k, n, wq, rows, 3, g, &err);
    CHECK(st == CERA_OK, "%s get_rows: %s", tt->name, err.message);
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        double amax = 0;
        for (int64_t j = 0; j < k; j++) amax = fmax(amax, fabs(wd[rows[i] * k + j]));
        for (int64_t j = 0; j < k; j++) {
            const double d = fabs((double)g[i * k + j] - wd[rows[i] * k + j]) / (amax > 0 ? amax : 1);
            worst = isnan(g[i * k + j]) ? INFINITY : fmax(worst, d);
        }
    }
    CHECK(worst <= 1e-6, "%s get_rows: worst error %.3g of the row's max (seed %llu)", tt->name, worst,
          (unsigned long long)seed);

    // decode matvec
    worst = matvec_worst(t, k, n, wq, wd, x);
    CHECK(worst <= 1e-5, "%s matvec: worst error %.3g of sum|wx| (seed %llu)", tt->name, worst,
          (unsigned long long)seed);

    // prefill GEMM
    for (int64_t i = 0; i < m * n; i++) y[i] = NAN;
    st = cera_cuda_test_gemm(t, k, n, m, wq, x, y, &err);
    CHECK(st == CERA_OK, "%s gemm: %s", tt->name, err.message);
    const double tol = t == CERA_TYPE_F32 ? 1e-5 : t == CERA_TYPE_BF16 ? 1e-2 : 2e-3;
    worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < n; r++) {
            double ref = 0, mag = 0;
            for (int64_t j = 0; j < k; j++)
                ref += (double)wd[r * k + j] * x[i * k + j],
                    mag += fabs((double)wd[r * k + j] * x[i * k + j]);
            const double e = isnan(y[i * n + r]) ? INFINITY : fabs(y[i * n + r] - ref) / (mag > 0 ? mag : 1);
            worst = fmax(worst, e);
        }
    CHECK(worst <= tol, "%s gemm: worst error %.3g of sum|wx| (bound %.0e, seed %llu)", tt->name, worst, tol,
          (unsigned long long)seed);
    printf("%-7s get_rows ok, matvec ok, gemm worst %.2e\n", tt->name, worst);
    free(wf), free(wd), free(wq), free(x), free(y), free(g);
}

/* Decode matvec alone on a k x n weight (k whole blocks of t). */
static void check_matvec_shape(cera_type t, int64_t k, int64_t n, test_rng *rng, uint64_t seed) {
    const cera_type_traits *tt = cera_type_get(t);
    const size_t row = cera_row_size(t, k);
    float *wf = malloc(sizeof(float) * (size_t)k);
    float *wd = malloc(sizeof(float) * (size_t)(n * k));
    uint8_t *wq = malloc(row * (size_t)n);
    float *x = malloc(sizeof(float) * (size_t)k);
    for (int64_t r = 0; r < n; r++) {
        for (int64_t i = 0; i < k; i++) wf[i] = test_rng_normal(rng) * 0.5f;
        tt->from_float_ref(wf, wq + (size_t)r * row, k);
        tt->to_float(wq + (size_t)r * row, wd + r * k, k);
    }
    for (int64_t i = 0; i < k; i++) x[i] = test_rng_normal(rng);
    const double worst = matvec_worst(t, k, n, wq, wd, x);
    CHECK(worst <= 1e-5, "%s matvec k=%lld n=%lld: worst error %.3g of sum|wx| (seed %llu)", tt->name,
          (long long)k, (long long)n, worst, (unsigned long long)seed);
    printf("%-7s matvec k=%lld n=%lld ok (worst %.2e)\n", tt->name, (long long)k, (long long)n, worst);
    free(wf), free(wd), free(wq), free(x);
}

int main(void) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    const uint64_t seed = (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    test_rng rng = {seed};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) check_type(types[i], &rng, seed);
    const cera_type own_loops[] = {CERA_TYPE_F32,  CERA_TYPE_F16,  CERA_TYPE_BF16, CERA_TYPE_Q4_0,
                                   CERA_TYPE_Q8_0, CERA_TYPE_Q4_K, CERA_TYPE_Q6_K, CERA_TYPE_Q5_K};
    for (size_t i = 0; i < sizeof own_loops / sizeof own_loops[0]; i++) {
        const bool flt = cera_type_get(own_loops[i])->block_size == 1;
        check_matvec_shape(own_loops[i], flt ? 11000 : 11008, 45, &rng, seed); // long rows
        check_matvec_shape(own_loops[i], flt ? 200 : 768, 9000, &rng, seed);   // many tiles
    }
    return test_finish();
}

/*
 * test_cuda_matvec_rows.c — the several-row decode matvec (cu_matvec_rows) against the scalar
 * reference and against the one-row kernel (cu_matvec) run once per activation row, per weight
 * type, row count (1, 2, 3, 4, 5, 8, 16 and 19: every compile-time row count, rows masked inside
 * one, and 19 = a launch of 16 plus one of 3) and epilogue:
 *   - store: one weight with a bias and a scale;
 *   - residual add: three weights in one launch (Q, K, V) into one output row of all three
 *     (y_stride = their sum), on top of random values;
 *   - SwiGLU: gate and up with biases, into an activation with its int8 quantization.
 * Every output row must equal the one-row kernel's bit for bit (cuda_kernels.h says why it
 * can), and the reference to 1e-5 of sum |w x| (plus |y0| and the bias where they add in):
 * the activation the reference sees is llama.cpp's Q8_0 round trip for the types with int8
 * kernels, as in test_cuda_ops. The SwiGLU quants must be llama.cpp's Q8_0 of the outputs
 * (scale exact, quants within one step). The types with several-row kernels are checked again
 * on long rows (11008, 11000 for the float types) and on 9000 rows (more tiles than the
 * persistent ring kernels have blocks). An argument (a type name: q4_0) runs that type's short
 * cases alone (compute-sanitizer runs). Exits 77 without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "core/fp16.h"
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

static const char *epi_name[] = {"store", "add", "swiglu"};

/* The activation as the kernels see it: llama.cpp's Q8_0 round trip for the int8 types. */
static void kernel_x(cera_type t, const float *x, float *xr, int64_t k) {
    if (!q8_act(t)) {
        memcpy(xr, x, sizeof(float) * (size_t)k);
        return;
    }
    block_q8_0 *xq = malloc(sizeof(block_q8_0) * (size_t)(k / 32));
    cera_quantize_row_q8_0_ref(x, xq, k);
    cera_dequant_row_q8_0(xq, xr, k);
    free(xq);
}

/* One case: n_segs weights of n[i] rows of k (random, GGUF type t), n_rows activation rows. */
static void check_case(cera_type t, int64_t k, int n_segs, const int64_t *n, int n_rows, int epi,
                       test_rng *rng, uint64_t seed) {
    const cera_type_traits *tt = cera_type_get(t);
    const size_t row = cera_row_size(t, k);
    int64_t sum_n = 0;
    for (int i = 0; i < n_segs; i++) sum_n += n[i];
    const bool swiglu = epi == 2;
    const int64_t hk = (n[0] + 31) / 32 * 32, ny = n_rows * (swiglu ? hk : sum_n);
    float *wf = malloc(sizeof(float) * (size_t)k), *wd = malloc(sizeof(float) * (size_t)(sum_n * k));
    uint8_t *wq = malloc(row * (size_t)sum_n);
    float *x = malloc(sizeof(float) * (size_t)(n_rows * k)),
          *xr = malloc(sizeof(float) * (size_t)(n_rows * k));
    float *bias = malloc(sizeof(float) * (size_t)sum_n), *y0 = malloc(sizeof(float) * (size_t)ny);
    float *y[2] = {malloc(sizeof(float) * (size_t)ny), malloc(sizeof(float) * (size_t)ny)};
    float *hd[2] = {malloc(sizeof(float) * (size_t)ny / 32), malloc(sizeof(float) * (size_t)ny / 32)};
    int8_t *hq[2] = {malloc((size_t)ny), malloc((size_t)ny)};
    for (int64_t r = 0; r < sum_n; r++) {
        for (int64_t i = 0; i < k; i++) wf[i] = test_rng_normal(rng) * 0.5f;
        tt->from_float_ref(wf, wq + (size_t)r * row, k);
        tt->to_float(wq + (size_t)r * row, wd + r * k, k);
        bias[r] = test_rng_normal(rng);
    }
    for (int64_t i = 0; i < n_rows * k; i++) x[i] = test_rng_normal(rng);
    for (int j = 0; j < n_rows; j++) kernel_x(t, x + j * k, xr + j * k, k);
    for (int64_t i = 0; i < ny; i++) y0[i] = test_rng_normal(rng), y[0][i] = y[1][i] = NAN;
    const float scale = epi == 0 ? 0.75f : 1.0f;
    cera_cuda_mvrows_case c = {t, k,   n_segs, {0, 0, 0},           wq, bias, n_rows,
                               x, epi, scale,  epi == 1 ? y0 : NULL};
    for (int i = 0; i < n_segs; i++) c.n[i] = n[i];
    cera_error err;
    const cera_status st = cera_cuda_test_matvec_rows(&c, y, hq, hd, &err);
    CHECK(st == CERA_OK, "%s matvec rows k=%lld rows=%d %s: %s", tt->name, (long long)k, n_rows,
          epi_name[epi], err.message);
    if (st != CERA_OK) goto done;

    // bit-identical to the one-row kernel, row by row
    int64_t diff = 0;
    for (int64_t i = 0; i < ny; i++) diff += memcmp(&y[0][i], &y[1][i], sizeof(float)) != 0;
    if (swiglu)
        diff += memcmp(hq[0], hq[1], (size_t)ny) != 0 || memcmp(hd[0], hd[1], sizeof(float) * ny / 32);
    CHECK(diff == 0, "%s rows=%d %s: %lld outputs differ from the one-row kernel's (seed %llu)", tt->name,
          n_rows, epi_name[epi], (long long)diff, (unsigned long long)seed);

    // against the reference
    double worst = 0;
    for (int j = 0; j < n_rows; j++) {
        const float *xj = xr + j * k;
        if (!swiglu) {
            for (int64_t r = 0; r < sum_n; r++) {
                double ref = 0, mag = 0;
                for (int64_t i = 0; i < k; i++)
                    ref += (double)wd[r * k + i] * xj[i], mag += fabs((double)wd[r * k + i] * xj[i]);
                const double base = epi == 1 ? y0[j * sum_n + r] : 0;
                ref = base + scale * (ref + bias[r]);
                mag = fabs(base) + scale * (mag + fabs(bias[r]));
                const float got = y[0][j * sum_n + r];
                worst = fmax(worst, isnan(got) ? INFINITY : fabs(got - ref) / (mag > 0 ? mag : 1));
            }
            continue;
        }
        for (int64_t r = 0; r < hk; r++) {
            const float got = y[0][j * hk + r];
            if (r >= n[0]) { // the padding of the activation row
                worst = fmax(worst, got == 0.0f ? 0 : INFINITY);
                continue;
            }
            double g = bias[r], u = bias[n[0] + r], mg = fabs(g), mu = fabs(u);
            for (int64_t i = 0; i < k; i++) {
                g += (double)wd[r * k + i] * xj[i], mg += fabs((double)wd[r * k + i] * xj[i]);
                u += (double)wd[(n[0] + r) * k + i] * xj[i],
                    mu += fabs((double)wd[(n[0] + r) * k + i] * xj[i]);
            }
            const double sg = g / (1 + exp(-g)), ref = sg * u;
            const double mag = 1.1 * mg * fabs(u) + fabs(sg) * mu + fabs(ref);
            worst = fmax(worst, isnan(got) ? INFINITY : fabs(got - ref) / (mag > 0 ? mag : 1));
        }
        // the quantization the epilogue wrote: llama.cpp's Q8_0 of the row it stored
        block_q8_0 *b = malloc(sizeof(block_q8_0) * (size_t)(hk / 32));
        cera_quantize_row_q8_0_ref(y[0] + j * hk, b, hk);
        int bad = 0;
        for (int64_t bi = 0; bi < hk / 32; bi++) {
            bad += cera_f16_to_f32(b[bi].d) != hd[0][j * (hk / 32) + bi];
            for (int l = 0; l < 32; l++) bad += abs(b[bi].qs[l] - hq[0][j * hk + bi * 32 + l]) > 1;
        }
        CHECK(bad == 0, "%s rows=%d swiglu: %d quants or scales of row %d off llama.cpp's Q8_0 (seed %llu)",
              tt->name, n_rows, bad, j, (unsigned long long)seed);
        free(b);
    }
    CHECK(worst <= 1e-5, "%s k=%lld n=%lld rows=%d %s: worst error %.3g of sum|wx| (seed %llu)", tt->name,
          (long long)k, (long long)n[0], n_rows, epi_name[epi], worst, (unsigned long long)seed);
done:
    free(wf), free(wd), free(wq), free(x), free(xr), free(bias), free(y0);
    for (int i = 0; i < 2; i++) free(y[i]), free(hd[i]), free(hq[i]);
}

int main(int argc, char **argv) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    const uint64_t seed = (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    test_rng rng = {seed};
    const int rows[] = {1, 2, 3, 4, 5, 8, 16, 19};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const cera_type t = types[i];
        if (argc > 1 && strcmp(argv[1], cera_type_get(t)->name)) continue;
        const int64_t bs = cera_type_get(t)->block_size;
        const int64_t k = bs == 1 ? 200 : (bs == 32 ? 640 : 768);
        const int64_t n_store[1] = {77}, n_qkv[3] = {77, 45, 45}, n_ffn[2] = {77, 77};
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            check_case(t, k, 1, n_store, rows[r], 0, &rng, seed);
            check_case(t, k, 3, n_qkv, rows[r], 1, &rng, seed);
            check_case(t, k, 2, n_ffn, rows[r], 2, &rng, seed);
        }
        printf("%-7s rows 1..19 x store/add/swiglu done\n", cera_type_get(t)->name);
    }
    // the types with several-row kernels on long rows and on many tiles
    const cera_type fast[] = {CERA_TYPE_F16,  CERA_TYPE_BF16, CERA_TYPE_Q4_0,
                              CERA_TYPE_Q8_0, CERA_TYPE_Q4_K, CERA_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof fast / sizeof fast[0] && argc < 2; i++) {
        const bool flt = cera_type_get(fast[i])->block_size == 1;
        const int64_t n_long[2] = {45, 45}, n_many[1] = {9000};
        check_case(fast[i], flt ? 11000 : 11008, 2, n_long, 8, 2, &rng, seed);
        check_case(fast[i], flt ? 11000 : 11008, 1, n_long, 5, 0, &rng, seed);
        check_case(fast[i], flt ? 200 : 768, 1, n_many, 8, 1, &rng, seed);
        printf("%-7s long rows and many tiles done\n", cera_type_get(fast[i])->name);
    }
    return test_finish();
}

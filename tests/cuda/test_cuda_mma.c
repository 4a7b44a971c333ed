/*
 * test_cuda_mma.c — the tensor-core batched matmul (cu_mma_q8, mma.cu) for Q4_0 and Q8_0
 * weights against a double-precision reference and against the one-row decode kernel
 * (cu_matvec) run once per activation row.
 *
 * Cases: activation rows 2, 3, 8, 13, 32, 64, 100 (every n8-tile count, rows masked inside a
 * tile, and 100 = a launch of 64 plus one of 36) on short odd shapes (k 704, n 77 and 300: rows
 * not a multiple of the 128-row block; 22 blocks of k, so the last k slice is part empty), and on the
 * Llama-2-7B shapes 4096x4096 and 11008x4096 (n x k: gate/up) with 2, 13 and 64 rows and 4096x11008
 * (down) with 8, each plain (y = 0.75 W x) and with the residual add (y = y0 + W x); the cases
 * of over 1e8 multiply-adds check every 4th weight row, for every activation row.
 *
 * The bounds. The kernel's per-block terms are the matvec's, ((float)s * d_w) * d_x with s the
 * exact int32 block sum, and only the order of the F32 sum over the nb = k/32 blocks differs
 * (per k slice, then slice by slice), so against cu_matvec the difference is within
 * 2 nb 2^-24 sum |w x| (two orderings of one float sum, each within (nb - 1) u of the sum of
 * |terms|), plus 2^-24 |y0| for the add. Against the double reference (the dequantized weights
 * times llama.cpp's Q8_0 round trip of x) the bound is test_cuda_matvec_rows' 1e-5 of
 * sum |w x| (+ |y0|). The worst ratio of error to bound is printed per case.
 * An argument (any) runs the short shapes with 3, 13 and 100 rows alone (compute-sanitizer).
 * Exits 77 without a GPU.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "tensor/blocks.h"
#include "tensor/quant.h"
#include "tensor/types.h"
#include "testutil.h"

static double worst_ref = 0, worst_mv = 0; /* over all cases: error / bound */

/* One case: W [n][k] of type t (random), n_rows activation rows. */
static void check_case(cera_type t, int64_t k, int64_t n, int n_rows, bool add, test_rng *rng,
                       uint64_t seed) {
    const cera_type_traits *tt = cera_type_get(t);
    const size_t row = cera_row_size(t, k), ny = (size_t)n_rows * (size_t)n;
    float *wf = malloc(sizeof(float) * (size_t)k), *wd = malloc(sizeof(float) * (size_t)(n * k));
    uint8_t *wq = malloc(row * (size_t)n);
    float *x = malloc(sizeof(float) * (size_t)(n_rows * k)),
          *xr = malloc(sizeof(float) * (size_t)(n_rows * k));
    float *y0 = malloc(sizeof(float) * ny), *ym = malloc(sizeof(float) * ny),
          *yv = malloc(sizeof(float) * ny);
    block_q8_0 *xq = malloc(sizeof(block_q8_0) * (size_t)(k / 32));
    for (int64_t r = 0; r < n; r++) {
        for (int64_t i = 0; i < k; i++) wf[i] = test_rng_normal(rng) * 0.5f;
        tt->from_float_ref(wf, wq + (size_t)r * row, k);
        tt->to_float(wq + (size_t)r * row, wd + r * k, k);
    }
    for (int64_t i = 0; i < n_rows * k; i++) x[i] = test_rng_normal(rng);
    for (int j = 0; j < n_rows; j++) { // what the int8 kernels see: llama.cpp's Q8_0 round trip
        cera_quantize_row_q8_0_ref(x + j * k, xq, k);
        cera_dequant_row_q8_0(xq, xr + j * k, k);
    }
    for (size_t i = 0; i < ny; i++) y0[i] = test_rng_normal(rng) * 4;
    const float scale = add ? 1.0f : 0.75f;
    cera_error err;
    const cera_status st = cera_cuda_test_mma(t, k, n, n_rows, wq, x, add, scale, y0, ym, yv, &err);
    CHECK(st == CERA_OK, "%s mma k=%lld n=%lld rows=%d: %s", tt->name, (long long)k, (long long)n, n_rows,
          err.message);
    if (st != CERA_OK) goto done;
    const double u = ldexp(1.0, -24), nb = (double)(k / 32);
    double wr = 0, wm = 0;
    int64_t bad_ref = 0, bad_mv = 0;
    // the big cases check every 4th weight row (the double loops dominate the test's time)
    const int64_t every = (int64_t)n_rows * n * k > 100000000 ? 4 : 1;
    for (int j = 0; j < n_rows; j++)
        for (int64_t r = 0; r < n; r += every) {
            const size_t o = (size_t)j * (size_t)n + (size_t)r;
            const float got = ym[o];
            const double base = add ? y0[o] : 0;
            double dot = 0, mag = 0;
            for (int64_t i = 0; i < k; i++) {
                const double p = (double)wd[r * k + i] * xr[j * k + i];
                dot += p, mag += fabs(p);
            }
            // against the one-row kernel: its plain dot yv, through the same epilogue in double
            const double want_mv = base + scale * (double)yv[o];
            const double bound_mv = 2 * nb * u * scale * mag + u * fabs(base) + u * fabs(want_mv);
            const double e_mv = isnan(got) ? INFINITY : fabs(got - want_mv);
            wm = fmax(wm, e_mv / bound_mv);
            bad_mv += e_mv > bound_mv;
            const double want = base + scale * dot, bound = 1e-5 * (fabs(base) + scale * mag);
            const double e = isnan(got) ? INFINITY : fabs(got - want);
            wr = fmax(wr, e / bound);
            bad_ref += e > bound;
        }
    CHECK(bad_mv == 0,
          "%s k=%lld n=%lld rows=%d%s: %lld outputs off cu_matvec beyond 2 nb u sum|wx| (worst %.3g "
          "of it, seed %llu)",
          tt->name, (long long)k, (long long)n, n_rows, add ? " add" : "", (long long)bad_mv, wm,
          (unsigned long long)seed);
    CHECK(bad_ref == 0,
          "%s k=%lld n=%lld rows=%d%s: %lld outputs off the reference beyond 1e-5 sum|wx| (worst "
          "%.3g of it, seed %llu)",
          tt->name, (long long)k, (long long)n, n_rows, add ? " add" : "", (long long)bad_ref, wr,
          (unsigned long long)seed);
    printf("%-5s k=%-5lld n=%-5lld rows=%-3d %-5s worst error / bound: %.3f (reference), %.3f (cu_matvec)\n",
           tt->name, (long long)k, (long long)n, n_rows, add ? "add" : "store", wr, wm);
    worst_ref = fmax(worst_ref, wr);
    worst_mv = fmax(worst_mv, wm);
done:
    free(wf), free(wd), free(wq), free(x), free(xr), free(y0), free(ym), free(yv), free(xq);
}

int main(int argc, char **argv) {
    (void)argv;
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    const uint64_t seed = (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    test_rng rng = {seed};
    const cera_type types[] = {CERA_TYPE_Q4_0, CERA_TYPE_Q8_0};
    const int rows[] = {2, 3, 8, 13, 32, 64, 100};
    for (size_t i = 0; i < 2; i++) {
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            if (argc > 1 && rows[r] != 3 && rows[r] != 13 && rows[r] != 100) continue;
            check_case(types[i], 704, 77, rows[r], false, &rng, seed);
            check_case(types[i], 704, 77, rows[r], true, &rng, seed);
            check_case(types[i], 704, 300, rows[r], r & 1, &rng, seed);
        }
        if (argc > 1) continue; // an argument: short cases of 3, 13, 100 rows only (compute-sanitizer)
        const int big[] = {2, 13, 64};
        for (size_t r = 0; r < 3; r++) {
            check_case(types[i], 4096, 4096, big[r], r == 1, &rng, seed);
            check_case(types[i], 4096, 11008, big[r], r == 2, &rng, seed);
        }
        check_case(types[i], 11008, 4096, 8, false, &rng, seed);
    }
    printf("worst error / bound over all cases: %.3f (reference, 1e-5 sum|wx|), %.3f (cu_matvec, 2 nb 2^-24 "
           "sum|wx|)\n",
           worst_ref, worst_mv);
    return test_finish();
}

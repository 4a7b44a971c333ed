/*
 * test_act_quant.c — the scalar activation quantizers on known values and random rows.
 *
 * Known values pin down the rounding llama.cpp's x86 build uses for q8_0/q8_1 (scale
 * 127/amax, halves to even) and ggml's q8_k reference (scale -127/max with the first
 * largest-magnitude value's sign, halves to even, clamp at 127, per-16 sums). Random rows
 * check every quant is within half a step of x/d and that the stored sums match the quants.
 * (Each SIMD tier is checked byte-exact against these in test_kernels.)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "kernel_inputs.h"
#include "testutil.h"

static void known_q8_0(void) {
    /* amax = 127 gives id = 1, so x is rounded as it is: halves go to the even neighbour. */
    float x[32] = {2.5f, 3.5f, -2.5f, -3.5f, 0.5f, 1.5f, -0.5f, 126.5f, 127.0f, -127.0f, 0.49f, 7.0f};
    const int8_t want[12] = {2, 4, -2, -4, 0, 2, 0, 126, 127, -127, 0, 7};
    block_q8_0 b;
    cera_quantize_act_q8_0(x, &b, 32);
    for (int i = 0; i < 12; i++)
        CHECK(b.qs[i] == want[i], "q8_0 x=%g -> %d, want %d", x[i], b.qs[i], want[i]);
    CHECK(b.d == cera_f32_to_f16(1.0f), "q8_0 d = 1 (got 0x%04x)", b.d);

    float z[32] = {0};
    cera_quantize_act_q8_0(z, &b, 32);
    bool all0 = b.d == 0;
    for (int i = 0; i < 32; i++) all0 = all0 && b.qs[i] == 0;
    CHECK(all0, "q8_0 of zeros is zeros");
}

static void known_q8_1(void) {
    float x[32] = {0};
    x[0] = 254.0f; /* amax 254: d = 2, id = 0.5 */
    x[1] = 5.0f;   /* 2.5 -> 2 */
    x[2] = 7.0f;   /* 3.5 -> 4 */
    x[3] = -3.0f;  /* -1.5 -> -2 */
    block_q8_1 b;
    cera_quantize_act_q8_1(x, &b, 32);
    CHECK(b.qs[0] == 127 && b.qs[1] == 2 && b.qs[2] == 4 && b.qs[3] == -2, "q8_1 quants %d %d %d %d", b.qs[0],
          b.qs[1], b.qs[2], b.qs[3]);
    CHECK(b.d == cera_f32_to_f16(2.0f), "q8_1 d");
    CHECK(b.s == cera_f32_to_f16(2.0f * (127 + 2 + 4 - 2)), "q8_1 s = d * sum(q) (got %g)",
          cera_f16_to_f32(b.s));
}

static void known_q8_k(void) {
    float x[256] = {0};
    x[5] = -2.0f;  /* first of the largest magnitude: negative, so iscale = 63.5 > 0 */
    x[9] = 2.0f;   /* same magnitude, later: maps to +127 */
    x[10] = 1.0f;  /* 63.5 -> 64 (half to even) */
    x[11] = -0.5f; /* -31.75 -> -32 */
    x[200] = 0.3f; /* 19.05 -> 19 */
    block_q8_k b;
    cera_quantize_act_q8_k(x, &b, 256);
    CHECK(b.qs[5] == -127 && b.qs[9] == 127, "q8_k extremes %d %d", b.qs[5], b.qs[9]);
    CHECK(b.qs[10] == 64 && b.qs[11] == -32 && b.qs[200] == 19, "q8_k rounding %d %d %d", b.qs[10], b.qs[11],
          b.qs[200]);
    CHECK(b.d == 1.0f / (-127.0f / -2.0f), "q8_k d = 1/iscale (got %g)", b.d);
    CHECK(b.bsums[0] == -127 + 127 + 64 - 32 && b.bsums[12] == 19, "q8_k bsums %d %d", b.bsums[0],
          b.bsums[12]);

    /* The positive one first: everything flips sign. */
    x[5] = 2.0f;
    x[9] = -2.0f;
    cera_quantize_act_q8_k(x, &b, 256);
    CHECK(b.qs[5] == -127 && b.qs[9] == 127 && b.d < 0, "q8_k sign follows the first max (%d %d %g)", b.qs[5],
          b.qs[9], b.d);
}

static void random_rows(uint64_t seed) {
    test_rng r = {seed};
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x);
    block_q8_0 *q0 = malloc(sizeof(block_q8_0) * N / 32);
    block_q8_1 *q1 = malloc(sizeof(block_q8_1) * N / 32);
    block_q8_k *qk = malloc(sizeof(block_q8_k) * N / 256);
    for (int rep = 0; rep < 8; rep++) {
        ki_fill_acts(&r, N, x);
        cera_quantize_act_q8_0(x, q0, N);
        cera_quantize_act_q8_1(x, q1, N);
        cera_quantize_act_q8_k(x, qk, N);
        int bad0 = 0, bad1 = 0, badk = 0, badsum = 0;
        for (int b = 0; b < N / 32; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[32 * b + j]));
            const float d = amax / 127.f;
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                const float want = x[32 * b + j] / d; /* unrounded quant */
                bad0 += fabsf(q0[b].qs[j] - want) > 0.5001f;
                bad1 += q1[b].qs[j] != q0[b].qs[j];
                sum += q1[b].qs[j];
            }
            badsum +=
                fabsf(cera_f16_to_f32(q1[b].s) - d * (float)sum) > 1e-3f * fabsf(d * (float)sum) + 1e-6f;
        }
        for (int b = 0; b < N / 256; b++) {
            int sums[16] = {0};
            for (int j = 0; j < 256; j++) {
                badk += fabsf(qk[b].qs[j] - x[256 * b + j] / qk[b].d) > 0.5001f;
                sums[j / 16] += qk[b].qs[j];
            }
            for (int g = 0; g < 16; g++) badsum += sums[g] != qk[b].bsums[g];
        }
        CHECK(bad0 == 0, "q8_0: %d quants off by more than half a step", bad0);
        CHECK(bad1 == 0, "q8_1 quants differ from q8_0's in %d places", bad1);
        CHECK(badk == 0, "q8_k: %d quants off by more than half a step", badk);
        CHECK(badsum == 0, "%d stored sums wrong", badsum);
    }
    free(x);
    free(q0);
    free(q1);
    free(qk);
}

int main(int argc, char **argv) {
    known_q8_0();
    known_q8_1();
    known_q8_k();
    random_rows(argc > 1 ? strtoull(argv[1], NULL, 10) : 12345);
    return test_finish();
}

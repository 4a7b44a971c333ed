/*
 * quant_act.c — scalar reference quantizers for activation rows (the right-hand side of
 * every CPU dot product): f32 (copy), f16, bf16, q8_0, q8_1 and q8_k.
 *
 * They must produce the bytes llama.cpp's CPU backend produces, because the goldens are
 * llama.cpp outputs and a different rounding of one activation shifts a logit. The goldens
 * came from an x86 AVX2/AVX-512 build, whose q8_0/q8_1 quantizer differs from ggml's
 * portable reference: it scales by 127/amax (not 1/(amax/127)) and rounds half to even (not
 * half away from zero). We follow the x86 one. Its q8_k quantizer is the portable reference
 * (quantize_row_q8_K_ref). The SIMD versions in x86/ and arm/ are byte-exact with these, and
 * tests/cpu checks that.
 */
#include "backend/cpu/kernels_impl.h"
#include "core/fp16.h"
#include "tensor/blocks.h"
#include "tensor/quant_util.h"

#include <math.h>
#include <string.h>

/* Round half to even, as _mm256_round_ps(_MM_ROUND_NEAREST) and ggml's nearest_int(). Valid for
 * |x| < 2^22, which every caller guarantees (|x| <= 127.5 after scaling). */
static inline int round_even(float x) {
    const float big = x + 12582912.f; /* 1.5 * 2^23: the sum's low mantissa bits are round(x) */
    return (int)(cera_f32_bits(big) & 0x007fffff) - 0x00400000;
}

void cera_quantize_act_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

void cera_quantize_act_f16(const float *x, void *y, int64_t n) {
    cera_f16 *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = cera_f32_to_f16(x[i]);
}

void cera_quantize_act_bf16(const float *x, void *y, int64_t n) {
    cera_bf16 *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = cera_f32_to_bf16(x[i]);
}

/* One 32-element block: amax, d = amax/127, q = round_even(x * 127/amax); returns sum(q). */
static int quantize_block_32(const float *x, cera_f16 *d_out, int8_t *q, float *d_full) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float ax = fabsf(x[j]);
        amax = ax > amax ? ax : amax;
    }
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    *d_out = cera_f32_to_f16(d);
    *d_full = d;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)round_even(x[j] * id);
        sum += q[j];
    }
    return sum;
}

void cera_quantize_act_q8_0(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    float d;
    for (int64_t i = 0; i < n / QK8_0; i++) quantize_block_32(x + i * QK8_0, &y[i].d, y[i].qs, &d);
}

void cera_quantize_act_q8_1(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        float d;
        const int sum = quantize_block_32(x + i * QK8_1, &y[i].d, y[i].qs, &d);
        y[i].s = cera_f32_to_f16(d * (float)sum); /* the unrounded d, as llama.cpp's x86 code */
    }
}

void cera_quantize_act_q8_k(const float *x, void *vy, int64_t n) {
    block_q8_k *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax;
        const float max = qu_signed_absmax(x, QK_K, &amax);
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = round_even(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

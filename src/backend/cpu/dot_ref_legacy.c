/*
 * dot_ref_legacy.c — scalar reference dot products of the 32-element-block weight types
 * against quantized activations: q4_0, q5_0, q8_0, iq4_nl with q8_0 and q4_1, q5_1 with q8_1.
 *
 * Per block: an exact integer dot of the quants, then one float multiply-add with the two
 * scales, in the order ggml's *_generic functions use (the float rounding order matters for
 * matching llama.cpp to the last bit). The SIMD tiers compute the same integer sums exactly
 * and differ only in how the per-block floats are summed.
 */
#include "backend/cpu/kernels_impl.h"
#include "tensor/blocks.h"

#include <string.h>

#define F16(h) cera_f16_to_f32(h)

void cera_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            sumi0 += ((x[b].qs[j] & 0x0F) - 8) * y[b].qs[j];
            sumi1 += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
        }
        sum += (float)(sumi0 + sumi1) * F16(x[b].d) * F16(y[b].d);
    }
    *s = sum;
}

void cera_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            sumi0 += (x[b].qs[j] & 0x0F) * y[b].qs[j];
            sumi1 += (x[b].qs[j] >> 4) * y[b].qs[j + 16];
        }
        /* The minimum m multiplies the sum of the activation block, which q8_1 carries as s. */
        sum += (F16(x[b].d) * F16(y[b].d)) * (float)(sumi0 + sumi1) + F16(x[b].m) * F16(y[b].s);
    }
    *s = sum;
}

void cera_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        uint32_t qh;
        memcpy(&qh, x[b].qh, sizeof qh);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            sumi0 += (((x[b].qs[j] & 0x0F) | h0) - 16) * y[b].qs[j];
            sumi1 += (((x[b].qs[j] >> 4) | h1) - 16) * y[b].qs[j + 16];
        }
        sum += (F16(x[b].d) * F16(y[b].d)) * (float)(sumi0 + sumi1);
    }
    *s = sum;
}

void cera_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        uint32_t qh;
        memcpy(&qh, x[b].qh, sizeof qh);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4, h1 = (int)((qh >> (j + 16)) & 1) << 4;
            sumi0 += ((x[b].qs[j] & 0x0F) | h0) * y[b].qs[j];
            sumi1 += ((x[b].qs[j] >> 4) | h1) * y[b].qs[j + 16];
        }
        sum += (F16(x[b].d) * F16(y[b].d)) * (float)(sumi0 + sumi1) + F16(x[b].m) * F16(y[b].s);
    }
    *s = sum;
}

void cera_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_q8_0 *x = w;
    const block_q8_0 *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[b].qs[j] * y[b].qs[j];
        sum += (float)sumi * (F16(x[b].d) * F16(y[b].d));
    }
    *s = sum;
}

void cera_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        const float d = F16(y[b].d) * F16(x[b].d);
        int sumi1 = 0, sumi2 = 0;
        for (int j = 0; j < 16; j++) {
            sumi1 += y[b].qs[j] * kvalues_iq4nl[x[b].qs[j] & 0xF];
            sumi2 += y[b].qs[j + 16] * kvalues_iq4nl[x[b].qs[j] >> 4];
        }
        sum += d * (float)(sumi1 + sumi2);
    }
    *s = sum;
}

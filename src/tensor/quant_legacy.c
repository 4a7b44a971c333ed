/*
 * quant_legacy.c — reference rows of the 32-element-block types: q4_0, q4_1, q5_0,
 * q5_1, q8_0 and q8_1 (layouts in blocks.h).
 *
 * The quantizers are llama.cpp's deterministic reference ones (what llama-quantize
 * runs without an importance matrix): one scale per block from the block's extreme
 * value(s), then each element rounded. To give the same bytes the arithmetic is kept
 * in the reference's order and precision (float, divisions where it divides,
 * truncating float->int conversions where it truncates); this file must never be
 * built with -ffast-math or FMA contraction.
 */
#include "tensor/strict_fp.h" /* first: no FMA contraction, no fast-math */

#include <float.h>
#include <math.h>

#include "tensor/blocks.h"
#include "tensor/quant.h"
#include "tensor/quant_util.h"

/* ---- q4_0: x = d * (q - 8) ------------------------------------------------------ */

void cera_dequant_row_q4_0(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = cera_f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = ((b[i].qs[j] & 0xF) - 8) * d;
            dst[j + QK4_0 / 2] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void cera_quantize_row_q4_0_ref(const float *src, void *dst, int64_t n) {
    block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, src += QK4_0) {
        /* The signed value of largest magnitude maps to -8, so the full range -8..7 is used
         * on the side where the block reaches furthest. */
        float amax;
        const float max = qu_signed_absmax(src, QK4_0, &amax);
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cera_f32_to_f16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const int q0 = qu_min(15, qu_trunc(src[j] * id + 8.5f));
            const int q1 = qu_min(15, qu_trunc(src[j + QK4_0 / 2] * id + 8.5f));
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---- q4_1: x = d * q + m -------------------------------------------------------- */

void cera_dequant_row_q4_1(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        const float d = cera_f16_to_f32(b[i].d);
        const float m = cera_f16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = (b[i].qs[j] & 0xF) * d + m;
            dst[j + QK4_1 / 2] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The block's min and max, as the reference scans them (NaNs ignored by the comparisons). */
static void block_min_max(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

void cera_quantize_row_q4_1_ref(const float *src, void *dst, int64_t n) {
    block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, src += QK4_1) {
        float min, max;
        block_min_max(src, QK4_1, &min, &max);
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cera_f32_to_f16(d);
        b[i].m = cera_f32_to_f16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const int q0 = qu_min(15, qu_trunc((src[j] - min) * id + 0.5f));
            const int q1 = qu_min(15, qu_trunc((src[j + QK4_1 / 2] - min) * id + 0.5f));
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---- q5_0 / q5_1: as q4 with a fifth bit in qh ------------------------------------ */

static uint32_t load_qh(const uint8_t qh[4]) {
    return (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
}

static void store_qh(uint8_t qh[4], uint32_t v) {
    for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(v >> (8 * k));
}

void cera_dequant_row_q5_0(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = cera_f16_to_f32(b[i].d);
        const uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int q0 = (b[i].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + QK5_0 / 2)) & 1) << 4;
            dst[j] = (q0 - 16) * d;
            dst[j + QK5_0 / 2] = (q1 - 16) * d;
        }
    }
}

void cera_quantize_row_q5_0_ref(const float *src, void *dst, int64_t n) {
    block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / QK5_0; i++, src += QK5_0) {
        float amax;
        const float max = qu_signed_absmax(src, QK5_0, &amax);
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cera_f32_to_f16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int q0 = qu_min(31, qu_trunc(src[j] * id + 16.5f));
            const int q1 = qu_min(31, qu_trunc(src[j + QK5_0 / 2] * id + 16.5f));
            b[i].qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)(q0 >> 4 & 1) << j;
            qh |= (uint32_t)(q1 >> 4 & 1) << (j + QK5_0 / 2);
        }
        store_qh(b[i].qh, qh);
    }
}

void cera_dequant_row_q5_1(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        const float d = cera_f16_to_f32(b[i].d);
        const float m = cera_f16_to_f32(b[i].m);
        const uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < QK5_1 / 2; j++) {
            const int q0 = (b[i].qs[j] & 0xF) | (int)((qh >> j) & 1) << 4;
            const int q1 = (b[i].qs[j] >> 4) | (int)((qh >> (j + QK5_1 / 2)) & 1) << 4;
            dst[j] = q0 * d + m;
            dst[j + QK5_1 / 2] = q1 * d + m;
        }
    }
}

void cera_quantize_row_q5_1_ref(const float *src, void *dst, int64_t n) {
    block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / QK5_1; i++, src += QK5_1) {
        float min, max;
        block_min_max(src, QK5_1, &min, &max);
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = cera_f32_to_f16(d);
        b[i].m = cera_f32_to_f16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            /* No clamp to 31 here, as in the reference: (x - min) * id stays below 31.5. The
             * uint8 truncation keeps the reference's wrap-around should it ever not. */
            const int q0 = (uint8_t)qu_trunc((src[j] - min) * id + 0.5f);
            const int q1 = (uint8_t)qu_trunc((src[j + QK5_1 / 2] - min) * id + 0.5f);
            b[i].qs[j] = (uint8_t)((q0 & 0xF) | (q1 & 0xF) << 4);
            qh |= (uint32_t)(q0 >> 4 & 1) << j;
            qh |= (uint32_t)(q1 >> 4 & 1) << (j + QK5_1 / 2);
        }
        store_qh(b[i].qh, qh);
    }
}

/* ---- q8_0 / q8_1: x = d * q, q in -127..127 --------------------------------------- */

void cera_dequant_row_q8_0(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = cera_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = b[i].qs[j] * d;
    }
}

/* The absolute maximum and the scale mapping it to 127; shared by q8_0 and q8_1. */
static float q8_scale(const float *x, int n, float *id) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) amax = qu_maxf(amax, fabsf(x[j]));
    const float d = amax / 127;
    *id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

void cera_quantize_row_q8_0_ref(const float *src, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float id;
        const float d = q8_scale(src, QK8_0, &id);
        b[i].d = cera_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)qu_round(src[j] * id);
    }
}

void cera_dequant_row_q8_1(const void *src, float *dst, int64_t n) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        const float d = cera_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = b[i].qs[j] * d;
    }
}

void cera_quantize_row_q8_1_ref(const float *src, void *dst, int64_t n) {
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        float id;
        const float d = q8_scale(src, QK8_1, &id);
        b[i].d = cera_f32_to_f16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            b[i].qs[j] = (int8_t)qu_round(src[j] * id);
            sum += b[i].qs[j];
        }
        b[i].s = cera_f32_to_f16((float)sum * d);
    }
}

/*
 * quant_iq.c — reference rows of the non-linear 4-bit types iq4_nl and iq4_xs
 * (layouts and the 16 levels kvalues_iq4nl in blocks.h).
 *
 * Both store, per element, the index of the nearest of 16 fixed non-uniform levels
 * after scaling. iq4_nl has one f16 scale per 32 elements; iq4_xs has 256-element
 * super-blocks with one f16 scale and a 6-bit scale per 32-element sub-block.
 *
 * The quantizer is what llama-quantize runs without an importance matrix (ggml's
 * quantize_iq4_nl / quantize_iq4_xs, 7 search steps either side; note ggml's
 * quantize_row_iq4_nl_ref does *not* search and gives different bytes, so cera's
 * reference for iq4_nl is the search): for each 32-element block, weights x^2, try 15
 * scales around the one mapping the largest-magnitude value to the outermost level,
 * and keep the best weighted least-squares fit. As in quant_k.c, the arithmetic
 * follows the reference's order exactly.
 */
#include "tensor/strict_fp.h" /* first: no FMA contraction, no fast-math */

#include <math.h>
#include <string.h>

#include "tensor/blocks.h"
#include "tensor/quant.h"
#include "tensor/quant_util.h"

#define GROUP_EPS  1e-15f
#define IQ4_NTRY   7 /* scale candidates either side of the initial one */
#define IQ4_SUBBLK 32

/* Index of the level in the ascending table val[0..15] nearest to x (ties to the upper). */
static int nearest_level(const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int lo = 0, hi = 15; /* val[lo] <= x < val[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < val[mid])
            hi = mid;
        else
            lo = mid;
    }
    return x - val[hi - 1] < val[hi] - x ? hi - 1 : hi;
}

/* Best scale of one 32-element block on the iq4 levels (0 for an all-zero block); the
 * block's levels are left in L only where the caller re-derives them anyway. */
static float fit_iq4_block(const float *xb, uint8_t *L) {
    float weight[IQ4_SUBBLK];
    for (int j = 0; j < IQ4_SUBBLK; j++) weight[j] = xb[j] * xb[j];
    float amax = 0, max = 0;
    for (int j = 0; j < IQ4_SUBBLK; j++)
        if (fabsf(xb[j]) > amax) {
            amax = fabsf(xb[j]);
            max = xb[j];
        }
    if (amax < GROUP_EPS) return 0;
    const int8_t *values = kvalues_iq4nl;
    float d = -max / values[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < IQ4_SUBBLK; j++) {
        const int l = nearest_level(values, id * xb[j]);
        L[j] = (uint8_t)l;
        const float q = values[l];
        const float w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int step = -IQ4_NTRY; step <= IQ4_NTRY; step++) {
        id = (step + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < IQ4_SUBBLK; j++) {
            const float q = values[nearest_level(values, id * xb[j])];
            const float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* Packs 32 level indices as iq4_nl/iq4_xs store them: low nibble j, high nibble j + 16. */
static void pack_nibbles(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

/* ---- iq4_nl -------------------------------------------------------------------------- */

void cera_dequant_row_iq4_nl(const void *src, float *dst, int64_t n) {
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, dst += QK4_NL) {
        const float d = cera_f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_NL / 2; j++) {
            dst[j] = d * kvalues_iq4nl[b[i].qs[j] & 0xF];
            dst[j + QK4_NL / 2] = d * kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

void cera_quantize_row_iq4_nl_ref(const float *src, void *dst, int64_t n) {
    block_iq4_nl *b = dst;
    uint8_t L[QK4_NL];
    for (int64_t i = 0; i < n / QK4_NL; i++, src += QK4_NL) {
        const float d = fit_iq4_block(src, L);
        b[i].d = cera_f32_to_f16(d);
        /* Re-pick every level against the fitted (unrounded) scale. */
        const float id = d != 0.0f ? 1 / d : 0;
        for (int j = 0; j < QK4_NL; j++) L[j] = (uint8_t)nearest_level(kvalues_iq4nl, id * src[j]);
        pack_nibbles(L, b[i].qs);
    }
}

/* ---- iq4_xs -------------------------------------------------------------------------- */

void cera_dequant_row_iq4_xs(const void *src, float *dst, int64_t n) {
    const block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = cera_f16_to_f32(b[i].d);
        for (int j = 0; j < QK_K / 32; j++, dst += 32) {
            const float dl = d * iq4_xs_scale(&b[i], j);
            const uint8_t *qs = b[i].qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                dst[l] = dl * kvalues_iq4nl[qs[l] & 0xF];
                dst[l + 16] = dl * kvalues_iq4nl[qs[l] >> 4];
            }
        }
    }
}

void cera_quantize_row_iq4_xs_ref(const float *src, void *dst, int64_t n) {
    block_iq4_xs *b = dst;
    uint8_t L[QK_K];
    float scales[QK_K / 32];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        const float *x = src;
        float max_scale = 0, amax_scale = 0;
        for (int j = 0; j < QK_K / 32; j++) {
            scales[j] = fit_iq4_block(x + 32 * j, L + 32 * j);
            if (fabsf(scales[j]) > amax_scale) {
                amax_scale = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        /* Sub-block scales as 6-bit multiples (-32..31) of d; the largest maps to -32. */
        const float d = -max_scale / 32;
        b[i].d = cera_f32_to_f16(d);
        const float id = d != 0.0f ? 1 / d : 0.f;
        uint16_t scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int j = 0; j < QK_K / 32; j++) {
            int l = qu_clamp(qu_nearest_int(id * scales[j]), -32, 31);
            /* Levels are re-picked against d * l, the f32 product (not the f16-rounded d). */
            const float dl = d * l;
            const float idl = dl != 0.0f ? 1 / dl : 0.f;
            for (int k = 0; k < 32; k++)
                L[32 * j + k] = (uint8_t)nearest_level(kvalues_iq4nl, idl * x[32 * j + k]);
            l += 32;
            b[i].scales_l[j / 2] = (uint8_t)(b[i].scales_l[j / 2] | (l & 0xF) << (4 * (j % 2)));
            scales_h = (uint16_t)(scales_h | (l >> 4) << (2 * j));
        }
        b[i].scales_h = scales_h;
        for (int j = 0; j < QK_K / 32; j++) pack_nibbles(L + 32 * j, b[i].qs + 16 * j);
    }
}

/*
 * quant_k.c — reference rows of the k-quants: q2_k, q3_k, q4_k, q5_k, q6_k and the
 * activation type q8_k (layouts in blocks.h).
 *
 * A k-quant super-block of 256 holds 8 or 16 sub-blocks, each with its own scale (and
 * for q2_k/q4_k/q5_k a min), and those sub-block scales are themselves quantized
 * against one f16 super-block scale. The quantizers are the ones llama-quantize runs
 * without an importance matrix (ggml's *_ref): each sub-block's scale is fitted by a
 * small search that minimises a weighted error, then the scales are quantized and
 * every element is re-rounded against the scale it will actually be decoded with.
 *
 * The searches compare float sums, so a different summation order or a fused
 * multiply-add changes which candidate wins and hence the bytes. Everything below
 * keeps the reference's order of operations; do not "simplify" the expressions.
 */
#include "tensor/strict_fp.h" /* first: no FMA contraction, no fast-math */

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "tensor/blocks.h"
#include "tensor/quant.h"
#include "tensor/quant_util.h"

/* Below this a group is treated as all zeros (the reference's GROUP_MAX_EPS). */
#define GROUP_EPS 1e-15f

/* ---- scale searches --------------------------------------------------------------- */

/*
 * Symmetric scale for n values on levels -nmax..nmax-1 (q6_k), weights x^2: start from
 * the scale that maps the largest-magnitude value to -nmax, then try 18 nearby scales
 * and keep the one whose least-squares refit explains the most (sumlx^2 / suml2).
 * L receives the levels offset by nmax. Returns the scale.
 */
static float fit_symmetric_scale(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = qu_signed_absmax(x, n, &amax);
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = qu_clamp(qu_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int step = -9; step <= 9; step++) {
        if (step == 0) continue;
        iscale = -(nmax + 0.1f * step) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = qu_clamp(qu_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + qu_clamp(qu_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/*
 * Symmetric scale for q3_k (levels -nmax..nmax-1, weights x^2): start from the max-based
 * levels, then up to 5 passes moving single elements to the level their leave-one-out
 * least-squares scale suggests, when that improves sumlx^2 / suml2. L receives levels
 * offset by nmax. Returns the least-squares scale.
 */
static float fit_q3_scale(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = qu_signed_absmax(x, n, &amax);
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = qu_clamp(qu_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = qu_clamp(qu_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/*
 * Scale and min for x ~ scale * L + min with L in 0..nmax (q2_k, q4_k, q5_k), min <= 0:
 * tries nstep + 1 scales around nmax / (max - min), refits scale and min by weighted
 * least squares for each, and keeps the fit with the smallest weighted error (absolute
 * when use_mad, squared otherwise). Returns the scale; *neg_min receives -min (>= 0).
 */
static float fit_scale_min(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *neg_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = qu_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)qu_clamp(l, 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *neg_min = -min;
        return scale;
    }
    for (int step = 0; step <= nstep; step++) {
        iscale = (rmin + rdelta * step + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = qu_clamp(qu_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                error += weights[i] * diff;
            }
            if (error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

/* Packs 2-bit levels (0..3) of 256 elements as q2_k/q3_k store them (see blocks.h). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < QK_K; h += 128)
        for (int l = 0; l < 32; l++)
            qs[h / 4 + l] =
                (uint8_t)(L[h + l] | L[h + l + 32] << 2 | L[h + l + 64] << 4 | L[h + l + 96] << 6);
}

/* ---- q2_k --------------------------------------------------------------------------- */

void cera_dequant_row_q2_k(const void *src, float *dst, int64_t n) {
    const block_q2_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = cera_f16_to_f32(b[i].d);
        const float dmin = cera_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        int is = 0;
        for (int h = 0; h < QK_K; h += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int half = 0; half < 2; half++, is++) {
                    const float dl = d * (b[i].scales[is] & 0xF);
                    const float ml = dmin * (b[i].scales[is] >> 4);
                    for (int l = 0; l < 16; l++) *dst++ = dl * ((q[16 * half + l] >> shift) & 3) - ml;
                }
    }
}

void cera_quantize_row_q2_k_ref(const float *src, void *dst, int64_t n) {
    block_q2_k *b = dst;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        const float *x = src;
        float max_scale = 0, max_min = 0; /* the min is subtracted, so scales are >= 0 */
        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] =
                fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) b[i].scales[j] = (uint8_t)qu_nearest_int(iscale * scales[j]);
            b[i].d = cera_f32_to_f16(max_scale / 15.f);
        } else {
            memset(b[i].scales, 0, sizeof b[i].scales);
            b[i].d = cera_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < QK_K / 16; j++)
                b[i].scales[j] = (uint8_t)(b[i].scales[j] | qu_nearest_int(iscale * mins[j]) << 4);
            b[i].dmin = cera_f32_to_f16(max_min / 15.f);
        } else {
            b[i].dmin = cera_f32_to_f16(0.f);
        }
        /* Re-round every element against the scale and min it will be decoded with. */
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = cera_f16_to_f32(b[i].d) * (b[i].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = cera_f16_to_f32(b[i].dmin) * (b[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)qu_clamp(qu_nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, b[i].qs);
    }
}

/* ---- q3_k --------------------------------------------------------------------------- */

void cera_dequant_row_q3_k(const void *src, float *dst, int64_t n) {
    const block_q3_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d_all = cera_f16_to_f32(b[i].d);
        int8_t scales[16];
        q3_k_scales(b[i].scales, scales);
        const uint8_t *q = b[i].qs;
        int is = 0, bit = 0;
        for (int h = 0; h < QK_K; h += 128, q += 32)
            for (int shift = 0; shift < 8; shift += 2, bit++)
                for (int half = 0; half < 2; half++, is++) {
                    const float dl = d_all * scales[is];
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        const int hi = (b[i].hmask[l] >> bit) & 1;
                        *dst++ = dl * (((q[l] >> shift) & 3) - (hi ? 0 : 4));
                    }
                }
    }
}

void cera_quantize_row_q3_k_ref(const float *src, void *dst, int64_t n) {
    block_q3_k *b = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        const float *x = src;
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = fit_q3_scale(16, 4, x + 16 * j, L + 16 * j);
            const float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        /* 16 scales of 6 bits (offset 32): low nibbles in bytes 0..7, top 2 bits in 8..11. */
        memset(b[i].scales, 0, 12);
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                int8_t l8 = (int8_t)qu_nearest_int(iscale * scales[j]);
                const int l = qu_clamp(l8, -32, 31) + 32;
                if (j < 8)
                    b[i].scales[j] = (uint8_t)(l & 0xF);
                else
                    b[i].scales[j - 8] = (uint8_t)(b[i].scales[j - 8] | (l & 0xF) << 4);
                b[i].scales[j % 4 + 8] = (uint8_t)(b[i].scales[j % 4 + 8] | (l >> 4) << (2 * (j / 4)));
            }
            b[i].d = cera_f32_to_f16(1 / iscale);
        } else {
            b[i].d = cera_f32_to_f16(0.f);
        }
        int8_t sc[16];
        q3_k_scales(b[i].scales, sc);
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = cera_f16_to_f32(b[i].d) * sc[j];
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(qu_clamp(qu_nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* High bit of element j goes to bit j / 32 of hmask[j % 32]; qs keeps the low 2 bits. */
        memset(b[i].hmask, 0, QK_K / 8);
        uint8_t low[QK_K];
        for (int j = 0; j < QK_K; j++) {
            if (L[j] > 3) {
                b[i].hmask[j % 32] = (uint8_t)(b[i].hmask[j % 32] | 1 << (j / 32));
                L[j] = (int8_t)(L[j] - 4);
            }
            low[j] = (uint8_t)L[j];
        }
        pack_2bit(low, b[i].qs);
    }
}

/* ---- q4_k / q5_k: 8 sub-blocks of 32 with 6-bit scales and mins --------------------- */

/*
 * The part q4_k and q5_k share: fits scale/min of each 32-element sub-block, quantizes
 * them to 6 bits against the f16 d/dmin, and re-rounds every element (0..nmax) into L.
 */
static void quantize_k_scale_min(const float *x, int nmax, float rmin, int nstep, cera_f16 *d_out,
                                 cera_f16 *dmin_out, uint8_t packed[K_SCALE_SIZE], uint8_t L[QK_K]) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_scale_min(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f,
                                  nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; j++) {
        /* The reference stores the rounded values in uint8_t before clamping to 63. */
        const uint8_t ls = (uint8_t)qu_min(63, (uint8_t)qu_nearest_int(inv_scale * scales[j]));
        const uint8_t lm = (uint8_t)qu_min(63, (uint8_t)qu_nearest_int(inv_min * mins[j]));
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
            packed[j - 4] = (uint8_t)(packed[j - 4] | (ls >> 4) << 6);
            packed[j] = (uint8_t)(packed[j] | (lm >> 4) << 6);
        }
    }
    *d_out = cera_f32_to_f16(max_scale / 63.f);
    *dmin_out = cera_f32_to_f16(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, mn;
        k_scale_min(j, packed, &sc, &mn);
        const float d = cera_f16_to_f32(*d_out) * sc;
        if (d == 0.0f) continue;
        const float dm = cera_f16_to_f32(*dmin_out) * mn;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)qu_clamp(qu_nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void cera_dequant_row_q4_k(const void *src, float *dst, int64_t n) {
    const block_q4_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = cera_f16_to_f32(b[i].d);
        const float dmin = cera_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int j = 0; j < QK_K / 32; j += 2, q += 32) {
            uint8_t sc, mn;
            k_scale_min(j, b[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            k_scale_min(j + 1, b[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *dst++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void cera_quantize_row_q4_k_ref(const float *src, void *dst, int64_t n) {
    block_q4_k *b = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_k_scale_min(src, 15, -1.f, 20, &b[i].d, &b[i].dmin, b[i].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
    }
}

void cera_dequant_row_q5_k(const void *src, float *dst, int64_t n) {
    const block_q5_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = cera_f16_to_f32(b[i].d);
        const float dmin = cera_f16_to_f32(b[i].dmin);
        const uint8_t *ql = b[i].qs;
        for (int j = 0; j < QK_K / 32; j += 2, ql += 32) {
            uint8_t sc, mn;
            k_scale_min(j, b[i].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            k_scale_min(j + 1, b[i].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * ((ql[l] & 0xF) + ((b[i].qh[l] >> j) & 1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * ((ql[l] >> 4) + ((b[i].qh[l] >> (j + 1)) & 1 ? 16 : 0)) - m2;
        }
    }
}

void cera_quantize_row_q5_k_ref(const float *src, void *dst, int64_t n) {
    block_q5_k *b = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_k_scale_min(src, 31, -0.5f, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
        memset(b[i].qh, 0, QK_K / 8);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                b[i].qs[32 * c + l] = (uint8_t)((lo & 0xF) | (hi & 0xF) << 4);
                b[i].qh[l] = (uint8_t)(b[i].qh[l] | (lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
    }
}

/* ---- q6_k --------------------------------------------------------------------------- */

void cera_dequant_row_q6_k(const void *src, float *dst, int64_t n) {
    const block_q6_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = cera_f16_to_f32(b[i].d);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            float *y = dst + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
        dst += QK_K;
    }
}

void cera_quantize_row_q6_k_ref(const float *src, void *dst, int64_t n) {
    block_q6_k *b = dst;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        const float *x = src;
        float max_scale = 0, max_abs_scale = 0;
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = fit_symmetric_scale(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs_scale < GROUP_EPS) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        b[i].d = cera_f32_to_f16(1 / iscale);
        for (int j = 0; j < QK_K / 16; j++)
            b[i].scales[j] = (int8_t)qu_min(127, qu_nearest_int(iscale * scales[j]));
        for (int j = 0; j < QK_K / 16; j++) {
            const float d = cera_f16_to_f32(b[i].d) * b[i].scales[j];
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(qu_clamp(qu_nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | (Lh[l + 64] & 0xF) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | (Lh[l + 96] & 0xF) << 4);
                qh[l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                                  (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

/* ---- q8_k: the k-quants' activation type --------------------------------------------- */

void cera_dequant_row_q8_k(const void *src, float *dst, int64_t n) {
    const block_q8_k *b = src;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++) *dst++ = b[i].d * b[i].qs[j];
}

void cera_quantize_row_q8_k_ref(const float *src, void *dst, int64_t n) {
    block_q8_k *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax;
        const float max = qu_signed_absmax(src, QK_K, &amax);
        if (amax == 0.0f) {
            /* The reference leaves bsums unwritten here; zeros are what they would sum to. */
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* -127 (not -128) so that the quants never need the value -128. */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) b[i].qs[j] = (int8_t)qu_min(127, qu_nearest_int(iscale * src[j]));
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += b[i].qs[16 * g + l];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1 / iscale;
    }
}

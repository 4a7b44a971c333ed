/*
 * kernels_neon.c — the NEON tier for aarch64 (ARMv8.2-A with dotprod and fp16): sdot-based
 * dot products for the common quantized types, f32/f16/bf16 dots, and activation quantizers
 * byte-exact with quant_act.c. Registered over the scalar table by kernels.c when HWCAP
 * reports asimddp (dotprod) and fp16; types without a kernel here keep the scalar ones.
 *
 * Unlike x86, sdot multiplies signed by signed bytes, so weights are unpacked straight to
 * their signed values (q4_0: nibble - 8, q6_k: u - 32, ...). Sub-block scales multiply the
 * int32 lanes exactly (vmlaq_n_s32); block scales are applied in float per block, summed in
 * 4 lanes (hence the tests' float tolerance against the scalar reference).
 */
#include <arm_neon.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "core/fp16.h"
#include "tensor/blocks.h"

static inline float f16(cera_f16 h) {
    __fp16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
}

/* 16 packed nibbles -> low (elements 0..15) and high (16..31) bytes. */
static inline void nibbles(const uint8_t *p, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t b = vld1q_u8(p);
    *lo = vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(0x0F)));
    *hi = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
}

static inline int32x4_t dot32(int32x4_t acc, int8x16_t x0, int8x16_t x1, const int8_t *y) {
    return vdotq_s32(vdotq_s32(acc, x0, vld1q_s8(y)), x1, vld1q_s8(y + 16));
}

/* ---- 32-element blocks ---- */

static void dot_q8_0_q8_0_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q8_0 *x = w;
    const block_q8_0 *y = a;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / QK8_0; b++) {
        const int32x4_t p = dot32(vdupq_n_s32(0), vld1q_s8(x[b].qs), vld1q_s8(x[b].qs + 16), y[b].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), f16(x[b].d) * f16(y[b].d));
    }
    *s = vaddvq_f32(acc);
}

static void dot_q4_0_q8_0_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    const int8x16_t eight = vdupq_n_s8(8);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int8x16_t lo, hi;
        nibbles(x[b].qs, &lo, &hi);
        const int32x4_t p = dot32(vdupq_n_s32(0), vsubq_s8(lo, eight), vsubq_s8(hi, eight), y[b].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), f16(x[b].d) * f16(y[b].d));
    }
    *s = vaddvq_f32(acc);
}

static void dot_q4_1_q8_1_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float summs = 0.0f;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        int8x16_t lo, hi;
        nibbles(x[b].qs, &lo, &hi);
        const int32x4_t p = dot32(vdupq_n_s32(0), lo, hi, y[b].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), f16(x[b].d) * f16(y[b].d));
        summs += f16(x[b].m) * f16(y[b].s);
    }
    *s = vaddvq_f32(acc) + summs;
}

static void dot_iq4_nl_q8_0_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    const int8x16_t table = vld1q_s8(kvalues_iq4nl);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / QK4_NL; b++) {
        int8x16_t lo, hi;
        nibbles(x[b].qs, &lo, &hi);
        lo = vqtbl1q_s8(table, vreinterpretq_u8_s8(lo));
        hi = vqtbl1q_s8(table, vreinterpretq_u8_s8(hi));
        const int32x4_t p = dot32(vdupq_n_s32(0), lo, hi, y[b].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), f16(y[b].d) * f16(x[b].d));
    }
    *s = vaddvq_f32(acc);
}

/* 32 bits -> 32 bytes (lo: elements 0..15, hi: 16..31), 0x10 where the bit is set. */
static inline void bits32_to_0x10(const uint8_t *p, uint8x16_t *lo, uint8x16_t *hi) {
    uint32_t bits;
    memcpy(&bits, p, 4);
    const uint8x16_t v = vreinterpretq_u8_u32(vdupq_n_u32(bits));
    const uint8x16_t idx_lo = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    const uint8x16_t idx_hi = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
    const uint8x16_t bit = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    *lo = vandq_u8(vtstq_u8(vqtbl1q_u8(v, idx_lo), bit), vdupq_n_u8(0x10));
    *hi = vandq_u8(vtstq_u8(vqtbl1q_u8(v, idx_hi), bit), vdupq_n_u8(0x10));
}

static void dot_q5_0_q8_0_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    const int8x16_t k16 = vdupq_n_s8(16);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int8x16_t lo, hi;
        uint8x16_t hlo, hhi;
        nibbles(x[b].qs, &lo, &hi);
        bits32_to_0x10(x[b].qh, &hlo, &hhi);
        lo = vsubq_s8(vorrq_s8(lo, vreinterpretq_s8_u8(hlo)), k16);
        hi = vsubq_s8(vorrq_s8(hi, vreinterpretq_s8_u8(hhi)), k16);
        const int32x4_t p = dot32(vdupq_n_s32(0), lo, hi, y[b].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), f16(x[b].d) * f16(y[b].d));
    }
    *s = vaddvq_f32(acc);
}

static void dot_q5_1_q8_1_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float summs = 0.0f;
    for (int64_t b = 0; b < n / QK8_1; b++) {
        int8x16_t lo, hi;
        uint8x16_t hlo, hhi;
        nibbles(x[b].qs, &lo, &hi);
        bits32_to_0x10(x[b].qh, &hlo, &hhi);
        lo = vorrq_s8(lo, vreinterpretq_s8_u8(hlo));
        hi = vorrq_s8(hi, vreinterpretq_s8_u8(hhi));
        const int32x4_t p = dot32(vdupq_n_s32(0), lo, hi, y[b].qs);
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), f16(x[b].d) * f16(y[b].d));
        summs += f16(x[b].m) * f16(y[b].s);
    }
    *s = vaddvq_f32(acc) + summs;
}

/* ---- k-quants ---- */

static void dot_q4_k_q8_k_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_k *x = w;
    const block_q8_k *y = a;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float summ = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t isum = vdupq_n_s32(0);
        int mins = 0;
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            k_scale_min(2 * c, x[b].scales, &sc0, &m0);
            k_scale_min(2 * c + 1, x[b].scales, &sc1, &m1);
            const int8_t *q8 = y[b].qs + 64 * c;
            const uint8x16_t q0 = vld1q_u8(x[b].qs + 32 * c), q1 = vld1q_u8(x[b].qs + 32 * c + 16);
            const uint8x16_t m4 = vdupq_n_u8(0x0F);
            const int32x4_t plo = dot32(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(q0, m4)),
                                        vreinterpretq_s8_u8(vandq_u8(q1, m4)), q8);
            const int32x4_t phi = dot32(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)),
                                        vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), q8 + 32);
            isum = vmlaq_n_s32(isum, plo, sc0);
            isum = vmlaq_n_s32(isum, phi, sc1);
            mins += m0 * (y[b].bsums[4 * c] + y[b].bsums[4 * c + 1]) +
                    m1 * (y[b].bsums[4 * c + 2] + y[b].bsums[4 * c + 3]);
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(isum), f16(x[b].d) * y[b].d);
        summ += f16(x[b].dmin) * y[b].d * (float)mins;
    }
    *s = vaddvq_f32(acc) - summ;
}

static void dot_q5_k_q8_k_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q5_k *x = w;
    const block_q8_k *y = a;
    float32x4_t acc = vdupq_n_f32(0.0f);
    float summ = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), one = vdupq_n_u8(1);
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t isum = vdupq_n_s32(0);
        int mins = 0;
        const uint8x16_t h0 = vld1q_u8(x[b].qh), h1 = vld1q_u8(x[b].qh + 16);
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            k_scale_min(2 * c, x[b].scales, &sc0, &m0);
            k_scale_min(2 * c + 1, x[b].scales, &sc1, &m1);
            const int8_t *q8 = y[b].qs + 64 * c;
            const uint8x16_t q0 = vld1q_u8(x[b].qs + 32 * c), q1 = vld1q_u8(x[b].qs + 32 * c + 16);
            /* bit j of qh[l] is bit 4 of element 32j + l (sub-block j). */
            const int8x16_t shl = vdupq_n_s8((int8_t)(-2 * c)), shh = vdupq_n_s8((int8_t)(-2 * c - 1));
            const uint8x16_t b0lo = vshlq_n_u8(vandq_u8(vshlq_u8(h0, shl), one), 4);
            const uint8x16_t b1lo = vshlq_n_u8(vandq_u8(vshlq_u8(h1, shl), one), 4);
            const uint8x16_t b0hi = vshlq_n_u8(vandq_u8(vshlq_u8(h0, shh), one), 4);
            const uint8x16_t b1hi = vshlq_n_u8(vandq_u8(vshlq_u8(h1, shh), one), 4);
            const int32x4_t plo = dot32(vdupq_n_s32(0), vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q0, m4), b0lo)),
                                        vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q1, m4), b1lo)), q8);
            const int32x4_t phi =
                dot32(vdupq_n_s32(0), vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q0, 4), b0hi)),
                      vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q1, 4), b1hi)), q8 + 32);
            isum = vmlaq_n_s32(isum, plo, sc0);
            isum = vmlaq_n_s32(isum, phi, sc1);
            mins += m0 * (y[b].bsums[4 * c] + y[b].bsums[4 * c + 1]) +
                    m1 * (y[b].bsums[4 * c + 2] + y[b].bsums[4 * c + 3]);
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(isum), f16(x[b].d) * y[b].d);
        summ += f16(x[b].dmin) * y[b].d * (float)mins;
    }
    *s = vaddvq_f32(acc) - summ;
}

/* q2_k: u in 0..3, 16 scales and mins of 16 elements (4 bits each). */
static void dot_q2_k_q8_k_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q2_k *x = w;
    const block_q8_k *y = a;
    const uint8x16_t m3 = vdupq_n_u8(3);
    float32x4_t acc = vdupq_n_f32(0.0f);
    float summ = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t isum = vdupq_n_s32(0);
        int mins = 0;
        for (int g = 0; g < 16; g++) mins += y[b].bsums[g] * (x[b].scales[g] >> 4);
        for (int h = 0; h < 2; h++)
            for (int half = 0; half < 2; half++) {
                const uint8x16_t q = vld1q_u8(x[b].qs + 32 * h + 16 * half);
                for (int sh = 0; sh < 4; sh++) {
                    const int e = 128 * h + 32 * sh + 16 * half; /* one group of 16 */
                    const int8x16_t u =
                        vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q, vdupq_n_s8((int8_t)(-2 * sh))), m3));
                    isum = vmlaq_n_s32(isum, vdotq_s32(vdupq_n_s32(0), u, vld1q_s8(y[b].qs + e)),
                                       x[b].scales[e / 16] & 0xF);
                }
            }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(isum), y[b].d * f16(x[b].d));
        summ += y[b].d * f16(x[b].dmin) * (float)mins;
    }
    *s = vaddvq_f32(acc) - summ;
}

/* q3_k: x = low 2 bits - 4 where the high bit is clear, 16 signed 6-bit scales. */
static void dot_q3_k_q8_k_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q3_k *x = w;
    const block_q8_k *y = a;
    const uint8x16_t m3 = vdupq_n_u8(3);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / QK_K; b++) {
        int8_t sc[16];
        q3_k_scales(x[b].scales, sc);
        int32x4_t isum = vdupq_n_s32(0);
        for (int half = 0; half < 2; half++) {
            const uint8x16_t hm = vld1q_u8(x[b].hmask + 16 * half);
            for (int h = 0; h < 2; h++) {
                const uint8x16_t q = vld1q_u8(x[b].qs + 32 * h + 16 * half);
                for (int sh = 0; sh < 4; sh++) {
                    const int e = 128 * h + 32 * sh + 16 * half;
                    const uint8x16_t low = vandq_u8(vshlq_u8(q, vdupq_n_s8((int8_t)(-2 * sh))), m3);
                    const uint8x16_t set = vtstq_u8(hm, vdupq_n_u8((uint8_t)(1 << (4 * h + sh))));
                    const int8x16_t v =
                        vsubq_s8(vreinterpretq_s8_u8(low), vreinterpretq_s8_u8(vbicq_u8(vdupq_n_u8(4), set)));
                    isum = vmlaq_n_s32(isum, vdotq_s32(vdupq_n_s32(0), v, vld1q_s8(y[b].qs + e)), sc[e / 16]);
                }
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(isum), f16(x[b].d) * y[b].d);
    }
    *s = vaddvq_f32(acc);
}

/* q6_k: u in 0..63 from 4 + 2 bits, x = u - 32, 16 scales of 16 elements. */
static void dot_q6_k_q8_k_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_q6_k *x = w;
    const block_q8_k *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x30);
    const int8x16_t k32 = vdupq_n_s8(32);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t isum = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            for (int half = 0; half < 2; half++) { /* l = 0..15 and 16..31 */
                const int o = 16 * half;
                const uint8x16_t l0 = vld1q_u8(x[b].ql + 64 * h + o),
                                 l1 = vld1q_u8(x[b].ql + 64 * h + 32 + o);
                const uint8x16_t qh = vld1q_u8(x[b].qh + 32 * h + o);
                const uint8x16_t u[4] = {
                    vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(qh, 4), m2)),
                    vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(qh, 2), m2)),
                    vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(qh, m2)),
                    vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(qh, 2), m2)),
                };
                for (int k = 0; k < 4; k++) {
                    const int e = 128 * h + 32 * k + o; /* 16 elements: one scale group */
                    const int32x4_t p = vdotq_s32(vdupq_n_s32(0), vsubq_s8(vreinterpretq_s8_u8(u[k]), k32),
                                                  vld1q_s8(y[b].qs + e));
                    isum = vmlaq_n_s32(isum, p, x[b].scales[e / 16]);
                }
            }
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(isum), f16(x[b].d) * y[b].d);
    }
    *s = vaddvq_f32(acc);
}

static void dot_iq4_xs_q8_k_neon(int64_t n, float *s, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8_k *y = a;
    const int8x16_t table = vld1q_s8(kvalues_iq4nl);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / QK_K; b++) {
        int32x4_t isum = vdupq_n_s32(0);
        for (int j = 0; j < 8; j++) {
            int8x16_t lo, hi;
            nibbles(x[b].qs + 16 * j, &lo, &hi);
            lo = vqtbl1q_s8(table, vreinterpretq_u8_s8(lo));
            hi = vqtbl1q_s8(table, vreinterpretq_u8_s8(hi));
            isum = vmlaq_n_s32(isum, dot32(vdupq_n_s32(0), lo, hi, y[b].qs + 32 * j), iq4_xs_scale(&x[b], j));
        }
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(isum), f16(x[b].d) * y[b].d);
    }
    *s = vaddvq_f32(acc);
}

/* ---- float types ---- */

static void dot_f32_neon(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++)
            acc[k] = vfmaq_f32(acc[k], vld1q_f32(x + i + 4 * k), vld1q_f32(y + i + 4 * k));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static void dot_f16_neon(int64_t n, float *s, const void *w, const void *a) {
    const cera_f16 *x = w, *y = a;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 2; k++) {
            const float16x8_t xv = vreinterpretq_f16_u16(vld1q_u16(x + i + 8 * k));
            const float16x8_t yv = vreinterpretq_f16_u16(vld1q_u16(y + i + 8 * k));
            acc[2 * k] =
                vfmaq_f32(acc[2 * k], vcvt_f32_f16(vget_low_f16(xv)), vcvt_f32_f16(vget_low_f16(yv)));
            acc[2 * k + 1] = vfmaq_f32(acc[2 * k + 1], vcvt_high_f32_f16(xv), vcvt_high_f32_f16(yv));
        }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++) sum += f16(x[i]) * f16(y[i]);
    *s = sum;
}

static void dot_bf16_neon(int64_t n, float *s, const void *w, const void *a) {
    const cera_bf16 *x = w, *y = a;
    float32x4_t acc[2] = {vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t xv = vld1q_u16(x + i), yv = vld1q_u16(y + i);
        acc[0] = vfmaq_f32(acc[0], vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(xv), 16)),
                           vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(yv), 16)));
        acc[1] = vfmaq_f32(acc[1], vreinterpretq_f32_u32(vshll_high_n_u16(xv, 16)),
                           vreinterpretq_f32_u32(vshll_high_n_u16(yv, 16)));
    }
    float sum = vaddvq_f32(vaddq_f32(acc[0], acc[1]));
    for (; i < n; i++) sum += cera_bf16_to_f32(x[i]) * cera_bf16_to_f32(y[i]);
    *s = sum;
}

/* ---- activation quantizers (byte-exact with quant_act.c) ---- */

/* 32 floats times id, rounded half to even (vcvtnq), to int8; returns the sum of the quants. */
static inline int round_pack32(const float *x, float id, int8_t *out) {
    int32x4_t q[8];
    for (int k = 0; k < 8; k++) q[k] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4 * k), id));
    int32x4_t sum = vdupq_n_s32(0);
    for (int k = 0; k < 8; k++) sum = vaddq_s32(sum, q[k]);
    for (int k = 0; k < 2; k++) {
        const int16x8_t lo = vcombine_s16(vqmovn_s32(q[4 * k]), vqmovn_s32(q[4 * k + 1]));
        const int16x8_t hi = vcombine_s16(vqmovn_s32(q[4 * k + 2]), vqmovn_s32(q[4 * k + 3]));
        vst1q_s8(out + 16 * k, vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)));
    }
    return vaddvq_s32(sum);
}

static inline float amax32(const float *x) {
    float32x4_t m = vabsq_f32(vld1q_f32(x));
    for (int k = 1; k < 8; k++) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + 4 * k)));
    return vmaxvq_f32(m);
}

static void quantize_q8_0_neon(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        const float amax = amax32(x);
        y[b].d = cera_f32_to_f16(amax / 127.f);
        round_pack32(x, amax != 0.0f ? 127.f / amax : 0.0f, y[b].qs);
    }
}

static void quantize_q8_1_neon(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / QK8_1; b++, x += QK8_1) {
        const float amax = amax32(x);
        const float d = amax / 127.f;
        y[b].d = cera_f32_to_f16(d);
        const int sum = round_pack32(x, amax != 0.0f ? 127.f / amax : 0.0f, y[b].qs);
        y[b].s = cera_f32_to_f16(d * (float)sum);
    }
}

static void quantize_q8_k_neon(const float *x, void *vy, int64_t n) {
    block_q8_k *y = vy;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int k = 0; k < QK_K; k += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + k)));
        const float amax = vmaxvq_f32(m);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0.0f;
        for (int k = 0; k < QK_K; k++)
            if (x[k] == amax || x[k] == -amax) {
                max = x[k]; /* the first of largest magnitude, as the reference */
                break;
            }
        const float iscale = -127.f / max;
        for (int k = 0; k < QK_K; k += 32) round_pack32(x + k, iscale, y[b].qs + k);
        for (int g = 0; g < 16; g++) y[b].bsums[g] = (int16_t)vaddlvq_s8(vld1q_s8(y[b].qs + 16 * g));
        y[b].d = 1 / iscale;
    }
}

static void quantize_f16_neon(const float *x, void *vy, int64_t n) {
    cera_f16 *y = vy;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++) y[i] = cera_f32_to_f16(x[i]);
}

void cera_cpu_register_neon(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    ops[CERA_TYPE_Q8_0].vec_dot = dot_q8_0_q8_0_neon;
    ops[CERA_TYPE_Q4_0].vec_dot = dot_q4_0_q8_0_neon;
    ops[CERA_TYPE_Q4_1].vec_dot = dot_q4_1_q8_1_neon;
    ops[CERA_TYPE_IQ4_NL].vec_dot = dot_iq4_nl_q8_0_neon;
    ops[CERA_TYPE_Q5_0].vec_dot = dot_q5_0_q8_0_neon;
    ops[CERA_TYPE_Q5_1].vec_dot = dot_q5_1_q8_1_neon;
    ops[CERA_TYPE_Q2_K].vec_dot = dot_q2_k_q8_k_neon;
    ops[CERA_TYPE_Q3_K].vec_dot = dot_q3_k_q8_k_neon;
    ops[CERA_TYPE_Q4_K].vec_dot = dot_q4_k_q8_k_neon;
    ops[CERA_TYPE_Q5_K].vec_dot = dot_q5_k_q8_k_neon;
    ops[CERA_TYPE_Q6_K].vec_dot = dot_q6_k_q8_k_neon;
    ops[CERA_TYPE_IQ4_XS].vec_dot = dot_iq4_xs_q8_k_neon;
    ops[CERA_TYPE_F32].vec_dot = dot_f32_neon;
    ops[CERA_TYPE_F16].vec_dot = dot_f16_neon;
    ops[CERA_TYPE_BF16].vec_dot = dot_bf16_neon;
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_0, quantize_q8_0_neon);
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_1, quantize_q8_1_neon);
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_K, quantize_q8_k_neon);
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_F16, quantize_f16_neon);
}

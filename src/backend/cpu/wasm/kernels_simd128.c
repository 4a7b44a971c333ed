/*
 * kernels_simd128.c — the WebAssembly SIMD128 tier: dot products for f32, f16, q4_0, q4_1,
 * q8_0, q4_k and q6_k, and the q8_0/q8_1/q8_k activation quantizers byte-exact with
 * quant_act.c. WebAssembly cannot ask the machine what it has, so this tier is chosen at
 * compile time (a build with -msimd128, kernels.c); the JS loader checks that the engine
 * runs SIMD before it instantiates the module (wasm/cera.mjs). Types without a kernel here
 * keep the scalar ones.
 *
 * SIMD128 has no 8-bit dot product (relaxed SIMD is not in emscripten 3.1.6): bytes are
 * widened to 16 bits and multiplied pairwise into 32-bit lanes (i32x4.dot_i16x8_s), which is
 * exact. As in the NEON tier, integer sums are exact and block scales are applied in float
 * per block, summed in 4 lanes (hence the tests' float tolerance against the scalar
 * reference). There is no f16 conversion instruction either: halves become floats by bit
 * arithmetic (exact, subnormals, infinities and NaNs included).
 */
#include <string.h>
#include <wasm_simd128.h>

#include "backend/cpu/kernels_impl.h"
#include "core/fp16.h"
#include "tensor/blocks.h"

#define F16(h) cera_f16_to_f32(h)

static inline float hsum_f32(v128_t v) {
    return (wasm_f32x4_extract_lane(v, 0) + wasm_f32x4_extract_lane(v, 1)) +
           (wasm_f32x4_extract_lane(v, 2) + wasm_f32x4_extract_lane(v, 3));
}

static inline int hsum_i32(v128_t v) {
    return wasm_i32x4_extract_lane(v, 0) + wasm_i32x4_extract_lane(v, 1) + wasm_i32x4_extract_lane(v, 2) +
           wasm_i32x4_extract_lane(v, 3);
}

/* acc + the 16 products a_i * b_i of signed bytes, in 4 int32 lanes. */
static inline v128_t dot_i8x16(v128_t acc, v128_t a, v128_t b) {
    acc = wasm_i32x4_add(
        acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(a), wasm_i16x8_extend_low_i8x16(b)));
    return wasm_i32x4_add(
        acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(a), wasm_i16x8_extend_high_i8x16(b)));
}

/* 32 elements: lo (0..15) and hi (16..31) against 32 bytes at y. */
static inline v128_t dot32(v128_t lo, v128_t hi, const int8_t *y) {
    const v128_t acc = dot_i8x16(wasm_i32x4_splat(0), lo, wasm_v128_load(y));
    return dot_i8x16(acc, hi, wasm_v128_load(y + 16));
}

/* 16 packed nibbles -> low (elements 0..15) and high (16..31) bytes. */
static inline void nibbles(const uint8_t *p, v128_t *lo, v128_t *hi) {
    const v128_t b = wasm_v128_load(p);
    *lo = wasm_v128_and(b, wasm_i8x16_splat(0x0F));
    *hi = wasm_u8x16_shr(b, 4);
}

/* ---- 32-element blocks ---- */

/* [sum(p0), sum(p1), sum(p2), sum(p3)]: four blocks' int32 lanes reduced at once. */
static inline v128_t hsum4_i32(v128_t p0, v128_t p1, v128_t p2, v128_t p3) {
    const v128_t a =
        wasm_i32x4_add(wasm_i32x4_shuffle(p0, p1, 0, 4, 1, 5), wasm_i32x4_shuffle(p0, p1, 2, 6, 3, 7));
    const v128_t b =
        wasm_i32x4_add(wasm_i32x4_shuffle(p2, p3, 0, 4, 1, 5), wasm_i32x4_shuffle(p2, p3, 2, 6, 3, 7));
    return wasm_i32x4_add(wasm_i32x4_shuffle(a, b, 0, 1, 4, 5), wasm_i32x4_shuffle(a, b, 2, 3, 6, 7));
}

static inline v128_t half4_to_f32(v128_t h);

/* Four halves (given as lanes) as floats. */
static inline v128_t halves4(cera_f16 a, cera_f16 b, cera_f16 c, cera_f16 d) {
    return half4_to_f32(wasm_i32x4_make(a, b, c, d));
}

/* The 32-element block types go four blocks at a time: each block's integer dot product stays
 * in 4 lanes, the four are reduced together (hsum4_i32) and scaled by a vector of the four
 * blocks' d_w * d_a, so the per-block float work (two f16 conversions and a multiply) runs four
 * wide. BLOCK_DOT(b) is the int32x4 dot of block b; a tail of fewer than four blocks goes one
 * by one. */
#define DOT_BLOCKS32(nb, x, y, BLOCK_DOT, acc)                                                               \
    do {                                                                                                     \
        int64_t b_ = 0;                                                                                      \
        for (; b_ + 4 <= (nb); b_ += 4) {                                                                    \
            const v128_t sums =                                                                              \
                hsum4_i32(BLOCK_DOT(b_), BLOCK_DOT(b_ + 1), BLOCK_DOT(b_ + 2), BLOCK_DOT(b_ + 3));           \
            const v128_t d = wasm_f32x4_mul(halves4(x[b_].d, x[b_ + 1].d, x[b_ + 2].d, x[b_ + 3].d),         \
                                            halves4(y[b_].d, y[b_ + 1].d, y[b_ + 2].d, y[b_ + 3].d));        \
            acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(sums), d));                    \
        }                                                                                                    \
        for (; b_ < (nb); b_++)                                                                              \
            acc = wasm_f32x4_add(acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(BLOCK_DOT(b_)),                \
                                                     wasm_f32x4_splat(F16(x[b_].d) * F16(y[b_].d))));        \
    } while (0)

static inline v128_t block_q8_0_dot(const block_q8_0 *x, const block_q8_0 *y) {
    return dot32(wasm_v128_load(x->qs), wasm_v128_load(x->qs + 16), y->qs);
}

static inline v128_t block_q4_0_dot(const block_q4_0 *x, const block_q8_0 *y) {
    const v128_t eight = wasm_i8x16_splat(8);
    v128_t lo, hi;
    nibbles(x->qs, &lo, &hi);
    return dot32(wasm_i8x16_sub(lo, eight), wasm_i8x16_sub(hi, eight), y->qs);
}

static inline v128_t block_q4_1_dot(const block_q4_1 *x, const block_q8_1 *y) {
    v128_t lo, hi;
    nibbles(x->qs, &lo, &hi);
    return dot32(lo, hi, y->qs);
}

static void dot_q8_0_q8_0_simd128(int64_t n, float *s, const void *w, const void *a) {
    const block_q8_0 *x = w;
    const block_q8_0 *y = a;
    v128_t acc = wasm_f32x4_splat(0.0f);
#define BLOCK_DOT(b) block_q8_0_dot(&x[b], &y[b])
    DOT_BLOCKS32(n / QK8_0, x, y, BLOCK_DOT, acc);
#undef BLOCK_DOT
    *s = hsum_f32(acc);
}

static void dot_q4_0_q8_0_simd128(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    v128_t acc = wasm_f32x4_splat(0.0f);
#define BLOCK_DOT(b) block_q4_0_dot(&x[b], &y[b])
    DOT_BLOCKS32(n / QK8_0, x, y, BLOCK_DOT, acc);
#undef BLOCK_DOT
    *s = hsum_f32(acc);
}

static void dot_q4_1_q8_1_simd128(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    const int64_t nb = n / QK8_1;
    v128_t acc = wasm_f32x4_splat(0.0f);
#define BLOCK_DOT(b) block_q4_1_dot(&x[b], &y[b])
    DOT_BLOCKS32(nb, x, y, BLOCK_DOT, acc);
#undef BLOCK_DOT
    /* the minimums: m_w * s_a per block (s_a = d_a * sum of the block's quants) */
    v128_t mins = wasm_f32x4_splat(0.0f);
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4)
        mins = wasm_f32x4_add(mins, wasm_f32x4_mul(halves4(x[b].m, x[b + 1].m, x[b + 2].m, x[b + 3].m),
                                                   halves4(y[b].s, y[b + 1].s, y[b + 2].s, y[b + 3].s)));
    float summs = hsum_f32(mins);
    for (; b < nb; b++) summs += F16(x[b].m) * F16(y[b].s);
    *s = hsum_f32(acc) + summs;
}

/* ---- k-quants ---- */

static void dot_q4_k_q8_k_simd128(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_k *x = w;
    const block_q8_k *y = a;
    const v128_t m4 = wasm_i8x16_splat(0x0F);
    v128_t acc = wasm_f32x4_splat(0.0f);
    float summ = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        v128_t isum = wasm_i32x4_splat(0);
        int mins = 0;
        for (int c = 0; c < 4; c++) { /* 64 elements: sub-blocks 2c (low nibbles) and 2c + 1 (high) */
            uint8_t sc0, m0, sc1, m1;
            k_scale_min(2 * c, x[b].scales, &sc0, &m0);
            k_scale_min(2 * c + 1, x[b].scales, &sc1, &m1);
            const int8_t *q8 = y[b].qs + 64 * c;
            const v128_t q0 = wasm_v128_load(x[b].qs + 32 * c), q1 = wasm_v128_load(x[b].qs + 32 * c + 16);
            const v128_t plo = dot32(wasm_v128_and(q0, m4), wasm_v128_and(q1, m4), q8);
            const v128_t phi = dot32(wasm_u8x16_shr(q0, 4), wasm_u8x16_shr(q1, 4), q8 + 32);
            isum = wasm_i32x4_add(isum, wasm_i32x4_mul(plo, wasm_i32x4_splat(sc0)));
            isum = wasm_i32x4_add(isum, wasm_i32x4_mul(phi, wasm_i32x4_splat(sc1)));
            mins += m0 * (y[b].bsums[4 * c] + y[b].bsums[4 * c + 1]) +
                    m1 * (y[b].bsums[4 * c + 2] + y[b].bsums[4 * c + 3]);
        }
        acc = wasm_f32x4_add(
            acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(isum), wasm_f32x4_splat(F16(x[b].d) * y[b].d)));
        summ += F16(x[b].dmin) * y[b].d * (float)mins;
    }
    *s = hsum_f32(acc) - summ;
}

/* q6_k: u in 0..63 from 4 + 2 bits, x = u - 32, 16 scales of 16 elements. */
static void dot_q6_k_q8_k_simd128(int64_t n, float *s, const void *w, const void *a) {
    const block_q6_k *x = w;
    const block_q8_k *y = a;
    const v128_t m4 = wasm_i8x16_splat(0x0F), m2 = wasm_i8x16_splat(0x30), k32 = wasm_i8x16_splat(32);
    v128_t acc = wasm_f32x4_splat(0.0f);
    for (int64_t b = 0; b < n / QK_K; b++) {
        v128_t isum = wasm_i32x4_splat(0);
        for (int h = 0; h < 2; h++)
            for (int half = 0; half < 2; half++) { /* l = 0..15 and 16..31 */
                const int o = 16 * half;
                const v128_t l0 = wasm_v128_load(x[b].ql + 64 * h + o);
                const v128_t l1 = wasm_v128_load(x[b].ql + 64 * h + 32 + o);
                const v128_t qh = wasm_v128_load(x[b].qh + 32 * h + o);
                const v128_t u[4] = {
                    wasm_v128_or(wasm_v128_and(l0, m4), wasm_v128_and(wasm_i8x16_shl(qh, 4), m2)),
                    wasm_v128_or(wasm_v128_and(l1, m4), wasm_v128_and(wasm_i8x16_shl(qh, 2), m2)),
                    wasm_v128_or(wasm_u8x16_shr(l0, 4), wasm_v128_and(qh, m2)),
                    wasm_v128_or(wasm_u8x16_shr(l1, 4), wasm_v128_and(wasm_u8x16_shr(qh, 2), m2)),
                };
                for (int k = 0; k < 4; k++) {
                    const int e = 128 * h + 32 * k + o; /* 16 elements: one scale group */
                    const v128_t p = dot_i8x16(wasm_i32x4_splat(0), wasm_i8x16_sub(u[k], k32),
                                               wasm_v128_load(y[b].qs + e));
                    isum = wasm_i32x4_add(isum, wasm_i32x4_mul(p, wasm_i32x4_splat(x[b].scales[e / 16])));
                }
            }
        acc = wasm_f32x4_add(
            acc, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(isum), wasm_f32x4_splat(F16(x[b].d) * y[b].d)));
    }
    *s = hsum_f32(acc);
}

/* ---- float types ---- */

/* 4 halves (zero-extended to 32-bit lanes) -> 4 floats. The half's exponent and mantissa,
 * moved to a float's places, read as 2^-112 times the value (a subnormal half becomes a
 * subnormal float), so one multiply by 2^112 rescales exactly; exponent 31 (inf, NaN) is
 * mapped to 255 instead. */
static inline v128_t half4_to_f32(v128_t h) {
    const v128_t em = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7fff)), 13);
    const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
    const v128_t scaled = wasm_f32x4_mul(em, wasm_f32x4_splat(0x1p112f));
    const v128_t special =
        wasm_i32x4_eq(wasm_v128_and(h, wasm_i32x4_splat(0x7c00)), wasm_i32x4_splat(0x7c00));
    const v128_t infnan = wasm_v128_or(em, wasm_i32x4_splat(0x7f800000));
    return wasm_v128_or(wasm_v128_bitselect(infnan, scaled, special), sign);
}

static void dot_f32_simd128(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    v128_t acc[4] = {wasm_f32x4_splat(0), wasm_f32x4_splat(0), wasm_f32x4_splat(0), wasm_f32x4_splat(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++)
            acc[k] = wasm_f32x4_add(
                acc[k], wasm_f32x4_mul(wasm_v128_load(x + i + 4 * k), wasm_v128_load(y + i + 4 * k)));
    float sum = hsum_f32(wasm_f32x4_add(wasm_f32x4_add(acc[0], acc[1]), wasm_f32x4_add(acc[2], acc[3])));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static void dot_f16_simd128(int64_t n, float *s, const void *w, const void *a) {
    const cera_f16 *x = w, *y = a;
    v128_t acc[4] = {wasm_f32x4_splat(0), wasm_f32x4_splat(0), wasm_f32x4_splat(0), wasm_f32x4_splat(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 2; k++) {
            const v128_t xv = wasm_v128_load(x + i + 8 * k), yv = wasm_v128_load(y + i + 8 * k);
            const v128_t xl = half4_to_f32(wasm_u32x4_extend_low_u16x8(xv));
            const v128_t xh = half4_to_f32(wasm_u32x4_extend_high_u16x8(xv));
            const v128_t yl = half4_to_f32(wasm_u32x4_extend_low_u16x8(yv));
            const v128_t yh = half4_to_f32(wasm_u32x4_extend_high_u16x8(yv));
            acc[2 * k] = wasm_f32x4_add(acc[2 * k], wasm_f32x4_mul(xl, yl));
            acc[2 * k + 1] = wasm_f32x4_add(acc[2 * k + 1], wasm_f32x4_mul(xh, yh));
        }
    float sum = hsum_f32(wasm_f32x4_add(wasm_f32x4_add(acc[0], acc[1]), wasm_f32x4_add(acc[2], acc[3])));
    for (; i < n; i++) sum += F16(x[i]) * F16(y[i]);
    *s = sum;
}

/* ---- activation quantizers (byte-exact with quant_act.c) ---- */

/* 32 floats times id, rounded half to even (f32x4.nearest), to int8; returns the sum of the
 * quants. Saturation at +-127/-128 is the reference's clamp (only q8_k can reach 128). */
static inline int round_pack32(const float *x, float id, int8_t *out) {
    v128_t q[8];
    v128_t sum = wasm_i32x4_splat(0);
    for (int k = 0; k < 8; k++) {
        q[k] = wasm_i32x4_trunc_sat_f32x4(
            wasm_f32x4_nearest(wasm_f32x4_mul(wasm_v128_load(x + 4 * k), wasm_f32x4_splat(id))));
    }
    for (int k = 0; k < 2; k++) {
        const v128_t lo = wasm_i16x8_narrow_i32x4(q[4 * k], q[4 * k + 1]);
        const v128_t hi = wasm_i16x8_narrow_i32x4(q[4 * k + 2], q[4 * k + 3]);
        const v128_t b = wasm_i8x16_narrow_i16x8(lo, hi);
        wasm_v128_store(out + 16 * k, b);
        sum = wasm_i32x4_add(sum, wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_extadd_pairwise_i8x16(b)));
    }
    return hsum_i32(sum);
}

static inline float amax_n(const float *x, int n) {
    v128_t m = wasm_f32x4_abs(wasm_v128_load(x));
    for (int k = 4; k < n; k += 4) m = wasm_f32x4_pmax(m, wasm_f32x4_abs(wasm_v128_load(x + k)));
    const float a = wasm_f32x4_extract_lane(m, 0) > wasm_f32x4_extract_lane(m, 1)
                        ? wasm_f32x4_extract_lane(m, 0)
                        : wasm_f32x4_extract_lane(m, 1);
    const float b = wasm_f32x4_extract_lane(m, 2) > wasm_f32x4_extract_lane(m, 3)
                        ? wasm_f32x4_extract_lane(m, 2)
                        : wasm_f32x4_extract_lane(m, 3);
    return a > b ? a : b;
}

static void quantize_q8_0_simd128(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        const float amax = amax_n(x, QK8_0);
        y[b].d = cera_f32_to_f16(amax / 127.f);
        round_pack32(x, amax != 0.0f ? 127.f / amax : 0.0f, y[b].qs);
    }
}

static void quantize_q8_1_simd128(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / QK8_1; b++, x += QK8_1) {
        const float amax = amax_n(x, QK8_1);
        const float d = amax / 127.f;
        y[b].d = cera_f32_to_f16(d);
        const int sum = round_pack32(x, amax != 0.0f ? 127.f / amax : 0.0f, y[b].qs);
        y[b].s = cera_f32_to_f16(d * (float)sum);
    }
}

static void quantize_q8_k_simd128(const float *x, void *vy, int64_t n) {
    block_q8_k *y = vy;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        const float amax = amax_n(x, QK_K);
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
        for (int g = 0; g < 16; g++) {
            const v128_t q = wasm_v128_load(y[b].qs + 16 * g);
            y[b].bsums[g] =
                (int16_t)hsum_i32(wasm_i32x4_extadd_pairwise_i16x8(wasm_i16x8_extadd_pairwise_i8x16(q)));
        }
        y[b].d = 1 / iscale;
    }
}

void cera_cpu_register_simd128(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    ops[CERA_TYPE_Q8_0].vec_dot = dot_q8_0_q8_0_simd128;
    ops[CERA_TYPE_Q4_0].vec_dot = dot_q4_0_q8_0_simd128;
    ops[CERA_TYPE_Q4_1].vec_dot = dot_q4_1_q8_1_simd128;
    ops[CERA_TYPE_Q4_K].vec_dot = dot_q4_k_q8_k_simd128;
    ops[CERA_TYPE_Q6_K].vec_dot = dot_q6_k_q8_k_simd128;
    ops[CERA_TYPE_F32].vec_dot = dot_f32_simd128;
    ops[CERA_TYPE_F16].vec_dot = dot_f16_simd128;
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_0, quantize_q8_0_simd128);
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_1, quantize_q8_1_simd128);
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_K, quantize_q8_k_simd128);
}

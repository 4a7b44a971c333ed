/*
 * dot_x86_body.h — the 256-bit integer dot products of every quantized weight type, written
 * once and compiled twice: by kernels_avx2.c (AVX2: pmaddubsw + pmaddwd) and by
 * kernels_avx512.c (the same code on AVX-512 VL + VNNI, where the unscaled byte dots become
 * one vpdpbusd). The includer defines X86_VNNI (0 or 1) and X86_FN(name), which gives every
 * function a per-tier name, and includes this file once.
 *
 * Scheme (the same integer arithmetic as the scalar reference, so every integer sum is
 * exact): weights are unpacked to unsigned bytes u (the offset of signed formats is taken
 * out afterwards through the activation sums: sum(q * y) = sum(u * y) - k * sum(y)), or to
 * signed bytes for the table formats, and multiplied with the int8 activations 32 at a time.
 * Per-sub-block integer scales are applied in int16 (pmaddwd with the scale instead of 1),
 * exactly. Only the float part (block scale times integer sum, summed in 8 lanes) runs in a
 * different order than the reference, hence the tests' float tolerance.
 *
 * Activations never hold -128 (the quantizers clamp to +-127) and no weight format reaches
 * -128 either, so the sign trick |x| * sign(y, x) for signed x signed bytes is exact.
 */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "core/fp16.h"
#include "tensor/blocks.h"

/* F16C converts a half in one instruction (cera_f16_to_f32 is the portable bit-twiddling one). */
#define F16(h) _cvtsh_ss(h)

/* ---- helpers ---- */

static inline float X86_FN(hsum_ps)(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int X86_FN(hsum_epi32)(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Sum of u[i] * s[i] (u unsigned, s signed bytes) in 8 int32 lanes, 4 products per lane. */
static inline __m256i X86_FN(dot_u8s8)(__m256i u, __m256i s) {
#if X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* Signed x signed (neither -128). */
static inline __m256i X86_FN(dot_s8s8)(__m256i x, __m256i y) {
    return X86_FN(dot_u8s8)(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* Sum of u[i] * s[i] with each pair of int16 partial sums multiplied by its int16 scale:
 * scale16 holds one scale per 2 bytes (16 int16 = 32 bytes). |u * s| pairs stay below 2^15
 * for u <= 127. */
static inline __m256i X86_FN(dot_u8s8_scaled)(__m256i u, __m256i s, __m256i scale16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16);
}

/* Two scales: bytes 0..15 get lo, bytes 16..31 get hi. */
static inline __m256i X86_FN(scales2)(int lo, int hi) {
    return _mm256_setr_m128i(_mm_set1_epi16((short)lo), _mm_set1_epi16((short)hi));
}

/* 16 packed nibbles -> 32 bytes: low nibbles first (elements 0..15), then high (16..31). */
static inline __m256i X86_FN(nibbles32)(const uint8_t *p) {
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    const __m256i both = _mm256_setr_m128i(b, _mm_srli_epi16(b, 4));
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, 0x10 where the bit is set (the fifth bit of q5 quants). */
static inline __m256i X86_FN(bits32_to_0x10)(const uint8_t *p) {
    uint32_t bits;
    memcpy(&bits, p, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)bits), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                                       2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

static inline __m256i X86_FN(load32)(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* ---- 32-element block types with q8_0 / q8_1 activations ---- */

static void X86_FN(dot_q8_0_q8_0)(int64_t n, float *s, const void *w, const void *a) {
    const block_q8_0 *x = w;
    const block_q8_0 *y = a;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m256i p0 = X86_FN(dot_s8s8)(X86_FN(load32)(x[b].qs), X86_FN(load32)(y[b].qs));
        const __m256i p1 = X86_FN(dot_s8s8)(X86_FN(load32)(x[b + 1].qs), X86_FN(load32)(y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(F16(x[b].d) * F16(y[b].d)), acc0);
        acc1 =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(F16(x[b + 1].d) * F16(y[b + 1].d)), acc1);
    }
    for (; b < nb; b++) {
        const __m256i p = X86_FN(dot_s8s8)(X86_FN(load32)(x[b].qs), X86_FN(load32)(y[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(F16(x[b].d) * F16(y[b].d)), acc0);
    }
    *s = X86_FN(hsum_ps)(_mm256_add_ps(acc0, acc1));
}

/* q4_0: x = u - 8 with u in 0..15, so sum(x y) = sum(u y) - 8 sum(y). */
static void X86_FN(dot_q4_0_q8_0)(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    const int64_t nb = n / QK8_0;
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m256i y0 = X86_FN(load32)(y[b].qs), y1 = X86_FN(load32)(y[b + 1].qs);
        const __m256i p0 =
            _mm256_sub_epi32(X86_FN(dot_u8s8)(X86_FN(nibbles32)(x[b].qs), y0), X86_FN(dot_u8s8)(eight, y0));
        const __m256i p1 = _mm256_sub_epi32(X86_FN(dot_u8s8)(X86_FN(nibbles32)(x[b + 1].qs), y1),
                                            X86_FN(dot_u8s8)(eight, y1));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(F16(x[b].d) * F16(y[b].d)), acc0);
        acc1 =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(F16(x[b + 1].d) * F16(y[b + 1].d)), acc1);
    }
    for (; b < nb; b++) {
        const __m256i y0 = X86_FN(load32)(y[b].qs);
        const __m256i p0 =
            _mm256_sub_epi32(X86_FN(dot_u8s8)(X86_FN(nibbles32)(x[b].qs), y0), X86_FN(dot_u8s8)(eight, y0));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(F16(x[b].d) * F16(y[b].d)), acc0);
    }
    *s = X86_FN(hsum_ps)(_mm256_add_ps(acc0, acc1));
}

/* q4_1: x = d u + m; the m part is m * (d_y sum(y)) = m * s_y. */
static void X86_FN(dot_q4_1_q8_1)(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    const int64_t nb = n / QK8_1;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i p = X86_FN(dot_u8s8)(X86_FN(nibbles32)(x[b].qs), X86_FN(load32)(y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(F16(x[b].d) * F16(y[b].d)), acc);
        summs += F16(x[b].m) * F16(y[b].s);
    }
    *s = X86_FN(hsum_ps)(acc) + summs;
}

/* q5_0: u = nibble | fifth bit, x = u - 16. */
static void X86_FN(dot_q5_0_q8_0)(int64_t n, float *s, const void *w, const void *a) {
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    const int64_t nb = n / QK8_0;
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i u = _mm256_or_si256(X86_FN(nibbles32)(x[b].qs), X86_FN(bits32_to_0x10)(x[b].qh));
        const __m256i y0 = X86_FN(load32)(y[b].qs);
        const __m256i p = _mm256_sub_epi32(X86_FN(dot_u8s8)(u, y0), X86_FN(dot_u8s8)(sixteen, y0));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(F16(x[b].d) * F16(y[b].d)), acc);
    }
    *s = X86_FN(hsum_ps)(acc);
}

static void X86_FN(dot_q5_1_q8_1)(int64_t n, float *s, const void *w, const void *a) {
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    const int64_t nb = n / QK8_1;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i u = _mm256_or_si256(X86_FN(nibbles32)(x[b].qs), X86_FN(bits32_to_0x10)(x[b].qh));
        const __m256i p = X86_FN(dot_u8s8)(u, X86_FN(load32)(y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(F16(x[b].d) * F16(y[b].d)), acc);
        summs += F16(x[b].m) * F16(y[b].s);
    }
    *s = X86_FN(hsum_ps)(acc) + summs;
}

/* The 16 iq4 levels, twice (pshufb looks up within each 128-bit half). */
static inline __m256i X86_FN(iq4_table)(void) {
    const __m128i t = _mm_loadu_si128((const __m128i *)kvalues_iq4nl);
    return _mm256_setr_m128i(t, t);
}

static void X86_FN(dot_iq4_nl_q8_0)(int64_t n, float *s, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    const int64_t nb = n / QK4_NL;
    const __m256i table = X86_FN(iq4_table)();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i v = _mm256_shuffle_epi8(table, X86_FN(nibbles32)(x[b].qs));
        const __m256i p = X86_FN(dot_s8s8)(v, X86_FN(load32)(y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(F16(y[b].d) * F16(x[b].d)), acc);
    }
    *s = X86_FN(hsum_ps)(acc);
}

/* ---- k-quants and iq4_xs with q8_k activations ---- */

/* sum_g scale[g] * bsums[g] over the 16 groups of 16. */
static inline int X86_FN(bsums_dot)(const int16_t *bsums, const int16_t *scale16) {
    const __m256i p = _mm256_madd_epi16(X86_FN(load32)(bsums), X86_FN(load32)(scale16));
    return X86_FN(hsum_epi32)(p);
}

static void X86_FN(dot_q2_k_q8_k)(int64_t n, float *s, const void *w, const void *a) {
    const block_q2_k *x = w;
    const block_q8_k *y = a;
    const __m256i three = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int16_t sc[16], mn[16];
        for (int g = 0; g < 16; g++) {
            sc[g] = x[b].scales[g] & 0xF;
            mn[g] = x[b].scales[g] >> 4;
        }
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = X86_FN(load32)(x[b].qs + 32 * h);
            for (int sh = 0; sh < 4; sh++) {
                const int e = 128 * h + 32 * sh, g = e / 16;
                const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * sh), three);
                isum = _mm256_add_epi32(isum, X86_FN(dot_u8s8_scaled)(u, X86_FN(load32)(y[b].qs + e),
                                                                      X86_FN(scales2)(sc[g], sc[g + 1])));
            }
        }
        const float dall = y[b].d * F16(x[b].d), dmin = y[b].d * F16(x[b].dmin);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dall), acc);
        summ += dmin * (float)X86_FN(bsums_dot)(y[b].bsums, mn);
    }
    *s = X86_FN(hsum_ps)(acc) - summ;
}

/* The 8 six-bit scales and mins of a q4_k/q5_k block, as int16 (mins per group of 16). */
static inline void X86_FN(k4_scales)(const uint8_t *packed, int16_t sc[8], int16_t mn16[16]) {
    for (int j = 0; j < 8; j++) {
        uint8_t scale, mn;
        k_scale_min(j, packed, &scale, &mn);
        sc[j] = scale;
        mn16[2 * j] = mn16[2 * j + 1] = mn;
    }
}

static void X86_FN(dot_q4_k_q8_k)(int64_t n, float *s, const void *w, const void *a) {
    const block_q4_k *x = w;
    const block_q8_k *y = a;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int16_t sc[8], mn[16];
        X86_FN(k4_scales)(x[b].scales, sc, mn);
        __m256i isum0 = _mm256_setzero_si256(), isum1 = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = X86_FN(load32)(x[b].qs + 32 * c);
            const __m256i lo = _mm256_and_si256(q, low4),
                          hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            isum0 = _mm256_add_epi32(isum0, X86_FN(dot_u8s8_scaled)(lo, X86_FN(load32)(y[b].qs + 64 * c),
                                                                    _mm256_set1_epi16(sc[2 * c])));
            isum1 = _mm256_add_epi32(isum1, X86_FN(dot_u8s8_scaled)(hi, X86_FN(load32)(y[b].qs + 64 * c + 32),
                                                                    _mm256_set1_epi16(sc[2 * c + 1])));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(isum0, isum1)),
                              _mm256_set1_ps(F16(x[b].d) * y[b].d), acc);
        summ += F16(x[b].dmin) * y[b].d * (float)X86_FN(bsums_dot)(y[b].bsums, mn);
    }
    *s = X86_FN(hsum_ps)(acc) - summ;
}

static void X86_FN(dot_q5_k_q8_k)(int64_t n, float *s, const void *w, const void *a) {
    const block_q5_k *x = w;
    const block_q8_k *y = a;
    const __m256i low4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        int16_t sc[8], mn[16];
        X86_FN(k4_scales)(x[b].scales, sc, mn);
        const __m256i qh = X86_FN(load32)(x[b].qh);
        __m256i isum0 = _mm256_setzero_si256(), isum1 = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = X86_FN(load32)(x[b].qs + 32 * c);
            /* Sub-block j = 2c, 2c + 1 takes bit j of qh[l] as bit 4. */
            const __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c), 4), b4);
            const __m256i h1 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c + 1), 4), b4);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), h0);
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), h1);
            isum0 = _mm256_add_epi32(isum0, X86_FN(dot_u8s8_scaled)(lo, X86_FN(load32)(y[b].qs + 64 * c),
                                                                    _mm256_set1_epi16(sc[2 * c])));
            isum1 = _mm256_add_epi32(isum1, X86_FN(dot_u8s8_scaled)(hi, X86_FN(load32)(y[b].qs + 64 * c + 32),
                                                                    _mm256_set1_epi16(sc[2 * c + 1])));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(isum0, isum1)),
                              _mm256_set1_ps(F16(x[b].d) * y[b].d), acc);
        summ += F16(x[b].dmin) * y[b].d * (float)X86_FN(bsums_dot)(y[b].bsums, mn);
    }
    *s = X86_FN(hsum_ps)(acc) - summ;
}

/* q6_k: x = u - 32 with u in 0..63 (4 low bits from ql, 2 high from qh). */
static void X86_FN(dot_q6_k_q8_k)(int64_t n, float *s, const void *w, const void *a) {
    const block_q6_k *x = w;
    const block_q8_k *y = a;
    const __m256i low4 = _mm256_set1_epi8(0x0F), hi2 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        int16_t sc[16];
        for (int g = 0; g < 16; g++) sc[g] = x[b].scales[g];
        __m256i isum0 = _mm256_setzero_si256(), isum1 = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = X86_FN(load32)(x[b].ql + 64 * h), l1 = X86_FN(load32)(x[b].ql + 64 * h + 32);
            const __m256i qh = X86_FN(load32)(x[b].qh + 32 * h);
            const __m256i u0 =
                _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), hi2));
            const __m256i u1 =
                _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), hi2));
            const __m256i u2 =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, hi2));
            const __m256i u3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), hi2));
            const int8_t *q8 = y[b].qs + 128 * h;
            const int g = 8 * h;
            isum0 = _mm256_add_epi32(
                isum0, X86_FN(dot_u8s8_scaled)(u0, X86_FN(load32)(q8), X86_FN(scales2)(sc[g], sc[g + 1])));
            isum1 = _mm256_add_epi32(isum1, X86_FN(dot_u8s8_scaled)(u1, X86_FN(load32)(q8 + 32),
                                                                    X86_FN(scales2)(sc[g + 2], sc[g + 3])));
            isum0 = _mm256_add_epi32(isum0, X86_FN(dot_u8s8_scaled)(u2, X86_FN(load32)(q8 + 64),
                                                                    X86_FN(scales2)(sc[g + 4], sc[g + 5])));
            isum1 = _mm256_add_epi32(isum1, X86_FN(dot_u8s8_scaled)(u3, X86_FN(load32)(q8 + 96),
                                                                    X86_FN(scales2)(sc[g + 6], sc[g + 7])));
        }
        const int corr = 32 * X86_FN(bsums_dot)(y[b].bsums, sc);
        const __m256i isum =
            _mm256_sub_epi32(_mm256_add_epi32(isum0, isum1), _mm256_setr_epi32(corr, 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(F16(x[b].d) * y[b].d), acc);
    }
    *s = X86_FN(hsum_ps)(acc);
}

/* iq4_xs: signed table values times q8, scaled per sub-block of 32 by ls - 32. */
static void X86_FN(dot_iq4_xs_q8_k)(int64_t n, float *s, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8_k *y = a;
    const __m256i table = X86_FN(iq4_table)();
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; b++) {
        __m256i isum = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i v = _mm256_shuffle_epi8(table, X86_FN(nibbles32)(x[b].qs + 16 * j));
            const __m256i q8 = X86_FN(load32)(y[b].qs + 32 * j);
            isum = _mm256_add_epi32(
                isum, X86_FN(dot_u8s8_scaled)(_mm256_sign_epi8(v, v), _mm256_sign_epi8(q8, v),
                                              _mm256_set1_epi16((short)iq4_xs_scale(&x[b], j))));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(F16(x[b].d) * y[b].d), acc);
    }
    *s = X86_FN(hsum_ps)(acc);
}

/* ---- activation quantizers, byte-exact with quant_act.c ---- */

static inline float X86_FN(hmax_ps)(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* 32 floats times id, rounded half to even, to 32 int8 in order; returns their int32 sums. */
static inline __m256i X86_FN(round_pack32)(const float *x, __m256 id, int8_t *out) {
    __m256i i[4];
    for (int k = 0; k < 4; k++)
        i[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i sums = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    /* packs work per 128-bit half: put the 4-byte groups back in order. */
    _mm256_storeu_si256((__m256i *)out,
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    return sums;
}

static inline float X86_FN(amax32)(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    for (int k = 1; k < 4; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
    return X86_FN(hmax_ps)(m);
}

static void X86_FN(quantize_q8_0)(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / QK8_0; b++, x += QK8_0) {
        const float amax = X86_FN(amax32)(x);
        y[b].d = cera_f32_to_f16(amax / 127.f);
        X86_FN(round_pack32)(x, _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f), y[b].qs);
    }
}

static void X86_FN(quantize_q8_1)(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / QK8_1; b++, x += QK8_1) {
        const float amax = X86_FN(amax32)(x);
        const float d = amax / 127.f;
        y[b].d = cera_f32_to_f16(d);
        const __m256i sums =
            X86_FN(round_pack32)(x, _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f), y[b].qs);
        y[b].s = cera_f32_to_f16(d * (float)X86_FN(hsum_epi32)(sums));
    }
}

static void X86_FN(quantize_q8_k)(const float *x, void *vy, int64_t n) {
    block_q8_k *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K; k += 8)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
        const float amax = X86_FN(hmax_ps)(m);
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        /* The first element of largest magnitude gives the sign (as the reference's scan). */
        float max = 0.0f;
        const __m256 vmax = _mm256_set1_ps(amax);
        for (int k = 0; k < QK_K; k += 8) {
            const int hit = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), vmax, _CMP_EQ_OQ));
            if (hit) {
                max = x[k + __builtin_ctz((unsigned)hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int k = 0; k < QK_K; k += 32) {
            X86_FN(round_pack32)(x + k, vs, y[b].qs + k);
        }
        /* round_pack32 saturates at +-127 through the packs; the reference clamps only the top
         * (MIN(127, v)), and -128 cannot occur since |iscale * x| <= 127 up to rounding. */
        const __m256i ones = _mm256_set1_epi8(1);
        for (int g = 0; g < 16; g += 2) {
            const __m256i q = X86_FN(load32)(y[b].qs + 16 * g);
            const __m256i s16 = _mm256_maddubs_epi16(ones, q); /* pairs -> int16 */
            const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            /* 4 int32 per group of 16 in each 128-bit half */
            __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
            lo = _mm_hadd_epi32(lo, lo);
            lo = _mm_hadd_epi32(lo, lo);
            hi = _mm_hadd_epi32(hi, hi);
            hi = _mm_hadd_epi32(hi, hi);
            y[b].bsums[g] = (int16_t)_mm_cvtsi128_si32(lo);
            y[b].bsums[g + 1] = (int16_t)_mm_cvtsi128_si32(hi);
        }
        y[b].d = 1 / iscale;
    }
}

static void X86_FN(quantize_f16)(const float *x, void *vy, int64_t n) {
    cera_f16 *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = cera_f32_to_f16(x[i]);
}

/* Registers this body's kernels (the includer adds its own on top). */
static void X86_FN(register_body)(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    ops[CERA_TYPE_Q4_0].vec_dot = X86_FN(dot_q4_0_q8_0);
    ops[CERA_TYPE_Q4_1].vec_dot = X86_FN(dot_q4_1_q8_1);
    ops[CERA_TYPE_Q5_0].vec_dot = X86_FN(dot_q5_0_q8_0);
    ops[CERA_TYPE_Q5_1].vec_dot = X86_FN(dot_q5_1_q8_1);
    ops[CERA_TYPE_Q8_0].vec_dot = X86_FN(dot_q8_0_q8_0);
    ops[CERA_TYPE_IQ4_NL].vec_dot = X86_FN(dot_iq4_nl_q8_0);
    ops[CERA_TYPE_Q2_K].vec_dot = X86_FN(dot_q2_k_q8_k);
    ops[CERA_TYPE_Q4_K].vec_dot = X86_FN(dot_q4_k_q8_k);
    ops[CERA_TYPE_Q5_K].vec_dot = X86_FN(dot_q5_k_q8_k);
    ops[CERA_TYPE_Q6_K].vec_dot = X86_FN(dot_q6_k_q8_k);
    ops[CERA_TYPE_IQ4_XS].vec_dot = X86_FN(dot_iq4_xs_q8_k);
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_0, X86_FN(quantize_q8_0));
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_1, X86_FN(quantize_q8_1));
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_Q8_K, X86_FN(quantize_q8_k));
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_F16, X86_FN(quantize_f16));
}

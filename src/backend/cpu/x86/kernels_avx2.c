/*
 * kernels_avx2.c — the AVX2 (+FMA, F16C) tier: the integer dot products of every quantized
 * type (dot_x86_body.h, with pmaddubsw/pmaddwd), byte-exact SIMD activation quantizers, and
 * f32/f16/bf16 dots in float lanes. Registered over the scalar table by kernels.c when the
 * CPU and OS support AVX2, FMA and F16C.
 */
#define X86_VNNI     0
#define X86_FN(name) name##_avx2
#include "dot_x86_body.h"
#include "tile_x86_body.h"

/* Float dots: 4 independent accumulators of 8 lanes hide the FMA latency; tails scalar. */
static void dot_f32_avx2(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    float sum = hsum_ps_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static inline __m256 load_f16x8(const cera_f16 *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static void dot_f16_avx2(int64_t n, float *s, const void *w, const void *a) {
    const cera_f16 *x = w, *y = a;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(load_f16x8(x + i + 8 * k), load_f16x8(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load_f16x8(x + i), load_f16x8(y + i), acc[0]);
    float sum = hsum_ps_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += cera_f16_to_f32(x[i]) * cera_f16_to_f32(y[i]);
    *s = sum;
}

/* bf16 -> f32 is a 16-bit shift into the high half. */
static inline __m256 load_bf16x8(const cera_bf16 *p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static void dot_bf16_avx2(int64_t n, float *s, const void *w, const void *a) {
    const cera_bf16 *x = w, *y = a;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(load_bf16x8(x + i + 8 * k), load_bf16x8(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), acc[0]);
    float sum = hsum_ps_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += cera_bf16_to_f32(x[i]) * cera_bf16_to_f32(y[i]);
    *s = sum;
}

/* ---- float tiles: TILE_R x TILE_C (4 x 3, as the quantized ones), 8 lanes; tails per pair in
 * scalar. 12 accumulators, the 3 activation vectors and the weight vector in use fill the 16
 * ymm registers; per 8 values an F16 or BF16 tile widens 7 vectors for 12 multiply-adds (4 x 2:
 * 6 for 8), which is what bounds it. Each output is one 8-lane FMA chain over k, whatever
 * the tile's width, so the bits do not depend on it. */

enum { FT_F32, FT_F16, FT_BF16 };

static inline __attribute__((always_inline)) __m256 load8(int kind, const void *row, int64_t i) {
    switch (kind) {
    case FT_F32: return _mm256_loadu_ps((const float *)row + i);
    case FT_F16: return load_f16x8((const cera_f16 *)row + i);
    default: return load_bf16x8((const cera_bf16 *)row + i);
    }
}

static inline float elem(int kind, const void *row, int64_t i) {
    switch (kind) {
    case FT_F32: return ((const float *)row)[i];
    case FT_F16: return cera_f16_to_f32(((const cera_f16 *)row)[i]);
    default: return cera_bf16_to_f32(((const cera_bf16 *)row)[i]);
    }
}

static inline __attribute__((always_inline)) void tile_float(int kind, int64_t n, float *s, size_t s_stride,
                                                             const void *w, size_t w_stride, const void *a,
                                                             size_t a_stride, int nr, int nc) {
    const uint8_t *wr = w, *ar = a;
    __m256 acc[TILE_R][TILE_C];
    for (int r = 0; r < TILE_R; r++)
        for (int c = 0; c < TILE_C; c++) acc[r][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 y[TILE_C];
        for (int c = 0; c < nc; c++) y[c] = load8(kind, ar + (size_t)c * a_stride, i);
        for (int r = 0; r < nr; r++) {
            const __m256 x = load8(kind, wr + (size_t)r * w_stride, i);
            for (int c = 0; c < nc; c++) acc[r][c] = _mm256_fmadd_ps(x, y[c], acc[r][c]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            float sum = hsum_ps_avx2(acc[r][c]);
            for (int64_t k = i; k < n; k++)
                sum += elem(kind, wr + (size_t)r * w_stride, k) * elem(kind, ar + (size_t)c * a_stride, k);
            s[(size_t)c * s_stride + r] = sum;
        }
}

/* The full tile and the narrower edges with constant bounds (accumulators in registers);
 * other edges take the general loop. */
static inline __attribute__((always_inline)) void tile_float_any(int kind, int64_t n, float *s, size_t ss,
                                                                 const void *w, size_t ws, const void *a,
                                                                 size_t as, int nr, int nc) {
    if (nr == TILE_R && nc == TILE_C)
        tile_float(kind, n, s, ss, w, ws, a, as, TILE_R, TILE_C);
    else if (nr == TILE_R && nc == 2)
        tile_float(kind, n, s, ss, w, ws, a, as, TILE_R, 2);
    else if (nr == TILE_R && nc == 1)
        tile_float(kind, n, s, ss, w, ws, a, as, TILE_R, 1);
    else
        tile_float(kind, n, s, ss, w, ws, a, as, nr, nc);
}

static void tile_f32_avx2(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    tile_float_any(FT_F32, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_f16_avx2(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    tile_float_any(FT_F16, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_bf16_avx2(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                           int nr, int nc) {
    tile_float_any(FT_BF16, n, s, ss, w, ws, a, as, nr, nc);
}

void cera_cpu_register_avx2(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    register_body_avx2(ops);
    register_tiles_avx2(ops);
    cera_cpu_register_repack_avx2(ops);
    ops[CERA_TYPE_F32].vec_dot = dot_f32_avx2;
    ops[CERA_TYPE_F16].vec_dot = dot_f16_avx2;
    ops[CERA_TYPE_BF16].vec_dot = dot_bf16_avx2;
    set_tile_avx2(&ops[CERA_TYPE_F32], tile_f32_avx2, TILE_R, TILE_C);
    set_tile_avx2(&ops[CERA_TYPE_F16], tile_f16_avx2, TILE_R, TILE_C);
    set_tile_avx2(&ops[CERA_TYPE_BF16], tile_bf16_avx2, TILE_R, TILE_C);
}

/*
 * kernels_avx512.c — the AVX-512 tier (F/BW/DQ/VL + VNNI; BF16 when the CPU has it): the
 * quantized dot products of dot_x86_body.h with vpdpbusd for the byte dots, and 512-bit
 * f32/f16/bf16 dots (vdpbf16ps for bf16, as llama.cpp's AVX512-BF16 build). Registered over
 * the AVX2 table by kernels.c.
 */
#define X86_VNNI     1
#define X86_FN(name) name##_avx512
#include "dot_x86_body.h"
#include "tile_x86_body.h"

static inline float hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }

static void dot_f32_avx512(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 4; k++)
            acc[k] =
                _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * k), _mm512_loadu_ps(y + i + 16 * k), acc[k]);
    if (i < n) { /* the tail under a mask: no scalar loop */
        for (; i < n; i += 16) {
            const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
            acc[0] =
                _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), acc[0]);
        }
    }
    *s = hsum512(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

static inline __m512 load_f16x16(__mmask16 m, const cera_f16 *p) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

static void dot_f16_avx512(int64_t n, float *s, const void *w, const void *a) {
    const cera_f16 *x = w, *y = a;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16 * k))),
                                     _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i + 16 * k))),
                                     acc[k]);
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        acc[0] = _mm512_fmadd_ps(load_f16x16(m, x + i), load_f16x16(m, y + i), acc[0]);
    }
    *s = hsum512(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* vdpbf16ps: pairs of bf16 products summed into f32 lanes (32 elements per instruction). */
static void dot_bf16_avx512bf16(int64_t n, float *s, const void *w, const void *a) {
    const cera_bf16 *x = w, *y = a;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 128 <= n; i += 128)
        for (int k = 0; k < 4; k++)
            acc[k] = _mm512_dpbf16_ps(acc[k], (__m512bh)_mm512_loadu_si512(x + i + 32 * k),
                                      (__m512bh)_mm512_loadu_si512(y + i + 32 * k));
    for (; i < n; i += 32) {
        const __mmask32 m = n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1);
        acc[0] = _mm512_dpbf16_ps(acc[0], (__m512bh)_mm512_maskz_loadu_epi16(m, x + i),
                                  (__m512bh)_mm512_maskz_loadu_epi16(m, y + i));
    }
    *s = hsum512(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

static void quantize_f16_x16_avx512(const float *x, void *vy, int64_t n) {
    cera_f16 *y = vy;
    int64_t i = 0;
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(y + i, m,
                                 _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

/* ---- float tiles: 4 weight rows x 4 (F16: 6) activation rows, 16 lanes, masked tails ---- */

enum { FT_F32, FT_F16, FT_BF16 };

/* 16 elements from i as floats; masked (tail) when m is not all ones. Masked and plain loads
 * give the same values, so the main loop takes the plain ones (cheaper on some cores). */
static inline __attribute__((always_inline)) __m512 load16(int kind, const void *row, int64_t i, __mmask16 m,
                                                           bool full) {
    switch (kind) {
    case FT_F32:
        return full ? _mm512_loadu_ps((const float *)row + i)
                    : _mm512_maskz_loadu_ps(m, (const float *)row + i);
    case FT_F16: {
        const cera_f16 *p = (const cera_f16 *)row + i;
        return _mm512_cvtph_ps(full ? _mm256_loadu_si256((const __m256i *)p)
                                    : _mm256_maskz_loadu_epi16(m, p));
    }
    default: {
        const cera_bf16 *p = (const cera_bf16 *)row + i;
        const __m256i h = full ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(m, p);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    }
}

#define FT_COLS 6 /* the widest float tile: 4 x 6 accumulators, the 6 activation vectors, a weight's */

static inline __attribute__((always_inline)) void tile_float(int kind, int64_t n, float *s, size_t s_stride,
                                                             const void *w, size_t w_stride, const void *a,
                                                             size_t a_stride, int nr, int nc) {
    const uint8_t *wr = w, *ar = a;
    __m512 acc[4][FT_COLS];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < FT_COLS; c++) acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 y[FT_COLS];
        for (int c = 0; c < nc; c++) y[c] = load16(kind, ar + (size_t)c * a_stride, i, 0xFFFF, true);
        for (int r = 0; r < nr; r++) {
            const __m512 x = load16(kind, wr + (size_t)r * w_stride, i, 0xFFFF, true);
            for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(x, y[c], acc[r][c]);
        }
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 y[FT_COLS];
        for (int c = 0; c < nc; c++) y[c] = load16(kind, ar + (size_t)c * a_stride, i, m, false);
        for (int r = 0; r < nr; r++) {
            const __m512 x = load16(kind, wr + (size_t)r * w_stride, i, m, false);
            for (int c = 0; c < nc; c++) acc[r][c] = _mm512_fmadd_ps(x, y[c], acc[r][c]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) s[(size_t)c * s_stride + r] = hsum512(acc[r][c]);
}

/* bf16 with vdpbf16ps, as its vec_dot: 32 elements (pairs) per instruction. */
static inline __attribute__((always_inline)) void tile_bf16dp(int64_t n, float *s, size_t s_stride,
                                                              const void *w, size_t w_stride, const void *a,
                                                              size_t a_stride, int nr, int nc) {
    const uint8_t *wr = w, *ar = a;
    __m512 acc[4][4];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
        const __mmask32 m = n - i >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << (n - i)) - 1);
        __m512bh y[4];
        for (int c = 0; c < nc; c++)
            y[c] = (__m512bh)_mm512_maskz_loadu_epi16(m, (const cera_bf16 *)(ar + (size_t)c * a_stride) + i);
        for (int r = 0; r < nr; r++) {
            const __m512bh x =
                (__m512bh)_mm512_maskz_loadu_epi16(m, (const cera_bf16 *)(wr + (size_t)r * w_stride) + i);
            for (int c = 0; c < nc; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], x, y[c]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) s[(size_t)c * s_stride + r] = hsum512(acc[r][c]);
}

static void tile_f32_avx512(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                            size_t as, int nr, int nc) {
    if (nr == 4 && nc == 4)
        tile_float(FT_F32, n, s, ss, w, ws, a, as, 4, 4);
    else if (nr == 4 && nc == 1)
        tile_float(FT_F32, n, s, ss, w, ws, a, as, 4, 1);
    else
        tile_float(FT_F32, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_f16_avx512(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                            size_t as, int nr, int nc) {
    if (nr == 4 && nc == FT_COLS) /* 10 conversions a step for 24 multiply-adds (4 x 4: 8 for 16) */
        tile_float(FT_F16, n, s, ss, w, ws, a, as, 4, FT_COLS);
    else if (nc == 1)
        /* a decode step: one row after another, one sequential stream per thread (4 rows side by
         * side ran 12.4 t/s, this 14.9: tinyllama-1.1b F16, 2 threads); same bits per output */
        for (int r = 0; r < nr; r++)
            tile_float(FT_F16, n, s + r, ss, (const uint8_t *)w + (size_t)r * ws, ws, a, as, 1, 1);
    else
        tile_float(FT_F16, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_bf16_avx512bf16(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                                 size_t as, int nr, int nc) {
    if (nr == 4 && nc == 4)
        tile_bf16dp(n, s, ss, w, ws, a, as, 4, 4);
    else if (nr == 4 && nc == 1)
        tile_bf16dp(n, s, ss, w, ws, a, as, 4, 1);
    else
        tile_bf16dp(n, s, ss, w, ws, a, as, nr, nc);
}

void cera_cpu_register_avx512(cera_cpu_type_ops ops[CERA_TYPE_COUNT], bool has_bf16) {
    register_body_avx512(ops);
    register_tiles_avx512(ops);
    cera_cpu_register_repack_avx512(ops);
    ops[CERA_TYPE_F32].vec_dot = dot_f32_avx512;
    ops[CERA_TYPE_F16].vec_dot = dot_f16_avx512;
    set_tile_avx512(&ops[CERA_TYPE_F32], tile_f32_avx512, 4, 4);
    set_tile_avx512(&ops[CERA_TYPE_F16], tile_f16_avx512, 4, FT_COLS);
    if (has_bf16) {
        ops[CERA_TYPE_BF16].vec_dot = dot_bf16_avx512bf16;
        set_tile_avx512(&ops[CERA_TYPE_BF16], tile_bf16_avx512bf16, 4, 4);
    }
    cera_cpu_set_act_quantizer(ops, CERA_TYPE_F16, quantize_f16_x16_avx512);
}

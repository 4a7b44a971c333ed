/*
 * kernels_amx.c — the AMX tier: int8 tile matrix multiplies (tdpbssd) for the prefill
 * gemm_tile of q8_0, q4_0, q5_0 and iq4_nl weights (q8_0 activations). Everything else,
 * including every vec_dot, is the AVX-512 tier's. Registered by kernels.c only after the
 * kernel granted this process the AMX tile state.
 *
 * One call covers 16 weight rows x up to 32 activation rows (tokens) over the whole row:
 *   - activations are the A tiles, loaded straight from the q8_0 rows (tileloadd takes a
 *     stride, and a block's 32 quants are contiguous): tmm0 = tokens 0..15, tmm1 = 16..31;
 *   - the weights' block b is the B tile, which AMX wants in "VNNI" order (4 consecutive k
 *     of one column per 32-bit cell): we gather it per block (unpacking 4/5-bit formats to
 *     int8 first), once per call, so it serves both A tiles;
 *   - tmm4/tmm5 hold the int32 dot of block b for every (token, row); they are stored and
 *     scaled by d_weight * d_act in AVX-512 float lanes (the scales change every 32 elements,
 *     so they cannot accumulate inside the tile). The integer sums are exact, as in every
 *     tier; only the float order differs from the scalar reference.
 * The tile configuration is per thread; each call loads it when its shape differs from the
 * one the thread last loaded.
 */
#include <immintrin.h>
#include <stdalign.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "core/fp16.h"
#include "tensor/blocks.h"

#define AMX_ROWS 16 /* weight rows per call (B tile columns) */
#define AMX_COLS 32 /* activation rows per call (2 A tiles of 16) */

typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

static _Thread_local int loaded_shape = -1; /* (rows of A0, rows of A1) last loaded here */

static void configure(int rows0, int rows1) {
    const int shape = rows0 * 64 + rows1;
    if (shape == loaded_shape) return;
    alignas(64) amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = (uint8_t)rows0, cfg.colsb[0] = 32; /* A0: tokens x 32 int8 */
    cfg.rows[4] = (uint8_t)rows0, cfg.colsb[4] = 64; /* C0: tokens x 16 int32 */
    if (rows1) {
        cfg.rows[1] = (uint8_t)rows1, cfg.colsb[1] = 32;
        cfg.rows[5] = (uint8_t)rows1, cfg.colsb[5] = 64;
    }
    cfg.rows[2] = 8, cfg.colsb[2] = 64; /* B: 8 rows of (16 columns x 4 k) */
    _tile_loadconfig(&cfg);
    loaded_shape = shape;
}

enum { AMX_Q8_0, AMX_Q4_0, AMX_Q5_0, AMX_IQ4_NL };

static inline __m256i nibbles32(const uint8_t *p) {
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_setr_m128i(b, _mm_srli_epi16(b, 4)), _mm256_set1_epi8(0x0F));
}

static inline __m256i bits32_to_0x10(const uint8_t *p) {
    uint32_t bits;
    memcpy(&bits, p, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)bits), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2,
                                                       2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

/* Block b of weight rows 0..nr-1 as int8 [16][32] (rows >= nr zero) and their scales. */
static inline __attribute__((always_inline)) void unpack_rows(int kind, const uint8_t *w, size_t w_stride,
                                                              int64_t b, int nr, int8_t q[AMX_ROWS][32],
                                                              float *dx) {
    for (int m = 0; m < AMX_ROWS; m++) {
        if (m >= nr) {
            _mm256_store_si256((__m256i *)q[m], _mm256_setzero_si256());
            dx[m] = 0.0f;
            continue;
        }
        const uint8_t *row = w + (size_t)m * w_stride;
        __m256i v;
        switch (kind) {
        case AMX_Q8_0: {
            const block_q8_0 *x = (const block_q8_0 *)row + b;
            dx[m] = _cvtsh_ss(x->d);
            v = _mm256_loadu_si256((const __m256i *)x->qs);
            break;
        }
        case AMX_Q4_0: {
            const block_q4_0 *x = (const block_q4_0 *)row + b;
            dx[m] = _cvtsh_ss(x->d);
            v = _mm256_sub_epi8(nibbles32(x->qs), _mm256_set1_epi8(8));
            break;
        }
        case AMX_Q5_0: {
            const block_q5_0 *x = (const block_q5_0 *)row + b;
            dx[m] = _cvtsh_ss(x->d);
            v = _mm256_sub_epi8(_mm256_or_si256(nibbles32(x->qs), bits32_to_0x10(x->qh)),
                                _mm256_set1_epi8(16));
            break;
        }
        default: {
            const block_iq4_nl *x = (const block_iq4_nl *)row + b;
            dx[m] = _cvtsh_ss(x->d);
            const __m128i t = _mm_loadu_si128((const __m128i *)kvalues_iq4nl);
            v = _mm256_shuffle_epi8(_mm256_setr_m128i(t, t), nibbles32(x->qs));
            break;
        }
        }
        _mm256_store_si256((__m256i *)q[m], v);
    }
}

/* q [16 rows][32 k] -> VNNI order [8][16 rows x 4 k]: a 16 x 8 transpose of 32-bit cells
 * (gathered from L1: cell kk of every row is 8 cells apart). */
static inline void to_vnni(const int8_t q[AMX_ROWS][32], int8_t out[8][64]) {
    const __m512i idx = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
    const int32_t *cells = (const int32_t *)q;
    for (int kk = 0; kk < 8; kk++) _mm512_store_si512(out[kk], _mm512_i32gather_epi32(idx, cells + kk, 4));
}

static inline __attribute__((always_inline)) void amx_tile(int kind, int64_t n, float *s, size_t s_stride,
                                                           const void *w, size_t w_stride, const void *a,
                                                           size_t a_stride, int nr, int nc) {
    const int rows0 = nc < 16 ? nc : 16, rows1 = nc - rows0;
    configure(rows0, rows1);
    alignas(64) float acc[AMX_COLS][AMX_ROWS];
    alignas(64) int32_t c[AMX_COLS][AMX_ROWS];
    alignas(64) int8_t q[AMX_ROWS][32];
    alignas(64) int8_t bt[8][64];
    float dx[AMX_ROWS];
    memset(acc, 0, sizeof acc);
    const uint8_t *act = a;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        unpack_rows(kind, w, w_stride, b, nr, q, dx);
        to_vnni((const int8_t(*)[32])q, bt);
        _tile_loadd(2, bt, 64);
        const uint8_t *a0 = act + (size_t)b * sizeof(block_q8_0);
        _tile_loadd(0, a0 + 2, (long)a_stride);
        _tile_zero(4);
        _tile_dpbssd(4, 0, 2);
        _tile_stored(4, c[0], 64);
        if (rows1) {
            _tile_loadd(1, a0 + 16 * a_stride + 2, (long)a_stride);
            _tile_zero(5);
            _tile_dpbssd(5, 1, 2);
            _tile_stored(5, c[16], 64);
        }
        const __m512 vdx = _mm512_loadu_ps(dx);
        for (int t = 0; t < nc; t++) {
            const float dy = _cvtsh_ss(((const block_q8_0 *)(a0 + (size_t)t * a_stride))->d);
            const __m512 scale = _mm512_mul_ps(vdx, _mm512_set1_ps(dy));
            _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[t])), scale,
                                                    _mm512_load_ps(acc[t])));
        }
    }
    const __mmask16 mask = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nc; t++)
        _mm512_mask_storeu_ps(s + (size_t)t * s_stride, mask, _mm512_load_ps(acc[t]));
}

/* The calls with the A tile shapes split are correct for any nr <= 16 and nc <= 32. */
static void tile_q8_0_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    amx_tile(AMX_Q8_0, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_q4_0_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    amx_tile(AMX_Q4_0, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_q5_0_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    amx_tile(AMX_Q5_0, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_iq4_nl_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                            size_t as, int nr, int nc) {
    amx_tile(AMX_IQ4_NL, n, s, ss, w, ws, a, as, nr, nc);
}

static void set_tile(cera_cpu_type_ops *ops, cera_gemm_tile_fn fn) {
    ops->gemm_tile = fn;
    ops->tile_rows = AMX_ROWS;
    ops->tile_cols = AMX_COLS;
}

void cera_cpu_register_amx(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    set_tile(&ops[CERA_TYPE_Q8_0], tile_q8_0_amx);
    set_tile(&ops[CERA_TYPE_Q4_0], tile_q4_0_amx);
    set_tile(&ops[CERA_TYPE_Q5_0], tile_q5_0_amx);
    set_tile(&ops[CERA_TYPE_IQ4_NL], tile_iq4_nl_amx);
}

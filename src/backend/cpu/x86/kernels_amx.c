/*
 * kernels_amx.c — the AMX tier: tile matrix multiplies for the prefill gemm_tile of the int8
 * formats (tdpbssd: q8_0, q4_0, q5_0, iq4_nl with q8_0 activations; q2_k..q6_k with q8_k
 * activations) and of bf16 (tdpbf16ps). Everything else, including every vec_dot, is the
 * AVX-512 tier's. Registered by kernels.c only after the kernel granted this process the
 * AMX tile state.
 *
 * One call covers 16 weight rows x up to 32 activation rows (tokens) over the whole row:
 *   - activations are the A tiles, loaded straight from the activation rows (tileloadd takes
 *     a stride, and a block's quants are contiguous): tmm0 = tokens 0..15, tmm1 = 16..31;
 *   - the weights' block (or k-quant sub-block) is the B tile, which AMX wants in "VNNI"
 *     order (4 consecutive k of one column per 32-bit cell): unpacked to int8 and transposed
 *     in registers once per call, so it serves both A tiles;
 *   - tmm4/tmm5 hold the int32 dot of that block for every (token, row); they are stored and
 *     scaled in AVX-512 lanes (block scales change every 32 or 16 elements, so they cannot
 *     accumulate inside the tile; k-quant sub-block scales are applied in int32 first). The
 *     integer sums are exact, as in every tier; only the float order differs from the scalar
 *     reference. bf16 has no block scales and accumulates in the tile over the whole row.
 * The tile configuration is per thread; each call loads it when its shape differs from the
 * one the thread last loaded. Measured on a Xeon (one thread): 250-270 GOP/s for q4_0/q8_0,
 * 165-180 for the k-quants, 274 for bf16, against 66-80 for the AVX-512 register tiles.
 */
#include <immintrin.h>
#include <stdalign.h>
#include <stddef.h>
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

static _Thread_local int loaded_shape = -1; /* (rows of A0, rows of A1, k) last loaded here */

/* A tiles of rows0 and rows1 tokens (rows1 may be 0) by kbytes (32, or 16 for the k-quants
 * whose scales change every 16 elements). */
static void configure(int rows0, int rows1, int kbytes) {
    const int shape = (rows0 * 64 + rows1) * 64 + kbytes;
    if (shape == loaded_shape) return;
    alignas(64) amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = (uint8_t)rows0, cfg.colsb[0] = (uint16_t)kbytes; /* A0: tokens x k int8 */
    cfg.rows[4] = (uint8_t)rows0, cfg.colsb[4] = 64;               /* C0: tokens x 16 int32 */
    if (rows1) {
        cfg.rows[1] = (uint8_t)rows1, cfg.colsb[1] = (uint16_t)kbytes;
        cfg.rows[5] = (uint8_t)rows1, cfg.colsb[5] = 64;
    }
    cfg.rows[2] = (uint8_t)(kbytes / 4), cfg.colsb[2] = 64; /* B: k/4 rows of (16 columns x 4 k) */
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

/* AMX wants B in "VNNI" order: for each group of 4 k, the 4 bytes of every column side by side.
 * With the 16 weight rows' bytes contiguous ([16][k]), that is a transpose of 32-bit cells:
 * 16 x 8 cells for k = 32, 16 x 4 for k = 16. Done in registers, one permutex2var stage per
 * bit of the cell's row index that has to move into the register index (the last stage also
 * puts the rows back in order). The index tables come from that bit bookkeeping. */
static const int32_t perm16x8[3][2][16] = {
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
     {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
     {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 8, 16, 24, 2, 10, 18, 26, 4, 12, 20, 28, 6, 14, 22, 30},
     {1, 9, 17, 25, 3, 11, 19, 27, 5, 13, 21, 29, 7, 15, 23, 31}},
};
static const int32_t perm16x4[2][2][16] = {
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
     {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 4, 8, 12, 16, 20, 24, 28, 2, 6, 10, 14, 18, 22, 26, 30},
     {1, 5, 9, 13, 17, 21, 25, 29, 3, 7, 11, 15, 19, 23, 27, 31}},
};

/* in: [16 rows][4 * nreg bytes] contiguous; out: [nreg][64]. nreg = 8 (k = 32) or 4 (k = 16). */
static inline __attribute__((always_inline)) void to_vnni(const int8_t *in, int nreg, int8_t out[8][64]) {
    __m512i r[8];
    for (int i = 0; i < nreg; i++) r[i] = _mm512_load_si512(in + 64 * i);
    const int stages = nreg == 8 ? 3 : 2;
    for (int st = 0; st < stages; st++) {
        const int bit = nreg >> (st + 1); /* the register-index bit this stage swaps: 4, 2, 1 or 2, 1 */
        const int32_t(*perm)[16] = nreg == 8 ? perm16x8[st] : perm16x4[st];
        const __m512i ia = _mm512_loadu_si512(perm[0]), ib = _mm512_loadu_si512(perm[1]);
        for (int i = 0; i < nreg; i++) {
            if (i & bit) continue;
            const __m512i lo = r[i], hi = r[i | bit];
            r[i] = _mm512_permutex2var_epi32(lo, ia, hi);
            r[i | bit] = _mm512_permutex2var_epi32(lo, ib, hi);
        }
    }
    for (int i = 0; i < nreg; i++) _mm512_store_si512(out[i], r[i]);
}

static inline __attribute__((always_inline)) void amx_tile(int kind, int64_t n, float *s, size_t s_stride,
                                                           const void *w, size_t w_stride, const void *a,
                                                           size_t a_stride, int nr, int nc) {
    const int rows0 = nc < 16 ? nc : 16, rows1 = nc - rows0;
    configure(rows0, rows1, 32);
    alignas(64) float acc[AMX_COLS][AMX_ROWS];
    alignas(64) int32_t c[AMX_COLS][AMX_ROWS];
    alignas(64) int8_t q[AMX_ROWS][32];
    alignas(64) int8_t bt[8][64];
    float dx[AMX_ROWS];
    memset(acc, 0, sizeof acc);
    const uint8_t *act = a;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        unpack_rows(kind, w, w_stride, b, nr, q, dx);
        to_vnni(&q[0][0], 8, bt);
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

/* ---- k-quants (q8_k activations): sub-blocks of 32 (q4_k, q5_k) or 16 (q6_k, q3_k, q2_k) ---- */

enum { AMX_Q2_K, AMX_Q3_K, AMX_Q4_K, AMX_Q5_K, AMX_Q6_K };

/* One super-block of 16 weight rows: signed int8 quants, sub-block by sub-block ([sub-block]
 * [row][k], so each sub-block's B tile is one contiguous transpose), and integer scales. */
typedef struct kq_rows {
    alignas(64) int8_t q[QK_K * AMX_ROWS];
    alignas(64) int32_t scale[16][AMX_ROWS]; /* [sub-block][row] */
    alignas(64) int32_t mins[16][AMX_ROWS];  /* [group of 16][row], q2_k/q4_k/q5_k */
    alignas(64) float d[AMX_ROWS], dmin[AMX_ROWS];
} kq_rows;

static inline int kq_sub(int kind) { return kind == AMX_Q4_K || kind == AMX_Q5_K ? 32 : 16; }
static inline bool kq_has_mins(int kind) { return kind == AMX_Q2_K || kind == AMX_Q4_K || kind == AMX_Q5_K; }

/* Stores 32 quants of row m starting at element e into the sub-block layout. */
static inline void kq_put(kq_rows *o, int sub, int m, int e, __m256i v) {
    if (sub == 32) {
        _mm256_store_si256((__m256i *)(o->q + (e / 32) * (AMX_ROWS * 32) + m * 32), v);
    } else {
        _mm_store_si128((__m128i *)(o->q + (e / 16) * (AMX_ROWS * 16) + m * 16), _mm256_castsi256_si128(v));
        _mm_store_si128((__m128i *)(o->q + (e / 16 + 1) * (AMX_ROWS * 16) + m * 16),
                        _mm256_extracti128_si256(v, 1));
    }
}

/* Row m's super-block b into o (quants signed: the offsets of q3_k/q6_k are applied here). */
static inline __attribute__((always_inline)) void kq_unpack_row(int kind, const uint8_t *row, int64_t b,
                                                                int m, kq_rows *o) {
    const int sub = kq_sub(kind);
    switch (kind) {
    case AMX_Q2_K: {
        const block_q2_k *x = (const block_q2_k *)row + b;
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            for (int sh = 0; sh < 4; sh++)
                kq_put(o, sub, m, 128 * h + 32 * sh,
                       _mm256_and_si256(_mm256_srli_epi16(v, 2 * sh), _mm256_set1_epi8(3)));
        }
        for (int g = 0; g < 16; g++) {
            o->scale[g][m] = x->scales[g] & 0xF;
            o->mins[g][m] = x->scales[g] >> 4;
        }
        o->d[m] = _cvtsh_ss(x->d);
        o->dmin[m] = _cvtsh_ss(x->dmin);
        break;
    }
    case AMX_Q3_K: {
        const block_q3_k *x = (const block_q3_k *)row + b;
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * h));
            for (int sh = 0; sh < 4; sh++) {
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + sh)));
                const __m256i four = _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit),
                                                         _mm256_set1_epi8(4));
                const __m256i low = _mm256_and_si256(_mm256_srli_epi16(v, 2 * sh), _mm256_set1_epi8(3));
                kq_put(o, sub, m, 128 * h + 32 * sh, _mm256_sub_epi8(low, four));
            }
        }
        int8_t sc[16];
        q3_k_scales(x->scales, sc);
        for (int g = 0; g < 16; g++) o->scale[g][m] = sc[g];
        o->d[m] = _cvtsh_ss(x->d);
        break;
    }
    case AMX_Q4_K:
    case AMX_Q5_K: {
        const bool five = kind == AMX_Q5_K;
        const block_q4_k *x4 = (const block_q4_k *)row + b;
        const block_q5_k *x5 = (const block_q5_k *)row + b;
        const uint8_t *qs = five ? x5->qs : x4->qs;
        const __m256i low4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
        const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)x5->qh) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            if (five) {
                lo = _mm256_or_si256(
                    lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c), 4), b4));
                hi = _mm256_or_si256(
                    hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c + 1), 4), b4));
            }
            kq_put(o, sub, m, 64 * c, lo);
            kq_put(o, sub, m, 64 * c + 32, hi);
        }
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            k_scale_min(j, five ? x5->scales : x4->scales, &sc, &mn);
            o->scale[j][m] = sc;
            o->mins[2 * j][m] = o->mins[2 * j + 1][m] = mn;
        }
        o->d[m] = _cvtsh_ss(five ? x5->d : x4->d);
        o->dmin[m] = _cvtsh_ss(five ? x5->dmin : x4->dmin);
        break;
    }
    default: {
        const block_q6_k *x = (const block_q6_k *)row + b;
        const __m256i low4 = _mm256_set1_epi8(0x0F), hi2 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
            const __m256i u[4] = {
                _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), hi2)),
                _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), hi2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, hi2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), hi2)),
            };
            for (int k = 0; k < 4; k++) kq_put(o, sub, m, 128 * h + 32 * k, _mm256_sub_epi8(u[k], k32));
        }
        for (int g = 0; g < 16; g++) o->scale[g][m] = x->scales[g];
        o->d[m] = _cvtsh_ss(x->d);
        break;
    }
    }
}

static inline __attribute__((always_inline)) void amx_tile_kq(int kind, int64_t n, float *s, size_t s_stride,
                                                              const void *w, size_t w_stride, const void *a,
                                                              size_t a_stride, int nr, int nc) {
    const int sub = kq_sub(kind), nsub = QK_K / sub;
    const int rows0 = nc < 16 ? nc : 16, rows1 = nc - rows0;
    configure(rows0, rows1, sub);
    static _Thread_local kq_rows rows; /* 5 KiB: kept off the stack */
    alignas(64) float acc[AMX_COLS][AMX_ROWS];
    alignas(64) int32_t isum[AMX_COLS][AMX_ROWS];
    alignas(64) int32_t c[AMX_COLS][AMX_ROWS];
    alignas(64) int8_t bt[8][64];
    memset(acc, 0, sizeof acc);
    memset(&rows, 0, sizeof rows);
    const uint8_t *act = a;
    for (int64_t b = 0; b < n / QK_K; b++) {
        for (int m = 0; m < nr; m++)
            kq_unpack_row(kind, (const uint8_t *)w + (size_t)m * w_stride, b, m, &rows);
        memset(isum, 0, sizeof isum);
        const uint8_t *yb0 = act + (size_t)b * sizeof(block_q8_k);
        for (int j = 0; j < nsub; j++) {
            to_vnni(rows.q + j * AMX_ROWS * sub, sub / 4, bt);
            _tile_loadd(2, bt, 64);
            _tile_loadd(0, yb0 + offsetof(block_q8_k, qs) + (size_t)(j * sub), (long)a_stride);
            _tile_zero(4);
            _tile_dpbssd(4, 0, 2);
            _tile_stored(4, c[0], 64);
            if (rows1) {
                _tile_loadd(1, yb0 + 16 * a_stride + offsetof(block_q8_k, qs) + (size_t)(j * sub),
                            (long)a_stride);
                _tile_zero(5);
                _tile_dpbssd(5, 1, 2);
                _tile_stored(5, c[16], 64);
            }
            const __m512i sc = _mm512_load_si512(rows.scale[j]);
            for (int t = 0; t < nc; t++)
                _mm512_store_si512(isum[t],
                                   _mm512_add_epi32(_mm512_load_si512(isum[t]),
                                                    _mm512_mullo_epi32(_mm512_load_si512(c[t]), sc)));
        }
        const __m512 vd = _mm512_load_ps(rows.d), vdmin = _mm512_load_ps(rows.dmin);
        for (int t = 0; t < nc; t++) {
            const block_q8_k *y = (const block_q8_k *)(yb0 + (size_t)t * a_stride);
            __m512 r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(isum[t])),
                                       _mm512_mul_ps(vd, _mm512_set1_ps(y->d)), _mm512_load_ps(acc[t]));
            if (kq_has_mins(kind)) {
                __m512i mn = _mm512_setzero_si512();
                for (int g = 0; g < 16; g++)
                    mn = _mm512_add_epi32(mn, _mm512_mullo_epi32(_mm512_load_si512(rows.mins[g]),
                                                                 _mm512_set1_epi32(y->bsums[g])));
                r = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mn), _mm512_mul_ps(vdmin, _mm512_set1_ps(y->d)), r);
            }
            _mm512_store_ps(acc[t], r);
        }
    }
    const __mmask16 mask = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nc; t++)
        _mm512_mask_storeu_ps(s + (size_t)t * s_stride, mask, _mm512_load_ps(acc[t]));
}

static void tile_q2_k_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    amx_tile_kq(AMX_Q2_K, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_q3_k_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    amx_tile_kq(AMX_Q3_K, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_q4_k_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    amx_tile_kq(AMX_Q4_K, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_q5_k_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    amx_tile_kq(AMX_Q5_K, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_q6_k_amx(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                          int nr, int nc) {
    amx_tile_kq(AMX_Q6_K, n, s, ss, w, ws, a, as, nr, nc);
}

/* ---- bf16 weights x bf16 activations: tdpbf16ps, accumulated in the tile over the whole row
 * (no block scales), as the AVX-512 BF16 dot's pairwise products summed in f32. ---- */

/* 16 rows x 16 cells (a cell = 2 bf16) -> [16 cells][16 rows]: four permutex2var stages. */
static const int32_t perm16x16[4][2][16] = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
     {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
     {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
     {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
     {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
};

static inline void transpose16x16(__m512i r[16]) {
    for (int st = 0; st < 4; st++) {
        const int bit = 8 >> st;
        const __m512i ia = _mm512_loadu_si512(perm16x16[st][0]), ib = _mm512_loadu_si512(perm16x16[st][1]);
        for (int i = 0; i < 16; i++) {
            if (i & bit) continue;
            const __m512i lo = r[i], hi = r[i | bit];
            r[i] = _mm512_permutex2var_epi32(lo, ia, hi);
            r[i | bit] = _mm512_permutex2var_epi32(lo, ib, hi);
        }
    }
}

static void tile_bf16_amx(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride, const void *a,
                          size_t a_stride, int nr, int nc) {
    const int rows0 = nc < 16 ? nc : 16, rows1 = nc - rows0;
    configure(rows0, rows1, 64);
    alignas(64) int8_t bt[16][64];
    alignas(64) cera_bf16 apad[AMX_COLS][32]; /* the last partial step, zero-padded */
    alignas(64) float c[AMX_COLS][AMX_ROWS];
    _tile_zero(4);
    if (rows1) _tile_zero(5); /* an unconfigured tile register faults */
    for (int64_t k = 0; k < n; k += 32) {
        const int64_t left = n - k;
        const __mmask32 m = left >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << left) - 1);
        __m512i r[16];
        for (int i = 0; i < AMX_ROWS; i++)
            r[i] = i < nr ? _mm512_maskz_loadu_epi16(
                                m, (const cera_bf16 *)((const uint8_t *)w + (size_t)i * w_stride) + k)
                          : _mm512_setzero_si512();
        transpose16x16(r);
        for (int i = 0; i < 16; i++) _mm512_store_si512(bt[i], r[i]);
        _tile_loadd(2, bt, 64);
        const uint8_t *a0 = (const uint8_t *)a + (size_t)k * sizeof(cera_bf16);
        size_t stride = a_stride;
        if (left < 32) { /* copy the tail so the tile load stays inside the rows */
            for (int t = 0; t < nc; t++)
                _mm512_store_si512(apad[t], _mm512_maskz_loadu_epi16(m, a0 + (size_t)t * a_stride));
            a0 = (const uint8_t *)apad;
            stride = sizeof apad[0];
        }
        _tile_loadd(0, a0, (long)stride);
        _tile_dpbf16ps(4, 0, 2);
        if (rows1) {
            _tile_loadd(1, a0 + 16 * stride, (long)stride);
            _tile_dpbf16ps(5, 1, 2);
        }
    }
    _tile_stored(4, c[0], 64);
    if (rows1) _tile_stored(5, c[16], 64);
    const __mmask16 mask = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nc; t++) _mm512_mask_storeu_ps(s + (size_t)t * s_stride, mask, _mm512_load_ps(c[t]));
}

static void set_tile(cera_cpu_type_ops *ops, cera_gemm_tile_fn fn) {
    ops->gemm_tile = fn;
    ops->tile_rows = AMX_ROWS;
    ops->tile_cols = AMX_COLS;
}

void cera_cpu_register_amx(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    set_tile(&ops[CERA_TYPE_Q8_0], tile_q8_0_amx);
    ops[CERA_TYPE_Q8_0].packed_tile = NULL; /* prompts take the AMX tile, not the repacked one */
    /* Q4_0 and IQ4_NL keep the AVX-512 tier's repacked kernels (repack.h), which take a weight
     * over its AMX tile wherever it is repacked: measured on the H200 host's Xeon, 16 threads,
     * tinyllama-1.1b Q4_0 pp512 918.8 tok/s repacked against 784.8 with the AMX tile (whose
     * nibble unpacking and per-block scaling run in AVX-512 lanes per call), and decode gets
     * the repacked GEMV instead of the file-layout row dot (tg128 68.3 tok/s with it off). */
    set_tile(&ops[CERA_TYPE_Q4_0], tile_q4_0_amx);
    set_tile(&ops[CERA_TYPE_Q5_0], tile_q5_0_amx);
    set_tile(&ops[CERA_TYPE_IQ4_NL], tile_iq4_nl_amx);
    set_tile(&ops[CERA_TYPE_Q2_K], tile_q2_k_amx);
    set_tile(&ops[CERA_TYPE_Q3_K], tile_q3_k_amx);
    set_tile(&ops[CERA_TYPE_Q4_K], tile_q4_k_amx);
    set_tile(&ops[CERA_TYPE_Q5_K], tile_q5_k_amx);
    set_tile(&ops[CERA_TYPE_Q6_K], tile_q6_k_amx);
    set_tile(&ops[CERA_TYPE_BF16], tile_bf16_amx);
}

/*
 * repack_avx512.c — the AVX-512 VNNI tiles over Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and Q4_K weights
 * repacked into 16-row groups (repack.h): each 32-bit lane of a 512-bit vector is one weight row, so one
 * vpdpbusd with a broadcast activation word adds 4 products to each of the 16 rows, and the block's float
 * step (convert, scale, fused multiply-add) serves 16 outputs at once. Registered by the avx512 tier
 * (kernels_avx512.c); the arithmetic is repack.c's scalar reference, bit for bit.
 *
 * Per block and group: 4 loads of 64 nibble bytes unpacked into 8 vectors (low and high
 * nibbles) shared by every activation column; for Q4_0, per column 8 vpdpbusd in two independent
 * chains (their sum is exact) started from the offset term -8 * sum(y) (IQ4_NL: the nibbles
 * looked up as kvalues + 128 by a byte shuffle, the offset -128 * sum(y)); for Q4_1, 8 separate
 * word dots each scaled into its own float partial (llama.cpp's vec_dot order, repack.h), and
 * Q8_0 the same over 8 words of bytes.
 */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "backend/cpu/repack.h"
#include "tensor/blocks.h"

#define COLS 8 /* activation columns per pass: 8 accumulators + 8 unpacked vectors in registers */

static inline __m512i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Q4_0, and IQ4_NL (iq4: the nibbles index kvalues_iq4nl + 128, a byte shuffle per vector). */
static inline __attribute__((always_inline)) void
q4_0x16_cols(bool iq4, int64_t nb, float *s, size_t s_stride, const uint8_t *x, const uint8_t *a,
             size_t a_stride, const uint8_t *aux, size_t aux_stride, int nc) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_xor_si128(_mm_loadu_si128((const __m128i *)kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    __m512 acc[COLS];
    for (int c = 0; c < COLS; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i lo[4], hi[4];
        for (int i = 0; i < 4; i++) {
            const __m512i v = _mm512_load_si512((const void *)(cera_pack_qs(x, CERA_TYPE_Q4_0, b) + 64 * i));
            lo[i] = _mm512_and_si512(v, low4);
            hi[i] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            if (iq4) {
                lo[i] = _mm512_shuffle_epi8(table, lo[i]);
                hi[i] = _mm512_shuffle_epi8(table, hi[i]);
            }
        }
        const __m512 dx =
            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)cera_pack_d(x, CERA_TYPE_Q4_0, b)));
        for (int c = 0; c < nc; c++) {
            const int8_t *yq = ((const block_q8_0 *)(a + (size_t)c * a_stride))[b].qs;
            const cera_pack_aux_q4_0 *ax = (const cera_pack_aux_q4_0 *)(aux + (size_t)c * aux_stride) + b;
            __m512i i0 = _mm512_set1_epi32(ax->corr), i1 = _mm512_setzero_si512();
            for (int i = 0; i < 4; i++) {
                i0 = _mm512_dpbusd_epi32(i0, lo[i], bcast32(yq + 4 * i));
                i1 = _mm512_dpbusd_epi32(i1, hi[i], bcast32(yq + 16 + 4 * i));
            }
            const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(ax->d));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)), d, acc[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, acc[c]);
}

static void packed_q4_0_avx512(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                               size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK4_0;
    const uint8_t *x = w, *ap = a, *xp = aux;
    /* constant column counts for the common cases, so the accumulators stay in registers */
    if (nc == 1)
        q4_0x16_cols(false, nb, s, s_stride, x, ap, a_stride, xp, aux_stride, 1);
    else if (nc == COLS)
        q4_0x16_cols(false, nb, s, s_stride, x, ap, a_stride, xp, aux_stride, COLS);
    else
        q4_0x16_cols(false, nb, s, s_stride, x, ap, a_stride, xp, aux_stride, nc);
}

static void packed_iq4_nl_avx512(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                 size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK4_NL;
    const uint8_t *x = w, *ap = a, *xp = aux;
    if (nc == 1)
        q4_0x16_cols(true, nb, s, s_stride, x, ap, a_stride, xp, aux_stride, 1);
    else if (nc == COLS)
        q4_0x16_cols(true, nb, s, s_stride, x, ap, a_stride, xp, aux_stride, COLS);
    else
        q4_0x16_cols(true, nb, s, s_stride, x, ap, a_stride, xp, aux_stride, nc);
}

/* Q4_1, Q5_1 and Q5_0: llama.cpp's vec_dot order per output (repack.h), so 8 float partials per
 * column (one per 4-element word of the block) instead of one; the integer words are not summed.
 * Q5: each word's fifth bits come from the row's qh word: the byte holding bits 4l..4l+3 is
 * spread over the lane's 4 bytes (a byte shuffle), tested per byte, and 16 added where set. */
#define COLS_Q4_1 2 /* 16 partials + 2 minimum sums + 8 unpacked vectors in registers */

static inline __attribute__((always_inline)) void nib8_cols(cera_type t, int64_t nb, float *s,
                                                            size_t s_stride, const uint8_t *x,
                                                            const uint8_t *a, size_t a_stride,
                                                            const uint8_t *aux, size_t aux_stride, int nc) {
    const bool five = t != CERA_TYPE_Q4_1, mins = t != CERA_TYPE_Q5_0;
    const __m512i low4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    const __m512i bits_lo = _mm512_set1_epi32(0x08040201), bits_hi = _mm512_set1_epi32((int)0x80402010);
    __m512 acc[COLS_Q4_1][8], summ[COLS_Q4_1];
    for (int c = 0; c < COLS_Q4_1; c++) {
        summ[c] = _mm512_setzero_ps();
        for (int l = 0; l < 8; l++) acc[c][l] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        __m512i u[8]; /* word l: low nibbles of vector l (l < 4), high nibbles of vector l - 4 */
        for (int i = 0; i < 4; i++) {
            const __m512i v = _mm512_load_si512((const void *)(cera_pack_qs(x, t, b) + 64 * i));
            u[i] = _mm512_and_si512(v, low4);
            u[4 + i] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        }
        if (five) {
            const __m512i qh = _mm512_load_si512((const void *)cera_pack_qh(x, t, b));
            /* byte index of each lane's first byte within its 128-bit half, on all 4 bytes */
            const __m512i first = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0);
            for (int q = 0; q < 4; q++) { /* byte q of each row's qh: words 2q and 2q + 1 */
                const __m512i rep =
                    _mm512_shuffle_epi8(qh, _mm512_add_epi8(first, _mm512_set1_epi8((char)q)));
                u[2 * q] =
                    _mm512_mask_add_epi8(u[2 * q], _mm512_test_epi8_mask(rep, bits_lo), u[2 * q], sixteen);
                u[2 * q + 1] = _mm512_mask_add_epi8(u[2 * q + 1], _mm512_test_epi8_mask(rep, bits_hi),
                                                    u[2 * q + 1], sixteen);
            }
        }
        const __m512 dx = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)cera_pack_d(x, t, b)));
        const __m512 mx = mins ? _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)cera_pack_m(x, t, b)))
                               : _mm512_setzero_ps();
        for (int c = 0; c < nc; c++) {
            const int8_t *yq;
            float dy;
            const int32_t *corr = NULL;
            if (mins) {
                const cera_pack_aux_q4_1 *ax = (const cera_pack_aux_q4_1 *)(aux + (size_t)c * aux_stride) + b;
                yq = ((const block_q8_1 *)(a + (size_t)c * a_stride))[b].qs;
                dy = ax->d;
                summ[c] = _mm512_fmadd_ps(mx, _mm512_set1_ps(ax->s), summ[c]); /* exact product */
            } else {
                const cera_pack_aux_q8_0 *ax = (const cera_pack_aux_q8_0 *)(aux + (size_t)c * aux_stride) + b;
                yq = ((const block_q8_0 *)(a + (size_t)c * a_stride))[b].qs;
                dy = ax->d;
                corr = ax->corr;
            }
            const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(dy));
            for (int l = 0; l < 8; l++) {
                const __m512i start = mins ? _mm512_setzero_si512() : _mm512_set1_epi32(corr[l]);
                acc[c][l] = _mm512_fmadd_ps(
                    d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, u[l], bcast32(yq + 4 * l))), acc[c][l]);
            }
        }
    }
    for (int c = 0; c < nc; c++) {
        const __m512 lo =
            _mm512_add_ps(_mm512_add_ps(acc[c][0], acc[c][4]), _mm512_add_ps(acc[c][2], acc[c][6]));
        const __m512 hi =
            _mm512_add_ps(_mm512_add_ps(acc[c][1], acc[c][5]), _mm512_add_ps(acc[c][3], acc[c][7]));
        _mm512_storeu_ps(s + (size_t)c * s_stride, _mm512_add_ps(_mm512_add_ps(lo, hi), summ[c]));
    }
}

/* One column (decode) or COLS_Q4_1 at a time; inlined into each type's entry point below, so
 * that the type's branches fold away. */
static inline __attribute__((always_inline)) void
packed_nib8_avx512(cera_type t, int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                   size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    if (nc == 1)
        nib8_cols(t, n / 32, s, s_stride, w, a, a_stride, aux, aux_stride, 1);
    else
        nib8_cols(t, n / 32, s, s_stride, w, a, a_stride, aux, aux_stride, COLS_Q4_1);
}
static void packed_q4_1_avx512(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                               size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    packed_nib8_avx512(CERA_TYPE_Q4_1, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}
static void packed_q5_1_avx512(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                               size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    packed_nib8_avx512(CERA_TYPE_Q5_1, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}
static void packed_q5_0_avx512(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                               size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    packed_nib8_avx512(CERA_TYPE_Q5_0, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}

/* Q8_0: the file-layout tile's order per output (repack.h), 8 float partials per column; the
 * stored bytes are x + 128, each word's offset comes in as its starting value -128 * sum(y). */
#define COLS_Q8_0 2

static inline __attribute__((always_inline)) void q8_0x16_cols(int64_t nb, float *s, size_t s_stride,
                                                               const uint8_t *x, const uint8_t *a,
                                                               size_t a_stride, const uint8_t *aux,
                                                               size_t aux_stride, int nc) {
    __m512 acc[COLS_Q8_0][8];
    for (int c = 0; c < COLS_Q8_0; c++)
        for (int l = 0; l < 8; l++) acc[c][l] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i u[8];
        for (int l = 0; l < 8; l++)
            u[l] = _mm512_load_si512((const void *)(cera_pack_qs(x, CERA_TYPE_Q8_0, b) + 64 * l));
        const __m512 dx =
            _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)cera_pack_d(x, CERA_TYPE_Q8_0, b)));
        for (int c = 0; c < nc; c++) {
            const int8_t *yq = ((const block_q8_0 *)(a + (size_t)c * a_stride))[b].qs;
            const cera_pack_aux_q8_0 *ax = (const cera_pack_aux_q8_0 *)(aux + (size_t)c * aux_stride) + b;
            const __m512 d = _mm512_mul_ps(dx, _mm512_set1_ps(ax->d));
            for (int l = 0; l < 8; l++)
                acc[c][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(
                                                _mm512_set1_epi32(ax->corr[l]), u[l], bcast32(yq + 4 * l))),
                                            d, acc[c][l]);
        }
    }
    for (int c = 0; c < nc; c++) {
        const __m512 lo =
            _mm512_add_ps(_mm512_add_ps(acc[c][0], acc[c][4]), _mm512_add_ps(acc[c][2], acc[c][6]));
        const __m512 hi =
            _mm512_add_ps(_mm512_add_ps(acc[c][1], acc[c][5]), _mm512_add_ps(acc[c][3], acc[c][7]));
        _mm512_storeu_ps(s + (size_t)c * s_stride, _mm512_add_ps(_mm512_add_ps(lo, hi), _mm512_setzero_ps()));
    }
}

static void packed_q8_0_avx512(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                               size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK8_0;
    const uint8_t *x = w, *ap = a, *xp = aux;
    if (nc == 1)
        q8_0x16_cols(nb, s, s_stride, x, ap, a_stride, xp, aux_stride, 1);
    else
        q8_0x16_cols(nb, s, s_stride, x, ap, a_stride, xp, aux_stride, COLS_Q8_0);
}

/* Q4_K (repack.h): per super-block and 64-element chunk, 8 vectors unpacked into 16 (low nibbles:
 * sub-block 2c, high: 2c + 1) shared by the columns; per column and sub-block 8 vpdpbusd in two
 * chains, scaled by the rows' sub-block scales (vpmulld) into the exact super-block integer; the
 * minimum term from the mins as 16-bit pairs against the activation's sub-block sums (vpdpwssd). */
#define COLS_Q4_K 4

static inline __attribute__((always_inline)) void q4_kx16_cols(int64_t nb, float *s, size_t s_stride,
                                                               const uint8_t *x, const uint8_t *a,
                                                               size_t a_stride, const uint8_t *aux,
                                                               size_t aux_stride, int nc) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    __m512 acc[COLS_Q4_K], accm[COLS_Q4_K];
    for (int c = 0; c < COLS_Q4_K; c++) acc[c] = accm[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *u = cera_pack_q4_k_unit(x, b);
        __m512i isum[COLS_Q4_K];
        for (int c = 0; c < COLS_Q4_K; c++) isum[c] = _mm512_setzero_si512();
        for (int ch = 0; ch < 4; ch++) {
            __m512i lo[8], hi[8];
            for (int l = 0; l < 8; l++) {
                const __m512i v =
                    _mm512_load_si512((const void *)(u + CERA_PACK_Q4_K_QS + 64 * (8 * ch + l)));
                lo[l] = _mm512_and_si512(v, low4);
                hi[l] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
            }
            const __m512i sc0 =
                _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(u + CERA_PACK_Q4_K_SC + 32 * ch)));
            const __m512i sc1 =
                _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(u + CERA_PACK_Q4_K_SC + 32 * ch + 16)));
            for (int c = 0; c < nc; c++) {
                const int8_t *yq = ((const block_q8_k *)(a + (size_t)c * a_stride))[b].qs + 64 * ch;
                __m512i p0 = _mm512_setzero_si512(), p1 = _mm512_setzero_si512();
                __m512i p2 = _mm512_setzero_si512(), p3 = _mm512_setzero_si512();
                for (int l = 0; l < 8; l += 2) {
                    p0 = _mm512_dpbusd_epi32(p0, lo[l], bcast32(yq + 4 * l));
                    p1 = _mm512_dpbusd_epi32(p1, lo[l + 1], bcast32(yq + 4 * l + 4));
                    p2 = _mm512_dpbusd_epi32(p2, hi[l], bcast32(yq + 32 + 4 * l));
                    p3 = _mm512_dpbusd_epi32(p3, hi[l + 1], bcast32(yq + 32 + 4 * l + 4));
                }
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(_mm512_add_epi32(p0, p1), sc0));
                isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(_mm512_add_epi32(p2, p3), sc1));
            }
        }
        const __m512 dx = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)u));
        const __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(u + 32)));
        __m512i mn[4];
        for (int v = 0; v < 4; v++)
            mn[v] =
                _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *)(u + CERA_PACK_Q4_K_MN + 32 * v)));
        for (int c = 0; c < nc; c++) {
            const cera_pack_aux_q4_k *ax = (const cera_pack_aux_q4_k *)(aux + (size_t)c * aux_stride) + b;
            __m512i imin = _mm512_setzero_si512();
            for (int v = 0; v < 4; v++) {
                int32_t pair;
                memcpy(&pair, ax->bs + 2 * v, 4);
                imin = _mm512_dpwssd_epi32(imin, mn[v], _mm512_set1_epi32(pair));
            }
            const __m512 dy = _mm512_set1_ps(ax->d);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(dx, dy), acc[c]);
            accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin), _mm512_mul_ps(dm, dy), accm[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm512_storeu_ps(s + (size_t)c * s_stride, _mm512_sub_ps(acc[c], accm[c]));
}

static void packed_q4_k_avx512(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                               size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK_K;
    const uint8_t *x = w, *ap = a, *xp = aux;
    if (nc == 1)
        q4_kx16_cols(nb, s, s_stride, x, ap, a_stride, xp, aux_stride, 1);
    else if (nc == COLS_Q4_K)
        q4_kx16_cols(nb, s, s_stride, x, ap, a_stride, xp, aux_stride, COLS_Q4_K);
    else
        q4_kx16_cols(nb, s, s_stride, x, ap, a_stride, xp, aux_stride, nc);
}

void cera_cpu_register_repack_avx512(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    ops[CERA_TYPE_Q4_K].packed_tile = packed_q4_k_avx512;
    ops[CERA_TYPE_Q4_K].packed_cols = COLS_Q4_K;
    ops[CERA_TYPE_IQ4_NL].packed_tile = packed_iq4_nl_avx512;
    ops[CERA_TYPE_IQ4_NL].packed_cols = COLS;
    ops[CERA_TYPE_Q8_0].packed_tile = packed_q8_0_avx512;
    ops[CERA_TYPE_Q8_0].packed_cols = COLS_Q8_0;
    ops[CERA_TYPE_Q4_1].packed_tile = packed_q4_1_avx512;
    ops[CERA_TYPE_Q4_1].packed_cols = COLS_Q4_1;
    ops[CERA_TYPE_Q5_1].packed_tile = packed_q5_1_avx512;
    ops[CERA_TYPE_Q5_1].packed_cols = COLS_Q4_1;
    ops[CERA_TYPE_Q5_0].packed_tile = packed_q5_0_avx512;
    ops[CERA_TYPE_Q5_0].packed_cols = COLS_Q4_1;
    ops[CERA_TYPE_Q4_0].packed_tile = packed_q4_0_avx512;
    ops[CERA_TYPE_Q4_0].packed_cols = COLS;
}

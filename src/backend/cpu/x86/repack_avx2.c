/*
 * repack_avx2.c — the AVX2 tiles over Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and Q4_K weights repacked into
 * 16-row groups (repack.h): a 256-bit vector holds 8 of the 16 rows (the low or high 32 bytes of each 64-byte
 * vector of the layout), one 32-bit lane per row. Without VNNI the byte dot is pmaddubsw (pairs into int16)
 * and pmaddwd (int16 pairs into int32); a nibble times an activation is at most 15 * 127, so the
 * 8 pair sums of a block (at most 8 * 2 * 1905 = 30480) add up exactly in int16 before the
 * single widening (Q4_1 keeps its 8 word dots apart, as its reference). One activation column (a
 * decode step) takes both halves in one pass over the group, so each 64-byte vector is used whole
 * as it streams in (two passes read the group twice, the second time from L2) and the activation
 * terms are loaded once. Registered by the avx2 tier (kernels_avx2.c); the arithmetic is
 * repack.c's scalar references, bit for bit.
 */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "backend/cpu/repack.h"
#include "tensor/blocks.h"

#define COLS 4 /* activation columns per pass */

static inline __m256i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Halves h0 .. h0 + nh - 1 of the group (rows 8h .. 8h + 7 each) against nc activation columns:
 * both halves of one column (a decode step: one pass over the group, each 64-byte vector used whole
 * as it streams in, the activation words and block terms loaded once for both; two passes read
 * the group twice, the second time from L2) or one half of COLS columns (a prompt). Per output the
 * integer dot of the block, then one multiply-add. */
static inline __attribute__((always_inline)) void q4_0_cols(int64_t nb, int h0, int nh, float *s,
                                                            size_t s_stride, const uint8_t *x,
                                                            const uint8_t *a, size_t a_stride,
                                                            const uint8_t *aux, size_t aux_stride, int nc) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[2][COLS];
    for (int j = 0; j < nh; j++)
        for (int c = 0; c < nc; c++) acc[j][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = cera_pack_qs(x, CERA_TYPE_Q4_0, b);
        __m256i lo[2][4], hi[2][4];
        __m256 dx[2];
        for (int j = 0; j < nh; j++) {
            for (int i = 0; i < 4; i++) {
                const __m256i v = _mm256_load_si256((const __m256i *)(q + 64 * i + 32 * (h0 + j)));
                lo[j][i] = _mm256_and_si256(v, low4);
                hi[j][i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
            }
            dx[j] = _mm256_cvtph_ps(
                _mm_load_si128((const __m128i *)(cera_pack_d(x, CERA_TYPE_Q4_0, b) + 8 * (h0 + j))));
        }
        for (int c = 0; c < nc; c++) {
            const int8_t *yq = ((const block_q8_0 *)(a + (size_t)c * a_stride))[b].qs;
            const cera_pack_aux_q4_0 *ax = (const cera_pack_aux_q4_0 *)(aux + (size_t)c * aux_stride) + b;
            __m256i p[2][2];
            for (int i = 0; i < 4; i++) {
                const __m256i ylo = bcast32(yq + 4 * i), yhi = bcast32(yq + 16 + 4 * i);
                for (int j = 0; j < nh; j++) {
                    const __m256i pl = _mm256_maddubs_epi16(lo[j][i], ylo),
                                  ph = _mm256_maddubs_epi16(hi[j][i], yhi);
                    p[j][0] = i ? _mm256_add_epi16(p[j][0], pl) : pl;
                    p[j][1] = i ? _mm256_add_epi16(p[j][1], ph) : ph;
                }
            }
            for (int j = 0; j < nh; j++) {
                const __m256i isum = _mm256_add_epi32(
                    _mm256_madd_epi16(_mm256_add_epi16(p[j][0], p[j][1]), ones), _mm256_set1_epi32(ax->corr));
                acc[j][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                                            _mm256_mul_ps(dx[j], _mm256_set1_ps(ax->d)), acc[j][c]);
            }
        }
    }
    for (int j = 0; j < nh; j++)
        for (int c = 0; c < nc; c++) _mm256_storeu_ps(s + (size_t)c * s_stride + 8 * (h0 + j), acc[j][c]);
}

/* A decode column takes both halves in one pass; prompt columns one half per pass. The column
 * counts are spelled out as constants where they can be, so that the always-inline body keeps
 * its accumulators in registers (packed_q8_0_avx2 likewise). */
static void packed_q4_0_avx2(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                             size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK4_0;
    const uint8_t *x = w, *ap = a, *xp = aux;
    if (nc == 1) {
        q4_0_cols(nb, 0, 2, s, s_stride, x, ap, a_stride, xp, aux_stride, 1);
        return;
    }
    for (int h = 0; h < 2; h++) {
        if (nc == COLS)
            q4_0_cols(nb, h, 1, s, s_stride, x, ap, a_stride, xp, aux_stride, COLS);
        else
            q4_0_cols(nb, h, 1, s, s_stride, x, ap, a_stride, xp, aux_stride, nc);
    }
}

/* Q4_1, Q5_1 and Q5_0, all 16 rows against one activation column: per row 8 float partials (one
 * per 4-element word) and the minimum sum, as repack.c's references; 18 accumulators for the two
 * halves (more than the registers: measured faster than a pass per half all the same in
 * decode, and no slower in prompts, whose columns take one pass each). Q5's fifth bits as in repack_avx512.c:
 * the qh byte of each word spread over the lane's bytes, tested, 16 added where set (u <= 31,
 * so pmaddubsw's pairs stay below 2^15). */
static void nib8_x16_col(cera_type t, int64_t nb, float *s, const uint8_t *x, const uint8_t *a,
                         const uint8_t *aux) {
    const bool five = t != CERA_TYPE_Q4_1, mins = t != CERA_TYPE_Q5_0;
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1), sixteen = _mm256_set1_epi8(16);
    const __m256i bits_lo = _mm256_set1_epi32(0x08040201), bits_hi = _mm256_set1_epi32((int)0x80402010);
    const __m256i first =
        _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
    __m256 acc[2][8], summ[2];
    for (int h = 0; h < 2; h++) {
        summ[h] = _mm256_setzero_ps();
        for (int l = 0; l < 8; l++) acc[h][l] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *yq;
        float dy;
        const int32_t *corr = NULL;
        if (mins) {
            const cera_pack_aux_q4_1 *ax = (const cera_pack_aux_q4_1 *)aux + b;
            yq = ((const block_q8_1 *)a)[b].qs;
            dy = ax->d;
            for (int h = 0; h < 2; h++) {
                const __m256 mx =
                    _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(cera_pack_m(x, t, b) + 8 * h)));
                summ[h] = _mm256_fmadd_ps(mx, _mm256_set1_ps(ax->s), summ[h]); /* exact product */
            }
        } else {
            const cera_pack_aux_q8_0 *ax = (const cera_pack_aux_q8_0 *)aux + b;
            yq = ((const block_q8_0 *)a)[b].qs;
            dy = ax->d;
            corr = ax->corr;
        }
        __m256 d[2];
        __m256i qh[2];
        for (int h = 0; h < 2; h++) {
            qh[h] = five ? _mm256_load_si256((const __m256i *)(cera_pack_qh(x, t, b) + 32 * h))
                         : _mm256_setzero_si256();
            d[h] = _mm256_mul_ps(
                _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(cera_pack_d(x, t, b) + 8 * h))),
                _mm256_set1_ps(dy));
        }
        for (int i = 0; i < 4; i++) {
            for (int h = 0; h < 2; h++) {
                const __m256i v =
                    _mm256_load_si256((const __m256i *)(cera_pack_qs(x, t, b) + 64 * i + 32 * h));
                __m256i w2[2] = {_mm256_and_si256(v, low4), _mm256_and_si256(_mm256_srli_epi16(v, 4), low4)};
                for (int k = 0; k < 2; k++) {
                    const int l = i + 4 * k; /* word l: elements 4l .. 4l + 3 */
                    if (five) {
                        const __m256i rep = _mm256_shuffle_epi8(
                            qh[h], _mm256_add_epi8(first, _mm256_set1_epi8((char)(l / 2))));
                        const __m256i pat = l & 1 ? bits_hi : bits_lo;
                        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(rep, pat), pat);
                        w2[k] = _mm256_or_si256(w2[k], _mm256_and_si256(set, sixteen));
                    }
                    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w2[k], bcast32(yq + 4 * l)), ones);
                    if (!mins) p = _mm256_add_epi32(p, _mm256_set1_epi32(corr[l]));
                    acc[h][l] = _mm256_fmadd_ps(d[h], _mm256_cvtepi32_ps(p), acc[h][l]);
                }
            }
        }
    }
    for (int h = 0; h < 2; h++) {
        const __m256 lo =
            _mm256_add_ps(_mm256_add_ps(acc[h][0], acc[h][4]), _mm256_add_ps(acc[h][2], acc[h][6]));
        const __m256 hi =
            _mm256_add_ps(_mm256_add_ps(acc[h][1], acc[h][5]), _mm256_add_ps(acc[h][3], acc[h][7]));
        _mm256_storeu_ps(s + 8 * h, _mm256_add_ps(_mm256_add_ps(lo, hi), summ[h]));
    }
}

static void packed_nib8_avx2(cera_type t, int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                             size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    for (int c = 0; c < nc; c++)
        nib8_x16_col(t, n / 32, s + (size_t)c * s_stride, w, (const uint8_t *)a + (size_t)c * a_stride,
                     (const uint8_t *)aux + (size_t)c * aux_stride);
}
static void packed_q4_1_avx2(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                             size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    packed_nib8_avx2(CERA_TYPE_Q4_1, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}
static void packed_q5_1_avx2(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                             size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    packed_nib8_avx2(CERA_TYPE_Q5_1, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}
static void packed_q5_0_avx2(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                             size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    packed_nib8_avx2(CERA_TYPE_Q5_0, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}

/* Q8_0, halves h0 .. h0 + nh - 1 of the group against nc activation columns, as q4_0_cols: both
 * halves of one column (a decode step) or one half of up to COLS_Q8_0 columns (a prompt). Per
 * output 8 float partials, as repack.c's reference. The stored x + 128 does not fit pmaddubsw's
 * pairs (255 * 127 * 2 > 2^15), so the bytes go back to signed x and the sign moves onto the
 * activations (|x| * sign(y, x), exact: neither side holds -128), which needs no offset; |x| is
 * shared by the columns. 16 or 24 accumulators are more than the 16 registers (the compiler keeps
 * some in memory); measured faster all the same than a pass per half (decode) or one column per
 * pass (prompts). */
#define COLS_Q8_0 3
static inline __attribute__((always_inline)) void q8_0_cols(int64_t nb, int h0, int nh, float *s,
                                                            size_t s_stride, const uint8_t *x,
                                                            const uint8_t *a, size_t a_stride,
                                                            const uint8_t *aux, size_t aux_stride, int nc) {
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    const block_q8_0 *y[COLS_Q8_0];
    const cera_pack_aux_q8_0 *ax[COLS_Q8_0];
    for (int c = 0; c < nc; c++) {
        y[c] = (const block_q8_0 *)(a + c * a_stride);
        ax[c] = (const cera_pack_aux_q8_0 *)(aux + c * aux_stride);
    }
    __m256 acc[2][COLS_Q8_0][8];
    for (int j = 0; j < nh; j++)
        for (int c = 0; c < nc; c++)
            for (int l = 0; l < 8; l++) acc[j][c][l] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *q = cera_pack_qs(x, CERA_TYPE_Q8_0, b);
        __m256 d[2][COLS_Q8_0];
        for (int j = 0; j < nh; j++) {
            const __m256 dx = _mm256_cvtph_ps(
                _mm_load_si128((const __m128i *)(cera_pack_d(x, CERA_TYPE_Q8_0, b) + 8 * (h0 + j))));
            for (int c = 0; c < nc; c++) d[j][c] = _mm256_mul_ps(dx, _mm256_set1_ps(ax[c][b].d));
        }
        for (int l = 0; l < 8; l++)
            for (int j = 0; j < nh; j++) {
                const __m256i v =
                    _mm256_xor_si256(_mm256_load_si256((const __m256i *)(q + 64 * l + 32 * (h0 + j))), flip);
                const __m256i av = _mm256_sign_epi8(v, v);
                for (int c = 0; c < nc; c++) {
                    const __m256i yw = bcast32(y[c][b].qs + 4 * l);
                    const __m256i p =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(yw, v)), ones);
                    acc[j][c][l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), d[j][c], acc[j][c][l]);
                }
            }
    }
    for (int j = 0; j < nh; j++)
        for (int c = 0; c < nc; c++) {
            const __m256 *r = acc[j][c];
            const __m256 lo = _mm256_add_ps(_mm256_add_ps(r[0], r[4]), _mm256_add_ps(r[2], r[6]));
            const __m256 hi = _mm256_add_ps(_mm256_add_ps(r[1], r[5]), _mm256_add_ps(r[3], r[7]));
            _mm256_storeu_ps(s + (size_t)c * s_stride + 8 * (h0 + j),
                             _mm256_add_ps(_mm256_add_ps(lo, hi), _mm256_setzero_ps()));
        }
}

static void packed_q8_0_avx2(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                             size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK8_0;
    const uint8_t *x = w, *ap = a, *xp = aux;
    if (nc == 1) {
        q8_0_cols(nb, 0, 2, s, s_stride, x, ap, a_stride, xp, aux_stride, 1);
        return;
    }
    for (int h = 0; h < 2; h++) {
        if (nc == COLS_Q8_0)
            q8_0_cols(nb, h, 1, s, s_stride, x, ap, a_stride, xp, aux_stride, COLS_Q8_0);
        else
            q8_0_cols(nb, h, 1, s, s_stride, x, ap, a_stride, xp, aux_stride, 2);
    }
}

/* IQ4_NL, all 16 rows against one activation column: the Q4_0 chain. The looked-up values are
 * signed (-127..113); pmaddubsw takes |v| and the sign moves onto the activations (exact, no -128
 * on either side), each word widened on its own (|v| * |y| pairs reach 2^15 when summed), and the
 * integer needs no offset. */
static void iq4_nl_x16_col(int64_t nb, float *s, const uint8_t *x, const uint8_t *a, const uint8_t *aux) {
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const __m128i t = _mm_loadu_si128((const __m128i *)kvalues_iq4nl);
    const __m256i table = _mm256_setr_m128i(t, t);
    const block_q8_0 *y = (const block_q8_0 *)a;
    const cera_pack_aux_q4_0 *ax = (const cera_pack_aux_q4_0 *)aux;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
        __m256i isum[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int i = 0; i < 4; i++) {
            const __m256i ylo = bcast32(y[b].qs + 4 * i), yhi = bcast32(y[b].qs + 16 + 4 * i);
            for (int h = 0; h < 2; h++) {
                const __m256i v = _mm256_load_si256(
                    (const __m256i *)(cera_pack_qs(x, CERA_TYPE_IQ4_NL, b) + 64 * i + 32 * h));
                const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low4));
                const __m256i hi =
                    _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
                isum[h] = _mm256_add_epi32(
                    isum[h],
                    _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_sign_epi8(lo, lo), _mm256_sign_epi8(ylo, lo)), ones));
                isum[h] = _mm256_add_epi32(
                    isum[h],
                    _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_sign_epi8(hi, hi), _mm256_sign_epi8(yhi, hi)), ones));
            }
        }
        const __m256 dy = _mm256_set1_ps(ax[b].d);
        for (int h = 0; h < 2; h++) {
            const __m256 dx = _mm256_cvtph_ps(
                _mm_load_si128((const __m128i *)(cera_pack_d(x, CERA_TYPE_IQ4_NL, b) + 8 * h)));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h]), _mm256_mul_ps(dx, dy), acc[h]);
        }
    }
    _mm256_storeu_ps(s, acc[0]);
    _mm256_storeu_ps(s + 8, acc[1]);
}

static void packed_iq4_nl_avx2(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                               size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    for (int c = 0; c < nc; c++)
        iq4_nl_x16_col(n / QK4_NL, s + (size_t)c * s_stride, w, (const uint8_t *)a + (size_t)c * a_stride,
                       (const uint8_t *)aux + (size_t)c * aux_stride);
}

/* Q4_K (repack.h), all 16 rows (two halves of 8) against nc <= 2 activation columns in one pass
 * over the group: each 64-byte vector used whole, the activation words loaded once for both
 * halves (more accumulators than registers with two columns, measured faster all the same than
 * a pass per half). Per sub-block the 8 word dots by pmaddubsw into int16 pairs (at most 8 * 2 *
 * 15 * 127 = 30480, exact), and one pmaddwd against the rows' scale in both halves of each lane
 * gives scale * dot in int32; the minimum term by pmaddwd of the mins' 16-bit pairs against the
 * activation's sub-block sums, per output the reference's integers and multiply-adds. */
#define COLS_Q4_K 2

static inline __attribute__((always_inline)) void q4_kx16_cols(int64_t nb, float *s, size_t s_stride,
                                                               const uint8_t *x, const uint8_t *a,
                                                               size_t a_stride, const uint8_t *aux,
                                                               size_t aux_stride, int nc) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    __m256 acc[2][COLS_Q4_K], accm[2][COLS_Q4_K];
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < nc; c++) acc[h][c] = accm[h][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *u = cera_pack_q4_k_unit(x, b);
        __m256i isum[2][COLS_Q4_K];
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < nc; c++) isum[h][c] = _mm256_setzero_si256();
        for (int ch = 0; ch < 4; ch++) {
            const int8_t *yq[COLS_Q4_K];
            __m256i plo[2][COLS_Q4_K], phi[2][COLS_Q4_K];
            for (int c = 0; c < nc; c++) {
                yq[c] = ((const block_q8_k *)(a + (size_t)c * a_stride))[b].qs + 64 * ch;
                for (int h = 0; h < 2; h++) plo[h][c] = phi[h][c] = _mm256_setzero_si256();
            }
            for (int l = 0; l < 8; l++) {
                __m256i lo[2], hi[2];
                for (int h = 0; h < 2; h++) {
                    const __m256i v = _mm256_load_si256(
                        (const __m256i *)(u + CERA_PACK_Q4_K_QS + 64 * (8 * ch + l) + 32 * h));
                    lo[h] = _mm256_and_si256(v, low4);
                    hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                }
                for (int c = 0; c < nc; c++) {
                    const __m256i ylo = bcast32(yq[c] + 4 * l), yhi = bcast32(yq[c] + 32 + 4 * l);
                    for (int h = 0; h < 2; h++) {
                        plo[h][c] = _mm256_add_epi16(plo[h][c], _mm256_maddubs_epi16(lo[h], ylo));
                        phi[h][c] = _mm256_add_epi16(phi[h][c], _mm256_maddubs_epi16(hi[h], yhi));
                    }
                }
            }
            for (int h = 0; h < 2; h++) {
                __m256i sc[2];
                for (int t = 0; t < 2; t++) {
                    const __m256i s32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
                        (const __m128i *)(u + CERA_PACK_Q4_K_SC + 16 * (2 * ch + t) + 8 * h)));
                    sc[t] = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16)); /* the scale in both halves */
                }
                for (int c = 0; c < nc; c++) {
                    isum[h][c] = _mm256_add_epi32(isum[h][c], _mm256_madd_epi16(plo[h][c], sc[0]));
                    isum[h][c] = _mm256_add_epi32(isum[h][c], _mm256_madd_epi16(phi[h][c], sc[1]));
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256 dx = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(u + 16 * h)));
            const __m256 dm = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(u + 32 + 16 * h)));
            for (int c = 0; c < nc; c++) {
                const cera_pack_aux_q4_k *ax = (const cera_pack_aux_q4_k *)(aux + (size_t)c * aux_stride) + b;
                __m256i imin = _mm256_setzero_si256();
                for (int v = 0; v < 4; v++) {
                    int32_t pair;
                    memcpy(&pair, ax->bs + 2 * v, 4);
                    const __m256i mn = _mm256_cvtepu8_epi16(
                        _mm_load_si128((const __m128i *)(u + CERA_PACK_Q4_K_MN + 32 * v + 16 * h)));
                    imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn, _mm256_set1_epi32(pair)));
                }
                const __m256 dy = _mm256_set1_ps(ax->d);
                acc[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][c]), _mm256_mul_ps(dx, dy), acc[h][c]);
                accm[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(dm, dy), accm[h][c]);
            }
        }
    }
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < nc; c++)
            _mm256_storeu_ps(s + (size_t)c * s_stride + 8 * h, _mm256_sub_ps(acc[h][c], accm[h][c]));
}

static void packed_q4_k_avx2(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                             size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    if (nc == COLS_Q4_K)
        q4_kx16_cols(n / QK_K, s, s_stride, w, a, a_stride, aux, aux_stride, COLS_Q4_K);
    else
        q4_kx16_cols(n / QK_K, s, s_stride, w, a, a_stride, aux, aux_stride, 1);
}

void cera_cpu_register_repack_avx2(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    ops[CERA_TYPE_Q4_K].packed_tile = packed_q4_k_avx2;
    ops[CERA_TYPE_Q4_K].packed_cols = COLS_Q4_K;
    ops[CERA_TYPE_IQ4_NL].packed_tile = packed_iq4_nl_avx2;
    ops[CERA_TYPE_IQ4_NL].packed_cols = 1;
    ops[CERA_TYPE_Q8_0].packed_tile = packed_q8_0_avx2;
    ops[CERA_TYPE_Q8_0].packed_cols = COLS_Q8_0;
    ops[CERA_TYPE_Q4_1].packed_tile = packed_q4_1_avx2;
    ops[CERA_TYPE_Q4_1].packed_cols = 1;
    ops[CERA_TYPE_Q5_1].packed_tile = packed_q5_1_avx2;
    ops[CERA_TYPE_Q5_1].packed_cols = 1;
    ops[CERA_TYPE_Q5_0].packed_tile = packed_q5_0_avx2;
    ops[CERA_TYPE_Q5_0].packed_cols = 1;
    ops[CERA_TYPE_Q4_0].packed_tile = packed_q4_0_avx2;
    ops[CERA_TYPE_Q4_0].packed_cols = COLS;
}

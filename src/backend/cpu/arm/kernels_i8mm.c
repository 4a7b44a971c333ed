/*
 * kernels_i8mm.c — the i8mm tier for aarch64 (ARMv8.6-A int8 matrix multiply): gemm tiles
 * for q8_0, q4_0 and iq4_nl weights built on smmla, which multiplies a 2x8 by an 8x2 int8
 * matrix into a 2x2 int32 block. Everything else is the NEON tier's. Registered over the
 * NEON table by kernels.c when HWCAP2 reports i8mm.
 *
 * A call covers 4 weight rows x 4 activation rows. Per 32-element block, rows are paired
 * (r0,r1), (r2,r3) and columns likewise; each of the four 8-element chunks of the block is
 * one smmla per (row pair, column pair), so 16 smmla give the 16 integer block dots (exact,
 * as in every tier). They are then scaled by d_weight * d_act in 4 float lanes laid out like
 * the 2x2 blocks, which also gives the order of the final stores.
 */
#include <arm_neon.h>
#include <string.h>

#include "backend/cpu/kernels_impl.h"
#include "tensor/blocks.h"

#define TR 4
#define TC 4

static inline float f16(cera_f16 h) {
    __fp16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
}

enum { I8_Q8_0, I8_Q4_0, I8_IQ4_NL };

/* Block b of a weight row as 32 signed bytes (v[0] = elements 0..15, v[1] = 16..31). */
static inline __attribute__((always_inline)) float unpack(int kind, const uint8_t *row, int64_t b,
                                                          int8x16_t v[2]) {
    switch (kind) {
    case I8_Q8_0: {
        const block_q8_0 *x = (const block_q8_0 *)row + b;
        v[0] = vld1q_s8(x->qs);
        v[1] = vld1q_s8(x->qs + 16);
        return f16(x->d);
    }
    case I8_Q4_0: {
        const block_q4_0 *x = (const block_q4_0 *)row + b;
        const uint8x16_t q = vld1q_u8(x->qs);
        v[0] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
        v[1] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
        return f16(x->d);
    }
    default: {
        const block_iq4_nl *x = (const block_iq4_nl *)row + b;
        const int8x16_t table = vld1q_s8(kvalues_iq4nl);
        const uint8x16_t q = vld1q_u8(x->qs);
        v[0] = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0F)));
        v[1] = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
        return f16(x->d);
    }
    }
}

/* Two rows' 32 bytes -> 4 chunk pairs [row a chunk k (8 bytes) | row b chunk k]. */
static inline void pair_chunks(const int8x16_t a[2], const int8x16_t b[2], int8x16_t out[4]) {
    for (int h = 0; h < 2; h++) {
        const int64x2_t x = vreinterpretq_s64_s8(a[h]), y = vreinterpretq_s64_s8(b[h]);
        out[2 * h] = vreinterpretq_s8_s64(vzip1q_s64(x, y));
        out[2 * h + 1] = vreinterpretq_s8_s64(vzip2q_s64(x, y));
    }
}

static inline __attribute__((always_inline)) void tile_i8mm(int kind, int64_t n, float *s, size_t s_stride,
                                                            const void *w, size_t w_stride, const void *a,
                                                            size_t a_stride, int nr, int nc) {
    /* Missing rows/columns repeat the last real one; their results are not stored. */
    const uint8_t *wrow[TR], *arow[TC];
    for (int r = 0; r < TR; r++) wrow[r] = (const uint8_t *)w + (size_t)(r < nr ? r : nr - 1) * w_stride;
    for (int c = 0; c < TC; c++) arow[c] = (const uint8_t *)a + (size_t)(c < nc ? c : nc - 1) * a_stride;
    float32x4_t acc[2][2]; /* [row pair][column pair]: lanes (r0c0, r0c1, r1c0, r1c1) */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) acc[i][j] = vdupq_n_f32(0.0f);
    /* Only the row and column pairs that hold a real row/column are computed (a decode step
     * has one column); each result's operations are the same whatever the shape. */
    const int nrp = (nr + 1) / 2, ncp = (nc + 1) / 2;
    for (int64_t b = 0; b < n / QK8_0; b++) {
        int8x16_t wv[TR][2], av[TC][2], wp[2][4], ap[2][4];
        float dx[TR], dy[TC];
        for (int r = 0; r < 2 * nrp; r++) dx[r] = unpack(kind, wrow[r], b, wv[r]);
        for (int c = 0; c < 2 * ncp; c++) {
            const block_q8_0 *y = (const block_q8_0 *)arow[c] + b;
            av[c][0] = vld1q_s8(y->qs);
            av[c][1] = vld1q_s8(y->qs + 16);
            dy[c] = f16(y->d);
        }
        for (int i = 0; i < nrp; i++) pair_chunks(wv[2 * i], wv[2 * i + 1], wp[i]);
        for (int j = 0; j < ncp; j++) pair_chunks(av[2 * j], av[2 * j + 1], ap[j]);
        for (int i = 0; i < nrp; i++)
            for (int j = 0; j < ncp; j++) {
                int32x4_t p = vdupq_n_s32(0);
                for (int k = 0; k < 4; k++) p = vmmlaq_s32(p, wp[i][k], ap[j][k]);
                const float32x4_t dxv = {dx[2 * i], dx[2 * i], dx[2 * i + 1], dx[2 * i + 1]};
                const float32x4_t dyv = {dy[2 * j], dy[2 * j + 1], dy[2 * j], dy[2 * j + 1]};
                acc[i][j] = vfmaq_f32(acc[i][j], vcvtq_f32_s32(p), vmulq_f32(dxv, dyv));
            }
    }
    for (int i = 0; i < nrp; i++)
        for (int j = 0; j < ncp; j++) {
            float out[4];
            vst1q_f32(out, acc[i][j]);
            for (int k = 0; k < 4; k++) {
                const int r = 2 * i + k / 2, c = 2 * j + k % 2;
                if (r < nr && c < nc) s[(size_t)c * s_stride + r] = out[k];
            }
        }
}

static void tile_q8_0_i8mm(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                           int nr, int nc) {
    if (nr == TR && nc == TC)
        tile_i8mm(I8_Q8_0, n, s, ss, w, ws, a, as, TR, TC);
    else if (nr == TR && nc == 1)
        tile_i8mm(I8_Q8_0, n, s, ss, w, ws, a, as, TR, 1);
    else
        tile_i8mm(I8_Q8_0, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_q4_0_i8mm(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a, size_t as,
                           int nr, int nc) {
    if (nr == TR && nc == TC)
        tile_i8mm(I8_Q4_0, n, s, ss, w, ws, a, as, TR, TC);
    else if (nr == TR && nc == 1)
        tile_i8mm(I8_Q4_0, n, s, ss, w, ws, a, as, TR, 1);
    else
        tile_i8mm(I8_Q4_0, n, s, ss, w, ws, a, as, nr, nc);
}
static void tile_iq4_nl_i8mm(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                             size_t as, int nr, int nc) {
    if (nr == TR && nc == TC)
        tile_i8mm(I8_IQ4_NL, n, s, ss, w, ws, a, as, TR, TC);
    else if (nr == TR && nc == 1)
        tile_i8mm(I8_IQ4_NL, n, s, ss, w, ws, a, as, TR, 1);
    else
        tile_i8mm(I8_IQ4_NL, n, s, ss, w, ws, a, as, nr, nc);
}

static void set_tile(cera_cpu_type_ops *ops, cera_gemm_tile_fn fn) {
    ops->gemm_tile = fn;
    ops->tile_rows = TR;
    ops->tile_cols = TC;
}

void cera_cpu_register_i8mm(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    set_tile(&ops[CERA_TYPE_Q8_0], tile_q8_0_i8mm);
    set_tile(&ops[CERA_TYPE_Q4_0], tile_q4_0_i8mm);
    set_tile(&ops[CERA_TYPE_IQ4_NL], tile_iq4_nl_i8mm);
}

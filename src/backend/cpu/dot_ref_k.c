/*
 * dot_ref_k.c — scalar reference dot products of the 256-element super-block weight types
 * (q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs) against q8_k activations.
 *
 * The arithmetic is ggml's *_generic: weights unpacked to small signed integers, integer
 * products scaled by the integer sub-block scales and summed exactly in 8 lanes (element
 * e goes to lane e % 8), each lane then scaled by the float super-block scales and summed
 * in float across blocks. The minimums of q2_k/q4_k/q5_k are folded in through q8_k's
 * per-16 sums (bsums), so they cost 16 multiplies per block instead of 256.
 */
#include "backend/cpu/kernels_impl.h"
#include "tensor/blocks.h"

#include <string.h>

#define F16(h) cera_f16_to_f32(h)

/* aux32[e % 8] += scale16[e / 16] * q8[e] * q[e] over one super-block. */
static void lanes_accumulate(const int8_t *q8, const int8_t *q, const int *scale16, int32_t aux32[8]) {
    for (int e = 0; e < QK_K; e++) aux32[e % 8] += scale16[e / 16] * (q8[e] * q[e]);
}

/* The per-lane float sums, then the running total, as ggml orders them. */
typedef struct lane_sums {
    float sums[8];
    float total;
} lane_sums;

static void lanes_add(lane_sums *ls, float d, const int32_t aux32[8]) {
    for (int l = 0; l < 8; l++) ls->sums[l] += d * (float)aux32[l];
}

static float lanes_finish(lane_sums *ls) {
    for (int l = 0; l < 8; l++) ls->total += ls->sums[l];
    return ls->total;
}

void cera_vec_dot_q2_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_q2_k *x = w;
    const block_q8_k *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *sc = x[b].scales;
        int summs = 0;
        for (int j = 0; j < 16; j++) summs += y[b].bsums[j] * (sc[j] >> 4);
        const float dall = y[b].d * F16(x[b].d);
        const float dmin = y[b].d * F16(x[b].dmin);
        /* Element 128h + 32s + l sits at bits 2s of qs[32h + l]; sub-block = element / 16. */
        int isum = 0;
        for (int e = 0; e < QK_K; e += 16) {
            const int h = e / 128, sh = (e % 128) / 32, l0 = e % 32;
            int isuml = 0;
            for (int l = 0; l < 16; l++)
                isuml += y[b].qs[e + l] * ((x[b].qs[32 * h + l0 + l] >> (2 * sh)) & 3);
            isum += (sc[e / 16] & 0xF) * isuml;
        }
        sum += dall * (float)isum - dmin * (float)summs;
    }
    *s = sum;
}

void cera_vec_dot_q3_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_q3_k *x = w;
    const block_q8_k *y = a;
    lane_sums ls = {{0}, 0.0f};
    for (int64_t b = 0; b < n / QK_K; b++) {
        int8_t q[QK_K];
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, sh = (e % 128) / 32, l = e % 32;
            const int low = (x[b].qs[32 * h + l] >> (2 * sh)) & 3;
            const int hbit = (x[b].hmask[l] >> (4 * h + sh)) & 1;
            q[e] = (int8_t)(low - (hbit ? 0 : 4));
        }
        int8_t sc8[16];
        q3_k_scales(x[b].scales, sc8);
        int sc[16];
        for (int j = 0; j < 16; j++) sc[j] = sc8[j];
        int32_t aux32[8] = {0};
        lanes_accumulate(y[b].qs, q, sc, aux32);
        lanes_add(&ls, F16(x[b].d) * y[b].d, aux32);
    }
    *s = lanes_finish(&ls);
}

/* q4_k and q5_k share everything but the fifth bit. */
static float dot_q45_k(int64_t n, const void *w, size_t stride, const block_q8_k *y, bool five) {
    lane_sums ls = {{0}, 0.0f};
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *blk = (const uint8_t *)w + b * stride;
        /* Both layouts start d, dmin, scales[12]; q5_k then has qh[32] before qs. */
        const block_q4_k *x4 = (const block_q4_k *)blk;
        const block_q5_k *x5 = (const block_q5_k *)blk;
        const uint8_t *qs = five ? x5->qs : x4->qs;
        int8_t q[QK_K];
        for (int e = 0; e < QK_K; e++) {
            const int c = e / 64, hi = (e % 64) / 32, l = e % 32;
            int v = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
            if (five) v += ((x5->qh[l] >> (e / 32)) & 1) << 4;
            q[e] = (int8_t)v;
        }
        int sc[16], sumi = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t scale, mn;
            k_scale_min(j, x4->scales, &scale, &mn);
            sc[2 * j] = sc[2 * j + 1] = scale;
            sumi += (y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]) * mn;
        }
        int32_t aux32[8] = {0};
        lanes_accumulate(y[b].qs, q, sc, aux32);
        lanes_add(&ls, F16(x4->d) * y[b].d, aux32);
        const float dmin = F16(x4->dmin) * y[b].d;
        ls.total -= dmin * (float)sumi;
    }
    return lanes_finish(&ls);
}

void cera_vec_dot_q4_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a) {
    *s = dot_q45_k(n, w, sizeof(block_q4_k), a, false);
}

void cera_vec_dot_q5_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a) {
    *s = dot_q45_k(n, w, sizeof(block_q5_k), a, true);
}

void cera_vec_dot_q6_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_q6_k *x = w;
    const block_q8_k *y = a;
    lane_sums ls = {{0}, 0.0f};
    for (int64_t b = 0; b < n / QK_K; b++) {
        int8_t q[QK_K];
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
            const uint8_t lo = x[b].ql[64 * h + 32 * (quarter & 1) + l];
            const int low = quarter < 2 ? lo & 0xF : lo >> 4;
            const int high = (x[b].qh[32 * h + l] >> (2 * quarter)) & 3;
            q[e] = (int8_t)((low | (high << 4)) - 32);
        }
        int sc[16];
        for (int j = 0; j < 16; j++) sc[j] = x[b].scales[j];
        int32_t aux32[8] = {0};
        lanes_accumulate(y[b].qs, q, sc, aux32);
        lanes_add(&ls, F16(x[b].d) * y[b].d, aux32);
    }
    *s = lanes_finish(&ls);
}

void cera_vec_dot_iq4_xs_q8_k_ref(int64_t n, float *s, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8_k *y = a;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; b++) {
        const float d4d8 = F16(x[b].d) * y[b].d;
        for (int j = 0; j < 8; j++) {
            const uint8_t *qs = x[b].qs + 16 * j;
            const int8_t *q8 = y[b].qs + 32 * j;
            int sumi1 = 0, sumi2 = 0;
            for (int l = 0; l < 16; l++) {
                sumi1 += q8[l] * kvalues_iq4nl[qs[l] & 0xF];
                sumi2 += q8[l + 16] * kvalues_iq4nl[qs[l] >> 4];
            }
            sum += d4d8 * (float)iq4_xs_scale(&x[b], j) * (float)(sumi1 + sumi2);
        }
    }
    *s = sum;
}

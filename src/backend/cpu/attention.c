/* attention.c — causal attention over the paged KV cache (see attention.h). */
#include "backend/cpu/attention.h"

#include <math.h>
#include <string.h>

#include "core/fp16.h"

size_t cera_attention_scratch_size(int head_dim) {
    return (size_t)head_dim * (2 * sizeof(uint16_t) + sizeof(float));
}

/* K·Q with both in F16: the products are exact in float; llama.cpp's reference sums
 * them in double (its SIMD version in float lanes: both agree to float rounding). */
static float dot_f16(const cera_f16 *k, const cera_f16 *q, int n) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(cera_f16_to_f32(k[i]) * cera_f16_to_f32(q[i]));
    return (float)sum;
}

static void row_f16(const cera_attn_args *a, const cera_kv_seq *seq, int t, int h, void *scratch) {
    const int D = a->head_dim;
    const int kv_off = (h / (a->n_head / a->n_head_kv)) * D;
    cera_f16 *q16 = scratch;
    cera_f16 *acc = q16 + D; /* the V accumulator, kept in F16 as llama.cpp does */
    float *out = a->out + ((size_t)t * a->n_head + h) * D;
    const float *q = a->q + ((size_t)t * a->n_head + h) * D;
    for (int d = 0; d < D; d++) {
        q16[d] = cera_f32_to_f16(q[d]);
        acc[d] = 0;
    }
    float S = 0.0f, M = -INFINITY;
    const int n_pos = a->pos[t] + 1;
    for (int p0 = 0; p0 < n_pos; p0 += CERA_KV_BLOCK) {
        const cera_f16 *kb = (const cera_f16 *)cera_kv_row(seq, a->layer, 0, p0) + kv_off;
        const cera_f16 *vb = (const cera_f16 *)cera_kv_row(seq, a->layer, 1, p0) + kv_off;
        const int n = n_pos - p0 < CERA_KV_BLOCK ? n_pos - p0 : CERA_KV_BLOCK;
        const size_t stride = (size_t)seq->pool->kv_dim;
        for (int j = 0; j < n; j++) {
            const float s = dot_f16(kb + j * stride, q16, D) * a->scale;
            const cera_f16 *v = vb + j * stride;
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                const float m_old = M;
                M = s;
                ms = expf(m_old - M);
                for (int d = 0; d < D; d++) acc[d] = cera_f32_to_f16(cera_f16_to_f32(acc[d]) * ms);
            } else {
                vs = expf(s - M);
            }
            /* llama.cpp's loop is C++ compiled with FP contraction: one fused multiply-add
             * per element (and for S), then the F16 rounding; fmaf reproduces it bit for bit */
            for (int d = 0; d < D; d++)
                acc[d] = cera_f32_to_f16(fmaf(cera_f16_to_f32(v[d]), vs, cera_f16_to_f32(acc[d])));
            S = fmaf(S, ms, vs);
        }
    }
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < D; d++) out[d] = cera_f16_to_f32(acc[d]) * s_inv;
}

static inline float kv_get(const void *row, int i, bool f16) {
    return f16 ? cera_f16_to_f32(((const cera_f16 *)row)[i]) : ((const float *)row)[i];
}

static void row_f32(const cera_attn_args *a, const cera_kv_seq *seq, int t, int h, void *scratch) {
    const int D = a->head_dim;
    const bool f16 = seq->pool->type == CERA_KV_F16;
    const size_t es = seq->pool->elem_size;
    const int kv_off = (h / (a->n_head / a->n_head_kv)) * D;
    float *acc = (float *)scratch;
    float *out = a->out + ((size_t)t * a->n_head + h) * D;
    const float *q = a->q + ((size_t)t * a->n_head + h) * D;
    memset(acc, 0, (size_t)D * sizeof *acc);
    float S = 0.0f, M = -INFINITY;
    const int n_pos = a->pos[t] + 1;
    for (int p0 = 0; p0 < n_pos; p0 += CERA_KV_BLOCK) {
        const uint8_t *kb = (const uint8_t *)cera_kv_row(seq, a->layer, 0, p0) + (size_t)kv_off * es;
        const uint8_t *vb = (const uint8_t *)cera_kv_row(seq, a->layer, 1, p0) + (size_t)kv_off * es;
        const int n = n_pos - p0 < CERA_KV_BLOCK ? n_pos - p0 : CERA_KV_BLOCK;
        const size_t stride = (size_t)seq->pool->kv_dim * es;
        for (int j = 0; j < n; j++) {
            const void *k = kb + j * stride;
            const void *v = vb + j * stride;
            float s = 0.0f;
            for (int d = 0; d < D; d++) s += q[d] * kv_get(k, d, f16);
            s *= a->scale;
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                ms = expf(M - s);
                M = s;
                for (int d = 0; d < D; d++) acc[d] *= ms;
            } else {
                vs = expf(s - M);
            }
            for (int d = 0; d < D; d++) acc[d] += kv_get(v, d, f16) * vs;
            S = S * ms + vs;
        }
    }
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < D; d++) out[d] = acc[d] * s_inv;
}

void cera_attention_rows(const cera_attn_args *a, int row0, int row1, void *scratch) {
    for (int r = row0; r < row1; r++) {
        const int t = r / a->n_head, h = r % a->n_head;
        const cera_kv_seq *seq = a->seqs[a->seq[t]];
        if (a->f16_accum && seq->pool->type == CERA_KV_F16)
            row_f16(a, seq, t, h, scratch);
        else
            row_f32(a, seq, t, h, scratch);
    }
}

/*
 * attention_impl.h — the bodies of the attention rows (see attention.h), included twice by
 * attention.c: once portable, once for x86 CPUs with F16C and FMA, where the F16
 * conversions and fused multiply-adds become single instructions. Both round the same way
 * (round-to-nearest-even conversions, one rounding per FMA), so they give identical results.
 *
 * The includer defines ATTN(name) (a name suffix), ATTN_TARGET (a target attribute or
 * nothing), CVT_F32(h) (F16 -> float) and CVT_F16(f) (float -> F16).
 */

/* K·Q with both in F16, summed as llama.cpp's AVX-512 build (the goldens') does: each
 * 64-element step accumulates into 4 x 16 float lanes with fused multiply-adds, the
 * lanes are then reduced in _mm512_reduce_add_ps's tree order, and a tail shorter than
 * 64 is added in double. The products themselves are exact in float, so only this
 * summation order matters; mirroring it keeps the scores bit-identical. */
ATTN_TARGET static float ATTN(dot_f16)(const cera_f16 *k, const cera_f16 *q, int n) {
    const int np = n & ~63;
    double sum = 0.0;
    if (np > 0) {
        float acc[4][16] = {{0}};
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 4; j++)
                for (int l = 0; l < 16; l++) {
                    const int e = i + j * 16 + l;
                    acc[j][l] = fmaf(CVT_F32(k[e]), CVT_F32(q[e]), acc[j][l]);
                }
        float c[16], t3[8], t6[4];
        for (int l = 0; l < 16; l++) c[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
        for (int l = 0; l < 8; l++) t3[l] = c[l + 8] + c[l];
        for (int l = 0; l < 4; l++) t6[l] = t3[l + 4] + t3[l];
        sum = (double)((t6[0] + t6[2]) + (t6[1] + t6[3]));
    }
    for (int i = np; i < n; i++) sum += (double)(CVT_F32(k[i]) * CVT_F32(q[i]));
    return (float)sum;
}

ATTN_TARGET static void ATTN(row_f16)(const cera_attn_args *a, const cera_kv_seq *seq, int t, int h,
                                      void *scratch) {
    const int D = a->head_dim;
    const int kv_off = (h / (a->n_head / a->n_head_kv)) * D;
    cera_f16 *q16 = scratch;
    cera_f16 *acc = q16 + D; /* the V accumulator, kept in F16 as llama.cpp does */
    float *out = a->out + ((size_t)t * a->n_head + h) * D;
    const float *q = a->q + ((size_t)t * a->n_head + h) * D;
    for (int d = 0; d < D; d++) {
        q16[d] = CVT_F16(q[d]);
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
            const float s = ATTN(dot_f16)(kb + j * stride, q16, D) * a->scale;
            const cera_f16 *v = vb + j * stride;
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                const float m_old = M;
                M = s;
                ms = expf(m_old - M);
                for (int d = 0; d < D; d++) acc[d] = CVT_F16(CVT_F32(acc[d]) * ms);
            } else {
                vs = expf(s - M);
            }
            /* llama.cpp's loop is C++ compiled with FP contraction: one fused multiply-add
             * per element (and for S), then the F16 rounding; fmaf reproduces it bit for bit */
            for (int d = 0; d < D; d++) acc[d] = CVT_F16(fmaf(CVT_F32(v[d]), vs, CVT_F32(acc[d])));
            S = fmaf(S, ms, vs);
        }
    }
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < D; d++) out[d] = CVT_F32(acc[d]) * s_inv;
}

ATTN_TARGET static inline float ATTN(kv_get)(const void *row, int i, bool f16) {
    return f16 ? CVT_F32(((const cera_f16 *)row)[i]) : ((const float *)row)[i];
}

/* The sum of 16 floats in _mm512_reduce_add_ps's order. */
ATTN_TARGET static float ATTN(reduce16)(const float *v) {
    float t3[8], t6[4];
    for (int l = 0; l < 8; l++) t3[l] = v[l + 8] + v[l];
    for (int l = 0; l < 4; l++) t6[l] = t3[l + 4] + t3[l];
    return (t6[0] + t6[2]) + (t6[1] + t6[3]);
}

/* The F32 mode, as llama.cpp's tiled path computes a row: the keys in tiles of
 * ATTN_TILE positions; per tile the scores (an FMA chain over the head, then the
 * scale), the tile's maximum, one rescale of the accumulator when the maximum grows,
 * exp(s - max) with the polynomial exp summed 16 at a time into a double, and the V
 * rows added as an FMA chain in position order. */
ATTN_TARGET static void ATTN(row_f32)(const cera_attn_args *a, const cera_kv_seq *seq, int t, int h,
                                      void *scratch) {
    const int D = a->head_dim;
    const bool f16 = seq->pool->type == CERA_KV_F16;
    const size_t kv_off = (size_t)(h / (a->n_head / a->n_head_kv)) * (size_t)D * seq->pool->elem_size;
    float *acc = (float *)scratch;
    float *p = acc + D; /* [ATTN_TILE] scores, then probabilities */
    float *out = a->out + ((size_t)t * a->n_head + h) * D;
    const float *q = a->q + ((size_t)t * a->n_head + h) * D;
    memset(acc, 0, (size_t)D * sizeof *acc);
    float S = 0.0f, M = -INFINITY;
    const int n_pos = a->pos[t] + 1;
    for (int p0 = 0; p0 < n_pos; p0 += ATTN_TILE) {
        const int n = n_pos - p0 < ATTN_TILE ? n_pos - p0 : ATTN_TILE;
        float tile_max = -INFINITY;
        for (int j = 0; j < ATTN_TILE; j++) {
            if (j >= n) {
                p[j] = -INFINITY; /* masked (a later position) */
                continue;
            }
            const uint8_t *k = (const uint8_t *)cera_kv_row(seq, a->layer, 0, p0 + j) + kv_off;
            float s = 0.0f;
            for (int d = 0; d < D; d++) s = fmaf(q[d], ATTN(kv_get)(k, d, f16), s);
            p[j] = s * a->scale;
            tile_max = fmaxf(tile_max, p[j]);
        }
        const float m_new = fmaxf(M, tile_max);
        if (m_new > M) {
            const float ms = expf(M - m_new);
            for (int d = 0; d < D; d++) acc[d] *= ms;
            S *= ms;
        }
        M = m_new;
        double sum = 0.0;
        for (int j0 = 0; j0 < ATTN_TILE; j0 += 16) {
            for (int j = j0; j < j0 + 16; j++) p[j] = cera_expf_ggml(p[j] - M);
            sum += (double)ATTN(reduce16)(p + j0);
        }
        S = (float)((double)S + sum);
        for (int j = 0; j < n; j++) {
            const uint8_t *v = (const uint8_t *)cera_kv_row(seq, a->layer, 1, p0 + j) + kv_off;
            for (int d = 0; d < D; d++) acc[d] = fmaf(ATTN(kv_get)(v, d, f16), p[j], acc[d]);
        }
    }
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < D; d++) out[d] = acc[d] * s_inv;
}

/* Rows [row0, row1) of the n_tokens * n_head (token-major) output rows. */
ATTN_TARGET static void ATTN(attention_rows)(const cera_attn_args *a, int row0, int row1, void *scratch) {
    for (int r = row0; r < row1; r++) {
        const int t = r / a->n_head, h = r % a->n_head;
        const cera_kv_seq *seq = a->seqs[a->seq[t]];
        if (a->f16_accum && seq->pool->type == CERA_KV_F16)
            ATTN(row_f16)(a, seq, t, h, scratch);
        else
            ATTN(row_f32)(a, seq, t, h, scratch);
    }
}

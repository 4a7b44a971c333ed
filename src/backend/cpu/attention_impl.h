/*
 * attention_impl.h — the bodies of the attention rows (see attention.h), included twice by
 * attention.c: once portable, once for x86 CPUs with F16C and FMA, where the F16
 * conversions and fused multiply-adds become single instructions. Both round the same way
 * (round-to-nearest-even conversions, one rounding per FMA), so they give identical results.
 *
 * The includer defines ATTN(name) (a name suffix), ATTN_TARGET (a target attribute or
 * nothing), CVT_F32(h) (F16 -> float) and CVT_F16(f) (float -> F16), and ATTN_SIMD for
 * the x86 copy: there the loops over the head dimension and over a tile's positions run
 * 8 floats at a time (AVX2). Vectorizing only across independent elements keeps every
 * element's chain of roundings as in the scalar loops, so both copies stay bit-identical.
 */

#ifdef ATTN_SIMD
#define ATTN_LOADH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p)))
#define ATTN_STOREH(p, v)                                                                                    \
    _mm_storeu_si128((__m128i *)(void *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))
#endif

/* K·Q with both in F16, summed as llama.cpp's AVX-512 build (the goldens') does: each
 * 64-element step accumulates into 4 x 16 float lanes with fused multiply-adds, the
 * lanes are then reduced in _mm512_reduce_add_ps's tree order, and a tail shorter than
 * 64 is added in double. The products themselves are exact in float, so only this
 * summation order matters; mirroring it keeps the scores bit-identical. */
ATTN_TARGET static float ATTN(dot_f16)(const cera_f16 *k, const cera_f16 *q, int n) {
    const int np = n & ~63;
    double sum = 0.0;
    if (np > 0) {
#ifdef ATTN_SIMD
        /* a[2j] holds lanes 0-7 of the scalar version's acc[j], a[2j+1] lanes 8-15 */
        __m256 a[8];
        for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
        for (int i = 0; i < np; i += 64)
            for (int j = 0; j < 8; j++)
                a[j] = _mm256_fmadd_ps(ATTN_LOADH(k + i + 8 * j), ATTN_LOADH(q + i + 8 * j), a[j]);
        const __m256 c_lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
        const __m256 c_hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
        const __m256 t3 = _mm256_add_ps(c_hi, c_lo);
        float t6[4];
        _mm_storeu_ps(t6, _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3)));
        sum = (double)((t6[0] + t6[2]) + (t6[1] + t6[3]));
#else
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
#endif
    }
    for (int i = np; i < n; i++) sum += (double)(CVT_F32(k[i]) * CVT_F32(q[i]));
    return (float)sum;
}

/* acc[d] = f16(acc[d] * ms), the F16 accumulator's rescale */
ATTN_TARGET static void ATTN(acc_scale_f16)(cera_f16 *acc, float ms, int D) {
    int d = 0;
#ifdef ATTN_SIMD
    const __m256 vm = _mm256_set1_ps(ms);
    for (; d + 8 <= D; d += 8) ATTN_STOREH(acc + d, _mm256_mul_ps(ATTN_LOADH(acc + d), vm));
#endif
    for (; d < D; d++) acc[d] = CVT_F16(CVT_F32(acc[d]) * ms);
}

/* acc[d] = f16(fma(v[d], vs, acc[d])): llama.cpp's loop is C++ compiled with FP contraction,
 * one fused multiply-add per element, then the F16 rounding */
ATTN_TARGET static void ATTN(acc_axpy_f16)(cera_f16 *acc, const cera_f16 *v, float vs, int D) {
    int d = 0;
#ifdef ATTN_SIMD
    const __m256 vv = _mm256_set1_ps(vs);
    for (; d + 8 <= D; d += 8)
        ATTN_STOREH(acc + d, _mm256_fmadd_ps(ATTN_LOADH(v + d), vv, ATTN_LOADH(acc + d)));
#endif
    for (; d < D; d++) acc[d] = CVT_F16(fmaf(CVT_F32(v[d]), vs, CVT_F32(acc[d])));
}

/* The first position token t sees: 0, or the start of its window. */
ATTN_TARGET static inline int ATTN(window_lo)(const cera_attn_args *a, int t) {
    const int lo = a->window ? a->pos[t] - a->window + 1 : 0;
    return lo > 0 ? lo : 0;
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
    const int lo = ATTN(window_lo)(a, t); /* the first key it sees */
    const size_t stride = (size_t)seq->pool->layers[a->layer].row;
    for (int p0 = lo - lo % CERA_KV_BLOCK; p0 < n_pos; p0 += CERA_KV_BLOCK) {
        const cera_f16 *kb = (const cera_f16 *)cera_kv_row(seq, a->layer, 0, p0) + kv_off;
        const cera_f16 *vb = (const cera_f16 *)cera_kv_row(seq, a->layer, 1, p0) + kv_off;
        const int n = n_pos - p0 < CERA_KV_BLOCK ? n_pos - p0 : CERA_KV_BLOCK;
        for (int j = p0 < lo ? lo - p0 : 0; j < n; j++) {
            const float s = ATTN(dot_f16)(kb + j * stride, q16, D) * a->scale;
            const cera_f16 *v = vb + j * stride;
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                const float m_old = M;
                M = s;
                ms = expf(m_old - M);
                ATTN(acc_scale_f16)(acc, ms, D);
            } else {
                vs = expf(s - M);
            }
            ATTN(acc_axpy_f16)(acc, v, vs, D);
            S = fmaf(S, ms, vs); /* contracted as well */
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

/* exp as cera_expf_ggml (llama.cpp's polynomial), with the power-of-two scaling done by
 * a multiplication when the exponent is normal (the same correctly rounded result as
 * ldexpf), so that the whole function inlines; extreme exponents take the full version. */
ATTN_TARGET static inline float ATTN(exp_poly)(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    if (!(fabsf(n) <= 126.0f)) return cera_expf_ggml(x);
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j =
        fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
             fmaf(0x1.ffffecp-1f, b, 1.0f));
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return j * two_n;
}

/* The scores of one row over a tile: p[j] = (sum over d of kt[d][j] * q[d], an FMA chain in
 * d order) * scale for j < vis; returns their maximum. */
ATTN_TARGET static float ATTN(tile_scores)(const float *kt, const float *q, int D, int vis, float scale,
                                           float *p) {
    float tile_max = -INFINITY;
#ifdef ATTN_SIMD
    if (vis == ATTN_TILE) { /* the whole tile visible: the 64 sums stay in registers */
        __m256 s[ATTN_TILE / 8];
        for (int j = 0; j < ATTN_TILE / 8; j++) s[j] = _mm256_setzero_ps();
        for (int d = 0; d < D; d++) {
            const __m256 qd = _mm256_set1_ps(q[d]);
            const float *kd = kt + d * ATTN_TILE;
            for (int j = 0; j < ATTN_TILE / 8; j++)
                s[j] = _mm256_fmadd_ps(_mm256_loadu_ps(kd + 8 * j), qd, s[j]);
        }
        const __m256 vsc = _mm256_set1_ps(scale);
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int j = 0; j < ATTN_TILE / 8; j++) {
            s[j] = _mm256_mul_ps(s[j], vsc);
            mx = _mm256_max_ps(s[j], mx);
            _mm256_storeu_ps(p + 8 * j, s[j]);
        }
        float m8[8];
        _mm256_storeu_ps(m8, mx);
        for (int j = 0; j < 8; j++) tile_max = m8[j] > tile_max ? m8[j] : tile_max;
        return tile_max;
    }
#endif
    for (int j = 0; j < vis; j++) p[j] = 0.0f;
    for (int d = 0; d < D; d++) {
        const float qd = q[d];
        const float *kd = kt + d * ATTN_TILE;
        for (int j = 0; j < vis; j++) p[j] = fmaf(kd[j], qd, p[j]);
    }
    for (int j = 0; j < vis; j++) {
        p[j] *= scale;
        tile_max = p[j] > tile_max ? p[j] : tile_max;
    }
    return tile_max;
}

/* p[j] = exp_poly(p[j] - m) for j < vis. */
ATTN_TARGET static void ATTN(tile_exp)(float *p, int vis, float m) {
    int j = 0;
#ifdef ATTN_SIMD
    const __m256 vm = _mm256_set1_ps(m), r = _mm256_set1_ps(0x1.8p23f);
    for (; j + 8 <= vis; j += 8) {
        const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(p + j), vm);
        const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r), r);
        const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
        if (_mm256_movemask_ps(_mm256_cmp_ps(an, _mm256_set1_ps(126.0f), _CMP_LE_OQ)) != 0xff) {
            for (int i = 0; i < 8; i++) p[j + i] = ATTN(exp_poly)(p[j + i] - m); /* rare extremes */
            continue;
        }
        const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                          _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
        const __m256 u = _mm256_mul_ps(b, b);
        const __m256 jj = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
            u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
        const __m256i e =
            _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        _mm256_storeu_ps(p + j, _mm256_mul_ps(jj, _mm256_castsi256_ps(e)));
    }
#endif
    for (; j < vis; j++) p[j] = ATTN(exp_poly)(p[j] - m);
}

/* ar[d] += sum over j < n of vt[j][d] * p[j], one FMA per position in position order. */
ATTN_TARGET static void ATTN(tile_accum_v)(float *ar, const float *vt, const float *p, int n, int D) {
    int d = 0;
#ifdef ATTN_SIMD
    for (; d + 32 <= D; d += 32) {
        __m256 a0 = _mm256_loadu_ps(ar + d), a1 = _mm256_loadu_ps(ar + d + 8);
        __m256 a2 = _mm256_loadu_ps(ar + d + 16), a3 = _mm256_loadu_ps(ar + d + 24);
        for (int j = 0; j < n; j++) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            const float *v = vt + (size_t)j * D + d;
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(v), pj, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(v + 8), pj, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(v + 16), pj, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(v + 24), pj, a3);
        }
        _mm256_storeu_ps(ar + d, a0);
        _mm256_storeu_ps(ar + d + 8, a1);
        _mm256_storeu_ps(ar + d + 16, a2);
        _mm256_storeu_ps(ar + d + 24, a3);
    }
    for (; d + 8 <= D; d += 8) {
        __m256 a0 = _mm256_loadu_ps(ar + d);
        for (int j = 0; j < n; j++)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(vt + (size_t)j * D + d), _mm256_set1_ps(p[j]), a0);
        _mm256_storeu_ps(ar + d, a0);
    }
#endif
    for (; d < D; d++) {
        float s = ar[d];
        for (int j = 0; j < n; j++) s = fmaf(vt[(size_t)j * D + d], p[j], s);
        ar[d] = s;
    }
}

/* dst[d] = float(row[d]) for d < D, the row in F16 or F32. */
ATTN_TARGET static void ATTN(kv_to_f32)(float *dst, const void *row, int D, bool f16) {
    if (!f16) {
        memcpy(dst, row, (size_t)D * sizeof(float));
        return;
    }
    const cera_f16 *r = row;
    int d = 0;
#ifdef ATTN_SIMD
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(dst + d, ATTN_LOADH(r + d));
#endif
    for (; d < D; d++) dst[d] = CVT_F32(r[d]);
}

/* The F32 mode for one head and the consecutive tokens t0..t1-1 of one sequence, as
 * llama.cpp's tiled path computes each row: the keys in tiles of ATTN_TILE positions
 * (converted to float once per tile for all the block's rows, transposed so the scores
 * of a row run along the positions; the values converted once as well); per row and tile
 * the scores (an FMA chain over the head, then the scale), the tile's maximum, one rescale
 * of the accumulator when the maximum grows, exp(s - max) with the polynomial exp summed
 * 16 at a time into a double, and the V rows added as an FMA chain in position order. */
ATTN_TARGET static void ATTN(block_f32)(const cera_attn_args *a, int h, int t0, int t1, void *scratch) {
    const int D = a->head_dim, nq = t1 - t0;
    const cera_kv_seq *seq = a->seqs[a->seq[t0]];
    const bool f16 = seq->pool->fmt.k == CERA_KV_F16; /* K and V alike in this mode */
    const size_t kv_off = cera_kv_row_bytes(seq->pool->fmt.k, (h / (a->n_head / a->n_head_kv)) * D);
    float *kt = (float *)scratch;   /* [D][ATTN_TILE] keys of the tile, transposed */
    float *vt = kt + D * ATTN_TILE; /* [ATTN_TILE][D] values of the tile */
    float *p = vt + D * ATTN_TILE;  /* [ATTN_TILE] a row's scores, then probabilities */
    float *ms_ = p + ATTN_TILE;     /* [nq] running maxima */
    float *ss_ = ms_ + ATTN_QBLOCK; /* [nq] running sums */
    float *acc = ss_ + ATTN_QBLOCK; /* [nq][D] accumulators */
    for (int r = 0; r < nq; r++) {
        ms_[r] = -INFINITY;
        ss_[r] = 0.0f;
    }
    memset(acc, 0, (size_t)nq * D * sizeof *acc);
    const int max_pos = a->pos[t1 - 1];
    /* the span's first key (its first token's window); tiles before it are skipped, and
     * positions before it in a tile, whose blocks may be gone, are read as zeros */
    const int lo0 = ATTN(window_lo)(a, t0);
    for (int p0 = lo0 - lo0 % ATTN_TILE; p0 <= max_pos; p0 += ATTN_TILE) {
        const int n = max_pos + 1 - p0 < ATTN_TILE ? max_pos + 1 - p0 : ATTN_TILE;
        for (int j = 0; j < n; j++) {
            if (p0 + j < lo0) {
                for (int d = 0; d < D; d++) kt[d * ATTN_TILE + j] = 0.0f;
                memset(vt + (size_t)j * D, 0, (size_t)D * sizeof *vt);
                continue;
            }
            const uint8_t *k = (const uint8_t *)cera_kv_row(seq, a->layer, 0, p0 + j) + kv_off;
            for (int d = 0; d < D; d++) kt[d * ATTN_TILE + j] = ATTN(kv_get)(k, d, f16);
            ATTN(kv_to_f32)
            (vt + (size_t)j * D, (const uint8_t *)cera_kv_row(seq, a->layer, 1, p0 + j) + kv_off, D, f16);
        }
        for (int r = 0; r < nq; r++) {
            const int t = t0 + r;
            int vis = a->pos[t] + 1 - p0;               /* positions of this tile the row may see */
            const int hid = ATTN(window_lo)(a, t) - p0; /* and those before its window */
            if (vis <= 0 || hid >= ATTN_TILE) continue; /* all masked: llama.cpp leaves the row as it is */
            if (vis > ATTN_TILE) vis = ATTN_TILE;
            const float *q = a->q + ((size_t)t * a->n_head + h) * D;
            float *ar = acc + (size_t)r * D;
            float tile_max = ATTN(tile_scores)(kt, q, D, vis, a->scale, p);
            if (hid > 0) { /* masked as -inf: out of the maximum, exp 0 */
                tile_max = -INFINITY;
                for (int j = hid; j < vis; j++) tile_max = p[j] > tile_max ? p[j] : tile_max;
            }
            const float m_old = ms_[r], m_new = m_old > tile_max ? m_old : tile_max;
            if (m_new > m_old) {
                const float ms = expf(m_old - m_new);
                for (int d = 0; d < D; d++) ar[d] *= ms;
                ss_[r] *= ms;
            }
            ms_[r] = m_new;
            ATTN(tile_exp)(p, vis, m_new);
            for (int j = 0; j < hid; j++) p[j] = 0.0f;
            for (int j = vis; j < ATTN_TILE; j++) p[j] = 0.0f; /* exp(-inf) of the masked */
            double sum = 0.0;
            for (int j0 = 0; j0 < ATTN_TILE; j0 += 16) sum += (double)ATTN(reduce16)(p + j0);
            ss_[r] = (float)((double)ss_[r] + sum);
            ATTN(tile_accum_v)(ar, vt, p, vis, D);
        }
    }
    for (int r = 0; r < nq; r++) {
        const float s_inv = ss_[r] == 0.0f ? 0.0f : 1.0f / ss_[r];
        float *out = a->out + ((size_t)(t0 + r) * a->n_head + h) * D;
        for (int d = 0; d < D; d++) out[d] = acc[(size_t)r * D + d] * s_inv;
    }
}

/* hsum_float_8 of llama.cpp's x86 code: the two 128-bit halves added, then lanes 0+2 and 1+3,
 * then those two. */
ATTN_TARGET static inline float ATTN(hsum8)(const float *v) {
    float r[4];
    for (int l = 0; l < 4; l++) r[l] = v[l + 4] + v[l];
    return (r[0] + r[2]) + (r[1] + r[3]);
}

/* K·Q for a Q8_0 (q4 false) or Q4_0 K row against Q in Q8_0, as llama.cpp's AVX2 vec_dots
 * (ggml_vec_dot_q8_0_q8_0, ggml_vec_dot_q4_0_q8_0), which its AVX-512 build runs: per block
 * 8 lanes, each the exact integer sum of 4 consecutive products, scaled by d_k * d_q into one
 * float accumulator per lane with a fused multiply-add, the lanes summed as hsum_float_8. */
ATTN_TARGET static float ATTN(kdot_q)(const void *k, const block_q8_0 *y, int n, bool q4) {
    float acc[8] = {0};
#ifdef ATTN_SIMD
    /* the same lanes: |x| times y signed like x, pairs summed to int16 (at most 2 * 128 * 127, no
     * saturation), then pairs of those to int32 — exact, as the scalar loop below */
    __m256 va = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int b = 0; b < n / 32; b++) {
        __m256i x;
        float dk;
        if (q4) {
            const block_q4_0 *kb = (const block_q4_0 *)k + b;
            const __m128i t = _mm_loadu_si128((const __m128i *)(const void *)kb->qs);
            x = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
            x = _mm256_sub_epi8(x, _mm256_set1_epi8(8));
            dk = CVT_F32(kb->d);
        } else {
            const block_q8_0 *kb = (const block_q8_0 *)k + b;
            x = _mm256_loadu_si256((const __m256i *)(const void *)kb->qs);
            dk = CVT_F32(kb->d);
        }
        const __m256i yq = _mm256_loadu_si256((const __m256i *)(const void *)y[b].qs);
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(yq, x));
        const __m256 q = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        va = _mm256_fmadd_ps(_mm256_set1_ps(dk * CVT_F32(y[b].d)), q, va);
    }
    _mm256_storeu_ps(acc, va);
#else
    for (int b = 0; b < n / 32; b++) {
        int8_t x[32];
        float dk;
        if (q4) {
            const block_q4_0 *kb = (const block_q4_0 *)k + b;
            for (int j = 0; j < 16; j++) {
                x[j] = (int8_t)((kb->qs[j] & 15) - 8);
                x[j + 16] = (int8_t)((kb->qs[j] >> 4) - 8);
            }
            dk = CVT_F32(kb->d);
        } else {
            const block_q8_0 *kb = (const block_q8_0 *)k + b;
            memcpy(x, kb->qs, 32);
            dk = CVT_F32(kb->d);
        }
        const float d = dk * CVT_F32(y[b].d);
        for (int l = 0; l < 8; l++) {
            int sum = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) sum += x[j] * y[b].qs[j];
            acc[l] = fmaf(d, (float)sum, acc[l]);
        }
    }
#endif
    return ATTN(hsum8)(acc);
}

/* K·Q in BF16 as ggml_vec_dot_bf16's AVX512-BF16 path: per 64 elements two vdpbf16ps
 * accumulators of 16 lanes (elements 0-31 and 32-63 of each step), each lane adding its odd
 * element's product, then its even one's (the instruction's order; the products are exact),
 * both reduced as _mm512_reduce_add_ps into a double, a tail shorter than 64 added in double.
 * (The instruction also flushes subnormals, which K·Q products do not reach.) */
ATTN_TARGET static float ATTN(kdot_bf16)(const cera_bf16 *x, const cera_bf16 *y, int n) {
    float c[2][16] = {{0}};
    int i = 0;
#ifdef ATTN_SIMD
    /* 8 lanes at a time: a 32-bit word holds a lane's pair, the odd element in its high half */
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (; i + 64 <= n; i += 64)
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 2; g++) {
                const __m256i wx =
                    _mm256_loadu_si256((const __m256i *)(const void *)(x + i + 32 * h + 16 * g));
                const __m256i wy =
                    _mm256_loadu_si256((const __m256i *)(const void *)(y + i + 32 * h + 16 * g));
                __m256 a = _mm256_loadu_ps(c[h] + 8 * g);
                a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(wx, hi)),
                                                   _mm256_castsi256_ps(_mm256_and_si256(wy, hi))));
                a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(wx, 16)),
                                                   _mm256_castsi256_ps(_mm256_slli_epi32(wy, 16))));
                _mm256_storeu_ps(c[h] + 8 * g, a);
            }
#else
    for (; i + 64 <= n; i += 64)
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 16; l++) {
                const int e = i + 32 * h + 2 * l;
                c[h][l] += cera_bf16_to_f32(x[e + 1]) * cera_bf16_to_f32(y[e + 1]);
                c[h][l] += cera_bf16_to_f32(x[e]) * cera_bf16_to_f32(y[e]);
            }
#endif
    double sum = (double)ATTN(reduce16)(c[0]);
    sum += (double)ATTN(reduce16)(c[1]);
    for (; i < n; i++) sum += (double)(cera_bf16_to_f32(x[i]) * cera_bf16_to_f32(y[i]));
    return (float)sum;
}

/* acc[d] *= ms, the F32 accumulator's rescale (ggml_vec_scale_f32) */
ATTN_TARGET static void ATTN(acc_scale_f32)(float *acc, float ms, int D) {
    int d = 0;
#ifdef ATTN_SIMD
    const __m256 vm = _mm256_set1_ps(ms);
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(acc + d, _mm256_mul_ps(_mm256_loadu_ps(acc + d), vm));
#endif
    for (; d < D; d++) acc[d] *= ms;
}

/* acc[d] = fma(v[d], vs, acc[d]) (ggml_vec_mad_f32) */
ATTN_TARGET static void ATTN(acc_axpy_f32)(float *acc, const float *v, float vs, int D) {
    int d = 0;
#ifdef ATTN_SIMD
    const __m256 vv = _mm256_set1_ps(vs);
    for (; d + 8 <= D; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(_mm256_loadu_ps(v + d), vv, _mm256_loadu_ps(acc + d)));
#endif
    for (; d < D; d++) acc[d] = fmaf(v[d], vs, acc[d]);
}

/* One token and head over a cache that is not F16 throughout, as llama.cpp's per-row path:
 * Q in K's dot type once (its CPU from_float), each score that type's vec_dot in llama.cpp's
 * order, the accumulator F16 for an F16 V (as row_f16) else F32 over V rows converted to
 * float; a rotated V's output turned back. */
ATTN_TARGET static void ATTN(row_gen)(const cera_attn_args *a, const cera_kv_seq *seq, int t, int h,
                                      void *scratch) {
    const int D = a->head_dim;
    const cera_kv_format *f = &seq->pool->fmt;
    const cera_cpu_type_ops *ko = cera_cpu_ops(cera_kv_tensor_type(f->k));
    const int kvh = h / (a->n_head / a->n_head_kv);
    const size_t k_off = cera_kv_row_bytes(f->k, kvh * D), v_off = cera_kv_row_bytes(f->v, kvh * D);
    const bool v16 = f->v == CERA_KV_F16;
    float *acc = scratch; /* [D] F32, or F16 (v16) */
    float *v32 = acc + D; /* [D] a V row as floats */
    void *qa = v32 + D;   /* Q in K's dot type (at most D floats) */
    cera_f16 *acc16 = scratch;
    float *out = a->out + ((size_t)t * a->n_head + h) * D;
    ko->quantize_act(a->q + ((size_t)t * a->n_head + h) * D, qa, D);
    if (v16)
        memset(acc16, 0, (size_t)D * sizeof *acc16);
    else
        memset(acc, 0, (size_t)D * sizeof *acc);
    float S = 0.0f, M = -INFINITY;
    const int n_pos = a->pos[t] + 1;
    for (int p = ATTN(window_lo)(a, t); p < n_pos; p++) {
        const void *kr = (const uint8_t *)cera_kv_row(seq, a->layer, 0, p) + k_off;
        float s;
        switch (f->k) {
        case CERA_KV_F16: s = ATTN(dot_f16)(kr, qa, D); break;
        case CERA_KV_BF16: s = ATTN(kdot_bf16)(kr, qa, D); break;
        case CERA_KV_Q8_0:
        case CERA_KV_Q4_0: s = ATTN(kdot_q)(kr, qa, D, f->k == CERA_KV_Q4_0); break;
        default: ko->vec_dot(D, &s, kr, qa); break; /* F32: llama.cpp casts it to F16 */
        }
        s *= a->scale;
        const uint8_t *v = (const uint8_t *)cera_kv_row(seq, a->layer, 1, p) + v_off;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
            const float m_old = M;
            M = s;
            ms = expf(m_old - M);
            if (v16)
                ATTN(acc_scale_f16)(acc16, ms, D);
            else
                ATTN(acc_scale_f32)(acc, ms, D);
        } else {
            vs = expf(s - M);
        }
        if (v16) {
            ATTN(acc_axpy_f16)(acc16, (const cera_f16 *)v, vs, D);
        } else if (f->v == CERA_KV_F32) {
            ATTN(acc_axpy_f32)(acc, (const float *)v, vs, D);
        } else {
            cera_cpu_kv_load(f->v, v, v32, D);
            ATTN(acc_axpy_f32)(acc, v32, vs, D);
        }
        S = fmaf(S, ms, vs);
    }
    const float s_inv = S == 0.0f ? 0.0f : 1.0f / S;
    if (v16)
        for (int d = 0; d < D; d++) v32[d] = CVT_F32(acc16[d]);
    const float *res = v16 ? v32 : acc;
    for (int d = 0; d < D; d++) out[d] = res[d] * s_inv;
    if (f->rot_v) cera_fwht_f32(out, D, f->rot_v);
}

/* One chunk of the work (see cera_attention_n_chunks): one span, one head. */
ATTN_TARGET static void ATTN(attention_chunk)(const cera_attn_args *a, int64_t c, void *scratch) {
    const cera_attn_span *sp = &a->spans[c / a->n_head];
    const int h = (int)(c % a->n_head);
    if (sp->one) {
        for (int t = sp->t0; t < sp->t1; t++) {
            const cera_kv_seq *seq = a->seqs[a->seq[t]];
            if (seq->pool->fmt.k == CERA_KV_F16 && seq->pool->fmt.v == CERA_KV_F16)
                ATTN(row_f16)(a, seq, t, h, scratch);
            else
                ATTN(row_gen)(a, seq, t, h, scratch);
        }
        return;
    }
    ATTN(block_f32)(a, h, sp->t0, sp->t1, scratch);
}

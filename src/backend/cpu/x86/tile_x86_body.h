/*
 * tile_x86_body.h — register-tiled matrix-matrix kernels (gemm_tile) for prefill: up to
 * TILE_R weight rows times TILE_C activation rows per call, so each weight block is
 * unpacked once per TILE_C activation rows and each activation block loaded once per TILE_R
 * weight rows. Compiled per tier like dot_x86_body.h (included right after it, same
 * X86_VNNI / X86_FN).
 *
 * The integer arithmetic is the vec_dot's (exact); per (row, column, block) it is one byte
 * dot into 8 int32 lanes, then one float multiply-add with the two block scales. Signed
 * formats are unpacked as unsigned bytes u = x + k; the k * sum(y) correction depends only
 * on the activation block, so it is computed once per column and folded in as the starting
 * value of the byte dot. With VNNI, q8_0 and iq4_nl weights use k = 128 (vpdpbusd takes
 * unsigned bytes up to 255); pmaddubsw would saturate there, so the AVX2 build keeps the
 * sign trick for those two.
 */

#define TILE_R 4
#if X86_VNNI
#define TILE_C 4
#else
#define TILE_C 2
#endif

enum { KIND_Q4_0, KIND_Q5_0, KIND_Q8_0, KIND_IQ4_NL, KIND_Q4_1, KIND_Q5_1 };

/* u += a * b (unsigned x signed bytes) in 8 int32 lanes. */
static inline __m256i X86_FN(dpbusd)(__m256i acc, __m256i u, __m256i s) {
#if X86_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* Whether the weight bytes go in biased (unsigned) or keep their sign (AVX2 q8_0/iq4_nl). */
static inline bool X86_FN(kind_signed)(int kind) {
    return !X86_VNNI && (kind == KIND_Q8_0 || kind == KIND_IQ4_NL);
}

/* The 32 weight bytes of block b of a row: unsigned u (offset taken out later) or signed. */
static inline __attribute__((always_inline)) __m256i X86_FN(unpack32)(int kind, const uint8_t *row, int64_t b,
                                                                      float *d, float *m) {
    switch (kind) {
    case KIND_Q4_0: {
        const block_q4_0 *x = (const block_q4_0 *)row + b;
        *d = F16(x->d);
        return X86_FN(nibbles32)(x->qs);
    }
    case KIND_Q5_0: {
        const block_q5_0 *x = (const block_q5_0 *)row + b;
        *d = F16(x->d);
        return _mm256_or_si256(X86_FN(nibbles32)(x->qs), X86_FN(bits32_to_0x10)(x->qh));
    }
    case KIND_Q8_0: {
        const block_q8_0 *x = (const block_q8_0 *)row + b;
        *d = F16(x->d);
        const __m256i v = X86_FN(load32)(x->qs);
        return X86_VNNI ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v;
    }
    case KIND_IQ4_NL: {
        const block_iq4_nl *x = (const block_iq4_nl *)row + b;
        *d = F16(x->d);
        const __m256i v = _mm256_shuffle_epi8(X86_FN(iq4_table)(), X86_FN(nibbles32)(x->qs));
        return X86_VNNI ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v;
    }
    case KIND_Q4_1: {
        const block_q4_1 *x = (const block_q4_1 *)row + b;
        *d = F16(x->d);
        *m = F16(x->m);
        return X86_FN(nibbles32)(x->qs);
    }
    default: {
        const block_q5_1 *x = (const block_q5_1 *)row + b;
        *d = F16(x->d);
        *m = F16(x->m);
        return _mm256_or_si256(X86_FN(nibbles32)(x->qs), X86_FN(bits32_to_0x10)(x->qh));
    }
    }
}

/* The offset k of the unsigned weight bytes (0: none). */
static inline int X86_FN(kind_offset)(int kind) {
    switch (kind) {
    case KIND_Q4_0: return 8;
    case KIND_Q5_0: return 16;
    case KIND_Q8_0:
    case KIND_IQ4_NL: return X86_VNNI ? 128 : 0;
    default: return 0;
    }
}

static inline __attribute__((always_inline)) void X86_FN(tile_32)(int kind, int64_t n, float *s,
                                                                  size_t s_stride, const void *w,
                                                                  size_t w_stride, const void *a,
                                                                  size_t a_stride, int nr, int nc) {
    const bool q8_1 = kind == KIND_Q4_1 || kind == KIND_Q5_1;
    const bool sgn = X86_FN(kind_signed)(kind);
    const int off = X86_FN(kind_offset)(kind);
    const __m256i offv = _mm256_set1_epi8((char)off);
    const uint8_t *wr = w;
    const uint8_t *ar = a;
    __m256 acc[TILE_R][TILE_C];
    float summs[TILE_R][TILE_C];
    for (int r = 0; r < TILE_R; r++)
        for (int c = 0; c < TILE_C; c++) {
            acc[r][c] = _mm256_setzero_ps();
            summs[r][c] = 0.0f;
        }
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i y[TILE_C], start[TILE_C];
        __m256 dy[TILE_C];
        float sy[TILE_C];
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk =
                ar + (size_t)c * a_stride + (size_t)b * (q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0));
            if (q8_1) {
                const block_q8_1 *yb = (const block_q8_1 *)blk;
                y[c] = X86_FN(load32)(yb->qs);
                dy[c] = _mm256_set1_ps(F16(yb->d));
                sy[c] = F16(yb->s);
            } else {
                const block_q8_0 *yb = (const block_q8_0 *)blk;
                y[c] = X86_FN(load32)(yb->qs);
                dy[c] = _mm256_set1_ps(F16(yb->d));
            }
            /* -k * sum(y), spread over the lanes exactly as the byte dot spreads sum(u y). */
            start[c] = off ? _mm256_sub_epi32(_mm256_setzero_si256(), X86_FN(dot_u8s8)(offv, y[c]))
                           : _mm256_setzero_si256();
        }
        for (int r = 0; r < nr; r++) {
            float d, m = 0.0f;
            const __m256i u = X86_FN(unpack32)(kind, wr + (size_t)r * w_stride, b, &d, &m);
            const __m256 dx = _mm256_set1_ps(d);
            for (int c = 0; c < nc; c++) {
                const __m256i p = sgn ? X86_FN(dot_s8s8)(u, y[c]) : X86_FN(dpbusd)(start[c], u, y[c]);
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dx, dy[c]), acc[r][c]);
                if (q8_1) summs[r][c] += m * sy[c];
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) s[(size_t)c * s_stride + r] = X86_FN(hsum_ps)(acc[r][c]) + summs[r][c];
}

/* The full tile with constant bounds (so the accumulators live in registers), else the edge. */
static inline __attribute__((always_inline)) void X86_FN(tile_32_any)(int kind, int64_t n, float *s,
                                                                      size_t ss, const void *w, size_t ws,
                                                                      const void *a, size_t as, int nr,
                                                                      int nc) {
    if (nr == TILE_R && nc == TILE_C)
        X86_FN(tile_32)(kind, n, s, ss, w, ws, a, as, TILE_R, TILE_C);
    else
        X86_FN(tile_32)(kind, n, s, ss, w, ws, a, as, nr, nc);
}

static void X86_FN(tile_q4_0)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_32_any)(KIND_Q4_0, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_q5_0)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_32_any)(KIND_Q5_0, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_q8_0)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_32_any)(KIND_Q8_0, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_iq4_nl)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                                size_t as, int nr, int nc) {
    X86_FN(tile_32_any)(KIND_IQ4_NL, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_q4_1)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_32_any)(KIND_Q4_1, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_q5_1)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_32_any)(KIND_Q5_1, n, s, ss, w, ws, a, as, nr, nc);
}

static void X86_FN(set_tile)(cera_cpu_type_ops *ops, cera_gemm_tile_fn fn, int rows, int cols) {
    ops->gemm_tile = fn;
    ops->tile_rows = rows;
    ops->tile_cols = cols;
}

static void X86_FN(register_tiles)(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    X86_FN(set_tile)(&ops[CERA_TYPE_Q4_0], X86_FN(tile_q4_0), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_Q5_0], X86_FN(tile_q5_0), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_Q8_0], X86_FN(tile_q8_0), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_IQ4_NL], X86_FN(tile_iq4_nl), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_Q4_1], X86_FN(tile_q4_1), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_Q5_1], X86_FN(tile_q5_1), TILE_R, TILE_C);
}

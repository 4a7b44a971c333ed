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
 *
 * A decode step (one activation column) reads one weight row at a time: side-by-side rows
 * are several interleaved streams, measured at about 60 % of the single-row rate out of
 * cache. Every tile shape computes each output with the same operations, so a token gets the
 * same bits in a prompt and in a decode step (tests/cpu checks it).
 */

/* AVX2 (16 ymm registers): 4 x 3, whose 12 accumulators and the operands in flight just fit;
 * kernels_avx2.c's float tiles take the same shape (4 x 2 against 4 x 3 in bench/RESULTS.md) */
#define TILE_R 4
#if X86_VNNI
#define TILE_C 4
#else
#define TILE_C 3
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

/* Bytes of one block of the weight kind; every kind's block starts with its F16 scale d. */
static inline size_t X86_FN(kind_bytes)(int kind) {
    switch (kind) {
    case KIND_Q4_0: return sizeof(block_q4_0);
    case KIND_Q5_0: return sizeof(block_q5_0);
    case KIND_Q8_0: return sizeof(block_q8_0);
    case KIND_IQ4_NL: return sizeof(block_iq4_nl);
    case KIND_Q4_1: return sizeof(block_q4_1);
    default: return sizeof(block_q5_1);
    }
}

/* Four F16 values (the first two bytes at p0..p3) as floats, converted in one instruction;
 * the halves are gathered with integer moves. */
static inline __m128 X86_FN(scales4)(const uint8_t *p0, const uint8_t *p1, const uint8_t *p2,
                                     const uint8_t *p3) {
    uint16_t h0, h1, h2, h3;
    memcpy(&h0, p0, 2);
    memcpy(&h1, p1, 2);
    memcpy(&h2, p2, 2);
    memcpy(&h3, p3, 2);
    const uint64_t packed = (uint64_t)h0 | (uint64_t)h1 << 16 | (uint64_t)h2 << 32 | (uint64_t)h3 << 48;
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)packed));
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
    const size_t xbytes = X86_FN(kind_bytes)(kind), ybytes = q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    /* rows/columns past nr/nc read row/column 0's scale (a valid block; the product is unused) */
    const uint8_t *wrow[4], *acol[4];
    for (int i = 0; i < 4; i++) {
        wrow[i] = wr + (i < nr ? (size_t)i * w_stride : 0);
        acol[i] = ar + (i < nc ? (size_t)i * a_stride : 0);
    }
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i y[TILE_C], start[TILE_C];
        float sy[TILE_C];
        /* The scale products dx * dy of the tile, two columns per vector: pr[c / 2] lane
         * (c % 2) * 4 + r holds row r times column c. They are exact in float (two 11-bit
         * mantissas), so the same values as one multiply per output, which bound the tile on
         * the multiply ports; a lane broadcast (a shuffle) takes its place. */
        __m256 pr[(TILE_C + 1) / 2];
        {
            const size_t xo = (size_t)b * xbytes, yo = (size_t)b * ybytes;
            const __m128 dxv = X86_FN(scales4)(wrow[0] + xo, wrow[1] + xo, wrow[2] + xo, wrow[3] + xo);
            const __m256 dyv = _mm256_castps128_ps256(
                X86_FN(scales4)(acol[0] + yo, acol[1] + yo, acol[2] + yo, acol[3] + yo));
            const __m256 dx2 = _mm256_set_m128(dxv, dxv);
            for (int h = 0; h < (TILE_C + 1) / 2; h++)
                pr[h] = _mm256_mul_ps(dx2, _mm256_permutevar8x32_ps(
                                               dyv, _mm256_setr_epi32(2 * h, 2 * h, 2 * h, 2 * h, 2 * h + 1,
                                                                      2 * h + 1, 2 * h + 1, 2 * h + 1)));
        }
        for (int c = 0; c < nc; c++) {
            const uint8_t *blk =
                ar + (size_t)c * a_stride + (size_t)b * (q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0));
            if (q8_1) {
                const block_q8_1 *yb = (const block_q8_1 *)blk;
                y[c] = X86_FN(load32)(yb->qs);
                sy[c] = F16(yb->s);
            } else {
                const block_q8_0 *yb = (const block_q8_0 *)blk;
                y[c] = X86_FN(load32)(yb->qs);
            }
            /* -k * sum(y), spread over the lanes exactly as the byte dot spreads sum(u y). */
            start[c] = off ? _mm256_sub_epi32(_mm256_setzero_si256(), X86_FN(dot_u8s8)(offv, y[c]))
                           : _mm256_setzero_si256();
        }
        for (int r = 0; r < nr; r++) {
            float d, m = 0.0f;
            const __m256i u = X86_FN(unpack32)(kind, wr + (size_t)r * w_stride, b, &d, &m);
            (void)d;
            for (int c = 0; c < nc; c++) {
                const __m256i p = sgn ? X86_FN(dot_s8s8)(u, y[c]) : X86_FN(dpbusd)(start[c], u, y[c]);
                const __m256 sc = _mm256_permutevar8x32_ps(pr[c / 2], _mm256_set1_epi32((c % 2) * 4 + r));
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc[r][c]);
                if (q8_1) summs[r][c] += m * sy[c];
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) s[(size_t)c * s_stride + r] = X86_FN(hsum_ps)(acc[r][c]) + summs[r][c];
}

/* One activation row (a decode step), one weight row at a time: the same per-output
 * operations as tile_32, but the weights are read as one sequential stream, which out of cache
 * runs at the single-row rate (side-by-side rows measured about half of it). */
static inline __attribute__((always_inline)) void
X86_FN(tile_32_col)(int kind, int64_t n, float *s, int nr, const void *w, size_t w_stride, const void *a) {
    const bool q8_1 = kind == KIND_Q4_1 || kind == KIND_Q5_1;
    const bool sgn = X86_FN(kind_signed)(kind);
    const int off = X86_FN(kind_offset)(kind);
    const __m256i offv = _mm256_set1_epi8((char)off);
    const size_t ybytes = q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 acc = _mm256_setzero_ps();
        float summs = 0.0f;
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = (const uint8_t *)a + (size_t)b * ybytes;
            __m256i yv;
            float dyf, sy = 0.0f;
            if (q8_1) {
                const block_q8_1 *yb = (const block_q8_1 *)blk;
                yv = X86_FN(load32)(yb->qs);
                dyf = F16(yb->d);
                sy = F16(yb->s);
            } else {
                const block_q8_0 *yb = (const block_q8_0 *)blk;
                yv = X86_FN(load32)(yb->qs);
                dyf = F16(yb->d);
            }
            const __m256i start = off ? _mm256_sub_epi32(_mm256_setzero_si256(), X86_FN(dot_u8s8)(offv, yv))
                                      : _mm256_setzero_si256();
            float d, m = 0.0f;
            const __m256i u = X86_FN(unpack32)(kind, row, b, &d, &m);
            const __m256i p = sgn ? X86_FN(dot_s8s8)(u, yv) : X86_FN(dpbusd)(start, u, yv);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                  _mm256_mul_ps(_mm256_set1_ps(d), _mm256_set1_ps(dyf)), acc);
            if (q8_1) summs += m * sy;
        }
        s[r] = X86_FN(hsum_ps)(acc) + summs;
    }
}

/* The full tile and the one-column tile (a decode step) with constant bounds, so the
 * accumulators live in registers; other edges take the general loop. Each (row, column)
 * result is computed by the same operations whatever the tile shape, so a token gives the
 * same bits in a prompt and in a decode step. */
static inline __attribute__((always_inline)) void X86_FN(tile_32_any)(int kind, int64_t n, float *s,
                                                                      size_t ss, const void *w, size_t ws,
                                                                      const void *a, size_t as, int nr,
                                                                      int nc) {
    if (nr == TILE_R && nc == TILE_C)
        X86_FN(tile_32)(kind, n, s, ss, w, ws, a, as, TILE_R, TILE_C);
    else if (nc == 1) /* a decode step: one activation row */
        X86_FN(tile_32_col)(kind, n, s, nr, w, ws, a);
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

/* ---- k-quants: a super-block unpacked once per row into L1, then reused per column ---- */

enum { KIND_Q2_K, KIND_Q3_K, KIND_Q4_K, KIND_Q5_K, KIND_Q6_K, KIND_IQ4_XS };

typedef struct X86_FN(kq_row) {
    __m256i u[8];     /* 256 unsigned quants (x = u - offset), 32 per vector */
    __m256i scale[8]; /* int16 scale per byte pair of u[j] */
    __m256i corr;     /* int16 per group of 16: offset * scale (subtracted with weight d) */
    __m256i mins;     /* int16 per group of 16: the min (subtracted with weight dmin) */
    __m256i neg[8];   /* q3_k: 4 where the high bit is clear, taken off per element;
                         iq4_xs: the signed values, whose signs go onto the activations */
    float d, dmin;
} X86_FN(kq_row);

static inline __attribute__((always_inline)) void X86_FN(kq_unpack)(int kind, const uint8_t *row, int64_t b,
                                                                    X86_FN(kq_row) * o) {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    int16_t g16[16];
    switch (kind) {
    case KIND_Q2_K: {
        const block_q2_k *x = (const block_q2_k *)row + b;
        for (int g = 0; g < 16; g++) g16[g] = x->scales[g] >> 4;
        for (int h = 0; h < 2; h++) {
            const __m256i q = X86_FN(load32)(x->qs + 32 * h);
            for (int sh = 0; sh < 4; sh++) {
                const int j = 4 * h + sh;
                o->u[j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * sh), _mm256_set1_epi8(3));
                o->scale[j] = X86_FN(scales2)(x->scales[2 * j] & 0xF, x->scales[2 * j + 1] & 0xF);
            }
        }
        o->mins = X86_FN(load32)(g16);
        o->corr = _mm256_setzero_si256();
        o->d = F16(x->d);
        o->dmin = F16(x->dmin);
        break;
    }
    case KIND_Q3_K: {
        const block_q3_k *x = (const block_q3_k *)row + b;
        int8_t sc[16];
        q3_k_scales(x->scales, sc);
        const __m256i hm = X86_FN(load32)(x->hmask);
        for (int h = 0; h < 2; h++) {
            const __m256i q = X86_FN(load32)(x->qs + 32 * h);
            for (int sh = 0; sh < 4; sh++) {
                const int j = 4 * h + sh;
                const __m256i bit = _mm256_set1_epi8((char)(1 << j));
                o->neg[j] = _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit),
                                                _mm256_set1_epi8(4));
                o->u[j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * sh), _mm256_set1_epi8(3));
                o->scale[j] = X86_FN(scales2)(sc[2 * j], sc[2 * j + 1]);
            }
        }
        o->corr = _mm256_setzero_si256();
        o->mins = _mm256_setzero_si256();
        o->d = F16(x->d);
        o->dmin = 0.0f;
        break;
    }
    case KIND_Q4_K:
    case KIND_Q5_K: {
        /* Same header (d, dmin, scales); q5_k has qh before qs. */
        const block_q4_k *x4 = (const block_q4_k *)row + b;
        const block_q5_k *x5 = (const block_q5_k *)row + b;
        const bool five = kind == KIND_Q5_K;
        const uint8_t *hdr = five ? x5->scales : x4->scales;
        const uint8_t *qs = five ? x5->qs : x4->qs;
        const __m256i qh = five ? X86_FN(load32)(x5->qh) : _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            k_scale_min(j, hdr, &sc, &mn);
            o->scale[j] = _mm256_set1_epi16(sc);
            g16[2 * j] = g16[2 * j + 1] = mn;
        }
        for (int c = 0; c < 4; c++) {
            const __m256i q = X86_FN(load32)(qs + 32 * c);
            __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            if (five) {
                const __m256i b4 = _mm256_set1_epi8(0x10);
                lo = _mm256_or_si256(
                    lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c), 4), b4));
                hi = _mm256_or_si256(
                    hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c + 1), 4), b4));
            }
            o->u[2 * c] = lo;
            o->u[2 * c + 1] = hi;
        }
        o->mins = X86_FN(load32)(g16);
        o->corr = _mm256_setzero_si256();
        o->d = F16(five ? x5->d : x4->d);
        o->dmin = F16(five ? x5->dmin : x4->dmin);
        break;
    }
    case KIND_IQ4_XS: {
        /* Signed table values: u = |v| and neg = v, whose sign goes onto the activations. */
        const block_iq4_xs *x = (const block_iq4_xs *)row + b;
        for (int j = 0; j < 8; j++) {
            const __m256i v = _mm256_shuffle_epi8(X86_FN(iq4_table)(), X86_FN(nibbles32)(x->qs + 16 * j));
            o->u[j] = _mm256_sign_epi8(v, v);
            o->neg[j] = v;
            o->scale[j] = _mm256_set1_epi16((short)iq4_xs_scale(x, j));
        }
        o->corr = o->mins = _mm256_setzero_si256();
        o->d = F16(x->d);
        o->dmin = 0.0f;
        break;
    }
    default: {
        const block_q6_k *x = (const block_q6_k *)row + b;
        const __m256i hi2 = _mm256_set1_epi8(0x30);
        for (int g = 0; g < 16; g++) g16[g] = (int16_t)(32 * x->scales[g]);
        for (int h = 0; h < 2; h++) {
            const __m256i l0 = X86_FN(load32)(x->ql + 64 * h), l1 = X86_FN(load32)(x->ql + 64 * h + 32);
            const __m256i qh = X86_FN(load32)(x->qh + 32 * h);
            o->u[4 * h] =
                _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), hi2));
            o->u[4 * h + 1] =
                _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), hi2));
            o->u[4 * h + 2] =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, hi2));
            o->u[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                              _mm256_and_si256(_mm256_srli_epi16(qh, 2), hi2));
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k;
                o->scale[4 * h + k] = X86_FN(scales2)(x->scales[g], x->scales[g + 1]);
            }
        }
        o->corr = X86_FN(load32)(g16);
        o->mins = _mm256_setzero_si256();
        o->d = F16(x->d);
        o->dmin = 0.0f;
        break;
    }
    }
}

/* Sub-block j's scaled byte dot of an unpacked row with 32 activation quants. q3_k takes its
 * offset off per element pair in int16 (u * y - 4 * y where the high bit is clear), as
 * llama.cpp's q3_K dot does, so each int32 lane holds the same integer as there; iq4_xs
 * multiplies |v| by y with v's sign, as its vec_dot. */
static inline __attribute__((always_inline)) __m256i X86_FN(kq_dot)(int kind, const X86_FN(kq_row) * o, int j,
                                                                    __m256i y) {
    if (kind == KIND_IQ4_XS)
        return X86_FN(dot_u8s8_scaled)(o->u[j], _mm256_sign_epi8(y, o->neg[j]), o->scale[j]);
    if (kind == KIND_Q3_K)
        return _mm256_madd_epi16(
            _mm256_sub_epi16(_mm256_maddubs_epi16(o->u[j], y), _mm256_maddubs_epi16(o->neg[j], y)),
            o->scale[j]);
    return X86_FN(dot_u8s8_scaled)(o->u[j], y, o->scale[j]);
}

/* How each k-quant's minimums come off, following llama.cpp's x86 dot for that type: q5_k
 * sums dmin * (integer total) in a float of its own, taken off at the end; q2_k and q4_k
 * (whose llama.cpp GEMMs we cannot mirror anyway) fold them into the lanes. */
static inline bool X86_FN(kq_lane_mins)(int kind) { return kind == KIND_Q2_K || kind == KIND_Q4_K; }

static inline __attribute__((always_inline)) void X86_FN(tile_kq)(int kind, int64_t n, float *s,
                                                                  size_t s_stride, const void *w,
                                                                  size_t w_stride, const void *a,
                                                                  size_t a_stride, int nr, int nc) {
    const uint8_t *wr = w;
    const uint8_t *ar = a;
    __m256 acc[TILE_R][TILE_C];
    float summ[TILE_R][TILE_C];
    for (int r = 0; r < TILE_R; r++)
        for (int c = 0; c < TILE_C; c++) {
            acc[r][c] = _mm256_setzero_ps();
            summ[r][c] = 0.0f;
        }
    X86_FN(kq_row) rows[TILE_R];
    for (int64_t b = 0; b < n / QK_K; b++) {
        for (int r = 0; r < nr; r++) X86_FN(kq_unpack)(kind, wr + (size_t)r * w_stride, b, &rows[r]);
        const block_q8_k *yb[TILE_C];
        for (int c = 0; c < nc; c++) yb[c] = (const block_q8_k *)(ar + (size_t)c * a_stride) + b;
        __m256i isum[TILE_R][TILE_C];
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < nc; c++) {
                /* Offsets and mins through the activation sums, lane-wise (exact). */
                const __m256i bs = X86_FN(load32)(yb[c]->bsums);
                isum[r][c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(rows[r].corr, bs));
            }
        for (int j = 0; j < 8; j++) {
            __m256i y[TILE_C];
            for (int c = 0; c < nc; c++) y[c] = X86_FN(load32)(yb[c]->qs + 32 * j);
            for (int r = 0; r < nr; r++)
                for (int c = 0; c < nc; c++)
                    isum[r][c] = _mm256_add_epi32(isum[r][c], X86_FN(kq_dot)(kind, &rows[r], j, y[c]));
        }
        for (int r = 0; r < nr; r++)
            for (int c = 0; c < nc; c++) {
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][c]),
                                            _mm256_set1_ps(rows[r].d * yb[c]->d), acc[r][c]);
                if (X86_FN(kq_lane_mins)(kind)) {
                    const __m256i m = _mm256_madd_epi16(rows[r].mins, X86_FN(load32)(yb[c]->bsums));
                    acc[r][c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m),
                                                 _mm256_set1_ps(rows[r].dmin * yb[c]->d), acc[r][c]);
                } else if (kind == KIND_Q5_K) {
                    const __m256i m = _mm256_madd_epi16(rows[r].mins, X86_FN(load32)(yb[c]->bsums));
                    summ[r][c] += rows[r].dmin * yb[c]->d * (float)X86_FN(hsum_epi32)(m);
                }
            }
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) s[(size_t)c * s_stride + r] = X86_FN(hsum_ps)(acc[r][c]) - summ[r][c];
}

/* The one-column case (a decode step): row by row, the super-block unpacked straight into
 * registers instead of the per-row buffers the wide tile shares between columns. The same
 * per-lane operations as tile_kq, so the same bits. */
static inline void X86_FN(tile_kq_col)(int kind, int64_t n, float *s, int nr, const void *w, size_t w_stride,
                                       const void *a) {
    const block_q8_k *y = a;
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * w_stride;
        __m256 acc = _mm256_setzero_ps();
        float summ = 0.0f;
        for (int64_t b = 0; b < n / QK_K; b++) {
            X86_FN(kq_row) u;
            X86_FN(kq_unpack)(kind, row, b, &u);
            const __m256i bs = X86_FN(load32)(y[b].bsums);
            __m256i isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_madd_epi16(u.corr, bs));
            for (int j = 0; j < 8; j++)
                isum = _mm256_add_epi32(isum, X86_FN(kq_dot)(kind, &u, j, X86_FN(load32)(y[b].qs + 32 * j)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(u.d * y[b].d), acc);
            if (X86_FN(kq_lane_mins)(kind))
                acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(u.mins, bs)),
                                       _mm256_set1_ps(u.dmin * y[b].d), acc);
            else if (kind == KIND_Q5_K)
                summ += u.dmin * y[b].d * (float)X86_FN(hsum_epi32)(_mm256_madd_epi16(u.mins, bs));
        }
        s[r] = X86_FN(hsum_ps)(acc) - summ;
    }
}

static inline __attribute__((always_inline)) void X86_FN(tile_kq_any)(int kind, int64_t n, float *s,
                                                                      size_t ss, const void *w, size_t ws,
                                                                      const void *a, size_t as, int nr,
                                                                      int nc) {
    if (nr == TILE_R && nc == TILE_C)
        X86_FN(tile_kq)(kind, n, s, ss, w, ws, a, as, TILE_R, TILE_C);
    else if (nc == 1) /* a decode step: one activation row */
        X86_FN(tile_kq_col)(kind, n, s, nr, w, ws, a);
    else
        X86_FN(tile_kq)(kind, n, s, ss, w, ws, a, as, nr, nc);
}

static void X86_FN(tile_q2_k)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_kq_any)(KIND_Q2_K, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_q3_k)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_kq_any)(KIND_Q3_K, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_q4_k)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_kq_any)(KIND_Q4_K, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_q5_k)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_kq_any)(KIND_Q5_K, n, s, ss, w, ws, a, as, nr, nc);
}
static void X86_FN(tile_q6_k)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                              size_t as, int nr, int nc) {
    X86_FN(tile_kq_any)(KIND_Q6_K, n, s, ss, w, ws, a, as, nr, nc);
}

static void X86_FN(tile_iq4_xs)(int64_t n, float *s, size_t ss, const void *w, size_t ws, const void *a,
                                size_t as, int nr, int nc) {
    X86_FN(tile_kq_any)(KIND_IQ4_XS, n, s, ss, w, ws, a, as, nr, nc);
}

/* q3_k's row dot is the one-column tile on one row (its unpacking is the faster one, and its
 * arithmetic is llama.cpp's q3_K dot's, see kq_dot). */
static void X86_FN(dot_q3_k_q8_k)(int64_t n, float *s, const void *w, const void *a) {
    X86_FN(tile_kq_col)(KIND_Q3_K, n, s, 1, w, 0, a);
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
    X86_FN(set_tile)(&ops[CERA_TYPE_Q2_K], X86_FN(tile_q2_k), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_Q3_K], X86_FN(tile_q3_k), TILE_R, TILE_C);
    ops[CERA_TYPE_Q3_K].vec_dot = X86_FN(dot_q3_k_q8_k);
    X86_FN(set_tile)(&ops[CERA_TYPE_Q4_K], X86_FN(tile_q4_k), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_Q5_K], X86_FN(tile_q5_k), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_Q6_K], X86_FN(tile_q6_k), TILE_R, TILE_C);
    X86_FN(set_tile)(&ops[CERA_TYPE_IQ4_XS], X86_FN(tile_iq4_xs), TILE_R, TILE_C);
}

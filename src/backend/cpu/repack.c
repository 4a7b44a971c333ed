/*
 * repack.c — weights repacked at backend open into the 16-row interleaved layout (repack.h):
 * the choice of weights, the copies' life (built at open, kept in the backend's set, freed with
 * the backend), the per-row activation terms, and the scalar reference of the packed tile that
 * the SIMD tiles (x86/repack_*.c) are tested against.
 */
#include "backend/cpu/repack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tensor/blocks.h"

bool cera_pack_type_ok(cera_type t) {
    return t == CERA_TYPE_Q4_0 || t == CERA_TYPE_Q4_1 || t == CERA_TYPE_Q5_0 || t == CERA_TYPE_Q5_1 ||
           t == CERA_TYPE_Q8_0 || t == CERA_TYPE_IQ4_NL || t == CERA_TYPE_Q4_K;
}

size_t cera_packed_aux_size(cera_type t, int64_t k) {
    switch (t) {
    case CERA_TYPE_Q4_0:
    case CERA_TYPE_IQ4_NL: return (size_t)(k / QK8_0) * sizeof(cera_pack_aux_q4_0);
    case CERA_TYPE_Q4_1:
    case CERA_TYPE_Q5_1: return (size_t)(k / QK8_1) * sizeof(cera_pack_aux_q4_1);
    case CERA_TYPE_Q5_0:
    case CERA_TYPE_Q8_0: return (size_t)(k / QK8_0) * sizeof(cera_pack_aux_q8_0);
    case CERA_TYPE_Q4_K: return (size_t)(k / QK_K) * sizeof(cera_pack_aux_q4_k);
    default: return 0;
    }
}

void cera_packed_prep(cera_type t, const void *act_row, void *aux_row, int64_t k) {
    if (t == CERA_TYPE_Q4_0 || t == CERA_TYPE_IQ4_NL) {
        const block_q8_0 *y = act_row;
        cera_pack_aux_q4_0 *o = aux_row;
        const int32_t off = t == CERA_TYPE_Q4_0 ? 8 : 128;
        for (int64_t b = 0; b < k / QK8_0; b++) {
            int32_t sum = 0;
            for (int j = 0; j < QK8_0; j++) sum += y[b].qs[j];
            o[b].corr = -off * sum;
            o[b].d = cera_f16_to_f32(y[b].d);
        }
    } else if (t == CERA_TYPE_Q4_1 || t == CERA_TYPE_Q5_1) {
        const block_q8_1 *y = act_row;
        cera_pack_aux_q4_1 *o = aux_row;
        for (int64_t b = 0; b < k / QK8_1; b++) {
            o[b].d = cera_f16_to_f32(y[b].d);
            o[b].s = cera_f16_to_f32(y[b].s);
        }
    } else if (t == CERA_TYPE_Q8_0 || t == CERA_TYPE_Q5_0) {
        const block_q8_0 *y = act_row;
        cera_pack_aux_q8_0 *o = aux_row;
        const int32_t off = t == CERA_TYPE_Q8_0 ? 128 : 16;
        for (int64_t b = 0; b < k / QK8_0; b++) {
            for (int l = 0; l < 8; l++)
                o[b].corr[l] =
                    -off * (y[b].qs[4 * l] + y[b].qs[4 * l + 1] + y[b].qs[4 * l + 2] + y[b].qs[4 * l + 3]);
            o[b].d = cera_f16_to_f32(y[b].d);
        }
    } else if (t == CERA_TYPE_Q4_K) {
        const block_q8_k *y = act_row;
        cera_pack_aux_q4_k *o = aux_row;
        for (int64_t b = 0; b < k / QK_K; b++) {
            o[b].d = y[b].d;
            for (int j = 0; j < 8; j++) o[b].bs[j] = (int16_t)(y[b].bsums[2 * j] + y[b].bsums[2 * j + 1]);
        }
    }
}

size_t cera_pack_group_bytes(cera_type t, int64_t k) {
    if (t == CERA_TYPE_Q4_K) return (size_t)(k / QK_K) * CERA_PACK_Q4_K_UNIT;
    return (size_t)((k / 32 + 1) / 2) * cera_pack_unit_bytes(t);
}

/* Every packed type's block starts with the scale d; Q4_1/Q5_1 have the minimum m next, Q5_0/Q5_1
 * then the 4 bytes of fifth bits, and the quants last. */
static void repack_q4_k_x16(const void *rows, size_t w_stride, int64_t k, void *dst) {
    for (int64_t b = 0; b < k / QK_K; b++) {
        uint8_t *u = (uint8_t *)cera_pack_q4_k_unit(dst, b);
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            const block_q4_k *x = (const block_q4_k *)((const uint8_t *)rows + (size_t)r * w_stride) + b;
            memcpy(u + 2 * r, &x->d, 2);
            memcpy(u + 32 + 2 * r, &x->dmin, 2);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, mn;
                k_scale_min(j, x->scales, &sc, &mn);
                u[CERA_PACK_Q4_K_SC + 16 * j + r] = sc;
                u[CERA_PACK_Q4_K_MN + 32 * (j / 2) + 2 * r + (j & 1)] = mn;
            }
            for (int i = 0; i < 32; i++) memcpy(u + CERA_PACK_Q4_K_QS + 64 * i + 4 * r, x->qs + 4 * i, 4);
        }
    }
}

void cera_repack_x16(cera_type t, const void *rows, size_t w_stride, int64_t k, void *dst) {
    if (t == CERA_TYPE_Q4_K) {
        repack_q4_k_x16(rows, w_stride, k, dst);
        return;
    }
    const int64_t nb = k / 32;
    const size_t bsz = cera_row_size(t, 32);
    const size_t qh_off = 2 * (size_t)cera_pack_fields(t), qh = cera_pack_qh_bytes(t) ? 4 : 0;
    const size_t qs_off = qh_off + qh;
    const int words = t == CERA_TYPE_Q8_0 ? 8 : 4; /* 4-byte words of quants per row and block */
    if (nb & 1)                                    /* the padding half of the last unit */
        memset((uint8_t *)dst + (size_t)(nb / 2) * cera_pack_unit_bytes(t), 0, cera_pack_unit_bytes(t));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *qs = (uint8_t *)cera_pack_qs(dst, t, b);
        cera_f16 *d = (cera_f16 *)cera_pack_d(dst, t, b);
        cera_f16 *m = cera_pack_fields(t) == 2 ? (cera_f16 *)cera_pack_m(dst, t, b) : NULL;
        uint8_t *h = qh ? (uint8_t *)cera_pack_qh(dst, t, b) : NULL;
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            const uint8_t *blk = (const uint8_t *)rows + (size_t)r * w_stride + (size_t)b * bsz;
            memcpy(&d[r], blk, 2);
            if (m) memcpy(&m[r], blk + 2, 2);
            if (h) memcpy(h + 4 * r, blk + qh_off, 4);
            for (int i = 0; i < words; i++) memcpy(qs + 64 * i + 4 * r, blk + qs_off + 4 * i, 4);
            if (t == CERA_TYPE_Q8_0)
                for (int i = 0; i < words; i++)
                    for (int j = 0; j < 4; j++) qs[64 * i + 4 * r + j] ^= 0x80;
        }
    }
}

/* The 4-element integer dot of word l of row r in a packed nibble block (l < 4: low nibbles of
 * vector l, l >= 4: high nibbles of vector l - 4, i.e. elements 4l..4l+3) with its activations. */
static int32_t word_dot(const uint8_t *qs, const int8_t *y, int r, int l) {
    int32_t p = 0;
    for (int j = 0; j < 4; j++) {
        const uint8_t q = qs[64 * (l & 3) + 4 * r + j];
        p += (l < 4 ? q & 0x0F : q >> 4) * y[4 * l + j];
    }
    return p;
}

/* The same for Q5_0/Q5_1: element e = 4l + j takes bit e of row r's qh word as its bit 4. */
static int32_t word_dot5(const uint8_t *qs, const uint8_t *qh, const int8_t *y, int r, int l) {
    uint32_t bits;
    memcpy(&bits, qh + 4 * r, 4);
    int32_t p = 0;
    for (int j = 0; j < 4; j++) {
        const uint8_t q = qs[64 * (l & 3) + 4 * r + j];
        const int e = 4 * l + j;
        p += ((l < 4 ? q & 0x0F : q >> 4) | (int)((bits >> e) & 1) << 4) * y[e];
    }
    return p;
}

/* The same for IQ4_NL, whose nibbles index kvalues_iq4nl; the value + 128 (unsigned, as the
 * VNNI tile multiplies it; the prep's -128 * sum(y) takes the offset out again). */
static int32_t word_dot_iq4(const uint8_t *qs, const int8_t *y, int r, int l) {
    int32_t p = 0;
    for (int j = 0; j < 4; j++) {
        const uint8_t q = qs[64 * (l & 3) + 4 * r + j];
        p += (kvalues_iq4nl[l < 4 ? q & 0x0F : q >> 4] + 128) * y[4 * l + j];
    }
    return p;
}

/* Q4_0 and IQ4_NL: the serial chain of per-block FMAs (repack.h). */
static void tile_chain_ref(bool iq4, int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                           size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK4_0;
    for (int c = 0; c < nc; c++) {
        const block_q8_0 *y = (const block_q8_0 *)((const uint8_t *)a + (size_t)c * a_stride);
        const cera_pack_aux_q4_0 *ax =
            (const cera_pack_aux_q4_0 *)((const uint8_t *)aux + (size_t)c * aux_stride);
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int32_t isum = ax[b].corr;
                for (int l = 0; l < 8; l++)
                    isum +=
                        (iq4 ? word_dot_iq4 : word_dot)(cera_pack_qs(w, CERA_TYPE_Q4_0, b), y[b].qs, r, l);
                const float dx = cera_f16_to_f32(cera_pack_d(w, CERA_TYPE_Q4_0, b)[r]);
                acc = fmaf((float)isum, dx * ax[b].d, acc);
            }
            s[(size_t)c * s_stride + r] = acc;
        }
    }
}

static void cera_packed_tile_q4_0_ref(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                      size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    tile_chain_ref(false, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}

static void cera_packed_tile_iq4_nl_ref(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                        size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    tile_chain_ref(true, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}

/* The end of the 8-partial order (Q4_1, Q8_0): llama.cpp's horizontal sum of 8 lanes. */
static float hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* Q4_1 and Q5_1 (five): 8 word partials and the minimum sum, llama.cpp's vec_dot order. */
static void tile_min_ref(bool five, int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                         size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const cera_type t = five ? CERA_TYPE_Q5_1 : CERA_TYPE_Q4_1;
    const int64_t nb = n / QK4_1;
    for (int c = 0; c < nc; c++) {
        const block_q8_1 *y = (const block_q8_1 *)((const uint8_t *)a + (size_t)c * a_stride);
        const cera_pack_aux_q4_1 *ax =
            (const cera_pack_aux_q4_1 *)((const uint8_t *)aux + (size_t)c * aux_stride);
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            float acc[8] = {0}, summs = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const float dx = cera_f16_to_f32(cera_pack_d(w, t, b)[r]);
                const float mx = cera_f16_to_f32(cera_pack_m(w, t, b)[r]);
                summs = fmaf(mx, ax[b].s, summs); /* the product is exact: the same as summs += mx * s */
                for (int l = 0; l < 8; l++) {
                    const int32_t p =
                        five ? word_dot5(cera_pack_qs(w, t, b), cera_pack_qh(w, t, b), y[b].qs, r, l)
                             : word_dot(cera_pack_qs(w, t, b), y[b].qs, r, l);
                    acc[l] = fmaf(dx * ax[b].d, (float)p, acc[l]);
                }
            }
            s[(size_t)c * s_stride + r] = hsum8(acc) + summs;
        }
    }
}

static void cera_packed_tile_q4_1_ref(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                      size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    tile_min_ref(false, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}

static void cera_packed_tile_q5_1_ref(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                      size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    tile_min_ref(true, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}

/* The 4-element integer dot of word l of row r in a packed Q8_0 block (stored x + 128). */
static int32_t word_dot8(const uint8_t *qs, const int8_t *y, int r, int l) {
    int32_t p = 0;
    for (int j = 0; j < 4; j++) p += qs[64 * l + 4 * r + j] * y[4 * l + j];
    return p;
}

/* Q5_0 and Q8_0: 8 word partials, each starting from its offset correction (repack.h). */
static void tile_corr_ref(cera_type t, int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                          size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK8_0;
    for (int c = 0; c < nc; c++) {
        const block_q8_0 *y = (const block_q8_0 *)((const uint8_t *)a + (size_t)c * a_stride);
        const cera_pack_aux_q8_0 *ax =
            (const cera_pack_aux_q8_0 *)((const uint8_t *)aux + (size_t)c * aux_stride);
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            float acc[8] = {0};
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *qs = cera_pack_qs(w, t, b);
                const float d = cera_f16_to_f32(cera_pack_d(w, t, b)[r]) * ax[b].d;
                for (int l = 0; l < 8; l++) {
                    const int32_t p =
                        ax[b].corr[l] + (t == CERA_TYPE_Q5_0
                                             ? word_dot5(qs, cera_pack_qh(w, t, b), y[b].qs, r, l)
                                             : word_dot8(qs, y[b].qs, r, l));
                    acc[l] = fmaf((float)p, d, acc[l]);
                }
            }
            s[(size_t)c * s_stride + r] = hsum8(acc) + 0.0f; /* as the tile's (no minimums) */
        }
    }
}

static void cera_packed_tile_q5_0_ref(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                      size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    tile_corr_ref(CERA_TYPE_Q5_0, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}

static void cera_packed_tile_q8_0_ref(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                      size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    tile_corr_ref(CERA_TYPE_Q8_0, n, s, s_stride, w, a, a_stride, aux, aux_stride, nc);
}

/* Q4_K: the exact per-super-block integers, then two serial float chains (repack.h). */
static void cera_packed_tile_q4_k_ref(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                      size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK_K;
    for (int c = 0; c < nc; c++) {
        const block_q8_k *y = (const block_q8_k *)((const uint8_t *)a + (size_t)c * a_stride);
        const cera_pack_aux_q4_k *ax =
            (const cera_pack_aux_q4_k *)((const uint8_t *)aux + (size_t)c * aux_stride);
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            float acc = 0.0f, accm = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *u = cera_pack_q4_k_unit(w, b);
                int32_t isum = 0, imin = 0;
                for (int j = 0; j < 8; j++) {
                    int32_t p = 0;
                    for (int l = 0; l < 8; l++)
                        for (int e = 0; e < 4; e++) {
                            const uint8_t q = u[CERA_PACK_Q4_K_QS + 64 * (8 * (j / 2) + l) + 4 * r + e];
                            p += ((j & 1) ? q >> 4 : q & 0x0F) * y[b].qs[32 * j + 4 * l + e];
                        }
                    isum += u[CERA_PACK_Q4_K_SC + 16 * j + r] * p;
                    imin += u[CERA_PACK_Q4_K_MN + 32 * (j / 2) + 2 * r + (j & 1)] * ax[b].bs[j];
                }
                cera_f16 dx, dm;
                memcpy(&dx, u + 2 * r, 2);
                memcpy(&dm, u + 32 + 2 * r, 2);
                acc = fmaf((float)isum, cera_f16_to_f32(dx) * ax[b].d, acc);
                accm = fmaf((float)imin, cera_f16_to_f32(dm) * ax[b].d, accm);
            }
            s[(size_t)c * s_stride + r] = acc - accm;
        }
    }
}

cera_packed_tile_fn cera_packed_tile_ref(cera_type t) {
    switch (t) {
    case CERA_TYPE_Q4_0: return cera_packed_tile_q4_0_ref;
    case CERA_TYPE_Q4_1: return cera_packed_tile_q4_1_ref;
    case CERA_TYPE_Q8_0: return cera_packed_tile_q8_0_ref;
    case CERA_TYPE_IQ4_NL: return cera_packed_tile_iq4_nl_ref;
    case CERA_TYPE_Q5_0: return cera_packed_tile_q5_0_ref;
    case CERA_TYPE_Q5_1: return cera_packed_tile_q5_1_ref;
    case CERA_TYPE_Q4_K: return cera_packed_tile_q4_k_ref;
    default: return NULL;
    }
}

/* Copies are big and streamed once per token: on 2 MiB pages where the kernel allows (as the
 * page cache often maps the GGUF file), so a decode step does not walk the page tables every
 * 4 KiB. Measured (tinyllama-1.1b Q4_0 tg32, 1 thread, same minutes): 44-46 t/s against 40-42
 * on 4 KiB pages; the cost is at open (the kernel finds and zeroes 2 MiB pages: ~0.4-1 s of
 * system time for this 0.6 GB model, shared by the pool's threads). */
static void *alloc_huge(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    if (bytes >= huge) {
        const size_t rounded = (bytes + huge - 1) & ~(huge - 1);
        void *p = aligned_alloc(huge, rounded);
#if defined(MADV_HUGEPAGE)
        if (p) madvise(p, rounded, MADV_HUGEPAGE);
#endif
        if (p) return p;
    }
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static bool repack_enabled(void) {
    const char *e = getenv("CERA_CPU_REPACK");
    return !(e && !strcmp(e, "0"));
}

bool cera_packed_wanted(const cera_weight *w) {
    if (!w->data || !cera_pack_type_ok(w->type)) return false;
    const cera_cpu_type_ops *ops = cera_cpu_ops(w->type);
    if (!ops || !ops->packed_tile) return false;
    return w->n > 0 && w->n % CERA_PACK_ROWS == 0 && w->k > 0 && w->k % 32 == 0 && repack_enabled();
}

typedef struct repack_job {
    const cera_weight *w;
    cera_packed_weight *p;
    size_t w_stride;
} repack_job;

static void repack_group(void *arg, int64_t g, int ith) {
    (void)ith;
    const repack_job *j = arg;
    cera_repack_x16(j->w->type, (const uint8_t *)j->w->data + (size_t)g * CERA_PACK_ROWS * j->w_stride,
                    j->w_stride, j->w->k, (uint8_t *)j->p->data + (size_t)g * j->p->group_bytes);
}

cera_status cera_packed_new(const cera_weight *w, cera_pool *pool, cera_packed_weight **out,
                            cera_error *err) {
    *out = NULL;
    const cera_cpu_type_ops *ops = cera_cpu_ops(w->type);
    cera_packed_weight *p = calloc(1, sizeof *p);
    if (!p) return cera_fail(err, CERA_ERR_NO_MEMORY, "repacked weight");
    p->type = w->type;
    p->n = w->n;
    p->k = w->k;
    p->group_bytes = cera_pack_group_bytes(w->type, w->k);
    p->tile = ops->packed_tile;
    p->tile_cols = ops->packed_cols;
    const size_t bytes = p->group_bytes * (size_t)(w->n / CERA_PACK_ROWS);
    p->data = alloc_huge(bytes);
    if (!p->data) {
        free(p);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "repacked copy of a %lld x %lld weight (%zu bytes)",
                         (long long)w->n, (long long)w->k, bytes);
    }
    repack_job j = {w, p, cera_row_size(w->type, w->k)};
    if (pool) /* the threads also share the first touch (zeroing) of the new pages */
        cera_pool_for(pool, w->n / CERA_PACK_ROWS, repack_group, &j);
    else
        for (int64_t g = 0; g < w->n / CERA_PACK_ROWS; g++) repack_group(&j, g, 0);
    *out = p;
    return CERA_OK;
}

void cera_packed_free(cera_packed_weight *p) {
    if (!p) return;
    free(p->data);
    free(p);
}

struct cera_packed_set {
    int count;
    struct {
        const cera_weight *w;
        cera_packed_weight *pk;
    } e[];
};

/* The model's matrices: every layer's projections, the output, then each MoE layer's router
 * and experts (cera_experts_matrix order). */
static const cera_weight *model_weight(const cera_model *m, int i) {
    const int np = CERA_PROJ_COUNT;
    if (i < m->hp.n_layer * np) return &m->layers[i / np].proj[i % np];
    if (i == m->hp.n_layer * np) return &m->output;
    i -= m->hp.n_layer * np + 1;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const cera_experts *x = &m->layers[l].moe;
        const int n = x->n_expert ? 3 * x->n_expert + 1 : 0;
        if (i < n) return cera_experts_matrix(x, i);
        i -= n;
    }
    return NULL;
}

cera_status cera_cpu_repack_model(const cera_model *m, cera_pool *pool, cera_packed_set **out,
                                  cera_error *err) {
    *out = NULL;
    int total = m->hp.n_layer * CERA_PROJ_COUNT + 1;
    for (int l = 0; l < m->hp.n_layer; l++)
        total += m->layers[l].moe.n_expert ? 3 * m->layers[l].moe.n_expert + 1 : 0;
    cera_packed_set *set = calloc(1, sizeof *set + (size_t)total * sizeof set->e[0]);
    if (!set) return cera_fail(err, CERA_ERR_NO_MEMORY, "repacked weights");
    for (int i = 0; i < total; i++) {
        const cera_weight *w = model_weight(m, i);
        if (!cera_packed_wanted(w)) continue;
        cera_packed_weight *p;
        const cera_status st = cera_packed_new(w, pool, &p, err);
        if (st) {
            cera_cpu_repack_free(set);
            return st;
        }
        set->e[set->count].w = w;
        set->e[set->count++].pk = p;
    }
    *out = set;
    return CERA_OK;
}

const cera_packed_weight *cera_packed_find(const cera_packed_set *set, const cera_weight *w) {
    for (int i = 0; set && i < set->count; i++)
        if (set->e[i].w == w) return set->e[i].pk;
    return NULL;
}

void cera_cpu_repack_free(cera_packed_set *set) {
    if (!set) return;
    for (int i = 0; i < set->count; i++) cera_packed_free(set->e[i].pk);
    free(set);
}

/* matmul.c — the CPU matmul driver (see matmul.h). */
#include "backend/cpu/matmul.h"

#include "backend/cpu/repack.h"
#include "core/error.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ROW_CHUNK     32  /* weight rows per work item (a multiple of 16: packed groups) */
#define TOKEN_CHUNK   32  /* activation rows per work item */
#define FLOAT_CHUNK   256 /* the same for float weights (F32, F16, BF16) */
#define DECODE_CHUNKS 4   /* work items per thread for a single token */

size_t cera_matmul_scratch_size(cera_type t, int64_t k, int n_tokens) {
    const cera_cpu_type_ops *ops = cera_cpu_ops(t);
    if (!ops) return 0;
    /* + a repacked weight's per-row activation terms, 64-byte aligned after the rows */
    const size_t aux = cera_packed_aux_size(t, k);
    return cera_row_size(ops->act_type, k) * (size_t)n_tokens + (aux ? 64 + aux * (size_t)n_tokens : 0);
}

typedef struct mm_job {
    const cera_weight *w;
    const cera_cpu_type_ops *ops;
    const float *x;
    int n_tokens;
    float *y;
    size_t ldy;
    const uint8_t *act; /* activation rows in act_type */
    uint8_t *act_out;   /* where the quantize step writes them */
    size_t act_stride, w_stride;
    int64_t row_chunk; /* weight rows per work item (a multiple of 16) */
    int64_t n_row_chunks, n_tok_chunks;
    int tok_chunk;                /* activation rows per work item */
    bool rowdot_one;              /* a single token takes vec_dot */
    const cera_matmul_hook *hook; /* or NULL */
    int64_t n_pre;                /* the hook's pre chunks, numbered first */
    _Atomic int64_t pre_done;     /* pre chunks finished */
    int64_t n_post;               /* the hook's post chunks, numbered last */
    _Atomic int64_t tiles_done;   /* tiles finished (counted only with post chunks) */
    const cera_packed_weight *pk; /* the weight's repacked copy (repack.h), or NULL */
    uint8_t *aux;                 /* with pk: per activation row, cera_packed_prep's terms */
    size_t aux_stride;
} mm_job;

static void quantize_row(void *arg, int64_t t, int ith) {
    mm_job *j = arg;
    j->ops->quantize_act(j->x + (size_t)t * j->w->k, j->act_out + (size_t)t * j->act_stride, j->w->k);
    if (j->pk)
        cera_packed_prep(j->pk->type, j->act_out + (size_t)t * j->act_stride,
                         j->aux + (size_t)t * j->aux_stride, j->w->k);
}

/* Per weight type: does a single token take the row dot rather than a one-column tile?
 * A decode step must round exactly as the same token inside a prompt batch, and the row
 * dot is the fast kernel for one token; so it is used where it agrees bit for bit with
 * the tile, as cera_matmul_prepare checks on a weight's own rows. A failed check sticks:
 * one weight whose rows disagree keeps the whole type on the tile, which is always
 * consistent. Wide hardware tiles (AMX: 32 columns) would waste most of their work on one
 * token, so there the row dot is always used. */
static _Atomic int rowdot_ok[CERA_TYPE_COUNT]; /* 0 unchecked, 1 yes, -1 no */

static bool use_rowdot_for_one(cera_type t, const cera_cpu_type_ops *ops) {
    if (!ops->gemm_tile || ops->tile_cols > 8) return true;
    return atomic_load_explicit(&rowdot_ok[t], memory_order_relaxed) == 1;
}

cera_status cera_matmul_prepare(const cera_weight *w, cera_error *err) {
    const cera_cpu_type_ops *ops = cera_cpu_ops(w->type);
    if (!ops || !ops->gemm_tile || ops->tile_cols > 8 || atomic_load(&rowdot_ok[w->type]) != 0)
        return CERA_OK;
    const size_t w_stride = cera_row_size(w->type, w->k), a_stride = cera_row_size(ops->act_type, w->k);
    float *x = malloc((size_t)w->k * sizeof(float));
    void *a = malloc(a_stride);
    if (!x || !a) {
        free(x);
        free(a);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "matmul check");
    }
    /* pseudo-random activations in [-1, 1) against up to 32 weight rows, three times */
    uint32_t state = 12345;
    int ok = 1;
    for (int trial = 0; trial < 3 && ok; trial++) {
        for (int64_t i = 0; i < w->k; i++) {
            state = state * 1664525u + 1013904223u;
            x[i] = (float)((int32_t)state >> 8) * 0x1p-23f;
        }
        ops->quantize_act(x, a, w->k);
        for (int64_t r = 0; r < w->n && r < 32 && ok; r++) {
            const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * w_stride;
            float d = 0, t = 0;
            ops->vec_dot(w->k, &d, wr, a);
            ops->gemm_tile(w->k, &t, 1, wr, w_stride, a, a_stride, 1, 1);
            ok = memcmp(&d, &t, sizeof d) == 0;
        }
    }
    free(x);
    free(a);
    if (!ok) {
        atomic_store(&rowdot_ok[w->type], -1);
    } else {
        int unchecked = 0; /* a failure recorded meanwhile by another engine's open stays */
        atomic_compare_exchange_strong(&rowdot_ok[w->type], &unchecked, 1);
    }
    return CERA_OK;
}

static void compute_chunk(const mm_job *j, int64_t r0, int64_t r1, int t0, int t1) {
    const cera_cpu_type_ops *ops = j->ops;
    const uint8_t *wd = j->w->data;
    const int64_t k = j->w->k;
    if (j->pk) { /* 16-row groups; every chunk starts on a group (ROW_CHUNK is a multiple of 16) */
        const cera_packed_weight *pk = j->pk;
        for (int64_t r = r0; r < r1; r += CERA_PACK_ROWS)
            for (int t = t0; t < t1; t += pk->tile_cols) {
                const int nc = t1 - t < pk->tile_cols ? t1 - t : pk->tile_cols;
                pk->tile(k, j->y + (size_t)t * j->ldy + r, j->ldy,
                         (const uint8_t *)pk->data + (size_t)(r / CERA_PACK_ROWS) * pk->group_bytes,
                         j->act + (size_t)t * j->act_stride, j->act_stride,
                         j->aux + (size_t)t * j->aux_stride, j->aux_stride, nc);
            }
        return;
    }
    if (ops->gemm_tile && (t1 - t0 > 1 || !j->rowdot_one)) {
        /* a tile's activation rows stay in L1 while the chunk's weight rows pass them (from L2) */
        for (int t = t0; t < t1; t += ops->tile_cols) {
            const int nc = t1 - t < ops->tile_cols ? t1 - t : ops->tile_cols;
            for (int64_t r = r0; r < r1; r += ops->tile_rows) {
                const int nr = (int)(r1 - r < ops->tile_rows ? r1 - r : ops->tile_rows);
                ops->gemm_tile(k, j->y + (size_t)t * j->ldy + r, j->ldy, wd + (size_t)r * j->w_stride,
                               j->w_stride, j->act + (size_t)t * j->act_stride, j->act_stride, nr, nc);
            }
        }
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = wd + (size_t)r * j->w_stride;
        for (int t = t0; t < t1; t++)
            ops->vec_dot(k, j->y + (size_t)t * j->ldy + r, wr, j->act + (size_t)t * j->act_stride);
    }
}

/* One round of a wait for other threads' chunks: the CPU's pause hint at first (it leaves
 * the core's resources to an SMT sibling that may be running the awaited chunk), then
 * yielding the core to them (a busy machine may have preempted them). */
static inline void wait_round(int i) {
    if (i >= 64) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* A tile's hook waits for the pre chunks, all claimed already by running threads (the
 * pool hands chunks out in order). */
static void wait_pre(mm_job *j) {
    for (int i = 0; atomic_load_explicit(&j->pre_done, memory_order_acquire) < j->n_pre; i++) wait_round(i);
}

/* The same for a post chunk: every tile is claimed before it, so it waits for running ones. */
static void wait_tiles(mm_job *j) {
    const int64_t n = j->n_row_chunks * j->n_tok_chunks;
    for (int i = 0; atomic_load_explicit(&j->tiles_done, memory_order_acquire) < n; i++) wait_round(i);
}

static void compute(void *arg, int64_t c, int ith) {
    mm_job *j = arg;
    if (c < j->n_pre) {
        j->hook->pre(j->hook->arg, c, ith);
        atomic_fetch_add_explicit(&j->pre_done, 1, memory_order_release);
        return;
    }
    c -= j->n_pre;
    if (c >= j->n_row_chunks * j->n_tok_chunks) {
        wait_pre(j);
        wait_tiles(j);
        j->hook->post(j->hook->arg, c - j->n_row_chunks * j->n_tok_chunks, ith);
        return;
    }
    const int64_t rows = j->w->n;
    const int64_t rc = c % j->n_row_chunks, tc = c / j->n_row_chunks;
    const int64_t r0 = rc * j->row_chunk, r1 = r0 + j->row_chunk < rows ? r0 + j->row_chunk : rows;
    const int t0 = (int)tc * j->tok_chunk;
    const int t1 = t0 + j->tok_chunk < j->n_tokens ? t0 + j->tok_chunk : j->n_tokens;
    compute_chunk(j, r0, r1, t0, t1);
    if (j->hook && j->hook->tile) {
        wait_pre(j);
        j->hook->tile(j->hook->arg, r0, r1, t0, t1, ith);
    }
    if (j->n_post) atomic_fetch_add_explicit(&j->tiles_done, 1, memory_order_release);
}

void cera_matmul(cera_pool *pool, const cera_weight *w, const cera_cpu_type_ops *ops, const float *x,
                 int n_tokens, float *y, size_t ldy, void *act) {
    cera_matmul_ex(pool, w, NULL, ops, x, n_tokens, y, ldy, act, NULL);
}

void cera_matmul_ex(cera_pool *pool, const cera_weight *w, const cera_packed_weight *pk,
                    const cera_cpu_type_ops *ops, const float *x, int n_tokens, float *y, size_t ldy,
                    void *act, const cera_matmul_hook *hook) {
    mm_job j = {
        .w = w,
        .ops = ops,
        .x = x,
        .n_tokens = n_tokens,
        .y = y,
        .ldy = ldy,
        .act_stride = cera_row_size(ops->act_type, w->k),
        .w_stride = cera_row_size(w->type, w->k),
        .hook = hook,
        .n_pre = hook ? hook->n_pre : 0,
        .n_post = hook ? hook->n_post : 0,
    };
    atomic_init(&j.pre_done, 0);
    atomic_init(&j.tiles_done, 0);
    if (ops->act_type == CERA_TYPE_F32) {
        j.act = (const uint8_t *)x; /* F32 weights read the activations as they are */
    } else {
        j.act_out = act;
        j.act = act;
        if (pk && ops->packed_tile) {
            j.pk = pk;
            j.aux_stride = cera_packed_aux_size(w->type, w->k);
            const size_t rows = j.act_stride * (size_t)n_tokens;
            j.aux = (uint8_t *)act + ((rows + 63) & ~(size_t)63);
        }
        cera_pool_for(pool, n_tokens, quantize_row, &j);
    }
    j.rowdot_one = use_rowdot_for_one(w->type, ops);
    /* A single token (a decode step) reads each weight row once: a thread takes long runs of
     * consecutive rows (about DECODE_CHUNKS per thread), so its reads are one sequential stream
     * for the prefetcher and it claims few chunks (measured on SmolLM2 decode, 2 threads:
     * bench/RESULTS.md). Batches keep ROW_CHUNK. */
    j.row_chunk = ROW_CHUNK;
    if (n_tokens == 1) {
        const int64_t parts = (int64_t)DECODE_CHUNKS * cera_pool_size(pool);
        const int64_t rc = ((w->n + parts - 1) / parts + 15) / 16 * 16;
        if (rc > j.row_chunk) j.row_chunk = rc;
    }
    j.n_row_chunks = (w->n + j.row_chunk - 1) / j.row_chunk;
    /* A prompt's float weights are read again for every chunk of tokens, from memory (a float
     * projection is larger than the caches): long chunks read them fewer times (measured in
     * bench/RESULTS.md, the CPU section). The quantized types keep short chunks (measured no
     * better with longer ones). */
    j.tok_chunk = w->type == CERA_TYPE_F32 || w->type == CERA_TYPE_F16 || w->type == CERA_TYPE_BF16
                      ? FLOAT_CHUNK
                      : TOKEN_CHUNK;
    j.n_tok_chunks = (n_tokens + j.tok_chunk - 1) / j.tok_chunk;
    cera_pool_for(pool, j.n_pre + j.n_row_chunks * j.n_tok_chunks + j.n_post, compute, &j);
}

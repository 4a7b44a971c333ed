/*
 * lora.c — the CPU backend's LoRA hook (see lora.h), fused into the projection's
 * matmul job (forward.c, proj_matmul) through cera_matmul_ex's hook.
 *
 * The two products are computed with the CPU table's F32 kernels (the register tile, or
 * the row dot where a type has no tile), exactly as cera_matmul computes an F32 weight:
 * llama.cpp applies an adapter as two F32 matmuls (ggml_mul_mat(b, ggml_mul_mat(a, x))),
 * then scales and adds, so an engine whose F32 matmul rounds as llama.cpp's gives the same
 * adapter contribution bit for bit. By default (form 2 of lora.h), inside the matmul's
 * one pool job:
 *   - pre chunks (handed out first): t = A·x for every group's rows, into the plan's
 *     scratch, in items of (a few A rows) x (a few batch rows);
 *   - the matmul's tiles;
 *   - post chunks (handed out last, each waiting for the tiles): y += (B·t)·s over long
 *     contiguous runs of output columns, for all rows.
 * Form 1 adds B·t on each tile as it finishes instead; form 0 runs the same pre and post
 * work as two pool jobs after the matmul. Before, the hook always ran its own pool job(s)
 * after each matmul (one or two per projection: 128 extra per decoded token of a 16-layer
 * model, each a wake-up and a wait for the slowest thread); fused there are none.
 * Each element is computed by the same kernel calls whatever the split, the batch or the
 * thread count (the F32 tile gives each output the same bits whatever nr and nc), so
 * prefill equals decode and a mixed batch equals its sequences run alone, bit for bit.
 */
#include "backend/cpu/lora.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Multiply-adds an A·x pre chunk should have at least (its claim costs an atomic). */
#define PRE_MIN_WORK  4096
#define MAX_TILE_ROWS 64
#define MAX_TILE_COLS 8

/* out[c * out_stride + i] = dot(w row i, a row c) for i < nr (<= j->tr) and c < nc (<= j->tc);
 * w rows hold k floats, a rows are a_stride floats apart: the F32 tile, as cera_matmul
 * computes it (each element the same whatever nr and nc). */
static void dot_tile(const cera_lora_cpu_job *j, int64_t k, float *out, size_t out_stride, const float *w,
                     int nr, const float *a, size_t a_stride, int nc) {
    if (j->ops->gemm_tile) {
        j->ops->gemm_tile(k, out, out_stride, w, (size_t)k * sizeof(float), a, a_stride * sizeof(float), nr,
                          nc);
        return;
    }
    for (int c = 0; c < nc; c++)
        for (int i = 0; i < nr; i++)
            j->ops->vec_dot(k, &out[c * out_stride + i], w + (size_t)i * k, a + c * a_stride);
}

/* Whether B·t may take cera_lora_bt16_avx512 (16 outputs' reduction trees side by side):
 * where the CPU has AVX-512 and the kernel gives the selected F32 tile's bits, which a
 * check on pseudo-random factors (every tail length, one to three 16-lane chunks, several
 * row counts, every column count) decides once per process. 0 unknown, 1 yes, -1 no. */
static _Atomic int bt16_state;

#if defined(__x86_64__) /* the kernel is built on x86-64 only (backend/cpu/x86) */
#define HAVE_BT16 1
static bool bt16_check(const cera_cpu_type_ops *ops) {
    if (!ops->gemm_tile || !cera_cpu_tier_available("avx512")) return false;
    enum { N = 48 };
    float *b = malloc(16 * N * sizeof(float)), *t = malloc(4 * N * sizeof(float));
    bool ok = b && t;
    uint32_t state = 2024;
    for (int i = 0; ok && i < 16 * N; i++) {
        state = state * 1664525u + 1013904223u;
        b[i] = (float)((int32_t)state >> 8) * 0x1p-23f;
        if (i < 4 * N) t[i] = (float)((int32_t)(state * 747796405u) >> 8) * 0x1p-20f;
    }
    for (int n = 1; ok && n <= N; n++)
        for (int nr = 1; ok && nr <= 16; nr += nr < 4 ? 1 : 5)
            for (int nc = 1; ok && nc <= 4 && nc <= ops->tile_cols; nc++) {
                float u[4 * 16], v[4 * 16];
                cera_lora_bt16_avx512(n, u, 16, b, nr, t, N, nc);
                for (int r0 = 0; r0 < nr; r0 += ops->tile_rows) {
                    const int m = nr - r0 < ops->tile_rows ? nr - r0 : ops->tile_rows;
                    ops->gemm_tile(n, v + r0, 16, b + (size_t)r0 * n, (size_t)n * sizeof(float), t,
                                   N * sizeof(float), m, nc);
                }
                for (int c = 0; c < nc; c++)
                    ok = ok && !memcmp(u + 16 * c, v + 16 * c, (size_t)nr * sizeof(float));
            }
    free(b);
    free(t);
    return ok;
}
#else
#define HAVE_BT16 0
static bool bt16_check(const cera_cpu_type_ops *ops) {
    (void)ops;
    return false;
}
#endif

static bool use_bt16(const cera_cpu_type_ops *ops) {
    int s = atomic_load_explicit(&bt16_state, memory_order_acquire);
    if (s == 0) {
        s = bt16_check(ops) ? 1 : -1;
        atomic_store_explicit(&bt16_state, s, memory_order_release);
    }
    return s == 1;
}

/* A·x items of group gr: (block of a_rows A rows) x (block of tc group rows). */
static int64_t group_items(const cera_lora_cpu_job *j, const cera_lora_group *gr, const cera_lora_pair *p) {
    return (int64_t)((gr->n_rows + j->tc - 1) / j->tc) * ((p->rank + j->a_rows - 1) / j->a_rows);
}

/* Pre chunk c: A·x items [c·per_pre, (c+1)·per_pre), numbered A-block-major within a group
 * so that a chunk touches few A rows. A block of rows that are consecutive in the batch (a
 * prompt) is one tile call. */
static void pre_chunk(void *arg, int64_t c, int ith) {
    (void)ith;
    const cera_lora_cpu_job *j = arg;
    const cera_lora_batch *b = j->b;
    const int64_t i0 = c * j->per_pre, i1 = i0 + j->per_pre;
    int64_t base = 0;
    for (int g = 0; g < b->n_groups && base < i1; g++) {
        const cera_lora_group *gr = &b->groups[g];
        const cera_lora_pair *p = cera_lora_pair_get(gr->adapter, j->layer, j->proj);
        if (!p) continue;
        const int n_rb = (gr->n_rows + j->tc - 1) / j->tc;
        const int64_t n = group_items(j, gr, p);
        const size_t ts = (size_t)gr->adapter->max_rank;
        for (int64_t i = i0 > base ? i0 - base : 0; i < n && base + i < i1; i++) {
            const int blk = (int)(i / n_rb), r0 = (int)(i % n_rb) * j->tc;
            const int a0 = blk * j->a_rows, nr = p->rank - a0 < j->a_rows ? p->rank - a0 : j->a_rows;
            const int nc = gr->n_rows - r0 < j->tc ? gr->n_rows - r0 : j->tc;
            bool consecutive = true;
            for (int q = 1; q < nc; q++) consecutive &= gr->rows[r0 + q] == gr->rows[r0] + q;
            const float *w = p->a + (size_t)a0 * p->k;
            if (consecutive) {
                dot_tile(j, p->k, gr->t + (size_t)r0 * ts + a0, ts, w, nr,
                         j->x + (size_t)gr->rows[r0] * j->x_stride, j->x_stride, nc);
            } else {
                for (int q = 0; q < nc; q++)
                    dot_tile(j, p->k, gr->t + (size_t)(r0 + q) * ts + a0, ts, w, nr,
                             j->x + (size_t)gr->rows[r0 + q] * j->x_stride, j->x_stride, 1);
            }
        }
        base += n;
    }
}

/* The first index of the ascending rows[0..n) that is >= v. */
static int lower_bound(const int *rows, int n, int v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (rows[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* y += s·B·t on output columns [o0, o1) of batch rows [t0, t1): a tile the matmul just
 * finished (form 1), or a post run of all rows. For every group in adapter-id order, its
 * rows in [t0, t1) in blocks of tc (their t rows are contiguous in the scratch): y + u·s,
 * as llama.cpp's scale then add. */
static void tile_done(void *arg, int64_t o0, int64_t o1, int t0, int t1, int ith) {
    (void)ith;
    const cera_lora_cpu_job *j = arg;
    const cera_lora_batch *b = j->b;
    float u[MAX_TILE_COLS * MAX_TILE_ROWS];
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_group *gr = &b->groups[g];
        const cera_lora_pair *p = cera_lora_pair_get(gr->adapter, j->layer, j->proj);
        if (!p) continue;
        const int lo = lower_bound(gr->rows, gr->n_rows, t0), hi = lower_bound(gr->rows, gr->n_rows, t1);
        const size_t ts = (size_t)gr->adapter->max_rank;
        for (int r0 = lo; r0 < hi; r0 += j->tc) {
            const int nc = hi - r0 < j->tc ? hi - r0 : j->tc;
            float s[MAX_TILE_COLS];
            float *yr[MAX_TILE_COLS];
            for (int c = 0; c < nc; c++) {
                s[c] = cera_lora_scale(gr->adapter, p, gr->scales[r0 + c]);
                yr[c] = j->y + (size_t)gr->rows[r0 + c] * j->y_stride;
            }
            /* u = B[c0 : c0+nr] · t, as the F32 tile computes it, nr outputs at a time */
            const int step = j->bt16 ? 16 : j->tr;
            for (int64_t c0 = o0; c0 < o1; c0 += step) {
                const int nr = o1 - c0 < step ? (int)(o1 - c0) : step;
#if HAVE_BT16
                if (j->bt16)
                    cera_lora_bt16_avx512(p->rank, u, (size_t)step, p->b + (size_t)c0 * p->rank, nr,
                                          gr->t + (size_t)r0 * ts, ts, nc);
                else
#endif
                    dot_tile(j, p->rank, u, (size_t)step, p->b + (size_t)c0 * p->rank, nr,
                             gr->t + (size_t)r0 * ts, ts, nc);
                for (int c = 0; c < nc; c++)
                    for (int i = 0; i < nr; i++) yr[c][c0 + i] = yr[c][c0 + i] + u[c * step + i] * s[c];
            }
        }
    }
}

/* Fills j for the plan's adapters on (layer, proj); false when there is nothing to run with
 * the F32 kernels (nothing targeted, or j->after = CERA_LORA_AFTER_PORTABLE). */
static bool prepare(cera_lora_cpu_job *j, cera_pool *pool, const cera_lora_batch *b, int layer,
                    cera_proj proj, const float *x, size_t x_stride, float *y, size_t y_stride) {
    *j = (cera_lora_cpu_job){.pool = pool,
                             .b = b,
                             .ops = cera_cpu_ops(CERA_TYPE_F32),
                             .tr = 1,
                             .tc = 1,
                             .layer = layer,
                             .proj = proj,
                             .x = x,
                             .x_stride = x_stride,
                             .y = y,
                             .y_stride = y_stride};
    if (!b || !cera_lora_batch_targets(b, layer, proj)) return false;
    if (!j->ops || !cera_lora_batch_two_phase(b)) {
        /* no F32 kernels or no scratch (out of memory): the portable kernels, after */
        j->after = CERA_LORA_AFTER_PORTABLE;
        return false;
    }
    if (j->ops->gemm_tile) {
        j->tr = j->ops->tile_rows < MAX_TILE_ROWS ? j->ops->tile_rows : MAX_TILE_ROWS;
        j->tc = j->ops->tile_cols < MAX_TILE_COLS ? j->ops->tile_cols : MAX_TILE_COLS;
    }
    j->bt16 = use_bt16(j->ops);
    /* A·x items of tr A rows; where that leaves fewer items than threads (a decode step:
     * rank/tr items), one A row per item so the (memory-bound) reads of A spread over more
     * threads. Either way every t element is the same tile call's (any nr gives the same
     * bits). */
    const int nth = cera_pool_size(pool);
    int64_t items = 0, work = 0;
    j->a_rows = j->tr;
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_pair *p = cera_lora_pair_get(b->groups[g].adapter, layer, proj);
        if (!p) continue;
        items += group_items(j, &b->groups[g], p);
        work += (int64_t)b->groups[g].n_rows * p->rank * p->k;
    }
    if (items < 2 * (int64_t)nth && j->a_rows > 1) {
        j->a_rows = 1;
        items = 0;
        for (int g = 0; g < b->n_groups; g++) {
            const cera_lora_pair *p = cera_lora_pair_get(b->groups[g].adapter, layer, proj);
            if (p) items += group_items(j, &b->groups[g], p);
        }
    }
    const int64_t item_work = work / (items ? items : 1);
    j->per_pre = item_work >= PRE_MIN_WORK ? 1 : (PRE_MIN_WORK + item_work - 1) / (item_work ? item_work : 1);
    j->hook = (cera_matmul_hook){
        .n_pre = (items + j->per_pre - 1) / j->per_pre, .pre = pre_chunk, .tile = tile_done, .arg = j};
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_pair *p = cera_lora_pair_get(b->groups[g].adapter, layer, proj);
        if (p) j->d = p->d;
    }
    /* the B·t runs of the unfused and post forms: about two per thread, 16-column multiples */
    j->cols = (j->d + 2 * nth - 1) / (2 * nth);
    j->cols = j->cols < 32 ? 32 : (j->cols + 15) / 16 * 16;
    return true;
}

int cera_lora_cpu_default_form(int n_threads) { return n_threads >= CERA_LORA_CPU_FUSE_TILE_THREADS ? 1 : 2; }

static _Atomic int fusion_mode = -1;

void cera_lora_cpu_set_fusion(int mode) { atomic_store(&fusion_mode, mode < 0 ? -1 : mode > 2 ? 2 : mode); }

/* A post chunk (or the unfused form's second job): output columns [c·cols, (c+1)·cols) of
 * every row, B read in one long run per group. */
static void post_chunk(void *arg, int64_t c, int ith) {
    cera_lora_cpu_job *j = arg;
    const int64_t o0 = c * j->cols, o1 = o0 + j->cols < j->d ? o0 + j->cols : j->d;
    tile_done(j, o0, o1, 0, j->b->n_rows, ith);
}

const cera_matmul_hook *cera_lora_cpu_hook(cera_lora_cpu_job *j, cera_pool *pool, const cera_lora_batch *b,
                                           int layer, cera_proj proj, const float *x, size_t x_stride,
                                           float *y, size_t y_stride) {
    if (!prepare(j, pool, b, layer, proj, x, x_stride, y, y_stride)) return NULL;
    int mode = atomic_load_explicit(&fusion_mode, memory_order_relaxed);
    if (mode < 0) mode = cera_lora_cpu_default_form(cera_pool_size(pool));
    if (mode == 0) {
        j->after = CERA_LORA_AFTER_SWEEP;
        return NULL;
    }
    if (mode == 2) {
        j->hook.tile = NULL;
        j->hook.n_post = (j->d + j->cols - 1) / j->cols;
        j->hook.post = post_chunk;
    }
    return &j->hook;
}

/* The unfused form: the A·x chunks as a pool job, then output columns in contiguous runs
 * over all rows (B read in long runs) as another. */
static void sweep(cera_lora_cpu_job *j) {
    cera_pool_for(j->pool, j->hook.n_pre, pre_chunk, j);
    cera_pool_for(j->pool, (j->d + j->cols - 1) / j->cols, post_chunk, j);
}

void cera_lora_cpu_after(cera_lora_cpu_job *j) {
    if (j->after == CERA_LORA_AFTER_PORTABLE)
        cera_lora_batch_apply(j->b, j->layer, j->proj, j->x, j->x_stride, j->y, j->y_stride, 0, INT64_MAX);
    else if (j->after == CERA_LORA_AFTER_SWEEP)
        sweep(j);
}

void cera_lora_cpu_apply(cera_pool *pool, const cera_lora_batch *b, int layer, cera_proj proj, const float *x,
                         size_t x_stride, float *y, size_t y_stride) {
    cera_lora_cpu_job j;
    if (prepare(&j, pool, b, layer, proj, x, x_stride, y, y_stride)) j.after = CERA_LORA_AFTER_SWEEP;
    cera_lora_cpu_after(&j);
}

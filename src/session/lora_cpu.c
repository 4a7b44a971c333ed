/*
 * lora_cpu.c — the CPU backend's LoRA hook: applies a batch plan over the engine's thread
 * pool right after a projection's matmul (forward.c, proj_matmul).
 *
 * The two products are computed with the CPU table's F32 kernels (the register tile, or
 * the row dot where a type has no tile), exactly as cera_matmul computes an F32 weight:
 * llama.cpp applies an adapter as two F32 matmuls (ggml_mul_mat(b, ggml_mul_mat(a, x))),
 * then scales and adds, so an engine whose F32 matmul rounds as llama.cpp's gives the same
 * adapter contribution bit for bit. The work is split in two phases over the pool, the
 * rank·rows dots of t = A·x, then the output columns of y += (B·t)·s, so every thread has
 * work even for one row and every factor row is read about once; a decode step's few rows
 * take one pool run (each thread computing A·x itself), tiny work stays on the calling
 * thread. Each element is computed the same way whatever the split, the batch or
 * the thread count, so prefill equals decode and a mixed batch equals its sequences run
 * alone, bit for bit.
 */
#include "session/lora_cpu.h"

#include <stdbool.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"

/* Multiply-adds below which one thread applies an adapter to a projection alone. */
#define CERA_LORA_CPU_SERIAL_WORK (1 << 15)
/* Multiply-adds of A·x up to which a decode step takes one pool job (A of 256 KB). */
#define CERA_LORA_CPU_ONE_RUN_A_WORK (1 << 16)
#define MAX_TILE_ROWS                64
#define MAX_TILE_COLS                8

typedef struct lora_job {
    const cera_lora_batch *b;
    const cera_cpu_type_ops *ops;
    int tr, tc; /* weight rows and activation rows per kernel call */
    int layer;
    cera_proj proj;
    const float *x;
    size_t x_stride;
    float *y;
    size_t y_stride;
} lora_job;

/* out[c * out_stride + i] = dot(w row i, a row c) for i < nr (<= j->tr) and c < nc (<= j->tc);
 * w rows hold k floats, a rows are a_stride floats apart: the F32 tile, as cera_matmul
 * computes it (each element the same whatever nr and nc). */
static void dot_tile(const lora_job *j, int64_t k, float *out, size_t out_stride, const float *w, int nr,
                     const float *a, size_t a_stride, int nc) {
    if (j->ops->gemm_tile) {
        j->ops->gemm_tile(k, out, out_stride, w, (size_t)k * sizeof(float), a, a_stride * sizeof(float), nr,
                          nc);
        return;
    }
    for (int c = 0; c < nc; c++)
        for (int i = 0; i < nr; i++)
            j->ops->vec_dot(k, &out[c * out_stride + i], w + (size_t)i * k, a + c * a_stride);
}

/* Phase A: work items (group, block of tr A rows, block of tc group rows), numbered
 * A-block-major within a group so that a thread's contiguous share touches few A rows.
 * A block of rows that are consecutive in the batch (a prompt) is one tile call. */
static void phase_a(const lora_job *j, int ith, int nth) {
    const cera_lora_batch *b = j->b;
    int64_t total = 0;
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_pair *p = cera_lora_pair_get(b->groups[g].adapter, j->layer, j->proj);
        if (p)
            total += (int64_t)((b->groups[g].n_rows + j->tc - 1) / j->tc) * ((p->rank + j->tr - 1) / j->tr);
    }
    const int64_t per = (total + nth - 1) / nth, i0 = per * ith, i1 = i0 + per < total ? i0 + per : total;
    int64_t base = 0;
    for (int g = 0; g < b->n_groups && base < i1; g++) {
        const cera_lora_group *gr = &b->groups[g];
        const cera_lora_pair *p = cera_lora_pair_get(gr->adapter, j->layer, j->proj);
        if (!p) continue;
        const int n_rb = (gr->n_rows + j->tc - 1) / j->tc;
        const int64_t n = (int64_t)n_rb * ((p->rank + j->tr - 1) / j->tr);
        const size_t ts = (size_t)gr->adapter->max_rank;
        for (int64_t i = i0 > base ? i0 - base : 0; i < n && base + i < i1; i++) {
            const int blk = (int)(i / n_rb), r0 = (int)(i % n_rb) * j->tc;
            const int j0 = blk * j->tr, nr = p->rank - j0 < j->tr ? p->rank - j0 : j->tr;
            const int nc = gr->n_rows - r0 < j->tc ? gr->n_rows - r0 : j->tc;
            bool consecutive = true;
            for (int c = 1; c < nc; c++) consecutive &= gr->rows[r0 + c] == gr->rows[r0] + c;
            const float *w = p->a + (size_t)j0 * p->k;
            if (consecutive) {
                dot_tile(j, p->k, gr->t + (size_t)r0 * ts + j0, ts, w, nr,
                         j->x + (size_t)gr->rows[r0] * j->x_stride, j->x_stride, nc);
            } else {
                for (int c = 0; c < nc; c++)
                    dot_tile(j, p->k, gr->t + (size_t)(r0 + c) * ts + j0, ts, w, nr,
                             j->x + (size_t)gr->rows[r0 + c] * j->x_stride, j->x_stride, 1);
            }
        }
        base += n;
    }
}

/* Phase B: output columns in chunks of tr, split over the threads, for blocks of tc rows
 * at once (their t rows are contiguous in the scratch); y + u·s as llama.cpp's scale then
 * add. */
static void phase_b(const lora_job *j, int ith, int nth) {
    const cera_lora_batch *b = j->b;
    float u[MAX_TILE_COLS * MAX_TILE_ROWS];
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_group *gr = &b->groups[g];
        const cera_lora_pair *p = cera_lora_pair_get(gr->adapter, j->layer, j->proj);
        if (!p) continue;
        const int64_t chunks = (p->d + j->tr - 1) / j->tr, per = (chunks + nth - 1) / nth;
        const int64_t d0 = per * ith * j->tr, d1 = d0 + per * j->tr < p->d ? d0 + per * j->tr : p->d;
        const size_t ts = (size_t)gr->adapter->max_rank;
        for (int r0 = 0; r0 < gr->n_rows; r0 += j->tc) {
            const int nc = gr->n_rows - r0 < j->tc ? gr->n_rows - r0 : j->tc;
            float s[MAX_TILE_COLS];
            float *yr[MAX_TILE_COLS];
            for (int c = 0; c < nc; c++) {
                s[c] = cera_lora_scale(gr->adapter, p, gr->scales[r0 + c]);
                yr[c] = j->y + (size_t)gr->rows[r0 + c] * j->y_stride;
            }
            for (int64_t c0 = d0; c0 < d1; c0 += j->tr) {
                const int nr = d1 - c0 < j->tr ? (int)(d1 - c0) : j->tr;
                dot_tile(j, p->rank, u, (size_t)j->tr, p->b + (size_t)c0 * p->rank, nr,
                         gr->t + (size_t)r0 * ts, ts, nc);
                for (int c = 0; c < nc; c++)
                    for (int i = 0; i < nr; i++) yr[c][c0 + i] = yr[c][c0 + i] + u[c * j->tr + i] * s[c];
            }
        }
    }
}

/* Few rows (a decode step): one pool run instead of two. Every thread computes the
 * groups' t = A·x itself (the same calls as phase A, into its own copy: rank·k
 * multiply-adds per row, cheaper than a second wake-up of the pool), then its columns. */
#define FEW_ROWS 4
static void one_run_worker(void *arg, int ith, int nth) {
    const lora_job *j = arg;
    float t[FEW_ROWS * CERA_LORA_MAX_RANK];
    lora_job mine = *j;
    cera_lora_group groups[CERA_LORA_MAX_SET * FEW_ROWS];
    cera_lora_batch b = *j->b;
    size_t off = 0;
    for (int g = 0; g < b.n_groups; g++) {
        groups[g] = j->b->groups[g];
        groups[g].t = t + off;
        off += (size_t)groups[g].n_rows * groups[g].adapter->max_rank;
    }
    b.groups = groups;
    mine.b = &b;
    phase_a(&mine, 0, 1);
    phase_b(&mine, ith, nth);
}

static void phase_a_worker(void *arg, int ith, int nth) { phase_a(arg, ith, nth); }
static void phase_b_worker(void *arg, int ith, int nth) { phase_b(arg, ith, nth); }

void cera_lora_cpu_apply(cera_pool *pool, const cera_lora_batch *b, int layer, cera_proj proj, const float *x,
                         size_t x_stride, float *y, size_t y_stride) {
    if (!b || !cera_lora_batch_targets(b, layer, proj)) return;
    const cera_cpu_type_ops *ops = cera_cpu_ops(CERA_TYPE_F32);
    if (!ops || !cera_lora_batch_two_phase(b)) {
        /* no F32 kernels or no scratch (out of memory): the portable kernels */
        cera_lora_batch_apply(b, layer, proj, x, x_stride, y, y_stride, 0, INT64_MAX);
        return;
    }
    lora_job j = {b, ops, 1, 1, layer, proj, x, x_stride, y, y_stride};
    if (ops->gemm_tile) {
        j.tr = ops->tile_rows < MAX_TILE_ROWS ? ops->tile_rows : MAX_TILE_ROWS;
        j.tc = ops->tile_cols < MAX_TILE_COLS ? ops->tile_cols : MAX_TILE_COLS;
    }
    int64_t work = 0;
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_pair *p = cera_lora_pair_get(b->groups[g].adapter, layer, proj);
        if (p) work += (int64_t)b->groups[g].n_rows * p->rank * (p->k + p->d);
    }
    if (work < CERA_LORA_CPU_SERIAL_WORK || cera_pool_size(pool) == 1) {
        /* tiny work: waking the pool twice would cost more */
        phase_a(&j, 0, 1);
        phase_b(&j, 0, 1);
        return;
    }
    /* One run suits a decode step whose A is small enough that every thread reading it
     * (from the shared cache) costs less than a second pool job; a large A (a wide FFN's
     * down projection) is better split. The bound is an estimate (L2-sized A), not tuned. */
    int64_t t_need = 0, a_work = 0;
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_pair *p = cera_lora_pair_get(b->groups[g].adapter, layer, proj);
        t_need += (int64_t)b->groups[g].n_rows * b->groups[g].adapter->max_rank;
        if (p) a_work += (int64_t)b->groups[g].n_rows * p->rank * p->k;
    }
    if (b->n_rows <= FEW_ROWS && b->n_groups <= CERA_LORA_MAX_SET * FEW_ROWS &&
        t_need <= FEW_ROWS * CERA_LORA_MAX_RANK && a_work <= CERA_LORA_CPU_ONE_RUN_A_WORK) {
        cera_pool_run(pool, one_run_worker, &j);
        return;
    }
    cera_pool_run(pool, phase_a_worker, &j);
    cera_pool_run(pool, phase_b_worker, &j);
}

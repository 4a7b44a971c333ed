/* matmul.c — the CPU matmul driver (see matmul.h). */
#include "backend/cpu/matmul.h"

#include <stdint.h>

#define ROW_CHUNK   32 /* weight rows per work item */
#define TOKEN_CHUNK 32 /* activation rows per work item */

size_t cera_matmul_scratch_size(cera_type t, int64_t k, int n_tokens) {
    const cera_cpu_type_ops *ops = cera_cpu_ops(t);
    if (!ops) return 0;
    return cera_row_size(ops->act_type, k) * (size_t)n_tokens;
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
    int64_t n_row_chunks, n_tok_chunks;
} mm_job;

static void quantize_row(void *arg, int64_t t, int ith) {
    mm_job *j = arg;
    j->ops->quantize_act(j->x + (size_t)t * j->w->k, j->act_out + (size_t)t * j->act_stride, j->w->k);
}

static void compute_chunk(const mm_job *j, int64_t r0, int64_t r1, int t0, int t1) {
    const cera_cpu_type_ops *ops = j->ops;
    const uint8_t *wd = j->w->data;
    const int64_t k = j->w->k;
    /* A single token also goes through a register tile (so a decode step rounds exactly as
     * the same token in a prompt); wide hardware tiles (AMX: 32 columns) would waste most of
     * their work on it, so there it takes the row dot. */
    if (ops->gemm_tile && (t1 - t0 > 1 || ops->tile_cols <= 8)) {
        for (int64_t r = r0; r < r1; r += ops->tile_rows) {
            const int nr = (int)(r1 - r < ops->tile_rows ? r1 - r : ops->tile_rows);
            for (int t = t0; t < t1; t += ops->tile_cols) {
                const int nc = t1 - t < ops->tile_cols ? t1 - t : ops->tile_cols;
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

static void compute(void *arg, int64_t c, int ith) {
    const mm_job *j = arg;
    const int64_t rows = j->w->n;
    const int64_t rc = c % j->n_row_chunks, tc = c / j->n_row_chunks;
    const int64_t r0 = rc * ROW_CHUNK, r1 = r0 + ROW_CHUNK < rows ? r0 + ROW_CHUNK : rows;
    const int t0 = (int)tc * TOKEN_CHUNK;
    const int t1 = t0 + TOKEN_CHUNK < j->n_tokens ? t0 + TOKEN_CHUNK : j->n_tokens;
    compute_chunk(j, r0, r1, t0, t1);
}

void cera_matmul(cera_pool *pool, const cera_weight *w, const cera_cpu_type_ops *ops, const float *x,
                 int n_tokens, float *y, size_t ldy, void *act) {
    mm_job j = {
        .w = w,
        .ops = ops,
        .x = x,
        .n_tokens = n_tokens,
        .y = y,
        .ldy = ldy,
        .act_stride = cera_row_size(ops->act_type, w->k),
        .w_stride = cera_row_size(w->type, w->k),
    };
    if (ops->act_type == CERA_TYPE_F32) {
        j.act = (const uint8_t *)x; /* F32 weights read the activations as they are */
    } else {
        j.act_out = act;
        j.act = act;
        cera_pool_for(pool, n_tokens, quantize_row, &j);
    }
    j.n_row_chunks = (w->n + ROW_CHUNK - 1) / ROW_CHUNK;
    j.n_tok_chunks = (n_tokens + TOKEN_CHUNK - 1) / TOKEN_CHUNK;
    cera_pool_for(pool, j.n_row_chunks * j.n_tok_chunks, compute, &j);
}

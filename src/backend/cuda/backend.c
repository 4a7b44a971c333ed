/*
 * backend.c — the CUDA backend behind the engine's backend table (session/backend.h).
 *
 * The engine opens it for CERA_DEVICE_CUDA (or AUTO when a GPU answers). KV blocks live
 * on the GPU: kv_init gives each session's pool device storage (F16, llama.cpp's default, or
 * Q8_0; an F32 request is refused at open, so AUTO falls back to the CPU), and a
 * forward call hands the batch's block tables to the kernels, which read K/V through
 * them. Logits come back only for the tokens that want them.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_state.h"
#include "session/backend.h"

_Static_assert(CU_KV_BLOCK == CERA_KV_BLOCK, "the kernels' KV block is the engine's");

typedef struct cuda_backend {
    cera_backend base;
    cera_cuda_state *s;
    int32_t *tok_tbl; /* [n_batch] */
    int32_t *rows;    /* [n_batch] */
    int32_t *tables;  /* [tables_cap] */
} cuda_backend;

static cera_status cuda_kv_init(cera_backend *b, cera_kv_pool *pool, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    if (pool->n_layer != be->s->hp.n_layer || pool->kv_dim != be->s->n_kv)
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: KV pool of %d layers x %d, model has %d x %d",
                         pool->n_layer, pool->kv_dim, be->s->hp.n_layer, be->s->n_kv);
    const size_t bytes = (size_t)pool->n_blocks * cu_kv_block_bytes(be->s);
    CU_TRY(cudaSetDevice(be->s->prm.device));
    cudaError_t e = cudaMalloc(&pool->dev, bytes);
    if (e != cudaSuccess) {
        pool->dev = NULL;
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: KV cache of %zu bytes: %s", bytes,
                         cudaGetErrorString(e));
    }
    CU_TRY(cudaMemset(pool->dev, 0, bytes));
    return CERA_OK;
}

static void cuda_kv_free(cera_backend *b, cera_kv_pool *pool) {
    (void)b;
    if (pool->dev) cudaFree(pool->dev);
    pool->dev = NULL;
}

static cera_status cuda_forward(cera_backend *b, const cera_batch *batch, float *logits, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    cera_cuda_state *s = be->s;
    if (batch->n_tokens < 1) return CERA_OK;
    if (batch->n_seqs < 1) return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: batch without sequences");
    void *kv_base = batch->seqs[0]->pool->dev;
    int n_tables = 0;
    int32_t offs[64];
    if (batch->n_seqs > 64)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: more than 64 sequences in a batch");
    for (int j = 0; j < batch->n_seqs; j++) {
        const cera_kv_seq *q = batch->seqs[j];
        if (q->pool->dev != kv_base || !kv_base)
            return cera_fail(err, CERA_ERR_UNSUPPORTED,
                             "cuda: a batch's sequences must share one device KV pool");
        if (n_tables + q->n_blocks > s->tables_cap)
            return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: the batch's block tables exceed %d entries",
                             s->tables_cap);
        offs[j] = n_tables;
        memcpy(be->tables + n_tables, q->blocks, sizeof(int32_t) * (size_t)q->n_blocks);
        n_tables += q->n_blocks;
    }
    int n_out = 0;
    for (int i = 0; i < batch->n_tokens; i++) {
        const int j = batch->seq[i];
        if (j < 0 || j >= batch->n_seqs || batch->pos[i] < 0 ||
            batch->pos[i] >= batch->seqs[j]->n_blocks * CU_KV_BLOCK)
            return cera_fail(err, CERA_ERR_INVALID_ARG,
                             "cuda: token %d: position %d outside its sequence's blocks", i, batch->pos[i]);
        be->tok_tbl[i] = offs[j];
        if (batch->want_logits[i]) be->rows[n_out++] = i;
    }
    return cu_forward(s, batch->token, batch->pos, batch->n_tokens, be->tok_tbl, be->tables, n_tables,
                      kv_base, be->rows, n_out, logits, NULL, batch->lora, err);
}

static void cuda_free(cera_backend *b) {
    cuda_backend *be = (cuda_backend *)b;
    cera_cuda_free(be->s);
    free(be->tok_tbl);
    free(be->rows);
    free(be->tables);
    free(be);
}

cera_status cera_cuda_backend_open(const cera_model *model, const cera_engine_params *params,
                                   cera_backend **out, cera_error *err) {
    *out = NULL;
    /* the device kernels keep K/V in F16 or Q8_0: an F32 cache is refused rather than served as
     * F16 (AUTO then falls back to the CPU, which has it) */
    if (params->kv_type != CERA_KV_F16 && params->kv_type != CERA_KV_Q8_0)
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "the CUDA backend keeps its KV cache in F16 or Q8_0 (asked: %s)",
                         params->kv_type == CERA_KV_F32 ? "F32" : "unknown");
    cera_cuda_params p = cera_cuda_default_params();
    p.kv_type = params->kv_type;
    p.n_ctx = params->n_ctx > 0 ? params->n_ctx : 4096;
    p.n_batch = params->n_batch > 0 ? params->n_batch : 512;
    p.external_kv = true;
    cuda_backend *be = calloc(1, sizeof *be);
    if (!be) return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda backend");
    cera_status st = cera_cuda_init(model, &p, &be->s, err);
    if (st != CERA_OK) {
        free(be);
        return st;
    }
    be->tok_tbl = malloc(sizeof(int32_t) * (size_t)p.n_batch);
    be->rows = malloc(sizeof(int32_t) * (size_t)p.n_batch);
    be->tables = malloc(sizeof(int32_t) * (size_t)be->s->tables_cap);
    if (!be->tok_tbl || !be->rows || !be->tables) {
        cuda_free(&be->base);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda backend tables");
    }
    be->base.name = "cuda";
    be->base.kv_on_host = false;
    be->base.kv_init = cuda_kv_init;
    be->base.kv_free = cuda_kv_free;
    be->base.forward = cuda_forward;
    be->base.free = cuda_free;
    *out = &be->base;
    return CERA_OK;
}

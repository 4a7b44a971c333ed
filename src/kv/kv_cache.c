/* kv_cache.c — the paged KV cache's block pool and block tables (see kv_cache.h). */
#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

cera_status cera_kv_pool_new(cera_kv_type type, int n_layer, int kv_dim, int n_blocks, bool host_storage,
                             cera_kv_pool **out, cera_error *err) {
    *out = NULL;
    if (type != CERA_KV_F16 && type != CERA_KV_F32 && type != CERA_KV_Q8_0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "unknown KV cache type %d", (int)type);
    if (n_layer <= 0 || kv_dim <= 0 || n_blocks <= 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "KV cache: bad size");
    if (type == CERA_KV_Q8_0 && host_storage)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "a Q8_0 KV cache lives on a device backend only");
    cera_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return cera_fail(err, CERA_ERR_NO_MEMORY, "KV cache pool");
    p->type = type;
    p->elem_size = type == CERA_KV_F32 ? 4 : 2; /* Q8_0: never in host storage */
    p->n_layer = n_layer;
    p->kv_dim = kv_dim;
    p->n_blocks = n_blocks;
    p->block_bytes = (size_t)n_layer * 2 * CERA_KV_BLOCK * (size_t)kv_dim * p->elem_size;
    p->refcount = calloc((size_t)n_blocks, sizeof *p->refcount);
    p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
    if (host_storage) p->data = calloc((size_t)n_blocks, p->block_bytes);
    if (!p->refcount || !p->free_ids || (host_storage && !p->data)) {
        const size_t bytes = p->block_bytes;
        cera_kv_pool_free(p);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "KV cache: %d blocks of %zu bytes", n_blocks, bytes);
    }
    /* a stack popped from the end: block 0 is handed out first */
    for (int i = 0; i < n_blocks; i++) p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    *out = p;
    return CERA_OK;
}

void cera_kv_pool_free(cera_kv_pool *pool) {
    if (!pool) return;
    free(pool->data);
    free(pool->refcount);
    free(pool->free_ids);
    free(pool);
}

cera_status cera_kv_seq_init(cera_kv_seq *seq, cera_kv_pool *pool, int max_pos, cera_error *err) {
    memset(seq, 0, sizeof *seq);
    if (max_pos <= 0) return cera_fail(err, CERA_ERR_INVALID_ARG, "KV sequence: max_pos %d", max_pos);
    seq->pool = pool;
    seq->max_blocks = (max_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    seq->blocks = malloc((size_t)seq->max_blocks * sizeof *seq->blocks);
    if (!seq->blocks) return cera_fail(err, CERA_ERR_NO_MEMORY, "KV block table");
    return CERA_OK;
}

static void put_block(cera_kv_pool *p, int32_t b) {
    if (--p->refcount[b] == 0) p->free_ids[p->n_free++] = b;
}

void cera_kv_seq_release(cera_kv_seq *seq) {
    if (!seq->blocks) return;
    cera_kv_seq_truncate(seq, 0);
    free(seq->blocks);
    seq->blocks = NULL;
}

cera_status cera_kv_seq_reserve(cera_kv_seq *seq, int n_pos, cera_error *err) {
    const int need = (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    if (need > seq->max_blocks)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "context full: %d positions needed, %d available", n_pos,
                         seq->max_blocks * CERA_KV_BLOCK);
    cera_kv_pool *p = seq->pool;
    if (need - seq->n_blocks > p->n_free)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "KV cache pool exhausted (%d blocks free, %d needed)",
                         p->n_free, need - seq->n_blocks);
    while (seq->n_blocks < need) {
        const int32_t b = p->free_ids[--p->n_free];
        p->refcount[b] = 1;
        seq->blocks[seq->n_blocks++] = b;
    }
    return CERA_OK;
}

void cera_kv_seq_truncate(cera_kv_seq *seq, int n_pos) {
    if (n_pos < 0) n_pos = 0;
    if (n_pos >= seq->n_pos && n_pos >= seq->n_blocks * CERA_KV_BLOCK) return;
    const int keep = (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    while (seq->n_blocks > keep) put_block(seq->pool, seq->blocks[--seq->n_blocks]);
    if (seq->n_pos > n_pos) seq->n_pos = n_pos;
}

/* kv_cache.c — the paged KV pool's blocks, sequence slots and block tables (see kv_cache.h). */
#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

cera_status cera_kv_pool_new(cera_kv_type type, int n_layer, int kv_dim, int n_blocks, int n_seq_max,
                             int max_pos, size_t state_bytes, bool host_storage, cera_kv_pool **out,
                             cera_error *err) {
    *out = NULL;
    if (type != CERA_KV_F16 && type != CERA_KV_F32 && type != CERA_KV_Q8_0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "unknown KV cache type %d", (int)type);
    if (n_layer <= 0 || kv_dim <= 0 || n_blocks <= 0 || n_seq_max <= 0 || max_pos <= 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "KV cache: bad size");
    if (type == CERA_KV_Q8_0 && host_storage)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "a Q8_0 KV cache lives on a device backend only");
    cera_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return cera_fail(err, CERA_ERR_NO_MEMORY, "KV cache pool");
    p->type = type;
    p->elem_size = type == CERA_KV_F32 ? 4 : 2;
    p->n_layer = n_layer;
    p->kv_dim = kv_dim;
    p->n_blocks = n_blocks;
    p->max_pos = max_pos;
    p->n_seq_max = n_seq_max;
    p->block_bytes = (size_t)n_layer * 2 * CERA_KV_BLOCK * (size_t)kv_dim * p->elem_size;
    p->refcount = calloc((size_t)n_blocks, sizeof *p->refcount);
    p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
    p->free_seq = malloc((size_t)n_seq_max * sizeof *p->free_seq);
    p->state_bytes = state_bytes;
    if (host_storage) p->data = calloc((size_t)n_blocks, p->block_bytes);
    if (host_storage && state_bytes) p->state = calloc((size_t)n_seq_max, state_bytes);
    if (!p->refcount || !p->free_ids || !p->free_seq || (host_storage && !p->data) ||
        (host_storage && state_bytes && !p->state)) {
        const size_t bytes = p->block_bytes;
        cera_kv_pool_free(p);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "KV cache: %d blocks of %zu bytes", n_blocks, bytes);
    }
    /* stacks popped from the end: block 0 and slot 0 are handed out first */
    for (int i = 0; i < n_blocks; i++) p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    for (int i = 0; i < n_seq_max; i++) p->free_seq[i] = n_seq_max - 1 - i;
    p->n_free_seq = n_seq_max;
    *out = p;
    return CERA_OK;
}

void cera_kv_pool_free(cera_kv_pool *pool) {
    if (!pool) return;
    free(pool->data);
    free(pool->refcount);
    free(pool->free_ids);
    free(pool->free_seq);
    free(pool->state);
    free(pool);
}

cera_status cera_kv_seq_open(cera_kv_pool *pool, cera_kv_seq *seq, cera_error *err) {
    memset(seq, 0, sizeof *seq);
    if (pool->n_free_seq == 0)
        return cera_fail(err, CERA_ERR_NO_MEMORY,
                         "every one of the engine's %d sequence slots is taken (n_seq_max)", pool->n_seq_max);
    seq->max_blocks = (pool->max_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    seq->blocks = malloc((size_t)seq->max_blocks * sizeof *seq->blocks);
    if (!seq->blocks) return cera_fail(err, CERA_ERR_NO_MEMORY, "KV block table");
    seq->pool = pool;
    seq->id = pool->free_seq[--pool->n_free_seq];
    if (pool->state) memset(cera_kv_seq_state(seq), 0, pool->state_bytes);
    return CERA_OK;
}

static void put_block(cera_kv_pool *p, int32_t b) {
    if (--p->refcount[b] == 0) p->free_ids[p->n_free++] = b;
}

void cera_kv_seq_close(cera_kv_seq *seq) {
    if (!seq->pool) return;
    cera_kv_seq_truncate(seq, 0);
    seq->pool->free_seq[seq->pool->n_free_seq++] = seq->id;
    free(seq->blocks);
    memset(seq, 0, sizeof *seq);
}

cera_status cera_kv_seq_fork(const cera_kv_seq *src, cera_kv_seq *dst, cera_error *err) {
    cera_status st = cera_kv_seq_open(src->pool, dst, err);
    if (st) return st;
    for (int i = 0; i < src->n_blocks; i++) {
        dst->blocks[i] = src->blocks[i];
        src->pool->refcount[src->blocks[i]]++;
    }
    dst->n_blocks = src->n_blocks;
    dst->n_pos = src->n_pos;
    if (src->pool->state) memcpy(cera_kv_seq_state(dst), cera_kv_seq_state(src), src->pool->state_bytes);
    return CERA_OK;
}

cera_status cera_kv_seq_reserve(cera_kv_seq *seq, int n_pos, cera_kv_copy *copy, int *n_copy,
                                cera_error *err) {
    *n_copy = 0;
    const int need = (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    if (need > seq->max_blocks)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "context full: %d positions needed, %d available", n_pos,
                         seq->max_blocks * CERA_KV_BLOCK);
    cera_kv_pool *p = seq->pool;
    /* the block the first new position goes to, when the sequence holds it already and
     * shares it, is written only after it has been copied */
    const int first = seq->n_pos / CERA_KV_BLOCK;
    const bool cow = n_pos > seq->n_pos && first < seq->n_blocks && p->refcount[seq->blocks[first]] > 1;
    const int take = (need > seq->n_blocks ? need - seq->n_blocks : 0) + (cow ? 1 : 0);
    if (take > p->n_free)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL,
                         "the engine's KV pool is exhausted (%d blocks free, %d needed): free sessions or "
                         "open the engine with a larger kv_size",
                         p->n_free, take);
    if (cow) {
        const int32_t old = seq->blocks[first], b = p->free_ids[--p->n_free];
        p->refcount[b] = 1;
        if (p->data)
            memcpy(p->data + (size_t)b * p->block_bytes, p->data + (size_t)old * p->block_bytes,
                   p->block_bytes);
        copy->src = old;
        copy->dst = b;
        *n_copy = 1;
        seq->blocks[first] = b;
        put_block(p, old);
    }
    while (seq->n_blocks < need) {
        const int32_t b = p->free_ids[--p->n_free];
        p->refcount[b] = 1;
        seq->blocks[seq->n_blocks++] = b;
    }
    return CERA_OK;
}

void cera_kv_seq_truncate(cera_kv_seq *seq, int n_pos) {
    if (n_pos < 0) n_pos = 0;
    const int keep = (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    while (seq->n_blocks > keep) put_block(seq->pool, seq->blocks[--seq->n_blocks]);
    if (seq->n_pos > n_pos) seq->n_pos = n_pos;
    if (n_pos == 0 && seq->pool->state) memset(cera_kv_seq_state(seq), 0, seq->pool->state_bytes);
}

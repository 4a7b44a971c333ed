/*
 * kv_cache.h — the paged KV cache: a pool of fixed-size blocks and, per sequence, a
 * block table mapping its positions to blocks.
 *
 * A block holds CERA_KV_BLOCK consecutive positions of one sequence for every layer:
 * for layer l, K then V, each [CERA_KV_BLOCK][n_head_kv * head_dim] in the pool's
 * element type (F16 as llama.cpp's default, or F32). Position p of a sequence lives
 * in block blocks[p / CERA_KV_BLOCK], row p % CERA_KV_BLOCK. Attention reads K/V only
 * through the block table, so blocks can later be shared between sequences (prefix
 * caching, forks for speculative decoding) by reference counting them.
 *
 * The pool is allocated once (at session creation, sized from n_ctx); taking and
 * returning blocks never allocates. A device backend keeps its own copy of the storage
 * in `dev` and uses the same block ids.
 */
#ifndef CERA_KV_KV_CACHE_H
#define CERA_KV_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"

#define CERA_KV_BLOCK 32 /* positions per block */

typedef struct cera_kv_pool {
    cera_kv_type type;
    size_t elem_size; /* 2 (F16) or 4 (F32) */
    int n_layer;
    int kv_dim; /* n_head_kv * head_dim: one K (or V) row */
    int n_blocks;
    size_t block_bytes; /* n_layer * 2 * CERA_KV_BLOCK * kv_dim * elem_size */
    uint8_t *data;      /* [n_blocks][n_layer][K|V][CERA_KV_BLOCK][kv_dim]; NULL when on a device */
    void *dev;          /* a device backend's storage, or NULL */
    /* a device backend's [n_vocab] floats: the last wanted logits row of this pool's
     * sequence when a forward kept it on the device (backend.h), or NULL */
    void *dev_logits;
    int32_t *refcount; /* [n_blocks] */
    int32_t *free_ids; /* [n_blocks]: a stack of unused block ids */
    int n_free;
} cera_kv_pool;

/* One sequence's view of the pool. */
typedef struct cera_kv_seq {
    cera_kv_pool *pool;
    int32_t *blocks; /* [max_blocks] block table */
    int max_blocks;
    int n_blocks; /* blocks in use */
    int n_pos;    /* positions filled: 0 .. n_pos-1 */
} cera_kv_seq;

cera_status cera_kv_pool_new(cera_kv_type type, int n_layer, int kv_dim, int n_blocks, bool host_storage,
                             cera_kv_pool **out, cera_error *err);
void cera_kv_pool_free(cera_kv_pool *pool);

/* A sequence able to hold max_pos positions (its block table is allocated here). */
cera_status cera_kv_seq_init(cera_kv_seq *seq, cera_kv_pool *pool, int max_pos, cera_error *err);
void cera_kv_seq_release(cera_kv_seq *seq); /* returns its blocks, frees its table */

/* Makes room for positions up to n_pos - 1 (taking blocks from the pool);
 * CERA_ERR_CONTEXT_FULL when the table or the pool has no room. Does not change seq->n_pos. */
cera_status cera_kv_seq_reserve(cera_kv_seq *seq, int n_pos, cera_error *err);
/* Drops positions >= n_pos, returning blocks no longer needed. */
void cera_kv_seq_truncate(cera_kv_seq *seq, int n_pos);

/* Row `pos` of layer `layer`'s K (kv = 0) or V (kv = 1) in host storage. */
static inline void *cera_kv_row(const cera_kv_seq *seq, int layer, int kv, int pos) {
    const cera_kv_pool *p = seq->pool;
    const int32_t b = seq->blocks[pos / CERA_KV_BLOCK];
    return p->data + (size_t)b * p->block_bytes +
           ((size_t)(layer * 2 + kv) * CERA_KV_BLOCK + (size_t)(pos % CERA_KV_BLOCK)) * (size_t)p->kv_dim *
               p->elem_size;
}

#endif

/*
 * kv_cache.h — the engine's paged KV pool: fixed-size blocks with reference counts, and
 * per sequence a block table mapping its positions to blocks.
 *
 * One pool per engine (and device), sized at engine open; every session's sequence takes
 * its blocks from it, so memory follows the tokens actually held, not sessions x n_ctx.
 * A block holds CERA_KV_BLOCK consecutive positions of one sequence for every layer: for
 * layer l, K then V, each [CERA_KV_BLOCK][n_head_kv * head_dim] in the pool's element type.
 * Position p of a sequence lives in block blocks[p / CERA_KV_BLOCK], row p % CERA_KV_BLOCK.
 * Attention reads K/V only through the block table.
 *
 * A model with recurrent layers (LFM2's short convolutions) also keeps a fixed-size state
 * per sequence slot (state_bytes, zeroed when a sequence opens or is cut back to 0,
 * copied by a fork); it follows the sequence's last position, so such a sequence can only
 * be cut back to 0 (the engine refuses anything else).
 *
 * Blocks are shared by reference counting: a fork shares every block of its source, and
 * the first write into a shared block (the partly filled tail of a fork or of a truncated
 * sequence) copies it first (copy on write, cera_kv_seq_reserve). Each sequence also holds
 * a slot id (0 .. n_seq_max-1) that backends index their per-sequence state by (a GPU's
 * kept logits row). Nothing here allocates after cera_kv_pool_new but a sequence's block
 * table; the pool's storage lives in host memory (data) for the CPU backend, or in the
 * device backend's own memory, addressed by the same block ids.
 *
 * The pool is not locked: the engine serializes calls on it.
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
    size_t elem_size; /* 2 (F16) or 4 (F32); Q8_0 lives on a device only */
    int n_layer;
    int kv_dim; /* n_head_kv * head_dim: one K (or V) row */
    int n_blocks;
    size_t block_bytes; /* n_layer * 2 * CERA_KV_BLOCK * kv_dim * elem_size */
    uint8_t *data;      /* [n_blocks][n_layer][K|V][CERA_KV_BLOCK][kv_dim], or NULL on a device */
    int32_t *refcount;  /* [n_blocks] */
    int32_t *free_ids;  /* [n_blocks]: a stack of unused block ids */
    int n_free;
    int max_pos;       /* positions a sequence may hold (the engine's n_ctx) */
    int n_seq_max;     /* sequence slots */
    int32_t *free_seq; /* [n_seq_max]: a stack of unused slots */
    int n_free_seq;
    size_t state_bytes; /* per slot, 0 when the model has no recurrent layer */
    uint8_t *state;     /* [n_seq_max][state_bytes] in host storage, or NULL */
} cera_kv_pool;

/* One sequence's view of the pool. */
typedef struct cera_kv_seq {
    cera_kv_pool *pool; /* NULL when closed */
    int id;             /* the slot, 0 .. n_seq_max-1 */
    int32_t *blocks;    /* [max_blocks] block table */
    int max_blocks;
    int n_blocks; /* blocks in use */
    int n_pos;    /* positions filled: 0 .. n_pos-1 */
} cera_kv_seq;

/* A block to copy before a write (copy on write): the device backend copies src to dst. */
typedef struct cera_kv_copy {
    int32_t src, dst;
} cera_kv_copy;

/* A pool of n_blocks blocks for n_seq_max sequences of at most max_pos positions each;
 * host_storage allocates the blocks' memory here (zeroed pages, taken by the OS as they are
 * first written). */
cera_status cera_kv_pool_new(cera_kv_type type, int n_layer, int kv_dim, int n_blocks, int n_seq_max,
                             int max_pos, size_t state_bytes, bool host_storage, cera_kv_pool **out,
                             cera_error *err);
void cera_kv_pool_free(cera_kv_pool *pool);

/* Opens an empty sequence (a slot and its block table); CERA_ERR_NO_MEMORY naming
 * n_seq_max when every slot is taken. */
cera_status cera_kv_seq_open(cera_kv_pool *pool, cera_kv_seq *seq, cera_error *err);
/* Returns the sequence's blocks and its slot (a closed or zeroed sequence: nothing). */
void cera_kv_seq_close(cera_kv_seq *seq);
/* Opens dst as a copy of src's timeline: the same positions, every block shared. */
cera_status cera_kv_seq_fork(const cera_kv_seq *src, cera_kv_seq *dst, cera_error *err);

/* Makes room to write positions seq->n_pos .. n_pos - 1: takes blocks from the pool and,
 * when the first of them is shared, replaces it by a private copy (with host storage the
 * rows are copied here; *copy says which device block to copy, *n_copy = 0 or 1).
 * CERA_ERR_CONTEXT_FULL when the sequence's table (max_pos) or the pool has no room, with
 * nothing changed. Does not change seq->n_pos. */
cera_status cera_kv_seq_reserve(cera_kv_seq *seq, int n_pos, cera_kv_copy *copy, int *n_copy,
                                cera_error *err);
/* Drops positions >= n_pos, returning blocks no longer needed. */
void cera_kv_seq_truncate(cera_kv_seq *seq, int n_pos);

/* The sequence's recurrent state in host storage, or NULL. */
static inline void *cera_kv_seq_state(const cera_kv_seq *seq) {
    return seq->pool->state ? seq->pool->state + (size_t)seq->id * seq->pool->state_bytes : NULL;
}

/* Row `pos` of KV layer `layer`'s K (kv = 0) or V (kv = 1) in host storage (layer: the
 * model layer's cera_layer.kv_index). */
static inline void *cera_kv_row(const cera_kv_seq *seq, int layer, int kv, int pos) {
    const cera_kv_pool *p = seq->pool;
    const int32_t b = seq->blocks[pos / CERA_KV_BLOCK];
    return p->data + (size_t)b * p->block_bytes +
           ((size_t)(layer * 2 + kv) * CERA_KV_BLOCK + (size_t)(pos % CERA_KV_BLOCK)) * (size_t)p->kv_dim *
               p->elem_size;
}

#endif

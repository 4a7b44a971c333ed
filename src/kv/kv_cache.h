/*
 * kv_cache.h — the engine's paged KV pool: fixed-size blocks with reference counts, and
 * per sequence a block table mapping its positions to blocks.
 *
 * One pool per engine (and device), sized at engine open; every session's sequence takes
 * its blocks from it, so memory follows the tokens actually held, not sessions x n_ctx.
 * A block holds CERA_KV_BLOCK consecutive positions of one sequence. Position p of a
 * sequence lives in block table[p / CERA_KV_BLOCK], row p % CERA_KV_BLOCK. Attention reads
 * K/V only through the block table (cera_kv_row).
 *
 * Layout per layer: each KV layer has its own row width (its n_head_kv x head_dim), and
 * belongs to one of two groups, each with blocks of its own size and its own table per
 * sequence:
 *   - the full group (CERA_KV_FULL): layers that attend to every earlier position; they
 *     keep every position of the sequence;
 *   - the sliding group (CERA_KV_SWA), present only when some layer has a sliding window
 *     W (a query at position p sees keys p-W+1 .. p, Gemma 3's local layers): these keep
 *     only their window. As a sequence advances (cera_kv_seq_reserve), its sliding blocks
 *     that lie wholly before the window of its next position return to the pool, so a
 *     sequence holds about W + one batch of positions there, whatever its length. A
 *     dropped block's table entry is -1 (seq->first[g] is the group's first held block);
 *     a sequence can be cut back only to a point whose window it still holds
 *     (cera_kv_seq_can_truncate).
 * A group's block holds, for each of its layers in KV-layer order, K then V, each
 * [CERA_KV_BLOCK][row] in its own type (cera_kv_format: K and V may differ; a block type's
 * row is whole blocks of 32): a block's bytes are the sum over its layers. A model with one row width and no
 * window (every model but Gemma 3) has one group whose blocks are laid out exactly as
 * [n_layer][K|V][CERA_KV_BLOCK][kv_dim], which is what device backends address (pool->kv_dim, seq->blocks).
 *
 * A model with recurrent layers (LFM2's short convolutions) also keeps a fixed-size state
 * per sequence slot (state_bytes, zeroed when a sequence opens or is cut back to 0,
 * copied by a fork); it follows the sequence's last position, so such a sequence can only
 * be cut back to 0 (the engine refuses anything else).
 *
 * Blocks are shared by reference counting: a fork shares every held block of its source
 * (both groups), and the first write into a shared block (the partly filled tail of a fork
 * or of a truncated sequence) copies it first (copy on write, cera_kv_seq_reserve). Each
 * sequence also holds a slot id (0 .. n_seq_max-1) that backends index their per-sequence
 * state by (a GPU's kept logits row). A full pool is a status (CERA_ERR_CONTEXT_FULL),
 * never a crash; a closed sequence returns every block. Nothing here allocates after
 * cera_kv_pool_new but a sequence's block table; the pool's storage lives in host memory
 * (group data) for the CPU backend, or in the device backend's own memory, addressed by
 * the same block ids (each group's storage of its own).
 *
 * The pool is not locked: the engine serializes calls on it.
 */
#ifndef CERA_KV_KV_CACHE_H
#define CERA_KV_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"
#include "tensor/types.h"

#define CERA_KV_BLOCK 32 /* positions per block */

/* How K and V rows are kept: each one's element type and, for the block types, the size of
 * the Walsh–Hadamard pieces its rows are rotated in before they are quantized (cera.h): 0 =
 * not rotated. With a rotated K the backend rotates Q the same way; with a rotated V it rotates
 * the attention's output back. */
typedef struct cera_kv_format {
    cera_kv_type k, v; /* never CERA_KV_AS_K */
    int rot_k, rot_v;
} cera_kv_format;

/* The format an engine's params ask for, for a model of head size head_dim: V's type
 * resolved, each type checked (a block type needs head_dim % 32 == 0), and llama.cpp's
 * rotation rule when rotate is true and params->kv_rotation is 0: a block-type K is rotated
 * in pieces of the largest power of two dividing head_dim, a block-type V in pieces of 64,
 * both only when head_dim % 64 == 0. CERA_ERR_INVALID_ARG for an unknown type,
 * CERA_ERR_UNSUPPORTED for a head size the type cannot hold. */
cera_status cera_kv_format_of(const cera_engine_params *params, int head_dim, bool rotate,
                              cera_kv_format *out, cera_error *err);
/* The tensor type of a KV type (CERA_TYPE_F16, ...), and its name ("f16", "q8_0", ...). */
cera_type cera_kv_tensor_type(cera_kv_type type);
const char *cera_kv_type_name(cera_kv_type type);
/* Bytes of a row of n elements of a KV type. */
size_t cera_kv_row_bytes(cera_kv_type type, int n);

enum { CERA_KV_FULL, CERA_KV_SWA, CERA_KV_GROUPS };

/* What the pool is made for: the model's KV layers, their rows and windows. */
typedef struct cera_kv_layout {
    int n_layer;                  /* KV layers (a model layer's cera_layer.kv_index) */
    const int *row;               /* [n_layer] K (= V) row width: the layer's n_head_kv * head_dim */
    const bool *swa;              /* [n_layer] layers with the sliding window, or NULL: none */
    int window;                   /* the sliding layers' window W (positions), 0 when none slides */
    int n_blocks[CERA_KV_GROUPS]; /* blocks of each group (the sliding one's: 0 when none slides) */
} cera_kv_layout;

/* Where a KV layer's rows are inside its group's blocks. */
typedef struct cera_kv_layer {
    int group;          /* CERA_KV_FULL or CERA_KV_SWA */
    int row;            /* elements per K (or V) row */
    size_t offset;      /* bytes from the block's start to its K rows */
    size_t v_offset;    /* ... and to its V rows, after CERA_KV_BLOCK K rows */
    size_t row_bytes;   /* bytes of a K row */
    size_t v_row_bytes; /* bytes of a V row */
} cera_kv_layer;

typedef struct cera_kv_group {
    int n_layer; /* KV layers in this group; 0: the group is unused */
    int window;  /* 0: keeps every position; else the window W, older blocks are dropped */
    int n_blocks;
    size_t block_bytes; /* sum over its layers of CERA_KV_BLOCK * (K row + V row bytes) */
    uint8_t *data;      /* [n_blocks][block_bytes] in host storage, or NULL on a device */
    int32_t *refcount;  /* [n_blocks] */
    int32_t *free_ids;  /* [n_blocks]: a stack of unused block ids */
    int n_free;
} cera_kv_group;

typedef struct cera_kv_pool {
    cera_kv_format fmt;
    int n_layer;           /* KV layers, both groups */
    int kv_dim;            /* the one row width of a single-group pool of equal rows, else 0 */
    int n_blocks;          /* blocks of both groups (a single-group pool's: its group's) */
    cera_kv_layer *layers; /* [n_layer] */
    cera_kv_group group[CERA_KV_GROUPS];
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
    /* [CERA_KV_GROUPS][max_blocks] block tables, group g's at blocks + g * max_blocks (the
     * full group's first: what a device backend reads); -1 where a block was dropped */
    int32_t *blocks;
    int max_blocks;
    int n_blocks;              /* table entries in use (each group): positions < n_blocks * CERA_KV_BLOCK */
    int first[CERA_KV_GROUPS]; /* each group's first held block (0 but for the sliding group) */
    int n_pos;                 /* positions filled: 0 .. n_pos-1 */
} cera_kv_seq;

/* A block to copy before a write (copy on write): the device backend copies group's block
 * src to its block dst. */
typedef struct cera_kv_copy {
    int32_t src, dst;
    int group; /* CERA_KV_FULL or CERA_KV_SWA */
} cera_kv_copy;

/* Bytes of one block of group g for a layout (0 for a group without layers). */
size_t cera_kv_group_block_bytes(const cera_kv_layout *layout, const cera_kv_format *fmt, int g);

/* A pool for n_seq_max sequences of at most max_pos positions each, with layout's
 * layers and block counts; host_storage allocates the blocks' memory here (zeroed pages,
 * taken by the OS as they are first written); without it (a device pool) the backend
 * keeps every group's blocks in its own memory. */
cera_status cera_kv_pool_new(const cera_kv_format *fmt, const cera_kv_layout *layout, int n_seq_max,
                             int max_pos, size_t state_bytes, bool host_storage, cera_kv_pool **out,
                             cera_error *err);
void cera_kv_pool_free(cera_kv_pool *pool);

/* Opens an empty sequence (a slot and its block tables); CERA_ERR_NO_MEMORY naming
 * n_seq_max when every slot is taken. */
cera_status cera_kv_seq_open(cera_kv_pool *pool, cera_kv_seq *seq, cera_error *err);
/* Returns the sequence's blocks and its slot (a closed or zeroed sequence: nothing). */
void cera_kv_seq_close(cera_kv_seq *seq);
/* Opens dst as a copy of src's timeline: the same positions, every held block shared. */
cera_status cera_kv_seq_fork(const cera_kv_seq *src, cera_kv_seq *dst, cera_error *err);

/* Makes room to write positions seq->n_pos .. n_pos - 1: first returns the sliding
 * blocks wholly before the window of position seq->n_pos (no query from there on sees
 * them), then takes blocks from the pool and, when the block the first new position goes
 * to is shared, replaces it by a private copy (with host storage the rows are copied
 * here; for a device pool copy[0 .. *n_copy) say which blocks to copy, one per group at
 * most: copy has room for CERA_KV_GROUPS).
 * CERA_ERR_CONTEXT_FULL when the sequence's table (max_pos) or the pool has no room, with
 * nothing else changed. Does not change seq->n_pos. */
cera_status cera_kv_seq_reserve(cera_kv_seq *seq, int n_pos, cera_kv_copy *copy, int *n_copy,
                                cera_error *err);
/* Whether the sequence can be cut back to n_pos: 0, or a point whose window (the sliding
 * positions the next query sees) it still holds. */
bool cera_kv_seq_can_truncate(const cera_kv_seq *seq, int n_pos);
/* Drops positions >= n_pos, returning blocks no longer needed (the caller has checked
 * cera_kv_seq_can_truncate). */
void cera_kv_seq_truncate(cera_kv_seq *seq, int n_pos);

/* Gives an empty sequence n_pos positions (a saved session's, engine/state.c): fresh blocks
 * for table entries first[g] .. of each group, -1 before them (a sliding group's dropped
 * blocks; first[g] is 0 for a group without a window); the caller fills them.
 * CERA_ERR_CONTEXT_FULL when the table or the pool has no room, CERA_ERR_FORMAT for a
 * first[] that cannot be, with nothing changed. */
cera_status cera_kv_seq_restore(cera_kv_seq *seq, int n_pos, const int *first, cera_error *err);

/* Context shift (engine/shift.c): positions n_keep .. n_keep + n_discard - 1 are dropped and the
 * later ones move down by n_discard, so the sequence ends at n_pos - n_discard. The table entries
 * from n_keep's block on get fresh blocks (a block shared with a fork or a cached prefix is
 * never written); their old ids go to old[0 .. *n_old) (room for seq->max_blocks) for the caller
 * to copy the rows from, then to give back with cera_kv_release. Only for a pool without a
 * sliding group and without recurrent state (the caller checks). CERA_ERR_CONTEXT_FULL when the
 * pool lacks the fresh blocks, with nothing changed. */
cera_status cera_kv_seq_shift(cera_kv_seq *seq, int n_keep, int n_discard, int32_t *old, int *n_old,
                              cera_error *err);
/* Drops one reference to each of group g's blocks ids[0 .. n) (freed at none left). */
void cera_kv_release(cera_kv_pool *pool, int g, const int32_t *ids, int n);

/* The sequence's recurrent state in host storage, or NULL. */
static inline void *cera_kv_seq_state(const cera_kv_seq *seq) {
    return seq->pool->state ? seq->pool->state + (size_t)seq->id * seq->pool->state_bytes : NULL;
}

/* Row `pos` of KV layer `layer`'s K (kv = 0) or V (kv = 1) in host storage (layer: the
 * model layer's cera_layer.kv_index). The rows of one block are consecutive: the next
 * position's row follows at row_bytes (K) or v_row_bytes (V). */
static inline void *cera_kv_row(const cera_kv_seq *seq, int layer, int kv, int pos) {
    const cera_kv_pool *p = seq->pool;
    const cera_kv_layer *L = &p->layers[layer];
    const cera_kv_group *g = &p->group[L->group];
    const int32_t b = seq->blocks[(size_t)L->group * (size_t)seq->max_blocks + (size_t)(pos / CERA_KV_BLOCK)];
    return g->data + (size_t)b * g->block_bytes + (kv ? L->v_offset : L->offset) +
           (size_t)(pos % CERA_KV_BLOCK) * (kv ? L->v_row_bytes : L->row_bytes);
}

#endif

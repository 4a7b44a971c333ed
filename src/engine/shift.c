/*
 * shift.c — context shift: a session whose context is full drops a run of positions after
 * the first n_keep and moves the later ones down, as llama.cpp's llama_memory_seq_rm +
 * llama_memory_seq_add, so that generation goes on instead of stopping.
 *
 * The moved keys were rotated for their old positions; rotary embeddings compose, so each
 * moved K row is rotated once more by the position delta -n_discard, as llama.cpp's K-shift
 * does: the row read as floats (in any KV type; a Walsh–Hadamard-rotated K turned back
 * first, backend/cpu/kv_rows.h), rotated with the model's own rope (its base, scaling and
 * frequency factors, backend/cpu/ops.h: ggml's arithmetic) at position delta, turned again
 * and stored back in its type. V rows are copied as they are.
 *
 * The pool gives the sequence fresh blocks from n_keep's block on (kv_cache.h), so a block
 * shared with a fork or a cached prefix is never written: the new blocks are filled from
 * the old ones, which are then given back. With host storage the rows move in place in the
 * pool's memory; a device pool goes through the backend's kv_io, a block at a time, which
 * needs the device block to be laid out as the pool describes (F16 and F32 caches; the
 * device's block types keep their own layout). A
 * model with a recurrent state (LFM2) or sliding-window layers (Gemma 3) cannot shift: the
 * state has already absorbed the dropped tokens, and a window's rows are not all kept
 * (llama.cpp refuses both too).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kv_rows.h"
#include "backend/cpu/ops.h"
#include "engine/engine_impl.h"
#include "model/graph.h"

#define SRC_SLOTS 3 /* old blocks a new block's rows come from: the kept part's, and two moved ones */

typedef struct shift_job {
    cera_engine *e;
    const cera_kv_group *G;
    bool host;
    int32_t src_id[SRC_SLOTS]; /* device pools: which old blocks the slots hold (-1: none) */
    uint8_t *src_buf[SRC_SLOTS];
    int next_slot;
} shift_job;

/* The bytes of old block id: in the pool (host storage) or read from the device. */
static const uint8_t *old_block(shift_job *j, int32_t id, cera_error *err) {
    if (j->host) return j->G->data + (size_t)id * j->G->block_bytes;
    for (int i = 0; i < SRC_SLOTS; i++)
        if (j->src_id[i] == id) return j->src_buf[i];
    const int i = j->next_slot;
    j->next_slot = (j->next_slot + 1) % SRC_SLOTS;
    if (j->e->backend->kv_io(j->e->backend, CERA_KV_FULL, id, j->src_buf[i], false, err)) return NULL;
    j->src_id[i] = id;
    return j->src_buf[i];
}

/* Rotates one K row (n_head_kv heads) by the cache's angle, in the pool's K format. */
static void rotate_row(const cera_rope *r, const float *cache, const cera_kv_format *f, void *row, float *tmp,
                       int n_heads, int head_dim) {
    const int n = n_heads * head_dim;
    cera_cpu_kv_load(f->k, row, tmp, n);
    if (f->rot_k) cera_fwht_f32(tmp, n, f->rot_k);
    cera_rope_apply(r, cache, tmp, n_heads, head_dim);
    if (f->rot_k) cera_fwht_f32(tmp, n, f->rot_k);
    cera_cpu_kv_store(f->k, tmp, row, n);
}

cera_status cera_session_shift(cera_session *s, int n_keep, int n_discard, cera_error *err) {
    cera_error_clear(err);
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "shift: session is NULL");
    cera_engine *e = s->engine;
    const cera_model *m = &e->model;
    cera_kv_pool *kv = e->kv;
    const int n_pos = s->seq.n_pos;
    if (n_keep < 0 || n_discard < 1 || n_keep > n_pos - n_discard)
        return cera_fail(
            err, CERA_ERR_INVALID_ARG,
            "shift: keep %d and drop %d of %d positions (needs keep >= 0, drop >= 1, keep + drop <= "
            "n_past)",
            n_keep, n_discard, n_pos);
    if (kv->state_bytes)
        return cera_fail(
            err, CERA_ERR_UNSUPPORTED,
            "shift: %s keeps a recurrent state that has absorbed the dropped tokens: its context "
            "cannot shift",
            cera_arch_name(m->hp.arch));
    if (kv->group[CERA_KV_SWA].n_layer)
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "shift: %s's sliding-window layers keep only their window: its context cannot shift",
                         cera_arch_name(m->hp.arch));
    const cera_kv_group *G = &kv->group[CERA_KV_FULL];
    const bool host = e->backend->kv_on_host;
    const bool plain = (kv->fmt.k == CERA_KV_F16 || kv->fmt.k == CERA_KV_F32) && kv->fmt.v == kv->fmt.k;
    if (!host && (!plain || !e->backend->kv_io || !e->backend->kv_block_bytes ||
                  e->backend->kv_block_bytes(e->backend, CERA_KV_FULL) != G->block_bytes))
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "shift: the %s backend's KV blocks cannot shift",
                         e->backend->name);

    /* which KV layers rotate their keys (granite without rope does not) */
    bool *rot = calloc((size_t)kv->n_layer, sizeof *rot);
    int32_t *old = malloc((size_t)s->seq.max_blocks * sizeof *old);
    float *tmp = malloc((size_t)m->hp.n_head_kv * (size_t)m->hp.head_dim * sizeof *tmp);
    float *cache = malloc((size_t)(m->hp.n_rot > 0 ? m->hp.n_rot : 1) * sizeof *cache);
    uint8_t *stage = host ? NULL : malloc((SRC_SLOTS + 1) * G->block_bytes);
    if (!rot || !old || !tmp || !cache || (!host && !stage)) {
        free(rot);
        free(old);
        free(tmp);
        free(cache);
        free(stage);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "shift");
    }
    for (int i = 0; i < m->graph->n_ops; i++) {
        const cera_op *op = &m->graph->ops[i];
        const int kl = op->kind == CERA_OP_ROPE_KV ? m->layers[op->layer].kv_index : -1;
        if (kl >= 0 && kl < kv->n_layer) rot[kl] = op->rope;
    }
    cera_rope rope;
    cera_rope_init(&rope, &m->hp, cera_model_rope_factors(m, e->params.n_ctx));
    cera_rope_cache(&rope, -n_discard, cache);

    shift_job j = {.e = e, .G = G, .host = host};
    for (int i = 0; i < SRC_SLOTS; i++) {
        j.src_id[i] = -1;
        j.src_buf[i] = host ? NULL : stage + (size_t)(i + 1) * G->block_bytes;
    }
    pthread_mutex_lock(&e->forward_lock);
    int n_old = 0;
    const int b0 = n_keep / CERA_KV_BLOCK;
    cera_status st = cera_kv_seq_shift(&s->seq, n_keep, n_discard, old, &n_old, err);
    const bool shifted = st == CERA_OK; /* else nothing changed */
    const int n_new = s->seq.n_pos;
    const int32_t *table = s->seq.blocks; /* the full group's */
    for (int b = b0; st == CERA_OK && b * CERA_KV_BLOCK < n_new; b++) {
        uint8_t *dst = host ? G->data + (size_t)table[b] * G->block_bytes : stage;
        for (int r = 0; r < CERA_KV_BLOCK && st == CERA_OK; r++) {
            const int p = b * CERA_KV_BLOCK + r;
            if (p >= n_new) break;
            const int src = p < n_keep ? p : p + n_discard;
            const uint8_t *sb = old_block(&j, old[src / CERA_KV_BLOCK - b0], err);
            if (!sb) {
                st = err ? err->status : CERA_ERR_DEVICE;
                break;
            }
            for (int l = 0; l < kv->n_layer; l++) {
                const cera_kv_layer *L = &kv->layers[l];
                for (int k = 0; k < 2; k++) {
                    const size_t at = k ? L->v_offset : L->offset, rb = k ? L->v_row_bytes : L->row_bytes;
                    uint8_t *row = dst + at + (size_t)r * rb;
                    memmove(row, sb + at + (size_t)(src % CERA_KV_BLOCK) * rb, rb);
                    if (k == 0 && p >= n_keep && rot[l])
                        rotate_row(&rope, cache, &kv->fmt, row, tmp, L->row / m->hp.head_dim, m->hp.head_dim);
                }
            }
        }
        if (st == CERA_OK && !host)
            st = e->backend->kv_io(e->backend, CERA_KV_FULL, table[b], stage, true, err);
    }
    cera_kv_release(kv, CERA_KV_FULL, old, n_old);
    pthread_mutex_unlock(&e->forward_lock);
    free(rot);
    free(old);
    free(tmp);
    free(cache);
    free(stage);
    if (st) {
        /* a device copy failed part-way: the moved rows are lost, the kept prefix is what is left */
        if (shifted) cera_session_truncate(s, n_keep, NULL);
        return st;
    }
    memmove(s->tokens + n_keep, s->tokens + n_keep + n_discard, (size_t)(n_new - n_keep) * sizeof *s->tokens);
    return CERA_OK;
}

/* kv_cache.c — the paged KV pool's groups, blocks, sequence slots and block tables (see kv_cache.h). */
#include "kv/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

cera_type cera_kv_tensor_type(cera_kv_type type) {
    switch (type) {
    case CERA_KV_F32: return CERA_TYPE_F32;
    case CERA_KV_BF16: return CERA_TYPE_BF16;
    case CERA_KV_Q8_0: return CERA_TYPE_Q8_0;
    case CERA_KV_Q4_0: return CERA_TYPE_Q4_0;
    default: return CERA_TYPE_F16;
    }
}

static bool known_type(cera_kv_type t) {
    return t == CERA_KV_F16 || t == CERA_KV_F32 || t == CERA_KV_BF16 || t == CERA_KV_Q8_0 ||
           t == CERA_KV_Q4_0;
}

static bool block_type(cera_kv_type t) { return t == CERA_KV_Q8_0 || t == CERA_KV_Q4_0; }

const char *cera_kv_type_name(cera_kv_type type) {
    return known_type(type) ? cera_type_get(cera_kv_tensor_type(type))->name : "unknown";
}

size_t cera_kv_row_bytes(cera_kv_type type, int n) { return cera_row_size(cera_kv_tensor_type(type), n); }

cera_status cera_kv_format_of(const cera_engine_params *params, int head_dim, bool rotate,
                              cera_kv_format *out, cera_error *err) {
    cera_kv_format f = {params->kv_type,
                        params->kv_type_v == CERA_KV_AS_K ? params->kv_type : params->kv_type_v, 0, 0};
    if (!known_type(f.k) || !known_type(f.v))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "unknown KV cache type %d",
                         (int)(known_type(f.k) ? f.v : f.k));
    if (params->kv_rotation != 0 && params->kv_rotation != -1)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "kv_rotation %d (0 or -1)", params->kv_rotation);
    for (int kv = 0; kv < 2; kv++) {
        const cera_kv_type t = kv ? f.v : f.k;
        if (block_type(t) && (head_dim <= 0 || head_dim % 32))
            return cera_fail(err, CERA_ERR_UNSUPPORTED,
                             "a %s %s cache needs a head size that is a multiple of 32 (the model's: %d)",
                             cera_kv_type_name(t), kv ? "V" : "K", head_dim);
    }
    if (rotate && params->kv_rotation == 0 && head_dim % 64 == 0) {
        if (block_type(f.k))
            for (f.rot_k = 64; head_dim % (2 * f.rot_k) == 0;) f.rot_k *= 2;
        if (block_type(f.v)) f.rot_v = 64;
    }
    *out = f;
    return CERA_OK;
}

/* The group a layout's layer belongs to. */
static int layer_group(const cera_kv_layout *l, int i) {
    return l->swa && l->swa[i] ? CERA_KV_SWA : CERA_KV_FULL;
}

size_t cera_kv_group_block_bytes(const cera_kv_layout *layout, const cera_kv_format *fmt, int g) {
    size_t bytes = 0;
    for (int i = 0; i < layout->n_layer; i++)
        if (layer_group(layout, i) == g)
            bytes += CERA_KV_BLOCK *
                     (cera_kv_row_bytes(fmt->k, layout->row[i]) + cera_kv_row_bytes(fmt->v, layout->row[i]));
    return bytes;
}

cera_status cera_kv_pool_new(const cera_kv_format *fmt, const cera_kv_layout *layout, int n_seq_max,
                             int max_pos, size_t state_bytes, bool host_storage, cera_kv_pool **out,
                             cera_error *err) {
    *out = NULL;
    if (!known_type(fmt->k) || !known_type(fmt->v))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "unknown KV cache type %d", (int)fmt->k);
    if (layout->n_layer <= 0 || n_seq_max <= 0 || max_pos <= 0 || layout->window < 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "KV cache: bad size");
    int n_in[CERA_KV_GROUPS] = {0};
    for (int i = 0; i < layout->n_layer; i++) {
        if (layout->row[i] <= 0)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "KV cache: layer %d has no row", i);
        if ((block_type(fmt->k) || block_type(fmt->v)) && layout->row[i] % 32)
            return cera_fail(err, CERA_ERR_UNSUPPORTED,
                             "KV cache: layer %d's rows of %d are not whole blocks", i, layout->row[i]);
        n_in[layer_group(layout, i)]++;
    }
    if (n_in[CERA_KV_SWA] && layout->window <= 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "KV cache: sliding layers without a window");
    for (int g = 0; g < CERA_KV_GROUPS; g++)
        if (n_in[g] && layout->n_blocks[g] <= 0)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "KV cache: bad size");
    cera_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return cera_fail(err, CERA_ERR_NO_MEMORY, "KV cache pool");
    p->fmt = *fmt;
    p->n_layer = layout->n_layer;
    p->max_pos = max_pos;
    p->n_seq_max = n_seq_max;
    p->state_bytes = state_bytes;
    p->layers = calloc((size_t)layout->n_layer, sizeof *p->layers);
    p->free_seq = malloc((size_t)n_seq_max * sizeof *p->free_seq);
    bool ok = p->layers && p->free_seq;
    /* each group's layers in KV-layer order, K then V: a single group of equal rows is
     * [n_layer][K|V][CERA_KV_BLOCK][kv_dim] */
    p->kv_dim = n_in[CERA_KV_SWA] ? 0 : layout->row[0];
    for (int i = 0; ok && i < layout->n_layer; i++) {
        cera_kv_layer *L = &p->layers[i];
        L->group = layer_group(layout, i);
        L->row = layout->row[i];
        L->row_bytes = cera_kv_row_bytes(fmt->k, L->row);
        L->v_row_bytes = cera_kv_row_bytes(fmt->v, L->row);
        L->offset = p->group[L->group].block_bytes;
        L->v_offset = L->offset + CERA_KV_BLOCK * L->row_bytes;
        p->group[L->group].block_bytes += CERA_KV_BLOCK * (L->row_bytes + L->v_row_bytes);
        p->group[L->group].n_layer++;
        if (L->row != layout->row[0]) p->kv_dim = 0;
    }
    for (int g = 0; ok && g < CERA_KV_GROUPS; g++) {
        cera_kv_group *G = &p->group[g];
        if (!G->n_layer) continue;
        G->window = g == CERA_KV_SWA ? layout->window : 0;
        G->n_blocks = layout->n_blocks[g];
        p->n_blocks += G->n_blocks;
        G->refcount = calloc((size_t)G->n_blocks, sizeof *G->refcount);
        G->free_ids = malloc((size_t)G->n_blocks * sizeof *G->free_ids);
        if (host_storage) G->data = calloc((size_t)G->n_blocks, G->block_bytes);
        ok = G->refcount && G->free_ids && (!host_storage || G->data);
        /* stacks popped from the end: block 0 is handed out first */
        for (int i = 0; ok && i < G->n_blocks; i++) G->free_ids[i] = G->n_blocks - 1 - i;
        G->n_free = G->n_blocks;
    }
    if (ok && host_storage && state_bytes) ok = (p->state = calloc((size_t)n_seq_max, state_bytes)) != NULL;
    if (!ok) {
        cera_kv_pool_free(p);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "KV cache: %d + %d blocks of %zu + %zu bytes",
                         layout->n_blocks[CERA_KV_FULL], layout->n_blocks[CERA_KV_SWA],
                         cera_kv_group_block_bytes(layout, fmt, CERA_KV_FULL),
                         cera_kv_group_block_bytes(layout, fmt, CERA_KV_SWA));
    }
    for (int i = 0; i < n_seq_max; i++) p->free_seq[i] = n_seq_max - 1 - i;
    p->n_free_seq = n_seq_max;
    *out = p;
    return CERA_OK;
}

void cera_kv_pool_free(cera_kv_pool *pool) {
    if (!pool) return;
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        free(pool->group[g].data);
        free(pool->group[g].refcount);
        free(pool->group[g].free_ids);
    }
    free(pool->layers);
    free(pool->free_seq);
    free(pool->state);
    free(pool);
}

static int32_t *table(const cera_kv_seq *seq, int g) {
    return seq->blocks + (size_t)g * (size_t)seq->max_blocks;
}

cera_status cera_kv_seq_open(cera_kv_pool *pool, cera_kv_seq *seq, cera_error *err) {
    memset(seq, 0, sizeof *seq);
    if (pool->n_free_seq == 0)
        return cera_fail(err, CERA_ERR_NO_MEMORY,
                         "every one of the engine's %d sequence slots is taken (n_seq_max)", pool->n_seq_max);
    seq->max_blocks = (pool->max_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    seq->blocks = malloc((size_t)CERA_KV_GROUPS * (size_t)seq->max_blocks * sizeof *seq->blocks);
    if (!seq->blocks) return cera_fail(err, CERA_ERR_NO_MEMORY, "KV block table");
    for (size_t i = 0; i < (size_t)CERA_KV_GROUPS * (size_t)seq->max_blocks; i++) seq->blocks[i] = -1;
    seq->pool = pool;
    seq->id = pool->free_seq[--pool->n_free_seq];
    if (pool->state) memset(cera_kv_seq_state(seq), 0, pool->state_bytes);
    return CERA_OK;
}

static void put_block(cera_kv_group *G, int32_t b) {
    if (--G->refcount[b] == 0) G->free_ids[G->n_free++] = b;
}

static int32_t take_block(cera_kv_group *G) {
    const int32_t b = G->free_ids[--G->n_free];
    G->refcount[b] = 1;
    return b;
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
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        cera_kv_group *G = &src->pool->group[g];
        if (!G->n_layer) continue;
        const int32_t *s = table(src, g);
        int32_t *d = table(dst, g);
        for (int i = src->first[g]; i < src->n_blocks; i++) {
            d[i] = s[i];
            G->refcount[s[i]]++;
        }
        dst->first[g] = src->first[g];
    }
    dst->n_blocks = src->n_blocks;
    dst->n_pos = src->n_pos;
    if (src->pool->state) memcpy(cera_kv_seq_state(dst), cera_kv_seq_state(src), src->pool->state_bytes);
    return CERA_OK;
}

/* The first block the window of position pos needs (blocks before it hold only keys no
 * query at pos or later sees); 0 for a group without a window. */
static int window_first_block(const cera_kv_group *G, int pos) {
    if (!G->window || pos - G->window + 1 <= 0) return 0;
    return (pos - G->window + 1) / CERA_KV_BLOCK;
}

cera_status cera_kv_seq_reserve(cera_kv_seq *seq, int n_pos, cera_kv_copy *copy, int *n_copy,
                                cera_error *err) {
    *n_copy = 0;
    const int need = (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    if (need > seq->max_blocks)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "context full: %d positions needed, %d available", n_pos,
                         seq->max_blocks * CERA_KV_BLOCK);
    cera_kv_pool *p = seq->pool;
    /* the sliding blocks wholly before the window of the next position go back first */
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        cera_kv_group *G = &p->group[g];
        if (!G->n_layer || !G->window) continue;
        int32_t *t = table(seq, g);
        const int drop = window_first_block(G, seq->n_pos);
        for (; seq->first[g] < drop && seq->first[g] < seq->n_blocks; seq->first[g]++) {
            put_block(G, t[seq->first[g]]);
            t[seq->first[g]] = -1;
        }
    }
    /* the block the first new position goes to, when the sequence holds it already and
     * shares it, is written only after it has been copied */
    const int first = seq->n_pos / CERA_KV_BLOCK;
    bool cow[CERA_KV_GROUPS] = {false};
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        cera_kv_group *G = &p->group[g];
        if (!G->n_layer) continue;
        cow[g] = n_pos > seq->n_pos && first < seq->n_blocks && G->refcount[table(seq, g)[first]] > 1;
        const int take = (need > seq->n_blocks ? need - seq->n_blocks : 0) + (cow[g] ? 1 : 0);
        if (take > G->n_free)
            return cera_fail(err, CERA_ERR_CONTEXT_FULL,
                             "the engine's KV pool is exhausted (%d %sblocks free, %d needed): free sessions "
                             "or open the engine with a larger kv_size",
                             G->n_free, g == CERA_KV_SWA ? "sliding-window " : "", take);
    }
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        cera_kv_group *G = &p->group[g];
        if (!G->n_layer) continue;
        int32_t *t = table(seq, g);
        if (cow[g]) {
            const int32_t old = t[first], b = take_block(G);
            if (G->data)
                memcpy(G->data + (size_t)b * G->block_bytes, G->data + (size_t)old * G->block_bytes,
                       G->block_bytes);
            else
                copy[(*n_copy)++] = (cera_kv_copy){old, b, g};
            t[first] = b;
            put_block(G, old);
        }
        for (int i = seq->n_blocks; i < need; i++) t[i] = take_block(G);
    }
    if (need > seq->n_blocks) seq->n_blocks = need;
    return CERA_OK;
}

bool cera_kv_seq_can_truncate(const cera_kv_seq *seq, int n_pos) {
    if (n_pos <= 0 || n_pos >= seq->n_pos) return true;
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        const cera_kv_group *G = &seq->pool->group[g];
        if (G->n_layer && window_first_block(G, n_pos) < seq->first[g]) return false;
    }
    return true;
}

void cera_kv_seq_truncate(cera_kv_seq *seq, int n_pos) {
    if (n_pos < 0) n_pos = 0;
    const int keep = (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    cera_kv_pool *p = seq->pool;
    if (keep < seq->n_blocks) {
        for (int g = 0; g < CERA_KV_GROUPS; g++) {
            cera_kv_group *G = &p->group[g];
            if (!G->n_layer) continue;
            int32_t *t = table(seq, g);
            for (int i = seq->n_blocks - 1; i >= keep; i--) {
                if (t[i] >= 0) put_block(G, t[i]);
                t[i] = -1;
            }
            if (seq->first[g] > keep) seq->first[g] = keep;
        }
        seq->n_blocks = keep;
    }
    if (seq->n_pos > n_pos) seq->n_pos = n_pos;
    if (n_pos == 0 && p->state) memset(cera_kv_seq_state(seq), 0, p->state_bytes);
}

cera_status cera_kv_seq_shift(cera_kv_seq *seq, int n_keep, int n_discard, int32_t *old, int *n_old,
                              cera_error *err) {
    cera_kv_pool *p = seq->pool;
    cera_kv_group *G = &p->group[CERA_KV_FULL];
    *n_old = 0;
    if (p->group[CERA_KV_SWA].n_layer || n_keep < 0 || n_discard < 1 || n_keep + n_discard > seq->n_pos)
        return cera_fail(err, CERA_ERR_INTERNAL, "KV shift of %d after %d in %d positions", n_discard, n_keep,
                         seq->n_pos);
    const int b0 = n_keep / CERA_KV_BLOCK, n_pos = seq->n_pos - n_discard;
    const int nb = (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    if (nb - b0 > G->n_free)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "context shift: %d free KV blocks, %d needed", G->n_free,
                         nb - b0);
    int32_t *t = table(seq, CERA_KV_FULL);
    for (int i = b0; i < seq->n_blocks; i++) {
        old[(*n_old)++] = t[i];
        t[i] = i < nb ? take_block(G) : -1;
    }
    seq->n_blocks = nb;
    seq->n_pos = n_pos;
    return CERA_OK;
}

void cera_kv_release(cera_kv_pool *pool, int g, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0) put_block(&pool->group[g], ids[i]);
}

cera_status cera_kv_seq_restore(cera_kv_seq *seq, int n_pos, const int *first, cera_error *err) {
    const int need = (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    if (seq->n_pos || seq->n_blocks)
        return cera_fail(err, CERA_ERR_INTERNAL, "KV restore into a sequence that holds positions");
    if (n_pos < 0 || need > seq->max_blocks)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "context full: %d positions saved, %d available", n_pos,
                         seq->max_blocks * CERA_KV_BLOCK);
    cera_kv_pool *p = seq->pool;
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        const cera_kv_group *G = &p->group[g];
        if (!G->n_layer) continue;
        if (first[g] < 0 || first[g] > need || (!G->window && first[g] != 0))
            return cera_fail(err, CERA_ERR_FORMAT, "KV restore: group %d starts at block %d of %d", g,
                             first[g], need);
        if (need - first[g] > G->n_free)
            return cera_fail(err, CERA_ERR_CONTEXT_FULL,
                             "the engine's KV pool is exhausted (%d %sblocks free, %d needed): free sessions "
                             "or open the engine with a larger kv_size",
                             G->n_free, g == CERA_KV_SWA ? "sliding-window " : "", need - first[g]);
    }
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        cera_kv_group *G = &p->group[g];
        if (!G->n_layer) continue;
        int32_t *t = table(seq, g);
        for (int i = 0; i < need; i++) t[i] = i < first[g] ? -1 : take_block(G);
        seq->first[g] = first[g];
    }
    seq->n_blocks = need;
    seq->n_pos = n_pos;
    return CERA_OK;
}

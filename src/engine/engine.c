/*
 * engine.c — the public engine API: open a GGUF model (mapped or the caller's bytes, never copied), choose
 * the compute backend, and the tokenizer entry points of include/cera.h.
 *
 * The device choice lives here alone (open_backend): CPU, or CUDA when built with
 * CERA_CUDA and asked for (or AUTO and a GPU answers).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

cera_engine_params cera_engine_default_params(void) {
    cera_engine_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.n_threads = 0;
    p.n_ctx = 0;
    p.n_batch = 0;
    p.kv_type = CERA_KV_F16;
    p.kv_type_v = CERA_KV_AS_K;
    p.device = CERA_DEVICE_AUTO;
    return p;
}

static cera_status open_backend(cera_engine *e, cera_error *err) {
    const cera_device dev = e->params.device;
#ifdef CERA_CUDA
    if (dev == CERA_DEVICE_CUDA) return cera_cuda_backend_open(&e->model, &e->params, &e->backend, err);
    if (dev == CERA_DEVICE_AUTO &&
        cera_cuda_backend_open(&e->model, &e->params, &e->backend, NULL) == CERA_OK)
        return CERA_OK;
#else
    if (dev == CERA_DEVICE_CUDA)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "CUDA device requested but cera was built without CUDA");
#endif
    if (dev != CERA_DEVICE_AUTO && dev != CERA_DEVICE_CPU && dev != CERA_DEVICE_CUDA)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "unknown device %d", (int)dev);
    return cera_cpu_backend_open(&e->model, &e->params, &e->backend, err);
}

cera_status cera_params_read(void *dst, size_t size, const void *src, const char *what, cera_error *err) {
    if (!src) return CERA_OK;
    uint32_t n;
    memcpy(&n, src, sizeof n);
    if (n < sizeof n || n > size)
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "%s: struct_size %u is not one this library knows (at most %zu): start from its "
                         "*_default_params()",
                         what, n, size);
    memcpy(dst, src, n);
    memcpy(dst, &(uint32_t){(uint32_t)size}, sizeof n);
    return CERA_OK;
}

/* The bytes of a file's data section. */
static size_t data_bytes(const gguf_file *f) {
    return f->size > f->data_offset ? (size_t)(f->size - f->data_offset) : 0;
}

/* Reads the weights (the data sections of the mappings: every shard of a split model)
 * ahead in chunks, one byte per page, saying how far it got: from disk this is most of a
 * load, and the backend then finds the pages in memory. */
static void read_ahead(const gguf_file *set, void (*progress)(float, void *), void *user) {
    const size_t page = 4096, chunk = (size_t)64 << 20;
    size_t total = 0, done = 0;
    for (uint32_t p = 0; p < gguf_n_files(set); p++) total += data_bytes(gguf_file_part(set, p));
    volatile uint8_t sink = 0;
    progress(0.0f, user);
    for (uint32_t p = 0; p < gguf_n_files(set); p++) {
        const gguf_file *f = gguf_file_part(set, p);
        const uint8_t *base = f->base + f->data_offset;
        const size_t n = data_bytes(f);
        for (size_t off = 0; off < n; off += chunk) {
            const size_t end = n - off < chunk ? n : off + chunk;
            for (size_t i = off; i < end; i += page) sink ^= base[i];
            progress((float)((double)(done + end) / (double)total), user);
        }
        done += n;
    }
    (void)sink;
}

/* Blocks of each group for the engine's KV pool. Without kv_bytes: n_seq_max full
 * contexts. A sliding-window group needs at most min(n_ctx, W - 1 + n_batch) positions
 * plus a block per sequence (its window before a batch and the batch itself), so it gets
 * that many per slot; with kv_bytes, the sliding group takes that share first (or, when
 * the budget is smaller, one sliding block beside each full one) and the full group the
 * rest. */
static void plan_blocks(const cera_engine_params *p, size_t full_bytes, size_t swa_bytes, int window,
                        size_t n_blocks[CERA_KV_GROUPS]) {
    const size_t per_ctx = ((size_t)p->n_ctx + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    size_t swa_per_seq = 0;
    if (swa_bytes) {
        swa_per_seq = ((size_t)window - 1 + (size_t)p->n_batch + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK + 1;
        if (swa_per_seq > per_ctx) swa_per_seq = per_ctx;
    }
    const size_t swa_need = swa_per_seq * (size_t)p->n_seq_max;
    n_blocks[CERA_KV_FULL] = full_bytes ? per_ctx * (size_t)p->n_seq_max : 0;
    n_blocks[CERA_KV_SWA] = swa_need;
    if (!p->kv_bytes) return;
    if (!full_bytes) {
        n_blocks[CERA_KV_SWA] = p->kv_bytes / swa_bytes;
    } else if (swa_need && p->kv_bytes / (full_bytes + swa_bytes) < swa_need) {
        n_blocks[CERA_KV_FULL] = n_blocks[CERA_KV_SWA] = p->kv_bytes / (full_bytes + swa_bytes);
    } else {
        n_blocks[CERA_KV_FULL] = (p->kv_bytes - swa_need * swa_bytes) / full_bytes;
    }
}

/* The engine's KV pool: n_seq_max slots, kv_bytes of blocks (or n_seq_max full contexts),
 * each KV layer with its own row width and, for sliding-window layers, a group of its own
 * (kv/kv_cache.h); storage on the host for the CPU backend (pages taken as they are
 * written) or in the device backend's memory. */
static cera_status open_kv(cera_engine *e, cera_error *err) {
    const cera_model *m = &e->model;
    const cera_hparams *hp = &m->hp;
    const cera_engine_params *p = &e->params;
    int *row = calloc((size_t)hp->n_kv_layer, sizeof *row);
    bool *swa = calloc((size_t)hp->n_kv_layer, sizeof *swa);
    if (!row || !swa) {
        free(row);
        free(swa);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "KV layout");
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const cera_layer *L = &m->layers[il];
        if (L->kv_index < 0) continue;
        row[L->kv_index] = L->n_head_kv * hp->head_dim;
        swa[L->kv_index] = L->swa;
    }
    cera_kv_layout lay = {hp->n_kv_layer, row, swa, hp->n_swa, {0, 0}};
    cera_kv_format fmt;
    cera_status st = cera_kv_format_of(p, hp->head_dim, e->backend->kv_rotates, &fmt, err);
    const size_t full_bytes = st ? 0 : cera_kv_group_block_bytes(&lay, &fmt, CERA_KV_FULL),
                 swa_bytes = st ? 0 : cera_kv_group_block_bytes(&lay, &fmt, CERA_KV_SWA);
    /* LFM2: each conv layer keeps the last l_cache - 1 rows of its B ⊙ X per sequence */
    const size_t state_bytes = hp->n_conv_layer ? (size_t)hp->n_conv_layer * (size_t)(hp->conv_l_cache - 1) *
                                                      hp->n_embd * sizeof(float)
                                                : 0;
    size_t n_blocks[CERA_KV_GROUPS];
    plan_blocks(p, full_bytes, swa_bytes, hp->n_swa, n_blocks);
    for (int g = 0; g < CERA_KV_GROUPS && !st; g++) {
        const size_t bytes = g == CERA_KV_FULL ? full_bytes : swa_bytes;
        if (bytes && n_blocks[g] < 1)
            st = cera_fail(err, CERA_ERR_INVALID_ARG, "kv_bytes %zu holds no KV block (%zu bytes each)",
                           p->kv_bytes, full_bytes + swa_bytes);
        if (n_blocks[g] > (size_t)INT32_MAX / 4) n_blocks[g] = (size_t)INT32_MAX / 4;
        lay.n_blocks[g] = (int)n_blocks[g];
    }
    if (!st)
        st = cera_kv_pool_new(&fmt, &lay, p->n_seq_max, p->n_ctx, state_bytes, e->backend->kv_on_host, &e->kv,
                              err);
    free(row);
    free(swa);
    if (st) return st;
    if (e->backend->kv_init) return e->backend->kv_init(e->backend, e->kv, err);
    return CERA_OK;
}

/* Opens an engine over a model file (data NULL: path is opened and mapped) or over the
 * caller's bytes (path is then only the name that messages give the model). */
static cera_status engine_open(const char *path, const void *data, size_t size,
                               const cera_engine_params *params, cera_engine **out, cera_error *err) {
    cera_engine_params p = cera_engine_default_params();
    cera_status st = cera_params_read(&p, sizeof p, params, "cera_engine_params", err);
    if (st) return st;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0 || p.n_seq_max < 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "negative n_ctx, n_batch, n_threads or n_seq_max");
    if (p.n_seq_max > 65536)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "n_seq_max %d exceeds 65536", p.n_seq_max);
    if (p.n_seq_max == 0) p.n_seq_max = 8;
    /* bounds that keep every position, block count and per-batch size product in an int */
    if (p.n_ctx > CERA_MAX_CTX || p.n_batch > CERA_MAX_CTX)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "n_ctx %d or n_batch %d exceeds %d", p.n_ctx, p.n_batch,
                         CERA_MAX_CTX);
    if (p.n_threads > 1024)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "n_threads %d exceeds 1024", p.n_threads);
    cera_kv_format fmt; /* the types and the rotation switch, checked before the model is read */
    if ((st = cera_kv_format_of(&p, 64, false, &fmt, err))) return st;

    cera_engine *e = calloc(1, sizeof *e);
    if (!e) return cera_fail(err, CERA_ERR_NO_MEMORY, "engine");
    pthread_mutex_init(&e->forward_lock, NULL);
    st = data ? gguf_open_memory(data, size, &e->file, err) : gguf_open_model(path, &e->file, err);
    if (st) {
        if (data) cera_error_prefix(err, "%s", path);
        goto fail;
    }
    if ((st = cera_model_load(e->file, &e->model, err))) {
        cera_error_prefix(err, "%s", path);
        goto fail;
    }
    if ((st = cera_tokenizer_load(e->file, &e->tok, err))) {
        cera_error_prefix(err, "%s", path);
        goto fail;
    }
    if (p.progress) read_ahead(e->file, p.progress, p.progress_user);
    if (cera_tokenizer_n_vocab(e->tok) > e->model.hp.n_vocab) {
        st = cera_fail(err, CERA_ERR_FORMAT, "%s: tokenizer has %d tokens, the embedding only %d rows", path,
                       cera_tokenizer_n_vocab(e->tok), e->model.hp.n_vocab);
        goto fail;
    }
    if (p.n_ctx == 0)
        p.n_ctx =
            e->model.hp.n_ctx_train > 0 && e->model.hp.n_ctx_train < 4096 ? e->model.hp.n_ctx_train : 4096;
    if (p.n_batch == 0) p.n_batch = 512;
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;
    e->params = p;
    if ((st = open_backend(e, err)) || (st = open_kv(e, err))) {
        cera_error_prefix(err, "%s", path);
        goto fail;
    }
    if ((st = cera_batch_init(e, err))) goto fail;
    *out = e;
    return CERA_OK;
fail:
    cera_engine_close(e);
    return st;
}

cera_status cera_engine_open(const char *path, const cera_engine_params *params, cera_engine **out,
                             cera_error *err) {
    cera_error_clear(err);
    if (!out) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_engine_open: out is NULL");
    *out = NULL;
    if (!path) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_engine_open: path is NULL");
    return engine_open(path, NULL, 0, params, out, err);
}

cera_status cera_engine_open_memory(const void *data, size_t size, const cera_engine_params *params,
                                    cera_engine **out, cera_error *err) {
    cera_error_clear(err);
    if (!out) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_engine_open_memory: out is NULL");
    *out = NULL;
    if (!data || !size)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_engine_open_memory: no bytes (data %s, size %zu)",
                         data ? "set" : "NULL", size);
    return engine_open("<memory>", data, size, params, out, err);
}

void cera_engine_close(cera_engine *e) {
    if (!e) return;
    if (e->backend && e->kv && e->backend->kv_free) e->backend->kv_free(e->backend);
    cera_kv_pool_free(e->kv);
    cera_batch_free(e);
    cera_grammar_tokens_free(e->gtok);
    if (e->backend) e->backend->free(e->backend);
    cera_tokenizer_free(e->tok);
    cera_model_free(&e->model);
    gguf_close(e->file);
    pthread_mutex_destroy(&e->forward_lock);
    free(e);
}

/* A NULL engine gives the "nothing" value of each (cera.h): 0, NULL, -1, false. */
int cera_engine_n_vocab(const cera_engine *e) { return e ? e->model.hp.n_vocab : 0; }
int cera_engine_n_ctx(const cera_engine *e) { return e ? e->params.n_ctx : 0; }
int cera_engine_n_ctx_train(const cera_engine *e) { return e ? e->model.hp.n_ctx_train : 0; }
const char *cera_engine_arch(const cera_engine *e) { return e ? cera_arch_name(e->model.hp.arch) : NULL; }
cera_device cera_engine_device(const cera_engine *e) {
    if (!e) return CERA_DEVICE_AUTO;
    return strcmp(e->backend->name, "cuda") == 0 ? CERA_DEVICE_CUDA : CERA_DEVICE_CPU;
}
cera_token cera_engine_bos(const cera_engine *e) { return e ? cera_tokenizer_bos(e->tok) : -1; }
cera_token cera_engine_eos(const cera_engine *e) { return e ? cera_tokenizer_eos(e->tok) : -1; }
bool cera_engine_is_eog(const cera_engine *e, cera_token token) {
    return e && cera_tokenizer_is_eog(e->tok, token);
}

cera_status cera_tokenize(const cera_engine *e, const char *text, size_t len, bool add_special,
                          bool parse_special, cera_token *tokens, size_t cap, size_t *n_tokens,
                          cera_error *err) {
    cera_error_clear(err);
    if (!e || (!text && len) || !n_tokens)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_tokenize: NULL argument");
    return cera_tokenizer_encode(e->tok, text ? text : "", len, add_special, parse_special, tokens, cap,
                                 n_tokens, err);
}

int cera_token_to_piece(const cera_engine *e, cera_token token, char *buf, size_t cap, bool render_special) {
    if (!e || (!buf && cap)) return -1;
    return cera_tokenizer_piece(e->tok, token, buf, cap, render_special);
}

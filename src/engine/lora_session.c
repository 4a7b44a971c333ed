/*
 * lora_session.c — the public adapter API (include/cera.h, "Adapters"): loading an
 * adapter for an engine, and each session's attached set (attach, rescale, detach).
 *
 * A session keeps its set (cera_lora_set) and a batch plan sized for n_batch rows,
 * allocated the first time an adapter is attached, so sessions without adapters cost
 * nothing and no eval allocates. Before each forward call, session.c asks
 * cera_lora_session_plan for the plan of its rows (NULL when nothing is active), and
 * the backend applies it on every projection.
 */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"
#include "lora/lora.h"

/* The last reference is gone: the backend drops its copy (a GPU's upload). */
static void adapter_freed(void *ctx, const cera_adapter *a) {
    cera_engine *e = ctx;
    pthread_mutex_lock(&e->forward_lock);
    e->backend->adapter_free(e->backend, a->id);
    pthread_mutex_unlock(&e->forward_lock);
}

cera_status cera_adapter_load(cera_engine *engine, const char *path, cera_adapter **out, cera_error *err) {
    cera_error_clear(err);
    if (!out) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_adapter_load: NULL argument");
    *out = NULL;
    if (!engine || !path) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_adapter_load: NULL argument");
    const cera_status st = cera_lora_load(&engine->model, path, out, err);
    if (st == CERA_OK && engine->backend->adapter_free) {
        (*out)->on_free = adapter_freed;
        (*out)->on_free_ctx = engine;
    }
    return st;
}

void cera_adapter_free(cera_adapter *adapter) { cera_lora_release(adapter); }

cera_status cera_session_set_adapter(cera_session *s, cera_adapter *a, float scale, cera_error *err) {
    cera_error_clear(err);
    if (!s || !a) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_set_adapter: NULL argument");
    if (a->model != &s->engine->model)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: adapter was loaded for another engine", a->source);
    if (!isfinite(scale)) return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: scale is not finite", a->source);
    if (!s->lora_batch.groups) {
        cera_status st = cera_lora_batch_init(&s->lora_batch, s->engine->params.n_batch, err);
        if (st) return st;
    }
    // room for the A·x of every row with the whole set, so no eval allocates it
    size_t ranks = (size_t)a->max_rank;
    for (int i = 0; i < s->lora.n; i++)
        if (s->lora.e[i].adapter != a) ranks += (size_t)s->lora.e[i].adapter->max_rank;
    cera_status st = cera_lora_batch_reserve(&s->lora_batch, ranks * (size_t)s->lora_batch.cap_rows, err);
    if (st) return st;
    return cera_lora_set_put(&s->lora, a, scale, err);
}

bool cera_session_remove_adapter(cera_session *s, const cera_adapter *a) {
    if (!s) return false;
    if (!a) {
        const bool any = s->lora.n > 0;
        cera_lora_set_clear(&s->lora);
        return any;
    }
    return cera_lora_set_remove(&s->lora, a);
}

int cera_session_n_adapters(const cera_session *s) { return s ? s->lora.n : 0; }

const cera_lora_batch *cera_lora_session_plan(cera_session *s, int n_rows) {
    if (cera_lora_set_empty(&s->lora) || !s->lora_batch.groups) return NULL;
    cera_lora_batch_build_uniform(&s->lora_batch, &s->lora, n_rows);
    return s->lora_batch.n_groups ? &s->lora_batch : NULL;
}

void cera_lora_session_free(cera_session *s) {
    cera_lora_set_clear(&s->lora);
    cera_lora_batch_free(&s->lora_batch);
}

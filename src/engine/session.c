/*
 * session.c — the public session API: one timeline over the engine's model, a sequence
 * of its KV pool, logits and sampler.
 *
 * An eval is the one-session case of cera_batch_eval (batch.c): the tokens go through
 * the backend in chunks of at most n_batch (a prompt is one chunk when it fits, a
 * generated token a chunk of one); the same forward serves both, so they give the same
 * logits for the same positions.
 *
 * With a backend that keeps logits on its device (backend.h: logits_get), an eval that
 * does not ask for all logits leaves the last row there: cera_session_sample runs the
 * chain on the device when the backend can (only the token comes back), and
 * cera_session_logits copies the row to the session's host buffer the first time it is
 * asked for after an eval (so a const session's buffer is filled lazily; NULL when that
 * copy fails).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

cera_session_params cera_session_default_params(void) {
    cera_session_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.sampler = cera_sampler_default_params();
    return p;
}

void cera_session_free(cera_session *s) {
    if (!s) return;
    cera_lora_session_free(s);
    cera_grammar_session_free(s);
    if (s->seq.pool) {
        pthread_mutex_lock(&s->engine->forward_lock);
        cera_kv_seq_close(&s->seq);
        pthread_mutex_unlock(&s->engine->forward_lock);
    }
    cera_sampler_free(s->sampler);
    free(s->logits);
    free(s->tokens);
    free(s);
}

/* A session with its sequence slot and buffers, and no sampler yet. */
static cera_status session_alloc(cera_engine *e, const cera_kv_seq *fork_of, cera_session **out,
                                 cera_error *err) {
    cera_session *s = calloc(1, sizeof *s);
    if (!s) return cera_fail(err, CERA_ERR_NO_MEMORY, "session");
    s->engine = e;
    s->pending_sampled = -1;
    s->spec_class = -1;
    s->pending_eval = -1;
    s->logit_cap_rows = 1;
    s->logits = malloc((size_t)e->model.hp.n_vocab * sizeof(float));
    s->tokens = malloc((size_t)e->params.n_ctx * sizeof *s->tokens);
    cera_status st = CERA_OK;
    if (!s->logits || !s->tokens) st = cera_fail(err, CERA_ERR_NO_MEMORY, "session buffers");
    if (!st) {
        pthread_mutex_lock(&e->forward_lock);
        st = fork_of ? cera_kv_seq_fork(fork_of, &s->seq, err) : cera_kv_seq_open(e->kv, &s->seq, err);
        if (!st && e->kv->state_bytes && e->backend->seq_state)
            st = e->backend->seq_state(e->backend, s->seq.id, fork_of ? fork_of->id : -1, err);
        pthread_mutex_unlock(&e->forward_lock);
    }
    if (st) {
        cera_session_free(s);
        return st;
    }
    *out = s;
    return CERA_OK;
}

cera_status cera_session_create(cera_engine *e, const cera_session_params *params, cera_session **out,
                                cera_error *err) {
    cera_error_clear(err);
    if (!e || !out) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_create: NULL argument");
    *out = NULL;
    cera_session_params p = cera_session_default_params();
    cera_status st = cera_params_read(&p, sizeof p, params, "cera_session_params", err);
    if (st) return st;
    cera_session *s = NULL;
    if ((st = session_alloc(e, NULL, &s, err))) return st;
    s->sampler_params = p.sampler;
    if ((st = cera_sampler_new(&s->sampler_params, e->model.hp.n_vocab, &s->sampler, err))) {
        cera_session_free(s);
        return st;
    }
    *out = s;
    return CERA_OK;
}

cera_status cera_session_fork(cera_session *src, cera_session **out, cera_error *err) {
    cera_error_clear(err);
    if (!src || !out) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_fork: NULL argument");
    *out = NULL;
    cera_status st = cera_session_flush_pending(src, err);
    if (st) return st;
    cera_engine *e = src->engine;
    const int n_vocab = e->model.hp.n_vocab;
    /* the logits go with the fork, on the host (the device slot is the source's) */
    if (src->n_logit_rows && !src->logits_fetched && !cera_session_logits(src, -1))
        return cera_fail(err, CERA_ERR_DEVICE, "cera_session_fork: the last logits could not be fetched");
    cera_session *s = NULL;
    if ((st = session_alloc(e, &src->seq, &s, err))) return st;
    s->sampler_params = src->sampler_params;
    if ((st = cera_sampler_clone(src->sampler, &s->sampler, err))) goto fail;
    if ((st = cera_grammar_session_fork(s, src, err))) goto fail;
    for (int i = 0; i < src->lora.n; i++)
        if ((st = cera_session_set_adapter(s, src->lora.e[i].adapter, src->lora.e[i].scale, err))) goto fail;
    memcpy(s->tokens, src->tokens, (size_t)src->seq.n_pos * sizeof *s->tokens);
    if (src->n_logit_rows) {
        const size_t rows = (size_t)src->n_logit_rows;
        if (rows > s->logit_cap_rows) {
            float *nl = realloc(s->logits, rows * (size_t)n_vocab * sizeof(float));
            if (!nl) {
                st = cera_fail(err, CERA_ERR_NO_MEMORY, "logits for %zu positions", rows);
                goto fail;
            }
            s->logits = nl;
            s->logit_cap_rows = rows;
        }
        memcpy(s->logits, src->logits, rows * (size_t)n_vocab * sizeof(float));
    }
    s->n_logit_rows = src->n_logit_rows;
    s->logits_first = src->logits_first;
    s->last_eval_n = src->last_eval_n;
    s->logits_on_device = false;
    s->logits_fetched = true;
    s->pending_sampled = src->pending_sampled;
    *out = s;
    return CERA_OK;
fail:
    cera_session_free(s);
    return st;
}

int cera_session_n_past(const cera_session *s) { return s ? s->seq.n_pos : 0; }

const cera_token *cera_session_tokens(const cera_session *s) { return s ? s->tokens : NULL; }

cera_status cera_session_truncate(cera_session *s, int n_keep, cera_error *err) {
    cera_error_clear(err);
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "truncate: session is NULL");
    if (n_keep < 0 || n_keep > s->seq.n_pos)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "truncate: n_keep %d outside 0..%d (n_past)", n_keep,
                         s->seq.n_pos);
    if (n_keep > 0 && n_keep < s->seq.n_pos && s->engine->kv->state_bytes)
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "truncate: %s keeps a recurrent state that follows the last position: a session can "
                         "only be cut back to 0 (asked: %d of %d)",
                         cera_arch_name(s->engine->model.hp.arch), n_keep, s->seq.n_pos);
    if (!cera_kv_seq_can_truncate(&s->seq, n_keep))
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "truncate: %s's sliding-window layers keep only the last %d positions, and the "
                         "window of position %d was already dropped: a session can be cut back to 0 or to "
                         "a point whose window it still holds (asked: %d of %d)",
                         cera_arch_name(s->engine->model.hp.arch), s->engine->model.hp.n_swa, n_keep, n_keep,
                         s->seq.n_pos);
    if (n_keep < s->seq.n_pos) {
        cera_engine *e = s->engine;
        pthread_mutex_lock(&e->forward_lock);
        cera_kv_seq_truncate(&s->seq, n_keep);
        cera_status st = CERA_OK;
        if (n_keep == 0 && e->kv->state_bytes && e->backend->seq_state)
            st = e->backend->seq_state(e->backend, s->seq.id, -1, err);
        pthread_mutex_unlock(&e->forward_lock);
        if (st) return st;
    }
    /* the timeline ends at n_keep: a generated token not yet evaluated goes too, and the
     * penalty history becomes the kept tokens' (the RNG restarts from its seed) */
    s->pending_eval = -1;
    s->pending_sampled = -1;
    cera_status st = cera_grammar_session_restart(s, err);
    if (st) return st;
    cera_sampler_reset(s->sampler);
    for (int i = 0; i < n_keep; i++) cera_sampler_accept(s->sampler, s->tokens[i]);
    s->n_logit_rows = 0;
    s->n_draft_eval = 0;
    return CERA_OK;
}

void cera_session_cut(cera_session *s, int n_keep) {
    if (n_keep < s->seq.n_pos) {
        pthread_mutex_lock(&s->engine->forward_lock);
        cera_kv_seq_truncate(&s->seq, n_keep);
        pthread_mutex_unlock(&s->engine->forward_lock);
    }
    s->n_logit_rows = 0;
    s->n_draft_eval = 0;
}

cera_status cera_session_flush_pending(cera_session *s, cera_error *err) {
    if (s->pending_eval < 0) return CERA_OK;
    const cera_batch_item it = {s, NULL, 0, false, 0};
    return cera_batch_eval(s->engine, &it, 1, err);
}

cera_status cera_session_eval(cera_session *s, const cera_token *tokens, size_t n_tokens, bool all_logits,
                              cera_error *err) {
    cera_error_clear(err);
    if (!s || (!tokens && n_tokens))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_eval: NULL argument");
    const cera_batch_item it = {s, tokens, n_tokens, all_logits, 0};
    return cera_batch_eval(s->engine, &it, 1, err);
}

bool cera_session_has_logits(const cera_session *s) { return s && s->n_logit_rows > 0; }

const float *cera_session_logits(const cera_session *s, int i) {
    if (!s || s->n_logit_rows == 0) return NULL;
    if (i < 0) i = s->last_eval_n - 1;
    const int row = i - s->logits_first;
    if (row < 0 || row >= s->n_logit_rows) return NULL;
    if (!s->logits_fetched) {
        /* the row is on the device (then it is the only one): a lazy fetch into the
         * session's own buffer, which the const API does not expose as changed */
        cera_session *m = (cera_session *)s;
        cera_engine *e = m->engine;
        cera_error err;
        pthread_mutex_lock(&e->forward_lock);
        const cera_status st = e->backend->logits_get(e->backend, m->seq.id, m->logits, &err);
        pthread_mutex_unlock(&e->forward_lock);
        if (st) return NULL;
        m->logits_fetched = true;
    }
    return s->logits + (size_t)row * s->engine->model.hp.n_vocab;
}

long cera_nonfinite_row(const float *l, size_t n_rows, int n_vocab) {
    for (size_t r = 0; r < n_rows; r++)
        for (int i = 0; i < n_vocab; i++)
            if (isnan(l[r * (size_t)n_vocab + (size_t)i]) || l[r * (size_t)n_vocab + (size_t)i] == INFINITY)
                return (long)r;
    return -1;
}

cera_status cera_nonfinite_fail(cera_error *err, long pos) {
    return cera_fail(
        err, CERA_ERR_FORMAT,
        "non-finite logits (NaN or Inf) at position %ld: the weights are corrupt, or an adapter or "
        "its scale overflows the float range",
        pos);
}

static cera_status sample_host(cera_session *s, const float *l, bool masked, long pos, cera_token *out,
                               cera_error *err);

cera_status cera_session_sample_status(cera_session *s, cera_token *out, cera_error *err) {
    *out = -1;
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_sample: session is NULL");
    cera_status st = cera_session_flush_pending(s, err);
    if (st) return st;
    if (s->n_logit_rows == 0) return cera_fail(err, CERA_ERR_INVALID_ARG, "sample: no logits to sample from");
    cera_engine *e = s->engine;
    /* a grammar's mask (which does not depend on the logits) is made on the host first; a lazy
     * grammar still waiting for its trigger samples freely, then looks for the trigger */
    const bool masked = s->gm && s->gstate != CERA_GRAMMAR_WAITING;
    if (masked && (st = cera_grammar_session_mask(s, err))) return st;
    if (s->logits_on_device && !s->logits_fetched && e->backend->sample) {
        cera_token t = -1;
        pthread_mutex_lock(&e->forward_lock);
        st = e->backend->sample(e->backend, s->seq.id, s->sampler, masked ? s->gmask : NULL, &t, err);
        pthread_mutex_unlock(&e->forward_lock);
        if (st == CERA_OK && masked && ((st = cera_grammar_session_take(s, t, err)) || t < 0)) return st;
        if (st == CERA_OK && !masked && (st = cera_grammar_session_observe(s, t, err))) return st;
        if (st == CERA_OK) {
            cera_sampler_accept(s->sampler, t);
            s->pending_sampled = t;
            *out = t;
            return CERA_OK;
        }
        /* refused before its draw: the host runs the chain with the same RNG state */
        if (st != CERA_ERR_UNSUPPORTED) return st;
        cera_error_clear(err);
    }
    const float *l = cera_session_logits(s, -1);
    if (!l) return cera_fail(err, CERA_ERR_DEVICE, "sample: the logits could not be fetched from the device");
    return sample_host(s, l, masked, (long)s->seq.n_pos - 1, out, err);
}

cera_status cera_session_sample_row(cera_session *s, int i, cera_token *out, cera_error *err) {
    *out = -1;
    const bool masked = s->gm && s->gstate != CERA_GRAMMAR_WAITING;
    cera_status st = masked ? cera_grammar_session_mask(s, err) : CERA_OK;
    if (st) return st;
    const float *l = cera_session_logits(s, i);
    if (!l) return cera_fail(err, CERA_ERR_INTERNAL, "sample: no logits row %d", i);
    return sample_host(s, l, masked, (long)(s->seq.n_pos - s->last_eval_n + i), out, err);
}

/* The host's draw from logits row l (finite-checked), the grammar told, the token recorded. */
static cera_status sample_host(cera_session *s, const float *l, bool masked, long pos, cera_token *out,
                               cera_error *err) {
    cera_engine *e = s->engine;
    cera_status st;
    if (cera_nonfinite_row(l, 1, e->model.hp.n_vocab) >= 0) return cera_nonfinite_fail(err, pos);
    cera_token t;
    if (masked) {
        t = cera_sampler_sample_masked(s->sampler, l, s->gmask);
        if ((st = cera_grammar_session_take(s, t, err)) || t < 0) return st;
    } else {
        /* finite logits and biases that leave a token (cera_sampler_new checks): a token */
        t = cera_sampler_sample(s->sampler, l);
        if ((st = cera_grammar_session_observe(s, t, err))) return st;
    }
    cera_sampler_accept(s->sampler, t);
    s->pending_sampled = t;
    *out = t;
    return CERA_OK;
}

cera_token cera_session_sample(cera_session *s) {
    cera_token t;
    return cera_session_sample_status(s, &t, NULL) == CERA_OK ? t : -1;
}

cera_status cera_batch_sample(cera_session *const *sessions, int n, cera_token *out, cera_error *err) {
    cera_error_clear(err);
    if (n < 0 || (n > 0 && (!sessions || !out)))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_batch_sample: NULL argument");
    cera_status st = CERA_OK;
    for (int i = 0; i < n; i++) {
        cera_error e1;
        const cera_status s1 = cera_session_sample_status(sessions[i], &out[i], &e1);
        if (s1 && st == CERA_OK) {
            st = s1;
            if (err) *err = e1;
            cera_error_prefix(err, "cera_batch_sample: session %d", i);
        }
    }
    return st;
}

cera_status cera_session_set_sampler(cera_session *s, const cera_sampler_params *params, cera_error *err) {
    cera_error_clear(err);
    if (!s || !params) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_set_sampler: NULL argument");
    cera_sampler *ns = NULL;
    const cera_status st = cera_sampler_new(params, s->engine->model.hp.n_vocab, &ns, err);
    if (st) return st; /* the session keeps its sampler */
    /* the penalty history carries over: the new sampler has seen the timeline's tokens */
    for (int i = 0; i < s->seq.n_pos; i++) cera_sampler_accept(ns, s->tokens[i]);
    if (s->pending_eval >= 0) cera_sampler_accept(ns, s->pending_eval);
    cera_sampler_free(s->sampler);
    s->sampler = ns;
    s->sampler_params = *params;
    return CERA_OK;
}

/*
 * session.c — the public session API: one timeline over the engine's model, its KV
 * blocks, logits and sampler.
 *
 * An eval appends tokens and runs them through the backend in batches of at most
 * n_batch (a prompt is one batch when it fits, a generated token a batch of one); the
 * same forward serves both, so they give the same logits for the same positions.
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
#include "session/engine_impl.h"

cera_session_params cera_session_default_params(void) {
    cera_session_params p;
    memset(&p, 0, sizeof p);
    p.sampler = cera_sampler_default_params();
    return p;
}

void cera_session_free(cera_session *s) {
    if (!s) return;
    cera_lora_session_free(s);
    cera_kv_seq_release(&s->seq);
    if (s->pool && s->engine->backend->kv_free) s->engine->backend->kv_free(s->engine->backend, s->pool);
    cera_kv_pool_free(s->pool);
    cera_sampler_free(s->sampler);
    free(s->logits);
    free(s->tokens);
    free(s->pos);
    free(s->seq_idx);
    free(s->want);
    free(s);
}

cera_status cera_session_create(cera_engine *e, const cera_session_params *params, cera_session **out,
                                cera_error *err) {
    cera_error_clear(err);
    if (!e || !out) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_create: NULL argument");
    *out = NULL;
    cera_session *s = calloc(1, sizeof *s);
    if (!s) return cera_fail(err, CERA_ERR_NO_MEMORY, "session");
    s->engine = e;
    s->pending_sampled = -1;
    s->pending_eval = -1;
    const cera_hparams *hp = &e->model.hp;
    const int n_ctx = e->params.n_ctx, nb = e->params.n_batch;
    cera_status st;
    if ((st = cera_kv_pool_new(e->params.kv_type, hp->n_layer, hp->n_head_kv * hp->head_dim,
                               (n_ctx + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK, e->backend->kv_on_host, &s->pool,
                               err)))
        goto fail;
    if (e->backend->kv_init && (st = e->backend->kv_init(e->backend, s->pool, err))) goto fail;
    if ((st = cera_kv_seq_init(&s->seq, s->pool, n_ctx, err))) goto fail;
    s->seqs[0] = &s->seq;
    s->sampler_params = params ? params->sampler : cera_sampler_default_params();
    if ((st = cera_sampler_new(&s->sampler_params, hp->n_vocab, &s->sampler, err))) goto fail;
    s->logit_cap_rows = 1;
    s->logits = malloc((size_t)hp->n_vocab * sizeof(float));
    s->pos = malloc((size_t)nb * sizeof(int32_t));
    s->seq_idx = calloc((size_t)nb, sizeof(int32_t));
    s->want = malloc((size_t)nb * sizeof(bool));
    s->tokens = malloc((size_t)n_ctx * sizeof *s->tokens);
    if (!s->logits || !s->pos || !s->seq_idx || !s->want || !s->tokens) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "session buffers");
        goto fail;
    }
    *out = s;
    return CERA_OK;
fail:
    cera_session_free(s);
    return st;
}

int cera_session_n_past(const cera_session *s) { return s ? s->seq.n_pos : 0; }

cera_status cera_session_truncate(cera_session *s, int n_keep, cera_error *err) {
    cera_error_clear(err);
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "truncate: session is NULL");
    if (n_keep < 0 || n_keep > s->seq.n_pos)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "truncate: n_keep %d outside 0..%d (n_past)", n_keep,
                         s->seq.n_pos);
    if (n_keep < s->seq.n_pos) cera_kv_seq_truncate(&s->seq, n_keep);
    /* the timeline ends at n_keep: a generated token not yet evaluated goes too, and the
     * penalty history becomes the kept tokens' (the RNG restarts from its seed) */
    s->pending_eval = -1;
    s->pending_sampled = -1;
    cera_sampler_reset(s->sampler);
    for (int i = 0; i < n_keep; i++) cera_sampler_accept(s->sampler, s->tokens[i]);
    s->n_logit_rows = 0;
    return CERA_OK;
}

static cera_status eval_tokens(cera_session *s, const cera_token *tokens, size_t n_tokens, bool all_logits,
                               cera_error *err);

cera_status cera_session_flush_pending(cera_session *s, cera_error *err) {
    if (s->pending_eval < 0) return CERA_OK;
    const cera_token t = s->pending_eval;
    s->pending_eval = -1;
    /* a batch of one, as the token would have been inside one long generation */
    const cera_status st = eval_tokens(s, &t, 1, false, err);
    if (st) s->pending_eval = t; /* still the timeline's next token (e.g. a full context) */
    return st;
}

cera_status cera_session_eval(cera_session *s, const cera_token *tokens, size_t n_tokens, bool all_logits,
                              cera_error *err) {
    cera_error_clear(err);
    if (!s || (!tokens && n_tokens))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_eval: NULL argument");
    cera_status st = cera_session_flush_pending(s, err);
    if (st || n_tokens == 0) return st;
    return eval_tokens(s, tokens, n_tokens, all_logits, err);
}

/* The first of rows [n_rows, n_vocab] holding a NaN or an infinity, or -1. A NaN or Inf
 * reaching the logits (corrupt weights, an adapter or a scale that overflows) would make
 * every token "likely": it is an error, not something to sample from. */
static long nonfinite_row(const float *l, size_t n_rows, int n_vocab) {
    for (size_t r = 0; r < n_rows; r++)
        for (int i = 0; i < n_vocab; i++)
            if (!isfinite(l[r * (size_t)n_vocab + (size_t)i])) return (long)r;
    return -1;
}

static cera_status nonfinite_fail(cera_error *err, long pos) {
    return cera_fail(
        err, CERA_ERR_FORMAT,
        "non-finite logits (NaN or Inf) at position %ld: the weights are corrupt, or an adapter or "
        "its scale overflows the float range",
        pos);
}

static cera_status eval_tokens(cera_session *s, const cera_token *tokens, size_t n_tokens, bool all_logits,
                               cera_error *err) {
    cera_engine *e = s->engine;
    const int n_vocab = e->model.hp.n_vocab;
    const int n_past = s->seq.n_pos;
    if (n_tokens > (size_t)(e->params.n_ctx - n_past))
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "context full: %d + %zu tokens exceed n_ctx %d", n_past,
                         n_tokens, e->params.n_ctx);
    for (size_t i = 0; i < n_tokens; i++)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "token id %d out of range (vocabulary %d)", tokens[i],
                             n_vocab);
    const size_t rows = all_logits ? n_tokens : 1;
    if (rows > s->logit_cap_rows) {
        /* grows only for an all-logits eval longer than any before (not per token) */
        float *nl = realloc(s->logits, rows * (size_t)n_vocab * sizeof(float));
        if (!nl) return cera_fail(err, CERA_ERR_NO_MEMORY, "logits for %zu positions", rows);
        s->logits = nl;
        s->logit_cap_rows = rows;
    }
    s->n_logit_rows = 0;
    /* the last row stays on the device when the backend can keep it there */
    const bool keep_on_device = !all_logits && e->backend->logits_get;
    cera_status st = cera_kv_seq_reserve(&s->seq, n_past + (int)n_tokens, err);
    if (st) return st;

    /* Longer than a batch: equal chunks rather than full ones and a short rest, so that no
     * chunk falls under the size where attention switches to its short-batch rounding
     * (attention.h): the logits then match a single batch's. */
    const size_t n_chunks = (n_tokens + (size_t)e->params.n_batch - 1) / (size_t)e->params.n_batch;
    const size_t chunk = (n_tokens + n_chunks - 1) / n_chunks;
    float *out = s->logits;
    for (size_t done = 0; done < n_tokens;) {
        const int n = (int)(n_tokens - done < chunk ? n_tokens - done : chunk);
        for (int i = 0; i < n; i++) {
            s->pos[i] = n_past + (int)done + i;
            s->seq_idx[i] = 0;
            s->want[i] = all_logits || done + (size_t)i == n_tokens - 1;
        }
        cera_batch b = {.n_tokens = n,
                        .token = tokens + done,
                        .pos = s->pos,
                        .seq = s->seq_idx,
                        .want_logits = s->want,
                        .seqs = s->seqs,
                        .n_seqs = 1,
                        .lora = cera_lora_session_plan(s, n)};
        pthread_mutex_lock(&e->forward_lock);
        st = e->backend->forward(e->backend, &b, keep_on_device ? NULL : out, err);
        pthread_mutex_unlock(&e->forward_lock);
        const size_t got = keep_on_device ? 0 : all_logits ? (size_t)n : done + (size_t)n == n_tokens;
        const long bad = st ? -1 : nonfinite_row(out, got, n_vocab);
        if (bad >= 0) st = nonfinite_fail(err, n_past + (long)done + (all_logits ? bad : n - 1));
        if (st) {
            cera_kv_seq_truncate(&s->seq, n_past);
            return st;
        }
        if (all_logits) out += (size_t)n * n_vocab;
        done += (size_t)n;
        s->seq.n_pos = n_past + (int)done;
    }
    memcpy(s->tokens + n_past, tokens, n_tokens * sizeof *tokens);
    for (size_t i = 0; i < n_tokens; i++) {
        if (i == 0 && tokens[0] == s->pending_sampled) continue; /* already recorded by sample */
        cera_sampler_accept(s->sampler, tokens[i]);
    }
    s->pending_sampled = -1;
    s->n_logit_rows = (int)rows;
    s->logits_on_device = keep_on_device;
    s->logits_fetched = !keep_on_device;
    s->logits_first = all_logits ? 0 : (int)n_tokens - 1;
    s->last_eval_n = (int)n_tokens;
    return CERA_OK;
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
        const cera_status st = e->backend->logits_get(e->backend, m->pool, m->logits, &err);
        pthread_mutex_unlock(&e->forward_lock);
        if (st) return NULL;
        m->logits_fetched = true;
    }
    return s->logits + (size_t)row * s->engine->model.hp.n_vocab;
}

cera_status cera_session_sample_status(cera_session *s, cera_token *out, cera_error *err) {
    *out = -1;
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_sample: session is NULL");
    cera_status st = cera_session_flush_pending(s, err);
    if (st) return st;
    if (s->n_logit_rows == 0) return cera_fail(err, CERA_ERR_INVALID_ARG, "sample: no logits to sample from");
    cera_engine *e = s->engine;
    if (s->logits_on_device && e->backend->sample) {
        cera_token t = -1;
        pthread_mutex_lock(&e->forward_lock);
        st = e->backend->sample(e->backend, s->pool, s->sampler, &t, err);
        pthread_mutex_unlock(&e->forward_lock);
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
    const int n_vocab = e->model.hp.n_vocab;
    if (nonfinite_row(l, 1, n_vocab) >= 0) return nonfinite_fail(err, (long)s->seq.n_pos - 1);
    /* finite logits and biases that leave a token (cera_sampler_new checks): a token */
    const cera_token t = cera_sampler_sample(s->sampler, l);
    cera_sampler_accept(s->sampler, t);
    s->pending_sampled = t;
    *out = t;
    return CERA_OK;
}

cera_token cera_session_sample(cera_session *s) {
    cera_token t;
    return cera_session_sample_status(s, &t, NULL) == CERA_OK ? t : -1;
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

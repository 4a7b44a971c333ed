/*
 * batch.c — cera_batch_eval: the tokens of many sessions through shared forward calls.
 *
 * Each session's stream is its pending generated token (if any), then its new tokens.
 * The stream is cut into chunks exactly as a session evaluated alone cuts it: the pending
 * token alone (as inside one long generation), then the new tokens in equal chunks of at
 * most n_batch (equal rather than full ones and a short rest, so that no chunk of a long
 * prompt drops under the size where attention changes its rounding). Forward calls are
 * then filled with chunks, in session order, at most one chunk per session per call (two
 * chunks of one sequence in a call would be one longer run) and at most n_batch tokens.
 * Since a backend computes each token from its own sequence alone (backend.h: batch
 * invariance), every session gets the logits it would get evaluated by itself.
 *
 * Everything runs under the engine's lock: block reservations (copies of shared blocks
 * included), the forward calls and, after the last, the sessions' bookkeeping (tokens,
 * sampler history, logits). A failure rolls every session back to where it was.
 *
 * Embeddings (cera_batch_run with outputs, embed.c) go the same way, with the backend writing
 * each new position's hidden state after the output norm (n_embd floats) instead of its logits,
 * into the caller's rows; the sessions then hold no logits.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "engine/engine_impl.h"

/* One session's progress through a batch. */
typedef struct item_run {
    cera_session *s;
    const cera_token *tok; /* the new tokens */
    size_t n;
    bool all;          /* every new position's logits */
    int n_draft;       /* the last n_draft new tokens are drafts (not recorded by the sampler) */
    cera_token pend;   /* the pending token evaluated first, or -1 */
    int n_past0;       /* the sequence's length before the batch */
    size_t next;       /* the stream's next position (0 = the pending token when there is one) */
    size_t chunk;      /* the new tokens' chunk size */
    bool rows_on_host; /* the last call holding a wanted row kept it on the host */
    float *embd;       /* embeddings mode: the new positions' hidden states [n, n_embd] */
} item_run;

static size_t stream_len(const item_run *r) { return r->n + (r->pend >= 0 ? 1 : 0); }

/* The length of the chunk starting at the stream's next position. */
static size_t next_chunk(const item_run *r) {
    if (r->pend >= 0 && r->next == 0) return 1;
    const size_t done = r->next - (r->pend >= 0 ? 1 : 0);
    return r->n - done < r->chunk ? r->n - done : r->chunk;
}

/* The stream's token at position i. */
static cera_token stream_tok(const item_run *r, size_t i) {
    if (r->pend >= 0) return i == 0 ? r->pend : r->tok[i - 1];
    return r->tok[i];
}

/* Whether stream position i wants logits, and its row in the session's logits. */
static bool stream_want(const item_run *r, size_t i, int *row) {
    const bool pend = r->pend >= 0;
    if (pend && i == 0) {
        *row = 0;
        return r->n == 0;
    }
    const size_t j = i - (pend ? 1 : 0);
    *row = r->all ? (int)j : 0;
    return r->all || j == r->n - 1;
}

static cera_status check_items(cera_engine *e, const cera_batch_item *items, int n_items, cera_error *err) {
    const int n_vocab = e->model.hp.n_vocab;
    for (int i = 0; i < n_items; i++) {
        const cera_batch_item *it = &items[i];
        if (!it->session || (!it->tokens && it->n_tokens))
            return cera_fail(err, CERA_ERR_INVALID_ARG, "batch item %d: NULL session or tokens", i);
        if (it->session->engine != e)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "batch item %d: a session of another engine", i);
        for (int j = 0; j < i; j++)
            if (items[j].session == it->session)
                return cera_fail(err, CERA_ERR_INVALID_ARG, "batch items %d and %d: the same session", j, i);
        if (it->n_draft < 0 || (it->n_draft > 0 && (size_t)it->n_draft >= it->n_tokens))
            return cera_fail(err, CERA_ERR_INVALID_ARG, "batch item %d: %d drafts of %zu tokens", i,
                             it->n_draft, it->n_tokens);
        const cera_session *s = it->session;
        const size_t need = it->n_tokens + (s->pending_eval >= 0 ? 1 : 0);
        if (need > (size_t)(e->params.n_ctx - s->seq.n_pos))
            return cera_fail(err, CERA_ERR_CONTEXT_FULL, "context full: %d + %zu tokens exceed n_ctx %d",
                             s->seq.n_pos, need, e->params.n_ctx);
        for (size_t j = 0; j < it->n_tokens; j++)
            if (it->tokens[j] < 0 || it->tokens[j] >= n_vocab)
                return cera_fail(err, CERA_ERR_INVALID_ARG, "token id %d out of range (vocabulary %d)",
                                 it->tokens[j], n_vocab);
    }
    return CERA_OK;
}

/* Room for rows logits rows in the session's buffer (grows only for an all-logits eval
 * longer than any before it, not per token). */
static cera_status reserve_logits(cera_session *s, size_t rows, cera_error *err) {
    if (rows <= s->logit_cap_rows) return CERA_OK;
    float *nl = realloc(s->logits, rows * (size_t)s->engine->model.hp.n_vocab * sizeof(float));
    if (!nl) return cera_fail(err, CERA_ERR_NO_MEMORY, "logits for %zu positions", rows);
    s->logits = nl;
    s->logit_cap_rows = rows;
    return CERA_OK;
}

/* One forward call over the runs in call[0..n_call): their next chunks. */
static cera_status run_call(cera_engine *e, item_run *const *call, int n_call, bool embd, cera_error *err) {
    /* a row of output: logits, or an embedding */
    const int row_w = embd ? e->model.hp.n_embd : e->model.hp.n_vocab;
    int n = 0, n_want = 0, first_row = -1;
    bool host = embd || !e->backend->logits_get;
    for (int c = 0; c < n_call; c++) {
        item_run *r = call[c];
        const size_t len = next_chunk(r);
        cera_kv_copy copy[CERA_KV_GROUPS];
        int n_copy = 0;
        cera_status st = cera_kv_seq_reserve(&r->s->seq, r->s->seq.n_pos + (int)len, copy, &n_copy, err);
        if (st) return st;
        if (n_copy && e->backend->kv_copy && (st = e->backend->kv_copy(e->backend, copy, n_copy, err)))
            return st;
        e->b_seqs[c] = &r->s->seq;
        e->b_sets[c] = &r->s->lora;
        for (size_t i = 0; i < len; i++, n++) {
            int row;
            e->b_tok[n] = stream_tok(r, r->next + i);
            e->b_pos[n] = r->s->seq.n_pos + (int)i;
            e->b_seq[n] = c;
            e->b_want[n] = stream_want(r, r->next + i, &row);
            if (e->b_want[n] && first_row < 0) first_row = row;
            n_want += e->b_want[n];
        }
        if (r->all) host = true;
    }
    /* one session's rows are consecutive rows of its own buffer: written there directly;
     * several sessions' go through the engine's staging rows */
    const bool direct = n_call == 1;
    if (host && !direct && (size_t)n_want * row_w > e->stage_floats) {
        float *nl = realloc(e->stage_logits, (size_t)n_want * row_w * sizeof(float));
        if (!nl) return cera_fail(err, CERA_ERR_NO_MEMORY, "logits for %d rows", n_want);
        e->stage_logits = nl;
        e->stage_floats = (size_t)n_want * row_w;
    }
    const cera_lora_batch *lora = NULL;
    if (n_call == 1) {
        lora = cera_lora_session_plan(call[0]->s, n);
    } else {
        bool any = false;
        for (int c = 0; c < n_call; c++) any = any || !cera_lora_set_empty(e->b_sets[c]);
        if (any) {
            cera_lora_batch_build(&e->lora_plan, e->b_seq, e->b_sets, n);
            if (e->lora_plan.n_groups) lora = &e->lora_plan;
        }
    }
    const cera_batch b = {.n_tokens = n,
                          .token = e->b_tok,
                          .pos = e->b_pos,
                          .seq = e->b_seq,
                          .want_logits = e->b_want,
                          .seqs = e->b_seqs,
                          .n_seqs = n_call,
                          .lora = lora,
                          .embd = embd};
    float *const dst0 = embd ? call[0]->embd : call[0]->s->logits;
    float *out_rows = !host    ? NULL
                      : direct ? dst0 + (size_t)(first_row < 0 ? 0 : first_row) * row_w
                               : e->stage_logits;
    cera_status st = e->backend->forward(e->backend, &b, out_rows, err);
    if (st) return st;
    const long bad = host ? cera_nonfinite_row(out_rows, (size_t)n_want, row_w) : -1;
    if (bad >= 0) { /* the position of the bad row: the bad-th wanted token */
        for (int t = 0, k = 0; t < n; t++)
            if (e->b_want[t] && k++ == bad) return cera_nonfinite_fail(err, e->b_pos[t]);
    }
    /* the rows, in batch order, to their sessions */
    int out = 0;
    for (int c = 0, t = 0; c < n_call; c++) {
        item_run *r = call[c];
        const size_t len = next_chunk(r);
        for (size_t i = 0; i < len; i++, t++) {
            int row;
            if (!stream_want(r, r->next + i, &row)) continue;
            if (host && !direct)
                memcpy((embd ? r->embd : r->s->logits) + (size_t)row * row_w,
                       e->stage_logits + (size_t)out * row_w, (size_t)row_w * sizeof(float));
            out++;
            r->rows_on_host = host;
        }
        r->s->seq.n_pos += (int)len;
        r->next += len;
    }
    return CERA_OK;
}

/* Bookkeeping once every call has succeeded: the timeline, the sampler's history, where
 * the logits are. */
static void finish_run(item_run *r) {
    cera_session *s = r->s;
    const size_t len = stream_len(r);
    for (size_t i = 0; i < len; i++) {
        const cera_token t = stream_tok(r, i);
        s->tokens[r->n_past0 + (int)i] = t;
        if (i + (size_t)r->n_draft >= len || (i == 0 && t == s->pending_sampled))
            continue; /* a draft (recorded when a draw keeps it), or recorded by sample */
        cera_sampler_accept(s->sampler, t);
    }
    s->n_draft_eval = r->n_draft;
    s->pending_sampled = -1;
    s->pending_eval = -1;
    if (r->embd) { /* embeddings leave no logits */
        s->n_logit_rows = 0;
        s->logits_on_device = s->logits_fetched = false;
        s->last_eval_n = (int)r->n;
        return;
    }
    const bool only_pending = r->n == 0;
    s->n_logit_rows = r->all && !only_pending ? (int)r->n : 1;
    s->logits_first = r->all || only_pending ? 0 : (int)r->n - 1;
    s->last_eval_n = only_pending ? 1 : (int)r->n;
    s->logits_on_device = !r->rows_on_host;
    s->logits_fetched = r->rows_on_host;
}

cera_status cera_batch_init(cera_engine *e, cera_error *err) {
    const size_t nb = (size_t)e->params.n_batch, ns = (size_t)e->params.n_seq_max;
    e->b_tok = malloc(nb * sizeof *e->b_tok);
    e->b_pos = malloc(nb * sizeof *e->b_pos);
    e->b_seq = malloc(nb * sizeof *e->b_seq);
    e->b_want = malloc(nb * sizeof *e->b_want);
    e->b_seqs = malloc(nb * sizeof *e->b_seqs);
    e->b_sets = malloc(nb * sizeof *e->b_sets);
    e->b_runs = malloc(ns * sizeof(item_run));
    e->b_call = malloc(ns * sizeof(item_run *));
    if (!e->b_tok || !e->b_pos || !e->b_seq || !e->b_want || !e->b_seqs || !e->b_sets || !e->b_runs ||
        !e->b_call)
        return cera_fail(err, CERA_ERR_NO_MEMORY, "batch buffers for %zu tokens", nb);
    return cera_lora_batch_init(&e->lora_plan, e->params.n_batch, err);
}

void cera_batch_free(cera_engine *e) {
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_seqs);
    free(e->b_sets);
    free(e->b_runs);
    free(e->b_call);
    free(e->stage_logits);
    cera_lora_batch_free(&e->lora_plan);
}

/* Fills the forward calls (see the top of the file) until every run is done. */
static cera_status run_all(cera_engine *e, item_run *runs, int n_runs, bool embd, cera_error *err) {
    item_run **call = e->b_call;
    const size_t nb = (size_t)e->params.n_batch;
    for (;;) {
        int n_call = 0;
        size_t n_tok = 0;
        for (int i = 0; i < n_runs; i++) {
            item_run *r = &runs[i];
            if (r->next >= stream_len(r)) continue;
            const size_t len = next_chunk(r);
            if (n_tok + len > nb) continue;
            call[n_call++] = r;
            n_tok += len;
        }
        if (n_call == 0) return CERA_OK;
        cera_status st = run_call(e, call, n_call, embd, err);
        if (st) return st;
    }
}

cera_status cera_batch_eval(cera_engine *e, const cera_batch_item *items, int n_items, cera_error *err) {
    return cera_batch_run(e, items, n_items, NULL, err);
}

cera_status cera_batch_run(cera_engine *e, const cera_batch_item *items, int n_items, float *const *embd,
                           cera_error *err) {
    cera_error_clear(err);
    if (!e || n_items < 0 || (n_items > 0 && !items))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_batch_eval: NULL argument");
    if (n_items > e->params.n_seq_max)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_batch_eval: %d items (the engine has %d sequences)",
                         n_items, e->params.n_seq_max);
    cera_status st = check_items(e, items, n_items, err);
    if (st) return st;
    pthread_mutex_lock(&e->forward_lock);
    item_run *runs = e->b_runs;
    const size_t nb = (size_t)e->params.n_batch;
    int n_runs = 0;
    for (int i = 0; i < n_items && !st; i++) {
        cera_session *s = items[i].session;
        item_run *r = &runs[n_runs];
        *r = (item_run){s,
                        items[i].tokens,
                        items[i].n_tokens,
                        embd || items[i].all_logits || items[i].n_draft > 0,
                        embd ? 0 : items[i].n_draft,
                        s->pending_eval,
                        s->seq.n_pos,
                        0,
                        0,
                        true,
                        embd ? embd[i] : NULL};
        if (stream_len(r) == 0) continue; /* nothing to evaluate: the session is left as it is */
        const size_t n_chunks = r->n ? (r->n + nb - 1) / nb : 0;
        r->chunk = n_chunks ? (r->n + n_chunks - 1) / n_chunks : 0;
        if (!embd) st = reserve_logits(s, r->all && r->n ? r->n : 1, err);
        n_runs++;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!st) st = run_all(e, runs, n_runs, embd != NULL, err);
    /* the time of a batch of decode tokens and drafts (a prompt chunk costs otherwise: on a GPU
     * it takes another path) for speculation's cost model */
    bool decode_like = !st && !embd && n_runs > 0;
    size_t n_tok = 0;
    for (int i = 0; i < n_runs && decode_like; i++) {
        decode_like = runs[i].n <= 1 || runs[i].n_draft > 0;
        n_tok += stream_len(&runs[i]);
    }
    if (decode_like) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        cera_spec_step_time(e, n_tok,
                            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6);
    }
    bool reset = false;
    for (int i = 0; i < n_runs; i++) {
        if (!st) {
            finish_run(&runs[i]);
            continue;
        }
        /* back to where it was: the blocks taken go back, the pending token stays, the
         * last eval's logits are gone (their buffer may have been written). A sliding
         * window that later chunks moved past n_past0 cannot come back: then the session
         * starts over from 0, and the error says so. */
        cera_session *s = runs[i].s;
        if (cera_kv_seq_can_truncate(&s->seq, runs[i].n_past0)) {
            cera_kv_seq_truncate(&s->seq, runs[i].n_past0);
        } else {
            cera_kv_seq_truncate(&s->seq, 0);
            if (e->backend->seq_state && s->seq.pool->state_bytes)
                e->backend->seq_state(e->backend, s->seq.id, -1, NULL);
            s->pending_eval = s->pending_sampled = -1;
            cera_sampler_reset(s->sampler);
            if (!reset) cera_error_prefix(err, "a session was reset to 0 (its sliding window had moved on)");
            reset = true;
        }
        s->n_logit_rows = 0;
        s->n_draft_eval = 0;
    }
    pthread_mutex_unlock(&e->forward_lock);
    return st;
}

/*
 * generate.c — cera_generate: evaluate a prompt, then sample and evaluate one token at
 * a time, streaming each token's text to the caller.
 *
 * Text comes from the tokenizer's streaming detokenizer (never half a UTF-8
 * character). With stop strings, text that may be the beginning of one is held back
 * until the next pieces decide (at most the longest stop string less a byte); a stop
 * string found ends generation and neither it nor anything after it is passed on.
 * Generation stops at n_predict, an end-of-generation token (not streamed), a stop
 * string, the callback's false, a full context, the cancel flag, or the session's grammar
 * allowing no token. The buffers are
 * allocated once per call, never per token.
 *
 * Speculative decoding (cera.h, cera_generate_params): before the pending token goes in, up
 * to draft_max tokens are drafted (n-gram lookup in the timeline, else a draft model's
 * session, greedy); the pending token and the drafts are evaluated as one batch with every
 * row's logits (unrecorded by the sampler), and the rows are drawn from in order by the
 * session's own sampler: while a draw equals the next draft the draft
 * is kept, and the first draw that differs is kept instead and ends the step, the drafts
 * after it cut from the timeline (cera_session_cut: the sampler and grammar never saw
 * them). So the draws, the RNG's included, are exactly plain decoding's.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

cera_generate_params cera_generate_default_params(void) {
    cera_generate_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.n_predict = -1;
    return p;
}

/* The earliest full stop string in h[0..n): its offset, or n when none. */
static size_t find_stop(const char *h, size_t n, const cera_generate_params *p) {
    size_t best = n;
    for (int i = 0; i < p->n_stop; i++) {
        const char *st = p->stop[i];
        const size_t sl = st ? strlen(st) : 0;
        if (!sl || sl > n) continue;
        for (size_t off = 0; off + sl <= n && off < best; off++)
            if (!memcmp(h + off, st, sl)) best = off;
    }
    return best;
}

/* The length of the longest suffix of h[0..n) that begins some stop string (a stop string
 * that may be completed by the next pieces): that text is held back. */
static size_t stop_prefix_len(const char *h, size_t n, const cera_generate_params *p) {
    size_t keep = 0;
    for (int i = 0; i < p->n_stop; i++) {
        const char *st = p->stop[i];
        const size_t sl = st ? strlen(st) : 0;
        for (size_t k = (sl - 1 < n ? sl - 1 : n); k > keep && sl; k--)
            if (!memcmp(h + n - k, st, k)) {
                keep = k;
                break;
            }
    }
    return keep;
}

/* The text side of one generation: detokenizer, held-back text, counts. */
typedef struct gen_out {
    const cera_generate_params *p;
    cera_session *s;
    cera_token_callback cb;
    void *user;
    cera_detok dt;
    char *piece, *held;
    size_t piece_cap, held_len, max_stop;
    int n_gen;
    bool stopped; /* by a stop string: nothing after it is passed on */
} gen_out;

/* A token the sampler picked, to follow n_pos positions of the timeline: false when
 * generation ends with it (not kept: an end of generation; kept: a stop string, the
 * callback's false, n_predict, a full context). *kept says whether it is part of the
 * timeline. */
static bool emit(gen_out *g, cera_token t, int n_pos, bool *kept) {
    const cera_generate_params *p = g->p;
    cera_session *s = g->s;
    cera_engine *e = s->engine;
    *kept = false;
    /* with a grammar, an end-of-generation token is its complete match: always the end */
    const bool constrained = s->gm && s->gstate != CERA_GRAMMAR_WAITING;
    if ((!p->ignore_eog || constrained) && cera_tokenizer_is_eog(e->tok, t)) return false;
    *kept = true;
    int len = cera_detok_push(&g->dt, t, g->piece, g->piece_cap);
    if (len < 0) len = 0;
    g->n_gen++;
    const char *out = g->piece;
    size_t n_out = (size_t)len;
    if (g->max_stop) {
        /* as llama.cpp's server: text that may begin a stop string waits for the next
         * pieces; a stop string and what follows it are never passed on */
        memcpy(g->held + g->held_len, g->piece, (size_t)len);
        g->held_len += (size_t)len;
        const size_t at = find_stop(g->held, g->held_len, p);
        g->stopped = at < g->held_len;
        n_out = g->stopped ? at : g->held_len - stop_prefix_len(g->held, g->held_len, p);
        out = g->held;
    }
    const bool go_on = !g->cb || g->cb(t, out, n_out, g->user);
    if (g->max_stop) {
        memmove(g->held, g->held + n_out, g->held_len - n_out);
        g->held_len -= n_out;
    }
    if (!go_on || g->stopped) return false;
    if (p->n_predict >= 0 && g->n_gen >= p->n_predict) return false;
    /* context full: a normal end (the token stays pending, with no room to go in) */
    if (n_pos >= e->params.n_ctx && !p->context_shift) return false;
    return true;
}

/* ---- speculative decoding ------------------------------------------------------- */

/* One speculative step for the pending token t: drafts after it, [t, drafts] evaluated with
 * every row's logits, the sampler recording none of them, then each row drawn from in order
 * and kept while it matches the next draft. Returns 0 when
 * no draft was tried (the caller decodes t plainly), 1 to go on, -1 when generation ends (st
 * set on an error). */
static int spec_step(gen_out *g, cera_token *buf, cera_status *st, cera_error *err) {
    const cera_generate_params *p = g->p;
    cera_session *s = g->s;
    cera_engine *e = s->engine;
    const int dmax = p->draft_max > 0 ? p->draft_max : 16, dmin = p->draft_min > 0 ? p->draft_min : 1;
    const int n_past = s->seq.n_pos;
    int cap = dmax;
    if (cap > e->params.n_ctx - n_past - 1) cap = e->params.n_ctx - n_past - 1;
    if (cap < dmin) return 0;
    /* the history: the timeline and t, in the session's token buffer (t's place: the batch below
     * writes it there again) */
    cera_token *h = s->tokens;
    h[n_past] = s->pending_eval;
    int k = cera_spec_draft(s, h, n_past + 1, p->spec_ngram, NULL, 0, buf + 1, cap);
    if (k < dmin && p->draft) k = cera_spec_draft(s, h, n_past + 1, 0, p->draft, 0, buf + 1, cap);
    if (k < dmin) return 0;
    if (p->n_drafted) *p->n_drafted += k;
    buf[0] = s->pending_eval;
    /* t goes in with the drafts (the sampler records t, when its sample has not, and none of
     * the drafts: each is recorded when a draw keeps it) */
    s->pending_eval = -1;
    const cera_batch_item it = {s, buf, (size_t)k + 1, true, k};
    if ((*st = cera_batch_eval(e, &it, 1, err))) return -1;
    int ret = 1, n_kept = 0;
    for (int i = 0;; i++) {
        cera_token x;
        if ((*st = cera_session_sample_row(s, i, &x, err))) {
            ret = -1;
            break;
        }
        if (x < 0) { /* the grammar allows no token */
            ret = -1;
            break;
        }
        bool kept;
        const bool go_on = emit(g, x, n_past + i + 1, &kept);
        const bool match = i < k && x == buf[i + 1];
        n_kept += match;
        if (match && p->n_accepted) ++*p->n_accepted;
        if (!go_on || !match) {
            /* the drafts after row i go; x stays pending, as plain decoding leaves it */
            cera_session_cut(s, n_past + i + 1);
            if (kept) s->pending_eval = x;
            ret = go_on ? 1 : -1;
            break;
        }
    }
    cera_spec_observe(s, k, n_kept);
    return ret;
}

cera_status cera_generate(cera_session *s, const cera_token *prompt, size_t n_prompt,
                          const cera_generate_params *params, cera_token_callback cb, void *user,
                          int *n_generated, cera_error *err) {
    cera_error_clear(err);
    if (n_generated) *n_generated = 0;
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_generate: session is NULL");
    cera_generate_params p = cera_generate_default_params();
    cera_status st = cera_params_read(&p, sizeof p, params, "cera_generate_params", err);
    if (st) return st;
    if (p.n_predict < -1)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_generate: n_predict %d (-1 means no limit)",
                         p.n_predict);
    if (p.n_stop < 0 || (p.n_stop > 0 && !p.stop))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_generate: bad stop strings");
    if (p.spec_ngram < CERA_SPEC_AUTO || p.draft_max < 0 || p.draft_min < 0 || p.spec_ngram > 1024 ||
        p.draft_max > 1024)
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "cera_generate: spec_ngram %d, draft_max %d, draft_min %d", p.spec_ngram,
                         p.draft_max, p.draft_min);
    cera_engine *e = s->engine;
    if (p.draft && (p.draft == s || cera_engine_n_vocab(p.draft->engine) != cera_engine_n_vocab(e)))
        return cera_fail(
            err, CERA_ERR_INVALID_ARG,
            "cera_generate: the draft session is this one, or its model's vocabulary (%d) is not "
            "this model's (%d)",
            cera_engine_n_vocab(p.draft->engine), cera_engine_n_vocab(e));
    if (p.n_drafted) *p.n_drafted = 0;
    if (p.n_accepted) *p.n_accepted = 0;
    /* speculation cuts timelines back: not for a recurrent state (a draft's neither) */
    const bool spec = (p.spec_ngram != 0 || p.draft) && !e->kv->state_bytes &&
                      !(p.draft && p.draft->engine->kv->state_bytes);
    /* a token the last generation streamed is evaluated first (by the prompt's eval) */
    st = n_prompt ? cera_session_eval(s, prompt, n_prompt, false, err) : cera_session_flush_pending(s, err);
    if (st) return st;
    if (!cera_session_has_logits(s))
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "cera_generate: no prompt and no logits to continue from");

    gen_out g = {.p = &p, .s = s, .cb = cb, .user = user};
    for (int i = 0; i < p.n_stop; i++)
        if (p.stop[i] && strlen(p.stop[i]) > g.max_stop) g.max_stop = strlen(p.stop[i]);
    g.piece_cap = cera_tokenizer_max_piece_len(e->tok) + 8;
    /* held-back text (at most max_stop - 1 bytes) and the newest piece */
    const size_t held_cap = g.max_stop + g.piece_cap;
    g.piece = malloc(g.piece_cap);
    g.held = malloc(held_cap);
    /* speculation's batch [t, drafts] */
    const int dmax = p.draft_max > 0 ? p.draft_max : 16;
    cera_token *sbuf = spec ? malloc(((size_t)dmax + 1) * sizeof *sbuf) : NULL;
    if (!g.piece || !g.held || (spec && !sbuf)) {
        free(g.piece);
        free(g.held);
        free(sbuf);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cera_generate buffers");
    }
    cera_detok_init(&g.dt, e->tok, false);

    st = CERA_OK;
    while (p.n_predict < 0 || g.n_gen < p.n_predict) {
        if (p.cancel && __atomic_load_n(p.cancel, __ATOMIC_RELAXED)) {
            st = cera_fail(err, CERA_ERR_CANCELLED, "generation cancelled");
            break;
        }
        /* a full context shifts before the previous token goes in, where llama.cpp's does */
        if (p.context_shift && s->pending_eval >= 0 && s->seq.n_pos + 1 >= e->params.n_ctx) {
            const int keep = p.n_keep < 0 ? 0 : p.n_keep;
            const int n_discard = keep < s->seq.n_pos ? (s->seq.n_pos - keep) / 2 : 0;
            if (n_discard < 1 || cera_session_shift(s, keep, n_discard, NULL) != CERA_OK) break;
        }
        if (spec && s->pending_eval >= 0 && cera_kv_seq_can_truncate(&s->seq, s->seq.n_pos)) {
            const int r = spec_step(&g, sbuf, &st, err);
            if (r < 0) break;
            if (r > 0) continue;
        }
        /* the previous token, streamed last time round */
        if ((st = cera_session_flush_pending(s, err))) break;
        cera_token t;
        if ((st = cera_session_sample_status(s, &t, err))) break;
        if (t < 0) break; /* the grammar allows no token (cera_session_grammar_state) */
        bool kept;
        const bool go_on = emit(&g, t, s->seq.n_pos, &kept);
        /* part of the timeline from here on; evaluated when anything follows (the next
         * round, or the next eval/sample/generate), never when nothing does */
        if (kept) s->pending_eval = t;
        if (!go_on) break;
    }
    if (!g.stopped) {
        /* held-back text that no stop string completed, then the bytes of an unfinished
         * character as they are: one last call, with no token of its own */
        const int rest = cera_detok_flush(&g.dt, g.piece, g.piece_cap);
        if (rest > 0) {
            memcpy(g.held + g.held_len, g.piece, (size_t)rest);
            g.held_len += (size_t)rest;
        }
        if (g.held_len && cb) cb(-1, g.held, g.held_len, user);
    }
    free(g.piece);
    free(g.held);
    free(sbuf);
    if (n_generated) *n_generated = g.n_gen;
    return st;
}

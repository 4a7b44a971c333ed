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
    cera_engine *e = s->engine;
    /* a token the last generation streamed is evaluated first (by the prompt's eval) */
    st = n_prompt ? cera_session_eval(s, prompt, n_prompt, false, err) : cera_session_flush_pending(s, err);
    if (st) return st;
    if (!cera_session_has_logits(s))
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "cera_generate: no prompt and no logits to continue from");

    size_t max_stop = 0;
    for (int i = 0; i < p.n_stop; i++)
        if (p.stop[i] && strlen(p.stop[i]) > max_stop) max_stop = strlen(p.stop[i]);
    const size_t piece_cap = cera_tokenizer_max_piece_len(e->tok) + 8;
    /* held-back text (at most max_stop - 1 bytes) and the newest piece */
    const size_t held_cap = max_stop + piece_cap;
    char *piece = malloc(piece_cap);
    char *held = malloc(held_cap);
    if (!piece || !held) {
        free(piece);
        free(held);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cera_generate buffers");
    }
    size_t held_len = 0;
    cera_detok dt;
    cera_detok_init(&dt, e->tok, false);

    int n_gen = 0;
    bool stopped = false; /* by a stop string: nothing after it is passed on */
    st = CERA_OK;
    while (p.n_predict < 0 || n_gen < p.n_predict) {
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
        /* the previous token, streamed last time round */
        if ((st = cera_session_flush_pending(s, err))) break;
        cera_token t;
        if ((st = cera_session_sample_status(s, &t, err))) break;
        if (t < 0) break; /* the grammar allows no token (cera_session_grammar_state) */
        /* with a grammar, an end-of-generation token is its complete match: always the end */
        const bool constrained = s->gm && s->gstate != CERA_GRAMMAR_WAITING;
        if ((!p.ignore_eog || constrained) && cera_tokenizer_is_eog(e->tok, t)) break;
        int len = cera_detok_push(&dt, t, piece, piece_cap);
        if (len < 0) len = 0;
        n_gen++;
        /* part of the timeline from here on; evaluated when anything follows (the next
         * round, or the next eval/sample/generate), never when nothing does */
        s->pending_eval = t;
        const char *out = piece;
        size_t n_out = (size_t)len;
        if (max_stop) {
            /* as llama.cpp's server: text that may begin a stop string waits for the next
             * pieces; a stop string and what follows it are never passed on */
            memcpy(held + held_len, piece, (size_t)len);
            held_len += (size_t)len;
            const size_t at = find_stop(held, held_len, &p);
            stopped = at < held_len;
            n_out = stopped ? at : held_len - stop_prefix_len(held, held_len, &p);
            out = held;
        }
        const bool go_on = !cb || cb(t, out, n_out, user);
        if (max_stop) {
            memmove(held, held + n_out, held_len - n_out);
            held_len -= n_out;
        }
        if (!go_on || stopped) break;
        if (p.n_predict >= 0 && n_gen >= p.n_predict) break;
        if (cera_session_n_past(s) >= e->params.n_ctx && !p.context_shift)
            break; /* context full: a normal end */
    }
    if (!stopped) {
        /* held-back text that no stop string completed, then the bytes of an unfinished
         * character as they are: one last call, with no token of its own */
        const int rest = cera_detok_flush(&dt, piece, piece_cap);
        if (rest > 0) {
            memcpy(held + held_len, piece, (size_t)rest);
            held_len += (size_t)rest;
        }
        if (held_len && cb) cb(-1, held, held_len, user);
    }
    free(piece);
    free(held);
    if (n_generated) *n_generated = n_gen;
    return st;
}

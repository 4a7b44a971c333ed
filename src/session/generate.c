/*
 * generate.c — cera_generate: evaluate a prompt, then sample and evaluate one token at
 * a time, streaming each token's text to the caller.
 *
 * Text comes from the tokenizer's streaming detokenizer (never half a UTF-8
 * character). Stop strings are matched on the generated text: a window of the most
 * recent bytes, long enough to hold any stop string together with the newest piece.
 * Generation stops at n_predict, an end-of-generation token (not streamed), a stop
 * string, the callback's false, a full context, or the cancel flag. The buffers are
 * allocated once per call, never per token.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "session/engine_impl.h"

cera_generate_params cera_generate_default_params(void) {
    cera_generate_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = -1;
    return p;
}

/* Appends bytes to the window, dropping the oldest beyond cap; returns true when a stop
 * string now appears in it. */
static bool window_push(char *win, size_t *len, size_t cap, const char *bytes, size_t n,
                        const cera_generate_params *p) {
    if (n >= cap) {
        memcpy(win, bytes + (n - cap), cap);
        *len = cap;
    } else {
        if (*len + n > cap) {
            const size_t drop = *len + n - cap;
            memmove(win, win + drop, *len - drop);
            *len -= drop;
        }
        memcpy(win + *len, bytes, n);
        *len += n;
    }
    for (int i = 0; i < p->n_stop; i++) {
        const char *s = p->stop[i];
        const size_t sl = s ? strlen(s) : 0;
        if (!sl || sl > *len) continue;
        for (size_t off = 0; off + sl <= *len; off++)
            if (!memcmp(win + off, s, sl)) return true;
    }
    return false;
}

cera_status cera_generate(cera_session *s, const cera_token *prompt, size_t n_prompt,
                          const cera_generate_params *params, cera_token_callback cb, void *user,
                          int *n_generated, cera_error *err) {
    cera_error_clear(err);
    if (n_generated) *n_generated = 0;
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_generate: session is NULL");
    const cera_generate_params p = params ? *params : cera_generate_default_params();
    if (p.n_stop < 0 || (p.n_stop > 0 && !p.stop))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_generate: bad stop strings");
    cera_engine *e = s->engine;
    /* a token the last generation streamed is evaluated first (by the prompt's eval) */
    cera_status st =
        n_prompt ? cera_session_eval(s, prompt, n_prompt, false, err) : cera_session_flush_pending(s, err);
    if (st) return st;
    if (!cera_session_logits(s, -1))
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "cera_generate: no prompt and no logits to continue from");

    size_t max_stop = 0;
    for (int i = 0; i < p.n_stop; i++)
        if (p.stop[i] && strlen(p.stop[i]) > max_stop) max_stop = strlen(p.stop[i]);
    const size_t piece_cap = cera_tokenizer_max_piece_len(e->tok) + 8;
    const size_t win_cap = max_stop ? 2 * max_stop + piece_cap : 1;
    char *piece = malloc(piece_cap);
    char *win = malloc(win_cap);
    if (!piece || !win) {
        free(piece);
        free(win);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cera_generate buffers");
    }
    size_t win_len = 0;
    cera_detok dt;
    cera_detok_init(&dt, e->tok, false);

    int n_gen = 0;
    cera_token last = -1;
    st = CERA_OK;
    while (p.n_predict < 0 || n_gen < p.n_predict) {
        if (p.cancel && *p.cancel) {
            st = cera_fail(err, CERA_ERR_CANCELLED, "generation cancelled");
            break;
        }
        /* the previous token, streamed last time round */
        if ((st = cera_session_flush_pending(s, err))) break;
        const cera_token t = cera_session_sample(s);
        if (t < 0) {
            st = cera_fail(err, CERA_ERR_INTERNAL, "sampler returned no token");
            break;
        }
        if (!p.ignore_eog && cera_tokenizer_is_eog(e->tok, t)) break;
        last = t;
        int len = cera_detok_push(&dt, t, piece, piece_cap);
        if (len < 0) len = 0;
        n_gen++;
        /* part of the timeline from here on; evaluated when anything follows (the next
         * round, or the next eval/sample/generate), never when nothing does */
        s->pending_eval = t;
        const bool stop = max_stop && window_push(win, &win_len, win_cap, piece, (size_t)len, &p);
        if (cb && !cb(t, piece, (size_t)len, user)) break;
        if (stop) break;
        if (p.n_predict >= 0 && n_gen >= p.n_predict) break;
        if (cera_session_n_past(s) >= e->params.n_ctx) break; /* context full: a normal end */
    }
    /* bytes of an unfinished character, passed on as they are */
    const int rest = cera_detok_flush(&dt, piece, piece_cap);
    if (rest > 0 && cb && last >= 0) cb(last, piece, (size_t)rest, user);
    free(piece);
    free(win);
    if (n_generated) *n_generated = n_gen;
    return st;
}

/*
 * grammar_session.c — constrained sampling (include/cera.h: Grammars): a session's GBNF
 * grammar (src/grammar), its matcher, and the masked draw cera_session_sample makes with it.
 *
 * The engine builds one token trie over its vocabulary (pieces with special tokens
 * rendered, the end-of-generation flags) the first time any session sets a grammar; the
 * trie is read-only afterwards, so masks of several sessions may be computed at once. A
 * parsed grammar is immutable and shared by a session and its forks (a refcount); each
 * session has its own matcher. A sample asks the matcher for the mask of allowed tokens,
 * draws from those alone (cera_sampler_sample_masked), and feeds the token back. A lazy
 * grammar (triggers) samples with the plain chain while it waits, keeping the tail of the
 * sampled text that could still begin a trigger word; the token or text that completes a
 * trigger is fed to the matcher from the trigger's start, and the mask applies from then on.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

#define MAX_TRIGGERS    64
#define MAX_TRIGGER_LEN 256

struct cera_grammar_ref {
    cera_grammar *g;
    int refs; /* atomic: forks may be freed on other threads */
    /* a lazy grammar's triggers (none: constrained from the start) */
    char **words;
    size_t *word_lens, n_words, max_word;
    cera_token *tokens;
    size_t n_tokens;
};

static void ref_drop(cera_grammar_ref *r) {
    if (r && __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        cera_grammar_free(r->g);
        for (size_t i = 0; i < r->n_words; i++) free(r->words[i]);
        free(r->words);
        free(r->word_lens);
        free(r->tokens);
        free(r);
    }
}

static bool ref_lazy(const cera_grammar_ref *r) { return r->n_words || r->n_tokens; }

/* Copies the triggers into r (checked: CERA_ERR_INVALID_ARG for bad ones). */
static cera_status ref_set_triggers(cera_grammar_ref *r, const cera_grammar_trigger *tr, size_t n,
                                    int32_t n_vocab, cera_error *err) {
    if (n > MAX_TRIGGERS)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "grammar: %zu triggers (at most %d)", n, MAX_TRIGGERS);
    if (n && !tr) return cera_fail(err, CERA_ERR_INVALID_ARG, "grammar: triggers is NULL");
    r->words = calloc(n ? n : 1, sizeof *r->words);
    r->word_lens = calloc(n ? n : 1, sizeof *r->word_lens);
    r->tokens = calloc(n ? n : 1, sizeof *r->tokens);
    if (!r->words || !r->word_lens || !r->tokens)
        return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar: triggers");
    for (size_t i = 0; i < n; i++) {
        if (!tr[i].word) {
            if (tr[i].token < 0 || tr[i].token >= n_vocab)
                return cera_fail(err, CERA_ERR_INVALID_ARG,
                                 "grammar: trigger %zu: token %d is not in the vocabulary", i,
                                 (int)tr[i].token);
            r->tokens[r->n_tokens++] = tr[i].token;
            continue;
        }
        const size_t len = strlen(tr[i].word);
        if (len == 0 || len > MAX_TRIGGER_LEN)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "grammar: trigger %zu: a word of %zu bytes (1 to %d)",
                             i, len, MAX_TRIGGER_LEN);
        if (!(r->words[r->n_words] = malloc(len + 1)))
            return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar: triggers");
        memcpy(r->words[r->n_words], tr[i].word, len + 1);
        r->word_lens[r->n_words++] = len;
        if (len > r->max_word) r->max_word = len;
    }
    return CERA_OK;
}

/* The id of the single token text is (special tokens parsed), or -1: `<text>` elements. */
static int32_t token_of_text(void *user, const char *text, size_t len) {
    cera_token toks[2];
    size_t n = 0;
    if (cera_tokenize(user, text, len, false, true, toks, 2, &n, NULL) != CERA_OK || n != 1) return -1;
    return toks[0];
}

/* The engine's token trie (built on first use, under the engine's lock). */
static cera_status engine_tokens(cera_engine *e, cera_error *err) {
    cera_status st = CERA_OK;
    pthread_mutex_lock(&e->forward_lock);
    if (!e->gtok) {
        const int32_t nv = e->model.hp.n_vocab;
        const char **pieces = calloc((size_t)nv, sizeof *pieces);
        size_t *lens = calloc((size_t)nv, sizeof *lens);
        bool *eog = calloc((size_t)nv, sizeof *eog);
        char *bytes = NULL;
        size_t total = 0;
        if (pieces && lens && eog) {
            for (int32_t i = 0; i < nv; i++) {
                const int n = cera_token_to_piece(e, i, NULL, 0, true);
                lens[i] = n > 0 ? (size_t)n : 0;
                total += lens[i];
                eog[i] = cera_engine_is_eog(e, i);
            }
            bytes = malloc(total ? total : 1);
        }
        if (!bytes) {
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "grammar: the vocabulary's pieces (%d tokens)", nv);
        } else {
            size_t off = 0;
            for (int32_t i = 0; i < nv; i++) {
                pieces[i] = bytes + off;
                if (lens[i]) cera_token_to_piece(e, i, bytes + off, lens[i], true);
                off += lens[i];
            }
            st = cera_grammar_tokens_new(pieces, lens, eog, nv, &e->gtok, err);
        }
        free(bytes);
        free(eog);
        free(lens);
        free(pieces);
    }
    pthread_mutex_unlock(&e->forward_lock);
    return st;
}

void cera_grammar_session_free(cera_session *s) {
    cera_grammar_matcher_free(s->gm);
    ref_drop(s->grammar);
    free(s->gmask);
    free(s->gbuf);
    s->gm = NULL;
    s->grammar = NULL;
    s->gmask = NULL;
    s->gbuf = NULL;
    s->gbuf_len = s->gbuf_cap = 0;
    s->gstate = CERA_GRAMMAR_NONE;
}

/* Gives s the grammar r (a reference the caller holds, passed on) with matcher m. */
static cera_status attach(cera_session *s, cera_grammar_ref *r, cera_grammar_matcher *m,
                          cera_grammar_state state, cera_error *err) {
    const size_t words = ((size_t)s->engine->model.hp.n_vocab + 31) / 32;
    uint32_t *mask = malloc(words * sizeof *mask);
    if (!mask) {
        cera_grammar_matcher_free(m);
        ref_drop(r);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar: a mask of %zu words", words);
    }
    cera_grammar_session_free(s);
    s->grammar = r;
    s->gm = m;
    s->gmask = mask;
    s->gstate = state;
    return CERA_OK;
}

cera_status cera_session_set_grammar_lazy(cera_session *s, const char *gbnf, size_t len,
                                          const cera_grammar_trigger *triggers, size_t n_triggers,
                                          cera_error *err) {
    cera_error_clear(err);
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_set_grammar: session is NULL");
    if (!gbnf || !len) {
        cera_grammar_session_free(s);
        return CERA_OK;
    }
    cera_engine *e = s->engine;
    cera_grammar_ref *r = calloc(1, sizeof *r);
    if (!r) return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar");
    r->refs = 1;
    cera_status st = ref_set_triggers(r, triggers, n_triggers, e->model.hp.n_vocab, err);
    if (st) {
        ref_drop(r);
        return st;
    }
    if ((st = engine_tokens(e, err))) {
        ref_drop(r);
        return st;
    }
    const cera_grammar_vocab vocab = {e, token_of_text};
    if ((st = cera_grammar_parse(gbnf, len, &vocab, &r->g, err))) {
        ref_drop(r);
        cera_error_prefix(err, "grammar");
        return st;
    }
    cera_grammar_matcher *m = NULL;
    if ((st = cera_grammar_matcher_new(r->g, NULL, &m, err))) {
        ref_drop(r);
        return st;
    }
    return attach(s, r, m, ref_lazy(r) ? CERA_GRAMMAR_WAITING : CERA_GRAMMAR_ACTIVE, err);
}

cera_status cera_session_set_grammar(cera_session *s, const char *gbnf, size_t len, cera_error *err) {
    return cera_session_set_grammar_lazy(s, gbnf, len, NULL, 0, err);
}

cera_status cera_json_schema_to_grammar(const char *schema, size_t len, char **out, cera_error *err) {
    cera_error_clear(err);
    if (!out || (!schema && len))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_json_schema_to_grammar: NULL argument");
    *out = NULL;
    return cera_json_schema_to_gbnf(schema ? schema : "", len, out, err);
}

cera_status cera_session_set_json_schema(cera_session *s, const char *schema, size_t len, cera_error *err) {
    cera_error_clear(err);
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_set_json_schema: session is NULL");
    static const char any_object[] = "{\"type\":\"object\"}";
    if (!schema) {
        schema = any_object;
        len = sizeof any_object - 1;
    }
    char *gbnf = NULL;
    cera_status st = cera_json_schema_to_gbnf(schema, len, &gbnf, err);
    if (st) {
        cera_error_prefix(err, "JSON schema");
        return st;
    }
    st = cera_session_set_grammar(s, gbnf, strlen(gbnf), err);
    free(gbnf);
    return st;
}

cera_grammar_state cera_session_grammar_state(const cera_session *s) {
    return s ? s->gstate : CERA_GRAMMAR_NONE;
}

cera_status cera_grammar_session_fork(cera_session *dst, const cera_session *src, cera_error *err) {
    if (!src->grammar) return CERA_OK;
    cera_grammar_matcher *m = NULL;
    const cera_status st = cera_grammar_matcher_clone(src->gm, &m, err);
    if (st) return st;
    __atomic_add_fetch(&src->grammar->refs, 1, __ATOMIC_RELAXED);
    cera_status st2 = attach(dst, src->grammar, m, src->gstate, err);
    if (st2 || !src->gbuf_len) return st2;
    if (!(dst->gbuf = malloc(src->gbuf_len)))
        return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar: a trigger buffer");
    memcpy(dst->gbuf, src->gbuf, src->gbuf_len);
    dst->gbuf_len = dst->gbuf_cap = src->gbuf_len;
    return CERA_OK;
}

cera_status cera_grammar_session_restart(cera_session *s, cera_error *err) {
    if (!s->grammar) return CERA_OK;
    cera_grammar_matcher *m = NULL;
    const cera_status st = cera_grammar_matcher_new(s->grammar->g, NULL, &m, err);
    if (st) return st;
    cera_grammar_matcher_free(s->gm);
    s->gm = m;
    s->gstate = ref_lazy(s->grammar) ? CERA_GRAMMAR_WAITING : CERA_GRAMMAR_ACTIVE;
    s->gbuf_len = 0;
    return CERA_OK;
}

/* The earliest position in s[0, n) where one of r's words starts, or n. */
static size_t find_trigger(const cera_grammar_ref *r, const char *s, size_t n) {
    size_t best = n;
    for (size_t w = 0; w < r->n_words; w++) {
        const size_t wl = r->word_lens[w];
        for (size_t i = 0; i + wl <= n && i < best; i++)
            if (s[i] == r->words[w][0] && !memcmp(s + i, r->words[w], wl)) {
                best = i;
                break;
            }
    }
    return best;
}

cera_status cera_grammar_session_observe(cera_session *s, cera_token tok, cera_error *err) {
    if (!s->gm || s->gstate != CERA_GRAMMAR_WAITING) return CERA_OK;
    const cera_grammar_ref *r = s->grammar;
    const cera_grammar_tokens *t = s->engine->gtok;
    for (size_t i = 0; i < r->n_tokens; i++)
        if (r->tokens[i] == tok) {
            s->gstate = CERA_GRAMMAR_ACTIVE;
            s->gbuf_len = 0;
            return cera_grammar_matcher_accept_token(s->gm, t, tok, err);
        }
    size_t n = 0;
    const char *piece = cera_grammar_tokens_piece(t, tok, &n);
    if (!piece || !n || !r->n_words) return CERA_OK;
    if (s->gbuf_len + n > s->gbuf_cap) {
        const size_t cap = (s->gbuf_len + n) * 2;
        char *b = realloc(s->gbuf, cap);
        if (!b) return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar: a trigger buffer");
        s->gbuf = b;
        s->gbuf_cap = cap;
    }
    memcpy(s->gbuf + s->gbuf_len, piece, n);
    s->gbuf_len += n;
    const size_t at = find_trigger(r, s->gbuf, s->gbuf_len);
    if (at < s->gbuf_len) {
        /* the grammar starts at the trigger word */
        s->gstate = CERA_GRAMMAR_ACTIVE;
        const size_t rest = s->gbuf_len - at;
        s->gbuf_len = 0;
        return cera_grammar_matcher_accept_bytes(s->gm, s->gbuf + at, rest, err);
    }
    /* only a tail shorter than the longest word can still begin one */
    const size_t keep = r->max_word - 1;
    if (s->gbuf_len > keep) {
        memmove(s->gbuf, s->gbuf + s->gbuf_len - keep, keep);
        s->gbuf_len = keep;
    }
    return CERA_OK;
}

cera_status cera_grammar_session_mask(cera_session *s, cera_error *err) {
    return cera_grammar_matcher_mask(s->gm, s->engine->gtok, s->gmask, err);
}

cera_status cera_grammar_session_take(cera_session *s, cera_token tok, cera_error *err) {
    if (tok < 0) {
        /* nothing allowed: the grammar ends generation here */
        s->gstate = cera_grammar_matcher_complete(s->gm) ? CERA_GRAMMAR_COMPLETE : CERA_GRAMMAR_DEAD_END;
        return CERA_OK;
    }
    const cera_status st = cera_grammar_matcher_accept_token(s->gm, s->engine->gtok, tok, err);
    if (st) return st;
    s->gstate = cera_engine_is_eog(s->engine, tok) ? CERA_GRAMMAR_COMPLETE : CERA_GRAMMAR_ACTIVE;
    return CERA_OK;
}

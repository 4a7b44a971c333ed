/*
 * grammar_session.c — constrained sampling (include/cera.h: Grammars): a session's GBNF
 * grammar (src/grammar), its matcher, and the masked draw cera_session_sample makes with it.
 *
 * The engine builds one token trie over its vocabulary (pieces with special tokens
 * rendered, the end-of-generation flags) the first time any session sets a grammar; the
 * trie is read-only afterwards, so masks of several sessions may be computed at once. A
 * parsed grammar is immutable and shared by a session and its forks (a refcount); each
 * session has its own matcher. A sample asks the matcher for the mask of allowed tokens,
 * draws from those alone (cera_sampler_sample_masked), and feeds the token back.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

struct cera_grammar_ref {
    cera_grammar *g;
    int refs; /* atomic: forks may be freed on other threads */
};

static void ref_drop(cera_grammar_ref *r) {
    if (r && __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        cera_grammar_free(r->g);
        free(r);
    }
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
    s->gm = NULL;
    s->grammar = NULL;
    s->gmask = NULL;
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

cera_status cera_session_set_grammar(cera_session *s, const char *gbnf, size_t len, cera_error *err) {
    cera_error_clear(err);
    if (!s) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_set_grammar: session is NULL");
    if (!gbnf || !len) {
        cera_grammar_session_free(s);
        return CERA_OK;
    }
    cera_engine *e = s->engine;
    cera_status st = engine_tokens(e, err);
    if (st) return st;
    const cera_grammar_vocab vocab = {e, token_of_text};
    cera_grammar_ref *r = calloc(1, sizeof *r);
    if (!r) return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar");
    r->refs = 1;
    if ((st = cera_grammar_parse(gbnf, len, &vocab, &r->g, err))) {
        free(r);
        cera_error_prefix(err, "grammar");
        return st;
    }
    cera_grammar_matcher *m = NULL;
    if ((st = cera_grammar_matcher_new(r->g, NULL, &m, err))) {
        ref_drop(r);
        return st;
    }
    return attach(s, r, m, CERA_GRAMMAR_ACTIVE, err);
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
    return attach(dst, src->grammar, m, src->gstate, err);
}

cera_status cera_grammar_session_restart(cera_session *s, cera_error *err) {
    if (!s->grammar) return CERA_OK;
    cera_grammar_matcher *m = NULL;
    const cera_status st = cera_grammar_matcher_new(s->grammar->g, NULL, &m, err);
    if (st) return st;
    cera_grammar_matcher_free(s->gm);
    s->gm = m;
    s->gstate = CERA_GRAMMAR_ACTIVE;
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

/*
 * tokens.c — the sampler's side of a grammar: a matcher advanced by a token's bytes (a code
 * point may be split across tokens) and the mask of the tokens it allows next, with
 * llama.cpp's grammar-sampler semantics: a token is allowed when some parse stack takes
 * all of its text (a trailing partial UTF-8 sequence must still be completable by the set
 * on top), end-of-generation tokens only when a parse is complete, empty pieces never,
 * and token elements (`<[id]>`, `!<[id]>`) allow tokens by id.
 *
 * The vocabulary is a byte trie (cera_grammar_tokens, built once). A mask is one walk of
 * the trie carrying the stack set: each trie edge is one byte, a completed code point
 * maps the set through the matcher, and a subtree is cut as soon as its set is empty or
 * its partial code point fits no set on top. Tokens that share a prefix share its work.
 * Masks are cached per matcher state (its stacks, hash-consed, and its partial UTF-8),
 * since grammars revisit the same states (inside a JSON string, between list items).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

#define NONE       UINT32_MAX
#define MAX_PIECE  512 /* longer pieces are never allowed (the walk's depth) */
#define CACHE_SIZE 64

typedef struct tnode {
    uint32_t first_child, next_sibling, tokens; /* tokens: first token whose piece ends here */
    uint8_t byte;
} tnode;

enum { TOK_TEXT = 0, TOK_EOG = 1, TOK_NEVER = 2 };

struct cera_grammar_tokens {
    int32_t n_vocab;
    uint32_t n_words; /* of a mask */
    tnode *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *token_next; /* [n_vocab] the next token with the same piece */
    uint8_t *kind;        /* [n_vocab] */
    char **pieces;
    size_t *lens;
};

typedef struct cache_entry {
    uint64_t hash;
    uint32_t *key; /* the sorted stacks */
    size_t n_key;
    uint32_t pval;
    int prem;
    uint32_t *mask;
} cache_entry;

/* A byte automaton built lazily over the matcher's stack sets: a state is a set of stacks
 * (interned, sorted) with a partial code point; its transition on a byte is computed once
 * (a matcher step when the byte completes a code point) and then looked up, so a mask walk
 * costs one hash probe per trie node once the states it meets are known. Node ids are
 * only stable until the pool is compacted, so the automaton is dropped then. */
typedef struct dfa {
    uint32_t *set_data; /* the sets' stacks, one after another */
    size_t n_set_data, cap_set_data;
    uint32_t *set_off, *set_len; /* [n_sets] */
    size_t n_sets, cap_sets;
    uint32_t *set_tab; /* set id + 1 by hash */
    size_t cap_set_tab;
    uint32_t *ds_set, *ds_val; /* [n_ds] a state: its set and partial code point */
    int8_t *ds_rem;
    uint8_t *ds_ok; /* a token ending in this state is allowed (for a partial code point:
                     * llama.cpp's match_partial_char, checked only where a token ends) */
    size_t n_ds, cap_ds;
    uint32_t *ds_tab; /* state id + 1 by hash */
    size_t cap_ds_tab;
    uint64_t *tr_key; /* (state << 8 | byte) + 1; 0 = free */
    uint32_t *tr_val; /* the next state or DEAD */
    size_t n_tr, cap_tr;
} dfa;

#define DEAD (UINT32_MAX - 1)

struct mask_cache {
    const cera_grammar_tokens *tok;
    uint32_t epoch;
    cache_entry e[CACHE_SIZE];
    size_t n, victim;
    uint64_t hits, misses;
    dfa d;
};

/* ---- the vocabulary ---- */

static uint32_t trie_child(cera_grammar_tokens *t, uint32_t node, uint8_t b) {
    uint32_t k = t->nodes[node].first_child;
    for (; k != NONE; k = t->nodes[k].next_sibling)
        if (t->nodes[k].byte == b) return k;
    if (t->n_nodes == t->cap_nodes) {
        uint32_t cap = t->cap_nodes * 2;
        tnode *v = realloc(t->nodes, cap * sizeof *v);
        if (!v) return NONE;
        t->nodes = v;
        t->cap_nodes = cap;
    }
    uint32_t id = t->n_nodes++;
    t->nodes[id] = (tnode){NONE, t->nodes[node].first_child, NONE, b};
    t->nodes[node].first_child = id;
    return id;
}

cera_status cera_grammar_tokens_new(const char *const *pieces, const size_t *lens, const bool *is_eog,
                                    int32_t n_vocab, cera_grammar_tokens **out, cera_error *err) {
    *out = NULL;
    if (n_vocab <= 0 || !pieces || !lens)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "grammar tokens: no vocabulary");
    cera_grammar_tokens *t = calloc(1, sizeof *t);
    if (!t) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    t->n_vocab = n_vocab;
    t->n_words = (uint32_t)((n_vocab + 31) / 32);
    t->cap_nodes = 1024;
    t->nodes = malloc(t->cap_nodes * sizeof *t->nodes);
    t->token_next = malloc((size_t)n_vocab * sizeof *t->token_next);
    t->kind = calloc((size_t)n_vocab, 1);
    t->pieces = calloc((size_t)n_vocab, sizeof *t->pieces);
    t->lens = calloc((size_t)n_vocab, sizeof *t->lens);
    if (!t->nodes || !t->token_next || !t->kind || !t->pieces || !t->lens) goto oom;
    t->nodes[0] = (tnode){NONE, NONE, NONE, 0};
    t->n_nodes = 1;
    for (int32_t i = 0; i < n_vocab; i++) {
        t->token_next[i] = NONE;
        size_t n = pieces[i] ? lens[i] : 0;
        if (!(t->pieces[i] = malloc(n + 1))) goto oom;
        if (n) memcpy(t->pieces[i], pieces[i], n);
        t->pieces[i][n] = 0;
        t->lens[i] = n;
        if (is_eog && is_eog[i]) {
            t->kind[i] = TOK_EOG;
            continue;
        }
        if (n == 0 || n > MAX_PIECE || pieces[i][0] == 0) { /* llama.cpp: empty pieces never match */
            t->kind[i] = TOK_NEVER;
            continue;
        }
        uint32_t node = 0;
        for (size_t k = 0; k < n && node != NONE; k++) node = trie_child(t, node, (uint8_t)pieces[i][k]);
        if (node == NONE) goto oom;
        t->token_next[i] = t->nodes[node].tokens;
        t->nodes[node].tokens = (uint32_t)i;
    }
    *out = t;
    return CERA_OK;
oom:
    cera_grammar_tokens_free(t);
    return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
}

void cera_grammar_tokens_free(cera_grammar_tokens *t) {
    if (!t) return;
    if (t->pieces)
        for (int32_t i = 0; i < t->n_vocab; i++) free(t->pieces[i]);
    free(t->pieces);
    free(t->lens);
    free(t->nodes);
    free(t->token_next);
    free(t->kind);
    free(t);
}

int32_t cera_grammar_tokens_n_vocab(const cera_grammar_tokens *t) { return t ? t->n_vocab : 0; }

const char *cera_grammar_tokens_piece(const cera_grammar_tokens *t, int32_t token, size_t *len) {
    if (!t || token < 0 || token >= t->n_vocab) return NULL;
    *len = t->lens[token];
    return t->pieces[token];
}

/* ---- UTF-8 across tokens ---- */

/* Takes byte b into the partial code point (*val, *rem); returns 1 when a code point is
 * complete (in *cp), 0 when more bytes are needed, -1 for an invalid sequence. */
static int utf8_byte(uint8_t b, uint32_t *val, int *rem, uint32_t *cp) {
    if (*rem > 0) {
        if ((b >> 6) != 2) return -1;
        *val = (*val << 6) | (b & 0x3f);
        if (--*rem) return 0;
        *cp = *val;
        return 1;
    }
    static const int8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
    int l = len[b >> 4];
    if (l == 0) return -1;
    if (l == 1) {
        *cp = b;
        return 1;
    }
    *rem = l - 1;
    *val = b & ((1u << (7 - *rem)) - 1);
    return 0;
}

cera_status cera_grammar_matcher_accept_bytes(cera_grammar_matcher *m, const char *bytes, size_t n,
                                              cera_error *err) {
    if (!m) return cera_fail(err, CERA_ERR_INVALID_ARG, "no matcher");
    for (size_t i = 0; i < n && m->n_stacks; i++) {
        uint32_t cp;
        int r = utf8_byte((uint8_t)bytes[i], &m->partial_value, &m->partial_remain, &cp);
        if (r < 0) {
            m->n_stacks = 0; /* invalid UTF-8 matches nothing */
            m->partial_remain = 0;
            break;
        }
        if (r == 1) {
            cera_status st = cera_grammar_matcher_accept(m, cp, err);
            if (st != CERA_OK) return st;
        }
    }
    return CERA_OK;
}

static bool is_token_top(const cera_grammar_matcher *m, uint32_t s) {
    if (s == 0) return false;
    uint32_t t = m->g->el[m->pool.elem[s]].type;
    return t == GE_TOKEN || t == GE_TOKEN_NOT;
}

cera_status cera_grammar_matcher_accept_token(cera_grammar_matcher *m, const cera_grammar_tokens *t,
                                              int32_t token, cera_error *err) {
    if (!m || !t || token < 0 || token >= t->n_vocab)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "bad token");
    if (m->failed) return cera_fail(err, CERA_ERR_UNSUPPORTED, "grammar matcher stopped at an earlier limit");
    if (t->kind[token] == TOK_EOG) {
        if (!cera_grammar_matcher_complete(m))
            return cera_fail(err, CERA_ERR_INVALID_ARG,
                             "end-of-generation token where the grammar is not complete");
        return CERA_OK;
    }
    m->err = err;
    const gelem *el = m->g->el;
    uint32_t *cur = NULL, *acc = NULL;
    size_t n_cur = m->n_stacks, cap_cur = 0, n_acc = 0, cap_acc = 0;
    bool ok = gm_grow_u32(&cur, &cap_cur, n_cur + 1);
    if (ok && n_cur) memcpy(cur, m->stacks, n_cur * sizeof *cur);
    /* a finished parse takes no token, not even one that only starts a code point (as
     * llama.cpp: the empty stack is dropped by every token) */
    size_t kept = 0;
    for (size_t i = 0; ok && i < n_cur; i++)
        if (cur[i] != 0) cur[kept++] = cur[i];
    n_cur = kept;
    /* stacks with a token element on top that takes this token */
    gm_new_step(m);
    for (size_t i = 0; ok && i < n_cur; i++) {
        uint32_t s = cur[i];
        if (!is_token_top(m, s)) continue;
        const gelem *e = el + m->pool.elem[s];
        if ((e->type == GE_TOKEN) != (e->value == (uint32_t)token)) continue;
        uint32_t ns = m->pool.parent[s];
        if (!gelem_is_eos(e + 1) && (ns = gm_push(m, ns, m->pool.elem[s] + 1)) == NONE) ok = false;
        ok = ok && gm_advance(m, ns);
    }
    ok = ok && gm_grow_u32(&acc, &cap_acc, m->n_next + 1);
    if (ok) {
        if (m->n_next) memcpy(acc, m->next, m->n_next * sizeof *acc);
        n_acc = m->n_next;
    }
    /* the other stacks take the token's text */
    uint32_t val = m->partial_value;
    int rem = m->partial_remain;
    const uint8_t *p = (const uint8_t *)t->pieces[token];
    for (size_t k = 0; ok && k < t->lens[token] && n_cur; k++) {
        uint32_t cp;
        int r = utf8_byte(p[k], &val, &rem, &cp);
        if (r < 0) {
            n_cur = 0;
            rem = 0;
        } else if (r == 1) {
            ok = gm_step(m, cur, n_cur, cp) && gm_grow_u32(&cur, &cap_cur, m->n_next + 1);
            if (ok) {
                if (m->n_next) memcpy(cur, m->next, m->n_next * sizeof *cur);
                n_cur = m->n_next;
            }
        }
    }
    /* the union, each stack once */
    if (ok) {
        gm_new_step(m);
        for (size_t pass = 0; pass < 2; pass++) {
            const uint32_t *v = pass ? acc : cur;
            size_t nv = pass ? n_acc : n_cur;
            for (size_t i = 0; ok && i < nv; i++) {
                if (pass == 0 && is_token_top(m, v[i])) continue; /* did not take the text */
                if (m->mark[v[i]] == m->gen) continue;
                m->mark[v[i]] = m->gen;
                ok = gm_grow_u32(&m->next, &m->cap_next, m->n_next + 1);
                if (ok) m->next[m->n_next++] = v[i];
            }
        }
        m->partial_value = val;
        m->partial_remain = rem;
        ok = ok && gm_commit(m);
    }
    free(cur);
    free(acc);
    m->err = NULL;
    if (!ok) {
        if (!m->failed) gm_fail(m, CERA_ERR_NO_MEMORY, "grammar matcher: out of memory");
        m->n_stacks = 0;
        return m->status;
    }
    return CERA_OK;
}

/* ---- masks ---- */

static int cmp_u32(const void *a, const void *b);

typedef struct walk {
    cera_grammar_matcher *m;
    const cera_grammar_tokens *t;
    uint32_t *mask;
    dfa *d;
} walk;

static void allow_node(walk *w, uint32_t node) {
    for (uint32_t k = w->t->nodes[node].tokens; k != NONE; k = w->t->token_next[k])
        w->mask[k >> 5] |= 1u << (k & 31);
}

static bool partial_fits(const cera_grammar_matcher *m, const uint32_t *set, size_t n, uint32_t val,
                         int rem) {
    for (size_t i = 0; i < n; i++) {
        uint32_t s = set[i];
        if (s == 0 || is_token_top(m, s)) continue;
        if (gm_match_partial(m->g->el, m->pool.elem[s], val, rem)) return true;
    }
    return false;
}

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static void dfa_free(dfa *d) {
    free(d->set_data);
    free(d->set_off);
    free(d->set_len);
    free(d->set_tab);
    free(d->ds_set);
    free(d->ds_val);
    free(d->ds_rem);
    free(d->ds_ok);
    free(d->ds_tab);
    free(d->tr_key);
    free(d->tr_val);
    memset(d, 0, sizeof *d);
}

static bool grow(void **v, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *n = realloc(*v, c * elem);
    if (!n) return false;
    *v = n;
    *cap = c;
    return true;
}

static uint64_t set_hash(const uint32_t *v, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ v[i]) * 1099511628211ull;
    return mix(h);
}

/* Rehashes an id table (ids + 1) of new capacity cap, hashing with key(i). */
static bool rehash(uint32_t **tab, size_t *cap_tab, size_t need, const dfa *d,
                   uint64_t (*key)(const dfa *, uint32_t), size_t n) {
    if (need * 2 <= *cap_tab) return true;
    size_t cap = *cap_tab ? *cap_tab * 2 : 1024;
    while (need * 2 > cap) cap *= 2;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < n; i++) {
        size_t j = key(d, (uint32_t)i) & (cap - 1);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = (uint32_t)i + 1;
    }
    free(*tab);
    *tab = t;
    *cap_tab = cap;
    return true;
}

static uint64_t set_key(const dfa *d, uint32_t i) {
    return set_hash(d->set_data + d->set_off[i], d->set_len[i]);
}
static uint64_t ds_hash(uint32_t set, uint32_t val, int rem) {
    return mix(((uint64_t)set << 32 ^ (uint64_t)val << 3 ^ (uint64_t)(rem + 1)) * 0x9e3779b97f4a7c15ull);
}
static uint64_t ds_key(const dfa *d, uint32_t i) { return ds_hash(d->ds_set[i], d->ds_val[i], d->ds_rem[i]); }

/* The id of the set v[0..n) (sorted); NONE when out of memory. */
static uint32_t intern_set(dfa *d, const uint32_t *v, size_t n) {
    uint64_t h = set_hash(v, n);
    if (d->cap_set_tab) {
        for (size_t j = h & (d->cap_set_tab - 1); d->set_tab[j]; j = (j + 1) & (d->cap_set_tab - 1)) {
            uint32_t id = d->set_tab[j] - 1;
            if (d->set_len[id] == n && !memcmp(d->set_data + d->set_off[id], v, n * sizeof *v)) return id;
        }
    }
    if (!grow((void **)&d->set_data, &d->cap_set_data, d->n_set_data + n + 1, sizeof *d->set_data))
        return NONE;
    size_t cap = d->cap_sets;
    if (!grow((void **)&d->set_off, &cap, d->n_sets + 1, sizeof *d->set_off)) return NONE;
    cap = d->cap_sets;
    if (!grow((void **)&d->set_len, &cap, d->n_sets + 1, sizeof *d->set_len)) return NONE;
    d->cap_sets = cap;
    uint32_t id = (uint32_t)d->n_sets++;
    d->set_off[id] = (uint32_t)d->n_set_data;
    d->set_len[id] = (uint32_t)n;
    if (n) memcpy(d->set_data + d->n_set_data, v, n * sizeof *v);
    d->n_set_data += n;
    if (!rehash(&d->set_tab, &d->cap_set_tab, d->n_sets, d, set_key, d->n_sets - 1)) return NONE;
    size_t j = h & (d->cap_set_tab - 1);
    while (d->set_tab[j]) j = (j + 1) & (d->cap_set_tab - 1);
    d->set_tab[j] = id + 1;
    return id;
}

static uint32_t intern_ds(dfa *d, uint32_t set, uint32_t val, int rem, bool ok) {
    uint64_t h = ds_hash(set, val, rem);
    if (d->cap_ds_tab) {
        for (size_t j = h & (d->cap_ds_tab - 1); d->ds_tab[j]; j = (j + 1) & (d->cap_ds_tab - 1)) {
            uint32_t id = d->ds_tab[j] - 1;
            if (d->ds_set[id] == set && d->ds_val[id] == val && d->ds_rem[id] == rem) return id;
        }
    }
    size_t cap = d->cap_ds;
    if (!grow((void **)&d->ds_set, &cap, d->n_ds + 1, sizeof *d->ds_set)) return NONE;
    cap = d->cap_ds;
    if (!grow((void **)&d->ds_val, &cap, d->n_ds + 1, sizeof *d->ds_val)) return NONE;
    cap = d->cap_ds;
    if (!grow((void **)&d->ds_rem, &cap, d->n_ds + 1, sizeof *d->ds_rem)) return NONE;
    cap = d->cap_ds;
    if (!grow((void **)&d->ds_ok, &cap, d->n_ds + 1, sizeof *d->ds_ok)) return NONE;
    d->cap_ds = cap;
    uint32_t id = (uint32_t)d->n_ds++;
    d->ds_set[id] = set;
    d->ds_val[id] = val;
    d->ds_rem[id] = (int8_t)rem;
    d->ds_ok[id] = ok;
    if (!rehash(&d->ds_tab, &d->cap_ds_tab, d->n_ds, d, ds_key, d->n_ds - 1)) return NONE;
    size_t j = h & (d->cap_ds_tab - 1);
    while (d->ds_tab[j]) j = (j + 1) & (d->cap_ds_tab - 1);
    d->ds_tab[j] = id + 1;
    return id;
}

/* The state after byte b from state ds (DEAD when nothing can follow; NONE on failure). */
static uint32_t dfa_next(walk *w, uint32_t ds, uint8_t b) {
    dfa *d = w->d;
    uint64_t key = ((uint64_t)ds << 8 | b) + 1;
    if (d->cap_tr) {
        for (size_t j = mix(key) & (d->cap_tr - 1); d->tr_key[j]; j = (j + 1) & (d->cap_tr - 1))
            if (d->tr_key[j] == key) return d->tr_val[j];
    }
    cera_grammar_matcher *m = w->m;
    uint32_t set = d->ds_set[ds], v = d->ds_val[ds], cp = 0, next = DEAD;
    int r = d->ds_rem[ds];
    int st = utf8_byte(b, &v, &r, &cp);
    if (st == 0) {
        const uint32_t *sv = d->set_data + d->set_off[set];
        size_t sn = d->set_len[set];
        bool any = false; /* a stack with a character set on top: the code point may complete */
        for (size_t i = 0; i < sn && !any; i++) any = sv[i] != 0 && !is_token_top(m, sv[i]);
        if (any) next = intern_ds(d, set, v, r, partial_fits(m, sv, sn, v, r));
    } else if (st == 1) {
        if (!gm_step(m, d->set_data + d->set_off[set], d->set_len[set], cp)) return NONE;
        if (m->n_next) {
            qsort(m->next, m->n_next, sizeof *m->next, cmp_u32);
            uint32_t s2 = intern_set(d, m->next, m->n_next);
            next = s2 == NONE ? NONE : intern_ds(d, s2, 0, 0, true);
        }
    }
    if (next == NONE) return NONE;
    if ((d->n_tr + 1) * 2 > d->cap_tr) {
        size_t cap = d->cap_tr ? d->cap_tr * 2 : 4096;
        uint64_t *k2 = calloc(cap, sizeof *k2);
        uint32_t *v2 = malloc(cap * sizeof *v2);
        if (!k2 || !v2) {
            free(k2);
            free(v2);
            return NONE;
        }
        for (size_t i = 0; i < d->cap_tr; i++) {
            if (!d->tr_key[i]) continue;
            size_t j = mix(d->tr_key[i]) & (cap - 1);
            while (k2[j]) j = (j + 1) & (cap - 1);
            k2[j] = d->tr_key[i];
            v2[j] = d->tr_val[i];
        }
        free(d->tr_key);
        free(d->tr_val);
        d->tr_key = k2;
        d->tr_val = v2;
        d->cap_tr = cap;
    }
    size_t j = mix(key) & (d->cap_tr - 1);
    while (d->tr_key[j]) j = (j + 1) & (d->cap_tr - 1);
    d->tr_key[j] = key;
    d->tr_val[j] = next;
    d->n_tr++;
    return next;
}

/* Walks the children of trie node `node` from automaton state ds. */
static bool walk_node(walk *w, uint32_t node, uint32_t ds) {
    const tnode *nodes = w->t->nodes;
    for (uint32_t c = nodes[node].first_child; c != NONE; c = nodes[c].next_sibling) {
        uint32_t nd = dfa_next(w, ds, nodes[c].byte);
        if (nd == NONE) return w->m->failed ? false : gm_fail(w->m, CERA_ERR_NO_MEMORY, "out of memory");
        if (nd == DEAD) continue;
        if (w->d->ds_ok[nd]) allow_node(w, c);
        if (nodes[c].first_child != NONE && !walk_node(w, c, nd)) return false;
    }
    return true;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void entry_free(cache_entry *e) {
    free(e->key);
    free(e->mask);
    memset(e, 0, sizeof *e);
}

void gm_cache_free(struct mask_cache *c) {
    if (!c) return;
    dfa_free(&c->d);
    for (size_t i = 0; i < c->n; i++) entry_free(&c->e[i]);
    free(c);
}

static void cache_clear(struct mask_cache *c) {
    for (size_t i = 0; i < c->n; i++) entry_free(&c->e[i]);
    c->n = c->victim = 0;
}

cera_status cera_grammar_matcher_mask(cera_grammar_matcher *m, const cera_grammar_tokens *t, uint32_t *mask,
                                      cera_error *err) {
    if (!m || !t || !mask) return cera_fail(err, CERA_ERR_INVALID_ARG, "grammar mask: missing argument");
    if (m->failed) return cera_fail(err, CERA_ERR_UNSUPPORTED, "grammar matcher stopped at an earlier limit");
    size_t words = t->n_words;
    memset(mask, 0, words * sizeof *mask);
    if (m->n_stacks == 0) return CERA_OK;

    /* the state's key: its stacks sorted, and the partial code point */
    if (!m->cache && !(m->cache = calloc(1, sizeof *m->cache)))
        return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    struct mask_cache *c = m->cache;
    if (c->tok != t || c->epoch != m->epoch || c->d.n_tr > (8u << 20) || c->d.n_set_data > (64u << 20)) {
        cache_clear(c);
        dfa_free(&c->d);
        c->tok = t;
        c->epoch = m->epoch;
    }
    uint32_t *key = malloc(m->n_stacks * sizeof *key);
    if (!key) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    memcpy(key, m->stacks, m->n_stacks * sizeof *key);
    qsort(key, m->n_stacks, sizeof *key, cmp_u32);
    uint64_t h = 1469598103934665603ull ^ m->partial_value ^ ((uint64_t)(m->partial_remain + 1) << 40);
    for (size_t i = 0; i < m->n_stacks; i++) h = (h ^ key[i]) * 1099511628211ull;
    for (size_t i = 0; i < c->n; i++) {
        cache_entry *e = &c->e[i];
        if (e->hash == h && e->n_key == m->n_stacks && e->pval == m->partial_value &&
            e->prem == m->partial_remain && !memcmp(e->key, key, m->n_stacks * sizeof *key)) {
            memcpy(mask, e->mask, words * sizeof *mask);
            c->hits++;
            free(key);
            return CERA_OK;
        }
    }
    c->misses++;

    m->err = err;
    walk w = {m, t, mask, &c->d};
    uint32_t set = intern_set(&c->d, key, m->n_stacks);
    uint32_t ds = set == NONE
                      ? NONE
                      : intern_ds(&c->d, set, m->partial_value, m->partial_remain,
                                  m->partial_remain == 0 ||
                                      partial_fits(m, key, m->n_stacks, m->partial_value, m->partial_remain));
    bool ok = ds != NONE ? walk_node(&w, 0, ds) : gm_fail(m, CERA_ERR_NO_MEMORY, "out of memory");
    m->err = NULL;
    if (!ok) {
        free(key);
        memset(mask, 0, words * sizeof *mask);
        return m->status;
    }
    /* token elements on top, and end of generation */
    bool complete = cera_grammar_matcher_complete(m);
    for (size_t i = 0; i < m->n_stacks; i++) {
        uint32_t s = m->stacks[i];
        if (!is_token_top(m, s)) continue;
        const gelem *e = m->g->el + m->pool.elem[s];
        for (int32_t k = 0; k < t->n_vocab; k++) {
            if (t->kind[k] != TOK_TEXT) continue;
            if ((e->type == GE_TOKEN) == (e->value == (uint32_t)k)) mask[k >> 5] |= 1u << (k & 31);
        }
    }
    for (int32_t k = 0; complete && k < t->n_vocab; k++)
        if (t->kind[k] == TOK_EOG) mask[k >> 5] |= 1u << (k & 31);

    /* keep it (replacing the oldest entry when full) */
    cache_entry *e = c->n < CACHE_SIZE ? &c->e[c->n++] : &c->e[c->victim++ % CACHE_SIZE];
    entry_free(e);
    e->mask = malloc(words * sizeof *mask);
    if (!e->mask) {
        free(key);
        return CERA_OK; /* the mask is right; it just is not cached */
    }
    memcpy(e->mask, mask, words * sizeof *mask);
    e->key = key;
    e->n_key = m->n_stacks;
    e->hash = h;
    e->pval = m->partial_value;
    e->prem = m->partial_remain;
    return CERA_OK;
}

/* The reference for one token, without the trie or the cache (what the mask must agree with). */
int cera_grammar_matcher_allows(cera_grammar_matcher *m, const cera_grammar_tokens *t, int32_t token) {
    if (!m || !t || token < 0 || token >= t->n_vocab || m->failed) return -1;
    if (m->n_stacks == 0) return 0;
    if (t->kind[token] == TOK_EOG) return cera_grammar_matcher_complete(m);
    if (t->kind[token] == TOK_NEVER) return 0;
    for (size_t i = 0; i < m->n_stacks; i++) {
        uint32_t s = m->stacks[i];
        if (!is_token_top(m, s)) continue;
        const gelem *e = m->g->el + m->pool.elem[s];
        if ((e->type == GE_TOKEN) == (e->value == (uint32_t)token)) return 1;
    }
    uint32_t *set = NULL;
    size_t cap = 0;
    if (!gm_grow_u32(&set, &cap, m->n_stacks + 1)) return -1;
    memcpy(set, m->stacks, m->n_stacks * sizeof *set);
    size_t n = m->n_stacks;
    uint32_t val = m->partial_value;
    int rem = m->partial_remain, res = 1;
    const uint8_t *p = (const uint8_t *)t->pieces[token];
    for (size_t k = 0; k < t->lens[token] && res == 1; k++) {
        uint32_t cp;
        int r = utf8_byte(p[k], &val, &rem, &cp);
        if (r < 0) {
            res = 0;
        } else if (r == 1) {
            if (!gm_step(m, set, n, cp) || !gm_grow_u32(&set, &cap, m->n_next + 1)) {
                res = -1;
                break;
            }
            if (m->n_next) memcpy(set, m->next, m->n_next * sizeof *set);
            n = m->n_next;
            if (n == 0) res = 0;
        }
    }
    if (res == 1 && rem > 0 && !partial_fits(m, set, n, val, rem)) res = 0;
    free(set);
    return res;
}

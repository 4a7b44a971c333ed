/*
 * match.c — the matcher: llama.cpp's pushdown stacks over a cera_grammar, advanced one
 * code point at a time (llama_grammar_accept's semantics).
 *
 * A stack is a list of element positions, its top the next terminal (character set or
 * token) to match; the empty stack is a finished parse. Each code point maps the set of
 * stacks to the set of stacks that take it: the top terminal is matched and replaced by
 * the element after it, and rule references on top are expanded into one stack per
 * alternative until every stack has a terminal on top (or is empty). Stacks that are
 * equal are kept once, so the set is what llama.cpp keeps.
 *
 * Stacks are persistent linked lists hash-consed in a node pool: a push is one lookup,
 * equal stacks are the same node, so deduplication is comparing integers and a stack
 * costs one node per element it adds. The pool is compacted to the live stacks when it
 * has grown. An ambiguous grammar can still need exponentially many stacks, so the
 * number of stacks and the expansions per code point are bounded (an error, not a hang).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

bool gm_grow_u32(uint32_t **v, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    uint32_t *n = realloc(*v, c * sizeof *n);
    if (!n) return false;
    *v = n;
    *cap = c;
    return true;
}

static size_t node_hash(uint32_t elem, uint32_t parent) {
    uint64_t h = ((uint64_t)elem << 32 | parent) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17);
}

static void pool_free(node_pool *p) {
    free(p->elem);
    free(p->parent);
    free(p->table);
    memset(p, 0, sizeof *p);
}

static bool pool_init(node_pool *p) {
    memset(p, 0, sizeof *p);
    p->cap = 1024;
    p->table_cap = 2048;
    p->elem = malloc(p->cap * sizeof *p->elem);
    p->parent = malloc(p->cap * sizeof *p->parent);
    p->table = calloc(p->table_cap, sizeof *p->table);
    if (!p->elem || !p->parent || !p->table) return false;
    p->elem[0] = NO_NODE; /* the empty stack */
    p->parent[0] = 0;
    p->n = 1;
    return true;
}

/* The node for `elem` on top of stack `parent` (made when new); NO_NODE when out of memory. */
static uint32_t pool_push(node_pool *p, uint32_t parent, uint32_t elem) {
    size_t mask = p->table_cap - 1, j = node_hash(elem, parent) & mask;
    for (uint32_t id; (id = p->table[j]) != 0; j = (j + 1) & mask)
        if (p->elem[id - 1] == elem && p->parent[id - 1] == parent) return id - 1;
    if (p->n == UINT32_MAX - 1) return NO_NODE;
    if (p->n == p->cap) {
        uint32_t cap = p->cap * 2;
        uint32_t *e = realloc(p->elem, cap * sizeof *e);
        if (!e) return NO_NODE;
        p->elem = e;
        uint32_t *pa = realloc(p->parent, cap * sizeof *pa);
        if (!pa) return NO_NODE;
        p->parent = pa;
        p->cap = cap;
    }
    if ((size_t)(p->n + 1) * 2 > p->table_cap) {
        size_t tcap = p->table_cap * 2;
        uint32_t *t = calloc(tcap, sizeof *t);
        if (!t) return NO_NODE;
        for (uint32_t i = 1; i < p->n; i++) {
            size_t k = node_hash(p->elem[i], p->parent[i]) & (tcap - 1);
            while (t[k]) k = (k + 1) & (tcap - 1);
            t[k] = i + 1;
        }
        free(p->table);
        p->table = t;
        p->table_cap = tcap;
        mask = tcap - 1;
        j = node_hash(elem, parent) & mask;
        while (p->table[j]) j = (j + 1) & mask;
    }
    uint32_t id = p->n++;
    p->elem[id] = elem;
    p->parent[id] = parent;
    p->table[j] = id + 1;
    return id;
}

bool gm_fail(cera_grammar_matcher *m, cera_status st, const char *msg) {
    if (!m->failed) {
        cera_fail(m->err, st, "%s", msg);
        m->status = st;
    }
    m->failed = true;
    return false;
}

uint32_t gm_push(cera_grammar_matcher *m, uint32_t parent, uint32_t elem) {
    uint32_t id = pool_push(&m->pool, parent, elem);
    if (id == NO_NODE) return gm_fail(m, CERA_ERR_NO_MEMORY, "grammar matcher: out of memory"), NO_NODE;
    if (id >= m->mark_cap) {
        size_t old = m->mark_cap;
        if (!gm_grow_u32(&m->mark, &m->mark_cap, (size_t)id + 1))
            return gm_fail(m, CERA_ERR_NO_MEMORY, "grammar matcher: out of memory"), NO_NODE;
        memset(m->mark + old, 0, (m->mark_cap - old) * sizeof *m->mark);
    }
    return id;
}

static bool add_next(cera_grammar_matcher *m, uint32_t s) {
    if (m->n_next >= m->lim.max_stacks)
        return gm_fail(m, CERA_ERR_UNSUPPORTED,
                       "grammar too ambiguous: too many parse stacks (limit reached)");
    if (!gm_grow_u32(&m->next, &m->cap_next, m->n_next + 1))
        return gm_fail(m, CERA_ERR_NO_MEMORY, "grammar matcher: out of memory");
    m->next[m->n_next++] = s;
    return true;
}

static bool todo_push(cera_grammar_matcher *m, uint32_t s) {
    if (!gm_grow_u32(&m->todo, &m->cap_todo, m->n_todo + 1))
        return gm_fail(m, CERA_ERR_NO_MEMORY, "grammar matcher: out of memory");
    m->todo[m->n_todo++] = s;
    return true;
}

/* Expands stack s until every stack has a terminal on top (or is empty), adding those to
 * m->next; stacks already expanded during this code point are skipped. */
bool gm_advance(cera_grammar_matcher *m, uint32_t s) {
    const gelem *el = m->g->el;
    if (!todo_push(m, s)) return false;
    while (m->n_todo) {
        uint32_t x = m->todo[--m->n_todo];
        if (m->mark[x] == m->gen) continue;
        m->mark[x] = m->gen;
        if (++m->work > m->lim.max_work)
            return gm_fail(m, CERA_ERR_UNSUPPORTED, "grammar too ambiguous: too much work for one character");
        if (x == EMPTY_STACK) {
            if (!add_next(m, x)) return false;
            continue;
        }
        uint32_t pos = m->pool.elem[x];
        const gelem *e = el + pos;
        if (e->type != GE_RULE_REF) {
            if (!add_next(m, x)) return false;
            continue;
        }
        uint32_t base = m->pool.parent[x];
        if (!gelem_is_eos(e + 1) && (base = gm_push(m, base, pos + 1)) == NO_NODE) return false;
        uint32_t sub = m->g->rule_off[e->value];
        for (;;) {
            uint32_t ns = base;
            if (!gelem_is_eos(el + sub) && (ns = gm_push(m, base, sub)) == NO_NODE) return false;
            if (!todo_push(m, ns)) return false;
            while (!gelem_is_eos(el + sub)) sub++;
            if (el[sub].type != GE_ALT) break;
            sub++;
        }
    }
    return true;
}

/* Whether cp is in the character set at el[pos]; *after: the element past the set. */
static bool match_char(const gelem *el, uint32_t pos, uint32_t cp, uint32_t *after) {
    bool found = false, positive = el[pos].type == GE_CHAR || el[pos].type == GE_CHAR_ANY;
    do {
        if (el[pos + 1].type == GE_CHAR_RNG_UPPER) {
            found = found || (el[pos].value <= cp && cp <= el[pos + 1].value);
            pos += 2;
        } else if (el[pos].type == GE_CHAR_ANY) {
            found = true;
            pos += 1;
        } else {
            found = found || el[pos].value == cp;
            pos += 1;
        }
    } while (el[pos].type == GE_CHAR_ALT);
    *after = pos;
    return found == positive;
}

void gm_new_step(cera_grammar_matcher *m) {
    m->n_next = 0;
    m->work = 0;
    if (++m->gen == 0) {
        memset(m->mark, 0, m->mark_cap * sizeof *m->mark);
        m->gen = 1;
    }
}

static void swap_sets(cera_grammar_matcher *m) {
    uint32_t *t = m->stacks;
    size_t c = m->cap_stacks;
    m->stacks = m->next;
    m->cap_stacks = m->cap_next;
    m->n_stacks = m->n_next;
    m->next = t;
    m->cap_next = c;
    m->n_next = 0;
}

/* Rebuilds the pool with only the nodes of the live stacks. */
static bool compact(cera_grammar_matcher *m) {
    node_pool np;
    uint32_t *remap = malloc((size_t)m->pool.n * sizeof *remap);
    if (!remap || !pool_init(&np)) {
        free(remap);
        pool_free(&np);
        return gm_fail(m, CERA_ERR_NO_MEMORY, "grammar matcher: out of memory");
    }
    memset(remap, 0xff, (size_t)m->pool.n * sizeof *remap);
    remap[0] = 0;
    for (size_t i = 0; i < m->n_stacks; i++) {
        m->n_todo = 0;
        for (uint32_t x = m->stacks[i]; remap[x] == NO_NODE; x = m->pool.parent[x])
            if (!todo_push(m, x)) goto oom;
        while (m->n_todo) {
            uint32_t x = m->todo[--m->n_todo];
            uint32_t id = pool_push(&np, remap[m->pool.parent[x]], m->pool.elem[x]);
            if (id == NO_NODE) goto oom;
            remap[x] = id;
        }
        m->stacks[i] = remap[m->stacks[i]];
    }
    free(remap);
    pool_free(&m->pool);
    m->pool = np;
    memset(m->mark, 0, m->mark_cap * sizeof *m->mark);
    m->compact_at = m->pool.n * 8 > (1u << 21) ? m->pool.n * 8 : (1u << 21);
    m->epoch++;
    return true;
oom:
    free(remap);
    pool_free(&np);
    return gm_fail(m, CERA_ERR_NO_MEMORY, "grammar matcher: out of memory");
}

static cera_grammar_matcher *matcher_alloc(const cera_grammar *g, const cera_grammar_limits *limits) {
    cera_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->g = g;
    if (limits) m->lim = *limits;
    if (!m->lim.max_stacks) m->lim.max_stacks = 65536;
    if (!m->lim.max_work) m->lim.max_work = 4u << 20;
    m->compact_at = 1u << 21;
    if (!pool_init(&m->pool) || !gm_grow_u32(&m->mark, &m->mark_cap, m->pool.cap)) {
        cera_grammar_matcher_free(m);
        return NULL;
    }
    memset(m->mark, 0, m->mark_cap * sizeof *m->mark);
    return m;
}

cera_status cera_grammar_matcher_new(const cera_grammar *g, const cera_grammar_limits *limits,
                                     cera_grammar_matcher **out, cera_error *err) {
    *out = NULL;
    if (!g) return cera_fail(err, CERA_ERR_INVALID_ARG, "no grammar");
    cera_grammar_matcher *m = matcher_alloc(g, limits);
    if (!m) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    m->err = err;
    gm_new_step(m);
    const gelem *el = g->el;
    uint32_t pos = g->rule_off[g->root];
    for (;;) {
        uint32_t s = EMPTY_STACK;
        if (!gelem_is_eos(el + pos) && (s = gm_push(m, EMPTY_STACK, pos)) == NO_NODE) break;
        if (!gm_advance(m, s)) break;
        while (!gelem_is_eos(el + pos)) pos++;
        if (el[pos].type != GE_ALT) break;
        pos++;
    }
    if (m->failed) {
        cera_status st = m->status;
        cera_grammar_matcher_free(m);
        return st;
    }
    swap_sets(m);
    m->err = NULL;
    *out = m;
    return CERA_OK;
}

void cera_grammar_matcher_free(cera_grammar_matcher *m) {
    if (!m) return;
    gm_cache_free(m->cache);
    pool_free(&m->pool);
    free(m->stacks);
    free(m->next);
    free(m->mark);
    free(m->todo);
    free(m);
}

cera_status cera_grammar_matcher_clone(const cera_grammar_matcher *m, cera_grammar_matcher **out,
                                       cera_error *err) {
    *out = NULL;
    cera_grammar_matcher *c = m ? calloc(1, sizeof *c) : NULL;
    if (!c) return cera_fail(err, m ? CERA_ERR_NO_MEMORY : CERA_ERR_INVALID_ARG, "cannot clone the matcher");
    *c = *m;
    c->pool.elem = malloc(m->pool.cap * sizeof(uint32_t));
    c->pool.parent = malloc(m->pool.cap * sizeof(uint32_t));
    c->pool.table = malloc(m->pool.table_cap * sizeof(uint32_t));
    c->mark = calloc(m->mark_cap, sizeof(uint32_t));
    c->stacks = malloc((m->cap_stacks ? m->cap_stacks : 1) * sizeof(uint32_t));
    c->next = NULL;
    c->cap_next = c->n_next = 0;
    c->todo = NULL;
    c->cap_todo = c->n_todo = 0;
    c->gen = 1;
    c->cache = NULL;
    if (!c->pool.elem || !c->pool.parent || !c->pool.table || !c->mark || !c->stacks) {
        cera_grammar_matcher_free(c);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    }
    memcpy(c->pool.elem, m->pool.elem, m->pool.n * sizeof(uint32_t));
    memcpy(c->pool.parent, m->pool.parent, m->pool.n * sizeof(uint32_t));
    memcpy(c->pool.table, m->pool.table, m->pool.table_cap * sizeof(uint32_t));
    if (m->n_stacks) memcpy(c->stacks, m->stacks, m->n_stacks * sizeof(uint32_t));
    *out = c;
    return CERA_OK;
}

bool gm_step(cera_grammar_matcher *m, const uint32_t *in, size_t n, uint32_t cp) {
    gm_new_step(m);
    const gelem *el = m->g->el;
    for (size_t i = 0; i < n; i++) {
        uint32_t s = in[i];
        if (s == EMPTY_STACK) continue;
        uint32_t pos = m->pool.elem[s], after;
        uint32_t t = el[pos].type;
        if (t == GE_TOKEN || t == GE_TOKEN_NOT) continue; /* a token never matches a character */
        if (!match_char(el, pos, cp, &after)) continue;
        uint32_t ns = m->pool.parent[s];
        if (!gelem_is_eos(el + after) && (ns = gm_push(m, ns, after)) == NO_NODE) return false;
        if (!gm_advance(m, ns)) return false;
    }
    return true;
}

bool gm_commit(cera_grammar_matcher *m) {
    swap_sets(m);
    if (m->pool.n > m->compact_at && !compact(m)) {
        m->n_stacks = 0;
        return false;
    }
    return true;
}

cera_status cera_grammar_matcher_accept(cera_grammar_matcher *m, uint32_t cp, cera_error *err) {
    if (!m) return cera_fail(err, CERA_ERR_INVALID_ARG, "no matcher");
    if (m->failed) return cera_fail(err, CERA_ERR_UNSUPPORTED, "grammar matcher stopped at an earlier limit");
    if (m->n_stacks == 0) return CERA_OK;
    m->err = err;
    bool ok = gm_step(m, m->stacks, m->n_stacks, cp) && gm_commit(m);
    m->err = NULL;
    if (!ok) {
        m->n_stacks = 0;
        return m->status;
    }
    return CERA_OK;
}

bool gm_match_partial(const gelem *el, uint32_t pos, uint32_t value, int n_remain) {
    bool positive = el[pos].type == GE_CHAR || el[pos].type == GE_CHAR_ANY;
    if (n_remain < 0 || (n_remain == 1 && value < 2)) return false; /* invalid, or an overlong 2-byte form */
    uint32_t low = value << (n_remain * 6), high = low | ((1u << (n_remain * 6)) - 1);
    if (low == 0) {
        if (n_remain == 2)
            low = 1u << 11;
        else if (n_remain == 3)
            low = 1u << 16;
    }
    do {
        if (el[pos + 1].type == GE_CHAR_RNG_UPPER) {
            if (el[pos].value <= high && low <= el[pos + 1].value) return positive;
            pos += 2;
        } else if (el[pos].type == GE_CHAR_ANY) {
            return true;
        } else {
            if (low <= el[pos].value && el[pos].value <= high) return positive;
            pos += 1;
        }
    } while (el[pos].type == GE_CHAR_ALT);
    return !positive;
}

bool cera_grammar_matcher_dead(const cera_grammar_matcher *m) { return !m || m->n_stacks == 0; }

bool cera_grammar_matcher_complete(const cera_grammar_matcher *m) {
    if (!m) return false;
    for (size_t i = 0; i < m->n_stacks; i++)
        if (m->stacks[i] == EMPTY_STACK) return true;
    return false;
}

size_t cera_grammar_matcher_n_stacks(const cera_grammar_matcher *m) { return m ? m->n_stacks : 0; }

/* One code point of an input (strict UTF-8; an invalid byte is U+FFFD). */
static size_t next_cp(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t b = s[0];
    size_t len = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 0;
    if (len == 1) {
        *cp = b;
        return 1;
    }
    if (len == 0 || len > n) goto bad;
    uint32_t v = b & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) goto bad;
        v = v << 6 | (s[i] & 0x3f);
    }
    *cp = v;
    return len;
bad:
    *cp = 0xfffd;
    return 1;
}

cera_status cera_grammar_check(const cera_grammar *g, const char *input, size_t len, bool *accepted,
                               size_t *reject_pos, cera_error *err) {
    *accepted = false;
    *reject_pos = 0;
    cera_grammar_matcher *m;
    cera_status st = cera_grammar_matcher_new(g, NULL, &m, err);
    if (st != CERA_OK) return st;
    const uint8_t *s = (const uint8_t *)input;
    size_t pos = 0;
    for (size_t i = 0; i < len; pos++) {
        uint32_t cp;
        i += next_cp(s + i, len - i, &cp);
        if ((st = cera_grammar_matcher_accept(m, cp, err)) != CERA_OK) break;
        if (cera_grammar_matcher_dead(m)) {
            *reject_pos = pos;
            cera_grammar_matcher_free(m);
            return CERA_OK;
        }
    }
    if (st == CERA_OK) {
        *accepted = cera_grammar_matcher_complete(m);
        if (!*accepted) *reject_pos = pos;
    }
    cera_grammar_matcher_free(m);
    return st;
}

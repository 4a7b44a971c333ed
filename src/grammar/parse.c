/*
 * parse.c — GBNF text → a cera_grammar, with llama.cpp's syntax and its refusals.
 *
 * A recursive-descent parser over the text as a C string (llama.cpp reads it so; a NUL
 * ends it). It builds the rules exactly as llama_grammar_parser does, because the matcher's
 * verdicts depend on that shape: a group becomes an anonymous rule; S{m,n} becomes m
 * copies of S followed by a chain of optional helper rules (S* and S+ use one
 * self-referencing helper); a second definition of a rule replaces the first. The same
 * limits are applied (a repeat count over 2000, or repeated rules times the count reaching
 * 2000), then the checks on the whole grammar: every referenced rule defined, a `root`,
 * and no left recursion (syntactic: through leftmost references, and past those whose
 * rule has an explicitly empty alternative).
 *
 * Errors carry line and column of where parsing stopped. Sizes (elements, rules, nesting)
 * are bounded so hostile grammars cannot exhaust memory or the C stack.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

#define MAX_REPETITION_THRESHOLD 2000
#define MAX_NESTING              512
#define MAX_ELEMENTS             (8u << 20)
#define MAX_RULES                (1u << 20)

typedef struct gvec {
    gelem *v;
    size_t n, cap;
} gvec;

typedef struct symbol {
    char *name;
    uint32_t id;
} symbol;

typedef struct parser {
    const char *src;
    const cera_grammar_vocab *vocab;
    gvec *rules; /* [n_rules_cap] by symbol id; v == NULL: not defined */
    size_t rules_cap;
    uint32_t n_symbols; /* named and generated */
    symbol *names;      /* open-addressed table of the named symbols */
    size_t names_cap, n_names;
    size_t n_elements; /* across every rule, for the size limit */
    int depth;
    bool failed;
    cera_status status; /* of the first failure */
    cera_error *err;
} parser;

/* The error at text position `at`: "line L, column C: msg (at '...')". */
static const char *fail_at(parser *p, const char *at, const char *msg) {
    if (p->failed) return NULL;
    p->failed = true;
    p->status = CERA_ERR_FORMAT;
    int line = 1, col = 1;
    for (const char *c = p->src; c < at; c++) {
        if (*c == '\n') {
            line++;
            col = 1;
        } else if ((*c & 0xc0) != 0x80) {
            col++;
        }
    }
    char ctx[32];
    size_t k = 0;
    while (at && at[k] && at[k] != '\n' && at[k] != '\r' && k < 24) k++;
    memcpy(ctx, at ? at : "", k);
    ctx[k] = 0;
    if (k)
        cera_fail(p->err, CERA_ERR_FORMAT, "line %d, column %d: %s at '%s'", line, col, msg, ctx);
    else
        cera_fail(p->err, CERA_ERR_FORMAT, "line %d, column %d: %s", line, col, msg);
    return NULL;
}

static const char *fail_status(parser *p, cera_status st, const char *msg) {
    if (!p->failed) {
        cera_fail(p->err, st, "%s", msg);
        p->status = st;
    }
    p->failed = true;
    return NULL;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || is_digit(c);
}

static uint64_t hash_name(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static bool grow_names(parser *p) {
    size_t cap = p->names_cap ? p->names_cap * 2 : 64;
    symbol *t = calloc(cap, sizeof *t);
    if (!t) return false;
    for (size_t i = 0; i < p->names_cap; i++) {
        if (!p->names[i].name) continue;
        size_t j = hash_name(p->names[i].name, strlen(p->names[i].name)) & (cap - 1);
        while (t[j].name) j = (j + 1) & (cap - 1);
        t[j] = p->names[i];
    }
    free(p->names);
    p->names = t;
    p->names_cap = cap;
    return true;
}

/* The id of a named symbol, made on first sight (UINT32_MAX when out of memory or rules). */
static uint32_t symbol_id(parser *p, const char *name, size_t n) {
    if (p->names_cap) {
        size_t j = hash_name(name, n) & (p->names_cap - 1);
        while (p->names[j].name) {
            if (!strncmp(p->names[j].name, name, n) && !p->names[j].name[n]) return p->names[j].id;
            j = (j + 1) & (p->names_cap - 1);
        }
    }
    if (p->n_symbols >= MAX_RULES)
        return fail_status(p, CERA_ERR_UNSUPPORTED, "grammar has too many rules"), UINT32_MAX;
    if ((p->n_names + 1) * 2 > p->names_cap && !grow_names(p))
        return fail_status(p, CERA_ERR_NO_MEMORY, "out of memory"), UINT32_MAX;
    char *copy = malloc(n + 1);
    if (!copy) return fail_status(p, CERA_ERR_NO_MEMORY, "out of memory"), UINT32_MAX;
    memcpy(copy, name, n);
    copy[n] = 0;
    size_t j = hash_name(name, n) & (p->names_cap - 1);
    while (p->names[j].name) j = (j + 1) & (p->names_cap - 1);
    p->names[j].name = copy;
    p->names[j].id = p->n_symbols;
    p->n_names++;
    return p->n_symbols++;
}

static uint32_t generate_id(parser *p) {
    if (p->n_symbols >= MAX_RULES)
        return fail_status(p, CERA_ERR_UNSUPPORTED, "grammar has too many rules"), UINT32_MAX;
    return p->n_symbols++;
}

static const char *name_of(const parser *p, uint32_t id) {
    for (size_t i = 0; i < p->names_cap; i++)
        if (p->names[i].name && p->names[i].id == id) return p->names[i].name;
    return "?";
}

static bool vec_push(parser *p, gvec *r, uint32_t type, uint32_t value) {
    if (p->failed) return false;
    if (++p->n_elements > MAX_ELEMENTS)
        return fail_status(p, CERA_ERR_UNSUPPORTED, "grammar too large (elements)"), false;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 8;
        gelem *v = realloc(r->v, cap * sizeof *v);
        if (!v) return fail_status(p, CERA_ERR_NO_MEMORY, "out of memory"), false;
        r->v = v;
        r->cap = cap;
    }
    r->v[r->n++] = (gelem){type, value};
    return true;
}

static bool vec_append(parser *p, gvec *r, const gelem *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!vec_push(p, r, src[i].type, src[i].value)) return false;
    return true;
}

/* Sets rule id to r (moved); an earlier definition is replaced. */
static bool add_rule(parser *p, uint32_t id, gvec *r) {
    if (id >= p->rules_cap) {
        size_t cap = p->rules_cap ? p->rules_cap : 64;
        while (cap <= id) cap *= 2;
        gvec *v = realloc(p->rules, cap * sizeof *v);
        if (!v) return fail_status(p, CERA_ERR_NO_MEMORY, "out of memory"), false;
        memset(v + p->rules_cap, 0, (cap - p->rules_cap) * sizeof *v);
        p->rules = v;
        p->rules_cap = cap;
    }
    if (p->rules[id].v) p->n_elements -= p->rules[id].n;
    free(p->rules[id].v);
    p->rules[id] = *r;
    *r = (gvec){0};
    return true;
}

static const char *parse_space(const char *s, bool newline_ok) {
    while (*s == ' ' || *s == '\t' || *s == '#' || (newline_ok && (*s == '\r' || *s == '\n'))) {
        if (*s == '#') {
            while (*s && *s != '\r' && *s != '\n') s++;
        } else {
            s++;
        }
    }
    return s;
}

/* One code point of a grammar text, as llama.cpp decodes it (no validation). */
static const char *decode_utf8(const char *s, uint32_t *cp) {
    static const int lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    uint8_t first = (uint8_t)*s;
    int len = lookup[first >> 4];
    uint32_t v = first & ((1u << (8 - len)) - 1);
    const char *end = s + len, *pos = s + 1;
    for (; pos < end && *pos; pos++) v = (v << 6) + ((uint8_t)*pos & 0x3f);
    *cp = v;
    return pos;
}

static const char *parse_hex(parser *p, const char *s, int size, uint32_t *out) {
    uint32_t v = 0;
    const char *pos = s;
    for (; pos < s + size && *pos; pos++) {
        char c = *pos;
        v <<= 4;
        if (c >= 'a' && c <= 'f')
            v += (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v += (uint32_t)(c - 'A' + 10);
        else if (is_digit(c))
            v += (uint32_t)(c - '0');
        else
            break;
    }
    if (pos != s + size) {
        char msg[48];
        snprintf(msg, sizeof msg, "expecting %d hex chars", size);
        return fail_at(p, s, msg);
    }
    *out = v;
    return pos;
}

static const char *parse_char(parser *p, const char *s, uint32_t *cp) {
    if (*s == '\\') {
        switch (s[1]) {
        case 'x': return parse_hex(p, s + 2, 2, cp);
        case 'u': return parse_hex(p, s + 2, 4, cp);
        case 'U': return parse_hex(p, s + 2, 8, cp);
        case 't': *cp = '\t'; return s + 2;
        case 'r': *cp = '\r'; return s + 2;
        case 'n': *cp = '\n'; return s + 2;
        case '\\':
        case '"':
        case '[':
        case ']': *cp = (uint8_t)s[1]; return s + 2;
        default: return fail_at(p, s, "unknown escape");
        }
    }
    if (*s) return decode_utf8(s, cp);
    return fail_at(p, s, "unexpected end of input");
}

static const char *parse_int(parser *p, const char *s, uint64_t *out) {
    const char *pos = s;
    uint64_t v = 0;
    while (is_digit(*pos)) {
        if (v < (UINT64_MAX - 9) / 10)
            v = v * 10 + (uint64_t)(*pos - '0');
        else
            v = UINT64_MAX - 1; /* saturate; over the threshold anyway */
        pos++;
    }
    if (pos == s) return fail_at(p, s, "expecting an int");
    *out = v;
    return pos;
}

/* `<[id]>` or `<text>` (the latter through the vocabulary). */
static const char *parse_token(parser *p, const char *s, uint32_t *id) {
    const char *pos = s;
    if (*pos != '<') return fail_at(p, pos, "expecting '<'");
    pos++;
    if (*pos == '[') {
        uint64_t v;
        pos = parse_int(p, pos + 1, &v);
        if (!pos) return NULL;
        if (v > UINT32_MAX) return fail_at(p, s, "token id out of range");
        if (*pos != ']') return fail_at(p, pos, "expecting ']'");
        if (*++pos != '>') return fail_at(p, pos, "expecting '>'");
        *id = (uint32_t)v;
        return pos + 1;
    }
    if (!p->vocab || !p->vocab->token_of_text) return fail_at(p, s, "no vocab to parse token");
    while (*pos && *pos != '>') pos++;
    if (*pos != '>') return fail_at(p, pos, "expecting '>'");
    pos++;
    int32_t t = p->vocab->token_of_text(p->vocab->user, s, (size_t)(pos - s));
    if (t < 0) return fail_at(p, s, "invalid token (not a single token of the vocabulary)");
    *id = (uint32_t)t;
    return pos;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t rule_id, bool nested);

/* Rewrites the last symbol (r[last..]) for S{min,max} (max UINT64_MAX: no bound). */
static bool repeat_last(parser *p, const char *at, gvec *r, size_t last, uint64_t *n_prev, uint64_t min,
                        uint64_t max) {
    bool no_max = max == UINT64_MAX;
    if (last == r->n) return fail_at(p, at, "expecting preceding item to */+/?/{"), false;
    uint64_t total = 1;
    if (!no_max && max > 0)
        total = max;
    else if (min > 0)
        total = min;
    if (*n_prev * total >= MAX_REPETITION_THRESHOLD)
        return fail_at(
                   p, at,
                   "number of rules that are going to be repeated multiplied by the new repetition exceeds "
                   "sane defaults (2000)"),
               false;
    size_t n_sym = r->n - last;
    gelem *sym = malloc(n_sym * sizeof *sym);
    if (!sym) return fail_status(p, CERA_ERR_NO_MEMORY, "out of memory"), false;
    memcpy(sym, r->v + last, n_sym * sizeof *sym);
    bool ok = true;
    if (min == 0) {
        p->n_elements -= n_sym;
        r->n = last;
    } else {
        for (uint64_t i = 1; i < min && ok; i++) ok = vec_append(p, r, sym, n_sym);
    }
    uint32_t last_rec = 0;
    uint64_t n_opt = no_max ? 1 : max - min;
    for (uint64_t i = 0; i < n_opt && ok; i++) {
        gvec rec = {0};
        uint32_t rec_id = generate_id(p);
        ok = rec_id != UINT32_MAX && vec_append(p, &rec, sym, n_sym);
        if (ok && (i > 0 || no_max)) ok = vec_push(p, &rec, GE_RULE_REF, no_max ? rec_id : last_rec);
        ok = ok && vec_push(p, &rec, GE_ALT, 0) && vec_push(p, &rec, GE_END, 0) && add_rule(p, rec_id, &rec);
        free(rec.v);
        last_rec = rec_id;
    }
    if (ok && n_opt > 0) ok = vec_push(p, r, GE_RULE_REF, last_rec);
    *n_prev *= total;
    free(sym);
    return ok;
}

static const char *parse_sequence(parser *p, const char *s, gvec *r, bool nested) {
    size_t last = r->n;
    uint64_t n_prev = 1;
    const char *pos = s;
    while (*pos && !p->failed) {
        if (*pos == '"') {
            pos++;
            last = r->n;
            n_prev = 1;
            while (*pos != '"') {
                if (!*pos) return fail_at(p, pos, "unexpected end of input (unterminated literal)");
                uint32_t c;
                if (!(pos = parse_char(p, pos, &c)) || !vec_push(p, r, GE_CHAR, c)) return NULL;
            }
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '[') {
            pos++;
            uint32_t start = GE_CHAR;
            if (*pos == '^') {
                pos++;
                start = GE_CHAR_NOT;
            }
            last = r->n;
            n_prev = 1;
            while (*pos != ']') {
                if (!*pos) return fail_at(p, pos, "unexpected end of input (unterminated character class)");
                uint32_t c;
                if (!(pos = parse_char(p, pos, &c))) return NULL;
                if (!vec_push(p, r, last < r->n ? GE_CHAR_ALT : start, c)) return NULL;
                if (pos[0] == '-' && pos[1] != ']') {
                    if (!pos[1])
                        return fail_at(p, pos + 1, "unexpected end of input (unterminated character class)");
                    if (!(pos = parse_char(p, pos + 1, &c)) || !vec_push(p, r, GE_CHAR_RNG_UPPER, c))
                        return NULL;
                }
            }
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '<' || *pos == '!') {
            uint32_t type = GE_TOKEN, id;
            if (*pos == '!') {
                type = GE_TOKEN_NOT;
                pos++;
            }
            if (!(pos = parse_token(p, pos, &id))) return NULL;
            last = r->n;
            n_prev = 1;
            if (!vec_push(p, r, type, id)) return NULL;
            pos = parse_space(pos, nested);
        } else if (is_word(*pos)) {
            const char *end = pos;
            while (is_word(*end)) end++;
            uint32_t id = symbol_id(p, pos, (size_t)(end - pos));
            if (id == UINT32_MAX) return NULL;
            pos = parse_space(end, nested);
            last = r->n;
            n_prev = 1;
            if (!vec_push(p, r, GE_RULE_REF, id)) return NULL;
        } else if (*pos == '(') {
            if (++p->depth > MAX_NESTING) return fail_at(p, pos, "groups nested too deeply");
            pos = parse_space(pos + 1, true);
            uint32_t before = p->n_symbols, sub = generate_id(p);
            if (sub == UINT32_MAX || !(pos = parse_alternates(p, pos, sub, true))) return NULL;
            p->depth--;
            n_prev = p->n_symbols - before > 1 ? p->n_symbols - before : 1;
            last = r->n;
            if (!vec_push(p, r, GE_RULE_REF, sub)) return NULL;
            if (*pos != ')') return fail_at(p, pos, "expecting ')'");
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '.') {
            last = r->n;
            n_prev = 1;
            if (!vec_push(p, r, GE_CHAR_ANY, 0)) return NULL;
            pos = parse_space(pos + 1, nested);
        } else if (*pos == '*' || *pos == '+' || *pos == '?') {
            char op = *pos;
            pos = parse_space(pos + 1, nested);
            if (!repeat_last(p, pos, r, last, &n_prev, op == '+', op == '?' ? 1 : UINT64_MAX)) return NULL;
        } else if (*pos == '{') {
            pos = parse_space(pos + 1, nested);
            if (!is_digit(*pos)) return fail_at(p, pos, "expecting an int");
            uint64_t min, max = UINT64_MAX;
            if (!(pos = parse_int(p, pos, &min))) return NULL;
            pos = parse_space(pos, nested);
            if (*pos == '}') {
                max = min;
                pos = parse_space(pos + 1, nested);
            } else if (*pos == ',') {
                pos = parse_space(pos + 1, nested);
                if (is_digit(*pos)) {
                    if (!(pos = parse_int(p, pos, &max))) return NULL;
                    pos = parse_space(pos, nested);
                }
                if (*pos != '}') return fail_at(p, pos, "expecting '}'");
                pos = parse_space(pos + 1, nested);
            } else {
                return fail_at(p, pos, "expecting ','");
            }
            if (min > MAX_REPETITION_THRESHOLD)
                return fail_at(p, pos, "number of repetitions exceeds sane defaults (2000)");
            if (max != UINT64_MAX && max > MAX_REPETITION_THRESHOLD) max = UINT64_MAX; /* as llama.cpp */
            if (max != UINT64_MAX && max < min)
                return fail_at(p, pos, "repetition maximum below its minimum");
            if (!repeat_last(p, pos, r, last, &n_prev, min, max)) return NULL;
        } else {
            break;
        }
    }
    return p->failed ? NULL : pos;
}

static const char *parse_alternates(parser *p, const char *s, uint32_t rule_id, bool nested) {
    gvec r = {0};
    const char *pos = parse_sequence(p, s, &r, nested);
    while (pos && *pos == '|') {
        if (!vec_push(p, &r, GE_ALT, 0)) break;
        pos = parse_sequence(p, parse_space(pos + 1, true), &r, nested);
    }
    if (pos && (!vec_push(p, &r, GE_END, 0) || !add_rule(p, rule_id, &r))) pos = NULL;
    free(r.v);
    return pos;
}

static const char *parse_rule(parser *p, const char *s) {
    const char *end = s;
    while (is_word(*end)) end++;
    if (end == s) return fail_at(p, s, "expecting name");
    const char *pos = parse_space(end, false);
    uint32_t id = symbol_id(p, s, (size_t)(end - s));
    if (id == UINT32_MAX) return NULL;
    if (!(pos[0] == ':' && pos[1] == ':' && pos[2] == '=')) return fail_at(p, pos, "expecting ::=");
    pos = parse_alternates(p, parse_space(pos + 3, true), id, false);
    if (!pos) return NULL;
    if (*pos == '\r')
        pos += pos[1] == '\n' ? 2 : 1;
    else if (*pos == '\n')
        pos++;
    else if (*pos)
        return fail_at(p, pos, "expecting newline or end");
    return parse_space(pos, true);
}

/* llama.cpp's left-recursion check (see the file comment), bounded in depth. */
typedef struct lr_state {
    const cera_grammar *g;
    uint8_t *visited, *in_progress, *may_be_empty;
    int depth;
} lr_state;

static int detect_left_recursion(lr_state *s, uint32_t rule) {
    if (s->in_progress[rule]) return 1;
    if (++s->depth > 20000) return -1;
    s->in_progress[rule] = 1;
    const gelem *r = s->g->el + s->g->rule_off[rule];
    bool at_start = true;
    for (const gelem *e = r;; e++) {
        if (gelem_is_eos(e)) {
            if (at_start) {
                s->may_be_empty[rule] = 1;
                break;
            }
            at_start = true;
        } else {
            at_start = false;
        }
        if (e->type == GE_END) break;
    }
    bool recurse = true;
    for (const gelem *e = r;; e++) {
        if (e->type == GE_RULE_REF && recurse) {
            int lr = detect_left_recursion(s, e->value);
            if (lr) return lr;
            if (!s->may_be_empty[e->value]) recurse = false;
        } else if (gelem_is_eos(e)) {
            recurse = true;
        } else {
            recurse = false;
        }
        if (e->type == GE_END) break;
    }
    s->in_progress[rule] = 0;
    s->visited[rule] = 1;
    s->depth--;
    return 0;
}

static cera_status finish(parser *p, cera_grammar **out, cera_error *err) {
    uint32_t root = UINT32_MAX;
    if (p->names_cap) {
        size_t j = hash_name("root", 4) & (p->names_cap - 1);
        for (; p->names[j].name; j = (j + 1) & (p->names_cap - 1))
            if (!strcmp(p->names[j].name, "root")) root = p->names[j].id;
    }
    uint32_t n_rules = p->n_symbols;
    for (uint32_t i = 0; i < n_rules; i++) {
        if (i >= p->rules_cap || !p->rules[i].v)
            return cera_fail(err, CERA_ERR_FORMAT, "undefined rule identifier '%s'", name_of(p, i));
    }
    if (n_rules == 0) return cera_fail(err, CERA_ERR_FORMAT, "failed to parse grammar: no rules");
    if (root == UINT32_MAX)
        return cera_fail(err, CERA_ERR_FORMAT, "grammar does not contain a 'root' symbol");
    cera_grammar *g = calloc(1, sizeof *g);
    if (!g) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    size_t total = 0;
    for (uint32_t i = 0; i < n_rules; i++) total += p->rules[i].n;
    g->el = malloc(total * sizeof *g->el);
    g->rule_off = malloc(n_rules * sizeof *g->rule_off);
    if (!g->el || !g->rule_off) {
        cera_grammar_free(g);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    }
    for (uint32_t i = 0; i < n_rules; i++) {
        g->rule_off[i] = (uint32_t)g->n_el;
        memcpy(g->el + g->n_el, p->rules[i].v, p->rules[i].n * sizeof *g->el);
        g->n_el += p->rules[i].n;
    }
    g->n_rules = n_rules;
    g->root = root;
    lr_state s = {g, calloc(n_rules, 1), calloc(n_rules, 1), calloc(n_rules, 1), 0};
    cera_status st = CERA_OK;
    if (!s.visited || !s.in_progress || !s.may_be_empty)
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    for (uint32_t i = 0; st == CERA_OK && i < n_rules; i++) {
        if (s.visited[i]) continue;
        int lr = detect_left_recursion(&s, i);
        if (lr > 0)
            st = cera_fail(err, CERA_ERR_FORMAT, "unsupported grammar, left recursion detected for rule '%s'",
                           name_of(p, i));
        else if (lr < 0)
            st = cera_fail(err, CERA_ERR_UNSUPPORTED, "grammar rules nested too deeply");
    }
    free(s.visited);
    free(s.in_progress);
    free(s.may_be_empty);
    if (st != CERA_OK) {
        cera_grammar_free(g);
        return st;
    }
    *out = g;
    return CERA_OK;
}

cera_status cera_grammar_parse(const char *text, size_t len, const cera_grammar_vocab *vocab,
                               cera_grammar **out, cera_error *err) {
    *out = NULL;
    char *src = malloc(len + 1);
    if (!src) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    if (len) memcpy(src, text, len);
    src[len] = 0;
    parser p = {.src = src, .vocab = vocab, .err = err};
    const char *pos = parse_space(src, true);
    while (pos && *pos) pos = parse_rule(&p, pos);
    cera_status st = p.failed ? p.status : finish(&p, out, err);
    for (size_t i = 0; i < p.rules_cap; i++) free(p.rules[i].v);
    free(p.rules);
    for (size_t i = 0; i < p.names_cap; i++) free(p.names[i].name);
    free(p.names);
    free(src);
    return st;
}

void cera_grammar_free(cera_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->rule_off);
    free(g);
}

size_t cera_grammar_n_rules(const cera_grammar *g) { return g ? g->n_rules : 0; }

/*
 * regex.c — a JSON Schema `pattern` → a GBNF rule, as llama.cpp's _visit_pattern.
 *
 * The pattern must be anchored (^...$). It is translated piece by piece, not parsed as a
 * full regex: runs of plain characters become literals (consecutive ones merged), `.`
 * becomes the `dot` rule (anything but \n and \r), groups become parenthesised
 * sequences (`(?:` as `(`; lookarounds are skipped with a warning), classes `[...]` are
 * copied as GBNF classes, `* + ?` apply to the last piece, and `{m,n}` repeats it (a
 * non-literal piece through a helper rule). Escapes other than of regex metacharacters
 * are passed through, so `\d` or `\w` reach the GBNF parser, which refuses them: the
 * same outcome as llama.cpp's. The rule matches the string with its quotes.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

typedef struct piece {
    char *s;
    bool literal;
} piece;

typedef struct seq {
    piece *v;
    size_t n, cap;
} seq;

typedef struct rx {
    schema_conv *c;
    const char *p; /* the pattern without ^ and $ */
    size_t len, i;
    const char *name;
    char **sub_bodies, **sub_ids; /* helper rules made for repeated pieces, by body */
    size_t n_sub, cap_sub;
    int depth;
    bool oom;
} rx;

static char *dupn(rx *r, const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) {
        r->oom = true;
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void seq_push(rx *r, seq *q, char *s, bool literal) {
    if (!s) return;
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 8;
        piece *v = realloc(q->v, cap * sizeof *v);
        if (!v) {
            free(s);
            r->oom = true;
            return;
        }
        q->v = v;
        q->cap = cap;
    }
    q->v[q->n++] = (piece){s, literal};
}

static void seq_free(seq *q) {
    for (size_t i = 0; i < q->n; i++) free(q->v[i].s);
    free(q->v);
}

static char *to_rule(rx *r, const piece *pc) {
    if (!pc->literal) return dupn(r, pc->s, strlen(pc->s));
    gstr b = {0};
    gstr_addc(&b, '"');
    gstr_add(&b, pc->s);
    gstr_addc(&b, '"');
    char *s = gstr_take(&b);
    if (!s) r->oom = true;
    return s;
}

/* The sequence joined by blanks, consecutive literals merged; a non-literal piece. */
static piece join_seq(rx *r, seq *q) {
    gstr out = {0}, lit = {0};
    bool first = true;
    for (size_t i = 0; i <= q->n; i++) {
        if (i < q->n && q->v[i].literal) {
            gstr_add(&lit, q->v[i].s);
            continue;
        }
        if (lit.n) {
            if (!first) gstr_addc(&out, ' ');
            gstr_addc(&out, '"');
            gstr_add(&out, lit.s);
            gstr_addc(&out, '"');
            first = false;
            lit.n = 0;
            lit.s[0] = 0;
        }
        if (i < q->n) {
            if (!first) gstr_addc(&out, ' ');
            gstr_add(&out, q->v[i].s);
            first = false;
        }
    }
    gstr_free(&lit);
    gstr_addn(&out, "", 0);
    char *s = gstr_take(&out);
    if (!s) r->oom = true;
    return (piece){s, false};
}

static bool in_set(char ch, const char *set) { return ch && strchr(set, ch); }

static const char NON_LITERAL[] = "|.()[]{}*+?";
static const char ESCAPED_META[] = "^$.[]()|{}*+?";

/* The helper rule for a repeated non-literal piece (one per distinct body); takes body. */
static char *sub_rule(rx *r, char *body) {
    for (size_t k = 0; k < r->n_sub; k++)
        if (!strcmp(r->sub_bodies[k], body)) {
            free(body);
            return r->sub_ids[k];
        }
    if (r->n_sub == r->cap_sub) {
        size_t cap = r->cap_sub ? r->cap_sub * 2 : 8;
        char **b = realloc(r->sub_bodies, cap * sizeof *b);
        if (b) r->sub_bodies = b;
        char **d = b ? realloc(r->sub_ids, cap * sizeof *d) : NULL;
        if (d) r->sub_ids = d;
        if (!b || !d) {
            free(body);
            r->oom = true;
            return "";
        }
        r->cap_sub = cap;
    }
    char num[32];
    snprintf(num, sizeof num, "-%zu", r->n_sub + 1);
    gstr nm = {0};
    gstr_add(&nm, r->name);
    gstr_add(&nm, num);
    char *name = gstr_take(&nm);
    char *id = name ? schema_add_rule(r->c, name, body) : "";
    free(name);
    r->sub_bodies[r->n_sub] = body;
    r->sub_ids[r->n_sub++] = id;
    return id;
}

static char *build_repetition(rx *r, const char *item, int min, int max) {
    gstr b = {0};
    bool has_max = max != INT_MAX;
    if (max == 0) {
        /* nothing */
    } else if (min == 0 && max == 1) {
        gstr_addf(&b, "%s?", item);
    } else if (min == 1 && !has_max) {
        gstr_addf(&b, "%s+", item);
    } else if (min == 0 && !has_max) {
        gstr_addf(&b, "%s*", item);
    } else {
        gstr_addf(&b, "%s{%d,", item, min);
        if (has_max) gstr_addf(&b, "%d", max);
        gstr_addc(&b, '}');
    }
    gstr_addn(&b, "", 0);
    char *s = gstr_take(&b);
    if (!s) r->oom = true;
    return s;
}

/* A number as std::stoi reads it (leading blanks, a sign, digits); false when none. */
static bool stoi_like(const char *s, size_t n, int *out, bool *range) {
    size_t i = 0;
    while (i < n &&
           (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v'))
        i++;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i >= n || s[i] < '0' || s[i] > '9') return false;
    long long v = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        v = v * 10 + (s[i] - '0');
        if (v > INT_MAX) {
            *range = true;
            v = INT_MAX;
        }
    }
    *out = (int)(neg ? -v : v);
    return true;
}

static piece transform(rx *r) {
    size_t start = r->i;
    seq q = {0};
    const char *p = r->p;
    size_t len = r->len;
    if (++r->depth > 256) {
        schema_error(r->c, "pattern nested too deeply");
        r->i = len;
        r->depth--;
        return (piece){dupn(r, "", 0), false};
    }
    while (r->i < len && !r->oom) {
        char ch = p[r->i];
        if (ch == '.') {
            char *dot = schema_add_rule(r->c, "dot",
                                        schema_dotall(r->c) ? "[\\U00000000-\\U0010FFFF]" : "[^\\x0A\\x0D]");
            seq_push(r, &q, dupn(r, dot, strlen(dot)), false);
            r->i++;
        } else if (ch == '(') {
            r->i++;
            if (r->i < len && p[r->i] == '?') {
                if (r->i + 1 < len && p[r->i + 1] == ':') {
                    r->i += 2;
                } else {
                    /* a lookaround: not supported, skipped (llama.cpp warns) */
                    int depth = 1;
                    while (r->i < len && depth > 0) {
                        if (p[r->i] == '\\' && r->i + 1 < len) {
                            r->i += 2;
                        } else {
                            if (p[r->i] == '(')
                                depth++;
                            else if (p[r->i] == ')')
                                depth--;
                            r->i++;
                        }
                    }
                    continue;
                }
            }
            piece sub = transform(r);
            char *inner = to_rule(r, &sub);
            free(sub.s);
            if (inner) {
                gstr b = {0};
                gstr_addc(&b, '(');
                gstr_add(&b, inner);
                gstr_addc(&b, ')');
                free(inner);
                char *s = gstr_take(&b);
                if (!s) r->oom = true;
                seq_push(r, &q, s, false);
            }
        } else if (ch == ')') {
            r->i++;
            if (start > 0 && p[start - 1] != '(' && (start < 2 || p[start - 2] != '?' || p[start - 1] != ':'))
                schema_error(r->c, "Unbalanced parentheses");
            piece out = join_seq(r, &q);
            seq_free(&q);
            r->depth--;
            return out;
        } else if (ch == '[') {
            gstr b = {0};
            gstr_addc(&b, '[');
            r->i++;
            while (r->i < len && p[r->i] != ']') {
                if (p[r->i] == '\\') {
                    gstr_addn(&b, p + r->i, r->i + 1 < len ? 2 : 1);
                    r->i += 2;
                } else {
                    gstr_addc(&b, p[r->i++]);
                }
            }
            if (r->i >= len) schema_error(r->c, "Unbalanced square brackets");
            gstr_addc(&b, ']');
            r->i++;
            char *s = gstr_take(&b);
            if (!s) r->oom = true;
            seq_push(r, &q, s, false);
        } else if (ch == '|') {
            seq_push(r, &q, dupn(r, "|", 1), false);
            r->i++;
        } else if (ch == '*' || ch == '+' || ch == '?') {
            if (!q.n) {
                schema_error(r->c, "quantifier '%c' with nothing before it", ch);
                r->i++;
                continue;
            }
            piece *last = &q.v[q.n - 1];
            char *t = to_rule(r, last);
            if (t) {
                gstr b = {0};
                gstr_add(&b, t);
                gstr_addc(&b, ch);
                free(t);
                char *s = gstr_take(&b);
                if (!s) r->oom = true;
                if (s) {
                    free(last->s);
                    last->s = s;
                    last->literal = false;
                }
            }
            r->i++;
        } else if (ch == '{') {
            size_t from = ++r->i;
            while (r->i < len && p[r->i] != '}') r->i++;
            if (r->i >= len) schema_error(r->c, "Unbalanced curly brackets");
            size_t to = r->i < len ? r->i : len;
            r->i++;
            int min = 0, max = INT_MAX;
            const char *comma = memchr(p + from, ',', to - from);
            bool range = false, ok = true;
            if (!comma) {
                ok = stoi_like(p + from, to - from, &min, &range);
                max = min;
            } else if (memchr(comma + 1, ',', (size_t)(p + to - comma - 1))) {
                schema_error(r->c, "Wrong number of values in curly brackets");
            } else {
                size_t n0 = (size_t)(comma - (p + from)), n1 = (size_t)(p + to - comma - 1);
                if (n0) ok = stoi_like(p + from, n0, &min, &range);
                if (ok && n1) ok = stoi_like(comma + 1, n1, &max, &range);
            }
            if (!ok || range) {
                schema_error(r->c, "Invalid number in curly brackets");
                seq_free(&q);
                r->depth--;
                return (piece){dupn(r, "", 0), false};
            }
            if (!q.n) {
                schema_error(r->c, "repetition with nothing before it");
                continue;
            }
            piece *last = &q.v[q.n - 1];
            char *item;
            if (!last->literal) {
                item = sub_rule(r, last->s); /* takes the body */
                last->s = NULL;
                item = dupn(r, item, strlen(item));
            } else {
                gstr b = {0};
                gstr_addc(&b, '"');
                gstr_add(&b, last->s);
                gstr_addc(&b, '"');
                item = gstr_take(&b);
                free(last->s);
                last->s = NULL;
            }
            char *rep = item ? build_repetition(r, item, min, max) : NULL;
            free(item);
            last->s = rep ? rep : dupn(r, "", 0);
            last->literal = false;
        } else {
            gstr lit = {0};
            while (r->i < len) {
                char c0 = p[r->i];
                if (c0 == '\\' && r->i < len - 1) {
                    char next = p[r->i + 1];
                    if (in_set(next, ESCAPED_META)) {
                        gstr_addc(&lit, next);
                    } else {
                        gstr_addn(&lit, p + r->i, 2);
                    }
                    r->i += 2;
                } else if (c0 == '"') {
                    gstr_add(&lit, "\\\"");
                    r->i++;
                } else if (!in_set(c0, NON_LITERAL) && (r->i == len - 1 || lit.n == 0 || p[r->i + 1] == '.' ||
                                                        !in_set(p[r->i + 1], NON_LITERAL))) {
                    gstr_addc(&lit, c0);
                    r->i++;
                } else {
                    break;
                }
            }
            if (lit.n) {
                char *s = gstr_take(&lit);
                if (!s) r->oom = true;
                seq_push(r, &q, s, true);
            } else {
                gstr_free(&lit);
                if (r->i < len && in_set(p[r->i], NON_LITERAL)) {
                    /* a stray `]` or `}`: llama.cpp loops on it; refuse */
                    schema_error(r->c, "unexpected '%c' in pattern", p[r->i]);
                    r->i = len;
                }
            }
        }
    }
    piece out = join_seq(r, &q);
    seq_free(&q);
    r->depth--;
    return out;
}

char *regex_visit_pattern(schema_conv *c, const char *pattern, size_t len, const char *name) {
    if (len < 2 || pattern[0] != '^' || pattern[len - 1] != '$') {
        schema_error(c, "Pattern must start with '^' and end with '$'");
        return "";
    }
    rx r = {.c = c, .p = pattern + 1, .len = len - 2, .name = name};
    piece top = transform(&r);
    char *body = top.s ? to_rule(&r, &top) : NULL;
    free(top.s);
    char *result = "";
    if (body && !r.oom) {
        gstr b = {0};
        gstr_add(&b, "\"\\\"\" (");
        gstr_add(&b, body);
        gstr_add(&b, ") \"\\\"\"");
        char *s = gstr_take(&b);
        if (s) result = schema_add_rule(c, name, s);
        free(s);
    }
    free(body);
    for (size_t k = 0; k < r.n_sub; k++) free(r.sub_bodies[k]);
    free(r.sub_bodies);
    free(r.sub_ids);
    if (r.oom) schema_error(c, "out of memory");
    return result;
}

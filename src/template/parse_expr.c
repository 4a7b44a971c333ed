/*
 * parse_expr.c — expression tokens to syntax-tree nodes, with Jinja2's grammar and precedence.
 *
 * Expressions, loosest first: `x if c else y`, or, and, not, comparisons (chained, with
 * in / not in), + -, ~, * / // %, **, unary - +, then postfix (.attr, [item], [a:b:c],
 * call) and filters / tests (`x|f(a)`, `x is not t a`), which bind tighter than unary
 * minus's operand, as in Jinja2 (`-x|abs` is `(-x)|abs`). Unknown filters and tests fail when
 * reached, not at compile time, as Jinja2 3 does inside conditional code.
 *
 * Node fields by kind:
 *   N_CONST val · N_NAME str · N_LIST/N_TUPLE list · N_DICT list (keys) list2 (values)
 *   N_GETATTR a str · N_GETITEM a b · N_SLICE a b c d (start stop step, NULL = omitted)
 *   N_CALL a list (args) names+list2 (kwargs) · N_FILTER/N_TEST a str list names+list2,
 *   flag = negated test · N_NEG/N_POS/N_NOT a · N_BINOP a b op · N_AND/N_OR a b
 *   N_COMPARE a list ops · N_COND a (value) b (test) c (else, may be NULL) · N_CONCAT list
 *   N_TEXT str · N_OUTPUT a · N_IF a list (body) list2 (else) · N_FOR a (target) b (iter)
 *   c (filter) list list2 (else) flag (recursive) · N_SET a (target) b (value)
 *   N_SETBLOCK a (target) b (filter chain) list · N_MACRO str names+list2 (defaults) list
 *   N_CALLBLOCK a (call) names+list2 (caller's params) list · N_FILTERBLOCK a list
 *   N_WITH names+list2 (the assignments) list
 * A filter chain for blocks is N_FILTER nodes whose innermost a is NULL.
 */
#include <stdio.h>
#include <string.h>

#include "template/parser.h"

static tnode *parse_unary(parser *P, bool with_filter);

/* (args, kw=args) after the '(' */
static bool parse_call_args(parser *P, tnode *n) {
    nvec pos = {0}, kw = {0};
    while (!is_op(cur(P), ")")) {
        if (pos.n + kw.n && !expect_op(P, ",")) return false;
        if (is_op(cur(P), ")")) break;
        if (cur(P)->k == T_NAME && is_op(peek(P, 1), "=")) {
            const char *name = tok_str(P, cur(P));
            advance(P);
            advance(P);
            tnode *v = tp_expr(P);
            if (!v || !name || !nvec_push(P, &kw, v, name)) return false;
        } else {
            if (kw.n) return fail_at(P, cur(P), "a positional argument follows keyword arguments", NULL);
            tnode *v = tp_expr(P);
            if (!v || !nvec_push(P, &pos, v, NULL)) return false;
        }
    }
    advance(P);
    n->list = pos.v;
    n->n = pos.n;
    n->list2 = kw.v;
    n->n2 = kw.n;
    n->names = kw.names;
    return true;
}

/* A dotted filter or test name. */
static const char *parse_dotted_name(parser *P) {
    if (cur(P)->k != T_NAME) {
        fail_at(P, cur(P), "expected a filter or test name", NULL);
        return NULL;
    }
    const ttok *t = cur(P);
    advance(P);
    return tok_str(P, t);
}

tnode *tp_filter(parser *P, tnode *arg) {
    const ttok *at = cur(P);
    const char *name = parse_dotted_name(P);
    if (!name) return NULL;
    tnode *n = node(P, N_FILTER, at);
    if (!n) return NULL;
    n->a = arg;
    n->str = name;
    if (accept_op(P, "(") && !parse_call_args(P, n)) return NULL;
    return n;
}

static tnode *parse_primary(parser *P);
static tnode *parse_postfix(parser *P, tnode *n);

static tnode *parse_test(parser *P, tnode *arg) {
    const ttok *at = cur(P);
    bool negated = false;
    if (is_name(cur(P), "not")) {
        negated = true;
        advance(P);
    }
    const char *name = parse_dotted_name(P);
    if (!name) return NULL;
    tnode *n = node(P, N_TEST, at);
    if (!n) return NULL;
    n->a = arg;
    n->str = name;
    n->flag = negated;
    const ttok *c = cur(P);
    if (accept_op(P, "(")) {
        if (!parse_call_args(P, n)) return NULL;
    } else if ((c->k == T_NAME || c->k == T_STRING || c->k == T_INT || c->k == T_FLOAT || is_op(c, "[") ||
                is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) {
            fail_at(P, c, "you cannot chain multiple tests with is", NULL);
            return NULL;
        }
        tnode *x = parse_primary(P);
        if (x) x = parse_postfix(P, x);
        if (!x) return NULL;
        n->list = tarena_alloc(P->a, sizeof(tnode *));
        if (!n->list) return NULL;
        n->list[0] = x;
        n->n = 1;
    }
    return n;
}

static tnode *parse_postfix(parser *P, tnode *n) {
    while (n) {
        const ttok *at = cur(P);
        if (accept_op(P, ".")) {
            const ttok *t = cur(P);
            if (t->k == T_NAME) {
                tnode *g = node(P, N_GETATTR, at);
                if (!g) return NULL;
                g->a = n;
                g->str = tok_str(P, t);
                g->slen = t->n;
                advance(P);
                n = g;
            } else if (t->k == T_INT) {
                tnode *g = node(P, N_GETITEM, at), *k = node(P, N_CONST, t);
                if (!g || !k) return NULL;
                k->val = tv_int(t->i);
                g->a = n;
                g->b = k;
                advance(P);
                n = g;
            } else {
                fail_at(P, t, "expected a name after '.'", NULL);
                return NULL;
            }
        } else if (accept_op(P, "[")) {
            tnode *parts[3] = {NULL, NULL, NULL};
            int np = 0;
            bool slice = false;
            for (;;) {
                if (is_op(cur(P), ":")) {
                    slice = true;
                    advance(P);
                    if (++np > 2) {
                        fail_at(P, cur(P), "too many ':' in a slice", NULL);
                        return NULL;
                    }
                    continue;
                }
                if (is_op(cur(P), "]")) break;
                if (parts[np]) {
                    fail_at(P, cur(P), "expected ']'", NULL);
                    return NULL;
                }
                parts[np] = tp_expr(P);
                if (!parts[np]) return NULL;
            }
            advance(P);
            if (!slice && !parts[0]) {
                fail_at(P, at, "empty subscript", NULL);
                return NULL;
            }
            tnode *g = node(P, slice ? N_SLICE : N_GETITEM, at);
            if (!g) return NULL;
            g->a = n;
            g->b = parts[0];
            g->c = parts[1];
            g->d = parts[2];
            n = g;
        } else if (accept_op(P, "(")) {
            tnode *c = node(P, N_CALL, at);
            if (!c || !parse_call_args(P, c)) return NULL;
            c->a = n;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static tnode *parse_filter_expr(parser *P, tnode *n) {
    while (n) {
        if (accept_op(P, "|")) {
            n = tp_filter(P, n);
        } else if (is_name(cur(P), "is")) {
            advance(P);
            n = parse_test(P, n);
        } else if (is_op(cur(P), "(")) {
            const ttok *at = cur(P);
            advance(P);
            tnode *c = node(P, N_CALL, at);
            if (!c || !parse_call_args(P, c)) return NULL;
            c->a = n;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

/* Comma-separated expressions up to a closer; the list into n. */
static bool parse_items(parser *P, tnode *n, const char *close, bool *had_comma) {
    nvec v = {0};
    *had_comma = false;
    while (!accept_op(P, close)) {
        if (v.n) {
            if (!expect_op(P, ",")) return false;
            *had_comma = true;
            if (accept_op(P, close)) break;
        }
        tnode *x = tp_expr(P);
        if (!x || !nvec_push(P, &v, x, NULL)) return false;
    }
    n->list = v.v;
    n->n = v.n;
    return true;
}

static tnode *parse_primary(parser *P) {
    const ttok *t = cur(P);
    if (++P->depth > MAX_NESTING) {
        fail_at(P, t, "expression nested too deeply", NULL);
        return NULL;
    }
    tnode *n = NULL;
    if (t->k == T_NAME) {
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            if ((n = node(P, N_CONST, t))) n->val = tv_bool(t->p[0] == 't' || t->p[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            if ((n = node(P, N_CONST, t))) n->val = tv_none();
        } else if ((n = node(P, N_NAME, t))) {
            n->str = tok_str(P, t);
            n->slen = t->n;
        }
        advance(P);
    } else if (t->k == T_STRING) {
        /* adjacent literals concatenate */
        size_t total = 0, j = P->i;
        while (P->t->v[j].k == T_STRING) total += P->t->v[j++].n;
        char *s = tarena_alloc(P->a, total + 1);
        if (!s || !(n = node(P, N_CONST, t))) return NULL;
        size_t k = 0;
        while (cur(P)->k == T_STRING) {
            if (cur(P)->n) memcpy(s + k, cur(P)->p, cur(P)->n);
            k += cur(P)->n;
            advance(P);
        }
        n->val = tv_str(s, total);
    } else if (t->k == T_INT || t->k == T_FLOAT) {
        if ((n = node(P, N_CONST, t))) n->val = t->k == T_INT ? tv_int(t->i) : tv_float(t->f);
        advance(P);
    } else if (is_op(t, "(")) {
        advance(P);
        if (accept_op(P, ")")) {
            n = node(P, N_TUPLE, t);
        } else {
            tnode *first = tp_expr(P);
            if (!first) return NULL;
            if (accept_op(P, ")")) {
                n = first;
            } else {
                if (!(n = node(P, N_TUPLE, t))) return NULL;
                nvec v = {0};
                if (!nvec_push(P, &v, first, NULL)) return NULL;
                while (!accept_op(P, ")")) {
                    if (!expect_op(P, ",")) return NULL;
                    if (accept_op(P, ")")) break;
                    tnode *x = tp_expr(P);
                    if (!x || !nvec_push(P, &v, x, NULL)) return NULL;
                }
                n->list = v.v;
                n->n = v.n;
            }
        }
    } else if (is_op(t, "[")) {
        advance(P);
        bool comma;
        if (!(n = node(P, N_LIST, t)) || !parse_items(P, n, "]", &comma)) return NULL;
    } else if (is_op(t, "{")) {
        advance(P);
        if (!(n = node(P, N_DICT, t))) return NULL;
        nvec keys = {0}, vals = {0};
        while (!accept_op(P, "}")) {
            if (keys.n) {
                if (!expect_op(P, ",")) return NULL;
                if (accept_op(P, "}")) break;
            }
            tnode *k = tp_expr(P);
            if (!k || !expect_op(P, ":")) return NULL;
            tnode *v = tp_expr(P);
            if (!v || !nvec_push(P, &keys, k, NULL) || !nvec_push(P, &vals, v, NULL)) return NULL;
        }
        n->list = keys.v;
        n->list2 = vals.v;
        n->n = n->n2 = keys.n;
    } else {
        fail_at(P, t,
                t->k == T_EOF || t->k == T_VAR_END || t->k == T_BLOCK_END
                    ? "unexpected end of expression"
                    : "unexpected token in an expression",
                NULL);
        return NULL;
    }
    P->depth--;
    return n;
}

static tnode *parse_unary(parser *P, bool with_filter) {
    const ttok *t = cur(P);
    tnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        advance(P);
        if (++P->depth > MAX_NESTING) {
            fail_at(P, t, "expression nested too deeply", NULL);
            return NULL;
        }
        tnode *x = parse_unary(P, false);
        P->depth--;
        if (!x || !(n = node(P, is_op(t, "-") ? N_NEG : N_POS, t))) return NULL;
        n->a = x;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    return n;
}

static tnode *binop(parser *P, const ttok *at, int op, tnode *l, tnode *r) {
    if (!l || !r) return NULL;
    tnode *n = node(P, N_BINOP, at);
    if (!n) return NULL;
    n->op = op;
    n->a = l;
    n->b = r;
    return n;
}

static tnode *parse_pow(parser *P) {
    tnode *l = parse_unary(P, true);
    while (l && is_op(cur(P), "**")) {
        const ttok *at = cur(P);
        advance(P);
        l = binop(P, at, OP_POW, l, parse_unary(P, true));
    }
    return l;
}

static tnode *parse_math2(parser *P) {
    tnode *l = parse_pow(P);
    for (;;) {
        const ttok *at = cur(P);
        int op = is_op(at, "*")    ? OP_MUL
                 : is_op(at, "/")  ? OP_DIV
                 : is_op(at, "//") ? OP_FLOORDIV
                 : is_op(at, "%")  ? OP_MOD
                                   : -1;
        if (!l || op < 0) return l;
        advance(P);
        l = binop(P, at, op, l, parse_pow(P));
    }
}

static tnode *parse_concat(parser *P) {
    tnode *l = parse_math2(P);
    if (!l || !is_op(cur(P), "~")) return l;
    tnode *n = node(P, N_CONCAT, cur(P));
    nvec v = {0};
    if (!n || !nvec_push(P, &v, l, NULL)) return NULL;
    while (accept_op(P, "~")) {
        tnode *x = parse_math2(P);
        if (!x || !nvec_push(P, &v, x, NULL)) return NULL;
    }
    n->list = v.v;
    n->n = v.n;
    return n;
}

static tnode *parse_math1(parser *P) {
    tnode *l = parse_concat(P);
    for (;;) {
        const ttok *at = cur(P);
        int op = is_op(at, "+") ? OP_ADD : is_op(at, "-") ? OP_SUB : -1;
        if (!l || op < 0) return l;
        advance(P);
        l = binop(P, at, op, l, parse_concat(P));
    }
}

static tnode *parse_compare(parser *P) {
    const ttok *at = cur(P);
    tnode *first = parse_math1(P);
    if (!first) return NULL;
    nvec v = {0};
    int ops[64], nops = 0;
    for (;;) {
        const ttok *t = cur(P);
        int op = -1;
        if (is_op(t, "=="))
            op = CMP_EQ;
        else if (is_op(t, "!="))
            op = CMP_NE;
        else if (is_op(t, "<"))
            op = CMP_LT;
        else if (is_op(t, "<="))
            op = CMP_LE;
        else if (is_op(t, ">"))
            op = CMP_GT;
        else if (is_op(t, ">="))
            op = CMP_GE;
        else if (is_name(t, "in"))
            op = CMP_IN;
        else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = CMP_NOTIN;
            advance(P);
        }
        if (op < 0) break;
        advance(P);
        if (nops == 64) {
            fail_at(P, t, "too many chained comparisons", NULL);
            return NULL;
        }
        tnode *x = parse_math1(P);
        if (!x || !nvec_push(P, &v, x, NULL)) return NULL;
        ops[nops++] = op;
    }
    if (!nops) return first;
    tnode *n = node(P, N_COMPARE, at);
    if (!n || !(n->ops = tarena_alloc(P->a, (size_t)nops * sizeof(int)))) return NULL;
    memcpy(n->ops, ops, (size_t)nops * sizeof(int));
    n->a = first;
    n->list = v.v;
    n->n = v.n;
    return n;
}

static tnode *parse_not(parser *P) {
    const ttok *t = cur(P);
    if (is_name(t, "not")) {
        advance(P);
        if (++P->depth > MAX_NESTING) {
            fail_at(P, t, "expression nested too deeply", NULL);
            return NULL;
        }
        tnode *x = parse_not(P);
        P->depth--;
        tnode *n = x ? node(P, N_NOT, t) : NULL;
        if (n) n->a = x;
        return n;
    }
    return parse_compare(P);
}

static tnode *parse_and(parser *P) {
    tnode *l = parse_not(P);
    while (l && is_name(cur(P), "and")) {
        const ttok *at = cur(P);
        advance(P);
        tnode *r = parse_not(P), *n = r ? node(P, N_AND, at) : NULL;
        if (!n) return NULL;
        n->a = l;
        n->b = r;
        l = n;
    }
    return l;
}

tnode *tp_or(parser *P) {
    tnode *l = parse_and(P);
    while (l && is_name(cur(P), "or")) {
        const ttok *at = cur(P);
        advance(P);
        tnode *r = parse_and(P), *n = r ? node(P, N_OR, at) : NULL;
        if (!n) return NULL;
        n->a = l;
        n->b = r;
        l = n;
    }
    return l;
}

/* `a if cond else b` (the else is optional: an undefined value then) */
tnode *tp_expr(parser *P) {
    const ttok *at = cur(P);
    if (++P->depth > MAX_NESTING) {
        fail_at(P, at, "expression nested too deeply", NULL);
        return NULL;
    }
    tnode *n = tp_or(P);
    while (n && is_name(cur(P), "if")) {
        advance(P);
        tnode *cond = tp_or(P), *other = NULL;
        if (!cond) return NULL;
        if (is_name(cur(P), "else")) {
            advance(P);
            if (!(other = tp_expr(P))) return NULL;
        }
        tnode *c = node(P, N_COND, at);
        if (!c) return NULL;
        c->a = n;
        c->b = cond;
        c->c = other;
        n = c;
    }
    P->depth--;
    return n;
}

tnode *tp_primary_postfix(parser *P) { return parse_postfix(P, parse_primary(P)); }

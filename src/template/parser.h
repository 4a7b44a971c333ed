/*
 * parser.h — the parser's state and small helpers, shared by parse_expr.c (expressions)
 * and parse_stmt.c (statements, the entry point tparse).
 */
#ifndef CERA_TEMPLATE_PARSER_H
#define CERA_TEMPLATE_PARSER_H

#include <stdio.h>
#include <string.h>

#include "template/lexer.h"

#define MAX_NESTING 200

typedef struct parser {
    tarena *a;
    ttokens *t;
    size_t i;
    int depth;
    int loops; /* enclosing for loops (break/continue are only valid inside one) */
    cera_error *err;
    bool failed;
} parser;

static inline const ttok *cur(parser *P) { return &P->t->v[P->i]; }
static inline const ttok *peek(parser *P, size_t k) {
    size_t j = P->i + k;
    return &P->t->v[j < P->t->n ? j : P->t->n - 1];
}
static inline void advance(parser *P) {
    if (P->i + 1 < P->t->n) P->i++;
}

static inline bool fail_at(parser *P, const ttok *t, const char *fmt, const char *arg) {
    if (P->failed) return false;
    int line = t->line, col = t->col;
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    cera_fail(P->err, CERA_ERR_FORMAT, "line %d, column %d: %s", line, col, msg);
    P->failed = true;
    return false;
}

static inline bool is_op(const ttok *t, const char *op) {
    return t->k == T_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
static inline bool is_name(const ttok *t, const char *name) {
    return t->k == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}
static inline bool accept_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) return false;
    advance(P);
    return true;
}
static inline bool expect_op(parser *P, const char *op) {
    if (accept_op(P, op)) return true;
    return fail_at(P, cur(P), "expected '%s'", op);
}

static inline tnode *node(parser *P, tnode_kind k, const ttok *at) {
    tnode *n = tarena_alloc(P->a, sizeof *n);
    if (!n) {
        if (!P->failed) cera_fail(P->err, CERA_ERR_NO_MEMORY, "out of memory");
        P->failed = true;
        return NULL;
    }
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

/* A growable array of node pointers in the arena. */
typedef struct nvec {
    tnode **v;
    size_t n, cap;
    const char **names;
} nvec;

static inline bool nvec_push(parser *P, nvec *v, tnode *x, const char *name) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        tnode **nv = tarena_alloc(P->a, cap * sizeof(tnode *));
        const char **nn = tarena_alloc(P->a, cap * sizeof(char *));
        if (!nv || !nn) {
            P->failed = true;
            cera_fail(P->err, CERA_ERR_NO_MEMORY, "out of memory");
            return false;
        }
        if (v->n) {
            memcpy(nv, v->v, v->n * sizeof(tnode *));
            memcpy(nn, v->names, v->n * sizeof(char *));
        }
        v->v = nv;
        v->names = nn;
        v->cap = cap;
    }
    v->names[v->n] = name;
    v->v[v->n++] = x;
    return true;
}

static inline const char *tok_str(parser *P, const ttok *t) { return tarena_strndup(P->a, t->p, t->n); }

/* parse_expr.c */
tnode *tp_expr(parser *P);               /* a full expression, with inline if */
tnode *tp_or(parser *P);                 /* an expression without inline if */
tnode *tp_filter(parser *P, tnode *arg); /* after '|': one filter applied to arg */
tnode *tp_primary_postfix(parser *P);    /* a name, literal, ... with its postfix */

#endif

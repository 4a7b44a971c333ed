/*
 * parse_stmt.c — the template's statements: text, {{ output }} and the {% tags %} real chat
 * templates use (if/elif/else, for with else, filter and recursive, set and block set,
 * macro, call, filter, generation, break/continue). tparse is the parser's entry point.
 * Tags a sandboxed chat template cannot use (extends, include, import...) are syntax
 * errors, as an unknown tag is in Jinja2.
 */
#include "template/parser.h"

/* A tag's statements until one of the end names (NULL-terminated); the current token is
 * then that name, inside its {% %}. */
static bool parse_body(parser *P, const char *const *ends, nvec *out);

static bool expect_block_end(parser *P) {
    if (cur(P)->k == T_BLOCK_END) {
        advance(P);
        return true;
    }
    return fail_at(P, cur(P), "expected the end of the tag '%%}'", NULL);
}

static bool expect_name(parser *P, const char *name) {
    if (is_name(cur(P), name)) {
        advance(P);
        return true;
    }
    return fail_at(P, cur(P), "expected '%s'", name);
}

/* expr, or a tuple `a, b` without parentheses (ending before the tag's end or a
 * `if` / `recursive` keyword). */
static tnode *parse_tuple(parser *P, bool with_condexpr) {
    const ttok *at = cur(P);
    tnode *first = with_condexpr ? tp_expr(P) : tp_or(P);
    if (!first || !is_op(cur(P), ",")) return first;
    tnode *t = node(P, N_TUPLE, at);
    nvec v = {0};
    if (!t || !nvec_push(P, &v, first, NULL)) return NULL;
    while (accept_op(P, ",")) {
        const ttok *c = cur(P);
        if (c->k == T_BLOCK_END || c->k == T_VAR_END || is_name(c, "if") || is_name(c, "recursive")) break;
        tnode *x = with_condexpr ? tp_expr(P) : tp_or(P);
        if (!x || !nvec_push(P, &v, x, NULL)) return NULL;
    }
    t->list = v.v;
    t->n = v.n;
    return t;
}

static tnode *parse_name_node(parser *P) {
    const ttok *t = cur(P);
    if (t->k != T_NAME) {
        fail_at(P, t, "expected a name to assign to", NULL);
        return NULL;
    }
    tnode *n = node(P, N_NAME, t);
    if (!n) return NULL;
    n->str = tok_str(P, t);
    n->slen = t->n;
    advance(P);
    return n;
}

/* A for / set target: name, ns.attr (set only), or names with commas (in parentheses
 * or not). */
static tnode *parse_target(parser *P, bool allow_attr) {
    const ttok *at = cur(P);
    bool paren = accept_op(P, "(");
    nvec v = {0};
    for (;;) {
        tnode *n = parse_name_node(P);
        if (!n) return NULL;
        if (allow_attr && !paren && v.n == 0 && is_op(cur(P), ".")) {
            advance(P);
            const ttok *t = cur(P);
            if (t->k != T_NAME) {
                fail_at(P, t, "expected an attribute name", NULL);
                return NULL;
            }
            tnode *g = node(P, N_GETATTR, t);
            if (!g) return NULL;
            g->a = n;
            g->str = tok_str(P, t);
            g->slen = t->n;
            advance(P);
            return g;
        }
        if (!nvec_push(P, &v, n, NULL)) return NULL;
        if (!accept_op(P, ",")) break;
        if (paren && is_op(cur(P), ")")) break;
    }
    if (paren && !expect_op(P, ")")) return NULL;
    if (v.n == 1 && !paren) return v.v[0];
    tnode *t = node(P, N_TUPLE, at);
    if (!t) return NULL;
    t->list = v.v;
    t->n = v.n;
    return t;
}

/* Whether the tree under n reads the name `name` (Jinja2 macros take extra arguments only
 * when their body uses varargs / kwargs). */
static bool uses_name(const tnode *n, const char *name) {
    if (!n) return false;
    if (n->kind == N_NAME && !strcmp(n->str, name)) return true;
    if (uses_name(n->a, name) || uses_name(n->b, name) || uses_name(n->c, name) || uses_name(n->d, name))
        return true;
    for (size_t i = 0; i < n->n; i++)
        if (uses_name(n->list[i], name)) return true;
    for (size_t i = 0; i < n->n2; i++)
        if (uses_name(n->list2[i], name)) return true;
    return false;
}

/* Sets the macro or call block's op: TMACRO_VARARGS / TMACRO_KWARGS when its body uses them. */
static void mark_extra_args(tnode *n) {
    for (size_t i = 0; i < n->n; i++) {
        if (uses_name(n->list[i], "varargs")) n->op |= TMACRO_VARARGS;
        if (uses_name(n->list[i], "kwargs")) n->op |= TMACRO_KWARGS;
    }
}

/* `name(a, b=default, ...)` parameter lists of macro and call blocks. */
static bool parse_params(parser *P, tnode *n) {
    nvec names = {0}, defs = {0};
    if (!expect_op(P, "(")) return false;
    while (!accept_op(P, ")")) {
        if (names.n && !expect_op(P, ",")) return false;
        if (accept_op(P, ")")) break;
        const ttok *t = cur(P);
        if (t->k != T_NAME) return fail_at(P, t, "expected a parameter name", NULL);
        const char *name = tok_str(P, t);
        advance(P);
        tnode *def = NULL;
        if (accept_op(P, "=") && !(def = tp_expr(P))) return false;
        if (!def && defs.n && defs.v[defs.n - 1])
            return fail_at(P, t, "a parameter without a default follows one with a default", NULL);
        if (!nvec_push(P, &names, NULL, name) || !nvec_push(P, &defs, def, NULL)) return false;
    }
    n->names = names.names;
    n->list2 = defs.v;
    n->n2 = defs.n;
    return true;
}

/* The filter chain of {% filter %} / {% set x | f %}: f(args) | g ... */
static tnode *parse_filter_chain(parser *P) {
    tnode *n = tp_filter(P, NULL);
    while (n && accept_op(P, "|")) n = tp_filter(P, n);
    return n;
}

/* The body up to {% end_name %} into n, n appended to body. */
static bool body_node(parser *P, tnode *n, nvec *body, const char *end_name) {
    nvec v = {0};
    if (!parse_body(P, (const char *const[]){end_name, NULL}, &v)) return false;
    advance(P);
    if (!expect_block_end(P)) return false;
    n->list = v.v;
    n->n = v.n;
    return nvec_push(P, body, n, NULL);
}

static bool parse_if(parser *P, const ttok *at, nvec *body) {
    tnode *n = node(P, N_IF, at);
    if (!n || !(n->a = tp_expr(P)) || !expect_block_end(P)) return false;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    nvec v = {0};
    if (!parse_body(P, ends, &v)) return false;
    n->list = v.v;
    n->n = v.n;
    if (!nvec_push(P, body, n, NULL)) return false;
    for (;;) {
        const ttok *t = cur(P);
        advance(P);
        if (is_name(t, "endif")) return expect_block_end(P);
        nvec branch = {0};
        if (is_name(t, "elif")) {
            tnode *e = node(P, N_IF, t);
            if (!e || !(e->a = tp_expr(P)) || !expect_block_end(P)) return false;
            nvec eb = {0};
            if (!parse_body(P, ends, &eb)) return false;
            e->list = eb.v;
            e->n = eb.n;
            if (!nvec_push(P, &branch, e, NULL)) return false;
            n->list2 = branch.v;
            n->n2 = branch.n;
            n = e;
            continue;
        }
        /* else */
        if (!expect_block_end(P)) return false;
        if (!parse_body(P, (const char *const[]){"endif", NULL}, &branch)) return false;
        n->list2 = branch.v;
        n->n2 = branch.n;
        advance(P);
        return expect_block_end(P);
    }
}

static bool parse_for(parser *P, const ttok *at, nvec *body) {
    tnode *n = node(P, N_FOR, at);
    if (!n || !(n->a = parse_target(P, false)) || !expect_name(P, "in")) return false;
    if (!(n->b = parse_tuple(P, false))) return false;
    if (is_name(cur(P), "if")) {
        advance(P);
        if (!(n->c = tp_expr(P))) return false;
    }
    if (is_name(cur(P), "recursive")) {
        advance(P);
        n->flag = true;
    }
    if (!expect_block_end(P)) return false;
    nvec v = {0}, e = {0};
    P->loops++;
    bool ok = parse_body(P, (const char *const[]){"endfor", "else", NULL}, &v);
    P->loops--;
    if (!ok) return false;
    if (is_name(cur(P), "else")) {
        advance(P);
        if (!expect_block_end(P) || !parse_body(P, (const char *const[]){"endfor", NULL}, &e)) return false;
    }
    advance(P);
    if (!expect_block_end(P)) return false;
    n->list = v.v;
    n->n = v.n;
    n->list2 = e.v;
    n->n2 = e.n;
    return nvec_push(P, body, n, NULL);
}

static bool parse_set(parser *P, const ttok *at, nvec *body) {
    tnode *target = parse_target(P, true);
    if (!target) return false;
    if (accept_op(P, "=")) {
        tnode *n = node(P, N_SET, at);
        if (!n || !(n->b = parse_tuple(P, true)) || !expect_block_end(P)) return false;
        n->a = target;
        return nvec_push(P, body, n, NULL);
    }
    if (target->kind != N_NAME)
        return fail_at(P, cur(P), "expected '=' (a block set assigns one name)", NULL);
    tnode *n = node(P, N_SETBLOCK, at);
    if (!n) return false;
    n->a = target;
    if (accept_op(P, "|") && !(n->b = parse_filter_chain(P))) return false;
    if (!expect_block_end(P)) return false;
    return body_node(P, n, body, "endset");
}

static bool parse_macro(parser *P, const ttok *at, nvec *body) {
    tnode *n = node(P, N_MACRO, at);
    const ttok *t = cur(P);
    if (!n) return false;
    if (t->k != T_NAME) return fail_at(P, t, "expected the macro's name", NULL);
    n->str = tok_str(P, t);
    n->slen = t->n;
    advance(P);
    if (!parse_params(P, n) || !expect_block_end(P)) return false;
    int loops = P->loops;
    P->loops = 0;
    bool ok = body_node(P, n, body, "endmacro");
    P->loops = loops;
    if (ok) mark_extra_args(n);
    return ok;
}

static bool parse_call(parser *P, const ttok *at, nvec *body) {
    tnode *n = node(P, N_CALLBLOCK, at);
    if (!n) return false;
    if (is_op(cur(P), "(") && !parse_params(P, n)) return false;
    const ttok *ct = cur(P);
    if (!(n->a = tp_expr(P))) return false;
    if (n->a->kind != N_CALL) return fail_at(P, ct, "expected a call after {%% call %%}", NULL);
    if (!expect_block_end(P)) return false;
    int loops = P->loops;
    P->loops = 0;
    bool ok = body_node(P, n, body, "endcall");
    P->loops = loops;
    if (ok) mark_extra_args(n);
    return ok;
}

/* {% with a = 1, b = x %}...{% endwith %}: a scope with its own variables */
static bool parse_with(parser *P, const ttok *at, nvec *body) {
    tnode *n = node(P, N_WITH, at);
    nvec vals = {0};
    if (!n) return false;
    while (cur(P)->k != T_BLOCK_END) {
        if (vals.n && !expect_op(P, ",")) return false;
        const ttok *t = cur(P);
        if (t->k != T_NAME) return fail_at(P, t, "expected a name to assign to", NULL);
        const char *name = tok_str(P, t);
        advance(P);
        tnode *v;
        if (!expect_op(P, "=") || !(v = tp_expr(P)) || !nvec_push(P, &vals, v, name)) return false;
    }
    advance(P);
    n->list2 = vals.v;
    n->names = vals.names;
    n->n2 = vals.n;
    return body_node(P, n, body, "endwith");
}

static bool parse_statement(parser *P, nvec *body) {
    const ttok *t = cur(P);
    if (t->k != T_NAME) return fail_at(P, t, "expected a tag name", NULL);
    advance(P);
    if (is_name(t, "if")) return parse_if(P, t, body);
    if (is_name(t, "for")) return parse_for(P, t, body);
    if (is_name(t, "set")) return parse_set(P, t, body);
    if (is_name(t, "macro")) return parse_macro(P, t, body);
    if (is_name(t, "call")) return parse_call(P, t, body);
    if (is_name(t, "with")) return parse_with(P, t, body);
    if (is_name(t, "filter")) {
        tnode *n = node(P, N_FILTERBLOCK, t);
        if (!n || !(n->a = parse_filter_chain(P)) || !expect_block_end(P)) return false;
        return body_node(P, n, body, "endfilter");
    }
    if (is_name(t, "generation")) {
        /* transformers' {% generation %} marks assistant text; rendering keeps the body,
         * so it is an if whose condition is always true */
        tnode *n = node(P, N_IF, t), *c = node(P, N_CONST, t);
        if (!n || !c || !expect_block_end(P)) return false;
        c->val = tv_bool(true);
        n->a = c;
        return body_node(P, n, body, "endgeneration");
    }
    if (is_name(t, "break") || is_name(t, "continue")) {
        if (!P->loops)
            return fail_at(P, t, "'%s' outside of a for loop", t->p[0] == 'b' ? "break" : "continue");
        tnode *n = node(P, t->p[0] == 'b' ? N_BREAK : N_CONTINUE, t);
        return n && expect_block_end(P) && nvec_push(P, body, n, NULL);
    }
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(t->n < 60 ? t->n : 60), t->p);
    return fail_at(P, t, "unknown or unsupported tag '%s'", name);
}

static bool parse_body(parser *P, const char *const *ends, nvec *out) {
    if (++P->depth > 100) return fail_at(P, cur(P), "tags nested too deeply", NULL);
    for (;;) {
        const ttok *t = cur(P);
        if (t->k == T_EOF) {
            if (ends && ends[0]) return fail_at(P, t, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (t->k == T_TEXT) {
            tnode *n = node(P, N_TEXT, t);
            if (!n) return false;
            n->str = t->p;
            n->slen = t->n;
            advance(P);
            if (!nvec_push(P, out, n, NULL)) return false;
        } else if (t->k == T_VAR_BEGIN) {
            advance(P);
            tnode *n = node(P, N_OUTPUT, t);
            if (!n || !(n->a = parse_tuple(P, true))) return false;
            if (cur(P)->k != T_VAR_END)
                return fail_at(P, cur(P), "expected the end of the output tag '}}'", NULL);
            advance(P);
            if (!nvec_push(P, out, n, NULL)) return false;
        } else if (t->k == T_BLOCK_BEGIN) {
            const ttok *name = peek(P, 1);
            bool is_end = false;
            for (size_t i = 0; ends && ends[i]; i++)
                if (is_name(name, ends[i])) is_end = true;
            advance(P);
            if (is_end) break;
            if (name->k == T_NAME &&
                (is_name(name, "endif") || is_name(name, "endfor") || is_name(name, "elif") ||
                 is_name(name, "else") || is_name(name, "endset") || is_name(name, "endmacro") ||
                 is_name(name, "endcall") || is_name(name, "endfilter") || is_name(name, "endwith") ||
                 is_name(name, "endgeneration")))
                return fail_at(P, name, "unexpected '%s'", tok_str(P, name));
            if (!parse_statement(P, out)) return false;
        } else {
            return fail_at(P, t, "unexpected token", NULL);
        }
    }
    P->depth--;
    return true;
}

cera_status tparse(cera_template *t, const char *text, size_t len, cera_error *err) {
    ttokens toks;
    cera_status st = tlex(&t->arena, text, len, &toks, err);
    if (st != CERA_OK) return st;
    parser P = {.a = &t->arena, .t = &toks, .err = err};
    nvec body = {0};
    if (!parse_body(&P, NULL, &body)) return err && err->status != CERA_OK ? err->status : CERA_ERR_FORMAT;
    t->body = body.v;
    t->n = body.n;
    return CERA_OK;
}

/*
 * render.c — statements: text and output, if, for (loop variables, else, filter, recursive
 * loop(...), break/continue), set (names, tuples, namespace attributes, blocks), macros
 * and call blocks, filter blocks; and calling any callable value.
 *
 * Scopes follow Jinja2: each for-loop iteration and each macro call get their own frame,
 * so a `set` inside them is seen neither outside nor by the next iteration (namespace()
 * objects are how templates carry state out of a loop); if blocks share the enclosing
 * frame. Each loop iteration and call counts as a step against the render's limit; macro
 * calls and recursive loops count against the depth limit, so hostile templates end with
 * an error, not a hang or a stack overflow.
 */
#include <string.h>

#include "template/internal.h"

static tframe *frame_new(trender *r, tframe *parent) {
    tframe *f = tarena_alloc(&r->arena, sizeof *f);
    if (!f || !(f->vars = tdict_new(&r->arena, 4))) {
        tfail_oom(r);
        return NULL;
    }
    f->parent = parent;
    return f;
}

/* Renders body into a fresh buffer; the text as an arena string. */
static bool capture(trender *r, tframe *f, tnode *const *body, size_t n, tval *out) {
    tbuf b = {.limit = r->max_output}, *saved = r->out;
    r->out = &b;
    bool ok = trender_body(r, f, body, n);
    r->out = saved;
    if (ok && b.failed) ok = tfail(r, "template render: output over the limit of %zu bytes", r->max_output);
    char *p = ok ? tarena_strndup(&r->arena, b.p ? b.p : "", b.n) : NULL;
    size_t len = b.n;
    tbuf_free(&b);
    if (ok && !p) return tfail_oom(r);
    if (ok) *out = tv_str(p, len);
    return ok;
}

static bool assign(trender *r, tframe *f, const tnode *target, const tval *v) {
    if (target->kind == N_NAME) return tframe_set(r, f, target->str, target->slen, *v);
    if (target->kind == N_TUPLE) {
        tlist *items;
        if (v->k != TV_LIST && v->k != TV_STR && v->k != TV_DICT)
            return tfail(r, "TypeError: cannot unpack a non-iterable %s object", tv_type_name(v));
        if (!tv_iterate(r, v, &items)) return false;
        tval seq = {.k = TV_LIST, .l = items};
        v = &seq;
        if (v->l->n != target->n)
            return tfail(r, "ValueError: %s values to unpack (expected %zu, got %zu)",
                         v->l->n > target->n ? "too many" : "not enough", target->n, v->l->n);
        for (size_t i = 0; i < target->n; i++)
            if (!assign(r, f, target->list[i], &v->l->v[i])) return false;
        return true;
    }
    /* ns.attr */
    tval ns;
    if (!teval(r, f, target->a, &ns)) return false;
    if (ns.k != TV_DICT || !ns.d->is_ns)
        return tfail(r, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
    if (!tdict_set(&r->arena, ns.d, tv_str(target->str, target->slen), *v)) return tfail_oom(r);
    return true;
}

/* Applies a block's filter chain (innermost a == NULL) to v. */
static bool apply_chain(trender *r, tframe *f, const tnode *chain, const tval *v, tval *out) {
    tval in = *v;
    if (chain->a && !apply_chain(r, f, chain->a, v, &in)) return false;
    tval *pos = chain->n ? tarena_alloc(&r->arena, chain->n * sizeof(tval)) : NULL;
    tval *kw = chain->n2 ? tarena_alloc(&r->arena, chain->n2 * sizeof(tval)) : NULL;
    if ((chain->n && !pos) || (chain->n2 && !kw)) return tfail_oom(r);
    for (size_t i = 0; i < chain->n; i++)
        if (!teval(r, f, chain->list[i], &pos[i])) return false;
    for (size_t i = 0; i < chain->n2; i++)
        if (!teval(r, f, chain->list2[i], &kw[i])) return false;
    targs a = {pos, chain->n, kw, chain->names, chain->n2};
    return tfilter_apply(r, chain->str, &in, &a, out);
}

/* ---- for loops -------------------------------------------------------------------- */

static bool run_loop(trender *r, tframe *f, const tnode *n, const tval *iter, int depth0) {
    tlist *all, *items;
    if (iter->k == TV_NONE || iter->k == TV_BOOL || iter->k == TV_INT || iter->k == TV_FLOAT ||
        iter->k == TV_FUNC)
        return tfail(r, "TypeError: '%s' object is not iterable", tv_type_name(iter));
    if (!tv_iterate(r, iter, &all)) return false;
    tframe *lf = frame_new(r, f);
    if (!lf) return false;
    if (n->c) { /* `for x in xs if cond`: the loop sees only the kept items */
        if (!(items = tlist_new(&r->arena, all->n))) return tfail_oom(r);
        for (size_t i = 0; i < all->n; i++) {
            tval keep;
            if (!tstep(r) || !assign(r, lf, n->a, &all->v[i]) || !teval(r, lf, n->c, &keep)) return false;
            if (tv_truthy(&keep)) items->v[items->n++] = all->v[i];
        }
    } else {
        items = all;
    }
    tloop *L = tarena_alloc(&r->arena, sizeof *L);
    if (!L) return tfail_oom(r);
    *L = (tloop){.items = items, .depth0 = depth0, .for_node = n, .frame = f};
    tval loopv = {.k = TV_LOOP, .loop = L};
    for (size_t i = 0; i < items->n; i++) {
        /* as in Jinja2, each iteration starts from the enclosing scope again: a `set` in
         * the body lasts until the iteration ends */
        if (!tstep(r)) return false;
        if (lf->captured) {
            if (!(lf = frame_new(r, f))) return false;
        } else {
            lf->vars->n = 0;
        }
        L->index0 = i;
        if (!assign(r, lf, n->a, &items->v[i]) || !tframe_set(r, lf, "loop", 4, loopv)) return false;
        if (!trender_body(r, lf, n->list, n->n)) return false;
        if (r->loop_ctl == 1) {
            r->loop_ctl = 0;
            break;
        }
        r->loop_ctl = 0;
    }
    if (items->n == 0 && n->n2) return (lf = frame_new(r, f)) && trender_body(r, lf, n->list2, n->n2);
    return true;
}

/* loop(items) in a recursive loop: the loop body again over items, one level deeper. */
static bool call_loop(trender *r, const tloop *L, const targs *a, tval *out) {
    if (!L->for_node->flag) return tfail(r, "TypeError: Tried to call non recursive loop.");
    if (a->npos != 1) return tfail(r, "TypeError: loop() takes exactly one argument");
    if (++r->depth > r->max_depth)
        return tfail(r, "template render: over the recursion limit of %d", r->max_depth);
    tbuf b = {.limit = r->max_output}, *saved = r->out;
    r->out = &b;
    bool ok = run_loop(r, L->frame, L->for_node, &a->pos[0], L->depth0 + 1);
    r->out = saved;
    r->depth--;
    if (ok && b.failed) ok = tfail(r, "template render: output over the limit of %zu bytes", r->max_output);
    char *p = ok ? tarena_strndup(&r->arena, b.p ? b.p : "", b.n) : NULL;
    size_t len = b.n;
    tbuf_free(&b);
    if (ok && !p) return tfail_oom(r);
    if (ok) *out = tv_str(p, len);
    return ok;
}

/* ---- macros and calls ------------------------------------------------------------- */

static bool call_macro(trender *r, const tfunc *fn, const targs *a, tval *out) {
    const tnode *def = fn->def;
    if (++r->depth > r->max_depth)
        return tfail(r, "template render: over the recursion limit of %d", r->max_depth);
    tframe *mf = frame_new(r, fn->closure);
    if (!mf) return false;
    size_t np = def->n2;
    tlist *varargs = tlist_new(&r->arena, 0);
    tdict *kwargs = tdict_new(&r->arena, 0);
    if (!varargs || !kwargs) return tfail_oom(r);
    varargs->is_tuple = true;
    for (size_t i = 0; i < a->npos; i++) {
        if (i < np) {
            if (!tframe_set(r, mf, def->names[i], strlen(def->names[i]), a->pos[i])) return false;
        } else if (!(def->op & TMACRO_VARARGS)) {
            return tfail(r, "TypeError: macro '%s' takes not more than %zu argument(s)", fn->name, np);
        } else if (!tlist_push(&r->arena, varargs, a->pos[i])) {
            return tfail_oom(r);
        }
    }
    for (size_t k = 0; k < a->nkw; k++) {
        size_t i = 0;
        while (i < np && strcmp(def->names[i], a->kwnames[k])) i++;
        if (i < np) {
            if (i < a->npos)
                return tfail(r, "TypeError: macro '%s' got multiple values for argument '%s'", fn->name,
                             def->names[i]);
            if (!tframe_set(r, mf, def->names[i], strlen(def->names[i]), a->kw[k])) return false;
        } else if (!(def->op & TMACRO_KWARGS)) {
            return tfail(r, "TypeError: macro '%s' takes no keyword argument '%s'", fn->name, a->kwnames[k]);
        } else if (!tdict_set(&r->arena, kwargs, tv_cstr(a->kwnames[k]), a->kw[k])) {
            return tfail_oom(r);
        }
    }
    for (size_t i = a->npos; i < np; i++) {
        tval v;
        if (tdict_gets(mf->vars, def->names[i], strlen(def->names[i]))) continue;
        if (def->list2[i]) {
            if (!teval(r, mf, def->list2[i], &v)) return false;
        } else {
            v = tundef(r, "parameter '%s' was not provided", def->names[i]);
        }
        if (!tframe_set(r, mf, def->names[i], strlen(def->names[i]), v)) return false;
    }
    if (!tframe_set(r, mf, "varargs", 7, (tval){.k = TV_LIST, .l = varargs}) ||
        !tframe_set(r, mf, "kwargs", 6, (tval){.k = TV_DICT, .d = kwargs}))
        return false;
    if (fn->caller.k == TV_FUNC && !tframe_set(r, mf, "caller", 6, fn->caller)) return false;
    int saved_ctl = r->loop_ctl;
    bool ok = capture(r, mf, def->list, def->n, out);
    r->loop_ctl = saved_ctl;
    r->depth--;
    return ok;
}

bool tcall(trender *r, const tval *callee, const targs *a, tval *out) {
    if (!tstep(r)) return false;
    if (callee->k == TV_UNDEF) return tfail_undef(r, callee);
    if (callee->k == TV_LOOP) return call_loop(r, callee->loop, a, out);
    if (callee->k != TV_FUNC) return tfail(r, "TypeError: '%s' object is not callable", tv_type_name(callee));
    const tfunc *fn = callee->fn;
    if (fn->kind == TF_BUILTIN) return fn->fn(r, &fn->self, a, out);
    return call_macro(r, fn, a, out);
}

/* {% call(params) m(args) %}body{% endcall %}: m gets `caller`, a macro of the body. */
static bool call_block(trender *r, tframe *f, const tnode *n) {
    const tnode *call = n->a;
    tval callee, res;
    targs args;
    if (!teval(r, f, call->a, &callee)) return false;
    tval *pos = call->n ? tarena_alloc(&r->arena, call->n * sizeof(tval)) : NULL;
    tval *kw = call->n2 ? tarena_alloc(&r->arena, call->n2 * sizeof(tval)) : NULL;
    if ((call->n && !pos) || (call->n2 && !kw)) return tfail_oom(r);
    for (size_t i = 0; i < call->n; i++)
        if (!teval(r, f, call->list[i], &pos[i])) return false;
    for (size_t i = 0; i < call->n2; i++)
        if (!teval(r, f, call->list2[i], &kw[i])) return false;
    args = (targs){pos, call->n, kw, call->names, call->n2};
    tfunc *caller = tarena_alloc(&r->arena, sizeof *caller);
    if (!caller) return tfail_oom(r);
    *caller = (tfunc){.kind = TF_CALLER, .name = "caller", .def = n, .closure = f};
    f->captured = true;
    tval callerv = {.k = TV_FUNC, .fn = caller};
    if (callee.k == TV_FUNC && callee.fn->kind == TF_MACRO) {
        tfunc *m = tarena_alloc(&r->arena, sizeof *m);
        if (!m) return tfail_oom(r);
        *m = *callee.fn;
        m->caller = callerv;
        callee.fn = m;
    }
    if (!tcall(r, &callee, &args, &res)) return false;
    return tv_write_str(r->out, &res) ||
           tfail(r, "template render: output over the limit of %zu bytes", r->max_output);
}

/* ---- statements ------------------------------------------------------------------- */

static bool render_node(trender *r, tframe *f, const tnode *n) {
    tval v, w;
    r->line = n->line;
    switch (n->kind) {
    case N_TEXT:
        if (!tbuf_put(r->out, n->str, n->slen))
            return tfail(r, "template render: output over the limit of %zu bytes", r->max_output);
        return true;
    case N_OUTPUT:
        if (!teval(r, f, n->a, &v)) return false;
        if (!tv_write_str(r->out, &v) || r->out->failed)
            return tfail(r, "template render: output over the limit of %zu bytes", r->max_output);
        return true;
    case N_IF:
        if (!teval(r, f, n->a, &v)) return false;
        return tv_truthy(&v) ? trender_body(r, f, n->list, n->n) : trender_body(r, f, n->list2, n->n2);
    case N_FOR: return teval(r, f, n->b, &v) && run_loop(r, f, n, &v, 0);
    case N_SET: return teval(r, f, n->b, &v) && assign(r, f, n->a, &v);
    case N_SETBLOCK:
        if (!capture(r, f, n->list, n->n, &v)) return false;
        if (n->b && !apply_chain(r, f, n->b, &v, &w)) return false;
        return assign(r, f, n->a, n->b ? &w : &v);
    case N_FILTERBLOCK:
        if (!capture(r, f, n->list, n->n, &v) || !apply_chain(r, f, n->a, &v, &w)) return false;
        if (!tv_write_str(r->out, &w))
            return tfail(r, "template render: output over the limit of %zu bytes", r->max_output);
        return true;
    case N_MACRO: {
        tfunc *fn = tarena_alloc(&r->arena, sizeof *fn);
        if (!fn) return tfail_oom(r);
        *fn = (tfunc){.kind = TF_MACRO, .name = n->str, .def = n, .closure = f};
        f->captured = true;
        return tframe_set(r, f, n->str, n->slen, (tval){.k = TV_FUNC, .fn = fn});
    }
    case N_CALLBLOCK: return call_block(r, f, n);
    case N_WITH: {
        tframe *wf = frame_new(r, f);
        if (!wf) return false;
        for (size_t i = 0; i < n->n2; i++) /* values see the enclosing scope */
            if (!teval(r, f, n->list2[i], &v) || !tframe_set(r, wf, n->names[i], strlen(n->names[i]), v))
                return false;
        return trender_body(r, wf, n->list, n->n);
    }
    case N_BREAK: r->loop_ctl = 1; return true;
    case N_CONTINUE: r->loop_ctl = 2; return true;
    default: return tfail(r, "internal: an expression node as a statement");
    }
}

/* Nested blocks times nested macro calls bound the C recursion; this caps their product
 * so no combination can exhaust the stack. */
#define MAX_BODY_DEPTH 1500

bool trender_body(trender *r, tframe *f, tnode *const *body, size_t n) {
    if (++r->body_depth > MAX_BODY_DEPTH)
        return tfail(r, "template render: blocks and calls nested too deeply");
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        ok = render_node(r, f, body[i]);
        if (r->loop_ctl) break; /* break / continue: unwind to the loop */
    }
    r->body_depth--;
    return ok && !r->failed;
}

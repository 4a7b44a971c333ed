/*
 * eval.c — expressions: names, literals, attribute and item access (the sandbox's lookup
 * order), slices, arithmetic with Python's int/float rules, comparisons, boolean
 * operators, filters, tests and calls.
 *
 * Python semantics where templates can see them: `1/2` is 0.5, `//` and `%` floor, `and`
 * / `or` return an operand, `'ab' * 2` repeats. Integers are 64-bit; an overflow is an
 * error rather than a bigint. Undefined values follow Jinja2's default Undefined: they
 * print as nothing and iterate as empty, but arithmetic, attribute access and calls on
 * them fail.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "template/internal.h"
#include "template/strings.h"

/* The first error wins; it names the template line being rendered. */
bool tfail(trender *r, const char *fmt, ...) {
    if (!r->failed) {
        r->failed = true;
        if (r->err) {
            r->err->status = CERA_ERR_FORMAT;
            int k = r->line > 0 ? snprintf(r->err->message, sizeof r->err->message, "line %d: ", r->line) : 0;
            if (k < 0 || (size_t)k >= sizeof r->err->message) k = 0;
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->err->message + k, sizeof r->err->message - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return false;
}

bool tfail_exact(trender *r, const char *msg) {
    if (!r->failed) {
        r->failed = true;
        cera_fail(r->err, CERA_ERR_FORMAT, "%s", msg);
    }
    return false;
}

bool tfail_oom(trender *r) { return tfail(r, "template render: out of memory (or over the memory limit)"); }

bool tstep(trender *r) {
    if (++r->steps > r->max_steps)
        return tfail(r, "template render: over the limit of %llu steps", (unsigned long long)r->max_steps);
    return true;
}

bool tcharge(trender *r, uint64_t n) {
    r->steps += n / 8;
    return tstep(r);
}

tval tundef(trender *r, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) k = 0;
    if ((size_t)k >= sizeof tmp) k = sizeof tmp - 1;
    char *p = tarena_strndup(&r->arena, tmp, (size_t)k);
    tval v = {.k = TV_UNDEF};
    v.s.p = p;
    v.s.n = p ? (size_t)k : 0;
    return v;
}

bool tfail_undef(trender *r, const tval *u) {
    if (u->s.p && u->s.n)
        return tfail(r, "%s: %.*s", u->flags & TVF_UNSAFE ? "SecurityError" : "UndefinedError", (int)u->s.n,
                     u->s.p);
    return tfail(r, "UndefinedError: undefined value");
}

bool tcheck_str(trender *r, const tval *v, const char *what) {
    if (v->k == TV_STR) return true;
    if (v->k == TV_UNDEF) return tfail_undef(r, v);
    return tfail(r, "TypeError: %s expects a string, not %s", what, tv_type_name(v));
}

/* ---- Frames --------------------------------------------------------------------- */

bool tframe_lookup(tframe *f, const char *name, size_t n, tval *out) {
    for (; f; f = f->parent) {
        const tval *v = tdict_gets(f->vars, name, n);
        if (v) {
            *out = *v;
            return true;
        }
    }
    return false;
}

bool tframe_set(trender *r, tframe *f, const char *name, size_t n, tval v) {
    if (!tdict_set(&r->arena, f->vars, tv_str(name, n), v)) return tfail_oom(r);
    return true;
}

/* ---- Attribute and item access ---------------------------------------------------- */

static const char *obj_desc(const tval *v) {
    switch (v->k) {
    case TV_DICT: return "dict object";
    case TV_LIST: return v->l->is_tuple ? "tuple object" : "list object";
    case TV_STR: return "str object";
    case TV_INT: return "int object";
    case TV_FLOAT: return "float object";
    case TV_BOOL: return "bool object";
    case TV_NONE: return "None";
    default: return "object";
    }
}

static bool loop_attr(trender *r, const tval *obj, const char *name, size_t n, tval *out) {
    const tloop *L = obj->loop;
    size_t len = L->items->n, i = L->index0;
#define IS(s) (n == sizeof(s) - 1 && !memcmp(name, s, n))
    if (IS("index"))
        *out = tv_int((int64_t)i + 1);
    else if (IS("index0"))
        *out = tv_int((int64_t)i);
    else if (IS("revindex"))
        *out = tv_int((int64_t)(len - i));
    else if (IS("revindex0"))
        *out = tv_int((int64_t)(len - i - 1));
    else if (IS("first"))
        *out = tv_bool(i == 0);
    else if (IS("last"))
        *out = tv_bool(i + 1 == len);
    else if (IS("length"))
        *out = tv_int((int64_t)len);
    else if (IS("depth"))
        *out = tv_int(L->depth0 + 1);
    else if (IS("depth0"))
        *out = tv_int(L->depth0);
    else if (IS("previtem"))
        *out = i > 0 ? L->items->v[i - 1] : tundef(r, "there is no previous item");
    else if (IS("nextitem"))
        *out = i + 1 < len ? L->items->v[i + 1] : tundef(r, "there is no next item");
    else if (IS("cycle"))
        return tmethod_lookup(r, obj, name, n, out);
    else
        *out = tundef(r, "'LoopContext' object has no attribute '%.*s'", (int)n, name);
#undef IS
    return true;
}

bool tget_attr(trender *r, const tval *obj, const char *name, size_t n, tval *out) {
    /* Jinja2's Undefined answers dunder lookups itself (the sandbox then hides them) */
    if (obj->k == TV_UNDEF && !(n > 1 && name[0] == '_' && name[1] == '_')) return tfail_undef(r, obj);
    if (obj->k == TV_LOOP) return loop_attr(r, obj, name, n, out);
    if (n && name[0] == '_') {
        *out = tundef(r, "access to attribute '%.*s' of '%s' object is unsafe.", (int)n, name,
                      tv_type_name(obj));
        out->flags = TVF_UNSAFE;
        return true;
    }
    if (obj->k == TV_DICT && obj->d->is_ns) {
        const tval *v = tdict_gets(obj->d, name, n);
        *out = v ? *v : tundef(r, "'Namespace' object has no attribute '%.*s'", (int)n, name);
        return true;
    }
    if (tmethod_is_mutating(obj, name, n)) {
        *out = tundef(r, "access to attribute '%.*s' of '%s' object is unsafe.", (int)n, name,
                      tv_type_name(obj));
        out->flags = TVF_UNSAFE;
        return true;
    }
    if (obj->k == TV_LIST && obj->l->is_group && obj->l->n == 2) {
        if (n == 7 && !memcmp(name, "grouper", 7)) {
            *out = obj->l->v[0];
            return true;
        }
        if (n == 4 && !memcmp(name, "list", 4)) {
            *out = obj->l->v[1];
            return true;
        }
    }
    if (tmethod_lookup(r, obj, name, n, out)) return true;
    if (r->failed) return false;
    if (obj->k == TV_DICT) {
        const tval *v = tdict_gets(obj->d, name, n);
        if (v) {
            *out = *v;
            return true;
        }
    }
    *out = tundef(r, "'%s' has no attribute '%.*s'", obj_desc(obj), (int)n, name);
    return true;
}

/* Python's index normalisation: false when out of range. */
static bool norm_index(int64_t i, size_t len, size_t *out) {
    if (i < 0) i += (int64_t)len;
    if (i < 0 || (uint64_t)i >= len) return false;
    *out = (size_t)i;
    return true;
}

bool tget_item(trender *r, const tval *obj, const tval *key, tval *out) {
    if (obj->k == TV_UNDEF) return tfail_undef(r, obj);
    if (obj->k == TV_DICT) {
        const tval *v = tdict_get(obj->d, *key);
        if (v) {
            *out = *v;
            return true;
        }
    }
    if (obj->k == TV_LIST && obj->l->is_gen)
        return tfail(r, "TypeError: 'generator' object is not subscriptable");
    if ((obj->k == TV_LIST || obj->k == TV_STR) && (key->k == TV_INT || key->k == TV_BOOL)) {
        int64_t i = key->k == TV_INT ? key->i : key->b;
        size_t at;
        if (obj->k == TV_LIST) {
            if (norm_index(i, obj->l->n, &at)) {
                *out = obj->l->v[at];
                return true;
            }
        } else {
            if (!tcharge(r, obj->s.n / 8)) return false;
            size_t len = utf8_len(obj->s.p, obj->s.n);
            if (norm_index(i, len, &at)) {
                size_t b = utf8_offset(obj->s.p, obj->s.n, at), e = utf8_offset(obj->s.p, obj->s.n, at + 1);
                *out = tv_str(obj->s.p + b, e - b);
                return true;
            }
        }
        *out = tundef(r, "%s has no element %lld", obj_desc(obj), (long long)i);
        return true;
    }
    if (key->k == TV_STR) return tget_attr(r, obj, key->s.p, key->s.n, out);
    *out = tundef(r, "%s has no element", obj_desc(obj));
    return true;
}

/* obj[start:stop:step] on lists, tuples and strings (by code point). */
static bool slice(trender *r, const tval *obj, const tval *bounds[3], tval *out) {
    int64_t b[3] = {0, 0, 1};
    bool given[3];
    for (int k = 0; k < 3; k++) {
        given[k] = bounds[k] && bounds[k]->k != TV_NONE;
        if (!given[k]) continue;
        if (bounds[k]->k == TV_INT)
            b[k] = bounds[k]->i;
        else if (bounds[k]->k == TV_BOOL)
            b[k] = bounds[k]->b;
        else
            return tfail(r, "TypeError: slice indices must be integers or None");
    }
    if (obj->k == TV_UNDEF) return tfail_undef(r, obj);
    if ((obj->k != TV_LIST && obj->k != TV_STR) || (obj->k == TV_LIST && obj->l->is_gen))
        return tfail(r, "TypeError: '%s' object is not subscriptable", tv_type_name(obj));
    if (b[2] == 0) return tfail(r, "ValueError: slice step cannot be zero");
    int64_t len = obj->k == TV_LIST ? (int64_t)obj->l->n : (int64_t)utf8_len(obj->s.p, obj->s.n);
    int64_t step = b[2], start, stop;
    if (step > 0) {
        start = given[0] ? (b[0] < 0 ? (b[0] + len < 0 ? 0 : b[0] + len) : (b[0] > len ? len : b[0])) : 0;
        stop = given[1] ? (b[1] < 0 ? (b[1] + len < 0 ? 0 : b[1] + len) : (b[1] > len ? len : b[1])) : len;
    } else {
        start = given[0] ? (b[0] < 0 ? (b[0] + len < 0 ? -1 : b[0] + len) : (b[0] >= len ? len - 1 : b[0]))
                         : len - 1;
        stop =
            given[1] ? (b[1] < 0 ? (b[1] + len < 0 ? -1 : b[1] + len) : (b[1] >= len ? len - 1 : b[1])) : -1;
    }
    if (obj->k == TV_LIST) {
        tlist *l = tlist_new(&r->arena, 0);
        if (!l) return tfail_oom(r);
        l->is_tuple = obj->l->is_tuple;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (!tlist_push(&r->arena, l, obj->l->v[i])) return tfail_oom(r);
        *out = (tval){.k = TV_LIST, .l = l};
        return true;
    }
    const char *s = obj->s.p;
    size_t n = obj->s.n;
    char *o = tarena_alloc(&r->arena, n + 1);
    if (!o) return tfail_oom(r);
    size_t k = 0;
    if (step == 1 && len == (int64_t)n) { /* ASCII: bytes are code points */
        if (stop > start) memcpy(o, s + start, (size_t)(stop - start)), k = (size_t)(stop - start);
    } else { /* the byte offset of every code point, so the slice stays linear */
        size_t *at = tarena_alloc(&r->arena, ((size_t)len + 1) * sizeof(size_t));
        if (!at) return tfail_oom(r);
        for (size_t i = 0, off = 0; i <= (size_t)len; i++) {
            at[i] = off;
            if (off < n) off += utf8_offset(s + off, n - off, 1);
        }
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            size_t bo = at[i], eo = at[i + 1];
            memcpy(o + k, s + bo, eo - bo);
            k += eo - bo;
        }
    }
    *out = tv_str(o, k);
    return true;
}

/* ---- Arithmetic -------------------------------------------------------------------- */

static bool is_intlike(const tval *v) { return v->k == TV_INT || v->k == TV_BOOL; }
static int64_t as_int(const tval *v) { return v->k == TV_INT ? v->i : (int64_t)v->b; }
static bool is_number(const tval *v) { return is_intlike(v) || v->k == TV_FLOAT; }
static double as_float(const tval *v) { return v->k == TV_FLOAT ? v->f : (double)as_int(v); }

static const char *op_sym(int op) {
    static const char *const s[] = {"+", "-", "*", "/", "//", "%", "**"};
    return s[op];
}

static bool repeat(trender *r, const tval *seq, int64_t times, tval *out) {
    if (times < 0) times = 0;
    size_t unit = seq->k == TV_STR ? seq->s.n : seq->l->n;
    size_t item = seq->k == TV_STR ? 1 : sizeof(tval);
    if (unit && (uint64_t)times > (r->arena.limit ? r->arena.limit : SIZE_MAX) / (unit * item))
        return tfail(r, "template render: a repeated sequence is over the memory limit");
    if (seq->k == TV_STR) {
        char *o = tarena_alloc(&r->arena, unit * (size_t)times + 1);
        if (!o) return tfail_oom(r);
        for (int64_t i = 0; i < times; i++) memcpy(o + (size_t)i * unit, seq->s.p, unit);
        *out = tv_str(o, unit * (size_t)times);
        return true;
    }
    tlist *l = tlist_new(&r->arena, unit * (size_t)times);
    if (!l) return tfail_oom(r);
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < unit; j++) l->v[l->n++] = seq->l->v[j];
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}

bool tarith(trender *r, int op, const tval *a, const tval *b, tval *out) {
    if (a->k == TV_UNDEF) return tfail_undef(r, a);
    if (b->k == TV_UNDEF) return tfail_undef(r, b);
    if (is_intlike(a) && is_intlike(b)) {
        int64_t x = as_int(a), y = as_int(b), z;
        switch (op) {
        case OP_ADD:
            if (__builtin_add_overflow(x, y, &z)) goto overflow;
            *out = tv_int(z);
            return true;
        case OP_SUB:
            if (__builtin_sub_overflow(x, y, &z)) goto overflow;
            *out = tv_int(z);
            return true;
        case OP_MUL:
            if (__builtin_mul_overflow(x, y, &z)) goto overflow;
            *out = tv_int(z);
            return true;
        case OP_DIV:
            if (y == 0) return tfail(r, "ZeroDivisionError: division by zero");
            *out = tv_float((double)x / (double)y);
            return true;
        case OP_FLOORDIV:
        case OP_MOD: {
            if (y == 0) return tfail(r, "ZeroDivisionError: integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) goto overflow;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q--;
                m += y;
            }
            *out = tv_int(op == OP_FLOORDIV ? q : m);
            return true;
        }
        case OP_POW:
            if (y < 0) {
                if (x == 0) return tfail(r, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
                *out = tv_float(pow((double)x, (double)y));
                return true;
            }
            z = 1;
            for (int64_t base = x; y; y >>= 1) {
                if ((y & 1) && __builtin_mul_overflow(z, base, &z)) goto overflow;
                if (y > 1 && __builtin_mul_overflow(base, base, &base)) goto overflow;
            }
            *out = tv_int(z);
            return true;
        }
    }
    if (is_number(a) && is_number(b)) {
        double x = as_float(a), y = as_float(b);
        switch (op) {
        case OP_ADD: *out = tv_float(x + y); return true;
        case OP_SUB: *out = tv_float(x - y); return true;
        case OP_MUL: *out = tv_float(x * y); return true;
        case OP_DIV:
            if (y == 0) return tfail(r, "ZeroDivisionError: float division by zero");
            *out = tv_float(x / y);
            return true;
        case OP_FLOORDIV:
        case OP_MOD: {
            if (y == 0) return tfail(r, "ZeroDivisionError: float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            *out = tv_float(op == OP_MOD ? m : floor(x / y));
            return true;
        }
        case OP_POW: *out = tv_float(pow(x, y)); return true;
        }
    }
    if (op == OP_ADD && a->k == TV_STR && b->k == TV_STR) {
        char *o = tarena_alloc(&r->arena, a->s.n + b->s.n + 1);
        if (!o) return tfail_oom(r);
        if (a->s.n) memcpy(o, a->s.p, a->s.n);
        if (b->s.n) memcpy(o + a->s.n, b->s.p, b->s.n);
        *out = tv_str(o, a->s.n + b->s.n);
        return true;
    }
    if (op == OP_ADD && a->k == TV_LIST && b->k == TV_LIST && !a->l->is_gen && !b->l->is_gen) {
        tlist *l = tlist_new(&r->arena, a->l->n + b->l->n);
        if (!l) return tfail_oom(r);
        for (size_t i = 0; i < a->l->n; i++) l->v[l->n++] = a->l->v[i];
        for (size_t i = 0; i < b->l->n; i++) l->v[l->n++] = b->l->v[i];
        l->is_tuple = a->l->is_tuple;
        *out = (tval){.k = TV_LIST, .l = l};
        return true;
    }
    if (op == OP_MOD && a->k == TV_STR) { /* 'fmt' % args */
        bool tuple = b->k == TV_LIST && b->l->is_tuple;
        return tstr_percent(r, a, tuple ? b->l->v : b, tuple ? b->l->n : 1, out);
    }
    if (op == OP_MUL && (a->k == TV_STR || a->k == TV_LIST) && is_intlike(b))
        return repeat(r, a, as_int(b), out);
    if (op == OP_MUL && (b->k == TV_STR || b->k == TV_LIST) && is_intlike(a))
        return repeat(r, b, as_int(a), out);
    return tfail(r, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op),
                 tv_type_name(a), tv_type_name(b));
overflow:
    return tfail(r, "OverflowError: integer result of %s out of the 64-bit range", op_sym(op));
}

/* `a in b` */
static bool contains(trender *r, const tval *item, const tval *seq, bool *out) {
    switch (seq->k) {
    case TV_UNDEF: *out = false; return true;
    case TV_STR:
        if (item->k != TV_STR)
            return tfail(r, "TypeError: 'in <string>' requires string as left operand, not %s",
                         tv_type_name(item));
        *out = item->s.n == 0 || memmem(seq->s.p, seq->s.n, item->s.p, item->s.n) != NULL;
        return tcharge(r, seq->s.n / 8);
        return true;
    case TV_LIST:
        *out = false;
        for (size_t i = 0; i < seq->l->n && !*out; i++) *out = tv_equal(item, &seq->l->v[i]);
        return tcharge(r, seq->l->n);
    case TV_DICT:
        if (!tv_hashable(item)) return tfail(r, "TypeError: unhashable type: '%s'", tv_type_name(item));
        *out = tdict_get(seq->d, *item) != NULL;
        return tcharge(r, seq->d->n);
    default: return tfail(r, "TypeError: argument of type '%s' is not iterable", tv_type_name(seq));
    }
}

static bool compare(trender *r, int op, const tval *a, const tval *b, bool *out) {
    switch (op) {
    case CMP_EQ:
    case CMP_NE:
        *out = tv_equal(a, b) == (op == CMP_EQ);
        /* comparing long lists or strings is work too */
        return tcharge(r, a->k == TV_LIST   ? a->l->n
                          : a->k == TV_STR  ? a->s.n / 8
                          : a->k == TV_DICT ? a->d->n
                                            : 0);
    case CMP_IN: return contains(r, a, b, out);
    case CMP_NOTIN:
        if (!contains(r, a, b, out)) return false;
        *out = !*out;
        return true;
    }
    if (a->k == TV_UNDEF) return tfail_undef(r, a);
    if (b->k == TV_UNDEF) return tfail_undef(r, b);
    bool ok;
    int c = tv_compare(a, b, &ok);
    if (!ok) {
        static const char *const sym[] = {"==", "!=", "<", "<=", ">", ">="};
        return tfail(r, "TypeError: '%s' not supported between instances of '%s' and '%s'", sym[op],
                     tv_type_name(a), tv_type_name(b));
    }
    *out = op == CMP_LT ? c < 0 : op == CMP_LE ? c <= 0 : op == CMP_GT ? c > 0 : c >= 0;
    return true;
}

/* ---- Calls, filters, tests ------------------------------------------------------------ */

const tval *targ(const targs *a, size_t pos, const char *kw) {
    if (pos < a->npos) return &a->pos[pos];
    for (size_t i = 0; kw && i < a->nkw; i++)
        if (!strcmp(a->kwnames[i], kw)) return &a->kw[i];
    return NULL;
}

/* Evaluates a call's arguments (the node's list and names+list2) into a (arena arrays). */
static bool eval_args(trender *r, tframe *f, const tnode *n, targs *a) {
    tval *pos = n->n ? tarena_alloc(&r->arena, n->n * sizeof(tval)) : NULL;
    tval *kw = n->n2 ? tarena_alloc(&r->arena, n->n2 * sizeof(tval)) : NULL;
    if ((n->n && !pos) || (n->n2 && !kw)) return tfail_oom(r);
    for (size_t i = 0; i < n->n; i++)
        if (!teval(r, f, n->list[i], &pos[i])) return false;
    for (size_t i = 0; i < n->n2; i++)
        if (!teval(r, f, n->list2[i], &kw[i])) return false;
    *a = (targs){pos, n->n, kw, n->names, n->n2};
    return true;
}

static bool eval_list(trender *r, tframe *f, const tnode *n, tval *out) {
    tlist *l = tlist_new(&r->arena, n->n);
    if (!l) return tfail_oom(r);
    l->is_tuple = n->kind == N_TUPLE;
    for (size_t i = 0; i < n->n; i++)
        if (!teval(r, f, n->list[i], &l->v[l->n++])) return false;
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}

static bool eval_node(trender *r, tframe *f, const tnode *n, tval *out);

/* Long filter, attribute or operator chains make deep trees; their depth is bounded so
 * evaluating them cannot overflow the stack. */
bool teval(trender *r, tframe *f, const tnode *n, tval *out) {
    if (r->failed) return false;
    if (++r->eval_depth > 2000) return tfail(r, "template render: an expression nested too deeply");
    int line = r->line;
    r->line = n->line;
    bool ok = eval_node(r, f, n, out);
    r->eval_depth--;
    if (ok) r->line = line; /* a failure keeps the line where it happened */
    return ok;
}

static bool eval_node(trender *r, tframe *f, const tnode *n, tval *out) {
    tval a, b;
    switch (n->kind) {
    case N_CONST: *out = n->val; return true;
    case N_NAME:
        if (!tframe_lookup(f, n->str, n->slen, out)) *out = tundef(r, "'%s' is undefined", n->str);
        return true;
    case N_LIST:
    case N_TUPLE: return eval_list(r, f, n, out);
    case N_DICT: {
        tdict *d = tdict_new(&r->arena, n->n);
        if (!d) return tfail_oom(r);
        for (size_t i = 0; i < n->n; i++) {
            if (!teval(r, f, n->list[i], &a) || !teval(r, f, n->list2[i], &b)) return false;
            if (!tv_hashable(&a)) return tfail(r, "TypeError: unhashable type: '%s'", tv_type_name(&a));
            if (!tdict_set(&r->arena, d, a, b)) return tfail_oom(r);
        }
        *out = (tval){.k = TV_DICT, .d = d};
        return true;
    }
    case N_GETATTR: return teval(r, f, n->a, &a) && tget_attr(r, &a, n->str, n->slen, out);
    case N_GETITEM: return teval(r, f, n->a, &a) && teval(r, f, n->b, &b) && tget_item(r, &a, &b, out);
    case N_SLICE: {
        tval v[3];
        const tval *bounds[3] = {NULL, NULL, NULL};
        const tnode *parts[3] = {n->b, n->c, n->d};
        if (!teval(r, f, n->a, &a)) return false;
        for (int k = 0; k < 3; k++) {
            if (!parts[k]) continue;
            if (!teval(r, f, parts[k], &v[k])) return false;
            bounds[k] = &v[k];
        }
        return slice(r, &a, bounds, out);
    }
    case N_CALL: {
        targs args;
        return teval(r, f, n->a, &a) && eval_args(r, f, n, &args) && tcall(r, &a, &args, out);
    }
    case N_FILTER: {
        targs args;
        if (!n->a) return tfail(r, "internal: a filter without input");
        return teval(r, f, n->a, &a) && eval_args(r, f, n, &args) && tfilter_apply(r, n->str, &a, &args, out);
    }
    case N_TEST: {
        targs args;
        bool res;
        if (!teval(r, f, n->a, &a) || !eval_args(r, f, n, &args) || !ttest_apply(r, n->str, &a, &args, &res))
            return false;
        *out = tv_bool(res != n->flag);
        return true;
    }
    case N_NEG:
    case N_POS:
        if (!teval(r, f, n->a, &a)) return false;
        if (a.k == TV_UNDEF) return tfail_undef(r, &a);
        if (a.k == TV_FLOAT)
            *out = tv_float(n->kind == N_NEG ? -a.f : a.f);
        else if (is_intlike(&a)) {
            int64_t x = as_int(&a);
            if (n->kind == N_NEG && x == INT64_MIN)
                return tfail(r, "OverflowError: integer negation out of range");
            *out = tv_int(n->kind == N_NEG ? -x : x);
        } else
            return tfail(r, "TypeError: bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                         tv_type_name(&a));
        return true;
    case N_NOT:
        if (!teval(r, f, n->a, &a)) return false;
        *out = tv_bool(!tv_truthy(&a));
        return true;
    case N_AND:
    case N_OR:
        if (!teval(r, f, n->a, &a)) return false;
        if (tv_truthy(&a) == (n->kind == N_OR)) {
            *out = a;
            return true;
        }
        return teval(r, f, n->b, out);
    case N_BINOP: return teval(r, f, n->a, &a) && teval(r, f, n->b, &b) && tarith(r, n->op, &a, &b, out);
    case N_COMPARE: {
        if (!teval(r, f, n->a, &a)) return false;
        for (size_t i = 0; i < n->n; i++) {
            bool res;
            if (!teval(r, f, n->list[i], &b) || !compare(r, n->ops[i], &a, &b, &res)) return false;
            if (!res) {
                *out = tv_bool(false);
                return true;
            }
            a = b;
        }
        *out = tv_bool(true);
        return true;
    }
    case N_COND:
        if (!teval(r, f, n->b, &a)) return false;
        if (tv_truthy(&a)) return teval(r, f, n->a, out);
        if (n->c) return teval(r, f, n->c, out);
        *out = tundef(
            r, "the inline if expression on line %d evaluated to false and no else section was defined",
            n->line);
        return true;
    case N_CONCAT: {
        tbuf t = {.limit = r->max_output};
        for (size_t i = 0; i < n->n; i++) {
            if (!teval(r, f, n->list[i], &a)) {
                tbuf_free(&t);
                return false;
            }
            tv_write_str(&t, &a);
        }
        bool ok = !t.failed;
        char *p = ok ? tarena_strndup(&r->arena, t.p ? t.p : "", t.n) : NULL;
        size_t len = t.n;
        tbuf_free(&t);
        if (!p)
            return ok ? tfail_oom(r)
                      : tfail(r, "template render: output over the limit of %zu bytes", r->max_output);
        *out = tv_str(p, len);
        return true;
    }
    default: return tfail(r, "internal: a statement node in an expression");
    }
}

/* str(v) as an arena string value. */
bool tv_to_str(trender *r, const tval *v, tval *out) {
    if (v->k == TV_STR) {
        *out = *v;
        return true;
    }
    tbuf t = {.limit = r->max_output};
    tv_write_str(&t, v);
    bool ok = !t.failed;
    char *p = ok ? tarena_strndup(&r->arena, t.p ? t.p : "", t.n) : NULL;
    size_t len = t.n;
    tbuf_free(&t);
    if (!p) return tfail_oom(r);
    *out = tv_str(p, len);
    return true;
}

/* list(v): a list's items, a dict's keys, a string's characters; undefined is empty. */
bool tv_iterate(trender *r, const tval *v, tlist **out) {
    tlist *l;
    switch (v->k) {
    case TV_UNDEF: l = tlist_new(&r->arena, 0); break;
    case TV_LIST:
        l = tlist_new(&r->arena, v->l->n);
        if (l && v->l->n) {
            memcpy(l->v, v->l->v, v->l->n * sizeof(tval));
            l->n = v->l->n;
        }
        break;
    case TV_DICT:
        l = tlist_new(&r->arena, v->d->n);
        if (l && v->d->n) {
            memcpy(l->v, v->d->keys, v->d->n * sizeof(tval));
            l->n = v->d->n;
        }
        break;
    case TV_STR: {
        size_t k = utf8_len(v->s.p, v->s.n);
        l = tlist_new(&r->arena, k);
        for (size_t i = 0, o = 0; l && i < k; i++) {
            size_t e = o + utf8_offset(v->s.p + o, v->s.n - o, 1);
            l->v[l->n++] = tv_str(v->s.p + o, e - o);
            o = e;
        }
        break;
    }
    default: return tfail(r, "TypeError: '%s' object is not iterable", tv_type_name(v));
    }
    if (!l) return tfail_oom(r);
    *out = l;
    return true;
}

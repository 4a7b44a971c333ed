/*
 * tests.c — Jinja2's tests (`x is defined`, `x is not none`, `n is divisibleby 3`, ...)
 * with Jinja2's definitions: a bool is a number but not an integer, an undefined value is
 * iterable and a sequence, a namespace is not a mapping.
 */
#include <string.h>

#include <utf8proc.h>

#include "template/strings.h"

typedef bool (*ttest_fn)(trender *r, const tval *v, const targs *a, bool *out);

static const tval *need_arg(trender *r, const targs *a, const char *test) {
    const tval *x = targ(a, 0, NULL);
    if (!x) tfail(r, "TypeError: the test '%s' needs an argument", test);
    return x;
}

#define SIMPLE(name, expr)                                                                                   \
    static bool name(trender *r, const tval *v, const targs *a, bool *out) {                                 \
        (void)r;                                                                                             \
        (void)a;                                                                                             \
        *out = (expr);                                                                                       \
        return true;                                                                                         \
    }

SIMPLE(t_defined, v->k != TV_UNDEF)
SIMPLE(t_undefined, v->k == TV_UNDEF)
SIMPLE(t_none, v->k == TV_NONE)
SIMPLE(t_string, v->k == TV_STR)
SIMPLE(t_number, v->k == TV_INT || v->k == TV_FLOAT || v->k == TV_BOOL)
SIMPLE(t_integer, v->k == TV_INT)
SIMPLE(t_float, v->k == TV_FLOAT)
SIMPLE(t_mapping, v->k == TV_DICT && !v->d->is_ns)
SIMPLE(t_iterable, v->k == TV_UNDEF || v->k == TV_STR || v->k == TV_LIST || v->k == TV_DICT)
SIMPLE(t_sequence, v->k == TV_UNDEF || v->k == TV_STR || v->k == TV_LIST || (v->k == TV_DICT && !v->d->is_ns))
SIMPLE(t_boolean, v->k == TV_BOOL)
SIMPLE(t_true, v->k == TV_BOOL && v->b)
SIMPLE(t_false, v->k == TV_BOOL && !v->b)
SIMPLE(t_callable, v->k == TV_FUNC || v->k == TV_LOOP || v->k == TV_UNDEF) /* Undefined has __call__ */

/* odd, even, divisibleby: `value % n == r` with Python's % (so floats work, and a string
 * is %-formatted, as in Jinja2) */
static bool mod_test(trender *r, const tval *v, const tval *n, int64_t want, bool *out) {
    tval m, w = tv_int(want);
    if (!tarith(r, OP_MOD, v, n, &m)) return false;
    *out = tv_equal(&m, &w);
    return true;
}

static bool t_odd(trender *r, const tval *v, const targs *a, bool *out) {
    (void)a;
    tval two = tv_int(2);
    return mod_test(r, v, &two, 1, out);
}

static bool t_even(trender *r, const tval *v, const targs *a, bool *out) {
    (void)a;
    tval two = tv_int(2);
    return mod_test(r, v, &two, 0, out);
}

static bool t_divisibleby(trender *r, const tval *v, const targs *a, bool *out) {
    const tval *x = need_arg(r, a, "divisibleby");
    return x && mod_test(r, v, x, 0, out);
}

/* eq / ne / lt / ... as the comparison operators */
static bool cmp_test(trender *r, const tval *v, const targs *a, bool *out, int op, const char *name) {
    const tval *x = need_arg(r, a, name);
    if (!x) return false;
    if (op == 0 || op == 1) {
        *out = tv_equal(v, x) == (op == 0);
        return true;
    }
    if (v->k == TV_UNDEF) return tfail_undef(r, v);
    bool ok;
    int c = tv_compare(v, x, &ok);
    if (!ok) return tfail(r, "TypeError: cannot compare %s with %s", tv_type_name(v), tv_type_name(x));
    *out = op == 2 ? c < 0 : op == 3 ? c <= 0 : op == 4 ? c > 0 : c >= 0;
    return true;
}
static bool t_eq(trender *r, const tval *v, const targs *a, bool *out) {
    return cmp_test(r, v, a, out, 0, "eq");
}
static bool t_ne(trender *r, const tval *v, const targs *a, bool *out) {
    return cmp_test(r, v, a, out, 1, "ne");
}
static bool t_lt(trender *r, const tval *v, const targs *a, bool *out) {
    return cmp_test(r, v, a, out, 2, "lt");
}
static bool t_le(trender *r, const tval *v, const targs *a, bool *out) {
    return cmp_test(r, v, a, out, 3, "le");
}
static bool t_gt(trender *r, const tval *v, const targs *a, bool *out) {
    return cmp_test(r, v, a, out, 4, "gt");
}
static bool t_ge(trender *r, const tval *v, const targs *a, bool *out) {
    return cmp_test(r, v, a, out, 5, "ge");
}

static bool t_in(trender *r, const tval *v, const targs *a, bool *out) {
    const tval *seq = need_arg(r, a, "in");
    if (!seq) return false;
    switch (seq->k) {
    case TV_UNDEF: *out = false; return true;
    case TV_STR:
        if (v->k != TV_STR) return tfail(r, "TypeError: 'in <string>' requires string as left operand");
        *out = tstr_find(seq, v, false) >= 0;
        return true;
    case TV_LIST:
        *out = false;
        for (size_t i = 0; i < seq->l->n && !*out; i++) *out = tv_equal(v, &seq->l->v[i]);
        return true;
    case TV_DICT:
        if (!tv_hashable(v)) return tfail(r, "TypeError: unhashable type: '%s'", tv_type_name(v));
        *out = tdict_get(seq->d, *v) != NULL;
        return true;
    default: return tfail(r, "TypeError: argument of type '%s' is not iterable", tv_type_name(seq));
    }
}

/* `is` identity: the same container, or equal scalars of the same kind */
static bool t_sameas(trender *r, const tval *v, const targs *a, bool *out) {
    const tval *x = need_arg(r, a, "sameas");
    if (!x) return false;
    if (v->k != x->k)
        *out = false;
    else if (v->k == TV_LIST)
        *out = v->l == x->l;
    else if (v->k == TV_DICT)
        *out = v->d == x->d;
    else
        *out = tv_equal(v, x);
    return true;
}

/* str(value).islower() / isupper() */
static bool case_test(trender *r, const tval *v_in, bool upper) {
    tval s;
    if (!tv_to_str(r, v_in, &s)) return false;
    const tval *v = &s;
    bool cased = false;
    for (size_t i = 0; i < v->s.n;) {
        size_t len;
        utf8proc_category_t c = utf8proc_category(tstr_decode(v->s.p, v->s.n, i, &len));
        if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) {
            if (!upper) return false;
            cased = true;
        } else if (c == UTF8PROC_CATEGORY_LL) {
            if (upper) return false;
            cased = true;
        }
        i += len;
    }
    return cased;
}
SIMPLE(t_lower, case_test(r, v, false))
SIMPLE(t_upper, case_test(r, v, true))
SIMPLE(t_escaped, false)

typedef struct ttest_entry {
    const char *name;
    ttest_fn fn;
} ttest_entry;

static const ttest_entry tests[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"string", t_string},
    {"number", t_number},
    {"integer", t_integer},
    {"float", t_float},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"boolean", t_boolean},
    {"true", t_true},
    {"false", t_false},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<", t_lt},
    {"le", t_le},
    {"<=", t_le},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"in", t_in},
    {"sameas", t_sameas},
    {"callable", t_callable},
    {"lower", t_lower},
    {"upper", t_upper},
    {"escaped", t_escaped},
};

static const ttest_entry *find_test(const char *name) {
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!strcmp(tests[i].name, name)) return &tests[i];
    return NULL;
}

bool ttest_exists(const char *name) { return find_test(name) != NULL; }

bool ttest_apply(trender *r, const char *name, const tval *v, const targs *a, bool *out) {
    const ttest_entry *t = find_test(name);
    if (!t) return tfail(r, "TemplateAssertionError: no test named '%s'", name);
    return t->fn(r, v, a, out);
}

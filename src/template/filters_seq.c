/*
 * filters_seq.c — Jinja2's filters over sequences: select / reject / selectattr /
 * rejectattr (with a test and its arguments), map (attribute= or a filter name), unique,
 * sort, dictsort, min, max, sum and batch. Sorting is stable (Python's sorted) and, as in
 * Jinja2, ignores the case of strings unless case_sensitive is set.
 */
#include <stdlib.h>
#include <string.h>

#include "template/filters.h"
#include "template/strings.h"

static bool make_list(trender *r, tlist *l, tval *out) {
    (void)r;
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}

/* select, map, unique... return generators in Jinja2 */
static bool make_gen(trender *r, tlist *l, tval *out) {
    l->is_gen = true;
    return make_list(r, l, out);
}

/* select(test, args...) and friends: attr (NULL for select/reject) picks the tested value. */
static bool select_common(trender *r, const tval *v_in, const targs *a, tval *out, bool with_attr,
                          bool keep_if) {
    tlist *in, *res;
    tval empty = {.k = TV_UNDEF}; /* as Jinja2: a false value (0, none...) selects nothing */
    const tval *v = tv_truthy(v_in) ? v_in : &empty;
    if (!tv_iterate(r, v, &in) || !(res = tlist_new(&r->arena, in->n)))
        return r->failed ? false : tfail_oom(r);
    size_t at = 0;
    const tval *attr = NULL;
    if (with_attr) {
        if (a->npos < 1) return tfail(r, "TypeError: selectattr needs an attribute name");
        attr = &a->pos[at++];
    }
    const tval *test = at < a->npos ? &a->pos[at++] : NULL;
    char name[64];
    if (test) {
        if (test->k != TV_STR || test->s.n >= sizeof name)
            return tfail(r, "TypeError: a test name must be a string");
        memcpy(name, test->s.p, test->s.n);
        name[test->s.n] = 0;
        if (!ttest_exists(name)) return tfail(r, "TemplateRuntimeError: No test named '%s'.", name);
    }
    targs targs_ = {a->npos > at ? a->pos + at : NULL, a->npos - at, a->kw, a->kwnames, a->nkw};
    for (size_t i = 0; i < in->n; i++) {
        tval x = in->v[i];
        bool ok;
        if (!tstep(r)) return false;
        if (attr && !tf_attr(r, &in->v[i], attr, &x)) return false;
        if (test) {
            if (!ttest_apply(r, name, &x, &targs_, &ok)) return false;
        } else {
            ok = tv_truthy(&x);
        }
        if (ok == keep_if) res->v[res->n++] = in->v[i];
    }
    return make_gen(r, res, out);
}
static bool f_select(trender *r, const tval *v, const targs *a, tval *out) {
    return select_common(r, v, a, out, false, true);
}
static bool f_reject(trender *r, const tval *v, const targs *a, tval *out) {
    return select_common(r, v, a, out, false, false);
}
static bool f_selectattr(trender *r, const tval *v, const targs *a, tval *out) {
    return select_common(r, v, a, out, true, true);
}
static bool f_rejectattr(trender *r, const tval *v, const targs *a, tval *out) {
    return select_common(r, v, a, out, true, false);
}

static bool f_map(trender *r, const tval *v_in, const targs *a, tval *out) {
    tlist *in, *res;
    tval empty = {.k = TV_UNDEF}; /* as Jinja2: a false value maps to nothing */
    const tval *v = tv_truthy(v_in) ? v_in : &empty;
    if (!tv_iterate(r, v, &in) || !(res = tlist_new(&r->arena, in->n)))
        return r->failed ? false : tfail_oom(r);
    const tval *attr = targ(a, 99, "attribute"), *dflt = targ(a, 99, "default");
    char name[64];
    if (!attr) {
        if (a->npos < 1 || a->pos[0].k != TV_STR || a->pos[0].s.n >= sizeof name)
            return tfail(r, "TypeError: map needs a filter name or attribute=");
        memcpy(name, a->pos[0].s.p, a->pos[0].s.n);
        name[a->pos[0].s.n] = 0;
        if (!tfilter_exists(name)) return tfail(r, "TemplateRuntimeError: No filter named '%s'.", name);
    }
    targs rest = {a->npos ? a->pos + 1 : NULL, a->npos ? a->npos - 1 : 0, a->kw, a->kwnames, a->nkw};
    for (size_t i = 0; i < in->n; i++) {
        tval x;
        if (!tstep(r)) return false;
        if (attr) {
            if (!tf_attr(r, &in->v[i], attr, &x)) return false;
            if (x.k == TV_UNDEF && dflt) x = *dflt;
        } else if (!tfilter_apply(r, name, &in->v[i], &rest, &x)) {
            return false;
        }
        res->v[res->n++] = x;
    }
    return make_gen(r, res, out);
}

/* The sort key of x: its attribute (when given), lowercased when case-insensitive. */
static bool sort_key(trender *r, const tval *x, const tval *attr, bool case_sensitive, tval *key) {
    *key = *x;
    if (attr && !tf_attr(r, x, attr, key)) return false;
    if (!case_sensitive && key->k == TV_STR) return tstr_case(r, key, TCASE_LOWER, key);
    return true;
}

typedef struct sort_item {
    tval key, val;
} sort_item;

/* Stable merge sort; false (with the error set) when two keys cannot be ordered. */
static bool merge_sort(trender *r, sort_item *v, sort_item *tmp, size_t n, bool reverse) {
    if (n < 2) return true;
    size_t h = n / 2;
    if (!merge_sort(r, v, tmp, h, reverse) || !merge_sort(r, v + h, tmp, n - h, reverse)) return false;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        bool ok;
        int c = tv_compare(&v[j].key, &v[i].key, &ok);
        if (!ok)
            return tfail(r, "TypeError: '<' not supported between instances of '%s' and '%s'",
                         tv_type_name(&v[j].key), tv_type_name(&v[i].key));
        bool take_right = reverse ? c > 0 : c < 0;
        tmp[k++] = take_right ? v[j++] : v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
    return true;
}

static bool sorted_items(trender *r, tlist *in, const tval *attr, bool cs, bool reverse, sort_item **out) {
    sort_item *v = tarena_alloc(&r->arena, (in->n + 1) * sizeof *v),
              *tmp = tarena_alloc(&r->arena, (in->n + 1) * sizeof *v);
    if (!v || !tmp) return tfail_oom(r);
    for (size_t i = 0; i < in->n; i++) {
        v[i].val = in->v[i];
        if (!sort_key(r, &in->v[i], attr, cs, &v[i].key)) return false;
    }
    if (!merge_sort(r, v, tmp, in->n, reverse)) return false;
    *out = v;
    return true;
}

static bool f_sort(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *rev = targ(a, 0, "reverse"), *cs = targ(a, 1, "case_sensitive"),
               *attr = targ(a, 2, "attribute");
    tlist *in;
    sort_item *s;
    if (!tv_iterate(r, v, &in) || !sorted_items(r, in, attr, cs && tv_truthy(cs), rev && tv_truthy(rev), &s))
        return false;
    for (size_t i = 0; i < in->n; i++) in->v[i] = s[i].val;
    return make_list(r, in, out);
}

static bool f_dictsort(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *cs = targ(a, 0, "case_sensitive"), *by = targ(a, 1, "by"), *rev = targ(a, 2, "reverse");
    if (v->k != TV_DICT) return tfail(r, "TypeError: dictsort needs a mapping, not %s", tv_type_name(v));
    bool by_value = by && by->k == TV_STR && by->s.n == 5 && !memcmp(by->s.p, "value", 5);
    tlist *pairs = tlist_new(&r->arena, v->d->n);
    if (!pairs) return tfail_oom(r);
    for (size_t i = 0; i < v->d->n; i++) {
        tlist *p = tlist_new(&r->arena, 2);
        if (!p) return tfail_oom(r);
        p->is_tuple = true;
        p->v[0] = v->d->keys[i];
        p->v[1] = v->d->vals[i];
        p->n = 2;
        pairs->v[pairs->n++] = (tval){.k = TV_LIST, .l = p};
    }
    tval index = tv_int(by_value ? 1 : 0);
    sort_item *s;
    if (!sorted_items(r, pairs, &index, cs && tv_truthy(cs), rev && tv_truthy(rev), &s)) return false;
    for (size_t i = 0; i < pairs->n; i++) pairs->v[i] = s[i].val;
    return make_list(r, pairs, out);
}

/* groupby(attribute, default=None, case_sensitive=False): sorted by the attribute, then
 * (grouper, items) tuples of the runs of equal keys; the grouper is the first item's value */
static bool f_groupby(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *attr = targ(a, 0, "attribute"), *dflt = targ(a, 1, "default"),
               *cs = targ(a, 2, "case_sensitive");
    bool sensitive = cs && tv_truthy(cs);
    tlist *in, *res;
    sort_item *s;
    if (!attr) return tfail(r, "TypeError: groupby needs an attribute");
    if (!tv_iterate(r, v, &in) || !(res = tlist_new(&r->arena, 0))) return r->failed ? false : tfail_oom(r);
    sort_item *keyed = tarena_alloc(&r->arena, (in->n + 1) * sizeof *keyed);
    sort_item *tmp = tarena_alloc(&r->arena, (in->n + 1) * sizeof *tmp);
    if (!keyed || !tmp) return tfail_oom(r);
    for (size_t i = 0; i < in->n; i++) {
        tval key;
        if (!tf_attr(r, &in->v[i], attr, &key)) return false;
        if (key.k == TV_UNDEF && dflt) key = *dflt;
        if (!sensitive && key.k == TV_STR && !tstr_case(r, &key, TCASE_LOWER, &key)) return false;
        keyed[i] = (sort_item){key, in->v[i]};
    }
    if (!merge_sort(r, keyed, tmp, in->n, false)) return false;
    s = keyed;
    for (size_t i = 0; i < in->n;) {
        size_t j = i + 1;
        while (j < in->n && tv_equal(&s[j].key, &s[i].key)) j++;
        tlist *items = tlist_new(&r->arena, j - i), *group = tlist_new(&r->arena, 2);
        if (!items || !group) return tfail_oom(r);
        for (size_t k = i; k < j; k++) items->v[items->n++] = s[k].val;
        tval grouper;
        if (!tf_attr(r, &s[i].val, attr, &grouper)) return false;
        if (grouper.k == TV_UNDEF && dflt) grouper = *dflt;
        group->is_tuple = group->is_group = true;
        group->v[0] = grouper;
        group->v[1] = (tval){.k = TV_LIST, .l = items};
        group->n = 2;
        if (!tlist_push(&r->arena, res, (tval){.k = TV_LIST, .l = group})) return tfail_oom(r);
        i = j;
    }
    return make_list(r, res, out);
}

static bool f_unique(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *cs = targ(a, 0, "case_sensitive"), *attr = targ(a, 1, "attribute");
    tlist *in, *res, *seen;
    if (!tv_iterate(r, v, &in)) return false;
    if (!(res = tlist_new(&r->arena, in->n)) || !(seen = tlist_new(&r->arena, in->n))) return tfail_oom(r);
    for (size_t i = 0; i < in->n; i++) {
        tval key;
        if (!tstep(r) || !sort_key(r, &in->v[i], attr, cs && tv_truthy(cs), &key)) return false;
        if (!tv_hashable(&key)) return tfail(r, "TypeError: unhashable type: '%s'", tv_type_name(&key));
        bool dup = false;
        if (!tcharge(r, seen->n)) return false;
        for (size_t j = 0; j < seen->n && !dup; j++) dup = tv_equal(&seen->v[j], &key);
        if (dup) continue;
        seen->v[seen->n++] = key;
        res->v[res->n++] = in->v[i];
    }
    return make_gen(r, res, out);
}

static bool min_max(trender *r, const tval *v, const targs *a, tval *out, bool want_max) {
    const tval *cs = targ(a, 0, "case_sensitive"), *attr = targ(a, 1, "attribute");
    tlist *in;
    if (!tv_iterate(r, v, &in)) return false;
    if (in->n == 0) {
        *out = tundef(r, "No aggregated item, sequence was empty.");
        return true;
    }
    tval best_key;
    size_t best = 0;
    if (!sort_key(r, &in->v[0], attr, cs && tv_truthy(cs), &best_key)) return false;
    for (size_t i = 1; i < in->n; i++) {
        tval key;
        bool ok;
        if (!sort_key(r, &in->v[i], attr, cs && tv_truthy(cs), &key)) return false;
        int c = tv_compare(&key, &best_key, &ok);
        if (!ok)
            return tfail(r, "TypeError: '<' not supported between instances of '%s' and '%s'",
                         tv_type_name(&key), tv_type_name(&best_key));
        if (want_max ? c > 0 : c < 0) {
            best = i;
            best_key = key;
        }
    }
    *out = in->v[best];
    return true;
}
static bool f_min(trender *r, const tval *v, const targs *a, tval *out) {
    return min_max(r, v, a, out, false);
}
static bool f_max(trender *r, const tval *v, const targs *a, tval *out) {
    return min_max(r, v, a, out, true);
}

static bool f_sum(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *attr = targ(a, 0, "attribute"), *start = targ(a, 1, "start");
    tlist *in;
    if (!tv_iterate(r, v, &in)) return false;
    tval acc = start ? *start : tv_int(0);
    for (size_t i = 0; i < in->n; i++) {
        tval x = in->v[i];
        if (attr && !tf_attr(r, &in->v[i], attr, &x)) return false;
        if (acc.k == TV_STR) return tfail(r, "TypeError: sum() can't sum strings [use ''.join(seq) instead]");
        if (!tstep(r) || !tarith(r, OP_ADD, &acc, &x, &acc)) return false;
    }
    *out = acc;
    return true;
}

static bool f_batch(trender *r, const tval *v, const targs *a, tval *out) {
    int64_t size;
    const tval *fill = targ(a, 1, "fill_with");
    tlist *in, *res, *cur = NULL;
    if (!tf_int_arg(r, targ(a, 0, "linecount"), 1, &size) || !tv_iterate(r, v, &in)) return false;
    if (size < 1) return tfail(r, "ValueError: batch size must be at least 1");
    if (!(res = tlist_new(&r->arena, 0))) return tfail_oom(r);
    for (size_t i = 0; i < in->n; i++) {
        if (!cur || cur->n == (size_t)size) {
            if (!(cur = tlist_new(&r->arena, 0)) ||
                !tlist_push(&r->arena, res, (tval){.k = TV_LIST, .l = cur}))
                return tfail_oom(r);
        }
        if (!tlist_push(&r->arena, cur, in->v[i])) return tfail_oom(r);
    }
    if (cur && fill && fill->k != TV_NONE)
        while (cur->n < (size_t)size)
            if (!tlist_push(&r->arena, cur, *fill)) return tfail_oom(r);
    return make_list(r, res, out);
}

static const tfilter_entry seq_filters[] = {
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"map", f_map},
    {"sort", f_sort},
    {"dictsort", f_dictsort},
    {"unique", f_unique},
    {"min", f_min},
    {"max", f_max},
    {"sum", f_sum},
    {"batch", f_batch},
    {"groupby", f_groupby},
};

const tfilter_entry *tfilter_find_seq(const char *name) {
    for (size_t i = 0; i < sizeof seq_filters / sizeof seq_filters[0]; i++)
        if (!strcmp(seq_filters[i].name, name)) return &seq_filters[i];
    return NULL;
}

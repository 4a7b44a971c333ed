/*
 * methods.c — the Python methods templates call on values: str (strip, split, replace,
 * startswith with a tuple, format, is*...), list (index, count) and dict (get, items,
 * keys, values), plus loop.cycle. Each is looked up by name into a bound callable.
 *
 * ImmutableSandboxedEnvironment refuses the methods that modify a list or dict in place
 * (append, extend, insert, remove, reverse, sort; clear, pop, popitem, setdefault,
 * update on dicts; clear and pop on lists too, as since Jinja2 3.1.5): tmethod_is_mutating
 * names them, and tget_attr turns them into an unsafe undefined that fails with a
 * SecurityError when called.
 */
#include <stdio.h>
#include <string.h>

#include <utf8proc.h>

#include "template/strings.h"

static bool get_int(trender *r, const tval *v, int64_t dflt, int64_t *out) {
    *out = dflt;
    if (!v || v->k == TV_NONE)
        *out = dflt;
    else if (v->k == TV_INT)
        *out = v->i;
    else if (v->k == TV_BOOL)
        *out = v->b;
    else
        return tfail(r, "TypeError: an integer is required, not %s", tv_type_name(v));
    return true;
}

/* ---- str ------------------------------------------------------------------------- */

static bool m_strip_any(trender *r, const tval *self, const targs *a, tval *out, int which) {
    const tval *chars = targ(a, 0, "chars");
    if (chars && chars->k != TV_NONE && !tcheck_str(r, chars, "strip")) return false;
    return tstr_strip(r, self, chars, which, out);
}
static bool m_strip(trender *r, const tval *self, const targs *a, tval *out) {
    return m_strip_any(r, self, a, out, 3);
}
static bool m_lstrip(trender *r, const tval *self, const targs *a, tval *out) {
    return m_strip_any(r, self, a, out, 1);
}
static bool m_rstrip(trender *r, const tval *self, const targs *a, tval *out) {
    return m_strip_any(r, self, a, out, 2);
}

static bool m_split_any(trender *r, const tval *self, const targs *a, tval *out, bool right) {
    const tval *sep = targ(a, 0, "sep");
    int64_t maxsplit;
    if (sep && sep->k != TV_NONE && !tcheck_str(r, sep, "split")) return false;
    if (!get_int(r, targ(a, 1, "maxsplit"), -1, &maxsplit)) return false;
    return tstr_split(r, self, sep, maxsplit, right, out);
}
static bool m_split(trender *r, const tval *self, const targs *a, tval *out) {
    return m_split_any(r, self, a, out, false);
}
static bool m_rsplit(trender *r, const tval *self, const targs *a, tval *out) {
    return m_split_any(r, self, a, out, true);
}

static bool m_splitlines(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    tlist *l;
    if (!tstr_splitlines(r, self, &l)) return false;
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}

static bool affix_match(const tval *s, const tval *x, bool end) {
    if (x->s.n > s->s.n) return false;
    return !memcmp(s->s.p + (end ? s->s.n - x->s.n : 0), x->s.p, x->s.n);
}

/* str.startswith / endswith (prefix or a tuple of them, optional start and end) */
static bool m_affix(trender *r, const tval *self_in, const targs *a, tval *out, bool end) {
    const tval *x = targ(a, 0, NULL);
    if (!x) return tfail(r, "TypeError: %s() takes at least 1 argument", end ? "endswith" : "startswith");
    tval sliced = *self_in;
    const tval *self = &sliced;
    if (a->npos > 1) { /* s[start:end] by code points, negative counting from the end */
        int64_t len = (int64_t)utf8_len(self_in->s.p, self_in->s.n), b = 0, e = len;
        if (!get_int(r, &a->pos[1], 0, &b) || (a->npos > 2 && !get_int(r, &a->pos[2], len, &e))) return false;
        if (b < 0) b = b + len < 0 ? 0 : b + len;
        if (e < 0) e = e + len < 0 ? 0 : e + len;
        if (b > len) b = len;
        if (e > len) e = len;
        if (e < b) {
            *out = tv_bool(false);
            return true;
        }
        size_t bo = utf8_offset(self_in->s.p, self_in->s.n, (size_t)b);
        size_t eo = utf8_offset(self_in->s.p, self_in->s.n, (size_t)e);
        sliced = tv_str(self_in->s.p + bo, eo - bo);
    }
    if (x->k == TV_LIST && x->l->is_tuple) {
        bool any = false;
        for (size_t i = 0; i < x->l->n; i++) {
            if (!tcheck_str(r, &x->l->v[i], end ? "endswith" : "startswith")) return false;
            any = any || affix_match(self, &x->l->v[i], end);
        }
        *out = tv_bool(any);
        return true;
    }
    if (x->k != TV_STR)
        return tfail(r, "TypeError: %s first arg must be str or a tuple of str, not %s",
                     end ? "endswith" : "startswith", tv_type_name(x));
    *out = tv_bool(affix_match(self, x, end));
    return true;
}
static bool m_startswith(trender *r, const tval *self, const targs *a, tval *out) {
    return m_affix(r, self, a, out, false);
}
static bool m_endswith(trender *r, const tval *self, const targs *a, tval *out) {
    return m_affix(r, self, a, out, true);
}

static bool m_upper(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return tstr_case(r, self, TCASE_UPPER, out);
}
static bool m_lower(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return tstr_case(r, self, TCASE_LOWER, out);
}
static bool m_title(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return tstr_case(r, self, TCASE_TITLE, out);
}
static bool m_capitalize(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return tstr_case(r, self, TCASE_CAPITALIZE, out);
}

static bool m_replace(trender *r, const tval *self, const targs *a, tval *out) {
    const tval *old = targ(a, 0, NULL), *rep = targ(a, 1, NULL);
    int64_t count;
    if (!old || !rep) return tfail(r, "TypeError: replace() takes at least 2 arguments");
    if (!tcheck_str(r, old, "replace") || !tcheck_str(r, rep, "replace") ||
        !get_int(r, targ(a, 2, "count"), -1, &count))
        return false;
    return tstr_replace(r, self, old, rep, count, out);
}

static bool m_find_any(trender *r, const tval *self, const targs *a, tval *out, bool right, bool must) {
    const tval *sub = targ(a, 0, NULL);
    if (!sub) return tfail(r, "TypeError: find() takes at least 1 argument");
    if (!tcheck_str(r, sub, "find")) return false;
    if (!tcharge(r, self->s.n / 8)) return false;
    int64_t i = tstr_find(self, sub, right);
    if (must && i < 0) return tfail(r, "ValueError: substring not found");
    *out = tv_int(i);
    return true;
}
static bool m_find(trender *r, const tval *self, const targs *a, tval *out) {
    return m_find_any(r, self, a, out, false, false);
}
static bool m_rfind(trender *r, const tval *self, const targs *a, tval *out) {
    return m_find_any(r, self, a, out, true, false);
}
static bool m_sindex(trender *r, const tval *self, const targs *a, tval *out) {
    return m_find_any(r, self, a, out, false, true);
}

static bool m_scount(trender *r, const tval *self, const targs *a, tval *out) {
    const tval *sub = targ(a, 0, NULL);
    if (!sub) return tfail(r, "TypeError: count() takes at least 1 argument");
    if (!tcheck_str(r, sub, "count")) return false;
    if (!tcharge(r, self->s.n / 8)) return false;
    *out = tv_int(tstr_count(self, sub));
    return true;
}

static bool m_join(trender *r, const tval *self, const targs *a, tval *out) {
    const tval *seq = targ(a, 0, NULL);
    tlist *l;
    if (!seq) return tfail(r, "TypeError: join() takes exactly one argument");
    if (!tv_iterate(r, seq, &l)) return false;
    tbuf b = {.limit = r->max_output};
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].k != TV_STR) {
            tbuf_free(&b);
            return tfail(r, "TypeError: sequence item %zu: expected str instance, %s found", i,
                         tv_type_name(&l->v[i]));
        }
        if (i) tbuf_put(&b, self->s.p, self->s.n);
        tbuf_put(&b, l->v[i].s.p, l->v[i].s.n);
    }
    bool ok = !b.failed ? tstr_make(r, b.p ? b.p : "", b.n, out)
                        : tfail(r, "template render: a joined string is over the output limit");
    tbuf_free(&b);
    return ok;
}

/* str.format with {} / {0} / {name} fields, !r / !s and format specs. */
static bool m_format(trender *r, const tval *self, const targs *a, tval *out) {
    tbuf b = {.limit = r->max_output};
    const char *p = self->s.p, *e = p + self->s.n;
    size_t auto_i = 0;
    bool ok = true;
    while (p < e && ok) {
        if (*p == '{' && p + 1 < e && p[1] == '{') {
            tbuf_putc(&b, '{');
            p += 2;
        } else if (*p == '}' && p + 1 < e && p[1] == '}') {
            tbuf_putc(&b, '}');
            p += 2;
        } else if (*p == '{') {
            const char *q = memchr(p, '}', (size_t)(e - p));
            if (!q) {
                ok = tfail(r, "ValueError: single '{' encountered in format string");
                break;
            }
            const char *name = p + 1;
            size_t nn = (size_t)(q - name);
            const char *colon = memchr(name, ':', nn),
                       *bang = memchr(name, '!', colon ? (size_t)(colon - name) : nn);
            if (colon) nn = (size_t)(colon - name);
            char conv = 0;
            if (bang) { /* {!r} / {!s} */
                conv = bang + 1 < name + nn ? bang[1] : 0;
                nn = (size_t)(bang - name);
            }
            const tval *v = NULL;
            if (nn == 0)
                v = auto_i < a->npos ? &a->pos[auto_i++] : NULL;
            else if (name[0] >= '0' && name[0] <= '9') {
                size_t i = 0;
                for (size_t k = 0; k < nn; k++) i = i * 10 + (size_t)(name[k] - '0');
                v = i < a->npos ? &a->pos[i] : NULL;
            } else {
                for (size_t k = 0; k < a->nkw; k++)
                    if (strlen(a->kwnames[k]) == nn && !memcmp(a->kwnames[k], name, nn)) v = &a->kw[k];
            }
            if (!v) {
                ok = tfail(r, "IndexError: a format field has no argument");
                break;
            }
            tval shown = *v;
            if (conv == 'r') {
                tbuf rb = {.limit = r->max_output};
                tv_write_repr(&rb, v);
                ok = tstr_make(r, rb.p ? rb.p : "", rb.n, &shown);
                tbuf_free(&rb);
            } else if (conv == 's') {
                ok = tv_to_str(r, v, &shown);
            }
            if (ok && colon)
                ok = tstr_format_field(r, &b, &shown, colon + 1, (size_t)(q - colon - 1));
            else if (ok)
                tv_write_str(&b, &shown);
            p = q + 1;
        } else {
            tbuf_putc(&b, *p++);
        }
    }
    if (ok)
        ok = !b.failed ? tstr_make(r, b.p ? b.p : "", b.n, out)
                       : tfail(r, "template render: a formatted string is over the output limit");
    tbuf_free(&b);
    return ok;
}

/* str.center / ljust / rjust (width, fillchar) and zfill: how = 0, 1, 2, 3 */
static bool m_pad(trender *r, const tval *self, const targs *a, tval *out, int how) {
    int64_t width;
    const tval *fill = how == 3 ? NULL : targ(a, 1, "fillchar");
    if (!targ(a, 0, "width")) return tfail(r, "TypeError: a width is required");
    if (!get_int(r, targ(a, 0, "width"), 0, &width)) return false;
    if (fill && (!tcheck_str(r, fill, "fillchar") || utf8_len(fill->s.p, fill->s.n) != 1))
        return tfail(r, "TypeError: The fill character must be exactly one character long");
    tval f = fill ? *fill : tv_cstr(how == 3 ? "0" : " ");
    int64_t len = (int64_t)utf8_len(self->s.p, self->s.n);
    if (width > 100000) width = 100000;
    if (width <= len) {
        *out = *self;
        return true;
    }
    int64_t pad = width - len, left = how == 0 ? pad / 2 + (pad & width & 1) : how == 1 ? 0 : pad;
    tbuf b = {.limit = r->max_output};
    size_t body = 0;
    if (how == 3 && self->s.n &&
        (self->s.p[0] == '-' || self->s.p[0] == '+')) { /* zfill keeps the sign first */
        tbuf_putc(&b, self->s.p[0]);
        body = 1;
    }
    for (int64_t i = 0; i < left; i++) tbuf_put(&b, f.s.p, f.s.n);
    tbuf_put(&b, self->s.p + body, self->s.n - body);
    for (int64_t i = 0; i < pad - left; i++) tbuf_put(&b, f.s.p, f.s.n);
    bool ok = !b.failed ? tstr_make(r, b.p ? b.p : "", b.n, out)
                        : tfail(r, "template render: a padded string is over the output limit");
    tbuf_free(&b);
    return ok;
}
static bool m_center(trender *r, const tval *self, const targs *a, tval *out) {
    return m_pad(r, self, a, out, 0);
}
static bool m_ljust(trender *r, const tval *self, const targs *a, tval *out) {
    return m_pad(r, self, a, out, 1);
}
static bool m_rjust(trender *r, const tval *self, const targs *a, tval *out) {
    return m_pad(r, self, a, out, 2);
}
static bool m_zfill(trender *r, const tval *self, const targs *a, tval *out) {
    return m_pad(r, self, a, out, 3);
}

/* str.isdigit / isalpha / isalnum / isspace / islower / isupper */
static bool m_is(trender *r, const tval *self, tval *out, int what) {
    (void)r;
    bool all = self->s.n > 0, any_cased = false, ok_case = true;
    for (size_t i = 0; i < self->s.n;) {
        size_t len;
        int32_t c = tstr_decode(self->s.p, self->s.n, i, &len);
        utf8proc_category_t cat = utf8proc_category(c);
        bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND || (c >= '0' && c <= '9');
        switch (what) {
        case 0: all = all && digit; break;
        case 1: all = all && letter; break;
        case 2:
            all = all && (letter || digit || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO);
            break;
        case 3: all = all && tstr_is_space(c); break;
        case 4:
        case 5:
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) {
                any_cased = true;
                if (what == 4) ok_case = false;
            } else if (cat == UTF8PROC_CATEGORY_LL) {
                any_cased = true;
                if (what == 5) ok_case = false;
            }
            break;
        }
        i += len;
    }
    *out = tv_bool(what >= 4 ? any_cased && ok_case : all);
    return true;
}
static bool m_isdigit(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return m_is(r, self, out, 0);
}
static bool m_isalpha(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return m_is(r, self, out, 1);
}
static bool m_isalnum(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return m_is(r, self, out, 2);
}
static bool m_isspace(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return m_is(r, self, out, 3);
}
static bool m_islower(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return m_is(r, self, out, 4);
}
static bool m_isupper(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return m_is(r, self, out, 5);
}

/* ---- list -------------------------------------------------------------------------- */

static bool m_lindex(trender *r, const tval *self, const targs *a, tval *out) {
    const tval *x = targ(a, 0, NULL);
    if (!x) return tfail(r, "TypeError: index() takes at least 1 argument");
    if (!tcharge(r, self->l->n)) return false;
    for (size_t i = 0; i < self->l->n; i++)
        if (tv_equal(&self->l->v[i], x)) {
            *out = tv_int((int64_t)i);
            return true;
        }
    return tfail(r, "ValueError: the value is not in the list");
}

static bool m_lcount(trender *r, const tval *self, const targs *a, tval *out) {
    const tval *x = targ(a, 0, NULL);
    if (!x) return tfail(r, "TypeError: count() takes exactly one argument");
    if (!tcharge(r, self->l->n)) return false;
    int64_t k = 0;
    for (size_t i = 0; i < self->l->n; i++) k += tv_equal(&self->l->v[i], x);
    *out = tv_int(k);
    return true;
}

/* ---- dict -------------------------------------------------------------------------- */

static bool m_get(trender *r, const tval *self, const targs *a, tval *out) {
    const tval *k = targ(a, 0, NULL), *d = targ(a, 1, "default");
    if (!k) return tfail(r, "TypeError: get expected at least 1 argument");
    const tval *v = tdict_get(self->d, *k);
    *out = v ? *v : d ? *d : tv_none();
    return true;
}

static bool dict_list(trender *r, const tval *self, tval *out, int what) {
    tlist *l = tlist_new(&r->arena, self->d->n);
    if (!l) return tfail_oom(r);
    for (size_t i = 0; i < self->d->n; i++) {
        if (what == 0)
            l->v[i] = self->d->keys[i];
        else if (what == 1)
            l->v[i] = self->d->vals[i];
        else {
            tlist *pair = tlist_new(&r->arena, 2);
            if (!pair) return tfail_oom(r);
            pair->is_tuple = true;
            pair->v[0] = self->d->keys[i];
            pair->v[1] = self->d->vals[i];
            pair->n = 2;
            l->v[i] = (tval){.k = TV_LIST, .l = pair};
        }
    }
    l->n = self->d->n;
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}
static bool m_keys(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return dict_list(r, self, out, 0);
}
static bool m_values(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return dict_list(r, self, out, 1);
}
static bool m_items(trender *r, const tval *self, const targs *a, tval *out) {
    (void)a;
    return dict_list(r, self, out, 2);
}

/* ---- loop ----------------------------------------------------------------------------- */

static bool m_cycle(trender *r, const tval *self, const targs *a, tval *out) {
    if (a->npos == 0) return tfail(r, "TypeError: no items for cycling given");
    *out = a->pos[self->loop->index0 % a->npos];
    return true;
}

/* ---- lookup ----------------------------------------------------------------------------- */

typedef struct method {
    tkind kind;
    const char *name;
    tbuiltin fn;
} method;

static const method methods[] = {
    {TV_STR, "strip", m_strip},
    {TV_STR, "lstrip", m_lstrip},
    {TV_STR, "rstrip", m_rstrip},
    {TV_STR, "split", m_split},
    {TV_STR, "rsplit", m_rsplit},
    {TV_STR, "splitlines", m_splitlines},
    {TV_STR, "startswith", m_startswith},
    {TV_STR, "endswith", m_endswith},
    {TV_STR, "upper", m_upper},
    {TV_STR, "lower", m_lower},
    {TV_STR, "title", m_title},
    {TV_STR, "capitalize", m_capitalize},
    {TV_STR, "replace", m_replace},
    {TV_STR, "find", m_find},
    {TV_STR, "rfind", m_rfind},
    {TV_STR, "index", m_sindex},
    {TV_STR, "count", m_scount},
    {TV_STR, "join", m_join},
    {TV_STR, "format", m_format},
    {TV_STR, "center", m_center},
    {TV_STR, "ljust", m_ljust},
    {TV_STR, "rjust", m_rjust},
    {TV_STR, "zfill", m_zfill},
    {TV_STR, "isdigit", m_isdigit},
    {TV_STR, "isalpha", m_isalpha},
    {TV_STR, "isalnum", m_isalnum},
    {TV_STR, "isspace", m_isspace},
    {TV_STR, "islower", m_islower},
    {TV_STR, "isupper", m_isupper},
    {TV_STR, "isnumeric", m_isdigit},
    {TV_STR, "isdecimal", m_isdigit},
    {TV_LIST, "index", m_lindex},
    {TV_LIST, "count", m_lcount},

    {TV_DICT, "get", m_get},
    {TV_DICT, "keys", m_keys},
    {TV_DICT, "values", m_values},
    {TV_DICT, "items", m_items},
    {TV_LOOP, "cycle", m_cycle},
};

bool tmethod_lookup(trender *r, const tval *obj, const char *name, size_t n, tval *out) {
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        const method *m = &methods[i];
        if (m->kind != obj->k || strlen(m->name) != n || memcmp(m->name, name, n)) continue;
        if (obj->k == TV_DICT && obj->d->is_ns) return false;
        tfunc *fn = tarena_alloc(&r->arena, sizeof *fn);
        if (!fn) return tfail_oom(r);
        *fn = (tfunc){.kind = TF_BUILTIN, .name = m->name, .fn = m->fn, .self = *obj};
        *out = (tval){.k = TV_FUNC, .fn = fn};
        return true;
    }
    return false;
}

bool tmethod_is_mutating(const tval *obj, const char *name, size_t n) {
    static const char *const list_m[] = {"append", "clear",   "extend", "insert", "pop",
                                         "remove", "reverse", "sort",   NULL};
    static const char *const dict_m[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
    const char *const *set = obj->k == TV_LIST && !obj->l->is_tuple ? list_m
                             : obj->k == TV_DICT && !obj->d->is_ns  ? dict_m
                                                                    : NULL;
    for (size_t i = 0; set && set[i]; i++)
        if (strlen(set[i]) == n && !memcmp(set[i], name, n)) return true;
    return false;
}

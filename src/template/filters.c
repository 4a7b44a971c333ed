/*
 * filters.c — Jinja2's builtin filters that chat templates use (tojson as transformers
 * defines it, trim, default, join, map / select / selectattr, dictsort, indent, ...),
 * with Jinja2's argument names and defaults. A table maps names to functions; the parser
 * asks tfilter_exists so an unknown filter is a syntax error, as in Jinja2.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/filters.h"
#include "template/strings.h"

bool tf_int_arg(trender *r, const tval *v, int64_t dflt, int64_t *out) {
    *out = dflt;
    if (!v || v->k == TV_NONE)
        *out = dflt;
    else if (v->k == TV_INT)
        *out = v->i;
    else if (v->k == TV_BOOL)
        *out = v->b;
    else if (v->k == TV_FLOAT)
        *out = tv_float_to_int(v->f);
    else
        return tfail(r, "TypeError: an integer argument is required, not %s", tv_type_name(v));
    return true;
}

static bool str_result(trender *r, tbuf *b, tval *out) {
    bool ok = !b->failed ? tstr_make(r, b->p ? b->p : "", b->n, out)
                         : tfail(r, "template render: a filter's result is over the output limit");
    tbuf_free(b);
    return ok;
}

/* str(v) for filters that work on text (undefined is "") */
static bool text_of(trender *r, const tval *v, tval *out) { return tv_to_str(r, v, out); }

static bool f_tojson(trender *r, const tval *v, const targs *a, tval *out) {
    int64_t indent;
    const tval *ind = targ(a, 0, "indent"), *sk = targ(a, 99, "sort_keys"), *seps = targ(a, 99, "separators");
    const tval *ascii = targ(a, 99, "ensure_ascii");
    if (!tf_int_arg(r, ind, -1, &indent)) return false;
    const char *item_sep = NULL, *key_sep = NULL;
    if (seps && seps->k == TV_LIST && seps->l->n == 2 && seps->l->v[0].k == TV_STR &&
        seps->l->v[1].k == TV_STR) {
        item_sep = tarena_strndup(&r->arena, seps->l->v[0].s.p, seps->l->v[0].s.n);
        key_sep = tarena_strndup(&r->arena, seps->l->v[1].s.p, seps->l->v[1].s.n);
    }
    if (indent > 64) indent = 64;
    tbuf b = {.limit = r->max_output};
    const char *bad = NULL;
    if (!tv_write_json(&b, v, (int)indent, sk && tv_truthy(sk), ascii && tv_truthy(ascii), item_sep, key_sep,
                       &bad)) {
        tbuf_free(&b);
        if (bad) return tfail(r, "TypeError: Object of type %s is not JSON serializable", bad);
        return tfail(r, "template render: tojson output over the limit");
    }
    return str_result(r, &b, out);
}

static bool f_trim(trender *r, const tval *v, const targs *a, tval *out) {
    tval s;
    const tval *chars = targ(a, 0, "chars");
    if (chars && chars->k != TV_NONE && !tcheck_str(r, chars, "trim")) return false;
    return text_of(r, v, &s) && tstr_strip(r, &s, chars, 3, out);
}

static bool f_case(trender *r, const tval *v, tval *out, tcase mode) {
    tval s;
    return text_of(r, v, &s) && tstr_case(r, &s, mode, out);
}
static bool f_upper(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    return f_case(r, v, out, TCASE_UPPER);
}
static bool f_lower(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    return f_case(r, v, out, TCASE_LOWER);
}
/* Jinja2's title: words begin after -, whitespace, (, {, [ or < (unlike str.title, so
 * "they're" stays "They're") */
static bool f_title(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    tval s;
    if (!text_of(r, v, &s)) return false;
    tbuf b = {.limit = r->max_output};
    bool start = true;
    for (size_t i = 0; i < s.s.n;) {
        size_t len;
        int32_t c = tstr_decode(s.s.p, s.s.n, i, &len);
        tval ch = tv_str(s.s.p + i, len), m;
        i += len;
        if (c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || tstr_is_space(c)) {
            tbuf_put(&b, ch.s.p, ch.s.n);
            start = true;
            continue;
        }
        if (!tstr_case(r, &ch, start ? TCASE_UPPER : TCASE_LOWER, &m)) {
            tbuf_free(&b);
            return false;
        }
        tbuf_put(&b, m.s.p, m.s.n);
        start = false;
    }
    return str_result(r, &b, out);
}
static bool f_capitalize(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    return f_case(r, v, out, TCASE_CAPITALIZE);
}

static bool f_length(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    switch (v->k) {
    case TV_UNDEF: *out = tv_int(0); return true;
    case TV_STR: *out = tv_int((int64_t)utf8_len(v->s.p, v->s.n)); return tcharge(r, v->s.n / 8);
    case TV_LIST:
        if (v->l->is_gen) return tfail(r, "TypeError: object of type 'generator' has no len()");
        *out = tv_int((int64_t)v->l->n);
        return true;
    case TV_DICT: *out = tv_int((int64_t)v->d->n); return true;
    default: return tfail(r, "TypeError: object of type '%s' has no len()", tv_type_name(v));
    }
}

static bool f_first_last(trender *r, const tval *v, tval *out, bool last) {
    tlist *l;
    if (last && v->k == TV_LIST && v->l->is_gen)
        return tfail(r, "TypeError: 'generator' object is not reversible");
    if (!tv_iterate(r, v, &l)) return false;
    *out = l->n ? l->v[last ? l->n - 1 : 0]
                : tundef(r, "No %s item, sequence was empty.", last ? "last" : "first");
    return true;
}
static bool f_first(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    return f_first_last(r, v, out, false);
}
static bool f_last(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    return f_first_last(r, v, out, true);
}

/* Jinja2's attribute getter: "a.b" or "0" walks items (then attributes) part by part. */
bool tf_attr(trender *r, const tval *obj, const tval *attr, tval *out) {
    if (attr->k == TV_INT) return tget_item(r, obj, attr, out);
    if (attr->k != TV_STR) return tfail(r, "TypeError: attribute must be a string or an integer");
    tval cur = *obj;
    const char *p = attr->s.p, *e = p + attr->s.n;
    while (p <= e) {
        const char *dot = memchr(p, '.', (size_t)(e - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(e - p);
        tval key = tv_str(p, n), next;
        if (n && p[0] >= '0' && p[0] <= '9') {
            int64_t k = 0;
            bool num = true;
            for (size_t i = 0; i < n; i++) {
                if (p[i] < '0' || p[i] > '9' || k > INT64_MAX / 20)
                    num = false;
                else
                    k = k * 10 + (p[i] - '0');
            }
            if (num) key = tv_int(k);
        }
        if (cur.k == TV_UNDEF) return tfail_undef(r, &cur);
        if (!tget_item(r, &cur, &key, &next)) return false;
        cur = next;
        if (!dot) break;
        p = dot + 1;
    }
    *out = cur;
    return true;
}

static bool f_join(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *sep = targ(a, 0, "d"), *attr = targ(a, 1, "attribute");
    tlist *l;
    if (sep && !tcheck_str(r, sep, "join")) return false;
    if (!tv_iterate(r, v, &l)) return false;
    tbuf b = {.limit = r->max_output};
    for (size_t i = 0; i < l->n; i++) {
        tval item = l->v[i];
        if (attr && !tf_attr(r, &l->v[i], attr, &item)) {
            tbuf_free(&b);
            return false;
        }
        if (i && sep) tbuf_put(&b, sep->s.p, sep->s.n);
        tv_write_str(&b, &item);
    }
    return str_result(r, &b, out);
}

static bool f_default(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *d = targ(a, 0, "default_value"), *boolean = targ(a, 1, "boolean");
    bool use = v->k == TV_UNDEF || (boolean && tv_truthy(boolean) && !tv_truthy(v));
    *out = use ? (d ? *d : tv_str("", 0)) : *v;
    return true;
}

static bool f_replace(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *old = targ(a, 0, "old"), *rep = targ(a, 1, "new");
    int64_t count;
    tval s, so, sr;
    if (!old || !rep) return tfail(r, "TypeError: replace needs old and new");
    if (!tf_int_arg(r, targ(a, 2, "count"), -1, &count)) return false;
    return text_of(r, v, &s) && text_of(r, old, &so) && text_of(r, rep, &sr) &&
           tstr_replace(r, &s, &so, &sr, count, out);
}

static bool f_items(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    if (v->k == TV_UNDEF) {
        tlist *l = tlist_new(&r->arena, 0);
        if (!l) return tfail_oom(r);
        *out = (tval){.k = TV_LIST, .l = l};
        return true;
    }
    if (v->k != TV_DICT) return tfail(r, "TypeError: can only get item pairs from a mapping");
    tval m;
    targs none = {0};
    if (!tmethod_lookup(r, v, "items", 5, &m) || !tcall(r, &m, &none, out)) return false;
    out->l->is_gen = true; /* Jinja2's items filter is a generator */
    return true;
}

static bool f_list(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    tlist *l;
    if (!tv_iterate(r, v, &l)) return false;
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}

static bool f_string(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    return tv_to_str(r, v, out);
}

/* int(): Jinja2's do_int parses strings (also as floats), truncates floats, else default */
static bool f_int(trender *r, const tval *v, const targs *a, tval *out) {
    int64_t dflt, base;
    if (!tf_int_arg(r, targ(a, 0, "default"), 0, &dflt) || !tf_int_arg(r, targ(a, 1, "base"), 10, &base))
        return false;
    if (v->k == TV_INT)
        *out = *v;
    else if (v->k == TV_BOOL)
        *out = tv_int(v->b);
    else if (v->k == TV_FLOAT)
        *out = isfinite(v->f) && fabs(v->f) < 9.2e18 ? tv_int((int64_t)v->f) : tv_int(dflt);
    else if (v->k == TV_STR) {
        char buf[64];
        size_t n = v->s.n < 63 ? v->s.n : 63;
        memcpy(buf, v->s.p, n);
        buf[n] = 0;
        char *end;
        long long x = strtoll(buf, &end, (int)(base >= 2 && base <= 36 ? base : 10));
        while (*end == ' ' || *end == '\t' || *end == '\n') end++;
        if (*end == 0 && end != buf)
            *out = tv_int(x);
        else {
            double d = strtod(buf, &end);
            while (*end == ' ' || *end == '\t' || *end == '\n') end++;
            *out = *end == 0 && end != buf && isfinite(d) && fabs(d) < 9.2e18 ? tv_int((int64_t)d)
                                                                              : tv_int(dflt);
        }
    } else
        *out = tv_int(dflt);
    return true;
}

static bool f_float(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *d = targ(a, 0, "default");
    double dflt = d && d->k == TV_FLOAT ? d->f : d && d->k == TV_INT ? (double)d->i : 0.0;
    (void)r;
    if (v->k == TV_FLOAT)
        *out = *v;
    else if (v->k == TV_INT)
        *out = tv_float((double)v->i);
    else if (v->k == TV_BOOL)
        *out = tv_float(v->b);
    else if (v->k == TV_STR) {
        char buf[64];
        size_t n = v->s.n < 63 ? v->s.n : 63;
        memcpy(buf, v->s.p, n);
        buf[n] = 0;
        char *end;
        double x = strtod(buf, &end);
        while (*end == ' ' || *end == '\t' || *end == '\n') end++;
        *out = end != buf && *end == 0 ? tv_float(x) : tv_float(dflt);
    } else
        *out = tv_float(dflt);
    return true;
}

static bool f_abs(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    if (v->k == TV_INT) {
        if (v->i == INT64_MIN) return tfail(r, "OverflowError: abs out of range");
        *out = tv_int(v->i < 0 ? -v->i : v->i);
    } else if (v->k == TV_BOOL)
        *out = tv_int(v->b);
    else if (v->k == TV_FLOAT)
        *out = tv_float(fabs(v->f));
    else
        return tfail(r, "TypeError: bad operand type for abs(): '%s'", tv_type_name(v));
    return true;
}

static bool f_round(trender *r, const tval *v, const targs *a, tval *out) {
    int64_t prec;
    const tval *method = targ(a, 1, "method");
    if (!tf_int_arg(r, targ(a, 0, "precision"), 0, &prec)) return false;
    if (v->k != TV_INT && v->k != TV_FLOAT && v->k != TV_BOOL)
        return tfail(r, "TypeError: round needs a number, not %s", tv_type_name(v));
    double x = v->k == TV_FLOAT ? v->f
               : v->k == TV_INT ? (double)v->i
                                : v->b,
           m = pow(10.0, (double)(prec > 300 ? 300 : prec));
    if (method && method->k == TV_STR && method->s.n == 4 && !memcmp(method->s.p, "ceil", 4))
        x = ceil(x * m) / m;
    else if (method && method->k == TV_STR && method->s.n == 5 && !memcmp(method->s.p, "floor", 5))
        x = floor(x * m) / m;
    else if (v->k != TV_FLOAT) { /* round(int, n) stays an int in Python, ties to even */
        int64_t i = v->k == TV_INT ? v->i : v->b, m10 = 1;
        for (int64_t k = prec; k < 0 && m10 <= INT64_MAX / 10; k++) m10 *= 10;
        if (prec < 0 && m10 > 1) {
            int64_t q = i / m10, rem = i % m10;
            if (rem < 0) q--, rem += m10;
            if (rem * 2 > m10 || (rem * 2 == m10 && (q & 1))) q++;
            if (__builtin_mul_overflow(q, m10, &i)) return tfail(r, "OverflowError: round out of range");
        }
        *out = tv_int(i);
        return true;
    } else if (prec >= 0 && prec <= 300) { /* Python's round: correctly rounded, ties to even */
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
        x = strtod(buf, NULL);
    } else
        x = nearbyint(x * m) / m;
    *out = tv_float(x);
    return true;
}

/* Markup(value): the text of any value */
static bool f_safe(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    return tv_to_str(r, v, out);
}

static bool f_escape(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    tval s;
    if (!text_of(r, v, &s)) return false;
    tbuf b = {.limit = r->max_output};
    for (size_t i = 0; i < s.s.n; i++) {
        char c = s.s.p[i];
        if (c == '&')
            tbuf_put(&b, "&amp;", 5);
        else if (c == '<')
            tbuf_put(&b, "&lt;", 4);
        else if (c == '>')
            tbuf_put(&b, "&gt;", 4);
        else if (c == '"')
            tbuf_put(&b, "&#34;", 5);
        else if (c == '\'')
            tbuf_put(&b, "&#39;", 5);
        else
            tbuf_putc(&b, c);
    }
    return str_result(r, &b, out);
}

/* indent(width=4, first=False, blank=False), as Jinja 3.1 */
static bool f_indent(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *w = targ(a, 0, "width"), *first = targ(a, 1, "first"), *blank = targ(a, 2, "blank");
    tval s, ind;
    if (!tcheck_str(r, v, "indent") || !text_of(r, v, &s)) return false;
    if (w && w->k == TV_STR)
        ind = *w;
    else {
        int64_t n;
        if (!tf_int_arg(r, w, 4, &n)) return false;
        if (n < 0) n = 0;
        if (n > 1024) n = 1024;
        char *sp = tarena_alloc(&r->arena, (size_t)n + 1);
        if (!sp) return tfail_oom(r);
        memset(sp, ' ', (size_t)n);
        ind = tv_str(sp, (size_t)n);
    }
    /* s + "\n", split into lines */
    char *t = tarena_alloc(&r->arena, s.s.n + 2);
    if (!t) return tfail_oom(r);
    memcpy(t, s.s.p, s.s.n);
    t[s.s.n] = '\n';
    tval sn = tv_str(t, s.s.n + 1);
    tlist *lines;
    if (!tstr_splitlines(r, &sn, &lines)) return false;
    tbuf b = {.limit = r->max_output};
    if (first && tv_truthy(first)) tbuf_put(&b, ind.s.p, ind.s.n);
    for (size_t i = 0; i < lines->n; i++) {
        const tval *ln = &lines->v[i];
        if (i) {
            tbuf_putc(&b, '\n');
            if ((blank && tv_truthy(blank)) || ln->s.n) tbuf_put(&b, ind.s.p, ind.s.n);
        }
        tbuf_put(&b, ln->s.p, ln->s.n);
    }
    return str_result(r, &b, out);
}

static bool f_wordcount(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    tval s;
    if (!text_of(r, v, &s)) return false;
    int64_t words = 0; /* runs of \w (letters, digits, underscore), as Jinja2's regex */
    bool in_word = false;
    for (size_t i = 0; i < s.s.n;) {
        size_t len;
        int32_t c = tstr_decode(s.s.p, s.s.n, i, &len);
        i += len;
        bool w = c == '_' || tstr_is_word(c);
        if (w && !in_word) words++;
        in_word = w;
    }
    *out = tv_int(words);
    return true;
}

static bool f_center(trender *r, const tval *v, const targs *a, tval *out) {
    int64_t width;
    tval s;
    if (!text_of(r, v, &s) || !tf_int_arg(r, targ(a, 0, "width"), 80, &width)) return false;
    int64_t len = (int64_t)utf8_len(s.s.p, s.s.n);
    if (width > 100000) width = 100000;
    if (width <= len) {
        *out = s;
        return true;
    }
    int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
    tbuf b = {.limit = r->max_output};
    for (int64_t i = 0; i < left; i++) tbuf_putc(&b, ' ');
    tbuf_put(&b, s.s.p, s.s.n);
    for (int64_t i = 0; i < pad - left; i++) tbuf_putc(&b, ' ');
    return str_result(r, &b, out);
}

static bool f_truncate(trender *r, const tval *v, const targs *a, tval *out) {
    int64_t length, leeway;
    const tval *kill = targ(a, 1, "killwords"), *end = targ(a, 2, "end");
    tval s, e = end && end->k == TV_STR ? *end : tv_cstr("...");
    if (!text_of(r, v, &s) || !tf_int_arg(r, targ(a, 0, "length"), 255, &length) ||
        !tf_int_arg(r, targ(a, 3, "leeway"), 5, &leeway))
        return false;
    int64_t len = (int64_t)utf8_len(s.s.p, s.s.n), elen = (int64_t)utf8_len(e.s.p, e.s.n);
    if (len <= length + leeway) {
        *out = s;
        return true;
    }
    int64_t keep = length - elen < 0 ? 0 : length - elen;
    size_t cut = utf8_offset(s.s.p, s.s.n, (size_t)keep);
    if (!(kill && tv_truthy(kill))) { /* drop the last partial word */
        size_t sp = cut;
        while (sp > 0 && s.s.p[sp - 1] != ' ') sp--;
        if (sp > 0) cut = sp - 1;
    }
    tbuf b = {.limit = r->max_output};
    tbuf_put(&b, s.s.p, cut);
    tbuf_put(&b, e.s.p, e.s.n);
    return str_result(r, &b, out);
}

/* "%s and %s"|format(a, b): Python's printf-style formatting */
static bool f_format(trender *r, const tval *v, const targs *a, tval *out) {
    if (!tcheck_str(r, v, "format")) return false;
    if (a->nkw) {
        tdict *d = tdict_new(&r->arena, a->nkw);
        if (!d) return tfail_oom(r);
        for (size_t i = 0; i < a->nkw; i++)
            if (!tdict_set(&r->arena, d, tv_cstr(a->kwnames[i]), a->kw[i])) return tfail_oom(r);
        tval dv = {.k = TV_DICT, .d = d};
        return tstr_percent(r, v, &dv, 1, out);
    }
    return tstr_percent(r, v, a->pos, a->npos, out);
}

static bool f_reverse(trender *r, const tval *v, const targs *a, tval *out) {
    (void)a;
    if (v->k == TV_STR) {
        tlist *chars;
        if (!tv_iterate(r, v, &chars)) return false;
        char *o = tarena_alloc(&r->arena, v->s.n + 1);
        if (!o) return tfail_oom(r);
        size_t k = 0;
        for (size_t i = chars->n; i-- > 0;) {
            memcpy(o + k, chars->v[i].s.p, chars->v[i].s.n);
            k += chars->v[i].s.n;
        }
        *out = tv_str(o, k);
        return true;
    }
    tlist *l;
    if (!tv_iterate(r, v, &l)) return false;
    for (size_t i = 0; i < l->n / 2; i++) {
        tval t = l->v[i];
        l->v[i] = l->v[l->n - 1 - i];
        l->v[l->n - 1 - i] = t;
    }
    l->is_tuple = false;
    l->is_gen = true; /* reversed(seq): an iterator */
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}

/* attr(name): the sandboxed attribute lookup, without the item fallback of x.name */
static bool f_attr(trender *r, const tval *v, const targs *a, tval *out) {
    const tval *name = targ(a, 0, "name");
    if (!name || !tcheck_str(r, name, "attr")) return name ? false : tfail(r, "TypeError: attr needs a name");
    if (v->k == TV_DICT && !v->d->is_ns && !tmethod_is_mutating(v, name->s.p, name->s.n) &&
        !(name->s.n && name->s.p[0] == '_')) {
        if (tmethod_lookup(r, v, name->s.p, name->s.n, out)) return true;
        *out = tundef(r, "'dict object' has no attribute '%.*s'", (int)name->s.n, name->s.p);
        return !r->failed;
    }
    return tget_attr(r, v, name->s.p, name->s.n, out);
}

static const tfilter_entry filters[] = {
    {"tojson", f_tojson},      {"trim", f_trim},         {"upper", f_upper},
    {"lower", f_lower},        {"title", f_title},       {"capitalize", f_capitalize},
    {"length", f_length},      {"count", f_length},      {"first", f_first},
    {"last", f_last},          {"join", f_join},         {"default", f_default},
    {"d", f_default},          {"replace", f_replace},   {"items", f_items},
    {"list", f_list},          {"string", f_string},     {"int", f_int},
    {"float", f_float},        {"abs", f_abs},           {"round", f_round},
    {"safe", f_safe},          {"escape", f_escape},     {"e", f_escape},
    {"forceescape", f_escape}, {"indent", f_indent},     {"wordcount", f_wordcount},
    {"center", f_center},      {"truncate", f_truncate}, {"format", f_format},
    {"reverse", f_reverse},    {"attr", f_attr},
};

static const tfilter_entry *find_filter(const char *name) {
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++)
        if (!strcmp(filters[i].name, name)) return &filters[i];
    return tfilter_find_seq(name);
}

bool tfilter_exists(const char *name) { return find_filter(name) != NULL; }

bool tfilter_apply(trender *r, const char *name, const tval *v, const targs *a, tval *out) {
    const tfilter_entry *f = find_filter(name);
    if (!f) return tfail(r, "TemplateAssertionError: no filter named '%s'", name);
    if (!tstep(r)) return false;
    return f->fn(r, v, a, out);
}

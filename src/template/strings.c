/*
 * strings.c — Python's str operations on UTF-8 text, shared by the str methods
 * (methods.c) and the filters (filters.c): case mapping (utf8proc), strip with Python's
 * whitespace or a set of characters, split / rsplit with maxsplit, replace with a count,
 * printf-style `fmt % args` and str.format's format specs.
 */
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include <utf8proc.h>

#include "template/strings.h"

/* str.isspace() code points */
bool tstr_is_space(int32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

bool tstr_is_word(int32_t c) {
    utf8proc_category_t cat = utf8proc_category(c);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO) || (c >= '0' && c <= '9');
}

/* The code point at s[i] (a bad byte reads as itself); its byte length in *len. */
int32_t tstr_decode(const char *s, size_t n, size_t i, size_t *len) {
    int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) {
        *len = 1;
        return (unsigned char)s[i];
    }
    *len = (size_t)k;
    return cp;
}

bool tstr_make(trender *r, const char *p, size_t n, tval *out) {
    char *o = tarena_strndup(&r->arena, p, n);
    if (!o) return tfail_oom(r);
    *out = tv_str(o, n);
    return true;
}

static bool is_cased(int32_t c) {
    utf8proc_category_t cat = utf8proc_category(c);
    return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

/* The few full case mappings Python applies that utf8proc's one-to-one ones lack: the
 * text for c in upper (title: only the first letter upper), or NULL. */
static const char *special_upper(int32_t c, bool title) {
    switch (c) {
    case 0xDF: return title ? "Ss" : "SS";
    case 0xFB00: return title ? "Ff" : "FF";
    case 0xFB01: return title ? "Fi" : "FI";
    case 0xFB02: return title ? "Fl" : "FL";
    case 0xFB03: return title ? "Ffi" : "FFI";
    case 0xFB04: return title ? "Ffl" : "FFL";
    case 0xFB05:
    case 0xFB06: return title ? "St" : "ST";
    default: return NULL;
    }
}

bool tstr_case(trender *r, const tval *s, tcase mode, tval *out) {
    char *o = tarena_alloc(&r->arena, s->s.n * 3 + 4);
    if (!o) return tfail_oom(r);
    size_t k = 0;
    bool word_start = true, first = true;
    for (size_t i = 0; i < s->s.n;) {
        size_t len;
        int32_t c = tstr_decode(s->s.p, s->s.n, i, &len), m = c;
        utf8proc_category_t cat = utf8proc_category(c);
        bool cased =
            cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
        bool up =
            mode == TCASE_UPPER || (mode == TCASE_TITLE && word_start) || (mode == TCASE_CAPITALIZE && first);
        const char *special = up ? special_upper(c, mode != TCASE_UPPER) : NULL;
        switch (mode) {
        case TCASE_UPPER: m = utf8proc_toupper(c); break;
        case TCASE_LOWER: m = utf8proc_tolower(c); break;
        case TCASE_TITLE: /* Python: a cased letter after an uncased one starts a word */
            m = word_start ? utf8proc_totitle(c) : utf8proc_tolower(c);
            word_start = !cased;
            break;
        case TCASE_CAPITALIZE: m = first ? utf8proc_totitle(c) : utf8proc_tolower(c); break;
        }
        first = false;
        if (!up && c == 0x130) special = "i\xcc\x87"; /* İ lowers to i + combining dot */
        if (!up && c == 0x3A3 && i > 0) {
            /* a final sigma (after a cased letter, not before one) is ς */
            size_t pl, nl = 0, p = i - 1; /* the previous character's first byte */
            while (p > 0 && ((unsigned char)s->s.p[p] & 0xC0) == 0x80) p--;
            bool after_cased = is_cased(tstr_decode(s->s.p, s->s.n, p, &pl));
            bool before_cased = i + len < s->s.n && is_cased(tstr_decode(s->s.p, s->s.n, i + len, &nl));
            if (after_cased && !before_cased) m = 0x3C2;
        }
        if (special) {
            size_t sl = strlen(special);
            memcpy(o + k, special, sl);
            k += sl;
        } else if (len == 1 && c >= 0x80)
            o[k++] = s->s.p[i];
        else
            k += (size_t)utf8proc_encode_char(m, (utf8proc_uint8_t *)o + k);
        i += len;
    }
    *out = tv_str(o, k);
    return true;
}

static bool in_chars(const tval *chars, int32_t c) {
    for (size_t i = 0; i < chars->s.n;) {
        size_t len;
        if (tstr_decode(chars->s.p, chars->s.n, i, &len) == c) return true;
        i += len;
    }
    return false;
}

bool tstr_strip(trender *r, const tval *s, const tval *chars, int which, tval *out) {
    (void)r;
    if (chars && chars->k == TV_NONE) chars = NULL;
    size_t b = 0, e = s->s.n;
    if (which & 1) {
        while (b < e) {
            size_t len;
            int32_t c = tstr_decode(s->s.p, e, b, &len);
            if (!(chars ? in_chars(chars, c) : tstr_is_space(c))) break;
            b += len;
        }
    }
    if (which & 2) {
        while (e > b) {
            size_t st = e - 1, len;
            while (st > b && ((unsigned char)s->s.p[st] & 0xC0) == 0x80) st--;
            int32_t c = tstr_decode(s->s.p, e, st, &len);
            if (!(chars ? in_chars(chars, c) : tstr_is_space(c))) break;
            e = st;
        }
    }
    *out = tv_str(s->s.p + b, e - b);
    return true;
}

/* Substring search in linear time (glibc's two-way memmem), so hostile inputs cannot
 * make it quadratic. */
static const char *find(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    return memmem(h, hn, nd, nn);
}

/* The last occurrence: a forward search of the reversed bytes. */
static const char *rfind(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn > hn) return NULL;
    if (nn == 0) return h + hn;
    char *rh = malloc(hn), *rn = malloc(nn);
    const char *res = NULL;
    if (rh && rn) {
        for (size_t i = 0; i < hn; i++) rh[i] = h[hn - 1 - i];
        for (size_t i = 0; i < nn; i++) rn[i] = nd[nn - 1 - i];
        const char *q = memmem(rh, hn, rn, nn);
        if (q) res = h + (hn - (size_t)(q - rh) - nn);
    }
    free(rh);
    free(rn);
    return res;
}

int64_t tstr_find(const tval *s, const tval *sub, bool from_right) {
    const char *p =
        from_right ? rfind(s->s.p, s->s.n, sub->s.p, sub->s.n) : find(s->s.p, s->s.n, sub->s.p, sub->s.n);
    return p ? (int64_t)utf8_len(s->s.p, (size_t)(p - s->s.p)) : -1;
}

int64_t tstr_count(const tval *s, const tval *sub) {
    if (sub->s.n == 0) return (int64_t)utf8_len(s->s.p, s->s.n) + 1;
    int64_t k = 0;
    for (const char *p = s->s.p, *e = s->s.p + s->s.n; (p = find(p, (size_t)(e - p), sub->s.p, sub->s.n));
         p += sub->s.n)
        k++;
    return k;
}

bool tstr_replace(trender *r, const tval *s, const tval *old, const tval *rep, int64_t count, tval *out) {
    tbuf b = {.limit = r->max_output};
    const char *p = s->s.p, *e = s->s.p + s->s.n;
    if (old->s.n == 0) { /* Python inserts rep between every character and at both ends */
        int64_t done = 0;
        while (p <= e && (count < 0 || done < count)) {
            tbuf_put(&b, rep->s.p, rep->s.n);
            done++;
            if (p == e) break;
            size_t len;
            tstr_decode(p, (size_t)(e - p), 0, &len);
            tbuf_put(&b, p, len);
            p += len;
        }
        tbuf_put(&b, p, (size_t)(e - p));
    } else {
        int64_t done = 0;
        const char *q;
        while ((count < 0 || done < count) && (q = find(p, (size_t)(e - p), old->s.p, old->s.n))) {
            tbuf_put(&b, p, (size_t)(q - p));
            tbuf_put(&b, rep->s.p, rep->s.n);
            p = q + old->s.n;
            done++;
        }
        tbuf_put(&b, p, (size_t)(e - p));
    }
    bool ok = !b.failed && tstr_make(r, b.p ? b.p : "", b.n, out);
    if (b.failed) tfail(r, "template render: a replaced string is over the output limit");
    tbuf_free(&b);
    return ok;
}

/* str.split / str.rsplit: sep NULL (or None) splits on whitespace runs. */
bool tstr_split(trender *r, const tval *s, const tval *sep, int64_t maxsplit, bool from_right, tval *out) {
    tlist *l = tlist_new(&r->arena, 0);
    if (!l) return tfail_oom(r);
    if (sep && sep->k == TV_NONE) sep = NULL;
    if (sep && sep->s.n == 0) return tfail(r, "ValueError: empty separator");
    const char *p = s->s.p;
    size_t n = s->s.n;
    if (!from_right) {
        size_t i = 0;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                size_t len;
                while (i < n && tstr_is_space(tstr_decode(p, n, i, &len))) i += len;
                if (i >= n) break;
                size_t st = i;
                if (maxsplit >= 0 && splits >= maxsplit) { /* the rest, as it is */
                    if (!tlist_push(&r->arena, l, tv_str(p + st, n - st))) return tfail_oom(r);
                    break;
                }
                while (i < n && !tstr_is_space(tstr_decode(p, n, i, &len))) i += len;
                if (!tlist_push(&r->arena, l, tv_str(p + st, i - st))) return tfail_oom(r);
                splits++;
            }
        } else {
            for (;;) {
                const char *q =
                    maxsplit >= 0 && splits >= maxsplit ? NULL : find(p + i, n - i, sep->s.p, sep->s.n);
                if (!q) {
                    if (!tlist_push(&r->arena, l, tv_str(p + i, n - i))) return tfail_oom(r);
                    break;
                }
                if (!tlist_push(&r->arena, l, tv_str(p + i, (size_t)(q - (p + i))))) return tfail_oom(r);
                i = (size_t)(q - p) + sep->s.n;
                splits++;
            }
        }
    } else {
        /* collect from the right, then reverse */
        size_t e = n;
        int64_t splits = 0;
        if (!sep) {
            for (;;) {
                while (e > 0 && tstr_is_space((unsigned char)p[e - 1])) e--;
                if (e == 0) break;
                if (maxsplit >= 0 && splits >= maxsplit) { /* the rest, leading space kept */
                    if (!tlist_push(&r->arena, l, tv_str(p, e))) return tfail_oom(r);
                    break;
                }
                size_t st = e;
                while (st > 0 && !tstr_is_space((unsigned char)p[st - 1])) st--;
                if (!tlist_push(&r->arena, l, tv_str(p + st, e - st))) return tfail_oom(r);
                e = st;
                splits++;
            }
        } else {
            for (;;) {
                const char *q = maxsplit >= 0 && splits >= maxsplit ? NULL : rfind(p, e, sep->s.p, sep->s.n);
                if (!q) {
                    if (!tlist_push(&r->arena, l, tv_str(p, e))) return tfail_oom(r);
                    break;
                }
                size_t st = (size_t)(q - p) + sep->s.n;
                if (!tlist_push(&r->arena, l, tv_str(p + st, e - st))) return tfail_oom(r);
                e = (size_t)(q - p);
                splits++;
            }
        }
        for (size_t i = 0; i < l->n / 2; i++) {
            tval t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    }
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}

/* str.splitlines() (no keepends) */
bool tstr_splitlines(trender *r, const tval *s, tlist **out) {
    tlist *l = tlist_new(&r->arena, 0);
    if (!l) return tfail_oom(r);
    const char *p = s->s.p;
    size_t n = s->s.n, st = 0, i = 0;
    while (i < n) {
        size_t len;
        int32_t c = tstr_decode(p, n, i, &len);
        bool br = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
                  c == 0x2028 || c == 0x2029;
        if (!br) {
            i += len;
            continue;
        }
        if (!tlist_push(&r->arena, l, tv_str(p + st, i - st))) return tfail_oom(r);
        i += len;
        if (c == '\r' && i < n && p[i] == '\n') i++;
        st = i;
    }
    if (st < n && !tlist_push(&r->arena, l, tv_str(p + st, n - st))) return tfail_oom(r);
    *out = l;
    return true;
}

/* Pads (width, '-' flag) a piece of text as printf does, counting code points. */
static void put_padded(tbuf *b, const char *s, size_t n, int width, bool left) {
    size_t len = utf8_len(s, n);
    if (!left)
        for (size_t i = len; (int)i < width; i++) tbuf_putc(b, ' ');
    tbuf_put(b, s, n);
    if (left)
        for (size_t i = len; (int)i < width; i++) tbuf_putc(b, ' ');
}

/* Python's printf-style `fmt % args`: %s %r %d %i %f %e %g %x %o %c %% with flags, width,
 * precision and %(name)s keys (when the one argument is a dict). */
bool tstr_percent(trender *r, const tval *fmt, const tval *args, size_t nargs, tval *out) {
    tbuf b = {.limit = r->max_output};
    const char *s = fmt->s.p;
    size_t n = fmt->s.n, k = 0;
    bool ok = true;
    for (size_t i = 0; i < n && ok;) {
        if (s[i] != '%') {
            tbuf_putc(&b, s[i++]);
            continue;
        }
        i++;
        const tval *arg = NULL;
        if (i < n && s[i] == '(') {
            const char *close = memchr(s + i, ')', n - i);
            if (!close || nargs != 1 || args[0].k != TV_DICT) {
                ok = tfail(r, "TypeError: format requires a mapping");
                break;
            }
            arg = tdict_gets(args[0].d, s + i + 1, (size_t)(close - s - i - 1));
            if (!arg) {
                ok = tfail(r, "KeyError: a %%(key) of the format string is missing");
                break;
            }
            i = (size_t)(close - s) + 1;
        }
        char flags[8];
        size_t nf = 0;
        while (i < n && s[i] && strchr("-+ #0", s[i]) && nf < sizeof flags - 1) flags[nf++] = s[i++];
        flags[nf] = 0;
        int width = 0, prec = -1;
        while (i < n && s[i] >= '0' && s[i] <= '9' && width < 10000) width = width * 10 + (s[i++] - '0');
        if (i < n && s[i] == '.') {
            prec = 0;
            i++;
            while (i < n && s[i] >= '0' && s[i] <= '9' && prec < 10000) prec = prec * 10 + (s[i++] - '0');
        }
        if (i >= n) {
            ok = tfail(r, "ValueError: incomplete format");
            break;
        }
        char conv = s[i++];
        if (conv == '%') {
            tbuf_putc(&b, '%');
            continue;
        }
        if (!arg) {
            if (k >= nargs) {
                ok = tfail(r, "TypeError: not enough arguments for format string");
                break;
            }
            arg = &args[k++];
        }
        bool left = strchr(flags, '-') != NULL;
        if (conv == 's' || conv == 'r' || conv == 'a') {
            tbuf t = {.limit = r->max_output};
            if (conv == 's')
                tv_write_str(&t, arg);
            else
                tv_write_repr(&t, arg);
            size_t len = t.n;
            if (prec >= 0) len = utf8_offset(t.p ? t.p : "", t.n, (size_t)prec);
            put_padded(&b, t.p ? t.p : "", len, width, left);
            tbuf_free(&t);
            continue;
        }
        bool is_int = arg->k == TV_INT || arg->k == TV_BOOL;
        if (!is_int && arg->k != TV_FLOAT) {
            ok = tfail(r, "TypeError: %%%c format: a real number is required, not %s", conv,
                       tv_type_name(arg));
            break;
        }
        int64_t iv = arg->k == TV_INT ? arg->i : arg->k == TV_BOOL ? arg->b : tv_float_to_int(arg->f);
        double fv = arg->k == TV_FLOAT ? arg->f : (double)iv;
        char spec[32], num[128];
        if (conv == 'd' || conv == 'i' || conv == 'u' || conv == 'x' || conv == 'X' || conv == 'o') {
            if (arg->k == TV_FLOAT && (conv == 'x' || conv == 'X' || conv == 'o')) {
                ok = tfail(r, "TypeError: %%%c format: an integer is required, not float", conv);
                break;
            }
            char c = conv == 'i' || conv == 'u' ? 'd' : conv;
            if (prec >= 0)
                snprintf(spec, sizeof spec, "%%%s%d.%dll%c", flags, width > 100 ? 100 : width,
                         prec > 100 ? 100 : prec, c);
            else
                snprintf(spec, sizeof spec, "%%%s%dll%c", flags, width > 100 ? 100 : width, c);
            snprintf(num, sizeof num, spec, (long long)iv);
        } else if (conv && strchr("fFeEgG", conv)) { /* (strchr finds the NUL too) */
            snprintf(spec, sizeof spec, "%%%s%d.%d%c", flags, width > 100 ? 100 : width,
                     prec < 0    ? 6
                     : prec > 60 ? 60
                                 : prec,
                     conv);
            snprintf(num, sizeof num, spec, fv);
        } else if (conv == 'c' && is_int && iv >= 0 && iv <= 0x10FFFF) {
            size_t len = (size_t)utf8proc_encode_char((utf8proc_int32_t)iv, (utf8proc_uint8_t *)num);
            put_padded(&b, num, len, width, left);
            continue;
        } else {
            ok = tfail(r, "ValueError: unsupported format character '%c'", conv);
            break;
        }
        tbuf_put(&b, num, strlen(num));
    }
    if (ok && k < nargs && !(nargs == 1 && args[0].k == TV_DICT))
        ok = tfail(r, "TypeError: not all arguments converted during string formatting");
    if (ok)
        ok = !b.failed ? tstr_make(r, b.p ? b.p : "", b.n, out)
                       : tfail(r, "template render: a formatted string is over the output limit");
    tbuf_free(&b);
    return ok;
}

/* One replacement field's format spec (Python's format mini-language:
 * [[fill]align][sign][#][0][width][.precision][type]) applied to v, appended to b. */
bool tstr_format_field(trender *r, tbuf *b, const tval *v, const char *spec, size_t n) {
    size_t i = 0, fl = 1;
    const char *fill = " ";
    char align = 0, sign = 0, type = 0;
    bool alt = false;
    int width = 0, prec = -1;
    if (n) tstr_decode(spec, n, 0, &fl);
    if (n > fl && strchr("<>^=", spec[fl]) && spec[fl]) {
        fill = spec, align = spec[fl], i = fl + 1;
    } else if (n && spec[0] && strchr("<>^=", spec[0])) {
        align = spec[0], i = 1;
    } else {
        fl = 1;
    }
    if (i < n && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
    if (i < n && spec[i] == '#') alt = true, i++;
    if (i < n && spec[i] == '0') {
        if (!align) fill = "0", fl = 1, align = '=';
        i++;
    }
    while (i < n && spec[i] >= '0' && spec[i] <= '9' && width < 100000)
        width = width * 10 + (spec[i++] - '0');
    if (i < n && spec[i] == '.') {
        prec = 0;
        i++;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && prec < 1000) prec = prec * 10 + (spec[i++] - '0');
    }
    if (i < n) type = spec[i++];
    if (i < n || (type && !strchr("sdxXobceEfFgG%n", type)))
        return tfail(r, "ValueError: unsupported format specifier '%.*s'", (int)n, spec);
    if (width > 100000) width = 100000;
    bool is_num = v->k == TV_INT || v->k == TV_FLOAT || (v->k == TV_BOOL && n);
    char num[512], cspec[48], flags[4] = {0};
    size_t nf = 0;
    if (sign == '+' || sign == ' ') flags[nf++] = sign;
    if (alt) flags[nf++] = '#';
    tbuf t = {.limit = r->max_output};
    if (!is_num || type == 's') {
        if (type && type != 's') {
            tbuf_free(&t);
            return tfail(r, "ValueError: Unknown format code '%c' for object of type '%s'", type,
                         tv_type_name(v));
        }
        tv_write_str(&t, v);
        if (prec >= 0 && t.p) t.n = utf8_offset(t.p, t.n, (size_t)prec);
        if (!align) align = '<';
    } else {
        if (v->k == TV_FLOAT && type && strchr("dxXobc", type)) {
            tbuf_free(&t);
            return tfail(r, "ValueError: Unknown format code '%c' for object of type 'float'", type);
        }
        bool is_float = v->k == TV_FLOAT || (type && strchr("eEfFgG%", type));
        int64_t iv = v->k == TV_INT ? v->i : v->k == TV_BOOL ? v->b : 0;
        double fv = v->k == TV_FLOAT ? v->f : (double)iv;
        int p = prec < 0 ? 6 : prec > 100 ? 100 : prec;
        if (!is_float) {
            if (type == 'c') {
                num[utf8proc_encode_char((utf8proc_int32_t)(iv & 0x1FFFFF), (utf8proc_uint8_t *)num)] = 0;
            } else if (type == 'b') {
                char bits[72];
                int k = 0;
                uint64_t u = iv < 0 ? (uint64_t)0 - (uint64_t)iv : (uint64_t)iv;
                do bits[k++] = (char)('0' + (u & 1));
                while (u >>= 1);
                size_t o = 0;
                if (iv < 0)
                    num[o++] = '-';
                else if (sign == '+' || sign == ' ')
                    num[o++] = sign;
                if (alt) num[o++] = '0', num[o++] = 'b';
                while (k) num[o++] = bits[--k];
                num[o] = 0;
            } else {
                char c = type == 'x' || type == 'X' || type == 'o' ? type : 'd';
                snprintf(cspec, sizeof cspec, "%%%sll%c", flags, c);
                snprintf(num, sizeof num, cspec, (long long)iv);
            }
        } else if (!type && prec < 0) {
            tv_format_float(num + (sign && fv >= 0), sizeof num - 1, fv);
            if (sign == '+' || sign == ' ') {
                if (fv >= 0)
                    num[0] = sign;
                else
                    memmove(num, num + 1, strlen(num + 1) + 1);
            }
        } else if (type == '%') {
            snprintf(cspec, sizeof cspec, "%%%s.%df%%%%", flags, p);
            snprintf(num, sizeof num, cspec, fv * 100.0);
        } else {
            char c = type ? (type == 'n' ? 'g' : type) : 'g';
            snprintf(cspec, sizeof cspec, "%%%s.%d%c", flags,
                     prec < 0 && !type ? 12 : (prec == 0 && c == 'g' ? 1 : p), c);
            snprintf(num, sizeof num, cspec, fv);
            if (!type && !strpbrk(num, ".einfa")) strcat(num, ".0"); /* Python's '' type keeps a point */
        }
        tbuf_put(&t, num, strlen(num));
        if (!align) align = '>';
    }
    size_t len = utf8_len(t.p ? t.p : "", t.n), pad = (size_t)width > len ? (size_t)width - len : 0;
    size_t left = align == '<' ? 0 : align == '^' ? pad / 2 : pad;
    const char *body = t.p ? t.p : "";
    size_t bn = t.n;
    if (align == '=' && bn && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
        tbuf_putc(b, body[0]); /* padding goes after the sign */
        body++, bn--;
    }
    for (size_t k = 0; k < left; k++) tbuf_put(b, fill, fl);
    tbuf_put(b, body, bn);
    for (size_t k = left; k < pad; k++) tbuf_put(b, fill, fl);
    tbuf_free(&t);
    return true;
}

/*
 * value.c — the template engine's memory (arena, byte buffers) and the Python semantics
 * of its values: truthiness, equality, ordering, and str()/repr() as Python prints them
 * (a printed list shows ['a', 1], True prints True, floats print as Python's repr).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "template/internal.h"

/* ---- Arena ---------------------------------------------------------------- */

struct tarena_chunk {
    tarena_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

#define CHUNK_BYTES (64u * 1024u)

void *tarena_alloc(tarena *a, size_t n) {
    if (a->failed) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->limit && (n > a->limit || a->used > a->limit - n)) {
        a->failed = true;
        return NULL;
    }
    tarena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
        c = malloc(sizeof(tarena_chunk) + cap);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->used = 0;
        c->cap = cap;
        /* a big allocation gets its own chunk behind the current one, so the rest of
         * the current chunk stays usable */
        if (a->head && cap == n) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void tarena_free(tarena *a) {
    for (tarena_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

char *tarena_strndup(tarena *a, const char *s, size_t n) {
    char *p = tarena_alloc(a, n + 1);
    if (p && n) memcpy(p, s, n);
    return p;
}

/* ---- Byte buffer ------------------------------------------------------------ */

bool tbuf_put(tbuf *b, const char *s, size_t n) {
    if (b->failed) return false;
    if (b->limit && (n > b->limit || b->n > b->limit - n)) {
        b->failed = true;
        return false;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return false;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

bool tbuf_putc(tbuf *b, char c) { return tbuf_put(b, &c, 1); }

bool tbuf_printf(tbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp) return false;
    return tbuf_put(b, tmp, (size_t)k);
}

void tbuf_free(tbuf *b) {
    free(b->p);
    *b = (tbuf){0};
}

/* ---- Lists and dicts ---------------------------------------------------------- */

tlist *tlist_new(tarena *a, size_t cap) {
    tlist *l = tarena_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (cap) {
        l->v = tarena_alloc(a, cap * sizeof(tval));
        if (!l->v) return NULL;
        l->cap = cap;
    }
    return l;
}

bool tlist_push(tarena *a, tlist *l, tval v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tval *nv = tarena_alloc(a, cap * sizeof(tval));
        if (!nv) return false;
        if (l->n) memcpy(nv, l->v, l->n * sizeof(tval));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
    return true;
}

tdict *tdict_new(tarena *a, size_t cap) {
    tdict *d = tarena_alloc(a, sizeof *d);
    if (!d) return NULL;
    if (cap) {
        d->keys = tarena_alloc(a, cap * sizeof(tval));
        d->vals = tarena_alloc(a, cap * sizeof(tval));
        if (!d->keys || !d->vals) return NULL;
        d->cap = cap;
    }
    return d;
}

const tval *tdict_get(const tdict *d, tval key) {
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(&d->keys[i], &key)) return &d->vals[i];
    return NULL;
}

const tval *tdict_gets(const tdict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].k == TV_STR && d->keys[i].s.n == n && !memcmp(d->keys[i].s.p, key, n))
            return &d->vals[i];
    return NULL;
}

/* Inserts or replaces (a replaced key keeps its position, as in Python). */
bool tdict_set(tarena *a, tdict *d, tval key, tval val) {
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(&d->keys[i], &key)) {
            d->vals[i] = val;
            return true;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tval *nk = tarena_alloc(a, cap * sizeof(tval)), *nv = tarena_alloc(a, cap * sizeof(tval));
        if (!nk || !nv) return false;
        if (d->n) {
            memcpy(nk, d->keys, d->n * sizeof(tval));
            memcpy(nv, d->vals, d->n * sizeof(tval));
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = val;
    return true;
}

/* ---- Truthiness, equality, order ---------------------------------------------- */

bool tv_truthy(const tval *v) {
    switch (v->k) {
    case TV_UNDEF:
    case TV_NONE: return false;
    case TV_BOOL: return v->b;
    case TV_INT: return v->i != 0;
    case TV_FLOAT: return v->f != 0.0;
    case TV_STR: return v->s.n != 0;
    case TV_LIST: return v->l->is_gen || v->l->n != 0;
    case TV_DICT: return v->d->n != 0;
    default: return true;
    }
}

bool tv_hashable(const tval *v) {
    if (v->k == TV_DICT) return v->d->is_ns;
    if (v->k != TV_LIST) return true;
    if (!v->l->is_tuple || v->l->is_gen) return v->l->is_gen;
    for (size_t i = 0; i < v->l->n; i++)
        if (!tv_hashable(&v->l->v[i])) return false;
    return true;
}

static bool is_num(const tval *v) { return v->k == TV_BOOL || v->k == TV_INT || v->k == TV_FLOAT; }
static double num_f(const tval *v) {
    return v->k == TV_FLOAT ? v->f : v->k == TV_INT ? (double)v->i : (double)v->b;
}
static int64_t num_i(const tval *v) { return v->k == TV_INT ? v->i : (int64_t)v->b; }

static bool equal_at(const tval *a, const tval *b, int depth);

/* Values can nest deeply (a namespace attribute wrapped in a list again and again); past
 * this depth comparisons give up (unequal, unordered) and printing writes "...". */
#define MAX_VALUE_DEPTH 200

bool tv_equal(const tval *a, const tval *b) { return equal_at(a, b, 0); }

static bool equal_at(const tval *a, const tval *b, int depth) {
    if (depth > MAX_VALUE_DEPTH) return false;
    if (is_num(a) && is_num(b)) {
        if (a->k != TV_FLOAT && b->k != TV_FLOAT) return num_i(a) == num_i(b);
        return num_f(a) == num_f(b);
    }
    if (a->k != b->k) return false;
    switch (a->k) {
    case TV_UNDEF:
    case TV_NONE: return true;
    case TV_STR: return a->s.n == b->s.n && !memcmp(a->s.p, b->s.p, a->s.n);
    case TV_LIST:
        if (a->l->n != b->l->n || a->l->is_tuple != b->l->is_tuple) return false;
        for (size_t i = 0; i < a->l->n; i++)
            if (!equal_at(&a->l->v[i], &b->l->v[i], depth + 1)) return false;
        return true;
    case TV_DICT:
        if (a->d->n != b->d->n) return false;
        if (a->d->is_ns || b->d->is_ns) return a->d == b->d;
        for (size_t i = 0; i < a->d->n; i++) {
            const tval *o = tdict_get(b->d, a->d->keys[i]);
            if (!o || !equal_at(&a->d->vals[i], o, depth + 1)) return false;
        }
        return true;
    case TV_FUNC: return a->fn == b->fn;
    case TV_LOOP: return a->loop == b->loop;
    default: return false;
    }
}

static int compare_at(const tval *a, const tval *b, bool *ok, int depth);

int tv_compare(const tval *a, const tval *b, bool *ok) { return compare_at(a, b, ok, 0); }

static int compare_at(const tval *a, const tval *b, bool *ok, int depth) {
    *ok = depth <= MAX_VALUE_DEPTH;
    if (!*ok) return 0;
    if (is_num(a) && is_num(b)) {
        if (a->k != TV_FLOAT && b->k != TV_FLOAT) return (num_i(a) > num_i(b)) - (num_i(a) < num_i(b));
        double x = num_f(a), y = num_f(b);
        return (x > y) - (x < y);
    }
    if (a->k == TV_STR && b->k == TV_STR) {
        size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
        int c = n ? memcmp(a->s.p, b->s.p, n) : 0;
        if (c) return c < 0 ? -1 : 1;
        return (a->s.n > b->s.n) - (a->s.n < b->s.n);
    }
    if (a->k == TV_LIST && b->k == TV_LIST) {
        for (size_t i = 0; i < a->l->n && i < b->l->n; i++) {
            if (equal_at(&a->l->v[i], &b->l->v[i], depth + 1)) continue;
            return compare_at(&a->l->v[i], &b->l->v[i], ok, depth + 1);
        }
        return (a->l->n > b->l->n) - (a->l->n < b->l->n);
    }
    *ok = false;
    return 0;
}

const char *tv_type_name(const tval *v) {
    switch (v->k) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return v->l->is_gen ? "generator" : v->l->is_tuple ? "tuple" : "list";
    case TV_DICT: return v->d->is_ns ? "Namespace" : "dict";
    case TV_FUNC: return "function";
    case TV_LOOP: return "LoopContext";
    }
    return "object";
}

/* ---- Printing ------------------------------------------------------------------ */

/* Python's float repr: the shortest digits that read back to f, scientific notation
 * below 1e-4 and from 1e16 on, ".0" on whole numbers. */
void tv_format_float(char *out, size_t cap, double f) {
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d.ddde[+-]XX — split into digits and exponent */
    char digits[24];
    int nd = 0, exp10 = 0;
    bool neg = tmp[0] == '-';
    for (const char *p = tmp + neg; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    const char *e = strchr(tmp, 'e');
    if (e) exp10 = atoi(e + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    size_t left = cap;
#define EMIT(...)                                                                                            \
    do {                                                                                                     \
        int k_ = snprintf(o, left, __VA_ARGS__);                                                             \
        if (k_ < 0 || (size_t)k_ >= left) return;                                                            \
        o += k_;                                                                                             \
        left -= (size_t)k_;                                                                                  \
    } while (0)
    if (neg) EMIT("-");
    if (exp10 < -4 || exp10 >= 16) {
        EMIT("%c", digits[0]);
        if (nd > 1) EMIT(".%s", digits + 1);
        EMIT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (exp10 < 0) {
        EMIT("0.");
        for (int i = 0; i < -exp10 - 1; i++) EMIT("0");
        EMIT("%s", digits);
    } else {
        for (int i = 0; i <= exp10; i++) EMIT("%c", i < nd ? digits[i] : '0');
        EMIT(".");
        if (nd > exp10 + 1)
            EMIT("%s", digits + exp10 + 1);
        else
            EMIT("0");
    }
#undef EMIT
}

/* Python's repr of a str: single quotes unless the text has ' and no ". */
static bool write_str_repr(tbuf *b, const char *s, size_t n) {
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    tbuf_putc(b, q);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\')
            tbuf_put(b, "\\\\", 2);
        else if (c == (unsigned char)q) {
            tbuf_putc(b, '\\');
            tbuf_putc(b, (char)c);
        } else if (c == '\n')
            tbuf_put(b, "\\n", 2);
        else if (c == '\r')
            tbuf_put(b, "\\r", 2);
        else if (c == '\t')
            tbuf_put(b, "\\t", 2);
        else if (c < 0x20 || c == 0x7f)
            tbuf_printf(b, "\\x%02x", c);
        else if (c < 0x80)
            tbuf_putc(b, (char)c);
        else { /* non-ASCII: kept unless Python counts it unprintable (controls, format
                * characters, separators other than the space...) */
            int32_t cp;
            utf8proc_ssize_t k =
                utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
            if (k <= 0) {
                tbuf_putc(b, (char)c);
                continue;
            }
            utf8proc_category_t cat = utf8proc_category(cp);
            bool printable =
                !(cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CS ||
                  cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CN || cat == UTF8PROC_CATEGORY_ZL ||
                  cat == UTF8PROC_CATEGORY_ZP || cat == UTF8PROC_CATEGORY_ZS);
            if (printable)
                tbuf_put(b, s + i, (size_t)k);
            else if (cp < 0x100)
                tbuf_printf(b, "\\x%02x", (unsigned)cp);
            else if (cp < 0x10000)
                tbuf_printf(b, "\\u%04x", (unsigned)cp);
            else
                tbuf_printf(b, "\\U%08x", (unsigned)cp);
            i += (size_t)k - 1;
        }
    }
    return tbuf_putc(b, q);
}

static bool write_value(tbuf *b, const tval *v, bool repr, int depth) {
    char num[48];
    if (depth > MAX_VALUE_DEPTH) return tbuf_put(b, "...", 3);
    switch (v->k) {
    case TV_UNDEF: return true;
    case TV_NONE: return tbuf_put(b, "None", 4);
    case TV_BOOL: return v->b ? tbuf_put(b, "True", 4) : tbuf_put(b, "False", 5);
    case TV_INT: return tbuf_printf(b, "%lld", (long long)v->i);
    case TV_FLOAT: tv_format_float(num, sizeof num, v->f); return tbuf_put(b, num, strlen(num));
    case TV_STR: return repr ? write_str_repr(b, v->s.p, v->s.n) : tbuf_put(b, v->s.p, v->s.n);
    case TV_LIST: {
        if (v->l->is_gen) return tbuf_put(b, "<generator object>", 18);
        bool tup = v->l->is_tuple;
        tbuf_putc(b, tup ? '(' : '[');
        for (size_t i = 0; i < v->l->n; i++) {
            if (i) tbuf_put(b, ", ", 2);
            write_value(b, &v->l->v[i], true, depth + 1);
        }
        if (tup && v->l->n == 1) tbuf_putc(b, ',');
        return tbuf_putc(b, tup ? ')' : ']');
    }
    case TV_DICT:
        if (v->d->is_ns) tbuf_put(b, "<Namespace ", 11);
        tbuf_putc(b, '{');
        for (size_t i = 0; i < v->d->n; i++) {
            if (i) tbuf_put(b, ", ", 2);
            write_value(b, &v->d->keys[i], true, depth + 1);
            tbuf_put(b, ": ", 2);
            write_value(b, &v->d->vals[i], true, depth + 1);
        }
        tbuf_putc(b, '}');
        return v->d->is_ns ? tbuf_putc(b, '>') : !b->failed;
    case TV_FUNC: return tbuf_printf(b, "<function %s>", v->fn->name ? v->fn->name : "?");
    case TV_LOOP: return tbuf_put(b, "<LoopContext>", 13);
    }
    return false;
}

bool tv_write_str(tbuf *b, const tval *v) { return write_value(b, v, false, 0); }
bool tv_write_repr(tbuf *b, const tval *v) { return write_value(b, v, true, 0); }

/* ---- UTF-8 ----------------------------------------------------------------------- */

size_t utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

size_t utf8_offset(const char *s, size_t n, size_t k) {
    size_t i = 0;
    while (i < n && k > 0) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
        k--;
    }
    return i;
}

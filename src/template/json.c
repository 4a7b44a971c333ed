/*
 * json.c — values to and from JSON.
 *
 * tv_write_json is Python's json.dumps(x, ensure_ascii=False, indent=..., separators=...,
 * sort_keys=...) as transformers' tojson filter calls it: key order kept, non-ASCII text
 * kept, floats as Python's repr. tv_from_cjson turns a render's JSON inputs (cJSON) into
 * values; a JSON number that is whole (and exact in a double) becomes an int, as Python's
 * json.loads gives for numbers written without a fraction or exponent.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "template/internal.h"

/* One code point of a UTF-8 string (a bad byte reads as itself); its length in *len. */
static uint32_t next_cp(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (k > n) k = 1;
    uint32_t cp = k == 1 ? c : c & (0x3Fu >> (k - 1));
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *len = 1;
            return c;
        }
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    *len = k;
    return cp;
}

static void write_json_str(tbuf *b, const char *s, size_t n, bool ensure_ascii) {
    tbuf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': tbuf_put(b, "\\\"", 2); break;
        case '\\': tbuf_put(b, "\\\\", 2); break;
        case '\n': tbuf_put(b, "\\n", 2); break;
        case '\r': tbuf_put(b, "\\r", 2); break;
        case '\t': tbuf_put(b, "\\t", 2); break;
        case '\b': tbuf_put(b, "\\b", 2); break;
        case '\f': tbuf_put(b, "\\f", 2); break;
        default:
            if (c >= 0x80 && ensure_ascii) { /* \uXXXX, with a surrogate pair past the BMP */
                size_t len;
                uint32_t cp = next_cp((const unsigned char *)s + i, n - i, &len);
                if (cp >= 0x10000)
                    tbuf_printf(b, "\\u%04x\\u%04x", (unsigned)(0xD800 + ((cp - 0x10000) >> 10)),
                                (unsigned)(0xDC00 + ((cp - 0x10000) & 0x3FF)));
                else
                    tbuf_printf(b, "\\u%04x", (unsigned)cp);
                i += len - 1;
            } else if (c < 0x20) {
                tbuf_printf(b, "\\u%04x", c);
            } else {
                tbuf_putc(b, (char)c);
            }
        }
    }
    tbuf_putc(b, '"');
}

static void newline_indent(tbuf *b, int indent, int level) {
    tbuf_putc(b, '\n');
    for (int i = 0; i < indent * level; i++) tbuf_putc(b, ' ');
}

typedef struct json_opts {
    int indent;
    bool sort_keys, ensure_ascii;
    const char *item_sep, *key_sep;
    const char **bad;
} json_opts;

/* A dict key as json.dumps writes it: str as is, numbers, bools and None converted. */
static bool write_json_key(tbuf *b, const tval *k, const json_opts *o) {
    char num[48];
    switch (k->k) {
    case TV_STR: write_json_str(b, k->s.p, k->s.n, o->ensure_ascii); return true;
    case TV_INT: tbuf_printf(b, "\"%lld\"", (long long)k->i); return true;
    case TV_FLOAT:
        tv_format_float(num, sizeof num, k->f);
        tbuf_printf(b, "\"%s\"", num);
        return true;
    case TV_BOOL: tbuf_put(b, k->b ? "\"true\"" : "\"false\"", k->b ? 6 : 7); return true;
    case TV_NONE: tbuf_put(b, "\"null\"", 6); return true;
    default: *o->bad = tv_type_name(k); return false;
    }
}

static bool write_json(tbuf *b, const tval *v, const json_opts *o, int level) {
    char num[48];
    if (level > 200) {
        *o->bad = "a too deeply nested value";
        return false;
    }
    switch (v->k) {
    case TV_NONE: tbuf_put(b, "null", 4); return true;
    case TV_BOOL: tbuf_put(b, v->b ? "true" : "false", v->b ? 4 : 5); return true;
    case TV_INT: tbuf_printf(b, "%lld", (long long)v->i); return true;
    case TV_FLOAT:
        if (isnan(v->f))
            tbuf_put(b, "NaN", 3);
        else if (isinf(v->f))
            tbuf_put(b, v->f < 0 ? "-Infinity" : "Infinity", v->f < 0 ? 9 : 8);
        else {
            tv_format_float(num, sizeof num, v->f);
            tbuf_put(b, num, strlen(num));
        }
        return true;
    case TV_STR: write_json_str(b, v->s.p, v->s.n, o->ensure_ascii); return true;
    case TV_LIST:
        if (v->l->is_gen) break;
        if (v->l->n == 0) {
            tbuf_put(b, "[]", 2);
            return true;
        }
        tbuf_putc(b, '[');
        for (size_t i = 0; i < v->l->n; i++) {
            if (i) tbuf_put(b, o->item_sep, strlen(o->item_sep));
            if (o->indent >= 0) newline_indent(b, o->indent, level + 1);
            if (!write_json(b, &v->l->v[i], o, level + 1)) return false;
        }
        if (o->indent >= 0) newline_indent(b, o->indent, level);
        tbuf_putc(b, ']');
        return true;
    case TV_DICT: {
        const tdict *d = v->d;
        if (d->is_ns) break;
        if (d->n == 0) {
            tbuf_put(b, "{}", 2);
            return true;
        }
        size_t order_small[16], *order = d->n <= 16 ? order_small : malloc(d->n * sizeof(size_t));
        if (!order) return false;
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            for (size_t i = 1; i < d->n; i++) { /* insertion sort: stable, dicts are small */
                size_t x = order[i], j = i;
                bool ok;
                while (j > 0 && tv_compare(&d->keys[order[j - 1]], &d->keys[x], &ok) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        tbuf_putc(b, '{');
        bool good = true;
        for (size_t i = 0; i < d->n && good; i++) {
            if (i) tbuf_put(b, o->item_sep, strlen(o->item_sep));
            if (o->indent >= 0) newline_indent(b, o->indent, level + 1);
            good = write_json_key(b, &d->keys[order[i]], o);
            if (good) {
                tbuf_put(b, o->key_sep, strlen(o->key_sep));
                good = write_json(b, &d->vals[order[i]], o, level + 1);
            }
        }
        if (order != order_small) free(order);
        if (!good) return false;
        if (o->indent >= 0) newline_indent(b, o->indent, level);
        tbuf_putc(b, '}');
        return true;
    }
    default: break;
    }
    *o->bad = tv_type_name(v);
    return false;
}

bool tv_write_json(tbuf *b, const tval *v, int indent, bool sort_keys, bool ensure_ascii,
                   const char *item_sep, const char *key_sep, const char **bad) {
    json_opts o = {indent, sort_keys, ensure_ascii, item_sep, key_sep, bad};
    if (!o.item_sep) o.item_sep = indent >= 0 ? "," : ", ";
    if (!o.key_sep) o.key_sep = ": ";
    *bad = NULL;
    return write_json(b, v, &o, 0) && !b->failed;
}

static bool from_cjson(tarena *a, const cJSON *j, tval *out, int depth) {
    if (depth > 200) return false;
    if (cJSON_IsNull(j))
        *out = tv_none();
    else if (cJSON_IsBool(j))
        *out = tv_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0)
            *out = tv_int((int64_t)d);
        else
            *out = tv_float(d);
    } else if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        size_t n = strlen(s);
        char *p = tarena_strndup(a, s, n);
        if (!p) return false;
        *out = tv_str(p, n);
    } else if (cJSON_IsArray(j)) {
        tlist *l = tlist_new(a, (size_t)cJSON_GetArraySize(j));
        if (!l) return false;
        for (const cJSON *c = j->child; c; c = c->next) {
            tval v;
            if (!from_cjson(a, c, &v, depth + 1) || !tlist_push(a, l, v)) return false;
        }
        *out = (tval){.k = TV_LIST, .l = l};
    } else if (cJSON_IsObject(j)) {
        tdict *d = tdict_new(a, (size_t)cJSON_GetArraySize(j));
        if (!d) return false;
        for (const cJSON *c = j->child; c; c = c->next) {
            tval v;
            const char *k = c->string ? c->string : "";
            char *kp = tarena_strndup(a, k, strlen(k));
            if (!kp || !from_cjson(a, c, &v, depth + 1) || !tdict_set(a, d, tv_str(kp, strlen(k)), v))
                return false;
        }
        *out = (tval){.k = TV_DICT, .d = d};
    } else {
        *out = tv_none();
    }
    return true;
}

bool tv_from_cjson(tarena *a, const cJSON *j, tval *out) { return from_cjson(a, j, out, 0); }

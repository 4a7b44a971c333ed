/*
 * pythonic.c — LFM2's tool calls: a Python list of calls with keyword arguments,
 *     [get_weather(location="Paris", unit='c'), f(x=1, y=[1, 2], z=True, w=None)]
 * (or one bare call), turned into JSON: each call's keyword arguments become an object.
 *
 * The values are Python literals: strings (single, double or triple quoted, r/u/b
 * prefixes, Python's escapes: \n \t \xhh \ooo \uhhhh \Uhhhhhhhh, unknown ones kept with
 * their backslash), ints (decimal with _, 0x/0o/0b; kept exact as JSON digits), floats,
 * True/False/None (and JSON's true/false/null, which the model writes too), lists, tuples
 * and dicts with string keys. Anything else — positional arguments, expressions, a NUL
 * or a lone surrogate in a string, nesting past CHAT_PY_MAX_DEPTH — makes the list
 * malformed, and the caller keeps the markup as content.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/internal.h"

#define CHAT_PY_MAX_DEPTH 64

typedef struct py_reader {
    const char *s;
    size_t n, i;
    int depth;
    bool oom;
} py_reader;

/* a growable byte buffer for a string's decoded text */
typedef struct py_buf {
    char *p;
    size_t len, cap;
} py_buf;

static bool buf_put(py_reader *r, py_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            r->oom = true;
            return false;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

static bool buf_put_utf8(py_reader *r, py_buf *b, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    return buf_put(r, b, u, k);
}

static void skip_space(py_reader *r) { r->i = chat_skip_space(r->s, r->n, r->i); }

static bool eat(py_reader *r, char c) {
    skip_space(r);
    if (r->i < r->n && r->s[r->i] == c) {
        r->i++;
        return true;
    }
    return false;
}

static bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* k hex digits at s[i]; -1 when they are not there */
static int64_t read_hex(const py_reader *r, size_t i, int k) {
    int64_t v = 0;
    if (r->n - i < (size_t)k) return -1;
    for (int j = 0; j < k; j++) {
        int h = hex_value(r->s[i + j]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* One escape after the backslash at r->s[r->i - 1]; false when malformed. */
static bool read_escape(py_reader *r, py_buf *b) {
    if (r->i >= r->n) return false;
    char c = r->s[r->i++];
    switch (c) {
    case '\n': return true; /* a line continuation */
    case '\\': return buf_put(r, b, "\\", 1);
    case '\'': return buf_put(r, b, "'", 1);
    case '"': return buf_put(r, b, "\"", 1);
    case 'a': return buf_put(r, b, "\a", 1);
    case 'b': return buf_put(r, b, "\b", 1);
    case 'f': return buf_put(r, b, "\f", 1);
    case 'n': return buf_put(r, b, "\n", 1);
    case 'r': return buf_put(r, b, "\r", 1);
    case 't': return buf_put(r, b, "\t", 1);
    case 'v': return buf_put(r, b, "\v", 1);
    default: break;
    }
    int64_t cp = -1;
    if (c >= '0' && c <= '7') {
        cp = c - '0';
        for (int k = 1; k < 3 && r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '7'; k++)
            cp = cp * 8 + (r->s[r->i++] - '0');
    } else if (c == 'x' || c == 'u' || c == 'U') {
        int k = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        cp = read_hex(r, r->i, k);
        if (cp < 0) return false;
        r->i += (size_t)k;
        /* a UTF-16 pair written as two \u escapes is one character, as in JSON */
        if (cp >= 0xd800 && cp < 0xdc00 && r->n - r->i >= 6 && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u') {
            int64_t lo = read_hex(r, r->i + 2, 4);
            if (lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                r->i += 6;
            }
        }
    } else {
        /* Python keeps an unknown escape as written */
        char two[2] = {'\\', c};
        return buf_put(r, b, two, 2);
    }
    if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000)) return false;
    return buf_put_utf8(r, b, (uint32_t)cp);
}

static cJSON *read_string(py_reader *r) {
    bool raw = false;
    while (r->i < r->n && r->s[r->i] != '\'' && r->s[r->i] != '"') {
        char c = r->s[r->i++];
        if (c == 'r' || c == 'R') raw = true;
    }
    char q = r->s[r->i];
    bool triple = r->n - r->i >= 3 && r->s[r->i + 1] == q && r->s[r->i + 2] == q;
    r->i += triple ? 3 : 1;
    py_buf b = {0};
    if (!buf_put(r, &b, "", 0)) return NULL;
    bool ok = false;
    while (r->i < r->n) {
        char c = r->s[r->i];
        if (c == q && (!triple || (r->n - r->i >= 3 && r->s[r->i + 1] == q && r->s[r->i + 2] == q))) {
            r->i += triple ? 3 : 1;
            ok = true;
            break;
        }
        if (c == 0 || (c == '\n' && !triple)) break;
        r->i++;
        if (c == '\\' && !raw) {
            if (!read_escape(r, &b)) break;
        } else if (c == '\\') {
            /* raw: the backslash stays, and the next character cannot end the string */
            if (r->i >= r->n || r->s[r->i] == 0 || !buf_put(r, &b, r->s + r->i - 1, 2)) break;
            r->i++;
        } else if (!buf_put(r, &b, &c, 1)) {
            break;
        }
    }
    cJSON *v = NULL;
    if (ok && !r->oom) {
        v = cJSON_CreateString(b.p);
        if (!v) r->oom = true;
    }
    free(b.p);
    return v;
}

/* A number: ints exact (JSON digits), floats through strtod. */
static cJSON *read_number(py_reader *r) {
    bool neg = false;
    if (r->s[r->i] == '-' || r->s[r->i] == '+') {
        neg = r->s[r->i] == '-';
        r->i = chat_skip_space(r->s, r->n, r->i + 1);
    }
    char text[80];
    size_t k = 0;
    if (neg) text[k++] = '-';
    size_t i = r->i;
    if (i + 1 < r->n && r->s[i] == '0' && r->s[i + 1] && strchr("xXoObB", r->s[i + 1])) {
        int base = strchr("xX", r->s[i + 1]) ? 16 : strchr("oO", r->s[i + 1]) ? 8 : 2;
        uint64_t v = 0;
        int digits = 0;
        for (i += 2; i < r->n && (is_ident_char(r->s[i])); i++) {
            if (r->s[i] == '_') continue;
            int d = hex_value(r->s[i]);
            if (d < 0 || d >= base || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return NULL;
            v = v * (uint64_t)base + (uint64_t)d;
            digits++;
        }
        if (!digits) return NULL;
        r->i = i;
        snprintf(text + k, sizeof text - k, "%llu", (unsigned long long)v);
        cJSON *n = cJSON_CreateRaw(text);
        if (!n) r->oom = true;
        return n;
    }
    bool is_float = false, seen_digit = false;
    for (; i < r->n; i++) {
        char c = r->s[i];
        if (is_digit(c)) {
            seen_digit = true;
        } else if (c == '_') {
            continue;
        } else if (c == '.' || c == 'e' || c == 'E') {
            is_float = true;
        } else if ((c == '+' || c == '-') && k > 0 && (text[k - 1] == 'e' || text[k - 1] == 'E')) {
        } else {
            break;
        }
        if (k + 1 >= sizeof text) return NULL;
        text[k++] = c;
    }
    text[k] = 0;
    if (!seen_digit || (i < r->n && (is_ident_char(r->s[i]) || r->s[i] == '.'))) return NULL;
    r->i = i;
    cJSON *n;
    if (is_float) {
        char *end = NULL;
        errno = 0;
        double d = strtod(text, &end);
        if (*end || !isfinite(d)) return NULL;
        n = cJSON_CreateNumber(d);
    } else {
        /* JSON has no leading zeros (Python allows only "0", "00", ...) */
        size_t z = neg ? 1 : 0;
        while (text[z] == '0' && text[z + 1]) z++;
        if (z > (neg ? 1u : 0u)) memmove(text + (neg ? 1 : 0), text + z, strlen(text + z) + 1);
        n = cJSON_CreateRaw(text);
    }
    if (!n) r->oom = true;
    return n;
}

static cJSON *read_value(py_reader *r);

/* The items of a list, tuple or dict up to the closing bracket. A parenthesised single
 * value without a comma is that value, as in Python. */
static cJSON *read_container(py_reader *r, char open) {
    char close = open == '[' ? ']' : open == '(' ? ')' : '}';
    cJSON *c = open == '{' ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!c) {
        r->oom = true;
        return NULL;
    }
    r->i++;
    bool comma = false;
    int n = 0;
    while (!eat(r, close)) {
        if (n > 0 && !comma) goto fail;
        cJSON *key = NULL;
        if (open == '{') {
            key = read_value(r);
            if (!cJSON_IsString(key) || !eat(r, ':')) {
                cJSON_Delete(key);
                goto fail;
            }
        }
        cJSON *v = read_value(r);
        if (!v) {
            cJSON_Delete(key);
            goto fail;
        }
        if (key) {
            /* a repeated key keeps the last value, as a Python dict does */
            cJSON_DeleteItemFromObjectCaseSensitive(c, key->valuestring);
            bool ok = cJSON_AddItemToObject(c, key->valuestring, v);
            cJSON_Delete(key);
            if (!ok) {
                cJSON_Delete(v);
                r->oom = true;
                goto fail;
            }
        } else if (!cJSON_AddItemToArray(c, v)) {
            cJSON_Delete(v);
            r->oom = true;
            goto fail;
        }
        n++;
        comma = eat(r, ',');
    }
    if (open == '(' && n == 1 && !comma) {
        cJSON *v = cJSON_DetachItemFromArray(c, 0);
        cJSON_Delete(c);
        return v;
    }
    return c;
fail:
    cJSON_Delete(c);
    return NULL;
}

static bool word_is(const py_reader *r, size_t start, size_t end, const char *w) {
    return end - start == strlen(w) && memcmp(r->s + start, w, end - start) == 0;
}

static cJSON *read_value(py_reader *r) {
    skip_space(r);
    if (r->i >= r->n || r->depth >= CHAT_PY_MAX_DEPTH || r->oom) return NULL;
    char c = r->s[r->i];
    cJSON *v = NULL;
    if (c == '[' || c == '(' || c == '{') {
        r->depth++;
        v = read_container(r, c);
        r->depth--;
        return v;
    }
    if (c == '\'' || c == '"') return read_string(r);
    if (is_digit(c) || c == '-' || c == '+' || c == '.') return read_number(r);
    if (!is_ident_start(c)) return NULL;
    size_t start = r->i, end = start;
    while (end < r->n && is_ident_char(r->s[end])) end++;
    /* a string prefix: r, u, b, rb, br (any case) right before a quote */
    if (end < r->n && end - start <= 2 && (r->s[end] == '\'' || r->s[end] == '"')) {
        bool prefix = true;
        for (size_t j = start; j < end; j++) prefix = prefix && strchr("rRuUbB", r->s[j]);
        return prefix ? read_string(r) : NULL;
    }
    if (word_is(r, start, end, "True") || word_is(r, start, end, "true"))
        v = cJSON_CreateTrue();
    else if (word_is(r, start, end, "False") || word_is(r, start, end, "false"))
        v = cJSON_CreateFalse();
    else if (word_is(r, start, end, "None") || word_is(r, start, end, "null"))
        v = cJSON_CreateNull();
    else
        return NULL;
    if (!v) r->oom = true;
    r->i = end;
    return v;
}

/* A function or keyword name: an identifier, with '.' and '-' allowed inside (tool names
 * such as "functions.get_weather" or "get-weather"). */
static bool read_name(py_reader *r, size_t *start, size_t *len) {
    skip_space(r);
    size_t i = r->i;
    if (i >= r->n || !is_ident_start(r->s[i])) return false;
    while (i < r->n && (is_ident_char(r->s[i]) || r->s[i] == '.' || r->s[i] == '-')) i++;
    *start = r->i;
    *len = i - r->i;
    r->i = i;
    return true;
}

/* name(kw=value, ...): adds the call. */
static bool read_call(py_reader *r, chat_builder *b) {
    size_t name, name_len;
    if (!read_name(r, &name, &name_len) || !eat(r, '(')) return false;
    cJSON *args = cJSON_CreateObject();
    if (!args) {
        r->oom = true;
        return false;
    }
    bool comma = false, ok = false;
    for (int n = 0;; n++) {
        if (eat(r, ')')) {
            ok = true;
            break;
        }
        if (n > 0 && !comma) break;
        size_t key, key_len;
        if (!read_name(r, &key, &key_len) || !eat(r, '=')) break;
        cJSON *v = read_value(r);
        if (!v) break;
        char k[256];
        if (key_len >= sizeof k) {
            cJSON_Delete(v);
            break;
        }
        memcpy(k, r->s + key, key_len);
        k[key_len] = 0;
        /* Python refuses a repeated keyword argument */
        if (cJSON_GetObjectItemCaseSensitive(args, k)) {
            cJSON_Delete(v);
            break;
        }
        if (!cJSON_AddItemToObject(args, k, v)) {
            cJSON_Delete(v);
            r->oom = true;
            break;
        }
        comma = eat(r, ',');
    }
    ok = ok && chat_add_call(b, r->s + name, name_len, NULL, 0, args);
    cJSON_Delete(args);
    return ok;
}

bool chat_add_python_calls(chat_builder *b, const char *s, size_t n) {
    py_reader r = {.s = s, .n = n};
    int mark = b->n_calls;
    bool list = eat(&r, '['), ok = true, comma = true;
    for (int k = 0; ok; k++) {
        if (list && eat(&r, ']')) {
            ok = k > 0;
            break;
        }
        skip_space(&r);
        if (!list && r.i == n) {
            ok = k > 0;
            break;
        }
        ok = comma && read_call(&r, b);
        comma = eat(&r, ',');
    }
    if (ok) ok = chat_skip_space(s, n, r.i) == n;
    if (r.oom) b->oom = true;
    if (!ok) chat_drop_calls(b, mark);
    return ok;
}

/*
 * lexer.c — template text to tokens, with Jinja2's whitespace control.
 *
 * As Jinja2's lexer in the environment transformers uses (trim_blocks, lstrip_blocks):
 *  - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`, `-}}`, `-#}` all after;
 *  - trim_blocks: the first newline after `%}` or `#}` is removed (`+%}` keeps it);
 *  - lstrip_blocks: spaces and tabs from the start of a line up to `{%` or `{#` are removed
 *    (`{%+` keeps them); "start of a line" includes text right after a tag that ended
 *    with a newline;
 *  - `{% raw %}...{% endraw %}` is text.
 * Inside a tag, the closing `%}`/`}}` is only recognised outside brackets, as in Jinja2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template/lexer.h"

typedef struct lexer {
    tarena *a;
    const char *s;
    size_t n, pos;
    ttokens *out;
    cera_error *err;
    size_t at_off; /* tokens come in source order: line/col are counted on from here */
    int at_line, at_col;
} lexer;

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

void tlex_position(const ttokens *t, size_t off, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; i < off && i < t->src_len; i++) {
        if (t->src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)t->src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static cera_status lex_fail(lexer *L, size_t off, const char *msg) {
    int line, col;
    tlex_position(L->out, off, &line, &col);
    return cera_fail(L->err, CERA_ERR_FORMAT, "line %d, column %d: %s", line, col, msg);
}

static bool emit(lexer *L, ttok_kind k, const char *p, size_t n, size_t off) {
    ttokens *t = L->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        ttok *v = tarena_alloc(L->a, cap * sizeof(ttok));
        if (!v) return false;
        if (t->n) memcpy(v, t->v, t->n * sizeof(ttok));
        t->v = v;
        t->cap = cap;
    }
    for (; L->at_off < off && L->at_off < L->n; L->at_off++) {
        if (L->s[L->at_off] == '\n') {
            L->at_line++;
            L->at_col = 1;
        } else if (((unsigned char)L->s[L->at_off] & 0xC0) != 0x80) {
            L->at_col++;
        }
    }
    t->v[t->n++] = (ttok){.k = k, .p = p, .n = n, .off = off, .line = L->at_line, .col = L->at_col};
    return true;
}

/* Emits the text before a tag after the tag's stripping: sign is the tag's '-', '+' or 0;
 * lstrip applies to block and comment tags. */
static bool emit_text(lexer *L, size_t start, size_t end, char sign, bool lstrip, bool line_starting) {
    const char *s = L->s;
    if (sign == '-') {
        while (end > start && is_ws(s[end - 1])) end--;
    } else if (sign != '+' && lstrip) {
        size_t l = end;
        while (l > start && s[l - 1] != '\n') l--;
        if (l > start || line_starting) {
            bool all_ws = end > l;
            for (size_t i = l; i < end; i++)
                if (!is_ws(s[i])) all_ws = false;
            if (all_ws) end = l;
        }
    }
    if (end == start) return true;
    return emit(L, T_TEXT, s + start, end - start, start);
}

static bool at(const lexer *L, size_t pos, const char *lit) {
    size_t k = strlen(lit);
    return pos + k <= L->n && !memcmp(L->s + pos, lit, k);
}

/* After a block tag's `%}` at pos (the `-` or `+` form handled by the caller). */
static size_t skip_ws(const lexer *L, size_t pos) {
    while (pos < L->n && is_ws(L->s[pos])) pos++;
    return pos;
}

/* Matches `[-+]? ws* word ws* (-%}ws* | +%} | %}\n?)` at pos (just after "{%"): the end
 * position, or 0. *sign gets the opening sign; trim says whether %} eats a newline. */
static size_t match_word_tag(const lexer *L, size_t pos, const char *word, char *sign, bool trim) {
    *sign = 0;
    if (pos < L->n && (L->s[pos] == '-' || L->s[pos] == '+')) *sign = L->s[pos++];
    pos = skip_ws(L, pos);
    if (!at(L, pos, word)) return 0;
    pos += strlen(word);
    if (pos < L->n && is_name_char(L->s[pos])) return 0;
    pos = skip_ws(L, pos);
    if (at(L, pos, "-%}")) return skip_ws(L, pos + 3);
    if (trim && at(L, pos, "+%}")) return pos + 3;
    if (at(L, pos, "%}")) {
        pos += 2;
        if (trim && pos < L->n && L->s[pos] == '\n') pos++;
        return pos;
    }
    return 0;
}

static int hexdig(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string literal at L->pos (the quote): Python's escapes decoded. */
static cera_status lex_string(lexer *L) {
    size_t start = L->pos;
    char q = L->s[L->pos++];
    size_t end = L->pos;
    while (end < L->n && L->s[end] != q) end += L->s[end] == '\\' ? 2 : 1;
    if (end >= L->n) return lex_fail(L, start, "unterminated string literal");
    char *o = tarena_alloc(L->a, end - L->pos + 1), *w = o;
    if (!o) return cera_fail(L->err, CERA_ERR_NO_MEMORY, "out of memory");
    for (size_t i = L->pos; i < end; i++) {
        char c = L->s[i];
        if (c != '\\') {
            *w++ = c;
            continue;
        }
        char e = L->s[++i];
        int digits = 0;
        switch (e) {
        case 'n': *w++ = '\n'; break;
        case 't': *w++ = '\t'; break;
        case 'r': *w++ = '\r'; break;
        case 'a': *w++ = '\a'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'v': *w++ = '\v'; break;
        case '\\': *w++ = '\\'; break;
        case '\'': *w++ = '\''; break;
        case '"': *w++ = '"'; break;
        case '\n': break; /* a continued line */
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t v = 0;
                int k = 0;
                while (k < 3 && i < end && L->s[i] >= '0' && L->s[i] <= '7')
                    v = v * 8 + (uint32_t)(L->s[i++] - '0'), k++;
                i--;
                w += put_utf8(w, v);
            } else {
                *w++ = '\\';
                *w++ = e;
            }
        }
        if (digits) {
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int h = i + 1 + (size_t)k < end ? hexdig(L->s[i + 1 + (size_t)k]) : -1;
                if (h < 0) return lex_fail(L, i, "truncated \\x, \\u or \\U escape in a string");
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF) return lex_fail(L, i, "illegal Unicode escape in a string");
            i += (size_t)digits;
            w += put_utf8(w, v); /* at most 4 bytes for at least 4 source bytes (\xHH: 2 for 4) */
        }
    }
    L->pos = end + 1;
    if (!emit(L, T_STRING, o, (size_t)(w - o), start))
        return cera_fail(L->err, CERA_ERR_NO_MEMORY, "out of memory");
    return CERA_OK;
}

static cera_status lex_number(lexer *L) {
    size_t start = L->pos, p = L->pos;
    const char *s = L->s;
    char buf[64];
    size_t k = 0;
    bool is_float = false;
    int base = 10;
    if (s[p] == '0' && p + 1 < L->n && strchr("xXoObB", s[p + 1]) && s[p + 1]) {
        base = s[p + 1] == 'x' || s[p + 1] == 'X' ? 16 : s[p + 1] == 'o' || s[p + 1] == 'O' ? 8 : 2;
        p += 2;
        while (p < L->n && (hexdig(s[p]) >= 0 || s[p] == '_') && (s[p] == '_' || hexdig(s[p]) < base)) {
            if (s[p] != '_' && k < sizeof buf - 1) buf[k++] = s[p];
            p++;
        }
    } else {
        while (p < L->n && (is_digit(s[p]) || s[p] == '_')) {
            if (s[p] != '_' && k < sizeof buf - 1) buf[k++] = s[p];
            p++;
        }
        bool after_dot = start > 0 && s[start - 1] == '.';
        if (!after_dot && p + 1 < L->n && s[p] == '.' && is_digit(s[p + 1])) {
            is_float = true;
            if (k < sizeof buf - 1) buf[k++] = '.';
            p++;
            while (p < L->n && (is_digit(s[p]) || s[p] == '_')) {
                if (s[p] != '_' && k < sizeof buf - 1) buf[k++] = s[p];
                p++;
            }
        }
        if (!after_dot && p < L->n && (s[p] == 'e' || s[p] == 'E')) {
            size_t q = p + 1;
            if (q < L->n && (s[q] == '+' || s[q] == '-')) q++;
            if (q < L->n && is_digit(s[q])) {
                is_float = true;
                if (k < sizeof buf - 1) buf[k++] = 'e';
                p++;
                while (p < L->n && (is_digit(s[p]) || s[p] == '_' || s[p] == '+' || s[p] == '-')) {
                    if (s[p] != '_' && k < sizeof buf - 1) buf[k++] = s[p];
                    p++;
                    if (p < L->n && (s[p] == '+' || s[p] == '-')) break;
                }
            }
        }
    }
    buf[k] = 0;
    L->pos = p;
    if (!emit(L, is_float ? T_FLOAT : T_INT, s + start, p - start, start))
        return cera_fail(L->err, CERA_ERR_NO_MEMORY, "out of memory");
    ttok *t = &L->out->v[L->out->n - 1];
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        if (k == 0 || k >= sizeof buf - 1) return lex_fail(L, start, "bad or too long integer literal");
        char *end;
        unsigned long long v = strtoull(buf, &end, base);
        if (v > INT64_MAX) return lex_fail(L, start, "integer literal out of range");
        t->i = (int64_t)v;
    }
    return CERA_OK;
}

static const char *const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                  "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};

/* The inside of a {{ }} or {% %} tag, from L->pos to its end. */
static cera_status lex_tag(lexer *L, bool block, size_t tag_off) {
    int depth = 0;
    for (;;) {
        L->pos = skip_ws(L, L->pos);
        if (L->pos >= L->n)
            return lex_fail(L, tag_off,
                            block ? "missing end of block tag '%}'" : "missing end of variable tag '}}'");
        size_t p = L->pos;
        if (depth == 0) {
            const char *close = block ? "%}" : "}}";
            if (L->s[p] == '-' && at(L, p + 1, close)) {
                if (!emit(L, block ? T_BLOCK_END : T_VAR_END, NULL, 0, p)) goto oom;
                L->pos = skip_ws(L, p + 3);
                return CERA_OK;
            }
            if (block && L->s[p] == '+' && at(L, p + 1, close)) {
                if (!emit(L, T_BLOCK_END, NULL, 0, p)) goto oom;
                L->pos = p + 3;
                return CERA_OK;
            }
            if (at(L, p, close)) {
                if (!emit(L, block ? T_BLOCK_END : T_VAR_END, NULL, 0, p)) goto oom;
                L->pos = p + 2;
                if (block && L->pos < L->n && L->s[L->pos] == '\n') L->pos++;
                return CERA_OK;
            }
        }
        char c = L->s[p];
        cera_status st = CERA_OK;
        if (is_name_start(c)) {
            size_t e = p;
            while (e < L->n && is_name_char(L->s[e])) e++;
            if (!emit(L, T_NAME, L->s + p, e - p, p)) goto oom;
            L->pos = e;
        } else if (is_digit(c)) {
            st = lex_number(L);
        } else if (c == '\'' || c == '"') {
            st = lex_string(L);
        } else {
            size_t k = 0;
            for (; k < sizeof ops / sizeof ops[0]; k++)
                if (at(L, p, ops[k])) break;
            if (k == sizeof ops / sizeof ops[0]) return lex_fail(L, p, "unexpected character in a tag");
            size_t len = strlen(ops[k]);
            if (c == '(' || c == '[' || c == '{') depth++;
            if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
            if (!emit(L, T_OP, L->s + p, len, p)) goto oom;
            L->pos = p + len;
        }
        if (st != CERA_OK) return st;
    }
oom:
    return cera_fail(L->err, CERA_ERR_NO_MEMORY, "out of memory");
}

/* str.splitlines() + "\n".join(): every line break becomes \n and one trailing one goes. */
static char *normalize(tarena *a, const char *s, size_t n, size_t *out_n) {
    char *o = tarena_alloc(a, n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r') {
            if (i + 1 < n && s[i + 1] == '\n') i++;
            o[k++] = '\n';
        } else if (c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e) {
            o[k++] = '\n';
        } else if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85) {
            o[k++] = '\n';
            i++;
        } else if (c == 0xE2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
                   ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9)) {
            o[k++] = '\n';
            i += 2;
        } else {
            o[k++] = (char)c;
        }
    }
    if (k && o[k - 1] == '\n') k--;
    o[k] = 0;
    *out_n = k;
    return o;
}

cera_status tlex(tarena *a, const char *text, size_t len, ttokens *out, cera_error *err) {
    *out = (ttokens){0};
    out->src = normalize(a, text, len, &out->src_len);
    if (!out->src) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    lexer L = {a, out->src, out->src_len, 0, out, err, 0, 1, 1};
    bool line_starting = true;
    while (L.pos < L.n) {
        /* the next tag */
        size_t s = L.pos;
        while (s + 1 < L.n &&
               !(L.s[s] == '{' && (L.s[s + 1] == '{' || L.s[s + 1] == '%' || L.s[s + 1] == '#')))
            s++;
        if (s + 1 >= L.n) {
            if (!emit(&L, T_TEXT, L.s + L.pos, L.n - L.pos, L.pos)) goto oom;
            break;
        }
        char kind = L.s[s + 1];
        char sign = s + 2 < L.n && (L.s[s + 2] == '-' || L.s[s + 2] == '+') ? L.s[s + 2] : 0;
        char raw_sign;
        size_t raw_end = kind == '%' ? match_word_tag(&L, s + 2, "raw", &raw_sign, false) : 0;
        if (!emit_text(&L, L.pos, s, sign, kind != '{', line_starting)) goto oom;
        size_t p = s + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t i = p;
            for (; i + 1 < L.n; i++)
                if (L.s[i] == '#' && L.s[i + 1] == '}') break;
            if (i + 1 >= L.n) return lex_fail(&L, s, "missing end of comment tag");
            if (i > p && L.s[i - 1] == '-')
                L.pos = skip_ws(&L, i + 2);
            else if (i > p && L.s[i - 1] == '+')
                L.pos = i + 2;
            else
                L.pos = i + 2 + (i + 2 < L.n && L.s[i + 2] == '\n');
        } else if (raw_end) {
            /* the body up to {% endraw %}, stripped by the endraw tag's sign */
            size_t i = raw_end, end = 0;
            char end_sign = 0;
            line_starting = L.s[raw_end - 1] == '\n';
            for (; i + 1 < L.n; i++)
                if (L.s[i] == '{' && L.s[i + 1] == '%' &&
                    (end = match_word_tag(&L, i + 2, "endraw", &end_sign, true)))
                    break;
            if (!end) return lex_fail(&L, s, "missing {% endraw %}");
            if (!emit_text(&L, raw_end, i, end_sign, true, line_starting)) goto oom;
            L.pos = end;
        } else {
            if (!emit(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, NULL, 0, s)) goto oom;
            L.pos = p;
            cera_status st = lex_tag(&L, kind == '%', s);
            if (st != CERA_OK) return st;
        }
        line_starting = L.pos > 0 && L.s[L.pos - 1] == '\n';
    }
    if (!emit(&L, T_EOF, NULL, 0, L.n)) goto oom;
    return CERA_OK;
oom:
    return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
}

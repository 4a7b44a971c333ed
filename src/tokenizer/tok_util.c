/*
 * tok_util.c — small pieces the tokenizer models share: the token and merge hash
 * tables, UTF-8 decoding with llama.cpp's tolerance of bad input, the GPT-2 byte-level
 * alphabet, and Unicode classes (categories, lowercase, first code point of the
 * canonical decomposition) taken from utf8proc rather than from copied tables.
 */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer/tok_internal.h"

/* ---- Hashing ------------------------------------------------------------------ */

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return x;
}

uint64_t tok_hash_bytes(const void *data, size_t len) {
    const uint8_t *p = data;
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (len * 0xff51afd7ed558ccdull);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
        p += 8;
        len -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, len); /* the tail, little-endian zero-padded */
    return mix64(h ^ w ^ ((uint64_t)len << 59));
}

cera_token tok_lookup(const cera_tokenizer *t, const char *s, size_t n) {
    const tok_vocab_map *m = &t->map;
    uint64_t i = tok_hash_bytes(s, n) & m->mask;
    for (;;) {
        uint32_t v = m->slots[i];
        if (!v) return TOK_NULL;
        cera_token id = (cera_token)(v - 1);
        if (t->text_len[id] == n && memcmp(tok_text(t, id), s, n) == 0) return id;
        i = (i + 1) & m->mask;
    }
}

uint64_t tok_merge_slot(const tok_merge_map *m, const char *s, size_t left_len, size_t n) {
    uint64_t i = (tok_hash_bytes(s, n) ^ mix64(left_len)) & m->mask;
    for (;;) {
        uint32_t v = m->slots[i];
        if (!v) return i;
        const tok_merge *e = &m->entries[v - 1];
        if (e->len == n && e->left_len == left_len && memcmp(m->arena + e->off, s, n) == 0) return i;
        i = (i + 1) & m->mask;
    }
}

int32_t tok_merge_rank(const cera_tokenizer *t, const char *s, size_t left_len, size_t n) {
    const tok_merge_map *m = &t->merges;
    if (!m->slots) return -1;
    uint32_t v = m->slots[tok_merge_slot(m, s, left_len, n)];
    return v ? m->entries[v - 1].rank : -1;
}

/* ---- UTF-8 --------------------------------------------------------------------- */

bool tok_utf8_decode(const uint8_t *s, size_t n, size_t *pos, uint32_t *cpt) {
    size_t i = *pos;
    uint8_t c = s[i];
    if (!(c & 0x80)) {
        *cpt = c;
        *pos = i + 1;
        return true;
    }
    if (!(c & 0x40)) return false;
    if (!(c & 0x20)) {
        if (i + 1 >= n || (s[i + 1] & 0xc0) != 0x80) return false;
        *cpt = ((uint32_t)(c & 0x1f) << 6) | (s[i + 1] & 0x3f);
        *pos = i + 2;
        return true;
    }
    if (!(c & 0x10)) {
        if (i + 2 >= n || (s[i + 1] & 0xc0) != 0x80 || (s[i + 2] & 0xc0) != 0x80) return false;
        *cpt = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[i + 1] & 0x3f) << 6) | (s[i + 2] & 0x3f);
        *pos = i + 3;
        return true;
    }
    if (!(c & 0x08)) {
        if (i + 3 >= n || (s[i + 1] & 0xc0) != 0x80 || (s[i + 2] & 0xc0) != 0x80 || (s[i + 3] & 0xc0) != 0x80)
            return false;
        *cpt = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3f) << 12) |
               ((uint32_t)(s[i + 2] & 0x3f) << 6) | (s[i + 3] & 0x3f);
        *pos = i + 4;
        return true;
    }
    return false;
}

int tok_utf8_encode(uint32_t cpt, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cpt <= 0x7f) {
        o[0] = (uint8_t)cpt;
        return 1;
    }
    if (cpt <= 0x7ff) {
        o[0] = (uint8_t)(0xc0 | (cpt >> 6));
        o[1] = (uint8_t)(0x80 | (cpt & 0x3f));
        return 2;
    }
    if (cpt <= 0xffff) {
        o[0] = (uint8_t)(0xe0 | (cpt >> 12));
        o[1] = (uint8_t)(0x80 | ((cpt >> 6) & 0x3f));
        o[2] = (uint8_t)(0x80 | (cpt & 0x3f));
        return 3;
    }
    if (cpt <= 0x10ffff) {
        o[0] = (uint8_t)(0xf0 | (cpt >> 18));
        o[1] = (uint8_t)(0x80 | ((cpt >> 12) & 0x3f));
        o[2] = (uint8_t)(0x80 | ((cpt >> 6) & 0x3f));
        o[3] = (uint8_t)(0x80 | (cpt & 0x3f));
        return 4;
    }
    return 0;
}

/* ---- GPT-2 byte-level alphabet --------------------------------------------------- */

/* Printable bytes stand for themselves; the others (controls, space, DEL, NBSP, soft
 * hyphen, ...) are shifted to U+0100 upwards, in byte order. */
static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
}

uint32_t tok_byte_to_cpt(uint8_t b) {
    if (byte_is_printable(b)) return b;
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++) n += !byte_is_printable(c);
    return 256 + n;
}

/* ---- Unicode classes -------------------------------------------------------------- */

/* The White_Space property (a property list of 25 code points, not a category). */
bool tok_cpt_is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

unsigned tok_cpt_flags(uint32_t cpt) {
    unsigned f = tok_cpt_is_whitespace(cpt) ? TOK_CPT_WHITESPACE : 0;
    if (cpt > 0x10ffff) return f;
    switch (utf8proc_category((utf8proc_int32_t)cpt)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return f | TOK_CPT_LETTER;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: return f | TOK_CPT_MARK;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return f | TOK_CPT_NUMBER;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO: return f | TOK_CPT_PUNCT;
    case UTF8PROC_CATEGORY_SM:
    case UTF8PROC_CATEGORY_SC:
    case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO: return f | TOK_CPT_SYMBOL;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return f | TOK_CPT_SEPARATOR;
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: return f | TOK_CPT_CONTROL;
    default: return f; /* Cn: unassigned */
    }
}

uint32_t tok_cpt_tolower(uint32_t cpt) {
    if (cpt > 0x10ffff) return cpt;
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)cpt);
}

uint32_t tok_cpt_collapse(uint32_t cpt) {
    if (cpt < 0x80) return cpt;
    unsigned f = tok_cpt_flags(cpt);
    if (f & TOK_CPT_WHITESPACE) return cpt;
    /* [class][UTF-8 length - 2]: code points whose class no Unicode version changes */
    static const uint32_t rep[6][3] = {
        {0x00e0, 0x4e00, 0x20000},  /* letter: a-grave, CJK one, CJK Ext B */
        {0x00b2, 0x2460, 0x10107},  /* number: superscript two, circled one, Aegean one */
        {0x00a1, 0x2010, 0x10100},  /* punctuation: inverted !, hyphen, Aegean word separator */
        {0x00a2, 0x2190, 0x1d100},  /* symbol: cent, left arrow, musical single barline */
        {0x0300, 0x20d0, 0x1d165},  /* mark: grave, combining harpoon, musical stem */
        {0x0080, 0xe000, 0xf0000}}; /* other: a C1 control, private use */
    int cls = f & TOK_CPT_LETTER   ? 0
              : f & TOK_CPT_NUMBER ? 1
              : f & TOK_CPT_PUNCT  ? 2
              : f & TOK_CPT_SYMBOL ? 3
              : f & TOK_CPT_MARK   ? 4
                                   : 5;
    int len = cpt < 0x800 ? 0 : cpt < 0x10000 ? 1 : 2;
    return rep[cls][len];
}

uint32_t tok_cpt_collapse_han(uint32_t c) {
    /* the CJK unified ideographs, extensions A-F and the compatibility ideographs: the
     * ranges of llama.cpp's unicode_cpt_is_han */
    bool han = (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
               (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2ebef) ||
               (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
    uint32_t r = tok_cpt_collapse(c);
    /* Han letters stay letters; unassigned Han code points are Han but no letter */
    if (han) return r == 0x4e00 || r == 0x20000 ? r : c < 0x10000 ? 0xe001 : 0xf0001;
    return r == 0x4e00 ? 0x0800 : r == 0x20000 ? 0x10000 : r; /* Samaritan alaf, Linear B syllable */
}

uint32_t tok_cpt_nfd_first(uint32_t cpt) {
    if (cpt > 0x10ffff || (cpt >= 0xd800 && cpt <= 0xdfff) || cpt < 0xc0) return cpt;
    utf8proc_int32_t buf[32];
    int last = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)cpt, buf, 32, UTF8PROC_DECOMPOSE, &last);
    return n > 0 ? (uint32_t)buf[0] : cpt;
}

/* ---- Scratch ------------------------------------------------------------------------ */

bool tok_reserve(void **p, size_t *cap, size_t n, size_t elem) {
    if (n <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < n) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

/* ---- Bigram heap ---------------------------------------------------------------------- */

static inline bool bigram_before(const tok_bigram *a, const tok_bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

bool tok_heap_push(tok_scratch *s, size_t *n, tok_bigram b) {
    if (!tok_reserve(&s->heap, &s->heap_cap, *n + 1, sizeof(tok_bigram))) return false;
    tok_bigram *h = s->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = b;
    return true;
}

tok_bigram tok_heap_pop(tok_scratch *s, size_t *n) {
    tok_bigram *h = s->heap;
    tok_bigram top = h[0], last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && bigram_before(&h[c + 1], &h[c])) c++;
        if (!bigram_before(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = last;
    return top;
}

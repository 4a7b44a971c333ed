/*
 * tok_decode.c — token ids -> text: each token's piece (precomputed at load, as
 * llama.cpp's token_to_piece cache), whole sequences (llama_detokenize, with its
 * leading-space and clean-up rules) and the streaming detokenizer that never emits half
 * a UTF-8 character. Also the tokenizer's small queries.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* ---- Pieces ------------------------------------------------------------------------ */

static uint8_t byte_token_value(const char *text, size_t len) {
    /* "<0xNN>": strtol over the two characters at offset 3 (stops at a non-hex digit) */
    unsigned v = 0;
    for (size_t i = 3; i < 5 && i < len; i++) {
        char c = text[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) break;
        v = v * 16 + (unsigned)d;
    }
    return (uint8_t)v;
}

/* Writes the piece of id to out (when non-NULL) and returns its length: llama.cpp's
 * token_to_piece with special = true. */
static size_t render_piece(const cera_tokenizer *t, cera_token id, char *out) {
    const char *s = tok_text(t, id);
    size_t n = t->text_len[id], o = 0;
    uint32_t attr = t->attr[id];
    if (attr & (CERA_TOKEN_ATTR_UNKNOWN | CERA_TOKEN_ATTR_CONTROL | CERA_TOKEN_ATTR_USER_DEFINED)) {
        if (out) memcpy(out, s, n);
        return n;
    }
    if (attr & CERA_TOKEN_ATTR_NORMAL) {
        if (t->type != CERA_VOCAB_BPE || t->escape_whitespaces) {
            /* U+2581 -> ' ' */
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    if (out) out[o] = ' ';
                    o++, i += 3;
                } else {
                    if (out) out[o] = s[i];
                    o++, i++;
                }
            }
            return o;
        }
        /* byte-level characters -> bytes; a character outside the alphabet is written as
         * llama.cpp does: "[UNK_BYTE_0x<hex of its UTF-8>" + the whole token text + "]" */
        for (size_t pos = 0; pos < n;) {
            uint32_t c;
            if (!tok_utf8_decode((const uint8_t *)s, n, &pos, &c)) c = 0xfffd, pos++;
            if (c < 512 && t->byte_of_cpt[c] >= 0) {
                if (out) out[o] = (char)t->byte_of_cpt[c];
                o++;
                continue;
            }
            char u[4];
            int k = tok_utf8_encode(c > 0x10ffff ? 0xfffd : c, u);
            static const char hex[] = "0123456789abcdef";
            if (out) memcpy(out + o, "[UNK_BYTE_0x", 12);
            o += 12;
            for (int j = 0; j < k; j++) {
                if (out) out[o] = hex[(uint8_t)u[j] >> 4], out[o + 1] = hex[(uint8_t)u[j] & 15];
                o += 2;
            }
            if (out) memcpy(out + o, s, n), out[o + n] = ']';
            o += n + 1;
        }
        return o;
    }
    if (attr & CERA_TOKEN_ATTR_BYTE) {
        if (out) out[0] = (char)byte_token_value(s, n);
        return 1;
    }
    return 0; /* undefined / unused-only tokens render as nothing */
}

cera_status tok_build_pieces(cera_tokenizer *t, cera_error *err) {
    size_t n = (size_t)t->n_vocab, total = 0;
    t->piece_off = malloc(n * sizeof(uint32_t));
    t->piece_len = malloc(n * sizeof(uint32_t));
    if (!t->piece_off || !t->piece_len) return cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t k = render_piece(t, (cera_token)i, NULL);
        if (total + k > UINT32_MAX)
            return cera_fail(err, CERA_ERR_FORMAT, "tokenizer: token pieces too large");
        t->piece_off[i] = (uint32_t)total;
        t->piece_len[i] = (uint32_t)k;
        total += k;
        if (k > t->max_piece_len) t->max_piece_len = k;
    }
    t->piece_arena = malloc(total + 1);
    if (!t->piece_arena) return cera_fail(err, CERA_ERR_NO_MEMORY, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) render_piece(t, (cera_token)i, t->piece_arena + t->piece_off[i]);
    return CERA_OK;
}

static bool valid_id(const cera_tokenizer *t, cera_token id) { return t && id >= 0 && id < t->n_vocab; }

/* The piece as llama.cpp's token_to_piece(token, lstrip, special): *p and its length. */
static size_t piece_of(const cera_tokenizer *t, cera_token id, bool render_special, bool lstrip,
                       const char **p) {
    *p = t->piece_arena + t->piece_off[id];
    size_t n = t->piece_len[id];
    if (!render_special && (t->attr[id] & (CERA_TOKEN_ATTR_UNKNOWN | CERA_TOKEN_ATTR_CONTROL))) return 0;
    if (lstrip && n && **p == ' ') (*p)++, n--;
    return n;
}

int cera_tokenizer_piece(const cera_tokenizer *t, cera_token id, char *buf, size_t cap, bool render_special) {
    if (!valid_id(t, id)) return -1;
    const char *p;
    size_t n = piece_of(t, id, render_special, false, &p);
    if (n <= cap && n) memcpy(buf, p, n);
    return (int)n;
}

size_t cera_tokenizer_max_piece_len(const cera_tokenizer *t) { return t->max_piece_len; }

int64_t cera_tokenizer_decode(const cera_tokenizer *t, const cera_token *tokens, size_t n, char *buf,
                              size_t cap, bool remove_special, bool render_special) {
    if (!t || (!tokens && n) || (!buf && cap)) return -1;
    for (size_t i = 0; i < n; i++)
        if (!valid_id(t, tokens[i])) return -1;

    bool remove_space = t->add_space_prefix;
    if (remove_special && t->add_bos && n > 0 && tokens[0] == t->bos) {
        remove_space = false;
        tokens++, n--;
    }
    if (remove_special && t->add_eos && n > 0 && tokens[n - 1] == t->eos) n--;

    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t k = piece_of(t, tokens[i], render_special, remove_space, &p);
        remove_space = false;
        if (total + k <= cap) memcpy(buf + total, p, k);
        total += k;
    }
    if (total > cap) return (int64_t)total; /* an upper bound: clean-up only shortens */

    if (t->clean_spaces && total > 0) {
        char *s = buf;
        /* " ?", " !", " .", " ," lose their space */
        size_t n1 = total, o = 1;
        for (size_t i = 1; i < n1; i++) {
            char x = s[i];
            if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) o--;
            s[o++] = x;
        }
        /* " ' " -> "'" */
        size_t n2 = o;
        o = 1;
        for (size_t i = 1; i < n2; i++) {
            char x = s[i];
            if (x == '\'' && i + 1 < n2 && s[i - 1] == ' ' && s[i + 1] == ' ') {
                o--;
                s[++i] = '\0';
            }
            s[o++] = x;
        }
        /* " 's", " 'm", " 're", " 've" lose their space */
        size_t n3 = o;
        o = 1;
        for (size_t i = 1; i < n3; i++) {
            char x = s[i];
            if (s[i - 1] == ' ' && x == '\'' && i + 1 < n3) {
                char x1 = s[i + 1];
                if (x1 == 's' || x1 == 'm')
                    o--;
                else if (i + 2 < n3 && ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e')))
                    o--;
            }
            s[o++] = x;
        }
        total = o;
    }
    return (int64_t)total;
}

/* ---- Streaming detokenizer ------------------------------------------------------------ */

void cera_detok_init(cera_detok *d, const cera_tokenizer *tok, bool render_special) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->render_special = render_special;
}

/* How many bytes at the end of s[0, n) are the start of a UTF-8 character still waiting
 * for its continuation bytes (0 when the text ends on a boundary or on invalid bytes). */
static size_t incomplete_tail(const uint8_t *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t c = s[n - back];
        if ((c & 0xc0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = c >= 0xc2 && c <= 0xdf   ? 2
                      : c >= 0xe0 && c <= 0xef ? 3
                      : c >= 0xf0 && c <= 0xf4 ? 4
                                               : 0;
        if (need <= back) return 0; /* ASCII, invalid lead or a complete character */
        /* the second byte's range for E0/ED/F0/F4 decides whether it can still complete */
        if (back >= 2) {
            uint8_t c1 = s[n - back + 1];
            if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) ||
                (c == 0xf4 && c1 > 0x8f))
                return 0;
        }
        return back;
    }
    return 0;
}

int cera_detok_push(cera_detok *d, cera_token token, char *out, size_t cap) {
    if (!valid_id(d->tok, token)) return -1;
    const char *p;
    size_t n = piece_of(d->tok, token, d->render_special, false, &p);
    size_t np = (size_t)d->n_pending;
    if (np + n > cap) return -2;
    memcpy(out, d->pending, np);
    if (n) memcpy(out + np, p, n);
    size_t total = np + n;
    size_t hold = incomplete_tail((const uint8_t *)out, total);
    memcpy(d->pending, out + total - hold, hold);
    d->n_pending = (int)hold;
    return (int)(total - hold);
}

int cera_detok_flush(cera_detok *d, char *out, size_t cap) {
    size_t np = (size_t)d->n_pending;
    if (np > cap) return -2;
    memcpy(out, d->pending, np);
    d->n_pending = 0;
    return (int)np;
}

/* ---- Queries -------------------------------------------------------------------------- */

cera_vocab_type cera_tokenizer_type(const cera_tokenizer *t) { return t->type; }
const char *cera_tokenizer_model_name(const cera_tokenizer *t) { return t->model; }
const char *cera_tokenizer_pre_name(const cera_tokenizer *t) { return t->pre; }
int cera_tokenizer_n_vocab(const cera_tokenizer *t) { return t->n_vocab; }
cera_token cera_tokenizer_bos(const cera_tokenizer *t) { return t->bos; }
cera_token cera_tokenizer_eos(const cera_tokenizer *t) { return t->eos; }
cera_token cera_tokenizer_eot(const cera_tokenizer *t) { return t->eot; }
cera_token cera_tokenizer_eom(const cera_tokenizer *t) { return t->eom; }
cera_token cera_tokenizer_unk(const cera_tokenizer *t) { return t->unk; }
cera_token cera_tokenizer_pad(const cera_tokenizer *t) { return t->pad; }
cera_token cera_tokenizer_sep(const cera_tokenizer *t) { return t->sep; }
cera_token cera_tokenizer_nl(const cera_tokenizer *t) { return t->nl; }
bool cera_tokenizer_add_bos(const cera_tokenizer *t) {
    return t->type == CERA_VOCAB_WPM ? t->bos != TOK_NULL : t->add_bos && t->bos != TOK_NULL;
}
bool cera_tokenizer_add_eos(const cera_tokenizer *t) {
    return t->type != CERA_VOCAB_WPM && t->add_eos && t->eos != TOK_NULL;
}
bool cera_tokenizer_is_eog(const cera_tokenizer *t, cera_token id) { return valid_id(t, id) && t->eog[id]; }
bool cera_tokenizer_is_control(const cera_tokenizer *t, cera_token id) {
    return valid_id(t, id) && (t->attr[id] & CERA_TOKEN_ATTR_CONTROL);
}

const char *cera_tokenizer_text(const cera_tokenizer *t, cera_token id, size_t *len) {
    if (!valid_id(t, id)) return NULL;
    if (len) *len = t->text_len[id];
    return tok_text(t, id);
}

float cera_tokenizer_score(const cera_tokenizer *t, cera_token id) {
    return valid_id(t, id) ? t->score[id] : 0.0f;
}
uint32_t cera_tokenizer_attr(const cera_tokenizer *t, cera_token id) {
    return valid_id(t, id) ? t->attr[id] : 0;
}
cera_token cera_tokenizer_find(const cera_tokenizer *t, const char *text, size_t len) {
    return text ? tok_lookup(t, text, len) : TOK_NULL;
}

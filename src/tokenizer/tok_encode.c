/*
 * tok_encode.c — text -> token ids: special-token partitioning, BOS/EOS and the
 * dispatch to SentencePiece, BPE and WordPiece (llama.cpp's llama_vocab::tokenize).
 *
 * Before any model runs, the text is cut at occurrences of special tokens, longest
 * token text first: with parse_special, every CONTROL / USER_DEFINED / UNKNOWN token;
 * without it, USER_DEFINED tokens only (they are always pre-tokenized, as in Hugging
 * Face tokenizers). A token with the LSTRIP / RSTRIP attribute eats the whitespace on
 * that side. What remains are raw fragments, each tokenized on its own.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct fragment {
    cera_token id; /* TOK_NULL: raw text [off, off + len) */
    size_t off, len;
} fragment;

typedef struct fragments {
    fragment *v;
    size_t n, cap;
} fragments;

static bool frag_push(fragments *f, cera_token id, size_t off, size_t len) {
    void *p = f->v;
    if (!tok_reserve(&p, &f->cap, f->n + 1, sizeof(fragment))) return false;
    f->v = p;
    f->v[f->n++] = (fragment){id, off, len};
    return true;
}

/* isspace() in the C locale, which llama.cpp relies on. */
static bool c_isspace(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n) return NULL;
    return memmem(hay, n, needle, m);
}

/* Splits every raw fragment of *in at the occurrences of token id, into *out. */
static bool partition_one(const cera_tokenizer *t, cera_token id, const char *text, const fragments *in,
                          fragments *out) {
    const char *tt = tok_text(t, id);
    size_t tl = t->text_len[id];
    uint32_t attr = t->attr[id];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        fragment f = in->v[i];
        if (f.id != TOK_NULL) {
            if (!frag_push(out, f.id, 0, 0)) return false;
            continue;
        }
        size_t base = f.off, blen = f.len;
        for (;;) {
            const char *m = find_bytes(text + base, blen, tt, tl);
            if (!m) {
                if (blen > 0 && !frag_push(out, TOK_NULL, base, blen)) return false;
                break;
            }
            size_t match = (size_t)(m - text);
            if (match > base) {
                size_t llen = match - base;
                if (attr & CERA_TOKEN_ATTR_LSTRIP)
                    while (llen > 0 && c_isspace(text[base + llen - 1])) llen--;
                if (llen > 0 && !frag_push(out, TOK_NULL, base, llen)) return false;
            }
            if (!frag_push(out, id, 0, 0)) return false;
            size_t end = base + blen, roff = match + tl;
            if (roff >= end) break;
            size_t rlen = end - roff;
            if (attr & CERA_TOKEN_ATTR_RSTRIP)
                while (rlen > 0 && c_isspace(text[roff])) roff++, rlen--;
            base = roff;
            blen = rlen;
        }
    }
    return true;
}

/* The raw-text part of encode for one fragment. */
bool tok_encode_fragment(const cera_tokenizer *t, tok_scratch *sc, const char *text, size_t len,
                         bool prefix_space, tok_out *out) {
    switch (t->type) {
    case CERA_VOCAB_SPM:
    case CERA_VOCAB_BPE: {
        bool escape = t->type == CERA_VOCAB_SPM || t->escape_whitespaces;
        bool prefix = t->type == CERA_VOCAB_SPM && prefix_space;
        if (!escape && !prefix) return tok_bpe_encode(t, sc, text, len, out);
        if (!tok_reserve((void **)&sc->buf, &sc->buf_cap, 3 * len + 3, 1)) return false;
        size_t o = 0;
        if (prefix) memcpy(sc->buf, "\xe2\x96\x81", 3), o = 3;
        for (size_t i = 0; i < len; i++) {
            if (text[i] == ' ')
                memcpy(sc->buf + o, "\xe2\x96\x81", 3), o += 3;
            else
                sc->buf[o++] = text[i];
        }
        if (t->type == CERA_VOCAB_SPM) return tok_spm_encode(t, sc, sc->buf, o, out);
        return tok_bpe_encode(t, sc, sc->buf, o, out);
    }
    case CERA_VOCAB_WPM: return tok_wpm_encode(t, sc, text, len, out);
    }
    return false;
}

void tok_scratch_free(tok_scratch *s) {
    free(s->buf);
    free(s->buf2);
    free(s->buf3);
    free(s->cpts);
    free(s->pieces);
    free(s->pieces2);
    free(s->syms);
    free(s->heap);
    tok_scratch_free_regex(s);
    memset(s, 0, sizeof *s);
}

cera_status cera_tokenizer_encode(const cera_tokenizer *t, const char *text, size_t len, bool add_special,
                                  bool parse_special, cera_token *ids, size_t cap, size_t *n_tokens,
                                  cera_error *err) {
    if (n_tokens) *n_tokens = 0;
    if (!t || (!text && len) || (!ids && cap))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "tokenize: null tokenizer, text or output buffer");

    tok_out out = {ids, cap, 0};
    tok_scratch sc = {0};
    fragments a = {0}, b = {0};
    bool ok = true;

    if (len > 0) {
        ok = frag_push(&a, TOK_NULL, 0, len);
        /* Skip the special tokens whose first two bytes never occur side by side in the
         * text: most of them, most of the time (a 64 Kibit map, one pass). */
        uint64_t *seen2 = calloc(1024, sizeof(uint64_t));
        bool seen1[256] = {false};
        ok = ok && seen2;
        for (size_t i = 0; ok && i < len; i++) {
            seen1[(uint8_t)text[i]] = true;
            if (i + 1 < len) {
                unsigned k = ((unsigned)(uint8_t)text[i] << 8) | (uint8_t)text[i + 1];
                seen2[k >> 6] |= 1ull << (k & 63);
            }
        }
        for (int32_t k = 0; ok && k < t->n_specials; k++) {
            cera_token id = t->specials[k];
            if (!parse_special && (t->attr[id] & (CERA_TOKEN_ATTR_CONTROL | CERA_TOKEN_ATTR_UNKNOWN)))
                continue;
            const uint8_t *tt = (const uint8_t *)tok_text(t, id);
            unsigned k2 = ((unsigned)tt[0] << 8) | tt[1]; /* tt[1] is the NUL of a 1-byte text */
            if (t->text_len[id] == 1 ? !seen1[tt[0]] : !((seen2[k2 >> 6] >> (k2 & 63)) & 1)) continue;
            ok = partition_one(t, id, text, &a, &b);
            fragments tmp = a;
            a = b;
            b = tmp;
        }
        free(seen2);
    }

    if (ok) {
        switch (t->type) {
        case CERA_VOCAB_SPM: {
            if (add_special && t->add_bos && t->bos != TOK_NULL) tok_out_push(&out, t->bos);
            bool prev_special = true; /* a space prefix on the first fragment */
            for (size_t i = 0; ok && i < a.n; i++) {
                if (a.v[i].id != TOK_NULL) {
                    tok_out_push(&out, a.v[i].id);
                    prev_special = true;
                } else {
                    ok = tok_encode_fragment(t, &sc, text + a.v[i].off, a.v[i].len,
                                             t->add_space_prefix && prev_special, &out);
                    prev_special = false;
                }
            }
            if (add_special && t->add_eos && t->eos != TOK_NULL) tok_out_push(&out, t->eos);
            break;
        }
        case CERA_VOCAB_BPE:
            if (add_special && t->add_bos && t->bos != TOK_NULL) tok_out_push(&out, t->bos);
            for (size_t i = 0; ok && i < a.n; i++) {
                if (a.v[i].id != TOK_NULL)
                    tok_out_push(&out, a.v[i].id);
                else
                    ok = tok_encode_fragment(t, &sc, text + a.v[i].off, a.v[i].len, false, &out);
            }
            if (add_special && t->add_eos && t->eos != TOK_NULL) tok_out_push(&out, t->eos);
            break;
        case CERA_VOCAB_WPM:
            if (add_special && t->bos != TOK_NULL) tok_out_push(&out, t->bos);
            for (size_t i = 0; ok && i < a.n; i++) {
                if (a.v[i].id != TOK_NULL)
                    tok_out_push(&out, a.v[i].id);
                else
                    ok = tok_encode_fragment(t, &sc, text + a.v[i].off, a.v[i].len, false, &out);
            }
            if (add_special && t->sep != TOK_NULL) tok_out_push(&out, t->sep);
            break;
        }
    }

    free(a.v);
    free(b.v);
    tok_scratch_free(&sc);
    if (!ok) return cera_fail(err, CERA_ERR_NO_MEMORY, "tokenize: out of memory (%zu bytes of text)", len);
    if (n_tokens) *n_tokens = out.n;
    if (out.n > cap)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "tokenize: %zu tokens do not fit in a buffer of %zu",
                         out.n, cap);
    return CERA_OK;
}

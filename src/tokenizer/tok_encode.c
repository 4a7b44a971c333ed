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

typedef struct occurrence {
    int32_t order; /* index in t->specials: the processing order */
    uint32_t pad;
    size_t pos;
} occurrence;

static int occ_cmp(const void *a, const void *b) {
    const occurrence *x = a, *y = b;
    if (x->order != y->order) return x->order < y->order ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static int pos_cmp(const void *a, const void *b) {
    const occurrence *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* llama.cpp's tokenizer_st_partition: for each special token, longest text first, every
 * raw fragment is cut at the token's leftmost non-overlapping occurrences (LSTRIP /
 * RSTRIP eat the whitespace beside it, within the fragment). Done here without
 * rescanning the text per token: one trie pass finds every occurrence of every
 * special text, then the tokens are replayed in llama.cpp's order over a map of the
 * bytes already taken — an occurrence is cut iff it lies on free bytes and after the
 * end of the previous cut of the same token (the fragments are the runs of free bytes,
 * and within one the search resumes after each cut). */
static bool partition(const cera_tokenizer *t, const char *text, size_t len, bool parse_special,
                      fragments *out) {
    const uint8_t *s = (const uint8_t *)text;
    occurrence *occ = NULL;
    size_t n_occ = 0, cap_occ = 0;
    for (size_t p = 0; p < len; p++) {
        uint32_t node = t->trie_root[s[p]];
        for (size_t q = p; node;) {
            int32_t k = t->trie_order[node] - 1;
            if (k >= 0) {
                uint32_t attr = t->attr[t->specials[k]];
                if (parse_special || !(attr & (CERA_TOKEN_ATTR_CONTROL | CERA_TOKEN_ATTR_UNKNOWN))) {
                    void *v = occ;
                    if (!tok_reserve(&v, &cap_occ, n_occ + 1, sizeof(occurrence))) {
                        free(occ);
                        return false;
                    }
                    occ = v;
                    occ[n_occ++] = (occurrence){k, 0, p};
                }
            }
            if (++q >= len) break;
            uint64_t key = ((uint64_t)node << 8) | s[q], j = tok_id_hash(key) & t->trie_mask;
            while (t->trie_vals[j] && t->trie_keys[j] != key) j = (j + 1) & t->trie_mask;
            node = t->trie_vals[j];
        }
    }
    out->n = 0;
    if (n_occ == 0) {
        free(occ);
        return frag_push(out, TOK_NULL, 0, len);
    }
    qsort(occ, n_occ, sizeof(occurrence), occ_cmp);

    uint8_t *used = calloc(len, 1); /* 0 free, 1 taken, 2 a cut token starts here */
    if (!used) {
        free(occ);
        return false;
    }
    size_t n_cut = 0; /* the cuts are compacted to the front of occ */
    for (size_t i = 0; i < n_occ;) {
        int32_t k = occ[i].order;
        cera_token id = t->specials[k];
        size_t tl = t->text_len[id], cursor = 0;
        uint32_t attr = t->attr[id];
        for (; i < n_occ && occ[i].order == k; i++) {
            size_t p = occ[i].pos;
            if (p < cursor) continue;
            bool free_run = true;
            for (size_t j = p; j < p + tl && free_run; j++) free_run = !used[j];
            if (!free_run) continue;
            if (attr & CERA_TOKEN_ATTR_LSTRIP)
                for (size_t q = p; q > cursor && !used[q - 1] && c_isspace(text[q - 1]); q--) used[q - 1] = 1;
            memset(used + p, 1, tl);
            used[p] = 2;
            size_t end = p + tl;
            if (attr & CERA_TOKEN_ATTR_RSTRIP)
                for (; end < len && !used[end] && c_isspace(text[end]); end++) used[end] = 1;
            cursor = end;
            occ[n_cut++] = (occurrence){(int32_t)id, 0, p}; /* n_cut <= i: no clobbering */
        }
    }
    qsort(occ, n_cut, sizeof(occurrence), pos_cmp);
    bool ok = true;
    size_t c = 0;
    for (size_t p = 0; ok && p < len;) {
        if (used[p] == 2) {
            ok = frag_push(out, occ[c++].order, 0, 0);
            p++;
        } else if (used[p]) {
            p++;
        } else {
            size_t q = p;
            while (q < len && !used[q]) q++;
            ok = frag_push(out, TOK_NULL, p, q - p);
            p = q;
        }
    }
    free(used);
    free(occ);
    return ok;
}

/* llama.cpp's whitespace session (model "whitespace"): the text is cut at whitespace,
 * each word (lowercased unless the normalizer says not to) is tokenized as BPE alone. */
static bool whitespace_words(const cera_tokenizer *t, tok_scratch *sc, const char *text, size_t len,
                             tok_out *out) {
    if (!tok_reserve((void **)&sc->buf, &sc->buf_cap, 4 * len + 4, 1)) return false;
    size_t o = 0;
    for (size_t pos = 0;;) {
        uint32_t c = ' '; /* the end flushes the last word */
        if (pos < len && !tok_utf8_decode((const uint8_t *)text, len, &pos, &c)) c = 0xfffd, pos++;
        if (tok_cpt_is_whitespace(c)) {
            if (o && !tok_bpe_encode(t, sc, sc->buf, o, out)) return false;
            o = 0;
            if (pos >= len) break;
            continue;
        }
        if (c > 0x10ffff) c = 0xfffd;
        o += (size_t)tok_utf8_encode(t->wpm_lowercase ? tok_cpt_tolower(c) : c, sc->buf + o);
    }
    return true;
}

/* The raw-text part of encode for one fragment. */
bool tok_encode_fragment(const cera_tokenizer *t, tok_scratch *sc, const char *text, size_t len,
                         bool prefix_space, tok_out *out) {
    switch (t->type) {
    case CERA_VOCAB_BPE:
        if (t->whitespace_words) return whitespace_words(t, sc, text, len, out);
        /* fall through */
    case CERA_VOCAB_SPM: {
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
    free(s->buf4);
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
    if (len > ((size_t)1 << 30)) /* symbol indices and offsets are 32-bit */
        return cera_fail(err, CERA_ERR_INVALID_ARG, "tokenize: %zu bytes of text is more than 1 GiB", len);

    tok_out out = {ids, cap, 0};
    tok_scratch sc = {0};
    fragments a = {0};
    bool ok = true;

    if (len > 0) ok = partition(t, text, len, parse_special, &a);

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
    tok_scratch_free(&sc);
    if (!ok) return cera_fail(err, CERA_ERR_NO_MEMORY, "tokenize: out of memory (%zu bytes of text)", len);
    if (n_tokens) *n_tokens = out.n;
    if (out.n > cap)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "tokenize: %zu tokens do not fit in a buffer of %zu",
                         out.n, cap);
    return CERA_OK;
}

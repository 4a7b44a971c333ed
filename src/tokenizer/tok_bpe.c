/*
 * tok_bpe.c — byte-level BPE (`tokenizer.ggml.model` = "gpt2"), as llama.cpp's
 * llm_tokenizer_bpe_session.
 *
 * A fragment of raw text is decoded into code points (bad UTF-8 bytes become U+FFFD,
 * as llama.cpp does), re-encoded, cut into words by the pre-tokenizer, and every word is
 * mapped to the GPT-2 byte alphabet and merged pair by pair, lowest merge rank first
 * (leftmost on ties). Symbols that end up outside the vocabulary fall back to
 * single-byte tokens where those exist and are dropped otherwise (llama.cpp's rule).
 * The "SPM-style" variants (gemma4, sarvam) skip the byte mapping and fall back to
 * <0xNN> tokens.
 */
#include <string.h>

#include "tokenizer/tok_internal.h"

/* Merges the symbols of w[0, n) and appends the resulting tokens. */
static bool bpe_word(const cera_tokenizer *t, tok_scratch *sc, const char *w, size_t n, tok_out *out) {
    if (!tok_reserve(&sc->syms, &sc->syms_cap, n, sizeof(tok_symbol))) return false;
    tok_symbol *sym = sc->syms;
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t k = tok_utf8_len((uint8_t)w[off]);
        if (k > n - off) k = n - off;
        sym[ns] = (tok_symbol){ns - 1, off + k == n ? -1 : ns + 1, (uint32_t)off, (uint32_t)k, TOK_NULL};
        ns++;
        off += k;
    }

    size_t nh = 0;
    for (int32_t i = 1; i < ns; i++) {
        int32_t r = tok_merge_rank(t, w + sym[i - 1].start, sym[i - 1].n, sym[i - 1].n + sym[i].n);
        if (r >= 0 && !tok_heap_push(sc, &nh, (tok_bigram){r, i - 1, i, sym[i - 1].n + sym[i].n}))
            return false;
    }
    while (nh) {
        tok_bigram b = tok_heap_pop(sc, &nh);
        sym = sc->syms;
        tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        /* new candidates on both sides of the merged symbol */
        int32_t pairs[2][2] = {{l->prev, b.left}, {b.left, l->next}};
        for (int k = 0; k < 2; k++) {
            int32_t a = pairs[k][0], c = pairs[k][1];
            if (a < 0 || c < 0) continue;
            uint32_t size = sym[a].n + sym[c].n;
            int32_t rank = tok_merge_rank(t, w + sym[a].start, sym[a].n, size);
            if (rank >= 0 && !tok_heap_push(sc, &nh, (tok_bigram){rank, a, c, size})) return false;
        }
    }

    sym = sc->syms;
    for (int32_t i = 0; i != -1 && ns > 0; i = sym[i].next) {
        const char *s = w + sym[i].start;
        cera_token id = tok_lookup(t, s, sym[i].n);
        if (id != TOK_NULL) {
            tok_out_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < sym[i].n; j++) {
            cera_token bid;
            if (t->byte_encode) {
                bid = tok_lookup(t, s + j, 1);
            } else {
                static const char hex[] = "0123456789ABCDEF";
                uint8_t c = (uint8_t)s[j];
                char buf[6] = {'<', '0', 'x', hex[c >> 4], hex[c & 15], '>'};
                bid = tok_lookup(t, buf, 6);
            }
            if (bid != TOK_NULL) tok_out_push(out, bid);
        }
    }
    return true;
}

/* The id path of bpe_word for byte-level words whose bytes all have tokens. */
static const tok_id_merge *id_merge(const cera_tokenizer *t, cera_token l, cera_token r) {
    const tok_id_merge_map *m = &t->id_merges;
    uint64_t key = ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(r + 1);
    for (uint64_t j = tok_id_hash(key) & m->mask;; j = (j + 1) & m->mask) {
        if (m->slots[j].key == key) return &m->slots[j];
        if (!m->slots[j].key) return NULL;
    }
}

static bool bpe_word_ids(const cera_tokenizer *t, tok_scratch *sc, const uint8_t *w, size_t n, tok_out *out) {
    if (!tok_reserve(&sc->syms, &sc->syms_cap, n, sizeof(tok_symbol))) return false;
    tok_symbol *sym = sc->syms;
    int32_t ns = (int32_t)n;
    for (int32_t i = 0; i < ns; i++)
        sym[i] = (tok_symbol){i - 1, i + 1 == ns ? -1 : i + 1, (uint32_t)i, 1, t->byte_id[w[i]]};
    size_t nh = 0;
    for (int32_t i = 1; i < ns; i++) {
        const tok_id_merge *e = id_merge(t, sym[i - 1].id, sym[i].id);
        if (e && !tok_heap_push(sc, &nh, (tok_bigram){e->rank, i - 1, i, 2})) return false;
    }
    while (nh) {
        tok_bigram b = tok_heap_pop(sc, &nh);
        sym = sc->syms;
        tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        const tok_id_merge *e = id_merge(t, l->id, r->id);
        l->id = e->merged;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        int32_t pairs[2][2] = {{l->prev, b.left}, {b.left, l->next}};
        for (int k = 0; k < 2; k++) {
            int32_t a = pairs[k][0], c = pairs[k][1];
            if (a < 0 || c < 0) continue;
            const tok_id_merge *m = id_merge(t, sym[a].id, sym[c].id);
            if (m && !tok_heap_push(sc, &nh, (tok_bigram){m->rank, a, c, sym[a].n + sym[c].n})) return false;
        }
    }
    sym = sc->syms;
    for (int32_t i = 0; i != -1; i = sym[i].next) tok_out_push(out, sym[i].id);
    return true;
}

static bool all_newlines(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n') return false;
    return true;
}

bool tok_bpe_encode(const cera_tokenizer *t, tok_scratch *sc, const char *text, size_t len, tok_out *out) {
    /* Decode as llama.cpp: each bad byte is one U+FFFD. The words' bytes (buf2) are the
     * re-encoding; the regex subject (buf3) is the same except that surrogates, which
     * PCRE2 cannot hold, stand as U+E000 (both are "other" to every pattern). */
    if (!tok_reserve((void **)&sc->buf2, &sc->buf2_cap, 3 * len + 4, 1)) return false;
    if (!tok_reserve((void **)&sc->buf3, &sc->buf3_cap, 3 * len + 4, 1)) return false;
    bool collapse = t->pretok.any_collapsed;
    if (collapse && !tok_reserve((void **)&sc->buf4, &sc->buf4_cap, 3 * len + 4, 1)) return false;
    char *real = sc->buf2, *subj = sc->buf3, *coll = collapse ? sc->buf4 : NULL;
    size_t n = 0;
    for (size_t pos = 0; pos < len;) {
        uint32_t c;
        if (!tok_utf8_decode((const uint8_t *)text, len, &pos, &c)) {
            c = 0xfffd;
            pos++;
        }
        if (c > 0x10ffff) c = 0xfffd; /* llama.cpp throws here; cera stays defined */
        int k = tok_utf8_encode(c, real + n);
        if (c >= 0xd800 && c <= 0xdfff)
            tok_utf8_encode(0xe000, subj + n);
        else
            memcpy(subj + n, real + n, (size_t)k);
        if (collapse) {
            if (c < 0x80)
                coll[n] = (char)c;
            else
                tok_utf8_encode(t->collapse_han ? tok_cpt_collapse_han(c) : tok_cpt_collapse(c), coll + n);
        }
        n += (size_t)k;
    }

    size_t *pieces, np;
    if (!tok_pretok_split(t, sc, subj, coll, n, &pieces, &np)) return false;

    /* A word whose bytes all have tokens merges by ids (bpe_word_ids); otherwise it is
     * mapped to the byte alphabet in buf3, past the subject (no longer needed), and
     * merged by strings. */
    for (size_t i = 0; i < np; i++) {
        size_t a = pieces[2 * i], b = pieces[2 * i + 1];
        const char *w = sc->buf2 + a;
        size_t wn = b - a;
        bool ids_ok = t->byte_encode && t->id_merges.slots;
        for (size_t j = 0; ids_ok && j < wn; j++) ids_ok = t->byte_id[(uint8_t)w[j]] != TOK_NULL;
        bool whole = t->ignore_merges || (t->newline_direct && all_newlines(w, wn));
        if (ids_ok && !whole) {
            if (!bpe_word_ids(t, sc, (const uint8_t *)w, wn, out)) return false;
            continue;
        }
        const char *word = w;
        size_t word_n = wn;
        if (t->byte_encode) {
            if (!tok_reserve((void **)&sc->buf3, &sc->buf3_cap, n + 2 * wn + 1, 1)) return false;
            char *enc = sc->buf3 + n;
            size_t e = 0;
            for (size_t j = 0; j < wn; j++) {
                uint8_t c = (uint8_t)w[j];
                enc[e++] = t->byte_enc[c][0];
                if (t->byte_enc_len[c] == 2) enc[e++] = t->byte_enc[c][1];
            }
            word = enc;
            word_n = e;
        }
        if (whole) {
            cera_token id = tok_lookup(t, word, word_n);
            if (id != TOK_NULL) {
                tok_out_push(out, id);
                continue;
            }
        }
        if (ids_ok) {
            if (!bpe_word_ids(t, sc, (const uint8_t *)w, wn, out)) return false;
        } else if (!bpe_word(t, sc, word, word_n, out)) {
            return false;
        }
    }
    return true;
}

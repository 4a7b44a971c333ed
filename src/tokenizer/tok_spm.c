/*
 * tok_spm.c — SentencePiece (`tokenizer.ggml.model` = "llama"), as llama.cpp's
 * llm_tokenizer_spm_session.
 *
 * The caller has already applied the leading-space rule and replaced spaces by U+2581.
 * The text is cut into UTF-8 characters (a lead byte announces its length; bad bytes
 * are single symbols), then adjacent symbols whose concatenation is a vocabulary entry
 * are merged, highest score first (leftmost on ties), until no pair is a token. A final
 * symbol that is not a token falls back to its bytes: <0xNN> tokens, else single-byte
 * tokens, else <unk>.
 */
#include "tokenizer/tok_internal.h"

static bool spm_try_pair(const cera_tokenizer *t, tok_scratch *sc, size_t *nh, const char *text, int32_t a,
                         int32_t b) {
    if (a < 0 || b < 0) return true;
    const tok_symbol *sym = sc->syms;
    uint32_t size = sym[a].n + sym[b].n;
    cera_token id = tok_lookup(t, text + sym[a].start, size);
    if (id == TOK_NULL) return true;
    return tok_heap_push(sc, nh, (tok_bigram){-(double)t->score[id], a, b, size});
}

static void spm_byte_fallback(const cera_tokenizer *t, uint8_t c, tok_out *out) {
    static const char hex[] = "0123456789ABCDEF";
    char buf[6] = {'<', '0', 'x', hex[c >> 4], hex[c & 15], '>'};
    cera_token id = tok_lookup(t, buf, 6);
    if (id == TOK_NULL) id = tok_lookup(t, (const char *)&c, 1);
    if (id == TOK_NULL) id = t->unk; /* llama.cpp throws here */
    if (id != TOK_NULL) tok_out_push(out, id);
}

/* Merges the symbols [first, last] (already chained) and appends their tokens. */
static bool spm_segment(const cera_tokenizer *t, tok_scratch *sc, const char *text, int32_t first,
                        int32_t last, tok_out *out) {
    tok_symbol *sym = sc->syms;
    sym[first].prev = -1;
    sym[last].next = -1;
    size_t nh = 0;
    for (int32_t i = first + 1; i <= last; i++)
        if (!spm_try_pair(t, sc, &nh, text, i - 1, i)) return false;
    while (nh) {
        tok_bigram b = tok_heap_pop(sc, &nh);
        sym = sc->syms;
        tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        int32_t left = b.left, prev = l->prev, next = l->next;
        if (!spm_try_pair(t, sc, &nh, text, prev, left)) return false;
        if (!spm_try_pair(t, sc, &nh, text, left, next)) return false;
    }
    sym = sc->syms;
    for (int32_t i = first; i != -1; i = sym[i].next) {
        const char *s = text + sym[i].start;
        cera_token id = tok_lookup(t, s, sym[i].n);
        if (id != TOK_NULL) {
            tok_out_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < sym[i].n; j++) spm_byte_fallback(t, (uint8_t)s[j], out);
    }
    return true;
}

bool tok_spm_encode(const cera_tokenizer *t, tok_scratch *sc, const char *text, size_t n, tok_out *out) {
    if (n == 0) return true;
    if (!tok_reserve(&sc->syms, &sc->syms_cap, n, sizeof(tok_symbol))) return false;
    tok_symbol *sym = sc->syms;
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t k = tok_utf8_len((uint8_t)text[off]);
        if (k > n - off) k = n - off;
        sym[ns] = (tok_symbol){ns - 1, ns + 1, (uint32_t)off, (uint32_t)k, TOK_NULL};
        ns++;
        off += k;
    }
    /* Cut where no token holds the two characters side by side: llama.cpp merges the
     * whole text with one queue, but no merge crosses such a cut, and within a segment
     * the order of merges (score, then position) is the same. */
    int32_t first = 0;
    const tok_merge_map *pairs = &t->spm_pairs;
    for (int32_t i = 1; i < ns; i++) {
        const tok_symbol *a = &sym[i - 1], *b = &sym[i];
        if (pairs->slots[tok_merge_slot(pairs, text + a->start, a->n, a->n + b->n)]) continue;
        if (!spm_segment(t, sc, text, first, i - 1, out)) return false;
        sym = sc->syms;
        first = i;
    }
    return spm_segment(t, sc, text, first, ns - 1, out);
}

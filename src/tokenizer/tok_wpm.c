/*
 * tok_wpm.c — WordPiece (`tokenizer.ggml.model` = "bert"), as llama.cpp's
 * llm_tokenizer_wpm_session.
 *
 * Normalization first: code points (bad bytes become U+FFFD), each replaced by the first
 * code point of its canonical decomposition when accents are stripped (llama.cpp keeps
 * only that one), whitespace ends a word, NUL / U+FFFD / control characters vanish,
 * combining marks vanish when stripping accents, letters are lowercased, and
 * punctuation, ASCII symbols and CJK ideographs stand as one-character words.
 * Then every word, prefixed by U+2581 (the GGUF converter's marker for a word start),
 * is covered greedily by the longest vocabulary entries, byte by byte; a word that
 * cannot be covered becomes one [UNK].
 */
#include <string.h>

#include "tokenizer/tok_internal.h"

static bool is_chinese_char(uint32_t c) {
    /* the ranges BERT's tokenizer (and llama.cpp, with its 0x2B920 quirk) uses */
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B920 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Greedy longest-match of one word (already prefixed with U+2581). */
static void wpm_word(const cera_tokenizer *t, const char *w, size_t n, tok_out *out) {
    size_t start = out->n;
    for (size_t i = 0; i < n; i++) {
        size_t j = i + (size_t)t->max_token_len + 1;
        if (j > n) j = n;
        bool match = false;
        for (; j > i; j--) {
            cera_token id = tok_lookup(t, w + i, j - i);
            if (id != TOK_NULL) {
                tok_out_push(out, id);
                match = true;
                i = j - 1;
                break;
            }
        }
        if (!match) {
            out->n = start; /* discard the word's tokens */
            break;
        }
    }
    if (out->n == start && t->unk != TOK_NULL) tok_out_push(out, t->unk);
}

bool tok_wpm_encode(const cera_tokenizer *t, tok_scratch *sc, const char *text, size_t len, tok_out *out) {
    /* words are written to buf2 as U+2581 + word, with their bounds in pieces */
    if (!tok_reserve((void **)&sc->buf2, &sc->buf2_cap, 6 * len + 8, 1)) return false;
    size_t *pieces = sc->pieces, pcap = sc->pieces_cap, np = 0;
    char *buf = sc->buf2;
    size_t o = 0, word_start = 0;
    bool in_word = false;

#define END_WORD()                                                                                           \
    do {                                                                                                     \
        if (in_word) {                                                                                       \
            if (!tok_reserve((void **)&pieces, &pcap, 2 * (np + 1), sizeof(size_t))) goto oom;               \
            pieces[2 * np] = word_start;                                                                     \
            pieces[2 * np + 1] = o;                                                                          \
            np++;                                                                                            \
            in_word = false;                                                                                 \
        }                                                                                                    \
    } while (0)

    for (size_t pos = 0; pos < len;) {
        uint32_t c;
        if (!tok_utf8_decode((const uint8_t *)text, len, &pos, &c)) {
            c = 0xfffd;
            pos++;
        }
        if (t->wpm_strip_accents) c = tok_cpt_nfd_first(c);
        unsigned f = tok_cpt_flags(c);
        if (f & TOK_CPT_WHITESPACE) {
            END_WORD();
            continue;
        }
        if (c == 0 || c == 0xfffd || (f & TOK_CPT_CONTROL) || c > 0x10ffff) continue;
        if (t->wpm_strip_accents && (f & TOK_CPT_MARK)) continue;
        uint32_t lc = t->wpm_lowercase ? tok_cpt_tolower(c) : c;
        bool single = (f & TOK_CPT_PUNCT) || (c < 0x7f && (f & TOK_CPT_SYMBOL)) || is_chinese_char(c);
        if (single) END_WORD();
        if (!in_word) {
            memcpy(buf + o, "\xe2\x96\x81", 3);
            word_start = o;
            o += 3;
            in_word = true;
        }
        o += (size_t)tok_utf8_encode(lc, buf + o);
        if (single) END_WORD();
    }
    END_WORD();
#undef END_WORD
    sc->pieces = pieces, sc->pieces_cap = pcap;
    for (size_t i = 0; i < np; i++) wpm_word(t, buf + pieces[2 * i], pieces[2 * i + 1] - pieces[2 * i], out);
    return true;
oom:
    sc->pieces = pieces, sc->pieces_cap = pcap;
    return false;
}

/*
 * test_tokenizer_robust.c — hostile input on every real vocabulary: random bytes,
 * invalid UTF-8 (lone continuation bytes, truncated sequences, overlong forms,
 * surrogates, 0xF5..0xFF), NUL bytes, special-token texts and long runs, with
 * add_special and parse_special in all four combinations. Nothing may crash (this test
 * also runs under ASan/UBSan), every id must be in range, counting with no buffer must
 * agree with encoding, the streaming detokenizer must give back exactly the
 * concatenated pieces, and byte-level BPE / SentencePiece must round-trip the text
 * (after llama.cpp's replacement of invalid UTF-8 by U+FFFD for BPE).
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

static const char *const k_fragments[] = {
    "Hello",
    " world",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "'s",
    "'LL",
    "123456",
    "\xc3\xa9",
    "e\xcc\x81",
    "\xe4\xbd\xa0\xe5\xa5\xbd",
    "\xf0\x9f\xa6\x99",
    "\xe2\x80\x8d",
    "\xc2\xa0",
    "\xe3\x80\x80",
    "<s>",
    "</s>",
    "<unk>",
    "<|endoftext|>",
    "<|im_start|>",
    "[CLS]",
    "[SEP]",
    "\xe2\x96\x81",
    "\x80",
    "\xbf",
    "\xc3",
    "\xe2\x82",
    "\xf0\x9f\x98",
    "\xc0\x80",
    "\xed\xa0\x80",
    "\xf4\x90\x80\x80",
    "\xf5\x80\x80\x80",
    "\xf8",
    "\xff",
    "\0",
    "~",
    "`",
    "...",
};

static size_t make_input(test_rng *r, char *buf, size_t cap) {
    size_t n = 0, parts = test_rng_next(r) % 24;
    bool random_bytes = test_rng_next(r) % 4 == 0;
    for (size_t p = 0; p < parts && n + 16 < cap; p++) {
        if (random_bytes) {
            size_t k = test_rng_next(r) % 12;
            for (size_t i = 0; i < k && n < cap; i++) buf[n++] = (char)(test_rng_next(r) & 0xff);
        } else {
            size_t idx = test_rng_next(r) % (sizeof k_fragments / sizeof k_fragments[0]);
            const char *f = k_fragments[idx];
            size_t k = f[0] ? strlen(f) : 1; /* "\0" is one NUL byte */
            memcpy(buf + n, f, k);
            n += k;
        }
    }
    if (test_rng_next(r) % 16 == 0) { /* a long run */
        char c = " \n9a\x80"[test_rng_next(r) % 5];
        size_t k = 200 + test_rng_next(r) % 800;
        for (size_t i = 0; i < k && n < cap; i++) buf[n++] = c;
    }
    return n;
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) return o[0] = (char)c, 1;
    if (c < 0x800) return o[0] = (char)(0xc0 | (c >> 6)), o[1] = (char)(0x80 | (c & 0x3f)), 2;
    if (c < 0x10000)
        return o[0] = (char)(0xe0 | (c >> 12)), o[1] = (char)(0x80 | ((c >> 6) & 0x3f)),
               o[2] = (char)(0x80 | (c & 0x3f)), 3;
    return o[0] = (char)(0xf0 | (c >> 18)), o[1] = (char)(0x80 | ((c >> 12) & 0x3f)),
           o[2] = (char)(0x80 | ((c >> 6) & 0x3f)), o[3] = (char)(0x80 | (c & 0x3f)), 4;
}

/* llama.cpp's view of the text for byte-level BPE: code points decoded with only the
 * continuation bits checked (overlong forms and surrogates pass) and re-encoded; each
 * byte of an invalid sequence becomes U+FFFD (so does a code point past U+10FFFF). */
static size_t sanitize(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        size_t k = c < 0x80             ? 1
                   : (c & 0xe0) == 0xc0 ? 2
                   : (c & 0xf0) == 0xe0 ? 3
                   : (c & 0xf8) == 0xf0 ? 4
                                        : 0;
        bool ok = k > 0 && (k == 1 || (c & 0x40)) && i + k <= n;
        for (size_t j = 1; ok && j < k; j++) ok = ((uint8_t)s[i + j] & 0xc0) == 0x80;
        if (!ok) {
            o += put_utf8(0xfffd, out + o);
            i++;
            continue;
        }
        uint32_t cp = k == 1 ? c : (uint32_t)(c & (0x7f >> k));
        for (size_t j = 1; j < k; j++) cp = (cp << 6) | ((uint8_t)s[i + j] & 0x3f);
        o += put_utf8(cp > 0x10ffff ? 0xfffd : cp, out + o);
        i += k;
    }
    return o;
}

static void check_vocab(const char *path, int rounds) {
    gguf_file *f = NULL;
    cera_tokenizer *tok = NULL;
    cera_error err = {0};
    if (gguf_open(path, &f, &err) != CERA_OK || cera_tokenizer_load(f, &tok, &err) != CERA_OK) {
        CHECK(false, "%s: %s", path, err.message);
        gguf_close(f);
        return;
    }
    cera_vocab_type type = cera_tokenizer_type(tok);
    int n_vocab = cera_tokenizer_n_vocab(tok);
    size_t maxp = cera_tokenizer_max_piece_len(tok);
    size_t cap_text = 4096;
    char *text = malloc(cap_text), *pieces = malloc(cap_text * 64), *streamed = malloc(cap_text * 64);
    char *clean = malloc(cap_text * 3);
    char *chunk = malloc(maxp + 8);
    cera_token *ids = malloc(cap_text * 4 * sizeof(cera_token)),
               *ids2 = malloc(cap_text * 4 * sizeof(cera_token));
    test_rng r = {0x5eed ^ (uint64_t)strlen(path)};
    int bad = 0, rt_checked = 0, rt_ok = 0, n_inputs = 0;
    /* do the 256 byte-level characters all have tokens? */
    bool all_bytes = type == CERA_VOCAB_BPE;
    for (unsigned b = 0, shift = 0; b < 256 && all_bytes; b++) {
        bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        uint32_t c = printable ? b : 256 + shift++;
        char u[4];
        size_t k = put_utf8(c, u);
        all_bytes = cera_tokenizer_find(tok, u, k) >= 0;
    }
    for (int it = 0; it < rounds && bad < 5; it++) {
        size_t len = make_input(&r, text, cap_text);
        for (int mode = 0; mode < 4; mode++) {
            bool add = mode & 1, parse = mode & 2;
            size_t n = 0, n0 = 0;
            cera_status st = cera_tokenizer_encode(tok, text, len, add, parse, ids, cap_text * 4, &n, &err);
            if (st != CERA_OK) {
                fprintf(stderr, "%s: encode failed: %s\n", path, err.message);
                bad++;
                continue;
            }
            cera_status st0 = cera_tokenizer_encode(tok, text, len, add, parse, NULL, 0, &n0, &err);
            bool ok = (n == 0 ? st0 == CERA_OK : st0 == CERA_ERR_INVALID_ARG) && n0 == n;
            size_t n2 = 0;
            cera_tokenizer_encode(tok, text, len, add, parse, ids2, cap_text * 4, &n2, &err);
            ok = ok && n2 == n && !memcmp(ids, ids2, n * sizeof(cera_token));
            for (size_t i = 0; i < n; i++) ok = ok && ids[i] >= 0 && ids[i] < n_vocab;
            /* streaming detokenizer == concatenated pieces */
            size_t np = 0, ns = 0;
            cera_detok d;
            cera_detok_init(&d, tok, parse);
            for (size_t i = 0; ok && i < n; i++) {
                int k = cera_tokenizer_piece(tok, ids[i], pieces + np, maxp, parse);
                ok = k >= 0;
                np += (size_t)(k > 0 ? k : 0);
                int s = cera_detok_push(&d, ids[i], chunk, maxp + 8);
                ok = ok && s >= 0;
                if (s > 0) memcpy(streamed + ns, chunk, (size_t)s), ns += (size_t)s;
            }
            int fl = cera_detok_flush(&d, chunk, maxp + 8);
            if (fl > 0) memcpy(streamed + ns, chunk, (size_t)fl), ns += (size_t)fl;
            ok = ok && ns == np && !memcmp(streamed, pieces, np);
            int64_t dl = cera_tokenizer_decode(tok, ids, n, streamed, cap_text * 64, add, parse);
            ok = ok && dl >= 0 && (size_t)dl <= np;
            n_inputs++;
            if (!ok) {
                fprintf(stderr, "%s: inconsistent result for a %zu-byte input (mode %d, step %d)\n", path,
                        len, mode, it);
                bad++;
                continue;
            }
            /* round trip of plain text (specials not parsed, no BOS) */
            size_t cl = sanitize(text, len, clean);
            bool valid = cl == len && !memcmp(clean, text, len);
            /* SentencePiece cuts invalid UTF-8 by lead-byte lengths, which can swallow the
             * bytes of an escaped space: only valid text round-trips. Byte-level BPE needs
             * every byte's character in the vocabulary. */
            bool lossless = type == CERA_VOCAB_SPM ? valid : type == CERA_VOCAB_BPE && all_bytes;
            if (mode == 0 && lossless && !memmem(text, len, "\xe2\x96\x81", 3)) {
                const char *want = text;
                size_t wl = len;
                if (type == CERA_VOCAB_BPE) wl = cl, want = clean;
                const char *got = pieces;
                size_t gl = np;
                if (type == CERA_VOCAB_SPM && gl && got[0] == ' ') got++, gl--;
                rt_checked++;
                bool same = gl == wl && !memcmp(got, want, wl);
                rt_ok += same;
                if (!same && getenv("CERA_TEST_VERBOSE")) {
                    fprintf(stderr, "want:");
                    for (size_t i = 0; i < wl; i++) fprintf(stderr, " %02x", (uint8_t)want[i]);
                    fprintf(stderr, "\ngot: ");
                    for (size_t i = 0; i < gl; i++) fprintf(stderr, " %02x", (uint8_t)got[i]);
                    fprintf(stderr, "\n");
                }
            }
        }
    }
    fprintf(stderr, "%s: %d inputs, %d inconsistent, %d/%d round trips\n", path, n_inputs, bad, rt_ok,
            rt_checked);
    CHECK(bad == 0 && n_inputs > 0, "%s: %d of %d inputs gave inconsistent results", path, bad, n_inputs);
    CHECK(rt_ok == rt_checked, "%s: %d of %d round trips exact", path, rt_ok, rt_checked);
    free(text), free(pieces), free(streamed), free(clean), free(chunk), free(ids), free(ids2);
    cera_tokenizer_free(tok);
    gguf_close(f);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 150;
    const char *files[] = {"vocab/ggml-vocab-llama-spm.gguf",
                           "vocab/ggml-vocab-phi-3.gguf",
                           "vocab/ggml-vocab-gpt-2.gguf",
                           "vocab/ggml-vocab-falcon.gguf",
                           "vocab/ggml-vocab-mpt.gguf",
                           "vocab/ggml-vocab-starcoder.gguf",
                           "vocab/ggml-vocab-refact.gguf",
                           "vocab/ggml-vocab-deepseek-llm.gguf",
                           "vocab/ggml-vocab-deepseek-coder.gguf",
                           "vocab/ggml-vocab-bert-bge.gguf",
                           "models/stories260K.gguf"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const char *p = shared_path(files[i]);
        if (file_exists(p)) check_vocab(p, rounds);
    }
    if (file_exists(models_path("SmolLM2-135M-Instruct.Q4_1.gguf")))
        check_vocab(models_path("SmolLM2-135M-Instruct.Q4_1.gguf"), rounds);
    return test_finish();
}

/*
 * test_tokenizer_special.c — special tokens, BOS/EOS, the count/cap contract, queries,
 * pieces, detokenizing and the streaming detokenizer, on real vocabularies.
 *
 * The expected ids of the special-token cases were produced by llama.cpp's
 * llama-tokenize (commit 34af94cd) on the same files, e.g.
 *   llama-tokenize -m SmolLM2-135M-Instruct.Q4_1.gguf -p TEXT --ids --log-disable --no-escape
 */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

typedef struct loaded {
    gguf_file *f;
    cera_tokenizer *tok;
} loaded;

static loaded load(const char *path) {
    loaded l = {0};
    cera_error err = {0};
    if (!file_exists(path)) {
        fprintf(stderr, "skipping %s (absent)\n", path);
        return l;
    }
    CHECK(gguf_open(path, &l.f, &err) == CERA_OK, "%s: %s", path, err.message);
    if (l.f) CHECK(cera_tokenizer_load(l.f, &l.tok, &err) == CERA_OK, "%s: %s", path, err.message);
    return l;
}

static void unload(loaded *l) {
    cera_tokenizer_free(l->tok);
    gguf_close(l->f);
}

/* Encodes and compares with the expected ids; prints both on a mismatch. */
static void expect(const cera_tokenizer *tok, const char *what, const char *text, bool add, bool parse,
                   const cera_token *want, size_t nw) {
    cera_token ids[256];
    size_t n = 0;
    cera_error err = {0};
    cera_status st = cera_tokenizer_encode(tok, text, strlen(text), add, parse, ids, 256, &n, &err);
    bool same = st == CERA_OK && n == nw && memcmp(ids, want, nw * sizeof(cera_token)) == 0;
    CHECK(same, "%s: %zu ids (want %zu), status %d %s", what, n, nw, st, err.message);
    if (!same) {
        for (size_t i = 0; i < n && i < 256; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "  <- got\n");
    }
}

#define EXPECT(tok, what, text, add, parse, ...)                                                             \
    do {                                                                                                     \
        static const cera_token want_[] = {__VA_ARGS__};                                                     \
        expect(tok, what, text, add, parse, want_, sizeof want_ / sizeof want_[0]);                          \
    } while (0)

static void test_smollm2(void) {
    loaded l = load(models_path("SmolLM2-135M-Instruct.Q4_1.gguf"));
    if (!l.tok) return;
    const cera_tokenizer *t = l.tok;
    const char *chat = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n";
    EXPECT(t, "smollm2 chat, parse_special", chat, true, true, 1, 9690, 198, 2683, 359, 5356, 30, 2, 198, 1,
           4093, 198, 26843, 17, 2, 198);
    EXPECT(t, "smollm2 chat, no parse_special", chat, true, false, 44, 108, 306, 79, 3738, 108, 46, 9690, 198,
           2683, 359, 5356, 15602, 108, 306, 79, 486, 108, 46, 198, 44, 108, 306, 79, 3738, 108, 46, 4093,
           198, 26843, 17, 44, 108, 306, 79, 486, 108, 46, 198);
    EXPECT(t, "smollm2 im tokens", "<|im_start|>user Hello world<|im_end|>", true, true, 1, 4093, 38699, 905,
           2);
    CHECK(!cera_tokenizer_add_bos(t), "smollm2 does not add BOS");
    CHECK(cera_tokenizer_bos(t) == 1 && cera_tokenizer_eos(t) == 2, "smollm2 bos/eos %d/%d",
          cera_tokenizer_bos(t), cera_tokenizer_eos(t));
    /* llama.cpp's EOG set for this file: <|endoftext|>, <|im_end|>, <reponame> */
    for (cera_token id = 0; id < 8; id++) {
        bool want = id == 0 || id == 2 || id == 4;
        CHECK(cera_tokenizer_is_eog(t, id) == want, "smollm2 is_eog(%d)", id);
    }
    CHECK(!cera_tokenizer_is_eog(t, -1) && !cera_tokenizer_is_eog(t, 1 << 30), "is_eog out of range");
    CHECK(cera_tokenizer_nl(t) == 198, "smollm2 newline token %d", cera_tokenizer_nl(t));
    CHECK(!strcmp(cera_tokenizer_pre_name(t), "smollm"), "pre %s", cera_tokenizer_pre_name(t));

    /* pieces: special tokens rendered or not */
    char buf[64];
    int k = cera_tokenizer_piece(t, 2, buf, sizeof buf, true);
    CHECK(k == 10 && !memcmp(buf, "<|im_end|>", 10), "piece of <|im_end|> rendered");
    CHECK(cera_tokenizer_piece(t, 2, buf, sizeof buf, false) == 0, "piece of <|im_end|> skipped");
    k = cera_tokenizer_piece(t, 38699, buf, sizeof buf, false);
    CHECK(k == 6 && !memcmp(buf, " Hello", 6), "piece ' Hello' (byte-level Ġ -> space)");
    CHECK(cera_tokenizer_piece(t, 38699, buf, 3, false) == 6, "too small a buffer still reports the length");
    CHECK(cera_tokenizer_piece(t, 49152, buf, sizeof buf, false) == -1, "piece of an id out of range");
    unload(&l);
}

static void test_llama_spm(void) {
    loaded l = load(shared_path("vocab/ggml-vocab-llama-spm.gguf"));
    if (!l.tok) return;
    const cera_tokenizer *t = l.tok;
    EXPECT(t, "spm special", "<s>Hello</s> world <unk>", true, true, 1, 1, 15043, 2, 29871, 3186, 29871, 0);
    EXPECT(t, "spm no special", "<s>Hello</s> world <unk>", true, false, 1, 529, 29879, 29958, 10994, 829,
           29879, 29958, 3186, 529, 2960, 29958);
    EXPECT(t, "spm add_special", "Hello world", true, false, 1, 15043, 3186);
    EXPECT(t, "spm single space", " ", true, false, 1, 259);
    EXPECT(t, "spm empty with BOS", "", true, false, 1);
    CHECK(cera_tokenizer_add_bos(t) && !cera_tokenizer_add_eos(t), "llama-spm adds BOS only");
    CHECK(cera_tokenizer_nl(t) == 13, "llama-spm newline <0x0A> = %d", cera_tokenizer_nl(t));

    /* the count/cap contract of cera_tokenize */
    cera_token ids[4];
    size_t n = 99;
    cera_error err = {0};
    CHECK(cera_tokenizer_encode(t, "Hello world, hello world", 24, true, false, ids, 2, &n, &err) ==
              CERA_ERR_INVALID_ARG,
          "a too small buffer is an error");
    CHECK(n == 6, "the full count is reported (%zu)", n);
    CHECK(ids[0] == 1 && ids[1] == 15043, "the first cap ids are written");
    CHECK(cera_tokenizer_encode(t, "Hello", 5, false, false, NULL, 0, &n, &err) == CERA_ERR_INVALID_ARG &&
              n == 1,
          "counting with no buffer");
    CHECK(cera_tokenizer_encode(t, "", 0, false, false, NULL, 0, &n, &err) == CERA_OK && n == 0,
          "empty text");

    /* decode: the leading space of add_space_prefix goes, BOS with remove_special */
    cera_token seq[] = {1, 15043, 3186, 2};
    char out[64];
    int64_t m = cera_tokenizer_decode(t, seq, 4, out, sizeof out, true, false);
    /* llama.cpp keeps the leading space when it removed a BOS (its remove_space rule) */
    CHECK(m == 12 && !memcmp(out, " Hello world", 12), "decode removes BOS: '%.*s'", (int)(m > 0 ? m : 0),
          out);
    m = cera_tokenizer_decode(t, seq, 4, out, sizeof out, false, true);
    CHECK(m == 19 && !memcmp(out, "<s> Hello world</s>", 19), "decode renders specials: '%.*s'",
          (int)(m > 0 ? m : 0), out);
    m = cera_tokenizer_decode(t, seq + 1, 2, out, sizeof out, false, false);
    CHECK(m == 11 && !memcmp(out, "Hello world", 11), "decode drops the first token's leading space");
    CHECK(cera_tokenizer_decode(t, seq, 4, out, 3, true, false) >= 11, "decode reports the length needed");
    cera_token bad[] = {1, 32000};
    CHECK(cera_tokenizer_decode(t, bad, 2, out, sizeof out, false, false) == -1, "decode of an invalid id");
    unload(&l);
}

static void test_phi3_rstrip(void) {
    loaded l = load(shared_path("vocab/ggml-vocab-phi-3.gguf"));
    if (!l.tok) return;
    /* phi-3's special tokens eat the whitespace on their right (RSTRIP) */
    EXPECT(l.tok, "phi-3 rstrip", "<|user|>\n  Hi <|end|>\n <|assistant|>", true, true, 1, 32010, 6324, 29871,
           32007, 32001);
    CHECK(cera_tokenizer_attr(l.tok, 32010) & CERA_TOKEN_ATTR_RSTRIP, "phi-3 <|user|> has RSTRIP");
    CHECK(cera_tokenizer_is_eog(l.tok, 32007) && cera_tokenizer_is_eog(l.tok, 32000), "phi-3 <|end|> is EOG");
    unload(&l);
}

static void test_bert(void) {
    loaded l = load(shared_path("vocab/ggml-vocab-bert-bge.gguf"));
    if (!l.tok) return;
    EXPECT(l.tok, "bert CLS/SEP", "[CLS] Hello, World! [SEP] \xc3\x80\xc3\x89\xc3\x8e [MASK]", true, true,
           101, 101, 7592, 1010, 2088, 999, 102, 29347, 2072, 103, 102);
    unload(&l);
}

static void test_gpt2(void) {
    loaded l = load(shared_path("vocab/ggml-vocab-gpt-2.gguf"));
    if (!l.tok) return;
    EXPECT(l.tok, "gpt-2 special", "a<|endoftext|>b", false, true, 64, 50256, 65);
    EXPECT(l.tok, "gpt-2 no special", "a<|endoftext|>b", false, false, 64, 27, 91, 437, 1659, 5239, 91, 29,
           65);
    unload(&l);
}

/* "🦙" in stories260K is four byte tokens: the streaming detokenizer holds them back
 * until the character is complete. */
static void test_stream(void) {
    loaded l = load(shared_path("models/stories260K.gguf"));
    if (!l.tok) return;
    const cera_tokenizer *t = l.tok;
    EXPECT(t, "stories260K", "Once upon a time \xf0\x9f\xa6\x99", true, false, 1, 403, 407, 261, 378, 410,
           243, 162, 169, 156);
    cera_token seq[] = {1, 403, 407, 261, 378, 410, 243, 162, 169, 156, 410};
    const char *want[] = {"", " Once", " upon", " a", " time", " ", "", "", "", "\xf0\x9f\xa6\x99", " "};
    cera_detok d;
    cera_detok_init(&d, t, false);
    char out[64];
    for (int i = 0; i < 11; i++) {
        int k = cera_detok_push(&d, seq[i], out, sizeof out);
        CHECK(k == (int)strlen(want[i]) && !memcmp(out, want[i], (size_t)k), "stream step %d: %d bytes", i,
              k);
    }
    CHECK(cera_detok_flush(&d, out, sizeof out) == 0, "nothing left");
    /* an unfinished character comes out at flush, as it is */
    cera_detok_push(&d, 243, out, sizeof out);
    cera_detok_push(&d, 162, out, sizeof out);
    CHECK(cera_detok_flush(&d, out, sizeof out) == 2 && (uint8_t)out[0] == 0xf0,
          "flush of a partial character");
    /* an invalid byte is not held back */
    cera_token ff = cera_tokenizer_find(t, "<0xFF>", 6);
    CHECK(ff >= 0 && cera_detok_push(&d, ff, out, sizeof out) == 1, "invalid byte passes");
    /* a byte that can never continue the held one releases both */
    cera_detok_push(&d, 243, out, sizeof out); /* F0 */
    CHECK(cera_detok_push(&d, 403, out, sizeof out) == 6, "F0 then ' Once' -> 6 bytes out");
    CHECK(cera_detok_push(&d, 243, out, 2) >= 0 && cera_detok_push(&d, 403, out, 2) == -2,
          "cap too small: -2");
    CHECK(cera_detok_push(&d, 99999, out, sizeof out) == -1, "invalid token: -1");
    /* with render_special the BOS is text */
    cera_detok_init(&d, t, true);
    CHECK(cera_detok_push(&d, 1, out, sizeof out) == 3 && !memcmp(out, "<s>", 3), "render_special");
    unload(&l);
}

/* Decoding with llama.cpp's clean-up of spaces (gpt-2 and bert have clean_spaces) and
 * the special-token flags; expected texts from llama_detokenize on the same ids. */
static void expect_decode(const char *path, const char *text, bool remove_special, bool render_special,
                          const char *want) {
    loaded l = load(path);
    if (!l.tok) return;
    cera_token ids[128];
    size_t n = 0;
    cera_error err = {0};
    cera_tokenizer_encode(l.tok, text, strlen(text), true, true, ids, 128, &n, &err);
    char out[256];
    int64_t k = cera_tokenizer_decode(l.tok, ids, n, out, sizeof out, remove_special, render_special);
    CHECK(k == (int64_t)strlen(want) && !memcmp(out, want, (size_t)k), "%s: decode gives '%.*s', want '%s'",
          path, (int)(k > 0 ? k : 0), out, want);
    unload(&l);
}

static void test_decode(void) {
    const char *a = "Hello , world 's a ' b ' c ?!", *b = " I 'm here , you 're 've 'll 'd 't .";
    expect_decode(shared_path("vocab/ggml-vocab-gpt-2.gguf"), a, false, false, "Hello, world's a'b'c?!");
    expect_decode(shared_path("vocab/ggml-vocab-gpt-2.gguf"), b, true, true,
                  " I'm here, you're've 'll 'd 't.");
    expect_decode(shared_path("vocab/ggml-vocab-llama-spm.gguf"), b, true, true,
                  "  I 'm here , you 're 've 'll 'd 't .");
    expect_decode(shared_path("vocab/ggml-vocab-bert-bge.gguf"), a, false, false, " hello, world's a'b'c?!");
    expect_decode(shared_path("vocab/ggml-vocab-bert-bge.gguf"), b, true, true,
                  " i'm here, you're've'll'd't.[SEP]");
}

/* Model "whitespace" (jina-v2-zh): BPE per whitespace-separated word, lowercased unless
 * the pre-tokenizer is "whitespace". Built from the gpt-2 vocabulary; ids from llama.cpp. */
static void test_whitespace_model(void) {
    loaded base = load(shared_path("vocab/ggml-vocab-gpt-2.gguf"));
    if (!base.f) return;
    static const char *const pres[] = {"whitespace", "default"};
    for (int k = 0; k < 2; k++) {
        gguf_writer *w = gguf_writer_new();
        for (uint64_t i = 0; i < base.f->n_kv; i++)
            gguf_writer_set_value(w, base.f->kv[i].key, &base.f->kv[i].value);
        gguf_writer_set_str(w, "tokenizer.ggml.model", "whitespace");
        gguf_writer_set_str(w, "tokenizer.ggml.pre", pres[k]);
        void *mem = NULL;
        size_t size = 0;
        cera_error err = {0};
        gguf_file *f = NULL;
        cera_tokenizer *tok = NULL;
        CHECK(gguf_writer_to_memory(w, &mem, &size, &err) == CERA_OK &&
                  gguf_open_memory(mem, size, &f, &err) == CERA_OK &&
                  cera_tokenizer_load(f, &tok, &err) == CERA_OK,
              "whitespace model: %s", err.message);
        if (tok && k == 0) {
            EXPECT(tok, "whitespace/whitespace",
                   "Hello World  FOO\tbar\n\xc3\x84pfel \xe4\xbd\xa0\xe5\xa5\xbd!", false, true, 15496, 10603,
                   6080, 46, 5657, 128, 79, 69, 417, 0);
            EXPECT(tok, "whitespace/whitespace specials", "  x  <|endoftext|>Y ", false, true, 87, 50256, 56);
        } else if (tok) {
            EXPECT(tok, "whitespace/default", "Hello World  FOO\tbar\n\xc3\x84pfel \xe4\xbd\xa0\xe5\xa5\xbd!",
                   false, true, 31373, 6894, 21943, 5657, 11033, 79, 69, 417, 19526, 254, 25001, 121, 0);
            EXPECT(tok, "whitespace/default specials", "  x  <|endoftext|>Y ", false, true, 87, 50256, 88);
        }
        cera_tokenizer_free(tok);
        gguf_close(f);
        free(mem);
        gguf_writer_free(w);
    }
    unload(&base);
}

static void test_errors(void) {
    /* an unknown pre-tokenizer and a missing vocabulary are errors naming the problem; a
     * byte-level BPE vocabulary needs a token for each byte of text (the 256 byte tokens,
     * in GPT-2's byte-to-character mapping), then "ab" */
    gguf_writer *w = gguf_writer_new();
    static char bytes[256][4];
    const char *toks[257];
    for (int b = 0; b < 256; b++) {
        const uint32_t c = tok_byte_to_cpt((uint8_t)b);
        if (c < 0x80) {
            bytes[b][0] = (char)c;
        } else {
            bytes[b][0] = (char)(0xc0 | (c >> 6));
            bytes[b][1] = (char)(0x80 | (c & 0x3f));
        }
        toks[b] = bytes[b];
    }
    toks[256] = "ab";
    const char *merges[] = {"a b"};
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
    {
        /* "a" and "b" alone: every other byte of text would be dropped */
        const char *few[] = {"a", "b"};
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", few, 2);
        void *d = NULL;
        size_t sz = 0;
        cera_error e = {0};
        gguf_file *g = NULL;
        cera_tokenizer *tk = NULL;
        CHECK(gguf_writer_to_memory(w, &d, &sz, &e) == CERA_OK && gguf_open_memory(d, sz, &g, &e) == CERA_OK,
              "writer: %s", e.message);
        CHECK(cera_tokenizer_load(g, &tk, &e) == CERA_ERR_FORMAT &&
                  strstr(e.message, "no token for byte 0x09"),
              "a byte-level BPE without its byte tokens: %s", e.message);
        cera_tokenizer_free(tk);
        gguf_close(g);
        free(d);
    }
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 257);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    void *data = NULL;
    size_t size = 0;
    cera_error err = {0};
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_OK, "writer: %s", err.message);
    gguf_file *f = NULL;
    cera_tokenizer *tok = NULL;
    CHECK(gguf_open_memory(data, size, &f, &err) == CERA_OK, "open: %s", err.message);
    CHECK(cera_tokenizer_load(f, &tok, &err) != CERA_OK && strstr(err.message, "no-such-pre"),
          "unknown pre named: %s", err.message);
    gguf_close(f);
    free(data);

    gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_OK, "writer: %s", err.message);
    CHECK(gguf_open_memory(data, size, &f, &err) == CERA_OK, "open: %s", err.message);
    CHECK(cera_tokenizer_load(f, &tok, &err) == CERA_OK, "qwen2 loads: %s", err.message);
    cera_token ids[8];
    size_t n = 0;
    CHECK(cera_tokenizer_encode(tok, "abab", 4, false, false, ids, 8, &n, &err) == CERA_OK && n == 2 &&
              ids[0] == 256 && ids[1] == 256,
          "a tiny BPE: 'abab' -> ab ab (%zu)", n);
    cera_tokenizer_free(tok);
    gguf_close(f);
    free(data);

    gguf_writer_set_str(w, "tokenizer.ggml.model", "t5");
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_OK, "writer: %s", err.message);
    CHECK(gguf_open_memory(data, size, &f, &err) == CERA_OK, "open: %s", err.message);
    CHECK(cera_tokenizer_load(f, &tok, &err) == CERA_ERR_UNSUPPORTED && strstr(err.message, "t5"),
          "unsupported model named: %s", err.message);
    gguf_close(f);
    free(data);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_OK, "writer: %s", err.message);
    CHECK(gguf_open_memory(data, size, &f, &err) == CERA_OK, "open: %s", err.message);
    CHECK(cera_tokenizer_load(f, &tok, &err) == CERA_ERR_NOT_FOUND &&
              strstr(err.message, "tokenizer.ggml.tokens"),
          "missing tokens named: %s", err.message);
    gguf_close(f);
    free(data);
    gguf_writer_free(w);
}

int main(void) {
    test_smollm2();
    test_llama_spm();
    test_phi3_rstrip();
    test_bert();
    test_gpt2();
    test_stream();
    test_decode();
    test_whitespace_model();
    test_errors();
    return test_finish();
}

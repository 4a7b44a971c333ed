/*
 * fuzz_tokenizer.c — libFuzzer harness for the tokenizers.
 *
 * The first input byte picks a tokenizer and the flags; the rest is the text. The
 * tokenizers are built once: small in-memory vocabularies (SentencePiece with byte
 * fallback, byte-level BPE under twenty pre-tokenizers, WordPiece) plus every real
 * vocabulary of the shared folder when it is found ($CERA_SHARED_DIR, else ../shared
 * next to the source tree). Whatever the text, encoding must succeed with every id in
 * range, counting with no buffer must agree, the streaming detokenizer must give back
 * exactly the concatenated pieces and whole-sequence decoding must stay within them.
 * A first byte of 0xFF instead treats the rest as a GGUF file to load a tokenizer from
 * (errors are fine; a loaded tokenizer must then encode a fixed text).
 *
 * Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt when CERA_FUZZ is on,
 * otherwise linked with replay.c to replay the seed corpus as a normal test.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

#define MAX_TOK 48

static cera_tokenizer *g_tok[MAX_TOK];
static gguf_file *g_file[MAX_TOK];
static int g_n;

static void add_tokenizer(gguf_file *f) {
    cera_error err;
    cera_tokenizer *t = NULL;
    if (g_n < MAX_TOK && cera_tokenizer_load(f, &t, &err) == CERA_OK) {
        g_tok[g_n] = t;
        g_file[g_n++] = f;
    } else {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err.message);
        gguf_close(f);
    }
}

static void add_from_writer(gguf_writer *w) {
    void *data;
    size_t size;
    cera_error err;
    gguf_file *f;
    if (gguf_writer_to_memory(w, &data, &size, &err) != CERA_OK) return;
    if (gguf_open_memory(data, size, &f, &err) == CERA_OK)
        add_tokenizer(f); /* data stays alive: leaked once */
}

/* The GPT-2 byte alphabet character of b, as UTF-8. */
static void byte_char(unsigned b, char *out) {
    unsigned shift = 0;
    for (unsigned c = 0; c < b; c++)
        shift += !((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || c >= 0xae);
    bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    unsigned cp = printable ? b : 256 + shift;
    if (cp < 0x80)
        out[0] = (char)cp, out[1] = 0;
    else
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
}

static void build_small_vocabs(void) {
    static const char *const words[] = {"a",
                                        "b",
                                        "c",
                                        "ab",
                                        "abc",
                                        "the",
                                        "he",
                                        "th",
                                        "\xe2\x96\x81",
                                        "\xe2\x96\x81"
                                        "a",
                                        "\xe2\x96\x81"
                                        "the",
                                        "\xc3\xa9",
                                        "\xe4\xbd\xa0",
                                        "1",
                                        "12",
                                        "123",
                                        "<user>",
                                        "<|endoftext|>",
                                        "<|im_end|>"};
    size_t nw = sizeof words / sizeof words[0];

    /* SentencePiece with byte fallback */
    {
        const char *toks[3 + 256 + 32];
        int32_t types[3 + 256 + 32];
        float scores[3 + 256 + 32];
        char bytes[256][8];
        size_t n = 0;
        toks[n] = "<unk>", types[n] = 2, scores[n++] = 0;
        toks[n] = "<s>", types[n] = 3, scores[n++] = 0;
        toks[n] = "</s>", types[n] = 3, scores[n++] = 0;
        for (int b = 0; b < 256; b++) {
            snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
            toks[n] = bytes[b], types[n] = 6, scores[n++] = 0;
        }
        for (size_t i = 0; i < nw; i++)
            toks[n] = words[i], types[n] = strchr(words[i], '<') ? 4 : 1, scores[n++] = -(float)i;
        gguf_writer *w = gguf_writer_new();
        gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, n);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, n);
        add_from_writer(w);
        gguf_writer_set_str(w, "general.name", "phi3"); /* RSTRIP on the specials */
        add_from_writer(w);
        gguf_writer_free(w);
    }

    /* byte-level BPE under several pre-tokenizers */
    {
        static const char *const pres[] = {
            "gpt-2",  "llama3",   "qwen2",    "deepseek-llm", "deepseek-coder", "falcon",    "tekken",
            "gpt-4o", "superbpe", "afmoe",    "bloom",        "gemma4",         "chameleon", "exaone-moe",
            "jais-2", "kimi-k2",  "tiny_aya", "youtu",        "qwen35",         "whitespace"};
        char chars[256][4], merged[64][16], merges[64][24];
        const char *toks[256 + 64 + 8];
        int32_t types[256 + 64 + 8];
        const char *mstr[64];
        size_t n = 0, nm = 0;
        for (int b = 0; b < 256; b++) {
            byte_char((unsigned)b, chars[b]);
            toks[n] = chars[b], types[n++] = 1;
        }
        static const char *const pairs[][2] = {
            {"t", "h"},  {"th", "e"}, {"\xc4\xa0", "t"},        {"\xc4\xa0t", "he"},     {"a", "b"},
            {"ab", "c"}, {"1", "2"},  {"\xc4\xa0", "\xc4\xa0"}, {"\xc4\x8a", "\xc4\x8a"}};
        for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
            snprintf(merged[i], sizeof merged[i], "%s%s", pairs[i][0], pairs[i][1]);
            snprintf(merges[i], sizeof merges[i], "%s %s", pairs[i][0], pairs[i][1]);
            toks[n] = merged[i], types[n++] = 1;
            mstr[nm++] = merges[i];
        }
        toks[n] = "<|endoftext|>", types[n++] = 3;
        toks[n] = "<user>", types[n++] = 4;
        toks[n] = "\n\n", types[n++] = 1;
        for (size_t p = 0; p < sizeof pres / sizeof pres[0]; p++) {
            gguf_writer *w = gguf_writer_new();
            /* the whitespace pre-tokenizer goes with the whitespace model */
            gguf_writer_set_str(w, "tokenizer.ggml.model",
                                strcmp(pres[p], "whitespace") ? "gpt2" : "whitespace");
            gguf_writer_set_str(w, "tokenizer.ggml.pre", pres[p]);
            gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, n);
            gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, n);
            gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", mstr, nm);
            add_from_writer(w);
            gguf_writer_free(w);
        }
    }

    /* WordPiece */
    {
        const char *toks[] = {"[PAD]",
                              "[UNK]",
                              "[CLS]",
                              "[SEP]",
                              "[MASK]",
                              "\xe2\x96\x81"
                              "the",
                              "\xe2\x96\x81"
                              "a",
                              "b",
                              "c",
                              "\xe2\x96\x81"
                              "e",
                              "\xe2\x96\x81"
                              ",",
                              "\xe2\x96\x81\xe4\xbd\xa0"};
        int32_t types[] = {3, 2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1};
        gguf_writer *w = gguf_writer_new();
        gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 12);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 12);
        gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 1);
        gguf_writer_set_u32(w, "tokenizer.ggml.cls_token_id", 2);
        gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 3);
        add_from_writer(w);
        gguf_writer_free(w);
    }
}

static void load_shared_vocabs(void) {
    char dir[1024];
    const char *env = getenv("CERA_SHARED_DIR");
    if (env) {
        snprintf(dir, sizeof dir, "%s/vocab", env);
    } else {
        /* <repo>/tests/fuzz/fuzz_tokenizer.c -> <repo>/../shared/vocab */
        snprintf(dir, sizeof dir, "%s", __FILE__);
        for (int i = 0; i < 3; i++) {
            char *s = strrchr(dir, '/');
            if (s) *s = 0;
        }
        strncat(dir, "/../shared/vocab", sizeof dir - strlen(dir) - 1);
    }
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf")) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_file *f;
        cera_error err;
        if (gguf_open(path, &f, &err) == CERA_OK) add_tokenizer(f);
    }
    closedir(d);
}

static void init(void) {
    static bool done;
    if (done) return;
    done = true;
    build_small_vocabs();
    load_shared_vocabs();
    fprintf(stderr, "fuzz_tokenizer: %d tokenizers\n", g_n);
    REQUIRE(g_n > 0);
}

static void check_text(const cera_tokenizer *t, const char *text, size_t len, bool add, bool parse,
                       bool render) {
    static cera_token ids[1 << 17];
    static char pieces[1 << 22], streamed[1 << 22];
    char chunk[4096];
    cera_error err;
    size_t n = 0, n0 = 0;
    REQUIRE(cera_tokenizer_encode(t, text, len, add, parse, ids, 1 << 17, &n, &err) == CERA_OK);
    cera_status st0 = cera_tokenizer_encode(t, text, len, add, parse, NULL, 0, &n0, &err);
    REQUIRE(n0 == n && (n == 0 ? st0 == CERA_OK : st0 == CERA_ERR_INVALID_ARG));
    int nv = cera_tokenizer_n_vocab(t);
    size_t maxp = cera_tokenizer_max_piece_len(t);
    if (maxp + 8 > sizeof chunk) return;
    size_t np = 0, ns = 0;
    cera_detok d;
    cera_detok_init(&d, t, render);
    for (size_t i = 0; i < n; i++) {
        REQUIRE(ids[i] >= 0 && ids[i] < nv);
        if (np + maxp > sizeof pieces) return;
        int k = cera_tokenizer_piece(t, ids[i], pieces + np, maxp, render);
        REQUIRE(k >= 0 && (size_t)k <= maxp);
        np += (size_t)k;
        int s = cera_detok_push(&d, ids[i], chunk, sizeof chunk);
        REQUIRE(s >= 0);
        memcpy(streamed + ns, chunk, (size_t)s);
        ns += (size_t)s;
        (void)cera_tokenizer_is_eog(t, ids[i]);
    }
    int fl = cera_detok_flush(&d, chunk, sizeof chunk);
    REQUIRE(fl >= 0 && fl <= 3);
    memcpy(streamed + ns, chunk, (size_t)fl);
    ns += (size_t)fl;
    REQUIRE(ns == np && memcmp(streamed, pieces, np) == 0);
    int64_t dl = cera_tokenizer_decode(t, ids, n, streamed, sizeof streamed, add, render);
    REQUIRE(dl >= 0 && (size_t)dl <= np);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init();
    if (size == 0) return 0;
    if (data[0] == 0xff) { /* a GGUF to build a tokenizer from */
        gguf_file *f;
        cera_error err;
        if (gguf_open_memory(data + 1, size - 1, &f, &err) != CERA_OK) return 0;
        cera_tokenizer *t;
        if (cera_tokenizer_load(f, &t, &err) == CERA_OK) {
            static const char text[] = "Hello world <s> 'll 123 \xe4\xbd\xa0\xe5\xa5\xbd \xff\n\n";
            check_text(t, text, sizeof text - 1, true, true, true);
            cera_tokenizer_free(t);
        } else {
            REQUIRE(err.message[0] != 0);
        }
        gguf_close(f);
        return 0;
    }
    const cera_tokenizer *t = g_tok[(data[0] >> 3) % (unsigned)g_n];
    check_text(t, (const char *)data + 1, size - 1, data[0] & 1, data[0] & 2, data[0] & 4);
    return 0;
}

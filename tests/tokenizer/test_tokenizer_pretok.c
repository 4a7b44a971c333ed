/*
 * test_tokenizer_pretok.c — every pre-tokenizer llama.cpp knows (tokenizer.ggml.pre),
 * checked through ids: the gpt-2 vocabulary is re-written in memory with each pre name
 * and must tokenize data/pretok_cases.txt (cases separated by the __ggml_vocab_test__
 * line: words, contractions, digit runs, whitespace of every kind, CJK, combining marks,
 * emoji, special tokens, invalid UTF-8) to exactly the ids llama.cpp gives
 * (data/pretok_expected.txt). This checks the regex steps, llama.cpp's quirks and the
 * flags each name sets (ignore_merges, raw UTF-8 with escaped spaces, ...).
 *
 * Then the "gemma4" model (BPE over raw UTF-8 with U+2581 spaces and <0xNN> bytes): the
 * llama-spm vocabulary with merges made from its own tokens (each normal token, highest
 * score first, split at the first character boundary where both halves are tokens)
 * against data/gemma4_expected.txt.
 */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#define SEP       "\n__ggml_vocab_test__\n"
#define MAX_CASES 64

static const char *cases[MAX_CASES];
static size_t case_len[MAX_CASES];
static int n_cases;

/* The gpt-2 vocabulary with another pre-tokenizer name, loaded from memory. */
static cera_tokenizer *load_with_pre(const gguf_file *base, const char *pre, void **mem, gguf_file **f) {
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < base->n_kv; i++) gguf_writer_set_value(w, base->kv[i].key, &base->kv[i].value);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    size_t size = 0;
    cera_error err = {0};
    cera_tokenizer *tok = NULL;
    *mem = NULL;
    *f = NULL;
    if (gguf_writer_to_memory(w, mem, &size, &err) == CERA_OK &&
        gguf_open_memory(*mem, size, f, &err) == CERA_OK)
        cera_tokenizer_load(*f, &tok, &err);
    CHECK(tok != NULL, "pre '%s': %s", pre, err.message);
    gguf_writer_free(w);
    return tok;
}

/* Compares case i's ids with the expected line; prints the first mismatch of a name. */
static bool check_case(const cera_tokenizer *tok, int i, const char *line, const char *pre, bool *reported) {
    cera_token ids[4096], want[4096];
    size_t n = 0, nw = 0;
    cera_error err = {0};
    cera_tokenizer_encode(tok, cases[i], case_len[i], false, true, ids, 4096, &n, &err);
    for (const char *p = line; *p && *p != '\n' && nw < 4096;) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p) break;
        want[nw++] = (cera_token)v;
        p = e;
    }
    bool same = n == nw && !memcmp(ids, want, n * sizeof(cera_token));
    if (!same && !*reported) {
        *reported = true;
        fprintf(stderr, "pre '%s', case %d: %zu ids, want %zu\n", pre, i, n, nw);
    }
    return same;
}

typedef struct scored {
    float score;
    cera_token id;
} scored;

static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->id - y->id;
}

static void test_gemma4_model(void) {
    const char *vocab = shared_path("vocab/ggml-vocab-llama-spm.gguf");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/tokenizer/data/gemma4_expected.txt", CERA_SOURCE_DIR);
    size_t ne;
    char *expected = read_file(path, &ne);
    gguf_file *f = NULL;
    cera_tokenizer *spm = NULL;
    cera_error err = {0};
    if (!expected || gguf_open(vocab, &f, &err) != CERA_OK || cera_tokenizer_load(f, &spm, &err) != CERA_OK) {
        CHECK(false, "gemma4: cannot load %s or %s: %s", vocab, path, err.message);
        free(expected);
        gguf_close(f);
        return;
    }
    int n = cera_tokenizer_n_vocab(spm), nm = 0;
    scored *order = malloc((size_t)n * sizeof(scored));
    char **merges = malloc((size_t)n * sizeof(char *));
    for (int i = 0; i < n; i++) order[i] = (scored){cera_tokenizer_score(spm, i), i};
    qsort(order, (size_t)n, sizeof(scored), by_score);
    for (int k = 0; k < n; k++) {
        size_t len;
        const char *s = cera_tokenizer_text(spm, order[k].id, &len);
        if (!(cera_tokenizer_attr(spm, order[k].id) & CERA_TOKEN_ATTR_NORMAL) || len < 2) continue;
        for (size_t cut = 1; cut < len; cut++) {
            if (((uint8_t)s[cut] & 0xc0) == 0x80) continue;
            if (cera_tokenizer_find(spm, s, cut) < 0 || cera_tokenizer_find(spm, s + cut, len - cut) < 0)
                continue;
            merges[nm] = malloc(len + 2);
            memcpy(merges[nm], s, cut);
            merges[nm][cut] = ' ';
            memcpy(merges[nm] + cut + 1, s + cut, len - cut);
            merges[nm++][len + 1] = 0;
            break;
        }
    }
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gemma4");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gemma4");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, (uint64_t)nm);
    void *mem = NULL;
    size_t size = 0;
    gguf_file *g = NULL;
    cera_tokenizer *tok = NULL;
    CHECK(gguf_writer_to_memory(w, &mem, &size, &err) == CERA_OK &&
              gguf_open_memory(mem, size, &g, &err) == CERA_OK &&
              cera_tokenizer_load(g, &tok, &err) == CERA_OK,
          "gemma4 vocabulary: %s", err.message);
    const char *l = expected;
    while (l && *l == '#') { /* the header */
        l = strchr(l, '\n');
        if (l) l++;
    }
    int ok = 0;
    bool reported = false;
    for (int i = 0; tok && i < n_cases && l; i++) {
        ok += check_case(tok, i, l, "gemma4 model", &reported);
        l = strchr(l, '\n');
        if (l) l++;
    }
    CHECK(tok && ok == n_cases, "gemma4 model: %d of %d cases exact (%d merges)", ok, n_cases, nm);
    cera_tokenizer_free(tok);
    gguf_close(g);
    free(mem);
    gguf_writer_free(w);
    for (int i = 0; i < nm; i++) free(merges[i]);
    free(merges);
    free(order);
    cera_tokenizer_free(spm);
    gguf_close(f);
    free(expected);
}

int main(void) {
    const char *vocab = shared_path("vocab/ggml-vocab-gpt-2.gguf");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/tokenizer/data/pretok_cases.txt", CERA_SOURCE_DIR);
    size_t nc, ne;
    char *text = read_file(path, &nc);
    snprintf(path, sizeof path, "%s/tests/tokenizer/data/pretok_expected.txt", CERA_SOURCE_DIR);
    char *expected = read_file(path, &ne);
    if (!file_exists(vocab) || !text || !expected) {
        fprintf(stderr, "skipping: missing %s or the data files\n", vocab);
        return TEST_SKIP_CODE;
    }
    for (size_t pos = 0; pos < nc && n_cases < MAX_CASES;) {
        char *next = strstr(text + pos, SEP);
        size_t len = next ? (size_t)(next - (text + pos)) : nc - pos;
        cases[n_cases] = text + pos;
        case_len[n_cases++] = len;
        pos = next ? (size_t)(next - text) + strlen(SEP) : nc;
    }
    gguf_file *base = NULL;
    cera_error err = {0};
    CHECK(gguf_open(vocab, &base, &err) == CERA_OK, "%s: %s", vocab, err.message);
    if (!base) return test_finish();

    int n_names = 0;
    for (char *line = expected; line && *line;) {
        char *eol = strchr(line, '\n');
        if (line[0] != '@') {
            line = eol ? eol + 1 : NULL;
            continue;
        }
        /* "@ name name ...", then one line per case */
        char names[2048];
        size_t nl = eol ? (size_t)(eol - line) : strlen(line);
        snprintf(names, sizeof names, "%.*s", (int)(nl > 2 ? nl - 2 : 0), line + 2);
        const char *body = eol ? eol + 1 : "";
        char *save = NULL;
        for (char *pre = strtok_r(names, " ", &save); pre; pre = strtok_r(NULL, " ", &save)) {
            void *mem;
            gguf_file *f;
            cera_tokenizer *tok = load_with_pre(base, pre, &mem, &f);
            int ok = 0;
            bool reported = false;
            const char *l = body;
            for (int i = 0; tok && i < n_cases && l; i++) {
                ok += check_case(tok, i, l, pre, &reported);
                l = strchr(l, '\n');
                if (l) l++;
            }
            CHECK(tok && ok == n_cases, "pre '%s': %d of %d cases exact", pre, ok, n_cases);
            n_names++;
            cera_tokenizer_free(tok);
            gguf_close(f);
            free(mem);
        }
        for (int i = 0; i < n_cases && body; i++) { /* skip the group's lines */
            body = strchr(body, '\n');
            if (body) body++;
        }
        line = (char *)body;
    }
    fprintf(stderr, "%d pre-tokenizer names, %d cases each\n", n_names, n_cases);
    CHECK(n_names >= 86, "only %d pre-tokenizer names checked", n_names);
    test_gemma4_model();
    gguf_close(base);
    free(text);
    free(expected);
    return test_finish();
}

/*
 * test_tokenizer_vectors.c — every case of every shared vocabulary's llama.cpp test
 * vectors (../shared/vocab/X.gguf.inp / .out, made with add_special and parse_special
 * off) must give exactly the expected ids; detokenizing them must give the text back
 * where the vocabulary is lossless. The first mismatch of a vocabulary is printed with
 * the expected and the actual ids.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#define SEP "\n__ggml_vocab_test__\n"

static void print_ids(const char *what, const cera_token *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Concatenated pieces (no clean-up), minus SPM's leading space. */
static char *pieces_text(const cera_tokenizer *tok, const cera_token *ids, size_t n, size_t *len) {
    size_t cap = 16, o = 0;
    for (size_t i = 0; i < n; i++) cap += cera_tokenizer_max_piece_len(tok);
    char *s = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        int k = cera_tokenizer_piece(tok, ids[i], s + o, cap - o, false);
        if (k > 0) o += (size_t)k;
    }
    if (cera_tokenizer_type(tok) == CERA_VOCAB_SPM && o && s[0] == ' ') memmove(s, s + 1, --o);
    *len = o;
    return s;
}

static void check_vocab(const char *name) {
    char path[512], inp[600], outp[600];
    snprintf(path, sizeof path, "%s", shared_path(name));
    snprintf(inp, sizeof inp, "%s.inp", path);
    snprintf(outp, sizeof outp, "%s.out", path);
    size_t ni, no;
    char *in = read_file(inp, &ni), *out = read_file(outp, &no);
    CHECK(in && out, "%s: cannot read the .inp/.out files", name);
    if (!in || !out) return;

    gguf_file *f = NULL;
    cera_tokenizer *tok = NULL;
    cera_error err = {0};
    CHECK(gguf_open(path, &f, &err) == CERA_OK, "%s: %s", name, err.message);
    if (!f) goto done;
    CHECK(cera_tokenizer_load(f, &tok, &err) == CERA_OK, "%s: %s", name, err.message);
    if (!tok) goto done;
    bool lossless = cera_tokenizer_type(tok) != CERA_VOCAB_WPM;

    size_t pos = 0, opos = 0, n_cases = 0, n_ok = 0, n_rt = 0, n_rt_ok = 0;
    bool reported = false;
    cera_token *ids = malloc(65536 * sizeof(cera_token));
    cera_token *want = malloc(65536 * sizeof(cera_token));
    while (pos < ni) {
        char *next = strstr(in + pos, SEP);
        size_t len = next ? (size_t)(next - (in + pos)) : ni - pos;
        const char *text = in + pos;
        pos = next ? (size_t)(next - in) + strlen(SEP) : ni;

        /* the expected line */
        size_t nw = 0;
        char *line_end = memchr(out + opos, '\n', no - opos);
        size_t lend = line_end ? (size_t)(line_end - out) : no;
        for (char *p = out + opos; p < out + lend;) {
            char *e;
            long v = strtol(p, &e, 10);
            if (e == p) break;
            want[nw++] = (cera_token)v;
            p = e;
        }
        opos = lend + 1;

        size_t n = 0;
        cera_status st = cera_tokenizer_encode(tok, text, len, false, false, ids, 65536, &n, &err);
        bool same = st == CERA_OK && n == nw && memcmp(ids, want, n * sizeof(cera_token)) == 0;
        n_cases++;
        n_ok += same;
        if (!same && !reported) {
            reported = true;
            fprintf(stderr, "%s: case %zu differs: '%.*s'\n", name, n_cases, (int)len, text);
            print_ids("expected", want, nw);
            print_ids("got     ", ids, n);
        }
        if (lossless && st == CERA_OK) {
            size_t rl;
            char *back = pieces_text(tok, ids, n, &rl);
            bool rt = rl == len && memcmp(back, text, len) == 0;
            n_rt++;
            n_rt_ok += rt;
            if (!rt)
                fprintf(stderr, "%s: round trip of case %zu gives '%.*s'\n", name, n_cases, (int)rl, back);
            free(back);
        }
    }
    CHECK(n_ok == n_cases && n_cases > 0, "%s: %zu of %zu cases exact", name, n_ok, n_cases);
    CHECK(n_rt_ok == n_rt, "%s: %zu of %zu round trips exact", name, n_rt_ok, n_rt);
    fprintf(stderr, "%s: %zu/%zu cases exact, %zu/%zu round trips\n", name, n_ok, n_cases, n_rt_ok, n_rt);
    free(ids);
    free(want);
done:
    cera_tokenizer_free(tok);
    gguf_close(f);
    free(in);
    free(out);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    DIR *d = opendir(shared_path("vocab"));
    if (!d) {
        fprintf(stderr, "no %s\n", shared_path("vocab"));
        return TEST_SKIP_CODE;
    }
    char *names[256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 9 && !strcmp(e->d_name + l - 9, ".gguf.inp")) {
            char buf[300];
            snprintf(buf, sizeof buf, "vocab/%.*s", (int)(l - 4), e->d_name);
            names[n++] = strdup(buf);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    CHECK(n >= 10, "expected the shared vocabularies, found %d", n);
    for (int i = 0; i < n; i++) {
        check_vocab(names[i]);
        free(names[i]);
    }
    return test_finish();
}

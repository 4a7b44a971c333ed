/*
 * test_tokenize_cli.c — `cera tokenize`: the exact --ids format (one line, every id
 * after one space), the default "id -> 'piece'" lines, -f read byte for byte (CR LF,
 * invalid UTF-8, a NUL), --stdin, --count, and the errors (no model, a bad file, an
 * unknown option) that must exit non-zero with a "cera" message, never by a signal.
 */
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

#define CERA_EXE CERA_BINARY_DIR "/tools/cera/cera"

static char *run_capture(const char *args, int *status) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s tokenize %s > tok_cli.out 2> tok_cli.err", CERA_EXE, args);
    *status = run_command(cmd);
    size_t n;
    return read_file("tok_cli.out", &n);
}

int main(void) {
    const char *spm = shared_path("vocab/ggml-vocab-llama-spm.gguf");
    if (!file_exists(CERA_EXE) || !file_exists(spm)) {
        fprintf(stderr, "skipping: no %s or %s\n", CERA_EXE, spm);
        return TEST_SKIP_CODE;
    }
    char args[1024];
    int st;

    /* --ids: exactly one line, ids each preceded by one space */
    snprintf(args, sizeof args, "-m %s -p 'ied 4 \xc2\xbd months' --ids --no-add-special", spm);
    char *out = run_capture(args, &st);
    CHECK(st == 0 && out && !strcmp(out, " 474 287 29871 29946 29871 30226 7378\n"), "--ids output: '%s'",
          out ? out : "(none)");
    free(out);

    /* with special tokens: BOS added, <s> parsed (llama-tokenize's defaults) */
    snprintf(args, sizeof args, "-m %s -p '<s>Hello world' --ids", spm);
    out = run_capture(args, &st);
    CHECK(st == 0 && out && !strcmp(out, " 1 1 15043 3186\n"), "specials: '%s'", out ? out : "(none)");
    free(out);
    snprintf(args, sizeof args, "-m %s -p '<s>Hi' --ids --no-parse-special", spm);
    out = run_capture(args, &st);
    CHECK(st == 0 && out && !strcmp(out, " 1 529 29879 29958 18567\n"), "--no-parse-special: '%s'",
          out ? out : "(none)");
    free(out);

    /* the default listing */
    snprintf(args, sizeof args, "-m %s -p 'Hello world'", spm);
    out = run_capture(args, &st);
    CHECK(st == 0 && out && !strcmp(out, "     1 -> '<s>'\n 15043 -> ' Hello'\n  3186 -> ' world'\n"),
          "listing: '%s'", out ? out : "(none)");
    free(out);

    /* -f byte for byte, and --stdin, against the library */
    static const char text[] = "line one\r\nline\ttwo \xff\xc3 \0 end\n\n";
    size_t tl = sizeof text - 1;
    FILE *f = fopen("tok_cli.in", "wb");
    CHECK(f && fwrite(text, 1, tl, f) == tl, "write the input file");
    if (f) fclose(f);
    gguf_file *gf = NULL;
    cera_tokenizer *tok = NULL;
    cera_error err = {0};
    CHECK(gguf_open(spm, &gf, &err) == CERA_OK && cera_tokenizer_load(gf, &tok, &err) == CERA_OK, "load: %s",
          err.message);
    cera_token ids[128];
    size_t n = 0;
    if (tok) cera_tokenizer_encode(tok, text, tl, true, true, ids, 128, &n, &err);
    char want[2048] = "";
    size_t w = 0;
    for (size_t i = 0; i < n; i++) w += (size_t)snprintf(want + w, sizeof want - w, " %d", ids[i]);
    snprintf(want + w, sizeof want - w, "\n");
    snprintf(args, sizeof args, "-m %s -f tok_cli.in --ids", spm);
    out = run_capture(args, &st);
    CHECK(st == 0 && out && n > 10 && !strcmp(out, want), "-f: '%s' want '%s'", out ? out : "(none)", want);
    free(out);
    snprintf(args, sizeof args, "-m %s --stdin --ids < tok_cli.in", spm);
    out = run_capture(args, &st);
    CHECK(st == 0 && out && !strcmp(out, want), "--stdin: '%s'", out ? out : "(none)");
    free(out);
    snprintf(args, sizeof args, "-m %s -f tok_cli.in --count", spm);
    out = run_capture(args, &st);
    char count[32];
    snprintf(count, sizeof count, "%zu\n", n);
    CHECK(st == 0 && out && !strcmp(out, count), "--count: '%s'", out ? out : "(none)");
    free(out);
    cera_tokenizer_free(tok);
    gguf_close(gf);

    /* errors: a message, a non-zero exit, no signal */
    out = run_capture("-p hi", &st);
    CHECK(st > 0, "no model: exit %d", st);
    free(out);
    out = run_capture("-m /nonexistent.gguf -p hi", &st);
    size_t en;
    char *e = read_file("tok_cli.err", &en);
    CHECK(st == 1 && e && !strncmp(e, "cera: ", 6), "bad file: exit %d, '%s'", st, e ? e : "");
    free(e);
    free(out);
    snprintf(args, sizeof args, "-m %s -p hi --bogus", spm);
    out = run_capture(args, &st);
    CHECK(st == 2, "unknown option: exit %d", st);
    free(out);
    snprintf(args, sizeof args, "-m %s -p hi -f tok_cli.in", spm);
    out = run_capture(args, &st);
    CHECK(st == 2, "two inputs: exit %d", st);
    free(out);
    out = run_capture("--help", &st);
    CHECK(st == 0 && out && strstr(out, "usage: cera tokenize"), "--help");
    free(out);
    return test_finish();
}

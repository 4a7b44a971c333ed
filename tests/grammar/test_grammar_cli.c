/*
 * test_grammar_cli.c — `cera grammar`: --check exits 0 for an accepted input, 1 with
 * "reject at N" for a rejected one, 2 for a grammar that does not load; --json-schema
 * prints a grammar that loads; `<token>` elements need -m MODEL (SmolLM2's vocabulary, when
 * fetched); usage errors exit 2. Never by a signal.
 */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define CERA_EXE CERA_BINARY_DIR "/tools/cera/cera"

static int run(const char *args, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s grammar %s > gram_cli.out 2> gram_cli.err", CERA_EXE, args);
    int st = run_command(cmd);
    size_t n;
    *out = read_file("gram_cli.out", &n);
    return st;
}

static void write(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

int main(void) {
    if (!file_exists(CERA_EXE)) {
        fprintf(stderr, "skipping: no %s\n", CERA_EXE);
        return TEST_SKIP_CODE;
    }
    char args[8192], *out;
    const char *g = shared_path("golden/grammar/000.gbnf");
    write("gram_ok.txt", "a = b\n");
    write("gram_bad.txt", "a = b\nx");
    write("gram_utf8.txt", "\xc3\xa9t\xc3\xa9");
    write("gram_g.gbnf", "root ::= [a-z\\u00e9]+");
    write("gram_broken.gbnf", "root ::= (\"a\"");
    snprintf(args, sizeof args, "--grammar %s --check gram_ok.txt", g);
    CHECK(run(args, &out) == 0, "accepted input");
    free(out);
    snprintf(args, sizeof args, "--grammar %s --check gram_bad.txt", g);
    CHECK(run(args, &out) == 1 && out && !strcmp(out, "reject at 7\n"), "reject: '%s'", out ? out : "");
    free(out);
    CHECK(run("--grammar gram_g.gbnf --check gram_utf8.txt", &out) == 0, "UTF-8 input");
    free(out);
    CHECK(run("-g gram_g.gbnf -c gram_ok.txt", &out) == 1 && out && !strcmp(out, "reject at 1\n"), "'%s'",
          out ? out : "");
    free(out);
    CHECK(run("--grammar gram_broken.gbnf --check gram_ok.txt", &out) == 2, "bad grammar exits 2");
    free(out);
    CHECK(run("--grammar no-such-file.gbnf --check gram_ok.txt", &out) == 2, "missing grammar exits 2");
    free(out);
    snprintf(args, sizeof args, "--json-schema %s", shared_path("golden/json-schema/008.schema.json"));
    CHECK(run(args, &out) == 0 && out && strstr(out, "root ::= "), "--json-schema prints a grammar");
    if (out) write("gram_schema.gbnf", out);
    free(out);
    write("gram_obj.txt", "{\"name\": \"x\", \"age\": 3}");
    CHECK(run("--grammar gram_schema.gbnf --check gram_obj.txt", &out) == 0, "the schema's grammar accepts");
    free(out);
    snprintf(args, sizeof args, "--json-schema %s --check gram_ok.txt",
             shared_path("golden/json-schema/008.schema.json"));
    CHECK(run(args, &out) == 1 && out && !strcmp(out, "reject at 0\n"), "schema --check: '%s'",
          out ? out : "");
    free(out);
    /* <token> text: refused without a vocabulary, resolved with a model's */
    write("gram_tok.gbnf", "root ::= <|im_start|> \"a\" | \"b\"");
    write("gram_b.txt", "b");
    CHECK(run("--grammar gram_tok.gbnf --check gram_b.txt", &out) == 2,
          "<token> without a vocabulary loaded");
    free(out);
    const char *model = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (file_exists(model)) {
        snprintf(args, sizeof args, "-m %s --grammar gram_tok.gbnf --check gram_b.txt", model);
        CHECK(run(args, &out) == 0, "<|im_start|> with SmolLM2's vocabulary");
        free(out);
        write("gram_tok2.gbnf", "root ::= <not-one-token-at-all> \"a\"");
        snprintf(args, sizeof args, "-m %s --grammar gram_tok2.gbnf", model);
        CHECK(run(args, &out) == 2, "a text of several tokens loaded");
        free(out);
    }
    CHECK(run("--bogus", &out) == 2, "usage error");
    free(out);
    CHECK(run("", &out) == 2, "no grammar");
    free(out);
    return test_finish();
}

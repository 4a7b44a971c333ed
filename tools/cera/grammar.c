/*
 * grammar.c — `cera grammar`: GBNF grammars and JSON Schema conversion (src/grammar).
 *
 *   cera grammar --grammar FILE --check INPUT   exit 0: INPUT is accepted; 1: rejected, with
 *                                               "reject at N" (N: 0-based code point) on
 *                                               stdout; 2: the grammar does not load
 *   cera grammar --grammar FILE                 loads the grammar (exit 0) or says why not (2)
 *   cera grammar --json-schema SCHEMA.json      prints the GBNF grammar of the schema
 *   cera grammar --json-schema SCHEMA.json --check INPUT   converts, then checks INPUT
 *
 * With -m MODEL, `<text>` token elements are resolved against the model's vocabulary (the
 * text must be exactly one token, special tokens included, as llama.cpp asks); only the
 * tokenizer is used.
 * Verdicts are those of llama.cpp's test-gbnf-validator. Both files are read byte for byte.
 * A matcher limit (a grammar too ambiguous for the input) exits 3.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "prompt.h"
#include "grammar/grammar.h"

static void usage(FILE *out) {
    fprintf(out, "usage: cera grammar (--grammar FILE | --json-schema FILE) [--check INPUT] [-m MODEL]\n"
                 "\n"
                 "Loads a GBNF grammar (llama.cpp's syntax) or converts a JSON Schema to one\n"
                 "(as llama.cpp's json_schema_to_grammar), and checks a text against it.\n"
                 "\n"
                 "  -g, --grammar FILE    a GBNF grammar (start rule: root)\n"
                 "  -m, --model FILE      a GGUF model whose vocabulary resolves <token> elements\n"
                 "  -j, --json-schema FILE  a JSON Schema; without --check the grammar is printed\n"
                 "  -c, --check FILE      the text to check (UTF-8): exit 0 accepted, 1 rejected\n"
                 "                        (stdout: reject at N, N the 0-based code point), 2 the\n"
                 "                        grammar does not load, 3 a matcher limit was reached\n"
                 "  -h, --help            this help\n");
}

/* The id of the single token text is (special tokens parsed), or -1. */
static int32_t token_of_text(void *user, const char *text, size_t len) {
    cera_token toks[2];
    size_t n = 0;
    if (cera_tokenize(user, text, len, false, true, toks, 2, &n, NULL) != CERA_OK || n != 1) return -1;
    return toks[0];
}

typedef struct grammar_opts {
    const char *gpath, *spath, *check, *model;
} grammar_opts;

static int grammar_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    grammar_opts *o = user;
    const char *a = argv[*i];
    const char **dst = !strcmp(a, "-g") || !strcmp(a, "--grammar")       ? &o->gpath
                       : !strcmp(a, "-m") || !strcmp(a, "--model")       ? &o->model
                       : !strcmp(a, "-j") || !strcmp(a, "--json-schema") ? &o->spath
                       : !strcmp(a, "-c") || !strcmp(a, "--check")       ? &o->check
                                                                         : NULL;
    return dst ? cli_take_value(cmd, argc, argv, i, dst) : 0;
}

int cmd_grammar(int argc, char **argv) {
    grammar_opts o = {NULL, NULL, NULL, NULL};
    cli_args args;
    cli_args_init(&args);
    const int pr = cli_parse("grammar", 0, argc, argv, &args, grammar_extra, &o, NULL, NULL);
    if (pr == 1) usage(stdout);
    if (pr) return pr == 1 ? 0 : pr;
    const char *gpath = o.gpath, *spath = o.spath, *check = o.check, *model = o.model;
    if ((gpath != NULL) + (spath != NULL) != 1)
        return cli_usage_error("grammar", "give exactly one of --grammar FILE, --json-schema FILE");

    cera_error err = {0};
    int rc = 2;
    size_t len = 0, in_len = 0;
    char *text = NULL, *gbnf = NULL, *input = NULL;
    cera_grammar *g = NULL;
    cera_engine *engine = NULL;
    cera_grammar_vocab vocab = {NULL, token_of_text};
    const char *src = gpath ? gpath : spath;
    if (model) {
        cera_engine_params ep = cera_engine_default_params();
        ep.n_ctx = 16;
        ep.n_seq_max = 1;
        ep.device = CERA_DEVICE_CPU;
        if (cera_engine_open(model, &ep, &engine, &err) != CERA_OK) {
            fprintf(stderr, "cera: %s\n", err.message);
            goto done;
        }
        vocab.user = engine;
    }
    if (!(text = cli_read_file(src, &len, &err))) {
        fprintf(stderr, "cera: %s\n", err.message);
        goto done;
    }
    if (spath) {
        if (cera_json_schema_to_gbnf(text, len, &gbnf, &err) != CERA_OK) {
            fprintf(stderr, "cera: %s: %s\n", spath, err.message);
            goto done;
        }
        if (!check) {
            rc = fputs(gbnf, stdout) >= 0 && fflush(stdout) == 0 ? 0 : 1;
            goto done;
        }
    }
    if (cera_grammar_parse(gbnf ? gbnf : text, gbnf ? strlen(gbnf) : len, engine ? &vocab : NULL, &g, &err) !=
        CERA_OK) {
        fprintf(stderr, "cera: %s: %s\n", src, err.message);
        goto done;
    }
    if (!check) {
        rc = 0;
        goto done;
    }
    if (!(input = cli_read_file(check, &in_len, &err))) {
        fprintf(stderr, "cera: %s\n", err.message);
        rc = 2;
        goto done;
    }
    bool ok;
    size_t at;
    if (cera_grammar_check(g, input, in_len, &ok, &at, &err) != CERA_OK) {
        fprintf(stderr, "cera: %s: %s\n", check, err.message);
        rc = 3;
        goto done;
    }
    if (ok) {
        rc = 0;
    } else {
        printf("reject at %zu\n", at);
        rc = 1;
    }
done:
    cera_grammar_free(g);
    cera_engine_close(engine);
    free(input);
    free(gbnf);
    free(text);
    return rc;
}

/*
 * logits.c — `cera logits`: the logits of every prompt position, for comparing with
 * llama.cpp (the format of the shared goldens: raw little-endian float32,
 * n_tokens × n_vocab, row after row).
 *
 * The prompt is evaluated as one batch (split at n_batch) with every position's
 * logits kept. -p/-f text is tokenized as llama.cpp does (BOS when the metadata asks);
 * --tokens takes ids as they are.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/fileio.h"
#include "lora_cli.h"
#include "prompt.h"

static void help(FILE *out) {
    fprintf(out, "usage: cera logits -m MODEL (-p TEXT | -f FILE | --tokens FILE) -o OUT [options]\n\n"
                 "Writes the logits of every prompt position as raw little-endian float32,\n"
                 "n_tokens x n_vocab, row after row.\n\n" CLI_ENGINE_HELP
                 "  --tokens FILE         token ids, one per line, used as they are (no BOS added)\n"
                 "  -o OUT                the output file\n" CLI_LORA_HELP);
}

int cmd_logits(int argc, char **argv) {
    const char *tokfile = NULL, *outp = NULL;
    cli_engine_opts o;
    cli_engine_opts_init(&o);
    cli_lora_list lora = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        }
        const int lr = cli_lora_parse("logits", argc, argv, &i, &lora);
        if (lr) {
            if (lr < 0) return 2;
            continue;
        }
        const int er = cli_engine_opt("logits", argc, argv, &i, &o);
        if (er) {
            if (er < 0) return 2;
            continue;
        }
        if (i + 1 >= argc) return cli_usage_error("logits", "unknown option or missing value: %s", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--tokens"))
            tokfile = v;
        else if (!strcmp(a, "-o"))
            outp = v;
        else
            return cli_usage_error("logits", "unknown option: %s", a);
    }
    const char *model = o.model, *text = o.text, *file = o.file;
    if (!model || !outp) return cli_usage_error("logits", "-m MODEL and -o OUT are required (see --help)");
    if (!!text + !!file + !!tokfile != 1)
        return cli_usage_error("logits", "give exactly one of -p TEXT, -f FILE, --tokens FILE");

    cera_error err = {0};
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_token *toks = NULL;
    size_t n = 0;
    char *buf = NULL;
    int rc = 1;
    /* the output must not be one of the inputs (compared as files, not as names) */
    if (cera_check_not_input(outp, model, "the model", &err) ||
        (file && cera_check_not_input(outp, file, "the prompt file", &err)) ||
        (tokfile && cera_check_not_input(outp, tokfile, "the tokens file", &err)) ||
        cli_lora_check_output(&lora, outp, &err))
        goto done;
    if (cera_engine_open(model, &o.ep, &e, &err)) goto done;
    cli_warn_context(e, &o);
    if (tokfile) {
        if (cli_read_tokens(tokfile, &toks, &n, &err)) goto done;
    } else {
        size_t len = 0;
        if (file) {
            buf = cli_read_prompt(file, &len, &err);
            if (!buf) goto done;
            text = buf;
        } else {
            len = strlen(text);
        }
        if (cli_tokenize(e, text, len, &toks, &n, &err)) goto done;
    }
    if (n == 0) {
        fprintf(stderr, "cera: the prompt has no tokens\n");
        goto done_quiet;
    }
    if (cera_session_create(e, NULL, &s, &err)) goto done;
    if (cli_lora_attach(e, s, &lora, &err)) goto done;
    if (cera_session_eval(s, toks, n, true, &err)) goto done;
    /* a regular file is replaced when complete; a device or FIFO (/dev/stdout) is written to */
    cera_outfile of;
    if (cera_outfile_open(&of, outp, true, &err)) goto done;
    FILE *f = cera_outfile_stream(&of);
    const size_t nv = (size_t)cera_engine_n_vocab(e);
    bool ok = f != NULL;
    for (size_t i = 0; i < n && ok; i++)
        ok = fwrite(cera_session_logits(s, (int)i), sizeof(float), nv, f) == nv;
    if (!ok) {
        cera_outfile_abort(&of);
        fprintf(stderr, "cera: %s: write error\n", outp);
        goto done_quiet;
    }
    if (cera_outfile_commit(&of, &err)) goto done;
    fprintf(stderr, "cera: wrote %zu x %zu logits to %s\n", n, nv, outp);
    rc = 0;
    goto done_quiet;
done:
    rc = cli_fail(&err);
done_quiet:
    free(toks);
    free(buf);
    cera_session_free(s);
    cera_engine_close(e);
    return rc;
}

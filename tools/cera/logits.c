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

#include "args.h"
#include "cli.h"
#include "core/fileio.h"
#include "lora_cli.h"
#include "prompt.h"

#define LOGITS_GROUPS (CLI_G_MODEL | CLI_G_PROMPT | CLI_G_LORA)

typedef struct logits_opts {
    const char *tokfile, *outp;
} logits_opts;

static int logits_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    logits_opts *lo = user;
    const char *a = argv[*i];
    const char **dst = !strcmp(a, "--tokens")                         ? &lo->tokfile
                       : (!strcmp(a, "-o") || !strcmp(a, "--output")) ? &lo->outp
                                                                      : NULL;
    return dst ? cli_take_value(cmd, argc, argv, i, dst) : 0;
}

int cmd_logits(int argc, char **argv) {
    cli_args o;
    cli_args_init(&o);
    logits_opts lo = {NULL, NULL};
    int rc = cli_parse("logits", LOGITS_GROUPS, argc, argv, &o, logits_extra, &lo,
                       "usage: cera logits -m MODEL (-p TEXT | -f FILE | --tokens FILE) -o OUT [options]\n\n"
                       "Writes the logits of every prompt position as raw little-endian float32,\n"
                       "n_tokens x n_vocab, row after row.\n",
                       "  --tokens FILE         token ids, one per line, used as they are (no BOS added)\n"
                       "  -o, --output OUT      the output file\n");
    if (rc) return rc == 1 ? 0 : rc;
    if ((rc = cli_args_finish("logits", LOGITS_GROUPS, &o))) goto out_args;
    rc = 2;
    const char *model = o.model, *tokfile = lo.tokfile, *outp = lo.outp, *file = o.file;
    if (!model || !outp) {
        cli_usage_error("logits", "-m MODEL and -o OUT are required (see --help)");
        goto out_args;
    }
    if (!!o.prompt + !!file + !!tokfile != 1) {
        cli_usage_error("logits", "give exactly one of -p TEXT, -f FILE, --tokens FILE");
        goto out_args;
    }

    cera_error err = {0};
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_token *toks = NULL;
    size_t n = 0;
    char *buf = NULL;
    rc = 1;
    /* the output must not be one of the inputs (compared as files, not as names) */
    if (cera_check_not_input(outp, model, "the model", &err) ||
        (file && strcmp(file, "-") && cera_check_not_input(outp, file, "the prompt file", &err)) ||
        (tokfile && cera_check_not_input(outp, tokfile, "the tokens file", &err)) ||
        cli_lora_check_output(&o.lora, outp, &err))
        goto done;
    if (cera_engine_open(model, &o.ep, &e, &err)) goto done;
    cli_warn_context(e, o.ep.n_ctx);
    if (tokfile) {
        if (cli_read_tokens(tokfile, &toks, &n, &err)) goto done;
    } else {
        size_t len = 0;
        const char *text = cli_args_prompt(&o, &len, &buf, &err);
        if (!text) goto done;
        if (cli_tokenize(e, text, len, &toks, &n, &err)) goto done;
    }
    if (n == 0) {
        fprintf(stderr, "cera: the prompt has no tokens\n");
        goto done_quiet;
    }
    if (cera_session_create(e, NULL, &s, &err)) goto done;
    if (cli_lora_attach(e, s, &o.lora, &err)) goto done;
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
out_args:
    cli_args_free(&o);
    return rc;
}

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
#include "lora_cli.h"
#include "prompt.h"

static void help(FILE *out) {
    fprintf(out, "usage: cera logits -m MODEL (-p TEXT | -f FILE | --tokens FILE) -o OUT [options]\n\n"
                 "Writes the logits of every prompt position as raw little-endian float32,\n"
                 "n_tokens x n_vocab, row after row.\n\n"
                 "  -m MODEL         a GGUF model\n"
                 "  -p TEXT          the prompt\n"
                 "  -f FILE          the prompt, from a file\n"
                 "  --tokens FILE    token ids, one per line, used as they are (no BOS added)\n"
                 "  -o OUT           the output file\n"
                 "  -t N             threads (default: one per core)\n"
                 "  -c N             context size (default: the model's, at most 4096)\n"
                 "  --kv f16|f32     KV cache type (default f16, as llama.cpp)\n"
                 "  --device D       cpu, cuda or auto (default: cuda when built in and a GPU "
                 "exists)\n" CLI_LORA_HELP);
}

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *tokfile = NULL, *outp = NULL;
    cera_engine_params ep = cera_engine_default_params();
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
        if (i + 1 >= argc) return cli_usage_error("logits", "unknown option or missing value: %s", a);
        const char *v = argv[++i];
        if (!strcmp(a, "-m"))
            model = v;
        else if (!strcmp(a, "-p"))
            text = v;
        else if (!strcmp(a, "-f"))
            file = v;
        else if (!strcmp(a, "--tokens"))
            tokfile = v;
        else if (!strcmp(a, "-o"))
            outp = v;
        else if (!strcmp(a, "-t"))
            ep.n_threads = atoi(v);
        else if (!strcmp(a, "-c"))
            ep.n_ctx = atoi(v);
        else if (!strcmp(a, "--kv")) {
            if (!strcmp(v, "f16"))
                ep.kv_type = CERA_KV_F16;
            else if (!strcmp(v, "f32"))
                ep.kv_type = CERA_KV_F32;
            else
                return cli_usage_error("logits", "--kv takes f16 or f32, not '%s'", v);
        } else if (!strcmp(a, "--device")) {
            if (!cli_parse_device(v, &ep.device))
                return cli_usage_error("logits", "--device takes cpu, cuda or auto, not '%s'", v);
        } else
            return cli_usage_error("logits", "unknown option: %s", a);
    }
    if (!model || !outp) return cli_usage_error("logits", "-m MODEL and -o OUT are required (see --help)");
    if (!!text + !!file + !!tokfile != 1)
        return cli_usage_error("logits", "give exactly one of -p TEXT, -f FILE, --tokens FILE");
    if (ep.n_threads < 0 || ep.n_ctx < 0) return cli_usage_error("logits", "-t and -c must be >= 0");

    cera_error err = {0};
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_token *toks = NULL;
    size_t n = 0;
    char *buf = NULL;
    int rc = 1;
    if (cera_engine_open(model, &ep, &e, &err)) goto done;
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
    FILE *f = fopen(outp, "wb");
    if (!f) {
        fprintf(stderr, "cera: %s: cannot open for writing\n", outp);
        goto done_quiet;
    }
    const size_t nv = (size_t)cera_engine_n_vocab(e);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++)
        ok = fwrite(cera_session_logits(s, (int)i), sizeof(float), nv, f) == nv;
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "cera: %s: write error\n", outp);
        goto done_quiet;
    }
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

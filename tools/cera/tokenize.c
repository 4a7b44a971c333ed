/*
 * tokenize.c — `cera tokenize -m MODEL (-p TEXT | -f FILE | --stdin) [options]`: the
 * token ids of a text, as llama.cpp's llama-tokenize gives them.
 *
 * Only the tokenizer is loaded (through src/tokenizer, not the engine), so vocabulary-
 * only GGUF files work and no weights are mapped. As llama-tokenize, special tokens
 * (BOS/EOS, bert's CLS/SEP) are added when the model adds BOS, and special-token texts
 * in the input become their tokens; --no-add-special and --no-parse-special turn those
 * off. Input from -f and --stdin is used byte for byte; -p text too unless --escape
 * (llama-tokenize's default) asks for \n, \t, \\, \xNN... to be processed.
 *
 * Output: one line per token, "%6d -> '<piece>'" (llama-tokenize's format); with --ids
 * exactly one line, every id preceded by one space; with --count only the number of
 * tokens (and, on stderr, the speed) — for benchmarking.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "cli.h"
#include "gguf/gguf.h"
#include "prompt.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *out) {
    fprintf(out, "usage: cera tokenize -m MODEL (-p TEXT | -f FILE | --stdin) [options]\n"
                 "\n"
                 "Prints the token ids of a text (llama-tokenize's results).\n"
                 "\n"
                 "  -m, --model FILE      GGUF file (a vocabulary-only file is enough)\n"
                 "  -p, --prompt TEXT     the text\n"
                 "  -f, --file FILE       read the text from FILE, byte for byte\n"
                 "      --stdin           read the text from standard input, byte for byte\n"
                 "      --ids             print only the ids, on one line, each after a space\n"
                 "      --count           print only the number of tokens (speed on stderr)\n"
                 "      --no-add-special  do not add BOS/EOS (or bert's CLS/SEP)\n"
                 "      --no-parse-special  special-token texts are plain text\n"
                 "  -e, --escape          process escapes (\\n, \\t, \\\\, \\xNN, ...) in -p TEXT\n"
                 "  -h, --help            this help\n");
}

static char *read_stream(FILE *f, size_t *len, bool *too_big) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
        if (n > CLI_READ_MAX) { /* -f /dev/zero: never read without bound */
            *too_big = true;
            free(buf);
            return NULL;
        }
        if (n == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

typedef struct tok_opts {
    const char *model, *prompt, *file;
    bool use_stdin, ids_only, count_only, add_special, parse_special, escape;
} tok_opts;

static int tok_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    tok_opts *o = user;
    const char *a = argv[*i];
    const char **dst = !strcmp(a, "-m") || !strcmp(a, "--model")    ? &o->model
                       : !strcmp(a, "-p") || !strcmp(a, "--prompt") ? &o->prompt
                       : !strcmp(a, "-f") || !strcmp(a, "--file")   ? &o->file
                                                                    : NULL;
    if (dst) return cli_take_value(cmd, argc, argv, i, dst);
    if (!strcmp(a, "--stdin")) {
        o->use_stdin = true;
    } else if (!strcmp(a, "--ids")) {
        o->ids_only = true;
    } else if (!strcmp(a, "--count")) {
        o->count_only = true;
    } else if (!strcmp(a, "--no-add-special") || !strcmp(a, "--no-bos")) {
        o->add_special = false;
    } else if (!strcmp(a, "--no-parse-special")) {
        o->parse_special = false;
    } else if (!strcmp(a, "-e") || !strcmp(a, "--escape")) {
        o->escape = true;
    } else {
        return 0;
    }
    return 1;
}

int cmd_tokenize(int argc, char **argv) {
    tok_opts o = {.add_special = true, .parse_special = true};
    cli_args args;
    cli_args_init(&args);
    const int pr = cli_parse("tokenize", 0, argc, argv, &args, tok_extra, &o, NULL, NULL);
    if (pr == 1) usage(stdout);
    if (pr) return pr == 1 ? 0 : pr;
    const char *model = o.model, *prompt = o.prompt, *file = o.file;
    const bool use_stdin = o.use_stdin, ids_only = o.ids_only, count_only = o.count_only;
    bool add_special = o.add_special;
    const bool parse_special = o.parse_special, escape = o.escape;
    if (!model) return cli_usage_error("tokenize", "no model (-m FILE)");
    if ((prompt != NULL) + (file != NULL) + use_stdin != 1)
        return cli_usage_error("tokenize", "give exactly one of -p TEXT, -f FILE, --stdin");

    size_t len = 0;
    char *text = NULL;
    bool too_big = false;
    if (prompt) {
        len = strlen(prompt);
        text = malloc(len + 1);
        if (text) memcpy(text, prompt, len + 1);
        if (text && escape) len = cli_unescape(text, len);
    } else if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            fprintf(stderr, "cera: %s: %s\n", file, strerror(errno));
            return 1;
        }
        text = read_stream(f, &len, &too_big);
        fclose(f);
    } else {
        text = read_stream(stdin, &len, &too_big);
    }
    if (!text) {
        if (too_big)
            fprintf(stderr,
                    "cera: %s: longer than the limit of " CLI_READ_MAX_TEXT " for a text to tokenize\n",
                    file ? file : "stdin");
        else
            fprintf(stderr, "cera: %s: cannot read the input text: %s\n", file ? file : "stdin",
                    strerror(errno));
        return 1;
    }

    cera_error err = {0};
    gguf_file *gf = NULL;
    cera_tokenizer *tok = NULL;
    cera_token *ids = NULL;
    int rc = 1;
    if (gguf_open(model, &gf, &err) != CERA_OK) goto done;
    if (cera_tokenizer_load(gf, &tok, &err) != CERA_OK) {
        cera_error_prefix(&err, "%s", model);
        goto done;
    }
    /* llama-tokenize adds special tokens only when the model adds BOS */
    add_special = add_special && cera_tokenizer_add_bos(tok);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t n = 0, cap = len / 2 + 16;
    ids = malloc(cap * sizeof(cera_token));
    if (!ids) {
        cera_fail(&err, CERA_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    cera_status st = cera_tokenizer_encode(tok, text, len, add_special, parse_special, ids, cap, &n, &err);
    if (st == CERA_ERR_INVALID_ARG && n > cap) {
        cera_token *more = realloc(ids, n * sizeof(cera_token));
        if (!more) {
            cera_fail(&err, CERA_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        ids = more;
        cap = n;
        st = cera_tokenizer_encode(tok, text, len, add_special, parse_special, ids, cap, &n, &err);
    }
    if (st != CERA_OK) goto done;
    clock_gettime(CLOCK_MONOTONIC, &t1);

    if (count_only) {
        double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        printf("%zu\n", n);
        fprintf(stderr, "cera tokenize: %zu bytes -> %zu tokens in %.3f ms (%.2f MB/s)\n", len, n, s * 1e3,
                s > 0 ? (double)len / s / 1e6 : 0.0);
    } else if (ids_only) {
        for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
        printf("\n");
    } else {
        char *piece = malloc(cera_tokenizer_max_piece_len(tok) + 1);
        if (!piece) {
            cera_fail(&err, CERA_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            int k = cera_tokenizer_piece(tok, ids[i], piece, cera_tokenizer_max_piece_len(tok), true);
            printf("%6d -> '", ids[i]);
            if (k > 0) fwrite(piece, 1, (size_t)k, stdout);
            printf("'\n");
        }
        free(piece);
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
done:
    if (rc && err.status != CERA_OK) cli_fail(&err);
    free(ids);
    free(text);
    cera_tokenizer_free(tok);
    gguf_close(gf);
    return rc;
}

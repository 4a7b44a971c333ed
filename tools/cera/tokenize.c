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

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* llama.cpp's string_process_escapes, in place; returns the new length. */
static size_t process_escapes(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 >= n) {
            s[o++] = s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
        case 'n': s[o++] = '\n'; break;
        case 'r': s[o++] = '\r'; break;
        case 't': s[o++] = '\t'; break;
        case '\'': s[o++] = '\''; break;
        case '"': s[o++] = '"'; break;
        case '\\': s[o++] = '\\'; break;
        case 'x':
            if (i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
                s[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
                i += 2;
                break;
            }
            /* fall through */
        default: s[o++] = '\\'; s[o++] = c;
        }
    }
    return o;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    bool use_stdin = false, ids_only = false, count_only = false, add_special = true, parse_special = true;
    bool escape = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) {
            model = argv[++i];
        } else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_val) {
            prompt = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_val) {
            file = argv[++i];
        } else if (!strcmp(a, "--stdin")) {
            use_stdin = true;
        } else if (!strcmp(a, "--ids")) {
            ids_only = true;
        } else if (!strcmp(a, "--count")) {
            count_only = true;
        } else if (!strcmp(a, "--no-add-special") || !strcmp(a, "--no-bos")) {
            add_special = false;
        } else if (!strcmp(a, "--no-parse-special")) {
            parse_special = false;
        } else if (!strcmp(a, "-e") || !strcmp(a, "--escape")) {
            escape = true;
        } else {
            usage(stderr);
            return cli_usage_error("tokenize", "unknown or incomplete option '%s'", a);
        }
    }
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
        if (text && escape) len = process_escapes(text, len);
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

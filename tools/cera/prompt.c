/* prompt.c — prompt loading and tokenization shared by `cera run` and `cera logits`. */
#include "prompt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cera_status fail(cera_error *err, cera_status st, const char *msg, const char *path) {
    if (err) {
        err->status = st;
        snprintf(err->message, sizeof err->message, "%s: %s", path, msg);
    }
    return st;
}

char *cli_read_file(const char *path, size_t *len, cera_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail(err, CERA_ERR_IO, strerror(errno), path);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    bool too_big = false;
    for (;;) {
        if (!buf) break;
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1) break;
        if (n > CLI_READ_MAX) { /* /dev/zero, or a runaway pipe: never read without bound */
            too_big = true;
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    const bool bad = ferror(f) != 0;
    const int read_errno = errno; /* "Is a directory", ... */
    fclose(f);
    if (buf && too_big) {
        free(buf);
        fail(err, CERA_ERR_INVALID_ARG,
             "longer than the limit of " CLI_READ_MAX_TEXT " for a prompt or tokens file", path);
        return NULL;
    }
    if (!buf || bad) {
        free(buf);
        fail(err, buf ? CERA_ERR_IO : CERA_ERR_NO_MEMORY, buf ? strerror(read_errno) : "out of memory", path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

char *cli_read_prompt(const char *path, size_t *len, cera_error *err) {
    char *text = cli_read_file(path, len, err);
    if (text && *len > 0 && text[*len - 1] == '\n') text[--*len] = '\0';
    return text;
}

cera_status cli_tokenize(const cera_engine *e, const char *text, size_t len, cera_token **out, size_t *n,
                         cera_error *err) {
    size_t need = 0;
    cera_status st = cera_tokenize(e, text, len, true, true, NULL, 0, &need, err);
    if (st != CERA_OK && st != CERA_ERR_INVALID_ARG) return st;
    cera_token *t = malloc((need ? need : 1) * sizeof *t);
    if (!t) return fail(err, CERA_ERR_NO_MEMORY, "out of memory", "prompt");
    if ((st = cera_tokenize(e, text, len, true, true, t, need, n, err))) {
        free(t);
        return st;
    }
    *out = t;
    return CERA_OK;
}

cera_status cli_read_tokens(const char *path, cera_token **out, size_t *n, cera_error *err) {
    size_t len;
    char *text = cli_read_file(path, &len, err);
    if (!text) return err ? err->status : CERA_ERR_IO;
    size_t cap = 64, cnt = 0;
    cera_token *t = malloc(cap * sizeof *t);
    char *p = text;
    while (t) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(t);
            free(text);
            return fail(err, CERA_ERR_FORMAT, "expected token ids (non-negative integers), one per line",
                        path);
        }
        if (cnt == cap) {
            cera_token *nt = realloc(t, cap * 2 * sizeof *t);
            if (!nt) {
                free(t);
                t = NULL;
                break;
            }
            t = nt;
            cap *= 2;
        }
        t[cnt++] = (cera_token)v;
        p = end;
    }
    free(text);
    if (!t) return fail(err, CERA_ERR_NO_MEMORY, "out of memory", path);
    *out = t;
    *n = cnt;
    return CERA_OK;
}

/*
 * embed.c — `cera embed`: the embeddings of one or more texts, as llama.cpp's
 * llama-embedding gives them (the same options and output formats).
 *
 * The prompt (-p, or -f less one trailing newline) is split at --embd-separator (a newline
 * unless told otherwise) into texts, each tokenized as llama.cpp does (BOS when the model
 * asks, special-token texts parsed) and evaluated in a fresh session, several at a time
 * through cera_batch_embed, with the adapters of --lora applied. Each text gives one vector
 * (--pooling mean, cls, last) or one per token (none; the model's own pooling when not
 * given), normalized by --embd-normalize (2, euclidean, unless told otherwise).
 *
 * Output on stdout: llama-embedding's text (the first values of each vector and, for
 * several pooled texts, their cosine similarity matrix), or --embd-output-format json
 * (OpenAI's list of embedding objects), json+ (with the similarity matrix), array (a JSON
 * array of arrays) or raw (one vector per line, every value).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "core/error.h"
#include "lora_cli.h"
#include "prompt.h"

#define EMBED_GROUPS (CLI_G_MODEL | CLI_G_PROMPT | CLI_G_LORA)

typedef struct embed_opts {
    const char *pooling, *normalize, *format, *separator;
} embed_opts;

static int embed_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    embed_opts *eo = user;
    const char *a = argv[*i];
    const char **dst = !strcmp(a, "--pooling")              ? &eo->pooling
                       : !strcmp(a, "--embd-normalize")     ? &eo->normalize
                       : !strcmp(a, "--embd-output-format") ? &eo->format
                       : !strcmp(a, "--embd-separator")     ? &eo->separator
                                                            : NULL;
    return dst ? cli_take_value(cmd, argc, argv, i, dst) : 0;
}

/* llama.cpp's names of the poolings (--pooling); false when unknown. */
static bool parse_pooling(const char *v, cera_pooling *out) {
    static const char *const names[] = {"none", "mean", "cls", "last"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(v, names[i])) {
            *out = (cera_pooling)i;
            return true;
        }
    return false;
}

/* common_embd_similarity_cos: sums in double; two zero vectors are alike, one is not. */
static float cosine(const float *a, const float *b, int n) {
    double s = 0.0, sa = 0.0, sb = 0.0;
    for (int i = 0; i < n; i++) {
        s += a[i] * b[i];
        sa += a[i] * a[i];
        sb += b[i] * b[i];
    }
    if (sa == 0.0 || sb == 0.0) return sa == 0.0 && sb == 0.0 ? 1.0f : 0.0f;
    return (float)(s / (sqrt(sa) * sqrt(sb)));
}

/* One text of the prompt. */
typedef struct embed_text {
    const char *text;
    size_t len;
    cera_token *tok;
    size_t n;
} embed_text;

typedef struct embed_out {
    const float *v; /* [n_vec, d] */
    int n_vec, d, norm;
    const embed_text *texts;
    int n_texts;
    bool pooled;
} embed_out;

/* llama-embedding's default text output. */
static void print_text(FILE *f, const embed_out *o) {
    const char *num = o->norm == 0 ? "%6.0f " : "%9.6f ";
    fputc('\n', f);
    for (int j = 0; j < o->n_vec; j++) {
        const float *v = o->v + (size_t)j * o->d;
        fprintf(f, "embedding %d: ", j);
        if (!o->pooled) {
            for (int i = 0; i < (o->d < 3 ? o->d : 3); i++) fprintf(f, num, v[i]);
            fputs(" ... ", f);
            for (int i = o->d - 3; i < o->d; i++)
                if (i >= 0) fprintf(f, num, v[i]);
        } else {
            const int m = o->n_texts > 1 && o->d > 16 ? 16 : o->d;
            for (int i = 0; i < m; i++) fprintf(f, num, v[i]);
        }
        fputc('\n', f);
    }
    if (!o->pooled || o->n_texts < 2) return;
    fputs("\ncosine similarity matrix:\n\n", f);
    for (int i = 0; i < o->n_texts; i++)
        fprintf(f, "%6.6s ", o->texts[i].text); /* texts are NUL-terminated pieces (split in place) */
    fputc('\n', f);
    for (int i = 0; i < o->n_texts; i++) {
        for (int j = 0; j < o->n_texts; j++)
            fprintf(f, "%6.2f ", cosine(o->v + (size_t)i * o->d, o->v + (size_t)j * o->d, o->d));
        fprintf(f, "%1.10s\n", o->texts[i].text);
    }
}

/* --embd-output-format json, json+, array. */
static void print_json(FILE *f, const embed_out *o, const char *format) {
    const bool list = strcmp(format, "array") != 0;
    const char *num = o->norm == 0 ? "%1.0f" : "%1.7f";
    fputs(list ? "{\n  \"object\": \"list\",\n  \"data\": [\n" : "[", f);
    for (int j = 0; j < o->n_vec; j++) {
        if (list)
            fprintf(
                f, "    {\n      \"object\": \"embedding\",\n      \"index\": %d,\n      \"embedding\": ", j);
        fputc('[', f);
        for (int i = 0; i < o->d; i++) {
            fprintf(f, num, o->v[(size_t)j * o->d + i]);
            if (i + 1 < o->d) fputc(',', f);
        }
        fputs(list ? "]\n    }" : "]", f);
        if (j + 1 < o->n_vec) fputs(list ? ",\n" : ",", f);
    }
    fputs(list ? "\n  ]" : "]\n", f);
    if (!strcmp(format, "json+") && o->n_texts > 1) {
        fputs(",\n  \"cosineSimilarity\": [\n", f);
        for (int i = 0; i < o->n_vec; i++) {
            fputs("    [", f);
            for (int j = 0; j < o->n_vec; j++) {
                fprintf(f, "%6.2f", cosine(o->v + (size_t)i * o->d, o->v + (size_t)j * o->d, o->d));
                if (j + 1 < o->n_vec) fputs(", ", f);
            }
            fputs(" ]", f);
            if (i + 1 < o->n_vec) fputs(",\n", f);
        }
        fputs("\n  ]", f);
    }
    if (list) fputs("\n}\n", f);
}

static void print_raw(FILE *f, const embed_out *o) {
    for (int j = 0; j < o->n_vec; j++) {
        for (int i = 0; i < o->d; i++)
            fprintf(f, o->norm == 0 ? "%1.0f%s" : "%1.7f%s", o->v[(size_t)j * o->d + i],
                    i + 1 < o->d ? " " : "");
        fputc('\n', f);
    }
}

/* Splits text in place at every sep (llama-embedding's split_lines: an empty piece where two
 * separators meet or one ends the text). Returns the count; *out is malloc'ed. */
static int split_texts(char *text, size_t len, const char *sep, embed_text **out) {
    const size_t sl = strlen(sep);
    int n = 1;
    for (size_t i = 0; i + sl <= len; i++)
        if (!memcmp(text + i, sep, sl)) n++, i += sl - 1;
    embed_text *t = calloc((size_t)n, sizeof *t);
    if (!t) return -1;
    size_t start = 0;
    int k = 0;
    for (size_t i = 0; i + sl <= len; i++)
        if (!memcmp(text + i, sep, sl)) {
            t[k++] = (embed_text){text + start, i - start, NULL, 0};
            text[i] = '\0';
            start = i + sl;
            i += sl - 1;
        }
    t[k] = (embed_text){text + start, len - start, NULL, 0};
    *out = t;
    return n;
}

/* Embeds texts[0..n) in groups of at most the engine's sequences: vectors into v, in order. */
static cera_status embed_all(cera_engine *e, const cli_args *o, embed_text *texts, int n,
                             cera_pooling pooling, int norm, float *v, cera_error *err) {
    const int d = cera_engine_n_embd(e), group = o->ep.n_seq_max > 0 ? o->ep.n_seq_max : 8;
    cera_session **s = calloc((size_t)group, sizeof *s);
    cera_batch_item *items = calloc((size_t)group, sizeof *items);
    float **out = calloc((size_t)group, sizeof *out);
    cera_status st = s && items && out ? CERA_OK : cera_fail(err, CERA_ERR_NO_MEMORY, "embedding buffers");
    for (int first = 0; first < n && !st; first += group) {
        const int m = n - first < group ? n - first : group;
        for (int i = 0; i < m && !st; i++) {
            st = cera_session_create(e, NULL, &s[i], err);
            if (!st) st = cli_lora_attach(e, s[i], &o->lora, err);
            items[i] = (cera_batch_item){s[i], texts[first + i].tok, texts[first + i].n, false, 0};
            out[i] = v;
            v += (pooling == CERA_POOLING_NONE ? texts[first + i].n : 1) * (size_t)d;
        }
        if (!st) st = cera_batch_embed(e, items, m, pooling, norm, out, err);
        for (int i = 0; i < m; i++) {
            cera_session_free(s[i]);
            s[i] = NULL;
        }
    }
    free(s);
    free(items);
    free(out);
    return st;
}

int cmd_embed(int argc, char **argv) {
    cli_args o;
    cli_args_init(&o);
    embed_opts eo = {NULL, NULL, "", "\n"};
    int rc = cli_parse(
        "embed", EMBED_GROUPS, argc, argv, &o, embed_extra, &eo,
        "usage: cera embed -m MODEL (-p TEXT | -f FILE) [options]\n\n"
        "Prints the embeddings of the prompt's texts (split at --embd-separator), as llama-embedding:\n"
        "each token's final hidden state after the output norm, pooled and normalized.\n",
        "      --pooling P       none, mean, cls or last (default: the model's; none when it has none)\n"
        "      --embd-normalize N  -1 none, 0 max absolute (int16 range), 1 taxicab, 2 euclidean\n"
        "                        (default), N > 2 the p-norm\n"
        "      --embd-output-format F  json (OpenAI style), json+ (with the cosine similarities),\n"
        "                        array, raw (one vector per line); default: llama-embedding's text\n"
        "      --embd-separator S  what separates the texts (default: a newline)\n");
    if (rc) return rc == 1 ? 0 : rc;
    if ((rc = cli_args_finish("embed", EMBED_GROUPS, &o))) goto out_args;
    rc = 2;
    cera_pooling pooling = CERA_POOLING_MODEL;
    long norm = 2;
    const char *fmt = eo.format;
    if (!o.model || !!o.prompt + !!o.file != 1) {
        cli_usage_error("embed", "-m MODEL and one of -p TEXT, -f FILE are required (see --help)");
        goto out_args;
    }
    if (eo.pooling && !parse_pooling(eo.pooling, &pooling)) {
        cli_usage_error("embed", "--pooling: '%s' is not none, mean, cls or last", eo.pooling);
        goto out_args;
    }
    if (eo.normalize && !cli_parse_long(eo.normalize, -1, 1000000, &norm)) {
        cli_usage_error("embed", "--embd-normalize: '%s' is not an integer of -1 or more", eo.normalize);
        goto out_args;
    }
    if (strcmp(fmt, "") && strcmp(fmt, "json") && strcmp(fmt, "json+") && strcmp(fmt, "array") &&
        strcmp(fmt, "raw")) {
        cli_usage_error("embed", "--embd-output-format: '%s' is not json, json+, array or raw", fmt);
        goto out_args;
    }
    if (!eo.separator[0]) {
        cli_usage_error("embed", "--embd-separator must not be empty");
        goto out_args;
    }

    cera_error err = {0};
    cera_engine *e = NULL;
    char *buf = NULL, *text = NULL;
    embed_text *texts = NULL;
    float *v = NULL;
    int n_texts = 0;
    rc = 1;
    if (cera_engine_open(o.model, &o.ep, &e, &err)) goto done;
    cli_warn_context(e, o.ep.n_ctx);
    size_t len = 0;
    const char *p = cli_args_prompt(&o, &len, &buf, &err);
    if (!p) goto done;
    if (!(text = malloc(len + 1))) {
        fprintf(stderr, "cera: out of memory\n");
        goto done_quiet;
    }
    memcpy(text, p, len);
    text[len] = '\0';
    if ((n_texts = split_texts(text, len, eo.separator, &texts)) < 0) {
        fprintf(stderr, "cera: out of memory\n");
        goto done_quiet;
    }
    if (pooling == CERA_POOLING_MODEL) pooling = cera_engine_pooling(e);
    const int d = cera_engine_n_embd(e), n_ctx = cera_engine_n_ctx(e);
    size_t n_vec = 0;
    for (int i = 0; i < n_texts; i++) {
        embed_text *t = &texts[i];
        if (cli_tokenize(e, t->text, t->len, &t->tok, &t->n, &err)) goto done;
        if (t->n == 0) {
            fprintf(stderr, "cera: text %d has no tokens (an empty line?)\n", i);
            goto done_quiet;
        }
        if (t->n > (size_t)n_ctx) {
            fprintf(stderr, "cera: text %d has %zu tokens, more than the context of %d (-c)\n", i, t->n,
                    n_ctx);
            goto done_quiet;
        }
        n_vec += pooling == CERA_POOLING_NONE ? t->n : 1;
    }
    if (!(v = malloc(n_vec * (size_t)d * sizeof(float)))) {
        fprintf(stderr, "cera: out of memory for %zu embeddings\n", n_vec);
        goto done_quiet;
    }
    if (embed_all(e, &o, texts, n_texts, pooling, (int)norm, v, &err)) goto done;
    const embed_out out = {v, (int)n_vec, d, (int)norm, texts, n_texts, pooling != CERA_POOLING_NONE};
    if (!fmt[0])
        print_text(stdout, &out);
    else if (!strcmp(fmt, "raw"))
        print_raw(stdout, &out);
    else
        print_json(stdout, &out, fmt);
    fputc('\n', stdout);
    rc = fflush(stdout) ? 1 : 0;
    if (rc) fprintf(stderr, "cera: write error on stdout\n");
    goto done_quiet;
done:
    rc = cli_fail(&err);
done_quiet:
    for (int i = 0; texts && i < n_texts; i++) free(texts[i].tok);
    free(texts);
    free(text);
    free(v);
    free(buf);
    cera_engine_close(e);
out_args:
    cli_args_free(&o);
    return rc;
}

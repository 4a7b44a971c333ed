/*
 * perplexity.c — `cera perplexity -m MODEL -f TEXT [-c N]`: a text's perplexity by
 * llama-perplexity's method, printed as llama-perplexity prints it, so the two compare
 * figure for figure.
 *
 * The method: the text is tokenized once (BOS first where the model adds one; special
 * tokens not parsed), and cut into n_chunk = n_tokens / N non-overlapping chunks of N
 * tokens (--chunks K caps it; the tail that fills no chunk is dropped). Each chunk is
 * evaluated from an empty context, its first token replaced by BOS where the model adds
 * one, and only its second half is scored: the positions j = N/2 .. N-2 predict token
 * j + 1, each adding -log softmax(logits_j)[token] (the softmax in double over expf(l -
 * max), as llama.cpp) to the sum. After each chunk the running estimate exp(mean) is
 * printed as "[k]value,"; at the end "Final estimate: PPL = p +/- e", e the standard
 * error of the mean log-likelihood times p. Chunks go through the batch call n_batch / N
 * at a time (llama-perplexity's n_seq, 4 with its defaults -c 512 -b 2048), one session
 * each.
 *
 * KL divergence, as llama-perplexity's --kl-divergence-base / --kl-divergence: a first run
 * with --kl-divergence-base FILE alone writes the scored positions' log-probabilities (all of
 * the vocabulary, float32, after a header naming the context, vocabulary, chunk count and a
 * hash of the tokens); a later run with both flags, of another model file or KV cache type
 * on the same text, reads them back and prints, besides its own perplexity, the base's, the
 * mean KL divergence KL(base || this) per position with its standard error, its maximum,
 * 99th percentile and median, and how often both put the same token on top.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "core/error.h"
#include "lora_cli.h"

#define PPL_GROUPS (CLI_G_MODEL | CLI_G_PROMPT | CLI_G_LORA)

typedef struct ppl_opts {
    const char *chunks;
    const char *kld_base; /* --kl-divergence-base FILE */
    bool kld;             /* --kl-divergence: compare with it (else write it) */
} ppl_opts;

static int ppl_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    ppl_opts *po = user;
    if (!strcmp(argv[*i], "--kl-divergence")) {
        po->kld = true;
        return 1;
    }
    if (!strcmp(argv[*i], "--kl-divergence-base")) return cli_take_value(cmd, argc, argv, i, &po->kld_base);
    return !strcmp(argv[*i], "--chunks") ? cli_take_value(cmd, argc, argv, i, &po->chunks) : 0;
}

/* ---- KL divergence against a base run ---------------------------------------------- */

#define KLD_MAGIC "CERAKLD1"

typedef struct kld_header {
    char magic[8];
    uint32_t n_ctx, n_vocab, n_chunk, reserved;
    uint64_t token_hash;
} kld_header;

typedef struct kld_state {
    FILE *f;
    bool compare;
    float *row;    /* [n_vocab] a log-probability row */
    float *base;   /* [n_vocab] the base's */
    double *kl;    /* [n_pos] KL divergence per scored position */
    long n, cap;   /* positions so far, room */
    long same_top; /* positions where both rank the same token first */
    double nll_base, sum, sum2;
} kld_state;

static uint64_t hash_tokens(const cera_token *t, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the ids' bytes */
    const uint8_t *p = (const uint8_t *)t;
    for (size_t i = 0; i < n * sizeof *t; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Opens the base file to write, or to read back and check against this run's text. */
static bool kld_open(kld_state *k, const char *path, bool compare, const kld_header *mine, cera_error *err) {
    k->compare = compare;
    k->f = fopen(path, compare ? "rb" : "wb");
    if (!k->f) {
        cera_fail(err, CERA_ERR_IO, "%s: cannot open to %s", path, compare ? "read" : "write");
        return false;
    }
    k->row = malloc(sizeof *k->row * mine->n_vocab);
    k->base = malloc(sizeof *k->base * mine->n_vocab);
    if (!k->row || !k->base) {
        cera_fail(err, CERA_ERR_NO_MEMORY, "perplexity: KL divergence rows");
        return false;
    }
    if (!compare) {
        if (fwrite(mine, sizeof *mine, 1, k->f) != 1) {
            cera_fail(err, CERA_ERR_IO, "%s: write failed", path);
            return false;
        }
        return true;
    }
    kld_header h;
    if (fread(&h, sizeof h, 1, k->f) != 1 || memcmp(h.magic, KLD_MAGIC, 8)) {
        cera_fail(err, CERA_ERR_FORMAT, "%s: not a cera --kl-divergence-base file", path);
        return false;
    }
    if (h.n_ctx != mine->n_ctx || h.n_vocab != mine->n_vocab || h.token_hash != mine->token_hash ||
        h.n_chunk < mine->n_chunk) {
        cera_fail(
            err, CERA_ERR_INVALID_ARG,
            "%s: made with -c %u, a vocabulary of %u and %u chunks of another text (here: -c %u, %u, %u)",
            path, h.n_ctx, h.n_vocab, h.n_chunk, mine->n_ctx, mine->n_vocab, mine->n_chunk);
        return false;
    }
    return true;
}

/* One scored position: its logits l and the token that follows. */
static bool kld_add(kld_state *k, const float *l, int nv, cera_token next, cera_error *err) {
    float mx = l[0];
    for (int i = 1; i < nv; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < nv; i++) sum += expf(l[i] - mx);
    const float lse = mx + (float)log(sum);
    for (int i = 0; i < nv; i++) k->row[i] = l[i] - lse;
    if (!k->compare) {
        if (fwrite(k->row, sizeof *k->row, (size_t)nv, k->f) != (size_t)nv)
            return cera_fail(err, CERA_ERR_IO, "--kl-divergence-base: write failed"), false;
        return true;
    }
    if (fread(k->base, sizeof *k->base, (size_t)nv, k->f) != (size_t)nv)
        return cera_fail(err, CERA_ERR_FORMAT, "--kl-divergence-base: the file ends early"), false;
    double kl = 0.0;
    int top = 0, top_base = 0;
    for (int i = 0; i < nv; i++) {
        const double pb = exp((double)k->base[i]);
        kl += pb * ((double)k->base[i] - (double)k->row[i]);
        if (k->row[i] > k->row[top]) top = i;
        if (k->base[i] > k->base[top_base]) top_base = i;
    }
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 1024;
        double *g = realloc(k->kl, sizeof *g * (size_t)k->cap);
        if (!g) return cera_fail(err, CERA_ERR_NO_MEMORY, "perplexity: KL divergences"), false;
        k->kl = g;
    }
    k->kl[k->n++] = kl;
    k->sum += kl;
    k->sum2 += kl * kl;
    k->same_top += top == top_base;
    k->nll_base -= (double)k->base[next];
    return true;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void kld_report(kld_state *k, double ppl) {
    if (!k->compare || k->n == 0) return;
    const double n = (double)k->n, mean = k->sum / n;
    const double var = k->n > 1 ? (k->sum2 / n - mean * mean) * n / (n - 1) : 0.0;
    qsort(k->kl, (size_t)k->n, sizeof *k->kl, cmp_double);
    const double top = (double)k->same_top / n;
    printf("====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)    : %10.6f\n", ppl);
    printf("Mean PPL(base) : %10.6f\n", exp(k->nll_base / n));
    printf("====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f ± %10.6f\n", mean, sqrt(var > 0 ? var / n : 0.0));
    printf("Maximum KLD: %10.6f\n", k->kl[k->n - 1]);
    printf("99.0%%   KLD: %10.6f\n", k->kl[(long)(0.99 * (n - 1))]);
    printf("Median  KLD: %10.6f\n", k->kl[(long)(0.5 * (n - 1))]);
    printf("====== Token probability statistics ======\n");
    printf("Same top p: %6.3f ± %5.3f %%\n", 100.0 * top, 100.0 * sqrt(top * (1.0 - top) / n));
}

static void kld_close(kld_state *k) {
    if (k->f) fclose(k->f);
    free(k->row);
    free(k->base);
    free(k->kl);
}

/* -log p(tok) from one row of logits, as llama-perplexity's log_softmax. */
static double neg_log_prob(const float *l, int nv, cera_token tok) {
    float mx = l[0];
    for (int i = 1; i < nv; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < nv; i++) sum += expf(l[i] - mx);
    return -((double)(l[tok] - mx) - log(sum));
}

/* The text's tokens with BOS where the model adds it (*add_bos says whether it does). */
static cera_status tokenize_text(const cera_engine *e, const char *text, size_t len, cera_token **out,
                                 size_t *n, bool *add_bos, cera_error *err) {
    cera_token probe[2];
    size_t np = 0;
    cera_status st = cera_tokenize(e, "", 0, true, false, probe, 2, &np, err);
    if (st) return st;
    *add_bos = np >= 1 && probe[0] == cera_engine_bos(e);
    size_t need = 0;
    st = cera_tokenize(e, text, len, true, false, NULL, 0, &need, err);
    if (st != CERA_OK && st != CERA_ERR_INVALID_ARG) return st;
    *out = malloc((need ? need : 1) * sizeof **out);
    if (!*out) return cera_fail(err, CERA_ERR_NO_MEMORY, "perplexity: %zu tokens", need);
    return cera_tokenize(e, text, len, true, false, *out, need, n, err);
}

int cmd_perplexity(int argc, char **argv) {
    cli_args o;
    cli_args_init(&o);
    o.escape = false; /* llama-perplexity reads the text as it is */
    ppl_opts po = {.chunks = NULL};
    int rc =
        cli_parse("perplexity", PPL_GROUPS, argc, argv, &o, ppl_extra, &po,
                  "usage: cera perplexity -m MODEL -f TEXT [-c N] [-b N] [--chunks K] [options]\n\n"
                  "The text's perplexity by llama-perplexity's method: chunks of N tokens (-c, default\n"
                  "512) each scored on its second half; the running estimate after each chunk, then\n"
                  "\"Final estimate: PPL = p +/- e\". -b (default 2048) / N chunks are evaluated at once.\n",
                  "  --chunks K            at most K chunks (default: all the text fills)\n"
                  "  --kl-divergence-base FILE\n"
                  "                        alone: write the scored log-probabilities to FILE; with\n"
                  "  --kl-divergence       compare with them: the KL divergence from that run\n");
    if (rc) return rc == 1 ? 0 : rc;
    if ((rc = cli_args_finish("perplexity", PPL_GROUPS, &o))) goto out_args;
    rc = 2;
    long max_chunks = -1;
    if (po.chunks && !cli_parse_long(po.chunks, 1, 1 << 30, &max_chunks)) {
        cli_usage_error("perplexity", "--chunks takes a positive integer, not '%s'", po.chunks);
        goto out_args;
    }
    if (po.kld && !po.kld_base) {
        cli_usage_error("perplexity", "--kl-divergence needs --kl-divergence-base FILE");
        goto out_args;
    }
    if (!o.model || (!o.prompt && !o.file)) {
        cli_usage_error("perplexity", "-m MODEL and -f TEXT (or -p TEXT) are required (see --help)");
        goto out_args;
    }
    const int n_ctx = o.ep.n_ctx > 0 ? o.ep.n_ctx : 512;
    const int n_batch = o.ep.n_batch > 0 ? o.ep.n_batch : 2048;
    if (n_ctx < 4) {
        cli_usage_error("perplexity", "-c must be at least 4");
        goto out_args;
    }
    const int n_seq = n_batch / n_ctx > 1 ? n_batch / n_ctx : 1;
    o.ep.n_ctx = n_ctx;
    o.ep.n_batch = n_batch < n_ctx * n_seq ? n_batch : n_ctx * n_seq;
    if (o.ep.n_seq_max < n_seq) o.ep.n_seq_max = n_seq;

    cera_error err = {0};
    cera_engine *e = NULL;
    cera_session **ss = calloc((size_t)n_seq, sizeof *ss);
    cera_batch_item *items = calloc((size_t)n_seq, sizeof *items);
    cera_token *toks = NULL, *chunk = NULL;
    char *buf = NULL;
    kld_state kld = {0};
    rc = 1;
    if (!ss || !items) {
        fprintf(stderr, "cera: out of memory\n");
        goto done_quiet;
    }
    if (cera_engine_open(o.model, &o.ep, &e, &err)) goto done;
    size_t len = 0, n = 0;
    const char *text = cli_args_prompt(&o, &len, &buf, &err);
    bool add_bos = false;
    if (!text || tokenize_text(e, text, len, &toks, &n, &add_bos, &err)) goto done;
    if (n < 2 * (size_t)n_ctx) {
        fprintf(stderr, "cera: perplexity: the text is %zu tokens; a context of %d needs at least %d\n", n,
                n_ctx, 2 * n_ctx);
        goto done_quiet;
    }
    int n_chunk = (int)(n / (size_t)n_ctx);
    if (max_chunks > 0 && max_chunks < n_chunk) n_chunk = (int)max_chunks;
    chunk = malloc(sizeof *chunk * (size_t)n_ctx * (size_t)n_seq);
    if (!chunk) {
        fprintf(stderr, "cera: out of memory\n");
        goto done_quiet;
    }
    for (int q = 0; q < n_seq; q++) {
        if (cera_session_create(e, NULL, &ss[q], &err)) goto done;
        if (cli_lora_attach(e, ss[q], &o.lora, &err)) goto done;
    }
    fprintf(stderr, "cera: perplexity: %zu tokens, %d chunks of %d, %d at a time\n", n, n_chunk, n_ctx,
            n_seq);
    const int nv = cera_engine_n_vocab(e), first = n_ctx / 2;
    if (po.kld_base) {
        kld_header h = {KLD_MAGIC,
                        (uint32_t)n_ctx,
                        (uint32_t)nv,
                        (uint32_t)n_chunk,
                        0,
                        hash_tokens(toks, (size_t)n_chunk * (size_t)n_ctx)};
        if (!kld_open(&kld, po.kld_base, po.kld, &h, &err)) goto done;
    }
    double nll = 0.0, nll2 = 0.0;
    long count = 0;
    for (int i = 0; i < n_chunk; i += n_seq) {
        const int k = n_chunk - i < n_seq ? n_chunk - i : n_seq;
        for (int q = 0; q < k; q++) {
            cera_token *c = chunk + (size_t)q * (size_t)n_ctx;
            memcpy(c, toks + (size_t)(i + q) * (size_t)n_ctx, sizeof *c * (size_t)n_ctx);
            if (add_bos) c[0] = cera_engine_bos(e);
            if (cera_session_truncate(ss[q], 0, &err)) goto done;
            items[q] = (cera_batch_item){ss[q], c, (size_t)n_ctx, true, 0};
        }
        if (cera_batch_eval(e, items, k, &err)) goto done;
        for (int q = 0; q < k; q++) {
            const cera_token *next = toks + (size_t)(i + q) * (size_t)n_ctx;
            for (int j = first; j < n_ctx - 1; j++) {
                const float *l = cera_session_logits(ss[q], j);
                const double v = neg_log_prob(l, nv, next[j + 1]);
                if (kld.f && !kld_add(&kld, l, nv, next[j + 1], &err)) goto done;
                nll += v;
                nll2 += v * v;
            }
            count += n_ctx - 1 - first;
            printf("[%d]%.4f,", i + q + 1, exp(nll / (double)count));
            fflush(stdout);
        }
    }
    printf("\n");
    const double mean = nll / (double)count, ppl = exp(mean);
    const double var = nll2 / (double)count - mean * mean;
    if (var > 0)
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, sqrt(var / (double)(count - 1)) * ppl);
    else
        printf("Final estimate: PPL = %.4f\n", ppl);
    kld_report(&kld, ppl);
    rc = 0;
    goto done_quiet;
done:
    rc = cli_fail(&err);
done_quiet:
    for (int q = 0; ss && q < n_seq; q++) cera_session_free(ss[q]);
    free(ss);
    free(items);
    free(chunk);
    free(toks);
    free(buf);
    kld_close(&kld);
    cera_engine_close(e);
out_args:
    cli_args_free(&o);
    return rc;
}

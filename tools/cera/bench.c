/*
 * bench.c — `cera bench`: prompt-processing and generation speed, as llama-bench.
 *
 * The same tests and the same definitions as llama-bench, so the two tools' numbers
 * sit side by side (bench/run.sh does that):
 *   - ppN: N random tokens (BOS first when the model adds one) evaluated as one
 *     prompt, split into batches of -b tokens; tokens/s = N / time.
 *   - tgN: N tokens evaluated one at a time, each a single-token batch.
 *   - at depth D (-d), each repetition first has D tokens in the context (evaluated
 *     once, untimed; later repetitions truncate the session back to them).
 * One warm-up run precedes each test (the whole prompt for pp, one token for tg);
 * every repetition starts from an empty (or depth-D) context. tokens/s are averaged
 * over repetitions, with the sample standard deviation.
 *
 * With --parallel N[,N...] (as llama-batched-bench): N sessions each get the -p prompt
 * (one cera_batch_eval for all of them, timed as pp), then decode -n tokens together, one
 * batch of N single tokens per step (timed as tg); avg_ts is the total generated tokens/s
 * of all N, pp_avg_ts the prompts' tokens/s. Each repetition truncates the sessions back
 * to their prompts.
 *
 * For tg the weight bandwidth is given too: the bytes of weights a token reads (every
 * tensor, except that only one row of an untied token-embedding table is read) times
 * tokens/s. Output: a markdown table (default) or, with -o json, a JSON array with
 * llama-bench's field names plus cera's (gbps, weight_bytes_per_token, device).
 *
 * The model's size and file type come from its GGUF header (the public API does not
 * expose tensors); everything timed goes through the public API (include/cera.h).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "cli.h"
#include "core/cpus.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "tensor/types.h"

#define MAX_VALUES 16

typedef struct int_list {
    int v[MAX_VALUES];
    int n;
} int_list;

typedef struct model_info {
    uint64_t size;            /* bytes of all tensors */
    uint64_t n_params;        /* elements of all tensors */
    uint64_t bytes_per_token; /* weight bytes one decoded token reads */
    char type[96];            /* "llama 1.1B Q4_0" */
} model_info;

typedef struct bench_result {
    int n_prompt, n_gen, n_depth, n_threads;
    int n_parallel; /* 0: a single session (pp/tg tests); N: N sessions decoding together */
    double pp_ts;   /* --parallel: the N prompts' tokens/s */
    double samples_ts[64];
    uint64_t samples_ns[64];
    int n_samples;
    char time[32];
} bench_result;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* "512" or "128,512" into a list of non-negative integers. */
static bool parse_list(const char *s, int_list *out, int min) {
    out->n = 0;
    while (*s) {
        char *end;
        const long v = strtol(s, &end, 10);
        if (end == s || v < min || v > 1000000 || out->n == MAX_VALUES) return false;
        out->v[out->n++] = (int)v;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return out->n > 0;
}

/* llama.cpp's names for general.file_type, for the model_type column. */
static const char *ftype_name(uint32_t ft) {
    switch (ft) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 13: return "Q3_K - Large";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 25: return "IQ4_NL - 4.5 bpw";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 32: return "BF16";
    default: return "?";
    }
}

static cera_status read_model_info(const char *path, model_info *mi, cera_error *err) {
    gguf_file *f = NULL;
    cera_status st = gguf_open_model(path, &f, err);
    if (st) return st;
    memset(mi, 0, sizeof *mi);
    const gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
    const bool tied = gguf_find_tensor(f, "output.weight") == NULL;
    char arch[32] = "?", key[96];
    gguf_str s;
    if (gguf_get_str(f, "general.architecture", &s)) gguf_str_copy(s, arch, sizeof arch);
    // routed experts: a token reads expert_used_count of the expert_count matrices of a 3-D tensor
    uint32_t n_expert = 0, n_used = 0;
    snprintf(key, sizeof key, "%s.expert_count", arch);
    gguf_get_u32(f, key, &n_expert);
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    gguf_get_u32(f, key, &n_used);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        mi->size += t->nbytes;
        mi->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        if (t == embd && !tied)
            mi->bytes_per_token += cera_row_size(t->type, t->ne[0]); /* one row looked up */
        else if (t->ne[2] > 1 && n_expert > 0 && n_used <= n_expert && t->ne[2] == n_expert)
            mi->bytes_per_token += t->nbytes / n_expert * n_used;
        else
            mi->bytes_per_token += t->nbytes;
    }
    uint32_t ft = 99;
    const char *tname = NULL;
    if (gguf_get_u32(f, "general.file_type", &ft)) {
        tname = ftype_name(ft);
    } else { /* no file type: name the type holding most of the 2-D weights' bytes */
        uint64_t bytes[CERA_TYPE_COUNT] = {0};
        for (uint64_t i = 0; i < f->n_tensors; i++)
            if (f->tensors[i].n_dims >= 2) bytes[f->tensors[i].type] += f->tensors[i].nbytes;
        int best = 0;
        for (int t = 1; t < CERA_TYPE_COUNT; t++)
            if (bytes[t] > bytes[best]) best = t;
        static char upper[16];
        const cera_type_traits *tt = cera_type_get((uint32_t)best);
        snprintf(upper, sizeof upper, "%s", tt ? tt->name : "?");
        for (char *c = upper; *c; c++) *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        tname = best == CERA_TYPE_F32 ? "all F32" : upper;
    }
    const double b = (double)mi->n_params * 1e-9;
    if (b >= 1.0)
        snprintf(mi->type, sizeof mi->type, "%s %.1fB %s", arch, b, tname);
    else
        snprintf(mi->type, sizeof mi->type, "%s %.*fM %s", arch, b < 0.01 ? 1 : 0, b * 1000.0, tname);
    gguf_close(f);
    return CERA_OK;
}

/* A small LCG for the random tokens, so runs are repeatable. */
static cera_token next_token(uint64_t *s, int n_vocab) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (cera_token)((*s >> 33) % (uint64_t)n_vocab);
}

/* Evaluates n random tokens as one prompt (BOS first when the model has one). */
static cera_status eval_prompt(cera_session *s, cera_token *buf, int n, int n_vocab, cera_token bos,
                               uint64_t *rng, cera_error *err) {
    for (int i = 0; i < n; i++) buf[i] = next_token(rng, n_vocab);
    if (n > 0 && bos >= 0 && cera_session_n_past(s) == 0) buf[0] = bos;
    return cera_session_eval(s, buf, (size_t)n, false, err);
}

static cera_status eval_gen(cera_session *s, int n, int n_vocab, cera_token bos, uint64_t *rng,
                            cera_error *err) {
    cera_token t = bos >= 0 ? bos : next_token(rng, n_vocab);
    for (int i = 0; i < n; i++) {
        cera_status st = cera_session_eval(s, &t, 1, false, err);
        if (st) return st;
        t = next_token(rng, n_vocab);
    }
    return CERA_OK;
}

/* One test (pp or tg, at a depth): warm-up, then reps timed runs. */
static cera_status run_test(cera_session *s, bench_result *r, int reps, bool warmup, cera_token *buf,
                            int n_vocab, cera_token bos, cera_error *err) {
    uint64_t rng = 1234;
    cera_status st;
    if ((st = cera_session_truncate(s, 0, err))) return st;
    if (r->n_depth > 0 && (st = eval_prompt(s, buf, r->n_depth, n_vocab, bos, &rng, err))) return st;
    if (warmup) {
        if (r->n_prompt > 0 && (st = eval_prompt(s, buf, r->n_prompt, n_vocab, bos, &rng, err))) return st;
        if (r->n_gen > 0 && (st = eval_gen(s, 1, n_vocab, bos, &rng, err))) return st;
    }
    for (int i = 0; i < reps; i++) {
        /* keeps the depth tokens (truncate fails rather than keep fewer) */
        if ((st = cera_session_truncate(s, r->n_depth, err))) return st;
        const uint64_t t0 = now_ns();
        if (r->n_prompt > 0 && (st = eval_prompt(s, buf, r->n_prompt, n_vocab, bos, &rng, err))) return st;
        if (r->n_gen > 0 && (st = eval_gen(s, r->n_gen, n_vocab, bos, &rng, err))) return st;
        const uint64_t ns = now_ns() - t0;
        r->samples_ns[r->n_samples] = ns;
        r->samples_ts[r->n_samples++] = 1e9 * (double)(r->n_prompt + r->n_gen) / (double)(ns ? ns : 1);
    }
    return CERA_OK;
}

/* --parallel: N sessions, each prefilled with r->n_prompt random tokens in one batch,
 * then r->n_gen steps of N single tokens; a warm-up step first. */
static cera_status run_parallel(cera_engine *e, bench_result *r, int reps, bool warmup, int n_vocab,
                                cera_token bos, cera_error *err) {
    const int N = r->n_parallel, P = r->n_prompt > 0 ? r->n_prompt : 1;
    cera_session **s = calloc((size_t)N, sizeof *s);
    cera_batch_item *it = calloc((size_t)N, sizeof *it);
    cera_token *prompts = malloc((size_t)N * (size_t)P * sizeof *prompts);
    cera_token *step = malloc((size_t)N * sizeof *step);
    uint64_t rng = 1234;
    cera_status st = CERA_OK;
    if (!s || !it || !prompts || !step) st = cera_fail(err, CERA_ERR_NO_MEMORY, "bench: %d sessions", N);
    for (int i = 0; i < N && !st; i++) st = cera_session_create(e, NULL, &s[i], err);
    for (int i = 0; i < N && !st; i++) {
        cera_token *p = prompts + (size_t)i * P;
        for (int j = 0; j < P; j++) p[j] = next_token(&rng, n_vocab);
        if (bos >= 0) p[0] = bos;
        it[i] = (cera_batch_item){s[i], p, (size_t)P, false, 0};
    }
    if (!st) {
        const uint64_t t0 = now_ns();
        st = cera_batch_eval(e, it, N, err);
        r->pp_ts = 1e9 * (double)N * P / (double)(now_ns() - t0 + 1);
    }
    for (int rep = -(warmup ? 1 : 0); rep < reps && !st; rep++) {
        for (int i = 0; i < N && !st; i++) st = cera_session_truncate(s[i], P, err);
        const int steps = rep < 0 ? 1 : r->n_gen;
        const uint64_t t0 = now_ns();
        for (int k = 0; k < steps && !st; k++) {
            for (int i = 0; i < N; i++) {
                step[i] = next_token(&rng, n_vocab);
                it[i] = (cera_batch_item){s[i], &step[i], 1, false, 0};
            }
            st = cera_batch_eval(e, it, N, err);
        }
        const uint64_t ns = now_ns() - t0;
        if (rep < 0 || st) continue;
        r->samples_ns[r->n_samples] = ns;
        r->samples_ts[r->n_samples++] = 1e9 * (double)N * r->n_gen / (double)(ns ? ns : 1);
    }
    for (int i = 0; s && i < N; i++) cera_session_free(s[i]);
    free(s);
    free(it);
    free(prompts);
    free(step);
    return st;
}

static double mean_of(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n ? s / n : 0.0;
}

/* Sample standard deviation (n - 1), 0 for a single sample, as llama-bench. */
static double stddev_of(const double *v, int n) {
    if (n <= 1) return 0.0;
    const double m = mean_of(v, n);
    double s = 0;
    for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    return sqrt(s / (n - 1));
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: cera bench -m MODEL [-p 512] [-n 128] [-d 0] [-t THREADS] [-r 5] [-b 512]\n"
            "                  [--parallel N[,N...]] [--device auto|cpu|cuda] [-o md|json] [--no-warmup]\n"
            "                  [-ctk TYPE] [-ctv TYPE]\n\n"
            "Measures prompt processing (ppN: N tokens as one prompt) and generation (tgN: N tokens\n"
            "one at a time) in tokens/s over -r repetitions, as llama-bench does; -p, -n, -d and -t take\n"
            "comma-separated lists and every combination is run. -p 0 or -n 0 skips that test. For tg\n"
            "it also prints the weight bandwidth (weight bytes read per token x tokens/s).\n"
            "--parallel N[,N...] runs N sessions together instead (as llama-batched-bench): each gets the\n"
            "-p prompt, then all decode -n tokens in batches of N; t/s is the total generated tokens/s.\n"
            "-ctk/-ctv: the KV cache types of K and V (f16, the default, f32, bf16, q8_0, q4_0).\n");
}

static void print_md_header(void) {
    printf("| model | size | params | backend | threads | test | t/s | weights GB/s |\n");
    printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |\n");
}

static void print_md_row(const model_info *mi, const char *backend, const bench_result *r) {
    char test[64];
    if (r->n_parallel > 0)
        snprintf(test, sizeof test, "pp%d+tg%d x%d", r->n_prompt, r->n_gen, r->n_parallel);
    else if (r->n_prompt > 0)
        snprintf(test, sizeof test, "pp%d", r->n_prompt);
    else
        snprintf(test, sizeof test, "tg%d", r->n_gen);
    if (r->n_depth > 0) snprintf(test + strlen(test), sizeof test - strlen(test), " @ d%d", r->n_depth);
    const double ts = mean_of(r->samples_ts, r->n_samples), sd = stddev_of(r->samples_ts, r->n_samples);
    char gbps[32] = "";
    if (r->n_gen > 0 && r->n_parallel == 0)
        snprintf(gbps, sizeof gbps, "%.2f", ts * (double)mi->bytes_per_token * 1e-9);
    printf("| %s | %.2f GiB | %.2f %s | %s | %d | %s | %.2f ± %.2f | %s |\n", mi->type,
           (double)mi->size / (1024.0 * 1024.0 * 1024.0),
           mi->n_params >= 1000000000ull ? (double)mi->n_params * 1e-9 : (double)mi->n_params * 1e-6,
           mi->n_params >= 1000000000ull ? "B" : "M", backend, r->n_threads, test, ts, sd, gbps);
    fflush(stdout);
}

static cJSON *json_row(const char *path, const model_info *mi, const char *backend, int n_batch,
                       const char *kv_k, const char *kv_v, const bench_result *r) {
    cJSON *o = cJSON_CreateObject();
    char commit[32];
    snprintf(commit, sizeof commit, "cera %s", cera_version());
    cJSON_AddStringToObject(o, "build_commit", commit);
    cJSON_AddStringToObject(o, "backends", backend);
    cJSON_AddStringToObject(o, "model_filename", path);
    cJSON_AddStringToObject(o, "model_type", mi->type);
    cJSON_AddNumberToObject(o, "model_size", (double)mi->size);
    cJSON_AddNumberToObject(o, "model_n_params", (double)mi->n_params);
    cJSON_AddNumberToObject(o, "n_batch", n_batch);
    cJSON_AddNumberToObject(o, "n_ubatch", n_batch);
    cJSON_AddNumberToObject(o, "n_threads", r->n_threads);
    cJSON_AddStringToObject(o, "type_k", kv_k);
    cJSON_AddStringToObject(o, "type_v", kv_v);
    cJSON_AddNumberToObject(o, "n_prompt", r->n_prompt);
    cJSON_AddNumberToObject(o, "n_gen", r->n_gen);
    cJSON_AddNumberToObject(o, "n_depth", r->n_depth);
    cJSON_AddNumberToObject(o, "n_parallel", r->n_parallel ? r->n_parallel : 1);
    cJSON_AddStringToObject(o, "test_time", r->time);
    double ns[64];
    for (int i = 0; i < r->n_samples; i++) ns[i] = (double)r->samples_ns[i];
    cJSON_AddNumberToObject(o, "avg_ns", round(mean_of(ns, r->n_samples)));
    cJSON_AddNumberToObject(o, "stddev_ns", round(stddev_of(ns, r->n_samples)));
    const double ts = mean_of(r->samples_ts, r->n_samples);
    cJSON_AddNumberToObject(o, "avg_ts", ts);
    cJSON_AddNumberToObject(o, "stddev_ts", stddev_of(r->samples_ts, r->n_samples));
    cJSON_AddItemToObject(o, "samples_ns", cJSON_CreateDoubleArray(ns, r->n_samples));
    cJSON_AddItemToObject(o, "samples_ts", cJSON_CreateDoubleArray(r->samples_ts, r->n_samples));
    /* cera's extra fields */
    cJSON_AddNumberToObject(o, "weight_bytes_per_token", (double)mi->bytes_per_token);
    if (r->n_parallel > 0) cJSON_AddNumberToObject(o, "pp_avg_ts", r->pp_ts);
    if (r->n_gen > 0 && r->n_parallel == 0)
        cJSON_AddNumberToObject(o, "gbps", ts * (double)mi->bytes_per_token * 1e-9);
    else
        cJSON_AddNullToObject(o, "gbps");
    return o;
}

/* The result's start time, as llama-bench's test_time. */
static void stamp(bench_result *r) {
    const time_t now = time(NULL);
    strftime(r->time, sizeof r->time, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
}

/* One result: a JSON object into arr, or a markdown row. */
static void emit(cJSON *arr, const char *path, const model_info *mi, const char *backend, int n_batch,
                 const char *kv_k, const char *kv_v, const bench_result *r) {
    if (arr) {
        cJSON_AddItemToArray(arr, json_row(path, mi, backend, n_batch, kv_k, kv_v, r));
        return;
    }
    char label[64]; /* the backend, with the KV cache types when they are not F16 */
    if (strcmp(kv_k, "f16") || strcmp(kv_v, "f16"))
        snprintf(label, sizeof label, "%s %s/%s", backend, kv_k, kv_v);
    else
        snprintf(label, sizeof label, "%s", backend);
    print_md_row(mi, label, r);
}

typedef struct bench_opts {
    const char *model, *format, *device;
    int_list pp, tg, depth, threads, par;
    int reps, n_batch;
    bool warmup;
    const char *ctk, *ctv; /* KV cache types (-ctk/-ctv, llama-bench's), NULL: f16 */
} bench_opts;

/* bench's options (llama-bench's names): lists of sizes and thread counts, not the
 * run/chat meanings of -p, -n and -t. */
static int bench_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    bench_opts *o = user;
    const char *a = argv[*i];
#define IS(s, l) (!strcmp(a, s) || !strcmp(a, l))
    if (!strcmp(a, "--no-warmup")) {
        o->warmup = false;
        return 1;
    }
    const int k = IS("-m", "--model")            ? 0
                  : IS("-p", "--n-prompt")       ? 1
                  : IS("-n", "--n-gen")          ? 2
                  : IS("-d", "--n-depth")        ? 3
                  : IS("--parallel", "-npl")     ? 4
                  : IS("-t", "--threads")        ? 5
                  : IS("-r", "--repetitions")    ? 6
                  : IS("-b", "--batch-size")     ? 7
                  : IS("-o", "--output")         ? 8
                  : !strcmp(a, "--device")       ? 9
                  : IS("-ctk", "--cache-type-k") ? 10
                  : IS("-ctv", "--cache-type-v") ? 11
                                                 : -1;
#undef IS
    if (k < 0) return 0;
    const char *v;
    if (cli_take_value(cmd, argc, argv, i, &v) < 0) return -1;
    long l = 0;
    bool ok = true;
    switch (k) {
    case 0: o->model = v; break;
    case 1: ok = parse_list(v, &o->pp, 0); break;
    case 2: ok = parse_list(v, &o->tg, 0); break;
    case 3: ok = parse_list(v, &o->depth, 0); break;
    case 4: ok = parse_list(v, &o->par, 1); break;
    case 5: ok = parse_list(v, &o->threads, 1); break;
    case 6:
        ok = cli_parse_long(v, 1, 64, &l);
        o->reps = (int)l;
        break;
    case 7:
        ok = cli_parse_long(v, 1, 65536, &l);
        o->n_batch = (int)l;
        break;
    case 8:
        o->format = v;
        ok = !strcmp(v, "md") || !strcmp(v, "json");
        break;
    case 10:
    case 11: {
        cera_kv_type t;
        ok = cli_parse_kv_type(v, &t);
        *(k == 10 ? &o->ctk : &o->ctv) = v;
        break;
    }
    default: o->device = v; ok = !strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "cuda");
    }
    if (!ok) {
        cli_usage_error(cmd, "bad value for %s: '%s'", a, v);
        return -1;
    }
    return 1;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = {.format = "md",
                    .device = "auto",
                    .pp = {{512}, 1},
                    .tg = {{128}, 1},
                    .depth = {{0}, 1},
                    .threads = {{0}, 1},
                    .par = {{0}, 0},
                    .reps = 5,
                    .n_batch = 512,
                    .warmup = true};
    cli_args args;
    cli_args_init(&args);
    const int pr = cli_parse("bench", 0, argc, argv, &args, bench_extra, &o, NULL, NULL);
    if (pr == 1) usage(stdout);
    if (pr) return pr == 1 ? 0 : pr;
    const char *model = o.model, *format = o.format, *device = o.device;
    int_list pp = o.pp, tg = o.tg, depth = o.depth, threads = o.threads, par = o.par;
    const int reps = o.reps, n_batch = o.n_batch;
    const bool warmup = o.warmup;
    const char *kv_k = o.ctk ? o.ctk : "f16", *kv_v = o.ctv ? o.ctv : "f16"; /* llama-bench's defaults */
    if (!model) return cli_usage_error("bench", "need -m MODEL (see --help)");

    cera_error err = {0};
    model_info mi;
    if (read_model_info(model, &mi, &err)) return cli_fail(&err);
    int max_p = 0, max_n = 0, max_d = 0;
    for (int i = 0; i < pp.n; i++) max_p = pp.v[i] > max_p ? pp.v[i] : max_p;
    for (int i = 0; i < tg.n; i++) max_n = tg.v[i] > max_n ? tg.v[i] : max_n;
    for (int i = 0; i < depth.n; i++) max_d = depth.v[i] > max_d ? depth.v[i] : max_d;
    const bool json = !strcmp(format, "json");
    const bool is_cuda = !strcmp(device, "cuda");
    const char *backend = is_cuda ? "CUDA" : !strcmp(device, "cpu") ? "CPU" : "auto";

    cera_token *buf = malloc(((size_t)(max_p > max_d ? max_p : max_d) + 1) * sizeof(cera_token));
    cJSON *arr = cJSON_CreateArray();
    if (!buf || !arr) {
        free(buf);
        cJSON_Delete(arr);
        fprintf(stderr, "cera: out of memory\n");
        return 1;
    }
    if (!json) print_md_header();
    int rc = 0;
    for (int ti = 0; ti < threads.n && !rc; ti++) {
        cera_engine_params ep = cera_engine_default_params();
        ep.n_threads = threads.v[ti];
        ep.n_ctx = max_d + (par.n ? max_p + max_n + 1 : (max_p > max_n + 1 ? max_p : max_n + 1)) + 1;
        ep.n_batch = n_batch;
        int max_par = 1;
        for (int k = 0; k < par.n; k++) max_par = par.v[k] > max_par ? par.v[k] : max_par;
        ep.n_seq_max = max_par;
        ep.device = is_cuda ? CERA_DEVICE_CUDA : !strcmp(device, "cpu") ? CERA_DEVICE_CPU : CERA_DEVICE_AUTO;
        cli_parse_kv_type(kv_k, &ep.kv_type);
        cli_parse_kv_type(kv_v, &ep.kv_type_v);
        const cera_session_params sp = cera_session_default_params();
        cera_engine *e = NULL;
        cera_session *s = NULL;
        if (cera_engine_open(model, &ep, &e, &err) || cera_session_create(e, &sp, &s, &err)) {
            rc = cli_fail(&err);
            cera_engine_close(e);
            break;
        }
        const int n_vocab = cera_engine_n_vocab(e);
        const cera_token bos = cera_engine_bos(e);
        const int nth = threads.v[ti] ? threads.v[ti] : cera_cpu_count(); /* the engine's default */
        /* --parallel: every N with the first -p and -n */
        for (int k = 0; k < par.n && !rc; k++) {
            cera_session_free(s);
            s = NULL;
            bench_result r = {0};
            r.n_parallel = par.v[k];
            r.n_prompt = pp.v[0];
            r.n_gen = tg.v[0] ? tg.v[0] : 1;
            r.n_threads = nth;
            stamp(&r);
            if (run_parallel(e, &r, reps, warmup, n_vocab, bos, &err)) {
                rc = cli_fail(&err);
                break;
            }
            emit(json ? arr : NULL, model, &mi, backend, n_batch, kv_k, kv_v, &r);
        }
        /* llama-bench's order: every pp, then every tg, for each depth */
        for (int di = 0; di < depth.n && !rc && par.n == 0; di++) {
            for (int kind = 0; kind < 2 && !rc; kind++) {
                const int_list *l = kind == 0 ? &pp : &tg;
                for (int k = 0; k < l->n && !rc; k++) {
                    if (l->v[k] == 0) continue;
                    bench_result r = {0};
                    r.n_prompt = kind == 0 ? l->v[k] : 0;
                    r.n_gen = kind == 1 ? l->v[k] : 0;
                    r.n_depth = depth.v[di];
                    r.n_threads = nth;
                    stamp(&r);
                    if (run_test(s, &r, reps, warmup, buf, n_vocab, bos, &err)) {
                        rc = cli_fail(&err);
                        break;
                    }
                    emit(json ? arr : NULL, model, &mi, backend, n_batch, kv_k, kv_v, &r);
                }
            }
        }
        cera_session_free(s);
        cera_engine_close(e);
    }
    if (json && !rc) {
        char *text = cJSON_Print(arr);
        if (text) printf("%s\n", text);
        free(text);
    }
    cJSON_Delete(arr);
    free(buf);
    return rc;
}

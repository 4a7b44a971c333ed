/*
 * lora_bench.c — what LoRA adapters cost: prompt processing and token generation with
 * no adapter and with one rank-r adapter on all seven projections of every layer, and a
 * decode batch of B sequences (one token each per step) with no adapter, one shared
 * adapter, and B different adapters (rows grouped per adapter, as a server would run
 * them).
 *
 *   lora_bench MODEL [-t THREADS] [-r RANK] [-p N_PROMPT] [-n N_GEN] [-b BATCH] [--reps R] [--forms F]
 *
 * --forms: which forms of the CPU hook to measure (backend/cpu/lora.h: 0 after the matmul, 1 fused with
 * B·t per tile, 2 fused with B·t post), as digits, e.g. 02; all by default.
 *
 * -b 0 (or 1) skips the batch tests. Adapters are random (factors ~ N(0, 0.02), alpha =
 * 2·rank): the cost does not depend on the values. Prints what was measured (model shape,
 * weight type, factor bytes, threads, kernel tier, load average) and one table (markdown),
 * best of R repetitions per line; prefill and decode alternate runs without and with the
 * adapter so that a shared machine's load hits both alike.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kernels.h"
#include "core/cpus.h"
#include "engine/engine_impl.h"
#include "backend/cpu/lora.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float randn(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    const double u1 = ((rng >> 11) + 1.0) / 9007199254740993.0;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    const double u2 = (rng >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

static cera_adapter *random_adapter(const cera_model *m, int rank) {
    size_t n = 0;
    for (int l = 0; l < m->hp.n_layer; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++)
            if (m->layers[l].proj[p].data)
                n += (size_t)rank * (size_t)(m->layers[l].proj[p].k + m->layers[l].proj[p].n);
    cera_adapter *a = NULL;
    cera_error err;
    if (cera_lora_alloc(m, n, "random", &a, &err)) {
        fprintf(stderr, "lora_bench: %s\n", err.message);
        exit(1);
    }
    for (int l = 0; l < m->hp.n_layer; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            const cera_weight *w = &m->layers[l].proj[p];
            if (!w->data) continue; /* a projection this layer lacks */
            float *pa, *pb;
            if (cera_lora_add_pair(a, m, l, (cera_proj)p, rank, w->k, w->n, &pa, &pb, "random", &err)) {
                fprintf(stderr, "lora_bench: %s\n", err.message);
                exit(1);
            }
            for (int64_t i = 0; i < rank * w->k; i++) pa[i] = 0.02f * randn();
            for (int64_t i = 0; i < rank * w->n; i++) pb[i] = 0.02f * randn();
        }
    a->alpha = 2.0f * (float)rank;
    return a;
}

/* The 1-minute load average (a shared machine makes numbers noisy), or -1. */
static double load_avg(void) {
    double v = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static void die(const cera_error *err) {
    fprintf(stderr, "lora_bench: %s\n", err->message);
    exit(1);
}

/* One prompt of n_prompt tokens as one eval, then n_gen single-token evals, with adapter
 * a (NULL: none): tokens/s of each. */
static void one_run(cera_engine *e, cera_adapter *a, const cera_token *t, int n_prompt, int n_gen, double *pp,
                    double *tg) {
    cera_error err;
    cera_session *s;
    if (cera_session_create(e, NULL, &s, &err)) die(&err);
    if (a && cera_session_set_adapter(s, a, 1.0f, &err)) die(&err);
    double t0 = now_s();
    if (cera_session_eval(s, t, (size_t)n_prompt, false, &err)) die(&err);
    double t1 = now_s();
    if (n_prompt / (t1 - t0) > *pp) *pp = n_prompt / (t1 - t0);
    cera_token tok = t[0];
    t0 = now_s();
    for (int i = 0; i < n_gen; i++)
        if (cera_session_eval(s, &tok, 1, false, &err)) die(&err);
    t1 = now_s();
    if (n_gen / (t1 - t0) > *tg) *tg = n_gen / (t1 - t0);
    cera_session_free(s);
}

/* Without the adapter (v = 0) and with it in each form v = 1 + cera_lora_cpu_set_fusion's
 * mode (after the matmul jobs; fused with B·t on each tile; fused with B·t in post chunks),
 * interleaved in a rotating order so that a shared machine's load changes hit all alike;
 * best of reps each. */
#define N_FORMS 4
static void single(cera_engine *e, cera_adapter *a, int n_prompt, int n_gen, int reps,
                   const bool want[N_FORMS], double pp[N_FORMS], double tg[N_FORMS]) {
    cera_token *t = malloc((size_t)n_prompt * sizeof *t);
    for (int i = 0; i < n_prompt; i++) t[i] = 1 + (i * 7919) % (cera_engine_n_vocab(e) - 1);
    for (int v = 0; v < N_FORMS; v++) pp[v] = tg[v] = 0;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < N_FORMS; k++) {
            const int v = (r + k) % N_FORMS;
            if (!want[v]) continue;
            cera_lora_cpu_set_fusion(v ? v - 1 : -1);
            one_run(e, v ? a : NULL, t, n_prompt, n_gen, &pp[v], &tg[v]);
        }
    cera_lora_cpu_set_fusion(-1);
    free(t);
}

/* B sequences decoding together: steps/s × B = tokens/s. mode 0: no adapter, 1: one
 * adapter shared by all, 2: a different adapter per sequence. */
static double batched(cera_engine *e, cera_adapter **ad, int B, int mode, int n_steps, int reps) {
    cera_error err;
    cera_session **s = calloc((size_t)B, sizeof *s);
    cera_batch_item *items = calloc((size_t)B, sizeof *items);
    cera_token *tok = malloc((size_t)B * sizeof *tok);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < B; i++) {
            if (cera_session_create(e, NULL, &s[i], &err)) die(&err);
            if (mode && cera_session_set_adapter(s[i], ad[mode == 1 ? 0 : i], 1.0f, &err)) die(&err);
            const cera_token t0 = 1 + i;
            if (cera_session_eval(s[i], &t0, 1, false, &err)) die(&err);
            tok[i] = 2 + i;
            items[i] = (cera_batch_item){s[i], &tok[i], 1, false, 0};
        }
        const double t0 = now_s();
        for (int step = 0; step < n_steps; step++)
            if (cera_batch_eval(e, items, B, &err)) die(&err);
        const double t1 = now_s();
        if (B * n_steps / (t1 - t0) > best) best = B * n_steps / (t1 - t0);
        for (int i = 0; i < B; i++) cera_session_free(s[i]);
    }
    free(s);
    free(items);
    free(tok);
    return best;
}

int main(int argc, char **argv) {
    const char *model = NULL;
    int threads = 0, rank = 16, n_prompt = 128, n_gen = 64, B = 32, reps = 3;
    bool want[N_FORMS] = {true, true, true, true}, forms_ok = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc)
            n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc)
            B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--forms") && i + 1 < argc) {
            const char *f = argv[++i];
            for (int v = 1; v < N_FORMS; v++) want[v] = false;
            forms_ok = *f != 0;
            for (; *f; f++) {
                if (*f < '0' || *f >= '0' + N_FORMS - 1)
                    forms_ok = false;
                else
                    want[1 + *f - '0'] = true;
            }
        } else if (argv[i][0] != '-' && !model)
            model = argv[i];
        else {
            fprintf(stderr,
                    "usage: lora_bench MODEL [-t THREADS] [-r RANK] [-p N_PROMPT] [-n N_GEN] [-b BATCH] "
                    "[--reps R] [--forms F]\n");
            return 2;
        }
    }
    if (!model || rank < 1 || rank > CERA_LORA_MAX_RANK || n_prompt < 1 || n_gen < 1 || B < 0 || reps < 1 ||
        !forms_ok) {
        fprintf(stderr, "usage: lora_bench MODEL [-t THREADS] [-r RANK] [-p N_PROMPT] [-n N_GEN] [-b BATCH] "
                        "[--reps R] [--forms F]\n");
        return 2;
    }
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = threads;
    ep.n_ctx = n_prompt + n_gen + 16 > 256 ? n_prompt + n_gen + 16 : 256;
    ep.n_batch = n_prompt > B ? n_prompt : B;
    if (B < 1) B = 1; /* -b 0: no batch tests; one adapter for prefill and decode */
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e;
    cera_error err;
    if (cera_engine_open(model, &ep, &e, &err)) die(&err);
    cera_adapter **ad = malloc((size_t)B * sizeof *ad);
    for (int i = 0; i < B; i++) ad[i] = random_adapter(&e->model, rank);

    double pp[N_FORMS], tg[N_FORMS];
    const double la0 = load_avg();
    const double start = now_s();
    single(e, ad[0], n_prompt, n_gen, reps, want, pp, tg);
    double b0 = 0, b1 = 0, bn = 0;
    if (B > 1) {
        b0 = batched(e, ad, B, 0, n_gen, reps);
        b1 = batched(e, ad, B, 1, n_gen, reps);
        bn = batched(e, ad, B, 2, n_gen, reps);
    }
    const double secs = now_s() - start, la1 = load_avg();

    /* what a decoded token reads: every projection weight, and the adapter's F32 factors */
    const cera_hparams *hp = &e->model.hp;
    double w_bytes = 0, f_bytes = 0;
    for (int l = 0; l < hp->n_layer; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            const cera_weight *w = &e->model.layers[l].proj[p];
            if (!w->data) continue;
            w_bytes += (double)cera_row_size(w->type, w->k) * (double)w->n;
            f_bytes += 4.0 * rank * (double)(w->k + w->n);
        }
    const cera_type_traits *wt = cera_type_get(e->model.layers[0].proj[0].type);
    printf("model %s: %d layers, n_embd %d, n_ff %d, weights %s (projections %.0f MB)\n", model, hp->n_layer,
           hp->n_embd, hp->n_ff, wt ? wt->name : "?", w_bytes / 1e6);
    printf("adapter: rank %d on all 7 projections of every layer, F32 factors %.1f MB (+%.1f %% of the "
           "projection bytes per decoded token)\n",
           rank, f_bytes / 1e6, 100 * f_bytes / w_bytes);
    printf(
        "threads %d (-t %d), CPU kernels %s; prefill/decode best of %d interleaved runs each, batches best "
        "of %d; %.0f s; load average %.2f before, %.2f after\n\n",
        e->params.n_threads > 0 ? e->params.n_threads : cera_cpu_count(), threads, cera_cpu_tier_name(), reps,
        reps, secs, la0, la1);
    const int nt = e->params.n_threads > 0 ? e->params.n_threads : cera_cpu_count();
    static const char *const form[N_FORMS] = {"", "after the matmul", "fused, B·t per tile",
                                              "fused, B·t post"};
    const int def = 1 + cera_lora_cpu_default_form(nt);
    printf("| threads | test | no adapter (tok/s) | adapter: form | tok/s | cost "
           "|\n|---:|---|---:|---|---:|---:|\n");
    for (int v = 1; v < N_FORMS; v++)
        if (want[v])
            printf("| %d | prefill pp%d | %.1f | %s%s | %.1f | %+.1f %% |\n", nt, n_prompt, pp[0], form[v],
                   v == def ? " (default)" : "", pp[v], 100 * (pp[0] / pp[v] - 1));
    for (int v = 1; v < N_FORMS; v++)
        if (want[v])
            printf("| %d | decode tg%d | %.2f | %s%s | %.2f | %+.1f %% |\n", nt, n_gen, tg[0], form[v],
                   v == def ? " (default)" : "", tg[v], 100 * (tg[0] / tg[v] - 1));
    printf("\n(after the matmul: the adapter's own two pool jobs after each projection's matmul job; fused: "
           "inside it, B·t on each finished output tile or in the job's last chunks; the batches below use "
           "the default)\n");
    if (B > 1) {
        printf("\n| threads | test | no adapter (tok/s) | with adapter(s) (tok/s) | cost |\n"
               "|---:|---|---:|---:|---:|\n");
        printf("| %d | batch of %d, 1 shared adapter | %.1f | %.1f | %+.1f %% |\n", nt, B, b0, b1,
               100 * (b0 / b1 - 1));
        printf(
            "| %d | batch of %d, %d different adapters | %.1f | %.1f | %+.1f %% (vs 1 shared: %+.1f %%) |\n",
            nt, B, B, b0, bn, 100 * (b0 / bn - 1), 100 * (b1 / bn - 1));
    }
    for (int i = 0; i < B; i++) cera_adapter_free(ad[i]);
    free(ad);
    cera_engine_close(e);
    return 0;
}

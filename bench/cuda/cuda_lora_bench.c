/*
 * cuda_lora_bench.c — what LoRA adapters cost on the GPU: the llama2-7b shape (--shape; random
 * weights made on the GPU, see synth_shape.h) with and without random rank-r adapters on
 * all seven projections of every layer:
 *   - pp: a prompt of -p tokens as one batch;
 *   - tg: -n tokens generated one at a time from an empty context (the decode graph);
 *   - a decode batch of -b sequences (one token each per step, -s steps, each sequence on
 *     its own KV blocks): no adapter, one adapter shared by all, and -b different adapters
 *     (rows grouped per adapter).
 * Prints one markdown table, best of --reps per line, and the cost against no adapter.
 *
 * usage: cuda_lora_bench [--synth TYPE] [--shape NAME] [-r RANK] [-p N] [-n N] [-b B] [-s STEPS] [--reps R]
 *                        [--targets qkvogud] [--no-graph]
 * --targets: the projections the adapters target (letters of q k v o gate up down).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_state.h"
#include "synth_shape.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, const cera_error *err) {
    fprintf(stderr, "cuda_lora_bench: %s: %s\n", what, err ? err->message : "");
    exit(1);
}

/* A rank-r adapter on every projection: factors uniform in ±0.035 (sd 0.02), alpha 2r.
 * The values do not change the speed; `seed` makes each adapter's differ. */
static const char proj_letter[CERA_PROJ_COUNT] = {'q', 'k', 'v', 'o', 'g', 'u', 'd'};

static cera_adapter *random_adapter(const cera_model *m, int rank, uint64_t seed, const char *targets) {
    size_t n = 0;
    for (int l = 0; l < m->hp.n_layer; l++)
        for (int p = 0; p <= CERA_PROJ_DOWN; p++)
            if (strchr(targets, proj_letter[p]))
                n += (size_t)rank * (size_t)(m->layers[l].proj[p].k + m->layers[l].proj[p].n);
    cera_adapter *a = NULL;
    cera_error err;
    if (cera_lora_alloc(m, n, "random", &a, &err)) die("adapter", &err);
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int l = 0; l < m->hp.n_layer; l++)
        for (int p = 0; p <= CERA_PROJ_DOWN; p++) {
            if (!strchr(targets, proj_letter[p])) continue;
            const cera_weight *w = &m->layers[l].proj[p];
            float *pa, *pb;
            if (cera_lora_add_pair(a, m, l, (cera_proj)p, rank, w->k, w->n, &pa, &pb, "random", &err))
                die("adapter", &err);
            const int64_t na = rank * w->k, nb = rank * w->n;
            for (int64_t i = 0; i < na + nb; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                const float v = 0.035f * (2.0f * (float)(x >> 40) / 16777216.0f - 1.0f);
                if (i < na)
                    pa[i] = v;
                else
                    pb[i - na] = v;
            }
        }
    a->alpha = 2.0f * (float)rank;
    return a;
}

/* The standalone sequence: tok/s of a prompt of n tokens, or of n decode steps. */
static double run_seq(cera_cuda_state *s, const cera_lora_batch *plan, cera_lora_set *set, int n,
                      bool prompt) {
    cera_error err;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) tok[i] = 1 + i * 7919 % 31999, pos[i] = i;
    int32_t am;
    const double t0 = now_s();
    if (prompt) {
        if (set) cera_lora_batch_build_uniform((cera_lora_batch *)plan, set, n);
        if (cu_forward_own(s, tok, pos, n, NULL, false, &am, set ? plan : NULL, &err)) die("prefill", &err);
    } else {
        if (set) cera_lora_batch_build_uniform((cera_lora_batch *)plan, set, 1);
        for (int i = 0; i < n; i++)
            if (cu_forward_own(s, &tok[i], &pos[i], 1, NULL, false, &am, set ? plan : NULL, &err))
                die("decode", &err);
    }
    const double dt = now_s() - t0;
    free(tok), free(pos);
    return n / dt;
}

/* B sequences, one token each per step for `steps` steps, sequence j on its own blocks
 * of the state's KV storage; sets[j] its adapters (NULL: none). tok/s over all rows. */
static double run_batch(cera_cuda_state *s, cera_lora_batch *plan, const cera_lora_set *const *sets, int B,
                        int steps) {
    cera_error err;
    const int per = (steps + CU_KV_BLOCK - 1) / CU_KV_BLOCK;
    if (B * per > s->own_blocks) die("batch: not enough KV blocks (raise the context)", NULL);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)B), *pos = malloc(sizeof(int32_t) * (size_t)B),
            *tt = malloc(sizeof(int32_t) * (size_t)B), *rows = malloc(sizeof(int32_t) * (size_t)B),
            *seq = malloc(sizeof(int32_t) * (size_t)B), *tables = malloc(sizeof(int32_t) * (size_t)(B * per));
    for (int j = 0; j < B; j++) {
        tt[j] = j * per, rows[j] = j, seq[j] = j;
        for (int b = 0; b < per; b++) tables[j * per + b] = j * per + b;
    }
    const bool any = sets[0] != NULL;
    if (any) cera_lora_batch_build(plan, seq, sets, B);
    const double t0 = now_s();
    for (int t = 0; t < steps; t++) {
        for (int j = 0; j < B; j++) tok[j] = 1 + (t * 31 + j * 7919) % 31999, pos[j] = t;
        if (cu_forward(s, tok, pos, B, tt, tables, B * per, s->own_kv, NULL, rows, B, NULL, NULL,
                       any ? plan : NULL, &err))
            die("batch", &err);
    }
    const double dt = now_s() - t0;
    free(tok), free(pos), free(tt), free(rows), free(seq), free(tables);
    return (double)B * steps / dt;
}

static double best(double a, double b) { return a > b ? a : b; }

int main(int argc, char **argv) {
    const char *synth = "q4_0", *targets = "qkvogud", *shape = "llama2-7b";
    bool no_graph = false;
    int rank = 16, np = 512, ng = 128, B = 32, steps = 32, reps = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool more = i + 1 < argc;
        if (!strcmp(a, "--synth") && more)
            synth = argv[++i];
        else if (!strcmp(a, "--shape") && more)
            shape = argv[++i];
        else if (!strcmp(a, "-r") && more)
            rank = atoi(argv[++i]);
        else if (!strcmp(a, "-p") && more)
            np = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && more)
            ng = atoi(argv[++i]);
        else if (!strcmp(a, "-b") && more)
            B = atoi(argv[++i]);
        else if (!strcmp(a, "-s") && more)
            steps = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && more)
            reps = atoi(argv[++i]);
        else if (!strcmp(a, "--targets") && more)
            targets = argv[++i];
        else if (!strcmp(a, "--no-graph"))
            no_graph = true;
        else {
            printf("usage: cuda_lora_bench [--synth TYPE] [--shape NAME] [-r RANK] [-p N] [-n N] [-b B] "
                   "[-s STEPS] [--reps R]\n");
            return strcmp(a, "--help") ? 2 : 0;
        }
    }
    if (rank < 1 || np < 1 || np > 512 || ng < 1 || B < 1 || B > 64 || steps < 1 || reps < 1) {
        fprintf(stderr, "cuda_lora_bench: impossible parameters\n");
        return 2;
    }
    if (!cera_cuda_available()) {
        fprintf(stderr, "cuda_lora_bench: no CUDA device\n");
        return 1;
    }
    cera_model m;
    if (!cera_bench_synth_model(&m, shape, synth)) die("unknown shape or type", NULL);
    // the adapter loader checks that each target exists; the GPU makes the weights' values
    static const uint8_t present = 0;
    for (int l = 0; l < m.hp.n_layer; l++)
        for (int p = 0; p <= CERA_PROJ_DOWN; p++) m.layers[l].proj[p].data = &present;
    cera_cuda_params prm = cera_cuda_default_params();
    prm.n_ctx = 4096;
    prm.n_batch = 512;
    prm.synthetic_weights = true;
    prm.no_graph = no_graph;
    cera_cuda_state *s = NULL;
    cera_error err;
    if (cera_cuda_init(&m, &prm, &s, &err)) die("init", &err);

    cera_adapter **ad = malloc(sizeof *ad * (size_t)B);
    const double t0 = now_s();
    for (int j = 0; j < B; j++) ad[j] = random_adapter(&m, rank, 1 + (uint64_t)j, targets);
    fprintf(stderr, "cuda_lora_bench: %d adapters of rank %d made in %.1f s\n", B, rank, now_s() - t0);
    cera_lora_set one = {0}, *each = calloc((size_t)B, sizeof *each);
    if (cera_lora_set_put(&one, ad[0], 1.0f, &err)) die("set", &err);
    for (int j = 0; j < B; j++)
        if (cera_lora_set_put(&each[j], ad[j], 1.0f, &err)) die("set", &err);
    cera_lora_batch plan;
    if (cera_lora_batch_init(&plan, 512, &err)) die("plan", &err);

    // warm-up: graphs captured, adapters uploaded
    run_seq(s, &plan, NULL, 8, false);
    run_seq(s, &plan, &one, 8, false);
    run_seq(s, &plan, &one, 64, true);
    double pp0 = 0, pp1 = 0, tg0 = 0, tg1 = 0, b0 = 0, b1 = 0, bn = 0;
    const cera_lora_set **none = calloc((size_t)B, sizeof *none),
                        **shared = calloc((size_t)B, sizeof *shared),
                        **diff = calloc((size_t)B, sizeof *diff);
    for (int j = 0; j < B; j++) shared[j] = &one, diff[j] = &each[j];
    run_batch(s, &plan, diff, B, 2); // uploads every adapter
    for (int r = 0; r < reps; r++) {
        pp0 = best(pp0, run_seq(s, &plan, NULL, np, true));
        pp1 = best(pp1, run_seq(s, &plan, &one, np, true));
        tg0 = best(tg0, run_seq(s, &plan, NULL, ng, false));
        tg1 = best(tg1, run_seq(s, &plan, &one, ng, false));
        b0 = best(b0, run_batch(s, &plan, none, B, steps));
        b1 = best(b1, run_batch(s, &plan, shared, B, steps));
        bn = best(bn, run_batch(s, &plan, diff, B, steps));
    }
    char dev[128] = "";
    cera_cuda_device_info(0, dev, sizeof dev, NULL, &err);
    printf("LoRA on %s: %s shape %s (synthetic), rank %d on projections %s, best of %d%s\n\n", dev, shape,
           synth, rank, targets, reps, no_graph ? ", decode without a graph" : "");
    printf("| test | no adapter (tok/s) | with adapter(s) (tok/s) | cost |\n|---|---:|---:|---:|\n");
    printf("| prefill pp%d | %.1f | %.1f | %+.1f %% |\n", np, pp0, pp1, 100.0 * (pp0 / pp1 - 1));
    printf("| decode tg%d | %.1f | %.1f | %+.1f %% |\n", ng, tg0, tg1, 100.0 * (tg0 / tg1 - 1));
    printf("| batch of %d, 1 shared adapter | %.1f | %.1f | %+.1f %% |\n", B, b0, b1, 100.0 * (b0 / b1 - 1));
    printf("| batch of %d, %d different adapters | %.1f | %.1f | %+.1f %% (%+.1f %% vs 1 shared) |\n", B, B,
           b0, bn, 100.0 * (b0 / bn - 1), 100.0 * (b1 / bn - 1));
    cera_lora_batch_free(&plan);
    cera_lora_set_clear(&one);
    for (int j = 0; j < B; j++) cera_lora_set_clear(&each[j]);
    cera_cuda_free(s); // before the adapters: their GPU copies go with them
    for (int j = 0; j < B; j++) cera_lora_release(ad[j]);
    free(ad), free(each), free(none), free(shared), free(diff);
    free(m.layers);
    return 0;
}

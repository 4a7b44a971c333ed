/*
 * cuda_bench.c — the CUDA backend's speed on one GPU, in llama-bench's terms.
 *
 * In one process: the device's bandwidth (a device-to-device copy, counting bytes read
 * plus written, and a 128-bit streaming read), the decode matvec alone per weight type
 * (GB/s of weight bytes), then for a model: pp (a prompt of -p tokens as one batch), tg
 * (-n tokens generated one at a time from an empty context) and tg at depth -d (after a
 * prompt of -d tokens), each -r times, as tok/s, with the weight bytes streamed per
 * generated token, the GB/s that makes and its share of the measured read bandwidth.
 *
 * The model is a GGUF file (-m) or, with --synth, a random-weight model of the
 * llama2-7b shape (--shape: llama-3.1-8b, llama-3.1-70b; synth_shape.h) made on the GPU (no file,
 * no host memory): the tensor types llama-quantize
 * gives for the named type (q4_0 and q4_k_m keep output.weight in Q6_K; q4_k_m puts
 * attn_v and ffn_down of the use_more_bits layers in Q6_K). Speed depends on shapes and
 * types, not on the values. Prints one markdown row per test (and --md-header).
 * -p 0 skips the prompt test, -d 0 the depth test; --mv-types q4_0,f16 limits --matvec and
 * --matvec-rows; --kv TYPE keeps the KV cache in bf16, q8_0 or q4_0 (default f16; the block
 * types rotated as the engine rotates them).
 * --matvec-rows: the several-row matvec (a decode batch of n_rows tokens, cu_matvec_rows) on the
 * llama2-7b projections for n_rows 1, 2, 4, 8, 16: µs per launch, the weight GB/s that makes, and
 * the speed-up over n_rows one-row launches (n_rows times the one-row launch's time). The last
 * shape is gate+up with the SwiGLU epilogue (two 4096 -> 11008 weights per launch).
 * --mma: the tensor-core batched matmul (cu_mma_q8, mma.cu), Q4_0 and Q8_0, on 4096x4096,
 * 11008x4096 (gate/up) and 4096x11008 (down) for 1 (the one-row matvec), 8, 16, 32 and 64 rows:
 * µs per launch, weight GB/s, µs per row relative to the one-row kernel, and the speed-up.
 *
 * usage: cuda_bench [--synth TYPE [--shape NAME] | -m MODEL] [-p 512] [-n 128] [-d 4096] [-r 3]
 *                   [--kv f16|bf16|q8_0|q4_0] [--bw-gib 4] [--matvec] [--matvec-rows] [--mma]
 *                   [--mv-types LIST] [--md-header] [--no-pdl]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "synth_shape.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* True when name is one of the comma-separated names of list. */
static bool name_in_list(const char *name, const char *list) {
    const size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == len && !strncmp(p, name, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static void die(const char *what, const cera_error *err) {
    fprintf(stderr, "cuda_bench: %s: %s\n", what, err ? err->message : "");
    exit(1);
}

typedef struct stats {
    double mean, sd;
} stats;

static stats stat_of(const double *v, int n) {
    stats s = {0, 0};
    for (int i = 0; i < n; i++) s.mean += v[i];
    s.mean /= n;
    for (int i = 0; i < n; i++) s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

/* tok/s of -n single-token steps starting at position `depth` (the prompt before it
 * evaluated untimed in batches). */
static double run_tg(cera_cuda_state *s, int n_batch, int depth, int n, int vocab) {
    cera_error err;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_batch),
            *pos = malloc(sizeof(int32_t) * (size_t)n_batch);
    for (int done = 0; done < depth;) {
        const int b = depth - done < n_batch ? depth - done : n_batch;
        for (int i = 0; i < b; i++) tok[i] = (done + i) * 7919 % vocab, pos[i] = done + i;
        if (cera_cuda_forward(s, tok, pos, b, NULL, false, NULL, &err)) die("depth prompt", &err);
        done += b;
    }
    int32_t t = 1;
    const double t0 = now_s();
    for (int i = 0; i < n; i++) {
        const int32_t p = depth + i;
        if (cera_cuda_forward(s, &t, &p, 1, NULL, false, &t, &err)) die("decode", &err);
    }
    const double dt = now_s() - t0;
    free(tok);
    free(pos);
    return n / dt;
}

static double run_pp(cera_cuda_state *s, int n, int vocab) {
    cera_error err;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) tok[i] = i * 7919 % vocab, pos[i] = i;
    int32_t am;
    const double t0 = now_s();
    if (cera_cuda_forward(s, tok, pos, n, NULL, false, &am, &err)) die("prefill", &err);
    const double dt = now_s() - t0;
    free(tok);
    free(pos);
    return n / dt;
}

int main(int argc, char **argv) {
    const char *synth = NULL, *model = NULL, *shape = "llama2-7b";
    int p = 512, n = 128, d = 4096, r = 3;
    double bw_gib = 4;
    bool matvec = false, matvec_rows = false, mma = false, header = false, no_pdl = false;
    cera_type kv_tt = CERA_TYPE_F16; /* the KV cache's type */
    const char *kv_name = "f16";
    bool gemm = false;
    const char *mv_types = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool more = i + 1 < argc;
        if (!strcmp(a, "--synth") && more)
            synth = argv[++i];
        else if (!strcmp(a, "--shape") && more)
            shape = argv[++i];
        else if (!strcmp(a, "-m") && more)
            model = argv[++i];
        else if (!strcmp(a, "-p") && more)
            p = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && more)
            n = atoi(argv[++i]);
        else if (!strcmp(a, "-d") && more)
            d = atoi(argv[++i]);
        else if (!strcmp(a, "-r") && more)
            r = atoi(argv[++i]);
        else if (!strcmp(a, "--bw-gib") && more)
            bw_gib = atof(argv[++i]);
        else if (!strcmp(a, "--matvec"))
            matvec = true;
        else if (!strcmp(a, "--matvec-rows"))
            matvec_rows = true;
        else if (!strcmp(a, "--mma"))
            mma = true;
        else if (!strcmp(a, "--mv-types") && more)
            mv_types = argv[++i];
        else if (!strcmp(a, "--md-header"))
            header = true;
        else if (!strcmp(a, "--no-pdl"))
            no_pdl = true;
        else if (!strcmp(a, "--gemm"))
            gemm = true;
        else if (!strcmp(a, "--kv") && more && cera_type_from_name(argv[i + 1], &kv_tt) &&
                 (kv_tt == CERA_TYPE_F16 || kv_tt == CERA_TYPE_BF16 || kv_tt == CERA_TYPE_Q8_0 ||
                  kv_tt == CERA_TYPE_Q4_0))
            kv_name = argv[++i];
        else {
            fprintf(stderr,
                    "usage: cuda_bench [--synth TYPE [--shape NAME] | -m MODEL] [-p N] [-n N] [-d N] "
                    "[-r N] [--bw-gib G] [--kv f16|bf16|q8_0|q4_0] [--matvec] [--matvec-rows] [--mma] "
                    "[--mv-types LIST] [--md-header] [--no-pdl] [--gemm]\n");
            return 2;
        }
    }
    if (r < 1) r = 1;
    if (!cera_cuda_available()) {
        fprintf(stderr, "cuda_bench: no CUDA device\n");
        return 1;
    }
    cera_error err;
    char name[256];
    size_t mem = 0;
    if (cera_cuda_device_info(0, name, sizeof name, &mem, &err)) die("device", &err);
    double copy_gbps = 0, read_gbps = 0;
    if (cera_cuda_measure_bandwidth((size_t)(bw_gib * (1ull << 30)), &copy_gbps, &read_gbps, &err))
        die("bandwidth", &err);
    fprintf(stderr, "device: %s, %.1f GiB; copy %.0f GB/s (read+write), streaming read %.0f GB/s\n", name,
            mem / 1073741824.0, copy_gbps, read_gbps);
    printf("bandwidth: copy %.0f GB/s, read %.0f GB/s (%s)\n", copy_gbps, read_gbps, name);
    if (matvec) {
        const cera_type mt[] = {CERA_TYPE_Q4_0, CERA_TYPE_Q8_0, CERA_TYPE_F16,
                                CERA_TYPE_BF16, CERA_TYPE_Q4_K, CERA_TYPE_Q6_K,
                                CERA_TYPE_Q4_1, CERA_TYPE_Q5_K, CERA_TYPE_IQ4_XS};
        const int64_t shapes[][2] = {{4096, 4096}, {4096, 11008}, {11008, 4096}};
        for (size_t i = 0; i < sizeof mt / sizeof mt[0]; i++)
            for (size_t j = 0; j < 3; j++) {
                if (mv_types && !name_in_list(cera_type_get(mt[i])->name, mv_types)) continue;
                double g = 0;
                if (cera_cuda_bench_matvec(mt[i], shapes[j][0], shapes[j][1], 200, &g, &err))
                    die("matvec", &err);
                printf("matvec %-6s k=%-5lld n=%-5lld %7.0f GB/s  %5.1f %% of read\n",
                       cera_type_get(mt[i])->name, (long long)shapes[j][0], (long long)shapes[j][1], g,
                       100 * g / read_gbps);
            }
    }
    if (matvec_rows) {
        const cera_type mt[] = {CERA_TYPE_Q4_0, CERA_TYPE_Q8_0, CERA_TYPE_F16,
                                CERA_TYPE_BF16, CERA_TYPE_Q4_K, CERA_TYPE_Q6_K};
        // {k, n, swiglu}: Q/K/V/O, down, gate+up
        const int64_t shapes[][3] = {{4096, 4096, 0}, {11008, 4096, 0}, {4096, 11008, 1}};
        const int nr[] = {1, 2, 4, 8, 16};
        printf("| type | shape (n x k) | rows | µs/launch | weight GB/s | %% of read | vs rows x 1-row |\n");
        printf("|---|---|---:|---:|---:|---:|---:|\n");
        for (size_t i = 0; i < sizeof mt / sizeof mt[0]; i++)
            for (size_t j = 0; j < 3; j++) {
                if (mv_types && !name_in_list(cera_type_get(mt[i])->name, mv_types)) continue;
                const int64_t k = shapes[j][0], nn = shapes[j][1];
                const bool sw = shapes[j][2] != 0;
                double us1 = 0;
                for (size_t q = 0; q < sizeof nr / sizeof nr[0]; q++) {
                    double us = 0, g = 0;
                    if (cera_cuda_bench_matvec_rows(mt[i], k, nn, nr[q], sw, 200, &us, &g, &err))
                        die("matvec rows", &err);
                    if (q == 0) us1 = us;
                    printf("| %s | %lldx%lld%s | %d | %.2f | %.0f | %.1f %% | %.2fx |\n",
                           cera_type_get(mt[i])->name, (long long)nn, (long long)k, sw ? " x2 swiglu" : "",
                           nr[q], us, g, 100 * g / read_gbps, nr[q] * us1 / us);
                    fflush(stdout);
                }
            }
    }
    if (mma) {
        // the tensor-core batched matmul (cu_mma_q8); rows 1 is the one-row decode matvec
        const cera_type mt[] = {CERA_TYPE_Q4_0, CERA_TYPE_Q8_0};
        const int64_t shapes[][2] = {{4096, 4096}, {4096, 11008}, {11008, 4096}}; // {k, n}
        const int nr[] = {1, 8, 16, 32, 64};
        printf("| type | weight (n x k) | rows | µs/launch | weight GB/s | µs/row vs 1 row | speed-up vs "
               "rows x 1-row |\n");
        printf("|---|---|---:|---:|---:|---:|---:|\n");
        for (size_t i = 0; i < sizeof mt / sizeof mt[0]; i++)
            for (size_t j = 0; j < 3; j++) {
                if (mv_types && !name_in_list(cera_type_get(mt[i])->name, mv_types)) continue;
                const int64_t k = shapes[j][0], nn = shapes[j][1];
                double us1 = 0;
                for (size_t q = 0; q < sizeof nr / sizeof nr[0]; q++) {
                    double us = 0, g = 0;
                    if (cera_cuda_bench_mma(mt[i], k, nn, nr[q], 200, &us, &g, &err)) die("mma", &err);
                    if (q == 0) us1 = us;
                    printf("| %s | %lldx%lld | %d | %.2f | %.0f | %.3f | %.2fx |\n",
                           cera_type_get(mt[i])->name, (long long)nn, (long long)k, nr[q], us, g,
                           us / nr[q] / us1, nr[q] * us1 / us);
                    fflush(stdout);
                }
            }
    }
    if (!synth && !model) return 0;

    cera_model m;
    gguf_file *f = NULL;
    cera_cuda_params prm = cera_cuda_default_params();
    const int n_batch = p > 0 ? p : 64; // the depth prompt's batches
    prm.n_ctx = d + n + 64 > n_batch ? d + n + 64 : n_batch;
    prm.n_batch = n_batch;
    prm.no_pdl = no_pdl;
    prm.force_gemm = gemm;
    cera_engine_params kvp = cera_engine_default_params(); /* the engine's rotation rule */
    kvp.kv_type = kv_tt == CERA_TYPE_BF16   ? CERA_KV_BF16
                  : kv_tt == CERA_TYPE_Q8_0 ? CERA_KV_Q8_0
                  : kv_tt == CERA_TYPE_Q4_0 ? CERA_KV_Q4_0
                                            : CERA_KV_F16;
    prm.kv_type = kvp.kv_type;
    const char *label = model;
    if (synth) {
        if (!cera_bench_synth_model(&m, shape, synth)) die("unknown shape or type", NULL);
        prm.synthetic_weights = true;
        static char lb[96];
        snprintf(lb, sizeof lb, "%s %s (synthetic)%s%s%s%s", shape, synth, no_pdl ? " no PDL" : "",
                 kv_tt != CERA_TYPE_F16 ? " KV " : "", kv_tt != CERA_TYPE_F16 ? kv_name : "",
                 gemm ? " cuBLAS" : "");
        label = lb;
    } else {
        if (gguf_open(model, &f, &err) || cera_model_load(f, &m, &err)) die(model, &err);
    }
    cera_kv_format kvf;
    if (cera_kv_format_of(&kvp, m.hp.head_dim, true, &kvf, &err)) die("KV cache", &err);
    prm.kv_rot_k = kvf.rot_k;
    prm.kv_rot_v = kvf.rot_v;
    cera_cuda_state *s = NULL;
    const double t_load = now_s();
    if (cera_cuda_init(&m, &prm, &s, &err)) die("init", &err);
    fprintf(stderr, "loaded in %.1f s, %.2f GiB of weights streamed per token\n", now_s() - t_load,
            cera_cuda_weight_bytes(s) / 1073741824.0);
    const double wbytes = (double)cera_cuda_weight_bytes(s);
    // warm-up: graph capture, cuBLAS heuristics, clocks
    run_tg(s, n_batch, 0, 8, m.hp.n_vocab);
    if (p > 0) run_pp(s, p, m.hp.n_vocab);
    double *v = malloc(sizeof(double) * (size_t)r);
    if (header) {
        printf("| model | test | tok/s | weight GB/s | %% of read BW |\n");
        printf("|---|---|---:|---:|---:|\n");
    }
    stats st;
    if (p > 0) {
        for (int i = 0; i < r; i++) v[i] = run_pp(s, p, m.hp.n_vocab);
        st = stat_of(v, r);
        printf("| %s | pp%d | %.0f ± %.0f | | |\n", label, p, st.mean, st.sd);
        fflush(stdout);
    }
    for (int i = 0; i < r; i++) v[i] = run_tg(s, n_batch, 0, n, m.hp.n_vocab);
    st = stat_of(v, r);
    printf("| %s | tg%d | %.1f ± %.1f | %.0f | %.1f %% |\n", label, n, st.mean, st.sd, wbytes * st.mean / 1e9,
           100 * wbytes * st.mean / 1e9 / read_gbps);
    fflush(stdout);
    if (d > 0) {
        // at depth the KV cache is streamed too: K and V rows of every layer in the cache's type
        const double kv = (double)m.hp.n_layer * 2 * (d + n / 2.0) *
                          (double)cera_row_size(kv_tt, (int64_t)m.hp.n_head_kv * m.hp.head_dim);
        for (int i = 0; i < r; i++) v[i] = run_tg(s, n_batch, d, n, m.hp.n_vocab);
        st = stat_of(v, r);
        printf("| %s | tg%d @ d%d | %.1f ± %.1f | %.0f (+KV %.0f) | %.1f %% |\n", label, n, d, st.mean, st.sd,
               wbytes * st.mean / 1e9, kv * st.mean / 1e9, 100 * (wbytes + kv) * st.mean / 1e9 / read_gbps);
    }
    free(v);
    cera_cuda_free(s);
    if (synth)
        free(m.layers);
    else {
        cera_model_free(&m);
        gguf_close(f);
    }
    return 0;
}

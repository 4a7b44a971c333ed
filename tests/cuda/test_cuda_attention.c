/*
 * test_cuda_attention.c — the attention kernels (cu_attention) and the KV store
 * (cu_rope_store) against a double-precision reference on fresh random inputs (seed printed):
 *   - the cache in F16, BF16, Q8_0 and Q4_0; the reference sees the same stored values (K/V
 *     rounded to F16 or BF16, or quantized per 32 values as llama.cpp's q8_0 and q4_0 with the
 *     scale rounded to F16) and the query rounded to F16, as the kernels do;
 *   - the decode kernel (one token per block) at head sizes 8..256 and query groups of 1, 2, 4
 *     and 7 heads (a group wider than the kernel's 4 heads per block takes two blocks), over
 *     1 to 4100 positions with 1, 16 and 64 splits (partials merged by the last block), and
 *     several tokens at different depths in one launch;
 *   - prefill (several tokens of one sequence, causal): the tensor-core kernel where the head
 *     size is a multiple of 16 up to 128, else the tiled one; 40 and 150 tokens (several query
 *     tiles, the last partial), over a cache that starts before them;
 *   - a sliding window (Gemma 3's local layers) in decode, several-token decode and prefill,
 *     with the blocks wholly before the first query's window out of the block table (-1), as
 *     the sliding KV group drops them: a kernel that read one would fault.
 * The cache's block table is not the identity. Bound, with V in [-1, 1]: |out - ref| <= 2e-4
 * (F16, BF16) or 3e-3 (Q8_0, Q4_0) in decode; prefill rounds the softmax weights to F16 for the
 * tensor cores: 2e-3 and 4e-3. Exits 77 without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_backend.h"
#include "core/fp16.h"
#include "testutil.h"

static float f16r(float x) { return cera_f16_to_f32(cera_f32_to_f16(x)); }

static const cera_kv_type types[] = {CERA_KV_F16, CERA_KV_Q8_0, CERA_KV_Q4_0, CERA_KV_BF16};
static const char *const type_names[] = {"f16", "q8_0", "q4_0", "bf16"};

static bool block_type(cera_kv_type t) { return t == CERA_KV_Q8_0 || t == CERA_KV_Q4_0; }

/* What the cache holds for rows of n values (n % 32 == 0 for the block types). */
static void stored(float *x, int64_t n, cera_kv_type t) {
    if (t == CERA_KV_F16 || t == CERA_KV_BF16) {
        for (int64_t i = 0; i < n; i++)
            x[i] = t == CERA_KV_F16 ? f16r(x[i]) : cera_bf16_to_f32(cera_f32_to_bf16(x[i]));
        return;
    }
    for (int64_t b = 0; b < n; b += 32) {
        float amax = 0.0f, mx = 0.0f;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[b + j]) > amax) amax = fabsf(x[b + j]), mx = x[b + j];
        if (t == CERA_KV_Q8_0) {
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f, dr = f16r(d);
            for (int j = 0; j < 32; j++) x[b + j] = (float)(int)roundf(x[b + j] * id) * dr;
        } else {
            const float d = mx / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f, dr = f16r(d);
            for (int j = 0; j < 32; j++) {
                const int q = (int)(x[b + j] * id + 8.5f);
                x[b + j] = (float)((q < 15 ? q : 15) - 8) * dr;
            }
        }
    }
}

static void run_w(test_rng *rng, int n_head, int n_head_kv, int hd, int ti, int n_kv, int n_tok,
                  const int32_t *pos, int n_splits, int qt, float qmag, int window) {
    const int64_t kvd = (int64_t)n_head_kv * hd, nq = (int64_t)n_head * hd;
    float *k = malloc(sizeof(float) * (size_t)(n_kv * kvd)),
          *v = malloc(sizeof(float) * (size_t)(n_kv * kvd));
    float *q = malloc(sizeof(float) * (size_t)(n_tok * nq)),
          *out = malloc(sizeof(float) * (size_t)(n_tok * nq));
    double *s = malloc(sizeof(double) * (size_t)n_kv);
    for (int64_t i = 0; i < n_kv * kvd; i++) k[i] = 2 * test_rng_uniform(rng) - 1;
    for (int64_t i = 0; i < n_kv * kvd; i++) v[i] = 2 * test_rng_uniform(rng) - 1;
    for (int64_t i = 0; i < n_tok * nq; i++) q[i] = qmag * (2 * test_rng_uniform(rng) - 1);
    const float scale = 1.0f / sqrtf((float)hd);
    cera_error err;
    const cera_status st = cera_cuda_test_attention(n_head, n_head_kv, hd, types[ti], n_kv, k, v, n_tok, pos,
                                                    q, scale, n_splits, qt, window, out, &err);
    CHECK(st == CERA_OK, "attention: %s", err.message);
    // the reference on what the kernels see
    stored(k, n_kv * kvd, types[ti]);
    stored(v, n_kv * kvd, types[ti]);
    double worst = 0.0;
    for (int i = 0; i < n_tok && st == CERA_OK; i++) {
        for (int h = 0; h < n_head; h++) {
            const int kvh = h / (n_head / n_head_kv);
            const float *qh = q + i * nq + (int64_t)h * hd;
            double mx = -INFINITY;
            const int t0 = window > 0 && pos[i] - window + 1 > 0 ? pos[i] - window + 1 : 0;
            for (int t = t0; t <= pos[i]; t++) {
                double d = 0;
                for (int j = 0; j < hd; j++) d += (double)f16r(qh[j]) * k[t * kvd + (int64_t)kvh * hd + j];
                s[t] = d * scale;
                mx = fmax(mx, s[t]);
            }
            double sum = 0;
            for (int t = t0; t <= pos[i]; t++) sum += s[t] = exp(s[t] - mx);
            for (int j = 0; j < hd; j++) {
                double o = 0;
                for (int t = t0; t <= pos[i]; t++) o += s[t] * v[t * kvd + (int64_t)kvh * hd + j];
                const double got = out[i * nq + (int64_t)h * hd + j];
                worst = isnan(got) ? INFINITY : fmax(worst, fabs(got - o / sum));
            }
        }
    }
    // prefill rounds the softmax weights to F16 for the tensor-core product (as llama.cpp)
    const bool q8 = block_type(types[ti]);
    const double tol = qt > 1 ? (q8 ? 4e-3 : 2e-3) : q8 ? 3e-3 : 2e-4;
    printf("heads %d/%d hd %3d %-4s depth %4d tokens %2d splits %2d qt %2d window %3d: error %.2e\n", n_head,
           n_head_kv, hd, type_names[ti], n_kv, n_tok, n_splits, qt, window, worst);
    fflush(stdout);
    CHECK(worst <= tol, "heads %d/%d hd %d %s depth %d tokens %d splits %d qt %d: error %.3g > %.0e", n_head,
          n_head_kv, hd, type_names[ti], n_kv, n_tok, n_splits, qt, worst, tol);
    free(k), free(v), free(q), free(out), free(s);
}

static void run(test_rng *rng, int n_head, int n_head_kv, int hd, int ti, int n_kv, int n_tok,
                const int32_t *pos, int n_splits, int qt, float qmag) {
    run_w(rng, n_head, n_head_kv, hd, ti, n_kv, n_tok, pos, n_splits, qt, qmag, 0);
}

/* argv[1]: run only the first N shapes (the compute-sanitizer runs take a few). */
int main(int argc, char **argv) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    const uint64_t seed = (uint64_t)time(NULL);
    printf("seed %llu\n", (unsigned long long)seed);
    test_rng rng = {seed};
    // decode: one token at the last position
    const int depths[] = {1, 5, 64, 65, 300, 4100};
    const struct {
        int n_head, n_head_kv, hd;
    } shapes[] = {{4, 4, 128}, {8, 2, 64}, {7, 1, 64}, {4, 2, 32}, {4, 2, 8}, {2, 1, 256}, {6, 2, 128}};
    size_t n_shapes = sizeof shapes / sizeof shapes[0];
    if (argc > 1 && atoi(argv[1]) > 0 && (size_t)atoi(argv[1]) < n_shapes) n_shapes = (size_t)atoi(argv[1]);
    for (size_t sh = 0; sh < n_shapes; sh++) {
        for (int q8 = 0; q8 < 4; q8++) {                               // the type's index
            if (block_type(types[q8]) && shapes[sh].hd % 32) continue; // whole blocks per head
            for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
                if (depths[d] > 300 && shapes[sh].hd < 64) continue;
                const int n_splits[] = {1, 16, 64};
                for (int ns = 0; ns < 3; ns++) {
                    const int32_t pos = depths[d] - 1;
                    run(&rng, shapes[sh].n_head, shapes[sh].n_head_kv, shapes[sh].hd, q8, depths[d], 1, &pos,
                        n_splits[ns], 1, ns == 1 ? 6.0f : 1.0f);
                }
            }
            // several decode tokens of one sequence at different depths, one launch
            const int32_t pos3[3] = {700, 12, 1023};
            run(&rng, shapes[sh].n_head, shapes[sh].n_head_kv, shapes[sh].hd, q8, 1024, 3, pos3, 8, 1, 1.0f);
            // prefill: 40 tokens at 0..39 (and a chunk at 60..99 over a longer cache), tiled kernel
            int32_t pp[40];
            for (int i = 0; i < 40; i++) pp[i] = i;
            run(&rng, shapes[sh].n_head, shapes[sh].n_head_kv, shapes[sh].hd, q8, 40, 40, pp, 4, 16, 1.0f);
            for (int i = 0; i < 40; i++) pp[i] = 60 + i;
            run(&rng, shapes[sh].n_head, shapes[sh].n_head_kv, shapes[sh].hd, q8, 100, 40, pp, 2, 16, 1.0f);
            // 150 tokens at 10..159: several query tiles, the last one partial
            int32_t pl[150];
            for (int i = 0; i < 150; i++) pl[i] = 10 + i;
            run(&rng, shapes[sh].n_head, shapes[sh].n_head_kv, shapes[sh].hd, q8, 160, 150, pl, 1, 16, 4.0f);
            // a sliding window: decode (1 and 16 splits, a window inside one block and across
            // several), several decode tokens, prefill chunks
            const int H = shapes[sh].n_head, HK = shapes[sh].n_head_kv, D = shapes[sh].hd;
            const int32_t pw = 299;
            run_w(&rng, H, HK, D, q8, 300, 1, &pw, 1, 1, 1.0f, 16);
            run_w(&rng, H, HK, D, q8, 300, 1, &pw, 16, 1, 1.0f, 100);
            run_w(&rng, H, HK, D, q8, 1024, 3, pos3, 8, 1, 1.0f, 40);
            run_w(&rng, H, HK, D, q8, 100, 40, pp, 2, 16, 1.0f, 16);
            run_w(&rng, H, HK, D, q8, 160, 150, pl, 1, 16, 4.0f, 70);
        }
    }
    return test_finish();
}

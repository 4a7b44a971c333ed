/*
 * test_lora_moe.c — a runtime LoRA adapter on the routed experts of lfm2moe against llama.cpp.
 * The adapter (tests/model/data/lfm2moe/README.md says how it and llama.cpp's outputs were made)
 * targets, in both MoE blocks 1 and 3, the router (ffn_gate_inp) and the three expert tensors
 * (ffn_{gate,up,down}_exps, 3-D factors: one pair per expert), plus one ordinary projection per
 * block (attn_q, shortconv.out_proj). Cases: the F32 model at scale 1 and the Q8_0 model at
 * scale 0.5 (the synth_models fixture's files).
 *   CPU (no argument): per position the logits are within 1e-3 (F32) or 6e-2 (Q8_0) of the
 *   row's max |logit| (test_golden's bounds; measured 2.0e-6 and 0), the top token everywhere,
 *   the greedy continuation llama.cpp's token for token; prefill equals decode bit for bit; a
 *   batch of the adapted sequence and a plain one equals each alone; scale 0 is no adapter.
 *   CUDA (argument "cuda", exit 77 without a GPU): the same checks at test_cuda_golden's bounds
 *   (F32 5e-3; quantized LFM2 1e-1, the top token at 85 % of the positions, the greedy match
 *   printed), with the factors kept in F16 there; prefill (cuBLAS, experts grouped), decode
 *   (each slot's expert matvec) and the mixed batch within those bounds of each other instead
 *   of bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef CERA_TEST_CUDA /* tests/cuda's build of this file */
#include "backend/cuda/cuda_backend.h"
#endif
#include "cera.h"
#include "engine_util.h"
#include "testutil.h"

#define ADAPTER "data/lfm2moe/lora.gguf"

static bool on_gpu;

/* max over rows of |a - b| relative to the row's max |b| (b NULL or a NULL: infinite) */
static double max_rel(const float *a, const float *b, size_t rows, int nv) {
    double worst = 0;
    for (size_t i = 0; i < rows; i++) {
        double m = 0, d = 0;
        for (int j = 0; j < nv; j++) {
            m = fmax(m, fabs(b[i * nv + j]));
            const double x = fabs((double)a[i * nv + j] - b[i * nv + j]);
            d = isnan(x) ? INFINITY : fmax(d, x);
        }
        worst = fmax(worst, d / (m > 0 ? m : 1));
    }
    return worst;
}

/* a equals b: bit for bit on the CPU, within tol of the row's max on the GPU */
static bool agree(const float *a, const float *b, size_t rows, int nv, double tol) {
    if (!a || !b) return false;
    return on_gpu ? max_rel(a, b, rows, nv) <= tol : test_same_bits(a, b, rows * (size_t)nv);
}

static void check_case(const char *model, const char *name, float scale, double tol, bool quant) {
    cera_engine *e = test_open_engine(model, on_gpu ? CERA_DEVICE_CUDA : CERA_DEVICE_CPU);
    cera_adapter *a = e ? test_load_adapter(e, ADAPTER) : NULL;
    if (!a) {
        cera_engine_close(e);
        return;
    }
    const int nv = cera_engine_n_vocab(e);
    test_golden g;
    if (!test_golden_load(name, nv, &g)) {
        cera_adapter_free(a);
        cera_engine_close(e);
        return;
    }
    const size_t n = g.n_tokens;
    const test_attach at[1] = {{a, scale}}, none[1] = {{a, 0.0f}};
    float *got = test_session_logits(e, at, 1, g.tokens, n, false),
          *dec = test_session_logits(e, at, 1, g.tokens, n, true),
          *plain = test_session_logits(e, NULL, 0, g.tokens, n, false),
          *zero = test_session_logits(e, none, 1, g.tokens, n, false);
    const double worst = got ? max_rel(got, g.logits, n, nv) : INFINITY;
    size_t top = 0;
    for (size_t i = 0; got && i < n; i++)
        top += test_argmax(got + i * nv, nv) == test_argmax(g.logits + i * nv, nv);
    const size_t top_need = on_gpu && quant ? (n * 85 + 99) / 100 : n;
    /* greedy, one token at a time after the prompt */
    size_t same = 0;
    cera_session *s = NULL;
    cera_error err = {0};
    if (g.greedy && !cera_session_create(e, NULL, &s, &err) && !cera_session_set_adapter(s, a, scale, &err) &&
        !cera_session_eval(s, g.tokens, n, false, &err)) {
        for (; same < g.n_greedy; same++) {
            const cera_token t = test_argmax(cera_session_logits(s, -1), nv);
            if (t != g.greedy[same] || cera_session_eval(s, &t, 1, false, &err)) break;
        }
    }
    printf("%-24s max |diff| %.3g of the row max, top %zu/%zu, greedy %zu/%zu as llama.cpp\n", name, worst,
           top, n, same, g.n_greedy);
    CHECK(got && worst <= tol && top >= top_need, "%s: logits differ from llama.cpp's by %.3g (top %zu/%zu)",
          name, worst, top, n);
    if (!(on_gpu && quant))
        CHECK(g.greedy && same == g.n_greedy, "%s: greedy departs from llama.cpp at token %zu", name, same);
    CHECK(agree(dec, got, n, nv, tol), "%s: decode logits differ from prefill logits (%.3g)", name,
          got && dec ? max_rel(dec, got, n, nv) : INFINITY);
    CHECK(agree(zero, plain, n, nv, tol), "%s: scale 0 differs from no adapter", name);
    CHECK(plain && got && !test_same_bits(plain, got, n * (size_t)nv), "%s: the adapter changed nothing",
          name);

    /* one batch: the adapted sequence and a plain one, each as alone */
    cera_session *sa = NULL, *sb = NULL;
    const bool made = !cera_session_create(e, NULL, &sa, &err) && !cera_session_create(e, NULL, &sb, &err) &&
                      !cera_session_set_adapter(sa, a, scale, &err);
    const cera_batch_item items[2] = {{sa, g.tokens, n, true, 0}, {sb, g.tokens + 5, n - 5, true, 0}};
    CHECK(made && !cera_batch_eval(e, items, 2, &err), "%s: batch: %s", name, err.message);
    int bad = 0;
    for (size_t i = 0; made && got && i < n; i++)
        bad += !agree(cera_session_logits(sa, (int)i), got + i * nv, 1, nv, tol);
    float *plain5 = test_session_logits(e, NULL, 0, g.tokens + 5, n - 5, false);
    for (size_t i = 0; made && plain5 && i < n - 5; i++)
        bad += !agree(cera_session_logits(sb, (int)i), plain5 + i * nv, 1, nv, tol);
    CHECK(bad == 0, "%s: %d rows of a mixed batch differ from the sequences alone", name, bad);
    free(plain5);
    cera_session_free(sa);
    cera_session_free(sb);
    cera_session_free(s);
    free(got);
    free(dec);
    free(plain);
    free(zero);
    test_golden_free(&g);
    cera_adapter_free(a);
    cera_engine_close(e);
}

int main(int argc, char **argv) {
    on_gpu = argc > 1 && !strcmp(argv[1], "cuda");
#ifdef CERA_TEST_CUDA
    const bool gpu = cera_cuda_available();
#else
    const bool gpu = false;
#endif
    if (on_gpu && !gpu) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    check_case("synth/lfm2moe-f32.gguf", "data/lfm2moe/lora-f32.p1", 1.0f, on_gpu ? 5e-3 : 1e-3, false);
    check_case("synth/lfm2moe-q8_0.gguf", "data/lfm2moe/lora-q8_0.p1", 0.5f, on_gpu ? 1e-1 : 6e-2, true);
    return test_finish();
}

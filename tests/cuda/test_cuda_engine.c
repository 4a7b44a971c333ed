/*
 * test_cuda_engine.c — the CUDA backend behind the public API (engine -> session ->
 * backend.c): device CUDA, the session's paged KV pool on the GPU, the prompt as one
 * batch, then greedy generation one token at a time through cera_session_sample.
 *
 * stories260K "Once upon a time": every prompt position's logits within 5e-3 of the row's
 * max |logit| of llama.cpp's golden (as test_cuda_golden's F32 bound) with the same top
 * token, and the 200-token greedy continuation identical. synth-llama-q4_0: logits within
 * 5e-2 (activation quantization, see test_cuda_golden) and the greedy continuation
 * identical (it is on the standalone path). A second session on the same engine, while the
 * first is still alive (other blocks of the engine's pool, the same decode graph), must give the
 * same tokens. synth-llama-q4_0 again with a Q8_0 KV cache (cache rounding on top): logits
 * within 8e-2, the top token at all but one position, the first 24 greedy tokens identical.
 * synth-gemma3-q8_0 (sliding-window layers, whose blocks before the window leave the pool as
 * the greedy run goes past 48 positions) with an F16 and a Q8_0 KV cache: logits within
 * test_cuda_golden's bound (5e-2; 8e-2 with the Q8_0 cache), the top token at all but two
 * positions, the first 8 greedy tokens identical (a quantized model's greedy run may flip at a
 * near tie, as test_cuda_golden prints; measurements below).
 * The other cache types (BF16, Q4_0, and Q8_0 again), rotated as llama.cpp rotates block types
 * (synth-gemma3's heads of 128: K in pieces of 128, V of 64; SmolLM2's of 64 when present), against
 * the CPU backend with the same cache: every prompt position's logits within the bound printed
 * below of the row's max, the top token at all but two positions (five for Q4_0, whose steps of
 * an eighth of a block's largest value turn the two backends' last-bit differences in K and V
 * into whole steps here and there: measured on the H200, 2026-12-03, synth-gemma3: bf16 3.05e-2
 * and 38/39, q8_0 3.94e-2 and 38/39, q4_0 1.08e-1 and 35/39, greedy 16, 9 and 16 of 16), the
 * first 4 greedy tokens equal.
 * Exits 77 without a GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "cera.h"
#include "kv/kv_cache.h"
#include "testutil.h"

/* top_min: positions whose top token must be llama.cpp's; greedy_min: tokens of the greedy
 * continuation that must be identical (all of them for an F16 cache). */
static void run_case(const char *model, const char *name, double tol, cera_kv_type kv, size_t top_min,
                     size_t greedy_min) {
    char path[256];
    size_t n_tok = 0, n_greedy = 0, logit_bytes = 0;
    snprintf(path, sizeof path, "golden/%s.tokens", name);
    int32_t *tokens = read_ints(shared_path(path), &n_tok);
    snprintf(path, sizeof path, "golden/%s.greedy", name);
    int32_t *greedy = read_ints(shared_path(path), &n_greedy);
    snprintf(path, sizeof path, "golden/%s.logits.f32", name);
    float *golden = read_file(shared_path(path), &logit_bytes);
    CHECK(tokens && greedy && golden, "%s: golden files missing", name);
    if (!tokens || !greedy || !golden) return;

    cera_error err;
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CUDA;
    ep.n_ctx = 512;
    ep.kv_type = kv;
    cera_engine *e = NULL;
    cera_status st = cera_engine_open(shared_path(model), &ep, &e, &err);
    CHECK(st == CERA_OK, "%s: engine: %s", name, err.message);
    if (st != CERA_OK) goto done;
    CHECK(cera_engine_device(e) == CERA_DEVICE_CUDA, "%s: engine device %d", name,
          (int)cera_engine_device(e));
    const int nv = cera_engine_n_vocab(e);
    CHECK(logit_bytes == n_tok * (size_t)nv * sizeof(float), "%s: golden size", name);
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0.0f;     // greedy
    cera_session *first = NULL; // kept alive through the second pass, so its blocks are others
    for (int pass = 0; pass < 2 && logit_bytes == n_tok * (size_t)nv * sizeof(float); pass++) {
        cera_session *s = NULL;
        st = cera_session_create(e, &sp, &s, &err);
        CHECK(st == CERA_OK, "%s: session: %s", name, err.message);
        if (st != CERA_OK) break;
        st = cera_session_eval(s, tokens, n_tok, true, &err);
        CHECK(st == CERA_OK, "%s: eval: %s", name, err.message);
        double worst = 0;
        int top = 0;
        for (size_t i = 0; i < n_tok && st == CERA_OK; i++) {
            const float *l = cera_session_logits(s, (int)i), *g = golden + i * nv;
            double amax = 0, d = 0;
            int bl = 0, bg = 0;
            for (int j = 0; j < nv; j++) {
                amax = fmax(amax, fabs(g[j]));
                d = isnan(l[j]) ? INFINITY : fmax(d, fabs((double)l[j] - g[j]));
                if (l[j] > l[bl]) bl = j;
                if (g[j] > g[bg]) bg = j;
            }
            worst = fmax(worst, d / amax);
            top += bl == bg;
        }
        CHECK(worst <= tol, "%s: logits %.3g > %.0e of the row's max", name, worst, tol);
        if (top_min > n_tok) top_min = n_tok;
        CHECK(top >= (int)top_min, "%s: top token at %d/%zu positions", name, top, n_tok);
        size_t match = 0;
        for (size_t g = 0; g < n_greedy && st == CERA_OK; g++) {
            const cera_token t = cera_session_sample(s);
            if (t != greedy[g]) break;
            match++;
            if (g + 1 < n_greedy) st = cera_session_eval(s, &t, 1, false, &err);
            CHECK(st == CERA_OK, "%s: eval: %s", name, err.message);
        }
        if (greedy_min > n_greedy) greedy_min = n_greedy;
        CHECK(match >= greedy_min, "%s: greedy continuation differs at token %zu of %zu (session %d)", name,
              match, n_greedy, pass);
        printf("%-16s %s KV, session %d: logits %.2e, top %d/%zu, greedy %zu/%zu\n", name,
               kv == CERA_KV_Q8_0 ? "Q8_0" : "F16", pass, worst, top, n_tok, match, n_greedy);
        if (pass == 0)
            first = s;
        else
            cera_session_free(s);
    }
    cera_session_free(first);
done:
    cera_engine_close(e);
    free(tokens), free(greedy), free(golden);
}

/* The same model and KV cache type on the CPU and on the GPU: the prompt's logits, then greedy. */
static void cpu_vs_cuda(const char *model, const char *name, const char *tokens_path, cera_kv_type kv,
                        double tol, int top_slack) {
    size_t n_tok = 0;
    int32_t *tokens = read_ints(tokens_path, &n_tok);
    const char *mp = strncmp(model, "models/", 7) || file_exists(shared_path(model)) ? shared_path(model)
                                                                                     : models_path(model + 7);
    if (!tokens || !file_exists(mp)) {
        printf("%s: not present, skipped\n", model);
        free(tokens);
        return;
    }
    cera_engine *e[2] = {NULL, NULL};
    cera_session *s[2] = {NULL, NULL};
    cera_error err;
    bool ok = true;
    for (int d = 0; d < 2 && ok; d++) {
        cera_engine_params ep = cera_engine_default_params();
        ep.device = d ? CERA_DEVICE_CUDA : CERA_DEVICE_CPU;
        ep.n_ctx = 512;
        ep.kv_type = kv;
        cera_session_params sp = cera_session_default_params();
        sp.sampler.temp = 0.0f;
        ok = !cera_engine_open(mp, &ep, &e[d], &err) && !cera_session_create(e[d], &sp, &s[d], &err) &&
             !cera_session_eval(s[d], tokens, n_tok, true, &err);
        CHECK(ok, "%s %s (%s): %s", name, cera_kv_type_name(kv), d ? "cuda" : "cpu", err.message);
    }
    if (ok) {
        const int nv = cera_engine_n_vocab(e[0]);
        double worst = 0;
        int top = 0;
        for (size_t i = 0; i < n_tok; i++) {
            const float *c = cera_session_logits(s[0], (int)i), *g = cera_session_logits(s[1], (int)i);
            double amax = 0, dmax = 0;
            int bc = 0, bg = 0;
            for (int j = 0; j < nv; j++) {
                amax = fmax(amax, fabs(c[j]));
                dmax = isnan(g[j]) ? INFINITY : fmax(dmax, fabs((double)g[j] - c[j]));
                if (c[j] > c[bc]) bc = j;
                if (g[j] > g[bg]) bg = j;
            }
            worst = fmax(worst, dmax / amax);
            top += bc == bg;
        }
        int same = 0;
        for (bool go = true; go && same < 16;) {
            const cera_token a = cera_session_sample(s[0]), b = cera_session_sample(s[1]);
            go = a == b && a >= 0 && !cera_session_eval(s[0], &a, 1, false, &err) &&
                 !cera_session_eval(s[1], &b, 1, false, &err);
            same += a == b;
        }
        printf("%-16s %-4s KV, GPU vs CPU: logits %.2e (bound %.2g), top %d/%zu, greedy %d/16 equal\n", name,
               cera_kv_type_name(kv), worst, tol, top, n_tok, same);
        CHECK(worst <= tol, "%s %s: GPU vs CPU logits %.3g > %.2g", name, cera_kv_type_name(kv), worst, tol);
        CHECK(top + top_slack >= (int)n_tok, "%s %s: top token at %d/%zu", name, cera_kv_type_name(kv), top,
              n_tok);
        CHECK(same >= 4, "%s %s: greedy runs part at token %d", name, cera_kv_type_name(kv), same);
    }
    for (int d = 0; d < 2; d++) cera_session_free(s[d]), cera_engine_close(e[d]);
    free(tokens);
}

int main(void) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    run_case("models/stories260K.gguf", "stories260K.p1", 5e-3, CERA_KV_F16, SIZE_MAX, SIZE_MAX);
    run_case("golden/synth-llama-q4_0.gguf", "synth-llama-q4_0", 5e-2, CERA_KV_F16, SIZE_MAX, SIZE_MAX);
    // a Q8_0 cache (head size 32): the cache's rounding on top of the weights' (measured on the H200,
    // 4916a6f: 1.70e-2, top token at 39/39 positions, greedy 32/32; bounds with room for the rounding)
    run_case("golden/synth-llama-q4_0.gguf", "synth-llama-q4_0", 8e-2, CERA_KV_Q8_0, 38, 24);
    // gemma3: the engine's pool with a sliding group on the device. Measured on the H200 (2026-12-01):
    // F16 KV 3.54e-2, top 39/39, greedy 9/32 in both sessions (test_cuda_golden's standalone run,
    // whose cache rows the decode pass wrote, 32/32; here the prefill's GEMMs wrote them, and the
    // random model's greedy run ends its runs of one token at near ties); Q8_0 KV, whose sliding
    // layers drop the same blocks, 3.96e-2, top 39/39, greedy 32/32 (test_cuda_attention checks
    // the kernels with dropped blocks)
    run_case("golden/synth-gemma3-q8_0.gguf", "synth-gemma3-q8_0", 5e-2, CERA_KV_F16, 37, 8);
    run_case("golden/synth-gemma3-q8_0.gguf", "synth-gemma3-q8_0", 8e-2, CERA_KV_Q8_0, 37, 8);
    static const cera_kv_type more[] = {CERA_KV_BF16, CERA_KV_Q8_0, CERA_KV_Q4_0};
    for (int k = 0; k < 3; k++) {
        const bool q4 = more[k] == CERA_KV_Q4_0;
        const double tol = q4 ? 1.5e-1 : 8e-2;
        cpu_vs_cuda("golden/synth-gemma3-q8_0.gguf", "synth-gemma3-q8_0",
                    shared_path("golden/synth-gemma3-q8_0.tokens"), more[k], tol, q4 ? 5 : 2);
        cpu_vs_cuda("models/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-q4_1",
                    CERA_SOURCE_DIR "/tests/model/data/smollm2-q4_1.village.tokens", more[k], tol,
                    q4 ? 5 : 2);
    }
    return test_finish();
}

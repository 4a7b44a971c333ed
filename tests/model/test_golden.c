/*
 * test_golden.c — the forward pass against llama.cpp's outputs in ../shared/golden.
 *
 * For every case the golden prompt tokens are fed as they are (no BOS added) through
 * the public API as one batch with every position's logits kept; per position we
 * check the maximum absolute difference relative to the row's largest |logit|, the KL
 * divergence of the softmaxes and the top token. Then the greedy continuation is
 * generated one token at a time (as llama.cpp made it) and compared token by token.
 *
 * Tolerances, per weight type, and why. cera mirrors the roundings of llama.cpp's x86
 * build (F16 KV cache, flash attention with F16 or tiled F32 accumulation, contracted
 * FMAs, the AVX-512 polynomial exp; see src/backend/cpu/attention.h and ops.c), and the
 * kernels mirror its dot-product summation orders, so most cases agree bit for bit on an
 * AVX-512 machine (measured: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q6_k, iq4_nl,
 * iq4_xs and the qwen2/qwen3/granite cases exactly 0; q4_0 and iq4_nl run cera's repacked
 * kernels, which follow llama.cpp's repacked ones; q4_k_s, repacked the same way, 4.9e-7).
 * Where a kernel sums in another order (another tier, or llama.cpp's repacked k-quant
 * GEMMs), a last-bit difference can flip an F16 rounding in the attention or an
 * activation's quantization, so:
 *   f32         1e-3  flipped F16 roundings in attention, measured <= 2.2e-4 on every tier
 *                     (stories260K p2/p3, whose f32 down projection sums in another order);
 *   f16         3e-3  the same on F16 activations, measured <= 6.1e-4 (AVX2 tier);
 *   bf16        2e-2  the same on BF16 activations (8-bit mantissa), measured <= 4.6e-3;
 *   quantized   6e-2  one activation element quantized one step the other way moves a logit
 *                     by about one quantum; measured <= 2.3e-2 (q2_k).
 * On the AVX-512 tier (llama.cpp's build that made the goldens) the cases marked exact
 * must agree bit for bit: that locks in the mirrored roundings.
 * Top tokens: equal at every position for f32/f16/bf16, at >= 95 % of positions for the
 * quantized types (near-ties can fall either way). Greedy continuations must be equal
 * for f32, f16, bf16, q8_0 and every stories260K prompt; for the other quantized types
 * at least the first 4 tokens (one argmax flipped at a near-tie changes all that follows).
 * The goldens are x86 outputs: the x86 tiers (avx2, avx512) sum the dot products in
 * llama.cpp's x86 order; other tiers (scalar = ggml's generic order, neon, i8mm) round
 * differently, so there the quantized top-token bar is 90 % and Q8_0 greedy is held to the
 * first 4 tokens like the other quantized types.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "cera.h"
#include "compare.h"
#include "testutil.h"

typedef enum kind { K_F32, K_F16, K_BF16, K_QUANT } kind;

typedef struct golden_case {
    const char *model; /* relative to the shared folder */
    const char *name;  /* golden/<name>.{tokens,logits.f32,greedy} */
    kind kind;
    bool q8_0;  /* Q8_0: the greedy continuation must be equal, as for the float types */
    bool exact; /* bit-exact with the golden on the AVX-512 tier (the goldens' build) */
} golden_case;

static const golden_case cases[] = {
    {"models/stories260K.gguf", "stories260K.p1", K_F32, false, false},
    {"models/stories260K.gguf", "stories260K.p2", K_F32, false, false},
    {"models/stories260K.gguf", "stories260K.p3", K_F32, false, false},
    {"golden/synth-llama-f32.gguf", "synth-llama-f32", K_F32, false, true},
    {"golden/synth-llama-f16.gguf", "synth-llama-f16", K_F16, false, true},
    {"golden/synth-llama-bf16.gguf", "synth-llama-bf16", K_BF16, false, true},
    {"golden/synth-llama-q8_0.gguf", "synth-llama-q8_0", K_QUANT, true, true},
    {"golden/synth-llama-q4_0.gguf", "synth-llama-q4_0", K_QUANT, false, true},
    {"golden/synth-llama-q4_1.gguf", "synth-llama-q4_1", K_QUANT, false, true},
    {"golden/synth-llama-q5_0.gguf", "synth-llama-q5_0", K_QUANT, false, true},
    {"golden/synth-llama-q5_1.gguf", "synth-llama-q5_1", K_QUANT, false, true},
    {"golden/synth-llama-q2_k.gguf", "synth-llama-q2_k", K_QUANT, false, false},
    {"golden/synth-llama-q3_k_s.gguf", "synth-llama-q3_k_s", K_QUANT, false, false},
    {"golden/synth-llama-q4_k_s.gguf", "synth-llama-q4_k_s", K_QUANT, false, false},
    {"golden/synth-llama-q5_k_s.gguf", "synth-llama-q5_k_s", K_QUANT, false, false},
    {"golden/synth-llama-q6_k.gguf", "synth-llama-q6_k", K_QUANT, false, true},
    {"golden/synth-llama-iq4_nl.gguf", "synth-llama-iq4_nl", K_QUANT, false, true},
    {"golden/synth-llama-iq4_xs.gguf", "synth-llama-iq4_xs", K_QUANT, false, true},
    {"golden/synth-llama-q4_k_m.gguf", "synth-llama-q4_k_m", K_QUANT, false, false},
    {"golden/synth-qwen2-f32.gguf", "synth-qwen2-f32", K_F32, false, true},
    {"golden/synth-qwen2-q8_0.gguf", "synth-qwen2-q8_0", K_QUANT, true, true},
    {"golden/synth-qwen3-f32.gguf", "synth-qwen3-f32", K_F32, false, true},
    {"golden/synth-qwen3-q8_0.gguf", "synth-qwen3-q8_0", K_QUANT, true, true},
    {"golden/synth-granite-f32.gguf", "synth-granite-f32", K_F32, false, true},
    {"golden/synth-granite-q8_0.gguf", "synth-granite-q8_0", K_QUANT, true, true},
    {"golden/synth-lfm2-f32.gguf", "synth-lfm2-f32", K_F32, false, true},
    {"golden/synth-lfm2-q8_0.gguf", "synth-lfm2-q8_0", K_QUANT, true, true},
    {"golden/synth-gemma3-f32.gguf", "synth-gemma3-f32", K_F32, false, true},
    {"golden/synth-gemma3-q8_0.gguf", "synth-gemma3-q8_0", K_QUANT, true, true},
    {"golden/synth-phi3-f32.gguf", "synth-phi3-f32", K_F32, false, true},
    {"golden/synth-phi3-q8_0.gguf", "synth-phi3-q8_0", K_QUANT, true, true},
    /* models made by `cera synth` at test time, goldens in tests/model/data/lfm2moe (its README) */
    {"synth/lfm2moe-f32.gguf", "data/lfm2moe/f32.p1", K_F32, false, false},
    {"synth/lfm2moe-f32.gguf", "data/lfm2moe/f32.p2", K_F32, false, false},
    {"synth/lfm2moe-q8_0.gguf", "data/lfm2moe/q8_0.p1", K_QUANT, true, false},
    {"synth/lfm2moe-q8_0.gguf", "data/lfm2moe/q8_0.p3", K_QUANT, true, false},
    {"synth/lfm2moe-q4_0.gguf", "data/lfm2moe/q4_0.p1", K_QUANT, false, false},
};

static double tol_rel(kind k) {
    switch (k) {
    case K_F32: return 1e-3;
    case K_F16: return 3e-3;
    case K_BF16: return 2e-2;
    case K_QUANT: return 6e-2;
    }
    return 0;
}

static double tol_kl(kind k) { return k == K_QUANT ? 1e-3 : 1e-5; }

static void run_case(const golden_case *c) {
    size_t n_tok = 0, n_greedy = 0, n_logit_bytes = 0;
    int32_t *tok = read_ints(golden_path(c->name, "tokens"), &n_tok);
    int32_t *greedy = read_ints(golden_path(c->name, "greedy"), &n_greedy);
    float *ref = read_file(golden_path(c->name, "logits.f32"), &n_logit_bytes);
    CHECK(tok && greedy && ref && n_tok > 0, "%s: golden files missing", c->name);
    if (!tok || !greedy || !ref || !n_tok) goto done;

    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CPU; /* these compare with llama.cpp CPU outputs */
    ep.n_threads = 1;
    ep.n_ctx = 512;
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_error err;
    CHECK(cera_engine_open(shared_path(c->model), &ep, &e, &err) == CERA_OK, "%s: open: %s", c->name,
          err.message);
    if (!e) goto done;
    const int nv = cera_engine_n_vocab(e);
    CHECK(n_logit_bytes == n_tok * (size_t)nv * sizeof(float), "%s: golden logits size", c->name);
    CHECK(cera_session_create(e, NULL, &s, &err) == CERA_OK, "%s: session: %s", c->name, err.message);
    if (!s || n_logit_bytes != n_tok * (size_t)nv * sizeof(float)) goto close;
    CHECK(cera_session_eval(s, tok, n_tok, true, &err) == CERA_OK, "%s: eval: %s", c->name, err.message);

    double worst = 0, worst_kl = 0, sum_kl = 0;
    int top_ok = 0;
    for (size_t t = 0; t < n_tok; t++) {
        const float *l = cera_session_logits(s, (int)t), *r = ref + t * (size_t)nv;
        if (!l) break;
        const double d = rel_max_diff(l, r, nv), kl = kl_div(l, r, nv);
        if (d > worst) worst = d;
        if (kl > worst_kl) worst_kl = kl;
        sum_kl += kl;
        top_ok += argmax_f32(l, nv) == argmax_f32(r, nv);
    }
    const double top_frac = (double)top_ok / (double)n_tok;
    CHECK(worst <= tol_rel(c->kind), "%s: max relative logit difference %.3g > %.3g", c->name, worst,
          tol_rel(c->kind));
    CHECK(sum_kl / (double)n_tok <= tol_kl(c->kind), "%s: mean KL %.3g > %.3g", c->name,
          sum_kl / (double)n_tok, tol_kl(c->kind));
    /* the tiers that mirror the goldens' build must reproduce it exactly where it was measured so */
    const char *tier = cera_cpu_tier_name();
    const bool x86_mirror = !strcmp(tier, "avx512") || !strcmp(tier, "avx2");
    if (c->exact && !strcmp(tier, "avx512"))
        CHECK(worst == 0, "%s: not bit-exact on the AVX-512 tier (max relative difference %.3g)", c->name,
              worst);
    if (c->kind == K_QUANT)
        CHECK(top_frac >= (x86_mirror ? 0.95 : 0.9), "%s: top token equal at %d/%zu positions", c->name,
              top_ok, n_tok);
    else
        CHECK(top_ok == (int)n_tok, "%s: top token equal at %d/%zu positions", c->name, top_ok, n_tok);

    /* greedy, one token at a time after the prompt */
    size_t same = 0;
    const float *l = cera_session_logits(s, -1);
    for (size_t i = 0; i < n_greedy && l; i++) {
        const cera_token t = argmax_f32(l, nv);
        if (t != greedy[i]) break;
        same++;
        if (i + 1 == n_greedy) break;
        if (cera_session_eval(s, &t, 1, false, &err) != CERA_OK) break;
        l = cera_session_logits(s, -1);
    }
    if (c->kind == K_QUANT && (!c->q8_0 || !x86_mirror))
        CHECK(same >= (n_greedy < 4 ? n_greedy : 4), "%s: greedy continuation equal for only %zu/%zu tokens",
              c->name, same, n_greedy);
    else
        CHECK(same == n_greedy, "%s: greedy continuation equal for %zu/%zu tokens", c->name, same, n_greedy);
    printf("%-22s max rel %.2e  mean KL %.2e  max KL %.2e  top %d/%zu  greedy %zu/%zu\n", c->name, worst,
           sum_kl / (double)n_tok, worst_kl, top_ok, n_tok, same, n_greedy);
close:
    cera_session_free(s);
    cera_engine_close(e);
done:
    free(tok);
    free(greedy);
    free(ref);
}

int main(int argc, char **argv) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (argc < 2 || strstr(cases[i].name, argv[1])) run_case(&cases[i]);
    return test_finish();
}

/*
 * test_lora_golden.c — LoRA adapters end to end through the public API, against
 * llama.cpp's outputs with the same adapters (../shared/golden, README.md there):
 *   - stories260K with lora-stories-a at 1 and 0.5, a at 1 plus b at 0.7; the synthetic
 *     llama (F32, Q4_0, Q4_K_M bases) with lora-synth-llama: every prompt position's
 *     logits near llama.cpp's (top token, max |diff|, KL) and, for the stories cases,
 *     the greedy continuation;
 *   - each adapter's PEFT folder gives the same logits as its GGUF twin, bit for bit;
 *   - scale 0 gives the logits of no adapter, bit for bit;
 *   - prefill (the prompt as one batch) and decode (one token at a time) give the same
 *     logits bit for bit with an adapter attached;
 *   - attach, rescale, detach and swap on a live session change what follows only;
 * all of it three times: the CPU hook fused into the projections' matmul jobs (two forms),
 * and after them.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/lora.h"
#include "engine_util.h"
#include "testutil.h"

/* KL(p_ref || p) of the softmaxes. */
static double kl(const float *ref, const float *got, int n) {
    double mr = ref[0], mg = got[0];
    for (int i = 1; i < n; i++) mr = fmax(mr, ref[i]), mg = fmax(mg, got[i]);
    double zr = 0, zg = 0;
    for (int i = 0; i < n; i++) zr += exp(ref[i] - mr), zg += exp(got[i] - mg);
    double k = 0;
    for (int i = 0; i < n; i++) {
        const double pr = exp(ref[i] - mr) / zr;
        const double lr = ref[i] - mr - log(zr), lg = got[i] - mg - log(zg);
        k += pr * (lr - lg);
    }
    return k;
}

typedef struct diff {
    double max_diff, max_kl;
} diff;

/* Compares every position with llama.cpp's logits. A top-token mismatch counts only where
 * llama.cpp's own top two are closer than the largest difference (a near tie). */
static diff compare(const char *name, const float *got, const test_golden *g, int nv, double max_diff,
                    double max_kl) {
    diff d = {0, 0};
    int top_miss = 0;
    for (size_t i = 0; i < g->n_tokens && got; i++) {
        const float *r = g->logits + i * nv, *o = got + i * nv;
        // written so that a NaN (which fmax would drop) makes the difference infinite
        for (int j = 0; j < nv; j++) {
            const double dj = fabs(r[j] - o[j]);
            if (!(dj <= d.max_diff)) d.max_diff = isnan(dj) ? INFINITY : dj;
        }
        const double k = kl(r, o, nv);
        if (!(k <= d.max_kl)) d.max_kl = isnan(k) ? INFINITY : k;
    }
    for (size_t i = 0; i < g->n_tokens && got; i++) {
        const float *r = g->logits + i * nv, *o = got + i * nv;
        const int tr = test_argmax(r, nv), to = test_argmax(o, nv);
        if (tr != to && fabs(r[tr] - r[to]) > d.max_diff) top_miss++;
    }
    printf(
        "%-28s %3zu positions: max |diff| %.3g (<= %.3g), max KL %.3g (<= %.3g), top-token mismatches %d\n",
        name, g->n_tokens, d.max_diff, max_diff, d.max_kl, max_kl, top_miss);
    CHECK(got && d.max_diff <= max_diff && d.max_kl <= max_kl && top_miss == 0,
          "%s: max |diff| %g (<= %g), KL %g (<= %g), %d top-token mismatches", name, d.max_diff, max_diff,
          d.max_kl, max_kl, top_miss);
    return d;
}

/* Greedy continuation after the prompt, compared with llama.cpp's. */
static void check_greedy(cera_engine *e, const test_attach *at, int n_at, const test_golden *g,
                         const char *name) {
    cera_session *s = NULL;
    cera_error err = {0};
    if (!g->greedy || cera_session_create(e, NULL, &s, &err)) return;
    for (int i = 0; i < n_at; i++) cera_session_set_adapter(s, at[i].a, at[i].scale, &err);
    const int nv = cera_engine_n_vocab(e);
    bool ok = cera_session_eval(s, g->tokens, g->n_tokens, false, &err) == CERA_OK;
    size_t same = 0;
    for (size_t i = 0; i < g->n_greedy && ok; i++) {
        const cera_token t = test_argmax(cera_session_logits(s, -1), nv);
        if (t != g->greedy[i]) break;
        same++;
        ok = cera_session_eval(s, &t, 1, false, &err) == CERA_OK;
    }
    printf("%-28s greedy: %zu of %zu tokens as llama.cpp\n", name, same, g->n_greedy);
    CHECK(same == g->n_greedy, "%s: greedy continuation departs from llama.cpp at token %zu of %zu", name,
          same, g->n_greedy);
    cera_session_free(s);
}

static void stories_cases(void) {
    cera_engine *e = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CPU);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_adapter *a = test_load_adapter(e, "golden/lora-stories-a.gguf"),
                 *b = test_load_adapter(e, "golden/lora-stories-b.gguf");
    cera_adapter *pa = test_load_adapter(e, "golden/lora-stories-a.peft"),
                 *pb = test_load_adapter(e, "golden/lora-stories-b.peft");
    test_golden g0, ga, gh, gab;
    if (!a || !b || !pa || !pb || !test_golden_load("stories260K.p1", nv, &g0) ||
        !test_golden_load("stories260K.lora-a", nv, &ga) ||
        !test_golden_load("stories260K.lora-a-half", nv, &gh) ||
        !test_golden_load("stories260K.lora-a-b", nv, &gab))
        goto out;
    const size_t n = ga.n_tokens, nf = n * (size_t)nv;

    /* The engine without adapters against llama.cpp first. The adapter cases may differ by
     * about as much, plus F16 rounding flips in the KV cache: where the base differs from
     * llama.cpp in the last bits, one K or V value now and then rounds to the neighbouring
     * F16, which moves this tiny model's logits by ~1e-3 (KL stays ~1e-8). */
    float *base = test_session_logits(e, NULL, 0, ga.tokens, n, false);
    compare("stories260K (no adapter)", base, &g0, nv, 1e-4, 1e-8);
    const test_attach at_a[1] = {{a, 1.0f}}, at_h[1] = {{a, 0.5f}}, at_ab[2] = {{a, 1.0f}, {b, 0.7f}};
    float *la = test_session_logits(e, at_a, 1, ga.tokens, n, false),
          *lh = test_session_logits(e, at_h, 1, ga.tokens, n, false),
          *lab = test_session_logits(e, at_ab, 2, ga.tokens, n, false);
    compare("stories260K.lora-a", la, &ga, nv, 5e-3, 1e-6);
    compare("stories260K.lora-a-half", lh, &gh, nv, 5e-3, 1e-6);
    compare("stories260K.lora-a-b", lab, &gab, nv, 5e-3, 1e-6);
    CHECK(la && base && !test_same_bits(la, base, nf), "the adapter changes nothing");
    check_greedy(e, at_a, 1, &ga, "stories260K.lora-a");
    check_greedy(e, at_h, 1, &gh, "stories260K.lora-a-half");
    check_greedy(e, at_ab, 2, &gab, "stories260K.lora-a-b");

    /* PEFT twins: the same numbers after permutation, so the same bits. */
    const test_attach pt_ab[2] = {{pa, 1.0f}, {pb, 0.7f}};
    float *pab = test_session_logits(e, pt_ab, 2, ga.tokens, n, false);
    CHECK(test_same_bits(pab, lab, nf), "PEFT a+b logits differ from the GGUF twins'");

    /* Scale 0 is no adapter, bit for bit. */
    const test_attach zero[2] = {{a, 0.0f}, {b, 0.0f}};
    float *lz = test_session_logits(e, zero, 2, ga.tokens, n, false);
    CHECK(test_same_bits(lz, base, nf), "scale 0 differs from no adapter");

    /* Prefill vs decode, bit for bit (the engine's base path must be too). */
    float *base_dec = test_session_logits(e, NULL, 0, ga.tokens, n, true),
          *lab_dec = test_session_logits(e, at_ab, 2, ga.tokens, n, true);
    CHECK(test_same_bits(base_dec, base, nf), "no adapter: decode logits differ from prefill logits");
    CHECK(test_same_bits(lab_dec, lab, nf), "a+b: decode logits differ from prefill logits");

    /* Live changes: one session, attach / rescale / swap / detach between evals. */
    cera_session *s = NULL;
    cera_error err = {0};
    if (!cera_session_create(e, NULL, &s, &err)) {
        bool ok = true;
        ok &= !cera_session_eval(s, ga.tokens, n, true, &err);
        CHECK(ok && test_same_bits(cera_session_logits(s, 0), base, nv), "fresh session");
        ok &= !cera_session_truncate(s, 0, &err) && !cera_session_set_adapter(s, a, 0.5f, &err);
        ok &= !cera_session_eval(s, ga.tokens, n, true, &err);
        CHECK(ok && test_same_bits(cera_session_logits(s, 0), lh, nf), "attach a at 0.5: %s", err.message);
        ok &= !cera_session_truncate(s, 0, &err) && !cera_session_set_adapter(s, a, 1.0f, &err) &&
              !cera_session_set_adapter(s, b, 0.7f, &err);
        ok &= !cera_session_eval(s, ga.tokens, n, true, &err);
        CHECK(ok && test_same_bits(cera_session_logits(s, 0), lab, nf) && cera_session_n_adapters(s) == 2,
              "rescale a, attach b: %s", err.message);
        ok &= !cera_session_truncate(s, 0, &err) && cera_session_remove_adapter(s, b);
        ok &= !cera_session_eval(s, ga.tokens, n, true, &err);
        CHECK(ok && test_same_bits(cera_session_logits(s, 0), la, nf) && cera_session_n_adapters(s) == 1,
              "detach b");
        /* Mid-sequence: the prompt with a, then a token without: equals a session whose last
         * token ran without the adapter (the KV keeps what a produced). */
        ok &= !cera_session_truncate(s, (int)n - 1, &err) && cera_session_remove_adapter(s, NULL);
        ok &= !cera_session_eval(s, &ga.tokens[n - 1], 1, false, &err);
        float *mixed = malloc((size_t)nv * 4);
        if (ok) memcpy(mixed, cera_session_logits(s, -1), (size_t)nv * 4);
        CHECK(ok && cera_session_n_adapters(s) == 0 && !test_same_bits(mixed, la + (n - 1) * nv, nv) &&
                  !test_same_bits(mixed, base + (n - 1) * nv, nv),
              "detaching mid-sequence changes only later tokens");
        free(mixed);
        CHECK(!cera_session_remove_adapter(s, a), "removing an adapter that is not attached");
        cera_session_free(s);
    }
    /* An adapter of another engine is refused. */
    cera_engine *e2 = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CPU);
    if (e2 && !cera_session_create(e2, NULL, &s, &err)) {
        CHECK(cera_session_set_adapter(s, a, 1.0f, &err) == CERA_ERR_INVALID_ARG,
              "adapter of another engine");
        CHECK(cera_session_set_adapter(s, NULL, 1.0f, &err) == CERA_ERR_INVALID_ARG, "NULL adapter");
        cera_session_free(s);
    }
    cera_engine_close(e2);

    free(base);
    free(la);
    free(lh);
    free(lab);
    free(pab);
    free(lz);
    free(base_dec);
    free(lab_dec);
    test_golden_free(&g0);
    test_golden_free(&ga);
    test_golden_free(&gh);
    test_golden_free(&gab);
out:
    cera_adapter_free(a);
    cera_adapter_free(b);
    cera_adapter_free(pa);
    cera_adapter_free(pb);
    cera_engine_close(e);
}

/* The synthetic llama with lora-synth-llama: compared with llama.cpp within the bounds of
 * the same engine's comparison without the adapter (at least twice its difference: the
 * adapter's larger activations scale a difference up), and bit for bit where the base
 * is bit for bit: the CPU applies adapters with the F32 matmul kernels, as llama.cpp does.
 * The PEFT twin must give the same bits as the GGUF adapter. */
static void synth_case(const char *type, float scale) {
    char model[128], name[128], plain[128];
    snprintf(model, sizeof model, "golden/synth-llama-%s.gguf", type);
    snprintf(name, sizeof name, "synth-llama-%s.lora", type);
    snprintf(plain, sizeof plain, "synth-llama-%s", type);
    cera_engine *e = test_open_engine(model, CERA_DEVICE_CPU);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_adapter *a = test_load_adapter(e, "golden/lora-synth-llama.gguf"),
                 *p = test_load_adapter(e, "golden/lora-synth-llama.peft");
    test_golden g, g0;
    if (a && p && test_golden_load(name, nv, &g) && test_golden_load(plain, nv, &g0)) {
        float *l0 = test_session_logits(e, NULL, 0, g0.tokens, g0.n_tokens, false);
        const diff d0 = compare(plain, l0, &g0, nv, 0.1, 1e-3);
        const test_attach at[1] = {{a, scale}}, pt[1] = {{p, scale}};
        float *l = test_session_logits(e, at, 1, g.tokens, g.n_tokens, false),
              *lp = test_session_logits(e, pt, 1, g.tokens, g.n_tokens, false);
        /* Where the base is not bit-exact (kernel tiers other than the goldens' AVX-512 order),
         * a last-bit difference can flip one Q8 activation rounding, a step of amax/127: then
         * the adapter run gets the base comparison's own bounds. So does a base that is exact
         * on a tier whose F32 tile (the adapter's products) rounds otherwise than the AVX-512
         * one of the goldens' llama.cpp build (AVX2: 8 lanes). */
        const cera_cpu_type_ops *f32 = cera_cpu_ops(CERA_TYPE_F32),
                                *f32_512 = cera_cpu_ops_tier("avx512", CERA_TYPE_F32);
        const bool exact = d0.max_diff == 0 && f32_512 && f32->gemm_tile == f32_512->gemm_tile;
        const double bound = exact ? 1e-4 : fmax(2 * d0.max_diff, 0.1),
                     kl_bound = exact ? 1e-8 : fmax(4 * d0.max_kl, 1e-3);
        const diff d = compare(name, l, &g, nv, bound, kl_bound);
        if (exact)
            CHECK(d.max_diff == 0,
                  "%s: the base is bit-exact with llama.cpp but the adapter run differs by %g", name,
                  d.max_diff);
        CHECK(test_same_bits(l, lp, g.n_tokens * (size_t)nv), "%s: PEFT logits differ from GGUF's", name);
        /* prefill (the adapter spread over the thread pool) vs decode (one row) */
        float *ld = test_session_logits(e, at, 1, g.tokens, g.n_tokens, true);
        CHECK(test_same_bits(l, ld, g.n_tokens * (size_t)nv), "%s: decode logits differ from prefill logits",
              name);
        free(ld);
        free(l0);
        free(l);
        free(lp);
        test_golden_free(&g);
        test_golden_free(&g0);
    }
    cera_adapter_free(a);
    cera_adapter_free(p);
    cera_engine_close(e);
}

int main(void) {
    /* the engines run 2 threads: the adapter fused into the matmul jobs (B·t in post chunks,
     * then on each tile), then after them (the unfused form) */
    static const char *const form[3] = {"after the projections' matmul jobs", "fused, B·t on each tile",
                                        "fused, B·t in post chunks"};
    for (int mode = 2; mode >= 0; mode--) {
        cera_lora_cpu_set_fusion(mode);
        printf("-- adapters %s\n", form[mode]);
        stories_cases();
        synth_case("f32", 1.0f);
        synth_case("q4_0", 1.0f);
        synth_case("q4_k_m", 0.75f);
    }
    return test_finish();
}

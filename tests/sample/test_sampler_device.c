/*
 * test_sampler_device.c — what sampler.h offers a chain run elsewhere (a device backend):
 * cera_sampler_draw makes the draw cera_sampler_sample makes and advances the RNG as one
 * sample does; cera_sampler_penalty_window is the window (distinct tokens, counts) over
 * the last penalty_last_n accepted tokens, counted here by brute force; and the CUDA
 * chain's algorithm (bias, penalties, draw, argmax or radix select + sort + tail, as
 * sample.cu runs it; emulated in sample_cases.h) gives cera_sampler_sample's token on
 * every chain and logit kind of sample_cases.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/mt19937.h"
#include "sample/sampler.h"
#include "sample_cases.h"
#include "testutil.h"

static void test_draw(void) {
    cera_sampler_params p = cera_sampler_default_params();
    p.seed = 42;
    cera_sampler *s = NULL;
    CHECK(cera_sampler_new(&p, 100, &s, NULL) == CERA_OK, "sampler_new");
    if (!s) return;
    /* uniform_real_distribution<double>(0, 1) over std::mt19937(42) (test_sampler.c) */
    const double want[2] = {0.79654298428784598, 0.18343478789336848};
    for (int i = 0; i < 2; i++) {
        const double u = cera_sampler_draw(s);
        CHECK(u == want[i], "draw %d of seed 42 is %.17g, want %.17g", i, u, want[i]);
    }
    /* a sample (greedy or not) takes exactly one draw: a sampler that samples and a clone
     * that draws stay in step */
    float logits[100];
    test_rng r = {7};
    for (int greedy = 0; greedy < 2; greedy++) {
        p.temp = greedy ? 0.0f : 0.8f;
        cera_sampler *a = NULL, *b = NULL;
        CHECK(cera_sampler_new(&p, 100, &a, NULL) == CERA_OK, "sampler_new");
        CHECK(a && cera_sampler_clone(a, &b, NULL) == CERA_OK, "clone");
        if (!a || !b) return;
        bool ok = true;
        for (int t = 0; t < 20; t++) {
            for (int i = 0; i < 100; i++) logits[i] = test_rng_normal(&r);
            cera_sampler_sample(a, logits);
            cera_sampler_draw(b);
            ok = ok && cera_sampler_draw(a) == cera_sampler_draw(b);
        }
        CHECK(ok, "one sample is one draw (greedy %d)", greedy);
        cera_sampler_free(a);
        cera_sampler_free(b);
    }
    cera_sampler_free(s);
}

static void test_window(void) {
    enum { NV = 12, N_ACC = 200 };
    const int last_ns[3] = {5, -1, 1};
    for (int w = 0; w < 3; w++) {
        cera_sampler_params p = cera_sampler_default_params();
        p.penalty_last_n = last_ns[w];
        p.freq_penalty = 0.5f;
        cera_sampler *s = NULL;
        CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new");
        if (!s) return;
        cera_token hist[N_ACC];
        test_rng r = {100u + (uint64_t)w};
        bool ok = true;
        for (int t = 0; t < N_ACC; t++) {
            hist[t] = (cera_token)(test_rng_next(&r) % (NV - 4)); /* tokens NV-4.. never occur */
            cera_sampler_accept(s, hist[t]);
            int want[NV] = {0};
            const int from = p.penalty_last_n < 0 ? 0 : t + 1 - p.penalty_last_n;
            for (int i = from < 0 ? 0 : from; i <= t; i++) want[hist[i]]++;
            const int32_t *tok, *cnt;
            const size_t n = cera_sampler_penalty_window(s, &tok, &cnt);
            int got[NV] = {0};
            size_t n_want = 0;
            for (int i = 0; i < NV; i++) n_want += want[i] > 0;
            ok = ok && n == n_want;
            for (size_t j = 0; j < n && ok; j++) {
                ok = tok[j] >= 0 && tok[j] < NV && cnt[j] > 0 && got[tok[j]] == 0;
                if (ok) got[tok[j]] = cnt[j];
            }
            for (int i = 0; i < NV && ok; i++) ok = got[i] == want[i];
        }
        CHECK(ok, "penalty window (last_n %d) equals the counts of the last accepted tokens",
              p.penalty_last_n);
        cera_sampler_free(s);
    }
    /* neutral penalties: no window at all */
    cera_sampler_params p = cera_sampler_default_params();
    cera_sampler *s = NULL;
    CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new");
    if (!s) return;
    cera_sampler_accept(s, 3);
    const int32_t *tok, *cnt;
    CHECK(cera_sampler_penalty_window(s, &tok, &cnt) == 0, "no window with neutral penalties");
    cera_sampler_free(s);

    p.temp = 0.0f;
    CHECK(cera_sampler_params_greedy(&p), "temp 0 is greedy");
    p.typical_p = 0.5f;
    CHECK(!cera_sampler_params_greedy(&p), "typical-p < 1 is not greedy");
    p.temp = 0.8f, p.typical_p = 1.0f;
    CHECK(!cera_sampler_params_greedy(&p), "temp 0.8 is not greedy");
}

/* The device chain's algorithm against cera_sampler_sample: two samplers with the same
 * parameters and history, one logit vector of each kind per step, every token accepted
 * by both. */
static void test_device_algorithm(int n_vocab, int steps) {
    float *logits = malloc(sizeof(float) * (size_t)n_vocab),
          *scratch = malloc(sizeof(float) * (size_t)n_vocab);
    static cera_logit_bias bias[1024];
    CHECK(logits && scratch, "alloc");
    if (!logits || !scratch) return;
    for (int c = 0; c < CASE_CHAINS; c++) {
        test_rng r = {0xc0ffee + (uint64_t)c};
        cera_sampler *a, *b;
        if (!case_sampler_pair(c, n_vocab, bias, &r, &a, &b)) continue;
        int same = 0, first_bad = -1;
        cera_token bad_cpu = 0, bad_dev = 0;
        for (int t = 0; t < steps; t++) {
            case_logits(logits, n_vocab, t % CASE_LOGIT_KINDS, &r);
            const cera_token want = cera_sampler_sample(a, logits);
            const cera_token got = emu_device_sample(b, logits, n_vocab, scratch);
            if (got == want)
                same++;
            else if (first_bad < 0)
                first_bad = t, bad_cpu = want, bad_dev = got;
            cera_sampler_accept(a, want);
            cera_sampler_accept(b, want);
        }
        CHECK(same == steps,
              "vocab %d chain %d: %d/%d tokens equal (first differs at step %d, kind %d: %d vs %d)", n_vocab,
              c, same, steps, first_bad, first_bad % CASE_LOGIT_KINDS, bad_cpu, bad_dev);
        cera_sampler_free(a);
        cera_sampler_free(b);
    }
    free(logits);
    free(scratch);
}

int main(void) {
    test_draw();
    test_window();
    test_device_algorithm(512, 200);
    test_device_algorithm(32000, 60);
    return test_finish();
}

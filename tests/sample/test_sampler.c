/*
 * test_sampler.c — the sampler chain (src/sample): every stage on small
 * distributions computed by hand, selection against a full sort on fresh random
 * inputs, the RNG against std::mt19937's outputs, the chain's greedy path, penalties,
 * logit bias, determinism per seed, a chi-square check that the draws follow the
 * post-chain distribution, draws identical to llama.cpp's chain on the same logits
 * and seed, and the parameter checks.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample/mt19937.h"
#include "sample/sampler.h"
#include "testutil.h"

#define MAXN 8192

static cera_candidate buf[MAXN];
static cera_candidate scratch_buf[MAXN], scratch_buf2[MAXN];
static cera_sample_scratch ws = {MAXN, scratch_buf, scratch_buf2};

/* A candidate array in id order from probabilities (logit = log p). */
static cera_candidates from_probs(const float *p, size_t n) {
    cera_candidates c = {buf, n, false};
    for (size_t i = 0; i < n; i++) buf[i] = (cera_candidate){(cera_token)i, logf(p[i]), 0.0f};
    return c;
}

static bool ids_are(const cera_candidates *c, const cera_token *ids, size_t n) {
    if (c->size != n) return false;
    for (size_t i = 0; i < n; i++)
        if (c->data[i].id != ids[i]) return false;
    return true;
}

static bool close_to(double a, double b, double tol) { return fabs(a - b) <= tol; }

static void test_mt19937(void) {
    cera_mt19937 r;
    cera_mt_seed(&r, 5489);
    uint32_t v = 0;
    for (int i = 0; i < 10000; i++) v = cera_mt_next(&r);
    CHECK(v == 4123659995u, "10000th output of seed 5489 is %u (C++ requires 4123659995)", v);
    cera_mt_seed(&r, 0);
    uint32_t a = cera_mt_next(&r), b = cera_mt_next(&r);
    CHECK(a == 2357136044u && b == 2546248239u, "seed 0 gives %u %u", a, b);
    /* uniform_real_distribution<double>(0, 1) over std::mt19937(42), libstdc++ 12. */
    const double want[4] = {0.79654298428784598, 0.18343478789336848, 0.77969099761266125,
                            0.59685016158005655};
    cera_mt_seed(&r, 42);
    for (int i = 0; i < 4; i++) {
        const double u = cera_mt_uniform(&r);
        CHECK(u == want[i], "uniform draw %d of seed 42 is %.17g, want %.17g", i, u, want[i]);
    }
}

static void test_softmax(void) {
    const float p[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    cera_candidates c = from_probs(p, 4);
    cera_cands_softmax(&c, false, &ws);
    for (int i = 0; i < 4; i++)
        CHECK(close_to(c.data[i].p, p[i], 1e-6), "softmax p[%d] = %g", i, c.data[i].p);
    cera_cands_softmax(&c, true, &ws);
    const cera_token sorted[4] = {3, 2, 1, 0};
    CHECK(c.sorted && ids_are(&c, sorted, 4), "softmax with sort orders by logit");
}

static void test_top_k(void) {
    const float p[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    cera_candidates c = from_probs(p, 4);
    cera_stage_top_k(&c, 1, &ws);
    const cera_token k1[1] = {3};
    CHECK(ids_are(&c, k1, 1), "top-1 keeps token 3");
    c = from_probs(p, 4);
    cera_stage_top_k(&c, 3, &ws);
    const cera_token k3[3] = {3, 2, 1};
    CHECK(ids_are(&c, k3, 3) && c.sorted, "top-3 keeps 3, 2, 1 sorted");
    c = from_probs(p, 4);
    cera_stage_top_k(&c, 0, &ws);
    CHECK(c.size == 4 && !c.sorted, "top-k 0 is disabled");
    c = from_probs(p, 4);
    cera_stage_top_k(&c, 10, &ws);
    CHECK(c.size == 4 && c.sorted && c.data[0].id == 3, "top-k above the size keeps all, sorted");

    /* Ties: the lower id first. */
    const float tie[4] = {0.3f, 0.2f, 0.3f, 0.2f};
    c = from_probs(tie, 4);
    cera_stage_top_k(&c, 3, &ws);
    const cera_token kt[3] = {0, 2, 1};
    CHECK(ids_are(&c, kt, 3), "ties break by lower id");

    /* The heap selection against a full sort, on fresh random logits (with repeats). */
    test_rng rng = {0x5eed};
    static cera_candidate ref[MAXN];
    const size_t ks[5] = {1, 40, 300, 700, 5000};
    for (int trial = 0; trial < 5; trial++) {
        const size_t n = 6000;
        for (size_t i = 0; i < n; i++) {
            float l = test_rng_normal(&rng) * 3.0f;
            if (i % 7 == 0) l = roundf(l); /* repeated values exercise the tie order */
            buf[i] = (cera_candidate){(cera_token)i, l, 0.0f};
        }
        memcpy(ref, buf, n * sizeof(cera_candidate));
        cera_candidates r = {ref, n, false};
        cera_cands_partial_sort(&r, n, &ws); /* full sort */
        c = (cera_candidates){buf, n, false};
        cera_stage_top_k(&c, (int)ks[trial], &ws);
        bool same = c.size == ks[trial];
        for (size_t i = 0; same && i < c.size; i++) same = c.data[i].id == ref[i].id;
        CHECK(same, "top-%zu of %zu random logits equals the full sort's prefix", ks[trial], n);
        bool desc = true;
        for (size_t i = 1; i < n; i++)
            desc = desc && (ref[i - 1].logit > ref[i].logit ||
                            (ref[i - 1].logit == ref[i].logit && ref[i - 1].id < ref[i].id));
        CHECK(desc, "full sort is descending, ties by id");
    }
}

static void test_top_p(void) {
    const float p[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    cera_candidates c = from_probs(p, 4);
    cera_stage_top_p(&c, 0.3f, 0, &ws);
    const cera_token a[1] = {3};
    CHECK(ids_are(&c, a, 1), "top-p 0.3 keeps the 0.4 token");
    c = from_probs(p, 4);
    cera_stage_top_p(&c, 0.65f, 0, &ws);
    const cera_token b[2] = {3, 2};
    CHECK(ids_are(&c, b, 2), "top-p 0.65 keeps 0.4 and 0.3");
    c = from_probs(p, 4);
    cera_stage_top_p(&c, 0.8f, 0, &ws);
    const cera_token d[3] = {3, 2, 1};
    CHECK(ids_are(&c, d, 3), "top-p 0.8 keeps three");
    c = from_probs(p, 4);
    cera_stage_top_p(&c, 0.0f, 0, &ws);
    CHECK(c.size == 1 && c.data[0].id == 3, "top-p 0 keeps the best one");
    c = from_probs(p, 4);
    cera_stage_top_p(&c, 0.3f, 3, &ws);
    CHECK(c.size == 3, "top-p keeps min_keep");
    c = from_probs(p, 4);
    cera_stage_top_p(&c, 1.0f, 0, &ws);
    CHECK(c.size == 4 && !c.sorted, "top-p 1 is disabled");

    /* Large unsorted arrays take the 256-first path, also when the mass needs more
     * than 256 tokens: compare with a sorted walk. */
    test_rng rng = {77};
    const float ps[2] = {0.5f, 0.999f};
    for (int t = 0; t < 2; t++) {
        const size_t n = 5000;
        static cera_candidate ref[MAXN];
        for (size_t i = 0; i < n; i++) buf[i] = (cera_candidate){(cera_token)i, test_rng_normal(&rng), 0.0f};
        memcpy(ref, buf, n * sizeof(cera_candidate));
        cera_candidates r = {ref, n, false};
        cera_cands_softmax(&r, false, &ws);
        cera_cands_partial_sort(&r, n, &ws);
        size_t want = n;
        float cum = 0.0f;
        for (size_t i = 0; i < n; i++) {
            cum += ref[i].p;
            if (cum >= ps[t]) {
                want = i + 1;
                break;
            }
        }
        c = (cera_candidates){buf, n, false};
        cera_stage_top_p(&c, ps[t], 0, &ws);
        bool same = c.size == want;
        for (size_t i = 0; same && i < want; i++) same = c.data[i].id == ref[i].id;
        CHECK(same && want > (t ? 256u : 0u),
              "top-p %.3f over %zu logits keeps the %zu sorted best (got %zu)", (double)ps[t], n, want,
              c.size);
    }
}

static void test_min_p(void) {
    const float p[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    cera_candidates c = from_probs(p, 4);
    cera_stage_min_p(&c, 0.5f, 0, &ws); /* keeps p >= 0.2 */
    const cera_token a[3] = {1, 2, 3};
    CHECK(ids_are(&c, a, 3) && !c.sorted, "min-p 0.5 keeps 0.2, 0.3, 0.4 in id order");
    c = from_probs(p, 4);
    cera_stage_min_p(&c, 0.76f, 0, &ws); /* 0.3 / 0.4 = 0.75 < 0.76 */
    CHECK(c.size == 1 && c.data[0].id == 3, "min-p 0.76 keeps only the best");
    c = from_probs(p, 4);
    cera_stage_top_k(&c, 4, &ws); /* sorted path */
    cera_stage_min_p(&c, 0.5f, 0, &ws);
    const cera_token b[3] = {3, 2, 1};
    CHECK(ids_are(&c, b, 3), "min-p on a sorted array keeps the sorted prefix");
    c = from_probs(p, 4);
    cera_stage_min_p(&c, 0.76f, 3, &ws); /* too few pass: min_keep falls back to sorting */
    CHECK(ids_are(&c, b, 3), "min-p honours min_keep");
    c = from_probs(p, 4);
    cera_stage_min_p(&c, 0.0f, 0, &ws);
    CHECK(c.size == 4, "min-p 0 is disabled");
}

static void test_typical(void) {
    /* H = -(0.97 ln 0.97 + 3 * 0.01 ln 0.01) = 0.168; the 0.97 token's surprisal
     * (0.030) is closest to H and alone exceeds 0.5. */
    const float p1[4] = {0.97f, 0.01f, 0.01f, 0.01f};
    cera_candidates c = from_probs(p1, 4);
    cera_stage_typical(&c, 0.5f, 0, &ws);
    CHECK(c.size == 1 && c.data[0].id == 0, "typical keeps the 0.97 token");
    /* H = -(0.4 ln 0.4 + 0.6 ln 0.2) = 1.332: the 0.2 tokens (surprisal 1.609) are
     * closer than the 0.4 one (0.916); three of them exceed 0.5. */
    const float p2[4] = {0.4f, 0.2f, 0.2f, 0.2f};
    c = from_probs(p2, 4);
    cera_stage_typical(&c, 0.5f, 0, &ws);
    const cera_token a[3] = {1, 2, 3};
    CHECK(ids_are(&c, a, 3) && !c.sorted, "typical keeps the three 0.2 tokens (size %zu)", c.size);
    c = from_probs(p2, 4);
    cera_stage_typical(&c, 0.5f, 4, &ws);
    CHECK(c.size == 4 && c.data[3].id == 0, "typical honours min_keep, the 0.4 token last");
    c = from_probs(p2, 4);
    cera_stage_typical(&c, 1.0f, 0, &ws);
    CHECK(c.size == 4, "typical 1 is disabled");
}

static void test_temp(void) {
    const float p[3] = {1.0f, 2.0f, 3.0f};
    cera_candidates c = {buf, 3, false};
    for (int i = 0; i < 3; i++) buf[i] = (cera_candidate){i, p[i], 0};
    cera_stage_temp(&c, 0.5f);
    CHECK(buf[0].logit == 2.0f && buf[1].logit == 4.0f && buf[2].logit == 6.0f, "temp 0.5 doubles logits");
    const float t[3] = {3.0f, 3.0f, 1.0f};
    for (int i = 0; i < 3; i++) buf[i] = (cera_candidate){i, t[i], 0};
    cera_stage_temp(&c, 0.0f);
    CHECK(buf[0].logit == 3.0f && isinf(buf[1].logit) && isinf(buf[2].logit),
          "temp 0 keeps the first max only");
}

static void test_dist(void) {
    const float p[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    cera_candidates c = from_probs(p, 4);
    /* Cumulative 0.1, 0.3, 0.6, 1.0 in id order. */
    CHECK(cera_stage_dist(&c, 0.05) == 0, "u 0.05 picks token 0");
    c = from_probs(p, 4);
    CHECK(cera_stage_dist(&c, 0.25) == 1, "u 0.25 picks token 1");
    c = from_probs(p, 4);
    CHECK(cera_stage_dist(&c, 0.59) == 2, "u 0.59 picks token 2");
    c = from_probs(p, 4);
    CHECK(cera_stage_dist(&c, 0.999) == 3, "u 0.999 picks token 3");
    CHECK(close_to(c.data[2].p, 0.3, 1e-6), "dist normalizes p (%g)", c.data[2].p);
}

static cera_sampler_params plain_params(void) {
    cera_sampler_params p = cera_sampler_default_params();
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temp = 1.0f;
    return p;
}

static void test_penalties(void) {
    const float logits[4] = {1.0f, -1.0f, 2.0f, 0.5f};
    cera_sampler_params p = plain_params();
    p.repeat_penalty = 2.0f;
    p.freq_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.penalty_last_n = 3;
    cera_sampler *s;
    CHECK(cera_sampler_new(&p, 4, &s, NULL) == CERA_OK, "sampler_new");
    cera_sampler_accept(s, 3); /* leaves the window of 3 below */
    cera_sampler_accept(s, 0);
    cera_sampler_accept(s, 0);
    cera_sampler_accept(s, 1);
    /* token 0 (twice): 1 / 2 - (2 * 0.5 + 0.25) = -0.75; token 1 (once):
     * -1 * 2 - (0.5 + 0.25) = -2.75; tokens 2 and 3 untouched. */
    const double want[4] = {-0.75, -2.75, 2.0, 0.5};
    double z = 0;
    for (int i = 0; i < 4; i++) z += exp(want[i]);
    size_t n;
    const cera_candidate *cd = cera_sampler_candidates(s, logits, &n);
    CHECK(n == 4, "all four candidates stay");
    for (size_t i = 0; i < n; i++)
        CHECK(close_to(cd[i].p, exp(want[cd[i].id]) / z, 1e-6), "penalized p of token %d = %g, want %g",
              cd[i].id, cd[i].p, exp(want[cd[i].id]) / z);
    cera_sampler_reset(s);
    cd = cera_sampler_candidates(s, logits, &n);
    double z0 = 0;
    for (int i = 0; i < 4; i++) z0 += exp(logits[i]);
    CHECK(close_to(cd[0].p, exp(1.0) / z0, 1e-6), "reset clears the history");
    cera_sampler_free(s);

    /* -1: the whole history counts. */
    p.penalty_last_n = -1;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.freq_penalty = 1.0f;
    CHECK(cera_sampler_new(&p, 4, &s, NULL) == CERA_OK, "sampler_new");
    for (int i = 0; i < 100; i++) cera_sampler_accept(s, 2);
    cera_sampler_accept(s, 7);  /* out of range: ignored */
    cera_sampler_accept(s, -1); /* ditto */
    p.temp = 0.0f;
    cd = cera_sampler_candidates(s, logits, &n);
    double z2 = exp(1.0) + exp(-1.0) + exp(2.0 - 100.0) + exp(0.5);
    bool ok = false;
    for (size_t i = 0; i < n; i++)
        if (cd[i].id == 2) ok = close_to(cd[i].p, exp(-98.0) / z2, 1e-12);
    CHECK(ok, "100 accepts of token 2 subtract 100 with penalty_last_n -1");
    cera_sampler_free(s);

    /* Greedy follows the penalties: the repeated best token loses. */
    p = cera_sampler_default_params();
    p.temp = 0.0f;
    p.repeat_penalty = 1.5f;
    CHECK(cera_sampler_new(&p, 4, &s, NULL) == CERA_OK, "sampler_new");
    CHECK(cera_sampler_sample(s, logits) == 2, "greedy picks 2 first");
    cera_sampler_accept(s, 2); /* 2 / 1.5 = 1.33 > 1: still the best */
    CHECK(cera_sampler_sample(s, logits) == 2, "2 / 1.5 still beats 1");
    cera_sampler_free(s);
    p.repeat_penalty = 2.5f; /* 2 / 2.5 = 0.8 < 1 */
    CHECK(cera_sampler_new(&p, 4, &s, NULL) == CERA_OK, "sampler_new");
    cera_sampler_accept(s, 2);
    CHECK(cera_sampler_sample(s, logits) == 0, "2 / 2.5 loses to token 0");
    cera_sampler_free(s);
}

static void test_logit_bias_and_greedy(void) {
    enum { NV = 3000 };
    static float logits[NV];
    test_rng rng = {1234};
    cera_sampler_params p = cera_sampler_default_params();
    p.temp = 0.0f;
    cera_sampler *s;
    CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new");
    int good = 0;
    for (int row = 0; row < 50; row++) {
        for (int i = 0; i < NV; i++) logits[i] = test_rng_normal(&rng) * 4.0f;
        int best = 0;
        for (int i = 1; i < NV; i++)
            if (logits[i] > logits[best]) best = i;
        good += cera_sampler_sample(s, logits) == best;
    }
    CHECK(good == 50, "greedy = argmax on %d of 50 random rows", good);
    cera_sampler_free(s);

    /* A ban moves greedy to the second best; a large bias makes any token win. */
    for (int i = 0; i < NV; i++) logits[i] = (float)(i % 100) * 0.01f;
    cera_logit_bias lb[2] = {{99, -INFINITY}, {1999, -INFINITY}};
    p.logit_bias = lb;
    p.n_logit_bias = 2;
    CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new with bias");
    lb[0].token = 5; /* the sampler copied the array */
    const cera_token g = cera_sampler_sample(s, logits);
    CHECK(g == 98 + 100 * 0 || (g % 100 == 99 && g != 99 && g != 1999), "banned tokens never win (got %d)",
          g);
    CHECK(g == 199, "first unbanned max is 199 (got %d)", g);
    cera_sampler_free(s);

    cera_logit_bias up = {7, 5.0f};
    p.logit_bias = &up;
    p.n_logit_bias = 1;
    CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new");
    CHECK(cera_sampler_sample(s, logits) == 7, "+5 bias makes token 7 win");
    cera_sampler_free(s);

    /* Banned tokens are never drawn at temperature 1 either. */
    cera_logit_bias ban[3] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}};
    const float four[4] = {5.0f, 5.0f, 5.0f, 0.0f};
    p = plain_params();
    p.logit_bias = ban;
    p.n_logit_bias = 3;
    CHECK(cera_sampler_new(&p, 4, &s, NULL) == CERA_OK, "sampler_new");
    int others = 0;
    for (int i = 0; i < 200; i++) others += cera_sampler_sample(s, four) != 3;
    CHECK(others == 0, "a banned token was drawn %d times", others);
    cera_sampler_free(s);
}

static void test_seeds(void) {
    enum { NV = 500, N = 300 };
    static float logits[NV];
    test_rng rng = {99};
    for (int i = 0; i < NV; i++) logits[i] = test_rng_normal(&rng);
    cera_sampler_params p = cera_sampler_default_params();
    p.top_k = 0;
    p.min_p = 0.0f;
    p.top_p = 0.99f;
    p.temp = 1.0f;
    cera_token a[N], b[N], c[N], d[N];
    cera_sampler *s;
    for (int run = 0; run < 3; run++) {
        p.seed = run == 2 ? 43 : 42;
        CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new");
        cera_token *out = run == 0 ? a : run == 1 ? b : c;
        for (int i = 0; i < N; i++) out[i] = cera_sampler_sample(s, logits);
        if (run == 0) { /* reset replays the same sequence */
            cera_sampler_reset(s);
            for (int i = 0; i < N; i++) d[i] = cera_sampler_sample(s, logits);
        }
        cera_sampler_free(s);
    }
    /* A clone taken mid-sequence continues exactly as the original. */
    p.seed = 42;
    p.repeat_penalty = 1.3f;
    p.penalty_last_n = 8;
    CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new");
    for (int i = 0; i < 50; i++) cera_sampler_accept(s, cera_sampler_sample(s, logits));
    cera_sampler *twin = NULL;
    CHECK(cera_sampler_clone(s, &twin, NULL) == CERA_OK, "clone");
    int same = 0;
    for (int i = 0; twin && i < 100; i++) {
        const cera_token x = cera_sampler_sample(s, logits), y = cera_sampler_sample(twin, logits);
        same += x == y;
        cera_sampler_accept(s, x);
        cera_sampler_accept(twin, y);
    }
    CHECK(same == 100, "the clone drew the same token %d of 100 times", same);
    cera_sampler_free(twin);
    cera_sampler_free(s);
    CHECK(!memcmp(a, b, sizeof(a)), "the same seed gives the same sequence");
    CHECK(!memcmp(a, d, sizeof(a)), "reset gives the same sequence again");
    int differ = 0;
    for (int i = 0; i < N; i++) differ += a[i] != c[i];
    CHECK(differ > N / 2, "seeds 42 and 43 differ at %d of %d draws", differ, N);
}

/* The draws follow the post-chain distribution: Pearson's chi-square over the
 * candidates, with a deterministic seed so the result is repeatable. */
static void test_chi_square(void) {
    enum { NV = 2000, DRAWS = 100000 };
    static float logits[NV];
    static int hits[NV];
    static float prob[NV];
    test_rng rng = {4242};
    for (int i = 0; i < NV; i++) logits[i] = test_rng_normal(&rng) * 2.0f;
    cera_sampler_params p = cera_sampler_default_params(); /* top-k 40, top-p 0.95, min-p 0.05, temp 0.8 */
    p.seed = 7;
    cera_sampler *s;
    CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new");
    size_t n;
    const cera_candidate *cd = cera_sampler_candidates(s, logits, &n);
    memset(prob, 0, sizeof(prob));
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        prob[cd[i].id] = cd[i].p;
        total += cd[i].p;
    }
    CHECK(n > 3 && n <= 40, "chain keeps %zu candidates", n);
    CHECK(close_to(total, 1.0, 1e-5), "candidate probabilities sum to %g", total);
    int outside = 0;
    for (int i = 0; i < DRAWS; i++) {
        const cera_token t = cera_sampler_sample(s, logits);
        if (prob[t] == 0.0f) outside++;
        hits[t]++;
    }
    CHECK(outside == 0, "%d draws fell outside the chain's candidates", outside);
    double chi2 = 0;
    int df = -1;
    for (int t = 0; t < NV; t++) {
        if (prob[t] == 0.0f) continue;
        const double e = prob[t] * DRAWS;
        chi2 += (hits[t] - e) * (hits[t] - e) / e;
        df++;
    }
    /* The 99.9th percentile of chi-square is below df + 4.5 sqrt(2 df) + 10 here. */
    const double limit = df + 4.5 * sqrt(2.0 * df) + 10.0;
    CHECK(chi2 < limit, "chi-square %.1f over %d degrees of freedom exceeds %.1f", chi2, df, limit);
    cera_sampler_free(s);
}

/* llama.cpp's own chain (penalties, top-k, typical, top-p, min-p, temp, dist; built
 * from its sampler API at the reference commit) over the same synthetic logits: each
 * step's logits are (u - 0.5) * 8 with u from the LCG below, seeded 42; every sampled
 * token is accepted. cera must make exactly the same draws. */
static float golden_u(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*st >> 40) & 0xffffff) / 16777216.0f;
}

typedef struct golden_case {
    int n_vocab, top_k;
    float top_p, min_p, typical_p, temp, repeat, freq, present;
    int last_n;
    uint64_t seed;
    cera_token want[24];
} golden_case;

static const golden_case golden[] = {
    {1000, 40, 0.95f, 0.05f, 1.0f, 0.8f, 1.0f, 0.0f, 0.0f, 64, 42, {533, 730, 435, 97,  180, 837, 42,  908,
                                                                    17,  690, 635, 31,  674, 130, 868, 680,
                                                                    961, 151, 47,  902, 497, 394, 704, 468}},
    {3000, 100, 0.9f, 0.02f, 0.95f, 0.7f, 1.3f, 0.2f, 0.1f, 16, 3, {2060, 2729, 1210, 358,  1166, 710,
                                                                    1694, 2842, 1406, 2137, 2224, 45,
                                                                    337,  231,  2572, 2380, 2962, 2409,
                                                                    1436, 1872, 236,  2793, 626,  128}},
    {3000, 40, 0.95f, 0.05f, 1.0f, 0.0f, 1.3f, 0.2f, 0.1f, 16, 3, {2146, 1381, 1447, 1488, 2595, 1080,
                                                                   47,   2531, 1891, 1924, 1430, 1446,
                                                                   534,  2376, 2048, 1749, 1255, 2584,
                                                                   2799, 626,  1049, 1215, 2251, 1236}},
    {32000, 0, 0.9f, 0.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 64, 7, {12543, 13599, 15319, 9766,  25210, 3489,
                                                                 22243, 29029, 28181, 30830, 18753, 31657,
                                                                 6671,  12944, 776,   13179, 3181,  7582,
                                                                 4876,  27926, 8779,  17062, 8745,  3864}},
};

static void test_llama_cpp_draws(void) {
    static float logits[32000];
    for (size_t g = 0; g < sizeof golden / sizeof golden[0]; g++) {
        const golden_case *gc = &golden[g];
        cera_sampler_params p = cera_sampler_default_params();
        p.top_k = gc->top_k;
        p.top_p = gc->top_p;
        p.min_p = gc->min_p;
        p.typical_p = gc->typical_p;
        p.temp = gc->temp;
        p.repeat_penalty = gc->repeat;
        p.freq_penalty = gc->freq;
        p.presence_penalty = gc->present;
        p.penalty_last_n = gc->last_n;
        p.seed = gc->seed;
        cera_sampler *s;
        CHECK(cera_sampler_new(&p, gc->n_vocab, &s, NULL) == CERA_OK, "sampler_new");
        uint64_t st = 42;
        int same = 0;
        for (int k = 0; k < 24; k++) {
            for (int i = 0; i < gc->n_vocab; i++) logits[i] = (golden_u(&st) - 0.5f) * 8.0f;
            const cera_token t = cera_sampler_sample(s, logits);
            cera_sampler_accept(s, t);
            same += t == gc->want[k];
        }
        CHECK(same == 24, "case %zu: %d of 24 draws equal llama.cpp's", g, same);
        cera_sampler_free(s);
    }
}

/* Hostile logits (NaN, +-inf, everything banned) still give a token in range. */
static void test_hostile_logits(void) {
    enum { NV = 2000 };
    static float logits[NV];
    test_rng rng = {31337};
    const float temps[3] = {0.0f, 0.8f, 1.5f};
    for (int mode = 0; mode < 4; mode++) {
        for (int i = 0; i < NV; i++) {
            const float u = test_rng_uniform(&rng);
            logits[i] = mode == 3   ? -INFINITY
                        : u < 0.1f  ? NAN
                        : u < 0.15f ? INFINITY
                        : u < 0.2f  ? -INFINITY
                                    : u * 10;
            if (mode == 2 && i % 2) logits[i] = NAN;
        }
        for (int t = 0; t < 3; t++) {
            cera_sampler_params p = cera_sampler_default_params();
            p.temp = temps[t];
            p.typical_p = mode == 1 ? 0.9f : 1.0f;
            p.repeat_penalty = 1.2f;
            cera_sampler *s;
            CHECK(cera_sampler_new(&p, NV, &s, NULL) == CERA_OK, "sampler_new");
            bool ok = true;
            for (int k = 0; k < 20; k++) {
                const cera_token tok = cera_sampler_sample(s, logits);
                ok = ok && tok >= 0 && tok < NV;
                cera_sampler_accept(s, tok);
            }
            CHECK(ok, "hostile logits (mode %d, temp %g) give tokens in range", mode, (double)temps[t]);
            cera_sampler_free(s);
        }
    }
}

static void expect_rejected(const cera_sampler_params *p, int n_vocab, const char *needle) {
    cera_sampler *s = (cera_sampler *)&s; /* must be reset to NULL */
    cera_error err;
    const cera_status st = cera_sampler_new(p, n_vocab, &s, &err);
    CHECK(st == CERA_ERR_INVALID_ARG && s == NULL && strstr(err.message, needle),
          "expected rejection naming '%s', got status %d message '%s'", needle, st, err.message);
}

static void test_invalid(void) {
    cera_sampler_params p = cera_sampler_default_params();
    expect_rejected(&p, 0, "n_vocab");
    p.top_p = 1.5f;
    expect_rejected(&p, 10, "top_p");
    p = cera_sampler_default_params();
    p.min_p = -0.1f;
    expect_rejected(&p, 10, "min_p");
    p = cera_sampler_default_params();
    p.typical_p = NAN;
    expect_rejected(&p, 10, "typical_p");
    p = cera_sampler_default_params();
    p.temp = NAN;
    expect_rejected(&p, 10, "temp");
    p = cera_sampler_default_params();
    p.repeat_penalty = 0.0f;
    expect_rejected(&p, 10, "repeat_penalty");
    p = cera_sampler_default_params();
    p.freq_penalty = INFINITY;
    expect_rejected(&p, 10, "freq_penalty");
    p = cera_sampler_default_params();
    p.penalty_last_n = -2;
    expect_rejected(&p, 10, "penalty_last_n");
    p = cera_sampler_default_params();
    cera_logit_bias lb = {10, 1.0f};
    p.logit_bias = &lb;
    p.n_logit_bias = 1;
    expect_rejected(&p, 10, "token 10");
    lb = (cera_logit_bias){3, INFINITY};
    expect_rejected(&p, 10, "logit bias");
    p.logit_bias = NULL;
    expect_rejected(&p, 10, "logit bias");
    /* Edge values that are valid. */
    p = cera_sampler_default_params();
    p.temp = -1.0f;
    p.top_p = 0.0f;
    p.min_p = 1.0f;
    p.penalty_last_n = -1;
    cera_sampler *s;
    CHECK(cera_sampler_new(&p, 10, &s, NULL) == CERA_OK, "edge parameters accepted");
    cera_sampler_free(s);
}

int main(void) {
    test_mt19937();
    test_softmax();
    test_top_k();
    test_top_p();
    test_min_p();
    test_typical();
    test_temp();
    test_dist();
    test_penalties();
    test_logit_bias_and_greedy();
    test_seeds();
    test_chi_square();
    test_llama_cpp_draws();
    test_hostile_logits();
    test_invalid();
    return test_finish();
}

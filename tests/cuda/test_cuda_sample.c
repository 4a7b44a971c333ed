/*
 * test_cuda_sample.c — the sampler chain on the GPU (backend/cuda/sample.cu) against the
 * CPU sampler, and the session's device-kept logits (session.c, backend.h).
 *
 *   expf     the kernel's expf equals the host's (glibc) bit for bit: every float in
 *            [-104, 0] (what the chain feeds it) and a stride over all the others.
 *   kernel   for vocabularies of 32000 and 151936, every chain and logit kind of
 *            tests/sample/sample_cases.h (ties, -inf, NaN, -0.0, peaked, flat; greedy,
 *            defaults, top-k 1 and 1024, penalties, biases with -inf and duplicates, the
 *            filters off), 200 consecutive draws: the device token equals
 *            cera_sampler_sample's from the same state and seed. Chains the device does
 *            not run are refused with CERA_ERR_UNSUPPORTED and draw nothing.
 *   masked   the same chains and logits under a grammar's token mask (half the vocabulary,
 *            1 %, one token, a token the chain biases to -inf, none): the device token
 *            equals cera_sampler_sample_masked's, -1 (nothing left) included.
 *   session  stories260K on CUDA: at every step of a generation the token
 *            cera_session_sample returns (device) equals the CPU sampler's on the logits
 *            cera_session_logits returns, fetched after the sample (so they are still the
 *            raw ones: a token biased to -inf stays finite); two sessions interleaved keep
 *            their own logits (each within 2e-2 of the row max of its own all-logits eval); and
 *            cera_generate of 100 tokens gives the same tokens with device sampling as with
 *            CERA_CUDA_SAMPLE=0; and so does a generation under a grammar, whose masks
 *            reach the device's chain (the row never comes back), to the grammar's end.
 * Exits 77 without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/sample_cuda.h"
#include "cera.h"
#include "sample/sampler.h"
#include "engine/engine_impl.h"
#include "testutil.h"

#include "../sample/sample_cases.h"

static void test_expf(void) {
    enum { CHUNK = 1 << 24 };
    float *x = malloc(sizeof(float) * CHUNK), *y = malloc(sizeof(float) * CHUNK);
    CHECK(x && y, "alloc");
    if (!x || !y) goto done;
    uint64_t n_bad = 0, n_all = 0;
    cera_error err;
    /* [-104, 0] exhaustively (bits 0x80000000 .. 0xc2d00000), then every 101st float */
    for (int pass = 0; pass < 2; pass++) {
        const uint64_t lo = pass ? 0 : 0x80000000ull, hi = pass ? 0xffffffffull : 0xc2d00000ull;
        const uint64_t step = pass ? 101 : 1;
        for (uint64_t b = lo; b <= hi;) {
            int n = 0;
            for (; n < CHUNK && b <= hi; n++, b += step) {
                const uint32_t u = (uint32_t)b;
                memcpy(&x[n], &u, 4);
            }
            if (cera_cuda_test_expf(x, y, (size_t)n, &err) != CERA_OK) {
                CHECK(0, "expf hook: %s", err.message);
                goto done;
            }
            for (int i = 0; i < n; i++) {
                const float want = expf(x[i]);
                if (memcmp(&want, &y[i], 4) != 0 && !(isnan(want) && isnan(y[i]))) {
                    if (n_bad < 5)
                        printf("expf(%a): device %a, host %a\n", (double)x[i], (double)y[i], (double)want);
                    n_bad++;
                }
            }
            n_all += (uint64_t)n;
        }
    }
    CHECK(n_bad == 0, "device expf differs from the host's on %llu of %llu floats", (unsigned long long)n_bad,
          (unsigned long long)n_all);
    printf("expf: %llu floats, %llu differ\n", (unsigned long long)n_all, (unsigned long long)n_bad);
done:
    free(x);
    free(y);
}

enum { MASK_KINDS = 5 };

/* A grammar-like mask of kind (0 .. MASK_KINDS-1): half the tokens, 1 %, one token, the
 * chain's first bias token only (the chains with -inf biases then allow nothing), none. */
static void case_mask(uint32_t *mask, int n_vocab, int kind, const cera_sampler_params *p, test_rng *r) {
    const size_t words = ((size_t)n_vocab + 31) / 32;
    memset(mask, 0, words * sizeof *mask);
    const cera_token one = p->n_logit_bias > 0 ? p->logit_bias[0].token : 7;
    for (int i = 0; i < n_vocab; i++) {
        const float u = test_rng_uniform(r);
        const bool on = kind == 0   ? u < 0.5f
                        : kind == 1 ? u < 0.01f
                        : kind == 2 ? i == n_vocab / 3
                                    : kind == 3 && i == one;
        if (on) mask[i >> 5] |= 1u << (i & 31);
    }
}

/* Every chain over steps draws of every logit kind: the device token against the CPU
 * sampler's from the same state and seed; with masked, under a mask of each kind in turn
 * against cera_sampler_sample_masked (-1, nothing left, included). */
static void test_kernel(int n_vocab, int steps, bool masked) {
    float *logits = malloc(sizeof(float) * (size_t)n_vocab);
    uint32_t *mask = masked ? malloc(sizeof(uint32_t) * (((size_t)n_vocab + 31) / 32)) : NULL;
    static cera_logit_bias bias[1024];
    CHECK(logits && (mask || !masked), "alloc");
    if (!logits || (masked && !mask)) {
        free(logits);
        free(mask);
        return;
    }
    const char *what = masked ? "masked" : "kernel";
    int none = 0;
    for (int c = 0; c < CASE_CHAINS; c++) {
        test_rng r = {(masked ? 0xfaded : 0xdecade) + (uint64_t)c};
        cera_sampler *cpu, *dev;
        if (!case_sampler_pair(c, n_vocab, bias, &r, &cpu, &dev)) continue;
        int same = 0, first_bad = -1;
        cera_token bad_cpu = 0, bad_dev = 0;
        cera_error err;
        cera_status st = CERA_OK;
        for (int t = 0; t < steps && st == CERA_OK; t++) {
            case_logits(logits, n_vocab, t % CASE_LOGIT_KINDS, &r);
            if (masked)
                case_mask(mask, n_vocab, (t / CASE_LOGIT_KINDS) % MASK_KINDS, cera_sampler_params_of(cpu),
                          &r);
            const cera_token want =
                masked ? cera_sampler_sample_masked(cpu, logits, mask) : cera_sampler_sample(cpu, logits);
            cera_token got = -2;
            /* a row with a NaN or +Inf is an error on the device, as at session level (both
             * samplers still took their draw, so the RNGs stay together) */
            bool garbage = false;
            for (int i = 0; i < n_vocab && !garbage; i++) garbage = isnan(logits[i]) || logits[i] == INFINITY;
            st = cera_cuda_test_sample(dev, logits, n_vocab, mask, &got, &err);
            if (garbage) {
                CHECK(st == CERA_ERR_FORMAT, "%s, vocab %d chain %d step %d: a NaN/+Inf row gave status %d",
                      what, n_vocab, c, t, (int)st);
                st = st == CERA_ERR_FORMAT ? CERA_OK : st;
                got = want;
            } else {
                CHECK(st == CERA_OK, "%s, vocab %d chain %d step %d: %s", what, n_vocab, c, t, err.message);
            }
            if (got == want)
                same++;
            else if (first_bad < 0)
                first_bad = t, bad_cpu = want, bad_dev = got;
            none += want < 0;
            if (want >= 0) {
                cera_sampler_accept(cpu, want);
                cera_sampler_accept(dev, want);
            }
        }
        CHECK(same == steps,
              "%s, vocab %d chain %d: %d/%d device tokens equal the CPU's (first differs at step %d, "
              "logit kind %d, mask kind %d: cpu %d, device %d)",
              what, n_vocab, c, same, steps, first_bad, first_bad % CASE_LOGIT_KINDS,
              masked ? (first_bad / CASE_LOGIT_KINDS) % MASK_KINDS : -1, bad_cpu, bad_dev);
        cera_sampler_free(cpu);
        cera_sampler_free(dev);
    }
    CHECK(masked ? none > 0 : none == 0, "%s: %d draws left nothing (masks only: the -1 answer is checked)",
          what, none);
    printf("%s: vocab %d, %d chains x %d draws (%d left nothing)\n", what, n_vocab, CASE_CHAINS, steps, none);
    free(logits);
    free(mask);
}

/* Chains the device does not run: refused before the draw (the RNG has not moved). */
static void test_refused(void) {
    enum { NV = 1000 };
    static float logits[NV];
    static cera_logit_bias bias[1025];
    for (int i = 0; i < NV; i++) logits[i] = (float)(i % 17);
    for (int i = 0; i < 1025; i++) bias[i] = (cera_logit_bias){i % NV, 0.5f};
    for (int c = 0; c < 4; c++) {
        cera_sampler_params p = cera_sampler_default_params();
        if (c == 0) p.top_k = 0;
        if (c == 1) p.top_k = CERA_DEVICE_TOPK_MAX + 1;
        if (c == 2) p.typical_p = 0.9f;
        if (c == 3) p.logit_bias = bias, p.n_logit_bias = 1025;
        cera_sampler *a = NULL, *b = NULL;
        CHECK(cera_sampler_new(&p, NV, &a, NULL) == CERA_OK && cera_sampler_clone(a, &b, NULL) == CERA_OK,
              "sampler");
        if (!a || !b) return;
        cera_token t = -1;
        cera_error err;
        CHECK(cera_cuda_test_sample(a, logits, NV, NULL, &t, &err) == CERA_ERR_UNSUPPORTED,
              "chain %d is refused by the device", c);
        CHECK(cera_sampler_draw(a) == cera_sampler_draw(b), "chain %d: a refused chain draws nothing", c);
        cera_sampler_free(a);
        cera_sampler_free(b);
    }
}

/* A NaN or a +Inf anywhere in the row is an error (CERA_ERR_FORMAT), greedy or not, never a
 * token chosen from it; a finite row still samples (the kernel cases above hold -Inf logits). */
static void test_nonfinite(void) {
    enum { NV = 32000 };
    static float logits[NV];
    for (int i = 0; i < NV; i++) logits[i] = (float)(i % 97) * 0.01f;
    const float bad[2] = {NAN, INFINITY};
    for (int g = 0; g < 2; g++) {
        cera_sampler_params p = cera_sampler_default_params();
        if (g) p.temp = 0.0f;
        cera_sampler *smp = NULL;
        CHECK(cera_sampler_new(&p, NV, &smp, NULL) == CERA_OK, "sampler");
        if (!smp) return;
        cera_token t = -1;
        cera_error err;
        CHECK(cera_cuda_test_sample(smp, logits, NV, NULL, &t, &err) == CERA_OK, "finite row: %s",
              err.message);
        for (int k = 0; k < 2; k++) {
            const int at = 1000 + 7919 * k;
            logits[at] = bad[k];
            const cera_status st = cera_cuda_test_sample(smp, logits, NV, NULL, &t, &err);
            CHECK(st == CERA_ERR_FORMAT && strstr(err.message, "non-finite"),
                  "%s chain, %g at %d: status %d (%s)", g ? "greedy" : "sampled", (double)bad[k], at, (int)st,
                  err.message);
            logits[at] = 0.5f;
        }
        cera_sampler_free(smp);
    }
}

/* ---- Session level (stories260K) ---------------------------------------------------- */

static cera_engine *open_engine(bool device_sampling) {
    if (device_sampling)
        unsetenv("CERA_CUDA_SAMPLE");
    else
        setenv("CERA_CUDA_SAMPLE", "0", 1);
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CUDA;
    ep.n_ctx = 256;
    cera_engine *e = NULL;
    cera_error err;
    const cera_status st = cera_engine_open(shared_path("models/stories260K.gguf"), &ep, &e, &err);
    CHECK(st == CERA_OK, "engine (device sampling %d): %s", device_sampling, err.message);
    unsetenv("CERA_CUDA_SAMPLE");
    return st == CERA_OK ? e : NULL;
}

static cera_sampler_params session_chain(void) {
    static cera_logit_bias bias[2] = {{30, -INFINITY}, {31, 1.5f}};
    cera_sampler_params p = cera_sampler_default_params();
    p.seed = 4242;
    p.temp = 1.1f;
    p.top_k = 60;
    p.top_p = 0.97f;
    p.min_p = 0.02f;
    p.repeat_penalty = 1.15f;
    p.freq_penalty = 0.05f;
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    return p;
}

/* One step of a session: the device's token against the CPU sampler (a clone of the
 * session's, taken before the sample) on the logits fetched after it. */
static bool step_matches(cera_session *s, cera_token *tok) {
    cera_sampler *ref = NULL;
    if (cera_sampler_clone(s->sampler, &ref, NULL) != CERA_OK) return false;
    const cera_token t = cera_session_sample(s);
    const float *l = cera_session_logits(s, -1);
    bool ok = t >= 0 && l != NULL;
    if (ok) ok = isfinite(l[30]); /* biased to -inf by the chain, raw in the logits */
    if (ok) ok = cera_sampler_sample(ref, l) == t;
    cera_sampler_free(ref);
    *tok = t;
    return ok;
}

typedef struct collected {
    cera_token *t; /* [100] */
    int n;
} collected;

static bool collect(cera_token token, const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    collected *c = user;
    if (c->n < 100) c->t[c->n] = token;
    c->n++;
    return true;
}

static double row_diff(const float *a, const float *b, int nv) {
    double amax = 0, d = 0;
    for (int j = 0; j < nv; j++) {
        amax = fmax(amax, fabs(b[j]));
        d = isnan(a[j]) ? INFINITY : fmax(d, fabs((double)a[j] - b[j]));
    }
    return d / (amax > 0 ? amax : 1);
}

static void test_session(void) {
    size_t n_prompt = 0;
    int32_t *prompt = read_ints(shared_path("golden/stories260K.p1.tokens"), &n_prompt);
    CHECK(prompt && n_prompt >= 4, "golden prompt tokens");
    cera_engine *dev = open_engine(true), *host = open_engine(false);
    if (!prompt || n_prompt < 4 || !dev || !host) goto done;
    CHECK(dev->backend->sample != NULL, "the CUDA backend samples on the device");
    CHECK(host->backend->sample == NULL, "CERA_CUDA_SAMPLE=0 turns device sampling off");
    const int nv = cera_engine_n_vocab(dev);
    const cera_sampler_params sp = session_chain();
    cera_session_params ps = cera_session_default_params();
    ps.sampler = sp;
    cera_error err;

    /* two sessions interleaved, different prompts; a third evaluates each one's timeline
     * with all logits (copied to the host) as the reference for the kept rows */
    cera_session *s1 = NULL, *s2 = NULL, *ref = NULL;
    CHECK(cera_session_create(dev, &ps, &s1, &err) == CERA_OK, "session: %s", err.message);
    CHECK(cera_session_create(dev, &ps, &s2, &err) == CERA_OK, "session: %s", err.message);
    CHECK(cera_session_create(dev, &ps, &ref, &err) == CERA_OK, "session: %s", err.message);
    if (!s1 || !s2 || !ref) goto sessions_done;
    cera_token tl1[256], tl2[256];
    size_t n1 = n_prompt, n2 = n_prompt - 2;
    memcpy(tl1, prompt, n1 * sizeof *tl1);
    memcpy(tl2, prompt + 2, n2 * sizeof *tl2);
    CHECK(cera_session_eval(s1, tl1, n1, false, &err) == CERA_OK, "eval: %s", err.message);
    CHECK(cera_session_eval(s2, tl2, n2, false, &err) == CERA_OK, "eval: %s", err.message);
    int ok_steps = 0, ok_rows = 0;
    const int steps = 40;
    double worst = 0;
    for (int step = 0; step < steps; step++) {
        cera_token t1 = -1, t2 = -1;
        const bool a = step_matches(s1, &t1); /* s1's row after s2's forward */
        const bool b = step_matches(s2, &t2);
        ok_steps += a && b;
        /* each kept row is its own timeline's: against an all-logits eval of it */
        bool rows = true;
        for (int q = 0; q < 2 && rows; q++) {
            cera_session *s = q ? s2 : s1;
            const cera_token *tl = q ? tl2 : tl1;
            const size_t n = q ? n2 : n1;
            rows = cera_session_truncate(ref, 0, &err) == CERA_OK &&
                   cera_session_eval(ref, tl, n, true, &err) == CERA_OK;
            const float *lr = rows ? cera_session_logits(ref, (int)n - 1) : NULL;
            const float *ls = cera_session_logits(s, -1);
            rows = rows && lr && ls;
            if (rows) {
                const double d = row_diff(ls, lr, nv);
                worst = fmax(worst, d);
                rows = d <= 2e-2; /* decode vs prefill kernels; another timeline's row is O(1) away */
            }
        }
        ok_rows += rows;
        if (t1 < 0 || t2 < 0 || n1 >= 200) break;
        tl1[n1++] = t1;
        tl2[n2++] = t2;
        if (cera_session_eval(s1, &t1, 1, false, &err) != CERA_OK ||
            cera_session_eval(s2, &t2, 1, false, &err) != CERA_OK) {
            CHECK(0, "eval: %s", err.message);
            break;
        }
    }
    CHECK(ok_steps == steps, "device token = CPU sampler on the fetched raw logits at %d/%d steps", ok_steps,
          steps);
    CHECK(ok_rows == steps, "each session's kept logits are its own at %d/%d steps (worst %.2e)", ok_rows,
          steps, worst);
    printf("session: %d/%d steps match, rows %d/%d (worst %.2e)\n", ok_steps, steps, ok_rows, steps, worst);
sessions_done:
    cera_session_free(s1);
    cera_session_free(s2);
    cera_session_free(ref);

    /* cera_generate: device sampling against CERA_CUDA_SAMPLE=0 */
    {
        cera_token gen[2][100];
        int n_gen[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            cera_session *s = NULL;
            CHECK(cera_session_create(k ? host : dev, &ps, &s, &err) == CERA_OK, "session: %s", err.message);
            if (!s) break;
            cera_generate_params gp = cera_generate_default_params();
            gp.n_predict = 100;
            gp.ignore_eog = true;
            collected col = {gen[k], 0};
            cera_status st = cera_generate(s, prompt, n_prompt, &gp, collect, &col, &n_gen[k], &err);
            CHECK(st == CERA_OK, "generate: %s", err.message);
            CHECK(col.n == n_gen[k], "the callback saw every generated token");
            cera_session_free(s);
        }
        int same = 0;
        while (same < n_gen[0] && same < n_gen[1] && gen[0][same] == gen[1][same]) same++;
        CHECK(n_gen[0] == 100 && n_gen[1] == 100 && same == 100,
              "cera_generate: %d/%d tokens equal with device and host sampling (%d, %d generated)", same, 100,
              n_gen[0], n_gen[1]);
        printf("generate: %d/100 tokens equal, device vs CERA_CUDA_SAMPLE=0\n", same);
    }

    /* the same under a grammar: its masks go to the device's chain */
    {
        static const char gbnf[] = "root ::= (word \" \")+ \".\"\nword ::= [a-z]+\n";
        cera_token gen[2][100];
        int n_gen[2] = {0, 0};
        cera_grammar_state end[2] = {CERA_GRAMMAR_NONE, CERA_GRAMMAR_NONE};
        for (int k = 0; k < 2; k++) {
            cera_session *s = NULL;
            CHECK(cera_session_create(k ? host : dev, &ps, &s, &err) == CERA_OK, "session: %s", err.message);
            if (!s) break;
            CHECK(cera_session_set_grammar(s, gbnf, sizeof gbnf - 1, &err) == CERA_OK, "grammar: %s",
                  err.message);
            cera_generate_params gp = cera_generate_default_params();
            gp.n_predict = 100;
            collected col = {gen[k], 0};
            cera_status st = cera_generate(s, prompt, n_prompt, &gp, collect, &col, &n_gen[k], &err);
            CHECK(st == CERA_OK, "generate under a grammar: %s", err.message);
            end[k] = cera_session_grammar_state(s);
            cera_session_free(s);
        }
        int same = 0;
        while (same < n_gen[0] && same < n_gen[1] && gen[0][same] == gen[1][same]) same++;
        CHECK(n_gen[0] > 0 && n_gen[0] == n_gen[1] && same == n_gen[0] && end[0] == end[1],
              "grammar: %d tokens equal with device and host sampling (%d, %d generated; end states %d, %d)",
              same, n_gen[0], n_gen[1], (int)end[0], (int)end[1]);
        printf("grammar: %d/%d tokens equal, device masks vs CERA_CUDA_SAMPLE=0 (end state %d)\n", same,
               n_gen[0], (int)end[0]);
    }
done:
    cera_engine_close(dev);
    cera_engine_close(host);
    free(prompt);
}

int main(void) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    test_refused();
    test_kernel(32000, 200, false);
    test_kernel(151936, 200, false);
    test_kernel(32000, 200, true);
    test_kernel(151936, 100, true);
    test_session();
    test_expf();
    test_nonfinite();
    return test_finish();
}

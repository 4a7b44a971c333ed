/*
 * test_cuda_lora.c — LoRA adapters on the CUDA backend, against llama.cpp's goldens and
 * against the CPU backend (which matches llama.cpp bit for bit or nearly, test_lora_golden):
 *   - stories260K with lora-stories-a at 1 and 0.5, a plus b at 0.7; synth-llama (F32,
 *     Q4_0, Q4_K_M) with lora-synth-llama: every prompt position's logits within a bound
 *     of the row's max |logit| of the golden, the same top token, and (F32 bases) the
 *     greedy continuation decoded on the GPU identical to llama.cpp's;
 *   - each adapter's PEFT folder gives the GGUF twin's logits bit for bit, and scale 0
 *     gives the logits of no adapter bit for bit (the same factors, the same launches);
 *   - prefill and decode with an adapter agree (cuBLAS vs matvec: within the bound);
 *   - a live session whose adapters change between decode steps (attach, rescale, swap,
 *     detach: the decode graph follows) against the CPU backend doing the same steps;
 *   - a batch of several sequences with different adapter sets (rows grouped per adapter)
 *     against each sequence run alone, and far from the same rows without adapters.
 * Exits 77 without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "engine/engine_impl.h"
#include "engine_util.h"
#include "testutil.h"

/* The largest |got - ref| over rows, each relative to the row's max |ref|; top-token
 * disagreements counted where ref's two candidates are further apart than the row's
 * difference could move them (twice its largest |got - ref|: one up, one down). */
static double rel_diff(const float *got, const float *ref, size_t rows, int nv, int *top_miss) {
    double worst = 0;
    int miss = 0;
    for (size_t i = 0; i < rows && got && ref; i++) {
        const float *g = got + i * nv, *r = ref + i * nv;
        double amax = 0, d = 0;
        for (int j = 0; j < nv; j++) {
            amax = fmax(amax, fabs(r[j]));
            d = isnan(g[j]) ? INFINITY : fmax(d, fabs((double)g[j] - r[j]));
        }
        const double rd = d / (amax > 0 ? amax : 1);
        worst = fmax(worst, rd);
        const int tg = test_argmax(g, nv), tr = test_argmax(r, nv);
        if (tg != tr && fabs(r[tr] - r[tg]) > 2 * d) miss++;
    }
    if (top_miss) *top_miss = miss;
    return got && ref ? worst : INFINITY;
}

/* The golden comparison of one adapter case on the GPU (prefill), then decode against it, and
 * with greedy the continuation decoded on the GPU against llama.cpp's (float weights only:
 * on quantized ones the int8 activations of the GPU's decode kernels make near ties flip). */
static void golden_case(cera_engine *e, const char *name, const test_attach *at, int n_at, double tol,
                        bool greedy) {
    const int nv = cera_engine_n_vocab(e);
    test_golden g;
    if (!test_golden_load(name, nv, &g)) return;
    float *l = test_session_logits(e, at, n_at, g.tokens, g.n_tokens, false);
    int miss = 0;
    const double d = rel_diff(l, g.logits, g.n_tokens, nv, &miss);
    float *ld = test_session_logits(e, at, n_at, g.tokens, g.n_tokens, true);
    const double dd = rel_diff(ld, l, g.n_tokens, nv, NULL);
    printf("%-26s %3zu positions: %.2e of the row max vs llama.cpp (<= %.0e), top misses %d; decode vs "
           "prefill %.2e\n",
           name, g.n_tokens, d, tol, miss, dd);
    CHECK(d <= tol && miss == 0, "%s: %.3g > %.0e or %d top-token misses", name, d, tol, miss);
    CHECK(dd <= tol, "%s: decode differs from prefill by %.3g", name, dd);
    if (g.greedy && greedy) {
        cera_session *s = NULL;
        cera_error err = {0};
        size_t same = 0;
        if (!cera_session_create(e, NULL, &s, &err)) {
            for (int i = 0; i < n_at; i++) cera_session_set_adapter(s, at[i].a, at[i].scale, &err);
            bool ok = cera_session_eval(s, g.tokens, g.n_tokens, false, &err) == CERA_OK;
            for (size_t i = 0; i < g.n_greedy && ok; i++) {
                const cera_token t = test_argmax(cera_session_logits(s, -1), nv);
                if (t != g.greedy[i]) break;
                same++;
                ok = cera_session_eval(s, &t, 1, false, &err) == CERA_OK;
            }
            cera_session_free(s);
        }
        printf("%-26s greedy: %zu of %zu tokens as llama.cpp\n", name, same, g.n_greedy);
        CHECK(same == g.n_greedy, "%s: greedy departs from llama.cpp at %zu of %zu", name, same, g.n_greedy);
    }
    free(l);
    free(ld);
    test_golden_free(&g);
}

/* One session's life with adapters changing between decode steps, on an engine: the
 * prompt with {a}, 4 steps with {a}, then {a at 0.5}, {b}, {a, b at 0.7}, {} for 3 steps
 * each. Returns every step's logits [4 + 12 rows]. */
#define LIVE_ROWS 16
static float *live_session(cera_engine *e, cera_adapter *a, cera_adapter *b, const int32_t *prompt,
                           size_t n) {
    cera_session *s = NULL;
    cera_error err = {0};
    if (!e || cera_session_create(e, NULL, &s, &err)) return NULL;
    const int nv = cera_engine_n_vocab(e);
    float *out = malloc((size_t)LIVE_ROWS * nv * sizeof(float));
    bool ok =
        out && !cera_session_set_adapter(s, a, 1.0f, &err) && !cera_session_eval(s, prompt, n, false, &err);
    for (int step = 0; step < LIVE_ROWS && ok; step++) {
        if (step == 4) ok = !cera_session_set_adapter(s, a, 0.5f, &err);
        if (step == 7) ok = cera_session_remove_adapter(s, a) && !cera_session_set_adapter(s, b, 1.0f, &err);
        if (step == 10)
            ok = !cera_session_set_adapter(s, a, 1.0f, &err) && !cera_session_set_adapter(s, b, 0.7f, &err);
        if (step == 13) ok = cera_session_remove_adapter(s, NULL);
        const cera_token t = prompt[(size_t)step % n];
        ok = ok && !cera_session_eval(s, &t, 1, false, &err);
        if (ok) memcpy(out + (size_t)step * nv, cera_session_logits(s, -1), (size_t)nv * sizeof(float));
    }
    CHECK(ok, "live session: %s", err.message);
    cera_session_free(s);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

static void stories_cases(void) {
    cera_engine *e = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CUDA),
                *c = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CPU);
    cera_adapter *a = test_load_adapter(e, "golden/lora-stories-a.gguf"),
                 *b = test_load_adapter(e, "golden/lora-stories-b.gguf"),
                 *pa = test_load_adapter(e, "golden/lora-stories-a.peft"),
                 *pb = test_load_adapter(e, "golden/lora-stories-b.peft"),
                 *ca = test_load_adapter(c, "golden/lora-stories-a.gguf"),
                 *cb = test_load_adapter(c, "golden/lora-stories-b.gguf");
    if (!e || !c || !a || !b || !pa || !pb || !ca || !cb) goto out;
    const int nv = cera_engine_n_vocab(e);
    {
        const test_attach a1[1] = {{a, 1.0f}}, ah[1] = {{a, 0.5f}}, ab[2] = {{a, 1.0f}, {b, 0.7f}};
        golden_case(e, "stories260K.lora-a", a1, 1, 5e-3, true);
        golden_case(e, "stories260K.lora-a-half", ah, 1, 5e-3, true);
        golden_case(e, "stories260K.lora-a-b", ab, 2, 5e-3, true);
    }
    test_golden g;
    if (!test_golden_load("stories260K.lora-a-b", nv, &g)) goto out;
    {
        const size_t n = g.n_tokens, nf = n * (size_t)nv;
        const test_attach ab[2] = {{a, 1.0f}, {b, 0.7f}}, pab[2] = {{pa, 1.0f}, {pb, 0.7f}};
        const test_attach z[2] = {{a, 0.0f}, {b, 0.0f}};
        float *l = test_session_logits(e, ab, 2, g.tokens, n, false),
              *lp = test_session_logits(e, pab, 2, g.tokens, n, false);
        float *l0 = test_session_logits(e, NULL, 0, g.tokens, n, false),
              *lz = test_session_logits(e, z, 2, g.tokens, n, false);
        float *d0 = test_session_logits(e, NULL, 0, g.tokens, n, true),
              *dz = test_session_logits(e, z, 2, g.tokens, n, true);
        CHECK(test_same_bits(l, lp, nf), "PEFT twins give other logits than the GGUF adapters on the GPU");
        CHECK(test_same_bits(l0, lz, nf) && test_same_bits(d0, dz, nf),
              "scale 0 differs from no adapter on the GPU");
        const double moved = rel_diff(l, l0, n, nv, NULL);
        printf("stories a+b: PEFT == GGUF bits, scale 0 == none bits (prefill and decode); adapters move the "
               "logits by %.2e\n",
               moved);
        CHECK(moved > 1e-2, "the adapters hardly change the logits (%.3g)", moved);
        free(l), free(lp), free(l0), free(lz), free(d0), free(dz);
    }
    {
        float *lg = live_session(e, a, b, g.tokens, g.n_tokens),
              *lc = live_session(c, ca, cb, g.tokens, g.n_tokens);
        int miss = 0;
        const double d = rel_diff(lg, lc, LIVE_ROWS, nv, &miss);
        printf(
            "live session (attach, rescale, swap, stack, detach between decode steps): GPU vs CPU %.2e, top "
            "misses %d\n",
            d, miss);
        CHECK(d <= 5e-3 && miss == 0, "live session: GPU vs CPU %.3g, %d top misses", d, miss);
        free(lg), free(lc);
    }
    test_golden_free(&g);
out:
    cera_adapter_free(a), cera_adapter_free(b), cera_adapter_free(pa), cera_adapter_free(pb);
    cera_adapter_free(ca), cera_adapter_free(cb);
    cera_engine_close(e);
    cera_engine_close(c);
}

static void synth_case(const char *type, float scale, double tol) {
    char model[128], name[128];
    snprintf(model, sizeof model, "golden/synth-llama-%s.gguf", type);
    snprintf(name, sizeof name, "synth-llama-%s.lora", type);
    cera_engine *e = test_open_engine(model, CERA_DEVICE_CUDA);
    cera_adapter *a = test_load_adapter(e, "golden/lora-synth-llama.gguf"),
                 *p = test_load_adapter(e, "golden/lora-synth-llama.peft");
    if (e && a && p) {
        const test_attach at[1] = {{a, scale}}, pt[1] = {{p, scale}};
        golden_case(e, name, at, 1, tol, !strcmp(type, "f32"));
        test_golden g;
        if (test_golden_load(name, cera_engine_n_vocab(e), &g)) {
            float *l = test_session_logits(e, at, 1, g.tokens, g.n_tokens, false),
                  *lp = test_session_logits(e, pt, 1, g.tokens, g.n_tokens, false);
            CHECK(test_same_bits(l, lp, g.n_tokens * (size_t)cera_engine_n_vocab(e)),
                  "%s: PEFT != GGUF on the GPU", name);
            free(l), free(lp);
            test_golden_free(&g);
        }
    }
    cera_adapter_free(a), cera_adapter_free(p);
    cera_engine_close(e);
}

/* An architecture's adapter on every projection (tests/lora/data, made for the synthetic
 * models; bench/cuda/pack.sh carries them to the device under golden/): the GPU against
 * the CPU backend, prefill and decode, on the Q8_0 file (the F32 one does not travel to
 * the device). LFM2's adapter includes the short convolutions' in_proj/out_proj; Gemma 3's
 * goes through its sliding and global layers and post-branch norms. Top-token misses up to
 * max_miss (Gemma 3's random model has near ties: test_cuda_golden). */
static void arch_case(const char *model, const char *adapter, double tol, int max_miss) {
    char gpath[256], lpath[512], mpath[256];
    snprintf(gpath, sizeof gpath, "golden/%s", adapter);
    snprintf(lpath, sizeof lpath, "%s/tests/lora/data/%s", CERA_SOURCE_DIR, adapter);
    snprintf(mpath, sizeof mpath, "golden/%s.gguf", model);
    const char *path = file_exists(shared_path(gpath)) ? shared_path(gpath) : lpath;
    cera_engine *g = test_open_engine(mpath, CERA_DEVICE_CUDA), *c = test_open_engine(mpath, CERA_DEVICE_CPU);
    cera_adapter *ag = NULL, *ac = NULL;
    cera_error err = {0};
    CHECK(g && cera_adapter_load(g, path, &ag, &err) == CERA_OK, "%s: %s", path, err.message);
    CHECK(c && cera_adapter_load(c, path, &ac, &err) == CERA_OK, "%s: %s", path, err.message);
    test_golden gd;
    if (ag && ac && test_golden_load(model, cera_engine_n_vocab(g), &gd)) {
        const int nv = cera_engine_n_vocab(g);
        const test_attach atg[1] = {{ag, 1.0f}}, atc[1] = {{ac, 1.0f}};
        float *lg = test_session_logits(g, atg, 1, gd.tokens, gd.n_tokens, false),
              *ldg = test_session_logits(g, atg, 1, gd.tokens, gd.n_tokens, true),
              *lc = test_session_logits(c, atc, 1, gd.tokens, gd.n_tokens, false),
              *l0 = test_session_logits(g, NULL, 0, gd.tokens, gd.n_tokens, false);
        int miss = 0;
        const double d = rel_diff(lg, lc, gd.n_tokens, nv, &miss),
                     dd = rel_diff(ldg, lc, gd.n_tokens, nv, NULL),
                     effect = rel_diff(l0, lc, gd.n_tokens, nv, NULL);
        printf("%-19s + lora %3zu positions: GPU vs CPU %.2e (decode %.2e), top misses %d; the adapter moves "
               "the logits by %.2e\n",
               model, gd.n_tokens, d, dd, miss, effect);
        CHECK(d <= tol && dd <= tol && miss <= max_miss,
              "%s + lora: GPU vs CPU %.3g (decode %.3g), %d misses", model, d, dd, miss);
        CHECK(effect > 4 * d, "%s + lora: the adapter's effect (%.3g) is not far above the GPU/CPU gap",
              model, effect);
        free(lg), free(ldg), free(lc), free(l0);
        test_golden_free(&gd);
    }
    cera_adapter_free(ag), cera_adapter_free(ac);
    cera_engine_close(g);
    cera_engine_close(c);
}

/* Several sequences with different adapter sets in one batch (internal API, as
 * test_lora_batch): each row against its sequence run alone on the GPU. */
#define N_SEQ 4
static void mixed_batch(void) {
    cera_engine *e = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CUDA);
    cera_adapter *a = test_load_adapter(e, "golden/lora-stories-a.gguf"),
                 *b = test_load_adapter(e, "golden/lora-stories-b.peft");
    size_t n1 = 0, n2 = 0, n3 = 0;
    int32_t *t1 = read_ints(shared_path("golden/stories260K.p1.tokens"), &n1);
    int32_t *t2 = read_ints(shared_path("golden/stories260K.p2.tokens"), &n2);
    int32_t *t3 = read_ints(shared_path("golden/stories260K.p3.tokens"), &n3);
    cera_session *s[N_SEQ] = {0};
    cera_error err = {0};
    if (!e || !a || !b || !t1 || !t2 || !t3 || n2 < 16 || n3 < 20) {
        CHECK(0, "mixed batch: inputs missing");
        goto out;
    }
    const int32_t *tok[N_SEQ] = {t1, t2, t3, t2};
    const int len[N_SEQ] = {(int)n1, 16, 20, 12};
    for (int i = 0; i < N_SEQ; i++)
        CHECK(!cera_session_create(e, NULL, &s[i], &err), "session: %s", err.message);
    CHECK(!cera_session_set_adapter(s[0], a, 1.0f, &err), "set");
    CHECK(!cera_session_set_adapter(s[1], b, 0.7f, &err) && !cera_session_set_adapter(s[1], a, 0.3f, &err),
          "set");
    CHECK(!cera_session_set_adapter(s[3], a, -0.5f, &err), "set");
    const int nv = cera_engine_n_vocab(e);
    float *solo[N_SEQ], *bare[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        solo[i] = malloc((size_t)len[i] * nv * sizeof(float));
        CHECK(!cera_session_eval(s[i], tok[i], (size_t)len[i], true, &err), "solo: %s", err.message);
        for (int p = 0; p < len[i]; p++)
            memcpy(solo[i] + (size_t)p * nv, cera_session_logits(s[i], p), nv * 4);
        cera_session_truncate(s[i], 0, &err);
        bare[i] = test_session_logits(e, NULL, 0, tok[i], (size_t)len[i], false);
    }
    /* The sessions' own sequences in the engine's pool, their rows interleaved round robin
     * (cera_batch_eval keeps each session's rows together; this is the harder grouping). */
    test_mixed mx;
    if (!test_mixed_make(N_SEQ, tok, len, &mx)) goto out;
    const int n = mx.n;
    const int32_t *pos = mx.pos, *seq = mx.seq;
    cera_kv_seq *seqs[N_SEQ];
    const cera_lora_set *sets[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        cera_kv_copy copy[CERA_KV_GROUPS];
        int n_copy = 0;
        CHECK(!cera_kv_seq_reserve(&s[i]->seq, len[i], copy, &n_copy, &err), "reserve: %s", err.message);
        seqs[i] = &s[i]->seq;
        sets[i] = &s[i]->lora;
    }
    cera_lora_batch plan;
    CHECK(!cera_lora_batch_init(&plan, n, &err), "plan");
    cera_lora_batch_build(&plan, seq, sets, n);
    const cera_batch batch = {.n_tokens = n,
                              .token = mx.tok,
                              .pos = pos,
                              .seq = seq,
                              .want_logits = mx.want,
                              .seqs = seqs,
                              .n_seqs = N_SEQ,
                              .lora = &plan};
    float *out = malloc((size_t)n * nv * sizeof(float));
    CHECK(!e->backend->forward(e->backend, &batch, out, &err), "mixed forward: %s", err.message);
    double worst = 0, nearest_bare = INFINITY;
    for (int r = 0; r < n; r++) {
        const float *ref = solo[seq[r]] + (size_t)pos[r] * nv;
        worst = fmax(worst, rel_diff(out + (size_t)r * nv, ref, 1, nv, NULL));
        if (seq[r] != 2 && pos[r] > 0)
            nearest_bare = fmin(nearest_bare, rel_diff(out + (size_t)r * nv,
                                                       bare[seq[r]] + (size_t)pos[r] * nv, 1, nv, NULL));
    }
    printf("mixed batch of %d rows, %d sequences, %d adapter groups: rows vs solo runs %.2e; adapted rows vs "
           "no adapter >= %.2e\n",
           n, N_SEQ, plan.n_groups, worst, nearest_bare);
    CHECK(worst <= 5e-3, "mixed batch rows differ from their solo runs by %.3g", worst);
    CHECK(nearest_bare > 10 * worst, "adapted rows too close to the unadapted ones (%.3g)", nearest_bare);
    cera_lora_batch_free(&plan);
    free(out);
    test_mixed_free(&mx);
    for (int i = 0; i < N_SEQ; i++) free(solo[i]), free(bare[i]);
out:
    for (int i = 0; i < N_SEQ; i++) cera_session_free(s[i]);
    cera_adapter_free(a), cera_adapter_free(b);
    free(t1), free(t2), free(t3);
    cera_engine_close(e);
}

/* Argument "stories": the stories260K cases and the mixed batch only (for compute-sanitizer). */
int main(int argc, char **argv) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    const bool all = argc < 2 || strcmp(argv[1], "stories") != 0;
    stories_cases();
    if (all) {
        synth_case("f32", 1.0f, 5e-3);
        synth_case("q4_0", 1.0f, 5e-2);
        synth_case("q4_k_m", 0.75f, 5e-2);
        arch_case("synth-lfm2-q8_0", "lfm2-lora.gguf", 1e-1, 0);
        arch_case("synth-gemma3-q8_0", "gemma3-lora.gguf", 1e-1, 3);
    }
    mixed_batch();
    return test_finish();
}

/*
 * test_lora_moe.c — a runtime LoRA adapter on the routed experts of lfm2moe against llama.cpp.
 * The adapter (tests/model/data/lfm2moe/README.md says how it and llama.cpp's outputs were made)
 * targets, in both MoE blocks 1 and 3, the router (ffn_gate_inp) and the three expert tensors
 * (ffn_{gate,up,down}_exps, 3-D factors: one pair per expert), plus one ordinary projection per
 * block (attn_q, shortconv.out_proj). Cases: the F32 model at scale 1 and the Q8_0 model at
 * scale 0.5 (the synth_models fixture's files). Per position the logits are within 1e-3 (F32)
 * or 6e-2 (Q8_0) of the row's max |logit| (test_golden's bounds; measured 2.0e-6 and 0), the
 * top token everywhere, the greedy continuation llama.cpp's token for token; prefill equals
 * decode bit for bit; a batch of the adapted sequence and a plain one equals each alone; scale
 * 0 is no adapter.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "engine_util.h"
#include "testutil.h"

#define ADAPTER "data/lfm2moe/lora.gguf"

static void check_case(const char *model, const char *name, float scale, double tol) {
    cera_engine *e = test_open_engine(model, CERA_DEVICE_CPU);
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
    double worst = 0;
    size_t top = 0;
    for (size_t i = 0; got && i < n; i++) {
        double m = 0, d = 0;
        for (int j = 0; j < nv; j++) {
            m = fmax(m, fabs(g.logits[i * nv + j]));
            const double x = fabs((double)got[i * nv + j] - g.logits[i * nv + j]);
            d = isnan(x) ? INFINITY : fmax(d, x);
        }
        worst = fmax(worst, d / m);
        top += test_argmax(got + i * nv, nv) == test_argmax(g.logits + i * nv, nv);
    }
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
    CHECK(got && worst <= tol && top == n, "%s: logits differ from llama.cpp's by %.3g (top %zu/%zu)", name,
          worst, top, n);
    CHECK(g.greedy && same == g.n_greedy, "%s: greedy departs from llama.cpp at token %zu", name, same);
    CHECK(test_same_bits(got, dec, n * (size_t)nv), "%s: decode logits differ from prefill logits", name);
    CHECK(test_same_bits(plain, zero, n * (size_t)nv), "%s: scale 0 differs from no adapter", name);
    CHECK(plain && got && !test_same_bits(plain, got, n * (size_t)nv), "%s: the adapter changed nothing",
          name);

    /* one batch: the adapted sequence and a plain one, each as alone */
    cera_session *sa = NULL, *sb = NULL;
    const bool made = !cera_session_create(e, NULL, &sa, &err) && !cera_session_create(e, NULL, &sb, &err) &&
                      !cera_session_set_adapter(sa, a, scale, &err);
    const cera_batch_item items[2] = {{sa, g.tokens, n, true}, {sb, g.tokens + 5, n - 5, true}};
    CHECK(made && !cera_batch_eval(e, items, 2, &err), "%s: batch: %s", name, err.message);
    int bad = 0;
    for (size_t i = 0; made && got && i < n; i++)
        bad += !test_same_bits(cera_session_logits(sa, (int)i), got + i * nv, (size_t)nv);
    float *plain5 = test_session_logits(e, NULL, 0, g.tokens + 5, n - 5, false);
    for (size_t i = 0; made && plain5 && i < n - 5; i++)
        bad += !test_same_bits(cera_session_logits(sb, (int)i), plain5 + i * nv, (size_t)nv);
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

int main(void) {
    check_case("synth/lfm2moe-f32.gguf", "data/lfm2moe/lora-f32.p1", 1.0f, 1e-3);
    check_case("synth/lfm2moe-q8_0.gguf", "data/lfm2moe/lora-q8_0.p1", 0.5f, 6e-2);
    return test_finish();
}

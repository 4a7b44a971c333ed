/*
 * test_cuda_moe.c — lfm2moe (routed experts, model/graph.h CERA_OP_MOE) and the CUDA backend,
 * which has no MoE kernels yet: asking for the CUDA device must fail with a status and a message
 * naming the experts, never run something else; the default device (auto) must fall back to the
 * CPU and match llama.cpp's golden there (tests/model/data/lfm2moe, the synth_models fixture's
 * model) at test_golden's bound for quantized weights (6e-2 of the row's max |logit|, the top
 * token at every position). Exits 77 without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "cera.h"
#include "testutil.h"

int main(void) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    const char *model = shared_path("synth/lfm2moe-q8_0.gguf");
    cera_engine_params ep = cera_engine_default_params();
    ep.n_ctx = 512;
    ep.device = CERA_DEVICE_CUDA;
    cera_engine *e = NULL;
    cera_error err = {0};
    const cera_status st = cera_engine_open(model, &ep, &e, &err);
    CHECK(st == CERA_ERR_UNSUPPORTED && strstr(err.message, "MoE"), "device cuda: status %d (%s)", (int)st,
          err.message);
    cera_engine_close(e);
    e = NULL;

    ep.device = CERA_DEVICE_AUTO;
    ep.n_threads = 1;
    CHECK(cera_engine_open(model, &ep, &e, &err) == CERA_OK, "device auto: %s", err.message);
    size_t n_tok = 0, n_bytes = 0;
    int32_t *tok = read_ints(golden_path("data/lfm2moe/q8_0.p1", "tokens"), &n_tok);
    float *ref = read_file(golden_path("data/lfm2moe/q8_0.p1", "logits.f32"), &n_bytes);
    cera_session *s = NULL;
    if (e && tok && ref && cera_session_create(e, NULL, &s, &err) == CERA_OK &&
        cera_session_eval(s, tok, n_tok, true, &err) == CERA_OK) {
        const int nv = cera_engine_n_vocab(e);
        CHECK(n_bytes == n_tok * (size_t)nv * sizeof(float), "golden size");
        double worst = 0;
        size_t top_ok = 0;
        for (size_t i = 0; i < n_tok && n_bytes == n_tok * (size_t)nv * sizeof(float); i++) {
            const float *l = cera_session_logits(s, (int)i), *r = ref + i * (size_t)nv;
            double mx = 0, d = 0;
            int a = 0, b = 0;
            for (int v = 0; v < nv; v++) {
                mx = fmax(mx, fabs(r[v]));
                d = fmax(d, fabs((double)l[v] - r[v]));
                if (l[v] > l[a]) a = v;
                if (r[v] > r[b]) b = v;
            }
            worst = fmax(worst, d / mx);
            top_ok += a == b;
        }
        printf("lfm2moe q8_0 p1 on the auto device: max rel %.3g, top %zu/%zu\n", worst, top_ok, n_tok);
        CHECK(worst <= 6e-2 && top_ok == n_tok, "auto device: max rel %.3g, top %zu/%zu", worst, top_ok,
              n_tok);
    } else {
        CHECK(false, "auto device: eval failed: %s", err.message);
    }
    cera_session_free(s);
    cera_engine_close(e);
    free(tok);
    free(ref);
    return test_finish();
}

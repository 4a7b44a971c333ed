/*
 * test_cuda_embed.c — embeddings on the CUDA backend against the CPU backend's (which
 * test_embed checks against llama-embedding): stories260K with and without an adapter and
 * SmolLM2-135M Q4_1 when present; per-token hidden states (no normalization: the raw values)
 * and mean/last pooling, a batch of texts of mixed lengths, a one-token text (the GPU's
 * single-token path), and a session that generates after another embedded (the output step
 * back to logits: the same logits as on a fresh engine). Every vector's cosine with the CPU's
 * >= 0.999 and its norm within 1e-2 (the GPU's matmuls round differently: test_cuda_golden's
 * bounds). Exits 77 without a GPU.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "cera.h"
#include "testutil.h"

static const char *const texts[] = {"Once upon a time, there was a little girl named Lily.", "Hi",
                                    "She liked to play with her big red ball every day in the park."};
#define N_TEXTS 3

static cera_engine *open_engine(const char *path, cera_device dev) {
    cera_engine_params ep = cera_engine_default_params();
    ep.device = dev;
    ep.n_threads = 4;
    ep.n_ctx = 256;
    cera_engine *e = NULL;
    cera_error err;
    CHECK(cera_engine_open(path, &ep, &e, &err) == CERA_OK, "%s: %s", path, err.message);
    return e;
}

/* The texts' embeddings (plus the single token 1 as a fourth input when one_token). */
static float *embed(cera_engine *e, const char *lora, cera_pooling pooling, int norm, size_t *n_vec) {
    cera_error err;
    cera_adapter *ad = NULL;
    if (lora) CHECK(cera_adapter_load(e, lora, &ad, &err) == CERA_OK, "adapter: %s", err.message);
    const int d = cera_engine_n_embd(e);
    cera_token tok[N_TEXTS + 1][256];
    size_t n[N_TEXTS + 1], total = 0;
    for (int i = 0; i < N_TEXTS; i++) {
        cera_tokenize(e, texts[i], strlen(texts[i]), true, true, tok[i], 256, &n[i], &err);
        total += n[i];
    }
    tok[N_TEXTS][0] = 1;
    n[N_TEXTS] = 1;
    total += 1;
    *n_vec = pooling == CERA_POOLING_NONE ? total : N_TEXTS + 1;
    float *v = calloc(*n_vec * (size_t)d, sizeof(float));
    cera_session *s[N_TEXTS + 1];
    cera_batch_item it[N_TEXTS + 1];
    float *out[N_TEXTS + 1];
    size_t off = 0;
    for (int i = 0; i <= N_TEXTS; i++) {
        cera_session_create(e, NULL, &s[i], &err);
        if (ad) cera_session_set_adapter(s[i], ad, 1.0f, &err);
        it[i] = (cera_batch_item){s[i], tok[i], n[i], false, 0};
        out[i] = v + off * (size_t)d;
        off += pooling == CERA_POOLING_NONE ? n[i] : 1;
    }
    /* the three texts together, the single token alone */
    CHECK(cera_batch_embed(e, it, N_TEXTS, pooling, norm, out, &err) == CERA_OK, "embed: %s", err.message);
    CHECK(cera_batch_embed(e, it + N_TEXTS, 1, pooling, norm, out + N_TEXTS, &err) == CERA_OK,
          "embed one token: %s", err.message);
    for (int i = 0; i <= N_TEXTS; i++) cera_session_free(s[i]);
    cera_adapter_free(ad);
    return v;
}

static double dot(const float *a, const float *b, int d) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)a[i] * b[i];
    return s;
}

static void compare(const char *what, const float *g, const float *c, size_t n_vec, int d) {
    double worst = 1, worst_norm = 0;
    for (size_t j = 0; j < n_vec; j++) {
        const float *a = g + j * d, *b = c + j * d;
        const double na = sqrt(dot(a, a, d)), nb = sqrt(dot(b, b, d));
        const double cs = na > 0 && nb > 0 ? dot(a, b, d) / (na * nb) : 0;
        worst = fmin(worst, isnan(cs) ? 0 : cs);
        worst_norm = fmax(worst_norm, nb > 0 ? fabs(na / nb - 1) : 1);
    }
    CHECK(worst >= 0.999, "%s: worst cosine %.6f < 0.999", what, worst);
    CHECK(worst_norm <= 1e-2, "%s: norm off by %.3g", what, worst_norm);
    printf("%-34s %4zu vectors: worst cosine %.7f, norm off by %.2g\n", what, n_vec, worst, worst_norm);
}

static void model_case(const char *name, const char *path, const char *lora) {
    if (!file_exists(path)) {
        printf("%s: skipped (no %s)\n", name, path);
        return;
    }
    cera_engine *g = open_engine(path, CERA_DEVICE_CUDA), *c = open_engine(path, CERA_DEVICE_CPU);
    if (!g || !c) {
        cera_engine_close(g);
        cera_engine_close(c);
        return;
    }
    const int d = cera_engine_n_embd(g);
    static const struct {
        cera_pooling p;
        int norm;
        const char *what;
    } modes[] = {
        {CERA_POOLING_NONE, -1, "none, raw"}, {CERA_POOLING_MEAN, 2, "mean"}, {CERA_POOLING_LAST, 2, "last"}};
    for (int m = 0; m < 3; m++) {
        size_t ng = 0, nc = 0;
        float *vg = embed(g, lora, modes[m].p, modes[m].norm, &ng),
              *vc = embed(c, lora, modes[m].p, modes[m].norm, &nc);
        char what[128];
        snprintf(what, sizeof what, "%s %s", name, modes[m].what);
        CHECK(ng == nc, "%s: %zu vs %zu vectors", what, ng, nc);
        if (ng == nc) compare(what, vg, vc, ng, d);
        free(vg);
        free(vc);
    }
    /* a session that generates after the embeddings: the logits of a fresh engine */
    cera_engine *f = open_engine(path, CERA_DEVICE_CUDA);
    cera_error err;
    cera_token tok[64];
    size_t n = 0;
    cera_tokenize(g, texts[0], strlen(texts[0]), true, true, tok, 64, &n, &err);
    cera_session *a = NULL, *b = NULL;
    cera_session_create(g, NULL, &a, &err);
    cera_session_create(f, NULL, &b, &err);
    CHECK(cera_session_eval(a, tok, n, false, &err) == CERA_OK, "eval after embeddings: %s", err.message);
    CHECK(cera_session_eval(b, tok, n, false, &err) == CERA_OK, "eval: %s", err.message);
    const float *la = cera_session_logits(a, -1), *lb = cera_session_logits(b, -1);
    CHECK(la && lb && !memcmp(la, lb, (size_t)cera_engine_n_vocab(g) * sizeof(float)),
          "%s: logits after embeddings differ from a fresh engine's", name);
    const cera_token ta = cera_session_sample(a), tb = cera_session_sample(b);
    CHECK(ta == tb, "%s: decode after embeddings %d vs %d", name, ta, tb);
    cera_session_free(a);
    cera_session_free(b);
    cera_engine_close(f);
    cera_engine_close(g);
    cera_engine_close(c);
}

int main(void) {
    if (!cera_cuda_available()) {
        printf("no CUDA device: skipped\n");
        return TEST_SKIP_CODE;
    }
    model_case("stories260K", shared_path("models/stories260K.gguf"), NULL);
    model_case("stories260K lora-a", shared_path("models/stories260K.gguf"),
               shared_path("golden/lora-stories-a.gguf"));
    model_case("smollm2", models_path("SmolLM2-135M-Instruct.Q4_1.gguf"), NULL);
    return test_finish();
}

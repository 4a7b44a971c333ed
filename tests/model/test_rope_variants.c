/*
 * test_rope_variants.c — rotary-embedding variants the goldens do not cover, against
 * llama.cpp: the synth-llama-f32 golden model rewritten with
 *   llama3  rope.freq_base 500000 and a `rope_freqs.weight` tensor of per-pair factors
 *           (1 for fast pairs, rising to 8 for slow ones, as Llama 3.1 files carry);
 *   linear  rope.scaling.type "linear", factor 2;
 *   yarn    rope.scaling.type "yarn", factor 4, original context 256 (YaRN's ramp and
 *           magnitude correction).
 * The test writes each file (deterministically, with cera's GGUF writer) next to the
 * binary and evaluates the golden prompt; data/rope-<variant>.top holds, per position,
 * llama.cpp's top token and its logit for the same file (llama.cpp 34af94cd, CPU, one
 * thread, F16 KV cache, flash attention; made by running this test once with
 * --write-only and llama.cpp on the written files).
 * Checks: the top token at every position, and its logit equal to the 9 printed digits
 * (1e-6 relative) on the AVX-512 tier, which mirrors the reference build bit for bit; on
 * other tiers the F32 matmuls sum in another order (measured 1e-4), so 1e-3 there.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "cera.h"
#include "compare.h"
#include "gguf/gguf.h"
#include "testutil.h"

typedef enum variant { V_LLAMA3, V_LINEAR, V_YARN, V_COUNT } variant;
static const char *const names[V_COUNT] = {"llama3", "linear", "yarn"};

static const char *out_path(variant v) {
    static char buf[4][1024];
    snprintf(buf[v], sizeof buf[v], "%s/rope-%s.gguf", CERA_BINARY_DIR, names[v]);
    return buf[v];
}

static bool write_variant(const gguf_file *src, variant v) {
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_writer_set_value(w, src->kv[i].key, &src->kv[i].value);
    cera_error err;
    bool ok = true;
    for (uint64_t i = 0; i < src->n_tensors && ok; i++) {
        const gguf_tensor *t = &src->tensors[i];
        char name[128];
        gguf_str_copy(t->name, name, sizeof name);
        ok = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, &err) == CERA_OK;
    }
    float factors[16];
    if (v == V_LLAMA3) {
        gguf_writer_set_f32(w, "llama.rope.freq_base", 500000.0f);
        for (int i = 0; i < 16; i++) factors[i] = i < 6 ? 1.0f : i > 12 ? 8.0f : 1.0f + (float)(i - 6);
        const int64_t ne = 16;
        ok = ok &&
             gguf_writer_add_tensor(w, "rope_freqs.weight", CERA_TYPE_F32, 1, &ne, factors, &err) == CERA_OK;
    } else if (v == V_LINEAR) {
        gguf_writer_set_str(w, "llama.rope.scaling.type", "linear");
        gguf_writer_set_f32(w, "llama.rope.scaling.factor", 2.0f);
    } else {
        gguf_writer_set_str(w, "llama.rope.scaling.type", "yarn");
        gguf_writer_set_f32(w, "llama.rope.scaling.factor", 4.0f);
        gguf_writer_set_u32(w, "llama.rope.scaling.original_context_length", 256);
    }
    ok = ok && gguf_writer_write(w, out_path(v), &err) == CERA_OK;
    CHECK(ok, "%s: writing %s: %s", names[v], out_path(v), err.message);
    gguf_writer_free(w);
    return ok;
}

static void check_variant(variant v, const int32_t *tok, size_t n) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/tests/model/data/rope-%s.top", CERA_SOURCE_DIR, names[v]);
    size_t nb = 0;
    char *ref = read_file(rel, &nb);
    CHECK(ref != NULL, "%s: missing %s", names[v], rel);
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CPU; /* these compare with llama.cpp CPU outputs */
    ep.n_threads = 1;
    ep.n_ctx = 128;
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_error err;
    CHECK(cera_engine_open(out_path(v), &ep, &e, &err) == CERA_OK, "%s: open: %s", names[v], err.message);
    if (!ref || !e || cera_session_create(e, NULL, &s, &err) || cera_session_eval(s, tok, n, true, &err)) {
        CHECK(false, "%s: eval", names[v]);
        goto done;
    }
    const int nv = cera_engine_n_vocab(e);
    char *p = ref;
    int top_ok = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        char *end;
        const long id = strtol(p, &end, 10);
        const double want = strtod(end, &p);
        const float *l = cera_session_logits(s, (int)i);
        if (end == p || id < 0 || id >= nv) break;
        top_ok += argmax_f32(l, nv) == id;
        const double d = fabs((double)l[id] - want) / fmax(fabs(want), 1e-6);
        if (d > worst) worst = d;
    }
    printf("%-7s top %d/%zu, worst top-logit difference %.2e\n", names[v], top_ok, n, worst);
    CHECK(top_ok == (int)n, "%s: top token equal at %d/%zu positions", names[v], top_ok, n);
    CHECK(worst <= (strcmp(cera_cpu_tier_name(), "avx512") ? 1e-3 : 1e-6),
          "%s: top logits differ by %.3g relative", names[v], worst);
done:
    cera_session_free(s);
    cera_engine_close(e);
    free(ref);
}

int main(int argc, char **argv) {
    const bool write_only = argc > 1 && !strcmp(argv[1], "--write-only");
    gguf_file *src = NULL;
    cera_error err;
    CHECK(gguf_open(shared_path("golden/synth-llama-f32.gguf"), &src, &err) == CERA_OK, "open: %s",
          err.message);
    size_t n = 0;
    int32_t *tok = read_ints(shared_path("golden/synth-llama-f32.tokens"), &n);
    if (src && tok)
        for (int v = 0; v < V_COUNT; v++)
            if (write_variant(src, (variant)v) && !write_only) check_variant((variant)v, tok, n);
    free(tok);
    gguf_close(src);
    return test_finish();
}

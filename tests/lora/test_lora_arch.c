/*
 * test_lora_arch.c — adapters on every supported architecture (the synthetic llama,
 * qwen2 with QKV biases, qwen3 with Q/K norms, granite with its multipliers): a random
 * rank-48 adapter on all seven projections (F16 factors, written here as a llama.cpp GGUF
 * adapter) applied unmerged must give the logits of the same adapter merged into an F32
 * copy of the model (phi3: one pair per fused tensor, attn_qkv and ffn_up, as llama.cpp
 * names them; cera splits it over the tensor's parts). Since merging changes the weights themselves, this
 * holds only if the unmerged hook sits where llama.cpp puts it: on each projection's output, before its bias,
 * the Q/K norms and rope. Also: prefill and decode give the same bits with the adapter (the CPU hook's
 * pooled, single-run and serial paths all meet here).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"
#include "engine_util.h"
#include "engine/engine_impl.h"
#include "testutil.h"

#define RANK 48 /* large enough that the CPU hook uses the thread pool on the wide projections */

/* The weight the adapter pair of projection wt targets: wt itself, or (a row range of a
 * fused tensor) the whole tensor for its first part and NULL for the others. */
static bool target(const cera_weight *wt, cera_weight *out, char *name, size_t cap, int l, cera_proj p) {
    *out = *wt;
    snprintf(name, cap, "blk.%d.%s.weight", l, cera_proj_name(p));
    if (!wt->t || (wt->row0 == 0 && wt->n == wt->t->ne[1])) return true;
    if (wt->row0) return false;
    out->n = wt->t->ne[1];
    gguf_str_copy(wt->t->name, name, cap);
    return true;
}

/* Writes a random adapter for the engine's model; returns false on failure. */
static bool write_adapter(const cera_engine *e, const char *path, test_rng *r) {
    const cera_model *m = &e->model;
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", cera_arch_name(m->hp.arch));
    gguf_writer_set_str(w, "general.type", "adapter");
    gguf_writer_set_str(w, "adapter.type", "lora");
    gguf_writer_set_f32(w, "adapter.lora.alpha", 16.0f);
    size_t n = 0;
    for (int l = 0; l < m->hp.n_layer; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++)
            if (m->layers[l].proj[p].data)
                n += (size_t)RANK * (size_t)(m->layers[l].proj[p].k + m->layers[l].proj[p].t->ne[1]);
    uint16_t *data = malloc(n * sizeof *data), *at = data;
    cera_error err = {0};
    bool ok = true;
    for (int l = 0; l < m->hp.n_layer && ok; l++)
        for (int p = 0; p < CERA_PROJ_COUNT && ok; p++) {
            if (!m->layers[l].proj[p].data) continue; /* a projection this architecture's layer lacks */
            cera_weight tw;
            const cera_weight *wt = &tw;
            char base[96], name[128];
            if (!target(&m->layers[l].proj[p], &tw, base, sizeof base, l, (cera_proj)p)) continue;
            const int64_t ne_a[2] = {wt->k, RANK}, ne_b[2] = {RANK, wt->n};
            for (int64_t i = 0; i < RANK * (wt->k + wt->n); i++)
                at[i] = cera_f32_to_f16(0.05f * test_rng_normal(r));
            snprintf(name, sizeof name, "%s.lora_a", base);
            ok = !gguf_writer_add_tensor(w, name, CERA_TYPE_F16, 2, ne_a, at, &err);
            at += RANK * wt->k;
            snprintf(name, sizeof name, "%s.lora_b", base);
            ok = ok && !gguf_writer_add_tensor(w, name, CERA_TYPE_F16, 2, ne_b, at, &err);
            at += RANK * wt->n;
        }
    ok = ok && !gguf_writer_write(w, path, &err);
    CHECK(ok, "writing %s: %s", path, err.message);
    gguf_writer_free(w);
    free(data);
    return ok;
}

/* Logits of every position with adapter a (or none) at scale 1 (engine_util). */
static float *eval(cera_engine *e, cera_adapter *a, const int32_t *tok, size_t n, bool one_by_one) {
    const test_attach at = {a, 1.0f};
    return test_session_logits(e, &at, a ? 1 : 0, tok, n, one_by_one);
}

static void arch_case(const char *arch, test_rng *r) {
    char model[128], tokens[128], adapter[256], merged[256];
    snprintf(model, sizeof model, "golden/synth-%s-f32.gguf", arch);
    snprintf(tokens, sizeof tokens, "golden/synth-%s-f32.tokens", arch);
    snprintf(adapter, sizeof adapter, "%s/lora_arch_%s_%d.gguf", CERA_BINARY_DIR, arch, (int)getpid());
    snprintf(merged, sizeof merged, "%s/lora_arch_%s_%d.merged.gguf", CERA_BINARY_DIR, arch, (int)getpid());
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 128;
    ep.device = CERA_DEVICE_CPU;
    ep.kv_type = CERA_KV_F32; /* no F16 rounding flips between the two runs */
    cera_engine *e = NULL, *em = NULL;
    cera_error err = {0};
    size_t n = 0;
    int32_t *tok = read_ints(shared_path(tokens), &n);
    if (!tok || cera_engine_open(shared_path(model), &ep, &e, &err)) {
        CHECK(0, "%s: %s", model, err.message);
        free(tok);
        return;
    }
    cera_adapter *a = NULL;
    if (write_adapter(e, adapter, r) && !cera_adapter_load(e, adapter, &a, &err)) {
        CHECK(a->n_pairs == 7 * e->model.hp.n_layer, "%s: %d pairs", arch, a->n_pairs);
        cera_adapter *const list[1] = {a};
        const float scale[1] = {1.0f};
        CHECK(!cera_lora_merge(&e->model, list, scale, 1, merged, CERA_TYPE_F32, &err), "%s: merge: %s", arch,
              err.message);
        CHECK(!cera_engine_open(merged, &ep, &em, &err), "%s: merged model: %s", arch, err.message);
    } else {
        CHECK(0, "%s: adapter: %s", arch, err.message);
    }
    if (a && em) {
        const int nv = cera_engine_n_vocab(e);
        float *base = eval(e, NULL, tok, n, false), *unmerged = eval(e, a, tok, n, false),
              *m = eval(em, NULL, tok, n, false), *dec = eval(e, a, tok, n, true);
        CHECK(unmerged && dec && !memcmp(unmerged, dec, n * (size_t)nv * sizeof *dec),
              "%s: decode logits differ from prefill logits with the adapter", arch);
        free(dec);
        double d_merge = 0, d_base = 0, mag = 0;
        int top = 0;
        for (size_t i = 0; base && unmerged && m && i < n; i++) {
            int tu = 0, tm = 0;
            for (int j = 0; j < nv; j++) {
                const size_t k = i * nv + j;
                const double dm = fabs(unmerged[k] - m[k]);
                if (!(dm <= d_merge)) d_merge = isnan(dm) ? INFINITY : dm; // a NaN fails the check
                d_base = fmax(d_base, fabs(unmerged[k] - base[k]));
                mag = fmax(mag, fabs(m[k]));
                if (unmerged[k] > unmerged[i * nv + tu]) tu = j;
                if (m[k] > m[i * nv + tm]) tm = j;
            }
            top += tu == tm;
        }
        printf("%-8s %zu positions: unmerged vs merged max |diff| %.3g (logits up to %.3g; the adapter moved "
               "them "
               "by up to %.3g), same top token at %d\n",
               arch, n, d_merge, mag, d_base, top);
        CHECK(d_merge < 1e-3 * fmax(1.0, mag) && d_base > 100 * d_merge && top == (int)n,
              "%s: unmerged vs merged %g, adapter effect %g, top tokens %d of %zu", arch, d_merge, d_base,
              top, n);
        free(base);
        free(unmerged);
        free(m);
    }
    cera_adapter_free(a);
    cera_engine_close(em);
    cera_engine_close(e);
    unlink(adapter);
    unlink(merged);
    free(tok);
}

int main(void) {
    test_rng r = {0xa4c4};
    arch_case("llama", &r);
    arch_case("qwen2", &r);
    arch_case("qwen3", &r);
    arch_case("granite", &r);
    arch_case("phi3", &r);
    arch_case("gemma3", &r);
    return test_finish();
}

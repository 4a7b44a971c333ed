/*
 * test_longrope.c — Phi-3's LongRoPE: which factors a session gets. synth-phi3-f32 is
 * rewritten (deterministically, with cera's GGUF writer, next to the binary) three times:
 *   longrope  rope_factors_long.weight (per-pair divisors rising from 1 to 4) and
 *             rope_factors_short.weight (1 to 1.5), original context 512;
 *   short     rope_freqs.weight = the short factors;
 *   long      rope_freqs.weight = the long factors;
 * all three with rope.scaling.attn_factor 1.2. As llama.cpp picks them (get_rope_factors),
 * a context of at most the original one takes the short factors and a longer one the long
 * ones, so "longrope" at context 256 must give the logits of "short" bit for bit, and at
 * 1024 those of "long"; and the two must differ. (rope_freqs' divisors and the attention
 * factor are checked against llama.cpp by test_rope_variants and the yarn case; llama.cpp's
 * server cannot return this random model's output, which is not valid UTF-8.)
 *
 * Where a GPU exists (a CUDA build on the device machine), the same holds on the CUDA
 * backend, bit for bit between its own runs, and its logits are those of the CPU within
 * the goldens' CUDA tolerance (test_cuda_golden: 5e-3 for F32, 5e-2 for Q8_0; the device
 * machine gets synth-phi3-q8_0 as the base, the F32 file staying here).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cera.h"
#include "gguf/gguf.h"
#include "testutil.h"

typedef enum variant { V_LONGROPE, V_SHORT, V_LONG, V_COUNT } variant;
static const char *const names[V_COUNT] = {"longrope", "short", "long"};

/* Next to the binary, or in /tmp where that folder is not there (the device machine). */
static const char *out_path(variant v) {
    static char buf[V_COUNT][1024];
    const char *dir = access(CERA_BINARY_DIR, W_OK) == 0 ? CERA_BINARY_DIR : "/tmp";
    snprintf(buf[v], sizeof buf[v], "%s/synth-phi3-%s-%d.gguf", dir, names[v], (int)getpid());
    return buf[v];
}

static bool write_variant(const gguf_file *src, variant v) {
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_writer_set_value(w, src->kv[i].key, &src->kv[i].value);
    gguf_writer_set_u32(w, "phi3.rope.scaling.original_context_length", 512);
    gguf_writer_set_f32(w, "phi3.rope.scaling.attn_factor", 1.2f);
    cera_error err;
    bool ok = true;
    for (uint64_t i = 0; i < src->n_tensors && ok; i++) {
        const gguf_tensor *t = &src->tensors[i];
        char name[128];
        gguf_str_copy(t->name, name, sizeof name);
        ok = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, &err) == CERA_OK;
    }
    float lf[16], sf[16]; /* head size 32: 16 pairs */
    for (int i = 0; i < 16; i++) {
        lf[i] = 1.0f + 3.0f * (float)i / 15.0f;
        sf[i] = 1.0f + 0.5f * (float)i / 15.0f;
    }
    const int64_t ne = 16;
    if (v == V_LONGROPE)
        ok = ok && !gguf_writer_add_tensor(w, "rope_factors_long.weight", CERA_TYPE_F32, 1, &ne, lf, &err) &&
             !gguf_writer_add_tensor(w, "rope_factors_short.weight", CERA_TYPE_F32, 1, &ne, sf, &err);
    else
        ok = ok && !gguf_writer_add_tensor(w, "rope_freqs.weight", CERA_TYPE_F32, 1, &ne,
                                           v == V_LONG ? lf : sf, &err);
    ok = ok && !gguf_writer_write(w, out_path(v), &err);
    CHECK(ok, "writing %s: %s", out_path(v), err.message);
    gguf_writer_free(w);
    return ok;
}

/* The logits of every prompt position with variant v at context n_ctx (malloc'ed), or NULL. */
static float *logits(cera_device dev, variant v, int n_ctx, const int32_t *tok, size_t n, int *nv) {
    cera_engine_params ep = cera_engine_default_params();
    ep.device = dev;
    ep.n_threads = 2;
    ep.n_ctx = n_ctx;
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_error err;
    float *out = NULL;
    if (cera_engine_open(out_path(v), &ep, &e, &err) || cera_session_create(e, NULL, &s, &err) ||
        cera_session_eval(s, tok, n, true, &err)) {
        CHECK(false, "%s at context %d on the %s: %s", names[v], n_ctx,
              dev == CERA_DEVICE_CPU ? "CPU" : "GPU", err.message);
    } else {
        *nv = cera_engine_n_vocab(e);
        out = malloc(n * (size_t)*nv * sizeof *out);
        for (size_t i = 0; out && i < n; i++)
            memcpy(out + i * (size_t)*nv, cera_session_logits(s, (int)i), (size_t)*nv * sizeof *out);
    }
    cera_session_free(s);
    cera_engine_close(e);
    return out;
}

/* Largest |a - b| over a row relative to the row's largest |b|, over all n rows. */
static double max_row_diff(const float *a, const float *b, size_t n, int nv) {
    double worst = 0;
    for (size_t r = 0; r < n; r++) {
        double amax = 0, d = 0;
        for (int i = 0; i < nv; i++) {
            const size_t k = r * (size_t)nv + (size_t)i;
            amax = fmax(amax, fabs(b[k]));
            d = fmax(d, fabs((double)a[k] - b[k]));
        }
        worst = fmax(worst, d / (amax > 0 ? amax : 1));
    }
    return worst;
}

/* The variants' logits on dev: the factors each context takes, bit for bit; kept in out[4]
 * (longrope at 256 and 1024, short, long). */
static bool check_device(cera_device dev, const int32_t *tok, size_t n, int *nv, float *out[4]) {
    const char *where = dev == CERA_DEVICE_CPU ? "CPU" : "GPU";
    out[0] = logits(dev, V_LONGROPE, 256, tok, n, nv);
    out[1] = logits(dev, V_LONGROPE, 1024, tok, n, nv);
    out[2] = logits(dev, V_SHORT, 256, tok, n, nv);
    out[3] = logits(dev, V_LONG, 1024, tok, n, nv);
    if (!out[0] || !out[1] || !out[2] || !out[3]) return false;
    const size_t bytes = n * (size_t)*nv * sizeof(float);
    CHECK(!memcmp(out[0], out[2], bytes), "%s: context 256 (<= 512): not the short factors' logits", where);
    CHECK(!memcmp(out[1], out[3], bytes), "%s: context 1024 (> 512): not the long factors' logits", where);
    CHECK(memcmp(out[0], out[1], bytes) != 0, "%s: the long and short factors give the same logits", where);
    printf("LongRoPE on the %s: context 256 takes the short factors, 1024 the long ones (%zu positions, bit "
           "for bit)\n",
           where, n);
    return true;
}

static bool have_gpu(void) {
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CUDA;
    cera_engine *e = NULL;
    cera_error err;
    if (cera_engine_open(out_path(V_SHORT), &ep, &e, &err) != CERA_OK) {
        printf("no GPU backend here (%s): the GPU half is skipped\n", err.message);
        return false;
    }
    cera_engine_close(e);
    return true;
}

int main(void) {
    gguf_file *src = NULL;
    cera_error err;
    const bool f32 = file_exists(shared_path("golden/synth-phi3-f32.gguf"));
    const char *base = f32 ? "golden/synth-phi3-f32" : "golden/synth-phi3-q8_0";
    char path[256];
    snprintf(path, sizeof path, "%s.gguf", base);
    CHECK(gguf_open(shared_path(path), &src, &err) == CERA_OK, "open: %s", err.message);
    size_t n = 0;
    snprintf(path, sizeof path, "%s.tokens", base);
    int32_t *tok = read_ints(shared_path(path), &n);
    bool ok = src && tok;
    for (int v = 0; v < V_COUNT && ok; v++) ok = write_variant(src, (variant)v);
    if (ok) {
        int nv = 0;
        float *cpu[4] = {0}, *gpu[4] = {0};
        if (check_device(CERA_DEVICE_CPU, tok, n, &nv, cpu) && have_gpu() &&
            check_device(CERA_DEVICE_CUDA, tok, n, &nv, gpu)) {
            // the goldens' CUDA tolerances (test_cuda_golden)
            const double d_short = max_row_diff(gpu[0], cpu[0], n, nv),
                         d_long = max_row_diff(gpu[1], cpu[1], n, nv);
            const double tol = f32 ? 5e-3 : 5e-2;
            CHECK(d_short < tol && d_long < tol, "GPU vs CPU: %.3g (short factors), %.3g (long)", d_short,
                  d_long);
            printf("GPU vs CPU: %.3g (short factors), %.3g (long) of the row max\n", d_short, d_long);
        }
        for (int i = 0; i < 4; i++) {
            free(cpu[i]);
            free(gpu[i]);
        }
    }
    for (int v = 0; v < V_COUNT; v++) remove(out_path((variant)v));
    free(tok);
    gguf_close(src);
    return test_finish();
}

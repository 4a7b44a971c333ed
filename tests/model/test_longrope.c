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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "gguf/gguf.h"
#include "testutil.h"

typedef enum variant { V_LONGROPE, V_SHORT, V_LONG, V_COUNT } variant;
static const char *const names[V_COUNT] = {"longrope", "short", "long"};

static const char *out_path(variant v) {
    static char buf[V_COUNT][1024];
    snprintf(buf[v], sizeof buf[v], "%s/synth-phi3-%s.gguf", CERA_BINARY_DIR, names[v]);
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
static float *logits(variant v, int n_ctx, const int32_t *tok, size_t n, int *nv) {
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CPU;
    ep.n_threads = 2;
    ep.n_ctx = n_ctx;
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_error err;
    float *out = NULL;
    if (cera_engine_open(out_path(v), &ep, &e, &err) || cera_session_create(e, NULL, &s, &err) ||
        cera_session_eval(s, tok, n, true, &err)) {
        CHECK(false, "%s at context %d: %s", names[v], n_ctx, err.message);
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

int main(void) {
    gguf_file *src = NULL;
    cera_error err;
    CHECK(gguf_open(shared_path("golden/synth-phi3-f32.gguf"), &src, &err) == CERA_OK, "open: %s",
          err.message);
    size_t n = 0;
    int32_t *tok = read_ints(shared_path("golden/synth-phi3-f32.tokens"), &n);
    bool ok = src && tok;
    for (int v = 0; v < V_COUNT && ok; v++) ok = write_variant(src, (variant)v);
    if (ok) {
        int nv = 0;
        float *lr_short = logits(V_LONGROPE, 256, tok, n, &nv),
              *lr_long = logits(V_LONGROPE, 1024, tok, n, &nv), *s = logits(V_SHORT, 256, tok, n, &nv),
              *l = logits(V_LONG, 1024, tok, n, &nv);
        const size_t bytes = n * (size_t)nv * sizeof(float);
        if (lr_short && lr_long && s && l) {
            CHECK(!memcmp(lr_short, s, bytes), "context 256 (<= 512): not the short factors' logits");
            CHECK(!memcmp(lr_long, l, bytes), "context 1024 (> 512): not the long factors' logits");
            CHECK(memcmp(lr_short, lr_long, bytes) != 0, "the long and short factors give the same logits");
            printf("LongRoPE: context 256 takes the short factors, 1024 the long ones (%zu positions, bit "
                   "for bit)\n",
                   n);
        }
        free(lr_short);
        free(lr_long);
        free(s);
        free(l);
    }
    for (int v = 0; v < V_COUNT; v++) remove(out_path((variant)v));
    free(tok);
    gguf_close(src);
    return test_finish();
}

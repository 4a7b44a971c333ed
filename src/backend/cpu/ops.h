/*
 * ops.h — the CPU backend's element-wise and row operations (everything but the
 * matmuls and the attention): RMS norm, rotary embedding, SwiGLU and GEGLU, residual adds.
 *
 * Each mirrors the arithmetic of llama.cpp's CPU op (order of operations, where it
 * sums in double), so F32 models agree with llama.cpp to float rounding.
 */
#ifndef CERA_BACKEND_CPU_OPS_H
#define CERA_BACKEND_CPU_OPS_H

#include <stdint.h>

#include "model/model.h"

/* y = x / sqrt(mean(x^2) + eps) * w (w may be NULL); y may alias x. n elements. */
void cera_rms_norm_f32(float *y, const float *x, const float *w, int n, float eps);

/* The rotary embedding's constants for a model, computed once. */
typedef struct cera_rope {
    int n_rot;
    cera_rope_style style;
    float theta_scale; /* base^(-2/n_rot) */
    float freq_scale;
    float ext_factor;
    float attn_factor;
    float corr_dims[2];
    const float *freq_factors; /* [n_rot/2] or NULL */
} cera_rope;

void cera_rope_init(cera_rope *r, const cera_hparams *hp, const float *freq_factors);
/* cache[2i], cache[2i+1] = cos, sin of dimension pair i at position pos ([n_rot] floats). */
void cera_rope_cache(const cera_rope *r, int32_t pos, float *cache);
/* Rotates n_heads consecutive heads of head_dim floats in place with a cache from cera_rope_cache. */
void cera_rope_apply(const cera_rope *r, const float *cache, float *x, int n_heads, int head_dim);

/* exp(x) as llama.cpp's AVX-512 build computes it in SiLU and softmax (ggml_v_expf):
 * within 1.5 ulp of expf; used where the goldens' roundings are mirrored. */
float cera_expf_ggml(float x);

/* y = silu(g) * u, n elements (y may alias g). */
void cera_swiglu_f32(float *y, const float *g, const float *u, int n);

/* Builds the GELU table cera_geglu_f32 reads (once per process; thread-safe). */
void cera_gelu_init(void);
/* y = gelu(g) * u, n elements (y may alias g), GELU's tanh approximation as llama.cpp's CPU
 * computes it: 0 for g <= -10, g for g >= 10, else a table of F16 results indexed by g
 * rounded to F16 (cera_gelu_init first). */
void cera_geglu_f32(float *y, const float *g, const float *u, int n);

/* y += x * s over n elements (s == 1 is a plain add). */
void cera_add_scaled_f32(float *y, const float *x, float s, int n);

#endif

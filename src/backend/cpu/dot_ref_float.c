/*
 * dot_ref_float.c — scalar reference dot products of the float weight types: f32·f32,
 * f16·f16 and bf16·bf16 (the activation row is converted to the weight's type first, as
 * llama.cpp does).
 *
 * Each product is rounded to float and summed in double, as ggml's portable
 * ggml_vec_dot_f32/f16/bf16; SIMD tiers sum in float lanes instead, so they agree with these
 * to the rounding of a float sum (tests/cpu states the bound).
 */
#include "backend/cpu/kernels_impl.h"
#include "core/fp16.h"

void cera_vec_dot_f32_ref(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

void cera_vec_dot_f16_ref(int64_t n, float *s, const void *w, const void *a) {
    const cera_f16 *x = w, *y = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(cera_f16_to_f32(x[i]) * cera_f16_to_f32(y[i]));
    *s = (float)sum;
}

void cera_vec_dot_bf16_ref(int64_t n, float *s, const void *w, const void *a) {
    const cera_bf16 *x = w, *y = a;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(cera_bf16_to_f32(x[i]) * cera_bf16_to_f32(y[i]));
    *s = (float)sum;
}

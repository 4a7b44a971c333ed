/*
 * fp16.h — IEEE half and bfloat16 conversions, bit-exact with ggml's scalar
 * versions (round to nearest even; bf16 keeps NaNs quiet). Used by the reference
 * quantizers, so their bytes must match llama.cpp's.
 */
#ifndef CERA_CORE_FP16_H
#define CERA_CORE_FP16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t cera_f16;
typedef uint16_t cera_bf16;

static inline uint32_t cera_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float cera_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float cera_f16_to_f32(cera_f16 h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = cera_bits_f32((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = cera_bits_f32((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result =
        sign | (two_w < denormalized_cutoff ? cera_f32_bits(denormalized) : cera_f32_bits(normalized));
    return cera_bits_f32(result);
}

static inline cera_f16 cera_f32_to_f16(float f) {
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
    const uint32_t w = cera_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = cera_bits_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = cera_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (cera_f16)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float cera_bf16_to_f32(cera_bf16 h) { return cera_bits_f32((uint32_t)h << 16); }

static inline cera_bf16 cera_f32_to_bf16(float f) {
    uint32_t u = cera_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (cera_bf16)((u >> 16) | 64); /* quiet NaN */
    return (cera_bf16)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

#endif

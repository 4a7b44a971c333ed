/*
 * float.c — the reference rows of the unquantized types: f32 (a copy), f16 and bf16.
 *
 * The conversions are core/fp16.h's, bit-exact with ggml's scalar ones (round to
 * nearest even; NaNs stay NaNs), so an f16 or bf16 file written by `cera quantize`
 * has llama.cpp's bytes.
 */
#include <string.h>

#include "core/fp16.h"
#include "tensor/quant.h"

void cera_dequant_row_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

void cera_quantize_row_f32_ref(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

void cera_dequant_row_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src; /* row data may be unaligned in a file mapping */
    for (int64_t i = 0; i < n; i++) {
        cera_f16 h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = cera_f16_to_f32(h);
    }
}

void cera_quantize_row_f16_ref(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        const cera_f16 h = cera_f32_to_f16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

void cera_dequant_row_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        cera_bf16 h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = cera_bf16_to_f32(h);
    }
}

void cera_quantize_row_bf16_ref(const float *src, void *dst, int64_t n) {
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        const cera_bf16 h = cera_f32_to_bf16(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

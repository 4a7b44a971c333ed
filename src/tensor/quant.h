/*
 * quant.h — the scalar reference conversions of every tensor type, one row at a time.
 *
 * cera_dequant_row_<type> turns n elements (a multiple of the type's block size) into
 * floats; cera_quantize_row_<type>_ref turns n floats into blocks. The quantizers are
 * the ones llama.cpp's llama-quantize runs when no importance matrix is given, written
 * to produce the same bytes (same arithmetic, in the same order); the dequantizers give
 * the same floats as ggml's. They are slow on purpose (plain loops) and are what every
 * faster kernel is checked against. The trait table (types.h) points at them; call them
 * through cera_type_get(type)->to_float / ->from_float_ref unless the type is fixed.
 *
 * Implemented by family: float.c (f32/f16/bf16), quant_legacy.c (q4_0..q8_1),
 * quant_k.c (q2_k..q8_k), quant_iq.c (iq4_nl, iq4_xs).
 */
#ifndef CERA_TENSOR_QUANT_H
#define CERA_TENSOR_QUANT_H

#include <stdint.h>

#define CERA_DECLARE_TYPE_ROWS(t)                                                                            \
    void cera_dequant_row_##t(const void *src, float *dst, int64_t n);                                       \
    void cera_quantize_row_##t##_ref(const float *src, void *dst, int64_t n);

CERA_DECLARE_TYPE_ROWS(f32)
CERA_DECLARE_TYPE_ROWS(f16)
CERA_DECLARE_TYPE_ROWS(bf16)
CERA_DECLARE_TYPE_ROWS(q4_0)
CERA_DECLARE_TYPE_ROWS(q4_1)
CERA_DECLARE_TYPE_ROWS(q5_0)
CERA_DECLARE_TYPE_ROWS(q5_1)
CERA_DECLARE_TYPE_ROWS(q8_0)
CERA_DECLARE_TYPE_ROWS(q8_1)
CERA_DECLARE_TYPE_ROWS(q2_k)
CERA_DECLARE_TYPE_ROWS(q3_k)
CERA_DECLARE_TYPE_ROWS(q4_k)
CERA_DECLARE_TYPE_ROWS(q5_k)
CERA_DECLARE_TYPE_ROWS(q6_k)
CERA_DECLARE_TYPE_ROWS(q8_k)
CERA_DECLARE_TYPE_ROWS(iq4_nl)
CERA_DECLARE_TYPE_ROWS(iq4_xs)

#undef CERA_DECLARE_TYPE_ROWS

#endif

/*
 * type_bounds.h — the error each tensor type is expected to stay within, shared by the
 * round-trip and golden-file tests.
 *
 * The measure is the RMSE of dequantize(quantize(x)) - x relative to the RMS of x, for
 * normally distributed x (LLM weights roughly are; the synth-llama weights are). Each
 * bound is about 1.2x what the reference quantizers reach (measured over many seeds and
 * on the synth-llama files); the comment gives where the magnitude comes from.
 */
#ifndef CERA_TEST_TYPE_BOUNDS_H
#define CERA_TEST_TYPE_BOUNDS_H

#include <stddef.h>

#include "tensor/types.h"

static const struct type_bound {
    cera_type type;
    double bound;
    const char *why;
} bounds[] = {
    {CERA_TYPE_F32, 0.0, "exact copy"},
    {CERA_TYPE_F16, 4.9e-4, "2^-11: half an ulp of an 11-bit significand, per element"},
    {CERA_TYPE_BF16, 3.9e-3, "2^-8: half an ulp of an 8-bit significand, per element"},
    {CERA_TYPE_Q8_0, 0.0065, "step amax/127 over 32 (amax ~2.1 sigma): ~0.0054 uniform rounding noise"},
    {CERA_TYPE_Q8_1, 0.0065, "as q8_0"},
    {CERA_TYPE_Q8_K, 0.0085, "step amax/127 over 256 elements (amax ~3 sigma): ~0.0071"},
    {CERA_TYPE_Q6_K, 0.022, "64 levels per 16, 8-bit sub-block scales: ~0.018"},
    {CERA_TYPE_Q5_0, 0.052, "32 levels over [-amax, amax] per 32: ~0.043"},
    {CERA_TYPE_Q5_1, 0.046, "32 levels over [min, max] per 32: ~0.038"},
    {CERA_TYPE_Q5_K, 0.044, "32 levels, fitted 6-bit scales/mins per 32: ~0.037"},
    {CERA_TYPE_Q4_0, 0.105, "16 levels over [-amax, amax] per 32: ~0.087"},
    {CERA_TYPE_Q4_1, 0.095, "16 levels over [min, max] per 32: ~0.079"},
    {CERA_TYPE_Q4_K, 0.087, "16 levels, fitted 6-bit scales/mins per 32: ~0.072"},
    {CERA_TYPE_IQ4_NL, 0.093, "16 non-linear levels, fitted f16 scale per 32: ~0.077"},
    {CERA_TYPE_IQ4_XS, 0.093, "as iq4_nl with 6-bit sub-block scales: ~0.077"},
    {CERA_TYPE_Q3_K, 0.183, "8 levels, 6-bit scales per 16: ~0.152"},
    {CERA_TYPE_Q2_K, 0.36, "4 levels, 4-bit scales and mins per 16: ~0.30"},
};

/* The bound for a type, or -1 when the table has none. */
static inline double type_bound(cera_type t) {
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
        if (bounds[i].type == t) return bounds[i].bound;
    return -1;
}

#endif

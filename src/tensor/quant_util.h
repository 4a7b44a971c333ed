/*
 * quant_util.h — small arithmetic helpers shared by the reference quantizers
 * (quant_legacy.c, quant_k.c, quant_iq.c) and the CPU activation quantizers
 * (backend/cpu/quant_act.c), which must round exactly as they do.
 *
 * They reproduce the exact rounding behaviour of llama.cpp's reference quantizers,
 * which the byte-exact tests depend on, and make the float->int conversions defined
 * for every input (NaN and huge values clamp instead of being undefined behaviour).
 */
#ifndef CERA_TENSOR_QUANT_UTIL_H
#define CERA_TENSOR_QUANT_UTIL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline int qu_min(int a, int b) { return a < b ? a : b; }
static inline int qu_max(int a, int b) { return a > b ? a : b; }
static inline int qu_clamp(int v, int lo, int hi) { return qu_max(lo, qu_min(hi, v)); }

/* The value of largest magnitude among n (the first one on ties), with its sign: the sign
 * decides the sign of the scale and of every quant, so it matters for the bytes. *amax
 * receives its magnitude (0 for an all-zero group). */
static inline float qu_signed_absmax(const float *x, int n, float *amax) {
    float max = 0.0f, am = 0.0f;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > am) {
            am = ax;
            max = x[i];
        }
    }
    *amax = am;
    return max;
}

/* a > b ? a : b, as the reference's MAX macro (not fmaxf: the NaN behaviour differs). */
static inline float qu_maxf(float a, float b) { return a > b ? a : b; }

/* (int)v, truncating toward zero; NaN gives 0 and out-of-range values saturate. */
static inline int qu_trunc(float v) {
    if (!(v > -2147483520.0f)) return v != v ? 0 : INT32_MIN;
    if (!(v < 2147483520.0f)) return INT32_MAX;
    return (int)v;
}

/* roundf(v) (halves away from zero) as an int. */
static inline int qu_round(float v) { return qu_trunc(roundf(v)); }

/* Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 makes the float
 * addition do the rounding, and the low mantissa bits are then the integer (offset by
 * 2^22). Larger inputs give the same deterministic garbage as the reference. */
static inline int qu_nearest_int(float v) {
    const float biased = v + 12582912.0f;
    int32_t bits;
    memcpy(&bits, &biased, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

#endif

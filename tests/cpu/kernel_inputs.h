/*
 * kernel_inputs.h — fresh random inputs for the CPU kernel tests and the kernel benchmark:
 * weight rows of any type made of random bytes with sane scale fields, and activation rows
 * of floats with occasional outliers.
 *
 * Random bytes exercise every bit pattern of the packed quants (high bits, sign bits,
 * scale packing), which data quantized from smooth floats would not. Only the float
 * scale fields are set to finite values in a realistic range, and q8_0 weights avoid -128,
 * which no quantizer produces (and which SIMD sign tricks are allowed to mishandle).
 */
#ifndef CERA_TESTS_KERNEL_INPUTS_H
#define CERA_TESTS_KERNEL_INPUTS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "tensor/blocks.h"
#include "tensor/types.h"
#include "testutil.h"

/* A scale in [lo, hi), random sign when signed_ok. */
static inline cera_f16 ki_scale(test_rng *r, float lo, float hi, int signed_ok) {
    float v = lo + (hi - lo) * test_rng_uniform(r);
    if (signed_ok && (test_rng_next(r) & 1)) v = -v;
    return cera_f32_to_f16(v);
}

/* Fills n elements (one row, a multiple of the block size) of weights of type t. */
static inline void ki_fill_weights(test_rng *r, cera_type t, int64_t n, void *dst) {
    const cera_type_traits *tt = cera_type_get(t);
    const int64_t nb = n / tt->block_size;
    uint8_t *p = dst;
    for (size_t i = 0; i < (size_t)nb * tt->type_size; i++) p[i] = (uint8_t)test_rng_next(r);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = p + (size_t)b * tt->type_size;
        switch (t) {
        case CERA_TYPE_F32: ((float *)dst)[b] = test_rng_normal(r) * 0.05f; break;
        case CERA_TYPE_F16: ((cera_f16 *)dst)[b] = cera_f32_to_f16(test_rng_normal(r) * 0.05f); break;
        case CERA_TYPE_BF16: ((cera_bf16 *)dst)[b] = cera_f32_to_bf16(test_rng_normal(r) * 0.05f); break;
        case CERA_TYPE_Q4_0: ((block_q4_0 *)blk)->d = ki_scale(r, 1e-3f, 1e-2f, 1); break;
        case CERA_TYPE_IQ4_NL: ((block_iq4_nl *)blk)->d = ki_scale(r, 1e-4f, 1e-3f, 1); break;
        case CERA_TYPE_Q5_0: ((block_q5_0 *)blk)->d = ki_scale(r, 1e-3f, 5e-3f, 1); break;
        case CERA_TYPE_Q4_1:
            ((block_q4_1 *)blk)->d = ki_scale(r, 1e-3f, 1e-2f, 0);
            ((block_q4_1 *)blk)->m = ki_scale(r, 1e-3f, 8e-2f, 1);
            break;
        case CERA_TYPE_Q5_1:
            ((block_q5_1 *)blk)->d = ki_scale(r, 1e-3f, 5e-3f, 0);
            ((block_q5_1 *)blk)->m = ki_scale(r, 1e-3f, 8e-2f, 1);
            break;
        case CERA_TYPE_Q8_0: {
            block_q8_0 *q = (block_q8_0 *)blk;
            q->d = ki_scale(r, 1e-4f, 1e-3f, 1);
            for (int j = 0; j < QK8_0; j++)
                if (q->qs[j] == -128) q->qs[j] = -127;
            break;
        }
        case CERA_TYPE_Q2_K:
            ((block_q2_k *)blk)->d = ki_scale(r, 1e-4f, 1e-3f, 0);
            ((block_q2_k *)blk)->dmin = ki_scale(r, 1e-4f, 1e-3f, 0);
            break;
        case CERA_TYPE_Q3_K: ((block_q3_k *)blk)->d = ki_scale(r, 1e-5f, 1e-4f, 1); break;
        case CERA_TYPE_Q4_K:
            ((block_q4_k *)blk)->d = ki_scale(r, 1e-5f, 1e-4f, 0);
            ((block_q4_k *)blk)->dmin = ki_scale(r, 1e-5f, 1e-4f, 0);
            break;
        case CERA_TYPE_Q5_K:
            ((block_q5_k *)blk)->d = ki_scale(r, 1e-5f, 5e-5f, 0);
            ((block_q5_k *)blk)->dmin = ki_scale(r, 1e-5f, 1e-4f, 0);
            break;
        case CERA_TYPE_Q6_K: ((block_q6_k *)blk)->d = ki_scale(r, 1e-5f, 1e-4f, 1); break;
        case CERA_TYPE_IQ4_XS: ((block_iq4_xs *)blk)->d = ki_scale(r, 1e-5f, 1e-4f, 1); break;
        default: break;
        }
    }
}

/* Activation-like floats: mostly normal, a few large outliers, some exact zeros. */
static inline void ki_fill_acts(test_rng *r, int64_t n, float *x) {
    for (int64_t i = 0; i < n; i++) {
        const uint64_t u = test_rng_next(r) % 64;
        x[i] = u == 0 ? 0.0f : u == 1 ? 20.0f * test_rng_normal(r) : test_rng_normal(r);
    }
}

#endif

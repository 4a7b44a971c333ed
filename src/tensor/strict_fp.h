/*
 * strict_fp.h — included first by the reference quantizers (quant_*.c): keeps the
 * compiler from changing their floating-point results.
 *
 * The reference quantizers must give llama.cpp's bytes, and their scale searches
 * compare float sums, so a fused multiply-add (one rounding instead of two) flips
 * which candidate wins. ggml's reference code is built without FMA contraction; so
 * is this: contraction is turned off for the rest of the file (GCC's pragma holds even
 * against -ffp-contract=fast; clang's against its default "on"), and -ffast-math,
 * which would reorder sums, is an error. tests/tensor/test_golden.c checks the bytes.
 */
#ifndef CERA_TENSOR_STRICT_FP_H
#define CERA_TENSOR_STRICT_FP_H

#if defined(__FAST_MATH__)
#error "src/tensor's reference quantizers must not be built with -ffast-math"
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#endif

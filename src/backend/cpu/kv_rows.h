/*
 * kv_rows.h — how the CPU writes K/V rows into the cache and reads them back, in each KV
 * type (kv/kv_cache.h's cera_kv_format), and the Walsh–Hadamard rotation of block-type
 * caches.
 *
 * The conversions are llama.cpp's for its cache copies (ggml's CPU from_float): F16 and BF16
 * rounded to nearest even, Q8_0 as its x86 quantize_row_q8_0 (the activation quantizer of a
 * Q8_0 weight), Q4_0 as quantize_row_q4_0_ref. The rotation is llama.cpp's ggml_fwht: each
 * piece of n values (a power of two) is scaled by 1/sqrt(n), then goes through the butterflies
 * of widths 1, 2, 4, ... n/2; the transform is its own inverse.
 */
#ifndef CERA_BACKEND_CPU_KV_ROWS_H
#define CERA_BACKEND_CPU_KV_ROWS_H

#include "kv/kv_cache.h"

/* dst (a row of type t in the cache) = the n floats src. */
void cera_cpu_kv_store(cera_kv_type t, const float *src, void *dst, int n);
/* dst = the n values of the cache row src of type t, as floats. */
void cera_cpu_kv_load(cera_kv_type t, const void *src, float *dst, int n);
/* The Walsh–Hadamard transform of x[0 .. len) in pieces of `piece` values (a power of two
 * dividing len), in place. */
void cera_fwht_f32(float *x, int len, int piece);

#endif

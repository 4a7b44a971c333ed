/*
 * kernels.h — the CPU's per-type kernel table: how a weight row of each type is
 * multiplied with an activation row.
 *
 * As in llama.cpp, activations are first quantized to the weight type's "activation
 * type" (Q8_0 for the 32-element-block types q4_0/q5_0/q8_0/iq4_nl, Q8_1 for q4_1/q5_1,
 * Q8_K for the k-quants and iq4_xs, F16 for f16, BF16 for bf16, F32 for f32), then each
 * output is a dot product of a weight row with a quantized activation row. Results then
 * match llama.cpp's to rounding.
 *
 * The table is chosen once per process from what the CPU has (CPUID/HWCAP, and for AMX
 * a granted permission); the environment variable CERA_CPU_TIER (scalar, avx2, avx512,
 * amx on x86-64; scalar, neon, i8mm on aarch64; scalar, simd128 on WebAssembly) forces a lower tier. A type
 * without a kernel at the selected tier gets the best lower tier's. Every variant is checked against the
 * scalar reference (tier "scalar") in tests/cpu.
 *
 * Rounding: the activation quantizers give llama.cpp's x86 bytes in every tier. The scalar
 * tier sums like ggml's portable (*_generic) code; the x86 tiles sum like llama.cpp's x86
 * vec_dots, so on an AVX-512 CPU most golden cases agree to the bit. llama.cpp repacks q4_0,
 * iq4_nl, q4_k and q2_k at load, and its GEMMs for them run a serial chain of per-block FMAs per
 * output; cera's own repacked q4_0, iq4_nl and q4_k (repack.h, avx2/avx512 tiers) run the same
 * chain where a weight is repacked (rows a multiple of 16): q4_0 and iq4_nl agree to the bit,
 * q4_k to about 5e-7. q2_k keeps the file layout and its vec_dot order, and for it llama.cpp
 * rounds differently for a prompt's groups of 4 tokens and for single tokens.
 *
 * Contract of the row functions: n is a multiple of the weight type's block size (and of
 * the activation type's, which is the same); rows need only their type's natural alignment
 * (2 bytes for f16/bf16 and the block types, 4 for f32 and q8_k), which every row of a
 * tensor has: SIMD loads are unaligned.
 */
#ifndef CERA_BACKEND_CPU_KERNELS_H
#define CERA_BACKEND_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/types.h"

/* s[0] = dot(weight row w, activation row a), n elements (a multiple of the block size). */
typedef void (*cera_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a);

/* s[j * s_stride + i] = dot(weight row i, activation row j) for nr weight rows (stride w_stride bytes)
 * and nc activation rows (stride a_stride bytes): a small register tile reused over several rows
 * and columns, so weights are read once per tile in matrix-matrix products. Any 1 <= nr <= tile_rows
 * and 1 <= nc <= tile_cols works (full tiles are the fast case); results equal vec_dot's up to the
 * order of float additions. Current sizes: AVX-512 4x4, AVX2 4x3, AMX 16x32 (int8 tiles; the
 * thread's tile configuration is loaded on first use), i8mm 4x4. */
typedef void (*cera_gemm_tile_fn)(int64_t n, float *s, size_t s_stride, const void *w, size_t w_stride,
                                  const void *a, size_t a_stride, int nr, int nc);

/* The tile over weights repacked at load (repack.h): s[c * s_stride + r] = dot(packed row r,
 * activation row c) for the CERA_PACK_ROWS rows of one packed group (w) and nc <= packed_cols
 * activation rows (stride a_stride bytes), with each activation row's per-block terms from
 * cera_packed_prep at aux (stride aux_stride bytes). Every output has the same arithmetic
 * whatever nc, so a decode step (nc = 1) equals the same token in a prompt. Current column
 * counts: AVX-512 Q4_0 and IQ4_NL 8, Q4_K 4, Q4_1, Q5_0, Q5_1 and Q8_0 2; AVX2 Q4_0 4, Q4_K 2,
 * the others 1. */
typedef void (*cera_packed_tile_fn)(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                                    size_t a_stride, const void *aux, size_t aux_stride, int nc);

/* Quantizes one activation row of n floats into the activation type. */
typedef void (*cera_quantize_row_fn)(const float *x, void *y, int64_t n);

typedef struct cera_cpu_type_ops {
    cera_type act_type;                /* the activation type for this weight type */
    cera_quantize_row_fn quantize_act; /* float row -> act_type row */
    cera_vec_dot_fn vec_dot;           /* weight row (this type) · activation row (act_type) */
    cera_gemm_tile_fn gemm_tile;       /* optional (NULL): a multi-row/multi-column tile */
    int tile_rows, tile_cols;          /* the largest nr and nc gemm_tile takes */
    cera_packed_tile_fn packed_tile;   /* optional (NULL): weights of this type repacked at load */
    int packed_cols;                   /* the largest nc packed_tile takes */
} cera_cpu_type_ops;

/* The ops for a weight type at the selected tier; NULL for types without CPU kernels. */
const cera_cpu_type_ops *cera_cpu_ops(cera_type weight_type);

/* The same at a named tier ("scalar", "avx2", "avx512", "neon", ...); NULL when that tier
 * is unavailable on this CPU. For tests that compare every tier with the scalar one. */
const cera_cpu_type_ops *cera_cpu_ops_tier(const char *tier, cera_type weight_type);

/* The name of the selected tier ("avx512", "avx2", "scalar", ...). */
const char *cera_cpu_tier_name(void);

/* True unless the selected tier is the scalar one (every x86 tier above it implies AVX2,
 * FMA and F16C: the ops' and attention's fast paths key on this). */
bool cera_cpu_tier_simd(void);

/* Every tier name this build knows, lowest first (available or not). */
const char *const *cera_cpu_tier_list(int *count);

/* Whether the named tier runs on this CPU. */
bool cera_cpu_tier_available(const char *tier);

#endif

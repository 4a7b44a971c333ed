/*
 * kernels_impl.h — what the kernel files share with the dispatcher (kernels.c); not for
 * callers outside the kernel table (they use kernels.h).
 *
 * Every tier fills a table of cera_cpu_type_ops indexed by weight type. The dispatcher
 * starts each tier from a copy of the tier below it and lets the tier's register
 * function override the entries it has kernels for, so a type without a kernel at a
 * tier falls back to the best lower one, per type.
 *
 * The scalar reference functions are declared here too: they make the scalar tier, and the
 * tests (tests/cpu) compare every other tier with them.
 */
#ifndef CERA_BACKEND_CPU_KERNELS_IMPL_H
#define CERA_BACKEND_CPU_KERNELS_IMPL_H

#include <stdbool.h>

#include "backend/cpu/kernels.h"

/* ---- scalar reference: activation quantizers (quant_act.c) ----
 * Q8_0 and Q8_1 follow the arithmetic of llama.cpp's x86 (AVX2/AVX-512) activation quantizer,
 * which is what made the goldens: scale 127/amax and round half to even. (ggml's portable
 * quantize_row_q8_0_ref uses 1/d and rounds half away from zero; the bytes differ on ties.)
 * Q8_K is ggml's quantize_row_q8_K_ref, which llama.cpp's x86 build uses as is. */
void cera_quantize_act_f32(const float *x, void *y, int64_t n);
void cera_quantize_act_f16(const float *x, void *y, int64_t n);
void cera_quantize_act_bf16(const float *x, void *y, int64_t n);
void cera_quantize_act_q8_0(const float *x, void *y, int64_t n);
void cera_quantize_act_q8_1(const float *x, void *y, int64_t n);
void cera_quantize_act_q8_k(const float *x, void *y, int64_t n);

/* ---- scalar reference: dot products (dot_ref_*.c), ggml's *_generic arithmetic ---- */
void cera_vec_dot_f32_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_f16_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_bf16_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q2_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q3_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q4_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q5_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_q6_k_q8_k_ref(int64_t n, float *s, const void *w, const void *a);
void cera_vec_dot_iq4_xs_q8_k_ref(int64_t n, float *s, const void *w, const void *a);

/* The scalar tier's table (every supported weight type). */
void cera_cpu_register_scalar(cera_cpu_type_ops ops[CERA_TYPE_COUNT]);

/* Sets quantize_act for every weight type whose activation type is act_type. */
void cera_cpu_set_act_quantizer(cera_cpu_type_ops ops[CERA_TYPE_COUNT], cera_type act_type,
                                cera_quantize_row_fn fn);

/* ---- per-ISA tiers: each overrides the entries it has kernels for ---- */
#if defined(__x86_64__) || defined(_M_X64)
void cera_cpu_register_avx2(cera_cpu_type_ops ops[CERA_TYPE_COUNT]);
/* has_bf16: the CPU has AVX512_BF16 (vdpbf16ps) as well as F/BW/DQ/VL/VNNI. */
void cera_cpu_register_avx512(cera_cpu_type_ops ops[CERA_TYPE_COUNT], bool has_bf16);
void cera_cpu_register_amx(cera_cpu_type_ops ops[CERA_TYPE_COUNT]);
/* The tiles over repacked weights (repack.h), x86/repack_*.c; called by the avx2/avx512 tiers. */
void cera_cpu_register_repack_avx2(cera_cpu_type_ops ops[CERA_TYPE_COUNT]);
void cera_cpu_register_repack_avx512(cera_cpu_type_ops ops[CERA_TYPE_COUNT]);
#endif
#if defined(__aarch64__)
void cera_cpu_register_neon(cera_cpu_type_ops ops[CERA_TYPE_COUNT]);
void cera_cpu_register_i8mm(cera_cpu_type_ops ops[CERA_TYPE_COUNT]);
#endif
#if defined(__wasm__)
void cera_cpu_register_simd128(cera_cpu_type_ops ops[CERA_TYPE_COUNT]);
#endif

#endif

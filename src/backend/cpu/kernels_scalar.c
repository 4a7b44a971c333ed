/*
 * kernels_scalar.c — the scalar tier's table: for every weight type its activation type,
 * the reference activation quantizer and the reference dot product. Every other tier
 * starts from a copy of this one (kernels.c), so this is also the list of types the CPU
 * backend supports.
 */
#include "backend/cpu/kernels_impl.h"

#include <string.h>

static void set(cera_cpu_type_ops *ops, cera_type w, cera_type act, cera_quantize_row_fn q,
                cera_vec_dot_fn dot) {
    ops[w] = (cera_cpu_type_ops){.act_type = act, .quantize_act = q, .vec_dot = dot};
}

void cera_cpu_register_scalar(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) {
    memset(ops, 0, sizeof(cera_cpu_type_ops) * CERA_TYPE_COUNT);
    set(ops, CERA_TYPE_F32, CERA_TYPE_F32, cera_quantize_act_f32, cera_vec_dot_f32_ref);
    set(ops, CERA_TYPE_F16, CERA_TYPE_F16, cera_quantize_act_f16, cera_vec_dot_f16_ref);
    set(ops, CERA_TYPE_BF16, CERA_TYPE_BF16, cera_quantize_act_bf16, cera_vec_dot_bf16_ref);
    set(ops, CERA_TYPE_Q4_0, CERA_TYPE_Q8_0, cera_quantize_act_q8_0, cera_vec_dot_q4_0_q8_0_ref);
    set(ops, CERA_TYPE_Q5_0, CERA_TYPE_Q8_0, cera_quantize_act_q8_0, cera_vec_dot_q5_0_q8_0_ref);
    set(ops, CERA_TYPE_Q8_0, CERA_TYPE_Q8_0, cera_quantize_act_q8_0, cera_vec_dot_q8_0_q8_0_ref);
    set(ops, CERA_TYPE_IQ4_NL, CERA_TYPE_Q8_0, cera_quantize_act_q8_0, cera_vec_dot_iq4_nl_q8_0_ref);
    set(ops, CERA_TYPE_Q4_1, CERA_TYPE_Q8_1, cera_quantize_act_q8_1, cera_vec_dot_q4_1_q8_1_ref);
    set(ops, CERA_TYPE_Q5_1, CERA_TYPE_Q8_1, cera_quantize_act_q8_1, cera_vec_dot_q5_1_q8_1_ref);
    set(ops, CERA_TYPE_Q2_K, CERA_TYPE_Q8_K, cera_quantize_act_q8_k, cera_vec_dot_q2_k_q8_k_ref);
    set(ops, CERA_TYPE_Q3_K, CERA_TYPE_Q8_K, cera_quantize_act_q8_k, cera_vec_dot_q3_k_q8_k_ref);
    set(ops, CERA_TYPE_Q4_K, CERA_TYPE_Q8_K, cera_quantize_act_q8_k, cera_vec_dot_q4_k_q8_k_ref);
    set(ops, CERA_TYPE_Q5_K, CERA_TYPE_Q8_K, cera_quantize_act_q8_k, cera_vec_dot_q5_k_q8_k_ref);
    set(ops, CERA_TYPE_Q6_K, CERA_TYPE_Q8_K, cera_quantize_act_q8_k, cera_vec_dot_q6_k_q8_k_ref);
    set(ops, CERA_TYPE_IQ4_XS, CERA_TYPE_Q8_K, cera_quantize_act_q8_k, cera_vec_dot_iq4_xs_q8_k_ref);
}

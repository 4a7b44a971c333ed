/*
 * synth_shape.h — the model description of the llama2-7b shape for the GPU benchmarks
 * (cuda_bench, cuda_lora_bench): hyper-parameters and tensor types only, no data; the
 * CUDA backend fills the weights with random valid blocks (synthetic_weights), so 7B-class
 * models need neither a file nor host memory.
 */
#ifndef CERA_BENCH_CUDA_SYNTH_SHAPE_H
#define CERA_BENCH_CUDA_SYNTH_SHAPE_H

#include <stdbool.h>

#include "model/model.h"

/* Weights of type t; q4_k_m: Q6_K for attn_v/ffn_down of the use_more_bits layers, as
 * llama-quantize's Q4_K_M; output.weight of out_type. m->layers is malloc'ed. */
void cera_bench_llama2_7b(cera_model *m, cera_type t, bool q4_k_m, cera_type out_type);

#endif

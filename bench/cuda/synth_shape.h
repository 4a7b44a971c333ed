/*
 * synth_shape.h — the model description of the llama2-7b shape for the GPU benchmarks
 * (cuda_bench, cuda_lora_bench): hyper-parameters and tensor types only, no data; the
 * CUDA backend fills the weights with random valid blocks (synthetic_weights), so 7B-class
 * models need neither a file nor host memory. The op list is the llama stack's
 * (model/arch/blocks.h), which the CUDA backend compiles like a loaded model's.
 */
#ifndef CERA_BENCH_CUDA_SYNTH_SHAPE_H
#define CERA_BENCH_CUDA_SYNTH_SHAPE_H

#include <stdbool.h>

#include "model/model.h"

/* Weights in the types llama-quantize gives for `type` (a tensor type name, or q4_k_m: Q4_K
 * with Q6_K for attn_v/ffn_down of the use_more_bits layers); output.weight in Q6_K for q4_0
 * and q4_k_m, else in the same type; the llama op list in m->graph. m->layers and m->graph
 * are malloc'ed. False for an unknown name. */
bool cera_bench_llama2_7b(cera_model *m, const char *type);

#endif

/*
 * synth_shape.h — model descriptions of real llama shapes for the GPU benchmarks (cuda_bench,
 * cuda_lora_bench): hyper-parameters and tensor types only, no data; the CUDA backend fills the
 * weights with random valid blocks (synthetic_weights), so 7B- and 70B-class models need neither
 * a file nor host memory. The op list is the llama stack's (model/arch/blocks.h), which the CUDA
 * backend compiles like a loaded model's.
 */
#ifndef CERA_BENCH_CUDA_SYNTH_SHAPE_H
#define CERA_BENCH_CUDA_SYNTH_SHAPE_H

#include <stdbool.h>

#include "model/model.h"

/* The shapes known: "llama2-7b" (4096 embd, 11008 ffn, 32 layers, 32 heads, 32000 vocab),
 * "llama-3.1-8b" (4096, 14336, 32, 8 KV heads, 128256) and "llama-3.1-70b" (8192, 28672, 80,
 * 8 KV heads, 128256), as `cera synth` names them. Weights in the types llama-quantize gives for
 * `type` (a tensor type name, or q4_k_m: Q4_K with Q6_K for attn_v/ffn_down of the use_more_bits
 * layers); output.weight in Q6_K for q4_0 and q4_k_m, else in the same type; the llama op list
 * in m->graph. m->layers and m->graph are malloc'ed. False for an unknown shape or type. */
bool cera_bench_synth_model(cera_model *m, const char *shape, const char *type);

#endif

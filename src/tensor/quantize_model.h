/*
 * quantize_model.h — converting a whole GGUF model to one tensor type (`cera quantize`).
 *
 * Like llama-quantize's --pure mode without an importance matrix: every weight matrix
 * (a tensor of 2+ dimensions whose name ends in "weight", except those llama.cpp always
 * keeps as they are: norms, MoE routers, convolution kernels, position embeddings) is
 * converted to the target type with the reference quantizer of quant.h, so the tensor
 * bytes are llama.cpp's; 1-D tensors are stored as F32; every key/value is copied, with
 * general.file_type set to llama.cpp's ftype number and general.quantization_version
 * to 2. The input must hold only F32, F16 or BF16 tensors.
 *
 * The library function is separate from the CLI (tools/cera/quantize.c) so tests can
 * call it directly.
 */
#ifndef CERA_TENSOR_QUANTIZE_MODEL_H
#define CERA_TENSOR_QUANTIZE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "cera.h"
#include "tensor/types.h"

/* The target type for a name: a type name ("q4_0", "Q4_K", also the activation types
 * "q8_1" and "q8_k") or llama-quantize's name for the pure variant ("q3_k_s", "q4_k_s",
 * "q5_k_s"). False for unknown names. */
bool cera_quantize_type_from_name(const char *name, cera_type *out);

/* llama.cpp's llama_ftype number stored in general.file_type for a model of this type
 * (e.g. q4_0 -> 2, q4_k -> 14 "Q4_K_S"); false when there is none. */
bool cera_type_file_type(cera_type type, uint32_t *ftype);

/* Whether quantize_model converts this tensor to the target type (as llama-quantize). */
bool cera_quantize_tensor_wanted(const char *name, uint32_t n_dims);

/* Converts rows [0, nrows) of n_per_row floats each into type, with the reference
 * quantizer, splitting the rows over n_threads threads (<= 1: the caller's thread). */
void cera_quantize_rows(cera_type type, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        int n_threads);

/* Reads in_path, writes out_path converted to type (see the top of this file). Errors
 * name the file or tensor: unreadable input, a tensor that is not F32/F16/BF16, a row
 * length that is not a multiple of the type's block size, an unwritable output. Nothing
 * is written when the input is rejected. n_threads <= 0 uses every online CPU. */
cera_status cera_quantize_model(const char *in_path, const char *out_path, cera_type type, int n_threads,
                                cera_error *err);

#endif

/*
 * types.h — the tensor element types and their trait table.
 *
 * The numeric ids are GGUF's (ggml's), so a type read from a file indexes the table
 * directly. Every supported type has one row: name, block size, bytes per block and
 * the scalar reference dequantize/quantize. The reference quantizers produce the
 * same bytes as ggml's *_ref quantizers; the CPU and CUDA kernels are checked
 * against the reference dequantizers.
 *
 * Adding a type means adding its id, one row in types.c and its kernels.
 */
#ifndef CERA_TENSOR_TYPES_H
#define CERA_TENSOR_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cera_type {
    CERA_TYPE_F32 = 0,
    CERA_TYPE_F16 = 1,
    CERA_TYPE_Q4_0 = 2,
    CERA_TYPE_Q4_1 = 3,
    CERA_TYPE_Q5_0 = 6,
    CERA_TYPE_Q5_1 = 7,
    CERA_TYPE_Q8_0 = 8,
    CERA_TYPE_Q8_1 = 9,
    CERA_TYPE_Q2_K = 10,
    CERA_TYPE_Q3_K = 11,
    CERA_TYPE_Q4_K = 12,
    CERA_TYPE_Q5_K = 13,
    CERA_TYPE_Q6_K = 14,
    CERA_TYPE_Q8_K = 15,
    CERA_TYPE_IQ4_NL = 20,
    CERA_TYPE_IQ4_XS = 23,
    CERA_TYPE_BF16 = 30,
    CERA_TYPE_COUNT = 40, /* table size: ids up to here may appear in files */
} cera_type;

/* Converts n elements (a multiple of the block size) of a row. */
typedef void (*cera_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*cera_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct cera_type_traits {
    const char *name; /* "q4_0", as llama.cpp spells it; NULL for unsupported ids */
    int block_size;   /* elements per block */
    size_t type_size; /* bytes per block */
    bool is_quantized;
    cera_to_float_fn to_float;         /* scalar reference dequantize */
    cera_from_float_fn from_float_ref; /* scalar reference quantize (ggml's *_ref bytes) */
} cera_type_traits;

/* The row for a type id, or NULL when the id is unknown or unsupported. */
const cera_type_traits *cera_type_get(uint32_t type);

/* Looks a type up by name ("q4_k", "Q4_K", "f16"); returns false when unknown. */
bool cera_type_from_name(const char *name, cera_type *out);

/* Bytes of a row of n elements; 0 when n is not a multiple of the block size. */
size_t cera_row_size(cera_type type, int64_t n);

#endif

/*
 * safetensors.h — a small, validated reader for Hugging Face .safetensors files.
 *
 * cera reads safetensors only for PEFT LoRA adapters (adapter_model.safetensors), so
 * this is read-only and maps the whole file. The format: an 8-byte little-endian
 * header length N, N bytes of JSON mapping tensor names to {dtype, shape,
 * data_offsets: [begin, end]} (plus an optional "__metadata__" object of strings),
 * then the data section the offsets point into.
 *
 * Everything is checked at open, before any caller looks at a tensor: the header
 * length against the file size, the JSON (cJSON, with its nesting limit), every
 * entry's dtype (known), shape (non-negative integers, at most 8 dims, overflow-safe
 * element count), offsets (begin <= end <= data size, end - begin equal to the
 * element count times the dtype's size), duplicate names and overlapping tensors.
 * After safetensors_open* succeeds every tensor's data pointer is safe to read for
 * nbytes bytes (possibly unaligned: copy out with memcpy).
 */
#ifndef CERA_LORA_SAFETENSORS_H
#define CERA_LORA_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "cera.h"

#define SAFETENSORS_MAX_DIMS 8

typedef enum safetensors_dtype {
    SAFETENSORS_F64,
    SAFETENSORS_F32,
    SAFETENSORS_F16,
    SAFETENSORS_BF16,
    SAFETENSORS_I64,
    SAFETENSORS_I32,
    SAFETENSORS_I16,
    SAFETENSORS_I8,
    SAFETENSORS_U8,
    SAFETENSORS_BOOL,
    SAFETENSORS_F8_E4M3,
    SAFETENSORS_F8_E5M2,
    SAFETENSORS_DTYPE_COUNT
} safetensors_dtype;

typedef struct safetensors_tensor {
    const char *name; /* NUL-terminated, owned by the file */
    safetensors_dtype dtype;
    int n_dims;                          /* 0 for a scalar */
    int64_t shape[SAFETENSORS_MAX_DIMS]; /* outermost first, as torch: a [rows, cols] matrix */
    uint64_t offset;                     /* relative to the data section */
    uint64_t nbytes;
    const void *data; /* into the mapping / buffer */
} safetensors_tensor;

typedef struct safetensors_file {
    size_t n_tensors;
    safetensors_tensor *tensors; /* sorted by offset */
    const uint8_t *base;         /* the whole file */
    uint64_t size;
    uint64_t data_offset; /* 8 + header length */
    /* private */
    void *map;
    size_t map_size;
    char *names; /* one block holding every name */
} safetensors_file;

/* Opens and validates a file through mmap. Errors name the path. */
cera_status safetensors_open(const char *path, safetensors_file **out, cera_error *err);
/* Parses a buffer the caller keeps alive while the file is used. */
cera_status safetensors_open_memory(const void *data, size_t size, safetensors_file **out, cera_error *err);
void safetensors_close(safetensors_file *f);

/* The tensor with this name, or NULL. */
const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name);

/* "F32", "BF16", ... */
const char *safetensors_dtype_name(safetensors_dtype t);
/* Bytes per element. */
size_t safetensors_dtype_size(safetensors_dtype t);

#endif

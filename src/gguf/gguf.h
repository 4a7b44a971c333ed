/*
 * gguf.h — reading and writing GGUF files (versions 2 and 3).
 *
 * The reader parses a whole file up front, over an mmap of the file or over a
 * caller's memory buffer, and validates everything before anything else looks at it:
 * magic, version, counts against the file size, string lengths, value types, array
 * nesting, general.alignment, tensor dimensions (1..4, non-zero, overflow-safe
 * products), known types, rows that are whole blocks, offsets aligned and inside the
 * data section, no overlapping tensors. After gguf_open* succeeds, every pointer in
 * the gguf_file is safe to read.
 *
 * Strings are not NUL-terminated: they point into the file. Arrays of fixed-size
 * scalars point at the raw little-endian data (possibly unaligned: read them with the
 * gguf_arr_* helpers); arrays of strings and nested arrays are decoded at open.
 *
 * The writer collects key/values and tensors and writes a version-3 file.
 */
#ifndef CERA_GGUF_H
#define CERA_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"
#include "tensor/types.h"

#define GGUF_MAGIC             0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS          4

typedef enum gguf_vtype {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
} gguf_vtype;

typedef struct gguf_str {
    uint64_t len;
    const char *data; /* not NUL-terminated */
} gguf_str;

typedef struct gguf_value gguf_value;

typedef struct gguf_array {
    gguf_vtype type; /* element type */
    uint64_t n;      /* element count */
    union {
        const uint8_t *raw;       /* fixed-size scalars: n * gguf_vtype_size(type) bytes */
        const gguf_str *strs;     /* type == GGUF_TYPE_STRING */
        const gguf_value *arrays; /* type == GGUF_TYPE_ARRAY (each value is an array) */
    } u;
} gguf_array;

struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u64; /* every unsigned integer type, and bool (0/1) */
        int64_t i64;  /* every signed integer type */
        double f64;   /* float32 and float64 */
        gguf_str str;
        gguf_array arr;
    } v;
};

typedef struct gguf_kv {
    gguf_str key;
    gguf_value value;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
    cera_type type;
    uint64_t offset; /* relative to the data section */
    uint64_t nbytes;
    const void *data; /* into the mapping / buffer */
} gguf_tensor;

typedef struct gguf_file {
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset; /* start of the data section in the file */
    const uint8_t *base;  /* the whole file */
    uint64_t size;
    /* private */
    void *map;
    size_t map_size;
    void *arena;                /* every decoded array, this struct included */
    struct gguf_index *kv_idx;  /* hash of keys, for gguf_find_kv */
    struct gguf_index *ten_idx; /* hash of tensor names, for gguf_find_tensor */
    struct gguf_file **parts;   /* a split model's files, the first included (gguf_open_model) */
    uint32_t n_parts;           /* 0 for a single file */
} gguf_file;

/* Opens and validates a file through mmap. Errors name the path.
 * Statuses: CERA_ERR_IO (cannot open/map), CERA_ERR_FORMAT (malformed: the message
 * says what and where), CERA_ERR_UNSUPPORTED (version 1 or > 3, big-endian, a tensor
 * type cera does not know), CERA_ERR_NO_MEMORY. */
cera_status gguf_open(const char *path, gguf_file **out, cera_error *err);
/* Parses a buffer the caller keeps alive while the gguf_file is used. */
cera_status gguf_open_memory(const void *data, size_t size, gguf_file **out, cera_error *err);
/* Closes a file, or every file of a split model. */
void gguf_close(gguf_file *f);

/* Opens a model: a single GGUF file, or the first shard of a split one (llama.cpp's
 * gguf-split: split.count files named <prefix>-0000K-of-0000N.gguf, split.no K - 1, and
 * split.tensors.count the tensors of all of them). A split model opens as one gguf_file:
 * the metadata of the first shard, the tensors of every shard (each file mmapped, data
 * pointing into its own mapping). A missing shard, one whose split keys disagree (another
 * count, another position, another model's tensor total) or a tensor name in two shards
 * is an error naming the file. Opening a later shard is an error naming the first. */
cera_status gguf_open_model(const char *path, gguf_file **out, cera_error *err);
/* The files of f: f itself, or the shards of a split model (for reading them ahead). */
uint32_t gguf_n_files(const gguf_file *f);
const gguf_file *gguf_file_part(const gguf_file *f, uint32_t i);

size_t gguf_vtype_size(gguf_vtype t); /* bytes of a fixed-size scalar; 0 for string/array */
const char *gguf_vtype_name(gguf_vtype t);

/* Lookup by key / name; NULL when absent. */
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Elements of a tensor (the product of ne). */
int64_t gguf_tensor_nelements(const gguf_tensor *t);

/* Validates a shape for a type (1..4 dims, each >= 1, overflow-free products, rows of
 * whole blocks) and gives its size in bytes. Shared by the reader and the writer.
 * The message names neither file nor tensor: callers prefix them. */
cera_status gguf_tensor_size(cera_type type, uint32_t n_dims, const int64_t *ne, uint64_t *nbytes,
                             cera_error *err);

bool gguf_str_eq(gguf_str s, const char *cstr);
/* Copies s into buf as a NUL-terminated string (truncating); returns buf. */
char *gguf_str_copy(gguf_str s, char *buf, size_t cap);

/* Typed getters: false when the key is absent or its value does not convert
 * (any integer type converts to another if the value fits; floats from float32/64). */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
bool gguf_get_arr(const gguf_file *f, const char *key, const gguf_array **out);

/* Element i of a fixed-size scalar array, converted (0 when i is out of range or the
 * array holds strings or arrays). Floats convert to integers by truncation. */
int64_t gguf_arr_i64(const gguf_array *a, uint64_t i);
double gguf_arr_f64(const gguf_array *a, uint64_t i);

/* ---- Writer ---------------------------------------------------------------- */

typedef struct gguf_writer gguf_writer;

/* NULL only when out of memory. Later allocation failures are remembered and make
 * gguf_writer_write / gguf_writer_to_memory return CERA_ERR_NO_MEMORY. */
gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

/* Setting a key that exists replaces its value in place (insertion order is kept).
 * Strings and arrays are copied. */
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* A fixed-size scalar array: n elements of type t, little-endian at data. */
void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype t, const void *data, uint64_t n);
void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
/* Copies any value (nested arrays included) from a parsed file. */
void gguf_writer_set_value(gguf_writer *w, gguf_str key, const gguf_value *v);
/* Removes a key (no-op when absent). */
void gguf_writer_remove(gguf_writer *w, const char *key);

/* Adds a tensor; data is referenced, not copied, and must stay valid until write
 * (NULL writes zeros). ne has n_dims entries. Fails with CERA_ERR_INVALID_ARG on a
 * bad shape, an unknown type or a duplicate name. */
cera_status gguf_writer_add_tensor(gguf_writer *w, const char *name, cera_type type, uint32_t n_dims,
                                   const int64_t *ne, const void *data, cera_error *err);
/* The same, also checking that the caller's buffer holds exactly nbytes for the shape. */
cera_status gguf_writer_add_tensor_sized(gguf_writer *w, const char *name, cera_type type, uint32_t n_dims,
                                         const int64_t *ne, const void *data, uint64_t nbytes,
                                         cera_error *err);

/* Writes a version-3 file with general.alignment (default 32) honoured; tensor data
 * in insertion order, each padded to the alignment. CERA_ERR_INVALID_ARG when
 * general.alignment is not a power-of-two uint32 multiple of 8. The file is written
 * to a fresh temporary file beside PATH and renamed into place, so a failed write never
 * leaves a truncated PATH; a PATH that exists and is not a regular file is refused. */
cera_status gguf_writer_write(gguf_writer *w, const char *path, cera_error *err);
/* Serializes into a malloc'ed buffer (for tests and fuzz seeds). */
cera_status gguf_writer_to_memory(gguf_writer *w, void **data, size_t *size, cera_error *err);

#endif

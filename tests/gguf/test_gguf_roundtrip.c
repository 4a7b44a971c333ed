/*
 * test_gguf_roundtrip.c — GGUF write → read round trips.
 *
 * Builds files with the writer holding every value type (scalars, arrays of every
 * scalar type, string arrays, nested arrays, empty arrays) and tensors of several
 * types with random data, under the default and custom alignments; reads them back
 * (from memory and through a file) and checks every value, shape, offset and byte.
 * Then re-serializes the parsed file through gguf_writer_set_value and expects the
 * very same bytes, and checks the typed getters' conversions and the writer's errors.
 */
#include <math.h>
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "testutil.h"

typedef struct tensor_spec {
    const char *name;
    cera_type type;
    uint32_t n_dims;
    int64_t ne[4];
} tensor_spec;

static const tensor_spec specs[] = {
    {"tok.f32", CERA_TYPE_F32, 2, {7, 3}},         {"norm.f16", CERA_TYPE_F16, 1, {5}},
    {"w.q4_0", CERA_TYPE_Q4_0, 2, {64, 3}},        {"w.q8_0", CERA_TYPE_Q8_0, 3, {32, 2, 2}},
    {"w.q4_k", CERA_TYPE_Q4_K, 4, {256, 1, 1, 2}}, {"w.q6_k", CERA_TYPE_Q6_K, 2, {512, 1}},
    {"w.bf16", CERA_TYPE_BF16, 2, {3, 1}},
};
#define N_SPECS (sizeof specs / sizeof specs[0])

static const char *const strs[] = {"alpha", "", "γειά σου", "a\nb\"c"};

/* Fills a writer with every kind of value, and the tensors with random bytes. */
static gguf_writer *build(uint8_t **bufs, uint32_t alignment, test_rng *rng) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "test");
    if (alignment) gguf_writer_set_u32(w, "general.alignment", alignment);
    gguf_value v;
    v.type = GGUF_TYPE_UINT8, v.v.u64 = 200;
    gguf_writer_set_value(w, (gguf_str){3, "u8x"}, &v); /* key from a non-terminated string */
    v.type = GGUF_TYPE_INT8, v.v.i64 = -100;
    gguf_writer_set_value(w, (gguf_str){2, "i8"}, &v);
    v.type = GGUF_TYPE_UINT16, v.v.u64 = 65535;
    gguf_writer_set_value(w, (gguf_str){3, "u16"}, &v);
    v.type = GGUF_TYPE_INT16, v.v.i64 = -32768;
    gguf_writer_set_value(w, (gguf_str){3, "i16"}, &v);
    gguf_writer_set_u32(w, "u32", 4000000000u);
    gguf_writer_set_i32(w, "i32", -2000000000);
    gguf_writer_set_f32(w, "f32", 0.1f);
    gguf_writer_set_bool(w, "bool", true);
    gguf_writer_set_str(w, "str", "hello, world");
    gguf_writer_set_u64(w, "u64", 1ull << 40);
    v.type = GGUF_TYPE_INT64, v.v.i64 = INT64_MIN;
    gguf_writer_set_value(w, (gguf_str){3, "i64"}, &v);
    v.type = GGUF_TYPE_FLOAT64, v.v.f64 = -1.0 / 3.0;
    gguf_writer_set_value(w, (gguf_str){3, "f64"}, &v);

    /* one array of each fixed-size type: element i is i*37 - 50 in that type */
    for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
        size_t es = gguf_vtype_size((gguf_vtype)t);
        if (!es) continue;
        uint8_t raw[8 * 10];
        for (int i = 0; i < 10; i++) {
            int64_t x = i * 37 - 50;
            uint64_t bits = (uint64_t)x;
            if (t == GGUF_TYPE_FLOAT32) {
                float f = (float)x + 0.5f;
                uint32_t b;
                memcpy(&b, &f, 4);
                bits = b;
            } else if (t == GGUF_TYPE_FLOAT64) {
                double d = (double)x + 0.25;
                memcpy(&bits, &d, 8);
            } else if (t == GGUF_TYPE_BOOL) {
                bits = i & 1;
            }
            for (size_t b = 0; b < es; b++) raw[i * es + b] = (uint8_t)(bits >> (8 * b));
        }
        char key[32];
        snprintf(key, sizeof key, "arr.%s", gguf_vtype_name((gguf_vtype)t));
        gguf_writer_set_arr(w, key, (gguf_vtype)t, raw, 10);
    }
    gguf_writer_set_arr_str(w, "arr.string", strs, 4);
    gguf_writer_set_arr(w, "arr.empty", GGUF_TYPE_INT32, NULL, 0);
    gguf_writer_set_arr_str(w, "arr.empty_str", NULL, 0);

    /* nested: [[1, 2], [3]] of int32, and [["x"], []] of strings, and [[[7]]] */
    int32_t a12[2] = {1, 2}, a3[1] = {3}, a7[1] = {7};
    gguf_value inner[2], inner_s[2], deep1, deep2, outer;
    inner[0] = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 2, {.raw = (uint8_t *)a12}}};
    inner[1] = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 1, {.raw = (uint8_t *)a3}}};
    outer = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 2, {.arrays = inner}}};
    gguf_writer_set_value(w, (gguf_str){10, "arr.nested"}, &outer);
    gguf_str x = {1, "x"};
    inner_s[0] = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_STRING, 1, {.strs = &x}}};
    inner_s[1] = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_STRING, 0, {.strs = NULL}}};
    outer = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 2, {.arrays = inner_s}}};
    gguf_writer_set_value(w, (gguf_str){14, "arr.nested_str"}, &outer);
    deep1 = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 1, {.raw = (uint8_t *)a7}}};
    deep2 = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 1, {.arrays = &deep1}}};
    outer = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 1, {.arrays = &deep2}}};
    gguf_writer_set_value(w, (gguf_str){15, "arr.nested_deep"}, &outer);

    /* replacing keeps the position: "str" stays where it was */
    gguf_writer_set_str(w, "str", "replaced");
    gguf_writer_set_str(w, "to.remove", "gone");
    gguf_writer_remove(w, "to.remove");

    for (size_t i = 0; i < N_SPECS; i++) {
        uint64_t n = 0;
        cera_error err = {0};
        CHECK(gguf_tensor_size(specs[i].type, specs[i].n_dims, specs[i].ne, &n, &err) == CERA_OK, "%s",
              err.message);
        bufs[i] = malloc(n);
        for (uint64_t b = 0; b < n; b++) bufs[i][b] = (uint8_t)test_rng_next(rng);
        cera_status st = gguf_writer_add_tensor_sized(w, specs[i].name, specs[i].type, specs[i].n_dims,
                                                      specs[i].ne, bufs[i], n, &err);
        CHECK(st == CERA_OK, "add %s: %s", specs[i].name, err.message);
    }
    return w;
}

static const gguf_array *arr(const gguf_file *f, const char *key) {
    const gguf_array *a = NULL;
    CHECK(gguf_get_arr(f, key, &a), "array %s missing", key);
    return a;
}

static void check_file(const gguf_file *f, uint8_t **bufs, uint32_t alignment) {
    uint64_t al = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
    CHECK(f->version == 3, "version %u", f->version);
    CHECK(f->alignment == al, "alignment %llu", (unsigned long long)f->alignment);
    CHECK(f->data_offset % al == 0, "data offset %llu", (unsigned long long)f->data_offset);
    CHECK(f->n_kv == (alignment ? 31u : 30u), "n_kv %llu", (unsigned long long)f->n_kv);
    /* insertion order */
    CHECK(gguf_str_eq(f->kv[0].key, "general.architecture"), "first key");
    const gguf_kv *s = gguf_find_kv(f, "str");
    CHECK(s && s - f->kv == (alignment ? 10 : 9), "replaced key moved");
    CHECK(!gguf_find_kv(f, "to.remove"), "removed key present");

    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f32;
    bool b;
    gguf_str str;
    CHECK(gguf_get_u32(f, "u8x", &u32) && u32 == 200, "u8");
    CHECK(gguf_get_i32(f, "i8", &i32) && i32 == -100, "i8");
    CHECK(gguf_get_u32(f, "u16", &u32) && u32 == 65535, "u16");
    CHECK(gguf_get_i32(f, "i16", &i32) && i32 == -32768, "i16");
    CHECK(gguf_get_u32(f, "u32", &u32) && u32 == 4000000000u, "u32");
    CHECK(!gguf_get_i32(f, "u32", &i32), "u32 4e9 must not fit i32");
    CHECK(gguf_get_i32(f, "i32", &i32) && i32 == -2000000000, "i32");
    CHECK(!gguf_get_u32(f, "i32", &u32), "negative must not fit u32");
    CHECK(!gguf_get_u64(f, "i8", &u64), "negative must not fit u64");
    CHECK(gguf_get_f32(f, "f32", &f32) && f32 == 0.1f, "f32");
    CHECK(gguf_get_bool(f, "bool", &b) && b, "bool");
    CHECK(gguf_get_str(f, "str", &str) && gguf_str_eq(str, "replaced"), "str");
    CHECK(gguf_get_u64(f, "u64", &u64) && u64 == 1ull << 40, "u64");
    CHECK(!gguf_get_u32(f, "u64", &u32), "2^40 must not fit u32");
    const gguf_kv *kv = gguf_find_kv(f, "i64");
    CHECK(kv && kv->value.type == GGUF_TYPE_INT64 && kv->value.v.i64 == INT64_MIN, "i64");
    CHECK(gguf_get_f32(f, "f64", &f32) && f32 == (float)(-1.0 / 3.0), "f64 as f32");
    kv = gguf_find_kv(f, "f64");
    CHECK(kv && kv->value.type == GGUF_TYPE_FLOAT64 && kv->value.v.f64 == -1.0 / 3.0, "f64 exact");
    CHECK(!gguf_get_str(f, "u32", &str) && !gguf_get_f32(f, "u32", &f32) && !gguf_get_bool(f, "u32", &b),
          "type mismatches convert");
    CHECK(!gguf_get_u32(f, "missing", &u32) && !gguf_find_kv(f, "missing") && !gguf_find_kv(f, "st"),
          "missing key found");

    for (int t = 0; t < GGUF_TYPE_COUNT; t++) {
        if (!gguf_vtype_size((gguf_vtype)t)) continue;
        char key[32];
        snprintf(key, sizeof key, "arr.%s", gguf_vtype_name((gguf_vtype)t));
        const gguf_array *a = arr(f, key);
        if (!a) continue;
        CHECK((int)a->type == t && a->n == 10, "%s type/n", key);
        for (uint64_t i = 0; i < 10; i++) {
            int64_t x = (int64_t)i * 37 - 50;
            double want_f;
            int64_t want_i;
            switch (t) {
            case GGUF_TYPE_UINT8: want_i = (uint8_t)x; break;
            case GGUF_TYPE_INT8: want_i = (int8_t)x; break;
            case GGUF_TYPE_UINT16: want_i = (uint16_t)x; break;
            case GGUF_TYPE_INT16: want_i = (int16_t)x; break;
            case GGUF_TYPE_UINT32: want_i = (uint32_t)x; break;
            case GGUF_TYPE_BOOL: want_i = i & 1; break;
            case GGUF_TYPE_FLOAT32: want_i = (int64_t)((float)x + 0.5f); break;
            case GGUF_TYPE_FLOAT64: want_i = (int64_t)((double)x + 0.25); break;
            default: want_i = x; break;
            }
            want_f = t == GGUF_TYPE_FLOAT32   ? (double)((float)x + 0.5f)
                     : t == GGUF_TYPE_FLOAT64 ? (double)x + 0.25
                     : t == GGUF_TYPE_UINT64  ? (double)(uint64_t)x
                                              : (double)want_i;
            CHECK(gguf_arr_i64(a, i) == want_i, "%s[%llu] = %lld, want %lld", key, (unsigned long long)i,
                  (long long)gguf_arr_i64(a, i), (long long)want_i);
            CHECK(gguf_arr_f64(a, i) == want_f, "%s[%llu] f64", key, (unsigned long long)i);
        }
        CHECK(gguf_arr_i64(a, 10) == 0 && gguf_arr_f64(a, 99) == 0, "%s out of range", key);
    }
    const gguf_array *a = arr(f, "arr.string");
    if (a) {
        CHECK(a->type == GGUF_TYPE_STRING && a->n == 4, "string array");
        for (int i = 0; i < 4 && a->n == 4; i++) CHECK(gguf_str_eq(a->u.strs[i], strs[i]), "string %d", i);
        CHECK(gguf_arr_i64(a, 0) == 0, "string array as numbers");
    }
    a = arr(f, "arr.empty");
    CHECK(a && a->type == GGUF_TYPE_INT32 && a->n == 0, "empty array");
    a = arr(f, "arr.empty_str");
    CHECK(a && a->type == GGUF_TYPE_STRING && a->n == 0, "empty string array");
    a = arr(f, "arr.nested");
    if (a && a->type == GGUF_TYPE_ARRAY && a->n == 2) {
        const gguf_array *x0 = &a->u.arrays[0].v.arr, *x1 = &a->u.arrays[1].v.arr;
        CHECK(x0->type == GGUF_TYPE_INT32 && x0->n == 2 && gguf_arr_i64(x0, 0) == 1 &&
                  gguf_arr_i64(x0, 1) == 2,
              "nested[0]");
        CHECK(x1->type == GGUF_TYPE_INT32 && x1->n == 1 && gguf_arr_i64(x1, 0) == 3, "nested[1]");
    } else {
        CHECK(0, "nested array shape");
    }
    a = arr(f, "arr.nested_str");
    if (a && a->type == GGUF_TYPE_ARRAY && a->n == 2) {
        const gguf_array *x0 = &a->u.arrays[0].v.arr, *x1 = &a->u.arrays[1].v.arr;
        CHECK(x0->type == GGUF_TYPE_STRING && x0->n == 1 && gguf_str_eq(x0->u.strs[0], "x"), "nested_str[0]");
        CHECK(x1->type == GGUF_TYPE_STRING && x1->n == 0, "nested_str[1]");
    } else {
        CHECK(0, "nested string array shape");
    }
    a = arr(f, "arr.nested_deep");
    CHECK(a && a->n == 1 && a->u.arrays[0].v.arr.n == 1 && a->u.arrays[0].v.arr.u.arrays[0].v.arr.n == 1 &&
              gguf_arr_i64(&a->u.arrays[0].v.arr.u.arrays[0].v.arr, 0) == 7,
          "nested 3 deep");

    CHECK(f->n_tensors == N_SPECS, "n_tensors %llu", (unsigned long long)f->n_tensors);
    for (size_t i = 0; i < N_SPECS && i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECK(gguf_str_eq(t->name, specs[i].name), "tensor %zu name", i);
        CHECK(gguf_find_tensor(f, specs[i].name) == t, "find %s", specs[i].name);
        CHECK(t->type == specs[i].type && t->n_dims == specs[i].n_dims, "%s type/dims", specs[i].name);
        int64_t nel = 1;
        for (uint32_t d = 0; d < 4; d++) {
            int64_t want = d < specs[i].n_dims ? specs[i].ne[d] : 1;
            CHECK(t->ne[d] == want, "%s ne[%u]", specs[i].name, d);
            nel *= want;
        }
        CHECK(gguf_tensor_nelements(t) == nel, "%s nelements", specs[i].name);
        CHECK(t->offset % al == 0, "%s offset %llu", specs[i].name, (unsigned long long)t->offset);
        CHECK((uint64_t)((const uint8_t *)t->data - f->base) == f->data_offset + t->offset, "%s data pointer",
              specs[i].name);
        CHECK(t->nbytes == cera_row_size(t->type, t->ne[0]) * (uint64_t)(nel / t->ne[0]), "%s nbytes",
              specs[i].name);
        CHECK(!memcmp(t->data, bufs[i], t->nbytes), "%s data", specs[i].name);
    }
    CHECK(!gguf_find_tensor(f, "nope"), "absent tensor found");
}

/* Re-serializes a parsed file through set_value/add_tensor: must give the same bytes. */
static void check_reserialize(const gguf_file *f, const void *orig, size_t orig_size) {
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    cera_error err = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char name[128];
        CHECK(gguf_writer_add_tensor(w, gguf_str_copy(t->name, name, sizeof name), t->type, t->n_dims, t->ne,
                                     t->data, &err) == CERA_OK,
              "%s", err.message);
    }
    void *data;
    size_t size;
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_OK, "%s", err.message);
    CHECK(size == orig_size && !memcmp(data, orig, size), "re-serialized file differs (%zu vs %zu bytes)",
          size, orig_size);
    free(data);
    gguf_writer_free(w);
}

static void roundtrip(uint32_t alignment, test_rng *rng) {
    uint8_t *bufs[N_SPECS];
    gguf_writer *w = build(bufs, alignment, rng);
    void *data = NULL;
    size_t size = 0;
    cera_error err = {0};
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_OK, "to_memory: %s", err.message);
    gguf_file *f = NULL;
    CHECK(gguf_open_memory(data, size, &f, &err) == CERA_OK, "open_memory: %s", err.message);
    if (f) {
        check_file(f, bufs, alignment);
        check_reserialize(f, data, size);
        gguf_close(f);
    }

    /* through a file: the same bytes, and gguf_open (mmap) reads it */
    char path[256];
    snprintf(path, sizeof path, "%s/roundtrip-%u-%d.gguf", CERA_BINARY_DIR, alignment, (int)getpid());
    CHECK(gguf_writer_write(w, path, &err) == CERA_OK, "write: %s", err.message);
    size_t fsize = 0;
    void *fdata = read_file(path, &fsize);
    CHECK(fdata && fsize == size && !memcmp(fdata, data, size), "file bytes differ from memory bytes");
    free(fdata);
    f = NULL;
    CHECK(gguf_open(path, &f, &err) == CERA_OK, "open: %s", err.message);
    if (f) {
        check_file(f, bufs, alignment);
        gguf_close(f);
    }
    unlink(path);
    free(data);
    gguf_writer_free(w);
    for (size_t i = 0; i < N_SPECS; i++) free(bufs[i]);
}

static void writer_errors(void) {
    gguf_writer *w = gguf_writer_new();
    cera_error err = {0};
    int64_t ne[4] = {33, 2, 1, 1};
    CHECK(gguf_writer_add_tensor(w, "a", CERA_TYPE_Q4_0, 2, ne, NULL, &err) == CERA_ERR_INVALID_ARG &&
              strstr(err.message, "block size"),
          "q4_0 row of 33: %s", err.message);
    ne[0] = 0;
    CHECK(gguf_writer_add_tensor(w, "a", CERA_TYPE_F32, 2, ne, NULL, &err) == CERA_ERR_INVALID_ARG, "ne 0");
    ne[0] = 4;
    CHECK(gguf_writer_add_tensor(w, "a", CERA_TYPE_F32, 5, ne, NULL, &err) == CERA_ERR_INVALID_ARG, "5 dims");
    CHECK(gguf_writer_add_tensor(w, "a", (cera_type)4, 1, ne, NULL, &err) == CERA_ERR_INVALID_ARG &&
              strstr(err.message, "type"),
          "type 4: %s", err.message);
    CHECK(gguf_writer_add_tensor_sized(w, "a", CERA_TYPE_F32, 1, ne, NULL, 15, &err) ==
                  CERA_ERR_INVALID_ARG &&
              strstr(err.message, "16"),
          "size mismatch: %s", err.message);
    CHECK(gguf_writer_add_tensor(w, "a", CERA_TYPE_F32, 1, ne, NULL, &err) == CERA_OK, "%s", err.message);
    CHECK(gguf_writer_add_tensor(w, "a", CERA_TYPE_F32, 1, ne, NULL, &err) == CERA_ERR_INVALID_ARG &&
              strstr(err.message, "twice"),
          "duplicate tensor: %s", err.message);
    void *data = NULL;
    size_t size;
    gguf_writer_set_u32(w, "general.alignment", 48);
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_ERR_INVALID_ARG &&
              strstr(err.message, "power"),
          "alignment 48: %s", err.message);
    gguf_writer_set_str(w, "general.alignment", "64");
    CHECK(gguf_writer_write(w, CERA_BINARY_DIR "/never.gguf", &err) == CERA_ERR_INVALID_ARG &&
              !file_exists(CERA_BINARY_DIR "/never.gguf"),
          "string alignment: %s", err.message);
    gguf_writer_set_u32(w, "general.alignment", 4);
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_ERR_INVALID_ARG &&
              strstr(err.message, "multiple of 8"),
          "alignment 4: %s", err.message);
    gguf_writer_set_u32(w, "general.alignment", 8);
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_OK, "alignment 8: %s", err.message);
    gguf_file *f = NULL;
    CHECK(gguf_open_memory(data, size, &f, &err) == CERA_OK && f->alignment == 8 &&
              f->data_offset + 16 == f->size,
          "alignment 8 read back: %s", err.message);
    gguf_close(f);
    free(data);
    CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf", &err) == CERA_ERR_IO &&
              strstr(err.message, "nonexistent"),
          "unwritable path: %s", err.message);
    gguf_writer_set_arr(w, "bad", GGUF_TYPE_STRING, NULL, 1);
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_ERR_INVALID_ARG && strstr(err.message, "bad"),
          "string element type through set_arr: %s", err.message);
    gguf_writer_free(w);

    /* allocation failure is remembered by the void setters and reported once */
    w = gguf_writer_new();
    uint64_t one = 1;
    gguf_writer_set_arr(w, "huge", GGUF_TYPE_UINT64, &one, 1ull << 62); /* 2^65 bytes: cannot be allocated */
    gguf_writer_set_u32(w, "fine", 1);
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_ERR_NO_MEMORY && !data, "oom: %s",
          err.message);
    CHECK(gguf_writer_write(w, CERA_BINARY_DIR "/never.gguf", &err) == CERA_ERR_NO_MEMORY &&
              !file_exists(CERA_BINARY_DIR "/never.gguf"),
          "oom write: %s", err.message);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_value bad = {.type = (gguf_vtype)42};
    gguf_writer_set_value(w, (gguf_str){3, "bad"}, &bad);
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_ERR_INVALID_ARG &&
              strstr(err.message, "'bad'"),
          "value type 42: %s", err.message);
    gguf_writer_free(w);
}

/* Whether CERA_BINARY_DIR holds a file whose name begins with "partial.gguf." (a
 * temporary file left behind: their names are unique, PATH.XXXXXXXX.tmp). */
static bool leftover_tmp(void) {
    DIR *d = opendir(CERA_BINARY_DIR);
    bool found = false;
    for (struct dirent *de; d && (de = readdir(d));)
        if (!strncmp(de->d_name, "partial.gguf.", 13)) found = true;
    if (d) closedir(d);
    return found;
}

/* A write that fails half-way (here the file size limit, as a full disk would) leaves
 * neither a truncated OUT nor a temporary file, and an OUT that existed keeps its old bytes; a
 * successful write replaces it whole. */
static void test_write_no_partial(void) {
    const char *out = CERA_BINARY_DIR "/partial.gguf";
    remove(out);
    gguf_writer *w = gguf_writer_new();
    cera_error err;
    static float big[16384];
    const int64_t ne[1] = {16384};
    gguf_writer_add_tensor(w, "big", CERA_TYPE_F32, 1, ne, big, &err);
    struct rlimit old;
    getrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {8192, old.rlim_max};
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit");
    CHECK(gguf_writer_write(w, out, &err) == CERA_ERR_IO, "write past the size limit: %s", err.message);
    CHECK(!file_exists(out) && !leftover_tmp(), "a failed write left a file behind");
    FILE *f = fopen(out, "wb");
    if (f) {
        fputs("old", f);
        fclose(f);
    }
    CHECK(gguf_writer_write(w, out, &err) == CERA_ERR_IO, "second failed write");
    size_t n = 0;
    char *text = read_file(out, &n);
    CHECK(text && n == 3 && !memcmp(text, "old", 3) && !leftover_tmp(), "a failed write touched OUT");
    free(text);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK(gguf_writer_write(w, out, &err) == CERA_OK, "write: %s", err.message);
    gguf_file *g = NULL;
    CHECK(gguf_open(out, &g, &err) == CERA_OK && g->n_tensors == 1 && !leftover_tmp(), "read back: %s",
          err.message);
    gguf_close(g);
    gguf_writer_free(w);
    remove(out);
}

int main(void) {
    test_rng rng = {0x5eed};
    test_write_no_partial();
    roundtrip(0, &rng);
    roundtrip(64, &rng);
    roundtrip(4096, &rng);
    writer_errors();
    return test_finish();
}

/*
 * test_gguf_corrupt.c — a generated corpus of broken GGUF files, each rejected with a
 * specific status and message, never a crash (and, under ASan, never a leak or an
 * out-of-bounds read).
 *
 * A valid file is built in memory with the writer; a small independent walker finds
 * where each field lies; then each case patches or cuts a copy and opens it with
 * gguf_open_memory: truncation at every header byte and at many data bytes, every
 * header byte flipped, huge counts and lengths, bad versions, n_dims 0 and 5, zero,
 * negative and overflowing dimensions, unknown value and tensor types, bad alignment,
 * misaligned, out-of-range and overlapping offsets, duplicate keys and tensor names,
 * over-deep nesting. Each copy is a fresh malloc of exactly its size, so ASan sees any
 * read past the end.
 *
 * With `--seeds DIR` it writes the valid file and a few broken ones to DIR (fuzz seeds).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "testutil.h"

/* ---- The base file and where its fields lie ----------------------------------- */

typedef struct kv_pos {
    size_t key, type, val; /* the key's length field, the type, the value */
} kv_pos;
typedef struct tensor_pos {
    size_t name, n_dims, ne, type, offset;
} tensor_pos;

#define N_KV      9
#define N_TENSORS 4
typedef struct layout {
    kv_pos kv[N_KV];
    tensor_pos t[N_TENSORS];
    size_t header_end, data_offset, data_end;
} layout;

static uint8_t *base;
static size_t base_size;
static layout L;

static uint64_t ld(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static void st(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static size_t skip_value(size_t p, uint32_t type);
static size_t skip_array(size_t p) {
    uint32_t et = (uint32_t)ld(base + p, 4);
    uint64_t n = ld(base + p + 4, 8);
    p += 12;
    for (uint64_t i = 0; i < n; i++) p = et == GGUF_TYPE_ARRAY ? skip_array(p) : skip_value(p, et);
    return p;
}
static size_t skip_value(size_t p, uint32_t type) {
    if (type == GGUF_TYPE_STRING) return p + 8 + ld(base + p, 8);
    if (type == GGUF_TYPE_ARRAY) return skip_array(p);
    return p + gguf_vtype_size((gguf_vtype)type);
}

static void walk(void) {
    size_t p = 24;
    for (int i = 0; i < N_KV; i++) {
        L.kv[i].key = p;
        p += 8 + ld(base + p, 8);
        L.kv[i].type = p;
        L.kv[i].val = p + 4;
        p = skip_value(p + 4, (uint32_t)ld(base + p, 4));
    }
    for (int i = 0; i < N_TENSORS; i++) {
        L.t[i].name = p;
        p += 8 + ld(base + p, 8);
        L.t[i].n_dims = p;
        L.t[i].ne = p + 4;
        p += 4 + 8 * ld(base + p, 4);
        L.t[i].type = p;
        L.t[i].offset = p + 4;
        p += 12;
    }
    L.header_end = p;
    L.data_offset = (p + 31) / 32 * 32;
}

static uint8_t tensor_bytes[4][64];

static void build_base(void) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "corrupt");
    gguf_writer_set_u32(w, "general.alignment", 32);
    gguf_writer_set_u32(w, "dup.a1", 1);
    gguf_writer_set_u32(w, "dup.a2", 2);
    gguf_writer_set_str(w, "s", "some string value");
    const char *strs[] = {"a", "bb", "ccc"};
    gguf_writer_set_arr_str(w, "strs", strs, 3);
    int32_t ints[4] = {1, 2, 3, 4};
    gguf_writer_set_arr(w, "ints", GGUF_TYPE_INT32, ints, 4);
    gguf_value inner[2] = {
        {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 2, {.raw = (const uint8_t *)ints}}},
        {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 1, {.raw = (const uint8_t *)(ints + 2)}}},
    };
    gguf_value outer = {.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 2, {.arrays = inner}}};
    gguf_writer_set_value(w, (gguf_str){4, "nest"}, &outer);
    gguf_writer_set_f32(w, "f", 1.5f);
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 64; b++) tensor_bytes[i][b] = (uint8_t)(i * 64 + b);
    cera_error err = {0};
    int64_t a[2] = {8, 2}, b[2] = {32, 2}, c[1] = {16}, d[4] = {4, 1, 1, 2};
    CHECK(!gguf_writer_add_tensor(w, "w.a", CERA_TYPE_F32, 2, a, tensor_bytes[0], &err), "%s", err.message);
    CHECK(!gguf_writer_add_tensor(w, "w.b", CERA_TYPE_Q4_0, 2, b, tensor_bytes[1], &err), "%s", err.message);
    CHECK(!gguf_writer_add_tensor(w, "w.c", CERA_TYPE_F16, 1, c, tensor_bytes[2], &err), "%s", err.message);
    CHECK(!gguf_writer_add_tensor(w, "w.d", CERA_TYPE_F32, 4, d, tensor_bytes[3], &err), "%s", err.message);
    void *data;
    CHECK(!gguf_writer_to_memory(w, &data, &base_size, &err), "%s", err.message);
    base = data;
    gguf_writer_free(w);
    walk();
    /* w.a 64 bytes at 0, w.b 36 at 64, w.c 32 at 128, w.d 32 at 160: the last ends at 192 */
    L.data_end = L.data_offset + 192;
    CHECK(L.data_end == base_size, "layout: data ends at %zu, file is %zu bytes", L.data_end, base_size);
}

/* ---- Running one case -------------------------------------------------------------- */

/* Reads everything a parsed file offers, so ASan sees any pointer out of bounds. */
static uint64_t touch(const gguf_file *f) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_value *v = &f->kv[i].value;
        for (uint64_t j = 0; j < f->kv[i].key.len; j++) sum += (uint8_t)f->kv[i].key.data[j];
        if (v->type == GGUF_TYPE_STRING)
            for (uint64_t j = 0; j < v->v.str.len; j++) sum += (uint8_t)v->v.str.data[j];
        if (v->type == GGUF_TYPE_ARRAY) {
            const gguf_array *a = &v->v.arr;
            if (a->type == GGUF_TYPE_STRING)
                for (uint64_t j = 0; j < a->n; j++)
                    sum += a->u.strs[j].len ? (uint8_t)a->u.strs[j].data[0] : 0;
            else if (a->type != GGUF_TYPE_ARRAY)
                for (uint64_t j = 0; j < a->n; j++) sum += (uint64_t)gguf_arr_i64(a, j);
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        const uint8_t *d = t->data;
        sum += d[0] + d[t->nbytes - 1];
        if ((const uint8_t *)t->data + t->nbytes > f->base + f->size) sum = 0, test_failed++;
    }
    return sum;
}

static int n_cases;

/* Opens a copy of buf[0, size); returns the status and fills err. */
static cera_status open_copy(const uint8_t *buf, size_t size, cera_error *err) {
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, buf, size);
    gguf_file *f = (gguf_file *)1;
    memset(err, 0, sizeof *err);
    cera_status s = gguf_open_memory(copy, size, &f, err);
    n_cases++;
    if (s == CERA_OK) {
        CHECK(f && f != (gguf_file *)1, "OK without a file");
        if (f && f != (gguf_file *)1) {
            touch(f);
            gguf_close(f);
        }
    } else {
        CHECK(f == NULL, "failure left *out set");
        CHECK(err->status == s && err->message[0], "status %d without message", s);
    }
    free(copy);
    return s;
}

/* One case: the status and a piece of the message must match. */
static void expect(const uint8_t *buf, size_t size, cera_status want, const char *msg, const char *what) {
    cera_error err;
    cera_status s = open_copy(buf, size, &err);
    CHECK(s == want && (!msg || strstr(err.message, msg)), "%s: got %s '%s', want %s '%s'", what,
          cera_status_str(s), err.message, cera_status_str(want), msg ? msg : "");
}

/* A patched copy of the base file: value v (n bytes) at position pos. */
static void expect_patch(size_t pos, uint64_t v, int n, cera_status want, const char *msg, const char *what) {
    uint8_t *b = malloc(base_size);
    memcpy(b, base, base_size);
    st(b + pos, v, n);
    expect(b, base_size, want, msg, what);
    free(b);
}

/* ---- The cases ------------------------------------------------------------------- */

static void truncations(void) {
    char what[64];
    for (size_t n = 0; n < L.data_offset; n++) {
        cera_error err;
        cera_status s = open_copy(base, n, &err);
        bool specific = strstr(err.message, "truncated") || strstr(err.message, "past the end") ||
                        strstr(err.message, "cannot fit");
        CHECK(s == CERA_ERR_FORMAT && specific, "cut at %zu: %s '%s'", n, cera_status_str(s), err.message);
    }
    /* inside the data: fine once the last tensor is whole (the trailing padding is optional) */
    for (size_t n = L.data_offset; n <= base_size; n += 3) {
        snprintf(what, sizeof what, "cut at data byte %zu", n);
        if (n < L.data_end)
            expect(base, n, CERA_ERR_FORMAT, "runs past the end of the data section", what);
        else
            expect(base, n, CERA_OK, NULL, what);
    }
}

/* Every header byte flipped: whatever the result, no crash and a consistent answer;
 * where the field is known, the specific error. */
static void flips(void) {
    uint8_t *b = malloc(base_size);
    for (size_t i = 0; i < L.header_end; i++) {
        memcpy(b, base, base_size);
        b[i] ^= 0xff;
        cera_error err;
        cera_status s = open_copy(b, base_size, &err);
        CHECK(s == CERA_OK || s == CERA_ERR_FORMAT || s == CERA_ERR_UNSUPPORTED, "flip %zu: %s", i,
              cera_status_str(s));
        if (i < 4) CHECK(s == CERA_ERR_FORMAT && strstr(err.message, "not a GGUF file"), "flip magic %zu", i);
        if (i >= 4 && i < 8)
            CHECK(s == CERA_ERR_UNSUPPORTED && strstr(err.message, "version"), "flip version %zu: %s", i,
                  err.message);
        /* the top byte of a count or length makes it astronomically large */
        if (i == 15 || i == 23)
            CHECK(s == CERA_ERR_FORMAT && strstr(err.message, "cannot fit"), "flip count %zu: %s", i,
                  err.message);
        for (int k = 0; k < N_KV; k++)
            if (i == L.kv[k].key + 7)
                CHECK(s == CERA_ERR_FORMAT && strstr(err.message, "key length"), "flip key %d length: %s", k,
                      err.message);
        for (int k = 0; k < N_TENSORS; k++) {
            if (i == L.t[k].name + 7)
                CHECK(s == CERA_ERR_FORMAT && strstr(err.message, "name length"),
                      "flip tensor %d name length: %s", k, err.message);
            if (i == L.t[k].type)
                CHECK(s == CERA_ERR_UNSUPPORTED && strstr(err.message, "unknown tensor type"),
                      "flip tensor %d type: %s", k, err.message);
            if (i == L.t[k].n_dims)
                CHECK(s == CERA_ERR_FORMAT && strstr(err.message, "dimensions"), "flip tensor %d n_dims: %s",
                      k, err.message);
            if (i == L.t[k].ne + 7)
                CHECK(s == CERA_ERR_FORMAT && strstr(err.message, "must be at least 1"),
                      "flip tensor %d ne: %s", k, err.message);
        }
    }
    free(b);
}

static void header_fields(void) {
    expect(base, 0, CERA_ERR_FORMAT, "truncated", "empty buffer");
    expect((const uint8_t *)"GGUG\3\0\0\0", 8, CERA_ERR_FORMAT, "not a GGUF file", "bad magic");
    expect_patch(4, 0, 4, CERA_ERR_FORMAT, "version 0", "version 0");
    expect_patch(4, 1, 4, CERA_ERR_UNSUPPORTED, "version 1", "version 1");
    expect_patch(4, 4, 4, CERA_ERR_UNSUPPORTED, "version 4", "version 4");
    expect_patch(4, 0x03000000, 4, CERA_ERR_UNSUPPORTED, "big-endian", "big-endian v3");
    expect_patch(4, 0x02000000, 4, CERA_ERR_UNSUPPORTED, "big-endian", "big-endian v2");
    expect_patch(4, 2, 4, CERA_OK, NULL, "version 2");
    expect_patch(8, 1ull << 60, 8, CERA_ERR_FORMAT, "tensors cannot fit", "n_tensors 2^60");
    expect_patch(8, UINT64_MAX, 8, CERA_ERR_FORMAT, "tensors cannot fit", "n_tensors 2^64-1");
    expect_patch(16, 1ull << 60, 8, CERA_ERR_FORMAT, "keys cannot fit", "n_kv 2^60");
    expect_patch(16, UINT64_MAX, 8, CERA_ERR_FORMAT, "keys cannot fit", "n_kv 2^64-1");
    expect_patch(16, N_KV + 1, 8, CERA_ERR_FORMAT, NULL, "one key too many");
    expect_patch(8, N_TENSORS + 1, 8, CERA_ERR_FORMAT, NULL, "one tensor too many");
    /* one tensor fewer: the last info becomes padding, the rest still fits */
    expect_patch(8, N_TENSORS - 1, 8, CERA_OK, NULL, "one tensor too few");
    /* a bare header claiming many keys fails at once, without allocating for them */
    uint8_t hdr[24 + 16] = {'G', 'G', 'U', 'F', 3};
    st(hdr + 16, 1ull << 40, 8);
    expect(hdr, sizeof hdr, CERA_ERR_FORMAT, "keys cannot fit", "bare header, 2^40 keys");
    cera_error err;
    gguf_file *f = NULL;
    CHECK(gguf_open_memory(NULL, 5, &f, &err) == CERA_ERR_INVALID_ARG && !f, "NULL buffer");
}

static void kv_fields(void) {
    expect_patch(L.kv[0].key, 1ull << 60, 8, CERA_ERR_FORMAT, "key length 1152921504606846976",
                 "key length 2^60");
    expect_patch(L.kv[0].key, 0, 8, CERA_ERR_FORMAT, "key 0 is empty", "empty key");
    expect_patch(L.kv[0].val, 1ull << 62, 8, CERA_ERR_FORMAT, "string value length", "string length 2^62");
    expect_patch(L.kv[0].val, UINT64_MAX, 8, CERA_ERR_FORMAT, "string value length", "string length 2^64-1");
    expect_patch(L.kv[4].val, L.header_end, 8, CERA_ERR_FORMAT, NULL, "string swallowing the tensor infos");
    expect_patch(L.kv[0].type, 13, 4, CERA_ERR_FORMAT, "unknown value type 13", "value type 13");
    expect_patch(L.kv[0].type, UINT32_MAX, 4, CERA_ERR_FORMAT, "unknown value type 4294967295",
                 "value type 2^32-1");
    expect_patch(L.kv[5].val, 13, 4, CERA_ERR_FORMAT, "unknown array element type 13", "element type 13");
    expect_patch(L.kv[5].val + 4, 1ull << 61, 8, CERA_ERR_FORMAT, "strings at byte", "string array 2^61");
    expect_patch(L.kv[5].val + 12 + 8 + 1 + 7, 0x80, 1, CERA_ERR_FORMAT, "array string length",
                 "second string of an array too long");
    expect_patch(L.kv[6].val + 4, 1ull << 62, 8, CERA_ERR_FORMAT, "int32 at byte", "int32 array 2^62");
    expect_patch(L.kv[6].val + 4, (UINT64_MAX / 4) + 2, 8, CERA_ERR_FORMAT, "int32 at byte",
                 "int32 array whose byte count wraps");
    expect_patch(L.kv[7].val + 4, 1ull << 59, 8, CERA_ERR_FORMAT, "arrays at byte", "nested array 2^59");
    expect_patch(L.kv[7].val + 12, 13, 4, CERA_ERR_FORMAT, "unknown array element type",
                 "inner element type");
    expect_patch(L.kv[7].val + 16, 1ull << 60, 8, CERA_ERR_FORMAT, "int32 at byte", "inner length 2^60");
    expect_patch(L.kv[3].key + 8 + 5, '1', 1, CERA_ERR_FORMAT, "key 3 'dup.a1': duplicate key (also key 2)",
                 "duplicate key");
    expect_patch(L.kv[1].val, 0, 4, CERA_ERR_FORMAT, "general.alignment 0 is not a power of two",
                 "alignment 0");
    expect_patch(L.kv[1].val, 48, 4, CERA_ERR_FORMAT, "general.alignment 48 is not a power of two",
                 "alignment 48");
    expect_patch(L.kv[1].type, GGUF_TYPE_INT32, 4, CERA_ERR_FORMAT, "must be a uint32", "alignment int32");
    expect_patch(L.kv[1].val, 1u << 20, 4, CERA_ERR_FORMAT, "past the end of the file", "alignment 2^20");
    expect_patch(L.kv[1].val, 16, 4, CERA_OK, NULL, "alignment 16 (offsets stay aligned)");
    expect_patch(L.kv[1].val, 4, 4, CERA_ERR_FORMAT, "general.alignment 4 is not a multiple of 8",
                 "alignment 4");
    expect_patch(L.kv[1].val, 1, 4, CERA_ERR_FORMAT, "general.alignment 1 is not a multiple of 8",
                 "alignment 1");
}

static void tensor_fields(void) {
    const tensor_pos *t0 = &L.t[0], *t1 = &L.t[1], *t3 = &L.t[3];
    expect_patch(t0->name, 1ull << 60, 8, CERA_ERR_FORMAT, "name length", "name length 2^60");
    expect_patch(t1->name + 8 + 2, 'a', 1, CERA_ERR_FORMAT,
                 "tensor 1 'w.a': duplicate tensor name (also tensor 0)", "duplicate tensor name");
    expect_patch(t0->n_dims, 0, 4, CERA_ERR_FORMAT, "0 dimensions", "n_dims 0");
    expect_patch(t0->n_dims, 5, 4, CERA_ERR_FORMAT, "5 dimensions", "n_dims 5");
    expect_patch(t0->n_dims, UINT32_MAX, 4, CERA_ERR_FORMAT, "4294967295 dimensions", "n_dims 2^32-1");
    expect_patch(t0->ne, 0, 8, CERA_ERR_FORMAT, "tensor 0 'w.a': dimension 0 is 0", "ne0 = 0");
    expect_patch(t0->ne + 8, 0, 8, CERA_ERR_FORMAT, "dimension 1 is 0", "ne1 = 0");
    expect_patch(t3->ne + 24, UINT64_MAX, 8, CERA_ERR_FORMAT, "dimension 3 is -1", "ne3 = -1");
    expect_patch(t0->ne, 1ull << 62, 8, CERA_ERR_FORMAT, "overflows int64", "ne0 2^62 * ne1 2");
    expect_patch(t3->ne + 16, 1ull << 61, 8, CERA_ERR_FORMAT, "overflows int64 at dimension 2",
                 "ne 4*1*2^61");
    expect_patch(t3->ne + 16, 1ull << 60, 8, CERA_ERR_FORMAT, "overflows int64 at dimension 3",
                 "ne 4*1*2^60*2");
    expect_patch(t3->ne + 8, INT64_MAX, 8, CERA_ERR_FORMAT, "overflows int64 at dimension 1",
                 "ne1 int64 max");
    /* 2^62 f32 elements fit int64 but not a uint64 byte count */
    {
        uint8_t *b = malloc(base_size);
        memcpy(b, base, base_size);
        st(b + t0->ne, 1ull << 62, 8);
        st(b + t0->ne + 8, 1, 8);
        expect(b, base_size, CERA_ERR_FORMAT, "size in bytes overflows", "f32 bytes overflow");
        st(b + t0->ne, 1ull << 40, 8);
        expect(b, base_size, CERA_ERR_FORMAT, "runs past the end of the data section", "2^40 elements");
        free(b);
    }
    expect_patch(t1->ne, 31, 8, CERA_ERR_FORMAT, "row length 31 is not a multiple of the q4_0 block size 32",
                 "q4_0 row 31");
    expect_patch(t0->type, 4, 4, CERA_ERR_UNSUPPORTED, "tensor 0 'w.a': unknown tensor type id 4", "type 4");
    expect_patch(t0->type, 39, 4, CERA_ERR_UNSUPPORTED, "unknown tensor type id 39", "type 39");
    expect_patch(t0->type, 1000, 4, CERA_ERR_UNSUPPORTED, "unknown tensor type id 1000", "type 1000");
    expect_patch(t0->type, UINT32_MAX, 4, CERA_ERR_UNSUPPORTED, "unknown tensor type id 4294967295",
                 "type -1");
    expect_patch(t0->type, CERA_TYPE_F16, 4, CERA_OK, NULL, "f32 retyped f16 (smaller, still valid)");
    expect_patch(t1->offset, 65, 8, CERA_ERR_FORMAT, "offset 65 is not a multiple of the alignment 32",
                 "misaligned offset");
    expect_patch(t0->offset, 1ull << 40, 8, CERA_ERR_FORMAT, "runs past the end of the data section",
                 "offset 2^40");
    expect_patch(t0->offset, UINT64_MAX - 31, 8, CERA_ERR_FORMAT, "runs past the end of the data section",
                 "offset 2^64-32 (would wrap)");
    expect_patch(t0->offset, 192, 8, CERA_ERR_FORMAT, "runs past the end of the data section",
                 "offset at the end of the data");
    expect_patch(t1->offset, 0, 8, CERA_ERR_FORMAT, "overlaps", "same offset as tensor 0");
    expect_patch(t1->offset, 32, 8, CERA_ERR_FORMAT, "overlaps", "inside tensor 0");
    expect_patch(L.t[2].offset, 96, 8, CERA_ERR_FORMAT, "overlaps", "tail of tensor 1");
}

/* A chain of `levels` nested arrays around one int32. */
static void nesting(int levels, cera_status want) {
    gguf_writer *w = gguf_writer_new();
    int32_t one = 1;
    gguf_value v[40];
    v[0] =
        (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_INT32, 1, {.raw = (const uint8_t *)&one}}};
    for (int i = 1; i < levels; i++)
        v[i] = (gguf_value){.type = GGUF_TYPE_ARRAY, .v.arr = {GGUF_TYPE_ARRAY, 1, {.arrays = &v[i - 1]}}};
    gguf_writer_set_value(w, (gguf_str){4, "deep"}, &v[levels - 1]);
    void *data;
    size_t size;
    cera_error err = {0};
    CHECK(gguf_writer_to_memory(w, &data, &size, &err) == CERA_OK, "%s", err.message);
    char what[64];
    snprintf(what, sizeof what, "%d nested arrays", levels);
    expect(data, size, want, want ? "nested deeper than 16" : NULL, what);
    free(data);
    gguf_writer_free(w);
}

static void through_files(void) {
    cera_error err;
    gguf_file *f = NULL;
    CHECK(gguf_open(CERA_BINARY_DIR "/does-not-exist.gguf", &f, &err) == CERA_ERR_IO &&
              strstr(err.message, "does-not-exist.gguf: cannot open"),
          "missing file: %s", err.message);
    CHECK(gguf_open(CERA_BINARY_DIR, &f, &err) == CERA_ERR_IO && strstr(err.message, "not a regular file"),
          "directory: %s", err.message);
    char path[512];
    snprintf(path, sizeof path, "%s/corrupt-%d.gguf", CERA_BINARY_DIR, (int)getpid());
    FILE *fp = fopen(path, "wb");
    fwrite(base, 1, L.header_end - 3, fp);
    fclose(fp);
    CHECK(gguf_open(path, &f, &err) == CERA_ERR_FORMAT && !strncmp(err.message, path, strlen(path)) &&
              strstr(err.message, "truncated"),
          "truncated file: %s", err.message);
    fp = fopen(path, "wb");
    fclose(fp);
    CHECK(gguf_open(path, &f, &err) == CERA_ERR_FORMAT && strstr(err.message, "truncated"), "empty file: %s",
          err.message);
    remove(path);
}

static void write_seeds(const char *dir) {
    struct {
        const char *name;
        size_t size;
        size_t pos;
        uint64_t v;
        int n;
    } seeds[] = {
        {"valid", base_size, 0, 'G', 1},
        {"truncated-header", L.header_end - 5, 0, 'G', 1},
        {"version2", base_size, 4, 2, 4},
        {"overlap", base_size, L.t[1].offset, 0, 8},
        {"dup-key", base_size, L.kv[3].key + 13, '1', 1},
    };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        uint8_t *b = malloc(base_size);
        memcpy(b, base, base_size);
        st(b + seeds[i].pos, seeds[i].v, seeds[i].n);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, seeds[i].name);
        FILE *fp = fopen(path, "wb");
        CHECK(fp && fwrite(b, 1, seeds[i].size, fp) == seeds[i].size, "write %s", path);
        if (fp) fclose(fp);
        free(b);
    }
}

int main(int argc, char **argv) {
    build_base();
    if (argc == 3 && !strcmp(argv[1], "--seeds")) {
        write_seeds(argv[2]);
        free(base);
        return test_finish();
    }
    expect(base, base_size, CERA_OK, NULL, "the base file");
    truncations();
    flips();
    header_fields();
    kv_fields();
    tensor_fields();
    nesting(16, CERA_OK);
    nesting(17, CERA_ERR_FORMAT);
    nesting(40, CERA_ERR_FORMAT);
    through_files();
    printf("%d broken files opened\n", n_cases);
    free(base);
    return test_finish();
}

/*
 * fuzz_gguf.c — libFuzzer harness for the GGUF reader (and, through it, the writer).
 *
 * Any input goes to gguf_open_memory. When it is accepted, every key, value, array
 * element and tensor is read (so ASan catches a pointer the validation let through),
 * every lookup and getter is exercised, and the file is re-serialized with the writer
 * and parsed again: an accepted file must survive that round trip with the same
 * counts, values' types and tensor shapes. A rejected input must leave an error
 * message. Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt when CERA_FUZZ
 * is on, otherwise linked with replay.c to replay the seed corpus as a normal test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps the reads from being optimized away */

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static void walk_array(const gguf_array *a, int depth) {
    REQUIRE(depth <= 64);
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_TYPE_STRING) {
            gguf_str s = a->u.strs[i];
            if (s.len) sink += (uint8_t)s.data[0] + (uint8_t)s.data[s.len - 1];
        } else if (a->type == GGUF_TYPE_ARRAY) {
            REQUIRE(a->u.arrays[i].type == GGUF_TYPE_ARRAY);
            walk_array(&a->u.arrays[i].v.arr, depth + 1);
        } else {
            double d = gguf_arr_f64(a, i); /* may be NaN or huge: take its bits, not a conversion */
            uint64_t bits;
            memcpy(&bits, &d, sizeof bits);
            sink += (uint64_t)gguf_arr_i64(a, i) + bits;
        }
    }
    sink += (uint64_t)gguf_arr_i64(a, a->n); /* out of range: 0, no read */
}

/* Copies a name into a C string; false when it holds a NUL or is too long to copy. */
static bool c_name(gguf_str s, char *buf, size_t cap) {
    if (s.len >= cap || memchr(s.data, 0, (size_t)s.len)) return false;
    gguf_str_copy(s, buf, cap);
    return true;
}

static void walk(const gguf_file *f) {
    REQUIRE(f->version == 2 || f->version == 3);
    REQUIRE(f->alignment && !(f->alignment & (f->alignment - 1)));
    REQUIRE(f->data_offset <= f->size);
    char name[512];
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        REQUIRE(kv->key.len > 0);
        sink += (uint8_t)kv->key.data[kv->key.len - 1];
        if (kv->value.type == GGUF_TYPE_STRING && kv->value.v.str.len)
            sink += (uint8_t)kv->value.v.str.data[kv->value.v.str.len - 1];
        if (kv->value.type == GGUF_TYPE_ARRAY) walk_array(&kv->value.v.arr, 1);
        if (!c_name(kv->key, name, sizeof name)) continue;
        REQUIRE(gguf_find_kv(f, name) == kv);
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        float f32;
        bool b;
        gguf_str s;
        const gguf_array *a;
        sink += gguf_get_u32(f, name, &u32) + gguf_get_i32(f, name, &i32) + gguf_get_u64(f, name, &u64) +
                gguf_get_f32(f, name, &f32) + gguf_get_bool(f, name, &b) + gguf_get_str(f, name, &s) +
                gguf_get_arr(f, name, &a);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        REQUIRE(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS && cera_type_get(t->type));
        REQUIRE(t->offset % f->alignment == 0 && t->nbytes > 0);
        const uint8_t *d = t->data;
        REQUIRE(d >= f->base + f->data_offset && d + t->nbytes <= f->base + f->size);
        sink += d[0] + d[t->nbytes - 1] + (uint64_t)gguf_tensor_nelements(t);
        if (c_name(t->name, name, sizeof name)) REQUIRE(gguf_find_tensor(f, name) == t);
    }
}

/* Writes an accepted file back out and reads it again: the same structure must come back. */
static void reserialize(const gguf_file *f) {
    /* padding every tensor to a huge alignment could need gigabytes: skip those */
    if (f->alignment > 65536 || (f->n_tensors + 1) * f->alignment > (64u << 20)) return;
    gguf_writer *w = gguf_writer_new();
    if (!w) return;
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    char name[512];
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (!c_name(t->name, name, sizeof name)) goto done;
        REQUIRE(gguf_writer_add_tensor_sized(w, name, t->type, t->n_dims, t->ne, t->data, t->nbytes, NULL) ==
                CERA_OK);
    }
    void *out;
    size_t out_size;
    if (gguf_writer_to_memory(w, &out, &out_size, NULL) == CERA_OK) {
        gguf_file *g = NULL;
        cera_error err;
        REQUIRE(gguf_open_memory(out, out_size, &g, &err) == CERA_OK);
        REQUIRE(g->n_kv == f->n_kv && g->n_tensors == f->n_tensors && g->alignment == f->alignment);
        for (uint64_t i = 0; i < f->n_kv; i++) {
            REQUIRE(g->kv[i].key.len == f->kv[i].key.len && g->kv[i].value.type == f->kv[i].value.type);
            REQUIRE(!memcmp(g->kv[i].key.data, f->kv[i].key.data, (size_t)f->kv[i].key.len));
        }
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *a = &f->tensors[i], *b = &g->tensors[i];
            REQUIRE(a->type == b->type && a->nbytes == b->nbytes && !memcmp(a->ne, b->ne, sizeof a->ne));
            REQUIRE(!memcmp(a->data, b->data, (size_t)a->nbytes));
        }
        gguf_close(g);
        free(out);
    }
done:
    gguf_writer_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *f = NULL;
    cera_error err = {0};
    cera_status st = gguf_open_memory(data, size, &f, &err);
    if (st != CERA_OK) {
        REQUIRE(f == NULL && err.status == st && err.message[0]);
        return 0;
    }
    walk(f);
    reserialize(f);
    gguf_close(f);
    return 0;
}

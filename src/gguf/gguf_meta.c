/*
 * gguf_meta.c — looking things up in a parsed GGUF file: keys and tensors by name
 * (through the hash indexes built at open), typed getters that convert between
 * integer widths when the value fits, and element access into scalar arrays (which
 * point at raw little-endian bytes in the file).
 */
#include <string.h>

#include "gguf/gguf_internal.h"

size_t gguf_vtype_size(gguf_vtype t) {
    switch (t) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *const names[GGUF_TYPE_COUNT] = {
        "uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
        "bool",  "string", "array",  "uint64", "int64",  "float64",
    };
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "unknown";
}

bool gguf_str_eq(gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || !memcmp(s.data, cstr, n));
}

char *gguf_str_copy(gguf_str s, char *buf, size_t cap) {
    if (!cap) return buf;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    if (n) memcpy(buf, s.data, n);
    buf[n] = '\0';
    return buf;
}

static const void *lookup(const struct gguf_index *ix, const void *items, uint64_t n, size_t stride,
                          size_t name_off, const char *name) {
    if (!items || !name) return NULL;
    size_t len = strlen(name);
    if (!ix) { /* not built by the parser: scan */
        for (uint64_t i = 0; i < n; i++) {
            const gguf_str *s = (const gguf_str *)((const char *)items + i * stride + name_off);
            if (gguf_str_eq(*s, name)) return (const char *)items + i * stride;
        }
        return NULL;
    }
    for (uint64_t h = gguf_hash(name, len) & ix->mask;; h = (h + 1) & ix->mask) {
        uint64_t slot = ix->slots[h];
        if (!slot) return NULL;
        const char *item = (const char *)items + (slot - 1) * stride;
        if (gguf_str_eq(*(const gguf_str *)(item + name_off), name)) return item;
    }
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    return lookup(f->kv_idx, f->kv, f->n_kv, sizeof(gguf_kv), offsetof(gguf_kv, key), key);
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    return lookup(f->ten_idx, f->tensors, f->n_tensors, sizeof(gguf_tensor), offsetof(gguf_tensor, name),
                  name);
}

/* ---- Typed getters ------------------------------------------------------------ */

static bool is_unsigned(gguf_vtype t) {
    return t == GGUF_TYPE_UINT8 || t == GGUF_TYPE_UINT16 || t == GGUF_TYPE_UINT32 || t == GGUF_TYPE_UINT64;
}
static bool is_signed(gguf_vtype t) {
    return t == GGUF_TYPE_INT8 || t == GGUF_TYPE_INT16 || t == GGUF_TYPE_INT32 || t == GGUF_TYPE_INT64;
}

/* The value as an integer in [lo, hi] (hi <= INT64_MAX) or as a uint64 (wide). */
static bool get_int(const gguf_file *f, const char *key, int64_t lo, uint64_t hi, uint64_t *bits) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return false;
    const gguf_value *v = &kv->value;
    if (is_unsigned(v->type)) {
        if (v->v.u64 > hi) return false;
        *bits = v->v.u64;
        return true;
    }
    if (is_signed(v->type)) {
        if (v->v.i64 < lo || (v->v.i64 >= 0 && (uint64_t)v->v.i64 > hi)) return false;
        *bits = (uint64_t)v->v.i64;
        return true;
    }
    return false;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    uint64_t b;
    if (!get_int(f, key, 0, UINT32_MAX, &b)) return false;
    *out = (uint32_t)b;
    return true;
}

bool gguf_get_i32(const gguf_file *f, const char *key, int32_t *out) {
    uint64_t b;
    if (!get_int(f, key, INT32_MIN, INT32_MAX, &b)) return false;
    *out = (int32_t)(int64_t)b;
    return true;
}

bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
    return get_int(f, key, 0, UINT64_MAX, out);
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || (kv->value.type != GGUF_TYPE_FLOAT32 && kv->value.type != GGUF_TYPE_FLOAT64)) return false;
    *out = (float)kv->value.v.f64;
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_TYPE_BOOL) return false;
    *out = kv->value.v.u64 != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_TYPE_STRING) return false;
    *out = kv->value.v.str;
    return true;
}

bool gguf_get_arr(const gguf_file *f, const char *key, const gguf_array **out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_TYPE_ARRAY) return false;
    *out = &kv->value.v.arr;
    return true;
}

/* ---- Scalar array elements ------------------------------------------------------ */

int64_t gguf_arr_i64(const gguf_array *a, uint64_t i) {
    if (!a || i >= a->n || !gguf_vtype_size(a->type)) return 0;
    const uint8_t *p = a->u.raw + i * gguf_vtype_size(a->type);
    switch (a->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_BOOL: return p[0];
    case GGUF_TYPE_INT8: return (int8_t)p[0];
    case GGUF_TYPE_UINT16: return gguf_ld16(p);
    case GGUF_TYPE_INT16: return (int16_t)gguf_ld16(p);
    case GGUF_TYPE_UINT32: return gguf_ld32(p);
    case GGUF_TYPE_INT32: return (int32_t)gguf_ld32(p);
    case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT64: return (int64_t)gguf_ld64(p);
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: {
        double d = a->type == GGUF_TYPE_FLOAT32 ? gguf_ldf32(p) : gguf_ldf64(p);
        /* Out-of-range float to integer conversion is undefined: clamp first. */
        if (!(d == d)) return 0;
        if (d >= 9.2233720368547758e18) return INT64_MAX;
        if (d <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)d;
    }
    default: return 0;
    }
}

double gguf_arr_f64(const gguf_array *a, uint64_t i) {
    if (!a || i >= a->n || !gguf_vtype_size(a->type)) return 0;
    const uint8_t *p = a->u.raw + i * gguf_vtype_size(a->type);
    switch (a->type) {
    case GGUF_TYPE_FLOAT32: return gguf_ldf32(p);
    case GGUF_TYPE_FLOAT64: return gguf_ldf64(p);
    case GGUF_TYPE_UINT64: return (double)gguf_ld64(p);
    default: return (double)gguf_arr_i64(a, i);
    }
}

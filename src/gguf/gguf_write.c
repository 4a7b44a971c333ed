/*
 * gguf_write.c — building a version-3 GGUF file (for quantize, tools, tests and fuzz
 * seeds).
 *
 * Each key/value is serialized to its file bytes when it is set (so replacing a key
 * keeps its position and later writes are plain copies); tensors are remembered by
 * reference and their data copied only when the file is written. The setters return
 * nothing: an allocation failure or a bad argument is remembered and reported by
 * gguf_writer_write / gguf_writer_to_memory, so callers check once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fileio.h"
#include "gguf/gguf_internal.h"

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} wbuf;

typedef struct wkv {
    char *key;
    size_t key_len;
    wbuf val; /* u32 type + payload, as in the file */
} wkv;

typedef struct wtensor {
    char *name;
    size_t name_len;
    cera_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;
    uint64_t nbytes;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    bool oom;
    cera_status bad; /* the first bad argument to a void setter */
    char bad_msg[200];
};

/* ---- Byte buffers -------------------------------------------------------------- */

static void put(wbuf *b, const void *data, size_t n) {
    if (b->oom || !n) return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u32(wbuf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}
static void put_u64(wbuf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_str(wbuf *b, const char *s, uint64_t len) {
    put_u64(b, len);
    put(b, s, (size_t)len);
}

/* ---- Key/values ------------------------------------------------------------------ */

static void set_bad(gguf_writer *w, const char *fmt, const char *key) {
    if (w->bad) return;
    w->bad = CERA_ERR_INVALID_ARG;
    snprintf(w->bad_msg, sizeof w->bad_msg, fmt, key);
}

static wkv *find(gguf_writer *w, const char *key, size_t len) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == len && !memcmp(w->kv[i].key, key, len)) return &w->kv[i];
    return NULL;
}

/* Stores val (ownership taken) under key, replacing any earlier value in place. */
static void set_raw(gguf_writer *w, const char *key, size_t len, wbuf val) {
    if (!w) {
        free(val.p);
        return;
    }
    if (val.oom) w->oom = true;
    if (!len) set_bad(w, "empty key%s", "");
    if (val.oom || !len) {
        free(val.p);
        return;
    }
    wkv *kv = find(w, key, len);
    if (kv) {
        free(kv->val.p);
        kv->val = val;
        return;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *p = realloc(w->kv, cap * sizeof *p);
        if (!p) {
            w->oom = true;
            free(val.p);
            return;
        }
        w->kv = p;
        w->cap_kv = cap;
    }
    char *k = malloc(len);
    if (!k) {
        w->oom = true;
        free(val.p);
        return;
    }
    memcpy(k, key, len);
    w->kv[w->n_kv++] = (wkv){k, len, val};
}

static void set_scalar(gguf_writer *w, const char *key, gguf_vtype t, const void *le, size_t n) {
    wbuf b = {0};
    put_u32(&b, t);
    put(&b, le, n);
    set_raw(w, key, strlen(key), b);
}

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    set_scalar(w, key, GGUF_TYPE_UINT32, x, 4);
}
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    uint32_t u = (uint32_t)v;
    uint8_t x[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    set_scalar(w, key, GGUF_TYPE_INT32, x, 4);
}
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    wbuf b = {0};
    put_u32(&b, GGUF_TYPE_UINT64);
    put_u64(&b, v);
    set_raw(w, key, strlen(key), b);
}
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    uint8_t x[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    set_scalar(w, key, GGUF_TYPE_FLOAT32, x, 4);
}
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t x = v ? 1 : 0;
    set_scalar(w, key, GGUF_TYPE_BOOL, &x, 1);
}
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    wbuf b = {0};
    put_u32(&b, GGUF_TYPE_STRING);
    put_str(&b, v, strlen(v));
    set_raw(w, key, strlen(key), b);
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype t, const void *data, uint64_t n) {
    size_t es = gguf_vtype_size(t);
    if (!w) return;
    if (!es) return set_bad(w, "gguf_writer_set_arr: key '%s': element type is not a fixed-size scalar", key);
    if (n > SIZE_MAX / es) {
        w->oom = true;
        return;
    }
    wbuf b = {0};
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, t);
    put_u64(&b, n);
    put(&b, data, (size_t)n * es);
    set_raw(w, key, strlen(key), b);
}

void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    wbuf b = {0};
    put_u32(&b, GGUF_TYPE_ARRAY);
    put_u32(&b, GGUF_TYPE_STRING);
    put_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) put_str(&b, v[i], strlen(v[i]));
    set_raw(w, key, strlen(key), b);
}

static bool put_array(wbuf *b, const gguf_array *a, int depth);

/* A value's payload (without its type tag); false on a type the format lacks. */
static bool put_payload(wbuf *b, const gguf_value *v, int depth) {
    uint8_t x[8];
    uint64_t u = v->v.u64;
    size_t n = gguf_vtype_size(v->type);
    switch (v->type) {
    case GGUF_TYPE_STRING: put_str(b, v->v.str.data, v->v.str.len); return true;
    case GGUF_TYPE_ARRAY: return put_array(b, &v->v.arr, depth + 1);
    case GGUF_TYPE_FLOAT32: {
        float f = (float)v->v.f64;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        u = bits;
        break;
    }
    case GGUF_TYPE_FLOAT64: memcpy(&u, &v->v.f64, 8); break;
    case GGUF_TYPE_BOOL: u = u != 0; break;
    default:
        if (!n) return false;
        break; /* integers: the low bytes of u64/i64 (same bits) */
    }
    for (size_t i = 0; i < n; i++) x[i] = (uint8_t)(u >> (8 * i));
    put(b, x, n);
    return true;
}

static bool put_array(wbuf *b, const gguf_array *a, int depth) {
    if (depth > 64) return false;
    put_u32(b, a->type);
    put_u64(b, a->n);
    size_t es = gguf_vtype_size(a->type);
    if (es) {
        if (a->n > SIZE_MAX / es) return false;
        put(b, a->u.raw, (size_t)a->n * es);
        return true;
    }
    if (a->type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < a->n; i++) put_str(b, a->u.strs[i].data, a->u.strs[i].len);
        return true;
    }
    if (a->type == GGUF_TYPE_ARRAY) {
        for (uint64_t i = 0; i < a->n; i++)
            if (!put_array(b, &a->u.arrays[i].v.arr, depth + 1)) return false;
        return true;
    }
    return false;
}

void gguf_writer_set_value(gguf_writer *w, gguf_str key, const gguf_value *v) {
    if (!w) return;
    wbuf b = {0};
    put_u32(&b, v->type);
    if (!put_payload(&b, v, 0)) {
        free(b.p);
        char k[GGUF_NAME_SHOWN + 1];
        return set_bad(w, "gguf_writer_set_value: key '%s': bad value type or nesting",
                       gguf_str_copy(key, k, sizeof k));
    }
    set_raw(w, key.data, (size_t)key.len, b);
}

void gguf_writer_remove(gguf_writer *w, const char *key) {
    if (!w) return;
    wkv *kv = find(w, key, strlen(key));
    if (!kv) return;
    free(kv->key);
    free(kv->val.p);
    size_t i = (size_t)(kv - w->kv);
    memmove(kv, kv + 1, (w->n_kv - i - 1) * sizeof *kv);
    w->n_kv--;
}

/* ---- Tensors ------------------------------------------------------------------- */

cera_status gguf_writer_add_tensor_sized(gguf_writer *w, const char *name, cera_type type, uint32_t n_dims,
                                         const int64_t *ne, const void *data, uint64_t nbytes,
                                         cera_error *err) {
    if (!w || !name || (!ne && n_dims))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "gguf_writer_add_tensor: NULL argument");
    size_t len = strlen(name);
    uint64_t size;
    cera_status st = gguf_tensor_size(type, n_dims, ne, &size, err);
    if (st) {
        if (err) err->status = CERA_ERR_INVALID_ARG;
        cera_error_prefix(err, "tensor '%s'", name);
        return CERA_ERR_INVALID_ARG;
    }
    if (nbytes != UINT64_MAX && nbytes != size)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "tensor '%s': %llu bytes given, its %s shape needs %llu",
                         name, (unsigned long long)nbytes, cera_type_get(type)->name,
                         (unsigned long long)size);
    for (size_t i = 0; i < w->n_t; i++)
        if (w->t[i].name_len == len && !memcmp(w->t[i].name, name, len))
            return cera_fail(err, CERA_ERR_INVALID_ARG, "tensor '%s' added twice", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p) {
            w->oom = true;
            return cera_fail(err, CERA_ERR_NO_MEMORY, "tensor '%s': out of memory", name);
        }
        w->t = p;
        w->cap_t = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        w->oom = true;
        return cera_fail(err, CERA_ERR_NO_MEMORY, "tensor '%s': out of memory", name);
    }
    memcpy(copy, name, len + 1);
    wtensor *t = &w->t[w->n_t++];
    *t = (wtensor){copy, len, type, n_dims, {1, 1, 1, 1}, data, size};
    for (uint32_t d = 0; d < n_dims; d++) t->ne[d] = ne[d];
    return CERA_OK;
}

cera_status gguf_writer_add_tensor(gguf_writer *w, const char *name, cera_type type, uint32_t n_dims,
                                   const int64_t *ne, const void *data, cera_error *err) {
    return gguf_writer_add_tensor_sized(w, name, type, n_dims, ne, data, UINT64_MAX, err);
}

/* ---- Output -------------------------------------------------------------------- */

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static uint64_t pad_to(uint64_t n, uint64_t a) { return n + (a - n % a) % a; }

/* Serializes everything but the tensor data; gives the alignment and data size. */
static cera_status build_header(gguf_writer *w, wbuf *h, uint64_t *align, uint64_t *data_size,
                                cera_error *err) {
    if (!w) return cera_fail(err, CERA_ERR_INVALID_ARG, "gguf writer is NULL");
    if (w->oom) return cera_fail(err, CERA_ERR_NO_MEMORY, "gguf writer: out of memory");
    if (w->bad) return cera_fail(err, w->bad, "%s", w->bad_msg);
    uint64_t a = GGUF_DEFAULT_ALIGNMENT;
    wkv *al = find(w, "general.alignment", strlen("general.alignment"));
    if (al) {
        if (al->val.n != 8 || gguf_ld32(al->val.p) != GGUF_TYPE_UINT32)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "general.alignment must be a uint32");
        a = gguf_ld32(al->val.p + 4);
        if (!a || (a & (a - 1)))
            return cera_fail(err, CERA_ERR_INVALID_ARG, "general.alignment %llu is not a power of two",
                             (unsigned long long)a);
        if (a % 8) /* the GGUF spec; the reader refuses others */
            return cera_fail(err, CERA_ERR_INVALID_ARG, "general.alignment %llu is not a multiple of 8",
                             (unsigned long long)a);
    }
    put(h, "GGUF", 4);
    put_u32(h, 3);
    put_u64(h, w->n_t);
    put_u64(h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(h, w->kv[i].key, w->kv[i].key_len);
        put(h, w->kv[i].val.p, w->kv[i].val.n);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(h, t->name, t->name_len);
        put_u32(h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(h, (uint64_t)t->ne[d]);
        put_u32(h, t->type);
        put_u64(h, off);
        if (t->nbytes > UINT64_MAX - off - a)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "tensor '%s': data section overflows", t->name);
        off = pad_to(off + t->nbytes, a);
    }
    static const uint8_t zeros[64];
    while (!h->oom && h->n % a)
        put(h, zeros, (size_t)(a - h->n % a) < sizeof zeros ? (size_t)(a - h->n % a) : sizeof zeros);
    if (h->oom) return cera_fail(err, CERA_ERR_NO_MEMORY, "gguf writer: out of memory");
    *align = a;
    *data_size = off;
    return CERA_OK;
}

cera_status gguf_writer_to_memory(gguf_writer *w, void **data, size_t *size, cera_error *err) {
    *data = NULL;
    *size = 0;
    wbuf h = {0};
    uint64_t a, data_size;
    cera_status st = build_header(w, &h, &a, &data_size, err);
    if (st) {
        free(h.p);
        return st;
    }
    if (data_size > SIZE_MAX - h.n) {
        free(h.p);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "gguf writer: %llu bytes do not fit in memory",
                         (unsigned long long)data_size);
    }
    uint8_t *out = calloc(1, h.n + (size_t)data_size); /* h.n >= 24: never 0 */
    if (!out) {
        free(h.p);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "gguf writer: out of memory (%zu bytes)",
                         h.n + (size_t)data_size);
    }
    memcpy(out, h.p, h.n);
    uint8_t *p = out + h.n;
    for (size_t i = 0; i < w->n_t; i++) {
        if (w->t[i].data) memcpy(p, w->t[i].data, (size_t)w->t[i].nbytes);
        p += pad_to(w->t[i].nbytes, a);
    }
    *data = out;
    *size = h.n + (size_t)data_size;
    free(h.p);
    return CERA_OK;
}

static bool write_zeros(FILE *fp, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (fwrite(zeros, 1, k, fp) != k) return false;
        n -= k;
    }
    return true;
}

/* Writes to a fresh temporary file beside PATH (core/fileio.h), then renames it over PATH:
 * an interrupted or failed write (a full disk, a killed quantize) never leaves a truncated
 * PATH behind, an existing PATH stays as it was until the new file is complete, and a PATH
 * that is not a regular file (a device, a FIFO) is refused rather than replaced. */
cera_status gguf_writer_write(gguf_writer *w, const char *path, cera_error *err) {
    wbuf h = {0};
    uint64_t a, data_size;
    cera_status st = build_header(w, &h, &a, &data_size, err);
    if (st) {
        free(h.p);
        cera_error_prefix(err, "%s", path);
        return st;
    }
    cera_outfile o;
    if ((st = cera_outfile_open(&o, path, false, err))) {
        free(h.p);
        return st;
    }
    FILE *fp = cera_outfile_stream(&o);
    if (!fp) {
        free(h.p);
        cera_outfile_abort(&o);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    bool ok = fwrite(h.p, 1, h.n, fp) == h.n;
    free(h.p);
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        ok = t->data ? fwrite(t->data, 1, (size_t)t->nbytes, fp) == t->nbytes : write_zeros(fp, t->nbytes);
        if (ok) ok = write_zeros(fp, pad_to(t->nbytes, a) - t->nbytes);
    }
    if (!ok) {
        const int e = errno;
        cera_outfile_abort(&o);
        return cera_fail(err, CERA_ERR_IO, "%s: cannot write: %s", path, strerror(e));
    }
    return cera_outfile_commit(&o, err);
}

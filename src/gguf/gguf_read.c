/*
 * gguf_read.c — parsing and validating a GGUF file (versions 2 and 3).
 *
 * The whole header is parsed at open, over an mmap of the file or over a caller's
 * buffer; tensor data is never touched, so opening a large model costs O(header).
 * Every count and length is checked against the bytes that remain before anything is
 * allocated for it (a 2^60 count fails at once), and every tensor is validated
 * (shape, type, alignment, bounds, no overlap) so later code can trust gguf_file.
 *
 * Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, the n_kv
 * key/values (string key, u32 type, value), the n_tensors tensor infos (string name,
 * u32 n_dims, i64 ne[n_dims], u32 type, u64 offset), padding to general.alignment,
 * then the data section that the offsets point into.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"
#include "gguf/gguf_internal.h"

/* Nested arrays deeper than this are rejected (bounds the parser's recursion). */
#define GGUF_MAX_NESTING 16

/* Smallest encodings, to bound counts by the bytes that remain. */
#define GGUF_MIN_KV_BYTES     13 /* u64 key length, u32 type, 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 32 /* u64 name length, u32 n_dims, one i64, u32 type, u64 offset */

/* ---- Arena ------------------------------------------------------------------ */

struct gguf_arena {
    gguf_arena *next;
    size_t used, cap;
};

#define ARENA_HEADER 32 /* sizeof(gguf_arena) rounded up to keep the data 16-aligned */
#define ARENA_BLOCK  (64u << 10)

void *gguf_arena_alloc(gguf_arena **a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    gguf_arena *b = *a;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        if (cap > SIZE_MAX - ARENA_HEADER) return NULL;
        b = malloc(ARENA_HEADER + cap);
        if (!b) return NULL;
        b->cap = cap;
        b->used = 0;
        /* A large one-off block goes behind the current one so its free space stays usable. */
        if (*a && n > ARENA_BLOCK) {
            b->next = (*a)->next;
            (*a)->next = b;
        } else {
            b->next = *a;
            *a = b;
        }
    }
    void *p = (char *)b + ARENA_HEADER + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void gguf_arena_free(gguf_arena *a) {
    while (a) {
        gguf_arena *next = a->next;
        free(a);
        a = next;
    }
}

uint64_t gguf_hash(const char *s, uint64_t len) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

/* ---- Reader ------------------------------------------------------------------ */

typedef struct reader {
    const uint8_t *base;
    uint64_t size, pos;
    gguf_arena **arena;
    cera_error *err;
    char what[160]; /* the item being parsed, for messages: "key 3 'general.name'" */
} reader;

static cera_status no_memory(reader *r) {
    return cera_fail(r->err, CERA_ERR_NO_MEMORY, "%s: out of memory", r->what);
}

static cera_status need(reader *r, uint64_t n, const char *field) {
    if (n <= r->size - r->pos) return CERA_OK;
    return cera_fail(r->err, CERA_ERR_FORMAT,
                     "%s: truncated: %s needs %llu bytes at byte %llu but the file has %llu bytes", r->what,
                     field, (unsigned long long)n, (unsigned long long)r->pos, (unsigned long long)r->size);
}

static cera_status rd_u32(reader *r, uint32_t *v, const char *field) {
    cera_status st = need(r, 4, field);
    if (st) return st;
    *v = gguf_ld32(r->base + r->pos);
    r->pos += 4;
    return CERA_OK;
}

static cera_status rd_u64(reader *r, uint64_t *v, const char *field) {
    cera_status st = need(r, 8, field);
    if (st) return st;
    *v = gguf_ld64(r->base + r->pos);
    r->pos += 8;
    return CERA_OK;
}

static cera_status rd_str(reader *r, gguf_str *s, const char *field) {
    uint64_t len, at = r->pos;
    cera_status st = rd_u64(r, &len, field);
    if (st) return st;
    if (len > r->size - r->pos)
        return cera_fail(r->err, CERA_ERR_FORMAT,
                         "%s: %s length %llu at byte %llu runs past the end of the file (%llu bytes)",
                         r->what, field, (unsigned long long)len, (unsigned long long)at,
                         (unsigned long long)r->size);
    s->len = len;
    s->data = (const char *)r->base + r->pos;
    r->pos += len;
    return CERA_OK;
}

static cera_status rd_array(reader *r, gguf_array *arr, int depth);

static cera_status rd_value(reader *r, gguf_vtype type, uint64_t type_at, gguf_value *v, int depth) {
    v->type = type;
    if (type == GGUF_TYPE_STRING) return rd_str(r, &v->v.str, "string value");
    if (type == GGUF_TYPE_ARRAY) return rd_array(r, &v->v.arr, depth + 1);
    size_t n = (unsigned)type < GGUF_TYPE_COUNT ? gguf_vtype_size(type) : 0;
    if (!n)
        return cera_fail(r->err, CERA_ERR_FORMAT, "%s: unknown value type %u at byte %llu", r->what,
                         (unsigned)type, (unsigned long long)type_at);
    cera_status st = need(r, n, "the value");
    if (st) return st;
    const uint8_t *p = r->base + r->pos;
    switch (type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_BOOL: v->v.u64 = p[0]; break;
    case GGUF_TYPE_INT8: v->v.i64 = (int8_t)p[0]; break;
    case GGUF_TYPE_UINT16: v->v.u64 = gguf_ld16(p); break;
    case GGUF_TYPE_INT16: v->v.i64 = (int16_t)gguf_ld16(p); break;
    case GGUF_TYPE_UINT32: v->v.u64 = gguf_ld32(p); break;
    case GGUF_TYPE_INT32: v->v.i64 = (int32_t)gguf_ld32(p); break;
    case GGUF_TYPE_UINT64: v->v.u64 = gguf_ld64(p); break;
    case GGUF_TYPE_INT64: v->v.i64 = (int64_t)gguf_ld64(p); break;
    case GGUF_TYPE_FLOAT32: v->v.f64 = gguf_ldf32(p); break;
    case GGUF_TYPE_FLOAT64: v->v.f64 = gguf_ldf64(p); break;
    default: break;
    }
    r->pos += n;
    return CERA_OK;
}

/* An array's payload: u32 element type, u64 count, the elements. */
static cera_status rd_array(reader *r, gguf_array *arr, int depth) {
    uint32_t et;
    uint64_t n, at = r->pos;
    cera_status st;
    if ((st = rd_u32(r, &et, "array element type")) || (st = rd_u64(r, &n, "array length"))) return st;
    arr->type = (gguf_vtype)et;
    arr->n = n;
    uint64_t left = r->size - r->pos;
    size_t es = et < GGUF_TYPE_COUNT ? gguf_vtype_size((gguf_vtype)et) : 0;
    if (es) {
        if (n > left / es)
            return cera_fail(r->err, CERA_ERR_FORMAT,
                             "%s: array of %llu %s at byte %llu runs past the end of the file (%llu bytes)",
                             r->what, (unsigned long long)n, gguf_vtype_name((gguf_vtype)et),
                             (unsigned long long)at, (unsigned long long)r->size);
        arr->u.raw = r->base + r->pos;
        r->pos += n * es;
        return CERA_OK;
    }
    if (et == GGUF_TYPE_STRING) {
        if (n > left / 8)
            return cera_fail(
                r->err, CERA_ERR_FORMAT,
                "%s: array of %llu strings at byte %llu runs past the end of the file (%llu bytes)", r->what,
                (unsigned long long)n, (unsigned long long)at, (unsigned long long)r->size);
        gguf_str *s = n ? gguf_arena_alloc(r->arena, n * sizeof *s) : NULL;
        if (n && !s) return no_memory(r);
        for (uint64_t i = 0; i < n; i++)
            if ((st = rd_str(r, &s[i], "array string"))) return st;
        arr->u.strs = s;
        return CERA_OK;
    }
    if (et == GGUF_TYPE_ARRAY) {
        if (depth >= GGUF_MAX_NESTING)
            return cera_fail(r->err, CERA_ERR_FORMAT, "%s: arrays nested deeper than %d at byte %llu",
                             r->what, GGUF_MAX_NESTING, (unsigned long long)at);
        if (n > left / 12)
            return cera_fail(
                r->err, CERA_ERR_FORMAT,
                "%s: array of %llu arrays at byte %llu runs past the end of the file (%llu bytes)", r->what,
                (unsigned long long)n, (unsigned long long)at, (unsigned long long)r->size);
        gguf_value *vs = n ? gguf_arena_alloc(r->arena, n * sizeof *vs) : NULL;
        if (n && !vs) return no_memory(r);
        for (uint64_t i = 0; i < n; i++) {
            vs[i].type = GGUF_TYPE_ARRAY;
            if ((st = rd_array(r, &vs[i].v.arr, depth + 1))) return st;
        }
        arr->u.arrays = vs;
        return CERA_OK;
    }
    return cera_fail(r->err, CERA_ERR_FORMAT, "%s: unknown array element type %u at byte %llu", r->what, et,
                     (unsigned long long)at);
}

/* ---- Hash index -------------------------------------------------------------- */

struct gguf_index *gguf_index_new(gguf_arena **a, uint64_t n) {
    uint64_t cap = 8;
    while (cap < 2 * n) cap <<= 1;
    struct gguf_index *ix = gguf_arena_alloc(a, sizeof *ix);
    if (!ix) return NULL;
    ix->slots = gguf_arena_alloc(a, cap * sizeof *ix->slots);
    if (!ix->slots) return NULL;
    ix->mask = cap - 1;
    return ix;
}

int64_t gguf_index_insert(struct gguf_index *ix, gguf_str name, uint64_t i, const void *items, size_t stride,
                          size_t name_off) {
    for (uint64_t h = gguf_hash(name.data, name.len) & ix->mask;; h = (h + 1) & ix->mask) {
        uint64_t s = ix->slots[h];
        if (!s) {
            ix->slots[h] = i + 1;
            return -1;
        }
        const gguf_str *other = (const gguf_str *)((const char *)items + (s - 1) * stride + name_off);
        if (other->len == name.len && !memcmp(other->data, name.data, name.len)) return (int64_t)(s - 1);
    }
}

/* ---- Tensor shapes ------------------------------------------------------------ */

int64_t gguf_tensor_nelements(const gguf_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

cera_status gguf_tensor_size(cera_type type, uint32_t n_dims, const int64_t *ne, uint64_t *nbytes,
                             cera_error *err) {
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return cera_fail(err, CERA_ERR_FORMAT, "%u dimensions (must be 1 to %d)", n_dims, GGUF_MAX_DIMS);
    int64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1)
            return cera_fail(err, CERA_ERR_FORMAT, "dimension %u is %lld (must be at least 1)", d,
                             (long long)ne[d]);
        if (ne[d] > INT64_MAX / nel)
            return cera_fail(err, CERA_ERR_FORMAT, "element count overflows int64 at dimension %u (%lld)", d,
                             (long long)ne[d]);
        nel *= ne[d];
    }
    const cera_type_traits *tt = cera_type_get((uint32_t)type);
    if (!tt) return cera_fail(err, CERA_ERR_UNSUPPORTED, "unknown tensor type id %u", (unsigned)type);
    if (ne[0] % tt->block_size)
        return cera_fail(err, CERA_ERR_FORMAT, "row length %lld is not a multiple of the %s block size %d",
                         (long long)ne[0], tt->name, tt->block_size);
    uint64_t row = (uint64_t)(ne[0] / tt->block_size), rows = (uint64_t)(nel / ne[0]);
    if (row > UINT64_MAX / tt->type_size || row * tt->type_size > UINT64_MAX / rows)
        return cera_fail(err, CERA_ERR_FORMAT, "size in bytes overflows");
    *nbytes = row * tt->type_size * rows;
    return CERA_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* ---- The parser ---------------------------------------------------------------- */

static void describe(reader *r, const char *kind, uint64_t i, gguf_str name) {
    char shown[GGUF_NAME_SHOWN + 1];
    if (name.data)
        snprintf(r->what, sizeof r->what, "%s %llu '%s'", kind, (unsigned long long)i,
                 gguf_show_name(name, shown));
    else
        snprintf(r->what, sizeof r->what, "%s %llu", kind, (unsigned long long)i);
}

static cera_status parse_header(reader *r, gguf_file *f) {
    cera_status st;
    snprintf(r->what, sizeof r->what, "header");
    if ((st = need(r, 4, "the magic"))) return st;
    if (memcmp(r->base, "GGUF", 4)) {
        char m[4];
        for (int i = 0; i < 4; i++) m[i] = r->base[i] >= 32 && r->base[i] < 127 ? (char)r->base[i] : '?';
        return cera_fail(r->err, CERA_ERR_FORMAT, "not a GGUF file (magic '%.4s', expected 'GGUF')", m);
    }
    r->pos = 4;
    if ((st = rd_u32(r, &f->version, "the version"))) return st;
    uint32_t v = f->version;
    if (v && !(v & 0xffff) && __builtin_bswap32(v) <= 3)
        return cera_fail(r->err, CERA_ERR_UNSUPPORTED,
                         "big-endian GGUF (version %u byte-swapped) is not supported", __builtin_bswap32(v));
    if (v == 0) return cera_fail(r->err, CERA_ERR_FORMAT, "bad GGUF version 0");
    if (v == 1)
        return cera_fail(r->err, CERA_ERR_UNSUPPORTED, "GGUF version 1 is not supported (only 2 and 3)");
    if (v > 3)
        return cera_fail(r->err, CERA_ERR_UNSUPPORTED, "GGUF version %u is not supported (only 2 and 3)", v);
    if ((st = rd_u64(r, &f->n_tensors, "the tensor count")) || (st = rd_u64(r, &f->n_kv, "the key count")))
        return st;
    uint64_t left = r->size - r->pos;
    if (f->n_kv > left / GGUF_MIN_KV_BYTES)
        return cera_fail(r->err, CERA_ERR_FORMAT, "header: %llu keys cannot fit in the %llu bytes left",
                         (unsigned long long)f->n_kv, (unsigned long long)left);
    if (f->n_tensors > left / GGUF_MIN_TENSOR_BYTES ||
        f->n_tensors * GGUF_MIN_TENSOR_BYTES > left - f->n_kv * GGUF_MIN_KV_BYTES)
        return cera_fail(r->err, CERA_ERR_FORMAT, "header: %llu tensors cannot fit in the %llu bytes left",
                         (unsigned long long)f->n_tensors, (unsigned long long)left);
    return CERA_OK;
}

static cera_status parse_kvs(reader *r, gguf_file *f) {
    cera_status st;
    f->kv = f->n_kv ? gguf_arena_alloc(r->arena, f->n_kv * sizeof *f->kv) : NULL;
    f->kv_idx = gguf_index_new(r->arena, f->n_kv);
    if ((f->n_kv && !f->kv) || !f->kv_idx) return no_memory(r);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kv[i];
        describe(r, "key", i, (gguf_str){0, NULL});
        if ((st = rd_str(r, &kv->key, "key"))) return st;
        describe(r, "key", i, kv->key);
        if (!kv->key.len)
            return cera_fail(r->err, CERA_ERR_FORMAT, "key %llu is empty (byte %llu)", (unsigned long long)i,
                             (unsigned long long)(r->pos - 8));
        int64_t dup = gguf_index_insert(f->kv_idx, kv->key, i, f->kv, sizeof *kv, offsetof(gguf_kv, key));
        if (dup >= 0)
            return cera_fail(r->err, CERA_ERR_FORMAT, "%s: duplicate key (also key %lld)", r->what,
                             (long long)dup);
        uint32_t type;
        uint64_t at = r->pos;
        if ((st = rd_u32(r, &type, "value type"))) return st;
        if ((st = rd_value(r, (gguf_vtype)type, at, &kv->value, 0))) return st;
    }
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->value.type != GGUF_TYPE_UINT32)
            return cera_fail(r->err, CERA_ERR_FORMAT, "general.alignment must be a uint32 (it is a %s)",
                             gguf_vtype_name(al->value.type));
        uint64_t a = al->value.v.u64;
        if (!a || (a & (a - 1)))
            return cera_fail(r->err, CERA_ERR_FORMAT, "general.alignment %llu is not a power of two",
                             (unsigned long long)a);
        /* the GGUF spec asks for a multiple of 8; smaller would leave F32 data misaligned */
        if (a % 8)
            return cera_fail(r->err, CERA_ERR_FORMAT, "general.alignment %llu is not a multiple of 8",
                             (unsigned long long)a);
        f->alignment = a;
    }
    return CERA_OK;
}

static cera_status parse_tensor_infos(reader *r, gguf_file *f) {
    cera_status st;
    uint64_t left = r->size - r->pos;
    if (f->n_tensors > left / GGUF_MIN_TENSOR_BYTES)
        return cera_fail(
            r->err, CERA_ERR_FORMAT, "%llu tensor infos cannot fit in the %llu bytes left at byte %llu",
            (unsigned long long)f->n_tensors, (unsigned long long)left, (unsigned long long)r->pos);
    f->tensors = f->n_tensors ? gguf_arena_alloc(r->arena, f->n_tensors * sizeof *f->tensors) : NULL;
    f->ten_idx = gguf_index_new(r->arena, f->n_tensors);
    if ((f->n_tensors && !f->tensors) || !f->ten_idx) return no_memory(r);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        describe(r, "tensor", i, (gguf_str){0, NULL});
        if ((st = rd_str(r, &t->name, "name"))) return st;
        describe(r, "tensor", i, t->name);
        int64_t dup =
            gguf_index_insert(f->ten_idx, t->name, i, f->tensors, sizeof *t, offsetof(gguf_tensor, name));
        if (dup >= 0)
            return cera_fail(r->err, CERA_ERR_FORMAT, "%s: duplicate tensor name (also tensor %lld)", r->what,
                             (long long)dup);
        if ((st = rd_u32(r, &t->n_dims, "n_dims"))) return st;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
            return cera_fail(r->err, CERA_ERR_FORMAT, "%s: %u dimensions at byte %llu (must be 1 to %d)",
                             r->what, t->n_dims, (unsigned long long)(r->pos - 4), GGUF_MAX_DIMS);
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
            uint64_t ne = 1;
            if (d < t->n_dims && (st = rd_u64(r, &ne, "a dimension"))) return st;
            t->ne[d] = (int64_t)ne;
        }
        uint32_t type;
        if ((st = rd_u32(r, &type, "type")) || (st = rd_u64(r, &t->offset, "offset"))) return st;
        t->type = (cera_type)type;
        if ((st = gguf_tensor_size(t->type, t->n_dims, t->ne, &t->nbytes, r->err))) {
            cera_error_prefix(r->err, "%s", r->what);
            return st;
        }
    }
    return CERA_OK;
}

static cera_status place_tensors(reader *r, gguf_file *f) {
    uint64_t hdr_end = r->pos, a = f->alignment;
    uint64_t start = hdr_end + (a - hdr_end % a) % a; /* hdr_end <= size and a <= 2^31: no overflow */
    if (!f->n_tensors) {
        f->data_offset = start <= r->size ? start : r->size;
        return CERA_OK;
    }
    if (start > r->size)
        return cera_fail(r->err, CERA_ERR_FORMAT,
                         "the data section would start at byte %llu, past the end of the file (%llu bytes)",
                         (unsigned long long)start, (unsigned long long)r->size);
    f->data_offset = start;
    uint64_t data_size = r->size - start;
    const gguf_tensor **order = gguf_arena_alloc(r->arena, f->n_tensors * sizeof *order);
    if (!order) return no_memory(r);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        describe(r, "tensor", i, t->name);
        if (t->offset % a)
            return cera_fail(r->err, CERA_ERR_FORMAT,
                             "%s: offset %llu is not a multiple of the alignment %llu", r->what,
                             (unsigned long long)t->offset, (unsigned long long)a);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return cera_fail(r->err, CERA_ERR_FORMAT,
                             "%s: data at offset %llu (+%llu bytes) runs past the end of the data section "
                             "(%llu bytes from byte %llu)",
                             r->what, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                             (unsigned long long)data_size, (unsigned long long)start);
        t->data = r->base + start + t->offset;
        order[i] = t;
    }
    qsort(order, f->n_tensors, sizeof *order, cmp_by_offset);
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        const gguf_tensor *p = order[i - 1], *t = order[i];
        char a1[GGUF_NAME_SHOWN + 1], a2[GGUF_NAME_SHOWN + 1];
        if (p->offset + p->nbytes > t->offset)
            return cera_fail(r->err, CERA_ERR_FORMAT,
                             "tensor '%s' (offset %llu, %llu bytes) overlaps tensor '%s' (offset %llu)",
                             gguf_show_name(t->name, a1), (unsigned long long)t->offset,
                             (unsigned long long)t->nbytes, gguf_show_name(p->name, a2),
                             (unsigned long long)p->offset);
    }
    return CERA_OK;
}

static cera_status parse(const uint8_t *base, uint64_t size, gguf_file **out, cera_error *err) {
    *out = NULL;
    gguf_arena *arena = NULL;
    reader r = {.base = base, .size = size, .pos = 0, .arena = &arena, .err = err};
    gguf_file *f = gguf_arena_alloc(&arena, sizeof *f);
    if (!f) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    f->base = base;
    f->size = size;
    cera_status st = parse_header(&r, f);
    if (!st) st = parse_kvs(&r, f);
    if (!st) st = parse_tensor_infos(&r, f);
    if (!st) st = place_tensors(&r, f);
    if (st) {
        gguf_arena_free(arena);
        return st;
    }
    f->arena = arena;
    *out = f;
    return CERA_OK;
}

cera_status gguf_open_memory(const void *data, size_t size, gguf_file **out, cera_error *err) {
    if (!out) return cera_fail(err, CERA_ERR_INVALID_ARG, "gguf_open_memory: out is NULL");
    *out = NULL;
    static const uint8_t empty[1];
    if (!data) {
        if (size)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "gguf_open_memory: NULL buffer of %zu bytes", size);
        data = empty;
    }
    return parse(data, size, out, err);
}

cera_status gguf_open(const char *path, gguf_file **out, cera_error *err) {
    if (!out || !path) return cera_fail(err, CERA_ERR_INVALID_ARG, "gguf_open: NULL argument");
    *out = NULL;
    int fd;
    struct stat sb;
    cera_status ost = cera_open_regular(path, &fd, &sb, err); /* a FIFO must not block */
    if (ost) return ost;
    size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return cera_fail(err, CERA_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(e));
        }
    }
    close(fd);
    cera_status st = gguf_open_memory(map, size, out, err);
    if (st) {
        if (map) munmap(map, size);
        cera_error_prefix(err, "%s", path);
        return st;
    }
    (*out)->map = map;
    (*out)->map_size = size;
    return CERA_OK;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    void *map = f->map;
    size_t map_size = f->map_size;
    gguf_file **parts = f->parts;
    const uint32_t n_parts = f->n_parts;
    gguf_arena_free(f->arena); /* f lives in its own arena */
    if (map) munmap(map, map_size);
    for (uint32_t i = 0; i < n_parts; i++) gguf_close(parts[i]);
    free(parts);
}

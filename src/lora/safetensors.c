/*
 * safetensors.c — the validated safetensors reader (see safetensors.h).
 *
 * The header is parsed once with cJSON into a flat table of tensors; the JSON tree
 * is freed before returning, names are copied into one block. Every number that
 * comes from the file is checked before it is used in arithmetic, so a hostile file
 * gives an error naming the file, the tensor and the problem, never a crash.
 */
#include "lora/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"

/* A header bigger than this is not a LoRA adapter's (the Hugging Face library caps it
 * at 100 MB too). */
#define SAFETENSORS_MAX_HEADER (100u << 20)

static const struct {
    const char *name;
    size_t size;
} dtypes[SAFETENSORS_DTYPE_COUNT] = {
    [SAFETENSORS_F64] = {"F64", 8},         [SAFETENSORS_F32] = {"F32", 4},
    [SAFETENSORS_F16] = {"F16", 2},         [SAFETENSORS_BF16] = {"BF16", 2},
    [SAFETENSORS_I64] = {"I64", 8},         [SAFETENSORS_I32] = {"I32", 4},
    [SAFETENSORS_I16] = {"I16", 2},         [SAFETENSORS_I8] = {"I8", 1},
    [SAFETENSORS_U8] = {"U8", 1},           [SAFETENSORS_BOOL] = {"BOOL", 1},
    [SAFETENSORS_F8_E4M3] = {"F8_E4M3", 1}, [SAFETENSORS_F8_E5M2] = {"F8_E5M2", 1},
};

const char *safetensors_dtype_name(safetensors_dtype t) {
    return (unsigned)t < SAFETENSORS_DTYPE_COUNT ? dtypes[t].name : "?";
}

size_t safetensors_dtype_size(safetensors_dtype t) {
    return (unsigned)t < SAFETENSORS_DTYPE_COUNT ? dtypes[t].size : 0;
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static bool json_u64(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    const double v = j->valuedouble;
    if (!(v >= 0) || v > 9007199254740992.0 || floor(v) != v) return false;
    *out = (uint64_t)v;
    return true;
}

static int cmp_offset(const void *a, const void *b) {
    const safetensors_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int cmp_name_ptr(const void *a, const void *b) {
    const safetensors_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Fills one tensor from its JSON entry; name already set. */
static cera_status parse_entry(const cJSON *e, safetensors_tensor *t, uint64_t data_size, cera_error *err) {
    if (!cJSON_IsObject(e))
        return cera_fail(err, CERA_ERR_FORMAT, "tensor '%s': entry is not an object", t->name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !dt->valuestring)
        return cera_fail(err, CERA_ERR_FORMAT, "tensor '%s': missing or non-string 'dtype'", t->name);
    int type = -1;
    for (int i = 0; i < SAFETENSORS_DTYPE_COUNT; i++)
        if (!strcmp(dt->valuestring, dtypes[i].name)) type = i;
    if (type < 0)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "tensor '%s': unknown dtype '%.32s'", t->name,
                         dt->valuestring);
    t->dtype = (safetensors_dtype)type;

    if (!cJSON_IsArray(shape))
        return cera_fail(err, CERA_ERR_FORMAT, "tensor '%s': missing 'shape' array", t->name);
    const int n_dims = cJSON_GetArraySize(shape);
    if (n_dims > SAFETENSORS_MAX_DIMS)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "tensor '%s': %d dimensions (at most %d)", t->name,
                         n_dims, SAFETENSORS_MAX_DIMS);
    t->n_dims = n_dims;
    uint64_t n_elem = 1;
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        uint64_t v;
        if (!json_u64(d, &v))
            return cera_fail(err, CERA_ERR_FORMAT, "tensor '%s': shape[%d] is not a non-negative integer",
                             t->name, i);
        if (v && n_elem > UINT64_MAX / v)
            return cera_fail(err, CERA_ERR_FORMAT, "tensor '%s': element count overflows", t->name);
        n_elem *= v;
        t->shape[i++] = (int64_t)v;
    }
    for (; i < SAFETENSORS_MAX_DIMS; i++) t->shape[i] = 1;

    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_u64(cJSON_GetArrayItem(offs, 0), &begin) || !json_u64(cJSON_GetArrayItem(offs, 1), &end))
        return cera_fail(err, CERA_ERR_FORMAT, "tensor '%s': 'data_offsets' is not [begin, end]", t->name);
    if (begin > end || end > data_size)
        return cera_fail(err, CERA_ERR_FORMAT,
                         "tensor '%s': data_offsets [%llu, %llu] outside the data section (%llu bytes)",
                         t->name, (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)data_size);
    const uint64_t esize = dtypes[type].size;
    if (n_elem > UINT64_MAX / esize || n_elem * esize != end - begin)
        return cera_fail(err, CERA_ERR_FORMAT,
                         "tensor '%s': %llu bytes at data_offsets but shape and dtype need more", t->name,
                         (unsigned long long)(end - begin));
    t->offset = begin;
    t->nbytes = end - begin;
    return CERA_OK;
}

static cera_status parse(safetensors_file *f, cera_error *err) {
    if (f->size < 8)
        return cera_fail(err, CERA_ERR_FORMAT, "file of %llu bytes is too short",
                         (unsigned long long)f->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->base[i];
    if (hlen > f->size - 8 || hlen > SAFETENSORS_MAX_HEADER)
        return cera_fail(err, CERA_ERR_FORMAT, "header length %llu exceeds the file (%llu bytes)",
                         (unsigned long long)hlen, (unsigned long long)f->size);
    if (hlen < 2)
        return cera_fail(err, CERA_ERR_FORMAT, "header of %llu bytes is not a JSON object",
                         (unsigned long long)hlen);
    f->data_offset = 8 + hlen;
    const uint64_t data_size = f->size - f->data_offset;

    cJSON *root = cJSON_ParseWithLength((const char *)f->base + 8, (size_t)hlen);
    if (!root) return cera_fail(err, CERA_ERR_FORMAT, "header is not valid JSON");
    cera_status st = CERA_OK;
    if (!cJSON_IsObject(root)) {
        st = cera_fail(err, CERA_ERR_FORMAT, "header is not a JSON object");
        goto done;
    }
    size_t n = 0, names_len = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (!e->string) {
            st = cera_fail(err, CERA_ERR_FORMAT, "header entry without a name");
            goto done;
        }
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                st = cera_fail(err, CERA_ERR_FORMAT, "'__metadata__' is not an object");
                goto done;
            }
            continue;
        }
        n++;
        names_len += strlen(e->string) + 1;
    }
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    f->names = malloc(names_len ? names_len : 1);
    if (!f->tensors || !f->names) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory for %zu tensor entries", n);
        goto done;
    }
    char *np = f->names;
    size_t i = 0;
    cJSON_ArrayForEach(e, root) {
        if (!strcmp(e->string, "__metadata__")) continue;
        safetensors_tensor *t = &f->tensors[i++];
        const size_t len = strlen(e->string) + 1;
        memcpy(np, e->string, len);
        t->name = np;
        np += len;
        st = parse_entry(e, t, data_size, err);
        if (st) goto done;
        t->data = f->base + f->data_offset + t->offset;
    }
    f->n_tensors = n;

    /* Duplicate names (JSON allows them; cJSON keeps both). */
    if (n > 1) {
        const safetensors_tensor **by_name = malloc(n * sizeof *by_name);
        if (!by_name) {
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        for (size_t j = 0; j < n; j++) by_name[j] = &f->tensors[j];
        qsort(by_name, n, sizeof *by_name, cmp_name_ptr);
        for (size_t j = 1; j < n && !st; j++)
            if (!strcmp(by_name[j - 1]->name, by_name[j]->name))
                st = cera_fail(err, CERA_ERR_FORMAT, "tensor '%s' appears twice", by_name[j]->name);
        free(by_name);
        if (st) goto done;
    }
    /* Overlapping data (empty tensors overlap nothing). */
    qsort(f->tensors, n, sizeof *f->tensors, cmp_offset);
    uint64_t prev_end = 0;
    const char *prev = NULL;
    for (size_t j = 0; j < n; j++) {
        const safetensors_tensor *t = &f->tensors[j];
        if (!t->nbytes) continue;
        if (prev && t->offset < prev_end) {
            st = cera_fail(err, CERA_ERR_FORMAT, "tensors '%s' and '%s' overlap", prev, t->name);
            goto done;
        }
        prev_end = t->offset + t->nbytes;
        prev = t->name;
    }
done:
    cJSON_Delete(root);
    return st;
}

cera_status safetensors_open_memory(const void *data, size_t size, safetensors_file **out, cera_error *err) {
    *out = NULL;
    safetensors_file *f = calloc(1, sizeof *f);
    if (!f) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    f->base = data;
    f->size = size;
    cera_status st = parse(f, err);
    if (st) {
        safetensors_close(f);
        return st;
    }
    *out = f;
    return CERA_OK;
}

cera_status safetensors_open(const char *path, safetensors_file **out, cera_error *err) {
    *out = NULL;
    int fd;
    struct stat sb;
    const cera_status ost = cera_open_regular(path, &fd, &sb, err); /* a FIFO must not block */
    if (ost) return ost;
    const size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            const int e = errno;
            close(fd);
            return cera_fail(err, CERA_ERR_IO, "%s: cannot map: %s", path, strerror(e));
        }
    }
    close(fd);
    safetensors_file *f = calloc(1, sizeof *f);
    if (!f) {
        if (map) munmap(map, size);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    f->map = map;
    f->map_size = size;
    f->base = map;
    f->size = size;
    cera_status st = parse(f, err);
    if (st) {
        cera_error_prefix(err, "%s", path);
        safetensors_close(f);
        return st;
    }
    *out = f;
    return CERA_OK;
}

void safetensors_close(safetensors_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    free(f->tensors);
    free(f->names);
    free(f);
}

const safetensors_tensor *safetensors_find(const safetensors_file *f, const char *name) {
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

/*
 * gguf_split.c — a model split over several GGUF files (llama.cpp's gguf-split format),
 * opened as one gguf_file (gguf.h, gguf_open_model).
 *
 * Each shard is an ordinary GGUF file, opened and validated by gguf_open and mmapped on
 * its own. The set is a gguf_file of its own arena whose metadata is the first shard's
 * (the keys point into its mapping) and whose tensor array holds every shard's tensors in
 * shard order, each one's data pointing into its shard; a fresh name index spans them.
 * The shards stay open (parts[]) until the set is closed.
 *
 * The split keys tie the files together: every shard has split.count (the same), split.no
 * (its position from 0) and split.tensors.count (the set's total, which the shards' counts
 * must add up to); a shard naming an architecture must name the first's. That catches a
 * missing file, a renamed one and, through the tensor total, most shards of another model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gguf/gguf_internal.h"

#define MAX_SHARDS 65535 /* split.count is a uint16 in llama.cpp's files */

uint32_t gguf_n_files(const gguf_file *f) { return f->n_parts ? f->n_parts : 1; }

const gguf_file *gguf_file_part(const gguf_file *f, uint32_t i) { return f->n_parts ? f->parts[i] : f; }

/* A split key as a number; false (with the message) when absent or not an integer that fits. */
static bool split_key(const gguf_file *f, const char *path, const char *key, uint32_t *out, cera_error *err) {
    if (gguf_get_u32(f, key, out)) return true;
    cera_fail(err, CERA_ERR_FORMAT, "%s: %s %s", path, key,
              gguf_find_kv(f, key) ? "is not a non-negative integer"
                                   : "is missing (a shard of a split model?)");
    return false;
}

/* Shard i (from 0) of the set: its split keys agree with the first's. */
static cera_status check_shard(const gguf_file *first, const gguf_file *f, const char *path, uint32_t i,
                               uint32_t count, uint32_t total, cera_error *err) {
    uint32_t c, no, t;
    if (!split_key(f, path, "split.count", &c, err) || !split_key(f, path, "split.no", &no, err) ||
        !split_key(f, path, "split.tensors.count", &t, err))
        return CERA_ERR_FORMAT;
    if (c != count || no != i || t != total)
        return cera_fail(
            err, CERA_ERR_FORMAT,
            "%s: shard of another split model (split.count %u, split.no %u, split.tensors.count %u; "
            "shard %u of this one needs %u, %u, %u)",
            path, c, no, t, i + 1, count, i, total);
    gguf_str a0, a;
    if (gguf_get_str(f, "general.architecture", &a) && gguf_get_str(first, "general.architecture", &a0) &&
        (a.len != a0.len || memcmp(a.data, a0.data, (size_t)a.len))) {
        char s0[64], s[64];
        return cera_fail(err, CERA_ERR_FORMAT, "%s: shard of a '%s' model, the first shard is '%s'", path,
                         gguf_str_copy(a, s, sizeof s), gguf_str_copy(a0, s0, sizeof s0));
    }
    return CERA_OK;
}

/* The set over parts[0 .. n) (all open and checked); takes them on success. */
static cera_status join(gguf_file **parts, uint32_t n, uint64_t total, char *const *paths, gguf_file **out,
                        cera_error *err) {
    gguf_arena *arena = NULL;
    gguf_file *f = gguf_arena_alloc(&arena, sizeof *f);
    gguf_tensor *tensors = f ? gguf_arena_alloc(&arena, total * sizeof *tensors) : NULL;
    struct gguf_index *ix = tensors ? gguf_index_new(&arena, total) : NULL;
    if (!ix) {
        gguf_arena_free(arena);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory for %llu tensors", paths[0],
                         (unsigned long long)total);
    }
    uint64_t k = 0;
    for (uint32_t p = 0; p < n; p++)
        for (uint64_t i = 0; i < parts[p]->n_tensors; i++, k++) {
            tensors[k] = parts[p]->tensors[i];
            if (gguf_index_insert(ix, tensors[k].name, k, tensors, sizeof *tensors,
                                  offsetof(gguf_tensor, name)) >= 0) {
                char name[GGUF_NAME_SHOWN + 1];
                gguf_show_name(parts[p]->tensors[i].name, name);
                gguf_arena_free(arena);
                return cera_fail(err, CERA_ERR_FORMAT, "%s: tensor '%s' is in an earlier shard too", paths[p],
                                 name);
            }
        }
    *f = *parts[0];
    f->n_tensors = total;
    f->tensors = tensors;
    f->ten_idx = ix;
    f->map = NULL;
    f->map_size = 0;
    f->arena = arena;
    f->parts = parts;
    f->n_parts = n;
    *out = f;
    return CERA_OK;
}

cera_status gguf_open_model(const char *path, gguf_file **out, cera_error *err) {
    if (!out || !path) return cera_fail(err, CERA_ERR_INVALID_ARG, "gguf_open_model: NULL argument");
    *out = NULL;
    gguf_file *first;
    cera_status st = gguf_open(path, &first, err);
    if (st) return st;
    if (!gguf_find_kv(first, "split.count")) {
        *out = first;
        return CERA_OK;
    }
    uint32_t count, no = 0, total = 0;
    st = CERA_ERR_FORMAT;
    if (!split_key(first, path, "split.count", &count, err)) goto fail_first;
    if (count == 0 || count > MAX_SHARDS) {
        cera_fail(err, CERA_ERR_FORMAT, "%s: split.count %u (1 to %d)", path, count, MAX_SHARDS);
        goto fail_first;
    }
    if (gguf_find_kv(first, "split.no") && !split_key(first, path, "split.no", &no, err)) goto fail_first;
    if (no >= count) {
        cera_fail(err, CERA_ERR_FORMAT, "%s: split.no %u of split.count %u", path, no, count);
        goto fail_first;
    }
    if (no != 0) {
        st = cera_fail(err, CERA_ERR_INVALID_ARG,
                       "%s is shard %u of %u of a split model: open the first (-00001-of-%05u.gguf)", path,
                       no + 1, count, count);
        goto fail_first;
    }
    if (count == 1) {
        *out = first;
        return CERA_OK;
    }
    if (!split_key(first, path, "split.tensors.count", &total, err)) goto fail_first;
    char suffix[40];
    const size_t sl = (size_t)snprintf(suffix, sizeof suffix, "-%05u-of-%05u.gguf", 1u, count),
                 n = strlen(path);
    if (n < sl || strcmp(path + n - sl, suffix)) {
        st = cera_fail(
            err, CERA_ERR_INVALID_ARG,
            "%s: split.count is %u, but the name does not end in %s (shards are found by their names)", path,
            count, suffix);
        goto fail_first;
    }
    gguf_file **parts = calloc(count, sizeof *parts);
    char **paths = calloc(count, sizeof *paths);
    if (!parts || !paths) {
        free(parts);
        free(paths);
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", path);
        goto fail_first;
    }
    parts[0] = first;
    uint64_t sum = first->n_tensors;
    st = CERA_OK;
    for (uint32_t i = 0; i < count && !st; i++) {
        const size_t cap = n + 16;
        if (!(paths[i] = malloc(cap))) {
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", path);
            break;
        }
        snprintf(paths[i], cap, "%.*s-%05u-of-%05u.gguf", (int)(n - sl), path, i + 1, count);
        if (i == 0) continue;
        if ((st = gguf_open(paths[i], &parts[i], err))) {
            cera_error_prefix(err, "shard %u of %u", i + 1, count);
            break;
        }
        st = check_shard(first, parts[i], paths[i], i, count, total, err);
        sum += parts[i]->n_tensors;
    }
    if (!st && sum != total)
        st = cera_fail(err, CERA_ERR_FORMAT,
                       "%s: the %u shards hold %llu tensors, split.tensors.count says %u", path, count,
                       (unsigned long long)sum, total);
    if (!st) st = join(parts, count, sum, paths, out, err);
    for (uint32_t i = 0; i < count; i++) free(paths[i]);
    free(paths);
    if (st) {
        for (uint32_t i = 0; i < count; i++) gguf_close(parts[i]);
        free(parts);
    }
    return st;
fail_first:
    gguf_close(first);
    return st;
}

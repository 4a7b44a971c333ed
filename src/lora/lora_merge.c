/*
 * lora_merge.c — merging LoRA adapters into a base model's weights and writing the
 * result as a new GGUF (`cera lora merge`).
 *
 * For every projection some adapter targets, W' = W + Σ s·B·A in F32 (W dequantized
 * with the type's reference dequantizer, the sum over adapters in the order given),
 * then converted to the output type with the reference quantizer. Every other tensor
 * and every key is copied unchanged, so the merged file loads like the base one.
 * Requantizing adds the type's rounding error: a merged Q4 model matches the unmerged
 * run within that error, an F32 merge within float rounding.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fp16.h"
#include "lora/lora.h"

/* One row of n elements of a type to F32 / from F32; false when the type has no
 * reference converter. */
static bool row_to_f32(cera_type type, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    if (type == CERA_TYPE_F32) {
        memcpy(dst, s, (size_t)n * 4);
        return true;
    }
    if (type == CERA_TYPE_F16 || type == CERA_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = type == CERA_TYPE_F16 ? cera_f16_to_f32(h) : cera_bf16_to_f32(h);
        }
        return true;
    }
    const cera_type_traits *tt = cera_type_get(type);
    if (!tt || !tt->to_float) return false;
    tt->to_float(src, dst, n);
    return true;
}

static bool row_from_f32(cera_type type, const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    if (type == CERA_TYPE_F32) {
        memcpy(d, src, (size_t)n * 4);
        return true;
    }
    if (type == CERA_TYPE_F16 || type == CERA_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            const uint16_t h = type == CERA_TYPE_F16 ? cera_f32_to_f16(src[i]) : cera_f32_to_bf16(src[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        return true;
    }
    const cera_type_traits *tt = cera_type_get(type);
    if (!tt || !tt->from_float_ref) return false;
    tt->from_float_ref(src, dst, n);
    return true;
}

/* Merges every adapter's pairs into a tensor of layer `layer`, whose parts are the projections
 * parts[0 .. n_parts) (one, or the row ranges of a fused tensor); w covers the whole tensor.
 * Writes the converted tensor into a new buffer *out. */
static cera_status merge_weight(const cera_weight *w, int layer, const cera_proj *parts, int n_parts,
                                cera_adapter *const *adapters, const float *scales, int n, cera_type out_type,
                                void **out, cera_error *err) {
    const char *what = cera_lora_proj_gguf_name(parts[0]);
    const size_t in_row = cera_row_size(w->type, w->k), out_row = cera_row_size(out_type, w->k);
    if (!in_row || !out_row)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "blk.%d.%s.weight: %lld columns do not fit type %s",
                         layer, what, (long long)w->k,
                         cera_type_get(out_type) ? cera_type_get(out_type)->name : "?");
    float *row = malloc((size_t)w->k * sizeof *row);
    uint8_t *dst = malloc(out_row * (size_t)w->n);
    if (!row || !dst) {
        free(row);
        free(dst);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "blk.%d.%s.weight: out of memory", layer, what);
    }
    for (int64_t i = 0; i < w->n; i++) {
        if (!row_to_f32(w->type, (const uint8_t *)w->data + (size_t)i * in_row, row, w->k)) {
            free(row);
            free(dst);
            return cera_fail(err, CERA_ERR_UNSUPPORTED, "blk.%d.%s.weight: no dequantizer for type %s", layer,
                             what, cera_type_get(w->type) ? cera_type_get(w->type)->name : "?");
        }
        cera_proj p = parts[0];
        int64_t i0 = 0; /* the part's first row in the tensor */
        for (int j = 0; j < n_parts; j++) {
            const cera_weight *pw = &adapters[0]->model->layers[layer].proj[parts[j]];
            if (i >= pw->row0 && i < pw->row0 + pw->n) p = parts[j], i0 = pw->row0;
        }
        for (int a = 0; a < n; a++) {
            const cera_lora_pair *q = cera_lora_pair_get(adapters[a], layer, p);
            if (!q || scales[a] == 0.0f) continue;
            const float s = cera_lora_scale(adapters[a], q, scales[a]);
            const float *b = q->b + (size_t)(i - i0) * q->rank; /* row i - i0 of B: [rank] */
            for (int j = 0; j < q->rank; j++) {
                const float c = s * b[j];
                const float *arow = q->a + (size_t)j * q->k;
                for (int64_t x = 0; x < w->k; x++) row[x] += c * arow[x];
            }
        }
        if (!row_from_f32(out_type, row, dst + (size_t)i * out_row, w->k)) {
            free(row);
            free(dst);
            return cera_fail(err, CERA_ERR_UNSUPPORTED, "no quantizer for output type %s",
                             cera_type_get(out_type) ? cera_type_get(out_type)->name : "?");
        }
    }
    free(row);
    *out = dst;
    return CERA_OK;
}

cera_status cera_lora_merge(const cera_model *m, cera_adapter *const *adapters, const float *scales, int n,
                            const char *out_path, int out_type, cera_error *err) {
    const gguf_file *f = m->file;
    if (!f) return cera_fail(err, CERA_ERR_INVALID_ARG, "merge needs the base model's file");
    if (out_type >= 0 && !cera_type_get((uint32_t)out_type))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "unknown output type %d", out_type);
    for (int a = 0; a < n; a++)
        if (adapters[a]->n_layer != m->hp.n_layer)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: adapter loaded for another model",
                             adapters[a]->source);
        else if (adapters[a]->moe)
            return cera_fail(err, CERA_ERR_UNSUPPORTED,
                             "%s: merging factors of routed experts or their router is not supported (attach "
                             "the adapter unmerged)",
                             adapters[a]->source);

    gguf_writer *w = gguf_writer_new();
    void **owned = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *owned);
    if (!w || !owned) {
        gguf_writer_free(w);
        free(owned);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    }
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    /* a split base model is written as one file */
    gguf_writer_remove(w, "split.count");
    gguf_writer_remove(w, "split.no");
    gguf_writer_remove(w, "split.tensors.count");

    cera_status st = CERA_OK;
    char name[256];
    for (uint64_t i = 0; i < f->n_tensors && !st; i++) {
        const gguf_tensor *t = &f->tensors[i];
        gguf_str_copy(t->name, name, sizeof name);
        /* Is this a projection some adapter targets? (A fused tensor is several, phi3's attn_qkv.) */
        int layer = -1, n_parts = 0;
        cera_proj parts[CERA_PROJ_COUNT];
        for (int l = 0; l < m->hp.n_layer && layer < 0; l++)
            for (int p = 0; p < CERA_PROJ_COUNT; p++)
                if (m->layers[l].proj[p].t == t) {
                    layer = l;
                    parts[n_parts++] = (cera_proj)p;
                }
        bool targeted = false;
        for (int a = 0; a < n; a++)
            for (int j = 0; j < n_parts; j++)
                if (scales[a] != 0.0f && cera_lora_pair_get(adapters[a], layer, parts[j])) targeted = true;
        if (!targeted) {
            st = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, err);
            continue;
        }
        cera_weight whole = m->layers[layer].proj[parts[0]];
        whole.data = t->data;
        whole.n = t->ne[1];
        whole.row0 = 0;
        const cera_type ot = out_type >= 0 ? (cera_type)out_type : whole.type;
        st = merge_weight(&whole, layer, parts, n_parts, adapters, scales, n, ot, &owned[i], err);
        if (!st) st = gguf_writer_add_tensor(w, name, ot, t->n_dims, t->ne, owned[i], err);
    }
    if (!st) st = gguf_writer_write(w, out_path, err);
    gguf_writer_free(w);
    for (uint64_t i = 0; i < f->n_tensors; i++) free(owned[i]);
    free(owned);
    return st;
}

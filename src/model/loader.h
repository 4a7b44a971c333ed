/*
 * loader.h — what model.c gives the architecture files (model/arch/ (one file each)) for reading a
 * GGUF file: its `<arch>.*` metadata with llama.cpp's defaults and its tensors bound with
 * checked shapes. Internal to model/.
 */
#ifndef CERA_MODEL_LOADER_H
#define CERA_MODEL_LOADER_H

#include "model/graph.h"
#include "model/model.h"

typedef struct cera_loader {
    const gguf_file *f;
    const char *arch; /* the key prefix */
    cera_model *m;
    cera_error *err;
    bool *used; /* [f->n_tensors] set for each tensor bound: the others are errors */
} cera_loader;

/* `<arch>.<suffix>` as a non-negative integer (a per-layer array whose entries are all
 * equal is accepted), def when absent and not required. */
cera_status cera_load_int(const cera_loader *ld, const char *suffix, bool required, int def, int *out);
/* `<arch>.<suffix>` as a finite float, def when absent. */
cera_status cera_load_float(const cera_loader *ld, const char *suffix, float def, float *out);
/* Tensor `name` of shape [ne0, ne1] (ne1 = 0: a vector, which must be F32), or absent
 * (w zeroed) when not required. */
cera_status cera_load_tensor(const cera_loader *ld, const char *name, int64_t ne0, int64_t ne1, bool required,
                             cera_weight *w);
/* The same for "blk.<il>.<suffix>". */
cera_status cera_load_layer_tensor(const cera_loader *ld, int il, const char *suffix, int64_t ne0,
                                   int64_t ne1, bool required, cera_weight *w);

/* The n_ex matrices of 3-D tensor "blk.<il>.<suffix>" [ne0, ne1, n_ex], each [ne1 rows of
 * ne0] as a weight of its own into out[n_ex] (an MoE block's experts). */
cera_status cera_load_layer_experts(const cera_loader *ld, int il, const char *suffix, int64_t ne0,
                                    int64_t ne1, int n_ex, cera_weight *out);

/* An optional rope-factor vector [n_rot/2] (rope_freqs, LongRoPE's rope_factors_long/short),
 * checked finite and positive. */
cera_status cera_load_rope_factors(const cera_loader *ld, const char *name, cera_weight *w);
/* Rows first .. first + n of w as a weight of their own (a part of a fused tensor). */
void cera_weight_rows(const cera_weight *w, int64_t first, int64_t n, cera_weight *out);

/* An architecture: its traits, its extra metadata and tensors, and its forward pass. */
typedef struct cera_arch_def {
    cera_arch id;
    const char *name;
    cera_rope_style rope_style;
    bool conv_layers;        /* head_count_kv may be 0 for a layer: an LFM2 conv block */
    const char *output_norm; /* the final norm's tensor; NULL: output_norm.weight */
    /* after the common hyperparameters: the architecture's own (may be NULL) */
    cera_status (*hparams)(const cera_loader *ld, cera_hparams *hp);
    /* the tensors of layer il (the common ones are not bound by model.c) */
    cera_status (*layer)(const cera_loader *ld, int il, cera_layer *L);
    /* the forward pass */
    cera_status (*build)(const cera_model *m, cera_graph *g, cera_error *err);
} cera_arch_def;

extern const cera_arch_def cera_arch_llama, cera_arch_qwen2, cera_arch_qwen3, cera_arch_granite,
    cera_arch_lfm2, cera_arch_gemma3, cera_arch_phi3, cera_arch_lfm2moe;

#endif

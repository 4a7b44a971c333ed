/*
 * lora.h — LoRA adapters: loading (llama.cpp GGUF adapters and PEFT folders),
 * validation against the base model, the unmerged apply kernels and merging.
 *
 * An adapter adds, on each projection it targets, y += s · B(A·x) to the
 * projection's output, before bias, norms and rope (llama.cpp's build_lora_mm):
 *   A  [rank rows of k]   (GGUF lora_a: ne0 = k, ne1 = rank; PEFT lora_A [rank, k])
 *   B  [d rows of rank]   (GGUF lora_b: ne0 = rank, ne1 = d; PEFT lora_B [d, rank])
 *   s  = user_scale · alpha / rank, or user_scale when alpha is 0 (rsLoRA: alpha / √rank,
 *        folded into the stored alpha at load).
 * Factors are kept as F32 in memory whatever their file type (F32, F16, BF16, Q8_0), so
 * every apply kernel reads one layout. PEFT q/k B rows are permuted at load into the
 * rotary row order of the GGUF base (see lora_peft.c), so after loading a GGUF adapter
 * and its PEFT twin are the same numbers.
 *
 * Applying: adapter sets are per sequence. For one forward batch, cera_lora_batch_build
 * groups the batch's rows by adapter (each group: one adapter, the rows that use it and
 * each row's scale); then, for every projection, cera_lora_batch_apply adds every
 * group's contribution to its rows (a segmented GEMM, as Punica/S-LoRA). Each output
 * element is computed by the same dot products in the same order whatever the batch
 * holds, and the groups run in adapter-id order, so a row's result does not depend on
 * the batch's size or on the other sequences in it: prefill equals decode bit for bit,
 * and a mixed batch equals its sequences run alone.
 *
 * The kernels here (lora_apply.c) are the portable reference; the CPU backend runs the
 * same plan with its F32 matmul kernels (backend/cpu/lora.c), which round as llama.cpp's; the CUDA
 * backend uploads each adapter once (F16, in its own table keyed by the adapter's id; the
 * engine tells it when the adapter is freed, through on_free) and runs the plan with its own
 * kernels (backend/cuda/lora.c).
 */
#ifndef CERA_LORA_LORA_H
#define CERA_LORA_LORA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"
#include "gguf/gguf.h"
#include "model/model.h"

#define CERA_LORA_MAX_RANK 1024 /* larger ranks are refused at load */
#define CERA_LORA_MAX_SET  16   /* adapters attached to one session at once */

/* The targets of an MoE block's routed experts (model.h cera_experts), apart from the
 * projections: ffn_gate_inp (the router, one matrix) and ffn_{gate,up,down}_exps, whose GGUF
 * factors are 3-D, one pair per expert (lora_a [k, rank, n_expert], lora_b [rank, d, n_expert]),
 * as llama.cpp's build_lora_mm_id applies them; such a pair's a and b hold every expert's
 * factors one after another (cera_lora_expert). */
typedef enum cera_lora_moe {
    CERA_LORA_MOE_ROUTER,
    CERA_LORA_MOE_GATE,
    CERA_LORA_MOE_UP,
    CERA_LORA_MOE_DOWN,
    CERA_LORA_MOE_COUNT
} cera_lora_moe;

/* One projection's factors; rank 0 when the adapter does not target it. */
typedef struct cera_lora_pair {
    int rank;
    int64_t k, d;
    const float *a; /* [rank rows of k] */
    const float *b; /* [d rows of rank] */
} cera_lora_pair;

/* A loaded adapter (the public cera_adapter). Immutable after load; shared by sessions. */
struct cera_adapter {
    uint64_t id;             /* unique per process, increasing: orders a row's adapters */
    const cera_model *model; /* the model it was validated against */
    char source[256];
    float alpha; /* effective alpha: lora_alpha, times √rank for rsLoRA; 0 = none */
    int n_layer;
    int n_pairs; /* projections targeted */
    int max_rank;
    cera_lora_pair *pairs; /* [n_layer * CERA_PROJ_COUNT], index layer * CERA_PROJ_COUNT + proj */
    cera_lora_pair *moe;   /* [n_layer * CERA_LORA_MOE_COUNT] the routed experts' targets, or NULL: none */
    float *data;           /* every factor, one block */
    size_t n_floats, used; /* the block's size and how much the loader filled */
    atomic_int refs;       /* the loader's reference plus one per attaching session */
    /* called once, just before the adapter is freed (the engine drops a backend's copy of it
     * there), or NULL */
    void (*on_free)(void *ctx, const struct cera_adapter *a);
    void *on_free_ctx;
};

/* The pair for (layer, proj), or NULL when the adapter does not target it. */
static inline const cera_lora_pair *cera_lora_pair_get(const cera_adapter *a, int layer, cera_proj p) {
    if (layer < 0 || layer >= a->n_layer) return NULL;
    const cera_lora_pair *q = &a->pairs[(size_t)layer * CERA_PROJ_COUNT + p];
    return q->rank ? q : NULL;
}

/* The pair for an MoE target of a layer, or NULL. */
static inline const cera_lora_pair *cera_lora_moe_get(const cera_adapter *a, int layer, cera_lora_moe t) {
    if (!a->moe || layer < 0 || layer >= a->n_layer) return NULL;
    const cera_lora_pair *q = &a->moe[(size_t)layer * CERA_LORA_MOE_COUNT + t];
    return q->rank ? q : NULL;
}

/* Expert e's pair of an expert target q. */
static inline cera_lora_pair cera_lora_expert(const cera_lora_pair *q, int e) {
    cera_lora_pair p = *q;
    p.a = q->a + (size_t)e * (size_t)q->rank * (size_t)q->k;
    p.b = q->b + (size_t)e * (size_t)q->d * (size_t)q->rank;
    return p;
}

/* The effective factor for a pair at a user scale (llama.cpp's get_scale). */
static inline float cera_lora_scale(const cera_adapter *a, const cera_lora_pair *p, float user_scale) {
    return a->alpha != 0.0f ? user_scale * a->alpha / (float)p->rank : user_scale;
}

/* "attn_q" ... (GGUF) names of a projection, and its Hugging Face module in an
 * architecture: the module ("q_proj", LFM2's "out_proj" or "w1", ...) and its parent
 * ("self_attn.", "mlp.", LFM2's "feed_forward." or "conv."). */
const char *cera_lora_proj_gguf_name(cera_proj p);
const char *cera_lora_proj_hf_name(cera_arch a, cera_proj p);
const char *cera_lora_proj_hf_parent(cera_arch a, cera_proj p);

/* ---- Loading (lora_load.c, lora_peft.c) ----------------------------------------- */

/* Loads a GGUF adapter file or a PEFT folder (a directory, or its adapter_config.json /
 * adapter_model.safetensors), validated against the model. The result has one reference. */
cera_status cera_lora_load(const cera_model *m, const char *path, cera_adapter **out, cera_error *err);
/* From an opened GGUF adapter; source names it in messages. */
cera_status cera_lora_load_gguf(const cera_model *m, const gguf_file *f, const char *source,
                                cera_adapter **out, cera_error *err);
/* From a PEFT config (JSON text) and an opened safetensors file. */
struct safetensors_file;
cera_status cera_lora_load_peft(const cera_model *m, const char *config_json, size_t config_len,
                                const struct safetensors_file *st, const char *source, cera_adapter **out,
                                cera_error *err);

void cera_lora_retain(cera_adapter *a);
/* Drops one reference; frees at zero. */
void cera_lora_release(cera_adapter *a);

/* Internal to the loaders: an adapter with room for every pair; factors are added with
 * cera_lora_set_pair, which validates shapes against the base model. */
cera_status cera_lora_alloc(const cera_model *m, size_t n_floats, const char *source, cera_adapter **out,
                            cera_error *err);
/* Claims the next rank*(k+d) floats of the adapter's block for (layer, proj) after
 * checking k and d against the base weight; returns the A and B destinations. */
cera_status cera_lora_add_pair(cera_adapter *a, const cera_model *m, int layer, cera_proj p, int rank,
                               int64_t k, int64_t d, float **a_out, float **b_out, const char *what,
                               cera_error *err);

/* Rotary row permutation of llama.cpp's converter for q/k rows: within each of n_head
 * groups of rows, row 2j+s takes source row s*(rows_per_head/2)+j. Applied to the rows
 * of a [rows, cols] F32 matrix in place (tmp: rows*cols floats). */
void cera_lora_permute_rows(float *m, int64_t rows, int64_t cols, int n_head, float *tmp);

/* ---- Per-sequence sets and the batch plan (lora_apply.c) ------------------------- */

typedef struct cera_lora_entry {
    cera_adapter *adapter;
    float scale; /* the user scale */
} cera_lora_entry;

/* A session's attached adapters. */
typedef struct cera_lora_set {
    int n;
    cera_lora_entry e[CERA_LORA_MAX_SET];
} cera_lora_set;

/* Attaches (retaining) or rescales; CERA_ERR_INVALID_ARG when the set is full. */
cera_status cera_lora_set_put(cera_lora_set *s, cera_adapter *a, float scale, cera_error *err);
/* Detaches (releasing); false when a was not attached. */
bool cera_lora_set_remove(cera_lora_set *s, const cera_adapter *a);
void cera_lora_set_clear(cera_lora_set *s);
/* True when no attached adapter has a non-zero scale. */
bool cera_lora_set_empty(const cera_lora_set *s);

typedef struct cera_lora_group {
    const cera_adapter *adapter;
    int n_rows;
    const int *rows;     /* batch rows, ascending */
    const float *scales; /* each row's user scale */
    float *t;            /* [n_rows, adapter->max_rank] scratch for each row's A·x, or NULL */
} cera_lora_group;

/* One forward batch's rows grouped by adapter. Storage is allocated once for a batch
 * capacity; the A·x scratch is reserved by cera_lora_batch_reserve (a session does it when
 * an adapter is attached), and a multi-sequence build grows it only past any earlier
 * plan's (a newly attached adapter), never per token. */
typedef struct cera_lora_batch {
    int n_rows; /* rows in the batch */
    int n_groups;
    cera_lora_group *groups; /* in adapter-id order */
    /* private */
    int cap_rows;
    int *row_buf;
    float *scale_buf;
    int *count;
    float *t_buf; /* the groups' A·x scratch; grows (rarely) when a plan needs more */
    size_t t_cap;
} cera_lora_batch;

cera_status cera_lora_batch_init(cera_lora_batch *b, int max_rows, cera_error *err);
void cera_lora_batch_free(cera_lora_batch *b);
/* Makes the A·x scratch hold at least `floats` (n_rows x the ranks of a plan's adapters),
 * so that building such a plan allocates nothing. */
cera_status cera_lora_batch_reserve(cera_lora_batch *b, size_t floats, cera_error *err);
/* Row i belongs to sequence row_seq[i], whose set is seq_sets[row_seq[i]] (NULL: none);
 * n_rows <= the capacity. Entries with scale 0 are left out, so a scale of 0 is the same
 * as no adapter, bit for bit. */
void cera_lora_batch_build(cera_lora_batch *b, const int32_t *row_seq, const cera_lora_set *const *seq_sets,
                           int n_rows);
/* The same for a batch whose rows all share one set. */
void cera_lora_batch_build_uniform(cera_lora_batch *b, const cera_lora_set *set, int n_rows);

/* The portable hook on a projection's output: for every group, for each of its rows r,
 *   y[r] += s_r · B(A·x[r])     x [n_rows, k] (x_stride floats apart), y [n_rows, d],
 * output columns [d0, d1) only. Each element is computed the same way whatever the batch
 * and the column range. (The CPU backend runs backend/cpu/lora.c's form with its own kernels.) */
void cera_lora_batch_apply(const cera_lora_batch *b, int layer, cera_proj p, const float *x, size_t x_stride,
                           float *y, size_t y_stride, int64_t d0, int64_t d1);
/* True when every group has its A·x scratch (groups[g].t), which a backend's multi-phase
 * hook needs; false only when growing the scratch failed. */
bool cera_lora_batch_two_phase(const cera_lora_batch *b);
/* True when some group has a pair for (layer, p): the caller may skip the hook otherwise. */
bool cera_lora_batch_targets(const cera_lora_batch *b, int layer, cera_proj p);

/* Kernels, exposed for tests and benchmarks. One row: y[i] += s · dot(B_i, A·x) for
 * i in [d0, d1). The scalar reference and the optimized version give identical bits. */
void cera_lora_apply_row(const cera_lora_pair *p, float s, const float *x, float *y, int64_t d0, int64_t d1);
void cera_lora_apply_row_ref(const cera_lora_pair *p, float s, const float *x, float *y, int64_t d0,
                             int64_t d1);
/* The dot product every LoRA kernel uses: 8 interleaved partial sums, fixed reduction. */
float cera_lora_dot(const float *a, const float *b, int64_t n);

/* ---- Merging (lora_merge.c) -------------------------------------------------------- */

/* Writes base + Σ s·B·A of every adapter into a new GGUF at out_path. Merged tensors are
 * written as out_type, or in their base type when out_type < 0; every other tensor and
 * key is copied. */
cera_status cera_lora_merge(const cera_model *m, cera_adapter *const *adapters, const float *scales, int n,
                            const char *out_path, int out_type, cera_error *err);

#endif

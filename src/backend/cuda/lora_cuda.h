/*
 * lora_cuda.h — LoRA adapters on the GPU: the device form of an adapter, the per-batch
 * plan the kernels read, and the two launches that apply an adapter to a projection
 * (lora.cu), y += s · B(A·x) unmerged, as lora/lora.h defines it.
 *
 * Device layout:
 *   - an adapter is uploaded once, the first time a batch uses it (lora.c): its factors
 *     as F16 (the file's F32/F16/BF16/Q8_0 values rounded once; a value outside the F16
 *     range is refused), plus a table of cu_lora_pair, one per (layer, projection), in
 *     device memory. It stays until the adapter is freed (backend.h: adapter_free).
 *   - a batch's plan is a list of entries, one per (batch row, adapter of that row),
 *     sorted by row and, within a row, by adapter id (the order the CPU adds them in);
 *     row_first[r] .. row_first[r + 1] are row r's entries. Each entry has its slice of the
 *     A·x scratch t, [entry][segment][max_rank].
 *   - for a decode step (one row) the host also flattens the row's terms per (layer,
 *     projection) into an item table (cu_lora_item), so a kernel reaches them in one load.
 * The plan lives in device memory at fixed addresses and its entry count is read on the
 * device, so a captured decode graph stays valid when adapters are rescaled or swapped for
 * others of the same targets; a change of the projections any adapter targets (which
 * launches the step makes), of the entry count or of the scratch size needs a new capture.
 *
 * Per projection group (Q/K/V, O, gate/up, down):
 *   cu_lora_a:  t[e][seg][j] = A_j · x[row(e)]   (blocks over chunks of LORA_KC inputs; the
 *               last block of each (entry, segment) sums the chunk partials in order)
 *   cu_lora_b:  y[row][i] += mult · Σ_e s_e · B_i · t[e][seg]   (entries of the row in order)
 * Prefill of a prompt whose rows all share the adapters instead runs two cuBLAS GEMMs per
 * projection and adapter (lora.c). A decode step adds B·t inside kernels that read the
 * projection's output anyway (cu_rope_store_lora, cu_lora_swiglu, cu_norm_lora below).
 */
#ifndef CERA_BACKEND_CUDA_LORA_CUDA_H
#define CERA_BACKEND_CUDA_LORA_CUDA_H

#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One projection of one layer of an uploaded adapter (device memory). */
typedef struct cu_lora_pair {
    const void *a; /* F16 [rank rows of k] */
    const void *b; /* F16 [d rows of rank] */
    int rank;      /* 0: the adapter does not target this projection */
    float factor;  /* alpha / rank, or 1 when the adapter has no alpha */
} cu_lora_pair;

#define CU_LORA_PROJ 9 /* pairs per layer, in cera_proj order */
#define CU_LORA_MOE                                                                                          \
    4                      /* an MoE layer's targets (lora/lora.h: cera_lora_moe order), after every         \
                            * layer's projections in the table: [n_layer * CU_LORA_PROJ] then                \
                            * [n_layer * CU_LORA_MOE]; an expert target's a and b are expert 0's             \
                            * factors, the others' follow (lora/lora.h: cera_lora_expert) */
#define CU_LORA_MOE_BIT 16 /* lora_mask bit of MoE target t: CU_LORA_MOE_BIT + t */
#define CU_LORA_ROW_MAX 16 /* adapters per batch row (CERA_LORA_MAX_SET) */

/* One (row, adapter) entry of a batch plan. */
typedef struct cu_lora_ent {
    const cu_lora_pair *tab; /* the adapter's pair table [n_layer * 7] (device) */
    int32_t row;             /* batch row */
    float scale;             /* the user scale */
} cu_lora_ent;

/* Decode (one batch row): the row's adapter terms for one (layer, projection), flattened by
 * the host so that a kernel reaches them in one load instead of a chain of plan lookups. */
typedef struct cu_lora_item {
    const void *a, *b; /* F16 factors */
    int rank;
    float s;  /* user scale x alpha / rank */
    int slot; /* entry * 3 + segment: where its A·x lives in t */
    int pad;
} cu_lora_item;

/* The batch plan, device pointers (fixed while the state lives, except t, which grows when
 * an adapter of a larger rank arrives). head = {n_ent, row_first[0 .. n_batch]}. */
typedef struct cu_lora_plan {
    const int32_t *n_ent;      /* head[0] */
    const int32_t *row_first;  /* head + 1: [n_batch + 1] */
    const cu_lora_ent *ent;    /* [max_ent] */
    float *t;                  /* [entries][3][max_rank]: A·x */
    float *tpart;              /* [entries][3][n_chunk][max_rank]: its per-chunk parts */
    int32_t *count;            /* [max_ent][3] chunks done (zero between launches) */
    const cu_lora_item *items; /* decode: [n_layer * 7][CU_LORA_ROW_MAX] */
    const int32_t *item_n;     /* decode: [n_layer * 7] items of each (layer, projection) */
    int max_rank, n_chunk;
} cu_lora_plan;

#define LORA_KC       256  /* inputs per A·x chunk (one 16-byte load per lane of a warp) */
#define LORA_NORM_MAX 8192 /* decode with adapters: the widest residual row (n_embd) */

/* Up to three projections sharing one input (Q, K, V or gate, up). */
typedef struct cu_lora_segs {
    int n;
    int proj[3];      /* cera_proj */
    float *y[3];      /* output rows (cu_lora_b) */
    int64_t d[3];     /* output width */
    int64_t y_stride; /* floats between output rows */
} cu_lora_segs;

/* t for entries [0, n_ent) (n_ent: as the plan on the device has, or more: blocks past the
 * device's count return at once). x: the projections' input rows, k floats each, x_stride
 * apart. */
cudaError_t cu_lora_a(cudaStream_t st, const cu_lora_plan *p, int layer, const cu_lora_segs *segs,
                      const float *x, int64_t x_stride, int64_t k, int n_ent);

/* y[r] += mult · Σ s·B·t for rows [0, n_rows) of every segment. */
cudaError_t cu_lora_b(cudaStream_t st, const cu_lora_plan *p, int layer, const cu_lora_segs *segs, int n_rows,
                      float mult);

/* Decode (batch row 0): an adapter's B·t added where a kernel reads the projection's output
 * anyway, so it costs no launch of its own:
 *   cu_norm_lora: the RMS norm (into out, f32 + quantized) of the residual row x plus the
 *     pending mult·Σ s·B·t of projection proj (O or down) of `layer`; the new row goes to
 *     x_out, which must not alias x;
 *   cu_lora_swiglu: h = silu(gate + B·t + bias) · (up + B·t + bias), f32 and quantized,
 *     gate and up as the matvec stored them;
 *   cu_rope_store_lora: cu_rope_store for one token with Q, K and V each plus its B·t
 *     before the norm and rotation. */
cudaError_t cu_norm_lora(cudaStream_t st, const float *x, float *x_out, const float *weight, float eps,
                         const cu_act *out, const cu_lora_plan *p, int layer, int proj, float mult);
cudaError_t cu_lora_swiglu(cudaStream_t st, const cu_lora_plan *p, int layer, const float *gate,
                           const float *up, const float *bg, const float *bu, const cu_act *h);
cudaError_t cu_rope_store_lora(cudaStream_t st, const float *q_in, const float *k_in, const float *v_in,
                               const int32_t *pos, int n_head, int n_head_kv, int hd, const float *q_norm,
                               const float *k_norm, float eps, const cu_rope *rope, float *q_out,
                               const cu_kv *kv, const cu_lora_plan *p, int layer);

/* Routed experts: y[slot] += s · B_e(A_e · x[slot / x_div]) for n_slots slots, for every
 * adapter of the slot's batch row (slot_tok[slot], or slot / tok_div without it) that targets
 * MoE target `target` (cera_lora_moe) of `layer`; e = slot_exp[slot] (NULL: the router, one
 * matrix). x rows are k floats x_stride apart, y rows d floats y_stride apart. The adapters
 * are the batch plan's entries of that row, in order, as cu_lora_b's. */
cudaError_t cu_moe_lora(cudaStream_t st, const cu_lora_plan *p, int n_layer, int layer, int target,
                        const float *x, int64_t x_stride, int x_div, const int32_t *slot_exp,
                        const int32_t *slot_tok, int tok_div, int n_slots, int64_t k, int64_t d, float *y,
                        int64_t y_stride);

/* Converts n floats to F16 on the device (upload); the count of values outside the F16
 * range is added to *n_bad (device int). */
cudaError_t cu_lora_to_f16(cudaStream_t st, const float *src, void *dst, int64_t n, int32_t *n_bad);

#ifdef __cplusplus
}
#endif
#endif

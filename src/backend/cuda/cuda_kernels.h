/*
 * cuda_kernels.h — the launch interface between the CUDA backend's host code (C) and its
 * kernels (.cu files): device-side data layouts and one C function per launch.
 *
 * Layouts on the device:
 *   - weights (cu_weight): every type stays in its GGUF block layout, except Q4_0 and Q8_0,
 *     which are split at upload into a quant array (16 or 32 bytes per block, rows of
 *     k/32 blocks) and an F16 scale array [n, k/32], so a warp reads 512 contiguous bytes
 *     per load instruction, and Q6_K, split into its 192 quant bytes per super-block
 *     (aligned for 16-byte loads) and an 18-byte scales+d record [n, k/256]. Float rows (F32/F16/BF16) are
 * padded with zeros to k_pad, a multiple of 32, so every kernel works in units of 32 elements.
 * A 3-D expert tensor (routed experts) is one weight of n_expert x rows-per-expert rows.
 *   - activations (cu_act): rows of k_pad floats, plus, for the int8 dot-product kernels,
 *     the same rows quantized per 32 elements as llama.cpp's Q8_0 does (int8 quants, the
 *     scale rounded through F16, and the sum of the quants for the Q4_0 offset).
 *   - KV cache: paged as the engine's (kv/kv_cache.h): each group (full layers, sliding-window
 *     layers) has its own storage of blocks of CU_KV_BLOCK positions; a block holds, for each
 *     layer of the group in KV-layer order, its K then V section; a section is
 *     [CU_KV_BLOCK][kv_dim] (the layer's n_head_kv * head_dim) F16 or BF16 values or, for a
 *     Q8_0 cache, the int8 quants [CU_KV_BLOCK][kv_dim] followed by their F16 scales
 *     [CU_KV_BLOCK][kv_dim / 32] (llama.cpp's q8_0 numbers, split so that rows load 16 bytes
 *     at a time); a Q4_0 cache likewise, with the 4-bit quants of consecutive values paired in
 *     a byte (the lower value in the low nibble), [CU_KV_BLOCK][kv_dim / 2], then the scales
 *     (llama.cpp's q4_0 numbers: d = the largest-magnitude value / -8, q = x / d + 8 clamped
 *     to 15). K and V are kept in one type. A token finds its rows through its sequence's
 *     block table of the layer's group.
 *
 * Every launch function returns the launch's cudaError_t (cudaGetLastError), so the host
 * code checks each one.
 */
#ifndef CERA_BACKEND_CUDA_KERNELS_H
#define CERA_BACKEND_CUDA_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" { /* types.h is a C header without its own guard */
#endif

#include "tensor/types.h"

typedef struct cu_weight {
    cera_type type;
    int64_t k, n;      /* logical shape: n rows of k */
    int64_t k_pad;     /* k rounded up to 32 for float types; k otherwise */
    int64_t row_bytes; /* bytes per row in data (GGUF layout or padded float row) */
    void *data;        /* the rows, or the split quants */
    void *scales;      /* split types: F16 scales [n, k/32] (Q6_K: 18-byte records [n, k/256]) */
    bool split;        /* Q4_0 / Q8_0 / Q6_K repacked */
} cu_weight;

/* An activation: rows of k_pad values, as f32 and (when q is set) as per-32 int8 quants. */
typedef struct cu_act {
    float *f;   /* [rows, k_pad] */
    int8_t *q;  /* [rows, k_pad] or NULL */
    float *d;   /* [rows, k_pad / 32] scales (F16-rounded, as llama.cpp's Q8_0) */
    int32_t *s; /* [rows, k_pad / 32] sums of the quants */
    int64_t k;  /* logical length */
    int64_t k_pad;
} cu_act;

/* True when the decode kernels for this weight type read int8-quantized activations. */
bool cu_type_uses_q8_act(cera_type t);
/* True for the types stored split on the device (Q4_0, Q8_0, Q6_K). */
bool cu_type_split(cera_type t);
/* True when the CUDA backend has kernels for this weight type. */
bool cu_type_supported(cera_type t);

/* ---- Weights ----------------------------------------------------------------------- */

/* Converts raw GGUF rows (already on the device, in src) into w's layout (w->data, w->scales
 * allocated by the caller with cu_weight_bytes sizes). */
cudaError_t cu_weight_import(cudaStream_t st, const cu_weight *w, const void *src);
/* Bytes of w->data and w->scales for a weight of this type and shape. */
void cu_weight_bytes(cera_type t, int64_t k, int64_t n, int64_t *data_bytes, int64_t *scale_bytes,
                     int64_t *k_pad, int64_t *row_bytes);
/* Fills w with random but valid blocks (benchmarks): scales small and finite. */
cudaError_t cu_weight_fill_random(cudaStream_t st, const cu_weight *w, uint64_t seed);
/* Fills n floats with a constant. */
cudaError_t cu_fill_f32(cudaStream_t st, float *p, int64_t n, float v);

/* ---- Element-wise and row ops (act.cu) ----------------------------------------------- */

/* out.f[i, :] = embd_scale * dequant(W[rows[i]]) for i < n_rows (device rows). */
cudaError_t cu_get_rows(cudaStream_t st, const cu_weight *w, const int32_t *rows, int n_rows, float *out,
                        int64_t out_stride, float scale);

/* out[i] = rmsnorm(x[i]) * weight for n_rows rows of k (stride x_stride floats), written
 * into out as f32 and, when out->q is set, quantized. */
cudaError_t cu_rmsnorm_act(cudaStream_t st, const float *x, int64_t x_stride, int n_rows, const float *weight,
                           float eps, const cu_act *out);

/* Quantizes n_rows rows of act->f into act->q/d/s. */
cudaError_t cu_quantize_act(cudaStream_t st, const cu_act *act, int n_rows);

/* Converts n_rows rows of f32 (stride src_stride) into F16 or BF16 rows of k_pad
 * (zero padded) for the GEMM path. */
cudaError_t cu_convert_rows(cudaStream_t st, const float *src, int64_t src_stride, int n_rows, int64_t k,
                            int64_t k_pad, void *dst, bool bf16);

/* x[i, j] += scale * (y[i, j] + bias[j]) for n_rows rows of k (bias may be NULL). */
cudaError_t cu_add_scaled(cudaStream_t st, float *x, int64_t x_stride, const float *y, int64_t y_stride,
                          const float *bias, int n_rows, int64_t k, float scale);

/* h[i, j] = act(g[i, j] + bg[j]) * (u[i, j] + bu[j]) into act rows (f32, k_pad stride); act
 * silu, or with gelu GELU's tanh approximation with its input and result rounded to F16 (as
 * llama.cpp's CPU table, which the goldens come from). */
cudaError_t cu_glu(cudaStream_t st, const float *g, const float *u, int64_t gu_stride, const float *bg,
                   const float *bu, int n_rows, bool gelu, const cu_act *h);

/* y[i, j] = (y[i, j] + bias[j]) * scale (bias may be NULL), in place. */
cudaError_t cu_bias_scale(cudaStream_t st, float *y, int64_t stride, const float *bias, int n_rows, int64_t k,
                          float scale);

/* out[0] = argmax(x[0..n)) (lowest index on ties). */
cudaError_t cu_argmax(cudaStream_t st, const float *x, int n, int32_t *out);

/* Dequantizes W into F16 rows of k_pad (for cuBLAS). */
cudaError_t cu_dequant_f16(cudaStream_t st, const cu_weight *w, void *dst);

/* ---- Decode matvec (matvec.cu) --------------------------------------------------------- */

typedef enum cu_mv_epilogue {
    CU_MV_STORE,  /* y[r] = scale * (dot + bias[r]) */
    CU_MV_ADD,    /* y[r] += scale * (dot + bias[r])  (the residual add) */
    CU_MV_SWIGLU, /* segments 0 (gate) and 1 (up): h[r] = silu(g) * u, into an act (+ quantized) */
} cu_mv_epilogue;

typedef struct cu_mv_seg {
    const cu_weight *w; /* all segments of one launch share a type and k */
    float *y;           /* STORE/ADD output [w->n] */
    const float *bias;  /* [w->n] or NULL */
} cu_mv_seg;

/* y = W · x for up to three weights in one launch (Q, K and V; or gate and up). The kernel
 * launched just before must not write the weights: under programmatic dependent launch the
 * Q4_0/Q8_0/F16/BF16 kernels start copying them before they wait for it (matvec.cu). */
cudaError_t cu_matvec(cudaStream_t st, const cu_mv_seg *segs, int n_segs, const cu_act *x, cu_mv_epilogue epi,
                      float scale, const cu_act *h_out);

/* cu_matvec for n_rows activation rows (a decode batch): y_j = W · x_j for the rows x_j of x
 * (consecutive, k_pad apart, quantized as cu_quantize_act leaves them), each weight row read
 * once per launch for up to 16 activation rows (SwiGLU: 8; more rows take a launch per 16 or
 * 8). Output row j of segment i starts at segs[i].y + j * y_stride (floats; STORE and ADD);
 * SWIGLU writes row j of h_out (its k_pad apart). The epilogues are cu_matvec's, per row.
 * n_rows = 1 is cu_matvec.
 *   Q4_0, Q8_0, F16, BF16 (the ring kernel) and Q4_K, Q6_K (the register kernel's loops) have
 *   several-row kernels whose every row is bit-identical to cu_matvec's result for that row
 *   alone (the same operations in the same order per row; tests/cuda/test_cuda_matvec_rows.c
 *   checks it, under the default kernel variants: CERA_CUDA_MV changes the one-row kernels
 *   only). The other types (F32, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS) run
 *   cu_matvec once per row: identical too, but they read the weights n_rows times. Speed:
 *   bench/RESULTS.md (not weight-bound yet: 8 rows cost 1.7-5.3x one row's time). */
cudaError_t cu_matvec_rows(cudaStream_t st, const cu_mv_seg *segs, int n_segs, const cu_act *x, int n_rows,
                           int64_t y_stride, cu_mv_epilogue epi, float scale, const cu_act *h_out);

/* ---- Routed experts (matvec.cu, moe.cu) ------------------------------------------------- */

#define CU_MOE_MAX_EXPERT 256 /* experts of one MoE block the routing kernels take */

/* A decode step's expert matvecs: for n_slots slots p, y_p = W_e · x_{p / x_div} with e =
 * sel[p] (device), W the stacked weight w (every expert's matrix of rows_per_expert rows one
 * after another). Without w_up: output row p at y + p * y_stride. With w_up (same type and
 * shape): h_out row p = silu(W_e x) ⊙ (U_e x), quantized, as cu_matvec's SwiGLU epilogue.
 * Each slot reads only its expert's rows. */
cudaError_t cu_matvec_moe(cudaStream_t st, const cu_weight *w, const cu_weight *w_up, int64_t rows_per_expert,
                          const int32_t *sel, int n_slots, int x_div, const cu_act *x, float *y,
                          int64_t y_stride, const cu_act *h_out);

/* The router's choice for n_tok tokens from their logits rows (ld floats apart; overwritten
 * by the gating's probabilities): each token's k experts into sel [n_tok, k] and their
 * weights into wt, as backend/cpu/moe.c (bias steers the choice only; may be NULL). */
cudaError_t cu_moe_route(cudaStream_t st, float *logits, int64_t ld, int n_tok, int n_expert, int k,
                         bool sigmoid, const float *bias, bool norm_w, float w_scale, int32_t *sel,
                         float *wt);

/* cu_moe_route of the logits of an F32 router for the f32 rows of x, in one launch (for
 * decode steps; logits [n_tok, router->n] are left in logits). counter: a device int, zero,
 * left zero. */
cudaError_t cu_moe_router(cudaStream_t st, const cu_weight *router, const cu_act *x, int n_tok, int k,
                          bool sigmoid, const float *bias, bool norm_w, float w_scale, float *logits,
                          int32_t *sel, float *wt, int32_t *counter);

/* dst row i = src row rows[i] (device), k floats each, for i < n. */
cudaError_t cu_gather_rows(cudaStream_t st, const float *src, int64_t src_stride, const int32_t *rows, int n,
                           int64_t k, float *dst, int64_t dst_stride);

/* y[t] = sum over j < k of wt[t k + j] · eo[where[t k + j]] for n_tok tokens (where NULL:
 * slot t k + j's output is row t k + j), each product rounded, added in slot order; with add,
 * y[t] += scale · that sum instead (the residual add, as cu_add_scaled). */
cudaError_t cu_moe_combine(cudaStream_t st, const float *eo, int64_t eo_stride, const int32_t *where,
                           const float *wt, int n_tok, int k, int64_t n_embd, float *y, int64_t y_stride,
                           bool add, float scale);

/* rows [row0, row0 + n) of w as a weight of its own (pointers into w's storage). */
cu_weight cu_weight_rows(const cu_weight *w, int64_t row0, int64_t n);

/* ---- Short convolution (conv.cu, LFM2) ----------------------------------------------------- */

typedef struct cu_conv_args {
    const float *src; /* [n_tok rows, src_stride apart] of B | C | X (3 n_embd) */
    int64_t src_stride;
    int n_tok, n_embd, lc; /* lc: taps (l_cache) */
    const int32_t *pos;    /* device [n_tok]: each token's position */
    const int32_t *first;  /* device [n_tok]: its sequence's first position in the batch */
    const int32_t *slot;   /* device [n_tok]: its sequence's state slot */
    const int32_t *last;   /* device [n_tok]: 1 for the last token of its sequence */
    const float *w;        /* [n_embd rows of lc taps] */
    float *state;          /* [slots][...]: slot s at s * state_slot, this layer's rows at state_off */
    int64_t state_slot, state_off;
} cu_conv_args;

/* out (f32 rows) = C ⊙ conv(B ⊙ X) for every token, then each sequence's state moves on to
 * the rows before its next position (conv.cu says more). The caller quantizes out. */
cudaError_t cu_shortconv(cudaStream_t st, const cu_conv_args *a, const cu_act *out);
/* ---- Batched decode matmul on the tensor cores (mma.cu) ------------------------------ */

/* True for the weight types cu_mma_q8 takes (Q4_0, Q8_0, split). */
bool cu_mma_supported(cera_type t);
/* Bytes of the workspace cu_mma_q8 needs for w and n_rows (0: none; the split-K partial sums,
 * [slices][min(n_rows, 64)][w->n] floats). */
int64_t cu_mma_work_bytes(const cu_weight *w, int n_rows);
/* y_r = W · x_r for the n_rows (1..any; 64 per launch, the weight read once per 64) activation
 * rows x_r of x (consecutive, k_pad apart, quantized by cu_quantize_act), on the tensor cores
 * (int8 mma per 32-element block, F32 scaling as cu_matvec's terms; only their summation order
 * differs). Output row r at y + r * y_stride (n floats): y = scale * dot, or with add
 * y += scale * dot. work: cu_mma_work_bytes(w, n_rows) bytes of device memory (NULL when 0),
 * used in stream order. Q4_0 / Q8_0 only (cu_mma_supported); mma.cu says how. As cu_matvec's,
 * the kernel launched just before must not write the weights (under programmatic dependent
 * launch the first weight loads go out before the wait). */
cudaError_t cu_mma_q8(cudaStream_t st, const cu_weight *w, const cu_act *x, int n_rows, float *y,
                      int64_t y_stride, bool add, float scale, float *work, int64_t work_bytes);

/* ---- Attention (attention.cu) ----------------------------------------------------------- */

#define CU_KV_BLOCK 32 /* positions per KV block (CERA_KV_BLOCK) */

#ifdef __CUDACC__
#define CU_HD __host__ __device__
#else
#define CU_HD
#endif

/* The cache's element type (layout above). */
enum { CU_KV_F16 = 0, CU_KV_Q8 = 1, CU_KV_Q4 = 2, CU_KV_BF16 = 3 };

/* Bytes of one (block, layer, K or V) section of the cache (layout above). */
static inline CU_HD int64_t cu_kv_section_bytes(int type, int64_t kv_dim) {
    const int64_t scales = CU_KV_BLOCK * (kv_dim / 32) * 2;
    return type == CU_KV_Q8   ? CU_KV_BLOCK * kv_dim + scales
           : type == CU_KV_Q4 ? CU_KV_BLOCK * kv_dim / 2 + scales
                              : CU_KV_BLOCK * kv_dim * 2;
}

/* One layer's view of the paged KV cache for a batch. */
typedef struct cu_kv {
    void *base;               /* its group's blocks, block_bytes each */
    const int32_t *tables;    /* device: the batch's block tables of the group, concatenated */
    const int32_t *tok_table; /* device [n_tok]: where each token's table starts in tables */
    int64_t block_bytes;      /* bytes of one block of the group */
    int64_t offset;           /* bytes from a block's start to this layer's K section */
    int kv_dim;               /* the layer's row: n_head_kv * head_dim */
    int window;               /* a query at p sees positions p - window + 1 .. p (0: every earlier one) */
    int type;                 /* CU_KV_F16, _Q8, _Q4 or _BF16 */
    int rot_k, rot_v;         /* Walsh–Hadamard pieces Q and K, V and the output turn in (0: none) */
} cu_kv;

typedef struct cu_rope {
    int n_rot;             /* rotated dims per head */
    bool neox;             /* pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
    bool enabled;          /* false: no rotation (granite without rope) */
    const float *inv_freq; /* [n_rot/2]: base^(-2i/n_rot) / freq_factor[i] */
    const float *ramp;     /* [n_rot/2]: YaRN ramp mix times ext_factor (0 without YaRN) */
    float freq_scale;
    float mscale;  /* cos/sin magnitude (attn_factor, times YaRN's 1 + 0.1 ln(1/freq_scale)) */
    float q_scale; /* Q multiplied by it after the rotation (Gemma 3; 1: none) */
} cu_rope;

/* For n_tok tokens: Q/K per-head RMS norm (when q_norm/k_norm set), RoPE at pos[i], Q
 * into q_out [n_tok, n_head * hd], K and V (from k_in/v_in) into the cache at pos[i].
 * q_in/k_in/v_in rows are in_stride floats apart. */
cudaError_t cu_rope_store(cudaStream_t st, const float *q_in, const float *k_in, const float *v_in,
                          int64_t in_stride, int n_tok, const int32_t *pos, int n_head, int n_head_kv, int hd,
                          const float *q_norm, const float *k_norm, float eps, const cu_rope *rope,
                          float *q_out, const cu_kv *kv);

#define CU_ATT_MAX_SPLITS 64 /* the most splits of one query row's slots */
/* Query heads of a KV head's group that one decode-attention block serves (launch_dec_g in
 * attention.cu): a group of g heads takes (g + it - 1) / it blocks per split. */
static inline int cu_att_dec_heads(int g) { return g == 1 ? 1 : g == 2 ? 2 : 4; }
typedef struct cu_attn_scratch {
    float *part_acc;   /* [n_tok * n_head * max_splits * hd] */
    float *part_ml;    /* [n_tok * n_head * max_splits * 2] */
    int32_t *counters; /* [n_tok * n_head], zero; left zero after each launch */
    int max_splits;    /* at most CU_ATT_MAX_SPLITS */
} cu_attn_scratch;

/* out (f32 [n_tok, n_head * hd] in act->f, quantized when act->q is set and hd % 32 == 0,
 * else by a cu_quantize_act the caller runs) = softmax(q K^T * scale) V over the KV slots
 * 0..pos[i] (causal; with kv->window only pos[i] - window + 1 .. pos[i], and no slot before
 * that is read: a sliding group's dropped blocks have no table entry). qt = 1: each token on its own (decode;
 * tokens may belong to different sequences), split over n_splits chunks per KV head (flash-decoding) and
 * combined by the last block of each head. qt > 1: the tokens are consecutive ones of one sequence (one block
 * table, increasing positions): with act->q unset and hd a multiple of 16 up to 128 they go to the
 * tensor-core kernel (64 per block, no splits), else qt of them (capped at 16 / query heads per KV head)
 * share each staged tile. attention.cu says more. */
cudaError_t cu_attention(cudaStream_t st, const float *q, int n_tok, const int32_t *pos, int n_head,
                         int n_head_kv, int hd, const cu_kv *kv, float scale, int n_splits, int qt,
                         const cu_attn_scratch *scr, const cu_act *out);

/* Launches decode kernels with programmatic dependent launch while on (forward.c turns it
 * on around the decode step, off for everything else). */
void cu_set_pdl(bool on);
bool cu_pdl_on(void);

/* Measurement helpers (bench). */
cudaError_t cu_read_kernel(cudaStream_t st, const void *src, int64_t bytes, float *sink);

#ifdef __cplusplus
}
#endif
#endif

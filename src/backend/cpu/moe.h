/*
 * moe.h — the CPU backend's routed experts (model/graph.h CERA_OP_MOE, model.h cera_experts).
 *
 * Per token: router logits (a matmul over the batch), probabilities, the top n_used experts by
 * probability + selection bias, their weights. Then the batch's token slots are grouped by
 * expert (a counting sort, tokens in batch order within an expert) and each chosen expert runs
 * once over its gathered rows: gate and up matmuls, SwiGLU, down matmul. So each expert's
 * weights are read once per batch, and a decode step reads only the n_used chosen experts.
 * Finally each token sums its experts' outputs times their weights in slot order, as
 * llama.cpp's build_moe_ffn (each product rounded, then added left to right).
 *
 * LoRA on the router and the experts (llama.cpp's build_lora_mm / build_lora_mm_id): after the
 * router matmul and after each expert's gate, up and down matmul, each row gets y += s·B(A·x) of
 * every adapter of its sequence that targets that matrix (expert e's own factors), with the
 * portable row kernel of lora.h, so a row's result depends on nothing else in the batch.
 */
#ifndef CERA_BACKEND_CPU_MOE_H
#define CERA_BACKEND_CPU_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/threadpool.h"
#include "core/error.h"
#include "lora/lora.h"
#include "model/graph.h"

typedef struct cera_cpu_moe {
    int n_batch, max_expert, max_used;
    int64_t n_embd, n_ff;
    float *logits;  /* [n_batch, max_expert] router logits, then probabilities */
    int32_t *sel;   /* [n_batch * max_used] the expert of each token slot t * n_used + j */
    float *wt;      /* [n_batch * max_used] its weight */
    int32_t *start; /* [max_expert + 1] where each expert's slots begin in order */
    int32_t *order; /* [n_batch * max_used] slots grouped by expert */
    int32_t *where; /* [n_batch * max_used] a slot's index in order */
    float *xg;      /* [n_batch, n_embd] one expert's gathered inputs */
    float *g, *u;   /* [n_batch, n_ff] its gate and up outputs */
    float *eo;      /* [n_batch * max_used, n_embd] the experts' outputs, by index in order */
    /* LoRA (lora.h cera_lora_moe targets): each token's adapter groups of the batch plan */
    int32_t *tok_n;   /* [n_batch] */
    int32_t *tok_g;   /* [n_batch * CERA_LORA_MAX_SET] group indices */
    float *tok_s;     /* [n_batch * CERA_LORA_MAX_SET] user scales */
    int32_t *row_tok; /* [n_batch] the token of each of an expert's gathered rows */
} cera_cpu_moe;

/* Scratch for the graph's MOE ops over batches of up to n_batch tokens (nothing when it has
 * none). */
cera_status cera_cpu_moe_init(cera_cpu_moe *s, const cera_graph *g, int n_batch, cera_error *err);
void cera_cpu_moe_free(cera_cpu_moe *s);

/* y[t] (row stride ldy) = the experts' output for x[t] (dense rows of n_embd), t < n; pk: the
 * repacked copies of the matrices in cera_experts_matrix order (model.h; NULL entries: the file
 * layout); act is matmul scratch for n rows of any of them. */
struct cera_packed_weight;
void cera_cpu_moe_run(cera_cpu_moe *s, cera_pool *pool, const cera_experts *ex,
                      const struct cera_packed_weight *const *pk, const float *x, int n, float *y, size_t ldy,
                      void *act, const cera_lora_batch *lora, int layer);

#endif

/*
 * backend.h — where the engine meets a compute backend: the batch a forward pass
 * takes and the function table a backend implements. The device choice is made in
 * one place (engine/engine.c, open_backend); the CPU backend lives in src/backend/cpu,
 * a CUDA one in src/backend/cuda.
 *
 * The forward contract:
 *   inputs   a batch of n_tokens tokens, each with its id, its position and its
 *            sequence (an index into batch->seqs), and whether it wants logits. Tokens
 *            of one sequence come in increasing position order, and every sequence's
 *            block table already covers its highest position in the batch
 *            (cera_kv_seq_reserve). Positions below a token's own that are not in the
 *            batch must already be in the cache (from earlier forward calls).
 *   effects  the K and V of every batch token are written to its sequence's blocks,
 *            for every layer; each token attends causally to positions 0..pos of its
 *            own sequence.
 *   outputs  one row of n_vocab logits per token that wants them, in batch order,
 *            written to logits ([n_out, n_vocab], host memory). A backend with
 *            logits_get also takes logits == NULL: then, for every sequence of the batch
 *            with a wanted token, the last such row is kept on the device in that
 *            sequence's slot (indexed by cera_kv_seq.id, allocated by kv_init), so that
 *            no other sequence's forward overwrites it; nothing is copied to the host.
 * A row kept on the device is read through two optional ops (NULL in the CPU backend):
 *   logits_get  copies sequence slot seq_id's row to the host (the session does so
 *               lazily, when the logits are asked for);
 *   sample      runs the session's sampler chain on it there and returns the token:
 *               the same token, RNG draw and penalty history as cera_sampler_sample on
 *               the same logits. A chain the backend does not run is refused with
 *               CERA_ERR_UNSUPPORTED before anything is drawn (the caller then fetches
 *               the row and samples on the host; the RNG sequence is the same).
 *               With a grammar's token mask (a bit per token, set: allowed) the token
 *               is cera_sampler_sample_masked's: the mask goes to the device, the
 *               row never comes back, and -1 says the mask left nothing.
 *               The row itself stays unmodified.
 * KV storage: the engine has one pool (kv/kv_cache.h) for all its sequences. A backend
 * that keeps K/V in its own memory (kv_on_host false) allocates storage for every block
 * of it in kv_init, and copies blocks in kv_copy (copy on write of a shared block, asked
 * for before the forward that writes it).
 * Batch invariance: a token's logits depend only on its own sequence (its tokens in the
 * batch and its cache), never on the other sequences of the batch or on the batch's
 * size: the CPU backend gives the same bits, a GPU backend the same within its stated
 * tolerance.
 * Every op is called under the engine's forward lock (the backend's buffers serve one
 * call at a time).
 * n_tokens is at most the n_batch the backend was opened with. A backend allocates
 * everything at open (and KV storage at kv_init); forward allocates nothing.
 */
#ifndef CERA_BACKEND_BACKEND_H
#define CERA_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "cera.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "kv/kv_cache.h"
#include "lora/lora.h"

typedef struct cera_batch {
    int n_tokens;
    const cera_token *token;  /* [n_tokens] */
    const int32_t *pos;       /* [n_tokens] */
    const int32_t *seq;       /* [n_tokens]: index into seqs */
    const bool *want_logits;  /* [n_tokens] */
    cera_kv_seq *const *seqs; /* [n_seqs] */
    int n_seqs;
    const cera_lora_batch *lora; /* rows grouped by LoRA adapter (lora/lora.h), or NULL: none */
    /* Embeddings instead of logits: each wanted token's row is its final hidden state after
     * the output norm ([n_out, n_embd], host memory; llama.cpp's t_embd), and the output
     * matmul is not computed. A backend that cannot refuses with CERA_ERR_UNSUPPORTED. */
    bool embd;
} cera_batch;

typedef struct cera_backend cera_backend;

struct cera_backend {
    const char *name; /* "cpu", "cuda" */
    /* What else decides its numbers, where the same model and inputs may round otherwise (the
     * CPU's kernel tier), or NULL: part of the engine's fingerprint (cera_engine_fingerprint). */
    const char *variant;
    /* Whether KV blocks live in host memory (cera_kv_pool.data) or in the backend's own
     * storage (attached to cera_kv_pool.dev by kv_init). */
    bool kv_on_host;
    /* Whether it rotates block-type K/V caches as llama.cpp (cera_kv_format's rot_k, rot_v);
     * without it the engine gives it a pool that is never rotated. */
    bool kv_rotates;
    /* The longest run of one sequence's tokens in a forward call that computes each token as
     * a call of that token alone would (the CPU's attention changes its rounding for longer
     * runs), or 0 where no length does exactly (a GPU's matmuls): speculative drafts stay
     * within it. */
    int exact_run_max;
    /* The engine's pool: storage for its blocks and a logits row per sequence slot. */
    cera_status (*kv_init)(cera_backend *be, const cera_kv_pool *pool, cera_error *err); /* may be NULL */
    void (*kv_free)(cera_backend *be);                                                   /* may be NULL */
    /* Copies whole blocks (every layer's K and V) src -> dst; may be NULL with kv_on_host. */
    cera_status (*kv_copy)(cera_backend *be, const cera_kv_copy *copies, int n, cera_error *err);
    /* A device backend's copy of a slot's recurrent state (kv_cache.h: the host pool keeps
     * its own): zeroed when src < 0 (a new or cut-back sequence), else slot src's copied (a
     * fork). May be NULL with kv_on_host. */
    cera_status (*seq_state)(cera_backend *be, int dst, int src, cera_error *err);
    /* A device backend's side of a saved session (engine/state.c): the bytes of one block of
     * group g in its storage (0: none), and copies of a block or of a slot's recurrent state
     * to host memory (to_device false) or from it. May be NULL with kv_on_host. */
    size_t (*kv_block_bytes)(cera_backend *be, int g);
    cera_status (*kv_io)(cera_backend *be, int g, int block, void *host, bool to_device, cera_error *err);
    cera_status (*state_io)(cera_backend *be, int slot, void *host, bool to_device, cera_error *err);
    cera_status (*forward)(cera_backend *be, const cera_batch *batch, float *logits, cera_error *err);
    /* Optional: the row the last forward with logits == NULL kept for sequence slot seq_id,
     * into out [n_vocab] (host). */
    cera_status (*logits_get)(cera_backend *be, int seq_id, float *out, cera_error *err);
    /* Optional: samples that row with smp (draws from its RNG; does not accept the token),
     * within mask [(n_vocab + 31) / 32] words when not NULL. */
    cera_status (*sample)(cera_backend *be, int seq_id, cera_sampler *smp, const uint32_t *mask,
                          cera_token *out, cera_error *err);
    /* Optional: drops the backend's own copy of adapter `id` (called when it is freed). */
    void (*adapter_free)(cera_backend *be, uint64_t id);
    void (*free)(cera_backend *be);
};

/* The CPU backend (src/backend/cpu/forward.c). */
/* Whether the CPU backend has kernels for every weight the model's op list multiplies
 * (CERA_ERR_UNSUPPORTED naming the first tensor and its type when not), without opening it. */
cera_status cera_cpu_backend_check(const cera_model *model, cera_error *err);
cera_status cera_cpu_backend_open(const cera_model *model, const cera_engine_params *params,
                                  cera_backend **out, cera_error *err);

#ifdef CERA_CUDA
/* The CUDA backend (src/backend/cuda): same contract. */
cera_status cera_cuda_backend_open(const cera_model *model, const cera_engine_params *params,
                                   cera_backend **out, cera_error *err);
#endif

#endif

/*
 * engine_impl.h — the insides of the public cera_engine and cera_session (include/cera.h),
 * shared by engine.c, session.c and generate.c.
 *
 * An engine owns the mapped file, the model description, the tokenizer and one compute
 * backend (which owns the thread pool and the activation buffers). A session owns one
 * sequence: its KV blocks (a pool sized for n_ctx, allocated at creation), its sampler,
 * its logits and the batch arrays of an eval. Sessions share the engine's backend; its
 * forward calls are serialized by the engine's lock (a session itself is used by one
 * thread at a time).
 */
#ifndef CERA_SESSION_ENGINE_IMPL_H
#define CERA_SESSION_ENGINE_IMPL_H

#include <pthread.h>

#include "cera.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "session/backend.h"
#include "session/kv_cache.h"
#include "session/lora.h"
#include "tokenizer/tokenizer.h"

/* The largest n_ctx and n_batch an engine accepts (cera.h): positions + a batch stay far from INT_MAX. */
#define CERA_MAX_CTX (1 << 24)

struct cera_engine {
    gguf_file *file;
    cera_model model;
    cera_tokenizer *tok;
    cera_backend *backend;
    cera_engine_params params; /* resolved: n_ctx and n_batch are set */
    /* the backend's buffers serve one forward call at a time: sessions evaluated from
     * several threads take turns */
    pthread_mutex_t forward_lock;
};

struct cera_session {
    cera_engine *engine;
    cera_kv_pool *pool;
    cera_kv_seq seq;
    cera_kv_seq *seqs[1];
    cera_token *tokens; /* [n_ctx]: the evaluated timeline, to rebuild the penalty history on truncate */
    cera_sampler *sampler;
    cera_sampler_params sampler_params;
    /* the last eval's logits: [n_logit_rows, n_vocab] */
    float *logits;
    size_t logit_cap_rows;
    int n_logit_rows;
    int logits_first; /* the eval-relative index of row 0 (all rows, or only the last) */
    /* the last row lives on the device (cera_kv_pool.dev_logits, backend.h) and `logits`
     * holds it only once fetched: cera_session_logits fetches it the first time it is
     * asked for after an eval; cera_session_sample samples it there when it can */
    bool logits_on_device, logits_fetched;
    int last_eval_n;
    /* the token cera_session_sample recorded; the eval that appends it does not record it again */
    cera_token pending_sampled;
    /* the last token cera_generate streamed without evaluating it (-1: none): the next
     * eval, sample or generate evaluates it first, so that a continuation equals one long
     * generation without a forward wasted when nothing follows */
    cera_token pending_eval;
    /* one forward call's arrays, [n_batch] */
    int32_t *pos, *seq_idx;
    bool *want;
    /* attached LoRA adapters and their batch plan (lora_session.c) */
    cera_lora_set lora;
    cera_lora_batch lora_batch;
};

/* Evaluates the pending generated token, if any (session.c). */
cera_status cera_session_flush_pending(cera_session *s, cera_error *err);

/* cera_session_sample with a status and a message: CERA_ERR_FORMAT for non-finite logits,
 * CERA_ERR_INVALID_ARG with nothing to sample from, a full context's or a device's error
 * (session.c). */
cera_status cera_session_sample_status(cera_session *s, cera_token *out, cera_error *err);

/* Whether the last eval left logits to sample from (on the host or the device); fetches
 * nothing (session.c). */
bool cera_session_has_logits(const cera_session *s);

#endif

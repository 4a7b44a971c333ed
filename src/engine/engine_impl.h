/*
 * engine_impl.h — the insides of the public cera_engine and cera_session (include/cera.h),
 * shared by engine.c, session.c and generate.c.
 *
 * An engine owns the mapped file, the model description, the tokenizer, one compute
 * backend (which owns the thread pool and the activation buffers) and the KV pool every
 * session takes its blocks from. A session owns one sequence of that pool (a slot and its
 * block table), its sampler and its logits. Sessions share the engine's backend and pool;
 * forward calls and pool changes are serialized by the engine's lock (a session itself is
 * used by one thread at a time). batch.c turns evals of one or many sessions into forward
 * calls.
 */
#ifndef CERA_ENGINE_ENGINE_IMPL_H
#define CERA_ENGINE_ENGINE_IMPL_H

#include <pthread.h>

#include "cera.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "backend/backend.h"
#include "kv/kv_cache.h"
#include "lora/lora.h"
#include "tokenizer/tokenizer.h"

/* The largest n_ctx and n_batch an engine accepts (cera.h): positions + a batch stay far from INT_MAX. */
#define CERA_MAX_CTX (1 << 24)
/* spec.c's classes: of n-gram match lengths, and of batch token counts (1..16, then powers of two) */
#define CERA_SPEC_CLASSES 4
#define CERA_STEP_CLASSES 24

struct cera_engine {
    gguf_file *file;
    cera_model model;
    cera_tokenizer *tok;
    cera_backend *backend;
    cera_engine_params params; /* resolved: n_ctx, n_batch and n_seq_max are set */
    cera_kv_pool *kv;          /* every session's KV blocks */
    /* the backend's buffers serve one forward call at a time and the pool is shared:
     * sessions used from several threads take turns (forward calls, pool changes) */
    pthread_mutex_t forward_lock;
    /* batch.c's buffers for one forward call, used under the lock: [n_batch] arrays, the
     * rows' adapter plan, and host logits of the call's wanted rows (grown, rarely, to the
     * most rows a call has wanted) */
    cera_token *b_tok;
    int32_t *b_pos, *b_seq;
    bool *b_want;
    cera_kv_seq **b_seqs;
    const cera_lora_set **b_sets;
    void *b_runs, *b_call; /* [n_seq_max] per-session progress (batch.c) */
    cera_lora_batch lora_plan;
    float *stage_logits;
    size_t stage_floats;
    /* the vocabulary's byte trie for grammar masks: built by the first grammar a session
     * sets (under forward_lock), read-only afterwards */
    cera_grammar_tokens *gtok;
    /* the measured time of a batch by its token count (spec.c's classes; 0: not seen yet), a
     * decayed mean in ms, for CERA_SPEC_AUTO's cost of drafts (written under forward_lock) */
    double step_ms[CERA_STEP_CLASSES];
};

/* A parsed grammar shared by the sessions forked from one that set it (refcounted:
 * sessions of one engine may live on several threads). */
typedef struct cera_grammar_ref cera_grammar_ref;

struct cera_session {
    cera_engine *engine;
    cera_kv_seq seq;    /* its sequence in the engine's pool */
    cera_token *tokens; /* [n_ctx]: the evaluated timeline, to rebuild the penalty history on truncate */
    cera_sampler *sampler;
    cera_sampler_params sampler_params;
    /* the last eval's logits: [n_logit_rows, n_vocab] */
    float *logits;
    size_t logit_cap_rows;
    int n_logit_rows;
    int logits_first; /* the eval-relative index of row 0 (all rows, or only the last) */
    /* the last row lives on the device (the backend's slot seq.id, backend.h) and `logits`
     * holds it only once fetched: cera_session_logits fetches it the first time it is
     * asked for after an eval; cera_session_sample samples it there when it can */
    bool logits_on_device, logits_fetched;
    int last_eval_n;
    /* the token cera_session_sample recorded; the eval that appends it does not record it again */
    cera_token pending_sampled;
    /* speculative decoding (spec.c): the drafts the last eval ended with (their draws record
     * them in the penalty history, not the eval), the match length class of the last n-gram
     * draft (-1: another kind), and per class the decayed counts of drafts kept and of rounds
     * that ended on a draft the sampler did not pick (CERA_SPEC_AUTO's acceptance rate) */
    int n_draft_eval;
    int spec_class, spec_idle; /* (spec_idle: CERA_SPEC_AUTO's declined rounds since a draft) */
    float spec_kept[CERA_SPEC_CLASSES], spec_missed[CERA_SPEC_CLASSES];
    /* the last token cera_generate streamed without evaluating it (-1: none): the next
     * eval, sample or generate evaluates it first, so that a continuation equals one long
     * generation without a forward wasted when nothing follows */
    cera_token pending_eval;
    /* attached LoRA adapters and their batch plan (lora_session.c) */
    cera_lora_set lora;
    cera_lora_batch lora_batch;
    /* constrained sampling (grammar_session.c): the grammar, its matcher (advanced by every
     * token cera_session_sample returns), the mask buffer [(n_vocab + 31) / 32] and how the
     * last sample went (cera_grammar_state); all NULL / NONE without a grammar */
    cera_grammar_ref *grammar;
    cera_grammar_matcher *gm;
    uint32_t *gmask;
    cera_grammar_state gstate;
    /* a lazy grammar waiting for its trigger (gstate WAITING): the tail of the sampled
     * text not yet ruled out as the start of a trigger word [gbuf_len] */
    char *gbuf;
    size_t gbuf_len, gbuf_cap;
};

/* Speculative decoding's steps (spec.c, generate.c): a draw from row i of the last eval's
 * logits (all rows kept), as cera_session_sample's host path (grammar, penalties, RNG); the
 * timeline cut back to n_keep positions (the caller has checked cera_kv_seq_can_truncate)
 * leaving the sampler and the grammar as they are (they saw only the tokens kept); drafts
 * after the history h[0..n) (the timeline, a pending token and the next one), at most cap,
 * as cera_session_draft; how a round of drafts went (kept of drafted); and a batch's time,
 * by its token count, for the cost of drafts (under forward_lock). */
cera_status cera_session_sample_row(cera_session *s, int i, cera_token *out, cera_error *err);
void cera_session_cut(cera_session *s, int n_keep);
int cera_spec_draft(cera_session *s, const cera_token *h, int n, int n_match, cera_session *draft, int n_step,
                    cera_token *out, int cap);
void cera_spec_observe(cera_session *s, int drafted, int kept);
void cera_spec_step_time(cera_engine *e, size_t n_tokens, double ms);

/* The checksum a session file (state.c) ends with, over its first n bytes (the fuzz harness
 * makes files the checksum lets through). */
uint64_t cera_session_file_checksum(const void *p, size_t n);

/* Copies a caller's params struct (src, NULL: keep dst) over dst, which holds the
 * defaults: as many bytes as src's struct_size says, which must be between 4 and size
 * (engine.c). */
cera_status cera_params_read(void *dst, size_t size, const void *src, const char *what, cera_error *err);

/* LoRA glue (lora_session.c): the plan for an eval of n_rows rows of the session (all its
 * rows share its set), or NULL when no attached adapter is active; and detaching
 * everything and freeing the plan (from cera_session_free). */
const cera_lora_batch *cera_lora_session_plan(cera_session *s, int n_rows);
void cera_lora_session_free(cera_session *s);

/* Grammar glue (grammar_session.c): a fork's copy of src's grammar and matcher; back to
 * the grammar's start (truncate); detaching it (cera_session_free); the mask of the tokens
 * the grammar allows next, into s->gmask (for the host's masked draw or the device's);
 * and taking the masked draw's token (-1: the mask left nothing, and gstate says whether
 * the grammar was complete), which advances the matcher. */
cera_status cera_grammar_session_fork(cera_session *dst, const cera_session *src, cera_error *err);
cera_status cera_grammar_session_restart(cera_session *s, cera_error *err);
/* A token sampled without the mask (a lazy grammar waiting): looks for its triggers. */
cera_status cera_grammar_session_observe(cera_session *s, cera_token tok, cera_error *err);
void cera_grammar_session_free(cera_session *s);
cera_status cera_grammar_session_mask(cera_session *s, cera_error *err);
cera_status cera_grammar_session_take(cera_session *s, cera_token tok, cera_error *err);

/* batch.c: the engine's batch buffers (at open; freed at close, also after a failed init). */
cera_status cera_batch_init(cera_engine *e, cera_error *err);
void cera_batch_free(cera_engine *e);

/* cera_batch_eval, or with embd non-NULL the same evaluation giving embeddings: every new
 * position's final hidden state after the output norm into embd[i] ([n_tokens, n_embd] for
 * item i; a pending token evaluated first gives none), no logits kept (batch.c). */
cera_status cera_batch_run(cera_engine *e, const cera_batch_item *items, int n_items, float *const *embd,
                           cera_error *err);

/* Evaluates the pending generated token, if any (session.c). */
cera_status cera_session_flush_pending(cera_session *s, cera_error *err);

/* cera_session_sample with a status and a message: CERA_ERR_FORMAT for non-finite logits,
 * CERA_ERR_INVALID_ARG with nothing to sample from, a full context's or a device's error
 * (session.c). */
cera_status cera_session_sample_status(cera_session *s, cera_token *out, cera_error *err);

/* The first of rows [n_rows, n_vocab] holding a NaN or a +Inf, or -1; and the error for one
 * at a position (session.c). A NaN or +Inf reaching the logits (corrupt weights, an adapter
 * or a scale that overflows) leaves no distribution to sample from: it is an error. A -Inf
 * is a token of probability 0, which the sampler handles (and refuses when every token is). */
long cera_nonfinite_row(const float *l, size_t n_rows, int n_vocab);
cera_status cera_nonfinite_fail(cera_error *err, long pos);

/* Whether the last eval left logits to sample from (on the host or the device); fetches
 * nothing (session.c). */
bool cera_session_has_logits(const cera_session *s);

#endif

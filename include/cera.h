/*
 * cera.h — the public API of cera, an LLM inference engine for GGUF models.
 *
 * Two objects:
 *   - an engine is a loaded model: weights (memory-mapped, read-only), tokenizer,
 *     hyperparameters, the thread pool and device state. One per model; shared by
 *     any number of sessions.
 *   - a session is one timeline: its tokens, KV cache, sampler state and attached
 *     adapters. Sessions are data, not threads.
 *
 * Threads: sessions of one engine may be used from different threads at once (their
 * forward passes take turns on the engine's thread pool); one session is used by one
 * thread at a time.
 *
 * Every call that can fail returns a cera_status and, when the caller passes a
 * cera_error, fills it with the status and a message saying what failed and where
 * (file, tensor, key). Passing NULL for the cera_error is allowed. Names that come from a
 * file (tensor names, keys) appear in messages with control bytes escaped (\xNN).
 *
 * NULL objects: every function accepts a NULL engine, session or adapter. Those that
 * return a cera_status return CERA_ERR_INVALID_ARG; the others return what each one
 * documents for "nothing" (0, NULL, -1 or false); the free/close functions do nothing.
 *
 * Untrusted input: models, adapters and prompts may come from anyone (SECURITY.md): a
 * malformed or hostile file is an error with a message, never a crash, a hang or output
 * computed from NaNs.
 *
 * Tensors, kernels and file formats stay internal.
 */
#ifndef CERA_H
#define CERA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CERA_VERSION_MAJOR 0
#define CERA_VERSION_MINOR 1
#define CERA_VERSION_PATCH 0

#if defined(_WIN32)
#define CERA_API
#else
#define CERA_API __attribute__((visibility("default")))
#endif

/* ---- Status and errors ---------------------------------------------------- */

typedef enum cera_status {
    CERA_OK = 0,
    CERA_ERR_INVALID_ARG,  /* a parameter is out of range or inconsistent */
    CERA_ERR_IO,           /* a file could not be opened, read, mapped or written */
    CERA_ERR_FORMAT,       /* a file is malformed (GGUF, safetensors, JSON, ...) */
    CERA_ERR_UNSUPPORTED,  /* well-formed but not supported (architecture, type, version) */
    CERA_ERR_NOT_FOUND,    /* a required key or tensor is missing */
    CERA_ERR_NO_MEMORY,    /* an allocation failed */
    CERA_ERR_CONTEXT_FULL, /* the session's context has no room for more tokens */
    CERA_ERR_CANCELLED,    /* the caller's cancel flag stopped the work */
    CERA_ERR_DEVICE,       /* an accelerator call failed */
    CERA_ERR_INTERNAL,     /* a broken invariant inside cera (a bug) */
} cera_status;

typedef struct cera_error {
    cera_status status;
    char message[512];
} cera_error;

/* A short constant name for a status ("invalid argument", "format error", ...). */
CERA_API const char *cera_status_str(cera_status status);

/* The library version as "MAJOR.MINOR.PATCH". */
CERA_API const char *cera_version(void);

/* ---- Engine ---------------------------------------------------------------- */

typedef struct cera_engine cera_engine;
typedef struct cera_session cera_session;
typedef int32_t cera_token;

typedef enum cera_kv_type {
    CERA_KV_AS_K = -1, /* kv_type_v only: V cached in K's type (the default) */
    CERA_KV_F16 = 0,   /* the default, as llama.cpp */
    CERA_KV_F32 = 1,
    CERA_KV_Q8_0 = 2, /* blocks of 32 int8 with an F16 scale (llama.cpp's q8_0): about half of F16's bytes */
    CERA_KV_BF16 = 3,
    CERA_KV_Q4_0 = 4, /* blocks of 32 4-bit values with an F16 scale: about a quarter of F16's bytes */
} cera_kv_type;
/* The block types (Q8_0, Q4_0) need a head size that is a multiple of 32. As llama.cpp does,
 * a cache in a block type is rotated when the head size is a multiple of 64 (unless
 * kv_rotation is -1): Q and K rows, in pieces of the largest power of two dividing the head
 * size, and V rows and the attention's output in pieces of 64, go through an orthonormal
 * Walsh–Hadamard transform, which spreads outliers over the block so that they quantize
 * with less error and leaves the attention's result as it was. */

typedef enum cera_device {
    CERA_DEVICE_AUTO = 0, /* CUDA where built in and a GPU exists, else CPU */
    CERA_DEVICE_CPU = 1,
    CERA_DEVICE_CUDA = 2,
} cera_device;

/* Every params struct starts with struct_size, set by its *_default_params() to the size
 * this header declares: a library built with more fields reads only what the caller's
 * version has, so start from the default and change fields. */
typedef struct cera_engine_params {
    uint32_t struct_size; /* sizeof(cera_engine_params) */
    int n_threads;        /* CPU threads; 0 = one per core; at most 1024 */
    int n_ctx;            /* context size per session; 0 = the model's, capped at 4096; at most 1<<24 */
    int n_batch;          /* most tokens per forward call; 0 = 512; at most 1<<24 */
    cera_kv_type kv_type; /* KV cache element type: K and V (see kv_type_v) */
    cera_device device;
    /* The KV cache is one pool of blocks for all the engine's sessions (a session holds
     * the blocks of its own tokens; forked sessions share blocks). */
    int n_seq_max;   /* sessions open at once; 0 = 8; at most 65536 */
    size_t kv_bytes; /* the pool's size in bytes; 0 = room for n_seq_max full contexts (n_ctx
                      * tokens each). A session that needs a block when none is free gets
                      * CERA_ERR_CONTEXT_FULL, saying so. */
    /* When non-NULL, cera_engine_open reads the model's weights ahead (most of the time a
     * load from disk takes) and calls progress with the share read so far, 0 to 1, from
     * the opening thread. */
    void (*progress)(float done, void *user);
    void *progress_user;
    cera_kv_type kv_type_v; /* the V cache's type; CERA_KV_AS_K (default): kv_type. kv_type is K's */
    int kv_rotation;        /* 0 (default): rotate block-type caches as llama.cpp; -1: never */
} cera_engine_params;

CERA_API cera_engine_params cera_engine_default_params(void);

/* Opens a GGUF model. Weights are memory-mapped, not copied. */
CERA_API cera_status cera_engine_open(const char *path, const cera_engine_params *params, cera_engine **out,
                                      cera_error *err);
/* Opens a GGUF model from the caller's bytes (a whole single-file GGUF: a browser's file, a
 * download), with cera_engine_open's checks and errors; messages name the model "<memory>".
 * The bytes are used in place, not copied: keep them alive and unchanged until
 * cera_engine_close. NULL data or size 0 is CERA_ERR_INVALID_ARG. */
CERA_API cera_status cera_engine_open_memory(const void *data, size_t size, const cera_engine_params *params,
                                             cera_engine **out, cera_error *err);
/* Frees the engine. Its sessions and adapters must be freed first: none may outlive it
 * (they use its weights, tokenizer and backend). */
CERA_API void cera_engine_close(cera_engine *engine);

/* The engine's vocabulary size and context size per session; 0 for a NULL engine. */
CERA_API int cera_engine_n_vocab(const cera_engine *engine);
CERA_API int cera_engine_n_ctx(const cera_engine *engine);
/* The context length the model was trained on (its metadata's context_length); 0 when
 * unknown or for a NULL engine. A larger n_ctx works, but quality past it is not assured. */
CERA_API int cera_engine_n_ctx_train(const cera_engine *engine);
/* The architecture's name ("llama", "qwen2", ...); NULL for a NULL engine. */
CERA_API const char *cera_engine_arch(const cera_engine *engine);
/* The device the engine runs on: CERA_DEVICE_CPU or CERA_DEVICE_CUDA (AUTO resolved);
 * CERA_DEVICE_AUTO for a NULL engine. */
CERA_API cera_device cera_engine_device(const cera_engine *engine);
CERA_API cera_token cera_engine_bos(const cera_engine *engine); /* -1 when none (or engine NULL) */
CERA_API cera_token cera_engine_eos(const cera_engine *engine); /* -1 when none (or engine NULL) */
/* The engine's KV pool: blocks in use (*used) and in all (*total), each of 32 positions
 * (a model with sliding-window layers: both groups' blocks together); false (nothing
 * written) for a NULL engine. */
CERA_API bool cera_engine_kv_blocks(cera_engine *engine, int *used, int *total);
/* True for tokens that end generation (EOS, EOT, ...); false for a NULL engine. */
CERA_API bool cera_engine_is_eog(const cera_engine *engine, cera_token token);

/* ---- Tokenizer ------------------------------------------------------------- */

/* Tokenizes len bytes of text. add_special adds BOS/EOS as the model's metadata asks;
 * parse_special lets special-token strings in the text become their tokens.
 * Writes at most cap tokens and stores the full count in *n_tokens; when the count
 * exceeds cap the call returns CERA_ERR_INVALID_ARG and *n_tokens says how many are needed. */
CERA_API cera_status cera_tokenize(const cera_engine *engine, const char *text, size_t len, bool add_special,
                                   bool parse_special, cera_token *tokens, size_t cap, size_t *n_tokens,
                                   cera_error *err);

/* Writes the text of one token (no NUL). Returns the piece's length in bytes, which may
 * exceed cap (then nothing useful was written), or -1 for an invalid token, a NULL engine
 * or a NULL buf with cap > 0 (buf may be NULL with cap 0, to ask for the length).
 * render_special: whether control/special tokens are rendered as their text. */
CERA_API int cera_token_to_piece(const cera_engine *engine, cera_token token, char *buf, size_t cap,
                                 bool render_special);

/* ---- Sampling -------------------------------------------------------------- */

typedef struct cera_logit_bias {
    cera_token token;
    float bias; /* added to the logit; -INFINITY bans the token */
} cera_logit_bias;

/* llama.cpp's default chain and order: penalties, top-k, typical-p, top-p, min-p,
 * temperature, then a seeded draw. temp <= 0 means greedy (argmax). */
typedef struct cera_sampler_params {
    float temp;             /* 0.8 */
    int top_k;              /* 40; <= 0 disables */
    float top_p;            /* 0.95; 1 disables */
    float min_p;            /* 0.05; 0 disables */
    float typical_p;        /* 1 (disabled) */
    float repeat_penalty;   /* 1 (disabled) */
    float freq_penalty;     /* 0 */
    float presence_penalty; /* 0 */
    int penalty_last_n;     /* 64; -1 = the whole context */
    uint64_t seed;          /* the draw's seed */
    const cera_logit_bias *logit_bias;
    int n_logit_bias;
} cera_sampler_params;

CERA_API cera_sampler_params cera_sampler_default_params(void);

/* ---- Session --------------------------------------------------------------- */

typedef struct cera_session_params {
    uint32_t struct_size; /* sizeof(cera_session_params) */
    cera_sampler_params sampler;
} cera_session_params;

CERA_API cera_session_params cera_session_default_params(void);

/* A new, empty session: a sequence slot of the engine's pool (CERA_ERR_NO_MEMORY when all
 * n_seq_max are taken). */
CERA_API cera_status cera_session_create(cera_engine *engine, const cera_session_params *params,
                                         cera_session **out, cera_error *err);
/* Frees the session; its KV blocks go back to the engine's pool. */
CERA_API void cera_session_free(cera_session *session);

/* A new session continuing src's timeline: the same tokens (their KV blocks shared, not
 * copied: a block is copied only when one of them writes into it), adapters and scales,
 * sampler parameters and state (penalty history and RNG), the grammar and its state, and
 * the last eval's logits. A
 * pending generated token of src is evaluated first. Evaluating either afterwards does
 * not change the other. */
CERA_API cera_status cera_session_fork(cera_session *src, cera_session **out, cera_error *err);

/* Number of evaluated tokens in the session's timeline (its position). The last token a
 * cera_generate streamed is not counted yet: it is evaluated (one forward, as inside one long
 * generation) at the start of the next cera_session_eval, cera_session_sample or
 * cera_generate, so that a continuation gives exactly what one longer generation gives and
 * no forward is spent when nothing follows. cera_session_truncate drops it.
 * 0 for a NULL session. */
CERA_API int cera_session_n_past(const cera_session *session);

/* The session's timeline: its cera_session_n_past evaluated tokens (valid until the session
 * next changes; NULL for a NULL session). */
CERA_API const cera_token *cera_session_tokens(const cera_session *session);

/* Drops every token at positions >= n_keep (0 clears the session), with a generated
 * token not yet evaluated and the last eval's logits. The sampler is reset: its penalty
 * history becomes the kept tokens' and its RNG restarts from the seed (so truncate(0) and
 * the same prompt repeat a generation), and a grammar restarts from its beginning (the
 * matcher does not keep a history to cut back). n_keep outside 0..n_past: CERA_ERR_INVALID_ARG. A
 * model with recurrent layers (LFM2's short convolutions, whose state follows the last
 * position) can only be cut back to 0 or n_past: anything between is CERA_ERR_UNSUPPORTED. */
CERA_API cera_status cera_session_truncate(cera_session *session, int n_keep, cera_error *err);

/* Context shift, as llama.cpp's (llama_memory_seq_rm + llama_memory_seq_add): drops the
 * positions n_keep .. n_keep + n_discard - 1 and moves the later ones down by n_discard, their
 * keys rotated by the position delta, so that the session holds n_past - n_discard positions
 * and can go on. The sampler (its penalty history and RNG) and the grammar are left as they
 * are; a generated token not yet evaluated stays pending. Needs n_keep >= 0, n_discard >= 1
 * and n_keep + n_discard <= the positions evaluated (else CERA_ERR_INVALID_ARG).
 * CERA_ERR_UNSUPPORTED, with nothing changed, for models with recurrent layers (LFM2) or
 * sliding-window layers (Gemma 3), and for KV caches other than F16 and F32;
 * CERA_ERR_CONTEXT_FULL when the KV pool has no room for the moved blocks. */
CERA_API cera_status cera_session_shift(cera_session *session, int n_keep, int n_discard, cera_error *err);

/* Saved sessions (llama.cpp's state files; `cera run --prompt-cache FILE`). cera_session_save
 * writes the session's timeline to path: its tokens, the KV rows and recurrent state they
 * left, the last logits row, the sampler's RNG and a token it drew but did not evaluate yet,
 * in a versioned file with a checksum, tied to the model (a fingerprint of its tensors), the
 * KV cache type and the adapters attached with their scales (a file at path that is not a
 * session file is not written over: CERA_ERR_INVALID_ARG). A token cera_generate streamed
 * last is evaluated first (one forward, as the next call would). cera_session_load replaces
 * the session's timeline with a file's: CERA_ERR_IO when it cannot be read; CERA_ERR_FORMAT
 * when it is not such a file or is damaged, CERA_ERR_INVALID_ARG when it was saved from
 * another model, with other adapters or scales, or another KV cache type, and
 * CERA_ERR_CONTEXT_FULL when the engine's n_ctx cannot hold it: in those cases nothing
 * changes; CERA_ERR_CONTEXT_FULL when the KV pool has no room for its blocks leaves the
 * session empty. The sampler's parameters stay the session's own (its penalty history
 * becomes the file's tokens'), and a grammar restarts from its beginning. Saving, loading
 * into a session and continuing gives the tokens the session would have given without
 * stopping. */
CERA_API cera_status cera_session_save(cera_session *session, const char *path, cera_error *err);
CERA_API cera_status cera_session_load(cera_session *session, const char *path, cera_error *err);

/* The timeline a saved session file holds, without loading it: *n_pos its length and its
 * first min(n_pos, cap) tokens into tokens. Only the header is checked (the magic, the version,
 * a length the file can hold), not the checksum, the model or the adapters (cera_session_load
 * checks those): CERA_ERR_IO when it cannot be read, CERA_ERR_FORMAT when it is not a session
 * file or is cut short. */
CERA_API cera_status cera_session_file_tokens(const char *path, cera_token *tokens, size_t cap, int *n_pos,
                                              cera_error *err);

/* What saved sessions are tied to, as 64-bit fingerprints (0 for NULL). The engine's covers
 * its model (its tensors, hashed as cera_session_save hashes them), its KV cache type and
 * layout, the session file's version and the backend that computes, with what else decides
 * its numbers (the CPU's kernel tier); an adapter's covers its factors. Engines of equal
 * fingerprints load each other's files (with the same adapters at the same scales attached)
 * and compute the same numbers, so that a store of saved sessions shared by several
 * processes can name its files by them (`cera serve --cache-dir`). */
CERA_API uint64_t cera_engine_fingerprint(const cera_engine *engine);
/* (cera_adapter_fingerprint, with the adapters below.) */

/* Appends tokens and evaluates them as one batch. With all_logits the logits of
 * every new position are kept (for cera_session_logits(session, i)); otherwise only
 * the last position's. Logits that are NaN or +Inf (corrupt weights, or an
 * adapter or a scale that overflows the float range) are CERA_ERR_FORMAT naming the
 * position, and the tokens are not appended; CERA_ERR_CONTEXT_FULL when they do not fit
 * in n_ctx. (Where a GPU keeps the last row on the device, its sampler checks it.) */
CERA_API cera_status cera_session_eval(cera_session *session, const cera_token *tokens, size_t n_tokens,
                                       bool all_logits, cera_error *err);

/* Logits of the i-th position of the last eval (i = -1: the last one); n_vocab floats,
 * valid until the next eval. NULL when they were not kept. On a GPU backend the last
 * position's row stays on the device after an eval without all_logits and is copied to
 * the host the first time it is asked for here (NULL if that copy fails). */
CERA_API const float *cera_session_logits(const cera_session *session, int i);

/* Samples the next token from the last position's logits with the session's sampler
 * chain (does not append it). Also records it for the repetition penalties. -1 when there
 * is nothing to sample from (a NULL session, no eval yet, non-finite logits, or a pending
 * token that no longer fits in the context; and, without an error, when the session's grammar
 * allows no token); cera_generate reports each as a status with a message. A temperature so small that logit
 * / temp overflows samples as greedy. On the CUDA backend the chain runs on the GPU (greedy, or top-k of at
 * most 1024 then top-p, min-p, temperature and the draw; other chains, and sessions with a grammar, on the
 * host), with the same tokens and draws. */
CERA_API cera_token cera_session_sample(cera_session *session);

/* Replaces the session's sampler chain. The new one starts from its seed with the penalty
 * history of the session's timeline. Invalid parameters (cera_sampler_params' ranges, or
 * logit biases of -INFINITY on every token of the vocabulary, which leave nothing to sample)
 * are CERA_ERR_INVALID_ARG and leave the current sampler in place (cera_session_create
 * refuses them alike). */
CERA_API cera_status cera_session_set_sampler(cera_session *session, const cera_sampler_params *params,
                                              cera_error *err);

/* ---- Grammars (structured output) ------------------------------------------ */
/*
 * A session may carry a grammar (GBNF, llama.cpp's syntax; start rule `root`): every token
 * cera_session_sample, cera_batch_sample and cera_generate sample is then one the grammar
 * allows next. Before the sampler chain, the tokens it does not allow are dropped (as if
 * their logits were -inf, llama.cpp's grammar sampler); end-of-generation tokens are allowed
 * only where the text so far is a complete match; the sampled token advances the grammar
 * (a token may end inside a UTF-8 character: the grammar waits for the rest). Only sampled
 * tokens advance it: tokens the caller evaluates (a prompt, a chat turn's markup) do not.
 * On the CUDA backend such sessions sample on the host (the last logits row is fetched).
 *
 * When the grammar allows no token, sampling returns -1 without an error and cera_generate
 * ends with CERA_OK; with a grammar, an end-of-generation token always ends cera_generate
 * (ignore_eog only applies without one, or while a lazy grammar waits for its trigger).
 * cera_session_grammar_state tells how it ended. A fork copies the grammar's state; cera_session_truncate (to
 * any n_keep) and cera_session_set_grammar restart it from the grammar's start.
 */

typedef enum cera_grammar_state {
    CERA_GRAMMAR_NONE = 0, /* the session has no grammar */
    CERA_GRAMMAR_ACTIVE,   /* the last sample was a token the grammar allowed (or none yet) */
    CERA_GRAMMAR_COMPLETE, /* the match is complete and ended: an end-of-generation token was
                            * sampled, or a complete match allows no further token */
    CERA_GRAMMAR_DEAD_END, /* no token is allowed and the match is not complete (a grammar
                            * that needs text no token of the vocabulary spells, or logit
                            * biases that ban what it allows): generation stopped there */
    CERA_GRAMMAR_WAITING,  /* a lazy grammar whose trigger has not appeared yet: sampling is free */
} cera_grammar_state;

/* Sets the session's grammar from GBNF text (len bytes; it ends at the first NUL, as in
 * llama.cpp), starting at its beginning; NULL (or len 0) clears it. `<text>` elements are
 * resolved against the engine's vocabulary (exactly one token, special tokens included).
 * A grammar that does not load is CERA_ERR_FORMAT (line, column, what was expected) or
 * CERA_ERR_UNSUPPORTED (past the size limits), and the session keeps the grammar it had.
 * The first grammar of an engine builds the vocabulary's token trie (once, shared). */
CERA_API cera_status cera_session_set_grammar(cera_session *session, const char *gbnf, size_t len,
                                              cera_error *err);

/* What switches a lazy grammar on: a literal text (word, NUL-terminated; non-NULL) appearing
 * in the sampled output, or (word NULL) the sampling of one token id. */
typedef struct cera_grammar_trigger {
    const char *word;
    cera_token token;
} cera_grammar_trigger;

/* A lazy grammar, as llama.cpp's grammar_lazy + grammar_triggers: the session samples
 * freely (CERA_GRAMMAR_WAITING) until a trigger appears in what it samples (the sampled
 * tokens' text, special tokens rendered, searched across token boundaries), and from then
 * on as cera_session_set_grammar's grammar does. The grammar starts at the trigger itself:
 * the text from the trigger word's start (the earliest of the words found; text before it
 * in the same token stays free), or the trigger token, is fed to it first, so the grammar
 * spells the trigger at its beginning. Text after the trigger that the grammar does not
 * take ends generation at the next sample (CERA_GRAMMAR_DEAD_END). Truncating the session or
 * setting a grammar goes back to waiting. n_triggers 0 is cera_session_set_grammar; at most
 * 64 triggers, words of 1 to 256 bytes; bad ones are CERA_ERR_INVALID_ARG. */
CERA_API cera_status cera_session_set_grammar_lazy(cera_session *session, const char *gbnf, size_t len,
                                                   const cera_grammar_trigger *triggers, size_t n_triggers,
                                                   cera_error *err);

/* Converts a JSON Schema (JSON text, len bytes) into GBNF as llama.cpp's
 * json_schema_to_grammar does; *out_gbnf is NUL-terminated, free it with cera_free. A schema
 * it refuses (external $refs, unanchored patterns, ...) is CERA_ERR_UNSUPPORTED or
 * CERA_ERR_FORMAT with the reason. */
CERA_API cera_status cera_json_schema_to_grammar(const char *schema, size_t len, char **out_gbnf,
                                                 cera_error *err);

/* cera_session_set_grammar with the grammar of a JSON Schema. A NULL schema is JSON mode:
 * any JSON object (llama.cpp's json.gbnf; the schema {"type":"object"}). */
CERA_API cera_status cera_session_set_json_schema(cera_session *session, const char *schema, size_t len,
                                                  cera_error *err);

/* Where the session's grammar stands after its last sample (see cera_grammar_state). */
CERA_API cera_grammar_state cera_session_grammar_state(const cera_session *session);

/* ---- Batches ---------------------------------------------------------------- */

/* One session's part of a batch: tokens to append (n_tokens may be 0: only a pending
 * generated token is evaluated, as cera_session_eval does), and whether to keep every new
 * position's logits. */
typedef struct cera_batch_item {
    cera_session *session;
    const cera_token *tokens;
    size_t n_tokens;
    bool all_logits;
    /* Speculative decoding: the last n_draft of the tokens are drafts (fewer than n_tokens:
     * the token before the first draft is in the item), which cera_session_verify then checks. Every row from
     * the one before the first draft on is kept (as with all_logits), and the sampler's penalty history
     * leaves the drafts out until a draw keeps them. */
    int n_draft;
} cera_batch_item;

/* Evaluates the tokens of several sessions of one engine together: prompt chunks and
 * single decode steps mixed, each session at most once. Each session ends as if
 * cera_session_eval(item) had been called on it alone, and its logits are the same: bit
 * for bit on the CPU, within the backend's tolerance on a GPU (a sequence's tokens are cut
 * into forward calls the same way whatever else the batch holds). Sessions work through
 * the batch in shared forward calls of at most n_batch tokens, so the weights are read
 * once per call for all of them. On an error no session has changed (the first failing
 * check or call is reported). */
CERA_API cera_status cera_batch_eval(cera_engine *engine, const cera_batch_item *items, int n_items,
                                     cera_error *err);

/* Samples the next token of each session (as cera_session_sample on each, in order) into
 * out[i]. On an error (a session without logits, a sampler with nothing to choose), out[i]
 * is -1 for that session and the call reports the first one. A session whose grammar
 * allows no token gets -1 without an error (cera_session_grammar_state says so). */
CERA_API cera_status cera_batch_sample(cera_session *const *sessions, int n, cera_token *out,
                                       cera_error *err);

/* ---- Speculative decoding on the batch API ----------------------------------- */
/*
 * A step of speculative decoding for a session whose next token `next` was just sampled
 * (cera_session_sample, cera_batch_sample or cera_session_verify): cera_session_draft
 * guesses the tokens after it; a batch item {session, [next, drafts...], 1 + k, false,
 * n_draft = k} evaluates them with the step's other items; cera_session_verify then draws
 * from each row in order, as plain decoding would draw one token at a time (the same
 * grammar, penalties and RNG), and keeps the drafts it picks. The tokens it returns are those
 * plain decoding would give (on the CPU bit for bit: drafting never makes a sequence's run
 * long enough to round otherwise; on a GPU a batch may round differently from a step), and
 * the sampled distribution is the target's.
 */

/* The n-gram lookup rule that drafts only where it pays: the longest earlier occurrence of
 * the text's ending (at least two tokens), and as many of the tokens that followed it as the
 * expected gain pays for: the session's recent acceptance rate for matches of that length,
 * against the engine's measured time of a forward call by its token count. */
#define CERA_SPEC_AUTO (-1)

/* Writes up to max drafts of what follows the session's timeline and then next into out:
 * with n_match > 0, what followed the most recent earlier occurrence of the last n_match
 * tokens; with CERA_SPEC_AUTO the rule above, n_step being the tokens the step carries
 * besides this item (other sequences' decode tokens); failing those (or with n_match 0),
 * the greedy tokens of draft, a session of a model with the same vocabulary, which is cut
 * back and fed to follow the timeline (NULL: none). Returns how many (0: none, also for a
 * model whose timeline cannot be cut back, or no room in the context). Never more than
 * keeps the item's run within the engine's batch and, on the CPU, short of the attention's
 * other rounding. */
CERA_API int cera_session_draft(cera_session *session, cera_token next, int n_match, cera_session *draft,
                                int n_step, cera_token *out, int max);

/* After an eval whose item had n_draft drafts: draws the token after the one before the
 * first draft, then while each draw equals the next draft the token after it, into out (room
 * for n_draft + 1): the drafts kept, then the first draw that differs or the draw after the
 * last draft; *n_out their count (1 + the drafts kept). The timeline is cut after the last
 * draft kept; the last token of out is sampled but not evaluated (the next step's, as after
 * cera_session_sample), and cera_session_logits(session, i) still gives the row each token
 * of out was drawn from (i = the eval's index of that row; -1: the last one's). A draw the
 * grammar leaves nothing for ends out with -1. CERA_ERR_INVALID_ARG without drafts to
 * verify. */
CERA_API cera_status cera_session_verify(cera_session *session, cera_token *out, int *n_out, cera_error *err);

/* ---- Embeddings ------------------------------------------------------------ */
/*
 * An embedding is a token's final hidden state after the model's output norm (the vector the
 * output matrix would turn into logits; llama.cpp's embeddings of a decoder model), or one
 * vector pooled from a text's tokens. The output matrix is not computed. Evaluating for
 * embeddings appends the tokens to the session's timeline (its KV cache) as an eval does, with
 * its attached adapters applied; it leaves no logits to sample from.
 */

/* How a text's token embeddings become one vector; the values are llama.cpp's
 * (llama_pooling_type, `--pooling`). */
typedef enum cera_pooling {
    CERA_POOLING_MODEL = -1, /* the model's own (its <arch>.pooling_type; none when absent) */
    CERA_POOLING_NONE = 0,   /* one vector per token */
    CERA_POOLING_MEAN = 1,   /* the mean over the tokens */
    CERA_POOLING_CLS = 2,    /* the first token's */
    CERA_POOLING_LAST = 3,   /* the last token's */
} cera_pooling;

/* The width of an embedding (the model's hidden size); 0 for a NULL engine. */
CERA_API int cera_engine_n_embd(const cera_engine *engine);
/* The model's own pooling (its metadata's pooling_type), never CERA_POOLING_MODEL;
 * CERA_POOLING_NONE for a NULL engine or a model without one. */
CERA_API cera_pooling cera_engine_pooling(const cera_engine *engine);

/* Normalizes n floats in place as llama.cpp's --embd-normalize: -1 none, 0 max absolute
 * (scaled to the int16 range: the largest magnitude becomes 32760), 1 taxicab, 2 euclidean,
 * p > 2 the p-norm. A zero vector stays zero. Below -1: nothing is changed, false. */
CERA_API bool cera_embd_normalize(float *v, int n, int norm);

/* One vector from n token embeddings rows [n, d] by the pooling (mean, cls: the first, last:
 * the last; as cera_batch_embed pools them), normalized as cera_embd_normalize(norm), into
 * out [d]: for a caller that evaluates a text in parts with CERA_POOLING_NONE and norm -1.
 * CERA_ERR_INVALID_ARG for n == 0, CERA_POOLING_NONE or MODEL, or a norm below -1. */
CERA_API cera_status cera_embd_pool(const float *rows, size_t n, int d, cera_pooling pooling, int norm,
                                    float *out, cera_error *err);

/* Evaluates each item's tokens (n_tokens > 0; all_logits is ignored) for embeddings, in
 * shared forward calls as cera_batch_eval, and writes into out[i] the item's embeddings:
 * n_tokens rows of cera_engine_n_embd floats with CERA_POOLING_NONE, else one row pooled over
 * the item's tokens (cls: its first, last: its last); each row then normalized with
 * cera_embd_normalize(norm). A pending generated token is evaluated first and is not part of
 * the pooling. On the CUDA backend, a model whose n_embd exceeds its vocabulary is
 * CERA_ERR_UNSUPPORTED. On an error no session has changed, as cera_batch_eval. */
CERA_API cera_status cera_batch_embed(cera_engine *engine, const cera_batch_item *items, int n_items,
                                      cera_pooling pooling, int norm, float *const *out, cera_error *err);

/* cera_batch_embed for one session: out has room for n_tokens rows (CERA_POOLING_NONE) or
 * one row of cera_engine_n_embd floats. */
CERA_API cera_status cera_session_embed(cera_session *session, const cera_token *tokens, size_t n_tokens,
                                        cera_pooling pooling, int norm, float *out, cera_error *err);

/* ---- Generation ------------------------------------------------------------ */

/* Called once for each generated token, in order, never twice for one token, with the
 * text that is ready to show (UTF-8, never half a character; may be empty). Return false
 * to stop. The text may lag the tokens: with stop strings, bytes that may begin one are
 * held back until the next pieces decide, and a stop string is never passed on (nor
 * anything after it). When generation ends with text still held back (a stop string's
 * beginning that was not completed, the bytes of an unfinished character), one last call
 * passes it with token -1; its return value is ignored. */
typedef bool (*cera_token_callback)(cera_token token, const char *piece, size_t len, void *user);

typedef struct cera_generate_params {
    uint32_t struct_size;    /* sizeof(cera_generate_params) */
    int n_predict;           /* tokens to generate at most; -1 = until the context is full
                              * (below -1: CERA_ERR_INVALID_ARG) */
    const char *const *stop; /* stop strings (generation ends when one appears; not passed on) */
    int n_stop;
    bool ignore_eog; /* keep going past end-of-generation tokens */
    /* When non-NULL and set non-zero (from any thread), stops before the next token with
     * CERA_ERR_CANCELLED. cera reads it with a relaxed atomic load
     * (__atomic_load_n(cancel, __ATOMIC_RELAXED)); set it with an atomic store too
     * (__atomic_store_n(flag, 1, __ATOMIC_RELAXED)) so that neither side is a data race. */
    const volatile int *cancel;
    /* Context shift (llama.cpp's --context-shift): when the next token would fill the
     * context (n_past + 1 >= n_ctx), keep the first n_keep positions, drop half of the rest
     * (cera_session_shift: (n_past - n_keep) / 2 of them) and go on instead of ending. When
     * nothing can be dropped (n_keep too close to n_past), or the model cannot shift
     * (CERA_ERR_UNSUPPORTED), generation ends there as without it. */
    bool context_shift;
    int n_keep;
    /* Speculative decoding: tokens are drafted ahead, evaluated in one batch with the token
     * before them, and each kept while the session's sampler, drawing in order as it would
     * have without drafts (the same grammar, penalties and RNG draws), picks it; the first
     * token it picks otherwise is kept instead and the rest dropped. The target's
     * distribution is unchanged, and on the CPU the tokens are those of plain decoding (on a
     * GPU a batch may round differently from a step, so a near tie can go the other way).
     * Drafts come from the text so far (n-gram lookup, cera_session_draft: what followed the
     * most recent earlier occurrence of its last spec_ngram tokens, or with CERA_SPEC_AUTO
     * of its longest repeated ending, as far as pays) or, failing that, from a draft
     * model's session (greedy): a session of another engine with the same vocabulary, which
     * cera_generate keeps in step with this one. Models that cannot cut a timeline back
     * (recurrent state) generate without speculation. */
    int spec_ngram;      /* n-gram lookup length (0: none; CERA_SPEC_AUTO) */
    cera_session *draft; /* a draft model's session (NULL: none) */
    int draft_max;       /* most tokens drafted at a time; 0 = 16 */
    int draft_min;       /* fewer drafts than this are not tried; 0 = 1 */
    int *n_drafted;      /* when non-NULL, receives the tokens drafted (verified or not) */
    int *n_accepted;     /* ... and those of them kept */
} cera_generate_params;

CERA_API cera_generate_params cera_generate_default_params(void);

/* Evaluates the prompt tokens, then samples and evaluates until n_predict, an
 * end-of-generation token, a stop string, the callback's false, the cancel flag, or the
 * session's grammar allowing no further token (CERA_OK; see cera_session_grammar_state).
 * The last streamed token stays pending (see cera_session_n_past): the prompt of the next
 * call follows it, and a call with no prompt continues after it, so two calls of n tokens
 * give the same tokens as one call of 2n. An end-of-generation token is not streamed and
 * not kept. With no prompt and nothing evaluated before, CERA_ERR_INVALID_ARG.
 * *n_generated (when non-NULL) receives the count of generated tokens. */
CERA_API cera_status cera_generate(cera_session *session, const cera_token *prompt, size_t n_prompt,
                                   const cera_generate_params *params, cera_token_callback cb, void *user,
                                   int *n_generated, cera_error *err);

/* ---- Adapters (LoRA) ------------------------------------------------------- */
/*
 * A LoRA adapter specialises a model without touching its weights: on each projection
 * it targets, the output gains scale · alpha/rank · B(A·x) (llama.cpp's semantics:
 * scale alone when the adapter has no alpha; alpha/√rank for rsLoRA PEFT adapters).
 * An adapter is loaded once per engine from a llama.cpp GGUF adapter file or a PEFT
 * folder (adapter_config.json + adapter_model.safetensors), validated against the
 * engine's model, and shared read-only by any number of sessions. Each session has its
 * own set of attached adapters and scales, changed at any time between evals; a change
 * applies to tokens evaluated afterwards (the KV cache keeps what earlier tokens saw).
 * Sessions of one engine may use different sets.
 */
typedef struct cera_adapter cera_adapter;

/* Loads an adapter for the engine's model. Errors name the file, the tensor and the
 * problem (another architecture, a shape that does not match its base tensor, an
 * unknown or incomplete target, a malformed file). */
CERA_API cera_status cera_adapter_load(cera_engine *engine, const char *path, cera_adapter **out,
                                       cera_error *err);
/* Drops the caller's reference. Sessions hold their own: the adapter is freed when the
 * last session detaches it. */
CERA_API void cera_adapter_free(cera_adapter *adapter);
/* The adapter's fingerprint (its factors; 0 for NULL): see cera_engine_fingerprint. */
CERA_API uint64_t cera_adapter_fingerprint(const cera_adapter *adapter);

/* Attaches the adapter at a scale, or changes the scale when it is attached already.
 * A scale of 0 keeps it attached but inert (the same results as detached, bit for bit).
 * At most 16 adapters per session; the adapter must come from the session's engine. */
CERA_API cera_status cera_session_set_adapter(cera_session *session, cera_adapter *adapter, float scale,
                                              cera_error *err);
/* Detaches one adapter, or every adapter when adapter is NULL. False when the adapter
 * was not attached. */
CERA_API bool cera_session_remove_adapter(cera_session *session, const cera_adapter *adapter);
/* Number of attached adapters. */
CERA_API int cera_session_n_adapters(const cera_session *session);

/* ---- Chat ------------------------------------------------------------------ */
/*
 * A chat template turns a conversation into the prompt text the model was trained on:
 * the GGUF's tokenizer.chat_template (or a named one, tokenizer.chat_template.<name>, or
 * the caller's own), a Jinja2 program rendered exactly as Hugging Face transformers
 * renders it (apply_chat_template), with bos_token/eos_token the vocabulary's strings.
 * Templates are untrusted: a render is bounded in time and memory and fails with a
 * message (for raise_exception, the template's own) instead of crashing.
 *
 * The template also tells how the model writes tool calls; cera_chat_parse splits a
 * generated reply into its reasoning (<think>...</think>), its content and its tool calls.
 */
typedef struct cera_chat_template cera_chat_template;

/* How a model's replies carry tool calls, chosen from the template's text. */
typedef enum cera_chat_format {
    CERA_CHAT_CONTENT = 0, /* no tool-call syntax: the reply is content */
    CERA_CHAT_HERMES,      /* <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen) */
    CERA_CHAT_LFM2,        /* <|tool_call_start|>[f(a=1), g(b="x")]<|tool_call_end|> (pythonic) */
    CERA_CHAT_LLAMA3,      /* {"name": ..., "parameters": {...}} (Llama 3.x JSON tool calls) */
    CERA_CHAT_MISTRAL,     /* [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}] */
    CERA_CHAT_GENERIC,     /* {"tool_calls": [{"name": ..., "arguments": {...}}]}: llama.cpp's generic
                            * format, for templates without a tool syntax (never detected: given by
                            * cera_chat_tool_grammar when calls are required) */
} cera_chat_format;

/* Opens a template: text when non-NULL (a caller's Jinja template, len bytes; engine may
 * then be NULL, leaving bos_token/eos_token undefined), otherwise the engine's model's
 * tokenizer.chat_template (name NULL) or tokenizer.chat_template.<name>. CERA_ERR_NOT_FOUND
 * when the model has no such template; CERA_ERR_FORMAT (with line and column) when it does
 * not compile. */
CERA_API cera_status cera_chat_template_open(const cera_engine *engine, const char *name, const char *text,
                                             size_t len, cera_chat_template **out, cera_error *err);
CERA_API void cera_chat_template_free(cera_chat_template *tmpl);
/* The tool-call format of the template's replies (CERA_CHAT_CONTENT for NULL). */
CERA_API cera_chat_format cera_chat_template_format(const cera_chat_template *tmpl);
/* "content", "hermes", "lfm2", "llama3", "mistral". */
CERA_API const char *cera_chat_format_name(cera_chat_format format);

/* One message, OpenAI style. Strings are UTF-8 and NUL-terminated; the JSON fields are
 * JSON texts, checked when rendering (a malformed one is CERA_ERR_INVALID_ARG). */
typedef struct cera_chat_message {
    const char *role;              /* "system", "user", "assistant", "tool", ... */
    const char *content;           /* the text; NULL gives content = None */
    const char *content_parts;     /* instead of content: a JSON array of parts, e.g.
                                    * [{"type": "text", "text": "..."}] */
    const char *tool_calls;        /* assistant: a JSON array of OpenAI tool calls
                                    * ({"id", "type": "function", "function": {"name",
                                    * "arguments"}}), or NULL */
    const char *tool_call_id;      /* tool: the call this result answers, or NULL */
    const char *name;              /* tool: the function's name, or NULL */
    const char *reasoning_content; /* assistant: its reasoning, or NULL */
} cera_chat_message;

typedef struct cera_chat_params {
    uint32_t struct_size;       /* sizeof(cera_chat_params) */
    const char *tools;          /* a JSON array of OpenAI tool definitions, or NULL (tools = None) */
    const char *extra;          /* a JSON object of more top-level variables, e.g.
                                 * {"enable_thinking": false}, or NULL */
    bool add_generation_prompt; /* end with the opening of the assistant's turn (default true) */
    int64_t now;                /* strftime_now's clock, Unix seconds; 0 = the current time */
} cera_chat_params;

CERA_API cera_chat_params cera_chat_default_params(void);

/* Renders n messages into a malloc'ed NUL-terminated text (*out, free it with cera_free;
 * *out_len its length when out_len is non-NULL). The text is meant to be tokenized with
 * special tokens parsed and without an added BOS when it starts with the BOS string
 * (cera_chat_tokenize does that). Template errors are CERA_ERR_FORMAT with the message. */
CERA_API cera_status cera_chat_render(const cera_chat_template *tmpl, const cera_chat_message *messages,
                                      size_t n, const cera_chat_params *params, char **out, size_t *out_len,
                                      cera_error *err);

/* Tokenizes a rendered conversation as llama.cpp's server does: special tokens parsed, a
 * BOS added when the vocabulary asks for one and the text does not already begin with it.
 * *out is malloc'ed (free it with cera_free). */
CERA_API cera_status cera_chat_tokenize(const cera_engine *engine, const char *text, size_t len,
                                        cera_token **out, size_t *n, cera_error *err);

/* One tool call of a reply. */
typedef struct cera_tool_call {
    char *id;        /* the call's id when the format carries one (Mistral), else NULL */
    char *name;      /* the function */
    char *arguments; /* its arguments: a compact JSON object text */
} cera_tool_call;

/* A reply split into its parts; every string is malloc'ed, freed by cera_chat_reply_free. */
typedef struct cera_chat_reply {
    char *content;   /* the answer, less reasoning and tool-call markup ("" when none) */
    char *reasoning; /* the text inside <think>...</think> (or before a lone </think>), or NULL */
    cera_tool_call *tool_calls;
    int n_tool_calls;
} cera_chat_reply;

/* Parses the text a model generated after a rendered prompt, by the template's format.
 * Markup that does not parse as the format's tool calls stays in the content. */
CERA_API cera_status cera_chat_parse(const cera_chat_template *tmpl, const char *text, size_t len,
                                     cera_chat_reply *out, cera_error *err);
/* The same by a given format (cera_chat_grammar's format, when it differs from the template's). */
CERA_API cera_status cera_chat_parse_as(cera_chat_format format, const char *text, size_t len,
                                        cera_chat_reply *out, cera_error *err);

/* Whether and how the model calls the tools (OpenAI's tool_choice). */
typedef enum cera_tool_choice {
    CERA_TOOL_CHOICE_AUTO = 0, /* it may: the grammar waits for the format's start marker */
    CERA_TOOL_CHOICE_REQUIRED, /* the reply is tool calls: constrained from its first token */
    CERA_TOOL_CHOICE_NONE,     /* no tools: no grammar (and the caller renders none) */
} cera_tool_choice;

/* The grammar of a reply's tool calls, malloc'ed (cera_chat_grammar_free). */
typedef struct cera_chat_grammar {
    char *gbnf;                     /* GBNF, or NULL when nothing is constrained */
    cera_grammar_trigger *triggers; /* [n_triggers]: lazy when n_triggers > 0 (words are static) */
    size_t n_triggers;
    cera_chat_format format; /* the syntax the grammar writes: parse the reply with it */
} cera_chat_grammar;

/* Builds the grammar of the template's tool-call format for the tools (a JSON array of
 * OpenAI tool definitions; each function's `parameters` JSON Schema becomes its arguments'
 * grammar through cera_json_schema_to_grammar's converter, names are restricted to the
 * tools'), as llama.cpp's common/chat.cpp does for the format: one call, or with parallel
 * one or more where the syntax allows. choice AUTO gives a lazy grammar whose triggers are
 * the format's start marker; REQUIRED a grammar from the first token; function (non-NULL)
 * only that function, required; NONE (or tools NULL) no grammar. A template without a tool
 * syntax (CERA_CHAT_CONTENT) gets no grammar for AUTO and CERA_CHAT_GENERIC's otherwise.
 * Apply it with cera_session_set_grammar_lazy(session, gbnf, strlen(gbnf), triggers,
 * n_triggers). Bad tools or an unknown function are CERA_ERR_INVALID_ARG; schemas the
 * converter refuses, and names or parameter names other than 1 to 64 letters, digits and _-.,
 * CERA_ERR_UNSUPPORTED. */
CERA_API cera_status cera_chat_tool_grammar(const cera_chat_template *tmpl, const char *tools,
                                            cera_tool_choice choice, const char *function, bool parallel,
                                            cera_chat_grammar *out, cera_error *err);
CERA_API void cera_chat_grammar_free(cera_chat_grammar *g);
CERA_API void cera_chat_reply_free(cera_chat_reply *reply);

/* Frees memory cera returned to the caller (rendered text, token arrays). */
CERA_API void cera_free(void *p);

#ifdef __cplusplus
}
#endif
#endif /* CERA_H */

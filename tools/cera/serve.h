/*
 * serve.h — what the files of `cera serve` share: the server (engine, template, adapters,
 * limits, the queue and the running jobs, the counters of /metrics) and a job (one
 * request: its prompt, sampling, and one sequence per choice).
 *
 * Threads: libmicrohttpd runs one thread per connection (serve_http.c); they parse a
 * request, submit a job and wait on it. One scheduler thread (serve_sched.c) owns every
 * session: it admits queued jobs, evaluates all running sequences together, step after
 * step, and publishes their text. Everything a job shares with its connection is guarded
 * by the server's mutex; the sessions are the scheduler's alone.
 */
#ifndef CERA_CLI_SERVE_H
#define CERA_CLI_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "cera.h"
#include "serve_api.h"
#include "serve_cache.h"
#include "serve_disk.h"
#include "serve_pace.h"

#define SERVE_ADAPTERS_MAX 16
/* sessions of /v1/embeddings (serve_embed.c), beyond the scheduler's */
#define SERVE_EMBED_SEQS 4

typedef struct serve_adapter {
    const char *name; /* the model name it is served as */
    const char *path;
    cera_adapter *adapter;
} serve_adapter;

/* A generated token's log-probabilities: the model's log-softmax over the whole vocabulary
 * before any sampling stage (temperature, penalties, biases, filters), as llama-server
 * reports them, with the most likely alternatives. */
typedef struct serve_logprob {
    cera_token tok;
    float lp;
    size_t off; /* where its text starts in the choice's text */
    int n_top;
    cera_token top[SERVE_TOP_LOGPROBS_MAX];
    float top_lp[SERVE_TOP_LOGPROBS_MAX];
} serve_logprob;

/* One choice of a job: one session. A job's choices are n for each of its prompts, in
 * OpenAI's order (prompt after prompt). */
typedef struct serve_seq {
    struct serve_job *job;
    int index;
    int first;                /* the first choice of its prompt (the one the others fork) */
    const cera_token *prompt; /* its prompt: within the job's */
    size_t n_prompt;
    cera_session *s; /* NULL before admission and once finished */
    size_t n_done;   /* prompt tokens evaluated */
    size_t chunk;    /* the prompt's chunk size (fixed at admission: the same cuts whatever runs) */
    cera_token next; /* the sampled token evaluated by the next step, or -1 */
    char *text;      /* the generated text (a stop string and what follows are cut off) */
    size_t len, cap;
    size_t ready;      /* bytes of text final (no stop string can still take them back) */
    size_t sent;       /* bytes the connection has taken */
    int n_gen;         /* generated tokens */
    int mode;          /* how its prompt was rounded (serve_cache.h) */
    bool slot;         /* it holds one of the --parallel sequences */
    bool fork_pending; /* a choice after the first: forked from the first once its prompt is read */
    bool loading;      /* its prefix is being loaded from the disk cache (its session is the
                        * reader's meanwhile: s is NULL) */
    size_t n_dropped;  /* positions context shifts dropped (--context-shift); such a session
                        * stays out of the prefix cache */
    cera_session *ds;  /* its draft model's session (-md), or NULL */
    cera_token *hist;  /* the timeline: the prompt, then every sampled token (for the prefix cache) */
    size_t n_hist, cap_hist;
    serve_logprob *lp; /* one per generated token whose text is kept (when the job asks) */
    size_t n_lp, cap_lp;
    size_t lp_sent;     /* entries the stream has sent */
    const char *finish; /* "stop", "length": set when done */
    bool finish_sent;
} serve_seq;

typedef enum serve_job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE } serve_job_state;

typedef struct serve_job {
    struct serve_job *next; /* the queue's or the running list's link */
    int refs;               /* the connection's and the scheduler's */
    serve_kind kind;
    serve_job_state state;
    bool cancelled;
    int err_status; /* a failure after submission (500, 503, 504); 0 when none */
    char err[256];
    cera_token *prompt;                       /* the prompts' tokens, one after the other */
    size_t n_prompt;                          /* of all prompts */
    int n_prompts;                            /* a completion's array of prompts; 1 otherwise */
    size_t prompt_off[SERVE_PROMPTS_MAX + 1]; /* prompt p: prompt[prompt_off[p] .. prompt_off[p + 1]) */
    cera_sampler_params sp;
    cera_logit_bias *bias; /* sp.logit_bias, owned */
    char *stop[SERVE_STOP_MAX];
    int n_stop;
    int max_tokens;
    bool ignore_eos;
    int logprobs; /* -1: none; else the alternatives reported per token */
    serve_adapter_set ad;
    size_t n_cached; /* prompt tokens the first choice of each prompt took from the prefix cache */
    size_t n_disk;   /* of them, loaded from the disk cache */
    int n_drafted, n_draft_kept; /* speculative drafts evaluated for its choices, and kept */
    bool stream, include_usage, parse_tools;
    cera_chat_format parse_format; /* the syntax its reply's tool calls are parsed with */
    /* the grammar of its replies (response_format, or the tools' calls; lazy with triggers),
     * or NULL */
    char *gbnf;
    cera_grammar_trigger *triggers;
    size_t n_triggers;
    char id[48];
    char model[128];
    long created;
    double deadline; /* the request's time limit (serve_now clock) */
    /* when its request had been read, it was queued, admitted, and its first and last tokens
     * came (serve_now clock; --verbose prints them) */
    double t_recv, t_submit, t_admit, t_first, t_last;
    pthread_cond_t cv; /* signalled when the job's text or state changes */
    int n;
    serve_seq seqs[];
} serve_job;

typedef struct serve_server {
    cera_engine *e;
    cera_chat_template *tmpl;
    const char *model_id;
    serve_adapter ad[SERVE_ADAPTERS_MAX];
    int n_ad;
    float ad_scale[SERVE_ADAPTERS_MAX]; /* llama-server's global scales (POST /lora-adapters), under mu:
                                           the adapters of requests to the base model without "lora" */
    serve_limits lim;
    cera_sampler_params sp_default;
    /* options */
    const char *host;
    int port;
    int parallel;
    int max_queue;
    size_t max_body;
    int timeout_s;      /* per request */
    int conn_timeout_s; /* idle or half-sent connections */
    int prefill_chunk;
    int budget;            /* tokens per step */
    double itl_target_ms;  /* --itl-target: keep steps, the streams' gaps, under it (0: off) */
    int cache_slots;       /* finished sessions kept for their prefixes (0: no prefix cache) */
    bool cache_any;        /* reuse the longest prefix even where its rounding differs */
    const char *cache_dir; /* --cache-dir: the disk tier's folder, or NULL */
    size_t cache_dir_size; /* --cache-dir-size: its cap in bytes */
    bool verbose;          /* a line per finished request: its tokens and timings */
    bool ctx_shift;        /* --context-shift: a full context drops half of what follows keep */
    int keep;              /* --keep: prompt tokens a shift keeps (-1: all) */
    const char *api_key;
    /* speculative decoding (--spec-type, -md, --draft-max/--draft-min): cera_session_draft's
     * n_match (0: off), the draft model's engine (NULL: none), at most / at least this many
     * drafts per sequence per step */
    int spec_ngram;
    cera_engine *draft_e;
    int draft_max, draft_min;
    cera_pooling pooling; /* /v1/embeddings: --pooling (never MODEL) and --embd-normalize */
    int embd_norm;
    pthread_mutex_t embed_mu; /* one embeddings request computes at a time */
    /* state, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the scheduler */
    serve_job *q_head, *q_tail;
    int n_queued;
    serve_job *running;
    serve_job *done; /* finished, the scheduler's reference not yet dropped */
    int n_seqs;      /* sessions open */
    bool stopping;
    uint64_t rng;
    uint64_t next_id;
    /* counters, under mu */
    uint64_t n_req[16]; /* by endpoint (serve_http.c's table) */
    uint64_t n_errors;
    uint64_t n_prompt_tokens, n_gen_tokens;
    double busy_s;                    /* seconds spent in steps */
    uint64_t n_cached_tokens;         /* prompt tokens taken from the prefix cache */
    uint64_t n_drafted, n_draft_kept; /* speculative drafts evaluated, and kept */
    int n_cache_entries;
    serve_cache cache;  /* the scheduler's alone */
    serve_disk *disk;   /* the disk tier under it (--cache-dir), or NULL; its calls are the scheduler's */
    double disk_ms_tok; /* its loads' measured time per token (a decayed mean; 0: none yet) */
    uint64_t n_disk_skipped; /* disk hits not loaded: the prefill was predicted faster (under mu) */
    /* how long steps take: of decode tokens alone [0], with prompt chunks [1] (the
     * scheduler's alone) */
    serve_pace pace[2];
    pthread_t sched;
} serve_server;

double serve_now(void);

/* serve_sched.c */
serve_job *serve_job_new(int n);
/* Queues a job (taking a reference for the scheduler): 0, or 503 when the queue is full. */
int serve_submit(serve_server *sv, serve_job *job);
/* Drops the connection's reference (mu held). */
void serve_job_release_locked(serve_server *sv, serve_job *job);
/* The log-probabilities of token t and the n_top most likely tokens under logits. */
void serve_logprobs_of(const float *logits, int n_vocab, cera_token t, int n_top, serve_logprob *out);
/* The scheduler thread. */
void *serve_sched_main(void *arg);
/* Wakes the scheduler (takes mu): the disk tier's call when a load has ended. */
void serve_sched_wake(void *sv);

/* serve_answer.c */
struct MHD_Connection;
struct MHD_Response;
bool serve_job_admitted(const serve_job *j); /* out of the queue */
bool serve_job_over(const serve_job *j);
/* Waits (mu held) until pred(j); false when the client hung up meanwhile (the job is then
 * cancelled). */
bool serve_wait_job(serve_server *sv, serve_job *j, struct MHD_Connection *c,
                    bool (*pred)(const serve_job *));
/* Cancels the job unless it is over and drops the connection's reference (takes mu). */
void serve_cancel_and_release(serve_server *sv, serve_job *j);
/* The whole answer of a finished job (mu held). */
cJSON *serve_answer_full(serve_server *sv, serve_job *j);
/* The event stream of an admitted job: the connection's reference passes to it; NULL (the job
 * cancelled and released) when out of memory. */
struct MHD_Response *serve_stream_response(serve_server *sv, serve_job *j, struct MHD_Connection *c);
/* A copy of s[0..n) with invalid UTF-8 replaced by U+FFFD; its text added to obj as key. */
char *serve_clean_utf8(const char *s, size_t n);
cJSON *serve_add_text(cJSON *obj, const char *key, const char *s, size_t n);

/* serve_embed.c: answers a /v1/embeddings body: the HTTP status, and *out the answer or
 * an OpenAI error object (malloc'ed; NULL when out of memory). */
int serve_embeddings(serve_server *sv, const cJSON *body, char **out);

/* serve_http.c: starts the HTTP daemon; NULL on failure (printed). *port receives the
 * port bound (for --port 0). */
struct MHD_Daemon *serve_http_start(serve_server *sv, int *port);

#endif

/*
 * serve.c — `cera serve`: an OpenAI-compatible HTTP server over one model.
 *
 *   cera serve -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [-c CTX]
 *              [--kv-size BYTES] [--chat-template FILE|NAME] [--lora NAME=PATH]...
 *              [--api-key KEY] [--device D] [--cache-dir DIR [--cache-dir-size BYTES]]
 *
 * This file reads the options, opens the engine (n_seq_max = --parallel sessions sharing
 * one KV pool of --kv-size bytes), the chat template and the adapters (each served as a
 * model of its own name), starts the scheduler (serve_sched.c) and the HTTP daemon
 * (serve_http.c), prints the URL, and waits for SIGINT or SIGTERM. With --cache-dir the prefix
 * cache gets a disk tier (serve_disk.c) in that folder.
 */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "args.h"
#include "cli.h"
#include "core/error.h"
#include "gen.h"
#include "prompt.h"
#include "serve.h"

#define SERVE_GROUPS (CLI_G_MODEL | CLI_G_SPEC)
/* --cache-dir-size unless given */
#define SERVE_CACHE_DIR_SIZE ((size_t)10 << 30)

typedef struct serve_opts {
    serve_server *sv;
    const char *chat_template;
    const char *alias;
    const char *lora_name[SERVE_ADAPTERS_MAX];
    const char *lora_path[SERVE_ADAPTERS_MAX];
    int n_lora;
    size_t kv_bytes;
    int max_tokens;
    int pooling; /* --pooling; -1: not given */
} serve_opts;

static bool parse_size(const char *v, size_t *out) {
    char *end;
    const double d = strtod(v, &end);
    if (end == v || d < 0) return false;
    double m = 1;
    switch (tolower((unsigned char)*end)) {
    case 'k':
        m = 1024.0;
        end++;
        break;
    case 'm':
        m = 1024.0 * 1024;
        end++;
        break;
    case 'g':
        m = 1024.0 * 1024 * 1024;
        end++;
        break;
    default: break;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end || d * m > 1e15) return false;
    *out = (size_t)(d * m);
    return true;
}

static int extra_opt(const char *cmd, int argc, char **argv, int *i, void *user) {
    serve_opts *o = user;
    serve_server *sv = o->sv;
    const char *a = argv[*i];
    static const char *const with_value[] = {"--host",           "--port",
                                             "--parallel",       "-np",
                                             "--kv-size",        "--chat-template",
                                             "--lora",           "--api-key",
                                             "--timeout",        "--max-queue",
                                             "--max-body",       "--prefill-chunk",
                                             "--alias",          "-a",
                                             "--conn-timeout",   "--max-tokens",
                                             "--cache-slots",    "--pooling",
                                             "--embd-normalize", "--itl-target",
                                             "--keep",           "--cache-dir",
                                             "--cache-dir-size", NULL};
    if (!strcmp(a, "--cache-any")) {
        sv->cache_any = true;
        return 1;
    }
    if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
        sv->verbose = true;
        return 1;
    }
    if (!strcmp(a, "--context-shift") || !strcmp(a, "--no-context-shift")) {
        sv->ctx_shift = !strcmp(a, "--context-shift");
        return 1;
    }
    bool known = false;
    for (int k = 0; with_value[k]; k++) known = known || !strcmp(a, with_value[k]);
    if (!known) return 0;
    const char *v;
    if (cli_take_value(cmd, argc, argv, i, &v) < 0) return -1;
    long l;
    bool ok = true;
    if (!strcmp(a, "--host")) {
        sv->host = v;
    } else if (!strcmp(a, "--port")) {
        ok = cli_parse_long(v, 0, 65535, &l);
        sv->port = (int)l;
    } else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) {
        ok = cli_parse_long(v, 1, 1024, &l);
        sv->parallel = (int)l;
    } else if (!strcmp(a, "--kv-size")) {
        ok = parse_size(v, &o->kv_bytes);
    } else if (!strcmp(a, "--chat-template")) {
        o->chat_template = v;
    } else if (!strcmp(a, "--lora")) {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || !eq[1]) {
            cli_usage_error(cmd, "--lora takes NAME=PATH (the adapter is served as the model NAME)");
            return -1;
        }
        if (o->n_lora == SERVE_ADAPTERS_MAX) {
            cli_usage_error(cmd, "at most %d adapters", SERVE_ADAPTERS_MAX);
            return -1;
        }
        char *name = strndup(v, (size_t)(eq - v));
        if (!name) return -1;
        o->lora_name[o->n_lora] = name;
        o->lora_path[o->n_lora++] = eq + 1;
    } else if (!strcmp(a, "--api-key")) {
        sv->api_key = v;
    } else if (!strcmp(a, "--timeout")) {
        ok = cli_parse_long(v, 1, 86400 * 7, &l);
        sv->timeout_s = (int)l;
    } else if (!strcmp(a, "--conn-timeout")) {
        ok = cli_parse_long(v, 1, 86400, &l);
        sv->conn_timeout_s = (int)l;
    } else if (!strcmp(a, "--max-queue")) {
        ok = cli_parse_long(v, 1, 1 << 20, &l); /* a request waits there until a sequence is free */
        sv->max_queue = (int)l;
    } else if (!strcmp(a, "--max-body")) {
        ok = parse_size(v, &sv->max_body) && sv->max_body >= 1024 && sv->max_body <= ((size_t)1 << 30);
    } else if (!strcmp(a, "--prefill-chunk")) {
        ok = cli_parse_long(v, 1, 1 << 20, &l);
        sv->prefill_chunk = (int)l;
    } else if (!strcmp(a, "--itl-target")) {
        float f;
        ok = cli_parse_float(v, &f) && f >= 0 && f <= 60000;
        sv->itl_target_ms = f;
    } else if (!strcmp(a, "--cache-slots")) {
        ok = cli_parse_long(v, 0, 4096, &l);
        sv->cache_slots = (int)l;
    } else if (!strcmp(a, "--cache-dir")) {
        ok = *v != 0;
        sv->cache_dir = v;
    } else if (!strcmp(a, "--cache-dir-size")) {
        ok = parse_size(v, &sv->cache_dir_size) && sv->cache_dir_size >= 1024;
    } else if (!strcmp(a, "--pooling")) {
        static const char *const names[] = {"none", "mean", "cls", "last"};
        ok = false;
        for (int k = 0; k < 4; k++)
            if (!strcmp(v, names[k])) ok = true, o->pooling = k;
    } else if (!strcmp(a, "--embd-normalize")) {
        ok = cli_parse_long(v, -1, 1000000, &l);
        sv->embd_norm = (int)l;
    } else if (!strcmp(a, "--max-tokens")) {
        ok = cli_parse_long(v, 1, 1 << 24, &l);
        o->max_tokens = (int)l;
    } else if (!strcmp(a, "--keep")) {
        ok = cli_parse_long(v, -1, 1 << 24, &l);
        sv->keep = (int)l;
    } else {
        o->alias = v;
    }
    if (!ok) {
        cli_usage_error(cmd, "bad value for %s: '%s'", a, v);
        return -1;
    }
    return 1;
}

static const char serve_usage[] =
    "usage: cera serve -m MODEL [--host 127.0.0.1] [--port 8080] [--parallel N] [-c CTX] [options]\n\n"
    "Serves the model over HTTP with OpenAI's API (/v1/chat/completions, /v1/completions,\n"
    "/v1/models, /v1/embeddings) and llama-server's (/tokenize, /detokenize, /apply-template, "
    "/lora-adapters),\n"
    "/health and /metrics (Prometheus). Requests run together, continuously batched.\n";

static const char serve_help[] =
    "  --host ADDR           the address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port N              the port (default 8080; 0 picks a free one)\n"
    "  --parallel, -np N     sequences at once (default 4); more requests wait in the queue\n"
    "  --kv-size BYTES       the KV cache shared by all sequences (K/M/G suffixes; default: room\n"
    "                        for --parallel + --cache-slots + 4 (embeddings) full contexts, and 3\n"
    "                        more with --cache-dir: its writer's and reader's sessions)\n"
    "  --chat-template F|N   a Jinja chat template file, or the model's template of that name\n"
    "                        (chatml: built in)\n"
    "  --lora NAME=PATH      an adapter, served as the model NAME (repeatable)\n"
    "  --alias, -a NAME      the model's name in the API (default: the file's name)\n"
    "  --api-key KEY         requests must carry Authorization: Bearer KEY\n"
    "  --max-queue N         requests waiting at most (default 64); beyond: 503\n"
    "  --max-body BYTES      the largest request body (default 4M); beyond: 413\n"
    "  --max-tokens N        the most tokens a request may ask for (default: the context)\n"
    "  --timeout S           a request's time limit in seconds (default 600)\n"
    "  --conn-timeout S      an idle or half-sent connection is closed after S seconds (default 30)\n"
    "  --prefill-chunk N     prompt tokens per sequence per step (default 256)\n"
    "  --itl-target MS       keep each step, the gap between a stream's tokens, under MS\n"
    "                        milliseconds: a queued request starts only while the steps, as timed\n"
    "                        so far, stay within it with one more sequence, and prompts are read\n"
    "                        in chunks of what room the decodes leave (at most --prefill-chunk,\n"
    "                        and on the CPU at most 63). Trades time to first token and throughput\n"
    "                        for steady streams (default 0: off, as many sequences as --parallel)\n"
    "  --cache-slots N       finished sessions kept so that new requests reuse their prefixes\n"
    "                        (default: --parallel; 0: no prefix cache). A prefix is reused as far\n"
    "                        as it gives exactly the answer a fresh evaluation gives: all of it\n"
    "                        with --prefill-chunk 63 or less, less with larger chunks\n"
    "  --cache-any           reuse the longest cached prefix, even where its rounding differs\n"
    "                        (always on a GPU)\n"
    "  --cache-dir DIR       a disk tier under the prefix cache, in the folder DIR (which must\n"
    "                        exist): each prompt once read, and its answer's timeline at the end,\n"
    "                        cut to whole KV blocks, is saved there, and a prompt that begins\n"
    "                        with one (in this process or a later one) loads it instead of\n"
    "                        computing it, by the same rules as the RAM cache. Files are named\n"
    "                        by a hash of the model, the KV cache type, the adapters and their\n"
    "                        scales and the tokens; a damaged or foreign one is refused and\n"
    "                        deleted. Off for models whose sessions cannot be cut back (a\n"
    "                        recurrent state)\n"
    "  --cache-dir-size B    the most bytes the folder's prefix files may take (K/M/G suffixes;\n"
    "                        default 10G); the least recently used go first\n"
    "  --verbose, -v         print a line per request that ran, when it ends: its tokens and\n"
    "                        timings (and what --cache-dir loads, writes, refuses and evicts)\n"
    "  --context-shift       when a sequence fills the context, keep its first --keep prompt\n"
    "                        tokens, drop half of what follows and go on (as llama-server's;\n"
    "                        default off: the answer ends there, finish_reason length)\n"
    "  --keep N              prompt tokens a context shift keeps (default 0, -1 = all; the BOS\n"
    "                        token is always kept)\n"
    "  (speculative decoding, above: drafts for each sequence in every step, its tokens those\n"
    "                        without drafts, on the CPU bit for bit)\n"
    "  --pooling P           /v1/embeddings: none, mean, cls or last (default: the model's own;\n"
    "                        mean when it has none; none refuses the endpoint, as llama-server)\n"
    "  --embd-normalize N    /v1/embeddings: -1 none, 0 max absolute, 1 taxicab, 2 euclidean\n"
    "                        (default), N > 2 the p-norm\n";

/* The model's name in the API: the file's name less .gguf. */
/* Whether the model's sessions can be cut back part-way (not so with a recurrent state such
 * as LFM2's): a probe of two tokens cut back to one. */
static bool can_cut_back(cera_engine *e) {
    cera_session_params p = cera_session_default_params();
    cera_session *s = NULL;
    if (cera_session_create(e, &p, &s, NULL)) return true;
    const cera_token t[2] = {0, 0};
    bool ok = true;
    if (cera_session_eval(s, t, 2, false, NULL) == CERA_OK)
        ok = cera_session_truncate(s, 1, NULL) != CERA_ERR_UNSUPPORTED;
    cera_session_free(s);
    return ok;
}

static char *model_name(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
    return strndup(b, n);
}

int cmd_serve(int argc, char **argv) {
    serve_server *sv = calloc(1, sizeof *sv);
    if (!sv) return 1;
    sv->host = "127.0.0.1";
    sv->port = 8080;
    sv->parallel = 4;
    sv->max_queue = 64;
    sv->max_body = (size_t)4 << 20;
    sv->timeout_s = 600;
    sv->conn_timeout_s = 30;
    sv->prefill_chunk = 256;
    sv->cache_slots = -1;
    sv->embd_norm = 2;
    serve_opts o = {.sv = sv, .pooling = -1};
    cli_args a;
    cli_args_init(&a);
    char *name = NULL;
    int rc = cli_parse("serve", SERVE_GROUPS, argc, argv, &a, extra_opt, &o, serve_usage, serve_help);
    if (rc) {
        rc = rc == 1 ? 0 : rc;
        goto out_args;
    }
    if ((rc = cli_args_finish("serve", SERVE_GROUPS, &a))) goto out_args;
    if (!a.model) {
        rc = cli_usage_error("serve", "-m MODEL is required (see --help)");
        goto out_args;
    }
    if (sv->cache_dir_size && !sv->cache_dir) {
        rc = cli_usage_error("serve", "--cache-dir-size needs --cache-dir");
        goto out_args;
    }
    cera_error err = {0};
    if (sv->cache_dir && serve_disk_check_dir(sv->cache_dir, &err)) { /* before the model loads */
        rc = cli_fail(&err);
        goto out_args;
    }
    /* the signals reach only the main thread's sigwait, not the engine's or the daemon's */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = 1;
    if (sv->cache_slots < 0) sv->cache_slots = sv->parallel;
    /* the running sequences, the cached ones, those of /v1/embeddings and the disk tier's */
    a.ep.n_seq_max =
        sv->parallel + sv->cache_slots + SERVE_EMBED_SEQS + (sv->cache_dir ? SERVE_DISK_SEQS : 0);
    a.ep.kv_bytes = o.kv_bytes;
    if (a.ep.n_batch == 0) a.ep.n_batch = 512;
    if (a.ep.n_batch < sv->parallel) a.ep.n_batch = sv->parallel; /* a decode token of each fits a step */
    if (sv->prefill_chunk > a.ep.n_batch) sv->prefill_chunk = a.ep.n_batch;
    sv->budget = a.ep.n_batch;
    if (!serve_pace_init(&sv->pace[0], sv->budget) || !serve_pace_init(&sv->pace[1], sv->budget)) {
        cera_fail(&err, CERA_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    double load_s = 0;
    if (cli_open_engine(a.model, &a.ep, &sv->e, &load_s, &err)) goto fail;
    /* the rounding rules of serve_cache.h are the CPU backend's; on a GPU a prompt's numerics
     * follow the rows of the steps it shares, whatever is cached or however it is cut */
    const bool cpu_rounding = cera_engine_device(sv->e) != CERA_DEVICE_CUDA;
    /* chunks that vary step by step must all round as one: the narrow way */
    if (cpu_rounding && sv->itl_target_ms > 0 && sv->prefill_chunk >= SERVE_ATTN_WIDE_MIN)
        sv->prefill_chunk = SERVE_ATTN_WIDE_MIN - 1;
    fprintf(stderr, "cera serve: loaded %s (%s) in %.2f s\n", a.model, cera_engine_arch(sv->e), load_s);
    cli_warn_context(sv->e, a.ep.n_ctx);
    if (cli_open_template(o.chat_template, sv->e, "--chat-template FILE", &sv->tmpl, &err)) goto fail;
    for (int i = 0; i < o.n_lora; i++) {
        if (cera_adapter_load(sv->e, o.lora_path[i], &sv->ad[i].adapter, &err)) goto fail;
        sv->ad[i].name = o.lora_name[i];
        sv->ad[i].path = o.lora_path[i];
        sv->n_ad = i + 1;
    }
    name = o.alias ? strdup(o.alias) : model_name(a.model);
    if (!name) goto fail;
    sv->model_id = name;
    for (int i = 0; i < sv->n_ad; i++)
        if (!strcmp(sv->ad[i].name, name)) {
            cera_fail(&err, CERA_ERR_INVALID_ARG, "the adapter name '%s' is the model's name", name);
            goto fail;
        }
    /* speculative decoding: a draft model's engine with a sequence for each running one */
    sv->spec_ngram = cli_spec_ngram(&a);
    sv->draft_max = a.draft_max > 0 ? a.draft_max : 16;
    sv->draft_min = a.draft_min > 0 ? a.draft_min : 1;
    if (a.model_draft) {
        cera_engine_params dp = a.ep;
        dp.n_seq_max = sv->parallel;
        dp.kv_bytes = 0;
        dp.progress = NULL;
        if (cera_engine_open(a.model_draft, &dp, &sv->draft_e, &err)) goto fail;
        if (cera_engine_n_vocab(sv->draft_e) != cera_engine_n_vocab(sv->e)) {
            cera_fail(&err, CERA_ERR_INVALID_ARG, "%s: a vocabulary of %d tokens, the model's has %d",
                      a.model_draft, cera_engine_n_vocab(sv->draft_e), cera_engine_n_vocab(sv->e));
            goto fail;
        }
    }
    const int n_ctx = cera_engine_n_ctx(sv->e);
    sv->lim = (serve_limits){.max_depth = 64,
                             .max_tokens = o.max_tokens ? o.max_tokens : n_ctx,
                             .max_n = sv->parallel,
                             .n_vocab = cera_engine_n_vocab(sv->e),
                             .n_adapters = sv->n_ad,
                             .max_prompt = (size_t)n_ctx};
    sv->sp_default = cera_sampler_default_params();
    sv->pooling = o.pooling >= 0                                    ? (cera_pooling)o.pooling
                  : cera_engine_pooling(sv->e) != CERA_POOLING_NONE ? cera_engine_pooling(sv->e)
                                                                    : CERA_POOLING_MEAN;
    pthread_mutex_init(&sv->embed_mu, NULL);
    sv->rng = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    if (!cpu_rounding) sv->cache_any = true; /* no exactness to keep: the longest prefix */
    serve_cache_init(&sv->cache, sv->cache_slots, (size_t)sv->prefill_chunk, sv->cache_any);
    sv->cache.whole_only = sv->cache.snapshots = !can_cut_back(sv->e);
    if (sv->cache_dir && sv->cache.whole_only) {
        /* a file is a prefix of whole blocks, and these sessions can be cut back only to 0 */
        fprintf(stderr,
                "cera serve: --cache-dir: %s sessions keep a recurrent state and cannot be cut back to whole "
                "KV blocks: the disk tier is off (the RAM cache's snapshots still serve)\n",
                cera_engine_arch(sv->e));
    } else if (sv->cache_dir) {
        cera_adapter *ads[SERVE_ADAPTERS_MAX];
        for (int i = 0; i < sv->n_ad; i++) ads[i] = sv->ad[i].adapter;
        const serve_disk_params dp = {.dir = sv->cache_dir,
                                      .cap = sv->cache_dir_size ? sv->cache_dir_size : SERVE_CACHE_DIR_SIZE,
                                      .chunk_max = (size_t)sv->prefill_chunk,
                                      .n_ctx = (size_t)cera_engine_n_ctx(sv->e),
                                      .any = sv->cache_any,
                                      .verbose = sv->verbose,
                                      .adapters = ads,
                                      .n_adapters = sv->n_ad,
                                      .wake = serve_sched_wake,
                                      .wake_arg = sv};
        if (serve_disk_open(sv->e, &dp, &sv->disk, &err)) {
            serve_cache_free(&sv->cache);
            goto fail;
        }
    }
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->cv, NULL);
    if (pthread_create(&sv->sched, NULL, serve_sched_main, sv)) {
        cera_fail(&err, CERA_ERR_NO_MEMORY, "cannot start the scheduler thread");
        goto fail_sync;
    }
    int port = 0;
    struct MHD_Daemon *d = serve_http_start(sv, &port);
    if (d) {
        const bool v6 = strchr(sv->host, ':') != NULL;
        printf("cera serve: listening on http://%s%s%s:%d (model %s, %d parallel, context %d)\n",
               v6 ? "[" : "", sv->host, v6 ? "]" : "", port, sv->model_id, sv->parallel, n_ctx);
        fflush(stdout);
        int sig = 0;
        sigwait(&sigs, &sig);
        fprintf(stderr, "cera serve: stopping (signal %d)\n", sig);
        MHD_quiesce_daemon(d);
    }
    pthread_mutex_lock(&sv->mu);
    sv->stopping = true;
    pthread_cond_signal(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    pthread_join(sv->sched, NULL);
    if (d) MHD_stop_daemon(d);
    rc = d ? 0 : 1;
    goto out;
fail_sync:
    serve_cache_free(&sv->cache);
    pthread_mutex_destroy(&sv->mu);
    pthread_cond_destroy(&sv->cv);
fail:
    rc = cli_fail(&err);
out:
    serve_disk_close(sv->disk); /* after the scheduler: it writes what is queued */
    serve_pace_free(&sv->pace[0]);
    serve_pace_free(&sv->pace[1]);
    for (int i = 0; i < sv->n_ad; i++) cera_adapter_free(sv->ad[i].adapter);
    cera_chat_template_free(sv->tmpl);
    cera_engine_close(sv->draft_e);
    cera_engine_close(sv->e);
out_args:
    for (int i = 0; i < o.n_lora; i++) free((char *)o.lora_name[i]);
    free(name);
    cli_args_free(&a);
    free(sv);
    return rc;
}

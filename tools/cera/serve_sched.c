/*
 * serve_sched.c — the continuous-batching scheduler of `cera serve`.
 *
 * One thread owns every session. Each step it first drops what finished or was cancelled
 * (a disconnected client's sequence is freed at the next step boundary) and admits queued
 * jobs while sessions are free (the engine's n_seq_max = --parallel; the KV pool is shared
 * by all, not split per slot). It then builds one cera_batch_eval from the decode token of
 * every running sequence plus, in arrival order, the next prompt chunk of sequences still
 * reading their prompt, under a token budget (chunked prefill: a long prompt never holds up
 * the others for more than one chunk a step). A prompt's chunks are fixed when its job is
 * admitted (equal chunks of at most --prefill-chunk), never by what else runs, so that with
 * the CPU backend's batch invariance a request gets exactly the tokens it would get alone (on
 * a GPU a step's numerics follow its rows: the tensor cores' matmul up to 64, cuBLAS past). The
 * sequences that have logits are sampled together (cera_batch_sample: each with its own
 * sampler chain, seed and penalties) and their text is published to their connections. A
 * prompt whose beginning the disk tier holds (--cache-dir) waits out of the steps while the
 * disk's reader loads it, then reads the rest as after a RAM hit; a sequence's timeline goes to
 * the disk tier's writer when its prompt has been read and again, if it has grown enough, when
 * it ends.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen.h"
#include "serve.h"

double serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void serve_sched_wake(void *arg) {
    serve_server *sv = arg;
    pthread_mutex_lock(&sv->mu);
    pthread_cond_signal(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
}

serve_job *serve_job_new(int n) {
    serve_job *j = calloc(1, sizeof *j + (size_t)n * sizeof(serve_seq));
    if (!j) return NULL;
    j->n = n;
    j->refs = 1;
    pthread_cond_init(&j->cv, NULL);
    for (int i = 0; i < n; i++) {
        j->seqs[i].job = j;
        j->seqs[i].index = i;
        j->seqs[i].next = -1;
    }
    return j;
}

static void job_free(serve_job *j) {
    for (int i = 0; i < j->n; i++) {
        free(j->seqs[i].text);
        free(j->seqs[i].hist);
        free(j->seqs[i].lp);
    }
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->prompt);
    free(j->bias);
    free(j->gbnf);
    free(j->triggers);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void serve_job_release_locked(serve_server *sv, serve_job *j) {
    (void)sv;
    if (--j->refs == 0) job_free(j);
}

int serve_submit(serve_server *sv, serve_job *j) {
    pthread_mutex_lock(&sv->mu);
    if (sv->n_queued >= sv->max_queue || sv->stopping) {
        pthread_mutex_unlock(&sv->mu);
        return 503;
    }
    j->refs++;
    j->state = JOB_QUEUED;
    j->t_submit = serve_now();
    j->next = NULL;
    if (sv->q_tail)
        sv->q_tail->next = j;
    else
        sv->q_head = j;
    sv->q_tail = j;
    sv->n_queued++;
    pthread_cond_signal(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    return 0;
}

/* ---- Sequences ------------------------------------------------------------------------ */

/* The sequence's session goes to the prefix cache (which frees it when it cannot keep it),
 * and its timeline to the disk tier; a load from the disk that is still going is cancelled. */
static void seq_close(serve_server *sv, serve_seq *q) {
    if (!q->slot) return;
    cera_session_free(q->ds);
    q->ds = NULL;
    /* an end inside a step's kept drafts: the timeline back to the tokens the answer took */
    if (q->s && !q->loading && (size_t)cera_session_n_past(q->s) > q->n_hist &&
        cera_session_truncate(q->s, (int)q->n_hist, NULL) != CERA_OK) {
        cera_session_free(q->s);
        q->s = NULL;
    }
    if (q->loading) {
        cera_session_free(serve_disk_cancel(sv->disk, q));
        q->loading = false;
    } else if (q->s && q->n_dropped) { /* shifted: its KV is not what its timeline's tokens give */
        cera_session_free(q->s);
    } else if (q->s) {
        const size_t n = (size_t)cera_session_n_past(q->s);
        serve_disk_put(sv->disk, q->s, &q->job->ad, q->mode, serve_mode_extent(q->mode, n, q->n_prompt));
        serve_cache_put(&sv->cache, q->s, q->hist, q->n_hist, &q->job->ad, q->mode, q->n_prompt);
    }
    sv->n_cache_entries = sv->cache.n;
    q->s = NULL;
    q->slot = false;
    sv->n_seqs--;
}

static bool hist_push(serve_seq *q, cera_token t) {
    if (q->n_hist == q->cap_hist) {
        const size_t cap = q->cap_hist ? 2 * q->cap_hist : 256;
        cera_token *h = realloc(q->hist, cap * sizeof *h);
        if (!h) return false;
        q->hist = h;
        q->cap_hist = cap;
    }
    q->hist[q->n_hist++] = t;
    return true;
}

void serve_logprobs_of(const float *logits, int n_vocab, cera_token t, int n_top, serve_logprob *out) {
    if (n_top > SERVE_TOP_LOGPROBS_MAX) n_top = SERVE_TOP_LOGPROBS_MAX;
    if (n_top > n_vocab) n_top = n_vocab;
    float mx = -INFINITY;
    for (int v = 0; v < n_vocab; v++)
        if (logits[v] > mx) mx = logits[v];
    double sum = 0;
    for (int v = 0; v < n_vocab; v++) sum += exp((double)logits[v] - mx);
    const double lse = mx + log(sum);
    /* the n_top largest, in order (the first of equal logits first) */
    int k = 0;
    for (int v = 0; v < n_vocab && n_top > 0; v++) {
        if (k == n_top && logits[v] <= logits[out->top[k - 1]]) continue;
        int at = k < n_top ? k++ : k - 1;
        while (at > 0 && logits[out->top[at - 1]] < logits[v]) {
            out->top[at] = out->top[at - 1];
            at--;
        }
        out->top[at] = v;
    }
    out->n_top = k;
    for (int i = 0; i < k; i++) out->top_lp[i] = (float)(logits[out->top[i]] - lse);
    out->tok = t;
    out->lp = (float)(logits[t] - lse);
}

static bool lp_push(serve_seq *q, const serve_logprob *lp) {
    if (q->n_lp == q->cap_lp) {
        const size_t cap = q->cap_lp ? 2 * q->cap_lp : 16;
        serve_logprob *n = realloc(q->lp, cap * sizeof *n);
        if (!n) return false;
        q->lp = n;
        q->cap_lp = cap;
    }
    q->lp[q->n_lp++] = *lp;
    return true;
}

/* --verbose: the finished job's tokens and where its time went (llama-server prints the like
 * for every request). */
static void log_job(const serve_job *j) {
    int n_gen = 0;
    for (int i = 0; i < j->n; i++) n_gen += j->seqs[i].n_gen;
    const double ms = 1e3;
    char disk[48] = "";
    if (j->n_disk) snprintf(disk, sizeof disk, ", %zu from disk", j->n_disk);
    fprintf(stderr,
            "cera serve: %s: prompt %zu tokens (%zu cached%s), %d generated; read to queued %.1f ms, queued "
            "%.1f ms",
            j->id, j->n_prompt, j->n_cached, disk, n_gen, (j->t_submit - j->t_recv) * ms,
            (j->t_admit - j->t_submit) * ms);
    if (j->t_first > 0) {
        const double gen_s = j->t_last - j->t_first;
        fprintf(stderr, ", first token %.1f ms after admission, the rest in %.1f ms (%.1f tok/s)",
                (j->t_first - j->t_admit) * ms, gen_s * ms,
                n_gen > 1 && gen_s > 0 ? (n_gen - 1) / gen_s : 0.0);
    }
    fprintf(stderr, "%s\n", j->err_status ? " (failed)" : j->cancelled ? " (cancelled)" : "");
}

/* The job is over: out of the running list, its sessions freed, its connection woken. */
static void job_done(serve_server *sv, serve_job *j) {
    if (sv->verbose && j->t_admit > 0) log_job(j);
    for (serve_job **p = &sv->running; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            break;
        }
    for (int i = 0; i < j->n; i++) {
        seq_close(sv, &j->seqs[i]);
        if (!j->seqs[i].finish) j->seqs[i].finish = "stop";
    }
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
    /* the scheduler's reference goes at the start of the next step: this step's lists may
     * still point into the job */
    j->next = sv->done;
    sv->done = j;
}

static void release_done(serve_server *sv) {
    while (sv->done) {
        serve_job *j = sv->done;
        sv->done = j->next;
        serve_job_release_locked(sv, j);
    }
}

static void job_fail(serve_server *sv, serve_job *j, int status, const char *msg) {
    if (!j->err_status) {
        j->err_status = status;
        snprintf(j->err, sizeof j->err, "%.255s", msg);
    }
    sv->n_errors++;
    job_done(sv, j);
}

static void seq_finish(serve_server *sv, serve_seq *q, const char *why) {
    q->finish = why;
    q->len = serve_utf8_complete(q->text ? q->text : "", q->len); /* no half character at the end */
    q->ready = q->len;
    seq_close(sv, q);
    serve_job *j = q->job;
    for (int i = 0; i < j->n; i++)
        if (!j->seqs[i].finish) return;
    job_done(sv, j);
}

static bool text_append(serve_seq *q, const char *p, size_t n) {
    if (q->len + n + 1 > q->cap) {
        const size_t cap = (q->len + n + 1) * 2 + 64;
        char *t = realloc(q->text, cap);
        if (!t) return false;
        q->text = t;
        q->cap = cap;
    }
    memcpy(q->text + q->len, p, n);
    q->len += n;
    q->text[q->len] = 0;
    return true;
}

/* --context-shift: the sequence's context is full (its token just sampled would take the last
 * position), so it keeps its first --keep prompt positions (BOS too), drops half of the rest,
 * as llama-server does, and goes on. Its timeline loses the dropped tokens; its KV is no longer
 * what the timeline's tokens give, so it stays out of the prefix cache. False when nothing
 * can be dropped or the model cannot shift (recurrent or sliding-window layers). */
static bool shift(serve_server *sv, serve_seq *q) {
    if (!sv->ctx_shift) return false;
    const int n_ctx = cera_engine_n_ctx(sv->e), n_past = cera_session_n_past(q->s);
    int keep = cli_keep_positions(sv->e, sv->keep, q->prompt, q->n_prompt);
    if (keep > n_ctx - 4) keep = n_ctx - 4 > 0 ? n_ctx - 4 : 0;
    const int n_discard = keep < n_past ? (n_past - keep) / 2 : 0;
    if (n_discard < 1 || cera_session_shift(q->s, keep, n_discard, NULL) != CERA_OK) return false;
    memmove(q->hist + keep, q->hist + keep + n_discard,
            (q->n_hist - (size_t)keep - n_discard) * sizeof *q->hist);
    q->n_hist -= (size_t)n_discard;
    q->n_dropped += (size_t)n_discard;
    return true;
}

/* A sampled token (with its log-probabilities when lp): its text appended, the stop strings
 * and limits checked (mu held). */
static void seq_token(serve_server *sv, serve_seq *q, cera_token t, serve_logprob *lp) {
    serve_job *j = q->job;
    const cera_grammar_state gs = cera_session_grammar_state(q->s);
    if (t < 0 && (gs == CERA_GRAMMAR_COMPLETE || gs == CERA_GRAMMAR_DEAD_END)) {
        seq_finish(sv, q, "stop"); /* the grammar allows nothing more */
        return;
    }
    if (t < 0) {
        job_fail(sv, j, 500, "sampling failed (non-finite logits)");
        return;
    }
    const double now = serve_now();
    if (j->t_first == 0) j->t_first = now;
    /* with a grammar, an end-of-generation token is its complete match: always the end */
    if ((!j->ignore_eos || gs == CERA_GRAMMAR_COMPLETE) && cera_engine_is_eog(sv->e, t)) {
        seq_finish(sv, q, "stop");
        return;
    }
    j->t_last = now; /* the last generated token's time (an end-of-generation one is not counted) */
    q->n_gen++;
    sv->n_gen_tokens++;
    if (!hist_push(q, t)) {
        job_fail(sv, j, 500, "out of memory");
        return;
    }
    char buf[256];
    int n = cera_token_to_piece(sv->e, t, buf, sizeof buf, false);
    if (n < 0) n = 0;
    if ((size_t)n > sizeof buf) n = 0; /* no piece is that long */
    const size_t before = q->len;
    if (lp) lp->off = before;
    if (!text_append(q, buf, (size_t)n) || (lp && !lp_push(q, lp))) {
        job_fail(sv, j, 500, "out of memory");
        return;
    }
    /* a stop string: it and what follows are never sent */
    size_t max_stop = 0;
    for (int i = 0; i < j->n_stop; i++) {
        const size_t sl = strlen(j->stop[i]);
        if (sl > max_stop) max_stop = sl;
        const size_t from = before + 1 > sl ? before + 1 - sl : 0;
        for (size_t off = from; off + sl <= q->len; off++)
            if (!memcmp(q->text + off, j->stop[i], sl)) {
                q->len = off;
                q->text[off] = 0;
                while (q->n_lp > 0 && q->lp[q->n_lp - 1].off >= off)
                    q->n_lp--; /* the tokens of the stop string are not reported */
                seq_finish(sv, q, "stop");
                return;
            }
    }
    /* text that may begin a stop string waits for the next pieces */
    size_t hold = 0;
    for (int i = 0; i < j->n_stop; i++) {
        const size_t sl = strlen(j->stop[i]);
        for (size_t k = sl - 1 < q->len ? sl - 1 : q->len; k > hold; k--)
            if (!memcmp(q->text + q->len - k, j->stop[i], k)) {
                hold = k;
                break;
            }
    }
    const size_t ready = serve_utf8_complete(q->text, q->len - hold);
    if (ready > q->ready) q->ready = ready;
    if (j->max_tokens > 0 && q->n_gen >= j->max_tokens) {
        seq_finish(sv, q, "length");
        return;
    }
    if (q->n_prompt + (size_t)q->n_gen - q->n_dropped >= (size_t)cera_engine_n_ctx(sv->e) && !shift(sv, q)) {
        seq_finish(sv, q, "length");
        return;
    }
    q->next = t;
    pthread_cond_broadcast(&j->cv);
}

/* ---- Admission -------------------------------------------------------------------------- */

/* The HTTP status of a request whose session could not be set up: a grammar that does not
 * load is the client's. */
static int setup_status(cera_status st) {
    return st == CERA_ERR_INVALID_ARG || st == CERA_ERR_FORMAT || st == CERA_ERR_UNSUPPORTED ? 400 : 500;
}

static const serve_pace *pace_of(const serve_server *sv, bool prompt);

/* Whether loading n tokens from the disk tier is predicted to take less time than computing
 * the n - have of them the RAM cache does not give (on a fast GPU a large model's KV can take
 * longer to read than to recompute): by the loads and prompt steps timed so far, true until
 * both have been seen. */
static bool disk_pays(const serve_server *sv, size_t n, size_t have) {
    if (!(sv->disk_ms_tok > 0) || n <= have) return true;
    const size_t left = n - have, chunk = left < (size_t)sv->prefill_chunk ? left : (size_t)sv->prefill_chunk;
    const double step = serve_pace_predict(pace_of(sv, true), (int)chunk);
    if (!(step > 0)) return true;
    return sv->disk_ms_tok * (double)n < step * (double)((left + chunk - 1) / chunk);
}

/* The first choice of a prompt starts from the longest prefix the caches give. A file of the
 * disk tier that gives clearly more than the RAM cache is loaded into a new session on the
 * disk's reader thread, and the sequence waits (loading, without a session; no step holds it)
 * until collect_loads; otherwise it takes the RAM cache's prefix, or a new session. False
 * (err set) on a failure. */
static bool seq_start(serve_server *sv, serve_seq *q, bool disk, cera_error *err) {
    serve_job *j = q->job;
    const size_t nc = (size_t)sv->prefill_chunk;
    cera_session_params p = cera_session_default_params();
    p.sampler = j->sp; /* the first choice's draw */
    serve_disk_hit hit = {0};
    size_t from_disk = 0;
    if (disk && sv->disk) {
        const size_t have = serve_cache_peek(&sv->cache, q->prompt, q->n_prompt, &j->ad);
        from_disk = serve_disk_find(sv->disk, q->prompt, q->n_prompt, &j->ad, have, &hit);
        if (from_disk && !disk_pays(sv, from_disk, have)) {
            serve_disk_release(sv->disk, &hit);
            from_disk = 0;
            sv->n_disk_skipped++;
        }
    }
    q->n_done = 0;
    if (!from_disk) {
        q->n_done = serve_cache_get(&sv->cache, q->prompt, q->n_prompt, &j->ad, &p.sampler, &q->s, &q->mode);
        sv->n_cache_entries = sv->cache.n;
    } else {
        q->mode = sv->cache_any ? SERVE_MODE_MIXED : serve_plan_mode(q->n_prompt, nc);
    }
    const bool made = !q->s; /* a new session (a RAM hit carries its adapters) */
    if (!made) {
        sv->n_cached_tokens += q->n_done;
        j->n_cached += q->n_done;
    } else if (cera_session_create(sv->e, &p, &q->s, err)) {
        q->s = NULL;
        if (from_disk) serve_disk_release(sv->disk, &hit);
        return false;
    }
    q->slot = true;
    sv->n_seqs++;
    for (int k = 0; k < j->ad.n && made && !err->status; k++)
        cera_session_set_adapter(q->s, j->ad.adapter[k], j->ad.scale[k], err);
    /* the job's grammar, or none (a cached session may carry an earlier request's); a load
     * keeps it */
    if (!err->status)
        cera_session_set_grammar_lazy(q->s, j->gbnf, j->gbnf ? strlen(j->gbnf) : 0, j->triggers,
                                      j->n_triggers, err);
    if (err->status) {
        if (from_disk) serve_disk_release(sv->disk, &hit);
        return false;
    }
    if (from_disk && serve_disk_load(sv->disk, &hit, q->s, q->prompt, q)) {
        q->s = NULL; /* the reader's until the load ends */
        q->loading = true;
        return true;
    }
    /* the rest of the prompt in equal chunks, cut the same way whatever else runs */
    q->chunk = serve_plan_chunk(q->n_prompt - q->n_done, nc);
    return true;
}

/* Loads from the disk tier that have ended: the sequence goes on from the loaded prefix, as
 * from a RAM hit (its sampler from the request's seed), or, when the file was refused or did
 * not fit, starts again from what the RAM cache gives. */
static void collect_loads(serve_server *sv) {
    void *tag;
    cera_session *s;
    size_t n;
    double ms;
    while (serve_disk_done(sv->disk, &tag, &s, &n, &ms)) {
        serve_seq *q = tag;
        serve_job *j = q->job;
        cera_error err = {0};
        q->loading = false;
        q->s = s;
        bool ok = true;
        if (n) {
            ok = cera_session_set_sampler(s, &j->sp, &err) == CERA_OK;
            q->n_done = n;
            q->chunk = serve_plan_chunk(q->n_prompt - n, (size_t)sv->prefill_chunk);
            j->n_cached += n;
            j->n_disk += n;
            sv->n_cached_tokens += n;
            sv->disk_ms_tok =
                sv->disk_ms_tok > 0 ? 0.7 * sv->disk_ms_tok + 0.3 * ms / (double)n : ms / (double)n;
            if (sv->verbose)
                fprintf(stderr, "cera serve: %s: %zu prompt tokens loaded from the disk cache in %.1f ms\n",
                        j->id, n, ms);
        } else {
            cera_session_free(s);
            q->s = NULL;
            q->slot = false;
            sv->n_seqs--;
            ok = seq_start(sv, q, false, &err);
        }
        if (!ok) job_fail(sv, j, setup_status(err.status), err.message);
    }
}

static bool admit_one(serve_server *sv, serve_job *j) {
    cera_error err = {0};
    j->t_admit = serve_now();
    for (int i = 0; i < j->n; i++) {
        serve_seq *q = &j->seqs[i];
        for (size_t k = 0; k < q->n_prompt; k++)
            if (!hist_push(q, q->prompt[k])) {
                err.status = CERA_ERR_NO_MEMORY;
                snprintf(err.message, sizeof err.message, "out of memory");
                break;
            }
        if (err.status) break;
        if (i != q->first) { /* the same prompt: a fork of its first choice once that has read it */
            q->slot = q->fork_pending = true;
            q->n_done = q->n_prompt;
            q->mode = j->seqs[q->first].mode;
            sv->n_seqs++;
            continue;
        }
        if (!seq_start(sv, q, true, &err)) break;
    }
    if (err.status) {
        j->state = JOB_RUNNING;
        j->next = sv->running;
        sv->running = j;
        job_fail(sv, j, setup_status(err.status), err.message);
        return false;
    }
    j->state = JOB_RUNNING;
    j->next = NULL;
    serve_job **p = &sv->running; /* the running list keeps arrival order */
    while (*p) p = &(*p)->next;
    *p = j;
    pthread_cond_broadcast(&j->cv);
    return true;
}

/* The step-time model of steps with prompt chunks or of decode tokens alone; the other kind's
 * while this one has seen no step. */
static const serve_pace *pace_of(const serve_server *sv, bool prompt) {
    const serve_pace *p = &sv->pace[prompt];
    return serve_pace_empty(p) ? &sv->pace[!prompt] : p;
}

/* Drops cancelled and timed-out jobs, admits queued ones while sessions are free. */
static void reap_and_admit(serve_server *sv) {
    const double now = serve_now();
    for (serve_job *j = sv->running, *nx; j; j = nx) {
        nx = j->next;
        if (j->cancelled)
            job_done(sv, j);
        else if (now > j->deadline)
            job_fail(sv, j, 504, "the request took longer than the server's time limit (--timeout)");
    }
    int admitted = 0;
    while (sv->q_head) {
        serve_job *j = sv->q_head;
        const bool live = !j->cancelled && now <= j->deadline;
        if (live && sv->n_seqs + j->n > sv->parallel) break;
        /* to a latency target: one at a time (the step-time model learns each size as the
         * batch grows), and only while a step with it is predicted within the target */
        if (live && sv->itl_target_ms > 0 &&
            (admitted > 0 || (sv->n_seqs > 0 &&
                              serve_pace_predict(pace_of(sv, false), sv->n_seqs + j->n) > sv->itl_target_ms)))
            break;
        sv->q_head = j->next;
        if (!sv->q_head) sv->q_tail = NULL;
        sv->n_queued--;
        if (j->cancelled || now > j->deadline) {
            j->state = JOB_RUNNING;
            j->next = sv->running;
            sv->running = j;
            if (j->cancelled)
                job_done(sv, j);
            else
                job_fail(sv, j, 504, "the request waited longer than the server's time limit (--timeout)");
            continue;
        }
        if (admit_one(sv, j)) admitted++;
    }
}

/* ---- Steps ------------------------------------------------------------------------------ */

typedef struct step {
    cera_batch_item *items;
    serve_seq **seqs; /* the item's sequence */
    bool *prefill;    /* the item is a prompt chunk */
    cera_status *st;
    cera_session **samp;
    serve_seq **samp_seq;
    cera_token *out;
    serve_logprob *lp; /* the sampled tokens' log-probabilities (tok -1: not asked for) */
    /* speculative decoding: item i's [next, drafts] at spec + i * (draft_max + 1), and after the
     * eval the tokens cera_session_verify drew there too, with their log-probabilities at
     * spec_lp + the same offset; n_ver[i] how many */
    cera_token *spec;
    serve_logprob *spec_lp;
    int *n_ver;
    int n, n_samp;
    int n_tok;    /* tokens in the step */
    int n_decode; /* of them decode tokens and their drafts (the rest prompt chunks') */
} step;

/* The step's items: every decode token, then prompt chunks that fit the budget (mu held).
 * To a latency target, a prompt's chunk in a step with decodes is what room the step-time
 * model leaves within the target, keeping a token for each prompt after it (every prompt moves
 * on each step); a step of prompts alone holds up no stream and takes whole chunks. */
static void build_step(serve_server *sv, step *s) {
    s->n = 0;
    int budget = sv->budget, n_reading = 0, n_dec = 0;
    for (serve_job *j = sv->running; j; j = j->next)
        for (int i = 0; i < j->n; i++) {
            const serve_seq *q = &j->seqs[i];
            n_dec += q->s && !q->finish && q->next >= 0;
        }
    for (serve_job *j = sv->running; j; j = j->next)
        for (int i = 0; i < j->n; i++) {
            serve_seq *q = &j->seqs[i];
            if (!q->s || q->finish || q->next < 0 || budget < 1) continue;
            cera_token *buf = s->spec + (size_t)s->n * (size_t)(sv->draft_max + 1);
            buf[0] = q->next;
            /* drafts from what budget the decode tokens still to come leave */
            int cap = budget - (n_dec - s->n), k = 0;
            if (cap > sv->draft_max) cap = sv->draft_max;
            if (q->job->max_tokens > 0 && cap > q->job->max_tokens - q->n_gen)
                cap = q->job->max_tokens - q->n_gen;
            if ((sv->spec_ngram || sv->draft_e) && cap >= sv->draft_min && cap > 0) {
                if (sv->draft_e && !q->ds && cera_session_create(sv->draft_e, NULL, &q->ds, NULL) != CERA_OK)
                    q->ds = NULL; /* (then n-gram lookup alone) */
                k = cera_session_draft(q->s, q->next, sv->spec_ngram, q->ds, n_dec - 1, buf + 1, cap);
                if (k < sv->draft_min) k = 0;
            }
            s->items[s->n] = (cera_batch_item){q->s, buf, (size_t)k + 1, false, k};
            s->prefill[s->n] = false;
            s->seqs[s->n++] = q;
            budget -= k + 1;
        }
    const int n_decoding = s->n, n_decode_tok = sv->budget - budget;
    for (serve_job *j = sv->running; j; j = j->next)
        for (int i = 0; i < j->n; i++) {
            const serve_seq *q = &j->seqs[i];
            n_reading += q->s && !q->finish && q->n_done < q->n_prompt;
        }
    for (serve_job *j = sv->running; j; j = j->next)
        for (int i = 0; i < j->n; i++) {
            serve_seq *q = &j->seqs[i];
            if (!q->s || q->finish || q->n_done >= q->n_prompt) continue;
            n_reading--;
            const size_t left = q->n_prompt - q->n_done;
            size_t len = left < q->chunk ? left : q->chunk;
            if (sv->itl_target_ms > 0 && n_decoding > 0) { /* without decodes no stream waits on the step */
                const int used = sv->budget - budget + n_reading;
                const int room = serve_pace_room(pace_of(sv, true), used, (int)len, sv->itl_target_ms);
                len = room > 0 ? (size_t)room : 1;
            }
            if ((int)len > budget) continue;
            s->items[s->n] = (cera_batch_item){q->s, q->prompt + q->n_done, len, false, 0};
            s->prefill[s->n] = true;
            s->seqs[s->n++] = q;
            budget -= (int)len;
        }
    s->n_tok = sv->budget - budget;
    s->n_decode = n_decode_tok;
}

/* Evaluates the step's items; on a failure each one again alone, to find which fail
 * (a session alone gives the same logits as in a batch). s->st[i] says how each went. */
static void eval_step(serve_server *sv, step *s) {
    cera_error err = {0};
    cera_status st = cera_batch_eval(sv->e, s->items, s->n, &err);
    if (st == CERA_ERR_CONTEXT_FULL && sv->cache.n > 0) { /* the cached prefixes give their blocks back */
        pthread_mutex_lock(&sv->mu);
        serve_cache_clear(&sv->cache);
        sv->n_cache_entries = 0;
        pthread_mutex_unlock(&sv->mu);
        st = cera_batch_eval(sv->e, s->items, s->n, &err);
    }
    for (int i = 0; i < s->n; i++) s->st[i] = st;
    if (st == CERA_OK) return;
    for (int i = 0; i < s->n; i++) {
        s->st[i] = cera_batch_eval(sv->e, &s->items[i], 1, &err);
        if (s->st[i] && s->items[i].n_draft > 0) { /* no room for its drafts: the token alone */
            s->items[i].n_tokens = 1;
            s->items[i].n_draft = 0;
            s->st[i] = cera_batch_eval(sv->e, &s->items[i], 1, &err);
        }
    }
}

/* The first choice of a prompt has read it: the other choices of that prompt start as forks
 * of it (the prompt's KV shared, not evaluated again), each with its own draw, and are
 * sampled in this step. A fork that fails leaves its choice without a session (its job
 * fails under the lock). */
static void fork_choices(serve_seq *first, step *s) {
    serve_job *j = first->job;
    for (int i = first->index + 1; i < j->n && j->seqs[i].first == first->index; i++) {
        serve_seq *q = &j->seqs[i];
        if (!q->fork_pending) continue;
        q->fork_pending = false;
        cera_sampler_params sp = j->sp;
        sp.seed = j->sp.seed + (uint64_t)(i - first->index);
        if (cera_session_fork(first->s, &q->s, NULL) != CERA_OK) {
            q->s = NULL;
            continue;
        }
        if (cera_session_set_sampler(q->s, &sp, NULL) != CERA_OK) {
            cera_session_free(q->s);
            q->s = NULL;
            continue;
        }
        s->samp[s->n_samp] = q->s;
        s->samp_seq[s->n_samp++] = q;
    }
}

/* A decode item with drafts: cera_session_verify's tokens (the drafts kept, then the next
 * token) into the item's place in s->spec, with their log-probabilities when the job asks,
 * for seq_token to take in order. A failure fails the item. */
static void verify_drafts(serve_server *sv, step *s, int i) {
    serve_seq *q = s->seqs[i];
    const size_t at = (size_t)i * (size_t)(sv->draft_max + 1);
    cera_token *out = s->spec + at;
    int n = 0;
    cera_error err = {0};
    if ((s->st[i] = cera_session_verify(q->s, out, &n, &err))) return;
    s->n_ver[i] = n;
    const int k = q->job->logprobs;
    for (int m = 0; m < n; m++) {
        serve_logprob *lp = &s->spec_lp[at + (size_t)m];
        lp->tok = -1;
        const float *l = k >= 0 && out[m] >= 0 ? cera_session_logits(q->s, m) : NULL;
        if (l) serve_logprobs_of(l, cera_engine_n_vocab(sv->e), out[m], k, lp);
    }
}

void *serve_sched_main(void *arg) {
    serve_server *sv = arg;
    const int cap = sv->parallel;
    step s = {0};
    s.items = calloc((size_t)cap, sizeof *s.items);
    s.seqs = calloc((size_t)cap, sizeof *s.seqs);
    s.prefill = calloc((size_t)cap, sizeof *s.prefill);
    s.st = calloc((size_t)cap, sizeof *s.st);
    s.samp = calloc((size_t)cap, sizeof *s.samp);
    s.samp_seq = calloc((size_t)cap, sizeof *s.samp_seq);
    s.out = calloc((size_t)cap, sizeof *s.out);
    s.lp = calloc((size_t)cap, sizeof *s.lp);
    s.spec = calloc((size_t)cap * (size_t)(sv->draft_max + 1), sizeof *s.spec);
    s.spec_lp = calloc((size_t)cap * (size_t)(sv->draft_max + 1), sizeof *s.spec_lp);
    s.n_ver = calloc((size_t)cap, sizeof *s.n_ver);
    if (!s.items || !s.seqs || !s.prefill || !s.st || !s.samp || !s.samp_seq || !s.out || !s.lp || !s.spec ||
        !s.spec_lp || !s.n_ver) {
        fprintf(stderr, "cera serve: out of memory for the scheduler\n");
        abort();
    }
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        release_done(sv);
        if (sv->disk) collect_loads(sv);
        reap_and_admit(sv);
        if (sv->stopping) break;
        build_step(sv, &s);
        if (s.n == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1; /* deadlines are checked at least once a second */
            pthread_cond_timedwait(&sv->cv, &sv->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&sv->mu);
        const double t0 = serve_now();
        eval_step(sv, &s);
        s.n_samp = 0;
        for (int i = 0; i < s.n; i++) {
            serve_seq *q = s.seqs[i];
            s.n_ver[i] = 0;
            if (s.st[i]) continue;
            if (s.items[i].n_draft > 0) { /* drafts: drawn row by row, as far as they are kept */
                verify_drafts(sv, &s, i);
                continue;
            }
            if (s.prefill[i]) {
                q->n_done += s.items[i].n_tokens;
                if (q->n_done < q->n_prompt) continue;
                /* the prompt read: to the disk tier now (the sequence's end may add its answer) */
                if (q->first == q->index)
                    serve_disk_put(sv->disk, q->s, &q->job->ad, q->mode,
                                   serve_mode_extent(q->mode, q->n_prompt, q->n_prompt));
            }
            s.samp[s.n_samp] = q->s;
            s.samp_seq[s.n_samp++] = q;
            if (q->first == q->index) fork_choices(q, &s);
        }
        cera_batch_sample(s.samp, s.n_samp, s.out, NULL);
        for (int i = 0; i < s.n_samp; i++) { /* the logits stay until the next step's eval */
            const int k = s.samp_seq[i]->job->logprobs;
            const float *l = k >= 0 && s.out[i] >= 0 ? cera_session_logits(s.samp[i], -1) : NULL;
            s.lp[i].tok = -1;
            if (l) serve_logprobs_of(l, cera_engine_n_vocab(sv->e), s.out[i], k, &s.lp[i]);
        }
        const double t1 = serve_now();
        bool all_ok = true;
        for (int i = 0; i < s.n; i++) all_ok = all_ok && !s.st[i];
        if (all_ok) serve_pace_observe(&sv->pace[s.n_tok > s.n_decode], s.n_tok, (t1 - t0) * 1e3);
        pthread_mutex_lock(&sv->mu);
        sv->busy_s += t1 - t0;
        for (int i = 0; i < s.n; i++) {
            serve_seq *q = s.seqs[i];
            if (!s.st[i] || q->finish || q->job->state == JOB_DONE) continue;
            if (s.st[i] == CERA_ERR_CONTEXT_FULL && !s.prefill[i]) {
                seq_finish(sv, q, "length"); /* the KV pool is full: this sequence ends here */
            } else {
                char msg[128];
                snprintf(msg, sizeof msg, "evaluation failed: %s%s", cera_status_str(s.st[i]),
                         s.st[i] == CERA_ERR_CONTEXT_FULL ? " (the KV cache is full; --kv-size gives more)"
                                                          : "");
                job_fail(sv, q->job, s.st[i] == CERA_ERR_CONTEXT_FULL ? 503 : 500, msg);
            }
        }
        for (int i = 0; i < s.n; i++) {
            serve_job *j = s.seqs[i]->job;
            const serve_seq *f = s.seqs[i];
            if (f->index != f->first || j->state == JOB_DONE || f->n_done < f->n_prompt) continue;
            for (int k = f->index + 1; k < j->n && j->seqs[k].first == f->index; k++)
                if (j->seqs[k].slot && !j->seqs[k].s && !j->seqs[k].fork_pending && !j->seqs[k].finish) {
                    job_fail(sv, j, 500, "out of sessions or memory for the choices of n");
                    break;
                }
        }
        /* where sessions cannot always be cut back: snapshots of prompts part-way, at chunk boundaries */
        for (int i = 0; sv->cache.snapshots && i < s.n; i++) {
            serve_seq *q = s.seqs[i];
            if (s.st[i] || !s.prefill[i] || q->index != q->first || q->n_done >= q->n_prompt || !q->s ||
                q->job->state == JOB_DONE)
                continue;
            /* one a chunk: where the read passed a multiple of the chunk size (every chunk, when
             * all are equal; not every step when they follow the latency target's room) */
            if (!q->chunk || q->n_done / q->chunk == (q->n_done - s.items[i].n_tokens) / q->chunk) continue;
            serve_cache_snapshot(&sv->cache, q->s, q->hist, q->n_done, &q->job->ad, q->mode);
            sv->n_cache_entries = sv->cache.n;
        }
        for (int i = 0; i < s.n_samp; i++) {
            serve_seq *q = s.samp_seq[i];
            if (q->finish || q->job->state == JOB_DONE) continue;
            if (q->job->cancelled) continue; /* reaped at the next step */
            q->next = -1;
            seq_token(sv, q, s.out[i], s.lp[i].tok >= 0 ? &s.lp[i] : NULL);
        }
        for (int i = 0; i < s.n; i++) {
            if (s.n_ver[i] == 0) continue;
            serve_seq *q = s.seqs[i];
            const size_t at = (size_t)i * (size_t)(sv->draft_max + 1);
            sv->n_drafted += (uint64_t)s.items[i].n_draft;
            sv->n_draft_kept += (uint64_t)(s.n_ver[i] - 1);
            q->job->n_drafted += s.items[i].n_draft;
            q->job->n_draft_kept += s.n_ver[i] - 1;
            for (int m = 0; m < s.n_ver[i]; m++) {
                if (q->finish || q->job->state == JOB_DONE || q->job->cancelled) break;
                q->next = -1;
                seq_token(sv, q, s.spec[at + (size_t)m],
                          s.spec_lp[at + (size_t)m].tok >= 0 ? &s.spec_lp[at + (size_t)m] : NULL);
            }
        }
    }
    /* shutting down: every job ends */
    while (sv->running) job_fail(sv, sv->running, 503, "the server is shutting down");
    while (sv->q_head) {
        serve_job *j = sv->q_head;
        sv->q_head = j->next;
        sv->n_queued--;
        j->state = JOB_RUNNING;
        j->next = sv->running;
        sv->running = j;
        job_fail(sv, j, 503, "the server is shutting down");
    }
    sv->q_tail = NULL;
    release_done(sv);
    serve_cache_free(&sv->cache);
    sv->n_cache_entries = 0;
    pthread_mutex_unlock(&sv->mu);
    free(s.items);
    free(s.seqs);
    free(s.prefill);
    free(s.st);
    free(s.samp);
    free(s.samp_seq);
    free(s.out);
    free(s.lp);
    free(s.spec);
    free(s.spec_lp);
    free(s.n_ver);
    return NULL;
}

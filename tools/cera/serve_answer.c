/*
 * serve_answer.c — the answers of `cera serve` to a generating request: waiting on its job
 * (the client's socket watched meanwhile: a hang-up cancels the job), the whole OpenAI
 * object of a finished job, and the server-sent events of a streamed one (the role first,
 * text deltas as the scheduler publishes them, each choice's finish reason, the usage chunk
 * when asked, "data: [DONE]"), produced by libmicrohttpd's content callback over chunked
 * encoding.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

#include "serve.h"

/* A copy of s[0..n) with invalid UTF-8 replaced by U+FFFD (model output is bytes). */
char *serve_clean_utf8(const char *s, size_t n) {
    char *o = malloc(3 * n + 1);
    if (!o) return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t k = 1;
        while (k <= 4 && i + k <= n && !serve_utf8_valid(s + i, k)) k++;
        if (k <= 4 && i + k <= n) {
            memcpy(o + w, s + i, k);
            w += k;
            i += k;
        } else {
            memcpy(o + w, "\xef\xbf\xbd", 3);
            w += 3;
            i++;
        }
    }
    o[w] = 0;
    return o;
}

cJSON *serve_add_text(cJSON *obj, const char *key, const char *s, size_t n) {
    char *t = serve_clean_utf8(s, n);
    cJSON *r = cJSON_AddStringToObject(obj, key, t ? t : "");
    free(t);
    return r;
}

/* ---- Waiting on a job ----------------------------------------------------------------- */

static bool peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {ci->connect_fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static bool job_has_news(const serve_job *j) {
    if (j->state == JOB_DONE || j->err_status) return true;
    for (int i = 0; i < j->n; i++) {
        const serve_seq *q = &j->seqs[i];
        if (q->ready > q->sent || (q->finish && !q->finish_sent)) return true;
    }
    return false;
}
bool serve_job_admitted(const serve_job *j) { return j->state != JOB_QUEUED; }
bool serve_job_over(const serve_job *j) { return j->state == JOB_DONE; }

/* Waits (mu held) until pred(j); false when the client hung up meanwhile (the job is then
 * cancelled). */
bool serve_wait_job(serve_server *sv, serve_job *j, struct MHD_Connection *c,
                    bool (*pred)(const serve_job *)) {
    while (!pred(j)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&j->cv, &sv->mu, &ts);
        if (!pred(j) && peer_gone(c)) {
            j->cancelled = true;
            pthread_cond_signal(&sv->cv);
            return false;
        }
    }
    return true;
}

void serve_cancel_and_release(serve_server *sv, serve_job *j) {
    pthread_mutex_lock(&sv->mu);
    if (j->state != JOB_DONE) {
        j->cancelled = true;
        pthread_cond_signal(&sv->cv);
    }
    serve_job_release_locked(sv, j);
    pthread_mutex_unlock(&sv->mu);
}

/* ---- Answers of a job ------------------------------------------------------------------- */

/* A token's text (its bytes; cleaned to valid UTF-8 for "token") in OpenAI's chat entry. */
static cJSON *token_entry(serve_server *sv, cera_token t, float lp) {
    char buf[256];
    int n = cera_token_to_piece(sv->e, t, buf, sizeof buf, false);
    if (n < 0 || (size_t)n > sizeof buf) n = 0;
    cJSON *o = cJSON_CreateObject();
    serve_add_text(o, "token", buf, (size_t)n);
    cJSON_AddNumberToObject(o, "logprob", lp);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)buf[i]));
    return o;
}

/* The "logprobs" of a choice for its entries [from, to): chat's {"content": [...]} or the
 * legacy completions' {tokens, token_logprobs, top_logprobs, text_offset}. */
static cJSON *logprobs_json(serve_server *sv, const serve_job *j, const serve_seq *q, size_t from,
                            size_t to) {
    cJSON *o = cJSON_CreateObject();
    if (j->kind == SERVE_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (size_t i = from; i < to; i++) {
            const serve_logprob *e = &q->lp[i];
            cJSON *x = token_entry(sv, e->tok, e->lp), *top = cJSON_AddArrayToObject(x, "top_logprobs");
            for (int k = 0; k < e->n_top; k++)
                cJSON_AddItemToArray(top, token_entry(sv, e->top[k], e->top_lp[k]));
            cJSON_AddItemToArray(content, x);
        }
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (size_t i = from; i < to; i++) {
        const serve_logprob *e = &q->lp[i];
        cJSON *x = token_entry(sv, e->tok, e->lp);
        cJSON_AddItemToArray(toks, cJSON_DetachItemFromObjectCaseSensitive(x, "token"));
        cJSON_Delete(x);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(e->lp));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < e->n_top; k++) {
            x = token_entry(sv, e->top[k], e->top_lp[k]);
            cJSON_AddNumberToObject(top, cJSON_GetObjectItemCaseSensitive(x, "token")->valuestring,
                                    e->top_lp[k]);
            cJSON_Delete(x);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)e->off));
    }
    return o;
}

/* A choice's "logprobs" set to its entries [from, to) when the job asks for them. */
static void set_logprobs(serve_server *sv, const serve_job *j, const serve_seq *q, cJSON *ch, size_t from,
                         size_t to) {
    if (j->logprobs < 0) return;
    cJSON_ReplaceItemInObjectCaseSensitive(ch, "logprobs", logprobs_json(sv, j, q, from, to));
}

static void add_usage(cJSON *o, const serve_job *j) {
    int gen = 0;
    for (int i = 0; i < j->n; i++) gen += j->seqs[i].n_gen;
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", (double)j->n_prompt + gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)j->n_cached);
}

/* llama-server's "timings" beside the usage: the prompt part (from admission to the first
 * token, the tokens the caches did not give), the generated part (from the first token to the
 * last, over the tokens after the first) and speculative decoding's drafts. */
static void add_timings(cJSON *o, const serve_job *j) {
    int gen = 0;
    for (int i = 0; i < j->n; i++) gen += j->seqs[i].n_gen;
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    const double p_ms = j->t_first > 0 ? (j->t_first - j->t_admit) * 1e3 : 0;
    const double g_ms = j->t_first > 0 ? (j->t_last - j->t_first) * 1e3 : 0;
    const double p_n = (double)(j->n_prompt - j->n_cached);
    cJSON_AddNumberToObject(t, "cache_n", (double)j->n_cached);
    cJSON_AddNumberToObject(t, "prompt_n", p_n);
    cJSON_AddNumberToObject(t, "prompt_ms", p_ms);
    cJSON_AddNumberToObject(t, "prompt_per_second", p_ms > 0 ? p_n * 1e3 / p_ms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", gen);
    cJSON_AddNumberToObject(t, "predicted_ms", g_ms);
    cJSON_AddNumberToObject(t, "predicted_per_second", g_ms > 0 && gen > 1 ? (gen - 1) * 1e3 / g_ms : 0);
    if (j->n_drafted > 0) {
        cJSON_AddNumberToObject(t, "draft_n", j->n_drafted);
        cJSON_AddNumberToObject(t, "draft_n_accepted", j->n_draft_kept);
    }
}

static cJSON *answer_head(const serve_job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->model);
    return o;
}

/* The whole answer of a finished job (mu held). */
cJSON *serve_answer_full(serve_server *sv, serve_job *j) {
    const bool chat = j->kind == SERVE_CHAT;
    cJSON *o = answer_head(j, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < j->n; i++) {
        const serve_seq *q = &j->seqs[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        const char *finish = q->finish ? q->finish : "stop";
        if (chat) {
            int n_calls = 0;
            char *t = serve_clean_utf8(q->text ? q->text : "", q->len);
            cJSON *m = serve_chat_message(j->parse_format, j->parse_tools, t ? t : "", t ? strlen(t) : 0,
                                          j->id + 9, &n_calls);
            free(t);
            cJSON_AddItemToObject(ch, "message", m ? m : cJSON_CreateNull());
            if (n_calls) finish = "tool_calls";
        } else {
            serve_add_text(ch, "text", q->text ? q->text : "", q->len);
        }
        cJSON_AddNullToObject(ch, "logprobs");
        set_logprobs(sv, j, q, ch, 0, q->n_lp);
        cJSON_AddStringToObject(ch, "finish_reason", finish);
        cJSON_AddItemToArray(choices, ch);
    }
    add_usage(o, j);
    add_timings(o, j);
    return o;
}

typedef struct stream_ctx {
    serve_server *sv;
    serve_job *j;
    struct MHD_Connection *c;
    char *buf;
    size_t len, off, cap;
    bool role_sent, end;
} stream_ctx;

static void emit(stream_ctx *s, cJSON *chunk) {
    char *t = cJSON_PrintUnformatted(chunk);
    cJSON_Delete(chunk);
    if (!t) return;
    const size_t n = strlen(t);
    if (s->len + n + 16 > s->cap) {
        const size_t cap = (s->len + n + 16) * 2;
        char *b = realloc(s->buf, cap);
        if (!b) {
            free(t);
            return;
        }
        s->buf = b;
        s->cap = cap;
    }
    s->len += (size_t)sprintf(s->buf + s->len, "data: %s\n\n", t);
    free(t);
}

static void emit_raw(stream_ctx *s, const char *text) {
    const size_t n = strlen(text);
    if (s->len + n > s->cap) {
        char *b = realloc(s->buf, (s->len + n) * 2);
        if (!b) return;
        s->buf = b;
        s->cap = (s->len + n) * 2;
    }
    memcpy(s->buf + s->len, text, n);
    s->len += n;
}

/* One chunk of choice i: a delta (chat) or a text (completion), and a finish reason. */
static cJSON *chunk_of(const serve_job *j, int i, cJSON **delta_or_choice, const char *finish) {
    const bool chat = j->kind == SERVE_CHAT;
    cJSON *o = answer_head(j, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", i);
    if (chat)
        *delta_or_choice = cJSON_AddObjectToObject(ch, "delta");
    else
        *delta_or_choice = ch;
    if (!chat && finish) cJSON_AddStringToObject(ch, "text", "");
    cJSON_AddNullToObject(ch, "logprobs");
    if (finish)
        cJSON_AddStringToObject(ch, "finish_reason", finish);
    else
        cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    return o;
}

/* The chunk o carries the log-probabilities of the tokens not yet sent whose text starts
 * before byte upto. */
static void stream_logprobs(stream_ctx *s, serve_seq *q, cJSON *o, size_t upto) {
    size_t to = q->lp_sent;
    while (to < q->n_lp && q->lp[to].off < upto) to++;
    if (to == q->lp_sent) return;
    set_logprobs(s->sv, s->j, q, cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0),
                 q->lp_sent, to);
    q->lp_sent = to;
}

/* The events for what the job has done since the last call (mu held). */
static void stream_events(stream_ctx *s) {
    serve_job *j = s->j;
    const bool chat = j->kind == SERVE_CHAT;
    cJSON *d;
    if (!s->role_sent && chat && !j->err_status)
        for (int i = 0; i < j->n; i++) {
            cJSON *o = chunk_of(j, i, &d, NULL);
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
            emit(s, o);
        }
    s->role_sent = true;
    if (j->err_status) {
        char *e = serve_error_json(j->err_status, j->err, NULL);
        if (e) {
            emit_raw(s, "data: ");
            emit_raw(s, e);
            emit_raw(s, "\n\n");
        }
        free(e);
        emit_raw(s, "data: [DONE]\n\n");
        s->end = true;
        return;
    }
    for (int i = 0; i < j->n; i++) {
        serve_seq *q = &j->seqs[i];
        if (j->parse_tools) q->sent = q->ready; /* the reply is split and sent once it is whole */
        if (q->ready > q->sent) {
            cJSON *o = chunk_of(j, i, &d, NULL);
            serve_add_text(d, chat ? "content" : "text", q->text + q->sent, q->ready - q->sent);
            stream_logprobs(s, q, o, q->ready);
            emit(s, o);
            q->sent = q->ready;
        }
        if (q->finish && !q->finish_sent) {
            const char *finish = q->finish;
            if (j->parse_tools) { /* the reply is split once it is whole */
                int n_calls = 0;
                char *t = serve_clean_utf8(q->text ? q->text : "", q->len);
                cJSON *m = serve_chat_message(j->parse_format, true, t ? t : "", t ? strlen(t) : 0, j->id + 9,
                                              &n_calls);
                free(t);
                cJSON *o = chunk_of(j, i, &d, NULL);
                const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
                if (cJSON_IsString(content) && content->valuestring[0])
                    cJSON_AddStringToObject(d, "content", content->valuestring);
                const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
                if (cJSON_IsString(rc)) cJSON_AddStringToObject(d, "reasoning_content", rc->valuestring);
                cJSON *calls = cJSON_DetachItemFromObjectCaseSensitive(m, "tool_calls");
                if (calls) {
                    int k = 0;
                    cJSON *call;
                    cJSON_ArrayForEach(call, calls) cJSON_AddNumberToObject(call, "index", k++);
                    cJSON_AddItemToObject(d, "tool_calls", calls);
                }
                cJSON_Delete(m);
                stream_logprobs(s, q, o, (size_t)-1);
                if (d->child)
                    emit(s, o);
                else
                    cJSON_Delete(o);
                q->sent = q->len;
                if (n_calls) finish = "tool_calls";
            }
            cJSON *o = chunk_of(j, i, &d, finish);
            stream_logprobs(s, q, o, (size_t)-1);
            emit(s, o);
            q->finish_sent = true;
        }
    }
    if (j->state == JOB_DONE) {
        if (j->include_usage) {
            cJSON *o = answer_head(j, chat ? "chat.completion.chunk" : "text_completion");
            cJSON_AddArrayToObject(o, "choices");
            add_usage(o, j);
            add_timings(o, j);
            emit(s, o);
        }
        emit_raw(s, "data: [DONE]\n\n");
        s->end = true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *s = cls;
    (void)pos;
    /* never 0 (MHD would call again at once): wait until there is something to send */
    while (s->off == s->len) {
        if (s->end) return MHD_CONTENT_READER_END_OF_STREAM;
        s->off = s->len = 0;
        pthread_mutex_lock(&s->sv->mu);
        const bool ok = serve_wait_job(s->sv, s->j, s->c, job_has_news);
        if (ok) stream_events(s);
        pthread_mutex_unlock(&s->sv->mu);
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    const size_t n = s->len - s->off < max ? s->len - s->off : max;
    memcpy(buf, s->buf + s->off, n);
    s->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    serve_cancel_and_release(s->sv, s->j);
    free(s->buf);
    free(s);
}

struct MHD_Response *serve_stream_response(serve_server *sv, serve_job *j, struct MHD_Connection *c) {
    stream_ctx *s = calloc(1, sizeof *s);
    if (!s) {
        serve_cancel_and_release(sv, j);
        return NULL;
    }
    *s = (stream_ctx){.sv = sv, .j = j, .c = c};
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, s, stream_free);
    if (!resp) {
        stream_free(s);
        return NULL;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    return resp;
}

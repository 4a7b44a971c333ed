/*
 * serve_http.c — the HTTP side of `cera serve` (libmicrohttpd, one thread per connection,
 * HTTP/1.1 keep-alive): routes, the API key, body limits, the endpoints other than
 * generation, and the turning of a generating request into a job.
 *
 * A generating request is parsed (serve_api.c), rendered and tokenized here, then
 * submitted as a job to the scheduler (serve_sched.c); the connection's thread waits on
 * the job and answers it, whole or as server-sent events (serve_answer.c).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include "serve.h"

enum {
    EP_CHAT,
    EP_COMPLETION,
    EP_MODELS,
    EP_HEALTH,
    EP_METRICS,
    EP_TOKENIZE,
    EP_DETOKENIZE,
    EP_TEMPLATE,
    EP_LORA,
    EP_EMBED,
    EP_COUNT
};
static const char *const ep_names[EP_COUNT] = {
    "chat_completions", "completions", "models",         "health",        "metrics",
    "tokenize",         "detokenize",  "apply_template", "lora_adapters", "embeddings"};

typedef struct route {
    const char *path;
    const char *method;
    int ep;
} route;

static const route routes[] = {
    {"/v1/chat/completions", "POST", EP_CHAT},
    {"/chat/completions", "POST", EP_CHAT},
    {"/v1/completions", "POST", EP_COMPLETION},
    {"/completions", "POST", EP_COMPLETION},
    {"/v1/models", "GET", EP_MODELS},
    {"/models", "GET", EP_MODELS},
    {"/health", "GET", EP_HEALTH},
    {"/v1/health", "GET", EP_HEALTH},
    {"/metrics", "GET", EP_METRICS},
    {"/tokenize", "POST", EP_TOKENIZE},
    {"/detokenize", "POST", EP_DETOKENIZE},
    {"/apply-template", "POST", EP_TEMPLATE},
    {"/lora-adapters", "GET", EP_LORA},
    {"/lora-adapters", "POST", EP_LORA},
    {"/v1/embeddings", "POST", EP_EMBED},
    {"/embeddings", "POST", EP_EMBED},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

/* Bodies past max_body are read and dropped (so that the client reads the 413) up to this
 * much; past it the connection is closed. */
#define DISCARD_MAX ((size_t)64 << 20)

typedef struct conn_req {
    char *body;
    size_t len, cap;
    bool too_big;
    size_t discarded;
} conn_req;

/* ---- Answers ------------------------------------------------------------------------ */

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, char *text, const char *type) {
    if (!text) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    const enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return send_text(c, status, s, "application/json");
}

static enum MHD_Result send_error(serve_server *sv, struct MHD_Connection *c, unsigned status,
                                  const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static enum MHD_Result send_error(serve_server *sv, struct MHD_Connection *c, unsigned status,
                                  const char *param, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&sv->mu);
    sv->n_errors++;
    pthread_mutex_unlock(&sv->mu);
    return send_text(c, status, serve_error_json((int)status, msg, param), "application/json");
}

/* ---- Generating requests ------------------------------------------------------------------ */

/* Which adapters a request's "model" and "lora" choose; 404 for an unknown model. */
static int choose_model(serve_server *sv, const serve_req *r, serve_job *j, char *msg, size_t cap) {
    int ad = -1;
    if (r->model && strcmp(r->model, sv->model_id)) {
        for (int i = 0; i < sv->n_ad; i++)
            if (!strcmp(r->model, sv->ad[i].name)) ad = i;
        if (ad < 0) {
            snprintf(msg, cap, "the model '%.100s' does not exist (GET /v1/models lists them)", r->model);
            return 404;
        }
    }
    snprintf(j->model, sizeof j->model, "%s", ad >= 0 ? sv->ad[ad].name : sv->model_id);
    if (r->has_lora) {
        for (int i = 0; i < r->n_lora; i++) {
            int k = 0;
            while (k < j->ad.n && j->ad.adapter[k] != sv->ad[r->lora[i].id].adapter) k++;
            if (k == j->ad.n) j->ad.adapter[j->ad.n++] = sv->ad[r->lora[i].id].adapter;
            j->ad.scale[k] = r->lora[i].scale;
        }
    } else if (ad >= 0) {
        j->ad.adapter[0] = sv->ad[ad].adapter;
        j->ad.scale[0] = 1;
        j->ad.n = 1;
    } else {
        pthread_mutex_lock(&sv->mu);
        for (int i = 0; i < sv->n_ad; i++)
            if (sv->ad_scale[i] != 0) {
                j->ad.adapter[j->ad.n] = sv->ad[i].adapter;
                j->ad.scale[j->ad.n++] = sv->ad_scale[i];
            }
        pthread_mutex_unlock(&sv->mu);
    }
    return 0;
}

/* The prompt of a chat request rendered by the template, with its tools even for tool_choice
 * "none" (a template may expect them once they are given; the reply is then not parsed). */
static int render_chat(serve_server *sv, const serve_req *r, char **text, size_t *len, char *msg,
                       size_t cap) {
    cera_chat_params cp = cera_chat_default_params();
    cp.tools = r->tools;
    cp.extra = r->extra;
    cera_error err = {0};
    if (cera_chat_render(sv->tmpl, r->msgs, (size_t)r->n_msgs, &cp, text, len, &err)) {
        snprintf(msg, cap, "the chat template failed: %s", err.message);
        return err.status == CERA_ERR_NO_MEMORY ? 500 : 400;
    }
    return 0;
}

static int prompt_tokens(serve_server *sv, const serve_req *r, serve_job *j, char *msg, size_t cap) {
    cera_error err = {0};
    if (r->kind == SERVE_CHAT) {
        char *text = NULL;
        size_t len = 0;
        int st = render_chat(sv, r, &text, &len, msg, cap);
        if (st) return st;
        const cera_status cs = cera_chat_tokenize(sv->e, text, len, &j->prompt, &j->n_prompt, &err);
        cera_free(text);
        if (cs) {
            snprintf(msg, cap, "tokenizing the prompt failed: %s", err.message);
            return 500;
        }
        /* cera_free'd memory is malloc's: job_free frees it with free */
        j->n_prompts = 1;
        j->prompt_off[1] = j->n_prompt;
    } else {
        /* the prompts one after the other: at most a text's bytes plus the special tokens each */
        size_t total = 0;
        for (int p = 0; p < r->n_prompts; p++)
            total += r->prompt_text[p] ? strlen(r->prompt_text[p]) + 8 : r->n_prompt_ids[p];
        if (!(j->prompt = malloc((total ? total : 1) * sizeof *j->prompt))) return 500;
        for (int p = 0; p < r->n_prompts; p++) {
            cera_token *at = j->prompt + j->n_prompt;
            size_t n = r->n_prompt_ids[p];
            if (r->prompt_text[p]) {
                const size_t len = strlen(r->prompt_text[p]);
                if (cera_tokenize(sv->e, r->prompt_text[p], len, true, true, at, len + 8, &n, &err)) {
                    snprintf(msg, cap, "tokenizing the prompt failed: %s", err.message);
                    return 400;
                }
            } else {
                memcpy(at, r->prompt_ids[p], n * sizeof *at);
            }
            j->n_prompt += n;
            j->prompt_off[p + 1] = j->n_prompt;
        }
        j->n_prompts = r->n_prompts;
    }
    const int n_ctx = cera_engine_n_ctx(sv->e);
    for (int p = 0; p < j->n_prompts; p++) {
        const size_t n = j->prompt_off[p + 1] - j->prompt_off[p];
        if (n == 0) {
            snprintf(msg, cap, "the prompt is empty");
            return 400;
        }
        if (n >= (size_t)n_ctx) {
            snprintf(msg, cap, "the prompt has %zu tokens; the context holds %d (-c)", n, n_ctx);
            return 400;
        }
    }
    /* n choices for each prompt, prompt after prompt */
    const int per = j->n / j->n_prompts;
    for (int i = 0; i < j->n; i++) {
        serve_seq *q = &j->seqs[i];
        const int p = i / per;
        q->first = p * per;
        q->prompt = j->prompt + j->prompt_off[p];
        q->n_prompt = j->prompt_off[p + 1] - j->prompt_off[p];
    }
    return 0;
}

/* The grammar of a request's replies (response_format's, or the tools' calls: lazy for
 * tool_choice auto, from the first token for required or a named function) and the format
 * its tool calls are parsed with. */
static int reply_grammar(serve_server *sv, const serve_req *r, serve_job *j, char *msg, size_t cap) {
    j->parse_format = cera_chat_template_format(sv->tmpl);
    const bool tools = r->kind == SERVE_CHAT && r->tools && !r->tool_choice_none;
    if (r->tool_required && !r->tools) {
        snprintf(msg, cap, "tool_choice \"required\" or a function needs tools");
        return 400;
    }
    if (r->gbnf && tools) {
        snprintf(msg, cap, "response_format together with tools is not supported yet");
        return 400;
    }
    if (r->gbnf) return (j->gbnf = strdup(r->gbnf)) ? 0 : 500;
    if (!tools) return 0;
    cera_chat_grammar g;
    cera_error err = {0};
    if (cera_chat_tool_grammar(sv->tmpl, r->tools,
                               r->tool_required ? CERA_TOOL_CHOICE_REQUIRED : CERA_TOOL_CHOICE_AUTO,
                               r->tool_name, r->parallel_tool_calls, &g, &err)) {
        snprintf(msg, cap, "tools: %s", err.message);
        return err.status == CERA_ERR_NO_MEMORY ? 500 : 400;
    }
    j->gbnf = g.gbnf;
    j->triggers = g.triggers;
    j->n_triggers = g.n_triggers;
    j->parse_format = g.format;
    j->parse_tools = j->parse_format != CERA_CHAT_CONTENT;
    return 0;
}

static serve_job *make_job(serve_server *sv, const serve_req *r, int *status, char *msg, size_t cap) {
    serve_job *j = serve_job_new(r->n * (r->kind == SERVE_COMPLETION ? r->n_prompts : 1));
    if (!j) {
        *status = 500;
        snprintf(msg, cap, "out of memory");
        return NULL;
    }
    j->kind = r->kind;
    if ((*status = choose_model(sv, r, j, msg, cap)) || (*status = reply_grammar(sv, r, j, msg, cap)) ||
        (*status = prompt_tokens(sv, r, j, msg, cap))) {
        pthread_mutex_lock(&sv->mu);
        serve_job_release_locked(sv, j);
        pthread_mutex_unlock(&sv->mu);
        return NULL;
    }
    j->sp = r->sp;
    if (r->n_bias) {
        j->bias = malloc((size_t)r->n_bias * sizeof *j->bias);
        if (j->bias) memcpy(j->bias, r->bias, (size_t)r->n_bias * sizeof *j->bias);
        j->sp.logit_bias = j->bias;
        j->sp.n_logit_bias = j->bias ? r->n_bias : 0;
    }
    for (int i = 0; i < r->n_stop; i++)
        if ((j->stop[j->n_stop] = strdup(r->stop[i]))) j->n_stop++;
    j->max_tokens = r->max_tokens;
    j->ignore_eos = r->ignore_eos;
    j->logprobs = r->logprobs;
    j->stream = r->stream;
    j->include_usage = r->include_usage;
    j->created = (long)time(NULL);
    pthread_mutex_lock(&sv->mu);
    const uint64_t id = ++sv->next_id;
    sv->rng = sv->rng * 6364136223846793005ull + 1442695040888963407ull;
    if (!r->has_seed) j->sp.seed = (sv->rng >> 33) ^ id;
    const uint32_t tag = (uint32_t)(sv->rng >> 40);
    pthread_mutex_unlock(&sv->mu);
    snprintf(j->id, sizeof j->id, "%s-%06x%llx", r->kind == SERVE_CHAT ? "chatcmpl" : "cmpl", tag & 0xffffff,
             (unsigned long long)id);
    j->deadline = serve_now() + sv->timeout_s;
    return j;
}

static enum MHD_Result handle_generate(serve_server *sv, struct MHD_Connection *c, serve_kind kind,
                                       const conn_req *rq) {
    const double t_recv = serve_now();
    serve_req r;
    char msg[600], param[64];
    int st = serve_req_parse(kind, rq->body ? rq->body : "", rq->len, &sv->sp_default, &sv->lim, &r, msg,
                             sizeof msg, param, sizeof param);
    if (st) return send_error(sv, c, (unsigned)st, param, "%s", msg);
    const int choices = r.n * (kind == SERVE_COMPLETION ? r.n_prompts : 1);
    if (choices > sv->parallel) {
        serve_req_free(&r);
        return send_error(sv, c, 400, "n", "n times the prompts (%d) is above the server's --parallel %d",
                          choices, sv->parallel);
    }
    serve_job *j = make_job(sv, &r, &st, msg, sizeof msg);
    serve_req_free(&r);
    if (!j) return send_error(sv, c, (unsigned)st, NULL, "%s", msg);
    j->t_recv = t_recv;
    pthread_mutex_lock(&sv->mu);
    sv->n_prompt_tokens += j->n_prompt;
    pthread_mutex_unlock(&sv->mu);
    if (serve_submit(sv, j)) {
        pthread_mutex_lock(&sv->mu);
        serve_job_release_locked(sv, j);
        pthread_mutex_unlock(&sv->mu);
        return send_error(sv, c, 503, NULL, "the server is busy: its queue is full (--max-queue); try again");
    }
    /* the work may outlast the idle timeout: off until this request is answered */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    pthread_mutex_lock(&sv->mu);
    const bool ok = serve_wait_job(sv, j, c, j->stream ? serve_job_admitted : serve_job_over);
    if (ok && j->err_status) {
        const int es = j->err_status;
        char em[256];
        snprintf(em, sizeof em, "%s", j->err);
        serve_job_release_locked(sv, j);
        pthread_mutex_unlock(&sv->mu);
        return send_text(c, (unsigned)es, serve_error_json(es, em, NULL), "application/json");
    }
    if (!ok) {
        serve_job_release_locked(sv, j);
        pthread_mutex_unlock(&sv->mu);
        return MHD_NO; /* the client is gone: close */
    }
    if (!j->stream) {
        cJSON *o = serve_answer_full(sv, j);
        serve_job_release_locked(sv, j);
        pthread_mutex_unlock(&sv->mu);
        return send_json(c, 200, o);
    }
    pthread_mutex_unlock(&sv->mu);
    struct MHD_Response *resp = serve_stream_response(sv, j, c);
    if (!resp) return MHD_NO;
    const enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- Other endpoints ------------------------------------------------------------------------ */

static cJSON *parse_body_as(serve_server *sv, const conn_req *rq, bool array, char *msg, size_t cap) {
    if (!rq->body || !serve_utf8_valid(rq->body, rq->len)) {
        snprintf(msg, cap, "the body is not valid UTF-8 JSON");
        return NULL;
    }
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < rq->len; i++) {
        const char ch = rq->body[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = false;
        } else if (ch == '"') {
            in_str = true;
        } else if (ch == '[' || ch == '{') {
            if (++depth > max) max = depth;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    cJSON *j = max <= sv->lim.max_depth ? cJSON_ParseWithLength(rq->body, rq->len) : NULL;
    if (array ? !cJSON_IsArray(j) : !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        snprintf(msg, cap, "the body is not a JSON %s", array ? "array" : "object");
        return NULL;
    }
    return j;
}

static cJSON *parse_body(serve_server *sv, const conn_req *rq, char *msg, size_t cap) {
    return parse_body_as(sv, rq, false, msg, cap);
}

static enum MHD_Result handle_tokenize(serve_server *sv, struct MHD_Connection *c, const conn_req *rq) {
    char msg[200];
    cJSON *b = parse_body(sv, rq, msg, sizeof msg);
    if (!b) return send_error(sv, c, 400, NULL, "%s", msg);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(b, "content");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(b, "add_special");
    const cJSON *parse = cJSON_GetObjectItemCaseSensitive(b, "parse_special");
    const bool pieces = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "with_pieces"));
    if (!cJSON_IsString(content)) {
        cJSON_Delete(b);
        return send_error(sv, c, 400, "content", "'content' must be a string");
    }
    const size_t len = strlen(content->valuestring), cap = len + 8;
    cera_token *t = malloc(cap * sizeof *t);
    size_t n = 0;
    cera_error err = {0};
    if (!t || cera_tokenize(sv->e, content->valuestring, len, cJSON_IsTrue(add), !cJSON_IsFalse(parse), t,
                            cap, &n, &err)) {
        free(t);
        cJSON_Delete(b);
        return send_error(sv, c, 400, NULL, "tokenizing failed: %s", err.message);
    }
    cJSON_Delete(b);
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++) {
        if (!pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(t[i]));
            continue;
        }
        char buf[256];
        int pl = cera_token_to_piece(sv->e, t[i], buf, sizeof buf, true);
        if (pl < 0 || pl > (int)sizeof buf) pl = 0;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "id", t[i]);
        serve_add_text(p, "piece", buf, (size_t)pl);
        cJSON_AddItemToArray(arr, p);
    }
    free(t);
    return send_json(c, 200, o);
}

static enum MHD_Result handle_detokenize(serve_server *sv, struct MHD_Connection *c, const conn_req *rq) {
    char msg[200];
    cJSON *b = parse_body(sv, rq, msg, sizeof msg);
    if (!b) return send_error(sv, c, 400, NULL, "%s", msg);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(b, "tokens"), *t;
    if (!cJSON_IsArray(toks)) {
        cJSON_Delete(b);
        return send_error(sv, c, 400, "tokens", "'tokens' must be an array of token ids");
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    const int n_vocab = cera_engine_n_vocab(sv->e);
    cJSON_ArrayForEach(t, toks) {
        if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble >= n_vocab ||
            t->valuedouble != (double)(int)t->valuedouble) {
            free(text);
            cJSON_Delete(b);
            return send_error(sv, c, 400, "tokens", "'tokens' holds something that is not a token id");
        }
        char buf[256];
        int pl = cera_token_to_piece(sv->e, (cera_token)t->valuedouble, buf, sizeof buf, false);
        if (pl < 0 || pl > (int)sizeof buf) pl = 0;
        if (len + (size_t)pl + 1 > cap) {
            cap = (len + (size_t)pl + 1) * 2;
            char *nt = realloc(text, cap);
            if (!nt) break;
            text = nt;
        }
        memcpy(text + len, buf, (size_t)pl);
        len += (size_t)pl;
    }
    cJSON_Delete(b);
    cJSON *o = cJSON_CreateObject();
    serve_add_text(o, "content", text ? text : "", len);
    free(text);
    return send_json(c, 200, o);
}

static enum MHD_Result handle_template(serve_server *sv, struct MHD_Connection *c, const conn_req *rq) {
    serve_req r;
    char msg[600], param[64];
    int st = serve_req_parse(SERVE_CHAT, rq->body ? rq->body : "", rq->len, &sv->sp_default, &sv->lim, &r,
                             msg, sizeof msg, param, sizeof param);
    if (st) return send_error(sv, c, (unsigned)st, param, "%s", msg);
    char *text = NULL;
    size_t len = 0;
    st = render_chat(sv, &r, &text, &len, msg, sizeof msg);
    serve_req_free(&r);
    if (st) return send_error(sv, c, (unsigned)st, NULL, "%s", msg);
    cJSON *o = cJSON_CreateObject();
    serve_add_text(o, "prompt", text, len);
    cera_free(text);
    return send_json(c, 200, o);
}

static enum MHD_Result handle_models(serve_server *sv, struct MHD_Connection *c) {
    cJSON *o = cJSON_CreateObject(), *data;
    cJSON_AddStringToObject(o, "object", "list");
    data = cJSON_AddArrayToObject(o, "data");
    for (int i = -1; i < sv->n_ad; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", i < 0 ? sv->model_id : sv->ad[i].name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "cera");
        if (i >= 0) cJSON_AddStringToObject(m, "parent", sv->model_id);
        cJSON_AddItemToArray(data, m);
    }
    return send_json(c, 200, o);
}

/* GET: the adapters with their global scales; POST (llama-server's): sets those scales, the
 * adapters of requests to the base model that name none ("lora"); adapters left out get 0. */
static enum MHD_Result handle_lora(serve_server *sv, struct MHD_Connection *c, const char *method,
                                   const conn_req *rq) {
    if (!strcmp(method, "POST")) {
        char msg[300];
        cJSON *b = parse_body_as(sv, rq, true, msg, sizeof msg);
        if (!b) return send_error(sv, c, 400, NULL, "%s", msg);
        serve_lora_ref refs[SERVE_LORA_MAX];
        int n = 0;
        const int st = serve_lora_list_parse(b, &sv->lim, refs, &n, msg, sizeof msg);
        cJSON_Delete(b);
        if (st) return send_error(sv, c, (unsigned)st, "lora", "%s", msg);
        pthread_mutex_lock(&sv->mu);
        for (int i = 0; i < sv->n_ad; i++) sv->ad_scale[i] = 0;
        for (int i = 0; i < n; i++) sv->ad_scale[refs[i].id] = refs[i].scale;
        pthread_mutex_unlock(&sv->mu);
        return send_text(c, 200, strdup("{\"success\":true}"), "application/json");
    }
    cJSON *a = cJSON_CreateArray();
    pthread_mutex_lock(&sv->mu);
    for (int i = 0; i < sv->n_ad; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddNumberToObject(m, "id", i);
        cJSON_AddStringToObject(m, "name", sv->ad[i].name);
        cJSON_AddNumberToObject(m, "scale", sv->ad_scale[i]);
        cJSON_AddItemToArray(a, m);
    }
    pthread_mutex_unlock(&sv->mu);
    return send_json(c, 200, a);
}

static enum MHD_Result handle_metrics(serve_server *sv, struct MHD_Connection *c) {
    int used = 0, total = 0;
    cera_engine_kv_blocks(sv->e, &used, &total);
    size_t cap = 16384, n = 0;
    char *t = malloc(cap);
    if (!t) return MHD_NO;
    pthread_mutex_lock(&sv->mu);
#define P(...) n += (size_t)snprintf(t + n, n < cap ? cap - n : 0, __VA_ARGS__)
    P("# HELP cera_requests_total Requests received, by endpoint.\n# TYPE cera_requests_total counter\n");
    for (int i = 0; i < EP_COUNT; i++)
        P("cera_requests_total{endpoint=\"%s\"} %llu\n", ep_names[i], (unsigned long long)sv->n_req[i]);
    P("# HELP cera_errors_total Requests answered with an error.\n# TYPE cera_errors_total counter\n");
    P("cera_errors_total %llu\n", (unsigned long long)sv->n_errors);
    P("# HELP cera_prompt_tokens_total Prompt tokens of accepted requests.\n"
      "# TYPE cera_prompt_tokens_total counter\ncera_prompt_tokens_total %llu\n",
      (unsigned long long)sv->n_prompt_tokens);
    P("# HELP cera_generated_tokens_total Tokens generated.\n# TYPE cera_generated_tokens_total counter\n"
      "cera_generated_tokens_total %llu\n",
      (unsigned long long)sv->n_gen_tokens);
    P("# HELP cera_draft_tokens_total Speculative drafts evaluated.\n# TYPE cera_draft_tokens_total counter\n"
      "cera_draft_tokens_total %llu\n",
      (unsigned long long)sv->n_drafted);
    P("# HELP cera_draft_tokens_accepted_total Speculative drafts kept.\n"
      "# TYPE cera_draft_tokens_accepted_total counter\ncera_draft_tokens_accepted_total %llu\n",
      (unsigned long long)sv->n_draft_kept);
    P("# HELP cera_tokens_per_second Generated tokens per second of batch work.\n"
      "# TYPE cera_tokens_per_second gauge\ncera_tokens_per_second %.3f\n",
      sv->busy_s > 0 ? (double)sv->n_gen_tokens / sv->busy_s : 0.0);
    P("# HELP cera_queue_depth Requests waiting for a sequence.\n# TYPE cera_queue_depth gauge\n"
      "cera_queue_depth %d\n",
      sv->n_queued);
    P("# HELP cera_sequences_running Sequences (sessions) open.\n# TYPE cera_sequences_running gauge\n"
      "cera_sequences_running %d\n",
      sv->n_seqs);
    P("# HELP cera_kv_blocks_used KV cache blocks in use.\n# TYPE cera_kv_blocks_used gauge\n"
      "cera_kv_blocks_used %d\n",
      used);
    P("# HELP cera_kv_blocks_free KV cache blocks free.\n# TYPE cera_kv_blocks_free gauge\n"
      "cera_kv_blocks_free %d\n",
      total - used);
    P("# HELP cera_cached_tokens_total Prompt tokens taken from the prefix cache.\n"
      "# TYPE cera_cached_tokens_total counter\ncera_cached_tokens_total %llu\n",
      (unsigned long long)sv->n_cached_tokens);
    P("# HELP cera_cache_sessions Finished sessions kept for their prefixes.\n"
      "# TYPE cera_cache_sessions gauge\ncera_cache_sessions %d\n",
      sv->n_cache_entries);
    if (sv->disk) {
        serve_disk_stats ds;
        serve_disk_stats_get(sv->disk, &ds);
        P("# HELP cera_disk_cache_files Prefix files of the disk tier (--cache-dir).\n"
          "# TYPE cera_disk_cache_files gauge\ncera_disk_cache_files %llu\n"
          "# HELP cera_disk_cache_bytes Bytes of those files (at most --cache-dir-size).\n"
          "# TYPE cera_disk_cache_bytes gauge\ncera_disk_cache_bytes %llu\n",
          (unsigned long long)ds.files, (unsigned long long)ds.bytes);
        P("# HELP cera_disk_cache_hits_total Prompt prefixes loaded from the disk tier.\n"
          "# TYPE cera_disk_cache_hits_total counter\ncera_disk_cache_hits_total %llu\n"
          "# HELP cera_disk_cache_tokens_total Prompt tokens loaded from the disk tier.\n"
          "# TYPE cera_disk_cache_tokens_total counter\ncera_disk_cache_tokens_total %llu\n",
          (unsigned long long)ds.hits, (unsigned long long)ds.tokens);
        P("# HELP cera_disk_cache_writes_total Prefix files written.\n"
          "# TYPE cera_disk_cache_writes_total counter\ncera_disk_cache_writes_total %llu\n"
          "# HELP cera_disk_cache_refused_total Files refused at a load (damaged or foreign) and deleted.\n"
          "# TYPE cera_disk_cache_refused_total counter\ncera_disk_cache_refused_total %llu\n"
          "# HELP cera_disk_cache_evicted_total Files deleted to keep the folder under its cap.\n"
          "# TYPE cera_disk_cache_evicted_total counter\ncera_disk_cache_evicted_total %llu\n",
          (unsigned long long)ds.writes, (unsigned long long)ds.refused, (unsigned long long)ds.evicted);
        P("# HELP cera_disk_cache_skipped_total Disk hits not loaded: computing the prompt was predicted "
          "faster.\n"
          "# TYPE cera_disk_cache_skipped_total counter\ncera_disk_cache_skipped_total %llu\n",
          (unsigned long long)sv->n_disk_skipped);
    }
#undef P
    pthread_mutex_unlock(&sv->mu);
    if (n >= cap) {
        free(t);
        return send_error(sv, c, 500, NULL, "metrics too long");
    }
    return send_text(c, 200, t, "text/plain; version=0.0.4");
}

static enum MHD_Result handle_embeddings(serve_server *sv, struct MHD_Connection *c, const conn_req *rq) {
    char msg[200];
    cJSON *b = parse_body(sv, rq, msg, sizeof msg);
    if (!b) return send_error(sv, c, 400, NULL, "%s", msg);
    /* a long input may outlast the idle timeout: off until it is answered */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    char *out = NULL;
    const int st = serve_embeddings(sv, b, &out);
    cJSON_Delete(b);
    if (st != 200) {
        pthread_mutex_lock(&sv->mu);
        sv->n_errors++;
        pthread_mutex_unlock(&sv->mu);
    }
    return send_text(c, (unsigned)st, out, "application/json");
}

/* ---- The daemon's callbacks ------------------------------------------------------------------ */

/* Constant time in the key's length: no early exit on the first difference. */
static bool key_ok(const serve_server *sv, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *given = h && !strncmp(h, "Bearer ", 7) ? h + 7 : "";
    const size_t kl = strlen(sv->api_key), gl = strlen(given);
    unsigned diff = kl != gl;
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)sv->api_key[i] ^ (unsigned char)given[i < gl ? i : 0];
    return diff == 0;
}

static enum MHD_Result dispatch(serve_server *sv, struct MHD_Connection *c, const char *url,
                                const char *method, conn_req *rq) {
    const route *rt = NULL;
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES; i++)
        if (!strcmp(url, routes[i].path)) {
            path_known = true;
            if (!strcmp(method, routes[i].method)) rt = &routes[i];
        }
    if (!path_known) return send_error(sv, c, 404, NULL, "no such endpoint: %.100s", url);
    if (!rt)
        return send_error(sv, c, 405, NULL, "%.100s takes %s", url, !strcmp(method, "GET") ? "POST" : "GET");
    pthread_mutex_lock(&sv->mu);
    sv->n_req[rt->ep]++;
    pthread_mutex_unlock(&sv->mu);
    if (sv->api_key && rt->ep != EP_HEALTH && !key_ok(sv, c))
        return send_error(sv, c, 401, NULL, "a wrong or missing API key (Authorization: Bearer KEY)");
    if (rq->too_big)
        return send_error(sv, c, 413, NULL,
                          "the body is larger than the server's limit of %zu bytes (--max-body)",
                          sv->max_body);
    switch (rt->ep) {
    case EP_CHAT: return handle_generate(sv, c, SERVE_CHAT, rq);
    case EP_COMPLETION: return handle_generate(sv, c, SERVE_COMPLETION, rq);
    case EP_MODELS: return handle_models(sv, c);
    case EP_HEALTH: return send_text(c, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    case EP_METRICS: return handle_metrics(sv, c);
    case EP_TOKENIZE: return handle_tokenize(sv, c, rq);
    case EP_DETOKENIZE: return handle_detokenize(sv, c, rq);
    case EP_TEMPLATE: return handle_template(sv, c, rq);
    case EP_LORA: return handle_lora(sv, c, method, rq);
    case EP_EMBED: return handle_embeddings(sv, c, rq);
    }
    return MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size,
                                  void **con_cls) {
    serve_server *sv = cls;
    (void)version;
    conn_req *rq = *con_cls;
    if (!rq) {
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        *con_cls = rq;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > sv->max_body) rq->too_big = true;
        return MHD_YES;
    }
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (!rq->too_big && rq->len + n > sv->max_body) {
            rq->too_big = true;
            free(rq->body);
            rq->body = NULL;
            rq->discarded = rq->len;
            rq->len = rq->cap = 0;
        }
        if (rq->too_big) {
            rq->discarded += n;
            return rq->discarded > DISCARD_MAX ? MHD_NO : MHD_YES;
        }
        if (rq->len + n + 1 > rq->cap) {
            const size_t cap =
                (rq->len + n + 1) * 2 < sv->max_body + 1 ? (rq->len + n + 1) * 2 : sv->max_body + 1;
            char *b = realloc(rq->body, cap);
            if (!b) return MHD_NO;
            rq->body = b;
            rq->cap = cap;
        }
        memcpy(rq->body + rq->len, upload, n);
        rq->len += n;
        rq->body[rq->len] = 0;
        return MHD_YES;
    }
    return dispatch(sv, c, url, method, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    serve_server *sv = cls;
    (void)toe;
    conn_req *rq = *con_cls;
    if (rq) {
        free(rq->body);
        free(rq);
        *con_cls = NULL;
    }
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)sv->conn_timeout_s);
}

struct MHD_Daemon *serve_http_start(serve_server *sv, int *port) {
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    const struct sockaddr *sa;
    if (inet_pton(AF_INET, sv->host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)sv->port);
        sa = (const struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, sv->host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)sv->port);
        sa = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "cera serve: --host %s is not an IPv4 or IPv6 address\n", sv->host);
        return NULL;
    }
    struct MHD_Daemon *d =
        MHD_start_daemon(flags, (uint16_t)sv->port, NULL, NULL, on_request, sv, MHD_OPTION_SOCK_ADDR, sa,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)sv->conn_timeout_s,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)(sv->parallel + sv->max_queue + 64),
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "cera serve: cannot listen on %s port %d (in use? not an address of this machine?)\n",
                sv->host, sv->port);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : sv->port;
    return d;
}

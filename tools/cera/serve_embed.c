/*
 * serve_embed.c — `/v1/embeddings` of `cera serve`: OpenAI's embeddings request (input a
 * text, an array of texts, an array of token ids or an array of such arrays; model, an
 * adapter's name too; encoding_format float or base64; dimensions) and its answer, the
 * vectors of the library's embeddings (cera_batch_embed) pooled by --pooling and normalized
 * by --embd-normalize, as `cera embed` gives them.
 *
 * The work runs on the connection's thread, not through the scheduler: embeddings sample
 * nothing and stream nothing. It takes its own sessions (the engine has SERVE_EMBED_SEQS
 * beyond the scheduler's) and one request computes at a time; each library call is at most
 * --prefill-chunk tokens (short inputs several together, a long one in parts pooled here),
 * so the engine's forward lock is never held longer than one scheduler step's chunk and the
 * running streams go on between the parts.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "serve.h"

#define EMBED_INPUTS_MAX 2048 /* OpenAI's limit on the items of one request */

typedef struct embed_input {
    cera_token *tok;
    size_t n;
} embed_input;

typedef struct embed_req {
    embed_input *in;
    int n_in;
    bool base64;
    serve_adapter_set ad;
    char model[128];
} embed_req;

/* Writes the reason into msg and returns the HTTP status. */
static int fail(char *msg, size_t cap, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *msg, size_t cap, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return status;
}

static void req_free(embed_req *r) {
    for (int i = 0; i < r->n_in; i++) free(r->in[i].tok);
    free(r->in);
}

/* Token ids from a JSON array of numbers; 0 or an HTTP status with msg. */
static int read_ids(const serve_server *sv, const cJSON *a, embed_input *in, char *msg, size_t cap) {
    const int n = cJSON_GetArraySize(a), n_vocab = cera_engine_n_vocab(sv->e);
    if (n == 0) return fail(msg, cap, 400, "'input' holds an empty array of token ids");
    if (!(in->tok = malloc((size_t)n * sizeof *in->tok))) return fail(msg, cap, 500, "out of memory");
    const cJSON *t;
    cJSON_ArrayForEach(t, a) {
        if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble >= n_vocab ||
            t->valuedouble != (double)(int)t->valuedouble)
            return fail(msg, cap, 400, "'input' holds something that is not a token id (0..%d)", n_vocab - 1);
        in->tok[in->n++] = (cera_token)t->valuedouble;
    }
    return 0;
}

static int read_text(const serve_server *sv, const char *s, embed_input *in, char *msg, size_t cap) {
    const size_t len = strlen(s), tcap = len + 8;
    if (len == 0) return fail(msg, cap, 400, "'input' holds an empty string");
    if (!(in->tok = malloc(tcap * sizeof *in->tok))) return fail(msg, cap, 500, "out of memory");
    cera_error err = {0};
    if (cera_tokenize(sv->e, s, len, true, true, in->tok, tcap, &in->n, &err))
        return fail(msg, cap, 400, "tokenizing the input failed: %s", err.message);
    return 0;
}

/* The request's inputs, model and format; 0 or an HTTP status with msg and param. */
static int parse(serve_server *sv, const cJSON *b, embed_req *r, char *msg, size_t cap, const char **param) {
    const cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(b, "model");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(b, "encoding_format");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(b, "dimensions");
    const cJSON *user = cJSON_GetObjectItemCaseSensitive(b, "user");
    *param = "input";
    if (!input) return fail(msg, cap, 400, "'input' is required");
    const bool arr = cJSON_IsArray(input);
    if (!cJSON_IsString(input) && !arr)
        return fail(msg, cap, 400, "'input' must be a string, an array of strings or of token ids");
    const int n = arr ? cJSON_GetArraySize(input) : 1;
    if (n == 0) return fail(msg, cap, 400, "'input' is an empty array");
    if (n > EMBED_INPUTS_MAX) return fail(msg, cap, 400, "'input' has more than %d items", EMBED_INPUTS_MAX);
    /* an array of numbers is one input of token ids; otherwise each item is one input */
    const bool ids = arr && cJSON_IsNumber(cJSON_GetArrayItem(input, 0));
    const int n_in = ids ? 1 : n;
    if (!(r->in = calloc((size_t)n_in, sizeof *r->in))) return fail(msg, cap, 500, "out of memory");
    r->n_in = n_in;
    int st = 0;
    if (!arr)
        st = read_text(sv, input->valuestring, &r->in[0], msg, cap);
    else if (ids)
        st = read_ids(sv, input, &r->in[0], msg, cap);
    else
        for (int i = 0; i < n && !st; i++) {
            const cJSON *it = cJSON_GetArrayItem(input, i);
            if (cJSON_IsString(it))
                st = read_text(sv, it->valuestring, &r->in[i], msg, cap);
            else if (cJSON_IsArray(it))
                st = read_ids(sv, it, &r->in[i], msg, cap);
            else
                st = fail(msg, cap, 400, "'input' item %d is neither a string nor an array of token ids", i);
        }
    if (st) return st;
    const int n_ctx = cera_engine_n_ctx(sv->e);
    for (int i = 0; i < n_in; i++)
        if (r->in[i].n == 0 || r->in[i].n > (size_t)n_ctx)
            return fail(msg, cap, 400, "input %d has %zu tokens; the context holds %d (-c)", i, r->in[i].n,
                        n_ctx);
    *param = "encoding_format";
    if (fmt && !cJSON_IsNull(fmt)) {
        if (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64")))
            return fail(msg, cap, 400, "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = !strcmp(fmt->valuestring, "base64");
    }
    /* OpenAI shortens only models trained for it; this model's vectors are what they are */
    *param = "dimensions";
    const int d = cera_engine_n_embd(sv->e);
    if (dims && !cJSON_IsNull(dims)) {
        if (!cJSON_IsNumber(dims) || dims->valuedouble != (double)(int)dims->valuedouble ||
            dims->valuedouble < 1)
            return fail(msg, cap, 400, "'dimensions' must be a positive integer");
        if ((int)dims->valuedouble != d)
            return fail(msg, cap, 400, "this model's embeddings have %d dimensions and cannot be shortened",
                        d);
    }
    *param = "user";
    if (user && !cJSON_IsNull(user) && !cJSON_IsString(user))
        return fail(msg, cap, 400, "'user' must be a string");
    *param = "model";
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return fail(msg, cap, 400, "'model' must be a string");
    const char *name = cJSON_IsString(model) ? model->valuestring : NULL;
    int ad = -1;
    if (name && strcmp(name, sv->model_id)) {
        for (int i = 0; i < sv->n_ad; i++)
            if (!strcmp(name, sv->ad[i].name)) ad = i;
        if (ad < 0)
            return fail(msg, cap, 404, "the model '%.100s' does not exist (GET /v1/models lists them)", name);
    }
    snprintf(r->model, sizeof r->model, "%s", ad >= 0 ? sv->ad[ad].name : sv->model_id);
    if (ad >= 0) {
        r->ad.adapter[0] = sv->ad[ad].adapter;
        r->ad.scale[0] = 1;
        r->ad.n = 1;
    }
    *param = NULL;
    return 0;
}

/* A new session with the request's adapters. */
static cera_status new_session(serve_server *sv, const embed_req *r, cera_session **s, cera_error *err) {
    cera_status st = cera_session_create(sv->e, NULL, s, err);
    for (int k = 0; k < r->ad.n && !st; k++)
        st = cera_session_set_adapter(*s, r->ad.adapter[k], r->ad.scale[k], err);
    if (st) {
        cera_session_free(*s);
        *s = NULL;
    }
    return st;
}

/* A long input in parts of at most chunk tokens (equal ones, as the library cuts a long
 * eval), each a library call of its own, then pooled. */
static cera_status embed_long(serve_server *sv, const embed_req *r, const embed_input *in, size_t chunk,
                              float *out, cera_error *err) {
    const int d = cera_engine_n_embd(sv->e);
    float *rows = malloc(in->n * (size_t)d * sizeof(float));
    cera_session *s = NULL;
    cera_status st = rows ? new_session(sv, r, &s, err)
                          : cera_fail(err, CERA_ERR_NO_MEMORY, "embeddings of %zu tokens", in->n);
    const size_t parts = (in->n + chunk - 1) / chunk, len = (in->n + parts - 1) / parts;
    for (size_t off = 0; off < in->n && !st; off += len) {
        const size_t n = in->n - off < len ? in->n - off : len;
        st = cera_session_embed(s, in->tok + off, n, CERA_POOLING_NONE, -1, rows + off * (size_t)d, err);
    }
    if (!st) st = cera_embd_pool(rows, in->n, d, sv->pooling, sv->embd_norm, out, err);
    cera_session_free(s);
    free(rows);
    return st;
}

/* Every input's vector into v [n_in, d]: short inputs in groups through one batch call. */
static cera_status embed_all(serve_server *sv, const embed_req *r, float *v, cera_error *err) {
    const int d = cera_engine_n_embd(sv->e);
    const size_t chunk = (size_t)sv->prefill_chunk;
    cera_session *s[SERVE_EMBED_SEQS] = {0};
    cera_batch_item items[SERVE_EMBED_SEQS];
    float *out[SERVE_EMBED_SEQS];
    cera_status st = CERA_OK;
    for (int i = 0; i < r->n_in && !st;) {
        if (r->in[i].n > chunk) {
            st = embed_long(sv, r, &r->in[i], chunk, v + (size_t)i * d, err);
            i++;
            continue;
        }
        int m = 0;
        size_t total = 0;
        while (i + m < r->n_in && m < SERVE_EMBED_SEQS && r->in[i + m].n <= chunk - total) {
            total += r->in[i + m].n;
            m++;
        }
        for (int k = 0; k < m && !st; k++) {
            st = new_session(sv, r, &s[k], err);
            items[k] = (cera_batch_item){s[k], r->in[i + k].tok, r->in[i + k].n, false, 0};
            out[k] = v + (size_t)(i + k) * d;
        }
        if (!st) st = cera_batch_embed(sv->e, items, m, sv->pooling, sv->embd_norm, out, err);
        for (int k = 0; k < m; k++) {
            cera_session_free(s[k]);
            s[k] = NULL;
        }
        i += m;
    }
    return st;
}

/* RFC 4648 base64 of n bytes (malloc'ed, NUL-terminated). */
static char *base64(const unsigned char *p, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *q = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        const unsigned a = p[i], b = i + 1 < n ? p[i + 1] : 0, c = i + 2 < n ? p[i + 2] : 0;
        *q++ = tab[a >> 2];
        *q++ = tab[((a & 3) << 4) | (b >> 4)];
        *q++ = i + 1 < n ? tab[((b & 15) << 2) | (c >> 6)] : '=';
        *q++ = i + 2 < n ? tab[c & 63] : '=';
    }
    *q = '\0';
    return o;
}

/* The vector as OpenAI's base64: its float32 values' little-endian bytes. */
static char *vector_base64(const float *v, int d) {
    unsigned char *b = malloc((size_t)d * 4);
    if (!b) return NULL;
    for (int i = 0; i < d; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int k = 0; k < 4; k++) b[(size_t)i * 4 + k] = (unsigned char)(u >> (8 * k));
    }
    char *s = base64(b, (size_t)d * 4);
    free(b);
    return s;
}

static cJSON *answer(const embed_req *r, const float *v, int d) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    size_t n_tok = 0;
    for (int i = 0; i < r->n_in; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        const float *x = v + (size_t)i * d;
        if (r->base64) {
            char *s = vector_base64(x, d);
            if (!s) {
                cJSON_Delete(e);
                cJSON_Delete(o);
                return NULL;
            }
            cJSON_AddStringToObject(e, "embedding", s);
            free(s);
        } else {
            cJSON *a = cJSON_AddArrayToObject(e, "embedding");
            for (int k = 0; k < d; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)x[k]));
        }
        cJSON_AddItemToArray(data, e);
        n_tok += r->in[i].n;
    }
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)n_tok);
    cJSON_AddNumberToObject(u, "total_tokens", (double)n_tok);
    return o;
}

int serve_embeddings(serve_server *sv, const cJSON *body, char **out) {
    char msg[600];
    const char *param = NULL;
    embed_req r;
    memset(&r, 0, sizeof r);
    *out = NULL;
    if (sv->pooling == CERA_POOLING_NONE) {
        *out =
            serve_error_json(400,
                             "the server's pooling is none, which gives one vector per token: not OpenAI's "
                             "embeddings (start it with --pooling mean, cls or last)",
                             NULL);
        return 400;
    }
    int st = parse(sv, body, &r, msg, sizeof msg, &param);
    const int d = cera_engine_n_embd(sv->e);
    float *v = st ? NULL : malloc((size_t)r.n_in * d * sizeof(float));
    if (!st && !v) st = fail(msg, sizeof msg, 500, "out of memory");
    if (!st) {
        cera_error err = {0};
        pthread_mutex_lock(&sv->embed_mu);
        const cera_status cs = embed_all(sv, &r, v, &err);
        pthread_mutex_unlock(&sv->embed_mu);
        if (cs) {
            st = cs == CERA_ERR_CONTEXT_FULL ? 503 : cs == CERA_ERR_UNSUPPORTED ? 501 : 500;
            snprintf(msg, sizeof msg, "embedding failed: %s%s", err.message,
                     cs == CERA_ERR_CONTEXT_FULL ? " (the KV cache is full; try again)" : "");
        }
    }
    if (!st) {
        cJSON *o = answer(&r, v, d);
        pthread_mutex_lock(&sv->mu);
        for (int i = 0; i < r.n_in; i++) sv->n_prompt_tokens += r.in[i].n;
        pthread_mutex_unlock(&sv->mu);
        *out = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!*out) st = fail(msg, sizeof msg, 500, "out of memory");
    }
    if (st) *out = serve_error_json(st, msg, param);
    free(v);
    req_free(&r);
    return st ? st : 200;
}

/*
 * serve_api.c — request bodies of `cera serve` checked and parsed (serve_api.h), and the
 * JSON pieces of its answers.
 *
 * A body is first checked as bytes (valid UTF-8, no NUL, nesting no deeper than the limit)
 * so that cJSON never sees a hostile shape, then parsed and walked field by field against
 * a table of the names OpenAI, llama-server and vLLM clients send. An unknown field is a
 * 400 (as OpenAI's "Unrecognized request argument"), and so is a known one this server
 * does not do yet (response_format together with tools), rather than being ignored.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_api.h"

/* ---- Bytes ------------------------------------------------------------------------- */

bool serve_utf8_valid(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < len;) {
        const unsigned c = s[i];
        if (c == 0) return false;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned cp;
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (len - i <= n) return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

size_t serve_utf8_complete(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    /* look back over at most 3 continuation bytes for the lead byte of the last character */
    size_t i = len, back = 0;
    while (i > 0 && back < 4 && (s[i - 1] & 0xc0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0) return len;
    const unsigned c = s[i - 1];
    size_t need = 0;
    if (c >= 0xc0 && c <= 0xdf)
        need = 1;
    else if (c >= 0xe0 && c <= 0xef)
        need = 2;
    else if (c >= 0xf0 && c <= 0xf7)
        need = 3;
    else
        return len; /* ASCII or a stray byte: nothing to wait for */
    return back < need ? i - 1 : len;
}

/* The deepest nesting of arrays and objects in a JSON text, strings skipped. */
static int json_depth(const char *s, size_t len) {
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
            continue;
        }
        if (c == '"')
            in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > max) max = depth;
        } else if (c == ']' || c == '}')
            depth--;
    }
    return max;
}

/* ---- Fields ------------------------------------------------------------------------ */

typedef struct parse_ctx {
    serve_req *r;
    const serve_limits *lim;
    char *msg;
    size_t cap;
    char *param;
    size_t param_cap;
} parse_ctx;

static int bad(parse_ctx *c, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(parse_ctx *c, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->cap, fmt, ap);
    va_end(ap);
    snprintf(c->param, c->param_cap, "%s", param ? param : "");
    return 400;
}

static char *own(parse_ctx *c, char *text) {
    if (!text) return NULL;
    char **o = realloc(c->r->owned, (size_t)(c->r->n_owned + 1) * sizeof *o);
    if (!o) {
        free(text);
        return NULL;
    }
    c->r->owned = o;
    o[c->r->n_owned++] = text;
    return text;
}

static int get_number(parse_ctx *c, const cJSON *v, const char *name, double lo, double hi, double *out) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return bad(c, name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return bad(c, name, "'%s' is %g; it must be between %g and %g", name, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

static int get_float(parse_ctx *c, const cJSON *v, const char *name, double lo, double hi, float *out) {
    double d = 0;
    const int st = get_number(c, v, name, lo, hi, &d);
    if (!st) *out = (float)d;
    return st;
}

static int get_int(parse_ctx *c, const cJSON *v, const char *name, double lo, double hi, int *out) {
    double d = 0;
    int st = get_number(c, v, name, lo, hi, &d);
    if (st) return st;
    if (d != floor(d)) return bad(c, name, "'%s' must be an integer", name);
    *out = (int)d;
    return 0;
}

static int get_bool(parse_ctx *c, const cJSON *v, const char *name, bool *out) {
    if (!cJSON_IsBool(v)) return bad(c, name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

static int parse_stop(parse_ctx *c, const cJSON *v) {
    serve_req *r = c->r;
    if (cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0]) return 0;
        if (strlen(v->valuestring) > SERVE_STOP_LEN) return bad(c, "stop", "a stop string is too long");
        r->stop[r->n_stop++] = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v)) return bad(c, "stop", "'stop' must be a string or an array of strings");
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        if (!cJSON_IsString(s)) return bad(c, "stop", "'stop' must be a string or an array of strings");
        if (!s->valuestring[0]) continue;
        if (r->n_stop == SERVE_STOP_MAX) return bad(c, "stop", "at most %d stop strings", SERVE_STOP_MAX);
        if (strlen(s->valuestring) > SERVE_STOP_LEN) return bad(c, "stop", "a stop string is too long");
        r->stop[r->n_stop++] = s->valuestring;
    }
    return 0;
}

static int add_bias(parse_ctx *c, double id, const cJSON *val) {
    serve_req *r = c->r;
    if (id != floor(id) || id < 0 || (c->lim->n_vocab > 0 && id >= c->lim->n_vocab) || id > 1e9)
        return bad(c, "logit_bias", "logit_bias: token id %.0f out of range", id);
    float b;
    if (cJSON_IsFalse(val)) {
        b = -INFINITY;
    } else {
        int st = get_float(c, val, "logit_bias", -100, 100, &b);
        if (st) return st;
        if (b <= -100) b = -INFINITY; /* OpenAI: -100 bans the token */
    }
    if (r->n_bias == SERVE_BIAS_MAX) return bad(c, "logit_bias", "at most %d logit biases", SERVE_BIAS_MAX);
    if (!r->bias && !(r->bias = calloc(SERVE_BIAS_MAX, sizeof *r->bias)))
        return bad(c, NULL, "out of memory");
    r->bias[r->n_bias++] = (cera_logit_bias){(cera_token)id, b};
    return 0;
}

/* {"123": 5} (OpenAI) or [[123, 5], [7, false]] (llama-server) */
static int parse_bias(parse_ctx *c, const cJSON *v) {
    const cJSON *e;
    if (cJSON_IsNull(v)) return 0;
    if (cJSON_IsObject(v)) {
        cJSON_ArrayForEach(e, v) {
            char *end;
            const double id = strtod(e->string, &end);
            if (end == e->string || *end) return bad(c, "logit_bias", "logit_bias keys are token ids");
            int st = add_bias(c, id, e);
            if (st) return st;
        }
        return 0;
    }
    if (!cJSON_IsArray(v)) return bad(c, "logit_bias", "'logit_bias' must be an object");
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(e, 0)))
            return bad(c, "logit_bias", "logit_bias entries are [token, bias]");
        int st = add_bias(c, cJSON_GetArrayItem(e, 0)->valuedouble, cJSON_GetArrayItem(e, 1));
        if (st) return st;
    }
    return 0;
}

static int parse_lora(parse_ctx *c, const cJSON *v) {
    serve_req *r = c->r;
    if (!cJSON_IsArray(v)) return bad(c, "lora", "'lora' must be an array of {\"id\", \"scale\"}");
    r->has_lora = true;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) {
        if (!cJSON_IsObject(e)) return bad(c, "lora", "'lora' must be an array of {\"id\", \"scale\"}");
        if (r->n_lora == SERVE_LORA_MAX) return bad(c, "lora", "at most %d adapters", SERVE_LORA_MAX);
        serve_lora_ref *l = &r->lora[r->n_lora];
        int st = get_int(c, cJSON_GetObjectItemCaseSensitive(e, "id"), "lora.id", 0, c->lim->n_adapters - 1,
                         &l->id);
        if (st) return st;
        l->scale = 1;
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(e, "scale");
        if (s && (st = get_float(c, s, "lora.scale", -100, 100, &l->scale))) return st;
        r->n_lora++;
    }
    return 0;
}

int serve_lora_list_parse(const cJSON *v, const serve_limits *lim, serve_lora_ref *out, int *n, char *msg,
                          size_t cap) {
    serve_req r;
    char param[32];
    memset(&r, 0, sizeof r);
    parse_ctx c = {&r, lim, msg, cap, param, sizeof param};
    *n = 0;
    const int st = parse_lora(&c, v);
    if (st) return st;
    memcpy(out, r.lora, (size_t)r.n_lora * sizeof *out);
    *n = r.n_lora;
    return 0;
}

/* ---- Chat messages ------------------------------------------------------------------ */

static char *print_json(parse_ctx *c, const cJSON *v) { return own(c, cJSON_PrintUnformatted(v)); }

static int parse_content(parse_ctx *c, const cJSON *v, cera_chat_message *m) {
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        m->content = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return bad(c, "messages", "a message's content must be a string or an array of parts");
    const cJSON *p;
    cJSON_ArrayForEach(p, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsObject(p) || !cJSON_IsString(type))
            return bad(c, "messages", "a content part must be an object with a type");
        if (strcmp(type->valuestring, "text"))
            return bad(c, "messages", "content parts of type '%.40s' are not supported yet",
                       type->valuestring);
        if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(p, "text")))
            return bad(c, "messages", "a text part needs a string 'text'");
    }
    /* text parts become one string (joined by newlines): most templates add content to
     * strings, and the text is the same */
    size_t n = 0;
    cJSON_ArrayForEach(p, v) n += strlen(cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring) + 1;
    char *t = own(c, malloc(n + 1));
    if (!t) return bad(c, NULL, "out of memory");
    t[0] = 0;
    size_t w = 0;
    cJSON_ArrayForEach(p, v) {
        const char *s = cJSON_GetObjectItemCaseSensitive(p, "text")->valuestring;
        if (w) t[w++] = '\n';
        memcpy(t + w, s, strlen(s) + 1);
        w += strlen(s);
    }
    m->content = t;
    return 0;
}

static int opt_string(parse_ctx *c, const cJSON *msg, const char *key, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(msg, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsString(v)) return bad(c, "messages", "a message's '%s' must be a string", key);
    *out = v->valuestring;
    return 0;
}

static int parse_messages(parse_ctx *c, const cJSON *v) {
    serve_req *r = c->r;
    if (!cJSON_IsArray(v)) return bad(c, "messages", "'messages' must be an array");
    const int n = cJSON_GetArraySize(v);
    if (n == 0) return bad(c, "messages", "'messages' is empty");
    if (n > SERVE_MESSAGES_MAX) return bad(c, "messages", "at most %d messages", SERVE_MESSAGES_MAX);
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs))) return bad(c, NULL, "out of memory");
    const cJSON *m;
    cJSON_ArrayForEach(m, v) {
        if (!cJSON_IsObject(m)) return bad(c, "messages", "each message must be an object");
        cera_chat_message *cm = &r->msgs[r->n_msgs++];
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role) || !role->valuestring[0])
            return bad(c, "messages", "each message needs a string 'role'");
        static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", NULL};
        bool known = false;
        for (int i = 0; roles[i]; i++) known = known || !strcmp(roles[i], role->valuestring);
        if (!known) return bad(c, "messages", "unknown role '%.40s'", role->valuestring);
        cm->role = !strcmp(role->valuestring, "developer") ? "system" : role->valuestring;
        const cJSON *e;
        cJSON_ArrayForEach(e, m) {
            static const char *const keys[] = {"role",         "content",           "name",    "tool_calls",
                                               "tool_call_id", "reasoning_content", "refusal", NULL};
            bool k = false;
            for (int i = 0; keys[i]; i++) k = k || !strcmp(keys[i], e->string);
            if (!k) return bad(c, "messages", "unknown message field '%.40s'", e->string);
        }
        int st = parse_content(c, cJSON_GetObjectItemCaseSensitive(m, "content"), cm);
        if (!st) st = opt_string(c, m, "name", &cm->name);
        if (!st) st = opt_string(c, m, "tool_call_id", &cm->tool_call_id);
        if (!st) st = opt_string(c, m, "reasoning_content", &cm->reasoning_content);
        if (st) return st;
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (tc && !cJSON_IsNull(tc)) {
            if (!cJSON_IsArray(tc)) return bad(c, "messages", "'tool_calls' must be an array");
            const cJSON *call;
            cJSON_ArrayForEach(call, tc) {
                const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
                if (!cJSON_IsObject(call) || !cJSON_IsObject(fn) ||
                    !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")))
                    return bad(c, "messages", "a tool call needs a function with a name");
            }
            if (cJSON_GetArraySize(tc) && !(cm->tool_calls = print_json(c, tc)))
                return bad(c, NULL, "out of memory");
        }
    }
    return 0;
}

/* tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": ...}}. */
static int parse_tool_choice(parse_ctx *c, const cJSON *v) {
    serve_req *r = c->r;
    if (cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) {
        if (!strcmp(v->valuestring, "none"))
            r->tool_choice_none = true;
        else if (!strcmp(v->valuestring, "required"))
            r->tool_required = true;
        else if (strcmp(v->valuestring, "auto"))
            return bad(c, "tool_choice",
                       "tool_choice must be \"none\", \"auto\", \"required\" or a function");
        return 0;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
    const cJSON *name =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "function"), "name");
    if (!cJSON_IsObject(v) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
        !cJSON_IsString(name))
        return bad(c, "tool_choice",
                   "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}");
    r->tool_name = name->valuestring;
    r->tool_required = true;
    return 0;
}

/* response_format: text, json_object (any JSON object, or its "schema" as llama-server reads
 * it) or json_schema ({"json_schema": {"name", "schema", "strict"}}): the grammar. */
static int parse_response_format(parse_ctx *c, const cJSON *v) {
    static const char k[] = "response_format";
    if (cJSON_IsNull(v)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (!cJSON_IsObject(v) || !cJSON_IsString(t)) return bad(c, k, "'response_format' needs a type");
    if (!strcmp(t->valuestring, "text")) return 0;
    const cJSON *schema = NULL;
    if (!strcmp(t->valuestring, "json_object")) {
        schema = cJSON_GetObjectItemCaseSensitive(v, "schema");
    } else if (!strcmp(t->valuestring, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
        if (!cJSON_IsObject(js)) return bad(c, k, "response_format json_schema needs a 'json_schema' object");
        schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!schema) return bad(c, k, "response_format json_schema needs json_schema.schema");
    } else {
        return bad(c, k, "response_format '%.40s' is not supported", t->valuestring);
    }
    if (schema && !cJSON_IsObject(schema) && !cJSON_IsTrue(schema))
        return bad(c, k, "response_format: the schema must be an object");
    char *text = schema ? cJSON_PrintUnformatted(schema) : NULL;
    if (schema && !text) return bad(c, NULL, "out of memory");
    static const char any_object[] = "{\"type\":\"object\"}";
    const char *json = text ? text : any_object;
    char *gbnf = NULL;
    cera_error err = {0};
    const cera_status st = cera_json_schema_to_grammar(json, strlen(json), &gbnf, &err);
    free(text);
    if (st) return bad(c, k, "response_format: the schema cannot be used: %s", err.message);
    if (!(c->r->gbnf = own(c, gbnf))) return bad(c, NULL, "out of memory");
    return 0;
}

static int parse_tools(parse_ctx *c, const cJSON *v) {
    if (cJSON_IsNull(v)) return 0;
    if (!cJSON_IsArray(v)) return bad(c, "tools", "'tools' must be an array");
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsObject(fn) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(fn, "name")))
            return bad(c, "tools",
                       "each tool must be {\"type\": \"function\", \"function\": {\"name\", ...}}");
    }
    if (cJSON_GetArraySize(v) && !(c->r->tools = print_json(c, v))) return bad(c, NULL, "out of memory");
    return 0;
}

/* One prompt: a text or an array of token ids. */
static int parse_one_prompt(parse_ctx *c, const cJSON *v) {
    serve_req *r = c->r;
    const int p = r->n_prompts++;
    if (cJSON_IsString(v)) {
        r->prompt_text[p] = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return bad(c, "prompt", "'prompt' must be a string, an array of token ids, or an array of those");
    const size_t n = (size_t)cJSON_GetArraySize(v);
    if (n == 0) return bad(c, "prompt", "'prompt' is empty");
    if (n > c->lim->max_prompt)
        return bad(c, "prompt", "the prompt has more than %zu tokens", c->lim->max_prompt);
    if (!(r->prompt_ids[p] = malloc(n * sizeof *r->prompt_ids[p]))) return bad(c, NULL, "out of memory");
    const cJSON *t;
    cJSON_ArrayForEach(t, v) {
        int id = 0;
        const double hi = c->lim->n_vocab > 0 ? c->lim->n_vocab - 1 : 1e9;
        if (!cJSON_IsNumber(t)) return bad(c, "prompt", "'prompt' must be a string or an array of token ids");
        int st = get_int(c, t, "prompt", 0, hi, &id);
        if (st) return st;
        r->prompt_ids[p][r->n_prompt_ids[p]++] = id;
    }
    return 0;
}

/* A prompt, or an array of prompts (texts or arrays of token ids, one kind): a choice (n of
 * them) for each. */
static int parse_prompt(parse_ctx *c, const cJSON *v) {
    serve_req *r = c->r;
    int st = 0;
    if (cJSON_IsArray(v) && v->child && (cJSON_IsString(v->child) || cJSON_IsArray(v->child))) {
        const int n = cJSON_GetArraySize(v);
        if (n > SERVE_PROMPTS_MAX) return bad(c, "prompt", "more than %d prompts", SERVE_PROMPTS_MAX);
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (cJSON_IsString(e) != cJSON_IsString(v->child) || cJSON_IsNumber(e))
                return bad(c, "prompt", "'prompt' must be an array of texts or an array of token-id arrays");
            if ((st = parse_one_prompt(c, e))) return st;
        }
    } else if ((st = parse_one_prompt(c, v))) {
        return st;
    }
    r->prompt = r->prompt_text[0];
    r->prompt_tokens = r->prompt_ids[0];
    r->n_prompt_tokens = r->n_prompt_ids[0];
    return 0;
}

/* ---- The body ----------------------------------------------------------------------- */

enum { F_BOTH, F_CHAT, F_COMPLETION };

/* Fields accepted and ignored (they change nothing here). */
static const char *const ignored[] = {"user",         "metadata",         "store",      "service_tier",
                                      "cache_prompt", "reasoning_effort", "modalities", NULL};

static int parse_field(parse_ctx *c, serve_kind kind, const cJSON *v) {
    serve_req *r = c->r;
    const char *k = v->string;
    for (int i = 0; ignored[i]; i++)
        if (!strcmp(k, ignored[i])) return 0;
    cera_sampler_params *sp = &r->sp;
    if (!strcmp(k, "model")) {
        if (!cJSON_IsString(v)) return bad(c, k, "'model' must be a string");
        r->model = v->valuestring;
        return 0;
    }
    if (kind == SERVE_CHAT && !strcmp(k, "messages")) return parse_messages(c, v);
    if (kind == SERVE_CHAT && !strcmp(k, "tools")) return parse_tools(c, v);
    if (kind == SERVE_CHAT && !strcmp(k, "tool_choice")) return parse_tool_choice(c, v);
    if (kind == SERVE_CHAT && !strcmp(k, "parallel_tool_calls"))
        return cJSON_IsNull(v) ? 0 : get_bool(c, v, k, &r->parallel_tool_calls);
    if (kind == SERVE_CHAT && !strcmp(k, "chat_template_kwargs")) {
        if (!cJSON_IsObject(v)) return bad(c, k, "'chat_template_kwargs' must be an object");
        if (!(r->extra = print_json(c, v))) return bad(c, NULL, "out of memory");
        return 0;
    }
    if (kind == SERVE_COMPLETION && !strcmp(k, "prompt")) return parse_prompt(c, v);
    if (kind == SERVE_COMPLETION && !strcmp(k, "echo")) {
        if (cJSON_IsTrue(v)) return bad(c, k, "'echo' is not supported yet");
        return cJSON_IsFalse(v) || cJSON_IsNull(v) ? 0 : bad(c, k, "'echo' must be true or false");
    }
    if (kind == SERVE_COMPLETION && !strcmp(k, "best_of")) {
        int b;
        int st = get_int(c, v, k, 1, 1, &b);
        return st ? bad(c, k, "'best_of' other than 1 is not supported yet") : 0;
    }
    if (kind == SERVE_COMPLETION && !strcmp(k, "suffix")) {
        if (cJSON_IsNull(v)) return 0;
        return bad(c, k, "'suffix' is not supported yet");
    }
    if (!strcmp(k, "stream")) return cJSON_IsNull(v) ? 0 : get_bool(c, v, k, &r->stream);
    if (!strcmp(k, "stream_options")) {
        if (cJSON_IsNull(v)) return 0;
        if (!cJSON_IsObject(v)) return bad(c, k, "'stream_options' must be an object");
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(v, "include_usage");
        if (u) return get_bool(c, u, "stream_options.include_usage", &r->include_usage);
        return 0;
    }
    if (!strcmp(k, "stop")) return parse_stop(c, v);
    if (!strcmp(k, "seed")) {
        if (cJSON_IsNull(v)) return 0;
        double d = 0;
        int st = get_number(c, v, k, -9.2e18, 1.8e19, &d);
        if (st) return st;
        if (d != floor(d)) return bad(c, k, "'seed' must be an integer");
        if (d >= 0) { /* -1 and below: a random one, as llama-server */
            sp->seed = d >= 9.2e18 ? (uint64_t)(d - 9.2e18) : (uint64_t)d;
            r->has_seed = true;
        }
        return 0;
    }
    if (!strcmp(k, "temperature")) return cJSON_IsNull(v) ? 0 : get_float(c, v, k, 0, 100, &sp->temp);
    if (!strcmp(k, "top_p")) return cJSON_IsNull(v) ? 0 : get_float(c, v, k, 0, 1, &sp->top_p);
    if (!strcmp(k, "min_p")) return cJSON_IsNull(v) ? 0 : get_float(c, v, k, 0, 1, &sp->min_p);
    if (!strcmp(k, "typical_p")) return cJSON_IsNull(v) ? 0 : get_float(c, v, k, 0, 1, &sp->typical_p);
    if (!strcmp(k, "top_k")) {
        if (cJSON_IsNull(v)) return 0;
        int st = get_int(c, v, k, -1, 1 << 30, &sp->top_k);
        if (!st && sp->top_k < 0) sp->top_k = 0; /* vLLM's -1: off */
        return st;
    }
    if (!strcmp(k, "presence_penalty"))
        return cJSON_IsNull(v) ? 0 : get_float(c, v, k, -2, 2, &sp->presence_penalty);
    if (!strcmp(k, "frequency_penalty"))
        return cJSON_IsNull(v) ? 0 : get_float(c, v, k, -2, 2, &sp->freq_penalty);
    if (!strcmp(k, "repetition_penalty") || !strcmp(k, "repeat_penalty")) {
        if (cJSON_IsNull(v)) return 0;
        int st = get_float(c, v, k, 0, 10, &sp->repeat_penalty);
        if (!st && sp->repeat_penalty <= 0) return bad(c, k, "'%s' must be above 0", k);
        return st;
    }
    if (!strcmp(k, "repeat_last_n")) return get_int(c, v, k, -1, 1 << 24, &sp->penalty_last_n);
    if (!strcmp(k, "logit_bias")) return parse_bias(c, v);
    if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens") || !strcmp(k, "n_predict")) {
        if (cJSON_IsNull(v)) return 0;
        return get_int(c, v, k, 1, c->lim->max_tokens, &r->max_tokens);
    }
    if (!strcmp(k, "n")) return cJSON_IsNull(v) ? 0 : get_int(c, v, k, 1, c->lim->max_n, &r->n);
    if (!strcmp(k, "ignore_eos")) return get_bool(c, v, k, &r->ignore_eos);
    if (!strcmp(k, "lora")) return parse_lora(c, v);
    /* chat: "logprobs": true and "top_logprobs": 0..; completions: "logprobs": 0.. (OpenAI's
     * legacy shape, the number of alternatives) */
    if (kind == SERVE_CHAT && !strcmp(k, "logprobs"))
        return cJSON_IsNull(v) ? 0 : get_bool(c, v, k, &r->chat_logprobs);
    if (kind == SERVE_CHAT && !strcmp(k, "top_logprobs"))
        return cJSON_IsNull(v) ? 0 : get_int(c, v, k, 0, SERVE_TOP_LOGPROBS_MAX, &r->top_logprobs);
    if (kind == SERVE_COMPLETION && !strcmp(k, "logprobs"))
        return cJSON_IsNull(v) ? 0 : get_int(c, v, k, 0, SERVE_TOP_LOGPROBS_MAX, &r->logprobs);
    if (!strcmp(k, "response_format")) return parse_response_format(c, v);
    if (!strcmp(k, "grammar") || !strcmp(k, "json_schema")) return bad(c, k, "'%s' is not supported yet", k);
    return bad(c, k, "unrecognized request argument '%.64s'", k);
}

int serve_req_parse(serve_kind kind, const char *body, size_t len, const cera_sampler_params *defaults,
                    const serve_limits *lim, serve_req *out, char *msg, size_t cap, char *param,
                    size_t param_cap) {
    memset(out, 0, sizeof *out);
    parse_ctx c = {out, lim, msg, cap, param, param_cap};
    out->kind = kind;
    out->sp = *defaults;
    out->max_tokens = -1;
    out->n = 1;
    out->logprobs = out->top_logprobs = -1;
    int st = 0;
    if (!serve_utf8_valid(body, len)) {
        st = bad(&c, NULL, "the body is not valid UTF-8 text");
        goto fail;
    }
    if (json_depth(body, len) > lim->max_depth) {
        st = bad(&c, NULL, "the JSON nests deeper than %d levels", lim->max_depth);
        goto fail;
    }
    const char *end = NULL;
    out->root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!out->root) {
        st = bad(&c, NULL, "the body is not valid JSON (near byte %zu)",
                 end && end >= body ? (size_t)(end - body) : (size_t)0);
        goto fail;
    }
    for (; end && end < body + len; end++)
        if (*end != ' ' && *end != '\n' && *end != '\r' && *end != '\t') {
            st = bad(&c, NULL, "the body has text after its JSON value");
            goto fail;
        }
    if (!cJSON_IsObject(out->root)) {
        st = bad(&c, NULL, "the body must be a JSON object");
        goto fail;
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, out->root) {
        for (const cJSON *g = out->root->child; g != f; g = g->next)
            if (!strcmp(g->string, f->string)) {
                st = bad(&c, f->string, "'%.64s' is given twice", f->string);
                goto fail;
            }
        if ((st = parse_field(&c, kind, f))) goto fail;
    }
    if (kind == SERVE_CHAT && !out->msgs) {
        st = bad(&c, "messages", "'messages' is required");
        goto fail;
    }
    if (kind == SERVE_COMPLETION && out->n_prompts == 0) {
        st = bad(&c, "prompt", "'prompt' is required");
        goto fail;
    }
    if (kind == SERVE_CHAT && out->top_logprobs >= 0 && !out->chat_logprobs) {
        st = bad(&c, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        goto fail;
    }
    if (kind == SERVE_CHAT && out->chat_logprobs)
        out->logprobs = out->top_logprobs > 0 ? out->top_logprobs : 0;
    if (out->include_usage && !out->stream) {
        st = bad(&c, "stream_options", "'stream_options' is only allowed with stream");
        goto fail;
    }
    out->sp.logit_bias = out->bias;
    out->sp.n_logit_bias = out->n_bias;
    return 0;
fail:
    serve_req_free(out);
    return st;
}

void serve_req_free(serve_req *r) {
    cJSON_Delete(r->root);
    free(r->msgs);
    for (int i = 0; i < r->n_prompts; i++) free(r->prompt_ids[i]);
    free(r->bias);
    for (int i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    memset(r, 0, sizeof *r);
}

/* ---- Answers ------------------------------------------------------------------------- */

char *serve_error_json(int status, const char *message, const char *param) {
    const char *type = status == 401   ? "authentication_error"
                       : status == 404 ? "not_found_error"
                       : status == 503 ? "server_busy"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", type);
    if (param && *param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    cJSON_AddNumberToObject(e, "code", status);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

cJSON *serve_chat_message(cera_chat_format format, bool parse_tools, const char *text, size_t len,
                          const char *id_base, int *n_calls) {
    *n_calls = 0;
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    cJSON_AddStringToObject(m, "role", "assistant");
    cera_chat_reply rep;
    memset(&rep, 0, sizeof rep);
    /* the reply as a C string (generated text holds no NUL: the pieces are text) */
    char *t = malloc(len + 1);
    if (!t) goto oom;
    memcpy(t, text, len);
    t[len] = 0;
    if (!parse_tools || cera_chat_parse_as(format, t, len, &rep, NULL) != CERA_OK) {
        cJSON_AddStringToObject(m, "content", t);
        free(t);
        return m;
    }
    free(t);
    if (rep.n_tool_calls && !rep.content[0])
        cJSON_AddNullToObject(m, "content");
    else
        cJSON_AddStringToObject(m, "content", rep.content);
    if (rep.reasoning) cJSON_AddStringToObject(m, "reasoning_content", rep.reasoning);
    if (rep.n_tool_calls) {
        cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
        for (int i = 0; i < rep.n_tool_calls; i++) {
            cJSON *call = cJSON_CreateObject(), *fn;
            char id[96];
            snprintf(id, sizeof id, "call_%s_%d", id_base, i);
            cJSON_AddStringToObject(call, "id", rep.tool_calls[i].id ? rep.tool_calls[i].id : id);
            cJSON_AddStringToObject(call, "type", "function");
            fn = cJSON_AddObjectToObject(call, "function");
            cJSON_AddStringToObject(fn, "name", rep.tool_calls[i].name);
            cJSON_AddStringToObject(fn, "arguments", rep.tool_calls[i].arguments);
            cJSON_AddItemToArray(calls, call);
        }
        *n_calls = rep.n_tool_calls;
    }
    cera_chat_reply_free(&rep);
    return m;
oom:
    cJSON_Delete(m);
    return NULL;
}

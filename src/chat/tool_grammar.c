/*
 * tool_grammar.c — the grammar of a tool-call format: the GBNF that lets a model write only
 * calls of the given tools (names among them, arguments by each function's JSON Schema
 * `parameters`) in its format's syntax, and the words that switch it on when it is lazy.
 *
 * Each function's arguments are converted by the JSON-Schema converter under a rule name of
 * their own (LFM2: each parameter's value, since its calls are Python keyword arguments);
 * the converted rule sets are merged (the shared primitives, such as `space` or `string`,
 * are the same text in each) and the format's rules wrap them:
 *   Hermes   <tool_call>{"name": "f", "arguments": {...}}</tool_call>, one or more
 *   Llama 3  {"name": "f", "parameters": {...}}, several separated by ";"
 *   Mistral  [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "abcdef123"}, ...]
 *   LFM2     <|tool_call_start|>[f(a=1, b="x"), ...]<|tool_call_end|>
 *   generic  {"tool_calls": [{"name": "f", "arguments": {...}}, ...]} (templates without a
 *            tool syntax of their own: only when calls are required)
 * as llama.cpp's common/chat.cpp builds them, with the same triggers for tool_choice auto.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/internal.h"
#include "grammar/grammar.h"

#define MAX_TOOLS 256
#define MAX_NAME  64 /* function and parameter names, bytes */

/* A growable NUL-terminated text; on allocation failure it sets oom and stays valid. */
typedef struct text_buf {
    char *s;
    size_t n, cap;
    bool oom;
} text_buf;

static void text_add(text_buf *b, const char *t) {
    const size_t n = strlen(t);
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, t, n + 1);
    b->n += n;
}

static void text_addc(text_buf *b, char c) {
    const char t[2] = {c, 0};
    text_add(b, t);
}

static void text_free(text_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

/* The text (an empty one when nothing was added), or NULL when memory ran out. */
static char *text_take(text_buf *b) {
    if (!b->oom && !b->s) text_add(b, "");
    char *s = b->oom ? NULL : b->s;
    if (!s) free(b->s);
    memset(b, 0, sizeof *b);
    return s;
}

typedef struct rules {
    text_buf text; /* the merged rule lines */
    char **names;  /* [n] rule names defined so far, bodies in bodies[] */
    char **bodies;
    size_t n, cap;
    bool oom;
} rules;

static void rules_free(rules *r) {
    for (size_t i = 0; i < r->n; i++) {
        free(r->names[i]);
        free(r->bodies[i]);
    }
    free(r->names);
    free(r->bodies);
    text_free(&r->text);
}

/* Adds one rule; a name defined before with another body is a conflict (false). */
static bool rules_add(rules *r, const char *name, size_t nlen, const char *body, size_t blen) {
    for (size_t i = 0; i < r->n; i++)
        if (strlen(r->names[i]) == nlen && !memcmp(r->names[i], name, nlen))
            return strlen(r->bodies[i]) == blen && !memcmp(r->bodies[i], body, blen);
    if (r->n == r->cap) {
        const size_t cap = r->cap ? r->cap * 2 : 64;
        char **n = realloc(r->names, cap * sizeof *n), **b = n ? realloc(r->bodies, cap * sizeof *b) : NULL;
        if (n) r->names = n;
        if (!n || !b) {
            r->oom = true;
            return true;
        }
        r->bodies = b;
        r->cap = cap;
    }
    char *nn = malloc(nlen + 1), *bb = malloc(blen + 1);
    if (!nn || !bb) {
        free(nn);
        free(bb);
        r->oom = true;
        return true;
    }
    memcpy(nn, name, nlen);
    nn[nlen] = 0;
    memcpy(bb, body, blen);
    bb[blen] = 0;
    r->names[r->n] = nn;
    r->bodies[r->n++] = bb;
    text_add(&r->text, nn);
    text_add(&r->text, " ::= ");
    text_add(&r->text, bb);
    text_addc(&r->text, '\n');
    return true;
}

/* Adds a rule written here (name and body NUL-terminated). */
static void rule(rules *r, const char *name, const char *body) {
    rules_add(r, name, strlen(name), body, strlen(body));
}

/* Converts schema under the rule name `name`; *top (malloc'ed) the rule of the whole value. */
static cera_status add_schema(rules *r, const cJSON *schema, const char *name, char **top, cera_error *err) {
    char *json = schema ? cJSON_PrintUnformatted(schema) : NULL;
    if (!json && schema) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    const char *text = json ? json : "{\"type\":\"object\"}";
    char *gbnf = NULL;
    cera_status st = cera_json_schema_to_gbnf_rule(text, strlen(text), name, &gbnf, top, err);
    free(json);
    if (st) return st;
    for (const char *line = gbnf; *line;) {
        const char *end = strchr(line, '\n');
        if (!end) end = line + strlen(line);
        const char *sep = strstr(line, " ::= ");
        if (sep && sep < end && !rules_add(r, line, (size_t)(sep - line), sep + 5, (size_t)(end - sep - 5))) {
            st = cera_fail(err, CERA_ERR_UNSUPPORTED,
                           "tool grammar: two schemas define the rule %.*s differently", (int)(sep - line),
                           line);
            break;
        }
        line = *end ? end + 1 : end;
    }
    free(gbnf);
    return st;
}

/* A name the grammar can spell as a literal inside a JSON string and a Python call. */
static bool plain_name(const char *s) {
    if (!s || !*s || strlen(s) > MAX_NAME) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return false;
    return true;
}

/* LFM2: one call's keyword arguments, properties in the schema's order (the required ones
 * mandatory), into rule `call`: NAME(k1=v1, k2=v2). */
static cera_status add_python_call(rules *r, const char *call, const char *fname, const cJSON *params,
                                   cera_error *err) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(params, "required");
    const int n = cJSON_IsObject(props) ? cJSON_GetArraySize(props) : 0;
    char name[128], body[1024];
    /* first-K: the arguments from K on, none written yet; rest-K: after one was */
    snprintf(name, sizeof name, "%s-first%d", call, n);
    rule(r, name, "\"\"");
    snprintf(name, sizeof name, "%s-rest%d", call, n);
    rule(r, name, "\"\"");
    for (int k = n - 1; k >= 0; k--) {
        const cJSON *p = cJSON_GetArrayItem(props, k);
        if (!plain_name(p->string))
            return cera_fail(err, CERA_ERR_UNSUPPORTED, "tool grammar: function %s: parameter name \"%.64s\"",
                             fname, p->string);
        bool required = false;
        const cJSON *q;
        cJSON_ArrayForEach(q, req) if (cJSON_IsString(q) && !strcmp(q->valuestring, p->string)) required =
            true;
        char vname[160], *top = NULL;
        snprintf(vname, sizeof vname, "%s-%s", call, p->string);
        cera_status st = add_schema(r, p, vname, &top, err);
        if (st) return st;
        /* an optional argument may be left out: the same rule from the next one on */
        char skip[160] = "";
        snprintf(name, sizeof name, "%s-first%d", call, k);
        if (!required) snprintf(skip, sizeof skip, " | %s-first%d", call, k + 1);
        snprintf(body, sizeof body, "\"%s=\" %s %s-rest%d%s", p->string, top, call, k + 1, skip);
        rule(r, name, body);
        snprintf(name, sizeof name, "%s-rest%d", call, k);
        if (!required) snprintf(skip, sizeof skip, " | %s-rest%d", call, k + 1);
        snprintf(body, sizeof body, "\", \" \"%s=\" %s %s-rest%d%s", p->string, top, call, k + 1, skip);
        rule(r, name, body);
        free(top);
    }
    snprintf(body, sizeof body, "\"%s(\" %s-first0 \")\"", fname, call);
    rule(r, call, body);
    return CERA_OK;
}

/* A JSON call object {"name": "f", KEY: args[, "id": ...]} into rule `call`. */
static cera_status add_json_call(rules *r, const char *call, const char *fname, const cJSON *params,
                                 const char *key, bool with_id, cera_error *err) {
    char aname[160], *top = NULL, body[1024];
    snprintf(aname, sizeof aname, "%s-args", call);
    cera_status st = add_schema(r, params, aname, &top, err);
    if (st) return st;
    snprintf(body, sizeof body,
             "\"{\" space \"\\\"name\\\"\" space \":\" space \"\\\"%s\\\"\" space \",\" space \"\\\"%s\\\"\" "
             "space "
             "\":\" space %s%s space \"}\" space",
             fname, key, top,
             with_id ? " space \",\" space \"\\\"id\\\"\" space \":\" space \"\\\"\" [a-zA-Z0-9]{9} \"\\\"\""
                     : "");
    free(top);
    rule(r, call, body);
    return CERA_OK;
}

cera_status cera_chat_tool_grammar_build(cera_chat_format f, const char *tools, cera_tool_choice choice,
                                         const char *function, bool parallel, cera_chat_grammar *out,
                                         cera_error *err) {
    memset(out, 0, sizeof *out);
    out->format = f;
    if (choice == CERA_TOOL_CHOICE_NONE || !tools) return CERA_OK;
    if (f == CERA_CHAT_CONTENT) {
        /* no syntax of its own to trigger on: calls only when they are required */
        if (choice == CERA_TOOL_CHOICE_AUTO && !function) return CERA_OK;
        f = out->format = CERA_CHAT_GENERIC;
    }
    const bool lazy = choice == CERA_TOOL_CHOICE_AUTO && !function;
    cJSON *list = cJSON_Parse(tools);
    if (!cJSON_IsArray(list)) {
        cJSON_Delete(list);
        return cera_fail(err, CERA_ERR_INVALID_ARG, "tools: not a JSON array");
    }
    if (cJSON_GetArraySize(list) > MAX_TOOLS) {
        cJSON_Delete(list);
        return cera_fail(err, CERA_ERR_INVALID_ARG, "tools: more than %d", MAX_TOOLS);
    }
    rules r = {0};
    text_buf alts = {0};
    cera_status st = CERA_OK;
    int n_calls = 0, i = 0;
    const cJSON *tool;
    cJSON_ArrayForEach(tool, list) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(name)) {
            st = cera_fail(err, CERA_ERR_INVALID_ARG, "tools[%d]: no function.name", i);
            break;
        }
        if (!plain_name(name->valuestring)) {
            st = cera_fail(err, CERA_ERR_UNSUPPORTED,
                           "tools[%d]: function name \"%.64s\" (up to 64 letters, digits, _-.)", i,
                           name->valuestring);
            break;
        }
        i++;
        if (function && strcmp(function, name->valuestring)) continue;
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char call[32];
        snprintf(call, sizeof call, "tc%d-call", n_calls);
        if (f == CERA_CHAT_LFM2)
            st = add_python_call(&r, call, name->valuestring, params, err);
        else
            st = add_json_call(&r, call, name->valuestring, params,
                               f == CERA_CHAT_LLAMA3 ? "parameters" : "arguments", f == CERA_CHAT_MISTRAL,
                               err);
        if (st) break;
        if (n_calls++) text_add(&alts, " | ");
        text_add(&alts, call);
    }
    cJSON_Delete(list);
    if (st == CERA_OK && !n_calls)
        st = function ? cera_fail(err, CERA_ERR_INVALID_ARG, "tool_choice: no tool named \"%.64s\"", function)
                      : cera_fail(err, CERA_ERR_INVALID_ARG, "tools: the list is empty");
    if (st == CERA_OK) {
        rule(&r, "tc-call", alts.s ? alts.s : "");
        /* the further calls of a format that lists them, when parallel */
        const char *more = parallel ? " ( \",\" space tc-call )*" : "";
        char body[256];
        switch (f) {
        case CERA_CHAT_HERMES:
            rule(&r, "tc-one", "\"<tool_call>\" space tc-call \"</tool_call>\" space");
            snprintf(body, sizeof body, "tc-one%s", parallel ? "+" : "");
            break;
        case CERA_CHAT_LLAMA3:
            snprintf(body, sizeof body, "tc-call%s", parallel ? " ( \";\" space tc-call )*" : "");
            break;
        case CERA_CHAT_MISTRAL:
            snprintf(body, sizeof body, "\"[TOOL_CALLS]\" \"[\" space tc-call%s \"]\"", more);
            break;
        case CERA_CHAT_LFM2:
            snprintf(body, sizeof body,
                     "\"<|tool_call_start|>\" \"[\" tc-call%s \"]\" "
                     "\"<|tool_call_end|>\"",
                     more);
            break;
        default:
            snprintf(body, sizeof body,
                     "\"{\" space \"\\\"tool_calls\\\"\" space \":\" space \"[\" space tc-call%s \"]\" space "
                     "\"}\" space",
                     more);
            break;
        }
        rule(&r, "root", body);
    }
    static const char *const hermes[] = {"<tool_call>", NULL},
                             *const llama3[] = {"{\"name\"", "{ \"name\"", NULL},
                             *const mistral[] = {"[TOOL_CALLS]", NULL},
                             *const lfm2[] = {"<|tool_call_start|>", NULL};
    const char *const *words = f == CERA_CHAT_HERMES    ? hermes
                               : f == CERA_CHAT_LLAMA3  ? llama3
                               : f == CERA_CHAT_MISTRAL ? mistral
                               : f == CERA_CHAT_LFM2    ? lfm2
                                                        : NULL;
    if (st == CERA_OK && lazy && words) {
        size_t n = 0;
        while (words[n]) n++;
        if (!(out->triggers = calloc(n, sizeof *out->triggers))) r.oom = true;
        for (size_t k = 0; out->triggers && k < n; k++) {
            out->triggers[k].word = words[k];
            out->triggers[k].token = -1;
        }
        out->n_triggers = out->triggers ? n : 0;
    }
    text_free(&alts);
    if (st == CERA_OK && (r.oom || r.text.oom)) st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    if (st == CERA_OK) out->gbnf = text_take(&r.text);
    if (st == CERA_OK && !out->gbnf) st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    rules_free(&r);
    if (st) {
        free(out->triggers);
        memset(out, 0, sizeof *out);
        out->format = f;
    }
    return st;
}

/*
 * chat.c — the chat API of include/cera.h: a model's chat template opened and compiled
 * once, conversations rendered with it (the Jinja engine of src/template, inputs built as
 * transformers' apply_chat_template builds them), the rendered text tokenized as
 * llama.cpp's server tokenizes it, and replies split by the template's tool-call format
 * (src/chat).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "chat/chat.h"
#include "core/error.h"
#include "engine/engine_impl.h"
#include "template/template.h"

/* The template `--template chatml` gives when the model has none of that name: ChatML
 * as llama.cpp's fallback writes it. */
static const char chatml[] =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n";

struct cera_chat_template {
    cera_template *tmpl;
    cera_chat_format format;
    char *bos, *eos; /* the vocabulary's strings, or NULL */
};

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* The text of a special token (bos/eos) as the template sees it, or NULL when none. */
static cera_status token_text(const cera_engine *e, cera_token id, char **out, cera_error *err) {
    *out = NULL;
    if (id < 0) return CERA_OK;
    size_t len = 0;
    const char *t = cera_tokenizer_text(e->tok, id, &len);
    if (!t) return CERA_OK;
    if (!(*out = dup_n(t, len))) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    return CERA_OK;
}

cera_status cera_chat_template_open(const cera_engine *engine, const char *name, const char *text, size_t len,
                                    cera_chat_template **out, cera_error *err) {
    cera_error_clear(err);
    if (!out || (!engine && !text))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_chat_template_open: NULL argument");
    *out = NULL;
    if (!text) {
        char key[256];
        if (name && strlen(name) > 200) return cera_fail(err, CERA_ERR_INVALID_ARG, "template name too long");
        if (name)
            snprintf(key, sizeof key, "tokenizer.chat_template.%s", name);
        else
            snprintf(key, sizeof key, "tokenizer.chat_template");
        gguf_str s;
        if (gguf_get_str(engine->file, key, &s)) {
            text = s.data;
            len = s.len;
        } else if (name && !strcmp(name, "chatml")) {
            text = chatml;
            len = sizeof chatml - 1;
        } else {
            return cera_fail(err, CERA_ERR_NOT_FOUND, "the model has no chat template (%s)%s", key,
                             name ? "" : ": give one (a file), or the built-in 'chatml'");
        }
    }
    cera_chat_template *t = calloc(1, sizeof *t);
    if (!t) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    cera_status st = cera_template_compile(text, len, &t->tmpl, err);
    if (st == CERA_OK) {
        t->format = cera_chat_detect_format(text, len);
        if (engine && (st = token_text(engine, cera_tokenizer_bos(engine->tok), &t->bos, err)) == CERA_OK)
            st = token_text(engine, cera_tokenizer_eos(engine->tok), &t->eos, err);
    }
    if (st != CERA_OK) {
        cera_chat_template_free(t);
        return st;
    }
    *out = t;
    return CERA_OK;
}

void cera_chat_template_free(cera_chat_template *t) {
    if (!t) return;
    cera_template_free(t->tmpl);
    free(t->bos);
    free(t->eos);
    free(t);
}

cera_chat_format cera_chat_template_format(const cera_chat_template *t) {
    return t ? t->format : CERA_CHAT_CONTENT;
}

const char *cera_chat_format_name(cera_chat_format f) {
    switch (f) {
    case CERA_CHAT_CONTENT: return "content";
    case CERA_CHAT_HERMES: return "hermes";
    case CERA_CHAT_LFM2: return "lfm2";
    case CERA_CHAT_LLAMA3: return "llama3";
    case CERA_CHAT_MISTRAL: return "mistral";
    case CERA_CHAT_GENERIC: return "generic";
    }
    return "unknown";
}

cera_chat_params cera_chat_default_params(void) {
    cera_chat_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.add_generation_prompt = true;
    return p;
}

/* Adds a string field (NULL: nothing, or None when null_too). */
static bool add_str(cJSON *o, const char *key, const char *v, bool null_too) {
    if (!v) return !null_too || cJSON_AddNullToObject(o, key);
    return cJSON_AddStringToObject(o, key, v) != NULL;
}

/* Adds a field parsed from a JSON text; false (err set) when it does not parse or is not
 * of the kind asked for (want: cJSON_Array, cJSON_Object or 0 for any). */
static bool add_json(cJSON *o, const char *key, const char *text, int want, const char *what,
                     cera_error *err) {
    cJSON *v = cJSON_Parse(text);
    if (!v || (want && !(v->type & want))) {
        cJSON_Delete(v);
        cera_fail(err, CERA_ERR_INVALID_ARG, "%s is not a JSON %s", what,
                  want == cJSON_Array    ? "array"
                  : want == cJSON_Object ? "object"
                                         : "value");
        return false;
    }
    cJSON_AddItemToObject(o, key, v);
    return true;
}

/* The messages as transformers hands them to the template: a list of dicts. */
static cJSON *build_messages(const cera_chat_message *m, size_t n, cera_error *err) {
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; list && i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(list, o)) {
            cJSON_Delete(o);
            break;
        }
        char what[64];
        snprintf(what, sizeof what, "message %zu's ", i);
        if (!m[i].role) {
            cera_fail(err, CERA_ERR_INVALID_ARG, "message %zu has no role", i);
            goto bad;
        }
        if (!add_str(o, "role", m[i].role, false)) break;
        if (m[i].content_parts) {
            if (!add_json(o, "content", m[i].content_parts, cJSON_Array, strcat(what, "content_parts"), err))
                goto bad;
        } else if (!add_str(o, "content", m[i].content, true)) {
            break;
        }
        if (m[i].tool_calls) {
            snprintf(what, sizeof what, "message %zu's tool_calls", i);
            if (!add_json(o, "tool_calls", m[i].tool_calls, cJSON_Array, what, err)) goto bad;
        }
        if (!add_str(o, "tool_call_id", m[i].tool_call_id, false) || !add_str(o, "name", m[i].name, false) ||
            !add_str(o, "reasoning_content", m[i].reasoning_content, false))
            break;
        continue;
    bad:
        cJSON_Delete(list);
        return NULL;
    }
    if (!list || (size_t)cJSON_GetArraySize(list) != n) {
        cJSON_Delete(list);
        cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    return list;
}

cera_status cera_chat_render(const cera_chat_template *t, const cera_chat_message *messages, size_t n,
                             const cera_chat_params *params, char **out, size_t *out_len, cera_error *err) {
    cera_error_clear(err);
    if (!t || !out || (!messages && n))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_chat_render: NULL argument");
    *out = NULL;
    cera_chat_params p = cera_chat_default_params();
    cera_status st = cera_params_read(&p, sizeof p, params, "cera_chat_params", err);
    if (st != CERA_OK) return st;
    cJSON *msgs = build_messages(messages, n, err), *tools = NULL, *extra = NULL;
    if (!msgs) return err ? err->status : CERA_ERR_INVALID_ARG;
    cJSON *holder = cJSON_CreateObject();
    if (!holder) st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    if (st == CERA_OK && p.tools && !add_json(holder, "tools", p.tools, cJSON_Array, "tools", err))
        st = CERA_ERR_INVALID_ARG;
    if (st == CERA_OK && p.extra && !add_json(holder, "extra", p.extra, cJSON_Object, "extra", err))
        st = CERA_ERR_INVALID_ARG;
    if (st == CERA_OK) {
        tools = cJSON_GetObjectItemCaseSensitive(holder, "tools");
        extra = cJSON_GetObjectItemCaseSensitive(holder, "extra");
        cera_template_inputs in = {
            .messages = msgs,
            .tools = tools,
            .extra = extra,
            .bos_token = t->bos,
            .eos_token = t->eos,
            .add_generation_prompt = p.add_generation_prompt,
            .now = p.now ? (time_t)p.now : time(NULL),
        };
        size_t len = 0;
        st = cera_template_render(t->tmpl, &in, out, &len, err);
        if (st == CERA_OK && out_len) *out_len = len;
    }
    cJSON_Delete(holder);
    cJSON_Delete(msgs);
    return st;
}

cera_status cera_chat_tokenize(const cera_engine *e, const char *text, size_t len, cera_token **out,
                               size_t *n, cera_error *err) {
    cera_error_clear(err);
    if (!e || !out || !n || (!text && len))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_chat_tokenize: NULL argument");
    *out = NULL;
    *n = 0;
    /* the BOS the vocabulary adds replaces one the template wrote (llama.cpp strips the
     * template's, then adds its own: the same tokens) */
    const cera_token bos = cera_tokenizer_bos(e->tok);
    size_t bos_len = 0;
    const char *bos_text = bos >= 0 ? cera_tokenizer_text(e->tok, bos, &bos_len) : NULL;
    const bool add_bos = cera_tokenizer_add_bos(e->tok);
    if (add_bos && bos_text && bos_len && len >= bos_len && !memcmp(text, bos_text, bos_len)) {
        text += bos_len;
        len -= bos_len;
    }
    size_t need = 0;
    cera_status st = cera_tokenizer_encode(e->tok, text ? text : "", len, true, true, NULL, 0, &need, err);
    if (st != CERA_OK && st != CERA_ERR_INVALID_ARG) return st;
    cera_token *toks = malloc((need ? need : 1) * sizeof *toks);
    if (!toks) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    cera_error_clear(err);
    if ((st = cera_tokenizer_encode(e->tok, text ? text : "", len, true, true, toks, need, n, err)) !=
        CERA_OK) {
        free(toks);
        return st;
    }
    *out = toks;
    return CERA_OK;
}

cera_status cera_chat_parse(const cera_chat_template *t, const char *text, size_t len, cera_chat_reply *out,
                            cera_error *err) {
    cera_error_clear(err);
    if (!out || (!text && len)) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_chat_parse: NULL argument");
    memset(out, 0, sizeof *out);
    return cera_chat_parse_reply(cera_chat_template_format(t), text ? text : "", len, out, err);
}

cera_status cera_chat_parse_as(cera_chat_format f, const char *text, size_t len, cera_chat_reply *out,
                               cera_error *err) {
    cera_error_clear(err);
    if (!out || (!text && len))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_chat_parse_as: NULL argument");
    memset(out, 0, sizeof *out);
    return cera_chat_parse_reply(f, text ? text : "", len, out, err);
}

cera_status cera_chat_tool_grammar(const cera_chat_template *t, const char *tools, cera_tool_choice choice,
                                   const char *function, bool parallel, cera_chat_grammar *out,
                                   cera_error *err) {
    cera_error_clear(err);
    if (!out) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_chat_tool_grammar: NULL argument");
    if (choice < CERA_TOOL_CHOICE_AUTO || choice > CERA_TOOL_CHOICE_NONE) {
        memset(out, 0, sizeof *out);
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_chat_tool_grammar: tool_choice %d", (int)choice);
    }
    return cera_chat_tool_grammar_build(cera_chat_template_format(t), tools, choice, function, parallel, out,
                                        err);
}

void cera_chat_grammar_free(cera_chat_grammar *g) {
    if (!g) return;
    free(g->gbnf);
    free(g->triggers);
    memset(g, 0, sizeof *g);
}

void cera_chat_reply_free(cera_chat_reply *r) {
    if (r) cera_chat_reply_clear(r);
}

void cera_free(void *p) { free(p); }

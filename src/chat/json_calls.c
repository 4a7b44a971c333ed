/*
 * json_calls.c — the tool-call formats whose calls are JSON objects:
 *   Hermes   <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number, with
 *            content around them (Qwen 2.5, QwQ, Hermes 2/3, granite, ...);
 *   Llama 3  the whole reply is {"name": ..., "parameters": {...}} (or "arguments"),
 *            optionally after <|python_tag|>, several separated by ';';
 *   Mistral  [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...] and the v11+
 *            form [TOOL_CALLS]name[ARGS]{...} (with [CALL_ID]id before [ARGS] in some);
 *   generic  the whole reply is {"tool_calls": [...]} (or {"tool_call": {...}}), or
 *            {"response": "..."} for content (llama.cpp's format for templates without one).
 * Arguments arrive as an object or, in the wild, as a JSON string holding one; both give
 * the object's compact text. LFM2 reuses the call-object reader for JSON inside its
 * <|tool_call_start|> block.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/internal.h"

cJSON *chat_json_prefix(const char *s, size_t n, size_t *used) {
    size_t i = chat_skip_space(s, n, 0);
    if (i == n) return NULL;
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(s + i, n - i, &end, 0);
    if (!v) return NULL;
    /* cJSON_ParseWithLengthOpts leaves end past trailing whitespace; that is harmless */
    *used = (size_t)(end - s);
    if (*used > n) *used = n;
    return v;
}

cJSON *chat_arguments_object(chat_builder *b, const cJSON *args) {
    cJSON *obj = NULL;
    if (!args || cJSON_IsNull(args)) {
        obj = cJSON_CreateObject();
    } else if (cJSON_IsObject(args)) {
        obj = cJSON_Duplicate(args, 1);
    } else if (cJSON_IsString(args)) {
        const char *t = args->valuestring;
        size_t n = strlen(t), used = 0;
        if (chat_skip_space(t, n, 0) == n) {
            obj = cJSON_CreateObject();
        } else {
            cJSON *v = chat_json_prefix(t, n, &used);
            if (v && cJSON_IsObject(v) && chat_skip_space(t, n, used) == n) return v;
            cJSON_Delete(v);
            return NULL;
        }
    } else {
        return NULL;
    }
    if (!obj) b->oom = true;
    return obj;
}

static bool valid_name(const char *s) {
    if (!s || !*s) return false;
    for (; *s; s++)
        if (chat_is_space(*s)) return false;
    return true;
}

bool chat_add_call_object(chat_builder *b, const cJSON *obj) {
    if (!cJSON_IsObject(obj)) return false;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(obj, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(obj, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(obj, "parameters");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "id");
    if (!cJSON_IsString(name) || !valid_name(name->valuestring)) return false;
    cJSON *a = chat_arguments_object(b, args);
    if (!a) return false;
    const char *ids = cJSON_IsString(id) && id->valuestring[0] ? id->valuestring : NULL;
    bool ok = chat_add_call(b, name->valuestring, strlen(name->valuestring), ids, ids ? strlen(ids) : 0, a);
    cJSON_Delete(a);
    return ok;
}

bool chat_add_call_objects(chat_builder *b, const cJSON *v) {
    if (cJSON_IsObject(v)) return chat_add_call_object(b, v);
    if (!cJSON_IsArray(v) || !v->child) return false;
    int mark = b->n_calls;
    for (const cJSON *e = v->child; e; e = e->next) {
        if (!chat_add_call_object(b, e)) {
            chat_drop_calls(b, mark);
            return false;
        }
    }
    return true;
}

/* s[0, n) is exactly one JSON call (or array of calls), give or take whitespace. */
static bool add_whole_json(chat_builder *b, const char *s, size_t n) {
    size_t used = 0;
    cJSON *v = chat_json_prefix(s, n, &used);
    bool ok = v && chat_skip_space(s, n, used) == n && chat_add_call_objects(b, v);
    cJSON_Delete(v);
    return ok;
}

/* Finds each open ... close block in s[0, n); body() parses what is between. A block whose
 * body does not parse (or that never closes and does not parse to the end) stays content. */
static void parse_blocks(chat_builder *b, const char *s, size_t n, const char *open, const char *close,
                         bool (*body)(chat_builder *, const char *, size_t)) {
    size_t pos = 0, lo = strlen(open), lc = strlen(close);
    while (pos < n && !b->oom) {
        size_t at = chat_find(s, n, pos, open);
        if (at == CHAT_NPOS) break;
        size_t in = at + lo, end = chat_find(s, n, in, close);
        size_t in_end = end == CHAT_NPOS ? n : end, next = end == CHAT_NPOS ? n : end + lc;
        int mark = b->n_calls;
        if (body(b, s + in, in_end - in)) {
            chat_add_content(b, s + pos, at - pos);
        } else {
            chat_drop_calls(b, mark);
            chat_add_content(b, s + pos, next - pos);
        }
        pos = next;
    }
    if (pos < n) chat_add_content(b, s + pos, n - pos);
}

void chat_parse_hermes(chat_builder *b, const char *s, size_t n) {
    parse_blocks(b, s, n, "<tool_call>", "</tool_call>", add_whole_json);
}

static bool lfm2_body(chat_builder *b, const char *s, size_t n) {
    size_t i = chat_skip_space(s, n, 0);
    /* LFM2 writes JSON calls instead when its system prompt asks for them */
    if (i < n && (s[i] == '{' || (s[i] == '[' && chat_skip_space(s, n, i + 1) < n &&
                                  s[chat_skip_space(s, n, i + 1)] == '{')))
        return add_whole_json(b, s, n);
    return chat_add_python_calls(b, s, n);
}

void chat_parse_lfm2(chat_builder *b, const char *s, size_t n) {
    parse_blocks(b, s, n, "<|tool_call_start|>", "<|tool_call_end|>", lfm2_body);
}

/* Llama 3: all or nothing; a call must name its "parameters" (or "arguments") so that a
 * JSON answer such as {"name": "Bob"} stays content. */
void chat_parse_llama3(chat_builder *b, const char *s, size_t n) {
    size_t i = chat_skip_space(s, n, 0);
    if (chat_starts_with(s + i, n - i, "<|python_tag|>"))
        i = chat_skip_space(s, n, i + strlen("<|python_tag|>"));
    int mark = b->n_calls;
    bool ok = i < n && s[i] == '{';
    while (ok && i < n) {
        size_t used = 0;
        cJSON *v = chat_json_prefix(s + i, n - i, &used);
        ok = cJSON_IsObject(v) &&
             (cJSON_HasObjectItem(v, "parameters") || cJSON_HasObjectItem(v, "arguments")) &&
             chat_add_call_object(b, v);
        cJSON_Delete(v);
        if (!ok) break;
        i = chat_skip_space(s, n, i + used);
        if (i < n && s[i] == ';')
            i = chat_skip_space(s, n, i + 1);
        else if (i < n)
            ok = false;
    }
    if (!ok) {
        chat_drop_calls(b, mark);
        chat_add_content(b, s, n);
    }
}

void chat_parse_generic(chat_builder *b, const char *s, size_t n) {
    size_t used = 0;
    cJSON *v = chat_json_prefix(s, n, &used);
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(v, "tool_calls");
    if (!calls) calls = cJSON_GetObjectItemCaseSensitive(v, "tool_call");
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(v, "response");
    const bool whole = v && chat_skip_space(s, n, used) == n;
    if (whole && calls && chat_add_call_objects(b, calls)) {
        /* the calls are the reply */
    } else if (whole && cJSON_IsString(resp)) {
        chat_add_content(b, resp->valuestring, strlen(resp->valuestring));
    } else {
        chat_add_content(b, s, n);
    }
    cJSON_Delete(v);
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

/* One v11 call at s[*pos]: name[ARGS]{...} or name[CALL_ID]id[ARGS]{...}; advances *pos. */
static bool mistral_v11_call(chat_builder *b, const char *s, size_t n, size_t *pos) {
    size_t i = *pos, name = i;
    while (i < n && is_name_char(s[i])) i++;
    size_t name_len = i - name, id = 0, id_len = 0;
    if (name_len == 0) return false;
    if (chat_starts_with(s + i, n - i, "[CALL_ID]")) {
        id = i += strlen("[CALL_ID]");
        while (i < n && is_name_char(s[i])) i++;
        id_len = i - id;
        if (id_len == 0) return false;
    }
    if (!chat_starts_with(s + i, n - i, "[ARGS]")) return false;
    i += strlen("[ARGS]");
    size_t used = 0;
    cJSON *v = chat_json_prefix(s + i, n - i, &used);
    cJSON *args = v ? chat_arguments_object(b, v) : NULL;
    cJSON_Delete(v);
    if (!args) return false;
    bool ok = chat_add_call(b, s + name, name_len, id_len ? s + id : NULL, id_len, args);
    cJSON_Delete(args);
    *pos = i + used;
    return ok;
}

/* The text after one [TOOL_CALLS] marker, up to the next: calls, then any trailing text
 * (from *rest on) as content. */
static bool mistral_segment(chat_builder *b, const char *s, size_t n, size_t *rest) {
    size_t i = chat_skip_space(s, n, 0);
    if (i < n && (s[i] == '[' || s[i] == '{')) {
        size_t used = 0;
        cJSON *v = chat_json_prefix(s + i, n - i, &used);
        bool ok = v && chat_add_call_objects(b, v);
        cJSON_Delete(v);
        *rest = i + used;
        return ok;
    }
    if (!mistral_v11_call(b, s, n, &i)) return false;
    /* more name[ARGS]{...} without a marker of their own */
    for (;;) {
        size_t j = chat_skip_space(s, n, i);
        if (j >= n || !mistral_v11_call(b, s, n, &j)) break;
        i = j;
    }
    *rest = i;
    return true;
}

void chat_parse_mistral(chat_builder *b, const char *s, size_t n) {
    static const char marker[] = "[TOOL_CALLS]";
    size_t lm = strlen(marker), at = chat_find(s, n, 0, marker);
    chat_add_content(b, s, at == CHAT_NPOS ? n : at);
    while (at != CHAT_NPOS && !b->oom) {
        size_t next = chat_find(s, n, at + lm, marker), end = next == CHAT_NPOS ? n : next, rest = 0;
        int mark = b->n_calls;
        if (mistral_segment(b, s + at + lm, end - at - lm, &rest)) {
            chat_add_content(b, s + at + lm + rest, end - at - lm - rest);
        } else {
            chat_drop_calls(b, mark);
            chat_add_content(b, s + at, end - at);
        }
        at = next;
    }
}

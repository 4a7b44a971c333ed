/*
 * reply.c — splits a generated reply into reasoning, content and tool calls.
 *
 * The reasoning comes first: a <think>...</think> block at the start of the reply, or, when
 * the prompt itself opened the block (templates that end the generation prompt with
 * "<think>\n"), everything before a lone </think>. An unclosed <think> makes the whole rest
 * reasoning (the model stopped while thinking). What follows is handed to the format's
 * parser (internal.h), which gathers content and calls into the builder. Last, content and
 * reasoning are trimmed of surrounding whitespace, as llama.cpp's chat parser does.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/internal.h"

static const char think_open[] = "<think>", think_close[] = "</think>";

bool chat_is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

size_t chat_skip_space(const char *s, size_t n, size_t from) {
    while (from < n && chat_is_space(s[from])) from++;
    return from;
}

bool chat_starts_with(const char *s, size_t n, const char *prefix) {
    size_t k = strlen(prefix);
    return k <= n && memcmp(s, prefix, k) == 0;
}

size_t chat_find(const char *s, size_t n, size_t from, const char *needle) {
    size_t k = strlen(needle);
    if (k == 0 || from > n || n - from < k) return CHAT_NPOS;
    for (size_t i = from; i + k <= n; i++) {
        const char *hit = memchr(s + i, needle[0], n - k + 1 - i);
        if (!hit) return CHAT_NPOS;
        i = (size_t)(hit - s);
        if (memcmp(hit, needle, k) == 0) return i;
    }
    return CHAT_NPOS;
}

void chat_add_content(chat_builder *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->content, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->content = p;
        b->cap = cap;
    }
    memcpy(b->content + b->len, s, n);
    b->len += n;
}

static char *copy_text(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

bool chat_add_call(chat_builder *b, const char *name, size_t name_len, const char *id, size_t id_len,
                   const cJSON *args) {
    if (b->oom) return false;
    if (b->n_calls == b->cap_calls) {
        int cap = b->cap_calls ? b->cap_calls * 2 : 4;
        cera_tool_call *p = realloc(b->calls, (size_t)cap * sizeof *p);
        if (!p) {
            b->oom = true;
            return false;
        }
        b->calls = p;
        b->cap_calls = cap;
    }
    cera_tool_call c = {0};
    c.name = copy_text(name, name_len);
    c.id = id ? copy_text(id, id_len) : NULL;
    c.arguments = cJSON_PrintUnformatted(args);
    if (!c.name || (id && !c.id) || !c.arguments) {
        free(c.name);
        free(c.id);
        free(c.arguments);
        b->oom = true;
        return false;
    }
    b->calls[b->n_calls++] = c;
    return true;
}

void chat_drop_calls(chat_builder *b, int keep) {
    for (int i = keep; i < b->n_calls; i++) {
        free(b->calls[i].id);
        free(b->calls[i].name);
        free(b->calls[i].arguments);
    }
    if (keep < b->n_calls) b->n_calls = keep;
}

void cera_chat_reply_clear(cera_chat_reply *r) {
    if (!r) return;
    for (int i = 0; i < r->n_tool_calls; i++) {
        free(r->tool_calls[i].id);
        free(r->tool_calls[i].name);
        free(r->tool_calls[i].arguments);
    }
    free(r->tool_calls);
    free(r->content);
    free(r->reasoning);
    memset(r, 0, sizeof *r);
}

/* s[0, n) less surrounding whitespace, copied; NULL when empty and empty_null, or on OOM
 * (*oom set). */
static char *trimmed_copy(const char *s, size_t n, bool empty_null, bool *oom) {
    size_t a = chat_skip_space(s, n, 0);
    while (n > a && chat_is_space(s[n - 1])) n--;
    if (a == n && empty_null) return NULL;
    char *p = copy_text(s + a, n - a);
    if (!p) *oom = true;
    return p;
}

cera_status cera_chat_parse_reply(cera_chat_format f, const char *text, size_t len, cera_chat_reply *out,
                                  cera_error *err) {
    if (!out) return cera_fail(err, CERA_ERR_INVALID_ARG, "chat: no reply to fill");
    memset(out, 0, sizeof *out);
    if (!text) len = 0;
    if (!text) text = "";

    /* the reasoning: [r0, r1), and the rest from body on */
    size_t r0 = 0, r1 = 0, body = 0;
    bool has_reasoning = false;
    size_t start = chat_skip_space(text, len, 0);
    if (chat_starts_with(text + start, len - start, think_open)) {
        r0 = start + strlen(think_open);
        size_t close = chat_find(text, len, r0, think_close);
        r1 = close == CHAT_NPOS ? len : close;
        body = close == CHAT_NPOS ? len : close + strlen(think_close);
        has_reasoning = true;
    } else {
        /* a lone </think>: the prompt opened the block (a <think> before it, not at the
         * start, means the reply only talks about the tags) */
        size_t close = chat_find(text, len, 0, think_close);
        if (close != CHAT_NPOS && chat_find(text, close, 0, think_open) == CHAT_NPOS) {
            r1 = close;
            body = close + strlen(think_close);
            has_reasoning = true;
        }
    }

    chat_builder b = {0};
    const char *s = text + body;
    size_t n = len - body;
    switch (f) {
    case CERA_CHAT_HERMES: chat_parse_hermes(&b, s, n); break;
    case CERA_CHAT_LFM2: chat_parse_lfm2(&b, s, n); break;
    case CERA_CHAT_LLAMA3: chat_parse_llama3(&b, s, n); break;
    case CERA_CHAT_MISTRAL: chat_parse_mistral(&b, s, n); break;
    case CERA_CHAT_GENERIC: chat_parse_generic(&b, s, n); break;
    case CERA_CHAT_CONTENT:
    default: chat_add_content(&b, s, n); break;
    }

    bool oom = b.oom;
    if (!oom) out->content = trimmed_copy(b.content ? b.content : "", b.len, false, &oom);
    if (!oom && has_reasoning) out->reasoning = trimmed_copy(text + r0, r1 - r0, true, &oom);
    free(b.content);
    out->tool_calls = b.calls;
    out->n_tool_calls = b.n_calls;
    if (out->n_tool_calls == 0) {
        free(out->tool_calls);
        out->tool_calls = NULL;
    }
    if (oom) {
        cera_chat_reply_clear(out);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "chat: out of memory splitting a reply of %zu bytes", len);
    }
    return CERA_OK;
}

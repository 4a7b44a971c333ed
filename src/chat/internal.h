/*
 * internal.h — what the files of src/chat/ share: the reply builder (content being
 * gathered, tool calls found so far), text search helpers, the JSON call-object reader and
 * one parser per tool-call format (json_calls.c: Hermes, Llama 3, Mistral; pythonic.c:
 * LFM2's Python-style calls).
 *
 * Out of memory is sticky in the builder (b->oom): parsers go on or stop as they like and
 * cera_chat_parse_reply turns it into CERA_ERR_NO_MEMORY at the end, so a format's parser
 * only has to say whether a piece of markup parsed. A parse that fails after adding calls
 * drops them again (chat_drop_calls to the mark it took), so a segment is all or nothing.
 */
#ifndef CERA_CHAT_INTERNAL_H
#define CERA_CHAT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat.h"

typedef struct cJSON cJSON;

#define CHAT_NPOS ((size_t)-1)

typedef struct chat_builder {
    char *content; /* [len] gathered so far, not NUL-terminated until the end */
    size_t len, cap;
    cera_tool_call *calls; /* [n_calls] */
    int n_calls, cap_calls;
    bool oom;
} chat_builder;

/* Appends n bytes of s to the content. */
void chat_add_content(chat_builder *b, const char *s, size_t n);
/* Appends a call: name (name_len bytes), id (id_len bytes; NULL for none), arguments printed
 * compact from args (a JSON object). False on out of memory (b->oom set). */
bool chat_add_call(chat_builder *b, const char *name, size_t name_len, const char *id, size_t id_len,
                   const cJSON *args);
/* Frees the calls past the first keep. */
void chat_drop_calls(chat_builder *b, int keep);

/* The first occurrence of the NUL-terminated needle in s[from, n), or CHAT_NPOS. */
size_t chat_find(const char *s, size_t n, size_t from, const char *needle);
bool chat_starts_with(const char *s, size_t n, const char *prefix);
bool chat_is_space(char c);
/* s[from, n) less leading whitespace: the index of the first other byte (n when none). */
size_t chat_skip_space(const char *s, size_t n, size_t from);

/* Parses one JSON value at the start of s[0, n) (leading whitespace skipped); *used gets
 * the bytes up to its end. NULL when there is no value there (cJSON cannot tell that apart
 * from running out of memory, so a failed parse counts as malformed text). */
cJSON *chat_json_prefix(const char *s, size_t n, size_t *used);
/* A call's arguments as an object: the object itself (copied), a JSON string holding an
 * object (parsed; "" is {}), NULL (missing: {}). NULL when they are something else or
 * memory ran out (then b->oom is set). */
cJSON *chat_arguments_object(chat_builder *b, const cJSON *args);
/* Adds one call from an object {"name": "...", "arguments" or "parameters": ..., "id"?:
 * "..."}; false (nothing added) when obj is not such an object. */
bool chat_add_call_object(chat_builder *b, const cJSON *obj);
/* Adds the calls of an object or a non-empty array of call objects; false (nothing added)
 * when any element is not a call. */
bool chat_add_call_objects(chat_builder *b, const cJSON *v);

/* One parser per format: s[0, n) is the reply less its reasoning; each adds content and
 * calls to b. */
void chat_parse_hermes(chat_builder *b, const char *s, size_t n);
void chat_parse_llama3(chat_builder *b, const char *s, size_t n);
void chat_parse_mistral(chat_builder *b, const char *s, size_t n);
void chat_parse_lfm2(chat_builder *b, const char *s, size_t n);
void chat_parse_generic(chat_builder *b, const char *s, size_t n);

/* LFM2's calls, "[f(a=1, b='x'), g()]" or "f(a=1)" (pythonic.c): converts the Python
 * literals to JSON and adds one call per function; false (nothing added) when s[0, n) is
 * not such a list with nothing else but whitespace around it. */
bool chat_add_python_calls(chat_builder *b, const char *s, size_t n);

#endif

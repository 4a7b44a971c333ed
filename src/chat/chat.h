/*
 * chat.h — the engine-independent core of cera's chat API: which tool-call syntax a chat
 * template's model writes, and how to split a generated reply into reasoning, content and
 * tool calls.
 *
 * src/engine/chat.c (the public cera_chat_* functions) calls these; nothing here knows about
 * models, vocabularies or sessions. A reply is untrusted text: every path is bounded, and
 * markup that does not parse as the format's tool calls stays in the content (never an
 * error). The supported syntaxes are the five of cera_chat_format (include/cera.h).
 */
#ifndef CERA_CHAT_H
#define CERA_CHAT_H

#include <stddef.h>

#include "core/error.h"

/* The tool-call format of a chat template's replies, chosen from the template's text
 * (markers such as "<tool_call>", "<|tool_call_start|>", "[TOOL_CALLS]", Llama 3's
 * "<|python_tag|>"/"{\"name\"" ... "parameters"). CERA_CHAT_CONTENT when none, and also
 * for templates whose tool syntax is none of the five (XML-style <function=...>, GLM's
 * <arg_key>, DeepSeek's, Kimi's, ...): their calls are then left in the content. */
cera_chat_format cera_chat_detect_format(const char *tmpl, size_t len);

/* Splits a generated reply (len bytes, need not be NUL-terminated): reasoning
 * (<think>...</think> at the start, or the text before a lone </think> when the prompt
 * opened the think block; trimmed; NULL when there is none or it is empty), tool calls in
 * the format's syntax, the rest as content (whitespace trimmed at both ends; "" when
 * none). Malformed tool-call markup stays in the content, never an error; only
 * CERA_ERR_NO_MEMORY is (out is then zeroed). *out must not hold a reply (it is
 * overwritten); free it with cera_chat_reply_clear. */
cera_status cera_chat_parse_reply(cera_chat_format f, const char *text, size_t len, cera_chat_reply *out,
                                  cera_error *err);

/* The grammar of format f's tool calls (cera_chat_tool_grammar in include/cera.h; out is
 * zeroed first, and on an error). */
cera_status cera_chat_tool_grammar_build(cera_chat_format f, const char *tools, cera_tool_choice choice,
                                         const char *function, bool parallel, cera_chat_grammar *out,
                                         cera_error *err);

/* Frees every string and the call array of r and zeroes it (r may be NULL). */
void cera_chat_reply_clear(cera_chat_reply *r);

#endif

/*
 * detect.c — which tool-call syntax a chat template's model writes, read from the
 * template's text.
 *
 * A template shows the syntax twice: in the instructions it puts in the system prompt and
 * in how it renders an assistant turn's tool_calls. The rules below look for the markers
 * of the five supported syntaxes, most specific first. Templates whose calls look like
 * Hermes' but are not JSON inside (<tool_call><function=f><parameter=...> of Qwen3-Coder and
 * Nemotron, GLM's <arg_key>, MiniMax's <invoke>, Apriel's <tool_calls>) are none of the
 * five and get CERA_CHAT_CONTENT, as do the other families (DeepSeek, Kimi, Command-R,
 * Gemma, functionary, ...): a reply of theirs is content, with its reasoning split off.
 */
#include <string.h>

#include "chat/internal.h"

static bool has(const char *t, size_t n, const char *marker) {
    return chat_find(t, n, 0, marker) != CHAT_NPOS;
}

cera_chat_format cera_chat_detect_format(const char *tmpl, size_t len) {
    if (!tmpl) return CERA_CHAT_CONTENT;
    /* LFM2: <|tool_call_start|> where the template renders calls; LFM2-8B's and LFM2.5's
     * templates only introduce the tool list ("List of tools: <|tool_list_start|>[" or
     * "List of tools: ["), the models still answer with <|tool_call_start|>. */
    if (has(tmpl, len, "<|tool_call_start|>") || has(tmpl, len, "<|tool_list_start|>") ||
        has(tmpl, len, "List of tools: ["))
        return CERA_CHAT_LFM2;
    if (has(tmpl, len, "[TOOL_CALLS]")) return CERA_CHAT_MISTRAL;
    if (has(tmpl, len, "<tool_call>") && has(tmpl, len, "\"name") && has(tmpl, len, "arguments") &&
        !has(tmpl, len, "<function=") && !has(tmpl, len, "<arg_key>") && !has(tmpl, len, "<invoke") &&
        !has(tmpl, len, "<tool_calls>"))
        return CERA_CHAT_HERMES;
    /* Llama 3.1/3.3 name <|python_tag|> (built-in tools); 3.2 only asks for
     * {"name": ..., "parameters": ...} in its header-delimited turns. */
    if (has(tmpl, len, "<|python_tag|>") ||
        (has(tmpl, len, "<|start_header_id|>") && has(tmpl, len, "\"parameters\"")))
        return CERA_CHAT_LLAMA3;
    return CERA_CHAT_CONTENT;
}

/*
 * test_chat_golden.c — src/chat against the real chat templates of
 * shared/golden/templates (shared/golden/templates/README.md says what a case holds).
 *
 * 1. The detected tool-call format of every template folder, against a table written by
 *    reading each template (a folder missing from the table fails, so new goldens get a
 *    row).
 * 2. How each template itself renders an assistant's tool call (cases 07, 08, 09): the
 *    rendered call is cut out of `expected` — from the format's marker after the user's
 *    question to the first end-of-turn token — and parsed back; the name, the arguments
 *    (compared as JSON structures) and the id (when the rendering carries it) must be the
 *    case's.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/chat.h"
#include "testutil.h"

static const struct {
    const char *dir;
    cera_chat_format format;
} expected_formats[] = {
    {"Apertus-8B-Instruct", CERA_CHAT_CONTENT},          /* <|tools_prefix|>[{"f": {...}}] */
    {"Apriel-1.6-15b-Thinker-fixed", CERA_CHAT_CONTENT}, /* <tool_calls>[...] */
    {"Bielik-11B-v3.0-Instruct", CERA_CHAT_HERMES},
    {"ByteDance-Seed-OSS", CERA_CHAT_CONTENT},                            /* <seed:tool_call><function=...> */
    {"CohereForAI-c4ai-command-r-plus-tool_use", CERA_CHAT_CONTENT},      /* Action: ```json */
    {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", CERA_CHAT_CONTENT}, /* <|START_ACTION|> */
    {"GLM-4.6", CERA_CHAT_CONTENT},                                       /* <tool_call>f<arg_key>... */
    {"GLM-4.7-Flash", CERA_CHAT_CONTENT},
    {"GigaChat3.1-10B-A1.8B", CERA_CHAT_CONTENT},    /* <|function_call|> */
    {"HuggingFaceTB-SmolLM3-3B", CERA_CHAT_CONTENT}, /* this copy has no tool syntax */
    {"Kimi-K2-Instruct", CERA_CHAT_CONTENT},         /* <|tool_calls_section_begin|> */
    {"Kimi-K2-Thinking", CERA_CHAT_CONTENT},
    {"LFM2-8B-A1B", CERA_CHAT_LFM2}, /* <|tool_list_start|> */
    {"LFM2.5-8B-A1B", CERA_CHAT_LFM2},
    {"LFM2.5-Instruct", CERA_CHAT_LFM2}, /* "List of tools: [" */
    {"MiMo-VL", CERA_CHAT_HERMES},
    {"MiniMax-M2", CERA_CHAT_CONTENT}, /* <minimax:tool_call><invoke> */
    {"MiniMax-M3", CERA_CHAT_CONTENT}, /* <tool_call><invoke> */
    {"Mistral-Small-3.2-24B-Instruct-2506", CERA_CHAT_MISTRAL},
    {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", CERA_CHAT_CONTENT}, /* <tool_call><function=...> */
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", CERA_CHAT_HERMES},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", CERA_CHAT_HERMES},
    {"Qwen-QwQ-32B", CERA_CHAT_HERMES},
    {"Qwen-Qwen2.5-7B-Instruct", CERA_CHAT_HERMES},
    {"Qwen3-Coder", CERA_CHAT_CONTENT}, /* <tool_call><function=...> */
    {"Qwen3.5-4B", CERA_CHAT_CONTENT},
    {"Reka-Edge", CERA_CHAT_HERMES},
    {"StepFun3.5-Flash", CERA_CHAT_CONTENT},                         /* <tool_call><function=...> */
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", CERA_CHAT_CONTENT}, /* <｜tool▁calls▁begin｜> */
    {"deepseek-ai-DeepSeek-V3.1", CERA_CHAT_CONTENT},
    {"deepseek-ai-DeepSeek-V3.2", CERA_CHAT_CONTENT}, /* <｜DSML｜function_calls> */
    {"deepseek-ai-DeepSeek-V4-Flash-0731", CERA_CHAT_CONTENT},
    {"fireworks-ai-llama-3-firefunction-v2", CERA_CHAT_CONTENT}, /* functools[...] */
    {"google-gemma-2-2b-it", CERA_CHAT_CONTENT},
    {"google-gemma-4-31B-it", CERA_CHAT_CONTENT}, /* <|tool_call>call:f{...} */
    {"google-gemma-4-31B-it-interleaved", CERA_CHAT_CONTENT},
    {"ibm-granite-granite-4.0", CERA_CHAT_HERMES},
    {"ibm-granite-granite-4.1", CERA_CHAT_HERMES},
    {"llama-cpp-deepseek-r1", CERA_CHAT_CONTENT},
    {"llama-cpp-rwkv-world", CERA_CHAT_CONTENT},
    {"meetkai-functionary-medium-v3.2", CERA_CHAT_CONTENT}, /* >>>f\n{...} */
    {"meta-llama-Llama-3.1-8B-Instruct", CERA_CHAT_LLAMA3},
    {"meta-llama-Llama-3.2-3B-Instruct", CERA_CHAT_LLAMA3},
    {"meta-llama-Llama-3.3-70B-Instruct", CERA_CHAT_LLAMA3},
    {"mistralai-Ministral-3-14B-Reasoning-2512", CERA_CHAT_MISTRAL},
    {"mistralai-Mistral-Nemo-Instruct-2407", CERA_CHAT_MISTRAL},
    {"moonshotai-Kimi-K2", CERA_CHAT_CONTENT},
    {"muse-glimmer", CERA_CHAT_CONTENT},          /* <atem:function_calls> */
    {"openbmb-MiniCPM5-1B", CERA_CHAT_CONTENT},   /* <function name=...><param> */
    {"poolside-Laguna-S-2.1", CERA_CHAT_CONTENT}, /* <tool_call>f<arg_key>... */
    {"poolside-Laguna-XS-2.1", CERA_CHAT_CONTENT},
    {"poolside-Laguna-XS.2", CERA_CHAT_CONTENT},
    {"unsloth-Apriel-1.5", CERA_CHAT_CONTENT}, /* <tool_calls>[...] */
    {"unsloth-mistral-Devstral-Small-2507", CERA_CHAT_MISTRAL},
    {"upstage-Solar-Open-100B", CERA_CHAT_CONTENT}, /* <|tool_call:begin|> */
};
#define N_FORMATS (sizeof expected_formats / sizeof *expected_formats)

static const char *format_str(cera_chat_format f) {
    static const char *names[] = {"content", "hermes", "lfm2", "llama3", "mistral"};
    return (unsigned)f < 5 ? names[f] : "?";
}

/* tokens that end an assistant turn in the templates above */
static const char *turn_ends[] = {"<|im_end|>",      "<|eot_id|>", "<|eom_id|>", "</s>",
                                  "<|end_of_text|>", "<sep>",      "<|end|>",    "[TOOL_RESULTS]"};

static int checked_calls, not_rendered;

static const char *marker_of(cera_chat_format f) {
    switch (f) {
    case CERA_CHAT_HERMES: return "<tool_call>";
    case CERA_CHAT_LFM2: return "<|tool_call_start|>";
    case CERA_CHAT_MISTRAL: return "[TOOL_CALLS]";
    case CERA_CHAT_LLAMA3: return "{\"name\"";
    default: return NULL;
    }
}

static void check_case(const char *dir, const char *file, cera_chat_format f) {
    char rel[512];
    snprintf(rel, sizeof rel, "golden/templates/%s/%s", dir, file);
    char *text = read_file(shared_path(rel), NULL);
    if (!text) return; /* the case does not apply to this template */
    cJSON *c = cJSON_Parse(text);
    free(text);
    CHECK(c != NULL, "%s: not JSON", rel);
    const cJSON *expected = cJSON_GetObjectItemCaseSensitive(c, "expected");
    if (!cJSON_IsString(expected)) { /* a case the template fails to render */
        cJSON_Delete(c);
        return;
    }
    const char *out = expected->valuestring;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages"), *user = NULL, *calls = NULL;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "user") && !calls) user = m;
        if (cJSON_IsArray(tc) && cJSON_GetArraySize(tc) > 0 && !calls) calls = tc;
    }
    const cJSON *question = user ? cJSON_GetObjectItemCaseSensitive(user, "content") : NULL;
    CHECK(calls && cJSON_IsString(question), "%s: no user question or tool call", rel);
    if (!calls || !cJSON_IsString(question)) {
        cJSON_Delete(c);
        return;
    }
    /* the rendered call: from the marker after the question to the turn's end */
    const char *q = strstr(out, question->valuestring);
    const char *start = q ? strstr(q + strlen(question->valuestring), marker_of(f)) : NULL;
    if (f == CERA_CHAT_LLAMA3 && start) {
        const char *tag = strstr(q, "<|python_tag|>");
        if (tag && tag < start) start = tag;
    }
    if (!start) { /* LFM2-8B and LFM2.5-Instruct render only the content of a tool call */
        not_rendered++;
        printf("%s: the template does not render the tool call\n", rel);
        cJSON_Delete(c);
        return;
    }
    const char *end = start + strlen(start);
    for (size_t i = 0; i < sizeof turn_ends / sizeof *turn_ends; i++) {
        const char *e = strstr(start, turn_ends[i]);
        if (e && e < end) end = e;
    }
    cera_chat_reply r;
    cera_error err = {0};
    CHECK(cera_chat_parse_reply(f, start, (size_t)(end - start), &r, &err) == CERA_OK, "%s: %s", rel,
          err.message);
    int n = cJSON_GetArraySize(calls);
    CHECK(r.n_tool_calls == n, "%s: %d calls, want %d in '%.*s'", rel, r.n_tool_calls, n, (int)(end - start),
          start);
    CHECK(r.content && r.content[0] == 0, "%s: content '%s'", rel, r.content ? r.content : "(null)");
    for (int i = 0; i < n && i < r.n_tool_calls; i++) {
        const cJSON *call = cJSON_GetArrayItem(calls, i);
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
        cJSON *want = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : cJSON_Duplicate(args, 1);
        cJSON *got = cJSON_Parse(r.tool_calls[i].arguments);
        CHECK(cJSON_IsString(name) && !strcmp(r.tool_calls[i].name, name->valuestring), "%s: name '%s'", rel,
              r.tool_calls[i].name);
        CHECK(want && got && cJSON_Compare(want, got, 1), "%s: arguments %s", rel, r.tool_calls[i].arguments);
        bool id_rendered =
            cJSON_IsString(id) && strstr(start, id->valuestring) && strstr(start, id->valuestring) < end;
        CHECK(id_rendered ? r.tool_calls[i].id && !strcmp(r.tool_calls[i].id, id->valuestring)
                          : r.tool_calls[i].id == NULL,
              "%s: id '%s'", rel, r.tool_calls[i].id ? r.tool_calls[i].id : "(null)");
        cJSON_Delete(want);
        cJSON_Delete(got);
        checked_calls++;
    }
    cera_chat_reply_clear(&r);
    cJSON_Delete(c);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
    const char *root = shared_path("golden/templates");
    DIR *d = opendir(root);
    if (!d) {
        fprintf(stderr, "no %s: skipped\n", root);
        return TEST_SKIP_CODE;
    }
    char *names[256];
    size_t n_dirs = 0;
    for (struct dirent *e; (e = readdir(d)) && n_dirs < 256;) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s/template.jinja", root, e->d_name);
        if (e->d_name[0] != '.' && file_exists(path)) names[n_dirs++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n_dirs, sizeof *names, by_name);
    CHECK(n_dirs == N_FORMATS, "%zu template folders, %zu in the table", n_dirs, N_FORMATS);

    int with_calls = 0;
    for (size_t i = 0; i < n_dirs; i++) {
        char rel[512];
        snprintf(rel, sizeof rel, "golden/templates/%s/template.jinja", names[i]);
        size_t len = 0;
        char *t = read_file(shared_path(rel), &len);
        CHECK(t != NULL, "cannot read %s", rel);
        cera_chat_format got = cera_chat_detect_format(t, len), want = CERA_CHAT_CONTENT;
        free(t);
        size_t k = 0;
        while (k < N_FORMATS && strcmp(expected_formats[k].dir, names[i])) k++;
        CHECK(k < N_FORMATS, "%s: not in the table", names[i]);
        if (k < N_FORMATS) want = expected_formats[k].format;
        CHECK(got == want, "%s: detected %s, want %s", names[i], format_str(got), format_str(want));
        if (got != CERA_CHAT_CONTENT && got == want) {
            with_calls++;
            check_case(names[i], "case07.json", got);
            check_case(names[i], "case08.json", got);
            check_case(names[i], "case09.json", got);
        }
        free(names[i]);
    }
    CHECK(cera_chat_detect_format(NULL, 0) == CERA_CHAT_CONTENT, "NULL template");
    printf(
        "%d templates with a tool-call format, %d rendered calls parsed back, %d cases not rendering one\n",
        with_calls, checked_calls, not_rendered);
    CHECK(checked_calls >= 40, "only %d rendered calls checked", checked_calls);
    return test_finish();
}

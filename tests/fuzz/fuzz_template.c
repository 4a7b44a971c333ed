/*
 * fuzz_template.c — libFuzzer harness for the chat-template engine (src/template).
 *
 * The input is a template text, compiled and then rendered with a small fixed
 * conversation (system, user, assistant with a tool call, tool result; one tool) and
 * tight limits. Whatever the text, compiling and rendering must end with either text
 * (NUL-terminated at its length) or an error with a message: no crash, no sanitizer
 * report, no hang (the step, depth, output and memory limits bound every render).
 *
 * Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt when CERA_FUZZ is on,
 * otherwise linked with replay.c to replay the seed corpus as a normal test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "template/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

static const char conversation[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \\u00e9 {{ x }} <|im_end|>\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call1\", \"type\": "
    "\"function\","
    "   \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"{\\\"t\\\": 21.5}\", \"tool_call_id\": \"call1\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\","
    "   \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}},"
    "   \"required\": [\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"extra\": {\"enable_thinking\": false, \"n\": 3, \"f\": 0.5}}";

static cJSON *g_case;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_case) g_case = cJSON_Parse(conversation);
    REQUIRE(g_case != NULL);
    cera_error err = {0};
    cera_template *t = NULL;
    if (cera_template_compile((const char *)data, size, &t, &err) != CERA_OK) {
        REQUIRE(t == NULL && err.status != CERA_OK && err.message[0]);
        return 0;
    }
    cera_template_inputs in = {
        .messages = cJSON_GetObjectItemCaseSensitive(g_case, "messages"),
        .tools = cJSON_GetObjectItemCaseSensitive(g_case, "tools"),
        .extra = cJSON_GetObjectItemCaseSensitive(g_case, "extra"),
        .bos_token = "<s>",
        .eos_token = "</s>",
        .add_generation_prompt = 1,
        .now = CERA_TEMPLATE_GOLDEN_NOW,
        .limits = {.max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .max_depth = 32},
    };
    char *out = NULL;
    size_t n = 0;
    cera_status st = cera_template_render(t, &in, &out, &n, &err);
    if (st == CERA_OK) {
        REQUIRE(out != NULL && out[n] == 0 && n <= (1u << 20));
    } else {
        REQUIRE(out == NULL && err.status == st);
    }
    free(out);
    cera_template_free(t);
    return 0;
}

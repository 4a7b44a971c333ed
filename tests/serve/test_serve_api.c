/*
 * test_serve_api.c — the request parser of `cera serve` (tools/cera/serve_api.c) on good
 * and bad bodies, and the assistant message built from a reply: tool calls split out by a
 * Hermes template's format (SmolLM2's own template has none, so this is where the tool
 * path is checked), content left alone without tools.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "serve_api.h"
#include "testutil.h"

static const serve_limits lim = {
    .max_depth = 16, .max_tokens = 1000, .max_n = 4, .n_vocab = 100, .n_adapters = 2, .max_prompt = 50};

static int parse(serve_kind kind, const char *body, serve_req *r, char *msg) {
    char param[64];
    const cera_sampler_params d = cera_sampler_default_params();
    return serve_req_parse(kind, body, strlen(body), &d, &lim, r, msg, 300, param, sizeof param);
}

static void expect_400(serve_kind kind, const char *body, const char *why) {
    serve_req r;
    char msg[300];
    const int st = parse(kind, body, &r, msg);
    CHECK(st == 400, "%s: status %d for %s", why, st, body);
    CHECK(r.root == NULL && r.msgs == NULL, "%s: the request is left empty", why);
}

static void test_good(void) {
    serve_req r;
    char msg[300];
    int st =
        parse(SERVE_CHAT,
              "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
              "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],"
              "\"temperature\":0,\"top_p\":0.5,\"top_k\":7,\"min_p\":0.1,\"seed\":42,\"max_tokens\":9,"
              "\"stop\":[\"a\",\"bb\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
              "\"logit_bias\":{\"5\":-100,\"6\":2.5},\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,"
              "\"repetition_penalty\":1.1,\"n\":2,\"lora\":[{\"id\":1,\"scale\":0.5}],"
              "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"auto\"}",
              &r, msg);
    CHECK(st == 0, "a good chat body: %d %s", st, msg);
    if (st) return;
    CHECK(r.n_msgs == 2 && !strcmp(r.msgs[0].content, "be brief") && !strcmp(r.msgs[1].content, "hi"),
          "messages");
    CHECK(!strcmp(r.model, "m") && r.sp.temp == 0 && r.sp.top_p == 0.5f && r.sp.top_k == 7, "sampling");
    CHECK(r.has_seed && r.sp.seed == 42 && r.max_tokens == 9 && r.n == 2, "seed, max_tokens, n");
    CHECK(r.n_stop == 2 && !strcmp(r.stop[1], "bb") && r.stream && r.include_usage, "stop, stream");
    CHECK(r.sp.n_logit_bias == 2 && isinf(r.sp.logit_bias[0].bias) && r.sp.logit_bias[1].bias == 2.5f,
          "bias");
    CHECK(r.sp.presence_penalty == 0.5f && r.sp.freq_penalty == -0.5f && r.sp.repeat_penalty == 1.1f,
          "penalties");
    CHECK(r.has_lora && r.n_lora == 1 && r.lora[0].id == 1 && r.lora[0].scale == 0.5f, "lora");
    CHECK(r.tools && !r.tool_choice_none && !r.tool_required && !r.gbnf, "tools");
    serve_req_free(&r);

    /* response_format: the schema's grammar (as cera_json_schema_to_grammar writes it) */
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}";
    char body[512], *want = NULL;
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
             "\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":%s,\"strict\":true}}}",
             schema);
    st = parse(SERVE_CHAT, body, &r, msg);
    CHECK(cera_json_schema_to_grammar(schema, strlen(schema), &want, NULL) == CERA_OK, "the schema converts");
    CHECK(st == 0 && r.gbnf && want && !strcmp(r.gbnf, want), "json_schema: %d %s", st, msg);
    cera_free(want);
    serve_req_free(&r);
    st = parse(
        SERVE_CHAT,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":"
        "\"json_object\"},\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},\"parallel_tool_calls\":true}",
        &r, msg);
    CHECK(st == 0 && r.gbnf && strstr(r.gbnf, "root ::="), "json_object: %d %s", st, msg);
    CHECK(st == 0 && r.tool_required && r.tool_name && !strcmp(r.tool_name, "f") && r.parallel_tool_calls,
          "a named tool_choice");
    serve_req_free(&r);

    st = parse(SERVE_COMPLETION, "{\"prompt\":[1,2,3],\"max_completion_tokens\":4}", &r, msg);
    CHECK(st == 0 && r.n_prompt_tokens == 3 && r.prompt_tokens[2] == 3 && r.max_tokens == 4, "token prompt");
    serve_req_free(&r);
    st = parse(SERVE_COMPLETION, "{\"prompt\":[\"once\"]}", &r, msg);
    CHECK(st == 0 && r.prompt && !strcmp(r.prompt, "once") && r.max_tokens == -1, "a batch of one prompt");
    serve_req_free(&r);
    st = parse(SERVE_COMPLETION, "{\"prompt\":[\"once\",\"upon\",\"a\"]}", &r, msg);
    CHECK(st == 0 && r.n_prompts == 3 && !strcmp(r.prompt_text[1], "upon") && !strcmp(r.prompt, "once"),
          "an array of text prompts");
    serve_req_free(&r);
    st = parse(SERVE_COMPLETION, "{\"prompt\":[[1,2],[3],[4,5,6]]}", &r, msg);
    CHECK(st == 0 && r.n_prompts == 3 && r.n_prompt_ids[0] == 2 && r.n_prompt_ids[2] == 3 &&
              r.prompt_ids[2][2] == 6 && r.prompt_ids[1][0] == 3 && !r.prompt_text[1],
          "an array of token-id prompts");
    serve_req_free(&r);
    st = parse(SERVE_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":2}", &r, msg);
    CHECK(st == 0 && r.logprobs == 2, "completions' logprobs");
    serve_req_free(&r);
    st = parse(SERVE_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":3}",
               &r, msg);
    CHECK(st == 0 && r.logprobs == 3, "chat's logprobs and top_logprobs");
    serve_req_free(&r);
    st = parse(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true}", &r,
               msg);
    CHECK(st == 0 && r.logprobs == 0, "chat's logprobs alone: no alternatives");
    serve_req_free(&r);
}

static void test_bad(void) {
    expect_400(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]", "broken JSON");
    expect_400(SERVE_CHAT, "[1]", "not an object");
    expect_400(SERVE_CHAT, "{}", "no messages");
    expect_400(SERVE_CHAT, "{\"messages\":[]}", "empty messages");
    expect_400(SERVE_CHAT, "{\"messages\":\"hi\"}", "messages a string");
    expect_400(SERVE_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "unknown role");
    expect_400(SERVE_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", "content a number");
    expect_400(SERVE_CHAT,
               "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
               "image parts");
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[512];
    const char *fields[] = {
        "\"temperature\":\"hot\"",
        "\"temperature\":-1",
        "\"top_p\":2",
        "\"max_tokens\":0",
        "\"max_tokens\":1e30",
        "\"max_tokens\":-5",
        "\"max_tokens\":2.5",
        "\"n\":9",
        "\"n\":0",
        "\"seed\":\"x\"",
        "\"stop\":5",
        "\"stop\":[1]",
        "\"logit_bias\":{\"x\":1}",
        "\"logit_bias\":{\"100\":1}",
        "\"logit_bias\":{\"1\":500}",
        "\"lora\":[{\"id\":2}]",
        "\"lora\":{}",
        "\"frobnicate\":1",
        "\"logprobs\":3",
        "\"top_logprobs\":3",
        "\"logprobs\":true,\"top_logprobs\":21",
        "\"logprobs\":false,\"top_logprobs\":2",
        "\"response_format\":{\"type\":\"xml\"}",
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}",
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"$ref\":\"x:y\"}}}",
        "\"response_format\":{\"type\":\"json_object\",\"schema\":5}",
        "\"tool_choice\":\"always\"",
        "\"tool_choice\":{\"type\":\"function\"}",
        "\"parallel_tool_calls\":1",
        "\"stream\":1",
        "\"stream_options\":{\"include_usage\":true}",
        "\"model\":5",
        "\"messages\":[]"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        snprintf(b, sizeof b, "{%s,%s}", m, fields[i]);
        expect_400(SERVE_CHAT, b, fields[i]);
    }
    expect_400(SERVE_COMPLETION, "{\"prompt\":[1,200]}", "a token past the vocabulary");
    expect_400(SERVE_COMPLETION, "{\"prompt\":[-1]}", "a negative token");
    expect_400(SERVE_COMPLETION, "{\"prompt\":[\"a\",[1]]}", "prompts of two kinds");
    expect_400(SERVE_COMPLETION, "{\"prompt\":[[1],\"a\"]}", "prompts of two kinds, ids first");
    expect_400(SERVE_COMPLETION, "{\"prompt\":[[1],[]]}", "an empty prompt among several");
    expect_400(SERVE_COMPLETION, "{\"prompt\":[[[1]]]}", "a prompt nested too deep");
    expect_400(SERVE_COMPLETION,
               "{\"prompt\":[\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\","
               "\"a\",\"a\",\"a\",\"a\"]}",
               "more prompts than allowed");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":true}", "legacy logprobs is a number");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":-1}", "negative logprobs");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"x\",\"top_logprobs\":2}", "top_logprobs is chat's");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"a\\u0000\",\"x\":1}", "unknown field after a NUL escape");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"\xff\"}", "invalid UTF-8");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"\xed\xa0\x80\"}", "a UTF-8 surrogate");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"x\"} x", "text after the JSON");
    expect_400(SERVE_COMPLETION, "{\"prompt\":\"x\",\"prompt\":\"y\"}", "a field twice");
    char deep[200] = "{\"prompt\":\"x\",\"metadata\":";
    for (int i = 0; i < 20; i++) strcat(deep, "[");
    for (int i = 0; i < 20; i++) strcat(deep, "]");
    strcat(deep, "}");
    expect_400(SERVE_COMPLETION, deep, "too deep");
    char big[400] = "{\"prompt\":[";
    for (int i = 0; i < 60; i++) strcat(big, i ? ",1" : "1");
    strcat(big, "]}");
    expect_400(SERVE_COMPLETION, big, "too many prompt tokens");
}

static void test_utf8(void) {
    CHECK(serve_utf8_complete("ab\xc3", 3) == 2, "a lead byte waits");
    CHECK(serve_utf8_complete("ab\xe2\x82", 4) == 2, "two of three bytes wait");
    CHECK(serve_utf8_complete("ab\xe2\x82\xac", 5) == 5, "a whole character");
    CHECK(serve_utf8_valid("\xf0\x9f\x98\x80", 4) && !serve_utf8_valid("\xc0\x80", 2), "validity");
}

static void test_message(void) {
    size_t len;
    const char *path =
        shared_path("golden/templates/NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use/template.jinja");
    if (!file_exists(path)) {
        fprintf(stderr, "skip: no Hermes template at %s\n", path);
        return;
    }
    FILE *f = fopen(path, "rb");
    char *text = malloc(1 << 20);
    len = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    cera_chat_template *t = NULL;
    CHECK(cera_chat_template_open(NULL, NULL, text, len, &t, NULL) == CERA_OK, "the Hermes template opens");
    free(text);
    if (!t) return;
    CHECK(cera_chat_template_format(t) == CERA_CHAT_HERMES, "Hermes format: %s",
          cera_chat_format_name(cera_chat_template_format(t)));
    const char *reply =
        "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
        "\n</tool_call>";
    int n_calls = -1;
    cJSON *m = serve_chat_message(cera_chat_template_format(t), true, reply, strlen(reply), "abc", &n_calls);
    char *s = cJSON_PrintUnformatted(m);
    CHECK(n_calls == 1, "one tool call: %s", s);
    const cJSON *calls = cJSON_GetObjectItem(m, "tool_calls");
    const cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function");
    CHECK(fn && !strcmp(cJSON_GetObjectItem(fn, "name")->valuestring, "get_weather"), "the name: %s", s);
    CHECK(fn && !strcmp(cJSON_GetObjectItem(fn, "arguments")->valuestring, "{\"city\":\"Paris\"}"),
          "the arguments: %s", s);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "id")->valuestring, "call_abc_0"),
          "the id");
    CHECK(!strcmp(cJSON_GetObjectItem(m, "role")->valuestring, "assistant"), "the role");
    const cJSON *content = cJSON_GetObjectItem(m, "content");
    CHECK(cJSON_IsString(content) && strstr(content->valuestring, "Let me look."), "the content: %s", s);
    free(s);
    cJSON_Delete(m);
    m = serve_chat_message(cera_chat_template_format(t), false, reply, strlen(reply), "abc", &n_calls);
    CHECK(n_calls == 0 && !cJSON_GetObjectItem(m, "tool_calls") &&
              !strcmp(cJSON_GetObjectItem(m, "content")->valuestring, reply),
          "without tools the reply is content");
    cJSON_Delete(m);
    cera_chat_template_free(t);
}

int main(void) {
    test_good();
    test_bad();
    test_utf8();
    test_message();
    char *e = serve_error_json(413, "too big", NULL);
    CHECK(e && strstr(e, "\"code\":413") && strstr(e, "invalid_request_error"), "an error object: %s", e);
    free(e);
    return test_finish();
}

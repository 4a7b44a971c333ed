/*
 * test_chat_parse.c — hand-written replies for every tool-call format of src/chat: one or
 * several calls, content around them, malformed markup that must stay content, the
 * reasoning split (with and without the opening <think>), Python literals with escapes and
 * unicode, nested JSON, empty arguments. Arguments are compared as the exact compact text.
 */
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "testutil.h"

typedef struct call {
    const char *name, *args, *id;
} call;

#define CALLS(...) ((const call[]){__VA_ARGS__})
#define NOCALLS    ((const call *)NULL)
#define EXPECT(f, text, content, reasoning, n, calls)                                                        \
    expect(__LINE__, f, text, strlen(text), content, reasoning, n, calls)

static bool same(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }
static const char *show(const char *s) { return s ? s : "(null)"; }

static void expect(int line, cera_chat_format f, const char *text, size_t len, const char *content,
                   const char *reasoning, int n, const call *calls) {
    cera_chat_reply r;
    cera_error err = {0};
    cera_status st = cera_chat_parse_reply(f, text, len, &r, &err);
    CHECK(st == CERA_OK, "line %d: status %d (%s)", line, (int)st, err.message);
    if (st != CERA_OK) return;
    CHECK(same(r.content, content), "line %d: content '%s', want '%s'", line, show(r.content), content);
    CHECK(same(r.reasoning, reasoning), "line %d: reasoning '%s', want '%s'", line, show(r.reasoning),
          show(reasoning));
    CHECK(r.n_tool_calls == n, "line %d: %d tool calls, want %d", line, r.n_tool_calls, n);
    CHECK((r.n_tool_calls == 0) == (r.tool_calls == NULL), "line %d: tool_calls array vs count", line);
    for (int i = 0; i < n && i < r.n_tool_calls; i++) {
        const cera_tool_call *c = &r.tool_calls[i];
        CHECK(same(c->name, calls[i].name), "line %d: call %d name '%s', want '%s'", line, i, show(c->name),
              calls[i].name);
        CHECK(same(c->arguments, calls[i].args), "line %d: call %d arguments '%s', want '%s'", line, i,
              show(c->arguments), calls[i].args);
        CHECK(same(c->id, calls[i].id), "line %d: call %d id '%s', want '%s'", line, i, show(c->id),
              show(calls[i].id));
    }
    cera_chat_reply_clear(&r);
    CHECK(r.content == NULL && r.reasoning == NULL && r.tool_calls == NULL && r.n_tool_calls == 0,
          "line %d: clear zeroes the reply", line);
}

static void test_hermes(void) {
    const cera_chat_format H = CERA_CHAT_HERMES;
    EXPECT(H,
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
           "", NULL, 1, CALLS({"get_weather", "{\"location\":\"Paris\"}", NULL}));
    EXPECT(H,
           "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>",
           "Let me check.", NULL, 2, CALLS({"a", "{\"x\":1}", NULL}, {"b", "{}", NULL}));
    /* arguments as a JSON string, normalised to the object */
    EXPECT(H, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": [1, 2]}\"}</tool_call>", "", NULL, 1,
           CALLS({"f", "{\"x\":[1,2]}", NULL}));
    EXPECT(H, "<tool_call>{\"name\": \"f\", \"arguments\": \"\"}</tool_call>", "", NULL, 1,
           CALLS({"f", "{}", NULL}));
    EXPECT(H, "<tool_call>{\"name\": \"f\"}</tool_call>", "", NULL, 1, CALLS({"f", "{}", NULL}));
    /* nested JSON, escapes and unicode kept */
    EXPECT(H,
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": {\"b\": [1, {\"c\": null}], \"d\": "
           "\"x\\\"y\\u00e9\"},"
           " \"e\": true}}\n</tool_call>",
           "", NULL, 1,
           CALLS({"f", "{\"a\":{\"b\":[1,{\"c\":null}],\"d\":\"x\\\"y\xc3\xa9\"},\"e\":true}", NULL}));
    /* several calls in one block as an array */
    EXPECT(H,
           "<tool_call>[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"x\": "
           "1}}]</tool_call>",
           "", NULL, 2, CALLS({"a", "{}", NULL}, {"b", "{\"x\":1}", NULL}));
    /* text after the calls */
    EXPECT(H, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nDone.", "Done.", NULL, 1,
           CALLS({"f", "{}", NULL}));
    /* an unclosed block that parses to the end is a call; one that does not stays content */
    EXPECT(H, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}\n", "", NULL, 1,
           CALLS({"a", "{\"k\":\"v\"}", NULL}));
    EXPECT(H, "Hi <tool_call>{\"name\"", "Hi <tool_call>{\"name\"", NULL, 0, NOCALLS);
    /* malformed blocks stay content, good ones beside them still parse */
    EXPECT(H, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": }\n</tool_call> done",
           "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": }\n</tool_call> done", NULL, 0, NOCALLS);
    EXPECT(H, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>",
           NULL, 0, NOCALLS);
    EXPECT(H, "<tool_call>{\"name\": \"f\", \"arguments\": \"not json\"}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": \"not json\"}</tool_call>", NULL, 0, NOCALLS);
    EXPECT(H, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", NULL, 0, NOCALLS);
    EXPECT(H, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>oops</tool_call>",
           "<tool_call>oops</tool_call>", NULL, 1, CALLS({"a", "{}", NULL}));
    EXPECT(H, "<tool_call>{\"name\": \"a\", \"arguments\": {}} trailing</tool_call>",
           "<tool_call>{\"name\": \"a\", \"arguments\": {}} trailing</tool_call>", NULL, 0, NOCALLS);
    EXPECT(H, "<tool_call>[{\"name\": \"a\"}, 3]</tool_call>",
           "<tool_call>[{\"name\": \"a\"}, 3]</tool_call>", NULL, 0, NOCALLS);
    /* reasoning, with and without the opening tag */
    EXPECT(H,
           "<think>\nI should call.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
           "{}}\n</tool_call>",
           "", "I should call.", 1, CALLS({"f", "{}", NULL}));
    EXPECT(H, "I should call.</think>\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", "",
           "I should call.", 1, CALLS({"f", "{}", NULL}));
    /* a call inside the reasoning is not a call */
    EXPECT(H, "<think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call></think>ok", "ok",
           "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", 0, NOCALLS);
    EXPECT(H, "  Hello, world!\nWhat's up?  \n", "Hello, world!\nWhat's up?", NULL, 0, NOCALLS);
}

static void test_lfm2(void) {
    const cera_chat_format L = CERA_CHAT_LFM2;
    EXPECT(L,
           "<|tool_call_start|>[get_weather(location=\"Paris\", unit='c'), f(x=1, y=[1,2], z=True, "
           "w=None)]<|tool_call_end|>",
           "", NULL, 2,
           CALLS({"get_weather", "{\"location\":\"Paris\",\"unit\":\"c\"}", NULL},
                 {"f", "{\"x\":1,\"y\":[1,2],\"z\":true,\"w\":null}", NULL}));
    EXPECT(L, "<|tool_call_start|>[f()]<|tool_call_end|>", "", NULL, 1, CALLS({"f", "{}", NULL}));
    EXPECT(L, "<|tool_call_start|>f( )<|tool_call_end|>", "", NULL, 1, CALLS({"f", "{}", NULL}));
    EXPECT(L, "<|tool_call_start|>[ a(k = 1 , ) , b(s=\"x\") , ]<|tool_call_end|>", "", NULL, 2,
           CALLS({"a", "{\"k\":1}", NULL}, {"b", "{\"s\":\"x\"}", NULL}));
    /* strings: escapes, unicode, raw and triple-quoted */
    EXPECT(L,
           "<|tool_call_start|>[say(text='It\\'s \"ok\"\\n\\tdone', u=\"caf\\u00e9 \\xe9 \\U0001F600 "
           "\xe2\x9c\x93\","
           " raw=r'a\\nb', oct='\\101', bs='a\\\\b', unk='\\d', tq='''x'y\"z''', pair='\\ud83d\\ude00',"
           " pre=u\"u\")]<|tool_call_end|>",
           "", NULL, 1,
           CALLS({"say",
                  "{\"text\":\"It's \\\"ok\\\"\\n\\tdone\",\"u\":\"caf\xc3\xa9 \xc3\xa9 \xf0\x9f\x98\x80 "
                  "\xe2\x9c\x93\","
                  "\"raw\":\"a\\\\nb\",\"oct\":\"A\",\"bs\":\"a\\\\b\",\"unk\":\"\\\\d\",\"tq\":\"x'y\\\"z\","
                  "\"pair\":\"\xf0\x9f\x98\x80\",\"pre\":\"u\"}",
                  NULL}));
    /* numbers, tuples, dicts, nesting */
    EXPECT(L,
           "<|tool_call_start|>[n(a=-3, b=2.5, c=1e3, d=0x1F, e=1_000, f=12345678901234567890, g=-0.5, h=(1, "
           "'a'),"
           " i={'k': [None], \"j\": {}}, t=(), p=(7), z=0, o=0o17, bb=0b101)]<|tool_call_end|>",
           "", NULL, 1,
           CALLS({"n",
                  "{\"a\":-3,\"b\":2.5,\"c\":1000,\"d\":31,\"e\":1000,\"f\":12345678901234567890,\"g\":-0.5,"
                  "\"h\":[1,\"a\"],\"i\":{\"k\":[null],\"j\":{}},\"t\":[],\"p\":7,\"z\":0,\"o\":15,\"bb\":5}",
                  NULL}));
    EXPECT(L, "<|tool_call_start|>[f(a=[[[1]]], b={'x': {'y': [True, False]}})]<|tool_call_end|>", "", NULL,
           1, CALLS({"f", "{\"a\":[[[1]]],\"b\":{\"x\":{\"y\":[true,false]}}}", NULL}));
    /* content around the block, dotted names, the JSON form */
    EXPECT(L, "Sure. <|tool_call_start|>[functions.get_weather(city='Paris')]<|tool_call_end|> Done.",
           "Sure.  Done.", NULL, 1, CALLS({"functions.get_weather", "{\"city\":\"Paris\"}", NULL}));
    EXPECT(L, "<|tool_call_start|>[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]<|tool_call_end|>", "", NULL,
           1, CALLS({"f", "{\"a\":1}", NULL}));
    EXPECT(L, "<|tool_call_start|>[f(a=1)]", "", NULL, 1, CALLS({"f", "{\"a\":1}", NULL}));
    /* malformed: positional, unterminated, unknown name, repeated keyword, lone surrogate,
     * NUL, expressions, empty list, missing bracket */
    static const char *bad[] = {
        "<|tool_call_start|>[f(\"Paris\")]<|tool_call_end|>",
        "<|tool_call_start|>[f(a='x)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=foo)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1, a=2)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a='\\ud800')]<|tool_call_end|>",
        "<|tool_call_start|>[f(a='\\x00')]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1+2)]<|tool_call_end|>",
        "<|tool_call_start|>[]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1)<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1) g(b=2)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1)] tail<|tool_call_end|>",
        "<|tool_call_start|>[f(a={1: 2})]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1.2.3)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=0x)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a='x\ny')]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=1j)]<|tool_call_end|>",
        "<|tool_call_start|>[f(a=[1,,2])]<|tool_call_end|>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect(__LINE__ * 1000 + (int)i, L, bad[i], strlen(bad[i]), bad[i], NULL, 0, NOCALLS);
    /* a good block beside a bad one */
    EXPECT(L, "<|tool_call_start|>[f(x)]<|tool_call_end|><|tool_call_start|>[g(y=2)]<|tool_call_end|>",
           "<|tool_call_start|>[f(x)]<|tool_call_end|>", NULL, 1, CALLS({"g", "{\"y\":2}", NULL}));
    /* nesting deeper than the reader goes is malformed, not a crash */
    char deep[400] = "<|tool_call_start|>[f(a=";
    size_t k = strlen(deep);
    for (int i = 0; i < 100; i++) deep[k++] = '[';
    for (int i = 0; i < 100; i++) deep[k++] = ']';
    strcpy(deep + k, ")]<|tool_call_end|>");
    expect(__LINE__, L, deep, strlen(deep), deep, NULL, 0, NOCALLS);
    /* reasoning */
    EXPECT(L, "<think>hmm</think><|tool_call_start|>[f()]<|tool_call_end|>", "", "hmm", 1,
           CALLS({"f", "{}", NULL}));
    EXPECT(L,
           "The weather in Paris is 21 \xc2\xb0"
           "C.",
           "The weather in Paris is 21 \xc2\xb0"
           "C.",
           NULL, 0, NOCALLS);
}

static void test_llama3(void) {
    const cera_chat_format L = CERA_CHAT_LLAMA3;
    EXPECT(L, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", NULL, 1,
           CALLS({"get_weather", "{\"city\":\"Paris\"}", NULL}));
    EXPECT(L, "\n <|python_tag|>{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": \"c\"}]}} \n", "", NULL,
           1, CALLS({"f", "{\"a\":[1,{\"b\":\"c\"}]}", NULL}));
    EXPECT(L,
           "{\"type\": \"function\", \"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": "
           "{\"x\": 1}};",
           "", NULL, 2, CALLS({"a", "{}", NULL}, {"b", "{\"x\":1}", NULL}));
    EXPECT(L, "{\"name\": \"f\", \"parameters\": \"{\\\"x\\\": 2}\"}", "", NULL, 1,
           CALLS({"f", "{\"x\":2}", NULL}));
    /* content: plain text, JSON that is not a call, a call with text around it */
    EXPECT(L, "The answer is 42.", "The answer is 42.", NULL, 0, NOCALLS);
    EXPECT(L, "{\"name\": \"Bob\", \"age\": 3}", "{\"name\": \"Bob\", \"age\": 3}", NULL, 0, NOCALLS);
    EXPECT(L, "Here: {\"name\": \"f\", \"parameters\": {}}", "Here: {\"name\": \"f\", \"parameters\": {}}",
           NULL, 0, NOCALLS);
    EXPECT(L, "{\"name\": \"f\", \"parameters\": {}} and more",
           "{\"name\": \"f\", \"parameters\": {}} and more", NULL, 0, NOCALLS);
    EXPECT(L, "{\"name\": \"f\", \"parameters\": {}}; {\"name\": 2, \"parameters\": {}}",
           "{\"name\": \"f\", \"parameters\": {}}; {\"name\": 2, \"parameters\": {}}", NULL, 0, NOCALLS);
    EXPECT(L, "{\"name\": \"f\", \"parameters\": {\"a\": ", "{\"name\": \"f\", \"parameters\": {\"a\":", NULL,
           0, NOCALLS);
    EXPECT(L, "<|python_tag|>brave_search.call(query=\"x\")", "<|python_tag|>brave_search.call(query=\"x\")",
           NULL, 0, NOCALLS);
    EXPECT(L, "<think>plan</think>\n{\"name\": \"f\", \"parameters\": {}}", "", "plan", 1,
           CALLS({"f", "{}", NULL}));
}

static void test_mistral(void) {
    const cera_chat_format M = CERA_CHAT_MISTRAL;
    EXPECT(M, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"abc123def\"}]", "", NULL,
           1, CALLS({"f", "{\"a\":1}", "abc123def"}));
    EXPECT(M,
           "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}, \"id\": \"id1\"}, {\"name\": \"b\", "
           "\"arguments\": "
           "{\"x\": {\"y\": [true]}}}]",
           "", NULL, 2, CALLS({"a", "{}", "id1"}, {"b", "{\"x\":{\"y\":[true]}}", NULL}));
    EXPECT(M, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "", NULL, 1,
           CALLS({"get_weather", "{\"city\":\"Paris\"}", NULL}));
    EXPECT(M, "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{\"x\": [1]}", "", NULL, 2,
           CALLS({"a", "{}", NULL}, {"b", "{\"x\":[1]}", NULL}));
    EXPECT(M, "[TOOL_CALLS]a[ARGS]{\"k\": 1}b[ARGS]{}", "", NULL, 2,
           CALLS({"a", "{\"k\":1}", NULL}, {"b", "{}", NULL}));
    EXPECT(M, "[TOOL_CALLS]get_weather[CALL_ID]call12345[ARGS]{\"city\": \"Paris\"}", "", NULL, 1,
           CALLS({"get_weather", "{\"city\":\"Paris\"}", "call12345"}));
    EXPECT(M, "Let me look.[TOOL_CALLS]f[ARGS]{}", "Let me look.", NULL, 1, CALLS({"f", "{}", NULL}));
    EXPECT(M, "[TOOL_CALLS]f[ARGS]{} Done.", "Done.", NULL, 1, CALLS({"f", "{}", NULL}));
    EXPECT(M, "[TOOL_CALLS]f[ARGS]\"{\\\"q\\\": 1}\"", "", NULL, 1, CALLS({"f", "{\"q\":1}", NULL}));
    /* malformed */
    EXPECT(M, "[TOOL_CALLS]get_weather{\"city\": 1}", "[TOOL_CALLS]get_weather{\"city\": 1}", NULL, 0,
           NOCALLS);
    EXPECT(M, "[TOOL_CALLS][{\"name\": 1}]", "[TOOL_CALLS][{\"name\": 1}]", NULL, 0, NOCALLS);
    EXPECT(M, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}",
           "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}", NULL, 0, NOCALLS);
    EXPECT(M, "[TOOL_CALLS]f[ARGS]{\"a\":", "[TOOL_CALLS]f[ARGS]{\"a\":", NULL, 0, NOCALLS);
    EXPECT(M, "[TOOL_CALLS]", "[TOOL_CALLS]", NULL, 0, NOCALLS);
    EXPECT(M, "[TOOL_CALLS]f[CALL_ID][ARGS]{}", "[TOOL_CALLS]f[CALL_ID][ARGS]{}", NULL, 0, NOCALLS);
    EXPECT(M, "[TOOL_CALLS]bad[ARGS]{[TOOL_CALLS]g[ARGS]{}", "[TOOL_CALLS]bad[ARGS]{", NULL, 1,
           CALLS({"g", "{}", NULL}));
    EXPECT(M, "Just text.", "Just text.", NULL, 0, NOCALLS);
    EXPECT(M, "<think>\nhm\n</think>[TOOL_CALLS]f[ARGS]{}", "", "hm", 1, CALLS({"f", "{}", NULL}));
}

static void test_content_and_reasoning(void) {
    const cera_chat_format C = CERA_CHAT_CONTENT;
    EXPECT(C, "<think> a </think>  Hello ", "Hello", "a", 0, NOCALLS);
    EXPECT(C, "\n<think>\nstep 1\nstep 2\n</think>\n\nAnswer.", "Answer.", "step 1\nstep 2", 0, NOCALLS);
    EXPECT(C, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
           "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", NULL, 0, NOCALLS);
    EXPECT(C, "[TOOL_CALLS]f[ARGS]{}", "[TOOL_CALLS]f[ARGS]{}", NULL, 0, NOCALLS);
    EXPECT(C, "<think>still thinking", "", "still thinking", 0, NOCALLS);
    EXPECT(C, "<think>\n\n</think>\n\nHi", "Hi", NULL, 0, NOCALLS);
    EXPECT(C, "thinking here</think>Answer", "Answer", "thinking here", 0, NOCALLS);
    EXPECT(C, "</think>Answer", "Answer", NULL, 0, NOCALLS);
    EXPECT(C, "Hi <think>x</think> there", "Hi <think>x</think> there", NULL, 0, NOCALLS);
    EXPECT(C, "<think>a</think>b</think>c", "b</think>c", "a", 0, NOCALLS);
    EXPECT(C, "", "", NULL, 0, NOCALLS);
    EXPECT(C, " \n\t ", "", NULL, 0, NOCALLS);
    EXPECT(C, "<think>", "", NULL, 0, NOCALLS);
    EXPECT(C, "caf\xc3\xa9 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xf0\x9f\x98\x80", NULL, 0, NOCALLS);
    EXPECT((cera_chat_format)99, "<think>r</think>x", "x", "r", 0, NOCALLS);
    expect(__LINE__, C, NULL, 0, "", NULL, 0, NOCALLS);
    /* only len bytes are read: the reasoning's close is past the end here */
    expect(__LINE__, C, "<think>abc</think>", 9, "", "ab", 0, NOCALLS);

    cera_error err = {0};
    CHECK(cera_chat_parse_reply(C, "x", 1, NULL, &err) == CERA_ERR_INVALID_ARG, "NULL reply is an error");
    cera_chat_reply_clear(NULL);
}

int main(void) {
    test_hermes();
    test_lfm2();
    test_llama3();
    test_mistral();
    test_content_and_reasoning();
    return test_finish();
}

/*
 * fuzz_chat.c — libFuzzer harness for the reply parser and format detection (src/chat).
 *
 * The first byte of the input picks the tool-call format (modulo the five), the rest is a
 * generated reply; the whole input is also given to cera_chat_detect_format as a template
 * text. Whatever the bytes, a parse must succeed (only running out of memory may fail) with
 * a content string, reasoning NULL or text, and calls whose names are non-empty and
 * whose arguments are JSON objects; clearing the reply frees everything (ASan's leak check
 * sees the rest). No crash, no sanitizer report, no hang.
 *
 * Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt when CERA_FUZZ is on,
 * otherwise linked with replay.c to replay the seed corpus as a normal test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "chat/chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cera_chat_format det = cera_chat_detect_format((const char *)data, size);
    REQUIRE(det >= CERA_CHAT_CONTENT && det <= CERA_CHAT_MISTRAL);
    if (size == 0) return 0;
    cera_chat_format f = (cera_chat_format)(data[0] % 5);
    cera_chat_reply r;
    cera_error err = {0};
    cera_status st = cera_chat_parse_reply(f, (const char *)data + 1, size - 1, &r, &err);
    if (st != CERA_OK) {
        REQUIRE(st == CERA_ERR_NO_MEMORY && r.content == NULL && r.tool_calls == NULL);
        return 0;
    }
    REQUIRE(r.content != NULL && strlen(r.content) < size);
    /* (a reply with NUL bytes can give a reasoning that reads as "" in C) */
    REQUIRE(r.reasoning == NULL || strlen(r.reasoning) < size);
    REQUIRE(r.n_tool_calls >= 0 && (r.n_tool_calls == 0) == (r.tool_calls == NULL));
    if (f == CERA_CHAT_CONTENT) REQUIRE(r.n_tool_calls == 0);
    for (int i = 0; i < r.n_tool_calls; i++) {
        const cera_tool_call *c = &r.tool_calls[i];
        REQUIRE(c->name && c->name[0] && c->arguments);
        REQUIRE(c->id == NULL || c->id[0]);
        cJSON *args = cJSON_Parse(c->arguments);
        REQUIRE(cJSON_IsObject(args));
        cJSON_Delete(args);
    }
    cera_chat_reply_clear(&r);
    REQUIRE(r.content == NULL && r.n_tool_calls == 0);
    return 0;
}

/*
 * fuzz_serve.c — libFuzzer harness for the request parser of `cera serve`
 * (tools/cera/serve_api.c), the code that reads what any client sends.
 *
 * The first byte picks the endpoint ('p': /v1/completions, anything else: chat), the rest
 * is the body. Whatever the bytes, the parse either succeeds with a request inside the
 * limits (messages with roles, stop strings, token ids below the vocabulary, n and
 * max_tokens in range) or fails with 400 and a message, leaving nothing allocated (ASan's
 * leak check sees the rest). No crash, no sanitizer report, no hang.
 *
 * Built with -fsanitize=fuzzer by tests/fuzz/CMakeLists.txt when CERA_FUZZ is on,
 * otherwise linked with replay.c to replay the seed corpus as a normal test.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve_api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const serve_kind kind = data[0] == 'p' ? SERVE_COMPLETION : SERVE_CHAT;
    const serve_limits lim = {.max_depth = 32,
                              .max_tokens = 4096,
                              .max_n = 8,
                              .n_vocab = 32000,
                              .n_adapters = 2,
                              .max_prompt = 4096};
    const cera_sampler_params d = cera_sampler_default_params();
    serve_req r;
    char msg[300], param[64];
    const int st = serve_req_parse(kind, (const char *)data + 1, size - 1, &d, &lim, &r, msg, sizeof msg,
                                   param, sizeof param);
    if (st) {
        REQUIRE(st == 400 && msg[0] && r.root == NULL && r.msgs == NULL && r.owned == NULL);
        return 0;
    }
    REQUIRE(r.root != NULL && r.n >= 1 && r.n <= lim.max_n);
    REQUIRE(r.max_tokens == -1 || (r.max_tokens >= 1 && r.max_tokens <= lim.max_tokens));
    REQUIRE(r.n_stop >= 0 && r.n_stop <= SERVE_STOP_MAX);
    for (int i = 0; i < r.n_stop; i++) REQUIRE(r.stop[i][0] && strlen(r.stop[i]) <= SERVE_STOP_LEN);
    for (int i = 0; i < r.sp.n_logit_bias; i++)
        REQUIRE(r.sp.logit_bias[i].token >= 0 && r.sp.logit_bias[i].token < lim.n_vocab);
    for (int i = 0; i < r.n_lora; i++) REQUIRE(r.lora[i].id >= 0 && r.lora[i].id < lim.n_adapters);
    if (kind == SERVE_CHAT) {
        REQUIRE(r.n_msgs >= 1 && r.msgs);
        for (int i = 0; i < r.n_msgs; i++) REQUIRE(r.msgs[i].role && r.msgs[i].role[0]);
    } else {
        REQUIRE(r.prompt || (r.n_prompt_tokens >= 1 && r.n_prompt_tokens <= lim.max_prompt));
        for (size_t i = 0; i < r.n_prompt_tokens; i++)
            REQUIRE(r.prompt_tokens[i] >= 0 && r.prompt_tokens[i] < lim.n_vocab);
    }
    serve_req_free(&r);
    REQUIRE(r.root == NULL);
    return 0;
}

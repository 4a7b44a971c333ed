/*
 * cera_wasm.c — the C side of the WebAssembly build: a few flat functions over the public API
 * (include/cera.h) that wasm/cera.mjs calls, taking and returning only numbers and pointers,
 * so that JS never lays out a C struct. Nothing here reaches below cera.h.
 *
 * Errors: a function that fails returns 0 (NULL) or -1 and leaves the message in one buffer
 * (cw_error), which the JS side turns into an exception. Generation streams through
 * cw_on_token, a JS function (EM_JS) that finds the caller's callback by a handle.
 */
#include <emscripten.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cera.h"

static cera_error last_error;

static void set_error(const char *msg) {
    last_error.status = CERA_ERR_INVALID_ARG;
    snprintf(last_error.message, sizeof last_error.message, "%s", msg);
}

EMSCRIPTEN_KEEPALIVE const char *cw_error(void) { return last_error.message; }

/* The kernel tier this module was built with, "simd128" or "scalar" (WebAssembly picks its tier
 * at compile time, and the public API does not name tiers). */
EMSCRIPTEN_KEEPALIVE const char *cw_tier(void) {
#ifdef CERA_WASM_SIMD128
    return "simd128";
#else
    return "scalar";
#endif
}

/* A model from size bytes at data (kept alive by the caller until cw_engine_close), single-
 * threaded, one session at a time. n_ctx 0: the model's, at most 4096. */
EMSCRIPTEN_KEEPALIVE cera_engine *cw_engine_open(const void *data, size_t size, int n_ctx) {
    cera_engine_params p = cera_engine_default_params();
    p.n_threads = 1;
    p.n_ctx = n_ctx;
    p.n_seq_max = 1;
    p.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    if (cera_engine_open_memory(data, size, &p, &e, &last_error)) return NULL;
    return e;
}

EMSCRIPTEN_KEEPALIVE void cw_engine_close(cera_engine *e) { cera_engine_close(e); }

/* out[0..3] = n_vocab, n_ctx, bos, eos; returns the architecture's name. */
EMSCRIPTEN_KEEPALIVE const char *cw_engine_info(const cera_engine *e, int32_t *out) {
    out[0] = cera_engine_n_vocab(e);
    out[1] = cera_engine_n_ctx(e);
    out[2] = cera_engine_bos(e);
    out[3] = cera_engine_eos(e);
    return cera_engine_arch(e);
}

/* Tokens of len bytes of text into out (cap of them); returns the full count (more than cap:
 * call again with room for that many), or -1 on an error. */
EMSCRIPTEN_KEEPALIVE int cw_tokenize(const cera_engine *e, const char *text, int len, int add_special,
                                     int parse_special, cera_token *out, int cap) {
    size_t n = 0;
    const cera_status st =
        cera_tokenize(e, text, (size_t)len, add_special, parse_special, out, (size_t)cap, &n, &last_error);
    if (st && !(st == CERA_ERR_INVALID_ARG && n > (size_t)cap)) return -1;
    return (int)n;
}

/* A token's text (special tokens rendered) into buf; its length (more than cap: too small), -1
 * for an invalid token. */
EMSCRIPTEN_KEEPALIVE int cw_token_piece(const cera_engine *e, cera_token t, char *buf, int cap) {
    return cera_token_to_piece(e, t, buf, (size_t)cap, true);
}

EMSCRIPTEN_KEEPALIVE cera_session *cw_session_new(cera_engine *e, float temp, int top_k, float top_p,
                                                  float min_p, float repeat_penalty, uint32_t seed) {
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = temp;
    sp.sampler.top_k = top_k;
    sp.sampler.top_p = top_p;
    sp.sampler.min_p = min_p;
    sp.sampler.repeat_penalty = repeat_penalty;
    sp.sampler.seed = seed;
    cera_session *s = NULL;
    if (cera_session_create(e, &sp, &s, &last_error)) return NULL;
    return s;
}

EMSCRIPTEN_KEEPALIVE void cw_session_free(cera_session *s) { cera_session_free(s); }

/* Empties the session (its sampler restarts from the seed); -1 on an error. */
EMSCRIPTEN_KEEPALIVE int cw_session_reset(cera_session *s) {
    return cera_session_truncate(s, 0, &last_error) ? -1 : 0;
}

/* The JS side's callback for generation `handle`: 1 to go on, 0 to stop. */
EM_JS(int, cw_on_token, (int handle, int token, const char *piece, int len),
      { return Module["ceraOnToken"](handle, token, piece, len); });

static bool on_token(cera_token token, const char *piece, size_t len, void *user) {
    return cw_on_token((int)(intptr_t)user, token, piece, (int)len) != 0;
}

/* cera_generate: evaluates the n_prompt tokens (none: continues after the pending one) and
 * generates at most n_predict, streaming each to the JS callback `handle`. Returns the count
 * generated (0: an end-of-generation token came first), or -1 on an error. */
EMSCRIPTEN_KEEPALIVE int cw_generate(cera_session *s, const cera_token *prompt, int n_prompt, int n_predict,
                                     int handle) {
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = n_predict;
    int n = 0;
    if (cera_generate(s, prompt, (size_t)n_prompt, &gp, on_token, (void *)(intptr_t)handle, &n, &last_error))
        return -1;
    return n;
}

/* A conversation (a JSON array of {"role", "content"} objects) rendered with the model's chat
 * template, generation prompt added, and tokenized as llama.cpp's server does. Returns the
 * malloc'ed tokens (free with free) and their count in *n_out, or NULL on an error. */
EMSCRIPTEN_KEEPALIVE cera_token *cw_chat_prompt(const cera_engine *e, const char *messages_json, int *n_out) {
    cJSON *root = cJSON_Parse(messages_json);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        set_error("chat: messages must be a JSON array of {role, content}");
        return NULL;
    }
    const int n = cJSON_GetArraySize(root);
    cera_chat_message *msgs = calloc((size_t)(n > 0 ? n : 1), sizeof *msgs);
    cera_token *tokens = NULL;
    cera_chat_template *tmpl = NULL;
    char *text = NULL;
    size_t text_len = 0, n_tokens = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *m = cJSON_GetArrayItem(root, i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(role) || !(cJSON_IsString(content) || cJSON_IsNull(content))) {
            set_error("chat: every message needs a string role and a string (or null) content");
            goto done;
        }
        msgs[i].role = role->valuestring;
        msgs[i].content = cJSON_IsString(content) ? content->valuestring : NULL;
    }
    if (cera_chat_template_open(e, NULL, NULL, 0, &tmpl, &last_error)) goto done;
    cera_chat_params cp = cera_chat_default_params();
    if (cera_chat_render(tmpl, msgs, (size_t)n, &cp, &text, &text_len, &last_error)) goto done;
    if (cera_chat_tokenize(e, text, text_len, &tokens, &n_tokens, &last_error)) {
        tokens = NULL;
        goto done;
    }
    *n_out = (int)n_tokens;
done:
    cera_free(text);
    cera_chat_template_free(tmpl);
    free(msgs);
    cJSON_Delete(root);
    return tokens;
}

/*
 * test_chat_smollm2.c — chat through the model's own template against llama.cpp: the
 * README's SmolLM2-135M-Instruct (Q4_1, fetched by scripts/setup.sh; skipped when absent).
 *
 * data/smollm2-chat.json holds llama.cpp's side (how it was made is in its made_with):
 * for fixed conversations, the prompt llama-server --jinja renders, its tokens, and the
 * 64-token greedy reply; and a three-turn conversation whose replies continue from the
 * model's own earlier replies. Checks:
 *   - cera_chat_render gives the same prompt byte for byte, cera_chat_tokenize the same
 *     tokens, and greedy generation the same reply tokens;
 *   - `cera chat` with the turns on stdin prints the same replies (each turn evaluating only
 *     what the conversation adds);
 *   - the chat API refuses bad input with a status (a malformed tool list, no role).
 * On the AVX-512 tier (the reference build's; AMX gives its bits) every token must match;
 * other tiers sum the dot products in another order, so there the first 4 reply tokens.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "backend/cpu/kernels.h"
#include "cera.h"
#include "testutil.h"

typedef struct collect {
    cera_token tok[128];
    int n;
} collect;

static bool on_token(cera_token t, const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    collect *c = user;
    if (t >= 0 && c->n < 128) c->tok[c->n++] = t;
    return true;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* One conversation: render, tokenize and greedy reply against llama.cpp's. */
static void check_case(cera_engine *e, const cera_chat_template *t, const cJSON *c, bool exact) {
    const char *name = str(c, "name");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages");
    cera_chat_message m[8];
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, msgs) {
        if (n == 8) break;
        m[n++] = (cera_chat_message){.role = str(it, "role"), .content = str(it, "content")};
    }
    char *text = NULL;
    size_t len = 0;
    cera_error err;
    CHECK(cera_chat_render(t, m, (size_t)n, NULL, &text, &len, &err) == CERA_OK, "%s: render: %s", name,
          err.message);
    const char *want = str(c, "prompt");
    CHECK(text && want && len == strlen(want) && !memcmp(text, want, len), "%s: rendered\n%s\nllama.cpp\n%s",
          name, text ? text : "(none)", want ? want : "(none)");
    cera_token *toks = NULL;
    size_t nt = 0;
    CHECK(text && cera_chat_tokenize(e, text, len, &toks, &nt, &err) == CERA_OK, "%s: tokenize: %s", name,
          err.message);
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(c, "prompt_tokens");
    bool same = toks && (size_t)cJSON_GetArraySize(pt) == nt;
    for (size_t i = 0; same && i < nt; i++) same = cJSON_GetArrayItem(pt, (int)i)->valueint == toks[i];
    CHECK(same, "%s: %zu prompt tokens differ from llama.cpp's %d", name, nt, cJSON_GetArraySize(pt));

    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0;
    cera_session *s = NULL;
    CHECK(cera_session_create(e, &sp, &s, &err) == CERA_OK, "session: %s", err.message);
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = 64;
    collect got = {.n = 0};
    CHECK(s && toks && cera_generate(s, toks, nt, &gp, on_token, &got, NULL, &err) == CERA_OK,
          "%s: generate: %s", name, err.message);
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(c, "reply_tokens");
    const char *stop = str(c, "stop_type");
    /* llama.cpp lists the end-of-generation token; cera stops before it */
    const int nr = cJSON_GetArraySize(rt) - (stop && !strcmp(stop, "eos"));
    const int upto = exact ? nr : (nr < 4 ? nr : 4);
    same = exact ? got.n == nr : got.n >= upto;
    for (int i = 0; same && i < upto; i++) same = cJSON_GetArrayItem(rt, i)->valueint == got.tok[i];
    CHECK(same, "%s: greedy reply (%d tokens) differs from llama.cpp's (%d) within the first %d", name, got.n,
          nr, upto);
    cera_session_free(s);
    cera_free(toks);
    cera_free(text);
}

/* `cera chat` over stdin: the replies of a three-turn conversation. */
static void check_cli(const char *model, const cJSON *c, bool exact) {
    const char *in = "chat-smollm2.in", *out = "chat-smollm2.out";
    FILE *f = fopen(in, "w");
    const cJSON *turns = cJSON_GetObjectItemCaseSensitive(c, "turns"), *it;
    cJSON_ArrayForEach(it, turns) fprintf(f, "%s\n", it->valuestring);
    fclose(f);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s chat -m %s -sys '%s' --temp 0 -n 64 -t 1 --device cpu < %s > %s 2>/dev/null", CERA_CLI,
             model, str(c, "system"), in, out);
    CHECK(run_command(cmd) == 0, "cera chat failed: %s", cmd);
    char *got = slurp(out);
    size_t want_len = 0;
    const cJSON *replies = cJSON_GetObjectItemCaseSensitive(c, "replies");
    cJSON_ArrayForEach(it, replies) want_len += strlen(it->valuestring) + 1;
    char *want = calloc(1, want_len + 1);
    cJSON_ArrayForEach(it, replies) {
        strcat(want, it->valuestring);
        strcat(want, "\n");
    }
    if (exact)
        CHECK(got && !strcmp(got, want), "cera chat printed\n%s\nllama.cpp's replies\n%s", got ? got : "",
              want);
    else
        CHECK(got && strlen(got) > 0, "cera chat printed nothing");
    free(want);
    free(got);
}

static void check_refusals(const cera_chat_template *t) {
    cera_chat_message m = {.role = "user", .content = "hi"};
    cera_chat_params p = cera_chat_default_params();
    p.tools = "[{\"type\": ";
    char *text = NULL;
    cera_error err;
    CHECK(cera_chat_render(t, &m, 1, &p, &text, NULL, &err) == CERA_ERR_INVALID_ARG && !text,
          "a malformed tool list: INVALID_ARG (%s)", err.message);
    p.tools = NULL;
    p.extra = "[1]";
    CHECK(cera_chat_render(t, &m, 1, &p, &text, NULL, &err) == CERA_ERR_INVALID_ARG, "extra not an object");
    m.role = NULL;
    CHECK(cera_chat_render(t, &m, 1, NULL, &text, NULL, &err) == CERA_ERR_INVALID_ARG,
          "a message without role");
    CHECK(cera_chat_render(NULL, &m, 1, NULL, &text, NULL, &err) == CERA_ERR_INVALID_ARG, "NULL template");
    CHECK(cera_chat_template_format(NULL) == CERA_CHAT_CONTENT, "NULL template's format");
}

int main(void) {
    const char *model = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!file_exists(model)) {
        printf("skipped: %s not present (scripts/setup.sh fetches it)\n", model);
        return TEST_SKIP_CODE;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/model/data/smollm2-chat.json", CERA_SOURCE_DIR);
    char *json = slurp(path);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    CHECK(root != NULL, "%s does not parse", path);
    if (!root) return test_finish();
    const bool exact = !strcmp(cera_cpu_tier_name(), "avx512") || !strcmp(cera_cpu_tier_name(), "amx");

    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CPU;
    ep.n_threads = 1;
    ep.n_ctx = 512;
    cera_engine *e = NULL;
    cera_error err;
    CHECK(cera_engine_open(model, &ep, &e, &err) == CERA_OK, "open: %s", err.message);
    cera_chat_template *t = NULL;
    CHECK(e && cera_chat_template_open(e, NULL, NULL, 0, &t, &err) == CERA_OK, "template: %s", err.message);
    CHECK(cera_chat_template_format(t) == CERA_CHAT_CONTENT, "SmolLM2's template has no tool calls: %s",
          cera_chat_format_name(cera_chat_template_format(t)));
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        if (t && cJSON_GetObjectItemCaseSensitive(c, "messages"))
            check_case(e, t, c, exact);
        else if (cJSON_GetObjectItemCaseSensitive(c, "turns"))
            check_cli(model, c, exact);
    }
    if (t) check_refusals(t);
    cera_chat_template_free(t);
    cera_engine_close(e);
    cJSON_Delete(root);
    free(json);
    return test_finish();
}

/*
 * serve_api.h — the OpenAI-shaped JSON of `cera serve`, apart from the HTTP and the
 * scheduler: a request body checked and turned into a serve_req (no engine needed, so the
 * fuzz harness drives it alone), and the pieces of the answers (error objects, a chat
 * reply split into content and tool calls).
 *
 * Whatever a client sends is untrusted: a bad body is an error with an HTTP status and a
 * message, never a crash; sizes are bounded by serve_limits; nothing in it names a file.
 */
#ifndef CERA_CLI_SERVE_API_H
#define CERA_CLI_SERVE_API_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "cera.h"

#define SERVE_STOP_MAX         16
#define SERVE_STOP_LEN         256
#define SERVE_LORA_MAX         16
#define SERVE_BIAS_MAX         1024
#define SERVE_MESSAGES_MAX     4096
#define SERVE_PROMPTS_MAX      16 /* prompts of one completions request */
#define SERVE_TOP_LOGPROBS_MAX 20 /* top_logprobs (chat) and logprobs (completions) at most */

typedef enum serve_kind { SERVE_CHAT, SERVE_COMPLETION } serve_kind;

/* What a request may ask for at most. */
typedef struct serve_limits {
    int max_depth;     /* JSON nesting */
    int max_tokens;    /* max_tokens */
    int max_n;         /* n (choices) */
    int n_vocab;       /* token ids (prompt tokens, logit_bias) are below it; 0: unchecked */
    int n_adapters;    /* "lora" ids are below it */
    size_t max_prompt; /* prompt tokens given as ids */
} serve_limits;

typedef struct serve_lora_ref {
    int id;
    float scale;
} serve_lora_ref;

typedef struct serve_req {
    serve_kind kind;
    cJSON *root;       /* the parsed body: the strings below point into it or into owned */
    const char *model; /* NULL: the server's model */
    /* chat */
    cera_chat_message *msgs;
    int n_msgs;
    char *tools; /* a JSON array text, or NULL */
    bool tool_choice_none;
    bool tool_required;       /* tool_choice "required" or a named function */
    const char *tool_name;    /* tool_choice's named function, or NULL */
    bool parallel_tool_calls; /* more than one call allowed (default false, as llama-server) */
    char *gbnf;               /* response_format's grammar (json_object, json_schema), or NULL */
    char *extra;              /* chat_template_kwargs as a JSON object text, or NULL */
    /* completion: one prompt or an array of them, each a text or token ids */
    int n_prompts;
    const char *prompt_text[SERVE_PROMPTS_MAX]; /* NULL where given as token ids */
    cera_token *prompt_ids[SERVE_PROMPTS_MAX];
    size_t n_prompt_ids[SERVE_PROMPTS_MAX];
    const char *prompt;        /* the first prompt: prompt_text[0] */
    cera_token *prompt_tokens; /* prompt_ids[0] */
    size_t n_prompt_tokens;
    /* both */
    bool stream, include_usage;
    const char *stop[SERVE_STOP_MAX];
    int n_stop;
    cera_sampler_params sp; /* the server's defaults, changed by the request's fields */
    bool has_seed;
    cera_logit_bias *bias;
    int n_bias;
    int max_tokens; /* -1: not given */
    int n;
    int logprobs;       /* -1: none; else how many alternatives each token reports (top_logprobs) */
    bool chat_logprobs; /* chat's "logprobs": true (top_logprobs needs it) */
    int top_logprobs;   /* chat's "top_logprobs", -1 when not given */
    bool ignore_eos;
    bool has_lora; /* "lora" given (even empty): it replaces what "model" chose */
    serve_lora_ref lora[SERVE_LORA_MAX];
    int n_lora;
    char **owned; /* texts printed from parts of the body */
    int n_owned;
} serve_req;

/* Parses and checks a body. Returns 0 with *out filled (free it with serve_req_free), or an
 * HTTP status (400) with the reason in msg (and the parameter at fault in param, "" when
 * none); *out is then empty. defaults are the server's sampling parameters. */
int serve_req_parse(serve_kind kind, const char *body, size_t len, const cera_sampler_params *defaults,
                    const serve_limits *lim, serve_req *out, char *msg, size_t cap, char *param,
                    size_t param_cap);
void serve_req_free(serve_req *r);

/* llama-server's POST /lora-adapters body: an array of {"id", "scale"} (scale 1 when left
 * out). Returns 0 with out[0..*n) filled, or 400 with the reason in msg. */
int serve_lora_list_parse(const cJSON *v, const serve_limits *lim, serve_lora_ref *out, int *n, char *msg,
                          size_t cap);

/* Whether len bytes are valid UTF-8 without NUL bytes. */
bool serve_utf8_valid(const char *s, size_t len);
/* The length of the longest prefix of s[0..len) that does not end in the middle of a
 * UTF-8 character (an incomplete final sequence is left out). */
size_t serve_utf8_complete(const char *s, size_t len);

/* An OpenAI error object {"error": {"message", "type", "param", "code"}} as a malloc'ed
 * text; type from the status (invalid_request_error, authentication_error, ...). */
char *serve_error_json(int status, const char *message, const char *param);

/* The assistant message of a chat reply: the text split by the tool-call format
 * when parse_tools (content, reasoning_content, tool_calls with ids "call_<id_base>_<i>"), as
 * a new cJSON object; *n_calls receives the number of tool calls. NULL when out of memory. */
cJSON *serve_chat_message(cera_chat_format format, bool parse_tools, const char *text, size_t len,
                          const char *id_base, int *n_calls);

#endif

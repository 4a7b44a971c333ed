/*
 * template.h — cera's Jinja2-compatible chat-template engine.
 *
 * Chat templates (a GGUF's tokenizer.chat_template) are Jinja2 programs that Hugging Face
 * transformers runs in ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
 * with the loopcontrols extension. This engine renders them to the same bytes. A template
 * text is compiled once (syntax errors carry line and column) and rendered any number of
 * times with a context built from JSON (cJSON): messages, tools, add_generation_prompt,
 * bos_token, eos_token and extra keys merged as top-level variables, documents = None.
 *
 * Templates are untrusted input: rendering is bounded in recursion depth, output size,
 * loop iterations and memory, and fails with a clear error instead of crashing or hanging.
 * A failing raise_exception(msg) gives exactly msg as the error message; other render
 * errors read "line L: <Python exception class>: <what>".
 *
 * Known differences from Python (none seen in real chat templates): integers are 64-bit
 * (an overflow is an error, not a bigint); a JSON number written 1.0 arrives as the int 1
 * (cJSON keeps no text); str.format fields are {} / {0} / {name}
 * (no attribute or index fields, no grouping in specs);
 * case mapping has Python's special cases only for sharp s, the ligatures, dotted I and
 * final sigma; range() gives a list.
 */
#ifndef CERA_TEMPLATE_H
#define CERA_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/error.h"

typedef struct cJSON cJSON;
typedef struct cera_template cera_template;

/* Compiles a template text (len bytes, need not be NUL-terminated). On a syntax error
 * returns CERA_ERR_FORMAT with "line L, column C: ..." in err. */
cera_status cera_template_compile(const char *text, size_t len, cera_template **out, cera_error *err);
void cera_template_free(cera_template *t);

/* Limits of one render; zero fields take the defaults. */
typedef struct cera_template_limits {
    size_t max_output;  /* bytes of rendered text (default 16 MiB) */
    size_t max_memory;  /* bytes of values allocated while rendering (default 256 MiB) */
    uint64_t max_steps; /* loop iterations plus calls (default 10 million) */
    int max_depth;      /* nested macro calls / recursive loops (default 64) */
} cera_template_limits;

/* Everything a render reads. messages/tools/extra may be NULL (tools and missing
 * bos/eos then read as None / undefined). now is strftime_now's clock (UTC fields). */
typedef struct cera_template_inputs {
    const cJSON *messages;
    const cJSON *tools;
    const cJSON *extra; /* an object whose keys become top-level variables */
    const char *bos_token, *eos_token;
    int add_generation_prompt;
    time_t now;
    cera_template_limits limits;
} cera_template_inputs;

/* Renders into a malloc'd NUL-terminated string (*out, length *out_len). Template errors
 * (raise_exception, undefined attribute, type errors, sandbox refusals, limits) return
 * CERA_ERR_FORMAT with the message; *out is then NULL. */
cera_status cera_template_render(const cera_template *t, const cera_template_inputs *in, char **out,
                                 size_t *out_len, cera_error *err);

/* The goldens' fixed clock for strftime_now: 2026-01-15 00:00:00 UTC. */
#define CERA_TEMPLATE_GOLDEN_NOW ((time_t)1768435200)

/* Renders with the inputs of a golden case object (shared/golden/templates/caseNN.json:
 * messages, tools, add_generation_prompt, bos_token, eos_token, extra). */
cera_status cera_template_render_case(const cera_template *t, const cJSON *c, time_t now, char **out,
                                      size_t *out_len, cera_error *err);

#endif

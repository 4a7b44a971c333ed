/* cli.h — what the command files of the cera CLI share. */
#ifndef CERA_CLI_H
#define CERA_CLI_H

#include "cera.h"

#define CERA_COMMAND(name, help) int cmd_##name(int argc, char **argv);
#include "commands.def"
#undef CERA_COMMAND

/* Prints "cera: <message>" (from err) to stderr and returns exit code 1; a full context
 * adds how to get a larger one (-c). */
int cli_fail(const cera_error *err);
/* Prints "cera <cmd>: <formatted>" to stderr and returns exit code 2 (usage errors). */
int cli_usage_error(const char *cmd, const char *fmt, ...);

/* Parses "cpu", "cuda" or "auto" (the --device option); false when unknown. */
bool cli_parse_device(const char *s, cera_device *out);

/* A whole decimal integer in [lo, hi] / a whole float; false on anything else. */
bool cli_parse_long(const char *v, long lo, long hi, long *out);
bool cli_parse_float(const char *v, float *out);

/* The options every command that opens a model shares (run, logits): -m -p -f -t -c --kv
 * --device. CLI_ENGINE_HELP is their help text, in the commands' 22-column layout. */
typedef struct cli_engine_opts {
    const char *model, *text, *file;
    cera_engine_params ep;
} cli_engine_opts;

#define CLI_ENGINE_HELP                                                                                      \
    "  -m MODEL              a GGUF model\n"                                                                 \
    "  -p TEXT               the prompt\n"                                                                   \
    "  -f FILE               the prompt, from a file\n"                                                      \
    "  -t N                  threads (default: one per core; at most 512)\n"                                 \
    "  -c N                  context size (default: the model's, at most 4096)\n"                            \
    "  --kv f16|f32|q8_0     KV cache type (default f16, as llama.cpp; q8_0: CUDA only)\n"                   \
    "  --device D            cpu, cuda or auto (default: cuda when built in and a GPU exists)\n"

void cli_engine_opts_init(cli_engine_opts *o);
/* Warns on stderr when -c asked for more context than the model was trained on. */
void cli_warn_context(const cera_engine *e, const cli_engine_opts *o);
/* When argv[*i] is one of those options, takes it and its value (advancing *i) and returns
 * 1; returns 0 for any other argument; -1 after printing a usage error for `cmd` (a missing
 * or bad value). */
int cli_engine_opt(const char *cmd, int argc, char **argv, int *i, cli_engine_opts *o);

#endif

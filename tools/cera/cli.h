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

/* Parses a KV cache type by llama.cpp's name (f16, f32, bf16, q8_0, q4_0); false when unknown. */
bool cli_parse_kv_type(const char *s, cera_kv_type *out);

/* A whole decimal integer in [lo, hi] / a whole float; false on anything else. */
bool cli_parse_long(const char *v, long lo, long hi, long *out);
bool cli_parse_float(const char *v, float *out);

/* Warns on stderr when -c asked for more context than the model was trained on. */
void cli_warn_context(const cera_engine *e, int n_ctx);

#endif

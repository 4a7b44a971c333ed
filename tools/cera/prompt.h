/* prompt.h — what `cera run` and `cera logits` share: reading a prompt (text, file or
 * token ids) and turning it into tokens as llama.cpp does (BOS when the model's metadata
 * asks for it, special-token strings parsed). */
#ifndef CERA_CLI_PROMPT_H
#define CERA_CLI_PROMPT_H

#include <stddef.h>

#include "cera.h"

/* The most a prompt or tokens file may hold (far more than any context): reading stops
 * there with an error instead of growing without bound (-f /dev/zero). */
#define CLI_READ_MAX      ((size_t)64 << 20)
#define CLI_READ_MAX_TEXT "64 MiB"

/* Reads a whole file (a FIFO or /dev/stdin too) into a malloc'ed NUL-terminated buffer of
 * at most CLI_READ_MAX bytes; NULL (and err set) on failure. */
char *cli_read_file(const char *path, size_t *len, cera_error *err);

/* Reads a prompt file as llama.cpp's -f does: the whole file less one trailing newline. */
char *cli_read_prompt(const char *path, size_t *len, cera_error *err);

/* Tokenizes text (add_special, parse_special) into a malloc'ed array. */
cera_status cli_tokenize(const cera_engine *e, const char *text, size_t len, cera_token **out, size_t *n,
                         cera_error *err);

/* Reads token ids, one per line (whitespace separated), into a malloc'ed array. */
cera_status cli_read_tokens(const char *path, cera_token **out, size_t *n, cera_error *err);

#endif

/* prompt.h — what `cera run` and `cera logits` share: reading a prompt (text, file or
 * token ids) and turning it into tokens as llama.cpp does (BOS when the model's metadata
 * asks for it, special-token strings parsed). */
#ifndef CERA_CLI_PROMPT_H
#define CERA_CLI_PROMPT_H

#include <stddef.h>

#include "cera.h"

/* Reads a whole file into a malloc'ed NUL-terminated buffer; NULL (and err set) on failure. */
char *cli_read_file(const char *path, size_t *len, cera_error *err);

/* Reads a prompt file as llama.cpp's -f does: the whole file less one trailing newline. */
char *cli_read_prompt(const char *path, size_t *len, cera_error *err);

/* Tokenizes text (add_special, parse_special) into a malloc'ed array. */
cera_status cli_tokenize(const cera_engine *e, const char *text, size_t len, cera_token **out, size_t *n,
                         cera_error *err);

/* Reads token ids, one per line (whitespace separated), into a malloc'ed array. */
cera_status cli_read_tokens(const char *path, cera_token **out, size_t *n, cera_error *err);

#endif

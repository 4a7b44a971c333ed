/*
 * gen.h — what the generating commands (run, chat) share: Ctrl-C as a cancel flag, a
 * prompt evaluated in chunks with its progress on stderr (when stderr is a terminal),
 * the load and first-token times, and why a generation ended.
 */
#ifndef CERA_CLI_GEN_H
#define CERA_CLI_GEN_H

#include <stdbool.h>
#include <stddef.h>

#include "cera.h"

/* Set (atomically) by SIGINT once cli_cancel_install ran; the commands pass it as
 * cera_generate_params.cancel and clear it with cli_cancel_clear. cli_cancel_prepare,
 * called before the engine opens, blocks SIGINT in the threads the engine starts, so
 * that it reaches the main thread (interrupting a read there); cli_cancel_install then
 * takes SIGINT in the main thread. */
extern volatile int cli_cancel_flag;
void cli_cancel_prepare(void);
void cli_cancel_install(void);
void cli_cancel_clear(void);

double cli_now(void); /* seconds, monotonic */

/* Opens the engine, showing how much of the model is read while it loads when stderr is a
 * terminal; *load_s receives the seconds it took. */
cera_status cli_open_engine(const char *model, const cera_engine_params *ep, cera_engine **out,
                            double *load_s, cera_error *err);

/* Opens a chat template: `t` a file when one is there (or it looks like a path), otherwise
 * a template name of the model; t NULL: the model's own, or ChatML (said on stderr, with
 * `option` as the way to give another) when it has none. */
cera_status cli_open_template(const char *t, const cera_engine *e, const char *option,
                              cera_chat_template **out, cera_error *err);

/* Evaluates a prompt in chunks of at most n_batch tokens, showing "prompt i/n" on stderr
 * while it runs when stderr is a terminal and the prompt is long; stops with
 * CERA_ERR_CANCELLED when cli_cancel_flag is set. */
cera_status cli_eval_prompt(cera_session *s, const cera_token *toks, size_t n, int n_batch, cera_error *err);

/* The positions a context shift keeps for --keep (llama.cpp's rule): the whole prompt for -1
 * or more than it has, else keep tokens plus the BOS token when the prompt starts with it. */
int cli_keep_positions(const cera_engine *e, int keep, const cera_token *prompt, size_t n);

/* How a generation ended, from its status and counts: prints a line to stderr when the
 * end was not one the text or -n chose (a full context: with the -c fix; a Ctrl-C).
 * Returns the command's exit code: 0, or 1 for an error or when -n was not reached. */
int cli_report_end(cera_status st, const cera_error *err, const cera_session *s, int n_ctx, int n_predict,
                   int n_gen);

#endif

/*
 * lora_cli.h — the `--lora FILE` / `--lora-scaled FILE SCALE` options shared by the
 * commands that evaluate a model (run, logits, ...), implemented in lora.c.
 *
 * A command keeps a cli_lora_list, offers each argument to cli_lora_parse, and after
 * creating its session calls cli_lora_attach. FILE is a llama.cpp GGUF adapter or a
 * PEFT folder.
 */
#ifndef CERA_CLI_LORA_H
#define CERA_CLI_LORA_H

#include "cera.h"

#define CLI_LORA_MAX 16

typedef struct cli_lora_list {
    int n;
    const char *path[CLI_LORA_MAX];
    float scale[CLI_LORA_MAX];
} cli_lora_list;

/* Consumes --lora FILE or --lora-scaled FILE SCALE at argv[*i] (advancing *i past its
 * values) and returns 1; returns 0 when argv[*i] is neither; on a usage error prints
 * "cera <cmd>: ..." and returns -1. */
int cli_lora_parse(const char *cmd, int argc, char **argv, int *i, cli_lora_list *l);

/* Loads every adapter of the list for the engine and attaches it to the session at its
 * scale. The session keeps the adapters alive; nothing else needs freeing. */
cera_status cli_lora_attach(cera_engine *engine, cera_session *session, const cli_lora_list *l,
                            cera_error *err);

/* CERA_ERR_INVALID_ARG when the output file out is one of the adapters' files (a GGUF
 * adapter, or the adapter_config.json / adapter_model.safetensors of a PEFT folder). */
cera_status cli_lora_check_output(const cli_lora_list *l, const char *out, cera_error *err);

/* The usage lines describing the two options, for a command's --help. */
#define CLI_LORA_HELP                                                                                        \
    "  --lora FILE           a LoRA adapter (llama.cpp GGUF adapter or PEFT folder); repeatable\n"           \
    "  --lora-scaled FILE S  the same at scale S; repeatable\n"

#endif

/*
 * args.h — the one command-line parser of every cera command, with llama.cpp's option
 * names (short and long: -m/--model, -p/--prompt, -n/--n-predict, ...).
 *
 * A command picks the option groups it takes (CLI_G_*), and may add options of its own
 * through a handler called for any argument the groups do not know. `--name=value` is
 * accepted for every option that takes a value. The groups' options fill one cli_args;
 * cli_args_finish applies what depends on several options (escapes, the random seed,
 * -ngl) once parsing is done. --help text is made from the same table.
 */
#ifndef CERA_CLI_ARGS_H
#define CERA_CLI_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "cera.h"
#include "lora_cli.h"

enum {
    CLI_G_MODEL = 1 << 0,   /* -m -t -c -b --kv --device -ngl --parallel-slots */
    CLI_G_PROMPT = 1 << 1,  /* -p -f (- = stdin) -e --no-escape */
    CLI_G_SAMPLE = 1 << 2,  /* -s --temp --top-k --top-p --min-p --typical --repeat-penalty ... */
    CLI_G_GEN = 1 << 3,     /* -n -r/--reverse-prompt --stop --ignore-eos */
    CLI_G_LORA = 1 << 4,    /* --lora --lora-scaled */
    CLI_G_CHAT = 1 << 5,    /* -sys --template --chat-template-kwargs */
    CLI_G_GRAMMAR = 1 << 6, /* --grammar --grammar-file -j/--json-schema -jf --json */
    CLI_G_SPEC = 1 << 7,    /* -md --spec-type --spec-default --spec-ngram-simple-size-n --draft-max ... */
};

/* --spec-type: what drafts for speculative decoding */
enum { CLI_SPEC_NONE, CLI_SPEC_NGRAM_SIMPLE, CLI_SPEC_NGRAM_AUTO };

#define CLI_STOP_MAX 16

typedef struct cli_args {
    /* CLI_G_MODEL */
    const char *model;
    cera_engine_params ep;
    int n_gpu_layers; /* -1: not given */
    /* CLI_G_PROMPT */
    const char *prompt, *file;
    bool escape; /* llama.cpp's default: \n \t \\ \" \' \xNN in -p, -r, --stop, -sys */
    /* CLI_G_SAMPLE */
    cera_sampler_params sp;
    long long seed;  /* -1: random (the default, as llama.cpp) */
    bool seed_drawn; /* the seed was drawn at random (commands say which, to repeat a run) */
    /* CLI_G_GEN */
    int n_predict;
    const char *stop[CLI_STOP_MAX];
    int n_stop;
    bool ignore_eos;
    int keep;      /* --keep: prompt tokens a context shift keeps (-1: all) */
    int ctx_shift; /* -1: the command's default, 0 off, 1 on */
    /* CLI_G_SPEC: speculative decoding (cera_generate_params): a draft model, n-gram lookup
     * (CLI_SPEC_*; the default ngram-auto, which drafts only where it pays) */
    const char *model_draft;
    int spec_type;
    int spec_ngram_n, draft_max, draft_min;
    /* CLI_G_LORA */
    cli_lora_list lora;
    /* CLI_G_CHAT */
    const char *system;
    const char *chat_template; /* a file, or a name: tokenizer.chat_template.<name> / chatml */
    const char *chat_kwargs;   /* a JSON object of extra template variables */
    /* CLI_G_GRAMMAR: at most one of them (cli_args_grammar turns it into GBNF) */
    const char *grammar, *grammar_file, *json_schema, *json_schema_file;
    bool json;
    /* what the escapes were applied to (owned) */
    char *owned[CLI_STOP_MAX + 2];
    int n_owned;
} cli_args;

/* A command's own options: called with argv[*i] when no group knows it; takes it (and its
 * values, advancing *i) and returns 1, returns 0 when it does not know it either, -1 after
 * printing a usage error. */
typedef int (*cli_extra_fn)(const char *cmd, int argc, char **argv, int *i, void *user);

/* For a command's own option with a value: takes argv[*i + 1] into *dst (advancing *i) and
 * returns 1, or prints that the option needs a value and returns -1. */
int cli_take_value(const char *cmd, int argc, char **argv, int *i, const char **dst);

void cli_args_init(cli_args *a);
void cli_args_free(cli_args *a);

/* Parses argv[1..]. Returns 0 to go on, 1 when --help was asked for (and printed; the
 * command returns 0), 2 on a usage error (printed; the command returns 2). usage is the
 * command's first help line(s), extra_help the lines of its own options (may be NULL);
 * a NULL usage leaves printing the help to the command. */
int cli_parse(const char *cmd, unsigned groups, int argc, char **argv, cli_args *a, cli_extra_fn extra,
              void *user, const char *usage, const char *extra_help);

/* After cli_parse: escapes, the seed (a random one drawn when -s is -1 or not given:
 * seed_drawn), -ngl choosing the device. Returns 2 after a usage error. */
int cli_args_finish(const char *cmd, unsigned groups, cli_args *a);

/* The prompt of -p or -f (- reads stdin); NULL with err set on failure. *owned receives
 * the buffer to free (NULL for -p). */
const char *cli_args_prompt(const cli_args *a, size_t *len, char **owned, cera_error *err);

/* The options' n-gram lookup (cera_generate_params.spec_ngram), and gp's speculation fields
 * but the draft session set from them. */
int cli_spec_ngram(const cli_args *a);
void cli_spec_apply(const cli_args *a, cera_generate_params *gp);
/* Speculative decoding as the options ask: gp's fields set, and with -md a draft engine and
 * session opened beside e (*de, *ds; freed with cli_spec_close). */
cera_status cli_spec_open(const cli_args *a, cera_engine *e, cera_generate_params *gp, cera_engine **de,
                          cera_session **ds, cera_error *err);
void cli_spec_close(cera_engine *de, cera_session *ds);
/* Prints "cera: speculative: N drafted, M accepted (P %)" to stderr when anything was drafted. */
void cli_spec_report(int n_drafted, int n_accepted);

/* The GBNF text the grammar options ask for (the grammar itself, a file's, a JSON Schema's
 * conversion, or any JSON object for --json): *gbnf is malloc'ed (free it), NULL when no
 * grammar was asked for. A -j value that starts with `{` is the schema itself, otherwise
 * a file. Returns CERA_OK or the error (a file that does not read, a schema refused). */
cera_status cli_args_grammar(const cli_args *a, char **gbnf, size_t *len, cera_error *err);

/* Prints the help of the groups' options. */
void cli_print_options(FILE *out, unsigned groups);

/* Processes llama.cpp's escapes in place over len bytes (\n \r \t \' \" \\ \xNN; others stay
 * as written) and returns the new length (NUL-terminated when shorter). */
size_t cli_unescape(char *s, size_t len);

#endif

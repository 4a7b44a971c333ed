/*
 * args.c — the shared command-line parser (args.h): one table of options with llama.cpp's
 * names, grouped by concern, parsed into a cli_args, and the help text made from it.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "prompt.h"
#include "core/error.h"

typedef enum opt_id {
    O_MODEL,
    O_THREADS,
    O_CTX,
    O_BATCH,
    O_KV,
    O_KV_K,
    O_KV_V,
    O_KV_NO_ROT,
    O_DEVICE,
    O_NGL,
    O_PROMPT,
    O_FILE,
    O_ESCAPE,
    O_NO_ESCAPE,
    O_SEED,
    O_TEMP,
    O_TOP_K,
    O_TOP_P,
    O_MIN_P,
    O_TYPICAL,
    O_REPEAT,
    O_REPEAT_N,
    O_PRESENCE,
    O_FREQUENCY,
    O_PREDICT,
    O_REVERSE,
    O_STOP,
    O_IGNORE_EOS,
    O_KEEP,
    O_CTX_SHIFT,
    O_NO_CTX_SHIFT,
    O_MODEL_DRAFT,
    O_DRAFT_MAX,
    O_DRAFT_MIN,
    O_SPEC_TYPE,
    O_SPEC_DEFAULT,
    O_SPEC_NGRAM,
    O_SYSTEM,
    O_TEMPLATE,
    O_KWARGS,
    O_GRAMMAR,
    O_GRAMMAR_FILE,
    O_JSON_SCHEMA,
    O_JSON_SCHEMA_FILE,
    O_JSON,
} opt_id;

typedef struct opt {
    unsigned group;
    opt_id id;
    const char *names[4]; /* NULL-terminated */
    const char *meta;     /* the value's name; NULL for a flag */
    const char *help;
} opt;

static const opt opts[] = {
    {CLI_G_MODEL, O_MODEL, {"-m", "--model"}, "FILE", "a GGUF model"},
    {CLI_G_MODEL, O_THREADS, {"-t", "--threads"}, "N", "CPU threads (default: one per core; at most 512)"},
    {CLI_G_MODEL, O_CTX, {"-c", "--ctx-size"}, "N", "context size (default: the model's, at most 4096)"},
    {CLI_G_MODEL, O_BATCH, {"-b", "--batch-size"}, "N", "most tokens per forward pass (default 512)"},
    {CLI_G_MODEL,
     O_KV,
     {"--kv"},
     "TYPE",
     "KV cache type of K and V: f16 (default), f32 (the CPU only), bf16, q8_0, q4_0"},
    {CLI_G_MODEL, O_KV_K, {"-ctk", "--cache-type-k"}, "TYPE", "K's cache type alone (as --kv)"},
    {CLI_G_MODEL, O_KV_V, {"-ctv", "--cache-type-v"}, "TYPE", "V's cache type alone (as --kv)"},
    {CLI_G_MODEL,
     O_KV_NO_ROT,
     {"--no-kv-rotation"},
     NULL,
     "keep q8_0/q4_0 caches unrotated (default: Walsh-Hadamard rotated, as llama.cpp)"},
    {CLI_G_MODEL,
     O_DEVICE,
     {"--device"},
     "D",
     "cpu, cuda, cuda:N (the N-th GPU) or auto (default: cuda when built in and a GPU exists)"},
    {CLI_G_MODEL,
     O_NGL,
     {"-ngl", "--n-gpu-layers", "--gpu-layers"},
     "N",
     "0 = the CPU; more (or all/auto) = every layer on the GPU"},
    {CLI_G_PROMPT, O_PROMPT, {"-p", "--prompt"}, "TEXT", "the prompt"},
    {CLI_G_PROMPT,
     O_FILE,
     {"-f", "--file"},
     "FILE",
     "the prompt from a file (- = stdin), less one final newline"},
    {CLI_G_PROMPT,
     O_ESCAPE,
     {"-e", "--escape"},
     NULL,
     "process escapes (\\n \\r \\t \\' \\\" \\\\ \\xNN) in prompts and stop strings (default)"},
    {CLI_G_PROMPT, O_NO_ESCAPE, {"--no-escape"}, NULL, "do not process escapes"},
    {CLI_G_SAMPLE, O_SEED, {"-s", "--seed"}, "N", "the sampler's seed (default -1: a random one)"},
    {CLI_G_SAMPLE, O_TEMP, {"--temp", "--temperature"}, "T", "temperature (default 0.8; 0 = greedy)"},
    {CLI_G_SAMPLE, O_TOP_K, {"--top-k"}, "K", "top-k (default 40; 0 disables)"},
    {CLI_G_SAMPLE, O_TOP_P, {"--top-p"}, "P", "top-p (default 0.95; 1 disables)"},
    {CLI_G_SAMPLE, O_MIN_P, {"--min-p"}, "P", "min-p (default 0.05; 0 disables)"},
    {CLI_G_SAMPLE, O_TYPICAL, {"--typical", "--typical-p"}, "P", "locally typical sampling (default 1: off)"},
    {CLI_G_SAMPLE, O_REPEAT, {"--repeat-penalty"}, "R", "repetition penalty (default 1: off)"},
    {CLI_G_SAMPLE,
     O_REPEAT_N,
     {"--repeat-last-n"},
     "N",
     "tokens the penalties look back over (default 64; -1 = the context)"},
    {CLI_G_SAMPLE, O_PRESENCE, {"--presence-penalty"}, "P", "presence penalty (default 0: off)"},
    {CLI_G_SAMPLE, O_FREQUENCY, {"--frequency-penalty"}, "P", "frequency penalty (default 0: off)"},
    {CLI_G_GEN,
     O_PREDICT,
     {"-n", "--n-predict", "--predict"},
     "N",
     "tokens to generate at most (default -1: until the end of the text or a full context)"},
    {CLI_G_GEN, O_REVERSE, {"-r", "--reverse-prompt"}, "TEXT", "stop at TEXT (repeatable)"},
    {CLI_G_GEN, O_STOP, {"--stop"}, "TEXT", "the same as -r (repeatable)"},
    {CLI_G_GEN, O_IGNORE_EOS, {"--ignore-eos"}, NULL, "go on past end-of-generation tokens"},
    {CLI_G_GEN,
     O_KEEP,
     {"--keep"},
     "N",
     "prompt tokens a context shift keeps (default 0, -1 = all; the BOS token is always kept)"},
    {CLI_G_GEN,
     O_CTX_SHIFT,
     {"--context-shift"},
     NULL,
     "when the context is full, drop half of what follows --keep and go on (default: run off, chat on)"},
    {CLI_G_GEN, O_NO_CTX_SHIFT, {"--no-context-shift"}, NULL, "stop at a full context"},
    {CLI_G_SPEC,
     O_MODEL_DRAFT,
     {"-md", "--model-draft", "--spec-draft-model"},
     "FILE",
     "speculative decoding with this draft model (the same vocabulary; greedy drafts)"},
    {CLI_G_SPEC,
     O_SPEC_TYPE,
     {"--spec-type"},
     "TYPE",
     "ngram-auto (the default): draft what followed the longest earlier occurrence of the text's "
     "ending, as far as its measured cost pays; ngram-simple: what followed the last n-gram; none: off"},
    {CLI_G_SPEC, O_SPEC_DEFAULT, {"--spec-default"}, NULL, "ngram-auto (llama.cpp's flag)"},
    {CLI_G_SPEC,
     O_SPEC_NGRAM,
     {"--spec-ngram-simple-size-n"},
     "N",
     "the n-gram ngram-simple looks up (default 12)"},
    {CLI_G_SPEC,
     O_DRAFT_MAX,
     {"--draft-max", "--draft", "--draft-n", "--spec-draft-n-max"},
     "N",
     "most tokens drafted at a time (default 16)"},
    {CLI_G_SPEC,
     O_DRAFT_MIN,
     {"--draft-min", "--draft-n-min", "--spec-draft-n-min"},
     "N",
     "fewer drafted tokens are not tried (default 1)"},
    {CLI_G_CHAT, O_SYSTEM, {"-sys", "--system-prompt"}, "TEXT", "the system message"},
    {CLI_G_CHAT,
     O_TEMPLATE,
     {"--template", "--chat-template-file"},
     "FILE|NAME",
     "a Jinja chat template file, or the model's template of that name (chatml: built in)"},
    {CLI_G_CHAT,
     O_KWARGS,
     {"--chat-template-kwargs"},
     "JSON",
     "more template variables, e.g. '{\"enable_thinking\": false}'"},
    {CLI_G_GRAMMAR,
     O_GRAMMAR,
     {"--grammar"},
     "GBNF",
     "constrain the output to a GBNF grammar (root: its start)"},
    {CLI_G_GRAMMAR, O_GRAMMAR_FILE, {"--grammar-file"}, "FILE", "the GBNF grammar from a file"},
    {CLI_G_GRAMMAR,
     O_JSON_SCHEMA,
     {"-j", "--json-schema"},
     "SCHEMA",
     "constrain the output to a JSON Schema: the schema itself when it starts with {, else a file"},
    {CLI_G_GRAMMAR, O_JSON_SCHEMA_FILE, {"-jf", "--json-schema-file"}, "FILE", "the JSON Schema from a file"},
    {CLI_G_GRAMMAR, O_JSON, {"--json"}, NULL, "constrain the output to a JSON object (any)"},
};
#define N_OPTS (sizeof opts / sizeof opts[0])

void cli_args_init(cli_args *a) {
    memset(a, 0, sizeof *a);
    a->ep = cera_engine_default_params();
    a->n_gpu_layers = -1;
    a->escape = true;
    a->sp = cera_sampler_default_params();
    a->seed = -1;
    a->n_predict = -1;
    a->ctx_shift = -1;
    a->spec_type = CLI_SPEC_NGRAM_AUTO;
    a->spec_ngram_n = 12; /* llama.cpp's ngram-simple size_n */
}

void cli_args_free(cli_args *a) {
    for (int i = 0; i < a->n_owned; i++) free(a->owned[i]);
    a->n_owned = 0;
}

/* The option named `name` (its first len bytes) among the groups, or NULL. */
static const opt *find(unsigned groups, const char *name, size_t len) {
    for (size_t k = 0; k < N_OPTS; k++) {
        if (!(opts[k].group & groups)) continue;
        for (int j = 0; j < 4 && opts[k].names[j]; j++)
            if (strlen(opts[k].names[j]) == len && !strncmp(opts[k].names[j], name, len)) return &opts[k];
    }
    return NULL;
}

static bool parse_float_in(const char *v, float lo, float hi, float *out) {
    return cli_parse_float(v, out) && *out >= lo && *out <= hi;
}

static bool parse_int(const char *v, long lo, long hi, int *out) {
    long l;
    if (!cli_parse_long(v, lo, hi, &l)) return false;
    *out = (int)l;
    return true;
}

/* Applies one option's value; false when the value is bad. */
static bool apply(const char *cmd, const opt *o, const char *v, cli_args *a) {
    float f;
    long l;
    switch (o->id) {
    case O_MODEL: a->model = v; return true;
    case O_THREADS: return parse_int(v, 0, 512, &a->ep.n_threads);
    case O_CTX: return parse_int(v, 0, 1 << 24, &a->ep.n_ctx);
    case O_BATCH: return parse_int(v, 1, 1 << 24, &a->ep.n_batch);
    case O_KV:
    case O_KV_K:
    case O_KV_V: {
        cera_kv_type t;
        if (!cli_parse_kv_type(v, &t)) return false;
        if (o->id != O_KV_V) a->ep.kv_type = t;
        if (o->id == O_KV_V)
            a->ep.kv_type_v = t;
        else if (o->id == O_KV) /* both */
            a->ep.kv_type_v = CERA_KV_AS_K;
        else if (a->ep.kv_type_v == CERA_KV_AS_K) /* -ctk alone: V stays F16, as llama.cpp */
            a->ep.kv_type_v = CERA_KV_F16;
        return true;
    }
    case O_KV_NO_ROT: a->ep.kv_rotation = -1; return true;
    case O_DEVICE: return cli_parse_device(v, &a->ep.device);
    case O_NGL:
        if (!strcmp(v, "all") || !strcmp(v, "auto")) {
            a->n_gpu_layers = INT_MAX;
            return true;
        }
        return parse_int(v, 0, INT_MAX, &a->n_gpu_layers);
    case O_PROMPT: a->prompt = v; return true;
    case O_FILE: a->file = v; return true;
    case O_ESCAPE: a->escape = true; return true;
    case O_NO_ESCAPE: a->escape = false; return true;
    case O_SEED:
        if (!cli_parse_long(v, -1, (long)UINT32_MAX, &l)) return false;
        a->seed = (l == (long)UINT32_MAX) ? -1 : l; /* llama.cpp's LLAMA_DEFAULT_SEED: random */
        return true;
    case O_TEMP: return cli_parse_float(v, &a->sp.temp);
    case O_TOP_K: return parse_int(v, 0, 1 << 30, &a->sp.top_k);
    case O_TOP_P: return parse_float_in(v, 0, 1, &a->sp.top_p);
    case O_MIN_P: return parse_float_in(v, 0, 1, &a->sp.min_p);
    case O_TYPICAL: return parse_float_in(v, 0, 1, &a->sp.typical_p);
    case O_REPEAT:
        if (!parse_float_in(v, 0, 1e9f, &f) || f <= 0) return false;
        a->sp.repeat_penalty = f;
        return true;
    case O_REPEAT_N: return parse_int(v, -1, 1 << 24, &a->sp.penalty_last_n);
    case O_PRESENCE: return parse_float_in(v, -1e9f, 1e9f, &a->sp.presence_penalty);
    case O_FREQUENCY: return parse_float_in(v, -1e9f, 1e9f, &a->sp.freq_penalty);
    case O_PREDICT: return parse_int(v, -1, 1000000000, &a->n_predict);
    case O_REVERSE:
    case O_STOP:
        if (a->n_stop == CLI_STOP_MAX) {
            cli_usage_error(cmd, "at most %d stop strings", CLI_STOP_MAX);
            return false;
        }
        if (!*v) return false;
        a->stop[a->n_stop++] = v;
        return true;
    case O_IGNORE_EOS: a->ignore_eos = true; return true;
    case O_KEEP: return parse_int(v, -1, 1 << 24, &a->keep);
    case O_CTX_SHIFT: a->ctx_shift = 1; return true;
    case O_NO_CTX_SHIFT: a->ctx_shift = 0; return true;
    case O_MODEL_DRAFT: a->model_draft = v; return true;
    case O_DRAFT_MAX: return parse_int(v, 1, 1024, &a->draft_max);
    case O_DRAFT_MIN: return parse_int(v, 0, 1024, &a->draft_min);
    case O_SPEC_NGRAM: return parse_int(v, 1, 1024, &a->spec_ngram_n);
    case O_SPEC_TYPE:
        if (!strcmp(v, "none"))
            a->spec_type = CLI_SPEC_NONE;
        else if (!strcmp(v, "ngram-simple"))
            a->spec_type = CLI_SPEC_NGRAM_SIMPLE;
        else if (!strcmp(v, "ngram-auto"))
            a->spec_type = CLI_SPEC_NGRAM_AUTO;
        else
            return false;
        return true;
    case O_SPEC_DEFAULT: a->spec_type = CLI_SPEC_NGRAM_AUTO; return true;
    case O_SYSTEM: a->system = v; return true;
    case O_TEMPLATE: a->chat_template = v; return true;
    case O_KWARGS: a->chat_kwargs = v; return true;
    case O_GRAMMAR: a->grammar = v; return true;
    case O_GRAMMAR_FILE: a->grammar_file = v; return true;
    case O_JSON_SCHEMA: a->json_schema = v; return true;
    case O_JSON_SCHEMA_FILE: a->json_schema_file = v; return true;
    case O_JSON: a->json = true; return true;
    }
    return false;
}

int cli_parse(const char *cmd, unsigned groups, int argc, char **argv, cli_args *a, cli_extra_fn extra,
              void *user, const char *usage, const char *extra_help) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            if (!usage) return 1; /* the command prints its own help */
            fputs(usage, stdout);
            fputs("\n", stdout);
            cli_print_options(stdout, groups);
            if (extra_help) fputs(extra_help, stdout);
            fputs("  -h, --help            this help\n", stdout);
            return 1;
        }
        if (groups & CLI_G_LORA) {
            const int r = cli_lora_parse(cmd, argc, argv, &i, &a->lora);
            if (r < 0) return 2;
            if (r) continue;
        }
        const char *eq = arg[0] == '-' && arg[1] == '-' ? strchr(arg, '=') : NULL;
        const opt *o = find(groups, arg, eq ? (size_t)(eq - arg) : strlen(arg));
        if (!o) {
            int r = 0;
            if (extra && eq) { /* the command's own --name=value: offered as "--name" "value" */
                char name[64];
                snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
                char *pair[3] = {name, (char *)eq + 1, NULL};
                int j = 0;
                r = extra(cmd, 2, pair, &j, user);
                if (r > 0 && j != 1) {
                    cli_usage_error(cmd, "%s takes no value", name);
                    return 2;
                }
            } else if (extra) {
                r = extra(cmd, argc, argv, &i, user);
            }
            if (r < 0) return 2;
            if (r) continue;
            cli_usage_error(cmd, "unknown option '%s' (see --help)", arg);
            return 2;
        }
        const char *v = NULL;
        if (o->meta) {
            if (eq) {
                v = eq + 1;
            } else if (i + 1 < argc) {
                v = argv[++i];
            } else {
                cli_usage_error(cmd, "%s needs a value (%s)", arg, o->meta);
                return 2;
            }
        } else if (eq) {
            cli_usage_error(cmd, "%.*s takes no value", (int)(eq - arg), arg);
            return 2;
        }
        if (!apply(cmd, o, v, a)) {
            cli_usage_error(cmd, "bad value for %s: '%s'", o->names[0], v ? v : "");
            return 2;
        }
    }
    return 0;
}

size_t cli_unescape(char *s, size_t len) {
    size_t w = 0;
    for (size_t r = 0; r < len; r++) {
        if (s[r] != '\\' || r + 1 >= len) {
            s[w++] = s[r];
            continue;
        }
        const char c = s[++r];
        switch (c) {
        case 'n': s[w++] = '\n'; break;
        case 'r': s[w++] = '\r'; break;
        case 't': s[w++] = '\t'; break;
        case '\'': s[w++] = '\''; break;
        case '"': s[w++] = '"'; break;
        case '\\': s[w++] = '\\'; break;
        case 'x':
            if (r + 2 < len) { /* as llama.cpp: strtol over the next two bytes */
                const char hex[3] = {s[r + 1], s[r + 2], 0};
                char *end;
                const long v = strtol(hex, &end, 16);
                if (end == hex + 2) {
                    s[w++] = (char)v;
                    r += 2;
                    break;
                }
            }
            goto literal; /* not two hex digits */
        default:
        literal:
            s[w++] = '\\';
            s[w++] = c;
        }
    }
    if (w < len) s[w] = 0;
    return w;
}

/* An escaped copy of s owned by a; NULL when out of memory. */
static const char *escaped(cli_args *a, const char *s) {
    if (!s || a->n_owned == (int)(sizeof a->owned / sizeof a->owned[0])) return s;
    char *d = strdup(s);
    if (!d) return NULL;
    cli_unescape(d, strlen(d));
    a->owned[a->n_owned++] = d;
    return d;
}

int cli_args_finish(const char *cmd, unsigned groups, cli_args *a) {
    if (a->escape && (groups & (CLI_G_PROMPT | CLI_G_GEN | CLI_G_CHAT))) {
        a->prompt = escaped(a, a->prompt);
        a->system = escaped(a, a->system);
        for (int i = 0; i < a->n_stop; i++) a->stop[i] = escaped(a, a->stop[i]);
    }
    if (groups & CLI_G_SAMPLE) {
        if (a->seed < 0) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            a->seed = (long long)(((uint64_t)ts.tv_nsec * 2654435761u) ^ (uint64_t)ts.tv_sec ^
                                  ((uint64_t)getpid() << 16)) &
                      0xfffffffe;
            a->seed_drawn = true;
        }
        a->sp.seed = (uint64_t)a->seed;
    }
    if (a->n_gpu_layers >= 0) {
        if (a->ep.device != CERA_DEVICE_AUTO && (a->ep.device == CERA_DEVICE_CPU) != (a->n_gpu_layers == 0))
            return cli_usage_error(cmd, "-ngl %d and --device disagree", a->n_gpu_layers);
        a->ep.device = a->n_gpu_layers == 0 ? CERA_DEVICE_CPU : CERA_DEVICE_CUDA;
    }
    if ((groups & CLI_G_PROMPT) && a->prompt && a->file)
        return cli_usage_error(cmd, "give one of -p TEXT, -f FILE, not both");
    if ((a->grammar != NULL) + (a->grammar_file != NULL) + (a->json_schema != NULL) +
            (a->json_schema_file != NULL) + a->json >
        1)
        return cli_usage_error(cmd, "give at most one of --grammar, --grammar-file, --json-schema, "
                                    "--json-schema-file, --json");
    return 0;
}

cera_status cli_args_grammar(const cli_args *a, char **gbnf, size_t *len, cera_error *err) {
    *gbnf = NULL;
    *len = 0;
    if (a->grammar) {
        if (!(*gbnf = strdup(a->grammar))) return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar");
        *len = strlen(*gbnf);
        return CERA_OK;
    }
    if (a->grammar_file) {
        if (!(*gbnf = cli_read_file(a->grammar_file, len, err))) return err->status;
        return CERA_OK;
    }
    if (!a->json && !a->json_schema && !a->json_schema_file) return CERA_OK;
    const char *schema = a->json ? "{\"type\":\"object\"}" : a->json_schema;
    const char *path = a->json_schema_file;
    if (schema && schema[0] != '{') path = schema; /* -j FILE */
    char *text = NULL;
    size_t n = 0;
    if (path) {
        if (!(text = cli_read_file(path, &n, err))) return err->status;
        schema = text;
    } else {
        n = strlen(schema);
    }
    char *out = NULL;
    cera_status st = cera_json_schema_to_grammar(schema, n, &out, err);
    free(text);
    if (st) {
        cera_error_prefix(err, "%s", path ? path : "the JSON schema");
        return st;
    }
    *gbnf = strdup(out);
    cera_free(out);
    if (!*gbnf) return cera_fail(err, CERA_ERR_NO_MEMORY, "grammar");
    *len = strlen(*gbnf);
    return CERA_OK;
}

const char *cli_args_prompt(const cli_args *a, size_t *len, char **owned, cera_error *err) {
    *owned = NULL;
    if (a->prompt) {
        *len = strlen(a->prompt);
        return a->prompt;
    }
    char *text = cli_read_prompt(!strcmp(a->file, "-") ? "/dev/stdin" : a->file, len, err);
    if (text && a->escape) *len = cli_unescape(text, *len);
    return *owned = text;
}

void cli_print_options(FILE *out, unsigned groups) {
    for (size_t k = 0; k < N_OPTS; k++) {
        if (!(opts[k].group & groups)) continue;
        char names[64];
        size_t n = 0;
        for (int j = 0; j < 4 && opts[k].names[j]; j++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s%s", j ? ", " : "", opts[k].names[j]);
        if (opts[k].meta) snprintf(names + n, sizeof names - n, " %s", opts[k].meta);
        if (strlen(names) > 21)
            fprintf(out, "  %s\n  %-21s %s\n", names, "", opts[k].help);
        else
            fprintf(out, "  %-21s %s\n", names, opts[k].help);
    }
    if (groups & CLI_G_LORA) fputs(CLI_LORA_HELP, out);
}

int cli_take_value(const char *cmd, int argc, char **argv, int *i, const char **dst) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "%s needs a value", argv[*i]);
        return -1;
    }
    *dst = argv[++*i];
    return 1;
}

int cli_spec_ngram(const cli_args *a) {
    return a->spec_type == CLI_SPEC_NGRAM_SIMPLE ? a->spec_ngram_n
           : a->spec_type == CLI_SPEC_NGRAM_AUTO ? CERA_SPEC_AUTO
                                                 : 0;
}

void cli_spec_apply(const cli_args *a, cera_generate_params *gp) {
    gp->spec_ngram = cli_spec_ngram(a);
    gp->draft_max = a->draft_max;
    gp->draft_min = a->draft_min;
}

cera_status cli_spec_open(const cli_args *a, cera_engine *e, cera_generate_params *gp, cera_engine **de,
                          cera_session **ds, cera_error *err) {
    *de = NULL;
    *ds = NULL;
    cli_spec_apply(a, gp);
    if (!a->model_draft) return CERA_OK;
    cera_engine_params ep = a->ep; /* the same context, threads, device and cache */
    ep.progress = NULL;
    cera_status st = cera_engine_open(a->model_draft, &ep, de, err);
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0.0f; /* the drafts are argmax picks; its sampler is not used */
    if (!st) st = cera_session_create(*de, &sp, ds, err);
    if (!st && cera_engine_n_vocab(*de) != cera_engine_n_vocab(e))
        st = cera_fail(err, CERA_ERR_INVALID_ARG, "%s: a vocabulary of %d tokens, the model's has %d",
                       a->model_draft, cera_engine_n_vocab(*de), cera_engine_n_vocab(e));
    if (st) {
        cli_spec_close(*de, *ds);
        *de = NULL;
        *ds = NULL;
        return st;
    }
    gp->draft = *ds;
    return CERA_OK;
}

void cli_spec_close(cera_engine *de, cera_session *ds) {
    cera_session_free(ds);
    cera_engine_close(de);
}

void cli_spec_report(int n_drafted, int n_accepted) {
    if (n_drafted > 0)
        fprintf(stderr, "cera: speculative: %d drafted, %d accepted (%.1f %%)\n", n_drafted, n_accepted,
                100.0 * n_accepted / n_drafted);
}

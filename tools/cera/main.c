/* main.c — the cera command-line tool: dispatches `cera <command> ...` to the
 * command's file (see commands.def). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
#define CERA_COMMAND(name, help) {#name, help, cmd_##name},
#include "commands.def"
#undef CERA_COMMAND
    {NULL, NULL, NULL},
};

static void usage(FILE *out) {
    fprintf(out, "cera %s — LLM inference for GGUF models\n\nusage: cera <command> [options]\n\ncommands:\n",
            cera_version());
    for (size_t i = 0; commands[i].name; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n`cera <command> --help` describes a command.\n");
}

int cli_fail(const cera_error *err) {
    fprintf(stderr, "cera: %s%s\n", err->message[0] ? err->message : cera_status_str(err->status),
            err->status == CERA_ERR_CONTEXT_FULL ? " (-c N sets a larger context)" : "");
    return 1;
}

void cli_warn_context(const cera_engine *e, const cli_engine_opts *o) {
    const int train = cera_engine_n_ctx_train(e);
    if (o->ep.n_ctx > 0 && train > 0 && o->ep.n_ctx > train)
        fprintf(stderr,
                "cera: warning: -c %d exceeds the context the model was trained on (%d): past it, output "
                "quality is not to be trusted\n",
                o->ep.n_ctx, train);
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    fprintf(stderr, "cera %s: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    return 2;
}

bool cli_parse_device(const char *s, cera_device *out) {
    if (!strcmp(s, "cpu"))
        *out = CERA_DEVICE_CPU;
    else if (!strcmp(s, "cuda"))
        *out = CERA_DEVICE_CUDA;
    else if (!strcmp(s, "auto"))
        *out = CERA_DEVICE_AUTO;
    else
        return false;
    return true;
}

bool cli_parse_long(const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    const long l = strtol(v, &end, 10);
    if (end == v || *end != '\0' || errno == ERANGE || l < lo || l > hi) return false;
    *out = l;
    return true;
}

bool cli_parse_float(const char *v, float *out) {
    char *end;
    *out = strtof(v, &end);
    return end != v && *end == '\0';
}

void cli_engine_opts_init(cli_engine_opts *o) {
    memset(o, 0, sizeof *o);
    o->ep = cera_engine_default_params();
}

int cli_engine_opt(const char *cmd, int argc, char **argv, int *i, cli_engine_opts *o) {
    static const char *const names[] = {"-m", "-p", "-f", "-t", "-c", "--kv", "--device"};
    const char *a = argv[*i];
    size_t k = 0;
    while (k < sizeof names / sizeof names[0] && strcmp(a, names[k])) k++;
    if (k == sizeof names / sizeof names[0]) return 0;
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "missing value for %s", a);
        return -1;
    }
    const char *v = argv[++*i];
    long l = 0;
    bool ok = true;
    switch (k) {
    case 0: o->model = v; break;
    case 1: o->text = v; break;
    case 2: o->file = v; break;
    case 3:
        ok = cli_parse_long(v, 0, 512, &l);
        o->ep.n_threads = (int)l;
        break;
    case 4:
        ok = cli_parse_long(v, 0, 1 << 24, &l);
        o->ep.n_ctx = (int)l;
        break;
    case 5:
        ok = !strcmp(v, "f16") || !strcmp(v, "f32") || !strcmp(v, "q8_0");
        o->ep.kv_type = !strcmp(v, "f32") ? CERA_KV_F32 : !strcmp(v, "q8_0") ? CERA_KV_Q8_0 : CERA_KV_F16;
        break;
    default: ok = cli_parse_device(v, &o->ep.device); break;
    }
    if (!ok) {
        cli_usage_error(cmd, "bad value for %s: '%s'", a, v);
        return -1;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("cera %s\n", cera_version());
        return 0;
    }
    for (size_t i = 0; commands[i].name; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "cera: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

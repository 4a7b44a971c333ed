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

void cli_warn_context(const cera_engine *e, int n_ctx) {
    const int train = cera_engine_n_ctx_train(e);
    if (n_ctx > 0 && train > 0 && n_ctx > train)
        fprintf(stderr,
                "cera: warning: -c %d exceeds the context the model was trained on (%d): past it, output "
                "quality is not to be trusted\n",
                n_ctx, train);
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

/* cuda:N: the N-th GPU, by narrowing CUDA_VISIBLE_DEVICES to it (to the N-th of its list
 * when it is set already) before the CUDA runtime starts, so that the engine's device 0 is
 * that GPU (one server process per GPU). */
static bool pick_gpu(const char *n) {
    long k;
    if (!cli_parse_long(n, 0, 1023, &k)) return false;
    char pick[64];
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && *vis) {
        const char *p = vis;
        for (long i = 0; i < k && p; i++) {
            p = strchr(p, ',');
            if (p) p++;
        }
        if (!p || !*p) return false;
        const size_t len = strcspn(p, ",");
        if (len >= sizeof pick) return false;
        memcpy(pick, p, len);
        pick[len] = 0;
    } else {
        snprintf(pick, sizeof pick, "%ld", k);
    }
    return setenv("CUDA_VISIBLE_DEVICES", pick, 1) == 0;
}

bool cli_parse_device(const char *s, cera_device *out) {
    if (!strncmp(s, "cuda:", 5)) {
        if (!pick_gpu(s + 5)) return false;
        *out = CERA_DEVICE_CUDA;
    } else if (!strcmp(s, "cpu"))
        *out = CERA_DEVICE_CPU;
    else if (!strcmp(s, "cuda"))
        *out = CERA_DEVICE_CUDA;
    else if (!strcmp(s, "auto"))
        *out = CERA_DEVICE_AUTO;
    else
        return false;
    return true;
}

bool cli_parse_kv_type(const char *s, cera_kv_type *out) {
    static const struct {
        const char *name;
        cera_kv_type type;
    } types[] = {{"f16", CERA_KV_F16},
                 {"f32", CERA_KV_F32},
                 {"bf16", CERA_KV_BF16},
                 {"q8_0", CERA_KV_Q8_0},
                 {"q4_0", CERA_KV_Q4_0}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(s, types[i].name)) {
            *out = types[i].type;
            return true;
        }
    return false;
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

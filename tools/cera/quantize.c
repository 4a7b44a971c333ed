/*
 * quantize.c — `cera quantize IN OUT TYPE [--threads N]`: a GGUF model converted to
 * one tensor type, with the same tensor bytes as llama.cpp's `llama-quantize --pure`
 * (no importance matrix). The work is src/tensor/quantize_model.c's; this file parses
 * the arguments and reports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "tensor/quantize_model.h"

static void usage(FILE *out) {
    fprintf(out, "usage: cera quantize IN OUT TYPE [--threads N]\n"
                 "\n"
                 "Converts the F32/F16/BF16 model IN to TYPE and writes OUT. Weight matrices become\n"
                 "TYPE (llama.cpp's reference quantizers: the bytes of `llama-quantize --pure`), 1-D\n"
                 "tensors stay F32, metadata is copied with general.file_type set.\n"
                 "\n"
                 "TYPE: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs\n"
                 "      q8_1 q8_k (llama.cpp's activation types: written without general.file_type)\n"
                 "      (also q3_k_s, q4_k_s, q5_k_s: the same as q3_k, q4_k, q5_k)\n"
                 "\n"
                 "  --threads N   threads converting rows (default: every CPU)\n");
}

typedef struct quantize_opts {
    const char *pos[3];
    int n_pos, n_threads;
} quantize_opts;

static int quantize_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    quantize_opts *o = user;
    const char *a = argv[*i];
    if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
        long n;
        if (*i + 1 >= argc || !cli_parse_long(argv[*i + 1], 1, 1024, &n)) {
            cli_usage_error(cmd, "%s needs a thread count (1..1024)", a);
            return -1;
        }
        ++*i;
        o->n_threads = (int)n;
    } else if (a[0] == '-' && a[1]) {
        return 0;
    } else if (o->n_pos < 3) {
        o->pos[o->n_pos++] = a;
    } else {
        cli_usage_error(cmd, "too many arguments (see cera quantize --help)");
        return -1;
    }
    return 1;
}

int cmd_quantize(int argc, char **argv) {
    quantize_opts o = {{NULL, NULL, NULL}, 0, 0};
    cli_args args;
    cli_args_init(&args);
    const int pr = cli_parse("quantize", 0, argc, argv, &args, quantize_extra, &o, NULL, NULL);
    if (pr == 1) usage(stdout);
    if (pr) return pr == 1 ? 0 : pr;
    const char *const *pos = o.pos;
    const int n_pos = o.n_pos, n_threads = o.n_threads;
    if (n_pos != 3) {
        usage(stderr);
        return 2;
    }
    cera_type type;
    if (!cera_quantize_type_from_name(pos[2], &type))
        return cli_usage_error("quantize", "'%s' is not a type to quantize to (see cera quantize --help)",
                               pos[2]);
    cera_error err;
    if (cera_quantize_model(pos[0], pos[1], type, n_threads, &err)) return cli_fail(&err);
    return 0;
}

/*
 * quantize.c — `cera quantize IN OUT TYPE [--threads N]`: a GGUF model converted to
 * one tensor type, with the same tensor bytes as llama.cpp's `llama-quantize --pure`
 * (no importance matrix). The work is src/tensor/quantize_model.c's; this file parses
 * the arguments and reports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0, n_threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--threads") || !strcmp(argv[i], "-t")) {
            char *end;
            if (i + 1 >= argc) return cli_usage_error("quantize", "%s needs a number", argv[i]);
            const long n = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || n < 1 || n > 1024)
                return cli_usage_error("quantize", "--threads: '%s' is not a thread count (1..1024)",
                                       argv[i]);
            n_threads = (int)n;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage_error("quantize", "unknown option '%s' (see cera quantize --help)", argv[i]);
        } else if (n_pos < 3) {
            pos[n_pos++] = argv[i];
        } else {
            return cli_usage_error("quantize", "too many arguments (see cera quantize --help)");
        }
    }
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

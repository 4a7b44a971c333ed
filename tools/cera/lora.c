/*
 * lora.c — `cera lora merge ...`: writes a model with LoRA adapters merged into its
 * weights; and the --lora / --lora-scaled options other commands share (lora_cli.h).
 *
 *   cera lora merge -m BASE --lora FILE [--lora-scaled FILE S]... -o OUT.gguf [--type T]
 *
 * The merge itself is src/lora/lora_merge.c's (W + Σ s·B·A in F32, requantized);
 * this file parses arguments, loads the base model and the adapters, and reports.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "core/error.h"
#include "core/fileio.h"
#include "gguf/gguf.h"
#include "lora_cli.h"
#include "model/model.h"
#include "lora/lora.h"

/* ---- Shared options ------------------------------------------------------------------ */

static bool parse_scale(const char *s, float *out) {
    char *end;
    errno = 0;
    const float v = strtof(s, &end);
    if (end == s || *end || errno || !isfinite(v)) return false;
    *out = v;
    return true;
}

int cli_lora_parse(const char *cmd, int argc, char **argv, int *i, cli_lora_list *l) {
    const char *a = argv[*i];
    const bool plain = !strcmp(a, "--lora"), scaled = !strcmp(a, "--lora-scaled");
    if (!plain && !scaled) return 0;
    const int need = scaled ? 2 : 1;
    if (*i + need >= argc) {
        cli_usage_error(cmd, "%s needs %s", a, scaled ? "a file and a scale" : "a file");
        return -1;
    }
    if (l->n == CLI_LORA_MAX) {
        cli_usage_error(cmd, "at most %d adapters", CLI_LORA_MAX);
        return -1;
    }
    float scale = 1.0f;
    if (scaled && !parse_scale(argv[*i + 2], &scale)) {
        cli_usage_error(cmd, "--lora-scaled: '%s' is not a number", argv[*i + 2]);
        return -1;
    }
    l->path[l->n] = argv[*i + 1];
    l->scale[l->n] = scale;
    l->n++;
    *i += need;
    return 1;
}

cera_status cli_lora_attach(cera_engine *engine, cera_session *session, const cli_lora_list *l,
                            cera_error *err) {
    for (int i = 0; i < l->n; i++) {
        cera_adapter *a = NULL;
        cera_status st = cera_adapter_load(engine, l->path[i], &a, err);
        if (!st) st = cera_session_set_adapter(session, a, l->scale[i], err);
        cera_adapter_free(a); /* the session holds its own reference */
        if (st) return st;
    }
    return CERA_OK;
}

cera_status cli_lora_check_output(const cli_lora_list *l, const char *out, cera_error *err) {
    static const char *const peft_files[] = {"adapter_config.json", "adapter_model.safetensors"};
    for (int i = 0; i < l->n; i++) {
        cera_status st = cera_check_not_input(out, l->path[i], "an adapter", err);
        if (st) return st;
        /* a PEFT folder, or one of its files (which loads the folder) */
        char dir[4096], f[4200];
        snprintf(dir, sizeof dir, "%s", l->path[i]);
        for (int up = 0; up < 2; up++) {
            for (size_t k = 0; k < 2; k++) {
                snprintf(f, sizeof f, "%s/%s", dir, peft_files[k]);
                if ((st = cera_check_not_input(out, f, "an adapter's file", err))) return st;
            }
            char *slash = strrchr(dir, '/');
            if (slash)
                *slash = '\0';
            else
                snprintf(dir, sizeof dir, ".");
        }
    }
    return CERA_OK;
}

/* ---- cera lora merge ------------------------------------------------------------------ */

static void usage(FILE *out) {
    fprintf(out,
            "usage: cera lora merge -m BASE --lora FILE [--lora-scaled FILE S]... -o OUT.gguf [--type T]\n"
            "\n"
            "Writes OUT.gguf: BASE with the adapters merged into the weights they target,\n"
            "W + scale * alpha/rank * B*A summed over the adapters (as llama.cpp's export-lora).\n"
            "Every other tensor and all metadata are copied unchanged.\n"
            "\n"
            "  -m, --model BASE        the base model (GGUF)\n"
            "  --lora FILE             an adapter (llama.cpp GGUF adapter or PEFT folder) at scale 1\n"
            "  --lora-scaled FILE S    an adapter at scale S\n"
            "  -o, --output OUT        the merged model to write\n"
            "  --type T                type of the merged tensors (f32, f16, bf16, q8_0, q4_0, q4_k, ...);\n"
            "                          default: each keeps its type in BASE (requantized)\n");
}

typedef struct merge_opts {
    const char *model, *out;
    int type;
} merge_opts;

static int merge_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    merge_opts *o = user;
    const char *a = argv[*i];
    const bool m = !strcmp(a, "-m") || !strcmp(a, "--model"),
               out = !strcmp(a, "-o") || !strcmp(a, "--output");
    if (!m && !out && strcmp(a, "--type")) return 0;
    const char *v;
    if (cli_take_value(cmd, argc, argv, i, &v) < 0) return -1;
    if (m) {
        o->model = v;
    } else if (out) {
        o->out = v;
    } else {
        cera_type t;
        if (!cera_type_from_name(v, &t)) {
            cli_usage_error(cmd, "'%s' is not a tensor type", v);
            return -1;
        }
        o->type = (int)t;
    }
    return 1;
}

static int merge(int argc, char **argv) {
    merge_opts o = {NULL, NULL, -1};
    cli_args args;
    cli_args_init(&args);
    const int pr = cli_parse("lora merge", CLI_G_LORA, argc, argv, &args, merge_extra, &o, NULL, NULL);
    if (pr == 1) usage(stdout);
    if (pr) return pr == 1 ? 0 : pr;
    const char *model = o.model, *out = o.out;
    const int type = o.type;
    const cli_lora_list l = args.lora;
    if (!model || !out || !l.n) {
        usage(stderr);
        return 2;
    }
    cera_error err = {0};
    gguf_file *f = NULL;
    cera_model m;
    memset(&m, 0, sizeof m);
    cera_adapter *ad[CLI_LORA_MAX] = {0};
    int rc = 0;
    if (cera_check_not_input(out, model, "the base model", &err) || cli_lora_check_output(&l, out, &err)) {
        rc = cli_fail(&err);
        goto done;
    }
    if (gguf_open_model(model, &f, &err) || cera_model_load(f, &m, &err)) {
        rc = cli_fail(&err);
        goto done;
    }
    for (int i = 0; i < l.n; i++)
        if (cera_lora_load(&m, l.path[i], &ad[i], &err)) {
            rc = cli_fail(&err);
            goto done;
        }
    if (cera_lora_merge(&m, ad, l.scale, l.n, out, type, &err)) {
        cera_error_prefix(&err, "%s", out);
        rc = cli_fail(&err);
        goto done;
    }
    int merged = 0;
    for (int il = 0; il < m.hp.n_layer; il++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++)
            for (int i = 0; i < l.n; i++)
                if (l.scale[i] != 0.0f && cera_lora_pair_get(ad[i], il, (cera_proj)p)) {
                    merged++;
                    break;
                }
    printf("%s: merged %d adapter%s into %d tensors\n", out, l.n, l.n == 1 ? "" : "s", merged);
done:
    for (int i = 0; i < l.n; i++) cera_lora_release(ad[i]);
    cera_model_free(&m);
    gguf_close(f);
    return rc;
}

int cmd_lora(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "merge")) return merge(argc - 1, argv + 1);
    return cli_usage_error("lora", "unknown subcommand '%s' (cera lora merge ...)", argv[1]);
}

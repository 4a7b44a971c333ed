/*
 * inspect.c — `cera inspect FILE [--all] [--template]`: what is inside a GGUF file.
 *
 * Prints the header (version, counts, alignment, where the data starts), every
 * metadata key with its type and value (long strings and arrays shortened unless
 * --all), every tensor (index, name, type, shape, offset, bytes), the totals
 * (parameters, bytes, bits per weight), the tensor types with whether the CPU backend
 * has kernels for them, and whether cera can run the file: the model loads (its
 * architecture, every tensor's name, shape and type), the tokenizer loads, and the CPU
 * backend has kernels for every weight it multiplies; when not, why. --template prints
 * the chat template (tokenizer.chat_template) alone, in full and unescaped. The file is
 * fully validated by gguf_open first, so a corrupt file gives one clear error and exit
 * code 1.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "cli.h"
#include "gguf/gguf.h"
#include "model/graph.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#define SHORT_STRING   64 /* bytes of a string shown without --all */
#define SHORT_ARRAY    8  /* elements of a numeric array shown without --all */
#define SHORT_STRARRAY 5  /* elements of a string array shown without --all */

/* Prints n bytes of s with quotes, backslashes and control bytes escaped; returns
 * the columns used (counting UTF-8 continuation bytes as none). */
static int print_escaped(gguf_str s, uint64_t n) {
    int cols = 0;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (c == '"' || c == '\\')
            cols += printf("\\%c", c);
        else if (c == '\n')
            cols += printf("\\n");
        else if (c == '\t')
            cols += printf("\\t");
        else if (c < 0x20 || c == 0x7f)
            cols += printf("\\x%02x", c);
        else
            putchar(c), cols += (c & 0xc0) != 0x80;
    }
    return cols;
}

static void print_str(gguf_str s, bool all) {
    uint64_t n = (!all && s.len > SHORT_STRING) ? SHORT_STRING : s.len;
    putchar('"');
    print_escaped(s, n);
    putchar('"');
    if (n < s.len) printf("… (%llu bytes)", (unsigned long long)s.len);
}

static void print_scalar(const gguf_value *v) {
    switch (v->type) {
    case GGUF_TYPE_UINT8:
    case GGUF_TYPE_UINT16:
    case GGUF_TYPE_UINT32:
    case GGUF_TYPE_UINT64: printf("%llu", (unsigned long long)v->v.u64); break;
    case GGUF_TYPE_INT8:
    case GGUF_TYPE_INT16:
    case GGUF_TYPE_INT32:
    case GGUF_TYPE_INT64: printf("%lld", (long long)v->v.i64); break;
    case GGUF_TYPE_FLOAT32:
    case GGUF_TYPE_FLOAT64: printf("%.9g", v->v.f64); break;
    case GGUF_TYPE_BOOL: fputs(v->v.u64 ? "true" : "false", stdout); break;
    default: fputs("?", stdout); break;
    }
}

static void print_array(const gguf_array *a, bool all) {
    printf("[%s × %llu]", gguf_vtype_name(a->type), (unsigned long long)a->n);
    uint64_t shown = a->type == GGUF_TYPE_STRING  ? SHORT_STRARRAY
                     : a->type == GGUF_TYPE_ARRAY ? 3
                                                  : SHORT_ARRAY;
    if (all || shown > a->n) shown = a->n;
    for (uint64_t i = 0; i < shown; i++) {
        fputs(i ? ", " : " ", stdout);
        if (a->type == GGUF_TYPE_STRING) {
            print_str(a->u.strs[i], all);
        } else if (a->type == GGUF_TYPE_ARRAY) {
            putchar('(');
            print_array(&a->u.arrays[i].v.arr, all);
            putchar(')');
        } else if (a->type == GGUF_TYPE_FLOAT32 || a->type == GGUF_TYPE_FLOAT64) {
            printf("%.9g", gguf_arr_f64(a, i));
        } else if (a->type == GGUF_TYPE_UINT64) {
            printf("%llu", (unsigned long long)gguf_arr_i64(a, i));
        } else if (a->type == GGUF_TYPE_BOOL) {
            fputs(gguf_arr_i64(a, i) ? "true" : "false", stdout);
        } else {
            printf("%lld", (long long)gguf_arr_i64(a, i));
        }
    }
    if (shown < a->n) fputs(", …", stdout);
}

/* "1.23 M" style, for totals. */
static void human(double x, const char *unit, char *buf, size_t cap) {
    const char *pre[] = {"", "K", "M", "G", "T"};
    int i = 0;
    while (x >= 1000 && i < 4) x /= 1000, i++;
    if (i)
        snprintf(buf, cap, "%.2f %s%s", x, pre[i], unit);
    else
        snprintf(buf, cap, "%.0f%s%s", x, *unit ? " " : "", unit);
}

static int usage(FILE *out) {
    fprintf(out, "usage: cera inspect FILE [--all] [--template]\n\n"
                 "Prints a GGUF file's header, metadata (key, type, value), tensors (index, name,\n"
                 "type, shape, offset, bytes), totals (parameters, bytes, bits per weight), its\n"
                 "tensor types and whether cera can run it (and why not).\n\n"
                 "  --all        show long strings and arrays in full\n"
                 "  --template   print only the chat template (tokenizer.chat_template), in full\n");
    return out == stdout ? 0 : 2;
}

typedef struct inspect_opts {
    const char *path;
    bool all, template_only;
} inspect_opts;

/* The chat template as it is, or exit code 1 when the file has none. */
static int print_template(const gguf_file *f, const char *path) {
    gguf_str t;
    if (!gguf_get_str(f, "tokenizer.chat_template", &t)) {
        fprintf(stderr, "cera inspect: %s has no chat template (tokenizer.chat_template)\n", path);
        return 1;
    }
    fwrite(t.data, 1, (size_t)t.len, stdout);
    if (!t.len || t.data[t.len - 1] != '\n') putchar('\n');
    return 0;
}

/* The tensor types with their counts, each marked when the CPU backend has no kernels. */
static void print_types(const gguf_file *f) {
    uint64_t count[CERA_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].type < CERA_TYPE_COUNT) count[f->tensors[i].type]++;
    printf("\ntensor types:");
    for (int t = 0; t < CERA_TYPE_COUNT; t++)
        if (count[t])
            printf(" %s × %llu%s", cera_type_get((cera_type)t)->name, (unsigned long long)count[t],
                   cera_cpu_ops((cera_type)t) || t == CERA_TYPE_F32 ? "" : " (no CPU matmul kernels)");
    putchar('\n');
}

/* Whether cera can run the file, and why not: what opening it as a model would check,
 * short of mapping a KV cache and repacking the weights. The first shard of a split model
 * is checked with all its shards. */
static void print_runnable(const gguf_file *f, const char *path) {
    cera_error err = {0};
    gguf_file *set = NULL;
    uint32_t n_split = 0;
    if (gguf_get_u32(f, "split.count", &n_split) && n_split > 1) {
        if (gguf_open_model(path, &set, &err)) {
            printf("runnable: no: %s\n", err.message);
            return;
        }
        f = set;
    }
    gguf_str s;
    char arch[64] = "?";
    if (gguf_get_str(f, "general.architecture", &s)) gguf_str_copy(s, arch, sizeof arch);
    if (gguf_get_str(f, "general.type", &s) && gguf_str_eq(s, "adapter")) {
        printf("runnable: no: a LoRA adapter for %s (use it with --lora on its base model)\n", arch);
        gguf_close(set);
        return;
    }
    cera_model m;
    cera_tokenizer *tok = NULL;
    cera_status st = cera_model_load(f, &m, &err);
    if (st) {
        printf("runnable: no: %s\n", err.message);
        gguf_close(set);
        return;
    }
    if (!(st = cera_tokenizer_load(f, &tok, &err))) st = cera_cpu_backend_check(&m, &err);
    if (st)
        printf("runnable: no: %s\n", err.message);
    else
        printf(
            "runnable: yes: architecture %s, %d layers%s, every tensor supported; the CPU backend runs it\n",
            arch, m.hp.n_layer, set ? " in its shards" : "");
    cera_tokenizer_free(tok);
    cera_model_free(&m);
    gguf_close(set);
}

static int inspect_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    (void)argc;
    inspect_opts *o = user;
    const char *a = argv[*i];
    if (!strcmp(a, "--all")) {
        o->all = true;
    } else if (!strcmp(a, "--template")) {
        o->template_only = true;
    } else if (a[0] == '-' && a[1]) {
        return 0;
    } else if (!o->path) {
        o->path = a;
    } else {
        cli_usage_error(cmd, "one FILE only (see --help)");
        return -1;
    }
    return 1;
}

int cmd_inspect(int argc, char **argv) {
    inspect_opts o = {NULL, false, false};
    cli_args args;
    cli_args_init(&args);
    const int pr = cli_parse("inspect", 0, argc, argv, &args, inspect_extra, &o, NULL, NULL);
    if (pr == 1) return usage(stdout);
    if (pr) return pr;
    const char *path = o.path;
    const bool all = o.all;
    if (!path) return usage(stderr);

    gguf_file *f;
    cera_error err = {0};
    if (gguf_open(path, &f, &err)) return cli_fail(&err);
    if (o.template_only) {
        const int rc = print_template(f, path);
        gguf_close(f);
        return rc;
    }

    printf("%s: GGUF version %u, %llu bytes\n", path, f->version, (unsigned long long)f->size);
    printf("  %llu keys, %llu tensors, alignment %llu, data section at byte %llu\n",
           (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors, (unsigned long long)f->alignment,
           (unsigned long long)f->data_offset);

    printf("\nmetadata:\n");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        fputs("  ", stdout);
        print_escaped(kv->key, kv->key.len);
        printf(" (%s) = ", gguf_vtype_name(kv->value.type));
        if (kv->value.type == GGUF_TYPE_STRING)
            print_str(kv->value.v.str, all);
        else if (kv->value.type == GGUF_TYPE_ARRAY)
            print_array(&kv->value.v.arr, all);
        else
            print_scalar(&kv->value);
        putchar('\n');
    }

    int name_w = 4;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].name.len > (uint64_t)name_w)
            name_w = f->tensors[i].name.len > 48 ? 48 : (int)f->tensors[i].name.len;
    printf("\ntensors:\n  %5s  %-*s  %-6s  %-26s  %12s  %12s\n", "#", name_w, "name", "type", "shape",
           "offset", "bytes");
    uint64_t params = 0, bytes = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char shape[96];
        int n = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        /* names are file bytes: escaped like keys, so control bytes cannot garble the terminal */
        printf("  %5llu  ", (unsigned long long)i);
        for (int cols = print_escaped(t->name, t->name.len); cols < name_w; cols++) putchar(' ');
        printf("  %-6s  %-26s  %12llu  %12llu\n", cera_type_get(t->type)->name, shape,
               (unsigned long long)t->offset, (unsigned long long)t->nbytes);
        params += (uint64_t)gguf_tensor_nelements(t);
        bytes += t->nbytes;
    }

    char hp[32], hb[32];
    human((double)params, "", hp, sizeof hp);
    human((double)bytes, "B", hb, sizeof hb);
    printf("\ntotals: %llu tensors, %llu parameters (%s), %llu bytes (%s), %.3f bits per weight\n",
           (unsigned long long)f->n_tensors, (unsigned long long)params, hp, (unsigned long long)bytes, hb,
           params ? 8.0 * (double)bytes / (double)params : 0.0);
    print_types(f);
    print_runnable(f, path);
    gguf_close(f);
    return 0;
}

/*
 * template.c — `cera template (-m MODEL | --template FILE) --case CASE.json`: renders a
 * chat template as transformers' apply_chat_template does (src/template).
 *
 * The template is a GGUF's tokenizer.chat_template metadata (only the metadata is read;
 * no weights are loaded) or a Jinja file. CASE.json has the golden format
 * (shared/golden/templates/README.md): messages, tools, add_generation_prompt, bos_token,
 * eos_token, extra. The rendered text goes to stdout byte for byte, nothing added; a
 * failing render exits 1 with the error on stderr (for raise_exception, its message).
 * strftime_now reads the goldens' fixed clock unless --now asks for the real one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "args.h"
#include "cli.h"
#include "prompt.h"
#include "gguf/gguf.h"
#include "template/template.h"

static void usage(FILE *out) {
    fprintf(out, "usage: cera template (-m MODEL | --template FILE) --case CASE.json [--now]\n"
                 "\n"
                 "Renders a chat template (Jinja2, as transformers runs it) with the conversation of\n"
                 "CASE.json and prints the text, byte for byte.\n"
                 "\n"
                 "  -m, --model FILE      GGUF file: its tokenizer.chat_template (no weights are loaded)\n"
                 "      --template FILE   a Jinja template file\n"
                 "      --case FILE       the inputs as a golden case: messages, tools,\n"
                 "                        add_generation_prompt, bos_token, eos_token, extra\n"
                 "      --now             strftime_now reads the current time (default: the goldens'\n"
                 "                        clock, 2026-01-15 00:00:00 UTC)\n"
                 "  -h, --help            this help\n");
}

typedef struct template_opts {
    const char *model, *tmpl_path, *case_path;
    bool real_clock;
} template_opts;

static int template_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    template_opts *o = user;
    const char *a = argv[*i];
    if (!strcmp(a, "--now")) {
        o->real_clock = true;
        return 1;
    }
    const char **dst = !strcmp(a, "-m") || !strcmp(a, "--model") ? &o->model
                       : !strcmp(a, "--template")                ? &o->tmpl_path
                       : !strcmp(a, "--case")                    ? &o->case_path
                                                                 : NULL;
    return dst ? cli_take_value(cmd, argc, argv, i, dst) : 0;
}

int cmd_template(int argc, char **argv) {
    template_opts o = {NULL, NULL, NULL, false};
    cli_args args;
    cli_args_init(&args);
    const int pr = cli_parse("template", 0, argc, argv, &args, template_extra, &o, NULL, NULL);
    if (pr == 1) usage(stdout);
    if (pr) return pr == 1 ? 0 : pr;
    const char *model = o.model, *tmpl_path = o.tmpl_path, *case_path = o.case_path;
    const bool real_clock = o.real_clock;
    if ((model != NULL) + (tmpl_path != NULL) != 1)
        return cli_usage_error("template", "give exactly one of -m MODEL, --template FILE");
    if (!case_path) return cli_usage_error("template", "no case (--case CASE.json)");

    cera_error err = {0};
    int rc = 1;
    char *text = NULL, *case_text = NULL, *out = NULL;
    size_t len = 0, case_len = 0, out_len = 0;
    gguf_file *gf = NULL;
    cJSON *c = NULL;
    cera_template *t = NULL;

    if (model) {
        gguf_str s;
        if (gguf_open(model, &gf, &err) != CERA_OK) goto done;
        if (!gguf_get_str(gf, "tokenizer.chat_template", &s)) {
            cera_fail(&err, CERA_ERR_NOT_FOUND, "%s: no tokenizer.chat_template in the metadata", model);
            goto done;
        }
        if (!(text = malloc(s.len + 1))) {
            cera_fail(&err, CERA_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        memcpy(text, s.data, s.len);
        text[s.len] = 0;
        len = s.len;
    } else if (!(text = cli_read_file(tmpl_path, &len, &err))) {
        goto done;
    }
    if (!(case_text = cli_read_file(case_path, &case_len, &err))) goto done;
    if (!(c = cJSON_ParseWithLength(case_text, case_len)) || !cJSON_IsObject(c)) {
        cera_fail(&err, CERA_ERR_FORMAT, "%s: not a JSON object", case_path);
        goto done;
    }
    if (cera_template_compile(text, len, &t, &err) != CERA_OK) {
        cera_error_prefix(&err, "%s", model ? model : tmpl_path);
        goto done;
    }
    if (cera_template_render_case(t, c, real_clock ? time(NULL) : CERA_TEMPLATE_GOLDEN_NOW, &out, &out_len,
                                  &err) != CERA_OK) {
        /* the template's own error (raise_exception's message exactly) */
        fprintf(stderr, "%s\n", err.message);
        err.status = CERA_OK;
        goto done;
    }
    rc = fwrite(out, 1, out_len, stdout) == out_len && fflush(stdout) == 0 ? 0 : 1;
done:
    if (rc && err.status != CERA_OK) cli_fail(&err);
    free(out);
    cera_template_free(t);
    cJSON_Delete(c);
    free(case_text);
    free(text);
    gguf_close(gf);
    return rc;
}

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

#include "cli.h"
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

static char *read_whole(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
        if (n == cap - 1) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *tmpl_path = NULL, *case_path = NULL;
    bool real_clock = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) {
            model = argv[++i];
        } else if (!strcmp(a, "--template") && has_val) {
            tmpl_path = argv[++i];
        } else if (!strcmp(a, "--case") && has_val) {
            case_path = argv[++i];
        } else if (!strcmp(a, "--now")) {
            real_clock = true;
        } else {
            usage(stderr);
            return cli_usage_error("template", "unknown or incomplete option '%s'", a);
        }
    }
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
    } else if (!(text = read_whole(tmpl_path, &len))) {
        cera_fail(&err, CERA_ERR_IO, "%s: %s", tmpl_path, strerror(errno));
        goto done;
    }
    if (!(case_text = read_whole(case_path, &case_len))) {
        cera_fail(&err, CERA_ERR_IO, "%s: %s", case_path, strerror(errno));
        goto done;
    }
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

/*
 * test_template_golden.c — every chat-template golden case (shared/golden/templates:
 * one folder per real template, caseNN.json each) rendered by src/template and compared
 * with what transformers' Jinja2 gave: `expected` byte for byte; `error` cases must fail,
 * and raise_exception cases with exactly the template's message. Prints the passed and
 * failed counts and, for each failing case, where the text first differs.
 *
 * Usage: test_template_golden [FOLDER_SUBSTRING] (only folders whose name contains it).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "template/template.h"
#include "testutil.h"

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The sorted names in dir starting with prefix (and ending with suffix); malloc'd. */
static char **list_dir(const char *dir, const char *prefix, const char *suffix, bool dirs, size_t *n) {
    DIR *d = opendir(dir);
    char **v = NULL;
    size_t k = 0, cap = 0;
    *n = 0;
    if (!d) return NULL;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(e->d_name), sl = strlen(suffix);
        if (strncmp(e->d_name, prefix, strlen(prefix)) || len < sl || strcmp(e->d_name + len - sl, suffix))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        bool is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (is_dir != dirs) continue;
        if (k == cap) v = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof *v);
        v[k++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(v, k, sizeof *v, cmp_names);
    *n = k;
    return v;
}

static void show_diff(const char *want, size_t wn, const char *got, size_t gn) {
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i]) i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "    first difference at byte %zu (expected %zu bytes, got %zu)\n", i, wn, gn);
    fprintf(stderr, "    expected: ...%.*s|%.*s\n", (int)(i - from), want + from,
            (int)(wn - i < 80 ? wn - i : 80), want + i);
    fprintf(stderr, "    got:      ...%.*s|%.*s\n", (int)(i - from), got + from,
            (int)(gn - i < 80 ? gn - i : 80), got + i);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    const char *root = shared_path("golden/templates");
    char rootbuf[1024];
    snprintf(rootbuf, sizeof rootbuf, "%s", root);
    size_t nfolders;
    char **folders = list_dir(rootbuf, "", "", true, &nfolders);
    if (!folders || nfolders == 0) {
        fprintf(stderr, "no template goldens in %s\n", rootbuf);
        return 1;
    }
    int passed = 0, failed = 0;
    for (size_t f = 0; f < nfolders; f++) {
        if (only && !strstr(folders[f], only)) continue;
        char dir[4096], path[8192];
        snprintf(dir, sizeof dir, "%s/%s", rootbuf, folders[f]);
        snprintf(path, sizeof path, "%s/template.jinja", dir);
        size_t tlen;
        char *text = read_file(path, &tlen);
        CHECK(text != NULL, "%s: cannot read", path);
        if (!text) continue;
        cera_error err = {0};
        cera_template *t = NULL;
        cera_status cst = cera_template_compile(text, tlen, &t, &err);
        char compile_msg[600];
        snprintf(compile_msg, sizeof compile_msg, "%s", err.message);
        size_t ncases;
        char **cases = list_dir(dir, "case", ".json", false, &ncases);
        for (size_t c = 0; c < ncases; c++) {
            snprintf(path, sizeof path, "%s/%s", dir, cases[c]);
            size_t clen;
            char *ctext = read_file(path, &clen);
            cJSON *j = ctext ? cJSON_ParseWithLength(ctext, clen) : NULL;
            const cJSON *expected = cJSON_GetObjectItemCaseSensitive(j, "expected");
            const cJSON *error = cJSON_GetObjectItemCaseSensitive(j, "error");
            const cJSON *etype = cJSON_GetObjectItemCaseSensitive(j, "error_type");
            bool ok = false;
            char *out = NULL;
            size_t out_len = 0;
            cera_status st = cst;
            if (cst == CERA_OK)
                st = cera_template_render_case(t, j, CERA_TEMPLATE_GOLDEN_NOW, &out, &out_len, &err);
            const char *msg = cst == CERA_OK ? err.message : compile_msg;
            if (cJSON_IsString(expected)) {
                size_t wn = strlen(expected->valuestring);
                ok = st == CERA_OK && out_len == wn && !memcmp(out, expected->valuestring, wn);
                if (!ok) {
                    fprintf(stderr, "FAIL %s/%s\n", folders[f], cases[c]);
                    if (st != CERA_OK)
                        fprintf(stderr, "    error: %s\n", msg);
                    else
                        show_diff(expected->valuestring, wn, out, out_len);
                }
            } else if (cJSON_IsString(error)) {
                bool raise = cJSON_IsString(etype) && !strcmp(etype->valuestring, "raise_exception");
                ok = st != CERA_OK && (!raise || (cst == CERA_OK && !strcmp(msg, error->valuestring)));
                if (!ok) {
                    fprintf(stderr, "FAIL %s/%s: expected the error %s'%s'\n", folders[f], cases[c],
                            raise ? "(exactly) " : "", error->valuestring);
                    if (st != CERA_OK) fprintf(stderr, "    got: %s\n", msg);
                }
            } else {
                fprintf(stderr, "FAIL %s/%s: no expected or error in the case\n", folders[f], cases[c]);
            }
            ok ? passed++ : failed++;
            CHECK(ok, "%s/%s", folders[f], cases[c]);
            free(out);
            cJSON_Delete(j);
            free(ctext);
            free(cases[c]);
        }
        free(cases);
        cera_template_free(t);
        free(text);
        free(folders[f]);
    }
    free(folders);
    printf("template goldens: %d passed, %d failed (of %d cases)\n", passed, failed, passed + failed);
    if (!only) CHECK(passed + failed >= 500, "expected about 501 cases, found %d", passed + failed);
    return test_finish();
}

/*
 * test_grammar_golden.c — every golden case of shared/golden/grammar and
 * shared/golden/json-schema through the library (src/grammar), against llama.cpp's
 * validator: each accepted string accepted, each rejected one rejected at the same code
 * point; every bad grammar refused; every schema converted and its grammar giving the
 * same verdicts; every bad schema refused by the converter or its grammar refused by the
 * parser, as the verdict file says. Also counts schemas whose grammar is byte for byte
 * llama.cpp's (informative: only the verdicts must agree).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/grammar.h"
#include "testutil.h"

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The sorted names in dir ending with suffix; malloc'd. */
static char **list_dir(const char *dir, const char *suffix, size_t *n) {
    DIR *d = opendir(dir);
    char **v = NULL;
    size_t k = 0, cap = 0;
    *n = 0;
    if (!d) return NULL;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name), sl = strlen(suffix);
        if (e->d_name[0] == '.' || len < sl || strcmp(e->d_name + len - sl, suffix)) continue;
        if (k == cap) v = realloc(v, (cap = cap ? cap * 2 : 64) * sizeof *v);
        v[k++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(v, k, sizeof *v, cmp_names);
    *n = k;
    return v;
}

static cJSON *read_json(const char *path) {
    size_t n;
    char *text = read_file(path, &n);
    cJSON *j = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    return j;
}

/* Runs a case file's accept/reject/reject_pos lists on g; returns the failures. */
static int run_cases(const cera_grammar *g, const cJSON *c, const char *label, int *n_strings) {
    int bad = 0;
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(c, "accept");
    const cJSON *rej = cJSON_GetObjectItemCaseSensitive(c, "reject");
    const cJSON *pos = cJSON_GetObjectItemCaseSensitive(c, "reject_pos");
    const cJSON *s;
    cJSON_ArrayForEach(s, acc) {
        bool ok;
        size_t at;
        cera_error err = {0};
        cera_status st = cera_grammar_check(g, s->valuestring, strlen(s->valuestring), &ok, &at, &err);
        CHECK(st == CERA_OK && ok, "%s: '%s' should be accepted (status %d, rejected at %zu: %s)", label,
              s->valuestring, st, at, err.message);
        bad += !(st == CERA_OK && ok);
        (*n_strings)++;
    }
    int k = 0;
    cJSON_ArrayForEach(s, rej) {
        const cJSON *p = cJSON_GetArrayItem(pos, k++);
        bool ok;
        size_t at;
        cera_error err = {0};
        cera_status st = cera_grammar_check(g, s->valuestring, strlen(s->valuestring), &ok, &at, &err);
        bool good = st == CERA_OK && !ok && cJSON_IsNumber(p) && at == (size_t)p->valuedouble;
        CHECK(good, "%s: '%s' should be rejected at %d (status %d, %s at %zu: %s)", label, s->valuestring,
              p ? (int)p->valuedouble : -1, st, ok ? "accepted" : "rejected", at, err.message);
        bad += !good;
        (*n_strings)++;
    }
    return bad;
}

static void grammar_cases(void) {
    const char *dir = shared_path("golden/grammar");
    size_t n;
    char **names = list_dir(dir, ".cases.json", &n);
    int cases_ok = 0, strings = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        cJSON *c = read_json(path);
        const cJSON *gf = cJSON_GetObjectItemCaseSensitive(c, "grammar_file");
        CHECK(c && cJSON_IsString(gf), "%s: unreadable", path);
        if (!c || !cJSON_IsString(gf)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, gf->valuestring);
        size_t len;
        char *text = read_file(path, &len);
        cera_grammar *g = NULL;
        cera_error err = {0};
        CHECK(text && cera_grammar_parse(text, len, NULL, &g, &err) == CERA_OK, "%s: %s", path, err.message);
        if (g) cases_ok += run_cases(g, c, names[i], &strings) == 0;
        cera_grammar_free(g);
        free(text);
        cJSON_Delete(c);
    }
    printf("grammar: %d/%zu cases (%d strings) as llama.cpp\n", cases_ok, n, strings);
    CHECK(n > 0, "no grammar cases in %s", dir);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);

    char bad_dir[4096];
    snprintf(bad_dir, sizeof bad_dir, "%s/bad", dir);
    names = list_dir(bad_dir, ".gbnf", &n);
    int refused = 0;
    for (size_t i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", bad_dir, names[i]);
        size_t len;
        char *text = read_file(path, &len);
        cera_grammar *g = NULL;
        cera_error err = {0};
        cera_status st = text ? cera_grammar_parse(text, len, NULL, &g, &err) : CERA_ERR_IO;
        CHECK(text && st != CERA_OK && !g && err.message[0], "bad/%s loaded", names[i]);
        refused += st != CERA_OK;
        cera_grammar_free(g);
        free(text);
        free(names[i]);
    }
    free(names);
    printf("grammar: %d/%zu bad grammars refused\n", refused, n);
    CHECK(n > 0, "no bad grammars");
}

static void schema_cases(void) {
    const char *dir = shared_path("golden/json-schema");
    size_t n;
    char **names = list_dir(dir, ".cases.json", &n);
    int cases_ok = 0, strings = 0, same_text = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        cJSON *c = read_json(path);
        const cJSON *sf = cJSON_GetObjectItemCaseSensitive(c, "schema_file");
        const cJSON *rf = cJSON_GetObjectItemCaseSensitive(c, "reference_grammar_file");
        CHECK(c && cJSON_IsString(sf), "%s: unreadable", path);
        if (!c || !cJSON_IsString(sf)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, sf->valuestring);
        size_t len;
        char *text = read_file(path, &len), *gbnf = NULL;
        cera_grammar *g = NULL;
        cera_error err = {0};
        CHECK(text && cera_json_schema_to_gbnf(text, len, &gbnf, &err) == CERA_OK, "%s: %s", path,
              err.message);
        if (gbnf) {
            CHECK(cera_grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err) == CERA_OK, "%s: grammar: %s\n%s",
                  path, err.message, gbnf);
            if (cJSON_IsString(rf)) {
                snprintf(path, sizeof path, "%s/%s", dir, rf->valuestring);
                size_t rlen;
                char *ref = read_file(path, &rlen);
                same_text += ref && !strcmp(ref, gbnf);
                free(ref);
            }
        }
        if (g) cases_ok += run_cases(g, c, names[i], &strings) == 0;
        cera_grammar_free(g);
        free(gbnf);
        free(text);
        cJSON_Delete(c);
    }
    printf("json-schema: %d/%zu cases (%d strings) as llama.cpp; %d grammars byte-identical to llama.cpp's\n",
           cases_ok, n, strings, same_text);
    CHECK(n > 0, "no schema cases in %s", dir);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);

    char bad_dir[4096];
    snprintf(bad_dir, sizeof bad_dir, "%s/bad", dir);
    names = list_dir(bad_dir, ".verdict.json", &n);
    int refused = 0;
    for (size_t i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", bad_dir, names[i]);
        cJSON *v = read_json(path);
        bool converts = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "converts"));
        const cJSON *sf = cJSON_GetObjectItemCaseSensitive(v, "schema_file");
        snprintf(path, sizeof path, "%s/%s", bad_dir, cJSON_IsString(sf) ? sf->valuestring : "?");
        size_t len;
        char *text = read_file(path, &len), *gbnf = NULL;
        cera_error err = {0};
        cera_status st = text ? cera_json_schema_to_gbnf(text, len, &gbnf, &err) : CERA_ERR_IO;
        bool good;
        if (converts) {
            cera_grammar *g = NULL;
            good = st == CERA_OK && cera_grammar_parse(gbnf, strlen(gbnf), NULL, &g, &err) != CERA_OK;
            cera_grammar_free(g);
        } else {
            good = st != CERA_OK && !gbnf && err.message[0];
        }
        CHECK(good, "bad/%s: expected %s (status %d)", names[i],
              converts ? "a grammar that does not load" : "no conversion", st);
        refused += good;
        free(gbnf);
        free(text);
        cJSON_Delete(v);
        free(names[i]);
    }
    free(names);
    printf("json-schema: %d/%zu bad schemas refused as llama.cpp\n", refused, n);
}

int main(void) {
    grammar_cases();
    schema_cases();
    return test_finish();
}

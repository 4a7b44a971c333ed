/*
 * test_grammar_gen_cli.c — the grammar options of `cera run` and `cera chat` (stories260K;
 * SmolLM2 too when fetched): --json prints a JSON object, -j takes a schema inline or from
 * a file, --grammar and --grammar-file constrain the text, a grammar that allows nothing
 * exits 0 with a note, two grammar options or a broken grammar are refused, and chat's
 * answers each follow the grammar (it restarts every turn).
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "testutil.h"

#define CERA_EXE CERA_BINARY_DIR "/tools/cera/cera"

/* Runs `cera ARGS` with stdout in *out (malloc'ed); returns the exit status. */
static int cera(const char *args, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s > gen_cli.out 2> gen_cli.err", CERA_EXE, args);
    const int st = run_command(cmd);
    size_t n;
    *out = read_file("gen_cli.out", &n);
    return st;
}

static void write(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* stdout is one JSON value of type `type` (cJSON's), then a newline. */
static bool is_json(const char *out, int type) {
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    const bool ok = j && (j->type & 0xff) == type;
    cJSON_Delete(j);
    return ok;
}

int main(void) {
    if (!file_exists(CERA_EXE)) {
        fprintf(stderr, "skipping: no %s\n", CERA_EXE);
        return TEST_SKIP_CODE;
    }
    char args[8192], *out;
    const char *tiny = shared_path("models/stories260K.gguf");
    const char *base = "run -t 2 --temp 1 -s 1 -n 256 -p 'Once upon a time'";

    snprintf(args, sizeof args, "%s -m %s --json", base, tiny);
    CHECK(cera(args, &out) == 0 && is_json(out, cJSON_Object), "--json: '%s'", out ? out : "");
    free(out);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}},"
                         "\"required\":[\"ok\"],\"additionalProperties\":false}";
    write("gen_schema.json", schema);
    snprintf(args, sizeof args, "%s -m %s -j '%s'", base, tiny, schema);
    CHECK(cera(args, &out) == 0 && is_json(out, cJSON_Object) && strstr(out, "\"ok\""), "-j inline: '%s'",
          out ? out : "");
    free(out);
    snprintf(args, sizeof args, "%s -m %s --json-schema gen_schema.json", base, tiny);
    CHECK(cera(args, &out) == 0 && is_json(out, cJSON_Object) && strstr(out, "\"ok\""), "-j FILE: '%s'",
          out ? out : "");
    free(out);
    snprintf(args, sizeof args, "%s -m %s -jf gen_schema.json", base, tiny);
    CHECK(cera(args, &out) == 0 && is_json(out, cJSON_Object), "-jf: '%s'", out ? out : "");
    free(out);
    snprintf(args, sizeof args, "%s -m %s --grammar 'root ::= (\"yes\" | \"no\")'", base, tiny);
    CHECK(cera(args, &out) == 0 && out && (!strcmp(out, "yes\n") || !strcmp(out, "no\n")), "--grammar: '%s'",
          out ? out : "");
    free(out);
    write("gen_digits.gbnf", "root ::= [0-9]{3} \"-\" [0-9]{4}\n");
    snprintf(args, sizeof args, "%s -m %s --grammar-file gen_digits.gbnf", base, tiny);
    CHECK(cera(args, &out) == 0 && out && strlen(out) == 9 && out[3] == '-', "--grammar-file: '%s'",
          out ? out : "");
    free(out);
    /* nothing allowed: a clean end, said on stderr */
    snprintf(args, sizeof args, "%s -m %s --grammar 'root ::= <[100000]>'", base, tiny);
    CHECK(cera(args, &out) == 0 && out && !strcmp(out, "\n"), "a dead end: '%s'", out ? out : "");
    free(out);
    size_t n;
    char *err = read_file("gen_cli.err", &n);
    CHECK(err && strstr(err, "grammar allows no further token"), "no note: '%s'", err ? err : "");
    free(err);
    /* refusals */
    snprintf(args, sizeof args, "%s -m %s --json --grammar 'root ::= \"a\"'", base, tiny);
    CHECK(cera(args, &out) == 2, "two grammar options accepted");
    free(out);
    snprintf(args, sizeof args, "%s -m %s --grammar 'root ::= ('", base, tiny);
    CHECK(cera(args, &out) == 1, "a broken grammar accepted");
    free(out);
    snprintf(args, sizeof args, "%s -m %s -j no-such-schema.json", base, tiny);
    CHECK(cera(args, &out) == 1, "a missing schema file accepted");
    free(out);

    const char *smol = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (file_exists(smol)) {
        snprintf(args, sizeof args, "run -t 2 --temp 1 -s 5 -n 96 -m %s --json -p 'A cat, as JSON:'", smol);
        CHECK(cera(args, &out) == 0 && is_json(out, cJSON_Object), "SmolLM2 --json: '%s'", out ? out : "");
        free(out);
        /* chat: each answer follows the grammar on its own */
        snprintf(args, sizeof args,
                 "chat -t 2 --temp 1 -s 3 -n 16 -m %s --grammar 'root ::= (\"yes\" | \"no\") \".\"' "
                 "< gen_turns.txt",
                 smol);
        write("gen_turns.txt", "Is the sky blue?\nIs fire cold?\n");
        CHECK(cera(args, &out) == 0 && out, "chat");
        int answers = 0;
        for (char *line = out ? strtok(out, "\n") : NULL; line; line = strtok(NULL, "\n")) {
            CHECK(!strcmp(line, "yes.") || !strcmp(line, "no."), "chat answer '%s'", line);
            answers++;
        }
        CHECK(answers == 2, "%d chat answers", answers);
        free(out);
    }
    return test_finish();
}

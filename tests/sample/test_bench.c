/*
 * test_bench.c — `cera bench` (tools/cera/bench.c) on stories260K: `-o json` parses as
 * a JSON array with one object per test and llama-bench's fields, with the model's
 * real size and parameter count (llama-bench reports 1171200 bytes and 292800
 * parameters for this file), consistent statistics and the weight bandwidth on tg
 * only; the markdown table has a row per test; a missing model is an error exit.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define CERA_BIN CERA_BINARY_DIR "/tools/cera/cera"

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void check_test(const cJSON *o, const char *model, int n_prompt, int n_gen, int n_depth, int reps) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(o, "model_filename");
    CHECK(cJSON_IsString(fn) && !strcmp(fn->valuestring, model), "model_filename");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(o, "model_type");
    CHECK(cJSON_IsString(mt) && strstr(mt->valuestring, "llama") && strstr(mt->valuestring, "F32"),
          "model_type '%s'", cJSON_IsString(mt) ? mt->valuestring : "?");
    CHECK(num(o, "model_size") == 1171200, "model_size %g", num(o, "model_size"));
    CHECK(num(o, "model_n_params") == 292800, "model_n_params %g", num(o, "model_n_params"));
    CHECK(num(o, "n_threads") == 1, "n_threads %g", num(o, "n_threads"));
    CHECK(num(o, "n_prompt") == n_prompt && num(o, "n_gen") == n_gen && num(o, "n_depth") == n_depth,
          "test p%g n%g d%g, want p%d n%d d%d", num(o, "n_prompt"), num(o, "n_gen"), num(o, "n_depth"),
          n_prompt, n_gen, n_depth);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "samples_ts");
    const cJSON *ns = cJSON_GetObjectItemCaseSensitive(o, "samples_ns");
    CHECK(cJSON_IsArray(ts) && cJSON_GetArraySize(ts) == reps, "samples_ts has %d entries",
          cJSON_IsArray(ts) ? cJSON_GetArraySize(ts) : -1);
    CHECK(cJSON_IsArray(ns) && cJSON_GetArraySize(ns) == reps, "samples_ns");
    double sum = 0;
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, ts) {
        const double want = 1e9 * (n_prompt + n_gen) / cJSON_GetArrayItem(ns, i++)->valuedouble;
        CHECK(it->valuedouble > 0 && fabs(it->valuedouble - want) <= 1e-6 * want, "sample %g vs %g tokens/s",
              it->valuedouble, want);
        sum += it->valuedouble;
    }
    const double avg = num(o, "avg_ts");
    CHECK(fabs(avg - sum / reps) <= 1e-6 * avg, "avg_ts %g is the mean of the samples %g", avg, sum / reps);
    CHECK(num(o, "stddev_ts") >= 0, "stddev_ts");
    CHECK(num(o, "avg_ns") > 0, "avg_ns");
    const cJSON *gbps = cJSON_GetObjectItemCaseSensitive(o, "gbps");
    /* All of an F32 model's tensors but 511 of the 512 embedding rows are read per token. */
    const double bytes = num(o, "weight_bytes_per_token");
    CHECK(bytes == 1171200 - 511 * 64 * 4, "weight_bytes_per_token %g", bytes);
    if (n_gen > 0)
        CHECK(cJSON_IsNumber(gbps) &&
                  fabs(gbps->valuedouble - avg * bytes * 1e-9) <= 1e-6 * gbps->valuedouble,
              "gbps for tg");
    else
        CHECK(cJSON_IsNull(gbps), "gbps is null for pp");
}

int main(void) {
    const char *model = shared_path("models/stories260K.gguf");
    if (!file_exists(model)) {
        fprintf(stderr, "skip: %s missing\n", model);
        return TEST_SKIP_CODE;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 16 -n 8 -d 0,4 -r 2 -t 1 --device cpu -o json > bench.json",
             CERA_BIN, model);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    size_t n = 0;
    char *text = read_file("bench.json", &n);
    cJSON *arr = text ? cJSON_Parse(text) : NULL;
    CHECK(cJSON_IsArray(arr), "bench -o json prints a JSON array");
    if (cJSON_IsArray(arr)) {
        CHECK(cJSON_GetArraySize(arr) == 4, "4 tests (pp16, tg8 at depths 0 and 4), got %d",
              cJSON_GetArraySize(arr));
        if (cJSON_GetArraySize(arr) == 4) {
            check_test(cJSON_GetArrayItem(arr, 0), model, 16, 0, 0, 2);
            check_test(cJSON_GetArrayItem(arr, 1), model, 0, 8, 0, 2);
            check_test(cJSON_GetArrayItem(arr, 2), model, 16, 0, 4, 2);
            check_test(cJSON_GetArrayItem(arr, 3), model, 0, 8, 4, 2);
        }
    }
    cJSON_Delete(arr);
    free(text);

    snprintf(cmd, sizeof cmd, "%s bench -m %s -p 8 -n 4 -r 1 -t 1 --device cpu > bench.md", CERA_BIN, model);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    text = read_file("bench.md", &n);
    CHECK(text && strstr(text, "| pp8 |") && strstr(text, "| tg4 |") && strstr(text, "t/s"),
          "markdown table with pp8 and tg4 rows:\n%s", text ? text : "(none)");
    free(text);

    /* --parallel: one row per N, n_parallel and avg_ts = the total generated tokens/s of all N */
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s -p 6 -n 5 -r 2 -t 1 --parallel 1,3 --device cpu -o json > bench-par.json",
             CERA_BIN, model);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    text = read_file("bench-par.json", &n);
    arr = text ? cJSON_Parse(text) : NULL;
    CHECK(cJSON_IsArray(arr) && cJSON_GetArraySize(arr) == 2, "--parallel 1,3: 2 rows");
    for (int i = 0; cJSON_IsArray(arr) && i < cJSON_GetArraySize(arr); i++) {
        const cJSON *o = cJSON_GetArrayItem(arr, i);
        const int np = i == 0 ? 1 : 3;
        CHECK(num(o, "n_parallel") == np && num(o, "n_prompt") == 6 && num(o, "n_gen") == 5,
              "row %d: n_parallel %g, p %g, n %g", i, num(o, "n_parallel"), num(o, "n_prompt"),
              num(o, "n_gen"));
        const cJSON *ns = cJSON_GetObjectItemCaseSensitive(o, "samples_ns");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(o, "samples_ts");
        CHECK(cJSON_GetArraySize(ns) == 2 && cJSON_GetArraySize(ts) == 2, "2 samples");
        for (int k = 0; k < cJSON_GetArraySize(ns) && k < cJSON_GetArraySize(ts); k++) {
            const double want = 1e9 * np * 5 / cJSON_GetArrayItem(ns, k)->valuedouble;
            CHECK(fabs(cJSON_GetArrayItem(ts, k)->valuedouble - want) <= 1e-6 * want,
                  "a sample counts the tokens of all %d sessions", np);
        }
        CHECK(num(o, "pp_avg_ts") > 0 && num(o, "avg_ts") > 0, "pp_avg_ts and avg_ts");
    }
    cJSON_Delete(arr);
    free(text);

    snprintf(cmd, sizeof cmd, "%s bench -m /nonexistent.gguf -p 8 -n 4 2>/dev/null", CERA_BIN);
    CHECK(run_command(cmd) == 1, "a missing model is an error exit");
    snprintf(cmd, sizeof cmd, "%s bench -m %s -p x 2>/dev/null", CERA_BIN, model);
    CHECK(run_command(cmd) == 2, "a bad -p is a usage error");
    return test_finish();
}

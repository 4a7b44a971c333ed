/*
 * testutil.h — the small harness shared by cera's tests.
 *
 * CHECK(cond, fmt, ...) records a failure with a message and goes on; a test's
 * main returns test_finish(), which prints "N passed, N failed" and the exit code.
 * Paths to the shared reference folder and the fetched models come from CMake.
 */
#ifndef CERA_TESTUTIL_H
#define CERA_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern int test_passed, test_failed;

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (cond) {                                                                                          \
            test_passed++;                                                                                   \
        } else {                                                                                             \
            test_failed++;                                                                                   \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);                         \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fprintf(stderr, "\n");                                                                           \
        }                                                                                                    \
    } while (0)

/* Prints the totals; returns the exit code (0 when nothing failed and something passed). */
int test_finish(void);

/* Skips the whole test (CTest reads exit code 77 as skipped when SKIP_RETURN_CODE is set). */
#define TEST_SKIP_CODE 77

/* "<CERA_SHARED_DIR>/<rel>" into a static buffer rotated over 8 slots; two prefixes name
 * reference material kept elsewhere: "synth/..." the models `cera synth` writes at test time
 * into the build folder (the synth_models fixture, tests/model/CMakeLists.txt) and "data/..."
 * the test data committed under tests/model/data (CERA_TEST_SYNTH_DIR and CERA_TEST_DATA_DIR in
 * the environment move these two). */
const char *shared_path(const char *rel);
/* A golden case's file NAME.EXT: under the shared golden/ folder, or, when NAME holds a '/',
 * NAME itself through shared_path ("data/lfm2moe/f32.p1"). */
const char *golden_path(const char *name, const char *ext);
const char *models_path(const char *rel);
bool file_exists(const char *path);

/* Reads a whole file (malloc'ed, NUL-appended); NULL on failure. */
void *read_file(const char *path, size_t *size);
/* Reads integers one per line (or whitespace separated); malloc'ed; NULL on failure. */
int32_t *read_ints(const char *path, size_t *n);

/* A deterministic generator for fresh random inputs (seed printed on failure by callers). */
typedef struct test_rng {
    uint64_t s;
} test_rng;
uint64_t test_rng_next(test_rng *r);
float test_rng_uniform(test_rng *r); /* [0, 1) */
float test_rng_normal(test_rng *r);

/* Runs a shell command and returns its exit status (-1 when killed by a signal). */
int run_command(const char *cmd);

#endif

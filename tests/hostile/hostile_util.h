/*
 * hostile_util.h — what the hostile-input tests share: running the cera CLI on crafted
 * inputs with a time limit (a hang is a failure, not a stuck CI), capturing what it
 * prints, and making bad model files from stories260K (byte patches of a copy, or files
 * written with the project's GGUF writer) in a scratch folder.
 */
#ifndef CERA_TEST_HOSTILE_UTIL_H
#define CERA_TEST_HOSTILE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* What hostile_run returns for a run killed at its time limit. */
#define HOSTILE_TIMEOUT (-2)
/* The exit code of a child whose sanitizer (ASan, UBSan, LSan) reported an error. */
#define HOSTILE_SANITIZER_EXIT 199

/* Runs the cera CLI with args (NULL-terminated, without the program), stdin from
 * stdin_path (NULL: /dev/null), stdout and stderr together into out_path (NULL:
 * discarded), killed after timeout_s. Returns the exit code, 128 + the signal when a
 * signal ended it, HOSTILE_SANITIZER_EXIT after a sanitizer report, HOSTILE_TIMEOUT, or -1
 * when it could not start. */
int hostile_run(const char *const *args, double timeout_s, const char *stdin_path, const char *out_path);

/* A fresh scratch folder under the build tree for one test (removed and made again). */
const char *hostile_scratch(const char *name);
/* "<dir>/<name>" into a static buffer rotated over 8 slots. */
const char *hostile_path(const char *dir, const char *name);

/* Copies a whole file; false on failure. */
bool hostile_copy(const char *from, const char *to);
/* Writes n bytes; false on failure. */
bool hostile_write(const char *path, const void *data, size_t n);
/* Whether the file holds the text (a substring search; the file read whole). */
bool hostile_file_has(const char *path, const char *text);

/* A writer holding every key/value and tensor of f (tensor data referenced, so f must
 * stay open until the write): a base for a crafted variant. The tensor named replace
 * (when non-NULL) takes its bytes from data instead. NULL on failure. */
gguf_writer *hostile_writer_from(const gguf_file *f, const char *replace, const void *data);

/* A copy of tensor name's bytes of f (malloc'ed; *n its size), to be patched. */
void *hostile_tensor_copy(const gguf_file *f, const char *name, size_t *n);

#endif

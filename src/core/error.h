/*
 * error.h — how internal code reports failure.
 *
 * Internal functions that can fail return a cera_status and take a cera_error *
 * (which may be NULL). cera_fail() formats the message once, at the point where the
 * most is known (file, tensor, key), and returns the status so a failure is one line:
 *
 *     if (n_dims > 4) return cera_fail(err, CERA_ERR_FORMAT, "%s: tensor '%s' has %u dims", ...);
 *
 * Callers that add context (e.g. the file name) use cera_error_prefix().
 */
#ifndef CERA_CORE_ERROR_H
#define CERA_CORE_ERROR_H

#include "cera.h"

#if defined(__GNUC__)
#define CERA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CERA_PRINTF(a, b)
#endif

/* Copies the NUL-terminated src into dst (cap bytes, NUL-terminated, cut at a whole escape)
 * with control bytes written as \xNN: C0 controls, DEL and UTF-8's C1 controls (0xc2
 * 0x80..0x9f), so that text from a file (tensor names, keys) cannot put escape sequences
 * on a terminal. Returns the length written. cera_fail and cera_error_prefix apply it to
 * every message. */
size_t cera_escape_controls(char *dst, size_t cap, const char *src);

/* Sets err (when non-NULL) to status and the formatted message (control bytes escaped);
 * returns status. */
cera_status cera_fail(cera_error *err, cera_status status, const char *fmt, ...) CERA_PRINTF(3, 4);

/* Prepends "prefix: " to err's message (when err is non-NULL); control bytes escaped. */
void cera_error_prefix(cera_error *err, const char *fmt, ...) CERA_PRINTF(2, 3);

/* Clears err to CERA_OK with an empty message. */
void cera_error_clear(cera_error *err);

/* For broken internal invariants only: prints and aborts. */
#define CERA_ASSERT(cond)                                                                                    \
    do {                                                                                                     \
        if (!(cond)) cera_abort(__FILE__, __LINE__, #cond);                                                  \
    } while (0)
_Noreturn void cera_abort(const char *file, int line, const char *what);

#endif

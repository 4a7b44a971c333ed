/* error.c — status names, error formatting and the library version. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cera_status_str(cera_status status) {
    switch (status) {
    case CERA_OK: return "ok";
    case CERA_ERR_INVALID_ARG: return "invalid argument";
    case CERA_ERR_IO: return "I/O error";
    case CERA_ERR_FORMAT: return "format error";
    case CERA_ERR_UNSUPPORTED: return "unsupported";
    case CERA_ERR_NOT_FOUND: return "not found";
    case CERA_ERR_NO_MEMORY: return "out of memory";
    case CERA_ERR_CONTEXT_FULL: return "context full";
    case CERA_ERR_CANCELLED: return "cancelled";
    case CERA_ERR_DEVICE: return "device error";
    case CERA_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

#define CERA_STR2(x) #x
#define CERA_STR(x)  CERA_STR2(x)
const char *cera_version(void) {
    return CERA_STR(CERA_VERSION_MAJOR) "." CERA_STR(CERA_VERSION_MINOR) "." CERA_STR(CERA_VERSION_PATCH);
}

size_t cera_escape_controls(char *dst, size_t cap, const char *src) {
    if (!cap) return 0;
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        /* C0 controls and DEL, and C1 controls (U+0080..U+009F, 0xc2 0x80..0x9f in UTF-8),
         * which terminals read as escape sequences */
        const bool c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
        if (*p < 0x20 || *p == 0x7f || c1) {
            const int k = c1 ? 8 : 4;
            if (n + (size_t)k >= cap) break;
            if (c1) {
                snprintf(dst + n, cap - n, "\\x%02x\\x%02x", p[0], p[1]);
                p++;
            } else {
                snprintf(dst + n, cap - n, "\\x%02x", p[0]);
            }
            n += (size_t)k;
        } else {
            if (n + 1 >= cap) break;
            dst[n++] = (char)*p;
        }
    }
    dst[n] = '\0';
    return n;
}

cera_status cera_fail(cera_error *err, cera_status status, const char *fmt, ...) {
    if (err) {
        err->status = status;
        char raw[sizeof err->message];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(raw, sizeof raw, fmt, ap);
        va_end(ap);
        /* names and keys come from files: no terminal escape sequence gets through */
        cera_escape_controls(err->message, sizeof err->message, raw);
    }
    return status;
}

void cera_error_prefix(cera_error *err, const char *fmt, ...) {
    if (!err) return;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Truncation is acceptable: the start of the message carries the most context. */
    char old[sizeof err->message];
    memcpy(old, err->message, sizeof old);
    size_t cap = sizeof err->message, n = strlen(prefix);
    if (n > cap - 3) n = cap - 3;
    memcpy(err->message, prefix, n);
    memcpy(err->message + n, ": ", 2);
    size_t rest = strnlen(old, sizeof old);
    if (rest > cap - n - 3) rest = cap - n - 3;
    memcpy(err->message + n + 2, old, rest);
    err->message[n + 2 + rest] = '\0';
    memcpy(old, err->message, sizeof old); /* the prefix may hold a file's bytes too */
    cera_escape_controls(err->message, sizeof err->message, old);
}

void cera_error_clear(cera_error *err) {
    if (!err) return;
    err->status = CERA_OK;
    err->message[0] = '\0';
}

void cera_abort(const char *file, int line, const char *what) {
    fprintf(stderr, "cera: internal error at %s:%d: %s\n", file, line, what);
    abort();
}

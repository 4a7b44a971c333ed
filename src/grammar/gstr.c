/* gstr.c — the growable string the JSON-schema converter builds grammar text with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

void gstr_addn(gstr *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) {
            b->oom = true;
            return;
        }
        b->s = t;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void gstr_add(gstr *b, const char *s) { gstr_addn(b, s, strlen(s)); }
void gstr_addc(gstr *b, char c) { gstr_addn(b, &c, 1); }

void gstr_addf(gstr *b, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof buf) {
        gstr_addn(b, buf, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    gstr_addn(b, big, (size_t)n);
    free(big);
}

void gstr_free(gstr *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

char *gstr_take(gstr *b) {
    if (b->oom) {
        gstr_free(b);
        return NULL;
    }
    char *s = b->s ? b->s : calloc(1, 1);
    memset(b, 0, sizeof *b);
    return s;
}

char *gstr_dup(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

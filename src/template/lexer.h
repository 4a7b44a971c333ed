/*
 * lexer.h — the template's tokens (lexer.c makes them, parser.c reads them).
 */
#ifndef CERA_TEMPLATE_LEXER_H
#define CERA_TEMPLATE_LEXER_H

#include "template/internal.h"

typedef enum ttok_kind {
    T_TEXT,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING, /* p/n: the decoded text */
    T_INT,
    T_FLOAT,
    T_OP, /* p/n: the operator */
    T_EOF,
} ttok_kind;

typedef struct ttok {
    ttok_kind k;
    const char *p;
    size_t n;
    size_t off;    /* byte offset in the normalized source */
    int line, col; /* 1-based, for error messages and nodes */
    int64_t i;
    double f;
} ttok;

typedef struct ttokens {
    ttok *v;
    size_t n, cap;
    char *src; /* the normalized source (arena) */
    size_t src_len;
} ttokens;

/* Normalizes newlines as Jinja2 does (\r\n, \r and the other line breaks become \n; one
 * trailing newline dropped), then tokenizes with trim_blocks and lstrip_blocks. */
cera_status tlex(tarena *a, const char *text, size_t len, ttokens *out, cera_error *err);

/* 1-based line and column of a byte offset. */
void tlex_position(const ttokens *t, size_t off, int *line, int *col);

#endif

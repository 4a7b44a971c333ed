/*
 * strings.h — Python str operations on UTF-8 values (strings.c), for methods and filters.
 */
#ifndef CERA_TEMPLATE_STRINGS_H
#define CERA_TEMPLATE_STRINGS_H

#include "template/internal.h"

typedef enum tcase { TCASE_UPPER, TCASE_LOWER, TCASE_TITLE, TCASE_CAPITALIZE } tcase;

bool tstr_is_space(int32_t c);
bool tstr_is_word(int32_t c); /* a letter or a digit (Unicode) */
int32_t tstr_decode(const char *s, size_t n, size_t i, size_t *len);
bool tstr_make(trender *r, const char *p, size_t n, tval *out); /* an arena copy */
bool tstr_case(trender *r, const tval *s, tcase mode, tval *out);
/* which: 1 left, 2 right, 3 both; chars NULL or None: whitespace */
bool tstr_strip(trender *r, const tval *s, const tval *chars, int which, tval *out);
int64_t tstr_find(const tval *s, const tval *sub, bool from_right); /* code point index or -1 */
int64_t tstr_count(const tval *s, const tval *sub);
bool tstr_replace(trender *r, const tval *s, const tval *old, const tval *rep, int64_t count, tval *out);
bool tstr_split(trender *r, const tval *s, const tval *sep, int64_t maxsplit, bool from_right, tval *out);
bool tstr_splitlines(trender *r, const tval *s, tlist **out);
/* Python's `fmt % args` (args: the tuple's items, or the one value) */
/* One str.format field: v under the spec (the text after ':'), appended to b. */
bool tstr_format_field(trender *r, tbuf *b, const tval *v, const char *spec, size_t n);
bool tstr_percent(trender *r, const tval *fmt, const tval *args, size_t nargs, tval *out);

#endif

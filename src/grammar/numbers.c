/*
 * numbers.c — an integer range [min, max] as a GBNF body, as llama.cpp's build_min_max_int
 * writes it for a JSON Schema integer with bounds (INT64_MIN / INT64_MAX: no bound).
 *
 * Numbers are matched digit by digit: a range is split into ranges of equal digit counts,
 * each written as a common prefix, then per-digit classes and fixed-width [0-9]{n} tails;
 * one-sided bounds allow up to 16 digits (llama.cpp's limit for integral parts). The
 * text is the same as llama.cpp's so that the verdicts are too (including its quirks).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

static void digit_range(gstr *o, char from, char to) {
    gstr_addc(o, '[');
    if (from == to) {
        gstr_addc(o, from);
    } else {
        gstr_addc(o, from);
        gstr_addc(o, '-');
        gstr_addc(o, to);
    }
    gstr_addc(o, ']');
}

static void more_digits(gstr *o, int min_digits, int max_digits) {
    gstr_add(o, "[0-9]");
    if (min_digits == max_digits && min_digits == 1) return;
    gstr_addf(o, "{%d", min_digits);
    if (max_digits != min_digits) {
        gstr_addc(o, ',');
        if (max_digits != INT_MAX) gstr_addf(o, "%d", max_digits);
    }
    gstr_addc(o, '}');
}

static void repeat_char(char *dst, char ch, size_t n) {
    memset(dst, ch, n);
    dst[n] = 0;
}

/* from and to have the same length. */
static void uniform_range(gstr *o, const char *from, const char *to) {
    size_t i = 0, fl = strlen(from), tl = strlen(to);
    while (i < fl && i < tl && from[i] == to[i]) i++;
    if (i > 0) {
        gstr_addc(o, '"');
        gstr_addn(o, from, i);
        gstr_addc(o, '"');
    }
    if (i < fl && i < tl) {
        if (i > 0) gstr_addc(o, ' ');
        size_t sub_len = fl - i - 1;
        if (sub_len > 0) {
            const char *from_sub = from + i + 1, *to_sub = to + i + 1;
            char zeros[32], nines[32];
            repeat_char(zeros, '0', sub_len);
            repeat_char(nines, '9', sub_len);
            bool to_reached = false;
            gstr_addc(o, '(');
            if (!strcmp(from_sub, zeros)) {
                digit_range(o, from[i], (char)(to[i] - 1));
                gstr_addc(o, ' ');
                more_digits(o, (int)sub_len, (int)sub_len);
            } else {
                gstr_addf(o, "[%c] (", from[i]);
                uniform_range(o, from_sub, nines);
                gstr_addc(o, ')');
                if (from[i] < to[i] - 1) {
                    gstr_add(o, " | ");
                    if (!strcmp(to_sub, nines)) {
                        digit_range(o, (char)(from[i] + 1), to[i]);
                        to_reached = true;
                    } else {
                        digit_range(o, (char)(from[i] + 1), (char)(to[i] - 1));
                    }
                    gstr_addc(o, ' ');
                    more_digits(o, (int)sub_len, (int)sub_len);
                }
            }
            if (!to_reached) {
                gstr_add(o, " | ");
                digit_range(o, to[i], to[i]);
                gstr_addc(o, ' ');
                uniform_range(o, zeros, to_sub);
            }
            gstr_addc(o, ')');
        } else {
            gstr_addf(o, "[%c-%c]", from[i], to[i]);
        }
    }
}

static void build_min_max_int(gstr *o, int64_t min_value, int64_t max_value, int decimals_left,
                              bool top_level) {
    bool has_min = min_value != INT64_MIN, has_max = max_value != INT64_MAX;
    if (has_min && has_max) {
        if (min_value < 0 && max_value < 0) {
            gstr_add(o, "\"-\" (");
            build_min_max_int(o, -max_value, -min_value, decimals_left, true);
            gstr_addc(o, ')');
            return;
        }
        if (min_value < 0) {
            gstr_add(o, "\"-\" (");
            build_min_max_int(o, 0, -min_value, decimals_left, true);
            gstr_add(o, ") | ");
            min_value = 0;
        }
        char min_s[32], max_s[32], nines[32];
        snprintf(min_s, sizeof min_s, "%lld", (long long)min_value);
        snprintf(max_s, sizeof max_s, "%lld", (long long)max_value);
        size_t min_digits = strlen(min_s), max_digits = strlen(max_s);
        for (size_t digits = min_digits; digits < max_digits; digits++) {
            repeat_char(nines, '9', digits);
            uniform_range(o, min_s, nines);
            min_s[0] = '1';
            repeat_char(min_s + 1, '0', digits);
            gstr_add(o, " | ");
        }
        uniform_range(o, min_s, max_s);
        return;
    }
    int less_decimals = decimals_left - 1 > 1 ? decimals_left - 1 : 1;
    if (has_min) {
        if (min_value < 0) {
            gstr_add(o, "\"-\" (");
            build_min_max_int(o, INT64_MIN, -min_value, decimals_left, false);
            gstr_add(o, ") | [0] | [1-9] ");
            more_digits(o, 0, decimals_left - 1);
        } else if (min_value == 0) {
            if (top_level) {
                gstr_add(o, "[0] | [1-9] ");
                more_digits(o, 0, less_decimals);
            } else {
                more_digits(o, 1, decimals_left);
            }
        } else if (min_value <= 9) {
            char ch = (char)('0' + min_value), range_start = top_level ? '1' : '0';
            if (ch > range_start) {
                digit_range(o, range_start, (char)(ch - 1));
                gstr_addc(o, ' ');
                more_digits(o, 1, less_decimals);
                gstr_add(o, " | ");
            }
            digit_range(o, ch, '9');
            gstr_addc(o, ' ');
            more_digits(o, 0, less_decimals);
        } else {
            char min_s[32];
            snprintf(min_s, sizeof min_s, "%lld", (long long)min_value);
            int len = (int)strlen(min_s);
            char ch = min_s[0];
            if (ch > '1') {
                digit_range(o, top_level ? '1' : '0', (char)(ch - 1));
                gstr_addc(o, ' ');
                more_digits(o, len, less_decimals);
                gstr_add(o, " | ");
            }
            digit_range(o, ch, ch);
            gstr_add(o, " (");
            build_min_max_int(o, strtoll(min_s + 1, NULL, 10), INT64_MAX, less_decimals, false);
            gstr_addc(o, ')');
            if (ch < '9') {
                gstr_add(o, " | ");
                digit_range(o, (char)(ch + 1), '9');
                gstr_addc(o, ' ');
                more_digits(o, len - 1, less_decimals);
            }
        }
        return;
    }
    if (has_max) {
        if (max_value >= 0) {
            if (top_level) {
                gstr_add(o, "\"-\" [1-9] ");
                more_digits(o, 0, less_decimals);
                gstr_add(o, " | ");
            }
            build_min_max_int(o, 0, max_value, decimals_left, true);
        } else {
            gstr_add(o, "\"-\" (");
            build_min_max_int(o, -max_value, INT64_MAX, decimals_left, false);
            gstr_addc(o, ')');
        }
    }
}

void schema_int_range(gstr *o, int64_t min_value, int64_t max_value) {
    build_min_max_int(o, min_value, max_value, 16, true);
}

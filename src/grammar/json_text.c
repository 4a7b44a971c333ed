/*
 * json_text.c — JSON values as text the way llama.cpp's converter writes them
 * (nlohmann::json::dump(): compact, raw UTF-8, its escapes and number formats), for
 * enum and const values and property names, which the grammar then matches literally.
 *
 * cJSON keeps every number as a double, but nlohmann keeps whether it was written as an
 * integer (printed exactly) or not (printed as a double: 1e2 is "100.0"), so the schema
 * text is scanned once for which number tokens have a fraction or an exponent.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/internal.h"

void json_text_string(gstr *b, const char *s) {
    gstr_addc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': gstr_add(b, "\\\""); break;
        case '\\': gstr_add(b, "\\\\"); break;
        case '\b': gstr_add(b, "\\b"); break;
        case '\f': gstr_add(b, "\\f"); break;
        case '\n': gstr_add(b, "\\n"); break;
        case '\r': gstr_add(b, "\\r"); break;
        case '\t': gstr_add(b, "\\t"); break;
        default:
            if (*p < 0x20)
                gstr_addf(b, "\\u%04x", *p);
            else
                gstr_addc(b, (char)*p);
        }
    }
    gstr_addc(b, '"');
}

/* A number as nlohmann's dump() writes it. JSON integers print exactly; numbers written
 * with a fraction or an exponent are doubles there, printed in their shortest round-trip
 * digits with ".0" when integral (1e2 → 100.0), exponents from 1e16 and below 1e-4. */
void json_text_number(gstr *b, double d, bool is_float) {
    if (!isfinite(d)) {
        gstr_add(b, "null");
        return;
    }
    if (!is_float && d == floor(d) && fabs(d) < 9.2e18) {
        gstr_addf(b, "%lld", (long long)d);
        return;
    }
    if (d == 0) {
        gstr_add(b, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char buf[64], digits[32];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    const char *p = buf;
    if (*p == '-') {
        gstr_addc(b, '-');
        p++;
    }
    int k = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[k++] = *p;
    while (k > 1 && digits[k - 1] == '0') k--;
    digits[k] = 0;
    int n = (*p == 'e' ? atoi(p + 1) : 0) + 1; /* the decimal point's place after the first digit */
    if (k <= n && n <= 15) {
        gstr_add(b, digits);
        for (int i = k; i < n; i++) gstr_addc(b, '0');
        gstr_add(b, ".0");
    } else if (0 < n && n <= 15) {
        gstr_addn(b, digits, (size_t)n);
        gstr_addc(b, '.');
        gstr_add(b, digits + n);
    } else if (-4 < n && n <= 0) {
        gstr_add(b, "0.");
        for (int i = 0; i < -n; i++) gstr_addc(b, '0');
        gstr_add(b, digits);
    } else {
        gstr_addc(b, digits[0]);
        if (k > 1) {
            gstr_addc(b, '.');
            gstr_add(b, digits + 1);
        }
        int e = n - 1;
        gstr_addf(b, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

bool json_text_is_float(const cJSON *const *floats, size_t n, const cJSON *j) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (floats[mid] == j) return true;
        if ((uintptr_t)floats[mid] < (uintptr_t)j)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* Numbers in document order: the tree's, and the text's tokens (which say float or not). */
static void collect_numbers(const cJSON *j, const cJSON ***v, size_t *n, size_t *cap, bool *oom) {
    for (; j; j = j->next) {
        if (cJSON_IsNumber(j)) {
            if (*n == *cap) {
                size_t nc = *cap ? *cap * 2 : 64;
                const cJSON **t = realloc((void *)*v, nc * sizeof *t);
                if (!t) {
                    *oom = true;
                    return;
                }
                *v = t;
                *cap = nc;
            }
            (*v)[(*n)++] = j;
        }
        if (j->child) collect_numbers(j->child, v, n, cap, oom);
    }
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (const cJSON *const *)a, y = (uintptr_t) * (const cJSON *const *)b;
    return (x > y) - (x < y);
}

const cJSON **json_text_floats(const char *text, size_t len, const cJSON *root, size_t *n_out,
                               bool *oom_out) {
    const cJSON **nums = NULL;
    size_t n = 0, cap = 0, k = 0, m = 0;
    bool oom = false;
    collect_numbers(root, &nums, &n, &cap, &oom);
    for (size_t i = 0; i < len && k < n && !oom;) {
        char ch = text[i];
        if (ch == '"') {
            for (i++; i < len && text[i] != '"'; i++)
                if (text[i] == '\\') i++;
            i++;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            bool fl = false;
            for (; i < len && strchr("+-0123456789.eE", text[i]) && text[i]; i++)
                fl = fl || strchr(".eE", text[i]);
            if (fl) nums[m++] = nums[k];
            k++;
        } else {
            i++;
        }
    }
    if (m) qsort((void *)nums, m, sizeof *nums, cmp_ptr);
    *n_out = m;
    *oom_out = oom;
    return nums;
}

/*
 * filters.h — the filter table's shape and the helpers filters.c and filters_seq.c share.
 */
#ifndef CERA_TEMPLATE_FILTERS_H
#define CERA_TEMPLATE_FILTERS_H

#include "template/internal.h"

typedef bool (*tfilter_fn)(trender *r, const tval *v, const targs *a, tval *out);
typedef struct tfilter_entry {
    const char *name;
    tfilter_fn fn;
} tfilter_entry;

/* The sequence filters (filters_seq.c); NULL when name is not one. */
const tfilter_entry *tfilter_find_seq(const char *name);

/* An integer argument (absent or None: dflt). */
bool tf_int_arg(trender *r, const tval *v, int64_t dflt, int64_t *out);
/* Jinja2's attribute getter for attribute= arguments: "a.b.0" walks items part by part. */
bool tf_attr(trender *r, const tval *obj, const tval *attr, tval *out);

#endif

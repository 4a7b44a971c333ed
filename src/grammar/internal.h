/*
 * internal.h — what the grammar files share: the element layout of compiled rules
 * (llama.cpp's llama_grammar_element kinds), the cera_grammar struct, and a growable
 * string used by the JSON-schema converter.
 */
#ifndef CERA_GRAMMAR_INTERNAL_H
#define CERA_GRAMMAR_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/grammar.h"

/* One element of a rule. A rule is a run of alternatives, each a sequence of elements
 * ended by GE_ALT (another alternative follows) or GE_END (the rule's last). A character
 * set is GE_CHAR / GE_CHAR_NOT / GE_CHAR_ANY followed by GE_CHAR_ALT items, any item
 * followed by GE_CHAR_RNG_UPPER making it a range. */
enum gelem_type {
    GE_END = 0,
    GE_ALT,
    GE_RULE_REF,       /* value: rule id */
    GE_CHAR,           /* value: a code point (the first of a positive set) */
    GE_CHAR_NOT,       /* the first of a negated set */
    GE_CHAR_RNG_UPPER, /* the upper bound of a range started by the previous item */
    GE_CHAR_ALT,       /* a further item of the set */
    GE_CHAR_ANY,       /* `.` */
    GE_TOKEN,          /* value: a token id */
    GE_TOKEN_NOT,      /* any token but value */
};

typedef struct gelem {
    uint32_t type;
    uint32_t value;
} gelem;

struct cera_grammar {
    gelem *el; /* every rule, one after another */
    size_t n_el;
    uint32_t *rule_off; /* [n_rules] the first element of each rule */
    uint32_t n_rules;
    uint32_t root;
};

static inline bool gelem_is_eos(const gelem *e) { return e->type == GE_END || e->type == GE_ALT; }

/* Growable NUL-terminated text; on allocation failure it sets oom and stays valid. */
typedef struct gstr {
    char *s;
    size_t n, cap;
    bool oom;
} gstr;

void gstr_add(gstr *b, const char *s);
void gstr_addn(gstr *b, const char *s, size_t n);
void gstr_addc(gstr *b, char c);
void gstr_addf(gstr *b, const char *fmt, ...) CERA_PRINTF(2, 3);
void gstr_free(gstr *b);
/* Takes the text out (never NULL unless oom); the builder is left empty. */
char *gstr_take(gstr *b);
char *gstr_dup(const char *s);

/* Converts a regex pattern (^...$, as llama.cpp's _visit_pattern) into a GBNF body for rule
 * `name`; adds helper rules through the converter. Lives in regex.c, called by schema.c. */
typedef struct schema_conv schema_conv;
char *schema_add_rule(schema_conv *c, const char *name, const char *body);
void schema_error(schema_conv *c, const char *fmt, ...) CERA_PRINTF(2, 3);
bool schema_dotall(const schema_conv *c);
char *regex_visit_pattern(schema_conv *c, const char *pattern, size_t len, const char *name);

#endif

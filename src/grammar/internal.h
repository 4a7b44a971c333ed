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

/* ---- the matcher's state (match.c), shared with tokens.c ---- */

#define EMPTY_STACK 0u
#define NO_NODE     UINT32_MAX

typedef struct node_pool {
    uint32_t *elem, *parent; /* [cap] node i: top element and the stack below it */
    uint32_t n, cap;
    uint32_t *table; /* [table_cap] node id + 1 by hash of (elem, parent); 0 = free */
    size_t table_cap;
} node_pool;

struct cera_grammar_matcher {
    const cera_grammar *g;
    cera_grammar_limits lim;
    node_pool pool;
    uint32_t *stacks, *next; /* the live stacks; the ones being built */
    size_t n_stacks, n_next, cap_stacks, cap_next;
    uint32_t *mark; /* [mark_cap >= pool.n] == gen: expanded during this code point */
    size_t mark_cap;
    uint32_t gen;
    uint32_t *todo;
    size_t n_todo, cap_todo;
    size_t work;
    uint32_t compact_at;      /* pool size that triggers the next compaction */
    uint32_t epoch;           /* bumped when the pool is compacted (node ids change) */
    uint32_t partial_value;   /* the bits of a code point whose UTF-8 bytes are not all in */
    int partial_remain;       /* bytes it still needs (0: none pending) */
    struct mask_cache *cache; /* tokens.c: allowed-token masks by state */
    bool failed;
    cera_status status; /* of the failure */
    cera_error *err;    /* of the call in progress */
};

bool gm_grow_u32(uint32_t **v, size_t *cap, size_t need);
uint32_t gm_push(cera_grammar_matcher *m, uint32_t parent, uint32_t elem);
bool gm_fail(cera_grammar_matcher *m, cera_status st, const char *msg);
/* Maps stacks in[0..n) through code point cp into m->next[0..n_next) (a fresh set). */
bool gm_step(cera_grammar_matcher *m, const uint32_t *in, size_t n, uint32_t cp);
/* Expands stack s (a rule reference on top) into m->next, within the current step. */
bool gm_advance(cera_grammar_matcher *m, uint32_t s);
void gm_new_step(cera_grammar_matcher *m);
/* Makes m->next the live set; compacts the pool when it has grown. */
bool gm_commit(cera_grammar_matcher *m);
/* Whether some code point completing the partial UTF-8 (value, n_remain) fits the character
 * set at el[pos] (llama.cpp's match_partial_char). */
bool gm_match_partial(const gelem *el, uint32_t pos, uint32_t value, int n_remain);
void gm_cache_free(struct mask_cache *c);

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

/* numbers.c: an integer range as GBNF (INT64_MIN / INT64_MAX: unbounded). */
void schema_int_range(gstr *o, int64_t min_value, int64_t max_value);

/* json_text.c: JSON text as nlohmann's dump() writes it. */
typedef struct cJSON cJSON;
void json_text_string(gstr *b, const char *s);
void json_text_number(gstr *b, double d, bool is_float);
/* The number nodes of root written with a fraction or exponent in text, sorted by address
 * (malloc'ed; *oom on allocation failure). */
const cJSON **json_text_floats(const char *text, size_t len, const cJSON *root, size_t *n, bool *oom);
bool json_text_is_float(const cJSON *const *floats, size_t n, const cJSON *j);

/* Converts a regex pattern (^...$, as llama.cpp's _visit_pattern) into a GBNF body for rule
 * `name`; adds helper rules through the converter. Lives in regex.c, called by schema.c. */
typedef struct schema_conv schema_conv;
char *schema_add_rule(schema_conv *c, const char *name, const char *body);
void schema_error(schema_conv *c, const char *fmt, ...) CERA_PRINTF(2, 3);
bool schema_dotall(const schema_conv *c);
char *regex_visit_pattern(schema_conv *c, const char *pattern, size_t len, const char *name);

#endif

/*
 * schema.c — JSON Schema → GBNF with llama.cpp's json_schema_to_grammar semantics.
 *
 * The converter walks the schema as llama.cpp's common_schema_converter does and emits the
 * same rules, so that the grammar gives llama.cpp's verdicts (its whitespace rule `space`,
 * properties in schema order with the required ones first, 16-digit numbers, its string
 * escapes, enums and consts as their compact JSON text, $refs resolved from the document
 * first, allOf merging, integer bounds as digit-range rules, string formats). Rules are
 * kept by name, a name taken by a different body gets a number appended, and the grammar
 * is printed in name order, one `name ::= body` per line. Patterns go to regex.c.
 *
 * Every string made while converting is kept in one list and freed at the end, so the
 * walk needs no ownership bookkeeping. Nesting and the number of rules are bounded.
 * JSON text as llama.cpp writes it (for enums and consts) is in json_text.c, integer
 * ranges in numbers.c.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/internal.h"

#define MAX_DEPTH 256
#define MAX_RULES 5000

typedef struct named {
    char *name, *body;
} named;

typedef struct ref_entry {
    char *ref;
    const cJSON *target; /* NULL: resolved to nothing (JSON null) */
} ref_entry;

struct schema_conv {
    named *rules;
    size_t n_rules, cap_rules;
    ref_entry *refs;
    size_t n_refs, cap_refs;
    char **resolving;
    size_t n_resolving, cap_resolving;
    char **kept; /* every string to free at the end */
    size_t n_kept, cap_kept;
    gstr errors;
    int n_errors;
    const cJSON *root;
    const cJSON **floats; /* number nodes written with a fraction or exponent, sorted */
    size_t n_floats;
    int depth;
    bool oom, dotall;
};

typedef struct builtin {
    const char *name, *content;
    const char *deps[7];
} builtin;

static const builtin PRIMITIVES[] = {
    {"boolean", "(\"true\" | \"false\")", {0}},
    {"decimal-part", "[0-9]{1,16}", {0}},
    {"integral-part", "[0] | [1-9] [0-9]{0,15}", {0}},
    {"number",
     "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)?",
     {"integral-part", "decimal-part"}},
    {"integer", "(\"-\"? integral-part)", {"integral-part"}},
    {"value",
     "object | array | string | number | boolean | null",
     {"object", "array", "string", "number", "boolean", "null"}},
    {"object",
     "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? space \"}\"",
     {"string", "value"}},
    {"array", "\"[\" space ( value (\",\" space value)* )? space \"]\"", {"value"}},
    {"uuid",
     "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
     "[0-9a-fA-F]{12} \"\\\"\"",
     {0}},
    {"char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", {0}},
    {"string", "\"\\\"\" char* \"\\\"\"", {"char"}},
    {"null", "\"null\"", {0}},
    {NULL, NULL, {0}},
};

static const builtin FORMATS[] = {
    {"date",
     "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )",
     {0}},
    {"time",
     "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | "
     "\"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
     {0}},
    {"date-time", "date \"T\" time", {"date", "time"}},
    {"date-string", "\"\\\"\" date \"\\\"\"", {"date"}},
    {"time-string", "\"\\\"\" time \"\\\"\"", {"time"}},
    {"date-time-string", "\"\\\"\" date-time \"\\\"\"", {"date-time"}},
    {NULL, NULL, {0}},
};

static const builtin *find_builtin(const builtin *t, const char *name) {
    for (; t->name; t++)
        if (!strcmp(t->name, name)) return t;
    return NULL;
}

static const char SPACE_RULE[] = "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}";

/* ---- strings owned by the converter ---- */

static char *keep(schema_conv *c, char *s) {
    if (!s) {
        c->oom = true;
        return (char *)"";
    }
    if (c->n_kept == c->cap_kept) {
        size_t cap = c->cap_kept ? c->cap_kept * 2 : 256;
        char **k = realloc(c->kept, cap * sizeof *k);
        if (!k) {
            free(s);
            c->oom = true;
            return (char *)"";
        }
        c->kept = k;
        c->cap_kept = cap;
    }
    return c->kept[c->n_kept++] = s;
}

static char *take(schema_conv *c, gstr *b) { return keep(c, gstr_take(b)); }

/* The concatenation of the strings up to a NULL. */
static char *cat(schema_conv *c, ...) {
    gstr b = {0};
    va_list ap;
    va_start(ap, c);
    for (const char *s; (s = va_arg(ap, const char *));) gstr_add(&b, s);
    va_end(ap);
    gstr_addn(&b, "", 0);
    return take(c, &b);
}

static char *itoa_k(schema_conv *c, long long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    return keep(c, gstr_dup(buf));
}

void schema_error(schema_conv *c, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (c->n_errors++) gstr_add(&c->errors, "; ");
    gstr_add(&c->errors, buf);
}

bool schema_dotall(const schema_conv *c) { return c->dotall; }

/* ---- JSON text as nlohmann's dump() writes it (compact, raw UTF-8) ---- */
static void dump_json(const schema_conv *c, gstr *b, const cJSON *j, int depth) {
    if (!j || cJSON_IsNull(j) || depth > MAX_DEPTH) {
        gstr_add(b, "null");
    } else if (cJSON_IsTrue(j)) {
        gstr_add(b, "true");
    } else if (cJSON_IsFalse(j)) {
        gstr_add(b, "false");
    } else if (cJSON_IsNumber(j)) {
        json_text_number(b, j->valuedouble, json_text_is_float(c->floats, c->n_floats, j));
    } else if (cJSON_IsString(j)) {
        json_text_string(b, j->valuestring);
    } else if (cJSON_IsArray(j) || cJSON_IsObject(j)) {
        bool obj = cJSON_IsObject(j);
        gstr_addc(b, obj ? '{' : '[');
        for (const cJSON *e = j->child; e; e = e->next) {
            if (e != j->child) gstr_addc(b, ',');
            if (obj) {
                json_text_string(b, e->string ? e->string : "");
                gstr_addc(b, ':');
            }
            dump_json(c, b, e, depth + 1);
        }
        gstr_addc(b, obj ? '}' : ']');
    } else {
        gstr_add(b, "null");
    }
}

static char *dump(schema_conv *c, const cJSON *j) {
    gstr b = {0};
    dump_json(c, &b, j, 0);
    return take(c, &b);
}

/* A GBNF string literal of s (llama.cpp escapes only \r \n " \\). */
static char *format_literal(schema_conv *c, const char *s) {
    gstr b = {0};
    gstr_addc(&b, '"');
    for (; *s; s++) {
        switch (*s) {
        case '\r': gstr_add(&b, "\\r"); break;
        case '\n': gstr_add(&b, "\\n"); break;
        case '"': gstr_add(&b, "\\\""); break;
        case '\\': gstr_add(&b, "\\\\"); break;
        default: gstr_addc(&b, *s);
        }
    }
    gstr_addc(&b, '"');
    return take(c, &b);
}

/* name with every run of characters other than [a-zA-Z0-9-] replaced by one '-'. */
static char *rule_chars(schema_conv *c, const char *name) {
    gstr b = {0};
    bool in_run = false;
    for (const char *p = name; *p; p++) {
        char ch = *p;
        bool ok =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-';
        if (ok) {
            gstr_addc(&b, ch);
            in_run = false;
        } else if (!in_run) {
            gstr_addc(&b, '-');
            in_run = true;
        }
    }
    gstr_addn(&b, "", 0);
    return take(c, &b);
}

/* ---- the rule table ---- */

static named *find_rule(schema_conv *c, const char *name) {
    for (size_t i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name)) return &c->rules[i];
    return NULL;
}

static void set_rule(schema_conv *c, const char *name, const char *body) {
    named *r = find_rule(c, name);
    if (r) {
        r->body = (char *)body;
        return;
    }
    if (c->n_rules >= MAX_RULES) {
        if (c->n_rules == MAX_RULES) schema_error(c, "schema needs too many rules");
        c->n_rules++; /* counts past the limit once, so the error is reported once */
        return;
    }
    if (c->n_rules == c->cap_rules) {
        size_t cap = c->cap_rules ? c->cap_rules * 2 : 64;
        named *v = realloc(c->rules, cap * sizeof *v);
        if (!v) {
            c->oom = true;
            return;
        }
        c->rules = v;
        c->cap_rules = cap;
    }
    c->rules[c->n_rules++] = (named){(char *)name, (char *)body};
}

char *schema_add_rule(schema_conv *c, const char *name, const char *body_in) {
    char *esc = rule_chars(c, name), *body = keep(c, gstr_dup(body_in)); /* callers may free theirs */
    named *r = find_rule(c, esc);
    if (!r || !strcmp(r->body, body)) {
        set_rule(c, esc, body);
        return esc;
    }
    for (long long i = 0;; i++) {
        char *key = cat(c, esc, itoa_k(c, i), NULL);
        named *k = find_rule(c, key);
        if (!k || !strcmp(k->body, body) || c->oom) {
            set_rule(c, key, body);
            return key;
        }
    }
}

static char *add_primitive(schema_conv *c, const char *name, const builtin *rule) {
    char *n = schema_add_rule(c, name, rule->content);
    for (int i = 0; i < 7 && rule->deps[i]; i++) {
        const builtin *dep = find_builtin(PRIMITIVES, rule->deps[i]);
        if (!dep) dep = find_builtin(FORMATS, rule->deps[i]);
        if (!dep) continue;
        if (!find_rule(c, rule->deps[i])) add_primitive(c, rule->deps[i], dep);
    }
    return n;
}

static bool is_reserved_name(const char *name) {
    return !strcmp(name, "root") || find_builtin(PRIMITIVES, name) || find_builtin(FORMATS, name);
}

/* ---- repetitions ---- */

static char *build_repetition(schema_conv *c, const char *item, int min_items, int max_items,
                              const char *sep) {
    bool has_max = max_items != INT_MAX;
    if (max_items == 0) return "";
    if (min_items == 0 && max_items == 1) return cat(c, item, "?", NULL);
    if (!sep[0]) {
        if (min_items == 1 && !has_max) return cat(c, item, "+", NULL);
        if (min_items == 0 && !has_max) return cat(c, item, "*", NULL);
        return cat(c, item, "{", itoa_k(c, min_items), ",", has_max ? itoa_k(c, max_items) : "", "}", NULL);
    }
    char *inner =
        build_repetition(c, cat(c, "(", sep, " ", item, ")", NULL), min_items == 0 ? 0 : min_items - 1,
                         has_max ? max_items - 1 : max_items, "");
    char *result = cat(c, item, " ", inner, NULL);
    if (min_items == 0) result = cat(c, "(", result, ")?", NULL);
    return result;
}

/* ---- JSON helpers (nlohmann's contains / get semantics) ---- */

static const cJSON *get(const cJSON *j, const char *key) {
    return cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, key) : NULL;
}

static bool is_type(const cJSON *t, const char *name) {
    return cJSON_IsString(t) && !strcmp(t->valuestring, name);
}

static bool as_int(schema_conv *c, const cJSON *v, const char *what, int *out) {
    if (!cJSON_IsNumber(v)) {
        schema_error(c, "%s must be a number", what);
        return false;
    }
    double d = v->valuedouble;
    *out = d >= INT_MAX ? INT_MAX - 1 : d <= INT_MIN ? INT_MIN : (int)d;
    return true;
}

static bool is_integer_number(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
}

static int64_t as_int64(const cJSON *v) {
    double d = v->valuedouble;
    if (d >= 9.2e18) return INT64_MAX - 2; /* clear of the sentinels and of overflow in ±1 */
    if (d <= -9.2e18) return INT64_MIN + 2;
    return (int64_t)d;
}

/* ---- $ref resolution ---- */

static const ref_entry *find_ref(const schema_conv *c, const char *ref) {
    for (size_t i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) return &c->refs[i];
    return NULL;
}

static void add_ref(schema_conv *c, const char *ref, const cJSON *target) {
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? c->cap_refs * 2 : 16;
        ref_entry *v = realloc(c->refs, cap * sizeof *v);
        if (!v) {
            c->oom = true;
            return;
        }
        c->refs = v;
        c->cap_refs = cap;
    }
    c->refs[c->n_refs++] = (ref_entry){keep(c, gstr_dup(ref)), target};
}

/* Registers every $ref of the document, as llama.cpp's resolve_refs: a node with a $ref is
 * not searched further (so refs beside it are left unregistered, as there). */
static void resolve_refs(schema_conv *c, const cJSON *n, int depth) {
    if (depth > MAX_DEPTH) {
        schema_error(c, "schema nested too deeply");
        return;
    }
    if (cJSON_IsArray(n)) {
        for (const cJSON *x = n->child; x; x = x->next) resolve_refs(c, x, depth + 1);
        return;
    }
    if (!cJSON_IsObject(n)) return;
    const cJSON *r = get(n, "$ref");
    if (!r) {
        for (const cJSON *x = n->child; x; x = x->next) resolve_refs(c, x, depth + 1);
        return;
    }
    if (!cJSON_IsString(r)) {
        schema_error(c, "$ref must be a string");
        return;
    }
    const char *ref = r->valuestring;
    if (find_ref(c, ref)) return;
    if (!strncmp(ref, "https://", 8)) {
        const char *h = strchr(ref, '#');
        if (!h || !h[1]) return;
        schema_error(c, "Error resolving ref %s: remote schemas are not fetched", ref);
        return;
    }
    if (strncmp(ref, "#/", 2)) {
        schema_error(c, "Unsupported ref: %s", ref);
        return;
    }
    const cJSON *target = c->root;
    const char *p = ref + 2;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        char *sel = keep(c, strndup(p, len));
        const cJSON *next = NULL;
        if (cJSON_IsObject(target)) {
            next = cJSON_GetObjectItemCaseSensitive(target, sel);
        } else if (cJSON_IsArray(target)) {
            char *end;
            unsigned long long idx = strtoull(sel, &end, 10);
            if (end != sel && sel[0] != '-' && idx < (unsigned long long)cJSON_GetArraySize(target))
                next = cJSON_GetArrayItem(target, (int)idx);
        }
        if (!next) {
            schema_error(c, "Error resolving ref %s: %s not in %.200s", ref, sel, dump(c, target));
            return;
        }
        target = next;
        if (!slash) break;
        p = slash + 1;
    }
    add_ref(c, ref, target);
}

static char *visit(schema_conv *c, const cJSON *schema, const char *name);

static char *resolve_ref(schema_conv *c, const char *ref) {
    const char *h = strchr(ref, '#');
    char *ref_name = cat(c, "ref", rule_chars(c, h ? h + 1 : ref), NULL);
    bool busy = false;
    for (size_t i = 0; i < c->n_resolving; i++) busy = busy || !strcmp(c->resolving[i], ref);
    if (!find_rule(c, ref_name) && !busy) {
        if (c->n_resolving == c->cap_resolving) {
            size_t cap = c->cap_resolving ? c->cap_resolving * 2 : 16;
            char **v = realloc(c->resolving, cap * sizeof *v);
            if (!v) {
                c->oom = true;
                return ref_name;
            }
            c->resolving = v;
            c->cap_resolving = cap;
        }
        c->resolving[c->n_resolving++] = (char *)ref;
        const ref_entry *e = find_ref(c, ref);
        ref_name = visit(c, e ? e->target : NULL, ref_name);
        c->n_resolving--;
    }
    return ref_name;
}

/* ---- objects ---- */

typedef struct prop {
    const char *name;
    const cJSON *schema;
} prop;

typedef struct props {
    prop *v;
    size_t n, cap;
} props;

static void props_add(schema_conv *c, props *p, const char *name, const cJSON *schema) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        prop *v = realloc(p->v, cap * sizeof *v);
        if (!v) {
            c->oom = true;
            return;
        }
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n++] = (prop){name, schema};
}

static bool props_has(const props *p, const char *name) {
    for (size_t i = 0; i < p->n; i++)
        if (!strcmp(p->v[i].name, name)) return true;
    return false;
}

/* The kv rule of a property (the last one given for that name, as a map assignment). */
static const char *kv_of(const props *kv, const char *name) {
    for (size_t i = kv->n; i-- > 0;)
        if (!strcmp(kv->v[i].name, name)) return (const char *)kv->v[i].schema;
    return "";
}

/* A JSON string that is none of the given strings (a trie of them, llama.cpp's _not_strings). */
typedef struct trie {
    struct trie_node {
        int first_child, next_sibling;
        signed char ch;
        bool end;
    } * n;
    size_t len, cap;
} trie;

static int trie_child(schema_conv *c, trie *t, int node, signed char ch) {
    int prev = -1, k = t->n[node].first_child;
    while (k >= 0 && t->n[k].ch < ch) {
        prev = k;
        k = t->n[k].next_sibling;
    }
    if (k >= 0 && t->n[k].ch == ch) return k;
    if (t->len == t->cap) {
        size_t cap = t->cap * 2;
        struct trie_node *v = realloc(t->n, cap * sizeof *v);
        if (!v) {
            c->oom = true;
            return -1;
        }
        t->n = v;
        t->cap = cap;
    }
    int id = (int)t->len++;
    t->n[id] = (struct trie_node){-1, k, ch, false};
    if (prev < 0)
        t->n[node].first_child = id;
    else
        t->n[prev].next_sibling = id;
    return id;
}

static void not_strings_visit(const trie *t, int node, gstr *o, const char *char_rule, int depth) {
    gstr rejects = {0};
    bool first = true;
    if (depth > 4 * MAX_DEPTH) return;
    for (int k = t->n[node].first_child; k >= 0; k = t->n[k].next_sibling) {
        gstr_addc(&rejects, (char)t->n[k].ch);
        if (first)
            first = false;
        else
            gstr_add(o, " | ");
        gstr_addc(o, '[');
        gstr_addc(o, (char)t->n[k].ch);
        gstr_addc(o, ']');
        if (t->n[k].first_child >= 0) {
            gstr_add(o, " (");
            not_strings_visit(t, k, o, char_rule, depth + 1);
            gstr_addc(o, ')');
        } else if (t->n[k].end) {
            gstr_addf(o, " %s+", char_rule);
        }
    }
    if (t->n[node].first_child >= 0) {
        if (!first) gstr_add(o, " | ");
        gstr_addf(o, "[^\"%s] %s*", rejects.s ? rejects.s : "", char_rule);
    }
    gstr_free(&rejects);
}

static char *not_strings(schema_conv *c, const props *names) {
    trie t = {malloc(64 * sizeof *t.n), 1, 64};
    if (!t.n) {
        c->oom = true;
        return "";
    }
    t.n[0] = (struct trie_node){-1, -1, 0, false};
    for (size_t i = 0; i < names->n; i++) {
        int node = 0;
        for (const char *s = names->v[i].name; *s && node >= 0; s++)
            node = trie_child(c, &t, node, (signed char)*s);
        if (node >= 0) t.n[node].end = true;
    }
    char *char_rule = add_primitive(c, "char", find_builtin(PRIMITIVES, "char"));
    gstr o = {0};
    gstr_add(&o, "[\"] ( ");
    not_strings_visit(&t, 0, &o, char_rule, 0);
    gstr_add(&o, " )");
    if (!t.n[0].end) gstr_addc(&o, '?');
    gstr_add(&o, " [\"]");
    free(t.n);
    return take(c, &o);
}

static char *recursive_refs(schema_conv *c, const props *kv, const char **ks, size_t n,
                            bool first_is_optional, const char *name) {
    if (n == 0) return "";
    const char *k = ks[0], *kv_rule = kv_of(kv, k);
    bool star = !strcmp(k, "*");
    char *comma_ref = cat(c, "( \",\" space ", kv_rule, " )", NULL);
    char *res;
    if (first_is_optional)
        res = cat(c, comma_ref, star ? "*" : "?", NULL);
    else
        res = cat(c, kv_rule, star ? cat(c, " ", comma_ref, "*", NULL) : "", NULL);
    if (n > 1) {
        char *rest = recursive_refs(c, kv, ks + 1, n - 1, true, name);
        res = cat(c, res, " ", schema_add_rule(c, cat(c, name, name[0] ? "-" : "", k, "-rest", NULL), rest),
                  NULL);
    }
    return res;
}

static char *build_object_rule(schema_conv *c, const props *properties, const props *required,
                               const char *name, const cJSON *additional) {
    const char **req = calloc(properties->n + 1, sizeof *req), **opt = calloc(properties->n + 2, sizeof *opt);
    props kv = {0}, prop_names = {0};
    size_t n_req = 0, n_opt = 0;
    if (!req || !opt) {
        free(req);
        free(opt);
        c->oom = true;
        return "";
    }
    const char *sep = name[0] ? "-" : "";
    for (size_t i = 0; i < properties->n; i++) {
        const char *pn = properties->v[i].name;
        char *prop_rule = visit(c, properties->v[i].schema, cat(c, name, sep, pn, NULL));
        gstr key = {0};
        json_text_string(&key, pn);
        char *kv_rule =
            schema_add_rule(c, cat(c, name, sep, pn, "-kv", NULL),
                            cat(c, format_literal(c, take(c, &key)), " space \":\" space ", prop_rule, NULL));
        props_add(c, &kv, pn, (const cJSON *)kv_rule);
        if (props_has(required, pn))
            req[n_req++] = pn;
        else
            opt[n_opt++] = pn;
        props_add(c, &prop_names, pn, NULL);
    }
    if (cJSON_IsTrue(additional) || cJSON_IsObject(additional)) {
        char *sub_name = cat(c, name, sep, "additional", NULL);
        char *value_rule = cJSON_IsObject(additional)
                               ? visit(c, additional, cat(c, sub_name, "-value", NULL))
                               : add_primitive(c, "value", find_builtin(PRIMITIVES, "value"));
        char *key_rule = prop_names.n == 0
                             ? add_primitive(c, "string", find_builtin(PRIMITIVES, "string"))
                             : schema_add_rule(c, cat(c, sub_name, "-k", NULL), not_strings(c, &prop_names));
        char *kv_rule = schema_add_rule(c, cat(c, sub_name, "-kv", NULL),
                                        cat(c, key_rule, " \":\" space ", value_rule, NULL));
        props_add(c, &kv, "*", (const cJSON *)kv_rule);
        opt[n_opt++] = "*";
    }
    gstr rule = {0};
    gstr_add(&rule, "\"{\" space ");
    for (size_t i = 0; i < n_req; i++) {
        if (i > 0) gstr_add(&rule, " \",\" space ");
        gstr_add(&rule, kv_of(&kv, req[i]));
    }
    if (n_opt) {
        gstr_add(&rule, " (");
        if (n_req) gstr_add(&rule, " \",\" space ( ");
        for (size_t i = 0; i < n_opt; i++) {
            if (i > 0) gstr_add(&rule, " | ");
            gstr_add(&rule, recursive_refs(c, &kv, opt + i, n_opt - i, false, name));
        }
        if (n_req) gstr_add(&rule, " )");
        gstr_add(&rule, " )?");
    }
    gstr_add(&rule, " space \"}\"");
    free(req);
    free(opt);
    free(kv.v);
    free(prop_names.v);
    return take(c, &rule);
}

/* ---- the walk ---- */

static char *union_rule(schema_conv *c, const char *name, const cJSON **alts, size_t n) {
    gstr b = {0};
    for (size_t i = 0; i < n; i++) {
        if (i) gstr_add(&b, " | ");
        gstr_add(&b, visit(c, alts[i],
                           cat(c, name, name[0] ? "-" : "alternative-", itoa_k(c, (long long)i), NULL)));
    }
    gstr_addn(&b, "", 0);
    return take(c, &b);
}

/* The values nlohmann iterates over: an array's items, an object's values, else the value itself. */
static const cJSON **values_of(schema_conv *c, const cJSON *v, size_t *n) {
    size_t k = 0;
    if (cJSON_IsArray(v) || cJSON_IsObject(v))
        k = (size_t)cJSON_GetArraySize(v);
    else
        k = v ? 1 : 0;
    const cJSON **out = calloc(k + 1, sizeof *out);
    if (!out) {
        c->oom = true;
        *n = 0;
        return NULL;
    }
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        size_t i = 0;
        for (const cJSON *x = v->child; x; x = x->next) out[i++] = x;
    } else if (v) {
        out[0] = v;
    }
    *n = k;
    keep(c, (char *)out);
    return out;
}

static char *visit_all_of(schema_conv *c, const cJSON *schema, const char *name, const char *rule_name) {
    props properties = {0}, required = {0}, enums = {0};
    size_t *enum_count = NULL, cap_counts = 0;
    const cJSON *all_of = get(schema, "allOf");
    size_t n_all;
    const cJSON **all = values_of(c, all_of, &n_all);
    for (size_t i = 0; i < n_all; i++) {
        const cJSON *t = all[i];
        const cJSON *any = get(t, "anyOf");
        size_t n_comp = 1;
        const cJSON **comps = any ? values_of(c, any, &n_comp) : &all[i];
        bool is_required = !any;
        for (size_t j = 0; j < n_comp; j++) {
            const cJSON *comp = comps[j];
            for (int hops = 0; get(comp, "$ref") && hops < 64; hops++) {
                const cJSON *r = get(comp, "$ref");
                const ref_entry *e = cJSON_IsString(r) ? find_ref(c, r->valuestring) : NULL;
                comp = e ? e->target : NULL;
            }
            const cJSON *pr = get(comp, "properties"), *en = get(comp, "enum");
            if (pr) {
                for (const cJSON *p = cJSON_IsObject(pr) ? pr->child : NULL; p; p = p->next) {
                    props_add(c, &properties, p->string, p);
                    if (is_required) props_add(c, &required, p->string, NULL);
                }
            } else if (en) {
                size_t n_en;
                const cJSON **vals = values_of(c, en, &n_en);
                for (size_t k = 0; k < n_en; k++) {
                    char *lit = format_literal(c, dump(c, vals[k]));
                    size_t at = enums.n;
                    for (size_t q = 0; q < enums.n; q++)
                        if (!strcmp(enums.v[q].name, lit)) at = q;
                    if (at == enums.n) {
                        props_add(c, &enums, lit, NULL);
                        if (enums.n > cap_counts) {
                            cap_counts = enums.cap;
                            size_t *nc = realloc(enum_count, cap_counts * sizeof *nc);
                            if (!nc) {
                                c->oom = true;
                                break;
                            }
                            enum_count = nc;
                        }
                        enum_count[at] = 0;
                    }
                    if (at < enums.n) enum_count[at]++;
                }
            }
        }
    }
    char *result = NULL;
    if (enums.n) {
        /* the intersection, in the order of a std::map over the literals */
        const char **inter = calloc(enums.n, sizeof *inter);
        size_t n_inter = 0;
        for (size_t q = 0; inter && q < enums.n; q++)
            if (enum_count[q] == n_all) inter[n_inter++] = enums.v[q].name;
        for (size_t a = 1; a < n_inter; a++)
            for (size_t b = a; b > 0 && strcmp(inter[b - 1], inter[b]) > 0; b--) {
                const char *t = inter[b];
                inter[b] = inter[b - 1];
                inter[b - 1] = t;
            }
        if (n_inter) {
            gstr b = {0};
            gstr_addc(&b, '(');
            for (size_t q = 0; q < n_inter; q++) {
                if (q) gstr_add(&b, " | ");
                gstr_add(&b, inter[q]);
            }
            gstr_addc(&b, ')');
            result = schema_add_rule(c, rule_name, take(c, &b));
        }
        free(inter);
    }
    if (!result)
        result = schema_add_rule(c, rule_name, build_object_rule(c, &properties, &required, name, NULL));
    free(properties.v);
    free(required.v);
    free(enums.v);
    free(enum_count);
    return result;
}

static bool uuid_format(const char *f) {
    return !strncmp(f, "uuid", 4) && (f[4] == 0 || (f[4] >= '1' && f[4] <= '5' && f[5] == 0));
}

static char *visit_inner(schema_conv *c, const cJSON *schema, const char *name) {
    const cJSON *type = get(schema, "type"), *fmt = get(schema, "format");
    bool type_null = !type || cJSON_IsNull(type);
    if (fmt && !cJSON_IsString(fmt)) {
        schema_error(c, "format must be a string");
        return "";
    }
    const char *format = fmt ? fmt->valuestring : "";
    const char *rule_name = is_reserved_name(name) ? cat(c, name, "-", NULL) : name[0] ? name : "root";
    const cJSON *v;

    if ((v = get(schema, "$ref"))) {
        if (!cJSON_IsString(v)) {
            schema_error(c, "$ref must be a string");
            return "";
        }
        return schema_add_rule(c, rule_name, resolve_ref(c, v->valuestring));
    }
    if ((v = get(schema, "oneOf")) || (v = get(schema, "anyOf"))) {
        if (!cJSON_IsArray(v)) {
            schema_error(c, "oneOf/anyOf must be an array");
            return "";
        }
        size_t n;
        const cJSON **alts = values_of(c, v, &n);
        return schema_add_rule(c, rule_name, union_rule(c, name, alts, n));
    }
    if (cJSON_IsArray(type)) {
        size_t n = (size_t)cJSON_GetArraySize(type), i = 0;
        const cJSON **alts = calloc(n + 1, sizeof *alts);
        cJSON **copies = calloc(n + 1, sizeof *copies);
        if (!alts || !copies) {
            free(alts);
            free(copies);
            c->oom = true;
            return "";
        }
        for (const cJSON *t = type->child; t; t = t->next, i++) {
            copies[i] = cJSON_Duplicate(schema, true);
            cJSON *tc = cJSON_Duplicate(t, true);
            if (!copies[i] || !tc || !cJSON_ReplaceItemInObjectCaseSensitive(copies[i], "type", tc)) {
                cJSON_Delete(tc);
                c->oom = true;
            }
            alts[i] = copies[i];
        }
        char *r = c->oom ? "" : schema_add_rule(c, rule_name, union_rule(c, name, alts, n));
        for (i = 0; i < n; i++) cJSON_Delete(copies[i]);
        free(copies);
        free(alts);
        return r;
    }
    if ((v = get(schema, "const"))) return schema_add_rule(c, rule_name, format_literal(c, dump(c, v)));
    if ((v = get(schema, "enum"))) {
        size_t n;
        const cJSON **vals = values_of(c, v, &n);
        gstr b = {0};
        gstr_addc(&b, '(');
        for (size_t i = 0; i < n; i++) {
            if (i) gstr_add(&b, " | ");
            gstr_add(&b, format_literal(c, dump(c, vals[i])));
        }
        gstr_addc(&b, ')');
        return schema_add_rule(c, rule_name, take(c, &b));
    }
    const cJSON *addl = get(schema, "additionalProperties");
    if ((type_null || is_type(type, "object")) &&
        (get(schema, "properties") || (addl && !cJSON_IsTrue(addl)))) {
        props properties = {0}, required = {0};
        const cJSON *req = get(schema, "required"), *pr = get(schema, "properties");
        if (cJSON_IsArray(req))
            for (const cJSON *x = req->child; x; x = x->next)
                if (cJSON_IsString(x)) props_add(c, &required, x->valuestring, NULL);
        if (pr && !cJSON_IsObject(pr)) schema_error(c, "properties must be an object");
        for (const cJSON *p = cJSON_IsObject(pr) ? pr->child : NULL; p; p = p->next)
            props_add(c, &properties, p->string, p);
        char *r = schema_add_rule(c, rule_name, build_object_rule(c, &properties, &required, name, addl));
        free(properties.v);
        free(required.v);
        return r;
    }
    if ((type_null || is_type(type, "object") || is_type(type, "string")) && get(schema, "allOf"))
        return visit_all_of(c, schema, name, rule_name);
    const cJSON *items = get(schema, "items");
    if (!items) items = get(schema, "prefixItems");
    if ((type_null || is_type(type, "array")) && items) {
        const char *sep = name[0] ? "-" : "";
        if (cJSON_IsArray(items)) {
            gstr b = {0};
            gstr_add(&b, "\"[\" space ");
            int i = 0;
            for (const cJSON *it = items->child; it; it = it->next, i++) {
                if (i > 0) gstr_add(&b, " \",\" space ");
                gstr_add(&b, visit(c, it, cat(c, name, sep, "tuple-", itoa_k(c, i), NULL)));
            }
            gstr_add(&b, " space \"]\"");
            return schema_add_rule(c, rule_name, take(c, &b));
        }
        char *item_rule = visit(c, items, cat(c, name, sep, "item", NULL));
        int min_items = 0, max_items = INT_MAX;
        const cJSON *mi = get(schema, "minItems"), *ma = get(schema, "maxItems");
        if (mi && !as_int(c, mi, "minItems", &min_items)) return "";
        if (is_integer_number(ma)) as_int(c, ma, "maxItems", &max_items);
        if (min_items < 0) min_items = 0;
        if (max_items < 0) max_items = 0;
        return schema_add_rule(c, rule_name,
                               cat(c, "\"[\" space ",
                                   build_repetition(c, item_rule, min_items, max_items, "\",\" space"),
                                   " space \"]\"", NULL));
    }
    if ((type_null || is_type(type, "string")) && (v = get(schema, "pattern"))) {
        if (!cJSON_IsString(v)) {
            schema_error(c, "pattern must be a string");
            return "";
        }
        return regex_visit_pattern(c, v->valuestring, strlen(v->valuestring), rule_name);
    }
    if ((type_null || is_type(type, "string")) && uuid_format(format))
        return add_primitive(c, !strcmp(rule_name, "root") ? "root" : format,
                             find_builtin(PRIMITIVES, "uuid"));
    if (type_null || is_type(type, "string")) {
        char *prim = cat(c, format, "-string", NULL);
        const builtin *f = find_builtin(FORMATS, prim);
        if (f) return schema_add_rule(c, rule_name, add_primitive(c, prim, f));
    }
    const cJSON *minl = get(schema, "minLength"), *maxl = get(schema, "maxLength");
    if (is_type(type, "string") && (minl || maxl)) {
        char *char_rule = add_primitive(c, "char", find_builtin(PRIMITIVES, "char"));
        int min_len = 0, max_len = INT_MAX;
        if (minl && !as_int(c, minl, "minLength", &min_len)) return "";
        if (maxl && !as_int(c, maxl, "maxLength", &max_len)) return "";
        if (min_len < 0) min_len = 0;
        if (max_len < 0) max_len = 0;
        return schema_add_rule(
            c, rule_name,
            cat(c, "\"\\\"\" ", build_repetition(c, char_rule, min_len, max_len, ""), " \"\\\"\"", NULL));
    }
    const cJSON *mn = get(schema, "minimum"), *xmn = get(schema, "exclusiveMinimum");
    const cJSON *mx = get(schema, "maximum"), *xmx = get(schema, "exclusiveMaximum");
    if (is_type(type, "integer") && (mn || xmn || mx || xmx)) {
        int64_t min_value = INT64_MIN, max_value = INT64_MAX;
        const cJSON *lo = mn ? mn : xmn, *hi = mx ? mx : xmx;
        if ((lo && !cJSON_IsNumber(lo)) || (hi && !cJSON_IsNumber(hi))) {
            schema_error(c, "integer bounds must be numbers");
            return "";
        }
        if (mn)
            min_value = as_int64(mn);
        else if (xmn)
            min_value = as_int64(xmn) + 1;
        if (mx)
            max_value = as_int64(mx);
        else if (xmx)
            max_value = as_int64(xmx) - 1;
        gstr b = {0};
        gstr_addc(&b, '(');
        schema_int_range(&b, min_value, max_value);
        gstr_addc(&b, ')');
        return schema_add_rule(c, rule_name, take(c, &b));
    }
    bool empty = !schema || cJSON_IsNull(schema) ||
                 ((cJSON_IsObject(schema) || cJSON_IsArray(schema)) && !schema->child);
    if (empty || is_type(type, "object"))
        return schema_add_rule(c, rule_name, add_primitive(c, "object", find_builtin(PRIMITIVES, "object")));
    if (type_null && cJSON_IsObject(schema))
        return schema_add_rule(c, rule_name, add_primitive(c, "value", find_builtin(PRIMITIVES, "value")));
    const builtin *prim = cJSON_IsString(type) ? find_builtin(PRIMITIVES, type->valuestring) : NULL;
    if (!prim) {
        schema_error(c, "Unrecognized schema: %.300s", dump(c, schema));
        return "";
    }
    return add_primitive(c, !strcmp(rule_name, "root") ? "root" : type->valuestring, prim);
}

static char *visit(schema_conv *c, const cJSON *schema, const char *name) {
    if (c->oom || c->n_errors > 64) return "";
    if (++c->depth > MAX_DEPTH) {
        if (c->depth == MAX_DEPTH + 1) schema_error(c, "schema nested too deeply");
        c->depth--;
        return "";
    }
    char *r = visit_inner(c, schema, name);
    c->depth--;
    return r;
}

static int cmp_rules(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

cera_status cera_json_schema_to_gbnf(const char *json, size_t len, char **out, cera_error *err) {
    return cera_json_schema_to_gbnf_rule(json, len, "", out, NULL, err);
}

cera_status cera_json_schema_to_gbnf_rule(const char *json, size_t len, const char *name, char **out,
                                          char **top, cera_error *err) {
    *out = NULL;
    if (top) *top = NULL;
    cJSON *schema = cJSON_ParseWithLength(json, len);
    if (!schema) return cera_fail(err, CERA_ERR_FORMAT, "JSON schema: not valid JSON");
    schema_conv c = {.root = schema};
    bool oom = false;
    c.floats = json_text_floats(json, len, schema, &c.n_floats, &oom);
    c.oom = oom;
    set_rule(&c, "space", SPACE_RULE);
    resolve_refs(&c, schema, 0);
    const char *top_rule = visit(&c, schema, name);
    cera_status st = CERA_OK;
    if (c.oom) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    } else if (c.n_errors) {
        st = cera_fail(err, CERA_ERR_UNSUPPORTED, "JSON schema conversion failed: %s",
                       c.errors.s ? c.errors.s : "");
    } else {
        qsort(c.rules, c.n_rules, sizeof *c.rules, cmp_rules);
        gstr g = {0};
        for (size_t i = 0; i < c.n_rules; i++) {
            gstr_add(&g, c.rules[i].name);
            gstr_add(&g, " ::= ");
            gstr_add(&g, c.rules[i].body);
            gstr_addc(&g, '\n');
        }
        if (!(*out = gstr_take(&g))) st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
        if (st == CERA_OK && top && !(*top = gstr_dup(top_rule))) {
            free(*out);
            *out = NULL;
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
        }
    }
    for (size_t i = 0; i < c.n_kept; i++) free(c.kept[i]);
    free(c.kept);
    free(c.rules);
    free(c.refs);
    free(c.resolving);
    free((void *)c.floats);
    gstr_free(&c.errors);
    cJSON_Delete(schema);
    return st;
}

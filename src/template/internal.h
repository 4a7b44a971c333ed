/*
 * internal.h — what the template engine's files share: the arena, values, the syntax
 * tree and the render state.
 *
 * Everything a render creates lives in one arena freed at its end, so values need no
 * reference counts: strings are (pointer, length) views, lists and dicts are arena
 * arrays. The compiled template keeps its own arena for the tree and its constants.
 * Functions that can fail return false after recording the error in the render state.
 */
#ifndef CERA_TEMPLATE_INTERNAL_H
#define CERA_TEMPLATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "template/template.h"

/* ---- Arena ---------------------------------------------------------------- */

typedef struct tarena_chunk tarena_chunk;
typedef struct tarena {
    tarena_chunk *head;
    size_t used, limit; /* bytes handed out so far; 0 limit = unbounded */
    bool failed;        /* an allocation was refused (limit or malloc) */
} tarena;

void *tarena_alloc(tarena *a, size_t n); /* zeroed; NULL on failure */
void tarena_free(tarena *a);
char *tarena_strndup(tarena *a, const char *s, size_t n);

/* ---- Values --------------------------------------------------------------- */

typedef enum tkind {
    TV_UNDEF,
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST, /* lists and tuples (is_tuple) */
    TV_DICT, /* dicts and namespaces (is_ns) */
    TV_FUNC, /* macros, builtins, bound methods */
    TV_LOOP, /* a for loop's `loop` */
} tkind;

typedef struct tlist tlist;
typedef struct tdict tdict;
typedef struct tfunc tfunc;
typedef struct tloop tloop;

typedef struct tval {
    tkind k;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s; /* TV_STR; TV_UNDEF: the missing name (p may be NULL) */
        tlist *l;
        tdict *d;
        tfunc *fn;
        tloop *loop;
    };
    int flags; /* TV_UNDEF: TVF_UNSAFE (a refused attribute: using it is a SecurityError) */
} tval;

#define TVF_UNSAFE 1

struct tlist {
    size_t n, cap;
    tval *v;
    bool is_tuple;
    bool is_gen;   /* the generator map/select/... give: iterable, but no len, index or JSON */
    bool is_group; /* groupby's (grouper, list) tuples, which have those two attributes */
};
struct tdict {
    size_t n, cap;
    tval *keys, *vals;
    bool is_ns;
};

typedef struct trender trender;
typedef struct tnode tnode;
typedef struct tframe tframe;

/* A builtin's arguments: positional then keyword (names[i] for kw[i]). */
typedef struct targs {
    const tval *pos;
    size_t npos;
    const tval *kw;
    const char *const *kwnames;
    size_t nkw;
} targs;

typedef bool (*tbuiltin)(trender *r, const tval *self, const targs *a, tval *out);

typedef enum tfunc_kind { TF_BUILTIN, TF_MACRO, TF_CALLER } tfunc_kind;
struct tfunc {
    tfunc_kind kind;
    const char *name;
    tbuiltin fn;      /* TF_BUILTIN */
    tval self;        /* a bound method's receiver */
    const tnode *def; /* TF_MACRO / TF_CALLER: the macro or call block */
    tframe *closure;  /* the frame the macro was defined in */
    tval caller;      /* TF_MACRO called from a call block: its `caller` */
};

struct tloop {
    const tlist *items;
    size_t index0;
    int depth0;
    const tnode *for_node; /* for recursive loop(...) */
    tframe *frame;
};

/* int(f) clamped to the 64-bit range (NaN: 0), without the undefined behaviour of a cast */
static inline int64_t tv_float_to_int(double f) {
    if (f != f) return 0;
    if (f >= 9223372036854775807.0) return INT64_MAX;
    if (f <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)f;
}
static inline tval tv_none(void) { return (tval){.k = TV_NONE}; }
static inline tval tv_bool(bool b) { return (tval){.k = TV_BOOL, .b = b}; }
static inline tval tv_int(int64_t i) { return (tval){.k = TV_INT, .i = i}; }
static inline tval tv_float(double f) { return (tval){.k = TV_FLOAT, .f = f}; }
static inline tval tv_str(const char *p, size_t n) {
    tval v = {.k = TV_STR};
    v.s.p = p;
    v.s.n = n;
    return v;
}
static inline tval tv_cstr(const char *p) { return tv_str(p, __builtin_strlen(p)); }

/* ---- Growable byte buffer (malloc'd; rendered output and temporary text) ---- */

typedef struct tbuf {
    char *p;
    size_t n, cap;
    size_t limit; /* 0 = unbounded */
    bool failed;  /* out of memory or over the limit */
} tbuf;

bool tbuf_put(tbuf *b, const char *s, size_t n);
bool tbuf_putc(tbuf *b, char c);
bool tbuf_printf(tbuf *b, const char *fmt, ...) CERA_PRINTF(2, 3);
void tbuf_free(tbuf *b);

/* ---- Value operations (value.c, json.c) ------------------------------------ */

tlist *tlist_new(tarena *a, size_t cap);
bool tlist_push(tarena *a, tlist *l, tval v);
tdict *tdict_new(tarena *a, size_t cap);
bool tdict_set(tarena *a, tdict *d, tval key, tval val);
const tval *tdict_get(const tdict *d, tval key);
const tval *tdict_gets(const tdict *d, const char *key, size_t n);

bool tv_truthy(const tval *v);
/* Python's hashability: lists and dicts are not (tuples when all their items are). */
bool tv_hashable(const tval *v);
bool tv_equal(const tval *a, const tval *b);
/* Python's <: false with *ok = false where the kinds cannot be ordered. */
int tv_compare(const tval *a, const tval *b, bool *ok);
const char *tv_type_name(const tval *v);
/* Python's str() and repr() appended to b. */
bool tv_write_str(tbuf *b, const tval *v);
bool tv_write_repr(tbuf *b, const tval *v);
void tv_format_float(char *out, size_t cap, double f);
/* json.dumps(v, ensure_ascii, indent=indent (<0: none), sort_keys); false (with
 * *bad set to the offending value's type) for values JSON cannot hold. */
bool tv_write_json(tbuf *b, const tval *v, int indent, bool sort_keys, bool ensure_ascii,
                   const char *item_sep, const char *key_sep, const char **bad);
bool tv_from_cjson(tarena *a, const cJSON *j, tval *out);

/* UTF-8 helpers: number of code points; byte offset of code point k. */
size_t utf8_len(const char *s, size_t n);
size_t utf8_offset(const char *s, size_t n, size_t k);

/* ---- Syntax tree (parser.c) ------------------------------------------------- */

typedef enum tnode_kind {
    /* expressions */
    N_CONST,
    N_NAME,
    N_LIST,
    N_TUPLE,
    N_DICT,
    N_GETATTR,
    N_GETITEM,
    N_SLICE,
    N_CALL,
    N_FILTER,
    N_TEST,
    N_NEG,
    N_POS,
    N_NOT,
    N_BINOP,
    N_AND,
    N_OR,
    N_COMPARE,
    N_COND,
    N_CONCAT,
    /* statements */
    N_TEXT,
    N_OUTPUT,
    N_IF,
    N_FOR,
    N_SET,
    N_SETBLOCK,
    N_MACRO,
    N_CALLBLOCK,
    N_FILTERBLOCK,
    N_BREAK,
    N_CONTINUE,
    N_WITH,
} tnode_kind;

/* N_MACRO / N_CALLBLOCK op bits: the body reads varargs / kwargs */
#define TMACRO_VARARGS 1
#define TMACRO_KWARGS  2

typedef enum tbinop { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW } tbinop;
typedef enum tcmpop { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN } tcmpop;

/* One node shape for all kinds; which fields mean what is listed per kind in parser.c. */
struct tnode {
    tnode_kind kind;
    int line, col;
    tnode *a, *b, *c, *d;
    tnode **list; /* items, positional args, body */
    size_t n;
    tnode **list2; /* dict values, keyword args, else body, parameter defaults */
    size_t n2;
    const char **names; /* keyword arg names, macro parameters */
    int *ops;           /* N_COMPARE: one tcmpop per operand */
    const char *str;    /* names, attributes, filter and test names, text */
    size_t slen;
    tval val;  /* N_CONST */
    int op;    /* N_BINOP: tbinop; N_MACRO, N_CALLBLOCK: TMACRO_* bits */
    bool flag; /* N_TEST: negated; N_FOR: recursive; N_TUPLE/N_LIST target */
};

struct cera_template {
    tarena arena;
    tnode **body;
    size_t n;
};

/* Lexes and parses text into t (its arena holds the tree). */
cera_status tparse(cera_template *t, const char *text, size_t len, cera_error *err);

/* ---- Rendering (render.c, eval.c) ------------------------------------------ */

/* Variables of one scope: the template, a for loop, a macro call. */
struct tframe {
    tframe *parent;
    tdict *vars;
    bool captured; /* a macro or caller closes over it: it cannot be reused */
};

struct trender {
    tarena arena;
    tbuf *out;
    cera_error *err;
    bool failed;
    int depth, max_depth;
    int eval_depth; /* nested teval calls */
    int body_depth; /* nested trender_body calls */
    uint64_t steps, max_steps;
    size_t max_output;
    time_t now;
    tframe *globals;
    int loop_ctl; /* 1 break, 2 continue pending */
    int line;     /* the template line being rendered, for error messages */
};

/* Fails the render: "line L: <message>" (L: the template line being rendered). */
bool tfail(trender *r, const char *fmt, ...) CERA_PRINTF(2, 3);
/* Fails with exactly msg (raise_exception's message). */
bool tfail_exact(trender *r, const char *msg);
/* An undefined value whose message is formatted now (Jinja2's hint for later errors). */
tval tundef(trender *r, const char *fmt, ...) CERA_PRINTF(2, 3);
/* Fails with an undefined value's message (UndefinedError, or SecurityError when unsafe). */
bool tfail_undef(trender *r, const tval *u);
bool tfail_oom(trender *r);
bool tstep(trender *r);
/* Counts n units of work (a list element compared, or 8 bytes scanned) against the step
 * limit, as n / 8 steps, for operations whose cost grows with their operands (`in`, ==,
 * unique, find, len...). */
bool tcharge(trender *r, uint64_t n);

bool teval(trender *r, tframe *f, const tnode *n, tval *out);
/* a OP b with Python's rules (op: tbinop) */
bool tarith(trender *r, int op, const tval *a, const tval *b, tval *out);
bool trender_body(trender *r, tframe *f, tnode *const *body, size_t n);
/* Calls any callable value (macro, builtin, bound method, loop). */
bool tcall(trender *r, const tval *callee, const targs *a, tval *out);
bool tframe_lookup(tframe *f, const char *name, size_t n, tval *out);
bool tframe_set(trender *r, tframe *f, const char *name, size_t n, tval v);

/* Attribute (x.name) and item (x[key]) access with Jinja2's sandboxed lookup order. */
bool tget_attr(trender *r, const tval *obj, const char *name, size_t n, tval *out);
bool tget_item(trender *r, const tval *obj, const tval *key, tval *out);

/* filters.c / tests.c / methods.c */
bool tfilter_apply(trender *r, const char *name, const tval *v, const targs *a, tval *out);
bool tfilter_exists(const char *name);
bool ttest_apply(trender *r, const char *name, const tval *v, const targs *a, bool *out);
bool ttest_exists(const char *name);
/* A method of a str, list or dict value as a bound callable; false when none. */
bool tmethod_lookup(trender *r, const tval *obj, const char *name, size_t n, tval *out);
/* Whether name is a method ImmutableSandboxedEnvironment refuses on obj. */
bool tmethod_is_mutating(const tval *obj, const char *name, size_t n);

/* Helpers shared by the builtins. */
bool tv_to_str(trender *r, const tval *v, tval *out);         /* str(v) as a value */
bool tv_iterate(trender *r, const tval *v, tlist **out);      /* list(v) for iterable v */
const tval *targ(const targs *a, size_t pos, const char *kw); /* positional or keyword */
bool tcheck_str(trender *r, const tval *v, const char *what);

#endif

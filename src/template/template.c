/*
 * template.c — the engine's API (compile, render) and the globals transformers gives a
 * chat template: range, namespace, dict, raise_exception(msg) and strftime_now(fmt) (its
 * clock injected by the caller), plus the render's variables built from JSON.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "template/internal.h"

cera_status cera_template_compile(const char *text, size_t len, cera_template **out, cera_error *err) {
    *out = NULL;
    cera_template *t = calloc(1, sizeof *t);
    if (!t) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    t->arena.limit = (size_t)64 << 20;
    cera_status st = tparse(t, text ? text : "", text ? len : 0, err);
    if (st != CERA_OK) {
        cera_template_free(t);
        return st;
    }
    *out = t;
    return CERA_OK;
}

void cera_template_free(cera_template *t) {
    if (!t) return;
    tarena_free(&t->arena);
    free(t);
}

/* ---- globals --------------------------------------------------------------------- */

static bool g_raise_exception(trender *r, const tval *self, const targs *a, tval *out) {
    (void)self;
    (void)out;
    const tval *msg = targ(a, 0, "message");
    tbuf b = {0};
    if (msg) tv_write_str(&b, msg);
    tfail_exact(r, b.p ? b.p : "");
    tbuf_free(&b);
    return false;
}

static bool g_strftime_now(trender *r, const tval *self, const targs *a, tval *out) {
    (void)self;
    const tval *fmt = targ(a, 0, "format");
    if (!fmt || !tcheck_str(r, fmt, "strftime_now"))
        return fmt ? false : tfail(r, "TypeError: strftime_now needs a format");
    char f[256], buf[512];
    if (fmt->s.n >= sizeof f) return tfail(r, "ValueError: strftime_now format too long");
    memcpy(f, fmt->s.p, fmt->s.n);
    f[fmt->s.n] = 0;
    struct tm tm;
    time_t now = r->now;
    gmtime_r(&now, &tm);
    /* strftime's names are the C locale's here: the library never calls setlocale */
    size_t n = fmt->s.n ? strftime(buf, sizeof buf, f, &tm) : 0;
    char *p = tarena_strndup(&r->arena, buf, n);
    if (!p) return tfail_oom(r);
    *out = tv_str(p, n);
    return true;
}

static bool int_arg(trender *r, const tval *v, int64_t *out) {
    *out = 0;
    if (v->k == TV_INT)
        *out = v->i;
    else if (v->k == TV_BOOL)
        *out = v->b;
    else
        return tfail(r, "TypeError: '%s' object cannot be interpreted as an integer", tv_type_name(v));
    return true;
}

/* range(stop) / range(start, stop[, step]); the sandbox caps it (MAX_RANGE in Jinja2) */
static bool g_range(trender *r, const tval *self, const targs *a, tval *out) {
    (void)self;
    int64_t start = 0, stop = 0, step = 1;
    if (a->npos < 1 || a->npos > 3) return tfail(r, "TypeError: range expected 1 to 3 arguments");
    if (a->npos == 1) {
        if (!int_arg(r, &a->pos[0], &stop)) return false;
    } else if (!int_arg(r, &a->pos[0], &start) || !int_arg(r, &a->pos[1], &stop) ||
               (a->npos == 3 && !int_arg(r, &a->pos[2], &step))) {
        return false;
    }
    if (step == 0) return tfail(r, "ValueError: range() arg 3 must not be zero");
    __int128 count =
        step > 0 ? ((__int128)stop - start + step - 1) / step : ((__int128)start - stop - step - 1) / -step;
    if (count < 0) count = 0;
    if (count > 100000)
        return tfail(
            r, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    tlist *l = tlist_new(&r->arena, (size_t)count);
    if (!l) return tfail_oom(r);
    for (int64_t i = 0; i < (int64_t)count; i++) l->v[l->n++] = tv_int(start + i * step);
    *out = (tval){.k = TV_LIST, .l = l};
    return true;
}

static bool make_dict(trender *r, const targs *a, bool ns, tval *out) {
    tdict *d = tdict_new(&r->arena, a->nkw);
    if (!d) return tfail_oom(r);
    d->is_ns = ns;
    if (a->npos > 1) return tfail(r, "TypeError: expected at most 1 positional argument");
    if (a->npos == 1) {
        const tval *src = &a->pos[0];
        if (src->k != TV_DICT) return tfail(r, "TypeError: expected a mapping, not %s", tv_type_name(src));
        for (size_t i = 0; i < src->d->n; i++)
            if (!tdict_set(&r->arena, d, src->d->keys[i], src->d->vals[i])) return tfail_oom(r);
    }
    for (size_t i = 0; i < a->nkw; i++)
        if (!tdict_set(&r->arena, d, tv_cstr(a->kwnames[i]), a->kw[i])) return tfail_oom(r);
    *out = (tval){.k = TV_DICT, .d = d};
    return true;
}

static bool g_namespace(trender *r, const tval *self, const targs *a, tval *out) {
    (void)self;
    return make_dict(r, a, true, out);
}

static bool g_dict(trender *r, const tval *self, const targs *a, tval *out) {
    (void)self;
    return make_dict(r, a, false, out);
}

static bool add_builtin(trender *r, const char *name, tbuiltin fn) {
    tfunc *f = tarena_alloc(&r->arena, sizeof *f);
    if (!f) return tfail_oom(r);
    *f = (tfunc){.kind = TF_BUILTIN, .name = name, .fn = fn};
    return tframe_set(r, r->globals, name, strlen(name), (tval){.k = TV_FUNC, .fn = f});
}

static bool set_json(trender *r, const char *name, const cJSON *j, bool none_if_null) {
    tval v = tv_none();
    if (j && !tv_from_cjson(&r->arena, j, &v))
        return tfail(r, "template render: the %s input is too deep or too big", name);
    if (!j && !none_if_null) return true;
    return tframe_set(r, r->globals, name, strlen(name), v);
}

static bool set_globals(trender *r, const cera_template_inputs *in) {
    if (!add_builtin(r, "raise_exception", g_raise_exception) ||
        !add_builtin(r, "strftime_now", g_strftime_now) || !add_builtin(r, "range", g_range) ||
        !add_builtin(r, "namespace", g_namespace) || !add_builtin(r, "dict", g_dict))
        return false;
    if (in->extra && cJSON_IsObject(in->extra))
        for (const cJSON *c = in->extra->child; c; c = c->next) {
            if (!c->string) continue;
            char *k = tarena_strndup(&r->arena, c->string, strlen(c->string));
            if (!k || !set_json(r, k, c, true)) return r->failed ? false : tfail_oom(r);
        }
    if (!set_json(r, "messages", in->messages, true) || !set_json(r, "tools", in->tools, true) ||
        !tframe_set(r, r->globals, "documents", 9, tv_none()) ||
        !tframe_set(r, r->globals, "add_generation_prompt", 21, tv_bool(in->add_generation_prompt)))
        return false;
    if (in->bos_token && !tframe_set(r, r->globals, "bos_token", 9, tv_cstr(in->bos_token))) return false;
    if (in->eos_token && !tframe_set(r, r->globals, "eos_token", 9, tv_cstr(in->eos_token))) return false;
    return true;
}

cera_status cera_template_render(const cera_template *t, const cera_template_inputs *in, char **out,
                                 size_t *out_len, cera_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    const cera_template_limits *lim = &in->limits;
    tbuf buf = {.limit = lim->max_output ? lim->max_output : (size_t)16 << 20};
    trender r = {
        .arena = {.limit = lim->max_memory ? lim->max_memory : (size_t)256 << 20},
        .out = &buf,
        .err = err,
        .max_depth = lim->max_depth ? lim->max_depth : 64,
        .max_steps = lim->max_steps ? lim->max_steps : 10000000,
        .max_output = buf.limit,
        .now = in->now,
    };
    if (err) cera_error_clear(err);
    tframe *g = tarena_alloc(&r.arena, sizeof *g);
    if (g) g->vars = tdict_new(&r.arena, 16);
    if (!g || !g->vars) tfail_oom(&r);
    r.globals = g;
    /* the template's own variables live in a frame below the globals */
    tframe *top = NULL;
    if (!r.failed && set_globals(&r, in)) {
        top = tarena_alloc(&r.arena, sizeof *top);
        if (top && (top->vars = tdict_new(&r.arena, 16)))
            top->parent = g;
        else
            tfail_oom(&r);
    }
    if (!r.failed) trender_body(&r, top, t->body, t->n);
    if (!r.failed && buf.failed)
        tfail(&r, "template render: output over the limit of %zu bytes", r.max_output);
    if (!r.failed && r.arena.failed) tfail_oom(&r);
    bool ok = !r.failed;
    tarena_free(&r.arena);
    if (!ok) {
        tbuf_free(&buf);
        return err ? err->status : CERA_ERR_FORMAT;
    }
    if (!buf.p && !tbuf_put(&buf, "", 0)) return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory");
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return CERA_OK;
}

cera_status cera_template_render_case(const cera_template *t, const cJSON *c, time_t now, char **out,
                                      size_t *out_len, cera_error *err) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages");
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(c, "tools");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(c, "extra");
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(c, "bos_token");
    const cJSON *eos = cJSON_GetObjectItemCaseSensitive(c, "eos_token");
    cera_template_inputs in = {
        .messages = msgs,
        .tools = cJSON_IsNull(tools) ? NULL : tools,
        .extra = cJSON_IsObject(extra) ? extra : NULL,
        .bos_token = cJSON_IsString(bos) ? bos->valuestring : NULL,
        .eos_token = cJSON_IsString(eos) ? eos->valuestring : NULL,
        .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
        .now = now,
    };
    return cera_template_render(t, &in, out, out_len, err);
}

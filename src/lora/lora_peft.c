/*
 * lora_peft.c — loading a Hugging Face PEFT LoRA folder: adapter_config.json
 * (r, lora_alpha, target_modules, use_rslora) and adapter_model.safetensors with
 * tensors base_model.model.model.layers.N.{self_attn.{q,k,v,o}_proj,
 * mlp.{gate,up,down}_proj}.lora_{A,B}.weight in F32, F16 or BF16.
 *
 * Hugging Face stores q/k rows in the order its rotary code expects; llama.cpp's
 * converter permutes the q/k weights of architectures with "normal" (interleaved-pair)
 * rope, llama and granite, so the GGUF base rows are in another order. An adapter's
 * B rows index the same outputs, so they are permuted the same way here (the A factor
 * indexes inputs and stays). After this a PEFT folder and the GGUF its converter would
 * write hold the same numbers.
 *
 * Configurations cera cannot honour exactly (fan_in_fan_out, per-module rank or alpha
 * patterns, DoRA) are refused with a message rather than applied wrongly.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fp16.h"
#include "lora/lora.h"
#include "lora/safetensors.h"

typedef struct peft_config {
    int r;       /* 0 when absent */
    float alpha; /* 0 when absent: the user scale alone, as llama.cpp without an alpha */
    bool rslora;
    bool any_target; /* target_modules is a string (a regex or "all-linear"): not checked by name */
    bool target[CERA_PROJ_COUNT];
} peft_config;

static cera_status parse_config(cera_arch arch, const char *json, size_t len, const char *source,
                                peft_config *c, cera_error *err) {
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return cera_fail(err, CERA_ERR_FORMAT, "%s: adapter_config.json is not valid JSON", source);
    cera_status st = CERA_OK;
    const cJSON *v;
    if (!cJSON_IsObject(root)) {
        st = cera_fail(err, CERA_ERR_FORMAT, "%s: adapter_config.json is not a JSON object", source);
        goto done;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    if (v && !(cJSON_IsString(v) && v->valuestring && !strcmp(v->valuestring, "LORA"))) {
        st = cera_fail(err, CERA_ERR_UNSUPPORTED, "%s: peft_type is not \"LORA\"", source);
        goto done;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "r");
    if (v) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 1 && v->valuedouble <= CERA_LORA_MAX_RANK) ||
            floor(v->valuedouble) != v->valuedouble) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: \"r\" is not a rank in 1..%d", source,
                           CERA_LORA_MAX_RANK);
            goto done;
        }
        c->r = (int)v->valuedouble;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > 1e30) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: \"lora_alpha\" is not a number", source);
            goto done;
        }
        c->alpha = (float)v->valuedouble;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "use_rslora");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v)) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: \"use_rslora\" is not a boolean", source);
            goto done;
        }
        c->rslora = cJSON_IsTrue(v);
    }
    static const char *const refused_true[] = {"fan_in_fan_out", "use_dora"};
    for (size_t i = 0; i < sizeof refused_true / sizeof *refused_true; i++) {
        v = cJSON_GetObjectItemCaseSensitive(root, refused_true[i]);
        if (cJSON_IsTrue(v)) {
            st = cera_fail(err, CERA_ERR_UNSUPPORTED, "%s: \"%s\": true is not supported", source,
                           refused_true[i]);
            goto done;
        }
    }
    static const char *const refused_pattern[] = {"rank_pattern", "alpha_pattern"};
    for (size_t i = 0; i < sizeof refused_pattern / sizeof *refused_pattern; i++) {
        v = cJSON_GetObjectItemCaseSensitive(root, refused_pattern[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsObject(v) && !v->child)) {
            st = cera_fail(err, CERA_ERR_UNSUPPORTED, "%s: a non-empty \"%s\" is not supported", source,
                           refused_pattern[i]);
            goto done;
        }
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "target_modules");
    if (!v || cJSON_IsNull(v) || cJSON_IsString(v)) {
        c->any_target = true;
    } else if (cJSON_IsArray(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!cJSON_IsString(e) || !e->valuestring) {
                st = cera_fail(err, CERA_ERR_FORMAT, "%s: target_modules holds a non-string", source);
                goto done;
            }
            int found = -1;
            for (int p = 0; p < CERA_PROJ_COUNT; p++)
                if (!strcmp(e->valuestring, cera_lora_proj_hf_name(arch, (cera_proj)p)))
                    c->target[p] = true, found = p;
            if (found < 0) {
                st = cera_fail(
                    err, CERA_ERR_UNSUPPORTED,
                    "%s: target module '%.64s' is not a projection cera adapts in %s (%s, %s, %s, %s, %s, "
                    "%s, %s)",
                    source, e->valuestring, cera_arch_name(arch), cera_lora_proj_hf_name(arch, CERA_PROJ_Q),
                    cera_lora_proj_hf_name(arch, CERA_PROJ_K), cera_lora_proj_hf_name(arch, CERA_PROJ_V),
                    cera_lora_proj_hf_name(arch, CERA_PROJ_O), cera_lora_proj_hf_name(arch, CERA_PROJ_GATE),
                    cera_lora_proj_hf_name(arch, CERA_PROJ_UP), cera_lora_proj_hf_name(arch, CERA_PROJ_DOWN));
                goto done;
            }
            c->target[found] = true;
        }
    } else {
        st = cera_fail(err, CERA_ERR_FORMAT, "%s: target_modules is neither a list nor a string", source);
    }
done:
    cJSON_Delete(root);
    return st;
}

/* Parses "base_model.model.model.layers.N.<self_attn|mlp|conv>.<proj>.lora_<A|B>.weight". On
 * failure *module names what was found (for the message). */
static bool parse_peft_name(cera_arch arch, const char *name, int *layer, cera_proj *p, bool *is_a) {
    static const char prefix[] = "base_model.model.model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1)) return false;
    const char *s = name + sizeof prefix - 1;
    long n = 0;
    int digits = 0;
    while (*s >= '0' && *s <= '9' && digits < 6) n = n * 10 + (*s++ - '0'), digits++;
    if (!digits || *s++ != '.') return false;
    for (int i = 0; i < CERA_PROJ_COUNT; i++) {
        const char *parent = cera_lora_proj_hf_parent(arch, (cera_proj)i),
                   *mod = cera_lora_proj_hf_name(arch, (cera_proj)i);
        const size_t lp = strlen(parent), lm = strlen(mod);
        if (strncmp(s, parent, lp) || strncmp(s + lp, mod, lm)) continue;
        const char *rest = s + lp + lm;
        if (strcmp(rest, ".lora_A.weight") && strcmp(rest, ".lora_B.weight")) return false;
        *layer = (int)n;
        *p = (cera_proj)i;
        *is_a = rest[6] == 'A';
        return true;
    }
    return false;
}

static void st_to_f32(const safetensors_tensor *t, float *dst, size_t n) {
    const uint8_t *src = t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == SAFETENSORS_F32) {
            memcpy(&dst[i], src + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = t->dtype == SAFETENSORS_F16 ? cera_f16_to_f32(h) : cera_bf16_to_f32(h);
        }
    }
}

cera_status cera_lora_load_peft(const cera_model *m, const char *config_json, size_t config_len,
                                const safetensors_file *sf, const char *source, cera_adapter **out,
                                cera_error *err) {
    *out = NULL;
    if (m->hp.arch == CERA_ARCH_PHI3) /* its modules qkv_proj and gate_up_proj are fused */
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "%s: PEFT adapters for phi3 (fused qkv_proj / gate_up_proj) are not supported; "
                         "convert it to a GGUF adapter (llama.cpp's convert_lora_to_gguf.py)",
                         source);
    peft_config cfg;
    cera_status st = parse_config(m->hp.arch, config_json, config_len, source, &cfg, err);
    if (st) return st;

    /* Pass 1: names, dtypes, shapes, pairing; count the floats. */
    const safetensors_tensor **as = calloc(sf->n_tensors ? sf->n_tensors : 1, sizeof *as);
    const safetensors_tensor **bs = calloc(sf->n_tensors ? sf->n_tensors : 1, sizeof *bs);
    if (!as || !bs) {
        free(as);
        free(bs);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", source);
    }
    bool seen[CERA_PROJ_COUNT] = {0};
    size_t n_pairs = 0, n_floats = 0, max_qk = 0;
    char twin[320];
    for (size_t i = 0; i < sf->n_tensors && !st; i++) {
        const safetensors_tensor *t = &sf->tensors[i];
        int layer;
        cera_proj p;
        bool is_a;
        if (!parse_peft_name(m->hp.arch, t->name, &layer, &p, &is_a)) {
            st = cera_fail(
                err, CERA_ERR_UNSUPPORTED,
                "%s: tensor '%.200s' is not a lora_A/lora_B of one of the seven projections cera adapts",
                source, t->name);
            break;
        }
        if (!cfg.any_target && !cfg.target[p]) {
            st = cera_fail(err, CERA_ERR_FORMAT,
                           "%s: tensor '%s' targets '%s', which target_modules does not list", source,
                           t->name, cera_lora_proj_hf_name(m->hp.arch, p));
            break;
        }
        seen[p] = true;
        if (t->dtype != SAFETENSORS_F32 && t->dtype != SAFETENSORS_F16 && t->dtype != SAFETENSORS_BF16) {
            st = cera_fail(err, CERA_ERR_UNSUPPORTED,
                           "%s: tensor '%s' has dtype %s (F32, F16 or BF16 expected)", source, t->name,
                           safetensors_dtype_name(t->dtype));
            break;
        }
        if (t->n_dims != 2) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: tensor '%s' has %d dimensions (2 expected)", source,
                           t->name, t->n_dims);
            break;
        }
        const size_t n = strlen(t->name);
        if (n >= sizeof twin) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: tensor name '%.64s...' is too long", source, t->name);
            break;
        }
        memcpy(twin, t->name, n + 1);
        twin[n - 8] = is_a ? 'B' : 'A'; /* "...lora_A.weight": the letter is 8 from the end */
        const safetensors_tensor *o = safetensors_find(sf, twin);
        if (!o) {
            st = cera_fail(err, CERA_ERR_NOT_FOUND, "%s: '%s' has no matching lora_%c", source, t->name,
                           is_a ? 'B' : 'A');
            break;
        }
        if (!is_a) continue;
        /* A [rank, k], B [d, rank]. */
        const int64_t r = t->shape[0], k = t->shape[1], d = o->shape[0], r2 = o->shape[1];
        if (o->n_dims != 2 || r != r2) {
            st = cera_fail(err, CERA_ERR_FORMAT,
                           "%s: '%s' has rank %lld but its lora_B has shape [%lld, %lld]", source, t->name,
                           (long long)r, (long long)d, (long long)r2);
            break;
        }
        if (cfg.r && r != cfg.r) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: '%s' has rank %lld but adapter_config.json says r = %d",
                           source, t->name, (long long)r, cfg.r);
            break;
        }
        if (r < 1 || r > CERA_LORA_MAX_RANK || k > (1 << 24) || d > (1 << 24)) {
            st =
                cera_fail(err, CERA_ERR_UNSUPPORTED, "%s: '%s' has shape [%lld, %lld] (rank 1..%d supported)",
                          source, t->name, (long long)r, (long long)k, CERA_LORA_MAX_RANK);
            break;
        }
        as[n_pairs] = t;
        bs[n_pairs] = o;
        n_pairs++;
        n_floats += (size_t)(r * (k + d));
        if ((p == CERA_PROJ_Q || p == CERA_PROJ_K) && (size_t)(r * d) > max_qk) max_qk = (size_t)(r * d);
    }
    if (!st && !n_pairs) st = cera_fail(err, CERA_ERR_NOT_FOUND, "%s: no LoRA tensors", source);
    for (int p = 0; p < CERA_PROJ_COUNT && !st; p++)
        if (cfg.target[p] && !seen[p])
            st = cera_fail(err, CERA_ERR_NOT_FOUND, "%s: target module '%s' is listed but has no tensors",
                           source, cera_lora_proj_hf_name(m->hp.arch, (cera_proj)p));

    cera_adapter *a = NULL;
    float *tmp = NULL;
    if (!st) st = cera_lora_alloc(m, n_floats, source, &a, err);
    const bool permute = m->hp.rope_style == CERA_ROPE_NORM;
    for (size_t i = 0; i < n_pairs && !st; i++) {
        int layer;
        cera_proj p;
        bool is_a;
        parse_peft_name(m->hp.arch, as[i]->name, &layer, &p, &is_a);
        const int rank = (int)as[i]->shape[0];
        const int64_t k = as[i]->shape[1], d = bs[i]->shape[0];
        float *pa, *pb;
        st = cera_lora_add_pair(a, m, layer, p, rank, k, d, &pa, &pb, as[i]->name, err);
        if (st) break;
        st_to_f32(as[i], pa, (size_t)(rank * k));
        st_to_f32(bs[i], pb, (size_t)(rank * d));
        if (permute && (p == CERA_PROJ_Q || p == CERA_PROJ_K)) {
            const int n_head = p == CERA_PROJ_Q ? m->hp.n_head : m->layers[layer].n_head_kv;
            if (n_head <= 0 || d % (2 * n_head)) {
                st = cera_fail(err, CERA_ERR_INVALID_ARG, "%s: '%s': %lld rows do not split into %d heads",
                               source, bs[i]->name, (long long)d, n_head);
                break;
            }
            if (!tmp) tmp = malloc(max_qk * sizeof *tmp);
            if (!tmp) {
                st = cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", source);
                break;
            }
            cera_lora_permute_rows(pb, d, rank, n_head, tmp);
        }
    }
    free(tmp);
    free(as);
    free(bs);
    if (st) {
        cera_lora_release(a);
        return st;
    }
    /* rsLoRA scales by alpha/√r instead of alpha/r: fold √r into alpha so the one scale
     * formula (alpha / rank) holds for every pair. */
    a->alpha = cfg.rslora ? cfg.alpha * sqrtf((float)(cfg.r ? cfg.r : a->max_rank)) : cfg.alpha;
    *out = a;
    return CERA_OK;
}

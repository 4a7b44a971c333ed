/* graph.c — the op list's storage (see graph.h). */
#include "model/graph.h"

#include <stdlib.h>

#include "core/error.h"

static const char *const op_names[] = {
    [CERA_OP_EMBED] = "embed",     [CERA_OP_NORM] = "norm",           [CERA_OP_LINEAR] = "linear",
    [CERA_OP_ROPE_KV] = "rope_kv", [CERA_OP_ATTEND] = "attend",       [CERA_OP_ADD] = "add",
    [CERA_OP_GLU] = "glu",         [CERA_OP_SHORTCONV] = "shortconv", [CERA_OP_OUTPUT] = "output",
    [CERA_OP_MOE] = "moe",
};

const char *cera_op_name(cera_op_kind k) {
    return (unsigned)k < sizeof op_names / sizeof op_names[0] ? op_names[k] : "?";
}

void cera_graph_need(cera_graph *g, cera_buf b, int64_t w) {
    if ((unsigned)b < CERA_BUF_COUNT && w > g->width[b]) g->width[b] = w;
}

cera_status cera_graph_push(cera_graph *g, const cera_op *op, cera_error *err) {
    if (g->n_ops == g->cap) {
        const int cap = g->cap ? 2 * g->cap : 64;
        cera_op *n = realloc(g->ops, (size_t)cap * sizeof *n);
        if (!n) return cera_fail(err, CERA_ERR_NO_MEMORY, "model graph of %d ops", cap);
        g->ops = n;
        g->cap = cap;
    }
    g->ops[g->n_ops++] = *op;
    for (int i = 0; i < op->n_seg; i++) cera_graph_need(g, op->seg[i].dst, op->seg[i].w->n);
    if (op->kind == CERA_OP_EMBED) cera_graph_need(g, op->dst, op->w->k);
    if (op->kind == CERA_OP_NORM && op->head_dim == 0) cera_graph_need(g, op->dst, op->w->k);
    return CERA_OK;
}

void cera_graph_free(cera_graph *g) {
    if (!g) return;
    free(g->ops);
    free(g);
}

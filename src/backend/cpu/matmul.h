/*
 * matmul.h — the CPU matmul driver: y = x · Wᵀ for a batch of activation rows, over
 * the thread pool, with the per-type kernels of kernels.h.
 *
 * As llama.cpp does, the activation rows are first converted once to the weight
 * type's activation type (Q8_0, Q8_1, Q8_K, F16, BF16 or F32 as is); then the output
 * is cut into tiles of weight rows × tokens spread over the threads, each tile using
 * the register-tile GEMM when the type has one (weights read once per tile), else
 * row·row dot products. A single token (decode) splits the weight rows; it takes the
 * (faster) row dot only where that rounds exactly as the tile (cera_matmul_prepare), so a
 * decode step always equals the same token inside a prompt batch (and llama.cpp, whose x86
 * build runs both through one GEMM for the tinyBLAS types).
 */
#ifndef CERA_BACKEND_CPU_MATMUL_H
#define CERA_BACKEND_CPU_MATMUL_H

#include <stddef.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/threadpool.h"
#include "model/model.h"

/* Bytes of activation scratch a matmul of n_tokens rows of k inputs needs for weight type t. */
size_t cera_matmul_scratch_size(cera_type t, int64_t k, int n_tokens);

/* Checks, once per weight type and process, whether a single token may take the row
 * dot (it must round exactly as the tile does for the same token in a batch); called
 * for every weight when a backend opens. Without it single tokens use the tile. */
cera_status cera_matmul_prepare(const cera_weight *w, cera_error *err);

/* y[t * ldy + o] = dot(W row o, x row t) for t < n_tokens, o < w->n; x is [n_tokens, w->k]
 * (dense). act is scratch of cera_matmul_scratch_size bytes. ops = cera_cpu_ops(w->type). */
void cera_matmul(cera_pool *pool, const cera_weight *w, const cera_cpu_type_ops *ops, const float *x,
                 int n_tokens, float *y, size_t ldy, void *act);

/* Extra work fused into a matmul's own pool job (a LoRA adapter: t = A·x, then
 * y += s·B·t), so it costs no extra wake-up of the pool. The job's first n_pre chunks are
 * pre(arg, i, ith) for i < n_pre; then, after each output tile y[t0..t1) x [o0..o1) is
 * computed, tile(arg, o0, o1, t0, t1, ith) may update exactly those outputs. The pool
 * hands out chunks in order, so every pre chunk is claimed (by a running thread) before
 * any tile; a tile's callback waits until all pre chunks are done (release/acquire), so
 * it sees their results. The job's last n_post chunks, post(arg, i, ith), run once every
 * tile and pre chunk is done (each waits for them: all were claimed before it), for work
 * that wants the whole output at once (long contiguous runs of a factor). Nothing of the
 * hook may depend on which thread runs what. */
typedef struct cera_matmul_hook {
    int64_t n_pre;
    void (*pre)(void *arg, int64_t i, int ith);
    void (*tile)(void *arg, int64_t o0, int64_t o1, int t0, int t1, int ith); /* NULL: none */
    int64_t n_post;
    void (*post)(void *arg, int64_t i, int ith);
    void *arg;
} cera_matmul_hook;

struct cera_packed_weight;

/* cera_matmul over the weight's repacked copy pk (repack.h; NULL: the file layout, and pk
 * is used only where the tier has a packed tile), with a hook (NULL: none). */
void cera_matmul_ex(cera_pool *pool, const cera_weight *w, const struct cera_packed_weight *pk,
                    const cera_cpu_type_ops *ops, const float *x, int n_tokens, float *y, size_t ldy,
                    void *act, const cera_matmul_hook *hook);

#endif

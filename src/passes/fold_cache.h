/* fold_cache.h — constants folded once per model, shared by its sessions.
 *
 * Every session specializes and optimizes its own copy of the model's
 * graph; the copies share the model's constant tensors. fold-constants
 * looks a node up here by what decides its result (op, opset, attributes
 * and the very input tensors) before evaluating it, so a weight's
 * DequantizeLinear or Transpose is computed and held once however many
 * sessions (or input shapes) the model has. The cache holds a reference
 * to each key's input tensors (a freed tensor's address cannot come back
 * as a false hit) and to the results. Thread-safe: sessions of one model
 * may prepare at the same time.
 *
 * Only results of at least KILN_FOLD_CACHE_MIN_BYTES are kept (smaller
 * ones cost less to recompute than to look up), and at most
 * KILN_FOLD_CACHE_MAX_BYTES in all per model; past that, folding still
 * happens per session (docs/ARCHITECTURE.md). */
#ifndef KILN_PASSES_FOLD_CACHE_H
#define KILN_PASSES_FOLD_CACHE_H

#include "ir/graph.h"

#define KILN_FOLD_CACHE_MIN_BYTES ((int64_t)64 << 10)
#define KILN_FOLD_CACHE_MAX_BYTES ((int64_t)4 << 30)

typedef struct kiln_fold_cache kiln_fold_cache;

kiln_status_t kiln_fold_cache_create(kiln_fold_cache **out);
void kiln_fold_cache_free(kiln_fold_cache *c);

/* The results cached for node n over inputs in[0..n_in) (NULL for absent
 * ones): true and outs[0..n_out) set (new references; NULL where the node
 * has no such output) on a hit. */
bool kiln_fold_cache_get(kiln_fold_cache *c, const kiln_node *n, kiln_tensor *const *in, int n_in, kiln_tensor **outs,
                         int n_out);
/* Records node n's results (references taken as needed); does nothing
 * when they are small or the cache is full. */
void kiln_fold_cache_put(kiln_fold_cache *c, const kiln_node *n, kiln_tensor *const *in, int n_in,
                         kiln_tensor *const *outs, int n_out);

/* Hits so far and bytes held (tests, `kiln info`). */
int64_t kiln_fold_cache_hits(const kiln_fold_cache *c);
int64_t kiln_fold_cache_bytes(const kiln_fold_cache *c);

#endif

/* Liveness-based memory planning: see memory_plan.h for the contract.
 *
 * Three stages:
 *  1. In-place chains. A buffer i that names j as in-place source is merged
 *     with j when j dies at the step that produces i. Chains j0 <- j1 <- ...
 *     form one block living from the head's first use to the tail's last use,
 *     as large as its largest member. Each buffer's storage is taken at most
 *     once, and a buffer living one step only (produced and dead at the same
 *     step s) never sits inside a chain: its predecessor (dying at s) and its
 *     successor (produced at s) would both be live at s in the same bytes.
 *     That rule also rules out cycles, which need all members at one step.
 *  2. Placement of blocks, greedy with best fit: for each block (in some
 *     order), the already placed blocks whose lifetimes intersect it are
 *     walked in offset order; the smallest gap between them that holds the
 *     block wins, otherwise it goes above all of them. Orders tried: size
 *     descending (the "greedy by size" rule of Pisarchyk & Lee, 2020), size x
 *     lifetime descending, first use ascending; the smallest arena is kept.
 *  3. Members of a block get the block's offset.
 */
#include "passes/memory_plan.h"

#include <stdio.h>

#include "ops/op.h"
#include "tensor/dtype.h"

/* ---- helpers ------------------------------------------------------------------ */

static bool is_pow2(int64_t a) { return a > 0 && (a & (a - 1)) == 0; }

static int64_t buffer_alignment(const kiln_mem_buffer *b) {
  return b->alignment ? b->alignment : KILN_MEMORY_PLAN_DEFAULT_ALIGNMENT;
}

/* x rounded up to a multiple of a (a power of two); false on overflow. */
static bool align_up(int64_t x, int64_t a, int64_t *out) {
  int64_t y;
  if (__builtin_add_overflow(x, a - 1, &y)) return false;
  *out = y & ~(a - 1);
  return true;
}

static bool lifetimes_intersect(int f1, int l1, int f2, int l2) { return f1 <= l2 && f2 <= l1; }

void kiln_memory_plan_free(kiln_memory_plan *plan) {
  if (!plan) return;
  free(plan->offsets);
  free(plan->inplace_of);
  memset(plan, 0, sizeof *plan);
}

static kiln_status_t check_buffers(const kiln_mem_buffer *b, int n) {
  if (n < 0) return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: negative buffer count %d", n);
  if (n > 0 && !b) return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: NULL buffer list");
  for (int i = 0; i < n; i++) {
    if (b[i].size < 0)
      return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: buffer %d: negative size %lld", i, (long long)b[i].size);
    if (b[i].alignment && !is_pow2(b[i].alignment))
      return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: buffer %d: alignment %lld is not a power of two", i,
                        (long long)b[i].alignment);
    if (b[i].first_use < 0 || b[i].last_use < b[i].first_use)
      return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: buffer %d: lifetime [%d, %d] is not a range of steps >= 0",
                        i, b[i].first_use, b[i].last_use);
    int j = b[i].inplace_source;
    if (j != -1 && (j < 0 || j >= n || j == i))
      return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: buffer %d: in-place source %d is not another buffer of [0, %d)",
                        i, j, n);
  }
  return NULL;
}

/* Max over steps of the bytes live at that step (no in-place). */
typedef struct live_event {
  int64_t step;  /* first_use, or last_use + 1 for a release */
  int64_t delta; /* +size or -size */
} live_event;

static int cmp_event(const void *pa, const void *pb) {
  const live_event *a = pa, *b = pb;
  if (a->step != b->step) return a->step < b->step ? -1 : 1;
  return (a->delta > b->delta) - (a->delta < b->delta); /* releases first */
}

static kiln_status_t peak_live_bytes(const kiln_mem_buffer *b, int n, int64_t *out) {
  *out = 0;
  if (n == 0) return NULL;
  live_event *ev = malloc(sizeof *ev * 2 * (size_t)n);
  if (!ev) return KILN_OOM();
  for (int i = 0; i < n; i++) {
    ev[2 * i] = (live_event){b[i].first_use, b[i].size};
    ev[2 * i + 1] = (live_event){(int64_t)b[i].last_use + 1, -b[i].size};
  }
  qsort(ev, 2 * (size_t)n, sizeof *ev, cmp_event);
  int64_t live = 0, peak = 0;
  bool overflow = false;
  for (int i = 0; i < 2 * n; i++) {
    if (__builtin_add_overflow(live, ev[i].delta, &live)) overflow = true;
    if (live > peak) peak = live;
  }
  free(ev);
  if (overflow) return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: live bytes overflow int64");
  *out = peak;
  return NULL;
}

/* ---- stage 1: in-place chains ----------------------------------------------- */

typedef struct block {
  int64_t size, alignment;
  int first_use, last_use;
  int64_t offset;
} block;

typedef struct planner {
  const kiln_mem_buffer *b;
  int n;
  int *inplace_of; /* per buffer */
  int *taken_by;   /* per buffer: who took its storage, or -1 */
  int *block_of;   /* per buffer */
  block *blocks;
  int n_blocks;
  int *placed;     /* block ids placed so far, sorted by offset */
  int n_placed;
  int *order;
} planner;

static int cmp_by_first_use(const void *pa, const void *pb, void *ctx) {
  const kiln_mem_buffer *b = ctx;
  int x = *(const int *)pa, y = *(const int *)pb;
  if (b[x].first_use != b[y].first_use) return b[x].first_use < b[y].first_use ? -1 : 1;
  return (x > y) - (x < y);
}

/* qsort_r is a GNU/BSD extension with two argument orders; a tiny merge sort
 * with a context keeps this portable and stable. */
typedef int (*cmp_ctx_fn)(const void *, const void *, void *);
static void sort_ints(int *a, int *tmp, int n, cmp_ctx_fn cmp, void *ctx) {
  if (n < 2) return;
  int h = n / 2;
  sort_ints(a, tmp, h, cmp, ctx);
  sort_ints(a + h, tmp, n - h, cmp, ctx);
  int i = 0, j = h, k = 0;
  while (i < h && j < n) tmp[k++] = cmp(&a[j], &a[i], ctx) < 0 ? a[j++] : a[i++];
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, sizeof *a * (size_t)n);
}

static kiln_status_t form_chains(planner *p) {
  const kiln_mem_buffer *b = p->b;
  int n = p->n;
  int *idx = malloc(sizeof *idx * (size_t)n), *tmp = malloc(sizeof *tmp * (size_t)n);
  if (!idx || !tmp) {
    free(idx);
    free(tmp);
    return KILN_OOM();
  }
  for (int i = 0; i < n; i++) {
    idx[i] = i;
    p->inplace_of[i] = p->taken_by[i] = -1;
  }
  /* Earlier producers first, so a chain grows from its head. */
  sort_ints(idx, tmp, n, cmp_by_first_use, (void *)b);
  for (int k = 0; k < n; k++) {
    int i = idx[k], j = b[i].inplace_source;
    if (j < 0 || b[i].size == 0) continue;
    if (b[j].last_use != b[i].first_use || b[i].size > b[j].size || p->taken_by[j] >= 0) continue;
    /* A one-step buffer may not sit inside a chain (see the top of the file). */
    if (p->inplace_of[j] >= 0 && b[j].first_use == b[j].last_use) continue;
    if (p->taken_by[i] >= 0 && b[i].first_use == b[i].last_use) continue;
    p->inplace_of[i] = j;
    p->taken_by[j] = i;
  }
  /* Blocks: one per chain head (a buffer that took nobody's storage). */
  p->n_blocks = 0;
  for (int k = 0; k < n; k++) {
    int i = idx[k];
    if (p->inplace_of[i] >= 0) continue;
    block *bl = &p->blocks[p->n_blocks];
    *bl = (block){b[i].size, buffer_alignment(&b[i]), b[i].first_use, b[i].last_use, 0};
    for (int m = i; m >= 0; m = p->taken_by[m]) {
      p->block_of[m] = p->n_blocks;
      bl->size = KILN_MAX(bl->size, b[m].size);
      bl->alignment = KILN_MAX(bl->alignment, buffer_alignment(&b[m]));
      bl->last_use = KILN_MAX(bl->last_use, b[m].last_use);
    }
    p->n_blocks++;
  }
  free(idx);
  free(tmp);
  return NULL;
}

/* ---- stage 2: placement ------------------------------------------------------- */

enum { ORDER_SIZE, ORDER_AREA, ORDER_FIRST_USE, N_ORDERS };

typedef struct order_ctx {
  const block *blocks;
  int kind;
} order_ctx;

static int cmp_blocks(const void *pa, const void *pb, void *vctx) {
  const order_ctx *c = vctx;
  int x = *(const int *)pa, y = *(const int *)pb;
  const block *a = &c->blocks[x], *b = &c->blocks[y];
  int64_t la = (int64_t)a->last_use - a->first_use + 1, lb = (int64_t)b->last_use - b->first_use + 1;
  if (c->kind == ORDER_AREA) {
    /* size x lifetime, compared without overflow as long doubles */
    long double aa = (long double)a->size * la, ab = (long double)b->size * lb;
    if (aa != ab) return aa > ab ? -1 : 1;
  } else if (c->kind == ORDER_FIRST_USE) {
    if (a->first_use != b->first_use) return a->first_use < b->first_use ? -1 : 1;
  }
  if (a->size != b->size) return a->size > b->size ? -1 : 1;
  if (a->alignment != b->alignment) return a->alignment > b->alignment ? -1 : 1; /* strict ones first, at low offsets */
  if (la != lb) return la > lb ? -1 : 1;
  if (a->first_use != b->first_use) return a->first_use < b->first_use ? -1 : 1;
  return (x > y) - (x < y);
}

/* Places every block in `order`; returns the arena size in *out_arena. */
static kiln_status_t place_blocks(planner *p, const int *order, int64_t *out_arena) {
  int64_t arena = 0;
  p->n_placed = 0;
  for (int k = 0; k < p->n_blocks; k++) {
    block *bl = &p->blocks[order[k]];
    if (bl->size == 0) {
      bl->offset = 0;
      continue;
    }
    int64_t prev_end = 0, best = -1, best_gap = INT64_MAX, cand;
    for (int q = 0; q < p->n_placed; q++) {
      const block *o = &p->blocks[p->placed[q]];
      if (!lifetimes_intersect(bl->first_use, bl->last_use, o->first_use, o->last_use)) continue;
      if (align_up(prev_end, bl->alignment, &cand) && cand <= o->offset && o->offset - cand >= bl->size) {
        int64_t gap = o->offset - cand;
        if (gap < best_gap) best_gap = gap, best = cand;
      }
      prev_end = KILN_MAX(prev_end, o->offset + o->size);
    }
    if (best < 0) {
      if (!align_up(prev_end, bl->alignment, &best) || best > INT64_MAX - bl->size)
        return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: arena size overflows int64");
    }
    bl->offset = best;
    arena = KILN_MAX(arena, best + bl->size);
    /* Insert into the offset-sorted list. */
    int q = p->n_placed;
    while (q > 0 && p->blocks[p->placed[q - 1]].offset > best) {
      p->placed[q] = p->placed[q - 1];
      q--;
    }
    p->placed[q] = order[k];
    p->n_placed++;
  }
  *out_arena = arena;
  return NULL;
}

kiln_status_t kiln_memory_plan_compute(const kiln_mem_buffer *b, int n, kiln_memory_plan *out) {
  if (!out) return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: NULL output");
  memset(out, 0, sizeof *out);
  KILN_TRY(check_buffers(b, n));
  int64_t total = 0, peak;
  for (int i = 0; i < n; i++)
    if (__builtin_add_overflow(total, b[i].size, &total))
      return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: total size overflows int64");
  KILN_TRY(peak_live_bytes(b, n, &peak));

  size_t cnt = (size_t)(n > 0 ? n : 1);
  planner p = {.b = b, .n = n};
  p.inplace_of = malloc(sizeof(int) * cnt);
  p.taken_by = malloc(sizeof(int) * cnt);
  p.block_of = malloc(sizeof(int) * cnt);
  p.blocks = malloc(sizeof(block) * cnt);
  p.placed = malloc(sizeof(int) * cnt);
  p.order = malloc(sizeof(int) * cnt);
  int *tmp = malloc(sizeof(int) * cnt);
  int64_t *best_offsets = malloc(sizeof(int64_t) * cnt);
  kiln_status_t st = NULL;
  if (!p.inplace_of || !p.taken_by || !p.block_of || !p.blocks || !p.placed || !p.order || !tmp || !best_offsets)
    st = KILN_OOM();
  if (!st) st = form_chains(&p);

  int64_t best_arena = -1;
  for (int kind = 0; kind < N_ORDERS && !st; kind++) {
    for (int k = 0; k < p.n_blocks; k++) p.order[k] = k;
    order_ctx oc = {p.blocks, kind};
    sort_ints(p.order, tmp, p.n_blocks, cmp_blocks, &oc);
    int64_t arena;
    st = place_blocks(&p, p.order, &arena);
    if (!st && (best_arena < 0 || arena < best_arena)) {
      best_arena = arena;
      for (int k = 0; k < p.n_blocks; k++) best_offsets[k] = p.blocks[k].offset;
    }
  }

  if (!st) {
    out->offsets = malloc(sizeof(int64_t) * cnt);
    out->inplace_of = malloc(sizeof(int) * cnt);
    if (!out->offsets || !out->inplace_of) st = KILN_OOM();
  }
  if (!st) {
    out->n_buffers = n;
    out->arena_size = best_arena < 0 ? 0 : best_arena;
    out->total_size = total;
    out->peak_live = peak;
    for (int i = 0; i < n; i++) {
      out->offsets[i] = b[i].size ? best_offsets[p.block_of[i]] : 0;
      out->inplace_of[i] = p.inplace_of[i];
      if (p.inplace_of[i] >= 0) out->n_inplace++;
    }
  } else {
    kiln_memory_plan_free(out);
  }
  free(p.inplace_of);
  free(p.taken_by);
  free(p.block_of);
  free(p.blocks);
  free(p.placed);
  free(p.order);
  free(tmp);
  free(best_offsets);
  return st;
}

/* ---- verification ------------------------------------------------------------- */

kiln_status_t kiln_memory_plan_verify(const kiln_mem_buffer *b, int n, const kiln_memory_plan *plan) {
  KILN_TRY(check_buffers(b, n));
  if (!plan || plan->n_buffers != n || (n > 0 && (!plan->offsets || !plan->inplace_of)))
    return kiln_error(KILN_INTERNAL, "memory plan: plan does not describe %d buffers", n);
  if (plan->arena_size < 0) return kiln_error(KILN_INTERNAL, "memory plan: negative arena size");
  for (int i = 0; i < n; i++) {
    int64_t off = plan->offsets[i], a = buffer_alignment(&b[i]);
    if (off < 0 || off % a != 0 || off > plan->arena_size || b[i].size > plan->arena_size - off)
      return kiln_error(KILN_INTERNAL, "memory plan: buffer %d at [%lld, +%lld) is misaligned (%lld) or outside the arena (%lld)",
                        i, (long long)off, (long long)b[i].size, (long long)a, (long long)plan->arena_size);
  }
  int *taken = calloc((size_t)(n > 0 ? n : 1), sizeof *taken);
  if (!taken) return KILN_OOM();
  int n_inplace = 0;
  kiln_status_t st = NULL;
  for (int i = 0; i < n && !st; i++) {
    int j = plan->inplace_of[i];
    if (j == -1) continue;
    n_inplace++;
    if (j < 0 || j >= n || j == i)
      st = kiln_error(KILN_INTERNAL, "memory plan: buffer %d: in-place source %d out of range", i, j);
    else if (b[j].last_use != b[i].first_use || b[i].size > b[j].size || plan->offsets[i] != plan->offsets[j])
      st = kiln_error(KILN_INTERNAL,
                      "memory plan: buffer %d in place of %d: source dies at %d, user produced at %d, sizes %lld/%lld, "
                      "offsets %lld/%lld",
                      i, j, b[j].last_use, b[i].first_use, (long long)b[i].size, (long long)b[j].size,
                      (long long)plan->offsets[i], (long long)plan->offsets[j]);
    else if (taken[j]++)
      st = kiln_error(KILN_INTERNAL, "memory plan: buffer %d's storage taken in place twice", j);
  }
  free(taken);
  if (!st && n_inplace != plan->n_inplace)
    st = kiln_error(KILN_INTERNAL, "memory plan: %d in-place reuses recorded, n_inplace says %d", n_inplace,
                    plan->n_inplace);
  if (st) return st;

  /* Sweep in order of first use: each buffer meets the later-starting ones
   * that start before it ends, i.e. exactly those whose lifetimes intersect. */
  int *idx = malloc(sizeof *idx * (size_t)(n > 0 ? n : 1)), *tmp = malloc(sizeof *tmp * (size_t)(n > 0 ? n : 1));
  if (!idx || !tmp) {
    free(idx);
    free(tmp);
    return KILN_OOM();
  }
  for (int i = 0; i < n; i++) idx[i] = i;
  sort_ints(idx, tmp, n, cmp_by_first_use, (void *)b);
  for (int x = 0; x < n && !st; x++) {
    int i = idx[x];
    if (b[i].size == 0) continue;
    for (int y = x + 1; y < n && b[idx[y]].first_use <= b[i].last_use && !st; y++) {
      int j = idx[y];
      if (b[j].size == 0) continue;
      int64_t oi = plan->offsets[i], oj = plan->offsets[j];
      if (oi >= oj + b[j].size || oj >= oi + b[i].size) continue;
      if (plan->inplace_of[i] == j || plan->inplace_of[j] == i) continue;
      st = kiln_error(KILN_INTERNAL,
                      "memory plan: buffers %d [%lld, +%lld) steps [%d, %d] and %d [%lld, +%lld) steps [%d, %d] overlap",
                      i, (long long)oi, (long long)b[i].size, b[i].first_use, b[i].last_use, j, (long long)oj,
                      (long long)b[j].size, b[j].first_use, b[j].last_use);
    }
  }
  free(idx);
  free(tmp);
  return st;
}

/* ---- graph level ---------------------------------------------------------------- */

bool kiln_op_is_inplace_elementwise(const kiln_node *node) {
  if (!node->op) return false;
  /* BatchNormalization with one output is the inference-mode per-channel
   * affine: elementwise over X, its other inputs broadcast. */
  return node->op->op_class == KILN_OPCLASS_ELEMENTWISE || node->op->op_class == KILN_OPCLASS_BROADCAST ||
         node->op->id == KILN_OP_BatchNormalization;
}

/* Bytes of a tensor value with a fully known type, or -1. */
static int64_t value_bytes(const kiln_value_def *v) {
  const kiln_type *t = &v->type;
  if (t->kind != KILN_TYPE_TENSOR || t->rank < 0 || t->dtype == KILN_DTYPE_UNDEFINED || t->dtype == KILN_DTYPE_STRING)
    return -1;
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++)
    if (!kiln_mul_i64(n, t->dims[d], &n)) return -1; /* also rejects dims < 0 (unknown) */
  int64_t bytes;
  if (!kiln_mul_i64(n, (int64_t)kiln_dtype_size(t->dtype), &bytes)) return -1;
  return bytes;
}

static bool same_tensor_type(const kiln_type *a, const kiln_type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* Marks every value of g that sub (or graphs nested in it) reads from
 * outside as used at `step`. Names are resolved in g; a name that is not
 * g's was captured from further out and does not concern g's buffers. */
static void mark_outer_reads(const kiln_graph *g, const kiln_graph *sub, int step, int *last_use) {
  for (int i = 0; i < sub->n_values; i++) {
    if (!sub->values[i].outer_name) continue;
    int id = kiln_graph_find_value(g, sub->values[i].outer_name);
    if (id >= 0) last_use[id] = KILN_MAX(last_use[id], step);
  }
  for (int n = 0; n < sub->n_nodes; n++)
    for (int a = 0; a < sub->nodes[n].n_attrs; a++) {
      const kiln_attr *at = &sub->nodes[n].attrs[a];
      if (at->g) mark_outer_reads(g, at->g, step, last_use);
      for (int k = 0; at->graphs && k < at->n; k++) mark_outer_reads(g, at->graphs[k], step, last_use);
    }
}

static bool has_subgraph(const kiln_node *node) {
  for (int a = 0; a < node->n_attrs; a++)
    if (node->attrs[a].g || node->attrs[a].graphs) return true;
  return false;
}

/* A node computable once, ahead of time, from constants alone: constant
 * folding turns its outputs into weights, so they are not arena buffers.
 * `fixed` marks the values known constant so far (initializers that a
 * caller cannot override, and outputs of earlier such nodes). */
static bool computes_constant(const kiln_node *node, const bool *fixed, int n_values) {
  if (has_subgraph(node)) return false;
  if (node->op && (node->op->flags & KILN_OP_NONDETERMINISTIC)) return false;
  if (kiln_node_is(node, KILN_OP_Constant)) return true;
  int n_present = 0;
  for (int k = 0; k < node->n_inputs; k++) {
    int id = node->inputs[k];
    if (id < 0) continue;
    if (id >= n_values || !fixed[id]) return false;
    n_present++;
  }
  return n_present > 0 && node->op; /* an unresolved op may be anything */
}

kiln_status_t kiln_graph_memory_buffers(const kiln_graph *g, kiln_mem_buffer **out_buffers, int **out_value_ids,
                                        int *out_n, int *out_n_unsized, int *out_n_folded) {
  if (!g || !out_buffers || !out_value_ids || !out_n || !out_n_unsized || !out_n_folded)
    return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: NULL argument");
  *out_buffers = NULL;
  *out_value_ids = NULL;
  *out_n = *out_n_unsized = *out_n_folded = 0;
  size_t nv = (size_t)(g->n_values > 0 ? g->n_values : 1);
  int *last_use = malloc(sizeof(int) * nv), *buffer_of = malloc(sizeof(int) * nv);
  bool *fixed = malloc(sizeof(bool) * nv);
  kiln_mem_buffer *bufs = malloc(sizeof *bufs * nv);
  int *ids = malloc(sizeof *ids * nv);
  if (!last_use || !buffer_of || !fixed || !bufs || !ids) {
    free(last_use);
    free(buffer_of);
    free(fixed);
    free(bufs);
    free(ids);
    return KILN_OOM();
  }
  for (int v = 0; v < g->n_values; v++) {
    last_use[v] = buffer_of[v] = -1;
    fixed[v] = g->values[v].constant && !g->values[v].is_graph_input;
  }
  for (int s = 0; s < g->n_nodes; s++) {
    const kiln_node *node = &g->nodes[s];
    for (int k = 0; k < node->n_inputs; k++) {
      int id = node->inputs[k];
      if (id >= 0 && id < g->n_values) last_use[id] = KILN_MAX(last_use[id], s);
    }
    for (int a = 0; a < node->n_attrs; a++) {
      const kiln_attr *at = &node->attrs[a];
      if (at->g) mark_outer_reads(g, at->g, s, last_use);
      for (int k = 0; at->graphs && k < at->n; k++) mark_outer_reads(g, at->graphs[k], s, last_use);
    }
  }
  int n = 0, n_unsized = 0, n_folded = 0;
  for (int s = 0; s < g->n_nodes; s++) {
    const kiln_node *node = &g->nodes[s];
    if (computes_constant(node, fixed, g->n_values)) {
      for (int k = 0; k < node->n_outputs; k++) {
        int id = node->outputs[k];
        if (id < 0 || id >= g->n_values) continue;
        fixed[id] = true;
        if (!g->values[id].is_graph_output && !g->values[id].constant) n_folded++;
      }
      continue;
    }
    int n_present = 0;
    for (int k = 0; k < node->n_outputs; k++) n_present += node->outputs[k] >= 0;
    bool elementwise = n_present == 1 && node->n_outputs >= 1 && node->outputs[0] >= 0 &&
                       kiln_op_is_inplace_elementwise(node);
    for (int k = 0; k < node->n_outputs; k++) {
      int id = node->outputs[k];
      if (id < 0 || id >= g->n_values) continue;
      const kiln_value_def *v = &g->values[id];
      if (v->is_graph_output || v->constant || v->outer_name || v->is_graph_input || buffer_of[id] >= 0) continue;
      int64_t bytes = value_bytes(v);
      if (bytes < 0) {
        n_unsized++;
        continue;
      }
      kiln_mem_buffer *b = &bufs[n];
      *b = (kiln_mem_buffer){bytes, 0, s, KILN_MAX(s, last_use[id]), -1};
      if (elementwise && k == 0) {
        for (int q = 0; q < node->n_inputs; q++) {
          int in = node->inputs[q];
          if (in < 0 || in >= g->n_values || buffer_of[in] < 0 || last_use[in] != s) continue;
          if (!same_tensor_type(&g->values[in].type, &v->type)) continue;
          b->inplace_source = buffer_of[in];
          break;
        }
      }
      buffer_of[id] = n;
      ids[n++] = id;
    }
  }
  free(last_use);
  free(buffer_of);
  free(fixed);
  if (n == 0) {
    free(bufs);
    free(ids);
    bufs = NULL;
    ids = NULL;
  }
  *out_buffers = bufs;
  *out_value_ids = ids;
  *out_n = n;
  *out_n_unsized = n_unsized;
  *out_n_folded = n_folded;
  return NULL;
}

kiln_status_t kiln_plan_graph_memory(const kiln_graph *g, kiln_memory_plan_report *out) {
  if (!out) return kiln_error(KILN_INVALID_ARGUMENT, "memory plan: NULL report");
  memset(out, 0, sizeof *out);
  kiln_mem_buffer *bufs;
  int *ids, n, n_unsized, n_folded;
  KILN_TRY(kiln_graph_memory_buffers(g, &bufs, &ids, &n, &n_unsized, &n_folded));
  kiln_memory_plan plan;
  kiln_status_t st = kiln_memory_plan_compute(bufs, n, &plan);
  if (!st) {
    st = kiln_memory_plan_verify(bufs, n, &plan);
    *out = (kiln_memory_plan_report){n,        n_unsized,       n_folded,      plan.n_inplace,
                                     plan.total_size, plan.arena_size, plan.peak_live};
    kiln_memory_plan_free(&plan);
  }
  free(bufs);
  free(ids);
  return st;
}

void kiln_memory_plan_finish_steps(const kiln_graph *g, const int *buf_of, kiln_mem_buffer *bufs, int nb,
                                   const kiln_plan_step_io *steps, int n_steps) {
  for (int i = 0; i < g->n_outputs; i++)
    if (buf_of[g->outputs[i]] >= 0) bufs[buf_of[g->outputs[i]]].last_use = n_steps;
  for (int b = 0; b < nb; b++) {
    if (bufs[b].first_use < 0) bufs[b].first_use = 0;
    if (bufs[b].last_use < bufs[b].first_use) bufs[b].last_use = bufs[b].first_use;
  }
  for (int i = 0; i < n_steps; i++) {
    const kiln_plan_step_io *s = &steps[i];
    if (!s->may_write_in_place || s->n_args < 1) continue;
    int out = s->args[0], ob = buf_of[out];
    for (int k = 1; k < s->n_args && ob >= 0; k++) {
      int v = s->args[k], ib = v >= 0 ? buf_of[v] : -1;
      if (ib < 0 || bufs[ib].last_use != i || bufs[ib].size != bufs[ob].size) continue;
      if (!kiln_shape_equal(g->values[v].type.rank, g->values[v].type.dims, g->values[out].type.rank,
                            g->values[out].type.dims))
        continue;
      bufs[ob].inplace_source = ib;
      break;
    }
  }
}

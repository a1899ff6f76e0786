/* Cooperative rows' schedule step (loopnest.h, kiln_cooperative_rows):
 * spot a nest whose reductions are all row reductions and give each row
 * one group. */
#include "codegen/loopnest.h"

void kiln_reduce_chain_of(const te_expr *red, kiln_reduce_chain *c) {
  c->n = 0;
  c->extent = 1;
  for (const te_expr *e = red; e && e->op == TE_REDUCE && c->n < KILN_MAX_RANK; e = e->a) {
    if (c->n && e->rop != red->rop) break;
    c->red[c->n++] = e;
    c->extent = e->extent && c->extent > INT64_MAX / e->extent ? INT64_MAX : c->extent * e->extent;
  }
}

/* Does some load read consecutive elements as `var` steps (index var or
 * ... + var)? Then the group's threads, splitting that loop, read memory
 * coalesced. */
static bool reads_contiguous(const te_expr *e, int var, char *seen) {
  if (!e || seen[e->id]) return false;
  seen[e->id] = 1;
  if (e->op == TE_LOAD) {
    const te_expr *i = e->a;
    if ((i->op == TE_VAR && i->var == var) || (i->op == TE_ADD && i->b->op == TE_VAR && i->b->var == var)) return true;
  }
  return reads_contiguous(e->a, var, seen) || reads_contiguous(e->b, var, seen) || reads_contiguous(e->c, var, seen);
}

/* Does the sum's body read some value that neighbouring outputs along
 * `var` share (a load that does not read var beside one that does:
 * MatMul's row of A)? Such a contraction belongs to the thread tiles or the
 * contraction template, whose threads reuse what they load; a row group
 * would load it once per output. */
static bool shares_loads(const te_expr *e, int var, bool *with, bool *without, char *seen) {
  if (!e || seen[e->id]) return *with && *without;
  seen[e->id] = 1;
  if (e->op == TE_LOAD) {
    if (te_uses_var(e->a, var)) *with = true;
    else *without = true;
  }
  shares_loads(e->a, var, with, without, seen);
  shares_loads(e->b, var, with, without, seen);
  shares_loads(e->c, var, with, without, seen);
  return *with && *without;
}

kiln_status_t kiln_schedule_cooperative_rows(const te_builder *b, kiln_loop_nest *nest, int threads, int min_threads,
                                             bool subgroups, int64_t long_chain) {
  int pd = nest->parallel_dims;
  bool pow2 = threads > 0 && !(threads & (threads - 1));
  if (threads < 1 || (!pow2 && !subgroups) || nest->tiles.n_red || nest->thread_tile > 1 || pd < 0) return NULL;
  int64_t rows = 1;
  for (int i = 0; i < pd; i++) rows *= nest->extents[i];
  char *seen = calloc((size_t)te_expr_count(b) + 1, 1);
  if (!seen) return KILN_OOM();
  int n_top = 0;
  bool contiguous = true, ok = true, shared = false;
  int64_t longest = 0;
  for (int i = 0; i < nest->n_sites && ok; i++) {
    const kiln_reduce_site *s = &nest->sites[i];
    if (s->owner) continue;
    if (s->level != pd - 1 || s->reduce->dtype != KILN_DTYPE_F32) {
      ok = false;
      break;
    }
    n_top++;
    kiln_reduce_chain c;
    kiln_reduce_chain_of(s->reduce, &c);
    if (c.extent > longest) longest = c.extent;
    if (c.extent > INT32_MAX) ok = false; /* the flattened loop's counter may be an int */
    memset(seen, 0, (size_t)te_expr_count(b) + 1);
    if (!reads_contiguous(c.red[c.n - 1]->a, c.red[c.n - 1]->var, seen)) contiguous = false;
    bool with = false, without = false;
    memset(seen, 0, (size_t)te_expr_count(b) + 1);
    /* (a reduction to a scalar has no rows to share loads between) */
    if (pd > 0 && shares_loads(c.red[c.n - 1]->a, nest->vars[pd - 1], &with, &without, seen)) shared = true;
  }
  free(seen);
  /* Few rows: a group each keeps the device busy whatever they read. */
  bool too_long = long_chain > 0 && longest > long_chain;
  if (!ok || !n_top || !(rows <= 256 || too_long || (contiguous && longest >= 16 && !shared))) return NULL;
  /* No more threads than the longest row has elements (down to
   * min_threads): Softmax over 49 positions needs no 256-thread groups. */
  while (pow2 && threads > min_threads && threads / 2 >= longest) threads /= 2;
  nest->rows = (kiln_cooperative_rows){threads, subgroups, rows};
  for (int l = 0; l < nest->rank; l++) nest->kinds[l] = l < pd ? KILN_LOOP_GPU_BLOCK : KILN_LOOP_GPU_THREAD;
  return NULL;
}

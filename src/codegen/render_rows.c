/* Cooperative rows (loopnest.h, kiln_cooperative_rows) in any GPU dialect
 * of the C-family emitter: group f computes row f. Each of the row's
 * reductions is folded over the group's threads (thread t takes elements
 * t, t + threads, ...), the partial results are combined in local memory
 * (a halving tree, or the dialect's subgroup operations first), and the
 * row's elements are stored strided over the threads. */
#include <stdio.h>

#include "codegen/render_internal.h"

static bool in_chain(const kiln_reduce_chain *c, const te_expr *e) {
  for (int i = 0; i < c->n; i++)
    if (c->red[i] == e) return true;
  return false;
}

/* One top-level reduction: each thread folds its strided share of the
 * (flattened) chain into pN, then the group combines the partials into
 * the `const rN` every later expression reads. */
static void coop_reduce(render_ctx *r, const kiln_loop_nest *nest, const te_expr *red, const render_gpu_dialect *g) {
  int threads = nest->rows.threads;
  kiln_reduce_chain c;
  kiln_reduce_chain_of(red, &c);
  const te_expr *last = c.red[c.n - 1];
  const char *ty = r->d->value_type(r, red->dtype), *ity = r->d->value_type(r, KILN_DTYPE_I64);
  char init[64], acc[32], ext[48], x[96];
  r->d->reduce_init(r, red, init, sizeof init);
  snprintf(acc, sizeof acc, "p%d", red->id);
  r->d->int_literal(r, KILN_DTYPE_I64, c.extent, ext, sizeof ext);
  render_line(r, "%s %s = %s;", ty, acc, init);
  /* The thread count is structure (a literal, never a specialization
   * constant): it sizes the local array. */
  render_line(r, "for (%s kiln_i = kiln_t; kiln_i < %s; kiln_i += %d) {", ity, ext, threads);
  render_open_scope(r);
  render_trips_enter(r, (c.extent + threads - 1) / threads);
  int vars[KILN_MAX_RANK];
  int64_t extents[KILN_MAX_RANK];
  for (int k = 0; k < c.n; k++) {
    vars[k] = c.red[k]->var;
    extents[k] = c.red[k]->extent;
  }
  render_unflatten(r, "kiln_i", vars, extents, c.n);
  /* Reductions nested in the chain (not part of it), in dependency order. */
  for (int i = 0; i < nest->n_sites; i++) {
    const kiln_reduce_site *s = &nest->sites[i];
    if (s->owner && in_chain(&c, s->owner) && !in_chain(&c, s->reduce)) render_emit_reduce(r, nest, s->reduce);
  }
  render_ensure(r, last->a);
  render_operand(r, last->a, red->dtype, x, sizeof x);
  render_indent(r);
  r->d->reduce_combine(r, red, acc, x);
  render_loop_close(r);
  if (nest->rows.subgroups && g->subgroup_combine) {
    g->subgroup_combine(r, red, acc, threads);
  } else {
    render_line(r, "kiln_red[kiln_t] = %s;", acc);
    render_line(r, "%s", g->barrier);
    render_line(r, "for (int kiln_s = %d; kiln_s > 0; kiln_s >>= 1) {", threads / 2);
    int halvings = 0;
    for (int h = threads / 2; h > 0; h >>= 1) halvings++;
    render_trips_enter(r, halvings);
    render_indent(r);
    kiln_strbuf_puts(r->s, "  if (kiln_t < kiln_s) ");
    r->d->reduce_combine(r, red, "kiln_red[kiln_t]", "kiln_red[kiln_t + kiln_s]");
    render_line(r, "  %s", g->barrier);
    render_trips_leave(r);
    render_line(r, "}");
    render_line(r, "const %s r%d = kiln_red[0];", ty, red->id);
  }
  /* Everyone has read kiln_red before the next reduction overwrites it. */
  render_line(r, "%s", g->barrier);
}

void render_cooperative_rows(render_ctx *r, const kiln_loop_nest *nest, const render_gpu_dialect *g) {
  int pd = nest->parallel_dims, threads = nest->rows.threads;
  const char *ity = r->d->value_type(r, KILN_DTYPE_I64);
  const char *fty = r->d->value_type(r, KILN_DTYPE_F32);
  if (!fty || !ity) {
    render_fail(r, "cooperative rows without f32 and index types");
    return;
  }
  bool pow2 = threads > 0 && !(threads & (threads - 1));
  if (!pow2 && !(nest->rows.subgroups && g->subgroup_combine)) {
    render_fail(r, "cooperative rows of %d threads without subgroup operations", threads);
    return;
  }
  char rows[48];
  r->d->int_literal(r, KILN_DTYPE_I64, nest->rows.rows, rows, sizeof rows);
  /* The row is uniform over the group, so returning keeps barriers legal;
   * still, PoCL 3.1 drops some groups' stores of a kernel that returns
   * before its barriers (even when no group takes the return) when its
   * threads are preempted, so a launch of exactly the rows has no check. */
  render_line(r, "const %s f = %s;", ity, g->group_id);
  if (!g->exact_groups) render_line(r, "if (f >= %s) return;", rows);
  render_line(r, "const int kiln_t = %s;", g->local_id);
  render_open_scope(r);
  render_unflatten(r, "f", nest->vars, nest->extents, pd);
  for (int i = 0; i < nest->n_sites; i++)
    if (!nest->sites[i].owner) coop_reduce(r, nest, nest->sites[i].reduce, g);
  /* The row's elements, strided over the group. */
  int64_t inner = 1;
  for (int l = pd; l < nest->rank; l++) inner *= nest->extents[l];
  char lim[48];
  r->d->int_literal(r, KILN_DTYPE_I64, inner, lim, sizeof lim);
  render_line(r, "for (%s kiln_e = kiln_t; kiln_e < %s; kiln_e += %d) {", ity, lim, threads);
  render_open_scope(r);
  render_trips_enter(r, (inner + threads - 1) / threads);
  render_unflatten(r, "kiln_e", nest->vars + pd, nest->extents + pd, nest->rank - pd);
  render_ensure(r, nest->value);
  render_store(r, nest, -1, 0, nest->value);
  render_loop_close(r);
  render_close_scope(r);
}

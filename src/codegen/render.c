/* The shared C-family emitter (see render_internal.h): expressions as
 * scoped `const` locals, reductions as accumulator loops, every
 * target-specific spelling taken from the dialect table. */
#include <stdarg.h>
#include <stdio.h>

#include "codegen/render_internal.h"

kiln_status_t render_init(render_ctx *r, const render_dialect *d, const te_builder *b, kiln_strbuf *s) {
  memset(r, 0, sizeof *r);
  r->d = d;
  r->b = b;
  r->s = s;
  r->buf_prefix = "b";
  r->trips = 1;
  int n_exprs = te_expr_count(b);
  r->emitted = malloc(((size_t)n_exprs + 1) * sizeof(int));
  if (!r->emitted) return KILN_OOM();
  for (int i = 0; i < n_exprs; i++) r->emitted[i] = -1;
  return NULL;
}

void render_free(render_ctx *r) {
  free(r->emitted);
  free(r->scope_stack);
  r->emitted = NULL;
  r->scope_stack = NULL;
}

void render_fail(render_ctx *r, const char *fmt, ...) {
  if (r->bad) return; /* keep the first reason */
  r->bad = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->why, sizeof r->why, fmt, ap);
  va_end(ap);
}

void render_indent(render_ctx *r) {
  for (int i = 0; i < r->indent; i++) kiln_strbuf_puts(r->s, "  ");
}

void render_name_of(render_ctx *r, const te_expr *e, char *buf, size_t n) {
  switch (e->op) {
    case TE_CONST:
      if (kiln_dtype_is_float(e->dtype)) r->d->float_literal(r, e->dtype, e->f, buf, n);
      else r->d->int_literal(r, e->dtype, e->i, buf, n);
      break;
    case TE_VAR: snprintf(buf, n, "v%d", e->var); break;
    case TE_REDUCE: snprintf(buf, n, "r%d", e->id); break;
    default: snprintf(buf, n, "e%d", e->id); break;
  }
}

void render_operand(render_ctx *r, const te_expr *e, kiln_dtype want, char *buf, size_t n) {
  if (!e) {
    buf[0] = 0;
    return;
  }
  if (!r->d->convert_operands || want == e->dtype) {
    render_name_of(r, e, buf, n);
    return;
  }
  const char *have = r->d->value_type(r, e->dtype), *to = r->d->value_type(r, want);
  if (!have || !to) {
    render_fail(r, "value of dtype %s", kiln_dtype_name(have ? want : e->dtype));
    buf[0] = 0;
    return;
  }
  char name[48]; /* eN, vN, rN or a literal */
  render_name_of(r, e, name, sizeof name);
  if (!strcmp(have, to)) snprintf(buf, n, "%s", name);
  else snprintf(buf, n, "%s(%s)", to, name);
}

static void push_scope_entry(render_ctx *r, int id) {
  if (r->n_stack == r->cap_stack) {
    int cap = r->cap_stack ? r->cap_stack * 2 : 256;
    int *n = realloc(r->scope_stack, (size_t)cap * sizeof *n);
    if (!n) {
      render_fail(r, "out of memory");
      return;
    }
    r->scope_stack = n;
    r->cap_stack = cap;
  }
  r->scope_stack[r->n_stack++] = id;
}

void render_open_scope(render_ctx *r) {
  push_scope_entry(r, -1); /* marker */
  r->depth++;
  r->indent++;
}

void render_close_scope(render_ctx *r) {
  while (r->n_stack > 0) {
    int id = r->scope_stack[--r->n_stack];
    if (id < 0) break;
    r->emitted[id] = -1;
  }
  r->depth--;
  r->indent--;
}

static const char *binop_text(te_op op) {
  switch (op) {
    case TE_ADD: return "+";
    case TE_SUB: return "-";
    case TE_MUL: return "*";
    case TE_DIV: return "/";
    case TE_MOD: return "%";
    case TE_LT: return "<";
    case TE_LE: return "<=";
    case TE_EQ: return "==";
    case TE_NE: return "!=";
    case TE_AND: return "&&";
    case TE_OR: return "||";
    case TE_XOR: return "!=";
    default: return NULL;
  }
}


void render_mark_emitted(render_ctx *r, const te_expr *e) {
  if (e->op == TE_CONST || e->op == TE_VAR || e->op == TE_REDUCE) return; /* named without a declaration */
  r->emitted[e->id] = r->depth;
  push_scope_entry(r, e->id);
}

void render_ensure(render_ctx *r, const te_expr *e) {
  if (!e || e->op == TE_CONST || e->op == TE_VAR || e->op == TE_REDUCE) return;
  if (r->emitted[e->id] >= 0) return;
  render_ensure(r, e->a);
  render_ensure(r, e->b);
  render_ensure(r, e->c);
  /* What each operand is computed as. */
  kiln_dtype wa = e->dtype, wb = e->dtype, wc = e->dtype;
  switch (e->op) {
    case TE_LOAD: wa = KILN_DTYPE_I64; break;
    case TE_CAST: wa = e->a->dtype; break;
    case TE_NOT: wa = KILN_DTYPE_BOOL; break;
    case TE_SELECT: wa = KILN_DTYPE_BOOL; break;
    case TE_AND: case TE_OR: case TE_XOR: wa = wb = KILN_DTYPE_BOOL; break;
    case TE_LT: case TE_LE: case TE_EQ: case TE_NE: wa = wb = te_compare_dtype(e->a->dtype, e->b->dtype); break;
    default: break;
  }
  char a[96] = "", b[96] = "", c[96] = "";
  render_operand(r, e->a, wa, a, sizeof a);
  render_operand(r, e->b, wb, b, sizeof b);
  render_operand(r, e->c, wc, c, sizeof c);
  const char *ty = r->d->value_type(r, e->dtype);
  if (!ty) {
    render_fail(r, "value of dtype %s", kiln_dtype_name(e->dtype));
    return;
  }
  render_indent(r);
  kiln_strbuf_printf(r->s, "const %s e%d = ", ty, e->id);
  const char *bo = binop_text(e->op);
  switch (e->op) {
    case TE_NEG: kiln_strbuf_printf(r->s, "-%s", a); break;
    case TE_NOT: kiln_strbuf_printf(r->s, "!%s", a); break;
    case TE_CALL1:
    case TE_CALL2: {
      const char *fn = r->d->call_name(e->fn);
      if (!fn) {
        render_fail(r, "math function %s", e->fn);
        break;
      }
      if (e->op == TE_CALL1) kiln_strbuf_printf(r->s, "%s(%s)", fn, a);
      else kiln_strbuf_printf(r->s, "%s(%s, %s)", fn, a, b);
      break;
    }
    case TE_SELECT: kiln_strbuf_printf(r->s, "%s ? %s : %s", a, b, c); break;
    default:
      if (r->d->special(r, e, a, b)) break;
      if (bo && e->op != TE_LOAD) kiln_strbuf_printf(r->s, "%s %s %s", a, bo, b);
      else render_fail(r, "operation %d on %s", (int)e->op, kiln_dtype_name(e->dtype));
      break;
  }
  kiln_strbuf_puts(r->s, ";\n");
  r->emitted[e->id] = r->depth;
  push_scope_entry(r, e->id);
}

/* The limiter (llvmpipe's gallivm) is one counter per invocation that
 * every loop shares: each pass through a loop's end takes one from it,
 * the pass that finds the loop done included (its lanes leave together),
 * and at zero every loop ends. So a loop statement costs its enclosing
 * trips times (its count + 1), summed over the whole kernel (a Conv's
 * contraction with K = 18432 spent 60 per k-step in four loops and lost
 * the last 5% of its sums: fcn_resnet50 on lavapipe). */
static void trips_push(render_ctx *r, int64_t count, bool spends) {
  if (r->n_trips < (int)KILN_ARRAY_SIZE(r->trip_stack)) r->trip_stack[r->n_trips] = r->trips;
  r->n_trips++;
  int64_t c = count < 1 ? 1 : count, t, cost;
  if (__builtin_mul_overflow(r->trips, c, &t)) t = INT64_MAX;
  if (spends) {
    if (__builtin_mul_overflow(r->trips, c + 1, &cost) || __builtin_add_overflow(r->trips_spent, cost, &r->trips_spent))
      r->trips_spent = INT64_MAX;
    if (r->max_trips && r->trips_spent > r->max_trips)
      render_fail(r, "loops of %lld passes in all per thread (the driver stops loops after %lld)",
                  (long long)r->trips_spent, (long long)r->max_trips);
  }
  r->trips = t;
}

void render_trips_enter(render_ctx *r, int64_t count) { trips_push(r, count, true); }

void render_trips_enter_unrolled(render_ctx *r, int64_t count) { trips_push(r, count, false); }

void render_trips_leave(render_ctx *r) {
  if (r->n_trips > 0 && --r->n_trips < (int)KILN_ARRAY_SIZE(r->trip_stack)) r->trips = r->trip_stack[r->n_trips];
}

void render_loop_open(render_ctx *r, int var, int64_t extent) {
  render_trips_enter(r, extent);
  char lim[64];
  r->d->int_literal(r, KILN_DTYPE_I64, extent, lim, sizeof lim);
  const char *ty = r->d->value_type(r, KILN_DTYPE_I64);
  render_indent(r);
  kiln_strbuf_printf(r->s, "for (%s v%d = 0; v%d < %s; v%d++) {\n", ty, var, var, lim, var);
  render_open_scope(r);
}

void render_loop_close(render_ctx *r) {
  render_trips_leave(r);
  render_close_scope(r);
  render_indent(r);
  kiln_strbuf_puts(r->s, "}\n");
}

/* A reduction over `lanes` partial accumulators (render_ctx): the loop
 * in steps of that many, each lane's element combined into its own
 * accumulator (a loop the compiler vectorizes), the remainder into the
 * result, then the lanes into the result. */
static void emit_reduce_lanes(render_ctx *r, const te_expr *red, int lanes, const char *ty, const char *init,
                              const char *acc) {
  int v = red->var;
  char lim[64], x[96], lane[48];
  r->d->int_literal(r, KILN_DTYPE_I64, red->extent, lim, sizeof lim);
  render_line(r, "%s %s = %s;", ty, acc, init);
  render_line(r, "{");
  render_open_scope(r);
  render_line(r, "%s %s_l[%d];", ty, acc, lanes);
  render_line(r, "for (int kiln_u = 0; kiln_u < %d; kiln_u++) %s_l[kiln_u] = %s;", lanes, acc, init);
  render_line(r, "int64_t kiln_k%d = 0;", v);
  render_line(r, "for (; kiln_k%d + %d <= %s; kiln_k%d += %d) {", v, lanes, lim, v, lanes);
  render_open_scope(r);
  /* A float max or min keeps NaN with a two-part select, which GCC -O3
   * vectorizes only when it does not fully unroll the lane loop first:
   * unrolled, the select became scalar branches (ReduceMin over 98k
   * floats, Zen 1: 74 -> 24 us). Sums vectorize either way and are faster
   * unrolled, so only these get the pragma (only the C dialect has lanes). */
  if ((red->rop == TE_RMAX || red->rop == TE_RMIN) && (red->dtype == KILN_DTYPE_F32 || red->dtype == KILN_DTYPE_F64))
    render_line(r, "_Pragma(\"GCC unroll 1\")");
  render_line(r, "for (int kiln_u = 0; kiln_u < %d; kiln_u++) {", lanes);
  render_open_scope(r);
  render_line(r, "const int64_t v%d = kiln_k%d + kiln_u;", v, v);
  render_ensure(r, red->a);
  render_operand(r, red->a, red->dtype, x, sizeof x);
  snprintf(lane, sizeof lane, "%s_l[kiln_u]", acc);
  render_indent(r);
  r->d->reduce_combine(r, red, lane, x);
  render_close_scope(r);
  render_line(r, "}");
  render_close_scope(r);
  render_line(r, "}");
  render_line(r, "for (; kiln_k%d < %s; kiln_k%d++) {", v, lim, v);
  render_open_scope(r);
  render_line(r, "const int64_t v%d = kiln_k%d;", v, v);
  render_ensure(r, red->a);
  render_operand(r, red->a, red->dtype, x, sizeof x);
  render_indent(r);
  r->d->reduce_combine(r, red, acc, x);
  render_close_scope(r);
  render_line(r, "}");
  render_line(r, "for (int kiln_u = 0; kiln_u < %d; kiln_u++) {", lanes);
  render_open_scope(r);
  render_indent(r);
  r->d->reduce_combine(r, red, acc, lane);
  render_close_scope(r);
  render_line(r, "}");
  render_close_scope(r);
  render_line(r, "}");
}

void render_emit_reduce(render_ctx *r, const kiln_loop_nest *nest, const te_expr *red) {
  const char *ty = r->d->value_type(r, red->dtype);
  if (!ty) {
    render_fail(r, "reduction of dtype %s", kiln_dtype_name(red->dtype));
    return;
  }
  char init[96], acc[32];
  r->d->reduce_init(r, red, init, sizeof init);
  snprintf(acc, sizeof acc, "r%d", red->id);
  bool leaf = true;
  for (int i = 0; i < nest->n_sites && leaf; i++) leaf = nest->sites[i].owner != red;
  /* As many lanes as the extent has eight steps of, down to 8: a long
   * reduction gets several vectors of accumulators, so it is not one
   * chain of dependent adds or selects (a whole-tensor ReduceMin over
   * 393k floats ran at the select's latency, 1.25 cycles an element:
   * 431 -> 252 us for a DynamicQuantizeLinear of it); a short row keeps
   * 8 (LayerNorm over 64: 16 lanes made it 10% slower). */
  int lanes = r->reduce_lanes;
  while (lanes > 8 && red->extent < 8 * (int64_t)lanes) lanes /= 2;
  if (leaf && lanes > 1 && red->extent >= 4 * (int64_t)lanes &&
      (red->dtype == KILN_DTYPE_F32 || red->dtype == KILN_DTYPE_F64)) {
    emit_reduce_lanes(r, red, lanes, ty, init, acc);
    return;
  }
  render_indent(r);
  kiln_strbuf_printf(r->s, "%s %s = %s;\n", ty, acc, init);
  /* A window of a few elements (a pool's 2 or 3 taps) unrolled whole, so
   * the element is straight-line code and the loop around it vectorizes:
   * GCC unrolls a loop the pragma marks before it vectorizes. */
  if (r->reduce_lanes && red->extent <= 4) render_line(r, "_Pragma(\"GCC unroll 4\")");
  render_loop_open(r, red->var, red->extent);
  render_emit_sites(r, nest, -99, red);
  render_ensure(r, red->a);
  char x[96];
  render_operand(r, red->a, red->dtype, x, sizeof x);
  render_indent(r);
  r->d->reduce_combine(r, red, acc, x);
  render_loop_close(r);
}

/* ---- thread tiles: sibling reductions in one loop ------------------------------- */

static bool site_matches(const kiln_reduce_site *s, int level, const te_expr *const *owners, int n_owners) {
  if (!n_owners) return !s->owner && s->level == level;
  for (int i = 0; i < n_owners; i++)
    if (s->owner == owners[i]) return true;
  return false;
}

static bool same_loop(const te_expr *x, const te_expr *y) {
  return x->var == y->var && x->extent == y->extent && x->rop == y->rop && x->dtype == y->dtype;
}

static void emit_grouped(render_ctx *r, const kiln_loop_nest *nest, int level, const te_expr *const *owners,
                         int n_owners);

/* The copies of one reduction a thread tile made (the same variable,
 * extent and combine): one accumulator each, one loop; what their bodies
 * share is emitted once per iteration. */
static void emit_reduce_group(render_ctx *r, const kiln_loop_nest *nest, const te_expr *const *reds, int n) {
  const char *ty = r->d->value_type(r, reds[0]->dtype);
  if (!ty) {
    render_fail(r, "reduction of dtype %s", kiln_dtype_name(reds[0]->dtype));
    return;
  }
  for (int i = 0; i < n; i++) {
    char init[96];
    r->d->reduce_init(r, reds[i], init, sizeof init);
    render_indent(r);
    kiln_strbuf_printf(r->s, "%s r%d = %s;\n", ty, reds[i]->id, init);
  }
  render_loop_open(r, reds[0]->var, reds[0]->extent);
  emit_grouped(r, nest, -99, reds, n);
  for (int i = 0; i < n; i++) render_ensure(r, reds[i]->a);
  for (int i = 0; i < n; i++) {
    char acc[32], x[96];
    snprintf(acc, sizeof acc, "r%d", reds[i]->id);
    render_operand(r, reds[i]->a, reds[i]->dtype, x, sizeof x);
    render_indent(r);
    r->d->reduce_combine(r, reds[i], acc, x);
  }
  render_loop_close(r);
}

static void emit_grouped(render_ctx *r, const kiln_loop_nest *nest, int level, const te_expr *const *owners,
                         int n_owners) {
  bool *done = calloc((size_t)nest->n_sites + 1, 1);
  const te_expr **group = calloc((size_t)nest->n_sites + 1, sizeof *group);
  if (!done || !group) {
    render_fail(r, "out of memory");
  } else {
    for (int i = 0; i < nest->n_sites; i++) {
      if (done[i] || !site_matches(&nest->sites[i], level, owners, n_owners)) continue;
      int n = 0;
      for (int j = i; j < nest->n_sites; j++)
        if (!done[j] && site_matches(&nest->sites[j], level, owners, n_owners) &&
            same_loop(nest->sites[j].reduce, nest->sites[i].reduce)) {
          done[j] = true;
          group[n++] = nest->sites[j].reduce;
        }
      emit_reduce_group(r, nest, group, n);
    }
  }
  free(done);
  free(group);
}

void render_emit_sites(render_ctx *r, const kiln_loop_nest *nest, int level, const te_expr *owner) {
  if (nest->thread_tile > 1 || nest->jam_inner > 1) {
    emit_grouped(r, nest, level, owner ? &owner : NULL, owner ? 1 : 0);
    return;
  }
  for (int i = 0; i < nest->n_sites; i++) {
    const kiln_reduce_site *s = &nest->sites[i];
    if (owner ? s->owner == owner : (!s->owner && s->level == level)) render_emit_reduce(r, nest, s->reduce);
  }
}

void render_line(render_ctx *r, const char *fmt, ...) {
  render_indent(r);
  va_list ap;
  va_start(ap, fmt);
  char buf[1024];
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  kiln_strbuf_puts(r->s, buf);
  kiln_strbuf_puts(r->s, "\n");
}

void render_unflatten(render_ctx *r, const char *flat, const int *vars, const int64_t *extents, int n) {
  const char *ity = r->d->value_type(r, KILN_DTYPE_I64);
  int64_t inner = 1;
  for (int i = n - 1; i >= 0; i--) {
    /* Only the integers the text uses are rendered (in GLSL each may
     * become a specialization constant the shader must declare). */
    char in[40] = "", ex[40] = "";
    bool need_in = extents[i] != 1 && inner != 1, need_ex = extents[i] != 1 && i != 0;
    if (need_in) r->d->int_literal(r, KILN_DTYPE_I64, inner, in, sizeof in);
    if (need_ex) r->d->int_literal(r, KILN_DTYPE_I64, extents[i], ex, sizeof ex);
    render_indent(r);
    kiln_strbuf_printf(r->s, "const %s v%d = ", ity, vars[i]);
    if (extents[i] == 1) kiln_strbuf_puts(r->s, "0");
    else if (inner == 1) kiln_strbuf_printf(r->s, i == 0 ? "%s" : "%s %% %s", flat, ex);
    else if (i == 0) kiln_strbuf_printf(r->s, "%s / %s", flat, in);
    else kiln_strbuf_printf(r->s, "(%s / %s) %% %s", flat, in, ex);
    kiln_strbuf_puts(r->s, ";\n");
    inner *= extents[i];
  }
}

void render_unflatten_loops(render_ctx *r, const kiln_loop_nest *nest, const char *flat, const int *loops, int n) {
  int vars[KILN_MAX_RANK];
  int64_t ext[KILN_MAX_RANK];
  for (int i = 0; i < n; i++) {
    vars[i] = nest->vars[loops[i]];
    ext[i] = nest->extents[loops[i]];
  }
  render_unflatten(r, flat, vars, ext, n);
}

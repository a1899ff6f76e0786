/* Schedules: from a kernel's root view and the knobs to a loop nest. */
#include "codegen/loopnest.h"

kiln_loop_schedule kiln_loop_schedule_default(void) {
  kiln_loop_schedule s = {-1, 16384, 0, 0, 0, false, 0, 0, false, false, 0, false};
  return s;
}

/* Free index variables of every expression, memoized by expression id, as
 * bit sets over variable numbers. */
typedef struct var_sets {
  int words;
  uint64_t *bits; /* n_exprs * words */
  char *done;
  const te_expr **reduces; /* every reduction reachable, by id */
  int n_reduces;
} var_sets;

static uint64_t *set_of(var_sets *vs, const te_expr *e) { return vs->bits + (size_t)e->id * (size_t)vs->words; }

static void collect(var_sets *vs, const te_expr *e) {
  if (!e || vs->done[e->id]) return;
  vs->done[e->id] = 1;
  uint64_t *s = set_of(vs, e);
  const te_expr *kids[3] = {e->a, e->b, e->c};
  for (int k = 0; k < 3; k++) {
    if (!kids[k]) continue;
    collect(vs, kids[k]);
    uint64_t *c = set_of(vs, kids[k]);
    for (int w = 0; w < vs->words; w++) s[w] |= c[w];
  }
  if (e->op == TE_VAR) s[e->var / 64] |= 1ull << (e->var % 64);
  if (e->op == TE_REDUCE) {
    s[e->var / 64] &= ~(1ull << (e->var % 64));
    vs->reduces[vs->n_reduces++] = e;
  }
}

static bool has(const uint64_t *s, int var) { return (s[var / 64] >> (var % 64)) & 1; }

static int cmp_id(const void *a, const void *b) {
  const te_expr *x = *(const te_expr *const *)a, *y = *(const te_expr *const *)b;
  return x->id - y->id;
}

/* Places every reduction of the nest's values (out->tile_values[0..n)) and
 * sets parallel_dims, grain and the loop kinds. *reads_tile_dim: whether a
 * reduction reads the innermost parallel loop's variable. */
static kiln_status_t place(te_builder *b, const kiln_loop_schedule *s, int n_values, kiln_loop_nest *out,
                           bool *reads_tile_dim) {
  int rank = out->rank;
  /* Parallel loop: enough outer dims that there is work for every thread,
   * but never the innermost (it is the vectorized one) unless rank is 1. */
  int pd = s->parallel_dims;
  if (pd == -1) {
    pd = 0;
    int64_t outer = 1;
    while (pd < rank - 1 && outer < 64) outer *= out->extents[pd++];
    if (rank == 1) pd = 1;
  }
  int n_exprs = te_expr_count(b), n_vars = te_var_count(b);
  var_sets vs = {(n_vars + 63) / 64, NULL, NULL, NULL, 0};
  vs.bits = calloc((size_t)n_exprs * (size_t)vs.words + 1, sizeof(uint64_t));
  vs.done = calloc((size_t)n_exprs + 1, 1);
  vs.reduces = calloc((size_t)n_exprs + 1, sizeof *vs.reduces);
  int *level_of_var = malloc(((size_t)n_vars + 1) * sizeof(int));
  const te_expr **owner_of_var = calloc((size_t)n_vars + 1, sizeof *owner_of_var);
  kiln_status_t st = NULL;
  if (!vs.bits || !vs.done || !vs.reduces || !level_of_var || !owner_of_var) {
    st = KILN_OOM();
    goto done;
  }
  for (int t = 0; t < n_values; t++) collect(&vs, out->tile_values[t]);
  qsort(vs.reduces, (size_t)vs.n_reduces, sizeof *vs.reduces, cmp_id);
  for (int v = 0; v < n_vars; v++) level_of_var[v] = -2;
  for (int i = 0; i < rank; i++) level_of_var[out->vars[i]] = i;
  for (int r = 0; r < vs.n_reduces; r++) owner_of_var[vs.reduces[r]->var] = vs.reduces[r];
  free(out->sites);
  out->n_sites = 0;
  out->sites = calloc((size_t)vs.n_reduces + 1, sizeof *out->sites);
  if (!out->sites) {
    st = KILN_OOM();
    goto done;
  }
  for (int r = 0; r < vs.n_reduces; r++) {
    const te_expr *red = vs.reduces[r];
    const uint64_t *fv = set_of(&vs, red);
    kiln_reduce_site site = {red, -1, NULL};
    for (int v = 0; v < n_vars; v++) {
      if (!has(fv, v)) continue;
      if (level_of_var[v] >= 0) {
        if (level_of_var[v] > site.level) site.level = level_of_var[v];
      } else if (owner_of_var[v]) {
        /* Inside an enclosing reduction: the innermost one (smallest id) wins. */
        if (!site.owner || owner_of_var[v]->id < site.owner->id) site.owner = owner_of_var[v];
      }
    }
    out->sites[out->n_sites++] = site;
  }
  /* GPU mapping: every outer loop up to the first a reduction depends on,
   * so no reduction is computed twice. */
  bool gpu = pd == KILN_PARALLEL_UNTIL_REDUCTION;
  if (gpu) {
    pd = rank;
    for (int r = 0; r < out->n_sites; r++)
      if (!out->sites[r].owner && out->sites[r].level + 1 < pd) pd = out->sites[r].level + 1;
  }
  /* Chosen for threads: no deeper than a reduction's loop either. A
   * reduction placed at loop L inside a parallel loop flattened over
   * deeper loops is computed once per iteration of those (Softmax over the
   * flattened [1000, 1, 1] of an opset-11 classifier: its max and sum
   * 1000 times); fewer parallel iterations cost less than that. */
  if (s->parallel_dims == -1)
    for (int r = 0; r < out->n_sites; r++)
      if (!out->sites[r].owner && out->sites[r].level >= 0 && out->sites[r].level + 1 < pd)
        pd = out->sites[r].level + 1;
  out->parallel_dims = pd;
  *reads_tile_dim = false;
  for (int r = 0; r < out->n_sites && pd > 0; r++)
    if (has(set_of(&vs, out->sites[r].reduce), out->vars[pd - 1])) *reads_tile_dim = true;
  int64_t inner = 1;
  for (int i = pd; i < rank; i++) inner *= out->extents[i];
  /* The work of one parallel iteration: its elements, and the reductions
   * it computes, each as often as the loops outside its place repeat it
   * (a ReduceSum of [64, 32, 28, 28] over (0, 2, 3) is 32 iterations of
   * 50176 additions: counted as 32 elements, all of them went to one
   * chunk, one thread). */
  int64_t work = inner;
  for (int r = 0; r < out->n_sites && inner > 0; r++) {
    const kiln_reduce_site *site = &out->sites[r];
    if (site->owner) continue;
    kiln_reduce_chain chain;
    kiln_reduce_chain_of(site->reduce, &chain);
    int64_t times = 1;
    for (int i = pd; i <= site->level && i < rank; i++) times *= out->extents[i];
    int64_t add = chain.extent > INT64_MAX / (times > 0 ? times : 1) ? INT64_MAX : chain.extent * times;
    work = add > INT64_MAX - work ? INT64_MAX : work + add;
  }
  out->grain = work > 0 ? (s->min_chunk_elems + work - 1) / work : 1;
  if (out->grain < 1) out->grain = 1;
  /* Reductions computed inside the flattened parallel loop cannot sit
   * between its dims: put them at the start of its body. */
  for (int r = 0; r < out->n_sites; r++) {
    kiln_reduce_site *site = &out->sites[r];
    if (!site->owner && site->level >= 0 && site->level < pd) site->level = pd - 1;
  }
  for (int l = 0; l < rank; l++)
    out->kinds[l] = l < pd ? (gpu ? KILN_LOOP_GPU_THREAD : KILN_LOOP_PARALLEL)
                    : l < rank - 1 ? KILN_LOOP_SERIAL
                    : out->unroll_inner ? KILN_LOOP_UNROLL
                                        : KILN_LOOP_VECTOR;
done:
  free(vs.bits);
  free(vs.done);
  free(vs.reduces);
  free(level_of_var);
  free(owner_of_var);
  return st;
}

kiln_status_t kiln_schedule_kernel(te_builder *b, const te_tensor *root, int out_buf, const kiln_loop_schedule *sched,
                                   kiln_loop_nest *out) {
  memset(out, 0, sizeof *out);
  kiln_loop_schedule s = sched ? *sched : kiln_loop_schedule_default();
  out->rank = root->rank;
  out->out_buf = out_buf;
  out->unroll_inner = s.unroll_inner;
  out->thread_tile = 1;
  te_expr *idx[KILN_MAX_RANK];
  for (int i = 0; i < root->rank; i++) {
    out->extents[i] = root->dims[i];
    out->vars[i] = te_new_var(b);
    te_set_var_extent(b, out->vars[i], root->dims[i]);
    idx[i] = te_var(b, out->vars[i]);
  }
  te_expr *value = te_at(b, root, idx);
  KILN_TRY(te_builder_status(b));
  if (!value) return kiln_error(KILN_INTERNAL, "kernel body could not be built");
  out->value = out->tile_values[0] = value;
  bool reads_tile_dim = false;
  kiln_status_t st = place(b, &s, 1, out, &reads_tile_dim);
  /* The contraction template comes first: it tiles both output sides, so a
   * thread tile on top would only repeat what its local buffers share. */
  if (!st && s.group_threads && s.parallel_dims == KILN_PARALLEL_UNTIL_REDUCTION)
    kiln_schedule_contraction_tiles(out, s.group_threads, s.min_groups);
  /* A convolution goes to the runtime's conv routine (its algorithm choice
   * covers 1x1 ones too); other contractions over matrices to its GEMM. */
  if (!st && s.tensorize_gemm) kiln_schedule_conv(b, out);
  if (!st && s.tensorize_gemm) kiln_schedule_gemm(b, out, s.gemm_any_size);
  if (!st && s.tensorize_gemm) kiln_schedule_pool(b, out);
  if (!st && s.tensorize_gemm) kiln_schedule_resample(b, out);
  /* Then cooperative rows: a row's reductions split over a group replace
   * one thread per row (and any thread tile, which would copy them). */
  if (!st && s.row_threads && s.parallel_dims == KILN_PARALLEL_UNTIL_REDUCTION)
    st = kiln_schedule_cooperative_rows(b, out, s.row_threads, 32, s.row_subgroups, 0);
  /* Jamming the innermost loop (before thread tiles: it saves the work a
   * thread tile would only share the loads of). */
  if (!st && s.jam_inner && s.parallel_dims == KILN_PARALLEL_UNTIL_REDUCTION)
    st = kiln_schedule_jam_inner(b, out, s.jam_inner);
  /* Thread tiling (not with the template): copies of the element at v + j,
   * placed together (their reductions loop over the same variables, so
   * they run as one loop). */
  int tile = KILN_MIN(s.thread_tile, KILN_MAX_THREAD_TILE), pd = out->parallel_dims;
  if (!st && !out->tiles.n_red && !out->rows.threads && !out->gemm.ok && !out->conv.ok && !out->pool.ok && !out->resample.ok && out->jam_inner <= 1 && tile > 1 && s.parallel_dims == KILN_PARALLEL_UNTIL_REDUCTION && pd > 0 &&
      reads_tile_dim && out->extents[pd - 1] % tile == 0 && out->extents[pd - 1] > tile) {
    int v = out->vars[pd - 1];
    for (int j = 1; j < tile; j++)
      out->tile_values[j] = te_substitute(b, value, v, te_iadd(b, te_var(b, v), te_idx(b, j)));
    st = te_builder_status(b);
    if (!st) {
      out->thread_tile = tile;
      st = place(b, &s, tile, out, &reads_tile_dim);
    }
    if (!st && out->parallel_dims != pd) st = kiln_error(KILN_INTERNAL, "thread tiling moved the parallel loops");
  }
  /* The index width: 32-bit where every index fits. */
  if (!st && s.narrow_indices) {
    bool oom = false;
    out->index32 = kiln_loop_nest_fits_int32(b, out, false, &oom);
    if (oom) st = KILN_OOM();
  }
  if (st) kiln_loop_nest_free(out);
  return st;
}

/* Whether e holds a reduction not reading var whose enclosing reduction
 * chain (up to e) reads it: each iteration of var's loop would repeat it. */
static bool repeats_invariant_sum(const te_expr *e, int var, bool inside_variant) {
  if (!e) return false;
  if (e->op == TE_REDUCE) {
    bool reads = te_uses_var(e, var);
    if (inside_variant && !reads) return true;
    if (reads) inside_variant = true;
  }
  return repeats_invariant_sum(e->a, var, inside_variant) || repeats_invariant_sum(e->b, var, inside_variant) ||
         repeats_invariant_sum(e->c, var, inside_variant);
}

kiln_status_t kiln_schedule_jam_inner(te_builder *b, kiln_loop_nest *nest, int max_extent) {
  int rank = nest->rank, pd = nest->parallel_dims;
  if (nest->tiles.n_red || nest->rows.threads || nest->thread_tile > 1 || nest->gemm.ok || nest->conv.ok || nest->pool.ok || nest->resample.ok ||
      nest->jam_inner > 1)
    return NULL;
  if (rank < 1 || pd != rank - 1 || max_extent > KILN_MAX_JAM) return NULL;
  int64_t e = nest->extents[rank - 1];
  int v = nest->vars[rank - 1];
  if (e < 2 || e > max_extent || !repeats_invariant_sum(nest->value, v, false)) return NULL;
  for (int j = 0; j < e; j++) nest->tile_values[j] = te_substitute(b, (te_expr *)nest->value, v, te_idx(b, j));
  KILN_TRY(te_builder_status(b));
  /* Re-place the copies' reductions with the parallel dims kept. */
  kiln_loop_schedule s = kiln_loop_schedule_default();
  s.parallel_dims = pd;
  kiln_loop_kind kinds[KILN_MAX_RANK];
  memcpy(kinds, nest->kinds, sizeof kinds);
  int64_t grain = nest->grain;
  bool reads_tile_dim;
  KILN_TRY(place(b, &s, (int)e, nest, &reads_tile_dim));
  memcpy(nest->kinds, kinds, sizeof kinds);
  nest->grain = grain;
  nest->jam_inner = (int)e;
  return NULL;
}

int64_t kiln_loop_nest_threads(const kiln_loop_nest *nest) {
  const kiln_contraction_tiles *t = &nest->tiles;
  if (t->n_red) return t->batch * t->groups_m * t->groups_n * t->threads_m * t->threads_n;
  if (nest->rows.threads) return nest->rows.rows * nest->rows.threads;
  int64_t total = 1;
  for (int i = 0; i < nest->parallel_dims; i++) total *= nest->extents[i];
  return nest->thread_tile > 1 ? total / nest->thread_tile : total;
}

int kiln_loop_nest_group_size(const kiln_loop_nest *nest) {
  if (nest->tiles.n_red) return nest->tiles.threads_m * nest->tiles.threads_n;
  return nest->rows.threads;
}

kiln_status_t kiln_loop_nest_dispatch(const kiln_loop_nest *nest, int group, int64_t max_per_dim, uint32_t out[3]) {
  int size = kiln_loop_nest_group_size(nest);
  if (size) group = size;
  if (group < 1 || max_per_dim < 1) return kiln_error(KILN_INTERNAL, "dispatch of groups of %d, %lld per dimension", group, (long long)max_per_dim);
  int64_t threads = kiln_loop_nest_threads(nest);
  int64_t groups = (threads + group - 1) / group;
  out[0] = (uint32_t)(groups < 1 ? 0 : groups);
  out[1] = out[2] = 1;
  if (groups <= max_per_dim) return NULL;
  int64_t gy = (groups + max_per_dim - 1) / max_per_dim;
  if (gy > max_per_dim)
    return kiln_error(KILN_UNSUPPORTED, "%lld groups exceed a %lld x %lld dispatch", (long long)groups,
                      (long long)max_per_dim, (long long)max_per_dim);
  out[0] = (uint32_t)((groups + gy - 1) / gy);
  out[1] = (uint32_t)gy;
  return NULL;
}

void kiln_loop_nest_free(kiln_loop_nest *n) {
  free(n->sites);
  n->sites = NULL;
  n->n_sites = 0;
}

static bool fits32(int64_t v) { return v >= -INT32_MAX && v <= INT32_MAX; }

static bool scan_fits32(const te_expr *e, char *seen) {
  if (!e || seen[e->id]) return true;
  seen[e->id] = 1;
  if (e->op == TE_CONST && (e->dtype == KILN_DTYPE_I64 || e->dtype == KILN_DTYPE_U64) && !fits32(e->i)) return false;
  if (e->op == TE_REDUCE && !fits32(e->extent)) return false;
  return scan_fits32(e->a, seen) && scan_fits32(e->b, seen) && scan_fits32(e->c, seen);
}

bool kiln_loop_nest_fits_int32(const te_builder *b, const kiln_loop_nest *nest, bool i64_as_pairs, bool *oom) {
  *oom = false;
  int64_t total = 1;
  for (int i = 0; i < nest->rank; i++) {
    total = nest->extents[i] && total > INT64_MAX / nest->extents[i] ? INT64_MAX : total * nest->extents[i];
    if (!fits32(nest->extents[i])) return false;
  }
  if (!fits32(total)) return false;
  for (int i = 0; i < te_buffer_count(b); i++) {
    const te_buffer *buf = te_get_buffer(b, i);
    bool wide = buf->dtype == KILN_DTYPE_I64 || buf->dtype == KILN_DTYPE_U64;
    if (wide && !i64_as_pairs) return false;
    int64_t n = 1;
    for (int d = 0; d < buf->rank; d++) n = buf->dims[d] && n > INT64_MAX / buf->dims[d] ? INT64_MAX : n * buf->dims[d];
    bool pairs = buf->dtype == KILN_DTYPE_I64; /* GLSL has no 64-bit unsigned pairs: u64 needs int64 anyway */
    if (!fits32(pairs && n < INT64_MAX / 2 ? 2 * n : n)) return false;
  }
  char *seen = calloc((size_t)te_expr_count(b) + 1, 1);
  if (!seen) {
    *oom = true;
    return false;
  }
  /* Every value the nest stores (the thread tile's copies add at most 7 to
   * one index, within the extents checked above). */
  bool ok = scan_fits32(nest->value, seen);
  free(seen);
  return ok;
}

/* The contraction template's schedule step (loopnest.h,
 * kiln_contraction_tiles): recognise a sum of products in a GPU-mapped
 * nest and choose its group tile. */
#include "codegen/loopnest.h"

/* Smallest power of two >= x, clamped to [lo, hi]. */
static int tile_for(int64_t x, int lo, int hi) {
  int t = lo;
  while (t < hi && t < x) t *= 2;
  return t;
}

/* kiln_contraction_match for sums and factors of `dtype`. */
static bool contraction_match(const kiln_loop_nest *nest, kiln_dtype dtype, kiln_contraction_tiles *out) {
  kiln_contraction_tiles t = {0};
  memset(out, 0, sizeof *out);
  /* One chain of nested sums placed in the innermost output loop (every
   * output loop reads it) and nothing else: the element is f(sum). */
  if (nest->thread_tile > 1 || nest->n_sites < 1 || nest->n_sites > KILN_MAX_RANK || nest->rank < 1) return false;
  /* Sites are in creation order (inner sums first): follow the owners
   * from the one outside all others. */
  const te_expr *outer = NULL;
  for (int n = 0; n < nest->n_sites; n++) {
    const te_expr *next = NULL;
    for (int i = 0; i < nest->n_sites; i++)
      if (nest->sites[i].owner == outer) {
        if (next) return false; /* two reductions at one place */
        next = nest->sites[i].reduce;
      }
    if (!next || next->rop != TE_RSUM || next->dtype != dtype || next->extent < 1) return false;
    if (outer && outer->a != next) return false; /* the sum's body is more than the inner sum */
    t.red[t.n_red++] = outer = next;
  }
  const te_expr *body = t.red[t.n_red - 1]->a;
  if (body->op != TE_MUL || body->a->dtype != dtype || body->b->dtype != dtype) return false;
  /* The factor that reads the innermost output loop is b (the N side), so
   * neighbouring threads store neighbouring outputs. */
  int last = nest->vars[nest->rank - 1];
  bool swap = te_uses_var(body->a, last) && !te_uses_var(body->b, last);
  t.a = swap ? body->b : body->a;
  t.b = swap ? body->a : body->b;
  t.m = t.n = t.k = t.batch = 1;
  for (int l = 0; l < nest->rank; l++) {
    bool in_a = te_uses_var(t.a, nest->vars[l]), in_b = te_uses_var(t.b, nest->vars[l]);
    if (in_a && !in_b) {
      t.m_loops[t.n_m++] = l;
      t.m *= nest->extents[l];
    } else if (in_b && !in_a) {
      t.n_loops[t.n_n++] = l;
      t.n *= nest->extents[l];
    } else {
      t.batch_loops[t.n_batch++] = l;
      t.batch *= nest->extents[l];
    }
  }
  for (int i = 0; i < t.n_red; i++) t.k *= t.red[i]->extent;
  *out = t;
  return true;
}

bool kiln_contraction_match(const kiln_loop_nest *nest, kiln_contraction_tiles *out) {
  return contraction_match(nest, KILN_DTYPE_F32, out);
}

bool kiln_contraction_match_i32(const kiln_loop_nest *nest, kiln_contraction_tiles *out) {
  return contraction_match(nest, KILN_DTYPE_I32, out);
}

void kiln_schedule_contraction_tiles(kiln_loop_nest *nest, int group_threads, int min_groups) {
  kiln_contraction_tiles t;
  /* Square thread grids of 64 or 256 (GPUs); 32 threads of 8 x 4 with
   * tiles up to 64 x 64 (8 x 16 outputs each) for drivers that run a
   * group's threads as SIMD lanes on one CPU core (llvmpipe): there few
   * threads with big register blocks win, each barrier switching between
   * all the group's lane batches. */
  int side = group_threads == 64 || group_threads == 32 ? 8 : group_threads == 256 ? 16 : 0;
  if (!side || nest->parallel_dims != nest->rank || !kiln_contraction_match(nest, &t)) return;
  /* Worth it when every tile is mostly full and the k loop long enough to
   * amortize the copies: below that, one thread per output (with thread
   * tiles) does as well. Extents past 2^31 keep the plain mapping. */
  if (t.m < side || t.n < side || t.k < 8 || t.m > INT32_MAX || t.n > INT32_MAX || t.k > INT32_MAX) return;
  /* Below about a million multiply-adds the copies and barriers cost more
   * than the reuse saves (PoCL: the transformer encoder's 0.2M MatMuls ran
   * 2.5x slower tiled). In groups of 32 (llvmpipe) from 16k: there one
   * thread per output loses to the register blocks sooner (the transformer
   * encoder on lavapipe: 17.1 ms with the 1M bound, 12.6 ms with 16k,
   * 13.7 ms with 4k). */
  double macs = (double)t.batch * (double)t.m * (double)t.n * (double)t.k;
  if (macs < (group_threads == 32 ? 16384.0 : (double)(1 << 20))) return;
  t.threads_m = t.threads_n = side;
  t.tile_m = tile_for(t.m, side, 4 * side);
  t.tile_n = tile_for(t.n, side, 4 * side);
  if (group_threads == 32) {
    t.threads_n = 4;
    t.tile_m = tile_for(t.m, 16, 8 * side);
    t.tile_n = tile_for(t.n, 16, 16 * t.threads_n);
  }
  t.tile_k = 16;
  for (;;) {
    t.groups_m = (t.m + t.tile_m - 1) / t.tile_m;
    t.groups_n = (t.n + t.tile_n - 1) / t.tile_n;
    if (t.batch * t.groups_m * t.groups_n >= min_groups) break;
    /* Too few groups to fill the device: halve the larger tile side. */
    if (t.tile_n >= t.tile_m && t.tile_n > side) t.tile_n /= 2;
    else if (t.tile_m > side) t.tile_m /= 2;
    else break;
  }
  int64_t groups = t.batch * t.groups_m * t.groups_n;
  if (groups > INT32_MAX || 2 * groups < min_groups) return;
  nest->tiles = t;
  for (int l = 0; l < nest->rank; l++) nest->kinds[l] = KILN_LOOP_GPU_BLOCK;
}

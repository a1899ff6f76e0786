/* The contraction template (loopnest.h, kiln_contraction_tiles) in any GPU
 * dialect of the C-family emitter: the group's tile copied through local
 * memory in steps of tile_k, per-thread accumulators in registers, the
 * element's epilogue and store per output. What differs between GPU
 * languages (group and thread ids, the local qualifier, the barrier) comes
 * from a render_gpu_dialect. */
#include <stdarg.h>
#include <stdio.h>

#include "codegen/render_internal.h"

static void lit(render_ctx *r, int64_t v, char *buf, size_t n) { r->d->int_literal(r, KILN_DTYPE_I64, v, buf, n); }

/* What both slab copies need: the sums' variables and extents (the k run),
 * and the literals of the operand's extent, of K and of 0.0f. */
static void copy_setup(render_ctx *r, const kiln_contraction_tiles *t, int64_t extent, int *kvars, int64_t *kext,
                       char ext[40], char kall[40], char zero[40]) {
  for (int i = 0; i < t->n_red; i++) {
    kvars[i] = t->red[i]->var;
    kext[i] = t->red[i]->extent;
  }
  lit(r, extent, ext, 40);
  lit(r, t->k, kall, 40);
  r->d->float_literal(r, KILN_DTYPE_F32, 0.0, zero, 40);
}

/* The loop over a slab's `count` elements, nt threads apart: a constant
 * count of passes (unrolled where the dialect can ask for it, so a long K
 * spends no loop passes on a driver that limits them; ResNet-50 on
 * lavapipe ran as fast either way: 0.97x and 1.00x in two A/Bs), element
 * kiln_e, guarded where the threads do not divide the slab. */
static void open_slab_loop(render_ctx *r, const render_gpu_dialect *g, int count, int nt) {
  int passes = (count + nt - 1) / nt;
  render_line(r, "%sfor (int kiln_r = 0; kiln_r < %d; kiln_r++) {", g->unroll ? g->unroll : "", passes);
  render_open_scope(r);
  if (g->unroll) render_trips_enter_unrolled(r, passes);
  else render_trips_enter(r, passes);
  render_line(r, "const int kiln_e = kiln_t + kiln_r * %d;", nt);
  if (count % nt) render_line(r, "if (kiln_e < %d) {", count);
}

static void close_slab_loop(render_ctx *r, int count, int nt) {
  if (count % nt) render_line(r, "}");
  render_trips_leave(r);
  render_close_scope(r);
  render_line(r, "}");
}

/* copy_tile four elements at a time: each thread loads a vec4 along the
 * contiguous side (the guard on its first element covers all four: that
 * side's extent is a multiple of 4) and stores its lanes, or the whole
 * vec4 where the local tile's vectors run the same way (b). */
static void copy_tile4(render_ctx *r, const kiln_loop_nest *nest, const render_gpu_dialect *g, bool vec, int buf4,
                       const te_expr *factor, const int *loops, int n_loops, int64_t extent, int width, int stride,
                       bool k_fastest, const char *group, const char *dst) {
  const kiln_contraction_tiles *t = &nest->tiles;
  const char *ity = r->d->value_type(r, KILN_DTYPE_I64), *vty = g->vec4_type;
  int nt = t->threads_m * t->threads_n, kvars[KILN_MAX_RANK], count = t->tile_k * width / 4;
  int64_t kext[KILN_MAX_RANK];
  char ext[40], kall[40], zero[40];
  copy_setup(r, t, extent, kvars, kext, ext, kall, zero);
  open_slab_loop(r, g, count, nt);
  if (k_fastest) render_line(r, "const int kiln_kk = (kiln_e %% %d) * 4, kiln_j = kiln_e / %d;", t->tile_k / 4, t->tile_k / 4);
  else render_line(r, "const int kiln_j = (kiln_e %% %d) * 4, kiln_kk = kiln_e / %d;", width / 4, width / 4);
  render_line(r, "const %s kiln_i = %s * %d + kiln_j, kiln_k = kiln_k0 + kiln_kk;", ity, group, width);
  /* Zeroed lane by lane: the dialects spell a vector constructor differently. */
  render_line(r, "%s kiln_x;", vty);
  render_line(r, "kiln_x.x = kiln_x.y = kiln_x.z = kiln_x.w = %s;", zero);
  render_line(r, "if (kiln_i < %s && kiln_k < %s) {", ext, kall);
  render_open_scope(r);
  render_unflatten_loops(r, nest, "kiln_i", loops, n_loops);
  render_unflatten(r, "kiln_k", kvars, kext, t->n_red);
  render_ensure(r, factor->a);
  char index[48], load[256];
  render_name_of(r, factor->a, index, sizeof index);
  g->vec4_load(r, buf4, index, load, sizeof load);
  render_line(r, "kiln_x = %s;", load);
  render_close_scope(r);
  render_line(r, "}");
  static const char lanes[] = "xyzw";
  if (!k_fastest && vec) {
    render_line(r, "%s[kiln_kk * %d + (kiln_j >> 2)] = kiln_x;", dst, stride);
  } else {
    for (int c = 0; c < 4; c++) {
      char elem[64], lane[512];
      const char *kk = k_fastest ? " + " : "", *jj = k_fastest ? "" : " + ";
      char kc[8] = "", jc[8] = "";
      snprintf(k_fastest ? kc : jc, 8, "%d", c);
      if (vec) {
        snprintf(elem, sizeof elem, "(kiln_kk%s%s) * %d + ((kiln_j%s%s) >> 2)", kk, kc, stride, jj, jc);
        char lidx[32];
        snprintf(lidx, sizeof lidx, "(kiln_j%s%s) & 3", jj, jc);
        snprintf(lane, sizeof lane, g->vec4_lane, dst, elem, lidx);
        render_line(r, "%s = kiln_x.%c;", lane, lanes[c]);
      } else {
        render_line(r, "%s[(kiln_kk%s%s) * %d + kiln_j%s%s] = kiln_x.%c;", dst, kk, kc, stride, jj, jc, lanes[c]);
      }
    }
  }
  close_slab_loop(r, count, nt);
}

int render_tiles_vec4_buffer(const kiln_loop_nest *nest, int which) {
  const kiln_contraction_tiles *t = &nest->tiles;
  const te_expr *f = which ? t->b : t->a;
  te_affine af;
  if (!t->n_red || !f || f->op != TE_LOAD || f->dtype != KILN_DTYPE_F32 || !te_affine_of(f->a, &af) || af.c0 % 4) return -1;
  int run[KILN_MAX_RANK], n_run = which ? t->n_n : t->n_red;
  int64_t ext[KILN_MAX_RANK], total = 1;
  for (int i = 0; i < n_run; i++) {
    run[i] = which ? nest->vars[t->n_loops[i]] : t->red[i]->var;
    ext[i] = which ? nest->extents[t->n_loops[i]] : t->red[i]->extent;
    total *= ext[i];
  }
  if (total % 4) return -1;
  int64_t stride = 1;
  for (int i = n_run - 1; i >= 0; i--) {
    if (ext[i] != 1 && te_affine_coef(&af, run[i]) != stride) return -1;
    stride *= ext[i];
  }
  /* Every other variable: a loop of the nest or a sum of the template, at a multiple of 4. */
  for (int i = 0; i < af.n; i++) {
    bool in_run = false, known = false;
    for (int k = 0; k < n_run; k++) in_run |= run[k] == af.var[i];
    for (int l = 0; l < nest->rank; l++) known |= nest->vars[l] == af.var[i];
    for (int k = 0; k < t->n_red; k++) known |= t->red[k]->var == af.var[i];
    if (!known || (!in_run && af.coef[i] % 4)) return -1;
  }
  return f->buf;
}

/* Copies one operand's tile_k x width slab into local buffer `dst` (row
 * stride `stride`): element e of the slab is (kk, j) with the operand's
 * contiguous side fastest, zero outside its extent and k's; with buf4 >= 0
 * (render_tiles_vec4_buffer) four consecutive elements of that side per
 * load. */
static void copy_tile(render_ctx *r, const kiln_loop_nest *nest, const render_gpu_dialect *g, bool vec, int buf4,
                      const te_expr *factor, const int *loops, int n_loops, int64_t extent, int width, int stride,
                      bool k_fastest, const char *group, const char *dst) {
  const kiln_contraction_tiles *t = &nest->tiles;
  if (buf4 >= 0) {
    copy_tile4(r, nest, g, vec, buf4, factor, loops, n_loops, extent, width, stride, k_fastest, group, dst);
    return;
  }
  const char *ity = r->d->value_type(r, KILN_DTYPE_I64), *fty = r->d->value_type(r, KILN_DTYPE_F32);
  int nt = t->threads_m * t->threads_n, kvars[KILN_MAX_RANK];
  int64_t kext[KILN_MAX_RANK];
  char ext[40], kall[40], zero[40];
  copy_setup(r, t, extent, kvars, kext, ext, kall, zero);
  int count = t->tile_k * width;
  open_slab_loop(r, g, count, nt);
  if (k_fastest) render_line(r, "const int kiln_kk = kiln_e %% %d, kiln_j = kiln_e / %d;", t->tile_k, t->tile_k);
  else render_line(r, "const int kiln_j = kiln_e %% %d, kiln_kk = kiln_e / %d;", width, width);
  render_line(r, "const %s kiln_i = %s * %d + kiln_j, kiln_k = kiln_k0 + kiln_kk;", ity, group, width);
  render_line(r, "%s kiln_x = %s;", fty, zero);
  render_line(r, "if (kiln_i < %s && kiln_k < %s) {", ext, kall);
  render_open_scope(r);
  render_unflatten_loops(r, nest, "kiln_i", loops, n_loops);
  render_unflatten(r, "kiln_k", kvars, kext, t->n_red);
  render_ensure(r, factor);
  char name[48];
  render_name_of(r, factor, name, sizeof name);
  render_line(r, "kiln_x = %s;", name);
  render_close_scope(r);
  render_line(r, "}");
  char value[64] = "kiln_x";
  if (g->half_type) snprintf(value, sizeof value, "%s(kiln_x)", g->half_type);
  if (vec) {
    char elem[48], lane[512];
    snprintf(elem, sizeof elem, "kiln_kk * %d + (kiln_j >> 2)", stride);
    snprintf(lane, sizeof lane, g->vec4_lane, dst, elem, "kiln_j & 3");
    render_line(r, "%s = %s;", lane, value);
  } else {
    render_line(r, "%s[kiln_kk * %d + kiln_j] = %s;", dst, stride, value);
  }
  close_slab_loop(r, count, nt);
}

/* Vector tiles: each thread's block is a multiple of 4 both ways, so it
 * reads its a and b values from local memory four at a time (a quarter of
 * the loads, which on a SIMD-on-CPU driver are per-lane gathers) and owns
 * a contiguous block (rows ty * rm + i, columns tx * rn + j); scalar
 * tiles own rows threads_m and columns threads_n apart, so neighbouring
 * threads read neighbouring local values. */
static bool tiles_vec4(const kiln_contraction_tiles *t, const render_gpu_dialect *g) {
  return g->vec4_type && (t->tile_m / t->threads_m) % 4 == 0 && (t->tile_n / t->threads_n) % 4 == 0;
}

/* Row strides of the local tiles, in their elements (floats or vec4s):
 * a's rows are padded by one so the copy's stores (k fastest) fall in
 * different banks. */
static int tile_stride_a(const kiln_contraction_tiles *t, bool vec) { return (vec ? t->tile_m / 4 : t->tile_m) + 1; }
static int tile_stride_b(const kiln_contraction_tiles *t, bool vec) { return vec ? t->tile_n / 4 : t->tile_n; }

void render_gpu_locals(render_ctx *r, const kiln_loop_nest *nest, const render_gpu_dialect *g) {
  const char *fty = r->d->value_type(r, KILN_DTYPE_F32);
  const kiln_contraction_tiles *t = &nest->tiles;
  if (t->n_red) {
    bool vec = tiles_vec4(t, g);
    const char *ety = vec ? (g->half_type ? g->half4_type : g->vec4_type) : (g->half_type ? g->half_type : fty);
    render_line(r, "%s %s kiln_la[%d];", g->local_decl, ety, t->tile_k * tile_stride_a(t, vec));
    render_line(r, "%s %s kiln_lb[%d];", g->local_decl, ety, t->tile_k * tile_stride_b(t, vec));
  }
  if (nest->rows.threads) render_line(r, "%s %s kiln_red[%d];", g->local_decl, fty, nest->rows.threads);
}

/* One step of 4 k's with half tiles: the thread's a and b values of each
 * k (kiln_a<i>_<q>, kiln_b<j>_<q>), then per output the four products
 * summed in half and the sum added in f32, so the rounding error is about
 * 4 * 2^-11 of sum |a||b| whatever K is. */
static void render_half_products(render_ctx *r, const kiln_contraction_tiles *t, const render_gpu_dialect *g, bool vec,
                                 int stride_a, int stride_b) {
  static const char lanes[] = "xyzw";
  const char *fty = r->d->value_type(r, KILN_DTYPE_F32);
  int rm = t->tile_m / t->threads_m, rn = t->tile_n / t->threads_n;
  for (int q = 0; q < 4; q++) {
    if (vec) {
      for (int i = 0; i < rm / 4; i++)
        render_line(r, "const %s kiln_a%d_%d = kiln_la[(kiln_kk + %d) * %d + kiln_ty * %d + %d];", g->half4_type, i, q, q,
                    stride_a, rm / 4, i);
      for (int j = 0; j < rn / 4; j++)
        render_line(r, "const %s kiln_b%d_%d = kiln_lb[(kiln_kk + %d) * %d + kiln_tx * %d + %d];", g->half4_type, j, q, q,
                    stride_b, rn / 4, j);
    } else {
      for (int i = 0; i < rm; i++)
        render_line(r, "const %s kiln_a%d_%d = kiln_la[(kiln_kk + %d) * %d + kiln_ty + %d];", g->half_type, i, q, q,
                    stride_a, i * t->threads_m);
      for (int j = 0; j < rn; j++)
        render_line(r, "const %s kiln_b%d_%d = kiln_lb[(kiln_kk + %d) * %d + kiln_tx + %d];", g->half_type, j, q, q,
                    stride_b, j * t->threads_n);
    }
  }
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < rn; j++) {
      char term[4][64];
      for (int q = 0; q < 4; q++) {
        if (vec)
          snprintf(term[q], sizeof term[q], "kiln_a%d_%d.%c * kiln_b%d_%d.%c", i / 4, q, lanes[i % 4], j / 4, q, lanes[j % 4]);
        else
          snprintf(term[q], sizeof term[q], "kiln_a%d_%d * kiln_b%d_%d", i, q, j, q);
      }
      render_line(r, "kiln_c%d_%d += %s(%s + %s + %s + %s);", i, j, fty, term[0], term[1], term[2], term[3]);
    }
}

void render_contraction_tiles(render_ctx *r, const kiln_loop_nest *nest, const render_gpu_dialect *g) {
  const kiln_contraction_tiles *t = &nest->tiles;
  const char *ity = r->d->value_type(r, KILN_DTYPE_I64), *fty = r->d->value_type(r, KILN_DTYPE_F32);
  int rm = t->tile_m / t->threads_m, rn = t->tile_n / t->threads_n;
  bool vec = tiles_vec4(t, g);
  int stride_a = tile_stride_a(t, vec), stride_b = tile_stride_b(t, vec);
  char zero[40], kall[40], m[40], n[40];
  r->d->float_literal(r, KILN_DTYPE_F32, 0.0, zero, sizeof zero);
  lit(r, t->k, kall, sizeof kall);
  lit(r, t->m, m, sizeof m);
  lit(r, t->n, n, sizeof n);
  render_line(r, "const %s kiln_g = %s;", ity, g->group_id);
  if (!g->exact_groups) /* uniform over the group: the barriers stay legal */
    render_line(r, "if (kiln_g >= %lld) return;", (long long)(t->batch * t->groups_m * t->groups_n));
  render_line(r, "const int kiln_t = %s;", g->local_id);
  render_line(r, "const int kiln_tx = kiln_t %% %d, kiln_ty = kiln_t / %d;", t->threads_n, t->threads_n);
  render_line(r, "const %s kiln_gn = kiln_g %% %lld, kiln_gm = (kiln_g / %lld) %% %lld, kiln_gb = kiln_g / %lld;", ity,
       (long long)t->groups_n, (long long)t->groups_n, (long long)t->groups_m, (long long)(t->groups_n * t->groups_m));
  render_unflatten_loops(r, nest, "kiln_gb", t->batch_loops, t->n_batch);
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < rn; j++) render_line(r, "%s kiln_c%d_%d = %s;", fty, i, j, zero);
  render_line(r, "for (%s kiln_k0 = 0; kiln_k0 < %s; kiln_k0 += %d) {", ity, kall, t->tile_k);
  render_open_scope(r);
  render_trips_enter(r, (t->k + t->tile_k - 1) / t->tile_k);
  /* Vector loads where the dialect has them and the copies' runs allow. */
  int buf4[2] = {-1, -1};
  for (int w = 0; w < 2 && g->vec4_load && !g->half_type; w++) {
    char probe[256];
    buf4[w] = render_tiles_vec4_buffer(nest, w);
    if (buf4[w] >= 0 && !g->vec4_load(r, buf4[w], "0", probe, sizeof probe)) buf4[w] = -1;
  }
  copy_tile(r, nest, g, vec, buf4[0], t->a, t->m_loops, t->n_m, t->m, t->tile_m, stride_a, true, "kiln_gm", "kiln_la");
  copy_tile(r, nest, g, vec, buf4[1], t->b, t->n_loops, t->n_n, t->n, t->tile_n, stride_b, false, "kiln_gn", "kiln_lb");
  render_line(r, "%s", g->barrier);
  bool half = g->half_type != NULL;
  int run = half ? 4 : 1; /* k's per step of the local loop: tile_k (16) is a multiple of 4 */
  /* The local products unrolled only where their loop's passes would
   * not fit a limiting driver's budget (K past about 58000 with steps of
   * 16): unrolled, they made ResNet-50 on lavapipe 7% slower. */
  int64_t k_steps = (t->k + t->tile_k - 1) / t->tile_k;
  bool unroll_kk = g->unroll && r->max_trips && k_steps * (t->tile_k / run + 2) + 1 > r->max_trips;
  render_line(r, "%sfor (int kiln_kk = 0; kiln_kk < %d; kiln_kk += %d) {", unroll_kk ? g->unroll : "", t->tile_k, run);
  render_open_scope(r);
  if (unroll_kk) render_trips_enter_unrolled(r, t->tile_k / run);
  else render_trips_enter(r, t->tile_k / run);
  if (half) {
    render_half_products(r, t, g, vec, stride_a, stride_b);
  } else if (vec) {
    static const char lanes[] = "xyzw";
    for (int i = 0; i < rm / 4; i++)
      render_line(r, "const %s kiln_a%d = kiln_la[kiln_kk * %d + kiln_ty * %d + %d];", g->vec4_type, i, stride_a, rm / 4, i);
    for (int j = 0; j < rn / 4; j++)
      render_line(r, "const %s kiln_b%d = kiln_lb[kiln_kk * %d + kiln_tx * %d + %d];", g->vec4_type, j, stride_b, rn / 4, j);
    for (int i = 0; i < rm; i++)
      for (int j = 0; j < rn; j++)
        render_line(r, "kiln_c%d_%d += kiln_a%d.%c * kiln_b%d.%c;", i, j, i / 4, lanes[i % 4], j / 4, lanes[j % 4]);
  } else {
    for (int i = 0; i < rm; i++)
      render_line(r, "const %s kiln_a%d = kiln_la[kiln_kk * %d + kiln_ty + %d];", fty, i, stride_a, i * t->threads_m);
    for (int j = 0; j < rn; j++)
      render_line(r, "const %s kiln_b%d = kiln_lb[kiln_kk * %d + kiln_tx + %d];", fty, j, stride_b, j * t->threads_n);
    for (int i = 0; i < rm; i++)
      for (int j = 0; j < rn; j++) render_line(r, "kiln_c%d_%d += kiln_a%d * kiln_b%d;", i, j, i, j);
  }
  render_trips_leave(r);
  render_close_scope(r);
  render_line(r, "}");
  render_line(r, "%s", g->barrier);
  render_trips_leave(r);
  render_close_scope(r);
  render_line(r, "}");
  /* The element at each of the thread's outputs: the sum's accumulator in
   * place of the reduction, then the epilogue and the store. */
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < rn; j++) {
      render_line(r, "{");
      render_open_scope(r);
      if (vec)
        render_line(r, "const %s kiln_m = kiln_gm * %d + kiln_ty * %d + %d, kiln_n = kiln_gn * %d + kiln_tx * %d + %d;", ity,
                    t->tile_m, rm, i, t->tile_n, rn, j);
      else
        render_line(r, "const %s kiln_m = kiln_gm * %d + kiln_ty + %d, kiln_n = kiln_gn * %d + kiln_tx + %d;", ity,
                    t->tile_m, i * t->threads_m, t->tile_n, j * t->threads_n);
      render_line(r, "if (kiln_m < %s && kiln_n < %s) {", m, n);
      render_open_scope(r);
      render_unflatten_loops(r, nest, "kiln_m", t->m_loops, t->n_m);
      render_unflatten_loops(r, nest, "kiln_n", t->n_loops, t->n_n);
      render_line(r, "const %s r%d = kiln_c%d_%d;", fty, t->red[0]->id, i, j);
      render_ensure(r, nest->value);
      render_store(r, nest, -1, 0, nest->value);
      render_close_scope(r);
      render_line(r, "}");
      render_close_scope(r);
      render_line(r, "}");
    }
}

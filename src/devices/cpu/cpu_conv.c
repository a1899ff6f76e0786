/* cpu_conv.c — the cpu device's convolutions (NCHW, f32).
 *
 * A Conv node is planned once (at prepare) into one of these algorithms:
 *
 * - GEMM: 1x1, stride 1, no padding: the input already is the im2col matrix,
 *   so Y[Co, HW] = W[Co, Ci] x X[Ci, HW] per image and group.
 * - IM2COL: the general case (any rank 1-3, strides, dilations, pads, groups):
 *   the im2col matrix of one image and group, then one SGEMM.
 * - DEPTHWISE: one filter per channel, direct loops (any kernel size).
 * - DW3X3: 3x3 depthwise, stride 1 or 2 (MobileNet's): each plane is copied
 *   into a zero-padded one (for stride 2 split into even and odd columns),
 *   then every output row is 9 multiply-adds over contiguous rows, compiled
 *   for AVX-512 / AVX2 / baseline and chosen by the CPU at run time.
 * - WINOGRAD: F(4x4, 3x3) for 3x3 stride-1 convolutions with constant
 *   weights: the weights are transformed (U = G g G^T) and packed for SGEMM
 *   once at prepare; per image, the input tiles are transformed 16 channels
 *   at a time (V = B^T d B), 36 GEMMs [tiles, Ci] x [Ci, Co] give the tiles'
 *   products, and the output transform (Y = A^T M A) adds the bias and
 *   writes whole output rows.
 * - PW (cpu_conv_pw.c): 1x1, stride 1, no padding, constant weights: a
 *   register-tiled kernel reading the activations in place (no packing per
 *   run), weights packed at prepare, K in one pass, bias and epilogue on the
 *   registers. AVX-512's choice for every pointwise layer.
 * - ROWS (cpu_conv_rows.c): small Ci*k*k (stems), stride 1 or 2: im2col of
 *   48 output pixels at a time into L1, then the PW kernel.
 * - IM2COL_PW: im2col of bands of output rows (L2), then the PW kernel
 *   (any 2-D conv with constant weights; not chosen automatically yet).
 * - DW_DIRECT (cpu_conv_dw.c): 3x3 depthwise, stride 1 or 2, AVX-512: no
 *   padded copy (the padding is masked-off load lanes), bias and epilogue
 *   on the registers.
 * - DWK (cpu_conv_dwk.c): depthwise, 1-D or 2-D, any window, AVX2: rows
 *   padded and split into column phases per plane, every tap a contiguous
 *   vector run, bias and epilogue on the registers.
 * - TAPS (cpu_conv_taps.c): 2-D, stride 1: one GEMM per kernel tap over
 *   the outputs whose input for it is inside the image, so no product
 *   reads padding; chosen for dilated convolutions over small maps, where
 *   im2col's columns are mostly padding.
 * - BATCHED: group 1, any rank: the im2col columns of a chunk of images
 *   side by side ([K, images * osize], at most BATCH_COL_BYTES), one SGEMM
 *   over all their pixels, each finished tile moved back to NCHW and
 *   through the epilogue by the SGEMM's tile callback. With the weights a
 *   graph input (training) and small planes a GEMM per image is a GEMV
 *   that packs W again for every image; here W is read once per chunk
 *   (as A, or as B^T below 8 pixels; packed at prepare when constant).
 * - IM2ROW: group 1, any rank: im2col transposed, a row of K per (image,
 *   output pixel), filled as runs of the kernel's last axis (one masked
 *   load and store per 16 floats with AVX-512 when its dilation is 1);
 *   then Y^T[pixels, Co] = R x W^T in one SGEMM, W read as B^T. Made for
 *   weight gradients (dW^T = Conv(X^T, dY^T): a 3x3 output plane, the
 *   kernel as large as the forward output), where im2col's rows are 9
 *   floats long. K is sliced by channels (the products accumulated) so
 *   that the rows of every image stay in L2 and W is packed once.
 *
 * Output [co, n, spatial] (kiln_conv_geom.y_cn, a Transpose of the first
 * two axes fused after the Conv: a weight gradient computed as [Ci, Co, k]
 * and read as [Co, Ci, k]): BATCHED and IM2ROW only, as [Co, pixels]
 * products written into y's rows (W as A), so the weights' update reads
 * the gradient in order (ResNet-18's layer4 momenta read it transposed:
 * 3.2 ms each, the update after them 0.9).
 *
 * Tap pruning (BATCHED, IM2ROW, IM2COL with the weights at run time): the
 * plan drops the kernel taps that read only padding for every output and
 * the outputs that every tap reads only padding for (prune_geometry), and
 * runs the algorithm on that smaller convolution: W's live taps gathered
 * per run, dead outputs written as the bias.
 *
 * Epilogues: a Conv step's fused elementwise kernel comes with, when
 * cpu_contract.c recognizes it (Relu, Clip, Add of a same-shape tensor, Add
 * then Relu/Clip), its description (kiln_conv_epilogue.native): the direct
 * paths apply it in registers before the store; the others call the
 * generated function.
 *
 * Every path applies the fused elementwise epilogue of the step (if any)
 * to each finished part of the output while it is still in cache: the GEMM
 * paths through SGEMM's per-tile epilogue, the others per plane or block
 * of rows. The epilogue reads and writes the output buffer by flat index,
 * so a path only has to have written the final conv values of the range it
 * passes.
 *
 * A plan is one allocation (free() releases it): its header, then the
 * packed/transformed weights. Per-run temporaries live in a scratch buffer
 * the caller provides (kiln_conv_plan_scratch_bytes), partitioned per
 * thread where needed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "devices/cpu/cpu_internal.h"
#include "devices/cpu/gemm/gemm.h"
#include "ops/window.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define CONV_X86 1
#define CONV_INLINE static inline __attribute__((always_inline))
#define CONV_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define CONV_AVX2 __attribute__((target("avx2,fma")))
#include <immintrin.h>
#else
#define CONV_X86 0
#define CONV_INLINE static inline
#endif

enum { ISA_GENERIC = 0, ISA_AVX2 = 1, ISA_AVX512 = 2 };

#define WINO_LANES 16 /* channels transformed together */
#define WINO_T 6      /* input tile edge: F(4x4, 3x3) */
#define WINO_WEIGHT_LANES 8 /* output channels of the weights transformed together */
/* BATCHED: the most im2col columns one GEMM reads: they stay in L2
 * between the im2col and the SGEMM's packing (fmnist_cnn's weight gradient,
 * 32 images of 12544 x 9 columns, 2 threads: 16 MB chunks 14.3 ms, 4 MB
 * 12.8, 2 MB 11.1, a GEMM per image 13.7; ResNet-18's step no slower). */
#define BATCH_COL_BYTES ((int64_t)2 << 20)
/* IM2ROW: the most kernel positions before the last axis, and 16-float
 * pieces of it (AVX-512) */
#define IM2ROW_MAX_OUTER 1024
#define IM2ROW_MAX_PIECES 64
/* IM2ROW: the most bytes of rows one GEMM reads (they stay in L2 between
 * the copy and the SGEMM; fmnist_cnn's weight gradient, 2 threads: all
 * 32 images' rows at once 2.45 ms (14 MB), in 2 MB slices of channels
 * 2.15, 1 MB 2.2; 2 MB chunks of images over all channels 2.65, the
 * weights then packed once per run). */
#define IM2ROW_BYTES ((int64_t)2 << 20)

struct kiln_conv_plan {
  kiln_conv_geom c;
  kiln_conv_algo algo;
  int threads;
  int isa;
  size_t scratch_bytes;
  /* IM2COL, blocked (2-D, blk_rows > 0): each thread builds the im2col
   * columns of blk_rows output rows in its own blk_floats and multiplies. */
  int64_t blk_rows;
  size_t blk_floats;
  /* GEMM_T / IM2COL_T (and BATCHED with constant weights): packed W^T at u_offset; scratch: [osize, Co] then
   * the im2col matrix.
   * PW: the weights packed for cpu_conv_pw.c at u_offset. */
  size_t t_floats;
  /* BATCHED: chunks of batch_images images; the chunk's im2col columns in blk_floats, then the product in
   * t_floats, as [Co, pixels] (batch_rows: W read in place as A) or [pixels, Co] (W^T packed at u_offset
   * when constant) */
  int64_t batch_images;
  bool batch_rows;
  /* IM2ROW: chunks of batch_images images, each as slices of row_channels channels (of K): the slice's rows
   * [pixels, row_channels * prod(k)] in blk_floats, the product [pixels, Co] in t_floats, accumulated over
   * the slices; W^T packed at u_offset when constant and K is one slice */
  int64_t row_channels;
  /* DW3X3, DWK: scratch floats per thread */
  size_t dw_thread_floats;
  /* IM2COL_PW: bands of blk_rows output rows, blk_floats per thread; the
   * weights of group g packed for cpu_conv_pw.c at u_offset + g * u_bytes */
  /* WINOGRAD */
  int64_t tiles_h, tiles_w, tiles;
  int64_t row_w;            /* padded input row width the tiles read: 4*tiles_w + 2 */
  size_t u_offset, u_bytes; /* packed U_xi: u_offset + xi * u_bytes from the plan's start */
  size_t v_floats, m_floats, rows_floats, obuf_floats; /* scratch parts */
  /* Tap pruning (weights at run time; BATCHED, IM2ROW, IM2COL, GEMM): c is the node's geometry `full` less
   * the kernel taps that read only padding for every output (prune_taps) and the outputs every tap reads
   * only padding for (prune_out), both per axis (an arithmetic progression of kept positions: a smaller
   * kernel, dilated and shifted, or a strided, shifted output plane); x is read as it is. At prune_offset
   * (int32): the full kernel position of each kept tap (c.kdim / c.ci of them), then for each full output
   * position the pruned one, or -1. Scratch after the algorithm's own (at prune_scratch): W's kept taps
   * gathered ([co, ci/group, kept taps]), then the pruned output [n, co, c.osize] when prune_out. */
  bool prune_taps, prune_out;
  kiln_conv_geom full;
  size_t prune_offset, prune_scratch, wp_floats;
};

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

static int detect_isa(void) {
  const kiln_cpu_features *f = kiln_cpu_features_get();
#if CONV_X86
  if (f->avx512f && f->avx512vl && f->avx512dq && f->avx512bw && f->fma && f->avx2) return ISA_AVX512;
  if (f->avx2 && f->fma) return ISA_AVX2;
#endif
  (void)f;
  return ISA_GENERIC;
}

/* ---- geometry ------------------------------------------------------------------ */

static const kiln_type *type_of(const kiln_graph *g, const kiln_node *n, int i) {
  return i < n->n_inputs && n->inputs[i] >= 0 ? &g->values[n->inputs[i]].type : NULL;
}

kiln_status_t kiln_conv_geometry(const kiln_graph *g, const kiln_node *n, kiln_conv_geom *c) {
  memset(c, 0, sizeof *c);
  const kiln_type *tx = type_of(g, n, 0), *tw = type_of(g, n, 1);
  const kiln_type *ty = &g->values[n->outputs[0]].type;
  if (!tx || !tw || tx->rank < 3 || tw->rank != tx->rank || ty->rank != tx->rank)
    return kiln_error(KILN_UNSUPPORTED, "Conv needs known input, weight and output ranks");
  c->nsp = tx->rank - 2;
  if (c->nsp < 1 || c->nsp > 3) return kiln_error(KILN_UNSUPPORTED, "Conv with %d spatial dims", c->nsp);
  c->n = tx->dims[0];
  c->ci = tx->dims[1];
  c->co = tw->dims[0];
  c->group = kiln_attr_int(n, "group", 1);
  if (c->group < 1 || c->ci % c->group || c->co % c->group)
    return kiln_error(KILN_INVALID_ARGUMENT, "Conv: group %lld does not divide the channels", (long long)c->group);
  /* Pads from the shared window rule (ops/window.h); the output sizes
   * are the graph's, which shape inference derived with the same rule. */
  kiln_window win;
  KILN_TRY(kiln_window_init(n, c->nsp, tx->dims + 2, tw->dims + 2, true, false, &win));
  c->kdim = c->ci / c->group;
  c->osize = 1;
  for (int i = 0; i < c->nsp; i++) {
    c->in_sp[i] = tx->dims[2 + i];
    c->out_sp[i] = ty->dims[2 + i];
    c->k[i] = win.kernel[i];
    c->stride[i] = win.stride[i];
    c->dil[i] = win.dilation[i];
    c->pad_begin[i] = win.pad_begin[i];
    c->kdim *= c->k[i];
    c->osize *= c->out_sp[i];
  }
  return NULL;
}

/* ---- algorithm choice --------------------------------------------------------------- */

static bool is_pointwise(const kiln_conv_geom *c) {
  for (int i = 0; i < c->nsp; i++)
    if (c->k[i] != 1 || c->stride[i] != 1 || c->pad_begin[i] != 0 || c->out_sp[i] != c->in_sp[i]) return false;
  return true;
}

/* IM2ROW: kernel positions before the last axis. */
static int64_t im2row_outer(const kiln_conv_geom *c) {
  int64_t outer = 1;
  for (int i = 0; i < c->nsp - 1; i++) outer *= c->k[i];
  return outer;
}

static bool is_depthwise(const kiln_conv_geom *c) {
  return (c->nsp == 2 || c->nsp == 3) && c->group == c->ci && c->co == c->ci && c->group > 1;
}

static bool is_dw3x3(const kiln_conv_geom *c) {
  return c->nsp == 2 && is_depthwise(c) && c->k[0] == 3 && c->k[1] == 3 && c->dil[0] == 1 && c->dil[1] == 1 &&
         c->stride[0] == c->stride[1] && (c->stride[0] == 1 || c->stride[0] == 2) && c->pad_begin[0] <= 2 &&
         c->pad_begin[1] <= 2;
}

static bool is_winograd(const kiln_conv_geom *c) {
  return c->nsp == 2 && c->group == 1 && c->k[0] == 3 && c->k[1] == 3 && c->stride[0] == 1 && c->stride[1] == 1 &&
         c->dil[0] == 1 && c->dil[1] == 1 && c->pad_begin[0] <= 2 && c->pad_begin[1] <= 2 && c->out_sp[0] > 0 &&
         c->out_sp[1] > 0;
}

const char *kiln_conv_algo_name(kiln_conv_algo a) {
  switch (a) {
    case KILN_CONV_AUTO: return "auto";
    case KILN_CONV_GEMM: return "gemm";
    case KILN_CONV_IM2COL: return "im2col";
    case KILN_CONV_DEPTHWISE: return "depthwise";
    case KILN_CONV_DW3X3: return "dw3x3";
    case KILN_CONV_WINOGRAD: return "winograd";
    case KILN_CONV_GEMM_T: return "gemm_t";
    case KILN_CONV_IM2COL_T: return "im2col_t";
    case KILN_CONV_PW: return "pw";
    case KILN_CONV_IM2COL_PW: return "im2col_pw";
    case KILN_CONV_ROWS: return "rows";
    case KILN_CONV_DW_DIRECT: return "dw3x3d";
    case KILN_CONV_DWK: return "dwk";
    case KILN_CONV_TAPS: return "taps";
    case KILN_CONV_BATCHED: return "batched";
    case KILN_CONV_IM2ROW: return "im2row";
    case KILN_CONV_N_ALGOS: break;
  }
  return "?";
}

bool kiln_conv_algo_applies(const kiln_conv_geom *c, kiln_conv_algo a, bool const_weights) {
  if (c->y_cn && a != KILN_CONV_BATCHED && a != KILN_CONV_IM2ROW) return false; /* the others write NCHW */
  switch (a) {
    case KILN_CONV_AUTO:
    case KILN_CONV_IM2COL: return true;
    case KILN_CONV_GEMM: return is_pointwise(c);
    case KILN_CONV_DEPTHWISE: return is_depthwise(c);
    case KILN_CONV_DW3X3: return is_dw3x3(c);
    case KILN_CONV_WINOGRAD: return const_weights && is_winograd(c);
    case KILN_CONV_GEMM_T: return const_weights && c->group == 1 && is_pointwise(c);
    case KILN_CONV_IM2COL_T: return const_weights && c->group == 1;
    case KILN_CONV_PW: return const_weights && c->group == 1 && is_pointwise(c);
    case KILN_CONV_IM2COL_PW: return const_weights && c->nsp == 2;
    case KILN_CONV_ROWS: return const_weights && detect_isa() == ISA_AVX512 && kiln_conv_rows_applies(c);
    case KILN_CONV_DW_DIRECT: return detect_isa() == ISA_AVX512 && kiln_conv_dw_direct_applies(c);
    case KILN_CONV_DWK: return detect_isa() >= ISA_AVX2 && kiln_conv_dwk_applies(c);
    case KILN_CONV_TAPS: return const_weights && kiln_conv_taps_applies(c);
    case KILN_CONV_BATCHED: return c->group == 1;
    case KILN_CONV_IM2ROW: return c->group == 1 && c->ci > 0 && im2row_outer(c) <= IM2ROW_MAX_OUTER;
    case KILN_CONV_N_ALGOS: break;
  }
  return false;
}

/* Winograd pays when the GEMMs are big enough to amortize the transforms
 * and the 4x larger transformed weights (measured on ResNet-50's layers;
 * from 16 input channels: small_cnn's 16 -> 32 over 16x16, 34 -> 19 us). */
static bool winograd_pays(const kiln_conv_geom *c) {
  int64_t tiles = ceil_div(c->out_sp[0], 4) * ceil_div(c->out_sp[1], 4);
  return c->ci >= 16 && c->co >= 32 && tiles >= 16;
}

kiln_conv_algo kiln_conv_choose(const kiln_conv_geom *c, bool const_weights) {
  const char *env = getenv("KILN_CONV_ALGO");
  if (env && *env) {
    for (int a = KILN_CONV_GEMM; a < KILN_CONV_N_ALGOS; a++)
      if (!strcmp(env, kiln_conv_algo_name((kiln_conv_algo)a)) && kiln_conv_algo_applies(c, (kiln_conv_algo)a, const_weights))
        return (kiln_conv_algo)a;
  }
  /* Weights at run time (training), small planes, a batch: a GEMM per
   * image has N = osize (a GEMV over 1x1 planes) and packs W each time;
   * one GEMM over every image's pixels packs it once (ResNet-18 training
   * at 32x32, batch 32, 2 threads: 1x1 planes 16.8 -> 2.3 ms, 2x2 5.0 ->
   * 1.8, 4x4 2.0 -> 1.3; 6x6 at 128 channels 5.8 -> 2.1; its weight
   * gradients, 3x3 outputs over 64-512 "images", 3.9 -> 1.5; 7x7 at
   * batch 8 8.9 -> 8.7). 8x8 planes are a tie, 16x16 ones lose (1.26 ->
   * 1.39 ms). */
  /* Weights at run time over small output planes, the kernel at least 2x2:
   * a row of K per (image, pixel), copied as runs of the kernel's last
   * axis, and W^T as B. Weight gradients (a 3x3 plane, the kernel the
   * forward output) spend BATCHED's time in its im2col, a row of osize
   * per (image, channel, tap); here the runs are the kernel's rows
   * (test_conv --bench, 2 threads: fmnist_cnn's conv2 dW 10.1 -> 2.1 ms;
   * ResNet-18's at 32x32, batch 32: 8x8 kernels 2.75 -> 0.66, 4x4 1.56 ->
   * 0.65, 2x2 1.05 -> 0.74; stride 2, 4x4 dilated 2: 1.0 -> 0.75, cut to
   * 1x1 0.49 -> 0.21; 2x2 dilated 2 over a 4x4 plane a tie in the bench,
   * 0.76 -> 0.78, a loss in the step, 1.12 -> 1.27, so a 2x2 kernel only
   * up to 9 pixels; 1x1 kernels a tie or a loss, 1.33 -> 1.40, 1.05 ->
   * 1.35). The forward layers of the
   * same step win too, BATCHED's im2col being as slow over small planes
   * (3x3 over 1x1 planes 1.91 -> 0.88, 2x2 1.42 -> 0.82, 4x4 1.11 ->
   * 0.67, 6x6 2.18 -> 1.47, 8x8 1.12 -> 0.92; 16x16 loses, 1.26 -> 1.82).
   * Under 16 pixels in all the GEMM streams W, which B^T packs again: a
   * tie or a loss (3x3 over 1x1 planes, batch 8: 0.82 -> 0.92;
   * fmnist_cnn's conv1 dW, one image of 3x3: 1.2 -> 1.1-1.2, in the step
   * 1.4-1.7 -> 1.8). */
  if (!const_weights && kiln_conv_algo_applies(c, KILN_CONV_IM2ROW, false)) {
    int64_t kprod = c->kdim / c->ci;
    if (kprod >= 4 && c->n * c->osize >= 16 && (4 * c->osize <= 9 * kprod || (kprod >= 9 && c->osize <= 64)))
      return KILN_CONV_IM2ROW;
  }
  /* Up to 14x14 planes when the reduction is deep: the Fashion-MNIST CNN's
   * conv2 (32 -> 64 channels over 14x14, batch 64, K 288) and its data
   * gradient (K 576), 2 threads: 3.84 -> 2.96 and 5.26 -> 4.16 ms against
   * a GEMM per image (IM2COL). */
  if (!const_weights && c->group == 1 && c->n > 1 && (c->osize <= 49 || (c->osize <= 196 && c->kdim >= 256)))
    return KILN_CONV_BATCHED;
  if (c->y_cn) return KILN_CONV_BATCHED; /* the other of the two that write [co, n, ...] */
  /* Small planes: the output's channels are the wider GEMM dimension, and
   * the weights are packed once instead of at every run (measured: 7x7
   * planes always, 14x14 ones when the reduction is deep). */
  bool transpose = const_weights && c->group == 1 && c->co >= 32 &&
                   (c->osize <= 64 || (c->osize <= 256 && c->kdim >= 256));
  /* The direct kernel needs no packing per run and applies the epilogue in
   * registers; it loses to the transposed GEMM (K-blocked, packed) only on
   * deep reductions over small planes (measured on MobileNetV2's and
   * ResNet-50's 1x1 layers with AVX-512: K >= 512 at 7x7 and 14x14). */
  if (const_weights && c->group == 1 && is_pointwise(c) && detect_isa() == ISA_AVX512 && !(transpose && c->kdim >= 512))
    return KILN_CONV_PW;
  /* Grouped, not depthwise (ResNeXt, RegNet, ShuffleNet v1): each
   * (image, group, band) is one item of one dispatch, its weights packed
   * once, where the GEMM paths loop over the groups with a dispatch (and
   * an im2col and a packing of the group's weights) each. */
  if (const_weights && c->group > 1 && c->nsp == 2 && !is_depthwise(c) && c->ci / c->group >= 2 &&
      c->co / c->group >= KILN_PW_MR)
    return KILN_CONV_IM2COL_PW;
  if (is_pointwise(c)) return transpose ? KILN_CONV_GEMM_T : KILN_CONV_GEMM;
  if (detect_isa() == ISA_AVX512 && kiln_conv_dw_direct_applies(c)) return KILN_CONV_DW_DIRECT;
  /* Winograd where it pays, before the row kernel claims a window of few
   * channels (small_cnn's 16 -> 32 3x3 over 16x16: 34 us on rows, 19 us
   * on Winograd). */
  if (const_weights && is_winograd(c) && winograd_pays(c)) return KILN_CONV_WINOGRAD;
  /* Few input channels per window (stems: 3 x 3x3 or 7x7, stride 2): the
   * im2col columns of 48 pixels at a time in L1, when the weights are small
   * enough to stay in cache across the pixel blocks. */
  if (const_weights && detect_isa() == ISA_AVX512 && kiln_conv_rows_applies(c) && c->kdim <= 256 &&
      c->co * c->kdim <= 32768)
    return KILN_CONV_ROWS;
  if (detect_isa() >= ISA_AVX2 && kiln_conv_dwk_applies(c)) return KILN_CONV_DWK;
  if (is_dw3x3(c)) return KILN_CONV_DW3X3;
  if (is_depthwise(c)) return KILN_CONV_DEPTHWISE;
  /* Most of im2col's columns padding (dilated taps over a small map): the
   * per-tap GEMMs skip them, at the cost of a K of Ci instead of Ci*k*k and
   * a gather and an add per tap (DeepLabV3's ASPP, Ci 960, Co 256, 33x33,
   * Zen 1: dilation 12, 57% real, 64 -> 40 ms; dilation 24, 27% real,
   * 64 -> 19 ms). */
  if (const_weights && kiln_conv_taps_applies(c) && c->ci >= 64 && c->co >= 32 &&
      kiln_conv_taps_valid_fraction(c) <= 0.7)
    return KILN_CONV_TAPS;
  return transpose ? KILN_CONV_IM2COL_T : KILN_CONV_IM2COL;
}

/* ---- epilogue ------------------------------------------------------------------------ */

void kiln_conv_epilogue_apply(const kiln_conv_epilogue *e, float *y, int64_t base, int64_t row, int64_t mb,
                              int64_t count) {
  if (!e || !e->fn || mb <= 0 || count <= 0) return;
  kiln_rt_epilogue_ctx ctx = {e->buffers, base, row};
  e->fn(&ctx, y + base, row, 0, 0, mb, count);
}

/* ---- im2col --------------------------------------------------------------------------- */

typedef struct im2col_ctx {
  const kiln_conv_geom *c;
  const float *x; /* one image, channels of one group */
  float *col;     /* [kdim, osize] */
} im2col_ctx;

/* Output rows [oh0, oh1) of the im2col row of kernel offset koff over
 * plane xp, into dst ((oh1 - oh0) * OW values): zeros where the window
 * leaves the image, a copy or strided gather inside. a: the index of the
 * plane's first axis among the spatial ones (0 in 2-D, 1 in 3-D). */
static void im2col_plane(const kiln_conv_geom *c, int a, const float *xp, const int64_t *koff, float *dst,
                         int64_t oh0, int64_t oh1) {
  int64_t H = c->in_sp[a], W = c->in_sp[a + 1], OW = c->out_sp[a + 1], sw = c->stride[a + 1];
  int64_t off = koff[a + 1] * c->dil[a + 1] - c->pad_begin[a + 1];
  int64_t lo = max64(ceil_div(-off, sw), 0), hi = min64(floor_div(W - 1 - off, sw), OW - 1);
  for (int64_t oh = oh0; oh < oh1; oh++) {
    float *d = dst + (oh - oh0) * OW;
    int64_t ih = oh * c->stride[a] - c->pad_begin[a] + koff[a] * c->dil[a];
    if (ih < 0 || ih >= H || hi < lo) {
      memset(d, 0, (size_t)OW * sizeof(float));
      continue;
    }
    const float *xr = xp + ih * W + off;
    if (lo > 0) memset(d, 0, (size_t)lo * sizeof(float));
    if (sw == 1) {
      memcpy(d + lo, xr + lo, (size_t)(hi - lo + 1) * sizeof(float));
    } else {
      for (int64_t ow = lo; ow <= hi; ow++) d[ow] = xr[ow * sw];
    }
    if (hi < OW - 1) memset(d + hi + 1, 0, (size_t)(OW - 1 - hi) * sizeof(float));
  }
}

/* Output rows [r0, r1) of the im2col row of kernel offset koff over one
 * channel xc, a row being OW outputs: in 2-D the rows are oh, in 3-D the
 * flattened (od, oh), each run of one od a plane's rows (or zeros where
 * the window's depth leaves the input). */
static void im2col_2d(const kiln_conv_geom *c, const float *xc, const int64_t *koff, float *dst, int64_t r0,
                      int64_t r1) {
  if (c->nsp == 2) {
    im2col_plane(c, 0, xc, koff, dst, r0, r1);
    return;
  }
  int64_t OH = c->out_sp[1], OW = c->out_sp[2], D = c->in_sp[0], plane = c->in_sp[1] * c->in_sp[2];
  for (int64_t r = r0; r < r1;) {
    int64_t od = r / OH, oh0 = r % OH, oh1 = min64(OH, oh0 + (r1 - r));
    int64_t id = od * c->stride[0] - c->pad_begin[0] + koff[0] * c->dil[0];
    float *d = dst + (r - r0) * OW;
    if (id < 0 || id >= D) memset(d, 0, (size_t)((oh1 - oh0) * OW) * sizeof(float));
    else im2col_plane(c, 1, xc + id * plane, koff, d, oh0, oh1);
    r += oh1 - oh0;
  }
}

/* Output rows of the im2col matrix in the blocked and row forms: OH in
 * 2-D, OD * OH in 3-D. */
static int64_t im2col_out_rows(const kiln_conv_geom *c) { return c->nsp == 3 ? c->out_sp[0] * c->out_sp[1] : c->out_sp[0]; }

/* Row `row` (one per (channel, kernel offset)) of the im2col matrix of
 * image x (channels of one group) into dst (osize values). 2-D rows are
 * filled a whole output row at a time. */
static void im2col_row(const kiln_conv_geom *c, const float *x, int64_t row, float *dst) {
  int64_t kprod = 1, in_plane = 1;
  for (int i = 0; i < c->nsp; i++) {
    kprod *= c->k[i];
    in_plane *= c->in_sp[i];
  }
  int64_t ch = row / kprod, kk = row % kprod;
  int64_t koff[3] = {0, 0, 0};
  for (int i = c->nsp - 1; i >= 0; i--) {
    koff[i] = kk % c->k[i];
    kk /= c->k[i];
  }
  const float *xp = x + ch * in_plane;
  if (c->nsp >= 2) {
    im2col_2d(c, xp, koff, dst, 0, im2col_out_rows(c));
    return;
  }
  for (int64_t o = 0; o < c->osize; o++) {
    int64_t rem = o, idx = 0;
    bool in = true;
    int64_t pos[3];
    for (int i = c->nsp - 1; i >= 0; i--) {
      pos[i] = rem % c->out_sp[i];
      rem /= c->out_sp[i];
    }
    for (int i = 0; i < c->nsp; i++) {
      int64_t p = pos[i] * c->stride[i] - c->pad_begin[i] + koff[i] * c->dil[i];
      in = in && p >= 0 && p < c->in_sp[i];
      idx = idx * c->in_sp[i] + p;
    }
    dst[o] = in ? xp[idx] : 0.0f;
  }
}

static void im2col_rows(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const im2col_ctx *ic = vctx;
  for (int64_t row = begin; row < end; row++) im2col_row(ic->c, ic->x, row, ic->col + row * ic->c->osize);
}

typedef struct im2col_blk_ctx {
  const kiln_conv_plan *p;
  const float *x, *w, *bias; /* one image and group */
  float *y;                  /* its output [cog, osize] */
  int64_t y_base;            /* flat index of y in the output */
  int64_t cog;
  float *scratch;
  const kiln_conv_epilogue *epi;
} im2col_blk_ctx;

/* Blocks of blk_rows output rows: im2col into this thread's buffer, then
 * a single-threaded SGEMM into the block's columns of the output. */
static void im2col_blocks(void *vctx, int64_t begin, int64_t end, int thread) {
  const im2col_blk_ctx *b = vctx;
  const kiln_conv_plan *p = b->p;
  const kiln_conv_geom *c = &p->c;
  int64_t OH = im2col_out_rows(c), OW = c->out_sp[c->nsp - 1], kprod = 1, in_plane = 1;
  for (int i = 0; i < c->nsp; i++) {
    kprod *= c->k[i];
    in_plane *= c->in_sp[i];
  }
  float *col = b->scratch + (size_t)thread * p->blk_floats;
  for (int64_t blk = begin; blk < end; blk++) {
    int64_t oh0 = blk * p->blk_rows, oh1 = min64(OH, oh0 + p->blk_rows), nb = (oh1 - oh0) * OW, n0 = oh0 * OW;
    for (int64_t row = 0; row < c->kdim; row++) {
      int64_t koff[3] = {0, 0, 0}, kk = row % kprod;
      for (int i = c->nsp - 1; i >= 0; i--) {
        koff[i] = kk % c->k[i];
        kk /= c->k[i];
      }
      im2col_2d(c, b->x + (row / kprod) * in_plane, koff, col + row * nb, oh0, oh1);
    }
    kiln_rt_epilogue_ctx ectx = {b->epi ? b->epi->buffers : NULL, b->y_base + n0, c->osize};
    kiln_sgemm_args args = {false, false, b->cog, nb, c->kdim, 1.0f, b->w, c->kdim, col, nb, NULL, 0.0f, b->y + n0,
                            c->osize, b->bias, b->bias ? 1 : 0, b->epi ? (kiln_gemm_epilogue_fn)b->epi->fn : NULL, &ectx};
    kiln_sgemm(NULL, &args);
  }
}

/* GEMM and IM2COL: per image and group, W_g[Co/g, K] x col[K, HW]. */
static void run_gemm(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *w,
                     const float *bias, float *y, float *scratch, const kiln_conv_epilogue *epi) {
  const kiln_conv_geom *c = &p->c;
  int64_t in_plane = 1;
  for (int i = 0; i < c->nsp; i++) in_plane *= c->in_sp[i];
  int64_t cig = c->ci / c->group, cog = c->co / c->group;
  kiln_rt_epilogue_ctx ectx = {epi ? epi->buffers : NULL, 0, c->osize};
  for (int64_t img = 0; img < c->n; img++)
    for (int64_t gi = 0; gi < c->group; gi++) {
      const float *xg = x + (img * c->ci + gi * cig) * in_plane;
      const float *col = xg;
      if (p->algo == KILN_CONV_IM2COL && p->blk_rows > 0) {
        im2col_blk_ctx b = {p, xg, w + gi * cog * c->kdim, bias ? bias + gi * cog : NULL,
                            y + (img * c->co + gi * cog) * c->osize, (img * c->co + gi * cog) * c->osize, cog, scratch, epi};
        kiln_parallel_for(pool, ceil_div(im2col_out_rows(c), p->blk_rows), 1, im2col_blocks, &b);
        continue;
      }
      if (p->algo == KILN_CONV_IM2COL) {
        im2col_ctx ic = {c, xg, scratch};
        kiln_parallel_for(pool, c->kdim, 1, im2col_rows, &ic);
        col = scratch;
      }
      ectx.base = (img * c->co + gi * cog) * c->osize;
      kiln_sgemm_args args = {false, false, cog, c->osize, c->kdim, 1.0f, w + gi * cog * c->kdim, c->kdim, col,
                              c->osize, NULL, 0.0f, y + (img * c->co + gi * cog) * c->osize, c->osize,
                              bias ? bias + gi * cog : NULL, bias ? 1 : 0,
                              epi && epi->fn ? (kiln_gemm_epilogue_fn)epi->fn : NULL, &ectx};
      kiln_sgemm(pool, &args);
    }
}

/* ---- im2col of a band of rows + the direct pointwise kernel ----------------------------- */

typedef struct im2col_pw_ctx {
  const kiln_conv_plan *p;
  const float *x, *bias; /* the whole batch */
  float *y;
  int64_t bands;         /* bands per (image, group) */
  float *scratch;
  const kiln_conv_epilogue *epi;
} im2col_pw_ctx;

/* Items are (image, group, band of blk_rows output rows), so a grouped
 * convolution's groups are shared among the threads in one dispatch: a
 * loop over the groups with the bands of each shared would sync once per
 * group and leave a thread idle when a plane has fewer bands than
 * threads (RegNet's 25 groups over 7x7 planes: 2 threads ran 3x slower
 * than 1). A pointwise group reads its input rows in place. */
static void im2col_pw_bands(void *vctx, int64_t begin, int64_t end, int thread) {
  const im2col_pw_ctx *b = vctx;
  const kiln_conv_plan *p = b->p;
  const kiln_conv_geom *c = &p->c;
  int64_t OH = c->out_sp[0], OW = c->out_sp[1], kprod = c->k[0] * c->k[1], in_plane = c->in_sp[0] * c->in_sp[1];
  int64_t cig = c->ci / c->group, cog = c->co / c->group;
  bool pointwise = is_pointwise(c);
  float *col = b->scratch + (size_t)thread * p->blk_floats;
  for (int64_t item = begin; item < end; item++) {
    int64_t blk = item % b->bands, ig = item / b->bands, img = ig / c->group, gi = ig % c->group;
    int64_t oh0 = blk * p->blk_rows, oh1 = min64(OH, oh0 + p->blk_rows), nb = (oh1 - oh0) * OW, n0 = oh0 * OW;
    const float *xg = b->x + (img * c->ci + gi * cig) * in_plane;
    int64_t yb = (img * c->co + gi * cog) * c->osize;
    const float *xs = xg + n0;
    int64_t ldx = in_plane;
    if (!pointwise) {
      for (int64_t row = 0; row < c->kdim; row++) {
        int64_t koff[2] = {(row % kprod) / c->k[1], row % c->k[1]};
        im2col_2d(c, xg + (row / kprod) * in_plane, koff, col + row * nb, oh0, oh1);
      }
      xs = col;
      ldx = nb;
    }
    kiln_conv_pw_job j = {.co = cog,
                          .k = c->kdim,
                          .hw = nb,
                          .ldx = ldx,
                          .ldy = c->osize,
                          .packed = (const float *)((const char *)p + p->u_offset + (size_t)gi * p->u_bytes),
                          .x = xs,
                          .bias = b->bias ? b->bias + gi * cog : NULL,
                          .y = b->y + yb + n0,
                          .y_base = yb + n0,
                          .epi = b->epi};
    kiln_conv_pw_run(NULL, p->isa, &j);
  }
}

static void run_im2col_pw(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *bias, float *y,
                          float *scratch, const kiln_conv_epilogue *epi) {
  const kiln_conv_geom *c = &p->c;
  im2col_pw_ctx b = {p, x, bias, y, ceil_div(c->out_sp[0], p->blk_rows), scratch, epi};
  kiln_parallel_for(pool, c->n * c->group * b.bands, 1, im2col_pw_bands, &b);
}

/* ---- depthwise, any kernel ------------------------------------------------------------ */

typedef struct dw_ctx {
  const kiln_conv_plan *p;
  const float *x, *w, *bias;
  float *y;
  float *scratch;
  const kiln_conv_epilogue *epi;
} dw_ctx;

/* Adds the window w [KH][KW] over the input plane xp (the geometry's last
 * two axes) to the output plane op. Each output row accumulates w[kh][kw]
 * times an input row over the output columns whose input column is inside
 * the image, so the innermost loop has no bounds test. */
static void dw_add_plane(const kiln_conv_geom *c, const float *xp, const float *wp, float *op) {
  int a = c->nsp - 2;
  int64_t H = c->in_sp[a], W = c->in_sp[a + 1], OH = c->out_sp[a], OW = c->out_sp[a + 1];
  int64_t KH = c->k[a], KW = c->k[a + 1], sh = c->stride[a], sw = c->stride[a + 1];
  int64_t dh = c->dil[a], dwl = c->dil[a + 1], ph = c->pad_begin[a], pw = c->pad_begin[a + 1];
  for (int64_t oh = 0; oh < OH; oh++) {
    float *o = op + oh * OW;
    for (int64_t kh = 0; kh < KH; kh++) {
      int64_t ih = oh * sh - ph + kh * dh;
      if (ih < 0 || ih >= H) continue;
      const float *xr = xp + ih * W;
      for (int64_t kw = 0; kw < KW; kw++) {
        float wv = wp[kh * KW + kw];
        int64_t off = kw * dwl - pw;
        int64_t lo = max64(ceil_div(-off, sw), 0), hi = min64(floor_div(W - 1 - off, sw), OW - 1);
        if (sw == 1) {
          const float *xs = xr + off;
          for (int64_t ow = lo; ow <= hi; ow++) o[ow] += wv * xs[ow];
        } else {
          for (int64_t ow = lo; ow <= hi; ow++) o[ow] += wv * xr[ow * sw + off];
        }
      }
    }
  }
}

/* Planes (image, channel) [begin, end), 2-D or 3-D (an output depth slice
 * sums the 2-D windows of the input slices its depth taps reach: MViT's
 * 3x3x3 attention pooling). */
static void dw_planes(void *vctx, int64_t begin, int64_t end, int thread) {
  const dw_ctx *d = vctx;
  const kiln_conv_geom *c = &d->p->c;
  int a = c->nsp - 2;
  int64_t D = a ? c->in_sp[0] : 1, OD = a ? c->out_sp[0] : 1, KD = a ? c->k[0] : 1;
  int64_t sd = a ? c->stride[0] : 1, dd = a ? c->dil[0] : 1, pd = a ? c->pad_begin[0] : 0;
  int64_t in_slice = c->in_sp[a] * c->in_sp[a + 1], out_slice = c->out_sp[a] * c->out_sp[a + 1];
  int64_t kslice = c->k[a] * c->k[a + 1];
  for (int64_t p = begin; p < end; p++) {
    int64_t ch = p % c->co;
    const float *xp = d->x + p * D * in_slice, *wp = d->w + ch * KD * kslice;
    float *op = d->y + p * OD * out_slice;
    float b = d->bias ? d->bias[ch] : 0.0f;
    for (int64_t i = 0; i < OD * out_slice; i++) op[i] = b;
    for (int64_t od = 0; od < OD; od++)
      for (int64_t kd = 0; kd < KD; kd++) {
        int64_t id = od * sd - pd + kd * dd;
        if (id < 0 || id >= D) continue;
        dw_add_plane(c, xp + id * in_slice, wp + kd * kslice, op + od * out_slice);
      }
    kiln_conv_epilogue_apply(d->epi, d->y, p * OD * out_slice, 0, 1, OD * out_slice);
  }
}

/* ---- depthwise 3x3, stride 1 and 2 ------------------------------------------------------ */

/* Padded plane the 3x3 path reads: rows PH of width PW (stride 1), or for
 * stride 2 each row split into its even columns (E, OW + 1) and odd ones
 * (O, OW + 1), plus one staging row. */
static void dw3_dims(const kiln_conv_geom *c, int64_t *ph, int64_t *pw) {
  *ph = (c->out_sp[0] - 1) * c->stride[0] + 3;
  *pw = c->stride[0] == 1 ? c->out_sp[1] + 2 : 2 * (c->out_sp[1] + 1);
}

/* Copies input row xr (W wide, or NULL: all padding) into dst[0, PW) with
 * dst[j] = x[j - pw]. */
static void pad_row(float *dst, int64_t PW, const float *xr, int64_t W, int64_t pw) {
  if (!xr) {
    memset(dst, 0, (size_t)PW * sizeof(float));
    return;
  }
  int64_t j0 = max64(0, pw), j1 = min64(PW, pw + W);
  if (j1 <= j0) {
    memset(dst, 0, (size_t)PW * sizeof(float));
    return;
  }
  if (j0 > 0) memset(dst, 0, (size_t)j0 * sizeof(float));
  memcpy(dst + j0, xr + (j0 - pw), (size_t)(j1 - j0) * sizeof(float));
  if (j1 < PW) memset(dst + j1, 0, (size_t)(PW - j1) * sizeof(float));
}

CONV_INLINE void dw3_rows_s1(const float *restrict pad, int64_t PW, const float *restrict w, float b,
                             float *restrict y, int64_t OH, int64_t OW) {
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
  for (int64_t oh = 0; oh < OH; oh++) {
    const float *restrict r0 = pad + oh * PW, *restrict r1 = r0 + PW, *restrict r2 = r1 + PW;
    float *restrict o = y + oh * OW;
    for (int64_t ow = 0; ow < OW; ow++)
      o[ow] = b + w0 * r0[ow] + w1 * r0[ow + 1] + w2 * r0[ow + 2] + w3 * r1[ow] + w4 * r1[ow + 1] + w5 * r1[ow + 2] +
              w6 * r2[ow] + w7 * r2[ow + 1] + w8 * r2[ow + 2];
  }
}

/* Stride 1 over the plane as one flat loop (for narrow rows, which would
 * leave the row loop mostly in its scalar remainder): y[i] for i = oh * PW +
 * ow reads pad[i + kh * PW + kw]; columns ow >= OW are junk the caller
 * drops. n = (OH - 1) * PW + OW. */
CONV_INLINE void dw3_flat_s1(const float *restrict pad, int64_t PW, const float *restrict w, float b,
                             float *restrict y, int64_t n) {
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
  const float *restrict r0 = pad, *restrict r1 = pad + PW, *restrict r2 = pad + 2 * PW;
  for (int64_t i = 0; i < n; i++)
    y[i] = b + w0 * r0[i] + w1 * r0[i + 1] + w2 * r0[i + 2] + w3 * r1[i] + w4 * r1[i + 1] + w5 * r1[i + 2] +
           w6 * r2[i] + w7 * r2[i + 1] + w8 * r2[i + 2];
}

/* Stride 2: row i of the padded plane is E_i (even columns) then O_i (odd
 * ones), each OW + 1 wide; output (oh, ow) reads rows 2oh..2oh+2 at
 * columns 2ow, 2ow+1, 2ow+2 = E[ow], O[ow], E[ow+1]. */
CONV_INLINE void dw3_rows_s2(const float *restrict pad, int64_t half, const float *restrict w, float b,
                             float *restrict y, int64_t OH, int64_t OW) {
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
  int64_t rw = 2 * half;
  for (int64_t oh = 0; oh < OH; oh++) {
    const float *restrict e0 = pad + 2 * oh * rw, *restrict o0 = e0 + half;
    const float *restrict e1 = e0 + rw, *restrict o1 = e1 + half;
    const float *restrict e2 = e1 + rw, *restrict o2 = e2 + half;
    float *restrict o = y + oh * OW;
    for (int64_t ow = 0; ow < OW; ow++)
      o[ow] = b + w0 * e0[ow] + w1 * o0[ow] + w2 * e0[ow + 1] + w3 * e1[ow] + w4 * o1[ow] + w5 * e1[ow + 1] +
              w6 * e2[ow] + w7 * o2[ow] + w8 * e2[ow + 1];
  }
}

CONV_INLINE void deinterleave(const float *restrict src, float *restrict e, float *restrict o, int64_t half) {
  for (int64_t t = 0; t < half; t++) {
    e[t] = src[2 * t];
    o[t] = src[2 * t + 1];
  }
}

#define DW3_VARIANT(SUFFIX, ATTR)                                                                                   \
  static ATTR void dw3_s1_##SUFFIX(const float *pad, int64_t PW, const float *w, float b, float *y, int64_t OH,     \
                                   int64_t OW) {                                                                    \
    dw3_rows_s1(pad, PW, w, b, y, OH, OW);                                                                          \
  }                                                                                                                 \
  static ATTR void dw3_s2_##SUFFIX(const float *pad, int64_t half, const float *w, float b, float *y, int64_t OH,   \
                                   int64_t OW) {                                                                    \
    dw3_rows_s2(pad, half, w, b, y, OH, OW);                                                                        \
  }                                                                                                                 \
  static ATTR void dw3_flat_##SUFFIX(const float *pad, int64_t PW, const float *w, float b, float *y, int64_t n) {   \
    dw3_flat_s1(pad, PW, w, b, y, n);                                                                               \
  }                                                                                                                 \
  static ATTR void deint_##SUFFIX(const float *src, float *e, float *o, int64_t half) { deinterleave(src, e, o, half); }

DW3_VARIANT(generic, )
#if CONV_X86
DW3_VARIANT(avx2, CONV_AVX2)
DW3_VARIANT(avx512, CONV_AVX512)
#endif

static void dw3x3_planes(void *vctx, int64_t begin, int64_t end, int thread) {
  const dw_ctx *d = vctx;
  const kiln_conv_plan *pl = d->p;
  const kiln_conv_geom *c = &pl->c;
  int64_t H = c->in_sp[0], W = c->in_sp[1], OH = c->out_sp[0], OW = c->out_sp[1];
  int64_t ph = c->pad_begin[0], pw = c->pad_begin[1];
  int64_t PH, PW;
  dw3_dims(c, &PH, &PW);
  float *pad = d->scratch + (size_t)thread * pl->dw_thread_floats;
  void (*s1)(const float *, int64_t, const float *, float, float *, int64_t, int64_t) = dw3_s1_generic;
  void (*s2)(const float *, int64_t, const float *, float, float *, int64_t, int64_t) = dw3_s2_generic;
  void (*de)(const float *, float *, float *, int64_t) = deint_generic;
  void (*fl)(const float *, int64_t, const float *, float, float *, int64_t) = dw3_flat_generic;
#if CONV_X86
  if (pl->isa == ISA_AVX512) {
    fl = dw3_flat_avx512;
    s1 = dw3_s1_avx512;
    s2 = dw3_s2_avx512;
    de = deint_avx512;
  } else if (pl->isa == ISA_AVX2) {
    fl = dw3_flat_avx2;
    s1 = dw3_s1_avx2;
    s2 = dw3_s2_avx2;
    de = deint_avx2;
  }
#endif
  for (int64_t p = begin; p < end; p++) {
    int64_t ch = p % c->co;
    const float *xp = d->x + p * H * W;
    float *op = d->y + p * OH * OW;
    float b = d->bias ? d->bias[ch] : 0.0f;
    if (c->stride[0] == 1) {
      for (int64_t i = 0; i < PH; i++) {
        int64_t ih = i - ph;
        pad_row(pad + i * PW, PW, ih >= 0 && ih < H ? xp + ih * W : NULL, W, pw);
      }
      if (OW >= 64) {
        s1(pad, PW, d->w + ch * 9, b, op, OH, OW);
      } else {
        float *full = pad + (PH + 1) * PW;
        fl(pad, PW, d->w + ch * 9, b, full, (OH - 1) * PW + OW);
        for (int64_t oh = 0; oh < OH; oh++) memcpy(op + oh * OW, full + oh * PW, (size_t)OW * sizeof(float));
      }
    } else {
      int64_t half = OW + 1;
      float *stage = pad + PH * PW;
      for (int64_t i = 0; i < PH; i++) {
        int64_t ih = i - ph;
        float *row = pad + i * PW;
        if (ih < 0 || ih >= H) {
          memset(row, 0, (size_t)PW * sizeof(float));
          continue;
        }
        pad_row(stage, 2 * half, xp + ih * W, W, pw);
        de(stage, row, row + half, half);
      }
      s2(pad, half, d->w + ch * 9, b, op, OH, OW);
    }
    kiln_conv_epilogue_apply(d->epi, d->y, p * OH * OW, 0, 1, OH * OW);
  }
}

/* ---- transposed GEMM: Y^T[HW, Co] = col^T[HW, K] x W^T[K, Co] --------------------------- */

typedef struct tr_ctx {
  const kiln_conv_plan *p;
  const float *t; /* [osize, co] */
  float *y;       /* this image's output */
  int64_t y_base;
  const kiln_conv_epilogue *epi;
} tr_ctx;

/* Blocks of 16 output channels: transpose back, then the epilogue. */
static void tr_blocks(void *vctx, int64_t begin, int64_t end, int thread) {
  const tr_ctx *t = vctx;
  const kiln_conv_geom *c = &t->p->c;
  int64_t co = c->co, osize = c->osize;
  for (int64_t b = begin; b < end; b++) {
    int64_t c0 = b * 16, nl = min64(16, co - c0);
    for (int64_t hw0 = 0; hw0 < osize; hw0 += 16) {
      int64_t nh = min64(16, osize - hw0);
      for (int64_t l = 0; l < nl; l++) {
        float *dst = t->y + (c0 + l) * osize + hw0;
        const float *src = t->t + hw0 * co + c0 + l;
        for (int64_t h = 0; h < nh; h++) dst[h] = src[h * co];
      }
    }
    kiln_conv_epilogue_apply(t->epi, t->y - t->y_base, t->y_base + c0 * osize, osize, nl, osize);
  }
}

static void run_gemm_t(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *bias, float *y,
                       float *scratch, const kiln_conv_epilogue *epi) {
  const kiln_conv_geom *c = &p->c;
  int64_t in_plane = 1;
  for (int i = 0; i < c->nsp; i++) in_plane *= c->in_sp[i];
  float *t = scratch, *colbuf = scratch + p->t_floats;
  for (int64_t img = 0; img < c->n; img++) {
    const float *xi = x + img * c->ci * in_plane;
    const float *col = xi;
    if (p->algo == KILN_CONV_IM2COL_T) {
      im2col_ctx ic = {c, xi, colbuf};
      kiln_parallel_for(pool, c->kdim, 1, im2col_rows, &ic);
      col = colbuf;
    }
    kiln_sgemm_args args = {true, false, c->osize, c->co, c->kdim, 1.0f, col, c->osize, NULL, 0,
                            (const char *)p + p->u_offset, 0.0f, t, c->co, bias, bias ? 2 : 0, NULL, NULL};
    kiln_sgemm(pool, &args);
    tr_ctx tc = {p, t, y + img * c->co * c->osize, img * c->co * c->osize, epi};
    kiln_parallel_for(pool, ceil_div(c->co, 16), 1, tr_blocks, &tc);
  }
}

/* ---- the batch as one GEMM: Y^T[N*HW, Co] = col^T[N*HW, K] x W^T[K, Co] ------------------ */

typedef struct batch_ctx {
  const kiln_conv_plan *p;
  const float *x; /* the chunk's first image */
  float *col;     /* [kdim, images * osize]: image i's columns at i * osize */
  float *y;       /* the whole output */
  int64_t img0, images; /* the chunk of images */
  const kiln_conv_epilogue *epi;
} batch_ctx;

/* Items: (image, im2col row). */
static void batch_im2col(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const batch_ctx *b = vctx;
  const kiln_conv_geom *c = &b->p->c;
  int64_t in_image = c->ci, ld = b->images * c->osize;
  for (int i = 0; i < c->nsp; i++) in_image *= c->in_sp[i];
  for (int64_t it = begin; it < end; it++) {
    int64_t img = it / c->kdim, row = it % c->kdim;
    im2col_row(c, b->x + img * in_image, row, b->col + row * ld + img * c->osize);
  }
}

/* The SGEMM's tile epilogue: rows m0.. of the tile are pixels (image,
 * position), columns n0.. output channels; each image's part goes back to
 * [Co, osize] in y while the tile is in cache, then the conv's epilogue
 * over what it wrote. */
static void batch_tile(void *vctx, float *t, int64_t ldt, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const batch_ctx *b = vctx;
  const kiln_conv_geom *c = &b->p->c;
  int64_t osize = c->osize, co = c->co, ld = c->y_cn ? c->n * osize : osize; /* between output channels */
  for (int64_t m = m0; m < m0 + mb;) {
    int64_t img = b->img0 + m / osize, p0 = m % osize, np = min64(osize - p0, m0 + mb - m);
    float *yb = b->y + (c->y_cn ? n0 * ld + img * osize : (img * co + n0) * osize) + p0;
    const float *tb = t + (m - m0) * ldt;
    for (int64_t j0 = 0; j0 < nb; j0 += 16) {
      int64_t nj = min64(16, nb - j0);
      for (int64_t q = 0; q < np; q++)
        for (int64_t j = 0; j < nj; j++) yb[(j0 + j) * ld + q] = tb[q * ldt + j0 + j];
    }
    kiln_conv_epilogue_apply(b->epi, b->y, (img * co + n0) * osize + p0, osize, nb, np);
    m += np;
  }
}

/* The same for the product as [Co, n * osize] (W as A): rows are output
 * channels, columns pixels. */
static void batch_tile_rows(void *vctx, float *t, int64_t ldt, int64_t m0, int64_t n0, int64_t mb, int64_t nb) {
  const batch_ctx *b = vctx;
  const kiln_conv_geom *c = &b->p->c;
  int64_t osize = c->osize, co = c->co, ld = c->y_cn ? c->n * osize : osize; /* between output channels */
  for (int64_t n = n0; n < n0 + nb;) {
    int64_t img = b->img0 + n / osize, p0 = n % osize, np = min64(osize - p0, n0 + nb - n);
    float *yb = b->y + (c->y_cn ? m0 * ld + img * osize : (img * co + m0) * osize) + p0;
    const float *tb = t + (n - n0);
    for (int64_t i = 0; i < mb; i++) memcpy(yb + i * ld, tb + i * ldt, (size_t)np * sizeof(float));
    kiln_conv_epilogue_apply(b->epi, b->y, (img * co + m0) * osize + p0, osize, mb, np);
    n += np;
  }
}

static void run_batched(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *w,
                        const float *bias, float *y, float *scratch, const kiln_conv_epilogue *epi) {
  const kiln_conv_geom *c = &p->c;
  int64_t in_image = c->ci;
  for (int i = 0; i < c->nsp; i++) in_image *= c->in_sp[i];
  float *col = scratch, *t = scratch + p->blk_floats;
  bool packed = p->u_bytes > 0;
  for (int64_t img0 = 0; img0 < c->n; img0 += p->batch_images) {
    int64_t images = min64(p->batch_images, c->n - img0), pixels = images * c->osize;
    batch_ctx b = {p, x + img0 * in_image, col, y, img0, images, epi};
    kiln_parallel_for(pool, images * c->kdim, 1, batch_im2col, &b);
    if (p->batch_rows && c->y_cn) { /* [Co, pixels] is a block of y's rows: no move */
      kiln_sgemm_args ra = {false, false, c->co, pixels, c->kdim, 1.0f, w, c->kdim, col, pixels, NULL, 0.0f,
                            y + img0 * c->osize, c->n * c->osize, NULL, 0, NULL, NULL};
      kiln_sgemm(pool, &ra);
    } else if (p->batch_rows) {
      kiln_sgemm_args ra = {false, false, c->co, pixels, c->kdim, 1.0f, w, c->kdim, col, pixels, NULL, 0.0f, t,
                            pixels, bias, bias ? 1 : 0, batch_tile_rows, &b};
      kiln_sgemm(pool, &ra);
    } else {
      kiln_sgemm_args ta = {true, true, pixels, c->co, c->kdim, 1.0f, col, pixels, packed ? NULL : w, c->kdim,
                            packed ? (const char *)p + p->u_offset : NULL, 0.0f, t, c->co, bias, bias ? 2 : 0,
                            batch_tile, &b};
      kiln_sgemm(pool, &ta);
    }
  }
}

/* ---- a row per output pixel: Y^T[(image, pixel), Co] = R[(image, pixel), K] x W^T[K, Co] ---- */

/* Where row `pix`'s window lies: for each kernel position of the axes
 * before the last, the input offset (in rows of the last axis), or -1
 * where the window leaves the input; along the last axis the run of input
 * columns base + j * dil, j in [lo, hi], it reads (none when hi < lo). */
typedef struct im2row_window {
  int64_t base, lo, hi;
  int64_t off[IM2ROW_MAX_OUTER];
} im2row_window;

static void im2row_window_of(const kiln_conv_geom *c, int64_t pix, im2row_window *r) {
  int L = c->nsp - 1;
  int64_t pos[3];
  for (int i = L; i >= 0; i--) {
    pos[i] = pix % c->out_sp[i];
    pix /= c->out_sp[i];
  }
  r->base = pos[L] * c->stride[L] - c->pad_begin[L];
  r->lo = max64(0, ceil_div(-r->base, c->dil[L]));
  r->hi = min64(c->k[L] - 1, floor_div(c->in_sp[L] - 1 - r->base, c->dil[L]));
  /* the axes before the last: (depth,) height, as (K0,) K1 positions */
  int64_t K0 = L == 2 ? c->k[0] : 1, K1 = L >= 1 ? c->k[L - 1] : 1, H = L >= 1 ? c->in_sp[L - 1] : 1;
  for (int64_t k0 = 0; k0 < K0; k0++) {
    int64_t id = L == 2 ? pos[0] * c->stride[0] - c->pad_begin[0] + k0 * c->dil[0] : 0;
    bool din = L < 2 || (id >= 0 && id < c->in_sp[0]);
    for (int64_t k1 = 0; k1 < K1; k1++) {
      int64_t ih = L >= 1 ? pos[L - 1] * c->stride[L - 1] - c->pad_begin[L - 1] + k1 * c->dil[L - 1] : 0;
      bool in = din && ih >= 0 && ih < H && r->hi >= r->lo;
      r->off[k0 * K1 + k1] = in ? id * H + ih : -1;
    }
  }
}

/* Row `pix` of channels [0, nch) of image x (x at the first one) into dst
 * (nch * prod(k) values, ordered as the weights: channel, then kernel
 * position): for each channel and kernel position of the axes before the
 * last, the run of the last axis (contiguous when its dilation is 1),
 * zeros where the window leaves the input. */
CONV_INLINE void im2row_body(const kiln_conv_geom *c, const float *restrict x, int64_t nch, int64_t pix,
                             float *restrict dst) {
  int L = c->nsp - 1;
  im2row_window r;
  im2row_window_of(c, pix, &r);
  int64_t KL = c->k[L], W = c->in_sp[L], dl = c->dil[L], outer = im2row_outer(c), in_plane = 1;
  for (int i = 0; i < c->nsp; i++) in_plane *= c->in_sp[i];
  for (int64_t ch = 0; ch < nch; ch++)
    for (int64_t o = 0; o < outer; o++) {
      float *d = dst + (ch * outer + o) * KL;
      if (r.off[o] < 0) {
        for (int64_t j = 0; j < KL; j++) d[j] = 0.0f;
        continue;
      }
      const float *xr = x + ch * in_plane + r.off[o] * W + r.base;
      for (int64_t j = 0; j < r.lo; j++) d[j] = 0.0f;
      if (dl == 1)
        for (int64_t j = r.lo; j <= r.hi; j++) d[j] = xr[j];
      else
        for (int64_t j = r.lo; j <= r.hi; j++) d[j] = xr[j * dl];
      for (int64_t j = r.hi + 1; j < KL; j++) d[j] = 0.0f;
    }
}

static void im2row_generic(const kiln_conv_geom *c, const float *x, int64_t nch, int64_t pix, float *dst) {
  im2row_body(c, x, nch, pix, dst);
}

#if CONV_X86
/* AVX-512, dilation 1: each run as 16-lane pieces, one masked load (lanes
 * outside [lo, hi] zero, and not read) and one masked store each. */
static CONV_AVX512 void im2row_avx512(const kiln_conv_geom *c, const float *x, int64_t nch, int64_t pix, float *dst) {
  int L = c->nsp - 1;
  int64_t KL = c->k[L];
  if (c->dil[L] != 1 || KL > 16 * IM2ROW_MAX_PIECES) {
    im2row_body(c, x, nch, pix, dst);
    return;
  }
  im2row_window r;
  im2row_window_of(c, pix, &r);
  int64_t outer = im2row_outer(c), in_plane = 1, pieces = (KL + 15) / 16, W = c->in_sp[L];
  for (int i = 0; i < c->nsp; i++) in_plane *= c->in_sp[i];
  __mmask16 load[IM2ROW_MAX_PIECES], store[IM2ROW_MAX_PIECES];
  for (int64_t q = 0; q < pieces; q++) {
    int64_t j0 = q * 16;
    uint32_t st = KL - j0 >= 16 ? 0xffffu : (1u << (KL - j0)) - 1u, ld = 0;
    for (int l = 0; l < 16; l++)
      if (j0 + l >= r.lo && j0 + l <= r.hi) ld |= 1u << l;
    load[q] = (__mmask16)ld;
    store[q] = (__mmask16)st;
  }
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t ch = 0; ch < nch; ch++) {
    const float *xc = x + ch * in_plane + r.base;
    float *d = dst + ch * outer * KL;
    if (pieces == 1) {
      __mmask16 lm = load[0], sm = store[0];
      for (int64_t o = 0; o < outer; o++, d += KL)
        _mm512_mask_storeu_ps(d, sm, r.off[o] < 0 ? zero : _mm512_maskz_loadu_ps(lm, xc + r.off[o] * W));
      continue;
    }
    for (int64_t o = 0; o < outer; o++, d += KL) {
      const float *xr = xc + r.off[o] * W;
      for (int64_t q = 0; q < pieces; q++)
        _mm512_mask_storeu_ps(d + q * 16, store[q], r.off[o] < 0 ? zero : _mm512_maskz_loadu_ps(load[q], xr + q * 16));
    }
  }
}
#endif

typedef struct im2row_ctx {
  const float *x; /* the chunk's first image, its channel ch0 */
  int64_t nch;    /* channels ch0.. */
  float *rows;    /* [images * osize, nch * prod(k)] */
  batch_ctx b;
} im2row_ctx;

/* Items: rows (image, pixel) of the chunk. */
static void im2row_rows(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const im2row_ctx *r = vctx;
  const kiln_conv_plan *p = r->b.p;
  const kiln_conv_geom *c = &p->c;
  int64_t in_image = c->ci;
  for (int i = 0; i < c->nsp; i++) in_image *= c->in_sp[i];
  void (*row)(const kiln_conv_geom *, const float *, int64_t, int64_t, float *) = im2row_generic;
#if CONV_X86
  if (p->isa == ISA_AVX512) row = im2row_avx512;
#endif
  int64_t kblk = r->nch * (c->kdim / c->ci);
  for (int64_t it = begin; it < end; it++)
    row(c, r->x + (it / c->osize) * in_image, r->nch, it % c->osize, r->rows + it * kblk);
}

/* IM2ROW: per chunk of images and slice of channels, the rows, then one
 * SGEMM accumulating R x W_slice^T into [pixels, Co] (W read as B^T, or
 * packed at prepare), the bias with the first slice; the last one moves
 * each finished tile back to NCHW through batch_tile. With y_cn the
 * product is W x R^T, [Co, pixels], summed straight into y's rows. */
static void run_im2row(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *w,
                       const float *bias, float *y, float *scratch, const kiln_conv_epilogue *epi) {
  const kiln_conv_geom *c = &p->c;
  int64_t in_plane = 1;
  for (int i = 0; i < c->nsp; i++) in_plane *= c->in_sp[i];
  int64_t in_image = c->ci * in_plane, kprod = c->kdim / c->ci;
  float *rows = scratch, *t = scratch + p->blk_floats;
  const void *packed = p->u_bytes ? (const char *)p + p->u_offset : NULL;
  for (int64_t img0 = 0; img0 < c->n; img0 += p->batch_images) {
    int64_t images = min64(p->batch_images, c->n - img0), pixels = images * c->osize;
    for (int64_t ch0 = 0; ch0 < c->ci; ch0 += p->row_channels) {
      int64_t nch = min64(p->row_channels, c->ci - ch0), kb = nch * kprod;
      bool first = ch0 == 0, last = ch0 + nch == c->ci;
      im2row_ctx r = {x + img0 * in_image + ch0 * in_plane, nch, rows, {p, NULL, NULL, y, img0, images, epi}};
      kiln_parallel_for(pool, pixels, 1, im2row_rows, &r);
      if (c->y_cn) { /* y [Co, n * osize]: W x R^T lands in it, the slices summed there */
        kiln_sgemm_args wa = {false, true, c->co, pixels, kb, 1.0f, w + ch0 * kprod, c->kdim, rows, kb, NULL,
                              first ? 0.0f : 1.0f, y + img0 * c->osize, c->n * c->osize, NULL, 0, NULL, NULL};
        kiln_sgemm(pool, &wa);
        continue;
      }
      kiln_sgemm_args ta = {false, true, pixels, c->co, kb, 1.0f, rows, kb, packed ? NULL : w + ch0 * kprod,
                            c->kdim, packed, first ? 0.0f : 1.0f, t, c->co, first ? bias : NULL,
                            first && bias ? 2 : 0, last ? batch_tile : NULL, &r.b};
      kiln_sgemm(pool, &ta);
    }
  }
}

/* ---- Winograd F(4x4, 3x3) ------------------------------------------------------------- */

/* Input transform of the tiles of one tile row for WINO_LANES channels:
 * rows[r][j][l] is padded input row (4 th + r) at column j of lane l;
 * V[xi][tile][ci] gets B^T d B for each tile. */
CONV_INLINE void wino_in_body(const float *restrict rows, int64_t row_w, int64_t tiles_w, float *restrict V,
                              int64_t xi_stride, int64_t ld, int nl) {
  enum { L = WINO_LANES };
  for (int64_t tw = 0; tw < tiles_w; tw++) {
    float t[6][6][L];
    /* t = B^T d, column by column. */
    for (int cc = 0; cc < 6; cc++) {
      const float *d0 = rows + (0 * row_w + 4 * tw + cc) * L, *d1 = rows + (1 * row_w + 4 * tw + cc) * L;
      const float *d2 = rows + (2 * row_w + 4 * tw + cc) * L, *d3 = rows + (3 * row_w + 4 * tw + cc) * L;
      const float *d4 = rows + (4 * row_w + 4 * tw + cc) * L, *d5 = rows + (5 * row_w + 4 * tw + cc) * L;
      for (int l = 0; l < L; l++) {
        float a1 = d4[l] - 4.0f * d2[l], a2 = d3[l] - 4.0f * d1[l];
        float b1 = d4[l] - d2[l], b2 = 2.0f * (d3[l] - d1[l]);
        t[0][cc][l] = 4.0f * d0[l] - 5.0f * d2[l] + d4[l];
        t[1][cc][l] = a1 + a2;
        t[2][cc][l] = a1 - a2;
        t[3][cc][l] = b1 + b2;
        t[4][cc][l] = b1 - b2;
        t[5][cc][l] = 4.0f * d1[l] - 5.0f * d3[l] + d5[l];
      }
    }
    /* V = t B, row by row. */
    for (int r = 0; r < 6; r++) {
      float v[6][L];
      for (int l = 0; l < L; l++) {
        float a1 = t[r][4][l] - 4.0f * t[r][2][l], a2 = t[r][3][l] - 4.0f * t[r][1][l];
        float b1 = t[r][4][l] - t[r][2][l], b2 = 2.0f * (t[r][3][l] - t[r][1][l]);
        v[0][l] = 4.0f * t[r][0][l] - 5.0f * t[r][2][l] + t[r][4][l];
        v[1][l] = a1 + a2;
        v[2][l] = a1 - a2;
        v[3][l] = b1 + b2;
        v[4][l] = b1 - b2;
        v[5][l] = 4.0f * t[r][1][l] - 5.0f * t[r][3][l] + t[r][5][l];
      }
      for (int cc = 0; cc < 6; cc++) {
        float *dst = V + (r * 6 + cc) * xi_stride + tw * ld;
        if (nl == L)
          for (int l = 0; l < L; l++) dst[l] = v[cc][l];
        else
          for (int l = 0; l < nl; l++) dst[l] = v[cc][l];
      }
    }
  }
}

/* Output transform of one tile row for WINO_LANES output channels:
 * m[xi] = M[xi][tile][co..]; Y = A^T m A + bias goes to obuf[l][i][4 tw + j]. */
CONV_INLINE void wino_out_body(const float *restrict M, int64_t xi_stride, int64_t ld, int64_t tiles_w,
                               const float *restrict bias, float *restrict obuf, int64_t ob_w) {
  enum { L = WINO_LANES };
  for (int64_t tw = 0; tw < tiles_w; tw++) {
    float s[4][6][L];
    for (int cc = 0; cc < 6; cc++) {
      const float *m0 = M + (0 * 6 + cc) * xi_stride + tw * ld, *m1 = M + (1 * 6 + cc) * xi_stride + tw * ld;
      const float *m2 = M + (2 * 6 + cc) * xi_stride + tw * ld, *m3 = M + (3 * 6 + cc) * xi_stride + tw * ld;
      const float *m4 = M + (4 * 6 + cc) * xi_stride + tw * ld, *m5 = M + (5 * 6 + cc) * xi_stride + tw * ld;
      for (int l = 0; l < L; l++) {
        float a = m1[l] + m2[l], b = m1[l] - m2[l], e = m3[l] + m4[l], f = m3[l] - m4[l];
        s[0][cc][l] = m0[l] + a + e;
        s[1][cc][l] = b + 2.0f * f;
        s[2][cc][l] = a + 4.0f * e;
        s[3][cc][l] = b + 8.0f * f + m5[l];
      }
    }
    for (int r = 0; r < 4; r++) {
      float yv[4][L];
      for (int l = 0; l < L; l++) {
        float a = s[r][1][l] + s[r][2][l], b = s[r][1][l] - s[r][2][l];
        float e = s[r][3][l] + s[r][4][l], f = s[r][3][l] - s[r][4][l];
        yv[0][l] = s[r][0][l] + a + e + bias[l];
        yv[1][l] = b + 2.0f * f + bias[l];
        yv[2][l] = a + 4.0f * e + bias[l];
        yv[3][l] = b + 8.0f * f + s[r][5][l] + bias[l];
      }
      for (int l = 0; l < L; l++) {
        float *o = obuf + ((int64_t)l * 4 + r) * ob_w + 4 * tw;
        o[0] = yv[0][l];
        o[1] = yv[1][l];
        o[2] = yv[2][l];
        o[3] = yv[3][l];
      }
    }
  }
}

#define WINO_VARIANT(SUFFIX, ATTR)                                                                                  \
  static ATTR void wino_in_##SUFFIX(const float *rows, int64_t row_w, int64_t tiles_w, float *V, int64_t xs,       \
                                    int64_t ld, int nl) {                                                           \
    wino_in_body(rows, row_w, tiles_w, V, xs, ld, nl);                                                              \
  }                                                                                                                 \
  static ATTR void wino_out_##SUFFIX(const float *M, int64_t xs, int64_t ld, int64_t tiles_w, const float *bias,   \
                                     float *obuf, int64_t ob_w) {                                                   \
    wino_out_body(M, xs, ld, tiles_w, bias, obuf, ob_w);                                                            \
  }

WINO_VARIANT(generic, )
#if CONV_X86
WINO_VARIANT(avx2, CONV_AVX2)
WINO_VARIANT(avx512, CONV_AVX512)
#endif

typedef struct wino_ctx {
  const kiln_conv_plan *p;
  const float *x; /* this image */
  const float *bias;
  float *y;       /* this image */
  int64_t y_base; /* flat index of this image's output */
  float *V, *M, *thread_scratch;
  const kiln_conv_epilogue *epi;
} wino_ctx;

/* Items: (channel block, tile row). */
static void wino_input(void *vctx, int64_t begin, int64_t end, int thread) {
  const wino_ctx *w = vctx;
  const kiln_conv_plan *p = w->p;
  const kiln_conv_geom *c = &p->c;
  enum { L = WINO_LANES };
  int64_t H = c->in_sp[0], W = c->in_sp[1], ph = c->pad_begin[0], pw = c->pad_begin[1];
  float *rows = w->thread_scratch + (size_t)thread * (p->rows_floats + p->obuf_floats);
  int64_t row_w = p->row_w;
  void (*fn)(const float *, int64_t, int64_t, float *, int64_t, int64_t, int) = wino_in_generic;
#if CONV_X86
  if (p->isa == ISA_AVX512) fn = wino_in_avx512;
  else if (p->isa == ISA_AVX2) fn = wino_in_avx2;
#endif
  for (int64_t it = begin; it < end; it++) {
    int64_t cb = it / p->tiles_h, th = it % p->tiles_h;
    int64_t c0 = cb * L;
    int nl = (int)min64(L, c->ci - c0);
    if (nl < L) memset(rows, 0, (size_t)6 * row_w * L * sizeof(float));
    int64_t j0 = max64(0, pw), j1 = min64(row_w, pw + W);
    for (int r = 0; r < 6; r++) {
      int64_t ih = 4 * th - ph + r;
      float *dst = rows + (int64_t)r * row_w * L;
      if (ih < 0 || ih >= H || j1 <= j0) {
        memset(dst, 0, (size_t)row_w * L * sizeof(float));
        continue;
      }
      if (j0 > 0) memset(dst, 0, (size_t)j0 * L * sizeof(float));
      if (j1 < row_w) memset(dst + j1 * L, 0, (size_t)(row_w - j1) * L * sizeof(float));
      for (int l = 0; l < nl; l++) {
        const float *src = w->x + ((c0 + l) * H + ih) * W - pw;
        for (int64_t j = j0; j < j1; j++) dst[j * L + l] = src[j];
      }
    }
    fn(rows, row_w, p->tiles_w, w->V + th * p->tiles_w * c->ci + c0, p->tiles * c->ci, c->ci, nl);
  }
}

typedef struct wino_gemm_ctx {
  const kiln_conv_plan *p;
  const float *V;
  float *M;
} wino_gemm_ctx;

static void wino_gemms(void *vctx, int64_t begin, int64_t end, int thread) {
  const wino_gemm_ctx *w = vctx;
  const kiln_conv_plan *p = w->p;
  const kiln_conv_geom *c = &p->c;
  for (int64_t xi = begin; xi < end; xi++) {
    kiln_sgemm_args g = {false, false, p->tiles, c->co, c->ci, 1.0f, w->V + xi * p->tiles * c->ci, c->ci, NULL, 0,
                         (const char *)p + p->u_offset + (size_t)xi * p->u_bytes, 0.0f,
                         w->M + xi * p->tiles * c->co, c->co, NULL, 0, NULL, NULL};
    kiln_sgemm(NULL, &g);
  }
}

/* Items: (output channel block, tile row). */
static void wino_output(void *vctx, int64_t begin, int64_t end, int thread) {
  const wino_ctx *w = vctx;
  const kiln_conv_plan *p = w->p;
  const kiln_conv_geom *c = &p->c;
  enum { L = WINO_LANES };
  int64_t OH = c->out_sp[0], OW = c->out_sp[1], osize = c->osize;
  float *obuf = w->thread_scratch + (size_t)thread * (p->rows_floats + p->obuf_floats) + p->rows_floats;
  int64_t ob_w = 4 * p->tiles_w;
  void (*fn)(const float *, int64_t, int64_t, int64_t, const float *, float *, int64_t) = wino_out_generic;
#if CONV_X86
  if (p->isa == ISA_AVX512) fn = wino_out_avx512;
  else if (p->isa == ISA_AVX2) fn = wino_out_avx2;
#endif
  for (int64_t it = begin; it < end; it++) {
    int64_t cb = it / p->tiles_h, th = it % p->tiles_h;
    int64_t c0 = cb * L;
    int nl = (int)min64(L, c->co - c0);
    float bias[L];
    for (int l = 0; l < L; l++) bias[l] = w->bias && l < nl ? w->bias[c0 + l] : 0.0f;
    fn(w->M + th * p->tiles_w * c->co + c0, p->tiles * c->co, c->co, p->tiles_w, bias, obuf, ob_w);
    int64_t oh0 = 4 * th, nrows = min64(4, OH - oh0);
    for (int l = 0; l < nl; l++)
      for (int64_t r = 0; r < nrows; r++)
        memcpy(w->y + (c0 + l) * osize + (oh0 + r) * OW, obuf + ((int64_t)l * 4 + r) * ob_w, (size_t)OW * sizeof(float));
    kiln_conv_epilogue_apply(w->epi, w->y - w->y_base, w->y_base + c0 * osize + oh0 * OW, osize, nl, nrows * OW);
  }
}

static void run_winograd(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *bias, float *y,
                         float *scratch, const kiln_conv_epilogue *epi) {
  const kiln_conv_geom *c = &p->c;
  float *V = scratch, *M = V + p->v_floats, *ts = M + p->m_floats;
  int64_t in_plane = c->in_sp[0] * c->in_sp[1];
  int64_t cblocks_in = ceil_div(c->ci, WINO_LANES), cblocks_out = ceil_div(c->co, WINO_LANES);
  for (int64_t img = 0; img < c->n; img++) {
    wino_ctx w = {p, x + img * c->ci * in_plane, bias, y + img * c->co * c->osize, img * c->co * c->osize, V, M, ts, epi};
    kiln_parallel_for(pool, cblocks_in * p->tiles_h, 1, wino_input, &w);
    wino_gemm_ctx gc = {p, V, M};
    kiln_parallel_for(pool, 36, 1, wino_gemms, &gc);
    kiln_parallel_for(pool, cblocks_out * p->tiles_h, 1, wino_output, &w);
  }
}

/* Winograd's weight transform for WINO_WEIGHT_LANES output channels
 * o0.. (nl of them real) and input channels i0..i0+rows:
 * u[(xi * rows + i) * co + o] = (G g G^T)[xi] for g = w[o][i0 + i], in
 * double, the lanes side by side so the compiler vectorizes them. */
CONV_INLINE void wino_weights_body(const float *restrict w, int64_t ci, int64_t co, int64_t i0, int64_t rows,
                                   int64_t o0, int nl, float *restrict u) {
  enum { L = WINO_WEIGHT_LANES };
  static const double G[6][3] = {{1.0 / 4, 0, 0},
                                 {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                 {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                 {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                 {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                 {0, 0, 1}};
  for (int64_t i = 0; i < rows; i++) {
    double g[9][L], tmp[6][3][L];
    for (int l = 0; l < L; l++) {
      const float *src = w + ((o0 + (l < nl ? l : 0)) * ci + i0 + i) * 9;
      for (int k = 0; k < 9; k++) g[k][l] = src[k];
    }
    for (int a = 0; a < 6; a++)
      for (int b = 0; b < 3; b++)
        for (int l = 0; l < L; l++)
          tmp[a][b][l] = G[a][0] * g[0 * 3 + b][l] + G[a][1] * g[1 * 3 + b][l] + G[a][2] * g[2 * 3 + b][l];
    for (int a = 0; a < 6; a++)
      for (int b = 0; b < 6; b++) {
        float out[L];
        for (int l = 0; l < L; l++)
          out[l] = (float)(tmp[a][0][l] * G[b][0] + tmp[a][1][l] * G[b][1] + tmp[a][2][l] * G[b][2]);
        float *dst = u + ((a * 6 + b) * rows + i) * co + o0;
        for (int l = 0; l < nl; l++) dst[l] = out[l];
      }
  }
}

static void wino_weights_generic(const float *w, int64_t ci, int64_t co, int64_t i0, int64_t rows, int64_t o0, int nl,
                                 float *u) {
  wino_weights_body(w, ci, co, i0, rows, o0, nl, u);
}
#if CONV_X86
/* AVX2 without FMA: the same roundings as the generic build. */
static __attribute__((target("avx2"))) void wino_weights_avx2(const float *w, int64_t ci, int64_t co, int64_t i0,
                                                              int64_t rows, int64_t o0, int nl, float *u) {
  wino_weights_body(w, ci, co, i0, rows, o0, nl, u);
}
#endif

/* U_xi[ci][co] = (G g G^T)[xi] for g = w[co][ci], packed as SGEMM's B a
 * block of input channels at a time: the block's 36 pieces (about 256 KB)
 * stay in cache, and U (4x the weights) is written once, into the plan. */
static kiln_status_t wino_transform_weights(kiln_conv_plan *p, const float *w) {
  const kiln_conv_geom *c = &p->c;
  int64_t ci = c->ci, co = c->co;
  int64_t block = max64(4, min64(32, 2048 / max64(1, co)));
  float *u = malloc((size_t)36 * (size_t)block * (size_t)co * sizeof(float));
  if (!u) return KILN_OOM();
  void (*fn)(const float *, int64_t, int64_t, int64_t, int64_t, int64_t, int, float *) = wino_weights_generic;
#if CONV_X86
  if (p->isa >= ISA_AVX2) fn = wino_weights_avx2;
#endif
  for (int64_t i0 = 0; i0 < ci; i0 += block) {
    int64_t rows = min64(block, ci - i0);
    for (int64_t o0 = 0; o0 < co; o0 += WINO_WEIGHT_LANES)
      fn(w, ci, co, i0, rows, o0, (int)min64(WINO_WEIGHT_LANES, co - o0), u);
    for (int xi = 0; xi < 36; xi++)
      kiln_sgemm_pack_b_rows(ci, co, i0, rows, u + (size_t)xi * (size_t)(rows * co), co,
                             (char *)p + p->u_offset + (size_t)xi * p->u_bytes);
  }
  free(u);
  return NULL;
}

/* ---- tap pruning ----------------------------------------------------------------------- */

/* Over small planes most of a padded kernel's taps can fall outside the
 * input for every output (3x3 pad 1 over a 1x1 plane: all but the centre),
 * and with the kernel as large as the plane (weight gradients) outputs can
 * see only padding: im2col's products of those are products of zeros.
 * Left out, K shrinks to the live taps and M to the live outputs (ResNet-18
 * training at 32x32: layer4's convolutions over 1x1 planes, K / 9). */

/* The positions of [0, n) with live(i), when they are first + j * step
 * (j < *count; step 1 for one); false where none is, or they are not. */
typedef struct live_run {
  int64_t first, step, count;
  bool ok;
} live_run;

static void live_run_add(live_run *r, int64_t i) {
  if (r->count == 0) {
    r->first = i;
    r->step = 1;
  } else if (r->count == 1) {
    r->step = i - r->first;
  } else if (i != r->first + r->count * r->step) {
    r->ok = false;
  }
  r->count++;
}

/* Along spatial axis a: the taps that read the input for some output, and
 * the outputs some tap reads the input for. */
static void live_axis(const kiln_conv_geom *c, int a, live_run *taps, live_run *outs) {
  int64_t IN = c->in_sp[a], OUT = c->out_sp[a], K = c->k[a], s = c->stride[a], d = c->dil[a], p = c->pad_begin[a];
  *taps = (live_run){0, 1, 0, true};
  *outs = (live_run){0, 1, 0, true};
  for (int64_t k = 0; k < K; k++) {
    int64_t off = k * d - p; /* o * s + off in [0, IN) */
    if (max64(0, ceil_div(-off, s)) <= min64(OUT - 1, floor_div(IN - 1 - off, s))) live_run_add(taps, k);
  }
  for (int64_t o = 0; o < OUT; o++) {
    int64_t base = o * s - p; /* base + k * d in [0, IN) */
    if (max64(0, ceil_div(-base, d)) <= min64(K - 1, floor_div(IN - 1 - base, d))) live_run_add(outs, o);
  }
  taps->ok = taps->ok && taps->count > 0;
  outs->ok = outs->ok && outs->count > 0;
}

/* The most full output positions pruned (the plan keeps a map of them). */
#define PRUNE_MAX_OSIZE 4096

/* c less its dead taps and outputs into *out; false when nothing is left
 * out (or an axis's live positions are no progression, or none). */
static bool prune_geometry(const kiln_conv_geom *c, kiln_conv_geom *out, bool *taps_pruned, bool *outs_pruned) {
  if (c->n < 1 || c->ci < 1 || c->co < 1 || c->osize < 1) return false;
  *out = *c;
  *taps_pruned = *outs_pruned = false;
  int64_t kprod = 1;
  for (int a = 0; a < c->nsp; a++) {
    live_run t, o;
    live_axis(c, a, &t, &o);
    if (!t.ok && !o.ok) continue;
    if ((t.ok && t.count == 0) || (o.ok && o.count == 0)) return false;
    if (t.ok && t.count < c->k[a]) {
      out->k[a] = t.count;
      out->dil[a] = t.count > 1 ? c->dil[a] * t.step : 1;
      out->pad_begin[a] -= t.first * c->dil[a];
      *taps_pruned = true;
    }
    if (o.ok && o.count < c->out_sp[a] && c->osize <= PRUNE_MAX_OSIZE) {
      out->out_sp[a] = o.count;
      out->stride[a] = o.count > 1 ? c->stride[a] * o.step : 1;
      out->pad_begin[a] -= o.first * c->stride[a];
      *outs_pruned = true;
    }
    kprod *= out->k[a];
  }
  if (!*taps_pruned && !*outs_pruned) return false;
  out->y_cn = c->y_cn && !*outs_pruned; /* pruned outputs go to scratch in NCHW, prune_scatter swaps them */
  out->kdim = c->ci / c->group * kprod;
  out->osize = 1;
  for (int a = 0; a < c->nsp; a++) out->osize *= out->out_sp[a];
  return true;
}

/* The plan's maps (prune_offset): each kept tap's full kernel position,
 * each full output's pruned position or -1. */
static void prune_maps(const kiln_conv_plan *p, int32_t *tap_map, int32_t *out_map) {
  const kiln_conv_geom *f = &p->full, *c = &p->c;
  live_run t[3], o[3];
  for (int a = 0; a < f->nsp; a++) live_axis(f, a, &t[a], &o[a]);
  int64_t kprod = c->kdim / (c->ci / c->group);
  for (int64_t j = 0; j < kprod; j++) {
    int64_t rem = j, idx = 0, pos[3] = {0, 0, 0};
    for (int a = f->nsp - 1; a >= 0; a--) {
      pos[a] = rem % c->k[a];
      rem /= c->k[a];
    }
    for (int a = 0; a < f->nsp; a++)
      idx = idx * f->k[a] + (c->k[a] == f->k[a] ? pos[a] : t[a].first + pos[a] * t[a].step);
    tap_map[j] = (int32_t)idx;
  }
  if (!out_map) return;
  for (int64_t q = 0; q < f->osize; q++) {
    int64_t rem = q, idx = 0, pos[3] = {0, 0, 0};
    bool live = true;
    for (int a = f->nsp - 1; a >= 0; a--) {
      pos[a] = rem % f->out_sp[a];
      rem /= f->out_sp[a];
    }
    for (int a = 0; a < f->nsp && live; a++) {
      int64_t m = pos[a];
      if (c->out_sp[a] != f->out_sp[a]) {
        m -= o[a].first;
        live = m >= 0 && m % o[a].step == 0 && m / o[a].step < c->out_sp[a];
        m = live ? m / o[a].step : 0;
      }
      idx = idx * c->out_sp[a] + m;
    }
    out_map[q] = live ? (int32_t)idx : -1;
  }
}

typedef struct prune_ctx {
  const kiln_conv_plan *p;
  const float *w, *yp, *bias;
  float *wp, *y;
  const int32_t *tap_map, *out_map;
  const kiln_conv_epilogue *epi;
} prune_ctx;

/* Items: output channels; W's kept taps of each. */
static void prune_gather(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const prune_ctx *r = vctx;
  const kiln_conv_geom *c = &r->p->c, *f = &r->p->full;
  int64_t cig = c->ci / c->group, kp = c->kdim / cig, kf = f->kdim / cig;
  for (int64_t o = begin; o < end; o++)
    for (int64_t ch = 0; ch < cig; ch++) {
      const float *src = r->w + (o * cig + ch) * kf;
      float *dst = r->wp + (o * cig + ch) * kp;
      for (int64_t j = 0; j < kp; j++) dst[j] = src[r->tap_map[j]];
    }
}

/* Items: (image, channel) planes; the pruned output spread over the full
 * plane, the bias where no tap reads the input, then the epilogue. */
static void prune_scatter(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const prune_ctx *r = vctx;
  const kiln_conv_geom *c = &r->p->c, *f = &r->p->full;
  for (int64_t at = begin; at < end; at++) { /* y's planes in order: (image, channel), or (channel, image) */
    int64_t pl = f->y_cn ? (at % f->n) * f->co + at / f->n : at; /* = image * co + channel */
    float *y = r->y + at * f->osize, b0 = r->bias ? r->bias[pl % f->co] : 0.0f;
    const float *yp = r->yp + pl * c->osize;
    for (int64_t q = 0; q < f->osize; q++) y[q] = r->out_map[q] >= 0 ? yp[r->out_map[q]] : b0;
  }
  kiln_conv_epilogue_apply(r->epi, r->y, begin * f->osize, f->osize, end - begin, f->osize);
}

/* ---- plan ------------------------------------------------------------------------------ */

kiln_status_t kiln_conv_plan_create(const kiln_conv_geom *c, kiln_conv_algo algo, const float *w, int threads,
                                    kiln_conv_plan **out) {
  *out = NULL;
  kiln_conv_algo requested = algo;
  if (algo == KILN_CONV_AUTO) algo = kiln_conv_choose(c, w != NULL);
  if (!kiln_conv_algo_applies(c, algo, w != NULL))
    return kiln_error(KILN_INVALID_ARGUMENT, "conv algorithm %s does not apply to this convolution", kiln_conv_algo_name(algo));
  if (threads < 1) threads = 1;
  /* Weights at run time over small planes: the algorithms that build
   * im2col or im2row matrices run on the geometry without the taps and
   * outputs that see only padding (AUTO choosing again for it). */
  const kiln_conv_geom *full = c;
  kiln_conv_geom pruned;
  bool prune_taps = false, prune_out = false;
  if (!w && (algo == KILN_CONV_BATCHED || algo == KILN_CONV_IM2ROW || algo == KILN_CONV_IM2COL) &&
      prune_geometry(c, &pruned, &prune_taps, &prune_out)) {
    kiln_conv_algo again = requested == KILN_CONV_AUTO ? kiln_conv_choose(&pruned, false) : algo;
    if ((again != KILN_CONV_BATCHED && again != KILN_CONV_IM2ROW && again != KILN_CONV_IM2COL &&
         again != KILN_CONV_GEMM) ||
        !kiln_conv_algo_applies(&pruned, again, false))
      again = algo;
    if (kiln_conv_algo_applies(&pruned, again, false)) {
      c = &pruned;
      algo = again;
    } else {
      prune_taps = prune_out = false;
    }
  }
  kiln_conv_plan hdr;
  memset(&hdr, 0, sizeof hdr);
  hdr.c = *c;
  hdr.full = *full;
  hdr.prune_taps = prune_taps;
  hdr.prune_out = prune_out;
  hdr.algo = algo;
  hdr.threads = threads;
  hdr.isa = detect_isa();
  size_t payload = 0;
  switch (algo) {
    case KILN_CONV_IM2COL: {
      hdr.scratch_bytes = (size_t)c->kdim * (size_t)c->osize * sizeof(float);
      /* Blocked when the blocks can be wide enough for the micro-kernel
       * and many enough to share among the threads; each block's columns
       * (about 512 KB) stay in the thread's L2. */
      /* 3-D: the rows are (od, oh), and always blocked (a video model's
       * whole im2col matrix is tens of MB, written then read back). */
      if ((c->nsp == 2 && c->kdim <= 1152) || c->nsp == 3) {
        int64_t OH = im2col_out_rows(c), OW = c->out_sp[c->nsp - 1];
        int64_t rows = max64(1, max64(256, (int64_t)(131072 / c->kdim)) / OW);
        rows = min64(rows, ceil_div(OH, 2 * (int64_t)threads));
        if (rows * OW >= 128 && ceil_div(OH, rows) >= 2 * threads) {
          hdr.blk_rows = rows;
          hdr.blk_floats = round64((size_t)(c->kdim * rows * OW) * sizeof(float)) / sizeof(float);
          hdr.scratch_bytes = (size_t)threads * hdr.blk_floats * sizeof(float);
        }
      }
      break;
    }
    case KILN_CONV_DW3X3: {
      int64_t PH, PW;
      dw3_dims(c, &PH, &PW);
      hdr.dw_thread_floats = round64((size_t)((2 * PH + 1) * PW) * sizeof(float)) / sizeof(float);
      hdr.scratch_bytes = (size_t)threads * hdr.dw_thread_floats * sizeof(float);
      break;
    }
    case KILN_CONV_DWK:
      hdr.dw_thread_floats = kiln_conv_dwk_thread_floats(c);
      hdr.scratch_bytes = (size_t)threads * hdr.dw_thread_floats * sizeof(float);
      break;
    case KILN_CONV_WINOGRAD: {
      hdr.tiles_h = ceil_div(c->out_sp[0], 4);
      hdr.tiles_w = ceil_div(c->out_sp[1], 4);
      hdr.tiles = hdr.tiles_h * hdr.tiles_w;
      hdr.row_w = 4 * hdr.tiles_w + 2;
      hdr.v_floats = round64((size_t)(36 * hdr.tiles * c->ci) * sizeof(float)) / sizeof(float);
      hdr.m_floats = round64((size_t)(36 * hdr.tiles * c->co + WINO_LANES) * sizeof(float)) / sizeof(float);
      hdr.rows_floats = round64((size_t)(6 * hdr.row_w * WINO_LANES) * sizeof(float)) / sizeof(float);
      hdr.obuf_floats = round64((size_t)(WINO_LANES * 4 * 4 * hdr.tiles_w) * sizeof(float)) / sizeof(float);
      hdr.scratch_bytes =
          (hdr.v_floats + hdr.m_floats + (size_t)threads * (hdr.rows_floats + hdr.obuf_floats)) * sizeof(float);
      hdr.u_offset = round64(sizeof hdr);
      hdr.u_bytes = round64(kiln_sgemm_packed_b_size(c->ci, c->co));
      if (!hdr.u_bytes) return kiln_error(KILN_UNSUPPORTED, "Winograd weights too large");
      payload = 36 * hdr.u_bytes;
      break;
    }
    case KILN_CONV_IM2COL_PW: {
      /* Bands of about 256 KB of im2col columns (they stay in L2 while
       * every channel block reads them), at least 2 per thread when the
       * rows allow. */
      int64_t OH = c->out_sp[0], OW = c->out_sp[1];
      int64_t row_bytes = 4 * c->kdim * OW;
      int64_t rows = max64(1, (int64_t)(256 * 1024) / max64(1, row_bytes));
      /* the groups of the batch are items too: split the rows for the
       * threads only where there are too few of those */
      if (threads > 1 && c->n * c->group < 2 * (int64_t)threads)
        rows = min64(rows, max64(1, ceil_div(OH * c->n * c->group, 2 * (int64_t)threads)));
      rows = min64(rows, max64(1, OH));
      hdr.blk_rows = rows;
      hdr.blk_floats = round64((size_t)(c->kdim * rows * OW) * sizeof(float)) / sizeof(float);
      if (is_pointwise(c)) hdr.blk_floats = 0; /* read in place */
      hdr.scratch_bytes = (size_t)threads * hdr.blk_floats * sizeof(float);
      hdr.u_offset = round64(sizeof hdr);
      hdr.u_bytes = round64(kiln_conv_pw_packed_floats(c->co / c->group, c->kdim) * sizeof(float));
      payload = (size_t)c->group * hdr.u_bytes;
      break;
    }
    case KILN_CONV_ROWS:
    case KILN_CONV_PW: {
      if (algo == KILN_CONV_ROWS) {
        hdr.blk_floats = round64(kiln_conv_rows_thread_floats(c) * sizeof(float)) / sizeof(float);
        hdr.scratch_bytes = (size_t)threads * hdr.blk_floats * sizeof(float);
      }
      hdr.u_offset = round64(sizeof hdr);
      hdr.u_bytes = round64(kiln_conv_pw_packed_floats(c->co, c->kdim) * sizeof(float));
      payload = hdr.u_bytes;
      break;
    }
    case KILN_CONV_TAPS:
      hdr.scratch_bytes = round64(kiln_conv_taps_scratch_floats(c) * sizeof(float));
      hdr.u_offset = round64(sizeof hdr);
      payload = round64(kiln_conv_taps_weight_floats(c) * sizeof(float));
      break;
    case KILN_CONV_BATCHED: {
      /* Chunks of images whose columns take at most BATCH_COL_BYTES. */
      int64_t image_bytes = max64(1, c->kdim * c->osize * (int64_t)sizeof(float));
      hdr.batch_images = max64(1, min64(c->n, BATCH_COL_BYTES / image_bytes));
      int64_t pixels = hdr.batch_images * c->osize;
      hdr.blk_floats = round64((size_t)c->kdim * (size_t)pixels * sizeof(float)) / sizeof(float);
      hdr.t_floats = round64((size_t)pixels * (size_t)c->co * sizeof(float)) / sizeof(float);
      hdr.scratch_bytes = (hdr.blk_floats + hdr.t_floats) * sizeof(float);
      /* Weights at run time: W as A over the pixels as columns packs W's
       * rows in order, where W^T as B transposes it (ResNet-18's training
       * layers, batch 32: 10-20% faster); below 8 pixels the SGEMM streams
       * W^T once on its small-M path instead (batch 2 over 1x1 planes:
       * 0.5 ms, 1.1 ms with W as A). */
      hdr.batch_rows = !w && pixels >= 8;
      if (w) { /* constant: W^T packed once */
        hdr.u_offset = round64(sizeof hdr);
        hdr.u_bytes = round64(kiln_sgemm_packed_b_size(c->kdim, c->co));
        if (!hdr.u_bytes) return kiln_error(KILN_UNSUPPORTED, "conv weights too large");
        payload = hdr.u_bytes;
      }
      break;
    }
    case KILN_CONV_IM2ROW: {
      /* The rows of as many images as IM2ROW_BYTES holds with one channel
       * each, then as many channels as fit: K is sliced before M, so the
       * GEMM's B (W^T) is packed once per slice, not once per chunk of
       * images. */
      int64_t kprod = c->kdim / c->ci, per_channel = max64(1, c->osize * kprod * (int64_t)sizeof(float));
      hdr.batch_images = max64(1, min64(c->n, IM2ROW_BYTES / per_channel));
      hdr.row_channels = max64(1, min64(c->ci, IM2ROW_BYTES / (hdr.batch_images * per_channel)));
      int64_t pixels = hdr.batch_images * c->osize;
      hdr.blk_floats = round64((size_t)(hdr.row_channels * kprod) * (size_t)pixels * sizeof(float)) / sizeof(float);
      hdr.t_floats = round64((size_t)pixels * (size_t)c->co * sizeof(float)) / sizeof(float);
      hdr.scratch_bytes = (hdr.blk_floats + hdr.t_floats) * sizeof(float);
      if (w && hdr.row_channels == c->ci && !c->y_cn) { /* constant, K in one slice: W^T packed once */
        hdr.u_offset = round64(sizeof hdr);
        hdr.u_bytes = round64(kiln_sgemm_packed_b_size(c->kdim, c->co));
        if (!hdr.u_bytes) return kiln_error(KILN_UNSUPPORTED, "conv weights too large");
        payload = hdr.u_bytes;
      }
      break;
    }
    case KILN_CONV_GEMM_T:
    case KILN_CONV_IM2COL_T: {
      hdr.t_floats = round64((size_t)(c->osize * c->co) * sizeof(float)) / sizeof(float);
      hdr.scratch_bytes = hdr.t_floats * sizeof(float);
      if (algo == KILN_CONV_IM2COL_T) hdr.scratch_bytes += (size_t)c->kdim * (size_t)c->osize * sizeof(float);
      hdr.u_offset = round64(sizeof hdr);
      hdr.u_bytes = round64(kiln_sgemm_packed_b_size(c->kdim, c->co));
      if (!hdr.u_bytes) return kiln_error(KILN_UNSUPPORTED, "conv weights too large");
      payload = hdr.u_bytes;
      break;
    }
    default: break;
  }
  if (prune_taps || prune_out) {
    size_t maps = (size_t)(c->kdim / (c->ci / c->group) + (prune_out ? full->osize : 0)) * sizeof(int32_t);
    hdr.prune_offset = round64(sizeof hdr) + payload;
    payload += round64(maps);
    hdr.prune_scratch = round64(hdr.scratch_bytes);
    hdr.wp_floats = prune_taps ? round64((size_t)(c->co * c->kdim) * sizeof(float)) / sizeof(float) : 0;
    hdr.scratch_bytes = hdr.prune_scratch + hdr.wp_floats * sizeof(float) +
                        (prune_out ? (size_t)(c->n * c->co * c->osize) * sizeof(float) : 0);
  }
  size_t total = round64(sizeof hdr) + payload;
  kiln_conv_plan *p = kiln_alloc_aligned(round64(total));
  if (!p) return kiln_error(KILN_OUT_OF_MEMORY, "out of memory for a conv plan (%zu bytes)", total);
  *p = hdr;
  if (prune_taps || prune_out) {
    int32_t *maps = (int32_t *)((char *)p + p->prune_offset);
    prune_maps(p, maps, prune_out ? maps + c->kdim / (c->ci / c->group) : NULL);
  }
  if (algo == KILN_CONV_GEMM_T || algo == KILN_CONV_IM2COL_T || ((algo == KILN_CONV_BATCHED || algo == KILN_CONV_IM2ROW) && w && p->u_bytes))
    kiln_sgemm_pack_b(true, c->kdim, c->co, w, c->kdim, (char *)p + p->u_offset);
  if (algo == KILN_CONV_TAPS) kiln_conv_taps_pack(c, w, (float *)((char *)p + p->u_offset));
  if (algo == KILN_CONV_PW || algo == KILN_CONV_ROWS) kiln_conv_pw_pack(c->co, c->kdim, w, (float *)((char *)p + p->u_offset));
  if (algo == KILN_CONV_IM2COL_PW) {
    int64_t cog = c->co / c->group;
    for (int64_t gi = 0; gi < c->group; gi++)
      kiln_conv_pw_pack(cog, c->kdim, w + gi * cog * c->kdim, (float *)((char *)p + p->u_offset + (size_t)gi * p->u_bytes));
  }
  if (algo == KILN_CONV_WINOGRAD) {
    kiln_status_t st = wino_transform_weights(p, w);
    if (st) {
      free(p);
      return st;
    }
  }
  *out = p;
  return NULL;
}

size_t kiln_conv_plan_scratch_bytes(const kiln_conv_plan *p) { return p->scratch_bytes; }

void kiln_conv_plan_products(const kiln_conv_plan *p, int64_t *out_kdim, int64_t *out_osize) {
  *out_kdim = p->c.kdim;
  *out_osize = p->c.osize;
}

static void run_algo(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *w, const float *bias,
                     float *y, void *scratch, const kiln_conv_epilogue *epi) {
  const kiln_conv_geom *c = &p->c;
  switch (p->algo) {
    case KILN_CONV_DEPTHWISE:
    case KILN_CONV_DW3X3: {
      dw_ctx d = {p, x, w, bias, y, scratch, epi};
      kiln_parallel_for(pool, c->n * c->co, 1, p->algo == KILN_CONV_DW3X3 ? dw3x3_planes : dw_planes, &d);
      return;
    }
    case KILN_CONV_WINOGRAD: run_winograd(p, pool, x, bias, y, scratch, epi); return;
    case KILN_CONV_DW_DIRECT: kiln_conv_dw_direct_run(c, pool, x, w, bias, y, epi); return;
    case KILN_CONV_DWK: kiln_conv_dwk_run(c, pool, x, w, bias, y, scratch, p->dw_thread_floats, epi); return;
    case KILN_CONV_IM2COL_PW: run_im2col_pw(p, pool, x, bias, y, scratch, epi); return;
    case KILN_CONV_ROWS:
      kiln_conv_rows_run(c, pool, p->isa, (const float *)((const char *)p + p->u_offset), x, bias, y, scratch,
                         p->blk_floats, epi);
      return;
    case KILN_CONV_PW:
      for (int64_t img = 0; img < c->n; img++) {
        kiln_conv_pw_job j = {.co = c->co,
                              .k = c->ci,
                              .hw = c->osize,
                              .packed = (const float *)((const char *)p + p->u_offset),
                              .x = x + img * c->ci * c->osize,
                              .bias = bias,
                              .y = y + img * c->co * c->osize,
                              .y_base = img * c->co * c->osize,
                              .epi = epi};
        kiln_conv_pw_run(pool, p->isa, &j);
      }
      return;
    case KILN_CONV_GEMM_T:
    case KILN_CONV_IM2COL_T: run_gemm_t(p, pool, x, bias, y, scratch, epi); return;
    case KILN_CONV_BATCHED: run_batched(p, pool, x, w, bias, y, scratch, epi); return;
    case KILN_CONV_IM2ROW: run_im2row(p, pool, x, w, bias, y, scratch, epi); return;
    case KILN_CONV_TAPS:
      kiln_conv_taps_run(c, pool, (const float *)((const char *)p + p->u_offset), x, bias, y, scratch);
      for (int64_t img = 0; img < c->n; img++) kiln_conv_epilogue_apply(epi, y, img * c->co * c->osize, c->osize, c->co, c->osize);
      return;
    default: run_gemm(p, pool, x, w, bias, y, scratch, epi); return;
  }
}

void kiln_conv_run(const kiln_conv_plan *p, kiln_threadpool *pool, const float *x, const float *w, const float *bias,
                   float *y, void *scratch, const kiln_conv_epilogue *epi) {
  if (epi && !epi->fn) epi = NULL;
  if (!p->prune_taps && !p->prune_out) {
    run_algo(p, pool, x, w, bias, y, scratch, epi);
    return;
  }
  const kiln_conv_geom *c = &p->c;
  const int32_t *maps = (const int32_t *)((const char *)p + p->prune_offset);
  float *wp = (float *)((char *)scratch + p->prune_scratch), *yp = wp + p->wp_floats;
  prune_ctx r = {p, w, yp, bias, wp, y, maps, maps + c->kdim / (c->ci / c->group), epi};
  if (p->prune_taps) {
    kiln_parallel_for(pool, c->co, 1, prune_gather, &r);
    w = wp;
  }
  if (!p->prune_out) {
    run_algo(p, pool, x, w, bias, y, scratch, epi);
    return;
  }
  run_algo(p, pool, x, w, bias, yp, scratch, NULL);
  kiln_parallel_for(pool, p->full.n * p->full.co, 1, prune_scatter, &r);
}

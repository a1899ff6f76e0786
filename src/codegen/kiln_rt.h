/* kiln_rt.h — what generated kernels see of the kiln runtime.
 *
 * Generated C is compiled into its own shared object, without kiln's
 * headers; it reaches the runtime only through this table of function
 * pointers, passed to every entry point. This header is self-contained (it
 * is pasted verbatim at the top of every generated source) and is the whole
 * ABI between libkiln and generated code: change it and bump
 * KILN_RT_ABI_VERSION, which is part of the JIT cache key.
 *
 * Entry points are `void NAME(const kiln_rt *rt, void *const *buffers)`:
 * buffers[i] is the base pointer of the kernel's i-th tensor argument, in
 * the order the kernel's signature lists them, and buffers[n] (n: the
 * kernel's tensor count) its launch's state slot, a `kiln_rt_state **`:
 * what a runtime call prepares once for this launch (constant weights
 * packed or transformed, an algorithm chosen) lives there; it starts
 * NULL, and whoever owns the launch calls its destroy when done with it.
 * Runtime calls report failures (out of memory) to the device through
 * kiln_rt.fail; the kernel itself returns normally.
 */
#ifndef KILN_RT_H
#define KILN_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_RT_ABI_VERSION 9

typedef void (*kiln_rt_parallel_fn)(void *ctx, int64_t begin, int64_t end, int thread);
typedef void (*kiln_rt_epilogue_fn)(void *ctx, float *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb, int64_t nb);

/* What a per-tile epilogue (a kiln_rt_epilogue_fn a tensorized kernel
 * passes to sgemm or conv) gets as ctx: the kernel's buffers and where the tile sits in its flat output:
 * element (i, j) of a tile at (m0, n0) is output element
 * base + (m0 + i) * row + n0 + j. */
typedef struct kiln_rt_epilogue_ctx {
  void *const *buffers;
  int64_t base, row;
} kiln_rt_epilogue_ctx;

typedef struct kiln_rt_sgemm_args {
  bool trans_a, trans_b;
  int64_t m, n, k;
  float alpha;
  const float *a;
  int64_t lda;
  const float *b;
  int64_t ldb;
  const void *packed_b; /* B prepacked at session creation, or NULL */
  float beta;
  float *c;
  int64_t ldc;
  const float *bias;
  int bias_axis; /* 0 none, 1 per row (m), 2 per column (n) */
  kiln_rt_epilogue_fn epilogue;
  void *epilogue_ctx;
} kiln_rt_sgemm_args;

/* An 8-bit integer GEMM (kiln's igemm, devices/cpu/gemm/igemm.h): int32
 * C[i, j] = sum over p of (op(A)[i, p] - a_zero) * (op(B)[p, j] - b_zero),
 * exact modulo 2^32; A and B int8 (x_signed) or uint8. The per-tile
 * epilogue gets the int32 tile and may overwrite it with any 4-byte
 * element (a float in place): C is not read again. */
typedef void (*kiln_rt_iepilogue_fn)(void *ctx, int32_t *c, int64_t ldc, int64_t m0, int64_t n0, int64_t mb,
                                     int64_t nb);
typedef struct kiln_rt_igemm_args {
  bool trans_a, trans_b;
  bool a_signed, b_signed;
  int64_t m, n, k;
  const void *a;
  int64_t lda;
  const void *b;
  int64_t ldb;
  int32_t a_zero, b_zero;
  const void *packed_b; /* from igemm_packed_b (same b_zero), or NULL */
  int32_t *c;
  int64_t ldc;
  kiln_rt_iepilogue_fn epilogue;
  void *epilogue_ctx;
} kiln_rt_igemm_args;

/* A runtime call's prepared state for one launch (see the top). */
typedef struct kiln_rt_state {
  void (*destroy)(struct kiln_rt_state *self); /* frees it, self included */
} kiln_rt_state;

/* An ONNX Conv or ConvTranspose (NCHW, f32; or ConvInteger, below) computed by the runtime: y = conv(x, w)
 * (+ bias[channel]), then, when set, epilogue over every element of y in
 * place (tiles of rows = channels of one image, columns = pixels; the
 * kiln_rt_epilogue_ctx it gets has buffers = epilogue_buffers, and the
 * flat index of a tile's element as that struct says). With add or clip
 * set, the epilogue is exactly y += add[i] (flat output index i), then y
 * clipped to [lo, hi] (max and min keeping NaN), which a routine may apply
 * in registers instead of calling it. */
typedef struct kiln_rt_conv_args {
  int nsp; /* spatial dims, 1-3 */
  /* An ONNX ConvTranspose: w is [ci, co/group, kernel...] and output
   * position o gathers input i through tap k where
   * o = i*stride - pad_begin + k*dilation (pad_begin may be negative). */
  bool transposed;
  int64_t n, ci, co, group;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3];
  const float *x, *w;
  float *y;
  bool w_constant; /* w holds the same data at every launch: it may be transformed once */
  const float *bias, *add; /* each may be NULL */
  bool clip;
  float lo, hi;
  kiln_rt_epilogue_fn epilogue;
  void *const *epilogue_buffers;
  /* ConvInteger (integer set; not transposed): int32 yq = the sum of
   * (xq - x_zero) * (wq - w_zero[co]) over the window, the padding holding
   * x_zero (adds 0), xq and wq 8-bit (x_signed, w_signed), w_zero NULL (0)
   * or w_zero_count (1 or co) 8-bit values (w_zero_signed); x, w, y, bias,
   * add, clip and epilogue are not used: iepilogue, when set, gets the
   * int32 tiles as `epilogue` gets float ones. yq NULL: the sums are
   * tiles of the runtime's scratch and iepilogue (then required) stores
   * the output itself (an 8-bit QuantizeLinear after the sum). */
  bool integer;
  const void *xq, *wq;
  bool x_signed, w_signed, w_zero_signed;
  int32_t x_zero;
  const void *w_zero;
  int64_t w_zero_count;
  int32_t *yq;
  kiln_rt_iepilogue_fn iepilogue;
  /* y is [co, n, out...] (f32, group 1, no bias or epilogue): a Transpose
   * swapping the output's first two axes fused after the convolution (a
   * weight gradient read as [Co, Ci, k] when the Conv computes [Ci, Co, k]). */
  bool y_cn;
} kiln_rt_conv_args;

/* An ONNX MaxPool (max) or AveragePool over f32 x [n*c planes, spatial...]
 * (1-3 spatial dims) computed by the runtime into y [planes, out...]: the
 * window of output o along an axis covers input positions
 * o*stride - pad_begin + k*dilation (k < kernel); positions outside
 * [0, in) are padding and never read. Max: the largest element (-inf for
 * a window of padding only; NaN wins, as TE_RMAX's compare keeps it).
 * Average: the sum of the elements inside the input (in window order,
 * innermost axis first) divided by the product over axes of the count of
 * positions inside the input, or with count_include_pad inside
 * [-pad_begin, in + pad_end). Then, when set, epilogue over every element
 * of y in place, one plane a tile (kiln_rt_epilogue_ctx: base 0, row the
 * plane's elements). y NULL (an output that is not f32, a QDQ graph's
 * quantized MaxPool): each plane is pooled into the routine's scratch and
 * the epilogue, then required, reads it there and stores the output. */
typedef struct kiln_rt_pool_args {
  int nsp;
  bool max, count_include_pad;
  int64_t planes;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
  const float *x;
  float *y;
  kiln_rt_epilogue_fn epilogue;
  void *const *epilogue_buffers;
} kiln_rt_pool_args;

/* A resampling (kiln.Resize's tables) of f32 x [planes, in...] into y
 * [planes, out...] (nsp <= 6 dims after the planes): along each of
 * n_axes resampled dims (axis: its index among those dims), output o is
 * the sum over t < taps of weight[o*taps + t] (1 when weight is NULL) times
 * the input at index[o*taps + t] clamped into [0, in); the other dims are
 * copied (in == out). Dims are resampled innermost first, each sum in tap
 * order. Then, when set, epilogue over y in place, one plane a tile
 * (kiln_rt_epilogue_ctx: base 0, row the plane's elements). */
typedef struct kiln_rt_resample_args {
  int nsp;
  int64_t planes;
  int64_t in[6], out[6];
  int n_axes;
  int axis[3];
  int64_t taps[3];
  const int32_t *index[3];
  const float *weight[3];
  const float *x;
  float *y;
  kiln_rt_epilogue_fn epilogue;
  void *const *epilogue_buffers;
} kiln_rt_resample_args;

typedef struct kiln_rt {
  int abi_version;
  void *pool; /* the session's thread pool */
  int n_threads;
  /* Splits [0, n) into chunks of at least `grain` and runs fn on the pool. */
  void (*parallel_for)(void *pool, int64_t n, int64_t grain, kiln_rt_parallel_fn fn, void *ctx);
  /* f32 GEMM with bias and a per-tile epilogue (kiln's packed micro-kernels). */
  void (*sgemm)(void *pool, const kiln_rt_sgemm_args *args);
  /* args' op(B) packed for sgemm's packed_b, once per launch (*slot); only
   * for a B that holds the same data at every launch. args' m: the rows of
   * the calls that will read it (0: not known). NULL when it could not be
   * packed (out of memory, reported through fail) or is better read where
   * it is (a GEMV-like m): pass B as is. */
  const void *(*sgemm_packed_b)(const struct kiln_rt *rt, const kiln_rt_sgemm_args *args, kiln_rt_state **slot);
  /* A convolution; its plan (algorithm, transformed weights) is kept in
   * *slot. Out of memory: reported through fail, y left unwritten. */
  void (*conv)(const struct kiln_rt *rt, const kiln_rt_conv_args *args, kiln_rt_state **slot);
  /* Records that a runtime call failed (message printf-style); the device
   * turns it into the launch's error. */
  void (*fail)(const struct kiln_rt *rt, const char *message);
  /* The integer GEMM over the pool, and its B packed once per launch
   * (as sgemm_packed_b; args' b, ldb, trans_b, b_signed, b_zero, k, n). */
  void (*igemm)(void *pool, const kiln_rt_igemm_args *args);
  const void *(*igemm_packed_b)(const struct kiln_rt *rt, const kiln_rt_igemm_args *args, kiln_rt_state **slot);
  /* MaxPool or AveragePool (kiln_rt_pool_args) over the thread pool; out of
   * memory reported through fail. */
  void (*pooling)(const struct kiln_rt *rt, const kiln_rt_pool_args *args);
  /* Resize by tables (kiln_rt_resample_args) over the thread pool; out of
   * memory reported through fail. */
  void (*resample)(const struct kiln_rt *rt, const kiln_rt_resample_args *args);
} kiln_rt;

#endif

/* vk_kernels.h — GLSL compute shaders for the ops the Vulkan device runs as
 * hand-scheduled kernels: MatMul/Gemm, Conv, MaxPool/AveragePool and
 * kiln.FusedAttention.
 *
 * Every size, stride, offset and element count is a specialization
 * constant (`layout(constant_id = N) const int KK_... = 1;` at the top of
 * the source, N from 0; the values in src.spec, index i = constant_id
 * first_id + i), so kernels of the same structure but different shapes
 * have byte-identical sources (one SPIR-V module), and the driver folds
 * all index arithmetic when it creates the pipeline. What decides the
 * structure stays literal: tiles, workgroup size, shared array sizes,
 * which edge guards exist, unrolled counts, vec4 loads, fp16, bias, the
 * number of batch axes, alpha/beta/scale. Usage:
 *
 *   vk_matmul_desc d;
 *   vk_matmul_desc_init(&d, m, n, k);          // alpha 1, no batch, no bias
 *   vk_kernel_src src;
 *   KILN_TRY(vk_gen_matmul(&d, vk_context_props(ctx), epi_or_NULL, &src));
 *   spec = src.spec as vk_spec_const {first_id + i, values[i]}, then the epilogue's (ids >= 1000)
 *   vk_kernel_desc kd = {src.name, src.glsl, src.n_buffers, src.push_bytes, spec, n_spec};
 *   ... vk_kernel_create(ctx, &kd, &k) ...
 *   buffers: the generator's own (documented order) then the epilogue's
 *   vk_stream_dispatch(s, k, buffers, NULL, src.groups[0], src.groups[1], src.groups[2]);
 *   vk_kernel_src_free(&src);
 *
 * A group count of 0 (empty output) means: record no dispatch.
 *
 * Data type: float32 everywhere, or with the desc's `fp16` set, IEEE half
 * in device memory: every tensor binding (X/W/bias/Y/Q/K/V/mask, A/B/C/Y)
 * is a float16_t[] (GL_EXT_shader_16bit_storage; the device needs
 * storageBuffer16BitAccess, which vk_device_props.fp16 implies). Loads
 * convert to float, and all arithmetic is f32 except, when the desc's
 * `fp16_arith` is also set, in the tiled
 * contraction (the MatMul/Gemm kernels named gemm*, implicit-GEMM Conv
 * named conv*): there the shared-memory A/B tiles hold float16_t (exactly
 * the loaded halves) and the inner product is computed in half over runs
 * of 4 consecutive k's (the run's products and their running sum, f16vec4
 * fma; the device needs shaderFloat16, which vk_device_props.fp16 also
 * implies), each run's sum then added to an f32 accumulator. So a result's
 * error from the arithmetic is about 4 * 2^-11 * sum_k |a_k b_k| at most
 * (plus K * 2^-24 where products are subnormal in half), independent of K
 * relative to that sum; a run whose products or partial sums pass 65504
 * overflows to inf. GEMV (m or n 1), depthwise conv, pooling, attention,
 * bias, alpha/beta and epilogues stay f32, as does everything else in
 * shared memory. Each output element is rounded to half once, when stored
 * (the device's f32->f16 conversion: round to nearest even on lavapipe,
 * NVIDIA, AMD and Intel, as is half arithmetic there; Vulkan leaves both to
 * the implementation without a rounding-mode execution mode). Offsets,
 * strides and sizes stay in elements (2 bytes each then); bind buffers
 * whose size is rounded up to 4 bytes. An epilogue pasted into an fp16
 * kernel must declare its f32 buffers float16_t too
 * (kiln_render_glsl_epilogue_opts with fp16); it still receives and returns
 * float. fp16 false gives exactly the f32 source. Element offsets
 * (`*_offset`) let an operand live inside a larger buffer (each binding is
 * bound as a whole buffer).
 * Indices are 32-bit in the shaders: every buffer extent a kernel touches
 * must stay below 2^31 elements (the generators check, KILN_UNSUPPORTED).
 *
 * Epilogue: when `epi` is given, its `binding_base` must equal the kernel's
 * own buffer count (the number documented for each generator); `decls`
 * (storage-buffer declarations at bindings binding_base.. +n_buffers) and
 * `func` (`float FN(int idx, float raw)`) are pasted in after the kernel's
 * own declarations, and each output element is stored as
 * `y[y_offset + idx] = FN(idx, raw)`, idx being the element's flat
 * row-major index in the output tensor (without y_offset). The kernels' own
 * global identifiers all start with `kk_`; an epilogue must not use that
 * prefix.
 *
 * Thread-safety: the generators are pure functions of their arguments.
 * `props` (borrowed) supplies the limits: max_workgroup_invocations,
 * max_workgroup_size[0], max_workgroup_count[], max_shared_bytes and type;
 * NULL means a conservative device (128 invocations, 16 KiB shared).
 */
#ifndef KILN_DEVICES_VULKAN_VK_KERNELS_H
#define KILN_DEVICES_VULKAN_VK_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "codegen/loopnest.h"
#include "devices/vulkan/vk_runtime.h"

#define VK_KERNEL_MAX_BATCH 4 /* batch (broadcast) axes a batched kernel takes */

/* Specialization constant ids: a generator numbers its own from 0; an
 * epilogue's start at VK_EPILOGUE_SPEC_BASE (its decls declare them). */
#define VK_EPILOGUE_SPEC_BASE 1000

typedef struct vk_epilogue {      /* optional elementwise epilogue, from the glsl renderer */
  const char *decls;              /* buffer + specialization-constant declarations (bindings [binding_base,
                                     binding_base+n_buffers)); borrowed */
  const char *func;               /* float FN(int idx, float raw); borrowed */
  const char *fn_name;            /* borrowed */
  int binding_base, n_buffers;
} vk_epilogue;

typedef struct vk_kernel_src {
  char name[64];
  char *glsl;          /* owned; free with vk_kernel_src_free */
  int n_buffers;       /* the kernel's own buffers + the epilogue's */
  uint32_t groups[3];  /* dispatch size (all 0: nothing to do) */
  uint32_t push_bytes; /* 0 */
  double flops;        /* multiply-adds count 2 */
  kiln_glsl_spec spec; /* the generator's own specialization constants (first_id 0); owned. The
                          epilogue's (if any) are the caller's: pass both to vk_kernel_desc.spec */
} vk_kernel_src;

void vk_kernel_src_free(vk_kernel_src *src); /* frees glsl and spec; src itself is the caller's */

/* ---- MatMul / Gemm -----------------------------------------------------------
 * For every output batch index b (batch[0..n_batch) row-major, the batch
 * axes of the output) and row i < m, column j < n:
 *
 *   Y[b, i, j] = alpha * sum_k opA(b)[i, k] * opB(b)[k, j]
 *                + beta * bias[bias_offset + sum_a b_a * bias_batch_stride[a]
 *                          + i * bias_stride_m + j * bias_stride_n]      (if has_bias)
 *
 *   opA(b)[i, k] = A[a_offset + sum_a b_a * a_batch_stride[a] + (trans_a ? k * m + i : i * k_dim + k)]
 *   opB(b)[k, j] = B[b_offset + sum_a b_a * b_batch_stride[a] + (trans_b ? j * k_dim + k : k * n + j)]
 *
 * i.e. each matrix is dense row-major ([m, k] / [k, m] for A, [k, n] / [n, k]
 * for B), batch strides are in elements (0 = broadcast), and Y is dense
 * [batch..., m, n] at y_offset. Bias strides cover Gemm's C (scalar: 0, 0;
 * [n]: 0, 1; [m, 1]: 1, 0; [m, n]: n, 1) and any broadcast of it.
 * MatMul's numpy rules: 1-D operands promoted by the caller (m or n = 1).
 *
 * Buffers: 0 A, 1 B, [2 bias if has_bias], then Y  (own count 3 or 4).
 * Kernels: m == 1 or n == 1 -> GEMV (K split across a workgroup, reduced
 * in shared memory); otherwise a shared-memory tiled GEMM, BK 16, with
 * edge guards only on the axes that need them. Tiles by size and device:
 * GPUs 128x128 (8x8 per invocation, 256 invocations) for big problems,
 * 64x64 / 32x32 / 16x16 with 4x4 / 2x2 / 1x1 blocks otherwise; CPU
 * devices (lavapipe) 64x64 with 8x16 blocks (32 invocations). Blocks of
 * 4k x 4k read their shared-memory operands as vec4s. An operand whose
 * contiguous dimension, offset and batch strides (axes > 1) are multiples
 * of 4 is loaded from memory as vec4s (f16vec4 in fp16) through a second,
 * aliased declaration of its binding.
 */
typedef struct vk_matmul_desc {
  int64_t m, n, k;
  bool trans_a, trans_b;
  float alpha; /* 1 for MatMul */
  int n_batch; /* 0..VK_KERNEL_MAX_BATCH */
  int64_t batch[VK_KERNEL_MAX_BATCH];
  int64_t a_batch_stride[VK_KERNEL_MAX_BATCH], b_batch_stride[VK_KERNEL_MAX_BATCH];
  bool has_bias;
  float beta;
  int64_t bias_batch_stride[VK_KERNEL_MAX_BATCH], bias_stride_m, bias_stride_n;
  int64_t a_offset, b_offset, bias_offset, y_offset;
  bool fp16; /* A, B, bias, Y are float16_t (see "Data type"); false: f32 */
  bool fp16_arith; /* with fp16: the tiled contraction multiplies in half (see "Data type"). The vulkan
                      planner sets it on GPUs; CPU devices (lavapipe: 1.4x slower at 1024^3) keep f32 */
} vk_matmul_desc;

/* Zeroes *d (so fp16 = false) and sets m, n, k, alpha = beta = 1. */
void vk_matmul_desc_init(vk_matmul_desc *d, int64_t m, int64_t n, int64_t k);
kiln_status_t vk_gen_matmul(const vk_matmul_desc *d, const vk_device_props *props, const vk_epilogue *epi,
                            vk_kernel_src *out);

/* ---- Conv (NCHW, 1-D / 2-D / 3-D spatial) --------------------------------------
 *   Y[b, co, o...] = bias[co] + sum_{ci in co's group, kernel offsets t...}
 *                      W[co, ci, t...] * X[b, g*Cin/group + ci, o*stride + t*dilation - pad_begin]
 * reading 0 outside the input (so pad_end is implied by out[]). The caller
 * computes out[] (auto_pad, pads) like the reference; X [batch, in_channels,
 * in...], W [out_channels, in_channels/group, kernel...], Y [batch,
 * out_channels, out...], all dense at their offsets.
 *
 * Buffers: 0 X, 1 W, [2 bias if has_bias], then Y  (own count 3 or 4).
 * Kernels: depthwise (group == in_channels == out_channels, 1-D/2-D): one
 * workgroup per output tile of one plane, input patch + filter in shared
 * memory; otherwise implicit GEMM (Y_g = W_g [Cout/g, Cin/g*prod(k)] x
 * im2col(X_g) [.., batch*prod(out)], the B tile gathered from X while it is
 * loaded into shared memory; W read as vec4s when Cin/group * prod(kernel)
 * and w_offset are multiples of 4, X too when the conv is pointwise (1x1,
 * stride 1, no pads) with prod(in) and x_offset multiples of 4).
 */
typedef struct vk_conv_desc {
  int n_spatial; /* 1..3 */
  int64_t batch, in_channels, out_channels, group;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3];
  bool has_bias;
  int64_t x_offset, w_offset, bias_offset, y_offset;
  bool fp16; /* X, W, bias, Y are float16_t (see "Data type"); false: f32 */
  bool fp16_arith; /* as in vk_matmul_desc */
} vk_conv_desc;

/* False (and a reason in why[0..why_len), if why is not NULL) for a conv the
 * generator does not take: bad geometry, sizes past 2^31 elements, too many
 * workgroups for the device. All spatial ranks 1..3 are supported. */
bool vk_conv_supported(const vk_conv_desc *d, const vk_device_props *props, char *why, size_t why_len);
kiln_status_t vk_gen_conv(const vk_conv_desc *d, const vk_device_props *props, const vk_epilogue *epi,
                          vk_kernel_src *out);

/* ---- MaxPool / AveragePool (NCHW, 1-D / 2-D / 3-D) --------------------------------
 * ONNX semantics: window position p = o*stride + t*dilation - pad_begin;
 * positions outside [0, in) are skipped. Max: NaN propagates, an empty
 * window gives -inf. Average: sum / count, count = positions inside the
 * input, or with count_include_pad those inside [-pad_begin, in + pad_end)
 * (ceil_mode's extra positions past pad_end are never counted); count 0
 * gives NaN. The caller computes out[] (ceil_mode, auto_pad) like the
 * reference (ops/window.c kiln_window_init). Global pools: kernel = in, out = 1
 * (the glsl renderer's reductions normally take those).
 *
 * Buffers: 0 X, 1 Y  (own count 2). One invocation per output element. */
typedef enum vk_pool_kind { VK_POOL_MAX, VK_POOL_AVG } vk_pool_kind;
typedef struct vk_pool_desc {
  vk_pool_kind kind;
  int n_spatial; /* 1..3 */
  int64_t batch, channels;
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];
  bool count_include_pad;
  int64_t x_offset, y_offset;
  bool fp16; /* X, Y are float16_t (see "Data type"); false: f32 */
} vk_pool_desc;
kiln_status_t vk_gen_pool(const vk_pool_desc *d, const vk_device_props *props, const vk_epilogue *epi,
                          vk_kernel_src *out);

/* ---- kiln.FusedAttention -----------------------------------------------------------
 *   Y[b, i, :] = softmax_j(scale * Q[b, i, :] . K[b, j, :] + mask[b, i, j]) . V[b, j, :]
 * Q [m, d], K [n, d] (transpose_k) or [d, n], V [n, dv], Y dense [batch..., m, dv];
 * batch strides in elements (0 = broadcast) like vk_matmul_desc; mask element
 * mask[mask_offset + sum_a b_a * mask_batch_stride[a] + i * mask_stride_m + j * mask_stride_n].
 * One workgroup per (batch, block of query rows): the Q block, one K/V block
 * and the score block live in shared memory; online (flash) softmax over
 * key blocks, so any n fits. Each invocation computes a register block of
 * scores and of outputs; the block's row maxima are reduced across the
 * workgroup, and each invocation keeps its rows' running max and sums in
 * registers. A row whose scores are all -inf gives NaN like the reference.
 *
 * Buffers: 0 Q, 1 K, 2 V, [3 mask if has_mask], then Y  (own count 4 or 5). */
typedef struct vk_attention_desc {
  int64_t m, n, d, dv;
  bool transpose_k;
  float scale;
  int n_batch;
  int64_t batch[VK_KERNEL_MAX_BATCH];
  int64_t q_batch_stride[VK_KERNEL_MAX_BATCH], k_batch_stride[VK_KERNEL_MAX_BATCH],
      v_batch_stride[VK_KERNEL_MAX_BATCH];
  bool has_mask;
  int64_t mask_batch_stride[VK_KERNEL_MAX_BATCH], mask_stride_m, mask_stride_n;
  int64_t q_offset, k_offset, v_offset, mask_offset, y_offset;
  bool fp16; /* Q, K, V, mask, Y are float16_t (see "Data type"); false: f32 */
} vk_attention_desc;

/* False (with a reason) when the head sizes are too large for the device's
 * shared memory even with one query row and one key per block. */
bool vk_attention_supported(const vk_attention_desc *d, const vk_device_props *props, char *why, size_t why_len);
kiln_status_t vk_gen_attention(const vk_attention_desc *d, const vk_device_props *props, const vk_epilogue *epi,
                               vk_kernel_src *out);

#endif

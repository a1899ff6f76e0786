/* vk_kernels_internal.h — pieces shared by the GLSL generators in
 * vk_kernels*.c: source preamble, buffer declarations, the epilogue store,
 * batch-offset decomposition, and the shared-memory tiled contraction core
 * that MatMul/Gemm and implicit-GEMM Conv both use. Not a public API. */
#ifndef KILN_DEVICES_VULKAN_VK_KERNELS_INTERNAL_H
#define KILN_DEVICES_VULKAN_VK_KERNELS_INTERNAL_H

#include "base/strbuf.h"
#include "devices/vulkan/vk_kernels.h"

#define KK_INDEX_LIMIT ((int64_t)INT32_MAX) /* shaders index with 32-bit int */

/* "#version 450", the 16-bit storage extensions when fp16, and the workgroup size. */
void kk_preamble(kiln_strbuf *s, uint32_t lx, uint32_t ly, uint32_t lz, bool fp16);
/* fp16 storage: the element type of a tensor buffer, and the text around a
 * loaded element that makes it a float (`float(` `)`, or nothing in f32). */
static inline const char *kk_ftype(bool fp16) { return fp16 ? "float16_t" : "float"; }
static inline const char *kk_ld(bool fp16) { return fp16 ? "float(" : ""; }
static inline const char *kk_le(bool fp16) { return fp16 ? ")" : ""; }
/* One std430 storage buffer `TYPE NAME[]` at set 0. */
void kk_buffer(kiln_strbuf *s, int binding, const char *type, const char *name, bool readonly);
/* Checks the epilogue fits after `own` buffers. */
kiln_status_t kk_check_epilogue(const vk_epilogue *epi, int own);
/* Pastes the epilogue's declarations and function, then defines
 * `void kk_store(int idx, float v)` writing y[y_offset + idx] (through the
 * epilogue if any; rounded to float16_t when fp16). `y` is the kernel's
 * output buffer name. */
void kk_store_fn(kiln_strbuf *s, const vk_epilogue *epi, const char *y, int64_t y_offset, bool fp16);
/* A GLSL float literal for v (false for inf/NaN). */
bool kk_float(char *buf, size_t len, double v);
/* Largest element index + 1 an operand touches: offset + sum (batch_i - 1) * stride_i + inner. */
int64_t kk_extent(int64_t offset, int n_batch, const int64_t *batch, const int64_t *strides, int64_t inner);
/* Workgroup count limit of axis i (65535 when unknown). */
uint32_t kk_max_groups(const vk_device_props *p, int axis);
/* Finishes a generated source: takes the string, fills name/groups/flops. */
kiln_status_t kk_finish(kiln_strbuf *s, vk_kernel_src *out, const char *name, int own, const vk_epilogue *epi,
                        const uint32_t groups[3], double flops);
/* Emits, inside a function body, `int NAME_i = OFFSET_i + sum_a idx_a * STRIDE_i[a];` for
 * each operand, decomposing `zexpr` over the row-major batch dims. */
void kk_batch_offsets(kiln_strbuf *s, const char *zexpr, int n_batch, const int64_t *batch, int n_ops,
                      const char *const *names, const int64_t *const *strides, const int64_t *offsets);
/* Linear workgroup count -> (x, y) within the device's limits (false if too many). */
bool kk_split_linear(uint64_t count, const vk_device_props *p, uint32_t out[2]);
/* Workgroup size the generators use for 1-D kernels. */
uint32_t kk_threads(const vk_device_props *p, uint32_t want);

/* ---- tiled contraction ---------------------------------------------------------
 * C[M, N] (per slice z = gl_WorkGroupID.z) = sum_k A[row, k] * B[k, col].
 * Grid: x = N tiles, y = M tiles, z = slices. Before calling, the caller
 * emits (global scope):
 *   void  kk_setup(int z);                 sets its globals for slice z
 *   float kk_load_a(int row, int k);       row < M, k < K (guaranteed)
 *   float kk_load_b(int k, int col);       k < K, col < N (guaranteed)
 *   void  kk_emit(int row, int col, float acc);   row < M, col < N
 * a_k_fast / b_col_fast: which index is contiguous in memory, so that
 * consecutive invocations load consecutive addresses. */
typedef struct kk_tile {
  int tm, tn, bk, rm, rn; /* tile M x N, K step, per-invocation block rm x rn */
} kk_tile;
/* Tile for an m x n output per slice, `slices` slices (batch / groups). */
kk_tile kk_pick_tile(int64_t m, int64_t n, int64_t slices, const vk_device_props *p);
int kk_tile_threads(const kk_tile *t);
void kk_emit_tiled(kiln_strbuf *s, const kk_tile *t, int64_t m, int64_t n, int64_t k, bool a_k_fast,
                   bool b_col_fast);

#endif

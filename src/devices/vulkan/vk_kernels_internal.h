/* vk_kernels_internal.h — pieces shared by the GLSL generators in
 * vk_kernels*.c: source preamble, buffer declarations, the epilogue store,
 * batch-offset decomposition, and the shared-memory tiled contraction core
 * that MatMul/Gemm and implicit-GEMM Conv both use. Not a public API. */
#ifndef KILN_DEVICES_VULKAN_VK_KERNELS_INTERNAL_H
#define KILN_DEVICES_VULKAN_VK_KERNELS_INTERNAL_H

#include "base/strbuf.h"
#include "devices/vulkan/vk_kernels.h"

#define KK_INDEX_LIMIT ((int64_t)INT32_MAX) /* shaders index with 32-bit int */

/* ---- specialization constants ---------------------------------------------------------
 * Sizes, strides, offsets and element counts are not literals in the
 * generated source: each is a named constant
 *   layout(constant_id = N) const int NAME = 1;
 * declared once at the top of the source (kk_finish puts the declarations
 * right after the preamble), N numbered from 0 in the order first asked
 * for, its value appended to the spec list at the same index. So two
 * kernels of the same structure but different sizes have byte-identical
 * sources (one SPIR-V module); the driver folds the values when it
 * creates the pipeline. What decides the structure (tiles, workgroup size,
 * shared array sizes, which guards exist, unrolled counts) stays literal. */
#define KK_MAX_CONSTS 96
typedef struct kk_consts {
  kiln_glsl_spec spec; /* values, index = constant_id; owned until kk_finish moves it into the output */
  kiln_strbuf decls;   /* the declarations, in id order; owned */
  int n;
  char names[KK_MAX_CONSTS][24];
  bool bad; /* a value outside int32, a name reused with another value, too many: kk_finish fails */
} kk_consts;
/* The name of constant `name` with `value`, declared on first use (later
 * uses must give the same value). The returned string lives in *c. */
const char *kk_const(kk_consts *c, const char *name, int64_t value);
/* Like kk_const, the name being `stem` followed by i in decimal (e.g. "KK_BATCH", axis). */
const char *kk_constn(kk_consts *c, const char *stem, int i, int64_t value);
void kk_consts_free(kk_consts *c); /* on paths that do not reach kk_finish */

/* "#version 450", the 16-bit storage and float16 arithmetic extensions when fp16, and the workgroup size. */
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
void kk_store_fn(kiln_strbuf *s, kk_consts *c, const vk_epilogue *epi, const char *y, int64_t y_offset, bool fp16);
/* A GLSL float literal for v (false for inf/NaN). */
bool kk_float(char *buf, size_t len, double v);
/* Largest element index + 1 an operand touches: offset + sum (batch_i - 1) * stride_i + inner. */
int64_t kk_extent(int64_t offset, int n_batch, const int64_t *batch, const int64_t *strides, int64_t inner);
/* Workgroup count limit of axis i (65535 when unknown). */
uint32_t kk_max_groups(const vk_device_props *p, int axis);
/* Finishes a generated source: takes the string (which starts with
 * kk_preamble's text), puts c's declarations after the preamble, moves c's
 * values into out->spec, fills name/groups/flops. Frees s and c on failure. */
kiln_status_t kk_finish(kiln_strbuf *s, kk_consts *c, vk_kernel_src *out, const char *name, int own, const vk_epilogue *epi,
                        const uint32_t groups[3], double flops);
/* Emits, inside a function body, `NAME_i = OFFSET_i + sum_a idx_a * STRIDE_i[a];` for
 * each operand, decomposing `zexpr` over the row-major batch dims (every
 * axis, so the source does not depend on which are 1 or broadcast).
 * Constants: KK_BATCHa for the dims, upper-cased NAME_i for the offset,
 * NAME_i + "_Sa" for its strides (strides[i] NULL: the operand has none). */
void kk_batch_offsets(kiln_strbuf *s, kk_consts *c, const char *zexpr, int n_batch, const int64_t *batch, int n_ops,
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
 * consecutive invocations load consecutive addresses.
 * a_vec / b_vec: the caller also emitted
 *   vec4 kk_load_a4(int row, int k);   A at (row, k..k+3) if a_k_fast, else (row..row+3, k)
 *   vec4 kk_load_b4(int k, int col);   B at (k..k+3, col) unless b_col_fast, else (k, col..col+3)
 * (one 16-byte load each), and promises the fast dimension's size (K, or
 * M / N) is a multiple of 4; the tiles are then loaded 4 elements at a
 * time. Start coordinates passed are multiples of 4 along that dimension. */
typedef struct kk_tile {
  int tm, tn, bk, rm, rn; /* tile M x N, K step, per-invocation block rm x rn */
} kk_tile;
/* Tile for an m x n output per slice, `slices` slices (batch / groups). */
kk_tile kk_pick_tile(int64_t m, int64_t n, int64_t slices, const vk_device_props *p);
int kk_tile_threads(const kk_tile *t);
/* The sizes are the constants KK_M, KK_N, KK_K (the caller's loads may use them too).
 * fp16 (the kernel's desc.fp16; the device then has shaderFloat16): the
 * shared A/B tiles are float16_t (the loads' floats converted back, exactly,
 * as they came from half buffers), and each run of KK_HALF_CHUNK
 * consecutive k's of the inner product is computed in half (f16vec4
 * products and fma in vec mode, scalar float16_t otherwise) and then added
 * to the f32 accumulator: the sum over K stays f32, kk_emit receives a
 * float. fp16 false: exactly the f32 source. */
#define KK_HALF_CHUNK 4
void kk_emit_tiled(kiln_strbuf *s, kk_consts *c, const kk_tile *t, int64_t m, int64_t n, int64_t k, bool a_k_fast,
                   bool b_col_fast, bool a_vec, bool b_vec, bool fp16);
/* True when an operand at `offset` with batch strides (over batch[0..n_batch)) and a
 * fast dimension of `fast` elements can be read as aligned vec4s: all multiples of 4
 * (axes of size 1 do not count). */
bool kk_vec4_ok(int64_t offset, int n_batch, const int64_t *batch, const int64_t *strides, int64_t fast);
/* The aliased vec4 view of binding `binding`: `TYPE NAME[]` with TYPE vec4 or f16vec4. */
void kk_buffer_vec4(kiln_strbuf *s, int binding, const char *name, bool fp16);

#endif

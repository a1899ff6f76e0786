/* GLSL generators shared by all hand-scheduled Vulkan kernels (source
 * pieces, the tiled contraction core), and MatMul/Gemm: the tiled GEMM and
 * the GEMV path for m == 1 or n == 1. See vk_kernels.h for the contracts. */
#if KILN_HAVE_VULKAN

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "devices/vulkan/vk_kernels_internal.h"

/* ---- source pieces ----------------------------------------------------------------- */

void vk_kernel_src_free(vk_kernel_src *src) {
  if (!src) return;
  free(src->glsl);
  src->glsl = NULL;
  kiln_glsl_spec_free(&src->spec);
}

const char *kk_const(kk_consts *c, const char *name, int64_t value) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->names[i], name)) {
      if (c->spec.values[i] != value) c->bad = true; /* one name, two values: a generator bug */
      return c->names[i];
    }
  if (c->n == KK_MAX_CONSTS || strlen(name) >= sizeof c->names[0] || value < INT32_MIN || value > INT32_MAX) {
    c->bad = true;
    return "0"; /* keeps the text well-formed; kk_finish fails */
  }
  int id = kiln_glsl_spec_add(&c->spec, (int32_t)value);
  if (id < 0) return "0"; /* spec.oom: kk_finish fails */
  snprintf(c->names[c->n], sizeof c->names[0], "%s", name);
  /* default 1: never a division by zero in the unspecialized module */
  kiln_strbuf_printf(&c->decls, "layout(constant_id = %d) const int %s = 1;\n", id, name);
  return c->names[c->n++];
}

const char *kk_constn(kk_consts *c, const char *stem, int i, int64_t value) {
  char name[sizeof c->names[0] + 16];
  snprintf(name, sizeof name, "%s%d", stem, i);
  return kk_const(c, name, value);
}

void kk_consts_free(kk_consts *c) {
  kiln_glsl_spec_free(&c->spec);
  kiln_strbuf_free(&c->decls);
  c->n = 0;
}

void kk_preamble(kiln_strbuf *s, uint32_t lx, uint32_t ly, uint32_t lz, bool fp16) {
  kiln_strbuf_puts(s, "#version 450\n");
  /* float16_t buffers (StorageBuffer16BitAccess) and, in the tiled
   * contraction, half arithmetic (Float16: shaderFloat16, which fp16 mode
   * requires of the device) */
  if (fp16)
    kiln_strbuf_puts(s, "#extension GL_EXT_shader_16bit_storage : require\n"
                        "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n");
  kiln_strbuf_printf(s, "layout(local_size_x = %u, local_size_y = %u, local_size_z = %u) in;\n", lx, ly, lz);
}

void kk_buffer(kiln_strbuf *s, int binding, const char *type, const char *name, bool readonly) {
  kiln_strbuf_printf(s, "layout(std430, set = 0, binding = %d) %sbuffer kk_buf%d { %s %s[]; };\n", binding,
                     readonly ? "readonly " : "", binding, type, name);
}

void kk_buffer_vec4(kiln_strbuf *s, int binding, const char *name, bool fp16) {
  /* A second variable on the same binding (Vulkan allows aliases of one
   * storage buffer): the same memory seen as 16-byte (8-byte in fp16) vectors. */
  kiln_strbuf_printf(s, "layout(std430, set = 0, binding = %d) readonly buffer kk_buf%dv { %s %s[]; };\n", binding, binding,
                     fp16 ? "f16vec4" : "vec4", name);
}

bool kk_vec4_ok(int64_t offset, int n_batch, const int64_t *batch, const int64_t *strides, int64_t fast) {
  if (offset % 4 || fast % 4) return false;
  for (int a = 0; a < n_batch; a++)
    if (batch[a] > 1 && strides[a] % 4) return false;
  return true;
}

kiln_status_t kk_check_epilogue(const vk_epilogue *epi, int own) {
  if (!epi) return NULL;
  if (!epi->func || !epi->fn_name || !*epi->fn_name)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan kernel epilogue: missing function or its name");
  if (epi->binding_base != own)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan kernel epilogue: binding_base %d, expected %d (after the kernel's own buffers)",
                      epi->binding_base, own);
  if (epi->n_buffers < 0 || epi->n_buffers > 64)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan kernel epilogue: %d buffers", epi->n_buffers);
  if (epi->n_buffers > 0 && !epi->decls)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan kernel epilogue: %d buffers but no declarations", epi->n_buffers);
  return NULL;
}

void kk_store_fn(kiln_strbuf *s, kk_consts *c, const vk_epilogue *epi, const char *y, int64_t y_offset, bool fp16) {
  const char *open = fp16 ? "float16_t(" : "", *close = fp16 ? ")" : "";
  const char *off = kk_const(c, "KK_Y_OFF", y_offset);
  if (epi) {
    if (epi->decls) kiln_strbuf_printf(s, "%s\n", epi->decls);
    kiln_strbuf_printf(s, "%s\n", epi->func);
    kiln_strbuf_printf(s, "void kk_store(int idx, float v) { %s[%s + idx] = %s%s(idx, v)%s; }\n", y, off, open,
                       epi->fn_name, close);
  } else {
    kiln_strbuf_printf(s, "void kk_store(int idx, float v) { %s[%s + idx] = %sv%s; }\n", y, off, open, close);
  }
}

bool kk_float(char *buf, size_t len, double v) {
  if (!isfinite(v)) return false;
  snprintf(buf, len, "%.9g", v);
  if (!strpbrk(buf, ".eE")) {
    size_t n = strlen(buf);
    if (n + 3 <= len) memcpy(buf + n, ".0", 3);
  }
  return true;
}

int64_t kk_extent(int64_t offset, int n_batch, const int64_t *batch, const int64_t *strides, int64_t inner) {
  if (offset < 0 || inner < 0) return INT64_MAX;
  double e = (double)offset + (double)inner; /* double: cannot overflow, exact enough for a limit test */
  for (int i = 0; i < n_batch; i++) {
    if (strides[i] < 0) return INT64_MAX;
    if (batch[i] > 0) e += (double)(batch[i] - 1) * (double)strides[i];
  }
  return e >= 9.2e18 ? INT64_MAX : (int64_t)e;
}

uint32_t kk_max_groups(const vk_device_props *p, int axis) {
  return p && p->max_workgroup_count[axis] ? p->max_workgroup_count[axis] : 65535u;
}

uint32_t kk_threads(const vk_device_props *p, uint32_t want) {
  uint32_t lim = p && p->max_workgroup_invocations ? p->max_workgroup_invocations : 128u;
  if (p && p->max_workgroup_size[0] && p->max_workgroup_size[0] < lim) lim = p->max_workgroup_size[0];
  while (want > lim && want > 1) want /= 2;
  return want;
}

bool kk_split_linear(uint64_t count, const vk_device_props *p, uint32_t out[2]) {
  uint64_t mx = kk_max_groups(p, 0), my = kk_max_groups(p, 1);
  if (count <= mx) {
    out[0] = (uint32_t)count;
    out[1] = 1;
    return true;
  }
  uint64_t y = (count + mx - 1) / mx;
  if (y > my) return false;
  out[0] = (uint32_t)((count + y - 1) / y);
  out[1] = (uint32_t)y;
  return true;
}

kiln_status_t kk_finish(kiln_strbuf *s, kk_consts *c, vk_kernel_src *out, const char *name, int own,
                        const vk_epilogue *epi, const uint32_t groups[3], double flops) {
  kiln_status_t st = kiln_strbuf_status(s);
  if (!st) st = kiln_strbuf_status(&c->decls);
  if (!st && c->spec.oom) st = KILN_OOM();
  if (!st && c->bad)
    st = kiln_error(KILN_INTERNAL, "vulkan kernel %s: a specialization constant is out of int32 range, redefined or one "
                                   "too many (%d declared)", name, c->n);
  /* The preamble ends with the workgroup size line; the constants go right after it. */
  const char *cut = st ? NULL : strstr(s->data, ") in;\n");
  if (!st && !cut) st = kiln_error(KILN_INTERNAL, "vulkan kernel %s: source without a preamble", name);
  kiln_strbuf full = {0};
  if (!st) {
    size_t head = (size_t)(cut - s->data) + strlen(") in;\n");
    kiln_strbuf_printf(&full, "%.*s", (int)head, s->data);
    if (c->decls.data) kiln_strbuf_puts(&full, c->decls.data);
    kiln_strbuf_puts(&full, s->data + head);
    st = kiln_strbuf_status(&full);
  }
  kiln_strbuf_free(s);
  kiln_strbuf_free(&c->decls);
  if (st) {
    kiln_strbuf_free(&full);
    kiln_glsl_spec_free(&c->spec);
    return st;
  }
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  out->glsl = kiln_strbuf_take(&full);
  if (!out->glsl) {
    kiln_glsl_spec_free(&c->spec);
    return KILN_OOM();
  }
  out->spec = c->spec; /* moved */
  memset(&c->spec, 0, sizeof c->spec);
  c->n = 0;
  out->n_buffers = own + (epi ? epi->n_buffers : 0);
  bool empty = groups[0] == 0 || groups[1] == 0 || groups[2] == 0;
  for (int i = 0; i < 3; i++) out->groups[i] = empty ? 0 : groups[i];
  out->push_bytes = 0;
  out->flops = flops;
  return NULL;
}

/* "KK_OA" from "kk_oa": an operand's constant stem. */
static void upper_name(char *buf, size_t len, const char *name) {
  size_t i = 0;
  for (; name[i] && i + 1 < len; i++) buf[i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 'a' + 'A' : name[i]);
  buf[i] = 0;
}

void kk_batch_offsets(kiln_strbuf *s, kk_consts *c, const char *zexpr, int n_batch, const int64_t *batch, int n_ops,
                      const char *const *names, const int64_t *const *strides, const int64_t *offsets) {
  char stem[24], sstem[32];
  for (int o = 0; o < n_ops; o++) {
    upper_name(stem, sizeof stem, names[o]);
    kiln_strbuf_printf(s, "  %s = %s;\n", names[o], kk_const(c, stem, offsets[o]));
  }
  if (n_batch == 0) return;
  kiln_strbuf_printf(s, "  int kk_t = %s;\n", zexpr);
  /* Every axis, also those of size 1 or stride 0: the driver folds them
   * away, and the source stays the same for every batch shape. */
  for (int a = n_batch - 1; a >= 0; a--) {
    const char *b = kk_constn(c, "KK_BATCH", a, batch[a]);
    kiln_strbuf_printf(s, "  int kk_i%d = kk_t %% %s; kk_t /= %s;\n", a, b, b);
    for (int o = 0; o < n_ops; o++) {
      if (!strides[o]) continue;
      upper_name(stem, sizeof stem, names[o]);
      snprintf(sstem, sizeof sstem, "%s_S", stem);
      kiln_strbuf_printf(s, "  %s += kk_i%d * %s;\n", names[o], a, kk_constn(c, sstem, a, strides[o][a]));
    }
  }
}

/* ---- tiled contraction core ----------------------------------------------------------- */

int kk_tile_threads(const kk_tile *t) { return (t->tm / t->rm) * (t->tn / t->rn); }

static int tile_dim(int64_t extent) { return extent > 32 ? 64 : extent > 16 ? 32 : 16; }

kk_tile kk_pick_tile(int64_t m, int64_t n, int64_t slices, const vk_device_props *p) {
  kk_tile t = {tile_dim(m), tile_dim(n), 16, 1, 1}; /* bk 16: a multiple of KK_HALF_CHUNK */
  int nt_max = (int)kk_threads(p, 256);
  bool cpu = p && p->type == 4; /* VK_PHYSICAL_DEVICE_TYPE_CPU */
  if (cpu && t.tm == 64 && t.tn == 64) {
    /* llvmpipe runs a workgroup as SIMD batches on one thread: every
     * barrier switches between all of them and shared loads are gathers,
     * so few invocations with big register blocks win (measured ~2-3x
     * over 16x16 invocations of 4x4). */
    t.rm = 8;
    t.rn = 16;
    return t;
  }
  if (!cpu && nt_max >= 256 && m >= 128 && n >= 128 && (m / 128) * (n / 128) * slices >= 64) {
    t.tm = t.tn = 128; /* big GPU problems: 256 invocations of 8x8 */
    t.rm = t.rn = 8;
    return t;
  }
  /* 16 x 16 invocations (8 x 8 on CPUs or small devices). */
  int side = !cpu && nt_max >= 256 ? 16 : 8;
  t.rm = t.tm / side > 0 ? t.tm / side : 1;
  t.rn = t.tn / side > 0 ? t.tn / side : 1;
  return t;
}

/* "if (A < AV && B < BV) " for the names given (NULL: no test), or "". */
static void guard(char *buf, size_t len, const char *a, const char *av, const char *b, const char *bv) {
  if (a && b)
    snprintf(buf, len, "if (%s < %s && %s < %s) ", a, av, b, bv);
  else if (a || b)
    snprintf(buf, len, "if (%s < %s) ", a ? a : b, a ? av : bv);
  else
    buf[0] = 0;
}

/* f32: one K step of the inner product, an fma per k into each accumulator. */
static void emit_inner_f32(kiln_strbuf *s, int bk, int rm, int rn, int astr, int bstr, int ty_n, int tx_n, bool vec) {
  kiln_strbuf_printf(s, "    for (int kq = 0; kq < %d; kq++) {\n", bk);
  if (vec) {
    for (int i = 0; i < rm / 4; i++)
      kiln_strbuf_printf(s, "      vec4 a%d = kk_as[kq * %d + ty * %d + %d];\n", i, astr, rm / 4, i);
    for (int j = 0; j < rn / 4; j++)
      kiln_strbuf_printf(s, "      vec4 b%d = kk_bs[kq * %d + tx * %d + %d];\n", j, bstr, rn / 4, j);
    for (int i = 0; i < rm; i++)
      for (int j = 0; j < rn; j++)
        kiln_strbuf_printf(s, "      c%d_%d = fma(a%d.%c, b%d.%c, c%d_%d);\n", i, j, i / 4, "xyzw"[i % 4], j / 4,
                           "xyzw"[j % 4], i, j);
  } else {
    for (int i = 0; i < rm; i++)
      kiln_strbuf_printf(s, "      float a%d = kk_as[kq * %d + ty + %d];\n", i, astr, i * ty_n);
    for (int j = 0; j < rn; j++)
      kiln_strbuf_printf(s, "      float b%d = kk_bs[kq * %d + tx + %d];\n", j, bstr, j * tx_n);
    for (int i = 0; i < rm; i++)
      for (int j = 0; j < rn; j++) kiln_strbuf_printf(s, "      c%d_%d = fma(a%d, b%d, c%d_%d);\n", i, j, i, j, i, j);
  }
}

/* fp16: one K step of the inner product (bk k's from the shared tiles),
 * in runs of KK_HALF_CHUNK k's: h = sum of the run's products, computed in
 * half (the first a product, then fma), then c += float(h). In vec mode h
 * is an f16vec4 over four columns (a row's A element broadcast), so a GPU
 * with packed half math does two products per lane-instruction; the run's
 * operands are read just before its products. Error: each half rounding
 * is at most 2^-11 of its result (round to nearest) and every partial sum
 * of a run is bounded by the sum of its |products|, so one run is off by at
 * most about KK_HALF_CHUNK * 2^-11 * sum|a||b| over its k's; the runs are
 * summed in f32, so the error does not grow with K beyond that. */
static void emit_inner_f16(kiln_strbuf *s, int bk, int rm, int rn, int astr, int bstr, int ty_n, int tx_n, bool vec) {
  const int ch = KK_HALF_CHUNK;
  kiln_strbuf_printf(s, "    for (int kq = 0; kq < %d; kq += %d) {\n", bk, ch);
  for (int q = 0; q < ch; q++) {
    if (vec) {
      for (int i = 0; i < rm / 4; i++)
        kiln_strbuf_printf(s, "      f16vec4 a%d_%d = kk_as[(kq + %d) * %d + ty * %d + %d];\n", q, i, q, astr, rm / 4, i);
      for (int j = 0; j < rn / 4; j++)
        kiln_strbuf_printf(s, "      f16vec4 b%d_%d = kk_bs[(kq + %d) * %d + tx * %d + %d];\n", q, j, q, bstr, rn / 4, j);
      for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn / 4; j++) {
          char ai = "xyzw"[i % 4];
          if (q == 0)
            kiln_strbuf_printf(s, "      f16vec4 h%d_%d = a0_%d.%c * b0_%d;\n", i, j, i / 4, ai, j);
          else
            kiln_strbuf_printf(s, "      h%d_%d = fma(f16vec4(a%d_%d.%c), b%d_%d, h%d_%d);\n", i, j, q, i / 4, ai, q, j, i,
                               j);
        }
    } else {
      for (int i = 0; i < rm; i++)
        kiln_strbuf_printf(s, "      float16_t a%d_%d = kk_as[(kq + %d) * %d + ty + %d];\n", q, i, q, astr, i * ty_n);
      for (int j = 0; j < rn; j++)
        kiln_strbuf_printf(s, "      float16_t b%d_%d = kk_bs[(kq + %d) * %d + tx + %d];\n", q, j, q, bstr, j * tx_n);
      for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn; j++) {
          if (q == 0)
            kiln_strbuf_printf(s, "      float16_t h%d_%d = a0_%d * b0_%d;\n", i, j, i, j);
          else
            kiln_strbuf_printf(s, "      h%d_%d = fma(a%d_%d, b%d_%d, h%d_%d);\n", i, j, q, i, q, j, i, j);
        }
    }
  }
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < rn; j++) {
      if (vec)
        kiln_strbuf_printf(s, "      c%d_%d += float(h%d_%d.%c);\n", i, j, i, j / 4, "xyzw"[j % 4]);
      else
        kiln_strbuf_printf(s, "      c%d_%d += float(h%d_%d);\n", i, j, i, j);
    }
}

/* Shared-memory layout: A tile stored k-major (as[kq][row]), B tile
 * (bs[kq][col]), so that the inner product step reads a row vector of each.
 * vec mode (rm, rn multiples of 4): the tiles are vec4 arrays and each
 * invocation owns a contiguous rm x rn block, reading its operands as
 * vec4s; otherwise invocation (tx, ty) owns rows ty + i*ty_n and columns
 * tx + j*tx_n (strided, conflict-free scalar reads). fp16: the same layout
 * in f16vec4 / float16_t elements, and the inner product in half runs
 * (emit_inner_f16). */
void kk_emit_tiled(kiln_strbuf *s, kk_consts *c, const kk_tile *t, int64_t m, int64_t n, int64_t k, bool a_k_fast,
                   bool b_col_fast, bool a_vec, bool b_vec, bool fp16) {
  const char *cm = kk_const(c, "KK_M", m), *cn = kk_const(c, "KK_N", n), *ck = kk_const(c, "KK_K", k);
  int tm = t->tm, tn = t->tn, bk = t->bk, rm = t->rm, rn = t->rn;
  int ty_n = tm / rm, tx_n = tn / rn, nt = ty_n * tx_n;
  bool vec = rm % 4 == 0 && rn % 4 == 0;
  int w = vec ? 4 : 1; /* floats per shared element */
  /* Row strides (in shared elements), padded where consecutive
   * invocations store down a column, against bank conflicts: by one
   * element, two for scalar halves (so that the padding is a whole 4-byte
   * bank). */
  int pad = fp16 && !vec ? 2 : 1;
  int astr = tm / w + (a_k_fast ? pad : 0), bstr = tn / w + (b_col_fast ? 0 : pad);
  bool gm = m % tm != 0, gn = n % tn != 0, gk = k % bk != 0;
  const char *ty = fp16 ? (vec ? "f16vec4" : "float16_t") : vec ? "vec4" : "float";
  kiln_strbuf_printf(s, "shared %s kk_as[%d];\nshared %s kk_bs[%d];\n", ty, bk * astr, ty, bk * bstr);
  kiln_strbuf_puts(s, "void main() {\n  kk_setup(int(gl_WorkGroupID.z));\n  int tid = int(gl_LocalInvocationIndex);\n");
  kiln_strbuf_printf(s, "  int tx = tid %% %d, ty = tid / %d;\n", tx_n, tx_n);
  kiln_strbuf_printf(s, "  int m0 = int(gl_WorkGroupID.y) * %d, n0 = int(gl_WorkGroupID.x) * %d;\n", tm, tn);
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < rn; j++) kiln_strbuf_printf(s, "  float c%d_%d = 0.0;\n", i, j);
  kiln_strbuf_printf(s, "  for (int k0 = 0; k0 < %s; k0 += %d) {\n", ck, bk);
  for (int op = 0; op < 2; op++) {
    bool is_a = op == 0;
    int ext = is_a ? tm : tn, str = is_a ? astr : bstr;
    bool fast_k = is_a ? a_k_fast : !b_col_fast;
    char sh = is_a ? 'a' : 'b';
    /* g4: one invocation loads 4 consecutive elements along the fast
     * dimension with one vec4 load; the fast dimension's size is a
     * multiple of 4 (the caller's promise), so the guard on the first
     * element covers all four, and tile starts are multiples of 4. */
    bool g4 = is_a ? a_vec : b_vec;
    int w4 = g4 ? 4 : 1, count = ext * bk / w4, per = (fast_k ? bk : ext) / w4;
    int loads = (count + nt - 1) / nt;
    for (int l = 0; l < loads; l++) {
      bool partial = (l + 1) * nt > count;
      kiln_strbuf_printf(s, "    { int e = tid + %d;\n", l * nt);
      if (partial) kiln_strbuf_printf(s, "      if (e < %d) {\n", count);
      const char *fast = fast_k ? "kq" : "r", *slow = fast_k ? "r" : "kq";
      if (g4)
        kiln_strbuf_printf(s, "      int %s = (e %% %d) * 4, %s = e / %d;\n", fast, per, slow, per);
      else
        kiln_strbuf_printf(s, "      int %s = e %% %d, %s = e / %d;\n", fast, per, slow, per);
      char cond[128];
      const char *vt = g4 ? "vec4" : "float", *zero = g4 ? "vec4(0.0)" : "0.0", *sfx = g4 ? "4" : "";
      /* fp16: v in the shared tile's type; the loads' floats came from half, so the conversion is exact */
      const char *cv = "", *cve = "";
      if (fp16) {
        vt = g4 ? "f16vec4" : "float16_t", zero = g4 ? "f16vec4(0.0)" : "float16_t(0.0)";
        cv = g4 ? "f16vec4(" : "float16_t(", cve = ")";
      }
      if (is_a) {
        kiln_strbuf_printf(s, "      int gr = m0 + r, gk = k0 + kq;\n      %s v = %s;\n", vt, zero);
        guard(cond, sizeof cond, gm ? "gr" : NULL, cm, gk ? "gk" : NULL, ck);
        kiln_strbuf_printf(s, "      %sv = %skk_load_a%s(gr, gk)%s;\n", cond, cv, sfx, cve);
      } else {
        kiln_strbuf_printf(s, "      int gc = n0 + r, gk = k0 + kq;\n      %s v = %s;\n", vt, zero);
        guard(cond, sizeof cond, gn ? "gc" : NULL, cn, gk ? "gk" : NULL, ck);
        kiln_strbuf_printf(s, "      %sv = %skk_load_b%s(gk, gc)%s;\n", cond, cv, sfx, cve);
      }
      if (!g4) {
        if (vec)
          kiln_strbuf_printf(s, "      kk_%cs[kq * %d + r / 4][r %% 4] = v;\n", sh, str);
        else
          kiln_strbuf_printf(s, "      kk_%cs[kq * %d + r] = v;\n", sh, str);
      } else if (!fast_k && vec) {
        /* four rows/columns of one k: exactly one vec4 of the shared tile */
        kiln_strbuf_printf(s, "      kk_%cs[kq * %d + r / 4] = v;\n", sh, str);
      } else {
        for (int i = 0; i < 4; i++) {
          const char *kqi = fast_k ? "kq + " : "kq", *ri = fast_k ? "r" : "r + ";
          char ki[8] = "", rr[8] = "";
          if (fast_k)
            snprintf(ki, sizeof ki, "%d", i);
          else
            snprintf(rr, sizeof rr, "%d", i);
          if (vec)
            kiln_strbuf_printf(s, "      kk_%cs[(%s%s) * %d + (%s%s) / 4][(%s%s) %% 4] = v.%c;\n", sh, kqi, ki, str, ri, rr,
                               ri, rr, "xyzw"[i]);
          else
            kiln_strbuf_printf(s, "      kk_%cs[(%s%s) * %d + %s%s] = v.%c;\n", sh, kqi, ki, str, ri, rr, "xyzw"[i]);
        }
      }
      if (partial) kiln_strbuf_puts(s, "      }\n");
      kiln_strbuf_puts(s, "    }\n");
    }
  }
  kiln_strbuf_puts(s, "    barrier();\n");
  if (fp16)
    emit_inner_f16(s, bk, rm, rn, astr, bstr, ty_n, tx_n, vec);
  else
    emit_inner_f32(s, bk, rm, rn, astr, bstr, ty_n, tx_n, vec);
  kiln_strbuf_puts(s, "    }\n    barrier();\n  }\n");
  for (int i = 0; i < rm; i++)
    for (int j = 0; j < rn; j++) {
      if (vec)
        kiln_strbuf_printf(s, "  { int gr = m0 + ty * %d + %d, gc = n0 + tx * %d + %d;\n", rm, i, rn, j);
      else
        kiln_strbuf_printf(s, "  { int gr = m0 + ty + %d, gc = n0 + tx + %d;\n", i * ty_n, j * tx_n);
      char cond[128];
      guard(cond, sizeof cond, gm ? "gr" : NULL, cm, gn ? "gc" : NULL, cn);
      kiln_strbuf_printf(s, "    %skk_emit(gr, gc, c%d_%d); }\n", cond, i, j);
    }
  kiln_strbuf_puts(s, "}\n");
}

/* ---- MatMul / Gemm --------------------------------------------------------------------- */

void vk_matmul_desc_init(vk_matmul_desc *d, int64_t m, int64_t n, int64_t k) {
  memset(d, 0, sizeof *d);
  d->m = m;
  d->n = n;
  d->k = k;
  d->alpha = 1.0f;
  d->beta = 1.0f;
}

static kiln_status_t matmul_check(const vk_matmul_desc *d, const vk_device_props *p, int64_t *out_batch) {
  if (d->m < 0 || d->n < 0 || d->k < 0)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan matmul: negative size m=%lld n=%lld k=%lld", (long long)d->m,
                      (long long)d->n, (long long)d->k);
  if (d->n_batch < 0 || d->n_batch > VK_KERNEL_MAX_BATCH)
    return kiln_error(KILN_UNSUPPORTED, "vulkan matmul: %d batch axes, at most %d", d->n_batch, VK_KERNEL_MAX_BATCH);
  int64_t batch = 1;
  for (int i = 0; i < d->n_batch; i++) {
    if (d->batch[i] < 0) return kiln_error(KILN_INVALID_ARGUMENT, "vulkan matmul: batch dim %d is %lld", i, (long long)d->batch[i]);
    batch *= d->batch[i];
    if (batch > KK_INDEX_LIMIT) return kiln_error(KILN_UNSUPPORTED, "vulkan matmul: batch too large");
  }
  char f[48];
  if (!kk_float(f, sizeof f, d->alpha) || (d->has_bias && !kk_float(f, sizeof f, d->beta)))
    return kiln_error(KILN_UNSUPPORTED, "vulkan matmul: alpha/beta not finite");
  double y = (double)d->y_offset + (double)batch * (double)d->m * (double)d->n;
  int64_t ea = kk_extent(d->a_offset, d->n_batch, d->batch, d->a_batch_stride, d->m * d->k);
  int64_t eb = kk_extent(d->b_offset, d->n_batch, d->batch, d->b_batch_stride, d->k * d->n);
  int64_t ec = d->has_bias ? kk_extent(d->bias_offset, d->n_batch, d->batch, d->bias_batch_stride,
                                       (d->m > 0 ? (d->m - 1) * d->bias_stride_m : 0) +
                                           (d->n > 0 ? (d->n - 1) * d->bias_stride_n : 0) + 1)
                           : 0;
  if (y > (double)KK_INDEX_LIMIT || ea > KK_INDEX_LIMIT || eb > KK_INDEX_LIMIT || ec > KK_INDEX_LIMIT ||
      d->bias_stride_m < 0 || d->bias_stride_n < 0)
    return kiln_error(KILN_UNSUPPORTED, "vulkan matmul: operands past 2^31 elements (m=%lld n=%lld k=%lld batch %lld)",
                      (long long)d->m, (long long)d->n, (long long)d->k, (long long)batch);
  if ((uint64_t)batch > kk_max_groups(p, 2))
    return kiln_error(KILN_UNSUPPORTED, "vulkan matmul: batch %lld exceeds the device's workgroup count limit %u",
                      (long long)batch, kk_max_groups(p, 2));
  *out_batch = batch;
  return NULL;
}

/* Globals kk_oa/kk_ob/kk_oc/kk_oy and kk_setup(z); kk_emit(row, col, acc). */
static void matmul_common(kiln_strbuf *s, kk_consts *c, const vk_matmul_desc *d) {
  kiln_strbuf_puts(s, "int kk_oa, kk_ob, kk_oc, kk_oy;\nvoid kk_setup(int z) {\n");
  const char *names[3] = {"kk_oa", "kk_ob", "kk_oc"};
  const int64_t *strides[3] = {d->a_batch_stride, d->b_batch_stride, d->bias_batch_stride};
  const int64_t offs[3] = {d->a_offset, d->b_offset, d->bias_offset};
  kk_batch_offsets(s, c, "z", d->n_batch, d->batch, d->has_bias ? 3 : 2, names, strides, offs);
  const char *cm = kk_const(c, "KK_M", d->m), *cn = kk_const(c, "KK_N", d->n);
  kiln_strbuf_printf(s, "  kk_oy = z * (%s * %s);\n}\n", cm, cn);
  char alpha[48], beta[48];
  kk_float(alpha, sizeof alpha, d->alpha);
  kk_float(beta, sizeof beta, d->beta);
  kiln_strbuf_puts(s, "void kk_emit(int row, int col, float acc) {\n");
  if (d->alpha == 1.0f)
    kiln_strbuf_puts(s, "  float v = acc;\n");
  else
    kiln_strbuf_printf(s, "  float v = %s * acc;\n", alpha);
  if (d->has_bias) {
    kiln_strbuf_printf(s, "  float bias = %skk_c[kk_oc + row * %s + col * %s]%s;\n", kk_ld(d->fp16),
                       kk_const(c, "KK_C_SM", d->bias_stride_m), kk_const(c, "KK_C_SN", d->bias_stride_n),
                       kk_le(d->fp16));
    if (d->beta == 1.0f)
      kiln_strbuf_puts(s, "  v += bias;\n");
    else
      kiln_strbuf_printf(s, "  v = fma(%s, bias, v);\n", beta);
  }
  kiln_strbuf_printf(s, "  kk_store(kk_oy + row * %s + col, v);\n}\n", cn);
}

static int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

/* out[j] = sum_k x[k] * w(k, j) with one workgroup per `cols` outputs and
 * the K range split `ks` ways, reduced in shared memory. */
static void emit_gemv(kiln_strbuf *s, kk_consts *c, const vk_matmul_desc *d, const vk_device_props *p,
                      bool row_vector, const char *decls, uint32_t groups[3]) {
  int64_t J = row_vector ? d->n : d->m, K = d->k;
  /* Is w contiguous along j? (M = 1: B[k, j] unless trans_b; N = 1: A[j, k] only if trans_a.) */
  bool j_fast = row_vector ? !d->trans_b : d->trans_a;
  int nt = (int)kk_threads(p, 256), cols, ks;
  if (j_fast) {
    cols = pow2_at_least(J, 64);
    if (cols > nt) cols = nt;
    ks = nt / cols;
  } else {
    ks = pow2_at_least(K, 64);
    if (ks > nt) ks = nt;
    cols = nt / ks;
  }
  nt = cols * ks;
  const char *ld = kk_ld(d->fp16), *le = kk_le(d->fp16);
  kk_preamble(s, (uint32_t)nt, 1, 1, d->fp16);
  kiln_strbuf_puts(s, decls);
  kiln_strbuf_printf(s, "shared float kk_red[%d];\n", nt);
  const char *cm = kk_const(c, "KK_M", d->m), *cn = kk_const(c, "KK_N", d->n), *ck = kk_const(c, "KK_K", K);
  const char *cj = row_vector ? cn : cm;
  if (row_vector) {
    kiln_strbuf_printf(s, "float kk_load_x(int k) { return %skk_a[kk_oa + k]%s; }\n", ld, le);
    if (d->trans_b)
      kiln_strbuf_printf(s, "float kk_load_w(int k, int j) { return %skk_b[kk_ob + j * %s + k]%s; }\n", ld, ck, le);
    else
      kiln_strbuf_printf(s, "float kk_load_w(int k, int j) { return %skk_b[kk_ob + k * %s + j]%s; }\n", ld, cn, le);
  } else {
    kiln_strbuf_printf(s, "float kk_load_x(int k) { return %skk_b[kk_ob + k]%s; }\n", ld, le);
    if (d->trans_a)
      kiln_strbuf_printf(s, "float kk_load_w(int k, int j) { return %skk_a[kk_oa + k * %s + j]%s; }\n", ld, cm, le);
    else
      kiln_strbuf_printf(s, "float kk_load_w(int k, int j) { return %skk_a[kk_oa + j * %s + k]%s; }\n", ld, ck, le);
  }
  kiln_strbuf_puts(s, "void main() {\n  kk_setup(int(gl_WorkGroupID.z));\n  int tid = int(gl_LocalInvocationIndex);\n");
  if (j_fast)
    kiln_strbuf_printf(s, "  int c = tid %% %d, ks = tid / %d;\n", cols, cols);
  else
    kiln_strbuf_printf(s, "  int ks = tid %% %d, c = tid / %d;\n", ks, ks);
  kiln_strbuf_printf(s, "  int j = int(gl_WorkGroupID.x) * %d + c;\n  float acc = 0.0;\n", cols);
  kiln_strbuf_printf(s, "  if (j < %s) for (int k = ks; k < %s; k += %d) acc = fma(kk_load_x(k), kk_load_w(k, j), acc);\n",
                     cj, ck, ks);
  kiln_strbuf_printf(s, "  kk_red[ks * %d + c] = acc;\n  barrier();\n", cols);
  for (int h = ks / 2; h > 0; h /= 2)
    kiln_strbuf_printf(s, "  if (ks < %d) kk_red[ks * %d + c] += kk_red[(ks + %d) * %d + c];\n  barrier();\n", h, cols, h,
                       cols);
  kiln_strbuf_printf(s, "  if (ks == 0 && j < %s) kk_emit(%s, kk_red[c]);\n}\n", cj, row_vector ? "0, j" : "j, 0");
  groups[0] = (uint32_t)((J + cols - 1) / cols);
  groups[1] = 1;
}

kiln_status_t vk_gen_matmul(const vk_matmul_desc *d, const vk_device_props *props, const vk_epilogue *epi,
                            vk_kernel_src *out) {
  int64_t batch;
  KILN_TRY(matmul_check(d, props, &batch));
  int own = d->has_bias ? 4 : 3;
  KILN_TRY(kk_check_epilogue(epi, own));
  bool gemv = d->m == 1 || d->n == 1;
  kiln_strbuf s = {0};
  uint32_t groups[3] = {1, 1, (uint32_t)batch};
  /* Declarations first into their own buffer: the workgroup size, which
   * precedes them, depends on the kernel chosen. */
  kiln_strbuf decl = {0};
  kk_consts c = {0};
  const char *ft = kk_ftype(d->fp16), *ld = kk_ld(d->fp16), *le = kk_le(d->fp16);
  kk_buffer(&decl, 0, ft, "kk_a", true);
  kk_buffer(&decl, 1, ft, "kk_b", true);
  if (d->has_bias) kk_buffer(&decl, 2, ft, "kk_c", true);
  kk_buffer(&decl, own - 1, ft, "kk_y", false);
  kk_store_fn(&decl, &c, epi, "kk_y", d->y_offset, d->fp16);
  matmul_common(&decl, &c, d);
  kiln_status_t st = kiln_strbuf_status(&decl);
  if (st) {
    kiln_strbuf_free(&decl);
    kk_consts_free(&c);
    return st;
  }
  char name[64];
  if (gemv) {
    emit_gemv(&s, &c, d, props, d->m == 1, decl.data, groups);
    snprintf(name, sizeof name, "gemv_%lldx%lldx%lld", (long long)d->m, (long long)d->n, (long long)d->k);
  } else {
    kk_tile t = kk_pick_tile(d->m, d->n, batch, props);
    kk_preamble(&s, (uint32_t)kk_tile_threads(&t), 1, 1, d->fp16);
    kiln_strbuf_puts(&s, decl.data);
    /* vec4 global loads where the contiguous dimension, offset and batch
     * strides are multiples of 4 (a structural choice, in the source) */
    bool a_vec = kk_vec4_ok(d->a_offset, d->n_batch, d->batch, d->a_batch_stride, d->trans_a ? d->m : d->k);
    bool b_vec = kk_vec4_ok(d->b_offset, d->n_batch, d->batch, d->b_batch_stride, d->trans_b ? d->k : d->n);
    const char *cm = kk_const(&c, "KK_M", d->m), *cn = kk_const(&c, "KK_N", d->n), *ck = kk_const(&c, "KK_K", d->k);
    if (d->trans_a)
      kiln_strbuf_printf(&s, "float kk_load_a(int row, int k) { return %skk_a[kk_oa + k * %s + row]%s; }\n", ld, cm, le);
    else
      kiln_strbuf_printf(&s, "float kk_load_a(int row, int k) { return %skk_a[kk_oa + row * %s + k]%s; }\n", ld, ck, le);
    if (d->trans_b)
      kiln_strbuf_printf(&s, "float kk_load_b(int k, int col) { return %skk_b[kk_ob + col * %s + k]%s; }\n", ld, ck, le);
    else
      kiln_strbuf_printf(&s, "float kk_load_b(int k, int col) { return %skk_b[kk_ob + k * %s + col]%s; }\n", ld, cn, le);
    const char *v4 = d->fp16 ? "vec4(" : "", *v4e = d->fp16 ? ")" : "";
    if (a_vec) {
      kk_buffer_vec4(&s, 0, "kk_a4", d->fp16);
      if (d->trans_a)
        kiln_strbuf_printf(&s, "vec4 kk_load_a4(int row, int k) { return %skk_a4[(kk_oa + k * %s + row) >> 2]%s; }\n", v4,
                           cm, v4e);
      else
        kiln_strbuf_printf(&s, "vec4 kk_load_a4(int row, int k) { return %skk_a4[(kk_oa + row * %s + k) >> 2]%s; }\n", v4,
                           ck, v4e);
    }
    if (b_vec) {
      kk_buffer_vec4(&s, 1, "kk_b4", d->fp16);
      if (d->trans_b)
        kiln_strbuf_printf(&s, "vec4 kk_load_b4(int k, int col) { return %skk_b4[(kk_ob + col * %s + k) >> 2]%s; }\n", v4,
                           ck, v4e);
      else
        kiln_strbuf_printf(&s, "vec4 kk_load_b4(int k, int col) { return %skk_b4[(kk_ob + k * %s + col) >> 2]%s; }\n", v4,
                           cn, v4e);
    }
    kk_emit_tiled(&s, &c, &t, d->m, d->n, d->k, !d->trans_a, !d->trans_b, a_vec, b_vec, d->fp16 && d->fp16_arith);
    groups[0] = (uint32_t)((d->n + t.tn - 1) / t.tn);
    groups[1] = (uint32_t)((d->m + t.tm - 1) / t.tm);
    snprintf(name, sizeof name, "gemm%dx%d_%lldx%lldx%lld", t.tm, t.tn, (long long)d->m, (long long)d->n,
             (long long)d->k);
  }
  kiln_strbuf_free(&decl);
  if (groups[0] > kk_max_groups(props, 0) || groups[1] > kk_max_groups(props, 1)) {
    kiln_strbuf_free(&s);
    kk_consts_free(&c);
    return kiln_error(KILN_UNSUPPORTED, "vulkan matmul: %u x %u workgroups exceed the device limit", groups[0],
                      groups[1]);
  }
  return kk_finish(&s, &c, out, name, own, epi, groups, 2.0 * (double)batch * (double)d->m * (double)d->n * (double)d->k);
}

#endif

/* igemm.c — the integer GEMM's driver (igemm.h): packing with the zero
 * points subtracted, output blocks as pool tasks, the K loop in blocks
 * (C accumulated in place), the epilogue per finished block; the portable
 * micro-kernel; the run-time kernel choice. */
#include "devices/cpu/gemm/igemm.h"

#include <stdlib.h>
#include <string.h>

#include "base/cpu_features.h"
#include "base/threadpool.h"
#include "devices/cpu/gemm/igemm_internal.h"

#define MC (8 * IGEMM_MR) /* rows of a task */
#define NC (16 * IGEMM_NR) /* columns of a task */
#define KCP 256           /* K pairs of a block: a 6 x 512 A panel and a 512 x 16 B panel fit L1 */

/* ---- the portable micro-kernel ------------------------------------------------------ */

static int32_t lo16(int32_t w) { return (int16_t)(uint16_t)((uint32_t)w & 0xffffu); }
static int32_t hi16(int32_t w) { return (int16_t)(uint16_t)((uint32_t)w >> 16); }

void kiln_igemm_kernel_generic(int64_t kp, const int32_t *ap, const int32_t *bp, int32_t *c, int64_t ldc, int mr,
                               int nr, bool accumulate) {
  for (int r = 0; r < mr; r++)
    for (int j = 0; j < nr; j++) {
      uint32_t s = accumulate ? (uint32_t)c[r * ldc + j] : 0;
      for (int64_t p = 0; p < kp; p++) {
        int32_t a = ap[p * IGEMM_MR + r], b = bp[p * IGEMM_NR + j];
        s += (uint32_t)(lo16(a) * lo16(b) + hi16(a) * hi16(b)); /* |each| <= 2 * 510 * 510 */
      }
      c[r * ldc + j] = (int32_t)s;
    }
}

void kiln_igemm_quad_kernel_generic(int64_t kq, const int32_t *ap, const int32_t *bp, int32_t *c, int64_t ldc,
                                    int mr, int nr, bool accumulate) {
  for (int r = 0; r < mr; r++)
    for (int j = 0; j < nr; j++) {
      uint32_t s = accumulate ? (uint32_t)c[r * ldc + j] : 0;
      for (int64_t q = 0; q < kq; q++) {
        uint32_t a = (uint32_t)ap[q * IGEMM_MR + r], b = (uint32_t)bp[q * IGEMM_NR + j];
        for (int t = 0; t < 4; t++) s += (uint32_t)((int32_t)(uint8_t)(a >> 8 * t) * (int8_t)(uint8_t)(b >> 8 * t));
      }
      c[r * ldc + j] = (int32_t)s;
    }
}

/* ---- the kernel choice ------------------------------------------------------------------ */

typedef struct igemm_kernel {
  const char *name;
  const kiln_igemm_kernel_fn *fn; /* NULL entry: not built */
} igemm_kernel;

static const kiln_igemm_kernel_fn generic_fn = kiln_igemm_kernel_generic;
/* "amx" runs the quads layouts on AMX tiles (task_amx) and everything
 * else, the pairs layout included, on the AVX-512 VNNI kernels. */
static const igemm_kernel g_kernels[] = {
    {"amx", &kiln_igemm_kernel_avx512vnni},
    {"avx512vnni", &kiln_igemm_kernel_avx512vnni},
    {"avxvnni", &kiln_igemm_kernel_avxvnni},
    {"avx2", &kiln_igemm_kernel_avx2},
    {"generic", &generic_fn},
};
static const igemm_kernel *g_forced;

static bool usable(const igemm_kernel *k) {
  const kiln_cpu_features *f = kiln_cpu_features_get();
  if (!*k->fn) return false;
  if (!strcmp(k->name, "amx"))
    return kiln_igemm_amx_kernel && f->amx && f->amx_int8 && f->avx2 && f->avx512f && f->avx512vl && f->avx512_vnni;
  if (!strcmp(k->name, "avx512vnni")) return f->avx2 && f->avx512f && f->avx512vl && f->avx512_vnni;
  if (!strcmp(k->name, "avxvnni")) return f->avx2 && f->avx_vnni;
  if (!strcmp(k->name, "avx2")) return f->avx2;
  return true;
}

/* KILN_AMX=0 keeps the automatic choice off AMX (read once; a forced
 * kernel ignores it). */
static bool amx_allowed(void) {
  static int allowed = -1; /* racing first readers compute the same value */
  int v = __atomic_load_n(&allowed, __ATOMIC_RELAXED);
  if (v < 0) {
    const char *e = getenv("KILN_AMX");
    v = !(e && !strcmp(e, "0"));
    __atomic_store_n(&allowed, v, __ATOMIC_RELAXED);
  }
  return v;
}

static const igemm_kernel *chosen(void) {
  const igemm_kernel *k = __atomic_load_n(&g_forced, __ATOMIC_ACQUIRE);
  if (k) return k;
  for (size_t i = 0; i < sizeof g_kernels / sizeof g_kernels[0]; i++)
    if (usable(&g_kernels[i]) && (strcmp(g_kernels[i].name, "amx") || amx_allowed())) return &g_kernels[i];
  return &g_kernels[sizeof g_kernels / sizeof g_kernels[0] - 1];
}

const char *kiln_igemm_kernel_name(void) { return chosen()->name; }

bool kiln_igemm_force_kernel(const char *name) {
  if (!name) {
    __atomic_store_n(&g_forced, NULL, __ATOMIC_RELEASE);
    return true;
  }
  for (size_t i = 0; i < sizeof g_kernels / sizeof g_kernels[0]; i++)
    if (!strcmp(g_kernels[i].name, name) && usable(&g_kernels[i])) {
      __atomic_store_n(&g_forced, &g_kernels[i], __ATOMIC_RELEASE);
      return true;
    }
  return false;
}

/* The quads kernel of the chosen pairs kernel's instruction set (portable C
 * when that one is, or is forced to be); full: B takes the whole int8
 * range, which only vpdpbusd (and C) sum exactly. */
static kiln_igemm_kernel_fn quad_kernel_for(const igemm_kernel *k, bool full) {
  if (!strcmp(k->name, "amx")) k = &g_kernels[1]; /* its VNNI kernels */
  if (!strcmp(k->name, "avx512vnni") && kiln_igemm_quad_kernel_avx512vnni) return kiln_igemm_quad_kernel_avx512vnni;
  if (!strcmp(k->name, "avxvnni") && kiln_igemm_quad_kernel_avxvnni) return kiln_igemm_quad_kernel_avxvnni;
  if (!full && strcmp(k->name, "generic") && kiln_igemm_quad_kernel_avx2 && kiln_cpu_features_get()->avx2)
    return kiln_igemm_quad_kernel_avx2;
  return kiln_igemm_quad_kernel_generic;
}

static kiln_igemm_kernel_fn quad_kernel(bool full) { return quad_kernel_for(chosen(), full); }

/* Whether the chosen kernels sum full-range quads exactly in registers. */
static bool quads_full_fast(void) { return quad_kernel(true) != kiln_igemm_quad_kernel_generic; }

/* The unsigned-B quads kernel of the chosen instruction set, or NULL. */
static kiln_igemm_kernel_fn quad_ub_kernel(void) {
  const igemm_kernel *k = chosen();
  if (!strcmp(k->name, "avx512vnni") || !strcmp(k->name, "amx")) return kiln_igemm_quad_ub_kernel_avx512vnni;
  if (!strcmp(k->name, "avxvnni")) return kiln_igemm_quad_ub_kernel_avxvnni;
  return NULL;
}

/* ---- packing ------------------------------------------------------------------------------- */

/* op(X)[row, p] - zero of an 8-bit operand stored rows x K (or K x rows when trans). */
static int32_t at(const void *x, bool is_signed, bool trans, int64_t ld, int64_t row, int64_t p, int32_t zero) {
  int64_t o = trans ? p * ld + row : row * ld + p;
  int32_t v = is_signed ? ((const int8_t *)x)[o] : ((const uint8_t *)x)[o];
  return v - zero;
}

/* The pair word (v at 2p, w at 2p + 1). */
static int32_t pair(int32_t v, int32_t w) { return (int32_t)(((uint32_t)(uint16_t)(int16_t)w << 16) | (uint16_t)(int16_t)v); }

/* Word (p, r) of rows [r0, r0 + rows) (0 past `count` rows or past k). */
static int32_t word(const void *x, bool is_signed, bool trans, int64_t ld, int32_t zero, int64_t count, int64_t k,
                    int64_t row, int64_t p) {
  if (row >= count) return 0;
  int32_t v = 2 * p < k ? at(x, is_signed, trans, ld, row, 2 * p, zero) : 0;
  int32_t w = 2 * p + 1 < k ? at(x, is_signed, trans, ld, row, 2 * p + 1, zero) : 0;
  return pair(v, w);
}

static int64_t kpairs(int64_t k) { return (k + 1) / 2; }

static int32_t a_zero_of(const kiln_igemm_args *g, const int32_t *rows, int64_t row) {
  return rows && row < g->m ? rows[row] : g->a_zero;
}

static int64_t kquads(int64_t k) { return (k + 3) / 4; }

/* A packed B starts with a 64-byte header naming its layout; the panels
 * follow, and in the quads layout B's column sums after them (one int32
 * per column of every panel). */
enum {
  LAYOUT_PAIRS = 1,
  LAYOUT_QUADS = 2,
  LAYOUT_QUADS_FULL = 3, /* quads, B - b_zero anywhere in int8 */
  LAYOUT_QUADS_UB = 4,   /* quads of B's own bytes (u8 form), A - a_zero the int8 operand */
};
#define HEADER_WORDS 16

size_t kiln_igemm_packed_b_size(int64_t k, int64_t n) {
  if (k < 0 || n < 0) return 0;
  uint64_t panels = ((uint64_t)n + IGEMM_NR - 1) / IGEMM_NR, bytes;
  uint64_t words = (uint64_t)(kpairs(k) > kquads(k) + 1 ? kpairs(k) : kquads(k) + 1); /* per panel column */
  if (__builtin_mul_overflow(panels, words * IGEMM_NR * 4, &bytes) || bytes > SIZE_MAX - HEADER_WORDS * 4) return 0;
  return (size_t)bytes + HEADER_WORDS * 4;
}

/* The range of op(B) - b_zero: its dtype's where that decides nothing, else one scan. */
static void b_range(const kiln_igemm_args *g, int32_t *lo, int32_t *hi) {
  int32_t vmin = (g->b_signed ? -128 : 0) - g->b_zero, vmax = (g->b_signed ? 127 : 255) - g->b_zero;
  *lo = vmin, *hi = vmax;
  if ((vmin >= -IGEMM_QUAD_BOUND && vmax <= IGEMM_QUAD_BOUND) || vmin > 127 || vmax < -128) return;
  int32_t mn = INT32_MAX, mx = INT32_MIN;
  for (int64_t p = 0; p < g->k; p++) {
    for (int64_t j = 0; j < g->n; j++) {
      int64_t o = g->trans_b ? j * g->ldb + p : p * g->ldb + j;
      int32_t v = g->b_signed ? ((const int8_t *)g->b)[o] : ((const uint8_t *)g->b)[o];
      mn = v < mn ? v : mn;
      mx = v > mx ? v : mx;
    }
  }
  if (mn <= mx) *lo = mn - g->b_zero, *hi = mx - g->b_zero;
}

/* The layout op(B) is packed in: quads within +-IGEMM_QUAD_BOUND (every
 * quads kernel), full-range quads where the CPU has vpdpbusd, else
 * unsigned-B quads where allowed (a B packed for this call alone, an A
 * that fits int8, vpdpbusd), else pairs. */
static int32_t b_layout(const kiln_igemm_args *g, bool allow_ub) {
  int32_t lo = (g->b_signed ? -128 : 0) - g->b_zero, hi = (g->b_signed ? 127 : 255) - g->b_zero;
  if (lo >= -IGEMM_QUAD_BOUND && hi <= IGEMM_QUAD_BOUND) return LAYOUT_QUADS;
  if (allow_ub) return LAYOUT_QUADS_UB; /* any B, as fast as the full layout: no scan of B */
  /* The dtype's range fits int8 (an s8 weight of zero point 0): the full
   * layout without a scan of B, where it is as fast as the narrow one
   * (VNNI: the same vpdpbusd kernel). The scan was a read of every weight
   * at session start (BERT's 85 MB). */
  if (quads_full_fast() && lo >= -128 && hi <= 127) return LAYOUT_QUADS_FULL;
  b_range(g, &lo, &hi);
  if (lo >= -IGEMM_QUAD_BOUND && hi <= IGEMM_QUAD_BOUND) return LAYOUT_QUADS;
  if (quads_full_fast() && lo >= -128 && hi <= 127) return LAYOUT_QUADS_FULL;
  return LAYOUT_PAIRS;
}

/* B's element in u8 form (a signed B offset by 128). */
static uint8_t b_u8(const kiln_igemm_args *g, int64_t p, int64_t j) {
  int64_t o = g->trans_b ? j * g->ldb + p : p * g->ldb + j;
  uint8_t v = ((const uint8_t *)g->b)[o];
  return g->b_signed ? (uint8_t)(v ^ 0x80u) : v;
}

#if IGEMM_NR == 16 && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12))
#define IGEMM_HAVE_QUAD_TRANSPOSE 1
typedef uint8_t igemm_v16 __attribute__((vector_size(16)));
/* One quad of a 16-column panel from four K rows r[0..3] of B (16 bytes
 * each, minus `sub` modulo 256): column j's four bytes at 4j, the quads
 * layout's word. Byte interleaves (SSE2's unpacks where there is SSE2) instead of
 * 64 single-byte stores: ConvInteger's B is packed on every call. */
static void quad_transpose16(const uint8_t *const r[4], uint8_t sub, uint8_t *out) {
  igemm_v16 a, b, c, d, f = {sub, sub, sub, sub, sub, sub, sub, sub, sub, sub, sub, sub, sub, sub, sub, sub};
  memcpy(&a, r[0], 16);
  memcpy(&b, r[1], 16);
  memcpy(&c, r[2], 16);
  memcpy(&d, r[3], 16);
  a -= f, b -= f, c -= f, d -= f; /* modulo 256: XOR 0x80 is minus 0x80 */
  igemm_v16 ab_lo = __builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  igemm_v16 ab_hi = __builtin_shufflevector(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  igemm_v16 cd_lo = __builtin_shufflevector(c, d, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  igemm_v16 cd_hi = __builtin_shufflevector(c, d, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  /* pairs (a_j, b_j) and (c_j, d_j) as 16-bit units, interleaved */
  igemm_v16 q0 = __builtin_shufflevector(ab_lo, cd_lo, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
  igemm_v16 q1 = __builtin_shufflevector(ab_lo, cd_lo, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
  igemm_v16 q2 = __builtin_shufflevector(ab_hi, cd_hi, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
  igemm_v16 q3 = __builtin_shufflevector(ab_hi, cd_hi, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
  memcpy(out, &q0, 16);
  memcpy(out + 16, &q1, 16);
  memcpy(out + 32, &q2, 16);
  memcpy(out + 48, &q3, 16);
}

/* A full 16-column panel of a K x N B (columns c0..c0+15) in the quads
 * layout, each byte minus `sub` modulo 256, four rows at a time read along
 * the rows; rows past k hold `sub`, so they pack to 0. sum: when not NULL,
 * each column's sum of B - b_zero (the quads layout's correction). Both
 * quads layouts: b_zero for the narrow and full ones, the sign flip (0 or
 * 0x80) for the unsigned-B one. */
static void pack_panel_rows(const kiln_igemm_args *g, int64_t c0, uint8_t sub, uint8_t *out, int32_t *sum) {
  uint8_t pad[16];
  memset(pad, sub, sizeof pad);
  for (int64_t q = 0; q < kquads(g->k); q++) {
    const uint8_t *rows[4];
    for (int t = 0; t < 4; t++) {
      int64_t p = 4 * q + t;
      rows[t] = p < g->k ? (const uint8_t *)g->b + p * g->ldb + c0 : pad;
      if (sum && p < g->k)
        for (int j = 0; j < IGEMM_NR; j++) sum[j] += (g->b_signed ? (int8_t)rows[t][j] : rows[t][j]) - g->b_zero;
    }
    quad_transpose16(rows, sub, out + q * IGEMM_NR * 4);
  }
}
#endif

/* Unsigned-B quad panels [j0, j1): B's own bytes, padding 0. */
static void pack_b_quads_ub(const kiln_igemm_args *g, int32_t *data, int64_t j0, int64_t j1) {
  int64_t kq = kquads(g->k);
  for (int64_t panel = j0; panel < j1; panel++) {
    uint8_t *out = (uint8_t *)(data + panel * kq * IGEMM_NR);
    int64_t c0 = panel * IGEMM_NR;
    if (!g->trans_b && c0 + IGEMM_NR <= g->n) { /* K x N rows, a full panel: rows copied */
      uint8_t flip = g->b_signed ? 0x80u : 0;
#ifdef IGEMM_HAVE_QUAD_TRANSPOSE
      pack_panel_rows(g, c0, flip, out, NULL); /* XOR 0x80 is minus 0x80 modulo 256 */
      continue;
#endif
      for (int64_t p = 0; p < 4 * kq; p++) {
        uint8_t *o = out + (p / 4) * IGEMM_NR * 4 + p % 4;
        if (p >= g->k) {
          for (int j = 0; j < IGEMM_NR; j++) o[4 * j] = 0;
          continue;
        }
        const uint8_t *src = (const uint8_t *)g->b + p * g->ldb + c0;
        for (int j = 0; j < IGEMM_NR; j++) o[4 * j] = src[j] ^ flip;
      }
      continue;
    }
    for (int j = 0; j < IGEMM_NR; j++)
      for (int64_t p = 0; p < 4 * kq; p++)
        out[((p / 4) * IGEMM_NR + j) * 4 + p % 4] = c0 + j < g->n && p < g->k ? b_u8(g, p, c0 + j) : 0;
  }
}

/* Quad panels [j0, j1) and their columns' sums. */
static void pack_b_quads(const kiln_igemm_args *g, int32_t *data, int32_t *colsum, int64_t j0, int64_t j1) {
  int64_t kq = kquads(g->k);
  for (int64_t panel = j0; panel < j1; panel++) {
    uint8_t *out = (uint8_t *)(data + panel * kq * IGEMM_NR);
    int64_t c0 = panel * IGEMM_NR;
#ifdef IGEMM_HAVE_QUAD_TRANSPOSE
    if (!g->trans_b && c0 + IGEMM_NR <= g->n) {
      /* K x N rows, a full panel, read along the rows (a column walk read B
       * a stride of N apart per byte); B - b_zero is the byte minus b_zero
       * modulo 256 for either signedness. */
      int32_t sum[IGEMM_NR] = {0};
      pack_panel_rows(g, c0, (uint8_t)g->b_zero, out, sum);
      for (int j = 0; j < IGEMM_NR; j++) colsum[c0 + j] = sum[j];
      continue;
    }
#endif
    for (int j = 0; j < IGEMM_NR; j++) {
      uint32_t sum = 0;
      for (int64_t p = 0; p < 4 * kq; p++) {
        int32_t v = 0;
        if (c0 + j < g->n && p < g->k) {
          int64_t o = g->trans_b ? (c0 + j) * g->ldb + p : p * g->ldb + c0 + j;
          v = (g->b_signed ? ((const int8_t *)g->b)[o] : ((const uint8_t *)g->b)[o]) - g->b_zero;
        }
        out[((p / 4) * IGEMM_NR + j) * 4 + p % 4] = (uint8_t)(int8_t)v;
        sum += (uint32_t)v;
      }
      colsum[c0 + j] = (int32_t)sum;
    }
  }
}

/* Panels [j0, j1) of the packed B. */
static void pack_b_panels(const kiln_igemm_args *g, int32_t *packed, int64_t j0, int64_t j1) {
  int64_t kp = kpairs(g->k);
  for (int64_t panel = j0; panel < j1; panel++) {
    int32_t *out = packed + panel * kp * IGEMM_NR;
    int64_t c0 = panel * IGEMM_NR;
    if (!g->trans_b && c0 + IGEMM_NR <= g->n) { /* K x N rows, a full panel: no per-element checks */
      for (int64_t p = 0; p < kp; p++) {
        const uint8_t *r0 = (const uint8_t *)g->b + 2 * p * g->ldb + c0, *r1 = r0 + g->ldb;
        bool second = 2 * p + 1 < g->k;
        for (int j = 0; j < IGEMM_NR; j++) {
          int32_t v = g->b_signed ? (int8_t)r0[j] : r0[j], w = !second ? g->b_zero : g->b_signed ? (int8_t)r1[j] : r1[j];
          out[p * IGEMM_NR + j] = pair(v - g->b_zero, w - g->b_zero);
        }
      }
      continue;
    }
    /* op(B)[p, j] is B's "row" j of K when trans_b: rows are columns here. */
    for (int64_t p = 0; p < kp; p++)
      for (int j = 0; j < IGEMM_NR; j++)
        out[p * IGEMM_NR + j] = word(g->b, g->b_signed, !g->trans_b, g->ldb, g->b_zero, g->n, g->k, c0 + j, p);
  }
}

typedef struct pack_job {
  const kiln_igemm_args *g;
  int32_t layout;
  int32_t *data, *colsum; /* colsum: the quads layouts', else NULL */
} pack_job;

static void pack_task(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const pack_job *job = ctx;
  if (job->layout == LAYOUT_QUADS_UB)
    pack_b_quads_ub(job->g, job->data, begin, end);
  else if (job->layout != LAYOUT_PAIRS)
    pack_b_quads(job->g, job->data, job->colsum, begin, end);
  else
    pack_b_panels(job->g, job->data, begin, end);
}

/* Packs op(B) into `packed` (kiln_igemm_packed_b_size bytes), in a quads
 * layout where B's values and the CPU allow it (allow_ub: see b_layout). */
static void pack_b(kiln_threadpool *pool, const kiln_igemm_args *g, int32_t *packed, bool allow_ub) {
  int64_t panels = (g->n + IGEMM_NR - 1) / IGEMM_NR;
  int32_t layout = b_layout(g, allow_ub);
  bool quads = layout != LAYOUT_PAIRS;
  memset(packed, 0, HEADER_WORDS * 4);
  packed[0] = layout;
  pack_job job = {g, layout, packed + HEADER_WORDS,
                  quads ? packed + HEADER_WORDS + panels * kquads(g->k) * IGEMM_NR : NULL};
  kiln_parallel_for(pool, panels, 8, pack_task, &job);
}

void kiln_igemm_pack_b(const kiln_igemm_args *g, void *packed) { pack_b(NULL, g, packed, false); }

/* ---- the driver ------------------------------------------------------------------------------ */

typedef struct igemm_run {
  const kiln_igemm_args *g;
  const int32_t *pb;     /* packed B's panels */
  const int32_t *colsum; /* the quads layout's column sums, else NULL */
  bool ub;               /* the unsigned-B quads layout */
  const uint32_t *a_sums; /* ub: A's row sums (a_row_sums) */
  const int32_t *rows;   /* A's zero point per row, or NULL */
  kiln_igemm_kernel_fn kernel;
  int64_t mc;      /* rows of a task */
  int64_t nc;      /* columns of a task */
  int64_t tasks_n; /* column blocks */
} igemm_run;

/* op(B)[p, j] - b_zero from the packed B. */
static int32_t packed_b_at(const int32_t *pb, int64_t kp, int64_t p, int64_t j) {
  int32_t w = pb[(j / IGEMM_NR) * kp * IGEMM_NR + (p / 2) * IGEMM_NR + j % IGEMM_NR];
  return p % 2 ? hi16(w) : lo16(w);
}

/* A block with plain loops (no memory for the A panel). */
static void block_plain(const igemm_run *run, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const kiln_igemm_args *g = run->g;
  for (int64_t i = i0; i < i1; i++)
    for (int64_t j = j0; j < j1; j++) {
      uint32_t s = 0;
      for (int64_t p = 0; p < g->k; p++)
        s += (uint32_t)(at(g->a, g->a_signed, g->trans_a, g->lda, i, p, a_zero_of(g, run->rows, i)) *
                        packed_b_at(run->pb, kpairs(g->k), p, j));
      g->c[i * g->ldc + j] = (int32_t)s;
    }
}

/* Pairs [p0, p0 + pc) of row `row` of an untransposed A, into every
 * IGEMM_MR-th word of out. */
static void pack_a_row(const kiln_igemm_args *g, int32_t z, int64_t row, int64_t p0, int64_t pc, int32_t *out) {
  const uint8_t *src = (const uint8_t *)g->a + row * g->lda + 2 * p0;
  int64_t full = pc;
  if (2 * (p0 + pc) > g->k) full--; /* the last pair has one element */
  if (g->a_signed)
    for (int64_t p = 0; p < full; p++) out[p * IGEMM_MR] = pair((int8_t)src[2 * p] - z, (int8_t)src[2 * p + 1] - z);
  else
    for (int64_t p = 0; p < full; p++) out[p * IGEMM_MR] = pair(src[2 * p] - z, src[2 * p + 1] - z);
  if (full < pc) out[full * IGEMM_MR] = pair((g->a_signed ? (int8_t)src[2 * full] : src[2 * full]) - z, 0);
}

/* Output block t of the run: rows [i0, i1), columns [j0, j1). */
static void block_of(const igemm_run *run, int64_t t, int64_t *i0, int64_t *i1, int64_t *j0, int64_t *j1) {
  *i0 = (t / run->tasks_n) * run->mc, *j0 = (t % run->tasks_n) * run->nc;
  *i1 = *i0 + run->mc < run->g->m ? *i0 + run->mc : run->g->m, *j1 = *j0 + run->nc < run->g->n ? *j0 + run->nc : run->g->n;
}

/* The micro-kernel over output block [i0, i1) x [j0, j1) for K words
 * [w0, w0 + wc) (pairs or quads; `words` in all), A's panels packed
 * `panel_words` deep, C accumulated after the first K block. */
static void block_tiles(const igemm_run *run, const int32_t *ap, int64_t panel_words, int64_t words, int64_t w0,
                        int64_t wc, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const kiln_igemm_args *g = run->g;
  for (int64_t c0 = j0; c0 < j1; c0 += IGEMM_NR) {
    const int32_t *bpanel = run->pb + (c0 / IGEMM_NR) * words * IGEMM_NR + w0 * IGEMM_NR;
    int nr = j1 - c0 < IGEMM_NR ? (int)(j1 - c0) : IGEMM_NR;
    for (int64_t r0 = i0; r0 < i1; r0 += IGEMM_MR) {
      int mr = i1 - r0 < IGEMM_MR ? (int)(i1 - r0) : IGEMM_MR;
      run->kernel(wc, ap + (r0 - i0) * panel_words, bpanel, g->c + r0 * g->ldc + c0, g->ldc, mr, nr, w0 > 0);
    }
  }
}

static void task(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const igemm_run *run = ctx;
  const kiln_igemm_args *g = run->g;
  int64_t kp = kpairs(g->k);
  int32_t *ap = malloc((size_t)MC * KCP * sizeof *ap);
  for (int64_t t = begin; t < end; t++) {
    int64_t i0, i1, j0, j1;
    block_of(run, t, &i0, &i1, &j0, &j1);
    if (!ap) {
      block_plain(run, i0, i1, j0, j1);
    } else {
      int64_t p0 = 0;
      do { /* at least once: K == 0 stores zeros */
        int64_t pc = kp - p0 < KCP ? kp - p0 : KCP;
        for (int64_t r0 = i0; r0 < i1; r0 += IGEMM_MR) {
          int32_t *panel = ap + (r0 - i0) * KCP;
          for (int r = 0; r < IGEMM_MR; r++) {
            int64_t row = r0 + r;
            if (!g->trans_a && row < g->m) { /* M x K rows: one run of K per row */
              pack_a_row(g, a_zero_of(g, run->rows, row), row, p0, pc, panel + r);
              continue;
            }
            for (int64_t p = 0; p < pc; p++)
              panel[p * IGEMM_MR + r] =
                  word(g->a, g->a_signed, g->trans_a, g->lda, a_zero_of(g, run->rows, row), g->m, g->k, row, p0 + p);
          }
        }
        block_tiles(run, ap, KCP, kp, p0, pc, i0, i1, j0, j1);
        p0 += pc;
      } while (p0 < kp);
    }
    if (g->epilogue) g->epilogue(g->epilogue_ctx, g->c + i0 * g->ldc + j0, g->ldc, i0, j0, i1 - i0, j1 - j0);
  }
  free(ap);
}

/* ---- the quads layout (igemm_internal.h) ---- */

#define KCQ 128 /* K quads of a block: the same 512 K as KCP pairs */

/* A's element as the quads kernel reads it: uint8, a signed A offset by 128. */
static uint32_t a_u8(const kiln_igemm_args *g, int64_t row, int64_t p) {
  uint8_t v = ((const uint8_t *)g->a)[g->trans_a ? p * g->lda + row : row * g->lda + p];
  return g->a_signed ? v ^ 0x80u : v;
}

/* What the quads kernel's sums are corrected by per row: the zero point in A's uint8 form. */
static int32_t a_zero_u8(const igemm_run *run, int64_t row) {
  return a_zero_of(run->g, run->rows, row) + (run->g->a_signed ? 128 : 0);
}

/* Word (q, r) of A's quads: row `row`, K 4q..4q+3 (0 past k or past the rows). */
static int32_t a_quad(const kiln_igemm_args *g, int64_t row, int64_t q) {
  uint32_t w = 0;
  if (row < g->m)
    for (int t = 0; t < 4 && 4 * q + t < g->k; t++) w |= a_u8(g, row, 4 * q + t) << 8 * t;
  return (int32_t)w;
}

/* A's element minus its zero point as the unsigned-B kernel reads it (int8: checked by a_fits_s8). */
static int32_t a_s8(const igemm_run *run, int64_t row, int64_t p) {
  const kiln_igemm_args *g = run->g;
  return at(g->a, g->a_signed, g->trans_a, g->lda, row, p, a_zero_of(g, run->rows, row));
}

/* Word (q, r) of A's quads in the unsigned-B layout: A - a_zero as int8 bytes. */
static int32_t a_quad_s8(const igemm_run *run, int64_t row, int64_t q) {
  uint32_t w = 0;
  if (row < run->g->m)
    for (int t = 0; t < 4 && 4 * q + t < run->g->k; t++) w |= (uint32_t)(uint8_t)(int8_t)a_s8(run, row, 4 * q + t) << 8 * t;
  return (int32_t)w;
}

/* Whether every A - a_zero fits int8 (the unsigned-B layout's condition on A). */
static bool a_fits_s8(const kiln_igemm_args *g, const int32_t *rows) {
  for (int64_t i = 0; i < g->m; i++) {
    int32_t z = a_zero_of(g, rows, i), lo = (g->a_signed ? -128 : 0) - z, hi = (g->a_signed ? 127 : 255) - z;
    if (lo >= -128 && hi <= 127) continue;
    for (int64_t p = 0; p < g->k; p++) {
      int32_t v = at(g->a, g->a_signed, g->trans_a, g->lda, i, p, z);
      if (v < -128 || v > 127) return false;
    }
  }
  return true;
}

/* A's row sums of A - a_zero (modulo 2^32), once per call: the unsigned-B correction's. */
static void a_row_sums(const kiln_igemm_args *g, const int32_t *rows, uint32_t *sums) {
  for (int64_t i = 0; i < g->m; i++) {
    uint32_t sum = 0;
    int32_t z = a_zero_of(g, rows, i);
    if (!g->trans_a) { /* a run of bytes, summed in a loop the compiler vectorizes (ConvInteger's weights, every call) */
      const uint8_t *src = (const uint8_t *)g->a + i * g->lda;
      if (g->a_signed)
        for (int64_t p = 0; p < g->k; p++) sum += (uint32_t)(int32_t)(int8_t)src[p];
      else
        for (int64_t p = 0; p < g->k; p++) sum += src[p];
      sums[i] = sum - (uint32_t)z * (uint32_t)g->k;
      continue;
    }
    for (int64_t p = 0; p < g->k; p++) sum += (uint32_t)at(g->a, g->a_signed, g->trans_a, g->lda, i, p, z);
    sums[i] = sum;
  }
}

/* Unsigned-B layout: C[i0..i1, j0..j1] -= B's zero point (u8 form) x A's
 * row sums (sums[i - i0]). */
static void quads_ub_correct(const igemm_run *run, const uint32_t *sums, int64_t i0, int64_t i1, int64_t j0,
                             int64_t j1) {
  const kiln_igemm_args *g = run->g;
  uint32_t z = (uint32_t)(g->b_zero + (g->b_signed ? 128 : 0));
  if (!z) return;
  for (int64_t i = i0; i < i1; i++) {
    int32_t *row = g->c + i * g->ldc;
    for (int64_t j = j0; j < j1; j++) row[j] = (int32_t)((uint32_t)row[j] - z * sums[i - i0]);
  }
}

/* C[i0..i1, j0..j1] -= a's zero point (uint8 form) x B's column sum: the kernel summed uint8 A. */
static void quads_correct(const igemm_run *run, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const kiln_igemm_args *g = run->g;
  if (run->ub) {
    quads_ub_correct(run, run->a_sums + i0, i0, i1, j0, j1);
    return;
  }
  for (int64_t i = i0; i < i1; i++) {
    uint32_t z = (uint32_t)a_zero_u8(run, i);
    if (!z) continue;
    int32_t *row = g->c + i * g->ldc;
    for (int64_t j = j0; j < j1; j++) row[j] = (int32_t)((uint32_t)row[j] - z * (uint32_t)run->colsum[j]);
  }
}

static void task_quads(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const igemm_run *run = ctx;
  const kiln_igemm_args *g = run->g;
  int64_t kq = kquads(g->k);
  /* run->mc rows (AMX_MC when task_amx falls back here), whole micro-panels */
  int32_t *ap = malloc((size_t)((run->mc + IGEMM_MR - 1) / IGEMM_MR * IGEMM_MR) * KCQ * sizeof *ap);
  for (int64_t t = begin; t < end; t++) {
    int64_t i0, i1, j0, j1;
    block_of(run, t, &i0, &i1, &j0, &j1);
    if (!ap) { /* plain loops over the packed quads */
      for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) {
          const int8_t *bq = (const int8_t *)(run->pb + (j / IGEMM_NR) * kq * IGEMM_NR);
          uint32_t s = 0;
          for (int64_t p = 0; p < g->k; p++) {
            int8_t b = bq[((p / 4) * IGEMM_NR + j % IGEMM_NR) * 4 + p % 4];
            s += run->ub ? (uint32_t)(a_s8(run, i, p) * (int32_t)(uint8_t)b) : (uint32_t)((int32_t)a_u8(g, i, p) * b);
          }
          g->c[i * g->ldc + j] = (int32_t)s;
        }
    } else {
      int64_t q0 = 0;
      do {
        int64_t qc = kq - q0 < KCQ ? kq - q0 : KCQ;
        for (int64_t r0 = i0; r0 < i1; r0 += IGEMM_MR) {
          int32_t *panel = ap + (r0 - i0) * KCQ;
          for (int r = 0; r < IGEMM_MR; r++) {
            int64_t row = r0 + r;
            if (run->ub) {
              if (!g->trans_a && row < g->m && 4 * (q0 + qc) <= g->k) { /* whole quads of one row */
                const uint8_t *src = (const uint8_t *)g->a + row * g->lda + 4 * q0;
                int32_t z = a_zero_of(g, run->rows, row);
                for (int64_t q = 0; q < qc; q++) {
                  uint32_t w = 0;
                  for (int t = 0; t < 4; t++) {
                    int32_t v = (g->a_signed ? (int8_t)src[4 * q + t] : src[4 * q + t]) - z;
                    w |= (uint32_t)(uint8_t)(int8_t)v << 8 * t;
                  }
                  panel[q * IGEMM_MR + r] = (int32_t)w;
                }
                continue;
              }
              for (int64_t q = 0; q < qc; q++) panel[q * IGEMM_MR + r] = a_quad_s8(run, row, q0 + q);
              continue;
            }
            if (!g->trans_a && row < g->m && 4 * (q0 + qc) <= g->k) { /* whole quads of one row: copy them */
              const uint8_t *src = (const uint8_t *)g->a + row * g->lda + 4 * q0;
              uint32_t flip = g->a_signed ? 0x80808080u : 0;
              for (int64_t q = 0; q < qc; q++) {
                uint32_t w;
                memcpy(&w, src + 4 * q, 4);
                panel[q * IGEMM_MR + r] = (int32_t)(w ^ flip);
              }
              continue;
            }
            for (int64_t q = 0; q < qc; q++) panel[q * IGEMM_MR + r] = a_quad(g, row, q0 + q);
          }
        }
        block_tiles(run, ap, KCQ, kq, q0, qc, i0, i1, j0, j1);
        q0 += qc;
      } while (q0 < kq);
    }
    quads_correct(run, i0, i1, j0, j1);
    if (g->epilogue) g->epilogue(g->epilogue_ctx, g->c + i0 * g->ldc + j0, g->ldc, i0, j0, i1 - i0, j1 - j0);
  }
  free(ap);
}

/* ---- the quads layouts on AMX tiles ---- */

#define AMX_MC 64 /* rows of a task: B's panels are read once per 64 rows of A */
#define AMX_MIN_ROWS 16

/* Rows [i0, i0 + AMX_MC) of A as the AMX kernel reads them, `stride` bytes
 * a row: the quads kernels' bytes (u8 A, a signed A offset by 128; in the
 * unsigned-B layout A - a_zero as s8), 0 past K and past the rows, so the
 * padding adds nothing whatever the B tile holds there; in the unsigned-B
 * layout also the rows' sums of A - a_zero (sums[r], rows inside M). */
static void pack_a_amx(const igemm_run *run, int64_t i0, int64_t stride, uint8_t *out, uint32_t *sums) {
  const kiln_igemm_args *g = run->g;
  for (int64_t r = 0; r < AMX_MC; r++) {
    uint8_t *o = out + r * stride;
    int64_t row = i0 + r;
    if (row >= g->m) {
      memset(o, 0, (size_t)stride);
      continue;
    }
    if (run->ub) {
      int32_t z = a_zero_of(g, run->rows, row);
      if (!g->trans_a) {
        /* A - z fits int8 (a_fits_s8), so its byte is A's byte minus z's
         * modulo 256 for either signedness: a loop the compiler vectorizes. */
        const uint8_t *src = (const uint8_t *)g->a + row * g->lda;
        uint8_t zb = (uint8_t)z;
        if (!zb)
          memcpy(o, src, (size_t)g->k);
        else
          for (int64_t p = 0; p < g->k; p++) o[p] = (uint8_t)(src[p] - zb);
      } else {
        for (int64_t p = 0; p < g->k; p++) o[p] = (uint8_t)a_s8(run, row, p);
      }
      uint32_t sum = 0; /* the packed bytes are A - z as int8 */
      for (int64_t p = 0; p < g->k; p++) sum += (uint32_t)(int32_t)(int8_t)o[p];
      sums[r] = sum;
    } else if (!g->trans_a) {
      const uint8_t *src = (const uint8_t *)g->a + row * g->lda;
      if (g->a_signed)
        for (int64_t p = 0; p < g->k; p++) o[p] = (uint8_t)(src[p] ^ 0x80u);
      else
        memcpy(o, src, (size_t)g->k);
    } else {
      for (int64_t p = 0; p < g->k; p++) o[p] = (uint8_t)a_u8(g, row, p);
    }
    memset(o + g->k, 0, (size_t)(stride - g->k));
  }
}

static void task_amx(void *ctx, int64_t begin, int64_t end, int thread) {
  const igemm_run *run = ctx;
  const kiln_igemm_args *g = run->g;
  int64_t kq = kquads(g->k), stride = (g->k + 63) / 64 * 64;
  uint8_t *ap = aligned_alloc(64, (size_t)(AMX_MC * stride));
  if (!ap && !run->ub) { /* the VNNI quads kernel over the same blocks (run->kernel is it) */
    task_quads(ctx, begin, end, thread);
    return;
  }
  if (!ap) { /* plain loops over B as stored (the unsigned-B layout is packed by this call: b is there),
              * with no correction: the row sums are the AMX tasks' own */
    for (int64_t t = begin; t < end; t++) {
      int64_t i0, i1, j0, j1;
      block_of(run, t, &i0, &i1, &j0, &j1);
      for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) {
          uint32_t s = 0;
          for (int64_t p = 0; p < g->k; p++)
            s += (uint32_t)(a_s8(run, i, p) * at(g->b, g->b_signed, !g->trans_b, g->ldb, j, p, g->b_zero));
          g->c[i * g->ldc + j] = (int32_t)s;
        }
      if (g->epilogue) g->epilogue(g->epilogue_ctx, g->c + i0 * g->ldc + j0, g->ldc, i0, j0, i1 - i0, j1 - j0);
    }
    return;
  }
  kiln_igemm_amx_fn kernel = run->ub ? kiln_igemm_amx_ub_kernel : kiln_igemm_amx_kernel;
  kiln_igemm_amx_configure();
  for (int64_t t = begin; t < end; t++) {
    int64_t i0, i1, j0, j1;
    block_of(run, t, &i0, &i1, &j0, &j1);
    uint32_t sums[AMX_MC];
    pack_a_amx(run, i0, stride, ap, sums);
    for (int64_t c0 = j0; c0 < j1; c0 += 2 * IGEMM_NR) {
      const uint8_t *b0 = (const uint8_t *)(run->pb + (c0 / IGEMM_NR) * kq * IGEMM_NR);
      int nr = j1 - c0 < 2 * IGEMM_NR ? (int)(j1 - c0) : 2 * IGEMM_NR;
      for (int64_t r0 = i0; r0 < i1; r0 += 32) {
        int mr = i1 - r0 < 32 ? (int)(i1 - r0) : 32;
        kernel(kq, ap + (r0 - i0) * stride, stride, b0, b0 + kq * IGEMM_NR * 4, g->c + r0 * g->ldc + c0, g->ldc, mr,
               nr);
      }
    }
    if (run->ub)
      quads_ub_correct(run, sums, i0, i1, j0, j1);
    else
      quads_correct(run, i0, i1, j0, j1);
    if (g->epilogue) g->epilogue(g->epilogue_ctx, g->c + i0 * g->ldc + j0, g->ldc, i0, j0, i1 - i0, j1 - j0);
  }
  kiln_igemm_amx_release();
  free(ap);
}

/* The whole product with plain loops, B read as stored (no memory to pack it). */
static void all_plain(const kiln_igemm_args *g, const int32_t *rows) {
  for (int64_t i = 0; i < g->m; i++)
    for (int64_t j = 0; j < g->n; j++) {
      uint32_t s = 0;
      for (int64_t p = 0; p < g->k; p++)
        s += (uint32_t)(at(g->a, g->a_signed, g->trans_a, g->lda, i, p, a_zero_of(g, rows, i)) *
                        at(g->b, g->b_signed, !g->trans_b, g->ldb, j, p, g->b_zero));
      g->c[i * g->ldc + j] = (int32_t)s;
    }
  if (g->epilogue && g->m > 0 && g->n > 0) g->epilogue(g->epilogue_ctx, g->c, g->ldc, 0, 0, g->m, g->n);
}

void kiln_igemm(kiln_threadpool *pool, const kiln_igemm_args *g) { kiln_igemm_rows(pool, g, NULL); }

void kiln_igemm_rows(kiln_threadpool *pool, const kiln_igemm_args *g, const int32_t *rows) {
  if (g->m <= 0 || g->n <= 0) return;
  if (g->k <= 0) {
    all_plain(g, rows); /* zeros */
    return;
  }
  int32_t *own = NULL;
  uint32_t *a_sums = NULL;
  const int32_t *packed = g->packed_b;
  if (!packed) {
    size_t bytes = kiln_igemm_packed_b_size(g->k, g->n);
    own = bytes ? aligned_alloc(64, (bytes + 63) & ~(size_t)63) : NULL;
    if (!own) {
      all_plain(g, rows);
      return;
    }
    /* Packed for this call: A is known, so the unsigned-B quads may serve. */
    bool allow_ub = quad_ub_kernel() && a_fits_s8(g, rows) && (a_sums = malloc((size_t)g->m * sizeof *a_sums));
    pack_b(pool, g, own, allow_ub);
    packed = own;
  }
  bool ub = packed[0] == LAYOUT_QUADS_UB; /* only this call packs it, its kernel and a_sums at hand */
  bool quads = packed[0] == LAYOUT_QUADS || packed[0] == LAYOUT_QUADS_FULL || ub;
  int64_t panels = (g->n + IGEMM_NR - 1) / IGEMM_NR;
  /* Tiny products stay on the caller's thread. */
  double macs = (double)g->m * (double)g->n * (double)g->k;
  if (macs < 65536.0) pool = NULL;
  /* AMX: the quads layouts on tiles where the rows fill them (below 16
   * rows a tile is mostly padding and VNNI does as well); forced, always. */
  bool amx = quads && !strcmp(chosen()->name, "amx") &&
             (__atomic_load_n(&g_forced, __ATOMIC_ACQUIRE) || g->m >= AMX_MIN_ROWS);
  int64_t mc = amx ? AMX_MC : MC;
  /* AMX sums each task's rows as it packs them: a separate pass read
   * ConvInteger's weights from memory once more per call (a sixth of
   * QDQ ResNet-50's time with AMX, 1 thread). */
  if (ub && !amx) a_row_sums(g, rows, a_sums);
  /* Narrower column blocks while the blocks do not share evenly among the
   * threads (BERT's [128, 768] outputs: 9 blocks of 48 x 256 left one of 2
   * threads idle a ninth of the time); each block re-packs its A panel, a
   * K-th of its work. */
  int64_t nc = NC, threads = pool ? kiln_threadpool_size(pool) : 1;
  for (; nc > 4 * IGEMM_NR; nc /= 2) {
    int64_t blocks = (g->m + mc - 1) / mc * ((g->n + nc - 1) / nc);
    if ((blocks + threads - 1) / threads * threads * 100 <= blocks * 105) break; /* within 5% of even */
  }
  igemm_run run = {g,
                   packed + HEADER_WORDS,
                   quads ? packed + HEADER_WORDS + panels * kquads(g->k) * IGEMM_NR : NULL,
                   ub,
                   a_sums,
                   rows,
                   ub ? quad_ub_kernel() : quads ? quad_kernel(packed[0] == LAYOUT_QUADS_FULL) : *chosen()->fn,
                   mc,
                   nc,
                   (g->n + nc - 1) / nc};
  int64_t tasks = (g->m + mc - 1) / mc * run.tasks_n;
  kiln_parallel_for(pool, tasks, 1, amx ? task_amx : quads ? task_quads : task, &run);
  free(own);
  free(a_sums);
}

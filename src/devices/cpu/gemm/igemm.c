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

/* ---- the kernel choice ------------------------------------------------------------------ */

typedef struct igemm_kernel {
  const char *name;
  const kiln_igemm_kernel_fn *fn; /* NULL entry: not built */
} igemm_kernel;

static const kiln_igemm_kernel_fn generic_fn = kiln_igemm_kernel_generic;
static const igemm_kernel g_kernels[] = {
    {"avx512vnni", &kiln_igemm_kernel_avx512vnni},
    {"avxvnni", &kiln_igemm_kernel_avxvnni},
    {"avx2", &kiln_igemm_kernel_avx2},
    {"generic", &generic_fn},
};
static const igemm_kernel *g_forced;

static bool usable(const igemm_kernel *k) {
  const kiln_cpu_features *f = kiln_cpu_features_get();
  if (!*k->fn) return false;
  if (!strcmp(k->name, "avx512vnni")) return f->avx2 && f->avx512f && f->avx512vl && f->avx512_vnni;
  if (!strcmp(k->name, "avxvnni")) return f->avx2 && f->avx_vnni;
  if (!strcmp(k->name, "avx2")) return f->avx2;
  return true;
}

static const igemm_kernel *chosen(void) {
  const igemm_kernel *k = __atomic_load_n(&g_forced, __ATOMIC_ACQUIRE);
  if (k) return k;
  for (size_t i = 0; i < sizeof g_kernels / sizeof g_kernels[0]; i++)
    if (usable(&g_kernels[i])) return &g_kernels[i];
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

size_t kiln_igemm_packed_b_size(int64_t k, int64_t n) {
  if (k < 0 || n < 0) return 0;
  uint64_t panels = ((uint64_t)n + IGEMM_NR - 1) / IGEMM_NR, bytes;
  if (__builtin_mul_overflow(panels, (uint64_t)kpairs(k) * IGEMM_NR * 4, &bytes) || bytes > SIZE_MAX) return 0;
  return (size_t)bytes;
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

void kiln_igemm_pack_b(const kiln_igemm_args *g, void *packed) {
  pack_b_panels(g, packed, 0, (g->n + IGEMM_NR - 1) / IGEMM_NR);
}

typedef struct pack_job {
  const kiln_igemm_args *g;
  int32_t *packed;
} pack_job;

static void pack_task(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const pack_job *job = ctx;
  pack_b_panels(job->g, job->packed, begin, end);
}

/* ---- the driver ------------------------------------------------------------------------------ */

typedef struct igemm_run {
  const kiln_igemm_args *g;
  const int32_t *pb; /* packed B */
  const int32_t *rows; /* A's zero point per row, or NULL */
  kiln_igemm_kernel_fn kernel;
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

static void task(void *ctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const igemm_run *run = ctx;
  const kiln_igemm_args *g = run->g;
  int64_t kp = kpairs(g->k);
  int32_t *ap = malloc((size_t)MC * KCP * sizeof *ap);
  for (int64_t t = begin; t < end; t++) {
    int64_t i0 = (t / run->tasks_n) * MC, j0 = (t % run->tasks_n) * NC;
    int64_t i1 = i0 + MC < g->m ? i0 + MC : g->m, j1 = j0 + NC < g->n ? j0 + NC : g->n;
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
        for (int64_t c0 = j0; c0 < j1; c0 += IGEMM_NR) {
          const int32_t *bpanel = run->pb + (c0 / IGEMM_NR) * kp * IGEMM_NR + p0 * IGEMM_NR;
          int nr = j1 - c0 < IGEMM_NR ? (int)(j1 - c0) : IGEMM_NR;
          for (int64_t r0 = i0; r0 < i1; r0 += IGEMM_MR) {
            int mr = i1 - r0 < IGEMM_MR ? (int)(i1 - r0) : IGEMM_MR;
            run->kernel(pc, ap + (r0 - i0) * KCP, bpanel, g->c + r0 * g->ldc + c0, g->ldc, mr, nr, p0 > 0);
          }
        }
        p0 += pc;
      } while (p0 < kp);
    }
    if (g->epilogue) g->epilogue(g->epilogue_ctx, g->c + i0 * g->ldc + j0, g->ldc, i0, j0, i1 - i0, j1 - j0);
  }
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
  const int32_t *pb = g->packed_b;
  if (!pb) {
    size_t bytes = kiln_igemm_packed_b_size(g->k, g->n);
    own = bytes ? aligned_alloc(64, (bytes + 63) & ~(size_t)63) : NULL;
    if (!own && bytes) {
      all_plain(g, rows);
      return;
    }
    pack_job job = {g, own};
    kiln_parallel_for(pool, (g->n + IGEMM_NR - 1) / IGEMM_NR, 8, pack_task, &job);
    pb = own;
  }
  igemm_run run = {g, pb, rows, *chosen()->fn, (g->n + NC - 1) / NC};
  int64_t tasks = (g->m + MC - 1) / MC * run.tasks_n;
  /* Tiny products stay on the caller's thread. */
  double macs = (double)g->m * (double)g->n * (double)g->k;
  kiln_parallel_for(macs < 65536.0 ? NULL : pool, tasks, 1, task, &run);
  free(own);
}

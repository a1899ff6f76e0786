/* gemm.c — kiln_sgemm's driver: kernel dispatch, cache blocking, packing,
 * threading, and the small-M and degenerate paths.
 *
 * The blocked path follows GotoBLAS/BLIS. For each NC-wide panel of B and
 * each KC-deep slice of it, the threads first pack the KC x NC block of B
 * together (strips of NR columns, kept in L2/L3; with several threads the
 * whole K x NC panel at once, so that one packing phase and one compute
 * phase cover the panel, with no barrier per k-slice), then each thread takes a
 * range of rows of C (or of strips, when rows are few), packs MC x KC
 * blocks of A (kept in L2) and runs the micro-kernel over NR-wide strips (a
 * KC x NR micro-panel of B stays near L1) and MR-high panels. Packing is
 * skipped where it cannot pay off: A is read in place when each of its
 * panels meets only a few strips of B; a row-major B is read in place when
 * each thread meets each of its micro-panels in one block of rows only (or
 * B is small), the thread copying each micro-panel for itself while its
 * first panel of A reads it; a pre-packed B needs nothing. Without a
 * B-packing phase one parallel region covers the whole panel. Threads split
 * rows or columns of C as a cost model suggests (choose_grid) and claim the
 * pieces dynamically, so one descheduled thread does not stall the others.
 *
 * alpha, beta and the bias are applied by the micro-kernel when it stores a
 * tile: the first k-slice stores alpha*AB + beta*C + bias, later slices add
 * alpha*AB. The epilogue runs after the last k-slice on each MC x (up to
 * KILN_GEMM_EPILOGUE_COLS) block, right after the kernel wrote it.
 *
 * Up to 4 rows (2 with a packed B), the small-M path streams B once instead
 * (GEMV-like shapes are bound by memory bandwidth). */
#include "devices/cpu/gemm/gemm_internal.h"

#include "base/common.h"
#include "base/cpu_features.h"
#include "base/threadpool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KILN_GEMM_EPILOGUE_COLS 256
#define KILN_GEMM_DIRECT_A_STRIPS 4
#define KILN_GEMM_DIRECT_A_STRIPS_MAX 16
#define KILN_GEMM_PARTS_PER_THREAD 2
#define KILN_GEMM_PART_ROWS 256
/* Multi-threaded, B packed for all of K in one phase when the packed panel
 * is at most this big and at least this many columns wide (or all of N). */
#define KILN_GEMM_FULL_K_BYTES ((int64_t)16 << 20)
#define KILN_GEMM_FULL_K_MIN_COLS 512
/* Up to this many rows, B is streamed once instead of packed (with a
 * pre-packed B, the blocked path's narrow tiles do as well from 3 rows). */
#define KILN_GEMM_SMALL_M_PATH 4
#define KILN_GEMM_SMALL_M_PACKED 2
#define PACKED_B_MAGIC 0x6b47656du /* "mGek" */
#define PACKED_B_HEADER 64

typedef struct packed_b_header {
  uint32_t magic;
  int32_t kernel_id, nr, pad_;
  int64_t k, n;
} packed_b_header;

/* ---- dispatch ---------------------------------------------------------- */

static const kiln_gemm_kernel *g_forced; /* set only by tests/benches */
static int64_t g_mc, g_kc, g_nc;         /* blocking overrides for tests */
static int g_alloc_failure;              /* simulated out-of-memory for tests */
static int g_direct_a, g_direct_b;       /* tests: 1 reads in place, 2 packs, 0 decides;
                                          * B: 3 reads in place with per-thread packing */
static int g_no_full_k;                  /* tests: 1 never packs B for all of K */
static int64_t g_small_m_max = KILN_GEMM_SMALL_M_PATH; /* tests/benches may change these */
static int64_t g_small_m_packed_max = KILN_GEMM_SMALL_M_PACKED;
static int64_t g_tiny_max = KILN_GEMM_TINY_PRODUCTS;   /* tests: 0 turns the tiny path off */

static bool kernel_usable(const kiln_gemm_kernel *k) {
  if (!k->name || !k->micro) return false;
  const kiln_cpu_features *f = kiln_cpu_features_get();
  if (k == &kiln_gemm_kernel_avx512) return f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->fma;
  if (k == &kiln_gemm_kernel_avx2) return f->avx2 && f->fma;
  return true;
}

static const kiln_gemm_kernel *kernel_by_name(const char *name) {
  const kiln_gemm_kernel *all[] = {&kiln_gemm_kernel_avx512, &kiln_gemm_kernel_avx2, &kiln_gemm_kernel_generic};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]->name && strcmp(all[i]->name, name) == 0) return all[i];
  return NULL;
}

static const kiln_gemm_kernel *kernel_by_id(int id) {
  const kiln_gemm_kernel *all[] = {&kiln_gemm_kernel_avx512, &kiln_gemm_kernel_avx2, &kiln_gemm_kernel_generic};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]->name && all[i]->id == id && kernel_usable(all[i])) return all[i];
  return NULL;
}

static const kiln_gemm_kernel *detect_kernel(void) {
  const char *env = getenv("KILN_GEMM_KERNEL");
  if (env && *env) {
    const kiln_gemm_kernel *k = kernel_by_name(env);
    if (k && kernel_usable(k)) return k;
  }
  if (kernel_usable(&kiln_gemm_kernel_avx512)) return &kiln_gemm_kernel_avx512;
  if (kernel_usable(&kiln_gemm_kernel_avx2)) return &kiln_gemm_kernel_avx2;
  return &kiln_gemm_kernel_generic;
}

const kiln_gemm_kernel *kiln_gemm_active_kernel(void) {
  const kiln_gemm_kernel *k = __atomic_load_n(&g_forced, __ATOMIC_ACQUIRE);
  if (k) return k;
  static const kiln_gemm_kernel *detected;
  k = __atomic_load_n(&detected, __ATOMIC_ACQUIRE);
  if (!k) {
    k = detect_kernel(); /* idempotent: a racing thread computes the same */
    __atomic_store_n(&detected, k, __ATOMIC_RELEASE);
  }
  return k;
}

bool kiln_gemm_force_kernel(const char *name) {
  if (!name) {
    __atomic_store_n(&g_forced, NULL, __ATOMIC_RELEASE);
    return true;
  }
  const kiln_gemm_kernel *k = kernel_by_name(name);
  if (!k || !kernel_usable(k)) return false;
  __atomic_store_n(&g_forced, k, __ATOMIC_RELEASE);
  return true;
}

void kiln_gemm_set_blocking(int64_t mc, int64_t kc, int64_t nc) {
  g_mc = mc;
  g_kc = kc;
  g_nc = nc;
}

void kiln_gemm_test_alloc_failure(int mode) { g_alloc_failure = mode; }
void kiln_gemm_test_direct_a(int mode) { g_direct_a = mode; }
void kiln_gemm_test_direct_b(int mode) { g_direct_b = mode; }
void kiln_gemm_test_no_full_k(int mode) { g_no_full_k = mode; }
void kiln_gemm_set_small_m(int64_t max_m) {
  g_small_m_max = max_m >= 0 ? max_m : KILN_GEMM_SMALL_M_PATH;
  g_small_m_packed_max = max_m >= 0 ? max_m : KILN_GEMM_SMALL_M_PACKED;
}

void kiln_gemm_set_tiny_max(int64_t max_products) { g_tiny_max = max_products >= 0 ? max_products : KILN_GEMM_TINY_PRODUCTS; }

const char *kiln_sgemm_kernel_name(void) { return kiln_gemm_active_kernel()->name; }

/* ---- threading ---------------------------------------------------------- */

typedef kiln_parallel_fn range_fn;

static int pool_threads(kiln_threadpool *pool) { return pool ? kiln_threadpool_size(pool) : 1; }

static void run_parallel(kiln_threadpool *pool, int64_t n, int64_t grain, range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (pool && kiln_threadpool_size(pool) > 1 && n > grain) {
    kiln_parallel_for(pool, n, grain, fn, ctx);
    return;
  }
  fn(ctx, 0, n, 0);
}

/* ---- helpers ------------------------------------------------------------ */

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static void *aligned_buffer(size_t bytes) {
  void *p = NULL;
  if (g_alloc_failure == 1) return NULL;
  if (bytes == 0) bytes = 64;
  if (posix_memalign(&p, 64, round_up((int64_t)bytes, 64))) return NULL;
  return p;
}

static inline float op_a(const kiln_sgemm_args *g, int64_t i, int64_t p) {
  return g->trans_a ? g->a[p * g->lda + i] : g->a[i * g->lda + p];
}

/* C = beta*C + bias for rows [i0,i1) (alpha == 0 or K == 0). */
static void scale_rows(const kiln_sgemm_args *g, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    float *c = g->c + i * g->ldc;
    for (int64_t j = 0; j < g->n; j++) {
      float v = g->beta != 0.0f ? g->beta * c[j] : 0.0f;
      if (g->bias_axis == KILN_GEMM_BIAS_ROW && g->bias) v += g->bias[i];
      if (g->bias_axis == KILN_GEMM_BIAS_COL && g->bias) v += g->bias[j];
      c[j] = v;
    }
  }
}

/* The unblocked path for when no packing memory can be had. */
static void naive_rows(const kiln_sgemm_args *g, const float *bp, int nr, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; i++) {
    float *c = g->c + i * g->ldc;
    for (int64_t j = 0; j < g->n; j++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < g->k; p++) {
        float b;
        if (bp) b = bp[(j / nr) * g->k * nr + p * nr + j % nr];
        else b = g->trans_b ? g->b[j * g->ldb + p] : g->b[p * g->ldb + j];
        acc += op_a(g, i, p) * b;
      }
      float v = g->alpha * acc;
      if (g->bias_axis == KILN_GEMM_BIAS_ROW && g->bias) v += g->bias[i];
      if (g->bias_axis == KILN_GEMM_BIAS_COL && g->bias) v += g->bias[j];
      if (g->beta != 0.0f) v += g->beta * c[j];
      c[j] = v;
    }
  }
}

static void run_epilogue_rows(const kiln_sgemm_args *g, int64_t i0, int64_t i1) {
  if (!g->epilogue || i1 <= i0) return;
  for (int64_t j0 = 0; j0 < g->n; j0 += KILN_GEMM_EPILOGUE_COLS) {
    int64_t nb = min64(KILN_GEMM_EPILOGUE_COLS, g->n - j0);
    g->epilogue(g->epilogue_ctx, g->c + i0 * g->ldc + j0, g->ldc, i0, j0, i1 - i0, nb);
  }
}

typedef struct rows_job {
  const kiln_sgemm_args *g;
  const float *bp; /* packed B data or NULL */
  int nr;
  bool scale_only;
} rows_job;

static void rows_task(void *ctx, int64_t begin, int64_t end, int thread) {
  const rows_job *job = ctx;
  if (job->scale_only) scale_rows(job->g, begin, end);
  else naive_rows(job->g, job->bp, job->nr, begin, end);
  run_epilogue_rows(job->g, begin, end);
}

/* ---- tiny: B copied once, A read in place, no blocking -------------------- */

/* Returns false when this path does not apply. Single-threaded: a problem
 * this small takes less time than waking the pool (batched callers run
 * their batches on it instead). Against the path the call takes without it
 * (bench/gemm/bench_tiny.c, one thread, Zen 4 with AVX-512, a busy host):
 * 16x16x16 0.45x, with B transposed 0.63x, 16x16x64 0.64x, 16x64x16 0.98x,
 * 32x32x32 0.95-1.06x, 64x64x16 and 64x64x64 1.05x: hence up to 32^3. */
static bool tiny(const kiln_sgemm_args *g, const kiln_gemm_kernel *kern, const float *bp) {
  /* Few rows read B about once: copying it first costs as much as the
   * product, and the small-M path reads it in place (greedy_loop's
   * GEMVs: 17% slower through here). */
  if (bp || !kern->tiny || g->m <= g_small_m_max || g->k > KILN_GEMM_TINY_K || g->n > KILN_GEMM_TINY_NV * kern->tiny_w ||
      (double)g->m * (double)g->n * (double)g->k > (double)g_tiny_max)
    return false;
  int w = kern->tiny_w, nv = (int)ceil_div(g->n, w);
  float b[KILN_GEMM_TINY_K * KILN_GEMM_TINY_NV * 16] __attribute__((aligned(64)));
  if ((int64_t)nv * w * g->k > (int64_t)(sizeof b / sizeof *b)) return false;
  for (int64_t p = 0; p < g->k; p++) {
    float *row = b + p * nv * w;
    if (g->trans_b)
      for (int64_t j = 0; j < g->n; j++) row[j] = g->b[j * g->ldb + p];
    else
      memcpy(row, g->b + p * g->ldb, (size_t)g->n * sizeof(float));
    for (int64_t j = g->n; j < (int64_t)nv * w; j++) row[j] = 0.0f;
  }
  kiln_gemm_store st = {.alpha = g->alpha, .beta = g->beta};
  if (g->bias && g->bias_axis == KILN_GEMM_BIAS_ROW) st.bias_row = g->bias;
  if (g->bias && g->bias_axis == KILN_GEMM_BIAS_COL) st.bias_col = g->bias;
  kern->tiny(g->m, g->n, g->k, g->a, g->trans_a ? 1 : g->lda, g->trans_a ? g->lda : 1, b, nv, g->c, g->ldc, &st);
  if (g->epilogue) g->epilogue(g->epilogue_ctx, g->c, g->ldc, 0, 0, g->m, g->n);
  return true;
}

/* ---- small M: stream B once, A read in place ----------------------------- */

typedef struct small_job {
  const kiln_sgemm_args *g;
  const kiln_gemm_kernel *kern;
  const float *a; /* contiguous along k: row i at a + i*rsa */
  int64_t rsa;
  const float *bp; /* packed B data, or NULL */
  int64_t unit;    /* columns per task index */
} small_job;

static void small_task(void *ctx, int64_t begin, int64_t end, int thread) {
  const small_job *job = ctx;
  const kiln_sgemm_args *g = job->g;
  int64_t n0 = begin * job->unit, n1 = min64(end * job->unit, g->n);
  if (n1 <= n0) return;
  kiln_gemm_store st = {.alpha = g->alpha, .beta = g->beta};
  if (g->bias && g->bias_axis == KILN_GEMM_BIAS_COL) st.bias_col = g->bias + n0;
  /* The kernels take up to KILN_GEMM_SMALL_M rows; each group streams B once. */
  for (int64_t i0 = 0; i0 < g->m; i0 += KILN_GEMM_SMALL_M) {
    int64_t mi = min64(KILN_GEMM_SMALL_M, g->m - i0);
    const float *a = job->a + i0 * job->rsa;
    float *c = g->c + i0 * g->ldc + n0;
    st.bias_row = g->bias && g->bias_axis == KILN_GEMM_BIAS_ROW ? g->bias + i0 : NULL;
    if (job->bp)
      job->kern->small_packed(mi, n1 - n0, g->k, a, job->rsa, 1, job->bp + n0 * g->k, 0, c, g->ldc, &st);
    else if (g->trans_b)
      job->kern->small_dots(mi, n1 - n0, g->k, a, job->rsa, 1, g->b + n0 * g->ldb, g->ldb, c, g->ldc, &st);
    else
      job->kern->small_rows(mi, n1 - n0, g->k, a, job->rsa, 1, g->b + n0, g->ldb, c, g->ldc, &st);
  }
  if (g->epilogue) g->epilogue(g->epilogue_ctx, g->c + n0, g->ldc, 0, n0, g->m, n1 - n0);
}

bool kiln_sgemm_streams_b(int64_t m, bool trans_b) {
  const kiln_gemm_kernel *kern = kiln_gemm_active_kernel();
  return m >= 1 && m <= g_small_m_max && (trans_b ? kern->small_dots != NULL : kern->small_rows != NULL);
}

/* Returns false when this path does not apply or lacks memory. */
static bool small_m(kiln_threadpool *pool, const kiln_sgemm_args *g, const kiln_gemm_kernel *kern, const float *bp) {
  if (g->m > (bp ? g_small_m_packed_max : g_small_m_max)) return false;
  if (bp ? !kern->small_packed : g->trans_b ? !kern->small_dots : !kern->small_rows) return false;
  small_job job = {.g = g, .kern = kern, .bp = bp, .a = g->a, .rsa = g->lda};
  float *acopy = NULL;
  if (g->trans_a && g->m > 1) {
    acopy = g_alloc_failure ? NULL : malloc((size_t)(g->m * g->k) * sizeof(float));
    if (!acopy) return false;
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t p = 0; p < g->k; p++) acopy[i * g->k + p] = g->a[p * g->lda + i];
    job.a = acopy;
    job.rsa = g->k;
  } else if (g->trans_a) {
    if (g->lda != 1) {
      acopy = g_alloc_failure ? NULL : malloc((size_t)g->k * sizeof(float));
      if (!acopy) return false;
      for (int64_t p = 0; p < g->k; p++) acopy[p] = g->a[p * g->lda];
      job.a = acopy;
    }
    job.rsa = g->k;
  }
  /* Column units: whole strips of packed B; enough columns per thread that
   * each streams long runs of B's rows. Below 64K multiply-adds one thread:
   * waking the pool costs more (greedy_loop's 1 x 32 x 32 GEMVs split over
   * two threads made its run without the JIT 2x its compiled one). */
  int threads = (double)g->m * (double)g->n * (double)g->k < 65536.0 ? 1 : pool_threads(pool);
  int64_t unit = bp ? kern->nr : 16;
  int64_t units = ceil_div(g->n, unit);
  int64_t per = ceil_div(units, threads);
  job.unit = unit * per;
  run_parallel(pool, ceil_div(g->n, job.unit), 1, small_task, &job);
  free(acopy);
  return true;
}

/* ---- the blocked path ---------------------------------------------------- */

typedef struct block_job {
  const kiln_sgemm_args *g;
  const kiln_gemm_kernel *kern;
  int64_t mc, kc;
  /* the current panel: columns [j0, j0+nb), k-slices [p_begin, p_end) */
  int64_t j0, nb;
  int64_t p_begin, p_end;
  /* B of the panel: strip s, step p at b_panel + s*strip_stride + p*bs,
   * where p counts from 0 (b_full_k) or from the slice's start. */
  const float *b_panel;
  int64_t strip_stride, bs;
  bool b_full_k;
  bool direct_a, direct_b; /* read A / B in place instead of packing */
  bool local_pack_b;       /* direct_b: each thread packs each micro-panel it uses */
  /* work units: parts row ranges x tn strip ranges, claimed through
   * next_unit; rows split evenly (on 4 rows) or on whole panels */
  int parts, tn;
  bool parts_on_panels;
  int64_t next_unit;
  /* per pool thread: an MC x KC buffer for A and a KC x NR one for B's
   * partial last strip (direct_b) */
  float *bufs;
  int64_t buf_floats;
  int n_bufs;
  /* B packing phase */
  float *b_buf;
  int64_t pack_p0, pack_kb;
} block_job;

/* Work is handed out dynamically: each thread's call claims units from a
 * shared counter until none are left, so a thread that the OS deschedules
 * (the machine may be busy) delays the others by one unit at most. */
static int64_t claim(int64_t *counter) { return __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED); }

#define PACK_UNIT_STRIPS 8

static void pack_b_task(void *ctx, int64_t begin, int64_t end, int thread) {
  block_job *job = ctx;
  const kiln_sgemm_args *g = job->g;
  int nr = job->kern->nr;
  int64_t strips = ceil_div(job->nb, nr);
  for (int64_t u; (u = claim(&job->next_unit)) * PACK_UNIT_STRIPS < strips;) {
    int64_t s0 = u * PACK_UNIT_STRIPS, s1 = min64(s0 + PACK_UNIT_STRIPS, strips);
    int64_t j = s0 * nr, nb = min64(s1 * nr, job->nb) - j;
    job->kern->pack_b(g->trans_b, g->b, g->ldb, job->pack_p0, job->pack_kb, job->j0 + j, nb, nr,
                      job->b_buf + s0 * job->strip_stride, job->strip_stride);
  }
}

/* Rows [i0,i1) x strips [s0,s1) of the current panel, k-slices
 * [p_begin, p_end). Without buffers (abuf NULL) A is read in place and B's
 * last strip must not need packing. */
static void block_compute(const block_job *job, int64_t i0, int64_t i1, int64_t s0, int64_t s1, float *abuf,
                          float *btail) {
  const kiln_sgemm_args *g = job->g;
  const kiln_gemm_kernel *kern = job->kern;
  const int mr = kern->mr, nr = kern->nr;
  const int64_t strips_per_epi = KILN_GEMM_EPILOGUE_COLS / nr > 0 ? KILN_GEMM_EPILOGUE_COLS / nr : 1;
  const bool direct = job->direct_a || !abuf;
  for (int64_t ic = i0; ic < i1; ic += job->mc) {
    int64_t mb = min64(job->mc, i1 - ic);
    for (int64_t p0 = job->p_begin; p0 < job->p_end; p0 += job->kc) {
      int64_t kb = min64(job->kc, g->k - p0);
      bool first = p0 == 0, last = p0 + kb >= g->k;
      /* A's panel ir starts at a + ir * a_step, element (i, p) at [i*rsa + p*csa]. */
      const float *a;
      int64_t rsa, csa, a_step;
      if (!direct) {
        kern->pack_a(g->trans_a, g->a, g->lda, ic, mb, p0, kb, mr, abuf);
        a = abuf, rsa = 1, csa = mr, a_step = kb;
      } else if (g->trans_a) {
        a = g->a + p0 * g->lda + ic, rsa = 1, csa = g->lda, a_step = 1;
      } else {
        a = g->a + ic * g->lda + p0, rsa = g->lda, csa = 1, a_step = g->lda;
      }
      kiln_gemm_store st = {.alpha = g->alpha, .beta = first ? g->beta : 1.0f};
      const float *bias_row = first && g->bias && g->bias_axis == KILN_GEMM_BIAS_ROW ? g->bias + ic : NULL;
      const float *bias_col = first && g->bias && g->bias_axis == KILN_GEMM_BIAS_COL ? g->bias + job->j0 : NULL;
      const float *bslice = job->b_panel + (job->b_full_k ? p0 * job->bs : 0);
      for (int64_t se = s0; se < s1; se += strips_per_epi) {
        int64_t se1 = min64(se + strips_per_epi, s1);
        for (int64_t s = se; s < se1; s++) {
          int64_t jl = s * nr; /* column within the panel */
          int nrr = (int)min64(nr, job->nb - jl);
          const float *bp = bslice + s * job->strip_stride;
          int64_t bs = job->bs;
          /* B read in place: this thread packs the micro-panel for itself
           * when several panels of A will use it (so they stream it from
           * L1, free of the cache-set conflicts of B's rows) and always for
           * the partial last strip (which needs padding). Kernels that can
           * do it copy B while the first panel reads it. */
          bool copy_in_first = false;
          if (job->direct_b && btail) {
            if (nrr < nr || (job->local_pack_b && mb > mr && !kern->copies_b)) {
              kern->pack_b(false, g->b, g->ldb, p0, kb, job->j0 + jl, nrr, nr, btail, kb * nr);
              bp = btail, bs = nr;
            } else if (job->local_pack_b && mb > mr) {
              copy_in_first = true;
            }
          }
          st.bias_col = bias_col ? bias_col + jl : NULL;
          for (int64_t ir = 0; ir < mb; ir += mr) {
            int mrr = (int)min64(mr, mb - ir);
            st.bias_row = bias_row ? bias_row + ir : NULL;
            st.b_copy = copy_in_first && ir == 0 ? btail : NULL;
            kern->micro(kb, a + ir * a_step, rsa, csa, bp, bs, g->c + (ic + ir) * g->ldc + job->j0 + jl, g->ldc,
                        mrr, nrr, &st);
            if (st.b_copy) bp = btail, bs = nr;
          }
        }
        if (last && g->epilogue) {
          int64_t jl = se * nr, nbe = min64(se1 * nr, job->nb) - jl;
          g->epilogue(g->epilogue_ctx, g->c + ic * g->ldc + job->j0 + jl, g->ldc, ic, job->j0 + jl, mb, nbe);
        }
      }
    }
  }
}

/* Start of row range t of n: even shares, on multiples of 4 rows. Each
 * share is whole MR-high panels plus one partial panel, which the kernel
 * runs at full speed from 4 rows on. */
static int64_t row_split(int64_t m, int64_t n, int64_t t) {
  if (t >= n) return m;
  return min64(m, (m * t / n + 2) / 4 * 4);
}

/* Cycles per k-step of a range of rows: a partial panel of r rows costs like
 * max(r, 4) (below that the FMA latency dominates). */
static int64_t rows_cost(int64_t rows, int mr) {
  int64_t rest = rows % mr;
  return rows / mr * mr + (rest ? max64(rest, 4) : 0);
}

/* Strip s of a direct_b panel (all of K) for rows [i0,i1), unblocked: for
 * when no buffer could be had to pad B's partial last strip. */
static void partial_strip_unbuffered(const block_job *job, int64_t i0, int64_t i1, int64_t s) {
  const kiln_sgemm_args *g = job->g;
  int64_t j0 = job->j0 + s * job->kern->nr, cols = job->j0 + job->nb - j0;
  for (int64_t i = i0; i < i1; i++)
    for (int64_t j = j0; j < j0 + cols; j++) {
      float acc = 0.0f;
      for (int64_t p = 0; p < g->k; p++) acc += op_a(g, i, p) * g->b[p * g->ldb + j];
      float *c = g->c + i * g->ldc + j;
      float v = g->alpha * acc;
      if (g->bias && g->bias_axis == KILN_GEMM_BIAS_ROW) v += g->bias[i];
      if (g->bias && g->bias_axis == KILN_GEMM_BIAS_COL) v += g->bias[j];
      if (g->beta != 0.0f) v += g->beta * *c;
      *c = v;
    }
  if (g->epilogue) g->epilogue(g->epilogue_ctx, g->c + i0 * g->ldc + j0, g->ldc, i0, j0, i1 - i0, cols);
}

/* First row of row part t of the job's parts. */
static int64_t part_row(const block_job *job, int64_t t) {
  const kiln_sgemm_args *g = job->g;
  if (!job->parts_on_panels) return row_split(g->m, job->parts, t);
  int64_t panels = ceil_div(g->m, job->kern->mr);
  return min64(g->m, panels * t / job->parts * job->kern->mr);
}

static void compute_task(void *ctx, int64_t begin, int64_t end, int thread) {
  block_job *job = ctx;
  int nr = job->kern->nr;
  int64_t strips = ceil_div(job->nb, nr);
  /* A nested call (kiln_sgemm inside another pool's loop) may run with a
   * thread index beyond this pool's size: it gets its own buffers, or with
   * none reads A in place and computes B's last strip without padding. */
  float *own = NULL, *buf = NULL;
  if (thread >= 0 && thread < job->n_bufs) buf = job->bufs + (int64_t)thread * job->buf_floats;
  else if (!g_alloc_failure) buf = own = aligned_buffer((size_t)job->buf_floats * sizeof(float));
  float *abuf = buf, *btail = buf ? buf + job->buf_floats - job->kc * nr : NULL;
  for (int64_t t; (t = claim(&job->next_unit)) < (int64_t)job->parts * job->tn;) {
    int64_t ti = t / job->tn, tj = t % job->tn;
    int64_t i0 = part_row(job, ti), i1 = part_row(job, ti + 1);
    int64_t s0 = strips * tj / job->tn, s1 = strips * (tj + 1) / job->tn;
    if (i0 >= i1 || s0 >= s1) continue;
    if (!btail && job->direct_b && s1 == strips && job->nb % nr) {
      /* No buffer for the partial strip: the full strips as usual, the last
       * one through a job that packs nothing and reads B's columns with
       * the unblocked loop. */
      if (s1 - 1 > s0) block_compute(job, i0, i1, s0, s1 - 1, NULL, NULL);
      partial_strip_unbuffered(job, i0, i1, s1 - 1);
      continue;
    }
    block_compute(job, i0, i1, s0, s1, abuf, btail);
  }
  free(own);
}

/* Picks tm x tn = threads minimizing the estimated time of the busiest
 * thread: its share of the micro-kernel work (cycles per k step: rows x
 * strips) plus reading its A rows (all of them if columns are split) and,
 * when B is read in place, its columns of B (all of them if rows are
 * split; from memory, with poorer prefetching, hence the higher cost). */
static void choose_grid(int threads, int64_t m, int64_t n, int64_t k, int mr, int64_t strips, bool direct_b, int *tm,
                        int *tn) {
  double best = -1;
  for (int a = 1; a <= threads; a++) {
    if (threads % a) continue;
    int b = threads / a;
    int64_t worst = 0;
    for (int t = 0; t < a; t++) worst = max64(worst, rows_cost(row_split(m, a, t + 1) - row_split(m, a, t), mr));
    double work = (double)worst * (double)ceil_div(strips, b) * (double)k;
    work += 0.25 * (double)ceil_div(m, a) * (double)k;
    if (direct_b) work += 0.5 * (double)k * (double)ceil_div(n, b);
    if (best < 0 || work < best) {
      best = work;
      *tm = a;
      *tn = b;
    }
  }
}

static void blocking(const kiln_gemm_kernel *kern, int64_t m, int64_t n, int64_t k, int64_t *mc, int64_t *kc,
                     int64_t *nc) {
  const kiln_cpu_features *f = kiln_cpu_features_get();
  int64_t l1 = f->l1d_bytes > 0 ? f->l1d_bytes : 32 * 1024;
  int64_t l2 = f->l2_bytes > 0 ? f->l2_bytes : 512 * 1024;
  /* KC: a KC x NR micro-panel of B about fills L1d (the kernel streams A
   * past it with prefetches; a deeper KC means fewer passes over C). */
  int64_t kc_max = g_kc > 0 ? g_kc : max64(64, l1 / (kern->nr * 4) / 8 * 8);
  /* Balance the k-slices so the last one is not a sliver. */
  int64_t slices = ceil_div(k, kc_max);
  *kc = min64(k, round_up(ceil_div(k, slices), 4));
  /* MC: an MC x KC block of A fills about 1/4 of L2. */
  int64_t mc_max = g_mc > 0 ? g_mc : max64(kern->mr, (l2 / 4) / (*kc * 4) / kern->mr * kern->mr);
  int64_t blocks = ceil_div(m, mc_max);
  *mc = round_up(ceil_div(m, blocks), kern->mr);
  *nc = g_nc > 0 ? round_up(g_nc, kern->nr) : round_up(min64(n, 4096), kern->nr);
}

static void blocked(kiln_threadpool *pool, const kiln_sgemm_args *g, const kiln_gemm_kernel *kern,
                    const float *bp) {
  const int mr = kern->mr, nr = kern->nr;
  int threads = pool_threads(pool);
  int64_t mc, kc, nc;
  blocking(kern, g->m, g->n, g->k, &mc, &kc, &nc);
  block_job job = {.g = g, .kern = kern, .mc = mc, .kc = kc};
  /* A row-major B needs no shared packing phase when each thread meets
   * each of its micro-panels in one block of rows only (or B is small
   * enough to stay in L2): the thread reads B in place and packs each
   * micro-panel for itself while the first panel of A uses it. */
  const kiln_cpu_features *cpu = kiln_cpu_features_get();
  int64_t l2 = cpu->l2_bytes > 0 ? cpu->l2_bytes : 512 * 1024;
  bool one_block = ceil_div(g->m, threads) <= mc;
  bool b_small = g->k * g->n * 4 <= l2 / 2;
  job.direct_b = !bp && !g->trans_b && (g_direct_b ? g_direct_b != 2 : one_block || b_small);
  job.local_pack_b = g_direct_b != 1;
  job.buf_floats = round_up(mc * kc, 16) + kc * nr;
  /* With several threads, B is packed for all of K at once (up to
   * KILN_GEMM_FULL_K_BYTES; narrower panels beyond), so each panel takes one
   * packing phase and one compute phase: no barrier between k-slices, and
   * the compute phase's pieces are independent (a thread that the OS
   * deschedules holds up only the piece it has claimed). */
  bool full_k = false;
  if (!bp && !job.direct_b && threads > 1 && !g_no_full_k) {
    int64_t nc_full = KILN_GEMM_FULL_K_BYTES / (g->k * (int64_t)sizeof(float)) / nr * nr;
    if (nc_full >= min64(round_up(g->n, nr), KILN_GEMM_FULL_K_MIN_COLS)) {
      full_k = true;
      nc = min64(nc, nc_full);
    }
  }
  size_t bufs_bytes = (size_t)(job.buf_floats * threads) * sizeof(float);
  size_t b_bytes = bp || job.direct_b ? 0 : (size_t)((full_k ? g->k : kc) * nc) * sizeof(float);
  char *mem = aligned_buffer(bufs_bytes + b_bytes);
  if (!mem) {
    rows_job rj = {.g = g, .bp = bp, .nr = nr};
    run_parallel(pool, g->m, 1, rows_task, &rj);
    return;
  }
  job.bufs = (float *)mem;
  job.n_bufs = g_alloc_failure ? 0 : threads;
  job.b_buf = (float *)(mem + bufs_bytes);
  for (int64_t j0 = 0; j0 < g->n; j0 += nc) {
    job.j0 = j0;
    job.nb = min64(nc, g->n - j0);
    int64_t strips = ceil_div(job.nb, nr);
    int tm = 1, tn = 1;
    choose_grid(threads, g->m, job.nb, g->k, mr, strips, job.direct_b, &tm, &tn);
    job.tn = tn;
    /* With several threads, finer row parts (whole panels) let them even
     * out; not with direct_b, where each part re-reads B. */
    int64_t q = threads > 1 && !job.direct_b ? min64(KILN_GEMM_PARTS_PER_THREAD, g->m / tm / KILN_GEMM_PART_ROWS) : 1;
    job.parts = q > 1 ? (int)(tm * q) : tm;
    job.parts_on_panels = q > 1;
    /* Packing A pays off when each panel of it meets many strips, or when
     * A's rows (or columns) are a multiple of 4 KiB apart, so that a panel
     * read in place would crowd into a few L1 sets. */
    int64_t strips_per_thread = ceil_div(strips, tn);
    job.direct_a = g_direct_a ? g_direct_a == 1
                              : strips_per_thread <= KILN_GEMM_DIRECT_A_STRIPS ||
                                    (strips_per_thread <= KILN_GEMM_DIRECT_A_STRIPS_MAX && (g->lda * 4) % 4096 != 0);
    if (full_k) {
      job.pack_p0 = 0;
      job.pack_kb = g->k;
      job.strip_stride = g->k * nr;
      job.next_unit = 0;
      run_parallel(pool, threads, 1, pack_b_task, &job);
    }
    if (bp || job.direct_b || full_k) {
      /* B needs no packing phase (or was packed for all of K): one parallel
       * region for the panel. */
      if (bp || full_k) {
        job.b_panel = bp ? bp + j0 * g->k : job.b_buf; /* j0 is a multiple of NR */
        job.strip_stride = g->k * nr;
        job.bs = nr;
      } else {
        job.b_panel = g->b + j0;
        job.strip_stride = nr;
        job.bs = g->ldb;
      }
      job.b_full_k = true;
      job.p_begin = 0;
      job.p_end = g->k;
      job.next_unit = 0;
      run_parallel(pool, threads, 1, compute_task, &job);
      continue;
    }
    for (int64_t p0 = 0; p0 < g->k; p0 += kc) {
      int64_t kb = min64(kc, g->k - p0);
      job.pack_p0 = p0;
      job.pack_kb = kb;
      job.strip_stride = kb * nr;
      job.bs = nr;
      job.next_unit = 0;
      run_parallel(pool, threads, 1, pack_b_task, &job);
      job.b_panel = job.b_buf;
      job.b_full_k = false;
      job.p_begin = p0;
      job.p_end = p0 + kb;
      job.next_unit = 0;
      run_parallel(pool, threads, 1, compute_task, &job);
    }
  }
  free(mem);
}

/* ---- public API ------------------------------------------------------- */

size_t kiln_sgemm_packed_b_size(int64_t k, int64_t n) {
  if (k < 0 || n < 0) return 0;
  const kiln_gemm_kernel *kern = kiln_gemm_active_kernel();
  int64_t floats;
  if (!kiln_mul_i64(round_up(n, kern->nr), k, &floats)) return 0;
  if (floats > ((int64_t)1 << 40)) return 0;
  return PACKED_B_HEADER + (size_t)floats * sizeof(float);
}

/* Writes packed's header; the kernel that packs. */
static const kiln_gemm_kernel *packed_b_begin(int64_t k, int64_t n, void *packed) {
  const kiln_gemm_kernel *kern = kiln_gemm_active_kernel();
  packed_b_header *h = packed;
  memset(h, 0, PACKED_B_HEADER);
  h->magic = PACKED_B_MAGIC;
  h->kernel_id = kern->id;
  h->nr = kern->nr;
  h->k = k;
  h->n = n;
  return kern;
}

void kiln_sgemm_pack_b(bool trans_b, int64_t k, int64_t n, const float *b, int64_t ldb, void *packed) {
  const kiln_gemm_kernel *kern = packed_b_begin(k, n, packed);
  float *data = (float *)((char *)packed + PACKED_B_HEADER);
  if (k > 0 && n > 0) kern->pack_b(trans_b, b, ldb, 0, k, 0, n, kern->nr, data, k * kern->nr);
}

void kiln_sgemm_pack_b_rows(int64_t k, int64_t n, int64_t p0, int64_t kb, const float *b, int64_t ldb, void *packed) {
  const kiln_gemm_kernel *kern = packed_b_begin(k, n, packed);
  float *data = (float *)((char *)packed + PACKED_B_HEADER);
  /* Row p of strip s lives at data + s * k * nr + p * nr. */
  if (kb > 0 && n > 0) kern->pack_b(false, b, ldb, 0, kb, 0, n, kern->nr, data + p0 * kern->nr, k * kern->nr);
}

void kiln_sgemm(kiln_threadpool *pool, const kiln_sgemm_args *g) {
  if (g->m <= 0 || g->n <= 0) return;
  const kiln_gemm_kernel *kern = kiln_gemm_active_kernel();
  const float *bp = NULL;
  if (g->packed_b) {
    const packed_b_header *h = g->packed_b;
    if (h->magic != PACKED_B_MAGIC || h->k != g->k || h->n < g->n) {
      /* Not packed for this shape: make the caller's bug visible. */
      for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) g->c[i * g->ldc + j] = NAN;
      return;
    }
    bp = (const float *)((const char *)g->packed_b + PACKED_B_HEADER);
    /* Packed by a different kernel (a test forced one): use that kernel. */
    if (h->kernel_id != kern->id) {
      const kiln_gemm_kernel *other = kernel_by_id(h->kernel_id);
      if (other) {
        kern = other;
      } else {
        rows_job rj = {.g = g, .bp = bp, .nr = h->nr};
        run_parallel(pool, g->m, 1, rows_task, &rj);
        return;
      }
    }
  }
  if (g->k <= 0 || g->alpha == 0.0f) {
    rows_job rj = {.g = g, .scale_only = true};
    run_parallel(pool, g->m, max64(1, 4096 / g->n), rows_task, &rj);
    return;
  }
  if (tiny(g, kern, bp) || small_m(pool, g, kern, bp)) return;
  blocked(pool, g, kern, bp);
}

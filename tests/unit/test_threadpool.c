/* The thread pool: every index runs exactly once for many sizes, grains and
 * thread counts; chunks respect the grain; a thread index is never used by
 * two calls at once; nested calls run serially; concurrent callers are
 * serialized; an idle pool sleeps. Dispatch latency is printed, not
 * asserted. Also the CPU feature and core-count queries. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "base/threadpool.h"

static int failures;
#define CHECK(cond, ...)                                \
  do {                                                  \
    if (!(cond)) {                                      \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);       \
      printf(__VA_ARGS__);                              \
      printf("\n");                                     \
      failures++;                                       \
    }                                                   \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- coverage ------------------------------------------------------------ */

#define MAX_N 20000
#define MAX_THREADS 16

typedef struct cover_ctx {
  int64_t n, grain;
  int size;
  _Atomic int hits[MAX_N];
  _Atomic int busy[MAX_THREADS]; /* a thread index in use by a call */
  _Atomic int calls;
  _Atomic int bad; /* bitmask of violated rules */
  _Atomic int64_t min_chunk;
} cover_ctx;

enum { BAD_THREAD = 1, BAD_OVERLAP = 2, BAD_RANGE = 4, BAD_ALIGN = 8 };

static void cover_fn(void *p, int64_t begin, int64_t end, int thread) {
  cover_ctx *c = p;
  if (thread < 0 || thread >= c->size) {
    atomic_fetch_or(&c->bad, BAD_THREAD);
    return;
  }
  if (atomic_exchange(&c->busy[thread], 1)) atomic_fetch_or(&c->bad, BAD_OVERLAP);
  if (begin < 0 || end > c->n || begin >= end) atomic_fetch_or(&c->bad, BAD_RANGE);
  if (begin % c->grain) atomic_fetch_or(&c->bad, BAD_ALIGN);
  for (int64_t i = begin; i < end && i < MAX_N; i++) atomic_fetch_add(&c->hits[i], 1);
  int64_t len = end - begin, cur = atomic_load(&c->min_chunk);
  while (len < cur && !atomic_compare_exchange_weak(&c->min_chunk, &cur, len)) {
  }
  atomic_fetch_add(&c->calls, 1);
  atomic_store(&c->busy[thread], 0);
}

static cover_ctx g_cover;
static bool g_expect_serial; /* the pool has no workers (forked child) */

static void check_cover(kiln_threadpool *pool, int64_t n, int64_t grain) {
  cover_ctx *c = &g_cover;
  memset(c, 0, sizeof *c);
  c->n = n;
  c->grain = grain < 1 ? 1 : grain;
  c->size = kiln_threadpool_size(pool);
  atomic_store(&c->min_chunk, INT64_MAX);
  kiln_parallel_for(pool, n, grain, cover_fn, c);
  int size = c->size;
  CHECK(!atomic_load(&c->bad), "threads=%d n=%lld grain=%lld: rule violations 0x%x", size, (long long)n,
        (long long)grain, atomic_load(&c->bad));
  for (int64_t i = 0; i < n; i++) {
    if (atomic_load(&c->hits[i]) != 1) {
      CHECK(0, "threads=%d n=%lld grain=%lld: index %lld ran %d times", size, (long long)n, (long long)grain,
            (long long)i, atomic_load(&c->hits[i]));
      break;
    }
  }
  if (n <= 0) {
    CHECK(atomic_load(&c->calls) == 0, "n=%lld: fn was called", (long long)n);
    return;
  }
  int64_t g = c->grain;
  int64_t expect_min = n < g ? n : g;
  CHECK(atomic_load(&c->min_chunk) >= expect_min, "threads=%d n=%lld grain=%lld: chunk of %lld < grain", size,
        (long long)n, (long long)g, (long long)atomic_load(&c->min_chunk));
  int64_t max_chunks = n / g < 1 ? 1 : n / g;
  int64_t expect_calls = g_expect_serial ? 1 : max_chunks < size ? max_chunks : size;
  CHECK(atomic_load(&c->calls) == expect_calls, "threads=%d n=%lld grain=%lld: %d calls, expected %lld", size,
        (long long)n, (long long)g, atomic_load(&c->calls), (long long)expect_calls);
}

static void test_coverage(void) {
  static const int threads[] = {1, 2, 3, 4, 7, 16};
  static const int64_t sizes[] = {0, 1, 2, 3, 5, 16, 63, 64, 65, 100, 1000, 4097, MAX_N};
  static const int64_t grains[] = {0, 1, 2, 3, 7, 16, 64, 1000, 100000};
  for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
    kiln_threadpool *pool = NULL;
    kiln_status_t st = kiln_threadpool_create(threads[t], &pool);
    CHECK(!st, "create(%d): %s", threads[t], kiln_status_message(st));
    if (st) {
      kiln_status_free(st);
      continue;
    }
    CHECK(kiln_threadpool_size(pool) == threads[t], "size");
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
      for (size_t g = 0; g < sizeof grains / sizeof *grains; g++) check_cover(pool, sizes[i], grains[g]);
    /* Workers asleep (no spinning): the caller may have to do everything. */
    kiln_threadpool_set_spin_us(pool, 0);
    for (int rep = 0; rep < 20; rep++) check_cover(pool, 1000 + rep, 10);
    kiln_threadpool_destroy(pool);
  }
  check_cover(NULL, 1000, 7); /* NULL pool: serial */
  CHECK(atomic_load(&g_cover.calls) == 1, "NULL pool: one call");
}

/* ---- per-thread partial sums (thread index exclusivity under load) -------- */

typedef struct sum_ctx {
  const int32_t *data;
  int64_t partial[MAX_THREADS * 8]; /* stride 8: no false sharing */
} sum_ctx;

static void sum_fn(void *p, int64_t begin, int64_t end, int thread) {
  sum_ctx *c = p;
  int64_t s = 0;
  for (int64_t i = begin; i < end; i++) s += c->data[i];
  c->partial[thread * 8] += s; /* races if two calls share a thread index */
}

static void test_partial_sums(void) {
  enum { N = 1 << 16 };
  static int32_t data[N];
  int64_t expect = 0;
  for (int i = 0; i < N; i++) data[i] = (i * 7919) % 1000 - 500, expect += data[i];
  kiln_threadpool *pool = NULL;
  kiln_status_t st = kiln_threadpool_create(4, &pool);
  CHECK(!st, "create");
  for (int rep = 0; rep < 300 && !st; rep++) {
    sum_ctx c = {data, {0}};
    kiln_parallel_for(pool, N, 1 + rep % 50, sum_fn, &c);
    int64_t total = 0;
    for (int t = 0; t < MAX_THREADS; t++) total += c.partial[t * 8];
    if (total != expect) {
      CHECK(0, "rep %d: sum %lld, expected %lld", rep, (long long)total, (long long)expect);
      break;
    }
  }
  kiln_threadpool_destroy(pool);
}

/* ---- nesting ---------------------------------------------------------------- */

typedef struct nest_ctx {
  kiln_threadpool *inner_pool;
  _Atomic int64_t inner_items;
  _Atomic int bad;
  int outer_thread; /* set per outer call through the inner ctx */
} nest_ctx;

typedef struct inner_ctx {
  nest_ctx *outer;
  int expect_thread;
  int calls;
} inner_ctx;

static void inner_fn(void *p, int64_t begin, int64_t end, int thread) {
  inner_ctx *c = p;
  c->calls++;
  if (thread != c->expect_thread) atomic_fetch_or(&c->outer->bad, 1);
  if (begin != 0 || end != 100) atomic_fetch_or(&c->outer->bad, 2);
  atomic_fetch_add(&c->outer->inner_items, end - begin);
}

static void outer_fn(void *p, int64_t begin, int64_t end, int thread) {
  nest_ctx *c = p;
  for (int64_t i = begin; i < end; i++) {
    inner_ctx ic = {c, thread, 0};
    kiln_parallel_for(c->inner_pool, 100, 1, inner_fn, &ic);
    if (ic.calls != 1) atomic_fetch_or(&c->bad, 4); /* nested: one serial call */
  }
}

/* An outer loop with a single chunk runs inline, so the inner loop may fan out. */
static void single_chunk_outer(void *p, int64_t begin, int64_t end, int thread) {
  kiln_threadpool *pool = p;
  check_cover(pool, 5000, 10);
}

static void test_nested(void) {
  kiln_threadpool *a = NULL, *b = NULL;
  kiln_status_t st = kiln_threadpool_create(4, &a);
  CHECK(!st, "create a");
  st = kiln_threadpool_create(3, &b);
  CHECK(!st, "create b");
  if (!a || !b) return;
  kiln_threadpool *inner[] = {a, b, NULL};
  for (int k = 0; k < 3; k++) {
    nest_ctx c = {inner[k], 0, 0, 0};
    kiln_parallel_for(a, 64, 1, outer_fn, &c);
    CHECK(!atomic_load(&c.bad), "nested (inner pool %d): violations 0x%x", k, atomic_load(&c.bad));
    CHECK(atomic_load(&c.inner_items) == 64 * 100, "nested: %lld inner items", (long long)atomic_load(&c.inner_items));
  }
  kiln_parallel_for(a, 1, 1, single_chunk_outer, a);
  kiln_threadpool_destroy(b);
  kiln_threadpool_destroy(a);
}

/* ---- two threads sharing one pool (serialized, still correct) ------------- */

typedef struct shared_ctx {
  kiln_threadpool *pool;
  _Atomic int errors;
} shared_ctx;

typedef struct count_ctx {
  _Atomic int64_t sum;
} count_ctx;

static void count_fn(void *p, int64_t begin, int64_t end, int thread) {
  count_ctx *c = p;
  int64_t s = 0;
  for (int64_t i = begin; i < end; i++) s += i;
  atomic_fetch_add(&c->sum, s);
}

static void *hammer(void *p) {
  shared_ctx *s = p;
  for (int rep = 0; rep < 2000; rep++) {
    count_ctx c = {0};
    int64_t n = 100 + rep % 300;
    kiln_parallel_for(s->pool, n, 8, count_fn, &c);
    if (atomic_load(&c.sum) != n * (n - 1) / 2) atomic_fetch_add(&s->errors, 1);
  }
  return NULL;
}

static void test_concurrent_callers(void) {
  shared_ctx s = {NULL, 0};
  kiln_status_t st = kiln_threadpool_create(3, &s.pool);
  CHECK(!st, "create");
  if (st) return;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, hammer, &s);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  CHECK(atomic_load(&s.errors) == 0, "concurrent callers: %d wrong sums", atomic_load(&s.errors));
  kiln_threadpool_destroy(s.pool);
}

/* ---- lifecycle, errors, idle CPU, latency --------------------------------- */

static void test_create_destroy(void) {
  kiln_threadpool *pool = (kiln_threadpool *)1;
  kiln_status_t st = kiln_threadpool_create(0, &pool);
  CHECK(st && !pool, "0 threads must fail");
  kiln_status_free(st);
  st = kiln_threadpool_create(KILN_THREADPOOL_MAX_THREADS + 1, &pool);
  CHECK(st && !pool, "too many threads must fail");
  kiln_status_free(st);
  kiln_threadpool_destroy(NULL);
  CHECK(kiln_threadpool_size(NULL) == 1, "size(NULL)");
  for (int i = 0; i < 40; i++) {
    st = kiln_threadpool_create(1 + i % 5, &pool);
    CHECK(!st, "create %d", i);
    if (st) break;
    if (i % 2) check_cover(pool, 257, 3); /* sometimes destroy a never-used pool */
    kiln_threadpool_destroy(pool);
  }
}

static void nop_fn(void *p, int64_t begin, int64_t end, int thread) {
  _Atomic int64_t *count = p;
  atomic_fetch_add_explicit(count, end - begin, memory_order_relaxed);
}

static void test_idle_and_latency(void) {
  int cores = kiln_physical_cores();
  int n_threads = cores < 2 ? 2 : cores > 8 ? 8 : cores;
  kiln_threadpool *pool = NULL;
  kiln_status_t st = kiln_threadpool_create(n_threads, &pool);
  CHECK(!st, "create");
  if (st) return;
  _Atomic int64_t count = 0;
  enum { DISPATCHES = 100000 };
  kiln_parallel_for(pool, n_threads, 1, nop_fn, &count); /* wake everyone */
  double t0 = now_s();
  for (int i = 0; i < DISPATCHES; i++) kiln_parallel_for(pool, n_threads, 1, nop_fn, &count);
  double dt = now_s() - t0;
  CHECK(atomic_load(&count) == (int64_t)(DISPATCHES + 1) * n_threads, "dispatch count");
  printf("latency: %d tiny dispatches on %d threads: %.2f us each\n", DISPATCHES, n_threads, dt / DISPATCHES * 1e6);

  /* After the spin time an idle pool must sleep: almost no CPU. */
  usleep(20000);
  double c0 = cpu_s(), w0 = now_s();
  usleep(200000);
  double idle_cpu = cpu_s() - c0, idle_wall = now_s() - w0;
  printf("idle: %.1f ms CPU in %.0f ms wall with %d threads\n", idle_cpu * 1e3, idle_wall * 1e3, n_threads);
  CHECK(idle_cpu < 0.02, "idle pool used %.1f ms of CPU in %.0f ms", idle_cpu * 1e3, idle_wall * 1e3);

  /* From sleep, a dispatch still works (wake-up path), repeatedly. */
  for (int i = 0; i < 5; i++) {
    usleep(2000);
    check_cover(pool, 1000, 1);
  }
  kiln_threadpool_destroy(pool);
}

/* A child process inherits the pool without its workers: loops run
 * serially there, destroy does not wait for threads that do not exist. */
static void test_fork(void) {
  kiln_threadpool *pool = NULL;
  kiln_status_t st = kiln_threadpool_create(4, &pool);
  CHECK(!st, "create");
  if (st) return;
  check_cover(pool, 1000, 1);
  fflush(stdout); /* or the child would print our buffered output again */
  pid_t pid = fork();
  if (pid == 0) {
    int before = failures;
    g_expect_serial = true;
    check_cover(pool, 1000, 1);
    check_cover(pool, 7, 100);
    kiln_threadpool_destroy(pool);
    fflush(stdout);
    _exit(failures == before ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "pool in a forked child (status 0x%x)", status);
  check_cover(pool, 1000, 1); /* the parent's pool is unaffected */
  CHECK(atomic_load(&g_cover.calls) == 4, "parent still parallel");
  kiln_threadpool_destroy(pool);
}

static void test_cpu_queries(void) {
  const kiln_cpu_features *f = kiln_cpu_features_get();
  char flags[512];
  kiln_cpu_features_string(f, flags, sizeof flags);
  printf("cpu: %s '%s' [%s] L1d %lld KiB, L2 %lld KiB, L3 %lld KiB, line %d; %d physical cores, %d logical CPUs\n",
         f->arch, f->brand, flags, (long long)(f->l1d_bytes >> 10), (long long)(f->l2_bytes >> 10),
         (long long)(f->l3_bytes >> 10), f->cache_line_bytes, kiln_physical_cores(), kiln_logical_cpus());
  CHECK(f == kiln_cpu_features_get(), "features are detected once");
  CHECK(strlen(f->signature) == 64, "signature is a hex SHA-256");
  CHECK(kiln_physical_cores() >= 1 && kiln_physical_cores() <= kiln_logical_cpus(), "cores %d, cpus %d",
        kiln_physical_cores(), kiln_logical_cpus());
  /* Implications that must hold for usable features. */
  CHECK(!f->avx2 || f->avx, "avx2 without avx");
  CHECK(!f->avx512bw || f->avx512f, "avx512bw without avx512f");
  CHECK(!f->amx_bf16 || f->amx, "amx_bf16 without amx");
#if defined(__x86_64__)
  CHECK(f->l1d_bytes > 0 && f->l2_bytes > 0, "cache sizes unknown");
  CHECK(f->sse4_1 == (__builtin_cpu_supports("sse4.1") != 0), "sse4.1 disagrees with the compiler's runtime");
  CHECK(f->avx2 == (__builtin_cpu_supports("avx2") != 0), "avx2 disagrees with the compiler's runtime");
  CHECK(f->avx512f == (__builtin_cpu_supports("avx512f") != 0), "avx512f disagrees with the compiler's runtime");
#endif
}

int main(void) {
  test_cpu_queries();
  test_create_destroy();
  test_coverage();
  test_partial_sums();
  test_nested();
  test_concurrent_callers();
  test_fork();
  test_idle_and_latency();
  printf("%s (%d failures)\n", failures ? "FAIL" : "OK", failures);
  return failures != 0;
}

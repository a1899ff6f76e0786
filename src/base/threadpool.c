/* The thread pool: one dispatch word that workers watch and a completion
 * counter that the caller watches, each spun on briefly and then slept on
 * with a futex. See threadpool.h for the contract.
 *
 * Dispatch protocol
 *   The caller writes the job (fn, ctx, ranges) and publishes a new value of
 *   `word` = (sequence << 12) | T, T = number of chunks. Workers watch
 *   `word`; one whose index is >= T ignores the job without reading it. The
 *   others register in `active`, re-read `word` (if it moved on, the job is
 *   over: they back off unread), run their own chunk, then any chunk nobody
 *   has started, counting finished chunks in `chunks_done`. The caller runs
 *   chunk 0 (and steals likewise) and returns once `chunks_done` == T: it
 *   never waits for a worker that is still asleep if the others did its work.
 *   Before returning it "closes" the job by publishing a job nobody takes
 *   (T = 1); before writing the next job it waits for `active` to drain, so a
 *   late worker never reads job fields while they change.
 *   T == 0 in `word` tells workers to exit.
 *
 * Sleeping without lost wake-ups (Dekker style, all seq_cst): a worker
 *   increments `sleepers` and re-reads `word` before futex_wait; the caller
 *   stores `word` and then reads `sleepers`, waking only if someone sleeps.
 *   Likewise for the caller (`caller_waiting`) and whoever completes the
 *   count it waits for. A busy pool makes no system calls.
 */
#include "base/threadpool.h"

#include "base/common.h"
#include "base/cpu_features.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

/* KILN_THREADPOOL_NO_FUTEX forces the portable condition-variable path (to test it on Linux). */
#if defined(__linux__) && !defined(KILN_THREADPOOL_NO_FUTEX)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KILN_HAVE_FUTEX 1
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ volatile("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

#define CACHE_LINE 128 /* two lines: keeps adjacent-line prefetch from sharing */
#define WORD_TASK_BITS 12
#define WORD_TASK_MASK ((1u << WORD_TASK_BITS) - 1)
#define DEFAULT_SPIN_US 100
#define INITIAL_WORD ((1u << WORD_TASK_BITS) | 1u) /* a job nobody takes */

_Static_assert(KILN_THREADPOOL_MAX_THREADS <= (int)WORD_TASK_MASK, "task count must fit the dispatch word");

typedef struct claim_slot {
  alignas(CACHE_LINE) _Atomic uint64_t job_id; /* id of the last job whose chunk was taken */
} claim_slot;

typedef struct worker_arg {
  kiln_threadpool *pool;
  int index;
} worker_arg;

struct kiln_threadpool {
  /* Written by the caller per job, read by participating workers. */
  alignas(CACHE_LINE) kiln_parallel_fn fn;
  void *ctx;
  int64_t n, grain, units;
  int n_tasks;
  uint64_t job_id;

  int n_threads;
  unsigned fork_generation; /* g_fork_generation at creation */
  pthread_t *threads;       /* n_threads - 1 workers */
  worker_arg *args;
  claim_slot *claims; /* n_threads slots */
  _Atomic int spin_ns;
  pthread_mutex_t dispatch_lock; /* recursive: see kiln_parallel_for */

  alignas(CACHE_LINE) _Atomic uint32_t word;     /* futex: (sequence << 12) | n_tasks */
  alignas(CACHE_LINE) _Atomic uint32_t sleepers; /* workers blocked on `word` */
  alignas(CACHE_LINE) _Atomic uint32_t chunks_done; /* futex: chunks finished in this job */
  _Atomic uint32_t caller_waiting;
  alignas(CACHE_LINE) _Atomic uint32_t active; /* futex: workers inside the job */
  alignas(CACHE_LINE) _Atomic int n_claimed;   /* chunks taken in this job */

#if !KILN_HAVE_FUTEX
  pthread_mutex_t wait_lock;
  pthread_cond_t wait_cond;
#endif
};

/* Bumped in the child at each fork(): a pool created before the fork has no
 * workers in the child, which then runs its loops serially. */
static atomic_uint g_fork_generation;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { atomic_fetch_add_explicit(&g_fork_generation, 1, memory_order_relaxed); }
static void register_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

static bool pool_orphaned(const kiln_threadpool *pool) {
  return pool->fork_generation != atomic_load_explicit(&g_fork_generation, memory_order_relaxed);
}

/* What this thread is doing: inside a multi-chunk job of `pool` as `thread`. */
static _Thread_local kiln_threadpool *tls_job_pool;
static _Thread_local int tls_job_thread;

/* ---- waiting ------------------------------------------------------------ */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Blocks while *addr == expected (may return spuriously). */
static void wait_on(kiln_threadpool *pool, _Atomic uint32_t *addr, uint32_t expected) {
#if KILN_HAVE_FUTEX
  (void)pool;
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
#else
  pthread_mutex_lock(&pool->wait_lock);
  while (atomic_load(addr) == expected) pthread_cond_wait(&pool->wait_cond, &pool->wait_lock);
  pthread_mutex_unlock(&pool->wait_lock);
#endif
}

static void wake_all(kiln_threadpool *pool, _Atomic uint32_t *addr) {
#if KILN_HAVE_FUTEX
  (void)pool;
  syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
  (void)addr;
  pthread_mutex_lock(&pool->wait_lock);
  pthread_cond_broadcast(&pool->wait_cond);
  pthread_mutex_unlock(&pool->wait_lock);
#endif
}

/* Spinning threads give their CPU away every this many polls (about
 * 10 us): on a shared or oversubscribed host a worker and the thread it
 * waits for can land on one CPU, and a spinner that never yields holds it
 * for the scheduler's whole time slice (runs of a sub-millisecond model
 * then took 1-2 ms now and then at 2 threads). sched_yield returns at once
 * when nothing else wants the CPU. */
#define SPIN_YIELD_POLLS 256

/* Spins (up to the pool's spin time) while *addr == value; returns the
 * last value read. */
static uint32_t spin_while_equal(kiln_threadpool *pool, _Atomic uint32_t *addr, uint32_t value) {
  uint32_t v = atomic_load_explicit(addr, memory_order_acquire);
  int spin_ns = atomic_load_explicit(&pool->spin_ns, memory_order_relaxed);
  if (v != value || spin_ns <= 0) return v;
  int64_t deadline = now_ns() + spin_ns;
  for (int i = 1;; i++) {
    cpu_relax();
    v = atomic_load_explicit(addr, memory_order_acquire);
    if (v != value) return v;
    if ((i & 31) == 0 && now_ns() > deadline) return v;
    if (i % SPIN_YIELD_POLLS == 0) sched_yield();
  }
}

/* The caller waits until *counter == target; whoever makes it so wakes it
 * (see count_reached). */
static void caller_wait_for(kiln_threadpool *pool, _Atomic uint32_t *counter, uint32_t target) {
  int spin_ns = atomic_load_explicit(&pool->spin_ns, memory_order_relaxed);
  int64_t deadline = spin_ns > 0 ? now_ns() + spin_ns : 0;
  for (int i = 1; atomic_load_explicit(counter, memory_order_acquire) != target; i++) {
    if (spin_ns > 0 && ((i & 31) || now_ns() <= deadline)) {
      cpu_relax();
      if (i % SPIN_YIELD_POLLS == 0) sched_yield();
      continue;
    }
    atomic_store(&pool->caller_waiting, 1);
    uint32_t v;
    while ((v = atomic_load(counter)) != target) wait_on(pool, counter, v);
    atomic_store(&pool->caller_waiting, 0);
    return;
  }
}

static void count_reached(kiln_threadpool *pool, _Atomic uint32_t *counter) {
  if (atomic_load(&pool->caller_waiting)) wake_all(pool, counter);
}

/* ---- running chunks ------------------------------------------------------ */

/* Chunk t covers units [u0, u1) of `grain` items; the remainder units go to
 * the last chunks, so the last one (which may hold a partial unit) always
 * has at least `grain` items when n >= grain. */
static void run_chunk(const kiln_threadpool *pool, int t, int thread) {
  int64_t q = pool->units / pool->n_tasks, r = pool->units % pool->n_tasks;
  int64_t first_big = pool->n_tasks - r;
  int64_t u0 = t * q + (t > first_big ? t - first_big : 0);
  int64_t u1 = (t + 1) * q + (t + 1 > first_big ? t + 1 - first_big : 0);
  int64_t begin = u0 * pool->grain;
  int64_t end = u1 >= pool->units ? pool->n : u1 * pool->grain;
  pool->fn(pool->ctx, begin, end, thread);
}

static bool try_claim(kiln_threadpool *pool, int t) {
  _Atomic uint64_t *slot = &pool->claims[t].job_id;
  if (atomic_load_explicit(slot, memory_order_relaxed) == pool->job_id) return false;
  if (atomic_exchange_explicit(slot, pool->job_id, memory_order_acq_rel) == pool->job_id) return false;
  atomic_fetch_add_explicit(&pool->n_claimed, 1, memory_order_relaxed);
  return true;
}

static void run_claimed_chunk(kiln_threadpool *pool, int t, int thread) {
  run_chunk(pool, t, thread);
  if (atomic_fetch_add(&pool->chunks_done, 1) + 1 == (uint32_t)pool->n_tasks) count_reached(pool, &pool->chunks_done);
}

/* Own chunk first, then any chunk nobody has started. */
static void run_job(kiln_threadpool *pool, int thread) {
  int n_tasks = pool->n_tasks;
  if (thread < n_tasks && try_claim(pool, thread)) run_claimed_chunk(pool, thread, thread);
  for (int k = 1; k < n_tasks; k++) {
    if (atomic_load_explicit(&pool->n_claimed, memory_order_relaxed) >= n_tasks) break;
    int t = (thread + k) % n_tasks;
    if (try_claim(pool, t)) run_claimed_chunk(pool, t, thread);
  }
}

static void *worker_main(void *p) {
  worker_arg *arg = p;
  kiln_threadpool *pool = arg->pool;
  int index = arg->index;
  tls_job_pool = pool; /* a worker only ever runs jobs: nested calls are serial */
  tls_job_thread = index;
  /* The word as created, not as now: a stop (or job) published before this
   * thread got here must still be seen as a change. */
  uint32_t last = INITIAL_WORD;
  for (;;) {
    uint32_t w = spin_while_equal(pool, &pool->word, last);
    if (w == last) {
      atomic_fetch_add(&pool->sleepers, 1);
      while ((w = atomic_load(&pool->word)) == last) wait_on(pool, &pool->word, last);
      atomic_fetch_sub(&pool->sleepers, 1);
    }
    last = w;
    uint32_t n_tasks = w & WORD_TASK_MASK;
    if (n_tasks == 0) break;                  /* stop */
    if ((uint32_t)index >= n_tasks) continue; /* not needed for this job */
    atomic_fetch_add(&pool->active, 1);
    if (atomic_load(&pool->word) == w) run_job(pool, index); /* else: over, fields may change */
    if (atomic_fetch_sub(&pool->active, 1) == 1) count_reached(pool, &pool->active);
  }
  return NULL;
}

/* ---- public ---------------------------------------------------------------- */

static void publish(kiln_threadpool *pool, uint32_t n_tasks, bool wake) {
  uint32_t seq = (atomic_load_explicit(&pool->word, memory_order_relaxed) >> WORD_TASK_BITS) + 1;
  atomic_store(&pool->word, (seq << WORD_TASK_BITS) | n_tasks);
  if (wake && atomic_load(&pool->sleepers)) wake_all(pool, &pool->word);
}

static void stop_workers(kiln_threadpool *pool, int n_started) {
  publish(pool, 0, true);
  for (int i = 0; i < n_started; i++) pthread_join(pool->threads[i], NULL);
}

static void free_pool(kiln_threadpool *pool) {
  pthread_mutex_destroy(&pool->dispatch_lock);
#if !KILN_HAVE_FUTEX
  pthread_mutex_destroy(&pool->wait_lock);
  pthread_cond_destroy(&pool->wait_cond);
#endif
  free(pool->threads);
  free(pool->args);
  free(pool->claims);
  free(pool);
}

static int default_spin_ns(int n_threads) {
  const char *env = getenv("KILN_SPIN_US");
  if (env && *env) {
    long us = strtol(env, NULL, 10);
    if (us < 0) us = 0;
    if (us > 1000000) us = 1000000;
    return (int)us * 1000;
  }
  /* Spinning only helps if every thread has a CPU of its own. */
  if (n_threads > kiln_logical_cpus()) return 0;
  return DEFAULT_SPIN_US * 1000;
}

kiln_status_t kiln_threadpool_create(int n_threads, kiln_threadpool **out_pool) {
  *out_pool = NULL;
  if (n_threads < 1 || n_threads > KILN_THREADPOOL_MAX_THREADS)
    return kiln_error(KILN_INVALID_ARGUMENT, "thread pool: %d threads requested, expected 1..%d", n_threads,
                      KILN_THREADPOOL_MAX_THREADS);
  size_t pool_size = (sizeof(kiln_threadpool) + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
  kiln_threadpool *pool = aligned_alloc(CACHE_LINE, pool_size);
  if (!pool) return KILN_OOM();
  memset(pool, 0, sizeof *pool);
  pthread_once(&g_atfork_once, register_atfork);
  pool->n_threads = n_threads;
  pool->fork_generation = atomic_load(&g_fork_generation);
  pool->claims = aligned_alloc(CACHE_LINE, sizeof(claim_slot) * (size_t)n_threads);
  pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
  pool->args = calloc((size_t)n_threads, sizeof *pool->args);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&pool->dispatch_lock, &attr);
  pthread_mutexattr_destroy(&attr);
#if !KILN_HAVE_FUTEX
  pthread_mutex_init(&pool->wait_lock, NULL);
  pthread_cond_init(&pool->wait_cond, NULL);
#endif
  if (!pool->claims || !pool->threads || !pool->args) {
    free_pool(pool);
    return KILN_OOM();
  }
  for (int i = 0; i < n_threads; i++) atomic_init(&pool->claims[i].job_id, 0);
  atomic_init(&pool->spin_ns, default_spin_ns(n_threads));
  atomic_init(&pool->word, INITIAL_WORD);
  atomic_init(&pool->sleepers, 0);
  atomic_init(&pool->chunks_done, 0);
  atomic_init(&pool->caller_waiting, 0);
  atomic_init(&pool->active, 0);
  atomic_init(&pool->n_claimed, 0);

  /* Workers start with every signal blocked, so signals go to the
   * application's own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int started = 0, err = 0;
  for (; started < n_threads - 1; started++) {
    pool->args[started] = (worker_arg){pool, started + 1};
    err = pthread_create(&pool->threads[started], NULL, worker_main, &pool->args[started]);
    if (err) break;
#if defined(__GLIBC__)
    char name[32];
    snprintf(name, sizeof name, "kiln-pool-%d", started + 1);
    name[15] = '\0'; /* the kernel's limit */
    pthread_setname_np(pool->threads[started], name);
#endif
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err) {
    stop_workers(pool, started);
    free_pool(pool);
    return kiln_error(err == EAGAIN ? KILN_OUT_OF_MEMORY : KILN_INTERNAL,
                      "thread pool: could not start worker %d of %d: %s", started + 1, n_threads - 1, strerror(err));
  }
  *out_pool = pool;
  return NULL;
}

void kiln_threadpool_destroy(kiln_threadpool *pool) {
  if (!pool) return;
  if (pool_orphaned(pool)) { /* in a forked child: the workers do not exist here */
    free_pool(pool);
    return;
  }
  pthread_mutex_lock(&pool->dispatch_lock); /* let an in-flight loop finish */
  stop_workers(pool, pool->n_threads - 1);
  pthread_mutex_unlock(&pool->dispatch_lock);
  free_pool(pool);
}

int kiln_threadpool_size(const kiln_threadpool *pool) { return pool ? pool->n_threads : 1; }

void kiln_threadpool_set_spin_us(kiln_threadpool *pool, int spin_us) {
  if (!pool) return;
  if (spin_us < 0) spin_us = 0;
  if (spin_us > 1000000) spin_us = 1000000;
  atomic_store(&pool->spin_ns, spin_us * 1000);
}

void kiln_parallel_for(kiln_threadpool *pool, int64_t n, int64_t grain, kiln_parallel_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  /* Inside a multi-chunk loop (of any pool): run serially as that thread. */
  if (tls_job_pool) {
    fn(ctx, 0, n, tls_job_thread);
    return;
  }
  int64_t max_tasks = n / grain;
  int n_tasks = pool ? (int)KILN_MIN((int64_t)pool->n_threads, KILN_MAX(max_tasks, (int64_t)1)) : 1;
  if (n_tasks > 1 && pool_orphaned(pool)) n_tasks = 1;
  if (n_tasks == 1) {
    /* Inline. The lock is recursive, so a parallel_for inside fn on this
     * pool dispatches normally (the workers are idle). */
    bool lock = pool && !pool_orphaned(pool);
    if (lock) pthread_mutex_lock(&pool->dispatch_lock);
    fn(ctx, 0, n, 0);
    if (lock) pthread_mutex_unlock(&pool->dispatch_lock);
    return;
  }

  pthread_mutex_lock(&pool->dispatch_lock);
  /* Workers that saw the previous job late may still read its fields. */
  caller_wait_for(pool, &pool->active, 0);
  pool->fn = fn;
  pool->ctx = ctx;
  pool->n = n;
  pool->grain = grain;
  pool->units = n / grain + (n % grain != 0);
  pool->n_tasks = n_tasks;
  pool->job_id++;
  atomic_store_explicit(&pool->n_claimed, 0, memory_order_relaxed);
  atomic_store_explicit(&pool->chunks_done, 0, memory_order_relaxed);
  publish(pool, (uint32_t)n_tasks, true);

  tls_job_pool = pool;
  tls_job_thread = 0;
  run_job(pool, 0);
  tls_job_pool = NULL;

  caller_wait_for(pool, &pool->chunks_done, (uint32_t)n_tasks);
  publish(pool, 1, false); /* close: late workers back off */
  pthread_mutex_unlock(&pool->dispatch_lock);
}

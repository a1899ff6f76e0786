/* threadpool.h — persistent worker threads for data-parallel loops.
 *
 * A pool of n threads is the caller plus n-1 workers created once:
 *
 *   kiln_threadpool *pool = NULL;
 *   KILN_TRY(kiln_threadpool_create(kiln_physical_cores(), &pool));
 *   kiln_parallel_for(pool, rows, 16, scale_rows, &args);   // blocks until done
 *   kiln_threadpool_destroy(pool);
 *
 *   static void scale_rows(void *ctx, int64_t begin, int64_t end, int thread) {
 *     // rows [begin, end); `thread` in [0, size) indexes per-thread scratch
 *   }
 *
 * Work split: [0, n) is cut into T = min(size, max(1, n / grain)) contiguous
 * chunks whose boundaries are multiples of `grain`; every chunk has at least
 * `grain` items (unless n < grain: then one chunk of n). Chunk t is meant for
 * thread t (static, cache-friendly); a thread that finishes early runs chunks
 * whose owner has not started yet, so one descheduled thread does not stall
 * the loop. fn may therefore be called several times on one thread, always
 * with disjoint ranges, and never concurrently for the same `thread` index.
 * With T == 1 (small n, or a 1-thread pool) fn runs inline on the caller
 * with thread 0 and no synchronization at all, and parallel_for calls made
 * inside it may use the pool.
 *
 * Nested calls: kiln_parallel_for called from inside fn (of this or any
 * other pool) while a multi-chunk loop runs does not dispatch: it calls
 * fn(ctx, 0, n, thread) serially, where `thread` is the caller's index in
 * the pool whose loop it is inside (so per-thread scratch indexed by
 * `thread` stays private). Size such scratch by the outer pool.
 *
 * Waiting: idle workers spin for a short while (default 100 µs, so
 * back-to-back loops dispatch in about a microsecond), then sleep on a futex
 * (a condition variable off Linux); an idle pool uses no CPU. KILN_SPIN_US
 * overrides the spin time; a pool with more threads than the process has
 * CPUs does not spin.
 *
 * Thread safety: a pool is meant to be used by one thread at a time (one
 * session running). Concurrent kiln_parallel_for calls from different
 * threads are serialized by a lock (correct, never parallel with each
 * other). kiln_threadpool_destroy must not race with any other call on the
 * pool and must not be called from inside fn.
 *
 * fork(): in a child process a pool created by the parent has no workers;
 * its loops run serially on the caller and destroy only frees memory.
 *
 * Signals are blocked in the workers; fn must not call pthread_exit or
 * longjmp out.
 */
#ifndef KILN_BASE_THREADPOOL_H
#define KILN_BASE_THREADPOOL_H

#include "base/status.h"

#include <stdint.h>

/* At most this many threads per pool. */
#define KILN_THREADPOOL_MAX_THREADS 1024

typedef struct kiln_threadpool kiln_threadpool;

/* A pool of n_threads (1..KILN_THREADPOOL_MAX_THREADS) threads: the caller of
 * kiln_parallel_for and n_threads-1 workers started now. Destroy it with
 * kiln_threadpool_destroy. */
kiln_status_t kiln_threadpool_create(int n_threads, kiln_threadpool **out_pool);

/* Stops and joins the workers, frees the pool. NULL is ignored. */
void kiln_threadpool_destroy(kiln_threadpool *pool);

/* Number of threads (the caller included); 1 for NULL. */
int kiln_threadpool_size(const kiln_threadpool *pool);

/* How long (microseconds) idle threads spin before sleeping; 0 sleeps at once. */
void kiln_threadpool_set_spin_us(kiln_threadpool *pool, int spin_us);

typedef void (*kiln_parallel_fn)(void *ctx, int64_t begin, int64_t end, int thread);

/* Runs fn over [0, n) in chunks of >= grain on the pool's threads and the
 * caller; returns when all chunks are done. pool may be NULL (runs
 * fn(ctx, 0, n, 0) serially). n <= 0 calls nothing; grain < 1 means 1. */
void kiln_parallel_for(kiln_threadpool *pool, int64_t n, int64_t grain, kiln_parallel_fn fn, void *ctx);

#endif

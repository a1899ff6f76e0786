/* device_memory.h — what every device with its own memory needs to manage
 * it, written once: byte counts (parsing a cap from the environment,
 * printing sizes), free-range lists for suballocating large driver
 * allocations, and a process-wide cap on what a device kind takes from its
 * driver (KILN_<DEVICE>_MEMORY_LIMIT, like ONNX Runtime's gpu_mem_limit).
 *
 * Why suballocate: drivers cap the number of allocations and make each one
 * slow, while a model has thousands of tensors; a device allocates a few
 * large blocks and hands out (block, offset, size) ranges.
 */
#ifndef KILN_RUNTIME_DEVICE_MEMORY_H
#define KILN_RUNTIME_DEVICE_MEMORY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/* "512 bytes", "1.5 MiB": into buf, which it returns. */
const char *kiln_format_bytes(uint64_t bytes, char buf[32]);
/* Parses "N", "NK", "NM", "NG", "NT" (optionally "KB"/"KiB"...); false if malformed. */
bool kiln_parse_bytes(const char *s, uint64_t *out);

/* The free ranges of one block, sorted by offset, never adjacent. */
typedef struct kiln_free_range {
  uint64_t offset, size;
} kiln_free_range;

typedef struct kiln_free_ranges {
  kiln_free_range *r; /* owned */
  int n, cap;
} kiln_free_ranges;

/* One free range covering [0, size). false when out of host memory. */
bool kiln_free_ranges_init(kiln_free_ranges *f, uint64_t size);
void kiln_free_ranges_free(kiln_free_ranges *f);
/* The index of the smallest range holding `size`, or -1. */
int kiln_free_ranges_best_fit(const kiln_free_ranges *f, uint64_t size);
/* Takes `size` bytes from the front of range i; returns their offset. */
uint64_t kiln_free_ranges_take(kiln_free_ranges *f, int i, uint64_t size);
/* Returns [offset, offset + size), merging neighbours. false when out of
 * host memory (the range is then lost until the block dies: harmless). */
bool kiln_free_ranges_give(kiln_free_ranges *f, uint64_t offset, uint64_t size);
/* true when the block is one free range again. */
bool kiln_free_ranges_empty(const kiln_free_ranges *f, uint64_t block_size);

/* A process-wide cap on the device memory one device kind allocates, over
 * all its devices. Statically initialized with the device's name and the
 * variable: KILN_MEMORY_CAP("mygpu", "KILN_MYGPU_MEMORY_LIMIT"). */
typedef struct kiln_memory_cap {
  const char *device; /* the device kind: starts the messages */
  const char *env;    /* the variable holding the cap */
  pthread_mutex_t lock;
  uint64_t limit;     /* 0: no cap */
  uint64_t used;      /* block bytes allocated now */
} kiln_memory_cap;

#define KILN_MEMORY_CAP(device, env) {device, env, PTHREAD_MUTEX_INITIALIZER, 0, 0}

/* Reads the variable (unset, empty or 0: no cap); a malformed value is an
 * error naming it. Called when a device context is created. */
kiln_status_t kiln_memory_cap_init(kiln_memory_cap *cap);
/* Takes *size bytes from the budget before the block is allocated (so two
 * contexts cannot both pass the cap). Under a cap, a shared block shrinks
 * to what is left, a multiple of align, when that still holds `requested`.
 * Error: KILN_OUT_OF_MEMORY, worded as for a real out-of-memory. */
kiln_status_t kiln_memory_cap_reserve(kiln_memory_cap *cap, uint64_t *size, uint64_t requested, bool dedicated,
                                      uint64_t align);
void kiln_memory_cap_release(kiln_memory_cap *cap, uint64_t size);

/* A pool of driver allocations ("blocks") of block_bytes each, handed out
 * best-fit in `align`-sized ranges; a request over half a block gets a
 * dedicated block, freed with it; one empty shared block is kept as a
 * spare. Blocks count against `cap`. The device supplies how a block is
 * made and destroyed; the caller serializes every call (the device's lock).
 * A device buffer is then (block, offset). */
typedef struct kiln_pool_block {
  void *handle;  /* the driver's allocation (a cl_mem, a CUdeviceptr...): the device's */
  uint64_t size;
  bool dedicated;
  kiln_free_ranges free;  /* owned */
  struct kiln_pool_block *next;
} kiln_pool_block;

typedef struct kiln_block_pool {
  kiln_memory_cap *cap;       /* borrowed; static in the device */
  uint64_t block_bytes;       /* the size of a shared block */
  uint64_t align;             /* every range's alignment and size rounding */
  uint64_t max_alloc;         /* the driver's largest allocation (0: no limit) */
  /* Makes a block of `size` bytes (`requested` is what the caller asked
   * for, for the message) into *out_handle; an error is the driver's
   * out-of-memory worded for the user. */
  kiln_status_t (*create)(void *user, uint64_t size, uint64_t requested, void **out_handle);
  void (*destroy)(void *user, void *handle);
  void *user;
  kiln_pool_block *blocks;    /* owned */
} kiln_block_pool;

/* Takes `bytes` (rounded up to align; 0 counts as 1). */
kiln_status_t kiln_block_pool_take(kiln_block_pool *pool, uint64_t bytes, kiln_pool_block **out_block,
                                   uint64_t *out_offset, uint64_t *out_size);
void kiln_block_pool_give(kiln_block_pool *pool, kiln_pool_block *block, uint64_t offset, uint64_t size);
/* Destroys every block (the device is shutting down). */
void kiln_block_pool_release_all(kiln_block_pool *pool);

#endif

/* cu_device.c — the CUDA provider and the vtable's runtime half.
 *
 * One stream per device (non-blocking, in the device's primary context),
 * shared by every session on it: CUDA keeps the stream's order, so the
 * executor's uploads, launches and readbacks need no other ordering.
 * Memory comes from a pool of 64 MiB cuMemAlloc blocks suballocated
 * best-fit (runtime/device_memory.h), as ONNX Runtime's arena does: a
 * cuMemAlloc synchronizes the device and costs far more than a tensor's
 * lifetime. Uploads and readbacks go through pinned staging buffers
 * (cuMemHostAlloc), so the copies are truly asynchronous and the caller's
 * memory may be pageable; the staging buffers are reused once the timeline
 * has passed them. Events are a ring of CUevents recorded on the stream,
 * numbered on a timeline.
 *
 * Environment:
 *   KILN_CUDA_MEMORY_LIMIT=N[K|M|G|T]  a cap on the device memory kiln
 *       allocates in this process (like ONNX Runtime's gpu_mem_limit).
 *   KILN_CUDA_LIBRARY   the driver to open (cu_loader.c).
 *   KILN_NVRTC          the NVRTC library to open (cuda_nvrtc.c).
 *   KILN_NVRTC_OPTIONS  more NVRTC options for every kernel (part of the
 *                       cubin cache key), e.g. -lineinfo. */
#include "devices/cuda/cu_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/files.h"
#include "base/hash.h"
#include "codegen/jit.h"
#include "devices/cuda/cuda_nvrtc.h"

#define CU_MAX_DEVICES 16
#define CU_BLOCK_BYTES ((uint64_t)64 << 20)
#define CU_ALIGN 256                          /* cuMemAlloc's own alignment; every vector width */
#define CU_STAGING_MIN ((size_t)64 << 10)     /* staging buffers come in powers of two from here */
#define CU_IDLE_STAGING_MAX ((size_t)256 << 20) /* pinned bytes kept for reuse */
#define CU_THREADS_PER_BLOCK 256
#define CU_CUBIN_MAGIC "KILNCUB1"
/* Bump when the NVRTC options or what kiln expects of a cubin change. */
#define CU_KEY_VERSION "kiln-cuda-cubin-1"

static cu_dev g_devs[CU_MAX_DEVICES];
static kiln_device g_devices[CU_MAX_DEVICES];
static kiln_memory_cap g_cap = KILN_MEMORY_CAP("cuda", "KILN_CUDA_MEMORY_LIMIT");

static cu_dev *dev_of(const kiln_device *dev) { return dev->impl; }

kiln_status_t cu_enter(cu_dev *d) { return cu_check(cu_api()->CtxSetCurrent(d->context), "cuCtxSetCurrent"); }

/* ---- memory ------------------------------------------------------------------------ */

static kiln_status_t block_create(void *user, uint64_t size, uint64_t requested, void **out) {
  cu_dev *d = user;
  CUdeviceptr ptr = 0;
  CUresult r = cu_api()->MemAlloc(&ptr, (size_t)size);
  if (r) {
    char want[32], have[32];
    kiln_status_t why = cu_check(r, "cuMemAlloc");
    kiln_status_t st = kiln_error(r == CU_ERROR_OUT_OF_MEMORY ? KILN_OUT_OF_MEMORY : KILN_DEVICE_ERROR,
                                  "cuda: out of device memory allocating %s on %s (the device has %s): %s",
                                  kiln_format_bytes(requested, want), d->props.name,
                                  kiln_format_bytes(d->props.memory_bytes, have), kiln_status_message(why));
    kiln_status_free(why);
    return st;
  }
  *out = (void *)(uintptr_t)ptr;
  return NULL;
}

static void block_destroy(void *user, void *handle) {
  (void)user;
  cu_api()->MemFree((CUdeviceptr)(uintptr_t)handle);
}

static kiln_status_t cu_buffer_alloc(kiln_device *dev, size_t bytes, kiln_device_buffer **out) {
  cu_dev *d = dev_of(dev);
  *out = NULL;
  kiln_device_buffer *buf = calloc(1, sizeof *buf);
  if (!buf) return KILN_OOM();
  pthread_mutex_lock(&d->lock);
  kiln_status_t st = cu_enter(d);
  if (!st) st = kiln_block_pool_take(&d->pool, bytes, &buf->block, &buf->offset, &buf->alloc);
  buf->bytes = bytes;
  pthread_mutex_unlock(&d->lock);
  if (st) {
    free(buf);
    return st;
  }
  *out = buf;
  return NULL;
}

static void cu_buffer_free(kiln_device *dev, kiln_device_buffer *buf) {
  if (!buf) return;
  cu_dev *d = dev_of(dev);
  pthread_mutex_lock(&d->lock);
  kiln_status_free(cu_enter(d));
  kiln_block_pool_give(&d->pool, buf->block, buf->offset, buf->alloc);
  pthread_mutex_unlock(&d->lock);
  free(buf);
}

/* ---- staging, transfers and events ----------------------------------------------------- */

/* A pinned buffer of at least `bytes`, busy until the next recorded event;
 * caller holds the lock. */
static kiln_status_t staging_take(cu_dev *d, size_t bytes, cu_pinned **out) {
  cu_pinned **best = NULL;
  for (cu_pinned **pp = &d->idle; *pp; pp = &(*pp)->next)
    if ((*pp)->size >= bytes && (!best || (*pp)->size < (*best)->size)) best = pp;
  cu_pinned *s;
  if (best) {
    s = *best;
    *best = s->next;
    d->idle_bytes -= s->size;
  } else {
    size_t size = CU_STAGING_MIN;
    while (size < bytes) size *= 2;
    s = calloc(1, sizeof *s);
    if (!s) return KILN_OOM();
    CUresult r = cu_api()->MemHostAlloc(&s->host, size, CU_MEMHOSTALLOC_PORTABLE);
    if (r) {
      free(s);
      return kiln_status_annotate(cu_check(r, "cuMemHostAlloc"), "cuda: pinned staging buffer of %zu bytes", size);
    }
    s->size = size;
  }
  s->after = d->recorded + 1;
  s->copy_to = NULL;
  s->next = d->busy;
  d->busy = s;
  *out = s;
  return NULL;
}

/* Finishes the staging buffers the timeline has passed: a readback's bytes
 * go to the caller; the buffer is kept for reuse up to a budget. Caller
 * holds the lock. */
static void staging_retire(cu_dev *d) {
  cu_pinned **pp = &d->busy;
  while (*pp) {
    cu_pinned *s = *pp;
    if (s->after > d->completed) {
      pp = &s->next;
      continue;
    }
    *pp = s->next;
    if (s->copy_to) memcpy(s->copy_to, s->host, s->copy_bytes);
    if (d->idle_bytes + s->size <= CU_IDLE_STAGING_MAX) {
      s->next = d->idle;
      d->idle = s;
      d->idle_bytes += s->size;
    } else {
      cu_api()->MemFreeHost(s->host);
      free(s);
    }
  }
}

static kiln_status_t check_range(const kiln_device_buffer *b, size_t offset, size_t bytes, const char *what) {
  if (offset > b->bytes || bytes > b->bytes - offset)
    return kiln_error(KILN_INTERNAL, "cuda: %s of %zu bytes at %zu past the end of a %llu-byte buffer", what, bytes,
                      offset, (unsigned long long)b->bytes);
  return NULL;
}

static kiln_status_t cu_upload(kiln_device *dev, kiln_device_buffer *dst, size_t offset, const void *src, size_t bytes) {
  cu_dev *d = dev_of(dev);
  if (!bytes) return NULL;
  KILN_TRY(check_range(dst, offset, bytes, "upload"));
  pthread_mutex_lock(&d->lock);
  cu_pinned *s = NULL;
  kiln_status_t st = cu_enter(d);
  if (!st) st = staging_take(d, bytes, &s);
  if (!st) {
    memcpy(s->host, src, bytes);
    st = cu_check(cu_api()->MemcpyHtoDAsync(cu_address(dst, offset), s->host, bytes, d->stream), "cuMemcpyHtoDAsync");
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

static kiln_status_t cu_readback(kiln_device *dev, void *dst, kiln_device_buffer *src, size_t offset, size_t bytes) {
  cu_dev *d = dev_of(dev);
  if (!bytes) return NULL;
  KILN_TRY(check_range(src, offset, bytes, "readback"));
  pthread_mutex_lock(&d->lock);
  cu_pinned *s = NULL;
  kiln_status_t st = cu_enter(d);
  if (!st) st = staging_take(d, bytes, &s);
  if (!st) {
    s->copy_to = dst;
    s->copy_bytes = bytes;
    st = cu_check(cu_api()->MemcpyDtoHAsync(s->host, cu_address(src, offset), bytes, d->stream), "cuMemcpyDtoHAsync");
    if (st) s->copy_to = NULL;
  }
  pthread_mutex_unlock(&d->lock);
  return st;
}

static kiln_status_t cu_copy(kiln_device *dev, kiln_device_buffer *dst, size_t dst_offset, kiln_device_buffer *src,
                             size_t src_offset, size_t bytes) {
  cu_dev *d = dev_of(dev);
  if (!bytes) return NULL;
  KILN_TRY(check_range(dst, dst_offset, bytes, "copy"));
  KILN_TRY(check_range(src, src_offset, bytes, "copy"));
  pthread_mutex_lock(&d->lock);
  kiln_status_t st = cu_enter(d);
  if (!st)
    st = cu_check(cu_api()->MemcpyDtoDAsync(cu_address(dst, dst_offset), cu_address(src, src_offset), bytes, d->stream),
                  "cuMemcpyDtoDAsync");
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* Launches are submitted as they are enqueued. */
static kiln_status_t cu_submit(kiln_device *dev) {
  (void)dev;
  return NULL;
}

static kiln_status_t cu_event_record(kiln_device *dev, kiln_device_event *out) {
  cu_dev *d = dev_of(dev);
  pthread_mutex_lock(&d->lock);
  uint64_t v = d->recorded + 1;
  kiln_status_t st = cu_enter(d);
  if (!st) st = cu_check(cu_api()->EventRecord(d->ring[v % CU_EVENT_RING], d->stream), "cuEventRecord");
  if (!st) d->recorded = v;
  pthread_mutex_unlock(&d->lock);
  out->queue = 0;
  out->value = v;
  return st;
}

/* A later event on the one stream implies the earlier: the slot of value v
 * may already hold a later event, which only makes the wait longer. */
static kiln_status_t cu_event_wait(kiln_device *dev, kiln_device_event event) {
  cu_dev *d = dev_of(dev);
  pthread_mutex_lock(&d->lock);
  bool done = event.value <= d->completed;
  bool in_ring = d->recorded - event.value < CU_EVENT_RING;
  CUevent e = d->ring[event.value % CU_EVENT_RING];
  kiln_status_t st = done ? NULL : cu_enter(d);
  pthread_mutex_unlock(&d->lock);
  if (done || st) return st;
  CUresult r = in_ring ? cu_api()->EventSynchronize(e) : cu_api()->StreamSynchronize(d->stream);
  pthread_mutex_lock(&d->lock);
  if (!r && event.value > d->completed) d->completed = event.value;
  staging_retire(d);
  pthread_mutex_unlock(&d->lock);
  return cu_check(r, in_ring ? "cuEventSynchronize (waiting for the device)" : "cuStreamSynchronize");
}

static bool cu_event_done(kiln_device *dev, kiln_device_event event) {
  cu_dev *d = dev_of(dev);
  pthread_mutex_lock(&d->lock);
  bool done = event.value <= d->completed;
  if (!done && d->recorded - event.value < CU_EVENT_RING && !cu_api()->EventQuery(d->ring[event.value % CU_EVENT_RING])) {
    d->completed = event.value;
    staging_retire(d);
    done = true;
  }
  pthread_mutex_unlock(&d->lock);
  return done;
}

static kiln_status_t cu_synchronize(kiln_device *dev) {
  kiln_device_event e;
  KILN_TRY(cu_event_record(dev, &e));
  return cu_event_wait(dev, e);
}

kiln_status_t cu_launch_threads(cu_dev *d, CUfunction f, int64_t threads, unsigned block, void **params) {
  if (threads <= 0) return NULL;
  int64_t blocks = (threads + block - 1) / block;
  if (blocks > 0x7fffffff)
    return kiln_error(KILN_UNSUPPORTED, "cuda: a kernel over %lld threads exceeds the grid limit", (long long)threads);
  return cu_check(cu_api()->LaunchKernel(f, (unsigned)blocks, 1, 1, block, 1, 1, 0, d->stream, params, NULL),
                  "cuLaunchKernel");
}

/* ---- modules --------------------------------------------------------------------------- */

static char *cubin_path(cu_dev *d, const char *source, int arch, const char *nvrtc) {
  char base[4096];
  if (!kiln_jit_cache_dir(base, sizeof base) || !base[0]) return NULL;
  char *dir = kiln_strfmt("%s/cuda", base);
  if (!dir || kiln_make_dirs(dir)) {
    free(dir);
    return NULL;
  }
  char arch_s[16];
  snprintf(arch_s, sizeof arch_s, "sm_%d", arch);
  kiln_sha256_ctx h;
  kiln_sha256_init(&h);
  const char *parts[] = {CU_KEY_VERSION, arch_s, nvrtc, kiln_nvrtc_options(), source};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(parts); i++) kiln_sha256_update(&h, parts[i], strlen(parts[i]) + 1);
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256_final(&h, digest);
  char hex[KILN_SHA256_HEX_SIZE];
  kiln_hex_encode(digest, sizeof digest, hex);
  char *path = kiln_strfmt("%s/%s.cubin", dir, hex);
  free(dir);
  (void)d;
  return path;
}

static kiln_status_t load_module(cu_dev *d, const void *cubin, const char *what, CUmodule *out) {
  CUresult r = cu_api()->ModuleLoadData(out, cubin);
  if (!r) return NULL;
  *out = NULL;
  return kiln_status_annotate(cu_check(r, "cuModuleLoadData"), "cuda: loading the cubin of %s for sm_%d%d on %s", what,
                              d->props.cc_major, d->props.cc_minor, d->props.name);
}

kiln_status_t cu_build_module(cu_dev *d, const char *source, const char *what, CUmodule *out, bool *from_cache) {
  *out = NULL;
  *from_cache = false;
  char nvrtc[32];
  KILN_TRY(kiln_nvrtc_available(nvrtc, sizeof nvrtc));
  KILN_TRY(cu_enter(d));
  int arch = d->props.cc_major * 10 + d->props.cc_minor;
  char *path = cubin_path(d, source, arch, nvrtc);
  if (path) {
    size_t size = 0;
    bool corrupt = false;
    uint8_t *bin = kiln_cache_file_read(path, CU_CUBIN_MAGIC, &size, &corrupt);
    if (bin && !load_module(d, bin, what, out)) {
      free(bin);
      free(path);
      *from_cache = true;
      return NULL;
    }
    if (bin || corrupt) unlink(path); /* a cubin the driver refuses: rebuilt below */
    free(bin);
  }
  void *cubin = NULL;
  size_t size = 0;
  kiln_status_t st = kiln_nvrtc_compile(source, what, arch, &cubin, &size);
  if (!st) st = load_module(d, cubin, what, out);
  if (!st && path) kiln_cache_file_write(path, CU_CUBIN_MAGIC, cubin, size);
  free(cubin);
  free(path);
  return st;
}

/* The vtable's compile / launch: one kernel named by the desc, over
 * buffers passed as typed device pointers (the CUDA C dialect's ABI). */
struct kiln_device_program {
  CUmodule module;
  CUfunction function;
  int n_buffers;
};

static kiln_status_t cu_compile(kiln_device *dev, const kiln_program_desc *desc, kiln_device_program **out) {
  cu_dev *d = dev_of(dev);
  *out = NULL;
  kiln_device_program *p = calloc(1, sizeof *p);
  if (!p) return KILN_OOM();
  bool cached;
  char what[160];
  snprintf(what, sizeof what, "kernel '%.100s'", desc->name);
  kiln_status_t st = cu_build_module(d, desc->source, what, &p->module, &cached);
  if (!st) st = cu_check(cu_api()->ModuleGetFunction(&p->function, p->module, desc->name), "cuModuleGetFunction");
  if (st) {
    if (p->module) cu_api()->ModuleUnload(p->module);
    free(p);
    return st;
  }
  p->n_buffers = desc->n_buffers;
  *out = p;
  return NULL;
}

static void cu_program_free(kiln_device *dev, kiln_device_program *p) {
  if (!p) return;
  kiln_status_free(cu_enter(dev_of(dev)));
  if (p->module) cu_api()->ModuleUnload(p->module);
  free(p);
}

static kiln_status_t cu_launch(kiln_device *dev, kiln_device_program *p, int n_buffers, kiln_device_buffer *const *bufs,
                               const uint32_t grid[3]) {
  if (n_buffers != p->n_buffers)
    return kiln_error(KILN_INVALID_ARGUMENT, "cuda: the kernel takes %d buffers, %d given", p->n_buffers, n_buffers);
  CUdeviceptr addr[64];
  void *params[64];
  if (n_buffers > 64) return kiln_error(KILN_UNSUPPORTED, "cuda: a kernel of %d buffers (at most 64)", n_buffers);
  for (int i = 0; i < n_buffers; i++) {
    addr[i] = cu_address(bufs[i], 0);
    params[i] = &addr[i];
  }
  cu_dev *d = dev_of(dev);
  int64_t threads = (int64_t)grid[0] * (grid[1] ? grid[1] : 1) * (grid[2] ? grid[2] : 1);
  pthread_mutex_lock(&d->lock);
  kiln_status_t st = cu_enter(d);
  if (!st) st = cu_launch_threads(d, p->function, threads, CU_THREADS_PER_BLOCK, params);
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* ---- the device ------------------------------------------------------------------------ */

static void cu_query(const kiln_device *dev, kiln_device_info *out) {
  const cu_dev *d = dev->impl;
  memset(out, 0, sizeof *out);
  out->name = d->name;
  out->vendor = "NVIDIA";
  out->description = d->description;
  out->driver = d->driver;
  out->memory_bytes = d->props.memory_bytes;
  out->compute_units = d->props.multiprocessors;
  out->subgroup_size = d->props.warp_size;
  /* fp16 arithmetic from sm_53; kiln's CUDA kernels are fp32 today. */
  out->features = d->props.cc_major * 10 + d->props.cc_minor >= 53 ? KILN_DEVICE_FEATURE_FP16 : 0;
}

const kiln_device_vtable cu_vtable = {
    .query = cu_query,
    .supports = cu_supports,
    .compile = cu_compile,
    .program_free = cu_program_free,
    .buffer_alloc = cu_buffer_alloc,
    .buffer_free = cu_buffer_free,
    .upload = cu_upload,
    .readback = cu_readback,
    .copy = cu_copy,
    .launch = cu_launch,
    .submit = cu_submit,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
    .event_done = cu_event_done,
    .synchronize = cu_synchronize,
    .plan_begin = cu_plan_begin,
    .plan_compile = cu_plan_compile,
    .launch_step = cu_launch_step,
    .plan_end = cu_plan_end,
    .plan_describe = cu_plan_describe,
    .record = cu_record,
    .enqueue_recorded = cu_enqueue_recorded,
};

/* The context, stream and event ring of device i; a reason when not. */
static kiln_status_t open_device(cu_dev *d) {
  const cu_fns *fn = cu_api();
  KILN_TRY(cu_check(fn->PrimaryCtxRetain(&d->context, d->props.id), "cuDevicePrimaryCtxRetain"));
  KILN_TRY(cu_enter(d));
  KILN_TRY(cu_check(fn->StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  for (int i = 0; i < CU_EVENT_RING; i++)
    KILN_TRY(cu_check(fn->EventCreate(&d->ring[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
  return NULL;
}

static int cu_enumerate(kiln_device **out, int max, const char **why_absent) {
#if !KILN_HAVE_CUDA
  (void)out;
  (void)max;
  *why_absent = "this kiln was built without the CUDA device (-DKILN_CUDA=OFF)";
  return 0;
#endif
  static char why[640];
  cu_props props[CU_MAX_DEVICES];
  char driver[32] = "";
  int found = cu_find_devices(props, CU_MAX_DEVICES, driver, sizeof driver, why_absent);
  if (found <= 0) return 0;
  kiln_status_t st = kiln_memory_cap_init(&g_cap);
  char nvrtc[32] = "";
  kiln_status_t nv = st ? NULL : kiln_nvrtc_available(nvrtc, sizeof nvrtc);
  if (st || nv) {
    /* Without NVRTC no kernel can be built: the device is absent, and says why. */
    snprintf(why, sizeof why, "%s%s", nv ? "cuda: the driver is there but NVRTC is not: " : "",
             kiln_status_message(st ? st : nv));
    kiln_status_free(st ? st : nv);
    *why_absent = why;
    return 0;
  }
  int n = 0;
  for (int i = 0; i < found && n < max; i++) {
    cu_dev *d = &g_devs[n];
    memset(d, 0, sizeof *d);
    d->props = props[i];
    snprintf(d->driver, sizeof d->driver, "CUDA driver %s", driver);
    if ((st = open_device(d))) {
      snprintf(why, sizeof why, "cuda: %s: %s", d->props.name, kiln_status_message(st));
      kiln_status_free(st);
      *why_absent = why;
      continue;
    }
    pthread_mutex_init(&d->lock, NULL);
    d->pool = (kiln_block_pool){&g_cap, CU_BLOCK_BYTES, CU_ALIGN, 0, block_create, block_destroy, d, NULL};
    snprintf(d->name, sizeof d->name, "cuda:%d", n);
    const cu_props *p = &props[i];
    char mem[32];
    snprintf(d->description, sizeof d->description,
             "%.120s (NVIDIA, sm_%d%d; CUDA driver %s, NVRTC %s; %s; %d SMs; warp %d; %d threads and %d KiB shared "
             "per block; CUDA graphs %s)",
             p->name, p->cc_major, p->cc_minor, driver, nvrtc, kiln_format_bytes(p->memory_bytes, mem),
             p->multiprocessors, p->warp_size, p->max_threads_per_block, p->shared_per_block / 1024,
             cu_api()->GraphLaunch ? "yes" : "no");
    g_devices[n] = (kiln_device){&cu_vtable, d};
    out[n] = &g_devices[n];
    n++;
  }
  if (n) *why_absent = NULL;
  return n;
}

/* CUDA: one device per GPU the driver lists ("cuda" is cuda:0); lazy, as
 * starting the driver costs start-up time. */
const kiln_device_provider kiln_cuda_provider = {
    .name = "cuda",
    .lazy = true,
    .enumerate = cu_enumerate,
};

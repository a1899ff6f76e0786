/* cl_device.c — the OpenCL provider and the vtable's runtime half.
 *
 * One context and one in-order queue per device, shared by every session
 * on it. Memory comes from a pool of 64 MiB cl_mem blocks suballocated
 * best-fit (runtime/device_memory.h); a buffer is (block, offset), and
 * kernels take each buffer as the block and a byte offset, so no
 * sub-buffer objects (with their alignment rules) are needed. Uploads copy
 * the caller's bytes into a staging allocation and enqueue a non-blocking
 * write; readbacks are non-blocking reads into the caller's memory, valid
 * once an event recorded after them is done. Events are markers on the
 * queue, numbered on a timeline.
 *
 * Environment:
 *   KILN_OPENCL_MEMORY_LIMIT=N[K|M|G|T]  a cap on the device memory kiln
 *       allocates from OpenCL in this process (as KILN_VULKAN_MEMORY_LIMIT).
 *   KILN_OPENCL_BUILD_OPTIONS  options for every program build (part of the
 *       binary cache key), e.g. -cl-mad-enable.
 *   KILN_OPENCL_LIBRARY   the ICD loader to open (cl_loader.c). */
#include "runtime/device.h"

#if KILN_HAVE_OPENCL

#include "devices/opencl/cl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/files.h"
#include "base/hash.h"
#include "codegen/jit.h"

#define CL_MAX_DEVICES 8
#define CL_BLOCK_BYTES ((uint64_t)64 << 20)
#define CL_BINARY_MAGIC "KILNCLB1"
/* Bump when the build options or the binary format kiln expects change. */
#define CL_KEY_VERSION "kiln-opencl-binary-1"

static cl_dev g_devs[CL_MAX_DEVICES];
static kiln_device g_devices[CL_MAX_DEVICES];
static kiln_memory_cap g_cap = KILN_MEMORY_CAP("opencl", "KILN_OPENCL_MEMORY_LIMIT");

static cl_dev *dev_of(const kiln_device *dev) { return dev->impl; }

/* ---- memory ------------------------------------------------------------------------ */

static kiln_status_t block_create(void *user, uint64_t size, uint64_t requested, void **out) {
  cl_dev *d = user;
  cl_int err = CL_SUCCESS;
  cl_mem mem = cl_api()->CreateBuffer(d->context, CL_MEM_READ_WRITE, (size_t)size, NULL, &err);
  if (!mem || err != CL_SUCCESS) {
    char want[32], have[32];
    return kiln_error(KILN_OUT_OF_MEMORY, "opencl: out of device memory allocating %s (clCreateBuffer: %s; the device has %s)",
                      kiln_format_bytes(requested, want), cl_error_name(err),
                      kiln_format_bytes(d->props.global_bytes, have));
  }
  *out = mem;
  return NULL;
}

static void block_destroy(void *user, void *mem) {
  (void)user;
  cl_api()->ReleaseMemObject(mem);
}

static kiln_status_t cl_buffer_alloc(kiln_device *dev, size_t bytes, kiln_device_buffer **out) {
  cl_dev *d = dev_of(dev);
  *out = NULL;
  kiln_device_buffer *buf = calloc(1, sizeof *buf);
  if (!buf) return KILN_OOM();
  pthread_mutex_lock(&d->lock);
  kiln_status_t st = kiln_block_pool_take(&d->pool, bytes, &buf->block, &buf->offset, &buf->alloc);
  pthread_mutex_unlock(&d->lock);
  if (st) {
    free(buf);
    return st;
  }
  *out = buf;
  return NULL;
}

static void cl_buffer_free(kiln_device *dev, kiln_device_buffer *buf) {
  if (!buf) return;
  cl_dev *d = dev_of(dev);
  pthread_mutex_lock(&d->lock);
  kiln_block_pool_give(&d->pool, buf->block, buf->offset, buf->alloc);
  pthread_mutex_unlock(&d->lock);
  free(buf);
}

/* ---- transfers and events ------------------------------------------------------------- */

/* Frees the staging copies the queue has passed; caller holds the lock. */
static void reap_staging(cl_dev *d) {
  cl_staging **pp = &d->staging;
  while (*pp) {
    cl_staging *s = *pp;
    if (s->after <= d->completed) {
      *pp = s->next;
      free(s->data);
      free(s);
    } else {
      pp = &s->next;
    }
  }
}

static kiln_status_t cl_upload(kiln_device *dev, kiln_device_buffer *dst, size_t offset, const void *src, size_t bytes) {
  cl_dev *d = dev_of(dev);
  if (!bytes) return NULL;
  if (offset + bytes > dst->alloc) return kiln_error(KILN_INTERNAL, "opencl: upload past the end of a buffer");
  cl_staging *s = malloc(sizeof *s);
  void *copy = malloc(bytes);
  if (!s || !copy) {
    free(s);
    free(copy);
    return KILN_OOM();
  }
  memcpy(copy, src, bytes);
  pthread_mutex_lock(&d->lock);
  cl_int err = cl_api()->EnqueueWriteBuffer(d->queue, cl_mem_of(dst), CL_FALSE, (size_t)(dst->offset + offset), bytes,
                                            copy, 0, NULL, NULL);
  if (err == CL_SUCCESS) {
    *s = (cl_staging){copy, d->enqueued + 1, d->staging}; /* free once the next marker is passed */
    d->staging = s;
  }
  pthread_mutex_unlock(&d->lock);
  if (err != CL_SUCCESS) {
    free(s);
    free(copy);
  }
  return cl_check(err, "clEnqueueWriteBuffer");
}

static kiln_status_t cl_readback(kiln_device *dev, void *dst, kiln_device_buffer *src, size_t offset, size_t bytes) {
  cl_dev *d = dev_of(dev);
  if (!bytes) return NULL;
  if (offset + bytes > src->alloc) return kiln_error(KILN_INTERNAL, "opencl: readback past the end of a buffer");
  return cl_check(cl_api()->EnqueueReadBuffer(d->queue, cl_mem_of(src), CL_FALSE, (size_t)(src->offset + offset),
                                              bytes, dst, 0, NULL, NULL),
                  "clEnqueueReadBuffer");
}

static kiln_status_t cl_copy(kiln_device *dev, kiln_device_buffer *dst, size_t dst_offset, kiln_device_buffer *src,
                             size_t src_offset, size_t bytes) {
  cl_dev *d = dev_of(dev);
  if (!bytes) return NULL;
  return cl_check(cl_api()->EnqueueCopyBuffer(d->queue, cl_mem_of(src), cl_mem_of(dst),
                                              (size_t)(src->offset + src_offset), (size_t)(dst->offset + dst_offset),
                                              bytes, 0, NULL, NULL),
                  "clEnqueueCopyBuffer");
}

static kiln_status_t cl_submit(kiln_device *dev) { return cl_check(cl_api()->Flush(dev_of(dev)->queue), "clFlush"); }

/* The queue is in order: everything enqueued before the point an event
 * names is done when the host has waited for it, which clFinish gives
 * with the driver's status of every command (a failed kernel included). */
static kiln_status_t cl_event_record(kiln_device *dev, kiln_device_event *out) {
  cl_dev *d = dev_of(dev);
  pthread_mutex_lock(&d->lock);
  out->queue = 0;
  out->value = ++d->enqueued;
  pthread_mutex_unlock(&d->lock);
  return NULL;
}

static kiln_status_t cl_event_wait(kiln_device *dev, kiln_device_event event) {
  cl_dev *d = dev_of(dev);
  pthread_mutex_lock(&d->lock);
  bool done = event.value <= d->completed;
  uint64_t upto = d->enqueued;
  pthread_mutex_unlock(&d->lock);
  if (done) return NULL;
  cl_int err = cl_api()->Finish(d->queue);
  pthread_mutex_lock(&d->lock);
  if (err == CL_SUCCESS && upto > d->completed) d->completed = upto;
  reap_staging(d);
  pthread_mutex_unlock(&d->lock);
  return cl_check(err, "clFinish (waiting for the device)");
}

static bool cl_event_done(kiln_device *dev, kiln_device_event event) {
  cl_dev *d = dev_of(dev);
  pthread_mutex_lock(&d->lock);
  bool done = event.value <= d->completed;
  pthread_mutex_unlock(&d->lock);
  return done;
}

static kiln_status_t cl_synchronize(kiln_device *dev) {
  kiln_device_event e;
  KILN_TRY(cl_event_record(dev, &e));
  return cl_event_wait(dev, e);
}

kiln_status_t cl_set_buffer_arg(cl_kernel k, int i, const kiln_device_buffer *buf, uint64_t byte_offset) {
  cl_ulong off = byte_offset;
  cl_mem mem = cl_mem_of(buf);
  cl_int err = cl_api()->SetKernelArg(k, (cl_uint)(2 * i), sizeof(cl_mem), &mem);
  if (!err) err = cl_api()->SetKernelArg(k, (cl_uint)(2 * i + 1), sizeof off, &off);
  return cl_check(err, "clSetKernelArg");
}

kiln_status_t cl_enqueue_kernel(cl_dev *d, cl_kernel k, size_t n_items, size_t local) {
  if (!n_items) return NULL;
  if (!local) local = 1;
  size_t global = (n_items + local - 1) / local * local;
  return cl_check(cl_api()->EnqueueNDRangeKernel(d->queue, k, 1, NULL, &global, &local, 0, NULL, NULL),
                  "clEnqueueNDRangeKernel");
}

/* ---- programs ------------------------------------------------------------------------- */

static char *cache_dir(void) {
  char base[4096];
  if (!kiln_jit_cache_dir(base, sizeof base) || !base[0]) return NULL;
  char *dir = kiln_strfmt("%s/opencl", base);
  if (dir && kiln_make_dirs(dir)) {
    free(dir);
    return NULL;
  }
  return dir;
}

/* The build log of a failed build, trimmed, into the error. */
static kiln_status_t build_failure(cl_dev *d, cl_program prog, cl_int err, const char *what) {
  const cl_fns *fn = cl_api();
  size_t size = 0;
  fn->GetProgramBuildInfo(prog, d->props.id, CL_PROGRAM_BUILD_LOG, 0, NULL, &size);
  char *log = calloc(1, size + 1);
  if (log && size) fn->GetProgramBuildInfo(prog, d->props.id, CL_PROGRAM_BUILD_LOG, size, log, NULL);
  kiln_status_t st = kiln_error(KILN_INTERNAL, "opencl: building %s for %s failed (%s); build log:\n%.3000s%s", what,
                                d->props.name, cl_error_name(err), log && log[0] ? log : "(empty)",
                                log && strlen(log) > 3000 ? "\n..." : "");
  free(log);
  return st;
}

static const char *build_options(void) {
  const char *o = getenv("KILN_OPENCL_BUILD_OPTIONS");
  return o ? o : "";
}

static void cache_key(cl_dev *d, const char *source, char hex[KILN_SHA256_HEX_SIZE]) {
  kiln_sha256_ctx h;
  kiln_sha256_init(&h);
  const char *parts[] = {CL_KEY_VERSION, d->props.platform_name, d->props.name, d->props.version, d->props.driver,
                         build_options(), source};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(parts); i++) kiln_sha256_update(&h, parts[i], strlen(parts[i]) + 1);
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256_final(&h, digest);
  kiln_hex_encode(digest, sizeof digest, hex);
}

/* Stores the program's binary (best effort). */
static void cache_store(cl_dev *d, cl_program prog, const char *path) {
  const cl_fns *fn = cl_api();
  size_t size = 0;
  if (fn->GetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || !size ||
      size > KILN_CACHE_FILE_MAX)
    return;
  unsigned char *bin = malloc(size);
  if (bin && fn->GetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS)
    kiln_cache_file_write(path, CL_BINARY_MAGIC, bin, size);
  free(bin);
}

kiln_status_t cl_build_program(cl_dev *d, const char *source, const char *what, cl_program *out, bool *from_cache) {
  const cl_fns *fn = cl_api();
  *out = NULL;
  *from_cache = false;
  char hex[KILN_SHA256_HEX_SIZE];
  cache_key(d, source, hex);
  char *dir = cache_dir();
  char *path = dir ? kiln_strfmt("%s/%s.bin", dir, hex) : NULL;
  free(dir);
  cl_int err = CL_SUCCESS;
  if (path) {
    size_t size = 0;
    bool corrupt = false;
    uint8_t *bin = kiln_cache_file_read(path, CL_BINARY_MAGIC, &size, &corrupt);
    if (bin) {
      const unsigned char *bins[1] = {bin};
      cl_int bin_status = CL_SUCCESS;
      cl_program prog = fn->CreateProgramWithBinary(d->context, 1, &d->props.id, &size, bins, &bin_status, &err);
      if (prog && err == CL_SUCCESS && bin_status == CL_SUCCESS &&
          fn->BuildProgram(prog, 1, &d->props.id, build_options(), NULL, NULL) == CL_SUCCESS) {
        free(bin);
        free(path);
        *out = prog;
        *from_cache = true;
        return NULL;
      }
      if (prog) fn->ReleaseProgram(prog);
      corrupt = true; /* a binary the driver refuses (a new driver): rebuilt below */
    }
    free(bin);
    if (corrupt) unlink(path);
  }
  size_t len = strlen(source);
  cl_program prog = fn->CreateProgramWithSource(d->context, 1, &source, &len, &err);
  if (!prog || err != CL_SUCCESS) {
    free(path);
    return cl_check(err, "clCreateProgramWithSource");
  }
  err = fn->BuildProgram(prog, 1, &d->props.id, build_options(), NULL, NULL);
  if (err != CL_SUCCESS) {
    kiln_status_t st = build_failure(d, prog, err, what);
    fn->ReleaseProgram(prog);
    free(path);
    return st;
  }
  if (path) cache_store(d, prog, path);
  free(path);
  *out = prog;
  return NULL;
}

/* The vtable's compile / launch: one kernel named by the desc, over
 * buffers bound as the OpenCL C dialect takes them (block, byte offset). */
struct kiln_device_program {
  cl_program program;
  cl_kernel kernel;
  int n_buffers;
};

static kiln_status_t cl_compile(kiln_device *dev, const kiln_program_desc *desc, kiln_device_program **out) {
  cl_dev *d = dev_of(dev);
  *out = NULL;
  kiln_device_program *p = calloc(1, sizeof *p);
  if (!p) return KILN_OOM();
  bool cached;
  char what[160];
  snprintf(what, sizeof what, "kernel '%.100s'", desc->name);
  kiln_status_t st = cl_build_program(d, desc->source, what, &p->program, &cached);
  cl_int err = CL_SUCCESS;
  if (!st) p->kernel = cl_api()->CreateKernel(p->program, desc->name, &err);
  if (!st && (!p->kernel || err != CL_SUCCESS)) st = cl_check(err ? err : CL_INVALID_KERNEL, "clCreateKernel");
  if (st) {
    if (p->program) cl_api()->ReleaseProgram(p->program);
    free(p);
    return st;
  }
  p->n_buffers = desc->n_buffers;
  *out = p;
  return NULL;
}

static void cl_program_free(kiln_device *dev, kiln_device_program *p) {
  if (!p) return;
  if (p->kernel) cl_api()->ReleaseKernel(p->kernel);
  if (p->program) cl_api()->ReleaseProgram(p->program);
  free(p);
}

static kiln_status_t cl_launch(kiln_device *dev, kiln_device_program *p, int n_buffers, kiln_device_buffer *const *bufs,
                               const uint32_t grid[3]) {
  if (n_buffers != p->n_buffers)
    return kiln_error(KILN_INVALID_ARGUMENT, "opencl: the kernel takes %d buffers, %d given", p->n_buffers, n_buffers);
  for (int i = 0; i < n_buffers; i++) KILN_TRY(cl_set_buffer_arg(p->kernel, i, bufs[i], bufs[i]->offset));
  size_t items = (size_t)grid[0] * (grid[1] ? grid[1] : 1) * (grid[2] ? grid[2] : 1);
  return cl_enqueue_kernel(dev_of(dev), p->kernel, items, KILN_MIN((size_t)64, dev_of(dev)->props.max_work_group));
}

/* ---- the device ------------------------------------------------------------------------ */

static void cl_query(const kiln_device *dev, kiln_device_info *out) {
  const cl_dev *d = dev->impl;
  memset(out, 0, sizeof *out);
  out->name = d->name;
  out->vendor = d->props.vendor;
  out->description = d->description;
  out->driver = d->props.driver;
  out->memory_bytes = d->props.global_bytes;
  out->compute_units = (int)d->props.compute_units;
  out->subgroup_size = d->props.subgroup_size;
  out->features = d->props.fp16 ? KILN_DEVICE_FEATURE_FP16 : 0;
}

const kiln_device_vtable cl_vtable = {
    .query = cl_query,
    .supports = cl_supports,
    .compile = cl_compile,
    .program_free = cl_program_free,
    .buffer_alloc = cl_buffer_alloc,
    .buffer_free = cl_buffer_free,
    .upload = cl_upload,
    .readback = cl_readback,
    .copy = cl_copy,
    .launch = cl_launch,
    .submit = cl_submit,
    .event_record = cl_event_record,
    .event_wait = cl_event_wait,
    .event_done = cl_event_done,
    .synchronize = cl_synchronize,
    .plan_begin = cl_plan_begin,
    .plan_compile = cl_plan_compile,
    .launch_step = cl_launch_step,
    .plan_end = cl_plan_end,
    .plan_describe = cl_plan_describe,
};

static const char *type_name(cl_device_type t) {
  return t & CL_DEVICE_TYPE_GPU ? "GPU" : t & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator" : t & CL_DEVICE_TYPE_CPU ? "CPU" : "other";
}

static int cl_enumerate(kiln_device **out, int max, const char **why_absent) {
  static char why[640];
  cl_props props[CL_MAX_DEVICES];
  int found = cl_find_devices(props, CL_MAX_DEVICES, why_absent);
  if (found <= 0) return 0;
  kiln_status_t st = kiln_memory_cap_init(&g_cap);
  if (st) {
    snprintf(why, sizeof why, "%s", kiln_status_message(st));
    kiln_status_free(st);
    *why_absent = why;
    return 0;
  }
  const cl_fns *fn = cl_api();
  int n = 0;
  for (int i = 0; i < found && n < max; i++) {
    cl_dev *d = &g_devs[n];
    memset(d, 0, sizeof *d);
    d->props = props[i];
    cl_int err = CL_SUCCESS;
    d->context = fn->CreateContext(NULL, 1, &d->props.id, NULL, NULL, &err);
    if (d->context && !err) d->queue = fn->CreateCommandQueue(d->context, d->props.id, 0, &err);
    if (!d->queue || err) {
      snprintf(why, sizeof why, "opencl: %s: creating a context and queue failed: %s", d->props.name, cl_error_name(err));
      *why_absent = why;
      if (d->context) fn->ReleaseContext(d->context);
      continue;
    }
    pthread_mutex_init(&d->lock, NULL);
    d->pool = (kiln_block_pool){&g_cap, CL_BLOCK_BYTES, d->props.mem_align, d->props.max_alloc_bytes, block_create,
                                block_destroy, d, NULL};
    snprintf(d->name, sizeof d->name, "opencl:%d", n);
    const cl_props *p = &props[i]; /* not d->props: snprintf must not read what it writes beside */
    char mem[32];
    snprintf(d->description, sizeof d->description,
             "%.120s (%.60s, %s; platform %.60s; %.60s; driver %.60s; %s; %u compute units; fp64 %s, fp16 %s)", p->name,
             p->vendor, type_name(p->type), p->platform_name, p->version, p->driver,
             kiln_format_bytes(p->global_bytes, mem), p->compute_units, p->fp64 ? "yes" : "no", p->fp16 ? "yes" : "no");
    g_devices[n] = (kiln_device){&cl_vtable, d};
    out[n] = &g_devices[n];
    n++;
  }
  if (n) *why_absent = NULL;
  return n;
}

#else /* !KILN_HAVE_OPENCL */

static int cl_enumerate(kiln_device **out, int max, const char **why_absent) {
  (void)out;
  (void)max;
  *why_absent = "this kiln was built without OpenCL (CL/cl.h was not found: apt-get install opencl-c-headers)";
  return 0;
}

#endif

/* OpenCL: one device per usable device of every platform, GPUs first
 * ("opencl" is opencl:0); lazy, as loading drivers costs start-up time. */
const kiln_device_provider kiln_opencl_provider = {
    .name = "opencl",
    .lazy = true,
    .enumerate = cl_enumerate,
};

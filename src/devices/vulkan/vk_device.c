/* The Vulkan device: kiln's compiler driving any GPU through Vulkan compute.
 *
 * One kiln_device per usable physical device, named "vulkan:N" in
 * vk_enumerate's order (discrete GPUs first; "vulkan" is vulkan:0). The
 * device's context (VkDevice, queue, allocator, pipeline cache) is created
 * the first time a session or a runtime call needs it, and destroyed at
 * process exit, which also persists the pipeline cache.
 *
 * Two levels of the device interface (runtime/device.h):
 * - whole graphs: prepare/execute (vk_plan.c);
 * - the asynchronous runtime: buffers, uploads/readbacks through the
 *   staging ring, copies, GLSL programs and launches are recorded into an
 *   open batch (a vk_stream) that `submit` hands to the queue; events are
 *   timeline values of the device's queue.
 */
#include "runtime/device.h"
#include "devices/vulkan/vk_public.h"

#if KILN_HAVE_VULKAN

#include <pthread.h>
#include <stdio.h>

#include "devices/vulkan/vk_internal.h"
#include "devices/vulkan/vk_plan.h"
#include "runtime/plan.h"

#define VK_MAX_DEVICES 8

static vk_device_state states[VK_MAX_DEVICES];
static kiln_device devices[VK_MAX_DEVICES];
static int n_states;

/* ---- buffer views (arena-planned values) ------------------------------------- */

kiln_status_t vk_buffer_view_create(vk_buffer *parent, size_t offset, size_t bytes, vk_buffer **out) {
  if (offset > parent->size || bytes > parent->size - offset)
    return kiln_error(KILN_INTERNAL, "vulkan: view [%zu, %zu) past its buffer's %zu bytes", offset, offset + bytes,
                      parent->size);
  vk_buffer *v = malloc(sizeof *v);
  if (!v) return KILN_OOM();
  v->block = parent->block;
  v->offset = parent->offset + offset;
  v->alloc = parent->alloc - offset; /* descriptor ranges may round up to 4 bytes within the parent */
  v->size = bytes;
  *out = v;
  return NULL;
}

void vk_buffer_view_free(vk_buffer *view) { free(view); }

/* ---- context ------------------------------------------------------------------ */

static void destroy_contexts(void) {
  for (int i = 0; i < n_states; i++) {
    vk_device_state *d = &states[i];
    if (!d->ctx) continue;
    if (d->adhoc) vk_stream_destroy(d->ctx, d->adhoc);
    d->adhoc = NULL;
    for (int k = 0; k < d->n_batch; k++)
      if (d->batch_owned[k]) vk_stream_destroy(d->ctx, d->batch[k]);
    for (int k = 0; k < d->n_done; k++) vk_stream_destroy(d->ctx, d->done[k]);
    d->n_batch = d->n_done = 0;
    vk_context_destroy(d->ctx); /* also saves the pipeline cache */
    d->ctx = NULL;
  }
}

void kiln_vulkan_shutdown(void) {
  for (int i = 0; i < n_states; i++) pthread_mutex_lock(&states[i].lock);
  destroy_contexts();
  for (int i = 0; i < n_states; i++) {
    kiln_status_free(states[i].ctx_error);
    states[i].ctx_error = NULL;
    pthread_mutex_unlock(&states[i].lock);
  }
}

uint64_t kiln_vulkan_validation_errors(void) { return vk_validation_error_count(); }

kiln_status_t vk_device_context(vk_device_state *d, vk_context **out) {
  pthread_mutex_lock(&d->lock);
  if (!d->ctx && !d->ctx_error) {
    kiln_status_t st = vk_context_create(d->index, &d->ctx);
    if (st) d->ctx_error = st;
    else {
      static bool registered;
      if (!registered) {
        registered = true;
        atexit(destroy_contexts);
      }
    }
  }
  kiln_status_t st = NULL;
  if (d->ctx) *out = d->ctx;
  else st = kiln_error(kiln_status_code_of(d->ctx_error), "%s: %s", d->name, kiln_status_message(d->ctx_error));
  pthread_mutex_unlock(&d->lock);
  return st;
}

/* ---- the vtable ---------------------------------------------------------------- */

static void vk_query(const kiln_device *dev, kiln_device_info *out) {
  const vk_device_state *d = dev->impl;
  memset(out, 0, sizeof *out);
  out->name = d->name;
  out->vendor = d->props.vendor;
  out->description = d->description;
  out->memory_bytes = d->props.device_local_bytes;
  out->subgroup_size = (int)d->props.subgroup_size;
  out->driver = d->props.driver;
  out->host_memory = false;
  out->features = (d->props.fp16 ? KILN_DEVICE_FEATURE_FP16 : 0) | (d->props.int8_dot ? KILN_DEVICE_FEATURE_INT8_DOT : 0) |
                  (d->props.coop_matrix ? KILN_DEVICE_FEATURE_COOPERATIVE_MATRIX : 0);
}

static bool vk_supports(const kiln_device *dev, const kiln_graph *g, const kiln_node *node, const char **reason) {
  const char *why = vk_plan_unsupported(g, node);
  if (why && reason) *reason = why;
  return why == NULL;
}

static kiln_status_t submit_locked(vk_device_state *d);

/* The generic runtime records into one open stream per device
 * (d->adhoc_lock held). */
static kiln_status_t adhoc_stream(vk_device_state *d, vk_stream **out) {
  vk_context *ctx;
  KILN_TRY(vk_device_context(d, &ctx));
  if (!d->adhoc && d->n_batch >= VK_MAX_BATCH - 1) KILN_TRY(submit_locked(d)); /* room for it */
  if (!d->adhoc) {
    KILN_TRY(vk_stream_create(ctx, &d->adhoc));
    kiln_status_t st = vk_stream_begin(d->adhoc);
    if (st) {
      vk_stream_destroy(ctx, d->adhoc);
      d->adhoc = NULL;
      return st;
    }
  }
  *out = d->adhoc;
  return NULL;
}

static kiln_status_t vk_dev_buffer_alloc(kiln_device *dev, size_t bytes, kiln_device_buffer **out) {
  vk_context *ctx;
  KILN_TRY(vk_device_context(dev->impl, &ctx));
  return vk_buffer_alloc(ctx, VK_MEM_DEVICE, bytes, (vk_buffer **)out);
}

static void vk_dev_buffer_free(kiln_device *dev, kiln_device_buffer *buf) {
  vk_device_state *d = dev->impl;
  if (d->ctx) vk_buffer_free(d->ctx, (vk_buffer *)buf);
}

#define WITH_ADHOC(d, s, expr)                        \
  do {                                                \
    pthread_mutex_lock(&(d)->adhoc_lock);             \
    vk_stream *s = NULL;                              \
    kiln_status_t st_ = adhoc_stream((d), &s);        \
    if (!st_) st_ = (expr);                           \
    pthread_mutex_unlock(&(d)->adhoc_lock);           \
    return st_;                                       \
  } while (0)

/* Checked before recording: a failed record poisons the whole open batch. */
static kiln_status_t check_range(const kiln_device_buffer *b, size_t offset, size_t bytes, const char *what) {
  size_t size = vk_buffer_size((const vk_buffer *)b);
  if (offset > size || bytes > size - offset)
    return kiln_error(KILN_OUT_OF_RANGE, "vulkan: %s: range [%zu, %zu) exceeds the buffer's %zu bytes", what, offset,
                      offset + bytes, size);
  return NULL;
}

static kiln_status_t vk_dev_upload(kiln_device *dev, kiln_device_buffer *dst, size_t offset, const void *src,
                                   size_t bytes) {
  vk_device_state *d = dev->impl;
  KILN_TRY(check_range(dst, offset, bytes, "upload"));
  WITH_ADHOC(d, s, vk_stream_upload(s, (vk_buffer *)dst, offset, src, bytes));
}

static kiln_status_t vk_dev_readback(kiln_device *dev, void *dst, kiln_device_buffer *src, size_t offset,
                                     size_t bytes) {
  vk_device_state *d = dev->impl;
  KILN_TRY(check_range(src, offset, bytes, "readback"));
  WITH_ADHOC(d, s, vk_stream_readback(s, dst, (vk_buffer *)src, offset, bytes));
}

static kiln_status_t vk_dev_copy(kiln_device *dev, kiln_device_buffer *dst, size_t dst_offset,
                                 kiln_device_buffer *src, size_t src_offset, size_t bytes) {
  vk_device_state *d = dev->impl;
  KILN_TRY(check_range(dst, dst_offset, bytes, "copy destination"));
  KILN_TRY(check_range(src, src_offset, bytes, "copy source"));
  WITH_ADHOC(d, s, vk_stream_copy(s, (vk_buffer *)dst, dst_offset, (vk_buffer *)src, src_offset, bytes));
}

static kiln_status_t vk_dev_compile(kiln_device *dev, const kiln_program_desc *desc, kiln_device_program **out) {
  vk_context *ctx;
  KILN_TRY(vk_device_context(dev->impl, &ctx));
  vk_kernel_desc kd = {desc->name, desc->source, desc->n_buffers, 0};
  return vk_kernel_create(ctx, &kd, (vk_kernel **)out);
}

static void vk_dev_program_free(kiln_device *dev, kiln_device_program *program) {
  vk_device_state *d = dev->impl;
  if (d->ctx) vk_kernel_destroy(d->ctx, (vk_kernel *)program);
}

static kiln_status_t vk_dev_launch(kiln_device *dev, kiln_device_program *program, int n_buffers,
                                   kiln_device_buffer *const *buffers, const uint32_t grid[3]) {
  vk_device_state *d = dev->impl;
  (void)n_buffers; /* the program knows its binding count */
  WITH_ADHOC(d, s, vk_stream_dispatch(s, (const vk_kernel *)program, (vk_buffer *const *)buffers, NULL, grid[0],
                                      grid[1], grid[2]));
}

/* Closes the stream being recorded into the batch (d->adhoc_lock held). */
static kiln_status_t close_adhoc(vk_device_state *d) {
  if (!d->adhoc) return NULL;
  vk_stream *s = d->adhoc;
  d->adhoc = NULL; /* the next command opens a new stream */
  kiln_status_t st = vk_stream_end(s);
  if (st) {
    vk_stream_destroy(d->ctx, s);
    return st;
  }
  d->batch[d->n_batch] = s;
  d->batch_owned[d->n_batch++] = true;
  return NULL;
}

/* Hands the batch to the queue as one submission (d->adhoc_lock held). */
static kiln_status_t submit_locked(vk_device_state *d) {
  kiln_status_t st = close_adhoc(d);
  if (st || !d->n_batch) return st;
  uint64_t value;
  st = vk_submit(d->ctx, d->batch, d->n_batch, &value);
  if (!st) {
    d->last_value = value;
    d->stat_submits++;
    d->stat_command_buffers += (uint64_t)d->n_batch;
    for (int k = 0; k < d->n_batch; k++) d->stat_dispatches += (uint64_t)vk_stream_dispatch_count(d->batch[k]);
  }
  /* Destroying a stream waits for its batch, so submitted streams are kept
   * until the next submit, when they are most likely done. */
  for (int k = 0; k < d->n_done; k++) vk_stream_destroy(d->ctx, d->done[k]);
  d->n_done = 0;
  for (int k = 0; k < d->n_batch; k++)
    if (d->batch_owned[k]) d->done[d->n_done++] = d->batch[k];
  d->n_batch = 0;
  return st;
}

static kiln_status_t vk_dev_submit(kiln_device *dev) {
  vk_device_state *d = dev->impl;
  pthread_mutex_lock(&d->adhoc_lock);
  kiln_status_t st = d->ctx ? submit_locked(d) : NULL;
  pthread_mutex_unlock(&d->adhoc_lock);
  return st;
}

kiln_status_t vk_adhoc_dispatch(vk_device_state *d, const vk_kernel *k, vk_buffer *const *buffers,
                                const uint32_t groups[3]) {
  WITH_ADHOC(d, s, vk_stream_dispatch(s, k, buffers, NULL, groups[0], groups[1], groups[2]));
}

kiln_status_t vk_adhoc_enqueue(vk_device_state *d, vk_stream *recorded) {
  pthread_mutex_lock(&d->adhoc_lock);
  vk_context *ctx;
  kiln_status_t st = vk_device_context(d, &ctx);
  if (!st) st = close_adhoc(d);
  if (!st && d->n_batch + 1 >= VK_MAX_BATCH) st = submit_locked(d); /* keep room for the stream after it */
  if (!st) {
    d->batch[d->n_batch] = recorded;
    d->batch_owned[d->n_batch++] = false;
  }
  pthread_mutex_unlock(&d->adhoc_lock);
  return st;
}

static kiln_status_t vk_dev_event_record(kiln_device *dev, kiln_device_event *out) {
  vk_device_state *d = dev->impl;
  pthread_mutex_lock(&d->adhoc_lock);
  *out = (kiln_device_event){0, d->last_value};
  pthread_mutex_unlock(&d->adhoc_lock);
  return NULL;
}

static kiln_status_t vk_dev_event_wait(kiln_device *dev, kiln_device_event event) {
  vk_device_state *d = dev->impl;
  kiln_status_t st = d->ctx ? vk_wait(d->ctx, event.value) : NULL;
  /* The host buffers readbacks target may be freed on this error path. */
  if (st) vk_cancel_readbacks(d->ctx, event.value);
  return st;
}

static bool vk_dev_event_done(kiln_device *dev, kiln_device_event event) {
  vk_device_state *d = dev->impl;
  /* A lost device never completes anything: "done", so that a caller polling
   * this goes on to a wait or readback, which reports the loss. */
  return !d->ctx || atomic_load(&d->ctx->lost) || vk_completed_value(d->ctx) >= event.value;
}

static kiln_status_t vk_dev_synchronize(kiln_device *dev) {
  KILN_TRY(vk_dev_submit(dev));
  vk_device_state *d = dev->impl;
  return d->ctx ? vk_wait(d->ctx, d->last_value) : NULL;
}

static const kiln_device_vtable vk_vtable = {
    .query = vk_query,
    .supports = vk_supports,
    .compile = vk_dev_compile,
    .program_free = vk_dev_program_free,
    .buffer_alloc = vk_dev_buffer_alloc,
    .buffer_free = vk_dev_buffer_free,
    .upload = vk_dev_upload,
    .readback = vk_dev_readback,
    .copy = vk_dev_copy,
    .launch = vk_dev_launch,
    .submit = vk_dev_submit,
    .event_record = vk_dev_event_record,
    .event_wait = vk_dev_event_wait,
    .event_done = vk_dev_event_done,
    .synchronize = vk_dev_synchronize,
    .plan_begin = vk_plan_begin,
    .plan_compile = vk_plan_compile,
    .launch_step = vk_launch_step,
    .plan_end = vk_plan_end,
    .plan_describe = vk_plan_describe,
    .plan_run_stats = vk_plan_run_stats,
    .plan_run_begin = vk_plan_run_begin,
    .record = vk_record,
    .enqueue_recorded = vk_enqueue_recorded,
};

static const char *type_name(int t) {
  switch (t) {
    case 1: return "integrated GPU";
    case 2: return "discrete GPU";
    case 3: return "virtual GPU";
    case 4: return "CPU";
    default: return "other";
  }
}

int kiln_vulkan_devices_create(kiln_device **out, int max, const char **why_absent) {
  static char why[512];
  *why_absent = NULL;
  vk_device_props props[VK_MAX_DEVICES];
  kiln_status_t st = NULL;
  int n = vk_enumerate(props, VK_MAX_DEVICES, &st);
  if (n <= 0) {
    snprintf(why, sizeof why, "%s", st ? kiln_status_message(st) : "no Vulkan device found");
    kiln_status_free(st);
    *why_absent = why;
    return 0;
  }
  kiln_status_free(st);
  if (n > VK_MAX_DEVICES) n = VK_MAX_DEVICES;
  if (n > max) n = max;
  for (int i = 0; i < n; i++) {
    vk_device_state *d = &states[i];
    d->index = i;
    d->props = d->tune = props[i];
    const char *sched = getenv("KILN_VULKAN_SCHEDULE");
    if (sched && !strcmp(sched, "gpu") && d->tune.type == 4 /* VK_PHYSICAL_DEVICE_TYPE_CPU */)
      d->tune.type = 2; /* VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: limits and features stay the device's */
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->adhoc_lock, NULL);
    snprintf(d->name, sizeof d->name, "vulkan:%d", i);
    const vk_device_props *p = &props[i]; /* not d->props: snprintf must not read what it writes beside */
    snprintf(d->description, sizeof d->description,
             "%.200s (%.60s, %s; driver %.160s; Vulkan %u.%u; %.1f GiB device-local; subgroup %u%s; fp16 %s, int8 dot %s, "
             "cooperative matrix %s)",
             p->name, p->vendor, type_name(p->type), p->driver, (p->api_version >> 22) & 0x7f,
             (p->api_version >> 12) & 0x3ff, (double)p->device_local_bytes / (1 << 30), p->subgroup_size,
             p->subgroup_arithmetic ? " with arithmetic" : "", p->fp16 ? "yes" : "no", p->int8_dot ? "yes" : "no",
             p->coop_matrix ? "yes" : "no");
    devices[i] = (kiln_device){&vk_vtable, d};
    out[i] = &devices[i];
  }
  n_states = n;
  return n;
}

#else /* !KILN_HAVE_VULKAN */

void kiln_vulkan_shutdown(void) {}
uint64_t kiln_vulkan_validation_errors(void) { return 0; }

int kiln_vulkan_devices_create(kiln_device **out, int max, const char **why_absent) {
  (void)out;
  (void)max;
  *why_absent = "this kiln was built without Vulkan (vulkan/vulkan.h and shaderc/shaderc.h were not found)";
  return 0;
}

#endif

/* Vulkan: one device per usable physical device ("vulkan:0", ...; the
 * first is also "vulkan"); lazy, as loading the loader and its drivers
 * costs start-up time. */
const kiln_device_provider kiln_vulkan_provider = {
    .name = "vulkan",
    .lazy = true,
    .enumerate = kiln_vulkan_devices_create,
    .shutdown = kiln_vulkan_shutdown,
    .debug_errors = kiln_vulkan_validation_errors,
};

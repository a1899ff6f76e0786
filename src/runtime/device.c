/* The process-wide device registry. */
#include "runtime/device.h"

#include <pthread.h>

#define MAX_DEVICES 16
/* Core devices (cpu, ref, null) first, then the Vulkan devices, which are
 * enumerated only when something asks for them: loading the Vulkan loader
 * and its drivers costs start-up time every other run should not pay. */
static kiln_device *devices[MAX_DEVICES];
static int n_core, n_devices;
static pthread_once_t core_once = PTHREAD_ONCE_INIT, vulkan_once = PTHREAD_ONCE_INIT;
static const char *vulkan_absent;

static void core_init(void) {
  /* The first listed is the default device. */
  kiln_device *(*constructors[])(void) = {kiln_cpu_device_create, kiln_ref_device_create, kiln_null_device_create};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(constructors) && n_core < MAX_DEVICES; i++) {
    kiln_device *d = constructors[i]();
    if (d) devices[n_core++] = d;
  }
  n_devices = n_core;
}

static void vulkan_init(void) {
  pthread_once(&core_once, core_init);
  n_devices += kiln_vulkan_devices_create(devices + n_core, MAX_DEVICES - n_core, &vulkan_absent);
}

static void all_init(void) {
  pthread_once(&core_once, core_init);
  pthread_once(&vulkan_once, vulkan_init);
}

const char *kiln_device_vulkan_absent_reason(void) {
  all_init();
  return vulkan_absent;
}

kiln_device *kiln_device_get(const char *name) {
  if (!strncmp(name, "vulkan", 6)) all_init();
  else pthread_once(&core_once, core_init);
  for (int i = 0; i < n_devices; i++) {
    kiln_device_info info;
    devices[i]->vt->query(devices[i], &info);
    if (!strcmp(info.name, name)) return devices[i];
  }
  /* "vulkan" names the first Vulkan device (discrete GPUs come first). */
  if (!strcmp(name, "vulkan")) return kiln_device_get("vulkan:0");
  return NULL;
}

int kiln_device_list(kiln_device **out, int max) {
  all_init();
  int n = n_devices < max ? n_devices : max;
  for (int i = 0; i < n; i++) out[i] = devices[i];
  return n_devices;
}

/* ---- public API -------------------------------------------------------- */

int kiln_device_count(void) {
  all_init();
  return n_devices;
}

static kiln_device *device_at(int index) {
  pthread_once(&core_once, core_init);
  if (index >= n_core) all_init();
  return index >= 0 && index < n_devices ? devices[index] : NULL;
}

const char *kiln_device_name(int index) {
  kiln_device *d = device_at(index);
  if (!d) return NULL;
  kiln_device_info info;
  d->vt->query(d, &info);
  return info.name;
}

const char *kiln_device_description(int index) {
  kiln_device *d = device_at(index);
  if (!d) return NULL;
  kiln_device_info info;
  d->vt->query(d, &info);
  return info.description;
}

/* ---- the asynchronous runtime, with host-memory defaults ---------------- */

/* A host device's buffer. */
typedef struct host_buffer {
  size_t bytes;
  _Alignas(64) unsigned char data[];
} host_buffer;

static kiln_status_t host_range(size_t size, size_t offset, size_t bytes, const char *what) {
  if (offset > size || bytes > size - offset)
    return kiln_error(KILN_OUT_OF_RANGE, "%s: range [%zu, %zu) exceeds the buffer's %zu bytes", what, offset,
                      offset + bytes, size);
  return NULL;
}

kiln_status_t kiln_device_buffer_alloc(kiln_device *dev, size_t bytes, kiln_device_buffer **out) {
  if (dev->vt->buffer_alloc) return dev->vt->buffer_alloc(dev, bytes, out);
  host_buffer *b = aligned_alloc(64, (sizeof *b + bytes + 63) / 64 * 64);
  if (!b) return kiln_error(KILN_OUT_OF_MEMORY, "out of host memory allocating %zu bytes", bytes);
  b->bytes = bytes;
  *out = (kiln_device_buffer *)b;
  return NULL;
}

void kiln_device_buffer_free(kiln_device *dev, kiln_device_buffer *buf) {
  if (dev->vt->buffer_free) dev->vt->buffer_free(dev, buf);
  else free(buf);
}

void *kiln_device_buffer_host_address(kiln_device *dev, kiln_device_buffer *buf) {
  if (dev->vt->buffer_alloc || !buf) return NULL; /* the device's own buffers */
  return ((host_buffer *)buf)->data;
}

kiln_status_t kiln_device_upload(kiln_device *dev, kiln_device_buffer *dst, size_t offset, const void *src,
                                 size_t bytes) {
  if (dev->vt->upload) return dev->vt->upload(dev, dst, offset, src, bytes);
  host_buffer *b = (host_buffer *)dst;
  KILN_TRY(host_range(b->bytes, offset, bytes, "upload"));
  if (bytes) memcpy(b->data + offset, src, bytes);
  return NULL;
}

kiln_status_t kiln_device_readback(kiln_device *dev, void *dst, kiln_device_buffer *src, size_t offset,
                                   size_t bytes) {
  if (dev->vt->readback) return dev->vt->readback(dev, dst, src, offset, bytes);
  host_buffer *b = (host_buffer *)src;
  KILN_TRY(host_range(b->bytes, offset, bytes, "readback"));
  if (bytes) memcpy(dst, b->data + offset, bytes);
  return NULL;
}

kiln_status_t kiln_device_copy(kiln_device *dev, kiln_device_buffer *dst, size_t dst_offset,
                               kiln_device_buffer *src, size_t src_offset, size_t bytes) {
  if (dev->vt->copy) return dev->vt->copy(dev, dst, dst_offset, src, src_offset, bytes);
  host_buffer *d = (host_buffer *)dst, *s = (host_buffer *)src;
  KILN_TRY(host_range(d->bytes, dst_offset, bytes, "copy destination"));
  KILN_TRY(host_range(s->bytes, src_offset, bytes, "copy source"));
  if (bytes) memmove(d->data + dst_offset, s->data + src_offset, bytes);
  return NULL;
}

static const char *device_name(kiln_device *dev) {
  kiln_device_info info;
  dev->vt->query(dev, &info);
  return info.name;
}

kiln_status_t kiln_device_compile(kiln_device *dev, const kiln_program_desc *desc, kiln_device_program **out) {
  if (dev->vt->compile) return dev->vt->compile(dev, desc, out);
  return kiln_error(KILN_UNSUPPORTED, "device '%s' does not compile kernels (it compiles whole graphs)",
                    device_name(dev));
}

void kiln_device_program_free(kiln_device *dev, kiln_device_program *program) {
  if (program && dev->vt->program_free) dev->vt->program_free(dev, program);
}

kiln_status_t kiln_device_launch(kiln_device *dev, kiln_device_program *program, int n_buffers,
                                 kiln_device_buffer *const *buffers, const uint32_t grid[3]) {
  if (dev->vt->launch) return dev->vt->launch(dev, program, n_buffers, buffers, grid);
  return kiln_error(KILN_UNSUPPORTED, "device '%s' does not launch kernels", device_name(dev));
}

kiln_status_t kiln_device_submit(kiln_device *dev) { return dev->vt->submit ? dev->vt->submit(dev) : NULL; }

kiln_status_t kiln_device_event_record(kiln_device *dev, kiln_device_event *out) {
  if (dev->vt->event_record) return dev->vt->event_record(dev, out);
  *out = (kiln_device_event){0, 0}; /* synchronous: complete already */
  return NULL;
}

kiln_status_t kiln_device_event_wait(kiln_device *dev, kiln_device_event event) {
  return dev->vt->event_wait ? dev->vt->event_wait(dev, event) : NULL;
}

bool kiln_device_event_done(kiln_device *dev, kiln_device_event event) {
  return dev->vt->event_done ? dev->vt->event_done(dev, event) : true;
}

kiln_status_t kiln_device_synchronize(kiln_device *dev) {
  if (dev->vt->synchronize) return dev->vt->synchronize(dev);
  return NULL;
}

/* The process-wide device registry over the providers
 * (devices/providers.c); it names no device itself. */
#include "runtime/device.h"

#include <pthread.h>

#define MAX_DEVICES 32
#define MAX_PROVIDERS 16

/* Devices in provider order; eager providers are enumerated on first use,
 * lazy ones (drivers to load: start-up time every other run should not
 * pay) when a device of theirs is asked for or all are listed. */
static kiln_device *devices[MAX_DEVICES];
static int n_devices;
static int provider_of[MAX_DEVICES];
static bool enumerated[MAX_PROVIDERS];
static const char *absent[MAX_PROVIDERS];
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;

/* Enumerates provider i (registry_lock held); keeps devices in provider order. */
static void enumerate_locked(int i) {
  int n_prov;
  const kiln_device_provider *const *prov = kiln_device_providers(&n_prov);
  if (i >= n_prov || i >= MAX_PROVIDERS || enumerated[i]) return;
  enumerated[i] = true;
  kiln_device *found[MAX_DEVICES];
  const char *why = NULL;
  int n = prov[i]->enumerate(found, MAX_DEVICES - n_devices, &why);
  if (n <= 0) {
    absent[i] = why ? why : "no device found";
    return;
  }
  int at = 0; /* after every device of an earlier provider */
  while (at < n_devices && provider_of[at] < i) at++;
  memmove(devices + at + n, devices + at, (size_t)(n_devices - at) * sizeof *devices);
  memmove(provider_of + at + n, provider_of + at, (size_t)(n_devices - at) * sizeof *provider_of);
  for (int k = 0; k < n; k++) {
    devices[at + k] = found[k];
    provider_of[at + k] = i;
  }
  n_devices += n;
}

/* Enumerates the eager providers, and the lazy ones too when all is set or
 * their name prefixes `name`. */
static void ensure(bool all, const char *name) {
  int n_prov;
  const kiln_device_provider *const *prov = kiln_device_providers(&n_prov);
  pthread_mutex_lock(&registry_lock);
  for (int i = 0; i < n_prov && i < MAX_PROVIDERS; i++) {
    size_t len = strlen(prov[i]->name);
    bool named = name && !strncmp(name, prov[i]->name, len) && (name[len] == 0 || name[len] == ':');
    if (!prov[i]->lazy || all || named) enumerate_locked(i);
  }
  pthread_mutex_unlock(&registry_lock);
}

static const char *device_name_of(kiln_device *d) {
  kiln_device_info info;
  d->vt->query(d, &info);
  return info.name;
}

kiln_device *kiln_device_get(const char *name) {
  ensure(false, name);
  for (int i = 0; i < n_devices; i++)
    if (!strcmp(device_name_of(devices[i]), name)) return devices[i];
  /* A provider's plain name: its first device ("gpu" is "gpu:0"). */
  if (!strchr(name, ':')) {
    char first[128];
    snprintf(first, sizeof first, "%s:0", name);
    for (int i = 0; i < n_devices; i++)
      if (!strcmp(device_name_of(devices[i]), first)) return devices[i];
  }
  return NULL;
}

int kiln_device_list(kiln_device **out, int max) {
  ensure(true, NULL);
  int n = n_devices < max ? n_devices : max;
  for (int i = 0; i < n; i++) out[i] = devices[i];
  return n_devices;
}

const char *kiln_device_absent_reason(const char *name) {
  ensure(false, name);
  int n_prov;
  const kiln_device_provider *const *prov = kiln_device_providers(&n_prov);
  for (int i = 0; i < n_prov && i < MAX_PROVIDERS; i++) {
    size_t len = strlen(prov[i]->name);
    if (!strncmp(name, prov[i]->name, len) && (name[len] == 0 || name[len] == ':')) return absent[i];
  }
  return NULL;
}

int kiln_device_absent_list(const char **names, const char **reasons, int max) {
  ensure(true, NULL);
  int n_prov, n = 0;
  const kiln_device_provider *const *prov = kiln_device_providers(&n_prov);
  for (int i = 0; i < n_prov && i < MAX_PROVIDERS && n < max; i++)
    if (absent[i]) {
      names[n] = prov[i]->name;
      reasons[n++] = absent[i];
    }
  return n;
}

void kiln_device_shutdown_all(void) {
  int n_prov;
  const kiln_device_provider *const *prov = kiln_device_providers(&n_prov);
  for (int i = 0; i < n_prov; i++)
    if (prov[i]->shutdown && (i >= MAX_PROVIDERS || enumerated[i])) prov[i]->shutdown();
}

uint64_t kiln_device_debug_errors(void) {
  int n_prov;
  uint64_t n = 0;
  const kiln_device_provider *const *prov = kiln_device_providers(&n_prov);
  for (int i = 0; i < n_prov; i++)
    if (prov[i]->debug_errors) n += prov[i]->debug_errors();
  return n;
}

/* ---- public API -------------------------------------------------------- */

int kiln_device_count(void) {
  ensure(true, NULL);
  return n_devices;
}

/* The eager providers' devices come first (kiln_device_name(0) is the
 * default device, known without loading any driver). */
static kiln_device *device_at(int index) {
  ensure(false, NULL);
  if (index < 0) return NULL;
  int n_prov, eager = 0;
  const kiln_device_provider *const *prov = kiln_device_providers(&n_prov);
  for (int i = 0; i < n_devices; i++) eager += !prov[provider_of[i]]->lazy;
  if (index >= eager || index >= n_devices) ensure(true, NULL);
  return index < n_devices ? devices[index] : NULL;
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
  host_buffer *b = kiln_alloc_aligned_huge((sizeof *b + bytes + 63) / 64 * 64);
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

static const char *device_name(kiln_device *dev) { return device_name_of(dev); }

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

/* The process-wide device registry. */
#include "runtime/device.h"

#include <pthread.h>

#define MAX_DEVICES 16
static kiln_device *devices[MAX_DEVICES];
static int n_devices;
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;

static void devices_init(void) {
  /* The first listed is the default device. */
  kiln_device *(*constructors[])(void) = {kiln_cpu_device_create, kiln_ref_device_create, kiln_null_device_create};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(constructors) && n_devices < MAX_DEVICES; i++) {
    kiln_device *d = constructors[i]();
    if (d) devices[n_devices++] = d;
  }
}

kiln_device *kiln_device_get(const char *name) {
  pthread_once(&devices_once, devices_init);
  for (int i = 0; i < n_devices; i++) {
    kiln_device_info info;
    devices[i]->vt->query(devices[i], &info);
    if (!strcmp(info.name, name)) return devices[i];
  }
  return NULL;
}

int kiln_device_list(kiln_device **out, int max) {
  pthread_once(&devices_once, devices_init);
  int n = n_devices < max ? n_devices : max;
  for (int i = 0; i < n; i++) out[i] = devices[i];
  return n_devices;
}

kiln_status_t kiln_device_synchronize(kiln_device *dev) {
  if (dev->vt->synchronize) return dev->vt->synchronize(dev);
  return NULL;
}

/* ---- public API -------------------------------------------------------- */

int kiln_device_count(void) {
  kiln_device *d[MAX_DEVICES];
  return kiln_device_list(d, MAX_DEVICES);
}

static kiln_device *device_at(int index) {
  kiln_device *d[MAX_DEVICES];
  int n = kiln_device_list(d, MAX_DEVICES);
  return index >= 0 && index < n ? d[index] : NULL;
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

/* cu_loader.c — the CUDA driver opened at run time, and the devices it finds.
 *
 * Environment:
 *   KILN_CUDA_LIBRARY   the driver library to open instead of libcuda.so.1
 *                       (the suite points it at a fake driver). */
#include "devices/cuda/cu_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static cu_fns g_fns;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_why[512];
static const char *g_error; /* why loading or cuInit failed (g_why), or NULL */
static int g_driver_version;

const cu_fns *cu_api(void) { return &g_fns; }

static const char *error_name(CUresult r) {
  const char *name = NULL;
  if (g_fns.GetErrorName && g_fns.GetErrorName(r, &name) == 0 && name) return name;
  return "an unknown CUDA error";
}

kiln_status_t cu_check(CUresult r, const char *what) {
  if (r == 0) return NULL;
  const char *text = NULL;
  if (g_fns.GetErrorString) g_fns.GetErrorString(r, &text);
  kiln_status_code code = r == CU_ERROR_OUT_OF_MEMORY ? KILN_OUT_OF_MEMORY : KILN_DEVICE_ERROR;
  return kiln_error(code, "cuda: %s failed: %s (%d%s%s)", what, error_name(r), r, text ? ": " : "", text ? text : "");
}

static void load_once(void) {
  const char *env = getenv("KILN_CUDA_LIBRARY");
  const char *name = env && *env ? env : "libcuda.so.1";
  g_fns.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!g_fns.lib) {
    const char *e = dlerror();
    snprintf(g_why, sizeof g_why,
             "no CUDA driver: cannot open %s (%s); the NVIDIA driver installs it (kiln needs no CUDA toolkit to run, "
             "only the driver and NVRTC)",
             name, e ? e : "?");
    g_error = g_why;
    return;
  }
  const char *missing = NULL;
#define L(field, sym)                                          \
  do {                                                         \
    *(void **)&g_fns.field = dlsym(g_fns.lib, sym);            \
    if (!g_fns.field && !missing) missing = sym;               \
  } while (0)
  L(Init, "cuInit"); L(DriverGetVersion, "cuDriverGetVersion"); L(GetErrorName, "cuGetErrorName");
  L(GetErrorString, "cuGetErrorString"); L(DeviceGetCount, "cuDeviceGetCount"); L(DeviceGet, "cuDeviceGet");
  L(DeviceGetName, "cuDeviceGetName"); L(DeviceTotalMem, "cuDeviceTotalMem_v2");
  L(DeviceGetAttribute, "cuDeviceGetAttribute"); L(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  L(CtxSetCurrent, "cuCtxSetCurrent"); L(MemAlloc, "cuMemAlloc_v2"); L(MemFree, "cuMemFree_v2");
  L(MemHostAlloc, "cuMemHostAlloc"); L(MemFreeHost, "cuMemFreeHost"); L(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  L(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"); L(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  L(StreamCreate, "cuStreamCreate"); L(StreamSynchronize, "cuStreamSynchronize"); L(EventCreate, "cuEventCreate");
  L(EventRecord, "cuEventRecord"); L(EventQuery, "cuEventQuery"); L(EventSynchronize, "cuEventSynchronize");
  L(ModuleLoadData, "cuModuleLoadData"); L(ModuleGetFunction, "cuModuleGetFunction");
  L(ModuleUnload, "cuModuleUnload"); L(FuncGetAttribute, "cuFuncGetAttribute"); L(LaunchKernel, "cuLaunchKernel");
#undef L
  if (missing) {
    snprintf(g_why, sizeof g_why, "%s is not a CUDA driver kiln can use (it has no %s)", name, missing);
    g_error = g_why;
    return;
  }
  /* CUDA graphs (driver 11.4+ for cuGraphInstantiateWithFlags): optional. */
  *(void **)&g_fns.StreamBeginCapture = dlsym(g_fns.lib, "cuStreamBeginCapture_v2");
  *(void **)&g_fns.StreamEndCapture = dlsym(g_fns.lib, "cuStreamEndCapture");
  *(void **)&g_fns.GraphInstantiate = dlsym(g_fns.lib, "cuGraphInstantiateWithFlags");
  *(void **)&g_fns.GraphLaunch = dlsym(g_fns.lib, "cuGraphLaunch");
  *(void **)&g_fns.GraphExecDestroy = dlsym(g_fns.lib, "cuGraphExecDestroy");
  *(void **)&g_fns.GraphDestroy = dlsym(g_fns.lib, "cuGraphDestroy");
  if (!g_fns.StreamBeginCapture || !g_fns.StreamEndCapture || !g_fns.GraphInstantiate || !g_fns.GraphLaunch ||
      !g_fns.GraphExecDestroy || !g_fns.GraphDestroy)
    g_fns.GraphLaunch = NULL; /* the marker: no graphs */
  CUresult r = g_fns.Init(0);
  if (r) {
    snprintf(g_why, sizeof g_why, "the CUDA driver did not start: cuInit failed: %s (%d)%s", error_name(r), r,
             r == CU_ERROR_NO_DEVICE ? ": no CUDA-capable device is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)" : "");
    g_error = g_why;
    return;
  }
  g_fns.DriverGetVersion(&g_driver_version);
}

static int attribute(CUdevice dev, int attr) {
  int v = 0;
  return g_fns.DeviceGetAttribute(&v, attr, dev) == 0 ? v : 0;
}

int cu_find_devices(cu_props *out, int max, char *driver, size_t driver_size, const char **why) {
  pthread_once(&g_once, load_once);
  if (g_error) {
    *why = g_error;
    return 0;
  }
  snprintf(driver, driver_size, "%d.%d", g_driver_version / 1000, g_driver_version % 1000 / 10);
  int count = 0;
  CUresult r = g_fns.DeviceGetCount(&count);
  if (r || count <= 0) {
    snprintf(g_why, sizeof g_why, "the CUDA driver %s sees no device (cuDeviceGetCount: %s)", driver,
             r ? error_name(r) : "0 devices");
    *why = g_why;
    return 0;
  }
  int n = 0;
  for (int i = 0; i < count && n < max; i++) {
    cu_props *p = &out[n];
    memset(p, 0, sizeof *p);
    if (g_fns.DeviceGet(&p->id, i)) continue;
    p->ordinal = i;
    if (g_fns.DeviceGetName(p->name, (int)sizeof p->name - 1, p->id)) snprintf(p->name, sizeof p->name, "?");
    size_t bytes = 0;
    g_fns.DeviceTotalMem(&bytes, p->id);
    p->memory_bytes = bytes;
    p->cc_major = attribute(p->id, CU_ATTR_CC_MAJOR);
    p->cc_minor = attribute(p->id, CU_ATTR_CC_MINOR);
    p->multiprocessors = attribute(p->id, CU_ATTR_MULTIPROCESSORS);
    p->warp_size = attribute(p->id, CU_ATTR_WARP_SIZE);
    p->max_threads_per_block = attribute(p->id, CU_ATTR_MAX_THREADS_PER_BLOCK);
    p->shared_per_block = attribute(p->id, CU_ATTR_MAX_SHARED_PER_BLOCK);
    n++;
  }
  if (!n) {
    snprintf(g_why, sizeof g_why, "the CUDA driver lists %d device(s) but none could be opened", count);
    *why = g_why;
  }
  return n;
}

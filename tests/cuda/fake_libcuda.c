/* fake_libcuda.c — a fake CUDA driver (libcuda.so.1) for kiln's tests.
 *
 * The CUDA device dlopen()s the driver; on a machine with no GPU the suite
 * points KILN_CUDA_LIBRARY at this library instead, so the device's driver
 * handling runs for real: enumeration, memory (allocations are host memory,
 * and every copy's device range must lie inside one live allocation),
 * pinned staging, modules (the image must be an ELF cubin, and every
 * function asked for must be named in it), launches (the function must be
 * live, the dimensions legal) and CUDA graphs (stream capture, replay).
 * Kernels are never run, so results are meaningless and never compared.
 *
 * Environment (all optional):
 *   FAKE_CUDA_INIT_ERROR=N    cuInit returns N (100: no device)
 *   FAKE_CUDA_DEVICES=N       device count (default 1)
 *   FAKE_CUDA_MEMORY=BYTES    device memory (default 1 GiB); allocations past it fail
 *   FAKE_CUDA_CC=XY           compute capability (default 90)
 *   FAKE_CUDA_MODULE_ERROR=N  cuModuleLoadData returns N
 *   FAKE_CUDA_NO_GRAPHS=1     stream capture is refused (CUDA_ERROR_NOT_SUPPORTED)
 *   FAKE_CUDA_STATS=1         one line of counts to stderr at exit
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

/* The handles: each kind a struct of its own so a wrong one is caught. */
typedef struct fake_module {
  uint8_t *image;
  size_t size;
  int live;
  struct fake_module *next;
} *CUmodule;
typedef struct fake_function {
  CUmodule module;
  struct fake_function *next;
} *CUfunction;
typedef struct fake_node {
  CUfunction f;
} fake_node;
typedef struct fake_graph {
  fake_node *nodes;
  int n;
} *CUgraph, *CUgraphExec;
typedef struct fake_stream {
  int capturing;
  struct fake_graph *capture;
} *CUstream;
typedef struct fake_event {
  int magic;
} *CUevent;
typedef struct fake_ctx {
  int device;
} *CUcontext;

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, INVALID_DEVICE = 101, INVALID_IMAGE = 200,
       INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_SUPPORTED = 801, CAPTURE_UNSUPPORTED = 900 };

typedef struct alloc {
  uintptr_t base;
  size_t size;
  int host; /* cuMemHostAlloc */
  struct alloc *next;
} alloc;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_init;
static alloc *g_allocs;
static size_t g_device_used;
static CUmodule g_modules;
static CUfunction g_functions;
static struct fake_ctx g_ctx[16];
static long long g_launches, g_graph_node_launches, g_graph_launches, g_up, g_down;
static int g_modules_loaded;

static long env_long(const char *name, long fallback) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 10) : fallback;
}

static size_t device_memory(void) {
  const char *v = getenv("FAKE_CUDA_MEMORY");
  return v && *v ? (size_t)strtoull(v, NULL, 10) : (size_t)1 << 30;
}

#define NEED_INIT() \
  if (!g_init) return NOT_INITIALIZED

static const struct {
  CUresult code;
  const char *name, *text;
} g_errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "CUDA driver version is insufficient for CUDA runtime version"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
};

static CUresult lookup_error(CUresult r, const char **out, int text) {
  for (size_t i = 0; i < sizeof g_errors / sizeof *g_errors; i++)
    if (g_errors[i].code == r) {
      *out = text ? g_errors[i].text : g_errors[i].name;
      return OK;
    }
  *out = NULL;
  return INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult r, const char **name) { return lookup_error(r, name, 0); }
CUresult cuGetErrorString(CUresult r, const char **text) { return lookup_error(r, text, 1); }

CUresult cuInit(unsigned flags) {
  (void)flags;
  CUresult r = (CUresult)env_long("FAKE_CUDA_INIT_ERROR", 0);
  if (!r) g_init = 1;
  return r;
}

CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return OK;
}

CUresult cuDeviceGetCount(int *n) {
  NEED_INIT();
  *n = (int)env_long("FAKE_CUDA_DEVICES", 1);
  return OK;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  NEED_INIT();
  if (ordinal < 0 || ordinal >= env_long("FAKE_CUDA_DEVICES", 1) || ordinal >= 16) return INVALID_DEVICE;
  *d = ordinal;
  return OK;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  NEED_INIT();
  (void)d;
  snprintf(name, (size_t)len, "kiln fake CUDA device");
  return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  NEED_INIT();
  (void)d;
  *bytes = device_memory();
  return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
  NEED_INIT();
  (void)d;
  long cc = env_long("FAKE_CUDA_CC", 90);
  switch (attr) {
    case 75: *v = (int)(cc / 10); break;
    case 76: *v = (int)(cc % 10); break;
    case 10: *v = 32; break;
    case 16: *v = 132; break;
    case 1: *v = 1024; break;
    case 8: *v = 49152; break;
    default: *v = 0;
  }
  return OK;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  NEED_INIT();
  if (d < 0 || d >= 16) return INVALID_DEVICE;
  g_ctx[d].device = d;
  *c = &g_ctx[d];
  return OK;
}

CUresult cuCtxSetCurrent(CUcontext c) {
  NEED_INIT();
  if (c && (c < g_ctx || c >= g_ctx + 16)) return INVALID_CONTEXT;
  return OK;
}

/* ---- memory ---------------------------------------------------------------------------- */

static alloc *find_alloc(uintptr_t p, size_t bytes, int host) {
  for (alloc *a = g_allocs; a; a = a->next)
    if (a->host == host && p >= a->base && p + bytes <= a->base + a->size && p + bytes >= p) return a;
  return NULL;
}

static CUresult track(uintptr_t base, size_t size, int host) {
  alloc *a = malloc(sizeof *a);
  if (!a) return OUT_OF_MEMORY;
  *a = (alloc){base, size, host, g_allocs};
  g_allocs = a;
  return OK;
}

static int untrack(uintptr_t base, int host) {
  for (alloc **pp = &g_allocs; *pp; pp = &(*pp)->next)
    if ((*pp)->base == base && (*pp)->host == host) {
      alloc *a = *pp;
      *pp = a->next;
      if (!host) g_device_used -= a->size;
      free(a);
      return 1;
    }
  return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  NEED_INIT();
  if (!bytes) return INVALID_VALUE;
  size_t size = (bytes + 255) / 256 * 256;
  pthread_mutex_lock(&g_lock);
  CUresult r = OK;
  void *mem = NULL;
  if (g_device_used + size > device_memory() || !(mem = aligned_alloc(256, size))) r = OUT_OF_MEMORY;
  if (!r) memset(mem, 0, size);
  if (!r && (r = track((uintptr_t)mem, size, 0))) free(mem);
  if (!r) {
    g_device_used += size;
    *p = (CUdeviceptr)(uintptr_t)mem;
  }
  pthread_mutex_unlock(&g_lock);
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  NEED_INIT();
  pthread_mutex_lock(&g_lock);
  int found = untrack((uintptr_t)p, 0);
  pthread_mutex_unlock(&g_lock);
  if (!found) return INVALID_VALUE;
  free((void *)(uintptr_t)p);
  return OK;
}

CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
  NEED_INIT();
  (void)flags;
  void *mem = malloc(bytes ? bytes : 1);
  if (!mem) return OUT_OF_MEMORY;
  pthread_mutex_lock(&g_lock);
  CUresult r = track((uintptr_t)mem, bytes, 1);
  pthread_mutex_unlock(&g_lock);
  if (r) free(mem);
  else *p = mem;
  return r;
}

CUresult cuMemFreeHost(void *p) {
  NEED_INIT();
  pthread_mutex_lock(&g_lock);
  int found = untrack((uintptr_t)p, 1);
  pthread_mutex_unlock(&g_lock);
  if (!found) return INVALID_VALUE;
  free(p);
  return OK;
}

/* A copy: each device range inside one live allocation; never while capturing. */
static CUresult copy(const char *what, CUstream s, uintptr_t dst, int dst_dev, uintptr_t src, int src_dev, size_t n,
                     long long *counter) {
  NEED_INIT();
  if (s && s->capturing) return CAPTURE_UNSUPPORTED;
  pthread_mutex_lock(&g_lock);
  CUresult r = OK;
  const uintptr_t ends[2] = {dst, src};
  const int dev[2] = {dst_dev, src_dev};
  for (int i = 0; i < 2 && !r; i++)
    if (dev[i] && !find_alloc(ends[i], n, 0)) {
      fprintf(stderr, "fake cuda: %s: [0x%llx, +%zu) is not inside a live allocation\n", what,
              (unsigned long long)ends[i], n);
      r = INVALID_VALUE;
    }
  if (!r) {
    memmove((void *)dst, (const void *)src, n);
    if (counter) *counter += (long long)n;
  }
  pthread_mutex_unlock(&g_lock);
  return r;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  return copy("cuMemcpyHtoDAsync", s, (uintptr_t)dst, 1, (uintptr_t)src, 0, n, &g_up);
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy("cuMemcpyDtoHAsync", s, (uintptr_t)dst, 0, (uintptr_t)src, 1, n, &g_down);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return copy("cuMemcpyDtoDAsync", s, (uintptr_t)dst, 1, (uintptr_t)src, 1, n, NULL);
}

/* ---- streams and events: work is done when enqueued ------------------------------------ */

CUresult cuStreamCreate(CUstream *s, unsigned flags) {
  NEED_INIT();
  (void)flags;
  return (*s = calloc(1, sizeof **s)) ? OK : OUT_OF_MEMORY;
}

CUresult cuStreamSynchronize(CUstream s) {
  NEED_INIT();
  return s && s->capturing ? CAPTURE_UNSUPPORTED : OK;
}

CUresult cuEventCreate(CUevent *e, unsigned flags) {
  NEED_INIT();
  (void)flags;
  if (!(*e = calloc(1, sizeof **e))) return OUT_OF_MEMORY;
  (*e)->magic = 0x4556;
  return OK;
}

static CUresult check_event(CUevent e) { return e && e->magic == 0x4556 ? OK : INVALID_HANDLE; }
CUresult cuEventRecord(CUevent e, CUstream s) {
  NEED_INIT();
  if (s && s->capturing) return CAPTURE_UNSUPPORTED;
  return check_event(e);
}
CUresult cuEventQuery(CUevent e) {
  NEED_INIT();
  return check_event(e);
}
CUresult cuEventSynchronize(CUevent e) {
  NEED_INIT();
  return check_event(e);
}

/* ---- modules and launches -------------------------------------------------------------- */

static uint64_t le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
  NEED_INIT();
  CUresult forced = (CUresult)env_long("FAKE_CUDA_MODULE_ERROR", 0);
  if (forced) return forced;
  const uint8_t *p = image;
  if (!p || memcmp(p, "\x7f" "ELF", 4) || p[4] != 2) return INVALID_IMAGE; /* a 64-bit ELF cubin, not PTX */
  size_t size = (size_t)(le(p + 0x28, 8) + le(p + 0x3C, 2) * le(p + 0x3A, 2));
  if (size < 64 || size > ((size_t)1 << 30)) return INVALID_IMAGE;
  CUmodule mod = calloc(1, sizeof *mod);
  if (!mod || !(mod->image = malloc(size))) {
    free(mod);
    return OUT_OF_MEMORY;
  }
  memcpy(mod->image, p, size);
  mod->size = size;
  mod->live = 1;
  pthread_mutex_lock(&g_lock);
  mod->next = g_modules;
  g_modules = mod;
  g_modules_loaded++;
  pthread_mutex_unlock(&g_lock);
  *m = mod;
  return OK;
}

static int module_live(CUmodule m) {
  for (CUmodule x = g_modules; x; x = x->next)
    if (x == m) return x->live;
  return 0;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  NEED_INIT();
  pthread_mutex_lock(&g_lock);
  CUresult r = module_live(m) ? OK : INVALID_HANDLE;
  size_t n = strlen(name);
  char *needle = r ? NULL : malloc(n + 2);
  if (needle) {
    needle[0] = 0;
    memcpy(needle + 1, name, n + 1); /* "\0name\0": a whole string of the symbol table */
    if (!memmem(m->image, m->size, needle, n + 2)) r = NOT_FOUND;
    free(needle);
  } else if (!r) {
    r = OUT_OF_MEMORY;
  }
  CUfunction fn = r ? NULL : calloc(1, sizeof *fn);
  if (!r && !fn) r = OUT_OF_MEMORY;
  if (!r) {
    fn->module = m;
    fn->next = g_functions;
    g_functions = fn;
    *f = fn;
  }
  pthread_mutex_unlock(&g_lock);
  return r;
}

CUresult cuModuleUnload(CUmodule m) {
  NEED_INIT();
  pthread_mutex_lock(&g_lock);
  CUresult r = module_live(m) ? OK : INVALID_HANDLE;
  if (!r) {
    m->live = 0; /* kept, so a later launch of its functions is caught */
    free(m->image);
    m->image = NULL;
  }
  pthread_mutex_unlock(&g_lock);
  return r;
}

CUresult cuFuncGetAttribute(int *v, int attr, CUfunction f) {
  NEED_INIT();
  (void)f;
  *v = attr == 0 ? 1024 : 0;
  return OK;
}

static int function_live(CUfunction f) {
  for (CUfunction x = g_functions; x; x = x->next)
    if (x == f) return module_live(f->module);
  return 0;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void **params, void **extra) {
  NEED_INIT();
  (void)shared;
  (void)extra;
  pthread_mutex_lock(&g_lock);
  CUresult r = function_live(f) ? OK : INVALID_HANDLE;
  if (!r && (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024 || gx > 2147483647u ||
             !params))
    r = INVALID_VALUE;
  if (!r && s && s->capturing) {
    struct fake_graph *g = s->capture;
    fake_node *nodes = realloc(g->nodes, (size_t)(g->n + 1) * sizeof *nodes);
    if (!nodes) r = OUT_OF_MEMORY;
    else (g->nodes = nodes)[g->n++].f = f;
  } else if (!r) {
    g_launches++;
  }
  pthread_mutex_unlock(&g_lock);
  return r;
}

/* ---- graphs ---------------------------------------------------------------------------- */

CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
  NEED_INIT();
  (void)mode;
  const char *off = getenv("FAKE_CUDA_NO_GRAPHS");
  if (off && *off) return NOT_SUPPORTED;
  if (!s || s->capturing) return INVALID_VALUE;
  if (!(s->capture = calloc(1, sizeof *s->capture))) return OUT_OF_MEMORY;
  s->capturing = 1;
  return OK;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  NEED_INIT();
  if (!s || !s->capturing) return INVALID_VALUE;
  s->capturing = 0;
  *g = s->capture;
  s->capture = NULL;
  return OK;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
  NEED_INIT();
  (void)flags;
  if (!g) return INVALID_VALUE;
  CUgraphExec x = calloc(1, sizeof *x);
  if (!x || (g->n && !(x->nodes = malloc((size_t)g->n * sizeof *x->nodes)))) {
    free(x);
    return OUT_OF_MEMORY;
  }
  if (g->n) memcpy(x->nodes, g->nodes, (size_t)g->n * sizeof *x->nodes);
  x->n = g->n;
  *e = x;
  return OK;
}

CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  NEED_INIT();
  if (!e || (s && s->capturing)) return INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  CUresult r = OK;
  for (int i = 0; i < e->n && !r; i++)
    if (!function_live(e->nodes[i].f)) r = INVALID_HANDLE;
  if (!r) {
    g_graph_launches++;
    g_graph_node_launches += e->n;
    g_launches += e->n;
  }
  pthread_mutex_unlock(&g_lock);
  return r;
}

static void graph_free(struct fake_graph *g) {
  if (g) free(g->nodes);
  free(g);
}
CUresult cuGraphExecDestroy(CUgraphExec e) {
  graph_free(e);
  return OK;
}
CUresult cuGraphDestroy(CUgraph g) {
  graph_free(g);
  return OK;
}

__attribute__((destructor)) static void report(void) {
  const char *on = getenv("FAKE_CUDA_STATS");
  if (!on || !*on) return;
  int live = 0;
  for (alloc *a = g_allocs; a; a = a->next) live += !a->host;
  fprintf(stderr,
          "fake cuda: %d modules loaded, %lld launches (%lld from %lld graph launches), %lld bytes up, %lld bytes "
          "down, %d allocations live\n",
          g_modules_loaded, g_launches, g_graph_node_launches, g_graph_launches, g_up, g_down, live);
}

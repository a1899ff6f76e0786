/* cl_loader.c — the ICD loader opened at run time, and the devices it finds.
 *
 * Environment:
 *   KILN_OPENCL_LIBRARY   the loader to open instead of libOpenCL.so.1.
 *   POCL_WORK_GROUP_METHOD  set to "loops" when unset on a CPU with
 *                         AVX-512: PoCL's default method can take many
 *                         minutes to compile one kernel there. */
#if KILN_HAVE_OPENCL

#include "devices/opencl/cl_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/cpu_features.h"

static cl_fns g_fns;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_why[512];
static const char *g_error; /* why loading failed (g_why), or NULL */

const cl_fns *cl_api(void) { return &g_fns; }

const char *cl_error_name(cl_int err) {
  switch (err) {
#define N(x) \
  case x: return #x;
    N(CL_SUCCESS) N(CL_DEVICE_NOT_FOUND) N(CL_DEVICE_NOT_AVAILABLE) N(CL_COMPILER_NOT_AVAILABLE)
    N(CL_MEM_OBJECT_ALLOCATION_FAILURE) N(CL_OUT_OF_RESOURCES) N(CL_OUT_OF_HOST_MEMORY)
    N(CL_BUILD_PROGRAM_FAILURE) N(CL_INVALID_VALUE) N(CL_INVALID_DEVICE) N(CL_INVALID_CONTEXT)
    N(CL_INVALID_COMMAND_QUEUE) N(CL_INVALID_MEM_OBJECT) N(CL_INVALID_BINARY) N(CL_INVALID_BUILD_OPTIONS)
    N(CL_INVALID_PROGRAM) N(CL_INVALID_PROGRAM_EXECUTABLE) N(CL_INVALID_KERNEL_NAME) N(CL_INVALID_KERNEL)
    N(CL_INVALID_ARG_INDEX) N(CL_INVALID_ARG_VALUE) N(CL_INVALID_ARG_SIZE) N(CL_INVALID_KERNEL_ARGS)
    N(CL_INVALID_WORK_DIMENSION) N(CL_INVALID_WORK_GROUP_SIZE) N(CL_INVALID_WORK_ITEM_SIZE)
    N(CL_INVALID_GLOBAL_OFFSET) N(CL_INVALID_EVENT) N(CL_INVALID_OPERATION) N(CL_INVALID_BUFFER_SIZE)
    N(CL_INVALID_GLOBAL_WORK_SIZE) N(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) N(CL_INVALID_PLATFORM)
#undef N
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "an unknown OpenCL error";
  }
}

kiln_status_t cl_check(cl_int err, const char *what) {
  if (err == CL_SUCCESS) return NULL;
  kiln_status_code code = KILN_INTERNAL;
  if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY)
    code = KILN_OUT_OF_MEMORY;
  return kiln_error(code, "opencl: %s failed: %s (%d)", what, cl_error_name(err), (int)err);
}

static void load_once(void) {
  const kiln_cpu_features *cpu = kiln_cpu_features_native();
  if (cpu && cpu->avx512f) setenv("POCL_WORK_GROUP_METHOD", "loops", 0);
  const char *env = getenv("KILN_OPENCL_LIBRARY");
  const char *names[] = {env && *env ? env : "libOpenCL.so.1", env && *env ? NULL : "libOpenCL.so"};
  const char *first_error = NULL;
  char err_copy[256] = "";
  for (int i = 0; i < 2 && !g_fns.lib && names[i]; i++) {
    g_fns.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!g_fns.lib && !first_error) {
      first_error = dlerror();
      snprintf(err_copy, sizeof err_copy, "%s", first_error ? first_error : "?");
    }
  }
  if (!g_fns.lib) {
    snprintf(g_why, sizeof g_why, "no OpenCL ICD loader: cannot open %s (%s); install ocl-icd-libopencl1 and a driver",
             names[0], err_copy);
    g_error = g_why;
    return;
  }
  const char *missing = NULL;
#define L(f)                                                           \
  do {                                                                 \
    *(void **)&g_fns.f = dlsym(g_fns.lib, "cl" #f);                    \
    if (!g_fns.f && !missing) missing = "cl" #f;                       \
  } while (0)
  L(GetPlatformIDs); L(GetPlatformInfo); L(GetDeviceIDs); L(GetDeviceInfo); L(CreateContext); L(ReleaseContext);
  L(CreateCommandQueue); L(ReleaseCommandQueue); L(CreateBuffer); L(ReleaseMemObject); L(EnqueueWriteBuffer);
  L(EnqueueReadBuffer); L(EnqueueCopyBuffer); L(CreateProgramWithSource); L(CreateProgramWithBinary);
  L(BuildProgram); L(GetProgramBuildInfo); L(GetProgramInfo); L(ReleaseProgram); L(CreateKernel);
  L(ReleaseKernel); L(SetKernelArg); L(GetKernelWorkGroupInfo); L(EnqueueNDRangeKernel);
  L(EnqueueMarkerWithWaitList); L(WaitForEvents); L(GetEventInfo); L(ReleaseEvent); L(Flush); L(Finish);
#undef L
  if (missing) {
    snprintf(g_why, sizeof g_why, "%s is not an OpenCL 1.2 ICD loader (it has no %s)", names[0], missing);
    g_error = g_why;
  }
}

static void info_string(cl_device_id dev, cl_device_info what, char *out, size_t size) {
  out[0] = '\0';
  if (g_fns.GetDeviceInfo(dev, what, size - 1, out, NULL) != CL_SUCCESS) snprintf(out, size, "?");
  out[size - 1] = '\0';
}

static uint64_t info_u64(cl_device_id dev, cl_device_info what) {
  cl_ulong v = 0;
  return g_fns.GetDeviceInfo(dev, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

static unsigned info_uint(cl_device_id dev, cl_device_info what) {
  cl_uint v = 0;
  return g_fns.GetDeviceInfo(dev, what, sizeof v, &v, NULL) == CL_SUCCESS ? v : 0;
}

static void describe(cl_platform_id platform, cl_device_id id, cl_props *p) {
  memset(p, 0, sizeof *p);
  p->platform = platform;
  p->id = id;
  info_string(id, CL_DEVICE_NAME, p->name, sizeof p->name);
  info_string(id, CL_DEVICE_VENDOR, p->vendor, sizeof p->vendor);
  info_string(id, CL_DRIVER_VERSION, p->driver, sizeof p->driver);
  info_string(id, CL_DEVICE_VERSION, p->version, sizeof p->version);
  if (g_fns.GetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof p->platform_name - 1, p->platform_name, NULL))
    snprintf(p->platform_name, sizeof p->platform_name, "?");
  g_fns.GetDeviceInfo(id, CL_DEVICE_TYPE, sizeof p->type, &p->type, NULL);
  p->global_bytes = info_u64(id, CL_DEVICE_GLOBAL_MEM_SIZE);
  p->max_alloc_bytes = info_u64(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  p->compute_units = info_uint(id, CL_DEVICE_MAX_COMPUTE_UNITS);
  p->mem_align = info_uint(id, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;
  if (p->mem_align < 64) p->mem_align = 64;
  size_t wg = 0;
  g_fns.GetDeviceInfo(id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
  p->max_work_group = wg ? wg : 1;
  char ext[4096];
  info_string(id, CL_DEVICE_EXTENSIONS, ext, sizeof ext);
  p->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
  p->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
  /* The width a GPU runs work items in lockstep: NVIDIA's warp, AMD's
   * wavefront; OpenCL 1.2 has no query for it, so only the vendors' own. */
  if (p->type & CL_DEVICE_TYPE_GPU) {
    if (strstr(p->vendor, "NVIDIA")) p->subgroup_size = 32;
    else if (strstr(p->vendor, "Advanced Micro Devices") || strstr(p->vendor, "AMD")) p->subgroup_size = 64;
  }
}

static int rank_of(cl_device_type t) {
  return t & CL_DEVICE_TYPE_GPU ? 0 : t & CL_DEVICE_TYPE_ACCELERATOR ? 1 : 2;
}

int cl_find_devices(cl_props *out, int max, const char **why) {
  pthread_once(&g_once, load_once);
  if (g_error) {
    *why = g_error;
    return 0;
  }
  cl_platform_id platforms[16];
  cl_uint n_platforms = 0;
  cl_int err = g_fns.GetPlatformIDs(16, platforms, &n_platforms);
  if (err != CL_SUCCESS || n_platforms == 0) {
    snprintf(g_why, sizeof g_why,
             "no OpenCL platform: the ICD loader found no driver (clGetPlatformIDs: %s; drivers are listed in "
             "/etc/OpenCL/vendors or OCL_ICD_VENDORS; install pocl-opencl-icd for the CPU)",
             cl_error_name(err));
    *why = g_why;
    return 0;
  }
  int n = 0;
  for (int rank = 0; rank < 3; rank++)
    for (cl_uint p = 0; p < n_platforms && p < 16; p++) {
      cl_device_id ids[16];
      cl_uint n_ids = 0;
      if (g_fns.GetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 16, ids, &n_ids) != CL_SUCCESS) continue;
      for (cl_uint i = 0; i < n_ids && i < 16 && n < max; i++) {
        cl_device_type t = 0;
        g_fns.GetDeviceInfo(ids[i], CL_DEVICE_TYPE, sizeof t, &t, NULL);
        if (rank_of(t) != rank) continue;
        cl_bool available = CL_FALSE, compiler = CL_FALSE;
        g_fns.GetDeviceInfo(ids[i], CL_DEVICE_AVAILABLE, sizeof available, &available, NULL);
        g_fns.GetDeviceInfo(ids[i], CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler, NULL);
        if (!available || !compiler) continue; /* kiln builds every kernel from source */
        describe(platforms[p], ids[i], &out[n++]);
      }
    }
  if (n == 0) {
    snprintf(g_why, sizeof g_why, "no OpenCL device with a compiler on %u platform(s)", n_platforms);
    *why = g_why;
  }
  return n;
}

#else
typedef int kiln_cl_loader_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_OPENCL */

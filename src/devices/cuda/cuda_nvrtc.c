/* NVRTC through dlopen (see cuda_nvrtc.h). The few entry points kiln uses
 * are declared here by their documented C signatures, so building needs no
 * CUDA headers. */
#include "devices/cuda/cuda_nvrtc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

#define KILN_NVRTC_MAX_EXTRA 16

typedef struct nvrtc_program *nvrtc_program; /* nvrtcProgram */
typedef int nvrtc_result;                    /* nvrtcResult: 0 is NVRTC_SUCCESS */

static struct {
  nvrtc_result (*version)(int *major, int *minor);
  nvrtc_result (*create)(nvrtc_program *prog, const char *src, const char *name, int n_headers,
                         const char *const *headers, const char *const *include_names);
  nvrtc_result (*compile)(nvrtc_program prog, int n_options, const char *const *options);
  nvrtc_result (*log_size)(nvrtc_program prog, size_t *size);
  nvrtc_result (*log)(nvrtc_program prog, char *log);
  nvrtc_result (*cubin_size)(nvrtc_program prog, size_t *size);
  nvrtc_result (*cubin)(nvrtc_program prog, char *cubin);
  nvrtc_result (*destroy)(nvrtc_program *prog);
  const char *(*error_string)(nvrtc_result r);
} fns;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[1024];
static int major_version, minor_version;

static void *open_first(void) {
  const char *env = getenv("KILN_NVRTC");
  if (env && *env) {
    void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (!h) snprintf(load_error, sizeof load_error, "cannot load NVRTC %s (set by KILN_NVRTC): %s", env, dlerror());
    return h;
  }
  const char *names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  char tried[768] = "";
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  const char *home = getenv("CUDA_HOME");
  const char *dirs[] = {home && *home ? home : NULL, "/usr/local/cuda"};
  for (size_t d = 0; d < sizeof dirs / sizeof *dirs; d++) {
    if (!dirs[d]) continue;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
      char path[512];
      snprintf(path, sizeof path, "%s/lib64/%s", dirs[d], names[i]);
      void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) return h;
    }
    size_t len = strlen(tried);
    snprintf(tried + len, sizeof tried - len, "%s%s/lib64", len ? ", " : "", dirs[d]);
  }
  snprintf(load_error, sizeof load_error,
           "NVRTC not found (libnvrtc.so.13, .12 or libnvrtc.so on the loader's path or under %s; set KILN_NVRTC "
           "or CUDA_HOME)",
           tried);
  return NULL;
}

static void load(void) {
  void *h = open_first();
  if (!h) return;
#define NVRTC_SYM(field, name)                                                                       \
  if (!(*(void **)&fns.field = dlsym(h, name))) {                                                    \
    snprintf(load_error, sizeof load_error, "NVRTC library lacks %s: %s", name, dlerror());          \
    memset(&fns, 0, sizeof fns);                                                                     \
    return;                                                                                          \
  }
  NVRTC_SYM(version, "nvrtcVersion")
  NVRTC_SYM(create, "nvrtcCreateProgram")
  NVRTC_SYM(compile, "nvrtcCompileProgram")
  NVRTC_SYM(log_size, "nvrtcGetProgramLogSize")
  NVRTC_SYM(log, "nvrtcGetProgramLog")
  NVRTC_SYM(cubin_size, "nvrtcGetCUBINSize")
  NVRTC_SYM(cubin, "nvrtcGetCUBIN")
  NVRTC_SYM(destroy, "nvrtcDestroyProgram")
  NVRTC_SYM(error_string, "nvrtcGetErrorString")
#undef NVRTC_SYM
  if (fns.version(&major_version, &minor_version) != 0) {
    snprintf(load_error, sizeof load_error, "nvrtcVersion failed");
    memset(&fns, 0, sizeof fns);
  }
}

kiln_status_t kiln_nvrtc_available(char *version, size_t n) {
  pthread_once(&load_once, load);
  if (!fns.compile) return kiln_error(KILN_NOT_FOUND, "%s", load_error[0] ? load_error : "NVRTC not loaded");
  if (version && n) snprintf(version, n, "%d.%d", major_version, minor_version);
  return NULL;
}

const char *kiln_nvrtc_options(void) {
  const char *o = getenv("KILN_NVRTC_OPTIONS");
  return o ? o : "";
}

kiln_status_t kiln_nvrtc_compile(const char *source, const char *name, int arch, void **out_cubin, size_t *out_size) {
  *out_cubin = NULL;
  *out_size = 0;
  KILN_TRY(kiln_nvrtc_available(NULL, 0));
  nvrtc_program prog = NULL;
  nvrtc_result r = fns.create(&prog, source, name, 0, NULL, NULL);
  if (r) return kiln_error(KILN_DEVICE_ERROR, "NVRTC: creating program '%s': %s", name, fns.error_string(r));
  char arch_opt[48];
  snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=sm_%d", arch);
  const char *opts[3 + KILN_NVRTC_MAX_EXTRA] = {arch_opt, "--std=c++17", "-default-device"};
  int n_opts = 3;
  /* KILN_NVRTC_OPTIONS: more options, split at spaces (e.g. -lineinfo). */
  char extra[1024];
  snprintf(extra, sizeof extra, "%s", kiln_nvrtc_options());
  for (char *save = NULL, *tok = strtok_r(extra, " \t", &save); tok && n_opts < (int)KILN_ARRAY_SIZE(opts);
       tok = strtok_r(NULL, " \t", &save))
    opts[n_opts++] = tok;
  r = fns.compile(prog, n_opts, opts);
  kiln_status_t st = NULL;
  if (r) {
    size_t ls = 0;
    char *log = NULL;
    if (!fns.log_size(prog, &ls) && ls && (log = malloc(ls + 1)) && !fns.log(prog, log)) log[ls] = 0;
    /* The log's start names the first errors; a broken prelude can make thousands. */
    st = kiln_error(KILN_DEVICE_ERROR, "NVRTC: compiling '%s' for sm_%d: %s\n%.3000s%s", name, arch,
                    fns.error_string(r), log ? log : "(no log)", log && strlen(log) > 3000 ? "\n..." : "");
    free(log);
  } else {
    size_t cs = 0;
    char *cubin = NULL;
    if ((r = fns.cubin_size(prog, &cs)) || !cs) {
      st = kiln_error(KILN_DEVICE_ERROR, "NVRTC: '%s' produced no cubin for sm_%d", name, arch);
    } else if (!(cubin = malloc(cs))) {
      st = KILN_OOM();
    } else if ((r = fns.cubin(prog, cubin))) {
      free(cubin);
      st = kiln_error(KILN_DEVICE_ERROR, "NVRTC: reading the cubin of '%s': %s", name, fns.error_string(r));
    } else {
      *out_cubin = cubin;
      *out_size = cs;
    }
  }
  fns.destroy(&prog);
  return st;
}

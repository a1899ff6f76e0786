/* cuda_nvrtc.h — NVRTC (the CUDA runtime compiler), loaded at run time.
 *
 * kiln has no link-time dependency on CUDA: libnvrtc is dlopen'd on first
 * use (KILN_NVRTC names the library; else libnvrtc.so.13, .12, libnvrtc.so
 * on the loader's path, then under $CUDA_HOME/lib64 and
 * /usr/local/cuda/lib64). Kernels compile to a cubin for one exact compute
 * capability (sm_XY), never to PTX left for the driver to finish.
 * Thread-safe (NVRTC programs are independent).
 */
#ifndef KILN_DEVICES_CUDA_CUDA_NVRTC_H
#define KILN_DEVICES_CUDA_CUDA_NVRTC_H

#include "base/status.h"

/* NULL when NVRTC loads, else why not (with every path tried). *version
 * (may be NULL) gets "major.minor". */
kiln_status_t kiln_nvrtc_available(char *version, size_t n);

/* KILN_NVRTC_OPTIONS: options added to every compile (split at spaces,
 * at most 16), "" when unset; part of the CUDA device's cubin cache key. */
const char *kiln_nvrtc_options(void);

/* Compiles a CUDA C source for sm_<arch> (90 for an H100/H200). On
 * success *out_cubin (malloc'd; free) holds *out_size bytes. A compile
 * error returns KILN_DEVICE_ERROR whose message carries NVRTC's log. */
kiln_status_t kiln_nvrtc_compile(const char *source, const char *name, int arch, void **out_cubin, size_t *out_size);

#endif

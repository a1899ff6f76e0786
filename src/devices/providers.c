/* The device providers, in priority order: the first device of the first
 * provider that has one is kiln's default device. Adding a device: its
 * folder defines a kiln_device_provider (start from null/), and it is
 * listed here. */
#include "runtime/device.h"

extern const kiln_device_provider kiln_cpu_provider;
extern const kiln_device_provider kiln_ref_provider;
extern const kiln_device_provider kiln_null_provider;
extern const kiln_device_provider kiln_vulkan_provider;
extern const kiln_device_provider kiln_opencl_provider;
extern const kiln_device_provider kiln_cuda_provider;

static const kiln_device_provider *const providers[] = {
    &kiln_cpu_provider,    /* compiled C (a C compiler at run time) */
    &kiln_ref_provider,    /* the reference kernels: always there */
    &kiln_null_provider,   /* compiles everything, runs nothing */
    &kiln_vulkan_provider, /* lazy: loads the Vulkan loader and drivers */
    &kiln_opencl_provider, /* lazy: loads the OpenCL ICD loader and drivers */
    &kiln_cuda_provider,   /* lazy: loads the CUDA driver and NVRTC */
};

const kiln_device_provider *const *kiln_device_providers(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(providers);
  return providers;
}

/* leak_control — the positive control for tests/sanitize/lsan.supp.
 *
 *   leak_control kiln     loads the Vulkan driver through kiln (device
 *                         enumeration), then leaks from kiln code
 *   leak_control driver   loads and unloads the Vulkan driver by calling the
 *                         loader directly (as kiln did before it kept driver
 *                         libraries loaded), then leaks from kiln code
 *   leak_control none     only leaks from kiln code
 *
 * Every mode leaks on purpose: a kiln tensor and a kiln string, allocated
 * in plant_kiln_leak. Built in the ASan tree, it must end with a
 * LeakSanitizer report naming plant_kiln_leak, whatever suppressions are
 * in force; tests/sanitize/run_leak_control.sh checks that, and that the
 * suppression file hides every other leak (the driver's) and nothing of
 * kiln's. The program itself never fails: LSan's exit status is the point.
 */
#include "runtime/device.h"
#include "tensor/tensor.h"

#include <dlfcn.h>
#include <stdio.h>
#if KILN_HAVE_VULKAN
#include <vulkan/vulkan.h>
#endif

static void *volatile g_sink; /* keeps the compiler from dropping the allocations */

__attribute__((noinline)) static void plant_kiln_leak(void) {
  int64_t dims[2] = {3, 5};
  kiln_tensor *t = NULL;
  kiln_status_t st = kiln_tensor_new(KILN_DTYPE_F32, 2, dims, &t);
  if (st) {
    fprintf(stderr, "leak_control: %s\n", kiln_status_message(st));
    kiln_status_free(st);
  }
  g_sink = t;
  g_sink = kiln_strfmt("planted leak %d", 42);
  g_sink = NULL; /* now nothing points at either */
}

static int driver_cycle(void) {
#if KILN_HAVE_VULKAN
  void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("leak_control: no Vulkan loader (%s)\n", dlerror());
    return 0;
  }
  PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
  PFN_vkEnumerateInstanceExtensionProperties exts =
      (PFN_vkEnumerateInstanceExtensionProperties)gipa(VK_NULL_HANDLE, "vkEnumerateInstanceExtensionProperties");
  PFN_vkCreateInstance create = (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
  uint32_t n = 0;
  if (exts) exts(NULL, &n, NULL);
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  VkInstance inst = VK_NULL_HANDLE;
  if (!create || create(&ci, NULL, &inst) != VK_SUCCESS) {
    printf("leak_control: no Vulkan driver\n");
    return 0;
  }
  PFN_vkEnumeratePhysicalDevices list = (PFN_vkEnumeratePhysicalDevices)gipa(inst, "vkEnumeratePhysicalDevices");
  PFN_vkDestroyInstance destroy = (PFN_vkDestroyInstance)gipa(inst, "vkDestroyInstance");
  uint32_t n_dev = 0;
  list(inst, &n_dev, NULL);
  destroy(inst, NULL); /* the loader unloads the driver here */
  printf("leak_control: loaded and unloaded the Vulkan driver (%u devices)\n", n_dev);
#else
  printf("leak_control: built without Vulkan\n");
#endif
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "kiln")) {
    printf("leak_control: %d devices through kiln:", kiln_device_count());
    for (int i = 0; i < kiln_device_count(); i++) printf(" %s", kiln_device_name(i));
    printf("\n");
  } else if (!strcmp(mode, "driver")) {
    driver_cycle();
  } else if (strcmp(mode, "none")) {
    fprintf(stderr, "usage: %s kiln|driver|none\n", argv[0]);
    return 2;
  }
  plant_kiln_leak();
  printf("leak_control: planted the leak\n");
  return 0;
}

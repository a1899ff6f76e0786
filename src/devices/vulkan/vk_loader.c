/* vk_loader.c — finds libvulkan and libshaderc at run time (dlopen), loads
 * entry points into function tables, turns VkResults into statuses, and
 * enumerates the usable physical devices.
 *
 * kiln never links Vulkan: a machine without a loader, an ICD or shaderc
 * simply has no vulkan device, and vk_enumerate says why.
 *
 * Environment:
 *   KILN_VULKAN_LOADER=PATH   the Vulkan loader library to dlopen instead of
 *                             libvulkan.so.1 (then libvulkan.so); only PATH is
 *                             tried. A file that cannot be loaded makes the
 *                             vulkan device absent, with dlopen's reason.
 *   KILN_VULKAN_SHADER_COMPILER=auto|libshaderc|glslc
 *                             auto (default, also when unset or empty):
 *                             libshaderc if it loads, else glslc; libshaderc:
 *                             the library only; glslc: the program only
 *                             ($KILN_GLSLC or PATH, see vk_glslc.c). Any other
 *                             value makes the vulkan device absent, saying so.
 *   VK_ICD_FILENAMES / VK_DRIVER_FILES (the loader's own) are named in the
 *                             "no Vulkan driver" reason when set. */
#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_internal.h"

#include <dlfcn.h>
#if defined(__linux__) || defined(__FreeBSD__)
#include <link.h> /* dl_iterate_phdr */
#define KILN_VK_PIN_LIBRARIES 1
#endif
#include <inttypes.h>
#include <stdio.h>

static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static vk_loader g_loader;
static vk_shaderc_fns g_shaderc;
static char g_load_error[1024]; /* empty when both libraries loaded */

/* ---- errors ------------------------------------------------------------------ */

const char *vk_result_name(VkResult r) {
  switch (r) {
#define R(x) \
  case x:    \
    return #x;
    R(VK_SUCCESS)
    R(VK_NOT_READY)
    R(VK_TIMEOUT)
    R(VK_EVENT_SET)
    R(VK_EVENT_RESET)
    R(VK_INCOMPLETE)
    R(VK_ERROR_OUT_OF_HOST_MEMORY)
    R(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    R(VK_ERROR_INITIALIZATION_FAILED)
    R(VK_ERROR_DEVICE_LOST)
    R(VK_ERROR_MEMORY_MAP_FAILED)
    R(VK_ERROR_LAYER_NOT_PRESENT)
    R(VK_ERROR_EXTENSION_NOT_PRESENT)
    R(VK_ERROR_FEATURE_NOT_PRESENT)
    R(VK_ERROR_INCOMPATIBLE_DRIVER)
    R(VK_ERROR_TOO_MANY_OBJECTS)
    R(VK_ERROR_FORMAT_NOT_SUPPORTED)
    R(VK_ERROR_FRAGMENTED_POOL)
    R(VK_ERROR_UNKNOWN)
    R(VK_ERROR_OUT_OF_POOL_MEMORY)
    R(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    R(VK_ERROR_FRAGMENTATION)
    R(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    R(VK_PIPELINE_COMPILE_REQUIRED)
    R(VK_ERROR_INVALID_SHADER_NV)
#undef R
    default:
      return "VkResult";
  }
}

kiln_status_t vk_check(VkResult r, const char *what) {
  if (r >= 0) return NULL;
  kiln_status_code code = KILN_DEVICE_ERROR;
  if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_POOL_MEMORY ||
      r == VK_ERROR_FRAGMENTED_POOL || r == VK_ERROR_FRAGMENTATION || r == VK_ERROR_TOO_MANY_OBJECTS)
    code = KILN_OUT_OF_MEMORY;
  else if (r == VK_ERROR_FEATURE_NOT_PRESENT || r == VK_ERROR_EXTENSION_NOT_PRESENT ||
           r == VK_ERROR_LAYER_NOT_PRESENT || r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_FORMAT_NOT_SUPPORTED)
    code = KILN_UNSUPPORTED;
  if (r == VK_ERROR_DEVICE_LOST) return kiln_error(code, "vulkan: device lost during %s", what);
  return kiln_error(code, "vulkan: %s failed: %s (%d)", what, vk_result_name(r), (int)r);
}

/* ---- loading ------------------------------------------------------------------ */

const char *vk_no_driver_reason(VkResult r, char *buf, size_t size) {
  static const char *const vars[] = {"VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES"};
  int n = snprintf(buf, size, "vulkan: no Vulkan driver (ICD) found by the loader (vkCreateInstance: %s",
                   vk_result_name(r));
  for (size_t i = 0; i < KILN_ARRAY_SIZE(vars) && n >= 0 && (size_t)n < size; i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) n += snprintf(buf + n, size - (size_t)n, "; %s=%.200s", vars[i], v);
  }
  if (n >= 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, ")");
  return buf;
}

/* ---- driver libraries stay loaded ------------------------------------------------ */

#ifdef KILN_VK_PIN_LIBRARIES
static int add_loaded_lib(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  vk_pin_scope *l = data;
  if (!info->dlpi_name || !info->dlpi_name[0]) return 0; /* the executable, the vDSO */
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    char **p = realloc(l->names, sizeof *p * (size_t)cap);
    if (!p) return 1; /* stop: pinning is best effort */
    l->names = p;
    l->cap = cap;
  }
  if ((l->names[l->n] = kiln_strdup(info->dlpi_name))) l->n++;
  return 0;
}

static void free_names(vk_pin_scope *l) {
  for (int i = 0; i < l->n; i++) free(l->names[i]);
  free(l->names);
  memset(l, 0, sizeof *l);
}

void vk_pin_scope_begin(vk_pin_scope *scope) {
  memset(scope, 0, sizeof *scope);
  dl_iterate_phdr(add_loaded_lib, scope);
}

void vk_pin_scope_end(vk_pin_scope *scope) {
  vk_pin_scope now = {0};
  dl_iterate_phdr(add_loaded_lib, &now);
  for (int i = 0; i < now.n; i++) {
    bool seen = false;
    for (int k = 0; k < scope->n && !seen; k++) seen = !strcmp(scope->names[k], now.names[i]);
    /* RTLD_NOLOAD only marks the library already loaded; the reference
     * this takes is never dropped. */
    if (!seen) (void)dlopen(now.names[i], RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
  }
  free_names(&now);
  free_names(scope);
}
#else
void vk_pin_scope_begin(vk_pin_scope *scope) { memset(scope, 0, sizeof *scope); }
void vk_pin_scope_end(vk_pin_scope *scope) { (void)scope; }
#endif

static void *open_first(const char *const *names, int n, char *err, size_t err_size) {
  err[0] = '\0';
  for (int i = 0; i < n; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    /* Report the first failure, unless a later file exists but is broken
     * (more useful than "no such file"). */
    const char *e = dlerror();
    if (i == 0 || (e && !strstr(e, "No such file"))) snprintf(err, err_size, "%s", e ? e : "?");
  }
  return NULL;
}

static void load_libraries(void) {
  static const char *vk_names[] = {
#if defined(__APPLE__)
      "libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib",
#else
      "libvulkan.so.1", "libvulkan.so",
#endif
  };
  /* Debian/Ubuntu ship the shared shaderc as libshaderc.so.1; upstream
   * builds name it libshaderc_shared. */
  static const char *const sc_names[] = {
#if defined(__APPLE__)
      "libshaderc_shared.1.dylib", "libshaderc_shared.dylib",
#else
      "libshaderc_shared.so.1", "libshaderc.so.1", "libshaderc_shared.so", "libshaderc.so",
#endif
  };
  char err[512];
  /* KILN_VULKAN_LOADER replaces the search list: a user who names a loader
   * wants that one, not a silent fallback to the system's. */
  const char *env_loader = getenv("KILN_VULKAN_LOADER");
  const char *const *names = vk_names;
  int n_names = (int)KILN_ARRAY_SIZE(vk_names);
  const char *set_by = "";
  if (env_loader && *env_loader) {
    names = &env_loader;
    n_names = 1;
    set_by = " (set by KILN_VULKAN_LOADER)";
  }
  g_loader.lib = open_first(names, n_names, err, sizeof err);
  if (!g_loader.lib) {
    snprintf(g_load_error, sizeof g_load_error, "vulkan: cannot load the Vulkan loader %.300s%s: %s", names[0], set_by,
             err);
    return;
  }
  g_loader.vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(g_loader.lib, "vkGetInstanceProcAddr");
  if (!g_loader.vkGetInstanceProcAddr) {
    snprintf(g_load_error, sizeof g_load_error, "vulkan: %.300s%s has no vkGetInstanceProcAddr (not a Vulkan loader?)",
             names[0], set_by);
    return;
  }
#define LOAD_GLOBAL(name)                                                                                         \
  g_loader.name = (PFN_##name)g_loader.vkGetInstanceProcAddr(VK_NULL_HANDLE, #name);                              \
  if (!g_loader.name) {                                                                                            \
    snprintf(g_load_error, sizeof g_load_error, "vulkan: the Vulkan loader does not provide %s", #name);           \
    return;                                                                                                        \
  }
  VK_GLOBAL_FNS(LOAD_GLOBAL)
#undef LOAD_GLOBAL
  /* vkEnumerateInstanceVersion is absent from 1.0 loaders. */
  PFN_vkEnumerateInstanceVersion ver =
      (PFN_vkEnumerateInstanceVersion)g_loader.vkGetInstanceProcAddr(VK_NULL_HANDLE, "vkEnumerateInstanceVersion");
  g_loader.instance_version = VK_API_VERSION_1_0;
  if (ver && ver(&g_loader.instance_version) != VK_SUCCESS) g_loader.instance_version = VK_API_VERSION_1_0;
  if (VK_API_VERSION_MINOR(g_loader.instance_version) < 2 && VK_API_VERSION_MAJOR(g_loader.instance_version) < 2) {
    snprintf(g_load_error, sizeof g_load_error, "vulkan: the Vulkan loader supports only API %u.%u (need 1.2)",
             VK_API_VERSION_MAJOR(g_loader.instance_version), VK_API_VERSION_MINOR(g_loader.instance_version));
    return;
  }

  /* The shader compiler: libshaderc, else glslc (see vk_internal.h). */
  const char *forced = getenv("KILN_VULKAN_SHADER_COMPILER");
  if (forced && *forced && strcmp(forced, "auto") && strcmp(forced, "glslc") && strcmp(forced, "libshaderc")) {
    snprintf(g_load_error, sizeof g_load_error,
             "vulkan: KILN_VULKAN_SHADER_COMPILER=%.200s is not one of auto, libshaderc, glslc", forced);
    return;
  }
  bool want_lib = !(forced && !strcmp(forced, "glslc"));
  bool want_glslc = !(forced && !strcmp(forced, "libshaderc"));
  char lib_err[512] = "not tried (KILN_VULKAN_SHADER_COMPILER=glslc)";
  if (want_lib) {
    g_shaderc.lib = open_first(sc_names, (int)KILN_ARRAY_SIZE(sc_names), err, sizeof err);
    if (!g_shaderc.lib) snprintf(lib_err, sizeof lib_err, "cannot be loaded: %.450s", err);
  }
  if (g_shaderc.lib) {
#define LOAD_SC(field, sym)                                                                    \
  if (g_shaderc.lib && !(*(void **)&g_shaderc.field = dlsym(g_shaderc.lib, sym))) {            \
    snprintf(lib_err, sizeof lib_err, "the shaderc library does not provide %s", sym);         \
    g_shaderc.lib = NULL;                                                                      \
  }
    LOAD_SC(compiler_initialize, "shaderc_compiler_initialize")
    LOAD_SC(compiler_release, "shaderc_compiler_release")
    LOAD_SC(compile_options_initialize, "shaderc_compile_options_initialize")
    LOAD_SC(compile_options_release, "shaderc_compile_options_release")
    LOAD_SC(compile_options_set_source_language, "shaderc_compile_options_set_source_language")
    LOAD_SC(compile_options_set_optimization_level, "shaderc_compile_options_set_optimization_level")
    LOAD_SC(compile_options_set_target_env, "shaderc_compile_options_set_target_env")
    LOAD_SC(compile_options_set_target_spirv, "shaderc_compile_options_set_target_spirv")
    LOAD_SC(compile_into_spv, "shaderc_compile_into_spv")
    LOAD_SC(result_release, "shaderc_result_release")
    LOAD_SC(result_get_length, "shaderc_result_get_length")
    LOAD_SC(result_get_compilation_status, "shaderc_result_get_compilation_status")
    LOAD_SC(result_get_bytes, "shaderc_result_get_bytes")
    LOAD_SC(result_get_error_message, "shaderc_result_get_error_message")
    LOAD_SC(get_spv_version, "shaderc_get_spv_version")
#undef LOAD_SC
  }
  if (g_shaderc.lib) return;
  char glslc_err[512] = "not tried (KILN_VULKAN_SHADER_COMPILER=libshaderc)";
  if (want_glslc && vk_glslc_find(&g_shaderc, glslc_err, sizeof glslc_err)) return;
  snprintf(g_load_error, sizeof g_load_error, "vulkan: no shader compiler: libshaderc %.450s; glslc: %.450s", lib_err,
           glslc_err);
}

static char g_compiler_desc[1700];

static void describe_compiler(void) {
  if (g_shaderc.lib) snprintf(g_compiler_desc, sizeof g_compiler_desc, "libshaderc");
  else snprintf(g_compiler_desc, sizeof g_compiler_desc, "glslc %s (%s)", g_shaderc.glslc, g_shaderc.glslc_version);
}

const char *vk_shader_compiler(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&g_load_once, load_libraries);
  if (!g_shaderc.lib && !g_shaderc.glslc[0]) return NULL;
  pthread_once(&once, describe_compiler);
  return g_compiler_desc;
}

kiln_status_t vk_loader_get(const vk_loader **out_loader, const vk_shaderc_fns **out_shaderc) {
  pthread_once(&g_load_once, load_libraries);
  if (g_load_error[0]) return kiln_error(KILN_UNSUPPORTED, "%s", g_load_error);
  if (out_loader) *out_loader = &g_loader;
  if (out_shaderc) *out_shaderc = &g_shaderc;
  return NULL;
}

kiln_status_t vk_load_instance_fns(VkInstance instance, vk_fns *fns) {
#define LOAD_INST(name)                                                                     \
  fns->name = (PFN_##name)g_loader.vkGetInstanceProcAddr(instance, #name);                  \
  if (!fns->name) return kiln_error(KILN_UNSUPPORTED, "vulkan: instance lacks %s", #name);
  VK_INSTANCE_FNS(LOAD_INST)
#undef LOAD_INST
  fns->vkCreateDebugUtilsMessengerEXT =
      (PFN_vkCreateDebugUtilsMessengerEXT)g_loader.vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT");
  fns->vkDestroyDebugUtilsMessengerEXT =
      (PFN_vkDestroyDebugUtilsMessengerEXT)g_loader.vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT");
  return NULL;
}

kiln_status_t vk_load_device_fns(VkDevice device, vk_fns *fns) {
#define LOAD_DEV(name)                                                                   \
  fns->name = (PFN_##name)fns->vkGetDeviceProcAddr(device, #name);                        \
  if (!fns->name) return kiln_error(KILN_UNSUPPORTED, "vulkan: device lacks %s", #name);
  VK_DEVICE_FNS(LOAD_DEV)
#undef LOAD_DEV
  return NULL;
}

/* ---- physical devices ----------------------------------------------------------- */

static const char *vendor_name(uint32_t id) {
  switch (id) {
    case 0x10DE: return "NVIDIA";
    case 0x1002: return "AMD";
    case 0x1022: return "AMD";
    case 0x8086: return "Intel";
    case 0x13B5: return "ARM";
    case 0x5143: return "Qualcomm";
    case 0x1010: return "Imagination";
    case 0x106B: return "Apple";
    case 0x14E4: return "Broadcom";
    case VK_VENDOR_ID_MESA: return "Mesa";
    default: return "unknown";
  }
}

static int type_rank(int type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
  }
}

static bool has_ext(const VkExtensionProperties *exts, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(exts[i].extensionName, name)) return true;
  return false;
}

/* Fills *info for one device; returns NULL if usable, else why not (new string). */
static char *probe_physical(const vk_fns *fns, VkPhysicalDevice phys, vk_physical_info *info) {
  memset(info, 0, sizeof *info);
  info->phys = phys;
  VkPhysicalDeviceProperties base;
  fns->vkGetPhysicalDeviceProperties(phys, &base);
  vk_device_props *p = &info->props;
  snprintf(p->name, sizeof p->name, "%s", base.deviceName);
  snprintf(p->vendor, sizeof p->vendor, "%s", vendor_name(base.vendorID));
  p->vendor_id = base.vendorID;
  p->device_id = base.deviceID;
  p->api_version = base.apiVersion;
  p->type = (int)base.deviceType;
  info->driver_version = base.driverVersion;
  memcpy(info->pipeline_cache_uuid, base.pipelineCacheUUID, VK_UUID_SIZE);
  if (VK_API_VERSION_MAJOR(base.apiVersion) == 1 && VK_API_VERSION_MINOR(base.apiVersion) < 2)
    return kiln_strfmt("'%s' supports Vulkan %u.%u only (need 1.2)", base.deviceName,
                       VK_API_VERSION_MAJOR(base.apiVersion), VK_API_VERSION_MINOR(base.apiVersion));

  uint32_t n_ext = 0;
  VkExtensionProperties *exts = NULL;
  if (fns->vkEnumerateDeviceExtensionProperties(phys, NULL, &n_ext, NULL) == VK_SUCCESS && n_ext) {
    exts = calloc(n_ext, sizeof *exts);
    if (!exts || fns->vkEnumerateDeviceExtensionProperties(phys, NULL, &n_ext, exts) < 0) n_ext = 0;
  }
  bool api13 = VK_API_VERSION_MAJOR(base.apiVersion) > 1 || VK_API_VERSION_MINOR(base.apiVersion) >= 3;
  info->has_portability_subset = has_ext(exts, n_ext, "VK_KHR_portability_subset");
  info->has_int_dot_ext = !api13 && has_ext(exts, n_ext, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  info->has_coop_matrix_khr = has_ext(exts, n_ext, "VK_KHR_cooperative_matrix");
  info->has_coop_matrix_nv = has_ext(exts, n_ext, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  free(exts);

  /* Properties chain: 1.1 (subgroups), 1.2 (driver), maintenance3 (max allocation). */
  VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceVulkan12Properties p12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES,
                                            .pNext = &m3};
  VkPhysicalDeviceVulkan11Properties p11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES,
                                            .pNext = &p12};
  VkPhysicalDeviceProperties2 props2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &p11};
  fns->vkGetPhysicalDeviceProperties2(phys, &props2);
  snprintf(p->driver, sizeof p->driver, "%.120s%s%.120s", p12.driverName, p12.driverInfo[0] ? " " : "", p12.driverInfo);
  p->subgroup_size = p11.subgroupSize;
  p->subgroup_arithmetic = (p11.subgroupSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                           (p11.subgroupSupportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  info->max_alloc_bytes = m3.maxMemoryAllocationSize;

  /* Features chain. */
  VkPhysicalDeviceShaderIntegerDotProductFeatures dotf = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                          .pNext = &f12};
  if (api13) f12.pNext = &f13;
  else if (info->has_int_dot_ext) f12.pNext = &dotf;
  VkPhysicalDeviceFeatures2 feats = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
  fns->vkGetPhysicalDeviceFeatures2(phys, &feats);
  if (!f12.timelineSemaphore) return kiln_strfmt("'%s' lacks timeline semaphores", base.deviceName);
  info->f16_arith = f12.shaderFloat16;
  info->f16_storage = f11.storageBuffer16BitAccess;
  info->int8_arith = f12.shaderInt8;
  info->int8_storage = f12.storageBuffer8BitAccess;
  info->int16_arith = feats.features.shaderInt16;
  p->fp16 = info->f16_arith && info->f16_storage;
  p->int64 = feats.features.shaderInt64;
  p->int8_dot = api13 ? f13.shaderIntegerDotProduct : (info->has_int_dot_ext && dotf.shaderIntegerDotProduct);
  info->sub_size_control = api13 && f13.subgroupSizeControl && f13.computeFullSubgroups;
  p->coop_matrix = info->has_coop_matrix_khr || info->has_coop_matrix_nv;

  const VkPhysicalDeviceLimits *l = &base.limits;
  info->limits = *l;
  p->max_workgroup_invocations = l->maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; i++) {
    p->max_workgroup_size[i] = l->maxComputeWorkGroupSize[i];
    p->max_workgroup_count[i] = l->maxComputeWorkGroupCount[i];
  }
  p->max_shared_bytes = l->maxComputeSharedMemorySize;
  p->max_push_bytes = l->maxPushConstantsSize;
  p->max_storage_range = l->maxStorageBufferRange;
  p->min_storage_offset_align = l->minStorageBufferOffsetAlignment;

  VkPhysicalDeviceMemoryProperties mp;
  fns->vkGetPhysicalDeviceMemoryProperties(phys, &mp);
  for (uint32_t h = 0; h < mp.memoryHeapCount; h++)
    if ((mp.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp.memoryHeaps[h].size > p->device_local_bytes)
      p->device_local_bytes = mp.memoryHeaps[h].size;

  /* Queue: prefer a compute-only family (dedicated compute engine), else any with compute. */
  uint32_t n_fam = 0;
  fns->vkGetPhysicalDeviceQueueFamilyProperties(phys, &n_fam, NULL);
  VkQueueFamilyProperties *fam = calloc(n_fam ? n_fam : 1, sizeof *fam);
  if (!fam) return kiln_strdup("out of memory");
  fns->vkGetPhysicalDeviceQueueFamilyProperties(phys, &n_fam, fam);
  int best = -1;
  for (uint32_t i = 0; i < n_fam; i++) {
    if (!(fam[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || !fam[i].queueCount) continue;
    if (best < 0 || ((fam[best].queueFlags & VK_QUEUE_GRAPHICS_BIT) && !(fam[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)))
      best = (int)i;
  }
  free(fam);
  if (best < 0) return kiln_strfmt("'%s' has no compute queue", base.deviceName);
  info->queue_family = (uint32_t)best;
  return NULL;
}

int vk_list_physical(const vk_fns *fns, VkInstance instance, vk_physical_info **out, kiln_status_t *why) {
  *out = NULL;
  uint32_t n = 0;
  VkResult r = fns->vkEnumeratePhysicalDevices(instance, &n, NULL);
  if (r < 0) {
    if (why) *why = vk_check(r, "vkEnumeratePhysicalDevices");
    return 0;
  }
  if (n == 0) {
    if (why) *why = kiln_error(KILN_UNSUPPORTED, "vulkan: no physical device (is a Vulkan driver/ICD installed?)");
    return 0;
  }
  VkPhysicalDevice *phys = calloc(n, sizeof *phys);
  vk_physical_info *infos = calloc(n, sizeof *infos);
  if (!phys || !infos || fns->vkEnumeratePhysicalDevices(instance, &n, phys) < 0) {
    free(phys);
    free(infos);
    if (why) *why = kiln_error(KILN_OUT_OF_MEMORY, "vulkan: cannot list physical devices");
    return 0;
  }
  int count = 0;
  char reasons[1024] = "";
  for (uint32_t i = 0; i < n; i++) {
    char *bad = probe_physical(fns, phys[i], &infos[count]);
    if (!bad) {
      count++;
      continue;
    }
    size_t len = strlen(reasons);
    snprintf(reasons + len, sizeof reasons - len, "%s%s", len ? "; " : "", bad);
    free(bad);
  }
  free(phys);
  if (count == 0) {
    free(infos);
    if (why) *why = kiln_error(KILN_UNSUPPORTED, "vulkan: no usable device: %s", reasons);
    return 0;
  }
  /* Stable insertion sort by type rank keeps the driver's order within a type. */
  for (int i = 1; i < count; i++) {
    vk_physical_info t = infos[i];
    int j = i - 1;
    while (j >= 0 && type_rank(infos[j].props.type) > type_rank(t.props.type)) {
      infos[j + 1] = infos[j];
      j--;
    }
    infos[j + 1] = t;
  }
  *out = infos;
  return count;
}

/* ---- vk_enumerate ------------------------------------------------------------------ */

/* Enumeration result, computed once per process (the set of devices does not
 * change while we run, and creating an instance costs milliseconds). */
static pthread_once_t g_enum_once = PTHREAD_ONCE_INIT;
static vk_device_props *g_enum_props; /* owned, process lifetime */
static int g_enum_count;
static char g_enum_why[1024];

static void enumerate_once(void) {
  kiln_status_t st = vk_loader_get(NULL, NULL);
  if (st) {
    snprintf(g_enum_why, sizeof g_enum_why, "%s", kiln_status_message(st));
    kiln_status_free(st);
    return;
  }
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "kiln",
                           .pEngineName = "kiln",
                           .apiVersion = VK_API_VERSION_1_2};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
  const char *ext[1];
  uint32_t n_ext = 0;
  VkExtensionProperties *exts = NULL;
  vk_pin_scope pins; /* the extension query already loads the drivers */
  vk_pin_scope_begin(&pins);
  if (g_loader.vkEnumerateInstanceExtensionProperties(NULL, &n_ext, NULL) == VK_SUCCESS && n_ext) {
    exts = calloc(n_ext, sizeof *exts);
    if (!exts || g_loader.vkEnumerateInstanceExtensionProperties(NULL, &n_ext, exts) < 0) n_ext = 0;
  }
  if (has_ext(exts, n_ext, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    ext[0] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
    ci.enabledExtensionCount = 1;
    ci.ppEnabledExtensionNames = ext;
    ci.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  free(exts);
  VkInstance inst = VK_NULL_HANDLE;
  VkResult r = g_loader.vkCreateInstance(&ci, NULL, &inst);
  vk_pin_scope_end(&pins);
  if (r != VK_SUCCESS) {
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER) vk_no_driver_reason(r, g_enum_why, sizeof g_enum_why);
    else
      snprintf(g_enum_why, sizeof g_enum_why, "vulkan: vkCreateInstance failed: %s (%d)", vk_result_name(r), (int)r);
    return;
  }
  vk_fns fns;
  memset(&fns, 0, sizeof fns);
  PFN_vkDestroyInstance destroy = (PFN_vkDestroyInstance)g_loader.vkGetInstanceProcAddr(inst, "vkDestroyInstance");
  st = vk_load_instance_fns(inst, &fns);
  vk_physical_info *infos = NULL;
  int n = 0;
  if (!st) n = vk_list_physical(&fns, inst, &infos, &st);
  if (st) {
    snprintf(g_enum_why, sizeof g_enum_why, "%s", kiln_status_message(st));
    kiln_status_free(st);
  }
  if (n > 0) {
    g_enum_props = calloc((size_t)n, sizeof *g_enum_props);
    if (g_enum_props) {
      for (int i = 0; i < n; i++) g_enum_props[i] = infos[i].props;
      g_enum_count = n;
    } else {
      snprintf(g_enum_why, sizeof g_enum_why, "vulkan: out of memory enumerating devices");
    }
  }
  free(infos);
  if (destroy) destroy(inst, NULL);
}

int vk_enumerate(vk_device_props *out, int max, kiln_status_t *why) {
  if (why) *why = NULL;
  pthread_once(&g_enum_once, enumerate_once);
  if (g_enum_count == 0) {
    if (why) *why = kiln_error(KILN_UNSUPPORTED, "%s", g_enum_why[0] ? g_enum_why : "vulkan: no usable device");
    return 0;
  }
  for (int i = 0; i < g_enum_count && i < max && out; i++) out[i] = g_enum_props[i];
  return g_enum_count;
}

#else
typedef int kiln_vk_loader_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_VULKAN */

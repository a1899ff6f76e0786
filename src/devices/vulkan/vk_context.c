/* vk_context.c — instance, optional validation layer, logical device,
 * compute queue and timeline semaphore; the context's lifetime.
 *
 * Each context owns its own VkInstance so that KILN_VULKAN_VALIDATION can
 * enable the validation layer for it alone; device order matches
 * vk_enumerate because both sort the same list the same way. */
#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_internal.h"

#include <stdio.h>


static _Atomic uint64_t g_validation_errors;

uint64_t vk_validation_error_count(void) { return atomic_load(&g_validation_errors); }

static VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                     VkDebugUtilsMessageTypeFlagsEXT types,
                                                     const VkDebugUtilsMessengerCallbackDataEXT *data, void *user) {
  (void)types;
  (void)user;
  bool error = severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  if (error) atomic_fetch_add(&g_validation_errors, 1);
  fprintf(stderr, "kiln: vulkan validation: %s: %s\n", error ? "error" : "warning",
          data && data->pMessage ? data->pMessage : "(no message)");
  return VK_FALSE; /* never abort the call */
}

static bool env_flag(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

static bool has_layer(const vk_loader *ld, const char *name) {
  uint32_t n = 0;
  if (ld->vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || !n) return false;
  VkLayerProperties *layers = calloc(n, sizeof *layers);
  bool found = false;
  if (layers && ld->vkEnumerateInstanceLayerProperties(&n, layers) >= 0)
    for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(layers[i].layerName, name);
  free(layers);
  return found;
}

static bool has_instance_ext(const vk_loader *ld, const char *layer, const char *name) {
  uint32_t n = 0;
  if (ld->vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS || !n) return false;
  VkExtensionProperties *exts = calloc(n, sizeof *exts);
  bool found = false;
  if (exts && ld->vkEnumerateInstanceExtensionProperties(layer, &n, exts) >= 0)
    for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(exts[i].extensionName, name);
  free(exts);
  return found;
}

static kiln_status_t create_instance(vk_context *ctx, const vk_loader *ld) {
  static const char *const kValidation = "VK_LAYER_KHRONOS_validation";
  bool validation = env_flag("KILN_VULKAN_VALIDATION");
  vk_pin_scope pins; /* the layer and extension queries already load drivers and layers */
  vk_pin_scope_begin(&pins);
  const char *layers[1];
  uint32_t n_layers = 0;
  if (validation) {
    if (has_layer(ld, kValidation)) layers[n_layers++] = kValidation;
    else
      fprintf(stderr, "kiln: note: KILN_VULKAN_VALIDATION is set but %s is not installed; continuing without it\n",
              kValidation);
  }
  const char *exts[2];
  uint32_t n_exts = 0;
  VkInstanceCreateFlags flags = 0;
  if (has_instance_ext(ld, NULL, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    exts[n_exts++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  bool debug_utils = validation && (has_instance_ext(ld, NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) ||
                                    (n_layers && has_instance_ext(ld, kValidation, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)));
  if (debug_utils) exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;

  /* Ask for the newest API both we and the loader know (1.3 on lavapipe). */
  uint32_t api = ld->instance_version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : VK_API_VERSION_1_2;
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "kiln",
                           .applicationVersion = VK_MAKE_API_VERSION(0, KILN_VERSION_MAJOR, KILN_VERSION_MINOR,
                                                                     KILN_VERSION_PATCH),
                           .pEngineName = "kiln",
                           .engineVersion = VK_MAKE_API_VERSION(0, KILN_VERSION_MAJOR, KILN_VERSION_MINOR,
                                                                KILN_VERSION_PATCH),
                           .apiVersion = api};
  /* Chained into the instance create info, the messenger also reports what
   * vkCreateInstance/vkDestroyInstance see (e.g. leaked objects). */
  VkDebugUtilsMessengerCreateInfoEXT dbg = {
      .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
      .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
      .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
      .pfnUserCallback = debug_callback};
  /* KILN_VULKAN_VALIDATION=sync also checks our barriers (synchronization validation). */
  VkValidationFeatureEnableEXT sync_enable = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  VkValidationFeaturesEXT vfeat = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                   .enabledValidationFeatureCount = 1,
                                   .pEnabledValidationFeatures = &sync_enable};
  const char *vmode = getenv("KILN_VULKAN_VALIDATION");
  if (n_layers && vmode && !strcmp(vmode, "sync")) {
    vfeat.pNext = debug_utils ? &dbg : NULL;
  }
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                             .flags = flags,
                             .pApplicationInfo = &app,
                             .enabledLayerCount = n_layers,
                             .ppEnabledLayerNames = layers,
                             .enabledExtensionCount = n_exts,
                             .ppEnabledExtensionNames = exts};
  if (n_layers && vmode && !strcmp(vmode, "sync")) ci.pNext = &vfeat;
  else if (debug_utils) ci.pNext = &dbg;
  VkResult r = ld->vkCreateInstance(&ci, NULL, &ctx->instance);
  vk_pin_scope_end(&pins);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    char why[600];
    return kiln_error(KILN_UNSUPPORTED, "%s", vk_no_driver_reason(r, why, sizeof why));
  }
  KILN_TRY(vk_check(r, "vkCreateInstance"));
  KILN_TRY(vk_load_instance_fns(ctx->instance, &ctx->fn));
  if (debug_utils && ctx->fn.vkCreateDebugUtilsMessengerEXT)
    KILN_TRY(vk_check(ctx->fn.vkCreateDebugUtilsMessengerEXT(ctx->instance, &dbg, NULL, &ctx->messenger),
                      "vkCreateDebugUtilsMessengerEXT"));
  return NULL;
}

/* Locally defined so the runtime builds against headers older than 1.3.255. */
#ifndef VK_KHR_cooperative_matrix
typedef struct kiln_coop_matrix_features_khr {
  VkStructureType sType;
  void *pNext;
  VkBool32 cooperativeMatrix;
  VkBool32 cooperativeMatrixRobustBufferAccess;
} kiln_coop_matrix_features_khr;
#define KILN_STYPE_COOP_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
#else
typedef VkPhysicalDeviceCooperativeMatrixFeaturesKHR kiln_coop_matrix_features_khr;
#define KILN_STYPE_COOP_MATRIX_FEATURES_KHR VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
#endif

static kiln_status_t create_device(vk_context *ctx) {
  const vk_physical_info *in = &ctx->info;
  bool api13 = VK_API_VERSION_MINOR(in->props.api_version) >= 3 || VK_API_VERSION_MAJOR(in->props.api_version) > 1;
  const char *exts[4];
  uint32_t n_exts = 0;
  if (in->has_portability_subset) exts[n_exts++] = "VK_KHR_portability_subset";
  if (in->has_int_dot_ext && in->props.int8_dot) exts[n_exts++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;

  /* Enable only what the device has (asking for more fails device creation). */
  VkPhysicalDeviceFeatures2 feats = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  feats.features.shaderInt64 = in->props.int64;
  feats.features.shaderInt16 = in->int16_arith;
  VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f11.storageBuffer16BitAccess = in->f16_storage;
  VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.timelineSemaphore = VK_TRUE;
  f12.shaderFloat16 = in->f16_arith;
  f12.shaderInt8 = in->int8_arith;
  f12.storageBuffer8BitAccess = in->int8_storage;
  VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
  f13.shaderIntegerDotProduct = in->props.int8_dot;
  f13.subgroupSizeControl = in->sub_size_control;
  f13.computeFullSubgroups = in->sub_size_control;
  VkPhysicalDeviceShaderIntegerDotProductFeatures dotf = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES, .shaderIntegerDotProduct = VK_TRUE};
  kiln_coop_matrix_features_khr coop = {.sType = KILN_STYPE_COOP_MATRIX_FEATURES_KHR, .cooperativeMatrix = VK_TRUE};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop_nv = {
      .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV, .cooperativeMatrix = VK_TRUE};
  feats.pNext = &f11;
  f11.pNext = &f12;
  void **tail = &f12.pNext;
  if (api13) {
    *tail = &f13;
    tail = &f13.pNext;
  } else if (in->has_int_dot_ext && in->props.int8_dot) {
    *tail = &dotf;
    tail = &dotf.pNext;
  }
  if (in->has_coop_matrix_khr) {
    exts[n_exts++] = "VK_KHR_cooperative_matrix";
    *tail = &coop;
    tail = &coop.pNext;
  } else if (in->has_coop_matrix_nv) {
    exts[n_exts++] = VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME;
    *tail = &coop_nv;
    tail = &coop_nv.pNext;
  }

  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = in->queue_family,
                                 .queueCount = 1,
                                 .pQueuePriorities = &priority};
  VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                            .pNext = &feats,
                            .queueCreateInfoCount = 1,
                            .pQueueCreateInfos = &qci,
                            .enabledExtensionCount = n_exts,
                            .ppEnabledExtensionNames = exts};
  VkResult r = ctx->fn.vkCreateDevice(ctx->phys, &dci, NULL, &ctx->device);
  if (r == VK_ERROR_FEATURE_NOT_PRESENT || r == VK_ERROR_EXTENSION_NOT_PRESENT) {
    /* A driver that advertises a feature it then refuses: retry with the
     * minimum (timeline semaphores) rather than give up the device. */
    memset(&feats.features, 0, sizeof feats.features);
    f11.storageBuffer16BitAccess = VK_FALSE;
    f12.shaderFloat16 = f12.shaderInt8 = f12.storageBuffer8BitAccess = VK_FALSE;
    f12.pNext = NULL;
    dci.enabledExtensionCount = in->has_portability_subset ? 1 : 0;
    ctx->info.props.fp16 = ctx->info.props.int64 = ctx->info.props.int8_dot = ctx->info.props.coop_matrix = false;
    r = ctx->fn.vkCreateDevice(ctx->phys, &dci, NULL, &ctx->device);
  }
  KILN_TRY(vk_check(r, "vkCreateDevice"));
  KILN_TRY(vk_load_device_fns(ctx->device, &ctx->fn));
  ctx->fn.vkGetDeviceQueue(ctx->device, in->queue_family, 0, &ctx->queue);
  ctx->queue_family = in->queue_family;

  VkSemaphoreTypeCreateInfo sti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                   .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                                   .initialValue = 0};
  VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &sti};
  KILN_TRY(vk_check(ctx->fn.vkCreateSemaphore(ctx->device, &sci, NULL, &ctx->timeline), "vkCreateSemaphore"));
  return NULL;
}

static double env_timeout(void) {
  const char *v = getenv("KILN_VULKAN_TIMEOUT_S");
  if (v && *v) {
    char *end = NULL;
    double t = strtod(v, &end);
    if (end != v && t > 0) return t;
  }
  /* Generous: a software driver (lavapipe) on a loaded machine can take
   * minutes over a first run; a real hang still ends in an error. */
  return 300.0;
}

kiln_status_t vk_context_create(int index, vk_context **out) {
  *out = NULL;
  const vk_loader *ld = NULL;
  const vk_shaderc_fns *sc = NULL;
  KILN_TRY(vk_loader_get(&ld, &sc));
  vk_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return KILN_OOM();
  ctx->sc = sc;
  ctx->timeout_s = env_timeout();
  pthread_mutex_init(&ctx->queue_lock, NULL);
  pthread_mutex_init(&ctx->staging_lock, NULL);
  pthread_mutex_init(&ctx->mem.lock, NULL);
  kiln_status_t st = create_instance(ctx, ld);
  if (!st) {
    vk_physical_info *infos = NULL;
    int n = vk_list_physical(&ctx->fn, ctx->instance, &infos, &st);
    if (!st && (index < 0 || index >= n))
      st = kiln_error(KILN_INVALID_ARGUMENT, "vulkan: device index %d out of range (%d usable devices)", index, n);
    if (!st) {
      ctx->info = infos[index];
      ctx->phys = infos[index].phys;
    }
    free(infos);
  }
  if (!st) {
    ctx->fn.vkGetPhysicalDeviceMemoryProperties(ctx->phys, &ctx->mem_props);
    st = create_device(ctx);
  }
  if (!st) st = vk_mem_init(ctx);
  if (!st) st = vk_pipeline_cache_init(ctx);
  if (st) {
    vk_context_destroy(ctx);
    return kiln_status_annotate(st, "while creating the Vulkan context for device %d", index);
  }
  *out = ctx;
  return NULL;
}

void vk_context_destroy(vk_context *ctx) {
  if (!ctx) return;
  if (ctx->device) {
    /* Waiting idle lets pending readbacks land and temp buffers go. */
    ctx->fn.vkDeviceWaitIdle(ctx->device);
    if (ctx->timeline && !atomic_load(&ctx->lost)) vk_staging_retire(ctx, vk_timeline_completed(ctx));
    vk_staging_destroy(ctx);
    vk_pipeline_cache_save_destroy(ctx);
    vk_mem_destroy(ctx);
    if (ctx->timeline) ctx->fn.vkDestroySemaphore(ctx->device, ctx->timeline, NULL);
    ctx->fn.vkDestroyDevice(ctx->device, NULL);
  }
  if (ctx->messenger && ctx->fn.vkDestroyDebugUtilsMessengerEXT)
    ctx->fn.vkDestroyDebugUtilsMessengerEXT(ctx->instance, ctx->messenger, NULL);
  if (ctx->instance) ctx->fn.vkDestroyInstance(ctx->instance, NULL);
  free(ctx->cache_dir);
  pthread_mutex_destroy(&ctx->queue_lock);
  pthread_mutex_destroy(&ctx->staging_lock);
  pthread_mutex_destroy(&ctx->mem.lock);
  free(ctx);
}

const vk_device_props *vk_context_props(const vk_context *ctx) { return &ctx->info.props; }

#else
typedef int kiln_vk_context_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_VULKAN */

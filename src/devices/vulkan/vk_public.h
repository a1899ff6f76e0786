/* vk_public.h — what the Vulkan device offers outside its folder (tests,
 * the provider table): everything else goes through the registry. */
#ifndef KILN_DEVICES_VULKAN_VK_PUBLIC_H
#define KILN_DEVICES_VULKAN_VK_PUBLIC_H

#include "runtime/device.h"

/* One device per usable physical device ("vulkan:0", ...). Writes at most
 * max, returns how many; 0 when kiln was built without Vulkan or the
 * machine has no loader or device (*why_absent, static, says why). */
int kiln_vulkan_devices_create(kiln_device **out, int max, const char **why_absent);
/* Destroys every Vulkan device context (all sessions on them must be gone),
 * so the validation layer reports leaked objects now; they are re-created
 * on next use. Called at exit anyway. No-op without Vulkan. */
void kiln_vulkan_shutdown(void);
/* Errors the Khronos validation layer reported in this process
 * (KILN_VULKAN_VALIDATION=1); 0 without Vulkan or validation. */
uint64_t kiln_vulkan_validation_errors(void);

#endif

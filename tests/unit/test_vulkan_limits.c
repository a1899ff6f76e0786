/* test_vulkan_limits.c — out-of-device-memory is an error, never a crash:
 * - without a cap: an allocation larger than the device-local heap, and an
 *   absurd one, fail with KILN_OUT_OF_MEMORY and a message naming the size;
 *   the allocator still works afterwards (random data round-trips);
 * - KILN_VULKAN_MEMORY_LIMIT (vk_memory.c): a 3 MiB cap admits 3 MiB of
 *   device buffers (random data round-trips through them), refuses the next
 *   byte with the real-OOM message style, does not count host-visible
 *   staging memory, is given back when buffers and contexts go, and a
 *   malformed value fails context creation naming the variable.
 *
 * Exit 0: pass; 1: a check failed (each failure is printed); 77: no Vulkan
 * device here (the reason is printed). */
#include "devices/vulkan/vk_runtime.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/common.h"

#if !KILN_HAVE_VULKAN
int main(void) {
  printf("SKIP: kiln was built without Vulkan (KILN_HAVE_VULKAN)\n");
  return 77;
}
#else

#include "check.h"

/* Expects `st` to be an error with `code` whose message holds each of the
 * NULL-terminated needles; prints the message; frees st. */
static void expect_error(kiln_status_t st, kiln_status_code code, const char *what, ...) {
  g_checks++;
  if (!st) {
    g_failures++;
    printf("FAIL: %s succeeded, expected an error\n", what);
    return;
  }
  const char *msg = kiln_status_message(st);
  printf("  %s -> %s\n", what, msg);
  if (kiln_status_code_of(st) != code) {
    g_failures++;
    printf("FAIL: %s: status code %d, expected %d\n", what, (int)kiln_status_code_of(st), (int)code);
  }
  va_list ap;
  va_start(ap, what);
  for (const char *n; (n = va_arg(ap, const char *));)
    if (!strstr(msg, n)) {
      g_failures++;
      printf("FAIL: %s: message lacks \"%s\"\n", what, n);
    }
  va_end(ap);
  kiln_status_free(st);
}

/* Uploads random bytes to buf and reads them back through one submission. */
static void round_trip(vk_context *ctx, vk_buffer *buf, const char *what) {
  size_t n = vk_buffer_size(buf);
  uint8_t *in = malloc(n), *out = malloc(n);
  if (!in || !out) {
    CHECK(0, "%s: out of host memory", what);
    free(in);
    free(out);
    return;
  }
  for (size_t i = 0; i < n; i++) in[i] = (uint8_t)rnd();
  memset(out, 0, n);
  vk_stream *s = NULL;
  uint64_t v = 0;
  if (ok(vk_stream_create(ctx, &s), "vk_stream_create")) {
    bool good = ok(vk_stream_begin(s), "vk_stream_begin") && ok(vk_stream_upload(s, buf, 0, in, n), "upload") &&
                ok(vk_stream_readback(s, out, buf, 0, n), "readback") && ok(vk_stream_end(s), "vk_stream_end") &&
                ok(vk_submit(ctx, &s, 1, &v), "vk_submit") && ok(vk_wait(ctx, v), "vk_wait");
    if (good) {
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += in[i] != out[i];
      CHECK(bad == 0, "%s: %zu of %zu bytes differ after an upload/readback round trip", what, bad, n);
    }
    vk_stream_destroy(ctx, s);
  }
  free(in);
  free(out);
}

static void test_no_cap(const vk_device_props *props) {
  printf("no cap (device-local heap %.1f MiB):\n", (double)props->device_local_bytes / (1 << 20));
  unsetenv("KILN_VULKAN_MEMORY_LIMIT");
  vk_context *ctx = NULL;
  if (!ok(vk_context_create(0, &ctx), "vk_context_create")) return;
  vk_buffer *b = NULL;
  /* Larger than the whole heap: the driver (or kiln's own check against
   * maxMemoryAllocationSize) must refuse it. */
  size_t huge = (size_t)props->device_local_bytes + ((size_t)64 << 20);
  expect_error(vk_buffer_alloc(ctx, VK_MEM_DEVICE, huge, &b), KILN_OUT_OF_MEMORY, "alloc of heap + 64 MiB",
               "vulkan: out of device memory allocating ", NULL);
  CHECK(b == NULL, "a failed allocation left *out set");
  expect_error(vk_buffer_alloc(ctx, VK_MEM_DEVICE, (size_t)1 << 50, &b), KILN_OUT_OF_MEMORY, "alloc of 1 PiB",
               "vulkan:", "1024.0 TiB", NULL);
  vk_memory_stats ms;
  vk_memory_stats_get(ctx, &ms);
  CHECK(ms.n_live_buffers == 0 && ms.device_used_bytes == 0, "failed allocations left %d buffers, %llu bytes",
        ms.n_live_buffers, (unsigned long long)ms.device_used_bytes);
  /* The allocator still works. */
  if (ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, (1 << 20) + 12, &b), "alloc of 1 MiB after the failures")) {
    round_trip(ctx, b, "1 MiB after failed allocations");
    vk_buffer_free(ctx, b);
  }
  vk_context_destroy(ctx);
}

static void test_cap(void) {
  printf("KILN_VULKAN_MEMORY_LIMIT=3M:\n");
  setenv("KILN_VULKAN_MEMORY_LIMIT", "3M", 1);
  vk_context *ctx = NULL;
  if (!ok(vk_context_create(0, &ctx), "vk_context_create under a 3 MiB cap")) return;
  vk_buffer *a = NULL, *b = NULL, *c = NULL, *h = NULL;
  ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 1 << 20, &a), "first 1 MiB under a 3 MiB cap");
  ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 2 << 20, &b), "next 2 MiB under a 3 MiB cap");
  expect_error(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 1, &c), KILN_OUT_OF_MEMORY, "1 more byte past a full 3 MiB cap",
               "vulkan: out of device memory allocating ", "(limit 3.0 MiB set by KILN_VULKAN_MEMORY_LIMIT, 3.0 MiB in use)",
               NULL);
  CHECK(c == NULL, "a refused allocation left *out set");
  /* Staging (host-visible) memory is not device memory: not capped. */
  if (ok(vk_buffer_alloc(ctx, VK_MEM_UPLOAD, 8 << 20, &h), "8 MiB of upload memory under a 3 MiB device cap"))
    vk_buffer_free(ctx, h);
  /* The capped memory is real memory. */
  if (a) round_trip(ctx, a, "1 MiB buffer under the cap");
  if (b) round_trip(ctx, b, "2 MiB buffer under the cap");
  /* Freed space is reused, not charged again. */
  vk_buffer_free(ctx, b);
  b = NULL;
  if (ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 2 << 20, &b), "2 MiB again after freeing 2 MiB")) round_trip(ctx, b, "reused 2 MiB");
  /* A dedicated block (bigger than the 64 MiB blocks) is refused too. */
  vk_buffer_free(ctx, a);
  vk_buffer_free(ctx, b);
  a = b = NULL;
  expect_error(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 100 << 20, &c), KILN_OUT_OF_MEMORY, "100 MiB under a 3 MiB cap",
               "allocating 100.0 MiB (limit 3.0 MiB set by KILN_VULKAN_MEMORY_LIMIT", NULL);
  vk_context_destroy(ctx);

  /* The context's blocks went with it: a new context has the whole cap. */
  if (!ok(vk_context_create(0, &ctx), "second vk_context_create under a 3 MiB cap")) return;
  if (ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 3 << 20, &a), "3 MiB in a new context (the old one's blocks were given back)")) {
    round_trip(ctx, a, "3 MiB in a new context");
    vk_buffer_free(ctx, a);
  }
  vk_context_destroy(ctx);

  /* A value that is not a size is an error, not "no cap". */
  static const char *const bad[] = {"lots", "12X", "-5M", "3MB7"};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(bad); i++) {
    setenv("KILN_VULKAN_MEMORY_LIMIT", bad[i], 1);
    vk_context *bctx = NULL;
    char what[64];
    snprintf(what, sizeof what, "vk_context_create with KILN_VULKAN_MEMORY_LIMIT=%s", bad[i]);
    expect_error(vk_context_create(0, &bctx), KILN_INVALID_ARGUMENT, what, "KILN_VULKAN_MEMORY_LIMIT=", bad[i], NULL);
    CHECK(bctx == NULL, "a failed vk_context_create left *out set");
    if (bctx) vk_context_destroy(bctx);
  }
  /* Suffix spellings all mean the same cap. */
  static const char *const same[] = {"3145728", "3072K", "3M", "3MiB", "3mb"};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(same); i++) {
    setenv("KILN_VULKAN_MEMORY_LIMIT", same[i], 1);
    if (!ok(vk_context_create(0, &ctx), "vk_context_create")) continue;
    a = b = NULL;
    bool got = ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 3 << 20, &a), same[i]);
    kiln_status_t st = vk_buffer_alloc(ctx, VK_MEM_DEVICE, 4096, &b);
    CHECK(got && st && kiln_status_code_of(st) == KILN_OUT_OF_MEMORY, "KILN_VULKAN_MEMORY_LIMIT=%s is not a 3 MiB cap",
          same[i]);
    kiln_status_free(st);
    vk_buffer_free(ctx, a);
    vk_buffer_free(ctx, b);
    vk_context_destroy(ctx);
  }
  unsetenv("KILN_VULKAN_MEMORY_LIMIT");
}

int main(void) {
  vk_device_props props[8];
  kiln_status_t why = NULL;
  int n = vk_enumerate(props, 8, &why);
  if (n <= 0) {
    printf("SKIP: no Vulkan device: %s\n", why ? kiln_status_message(why) : "?");
    kiln_status_free(why);
    return 77;
  }
  printf("device 0: %s\n", props[0].name);
  test_no_cap(&props[0]);
  test_cap();
  printf("%d checks, %d failures\n", g_checks, g_failures);
  if (g_failures) return 1;
  printf("PASS\n");
  return 0;
}

#endif /* KILN_HAVE_VULKAN */

/* The asynchronous device runtime (runtime/device.h kiln_device_*), on every
 * device this machine has: host devices through the documented defaults,
 * Vulkan through its staging ring, batches and timeline. Random data; each
 * result checked against a host computation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "runtime/device.h"

static int failures;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      failures++;                                          \
    }                                                      \
  } while (0)

static bool ok(kiln_status_t st, const char *what) {
  if (!st) return true;
  fprintf(stderr, "FAIL %s: %s\n", what, kiln_status_message(st));
  kiln_status_free(st);
  failures++;
  return false;
}

static float frand(unsigned *seed) {
  *seed = *seed * 1664525u + 1013904223u;
  return (float)((*seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* upload -> copy -> readback round trip, with odd sizes and offsets. */
static void test_copies(kiln_device *dev, const char *name) {
  unsigned seed = 7;
  for (int trial = 0; trial < 4; trial++) {
    size_t n = (size_t)(1 + trial * 997 + (trial == 3 ? 3 << 20 : 0)); /* the last: 12 MiB */
    float *src = malloc(n * sizeof *src), *dst = calloc(n, sizeof *dst);
    for (size_t i = 0; i < n; i++) src[i] = frand(&seed);
    kiln_device_buffer *a = NULL, *b = NULL;
    if (ok(kiln_device_buffer_alloc(dev, n * 4 + 64, &a), "alloc a") &&
        ok(kiln_device_buffer_alloc(dev, n * 4 + 64, &b), "alloc b")) {
      kiln_device_event ev;
      bool good = ok(kiln_device_upload(dev, a, 16, src, n * 4), "upload") &&
                  ok(kiln_device_copy(dev, b, 32, a, 16, n * 4), "copy") &&
                  ok(kiln_device_readback(dev, dst, b, 32, n * 4), "readback") && ok(kiln_device_submit(dev), "submit") &&
                  ok(kiln_device_event_record(dev, &ev), "event") && ok(kiln_device_event_wait(dev, ev), "wait");
      if (good) {
        CHECK(kiln_device_event_done(dev, ev), "%s: event not done after wait", name);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += dst[i] != src[i];
        CHECK(bad == 0, "%s: %zu of %zu elements differ after upload/copy/readback", name, bad, n);
      }
      /* Out-of-range ranges are errors, not crashes. */
      kiln_status_t st = kiln_device_upload(dev, a, n * 4, src, 128);
      CHECK(st != NULL, "%s: upload past the end accepted", name);
      kiln_status_free(st);
    }
    if (a) kiln_device_buffer_free(dev, a);
    if (b) kiln_device_buffer_free(dev, b);
    free(src);
    free(dst);
  }
}

/* A program through compile/launch (devices that compile kernels): GLSL,
 * OpenCL C in the ABI of the OpenCL C dialect (each buffer a byte pointer
 * and a byte offset), or CUDA C (typed device pointers). Under the suite's
 * fake CUDA driver (KILN_TEST_FAKE_CUDA=1) kernels are checked but never
 * run, so the results are not compared there. */
static void test_launch(kiln_device *dev, const char *name) {
  bool opencl = !strncmp(name, "opencl", 6);
  bool cuda = !strncmp(name, "cuda", 4);
  const char *fake = getenv("KILN_TEST_FAKE_CUDA");
  bool compare = !(cuda && fake && !strcmp(fake, "1"));
  const char *cu =
      "extern \"C\" __global__ void axpb(const float *x, float *y) {\n"
      "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < 1000) y[i] = 2.0f * x[i] + 1.0f;\n"
      "}\n";
  const char *ocl =
      "__kernel void axpb(__global uchar *p0, ulong o0, __global uchar *p1, ulong o1) {\n"
      "  __global const float *x = (__global const float *)(p0 + o0);\n"
      "  __global float *y = (__global float *)(p1 + o1);\n"
      "  size_t i = get_global_id(0);\n"
      "  if (i < 1000) y[i] = 2.0f * x[i] + 1.0f;\n"
      "}\n";
  const char *glsl =
      "#version 450\n"
      "layout(local_size_x = 64) in;\n"
      "layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };\n"
      "layout(std430, set = 0, binding = 1) buffer Y { float y[]; };\n"
      "void main() {\n"
      "  uint i = gl_GlobalInvocationID.x;\n"
      "  if (i < 1000u) y[i] = 2.0 * x[i] + 1.0;\n"
      "}\n";
  kiln_program_desc desc = {"axpb", cuda ? cu : opencl ? ocl : glsl, 2};
  kiln_device_program *prog = NULL;
  kiln_status_t st = kiln_device_compile(dev, &desc, &prog);
  if (st) {
    /* Host devices compile whole graphs instead: a clear error. */
    CHECK(kiln_status_code_of(st) == KILN_UNSUPPORTED, "%s: compile failed: %s", name, kiln_status_message(st));
    kiln_status_free(st);
    return;
  }
  unsigned seed = 11;
  float x[1000], y[1000];
  for (int i = 0; i < 1000; i++) x[i] = frand(&seed);
  kiln_device_buffer *bx = NULL, *by = NULL;
  if (ok(kiln_device_buffer_alloc(dev, sizeof x, &bx), "alloc x") && ok(kiln_device_buffer_alloc(dev, sizeof y, &by), "alloc y")) {
    kiln_device_buffer *bufs[2] = {bx, by};
    uint32_t grid[3] = {opencl || cuda ? 1000 : (1000 + 63) / 64, 1, 1}; /* OpenCL, CUDA: threads; GLSL: groups of 64 */
    kiln_device_event ev;
    if (ok(kiln_device_upload(dev, bx, 0, x, sizeof x), "upload") && ok(kiln_device_launch(dev, prog, 2, bufs, grid), "launch") &&
        ok(kiln_device_readback(dev, y, by, 0, sizeof y), "readback") && ok(kiln_device_submit(dev), "submit") &&
        ok(kiln_device_event_record(dev, &ev), "event") && ok(kiln_device_event_wait(dev, ev), "wait") && compare) {
      int bad = 0;
      for (int i = 0; i < 1000; i++) bad += fabsf(y[i] - (2.0f * x[i] + 1.0f)) > 1e-6f;
      CHECK(bad == 0, "%s: %d of 1000 results wrong", name, bad);
    }
  }
  if (bx) kiln_device_buffer_free(dev, bx);
  if (by) kiln_device_buffer_free(dev, by);
  kiln_device_program_free(dev, prog);
  /* A shader that does not compile is a clear error naming it. */
  kiln_program_desc bad = {"broken_kernel",
                           cuda     ? "extern \"C\" __global__ void broken_kernel(float *y) { y[0] = nope(); }\n"
                           : opencl ? "__kernel void broken_kernel(__global float *y) { y[0] = nope(); }\n"
                                    : "#version 450\nvoid main() { nope(); }\n",
                           0};
  st = kiln_device_compile(dev, &bad, &prog);
  CHECK(st && strstr(kiln_status_message(st), "broken_kernel"), "%s: bad shader: %s", name,
        st ? kiln_status_message(st) : "accepted");
  /* OpenCL, CUDA: the compiler's log, naming what is wrong, is in the message. */
  if (opencl || cuda)
    CHECK(st && strstr(kiln_status_message(st), opencl ? "build log" : "NVRTC") && strstr(kiln_status_message(st), "nope"),
          "%s: the build error carries no build log: %s", name, st ? kiln_status_message(st) : "accepted");
  kiln_status_free(st);
}

/* Device memory the device cannot have is a clear out-of-memory error. */
static void test_out_of_memory(kiln_device *dev, const char *name) {
  kiln_device_info info;
  dev->vt->query(dev, &info);
  if (info.host_memory) return;
  kiln_device_buffer *huge = NULL;
  kiln_status_t st = kiln_device_buffer_alloc(dev, (size_t)1 << 50, &huge);
  CHECK(st && kiln_status_code_of(st) == KILN_OUT_OF_MEMORY && strstr(kiln_status_message(st), "out of device memory"),
        "%s: a 1 PiB buffer: %s", name, st ? kiln_status_message(st) : "allocated");
  kiln_status_free(st);
  if (huge) kiln_device_buffer_free(dev, huge);
  /* Many small buffers come from few driver allocations and are all usable. */
  kiln_device_buffer *small[300] = {0};
  for (int i = 0; i < 300; i++)
    if (!ok(kiln_device_buffer_alloc(dev, (size_t)(1 + i * 37), &small[i]), "small alloc")) break;
  for (int i = 0; i < 300; i++)
    if (small[i]) kiln_device_buffer_free(dev, small[i]);
}

int main(void) {
  kiln_device *devs[16];
  int n = kiln_device_list(devs, 16);
  int tested = 0;
  for (int i = 0; i < n && i < 16; i++) {
    kiln_device_info info;
    devs[i]->vt->query(devs[i], &info);
    if (!strcmp(info.name, "null")) continue;
    printf("device %s\n", info.name);
    test_copies(devs[i], info.name);
    test_launch(devs[i], info.name);
    test_out_of_memory(devs[i], info.name);
    kiln_device_synchronize(devs[i]);
    tested++;
  }
  const char *names[] = {"vulkan", "opencl", "cuda"};
  for (int i = 0; i < 3; i++) {
    const char *why = kiln_device_absent_reason(names[i]);
    if (why) printf("no %s device: %s\n", names[i], why);
  }
  CHECK(tested >= 2, "expected at least ref and cpu, tested %d devices", tested);
  printf("%s: %d devices, %d failures\n", failures ? "FAIL" : "PASS", tested, failures);
  return failures ? 1 : 0;
}

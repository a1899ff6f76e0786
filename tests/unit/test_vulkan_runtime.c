/* test_vulkan_runtime.c — the Vulkan runtime (src/devices/vulkan/vk_runtime.h)
 * on whatever device vk_enumerate finds first (lavapipe in CI): allocator
 * bookkeeping, a push-constant kernel recorded once and submitted three
 * times, copy/fill, a 100 MB transfer through the staging rings, shader
 * compile errors, SPIR-V cache corruption, batch compiles, fp16/subgroup
 * shaders when the device has them, two threads submitting at once, and
 * specialization constants (one source, several value sets, compiled once;
 * bad spec lists; KILN_DUMP_DIR source dumps).
 *
 * Exit 0: pass; 1: a check failed (each failure is printed); 77: no Vulkan
 * device here (the reason is printed) — ctest reports that as a skip.
 * With KILN_VULKAN_VALIDATION=1 the validation layer must report no error
 * (leaked objects are errors reported at vkDestroyDevice/vkDestroyInstance). */
#include "devices/vulkan/vk_runtime.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "tensor/dtype.h"

#if !KILN_HAVE_VULKAN
int main(void) {
  printf("SKIP: kiln was built without Vulkan (KILN_HAVE_VULKAN)\n");
  return 77;
}
#else

#define CHECK_RNG_SEED 0x243f6a8885a308d3ull
#include "check.h"
static float rnd_float(void) { return (float)((double)(rnd() >> 11) / (double)(1ull << 53) * 2.0 - 1.0); }

#define TRY_OR(expr, what, action) \
  do {                             \
    if (!ok((expr), (what))) action; \
  } while (0)

static const char *type_name(int t) {
  static const char *names[] = {"other", "integrated", "discrete", "virtual", "cpu"};
  return t >= 0 && t <= 4 ? names[t] : "?";
}

/* ---- memory --------------------------------------------------------------------- */

static void test_memory(vk_context *ctx) {
  enum { N = 300 };
  vk_buffer *bufs[N] = {0};
  size_t sizes[N];
  vk_memory_stats st0;
  vk_memory_stats_get(ctx, &st0);
  CHECK(st0.device_used_bytes == 0 && st0.host_used_bytes == 0 && st0.n_live_buffers == 0,
        "fresh context has used bytes (%llu device, %llu host, %d buffers)",
        (unsigned long long)st0.device_used_bytes, (unsigned long long)st0.host_used_bytes, st0.n_live_buffers);
  for (int i = 0; i < N; i++) {
    vk_mem_kind kind = (vk_mem_kind)(rnd() % 3);
    size_t size = (rnd() % 4 == 0) ? rnd() % 100 : 1 + rnd() % (3u << 20); /* some tiny, some zero */
    if (i == 7) size = (size_t)70 << 20;                                    /* bigger than a block */
    sizes[i] = size;
    TRY_OR(vk_buffer_alloc(ctx, kind, size, &bufs[i]), "vk_buffer_alloc", continue);
    CHECK(vk_buffer_size(bufs[i]) == size, "buffer %d: size %zu, expected %zu", i, vk_buffer_size(bufs[i]), size);
    unsigned char *p = vk_buffer_host_ptr(bufs[i]);
    if (kind != VK_MEM_DEVICE) CHECK(p != NULL, "buffer %d (kind %d) has no host pointer", i, kind);
    /* Overlapping suballocations would corrupt each other's pattern. */
    if (p && size) memset(p, i & 0xff, size);
  }
  vk_memory_stats mid;
  vk_memory_stats_get(ctx, &mid);
  CHECK(mid.n_live_buffers == N, "live buffers %d, expected %d", mid.n_live_buffers, N);
  for (int i = 0; i < N; i++) {
    unsigned char *p = bufs[i] ? vk_buffer_host_ptr(bufs[i]) : NULL;
    if (!p) continue;
    size_t bad = 0;
    for (size_t j = 0; j < sizes[i]; j++) bad += p[j] != (unsigned char)(i & 0xff);
    CHECK(bad == 0, "buffer %d: %zu bytes overwritten by another buffer", i, bad);
  }
  /* Free in random order, reallocating some on the way (reuse + coalescing). */
  int order[N];
  for (int i = 0; i < N; i++) order[i] = i;
  for (int i = N - 1; i > 0; i--) {
    int j = (int)(rnd() % (uint64_t)(i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  for (int i = 0; i < N; i++) {
    vk_buffer_free(ctx, bufs[order[i]]);
    bufs[order[i]] = NULL;
    if (i % 10 == 5) {
      vk_buffer *b = NULL;
      TRY_OR(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 12345, &b), "vk_buffer_alloc (reuse)", continue);
      vk_buffer_free(ctx, b);
    }
  }
  vk_buffer_free(ctx, NULL);
  vk_memory_stats end;
  vk_memory_stats_get(ctx, &end);
  CHECK(end.device_used_bytes == 0 && end.host_used_bytes == 0 && end.n_live_buffers == 0,
        "after freeing everything: %llu device bytes, %llu host bytes, %d buffers still used",
        (unsigned long long)end.device_used_bytes, (unsigned long long)end.host_used_bytes, end.n_live_buffers);
  CHECK(end.n_blocks <= 3, "%d empty blocks kept (at most one spare per kind)", end.n_blocks);
  printf("memory: %d buffers allocated/freed; peak %d blocks, %.1f MiB device / %.1f MiB host blocks\n", N,
         mid.n_blocks, mid.device_block_bytes / 1048576.0, mid.host_block_bytes / 1048576.0);
}

/* ---- kernels --------------------------------------------------------------------------- */

static const char *kSaxpy =
    "#version 450\n"
    "layout(local_size_x = 64) in;\n"
    "layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };\n"
    "layout(std430, set = 0, binding = 1) buffer Y { float y[]; };\n"
    "layout(push_constant) uniform P { float a; float b; uint n; } p;\n"
    "void main() {\n"
    "  uint i = gl_GlobalInvocationID.x;\n"
    "  if (i < p.n) y[i] = y[i] + p.a * x[i] + p.b;\n"
    "}\n";

typedef struct saxpy_push {
  float a, b;
  uint32_t n;
} saxpy_push;

static bool close_enough(float got, float want) { return fabsf(got - want) <= 1e-5f * fabsf(want) + 1e-5f; }

/* y += a*x + b, `times` submissions of one recorded stream; checks against the host. */
static void run_saxpy(vk_context *ctx, const vk_kernel *k, uint32_t n, int times, const char *label) {
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *out = malloc(n * sizeof *out);
  vk_buffer *bx = NULL, *by = NULL;
  vk_stream *io = NULL, *work = NULL;
  if (!x || !y || !out) {
    CHECK(0, "out of host memory");
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) x[i] = rnd_float(), y[i] = rnd_float();
  TRY_OR(vk_buffer_alloc(ctx, VK_MEM_DEVICE, n * sizeof(float), &bx), "alloc x", goto done);
  TRY_OR(vk_buffer_alloc(ctx, VK_MEM_DEVICE, n * sizeof(float), &by), "alloc y", goto done);
  TRY_OR(vk_stream_create(ctx, &io), "stream create", goto done);
  TRY_OR(vk_stream_create(ctx, &work), "stream create", goto done);
  saxpy_push push = {1.5f, -0.25f, n};
  /* Recorded once. */
  TRY_OR(vk_stream_begin(work), "begin", goto done);
  vk_buffer *binds[2] = {bx, by};
  TRY_OR(vk_stream_dispatch(work, k, binds, &push, (n + 63) / 64, 1, 1), "dispatch", goto done);
  TRY_OR(vk_stream_end(work), "end", goto done);
  CHECK(vk_stream_dispatch_count(work) == 1, "dispatch count %d", vk_stream_dispatch_count(work));

  TRY_OR(vk_stream_begin(io), "begin upload", goto done);
  TRY_OR(vk_stream_upload(io, bx, 0, x, n * sizeof(float)), "upload x", goto done);
  TRY_OR(vk_stream_upload(io, by, 0, y, n * sizeof(float)), "upload y", goto done);
  TRY_OR(vk_stream_end(io), "end upload", goto done);
  uint64_t v = 0;
  TRY_OR(vk_submit(ctx, &io, 1, &v), "submit upload", goto done);
  /* The one-shot rule: a stream with staging transfers is submitted once. */
  uint64_t v2 = 0;
  kiln_status_t again = vk_submit(ctx, &io, 1, &v2);
  CHECK(again != NULL, "resubmitting a stream with uploads was accepted");
  kiln_status_free(again);
  for (int t = 0; t < times; t++) TRY_OR(vk_submit(ctx, &work, 1, &v), "submit work", goto done);
  TRY_OR(vk_stream_begin(io), "begin readback", goto done);
  TRY_OR(vk_stream_readback(io, out, by, 0, n * sizeof(float)), "readback", goto done);
  TRY_OR(vk_stream_end(io), "end readback", goto done);
  TRY_OR(vk_submit(ctx, &io, 1, &v), "submit readback", goto done);
  TRY_OR(vk_wait(ctx, v), "wait", goto done);
  CHECK(vk_completed_value(ctx) >= v, "completed value %llu < %llu", (unsigned long long)vk_completed_value(ctx),
        (unsigned long long)v);
  int bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    float want = y[i];
    for (int t = 0; t < times; t++) want = want + push.a * x[i] + push.b;
    if (!close_enough(out[i], want) && bad++ < 5) printf("  %s: y[%u] = %.9g, want %.9g\n", label, i, out[i], want);
  }
  CHECK(bad == 0, "%s: %d of %u values wrong", label, bad, n);
done:
  vk_stream_destroy(ctx, io);
  vk_stream_destroy(ctx, work);
  vk_buffer_free(ctx, bx);
  vk_buffer_free(ctx, by);
  free(x);
  free(y);
  free(out);
}

static void test_copy_fill(vk_context *ctx) {
  enum { N = 1 << 20 };
  unsigned char *src = malloc(N), *out = malloc(N);
  vk_buffer *a = NULL, *b = NULL;
  vk_stream *s = NULL;
  for (int i = 0; i < N; i++) src[i] = (unsigned char)rnd();
  TRY_OR(vk_buffer_alloc(ctx, VK_MEM_DEVICE, N, &a), "alloc a", goto done);
  TRY_OR(vk_buffer_alloc(ctx, VK_MEM_DEVICE, N + 3, &b), "alloc b", goto done);
  TRY_OR(vk_stream_create(ctx, &s), "stream", goto done);
  TRY_OR(vk_stream_begin(s), "begin", goto done);
  TRY_OR(vk_stream_upload(s, a, 0, src, N), "upload", goto done);
  TRY_OR(vk_stream_fill_zero(s, b, 0, N + 3), "fill_zero whole (odd size)", goto done);
  TRY_OR(vk_stream_copy(s, b, 1000, a, 77, N - 5000), "copy", goto done);
  TRY_OR(vk_stream_fill_zero(s, b, 4096, 8192), "fill_zero part", goto done);
  /* Bad ranges are errors, not crashes. */
  kiln_status_t e = vk_stream_copy(s, b, N, a, 0, 100);
  CHECK(e && kiln_status_code_of(e) == KILN_OUT_OF_RANGE, "out-of-range copy: %s", kiln_status_message(e));
  kiln_status_free(e);
  /* ...and they spoil the recording, so re-record. */
  e = vk_stream_end(s);
  CHECK(e != NULL, "vk_stream_end accepted a stream whose recording failed");
  kiln_status_free(e);
  TRY_OR(vk_stream_begin(s), "begin", goto done);
  TRY_OR(vk_stream_upload(s, a, 0, src, N), "upload", goto done);
  TRY_OR(vk_stream_fill_zero(s, b, 0, N + 3), "fill_zero whole (odd size)", goto done);
  TRY_OR(vk_stream_copy(s, b, 1000, a, 77, N - 5000), "copy", goto done);
  TRY_OR(vk_stream_fill_zero(s, b, 4096, 8192), "fill_zero part", goto done);
  TRY_OR(vk_stream_readback(s, out, b, 0, N), "readback", goto done);
  TRY_OR(vk_stream_end(s), "end", goto done);
  uint64_t v;
  TRY_OR(vk_submit(ctx, &s, 1, &v), "submit", goto done);
  TRY_OR(vk_wait(ctx, v), "wait", goto done);
  int bad = 0;
  for (int i = 0; i < N; i++) {
    unsigned char want = 0;
    if (i >= 1000 && i < 1000 + N - 5000) want = src[i - 1000 + 77];
    if (i >= 4096 && i < 4096 + 8192) want = 0;
    if (out[i] != want && bad++ < 5) printf("  copy/fill: byte %d = %d, want %d\n", i, out[i], want);
  }
  CHECK(bad == 0, "copy/fill: %d bytes wrong", bad);
done:
  vk_stream_destroy(ctx, s);
  vk_buffer_free(ctx, a);
  vk_buffer_free(ctx, b);
  free(src);
  free(out);
}

/* 100 MB host -> device -> host: chunked through the ring (which fills and
 * waits for older submissions), and in one piece (bigger than the ring). */
static void test_big_transfer(vk_context *ctx) {
  const size_t total = 100u << 20;
  uint32_t *src = malloc(total), *out = malloc(total);
  vk_buffer *dev = NULL;
  vk_stream *streams[16] = {0};
  if (!src || !out) {
    CHECK(0, "out of host memory");
    goto done;
  }
  for (size_t i = 0; i < total / 4; i++) src[i] = (uint32_t)(i * 2654435761u);
  memset(out, 0xcd, total);
  TRY_OR(vk_buffer_alloc(ctx, VK_MEM_DEVICE, total, &dev), "alloc 100 MB", goto done);
  for (int i = 0; i < 16; i++) TRY_OR(vk_stream_create(ctx, &streams[i]), "stream", goto done);
  /* 7.3 MB chunks, each its own submission, nobody waits in between. */
  const size_t chunk = 7654321 & ~(size_t)3;
  uint64_t v = 0;
  int si = 0;
  for (size_t off = 0; off < total; off += chunk, si = (si + 1) % 16) {
    size_t n = KILN_MIN(chunk, total - off);
    vk_stream *s = streams[si];
    TRY_OR(vk_stream_begin(s), "begin chunk", goto done);
    TRY_OR(vk_stream_upload(s, dev, off, (const char *)src + off, n), "upload chunk", goto done);
    TRY_OR(vk_stream_end(s), "end chunk", goto done);
    TRY_OR(vk_submit(ctx, &s, 1, &v), "submit chunk", goto done);
  }
  TRY_OR(vk_stream_begin(streams[0]), "begin", goto done);
  for (size_t off = 0; off < total; off += chunk)
    TRY_OR(vk_stream_readback(streams[0], (char *)out + off, dev, off, KILN_MIN(chunk, total - off)), "readback chunk",
           goto done);
  TRY_OR(vk_stream_end(streams[0]), "end", goto done);
  TRY_OR(vk_submit(ctx, &streams[0], 1, &v), "submit readback", goto done);
  TRY_OR(vk_wait(ctx, v), "wait", goto done);
  CHECK(!memcmp(src, out, total), "100 MB chunked round trip differs");

  /* In one piece. */
  for (size_t i = 0; i < total / 4; i++) src[i] = ~src[i];
  memset(out, 0, total);
  vk_stream *s = streams[1];
  TRY_OR(vk_stream_begin(s), "begin", goto done);
  TRY_OR(vk_stream_upload(s, dev, 0, src, total), "upload 100 MB", goto done);
  TRY_OR(vk_stream_readback(s, out, dev, 0, total), "readback 100 MB", goto done);
  TRY_OR(vk_stream_end(s), "end", goto done);
  TRY_OR(vk_submit(ctx, &s, 1, &v), "submit", goto done);
  TRY_OR(vk_wait(ctx, v), "wait", goto done);
  CHECK(!memcmp(src, out, total), "100 MB single round trip differs");
done:
  for (int i = 0; i < 16; i++) vk_stream_destroy(ctx, streams[i]);
  vk_buffer_free(ctx, dev);
  free(src);
  free(out);
}

static void test_compile_error(vk_context *ctx) {
  const char *bad =
      "#version 450\n"
      "layout(local_size_x = 1) in;\n"
      "layout(std430, binding = 0) buffer B { float b[]; };\n"
      "void main() {\n"
      "  b[0] = undefined_thing * 2.0;\n"
      "}\n";
  vk_kernel_desc d = {"bad_shader", bad, 1, 0};
  vk_kernel *k = NULL;
  kiln_status_t st = vk_kernel_create(ctx, &d, &k);
  const char *msg = kiln_status_message(st);
  CHECK(st && kiln_status_code_of(st) == KILN_UNSUPPORTED, "bad shader: expected KILN_UNSUPPORTED, got: %s", msg);
  CHECK(st && strstr(msg, "vulkan: shader 'bad_shader' failed to compile:") && strstr(msg, "undefined_thing"),
        "bad shader: unclear message: %s", msg);
  CHECK(st && strstr(msg, ">   5 |"), "bad shader: message lacks the source excerpt: %s", msg);
  CHECK(k == NULL, "bad shader returned a kernel");
  if (st) printf("compile error message:\n%s\n", msg);
  kiln_status_free(st);

  /* Batch: the good ones compile, the bad one is NULL, the error is returned. */
  char srcs[4][1024];
  vk_kernel_desc descs[5];
  for (int i = 0; i < 4; i++) {
    snprintf(srcs[i], sizeof srcs[i],
             "#version 450\nlayout(local_size_x = 32) in;\n"
             "layout(std430, binding = 0) buffer B { float b[]; };\n"
             "void main() { b[gl_GlobalInvocationID.x] *= %d.0; }\n",
             i + 2);
    descs[i] = (vk_kernel_desc){"scale", srcs[i], 1, 0};
  }
  descs[4] = (vk_kernel_desc){"broken_in_batch", "#version 450\nvoid main() { nope }\n", 0, 0};
  vk_kernel *ks[5];
  st = vk_kernel_create_batch(ctx, descs, 5, ks);
  CHECK(st && strstr(kiln_status_message(st), "broken_in_batch"), "batch: expected the broken shader's error, got: %s",
        kiln_status_message(st));
  kiln_status_free(st);
  for (int i = 0; i < 4; i++) CHECK(ks[i] != NULL, "batch: kernel %d missing", i);
  CHECK(ks[4] == NULL, "batch: broken kernel returned");
  for (int i = 0; i < 5; i++) vk_kernel_destroy(ctx, ks[i]);

  /* Two kernels sharing a broken source (compiled once): both NULL, the
   * error names the first of them. */
  vk_kernel_desc shared[3] = {{"scale_ok", srcs[0], 1, 0, NULL, 0},
                              {"broken_first", descs[4].glsl, 0, 0, NULL, 0},
                              {"broken_second", descs[4].glsl, 0, 0, NULL, 0}};
  st = vk_kernel_create_batch(ctx, shared, 3, ks);
  CHECK(st && strstr(kiln_status_message(st), "broken_first"), "shared broken source: got %s",
        st ? kiln_status_message(st) : "success");
  kiln_status_free(st);
  CHECK(ks[0] && !ks[1] && !ks[2], "shared broken source: kernels %p %p %p", (void *)ks[0], (void *)ks[1],
        (void *)ks[2]);
  for (int i = 0; i < 3; i++) vk_kernel_destroy(ctx, ks[i]);
}

static int count_spv(const char *dir, char paths[][1024], int max) {
  DIR *d = opendir(dir);
  int n = 0;
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".spv") && !strstr(e->d_name, ".tmp.") && n < max)
      snprintf(paths[n++], 1024, "%s/%s", dir, e->d_name);
  closedir(d);
  return n;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) ? -1 : (long)st.st_size;
}

/* Corrupts every cached SPIR-V file; the next create must silently rebuild it. */
static void test_corrupt_cache(vk_context *ctx, const char *cache_dir) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/vulkan", cache_dir);
  static char paths[64][1024];
  int n = count_spv(dir, paths, 64);
  CHECK(n > 0, "no SPIR-V files were cached in %s", dir);
  long sizes[64];
  for (int i = 0; i < n; i++) {
    sizes[i] = file_size(paths[i]);
    FILE *f = fopen(paths[i], "r+b");
    if (!f) continue;
    /* Flip bytes in the middle (payload corrupt, footer intact)... */
    fseek(f, sizes[i] / 2, SEEK_SET);
    fputs("garbage!", f);
    fclose(f);
  }
  if (n > 1) { /* ...and truncate one */
    if (truncate(paths[1], 10)) CHECK(0, "truncate failed");
  }
  vk_kernel_desc d = {"saxpy_after_corruption", kSaxpy, 2, sizeof(saxpy_push)};
  vk_kernel *k = NULL;
  TRY_OR(vk_kernel_create(ctx, &d, &k), "create after corrupting the cache", return);
  run_saxpy(ctx, k, 1000, 1, "saxpy after cache corruption");
  vk_kernel_destroy(ctx, k);
  /* The saxpy entry was rewritten whole. */
  int n2 = count_spv(dir, paths, 64);
  int restored = 0;
  for (int i = 0; i < n2; i++) {
    FILE *f = fopen(paths[i], "rb");
    if (!f) continue;
    char tail[8] = {0};
    fseek(f, -48, SEEK_END);
    if (fread(tail, 1, 8, f) == 8 && !memcmp(tail, "KILNSPV1", 8)) restored++;
    fclose(f);
  }
  CHECK(restored >= 1, "no valid SPIR-V cache entry after recompiling");
}

static void test_features(vk_context *ctx) {
  const vk_device_props *p = vk_context_props(ctx);
  if (p->fp16) {
    const char *src =
        "#version 450\n"
        "#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require\n"
        "#extension GL_EXT_shader_16bit_storage : require\n"
        "layout(local_size_x = 64) in;\n"
        "layout(std430, binding = 0) buffer B { float16_t h[]; };\n"
        "layout(std430, binding = 1) buffer C { float f[]; };\n"
        "void main() { uint i = gl_GlobalInvocationID.x; h[i] = float16_t(2.0) * float16_t(f[i]); }\n";
    vk_kernel_desc d = {"fp16", src, 2, 0};
    vk_kernel *k = NULL;
    vk_buffer *bh = NULL, *bf = NULL;
    vk_stream *s = NULL;
    float in[64];
    uint16_t out[64];
    for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f;
    if (ok(vk_kernel_create(ctx, &d, &k), "fp16 kernel") && ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 128, &bh), "alloc") &&
        ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 256, &bf), "alloc") && ok(vk_stream_create(ctx, &s), "stream") &&
        ok(vk_stream_begin(s), "begin") && ok(vk_stream_upload(s, bf, 0, in, sizeof in), "upload") &&
        ok(vk_stream_dispatch(s, k, (vk_buffer *[]){bh, bf}, NULL, 1, 1, 1), "dispatch") &&
        ok(vk_stream_readback(s, out, bh, 0, sizeof out), "readback") && ok(vk_stream_end(s), "end")) {
      uint64_t v;
      if (ok(vk_submit(ctx, &s, 1, &v), "submit") && ok(vk_wait(ctx, v), "wait")) {
        int bad = 0;
        for (int i = 0; i < 64; i++) bad += out[i] != kiln_f32_to_f16(in[i] * 2.0f);
        CHECK(bad == 0, "fp16 kernel: %d wrong halves", bad);
      }
    }
    vk_stream_destroy(ctx, s);
    vk_buffer_free(ctx, bh);
    vk_buffer_free(ctx, bf);
    vk_kernel_destroy(ctx, k);
  }
  if (p->subgroup_arithmetic) {
    const char *src =
        "#version 450\n"
        "#extension GL_KHR_shader_subgroup_arithmetic : require\n"
        "layout(local_size_x = 64) in;\n"
        "layout(std430, binding = 0) buffer B { uint v[]; };\n"
        "void main() { uint s = subgroupAdd(1u); if (subgroupElect()) atomicAdd(v[0], s); }\n";
    vk_kernel_desc d = {"subgroup", src, 1, 0};
    vk_kernel *k = NULL;
    vk_buffer *b = NULL;
    vk_stream *s = NULL;
    uint32_t out = 0;
    if (ok(vk_kernel_create(ctx, &d, &k), "subgroup kernel") && ok(vk_buffer_alloc(ctx, VK_MEM_DEVICE, 4, &b), "alloc") &&
        ok(vk_stream_create(ctx, &s), "stream") && ok(vk_stream_begin(s), "begin") &&
        ok(vk_stream_fill_zero(s, b, 0, 4), "fill") &&
        ok(vk_stream_dispatch(s, k, &b, NULL, 10, 1, 1), "dispatch") &&
        ok(vk_stream_readback(s, &out, b, 0, 4), "readback") && ok(vk_stream_end(s), "end")) {
      uint64_t v;
      if (ok(vk_submit(ctx, &s, 1, &v), "submit") && ok(vk_wait(ctx, v), "wait"))
        CHECK(out == 640, "subgroupAdd kernel counted %u invocations, want 640", out);
    }
    vk_stream_destroy(ctx, s);
    vk_buffer_free(ctx, b);
    vk_kernel_destroy(ctx, k);
  }
}

/* ---- specialization constants ------------------------------------------------------------ */

/* y[i] = SCALE * sum_{k<K} x[i*K + k] for i < N; y[i] untouched for i >= N.
 * N bounds the grid, K is a loop bound, SCALE a float (its bits as the value);
 * the ids are not contiguous on purpose. */
static const char *kSpecSum =
    "#version 450\n"
    "layout(local_size_x = 64) in;\n"
    "layout(constant_id = 0) const int N = 1;\n"
    "layout(constant_id = 3) const int K = 1;\n"
    "layout(constant_id = 7) const float SCALE = 1.0;\n"
    "layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };\n"
    "layout(std430, set = 0, binding = 1) buffer Y { float y[]; };\n"
    "void main() {\n"
    "  int i = int(gl_GlobalInvocationID.x);\n"
    "  if (i >= N) return;\n"
    "  float acc = 0.0;\n"
    "  for (int k = 0; k < K; k++) acc += x[i * K + k];\n"
    "  y[i] = acc * SCALE;\n"
    "}\n";

typedef struct spec_case {
  int n, k;
  float scale;
  vk_spec_const spec[3];
} spec_case;

static void spec_case_init(spec_case *c, int n, int k, float scale) {
  c->n = n;
  c->k = k;
  c->scale = scale;
  uint32_t bits;
  memcpy(&bits, &scale, 4);
  /* Not in id order: the map entries must not depend on it. */
  c->spec[0] = (vk_spec_const){3, (uint32_t)k};
  c->spec[1] = (vk_spec_const){7, bits};
  c->spec[2] = (vk_spec_const){0, (uint32_t)n};
}

/* Runs a kSpecSum kernel built for c on random inputs and checks every
 * output, and that the 100 values past N were not written. */
static void run_spec_sum(vk_context *ctx, const vk_kernel *k, const spec_case *c, const char *label) {
  const int pad = 100, ny = c->n + pad;
  size_t nx = (size_t)c->n * (size_t)c->k;
  float *x = malloc(nx * sizeof *x), *y0 = malloc((size_t)ny * sizeof *y0), *out = malloc((size_t)ny * sizeof *out);
  vk_buffer *bx = NULL, *by = NULL;
  vk_stream *s = NULL;
  if (!x || !y0 || !out) {
    CHECK(0, "out of host memory");
    goto done;
  }
  for (size_t i = 0; i < nx; i++) x[i] = rnd_float();
  for (int i = 0; i < ny; i++) y0[i] = 1000.0f + (float)i; /* sentinels */
  TRY_OR(vk_buffer_alloc(ctx, VK_MEM_DEVICE, nx * sizeof *x, &bx), "alloc x", goto done);
  TRY_OR(vk_buffer_alloc(ctx, VK_MEM_DEVICE, (size_t)ny * sizeof *y0, &by), "alloc y", goto done);
  TRY_OR(vk_stream_create(ctx, &s), "stream", goto done);
  TRY_OR(vk_stream_begin(s), "begin", goto done);
  TRY_OR(vk_stream_upload(s, bx, 0, x, nx * sizeof *x), "upload x", goto done);
  TRY_OR(vk_stream_upload(s, by, 0, y0, (size_t)ny * sizeof *y0), "upload y", goto done);
  /* More groups than N needs: the N guard must hold. */
  TRY_OR(vk_stream_dispatch(s, k, (vk_buffer *[]){bx, by}, NULL, (uint32_t)(ny + 63) / 64, 1, 1), "dispatch",
         goto done);
  TRY_OR(vk_stream_readback(s, out, by, 0, (size_t)ny * sizeof *out), "readback", goto done);
  TRY_OR(vk_stream_end(s), "end", goto done);
  uint64_t v;
  TRY_OR(vk_submit(ctx, &s, 1, &v), "submit", goto done);
  TRY_OR(vk_wait(ctx, v), "wait", goto done);
  int bad = 0;
  for (int i = 0; i < ny; i++) {
    float want = y0[i];
    if (i < c->n) {
      float acc = 0.0f;
      for (int j = 0; j < c->k; j++) acc += x[(size_t)i * (size_t)c->k + (size_t)j];
      want = acc * c->scale;
    }
    if (!close_enough(out[i], want) && bad++ < 5) printf("  %s: y[%d] = %.9g, want %.9g\n", label, i, out[i], want);
  }
  CHECK(bad == 0, "%s (N=%d K=%d SCALE=%g): %d of %d values wrong", label, c->n, c->k, c->scale, bad, ny);
done:
  vk_stream_destroy(ctx, s);
  vk_buffer_free(ctx, bx);
  vk_buffer_free(ctx, by);
  free(x);
  free(y0);
  free(out);
}

/* One source, several spec value sets: in one batch (beside another source),
 * then alone. The source is compiled once; each kernel computes with its own
 * values; the later kernel takes the SPIR-V from the disk cache (the spec
 * values are not in the key). */
static void test_spec_constants(vk_context *ctx) {
  spec_case a, b, c, dflt = {1, 1, 1.0f, {{0, 0}}};
  spec_case_init(&a, 1000 + (int)(rnd() % 500), 3, 0.5f);
  spec_case_init(&b, 700 + (int)(rnd() % 100), 5 + (int)(rnd() % 4), -2.0f);
  spec_case_init(&c, 4096, 2, 3.0f);
  vk_pipeline_stats s0, s1, s2;
  vk_pipeline_stats_get(ctx, &s0);
  vk_kernel_desc descs[4] = {
      {"spec_sum_a", kSpecSum, 2, 0, a.spec, 3},
      {"saxpy_in_spec_batch", kSaxpy, 2, sizeof(saxpy_push), NULL, 0},
      {"spec_sum_b", kSpecSum, 2, 0, b.spec, 3},
      {"spec_sum_defaults", kSpecSum, 2, 0, NULL, 0}, /* the source's defaults: N = K = 1, SCALE = 1 */
  };
  vk_kernel *ks[4] = {0};
  TRY_OR(vk_kernel_create_batch(ctx, descs, 4, ks), "spec batch", goto done);
  vk_pipeline_stats_get(ctx, &s1);
  /* saxpy was compiled (or cached) before; kSpecSum is new to this cache. */
  CHECK(s1.spirv_compiled - s0.spirv_compiled == 1, "spec batch: %llu SPIR-V compiles, want 1 (one new source)",
        (unsigned long long)(s1.spirv_compiled - s0.spirv_compiled));
  CHECK(s1.spirv_cached - s0.spirv_cached == 1, "spec batch: %llu SPIR-V cache reads, want 1 (saxpy)",
        (unsigned long long)(s1.spirv_cached - s0.spirv_cached));
  CHECK(s1.spirv_shared - s0.spirv_shared == 2, "spec batch: %llu kernels shared a module, want 2",
        (unsigned long long)(s1.spirv_shared - s0.spirv_shared));
  CHECK(s1.pipelines - s0.pipelines == 4, "spec batch: %llu pipelines, want 4",
        (unsigned long long)(s1.pipelines - s0.pipelines));
  run_spec_sum(ctx, ks[0], &a, "spec batch a");
  run_spec_sum(ctx, ks[2], &b, "spec batch b");
  run_spec_sum(ctx, ks[3], &dflt, "spec defaults");
  run_saxpy(ctx, ks[1], 5000, 1, "saxpy in a spec batch");

  vk_kernel *kc = NULL;
  vk_kernel_desc dc = {"spec_sum_c", kSpecSum, 2, 0, c.spec, 3};
  TRY_OR(vk_kernel_create(ctx, &dc, &kc), "spec kernel alone", goto done);
  vk_pipeline_stats_get(ctx, &s2);
  CHECK(s2.spirv_compiled == s1.spirv_compiled && s2.spirv_cached == s1.spirv_cached + 1,
        "new spec values recompiled the source: %llu compiles, %llu cache reads (want 0, 1)",
        (unsigned long long)(s2.spirv_compiled - s1.spirv_compiled),
        (unsigned long long)(s2.spirv_cached - s1.spirv_cached));
  run_spec_sum(ctx, kc, &c, "spec alone c");
  vk_kernel_destroy(ctx, kc);
  printf("spec constants: %llu SPIR-V compiled, %llu cached, %llu shared, %llu pipelines (%.3f s SPIR-V, %.3f s "
         "pipelines) so far\n",
         (unsigned long long)s2.spirv_compiled, (unsigned long long)s2.spirv_cached,
         (unsigned long long)s2.spirv_shared, (unsigned long long)s2.pipelines, s2.spirv_s, s2.pipeline_s);
done:
  for (int i = 0; i < 4; i++) vk_kernel_destroy(ctx, ks[i]);
}

/* Bad spec lists are clear errors naming the kernel, in a batch too. */
static void test_bad_spec(vk_context *ctx) {
  vk_spec_const dup[3] = {{0, 10}, {3, 2}, {0, 11}};
  struct {
    vk_kernel_desc d;
    const char *want;
  } cases[] = {
      {{"dup_spec", kSpecSum, 2, 0, dup, 3}, "id 0 is given twice"},
      {{"null_spec", kSpecSum, 2, 0, NULL, 2}, "spec NULL"},
      {{"negative_spec", kSpecSum, 2, 0, dup, -1}, "-1 specialization constants"},
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(cases); i++) {
    vk_kernel *k = (vk_kernel *)&k; /* must be reset to NULL */
    kiln_status_t st = vk_kernel_create(ctx, &cases[i].d, &k);
    const char *msg = kiln_status_message(st);
    CHECK(st && kiln_status_code_of(st) == KILN_INVALID_ARGUMENT && strstr(msg, cases[i].d.name) &&
              strstr(msg, cases[i].want),
          "%s: expected KILN_INVALID_ARGUMENT naming the kernel and saying '%s', got: %s", cases[i].d.name,
          cases[i].want, msg ? msg : "success");
    CHECK(k == NULL, "%s: a kernel was returned", cases[i].d.name);
    if (i == 0 && st) printf("bad spec message: %s\n", msg);
    kiln_status_free(st);
    vk_kernel_destroy(ctx, st ? NULL : k);
  }
  /* In a batch: the good kernels (same source) are made, the bad one is NULL. */
  spec_case a;
  spec_case_init(&a, 300, 2, 1.5f);
  vk_kernel_desc descs[3] = {{"good_spec_1", kSpecSum, 2, 0, a.spec, 3},
                             {"dup_spec_in_batch", kSpecSum, 2, 0, dup, 3},
                             {"good_spec_2", kSpecSum, 2, 0, a.spec, 3}};
  vk_kernel *ks[3];
  kiln_status_t st = vk_kernel_create_batch(ctx, descs, 3, ks);
  CHECK(st && strstr(kiln_status_message(st), "dup_spec_in_batch"), "batch with a bad spec: got %s",
        st ? kiln_status_message(st) : "success");
  kiln_status_free(st);
  CHECK(ks[0] && ks[2] && !ks[1], "batch with a bad spec: kernels %p %p %p", (void *)ks[0], (void *)ks[1],
        (void *)ks[2]);
  if (ks[2]) run_spec_sum(ctx, ks[2], &a, "good kernel beside a bad spec");
  for (int i = 0; i < 3; i++) vk_kernel_destroy(ctx, ks[i]);
}

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = calloc(1, 1 << 16);
  if (buf && fread(buf, 1, (1 << 16) - 1, f) == 0) buf[0] = '\0';
  fclose(f);
  return buf;
}

/* KILN_DUMP_DIR: each kernel's source lands in <dir>/<name>.comp with its
 * spec constants on top; a folder that cannot be made only warns. */
static void test_dump(vk_context *ctx) {
  char dir[] = "/tmp/kiln-vk-dump-XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp for the dump test");
    return;
  }
  char sub[1100], path[1200];
  snprintf(sub, sizeof sub, "%s/glsl", dir); /* not there yet: the dump makes it */
  setenv("KILN_DUMP_DIR", sub, 1);
  spec_case a;
  spec_case_init(&a, 64, 2, 0.25f);
  vk_kernel_desc d = {"dump/me", kSpecSum, 2, 0, a.spec, 3}; /* '/' becomes '_' */
  vk_kernel *k = NULL;
  if (ok(vk_kernel_create(ctx, &d, &k), "create with KILN_DUMP_DIR")) run_spec_sum(ctx, k, &a, "dumped kernel");
  vk_kernel_destroy(ctx, k);
  snprintf(path, sizeof path, "%s/dump_me.comp", sub);
  char *text = read_text(path);
  CHECK(text != NULL, "no dump at %s", path);
  if (text) {
    CHECK(strstr(text, "// spec 0 = 64\n") && strstr(text, "// spec 3 = 2\n") && strstr(text, "// spec 7 = "),
          "dump lacks the spec constants:\n%s", text);
    CHECK(strstr(text, kSpecSum) != NULL, "dump lacks the source:\n%s", text);
    CHECK(strstr(text, "//") == text, "dump does not start with the spec comment");
  }
  free(text);
  unlink(path);
  /* A folder that cannot exist (below a regular file): warned, not fatal. */
  char blocker[1200];
  snprintf(blocker, sizeof blocker, "%s/file", dir);
  FILE *f = fopen(blocker, "w");
  if (f) fclose(f);
  snprintf(sub, sizeof sub, "%s/file/glsl", dir);
  setenv("KILN_DUMP_DIR", sub, 1);
  k = NULL;
  if (ok(vk_kernel_create(ctx, &d, &k), "create with an unwritable KILN_DUMP_DIR"))
    run_spec_sum(ctx, k, &a, "kernel whose dump failed");
  vk_kernel_destroy(ctx, k);
  unsetenv("KILN_DUMP_DIR");
  unlink(blocker);
  snprintf(sub, sizeof sub, "%s/glsl", dir);
  rmdir(sub);
  rmdir(dir);
}

/* ---- threads ---------------------------------------------------------------------------- */

typedef struct thread_arg {
  vk_context *ctx;
  const vk_kernel *k;
  int id, failures;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  enum { N = 5000, ITER = 25 };
  float x[N], y[N], out[N];
  vk_buffer *bx = NULL, *by = NULL;
  vk_stream *s = NULL;
  kiln_status_t st = vk_buffer_alloc(a->ctx, VK_MEM_DEVICE, sizeof x, &bx);
  if (!st) st = vk_buffer_alloc(a->ctx, VK_MEM_DEVICE, sizeof y, &by);
  if (!st) st = vk_stream_create(a->ctx, &s);
  for (int it = 0; it < ITER && !st; it++) {
    for (int i = 0; i < N; i++) x[i] = (float)(i % 97) * 0.25f + (float)a->id, y[i] = (float)it;
    saxpy_push push = {(float)(a->id + 1), (float)it, N};
    vk_buffer *binds[2] = {bx, by};
    uint64_t v = 0;
    st = vk_stream_begin(s);
    if (!st) st = vk_stream_upload(s, bx, 0, x, sizeof x);
    if (!st) st = vk_stream_upload(s, by, 0, y, sizeof y);
    if (!st) st = vk_stream_dispatch(s, a->k, binds, &push, (N + 63) / 64, 1, 1);
    if (!st) st = vk_stream_readback(s, out, by, 0, sizeof out);
    if (!st) st = vk_stream_end(s);
    if (!st) st = vk_submit(a->ctx, &s, 1, &v);
    if (!st) st = vk_wait(a->ctx, v);
    for (int i = 0; i < N && !st; i++) {
      float want = y[i] + push.a * x[i] + push.b;
      if (!close_enough(out[i], want)) {
        printf("FAIL: thread %d iteration %d: y[%d] = %g, want %g\n", a->id, it, i, out[i], want);
        a->failures++;
        break;
      }
    }
  }
  if (st) {
    printf("FAIL: thread %d: %s\n", a->id, kiln_status_message(st));
    kiln_status_free(st);
    a->failures++;
  }
  vk_stream_destroy(a->ctx, s);
  vk_buffer_free(a->ctx, bx);
  vk_buffer_free(a->ctx, by);
  return NULL;
}

static void test_threads(vk_context *ctx, const vk_kernel *k) {
  pthread_t t[2];
  thread_arg args[2] = {{ctx, k, 0, 0}, {ctx, k, 1, 0}};
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_main, &args[i]);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  g_checks++;
  if (args[0].failures || args[1].failures) g_failures++;
}

/* ---- main ------------------------------------------------------------------------------- */

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    struct stat st;
    if (!lstat(p, &st) && S_ISDIR(st.st_mode)) remove_tree(p);
    else unlink(p);
  }
  closedir(d);
  rmdir(dir);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  vk_device_props props[8];
  kiln_status_t why = NULL;
  int n = vk_enumerate(props, 8, &why);
  if (n == 0) {
    printf("SKIP: no Vulkan device: %s\n", why ? kiln_status_message(why) : "(no reason given)");
    kiln_status_free(why);
    return 77;
  }
  for (int i = 0; i < n && i < 8; i++) {
    const vk_device_props *p = &props[i];
    printf("device %d: %s (%s, %s), vendor %s 0x%04x device 0x%04x, Vulkan %u.%u.%u, driver %s\n", i, p->name,
           type_name(p->type), p->vendor, p->vendor, p->vendor_id, p->device_id, p->api_version >> 22,
           (p->api_version >> 12) & 0x3ff, p->api_version & 0xfff, p->driver);
    printf("  %.1f GiB device-local, subgroup %u%s, fp16 %d, int64 %d, int8 dot %d, coop matrix %d\n",
           p->device_local_bytes / 1073741824.0, p->subgroup_size, p->subgroup_arithmetic ? " (arithmetic)" : "",
           p->fp16, p->int64, p->int8_dot, p->coop_matrix);
    printf("  workgroup <= %u invocations (%u, %u, %u), count (%u, %u, %u), %u B shared, %u B push, storage range "
           "%llu, offset align %llu\n",
           p->max_workgroup_invocations, p->max_workgroup_size[0], p->max_workgroup_size[1], p->max_workgroup_size[2],
           p->max_workgroup_count[0], p->max_workgroup_count[1], p->max_workgroup_count[2], p->max_shared_bytes,
           p->max_push_bytes, (unsigned long long)p->max_storage_range,
           (unsigned long long)p->min_storage_offset_align);
  }
  printf("shader compiler: %s\n", vk_shader_compiler() ? vk_shader_compiler() : "(none)");
  CHECK(n == 1 || props[0].type <= 2 || props[n - 1].type >= props[0].type, "devices not in preference order");

  /* A private cache directory: the corruption test must not touch the user's. */
  char cache_dir[] = "/tmp/kiln-vk-test-XXXXXX";
  if (!mkdtemp(cache_dir)) {
    printf("FAIL: mkdtemp\n");
    return 1;
  }
  setenv("KILN_CACHE_DIR", cache_dir, 1);

  vk_context *ctx = NULL;
  if (!ok(vk_context_create(0, &ctx), "vk_context_create")) return 1;
  kiln_status_t bad = vk_context_create(n + 5, &(vk_context *){NULL});
  CHECK(bad && kiln_status_code_of(bad) == KILN_INVALID_ARGUMENT, "bad device index accepted");
  kiln_status_free(bad);

  test_memory(ctx);

  vk_kernel_desc d = {"saxpy", kSaxpy, 2, sizeof(saxpy_push)};
  vk_kernel *saxpy = NULL;
  if (ok(vk_kernel_create(ctx, &d, &saxpy), "create saxpy")) {
    run_saxpy(ctx, saxpy, 100003, 3, "saxpy x3");
    test_threads(ctx, saxpy);
  }
  test_copy_fill(ctx);
  test_big_transfer(ctx);
  test_compile_error(ctx);
  test_features(ctx);
  test_spec_constants(ctx);
  test_bad_spec(ctx);
  test_dump(ctx);
  test_corrupt_cache(ctx, cache_dir);

  kiln_status_t w = vk_wait(ctx, 1u << 30);
  CHECK(w != NULL, "waiting for a value never submitted succeeded");
  kiln_status_free(w);

  vk_queue_stats qs;
  vk_queue_stats_get(ctx, &qs);
  printf("queue: %llu submissions, %llu command buffers, %llu dispatches\n", (unsigned long long)qs.submissions,
         (unsigned long long)qs.command_buffers, (unsigned long long)qs.dispatches);
  CHECK(qs.submissions >= 20 && qs.dispatches >= 50, "queue stats look wrong");

  vk_kernel_destroy(ctx, saxpy);
  vk_memory_stats ms;
  vk_memory_stats_get(ctx, &ms);
  /* The staging rings hold blocks but are not the caller's buffers. */
  CHECK(ms.device_used_bytes == 0 && ms.host_used_bytes == 0 && ms.n_live_buffers == 0,
        "leaked buffers: %d live, %llu device bytes, %llu host bytes", ms.n_live_buffers,
        (unsigned long long)ms.device_used_bytes, (unsigned long long)ms.host_used_bytes);
  CHECK(ms.host_block_bytes >= (64u << 20), "staging rings not counted in host block bytes");
  vk_context_destroy(ctx);

  /* A second context reuses the caches (SPIR-V and the pipeline cache file). */
  if (ok(vk_context_create(0, &ctx), "second vk_context_create")) {
    vk_kernel *k = NULL;
    if (ok(vk_kernel_create(ctx, &d, &k), "create saxpy from cache")) run_saxpy(ctx, k, 777, 2, "saxpy (cached)");
    vk_kernel_destroy(ctx, k);
    vk_context_destroy(ctx);
  }
  const char *val = getenv("KILN_VULKAN_VALIDATION");
  if (val && *val && strcmp(val, "0")) {
    printf("validation errors: %llu\n", (unsigned long long)vk_validation_error_count());
    CHECK(vk_validation_error_count() == 0, "the validation layer reported %llu errors",
          (unsigned long long)vk_validation_error_count());
  }
  remove_tree(cache_dir);
  printf("%s: %d checks, %d failures\n", g_failures ? "FAIL" : "PASS", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
#endif

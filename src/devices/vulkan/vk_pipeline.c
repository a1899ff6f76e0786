/* vk_pipeline.c — GLSL -> SPIR-V with shaderc (dlopen'd), the on-disk SPIR-V
 * cache, the per-context VkPipelineCache, and compute pipelines.
 *
 * Cache layout, beside the C JIT's entries (same directory rules: see
 * codegen/jit.h): <cache>/vulkan/<sha256>.spv and
 * <cache>/vulkan/pipeline-<pipelineCacheUUID hex>.bin, each a checked cache
 * file (base/files.h: payload, footer with magic, size and SHA-256); a bad
 * entry is deleted and rebuilt silently.
 *
 * shaderc compilers are not shared between threads: each compile thread
 * makes its own. */
#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "base/files.h"
#include "base/hash.h"
#include "base/strbuf.h"
#include "base/threadpool.h"
#include "codegen/jit.h"

#define SPV_MAGIC "KILNSPV1"
#define PLC_MAGIC "KILNPLC1"
#define SPIRV_MAGIC_WORD 0x07230203u
/* Bump when the options below change in a way the key does not capture. */
#define SPV_KEY_VERSION "kiln-vulkan-spirv-1"
#define SHADERC_OPTIONS "glsl;compute;vulkan1.2;spirv1.5;O=performance"

/* ---- cache files ---------------------------------------------------------------- */

char *vk_cache_dir(void) {
  char base[4096];
  if (!kiln_jit_cache_dir(base, sizeof base) || !base[0]) return NULL;
  char *dir = kiln_strfmt("%s/vulkan", base);
  if (!dir) return NULL;
  if (mkdir(dir, 0700) && errno != EEXIST) {
    free(dir);
    return NULL;
  }
  return dir;
}

/* ---- shaderc ----------------------------------------------------------------------- */

/* The source lines around `line` (1-based), numbered, into sb. */
static void excerpt(kiln_strbuf *sb, const char *src, int line) {
  int cur = 1;
  const char *p = src;
  while (*p) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    if (cur >= line - 2 && cur <= line + 2)
      kiln_strbuf_printf(sb, "\n  %s%4d | %.*s", cur == line ? ">" : " ", cur, (int)KILN_MIN(len, 200), p);
    if (!eol || cur > line + 2) break;
    p = eol + 1;
    cur++;
  }
}

/* First "<name>:<line>: error" line number in a shaderc message, or 0. */
static int error_line(const char *msg) {
  for (const char *p = strstr(msg, ": error"); p; p = strstr(p + 1, ": error")) {
    const char *d = p;
    while (d > msg && d[-1] >= '0' && d[-1] <= '9') d--;
    if (d < p && d > msg && d[-1] == ':') return atoi(d);
  }
  return 0;
}

static kiln_status_t compile_error(const char *name, const char *src, const char *msg) {
  kiln_strbuf sb = {0};
  size_t len = strlen(msg);
  while (len && (msg[len - 1] == '\n' || msg[len - 1] == ' ')) len--;
  kiln_strbuf_printf(&sb, "vulkan: shader '%s' failed to compile: %.*s", name, (int)KILN_MIN(len, 4000), msg);
  int line = error_line(msg);
  if (line > 0) excerpt(&sb, src, line);
  kiln_status_t st = kiln_strbuf_status(&sb);
  if (st) {
    kiln_strbuf_free(&sb);
    return st;
  }
  st = kiln_error(KILN_UNSUPPORTED, "%s", sb.data);
  kiln_strbuf_free(&sb);
  return st;
}

static void spv_key(const vk_shaderc_fns *sc, const char *glsl, char hex[KILN_SHA256_HEX_SIZE]) {
  unsigned ver = 0, rev = 0;
  if (sc->lib) sc->get_spv_version(&ver, &rev);
  char head[1024];
  int n = snprintf(head, sizeof head, "%s;%s;%s %u.%u %s;%s", SPV_KEY_VERSION, KILN_VERSION_STRING,
                   sc->lib ? "libshaderc" : "glslc", ver, rev, sc->lib ? "" : sc->glslc_version, SHADERC_OPTIONS);
  if (n >= (int)sizeof head) n = (int)sizeof head - 1;
  kiln_sha256_ctx h;
  kiln_sha256_init(&h);
  kiln_sha256_update(&h, head, (size_t)n + 1);
  kiln_sha256_update(&h, glsl, strlen(glsl));
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256_final(&h, digest);
  kiln_hex_encode(digest, sizeof digest, hex);
}

static bool spirv_ok(const uint8_t *data, size_t size) {
  uint32_t magic;
  if (size < 20 || size % 4) return false;
  memcpy(&magic, data, 4);
  return magic == SPIRV_MAGIC_WORD;
}

/* SPIR-V for `glsl` (malloc'd words), whose cache key is `hex` (spv_key).
 * *from_cache tells a cache hit from a compile. *compiler is created on
 * first need. `name` is for errors. */
static kiln_status_t get_spirv(const vk_shaderc_fns *sc, const char *cache_dir, shaderc_compiler_t *compiler,
                               const char *glsl, const char *hex, const char *name, uint32_t **out_words,
                               size_t *out_bytes, bool *from_cache) {
  *out_words = NULL;
  *out_bytes = 0;
  *from_cache = false;
  char *path = cache_dir ? kiln_strfmt("%s/%s.spv", cache_dir, hex) : NULL;
  if (path) {
    size_t size = 0;
    bool corrupt = false;
    uint8_t *data = kiln_cache_file_read(path, SPV_MAGIC, &size, &corrupt);
    if (data && spirv_ok(data, size)) {
      free(path);
      *out_words = (uint32_t *)data; /* malloc'd, so suitably aligned */
      *out_bytes = size;
      *from_cache = true;
      return NULL;
    }
    bool bad = corrupt || data; /* a footer-valid file that is not SPIR-V is bad too */
    free(data);
    if (bad) unlink(path); /* rebuilt below */
  }
  if (!sc->lib) {
    uint32_t *words = NULL;
    size_t size = 0;
    char *msg = NULL;
    bool tool_failed = false;
    kiln_status_t st = NULL;
    if (vk_glslc_compile(sc, name, glsl, &words, &size, &msg, &tool_failed) &&
        spirv_ok((const uint8_t *)words, size)) {
      if (path) kiln_cache_file_write(path, SPV_MAGIC, words, size);
      *out_words = words;
      *out_bytes = size;
    } else if (tool_failed) {
      /* Not this shader's fault: a device error, so that the session does
       * not quietly run every graph on ref instead. */
      free(words);
      st = kiln_error(KILN_DEVICE_ERROR, "vulkan: shader '%s' failed to compile: %s", name, msg ? msg : "glslc failed");
    } else {
      free(words);
      st = compile_error(name, glsl, msg ? msg : "glslc failed");
    }
    free(msg);
    free(path);
    return st;
  }
  if (!*compiler) *compiler = sc->compiler_initialize();
  shaderc_compile_options_t opts = sc->compile_options_initialize();
  if (!*compiler || !opts) {
    if (opts) sc->compile_options_release(opts);
    free(path);
    return kiln_error(KILN_OUT_OF_MEMORY, "vulkan: cannot initialize shaderc");
  }
  sc->compile_options_set_source_language(opts, shaderc_source_language_glsl);
  sc->compile_options_set_optimization_level(opts, shaderc_optimization_level_performance);
  sc->compile_options_set_target_env(opts, shaderc_target_env_vulkan, shaderc_env_version_vulkan_1_2);
  sc->compile_options_set_target_spirv(opts, shaderc_spirv_version_1_5);
  shaderc_compilation_result_t res =
      sc->compile_into_spv(*compiler, glsl, strlen(glsl), shaderc_compute_shader, name, "main", opts);
  sc->compile_options_release(opts);
  kiln_status_t st = NULL;
  if (!res) {
    st = kiln_error(KILN_OUT_OF_MEMORY, "vulkan: shaderc returned no result for shader '%s'", name);
  } else if (sc->result_get_compilation_status(res) != shaderc_compilation_status_success) {
    const char *msg = sc->result_get_error_message(res);
    st = compile_error(name, glsl, msg ? msg : "(no message)");
  } else {
    size_t size = sc->result_get_length(res);
    const uint8_t *bytes = (const uint8_t *)sc->result_get_bytes(res);
    uint32_t *words = malloc(size ? size : 4);
    if (!words) st = KILN_OOM();
    else if (!spirv_ok(bytes, size)) st = kiln_error(KILN_INTERNAL, "vulkan: shaderc produced invalid SPIR-V for '%s'", name);
    if (!st) {
      memcpy(words, bytes, size);
      if (path) kiln_cache_file_write(path, SPV_MAGIC, words, size);
      *out_words = words;
      *out_bytes = size;
    } else {
      free(words);
    }
  }
  if (res) sc->result_release(res);
  free(path);
  return st;
}

/* ---- source dumps ---------------------------------------------------------------- */

/* The (folder, name, source) triples dumped so far in this process, so each
 * is written once however many kernels (spec values) share it. Process
 * lifetime; guarded by g_dump_lock. */
typedef struct dumped {
  char *file;                          /* owned: "<dir>/<safe name>" */
  uint8_t digest[KILN_SHA256_SIZE];    /* of the source */
} dumped;
static pthread_mutex_t g_dump_lock = PTHREAD_MUTEX_INITIALIZER;
static dumped *g_dumped;               /* owned, never freed (process lifetime) */
static int g_n_dumped, g_cap_dumped;
static atomic_bool g_warned_dump;

static void dump_warn(const char *what, int err) {
  if (!atomic_exchange(&g_warned_dump, true))
    fprintf(stderr, "kiln: warning: cannot write GLSL source dump %s: %s\n", what, strerror(err));
}

/* Writes d's source to <dir>/<name>.comp headed by its spec constants, unless
 * this name and source were dumped before. A second source under a name
 * already dumped goes to <name>-<source hash>.comp, so none is overwritten.
 * Best effort: failures warn once. Called from one thread (the batch's). */
static void dump_source(const char *dir, const vk_kernel_desc *d) {
  char safe[101];
  int n = 0;
  for (const char *p = d->name ? d->name : ""; *p && n < 100; p++) {
    char c = *p;
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                c == '.';
    safe[n++] = keep ? c : '_';
  }
  if (!n) n = snprintf(safe, sizeof safe, "kernel");
  safe[n] = '\0';
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256(d->glsl, strlen(d->glsl), digest);
  char *file = kiln_strfmt("%s/%s", dir, safe);
  if (!file) {
    dump_warn(dir, ENOMEM);
    return;
  }
  pthread_mutex_lock(&g_dump_lock);
  bool seen = false, name_taken = false;
  for (int i = 0; i < g_n_dumped && !seen; i++) {
    if (strcmp(g_dumped[i].file, file)) continue;
    name_taken = true;
    seen = !memcmp(g_dumped[i].digest, digest, sizeof digest);
  }
  if (!seen && g_n_dumped == g_cap_dumped) {
    int cap = g_cap_dumped ? 2 * g_cap_dumped : 64;
    dumped *grown = realloc(g_dumped, (size_t)cap * sizeof *grown);
    if (grown) g_dumped = grown, g_cap_dumped = cap;
  }
  bool remembered = false;
  if (!seen && g_n_dumped < g_cap_dumped) {
    g_dumped[g_n_dumped].file = file;
    memcpy(g_dumped[g_n_dumped].digest, digest, sizeof digest);
    g_n_dumped++;
    remembered = true; /* the list owns file now */
  }
  pthread_mutex_unlock(&g_dump_lock);
  if (seen) {
    free(file);
    return;
  }
  char hex[KILN_SHA256_HEX_SIZE];
  kiln_hex_encode(digest, sizeof digest, hex);
  char *path = name_taken ? kiln_strfmt("%s-%.12s.comp", file, hex) : kiln_strfmt("%s.comp", file);
  if (!remembered) free(file);
  if (!path) {
    dump_warn(dir, ENOMEM);
    return;
  }
  int err = kiln_make_dirs(dir);
  FILE *f = err ? NULL : fopen(path, "we");
  if (!f && !err) err = errno;
  if (f) {
    bool ok = fprintf(f, "// kiln Vulkan kernel %s: %d specialization constant%s\n", safe, d->n_spec,
                      d->n_spec == 1 ? "" : "s") >= 0;
    for (int i = 0; ok && i < d->n_spec; i++)
      ok = fprintf(f, "// spec %u = %d\n", d->spec[i].id, (int32_t)d->spec[i].value) >= 0;
    ok = ok && fputs(d->glsl, f) >= 0;
    if (!ok) err = errno ? errno : EIO;
    if (fclose(f) && !err) err = errno ? errno : EIO;
  }
  if (err) dump_warn(path, err);
  free(path);
}

/* ---- kernels --------------------------------------------------------------------- */

void vk_kernel_destroy(vk_context *ctx, vk_kernel *k) {
  if (!k) return;
  if (k->pipeline) ctx->fn.vkDestroyPipeline(ctx->device, k->pipeline, NULL);
  if (k->layout) ctx->fn.vkDestroyPipelineLayout(ctx->device, k->layout, NULL);
  if (k->set_layout) ctx->fn.vkDestroyDescriptorSetLayout(ctx->device, k->set_layout, NULL);
  free(k->name);
  free(k);
}

/* More would only be a mistake (and their byte size must fit a uint32_t). */
#define MAX_SPEC_CONSTANTS 65536

static kiln_status_t check_desc(const vk_context *ctx, const vk_kernel_desc *d, const char *name) {
  if (!d->glsl) return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: shader '%s' has no source", name);
  uint32_t max_buf = ctx->info.limits.maxPerStageDescriptorStorageBuffers;
  if (d->n_buffers < 0 || (uint32_t)d->n_buffers > max_buf)
    return kiln_error(KILN_UNSUPPORTED, "vulkan: shader '%s' binds %d storage buffers (device limit %u)", name,
                      d->n_buffers, max_buf);
  if (d->push_bytes % 4 || d->push_bytes > ctx->info.props.max_push_bytes)
    return kiln_error(KILN_UNSUPPORTED,
                      "vulkan: shader '%s' has %u bytes of push constants (must be a multiple of 4, at most %u)", name,
                      d->push_bytes, ctx->info.props.max_push_bytes);
  if (d->n_spec < 0 || d->n_spec > MAX_SPEC_CONSTANTS)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: shader '%s' has %d specialization constants (0..%d allowed)",
                      name, d->n_spec, MAX_SPEC_CONSTANTS);
  if (d->n_spec > 0 && !d->spec)
    return kiln_error(KILN_INVALID_ARGUMENT, "vulkan: shader '%s' has n_spec %d but no specialization constants (spec NULL)",
                      name, d->n_spec);
  /* Vulkan requires distinct constantIDs in one VkSpecializationInfo. Lists
   * are short (tens), so the quadratic check is cheap. */
  for (int i = 1; i < d->n_spec; i++)
    for (int j = 0; j < i; j++)
      if (d->spec[i].id == d->spec[j].id)
        return kiln_error(KILN_INVALID_ARGUMENT,
                          "vulkan: shader '%s': specialization constant id %u is given twice (entries %d and %d, "
                          "values %d and %d)",
                          name, d->spec[i].id, j, i, (int32_t)d->spec[j].value, (int32_t)d->spec[i].value);
  return NULL;
}

static kiln_status_t make_pipeline(vk_context *ctx, const vk_kernel_desc *d, const char *name, const uint32_t *words,
                                   size_t bytes, vk_kernel **out) {
  vk_fns *fn = &ctx->fn;
  vk_kernel *k = calloc(1, sizeof *k);
  if (!k || !(k->name = kiln_strdup(name))) {
    free(k);
    return KILN_OOM();
  }
  k->n_buffers = d->n_buffers;
  k->push_bytes = d->push_bytes;
  kiln_status_t st = NULL;
  VkDescriptorSetLayoutBinding *binds = calloc((size_t)(d->n_buffers ? d->n_buffers : 1), sizeof *binds);
  if (!binds) st = KILN_OOM();
  for (int i = 0; !st && i < d->n_buffers; i++)
    binds[i] = (VkDescriptorSetLayoutBinding){.binding = (uint32_t)i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
  VkDescriptorSetLayoutCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                         .bindingCount = (uint32_t)d->n_buffers,
                                         .pBindings = binds};
  if (!st) st = vk_check(fn->vkCreateDescriptorSetLayout(ctx->device, &dci, NULL, &k->set_layout),
                         "vkCreateDescriptorSetLayout");
  free(binds);
  VkPushConstantRange push = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = d->push_bytes};
  VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                    .setLayoutCount = 1,
                                    .pSetLayouts = &k->set_layout,
                                    .pushConstantRangeCount = d->push_bytes ? 1 : 0,
                                    .pPushConstantRanges = &push};
  if (!st) st = vk_check(fn->vkCreatePipelineLayout(ctx->device, &lci, NULL, &k->layout), "vkCreatePipelineLayout");
  /* Specialization: entry i maps constant_id spec[i].id to bytes [4i, 4i+4)
   * of the packed values. Both arrays live only until the pipeline exists. */
  VkSpecializationMapEntry *entries = NULL;
  uint32_t *values = NULL;
  VkSpecializationInfo spec = {0};
  if (!st && d->n_spec > 0) {
    entries = malloc((size_t)d->n_spec * sizeof *entries);
    values = malloc((size_t)d->n_spec * sizeof *values);
    if (!entries || !values) st = KILN_OOM();
    for (int i = 0; !st && i < d->n_spec; i++) {
      entries[i] = (VkSpecializationMapEntry){.constantID = d->spec[i].id,
                                              .offset = (uint32_t)i * 4u,
                                              .size = 4};
      values[i] = d->spec[i].value;
    }
    spec = (VkSpecializationInfo){.mapEntryCount = (uint32_t)d->n_spec,
                                  .pMapEntries = entries,
                                  .dataSize = (size_t)d->n_spec * 4u,
                                  .pData = values};
  }
  VkShaderModule module = VK_NULL_HANDLE;
  VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = bytes, .pCode = words};
  if (!st) st = vk_check(fn->vkCreateShaderModule(ctx->device, &mci, NULL, &module), "vkCreateShaderModule");
  VkComputePipelineCreateInfo pci = {
      .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                .module = module,
                .pName = "main",
                .pSpecializationInfo = d->n_spec > 0 ? &spec : NULL},
      .layout = k->layout};
  if (!st)
    st = vk_check(fn->vkCreateComputePipelines(ctx->device, ctx->pipeline_cache, 1, &pci, NULL, &k->pipeline),
                  "vkCreateComputePipelines");
  if (module) fn->vkDestroyShaderModule(ctx->device, module, NULL);
  free(entries);
  free(values);
  if (st) {
    vk_kernel_destroy(ctx, k);
    return kiln_status_annotate(st, "vulkan: shader '%s'", name);
  }
  atomic_fetch_add(&ctx->pipelines, 1);
  *out = k;
  return NULL;
}

/* One distinct source of a batch: compiled (or read from the cache) once,
 * then shared by every kernel of the batch with that source. */
typedef struct module {
  int first;                     /* the first desc with this source: names it in errors */
  uint32_t *words;               /* owned SPIR-V */
  size_t bytes;
  bool from_cache;
  kiln_status_t status;          /* owned until collected */
} module;

/* A desc's SPIR-V cache key and index, for grouping equal sources. */
typedef struct keyed {
  char key[KILN_SHA256_HEX_SIZE];
  int desc;
} keyed;

static int keyed_cmp(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  int c = strcmp(a->key, b->key);
  return c ? c : (a->desc > b->desc) - (a->desc < b->desc);
}

typedef struct batch {
  vk_context *ctx;
  const vk_kernel_desc *descs;
  vk_kernel **out;
  kiln_status_t *status;         /* per desc, owned until collected */
  int *module_of;                /* per desc: its module, -1 when the desc was rejected */
  module *modules;               /* n_modules, owned */
  keyed *keys;                   /* per module: its cache key (sorted slots reused) */
  int n_modules;
  shaderc_compiler_t *compilers; /* per pool thread, created lazily */
  const char *cache_dir;
} batch;

static const char *desc_name(const vk_kernel_desc *d) { return d->name && d->name[0] ? d->name : "kernel"; }

static void spirv_range(void *vb, int64_t begin, int64_t end, int thread) {
  batch *b = vb;
  for (int64_t m = begin; m < end; m++) {
    module *mod = &b->modules[m];
    const vk_kernel_desc *d = &b->descs[mod->first];
    mod->status = get_spirv(b->ctx->sc, b->cache_dir, &b->compilers[thread], d->glsl, b->keys[m].key, desc_name(d),
                            &mod->words, &mod->bytes, &mod->from_cache);
  }
}

static void pipeline_range(void *vb, int64_t begin, int64_t end, int thread) {
  (void)thread;
  batch *b = vb;
  for (int64_t i = begin; i < end; i++) {
    int m = b->module_of[i];
    if (m < 0 || b->modules[m].status) continue; /* rejected, or its source failed (reported once) */
    const module *mod = &b->modules[m];
    b->status[i] = make_pipeline(b->ctx, &b->descs[i], desc_name(&b->descs[i]), mod->words, mod->bytes, &b->out[i]);
  }
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Three steps: check each desc (and dump its source); group the descs by
 * SPIR-V cache key (the source hash: spec values are not in it) and get
 * each distinct module once, in parallel; then create every pipeline, in
 * parallel, with its own spec values. */
kiln_status_t vk_kernel_create_batch(vk_context *ctx, const vk_kernel_desc *descs, int n, vk_kernel **out) {
  if (n <= 0) return NULL;
  for (int i = 0; i < n; i++) out[i] = NULL;
  int threads = KILN_MIN(n, KILN_MAX(1, kiln_physical_cores()));
  batch b = {.ctx = ctx, .descs = descs, .out = out};
  b.status = calloc((size_t)n, sizeof *b.status);
  b.module_of = calloc((size_t)n, sizeof *b.module_of);
  b.modules = calloc((size_t)n, sizeof *b.modules);
  b.keys = calloc((size_t)n, sizeof *b.keys);
  b.compilers = calloc((size_t)threads, sizeof *b.compilers);
  char *cache_dir = vk_cache_dir();
  b.cache_dir = cache_dir;
  kiln_threadpool *pool = NULL;
  kiln_status_t st = NULL;
  if (!b.status || !b.module_of || !b.modules || !b.keys || !b.compilers) st = KILN_OOM();

  /* 1. Check, dump, key. */
  int n_keyed = 0;
  const char *dump_dir = kiln_dump_dir("glsl");
  for (int i = 0; !st && i < n; i++) {
    const vk_kernel_desc *d = &descs[i];
    b.module_of[i] = -1;
    b.status[i] = check_desc(ctx, d, desc_name(d));
    if (b.status[i]) continue;
    if (dump_dir) dump_source(dump_dir, d);
    spv_key(ctx->sc, d->glsl, b.keys[n_keyed].key);
    b.keys[n_keyed++].desc = i;
  }
  /* 2. One module per distinct key, named by its first desc (so the first
   * error in desc order is still the one returned). keys[] is rewritten in
   * place to one slot per module. */
  if (!st) qsort(b.keys, (size_t)n_keyed, sizeof *b.keys, keyed_cmp);
  for (int j = 0; !st && j < n_keyed; j++) {
    if (!b.n_modules || strcmp(b.keys[j].key, b.keys[b.n_modules - 1].key)) {
      b.keys[b.n_modules] = b.keys[j];
      b.modules[b.n_modules++].first = b.keys[j].desc;
    }
    b.module_of[b.keys[j].desc] = b.n_modules - 1;
  }
  if (!st && threads > 1) {
    st = kiln_threadpool_create(threads, &pool);
    if (st) { /* no threads: compile serially */
      kiln_status_free(st);
      st = NULL;
      pool = NULL;
    }
  }
  if (!st) {
    uint64_t t0 = now_ns();
    kiln_parallel_for(pool, b.n_modules, 1, spirv_range, &b);
    uint64_t t1 = now_ns();
    /* 3. Pipelines. */
    kiln_parallel_for(pool, n, 1, pipeline_range, &b);
    atomic_fetch_add(&ctx->spirv_ns, t1 - t0);
    atomic_fetch_add(&ctx->pipeline_ns, now_ns() - t1);
    for (int m = 0; m < b.n_modules; m++) {
      if (b.modules[m].status) continue;
      atomic_fetch_add(b.modules[m].from_cache ? &ctx->spirv_cached : &ctx->spirv_compiled, 1);
    }
    uint64_t shared = 0;
    for (int i = 0; i < n; i++) {
      int m = b.module_of[i];
      shared += m >= 0 && !b.modules[m].status && b.modules[m].first != i;
    }
    atomic_fetch_add(&ctx->spirv_shared, shared);
  }
  kiln_threadpool_destroy(pool);
  for (int t = 0; b.compilers && t < threads; t++)
    if (b.compilers[t] && ctx->sc->lib) ctx->sc->compiler_release(b.compilers[t]);
  /* A module's error belongs to its first desc; the others sharing it stay NULL. */
  for (int i = 0; b.status && i < n; i++) {
    kiln_status_t e = b.status[i];
    int m = b.module_of ? b.module_of[i] : -1;
    if (!e && m >= 0 && b.modules[m].first == i) e = b.modules[m].status, b.modules[m].status = NULL;
    if (!e) continue;
    if (!st) st = e;
    else kiln_status_free(e);
  }
  for (int m = 0; b.modules && m < b.n_modules; m++) {
    free(b.modules[m].words);
    kiln_status_free(b.modules[m].status); /* NULL: collected above */
  }
  free(b.status);
  free(b.module_of);
  free(b.modules);
  free(b.keys);
  free(b.compilers);
  free(cache_dir);
  return st;
}

kiln_status_t vk_kernel_create(vk_context *ctx, const vk_kernel_desc *desc, vk_kernel **out) {
  *out = NULL;
  return vk_kernel_create_batch(ctx, desc, 1, out);
}

void vk_pipeline_stats_get(vk_context *ctx, vk_pipeline_stats *out) {
  *out = (vk_pipeline_stats){.spirv_compiled = atomic_load(&ctx->spirv_compiled),
                             .spirv_cached = atomic_load(&ctx->spirv_cached),
                             .spirv_shared = atomic_load(&ctx->spirv_shared),
                             .pipelines = atomic_load(&ctx->pipelines),
                             .spirv_s = (double)atomic_load(&ctx->spirv_ns) * 1e-9,
                             .pipeline_s = (double)atomic_load(&ctx->pipeline_ns) * 1e-9};
}

/* ---- pipeline cache ------------------------------------------------------------------- */

static char *pipeline_cache_path(const vk_context *ctx) {
  if (!ctx->cache_dir) return NULL;
  char hex[2 * VK_UUID_SIZE + 1];
  kiln_hex_encode(ctx->info.pipeline_cache_uuid, VK_UUID_SIZE, hex);
  return kiln_strfmt("%s/pipeline-%s.bin", ctx->cache_dir, hex);
}

kiln_status_t vk_pipeline_cache_init(vk_context *ctx) {
  ctx->cache_dir = vk_cache_dir();
  char *path = pipeline_cache_path(ctx);
  size_t size = 0;
  bool corrupt = false;
  uint8_t *data = path ? kiln_cache_file_read(path, PLC_MAGIC, &size, &corrupt) : NULL;
  /* The driver checks the header too, but a stale file from another driver
   * version must never reach it. Header: length, version, vendor, device, uuid. */
  if (data) {
    uint32_t hdr[4];
    bool ok = size >= 16 + VK_UUID_SIZE;
    if (ok) memcpy(hdr, data, sizeof hdr);
    ok = ok && hdr[0] >= 16 + VK_UUID_SIZE && hdr[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE &&
         hdr[2] == ctx->info.props.vendor_id && hdr[3] == ctx->info.props.device_id &&
         !memcmp(data + 16, ctx->info.pipeline_cache_uuid, VK_UUID_SIZE);
    if (!ok) {
      free(data);
      data = NULL;
      size = 0;
    }
  }
  if (corrupt && path) unlink(path);
  free(path);
  VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                                  .initialDataSize = data ? size : 0,
                                  .pInitialData = data};
  VkResult r = ctx->fn.vkCreatePipelineCache(ctx->device, &ci, NULL, &ctx->pipeline_cache);
  if (r != VK_SUCCESS && data) { /* the driver rejected the data: start empty */
    ci.initialDataSize = 0;
    ci.pInitialData = NULL;
    r = ctx->fn.vkCreatePipelineCache(ctx->device, &ci, NULL, &ctx->pipeline_cache);
  }
  free(data);
  return vk_check(r, "vkCreatePipelineCache");
}

void vk_pipeline_cache_save_destroy(vk_context *ctx) {
  if (!ctx->pipeline_cache) return;
  char *path = pipeline_cache_path(ctx);
  size_t size = 0;
  if (path && ctx->fn.vkGetPipelineCacheData(ctx->device, ctx->pipeline_cache, &size, NULL) == VK_SUCCESS && size &&
      size <= KILN_CACHE_FILE_MAX) {
    void *data = malloc(size);
    if (data && ctx->fn.vkGetPipelineCacheData(ctx->device, ctx->pipeline_cache, &size, data) == VK_SUCCESS)
      kiln_cache_file_write(path, PLC_MAGIC, data, size);
    free(data);
  }
  free(path);
  ctx->fn.vkDestroyPipelineCache(ctx->device, ctx->pipeline_cache, NULL);
  ctx->pipeline_cache = VK_NULL_HANDLE;
}

#else
typedef int kiln_vk_pipeline_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_VULKAN */

/* The JIT and its cache: compile and call; a second compile is a cache hit;
 * parallel compiles; compile errors and a missing compiler are clear errors;
 * corrupt cache entries are rebuilt silently; two processes sharing an empty
 * cache both succeed; unusable cache directories fall back; source dumps.
 * Also SHA-256 against the FIPS 180 examples and hashlib. Each test uses its
 * own temporary KILN_CACHE_DIR. Skips (exit 0) without a C compiler.
 * And the generated code's target: under KILN_CPU_DISABLE (read once per
 * process, so the test re-runs itself with --isa-child) a compiled source
 * sees __AVX2__, __AVX512F__, __FMA__ ... exactly when kiln's feature flags
 * say the feature is on, and the cache key changes only when a feature the
 * CPU has was turned off. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/cpu_features.h"
#include "base/hash.h"
#include "codegen/jit.h"

static int failures;
#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
      failures++;                                 \
    }                                             \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- SHA-256 --------------------------------------------------------------- */

static void check_sha(const void *data, size_t len, const char *expect, const char *what) {
  char hex[KILN_SHA256_HEX_SIZE];
  kiln_sha256_hex(data, len, hex);
  CHECK(!strcmp(hex, expect), "sha256(%s) = %s, expected %s", what, hex, expect);
  /* Incremental, in uneven pieces, must agree. */
  kiln_sha256_ctx h;
  kiln_sha256_init(&h);
  const uint8_t *p = data;
  for (size_t off = 0, step = 1; off < len; step = step * 3 % 97 + 1) {
    size_t take = len - off < step ? len - off : step;
    kiln_sha256_update(&h, p + off, take);
    off += take;
  }
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256_final(&h, digest);
  kiln_hex_encode(digest, sizeof digest, hex);
  CHECK(!strcmp(hex, expect), "incremental sha256(%s) = %s, expected %s", what, hex, expect);
}

static void test_sha256(void) {
  /* FIPS 180-2 appendix B examples. */
  check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "empty");
  check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "abc");
  const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_sha(two_blocks, strlen(two_blocks), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
            "448-bit message");
  const char *long_msg = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmn"
                         "opqrsmnopqrstnopqrstu";
  check_sha(long_msg, strlen(long_msg), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
            "896-bit message");
  char *million = malloc(1000000);
  memset(million, 'a', 1000000);
  check_sha(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "a x 1e6");
  /* Padding boundaries (expected values from Python's hashlib). */
  static const struct {
    size_t n;
    const char *hex;
  } as[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"},
  };
  for (size_t i = 0; i < sizeof as / sizeof *as; i++) {
    char what[32];
    snprintf(what, sizeof what, "a x %zu", as[i].n);
    check_sha(million, as[i].n, as[i].hex, what);
  }
  free(million);
  uint8_t bytes[1024];
  for (int i = 0; i < 1024; i++) bytes[i] = (uint8_t)i;
  check_sha(bytes, sizeof bytes, "785b0751fc2c53dc14a4ce3d800e69ef9ce1009eb327ccf458afe09c242c26c9", "0..255 x 4");

  /* The non-cryptographic hash: deterministic, seed- and length-sensitive. */
  CHECK(kiln_hash64("abc", 3, 1) == kiln_hash64("abc", 3, 1), "hash64 deterministic");
  CHECK(kiln_hash64("abc", 3, 1) != kiln_hash64("abc", 3, 2), "hash64 ignores the seed");
  CHECK(kiln_hash64("abc", 3, 0) != kiln_hash64("abc\0", 4, 0), "hash64 ignores the length");
}

/* ---- helpers for the JIT tests ------------------------------------------- */

static char g_root[256]; /* per-run scratch directory */

/* A fresh, empty cache directory for one test, exported as KILN_CACHE_DIR. */
static const char *fresh_cache(const char *name) {
  static char dir[512];
  snprintf(dir, sizeof dir, "%s/%s", g_root, name);
  mkdir(dir, 0700);
  setenv("KILN_CACHE_DIR", dir, 1);
  return dir;
}

static int count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  size_t ls = strlen(suffix);
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l >= ls && !strcmp(e->d_name + l - ls, suffix)) n++;
  }
  closedir(d);
  return n;
}

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(path);
    else unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

/* Source of a module exporting `name` = x * mul + add, using libm. */
static char *make_source(const char *name, int mul, int add) {
  char *s = malloc(1024);
  snprintf(s, 1024,
           "#include <math.h>\n"
           "static int helper(int x) { return x * %d; }\n"
           "KILN_EXPORT int %s(int x) { return helper(x) + %d; }\n"
           "KILN_EXPORT float %s_exp(float x) { return expf(x); }\n",
           mul, name, add, name);
  return s;
}

typedef int (*int_fn)(int);
typedef float (*float_fn)(float);

static int call_int(kiln_jit_module *m, const char *name, int x) {
  int_fn fn = (int_fn)kiln_jit_symbol(m, name);
  return fn ? fn(x) : -999999;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_compile_and_cache_hit(void) {
  const char *dir = fresh_cache("basic");
  char *src = make_source("triple_plus", 3, 7);
  kiln_jit_stats stats = {0};
  kiln_jit_module *m = NULL;
  double t0 = now_s();
  kiln_status_t st = kiln_jit_compile(src, "triple_plus", &stats, &m);
  double cold = now_s() - t0;
  CHECK(!st, "compile: %s", kiln_status_message(st));
  kiln_status_free(st);
  if (!m) {
    free(src);
    return;
  }
  CHECK(call_int(m, "triple_plus", 5) == 22, "triple_plus(5) = %d", call_int(m, "triple_plus", 5));
  float_fn e = (float_fn)kiln_jit_symbol(m, "triple_plus_exp");
  CHECK(e && e(0.0f) == 1.0f, "expf through libm");
  CHECK(!kiln_jit_symbol(m, "helper"), "a static helper must not be visible");
  void *addr = NULL;
  st = kiln_jit_require_symbol(m, "nope", &addr);
  CHECK(st && strstr(kiln_status_message(st), "nope") && strstr(kiln_status_message(st), "KILN_EXPORT"),
        "missing symbol error: %s", kiln_status_message(st));
  kiln_status_free(st);
  CHECK(stats.requested == 1 && stats.compiled == 1 && stats.disk_hits == 0, "first compile stats");
  CHECK(strstr(kiln_jit_module_path(m), dir) == kiln_jit_module_path(m), "entry %s not in %s", kiln_jit_module_path(m),
        dir);
  CHECK(strlen(kiln_jit_module_key(m)) == 64, "key is a hex SHA-256");
  CHECK(count_files(dir, ".so") == 1, "one entry in the cache, found %d", count_files(dir, ".so"));
  struct stat sb;
  stat(dir, &sb);

  /* Same source while loaded: the same module, from memory. */
  kiln_jit_module *m2 = NULL;
  st = kiln_jit_compile(src, "again", &stats, &m2);
  CHECK(!st && m2 == m && stats.memory_hits == 1, "memory hit");
  kiln_status_free(st);
  kiln_jit_module_release(m2);
  kiln_jit_module_release(m);

  /* Released: a disk hit, with no compile and fast. */
  kiln_jit_stats warm = {0};
  t0 = now_s();
  st = kiln_jit_compile(src, "triple_plus", &warm, &m);
  double hot = now_s() - t0;
  CHECK(!st, "cached compile: %s", kiln_status_message(st));
  kiln_status_free(st);
  CHECK(warm.disk_hits == 1 && warm.compiled == 0, "second compile must be a cache hit (disk %lld, compiled %lld)",
        (long long)warm.disk_hits, (long long)warm.compiled);
  CHECK(hot < 0.25, "cache hit took %.3f s", hot);
  CHECK(m && call_int(m, "triple_plus", 1) == 10, "cached module works");
  printf("jit: cold compile %.1f ms, cache hit %.2f ms\n", cold * 1e3, hot * 1e3);
  char line[512];
  kiln_jit_stats_format(&stats, line, sizeof line);
  printf("%s\n", line);
  kiln_jit_module_release(m);
  free(src);
}

static void test_parallel(void) {
  const char *dir = fresh_cache("parallel");
  char *srcs[6];
  const char *names[6] = {"par0", "par1", "par2", "par3", "par_dup", NULL};
  for (int i = 0; i < 4; i++) {
    char fn[16];
    snprintf(fn, sizeof fn, "par%d", i);
    srcs[i] = make_source(fn, i + 2, i);
  }
  srcs[4] = strdup(srcs[1]); /* a duplicate: compiled once */
  srcs[5] = make_source("par5", 9, 1);
  kiln_jit_module *mods[6] = {0};
  kiln_jit_stats stats = {0};
  kiln_status_t st = kiln_jit_compile_many(6, (const char *const *)srcs, names, 4, &stats, mods);
  CHECK(!st, "compile_many: %s", kiln_status_message(st));
  kiln_status_free(st);
  CHECK(stats.compiled == 5 && stats.memory_hits == 1, "5 compiles + 1 duplicate, got %lld + %lld",
        (long long)stats.compiled, (long long)stats.memory_hits);
  for (int i = 0; i < 4 && mods[i]; i++) {
    char fn[16];
    snprintf(fn, sizeof fn, "par%d", i);
    CHECK(call_int(mods[i], fn, 10) == 10 * (i + 2) + i, "%s(10)", fn);
  }
  CHECK(mods[4] == mods[1], "duplicate sources share a module");
  CHECK(mods[5] && call_int(mods[5], "par5", 1) == 10, "par5");
  CHECK(count_files(dir, ".so") == 5, "5 entries, found %d", count_files(dir, ".so"));
  CHECK(count_files(dir, ".c") == 0, "no temporaries left, found %d .c", count_files(dir, ".c"));
  printf("jit: 5 parallel compiles: compiler %.2f s summed, wall %.2f s\n", stats.compile_seconds, stats.wall_seconds);
  for (int i = 0; i < 6; i++) {
    kiln_jit_module_release(mods[i]);
    free(srcs[i]);
  }
}

static void test_compile_error(void) {
  const char *dir = fresh_cache("error");
  const char *good = "KILN_EXPORT int fine(void) { return 1; }\n";
  const char *bad = "KILN_EXPORT int broken(void) { return 1 +; }\n";
  const char *srcs[2] = {good, bad};
  const char *names[2] = {"fine", "broken_kernel"};
  kiln_jit_module *mods[2] = {(kiln_jit_module *)1, (kiln_jit_module *)1};
  kiln_jit_stats stats = {0};
  kiln_status_t st = kiln_jit_compile_many(2, srcs, names, 2, &stats, mods);
  const char *msg = kiln_status_message(st);
  CHECK(st, "a syntax error must fail");
  CHECK(strstr(msg, "broken_kernel"), "error names the source: %s", msg);
  CHECK(strstr(msg, "error"), "error carries the compiler's message: %s", msg);
  CHECK(strstr(msg, ".failed.c"), "error gives the kept source: %s", msg);
  CHECK(!strstr(msg, ".tmp."), "error mentions the temporary file, not the kept one: %s", msg);
  CHECK(!mods[0] && !mods[1], "nothing returned on error");
  CHECK(stats.failed == 1, "one failure counted");
  CHECK(count_files(dir, ".failed.c") == 1, "failing source kept");
  printf("jit: compile error message:\n%s\n", msg);
  kiln_status_free(st);
}

static void test_missing_compiler(void) {
  fresh_cache("nocc");
  setenv("KILN_CC", "/nonexistent/cc", 1);
  kiln_jit_module *m = NULL;
  kiln_status_t st = kiln_jit_compile("int x;\n", "x", NULL, &m);
  CHECK(st && strstr(kiln_status_message(st), "/nonexistent/cc") && strstr(kiln_status_message(st), "not found"),
        "missing compiler: %s", kiln_status_message(st));
  kiln_status_free(st);
  st = kiln_jit_available();
  CHECK(st != NULL, "kiln_jit_available with a missing compiler");
  kiln_status_free(st);
  setenv("KILN_CC", "no-such-compiler-kiln", 1);
  st = kiln_jit_available();
  CHECK(st && strstr(kiln_status_message(st), "PATH"), "compiler not on PATH: %s", kiln_status_message(st));
  kiln_status_free(st);
  unsetenv("KILN_CC");
  st = kiln_jit_available();
  CHECK(!st, "compiler back: %s", kiln_status_message(st));
  kiln_status_free(st);
}

/* Overwrites the entry for `src` with `how`, then checks the next compile
 * rebuilds it silently. */
enum corruption { TRUNCATE, GARBAGE, FLIP_BYTE, EMPTY };

static void test_corrupt_entry(enum corruption how) {
  static const char *const what[] = {"truncated", "garbage", "flipped byte", "empty"};
  char cache_name[32];
  snprintf(cache_name, sizeof cache_name, "corrupt%d", (int)how);
  fresh_cache(cache_name);
  char *src = make_source("victim", 5, 1);
  kiln_jit_module *m = NULL;
  kiln_status_t st = kiln_jit_compile(src, "victim", NULL, &m);
  CHECK(!st, "compile: %s", kiln_status_message(st));
  kiln_status_free(st);
  if (!m) {
    free(src);
    return;
  }
  char path[1024];
  snprintf(path, sizeof path, "%s", kiln_jit_module_path(m));
  kiln_jit_module_release(m);

  struct stat sb;
  stat(path, &sb);
  int fd = open(path, O_RDWR);
  if (how == TRUNCATE) {
    CHECK(ftruncate(fd, sb.st_size / 2) == 0, "truncate");
  } else if (how == GARBAGE) {
    uint8_t junk[4096];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 131 + 7);
    CHECK(ftruncate(fd, 0) == 0 && write(fd, junk, sizeof junk) == (ssize_t)sizeof junk, "garbage");
  } else if (how == FLIP_BYTE) {
    uint8_t b;
    off_t off = sb.st_size / 3;
    CHECK(pread(fd, &b, 1, off) == 1, "read");
    b ^= 0x40;
    CHECK(pwrite(fd, &b, 1, off) == 1, "write");
  } else {
    CHECK(ftruncate(fd, 0) == 0, "empty");
  }
  close(fd);

  kiln_jit_stats stats = {0};
  st = kiln_jit_compile(src, "victim", &stats, &m);
  CHECK(!st, "%s entry: %s", what[how], kiln_status_message(st));
  kiln_status_free(st);
  CHECK(stats.corrupt_rebuilt == 1 && stats.compiled == 1, "%s entry must be rebuilt (rebuilt %lld)", what[how],
        (long long)stats.corrupt_rebuilt);
  CHECK(m && call_int(m, "victim", 2) == 11, "%s: rebuilt module works", what[how]);
  kiln_jit_module_release(m);
  free(src);
}

/* Two processes, one empty cache, same source, started together. */
static void test_two_processes(void) {
  const char *dir = fresh_cache("shared");
  char *src = make_source("shared_fn", 11, 3);
  int go[2];
  CHECK(pipe(go) == 0, "pipe");
  pid_t kids[2];
  fflush(stdout);
  for (int k = 0; k < 2; k++) {
    kids[k] = fork();
    if (kids[k] == 0) {
      char c;
      close(go[1]);
      if (read(go[0], &c, 1) != 0) _exit(3); /* wait until the parent closes the pipe */
      kiln_jit_module *m = NULL;
      kiln_status_t st = kiln_jit_compile(src, "shared_fn", NULL, &m);
      if (st) {
        fprintf(stderr, "child %d: %s\n", k, kiln_status_message(st));
        _exit(1);
      }
      _exit(call_int(m, "shared_fn", 2) == 25 ? 0 : 2);
    }
  }
  close(go[0]);
  close(go[1]); /* release both children at once */
  for (int k = 0; k < 2; k++) {
    int status = -1;
    waitpid(kids[k], &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed (status 0x%x)", k, status);
  }
  CHECK(count_files(dir, ".so") == 1, "one entry after the race, found %d", count_files(dir, ".so"));
  CHECK(count_files(dir, ".c") == 0, "no temporaries left");
  kiln_jit_stats stats = {0};
  kiln_jit_module *m = NULL;
  kiln_status_t st = kiln_jit_compile(src, "shared_fn", &stats, &m);
  CHECK(!st && stats.disk_hits == 1, "the parent finds the children's entry");
  kiln_status_free(st);
  kiln_jit_module_release(m);
  free(src);
}

/* A stand-in compiler: answers --version, then hangs or writes garbage. */
static void write_fake_compiler(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs("#!/bin/sh\n"
        "for a in \"$@\"; do [ \"$a\" = --version ] && { echo 'fake-cc 1.0'; exit 0; }; done\n"
        "out=; prev=\n"
        "for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
        "case \"$FAKE_CC_MODE\" in\n"
        "  hang) echo compiling forever; sleep 30 ;;\n"
        "  garbage) head -c 3000 /dev/zero | tr '\\0' 'x' > \"$out\" ;;\n"
        "esac\n",
        f);
  fclose(f);
  chmod(path, 0755);
}

static void test_bad_compilers(void) {
  fresh_cache("fake");
  char fake[512];
  snprintf(fake, sizeof fake, "%s/fake-cc", g_root);
  write_fake_compiler(fake);
  setenv("KILN_CC", fake, 1);

  setenv("FAKE_CC_MODE", "hang", 1);
  setenv("KILN_JIT_TIMEOUT", "1", 1);
  kiln_jit_module *m = NULL;
  double t0 = now_s();
  kiln_status_t st = kiln_jit_compile("int hang;\n", "hang", NULL, &m);
  double dt = now_s() - t0;
  CHECK(st && strstr(kiln_status_message(st), "timed out"), "hung compiler: %s", kiln_status_message(st));
  CHECK(dt < 5, "timeout took %.1f s", dt);
  kiln_status_free(st);
  unsetenv("KILN_JIT_TIMEOUT");

  setenv("FAKE_CC_MODE", "garbage", 1);
  for (int attempt = 0; attempt < 2; attempt++) { /* the second meets the bad entry of the first */
    st = kiln_jit_compile("int garbage;\n", "garbage", NULL, &m);
    CHECK(st && strstr(kiln_status_message(st), "does not load"), "garbage object: %s", kiln_status_message(st));
    CHECK(!m, "no module from garbage");
    kiln_status_free(st);
  }
  unsetenv("FAKE_CC_MODE");
  unsetenv("KILN_CC");
}

static void test_unusable_cache_dir(void) {
  char file[512];
  snprintf(file, sizeof file, "%s/not_a_dir", g_root);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  char sub[600];
  snprintf(sub, sizeof sub, "%s/cache", file); /* below a regular file: cannot exist */
  setenv("KILN_CACHE_DIR", sub, 1);
  char *src = make_source("fallback_fn", 2, 2);
  kiln_jit_module *m = NULL;
  kiln_status_t st = kiln_jit_compile(src, "fallback_fn", NULL, &m);
  CHECK(!st, "unusable cache dir must fall back: %s", kiln_status_message(st));
  kiln_status_free(st);
  CHECK(m && call_int(m, "fallback_fn", 1) == 4, "fallback module works");
  CHECK(m && !strstr(kiln_jit_module_path(m), file), "entry must not be under the bad dir");
  kiln_jit_module_release(m);
  free(src);
}

static void test_dump(void) {
  fresh_cache("dump");
  char dump[512];
  snprintf(dump, sizeof dump, "%s/dumped", g_root);
  setenv("KILN_DUMP_DIR", dump, 1);
  const char *src = "KILN_EXPORT int dumped(void) { return 42; }\n";
  kiln_jit_module *m = NULL;
  kiln_status_t st = kiln_jit_compile(src, "my kernel/1", NULL, &m);
  unsetenv("KILN_DUMP_DIR");
  CHECK(!st, "compile: %s", kiln_status_message(st));
  kiln_status_free(st);
  /* named <sanitized name>_<8 hex digits of the key>.c */
  char path[700] = "";
  DIR *d = opendir(dump);
  for (struct dirent *e; d && (e = readdir(d));)
    if (!strncmp(e->d_name, "my_kernel_1_", 12) && strlen(e->d_name) == 12 + 8 + 2)
      snprintf(path, sizeof path, "%s/%s", dump, e->d_name);
  if (d) closedir(d);
  FILE *f = path[0] ? fopen(path, "r") : NULL;
  char buf[256] = {0};
  if (f) {
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
  }
  CHECK(f && !strcmp(buf, src), "dumped source at %s", path);
  kiln_jit_module_release(m);
}

/* ---- the generated code's target features --------------------------------- */

/* Which ISA macros the compiler defines for generated code, as a bit mask. */
static const char *const isa_macros[] = {"__SSE4_1__", "__SSE4_2__", "__AVX__", "__F16C__",
                                         "__FMA__",    "__AVX2__",   "__AVX512F__"};

static int expected_isa_mask(const kiln_cpu_features *f) {
  const bool on[] = {f->sse4_1, f->sse4_2, f->avx, f->f16c, f->fma, f->avx2, f->avx512f};
  int mask = 0;
  for (int i = 0; i < (int)(sizeof on / sizeof on[0]); i++) mask |= on[i] ? 1 << i : 0;
  return mask;
}

/* Run as `test_jit --isa-child` (with KILN_CPU_DISABLE set by the parent):
 * compiles the probe and prints "isa MASK EXPECTED KEY FLAGS". */
static int isa_child(void) {
  char src[2048];
  int len = snprintf(src, sizeof src, "KILN_EXPORT int isa_mask(void) {\n  int m = 0;\n");
  for (int i = 0; i < (int)(sizeof isa_macros / sizeof isa_macros[0]); i++)
    len += snprintf(src + len, sizeof src - (size_t)len, "#ifdef %s\n  m |= %d;\n#endif\n", isa_macros[i], 1 << i);
  snprintf(src + len, sizeof src - (size_t)len, "  return m;\n}\n");
  kiln_jit_module *m = NULL;
  kiln_status_t st = kiln_jit_compile(src, "isa_probe", NULL, &m);
  if (st) {
    printf("compile: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return 1;
  }
  int (*fn)(void) = (int (*)(void))kiln_jit_symbol(m, "isa_mask");
  char flags[256];
  printf("isa %d %d %s %s\n", fn ? fn() : -1, expected_isa_mask(kiln_cpu_features_get()), kiln_jit_module_key(m),
         kiln_jit_target_flags(flags, sizeof flags));
  kiln_jit_module_release(m);
  return 0;
}

/* Runs this program with --isa-child under KILN_CPU_DISABLE=disable; parses
 * its line. False if it failed. */
static bool run_isa_child(const char *self, const char *disable, int *mask, int *expected, char *key, char *flags,
                          size_t flags_size) {
  int fds[2];
  if (pipe(fds)) return false;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    setenv("KILN_CPU_DISABLE", disable, 1);
    execl(self, self, "--isa-child", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char out[2048];
  size_t n = 0;
  ssize_t r;
  while (n < sizeof out - 1 && (r = read(fds[0], out + n, sizeof out - 1 - n)) > 0) n += (size_t)r;
  out[n] = '\0';
  close(fds[0]);
  int status = -1;
  waitpid(pid, &status, 0);
  bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  const char *line = strstr(out, "isa ");
  int used = 0;
  ok = ok && line && sscanf(line, "isa %d %d %64s %n", mask, expected, key, &used) == 3 && used > 0;
  if (ok) {
    snprintf(flags, flags_size, "%.*s", (int)strcspn(line + used, "\n"), line + used);
  } else {
    printf("child with KILN_CPU_DISABLE=%s: status 0x%x, output:\n%s\n", disable, status, out);
  }
  return ok;
}

/* True if the space-separated list holds the word. */
static bool has_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)); p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
  return false;
}

static void test_target_features(const char *self) {
  fresh_cache("isa"); /* inherited by the children */
  static const char *const modes[] = {"", "avx512", "avx2", "all"};
  char native_key[65] = "", native_flags[256] = "";
  const kiln_cpu_features *native = kiln_cpu_features_native();
  for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
    int mask = -1, expected = -2;
    char key[65] = "", flags[256] = "";
    if (!run_isa_child(self, modes[i], &mask, &expected, key, flags, sizeof flags)) {
      CHECK(false, "KILN_CPU_DISABLE=%s: the probe did not run", modes[i]);
      continue;
    }
    printf("jit: KILN_CPU_DISABLE=%-6s generated C: %s; ISA macros 0x%02x (features say 0x%02x)\n", modes[i],
           flags, mask, expected);
    CHECK(mask == expected,
          "KILN_CPU_DISABLE=%s: generated code sees ISA macros 0x%x, features say 0x%x (bits from 0: %s %s %s %s %s "
          "%s %s)",
          modes[i], mask, expected, isa_macros[0], isa_macros[1], isa_macros[2], isa_macros[3], isa_macros[4],
          isa_macros[5], isa_macros[6]);
    if (i == 0) {
      CHECK(!strcmp(flags, "-march=native"), "no KILN_CPU_DISABLE: no extra flags, got '%s'", flags);
      snprintf(native_key, sizeof native_key, "%s", key);
      snprintf(native_flags, sizeof native_flags, "%s", flags);
      continue;
    }
    /* The key changes exactly when a flag was added (a feature this CPU
     * has was turned off). */
    bool narrowed = strcmp(flags, native_flags) != 0;
    CHECK(narrowed == (strcmp(key, native_key) != 0), "KILN_CPU_DISABLE=%s: flags '%s', key %s vs native %s", modes[i],
          flags, key, native_key);
#if defined(__x86_64__)
    bool want_avx512 = native->avx512f, want_avx2 = native->avx2 && strcmp(modes[i], "avx512");
    bool want_avx = native->avx && !strcmp(modes[i], "all");
    CHECK(want_avx512 == has_word(flags, "-mno-avx512f"), "KILN_CPU_DISABLE=%s: -mno-avx512f in '%s'?",
          modes[i], flags);
    CHECK(want_avx2 == has_word(flags, "-mno-avx2"), "KILN_CPU_DISABLE=%s: -mno-avx2 in '%s'?", modes[i], flags);
    CHECK(want_avx == has_word(flags, "-mno-avx"), "KILN_CPU_DISABLE=%s: -mno-avx in '%s'?", modes[i], flags);
    CHECK(!(mask & (1 << 6)), "KILN_CPU_DISABLE=%s: __AVX512F__ defined", modes[i]);
    if (strcmp(modes[i], "avx512"))
      CHECK(!(mask & (1 << 5 | 1 << 4)), "KILN_CPU_DISABLE=%s: __AVX2__ or __FMA__ defined", modes[i]);
    if (!strcmp(modes[i], "all"))
      CHECK(!(mask & 0x0f), "KILN_CPU_DISABLE=all: SSE4/AVX/F16C macros defined (0x%x)", mask);
#else
    (void)native;
#endif
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--isa-child")) return isa_child();
  test_sha256();

  snprintf(g_root, sizeof g_root, "%s/kiln-test-jit-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_root)) {
    printf("FAIL: cannot create a temporary directory\n");
    return 1;
  }
  unsetenv("KILN_DUMP");
  unsetenv("KILN_DUMP_DIR");
  unsetenv("KILN_CFLAGS");
  kiln_status_t st = kiln_jit_available();
  if (st) {
    printf("SKIP jit tests: %s\n", kiln_status_message(st));
    kiln_status_free(st);
  } else {
    char desc[256];
    printf("compiler: %s\n", kiln_jit_compiler_description(desc, sizeof desc));
    test_compile_and_cache_hit();
    test_parallel();
    test_compile_error();
    test_missing_compiler();
    test_corrupt_entry(TRUNCATE);
    test_corrupt_entry(GARBAGE);
    test_corrupt_entry(FLIP_BYTE);
    test_corrupt_entry(EMPTY);
    test_two_processes();
    test_bad_compilers();
    test_unusable_cache_dir();
    test_dump();
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      self[n] = '\0';
      test_target_features(self);
    } else {
      test_target_features(argv[0]);
    }
    kiln_jit_stats total;
    kiln_jit_global_stats(&total);
    char line[512];
    kiln_jit_stats_format(&total, line, sizeof line);
    printf("process %s\n", line);
  }
  remove_tree(g_root);
  printf("%s (%d failures)\n", failures ? "FAIL" : "OK", failures);
  return failures != 0;
}

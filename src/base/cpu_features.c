/* CPU feature detection (CPUID + XGETBV on x86-64), cache sizes and the
 * number of usable physical cores. */
#include "base/cpu_features.h"

#include "base/hash.h"

#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define KILN_X86 1
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
#endif
#if defined(__linux__) && defined(__aarch64__)
#include <sys/auxv.h>
#endif

static kiln_cpu_features g_features;
static kiln_cpu_features g_native; /* g_features before KILN_CPU_DISABLE */
static pthread_once_t g_features_once = PTHREAD_ONCE_INIT;

/* ---- small file helpers ------------------------------------------------ */

/* Reads up to size-1 bytes of a (small, sysfs/procfs) file; false if unreadable. */
static bool read_small_file(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "re");
  if (!f) return false;
  size_t n = fread(buf, 1, size - 1, f);
  fclose(f);
  buf[n] = '\0';
  return n > 0;
}

/* "48K", "2048K", "32M", "1G" → bytes; 0 if malformed. */
static int64_t parse_size_suffix(const char *s) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (end == s || v < 0) return 0;
  switch (toupper((unsigned char)*end)) {
    case 'K': return (int64_t)v << 10;
    case 'M': return (int64_t)v << 20;
    case 'G': return (int64_t)v << 30;
    default: return (int64_t)v;
  }
}

/* ---- x86 --------------------------------------------------------------- */

#ifdef KILN_X86
typedef struct cpuid_regs {
  uint32_t eax, ebx, ecx, edx;
} cpuid_regs;

static cpuid_regs cpuid(uint32_t leaf, uint32_t subleaf) {
  cpuid_regs r = {0, 0, 0, 0};
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

static uint64_t xgetbv0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t)hi << 32 | lo;
}

static bool bit(uint32_t word, int b) { return (word >> b) & 1u; }

/* Deterministic cache parameters: leaf 4 (Intel) or 0x8000001D (AMD). */
static void x86_caches_deterministic(uint32_t leaf, kiln_cpu_features *f) {
  for (uint32_t i = 0; i < 16; i++) {
    cpuid_regs r = cpuid(leaf, i);
    uint32_t type = r.eax & 31;
    if (type == 0) break;
    if (type != 1 && type != 3) continue; /* data or unified only */
    uint32_t level = (r.eax >> 5) & 7;
    int64_t ways = ((r.ebx >> 22) & 0x3ff) + 1;
    int64_t partitions = ((r.ebx >> 12) & 0x3ff) + 1;
    int64_t line = (r.ebx & 0xfff) + 1;
    int64_t sets = (int64_t)r.ecx + 1;
    int64_t bytes = ways * partitions * line * sets;
    if (level == 1) f->l1d_bytes = bytes, f->cache_line_bytes = (int)line;
    if (level == 2) f->l2_bytes = bytes;
    if (level == 3) f->l3_bytes = bytes;
  }
}

static void detect_x86(kiln_cpu_features *f, kiln_sha256_ctx *sig) {
  cpuid_regs r0 = cpuid(0, 0);
  uint32_t max_leaf = r0.eax;
  memcpy(f->vendor + 0, &r0.ebx, 4);
  memcpy(f->vendor + 4, &r0.edx, 4);
  memcpy(f->vendor + 8, &r0.ecx, 4);
  f->vendor[12] = '\0';
  uint32_t max_ext = cpuid(0x80000000u, 0).eax;
  if (max_ext >= 0x80000004u) {
    char brand[49];
    for (uint32_t i = 0; i < 3; i++) {
      cpuid_regs r = cpuid(0x80000002u + i, 0);
      memcpy(brand + 16 * i + 0, &r.eax, 4);
      memcpy(brand + 16 * i + 4, &r.ebx, 4);
      memcpy(brand + 16 * i + 8, &r.ecx, 4);
      memcpy(brand + 16 * i + 12, &r.edx, 4);
    }
    brand[48] = '\0';
    const char *b = brand;
    while (*b == ' ') b++;
    snprintf(f->brand, sizeof f->brand, "%s", b);
  }

  cpuid_regs l1 = max_leaf >= 1 ? cpuid(1, 0) : (cpuid_regs){0, 0, 0, 0};
  cpuid_regs l7 = max_leaf >= 7 ? cpuid(7, 0) : (cpuid_regs){0, 0, 0, 0};
  cpuid_regs l7_1 = (max_leaf >= 7 && l7.eax >= 1) ? cpuid(7, 1) : (cpuid_regs){0, 0, 0, 0};
  cpuid_regs e1 = max_ext >= 0x80000001u ? cpuid(0x80000001u, 0) : (cpuid_regs){0, 0, 0, 0};

  /* The OS must have enabled the register state (XCR0) for each extension:
   * bits 1-2 SSE/AVX, 5-7 opmask/ZMM_Hi256/Hi16_ZMM, 17-18 XTILECFG/XTILEDATA. */
  uint64_t xcr0 = bit(l1.ecx, 27) ? xgetbv0() : 0; /* OSXSAVE */
  bool os_avx = (xcr0 & 0x6) == 0x6;
  bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
  bool os_amx = (xcr0 & 0x60000) == 0x60000;

  f->sse4_1 = bit(l1.ecx, 19);
  f->sse4_2 = bit(l1.ecx, 20);
  f->avx = os_avx && bit(l1.ecx, 28);
  f->fma = f->avx && bit(l1.ecx, 12);
  f->f16c = f->avx && bit(l1.ecx, 29);
  f->avx2 = f->avx && bit(l7.ebx, 5);
  f->bmi2 = bit(l7.ebx, 8);
  f->avx_vnni = f->avx2 && bit(l7_1.eax, 4);
  f->avx512f = os_avx512 && bit(l7.ebx, 16);
  f->avx512dq = f->avx512f && bit(l7.ebx, 17);
  f->avx512cd = f->avx512f && bit(l7.ebx, 28);
  f->avx512bw = f->avx512f && bit(l7.ebx, 30);
  f->avx512vl = f->avx512f && bit(l7.ebx, 31);
  f->avx512_vbmi = f->avx512f && bit(l7.ecx, 1);
  f->avx512_vnni = f->avx512f && bit(l7.ecx, 11);
  f->avx512_fp16 = f->avx512f && bit(l7.edx, 23);
  f->avx512_bf16 = f->avx512f && bit(l7_1.eax, 5);
  bool amx_tile = os_amx && bit(l7.edx, 24);
#if defined(__linux__) && defined(SYS_arch_prctl)
  /* Since Linux 5.16 a process must ask for the AMX tile data state before
   * its first tile instruction (else SIGILL). */
  if (amx_tile) {
    const int arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    amx_tile = syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
  }
#else
  amx_tile = false;
#endif
  f->amx = amx_tile;
  f->amx_bf16 = amx_tile && bit(l7.edx, 22);
  f->amx_int8 = amx_tile && bit(l7.edx, 25);

  /* Caches. */
  bool amd = !strcmp(f->vendor, "AuthenticAMD") || !strcmp(f->vendor, "HygonGenuine");
  if (amd && max_ext >= 0x8000001Du && bit(e1.ecx, 22)) {
    x86_caches_deterministic(0x8000001Du, f);
  } else if (!amd && max_leaf >= 4) {
    x86_caches_deterministic(4, f);
  } else if (amd) {
    if (max_ext >= 0x80000005u) f->l1d_bytes = (int64_t)(cpuid(0x80000005u, 0).ecx >> 24) << 10;
    if (max_ext >= 0x80000006u) {
      cpuid_regs r = cpuid(0x80000006u, 0);
      f->l2_bytes = (int64_t)(r.ecx >> 16) << 10;
      f->l3_bytes = (int64_t)(r.edx >> 18) * (512 << 10);
    }
  }

  /* What -march=native sees: vendor, brand, family/model/stepping and the
   * feature words (leaf 1 EBX holds the APIC id, which differs per core, so
   * it is left out), plus the OS-enabled state. */
  uint32_t words[] = {l1.eax, l1.ecx, l1.edx, l7.ebx, l7.ecx, l7.edx, l7_1.eax, e1.ecx, e1.edx,
                      (uint32_t)xcr0, (uint32_t)(xcr0 >> 32)};
  kiln_sha256_update(sig, f->vendor, strlen(f->vendor) + 1);
  kiln_sha256_update(sig, f->brand, strlen(f->brand) + 1);
  kiln_sha256_update(sig, words, sizeof words);
}
#endif /* KILN_X86 */

/* ---- sysfs cache sizes (any architecture) ------------------------------ */

static void sysfs_caches(kiln_cpu_features *f) {
  for (int i = 0; i < 16; i++) {
    char path[128], level[16], type[32], size[32], line[32];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    if (!read_small_file(path, level, sizeof level)) break;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    if (!read_small_file(path, type, sizeof type)) continue;
    if (strncmp(type, "Data", 4) && strncmp(type, "Unified", 7)) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (!read_small_file(path, size, sizeof size)) continue;
    int64_t bytes = parse_size_suffix(size);
    int lv = atoi(level);
    if (lv == 1 && !f->l1d_bytes) {
      f->l1d_bytes = bytes;
      snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/coherency_line_size", i);
      if (read_small_file(path, line, sizeof line) && atoi(line) > 0) f->cache_line_bytes = atoi(line);
    }
    if (lv == 2 && !f->l2_bytes) f->l2_bytes = bytes;
    if (lv == 3 && !f->l3_bytes) f->l3_bytes = bytes;
  }
}

/* ---- KILN_CPU_DISABLE --------------------------------------------------- */

static void apply_disable_list(kiln_cpu_features *f, const char *list) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    bool all = !strcmp(tok, "all");
    bool avx2 = all || !strcmp(tok, "avx2") || !strcmp(tok, "avx");
    bool avx512 = avx2 || !strcmp(tok, "avx512");
    if (all || !strcmp(tok, "avx")) f->avx = f->fma = f->f16c = false;
    if (avx2) f->avx2 = f->avx_vnni = false;
    if (avx2 || !strcmp(tok, "fma")) f->fma = false;
    if (avx512 || !strcmp(tok, "avx512f")) {
      f->avx512f = f->avx512cd = f->avx512dq = f->avx512bw = f->avx512vl = false;
      f->avx512_vnni = f->avx512_bf16 = f->avx512_fp16 = f->avx512_vbmi = false;
    }
    if (!strcmp(tok, "avx512bw")) f->avx512bw = false;
    if (!strcmp(tok, "avx512vl")) f->avx512vl = false;
    if (!strcmp(tok, "avx512_vnni")) f->avx512_vnni = false;
    if (!strcmp(tok, "avx512_bf16")) f->avx512_bf16 = false;
    if (!strcmp(tok, "avx512_fp16")) f->avx512_fp16 = false;
    if (!strcmp(tok, "avx_vnni")) f->avx_vnni = false;
    if (avx512 || !strcmp(tok, "amx")) f->amx = f->amx_bf16 = f->amx_int8 = false;
    if (all || !strcmp(tok, "sse4")) f->sse4_1 = f->sse4_2 = false;
    if (all || !strcmp(tok, "neon")) f->neon = false;
  }
}

static void detect(void) {
  kiln_cpu_features *f = &g_features;
  memset(f, 0, sizeof *f);
  kiln_sha256_ctx sig;
  kiln_sha256_init(&sig);

  struct utsname u;
  if (uname(&u) == 0) snprintf(f->arch, sizeof f->arch, "%.15s", u.machine);
  kiln_sha256_update(&sig, f->arch, strlen(f->arch) + 1);

#ifdef KILN_X86
  detect_x86(f, &sig);
#endif
#if defined(__aarch64__)
  f->neon = true;
#if defined(__linux__)
  /* No CPUID here: the kernel's hardware capability words and the main ID
   * register stand for the CPU model. */
  unsigned long caps[2] = {getauxval(AT_HWCAP), getauxval(AT_HWCAP2)};
  kiln_sha256_update(&sig, caps, sizeof caps);
  char midr[64];
  if (read_small_file("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1", midr, sizeof midr))
    kiln_sha256_update(&sig, midr, strlen(midr));
#endif
#endif
  sysfs_caches(f);
  if (f->cache_line_bytes <= 0) f->cache_line_bytes = 64;

  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256_final(&sig, digest);
  kiln_hex_encode(digest, sizeof digest, f->signature);

  g_native = *f;
  const char *disable = getenv("KILN_CPU_DISABLE");
  if (disable && *disable) apply_disable_list(f, disable);
}

const kiln_cpu_features *kiln_cpu_features_get(void) {
  pthread_once(&g_features_once, detect);
  return &g_features;
}

const kiln_cpu_features *kiln_cpu_features_native(void) {
  pthread_once(&g_features_once, detect);
  return &g_native;
}

char *kiln_cpu_features_string(const kiln_cpu_features *f, char *buf, int size) {
  struct {
    bool on;
    const char *name;
  } flags[] = {
      {f->sse4_1, "sse4_1"},       {f->sse4_2, "sse4_2"},           {f->avx, "avx"},
      {f->f16c, "f16c"},           {f->fma, "fma"},                 {f->avx2, "avx2"},
      {f->bmi2, "bmi2"},           {f->avx_vnni, "avx_vnni"},       {f->avx512f, "avx512f"},
      {f->avx512cd, "avx512cd"},   {f->avx512dq, "avx512dq"},       {f->avx512bw, "avx512bw"},
      {f->avx512vl, "avx512vl"},   {f->avx512_vnni, "avx512_vnni"}, {f->avx512_bf16, "avx512_bf16"},
      {f->avx512_fp16, "avx512_fp16"}, {f->avx512_vbmi, "avx512_vbmi"}, {f->amx, "amx"},
      {f->amx_bf16, "amx_bf16"},   {f->amx_int8, "amx_int8"},       {f->neon, "neon"},
  };
  if (size <= 0) return buf;
  int used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    if (!flags[i].on) continue;
    int n = snprintf(buf + used, (size_t)(size - used), "%s%s", used ? " " : "", flags[i].name);
    if (n < 0 || n >= size - used) break;
    used += n;
  }
  return buf;
}

/* ---- core counting ------------------------------------------------------ */

/* The process's affinity mask (caller frees with CPU_FREE); NULL if unknown. */
static cpu_set_t *get_affinity(int *out_ncpus, size_t *out_setsize) {
  for (int ncpus = 1024; ncpus <= (1 << 16); ncpus *= 2) {
    cpu_set_t *set = CPU_ALLOC((size_t)ncpus);
    if (!set) return NULL;
    size_t setsize = CPU_ALLOC_SIZE((size_t)ncpus);
    CPU_ZERO_S(setsize, set);
    if (sched_getaffinity(0, setsize, set) == 0) {
      *out_ncpus = ncpus;
      *out_setsize = setsize;
      return set;
    }
    CPU_FREE(set);
  }
  return NULL;
}

int kiln_logical_cpus(void) {
  int ncpus;
  size_t setsize;
  cpu_set_t *set = get_affinity(&ncpus, &setsize);
  int count = 0;
  if (set) {
    count = CPU_COUNT_S(setsize, set);
    CPU_FREE(set);
  }
  if (count <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    count = n <= 0 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
  }
  return count;
}

/* First CPU number of a sysfs CPU list ("0-1", "3,67"): the lowest-numbered
 * SMT sibling names the core. -1 if unreadable. */
static int core_representative(int cpu) {
  static const char *const files[] = {"core_cpus_list", "thread_siblings_list"};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[128], buf[256];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, files[i]);
    if (!read_small_file(path, buf, sizeof buf)) continue;
    char *end;
    long v = strtol(buf, &end, 10);
    if (end != buf && v >= 0 && v < INT_MAX) return (int)v;
  }
  return -1;
}

/* CPUs granted by a cgroup CPU quota (rounded up), or INT_MAX if unlimited. */
static int cgroup_cpu_limit(void) {
  int limit = INT_MAX;
  char buf[4096];
  if (!read_small_file("/proc/self/cgroup", buf, sizeof buf)) return limit;
  /* cgroup v2: the "0::/path" line; walk from our group up to the root. */
  char *line = strstr(buf, "0::");
  if (line && (line == buf || line[-1] == '\n') && line[3] == '/') {
    char rel[1024];
    size_t n = strcspn(line + 3, "\n");
    if (n >= sizeof rel) n = sizeof rel - 1;
    memcpy(rel, line + 3, n);
    rel[n] = '\0';
    for (;;) {
      char path[1200], val[128];
      snprintf(path, sizeof path, "/sys/fs/cgroup%s%scpu.max", rel, rel[strlen(rel) - 1] == '/' ? "" : "/");
      if (read_small_file(path, val, sizeof val) && strncmp(val, "max", 3)) {
        long long quota = 0, period = 0;
        if (sscanf(val, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0) {
          long long cpus = (quota + period - 1) / period;
          if (cpus < limit) limit = cpus < 1 ? 1 : (int)cpus;
        }
      }
      if (!strcmp(rel, "/")) break;
      char *slash = strrchr(rel, '/');
      if (!slash) break;
      if (slash == rel) slash[1] = '\0'; /* up to the root */
      else *slash = '\0';
    }
  }
  /* cgroup v1, as mounted inside most containers. */
  char q[64], p[64];
  if (read_small_file("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", q, sizeof q) &&
      read_small_file("/sys/fs/cgroup/cpu/cpu.cfs_period_us", p, sizeof p)) {
    long long quota = atoll(q), period = atoll(p);
    if (quota > 0 && period > 0) {
      long long cpus = (quota + period - 1) / period;
      if (cpus < limit) limit = cpus < 1 ? 1 : (int)cpus;
    }
  }
  return limit;
}

static int g_physical_cores;
static pthread_once_t g_cores_once = PTHREAD_ONCE_INIT;

static void count_physical_cores(void) {
  int count = 0, ncpus = 0;
  size_t setsize = 0;
  cpu_set_t *set = get_affinity(&ncpus, &setsize);
  if (set) {
    /* A core counts once however many of its siblings the mask holds. */
    cpu_set_t *cores = CPU_ALLOC((size_t)ncpus);
    if (cores) {
      CPU_ZERO_S(setsize, cores);
      bool ok = true;
      for (int cpu = 0; cpu < ncpus && ok; cpu++) {
        if (!CPU_ISSET_S((size_t)cpu, setsize, set)) continue;
        int rep = core_representative(cpu);
        if (rep < 0 || rep >= ncpus) ok = false;
        else CPU_SET_S((size_t)rep, setsize, cores);
      }
      if (ok) count = CPU_COUNT_S(setsize, cores);
      CPU_FREE(cores);
    }
    if (count <= 0) count = CPU_COUNT_S(setsize, set);
    CPU_FREE(set);
  }
  if (count <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    count = n <= 0 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
  }
  int limit = cgroup_cpu_limit();
  if (count > limit) count = limit;
  g_physical_cores = count < 1 ? 1 : count;
}

int kiln_physical_cores(void) {
  pthread_once(&g_cores_once, count_physical_cores);
  return g_physical_cores;
}

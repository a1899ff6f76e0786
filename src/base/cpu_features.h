/* cpu_features.h — what the host CPU can do, and how many cores kiln may use.
 *
 *   const kiln_cpu_features *cpu = kiln_cpu_features_get();
 *   if (cpu->avx512f && cpu->avx512bw) use_avx512_kernels();
 *   else if (cpu->avx2 && cpu->fma) use_avx2_kernels();
 *   int threads = kiln_physical_cores();
 *
 * A feature flag is true only when the CPU has the instructions AND the
 * operating system saves their register state (XGETBV): a kernel may use
 * every flag that is set. `amx` additionally requires that Linux granted
 * this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM), which
 * detection requests. On architectures other than x86-64 every x86 flag is
 * false.
 *
 * KILN_CPU_DISABLE=avx512,amx (comma-separated feature names, or "all")
 * forces features off, so the AVX2 or portable paths can be tested on a
 * bigger machine. "avx512" turns off every avx512* flag and "avx2" also
 * turns off the AVX-512 flags (and avx_vnni), since those paths assume AVX2.
 * kiln_cpu_features_get() returns the features after KILN_CPU_DISABLE;
 * kiln_cpu_features_native() the ones detected before it. The JIT compiles
 * generated C with -march=native plus -mno-<feature> for every feature the
 * second has and the first lacks, so that under KILN_CPU_DISABLE the
 * generated kernels are built for the same narrower feature set as the
 * hand-written SGEMM and convolution paths (otherwise the "portable" test
 * pass would still run AVX2/AVX-512 code in every generated kernel). Without
 * KILN_CPU_DISABLE the two are equal, no flag is added, and the JIT cache
 * keys stay what they were.
 *
 * Detection runs once, on first use; the returned struct is immutable and
 * shared. All functions are thread-safe.
 */
#ifndef KILN_BASE_CPU_FEATURES_H
#define KILN_BASE_CPU_FEATURES_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kiln_cpu_features {
  /* x86-64 instruction sets (usable: hardware + OS state) */
  bool sse4_1, sse4_2, avx, f16c, fma, avx2, bmi2;
  bool avx_vnni;
  bool avx512f, avx512cd, avx512dq, avx512bw, avx512vl, avx512_vnni, avx512_bf16, avx512_fp16,
      avx512_vbmi;
  bool amx;      /* AMX tiles usable (amx_tile + OS permission) */
  bool amx_bf16, amx_int8;
  /* Other architectures */
  bool neon; /* AArch64 Advanced SIMD (always there on AArch64) */

  char arch[16];     /* "x86_64", "aarch64", ... */
  char vendor[16];   /* CPUID vendor ("GenuineIntel", "AuthenticAMD") or "" */
  char brand[64];    /* marketing name, or "" */
  /* Data cache sizes in bytes; 0 when unknown. l2/l3 are the sizes of one
   * cache instance (L3 shared by the cores of one die/socket). */
  int64_t l1d_bytes, l2_bytes, l3_bytes;
  int cache_line_bytes; /* 64 when unknown */
  /* Hex SHA-256 identifying the exact CPU (model and raw feature words): what
   * `-march=native` compiles for. Part of the JIT cache key. */
  char signature[65];
} kiln_cpu_features;

/* The host's features. Never NULL; detected once. */
const kiln_cpu_features *kiln_cpu_features_get(void);

/* The features as detected, before KILN_CPU_DISABLE: what the CPU and OS
 * provide, hence what `-march=native` compiles for. Never NULL; the same
 * contents as kiln_cpu_features_get() when KILN_CPU_DISABLE is unset. Use it
 * only to know what was disabled (the JIT's -mno-<feature> flags); kernels
 * must choose their paths from kiln_cpu_features_get(). */
const kiln_cpu_features *kiln_cpu_features_native(void);

/* Space-separated names of the set flags ("avx2 fma avx512f ..."), into buf.
 * Returns buf. */
char *kiln_cpu_features_string(const kiln_cpu_features *f, char *buf, int size);

/* Physical cores this process may run on: distinct cores (SMT siblings
 * counted once) among the CPUs of its affinity mask (sched_getaffinity),
 * from /sys/devices/system/cpu/cpuN/topology; capped by a cgroup v2 CPU
 * quota (cpu.max) when one is set. Falls back to the number of CPUs in the
 * affinity mask, then to sysconf(_SC_NPROCESSORS_ONLN). Always >= 1.
 * Computed once per process. */
int kiln_physical_cores(void);

/* Logical CPUs (hardware threads) in this process's affinity mask; >= 1.
 * Computed on each call (cheap). */
int kiln_logical_cpus(void);

#endif

/* jit.h — compile C source into a shared object with the system C compiler,
 * cache it on disk, load it.
 *
 *   const char *srcs[2] = {conv_src, relu_src}, *names[2] = {"conv1", "relu1"};
 *   kiln_jit_module *mods[2];
 *   kiln_jit_stats stats = {0};
 *   KILN_TRY(kiln_jit_compile_many(2, srcs, names, 0, &stats, mods));
 *   kernel_fn conv = (kernel_fn)kiln_jit_symbol(mods[0], "conv1");
 *   ...
 *   kiln_jit_module_release(mods[0]); kiln_jit_module_release(mods[1]);
 *
 * Exported entry points: sources are compiled with -fvisibility=hidden, so
 * only functions marked KILN_EXPORT (defined on the command line as
 * __attribute__((visibility("default")))) can be found by kiln_jit_symbol.
 * Guard a fallback definition with #ifndef KILN_EXPORT if the source must
 * also compile on its own. Sources must be self-contained: they are linked
 * with -Wl,-z,defs against libc and libm only, so calling into kiln goes
 * through the function-pointer table of codegen/kiln_rt.h.
 *
 * Compiler: $KILN_CC, else $CC, else the first of cc, gcc, clang on PATH.
 * The variable may hold leading arguments ("ccache gcc"). An explicitly
 * named compiler that is missing is an error (no silent fallback).
 * `<compiler> --version` runs once per process per compiler.
 *
 * Flags: -O3 -march=native -std=c11 -fPIC -shared -fvisibility=hidden
 * -fno-semantic-interposition -ffp-contract=fast -fno-math-errno
 * -fno-trapping-math -pipe -Wl,-z,defs ... -lm, then, on x86-64, -mno-<feature>
 * for every feature KILN_CPU_DISABLE turned off that this CPU has
 * (kiln_cpu_features_native() has it, kiln_cpu_features_get() does not:
 * KILN_CPU_DISABLE=avx512 adds -mno-avx512f; avx2 adds -mno-fma -mno-avx2
 * -mno-avx512f; all adds -mno-sse4.1 -mno-sse4.2 -mno-avx -mno-f16c -mno-fma
 * -mno-avx2 -mno-avx512f, each only where the CPU has the feature), then
 * $KILN_CFLAGS (split on spaces; e.g. "-O0 -g" to debug a kernel). The
 * -mno flags exist because -march=native alone would compile the generated
 * kernels for the whole CPU even when the hand-written SGEMM and convolution
 * paths were narrowed, so a "portable" run (KILN_CPU_DISABLE=all) would still
 * execute AVX2/AVX-512 code; they are flags, so they are part of the cache key
 * (a disabled run never loads an entry built for the full CPU), and without
 * KILN_CPU_DISABLE there are none and keys are unchanged. Floating point: no -ffast-math
 * (no reassociation, no flush-to-zero, NaN/Inf preserved), so results are
 * those of the written operation order; but a*b+c may be contracted into
 * one FMA (-ffp-contract=fast; needed explicitly because ISO -std=c11 mode
 * turns contraction off in gcc), which changes results by at most an ulp
 * per contraction and keeps kernels well inside rtol 1e-3 of the reference.
 * -fno-math-errno lets sqrtf & co inline/vectorize (errno is never read).
 * Generated code that needs exact a*b-c*d must not rely on non-contraction.
 *
 * Cache: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln
 * (created 0700). Entry `<key>.so`, key = SHA-256 of (source, compiler path
 * and --version output, flags, the CPU's signature (what -march=native
 * targets), kiln version); a source that starts with kiln_c_preamble() is
 * hashed as that preamble's hash then the rest (hashed once per batch, not
 * once per kernel: it is most of a small kernel's text). An entry is the ELF object followed by a 48-byte
 * footer (magic, ELF size, SHA-256 of the ELF bytes), checked before every
 * load: a truncated, corrupt or garbage entry is deleted and rebuilt
 * silently. Entries are built in a temporary file in the cache directory and
 * rename()d into place, so processes sharing the cache never see a partial
 * file and racing builders are harmless. A missing, unwritable or
 * world-writable cache directory falls back to a private temporary directory
 * (removed at exit) with a one-time warning. A failed compile keeps the
 * source as `<key>.failed.c` in the cache directory. Removing the cache
 * directory is always safe. There is no size limit yet.
 *
 * Dumps: KILN_DUMP containing "c" (or "all"), or KILN_DUMP_DIR set, writes
 * every source passed in (hit or miss) to $KILN_DUMP_DIR (default
 * ./kiln_dump) as `<name>.c`.
 *
 * Other knobs: KILN_JIT_JOBS (parallel compilers when max_parallel <= 0;
 * default: physical cores), KILN_JIT_TIMEOUT (seconds per compile, default
 * 600; a compiler running longer is killed).
 *
 * Environment variables are read at each compile call.
 *
 * Thread safety: every function may be called from any thread; modules are
 * shared process-wide (compiling a source already loaded returns the same
 * module with one more reference).
 */
#ifndef KILN_CODEGEN_JIT_H
#define KILN_CODEGEN_JIT_H

#include "base/status.h"

#include <stdint.h>

typedef struct kiln_jit_module kiln_jit_module;

/* Counters a caller can print (e.g. at session creation). Functions taking a
 * stats pointer add to it; kiln_jit_global_stats sums the whole process. */
typedef struct kiln_jit_stats {
  int64_t requested;       /* sources asked for */
  int64_t memory_hits;     /* already loaded in this process */
  int64_t disk_hits;       /* loaded from the cache directory */
  int64_t compiled;        /* cache misses compiled successfully */
  int64_t corrupt_rebuilt; /* corrupt cache entries deleted and rebuilt (also in compiled) */
  int64_t failed;          /* compiles that failed */
  double compile_seconds;  /* compiler wall time, summed over compile jobs */
  double wall_seconds;     /* wall time spent in kiln_jit_compile* calls */
} kiln_jit_stats;

/* NULL if a C compiler is usable (found, and `--version` runs), else an error
 * naming what was tried. */
kiln_status_t kiln_jit_available(void);

/* Compiles (or finds in the cache) and loads n sources; out_modules[i] gets a
 * new reference for sources[i]. Cache misses compile in parallel, up to
 * max_parallel compilers at once (<= 0: $KILN_JIT_JOBS or the number of
 * physical cores). names[i] (names or names[i] may be NULL) labels dumps and
 * error messages. stats, if not NULL, is added to. On error nothing is
 * returned (all out_modules NULL) and the status names the first failing
 * source with the compiler's first 20 lines of output and the path of the
 * kept source. */
kiln_status_t kiln_jit_compile_many(int n, const char *const *sources, const char *const *names, int max_parallel,
                                    kiln_jit_stats *stats, kiln_jit_module **out_modules);

/* What compile_many would return without compiling: out_modules[i] a new
 * reference where sources[i] is loaded already or has a valid cache entry,
 * NULL where it would need the compiler (a tiered caller compiles those
 * later). Errors: no compiler, no cache directory, out of memory. */
kiln_status_t kiln_jit_lookup_many(int n, const char *const *sources, const char *const *names, kiln_jit_stats *stats,
                                   kiln_jit_module **out_modules);

/* One source; same as compile_many with n = 1. */
kiln_status_t kiln_jit_compile(const char *source, const char *name, kiln_jit_stats *stats,
                               kiln_jit_module **out_module);

/* Address of an exported (KILN_EXPORT) symbol, or NULL. Valid while the
 * module is referenced. */
void *kiln_jit_symbol(const kiln_jit_module *module, const char *name);
/* Same, but a missing symbol is an error saying so. */
kiln_status_t kiln_jit_require_symbol(const kiln_jit_module *module, const char *name, void **out_address);

kiln_jit_module *kiln_jit_module_retain(kiln_jit_module *module);
/* Drops a reference; the object is dlclose()d at zero. NULL is ignored. */
void kiln_jit_module_release(kiln_jit_module *module);

/* The cache entry's path and key (hex SHA-256). Borrowed, valid while the
 * module is referenced. */
const char *kiln_jit_module_path(const kiln_jit_module *module);
const char *kiln_jit_module_key(const kiln_jit_module *module);

/* Totals for the whole process since start. */
void kiln_jit_global_stats(kiln_jit_stats *out_stats);
/* One line: "jit: 12 requested, 3 memory hits, 8 disk hits, 1 compiled (...)". */
void kiln_jit_stats_format(const kiln_jit_stats *stats, char *buf, int size);

/* The cache directory compile calls would use now (after fallback), into
 * buf; and a one-line description of the compiler ("/usr/bin/cc: gcc (Debian
 * 12.2.0-14) 12.2.0"). Both return buf, or NULL with buf = "" on error. */
char *kiln_jit_cache_dir(char *buf, int size);
char *kiln_jit_compiler_description(char *buf, int size);

/* The target flags generated C is compiled with: "-march=native", followed
 * by the -mno-<feature> flags KILN_CPU_DISABLE adds (see Flags above), into
 * buf. Returns buf. */
char *kiln_jit_target_flags(char *buf, int size);

#endif

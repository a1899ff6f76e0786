/* The AVX2 + FMA build of the interpreter's lane loops (lanes_impl.h):
 * the same source under a target pragma; kiln_lanes() only returns it
 * when the CPU has both. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "devices/cpu/target_avx2_begin.h"
#define LANES_TABLE kiln_lanes_avx2
#define LANES_NAME "avx2"
#include "devices/cpu/interp/lanes_impl.h"
#include "devices/cpu/target_avx2_end.h"
#else
typedef int kiln_lanes_avx2_unused; /* ISO C: no empty translation unit */
#endif

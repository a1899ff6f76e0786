/* target_avx2_begin.h — the functions after this include, up to
 * target_avx2_end.h, are compiled for AVX2 + FMA (GCC's target pragma,
 * clang's attribute push). A file includes an implementation header
 * between the two to get its AVX2 build next to the portable one, and
 * calls it only when cpu_features says the CPU has both. Include both
 * only under
 *   #if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
 * (no include guard: a file may use the pair more than once). */
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

/* igemm_internal.h — the packed layout and micro-kernel contract of the
 * integer GEMM (igemm.h), shared by the driver and the kernels.
 *
 * Both operands are packed as int16 pairs along K, zero points already
 * subtracted, padding 0: a pair (x[2p], x[2p+1]) is one 32-bit word (the
 * element at 2p in its low half). Packed A: per micro-panel of IGEMM_MR
 * rows, word (p, r) at p * IGEMM_MR + r. Packed B: per panel of IGEMM_NR
 * columns (all K pairs, kp = ceil(k / 2)), word (p, j) at p * IGEMM_NR + j.
 */
#ifndef KILN_DEVICES_CPU_GEMM_IGEMM_INTERNAL_H
#define KILN_DEVICES_CPU_GEMM_IGEMM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#define IGEMM_MR 6
#define IGEMM_NR 16

/* C[0..mr, 0..nr] (= or +=, modulo 2^32) the kp-pair product of a packed
 * A micro-panel and a packed B panel; mr <= IGEMM_MR, nr <= IGEMM_NR. */
typedef void (*kiln_igemm_kernel_fn)(int64_t kp, const int32_t *ap, const int32_t *bp, int32_t *c, int64_t ldc,
                                     int mr, int nr, bool accumulate);

void kiln_igemm_kernel_generic(int64_t kp, const int32_t *ap, const int32_t *bp, int32_t *c, int64_t ldc, int mr,
                               int nr, bool accumulate);
/* NULL where the compiler cannot build them (not x86-64 GCC/clang). */
extern const kiln_igemm_kernel_fn kiln_igemm_kernel_avx2, kiln_igemm_kernel_avxvnni, kiln_igemm_kernel_avx512vnni;

#endif

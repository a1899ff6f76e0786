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

/* The quads layout, used when every op(B) - b_zero lies in
 * [-IGEMM_QUAD_BOUND, IGEMM_QUAD_BOUND] (as dynamic quantization's
 * reduce_range weights do): B - b_zero as int8 and A as uint8 (a signed A
 * offset by 128), four consecutive K elements a 32-bit word (the element
 * at 4q in its lowest byte), words placed as the pairs' are: A word (q, r)
 * at q * IGEMM_MR + r, B word (q, j) at q * IGEMM_NR + j of its panel,
 * padding 0. A u8 x s8 product pair then sums to at most 255 * 64 * 2 =
 * 32640, inside int16, so AVX2's vpmaddubsw is exact here; the driver
 * subtracts a_zero (+ 128) times B's column sums afterwards. On VNNI
 * (vpdpbusd: four products summed exactly in 32 bits) the same layout
 * holds any B - b_zero in [-128, 127]; packed so, it is marked full and
 * only the VNNI and portable quads kernels read it. Where B - b_zero does
 * not fit int8 (u8 activations of zero point 0 after a Relu) VNNI takes
 * the unsigned-B quads layout: B's bytes as they are (u8; a signed B
 * offset by 128), A - a_zero as int8 (weights), the roles of vpdpbusd's
 * operands swapped; the driver subtracts B's zero point (u8 form) times
 * A's row sums. Only a B packed by the call itself takes it (A is known
 * there: it must fit int8); a B packed ahead (kiln_igemm_pack_b) never. */
#define IGEMM_QUAD_BOUND 64

/* C[0..mr, 0..nr] (= or +=, modulo 2^32) the kp-pair product of a packed
 * A micro-panel and a packed B panel; mr <= IGEMM_MR, nr <= IGEMM_NR. */
typedef void (*kiln_igemm_kernel_fn)(int64_t kp, const int32_t *ap, const int32_t *bp, int32_t *c, int64_t ldc,
                                     int mr, int nr, bool accumulate);

void kiln_igemm_kernel_generic(int64_t kp, const int32_t *ap, const int32_t *bp, int32_t *c, int64_t ldc, int mr,
                               int nr, bool accumulate);
/* NULL where the compiler cannot build them (not x86-64 GCC/clang). */
extern const kiln_igemm_kernel_fn kiln_igemm_kernel_avx2, kiln_igemm_kernel_avxvnni, kiln_igemm_kernel_avx512vnni;

/* The same contract over quads (kp counts quads): C = or += the sum of
 * u8(A) * s8(B) over them. */
void kiln_igemm_quad_kernel_generic(int64_t kq, const int32_t *ap, const int32_t *bp, int32_t *c, int64_t ldc, int mr,
                                    int nr, bool accumulate);
extern const kiln_igemm_kernel_fn kiln_igemm_quad_kernel_avx2;
/* The same over vpdpbusd (exact for any int8 B - b_zero: the full layout). */
extern const kiln_igemm_kernel_fn kiln_igemm_quad_kernel_avxvnni, kiln_igemm_quad_kernel_avx512vnni;
/* Quads with the roles swapped (the unsigned-B layout): B's bytes u8, A's
 * (A - a_zero) s8; C = or += their quad products. VNNI only. */
extern const kiln_igemm_kernel_fn kiln_igemm_quad_ub_kernel_avxvnni, kiln_igemm_quad_ub_kernel_avx512vnni;

/* AMX-INT8 (igemm_kernel_amx.c): C[0..mr, 0..nr] (=, not +=; mr, nr <= 32)
 * the kq-quad product of an A block packed as rows of astride bytes (a
 * multiple of 64 holding K rounded up to 64, zero past K and past the
 * block's rows, 32 rows readable when mr > 16) and the quads-layout B
 * panels b0 and b1 (b1 read only when nr > 16). The first: u8 A x s8 B (the
 * quads layouts); the ub one: s8 A x u8 B (the unsigned-B layout). Only
 * between kiln_igemm_amx_configure and kiln_igemm_amx_release on the
 * calling thread. NULL where the compiler cannot build them. */
typedef void (*kiln_igemm_amx_fn)(int64_t kq, const uint8_t *ap, int64_t astride, const uint8_t *b0,
                                  const uint8_t *b1, int32_t *c, int64_t ldc, int mr, int nr);
extern const kiln_igemm_amx_fn kiln_igemm_amx_kernel, kiln_igemm_amx_ub_kernel;
extern void (*const kiln_igemm_amx_configure)(void);
extern void (*const kiln_igemm_amx_release)(void);

#endif

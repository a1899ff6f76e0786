/* npy.h — NumPy .npy and .npz files <-> kiln tensors.
 *
 *   kiln_tensor *t = NULL;
 *   KILN_TRY(kiln_npy_read_file("x.npy", &t));          // any supported dtype
 *   KILN_TRY(kiln_npy_write_file("y.npy", t));
 *
 *   int n; char **names; kiln_tensor **ts;
 *   KILN_TRY(kiln_npz_read_file("w.npz", &n, &names, &ts));  // np.savez / savez_compressed
 *   ...
 *   kiln_npz_free(n, names, ts);
 *
 * Reading accepts format versions 1.0, 2.0 and 3.0, either byte order
 * (swapped to the host's on read), C or Fortran order (Fortran is transposed
 * to row-major), 0-d scalars and zero-size arrays. Descriptors:
 *   '<f2' '<f4' '<f8' '|i1' '<i2' '<i4' '<i8' '|u1' '<u2' '<u4' '<u8' '|b1'
 *   '<c8' '<c16' (any of '<' '>' '=' '|' as byte order),
 *   '<V2' '<V1'   untyped bytes: what np.save writes for ml_dtypes arrays
 *                 (numpy has no bfloat16, float8, float4, int4 or int2). A
 *                 2-byte one reads as BF16; a 1-byte one needs the dtype from
 *                 the caller (kiln_npy_read_*_as: `kiln run` passes the model
 *                 input's). Elements are as ml_dtypes holds them in memory,
 *                 one per byte: float8/float4 bit codes, int4/int2 values.
 *   '<f1'         float8_e5m2 (what np.save writes for ml_dtypes' float8_e5m2,
 *                 whose dtype claims kind 'f'; kiln writes it as '<V1', which
 *                 numpy can load),
 *   'bfloat16', 'float8_e4m3fn', 'int4', ... (ml_dtypes' names; kiln wrote
 *                 'bfloat16' before it wrote '<V2'): that dtype,
 *   '<U<n>'       fixed-width UTF-32 strings -> STRING tensor (UTF-8, trailing
 *                 NULs dropped as NumPy does), '|S<n>' bytes -> STRING.
 * Object ('|O'), structured, datetime and other descriptors are errors.
 * Bool bytes other than 0/1 read as 1.
 *
 * Writing produces what np.save would: little-endian, C order, version 1.0
 * (2.0 if the header would not fit), header padded to 64 bytes. BF16 is
 * written as '<V2' and the narrow types as '<V1', as np.save writes ml_dtypes
 * arrays (read them back with np.load(f).view(ml_dtypes.bfloat16), ...), and STRING as '<U<n>' (n = the longest string
 * in code points, at least 1; strings must be valid UTF-8 without NULs).
 * .npz files are written like np.savez (zip, stored, members "<name>.npy");
 * reading accepts stored and deflate-compressed members (np.savez_compressed)
 * when kiln is built with zlib (KILN_HAVE_ZLIB), ZIP64 included.
 *
 * Hostile input never crashes and never allocates more than a small multiple
 * of the input's size: every error is KILN_INVALID_ARGUMENT (malformed
 * content), KILN_UNSUPPORTED (valid but not a kiln type), KILN_IO_ERROR (the
 * file system) or KILN_OUT_OF_MEMORY, and its message names the file.
 *
 * Ownership: out tensors/arrays are new and owned by the caller; inputs are
 * borrowed. Thread-safe (no global state).
 */
#ifndef KILN_TENSOR_NPY_H
#define KILN_TENSOR_NPY_H

#include "tensor/tensor.h"

/* Parses a complete .npy image held in memory (the bytes are copied). */
kiln_status_t kiln_npy_read_buffer(const void *data, size_t size, kiln_tensor **out_tensor);
/* Same, with `name` used in error messages (e.g. the npz member name). */
kiln_status_t kiln_npy_read_buffer_named(const void *data, size_t size, const char *name,
                                         kiln_tensor **out_tensor);
/* Reads a .npy file; the data goes straight into the tensor (no second copy
 * for little-endian C-order numeric files). */
kiln_status_t kiln_npy_read_file(const char *path, kiln_tensor **out_tensor);
/* Same, reading an untyped 'V<n>' descr as void_as (BF16 or a narrow type of
 * n bytes); UNDEFINED behaves as kiln_npy_read_file. */
kiln_status_t kiln_npy_read_file_as(const char *path, kiln_dtype void_as, kiln_tensor **out_tensor);
kiln_status_t kiln_npy_read_buffer_as(const void *data, size_t size, const char *name, kiln_dtype void_as,
                                      kiln_tensor **out_tensor);

/* Serializes a tensor to a new malloc'd .npy image (*out_data freed by the caller). */
kiln_status_t kiln_npy_write_buffer(const kiln_tensor *tensor, void **out_data, size_t *out_size);
kiln_status_t kiln_npy_write_file(const char *path, const kiln_tensor *tensor);

/* Reads every .npy member of an .npz archive, in archive order. Names are the
 * member names without the ".npy" suffix. Free with kiln_npz_free. */
kiln_status_t kiln_npz_read_file(const char *path, int *out_n, char ***out_names,
                                 kiln_tensor ***out_tensors);
kiln_status_t kiln_npz_read_buffer(const void *data, size_t size, int *out_n, char ***out_names,
                                   kiln_tensor ***out_tensors);
/* Frees what kiln_npz_read_* returned (releases the tensors). NULLs ignored. */
void kiln_npz_free(int n, char **names, kiln_tensor **tensors);
/* Writes an uncompressed .npz (np.savez layout); names must be unique and
 * non-empty; ".npy" is appended to each. */
kiln_status_t kiln_npz_write_file(const char *path, int n, const char *const *names,
                                  const kiln_tensor *const *tensors);

/* True when deflate-compressed .npz members can be read (built with zlib). */
bool kiln_npz_supports_deflate(void);

#endif

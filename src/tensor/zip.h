/* zip.h — the small part of the ZIP format that .npz files need.
 *
 * Reading works on an archive held in memory (a mapped file):
 *
 *   int n; kiln_zip_entry *es;
 *   KILN_TRY(kiln_zip_list(bytes, size, "w.npz", &n, &es));
 *   for (i...) kiln_zip_extract(bytes, size, &es[i], "w.npz", &buf, &len);  // or _stored_view
 *   kiln_zip_entries_free(n, es);
 *
 * Stored (method 0) and deflate (method 8, needs KILN_HAVE_ZLIB) members,
 * ZIP64 sizes/offsets; no encryption, no multi-disk archives. Every offset
 * and size is bounds-checked against the buffer; allocations are bounded by a
 * multiple of the archive's size (deflate cannot expand more than ~1032x).
 *
 * Writing streams stored members to a file, each member's size and CRC-32
 * known before its bytes are written (np.savez's layout, without data
 * descriptors), switching to ZIP64 records only where a value needs it:
 *
 *   kiln_zip_writer *w;
 *   KILN_TRY(kiln_zip_writer_open("w.npz", &w));
 *   kiln_zip_writer_begin(w, "a.npy", size, crc); kiln_zip_writer_write(w, p, size); ...
 *   kiln_zip_writer_close(w);   // or kiln_zip_writer_abort(w) on error (removes the file)
 *
 * Not thread-safe per object; no global state.
 */
#ifndef KILN_TENSOR_ZIP_H
#define KILN_TENSOR_ZIP_H

#include "base/common.h"

typedef struct kiln_zip_entry {
  char *name;                 /* owned, NUL-terminated (names with NUL bytes are rejected) */
  uint16_t method;            /* 0 stored, 8 deflate */
  uint16_t flags;
  uint32_t crc32;
  uint64_t compressed_size;
  uint64_t uncompressed_size;
  uint64_t data_offset;       /* first byte of the member's data in the archive */
} kiln_zip_entry;

/* CRC-32 (ISO-HDLC, as zip uses); start with crc = 0 and chain calls. */
uint32_t kiln_crc32(uint32_t crc, const void *data, size_t n);

/* `what` names the archive in error messages. */
kiln_status_t kiln_zip_list(const uint8_t *data, size_t size, const char *what, int *out_n,
                            kiln_zip_entry **out_entries);
void kiln_zip_entries_free(int n, kiln_zip_entry *entries);
/* Uncompressed bytes of a member into a new malloc'd buffer (CRC checked). */
kiln_status_t kiln_zip_extract(const uint8_t *data, size_t size, const kiln_zip_entry *entry,
                               const char *what, uint8_t **out_bytes, size_t *out_size);
/* For stored members: a borrowed view of the bytes inside `data` (CRC checked). */
kiln_status_t kiln_zip_stored_view(const uint8_t *data, size_t size, const kiln_zip_entry *entry,
                                   const char *what, const uint8_t **out_bytes, size_t *out_size);
bool kiln_zip_supports_deflate(void);

typedef struct kiln_zip_writer kiln_zip_writer;
kiln_status_t kiln_zip_writer_open(const char *path, kiln_zip_writer **out_writer);
/* Starts a stored member of exactly `size` bytes whose CRC-32 is `crc`. */
kiln_status_t kiln_zip_writer_begin(kiln_zip_writer *w, const char *name, uint64_t size, uint32_t crc);
kiln_status_t kiln_zip_writer_write(kiln_zip_writer *w, const void *data, size_t n);
/* Writes the central directory and closes; frees w (also on error, then the file is removed). */
kiln_status_t kiln_zip_writer_close(kiln_zip_writer *w);
/* Closes, removes the partial file and frees w. NULL ignored. */
void kiln_zip_writer_abort(kiln_zip_writer *w);

#endif

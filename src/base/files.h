/* files.h — small filesystem helpers the JIT and the GPU devices' caches
 * share: creating folders, where source dumps go, checked cache files. */
#ifndef KILN_BASE_FILES_H
#define KILN_BASE_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* mkdir -p with mode 0700; 0, or the errno of the step that failed. */
int kiln_make_dirs(const char *dir);

/* The folder generated sources of `kind` ("c", "glsl") are dumped to, or
 * NULL when dumps are off: KILN_DUMP_DIR names it (and turns every kind
 * on); otherwise KILN_DUMP=KIND or all (a comma/space separated list) means
 * "kiln_dump" in the working directory. The string is the environment's or
 * static: do not free it. */
const char *kiln_dump_dir(const char *kind);

/* Little-endian 64-bit fields of cache files' footers. */
static inline void kiln_put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint64_t kiln_get_le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* A checked cache file: the payload followed by a 48-byte footer (8-byte
 * magic, little-endian payload size, SHA-256 of the payload). Reading
 * returns the payload (malloc'd, caller frees) and its size after checking
 * the footer, or NULL: *out_corrupt tells "bad file" from "no file".
 * Writing goes to a temporary name in the same folder, rename()d into place,
 * so concurrent processes never see a partial file; it is best effort (a
 * cache that cannot be written only costs a recompile). magic: 8 bytes. */
#define KILN_CACHE_FILE_MAX ((size_t)256 << 20) /* larger files are never read */
uint8_t *kiln_cache_file_read(const char *path, const char *magic, size_t *out_size, bool *out_corrupt);
void kiln_cache_file_write(const char *path, const char *magic, const void *data, size_t size);

#endif

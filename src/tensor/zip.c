#include "tensor/zip.h"

#include <errno.h>
#include <stdio.h>

#ifdef KILN_HAVE_ZLIB
#include <zlib.h>
#endif

/* Record signatures and fixed sizes (APPNOTE.TXT 4.3). */
#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_EOCD64_LOCATOR 0x07064b50u
#define LOCAL_SIZE 30
#define CENTRAL_SIZE 46
#define EOCD_SIZE 22
#define EOCD64_SIZE 56
#define LOCATOR_SIZE 20
#define U32_MAX_FIELD 0xffffffffu
#define U16_MAX_FIELD 0xffffu
#define ZIP64_EXTRA_ID 0x0001
/* Deflate's best case is 258 bytes from ~2 bits: no stream expands more than this. */
#define DEFLATE_MAX_RATIO 1032

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

uint32_t kiln_crc32(uint32_t crc, const void *data, size_t n) {
  /* The table is rebuilt per call (256 x 8 steps) to keep the code free of
   * global state; callers pass large chunks. */
  uint32_t table[256];
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  const uint8_t *p = data;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

bool kiln_zip_supports_deflate(void) {
#ifdef KILN_HAVE_ZLIB
  return true;
#else
  return false;
#endif
}

/* ---- reading ----------------------------------------------------------- */

static kiln_status_t bad(const char *what, const char *msg) {
  return kiln_error(KILN_INVALID_ARGUMENT, "%s: not a valid zip archive: %s", what, msg);
}

/* Finds the end-of-central-directory record: the last signature in the final
 * 64 KiB + 22 bytes whose comment fits in the file. */
static kiln_status_t find_eocd(const uint8_t *data, size_t size, const char *what, size_t *out_pos) {
  if (size < EOCD_SIZE) return bad(what, "too short for an end-of-central-directory record");
  size_t lowest = size > EOCD_SIZE + 65535 ? size - EOCD_SIZE - 65535 : 0;
  for (size_t pos = size - EOCD_SIZE + 1; pos-- > lowest;) {
    if (rd32(data + pos) == SIG_EOCD && pos + EOCD_SIZE + rd16(data + pos + 20) <= size) {
      *out_pos = pos;
      return NULL;
    }
  }
  return bad(what, "no end-of-central-directory record");
}

/* Central-directory location, from the classic record or its ZIP64 twin. */
static kiln_status_t read_directory_bounds(const uint8_t *data, size_t size, const char *what,
                                           uint64_t *out_count, uint64_t *out_cd_off,
                                           uint64_t *out_cd_size, size_t *out_cd_limit) {
  size_t eocd;
  KILN_TRY(find_eocd(data, size, what, &eocd));
  const uint8_t *e = data + eocd;
  if (rd16(e + 4) != 0 || rd16(e + 6) != 0) return kiln_error(KILN_UNSUPPORTED, "%s: multi-disk zip archives are not supported", what);
  uint64_t count = rd16(e + 10), cd_size = rd32(e + 12), cd_off = rd32(e + 16);
  size_t limit = eocd;
  if (eocd >= LOCATOR_SIZE && rd32(e - LOCATOR_SIZE) == SIG_EOCD64_LOCATOR) {
    const uint8_t *loc = e - LOCATOR_SIZE;
    uint64_t off64 = rd64(loc + 8);
    if (off64 > eocd - LOCATOR_SIZE || eocd - LOCATOR_SIZE - off64 < EOCD64_SIZE)
      return bad(what, "ZIP64 end record out of bounds");
    const uint8_t *z = data + off64;
    if (rd32(z) != SIG_EOCD64) return bad(what, "bad ZIP64 end record signature");
    count = rd64(z + 32);
    cd_size = rd64(z + 40);
    cd_off = rd64(z + 48);
    limit = (size_t)off64;
  }
  if (cd_off > limit || cd_size > limit - cd_off) return bad(what, "central directory out of bounds");
  if (count > cd_size / CENTRAL_SIZE) return bad(what, "more entries than the central directory can hold");
  *out_count = count;
  *out_cd_off = cd_off;
  *out_cd_size = cd_size;
  *out_cd_limit = limit;
  return NULL;
}

/* Replaces the 0xffffffff fields of a central entry with its ZIP64 extra's values. */
static kiln_status_t apply_zip64_extra(const uint8_t *extra, size_t len, const char *what, uint64_t *usize,
                                       uint64_t *csize, uint64_t *offset) {
  while (len >= 4) {
    uint16_t id = rd16(extra), n = rd16(extra + 2);
    if ((size_t)n > len - 4) return bad(what, "extra field past its end");
    if (id == ZIP64_EXTRA_ID) {
      const uint8_t *p = extra + 4;
      size_t left = n;
      uint64_t *fields[3] = {usize, csize, offset};
      for (int i = 0; i < 3; i++) {
        if (*fields[i] != U32_MAX_FIELD) continue;
        if (left < 8) return bad(what, "ZIP64 extra field too short");
        *fields[i] = rd64(p);
        p += 8;
        left -= 8;
      }
      return NULL;
    }
    extra += 4 + (size_t)n;
    len -= 4 + (size_t)n;
  }
  return NULL;
}

void kiln_zip_entries_free(int n, kiln_zip_entry *entries) {
  if (!entries) return;
  for (int i = 0; i < n; i++) free(entries[i].name);
  free(entries);
}

kiln_status_t kiln_zip_list(const uint8_t *data, size_t size, const char *what, int *out_n,
                            kiln_zip_entry **out_entries) {
  *out_n = 0;
  *out_entries = NULL;
  uint64_t count, cd_off, cd_size;
  size_t limit;
  KILN_TRY(read_directory_bounds(data, size, what, &count, &cd_off, &cd_size, &limit));
  if (count > INT32_MAX / 2) return bad(what, "too many entries");
  kiln_zip_entry *es = calloc(count ? (size_t)count : 1, sizeof *es);
  if (!es) return KILN_OOM();
  const uint8_t *p = data + cd_off, *end = data + cd_off + cd_size;
  kiln_status_t st = NULL;
  int n = 0;
  for (; n < (int)count; n++) {
    kiln_zip_entry *z = &es[n];
    if ((size_t)(end - p) < CENTRAL_SIZE || rd32(p) != SIG_CENTRAL) {
      st = bad(what, "truncated or corrupt central directory");
      break;
    }
    size_t name_len = rd16(p + 28), extra_len = rd16(p + 30), comment_len = rd16(p + 32);
    if ((size_t)(end - p) - CENTRAL_SIZE < name_len + extra_len + comment_len) {
      st = bad(what, "central directory entry past its end");
      break;
    }
    z->flags = rd16(p + 8);
    z->method = rd16(p + 10);
    z->crc32 = rd32(p + 16);
    z->compressed_size = rd32(p + 20);
    z->uncompressed_size = rd32(p + 24);
    uint64_t local = rd32(p + 42);
    if (memchr(p + CENTRAL_SIZE, 0, name_len)) {
      st = bad(what, "member name contains a NUL byte");
      break;
    }
    z->name = malloc(name_len + 1);
    if (!z->name) {
      st = KILN_OOM();
      break;
    }
    memcpy(z->name, p + CENTRAL_SIZE, name_len);
    z->name[name_len] = 0;
    st = apply_zip64_extra(p + CENTRAL_SIZE + name_len, extra_len, what, &z->uncompressed_size,
                           &z->compressed_size, &local);
    if (st) break;
    /* The data follows the local header, whose name/extra lengths may differ
     * from the central copy. */
    if (local > limit || limit - local < LOCAL_SIZE || rd32(data + local) != SIG_LOCAL) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "%s: member '%s': bad local header offset", what, z->name);
      break;
    }
    uint64_t start = local + LOCAL_SIZE + rd16(data + local + 26) + rd16(data + local + 28);
    if (start > limit || z->compressed_size > limit - start) {
      st = kiln_error(KILN_INVALID_ARGUMENT, "%s: member '%s': data extends past the end of the archive",
                      what, z->name);
      break;
    }
    z->data_offset = start;
    p += CENTRAL_SIZE + name_len + extra_len + comment_len;
  }
  if (st) {
    kiln_zip_entries_free(n + 1, es);
    return st;
  }
  *out_n = n;
  *out_entries = es;
  return NULL;
}

static kiln_status_t check_member(const kiln_zip_entry *z, const char *what) {
  if (z->flags & 1) return kiln_error(KILN_UNSUPPORTED, "%s: member '%s' is encrypted", what, z->name);
  return NULL;
}

static kiln_status_t check_crc(const kiln_zip_entry *z, const char *what, const uint8_t *p, size_t n) {
  uint32_t crc = kiln_crc32(0, p, n);
  if (crc != z->crc32)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: member '%s': CRC-32 mismatch (0x%08x, expected 0x%08x)",
                      what, z->name, crc, z->crc32);
  return NULL;
}

kiln_status_t kiln_zip_stored_view(const uint8_t *data, size_t size, const kiln_zip_entry *z,
                                   const char *what, const uint8_t **out_bytes, size_t *out_size) {
  KILN_TRY(check_member(z, what));
  if (z->method != 0)
    return kiln_error(KILN_INTERNAL, "%s: member '%s' is not stored", what, z->name);
  if (z->uncompressed_size != z->compressed_size)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: stored member '%s' has different compressed (%llu) and "
                      "uncompressed (%llu) sizes", what, z->name, (unsigned long long)z->compressed_size,
                      (unsigned long long)z->uncompressed_size);
  if (z->data_offset > size || z->compressed_size > size - z->data_offset)
    return bad(what, "member out of bounds");
  KILN_TRY(check_crc(z, what, data + z->data_offset, (size_t)z->compressed_size));
  *out_bytes = data + z->data_offset;
  *out_size = (size_t)z->compressed_size;
  return NULL;
}

#ifdef KILN_HAVE_ZLIB
/* Raw deflate (no zlib header), fed in uInt-sized pieces. */
static kiln_status_t inflate_member(const uint8_t *in, size_t in_size, uint8_t *out, size_t out_size,
                                    const char *what, const char *name) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return KILN_OOM();
  zs.next_in = (Bytef *)(uintptr_t)in; /* zlib rejects NULL pointers even with nothing to move */
  zs.next_out = out;
  const size_t piece = (size_t)1 << 30;
  size_t in_done = 0, out_done = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (zs.avail_in == 0 && in_done < in_size) {
      size_t k = KILN_MIN(piece, in_size - in_done);
      zs.next_in = (Bytef *)(uintptr_t)(in + in_done);
      zs.avail_in = (uInt)k;
      in_done += k;
    }
    if (zs.avail_out == 0 && out_done < out_size) {
      size_t k = KILN_MIN(piece, out_size - out_done);
      zs.next_out = out + out_done;
      zs.avail_out = (uInt)k;
      out_done += k;
    }
    uInt in_before = zs.avail_in, out_before = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_BUF_ERROR || (rc == Z_OK && zs.avail_in == in_before && zs.avail_out == out_before)) {
      /* No progress: input exhausted or output full before the stream's end. */
      bool out_full = zs.avail_out == 0 && out_done == out_size;
      inflateEnd(&zs);
      return kiln_error(KILN_INVALID_ARGUMENT, "%s: member '%s': %s", what, name,
                        out_full ? "inflates to more bytes than its declared size"
                                 : "compressed data ends early");
    }
  }
  uint64_t total = (uint64_t)out_done - zs.avail_out;
  const char *msg = zs.msg;
  inflateEnd(&zs);
  if (rc != Z_STREAM_END)
    return kiln_error(rc == Z_MEM_ERROR ? KILN_OUT_OF_MEMORY : KILN_INVALID_ARGUMENT,
                      "%s: member '%s': corrupt deflate data (%s)", what, name, msg ? msg : "zlib error");
  if (total != out_size)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: member '%s': inflated to %llu bytes, declared %llu", what,
                      name, (unsigned long long)total, (unsigned long long)out_size);
  return NULL;
}
#endif

kiln_status_t kiln_zip_extract(const uint8_t *data, size_t size, const kiln_zip_entry *z, const char *what,
                               uint8_t **out_bytes, size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  KILN_TRY(check_member(z, what));
  if (z->method == 0) {
    const uint8_t *view;
    size_t n;
    KILN_TRY(kiln_zip_stored_view(data, size, z, what, &view, &n));
    uint8_t *copy = malloc(n ? n : 1);
    if (!copy) return KILN_OOM();
    memcpy(copy, view, n);
    *out_bytes = copy;
    *out_size = n;
    return NULL;
  }
  if (z->method != 8)
    return kiln_error(KILN_UNSUPPORTED, "%s: member '%s' uses compression method %u (only stored and deflate "
                      "are supported)", what, z->name, z->method);
#ifdef KILN_HAVE_ZLIB
  if (z->data_offset > size || z->compressed_size > size - z->data_offset)
    return bad(what, "member out of bounds");
  if (z->uncompressed_size / DEFLATE_MAX_RATIO > z->compressed_size + 1 || z->uncompressed_size > SIZE_MAX / 2)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: member '%s': declared size %llu cannot come from %llu "
                      "compressed bytes", what, z->name, (unsigned long long)z->uncompressed_size,
                      (unsigned long long)z->compressed_size);
  size_t n = (size_t)z->uncompressed_size;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf)
    return kiln_error(KILN_OUT_OF_MEMORY, "%s: member '%s': out of memory for %zu bytes", what, z->name, n);
  kiln_status_t st = inflate_member(data + z->data_offset, (size_t)z->compressed_size, buf, n, what, z->name);
  if (!st) st = check_crc(z, what, buf, n);
  if (st) {
    free(buf);
    return st;
  }
  *out_bytes = buf;
  *out_size = n;
  return NULL;
#else
  return kiln_error(KILN_UNSUPPORTED, "%s: member '%s' is deflate-compressed, but kiln was built without zlib",
                    what, z->name);
#endif
}

/* ---- writing ----------------------------------------------------------- */

typedef struct written_entry {
  char *name;
  uint64_t size, offset;
  uint32_t crc;
} written_entry;

struct kiln_zip_writer {
  FILE *f;
  char *path;
  uint64_t offset;      /* bytes written so far */
  written_entry *entries;
  int n, cap;
  uint64_t left;        /* bytes the open member still expects */
  bool in_entry;
};

/* 1980-01-01 00:00:00 in DOS format: fixed, so archives are reproducible. */
#define DOS_DATE 0x0021
#define DOS_TIME 0x0000

static void put16(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  put16(p, v & 0xffff);
  put16(p + 2, v >> 16);
}
static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)v);
  put32(p + 4, (uint32_t)(v >> 32));
}

static kiln_status_t raw_write(kiln_zip_writer *w, const void *p, size_t n) {
  if (n && fwrite(p, 1, n, w->f) != n)
    return kiln_error(KILN_IO_ERROR, "%s: write failed: %s", w->path, strerror(errno));
  w->offset += n;
  return NULL;
}

kiln_status_t kiln_zip_writer_open(const char *path, kiln_zip_writer **out) {
  *out = NULL;
  kiln_zip_writer *w = calloc(1, sizeof *w);
  if (!w) return KILN_OOM();
  w->path = kiln_strdup(path);
  if (!w->path) {
    free(w);
    return KILN_OOM();
  }
  w->f = fopen(path, "wb");
  if (!w->f) {
    kiln_status_t st = kiln_error(KILN_IO_ERROR, "%s: cannot create: %s", path, strerror(errno));
    free(w->path);
    free(w);
    return st;
  }
  *out = w;
  return NULL;
}

static bool has_non_ascii(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s >= 0x80) return true;
  return false;
}

kiln_status_t kiln_zip_writer_begin(kiln_zip_writer *w, const char *name, uint64_t size, uint32_t crc) {
  if (w->in_entry) return kiln_error(KILN_INTERNAL, "%s: previous member not finished", w->path);
  size_t name_len = strlen(name);
  if (name_len == 0 || name_len > U16_MAX_FIELD)
    return kiln_error(KILN_INVALID_ARGUMENT, "%s: member name length %zu outside 1..65535", w->path, name_len);
  if (w->n == w->cap) {
    int cap = w->cap ? w->cap * 2 : 8;
    written_entry *e = realloc(w->entries, (size_t)cap * sizeof *e);
    if (!e) return KILN_OOM();
    w->entries = e;
    w->cap = cap;
  }
  written_entry *e = &w->entries[w->n];
  e->name = kiln_strdup(name);
  if (!e->name) return KILN_OOM();
  e->size = size;
  e->offset = w->offset;
  e->crc = crc;
  w->n++;
  bool zip64 = size >= U32_MAX_FIELD;
  uint8_t h[LOCAL_SIZE + 20];
  put32(h, SIG_LOCAL);
  put16(h + 4, zip64 ? 45 : 20);
  put16(h + 6, has_non_ascii(name) ? 1u << 11 : 0); /* bit 11: name is UTF-8 */
  put16(h + 8, 0);
  put16(h + 10, DOS_TIME);
  put16(h + 12, DOS_DATE);
  put32(h + 14, crc);
  put32(h + 18, zip64 ? U32_MAX_FIELD : (uint32_t)size);
  put32(h + 22, zip64 ? U32_MAX_FIELD : (uint32_t)size);
  put16(h + 26, (uint32_t)name_len);
  put16(h + 28, zip64 ? 20 : 0);
  if (zip64) { /* local ZIP64 extra: both sizes */
    put16(h + 30, ZIP64_EXTRA_ID);
    put16(h + 32, 16);
    put64(h + 34, size);
    put64(h + 42, size);
  }
  KILN_TRY(raw_write(w, h, LOCAL_SIZE));
  KILN_TRY(raw_write(w, name, name_len));
  if (zip64) KILN_TRY(raw_write(w, h + LOCAL_SIZE, 20));
  w->left = size;
  w->in_entry = true;
  return NULL;
}

kiln_status_t kiln_zip_writer_write(kiln_zip_writer *w, const void *data, size_t n) {
  if (!w->in_entry || n > w->left)
    return kiln_error(KILN_INTERNAL, "%s: more bytes written than the member declared", w->path);
  w->left -= n;
  if (w->left == 0) w->in_entry = false;
  return raw_write(w, data, n);
}

static kiln_status_t write_directory(kiln_zip_writer *w) {
  if (w->in_entry || w->left)
    return kiln_error(KILN_INTERNAL, "%s: last member is %llu bytes short", w->path, (unsigned long long)w->left);
  uint64_t cd_start = w->offset;
  for (int i = 0; i < w->n; i++) {
    const written_entry *e = &w->entries[i];
    size_t name_len = strlen(e->name);
    bool big = e->size >= U32_MAX_FIELD, far = e->offset >= U32_MAX_FIELD;
    uint8_t h[CENTRAL_SIZE], x[4 + 24];
    size_t xn = 0;
    if (big || far) {
      xn = 4;
      if (big) {
        put64(x + xn, e->size);
        put64(x + xn + 8, e->size);
        xn += 16;
      }
      if (far) {
        put64(x + xn, e->offset);
        xn += 8;
      }
      put16(x, ZIP64_EXTRA_ID);
      put16(x + 2, (uint32_t)(xn - 4));
    }
    put32(h, SIG_CENTRAL);
    put16(h + 4, (3u << 8) | (xn ? 45 : 20)); /* made by: Unix */
    put16(h + 6, xn ? 45 : 20);
    put16(h + 8, has_non_ascii(e->name) ? 1u << 11 : 0);
    put16(h + 10, 0);
    put16(h + 12, DOS_TIME);
    put16(h + 14, DOS_DATE);
    put32(h + 16, e->crc);
    put32(h + 20, big ? U32_MAX_FIELD : (uint32_t)e->size);
    put32(h + 24, big ? U32_MAX_FIELD : (uint32_t)e->size);
    put16(h + 28, (uint32_t)name_len);
    put16(h + 30, (uint32_t)xn);
    put16(h + 32, 0);
    put16(h + 34, 0);
    put16(h + 36, 0);
    put32(h + 38, 0600u << 16); /* rw------- regular file, as Python's zipfile */
    put32(h + 42, far ? U32_MAX_FIELD : (uint32_t)e->offset);
    KILN_TRY(raw_write(w, h, CENTRAL_SIZE));
    KILN_TRY(raw_write(w, e->name, name_len));
    KILN_TRY(raw_write(w, x, xn));
  }
  uint64_t cd_size = w->offset - cd_start;
  bool zip64 = w->n >= (int)U16_MAX_FIELD || cd_start >= U32_MAX_FIELD || cd_size >= U32_MAX_FIELD;
  if (zip64) {
    uint64_t eocd64 = w->offset;
    uint8_t z[EOCD64_SIZE + LOCATOR_SIZE];
    put32(z, SIG_EOCD64);
    put64(z + 4, EOCD64_SIZE - 12);
    put16(z + 12, (3u << 8) | 45);
    put16(z + 14, 45);
    put32(z + 16, 0);
    put32(z + 20, 0);
    put64(z + 24, (uint64_t)w->n);
    put64(z + 32, (uint64_t)w->n);
    put64(z + 40, cd_size);
    put64(z + 48, cd_start);
    uint8_t *l = z + EOCD64_SIZE;
    put32(l, SIG_EOCD64_LOCATOR);
    put32(l + 4, 0);
    put64(l + 8, eocd64);
    put32(l + 16, 1);
    KILN_TRY(raw_write(w, z, sizeof z));
  }
  uint8_t e[EOCD_SIZE];
  put32(e, SIG_EOCD);
  put16(e + 4, 0);
  put16(e + 6, 0);
  put16(e + 8, zip64 ? U16_MAX_FIELD : (uint32_t)w->n);
  put16(e + 10, zip64 ? U16_MAX_FIELD : (uint32_t)w->n);
  put32(e + 12, zip64 ? U32_MAX_FIELD : (uint32_t)cd_size);
  put32(e + 16, zip64 ? U32_MAX_FIELD : (uint32_t)cd_start);
  put16(e + 20, 0);
  return raw_write(w, e, EOCD_SIZE);
}

static void writer_free(kiln_zip_writer *w) {
  for (int i = 0; i < w->n; i++) free(w->entries[i].name);
  free(w->entries);
  free(w->path);
  free(w);
}

kiln_status_t kiln_zip_writer_close(kiln_zip_writer *w) {
  kiln_status_t st = write_directory(w);
  if (fclose(w->f) != 0 && !st) st = kiln_error(KILN_IO_ERROR, "%s: close failed: %s", w->path, strerror(errno));
  if (st) remove(w->path);
  writer_free(w);
  return st;
}

void kiln_zip_writer_abort(kiln_zip_writer *w) {
  if (!w) return;
  fclose(w->f);
  remove(w->path);
  writer_free(w);
}

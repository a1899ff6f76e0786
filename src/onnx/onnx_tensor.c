/* onnx_tensor.c — TensorProto, SparseTensorProto, SequenceProto,
 * OptionalProto and TypeProto decoding.
 *
 * A tensor's element count is checked against the data the message holds
 * before anything is allocated, so a hostile file cannot ask for more
 * memory than its own bytes justify. raw_data that is aligned for its dtype
 * is borrowed from the source buffer (zero copy); otherwise it is copied in
 * chunks and the source pages behind each chunk are dropped (madvise), so a
 * model's resident size stays near one copy of its weights.
 *
 * Sub-byte types (int4, uint4, float4: two per byte; int2, uint2: four per
 * byte; low bits first, in raw_data, external data or one byte per
 * int32_data entry) are unpacked here to kiln's one element per byte (see
 * tensor/dtype.h); the packed size must match exactly, so an odd-length int4
 * tensor without its padding nibble is an error, not a short read.
 */
#include "onnx/onnx_internal.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ONNX reader assumes a little-endian host (raw_data is little-endian)"
#endif

/* Copy granularity for releasing source pages as we go. */
#define COPY_CHUNK ((size_t)4 << 20)

/* Drops the pages fully inside [p, p+n) from a file-backed private map.
 * They are clean, so a later read just faults them back in from the file. */
static void release_pages(const onnx_source *s, const uint8_t *p, size_t n) {
  if (!s->releasable || n == 0) return;
  static size_t page;
  if (!page) {
    long ps = sysconf(_SC_PAGESIZE);
    page = ps > 0 ? (size_t)ps : 4096;
  }
  uintptr_t lo = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
  uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
  if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static void copy_release(const onnx_source *s, void *dst, const uint8_t *src, size_t n) {
  for (size_t off = 0; off < n; off += COPY_CHUNK) {
    size_t k = KILN_MIN(COPY_CHUNK, n - off);
    memcpy((uint8_t *)dst + off, src + off, k);
    /* Start one page back so the page straddling the previous chunk's end
     * is dropped once it is fully copied. */
    size_t back = KILN_MIN(off, (size_t)4 << 10 << 4);
    release_pages(s, src + off - back, k + back);
  }
}

static size_t dtype_align(kiln_dtype dt) {
  if (dt == KILN_DTYPE_C64) return 4;
  if (dt == KILN_DTYPE_C128) return 8;
  return kiln_dtype_size(dt);
}

static bool dtype_known(int64_t dt) { return dt > 0 && dt <= KILN_DTYPE_LAST; }

static kiln_status_t bad_dtype(int64_t dt) { return kiln_error(KILN_INVALID_MODEL, "unknown dtype %lld", (long long)dt); }

/* Bytes of numel elements of dt in ONNX's packed form; false on overflow. */
static bool packed_bytes(kiln_dtype dt, int64_t numel, int64_t *out) {
  int bits = kiln_dtype_bits(dt);
  if (bits >= 8) return kiln_mul_i64(numel, (int64_t)kiln_dtype_size(dt), out);
  int per = 8 / bits;
  *out = numel / per + (numel % per != 0);
  return true;
}

/* Packed sub-byte data -> one element per byte (signed ints sign-extended). */
static void unpack_elements(kiln_dtype dt, const uint8_t *packed, uint8_t *out, int64_t numel) {
  int bits = kiln_dtype_bits(dt), per = 8 / bits;
  unsigned mask = (1u << bits) - 1;
  for (int64_t i = 0; i < numel; i++) {
    unsigned v = (packed[i / per] >> ((i % per) * bits)) & mask;
    if ((dt == KILN_DTYPE_I4 || dt == KILN_DTYPE_I2) && (v >> (bits - 1))) v |= ~mask; /* sign-extend */
    out[i] = (uint8_t)v;
  }
}

static bool is_sub_byte(kiln_dtype dt) { return kiln_dtype_bits(dt) < 8; }

/* ---- external data ---------------------------------------------------- */

static bool path_is_safe(const char *loc) {
  if (!loc[0] || loc[0] == '/' || loc[0] == '\\') return false;
  if (loc[1] == ':') return false; /* "C:..." */
  /* No ".." component, with either separator. */
  const char *p = loc;
  while (*p) {
    size_t n = strcspn(p, "/\\");
    if (n == 2 && p[0] == '.' && p[1] == '.') return false;
    p += n;
    if (*p) p++;
  }
  return true;
}

static kiln_status_t external_source(onnx_loader *L, const char *location, onnx_source *out) {
  if (!path_is_safe(location))
    return kiln_error(KILN_INVALID_MODEL, "external data location '%s' is absolute or leaves the model's folder",
                      location);
  if (!L->base_dir)
    return kiln_error(KILN_INVALID_ARGUMENT, "external data '%s' needs the model's folder (model loaded from memory)",
                      location);
  char *path = kiln_strfmt("%s/%s", L->base_dir, location);
  if (!path) return KILN_OOM();
  onnx_ext_file *e;
  for (e = L->ext; e; e = e->next)
    if (!strcmp(e->path, path)) break;
  if (!e) {
    e = calloc(1, sizeof *e);
    if (!e) {
      free(path);
      return KILN_OOM();
    }
    kiln_status_t st = onnx_map_file(path, &e->map);
    if (st) {
      free(e);
      free(path);
      return st;
    }
    e->path = path;
    path = NULL;
    e->next = L->ext;
    L->ext = e;
  }
  free(path);
  out->base = e->map->addr;
  out->size = e->map->size;
  out->keep = &e->map->ka;
  out->releasable = true;
  return NULL;
}

static kiln_status_t parse_decimal(const char *key, const char *s, int64_t *out) {
  if (!*s) return kiln_error(KILN_INVALID_MODEL, "external data '%s' is empty", key);
  int64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
      return kiln_error(KILN_INVALID_MODEL, "external data '%s' = '%s' is not a non-negative integer", key, s);
    v = v * 10 + (*p - '0');
  }
  *out = v;
  return NULL;
}

/* ---- TensorProto ---------------------------------------------------------- */

typedef struct tensor_msg {
  int rank;
  int64_t dims[KILN_MAX_RANK];
  bool rank_overflow;
  int64_t dtype;
  bool has_raw, has_segment, external;
  onnx_slice raw;
  char *name;
  char *ext_location;
  int64_t ext_offset, ext_length;
  bool has_ext_offset, has_ext_length;
  /* element counts of the typed fields: 4 float, 5 int32, 6 string, 7 int64, 10 double, 11 uint64 */
  int64_t n_typed[12];
} tensor_msg;

static void tensor_msg_clear(tensor_msg *m) {
  free(m->name);
  free(m->ext_location);
}

static kiln_status_t dim_cb(void *ctx, int64_t i, uint64_t raw) {
  tensor_msg *m = ctx;
  if (m->rank >= KILN_MAX_RANK) {
    m->rank_overflow = true;
    return NULL;
  }
  m->dims[m->rank++] = (int64_t)raw;
  return NULL;
}

static kiln_status_t parse_string_entry(pw_reader *pr, const pw_field *f, char **key, char **value) {
  pw_reader r = pw_sub(pr, f);
  pw_field e;
  bool more;
  *key = *value = NULL;
  for (;;) {
    kiln_status_t st = pw_next(&r, &e, &more);
    if (!st && more && (e.number == 1 || e.number == 2)) {
      st = pw_expect(&e, PW_LEN, e.number == 1 ? "key" : "value");
      if (!st) {
        char **dst = e.number == 1 ? key : value;
        free(*dst);
        *dst = NULL;
        st = pw_dup_string(&e, dst);
      }
    }
    if (st) {
      free(*key);
      free(*value);
      *key = *value = NULL;
      return st;
    }
    if (!more) break;
  }
  return NULL;
}

static kiln_status_t read_external_entry(tensor_msg *m, pw_reader *r, const pw_field *f) {
  char *key, *value;
  KILN_TRY(parse_string_entry(r, f, &key, &value));
  kiln_status_t st = NULL;
  if (!key) {
    st = kiln_error(KILN_INVALID_MODEL, "external_data entry at byte %zu has no key", f->offset);
  } else if (!strcmp(key, "location")) {
    free(m->ext_location);
    m->ext_location = value;
    value = NULL;
  } else if (!strcmp(key, "offset")) {
    st = parse_decimal(key, value ? value : "", &m->ext_offset);
    m->has_ext_offset = true;
  } else if (!strcmp(key, "length")) {
    st = parse_decimal(key, value ? value : "", &m->ext_length);
    m->has_ext_length = true;
  } /* checksum and unknown keys are ignored */
  free(key);
  free(value);
  return st;
}

static kiln_status_t scan_tensor(onnx_loader *L, onnx_slice msg, tensor_msg *m) {
  memset(m, 0, sizeof *m);
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    switch (f.number) {
      case 1: KILN_TRY(pw_for_each_elem(&r, &f, PW_VARINT, dim_cb, m)); break;
      case 2:
        KILN_TRY(pw_expect(&f, PW_VARINT, "data_type"));
        m->dtype = pw_as_i32(&f);
        break;
      case 3: m->has_segment = true; break;
      case 4: KILN_TRY(pw_count_elems(&r, &f, PW_I32, &m->n_typed[4])); break;
      case 5:
        KILN_TRY(pw_count_elems(&r, &f, PW_VARINT, &m->n_typed[5]));
        if (f.wire == PW_LEN) release_pages(&L->src, f.data, f.len);
        break;
      case 6:
        KILN_TRY(pw_expect(&f, PW_LEN, "string_data"));
        m->n_typed[6]++;
        break;
      case 7:
        KILN_TRY(pw_count_elems(&r, &f, PW_VARINT, &m->n_typed[7]));
        if (f.wire == PW_LEN) release_pages(&L->src, f.data, f.len);
        break;
      case 8:
        KILN_TRY(pw_expect(&f, PW_LEN, "name"));
        free(m->name);
        m->name = NULL;
        KILN_TRY(pw_dup_string(&f, &m->name));
        break;
      case 9:
        KILN_TRY(pw_expect(&f, PW_LEN, "raw_data"));
        m->has_raw = true;
        m->raw.p = f.data;
        m->raw.len = f.len;
        break;
      case 10: KILN_TRY(pw_count_elems(&r, &f, PW_I64, &m->n_typed[10])); break;
      case 11:
        KILN_TRY(pw_count_elems(&r, &f, PW_VARINT, &m->n_typed[11]));
        if (f.wire == PW_LEN) release_pages(&L->src, f.data, f.len);
        break;
      case 13:
        KILN_TRY(pw_expect(&f, PW_LEN, "external_data"));
        KILN_TRY(read_external_entry(m, &r, &f));
        break;
      case 14:
        KILN_TRY(pw_expect(&f, PW_VARINT, "data_location"));
        m->external = f.u == 1;
        if (f.u > 1)
          return kiln_error(KILN_INVALID_MODEL, "unknown data_location %llu at byte %zu", (unsigned long long)f.u,
                            f.offset);
        break;
      default: break; /* doc_string, unknown fields */
    }
  }
  return NULL;
}

/* Which typed field holds dtype's elements, and how many per element. */
static int typed_field_for(kiln_dtype dt, int *per_elem, int *wire) {
  *per_elem = 1;
  switch (dt) {
    case KILN_DTYPE_F32: *wire = PW_I32; return 4;
    case KILN_DTYPE_C64: *per_elem = 2; *wire = PW_I32; return 4;
    case KILN_DTYPE_I32: case KILN_DTYPE_I16: case KILN_DTYPE_I8: case KILN_DTYPE_U16: case KILN_DTYPE_U8:
    case KILN_DTYPE_BOOL: case KILN_DTYPE_F16: case KILN_DTYPE_BF16:
      *wire = PW_VARINT;
      return 5;
    case KILN_DTYPE_F8E4M3FN: case KILN_DTYPE_F8E4M3FNUZ: case KILN_DTYPE_F8E5M2: case KILN_DTYPE_F8E5M2FNUZ:
    case KILN_DTYPE_F8E8M0: case KILN_DTYPE_U4: case KILN_DTYPE_I4: case KILN_DTYPE_F4E2M1: case KILN_DTYPE_U2:
    case KILN_DTYPE_I2: /* one (packed) byte per entry */
      *wire = PW_VARINT;
      return 5;
    case KILN_DTYPE_STRING: *wire = PW_LEN; return 6;
    case KILN_DTYPE_I64: *wire = PW_VARINT; return 7;
    case KILN_DTYPE_F64: *wire = PW_I64; return 10;
    case KILN_DTYPE_C128: *per_elem = 2; *wire = PW_I64; return 10;
    case KILN_DTYPE_U32: case KILN_DTYPE_U64: *wire = PW_VARINT; return 11;
    default: *wire = PW_VARINT; return 0;
  }
}

static const char *typed_field_name(int field) {
  switch (field) {
    case 4: return "float_data";
    case 5: return "int32_data";
    case 6: return "string_data";
    case 7: return "int64_data";
    case 10: return "double_data";
    case 11: return "uint64_data";
    default: return "?";
  }
}

typedef struct store_ctx {
  void *data;
  kiln_dtype dtype;
  int64_t i, limit; /* next scalar slot (complex: two per element) */
} store_ctx;

static kiln_status_t store_cb(void *c, int64_t unused, uint64_t raw) {
  store_ctx *s = c;
  if (s->i >= s->limit) return kiln_error(KILN_INTERNAL, "typed data count changed between passes");
  int64_t i = s->i++;
  switch (s->dtype) {
    case KILN_DTYPE_F32: case KILN_DTYPE_C64: ((uint32_t *)s->data)[i] = (uint32_t)raw; break;
    case KILN_DTYPE_F64: case KILN_DTYPE_C128: ((uint64_t *)s->data)[i] = raw; break;
    case KILN_DTYPE_I32: ((int32_t *)s->data)[i] = (int32_t)(uint32_t)raw; break;
    case KILN_DTYPE_I16: ((int16_t *)s->data)[i] = (int16_t)(uint16_t)raw; break;
    case KILN_DTYPE_I8: ((int8_t *)s->data)[i] = (int8_t)(uint8_t)raw; break;
    case KILN_DTYPE_U16: case KILN_DTYPE_F16: case KILN_DTYPE_BF16: ((uint16_t *)s->data)[i] = (uint16_t)raw; break;
    case KILN_DTYPE_U8: ((uint8_t *)s->data)[i] = (uint8_t)raw; break;
    case KILN_DTYPE_F8E4M3FN: case KILN_DTYPE_F8E4M3FNUZ: case KILN_DTYPE_F8E5M2: case KILN_DTYPE_F8E5M2FNUZ:
    case KILN_DTYPE_F8E8M0: case KILN_DTYPE_U4: case KILN_DTYPE_I4: case KILN_DTYPE_F4E2M1: case KILN_DTYPE_U2:
    case KILN_DTYPE_I2:
      if (raw > 0xff) return kiln_error(KILN_INVALID_MODEL, "int32_data entry %lld = %llu does not fit a byte of %s",
                                        (long long)i, (unsigned long long)raw, kiln_dtype_name(s->dtype));
      ((uint8_t *)s->data)[i] = (uint8_t)raw;
      break;
    case KILN_DTYPE_BOOL: ((uint8_t *)s->data)[i] = raw != 0; break;
    case KILN_DTYPE_I64: case KILN_DTYPE_U64: ((uint64_t *)s->data)[i] = raw; break;
    case KILN_DTYPE_U32: ((uint32_t *)s->data)[i] = (uint32_t)raw; break;
    default: return kiln_error(KILN_INTERNAL, "no typed field for dtype %d", (int)s->dtype);
  }
  return NULL;
}

/* Tensor over bytes [p, p+nbytes) of source s: borrowed when aligned and
 * the source can be kept alive, else copied. */
static kiln_status_t tensor_from_bytes(const onnx_source *s, kiln_dtype dt, int rank, const int64_t *dims,
                                       const uint8_t *p, size_t nbytes, kiln_tensor **out) {
  if (is_sub_byte(dt)) {
    KILN_TRY(kiln_tensor_new_uninit(dt, rank, dims, out));
    unpack_elements(dt, p, (*out)->data, (*out)->numel);
    return NULL;
  }
  if (nbytes && s->keep && ((uintptr_t)p % dtype_align(dt)) == 0)
    return kiln_tensor_wrap_borrowed(dt, rank, dims, (void *)(uintptr_t)p, s->keep, out);
  KILN_TRY(kiln_tensor_new_uninit(dt, rank, dims, out));
  copy_release(s, (*out)->data, p, nbytes);
  return NULL;
}

static kiln_status_t build_tensor(onnx_loader *L, onnx_slice msg, tensor_msg *m, kiln_tensor **out) {
  *out = NULL;
  if (m->has_segment) return kiln_error(KILN_UNSUPPORTED, "segmented tensors are not supported");
  if (m->rank_overflow)
    return kiln_error(KILN_INVALID_MODEL, "rank exceeds the maximum of %d", KILN_MAX_RANK);
  if (!dtype_known(m->dtype)) return m->dtype == 0 ? kiln_error(KILN_INVALID_MODEL, "data_type is missing")
                                                   : bad_dtype(m->dtype);
  kiln_dtype dt = (kiln_dtype)m->dtype;
  char shape[256];
  for (int i = 0; i < m->rank; i++)
    if (m->dims[i] < 0)
      return kiln_error(KILN_INVALID_MODEL, "negative dimension in shape %s",
                        kiln_shape_str(m->rank, m->dims, shape, sizeof shape));
  int64_t numel = kiln_shape_numel(m->rank, m->dims), nbytes;
  if (numel < 0 || !packed_bytes(dt, numel, &nbytes))
    return kiln_error(KILN_INVALID_MODEL, "shape %s overflows", kiln_shape_str(m->rank, m->dims, shape, sizeof shape));
  kiln_shape_str(m->rank, m->dims, shape, sizeof shape);

  if (m->external) {
    if (dt == KILN_DTYPE_STRING) return kiln_error(KILN_INVALID_MODEL, "string tensors cannot use external data");
    if (!m->ext_location) return kiln_error(KILN_INVALID_MODEL, "external data without a 'location'");
    onnx_source es;
    KILN_RETURN_IF_ERROR(external_source(L, m->ext_location, &es), "external data");
    int64_t off = m->has_ext_offset ? m->ext_offset : 0;
    if (m->has_ext_length && m->ext_length != nbytes)
      return kiln_error(KILN_INVALID_MODEL, "external data length %lld does not match %s %s (%lld bytes)",
                        (long long)m->ext_length, kiln_dtype_name(dt), shape, (long long)nbytes);
    if ((uint64_t)off > es.size || (uint64_t)nbytes > es.size - (uint64_t)off)
      return kiln_error(KILN_INVALID_MODEL, "external data [%lld, +%lld) runs past the end of '%s' (%zu bytes)",
                        (long long)off, (long long)nbytes, m->ext_location, es.size);
    return tensor_from_bytes(&es, dt, m->rank, m->dims, es.base + off, (size_t)nbytes, out);
  }

  if (m->has_raw) {
    if (dt == KILN_DTYPE_STRING) return kiln_error(KILN_INVALID_MODEL, "string tensors cannot use raw_data");
    if ((uint64_t)m->raw.len != (uint64_t)nbytes)
      return kiln_error(KILN_INVALID_MODEL, "raw_data holds %zu bytes but %s %s needs %lld%s", m->raw.len,
                        kiln_dtype_name(dt), shape, (long long)nbytes,
                        !is_sub_byte(dt) ? ""
                        : kiln_dtype_bits(dt) == 4 ? " (two elements per byte, an odd count padded with a zero nibble)"
                                                   : " (four elements per byte, the last byte padded with zero bits)");
    return tensor_from_bytes(&L->src, dt, m->rank, m->dims, m->raw.p, m->raw.len, out);
  }

  int per, wire;
  int field = typed_field_for(dt, &per, &wire);
  int64_t want;
  if (is_sub_byte(dt)) {
    want = nbytes; /* one packed byte per int32_data entry */
  } else if (!field || !kiln_mul_i64(numel, per, &want))
    return kiln_error(KILN_INVALID_MODEL, "dtype %s has no typed data field", kiln_dtype_name(dt));
  if (m->n_typed[field] != want)
    return kiln_error(KILN_INVALID_MODEL, "%s holds %lld values but %s %s needs %lld", typed_field_name(field),
                      (long long)m->n_typed[field], kiln_dtype_name(dt), shape, (long long)want);
  kiln_tensor *t;
  KILN_TRY(kiln_tensor_new(dt, m->rank, m->dims, &t));
  uint8_t *packed = NULL;
  if (is_sub_byte(dt)) {
    packed = malloc(want ? (size_t)want : 1);
    if (!packed) {
      kiln_tensor_release(t);
      return KILN_OOM();
    }
  }
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  store_ctx sc = {packed ? (void *)packed : t->data, dt, 0, want};
  kiln_status_t st = NULL;
  int64_t si = 0;
  while (!st) {
    st = pw_next(&r, &f, &more);
    if (st || !more) break;
    if ((int)f.number != field) continue;
    if (dt == KILN_DTYPE_STRING) {
      if (si >= numel) {
        st = kiln_error(KILN_INTERNAL, "string count changed between passes");
        break;
      }
      st = kiln_tensor_set_string(t, si++, (const char *)f.data, f.len);
    } else {
      st = pw_for_each_elem(&r, &f, wire, store_cb, &sc);
      if (f.wire == PW_LEN) release_pages(&L->src, f.data, f.len);
    }
  }
  if (!st && packed) unpack_elements(dt, packed, t->data, numel);
  free(packed);
  if (st) {
    kiln_tensor_release(t);
    return st;
  }
  *out = t;
  return NULL;
}

kiln_status_t onnx_read_tensor(onnx_loader *L, onnx_slice msg, kiln_tensor **out, char **out_name) {
  *out = NULL;
  if (out_name) *out_name = NULL;
  tensor_msg m;
  kiln_status_t st = scan_tensor(L, msg, &m);
  if (!st) st = build_tensor(L, msg, &m, out);
  if (st) {
    if (m.name && m.name[0]) st = kiln_status_annotate(st, "tensor '%s'", m.name);
    tensor_msg_clear(&m);
    return st;
  }
  if (out_name) {
    *out_name = m.name;
    m.name = NULL;
  }
  tensor_msg_clear(&m);
  return NULL;
}

/* ---- SparseTensorProto ------------------------------------------------------ */

static kiln_status_t sparse_dim_cb(void *ctx, int64_t i, uint64_t raw) { return dim_cb(ctx, i, raw); }

kiln_status_t onnx_read_sparse_tensor(onnx_loader *L, onnx_slice msg, kiln_tensor **out, char **out_name) {
  *out = NULL;
  if (out_name) *out_name = NULL;
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  onnx_slice values = {0}, indices = {0};
  bool has_values = false, has_indices = false;
  tensor_msg shape; /* only rank/dims used */
  memset(&shape, 0, sizeof shape);
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    if (f.number == 1 || f.number == 2) {
      KILN_TRY(pw_expect(&f, PW_LEN, f.number == 1 ? "values" : "indices"));
      onnx_slice s = {f.data, f.len};
      if (f.number == 1) values = s, has_values = true;
      else indices = s, has_indices = true;
    } else if (f.number == 3) {
      KILN_TRY(pw_for_each_elem(&r, &f, PW_VARINT, sparse_dim_cb, &shape));
    }
  }
  if (!has_values) return kiln_error(KILN_INVALID_MODEL, "sparse tensor without values");
  if (shape.rank_overflow) return kiln_error(KILN_INVALID_MODEL, "sparse tensor rank exceeds %d", KILN_MAX_RANK);
  kiln_tensor *vals = NULL, *idx = NULL, *dense = NULL;
  char *name = NULL;
  kiln_status_t st = onnx_read_tensor(L, values, &vals, &name);
  if (!st && has_indices) st = onnx_read_tensor(L, indices, &idx, NULL);
  if (st) goto done;
  char s1[256];
  int64_t numel = kiln_shape_numel(shape.rank, shape.dims), bytes;
  for (int i = 0; i < shape.rank; i++)
    if (shape.dims[i] < 0) numel = -1;
  /* The dense form is not backed by file bytes: cap it. */
  int64_t cap = KILN_MAX((int64_t)1 << 20, (int64_t)L->src.size * 64);
  if (numel < 0 || !kiln_mul_i64(numel, (int64_t)kiln_dtype_size(vals->dtype), &bytes) || bytes > cap) {
    st = kiln_error(KILN_INVALID_MODEL, "sparse tensor dense shape %s is invalid or too large",
                    kiln_shape_str(shape.rank, shape.dims, s1, sizeof s1));
    goto done;
  }
  if (vals->rank != 1) {
    st = kiln_error(KILN_INVALID_MODEL, "sparse tensor values must be 1-D");
    goto done;
  }
  int64_t nnz = vals->numel;
  if (nnz && !idx) {
    st = kiln_error(KILN_INVALID_MODEL, "sparse tensor without indices");
    goto done;
  }
  bool linear = idx && idx->rank == 1;
  if (idx && (idx->dtype != KILN_DTYPE_I64 || !(linear ? idx->dims[0] == nnz
                                                      : (idx->rank == 2 && idx->dims[0] == nnz &&
                                                         idx->dims[1] == shape.rank)))) {
    st = kiln_error(KILN_INVALID_MODEL, "sparse tensor indices must be int64 [%lld] or [%lld, %d]", (long long)nnz,
                    (long long)nnz, shape.rank);
    goto done;
  }
  st = kiln_tensor_new(vals->dtype, shape.rank, shape.dims, &dense);
  if (st) goto done;
  size_t es = kiln_dtype_size(vals->dtype);
  for (int64_t k = 0; k < nnz; k++) {
    const int64_t *ix = (const int64_t *)idx->data;
    int64_t pos = 0;
    if (linear) {
      pos = ix[k];
      if (pos < 0 || pos >= numel) pos = -1;
    } else {
      for (int d = 0; d < shape.rank && pos >= 0; d++) {
        int64_t c = ix[k * shape.rank + d];
        pos = (c < 0 || c >= shape.dims[d]) ? -1 : pos * shape.dims[d] + c;
      }
    }
    if (pos < 0) {
      st = kiln_error(KILN_INVALID_MODEL, "sparse tensor index %lld is out of range", (long long)k);
      goto done;
    }
    if (vals->dtype == KILN_DTYPE_STRING) {
      const char *sv = ((char **)vals->data)[k];
      st = kiln_tensor_set_string(dense, pos, sv ? sv : "", sv ? strlen(sv) : 0);
      if (st) goto done;
    } else {
      memcpy((uint8_t *)dense->data + (size_t)pos * es, (const uint8_t *)vals->data + (size_t)k * es, es);
    }
  }
  *out = dense;
  dense = NULL;
  if (out_name) {
    *out_name = name;
    name = NULL;
  }
done:
  kiln_tensor_release(vals);
  kiln_tensor_release(idx);
  kiln_tensor_release(dense);
  free(name);
  return st;
}

/* ---- SequenceProto / OptionalProto -------------------------------------- */

enum { ELEM_UNDEFINED = 0, ELEM_TENSOR = 1, ELEM_SPARSE = 2, ELEM_SEQUENCE = 3, ELEM_MAP = 4, ELEM_OPTIONAL = 5 };

kiln_status_t onnx_read_sequence(onnx_loader *L, onnx_slice msg, kiln_value **out) {
  *out = NULL;
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  int64_t elem_type = 0, n_items = 0, n_other = 0;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    if (f.number == 2) {
      KILN_TRY(pw_expect(&f, PW_VARINT, "elem_type"));
      elem_type = pw_as_i32(&f);
    } else if (f.number == 3 || f.number == 4) {
      KILN_TRY(pw_expect(&f, PW_LEN, f.number == 3 ? "tensor_values" : "sparse_tensor_values"));
      n_items++;
    } else if (f.number >= 5 && f.number <= 7) {
      n_other++;
    }
  }
  if (n_other || elem_type == ELEM_SEQUENCE || elem_type == ELEM_MAP || elem_type == ELEM_OPTIONAL)
    return kiln_error(KILN_UNSUPPORTED, "sequences of sequences, maps or optionals are not supported");
  if (elem_type != ELEM_UNDEFINED && elem_type != ELEM_TENSOR && elem_type != ELEM_SPARSE)
    return kiln_error(KILN_INVALID_MODEL, "unknown sequence elem_type %lld", (long long)elem_type);
  kiln_value *v;
  KILN_TRY(kiln_value_new_sequence(KILN_DTYPE_UNDEFINED, &v));
  if (n_items) {
    v->items = calloc((size_t)n_items, sizeof *v->items);
    if (!v->items) {
      kiln_value_free(v);
      return KILN_OOM();
    }
  }
  r = pw_reader_make(L->src.base, msg.p, msg.len);
  kiln_status_t st = NULL;
  while (!st) {
    st = pw_next(&r, &f, &more);
    if (st || !more) break;
    if (f.number != 3 && f.number != 4) continue;
    if (v->n_items >= n_items) {
      st = kiln_error(KILN_INTERNAL, "sequence item count changed between passes");
      break;
    }
    onnx_slice s = {f.data, f.len};
    kiln_tensor *t = NULL;
    st = f.number == 3 ? onnx_read_tensor(L, s, &t, NULL) : onnx_read_sparse_tensor(L, s, &t, NULL);
    if (st) {
      st = kiln_status_annotate(st, "sequence item %d", v->n_items);
      break;
    }
    v->items[v->n_items++] = t;
    if (v->n_items == 1) {
      v->elem_dtype = t->dtype;
    } else if (t->dtype != v->elem_dtype) {
      st = kiln_error(KILN_INVALID_MODEL, "sequence item %d is %s but item 0 is %s", v->n_items - 1,
                      kiln_dtype_name(t->dtype), kiln_dtype_name(v->elem_dtype));
    }
  }
  if (st) {
    kiln_value_free(v);
    return st;
  }
  *out = v;
  return NULL;
}

kiln_status_t onnx_read_optional(onnx_loader *L, onnx_slice msg, kiln_value **out) {
  *out = NULL;
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  int64_t elem_type = 0;
  onnx_slice tensor = {0}, sparse = {0}, seq = {0};
  bool has_tensor = false, has_sparse = false, has_seq = false, has_other = false;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    onnx_slice s = {f.data, f.len};
    switch (f.number) {
      case 2:
        KILN_TRY(pw_expect(&f, PW_VARINT, "elem_type"));
        elem_type = pw_as_i32(&f);
        break;
      case 3: KILN_TRY(pw_expect(&f, PW_LEN, "tensor_value")); tensor = s, has_tensor = true; break;
      case 4: KILN_TRY(pw_expect(&f, PW_LEN, "sparse_tensor_value")); sparse = s, has_sparse = true; break;
      case 5: KILN_TRY(pw_expect(&f, PW_LEN, "sequence_value")); seq = s, has_seq = true; break;
      case 6: case 7: has_other = true; break;
      default: break;
    }
  }
  switch (elem_type) {
    case ELEM_UNDEFINED:
      if (has_tensor || has_sparse || has_seq || has_other)
        return kiln_error(KILN_INVALID_MODEL, "optional has a value but no elem_type");
      return kiln_value_new_none(KILN_DTYPE_UNDEFINED, false, out);
    case ELEM_TENSOR:
    case ELEM_SPARSE: {
      bool present = elem_type == ELEM_TENSOR ? has_tensor : has_sparse;
      if (!present) return kiln_value_new_none(KILN_DTYPE_UNDEFINED, false, out);
      kiln_tensor *t;
      if (elem_type == ELEM_TENSOR)
        KILN_RETURN_IF_ERROR(onnx_read_tensor(L, tensor, &t, NULL), "optional tensor_value");
      else
        KILN_RETURN_IF_ERROR(onnx_read_sparse_tensor(L, sparse, &t, NULL), "optional sparse_tensor_value");
      return kiln_value_from_tensor(t, out);
    }
    case ELEM_SEQUENCE:
      if (!has_seq) return kiln_value_new_none(KILN_DTYPE_UNDEFINED, true, out);
      KILN_RETURN_IF_ERROR(onnx_read_sequence(L, seq, out), "optional sequence_value");
      return NULL;
    case ELEM_MAP:
    case ELEM_OPTIONAL: return kiln_error(KILN_UNSUPPORTED, "optionals of maps or optionals are not supported");
    default: return kiln_error(KILN_INVALID_MODEL, "unknown optional elem_type %lld", (long long)elem_type);
  }
}

/* ---- TypeProto ------------------------------------------------------------ */

static void type_reset(kiln_type *t) {
  kiln_type_clear(t);
  memset(t, 0, sizeof *t);
  t->kind = KILN_TYPE_UNKNOWN;
  t->rank = -1;
  for (int i = 0; i < KILN_MAX_RANK; i++) t->dims[i] = -1;
}

static kiln_status_t read_dimension(onnx_loader *L, pw_reader *pr, const pw_field *df, kiln_type *t, int i) {
  pw_reader r = pw_sub(pr, df);
  pw_field f;
  bool more;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    if (f.number == 1) {
      KILN_TRY(pw_expect(&f, PW_VARINT, "dim_value"));
      int64_t v = pw_as_i64(&f);
      if (v < 0) return kiln_error(KILN_INVALID_MODEL, "negative dim_value %lld at byte %zu", (long long)v, f.offset);
      free(t->dim_params[i]);
      t->dim_params[i] = NULL;
      t->dims[i] = v;
    } else if (f.number == 2) {
      KILN_TRY(pw_expect(&f, PW_LEN, "dim_param"));
      free(t->dim_params[i]);
      t->dim_params[i] = NULL;
      KILN_TRY(pw_dup_string(&f, &t->dim_params[i]));
      t->dims[i] = -1;
    }
  }
  (void)L;
  return NULL;
}

static kiln_status_t read_tensor_type(onnx_loader *L, pw_reader *pr, const pw_field *tf, kiln_type *t) {
  pw_reader r = pw_sub(pr, tf);
  pw_field f;
  bool more;
  t->kind = KILN_TYPE_TENSOR;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    if (f.number == 1) {
      KILN_TRY(pw_expect(&f, PW_VARINT, "elem_type"));
      int64_t dt = pw_as_i32(&f);
      if (dt != 0 && !dtype_known(dt)) return bad_dtype(dt);
      t->dtype = (kiln_dtype)dt;
    } else if (f.number == 2) {
      KILN_TRY(pw_expect(&f, PW_LEN, "shape"));
      for (int i = 0; i < KILN_MAX_RANK; i++) {
        free(t->dim_params[i]);
        t->dim_params[i] = NULL;
        t->dims[i] = -1;
      }
      t->rank = 0;
      pw_reader sr = pw_sub(&r, &f);
      pw_field d;
      for (;;) {
        KILN_TRY(pw_next(&sr, &d, &more));
        if (!more) break;
        if (d.number != 1) continue;
        KILN_TRY(pw_expect(&d, PW_LEN, "dim"));
        if (t->rank >= KILN_MAX_RANK)
          return kiln_error(KILN_INVALID_MODEL, "shape at byte %zu has more than %d dims", f.offset, KILN_MAX_RANK);
        KILN_TRY(read_dimension(L, &sr, &d, t, t->rank));
        t->rank++;
      }
    }
  }
  return NULL;
}

/* Reads the TypeProto held by field `ef` (elem_type of sequence/optional). */
static kiln_status_t read_inner(onnx_loader *L, pw_reader *pr, const pw_field *of, kiln_type *inner,
                                const char **unsupported, int depth, bool *has_inner) {
  pw_reader r = pw_sub(pr, of);
  pw_field f;
  bool more;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    if (f.number != 1) continue;
    KILN_TRY(pw_expect(&f, PW_LEN, "elem_type"));
    onnx_slice s = {f.data, f.len};
    KILN_TRY(onnx_read_type(L, s, inner, unsupported, depth + 1));
    *has_inner = true;
  }
  return NULL;
}

kiln_status_t onnx_read_type(onnx_loader *L, onnx_slice msg, kiln_type *t, const char **unsupported, int depth) {
  type_reset(t);
  if (depth > ONNX_MAX_DEPTH) return kiln_error(KILN_INVALID_MODEL, "types nested deeper than %d", ONNX_MAX_DEPTH);
  pw_reader r = pw_reader_make(L->src.base, msg.p, msg.len);
  pw_field f;
  bool more;
  for (;;) {
    KILN_TRY(pw_next(&r, &f, &more));
    if (!more) break;
    switch (f.number) {
      case 1:
        KILN_TRY(pw_expect(&f, PW_LEN, "tensor_type"));
        type_reset(t);
        *unsupported = NULL;
        KILN_TRY(read_tensor_type(L, &r, &f, t));
        break;
      case 4:
      case 9: {
        KILN_TRY(pw_expect(&f, PW_LEN, f.number == 4 ? "sequence_type" : "optional_type"));
        type_reset(t);
        *unsupported = NULL;
        kiln_type inner;
        memset(&inner, 0, sizeof inner);
        type_reset(&inner);
        bool has_inner = false;
        kiln_status_t st = read_inner(L, &r, &f, &inner, unsupported, depth, &has_inner);
        if (st) {
          kiln_type_clear(&inner);
          return st;
        }
        if (*unsupported) {
          kiln_type_clear(&inner);
          break;
        }
        if (f.number == 4) {
          if (inner.kind == KILN_TYPE_TENSOR || inner.kind == KILN_TYPE_UNKNOWN) {
            kiln_type_copy(t, &inner);
            t->kind = KILN_TYPE_SEQUENCE;
          } else {
            *unsupported = "sequences of sequences or optionals";
          }
        } else {
          if (inner.kind == KILN_TYPE_TENSOR || inner.kind == KILN_TYPE_SEQUENCE) {
            kiln_type_copy(t, &inner);
            t->kind = inner.kind == KILN_TYPE_TENSOR ? KILN_TYPE_OPTIONAL_TENSOR : KILN_TYPE_OPTIONAL_SEQUENCE;
          } else if (!has_inner) {
            t->kind = KILN_TYPE_OPTIONAL_TENSOR;
          } else {
            *unsupported = "optionals of optionals";
          }
        }
        kiln_type_clear(&inner);
        break;
      }
      case 5:
        type_reset(t);
        *unsupported = "map types";
        break;
      case 8:
        type_reset(t);
        *unsupported = "sparse tensor types";
        break;
      default: break; /* denotation */
    }
  }
  return NULL;
}

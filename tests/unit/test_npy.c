/* test_npy.c — .npy/.npz reading and writing.
 *
 * 1. Round trips of every dtype and several shapes (buffer, file, npz).
 * 2. External truth: files written by NumPy (big-endian, Fortran order, 0-d,
 *    zero-size, strings, versions 2.0/3.0, npz stored and compressed) read
 *    and compared with raw dumps NumPy also writes; files kiln writes are
 *    checked by NumPy; np.save's bytes must equal kiln's byte for byte.
 *    Needs /usr/bin/python3 (or $KILN_PYTHON) with numpy: without it the test
 *    prints SKIP and fails only when KILN_REQUIRE_PYTHON=1.
 * 3. Hostile input: truncation at every offset, flipped bytes, crafted
 *    headers: always an error (or a sane tensor), never a crash.
 */
#include "tensor/npy.h"
#include "tensor/zip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures = 0;

#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (!(cond)) {                                              \
      failures++;                                               \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                             \
      fprintf(stderr, "\n");                                    \
    }                                                           \
  } while (0)

/* Expects success; on failure prints the message and counts it. */
static bool ok(kiln_status_t st, const char *what) {
  if (!st) return true;
  failures++;
  fprintf(stderr, "FAIL %s: %s\n", what, kiln_status_message(st));
  kiln_status_free(st);
  return false;
}

/* Expects an error with `code`, whose message contains `needle` (if any). */
static void expect_error(kiln_status_t st, kiln_status_code code, const char *needle, const char *what) {
  if (!st) {
    failures++;
    fprintf(stderr, "FAIL %s: expected an error, got success\n", what);
    return;
  }
  const char *msg = kiln_status_message(st);
  CHECK(kiln_status_code_of(st) == code, "%s: code %d, expected %d (%s)", what, (int)kiln_status_code_of(st),
        (int)code, msg);
  CHECK(!needle || strstr(msg, needle), "%s: message '%s' lacks '%s'", what, msg, needle);
  kiln_status_free(st);
}

static char tmpdir[256];

static char *tmp_path(const char *name) {
  static char buf[8][512];
  static int k = 0;
  char *p = buf[k++ % 8];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

static bool read_all(const char *path, uint8_t **out, size_t *out_n) {
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
  size_t got = n > 0 ? fread(b, 1, (size_t)n, f) : 0;
  fclose(f);
  *out = b;
  *out_n = got;
  return true;
}

static bool write_all(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return false;
  bool good = fwrite(p, 1, n, f) == n;
  return fclose(f) == 0 && good;
}

/* ---- tensors ---------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static const char *const sample_strings[] = {"", "a", "hello", "h\xc3\xa9llo", "\xe6\x97\xa5\xe6\x9c\xac",
                                             "\xf0\x9f\x98\x80 smile", "tab\there"};

static kiln_tensor *make_tensor(kiln_dtype dt, int rank, const int64_t *dims) {
  kiln_tensor *t = NULL;
  if (!ok(kiln_tensor_new(dt, rank, dims, &t), "kiln_tensor_new")) return NULL;
  for (int64_t i = 0; i < t->numel; i++) {
    if (dt == KILN_DTYPE_STRING) {
      const char *s = sample_strings[rnd() % KILN_ARRAY_SIZE(sample_strings)];
      if (!ok(kiln_tensor_set_string(t, i, s, strlen(s)), "set_string")) break;
    } else if (dt == KILN_DTYPE_BOOL) {
      ((uint8_t *)t->data)[i] = (uint8_t)(rnd() & 1);
    } else {
      uint8_t *b = (uint8_t *)t->data + (size_t)i * kiln_dtype_size(dt);
      for (size_t k = 0; k < kiln_dtype_size(dt); k++) b[k] = (uint8_t)rnd();
    }
  }
  return t;
}

static bool tensors_equal(const kiln_tensor *a, const kiln_tensor *b, const char *what) {
  char sa[128], sb[128];
  if (a->dtype != b->dtype || !kiln_shape_equal(a->rank, a->dims, b->rank, b->dims)) {
    CHECK(0, "%s: got %s %s, expected %s %s", what, kiln_dtype_name(b->dtype),
          kiln_shape_str(b->rank, b->dims, sb, sizeof sb), kiln_dtype_name(a->dtype),
          kiln_shape_str(a->rank, a->dims, sa, sizeof sa));
    return false;
  }
  if (a->dtype == KILN_DTYPE_STRING) {
    for (int64_t i = 0; i < a->numel; i++) {
      const char *x = ((char **)a->data)[i], *y = ((char **)b->data)[i];
      if (strcmp(x ? x : "", y ? y : "")) {
        CHECK(0, "%s: string %lld differs: '%s' vs '%s'", what, (long long)i, x ? x : "", y ? y : "");
        return false;
      }
    }
    return true;
  }
  size_t n = kiln_tensor_nbytes(a);
  if (n && memcmp(a->data, b->data, n)) {
    CHECK(0, "%s: data differs", what);
    return false;
  }
  return true;
}

/* ---- 1. round trips --------------------------------------------------------------- */

static void test_round_trips(void) {
  static const int64_t shapes[][4] = {{0}, {1, 7}, {2, 0, 3}, {3, 2, 3, 4}, {1, 1}};
  int n_checked = 0;
  for (int dt = 1; dt <= KILN_DTYPE_BF16; dt++) {
    for (size_t s = 0; s < KILN_ARRAY_SIZE(shapes); s++) {
      int rank = (int)shapes[s][0];
      kiln_tensor *t = make_tensor((kiln_dtype)dt, rank, shapes[s] + 1);
      if (!t) continue;
      char what[96];
      snprintf(what, sizeof what, "round trip %s rank %d", kiln_dtype_name((kiln_dtype)dt), rank);
      void *buf = NULL;
      size_t n = 0;
      if (ok(kiln_npy_write_buffer(t, &buf, &n), what)) {
        const uint8_t *b = buf;
        size_t header_end = 10 + (size_t)(b[8] | (b[9] << 8));
        CHECK(n >= 10 && !memcmp(b, "\x93NUMPY\x01\x00", 8), "%s: bad preamble", what);
        CHECK(header_end % 64 == 0 && b[header_end - 1] == '\n', "%s: header not padded to 64", what);
        kiln_tensor *back = NULL;
        if (ok(kiln_npy_read_buffer(buf, n, &back), what)) tensors_equal(t, back, what);
        kiln_tensor_release(back);
        free(buf);
      }
      /* Through a file and the public API. */
      const char *path = tmp_path("rt.npy");
      if (ok(kiln_tensor_save_npy(t, path), what)) {
        kiln_tensor *back = NULL;
        if (ok(kiln_tensor_load_npy(path, &back), what)) tensors_equal(t, back, what);
        kiln_tensor_release(back);
      }
      kiln_tensor_release(t);
      n_checked++;
    }
  }
  printf("round trips: %d dtype/shape cases\n", n_checked);

  /* npz: every dtype in one archive. */
  kiln_tensor *ts[KILN_DTYPE_BF16];
  char names[KILN_DTYPE_BF16][32];
  const char *name_ptrs[KILN_DTYPE_BF16];
  int n = 0;
  for (int dt = 1; dt <= KILN_DTYPE_BF16; dt++) {
    int64_t dims[2] = {3, dt % 4};
    ts[n] = make_tensor((kiln_dtype)dt, dt % 3, dims);
    if (!ts[n]) continue;
    snprintf(names[n], sizeof names[n], "arr_%s", kiln_dtype_name((kiln_dtype)dt));
    name_ptrs[n] = names[n];
    n++;
  }
  const char *path = tmp_path("rt.npz");
  if (ok(kiln_npz_write_file(path, n, name_ptrs, (const kiln_tensor *const *)ts), "npz write")) {
    int m = 0;
    char **rn = NULL;
    kiln_tensor **rt = NULL;
    if (ok(kiln_npz_read_file(path, &m, &rn, &rt), "npz read")) {
      CHECK(m == n, "npz: %d arrays back, wrote %d", m, n);
      for (int i = 0; i < m && i < n; i++) {
        CHECK(!strcmp(rn[i], names[i]), "npz: name '%s', expected '%s'", rn[i], names[i]);
        tensors_equal(ts[i], rt[i], names[i]);
      }
      kiln_npz_free(m, rn, rt);
    }
  }
  for (int i = 0; i < n; i++) kiln_tensor_release(ts[i]);

  /* Empty archive, and argument errors. */
  if (ok(kiln_npz_write_file(path, 0, NULL, NULL), "empty npz")) {
    int m = -1;
    char **rn = NULL;
    kiln_tensor **rt = NULL;
    if (ok(kiln_npz_read_file(path, &m, &rn, &rt), "empty npz read")) CHECK(m == 0, "empty npz has %d", m);
    kiln_npz_free(m, rn, rt);
  }
  int64_t d1 = 2;
  kiln_tensor *a = make_tensor(KILN_DTYPE_F32, 1, &d1);
  const kiln_tensor *two[2] = {a, a};
  const char *dup[2] = {"x", "x"};
  expect_error(kiln_npz_write_file(path, 2, dup, two), KILN_INVALID_ARGUMENT, "duplicate", "npz duplicate names");
  kiln_tensor *bad_utf8 = make_tensor(KILN_DTYPE_STRING, 1, &d1);
  ok(kiln_tensor_set_string(bad_utf8, 1, "\xff\xfe", 2), "set_string");
  void *buf;
  size_t bn;
  expect_error(kiln_npy_write_buffer(bad_utf8, &buf, &bn), KILN_INVALID_ARGUMENT, "UTF-8", "invalid UTF-8 write");
  expect_error(kiln_npy_write_file("/nonexistent-dir/x.npy", a), KILN_IO_ERROR, "/nonexistent-dir/x.npy",
               "write to a missing folder");
  kiln_tensor *none = NULL;
  expect_error(kiln_npy_read_file(tmp_path("missing.npy"), &none), KILN_IO_ERROR, "missing.npy", "missing file");
  kiln_tensor_release(bad_utf8);
  kiln_tensor_release(a);
}

/* ---- 2. NumPy ---------------------------------------------------------------------- */

static const char *numpy_script =
    "import os, sys\n"
    "import numpy as np\n"
    "d = sys.argv[1]\n"
    "manifest = open(os.path.join(d, 'manifest.txt'), 'w')\n"
    "def kiln_name(dt):\n"
    "    if dt.kind in 'US': return 'string'\n"
    "    if dt.kind == 'b': return 'bool'\n"
    "    if dt.kind == 'c': return 'c%d' % (dt.itemsize * 8)\n"
    "    return '%s%d' % (dt.kind, dt.itemsize * 8)\n"
    "def dump(stem, a):\n"
    "    if a.dtype.kind in 'US':\n"
    "        items = [s.encode('utf-8') if a.dtype.kind == 'U' else s for s in a.ravel(order='C')]\n"
    "        open(os.path.join(d, stem + '.txt'), 'wb').write(b'\\n'.join(items))\n"
    "    else:\n"
    "        raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder('<')).tobytes()\n"
    "        open(os.path.join(d, stem + '.bin'), 'wb').write(raw)\n"
    "def line(kind, stem, a):\n"
    "    manifest.write(' '.join([kind, stem, kiln_name(a.dtype), str(a.ndim)] + [str(x) for x in a.shape]) + '\\n')\n"
    "def save(stem, a, version=None):\n"
    "    p = os.path.join(d, stem + '.npy')\n"
    "    if version is None:\n"
    "        np.save(p, a)\n"
    "    else:\n"
    "        with open(p, 'wb') as f: np.lib.format.write_array(f, a, version=version)\n"
    "    dump(stem, a); line('npy', stem, a)\n"
    "def savez(stem, compressed, **arrays):\n"
    "    (np.savez_compressed if compressed else np.savez)(os.path.join(d, stem + '.npz'), **arrays)\n"
    "    for k, a in arrays.items():\n"
    "        dump(stem + '.' + k, a); line('npz', stem + '.' + k, a)\n"
    "rng = np.random.default_rng(0)\n"
    "save('be_f4', np.arange(6, dtype='>f4').reshape(2, 3) * 1.5 - 2)\n"
    "save('be_f8', np.array([[np.pi, -1e300], [np.nan, -0.0]], dtype='>f8'))\n"
    "save('le_f8_fortran', np.asfortranarray(np.arange(24, dtype='<f8').reshape(2, 3, 4) / 7))\n"
    "save('be_i2_fortran', np.asfortranarray(np.arange(12, dtype='>i2').reshape(3, 4) - 5))\n"
    "save('be_i4', np.array([-2**31, 1, 2**31 - 1], dtype='>i4'))\n"
    "save('be_i8_fortran', np.asfortranarray(rng.integers(-2**62, 2**62, (4, 3, 2)).astype('>i8')))\n"
    "save('scalar_i8', np.array(-7, dtype='<i8'))\n"
    "save('scalar_be_f4', np.array(2.5, dtype='>f4'))\n"
    "save('empty_f4', np.zeros((0, 3), dtype='<f4'))\n"
    "save('empty_fortran', np.asfortranarray(np.zeros((2, 0, 3), dtype='>i4')))\n"
    "save('f16', np.array([0.5, -2, 65504, 1e-7, np.inf], dtype='<f2'))\n"
    "save('be_f16', np.array([[0.5, -2], [3, 1e-3]], dtype='>f2'))\n"
    "save('bool', np.array([[True, False, True], [False, False, True]]))\n"
    "save('bool_fortran', np.asfortranarray(rng.random((3, 5)) > 0.5))\n"
    "save('be_u16', np.array([1, 256, 65535], dtype='>u2'))\n"
    "save('le_u16', np.array([[1, 2], [3, 65535]], dtype='<u2'))\n"
    "save('be_u32', np.array([1, 2**32 - 1], dtype='>u4'))\n"
    "save('be_u64', np.array([2**64 - 1, 1, 2**40], dtype='>u8'))\n"
    "save('be_c8', np.array([1 + 2j, -3.5j], dtype='>c8'))\n"
    "save('c16_fortran', np.asfortranarray(np.array([[1 + 2j, 3], [-3.5j, 4j]], dtype='<c16')))\n"
    "save('i1', np.array([-128, 0, 127], dtype='i1'))\n"
    "save('u1_fortran', np.asfortranarray(np.arange(30, dtype='u1').reshape(5, 6)))\n"
    "save('rank6', rng.standard_normal((2, 1, 3, 1, 2, 2)).astype('<f4'))\n"
    "save('rank6_fortran', np.asfortranarray(rng.standard_normal((2, 1, 3, 1, 2, 2)).astype('>f4')))\n"
    "save('str_u', np.array([['a', 'h\\u00e9llo'], ['', '\\u65e5\\u672c\\u8a9e']]))\n"
    "save('str_u_be', np.array(['xy', 'z', '\\U0001f600'], dtype='>U3'))\n"
    "save('str_u_fortran', np.asfortranarray(np.array([['a', 'bb', 'ccc'], ['dddd', '', 'f']])))\n"
    "save('str_s', np.array([b'ab', b'', b'xyz']))\n"
    "save('v2', np.arange(5, dtype='<i4'), version=(2, 0))\n"
    "save('v3', np.arange(4, dtype='<f4').reshape(2, 2), version=(3, 0))\n"
    "savez('stored', False, a=np.arange(6, dtype='f4').reshape(2, 3), b=np.array(True), c=np.zeros((0,), 'i8'))\n"
    "savez('compressed', True, x=np.arange(1000, dtype='<f8').reshape(10, 100),\n"
    "      y=np.asfortranarray(np.arange(12, dtype='>i4').reshape(3, 4)), s=np.array(['p', 'qq']),\n"
    "      big=rng.standard_normal((300, 400)).astype('<f4'), e=np.zeros((0, 2), 'f2'))\n"
    "np.save(os.path.join(d, 'err_object.npy'), np.array([1, 'a'], dtype=object), allow_pickle=True)\n"
    "np.save(os.path.join(d, 'err_struct.npy'), np.zeros(3, dtype=[('a', '<f4'), ('b', '<i4')]))\n"
    "np.save(os.path.join(d, 'err_datetime.npy'), np.array(['2020-01-01'], dtype='M8[D]'))\n"
    "np.save(os.path.join(d, 'err_longdouble.npy'), np.zeros(2, dtype=np.longdouble))\n"
    "np.save(os.path.join(d, 'same_f4.npy'), np.arange(6, dtype='<f4').reshape(2, 3))\n"
    "np.save(os.path.join(d, 'same_scalar.npy'), np.array(3.25, dtype='<f8'))\n"
    "np.save(os.path.join(d, 'same_vec.npy'), np.arange(5, dtype='<i8'))\n"
    "np.save(os.path.join(d, 'same_str.npy'), np.array(['ab', 'c\\u00e9']))\n"
    "np.save(os.path.join(d, 'same_bool.npy'), np.array([[True], [False]]))\n"
    "np.save(os.path.join(d, 'same_empty.npy'), np.zeros((0, 4), '<u2'))\n"
    "np.save(os.path.join(d, 'same_rank12.npy'), np.zeros((1,) * 12, 'i1'))\n";

/* kiln writes, NumPy checks: c_out/manifest.txt lines "stem descr rank dims...". */
static const char *check_script =
    "import os, sys\n"
    "import numpy as np\n"
    "d = sys.argv[1]\n"
    "bad = 0\n"
    "def expect(stem, a):\n"
    "    global bad\n"
    "    if a.dtype.kind == 'U':\n"
    "        want = open(os.path.join(d, stem + '.txt'), 'rb').read().decode('utf-8').split('\\n')\n"
    "        got = list(a.ravel())\n"
    "        if a.size == 0: want = []\n"
    "    else:\n"
    "        want = open(os.path.join(d, stem + '.bin'), 'rb').read()\n"
    "        got = a.astype(a.dtype.newbyteorder('<')).tobytes()\n"
    "    if got != want:\n"
    "        print('MISMATCH', stem, got, want); bad += 1\n"
    "for l in open(os.path.join(d, 'manifest.txt')):\n"
    "    f = l.split()\n"
    "    stem, descr, rank, dims = f[0], f[1], int(f[2]), tuple(int(x) for x in f[3:])\n"
    "    if stem.startswith('npz.'):\n"
    "        a = np.load(os.path.join(d, 'out.npz'))[stem[4:]]\n"
    "    else:\n"
    "        a = np.load(os.path.join(d, stem + '.npy'))\n"
    "    if a.dtype.str != descr or a.shape != dims or a.ndim != rank:\n"
    "        print('WRONG TYPE', stem, a.dtype.str, a.shape, 'expected', descr, dims); bad += 1\n"
    "    else:\n"
    "        expect(stem[4:] if stem.startswith('npz.') else stem, a)\n"
    "z = np.load(os.path.join(d, 'out.npz'))\n"
    "print('numpy checked', len(open(os.path.join(d, 'manifest.txt')).readlines()), 'arrays from kiln,',\n"
    "      len(z.files), 'npz members')\n"
    "sys.exit(1 if bad else 0)\n";

static const char *numpy_descr(kiln_dtype dt) {
  switch (dt) {
    case KILN_DTYPE_F32: return "<f4";
    case KILN_DTYPE_F64: return "<f8";
    case KILN_DTYPE_F16: return "<f2";
    case KILN_DTYPE_I8: return "|i1";
    case KILN_DTYPE_U8: return "|u1";
    case KILN_DTYPE_I16: return "<i2";
    case KILN_DTYPE_U16: return "<u2";
    case KILN_DTYPE_I32: return "<i4";
    case KILN_DTYPE_U32: return "<u4";
    case KILN_DTYPE_I64: return "<i8";
    case KILN_DTYPE_U64: return "<u8";
    case KILN_DTYPE_BOOL: return "|b1";
    case KILN_DTYPE_C64: return "<c8";
    case KILN_DTYPE_C128: return "<c16";
    default: return NULL;
  }
}

/* Compares a tensor with NumPy's dump (<stem>.bin raw little-endian C order, or <stem>.txt strings). */
static void compare_with_dump(const kiln_tensor *t, const char *stem, const char *what) {
  char path[512];
  uint8_t *raw = NULL;
  size_t n = 0;
  if (t->dtype == KILN_DTYPE_STRING) {
    snprintf(path, sizeof path, "%s/%s.txt", tmpdir, stem);
    if (!read_all(path, &raw, &n)) {
      CHECK(0, "%s: no %s", what, path);
      return;
    }
    char *text = malloc(n + 1);
    memcpy(text, raw, n);
    text[n] = 0;
    char *p = text;
    for (int64_t i = 0; i < t->numel; i++) {
      char *nl = strchr(p, '\n');
      if (nl) *nl = 0;
      const char *got = ((char **)t->data)[i];
      CHECK(!strcmp(got ? got : "", p), "%s: string %lld is '%s', numpy says '%s'", what, (long long)i,
            got ? got : "", p);
      if (!nl) break;
      p = nl + 1;
    }
    free(text);
  } else {
    snprintf(path, sizeof path, "%s/%s.bin", tmpdir, stem);
    if (!read_all(path, &raw, &n)) {
      CHECK(0, "%s: no %s", what, path);
      return;
    }
    CHECK(n == kiln_tensor_nbytes(t), "%s: %zu bytes, numpy has %zu", what, kiln_tensor_nbytes(t), n);
    if (n == kiln_tensor_nbytes(t)) CHECK(!n || !memcmp(raw, t->data, n), "%s: values differ from numpy's", what);
  }
  free(raw);
}

static void check_type(const kiln_tensor *t, char **fields, int nf, const char *what) {
  CHECK(!strcmp(kiln_dtype_name(t->dtype), fields[2]), "%s: dtype %s, numpy says %s", what,
        kiln_dtype_name(t->dtype), fields[2]);
  int rank = atoi(fields[3]);
  CHECK(t->rank == rank && nf == 4 + rank, "%s: rank %d, numpy says %d", what, t->rank, rank);
  for (int i = 0; i < rank && i < t->rank && 4 + i < nf; i++)
    CHECK(t->dims[i] == atoll(fields[4 + i]), "%s: dim %d is %lld, numpy says %s", what, i, (long long)t->dims[i],
          fields[4 + i]);
}

static void test_numpy_reads(void) {
  char path[512];
  snprintf(path, sizeof path, "%s/manifest.txt", tmpdir);
  FILE *m = fopen(path, "r");
  if (!m) {
    CHECK(0, "no manifest from numpy");
    return;
  }
  char line[512];
  int n_npy = 0, n_npz = 0;
  while (fgets(line, sizeof line, m)) {
    char *fields[20];
    int nf = 0;
    for (char *tok = strtok(line, " \n"); tok && nf < 20; tok = strtok(NULL, " \n")) fields[nf++] = tok;
    if (nf < 4) continue;
    const char *stem = fields[1];
    if (!strcmp(fields[0], "npy")) {
      kiln_tensor *t = NULL;
      snprintf(path, sizeof path, "%s/%s.npy", tmpdir, stem);
      if (ok(kiln_npy_read_file(path, &t), stem)) {
        check_type(t, fields, nf, stem);
        compare_with_dump(t, stem, stem);
        /* The buffer path must agree with the file path. */
        uint8_t *bytes = NULL;
        size_t n = 0;
        kiln_tensor *t2 = NULL;
        if (read_all(path, &bytes, &n) && ok(kiln_npy_read_buffer(bytes, n, &t2), stem)) tensors_equal(t, t2, stem);
        kiln_tensor_release(t2);
        free(bytes);
      }
      kiln_tensor_release(t);
      n_npy++;
    } else { /* npz: stem is "<archive>.<member>" */
      char archive[128];
      const char *dot = strchr(stem, '.');
      snprintf(archive, sizeof archive, "%.*s", (int)(dot - stem), stem);
      if (!strcmp(archive, "compressed") && !kiln_npz_supports_deflate()) {
        printf("SKIP: %s (deflate: kiln built without zlib)\n", stem);
        continue;
      }
      snprintf(path, sizeof path, "%s/%s.npz", tmpdir, archive);
      int n = 0;
      char **names = NULL;
      kiln_tensor **ts = NULL;
      if (ok(kiln_npz_read_file(path, &n, &names, &ts), path)) {
        int found = -1;
        for (int i = 0; i < n; i++)
          if (!strcmp(names[i], dot + 1)) found = i;
        CHECK(found >= 0, "%s: member %s not found", path, dot + 1);
        if (found >= 0) {
          check_type(ts[found], fields, nf, stem);
          compare_with_dump(ts[found], stem, stem);
        }
        kiln_npz_free(n, names, ts);
      }
      n_npz++;
    }
  }
  fclose(m);
  printf("numpy files read: %d .npy, %d .npz members\n", n_npy, n_npz);
  CHECK(n_npy >= 30 && n_npz >= 5, "too few reference files (%d, %d)", n_npy, n_npz);

  static const struct {
    const char *file;
    kiln_status_code code;
    const char *needle;
  } errors[] = {
      {"err_object.npy", KILN_UNSUPPORTED, "object"},
      {"err_struct.npy", KILN_UNSUPPORTED, "structured"},
      {"err_datetime.npy", KILN_UNSUPPORTED, "M8"},
      {"err_longdouble.npy", KILN_UNSUPPORTED, "f16"},
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(errors); i++) {
    kiln_tensor *t = NULL;
    snprintf(path, sizeof path, "%s/%s", tmpdir, errors[i].file);
    expect_error(kiln_npy_read_file(path, &t), errors[i].code, errors[i].needle, errors[i].file);
    expect_error(kiln_npy_read_file(path, &t), errors[i].code, errors[i].file, errors[i].file);
  }
}

/* np.save's bytes and kiln's must be identical. */
static void test_same_bytes(void) {
  static const char *const stems[] = {"same_f4", "same_scalar", "same_vec", "same_str", "same_bool",
                                      "same_empty", "same_rank12"};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(stems); i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.npy", tmpdir, stems[i]);
    uint8_t *ref = NULL;
    size_t rn = 0;
    kiln_tensor *t = NULL;
    void *mine = NULL;
    size_t mn = 0;
    if (read_all(path, &ref, &rn) && ok(kiln_npy_read_buffer(ref, rn, &t), stems[i]) &&
        ok(kiln_npy_write_buffer(t, &mine, &mn), stems[i])) {
      CHECK(mn == rn && !memcmp(mine, ref, rn), "%s: kiln's bytes differ from np.save's (%zu vs %zu bytes)",
            stems[i], mn, rn);
    }
    free(ref);
    free(mine);
    kiln_tensor_release(t);
  }
}

/* kiln writes every dtype NumPy knows (all but bf16) + an npz; NumPy checks. */
static bool write_for_numpy(void) {
  char dir[300], path[512];
  snprintf(dir, sizeof dir, "%s/c_out", tmpdir);
  if (mkdir(dir, 0700) != 0) return false;
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *m = fopen(path, "w");
  if (!m) return false;
  kiln_tensor *npz_t[KILN_DTYPE_BF16];
  char npz_names[KILN_DTYPE_BF16][64];
  const char *npz_ptrs[KILN_DTYPE_BF16];
  int n_npz = 0;
  for (int dt = 1; dt < KILN_DTYPE_BF16; dt++) { /* numpy has no bfloat16 */
    for (int variant = 0; variant < 3; variant++) {
      static const int64_t shapes[3][4] = {{2, 3, 4}, {0}, {2, 0, 5}};
      int rank = (int)shapes[variant][0];
      kiln_tensor *t = make_tensor((kiln_dtype)dt, rank, shapes[variant] + 1);
      if (!t) continue;
      char stem[64];
      snprintf(stem, sizeof stem, "c_%s_%d", kiln_dtype_name((kiln_dtype)dt), variant);
      snprintf(path, sizeof path, "%s/%s.npy", dir, stem);
      ok(kiln_npy_write_file(path, t), stem);
      /* Expected values, in the form the NumPy side compares. */
      if (dt == KILN_DTYPE_STRING) {
        snprintf(path, sizeof path, "%s/%s.txt", dir, stem);
        FILE *f = fopen(path, "wb");
        for (int64_t i = 0; f && i < t->numel; i++) {
          const char *s = ((char **)t->data)[i];
          fprintf(f, "%s%s", i ? "\n" : "", s ? s : "");
        }
        if (f) fclose(f);
      } else {
        snprintf(path, sizeof path, "%s/%s.bin", dir, stem);
        write_all(path, t->data, kiln_tensor_nbytes(t));
      }
      char descr[32];
      if (dt == KILN_DTYPE_STRING) {
        size_t longest = 1; /* in code points: count the bytes that start one */
        for (int64_t i = 0; i < t->numel; i++) {
          size_t units = 0;
          for (const char *s = ((char **)t->data)[i]; s && *s; s++) units += ((unsigned char)*s & 0xc0) != 0x80;
          if (units > longest) longest = units;
        }
        snprintf(descr, sizeof descr, "<U%zu", longest);
      } else {
        snprintf(descr, sizeof descr, "%s", numpy_descr((kiln_dtype)dt));
      }
      /* variant 0 also goes into out.npz, listed as "npz.<stem>". */
      for (int copy = 0; copy < (variant == 0 ? 2 : 1); copy++) {
        fprintf(m, "%s%s %s %d", copy ? "npz." : "", stem, descr, rank);
        for (int i = 0; i < rank; i++) fprintf(m, " %lld", (long long)t->dims[i]);
        fprintf(m, "\n");
      }
      if (variant == 0) {
        snprintf(npz_names[n_npz], sizeof npz_names[n_npz], "%s", stem);
        npz_ptrs[n_npz] = npz_names[n_npz];
        npz_t[n_npz++] = kiln_tensor_retain(t);
      }
      kiln_tensor_release(t);
    }
  }
  fclose(m);
  snprintf(path, sizeof path, "%s/out.npz", dir);
  ok(kiln_npz_write_file(path, n_npz, npz_ptrs, (const kiln_tensor *const *)npz_t), "npz for numpy");
  for (int i = 0; i < n_npz; i++) kiln_tensor_release(npz_t[i]);
  return true;
}

/* The interpreter: /usr/bin/python3, or $KILN_PYTHON (e.g. to test the SKIP path). */
static const char *python = "/usr/bin/python3";

static bool have_numpy(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "'%s' -c 'import numpy' >/dev/null 2>&1", python);
  return system(cmd) == 0;
}

static int run_python(const char *script, const char *name, const char *arg) {
  char path[512], cmd[1200];
  snprintf(path, sizeof path, "%s/%s", tmpdir, name);
  if (!write_all(path, script, strlen(script))) return -1;
  snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", python, path, arg);
  return system(cmd);
}

static void test_numpy(void) {
  if (run_python(numpy_script, "gen.py", tmpdir) != 0) {
    CHECK(0, "the numpy generator script failed");
    return;
  }
  test_numpy_reads();
  test_same_bytes();
  char out[300];
  snprintf(out, sizeof out, "%s/c_out", tmpdir);
  if (!write_for_numpy()) {
    CHECK(0, "cannot write files for numpy");
    return;
  }
  CHECK(run_python(check_script, "check.py", out) == 0, "numpy rejected files kiln wrote (see above)");
}

/* ---- 3. hostile input ---------------------------------------------------------------- */

/* A .npy image with the given dict text and `data_len` bytes of data. */
static uint8_t *craft(int major, const char *dict, size_t data_len, size_t *out_n) {
  size_t hl = strlen(dict), pre = major == 1 ? 10 : 12;
  size_t n = pre + hl + data_len;
  uint8_t *b = calloc(n, 1);
  memcpy(b, "\x93NUMPY", 6);
  b[6] = (uint8_t)major;
  b[7] = 0;
  for (size_t k = 0; k < pre - 8; k++) b[8 + k] = (uint8_t)(hl >> (8 * k));
  memcpy(b + pre, dict, hl);
  *out_n = n;
  return b;
}

static void expect_buffer_error(const uint8_t *b, size_t n, kiln_status_code code, const char *needle,
                                const char *what) {
  /* An exact-size copy, so reads past the end trip the sanitizer. */
  uint8_t *copy = malloc(n ? n : 1);
  memcpy(copy, b, n);
  kiln_tensor *t = NULL;
  kiln_status_t st = kiln_npy_read_buffer_named(copy, n, "hostile.npy", &t);
  CHECK(!t, "%s: tensor returned with an error", what);
  expect_error(st, code, needle, what);
  free(copy);
}

static void test_crafted(void) {
  static const struct {
    const char *dict;
    size_t data;
    kiln_status_code code;
    const char *needle;
  } cases[] = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 24, KILN_OK, NULL},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", 23, KILN_INVALID_ARGUMENT, "needs 24"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000,), }", 8, KILN_INVALID_ARGUMENT, "needs"},
      {"{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0, KILN_INVALID_ARGUMENT, "too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0, KILN_INVALID_ARGUMENT, "int64"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 0, KILN_INVALID_ARGUMENT, "non-negative"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (3), }", 12, KILN_INVALID_ARGUMENT, "tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", 12, KILN_INVALID_ARGUMENT, "tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1), }", 4, KILN_UNSUPPORTED, "rank"},
      {"{'descr': '<x4', 'fortran_order': False, 'shape': (1,), }", 4, KILN_INVALID_ARGUMENT, "descr"},
      {"{'descr': '', 'fortran_order': False, 'shape': (1,), }", 4, KILN_INVALID_ARGUMENT, "descr"},
      {"{'descr': '<f4q', 'fortran_order': False, 'shape': (1,), }", 4, KILN_INVALID_ARGUMENT, "descr"},
      {"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8, KILN_UNSUPPORTED, "object"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4, KILN_UNSUPPORTED, "structured"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", 4, KILN_INVALID_ARGUMENT, "'}'"},
      {"{'descr': '<f4', 'shape': (1,), }", 4, KILN_INVALID_ARGUMENT, "fortran_order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4, KILN_INVALID_ARGUMENT, "'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, KILN_INVALID_ARGUMENT, "duplicate"},
      {"{'descr': '<f4', 'fortran_order': 'yes', 'shape': (1,)}", 4, KILN_INVALID_ARGUMENT, "True or False"},
      {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,)}", 4, KILN_INVALID_ARGUMENT, "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", 4, KILN_INVALID_ARGUMENT, "after the dictionary"},
      {"{'descr': '<f\\x34', 'fortran_order': False, 'shape': (1,)}", 4, KILN_INVALID_ARGUMENT, "escape"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", 4, KILN_INVALID_ARGUMENT, NULL},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)\0}", 4, KILN_INVALID_ARGUMENT, NULL},
      {"", 4, KILN_INVALID_ARGUMENT, "'{'"},
      {"{\"descr\": \"<U0\", \"fortran_order\": True, \"shape\": (2000000000,)}", 0, KILN_UNSUPPORTED, "zero-width"},
      {"{'descr': '<U0', 'fortran_order': True, 'shape': (2, 3)}", 0, KILN_OK, NULL},
      {"{'descr': '>c16', 'fortran_order': True, 'shape': (2L, 1L)}", 32, KILN_OK, NULL},
      {"{'descr': 'bfloat16', 'fortran_order': False, 'shape': ()}", 2, KILN_OK, NULL},
  };
  for (size_t i = 0; i < KILN_ARRAY_SIZE(cases); i++) {
    size_t n;
    uint8_t *b = craft(1, cases[i].dict, cases[i].data, &n);
    char what[64];
    snprintf(what, sizeof what, "crafted header %zu", i);
    if (cases[i].code == KILN_OK) {
      kiln_tensor *t = NULL;
      if (ok(kiln_npy_read_buffer(b, n, &t), what)) CHECK(t != NULL, "%s: no tensor", what);
      kiln_tensor_release(t);
    } else {
      expect_buffer_error(b, n, cases[i].code, cases[i].needle, what);
    }
    free(b);
  }
  /* Preamble errors. */
  size_t n;
  uint8_t *b = craft(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, &n);
  b[8] = 0xff; /* header length past the end */
  b[9] = 0xff;
  expect_buffer_error(b, n, KILN_INVALID_ARGUMENT, "past the end", "header length past end");
  b[6] = 4;
  expect_buffer_error(b, n, KILN_UNSUPPORTED, "version 4.0", "version 4");
  b[6] = 1;
  b[7] = 1;
  expect_buffer_error(b, n, KILN_UNSUPPORTED, "version 1.1", "version 1.1");
  b[0] = 'x';
  expect_buffer_error(b, n, KILN_INVALID_ARGUMENT, "magic", "bad magic");
  free(b);
  b = craft(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, &n);
  b[11] = 0x7f; /* 2 GiB header length */
  expect_buffer_error(b, n, KILN_INVALID_ARGUMENT, "limit", "v2 huge header length");
  free(b);
  expect_buffer_error((const uint8_t *)"", 0, KILN_INVALID_ARGUMENT, "magic", "empty buffer");

  /* The file path reports the same errors, naming the file. */
  b = craft(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000,), }", 8, &n);
  const char *path = tmp_path("huge.npy");
  write_all(path, b, n);
  kiln_tensor *t = NULL;
  expect_error(kiln_npy_read_file(path, &t), KILN_INVALID_ARGUMENT, "huge.npy: data is 8 bytes", "huge file");
  free(b);
  b = craft(3, "{'descr': '<i2', 'fortran_order': True, 'shape': (2, 2), }", 8, &n);
  path = tmp_path("fortran_v3.npy");
  b[n - 8] = 1, b[n - 6] = 2, b[n - 4] = 3, b[n - 2] = 4; /* column-major 1 2 3 4 -> rows [1 3] [2 4] */
  write_all(path, b, n);
  if (ok(kiln_npy_read_file(path, &t), "fortran v3")) {
    const int16_t *v = t->data;
    CHECK(v[0] == 1 && v[1] == 3 && v[2] == 2 && v[3] == 4, "fortran transpose: %d %d %d %d", v[0], v[1], v[2], v[3]);
    kiln_tensor_release(t);
  }
  free(b);
}

/* Every truncation must fail; flipped bytes must fail or give a sane tensor. */
static void mutate_npy(const uint8_t *good, size_t n, const char *what, bool files) {
  int flips_ok = 0, flips_err = 0;
  for (size_t len = 0; len < n; len++) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, good, len);
    kiln_tensor *t = NULL;
    kiln_status_t st = kiln_npy_read_buffer(copy, len, &t);
    CHECK(st && !t, "%s truncated to %zu bytes: %s", what, len, st ? "tensor returned" : "accepted");
    CHECK(!st || kiln_status_code_of(st) == KILN_INVALID_ARGUMENT, "%s truncated to %zu: code %d (%s)", what, len,
          (int)kiln_status_code_of(st), kiln_status_message(st));
    kiln_status_free(st);
    kiln_tensor_release(t);
    if (files) {
      const char *path = tmp_path("trunc.npy");
      write_all(path, copy, len);
      t = NULL;
      st = kiln_npy_read_file(path, &t);
      CHECK(st && !t && strstr(kiln_status_message(st), "trunc.npy"), "%s file truncated to %zu: %s", what, len,
            kiln_status_message(st));
      kiln_status_free(st);
      kiln_tensor_release(t);
    }
    free(copy);
  }
  static const uint8_t masks[] = {0x01, 0x02, 0x08, 0x20, 0x80, 0xff};
  for (size_t off = 0; off < n; off++) {
    for (size_t m = 0; m < KILN_ARRAY_SIZE(masks); m++) {
      uint8_t *copy = malloc(n);
      memcpy(copy, good, n);
      copy[off] ^= masks[m];
      kiln_tensor *t = NULL;
      kiln_status_t st = kiln_npy_read_buffer(copy, n, &t);
      if (st) {
        flips_err++;
        kiln_status_code c = kiln_status_code_of(st);
        CHECK(c == KILN_INVALID_ARGUMENT || c == KILN_UNSUPPORTED, "%s flip %zu^%02x: code %d (%s)", what, off,
              masks[m], (int)c, kiln_status_message(st));
        kiln_status_free(st);
      } else {
        flips_ok++;
        CHECK(t && t->numel >= 0 && (t->dtype == KILN_DTYPE_STRING || kiln_tensor_nbytes(t) <= n),
              "%s flip %zu^%02x: insane tensor", what, off, masks[m]);
        kiln_tensor_release(t);
      }
      free(copy);
    }
  }
  printf("%s: %zu truncations rejected; flips: %d rejected, %d still valid\n", what, n, flips_err, flips_ok);
}

static void mutate_npz(const uint8_t *good, size_t n, const char *what) {
  for (size_t len = 0; len < n; len++) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, good, len);
    int k = 0;
    char **names = NULL;
    kiln_tensor **ts = NULL;
    kiln_status_t st = kiln_npz_read_buffer(copy, len, &k, &names, &ts);
    CHECK(st != NULL, "%s truncated to %zu bytes accepted", what, len);
    kiln_status_free(st);
    kiln_npz_free(k, names, ts);
    free(copy);
  }
  int flips_ok = 0, flips_err = 0;
  for (size_t off = 0; off < n; off++) {
    for (int m = 0; m < 3; m++) {
      uint8_t *copy = malloc(n);
      memcpy(copy, good, n);
      copy[off] ^= (uint8_t)(m == 0 ? 0x01 : m == 1 ? 0x80 : 0xff);
      int k = 0;
      char **names = NULL;
      kiln_tensor **ts = NULL;
      kiln_status_t st = kiln_npz_read_buffer(copy, n, &k, &names, &ts);
      if (st) {
        flips_err++;
        kiln_status_code c = kiln_status_code_of(st);
        CHECK(c == KILN_INVALID_ARGUMENT || c == KILN_UNSUPPORTED, "%s flip %zu: code %d (%s)", what, off, (int)c,
              kiln_status_message(st));
        kiln_status_free(st);
      } else {
        flips_ok++;
      }
      kiln_npz_free(k, names, ts);
      free(copy);
    }
  }
  printf("%s: %zu truncations rejected; flips: %d rejected, %d still valid\n", what, n, flips_err, flips_ok);
}

static void test_mutations(bool with_numpy) {
  int64_t dims[2] = {2, 3};
  kiln_tensor *t = make_tensor(KILN_DTYPE_F32, 2, dims);
  void *buf;
  size_t n;
  if (ok(kiln_npy_write_buffer(t, &buf, &n), "write f32")) {
    mutate_npy(buf, n, "f32 [2,3]", true);
    free(buf);
  }
  kiln_tensor_release(t);
  t = make_tensor(KILN_DTYPE_STRING, 2, dims);
  if (ok(kiln_npy_write_buffer(t, &buf, &n), "write strings")) {
    mutate_npy(buf, n, "strings [2,3]", false);
    free(buf);
  }
  kiln_tensor_release(t);
  if (with_numpy) {
    static const char *const stems[] = {"be_i2_fortran", "str_u_be", "v3"};
    for (size_t i = 0; i < KILN_ARRAY_SIZE(stems); i++) {
      uint8_t *b;
      char path[512];
      snprintf(path, sizeof path, "%s/%s.npy", tmpdir, stems[i]);
      if (read_all(path, &b, &n)) {
        mutate_npy(b, n, stems[i], false);
        free(b);
      }
    }
  }
  /* npz archives: kiln's own (stored) and NumPy's (stored and deflate). */
  int64_t d1 = 3;
  kiln_tensor *a = make_tensor(KILN_DTYPE_I16, 1, &d1), *s = make_tensor(KILN_DTYPE_F64, 0, NULL);
  const kiln_tensor *ts[2] = {a, s};
  const char *names[2] = {"a", "scalar"};
  const char *path = tmp_path("m.npz");
  if (ok(kiln_npz_write_file(path, 2, names, ts), "npz for mutation")) {
    uint8_t *b;
    if (read_all(path, &b, &n)) {
      mutate_npz(b, n, "kiln npz");
      free(b);
    }
  }
  kiln_tensor_release(a);
  kiln_tensor_release(s);
  if (with_numpy) {
    uint8_t *b;
    if (read_all(tmp_path("stored.npz"), &b, &n)) {
      mutate_npz(b, n, "numpy stored npz");
      free(b);
    }
  }
  /* Not a zip at all, and a bad file. */
  int k;
  char **rn;
  kiln_tensor **rt;
  expect_error(kiln_npz_read_buffer("hello", 5, &k, &rn, &rt), KILN_INVALID_ARGUMENT, "zip", "not a zip");
  expect_error(kiln_npz_read_file(tmp_path("nope.npz"), &k, &rn, &rt), KILN_IO_ERROR, "nope.npz", "missing npz");
}

/* A compressed archive small enough to mutate exhaustively, made by NumPy. */
static void test_compressed_mutations(void) {
  if (!kiln_npz_supports_deflate()) {
    printf("SKIP: deflate mutation test (kiln built without zlib)\n");
    return;
  }
  char cmd[1200];
  snprintf(cmd, sizeof cmd,
           "'%s' -c \"import numpy as np; np.savez_compressed('%s', a=np.arange(20, dtype='<i4'), "
           "b=np.array(['xy']))\"",
           python, tmp_path("small_c.npz"));
  if (system(cmd) != 0) {
    CHECK(0, "numpy could not write small_c.npz");
    return;
  }
  uint8_t *b;
  size_t n;
  if (read_all(tmp_path("small_c.npz"), &b, &n)) {
    int k = 0;
    char **names = NULL;
    kiln_tensor **ts = NULL;
    if (ok(kiln_npz_read_buffer(b, n, &k, &names, &ts), "small_c.npz")) {
      CHECK(k == 2 && ts[0]->numel == 20 && ((int32_t *)ts[0]->data)[19] == 19, "small_c.npz contents");
      kiln_npz_free(k, names, ts);
    }
    mutate_npz(b, n, "numpy compressed npz");
    free(b);
  }
}

int main(void) {
  if (getenv("KILN_PYTHON") && getenv("KILN_PYTHON")[0]) python = getenv("KILN_PYTHON");
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln_test_npy_XXXXXX");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_round_trips();
  test_crafted();
  bool numpy = have_numpy();
  bool skipped = false;
  if (numpy) {
    test_numpy();
  } else {
    printf("SKIP: NumPy reference files (%s with numpy not available)\n", python);
    skipped = true;
  }
  test_mutations(numpy);
  if (numpy) test_compressed_mutations();
  if (!kiln_npz_supports_deflate()) printf("SKIP: deflate-compressed .npz members (kiln built without zlib)\n");

  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (failures == 0 && system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir);
  if (failures) {
    fprintf(stderr, "%d check(s) failed (files kept in %s)\n", failures, tmpdir);
    return 1;
  }
  const char *req = getenv("KILN_REQUIRE_PYTHON");
  if (skipped && req && !strcmp(req, "1")) {
    fprintf(stderr, "FAIL: KILN_REQUIRE_PYTHON=1 but numpy is not available\n");
    return 1;
  }
  printf("test_npy: all checks passed%s\n", skipped ? " (NumPy checks SKIPPED)" : "");
  return 0;
}

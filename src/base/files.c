/* files.c — see files.h. */
#include "base/files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/common.h"
#include "base/hash.h"
#include "base/strbuf.h"

#define FOOTER_SIZE 48

int kiln_make_dirs(const char *dir) {
  char *p = kiln_strdup(dir);
  if (!p) return ENOMEM;
  int err = 0;
  for (char *s = p + 1;; s++) {
    if (*s == '/' || !*s) {
      char saved = *s;
      *s = '\0';
      err = mkdir(p, 0700) && errno != EEXIST ? errno : 0;
      *s = saved;
      if (!saved) break;
    }
  }
  free(p);
  return err;
}

const char *kiln_dump_dir(const char *kind) {
  const char *dir = getenv("KILN_DUMP_DIR");
  if (dir && *dir) return dir;
  const char *dump = getenv("KILN_DUMP");
  if (!dump) return NULL;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", dump);
  for (char *save = NULL, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save))
    if (!strcmp(tok, kind) || !strcmp(tok, "all")) return "kiln_dump";
  return NULL;
}

/* ---- checked cache files ---------------------------------------------------- */

uint8_t *kiln_cache_file_read(const char *path, const char *magic, size_t *out_size, bool *out_corrupt) {
  *out_size = 0;
  *out_corrupt = false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *out_corrupt = errno != ENOENT;
    return NULL;
  }
  uint8_t *buf = NULL;
  struct stat st;
  *out_corrupt = true;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < FOOTER_SIZE || (size_t)st.st_size > KILN_CACHE_FILE_MAX) goto fail;
  size_t size = (size_t)st.st_size;
  buf = malloc(size);
  if (!buf) goto fail;
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, buf + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) goto fail;
    got += (size_t)n;
  }
  const uint8_t *footer = buf + size - FOOTER_SIZE;
  if (memcmp(footer, magic, 8) || kiln_get_le64(footer + 8) != size - FOOTER_SIZE) goto fail;
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256(buf, size - FOOTER_SIZE, digest);
  if (memcmp(digest, footer + 16, KILN_SHA256_SIZE)) goto fail;
  close(fd);
  *out_corrupt = false;
  *out_size = size - FOOTER_SIZE;
  return buf;
fail:
  free(buf);
  close(fd);
  return NULL;
}

void kiln_cache_file_write(const char *path, const char *magic, const void *data, size_t size) {
  static _Atomic unsigned g_counter;
  char *tmp = kiln_strfmt("%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&g_counter, 1));
  if (!tmp) return;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    free(tmp);
    return;
  }
  uint8_t footer[FOOTER_SIZE];
  memcpy(footer, magic, 8);
  kiln_put_le64(footer + 8, size);
  kiln_sha256(data, size, footer + 16);
  bool ok = true;
  const uint8_t *parts[2] = {data, footer};
  size_t lens[2] = {size, FOOTER_SIZE};
  for (int p = 0; p < 2 && ok; p++) {
    size_t done = 0;
    while (done < lens[p]) {
      ssize_t n = write(fd, parts[p] + done, lens[p] - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok = false;
        break;
      }
      done += (size_t)n;
    }
  }
  if (close(fd)) ok = false;
  if (!ok || rename(tmp, path)) unlink(tmp);
  free(tmp);
}


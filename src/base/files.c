/* files.c — see files.h. */
#include "base/files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/common.h"

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

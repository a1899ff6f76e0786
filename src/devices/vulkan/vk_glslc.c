/* vk_glslc.c — compiles GLSL by running the glslc program when libshaderc
 * cannot be dlopen'd (Debian 12's libshaderc.so.1 is underlinked: it needs
 * glslang and SPIRV-Tools symbols that only the glslc executable carries).
 *
 * Source and output go through files in a private temporary directory
 * (0700) made for each call and removed before it returns: a per-process
 * directory removed at exit leaked one directory per process that ended in
 * _exit (kiln_diff's forked cases: 69k of them in /tmp after a day of
 * tests). glslc's stderr goes to a file too, so no pipes can fill up.
 *
 * Environment:
 *   KILN_GLSLC=PATH   the glslc program to run (else glslc on $PATH). It must
 *                     be an executable file that answers `--version`;
 *                     otherwise the vulkan device is absent and the reason
 *                     names PATH and what went wrong. Whether glslc or
 *                     libshaderc is used: KILN_VULKAN_SHADER_COMPILER
 *                     (vk_loader.c). */
#if KILN_HAVE_VULKAN

#include "devices/vulkan/vk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/strbuf.h"

extern char **environ;

/* A new private directory for one call's files into dir[size]; false if it
 * cannot be made. The caller removes its files, then the directory. */
static bool make_call_dir(char *dir, size_t size) {
  const char *t = getenv("TMPDIR");
  snprintf(dir, size, "%s/kiln-glslc-XXXXXX", t && *t ? t : "/tmp");
  return mkdtemp(dir) != NULL;
}

/* Runs argv (argv[0] a path); stdout/stderr to files (NULL: /dev/null).
 * Returns the exit status, or -1 if it could not run or died of a signal;
 * then `why` (if not NULL) says which. */
static int run(char *const argv[], const char *out_path, const char *err_path, char *why, size_t why_size) {
  if (why && why_size) why[0] = '\0';
  posix_spawn_file_actions_t fa;
  int rc = posix_spawn_file_actions_init(&fa);
  if (rc) {
    if (why) snprintf(why, why_size, "cannot run %s: %s", argv[0], strerror(rc));
    return -1;
  }
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid;
  rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc) {
    if (why) snprintf(why, why_size, "cannot run %s: %s", argv[0], strerror(rc));
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      if (why) snprintf(why, why_size, "cannot wait for %s: %s", argv[0], strerror(errno));
      return -1;
    }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (why && WIFSIGNALED(status))
    snprintf(why, why_size, "%s was killed by signal %d (%s)", argv[0], WTERMSIG(status), strsignal(WTERMSIG(status)));
  else if (why)
    snprintf(why, why_size, "%s ended abnormally (wait status 0x%x)", argv[0], (unsigned)status);
  return -1;
}

/* Whole file (malloc'd, NUL-terminated, *out_size without the NUL) or NULL. */
static char *read_file(const char *path, size_t *out_size) {
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NULL;
  struct stat st;
  char *buf = NULL;
  if (!fstat(fd, &st) && st.st_size >= 0 && st.st_size < (64 << 20)) buf = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (buf && got < (size_t)st.st_size) {
    ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd);
  if (!buf) return NULL;
  buf[got] = '\0';
  *out_size = got;
  return buf;
}

static bool executable(const char *p) {
  struct stat st;
  return !stat(p, &st) && S_ISREG(st.st_mode) && !access(p, X_OK);
}

bool vk_glslc_find(vk_shaderc_fns *sc, char *why, size_t why_size) {
  const char *env = getenv("KILN_GLSLC");
  sc->glslc[0] = '\0';
  if (env && *env) {
    if (!executable(env)) {
      snprintf(why, why_size, "cannot run KILN_GLSLC=%.400s: %s", env,
               access(env, F_OK) ? strerror(errno) : "not an executable file");
      return false;
    }
    snprintf(sc->glslc, sizeof sc->glslc, "%s", env);
  } else {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    const char *p = path;
    while (*p && !sc->glslc[0]) {
      const char *colon = strchr(p, ':');
      size_t len = colon ? (size_t)(colon - p) : strlen(p);
      char cand[1024];
      snprintf(cand, sizeof cand, "%.*s/glslc", (int)KILN_MIN(len, 1000), len ? p : ".");
      if (executable(cand)) snprintf(sc->glslc, sizeof sc->glslc, "%s", cand);
      p = colon ? colon + 1 : p + len;
    }
    if (!sc->glslc[0]) {
      snprintf(why, why_size, "no glslc on PATH (set KILN_GLSLC)");
      return false;
    }
  }
  char dir[512];
  if (!make_call_dir(dir, sizeof dir)) {
    snprintf(why, why_size, "cannot create a temporary directory for glslc: %s", strerror(errno));
    sc->glslc[0] = '\0';
    return false;
  }
  /* `glslc --version` names shaderc, SPIRV-Tools and glslang: the cache key. */
  char out[600];
  snprintf(out, sizeof out, "%s/version.txt", dir);
  char *argv[] = {sc->glslc, "--version", NULL};
  char run_err[600];
  int rc = run(argv, out, NULL, run_err, sizeof run_err);
  size_t n = 0;
  char *text = read_file(out, &n);
  unlink(out);
  rmdir(dir);
  if (rc != 0 || !text || !n) {
    if (rc < 0) snprintf(why, why_size, "%.500s", run_err);
    else if (rc > 0) snprintf(why, why_size, "`%.400s --version` exited with status %d", sc->glslc, rc);
    else snprintf(why, why_size, "`%.400s --version` printed nothing", sc->glslc);
    free(text);
    sc->glslc[0] = '\0';
    return false;
  }
  for (char *c = text; *c; c++)
    if (*c == '\n') *c = ' ';
  snprintf(sc->glslc_version, sizeof sc->glslc_version, "%s", text);
  free(text);
  return true;
}

/* Replaces each occurrence of `from` in s by `to` (new string). */
static char *replace_all(const char *s, const char *from, const char *to) {
  kiln_strbuf sb = {0};
  size_t fl = strlen(from);
  const char *p = s;
  for (const char *q; fl && (q = strstr(p, from)); p = q + fl) kiln_strbuf_printf(&sb, "%.*s%s", (int)(q - p), p, to);
  kiln_strbuf_puts(&sb, p);
  if (sb.oom || !sb.data) {
    kiln_strbuf_free(&sb);
    return kiln_strdup(s);
  }
  return kiln_strbuf_take(&sb);
}

bool vk_glslc_compile(const vk_shaderc_fns *sc, const char *name, const char *glsl, uint32_t **out_words,
                      size_t *out_bytes, char **out_message, bool *out_tool_failed) {
  *out_tool_failed = false;
  *out_words = NULL;
  *out_bytes = 0;
  *out_message = NULL;
  char dir[512], src[600], spv[600], err[600];
  if (!make_call_dir(dir, sizeof dir)) {
    *out_message = kiln_strfmt("shader compiler: cannot create a temporary directory: %s", strerror(errno));
    *out_tool_failed = true;
    return false;
  }
  snprintf(src, sizeof src, "%s/k.comp", dir);
  snprintf(spv, sizeof spv, "%s/k.spv", dir);
  snprintf(err, sizeof err, "%s/k.err", dir);
  FILE *f = fopen(src, "wb");
  bool wrote = f && fwrite(glsl, 1, strlen(glsl), f) == strlen(glsl);
  if (f && fclose(f)) wrote = false;
  if (!wrote) {
    int e = errno;
    unlink(src);
    rmdir(dir);
    *out_message = kiln_strfmt("shader compiler: cannot write %s: %s", src, strerror(e));
    *out_tool_failed = true;
    return false;
  }
  char *argv[] = {(char *)sc->glslc, "-fshader-stage=compute", "--target-env=vulkan1.2", "--target-spv=spv1.5",
                  "-O", "-o", spv, src, NULL};
  char run_err[600];
  int rc = run(argv, NULL, err, run_err, sizeof run_err);
  size_t n = 0;
  bool ok = false;
  if (rc == 0) {
    char *bytes = read_file(spv, &n);
    if (bytes && n >= 20 && n % 4 == 0) {
      *out_words = (uint32_t *)bytes; /* malloc'd: aligned for words */
      *out_bytes = n;
      ok = true;
    } else {
      free(bytes);
      *out_message = kiln_strfmt("glslc produced no valid SPIR-V (%zu bytes)", n);
    }
  } else if (rc < 0) {
    /* Not a compile error: the program could not run or crashed. */
    *out_tool_failed = true;
    *out_message = kiln_strfmt("shader compiler: %s", run_err);
  } else {
    char *msg = read_file(err, &n);
    /* Messages name the temp file; say the kernel's name instead. */
    *out_message = msg && n ? replace_all(msg, src, name) : NULL;
    free(msg);
    if (!*out_message) *out_message = kiln_strfmt("%s exited with status %d and no message", sc->glslc, rc);
  }
  unlink(src);
  unlink(spv);
  unlink(err);
  rmdir(dir);
  return ok;
}

#else
typedef int kiln_vk_glslc_disabled; /* ISO C forbids an empty translation unit */
#endif /* KILN_HAVE_VULKAN */

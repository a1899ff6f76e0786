/* The JIT: C source → cached shared object → dlopen. See jit.h.
 *
 * compile_many, step by step:
 *   1. resolve the compiler (once per process per $KILN_CC/$CC value) and the
 *      cache directory; hash each source with the toolchain into its key;
 *   2. per distinct key: a module already loaded in this process, else a
 *      verified cache entry (dlopen), else a job for the compiler (a corrupt
 *      entry is deleted first);
 *   3. jobs run in parallel, each on a thread that posix_spawn()s the
 *      compiler into a private temporary file, appends the integrity footer
 *      and rename()s the result into place;
 *   4. the new entries are dlopen()ed; on any failure everything acquired by
 *      the call is released.
 */
#include "codegen/jit.h"

#include "base/common.h"
#include "base/cpu_features.h"
#include "base/files.h"
#include "base/hash.h"
#include "codegen/loopnest.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define JIT_KEY_VERSION "kiln-jit-2"
#define FOOTER_MAGIC "KILNJIT1"
#define FOOTER_SIZE (8 + 8 + KILN_SHA256_SIZE)
#define MAX_ENTRY_BYTES ((int64_t)1 << 30)
#define MAX_CAPTURE_BYTES (64 * 1024)
#define ERROR_LINES 20
#define STALE_TEMP_SECONDS 3600

/* Fixed compiler flags (see jit.h for the floating-point reasoning). */
static const char *const base_flags[] = {
    "-O3",
    "-march=native",
    "-std=c11",
    "-fPIC",
    "-shared",
    "-pipe",
    "-fvisibility=hidden",
    "-fno-semantic-interposition",
    "-ffp-contract=fast",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-Werror=implicit-function-declaration",
    "-DKILN_EXPORT=__attribute__((visibility(\"default\")))",
    "-Wl,-z,defs",
};

/* Process-wide state, guarded by g_lock. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct jit_compiler {
  char *spec;     /* the variable's value that selected it, "" for the PATH search */
  char *path;     /* program to execute */
  char **prefix;  /* argv prefix: program as named, then its leading arguments */
  int n_prefix;
  char *version;  /* `--version` output */
  struct jit_compiler *next;
} jit_compiler;
static jit_compiler *g_compilers; /* kept for the process lifetime */

struct kiln_jit_module {
  char key[KILN_SHA256_HEX_SIZE];
  char *path;
  void *handle;
  int refs; /* under g_lock */
  kiln_jit_module *next;
};
static kiln_jit_module *g_modules;

static kiln_jit_stats g_stats;
static char *g_private_dir;   /* fallback cache directory, if one was needed */
static pid_t g_private_owner; /* the process that created (and removes) it */
static atomic_bool g_warned_cache, g_warned_dump, g_cleaned_stale;
static atomic_uint g_temp_seq;

/* ---- small helpers ------------------------------------------------------- */

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct strbuf {
  char *data;
  size_t len, cap;
  bool oom;
} strbuf;

static void sb_append(strbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->data = p;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_append(b, s, strlen(s)); }

/* Splits on blanks into a NULL-terminated array of new strings. */
static char **split_words(const char *s, int *out_n) {
  int n = 0, cap = 4;
  char **words = malloc(sizeof *words * (size_t)cap);
  if (!words) return NULL;
  for (const char *p = s;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    if (!*p) break;
    const char *start = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
    if (n + 2 > cap) {
      cap *= 2;
      char **nw = realloc(words, sizeof *words * (size_t)cap);
      if (!nw) goto oom;
      words = nw;
    }
    words[n] = strndup(start, (size_t)(p - start));
    if (!words[n]) goto oom;
    n++;
  }
  words[n] = NULL;
  *out_n = n;
  return words;
oom:
  for (int i = 0; i < n; i++) free(words[i]);
  free(words);
  return NULL;
}

static void free_words(char **words) {
  if (!words) return;
  for (char **w = words; *w; w++) free(*w);
  free(words);
}

static bool is_executable_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

static char *find_in_path(const char *name) {
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path;;) {
    size_t n = strcspn(p, ":");
    char *candidate = n ? kiln_strfmt("%.*s/%s", (int)n, p, name) : kiln_strfmt("./%s", name);
    if (candidate && is_executable_file(candidate)) return candidate;
    free(candidate);
    if (!p[n]) break;
    p += n + 1;
  }
  return NULL;
}

static int env_int(const char *name, int dflt, int lo, int hi) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  if (end == v) return dflt;
  return x < lo ? lo : x > hi ? hi : (int)x;
}

static bool read_whole_fd(int fd, size_t size, uint8_t *buf) {
  size_t got = 0;
  while (got < size) {
    ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += (size_t)r;
  }
  return true;
}

static bool write_all(int fd, const void *data, size_t size) {
  const uint8_t *p = data;
  while (size) {
    ssize_t w = write(fd, p, size);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    size -= (size_t)w;
  }
  return true;
}

/* ---- running a program --------------------------------------------------- */

typedef struct proc_result {
  int exit_code;   /* exit status; -1 if unknown (reaped by someone else) */
  int term_signal; /* signal that ended it, or 0 */
  bool timed_out;
  char *output;    /* stdout+stderr, NUL-terminated, at most MAX_CAPTURE_BYTES kept */
  double seconds;
} proc_result;

/* Runs path with argv, stdin from /dev/null, stdout and stderr captured; in
 * its own process group so a timeout can kill the compiler's children too.
 * Fails only if the program could not be started. */
static kiln_status_t run_capture(const char *path, char *const argv[], int timeout_s, proc_result *res) {
  memset(res, 0, sizeof *res);
  res->exit_code = -1;
  double t0 = now_seconds();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC)) return kiln_error(KILN_IO_ERROR, "pipe: %s", strerror(errno));

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawnattr_init(&attr);
  /* Default dispositions and an empty mask whatever the application or the
   * calling thread set (an ignored SIGCHLD would break the compiler driver). */
  sigset_t none, dflt;
  sigemptyset(&none);
  sigfillset(&dflt);
  sigdelset(&dflt, SIGKILL);
  sigdelset(&dflt, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dflt);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  pid_t pid;
  int err = posix_spawn(&pid, path, &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (err) {
    close(fds[0]);
    return kiln_error(KILN_NOT_FOUND, "could not run %s: %s", path, strerror(err));
  }

  strbuf out = {0};
  double deadline = t0 + timeout_s;
  for (;;) {
    double left = deadline - now_seconds();
    if (left <= 0) {
      res->timed_out = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      break;
    }
    struct pollfd pfd = {fds[0], POLLIN, 0};
    int pr = poll(&pfd, 1, left > 1e6 ? 1000000000 : (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) break;
    if (pr == 0) continue;
    char chunk[4096];
    ssize_t r = read(fds[0], chunk, sizeof chunk);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) break; /* EOF: the compiler closed its output */
    if (out.len < MAX_CAPTURE_BYTES) sb_append(&out, chunk, KILN_MIN((size_t)r, MAX_CAPTURE_BYTES - out.len));
  }
  close(fds[0]);
  int status;
  pid_t w;
  while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (w == pid) {
    if (WIFEXITED(status)) res->exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) res->term_signal = WTERMSIG(status);
  }
  res->output = out.oom ? NULL : out.data;
  if (out.oom) free(out.data);
  if (!res->output) res->output = kiln_strdup("");
  res->seconds = now_seconds() - t0;
  return NULL;
}

/* First `max_lines` lines of text, indented, each occurrence of `from`
 * replaced by `to`; with a note of how many lines were left out. */
static char *excerpt_lines(const char *text, int max_lines, const char *from, const char *to) {
  strbuf b = {0};
  int lines = 0, total = 0;
  for (const char *p = text; *p;) {
    size_t n = strcspn(p, "\n");
    total++;
    if (lines < max_lines) {
      sb_puts(&b, "\n  ");
      const char *line_end = p + n;
      for (const char *q = p; q < line_end;) {
        const char *hit = from && *from ? strstr(q, from) : NULL;
        if (!hit || hit >= line_end) {
          sb_append(&b, q, (size_t)(line_end - q));
          break;
        }
        sb_append(&b, q, (size_t)(hit - q));
        sb_puts(&b, to);
        q = hit + strlen(from);
      }
      lines++;
    }
    p += n;
    if (*p == '\n') p++;
  }
  if (total > lines) {
    char note[64];
    snprintf(note, sizeof note, "\n  ... (%d more lines)", total - lines);
    sb_puts(&b, note);
  }
  if (b.oom) {
    free(b.data);
    return NULL;
  }
  return b.data ? b.data : kiln_strdup("");
}

/* ---- the compiler ---------------------------------------------------------- */

static void free_compiler(jit_compiler *c) {
  if (!c) return;
  free(c->spec);
  free(c->path);
  free_words(c->prefix);
  free(c->version);
  free(c);
}

static kiln_status_t probe_compiler(const char *spec, const char *origin, jit_compiler **out) {
  jit_compiler *c = calloc(1, sizeof *c);
  if (!c) return KILN_OOM();
  c->spec = kiln_strdup(spec);
  if (!c->spec) goto oom;
  if (*spec) {
    c->prefix = split_words(spec, &c->n_prefix);
    if (!c->prefix) goto oom;
    if (c->n_prefix == 0) {
      free_compiler(c);
      return kiln_error(KILN_INVALID_ARGUMENT, "%s is blank", origin);
    }
    const char *prog = c->prefix[0];
    c->path = strchr(prog, '/') ? (is_executable_file(prog) ? kiln_strdup(prog) : NULL) : find_in_path(prog);
    if (!c->path) {
      kiln_status_t st = kiln_error(KILN_NOT_FOUND, "C compiler '%s' (from %s) not found%s; install gcc or clang, or point "
                                                    "KILN_CC at one",
                                    prog, origin, strchr(prog, '/') ? " or not executable" : " on PATH");
      free_compiler(c);
      return st;
    }
  } else {
    static const char *const candidates[] = {"cc", "gcc", "clang"};
    for (size_t i = 0; i < KILN_ARRAY_SIZE(candidates) && !c->path; i++) {
      c->path = find_in_path(candidates[i]);
      if (c->path) {
        c->prefix = split_words(candidates[i], &c->n_prefix);
        if (!c->prefix) goto oom;
      }
    }
    if (!c->path) {
      free_compiler(c);
      return kiln_error(KILN_NOT_FOUND, "no C compiler found: none of cc, gcc, clang is on PATH (install gcc or clang, "
                                        "or set KILN_CC)");
    }
  }

  char **argv = calloc((size_t)c->n_prefix + 2, sizeof *argv);
  if (!argv) goto oom;
  for (int i = 0; i < c->n_prefix; i++) argv[i] = c->prefix[i];
  argv[c->n_prefix] = "--version";
  proc_result r;
  kiln_status_t st = run_capture(c->path, argv, 60, &r);
  free(argv);
  if (st) {
    free_compiler(c);
    return kiln_status_annotate(st, "C compiler (from %s)", origin);
  }
  if (r.exit_code != 0) {
    char *ex = excerpt_lines(r.output, 5, NULL, NULL);
    st = kiln_error(KILN_NOT_FOUND, "C compiler %s (from %s) does not run: `--version` %s%s", c->path, origin,
                    r.timed_out ? "timed out" : "failed", ex ? ex : "");
    free(ex);
    free(r.output);
    free_compiler(c);
    return st;
  }
  c->version = r.output;
  *out = c;
  return NULL;
oom:
  free_compiler(c);
  return KILN_OOM();
}

/* The compiler the environment selects now; probed once per process. */
static kiln_status_t get_compiler(const jit_compiler **out) {
  const char *kcc = getenv("KILN_CC"), *cc = getenv("CC");
  const char *spec = "", *origin = "PATH";
  if (kcc && *kcc) spec = kcc, origin = "$KILN_CC";
  else if (cc && *cc) spec = cc, origin = "$CC";
  pthread_mutex_lock(&g_lock);
  for (jit_compiler *c = g_compilers; c; c = c->next) {
    if (!strcmp(c->spec, spec)) {
      pthread_mutex_unlock(&g_lock);
      *out = c;
      return NULL;
    }
  }
  pthread_mutex_unlock(&g_lock);

  jit_compiler *c = NULL;
  KILN_TRY(probe_compiler(spec, origin, &c));
  pthread_mutex_lock(&g_lock);
  jit_compiler *existing = g_compilers;
  while (existing && strcmp(existing->spec, spec)) existing = existing->next;
  if (existing) { /* another thread probed it meanwhile */
    free_compiler(c);
    c = existing;
  } else {
    c->next = g_compilers;
    g_compilers = c;
  }
  pthread_mutex_unlock(&g_lock);
  *out = c;
  return NULL;
}

/* ---- the cache directory --------------------------------------------------- */

static void remove_private_dir(void) {
  if (!g_private_dir || getpid() != g_private_owner) return;
  DIR *d = opendir(g_private_dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
  }
  rmdir(g_private_dir);
}

/* Why `dir` cannot hold the cache, or NULL if it can (new string). */
static char *cache_dir_problem(const char *dir) {
  int err = kiln_make_dirs(dir);
  struct stat st;
  if (stat(dir, &st)) return kiln_strfmt("cannot create it: %s", strerror(err ? err : errno));
  if (!S_ISDIR(st.st_mode)) return kiln_strdup("not a directory");
  if (st.st_mode & S_IWOTH) return kiln_strdup("every user may write to it, so anyone could plant code in it");
  if (access(dir, W_OK | X_OK)) return kiln_strfmt("not writable: %s", strerror(errno));
  return NULL;
}

static char *default_cache_dir(void) {
  const char *env = getenv("KILN_CACHE_DIR");
  if (env && *env) return kiln_strdup(env);
  const char *xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return kiln_strfmt("%s/kiln", xdg);
  const char *home = getenv("HOME");
  if (home && *home) return kiln_strfmt("%s/.cache/kiln", home);
  struct passwd pw, *found = NULL;
  char buf[4096];
  if (getpwuid_r(getuid(), &pw, buf, sizeof buf, &found) == 0 && found && found->pw_dir)
    return kiln_strfmt("%s/.cache/kiln", found->pw_dir);
  return NULL;
}

/* Deletes temporaries left by processes that died mid-compile (once per
 * process, for the first cache directory used). */
static void clean_stale_temps(const char *dir) {
  if (atomic_exchange(&g_cleaned_stale, true)) return;
  DIR *d = opendir(dir);
  if (!d) return;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strstr(e->d_name, ".tmp.")) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        now - st.st_mtime > STALE_TEMP_SECONDS)
      unlinkat(dirfd(d), e->d_name, 0);
  }
  closedir(d);
}

static kiln_status_t get_cache_dir(char **out_dir) {
  char *dir = default_cache_dir();
  char *problem = dir ? cache_dir_problem(dir) : kiln_strdup("no home directory");
  if (!problem) {
    clean_stale_temps(dir);
    *out_dir = dir;
    return NULL;
  }
  pthread_mutex_lock(&g_lock);
  if (!g_private_dir) {
    const char *tmp = getenv("TMPDIR");
    char *templ = kiln_strfmt("%s/kiln-jit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (templ && mkdtemp(templ)) {
      g_private_dir = templ;
      g_private_owner = getpid();
      atexit(remove_private_dir);
    } else {
      free(templ);
    }
  }
  char *fallback = g_private_dir ? kiln_strdup(g_private_dir) : NULL;
  pthread_mutex_unlock(&g_lock);
  if (!fallback) {
    kiln_status_t st = kiln_error(KILN_IO_ERROR, "JIT cache directory '%s' is unusable (%s) and no temporary directory "
                                                 "could be created: %s",
                                  dir ? dir : "?", problem ? problem : "?", strerror(errno));
    free(dir);
    free(problem);
    return st;
  }
  if (!atomic_exchange(&g_warned_cache, true))
    fprintf(stderr,
            "kiln: warning: JIT cache directory '%s' is unusable (%s); compiling into the private directory '%s' "
            "instead (set KILN_CACHE_DIR to keep compiled kernels between runs)\n",
            dir ? dir : "(none)", problem ? problem : "?", fallback);
  free(dir);
  free(problem);
  *out_dir = fallback;
  return NULL;
}

/* ---- cache entries ------------------------------------------------------- */

typedef enum entry_state { ENTRY_MISSING, ENTRY_VALID, ENTRY_CORRUPT } entry_state;

/* An entry is valid if its footer's size and SHA-256 match the bytes before
 * it. *out_id identifies the file checked (see remove_entry). */
typedef struct file_id {
  dev_t dev;
  ino_t ino;
} file_id;

static entry_state check_entry(const char *path, file_id *out_id) {
  memset(out_id, 0, sizeof *out_id);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? ENTRY_MISSING : ENTRY_CORRUPT;
  entry_state state = ENTRY_CORRUPT;
  struct stat st;
  uint8_t *buf = NULL;
  if (fstat(fd, &st) == 0) out_id->dev = st.st_dev, out_id->ino = st.st_ino;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < FOOTER_SIZE + 64 || st.st_size > MAX_ENTRY_BYTES) goto done;
  size_t size = (size_t)st.st_size;
  buf = malloc(size);
  if (!buf || !read_whole_fd(fd, size, buf)) goto done;
  const uint8_t *footer = buf + size - FOOTER_SIZE;
  if (memcmp(footer, FOOTER_MAGIC, 8) || kiln_get_le64(footer + 8) != size - FOOTER_SIZE) goto done;
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256(buf, size - FOOTER_SIZE, digest);
  if (!memcmp(digest, footer + 16, KILN_SHA256_SIZE)) state = ENTRY_VALID;
done:
  free(buf);
  close(fd);
  return state;
}

/* Deletes a bad entry, unless another process has meanwhile renamed a fresh
 * one into its place (then the path names a different file). */
static void remove_entry(const char *path, const file_id *id) {
  struct stat st;
  if (lstat(path, &st) == 0 && st.st_dev == id->dev && st.st_ino == id->ino) unlink(path);
}

/* Appends the footer to a freshly compiled object. */
static bool seal_entry(const char *path) {
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = false;
  struct stat st;
  uint8_t *buf = NULL;
  if (fstat(fd, &st) || st.st_size <= 0 || st.st_size > MAX_ENTRY_BYTES) goto done;
  size_t size = (size_t)st.st_size;
  buf = malloc(size);
  if (!buf || !read_whole_fd(fd, size, buf)) goto done;
  uint8_t footer[FOOTER_SIZE];
  memcpy(footer, FOOTER_MAGIC, 8);
  kiln_put_le64(footer + 8, size);
  kiln_sha256(buf, size, footer + 16);
  ok = lseek(fd, 0, SEEK_END) == (off_t)size && write_all(fd, footer, sizeof footer);
done:
  free(buf);
  if (close(fd)) ok = false;
  return ok;
}

/* ---- loaded modules ---------------------------------------------------------- */

static kiln_jit_module *registry_find_retain(const char *key) {
  kiln_jit_module *found = NULL;
  pthread_mutex_lock(&g_lock);
  for (kiln_jit_module *m = g_modules; m; m = m->next) {
    if (!strcmp(m->key, key)) {
      m->refs++;
      found = m;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return found;
}

/* dlopen()s path as the module for key (or retains one another thread loaded
 * meanwhile). *out_dlerror gets the loader's message on failure. */
static kiln_status_t load_module(const char *key, const char *path, kiln_jit_module **out, char **out_dlerror) {
  *out = NULL;
  *out_dlerror = NULL;
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *msg = dlerror();
    *out_dlerror = kiln_strdup(msg ? msg : "unknown dlopen error");
    return kiln_error(KILN_IO_ERROR, "cannot load %s: %s", path, msg ? msg : "unknown dlopen error");
  }
  kiln_jit_module *m = calloc(1, sizeof *m);
  char *path_copy = kiln_strdup(path);
  if (!m || !path_copy) {
    free(m);
    free(path_copy);
    dlclose(handle);
    return KILN_OOM();
  }
  snprintf(m->key, sizeof m->key, "%s", key);
  m->path = path_copy;
  m->handle = handle;
  m->refs = 1;
  kiln_jit_module *existing = NULL;
  pthread_mutex_lock(&g_lock);
  for (kiln_jit_module *e = g_modules; e; e = e->next) {
    if (!strcmp(e->key, key)) {
      e->refs++;
      existing = e;
      break;
    }
  }
  if (!existing) {
    m->next = g_modules;
    g_modules = m;
  }
  pthread_mutex_unlock(&g_lock);
  if (existing) {
    dlclose(handle); /* same object: this only drops the loader's count */
    free(m->path);
    free(m);
    m = existing;
  }
  *out = m;
  return NULL;
}

kiln_jit_module *kiln_jit_module_retain(kiln_jit_module *module) {
  if (!module) return NULL;
  pthread_mutex_lock(&g_lock);
  module->refs++;
  pthread_mutex_unlock(&g_lock);
  return module;
}

void kiln_jit_module_release(kiln_jit_module *module) {
  if (!module) return;
  pthread_mutex_lock(&g_lock);
  bool last = --module->refs == 0;
  if (last) {
    for (kiln_jit_module **p = &g_modules; *p; p = &(*p)->next) {
      if (*p == module) {
        *p = module->next;
        break;
      }
    }
  }
  pthread_mutex_unlock(&g_lock);
  if (!last) return;
  dlclose(module->handle);
  free(module->path);
  free(module);
}

void *kiln_jit_symbol(const kiln_jit_module *module, const char *name) {
  if (!module || !name) return NULL;
  return dlsym(module->handle, name);
}

kiln_status_t kiln_jit_require_symbol(const kiln_jit_module *module, const char *name, void **out_address) {
  *out_address = kiln_jit_symbol(module, name);
  if (*out_address) return NULL;
  return kiln_error(KILN_NOT_FOUND, "symbol '%s' not found in %s (is it defined with KILN_EXPORT?)", name ? name : "(null)",
                    module ? module->path : "(no module)");
}

const char *kiln_jit_module_path(const kiln_jit_module *module) { return module ? module->path : ""; }
const char *kiln_jit_module_key(const kiln_jit_module *module) { return module ? module->key : ""; }

/* ---- dumps ------------------------------------------------------------------ */

static bool isalnum_ascii(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static void dump_source(const char *dir, const char *name, const char *key, const char *source) {
  char safe[101];
  int n = 0;
  if (name && *name) {
    for (const char *p = name; *p && n < 100; p++)
      safe[n++] = (isalnum_ascii(*p) || *p == '_' || *p == '-' || *p == '.') ? *p : '_';
  } else {
    n = snprintf(safe, sizeof safe, "kernel_%.16s", key);
  }
  safe[n] = '\0';
  /* The key keeps kernels of one op name apart (a model has many Convs). */
  char *path = kiln_strfmt("%s/%s_%.8s.c", dir, safe, key);
  FILE *f = NULL;
  if (path && kiln_make_dirs(dir) == 0 && (f = fopen(path, "we"))) {
    bool ok = fputs(source, f) >= 0;
    if (fclose(f)) ok = false;
    f = NULL;
    if (ok) {
      free(path);
      return;
    }
  }
  if (!atomic_exchange(&g_warned_dump, true))
    fprintf(stderr, "kiln: warning: cannot write JIT source dump %s: %s\n", path ? path : dir, strerror(errno));
  free(path);
}

/* ---- keys and flags -------------------------------------------------------- */

static void hash_field(kiln_sha256_ctx *h, const char *s) {
  uint8_t len[8];
  size_t n = strlen(s);
  kiln_put_le64(len, n);
  kiln_sha256_update(h, len, sizeof len);
  kiln_sha256_update(h, s, n);
}

/* The -mno-<feature> flags for the x86 features -march=native enables on
 * this CPU (kiln_cpu_features_native) that KILN_CPU_DISABLE turned off
 * (kiln_cpu_features_get), into out (room for max); returns how many. None
 * without KILN_CPU_DISABLE, and none off x86-64. A feature whose parent's
 * flag is emitted too (avx512bw under -mno-avx512f, avxvnni under -mno-avx2)
 * is left to the parent: gcc 12 and clang 14 turn those dependents off with
 * it (checked with -dM -E), and the rarer flags need a newer compiler. The
 * basic ones are named even where a parent implies them, so the command line
 * says what was turned off. */
#define FEATURE(field) offsetof(kiln_cpu_features, field)
static int disabled_feature_flags(const char **out, int max) {
#if defined(__x86_64__)
  static const struct {
    size_t field;
    const char *flag;
    int parent; /* index in this table, or -1 */
  } map[] = {
      /*  0 */ {FEATURE(sse4_1), "-mno-sse4.1", -1},
      /*  1 */ {FEATURE(sse4_2), "-mno-sse4.2", -1},
      /*  2 */ {FEATURE(avx), "-mno-avx", -1},
      /*  3 */ {FEATURE(f16c), "-mno-f16c", -1},
      /*  4 */ {FEATURE(fma), "-mno-fma", -1},
      /*  5 */ {FEATURE(avx2), "-mno-avx2", -1},
      /*  6 */ {FEATURE(bmi2), "-mno-bmi2", -1},
      /*  7 */ {FEATURE(avx_vnni), "-mno-avxvnni", 5},
      /*  8 */ {FEATURE(avx512f), "-mno-avx512f", -1},
      /*  9 */ {FEATURE(avx512cd), "-mno-avx512cd", 8},
      /* 10 */ {FEATURE(avx512dq), "-mno-avx512dq", 8},
      /* 11 */ {FEATURE(avx512bw), "-mno-avx512bw", 8},
      /* 12 */ {FEATURE(avx512vl), "-mno-avx512vl", 8},
      /* 13 */ {FEATURE(avx512_vnni), "-mno-avx512vnni", 8},
      /* 14 */ {FEATURE(avx512_bf16), "-mno-avx512bf16", 8},
      /* 15 */ {FEATURE(avx512_fp16), "-mno-avx512fp16", 8},
      /* 16 */ {FEATURE(avx512_vbmi), "-mno-avx512vbmi", 8},
      /* 17 */ {FEATURE(amx), "-mno-amx-tile", -1},
      /* gcc 12's -mno-amx-tile leaves amx-bf16 and amx-int8 on: named each */
      /* 18 */ {FEATURE(amx_bf16), "-mno-amx-bf16", -1},
      /* 19 */ {FEATURE(amx_int8), "-mno-amx-int8", -1},
  };
  const char *native = (const char *)kiln_cpu_features_native();
  const char *active = (const char *)kiln_cpu_features_get();
  bool off[KILN_ARRAY_SIZE(map)];
  int n = 0;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(map); i++) {
    bool had, has;
    memcpy(&had, native + map[i].field, sizeof had);
    memcpy(&has, active + map[i].field, sizeof has);
    off[i] = had && !has;
    if (!off[i] || (map[i].parent >= 0 && off[map[i].parent])) continue;
    if (n < max) out[n] = map[i].flag;
    n++;
  }
  return n < max ? n : max;
#else
  (void)out;
  (void)max;
  return 0;
#endif
}
#undef FEATURE

#define MAX_FEATURE_FLAGS 24

/* Flags for this call: the fixed ones, the -mno-<feature> ones, then
 * $KILN_CFLAGS (so a user's flag can override either). */
static char **build_flags(int *out_n) {
  const char *extra = getenv("KILN_CFLAGS");
  int n_extra = 0;
  char **extra_words = split_words(extra ? extra : "", &n_extra);
  if (!extra_words) return NULL;
  const char *feature_flags[MAX_FEATURE_FLAGS];
  int n_feature = disabled_feature_flags(feature_flags, MAX_FEATURE_FLAGS);
  int n = (int)KILN_ARRAY_SIZE(base_flags) + n_feature + n_extra;
  char **flags = calloc((size_t)n + 1, sizeof *flags);
  if (!flags) {
    free_words(extra_words);
    return NULL;
  }
  int k = 0;
  for (size_t i = 0; i < KILN_ARRAY_SIZE(base_flags); i++) {
    flags[k] = kiln_strdup(base_flags[i]);
    if (!flags[k++]) goto oom;
  }
  for (int i = 0; i < n_feature; i++) {
    flags[k] = kiln_strdup(feature_flags[i]);
    if (!flags[k++]) goto oom;
  }
  for (int i = 0; i < n_extra; i++) flags[k++] = extra_words[i], extra_words[i] = NULL;
  free_words(extra_words);
  *out_n = n;
  return flags;
oom:
  free_words(flags);
  free_words(extra_words);
  return NULL;
}

/* Everything that goes into a key except the source, pre-hashed. */
static void key_prefix(const jit_compiler *cc, char *const *flags, kiln_sha256_ctx *h) {
  kiln_sha256_init(h);
  hash_field(h, JIT_KEY_VERSION);
  hash_field(h, KILN_VERSION_STRING);
  hash_field(h, cc->path);
  for (int i = 0; i < cc->n_prefix; i++) hash_field(h, cc->prefix[i]);
  hash_field(h, cc->version);
  for (char *const *f = flags; *f; f++) hash_field(h, *f);
  hash_field(h, kiln_cpu_features_get()->signature);
}

/* ---- compile jobs ---------------------------------------------------------- */

typedef struct jit_job {
  const char *source;
  const char *name; /* for messages */
  char key[KILN_SHA256_HEX_SIZE];
  char *entry_path;
  bool corrupt;     /* a corrupt entry was found and deleted */
  bool needs_build;
  kiln_jit_module *module;
  kiln_status_t error;
  double compile_seconds;
} jit_job;

typedef struct jit_batch {
  const jit_compiler *cc;
  char **flags;
  int n_flags;
  const char *dir;
  int timeout_s;
  jit_job **todo;
  int n_todo;
  atomic_int next;
} jit_batch;

static void compile_job(const jit_batch *b, jit_job *job) {
  unsigned seq = atomic_fetch_add(&g_temp_seq, 1);
  char *src = kiln_strfmt("%s/%s.tmp.%ld.%u.c", b->dir, job->key, (long)getpid(), seq);
  char *obj = kiln_strfmt("%s/%s.tmp.%ld.%u.so", b->dir, job->key, (long)getpid(), seq);
  char *failed = kiln_strfmt("%s/%s.failed.c", b->dir, job->key);
  char **argv = calloc((size_t)(b->cc->n_prefix + b->n_flags + 5), sizeof *argv);
  proc_result r = {0};
  if (!src || !obj || !failed || !argv) {
    job->error = KILN_OOM();
    goto done;
  }

  int fd = open(src, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    job->error = kiln_error(KILN_IO_ERROR, "cannot create %s: %s", src, strerror(errno));
    goto done;
  }
  bool wrote = write_all(fd, job->source, strlen(job->source));
  if (close(fd) || !wrote) {
    job->error = kiln_error(KILN_IO_ERROR, "cannot write %s: %s", src, strerror(errno));
    unlink(src);
    goto done;
  }

  int k = 0;
  for (int i = 0; i < b->cc->n_prefix; i++) argv[k++] = b->cc->prefix[i];
  for (int i = 0; i < b->n_flags; i++) argv[k++] = b->flags[i];
  argv[k++] = "-o";
  argv[k++] = obj;
  argv[k++] = src;
  argv[k++] = "-lm";
  argv[k] = NULL;
  job->error = run_capture(b->cc->path, argv, b->timeout_s, &r);
  if (job->error) {
    unlink(src);
    goto done;
  }
  job->compile_seconds = r.seconds;

  struct stat st;
  bool built = r.exit_code == 0 || (r.exit_code == -1 && !r.term_signal && !r.timed_out && stat(obj, &st) == 0 &&
                                    st.st_size > 0); /* -1: exit status lost (SIGCHLD ignored) */
  if (built) {
    if (!seal_entry(obj)) {
      job->error = kiln_error(KILN_IO_ERROR, "cannot finish cache entry %s: %s", obj, strerror(errno));
    } else if (rename(obj, job->entry_path)) {
      job->error = kiln_error(KILN_IO_ERROR, "cannot move %s to %s: %s", obj, job->entry_path, strerror(errno));
    }
    if (job->error) unlink(obj);
    unlink(src);
    unlink(failed); /* an older failure of the same source is stale now */
    goto done;
  }

  unlink(obj);
  const char *kept = rename(src, failed) == 0 ? failed : src;
  /* Same directory: replacing the base name also fixes full paths, and the
   * linker quotes base names only. */
  char *ex = excerpt_lines(r.output, ERROR_LINES, strrchr(src, '/') + 1, strrchr(kept, '/') + 1);
  char how[96];
  if (r.timed_out) snprintf(how, sizeof how, "timed out after %d s (KILN_JIT_TIMEOUT)", b->timeout_s);
  else if (r.term_signal) snprintf(how, sizeof how, "was killed by signal %d", r.term_signal);
  else snprintf(how, sizeof how, "failed with exit status %d", r.exit_code);
  job->error = kiln_error(KILN_INTERNAL, "compiling '%s' with %s: the compiler %s; source kept at %s; compiler output:%s",
                          job->name, b->cc->path, how, kept, ex && *ex ? ex : " (none)");
  free(ex);
done:
  free(r.output);
  free(argv);
  free(src);
  free(obj);
  free(failed);
}

static void *compile_thread(void *p) {
  jit_batch *b = p;
  for (int k; (k = atomic_fetch_add(&b->next, 1)) < b->n_todo;) compile_job(b, b->todo[k]);
  return NULL;
}

/* Runs the batch's jobs on up to `parallel` threads (the caller is one). */
static void run_batch(jit_batch *b, int parallel) {
  int n_threads = KILN_MIN(parallel, b->n_todo);
  pthread_t threads[256];
  int started = 0;
  if (n_threads > 1) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (; started < n_threads - 1 && started < 256; started++)
      if (pthread_create(&threads[started], NULL, compile_thread, b)) break;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  compile_thread(b);
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
}

/* ---- public entry points ----------------------------------------------------- */

static void add_stats(kiln_jit_stats *dst, const kiln_jit_stats *src) {
  dst->requested += src->requested;
  dst->memory_hits += src->memory_hits;
  dst->disk_hits += src->disk_hits;
  dst->compiled += src->compiled;
  dst->corrupt_rebuilt += src->corrupt_rebuilt;
  dst->failed += src->failed;
  dst->compile_seconds += src->compile_seconds;
  dst->wall_seconds += src->wall_seconds;
}

/* compile_many, or with lookup_only what is loaded or cached already
 * (misses left NULL, nothing compiled). */
static kiln_status_t jit_many(int n, const char *const *sources, const char *const *names, int max_parallel,
                              bool lookup_only, kiln_jit_stats *stats, kiln_jit_module **out_modules) {
  if (n < 0 || (n > 0 && (!sources || !out_modules)))
    return kiln_error(KILN_INVALID_ARGUMENT, "jit: bad arguments (n=%d)", n);
  for (int i = 0; i < n; i++) {
    out_modules[i] = NULL;
    if (!sources[i]) return kiln_error(KILN_INVALID_ARGUMENT, "jit: source %d is NULL", i);
  }
  if (n == 0) return NULL;
  double t0 = now_seconds();
  kiln_jit_stats local = {0};
  local.requested = n;

  const jit_compiler *cc = NULL;
  kiln_status_t st = get_compiler(&cc);
  if (st) return kiln_status_annotate(st, "jit");
  char *dir = NULL;
  st = get_cache_dir(&dir);
  if (st) return kiln_status_annotate(st, "jit");

  jit_batch batch = {0};
  batch.cc = cc;
  batch.dir = dir;
  batch.timeout_s = env_int("KILN_JIT_TIMEOUT", 600, 1, 24 * 3600);
  batch.flags = build_flags(&batch.n_flags);
  jit_job *jobs = calloc((size_t)n, sizeof *jobs);
  int *job_of = calloc((size_t)n, sizeof *job_of);
  batch.todo = calloc((size_t)n, sizeof *batch.todo);
  char **labels = calloc((size_t)n, sizeof *labels);
  int n_jobs = 0;
  if (!batch.flags || !jobs || !job_of || !batch.todo || !labels) {
    st = KILN_OOM();
    goto done;
  }

  /* One job per distinct key. A source that starts with the C preamble
   * hashes its digest (a fixed-size field), then the rest. */
  kiln_sha256_ctx prefix, after_preamble;
  key_prefix(cc, batch.flags, &prefix);
  const char *preamble = kiln_c_preamble();
  size_t preamble_len = strlen(preamble);
  uint8_t preamble_digest[KILN_SHA256_SIZE];
  kiln_sha256_ctx ph;
  kiln_sha256_init(&ph);
  hash_field(&ph, preamble);
  kiln_sha256_final(&ph, preamble_digest);
  after_preamble = prefix;
  hash_field(&after_preamble, "preamble sha256");
  kiln_sha256_update(&after_preamble, preamble_digest, sizeof preamble_digest);
  const char *dump_dir = kiln_dump_dir("c");
  for (int i = 0; i < n; i++) {
    bool shared = preamble_len && !strncmp(sources[i], preamble, preamble_len);
    kiln_sha256_ctx h = shared ? after_preamble : prefix;
    hash_field(&h, shared ? sources[i] + preamble_len : sources[i]);
    uint8_t digest[KILN_SHA256_SIZE];
    kiln_sha256_final(&h, digest);
    char key[KILN_SHA256_HEX_SIZE];
    kiln_hex_encode(digest, sizeof digest, key);
    const char *name = names && names[i] ? names[i] : NULL;
    if (dump_dir) dump_source(dump_dir, name, key, sources[i]);
    labels[i] = name ? kiln_strdup(name) : kiln_strfmt("source %d", i);
    if (!labels[i]) {
      st = KILN_OOM();
      goto done;
    }
    int j = 0;
    while (j < n_jobs && strcmp(jobs[j].key, key)) j++;
    job_of[i] = j;
    if (j < n_jobs) {
      local.memory_hits++;
      continue;
    }
    n_jobs++;
    memcpy(jobs[j].key, key, sizeof key);
    jobs[j].source = sources[i];
    jobs[j].name = labels[i];
  }

  /* Loaded already, or a valid cache entry, or a job for the compiler. */
  for (int j = 0; j < n_jobs; j++) {
    jit_job *job = &jobs[j];
    job->module = registry_find_retain(job->key);
    if (job->module) {
      local.memory_hits++;
      continue;
    }
    job->entry_path = kiln_strfmt("%s/%s.so", dir, job->key);
    if (!job->entry_path) {
      st = KILN_OOM();
      goto done;
    }
    file_id id;
    entry_state es = check_entry(job->entry_path, &id);
    if (es == ENTRY_VALID) {
      char *dlerr = NULL;
      kiln_status_t lst = load_module(job->key, job->entry_path, &job->module, &dlerr);
      free(dlerr);
      if (!lst) {
        local.disk_hits++;
        continue;
      }
      kiln_status_free(lst);
      es = ENTRY_CORRUPT; /* verified yet unloadable: rebuild it once */
    }
    if (es == ENTRY_CORRUPT) {
      remove_entry(job->entry_path, &id);
      job->corrupt = true;
    }
    job->needs_build = true;
    batch.todo[batch.n_todo++] = job;
  }

  if (lookup_only) {
    for (int i = 0; i < n; i++) out_modules[i] = kiln_jit_module_retain(jobs[job_of[i]].module);
    batch.n_todo = 0;
    goto done;
  }
  if (batch.n_todo) {
    int parallel = max_parallel > 0 ? max_parallel : env_int("KILN_JIT_JOBS", kiln_physical_cores(), 1, 256);
    run_batch(&batch, KILN_MIN(parallel, 256));
  }

  /* Load what was built; the first error wins, the others are counted. */
  int n_failed = 0;
  for (int k = 0; k < batch.n_todo; k++) {
    jit_job *job = batch.todo[k];
    local.compile_seconds += job->compile_seconds;
    if (!job->error) {
      char *dlerr = NULL;
      kiln_status_t lst = load_module(job->key, job->entry_path, &job->module, &dlerr);
      if (lst) {
        kiln_status_free(lst);
        job->error = kiln_error(KILN_INTERNAL, "compiling '%s': the compiled object %s does not load: %s", job->name,
                                job->entry_path, dlerr ? dlerr : "?");
      }
      free(dlerr);
    }
    if (job->error) {
      local.failed++;
      if (n_failed++ == 0) {
        st = job->error;
        job->error = NULL;
      }
      kiln_status_free(job->error);
      job->error = NULL;
      continue;
    }
    local.compiled++;
    if (job->corrupt) local.corrupt_rebuilt++;
  }
  if (st) {
    if (n_failed > 1) st = kiln_status_annotate(st, "jit: %d of %d sources failed; the first", n_failed, n);
    else st = kiln_status_annotate(st, "jit");
    goto done;
  }
  for (int i = 0; i < n; i++) out_modules[i] = kiln_jit_module_retain(jobs[job_of[i]].module);

done:
  if (jobs) {
    for (int j = 0; j < n_jobs; j++) {
      kiln_jit_module_release(jobs[j].module);
      free(jobs[j].entry_path);
      kiln_status_free(jobs[j].error);
    }
  }
  if (labels)
    for (int i = 0; i < n; i++) free(labels[i]);
  free(labels);
  free(jobs);
  free(job_of);
  free(batch.todo);
  free_words(batch.flags);
  free(dir);
  local.wall_seconds = now_seconds() - t0;
  if (stats) add_stats(stats, &local);
  pthread_mutex_lock(&g_lock);
  add_stats(&g_stats, &local);
  pthread_mutex_unlock(&g_lock);
  return st;
}

kiln_status_t kiln_jit_compile_many(int n, const char *const *sources, const char *const *names, int max_parallel,
                                    kiln_jit_stats *stats, kiln_jit_module **out_modules) {
  return jit_many(n, sources, names, max_parallel, false, stats, out_modules);
}

kiln_status_t kiln_jit_lookup_many(int n, const char *const *sources, const char *const *names, kiln_jit_stats *stats,
                                   kiln_jit_module **out_modules) {
  return jit_many(n, sources, names, 1, true, stats, out_modules);
}

kiln_status_t kiln_jit_compile(const char *source, const char *name, kiln_jit_stats *stats,
                               kiln_jit_module **out_module) {
  return kiln_jit_compile_many(1, &source, &name, 1, stats, out_module);
}

kiln_status_t kiln_jit_available(void) {
  const jit_compiler *cc = NULL;
  return get_compiler(&cc);
}

void kiln_jit_global_stats(kiln_jit_stats *out_stats) {
  pthread_mutex_lock(&g_lock);
  *out_stats = g_stats;
  pthread_mutex_unlock(&g_lock);
}

void kiln_jit_stats_format(const kiln_jit_stats *s, char *buf, int size) {
  if (size <= 0) return;
  snprintf(buf, (size_t)size,
           "jit: %lld requested, %lld memory hits, %lld disk hits, %lld compiled (%lld corrupt entries rebuilt), "
           "%lld failed; compiler %.3f s, wall %.3f s",
           (long long)s->requested, (long long)s->memory_hits, (long long)s->disk_hits, (long long)s->compiled,
           (long long)s->corrupt_rebuilt, (long long)s->failed, s->compile_seconds, s->wall_seconds);
}

char *kiln_jit_cache_dir(char *buf, int size) {
  if (size <= 0) return NULL;
  buf[0] = '\0';
  char *dir = NULL;
  kiln_status_t st = get_cache_dir(&dir);
  if (st) {
    kiln_status_free(st);
    return NULL;
  }
  snprintf(buf, (size_t)size, "%s", dir);
  free(dir);
  return buf;
}

char *kiln_jit_compiler_description(char *buf, int size) {
  if (size <= 0) return NULL;
  buf[0] = '\0';
  const jit_compiler *cc = NULL;
  kiln_status_t st = get_compiler(&cc);
  if (st) {
    kiln_status_free(st);
    return NULL;
  }
  snprintf(buf, (size_t)size, "%s: %.*s", cc->path, (int)strcspn(cc->version, "\n"), cc->version);
  return buf;
}

char *kiln_jit_target_flags(char *buf, int size) {
  if (size <= 0) return buf;
  const char *flags[MAX_FEATURE_FLAGS];
  int n = disabled_feature_flags(flags, MAX_FEATURE_FLAGS);
  int used = snprintf(buf, (size_t)size, "-march=native");
  for (int i = 0; i < n && used >= 0 && used < size; i++)
    used += snprintf(buf + used, (size_t)(size - used), " %s", flags[i]);
  return buf;
}

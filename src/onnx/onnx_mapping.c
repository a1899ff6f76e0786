/* onnx_mapping.c — the buffers a model's tensors borrow: the read-only map
 * of the model file, a private copy of a caller's buffer, and external data
 * files (resolved inside the model's folder only). */
#include "onnx/onnx_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void mapping_destroy(kiln_keepalive *k) {
  onnx_mapping *m = (onnx_mapping *)k;
  if (m->is_mmap) {
    if (m->addr) munmap(m->addr, m->size);
  } else {
    free(m->addr);
  }
  free(m);
}

kiln_status_t onnx_map_file(const char *path, onnx_mapping **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kiln_error(KILN_IO_ERROR, "cannot open '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return kiln_error(KILN_IO_ERROR, "cannot stat '%s': %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return kiln_error(KILN_IO_ERROR, "'%s' is not a regular file", path);
  }
  onnx_mapping *m = calloc(1, sizeof *m);
  if (!m) {
    close(fd);
    return KILN_OOM();
  }
  m->ka.refcount = 1;
  m->ka.destroy = mapping_destroy;
  m->is_mmap = true;
  m->size = (size_t)st.st_size;
  if (m->size) {
    void *a = mmap(NULL, m->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (a == MAP_FAILED) {
      int e = errno;
      close(fd);
      free(m);
      return kiln_error(KILN_IO_ERROR, "cannot map '%s' (%zu bytes): %s", path, (size_t)st.st_size, strerror(e));
    }
    m->addr = a;
  }
  close(fd);
  *out = m;
  return NULL;
}

kiln_status_t onnx_copy_buffer(const void *data, size_t size, onnx_mapping **out) {
  *out = NULL;
  onnx_mapping *m = calloc(1, sizeof *m);
  if (!m) return KILN_OOM();
  m->ka.refcount = 1;
  m->ka.destroy = mapping_destroy;
  m->size = size;
  if (size) {
    if (size > SIZE_MAX - 64) {
      free(m);
      return KILN_OOM();
    }
    m->addr = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (!m->addr) {
      free(m);
      return kiln_error(KILN_OUT_OF_MEMORY, "out of memory copying a %zu-byte model", size);
    }
    memcpy(m->addr, data, size);
  }
  *out = m;
  return NULL;
}

void onnx_loader_release(onnx_loader *L) {
  while (L->ext) {
    onnx_ext_file *e = L->ext;
    L->ext = e->next;
    kiln_keepalive_release(&e->map->ka);
    free(e->path);
    free(e);
  }
  for (int i = 0; i < L->n_functions; i++) onnx_function_clear(&L->functions[i]);
  free(L->functions);
  L->functions = NULL;
  L->n_functions = 0;
  onnx_map_free(&L->function_index);
  free(L->next_same_name);
  L->next_same_name = NULL;
}

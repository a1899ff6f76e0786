/* The model's cache of folded constants (fold_cache.h). A linear list: a
 * model has at most a few hundred foldable weight conversions, and a
 * lookup happens once per node per session. */
#include "passes/fold_cache.h"

#include <pthread.h>
#include <string.h>

#define FOLD_CACHE_MAX_IO 64

typedef struct fold_entry {
  char *op_type, *domain;
  int opset;
  uint64_t attrs; /* hash of the node's attributes */
  int n_in, n_out;
  kiln_tensor *in[FOLD_CACHE_MAX_IO];  /* references */
  kiln_tensor *out[FOLD_CACHE_MAX_IO]; /* references; NULL for absent outputs */
} fold_entry;

struct kiln_fold_cache {
  pthread_mutex_t lock;
  fold_entry *entries;
  int n, cap;
  int64_t bytes, hits;
};

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

static uint64_t mix_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = mix(h, b[i]);
  return h;
}

/* What the attributes say, tensors by identity (shared, like the inputs). */
static uint64_t attrs_hash(const kiln_node *n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int a = 0; a < n->n_attrs; a++) {
    const kiln_attr *at = &n->attrs[a];
    h = mix_bytes(h, at->name, strlen(at->name));
    h = mix(h, (uint64_t)at->type);
    h = mix(h, (uint64_t)at->i);
    h = mix_bytes(h, &at->f, sizeof at->f);
    if (at->s) h = mix_bytes(h, at->s, at->s_len);
    if (at->ints) h = mix_bytes(h, at->ints, (size_t)at->n * sizeof *at->ints);
    if (at->floats) h = mix_bytes(h, at->floats, (size_t)at->n * sizeof *at->floats);
    h = mix(h, (uint64_t)(uintptr_t)at->t);
    if (at->g || at->graphs) h = mix(h, (uint64_t)(uintptr_t)n); /* never folded; never shared */
  }
  return h;
}

kiln_status_t kiln_fold_cache_create(kiln_fold_cache **out) {
  kiln_fold_cache *c = calloc(1, sizeof *c);
  if (!c) return KILN_OOM();
  pthread_mutex_init(&c->lock, NULL);
  *out = c;
  return NULL;
}

static void entry_free(fold_entry *e) {
  free(e->op_type);
  free(e->domain);
  for (int i = 0; i < e->n_in; i++) kiln_tensor_release(e->in[i]);
  for (int i = 0; i < e->n_out; i++) kiln_tensor_release(e->out[i]);
}

void kiln_fold_cache_free(kiln_fold_cache *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) entry_free(&c->entries[i]);
  free(c->entries);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

static bool matches(const fold_entry *e, const kiln_node *n, uint64_t attrs, kiln_tensor *const *in, int n_in,
                    int n_out) {
  if (e->n_in != n_in || e->n_out != n_out || e->opset != n->opset || e->attrs != attrs) return false;
  if (strcmp(e->op_type, n->op_type) || strcmp(e->domain, n->domain ? n->domain : "")) return false;
  for (int i = 0; i < n_in; i++)
    if (e->in[i] != in[i]) return false;
  return true;
}

bool kiln_fold_cache_get(kiln_fold_cache *c, const kiln_node *n, kiln_tensor *const *in, int n_in, kiln_tensor **outs,
                         int n_out) {
  if (!c || n_in > FOLD_CACHE_MAX_IO || n_out > FOLD_CACHE_MAX_IO) return false;
  uint64_t attrs = attrs_hash(n);
  bool hit = false;
  pthread_mutex_lock(&c->lock);
  for (int k = 0; k < c->n && !hit; k++) {
    const fold_entry *e = &c->entries[k];
    if (!matches(e, n, attrs, in, n_in, n_out)) continue;
    for (int i = 0; i < n_out; i++) outs[i] = kiln_tensor_retain(e->out[i]);
    hit = true;
    c->hits++;
  }
  pthread_mutex_unlock(&c->lock);
  return hit;
}

void kiln_fold_cache_put(kiln_fold_cache *c, const kiln_node *n, kiln_tensor *const *in, int n_in,
                         kiln_tensor *const *outs, int n_out) {
  if (!c || n_in > FOLD_CACHE_MAX_IO || n_out > FOLD_CACHE_MAX_IO) return;
  int64_t bytes = 0;
  for (int i = 0; i < n_out; i++)
    if (outs[i]) bytes += (int64_t)kiln_tensor_nbytes(outs[i]);
  if (bytes < KILN_FOLD_CACHE_MIN_BYTES) return;
  fold_entry e = {0};
  e.op_type = kiln_strdup(n->op_type);
  e.domain = kiln_strdup(n->domain ? n->domain : "");
  if (!e.op_type || !e.domain) {
    free(e.op_type);
    free(e.domain);
    return; /* out of memory: the next session folds again */
  }
  e.opset = n->opset;
  e.attrs = attrs_hash(n);
  e.n_in = n_in;
  e.n_out = n_out;
  for (int i = 0; i < n_in; i++) e.in[i] = kiln_tensor_retain(in[i]);
  for (int i = 0; i < n_out; i++) e.out[i] = kiln_tensor_retain(outs[i]);
  pthread_mutex_lock(&c->lock);
  bool stored = false;
  bool dup = false;
  for (int k = 0; k < c->n && !dup; k++) dup = matches(&c->entries[k], n, e.attrs, in, n_in, n_out);
  if (!dup && c->bytes + bytes <= KILN_FOLD_CACHE_MAX_BYTES) {
    if (c->n == c->cap) {
      int cap = c->cap ? 2 * c->cap : 16;
      fold_entry *grown = realloc(c->entries, (size_t)cap * sizeof *grown);
      if (grown) {
        c->entries = grown;
        c->cap = cap;
      }
    }
    if (c->n < c->cap) {
      c->entries[c->n++] = e;
      c->bytes += bytes;
      stored = true;
    }
  }
  pthread_mutex_unlock(&c->lock);
  if (!stored) entry_free(&e);
}

int64_t kiln_fold_cache_hits(const kiln_fold_cache *c) { return c ? c->hits : 0; }
int64_t kiln_fold_cache_bytes(const kiln_fold_cache *c) { return c ? c->bytes : 0; }

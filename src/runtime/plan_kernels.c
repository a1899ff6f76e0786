/* Claims and kernel sources for GPU-dialect devices (see plan_kernels.h). */
#include "runtime/plan_kernels.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/files.h"
#include "base/hash.h"
#include "base/strbuf.h"
#include "codegen/lower.h"

kiln_op_class kiln_plan_claim_stored(const kiln_graph *g, const kiln_node *node, kiln_dtype_filter stores,
                                     const void *user, const char **why) {
  for (int side = 0; side < 2; side++) {
    int n = side ? node->n_outputs : node->n_inputs;
    const int *ids = side ? node->outputs : node->inputs;
    for (int i = 0; i < n; i++)
      if (ids[i] >= 0 && !stores(user, g->values[ids[i]].type.dtype, why)) return KILN_OPCLASS_NONE;
  }
  return kiln_lower_class(g, node, why);
}

bool kiln_plan_step_launches(const kiln_plan *p, int i) {
  return p->steps[i].kind == KILN_STEP_KERNEL;
}

void kiln_plan_kernel_name(int step, char name[32]) { snprintf(name, 32, "k%d", step); }

static void dump_source(const kiln_plan_kernels *k, const char *kind, const char *ext);

static kiln_status_t render_step(const kiln_plan *p, int i, kiln_kernel_renderer render,
                                 const kiln_loop_schedule *gpu, kiln_strbuf *src, kiln_plan_kernels *out) {
  const kiln_plan_step *s = &p->steps[i];
  kiln_loop_nest nest = {0};
  kiln_loop_schedule sched = gpu ? *gpu : kiln_loop_schedule_default();
  sched.parallel_dims = KILN_PARALLEL_UNTIL_REDUCTION;
  char name[32];
  kiln_plan_kernel_name(i, name);
  kiln_status_t st = kiln_schedule_kernel(s->fk.b, s->fk.root, 0, &sched, &nest);
  if (!st && te_buffer_count(s->fk.b) != s->n_args)
    st = kiln_error(KILN_INTERNAL, "kernel with %d buffers for %d arguments", te_buffer_count(s->fk.b), s->n_args);
  if (!st) st = render(s->fk.b, &nest, name, src);
  if (!st) {
    out->threads[i] = kiln_loop_nest_threads(&nest);
    out->group_size[i] = kiln_loop_nest_group_size(&nest);
  }
  kiln_loop_nest_free(&nest);
  if (st) st = kiln_status_annotate(st, "rendering the kernel of node '%s'", s->node->name);
  return st;
}

/* Whether a kernel of the plan reads or writes an f16 / bf16 buffer, or
 * converts to one inside (Cast f32 -> bf16 -> f32 fused into a kernel of
 * f32 buffers calls kiln_f2bf and kiln_bf2f). Asked after rendering: the
 * kernels' expressions are built as they are scheduled and rendered. */
static bool stores_halves(const kiln_plan *p) {
  for (int i = 0; i < p->n_steps; i++) {
    if (!kiln_plan_step_launches(p, i)) continue;
    const te_builder *b = p->steps[i].fk.b;
    for (int k = 0; b && k < te_buffer_count(b); k++) {
      if (kiln_dtype_is_half(te_get_buffer(b, k)->dtype)) return true;
    }
    if (b && (te_has_dtype(b, KILN_DTYPE_F16) || te_has_dtype(b, KILN_DTYPE_BF16))) return true;
  }
  return false;
}

kiln_status_t kiln_plan_render_kernels(const kiln_plan *p, const kiln_plan_dialect *dialect,
                                       const kiln_loop_schedule *gpu, kiln_plan_kernels *out) {
  kiln_kernel_renderer render = dialect->render;
  *out = (kiln_plan_kernels){0};
  out->threads = calloc((size_t)p->n_steps + 1, sizeof *out->threads);
  out->group_size = calloc((size_t)p->n_steps + 1, sizeof *out->group_size);
  if (!out->threads || !out->group_size) {
    kiln_plan_kernels_free(out);
    return KILN_OOM();
  }
  kiln_strbuf kernels = {0}, src = {0};
  kiln_status_t st = NULL;
  for (int i = 0; i < p->n_steps && !st; i++) {
    if (kiln_plan_step_launches(p, i) && !(st = render_step(p, i, render, gpu, &kernels, out)))
      out->n_kernels++;
  }
  if (!st) st = kiln_strbuf_status(&kernels);
  if (!st) {
    kiln_strbuf_puts(&src, dialect->preamble);
    if (dialect->half_helpers && stores_halves(p)) kiln_strbuf_puts(&src, dialect->half_helpers);
    kiln_strbuf_puts(&src, kernels.data ? kernels.data : "");
    st = kiln_strbuf_status(&src);
  }
  kiln_strbuf_free(&kernels);
  if (!st) {
    out->source_bytes = src.len;
    out->source = kiln_strbuf_take(&src);
  }
  kiln_strbuf_free(&src);
  if (st) {
    kiln_plan_kernels_free(out);
    return kiln_status_annotate(st, "%s", dialect->name);
  }
  snprintf(out->what, sizeof out->what, "the %d kernels of graph '%.80s'", out->n_kernels, p->g->name ? p->g->name : "");
  dump_source(out, dialect->name, dialect->dump_ext);
  return NULL;
}

void kiln_plan_kernels_free(kiln_plan_kernels *k) {
  free(k->source);
  free(k->threads);
  free(k->group_size);
  *k = (kiln_plan_kernels){0};
}

/* Writes the source to <dump dir>/<kind>_<hash>.<ext> when dumps of `kind`
 * are on (KILN_DUMP=kind or all, KILN_DUMP_DIR; base/files.h). */
static void dump_source(const kiln_plan_kernels *k, const char *kind, const char *ext) {
  const char *dir = k->source ? kiln_dump_dir(kind) : NULL;
  if (!dir) return;
  kiln_sha256_ctx h;
  kiln_sha256_init(&h);
  kiln_sha256_update(&h, k->source, k->source_bytes);
  uint8_t digest[KILN_SHA256_SIZE];
  kiln_sha256_final(&h, digest);
  char key[KILN_SHA256_HEX_SIZE];
  kiln_hex_encode(digest, sizeof digest, key);
  char *path = kiln_strfmt("%s/%s_%.16s.%s", dir, kind, key, ext);
  FILE *f = path && !kiln_make_dirs(dir) ? fopen(path, "we") : NULL;
  bool ok = f && fwrite(k->source, 1, k->source_bytes, f) == k->source_bytes;
  if (f && fclose(f)) ok = false;
  /* A dump is a debugging aid: say it failed, do not fail the session. */
  if (!ok) fprintf(stderr, "kiln: warning: cannot write the %s source dump %s\n", kind, path ? path : dir);
  free(path);
}

/* cpu_conv_dnnl.c — the cpu's convolutions on oneDNN, where it has it.
 *
 * oneDNN (Intel's library made for exactly this; Debian's libdnnl2) is
 * loaded at run time (dlopen), its header only needed at build time
 * (KILN_HAVE_DNNL): a kiln without it, or a machine without the library,
 * runs the cpu's own convolution algorithms (cpu_conv*.c) as before.
 *
 * Used for 2-D f32 convolutions and ConvTransposes of group 1 whose
 * weights are given at run time: a training step's forward convolutions,
 * its data gradients (a Conv with reversed weights or a ConvTranspose) and
 * its weight gradients (a Conv whose batch is the input's channels, whose
 * output may be [co, n, k], y_cn). There oneDNN's JIT kernels ran about 2x
 * faster than the cpu's im2col/im2row + SGEMM on this project's training
 * benchmarks (ResNet-18 at 32x32, batch 32, 2 threads: layer1's 3x3 conv
 * 1.0 -> 0.5 ms, its weight gradient 1.05 -> 0.53 ms, layer4's data
 * gradient 1.0 -> 0.2 ms), the reorders to and from its blocked layouts
 * included. Constant weights (inference) keep the cpu's algorithms, which
 * are tuned for them (weights transformed once at prepare).
 *
 * Each launch gets a plan once: the primitive (created with "any" layouts,
 * so oneDNN picks its own), the reorders from the caller's layouts (NCHW,
 * OIHW or IOHW weights, an output of any strides) into the primitive's
 * and back, and the memories between them. Per run: the caller's pointers
 * set on the user memories, the reorders and the primitive on one stream,
 * a wait, then the bias-free epilogue the generated code passes (the
 * residual Add, ReLU's mask...) over each image's planes. oneDNN runs its
 * loops on OpenMP: its thread count is set to the cpu device's for each
 * call, and GOMP_SPINCOUNT=10000 (unless the user set it) keeps its
 * threads from spinning long on the CPUs the device's own pool needs next.
 * KILN_DNNL=0 turns it off. */
#include "devices/cpu/cpu_internal.h"

#include <stdlib.h>
#include <string.h>

#if KILN_HAVE_DNNL
#include <dlfcn.h>
#include <pthread.h>

#include <oneapi/dnnl/dnnl.h>

/* The entry points kiln calls, resolved from libdnnl.so.2. */
typedef struct dnnl_api {
  bool ok;
  char version[32];
  dnnl_engine_t engine;
  void (*omp_set_num_threads)(int);
  dnnl_status_t (*engine_create)(dnnl_engine_t *, dnnl_engine_kind_t, size_t);
  dnnl_status_t (*stream_create)(dnnl_stream_t *, dnnl_engine_t, unsigned);
  dnnl_status_t (*stream_destroy)(dnnl_stream_t);
  dnnl_status_t (*stream_wait)(dnnl_stream_t);
  dnnl_status_t (*memory_desc_init_by_tag)(dnnl_memory_desc_t *, int, const dnnl_dims_t, dnnl_data_type_t,
                                           dnnl_format_tag_t);
  dnnl_status_t (*memory_desc_init_by_strides)(dnnl_memory_desc_t *, int, const dnnl_dims_t, dnnl_data_type_t,
                                               const dnnl_dims_t);
  int (*memory_desc_equal)(const dnnl_memory_desc_t *, const dnnl_memory_desc_t *);
  dnnl_status_t (*conv_fwd_desc_init)(dnnl_convolution_desc_t *, dnnl_prop_kind_t, dnnl_alg_kind_t,
                                      const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,
                                      const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, const dnnl_dims_t,
                                      const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t);
  dnnl_status_t (*deconv_fwd_desc_init)(dnnl_deconvolution_desc_t *, dnnl_prop_kind_t, dnnl_alg_kind_t,
                                        const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,
                                        const dnnl_memory_desc_t *, const dnnl_memory_desc_t *, const dnnl_dims_t,
                                        const dnnl_dims_t, const dnnl_dims_t, const dnnl_dims_t);
  dnnl_status_t (*primitive_desc_create)(dnnl_primitive_desc_t *, const_dnnl_op_desc_t, const_dnnl_primitive_attr_t,
                                         dnnl_engine_t, const_dnnl_primitive_desc_t);
  const dnnl_memory_desc_t *(*primitive_desc_query_md)(const_dnnl_primitive_desc_t, dnnl_query_t, int);
  dnnl_status_t (*primitive_desc_destroy)(dnnl_primitive_desc_t);
  dnnl_status_t (*reorder_primitive_desc_create)(dnnl_primitive_desc_t *, const dnnl_memory_desc_t *, dnnl_engine_t,
                                                 const dnnl_memory_desc_t *, dnnl_engine_t,
                                                 const_dnnl_primitive_attr_t);
  dnnl_status_t (*primitive_create)(dnnl_primitive_t *, const_dnnl_primitive_desc_t);
  dnnl_status_t (*primitive_destroy)(dnnl_primitive_t);
  dnnl_status_t (*primitive_execute)(const_dnnl_primitive_t, dnnl_stream_t, int, const dnnl_exec_arg_t *);
  dnnl_status_t (*memory_create)(dnnl_memory_t *, const dnnl_memory_desc_t *, dnnl_engine_t, void *);
  dnnl_status_t (*memory_set_data_handle)(dnnl_memory_t, void *);
  dnnl_status_t (*memory_destroy)(dnnl_memory_t);
  const dnnl_version_t *(*version_fn)(void);
} dnnl_api;

static dnnl_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_load(void) {
  const char *off = getenv("KILN_DNNL");
  if (off && !strcmp(off, "0")) return;
  /* Before libgomp starts: its threads spin briefly after a call (10k
   * polls, not libgomp's 300k), then sleep, leaving the CPUs to the
   * device's own pool for the kernels between convolutions (ResNet-18's
   * training step graph, 2 threads: 97 ms with the default, 90 with
   * this; 103 with OMP_WAIT_POLICY=passive). */
  setenv("GOMP_SPINCOUNT", "10000", 0);
  void *h = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) return;
  dnnl_api a = {0};
#define SYM(field, name)                              \
  if (!(*(void **)&a.field = dlsym(h, #name))) { \
    dlclose(h);                                       \
    return;                                           \
  }
  SYM(engine_create, dnnl_engine_create)
  SYM(stream_create, dnnl_stream_create)
  SYM(stream_destroy, dnnl_stream_destroy)
  SYM(stream_wait, dnnl_stream_wait)
  SYM(memory_desc_init_by_tag, dnnl_memory_desc_init_by_tag)
  SYM(memory_desc_init_by_strides, dnnl_memory_desc_init_by_strides)
  SYM(memory_desc_equal, dnnl_memory_desc_equal)
  SYM(conv_fwd_desc_init, dnnl_dilated_convolution_forward_desc_init)
  SYM(deconv_fwd_desc_init, dnnl_dilated_deconvolution_forward_desc_init)
  SYM(primitive_desc_create, dnnl_primitive_desc_create)
  SYM(primitive_desc_query_md, dnnl_primitive_desc_query_md)
  SYM(primitive_desc_destroy, dnnl_primitive_desc_destroy)
  SYM(reorder_primitive_desc_create, dnnl_reorder_primitive_desc_create)
  SYM(primitive_create, dnnl_primitive_create)
  SYM(primitive_destroy, dnnl_primitive_destroy)
  SYM(primitive_execute, dnnl_primitive_execute)
  SYM(memory_create, dnnl_memory_create)
  SYM(memory_set_data_handle, dnnl_memory_set_data_handle)
  SYM(memory_destroy, dnnl_memory_destroy)
  SYM(version_fn, dnnl_version)
#undef SYM
  void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (gomp) *(void **)&a.omp_set_num_threads = dlsym(gomp, "omp_set_num_threads");
  if (a.engine_create(&a.engine, dnnl_cpu, 0) != dnnl_success) {
    dlclose(h);
    return;
  }
  const dnnl_version_t *v = a.version_fn();
  snprintf(a.version, sizeof a.version, "%d.%d.%d", v->major, v->minor, v->patch);
  a.ok = true;
  api = a; /* the library stays loaded for the process */
}

static bool api_ready(void) {
  pthread_once(&api_once, api_load);
  return api.ok;
}

/* One reorder between a user memory and the primitive's, when their layouts differ. */
typedef struct dnnl_move {
  dnnl_primitive_t prim; /* NULL: the primitive reads or writes the user memory itself */
  dnnl_memory_t inner;   /* owned by oneDNN's allocation (DNNL_MEMORY_ALLOCATE) */
} dnnl_move;

struct kiln_conv_dnnl {
  dnnl_primitive_t prim;
  dnnl_stream_t stream;
  dnnl_memory_t user_x, user_w, user_y, user_b; /* user_b NULL without bias */
  dnnl_move mx, mw, my;
  int64_t n, co, osize;
  bool y_cn;
  int threads;
};

void kiln_conv_dnnl_free(kiln_conv_dnnl *d) {
  if (!d) return;
  dnnl_move *mv[3] = {&d->mx, &d->mw, &d->my};
  for (int i = 0; i < 3; i++) {
    if (mv[i]->prim) api.primitive_destroy(mv[i]->prim);
    if (mv[i]->inner) api.memory_destroy(mv[i]->inner);
  }
  dnnl_memory_t um[4] = {d->user_x, d->user_w, d->user_y, d->user_b};
  for (int i = 0; i < 4; i++)
    if (um[i]) api.memory_destroy(um[i]);
  if (d->prim) api.primitive_destroy(d->prim);
  if (d->stream) api.stream_destroy(d->stream);
  free(d);
}

/* The move between user memory md and the primitive's layout pmd (to the
 * primitive when in, else back). */
static bool make_move(const dnnl_memory_desc_t *user, const dnnl_memory_desc_t *prim_md, bool in, dnnl_move *mv) {
  if (api.memory_desc_equal(user, prim_md)) return true;
  if (api.memory_create(&mv->inner, prim_md, api.engine, DNNL_MEMORY_ALLOCATE) != dnnl_success) return false;
  dnnl_primitive_desc_t rpd;
  if (api.reorder_primitive_desc_create(&rpd, in ? user : prim_md, api.engine, in ? prim_md : user, api.engine, NULL) !=
      dnnl_success)
    return false;
  bool ok = api.primitive_create(&mv->prim, rpd) == dnnl_success;
  api.primitive_desc_destroy(rpd);
  return ok;
}

const char *kiln_conv_dnnl_version(void) { return api_ready() ? api.version : NULL; }

/* Whether every kernel tap meets the input at some output and every
 * output meets it through some tap, along each axis. Where not (ResNet's
 * layer4 at 32x32: 3x3 kernels over 1x1 planes), the cpu's own algorithms
 * leave the dead taps and outputs out (cpu_conv.c's pruning, the
 * ConvTranspose's live taps): oneDNN computes them all, and reorders
 * weights 9x larger than the product needs, 2-3x slower there. */
static bool all_live(const kiln_rt_conv_args *a) {
  for (int i = 0; i < 2; i++) {
    int64_t k = a->kernel[i], s = a->stride[i], d = a->dilation[i], pb = a->pad_begin[i];
    int64_t in = a->in[i], out = a->out[i], last_tap = (k - 1) * d;
    if (a->transposed) { /* input i lands on output i s - pb + j d: taps 0 and k - 1 */
      if ((in - 1) * s - pb < 0 || -pb >= out) return false;
      if ((in - 1) * s - pb + last_tap < 0 || last_tap - pb >= out) return false;
    } else { /* output o reads input o s - pb + j d: taps 0 and k - 1, outputs 0 and out - 1 */
      int64_t last_out = (out - 1) * s;
      if (last_out - pb < 0 || -pb >= in) return false;
      if (last_out - pb + last_tap < 0 || last_tap - pb >= in) return false;
      if (last_tap - pb < 0 || last_out - pb >= in) return false;
    }
  }
  return true;
}

bool kiln_conv_dnnl_candidate(const kiln_rt_conv_args *a) {
  if (a->integer || a->w_constant || a->nsp != 2 || a->group != 1) return false;
  for (int i = 0; i < 2; i++)
    if (a->stride[i] < 1 || a->dilation[i] < 1) return false;
  /* Inputs under 4x4 per image stay on the cpu's algorithms: ResNet-18's
   * layer3 at 32x32 (2x2 planes, 256 channels) ran slower on oneDNN, its
   * 3x3 convolution 1.0 -> 1.05 ms, its weight gradient 0.7 -> 1.3 ms. */
  return a->in[0] * a->in[1] >= 16 && all_live(a);
}

kiln_status_t kiln_conv_dnnl_plan(const kiln_rt_conv_args *a, int threads, kiln_conv_dnnl **out) {
  *out = NULL;
  if (!kiln_conv_dnnl_candidate(a) || !api_ready()) return NULL;
  int64_t osize = a->out[0] * a->out[1];
  dnnl_dims_t xd = {a->n, a->ci, a->in[0], a->in[1]}, yd = {a->n, a->co, a->out[0], a->out[1]};
  dnnl_dims_t wd = {a->co, a->ci, a->kernel[0], a->kernel[1]};
  dnnl_dims_t st = {a->stride[0], a->stride[1]}, dl = {a->dilation[0] - 1, a->dilation[1] - 1};
  dnnl_dims_t pl = {a->pad_begin[0], a->pad_begin[1]}, pr;
  for (int i = 0; i < 2; i++) {
    /* The end pads that make the output the size given: conv (out - 1) s +
     * (k - 1) d + 1 = in + pl + pr; ConvTranspose the same with in and
     * out exchanged (output_padding is end padding there). */
    int64_t span = (a->kernel[i] - 1) * a->dilation[i] + 1;
    pr[i] = a->transposed ? (a->in[i] - 1) * a->stride[i] + span - a->out[i] - pl[i]
                          : (a->out[i] - 1) * a->stride[i] + span - a->in[i] - pl[i];
    if (pl[i] < 0 || pr[i] < 0 || pr[i] > span) return NULL; /* negative pads: the cpu's own algorithms */
  }
  dnnl_memory_desc_t ux, uw, uy, ub, ax, aw, ay;
  bool ok = api.memory_desc_init_by_tag(&ux, 4, xd, dnnl_f32, dnnl_nchw) == dnnl_success &&
            api.memory_desc_init_by_tag(&uw, 4, wd, dnnl_f32, a->transposed ? dnnl_iohw : dnnl_oihw) == dnnl_success &&
            api.memory_desc_init_by_tag(&ax, 4, xd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
            api.memory_desc_init_by_tag(&aw, 4, wd, dnnl_f32, dnnl_format_tag_any) == dnnl_success &&
            api.memory_desc_init_by_tag(&ay, 4, yd, dnnl_f32, dnnl_format_tag_any) == dnnl_success;
  if (ok && a->y_cn) { /* [co, n, out]: an image's planes n * osize apart */
    dnnl_dims_t ys = {osize, a->n * osize, a->out[1], 1};
    ok = api.memory_desc_init_by_strides(&uy, 4, yd, dnnl_f32, ys) == dnnl_success;
  } else if (ok) {
    ok = api.memory_desc_init_by_tag(&uy, 4, yd, dnnl_f32, dnnl_nchw) == dnnl_success;
  }
  dnnl_dims_t bd = {a->co};
  if (ok && a->bias) ok = api.memory_desc_init_by_tag(&ub, 1, bd, dnnl_f32, dnnl_a) == dnnl_success;
  if (!ok) return NULL;
  dnnl_primitive_desc_t pd = NULL;
  if (a->transposed) {
    dnnl_deconvolution_desc_t desc;
    ok = api.deconv_fwd_desc_init(&desc, dnnl_forward_inference, dnnl_deconvolution_direct, &ax, &aw,
                                  a->bias ? &ub : NULL, &ay, st, dl, pl, pr) == dnnl_success &&
         api.primitive_desc_create(&pd, &desc, NULL, api.engine, NULL) == dnnl_success;
  } else {
    dnnl_convolution_desc_t desc;
    ok = api.conv_fwd_desc_init(&desc, dnnl_forward_inference, dnnl_convolution_direct, &ax, &aw,
                                a->bias ? &ub : NULL, &ay, st, dl, pl, pr) == dnnl_success &&
         api.primitive_desc_create(&pd, &desc, NULL, api.engine, NULL) == dnnl_success;
  }
  if (!ok) return NULL; /* a geometry oneDNN does not take: the cpu's own algorithms */
  kiln_conv_dnnl *d = calloc(1, sizeof *d);
  if (!d) {
    api.primitive_desc_destroy(pd);
    return KILN_OOM();
  }
  d->n = a->n, d->co = a->co, d->osize = osize, d->y_cn = a->y_cn, d->threads = threads;
  const dnnl_memory_desc_t *px = api.primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *pw = api.primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *py = api.primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  ok = px && pw && py && api.primitive_create(&d->prim, pd) == dnnl_success &&
       api.stream_create(&d->stream, api.engine, dnnl_stream_default_flags) == dnnl_success &&
       api.memory_create(&d->user_x, &ux, api.engine, DNNL_MEMORY_NONE) == dnnl_success &&
       api.memory_create(&d->user_w, &uw, api.engine, DNNL_MEMORY_NONE) == dnnl_success &&
       api.memory_create(&d->user_y, &uy, api.engine, DNNL_MEMORY_NONE) == dnnl_success &&
       (!a->bias || api.memory_create(&d->user_b, &ub, api.engine, DNNL_MEMORY_NONE) == dnnl_success) &&
       make_move(&ux, px, true, &d->mx) && make_move(&uw, pw, true, &d->mw) && make_move(&uy, py, false, &d->my);
  api.primitive_desc_destroy(pd);
  if (!ok) {
    kiln_conv_dnnl_free(d);
    return NULL;
  }
  *out = d;
  return NULL;
}

typedef struct epi_images {
  const kiln_conv_dnnl *d;
  const kiln_conv_epilogue *epi;
  float *y;
} epi_images;

/* Items: images; the epilogue over each one's [co, osize] planes (NCHW). */
static void epilogue_images(void *vctx, int64_t begin, int64_t end, int thread) {
  (void)thread;
  const epi_images *e = vctx;
  int64_t per = e->d->co * e->d->osize;
  for (int64_t img = begin; img < end; img++)
    kiln_conv_epilogue_apply(e->epi, e->y, img * per, e->d->osize, e->d->co, e->d->osize);
}

kiln_status_t kiln_conv_dnnl_run(kiln_conv_dnnl *d, kiln_threadpool *pool, const kiln_rt_conv_args *a,
                                 const kiln_conv_epilogue *epi) {
  if (epi && d->y_cn) return kiln_error(KILN_INTERNAL, "oneDNN conv: an epilogue over a [co, n, ...] output");
  bool ok = api.memory_set_data_handle(d->user_x, (void *)a->x) == dnnl_success &&
            api.memory_set_data_handle(d->user_w, (void *)a->w) == dnnl_success &&
            api.memory_set_data_handle(d->user_y, a->y) == dnnl_success &&
            (!d->user_b || api.memory_set_data_handle(d->user_b, (void *)a->bias) == dnnl_success);
  if (api.omp_set_num_threads) api.omp_set_num_threads(d->threads);
  dnnl_memory_t x = d->mx.prim ? d->mx.inner : d->user_x, w = d->mw.prim ? d->mw.inner : d->user_w;
  dnnl_memory_t y = d->my.prim ? d->my.inner : d->user_y;
  if (ok && d->mx.prim) {
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, d->user_x}, {DNNL_ARG_TO, x}};
    ok = api.primitive_execute(d->mx.prim, d->stream, 2, r) == dnnl_success;
  }
  if (ok && d->mw.prim) {
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, d->user_w}, {DNNL_ARG_TO, w}};
    ok = api.primitive_execute(d->mw.prim, d->stream, 2, r) == dnnl_success;
  }
  if (ok) {
    dnnl_exec_arg_t c[4] = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}, {DNNL_ARG_BIAS, d->user_b}};
    ok = api.primitive_execute(d->prim, d->stream, d->user_b ? 4 : 3, c) == dnnl_success;
  }
  if (ok && d->my.prim) {
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, y}, {DNNL_ARG_TO, d->user_y}};
    ok = api.primitive_execute(d->my.prim, d->stream, 2, r) == dnnl_success;
  }
  if (ok) ok = api.stream_wait(d->stream) == dnnl_success;
  if (!ok) return kiln_error(KILN_INTERNAL, "oneDNN convolution failed");
  if (epi && epi->fn) {
    epi_images e = {d, epi, a->y};
    kiln_parallel_for(pool, d->n, 1, epilogue_images, &e);
  }
  return NULL;
}

#else /* !KILN_HAVE_DNNL */

bool kiln_conv_dnnl_candidate(const kiln_rt_conv_args *a) {
  (void)a;
  return false;
}
const char *kiln_conv_dnnl_version(void) { return NULL; }
kiln_status_t kiln_conv_dnnl_plan(const kiln_rt_conv_args *a, int threads, kiln_conv_dnnl **out) {
  (void)a, (void)threads;
  *out = NULL;
  return NULL;
}
kiln_status_t kiln_conv_dnnl_run(kiln_conv_dnnl *d, kiln_threadpool *pool, const kiln_rt_conv_args *a,
                                 const kiln_conv_epilogue *epi) {
  (void)d, (void)pool, (void)a, (void)epi;
  return kiln_error(KILN_INTERNAL, "built without oneDNN");
}
void kiln_conv_dnnl_free(kiln_conv_dnnl *d) { (void)d; }

#endif

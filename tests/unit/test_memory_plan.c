/* Memory planning (src/passes/memory_plan.h): hand-checked small plans,
 * thousands of random interval sets checked by kiln_memory_plan_verify (and
 * the verifier checked against deliberately broken plans), in-place rules,
 * alignment, the graph helper on a hand-built graph, and on ResNet-50 and
 * MobileNetV2 exported from torchvision (arena <= 1/4 of all intermediates).
 *
 * The torchvision export needs /usr/bin/python3 with torch and torchvision;
 * without them the model checks print SKIP, unless KILN_REQUIRE_PYTHON=1 makes
 * that a failure. Exports are cached in $TMPDIR/kiln-test-memory-plan-<uid>/. */
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ops/op.h"
#include "passes/memory_plan.h"
#include "runtime/session.h"

static int fails;

#define CHECK(cond, ...)                              \
  do {                                                \
    if (!(cond)) {                                    \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);     \
      printf(__VA_ARGS__);                            \
      printf("\n");                                   \
      fails++;                                        \
    }                                                 \
  } while (0)

/* Consumes st; true if it was OK. */
static bool ok(kiln_status_t st, const char *what) {
  if (!st) return true;
  printf("FAIL %s: %s\n", what, kiln_status_message(st));
  kiln_status_free(st);
  fails++;
  return false;
}

static kiln_mem_buffer buf(int64_t size, int first, int last, int src) {
  return (kiln_mem_buffer){size, 0, first, last, src};
}

/* Plans and verifies; returns the arena size (-1 on failure). */
static int64_t plan_and_verify(const kiln_mem_buffer *b, int n, kiln_memory_plan *plan, const char *what) {
  if (!ok(kiln_memory_plan_compute(b, n, plan), what)) return -1;
  if (!ok(kiln_memory_plan_verify(b, n, plan), what)) return -1;
  return plan->arena_size;
}

/* ---- small cases with known answers ------------------------------------------ */

static void test_small_cases(void) {
  kiln_memory_plan p;
  CHECK(plan_and_verify(NULL, 0, &p, "empty") == 0, "empty plan has arena %lld", (long long)p.arena_size);
  kiln_memory_plan_free(&p);

  /* A chain a -> b -> c, each 100 bytes: a and c can share, b sits above (at 128, aligned). */
  kiln_mem_buffer chain[3] = {buf(100, 0, 1, -1), buf(100, 1, 2, -1), buf(100, 2, 3, -1)};
  CHECK(plan_and_verify(chain, 3, &p, "chain") == 228, "chain arena %lld, want 228", (long long)p.arena_size);
  CHECK(p.total_size == 300 && p.peak_live == 200 && p.n_inplace == 0, "chain totals %lld %lld %d",
        (long long)p.total_size, (long long)p.peak_live, p.n_inplace);
  kiln_memory_plan_free(&p);

  /* The same chain as elementwise steps in place: one buffer for all three. */
  kiln_mem_buffer inplace[3] = {buf(100, 0, 1, -1), buf(100, 1, 2, 0), buf(100, 2, 3, 1)};
  CHECK(plan_and_verify(inplace, 3, &p, "in-place chain") == 100, "in-place arena %lld, want 100",
        (long long)p.arena_size);
  CHECK(p.n_inplace == 2 && p.inplace_of[1] == 0 && p.inplace_of[2] == 1 && p.offsets[0] == p.offsets[2],
        "in-place chain: %d taken", p.n_inplace);
  kiln_memory_plan_free(&p);

  /* The source lives on (read again at step 3): never in place. */
  kiln_mem_buffer lives_on[3] = {buf(100, 0, 3, -1), buf(100, 1, 2, 0), buf(100, 2, 3, -1)};
  CHECK(plan_and_verify(lives_on, 3, &p, "source lives on") >= 0 && p.n_inplace == 0 && p.inplace_of[1] == -1,
        "took the storage of a buffer still live");
  CHECK(p.arena_size == 356, "lives-on arena %lld, want 356 (all three live at step 2)", (long long)p.arena_size);
  kiln_memory_plan_free(&p);

  /* The user is larger than the source: refused. Same size twice: the second claimant is refused. */
  kiln_mem_buffer bigger[2] = {buf(100, 0, 1, -1), buf(200, 1, 2, 0)};
  CHECK(plan_and_verify(bigger, 2, &p, "bigger") >= 0 && p.n_inplace == 0, "in place into a smaller source");
  kiln_memory_plan_free(&p);
  kiln_mem_buffer twice[3] = {buf(64, 0, 1, -1), buf(64, 1, 2, 0), buf(64, 1, 2, 0)};
  CHECK(plan_and_verify(twice, 3, &p, "twice") == 128 && p.n_inplace == 1, "source taken twice (%d)", p.n_inplace);
  kiln_memory_plan_free(&p);

  /* A one-step buffer in the middle of a chain would put its two neighbours
   * in the same bytes at step 1: only one link is taken. */
  kiln_mem_buffer one_step[3] = {buf(64, 0, 1, -1), buf(64, 1, 1, 0), buf(64, 1, 2, 1)};
  CHECK(plan_and_verify(one_step, 3, &p, "one-step middle") >= 0 && p.n_inplace == 1, "one-step chain took %d links",
        p.n_inplace);
  kiln_memory_plan_free(&p);
  kiln_mem_buffer one_step_rev[3] = {buf(64, 1, 2, 1), buf(64, 1, 1, 2), buf(64, 0, 1, -1)};
  CHECK(plan_and_verify(one_step_rev, 3, &p, "one-step middle, reversed") >= 0 && p.n_inplace == 1,
        "one-step chain (reversed) took %d links", p.n_inplace);
  kiln_memory_plan_free(&p);

  /* Greedy by size reaches the lower bound here: c (512) first, a under
   * it in time-disjoint space, b above c, d back at c's end. */
  kiln_mem_buffer lb[4] = {buf(256, 0, 1, -1), buf(256, 1, 2, -1), buf(512, 2, 3, -1), buf(256, 3, 4, -1)};
  CHECK(plan_and_verify(lb, 4, &p, "lower bound") == 768 && p.peak_live == 768, "arena %lld peak %lld, want 768",
        (long long)p.arena_size, (long long)p.peak_live);
  kiln_memory_plan_free(&p);

  /* Gaps are reused: 4096 and 256 live throughout, 1024 only until step 3;
   * the 192 at steps 5-6 must go into the hole the 1024 left, not on top. */
  kiln_mem_buffer fit[4] = {buf(256, 0, 9, -1), buf(1024, 0, 3, -1), buf(4096, 0, 9, -1), buf(192, 5, 6, -1)};
  CHECK(plan_and_verify(fit, 4, &p, "best fit") == 256 + 1024 + 4096, "best-fit arena %lld, want %d",
        (long long)p.arena_size, 256 + 1024 + 4096);
  kiln_memory_plan_free(&p);

  /* Zero-size buffers take no space. */
  kiln_mem_buffer zero[3] = {buf(0, 0, 5, -1), buf(64, 0, 5, -1), buf(0, 1, 2, -1)};
  CHECK(plan_and_verify(zero, 3, &p, "zero size") == 64, "zero-size arena %lld", (long long)p.arena_size);
  kiln_memory_plan_free(&p);
}

static void test_alignment(void) {
  kiln_memory_plan p;
  /* Strict alignment goes first, at offset 0; the default-aligned byte follows at 64. */
  kiln_mem_buffer a[2] = {{1, 0, 0, 1, -1}, {1, 4096, 0, 1, -1}};
  CHECK(plan_and_verify(a, 2, &p, "alignment") == 65 && p.offsets[1] == 0 && p.offsets[0] == 64,
        "alignment: offsets %lld %lld arena %lld", (long long)p.offsets[0], (long long)p.offsets[1],
        (long long)p.arena_size);
  kiln_memory_plan_free(&p);
  /* Odd sizes with alignments 1..4096; every offset a multiple of its alignment. */
  kiln_mem_buffer odd[6] = {{3, 1, 0, 4, -1},   {1000, 256, 0, 2, -1}, {7, 8, 1, 3, -1},
                            {5, 4096, 2, 5, -1}, {33, 0, 3, 5, -1},    {1, 2, 4, 5, -1}};
  if (plan_and_verify(odd, 6, &p, "odd alignments") >= 0)
    for (int i = 0; i < 6; i++) {
      int64_t al = odd[i].alignment ? odd[i].alignment : 64;
      CHECK(p.offsets[i] % al == 0, "buffer %d at %lld not aligned to %lld", i, (long long)p.offsets[i], (long long)al);
    }
  kiln_memory_plan_free(&p);
  /* In place into a source with looser alignment: the chain gets the stricter one. */
  kiln_mem_buffer chain[3] = {{64, 16, 0, 1, -1}, {64, 1024, 1, 2, 0}, {64, 0, 0, 2, -1}};
  CHECK(plan_and_verify(chain, 3, &p, "in-place alignment") >= 0 && p.n_inplace == 1 && p.offsets[0] % 1024 == 0,
        "in-place chain offset %lld not 1024-aligned", (long long)p.offsets[0]);
  kiln_memory_plan_free(&p);
}

static void test_bad_input(void) {
  kiln_memory_plan p;
  kiln_mem_buffer bad[][1] = {{{-1, 0, 0, 1, -1}}, {{8, 48, 0, 1, -1}}, {{8, 0, 2, 1, -1}},
                              {{8, 0, -1, 1, -1}}, {{8, 0, 0, 1, 0}},   {{8, 0, 0, 1, 5}}};
  for (size_t i = 0; i < KILN_ARRAY_SIZE(bad); i++) {
    kiln_status_t st = kiln_memory_plan_compute(bad[i], 1, &p);
    CHECK(st && kiln_status_code_of(st) == KILN_INVALID_ARGUMENT, "bad buffer %zu accepted", i);
    if (st && i == 0) printf("  (error reads: %s)\n", kiln_status_message(st));
    kiln_status_free(st);
    CHECK(!p.offsets && p.n_buffers == 0, "plan not empty after an error");
  }
  kiln_mem_buffer huge[2] = {buf(INT64_MAX / 2 + 1, 0, 1, -1), buf(INT64_MAX / 2 + 1, 0, 1, -1)};
  kiln_status_t st = kiln_memory_plan_compute(huge, 2, &p);
  CHECK(st != NULL, "int64 overflow of the arena not reported");
  kiln_status_free(st);
}

/* The verifier must reject what the planner must never produce. */
static void test_verifier_catches(void) {
  kiln_mem_buffer b[3] = {buf(100, 0, 2, -1), buf(100, 1, 3, -1), buf(100, 2, 4, 1)};
  kiln_memory_plan p;
  if (plan_and_verify(b, 3, &p, "verifier base") < 0) return;
  int64_t saved = p.offsets[1];
  p.offsets[1] = p.offsets[0] + 64; /* overlaps buffer 0 at steps 1-2 */
  kiln_status_t st = kiln_memory_plan_verify(b, 3, &p);
  CHECK(st, "overlap not caught");
  kiln_status_free(st);
  p.offsets[1] = saved + 1; /* misaligned */
  st = kiln_memory_plan_verify(b, 3, &p);
  CHECK(st, "misalignment not caught");
  kiln_status_free(st);
  p.offsets[1] = saved;
  p.arena_size -= 1;
  st = kiln_memory_plan_verify(b, 3, &p);
  CHECK(st, "buffer past the arena not caught");
  kiln_status_free(st);
  p.arena_size += 1;
  p.inplace_of[2] = 0; /* 0 dies at 2, the user is produced at 2, but offsets differ */
  st = kiln_memory_plan_verify(b, 3, &p);
  CHECK(st, "bogus in-place record not caught");
  kiln_status_free(st);
  kiln_memory_plan_free(&p);
}

/* ---- random interval sets ------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}
static int64_t rnd_range(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

static void test_random(void) {
  const int n_sets = 3000;
  int64_t max_n = 0, taken = 0, candidates = 0;
  double ratio_sum = 0, ratio_max = 0;
  int ratio_count = 0;
  clock_t t0 = clock();
  for (int set = 0; set < n_sets && fails < 10; set++) {
    int n = (int)rnd_range(0, set % 10 == 0 ? 600 : 120);
    int steps = (int)rnd_range(1, n + 2);
    int64_t max_size = rnd() % 3 == 0 ? 64 : (int64_t)1 << rnd_range(6, 24);
    kiln_mem_buffer *b = malloc(sizeof *b * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
      int first = (int)rnd_range(0, steps - 1);
      int len = rnd() % 4 == 0 ? (int)rnd_range(0, steps) : (int)rnd_range(0, 3);
      static const int64_t aligns[] = {0, 0, 0, 1, 8, 64, 256, 4096};
      b[i] = (kiln_mem_buffer){rnd() % 20 == 0 ? 0 : rnd_range(1, max_size), aligns[rnd() % 8], first, first + len, -1};
      /* In-place candidates: mostly legal ones (a buffer dying where this one
       * is produced), sometimes arbitrary ones the planner must refuse. */
      if (i > 0 && set % 3 && rnd() % 2) {
        int j = (int)rnd_range(0, i - 1);
        if (rnd() % 4) {
          b[i].first_use = b[j].last_use;
          b[i].last_use = b[i].first_use + (int)rnd_range(0, 3);
          if (rnd() % 3) b[i].size = KILN_MIN(b[i].size, b[j].size);
        }
        b[i].inplace_source = j;
        candidates++;
      }
    }
    kiln_memory_plan p;
    char what[64];
    snprintf(what, sizeof what, "random set %d (n=%d)", set, n);
    if (plan_and_verify(b, n, &p, what) >= 0) {
      int64_t biggest = 0, padded = 0;
      for (int i = 0; i < n; i++) {
        biggest = KILN_MAX(biggest, b[i].size);
        padded += b[i].size + (b[i].alignment ? b[i].alignment : 64);
      }
      CHECK(p.arena_size >= biggest && p.arena_size <= padded, "%s: arena %lld outside [%lld, %lld]", what,
            (long long)p.arena_size, (long long)biggest, (long long)padded);
      if (p.n_inplace == 0)
        CHECK(p.arena_size >= p.peak_live, "%s: arena %lld below the live peak %lld", what, (long long)p.arena_size,
              (long long)p.peak_live);
      /* Quality on sets without in-place candidates and with sizes well above the alignment. */
      if (set % 3 == 0 && p.peak_live > 0 && max_size > 4096) {
        double ratio = (double)p.arena_size / p.peak_live;
        ratio_sum += ratio;
        ratio_max = ratio > ratio_max ? ratio : ratio_max;
        ratio_count++;
      }
      taken += p.n_inplace;
      max_n = KILN_MAX(max_n, n);
    }
    kiln_memory_plan_free(&p);
    free(b);
  }
  double mean_ratio = ratio_count ? ratio_sum / ratio_count : 1.0;
  printf("random: %d sets (up to %lld buffers), %lld in-place candidates, %lld taken; arena / live peak over %d sets:"
         " mean %.3f, max %.3f; %.2fs\n",
         n_sets, (long long)max_n, (long long)candidates, (long long)taken, ratio_count, mean_ratio, ratio_max,
         (double)(clock() - t0) / CLOCKS_PER_SEC);
  CHECK(taken > candidates / 4, "too few in-place reuses taken (%lld of %lld)", (long long)taken, (long long)candidates);
  CHECK(mean_ratio < 1.10, "arena is %.3f x the live peak on average", mean_ratio);
}

/* ---- graph helper on a hand-built graph ---------------------------------------- */

static int value(kiln_graph *g, const char *name, int64_t n_elems) {
  int id = -1;
  if (!ok(kiln_graph_intern_value(g, name, &id), "intern")) return -1;
  int64_t dims[2] = {1, n_elems};
  kiln_type_init_tensor(&g->values[id].type, KILN_DTYPE_F32, 2, dims);
  return id;
}

static void node(kiln_graph *g, const char *op, int n_in, const int *in, int out) {
  int idx;
  char name[32];
  snprintf(name, sizeof name, "n%d", g->n_nodes);
  ok(kiln_graph_add_node(g, name, op, "", n_in, in, 1, &out, &idx), "add node");
}

static void test_graph_helper(void) {
  kiln_graph *g = NULL;
  if (!ok(kiln_graph_new("g", NULL, &g), "graph")) return;
  int x = value(g, "x", 64), w = value(g, "w", 64);
  int a = value(g, "a", 64), b = value(g, "b", 64), c = value(g, "c", 64), d = value(g, "d", 64);
  int e = value(g, "e", 64), f = value(g, "f", 32), y = value(g, "y", 64);
  ok(kiln_graph_add_input(g, x), "input");
  ok(kiln_graph_add_output(g, y), "output");
  ok(kiln_tensor_new(KILN_DTYPE_F32, 2, g->values[w].type.dims, &g->values[w].constant), "constant");
  int cond = value(g, "cond", 1);
  g->values[cond].type.dtype = KILN_DTYPE_BOOL;
  node(g, "Mul", 2, (int[]){x, w}, a);   /* 0: a from a graph input: no in-place (x is not a buffer) */
  node(g, "Relu", 1, (int[]){a}, b);     /* 1: a read again at 4: no in-place */
  node(g, "Sigmoid", 1, (int[]){b}, c);  /* 2: b dies here: c takes b */
  node(g, "Greater", 2, (int[]){c, w}, cond); /* 3: not elementwise-in-place (and bool) */
  node(g, "Add", 2, (int[]){a, c}, d);   /* 4: a and c both die here: d takes a (the first) */
  node(g, "ReduceSum", 1, (int[]){d}, f); /* 5 */
  node(g, "If", 1, (int[]){cond}, e);    /* 6: its branch reads d from outside */
  node(g, "Tanh", 1, (int[]){e}, y);     /* 7: y is a graph output: not a buffer */
  /* 8-10: computable from constants alone, so folded away rather than planned. */
  int k = value(g, "k", 64), wi = value(g, "wi", 64), wk = value(g, "wk", 64);
  node(g, "Constant", 0, NULL, k);
  node(g, "Identity", 1, (int[]){w}, wi);
  node(g, "Mul", 2, (int[]){wi, k}, wk);
  /* Resolved, as a session's graph is (in-place and folding read the op's definition). */
  for (int i = 0; i <= 10; i++) g->nodes[i].op = kiln_op_find("", g->nodes[i].op_type);
  /* The If's then-branch reads d (captured); d must live to node 6. */
  kiln_graph *then_g = NULL;
  kiln_attr *at = NULL;
  if (ok(kiln_graph_new("then", g, &then_g), "subgraph")) {
    int od = value(then_g, "d_outer", 64);
    then_g->values[od].outer_name = kiln_strdup("d");
    ok(kiln_graph_add_output(then_g, od), "sub output");
    if (ok(kiln_node_add_attr(&g->nodes[6], "then_branch", KILN_ATTR_GRAPH, &at), "attr")) at->g = then_g;
    else kiln_graph_free(then_g);
  }

  kiln_mem_buffer *bufs = NULL;
  int *ids = NULL, n = 0, n_unsized = 0, n_folded = 0;
  if (ok(kiln_graph_memory_buffers(g, &bufs, &ids, &n, &n_unsized, &n_folded), "graph buffers")) {
    /* Buffers in node order: a b c cond d f e. */
    int want_ids[] = {a, b, c, cond, d, f, e};
    int want_last[] = {4, 2, 4, 6, 6, 5, 7};
    int want_src[] = {-1, -1, 1, -1, 0, -1, -1};
    CHECK(n == 7 && n_unsized == 0 && n_folded == 3, "graph: %d buffers (%d unsized, %d folded), want 7 (0, 3)", n,
          n_unsized, n_folded);
    for (int i = 0; i < n && i < 7; i++) {
      CHECK(ids[i] == want_ids[i], "buffer %d is value %d, want %d", i, ids[i], want_ids[i]);
      CHECK(bufs[i].first_use == i, "buffer %d first use %d", i, bufs[i].first_use);
      CHECK(bufs[i].last_use == want_last[i], "buffer %d (%s) last use %d, want %d", i, g->values[ids[i]].name,
            bufs[i].last_use, want_last[i]);
      CHECK(bufs[i].inplace_source == want_src[i], "buffer %d (%s) in-place source %d, want %d", i,
            g->values[ids[i]].name, bufs[i].inplace_source, want_src[i]);
    }
    CHECK(bufs[0].size == 256 && bufs[3].size == 1 && bufs[5].size == 128, "graph buffer sizes");
  }
  free(bufs);
  free(ids);
  kiln_memory_plan_report r;
  if (ok(kiln_plan_graph_memory(g, &r), "graph plan")) {
    CHECK(r.n_buffers == 7 && r.n_folded == 3 && r.n_inplace == 2 && r.total_bytes == 5 * 256 + 1 + 128, "graph report: %d buffers, %d in place, %lld bytes",
          r.n_buffers, r.n_inplace, (long long)r.total_bytes);
    printf("hand-built graph: %d buffers, %lld bytes, arena %lld, peak live %lld, %d in place\n", r.n_buffers,
           (long long)r.total_bytes, (long long)r.arena_bytes, (long long)r.peak_live_bytes, r.n_inplace);
  }
  /* Unknown shapes are counted, not planned. */
  g->values[f].type.dims[1] = -1;
  if (ok(kiln_plan_graph_memory(g, &r), "graph plan, unknown dim"))
    CHECK(r.n_buffers == 6 && r.n_unsized == 1, "unknown dim: %d buffers, %d unsized", r.n_buffers, r.n_unsized);
  kiln_graph_free(g);

  /* In place: the elementwise and broadcast classes; not contractions, nor
   * ops of other domains (unresolved: no definition). */
  kiln_node relu = {.op = kiln_op_find("", "Relu")}, add = {.op = kiln_op_find("ai.onnx", "Add")};
  kiln_node conv = {.op = kiln_op_find("", "Conv")}, ms_relu = {.op = kiln_op_find("com.microsoft", "Relu")};
  CHECK(kiln_op_is_inplace_elementwise(&relu) && kiln_op_is_inplace_elementwise(&add) &&
            !kiln_op_is_inplace_elementwise(&conv) && !kiln_op_is_inplace_elementwise(&ms_relu),
        "in-place op classes");
}

/* ---- torchvision models ---------------------------------------------------------- */

static const char *export_script =
    "import os, sys, warnings\n"
    "warnings.simplefilter('ignore')\n"
    "import torch, torchvision\n"
    "torch.set_num_threads(2)\n"
    "out = sys.argv[1]\n"
    "for name in sys.argv[2:]:\n"
    "    path = os.path.join(out, name + '.onnx')\n"
    "    if os.path.exists(path): continue\n"
    "    m = getattr(torchvision.models, name)(weights=None).eval()\n"
    "    tmp = '%s.%d.tmp' % (path, os.getpid())\n"
    "    with torch.no_grad():\n"
    "        torch.onnx.export(m, torch.zeros(1, 3, 224, 224), tmp, opset_version=13, do_constant_folding=True)\n"
    "    os.replace(tmp, path)\n";

static bool file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && sb.st_size > 0;
}

/* Exports the named torchvision models into dir unless already there. */
static bool export_models(const char *dir, const char *const *names, int n) {
  bool all = true;
  char path[2048];
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s.onnx", dir, names[i]);
    all = all && file_exists(path);
  }
  if (all) return true;
  mkdir(dir, 0700);
  char script[2048];
  snprintf(script, sizeof script, "%s/export.py", dir);
  FILE *f = fopen(script, "w");
  if (!f) return false;
  fputs(export_script, f);
  fclose(f);
  char cmd[4096];
  int len = snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script, dir);
  for (int i = 0; i < n; i++) len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %s", names[i]);
  return system(cmd) == 0;
}

/* Loads, specializes to the declared input shapes, plans. */
static bool plan_model(const char *path, kiln_memory_plan_report *r) {
  kiln_model *model = NULL;
  kiln_session *sess = NULL;
  if (!ok(kiln_model_load_file(path, &model), path)) return false;
  bool good = ok(kiln_session_create(model, NULL, &sess), "session");
  const kiln_graph *g = model->ir->graph;
  kiln_value **bound = calloc((size_t)g->n_inputs + 1, sizeof *bound);
  for (int i = 0; good && i < g->n_inputs; i++) {
    const kiln_value_def *v = &g->values[g->inputs[i]];
    if (v->constant) continue;
    kiln_tensor *t = NULL;
    good = ok(kiln_tensor_new(v->type.dtype, v->type.rank, v->type.dims, &t), "input tensor") &&
           ok(kiln_value_from_tensor(t, &bound[i]), "input value");
  }
  const kiln_graph *spec = NULL;
  good = good && ok(kiln_session_specialize(sess, bound, &spec), "specialize") &&
         ok(kiln_plan_graph_memory(spec, r), "plan graph memory");
  for (int i = 0; i < g->n_inputs; i++) kiln_value_free(bound[i]);
  free(bound);
  kiln_session_destroy(sess);
  kiln_model_destroy(model);
  return good;
}

/* The suite's own exports (tests/models/export_models.py writes BUILD/models,
 * and this program is BUILD/tests/test_memory_plan) are used when present. */
static bool suite_models_dir(char *dir, size_t size, const char *const *names, int n) {
  char exe[512];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) return false;
  exe[len] = 0;
  char *slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = 0;
  snprintf(dir, size, "%s/../models", exe);
  char path[2048];
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s.onnx", dir, names[i]);
    if (!file_exists(path)) return false;
  }
  return true;
}

static void test_models(void) {
  const char *tmp = getenv("TMPDIR");
  char dir[1024];
  const char *names[] = {"resnet50", "mobilenet_v2"};
  if (!suite_models_dir(dir, sizeof dir, names, 2))
    snprintf(dir, sizeof dir, "%s/kiln-test-memory-plan-%d", tmp && *tmp ? tmp : "/tmp", (int)getuid());
  clock_t t0 = clock();
  time_t w0 = time(NULL);
  if (!export_models(dir, names, 2)) {
    const char *req = getenv("KILN_REQUIRE_PYTHON");
    if (req && !strcmp(req, "1")) {
      printf("FAIL: could not export torchvision models into %s (needs /usr/bin/python3 with torch and torchvision;"
             " KILN_REQUIRE_PYTHON=1)\n", dir);
      fails++;
    } else {
      printf("SKIP: torchvision models: could not export them into %s (needs /usr/bin/python3 with torch and"
             " torchvision)\n", dir);
    }
    return;
  }
  for (int i = 0; i < 2; i++) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, names[i]);
    kiln_memory_plan_report r;
    if (!plan_model(path, &r)) continue;
    double mb = 1.0 / (1 << 20);
    printf("%s: %d intermediates (%d unsized, %d folded), sum %.2f MiB, arena %.2f MiB (%.1f%% of the sum, %.1fx smaller), "
           "live peak %.2f MiB, %d in place\n",
           names[i], r.n_buffers, r.n_unsized, r.n_folded, r.total_bytes * mb, r.arena_bytes * mb,
           100.0 * r.arena_bytes / (r.total_bytes ? r.total_bytes : 1),
           (double)r.total_bytes / (r.arena_bytes ? r.arena_bytes : 1), r.peak_live_bytes * mb, r.n_inplace);
    CHECK(r.n_buffers > 50 && r.n_unsized == 0, "%s: %d buffers, %d unsized", names[i], r.n_buffers, r.n_unsized);
    CHECK(r.arena_bytes * 4 <= r.total_bytes, "%s: arena %lld > 1/4 of the intermediates (%lld)", names[i],
          (long long)r.arena_bytes, (long long)r.total_bytes);
    CHECK(r.n_inplace > 0, "%s: no in-place reuse", names[i]);
  }
  printf("models: %.2fs cpu, ~%lds wall (models from %s)\n", (double)(clock() - t0) / CLOCKS_PER_SEC,
         (long)(time(NULL) - w0), dir);
}

int main(void) {
  test_small_cases();
  test_alignment();
  test_bad_input();
  test_verifier_catches();
  test_random();
  test_graph_helper();
  test_models();
  printf(fails ? "%d failures\n" : "all memory plan tests passed\n", fails);
  return fails != 0;
}

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "tensor/npy.h"

static const char *run_help =
    "usage: kiln run MODEL.onnx [--device D] [--threads N] [--fp16] [--input NAME=FILE.npy]... [--output-dir DIR]\n"
    "\n"
    "Runs the model on device D (default: cpu; without a C compiler it runs its\n"
    "precompiled kernels) with N threads (default: the number of physical cores); --fp16 keeps\n"
    "float tensors in fp16 on GPUs that support it. Inputs are\n"
    "bound by graph-input name (a .npz file gives a sequence input, its arrays\n"
    "in order; an omitted optional input is empty).\n"
    "With --output-dir the\n"
    "i-th graph output is written to DIR/output_<i>.npy (sequences: DIR/output_<i>.npz);\n"
    "otherwise each output's name, dtype, shape and first values are printed.\n"
    "An output that is an empty optional writes no file.\n";

static void print_values(const kiln_tensor *t, int max) {
  int64_t n = t->numel < max ? t->numel : max;
  printf("  values:");
  for (int64_t i = 0; i < n; i++) {
    if (t->dtype == KILN_DTYPE_STRING) {
      const char *s = ((char **)t->data)[i];
      printf(" \"%s\"", s ? s : "");
    } else if (kiln_dtype_is_float(t->dtype) || kiln_dtype_is_narrow_float(t->dtype)) {
      printf(" %.6g", kiln_load_f64(t->data, t->dtype, i));
    } else if (t->dtype == KILN_DTYPE_U64) {
      printf(" %llu", (unsigned long long)kiln_load_u64(t->data, t->dtype, i));
    } else if (t->dtype == KILN_DTYPE_C64 || t->dtype == KILN_DTYPE_C128) {
      printf(" (complex)");
      break;
    } else {
      printf(" %lld", (long long)kiln_load_i64(t->data, t->dtype, i));
    }
  }
  if (t->numel > n) printf(" ... (%lld values)", (long long)t->numel);
  printf("\n");
}

static void print_output(const char *name, const kiln_value *v) {
  char s[256];
  if (v->kind == KILN_VALUE_TENSOR) {
    printf("%s: %s %s\n", name, kiln_dtype_name(v->tensor->dtype),
           kiln_shape_str(v->tensor->rank, v->tensor->dims, s, sizeof s));
    print_values(v->tensor, 10);
  } else if (v->kind == KILN_VALUE_SEQUENCE) {
    printf("%s: sequence of %d %s tensors\n", name, v->n_items, kiln_dtype_name(v->elem_dtype));
    for (int i = 0; i < v->n_items && i < 4; i++) {
      printf("  [%d] %s\n", i, kiln_shape_str(v->items[i]->rank, v->items[i]->dims, s, sizeof s));
      print_values(v->items[i], 10);
    }
  } else {
    printf("%s: empty optional\n", name);
  }
}

int kiln_cmd_run(int argc, char **argv) {
  if (kiln_cli_wants_help(argc, argv)) {
    fputs(run_help, stdout);
    return 0;
  }
  const char *model_path = NULL, *device = NULL, *out_dir = NULL; /* NULL: the default device */
  int threads = 0;                                                  /* 0: physical cores */
  bool fp16 = false;
  const char *in_names[256];
  const char *in_files[256];
  int n_in = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--fp16")) {
      fp16 = true;
    } else if (!strcmp(a, "--threads")) {
      if (i + 1 >= argc || atoi(argv[i + 1]) < 1) return kiln_cli_failf("--threads needs a positive number");
      threads = atoi(argv[++i]);
    } else if (!strcmp(a, "--device") || !strcmp(a, "--input") || !strcmp(a, "--output-dir")) {
      if (i + 1 >= argc) return kiln_cli_failf("%s needs a value", a);
      const char *v = argv[++i];
      if (!strcmp(a, "--device")) {
        device = v;
      } else if (!strcmp(a, "--output-dir")) {
        out_dir = v;
      } else {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || !eq[1]) return kiln_cli_failf("--input takes NAME=FILE.npy, got '%s'", v);
        if (n_in == 256) return kiln_cli_failf("too many --input options");
        char *name = strndup(v, (size_t)(eq - v));
        in_names[n_in] = name;
        in_files[n_in++] = eq + 1;
      }
    } else if (a[0] == '-' && a[1]) {
      return kiln_cli_failf("unknown option '%s' (see `kiln run --help`)", a);
    } else if (!model_path) {
      model_path = a;
    } else {
      return kiln_cli_failf("unexpected argument '%s'", a);
    }
  }
  if (!model_path) return kiln_cli_failf("run needs a model file (see `kiln run --help`)");

  int rc = 1;
  kiln_model *model = NULL;
  kiln_session *sess = NULL;
  kiln_value *inputs[256] = {0};
  kiln_value **outputs = NULL;
  int n_out = 0;
  kiln_status_t st = kiln_model_load_file(model_path, &model);
  if (!st) {
    kiln_session_options so = kiln_session_options_default();
    so.device = device;
    so.threads = threads;
    if (fp16) so.precision = KILN_PRECISION_FP16;
    st = kiln_session_create(model, &so, &sess);
  }
  for (int i = 0; i < n_in && !st; i++) {
    size_t len = strlen(in_files[i]);
    if (len > 4 && !strcmp(in_files[i] + len - 4, ".npz")) {
      /* A sequence input: the archive's arrays in order. */
      int n = 0;
      char **nm = NULL;
      kiln_tensor **ts = NULL;
      st = kiln_npz_read_file(in_files[i], &n, &nm, &ts);
      /* An empty archive carries no dtype: take the one the model declares. */
      kiln_dtype dt = KILN_DTYPE_F32;
      const kiln_graph *g = model->ir->graph;
      int id = kiln_graph_find_value(g, in_names[i]);
      if (n) dt = ts[0]->dtype;
      else if (id >= 0 && g->values[id].type.dtype) dt = g->values[id].type.dtype;
      if (!st) st = kiln_value_new_sequence(dt, &inputs[i]);
      for (int k = 0; k < n && !st; k++) st = kiln_value_seq_insert(inputs[i], -1, kiln_tensor_retain(ts[k]));
      if (nm) kiln_npz_free(n, nm, ts);
    } else {
      /* An untyped '<V1'/'<V2' array (how np.save writes ml_dtypes' float8,
       * int4, bfloat16, ...) takes the dtype the model declares. */
      const kiln_graph *g = model->ir->graph;
      int id = kiln_graph_find_value(g, in_names[i]);
      kiln_tensor *t;
      st = kiln_npy_read_file_as(in_files[i], id >= 0 ? g->values[id].type.dtype : KILN_DTYPE_UNDEFINED, &t);
      if (!st) st = kiln_value_from_tensor(t, &inputs[i]);
    }
    if (st) st = kiln_status_annotate(st, "input '%s'", in_names[i]);
  }
  if (!st) {
    n_out = kiln_model_output_count(model);
    outputs = calloc((size_t)(n_out ? n_out : 1), sizeof *outputs);
    if (!outputs) st = KILN_OOM();
  }
  if (!st) st = kiln_session_run_values(sess, n_in, in_names, inputs, n_out, outputs);
  if (!st && out_dir) {
    if (mkdir(out_dir, 0777) != 0 && errno != EEXIST)
      st = kiln_error(KILN_IO_ERROR, "cannot create %s: %s", out_dir, strerror(errno));
    for (int i = 0; i < n_out && !st; i++) {
      char path[4096];
      if (outputs[i]->kind == KILN_VALUE_TENSOR) {
        snprintf(path, sizeof path, "%s/output_%d.npy", out_dir, i);
        st = kiln_npy_write_file(path, outputs[i]->tensor);
      } else if (outputs[i]->kind == KILN_VALUE_SEQUENCE) {
        snprintf(path, sizeof path, "%s/output_%d.npz", out_dir, i);
        char **names = calloc((size_t)outputs[i]->n_items + 1, sizeof *names);
        for (int k = 0; names && k < outputs[i]->n_items; k++) names[k] = kiln_strfmt("item_%d", k);
        st = names ? kiln_npz_write_file(path, outputs[i]->n_items, (const char *const *)names,
                                         (const kiln_tensor *const *)outputs[i]->items)
                   : KILN_OOM();
        for (int k = 0; names && k < outputs[i]->n_items; k++) free(names[k]);
        free(names);
      } else {
        /* An empty optional has no array to write: the file is absent. */
        fprintf(stderr, "kiln: note: output %d is an empty optional; no file written\n", i);
      }
    }
  } else if (!st) {
    const kiln_graph *g = model->ir->graph;
    for (int i = 0; i < n_out; i++) print_output(g->values[g->outputs[i]].name, outputs[i]);
  }
  if (st) rc = kiln_cli_fail(st);
  else rc = 0;
  for (int i = 0; i < n_out && outputs; i++) kiln_value_free(outputs[i]);
  free(outputs);
  for (int i = 0; i < n_in; i++) {
    kiln_value_free(inputs[i]);
    free((char *)in_names[i]);
  }
  kiln_session_destroy(sess);
  kiln_model_destroy(model);
  return rc;
}

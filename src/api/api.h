/* api.h — what src/api shares with the CLI (src/cli): the data behind the
 * JSON reports of include/kiln.h, so `kiln devices`, `kiln verify`... print
 * what the API returns instead of computing it again. Internal. */
#ifndef KILN_API_API_H
#define KILN_API_API_H

#include "base/json.h"
#include "runtime/session.h"

/* ---- devices (devices_json.c) ---- */

/* The device features as names ("fp16", "int8-dot", ...), each with a
 * leading space, into buf ("" when none). */
void kiln_device_features_str(unsigned features, char *buf, size_t size);
/* One device's properties as members of the JSON object being written. */
void kiln_device_info_json(kiln_json *j, const kiln_device_info *info);

/* ---- text written through a stream (report.c) ---- */

/* Closes f, an open_memstream of *text, and hands the text to *out_text
 * (the caller's, free()d); KILN_OOM when the stream failed (*text freed). */
kiln_status_t kiln_api_memstream_close(FILE *f, char **text, char **out_text);

/* ---- the model's summary (model_info.c) ---- */

/* One op type and how many nodes have it. */
typedef struct kiln_op_count {
  const char *op; /* borrowed from the model's graph */
  int count;
} kiln_op_count;

/* What `kiln info MODEL` and kiln_model_info_json report beyond the
 * metadata: counted over the model as loaded, control-flow bodies included. */
typedef struct kiln_model_summary {
  int n_nodes, n_main_nodes;
  int64_t params, param_bytes; /* elements and bytes of the initializers */
  int n_initializers;
  int64_t flops;               /* estimated for the declared input shapes; 0: unknown */
  kiln_op_count *hist;         /* owned; most frequent first, then by name */
  int n_hist;
  char **unsupported;          /* owned, each owned: the ops no device runs */
  int n_unsupported;
} kiln_model_summary;

/* Fills *out (zeroed first; on failure freed again). */
kiln_status_t kiln_model_summarize(const kiln_model *model, kiln_model_summary *out);
void kiln_model_summary_free(kiln_model_summary *s);

/* ---- random inputs (random_inputs.c) ---- */

/* Random values for a graph input, as `kiln bench` and `kiln verify` make
 * them: the declared dtype and shape, a symbolic or unknown dim from
 * dim_value(user, name) (-1: not given, then 1), floats normal(0,1),
 * integers uniform in [0, 3], bools 0/1, from *rng (advanced). *out_desc
 * (owned): "x f32[1,3] random normal(0,1), seed S". */
typedef int64_t (*kiln_dim_lookup)(void *user, const char *dim_name);
kiln_status_t kiln_random_input(const kiln_value_def *def, kiln_dim_lookup dim_value, void *user, uint64_t seed,
                                uint64_t *rng, kiln_value **out, char **out_desc);
/* The generator's state for a seed. */
uint64_t kiln_random_inputs_rng(uint64_t seed);

/* Binds the API's (names, tensors) to the model's graph inputs in graph
 * order, random values (seed 0) for those not given (as the CLI makes
 * them; not optional ones nor those with an initializer). *out_names
 * borrowed from the model; values and descriptions owned: free with
 * kiln_bound_inputs_free. */
typedef struct kiln_bound_inputs {
  int n;
  const char **names;
  kiln_value **values;
  char **desc;
} kiln_bound_inputs;
kiln_status_t kiln_bind_inputs(const kiln_model *model, int n_inputs, const char *const *input_names,
                               const kiln_tensor *const *inputs, kiln_bound_inputs *out);
void kiln_bound_inputs_free(kiln_bound_inputs *b);

/* ---- verification (verify.c) ---- */

/* What comparing one value (device against ref) found. */
typedef struct kiln_verify_cmp {
  bool compared, diverges;
  char why[512]; /* set for structural differences (dtype, shape, kind) */
  char dev_type[96], ref_type[96];
  int64_t n_elems, n_bad;
  double max_abs, max_rel; /* max_rel over elements whose ref value is not 0 */
  double worst_ratio;      /* |d - r| / (atol + rtol |r|) of the worst element */
  int64_t worst;           /* its flat index (-1: none) */
  int worst_item;          /* sequence item of the worst element, -1 for tensors */
  double worst_dev, worst_ref;
  int worst_rank;
  int64_t worst_dims[KILN_MAX_RANK];
  bool worst_is_float, worst_is_string;
  char worst_dev_str[64], worst_ref_str[64]; /* string tensors: the worst element (truncated) */
} kiln_verify_cmp;

/* The worst element's index within its tensor, outermost dimension first,
 * into idx (worst_rank entries). */
void kiln_verify_worst_index(const kiln_verify_cmp *r, int64_t idx[KILN_MAX_RANK]);

typedef struct kiln_verify_result {
  const char *device;     /* the device's name (borrowed from the process-wide device) */
  const kiln_graph *ref_g; /* the graph ref ran (owned by ref_sess) */
  kiln_verify_cmp *results; /* per ref_g value id; owned */
  kiln_value **ref_only;    /* per ref_g value id: a value only ref produced (non-NULL), owned */
  int n_values;
  int dev_nodes, dev_values, dev_only;
  double dev_seconds, ref_seconds;
  bool injected;
  kiln_session *dev_sess, *ref_sess; /* owned */
} kiln_verify_result;

/* Runs the model on opts->device and on ref with the same inputs, every
 * node's outputs compared by name at opts' tolerances (kiln verify).
 * inject (or NULL): a node whose output the device side perturbs, for
 * tests of the tool (`kiln verify --inject-error`). *out is filled as far
 * as it got even on error; free it with kiln_verify_result_free. */
kiln_status_t kiln_verify_run(const kiln_model *model, const kiln_verify_options *opts, const char *inject,
                              int n_inputs, const char *const *names, kiln_value *const *inputs,
                              kiln_verify_result *out);
void kiln_verify_result_free(kiln_verify_result *r);
/* kiln_verify_json's object for bound inputs (desc[i]: how input i was made), with opts' tolerances
 * (checked here: both callers' values arrive through it); what `kiln verify --json` prints. inject as
 * for kiln_verify_run. *out_ok (may be NULL): its "ok". */
kiln_status_t kiln_verify_report_json(const kiln_model *model, const kiln_verify_options *opts, const char *inject,
                                      int n_inputs, const char *const *names, kiln_value *const *inputs,
                                      char *const *desc, char **out_json, bool *out_ok);
/* KILN_INVALID_ARGUMENT naming the option when a tolerance is negative or not finite or max_report < 0. */
kiln_status_t kiln_verify_options_check(const kiln_verify_options *opts);

/* ---- bench (bench.c) ---- */

/* Percentile of sorted values with linear interpolation (NumPy's default). */
double kiln_percentile(const double *sorted, int n, double p);
/* Seconds on a monotonic clock. */
double kiln_now_seconds(void);

#endif

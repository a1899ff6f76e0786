/* session.h — internal side of kiln_model / kiln_session (include/kiln.h).
 *
 * A model is an imported, op-resolved, type-inferred graph. A session binds
 * a model to a device list and runs it; kiln_session_run_values is the
 * general form (sequence and optional values too) that the CLI and the
 * conformance test use. A session borrows its model: destroy it first.
 */
#ifndef KILN_RUNTIME_SESSION_H
#define KILN_RUNTIME_SESSION_H

#include "onnx/onnx.h"
#include "runtime/executor.h"

struct kiln_model {
  kiln_model_ir *ir; /* owned */
  /* The graph outputs' types as the file declares them, before inference
   * refines them (owned; n_outputs of them): what kiln_model_output_info
   * reports where a shape is declared, as ONNX Runtime does. */
  kiln_type *declared_outputs;
  struct kiln_fold_cache *fold_cache; /* owned: constants its sessions fold, shared (passes/fold_cache.h) */
};

struct kiln_session {
  const kiln_model *model; /* borrowed */
  kiln_device *devices[8]; /* priority order; process-wide devices */
  int n_devices;
  kiln_node_observer observer; /* optional, for verification tools */
  kiln_node_starter before_node; /* optional, for profilers; gets observer_user */
  void *observer_user;
  /* The model's graph with the last run's input shapes made concrete and
   * types re-inferred (symbolic dims such as `batch` become numbers).
   * Rebuilt when the input shapes change. Owned. */
  kiln_graph *specialized;
  int64_t *spec_signature; /* per graph input: kind, dtype, rank, dims[KILN_MAX_RANK]; owned */
  /* The primary device's compiled form of `specialized` (devices with plan
   * hooks), or NULL when the session interprets node by node. */
  struct kiln_executable *exec;
  char fallback_reason[256]; /* why a compiling device interprets instead, or "" */
  bool keeps_state; /* exec keeps state on the device (kiln_session_keep_state): it must not be replaced */
  int threads;
  kiln_precision precision;
  double created_s; /* monotonic seconds at creation: the profile's origin */
  /* kiln_session_set_profiling: events of the runs since enabled; owned, NULL when off. */
  struct kiln_profiler *profiler;
  const struct kiln_plan *prof_plan; /* the plan prof_step_of indexes */
  int *prof_step_of;                 /* per node of prof_plan's graph: its step, or -1; owned */
};

/* The specialized graph for these bound inputs (one per graph input, NULL
 * where the initializer default applies). Borrowed from the session. */
kiln_status_t kiln_session_specialize(kiln_session *s, kiln_value *const *bound, const kiln_graph **out);
/* Specializes (and on a compiling device, compiles) for the graph's
 * declared input types, symbolic dims taken as 1, with zero-filled inputs:
 * what `kiln info --device` describes and compile-only tests check. */
kiln_status_t kiln_session_specialize_declared(kiln_session *s, const kiln_graph **out_spec);

/* State kept on the device between runs (kiln_plan_keep_state) by the
 * session's compiled plan, named by graph input and graph output: after a
 * first run, which compiles the plan. The plan then stays: a run with
 * inputs of other shapes, which would build another, fails instead of
 * losing the state. KILN_UNSUPPORTED as kiln_plan_keep_state says, or when
 * the session interprets. */
kiln_status_t kiln_session_keep_state(kiln_session *s, int n, const char *const *inputs, const char *const *outputs);
/* kiln_plan_state_read by input names. */
kiln_status_t kiln_session_state_read(kiln_session *s, int n, const char *const *inputs, kiln_tensor *const *into,
                                      bool *out_read);
/* kiln_plan_state_forget (no-op without kept state). */
void kiln_session_state_forget(kiln_session *s);
/* Bytes the last run moved between host and device (0 where the device
 * computes in host memory or the session interprets). */
void kiln_session_transfer_bytes(const kiln_session *s, int64_t *out_uploaded, int64_t *out_read_back);

/* Name of the session's primary device (its query's name); borrowed from
 * the process-wide device. */
const char *kiln_session_device_name(const kiln_session *s);

/* Wraps an imported model: resolves ops and infers types. Takes `ir`. */
kiln_status_t kiln_model_from_ir(kiln_model_ir *ir, kiln_model **out);

/* Runs with general values. inputs borrowed; outputs owned by the caller.
 * Each input is checked against the graph input's declared type. */
kiln_status_t kiln_session_run_values(kiln_session *s, int n_inputs, const char *const *names,
                                      kiln_value *const *inputs, int n_outputs, kiln_value **out_outputs);

/* The same with into (may be NULL; entries may be NULL): tensors the
 * outputs are written into (kiln_session_run_into). */
kiln_status_t kiln_session_run_values_into(kiln_session *s, int n_inputs, const char *const *names,
                                           kiln_value *const *inputs, int n_outputs, kiln_tensor *const *into,
                                           kiln_value **out_outputs);

/* Lists the (domain, op_type) of nodes no device of the session (or ref)
 * can run, recursively, as "Op" or "domain.Op" strings in *out (owned strings). */
kiln_status_t kiln_graph_unsupported_ops(const kiln_graph *g, kiln_ptr_vec *out);

#endif

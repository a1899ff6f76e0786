/* kiln.h — the public C API of kiln, a deep-learning compiler and runtime.
 *
 * Usage, start to finish:
 *
 *   kiln_model *model = NULL;
 *   kiln_status_t st = kiln_model_load_file("mlp.onnx", &model);
 *   if (st) { fprintf(stderr, "%s\n", kiln_status_message(st)); kiln_status_free(st); return 1; }
 *
 *   kiln_session *sess = NULL;
 *   kiln_session_options opts = kiln_session_options_default();  // device "ref"
 *   st = kiln_session_create(model, &opts, &sess);
 *
 *   int64_t dims[2] = {1, 4};
 *   kiln_tensor *x = NULL;
 *   st = kiln_tensor_create(KILN_DTYPE_F32, 2, dims, &x);
 *   float *xd = kiln_tensor_data(x);   // fill the input
 *
 *   const char *in_names[1] = {"x"};
 *   kiln_tensor *outs[1] = {NULL};
 *   st = kiln_session_run(sess, 1, in_names, (const kiln_tensor *const *)&x, 1, outs);
 *   // outs[0] is a new tensor owned by the caller: kiln_tensor_release(outs[0]).
 *
 *   kiln_tensor_release(x); kiln_session_destroy(sess); kiln_model_destroy(model);
 *
 * Errors: every call that can fail returns a kiln_status_t. NULL means success;
 * anything else carries a code and a message and must be freed with
 * kiln_status_free(). The library never aborts on bad input.
 *
 * Ownership: a function that returns an object through an out_* parameter
 * transfers ownership to the caller (destroy/release it); a JSON report
 * returned through `char **out_json` is the caller's too (kiln_string_free),
 * and *out_json is NULL when the call fails. Strings returned as `const
 * char *` are borrowed (from the model, the device or the library). Pointers
 * passed in are borrowed for the duration of the call unless stated
 * otherwise (kiln_tensor_wrap's buffer: for the tensor's life).
 *
 * Thread safety: a kiln_model is immutable after loading and may be shared by
 * threads. A kiln_session may be used by one thread at a time (callers
 * serialize kiln_session_run on the same session); distinct sessions may run
 * concurrently. kiln_tensor objects are not synchronized.
 */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0
#define KILN_VERSION_STRING "0.1.0"

/* Every function of this API is exported from libkiln.so with default
 * visibility; the library is built with -fvisibility=hidden, so nothing
 * else is (the tests that use internal symbols link the static library). */
#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

/* KILN_VERSION_STRING of the library (which may differ from the header a
 * caller was compiled with). A static string, never NULL. */
KILN_API const char *kiln_version(void);

/* Frees a string the API returned through a `char **out_json` or `char
 * **out_text` parameter (kiln_devices_json, kiln_model_dot, ...). NULL is ignored. */
KILN_API void kiln_string_free(char *s);

/* ---- status ---------------------------------------------------------- */

typedef enum kiln_status_code {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1,  /* caller passed something wrong */
  KILN_INVALID_MODEL = 2,     /* malformed or inconsistent model file */
  KILN_UNSUPPORTED = 3,       /* valid, but kiln cannot do it (op, dtype...) */
  KILN_OUT_OF_MEMORY = 4,     /* host or device allocation failed */
  KILN_IO_ERROR = 5,          /* file could not be opened/read/written */
  KILN_OUT_OF_RANGE = 6,      /* index out of range at run time */
  KILN_NOT_FOUND = 7,         /* named thing does not exist */
  KILN_INTERNAL = 8,          /* a bug in kiln */
  KILN_DEVICE_ERROR = 9,      /* device lost, driver failure */
  KILN_TIMEOUT = 10,          /* a run took longer than KILN_RUN_TIMEOUT */
} kiln_status_code;

typedef struct kiln_status_s *kiln_status_t; /* NULL == success */

KILN_API kiln_status_code kiln_status_code_of(kiln_status_t status);
/* Borrowed; valid until kiln_status_free. Never NULL ("ok" for success). */
KILN_API const char *kiln_status_message(kiln_status_t status);
KILN_API void kiln_status_free(kiln_status_t status);

/* ---- dtypes (values match ONNX TensorProto.DataType) ---------------- */

typedef enum kiln_dtype {
  KILN_DTYPE_UNDEFINED = 0,
  KILN_DTYPE_F32 = 1,
  KILN_DTYPE_U8 = 2,
  KILN_DTYPE_I8 = 3,
  KILN_DTYPE_U16 = 4,
  KILN_DTYPE_I16 = 5,
  KILN_DTYPE_I32 = 6,
  KILN_DTYPE_I64 = 7,
  KILN_DTYPE_STRING = 8, /* element = char* (NUL-terminated, owned by the tensor) */
  KILN_DTYPE_BOOL = 9,   /* one byte, 0 or 1 */
  KILN_DTYPE_F16 = 10,
  KILN_DTYPE_F64 = 11,
  KILN_DTYPE_U32 = 12,
  KILN_DTYPE_U64 = 13,
  KILN_DTYPE_C64 = 14,
  KILN_DTYPE_C128 = 15,
  KILN_DTYPE_BF16 = 16,
  /* Narrow types. In memory each element takes ONE BYTE (like ml_dtypes'
   * numpy arrays): a float8/float4 holds its bit code, int4/int2 their value
   * (-8..7, 0..15, -2..1, 0..3). ONNX's packing (two 4-bit or four 2-bit
   * elements per byte, low bits first) exists only in protobuf. */
  KILN_DTYPE_F8E4M3FN = 17,
  KILN_DTYPE_F8E4M3FNUZ = 18,
  KILN_DTYPE_F8E5M2 = 19,
  KILN_DTYPE_F8E5M2FNUZ = 20,
  KILN_DTYPE_U4 = 21,
  KILN_DTYPE_I4 = 22,
  KILN_DTYPE_F4E2M1 = 23,
  KILN_DTYPE_F8E8M0 = 24,
  KILN_DTYPE_U2 = 25,
  KILN_DTYPE_I2 = 26,
} kiln_dtype;

#define KILN_MAX_RANK 12

/* Short name ("f32", "i64", ...). Never NULL. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
/* Bytes per element; 0 for UNDEFINED. STRING reports sizeof(char*). */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);

/* ---- host tensors ------------------------------------------------------ */

/* A reference-counted n-dimensional array in host memory, row-major. */
typedef struct kiln_tensor kiln_tensor;

/* New zero-filled tensor with refcount 1. rank may be 0 (scalar). */
KILN_API kiln_status_t kiln_tensor_create(kiln_dtype dtype, int rank, const int64_t *dims,
                                          kiln_tensor **out_tensor);
/* Drops one reference; frees at zero. NULL is ignored. */
KILN_API void kiln_tensor_release(kiln_tensor *tensor);
KILN_API kiln_tensor *kiln_tensor_retain(kiln_tensor *tensor);
KILN_API kiln_dtype kiln_tensor_dtype(const kiln_tensor *tensor);
KILN_API int kiln_tensor_rank(const kiln_tensor *tensor);
/* Borrowed pointer to KILN_MAX_RANK dims, valid while the tensor lives. */
KILN_API const int64_t *kiln_tensor_dims(const kiln_tensor *tensor);
KILN_API int64_t kiln_tensor_numel(const kiln_tensor *tensor);
/* Borrowed pointer to the elements (row-major). */
KILN_API void *kiln_tensor_data(kiln_tensor *tensor);

/* Called when a tensor made by kiln_tensor_wrap is freed (its refcount
 * reached zero), with the user_data given to kiln_tensor_wrap. */
typedef void (*kiln_release_fn)(void *user_data);

/* A tensor over the caller's contiguous row-major buffer, without a copy,
 * refcount 1. The tensor borrows `data` and never frees it: the caller
 * keeps it valid while the tensor lives, and learns that it is gone when
 * release(user_data) is called, once, as the last reference is dropped
 * (release may be NULL). On failure nothing is kept and release is not
 * called. nbytes must be numel * kiln_dtype_size(dtype) (else
 * KILN_INVALID_ARGUMENT saying what was expected); data may be NULL only
 * when numel is 0; STRING is refused (its elements are owned pointers).
 * Any address aligned to the element size works (a float buffer at 4 mod
 * 16, say): the tensor is a kiln_session_run input like a created one.
 * A session keeps no reference to an input after the run, but an output
 * may be the input tensor itself (a graph input passed through unchanged,
 * on ref): then the release waits for that output's release as well. */
KILN_API kiln_status_t kiln_tensor_wrap(kiln_dtype dtype, int rank, const int64_t *dims, void *data, size_t nbytes,
                                        kiln_release_fn release, void *user_data, kiln_tensor **out_tensor);

/* .npy files (all kiln dtypes; STRING as NumPy unicode; C or Fortran order and either byte order on read).
 * bfloat16 and the narrow types are saved as np.save stores ml_dtypes arrays ('<V2', '<V1'); a '<V2' file
 * loads as bfloat16, a '<V1' one needs its dtype (src/tensor/npy.h: kiln_npy_read_file_as). */
KILN_API kiln_status_t kiln_tensor_load_npy(const char *path, kiln_tensor **out_tensor);
KILN_API kiln_status_t kiln_tensor_save_npy(const kiln_tensor *tensor, const char *path);

/* ---- models -------------------------------------------------------------- */

typedef struct kiln_model kiln_model;

/* Loads an ONNX model. External data files are resolved relative to the
 * model's folder. The file is memory-mapped; weights are not copied twice. */
KILN_API kiln_status_t kiln_model_load_file(const char *path, kiln_model **out_model);
/* Loads from memory; `data` is copied, the caller keeps ownership. */
KILN_API kiln_status_t kiln_model_load_memory(const void *data, size_t size, kiln_model **out_model);
KILN_API void kiln_model_destroy(kiln_model *model);

/* A graph input or output, as declared by the model. Borrowed strings. */
typedef struct kiln_io_info {
  const char *name;
  kiln_dtype dtype;        /* element dtype (for sequences: of the items) */
  int rank;                /* -1 when unknown */
  int64_t dims[KILN_MAX_RANK]; /* -1 for a symbolic/unknown dim */
  const char *dim_names[KILN_MAX_RANK]; /* symbolic names or NULL */
  int is_sequence;         /* 1 for sequence types */
  int is_optional;         /* 1 for optional types */
} kiln_io_info;

KILN_API int kiln_model_input_count(const kiln_model *model);
KILN_API int kiln_model_output_count(const kiln_model *model);
KILN_API kiln_status_t kiln_model_input_info(const kiln_model *model, int index, kiln_io_info *out_info);
KILN_API kiln_status_t kiln_model_output_info(const kiln_model *model, int index, kiln_io_info *out_info);

/* What the model file says about itself. Every string is borrowed from
 * the model (valid until kiln_model_destroy) and never NULL: "" where the
 * file has none. */
typedef struct kiln_model_metadata {
  const char *producer_name, *producer_version, *domain, *doc_string; /* ModelProto's */
  const char *graph_name, *graph_doc_string;                          /* the main GraphProto's */
  int64_t model_version, ir_version;
  int n_opsets; /* opset_import entries: kiln_model_opset */
  int n_props;  /* metadata_props entries: kiln_model_metadata_prop */
} kiln_model_metadata;

KILN_API kiln_status_t kiln_model_metadata_get(const kiln_model *model, kiln_model_metadata *out_meta);
/* Opset import `index` (0 .. n_opsets - 1): its domain ("" for ai.onnx;
 * borrowed from the model) and version. */
KILN_API kiln_status_t kiln_model_opset(const kiln_model *model, int index, const char **out_domain,
                                        int64_t *out_version);
/* metadata_props entry `index` (0 .. n_props - 1), in file order; strings
 * borrowed from the model. */
KILN_API kiln_status_t kiln_model_metadata_prop(const kiln_model *model, int index, const char **out_key,
                                                const char **out_value);

/* ---- devices -------------------------------------------------------------- */

/* Number of devices compiled in and available on this machine. */
KILN_API int kiln_device_count(void);
/* Name ("ref", ...) of device i; borrowed, NULL if out of range. */
KILN_API const char *kiln_device_name(int index);
/* One-line human-readable description of device i; borrowed. */
KILN_API const char *kiln_device_description(int index);

/* ---- sessions -------------------------------------------------------------- */

typedef enum kiln_precision {
  KILN_PRECISION_FP32 = 0, /* float tensors computed in fp32 (the default) */
  KILN_PRECISION_FP16 = 1, /* GPUs with fp16 support keep float tensors in fp16 (storage, and arithmetic where
                              safe; sums accumulate in fp32); other devices ignore it and compute in fp32 */
} kiln_precision;

typedef struct kiln_session_options {
  const char *device; /* NULL: the default device ("cpu" when a C compiler is found, else "ref"); borrowed */
  int threads;        /* 0 = default */
  kiln_precision precision;
} kiln_session_options;

KILN_API kiln_session_options kiln_session_options_default(void);

typedef struct kiln_session kiln_session;

/* The session keeps a reference to the model's data: destroy the session
 * before the model. */
KILN_API kiln_status_t kiln_session_create(const kiln_model *model, const kiln_session_options *options,
                                           kiln_session **out_session);
KILN_API void kiln_session_destroy(kiln_session *session);

/* Runs the model. inputs are bound by graph-input name (borrowed). On success
 * out_outputs[i] receives a new reference to the i-th graph output (the caller
 * releases it); n_outputs must not exceed kiln_model_output_count. Every graph
 * input without an initializer must be given; each is checked for dtype and
 * shape and an error names the input and what was expected. */
KILN_API kiln_status_t kiln_session_run(kiln_session *session, int n_inputs, const char *const *input_names,
                                        const kiln_tensor *const *inputs, int n_outputs,
                                        kiln_tensor **out_outputs);

/* As kiln_session_run, with tensors the outputs are written into: where
 * into[i] is not NULL (into itself may be NULL), output i is copied into
 * that tensor, whose dtype and shape must be the output's (else an error
 * naming the output), and out_outputs[i] receives a new reference to it.
 * A caller that runs a model again and again (a training step: new weights
 * every step) reuses its tensors instead of getting fresh ones, whose first
 * touch costs a page fault every 4 KB. into[i] must not be one of the
 * inputs. */
KILN_API kiln_status_t kiln_session_run_into(kiln_session *session, int n_inputs, const char *const *input_names,
                                             const kiln_tensor *const *inputs, int n_outputs, kiln_tensor *const *into,
                                             kiln_tensor **out_outputs);

/* ---- values: tensors, sequences and optionals ------------------------------
 *
 * Graph inputs and outputs of ONNX's sequence and optional types
 * (SequenceConstruct's result, a Loop's sequence state, Optional) are
 * kiln_values; a value of kind TENSOR holds one tensor, SEQUENCE a list
 * of tensors of one dtype (possibly empty), NONE an optional with nothing
 * in it. A value owns one reference to each tensor it holds. */
typedef struct kiln_value kiln_value;
typedef enum kiln_value_kind {
  KILN_VALUE_TENSOR = 0,
  KILN_VALUE_SEQUENCE = 1,
  KILN_VALUE_NONE = 2, /* an optional with no element */
} kiln_value_kind;

/* A TENSOR value holding t (takes the caller's reference to t). */
KILN_API kiln_status_t kiln_value_from_tensor(kiln_tensor *t, kiln_value **out);
/* An empty SEQUENCE of elem_dtype; items go in with kiln_value_seq_insert
 * at position pos (-1: the end), which takes the caller's reference. */
KILN_API kiln_status_t kiln_value_new_sequence(kiln_dtype elem_dtype, kiln_value **out);
KILN_API kiln_status_t kiln_value_seq_insert(kiln_value *seq, int pos, kiln_tensor *t);
/* A NONE value: an empty optional of a tensor (or, is_sequence, of a
 * sequence) of elem_dtype. */
KILN_API kiln_status_t kiln_value_new_none(kiln_dtype elem_dtype, bool is_sequence, kiln_value **out);
/* Frees the value and drops its references. NULL is ignored. */
KILN_API void kiln_value_free(kiln_value *v);
KILN_API kiln_value_kind kiln_value_kind_of(const kiln_value *v);
/* Tensors held: 1 for a TENSOR, the items of a SEQUENCE, 0 for NONE. */
KILN_API int kiln_value_count(const kiln_value *v);
/* Tensor i (borrowed, valid while the value lives; kiln_tensor_retain to
 * keep it longer); NULL out of range. */
KILN_API kiln_tensor *kiln_value_item(const kiln_value *v, int index);
/* The element dtype (a TENSOR's, a SEQUENCE's items', an optional's declared one; UNDEFINED if unknown). */
KILN_API kiln_dtype kiln_value_elem_dtype(const kiln_value *v);

/* As kiln_session_run with values: inputs borrowed (NULL entries: absent
 * optional inputs), each checked against the graph input's declared type;
 * out_outputs[i] a new value owned by the caller (kiln_value_free). */
KILN_API kiln_status_t kiln_session_run_values(kiln_session *session, int n_inputs, const char *const *input_names,
                                               kiln_value *const *inputs, int n_outputs, kiln_value **out_outputs);

/* ---- reports as JSON ---------------------------------------------------------
 *
 * Each call below writes one JSON object (UTF-8) into *out_json, which the
 * caller frees with kiln_string_free. Numbers JSON cannot hold (NaN, inf)
 * are null; "_ms" / "_us" are milliseconds / microseconds, "_bytes" bytes.
 * Members may be added in later versions; none listed here is removed. */

/* What `kiln info MODEL` prints, as data: the model as loaded, before any
 * device compiles it (subgraphs of control flow counted in "nodes", the
 * histogram and the FLOPs):
 *   {"ir_version": int, "producer_name": str, "producer_version": str, "domain": str,
 *    "model_version": int, "metadata_props": [{"key": str, "value": str}]  (file order),
 *    "opsets": [{"domain": str ("ai.onnx" for ""), "version": int}],
 *    "inputs": [IO] (graph inputs without an initializer), "outputs": [IO],
 *    "nodes": int (all graphs), "main_graph_nodes": int,
 *    "parameters": int (elements of the initializers), "initializers": int, "parameter_bytes": int,
 *    "flops": int (estimated for the declared input shapes; 0: unknown shapes),
 *    "op_histogram": [{"op": str, "count": int}]  (most frequent first, then by name),
 *    "unsupported_ops": [str]  (ops no device runs, "NoSuchOp (node 'n1')"; with any, a session
 *                               cannot be created)}
 * IO: {"name": str, "type": str (kiln's notation: "f32[1,3]", "seq(f32[?])"), "dtype": str,
 *      "shape": null (unknown rank) or [int, str (a symbolic dim's name) or null (unknown)]} */
KILN_API kiln_status_t kiln_model_info_json(const kiln_model *model, char **out_json);

/* The main graph in Graphviz DOT, as `kiln info MODEL --dot` prints it
 * (inputs, nodes with op and name, edges labelled with their types).
 * *out_text is the caller's (kiln_string_free); NULL when the call fails. */
KILN_API kiln_status_t kiln_model_dot(const kiln_model *model, char **out_text);

/* The devices compiled in and found, with what `kiln devices` prints:
 *   {"devices": [{"name": "cpu", "description": str, "vendor": str,
 *                 "driver": str or null, "memory": "host" | "device",
 *                 "memory_bytes": int (0: host memory / unknown),
 *                 "compute_units": int (0: unknown), "subgroup_size": int (0: n/a),
 *                 "features": [str]  ("all-dtypes", "fp16", "int8-dot", "cooperative-matrix",
 *                                     "fused-attention", "recurrent-routine", "attention-routine",
 *                                     "qdq-integer")}],
 *    "absent": [{"name": str, "reason": str}]}   (devices built in but not usable here) */
KILN_API kiln_status_t kiln_devices_json(char **out_json);

/* What `kiln info --device D` prints, as data: the session's compiled form
 * for the shapes of its last run, or, before any run, for the declared
 * input shapes (symbolic dims taken as 1; the session compiles for them
 * then, as a first run would):
 *   {"device": str, "mode": "compiled" | "interpreted" | "fallback",
 *    "fallback_reason": str or null  (why a compiling device interprets the whole graph),
 *    "threads": int (0: default), "precision": "fp32" | "fp16",
 *    "nodes": int (after optimization), "n_kernels": int (generated kernels),
 *    "fused_nodes": int, "nodes_on_ref": int, "device_segments": int,
 *    "kernels": [{"name": str  (the step's name: "Conv", "Add+fused", "host:LSTM"),
 *                 "node": str  (the node that starts the step: a profile event's "name"),
 *                 "kind": "kernel" | "routine" | "dynamic" | "host_only" | "control_flow" | "interpreted",
 *                 "op": str  (the op types, "Conv+Relu"), "ops": [node names], "flops": int}],
 *    "fallbacks": [{"node": str, "op": str, "reason": str}]   (nodes left to ref),
 *    "memory": {"host_memory": bool, "intermediate_bytes": int, "arena_bytes": int,
 *               "weight_bytes_on_device": int}}
 * "interpreted" (device ref) lists every node as its own kernel. Bodies of
 * control flow are not listed (`kiln info` prints them). */
KILN_API kiln_status_t kiln_session_report_json(const kiln_session *session, char **out_json);
/* The same as text, as `kiln info MODEL --device D` prints it after the
 * model's summary: "device D:", the plan (kernels, fusion, nodes on ref,
 * memory), the device's own lines and the plans of control-flow bodies.
 * For people, not parsers: its lines may change between versions.
 * *out_text is the caller's (kiln_string_free). */
KILN_API kiln_status_t kiln_session_describe(const kiln_session *session, char **out_text);

/* Profiling: while enabled, every run of the session records one event per
 * step (a compiled kernel, a host step, or a node on the interpreter; a
 * control-flow node is one event, its bodies' work inside it), timed on
 * the host clock around the step; the steps run on the calling thread. On devices without host memory
 * (vulkan, opencl, cuda) profiled runs submit and wait per step, so they
 * are slower than plain runs. Enabling it again keeps what was recorded;
 * disabling drops it. */
KILN_API kiln_status_t kiln_session_set_profiling(kiln_session *session, int enabled);
/* The events recorded since profiling was enabled or since the last call
 * (which clears them); KILN_INVALID_ARGUMENT when profiling is off:
 *   {"device": str, "runs": int (runs since enabled),
 *    "events": [{"name": str (the node starting the step), "op": str (op types, "Conv+Relu"),
 *                "device": str, "thread": int (small per-process id), "run": int (0-based, since enabled),
 *                "start_us": double (since the session's creation), "dur_us": double}]} */
KILN_API kiln_status_t kiln_session_profile_json(kiln_session *session, char **out_json);

/* How kiln_verify_json compares (`kiln verify`'s options). */
typedef struct kiln_verify_options {
  const char *device; /* NULL: the default device; borrowed */
  double rtol, atol;  /* an element matches when |device - ref| <= atol + rtol |ref|; both >= 0 and finite */
  int max_report;     /* diverging values listed in "later_divergences" after the first (>= 0) */
} kiln_verify_options;

/* device NULL, rtol 1e-3, atol 1e-4, max_report 5 (`kiln verify`'s defaults). */
KILN_API kiln_verify_options kiln_verify_options_default(void);

/* What `kiln verify` does: the model on options->device and on ref with
 * the same inputs, every value both produce (matched by name) compared,
 * |device - ref| <= atol + rtol |ref| per element (f16 values with at
 * least rtol 1e-2 / atol 1e-3, bf16 4e-2 / 1e-2; integers, bools,
 * strings exact; NaN matches NaN). options NULL: kiln_verify_options_default();
 * a negative or non-finite tolerance or a negative max_report is
 * KILN_INVALID_ARGUMENT. Inputs not given (n_inputs may be 0, names and
 * tensors NULL then) are random as the CLI makes them (floats normal(0,1),
 * ints in [0,3], seed 0, symbolic dims 1). An unknown device or bad
 * arguments are a status; a run that fails on one side is reported in
 * "errors" with "ok": false.
 *   {"device": str, "ok": bool, "rtol": double, "atol": double, "inputs": [str (descriptions)],
 *    "first_divergence": null or DIVERGENCE,
 *    "later_divergences": [DIVERGENCE]  (the next max_report diverging values in ref's graph order),
 *    "outputs": [{"name": str, "compared": bool, "max_abs_err": double or null, "ok": bool}],
 *    "compared": int, "diverging": int, "device_only": int, "ref_only": int (values not compared),
 *    "max_abs_err": double, "max_rel_err": double, "device_ms": double, "ref_ms": double,
 *    "device_steps": int (steps the device side ran), "ref_nodes": int (nodes of ref's graph),
 *    "errors": [str]}
 * DIVERGENCE: {"node": str, "op": str, "node_index": int (in ref's graph), "output": str,
 *    "output_index": int, "device_type": str, "ref_type": str,
 *    "node_inputs": [{"index": int, "name": str, "type": str, "source": "constant" | "graph input" | null}],
 *    "max_abs_err": double, "max_rel_err": double, "n_bad": int, "n_elements": int,
 *    "why": str or null (a dtype/shape/kind difference),
 *    "worst": null or {"index": [int], "item": int or null (a sequence's item),
 *                      "device": double or str, "ref": double or str, "is_float": bool},
 *    "tolerance": {"rtol": double, "atol": double}} */
KILN_API kiln_status_t kiln_verify_json(const kiln_model *model, const kiln_verify_options *options, int n_inputs,
                                        const char *const *input_names, const kiln_tensor *const *inputs,
                                        char **out_json);

/* What `kiln bench` measures, on a session of its own made with `options`
 * (NULL: defaults): `warmup` runs, then `iterations` (>= 1) timed runs;
 * with `profile`, `iterations` more runs profiled (kiln_session_set_profiling)
 * whose events are summed per kernel. Inputs as for kiln_verify_json. The
 * cpu device's tiered JIT may still be compiling during short benchmarks:
 * set KILN_JIT=sync in the environment to time compiled kernels only (as
 * `kiln bench` does).
 *   {"device": str, "threads": int, "precision": str, "warmup": int, "iterations": int,
 *    "inputs": [str], "create_ms": double (session creation), "first_run_ms": double,
 *    "median_ms", "mean_ms", "min_ms", "max_ms", "p10_ms", "p90_ms": double,
 *    "throughput_per_s": double,
 *    and with profile: "profiled_ms": double (per run, summed over the kernels),
 *    "kernels": [{"name": str, "op": str, "calls": int (over all profiled runs), "total_ms": double,
 *                 "ms_per_run": double, "percent": double (of profiled_ms)}]  (slowest first)} */
KILN_API kiln_status_t kiln_bench_json(const kiln_model *model, const kiln_session_options *options, int n_inputs,
                                       const char *const *input_names, const kiln_tensor *const *inputs, int warmup,
                                       int iterations, int profile, char **out_json);

/* ---- training -------------------------------------------------------------- */

/* A trainer turns a model into a training step: forward, the loss on one of
 * its outputs, the backward graph (autodiff) and the optimizer's update, as
 * one graph that runs on the session's device like any model. Trainable
 * values: the float initializers the loss depends on through differentiable
 * inputs, minus those whose name matches `freeze`; BatchNormalization runs
 * in training mode (its running statistics are state the step updates) and
 * Dropout with masks drawn by the trainer's random generator (seeded).
 * A trainer is used by one thread at a time. */
typedef enum kiln_loss {
  KILN_LOSS_MSE = 0,          /* mean of (y - t)^2; t shaped like y */
  KILN_LOSS_L1 = 1,           /* mean of |y - t| */
  KILN_LOSS_CROSS_ENTROPY = 2, /* y: logits [N, C, d...]; t: int64 classes [N, d...]; mean over non-ignored */
  KILN_LOSS_NLL = 3,          /* y: log-probabilities [N, C, d...]; t as for cross_entropy */
  KILN_LOSS_BCE_WITH_LOGITS = 4, /* mean of the binary cross-entropy of sigmoid(y) against t in [0, 1] */
} kiln_loss;

typedef enum kiln_optimizer { KILN_OPTIMIZER_SGD = 0, KILN_OPTIMIZER_ADAM = 1, KILN_OPTIMIZER_ADAMW = 2 } kiln_optimizer;

typedef enum kiln_lr_schedule {
  KILN_LR_CONSTANT = 0,
  KILN_LR_STEP = 1,   /* lr * gamma^floor((step - 1) / step_every) */
  KILN_LR_COSINE = 2, /* lr * (1 + cos(pi * (step - 1) / total_steps)) / 2 */
  KILN_LR_WARMUP = 3, /* lr * min(1, step / warmup_steps) */
} kiln_lr_schedule;

typedef struct kiln_trainer_options {
  kiln_loss loss;
  const char *output;       /* the graph output the loss applies to; NULL: the first (borrowed) */
  int has_ignore_index;     /* cross_entropy / nll: targets equal to ignore_index count for nothing */
  int64_t ignore_index;
  float label_smoothing;    /* cross_entropy: 0..1 */
  kiln_optimizer optimizer;
  float lr, momentum, weight_decay, beta1, beta2, eps; /* weight_decay < 0: the optimizer's default */
  int nesterov;
  kiln_lr_schedule schedule;
  int64_t step_every;       /* KILN_LR_STEP */
  float gamma;              /* KILN_LR_STEP */
  int64_t warmup_steps;     /* KILN_LR_WARMUP */
  int64_t total_steps;      /* KILN_LR_COSINE */
  int grad_accum;           /* micro-batches per update (>= 1) */
  float clip_norm;          /* > 0: gradients scaled so their global L2 norm is at most this */
  const char *freeze;       /* POSIX extended regex over initializer names, or NULL (borrowed) */
  const char *device;       /* NULL: the default device (borrowed) */
  int threads;              /* 0: the default */
  uint64_t seed;            /* the generator of Dropout's masks */
} kiln_trainer_options;

/* sgd, lr 0.01, momentum 0, beta1 0.9, beta2 0.999, eps 1e-8, weight decay
 * the optimizer's default (0; AdamW 0.01), constant lr, grad_accum 1. */
KILN_API kiln_trainer_options kiln_trainer_options_default(void);

typedef struct kiln_trainer kiln_trainer;

/* The trainer keeps a reference to nothing of `model` after it returns
 * (it copies the graph and the weights). */
KILN_API kiln_status_t kiln_trainer_create(const kiln_model *model, const kiln_trainer_options *options,
                                           kiln_trainer **out_trainer);
KILN_API void kiln_trainer_destroy(kiln_trainer *trainer);
/* One micro-batch: the graph inputs by name (borrowed; axis 0 the batch)
 * and the targets; the optimizer updates the weights every grad_accum
 * calls. out_loss: the micro-batch's loss (may be NULL). */
KILN_API kiln_status_t kiln_trainer_step(kiln_trainer *trainer, int n_inputs, const char *const *input_names,
                                         const kiln_tensor *const *inputs, const kiln_tensor *targets, double *out_loss);
/* The loss (inference mode: BatchNormalization on its running statistics,
 * no Dropout) on one batch with the current weights, and for
 * cross_entropy / nll the number of samples whose argmax over axis 1 is
 * the target (out_correct, may be NULL), of out_counted (targets not
 * ignored). */
KILN_API kiln_status_t kiln_trainer_evaluate(kiln_trainer *trainer, int n_inputs, const char *const *input_names,
                                             const kiln_tensor *const *inputs, const kiln_tensor *targets, double *out_loss,
                                             int64_t *out_correct, int64_t *out_counted);
/* Updates done so far, micro-batches stepped so far (updates x grad_accum,
 * plus those accumulating), and the learning rate of the next update. */
KILN_API int64_t kiln_trainer_updates(const kiln_trainer *trainer);
KILN_API int64_t kiln_trainer_micro_batches(const kiln_trainer *trainer);
KILN_API double kiln_trainer_lr(const kiln_trainer *trainer);
/* Checkpoints: a directory holding weights.npz (trainable values and
 * running statistics), optimizer.npz (the optimizer's state) and
 * trainer.json (format, update count, micro-batch count, the generator's
 * state); docs/TRAINING.md describes the format. load restores a trainer
 * created from the same model with the same options. */
KILN_API kiln_status_t kiln_trainer_save_checkpoint(const kiln_trainer *trainer, const char *dir);
KILN_API kiln_status_t kiln_trainer_load_checkpoint(kiln_trainer *trainer, const char *dir);
/* The model for inference with the current weights (its initializers
 * updated), as an ONNX file that ONNX Runtime loads. */
KILN_API kiln_status_t kiln_trainer_export(const kiln_trainer *trainer, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */

/* Random inputs (api.h), as `kiln bench` and `kiln verify` make them and
 * kiln_verify_json / kiln_bench_json use for inputs the caller leaves out;
 * and the binding of the API's named tensors to the graph's inputs. */
#include <math.h>

#include "api/api.h"

/* splitmix64: small, fast, good enough for test data. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

static double rng_normal(uint64_t *s) {
  double u1 = rng_uniform(s), u2 = rng_uniform(s);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t kiln_random_inputs_rng(uint64_t seed) { return seed * 0x2545f4914f6cdd1dull + 12345; }

kiln_status_t kiln_random_input(const kiln_value_def *def, kiln_dim_lookup dim_value, void *user, uint64_t seed,
                                uint64_t *rng, kiln_value **out, char **out_desc) {
  const kiln_type *t = &def->type;
  char tb[256];
  if (t->kind == KILN_TYPE_SEQUENCE)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "input '%s' is a sequence (%s): give it explicitly (--input NAME=FILE.npz)", def->name,
                      kiln_type_str(t, tb, sizeof tb));
  if (t->kind != KILN_TYPE_TENSOR || t->rank < 0 || !t->dtype)
    return kiln_error(KILN_INVALID_ARGUMENT, "input '%s' has no declared dtype and rank (%s): give it explicitly",
                      def->name, kiln_type_str(t, tb, sizeof tb));
  kiln_dtype dt = t->dtype;
  bool is_float = kiln_dtype_is_float(dt) || kiln_dtype_is_narrow_float(dt),
       is_int = kiln_dtype_is_int(dt) || kiln_dtype_is_narrow_int(dt), is_bool = dt == KILN_DTYPE_BOOL;
  if (!is_float && !is_int && !is_bool)
    return kiln_error(KILN_UNSUPPORTED, "input '%s' is %s: no random values for that dtype; give it explicitly",
                      def->name, kiln_dtype_name(dt));
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < t->rank; d++) {
    dims[d] = t->dims[d];
    if (dims[d] >= 0) continue;
    int64_t v = dim_value ? dim_value(user, t->dim_params[d]) : -1;
    dims[d] = v >= 0 ? v : 1;
  }
  kiln_tensor *x;
  KILN_RETURN_IF_ERROR(kiln_tensor_new(dt, t->rank, dims, &x), "input '%s'", def->name);
  for (int64_t e = 0; e < x->numel; e++) {
    if (is_float) kiln_store_f64(x->data, dt, e, rng_normal(rng));
    else kiln_store_i64(x->data, dt, e, (int64_t)(rng_next(rng) % (is_bool ? 2 : 4)));
  }
  kiln_status_t st = kiln_value_from_tensor(x, out);
  if (st) {
    kiln_tensor_release(x);
    return st;
  }
  char sb[256];
  *out_desc = kiln_strfmt("%s %s%s random %s, seed %llu", def->name, kiln_dtype_name(dt),
                          kiln_shape_str(t->rank, dims, sb, sizeof sb),
                          is_float ? "normal(0,1)" : is_bool ? "0/1" : "ints in [0,3]", (unsigned long long)seed);
  if (!*out_desc) {
    kiln_value_free(*out);
    *out = NULL;
    return KILN_OOM();
  }
  return NULL;
}

kiln_status_t kiln_bind_inputs(const kiln_model *model, int n_inputs, const char *const *input_names,
                               const kiln_tensor *const *inputs, kiln_bound_inputs *out) {
  memset(out, 0, sizeof *out);
  if (n_inputs < 0 || (n_inputs > 0 && (!input_names || !inputs)))
    return kiln_error(KILN_INVALID_ARGUMENT, "%d inputs with NULL names or tensors", n_inputs);
  const kiln_graph *g = model->ir->graph;
  for (int i = 0; i < n_inputs; i++) {
    if (!input_names[i] || !inputs[i]) return kiln_error(KILN_INVALID_ARGUMENT, "input %d: NULL name or tensor", i);
    int id = kiln_graph_find_value(g, input_names[i]);
    if (id < 0 || !g->values[id].is_graph_input)
      return kiln_error(KILN_INVALID_ARGUMENT, "the model has no input named '%s'", input_names[i]);
  }
  size_t cap = (size_t)(g->n_inputs ? g->n_inputs : 1);
  out->names = calloc(cap, sizeof *out->names);
  out->values = calloc(cap, sizeof *out->values);
  out->desc = calloc(cap, sizeof *out->desc);
  if (!out->names || !out->values || !out->desc) return KILN_OOM();
  uint64_t rng = kiln_random_inputs_rng(0);
  for (int k = 0; k < g->n_inputs; k++) {
    const kiln_value_def *def = &g->values[g->inputs[k]];
    int given = -1;
    for (int i = 0; i < n_inputs; i++)
      if (!strcmp(input_names[i], def->name)) {
        if (given >= 0) return kiln_error(KILN_INVALID_ARGUMENT, "input '%s' given twice", def->name);
        given = i;
      }
    bool optional = def->type.kind == KILN_TYPE_OPTIONAL_TENSOR || def->type.kind == KILN_TYPE_OPTIONAL_SEQUENCE;
    if (given < 0 && (def->constant || optional)) continue; /* the initializer default / an empty optional */
    int slot = out->n;
    out->names[slot] = def->name;
    if (given >= 0) {
      kiln_tensor *t_in = kiln_tensor_retain((kiln_tensor *)inputs[given]);
      kiln_status_t st = kiln_value_from_tensor(t_in, &out->values[slot]);
      if (st) {
        kiln_tensor_release(t_in);
        return st;
      }
      char sb[256];
      const kiln_tensor *t = inputs[given];
      out->desc[slot] = kiln_strfmt("%s %s%s given", def->name, kiln_dtype_name(t->dtype),
                                    kiln_shape_str(t->rank, t->dims, sb, sizeof sb));
      out->n++;
      if (!out->desc[slot]) return KILN_OOM();
    } else {
      KILN_TRY(kiln_random_input(def, NULL, NULL, 0, &rng, &out->values[slot], &out->desc[slot]));
      out->n++;
    }
  }
  return NULL;
}

void kiln_bound_inputs_free(kiln_bound_inputs *b) {
  for (int i = 0; i < b->n; i++) {
    kiln_value_free(b->values[i]);
    free(b->desc[i]);
  }
  free(b->names);
  free(b->values);
  free(b->desc);
  memset(b, 0, sizeof *b);
}

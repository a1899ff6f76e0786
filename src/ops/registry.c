/* The op registry: every family's table, looked up by (domain, op_type). */
#include "ops/op.h"

#include <pthread.h>

#define MAX_OPS 512
static const kiln_op_def *all_ops[MAX_OPS];
static int n_all_ops;
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;

/* by_id[id]: the definition carrying that id (the first, if a table
 * repeats one: test_registry reports that). */
static const kiln_op_def *by_id[KILN_OP_COUNT];

static void add_family(const kiln_op_def *table, int n) {
  for (int i = 0; i < n && n_all_ops < MAX_OPS; i++) {
    all_ops[n_all_ops++] = &table[i];
    if (table[i].id > KILN_OP_UNKNOWN && table[i].id < KILN_OP_COUNT && !by_id[table[i].id]) by_id[table[i].id] = &table[i];
  }
}

static void registry_init(void) {
  int n;
  const kiln_op_def *t;
#define KILN_ADD_FAMILY(name) \
  t = kiln_ops_##name(&n);    \
  add_family(t, n);
  KILN_OP_FAMILIES(KILN_ADD_FAMILY)
#undef KILN_ADD_FAMILY
}

static const char *canonical_domain(const char *d) {
  return (!d || !strcmp(d, "ai.onnx")) ? "" : d;
}

const kiln_op_def *kiln_op_find(const char *domain, const char *op_type) {
  pthread_once(&registry_once, registry_init);
  domain = canonical_domain(domain);
  for (int i = 0; i < n_all_ops; i++)
    if (!strcmp(all_ops[i]->op_type, op_type) && !strcmp(canonical_domain(all_ops[i]->domain), domain))
      return all_ops[i];
  return NULL;
}

static const char *const id_domains[KILN_OP_COUNT] = {
    [KILN_OP_UNKNOWN] = "",
#define KILN_OP_ID_DOMAIN(id, domain, name) [KILN_OP_##id] = domain,
    KILN_OP_IDS(KILN_OP_ID_DOMAIN)
#undef KILN_OP_ID_DOMAIN
};

static const char *const id_names[KILN_OP_COUNT] = {
    [KILN_OP_UNKNOWN] = "?",
#define KILN_OP_ID_NAME(id, domain, name) [KILN_OP_##id] = name,
    KILN_OP_IDS(KILN_OP_ID_NAME)
#undef KILN_OP_ID_NAME
};

const char *kiln_op_id_domain(kiln_op_id id) { return id > 0 && id < KILN_OP_COUNT ? id_domains[id] : ""; }
const char *kiln_op_id_name(kiln_op_id id) { return id > 0 && id < KILN_OP_COUNT ? id_names[id] : "?"; }

const kiln_op_def *kiln_op_by_id(kiln_op_id id) {
  pthread_once(&registry_once, registry_init);
  return id > KILN_OP_UNKNOWN && id < KILN_OP_COUNT ? by_id[id] : NULL;
}

const kiln_op_def *const *kiln_op_all(int *out_n) {
  pthread_once(&registry_once, registry_init);
  *out_n = n_all_ops;
  return all_ops;
}

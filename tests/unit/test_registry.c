/* Every registered op has a reference kernel and an inference rule, and no
 * (domain, op) is registered twice. The op ids (ops/op_ids.h) and the
 * tables agree: every definition carries an id whose domain and name are
 * its own, and every id has exactly one definition (the count check). */
#include <stdio.h>

#include "ops/op.h"

int main(void) {
  int n, fails = 0;
  const kiln_op_def *const *ops = kiln_op_all(&n);
  for (int i = 0; i < n; i++) {
    const kiln_op_def *op = ops[i];
    if (!op->ref_kernel) printf("FAIL %s: no reference kernel\n", op->op_type), fails++;
    if (!op->infer) printf("FAIL %s: no inference rule\n", op->op_type), fails++;
    if (op->max_inputs >= 0 && op->max_inputs < op->min_inputs) printf("FAIL %s: bad arity\n", op->op_type), fails++;
    for (int j = 0; j < i; j++)
      if (!strcmp(ops[j]->op_type, op->op_type) && !strcmp(ops[j]->domain, op->domain))
        printf("FAIL %s: registered twice\n", op->op_type), fails++;
    if (kiln_op_find(op->domain, op->op_type) != op && !fails)
      printf("FAIL %s: lookup finds another definition\n", op->op_type), fails++;
    if (op->id <= KILN_OP_UNKNOWN || op->id >= KILN_OP_COUNT) {
      printf("FAIL %s: no op id (add it to ops/op_ids.h and its table entry)\n", op->op_type), fails++;
      continue;
    }
    if (strcmp(kiln_op_id_name(op->id), op->op_type) || strcmp(kiln_op_id_domain(op->id), op->domain))
      printf("FAIL %s.%s: carries the id of %s.%s\n", op->domain, op->op_type, kiln_op_id_domain(op->id),
             kiln_op_id_name(op->id)), fails++;
    if (kiln_op_by_id(op->id) != op) printf("FAIL %s: its id belongs to another definition too\n", op->op_type), fails++;
  }
  for (int id = KILN_OP_UNKNOWN + 1; id < KILN_OP_COUNT; id++)
    if (!kiln_op_by_id((kiln_op_id)id))
      printf("FAIL op id %s.%s: no definition carries it\n", kiln_op_id_domain(id), kiln_op_id_name(id)), fails++;
  if (n != KILN_OP_COUNT - 1) printf("FAIL %d definitions for %d op ids\n", n, KILN_OP_COUNT - 1), fails++;
  printf("%d ops registered, %d problems\n", n, fails);
  return fails != 0;
}

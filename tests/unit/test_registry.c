/* Every registered op has a reference kernel and an inference rule, and no
 * (domain, op) is registered twice. */
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
  }
  printf("%d ops registered, %d problems\n", n, fails);
  return fails != 0;
}

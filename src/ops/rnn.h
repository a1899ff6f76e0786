/* rnn.h — the attributes of RNN, GRU and LSTM (ops/rnn.c), shared by
 * their reference kernels and the decompose pass that rewrites them into
 * compiled ops (passes/decompose.c), so both read one rule: gate order,
 * activations with their alpha/beta, clip, direction, layout. */
#ifndef KILN_OPS_RNN_H
#define KILN_OPS_RNN_H

#include "ops/op.h"

typedef enum rnn_kind { RNN_SIMPLE, RNN_GRU, RNN_LSTM } rnn_kind;

typedef enum act_kind {
  ACT_RELU,
  ACT_TANH,
  ACT_SIGMOID,
  ACT_AFFINE,
  ACT_LEAKY_RELU,
  ACT_THRESHOLDED_RELU,
  ACT_SCALED_TANH,
  ACT_HARD_SIGMOID,
  ACT_ELU,
  ACT_SOFTSIGN,
  ACT_SOFTPLUS,
} act_kind;

typedef struct rnn_act {
  act_kind kind;
  double alpha, beta;
} rnn_act;

/* Everything the recurrence needs, shapes checked. */
typedef struct rnn_cfg {
  rnn_kind kind;
  int gates;   /* 1, 3, 4 */
  int n_roles; /* activations per direction: 1, 2, 3 */
  int num_dir;
  bool reverse[2]; /* per direction */
  int layout;
  int64_t seq, batch, input, hidden;
  bool has_clip;
  double clip;
  bool linear_before_reset; /* GRU */
  bool input_forget;        /* LSTM */
  rnn_act acts[2][3];
} rnn_cfg;

/* The cell's configuration from the node's attributes (shapes are filled
 * in by the caller). Errors name the attribute. */
kiln_status_t kiln_rnn_config_of(const kiln_node *node, rnn_kind kind, rnn_cfg *c);
/* The activation at x, in double (ref's cells; the cpu's routine uses it
 * for the functions it has no float loop for). */
double kiln_rnn_act_apply(const rnn_act *a, double x);

#endif

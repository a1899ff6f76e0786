/* cpu_rnn_rows_impl.h — the recurrent routine's gate rows (cpu_rnn.c),
 * included once per target: ROWS_FN(name) names this build's functions
 * (name_generic, and name_avx2 between target_avx2_begin.h and _end.h,
 * where kiln_math.h's floor and selects vectorize). No include guard. */

static void ROWS_FN(clip_row)(const rnn_cfg *c, float *v, int64_t n) {
  if (!c->has_clip) return;
  float lo = (float)-c->clip, hi = (float)c->clip;
  for (int64_t i = 0; i < n; i++) v[i] = v[i] < lo ? lo : v[i] > hi ? hi : v[i];
}

/* v = act(v) in place; each common function its own loop (they vectorize). */
static void ROWS_FN(act_row)(const rnn_act *a, float *v, int64_t n) {
  switch (a->kind) {
    case ACT_SIGMOID:
      for (int64_t i = 0; i < n; i++) v[i] = kiln_sigmoidf(v[i]);
      break;
    case ACT_TANH:
      for (int64_t i = 0; i < n; i++) v[i] = kiln_tanhf(v[i]);
      break;
    case ACT_RELU:
      for (int64_t i = 0; i < n; i++) v[i] = v[i] > 0.0f ? v[i] : 0.0f;
      break;
    default:
      for (int64_t i = 0; i < n; i++) v[i] = (float)kiln_rnn_act_apply(a, v[i]);
      break;
  }
}

/* v = act(clip(v)) */
static void ROWS_FN(clip_act_row)(const rnn_cfg *c, const rnn_act *a, float *v, int64_t n) {
  ROWS_FN(clip_row)(c, v, n);
  ROWS_FN(act_row)(a, v, n);
}

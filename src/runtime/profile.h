/* profile.h — a session's profiler (kiln_session_set_profiling): one event
 * per step a run executes, timed on the host clock from the step's start
 * (the before_node hook) to its outputs' existence (the observer hook).
 * A compiled plan reports one step per kernel (named by the node that
 * starts it; a fused group's ops come from the plan), the interpreter one
 * per node. On a device without host memory, observing makes the plan run
 * step by step, one submission each, so each event includes its own
 * submission and wait: profiled runs are slower than plain ones. Used by
 * one thread at a time, like its session. */
#ifndef KILN_RUNTIME_PROFILE_H
#define KILN_RUNTIME_PROFILE_H

#include "ir/graph.h"

typedef struct kiln_profile_event {
  char *name;      /* the node that started the step; owned */
  char *op;        /* its op type, or the fused group's ("Conv+Relu"); owned */
  int thread;      /* small per-process id of the thread that ran the step */
  int run;         /* index of the run since profiling was enabled */
  double start_us; /* since the profiler's origin (the session's creation) */
  double dur_us;
  /* For tools in the process (`kiln bench --profile`): the graph the run
   * ran (the session's, valid until it re-specializes), the index of the
   * node that started the step and of the node whose outputs ended it
   * (another one for a fused epilogue), -1 when not in that graph. */
  const kiln_graph *g;
  int node, end_node;
} kiln_profile_event;

typedef struct kiln_profiler {
  double origin_s; /* monotonic seconds at the session's creation */
  int run;         /* runs begun since enabling (the current one is run - 1) */
  kiln_profile_event *events;
  int n_events, cap_events;
  const kiln_node *start; /* the step being timed, or NULL */
  double t0;
  bool oom;
} kiln_profiler;

/* Monotonic seconds. */
double kiln_profile_now(void);
/* Small per-process id of the calling thread (0 for the first that asks). */
int kiln_profile_thread_id(void);
void kiln_profiler_run_begin(kiln_profiler *p);
void kiln_profiler_before(kiln_profiler *p, const kiln_node *node);
/* ops: the op string for the event ("Conv+Relu"), or NULL for node's op type. */
kiln_status_t kiln_profiler_after(kiln_profiler *p, const kiln_graph *g, const kiln_node *node, const char *ops);
/* Frees the events (the profiler stays enabled). */
void kiln_profiler_clear(kiln_profiler *p);
void kiln_profiler_free(kiln_profiler *p);

#endif

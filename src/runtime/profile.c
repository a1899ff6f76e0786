/* A session's profiler (profile.h). */
#include "runtime/profile.h"

#include <stdatomic.h>
#include <time.h>

double kiln_profile_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kiln_profile_thread_id(void) {
  static atomic_int next_id;
  static _Thread_local int id = -1;
  if (id < 0) id = atomic_fetch_add(&next_id, 1);
  return id;
}

void kiln_profiler_run_begin(kiln_profiler *p) {
  p->run++;
  p->start = NULL;
}

void kiln_profiler_before(kiln_profiler *p, const kiln_node *node) {
  p->start = node;
  p->t0 = kiln_profile_now();
}

static int index_in(const kiln_graph *g, const kiln_node *node) {
  ptrdiff_t i = node - g->nodes;
  return i >= 0 && i < g->n_nodes ? (int)i : -1;
}

kiln_status_t kiln_profiler_after(kiln_profiler *p, const kiln_graph *g, const kiln_node *node, const char *ops) {
  double t1 = kiln_profile_now();
  /* The observer names the node whose outputs a step materialized; the
   * time is the step's that the last before_node started. */
  const kiln_node *start = p->start ? p->start : node;
  double t0 = p->start ? p->t0 : t1;
  p->start = NULL;
  if (p->oom) return KILN_OOM();
  if (p->n_events == p->cap_events) {
    int cap = p->cap_events ? 2 * p->cap_events : 256;
    kiln_profile_event *grown = realloc(p->events, (size_t)cap * sizeof *grown);
    if (!grown) {
      p->oom = true;
      return KILN_OOM();
    }
    p->events = grown;
    p->cap_events = cap;
  }
  kiln_profile_event *e = &p->events[p->n_events];
  e->name = kiln_strdup(start->name);
  e->op = ops ? kiln_strdup(ops)
              : start != node ? kiln_strfmt("%s+%s", start->op_type, node->op_type) : kiln_strdup(start->op_type);
  if (!e->name || !e->op) {
    free(e->name);
    free(e->op);
    p->oom = true;
    return KILN_OOM();
  }
  e->thread = kiln_profile_thread_id();
  e->run = p->run - 1;
  e->start_us = (t0 - p->origin_s) * 1e6;
  e->dur_us = (t1 - t0) * 1e6;
  e->g = g;
  e->node = index_in(g, start);
  e->end_node = index_in(g, node);
  p->n_events++;
  return NULL;
}

void kiln_profiler_clear(kiln_profiler *p) {
  for (int i = 0; i < p->n_events; i++) {
    free(p->events[i].name);
    free(p->events[i].op);
  }
  free(p->events);
  p->events = NULL;
  p->n_events = p->cap_events = 0;
  p->oom = false;
}

void kiln_profiler_free(kiln_profiler *p) {
  if (!p) return;
  kiln_profiler_clear(p);
  free(p);
}

/* kiln_session_set_profiling and kiln_session_profile_json (include/kiln.h)
 * over the session's profiler (runtime/profile.h). */
#include "api/api.h"
#include "runtime/profile.h"

kiln_status_t kiln_session_set_profiling(kiln_session *session, int enabled) {
  if (!session) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_session_set_profiling: session is NULL");
  if (!enabled) {
    kiln_profiler_free(session->profiler);
    session->profiler = NULL;
    return NULL;
  }
  if (session->profiler) return NULL; /* already on: keep what it has recorded */
  kiln_profiler *p = calloc(1, sizeof *p);
  if (!p) return KILN_OOM();
  p->origin_s = session->created_s;
  session->profiler = p;
  return NULL;
}

kiln_status_t kiln_session_profile_json(kiln_session *session, char **out_json) {
  if (!out_json) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_session_profile_json: out_json is NULL");
  *out_json = NULL;
  if (!session) return kiln_error(KILN_INVALID_ARGUMENT, "kiln_session_profile_json: session is NULL");
  kiln_profiler *p = session->profiler;
  if (!p)
    return kiln_error(KILN_INVALID_ARGUMENT,
                      "kiln_session_profile_json: profiling is off (kiln_session_set_profiling(session, 1) first)");
  if (p->oom) {
    kiln_profiler_clear(p);
    return kiln_error(KILN_OUT_OF_MEMORY, "the profiler ran out of memory recording events (they were dropped)");
  }
  const char *device = kiln_session_device_name(session);
  kiln_json j = {0};
  kiln_json_object_begin(&j, NULL);
  kiln_json_string(&j, "device", device);
  kiln_json_int(&j, "runs", p->run);
  kiln_json_array_begin(&j, "events");
  for (int i = 0; i < p->n_events; i++) {
    const kiln_profile_event *e = &p->events[i];
    kiln_json_object_begin(&j, NULL);
    kiln_json_string(&j, "name", e->name);
    kiln_json_string(&j, "op", e->op);
    kiln_json_string(&j, "device", device);
    kiln_json_int(&j, "thread", e->thread);
    kiln_json_int(&j, "run", e->run);
    kiln_json_double(&j, "start_us", e->start_us);
    kiln_json_double(&j, "dur_us", e->dur_us);
    kiln_json_object_end(&j);
  }
  kiln_json_array_end(&j);
  kiln_json_object_end(&j);
  kiln_status_t st = kiln_json_finish(&j, out_json);
  if (!st) kiln_profiler_clear(p);
  return st;
}

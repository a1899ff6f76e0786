/* plan_bodies.h — control-flow bodies as compiled plans of their own.
 *
 * A compiled plan runs If, Loop and Scan as HOST steps: the op's reference
 * kernel keeps the branch choice and the loop state on the host and calls
 * its run_subgraph for each body run. The plan executor answers that call
 * here: the body is
 *
 *   1. closed once: cloned with every name it (or a body nested in it) reads
 *      from an enclosing scope turned into an extra graph input, bound at
 *      each call to the enclosing plan's value (shared, never copied; a view
 *      of the arena on a host-memory device, the readback the enclosing plan
 *      makes before the step on others);
 *   2. specialized per input signature (kind, dtype and shape of every input
 *      and outer value; a signature that differs from an earlier one only
 *      in some dims, a loop-carried value growing each iteration, gets one
 *      general spec with those dims unknown, which every later such
 *      signature fits): types re-inferred with those shapes, optimized like
 *      the session's graph (kiln_plan_optimize_for) and prepared on the
 *      session's device (kiln_plan_prepare: claims, fusion, memory plan,
 *      its own bodies in turn), then cached;
 *   3. run with kiln_plan_execute, or on the interpreter when it could not be
 *      compiled or when its body has met KILN_BODY_MAX_SIGNATURES signatures
 *      (loop-carried values that change shape every iteration): the reason
 *      is kept and described.
 *
 * The bodies of a plan's HOST steps whose types are all known are prepared
 * with the plan (kiln_body_plans_prepare_known), so `kiln info --device`
 * describes them before any run.
 *
 * A kiln_body_plans belongs to one executable and, like it, is used by one
 * thread at a time. It borrows the device, the enclosing graph and its
 * bodies, which must outlive it.
 */
#ifndef KILN_RUNTIME_PLAN_BODIES_H
#define KILN_RUNTIME_PLAN_BODIES_H

#include "runtime/plan.h"

#define KILN_BODY_MAX_SIGNATURES 8

typedef struct kiln_body_plans kiln_body_plans;

/* An empty cache for the bodies of g's control-flow nodes. *out owned:
 * kiln_body_plans_free. */
kiln_status_t kiln_body_plans_create(kiln_device *dev, const kiln_graph *g, const kiln_prepare_options *opts,
                                     kiln_body_plans **out);
void kiln_body_plans_free(kiln_body_plans *bp);

/* Prepares the bodies of plan's HOST steps whose input types g knows fully. */
kiln_status_t kiln_body_plans_prepare_known(kiln_body_plans *bp, const kiln_plan *plan);

/* The enclosing plan's value of id (a value of g), owned by the caller. */
typedef kiln_status_t (*kiln_outer_value_fn)(void *user, int id, kiln_value **out);

/* Runs `body` (a subgraph of node, a node of g) on inputs (borrowed); its
 * outer-scope reads come from outer(user, id). outs[0..n_outputs) owned. */
kiln_status_t kiln_body_plans_run(kiln_body_plans *bp, const kiln_node *node, const kiln_graph *body, int n_inputs,
                                  kiln_value *const *inputs, int n_outputs, kiln_value **outs,
                                  kiln_outer_value_fn outer, void *user);

/* Runs node (a node of g that the plan marked dynamic: its shapes are
 * known only now) on inputs (borrowed, the node's input order) through a
 * plan of the node alone specialized to their shapes and to the values of
 * its parameter inputs (kiln_lower_is_param_input), cached per signature
 * like a body's, prepared with precompiled kernels only. *handled false:
 * the caller runs its host step as before (the specialization still leaves
 * it to ref, the signatures are past the bound, or a parameter is past
 * 256 bytes). outs[0..n_outputs) owned when handled. */
kiln_status_t kiln_body_plans_run_node(kiln_body_plans *bp, const kiln_node *node, kiln_value *const *inputs,
                                       int n_outputs, kiln_value **outs, bool *handled);

/* After runs: how many nodes were specialized to their run-time shapes,
 * and each that some run left to ref (and why); nothing when none was. */
void kiln_body_plans_node_summary(const kiln_body_plans *bp, FILE *out);

/* A line per body signature ("body of Loop 'l' (body) [f32[4,8], ...]: ..."),
 * nested bodies indented below theirs. */
void kiln_body_plans_describe(const kiln_body_plans *bp, FILE *out, int indent);

/* Calls fn for every body plan (plan NULL with why when it runs on the
 * interpreter), nested ones too (depth 0 for the plan's own). */
typedef void (*kiln_body_visitor)(void *user, int depth, const kiln_node *owner, const char *attr,
                                  const kiln_plan *plan, const char *why);
void kiln_body_plans_visit(const kiln_body_plans *bp, int depth, kiln_body_visitor fn, void *user);

#endif

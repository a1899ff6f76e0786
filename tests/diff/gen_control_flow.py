#!/usr/bin/env python3
"""Writes the control-flow cases of kiln's differential test into OUTDIR as
cf_*.onnx: If, nested If, Loop (one with carried tokens that grow) and Scan whose bodies hold fusable ops
(MatMul, Conv, elementwise) and read values of the enclosing graphs, for
kiln_diff to run on a compiling device and on ref with random inputs.

    gen_control_flow.py OUTDIR

Every condition and trip count depends on the data (random inputs), and
every body's ops are ones the compiling devices claim, so each body must be
compiled as a plan of its own: kiln_diff --fail-on-fallback counts a body
node left to ref as a failure, except the scalar control values (the
branch condition, the loop's iteration arithmetic) that the host computes
by design. The exceptions are the *_unrolled cases: a fixed trip count and
a condition that stays true, or a constant If condition, which the
optimizer inlines (passes/inline_control.c), with a list built in the
loop that it folds to tensors (passes/fold_sequences.c); ref runs them as
written. Deterministic: the same files on every run. Needs onnx (1.12+)
and numpy."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
B = TensorProto.BOOL
I64 = TensorProto.INT64
rng = np.random.RandomState(11)


def w(name, *shape, scale=0.3):
    return numpy_helper.from_array((rng.randn(*shape) * scale).astype(np.float32), name)


def c(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def n(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def save(outdir, name, nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)], producer_name='kiln-diff')
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(outdir, name + '.onnx'))


def positive(x, out, pre):
    """out = (mean of x > 0): a scalar condition from the data (the mean compiled, the comparison the host's)."""
    return [n('ReduceMean', [x], [pre + 'mean'], keepdims=0),
            n('Greater', [pre + 'mean', 'zero'], [out])]


def if_matmul(outdir):
    """If on the data's sign; each branch MatMul + elementwise over the outer
    x, an outer weight, and a value the main graph computes (fused there, read
    only by the branch)."""
    then = helper.make_graph(
        [n('MatMul', ['x', 'W1'], ['t0']), n('Add', ['t0', 'u'], ['t1']), n('Relu', ['t1'], ['ty'])],
        'then', [], [vi('ty', F, [4, 16])])
    els = helper.make_graph(
        [n('MatMul', ['u', 'W2'], ['e0']), n('Sigmoid', ['e0'], ['e1']), n('Mul', ['e1', 'x'], ['ey'])],
        'else', [], [vi('ey', F, [4, 16])])
    nodes = [n('Mul', ['x', 'three'], ['u0']), n('Tanh', ['u0'], ['u'])] + positive('x', 'cond', 'c_') + [
        n('If', ['cond'], ['y'], then_branch=then, else_branch=els),
        n('Add', ['y', 'x'], ['out'])]
    save(outdir, 'cf_if_matmul', nodes, [vi('x', F, [4, 16])], [vi('out', F, [4, 16])],
         [w('W1', 16, 16), w('W2', 16, 16), c('three', 3.0), c('zero', 0.0)])


def if_conv(outdir):
    """If choosing between two convolutions with fused epilogues."""
    then = helper.make_graph(
        [n('Conv', ['x', 'Wa', 'ba'], ['t0'], pads=[1, 1, 1, 1]), n('Relu', ['t0'], ['ty'])],
        'then', [], [vi('ty', F, [1, 4, 8, 8])])
    els = helper.make_graph(
        [n('Conv', ['x', 'Wb'], ['e0'], pads=[1, 1, 1, 1]), n('Sigmoid', ['e0'], ['e1']),
         n('Mul', ['e1', 'half'], ['ey'])],
        'else', [], [vi('ey', F, [1, 4, 8, 8])])
    nodes = positive('x', 'cond', 'c_') + [n('If', ['cond'], ['y'], then_branch=then, else_branch=els)]
    save(outdir, 'cf_if_conv', nodes, [vi('x', F, [1, 3, 8, 8])], [vi('y', F, [1, 4, 8, 8])],
         [w('Wa', 4, 3, 3, 3), w('ba', 4), w('Wb', 4, 3, 3, 3), c('half', 0.5), c('zero', 0.0)])


def nested_if(outdir):
    """If inside If: the inner branches read the outer branch's value (one
    level up) and the main graph's x and weights (two levels up)."""
    inner_then = helper.make_graph(
        [n('Add', ['a', 'bias'], ['it0']), n('Relu', ['it0'], ['ity'])], 'inner_then', [], [vi('ity', F, [4, 16])])
    inner_else = helper.make_graph(
        [n('Sigmoid', ['a'], ['ie0']), n('Mul', ['ie0', 'x'], ['iey'])], 'inner_else', [], [vi('iey', F, [4, 16])])
    outer_then = helper.make_graph(
        [n('MatMul', ['x', 'W1'], ['a'])] + positive('a', 'cond2', 'o_') +
        [n('If', ['cond2'], ['ot'], then_branch=inner_then, else_branch=inner_else),
         n('Mul', ['ot', 'x'], ['oty'])],
        'outer_then', [], [vi('oty', F, [4, 16])])
    outer_else = helper.make_graph(
        [n('MatMul', ['x', 'W2'], ['e0']), n('Tanh', ['e0'], ['e1']), n('Add', ['e1', 'x'], ['oey'])],
        'outer_else', [], [vi('oey', F, [4, 16])])
    nodes = [n('ReduceSum', ['x'], ['s'], keepdims=0), n('Greater', ['s', 'zero'], ['cond'])] + [
        n('If', ['cond'], ['y'], then_branch=outer_then, else_branch=outer_else)]
    save(outdir, 'cf_nested_if', nodes, [vi('x', F, [4, 16])], [vi('y', F, [4, 16])],
         [w('W1', 16, 16), w('W2', 16, 16), w('bias', 16), c('zero', 0.0)])


def loop_cond(unrolled):
    """The body's condition: Identity of the input (the optimizer proves
    it stays true and unrolls the loop) or i < 1000 (true for every trip
    here, but only the run tells: the loop stays a Loop)."""
    if unrolled:
        return [n('Identity', ['cond_in'], ['cond_out'])]
    return [n('Less', ['i', 'thousand'], ['cond_out'])]


def loop_scan_outputs(outdir, unrolled=False):
    """Loop with a fixed trip count: a carried state through MatMul + Tanh
    (reading the outer x and W), two scan outputs (the state, and a Conv-free
    epilogue of it)."""
    body = helper.make_graph(
        loop_cond(unrolled) + [
         n('MatMul', ['h', 'W'], ['b0']), n('Add', ['b0', 'x'], ['b1']), n('Tanh', ['b1'], ['h2']),
         n('Relu', ['h2'], ['r0']), n('Mul', ['r0', 'two'], ['s2'])],
        'body', [vi('i', I64, []), vi('cond_in', B, []), vi('h', F, [4, 16])],
        [vi('cond_out', B, []), vi('h2', F, [4, 16]), vi('h2', F, [4, 16]), vi('s2', F, [4, 16])])
    nodes = [n('Loop', ['M', 'true', 'h0'], ['hN', 'hs', 'ss'], body=body), n('Add', ['hN', 'h0'], ['out'])]
    save(outdir, 'cf_loop_scan_outputs' + ('_unrolled' if unrolled else ''), nodes,
         [vi('x', F, [4, 16]), vi('h0', F, [4, 16])],
         [vi('out', F, [4, 16]), vi('hs', F, [5, 4, 16]), vi('ss', F, [5, 4, 16])],
         [w('W', 16, 16, scale=0.5), c('M', 5, np.int64), c('true', True, np.bool_), c('two', 2.0),
          c('thousand', 1000, np.int64)])


def loop_dynamic_trip(outdir):
    """Loop whose trip count is the data's: the body computes its cond from
    the iteration number and an outer count (the number of positive elements
    of x, computed by compiled kernels), capped by M; carried state through
    MatMul + Sigmoid and a scan output."""
    body = helper.make_graph(
        [n('Add', ['i', 'one_i'], ['i1']), n('Less', ['i1', 'count'], ['cond_out']),
         n('MatMul', ['h', 'W'], ['b0']), n('Sigmoid', ['b0'], ['b1']), n('Add', ['b1', 'h'], ['b2']),
         n('Mul', ['b2', 'scale'], ['h2'])],
        'body', [vi('i', I64, []), vi('cond_in', B, []), vi('h', F, [3, 8])],
        [vi('cond_out', B, []), vi('h2', F, [3, 8]), vi('h2', F, [3, 8])])
    # 1 where x > 0, else 0, exactly: ceil(sigmoid(x) - 0.5)
    nodes = [n('Sigmoid', ['x'], ['p0']), n('Sub', ['p0', 'half'], ['p1']), n('Ceil', ['p1'], ['p2']),
             n('ReduceSum', ['p2'], ['countf'], keepdims=0), n('Cast', ['countf'], ['count'], to=I64),
             n('Loop', ['M', '', 'h0'], ['hN', 'hs'], body=body)]
    save(outdir, 'cf_loop_dynamic_trip', nodes, [vi('x', F, [3, 4]), vi('h0', F, [3, 8])],
         [vi('hN', F, [3, 8]), vi('hs', F, ['trips', 3, 8])],
         [w('W', 8, 8, scale=0.5), c('M', 20, np.int64), c('one_i', 1, np.int64), c('scale', 0.7),
          c('half', 0.5)])


def loop_with_if(outdir):
    """If inside a Loop body: the branch taken changes between iterations
    with the data; both branches MatMul over the carried state."""
    then = helper.make_graph([n('MatMul', ['h', 'Wa'], ['t0']), n('Tanh', ['t0'], ['ty'])], 'then', [],
                             [vi('ty', F, [2, 8])])
    els = helper.make_graph([n('MatMul', ['h', 'Wb'], ['e0']), n('Neg', ['e0'], ['ey'])], 'else', [],
                            [vi('ey', F, [2, 8])])
    body = helper.make_graph(
        [n('Identity', ['cond_in'], ['cond_out']), n('ReduceMean', ['h'], ['m'], keepdims=0),
         n('Greater', ['m', 'zero'], ['pos']), n('If', ['pos'], ['hb'], then_branch=then, else_branch=els),
         n('Add', ['hb', 'x'], ['h2'])],
        'body', [vi('i', I64, []), vi('cond_in', B, []), vi('h', F, [2, 8])],
        [vi('cond_out', B, []), vi('h2', F, [2, 8]), vi('m', F, [])])
    nodes = [n('Loop', ['M', 'true', 'x'], ['hN', 'means'], body=body)]
    save(outdir, 'cf_loop_with_if', nodes, [vi('x', F, [2, 8])], [vi('hN', F, [2, 8]), vi('means', F, [6])],
         [w('Wa', 8, 8, scale=0.6), w('Wb', 8, 8, scale=0.6), c('M', 6, np.int64), c('true', True, np.bool_),
          c('zero', 0.0)])


def loop_growing(outdir, unrolled=False):
    """Loop whose carried tokens grow by one each iteration (a greedy
    decoder's): the body's second signature differs from its first in that
    dim only, so one general spec (runtime/plan_bodies.c) serves every
    length; state through MatMul + Tanh, the token an ArgMax of it,
    appended by a Concat whose shape only the run tells."""
    body = helper.make_graph(
        loop_cond(unrolled) + [
         n('MatMul', ['h', 'W'], ['b0']), n('Add', ['b0', 'x'], ['b1']), n('Tanh', ['b1'], ['h2']),
         n('ReduceMax', ['h2'], ['m'], axes=[1], keepdims=0), n('ArgMax', ['m'], ['tok'], axis=0, keepdims=1),
         n('Concat', ['toks', 'tok'], ['toks2'], axis=0)],
        'body', [vi('i', I64, []), vi('cond_in', B, []), vi('h', F, [3, 8]), vi('toks', I64, ['k'])],
        [vi('cond_out', B, []), vi('h2', F, [3, 8]), vi('toks2', I64, ['k1'])])
    nodes = [n('Loop', ['M', 'true', 'x', 't0'], ['hN', 'toksN'], body=body)]
    save(outdir, 'cf_loop_growing' + ('_unrolled' if unrolled else ''), nodes, [vi('x', F, [3, 8])],
         [vi('hN', F, [3, 8]), vi('toksN', I64, ['n'])],
         [w('W', 8, 8, scale=0.6), c('M', 7, np.int64), c('true', True, np.bool_), c('t0', [1], np.int64),
          c('thousand', 1000, np.int64)])


def split_sequence_unrolled(outdir):
    """torch.tensor_split as exported: a fixed-trip Loop Slices x into a
    sequence (SequenceInsert), the tail slice is inserted after it, and the
    graph reads items by constant position (one negative), their count and
    their stack; a constant If picks a branch. All of it folds to tensors."""
    body = helper.make_graph(
        [n('Identity', ['cond_in'], ['cond_out']), n('Mul', ['i', 'four'], ['s0']), n('Add', ['s0', 'four'], ['e0']),
         n('Unsqueeze', ['s0', 'ax0'], ['s1']), n('Unsqueeze', ['e0', 'ax0'], ['e1']),
         n('Slice', ['x', 's1', 'e1', 'ax1'], ['piece']), n('SequenceInsert', ['seq', 'piece'], ['seq2'])],
        'body', [vi('i', I64, []), vi('cond_in', B, []), helper.make_tensor_sequence_value_info('seq', F, None)],
        [vi('cond_out', B, []), helper.make_tensor_sequence_value_info('seq2', F, None)])
    then = helper.make_graph([n('Relu', ['a1'], ['ty'])], 'then', [], [vi('ty', F, [4, 4])])
    els = helper.make_graph([n('Neg', ['a1'], ['ey'])], 'else', [], [vi('ey', F, [4, 4])])
    nodes = [n('SequenceEmpty', [], ['empty'], dtype=F), n('Loop', ['M', 'true', 'empty'], ['seqN'], body=body),
             n('Slice', ['x', 'twelve', 'big', 'ax1'], ['tail']), n('SequenceInsert', ['seqN', 'tail'], ['seqT']),
             n('SequenceAt', ['seqT', 'one'], ['a1']), n('SequenceAt', ['seqT', 'minus1'], ['alast']),
             n('If', ['true'], ['b1'], then_branch=then, else_branch=els), n('Mul', ['b1', 'alast'], ['prod']),
             n('ConcatFromSequence', ['seqN'], ['stack'], axis=0, new_axis=1),
             n('SequenceLength', ['seqT'], ['len'])]
    save(outdir, 'cf_split_sequence_unrolled', nodes, [vi('x', F, [4, 16])],
         [vi('prod', F, [4, 4]), vi('stack', F, [3, 4, 4]), vi('len', I64, [])],
         [c('M', 3, np.int64), c('true', True, np.bool_), c('four', 4, np.int64), c('ax0', [0], np.int64),
          c('ax1', [1], np.int64), c('twelve', [12], np.int64), c('big', [1 << 30], np.int64),
          c('one', 1, np.int64), c('minus1', -1, np.int64)])


def scan(outdir):
    """Scan over the leading axis: state through MatMul + Tanh, one scan output."""
    body = helper.make_graph(
        [n('MatMul', ['s', 'W'], ['b0']), n('Add', ['b0', 'xt'], ['b1']), n('Tanh', ['b1'], ['s2']),
         n('Relu', ['s2'], ['y0']), n('Mul', ['y0', 'k'], ['yt'])],
        'body', [vi('s', F, [2, 8]), vi('xt', F, [2, 8])], [vi('s2', F, [2, 8]), vi('yt', F, [2, 8])])
    nodes = [n('Scan', ['s0', 'xs'], ['sN', 'ys'], body=body, num_scan_inputs=1)]
    save(outdir, 'cf_scan', nodes, [vi('s0', F, [2, 8]), vi('xs', F, [5, 2, 8])],
         [vi('sN', F, [2, 8]), vi('ys', F, [5, 2, 8])], [w('W', 8, 8, scale=0.5), c('k', 1.5)])


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for make in (if_matmul, if_conv, nested_if, loop_scan_outputs, loop_dynamic_trip, loop_with_if, loop_growing, scan,
                 lambda d: loop_scan_outputs(d, True), lambda d: loop_growing(d, True), split_sequence_unrolled):
        make(outdir)


if __name__ == '__main__':
    main()

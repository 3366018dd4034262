"""MXNet bricks reproduce the model: every brick, fed the model's own intermediate tensors with the
model's real weights, gives the model's intermediate outputs (rtol 1e-4, atol 1e-5; in practice
bit-identical, since MXNet runs the same kernels)."""

from __future__ import annotations

import numpy as np
import pytest

import dlbricks
from tests import _mxnet

pytestmark = _mxnet.UNTIMED_MARKS
mx = _mxnet.import_mxnet()

from dlbricks.model_zoo.gluon import build_gluon  # noqa: E402
from dlbricks.mxnet_bricks import brick_to_symbol, model_to_symbol  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
#: Every op of the Gluon vision zoo: residual adds, concatenations (densenet, inception, squeezenet),
#: ceil-mode and count_include_pad=False pooling, clip (ReLU6), Dropout, grouped convolutions.
MODELS = ("resnet18_v1", "resnet18_v2", "squeezenet1.0", "mobilenetv2_0.25", "mobilenet0.25", "densenet121",
          "inceptionv3", "alexnet")


def model_tensors(graph: dlbricks.ModelGraph, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every intermediate tensor of one run of the whole model (``get_internals``)."""
    built = model_to_symbol(graph.to_onnx())
    internals = built.symbol.get_internals()
    names = [n for layer in graph for n in layer.outputs]
    group = mx.sym.Group([internals[n] for n in names])
    args = {k: mx.nd.array(v) for k, v in built.arg_params.items() if k in group.list_arguments()}
    args[graph.inputs[0].name] = mx.nd.array(x)
    aux = {k: mx.nd.array(v) for k, v in built.aux_params.items()}
    exe = group.bind(mx.cpu(), args=args, aux_states=aux, grad_req="null")
    exe.forward(is_train=False)
    values = {n: o.asnumpy() for n, o in zip(names, exe.outputs, strict=True)}
    values[graph.inputs[0].name] = x
    return values


@pytest.mark.parametrize("name", MODELS)
def test_bricks_reproduce_the_model(name: str) -> None:
    graph = build_gluon(name)
    dec = dlbricks.decompose(graph, weights="real")
    x = np.random.default_rng(0).standard_normal(graph.inputs[0].shape).astype(np.float32)
    values = model_tensors(graph, x)
    assert dec.instances is not None and len(dec.instances) == len(graph)
    for occ, brick in zip(dec.occurrences, dec.instances, strict=True):
        symbol, args, aux, inputs = brick_to_symbol(brick, weights="real")
        assert inputs == tuple(f"in{i}" for i in range(len(occ.inputs)))
        args.update({f"in{i}": mx.nd.array(values[t]) for i, t in enumerate(occ.inputs)})
        exe = symbol.bind(mx.cpu(), args=args, aux_states=aux, grad_req="null")
        exe.forward(is_train=False)
        for out, tensor in zip(exe.outputs, occ.outputs, strict=True):
            np.testing.assert_allclose(out.asnumpy(), values[tensor], rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name}: {occ.nodes} -> {tensor}")
    assert all(np.isfinite(v).all() for v in values.values())


def test_synthetic_bricks_run() -> None:
    """Bricks with synthetic weights (the default) bind and give finite outputs."""
    dec = dlbricks.decompose(build_gluon("mobilenetv2_0.25"))
    for brick in dec.bricks.values():
        symbol, args, aux, inputs = brick_to_symbol(brick)
        rng = np.random.default_rng(0)
        args.update({n: mx.nd.array(rng.standard_normal(s.shape).astype(np.float32))
                     for n, s in zip(inputs, brick.inputs, strict=True)})
        exe = symbol.bind(mx.cpu(), args=args, aux_states=aux, grad_req="null")
        exe.forward(is_train=False)
        for out, spec in zip(exe.outputs, brick.outputs, strict=True):
            assert out.shape == spec.shape
            assert np.isfinite(out.asnumpy()).all(), brick.op_type


def test_brick_inputs_carry_the_statistics_of_the_model_tensors() -> None:
    """Every feature map a brick reads carries the statistics of that tensor in a run of the model on
    the seeded standard normal input a whole model is measured with (also after a database round
    trip); the model's own input carries none."""
    from dlbricks.inputs import random_inputs
    from dlbricks.types import ValueStatistics

    graph = build_gluon("mobilenetv2_0.25")
    values = model_tensors(graph, random_inputs(graph.inputs)[graph.inputs[0].name])
    dec = dlbricks.decompose(graph)
    checked = 0
    for occ in dec.occurrences:
        brick = dec.bricks[occ.signature]
        stored = dlbricks.Brick.from_bytes(brick.to_bytes()).inputs
        for spec, tensor, after in zip(brick.inputs, occ.inputs, stored, strict=True):
            if tensor == graph.inputs[0].name:
                assert spec.statistics is None
                continue
            expected = ValueStatistics.of(values[tensor])
            assert spec.statistics is not None and expected is not None, (occ.nodes, tensor)
            assert after.statistics == spec.statistics
            if occ.index == min(o.index for o in dec.occurrences if o.signature == occ.signature):
                np.testing.assert_allclose(spec.statistics.mean, expected.mean, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(spec.statistics.std, expected.std, rtol=1e-4, atol=1e-5)
                assert spec.statistics.correlation == pytest.approx(expected.correlation, abs=1e-6)
                checked += 1
    assert checked > 50

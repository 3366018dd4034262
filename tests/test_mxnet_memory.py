"""Memory of loading and decomposing MXNet exports: bounded by the parameters, decompositions unchanged."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dlbricks
from dlbricks.inputs import random_inputs
from dlbricks.mxnet_frontend import STATISTICS_BLOCK, feature_statistics, load_mxnet
from dlbricks.types import ValueStatistics
from tests import _mxnet

pytestmark = _mxnet.UNTIMED_MARKS
mx = _mxnet.import_mxnet()

#: sha256 of the sorted brick signatures of :func:`small_export`, as the loader that converted
#: every weight before running the model gave them (and the number of unique bricks).
SMALL_SIGNATURES = ("aa76e573d1f39662d49700af2af078c56f1e8860f33cb7e3fb49c4d6d1dc2864", 6)


def _save(symbol: mx.sym.Symbol, prefix: Path, shape: tuple[int, ...], scale: float = 1.0) -> Path:
    """``prefix-symbol.json`` and ``prefix-0000.params`` (seeded values, positive variances)."""
    symbol.save(f"{prefix}-symbol.json")
    arg_shapes, _, aux_shapes = symbol.infer_shape(data=shape)
    rng = np.random.default_rng(0)
    params = {f"arg:{n}": mx.nd.array(rng.standard_normal(s).astype(np.float32) * scale)
              for n, s in zip(symbol.list_arguments(), arg_shapes, strict=True) if n != "data"}
    params.update({f"aux:{n}": mx.nd.array(rng.random(s).astype(np.float32) + 0.5)
                   for n, s in zip(symbol.list_auxiliary_states(), aux_shapes, strict=True)})
    mx.nd.save(f"{prefix}-0000.params", params)
    return Path(f"{prefix}-symbol.json")


def small_export(folder: Path) -> Path:
    """conv -> bn -> relu -> pool -> conv -> fc, exported with seeded weights."""
    x = mx.sym.var("data")
    x = mx.sym.Convolution(x, kernel=(3, 3), num_filter=8, pad=(1, 1), name="conv")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn")
    x = mx.sym.Activation(x, act_type="relu", name="relu")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    x = mx.sym.Convolution(x, kernel=(1, 1), num_filter=16, name="conv2")
    x = mx.sym.FullyConnected(x, num_hidden=10, name="fc")
    return _save(x, folder / "small", (1, 3, 16, 16))


def large_weights_export(folder: Path) -> Path:
    """A conv, then four 2048-wide fully connected layers: 84 MB of weights, small activations."""
    x = mx.sym.var("data")
    x = mx.sym.Convolution(x, kernel=(3, 3), num_filter=16, pad=(1, 1), name="conv")
    x = mx.sym.BatchNorm(x, fix_gamma=False, name="bn")
    x = mx.sym.Activation(x, act_type="relu", name="relu")
    for i in range(4):
        x = mx.sym.FullyConnected(x, num_hidden=2048, name=f"fc{i}")
        x = mx.sym.Activation(x, act_type="relu", name=f"fcrelu{i}")
    return _save(x, folder / "large", (1, 3, 16, 16), scale=0.01)


def _signatures(graph: dlbricks.ModelGraph) -> tuple[str, int]:
    bricks = dlbricks.decompose(graph).bricks
    return hashlib.sha256("".join(sorted(bricks)).encode()).hexdigest(), len(bricks)


def test_decomposition_is_unchanged(tmp_path: Path) -> None:
    symbol = small_export(tmp_path)
    graph = dlbricks.load_model(symbol, input_shapes={"data": (1, 3, 16, 16)})
    assert _signatures(graph) == SMALL_SIGNATURES
    # the same weights given as numpy arrays (copied into MXNet) give the same model
    params = {k: v.asnumpy() for k, v in mx.nd.load(str(tmp_path / "small-0000.params")).items()}
    again = load_mxnet(symbol, params=params, input_shapes={"data": (1, 3, 16, 16)})
    assert _signatures(again) == SMALL_SIGNATURES
    assert again.source.sha256 == graph.source.sha256
    assert {k: v.statistics for k, v in again.tensors.items()} == {k: v.statistics for k, v in graph.tensors.items()}
    conv = graph.constant_array("conv_weight")
    np.testing.assert_array_equal(conv, params["arg:conv_weight"])


def test_statistics_of_large_feature_maps_are_those_of_the_whole_tensor() -> None:
    rng = np.random.default_rng(1)
    values = (rng.standard_normal((3, 5, 300, 299)) * np.arange(1, 6)[None, :, None, None] + 2).astype(np.float32)
    assert values.size > STATISTICS_BLOCK
    values[:, 0] = 7.0  # a constant channel: std 0
    blocked, whole = feature_statistics(values), ValueStatistics.of(values)
    assert blocked.mean == whole.mean and blocked.std == whole.std
    assert blocked.correlation == pytest.approx(whole.correlation, abs=1e-12)
    small = values[:1, :, :10, :10]
    assert feature_statistics(small) == ValueStatistics.of(small)
    assert feature_statistics(values[0, 0]) is None and feature_statistics(values.astype(np.int32)) is None


def _peak_rss(args: list[str]) -> int:
    """Peak resident memory (bytes) of a command, from ``os.wait4``."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, proc.stderr.read().decode()[-2000:]
    return usage.ru_maxrss * 1024


def test_decompose_peak_memory_is_within_three_times_the_parameters(tmp_path: Path) -> None:
    symbol = large_weights_export(tmp_path)
    params = (tmp_path / "large-0000.params").stat().st_size
    env_code = "import os; os.environ.setdefault('MXNET_SUBGRAPH_BACKEND', 'NONE'); "
    base = _peak_rss([sys.executable, "-c", env_code + "import mxnet, dlbricks, dlbricks.cli"])
    peak = _peak_rss([sys.executable, "-c", env_code + "import sys; from dlbricks.cli import main; main()",
                      "decompose", str(symbol), "--input-shape", "data=1,3,16,16", "--json"])
    assert (peak - base) <= 3 * params, f"{(peak - base) / 1e6:.0f} MB above the imports for {params / 1e6:.0f} MB"


def test_statistics_come_from_one_op_at_a_time_and_leave_the_weights_as_read(tmp_path: Path) -> None:
    x = mx.sym.var("data")
    x = mx.sym.Convolution(x, kernel=(3, 3), num_filter=8, pad=(1, 1), name="conv")
    x = mx.sym.BatchNorm(x, fix_gamma=True, name="bn")  # MXNet's kernel sets a fixed gamma to 1 in place
    x = mx.sym.Activation(x, act_type="relu", name="relu")
    x = mx.sym.Pooling(x, kernel=(2, 2), stride=(2, 2), pool_type="max", name="pool")
    symbol = _save(x, tmp_path / "fixed", (1, 3, 16, 16))
    stored = {k.split(":", 1)[1]: v.asnumpy() for k, v in mx.nd.load(str(tmp_path / "fixed-0000.params")).items()}
    graph = dlbricks.load_model(symbol, input_shapes={"data": (1, 3, 16, 16)})
    for name, value in stored.items():
        np.testing.assert_array_equal(graph.constant_array(name), value)
    # the statistics are those of a bound executor's outputs on the same input
    data = mx.nd.array(random_inputs(graph.inputs)["data"])
    internals = x.get_internals()
    outputs = ["conv_output", "bn_output", "relu_output", "pool_output"]
    group = mx.sym.Group([internals[n] for n in outputs])
    args = {k: mx.nd.array(v) for k, v in stored.items() if k in group.list_arguments()}
    aux = {k: mx.nd.array(v) for k, v in stored.items() if k in group.list_auxiliary_states()}
    executor = group.bind(mx.cpu(), args={**args, "data": data}, aux_states=aux, grad_req="null")
    for name, array in zip(outputs, executor.forward(is_train=False), strict=True):
        expected = ValueStatistics.of(array.asnumpy())
        got = graph.tensors[name].statistics
        assert got.mean == pytest.approx(expected.mean, rel=1e-5, abs=1e-6), name
        assert got.std == pytest.approx(expected.std, rel=1e-5, abs=1e-6), name

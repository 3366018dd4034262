"""The onnxruntime backend on real single-node models, its configuration, and the system info."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dlbricks
from dlbricks import InvalidArgumentError
from dlbricks.errors import BackendUnavailableError, ShapeInferenceError, UnrunnableBrickError
from dlbricks.generators import Budget, OrtConfig, benchmark, collect_system_info
from dlbricks.generators.api import measure
from dlbricks.generators.floor import measure_floor
from dlbricks.generators.inputs import VALUE_RANGES_KEY, random_inputs
from dlbricks.generators.ort import (
    MAX_COLD_COPIES,
    MIN_COLD_WEIGHT_BYTES,
    THREAD_POOLS_ENV,
    USE_ENV_ALLOCATORS,
    OrtBackend,
    _seeded_inputs,
    cold_copies,
    installed_onnxruntimes,
    no_cuda_message,
    session_copies,
    weight_bytes,
)
from dlbricks.generators.system import SystemInfo

HAS_CUDA = "CUDAExecutionProvider" in ort.get_available_providers()


def _model(nodes, inputs, outputs, initializers=(), ranges=None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if ranges is not None:
        model.metadata_props.add(key=VALUE_RANGES_KEY, value=json.dumps(ranges))
    return model


def _f32(name: str, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def conv_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    return _model([node], [_f32("x", [1, 8, 14, 14])], [_f32("y", [1, 16, 14, 14])], [w])


def matmul_model() -> onnx.ModelProto:
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    return _model([node], [_f32("a", [4, 32, 64]), _f32("b", [64, 48])], [_f32("y", [4, 32, 48])])


def gather_model(high: int | None = 1000) -> onnx.ModelProto:
    table = numpy_helper.from_array(np.ones((1000, 32), np.float32), "table")
    node = helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [8, 16])
    ranges = None if high is None else {"idx": [0, high]}
    return _model([node], [idx], [_f32("y", [8, 16, 32])], [table], ranges)


def softmax_model() -> onnx.ModelProto:
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    return _model([node], [_f32("x", [2, 4, 64, 64])], [_f32("y", [2, 4, 64, 64])])


MODELS = {
    "conv": (conv_model, [(1, 16, 14, 14)]),
    "matmul": (matmul_model, [(4, 32, 48)]),
    "gather": (gather_model, [(8, 16, 32)]),
    "softmax": (softmax_model, [(2, 4, 64, 64)]),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_single_node_models_run_and_are_timed(name: str) -> None:
    build, shapes = MODELS[name]
    prepared = OrtBackend().prepare(build(), OrtConfig())
    prepared.run()
    assert [out.shape for out in prepared.outputs()] == shapes
    prepared.close()
    budget = Budget.quick()
    m = measure(build(), budget=budget)
    assert m.status == "ok" and m.error is None
    assert m.median_s > 0 and m.min_s <= m.median_s <= m.p99_s
    assert m.n >= budget.min_runs
    assert m.backend == "onnxruntime" and m.config == OrtConfig()


def test_relocate_moves_the_buffers_and_keeps_the_results() -> None:
    prepared = OrtBackend().prepare(conv_model(), OrtConfig())
    prepared.run()
    (before,) = prepared.outputs()
    address = prepared.binding.get_outputs()[0].data_ptr()
    prepared.relocate()
    assert prepared.binding.get_outputs()[0].data_ptr() != address
    prepared.run()
    (after,) = prepared.outputs()
    np.testing.assert_array_equal(before, after)
    prepared.close()


def test_inputs_are_the_seeded_values_in_fresh_buffers_for_every_brick() -> None:
    ranges = {"idx": [0, 7]}
    one = _model([helper.make_node("Gather", ["x", "idx"], ["y"])],
                 [_f32("x", [8, 4]), helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                 [_f32("y", [3, 4])], ranges=ranges)
    other = _model([helper.make_node("Gather", ["a", "b"], ["c"])],  # other names, same shapes
                   [_f32("a", [8, 4]), helper.make_tensor_value_info("b", TensorProto.INT64, [3])],
                   [_f32("c", [3, 4])], ranges={"b": [0, 7]})
    first, second = _seeded_inputs(one, ["x", "idx"]), _seeded_inputs(other, ["a", "b"])
    drawn = random_inputs(one)
    assert list(first) == ["x", "idx"] and list(second) == ["a", "b"]
    for mine, theirs, seeded in zip(first.values(), second.values(), drawn.values()):
        assert np.array_equal(mine, seeded) and np.array_equal(theirs, seeded)
        assert mine is not theirs and not np.shares_memory(mine, theirs) and mine.flags.writeable


def test_softmax_outputs_are_computed_into_bound_buffers() -> None:
    prepared = OrtBackend().prepare(softmax_model(), OrtConfig())
    prepared.run()
    (y,) = prepared.outputs()
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-5)


def test_gather_indices_follow_the_value_range_metadata() -> None:
    idx = random_inputs(gather_model())["idx"]
    assert idx.dtype == np.int64 and idx.min() >= 0 and idx.max() < 1000 and idx.max() >= 2
    default = random_inputs(gather_model(high=None))["idx"]
    assert set(np.unique(default)) <= {0, 1}
    with pytest.raises(UnrunnableBrickError, match="cannot run"):
        OrtBackend().prepare(gather_model(high=5000), OrtConfig())  # indices out of the table


def test_bad_value_range_metadata_is_one_line() -> None:
    model = gather_model(high=None)
    model.metadata_props.add(key=VALUE_RANGES_KEY, value=json.dumps({"idx": [3, 3]}))
    with pytest.raises(InvalidArgumentError, match=r"input 'idx'.*low < high. Got \[3, 3\]"):
        random_inputs(model)


def test_symbolic_input_shape_is_rejected() -> None:
    node = helper.make_node("Relu", ["x"], ["y"])
    model = _model([node], [_f32("x", ["N", 8])], [_f32("y", ["N", 8])])
    with pytest.raises(ShapeInferenceError, match=r"Input 'x'.*\[N, 8\]"):
        OrtBackend().prepare(model, OrtConfig())


@pytest.mark.parametrize("level", ["disable", "basic", "extended", "all"])
def test_optimization_levels_and_options(level: str) -> None:
    config = OrtConfig(
        graph_optimization_level=level,
        allow_spinning=False,
        enable_cpu_mem_arena=False,
        execution_mode="parallel",
        inter_op_num_threads=2,
    )
    m = measure(conv_model(), config=config, budget=Budget.quick())
    assert m.ok and m.config is config


def test_config_validation_is_one_clear_line() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        OrtConfig(device="tpu", intra_op_num_threads=-2, graph_optimization_level="max")
    message = str(info.value)
    assert "\n" not in message and message.startswith("Invalid OrtConfig: ")
    assert "'device' must be one of 'cpu', 'cuda'. Got 'tpu' instead" in message
    assert "'intra_op_num_threads' must be an int >= 0. Got -2 instead" in message
    assert "'graph_optimization_level' must be one of 'disable', 'basic', 'extended', 'all'" in message
    with pytest.raises(InvalidArgumentError, match="unknown fields \\['threads'\\]"):
        OrtConfig.from_dict({"threads": 4})
    with pytest.raises(InvalidArgumentError, match="needs an OrtConfig"):
        OrtBackend().check({"device": "cpu"})


def test_config_id_is_stable_and_covers_every_field() -> None:
    base = OrtConfig()
    assert base.config_id == OrtConfig().config_id and len(base.config_id) == 16
    assert base.onnxruntime_version == ort.__version__
    others = [
        OrtConfig(intra_op_num_threads=2),
        OrtConfig(graph_optimization_level="all"),
        OrtConfig(allow_spinning=False),
        OrtConfig(provider_options={"arena_extend_strategy": "kSameAsRequested"}),
        OrtConfig(onnxruntime_version="1.0.0"),
    ]
    assert len({base.config_id, *(c.config_id for c in others)}) == 6
    data = json.loads(json.dumps(others[3].to_dict()))
    assert OrtConfig.from_dict(data) == others[3]
    assert OrtConfig.from_dict(data).config_id == others[3].config_id


def test_config_for_another_onnxruntime_version_is_refused() -> None:
    with pytest.raises(BackendUnavailableError, match=r"for onnxruntime 1\.0\.0 but"):
        OrtBackend().check(OrtConfig(onnxruntime_version="1.0.0"))


@pytest.mark.skipif(HAS_CUDA, reason="this machine has the CUDA provider")
def test_cuda_unavailable_is_one_clear_line() -> None:
    expected = (
        "CUDA requested but onnxruntime has no CUDAExecutionProvider "
        f"(available: {ort.get_available_providers()}); "
        "install onnxruntime-gpu in place of onnxruntime: pip uninstall -y onnxruntime && pip install onnxruntime-gpu"
    )
    assert installed_onnxruntimes() == {"onnxruntime"}
    config = OrtConfig(device="cuda", cudnn_conv_algo_search="HEURISTIC", device_id=0)
    with pytest.raises(BackendUnavailableError) as info:
        OrtBackend().prepare(conv_model(), config)
    assert str(info.value) == expected
    with pytest.raises(BackendUnavailableError, match="CUDA requested"):
        benchmark([conv_model()], config=config)  # raised at once, before any worker starts


def test_without_cuda_the_message_says_how_to_get_the_gpu_build() -> None:
    """onnxruntime and onnxruntime-gpu install one package: with both installed, the last one wins."""
    cpu = ["CPUExecutionProvider"]
    both = no_cuda_message(cpu, {"onnxruntime", "onnxruntime-gpu"})
    assert both.endswith("onnxruntime-gpu is installed beside onnxruntime, which share its package: "
                         "pip uninstall -y onnxruntime && pip install --force-reinstall --no-deps onnxruntime-gpu")
    assert "check the driver and the CUDA and cuDNN libraries" in no_cuda_message(cpu, {"onnxruntime-gpu"})
    assert "\n" not in both


def test_worker_env_pins_thread_pools() -> None:
    env = OrtBackend().worker_env(OrtConfig(intra_op_num_threads=4))
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "4"


def test_only_spinning_thread_pools_need_a_pause_after_a_run() -> None:
    from dlbricks.generators.ort import IDLE_SPIN_S

    assert OrtBackend().idle_spin_s(OrtConfig()) == 0.0  # one thread runs on the caller's
    assert OrtBackend().idle_spin_s(OrtConfig(intra_op_num_threads=2, allow_spinning=False)) == 0.0
    assert OrtBackend().idle_spin_s(OrtConfig(intra_op_num_threads=2)) == IDLE_SPIN_S
    assert OrtBackend().idle_spin_s(OrtConfig(intra_op_num_threads=0)) == IDLE_SPIN_S  # all cores


def test_multithreaded_workers_share_one_pair_of_thread_pools() -> None:
    assert THREAD_POOLS_ENV not in OrtBackend().worker_env(OrtConfig())
    assert THREAD_POOLS_ENV not in OrtBackend().worker_env(OrtConfig(intra_op_num_threads=2, allow_spinning=False))
    config = OrtConfig(intra_op_num_threads=2)
    assert OrtBackend().worker_env(config)[THREAD_POOLS_ENV] == "2,1"
    brick = next(iter(dlbricks.decompose(dlbricks.load_model(conv_model())).bricks.values()))
    results = list(benchmark([brick, conv_model()], config=config, budget=Budget.quick()))
    assert [m.status for m in results] == ["ok", "ok"], [m.error for m in results]


def test_a_shared_pool_worker_refuses_other_thread_counts() -> None:
    code = (
        "from dlbricks.generators import OrtConfig\n"
        "from dlbricks.generators.ort import OrtBackend\n"
        "from tests.test_generators_ort import conv_model\n"
        "OrtBackend().prepare(conv_model(), OrtConfig(intra_op_num_threads=2)).close()\n"
        "try:\n"
        "    OrtBackend().prepare(conv_model(), OrtConfig(intra_op_num_threads=1))\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    env = {**os.environ, THREAD_POOLS_ENV: "2,1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("BackendError This worker runs on shared thread pools of 2 intra-op")
    assert len(out.stdout.strip().splitlines()) == 1


def test_floor_in_process_is_small_and_positive() -> None:
    floor = measure_floor(config=OrtConfig(), budget=Budget.quick())
    # extrapolated to a call without nodes: below the one-node call by the cost of a node
    assert floor.ok and 0 < floor.median_s < 1e-3 and 0 < floor.floor_s < floor.median_s
    # the cost of a further node: what the one-node call pays above the call without nodes
    assert floor.node_s == pytest.approx(floor.median_s - floor.floor_s)


def test_benchmark_in_a_worker_records_the_floor() -> None:
    seen = []
    models = [conv_model(), softmax_model().SerializeToString()]
    results = list(benchmark(models, budget=Budget.quick(), progress=lambda *a: seen.append(a)))
    assert [m.status for m in results] == ["ok", "ok"]
    assert [(done, total) for done, total, _ in seen] == [(1, 2), (2, 2)]
    assert results[0].key == hashlib.sha256(models[0].SerializeToString()).hexdigest()
    floor = results[0].floor_s
    assert floor is not None and 0 < floor < results[0].median_s
    assert all(m.floor_s == floor for m in results)
    assert all(m.node_s is not None and 0 < m.node_s < m.floor_s for m in results)
    assert all(m.wall_time_s > 0 for m in results)


def test_system_info_fingerprint() -> None:
    info = collect_system_info()
    assert isinstance(info, SystemInfo)
    assert info.logical_cores >= info.physical_cores >= 1
    assert info.cpu_model and info.python_version and info.onnxruntime_version == ort.__version__
    data = json.loads(json.dumps(info.to_dict()))
    assert data["fingerprint"] == info.fingerprint == collect_system_info().fingerprint
    assert len(info.fingerprint) == 16


def test_cold_copies_span_twice_the_last_level_cache() -> None:
    # A 1x1 convolution of MobileNet-v2's last stage: 0.6 MB of weights, 0.2 MB of output.
    w = numpy_helper.from_array(np.zeros((960, 160, 1, 1), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"])
    model = _model([node], [_f32("x", [1, 160, 7, 7])], [_f32("y", [1, 960, 7, 7])], [w])
    footprint = 960 * 160 * 4 + 960 * 7 * 7 * 4
    llc = 32 << 20
    copies = cold_copies(model, [np.zeros((1, 960, 7, 7), np.float32)], llc_bytes=llc)
    assert abs(copies * footprint - 2 * llc) <= footprint / 2
    tiny = cold_copies(softmax_model(), [np.zeros((1,), np.float32)], llc_bytes=llc)
    assert tiny == MAX_COLD_COPIES
    huge = cold_copies(model, [np.zeros((1,), np.float32)], llc_bytes=1)
    assert huge == 1


def test_a_brick_runs_as_one_session_on_cuda() -> None:
    """Cold copies are a CPU cache emulation: on CUDA each copy brings a provider of its own
    (stream, handles, arena), and switching between them cost an H100 more than the misses they
    emulate. Whole models and warm bricks run as one session everywhere."""
    dec = dlbricks.decompose(conv_model())
    conv = next(o.signature for o in dec.occurrences if dec.bricks[o.signature].op_type == "Conv")
    brick = dec.in_context(conv).brick.to_onnx()
    out = [np.zeros((1, 16, 14, 14), np.float32)]
    cpu = session_copies(brick, out, OrtConfig())
    assert cpu == cold_copies(brick, out) and cpu > 1
    assert session_copies(brick, out, OrtConfig(device="cuda")) == 1
    assert session_copies(brick, out, OrtConfig(device="cuda", cache="cold")) == 1
    assert session_copies(brick, out, OrtConfig(cache="warm")) == 1
    assert session_copies(conv_model(), out, OrtConfig()) == 1  # a whole model


def test_a_brick_without_weights_runs_as_one_session_with_cold_weights() -> None:
    """Cold copies keep a brick's weights cold; copies of a brick without weights share input,
    output and scratch in ``"cold-weights"``, so it runs as one session (outputs per copy in
    ``"cold"`` still need the copies)."""
    w = numpy_helper.from_array(np.zeros((16, 8, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    model = _model(nodes, [_f32("x", [1, 8, 14, 14])], [_f32("y", [1, 16, 14, 14])], [w])
    dec = dlbricks.decompose(dlbricks.load_model(model))
    by_op = {dec.bricks[o.signature].op_type: o.signature for o in dec.occurrences}
    relu = dec.in_context(by_op["Relu"]).brick.to_onnx()
    conv = dec.in_context(by_op["Conv"]).brick.to_onnx()
    out = [np.zeros((1, 16, 14, 14), np.float32)]
    assert weight_bytes(relu) < MIN_COLD_WEIGHT_BYTES <= weight_bytes(conv)
    assert session_copies(relu, out, OrtConfig()) == 1
    assert session_copies(relu, out, OrtConfig(cache="cold")) == cold_copies(relu, out) > 1
    assert session_copies(conv, out, OrtConfig()) == cold_copies(conv, out) > 1


def test_cold_copies_span_what_a_run_of_the_brick_model_touches() -> None:
    """Inside a small model a layer's weights stay in the last-level cache from one run to the
    next: the copies of a brick in context span twice its model's footprint where that is smaller
    than the cache, and twice the cache with ``cold_span="cache"``."""
    w = numpy_helper.from_array(np.zeros((960, 160, 1, 1), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"])
    model = _model([node], [_f32("x", [1, 160, 7, 7])], [_f32("y", [1, 960, 7, 7])], [w])
    out = [np.zeros((1, 960, 7, 7), np.float32)]
    footprint = 960 * 160 * 4 + 960 * 7 * 7 * 4
    llc = 32 << 20
    small = cold_copies(model, out, llc_bytes=llc, span_bytes=4 << 20)
    assert abs(small * footprint - (8 << 20)) <= footprint / 2
    assert cold_copies(model, out, llc_bytes=llc, span_bytes=1 << 30) == cold_copies(model, out, llc_bytes=llc)
    dec = dlbricks.decompose(conv_model())
    conv = next(o.signature for o in dec.occurrences if dec.bricks[o.signature].op_type == "Conv")
    item = dec.in_context(conv)
    plain = cold_copies(item.brick.to_onnx(), [np.zeros((1, 16, 14, 14), np.float32)])
    spanned = cold_copies(item.brick.to_onnx(), [np.zeros((1, 16, 14, 14), np.float32)],
                          span_bytes=dec.footprint_bytes())
    assert spanned < plain
    backend = OrtBackend()
    for config, copies in ((OrtConfig(), spanned), (OrtConfig(cold_span="cache"), plain)):
        prepared = backend.prepare(item.to_onnx(), config)
        assert prepared.copies == copies
        if config.cold_span == "model":  # the copies of a small model's brick cycle within the cache
            assert prepared.cycle_fits_cache
        prepared.close()
    with pytest.raises(InvalidArgumentError, match="'cold_span' must be one of 'model', 'cache'"):
        OrtConfig(cold_span="l2")


def test_cold_copies_come_nearest_to_their_span() -> None:
    """The copies' span is the nearest whole number of copies to the target, not the first that
    reaches it: a 264 KB Gemm (ncf_ml20m's) in a model that touches 0.43 MB cycles 3 copies (0.79 MB)
    for a target of 0.86 MB; 4 (1.06 MB) would leave a 1 MiB L2 cache that the model stays in."""
    w = numpy_helper.from_array(np.zeros((256, 256), np.float32), "w")
    b = numpy_helper.from_array(np.zeros((256,), np.float32), "b")
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    model = _model([node], [_f32("x", [1, 256])], [_f32("y", [1, 256])], [w, b])
    out = [np.zeros((1, 256), np.float32)]
    assert cold_copies(model, out, llc_bytes=32 << 20, span_bytes=432_132) == 3
    footprint = 256 * 256 * 4 + 2 * 256 * 4
    assert cold_copies(model, out, llc_bytes=32 << 20, span_bytes=footprint // 4) == 1  # never none


def test_cold_copies_follow_one_rule_at_every_level() -> None:
    """The copies share one arena, so level "all" (NCHWc reorder buffers inside each copy) needs no
    cap of its own: a brick gets as many copies at "all" as at "disable"."""
    brick = next(iter(dlbricks.decompose(conv_model()).bricks.values()))
    model = brick.to_onnx()
    expected = cold_copies(model, [np.zeros((1, 16, 14, 14), np.float32)])
    for level in ("disable", "all"):
        prepared = OrtBackend().prepare(model, OrtConfig(graph_optimization_level=level))
        assert prepared.copies == expected > 16
        prepared.close()


def test_cold_copies_share_one_arena_and_whole_models_keep_their_own() -> None:
    """Cold copies of a brick take scratch buffers from one arena, as the layers of a model do; a
    whole model and a warm brick run with the session's own arena, as users run them."""
    brick = next(iter(dlbricks.decompose(conv_model()).bricks.values()))
    cases = ((brick.to_onnx(), OrtConfig(), "1"),
             (brick.to_onnx(), OrtConfig(cache="warm"), ""),
             (conv_model(), OrtConfig(), ""))
    for model, config, expected in cases:
        prepared = OrtBackend().prepare(model, config)
        entries = {_config_entry(s.get_session_options(), USE_ENV_ALLOCATORS) for s in prepared._sessions}
        assert entries == {expected}, (config.cache, prepared.copies)
        prepared.run()
        prepared.close()


def _config_entry(options: ort.SessionOptions, key: str) -> str:
    """A session option's value, "" when it is not set (onnxruntime raises then)."""
    try:
        return options.get_session_config_entry(key)
    except RuntimeError:
        return ""


def test_config_id_changes_with_the_measurement_method(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bricks measured by an older method (an arena per copy) are another configuration."""
    now = OrtConfig().config_id
    monkeypatch.setattr(OrtConfig, "measurement_method", OrtConfig.measurement_method - 1)
    assert OrtConfig().config_id != now


def test_cold_bricks_run_after_the_layer_before_them() -> None:
    """A brick in context primes each timed run with an untimed run of the brick before it in its
    model, prepared warm; the sessions of the brick itself do not carry that brick's bytes."""
    from dlbricks.bricks import PREVIOUS_KEY
    from tests import _models

    dec = dlbricks.decompose(_models.resnet_like(blocks=1), batch_size=1)
    later = next(o.signature for o in dec.occurrences if dec.previous(o.signature) is not None)
    item = dec.in_context(later)
    backend = OrtBackend()
    primed = backend.prepare(item.to_onnx(), OrtConfig())
    assert primed.previous is not None and primed.previous.copies == 1
    assert primed.prime == primed.previous.run
    assert PREVIOUS_KEY not in primed.session.get_modelmeta().custom_metadata_map
    primed.prime()
    primed.run()
    assert np.isfinite(primed.outputs()[0]).all()
    for config in (OrtConfig(previous_layer=False), OrtConfig(cache="warm")):
        plain = backend.prepare(item.to_onnx(), config)
        assert plain.previous is None and not hasattr(plain, "prime")
        plain.close()
    assert not hasattr(backend.prepare(dec.bricks[later].to_onnx(), OrtConfig()), "prime")
    primed.close()
    with pytest.raises(dlbricks.BackendError, match="closed"):
        primed.prime()


def test_a_brick_whose_previous_cannot_run_is_measured_without_it() -> None:
    import base64

    from dlbricks.bricks import PREVIOUS_KEY
    from tests import _models

    brick = next(iter(dlbricks.decompose(conv_model()).bricks.values()))
    model = brick.to_onnx()
    broken = _models.unrunnable_model().SerializeToString()
    model.metadata_props.add(key=PREVIOUS_KEY, value=base64.b64encode(broken).decode("ascii"))
    prepared = OrtBackend().prepare(model, OrtConfig())
    assert prepared.previous is None and not hasattr(prepared, "prime")
    prepared.run()
    prepared.close()


def test_configurations_say_their_backend_device_and_threads() -> None:
    """The estimator reads these fields of the configuration protocol, never class names."""
    from dlbricks.generators.mxnet import MxnetConfig
    from dlbricks.generators.protocols import BackendConfig

    onnx_cfg = OrtConfig(intra_op_num_threads=2)
    mx = MxnetConfig(omp_threads=3, mxnet_version="1.9.1")
    assert (onnx_cfg.backend, onnx_cfg.device, onnx_cfg.threads) == ("onnxruntime", "cpu", 2)
    assert (mx.backend, mx.device, mx.threads) == ("mxnet", "cpu", 3)
    for cfg in (onnx_cfg, mx):
        assert isinstance(cfg, BackendConfig)
        assert type(cfg).from_dict(cfg.to_dict()) == cfg
        assert cfg.config_id != type(cfg).from_dict({**cfg.to_dict(), "device_id": 1}).config_id
    with pytest.raises(InvalidArgumentError, match="Invalid MxnetConfig: unknown fields"):
        MxnetConfig.from_dict({"colour": "red"})


def test_a_brick_is_timed_beside_the_floors_model_and_a_whole_model_is_not() -> None:
    """Each sample of a brick is followed by a sample of the floor's one-node model in the same
    worker (``empty_s``, about the floor and a node); a whole model has none."""
    from tests import _models

    dec = dlbricks.decompose(_models.resnet_like(blocks=1), batch_size=1)
    bricks = [dec.in_context(o.signature).to_onnx() for o in dec.occurrences[:3]]
    *measured, whole = list(benchmark([*bricks, conv_model()], budget=Budget.quick()))
    assert all(m.ok for m in (*measured, whole))
    # the empty model's time at the brick's moments: about the calibrated floor and a node, which a
    # swinging machine may have calibrated in a slower or a faster phase
    assert all(m.empty_s is not None and 0.5 * (m.floor_s + m.node_s) < m.empty_s < 20 * (m.floor_s + m.node_s)
               for m in measured), [(m.empty_s, m.floor_s, m.node_s) for m in measured]
    assert whole.empty_s is None


def test_only_the_timed_brick_gets_the_floors_model_not_the_brick_before_it() -> None:
    """The brick before a brick only runs untimed before each timed run: it is prepared without the
    floor's model beside it."""
    from dlbricks.generators.ort import OrtBackend
    from tests import _models

    dec = dlbricks.decompose(_models.resnet_like(blocks=1), batch_size=1)
    brick = next(dec.in_context(o.signature).to_onnx() for o in dec.occurrences[1:])
    prepared = OrtBackend().prepare(brick, OrtConfig())
    try:
        assert prepared.previous is not None and prepared.empty_model is not None
        assert prepared.previous.empty_model is None and not hasattr(prepared.previous, "empty")
    finally:
        prepared.close()

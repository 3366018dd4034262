"""Fusion groups: onnxruntime's optimized graph mapped back to the layers of the model."""

from __future__ import annotations

import dataclasses

import doctest
from collections.abc import Callable

import networkx as nx
import numpy as np
import onnx
import pytest

import dlbricks
import dlbricks.fusion
from dlbricks.decomposition import _decompose_groups
from dlbricks.errors import InvalidArgumentError
from dlbricks.fusion import NCHWC_DOMAIN, OPT_LEVELS, FusionPlan, _Mapper, fusion_groups, optimized_model
from dlbricks.model_zoo import build
from tests import _fusion_models, _models
from tests.test_faithfulness import _all_tensors, _session

MODELS: dict[str, Callable[[], dlbricks.ModelGraph]] = {
    "conv_bn_relu": lambda: dlbricks.load_model(_fusion_models.conv_bn_relu_chain()),
    "nchwc_cnn": lambda: dlbricks.load_model(_fusion_models.nchwc_cnn()),
    "deleted_nodes": lambda: dlbricks.load_model(_fusion_models.deleted_nodes()),
    "resnet_like": lambda: dlbricks.load_model(_models.resnet_like(), batch_size=1),
    "transformer": lambda: dlbricks.load_model(_models.transformer_layer(), batch_size=1),
    "control_flow": lambda: dlbricks.load_model(_models.control_flow_model()),
    "lstm": lambda: dlbricks.load_model(_models.lstm_model()),
    "split": lambda: dlbricks.load_model(_models.split_model()),
}


def _ops(graph: dlbricks.ModelGraph, group: tuple[str, ...]) -> list[str]:
    layers = {layer.name: layer for layer in graph.layers}
    return [layers[name].op_type for name in group]


def _compute_kernels(graph: dlbricks.ModelGraph, model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Optimized nodes that run: not reorders, not the shape arithmetic dlbricks folds itself."""
    return [n for n in model.graph.node
            if not (n.domain == NCHWC_DOMAIN and n.op_type in ("ReorderInput", "ReorderOutput"))
            and not all(graph.is_constant(o) for o in n.output if o)]


def assert_valid_plan(graph: dlbricks.ModelGraph, plan: FusionPlan) -> None:
    """Every layer once; each group in topological order; groups in an order of an acyclic DAG."""
    names = [name for group in plan.groups for name in group]
    assert sorted(names) == sorted(layer.name for layer in graph.layers)
    assert len(plan.kernels) == len(plan.groups)
    index = {layer.name: i for i, layer in enumerate(graph.layers)}
    owner = {name: g for g, group in enumerate(plan.groups) for name in group}
    for group in plan.groups:
        assert [index[n] for n in group] == sorted(index[n] for n in group)
    quotient = nx.DiGraph()
    quotient.add_nodes_from(range(len(plan.groups)))
    quotient.add_edges_from((owner[u], owner[v]) for u, v in graph.dag.edges if owner[u] != owner[v])
    assert nx.is_directed_acyclic_graph(quotient)
    assert all(u < v for u, v in quotient.edges)  # the groups' order is topological


def test_conv_bn_relu_is_one_group_at_extended() -> None:
    graph = MODELS["conv_bn_relu"]()
    plan = fusion_groups(graph, "extended")
    assert len(plan.groups) == 1
    assert _ops(graph, plan.groups[0]) == ["Conv", "BatchNormalization", "Relu"]
    assert "FusedConv" in plan.kernels[0]
    assert plan.reorders == 0 and plan.opt_level == "extended"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_disable_leaves_every_layer_alone(name: str) -> None:
    graph = MODELS[name]()
    plan = fusion_groups(graph, "disable")
    assert plan.groups == tuple((layer.name,) for layer in graph.layers)
    assert all(plan.kernels) and plan.reorders == 0


@pytest.mark.parametrize("level", OPT_LEVELS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_layer_in_exactly_one_group_of_an_acyclic_dag(name: str, level: str) -> None:
    graph = MODELS[name]()
    assert_valid_plan(graph, fusion_groups(graph, level))


@pytest.mark.parametrize("level", ["extended", "all"])
def test_transformer_groups_are_the_kernels_onnxruntime_keeps(level: str) -> None:
    graph = MODELS["transformer"]()
    plan = fusion_groups(graph, level)
    kernels = _compute_kernels(graph, optimized_model(graph, level))
    # MatMulAddFusion brackets each Gemm with Reshapes to and from 2-D. Those that stand for no
    # Reshape of the model (neither read nor write what one of its Reshapes does) are helpers:
    # they absorb no layer and are reported with the Gemm's group.
    reshapes = {t for layer in graph.layers if layer.op_type == "Reshape"
                for t in (layer.inputs[0], *layer.outputs)}
    helpers = [n for n in kernels if n.op_type == "Reshape"
               and n.input[0] not in reshapes and n.output[0] not in reshapes]
    assert len(helpers) == 8
    assert len(plan.groups) == len(kernels) - len(helpers)
    labels = [label for k in plan.kernels for label in k.split("+")]
    assert sorted(labels) == sorted(f"{n.domain + '.' if n.domain else ''}{n.op_type}[{n.name}]"
                                    for n in kernels)  # every kernel reported once
    by_kernel = {k: _ops(graph, g) for g, k in zip(plan.groups, plan.kernels, strict=True)}
    gemms = [ops for k, ops in by_kernel.items() if "Gemm[" in k]
    assert gemms and all(ops == ["MatMul", "Add"] for ops in gemms)
    skip_ln = [ops for k, ops in by_kernel.items() if "SkipLayerNormalization" in k]
    assert skip_ln == [["Add", "LayerNormalization"]] * 2
    gelu = [ops for k, ops in by_kernel.items() if "Gelu" in k]
    assert gelu == [["Div", "Erf", "Add", "Mul", "Mul"]]
    assert_valid_plan(graph, plan)


def test_reorders_are_counted_not_grouped() -> None:
    graph = MODELS["nchwc_cnn"]()
    model = optimized_model(graph, "all")
    reorders = [n for n in model.graph.node if n.domain == NCHWC_DOMAIN and "Reorder" in n.op_type]
    assert len(reorders) == 2  # in at the first Conv, out before the Flatten
    plan = fusion_groups(graph, "all")
    assert plan.reorders == 2
    assert plan.reorder_tensors == ("x", graph.layers[_index(graph, "GlobalAveragePool")].outputs[0])
    assert not any("Reorder" in k for k in plan.kernels)
    assert [_ops(graph, g) for g in plan.groups] == [
        ["Conv", "BatchNormalization", "Relu"], ["Conv", "BatchNormalization", "Relu"],
        ["Conv", "BatchNormalization", "Add", "Relu"],  # the residual Add accumulates in the Conv
        ["MaxPool"], ["GlobalAveragePool"], ["Flatten"], ["Gemm"]]
    assert all(k.startswith(f"{NCHWC_DOMAIN}.") for k in plan.kernels[:5])


def _index(graph: dlbricks.ModelGraph, op_type: str) -> int:
    return next(i for i, layer in enumerate(graph.layers) if layer.op_type == op_type)


def test_deleted_and_folded_layers_join_a_neighbour() -> None:
    graph = MODELS["deleted_nodes"]()
    plan = fusion_groups(graph, "extended")
    assert [_ops(graph, g) for g in plan.groups] == [
        ["Transpose", "MatMul"],  # the runtime folds the weight's Transpose into the MatMul
        ["Identity", "Relu"], ["Dropout", "Add"], ["Sigmoid"]]


def test_groups_on_a_cycle_are_split() -> None:
    graph = dlbricks.load_model(_fusion_models.chain(3))
    mapper = _Mapper(graph, optimized_model(graph, "disable").graph)
    a, b, c = (layer.name for layer in graph.layers)
    mapper.groups, mapper.group_kernels, mapper.group_rank = [[a, c], [b]], [[0, 2], [1]], [0, 1]
    mapper.group_of = {a: 0, c: 0, b: 1}
    mapper._split_cycles()
    plan = mapper._result("disable")
    assert plan.groups == ((a,), (b,), (c,))
    assert_valid_plan(graph, plan)


def test_zoo_resnet18_at_all() -> None:
    graph = dlbricks.load_model(build("resnet18_v1"))
    plan = fusion_groups(graph, "all")
    assert_valid_plan(graph, plan)
    ops = [_ops(graph, g) for g in plan.groups]
    assert ops.count(["Conv", "BatchNormalization", "Relu"]) == 9  # stem + first conv of 8 blocks
    assert ops.count(["Conv", "BatchNormalization", "Add", "Relu"]) == 8  # second conv of 8 blocks
    assert ops.count(["Conv", "BatchNormalization"]) == 3  # the downsample shortcuts
    assert len(plan.groups) == 24 and plan.reorders == 1


@pytest.mark.parametrize(("name", "level"), [("conv_bn_relu", "extended"), ("nchwc_cnn", "all"),
                                             ("deleted_nodes", "all"), ("transformer", "extended"),
                                             ("resnet_like", "all")])
def test_fused_bricks_run_and_reproduce_the_model(name: str, level: str) -> None:
    graph = MODELS[name]()
    plan = fusion_groups(graph, level)
    dec = _decompose_groups(graph, plan.layer_groups(graph), "fused", "real")
    assert dec.granularity == "fused" and dec.layers == len(graph.layers)
    assert len(dec.occurrences) == len(plan.groups) and nx.is_directed_acyclic_graph(dec.dag)
    tensors = _all_tensors(graph, dlbricks.inputs.random_inputs(graph.inputs, seed=3))
    assert dec.instances is not None
    for occ, brick in zip(dec.occurrences, dec.instances, strict=True):
        outputs = _session(brick.to_onnx(weights="real")).run(
            None, {f"in{i}": tensors[t] for i, t in enumerate(occ.inputs)})
        for tensor, got in zip(occ.outputs, outputs, strict=True):
            np.testing.assert_allclose(got, tensors[tensor], rtol=1e-4, atol=1e-5,
                                       err_msg=f"{occ.nodes} output {tensor}")


def test_optimized_model_keeps_weights() -> None:
    graph = MODELS["conv_bn_relu"]()
    model = optimized_model(graph, "basic")
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu"]  # BatchNormalization folded
    weight = next(t for t in model.graph.initializer if len(t.dims) == 4)
    assert onnx.numpy_helper.to_array(weight).shape == (8, 3, 3, 3)


@pytest.mark.parametrize("level", ["ALL", "layout", 3, None])
def test_unknown_level_is_rejected(level: object) -> None:
    graph = MODELS["conv_bn_relu"]()
    with pytest.raises(InvalidArgumentError, match="'opt_level' must be one of"):
        fusion_groups(graph, level)  # type: ignore[arg-type]


def test_docstring_examples_run() -> None:
    failures, attempted = doctest.testmod(dlbricks.fusion, optionflags=doctest.ELLIPSIS)
    assert attempted and not failures


def test_decompose_fused_granularity_and_reorder_accounting() -> None:
    """decompose(granularity="fused") labels the level; at "all" a brick runs in its model's blocked
    layout, without the reorders its own session would add at its edges."""
    import dlbricks
    from dlbricks.fusion import REORDER_OPS
    from dlbricks.generators.ort_kernels import brick_session_kernels
    from dlbricks.model_zoo import build

    graph = dlbricks.load_model(build("resnet18_v1"))
    layer = dlbricks.decompose(graph)
    fused = dlbricks.decompose(graph, "fused", opt_level="all")
    assert fused.granularity == "fused:all"
    assert fused.layers == layer.layers and len(fused.occurrences) < len(layer.occurrences)
    assert not set(fused.bricks) & set(layer.bricks)  # the level is part of the signature
    assert fused.reorder_bytes and all(n > 0 for n in fused.reorder_bytes)
    conv = next(b for b in fused.bricks.values() if b.op_type.startswith("Conv+BatchNormalization"))
    assert not {op for op, _ in brick_session_kernels(conv, "all").kernels} & REORDER_OPS
    assert not {op for op, _ in brick_session_kernels(conv, "extended").kernels} & REORDER_OPS


def _nchwc(op: str, x: np.ndarray, **attributes: int) -> np.ndarray:
    """``x`` through one of onnxruntime's NCHWc reorders (ReorderInput, ReorderOutput) at level "disable"."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from dlbricks.fusion import NCHWC_DOMAIN
    from dlbricks.ortutil import session_options

    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], domain=NCHWC_DOMAIN, **attributes)], "reorder",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(NCHWC_DOMAIN, 1)])
    session = ort.InferenceSession(model.SerializeToString(), session_options("disable"),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_a_brick_in_its_models_layout_computes_what_the_brick_computes() -> None:
    """At level "all", a convolution brick runs as onnxruntime's optimized graph less the reorders at
    its edges (its input and output in the blocked NCHWc layout): its output, taken back to NCHW,
    is the brick's own; the graph holds no reorder; onnxruntime's own session of the brick does."""
    import onnxruntime as ort

    import dlbricks
    from dlbricks.fusion import NCHWC_DOMAIN, REORDER_OPS
    from dlbricks.generators.ort_kernels import native_layout
    from dlbricks.model_zoo import build
    from dlbricks.ortutil import session_options

    fused = dlbricks.decompose(dlbricks.load_model(build("mobilenet_v2_0.35")), "fused", opt_level="all")
    convs = [b for b in fused.bricks.values() if b.op_type == "Conv+BatchNormalization+Clip"
             and len(b.inputs) == 1 and b.inputs[0].shape[1] % 16 == 0][:3]
    assert convs
    for conv in convs:
        model = conv.to_onnx()
        native = native_layout(model)
        assert native is not None and not {n.op_type for n in native.graph.node} & REORDER_OPS
        assert {n.domain for n in native.graph.node} == {NCHWC_DOMAIN}
        x = np.random.default_rng(0).standard_normal(conv.inputs[0].shape).astype(np.float32)
        plain = ort.InferenceSession(model.SerializeToString(), session_options("disable"),
                                     providers=["CPUExecutionProvider"])
        expected = plain.run(None, {model.graph.input[0].name: x})[0]
        blocked = ort.InferenceSession(native.SerializeToString(), session_options("disable"),
                                       providers=["CPUExecutionProvider"])
        out = blocked.run(None, {native.graph.input[0].name: _nchwc("ReorderInput", x)})[0]
        got = _nchwc("ReorderOutput", out, channels=expected.shape[1])
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_a_stored_fused_model_keeps_its_layout_reorders(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The model's own reorders at "all" (added once per estimate) survive the database, so a model
    estimated by its stored name is priced as the freshly decomposed one; storing it at another
    granularity leaves them alone."""
    import dlbricks
    from dlbricks.benchmarks_db import Store
    from dlbricks.model_zoo import build

    graph = dlbricks.load_model(build("resnet18_v1"))
    fused = dlbricks.decompose(graph, "fused", opt_level="all")
    with Store(tmp_path / "r.db") as store:
        store.models.add(fused)
        store.models.add(dlbricks.decompose(graph))
        assert store.models.decomposition("resnet18_v1", "fused:all").reorder_bytes == fused.reorder_bytes
        assert store.models.decomposition("resnet18_v1", "layer").reorder_bytes == ()
        other = Store(tmp_path / "merged.db")
        other.merge_from(tmp_path / "r.db")
        assert other.models.decomposition("resnet18_v1", "fused:all").reorder_bytes == fused.reorder_bytes
        other.close()


def test_reorder_cost_is_priced_by_size_in_the_bricks_cache_state() -> None:
    """Reorders are timed as bricks (session copies, cold buffers) at several sizes; a reorder's cost
    interpolates per byte between them."""
    from dlbricks.generators import Budget, OrtConfig
    from dlbricks.generators.ort_kernels import ReorderCost, calibrate_reorder

    table = ReorderCost((1000, 100_000), (2e-11, 4e-11))
    assert table(1000) == pytest.approx(2e-8) and table(100_000) == pytest.approx(4e-6)
    assert table(10_000) == pytest.approx(3e-11 * 10_000)  # halfway in log size
    assert table(10) == pytest.approx(2e-10) and table(0) == 0.0
    assert table.total([1000, 1000]) == pytest.approx(4e-8)
    shapes = ((1, 16, 14, 14), (1, 64, 56, 56))
    cost = calibrate_reorder(OrtConfig(), Budget.quick(), shapes=shapes)
    assert cost.sizes == (4 * 16 * 14 * 14, 4 * 64 * 56 * 56)
    assert all(0 < c < 1e-9 for c in cost.seconds_per_byte)  # faster than 1 GB/s, and measured


def test_an_estimate_at_all_reads_overheads_and_reorder_price_from_the_database(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """What a fused brick's session runs beyond its kernel, and the price of the model's reorders,
    are measured when the bricks are, stored with them and merged with them: estimating profiles
    nothing, so a database filled on one machine estimates the same anywhere."""
    import dlbricks
    from dlbricks import InvalidArgumentError
    from dlbricks.benchmarks_db import BenchOptions, Store, populate
    from dlbricks.estimator import estimate
    from dlbricks.generators import Budget, OrtConfig, collect_system_info
    from dlbricks.generators import ort_kernels as _ort_kernels

    config = OrtConfig(graph_optimization_level="all")
    graph = dlbricks.load_model(_models.resnet_like(blocks=2, batch=1), name="res_all")
    fused = dlbricks.decompose(graph, "fused", opt_level="all")
    assert fused.reorder_bytes
    system = collect_system_info()
    with Store(tmp_path / "f.db") as store:
        populate(store, [fused], [config], BenchOptions(budget=Budget.quick()), system=system)
        overheads = store.systems.overheads(system, config.config_id, list(fused.bricks))
        assert set(overheads) == set(fused.bricks) and any(v > 0 for v in overheads.values())
        for sig, overhead in overheads.items():  # the profile's share of the run, at the timed speed
            m = store.measurements.get(sig, system, config.config_id)
            item = fused.in_context(sig)
            share = _ort_kernels.brick_session_kernels(item.brick, "all", 1, item.previous).leftover_share
            assert overhead == pytest.approx(share * (m.median_s - m.floor_s), rel=1e-9)
        sizes, per_byte = store.systems.reorder_price(system, config.config_id)
        assert sizes and all(c > 0 for c in per_byte)
        first = estimate(fused, store, config=config)

        # the brick measured again in the model's rounds, a single call taking twice its own run: its
        # overhead is the same share of that time, not the seconds stored with its own run
        sig = max(overheads, key=overheads.__getitem__)
        own = store.measurements.get(sig, system, config.config_id)
        doubled = own.median_s + (own.median_s - own.floor_s)
        store.models.add(fused)
        store.measurements.record(dataclasses.replace(own, median_s=doubled), system, rule="replace",
                                  context=fused.in_context(sig).context, model=fused.model_key)
        count = fused.counts()[sig]
        in_rounds = estimate(fused, store, config=config)
        added = count * ((doubled - own.median_s) - overheads[sig])
        assert in_rounds.sequential_s - first.sequential_s == pytest.approx(added, rel=1e-6)
        store.db.conn.execute("DELETE FROM context_measurements")
        store.db.conn.commit()

    def no_profiling(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("an estimate must not profile")

    monkeypatch.setattr(_ort_kernels, "_cached_kernels", no_profiling)
    monkeypatch.setattr(_ort_kernels, "calibrate_reorder", no_profiling)
    merged = Store(tmp_path / "merged.db")
    merged.merge_from(tmp_path / "f.db")
    again = estimate(fused, merged, config=config)
    assert again.sequential_s == pytest.approx(first.sequential_s, rel=1e-12)
    assert again.floor_s > min(m.floor_s for m in [merged.measurements.get(s, system, config.config_id)
                                                   for s in fused.bricks])  # the reorders added once
    merged.db.conn.execute("DELETE FROM brick_overheads WHERE rowid IN (SELECT rowid FROM brick_overheads LIMIT 1)")
    with pytest.raises(InvalidArgumentError, match="no stored overhead.*dlbricks bench res_all --granularity fused"):
        estimate(fused, merged, config=config)
    merged.close()


def test_in_model_times_attribute_fused_kernels_and_reorders() -> None:
    """At level "all" the profiler names fused NCHWc kernels after their outputs: every kernel's time
    still lands on a layer of its group or, for ReorderInput/ReorderOutput, on the model's reorders."""
    import dlbricks
    from dlbricks.estimator._profile import in_model_times
    from dlbricks.generators import OrtConfig
    from dlbricks.model_zoo import build

    for name in ("resnet18_v1", "efficientnet_b0"):  # NCHWc convolutions; QuickGelu (SiLU) fusions
        graph = dlbricks.load_model(build(name))
        times = in_model_times(graph, OrtConfig(graph_optimization_level="all"), runs=2, warmup=1)
        fused = dlbricks.decompose(graph, "fused", opt_level="all")
        assert times.reorders_s > 0 and times.kernels > len(fused.occurrences)
        assert sum(times.layers.values()) + times.reorders_s == pytest.approx(times.total_s, rel=1e-9)
        per_brick = [sum(times.layers.get(n, 0.0) for n in o.nodes) for o in fused.occurrences]
        assert all(t > 0 for t in per_brick), name


def test_session_kernels_leave_out_the_main_kernel_and_the_profilers_share() -> None:
    """Harness logic on given kernel times: the main kernel is the slowest non-reorder one; the rest,
    less what the profiler adds per kernel, is what a brick's session runs beyond it."""
    from dlbricks.generators.ort_kernels import SessionKernels

    sk = SessionKernels((("ReorderInput", 10e-6), ("Conv", 400e-6), ("ReorderOutput", 30e-6),
                         ("Add", 40e-6), ("Relu", 24e-6)), run_s=494e-6)
    assert sk.main == 1 and sk.profiler_s == pytest.approx(2e-6)
    assert sk.leftover_s == pytest.approx(104e-6 - 4 * 2e-6)
    assert SessionKernels((("ReorderInput", 900e-6), ("Relu", 5e-6)), 905e-6).main == 1
    assert SessionKernels((), 0.0).leftover_s == 0.0
    # as a share of the plain run, which populate applies to the brick's timed median
    assert sk.leftover_share == pytest.approx((104e-6 - 4 * 2e-6) / 494e-6)
    assert SessionKernels((("Conv", 5e-6),), 0.0).leftover_share == 0.0
    assert SessionKernels((("ReorderInput", 900e-6), ("Relu", 5e-6)), 10e-6).leftover_share == 1.0  # at most the run


def test_a_residual_brick_at_level_all_runs_unfused_kernels_that_are_subtracted() -> None:
    """Inside the model onnxruntime fuses the residual Add and Relu into the NCHWc convolution; the
    brick's own session cannot (its residual is a plain input), so it runs them apart."""
    import dlbricks
    from dlbricks.generators.ort_kernels import brick_session_kernels

    fused = dlbricks.decompose(dlbricks.load_model(_models.resnet_like(blocks=2, batch=1)), "fused",
                               opt_level="all")
    brick = next(b for b in fused.bricks.values() if "Add" in b.op_type and b.op_type.startswith("Conv"))
    sk = brick_session_kernels(brick, "all")
    ops = [op for op, _ in sk.kernels]
    assert ops[sk.main] == "Conv" and {"Add", "ReorderOutput"} <= set(ops)
    # The unfused kernels take time of their own. What is left of it once the profiler's share is
    # taken off (the kernels' sum beyond a plain run, spread over them) depends on the plain run's
    # moment: these kernels take 2-3 us each, so only its bounds are asserted.
    others = sum(t for i, (_, t) in enumerate(sk.kernels) if i != sk.main)
    assert others > 0 and 0 <= sk.leftover_s <= others
    before = fused.previous(brick.signature)
    assert before is not None
    primed = brick_session_kernels(brick, "all", previous=before)  # as timed: after the brick before
    assert [op for op, _ in primed.kernels] == ops
    assert sum(t for i, (_, t) in enumerate(primed.kernels) if i != primed.main) > 0
    chain = dlbricks.decompose(MODELS["conv_bn_relu"](), "fused", opt_level="extended")
    for plain in chain.bricks.values():  # one kernel each: nothing left over
        alone = brick_session_kernels(plain, "extended")
        assert len(alone.kernels) == 1 and alone.leftover_s == 0.0


def test_on_cuda_a_fused_estimate_at_all_adds_no_nchwc_reorders() -> None:
    """The NCHWc layout and its reorders are the CPU provider's: a fused:all estimate for CUDA asks
    the database for no overhead and no reorder price (it found neither on an H100 and refused)."""
    from dlbricks.estimator.api import _reorder_costs
    from dlbricks.generators import OrtConfig

    fused = dlbricks.decompose(dlbricks.load_model(_models.resnet_like(blocks=2, batch=1), name="res_all"),
                               "fused", opt_level="all")
    assert fused.reorder_bytes
    cuda = OrtConfig(device="cuda", graph_optimization_level="all")

    class NoLookups:  # the store must not be asked
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"the estimate read {name} for CUDA")

    measured = dict.fromkeys(fused.bricks)
    assert _reorder_costs(fused, cuda, NoLookups(), "gpu-system", measured) == ({}, 0.0)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="read systems"):  # store.systems.overheads
        cpu = OrtConfig(graph_optimization_level="all")
        _reorder_costs(fused, cpu, NoLookups(), "s", measured)  # type: ignore[arg-type]

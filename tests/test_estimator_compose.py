"""Composition rules on small hand-built DAGs, and estimates from constructed measurements."""

from __future__ import annotations

import networkx as nx
import pytest

import dlbricks
from dlbricks.estimator._compose import combined_halfwidth, critical_path, sequential
from dlbricks.estimator.estimation import Peaks, estimate_decomposition
from dlbricks.estimator.predict import LatencyPredictor
from dlbricks.generators import Measurement, OrtConfig
from tests import _models


def diamond() -> nx.DiGraph:
    dag = nx.DiGraph()
    dag.add_edges_from([(0, 1), (0, 2), (1, 3), (2, 3)])
    return dag


def test_sequential_is_floor_corrected_sum() -> None:
    lat = {0: 1.0, 1: 5.0, 2: 2.0, 3: 1.0}
    assert sequential(diamond(), lat, floor_s=0.5) == pytest.approx(0.5 + 4.5 + 1.5 + 0.5 + 0.5)
    assert sequential(diamond(), lat) == pytest.approx(9.0)


def test_critical_path_takes_the_longest_branch() -> None:
    lat = {0: 1.0, 1: 5.0, 2: 2.0, 3: 1.0}
    assert critical_path(diamond(), lat, floor_s=0.5) == pytest.approx(0.5 + 4.5 + 0.5 + 0.5)
    lat[2] = 9.0
    assert critical_path(diamond(), lat) == pytest.approx(1 + 9 + 1)


def test_chain_critical_path_equals_sum() -> None:
    dag = nx.path_graph(5, create_using=nx.DiGraph)
    lat = {i: float(i + 1) for i in range(5)}
    assert critical_path(dag, lat, 0.25) == pytest.approx(sequential(dag, lat, 0.25))


def test_floor_counts_once_per_model() -> None:
    dag = nx.path_graph(100, create_using=nx.DiGraph)
    lat = {i: 2e-6 + 1e-6 for i in range(100)}  # every brick: floor 2 us + 1 us of work
    assert sequential(dag, lat, 2e-6) == pytest.approx(100e-6 + 2e-6)


def test_halfwidths_add_per_occurrence_and_in_quadrature() -> None:
    assert combined_halfwidth({"a": 4}, {"a": 1.0}) == pytest.approx(4.0)
    assert combined_halfwidth({"a": 1, "b": 1}, {"a": 3.0, "b": 4.0}) == pytest.approx(5.0)


def _measurement(key: str, median: float, floor: float = 2e-6, spread: float = 0.02) -> Measurement:
    return Measurement(key=key, status="ok", error=None, n=50, min_s=median * 0.95, median_s=median,
                       mean_s=median, p90_s=median * 1.05, p99_s=median * 1.1, std_s=median * 0.02,
                       iqr_s=median * 0.03, ci_low_s=median * (1 - spread), ci_high_s=median * (1 + spread),
                       wall_time_s=0.1, converged=True, backend="onnxruntime", config=OrtConfig(),
                       floor_s=floor)


def _fake_latency(brick: dlbricks.Brick) -> float:
    return 2e-6 + 1e-11 * (brick.flops or 0) + 1e-10 * brick.bytes_moved


def test_estimate_from_measurements() -> None:
    dec = dlbricks.decompose(_models.resnet_like(blocks=4), batch_size=1)
    ms = {sig: _measurement(sig, _fake_latency(b)) for sig, b in dec.bricks.items()}
    est = estimate_decomposition(dec, ms, config_id="cfg")
    counts = dec.counts()
    expected = sum(counts[s] * (m.median_s - 2e-6) for s, m in ms.items()) + 2e-6
    assert est.sequential_s == pytest.approx(expected)
    assert est.parallel_s <= est.sequential_s + 1e-15
    assert est.ci_low_s < est.sequential_s < est.ci_high_s
    assert est.lower_bound_s < est.sequential_s
    assert est.coverage == 1.0 and est.predicted == ()
    assert sum(c.share for c in est.breakdown) == pytest.approx(1.0)
    assert est.breakdown[0].total_s == max(c.total_s for c in est.breakdown)


def test_a_composition_error_widens_the_interval_in_log_space() -> None:
    """The composition's log error joins the bricks' interval in quadrature in log space: an error of
    a factor 3 leaves the interval above zero and reaching three times the estimate, and an estimate
    off by exactly that factor either way lies inside it."""
    import math

    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    ms = {sig: _measurement(sig, _fake_latency(b), spread=0.0) for sig, b in dec.bricks.items()}
    plain = estimate_decomposition(dec, ms, config_id="cfg")
    wide = estimate_decomposition(dec, ms, config_id="cfg", composition_error=math.log(3.0))
    seq = plain.sequential_s
    assert wide.sequential_s == pytest.approx(seq)
    assert (plain.ci_low_s, plain.ci_high_s) == pytest.approx((seq, seq))
    assert wide.ci_low_s == pytest.approx(seq / 3) and wide.ci_high_s == pytest.approx(seq * 3)
    some = estimate_decomposition(dec, {s: _measurement(s, m.median_s, spread=0.1) for s, m in ms.items()},
                                  config_id="cfg", composition_error=0.05)
    assert some.ci_low_s > 0 and some.ci_high_s - seq > seq - some.ci_low_s


def test_alternative_configurations_lower_the_bound() -> None:
    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    ms = {sig: _measurement(sig, _fake_latency(b)) for sig, b in dec.bricks.items()}
    fast = {sig: [_measurement(sig, m.median_s / 2)] for sig, m in ms.items()}
    plain = estimate_decomposition(dec, ms, config_id="cfg")
    swept = estimate_decomposition(dec, ms, config_id="cfg", alternatives=fast)
    assert swept.lower_bound_s < plain.lower_bound_s <= plain.sequential_s
    assert swept.sequential_s == pytest.approx(plain.sequential_s)


def test_roofline_below_lower_bound() -> None:
    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    ms = {sig: _measurement(sig, _fake_latency(b)) for sig, b in dec.bricks.items()}
    est = estimate_decomposition(dec, ms, config_id="cfg", peaks=Peaks(2e11, 2e10))
    assert est.roofline_s is not None and 0 < est.roofline_s <= est.lower_bound_s


def test_missing_bricks_error_or_predict() -> None:
    dec = dlbricks.decompose(_models.resnet_like(blocks=3), batch_size=1)
    other = dlbricks.decompose(_models.resnet_like(blocks=3, channels=24), batch_size=1)
    train = {sig: _measurement(sig, _fake_latency(b)) for sig, b in other.bricks.items()}
    with pytest.raises(dlbricks.InvalidArgumentError, match="have no measurement"):
        estimate_decomposition(dec, {}, config_id="cfg")
    predictor = LatencyPredictor(min_bricks=2).fit_measurements(other.bricks.values(), train)
    est = estimate_decomposition(dec, {}, config_id="cfg", on_missing="predict", predictor=predictor)
    truth = sum(n * (_fake_latency(dec.bricks[s]) - 2e-6) for s, n in dec.counts().items()) + 2e-6
    assert est.coverage == 0.0 and est.predicted_share == pytest.approx(1.0)
    assert set(est.predicted) == set(dec.bricks)
    assert est.sequential_s == pytest.approx(truth, rel=0.25)


def _conv_brick(cin: int, cout: int, hw: int, k: int, group: int = 1) -> dlbricks.Brick:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((cout, cin // group, k, k), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[k // 2] * 4, group=group)
    graph = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    (brick,) = dlbricks.decompose(dlbricks.load_model(model)).bricks.values()
    return brick


def test_im2col_elements_of_convolutions() -> None:
    from dlbricks.estimator.predict import im2col_elements

    assert im2col_elements(_conv_brick(16, 32, 8, 3)) == 16 * 9 * 64
    assert im2col_elements(_conv_brick(16, 32, 8, 1)) == 0  # pointwise: the input is the matrix
    assert im2col_elements(_conv_brick(16, 16, 8, 3, group=16)) == 0  # depthwise kernel


def test_neighbour_correction_learns_what_a_linear_model_cannot() -> None:
    """GEMMs with few output channels run at a lower rate: the correction finds it, the linear
    model (one rate for all) cannot."""

    def latency(b: dlbricks.Brick) -> float:
        cout = b.outputs[0].shape[1]
        return 1e-6 + (b.flops or 0) / (1e10 * (cout / 128) ** 0.3)

    train = [_conv_brick(cin, cout, hw, 3) for cin in (16, 32, 64) for cout in (8, 16, 32, 64, 128)
             for hw in (8, 14)]
    truth = {b.signature: latency(b) for b in train}
    held_out = [_conv_brick(48, 12, 10, 3), _conv_brick(24, 96, 12, 3)]
    corrected = LatencyPredictor().fit(train, truth)
    linear = LatencyPredictor(neighbours=0).fit(train, truth)
    assert corrected.models_["Conv"].cv_error < 0.6 * linear.models_["Conv"].cv_error
    for brick in held_out:
        error = abs(corrected.predict(brick) / latency(brick) - 1)
        assert error < 0.1 and error < abs(linear.predict(brick) / latency(brick) - 1)


def test_roofline_peaks_rise_to_what_the_bricks_reached() -> None:
    """A calibration taken while the machine ran slower than when the bricks ran must not lift the
    roofline above the lower bound: the peaks rise to the rates the model's big bricks reached."""
    from dlbricks.estimator.estimation import REACHED_MIN_S

    dec = dlbricks.decompose(_models.resnet_like(blocks=2, channels=64), batch_size=1)
    ms = {sig: _measurement(sig, 1e-11 * (b.flops or 0) + 4e-6) for sig, b in dec.bricks.items()}
    slow = Peaks(flops_per_s=5e10, bytes_per_s=1e30)  # the bricks reached about 1e11 FLOP/s
    est = estimate_decomposition(dec, ms, config_id="cfg", peaks=slow)
    assert est.roofline_s is not None and est.roofline_s <= est.lower_bound_s
    big = [c for c in est.breakdown if c.lower_bound_s and c.lower_bound_s >= REACHED_MIN_S]
    assert big and all(c.roofline_s <= c.lower_bound_s * (1 + 1e-9) for c in big)
    naive = sum(dec.counts()[s] * slow.roofline_s(b) for s, b in dec.bricks.items())
    assert naive > est.lower_bound_s  # the calibrated peaks alone would break the bound


def test_no_brick_counts_below_its_roofline_in_the_lower_bound() -> None:
    """Microsecond bricks whose floor-corrected times came out faster than their arithmetic at
    the peak (too small to raise the peaks) count at their roofline in the lower bound."""
    dec = dlbricks.decompose(_models.transformer_layer(seq=32, hidden=64), batch_size=1)
    floor = 2e-6
    ms = {sig: _measurement(sig, floor + 1e-12 * (b.flops or 0) + 1e-8) for sig, b in dec.bricks.items()}
    peaks = Peaks(flops_per_s=1e11, bytes_per_s=1e30)  # ten times slower than the corrected times
    est = estimate_decomposition(dec, ms, config_id="cfg", peaks=peaks)
    assert est.roofline_s is not None and 0 < est.roofline_s <= est.lower_bound_s - est.floor_s
    held = [c for c in est.breakdown if c.roofline_s and c.roofline_s > 1e-9]
    assert held and all(c.lower_bound_s == pytest.approx(c.roofline_s) for c in held)
    assert all(c.lower_bound_s is not None and c.lower_bound_s <= c.latency_s * (1 + 1e-9) for c in est.breakdown)


def test_views_count_nothing_beyond_the_floor() -> None:
    """A brick that onnxruntime runs inside a model as a view of its input (Reshape, Flatten...)
    moves no data there; its own measured time is a copy into an output of its own, so it counts
    zero, in the estimate and in the lower bound."""
    from dlbricks.estimator.api import view_bricks

    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    ms = {sig: _measurement(sig, _fake_latency(b)) for sig, b in dec.bricks.items()}
    flat = next(sig for sig, b in dec.bricks.items() if b.op_type == "Flatten")
    ms[flat] = _measurement(flat, 50e-6)  # the copy
    assert view_bricks(dec, "onnxruntime") == {flat}
    plain = estimate_decomposition(dec, ms, config_id="cfg")
    viewed = estimate_decomposition(dec, ms, config_id="cfg", views={flat})
    copy = dec.counts()[flat] * (ms[flat].median_s - 2e-6)
    assert plain.sequential_s - viewed.sequential_s == pytest.approx(copy)
    assert plain.lower_bound_s - viewed.lower_bound_s == pytest.approx(dec.counts()[flat] * (ms[flat].min_s - 2e-6))
    assert next(c for c in viewed.breakdown if c.signature == flat).total_s == 0.0


def test_views_count_the_floors_cost_of_a_node() -> None:
    """Inside a model a view still passes through the executor, as each further node of the
    floor's chain does: with ``node_s`` measured, each view occurrence counts it (never more than
    its own brick's time less the floor), in the estimate and the lower bound."""
    from dataclasses import replace

    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    node_s = 0.2e-6
    ms = {sig: replace(_measurement(sig, _fake_latency(b)), node_s=node_s) for sig, b in dec.bricks.items()}
    flat = next(sig for sig, b in dec.bricks.items() if b.op_type == "Flatten")
    ms[flat] = replace(_measurement(flat, 50e-6), node_s=node_s)
    zero = estimate_decomposition(dec, {s: replace(m, node_s=None) for s, m in ms.items()}, config_id="cfg",
                                  views={flat})
    viewed = estimate_decomposition(dec, ms, config_id="cfg", views={flat})
    count = dec.counts()[flat]
    assert viewed.sequential_s - zero.sequential_s == pytest.approx(count * node_s)
    assert viewed.lower_bound_s - zero.lower_bound_s == pytest.approx(count * node_s)
    assert next(c for c in viewed.breakdown if c.signature == flat).latency_s == pytest.approx(node_s)
    cheap = {**ms, flat: replace(_measurement(flat, 2e-6 + 0.1e-6), node_s=node_s)}  # its brick: 0.1 us
    assert next(c for c in estimate_decomposition(dec, cheap, config_id="cfg", views={flat}).breakdown
                if c.signature == flat).latency_s == pytest.approx(0.1e-6)


def _on_cuda(m: Measurement, device_warm: float) -> Measurement:
    """``m`` as a CUDA measurement whose kernels take ``device_warm`` (cold: 20% more)."""
    from dataclasses import replace

    return replace(m, config=OrtConfig(device="cuda"), host_s=(m.median_s or 0.0) * 3, device_s=1.2 * device_warm,
                   device_warm_s=device_warm)


@pytest.mark.parametrize("device_share", [0.1, 0.5, 0.9])
def test_on_cuda_the_estimate_is_the_launch_queue_between_its_limits(device_share: float) -> None:
    from dlbricks.estimator.queue import queue_latency

    dec = dlbricks.decompose(_models.matmul_stack(shared=False, layers=6))
    floor = 10e-6
    cpu = {sig: _measurement(sig, floor + 30e-6, floor=floor) for sig in dec.bricks}
    cuda = {sig: _on_cuda(m, device_share * 30e-6) for sig, m in cpu.items()}
    summed = estimate_decomposition(dec, cpu, config_id="c")
    queued = estimate_decomposition(dec, cuda, config_id="c")
    n = len(dec.occurrences)
    assert summed.sequential_s == pytest.approx(floor + n * 30e-6)
    # each brick: 30 us in all, of which device_share on the device, the rest issuing it
    host, device = (1 - device_share) * 30e-6, device_share * 30e-6
    assert queued.sequential_s == pytest.approx(floor + n * max(host, device) + min(host, device))
    assert queued.sequential_s < summed.sequential_s
    assert floor + n * max(host, device) <= queued.sequential_s <= floor + n * (host + device)
    assert queued.lower_bound_s == pytest.approx(floor + n * device)  # every kernel back to back
    assert queued.lower_bound_s <= queued.sequential_s and queued.parallel_s <= queued.sequential_s
    assert queue_latency([]) == 0.0


def test_a_cuda_brick_whose_host_waits_is_counted_whole_in_the_queue() -> None:
    from dataclasses import replace

    dec = dlbricks.decompose(_models.matmul_stack(shared=False, layers=4))
    floor = 10e-6
    cuda = {sig: _on_cuda(_measurement(sig, floor + 30e-6, floor=floor), 3e-6) for sig in dec.bricks}
    overlapped = estimate_decomposition(dec, cuda, config_id="c")
    blocking = next(iter(cuda))
    cuda[blocking] = replace(cuda[blocking], device_s=None, device_warm_s=None)
    est = estimate_decomposition(dec, cuda, config_id="c")
    plain = estimate_decomposition(dec, {s: replace(m, host_s=None) for s, m in cuda.items()}, config_id="c")
    assert overlapped.sequential_s < est.sequential_s <= plain.sequential_s * (1 + 1e-12)
    count = sum(1 for o in dec.occurrences if o.signature == blocking)
    assert est.sequential_s >= floor + count * 30e-6


def test_on_cuda_the_graph_estimate_is_the_kernels_back_to_back_and_the_floor_once() -> None:
    """The model captured in a CUDA graph: every occurrence's kernels after themselves
    (``device_warm_s``) back to back, and the floor once; none on a CPU or where a brick has no
    device time."""
    from dataclasses import replace

    dec = dlbricks.decompose(_models.matmul_stack(shared=False, layers=6))
    floor, n = 10e-6, len(dec.occurrences)
    cpu = {sig: _measurement(sig, floor + 30e-6, floor=floor) for sig in dec.bricks}
    device = {sig: (k + 1) * 1e-6 for k, sig in enumerate(dec.bricks)}
    cuda = {sig: _on_cuda(m, device[sig]) for sig, m in cpu.items()}
    est = estimate_decomposition(dec, cuda, config_id="c")
    kernels = sum(device[o.signature] for o in dec.occurrences)
    assert est.graph_s == pytest.approx(floor + kernels)
    assert est.lower_bound_s <= est.graph_s < est.sequential_s  # no launch between kernels
    assert est.sequential_s == pytest.approx(floor + n * 30e-6 - kernels + device[dec.occurrences[-1].signature])
    assert estimate_decomposition(dec, cpu, config_id="c").graph_s is None
    unprobed = next(iter(cuda))
    assert estimate_decomposition(dec, {**cuda, unprobed: replace(cuda[unprobed], device_s=None, device_warm_s=None)},
                                  config_id="c").graph_s is None
    assert estimate_decomposition(dec, cuda, config_id="c", launch_queue=False).graph_s is None


def test_onnxruntime_captures_a_cuda_graph_on_cuda_only() -> None:
    from dataclasses import replace

    from dlbricks.estimator.api import graph_config

    with pytest.raises(dlbricks.InvalidArgumentError, match="--device cuda"):
        graph_config(OrtConfig())
    cuda = OrtConfig(device="cuda", provider_options={"use_tf32": "0"})
    graphed = graph_config(cuda)
    assert dict(graphed.provider_options) == {"use_tf32": "0", "enable_cuda_graph": "1"}
    assert graphed.config_id != cuda.config_id  # stored apart from the eager runs
    assert replace(graphed, provider_options=cuda.provider_options) == cuda


@pytest.mark.parametrize(("repeat", "expected"), [
    (None, 20e-6),  # no copies timed: its latency less its kernels
    (25e-6, 25e-6),  # a further copy costs more than its kernels: the host is the limit, at that cost
    (10e-6, 10e-6),  # ... and less than the run alone showed
    (5e-6, 5e-6),  # a further copy costs its kernels' time: the host at most that
])
def test_the_hosts_issue_time_of_a_brick(repeat: float | None, expected: float) -> None:
    from dlbricks.estimator.estimation import issue_time

    assert issue_time(25e-6, 5e-6, repeat) == pytest.approx(expected)
    assert issue_time(25e-6, 30e-6, None) == 0.0


def test_on_cuda_copies_side_by_side_set_the_hosts_time_in_the_queue() -> None:
    """What a further copy of each brick adds to a run of several (``repeat_s``) is the host's time
    in the queue where it exceeds the kernels; a brick measured without queue times waits whole."""
    from dataclasses import replace

    dec = dlbricks.decompose(_models.matmul_stack(shared=False, layers=6))
    floor, n = 10e-6, len(dec.occurrences)
    cuda = {sig: _on_cuda(_measurement(sig, floor + 30e-6, floor=floor), 5e-6) for sig in dec.bricks}
    alone = estimate_decomposition(dec, cuda, config_id="c")
    assert alone.sequential_s == pytest.approx(floor + n * 25e-6 + 5e-6)
    repeated = estimate_decomposition(dec, {s: replace(m, repeat_s=12e-6) for s, m in cuda.items()}, config_id="c")
    assert repeated.sequential_s == pytest.approx(floor + n * 12e-6 + 5e-6)
    assert repeated.lower_bound_s == alone.lower_bound_s == pytest.approx(floor + n * 5e-6)
    unprobed = next(iter(cuda))
    partial = estimate_decomposition(dec, {**cuda, unprobed: replace(cuda[unprobed], host_s=None)}, config_id="c")
    count = sum(1 for o in dec.occurrences if o.signature == unprobed)
    waited = floor + (n - count) * 25e-6 + count * 30e-6  # its whole latency, after the kernels before it
    assert waited < partial.sequential_s <= waited + (count + 1) * 5e-6 + 1e-12


def test_on_cuda_a_view_costs_its_host_and_never_waits_for_the_device() -> None:
    """A view runs no kernel inside a model: in the queue it costs the host what a further copy of
    it adds to a run, and the kernels issued before it keep running."""
    from dataclasses import replace

    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    flat = next(sig for sig, b in dec.bricks.items() if b.op_type == "Flatten")
    floor = 10e-6
    cuda = {sig: _on_cuda(_measurement(sig, floor + 30e-6, floor=floor), 20e-6) for sig in dec.bricks}
    cuda[flat] = replace(cuda[flat], repeat_s=1e-6)
    viewed = estimate_decomposition(dec, cuda, config_id="c", views={flat})
    others = [o for o in dec.occurrences if o.signature != flat]
    # device-bound: the first brick's host time, then kernels back to back; no drain at the view
    assert viewed.sequential_s == pytest.approx(floor + 10e-6 + len(others) * 20e-6)
    plain = estimate_decomposition(dec, cuda, config_id="c")
    assert viewed.sequential_s < plain.sequential_s


def test_a_brick_pays_the_floor_of_its_own_moments() -> None:
    """A brick timed while the floor stood 1 us above the run's (its ``empty_s``, the floor's
    one-node model timed beside it, against ``floor_s + node_s``) counts 1 us less a layer, in the
    estimate and the lower bound; one timed below it counts more in the estimate and never raises
    the lower bound."""
    from dataclasses import replace

    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    node_s, layers = 0.2e-6, sum(dec.counts().values())
    plain = {sig: replace(_measurement(sig, _fake_latency(b) + 2e-6), node_s=node_s) for sig, b in dec.bricks.items()}
    base = estimate_decomposition(dec, plain, config_id="cfg")
    slow = estimate_decomposition(dec, {s: replace(m, empty_s=2e-6 + node_s + 1e-6) for s, m in plain.items()},
                                  config_id="cfg")
    assert base.sequential_s - slow.sequential_s == pytest.approx(layers * 1e-6)
    assert base.lower_bound_s - slow.lower_bound_s == pytest.approx(layers * 1e-6)
    fast = estimate_decomposition(dec, {s: replace(m, empty_s=2e-6 + node_s - 0.5e-6) for s, m in plain.items()},
                                  config_id="cfg")
    assert fast.sequential_s - base.sequential_s == pytest.approx(layers * 0.5e-6)
    assert fast.lower_bound_s == pytest.approx(base.lower_bound_s)
    steady = estimate_decomposition(dec, {s: replace(m, empty_s=2e-6 + node_s) for s, m in plain.items()},
                                    config_id="cfg")
    assert steady.sequential_s == pytest.approx(base.sequential_s)


def test_the_roofline_charges_only_the_weights_that_the_caches_cannot_keep() -> None:
    """A model run again and again finds its weights in the caches where they fit: its roofline
    keeps the arithmetic and charges memory only for the weights beyond the caches' capacity."""
    dec = dlbricks.decompose(_models.resnet_like(blocks=2), batch_size=1)
    weights = dec.weight_bytes()
    assert 0 < weights <= dec.footprint_bytes()
    memory_bound = Peaks(flops_per_s=1e30, bytes_per_s=1e9)
    ms = {sig: _measurement(sig, _fake_latency(b)) for sig, b in dec.bricks.items()}

    def roofline(peaks: Peaks) -> float:
        est = estimate_decomposition(dec, ms, config_id="cfg", peaks=peaks)
        assert est.roofline_s is not None
        return est.roofline_s

    every = roofline(memory_bound)
    assert every == pytest.approx(sum(dec.counts()[s] * b.constant_bytes for s, b in dec.bricks.items()) / 1e9,
                                  rel=1e-6)
    assert memory_bound.for_model(weights, None) == memory_bound  # caches unknown: every weight
    assert roofline(memory_bound.for_model(weights, weights)) == pytest.approx(0.0, abs=1e-12)
    quarter = memory_bound.for_model(4 * weights, 3 * weights)
    assert quarter.weight_share == pytest.approx(0.25)
    assert roofline(quarter) == pytest.approx(every / 4, rel=1e-6)


def test_an_estimate_of_a_model_that_fits_the_caches_has_no_memory_side(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Through the library, a system with 1.5 MiB of data caches: a small model's weights fit
    them, so its roofline is its arithmetic alone, below the bricks' fastest runs."""
    from dataclasses import replace

    from dlbricks.benchmarks_db import Store
    from dlbricks.estimator import estimate
    from dlbricks.estimator.api import cache_capacity
    from dlbricks.generators import collect_system_info
    from tests.test_db_support import measurement

    dec = dlbricks.decompose(dlbricks.load_model(_models.transformer_layer(), batch_size=1, name="t"))
    system = replace(collect_system_info(), cache_bytes=(("L1d", 1 << 19), ("L1i", 1 << 19), ("L2", 1 << 20)))
    capacity = cache_capacity(None, system)
    assert capacity == 3 << 19 and dec.weight_bytes() < capacity  # instruction caches hold no weights
    with Store(tmp_path / "t.db") as store:
        store.models.add(dec)
        for sig in dec.bricks:
            store.measurements.record(measurement(sig, median=1e-5), system)
        assert cache_capacity(store, system.fingerprint) == capacity  # a stored system's, by fingerprint
        memory_bound = Peaks(flops_per_s=1e30, bytes_per_s=1e6)
        est = estimate(dec, store, system=system, peaks=memory_bound)
    assert est.roofline_s is not None and est.roofline_s < 1e-9 < est.lower_bound_s
    assert estimate_decomposition(dec, {s: measurement(s, median=1e-5) for s in dec.bricks}, config_id="c",
                                  peaks=memory_bound).roofline_s > est.lower_bound_s  # every weight from memory

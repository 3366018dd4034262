"""Bricks taken from an earlier model's rounds through anchors: on a fake clock whose speed changes in
slow phases (the arithmetic), and on real onnxruntime sessions through ``evaluate`` (the plan and
what is stored)."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace

import numpy as np
import pytest

import dlbricks
from dlbricks import InvalidArgumentError
from dlbricks.benchmarks_db import Store
from dlbricks.benchmarks_db.rounds import Reuse, anchored_groups
from dlbricks.generators.rounds import (
    DEFAULT_TRANSFER_SPREAD,
    Anchored,
    RoundsBudget,
    rounds_measurements,
    time_rounds,
    with_anchored,
)
from dlbricks.model_zoo import build
from tests.test_rounds import BRICKS_US, COUNTS, WHOLE_US, FakeRun, PhasedClock

KEYS = [f"b{i}" for i in range(len(BRICKS_US))]
ANCHORS = (2, 3)  # the heaviest brick and the lightest, as Reuse(share=0.25) ranks them
TAKEN = (0, 1, 4)


class SteadyAt(PhasedClock):
    """A machine that holds one speed: every run ``factor`` times its base time."""

    def __init__(self, factor: float) -> None:
        super().__init__(0)
        self.factors = np.full_like(self.factors, factor)


def _rounds(clock: PhasedClock, at: tuple[int, ...], seed: int = 0):
    """The model whole and its bricks at positions ``at`` in rounds on ``clock``, as measurements."""
    bricks = [FakeRun(clock, BRICKS_US[i]) for i in at]
    counts = [COUNTS[i] for i in at]
    rounds = time_rounds(FakeRun(clock, WHOLE_US), bricks, counts, RoundsBudget(min_rounds=30, max_time=12.0),
                         clock=clock, rng=np.random.default_rng(seed))
    return rounds_measurements(rounds, "model", [KEYS[i] for i in at], counts, "fake", None,  # type: ignore[arg-type]
                               floor_s=None, node_s=None)


def _group(earlier, taken=TAKEN, anchors=ANCHORS) -> Anchored:
    return Anchored(keys=tuple(KEYS[i] for i in taken), counts=tuple(COUNTS[i] for i in taken),
                    medians_s=tuple(earlier.bricks[KEYS[i]].median_s for i in taken),
                    mins_s=tuple(earlier.bricks[KEYS[i]].min_s for i in taken), empties_s=(None,) * len(taken),
                    anchors=tuple(KEYS[i] for i in anchors),
                    anchor_medians_s=tuple(earlier.bricks[KEYS[i]].median_s for i in anchors))


@pytest.mark.parametrize("seed", range(4))
def test_bricks_taken_through_anchors_hold_the_ratio_where_their_stored_moment_is_off_by_its_speed(seed: int) -> None:
    """Bricks stored from a moment when the machine ran 1.9x as slow, joined to rounds on a machine
    swinging 1.0-1.6x through two anchors timed in them: the bricks' sum over the whole model is 1
    within 1%, as if every brick had been timed; the stored times taken as they are would be off by
    what the two moments differ (over five points here)."""
    earlier = _rounds(SteadyAt(1.9), tuple(range(len(BRICKS_US))))
    now = _rounds(PhasedClock(seed), ANCHORS, seed)
    joined = with_anchored(now, [_group(earlier)])
    ratio, low, high = joined.ratio()
    assert ratio == pytest.approx(1.0, rel=0.01)
    assert low <= 1.0 <= high
    assert set(joined.keys) == set(KEYS) and joined.rounds.derived == len(TAKEN)
    whole = now.whole.median_s
    as_stored = (sum(COUNTS[i] * earlier.bricks[KEYS[i]].median_s for i in TAKEN)
                 + sum(COUNTS[i] * now.bricks[KEYS[i]].median_s for i in ANCHORS)) / whole
    assert abs(as_stored - 1.0) > 0.05  # the two moments differ by the phases' size: the anchors are the fix


def test_bricks_taken_through_anchors_cost_nothing_in_the_rounds_that_take_them() -> None:
    """A taken brick's row was not timed: the rounds' bricks' time and each timed brick's share of the
    preparation count the anchors only, and a taken brick's measurement has a wall time of 0."""
    earlier = _rounds(SteadyAt(1.0), tuple(range(len(BRICKS_US))))
    now = _rounds(SteadyAt(1.0), ANCHORS)
    now = replace(now, rounds=replace(now.rounds, prepare_s=2.0))  # 2 s of preparation for the two anchors
    joined = with_anchored(now, [_group(earlier)])
    assert joined.rounds.bricks_timed_s() == pytest.approx(now.rounds.bricks_timed_s())
    assert all(joined.bricks[KEYS[i]].wall_time_s == 0.0 for i in TAKEN)
    timed = [joined.bricks[KEYS[i]].wall_time_s for i in ANCHORS]
    assert sum(timed) == pytest.approx(2.0 + now.rounds.bricks_timed_s())


def test_the_interval_widens_by_how_far_the_anchors_disagree() -> None:
    """Two anchors that agree cannot say how far a taken brick strays: the default spread is assumed.
    Three anchors, one of which ran 30% slower than the earlier moment says while the others held,
    widen the interval by their own spread; three that agree add nothing."""
    earlier = _rounds(SteadyAt(1.0), tuple(range(len(BRICKS_US))))
    two = with_anchored(_rounds(SteadyAt(1.0), ANCHORS), [_group(earlier)])
    share = sum(COUNTS[i] * BRICKS_US[i] for i in TAKEN) / WHOLE_US
    assert two.transfer_half_width > DEFAULT_TRANSFER_SPREAD * share  # z * spread * sqrt(1/n_a + 1/n_b) * share
    three = (0, 2, 3)
    agree = with_anchored(_rounds(SteadyAt(1.0), three), [_group(earlier, (1, 4), three)])
    assert agree.transfer_half_width == pytest.approx(0.0, abs=1e-9)
    clock = SteadyAt(1.0)
    bricks = [FakeRun(clock, BRICKS_US[i] * (1.3 if i == 0 else 1.0)) for i in three]
    rounds = time_rounds(FakeRun(clock, WHOLE_US), bricks, [COUNTS[i] for i in three],
                         RoundsBudget(min_rounds=30, max_time=12.0), clock=clock, rng=np.random.default_rng(0))
    stray = rounds_measurements(rounds, "model", [KEYS[i] for i in three], [COUNTS[i] for i in three], "fake",
                                None, floor_s=None, node_s=None)  # type: ignore[arg-type]
    disagree = with_anchored(stray, [_group(earlier, (1, 4), three)])
    assert disagree.transfer_half_width > 0.01
    ratio, low, high = disagree.ratio()
    plain = stray.ratio()
    assert high - low > plain[2] - plain[1]


def test_a_feeder_runs_in_the_rounds_for_its_anchor_but_its_figure_is_taken() -> None:
    """b1 writes anchor b2's input, so the rounds run it (a feeder), but what it reads no brick of the
    chain wrote: its figure is taken through the anchors like b0's and b4's, its wall time is what its
    calls cost, and its own row weighs nothing in the ratio."""
    earlier = _rounds(SteadyAt(1.9), tuple(range(len(BRICKS_US))))
    now = _rounds(PhasedClock(1), (1, 2, 3), 1)
    slow_row = tuple(2 * t for t in now.rounds.bricks_s[0])  # b1 ran twice its time: it read cold data
    now = replace(now, rounds=replace(now.rounds, bricks_s=(slow_row, *now.rounds.bricks_s[1:])))
    group = replace(_group(earlier), feeders=("b1",))
    joined = with_anchored(now, [group])
    assert joined.ratio()[0] == pytest.approx(1.0, rel=0.01)  # b1's slow calls left no trace
    relative = joined.bricks["b1"].median_s / joined.bricks["b2"].median_s
    assert relative == pytest.approx(BRICKS_US[1] / BRICKS_US[2], rel=0.02)  # at the anchors' speed, not 2x
    assert joined.bricks["b1"].wall_time_s == now.bricks["b1"].wall_time_s > 0
    assert joined.rounds.bricks_timed_s() == pytest.approx(now.rounds.bricks_timed_s())
    with pytest.raises(InvalidArgumentError, match="feeders"):
        replace(group, feeders=("b2",))


def test_a_group_whose_anchors_did_not_finish_is_left_out() -> None:
    earlier = _rounds(SteadyAt(1.0), tuple(range(len(BRICKS_US))))
    now = _rounds(SteadyAt(1.0), (2,))
    assert with_anchored(now, [_group(earlier)]) is now  # anchor b3 missing


@pytest.mark.parametrize("bad", [{"share": 0}, {"share": 1.5}, {"min_bricks": 1}, {"share": True}])
def test_a_reuse_policy_refuses_what_cannot_work(bad: dict) -> None:
    with pytest.raises(InvalidArgumentError):
        Reuse(**bad)


def test_evaluate_takes_the_bricks_an_earlier_models_rounds_timed_through_anchors(with_peaks) -> None:
    """squeezenet1_0 after squeezenet1_1 (16 bricks in common): its rounds time some of them as
    anchors (a quarter, and the brick that writes each anchor's input) and take the others from
    squeezenet1_1's rounds, stored in its context with a wall time of 0; both models are estimated;
    the plan on the filled database takes nothing (each model's own rounds ran)."""
    from dlbricks.estimator import evaluation
    from dlbricks.estimator.api import CHAINED_ROUNDS
    from dlbricks.generators import Budget

    db = with_peaks("reuse.db")
    lines: list[str] = []
    ev = evaluation.evaluate(["squeezenet1_1", "squeezenet1_0"], db, budget=Budget.quick(), lower_bound_sweep=False,
                             say=lines.append, rounds=CHAINED_ROUNDS)
    first = next(line for line in lines if line.startswith("squeezenet1_1: ") and "rounds of" in line)
    second = next(line for line in lines if line.startswith("squeezenet1_0: ") and "rounds of" in line)
    assert "taken from earlier" not in first
    found = re.search(r"\((\d+) of them taken from earlier models' rounds", second)
    assert found, second
    count = int(found.group(1))
    assert 4 <= count <= 14
    assert all(abs(r.error) < 0.25 for r in ev.rows)  # a quick budget on a shared machine: the level
    with sqlite3.connect(db) as conn:
        taken = conn.execute("SELECT COUNT(*) FROM context_measurements c JOIN models m ON c.model = m.key "
                             "WHERE m.name = 'squeezenet1_0' AND c.wall_time_s = 0").fetchone()[0]
    dec = dlbricks.decompose(dlbricks.load_model(build("squeezenet1_0"), batch_size=1, name="squeezenet1_0"))
    with Store(db) as store:
        assert store.models.has(dec.model_key)
        assert anchored_groups(store, dec, ev.system, ev.config.config_id) == []
        earlier = {store.models.get("squeezenet1_1").key}
        groups = anchored_groups(store, dec, ev.system, ev.config.config_id, again=True, among=earlier)
    taken_keys = {k for g in groups for k in g.keys}
    fed = {k for g in groups for k in g.feeders}
    assert len(taken_keys) == count and taken == count - len(fed)
    for key in set(dec.bricks) - taken_keys:  # each brick the rounds time reads what a brick they run wrote
        before = dec.previous(key)
        assert before is None or before.signature not in taken_keys or before.signature in fed

"""A model's next round process set up ahead: while one worker sets up for a model's rounds, the
spare that the next process takes holds the whole model and prepares its bricks on the other core,
and neither sets up while a worker times. Real onnxruntime sessions in real worker processes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from dlbricks.estimator.api import CHAINED_ROUNDS
from dlbricks.generators import Budget, OrtConfig
from dlbricks.generators import runner as runner_module
from dlbricks.generators.items import Item, resolve_item
from dlbricks.generators.runner import Runner, rounds_in_processes

import dlbricks
from tests._models import resnet_like

ROUNDS = dataclasses.replace(CHAINED_ROUNDS, min_rounds=4, min_time=0.0, max_time=0.5)


def _suite() -> tuple[Item, list[Item], list[int], Any]:
    graph = dlbricks.load_model(resnet_like(blocks=2, channels=8), batch_size=1, name="r2")
    dec = dlbricks.decompose(graph)
    keys = list(dict.fromkeys(o.signature for o in dec.occurrences))
    counts = dec.counts()
    bricks = [resolve_item(dec.in_context(k)) for k in keys]
    return resolve_item(graph), bricks, [counts[k] for k in keys], dec.feeds(keys)


@pytest.fixture
def taken(monkeypatch) -> list[tuple[str, bool]]:
    """Each time a worker with requests sent ahead was asked for one: (kind, whether it had its answer)."""
    seen: list[tuple[str, bool]] = []
    take = runner_module._Worker.take_ahead

    def spy(self: Any, kind: str, key: str, timeout: float) -> Any:
        pending = self.has_ahead
        reply = take(self, kind, key, timeout)
        if pending:
            seen.append((kind, reply is not None and reply[0] == "ok"))
        return reply

    monkeypatch.setattr(runner_module._Worker, "take_ahead", spy)
    return seen


def test_the_next_process_sets_up_while_the_current_one_does_and_neither_while_one_times(taken,
                                                                                        monkeypatch) -> None:
    """Two processes of chained rounds: the second's worker holds the whole model and prepares its
    bricks while the first's does; when the first's rounds start, the spare has answered everything
    (nothing sets up beside the timing); the second takes what it prepared; the spare left for the
    next model holds nothing."""
    whole, bricks, counts, feeds = _suite()
    pending_at_rounds: list[bool] = []
    rounds = Runner.rounds

    def spy(self: Runner, *args: Any, **kwargs: Any) -> Any:
        pending_at_rounds.append(self._spare is not None and bool(self._spare._ahead))
        return rounds(self, *args, **kwargs)

    monkeypatch.setattr(Runner, "rounds", spy)
    with Runner(budget=Budget.quick()) as runner:
        paired = rounds_in_processes(runner, whole, bricks, counts, ROUNDS, processes=2, max_processes=2,
                                     seed=1, feeds=feeds)
        assert runner._spare is not None and not runner._spare.has_ahead  # a plain spare for the next model
    assert paired is not None and set(paired.rounds.process) == {0, 1}
    assert pending_at_rounds == [False, False]
    assert taken == [("prepare", True), ("measure", True), ("prepare", True)]
    per_process = [sum(p == i for p in paired.rounds.process) for i in (0, 1)]
    assert min(per_process) >= ROUNDS.min_rounds
    assert set(paired.bricks) == {b.key for b in bricks}
    assert paired.rounds.hold_s > 0 and paired.rounds.prepare_s > 0
    assert paired.ratio()[0] > 0


def test_a_spare_set_up_for_another_model_is_not_used_for_this_one(taken) -> None:
    """What a spare prepared ahead for one model is dropped when the next request is another's: the
    worker holds and prepares that one itself."""
    whole, bricks, counts, feeds = _suite()
    with Runner(budget=Budget.quick()) as runner:
        assert runner.measure(whole).ok
        runner.prestart_rounds(whole, bricks, counts, ROUNDS, feeds=feeds)
        runner.close(keep_spare=True)
        other = Item("whole-other", whole.load)
        held = runner.measure_detailed(other, hold=True)[0]
        assert held.ok
        part = runner.rounds(other.key, bricks, counts, ROUNDS, seed=2, feeds=feeds)
        assert part is not None and part.rounds.count >= ROUNDS.min_rounds
    assert taken[0] == ("measure", False)


def test_a_spare_that_dies_while_it_sets_up_is_replaced_and_the_rounds_still_run(taken) -> None:
    """A spare killed before its answers are read: the next request starts a fresh worker, which holds
    and prepares everything itself."""
    whole, bricks, counts, feeds = _suite()
    with Runner(budget=Budget.quick()) as runner:
        assert runner.measure(whole).ok
        runner.prestart_rounds(whole, bricks, counts, ROUNDS, feeds=feeds)
        spare = runner._spare
        assert spare is not None and spare.has_ahead
        spare.proc.kill()
        spare.proc.wait()
        runner.close(keep_spare=True)
        held = runner.measure_detailed(whole, hold=True)[0]
        assert held.ok and runner.worker_pid not in (None, spare.proc.pid)
        part = runner.rounds(whole.key, bricks, counts, ROUNDS, seed=3, feeds=feeds)
        assert part is not None and part.rounds.count >= ROUNDS.min_rounds


def test_nothing_is_set_up_ahead_for_runs_of_several_threads() -> None:
    """Runs of two threads take the other core themselves: the spare only starts."""
    whole, bricks, counts, feeds = _suite()
    with Runner(config=OrtConfig(intra_op_num_threads=2), budget=Budget.quick()) as runner:
        assert runner.measure(whole).ok
        runner.prestart_rounds(whole, bricks, counts, ROUNDS, feeds=feeds)
        assert runner._spare is not None and not runner._spare.has_ahead


def test_a_model_held_for_its_rounds_is_run_once_by_its_preparation_and_timed_by_its_rounds_only() -> None:
    """The hold before a model's rounds times nothing (``proof``): preparing the whole model runs it
    once, which proves it runs; the rounds that follow time it. A held model that cannot run fails
    there, as before."""
    whole, bricks, counts, feeds = _suite()
    with Runner(budget=Budget.quick()) as runner:
        held, timing = runner.measure_detailed(whole, hold=True, proof=True)
        assert held.ok and held.n == 0 and held.median_s is None
        assert timing is not None and timing.warmup_calls == 0 and timing.sampling_s == 0.0 and timing.prepare_s > 0
        part = runner.rounds(whole.key, bricks, counts, ROUNDS, seed=3, feeds=feeds)
        assert part is not None and part.rounds.count >= ROUNDS.min_rounds
        timed = runner.measure_detailed(whole, hold=True)[0]  # without proof, the hold is a measurement
        assert timed.ok and timed.n >= 1 and timed.median_s > 0

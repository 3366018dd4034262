"""A worker keeps prepared bricks: measured again without being prepared again, closed by size and
value when its cache is full."""

from __future__ import annotations

import pytest

from dlbricks import decompose, load_model
from dlbricks.errors import InvalidArgumentError
from dlbricks.generators import Budget
from dlbricks.generators._cache import PreparedCache
from dlbricks.generators.runner import Runner
from tests._models import resnet_like

BUDGET = Budget.quick()


def _bricks_in_context(count: int) -> list:
    dec = decompose(load_model(resnet_like(blocks=2), input_shapes={"x": [1, 3, 16, 16]}), "layer")
    return [dec.in_context(sig) for sig in list(dec.bricks)[:count]]


def test_a_brick_measured_again_is_not_prepared_again() -> None:
    item = _bricks_in_context(2)[1]
    with Runner(budget=BUDGET) as runner:
        first, t1 = runner.measure_detailed(item)
        again, t2 = runner.measure_detailed(item)
    assert first.ok and again.ok
    assert t1 is not None and t2 is not None
    assert t1.prepare_s > 0 and t2.prepare_s == 0.0


def test_a_worker_that_keeps_nothing_prepares_every_time() -> None:
    item = _bricks_in_context(2)[1]
    with Runner(budget=BUDGET, keep_bytes=0) as runner:
        _, t1 = runner.measure_detailed(item)
        _, t2 = runner.measure_detailed(item)
    assert t1 is not None and t2 is not None
    assert t1.prepare_s > 0 and t2.prepare_s > 0


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1G"])
def test_keep_bytes_must_be_a_count(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="keep_bytes"):
        Runner(budget=BUDGET, keep_bytes=bad)  # type: ignore[arg-type]


class _Fake:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_full_cache_closes_the_shortest_runs_first_and_keeps_the_newest() -> None:
    cache = PreparedCache(300)
    short, long, newest = _Fake(100), _Fake(100), _Fake(150)
    cache.keep("short", short, value_s=1e-5)
    cache.keep("long", long, value_s=1e-2)
    cache.keep("newest", newest, value_s=1e-6)
    assert short.closed and not long.closed and not newest.closed
    assert cache.take("long") is long and cache.take("short") is None
    assert cache.nbytes == 250


def test_an_item_larger_than_the_cache_is_closed_at_once() -> None:
    cache = PreparedCache(100)
    big = _Fake(101)
    cache.keep("big", big, value_s=1.0)
    assert big.closed and len(cache) == 0


def test_an_item_measured_again_replaces_nothing_and_a_dropped_one_is_closed() -> None:
    cache = PreparedCache(1000)
    item = _Fake(10)
    cache.keep("k", item, value_s=1.0)
    cache.keep("k", item, value_s=2.0)  # the same item kept again after its second measurement
    assert not item.closed and len(cache) == 1
    cache.drop("k")
    assert item.closed and len(cache) == 0

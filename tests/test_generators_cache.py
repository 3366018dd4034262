"""A worker keeps prepared bricks: measured again without being prepared again, lent as the brick
before the next one, closed by size and value when its cache is full."""

from __future__ import annotations

import onnx
import pytest

from dlbricks import decompose, load_model
from dlbricks._errors import InvalidArgumentError
from dlbricks.generators import Budget, OrtBackend, OrtConfig, Runner
from dlbricks.generators._cache import PreparedCache, digest, lending
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


def test_the_brick_before_is_borrowed_and_outlives_its_eviction() -> None:
    backend, config = OrtBackend(), OrtConfig()
    first, second = _bricks_in_context(3)[1:3]
    assert second.previous is not None and second.previous.signature == first.key
    cache = PreparedCache(1 << 30)
    data = first.to_onnx().SerializeToString()
    with lending(cache):
        kept = backend.prepare(onnx.load_from_string(data), config)
    cache.keep(digest(data, config.config_id), kept, signature=first.key, config_id=config.config_id, value_s=1e-3)
    with lending(cache):
        borrower = backend.prepare(second.to_onnx(), config)
    assert cache.lends == 1
    cache.clear()  # evicted while lent: still runnable by the borrower
    borrower.prime()
    borrower.run()
    assert kept.session is not None
    borrower.close()  # the last borrower lets it go: now it is closed
    assert kept.session is None


class _Fake:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.closed = False

    def run_warm(self) -> None:
        assert not self.closed

    def close(self) -> None:
        self.closed = True


def test_a_full_cache_closes_the_shortest_runs_first_and_keeps_the_newest() -> None:
    cache = PreparedCache(300)
    short, long, newest = _Fake(100), _Fake(100), _Fake(150)
    cache.keep("short", short, signature="s", config_id="c", value_s=1e-5)
    cache.keep("long", long, signature="l", config_id="c", value_s=1e-2)
    cache.keep("newest", newest, signature="n", config_id="c", value_s=1e-6)
    assert short.closed and not long.closed and not newest.closed
    assert cache.take("long") is long and cache.take("short") is None
    assert cache.nbytes == 250


def test_an_item_larger_than_the_cache_is_closed_at_once() -> None:
    cache = PreparedCache(100)
    big = _Fake(101)
    cache.keep("big", big, signature="b", config_id="c", value_s=1.0)
    assert big.closed and len(cache) == 0


def test_a_brick_is_lent_only_under_its_own_configuration() -> None:
    cache = PreparedCache(1000)
    cache.keep("k", _Fake(10), signature="sig", config_id="c1", value_s=1.0)
    assert cache.borrow("sig", "c2") is None
    assert cache.borrow("other", "c1") is None
    assert cache.borrow("sig", "c1") is not None

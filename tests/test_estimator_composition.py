"""An estimate's interval holds how far brick sums of the database's other models landed from their
whole runs, those nearest in latency first."""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from dlbricks.benchmarks_db import Store
from dlbricks.cli import main
from dlbricks.estimator import estimate
from dlbricks.estimator.estimation import COMPOSITION_NEIGHBOURS, CompositionReference, composition_error
from tests import _models


def _references(latency_s: float, error: float, n: int, tag: str) -> list[CompositionReference]:
    return [CompositionReference(f"{tag}{i}", latency_s * (1 + i / 1000), latency_s * (1 + i / 1000) * (1 + error))
            for i in range(n)]


def test_composition_error_reads_the_references_nearest_in_latency() -> None:
    """Tiny models whose sums miss by half do not widen a large model's interval, and the other way
    round; too few references for the 95% level give the largest of their errors; none, zero."""
    tiny, large = _references(1e-5, 0.5, 25, "tiny"), _references(0.1, 0.02, 25, "large")
    assert composition_error(tiny + large, 0.1) == pytest.approx(math.log(1.02))
    assert composition_error(tiny + large, 1e-5) == pytest.approx(math.log(1.5))
    assert composition_error(tiny + large, 0.1, neighbours=50) == pytest.approx(math.log(1.5))  # pooled
    mixed = [*_references(0.1, 0.03, 3, "a"), *_references(0.1, -0.08, 1, "b")]
    assert composition_error(mixed, 0.1) == pytest.approx(abs(math.log(0.92)))  # too few: the largest
    assert composition_error([], 0.1) == 0.0
    assert COMPOSITION_NEIGHBOURS >= 19  # the fewest with a finite split-conformal 95% quantile


def test_estimate_interval_holds_the_composition_error_of_stored_models(tmp_path: Path) -> None:
    """Measured with onnxruntime: one model benched and validated (its whole run stored), another
    benched; the second's estimate is widened by the first's composition error, the first's own is
    not (a model is not its own reference), and the command line says which it is."""
    db = tmp_path / "b.db"
    files = {}
    for name, blocks in (("small", 2), ("deeper", 3)):
        files[name] = tmp_path / f"{name}.onnx"
        onnx.save(_models.resnet_like(blocks=blocks, batch=1), files[name])
        bench = CliRunner().invoke(main, ["bench", str(files[name]), "--db", str(db), "--budget", "quick"])
        assert bench.exit_code == 0, bench.output
    validated = CliRunner().invoke(main, ["validate", str(files["small"]), "--db", str(db), "--budget", "quick"])
    assert validated.exit_code == 0, validated.output
    with Store(db) as store:
        (run,) = store.measurements.models(status="ok")
        reference = estimate(str(files["small"]), store, composition=False)
        own = estimate(str(files["small"]), store)
        bare = estimate(str(files["deeper"]), store, composition=False)
        widened = estimate(str(files["deeper"]), store)
    expected = abs(math.log(reference.sequential_s / run.median_s))
    assert own.references == 0 and own.ci_low_s == reference.ci_low_s and own.ci_high_s == reference.ci_high_s
    assert widened.references == 1 and widened.composition_error == pytest.approx(expected)
    assert widened.sequential_s == bare.sequential_s
    assert widened.ci_high_s >= widened.sequential_s * math.exp(expected) * (1 - 1e-9)
    assert widened.ci_low_s <= widened.sequential_s * math.exp(-expected) * (1 + 1e-9)
    assert widened.ci_low_s <= bare.ci_low_s and widened.ci_high_s >= bare.ci_high_s
    table = CliRunner().invoke(main, ["estimate", str(files["deeper"]), "--db", str(db)])
    assert table.exit_code == 0, table.output
    assert "for the 1 stored model nearest in latency" in table.output
    data = json.loads(CliRunner().invoke(main, ["estimate", str(files["deeper"]), "--db", str(db), "--json"]).output)
    assert data["references"] == 1 and data["composition_error"] == pytest.approx(expected)
    alone = CliRunner().invoke(main, ["estimate", str(files["small"]), "--db", str(db)])
    assert alone.exit_code == 0 and "the bricks' own uncertainty only" in alone.output

"""The MXNet corpus script (benchmarks/mxnet_corpus.py) on one tiny Gluon export, through the real
command line: decompose, bench and validate each a subprocess, as a user types them. The export comes
from MXNet's own Gluon model zoo (the script's GluonCV models need gluoncv, which the mxnet extra does
not install)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests._scripts import load_script
from tests import _mxnet

pytestmark = _mxnet.UNTIMED_MARKS
mx = _mxnet.import_mxnet()



def _corpus() -> ModuleType:
    return load_script("mxnet_corpus")


def _gluon_export(folder: Path, shape: tuple[int, ...]) -> Path:
    """MobileNet 0.25 from MXNet's Gluon zoo, random weights, exported as a user does (``net.export``)."""
    net = mx.gluon.model_zoo.vision.get_model("mobilenet0.25", classes=10)
    net.initialize(mx.init.Normal(0.01))
    x = mx.nd.random.normal(shape=shape)
    net.hybridize()
    net(x)
    net.export(str(folder / "mobilenet0_25"))
    return folder / "mobilenet0_25-symbol.json"


def test_an_export_gets_a_row_with_an_estimate_and_bounds(tmp_path: Path) -> None:
    corpus = _corpus()
    shape = (1, 3, 32, 32)
    symbol = _gluon_export(tmp_path, shape)
    row = corpus.measure_model(symbol, shape, tmp_path / "corpus.db", budget="quick")
    assert row.skipped is None
    assert row.layers and row.unique_bricks and 0 < row.unique_bricks < row.layers
    assert row.params_mb and row.decompose_rss_mb and row.rss_ratio
    assert row.measured_ms and row.measured_ms > 0 and row.estimate_ms and row.estimate_ms > 0
    assert row.error is not None and math.isfinite(row.error)
    assert row.lower_bound_ms is not None and 0 < row.lower_bound_ms <= row.estimate_ms
    assert isinstance(row.bounds_hold, bool)
    assert row.bounds_hold == (row.lower_bound_ms <= row.measured_ms)  # no roofline: not calibrated
    assert set(row.seconds) == {"decompose", "bench", "validate"}


def test_a_model_gluoncv_cannot_build_says_why(tmp_path: Path) -> None:
    """One line: GluonCV's error naming the model, or, without gluoncv, the missing module."""
    with pytest.raises(RuntimeError, match="no_such_model|gluoncv"):
        _corpus().export("no_such_model", tmp_path, (1, 3, 8, 8))


def test_the_validate_table_is_read_back() -> None:
    text = ("model  measured ms  estimated ms  error %  95% interval ms  inside  lower bound ms  roofline ms  "
            "bounds hold\n"
            "-----  -----------  ------------  -------  ---------------  ------  --------------  -----------  "
            "-----------\n"
            "tiny         1.000         1.050     +5.0      0.990-1.110     yes           0.900            -  "
            "        yes\n")
    got = _corpus().parse_validate(text)
    assert got == {"measured_ms": 1.0, "estimate_ms": 1.05, "error": 0.05, "lower_bound_ms": 0.9,
                   "roofline_ms": None, "bounds_hold": True, "inside": True}


def test_the_memory_base_is_taken_in_the_python_the_command_runs(tmp_path: Path) -> None:
    """A ``dlbricks`` script of another environment names its interpreter on its ``#!`` line; the
    base process must run there, not in the corpus script's own Python (whose packages differ)."""
    corpus = _corpus()
    script = tmp_path / "dlbricks"
    script.write_text("#!/opt/other-env/bin/python3.11\nimport sys\n")
    assert corpus.command_python([str(script)]) == "/opt/other-env/bin/python3.11"
    assert corpus.command_python([sys.executable, "-m", "dlbricks"]) == sys.executable
    assert corpus.base_rss(sys.executable) > 50e6  # mxnet imported: tens of MB at least

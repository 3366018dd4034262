"""The HTML report (``dlbricks report``, ``evaluate --report``), its figures, and the Datasette metadata.

Real parts throughout: small models benchmarked with onnxruntime into a SQLite file, the page parsed
and checked against the library's own :class:`~dlbricks.estimator.Estimate`, and loaded in a real
headless Chromium (marker ``browser``). Tests that draw need matplotlib (the ``plot`` extra, marker
``plot``); both run in the CI ``report`` lane (.ci/report_lane.sh), which installs them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sqlite3
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import onnx
import pytest
from click.testing import CliRunner

from dlbricks.benchmarks_db import Store
from dlbricks.cli import main
from tests import _chromium, _models

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
needs_matplotlib = pytest.mark.skipif(not HAS_MATPLOTLIB, reason="needs the plot extra (matplotlib): run by the "
                                                                 "CI report lane")
#: Where the browser test leaves its screenshots (default: the test's temporary folder).
SCREENSHOTS = os.environ.get("DLBRICKS_SCREENSHOTS")


def _ok(result: Any) -> None:
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two small models benchmarked into one database (quick budget, with the warm sweep for the
    lower bound), the machine's peaks calibrated, both models validated (measured whole), and a
    third model, of bricks the database lacks, left to predict."""
    tmp = tmp_path_factory.mktemp("report")
    paths = {"cnn": tmp / "cnn.onnx", "mlp": tmp / "mlp.onnx", "unseen": tmp / "unseen.onnx", "db": tmp / "r.db"}
    onnx.save(_models.resnet_like(blocks=2, batch=1), paths["cnn"])
    onnx.save(_models.matmul_stack(shared=False, layers=4, rows=16, hidden=64), paths["mlp"])
    onnx.save(_models.matmul_stack(shared=False, layers=3, rows=16, hidden=80), paths["unseen"])
    db = str(paths["db"])
    runner = CliRunner()
    for model in ("cnn", "mlp"):
        _ok(runner.invoke(main, ["bench", str(paths[model]), "--db", db, "--budget", "quick",
                                 "--sweep", "cache=cold-weights,warm"]))
    _ok(runner.invoke(main, ["calibrate", "--db", db, "--budget", "quick"]))
    _ok(runner.invoke(main, ["validate", str(paths["cnn"]), str(paths["mlp"]), "--db", db, "--budget", "quick"]))
    return paths


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Cells(HTMLParser):
    """The report's numbers: each cell with a ``data-key`` and its exact value (``data-s``
    seconds, ``data-v`` a fraction), keyed by (section, table, row, key), with the text shown."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[tuple[str | None, ...], tuple[float, str]] = {}
        self.texts: dict[tuple[str | None, ...], str] = {}
        self.section: str | None = None
        self.table: str | None = None
        self.row: str | None = None
        self._open: tuple[str | None, ...] | None = None
        self._text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self.section = a.get("data-model") or a.get("id")
        elif tag == "table":
            self.table = a.get("class")
        elif tag == "tr":
            self.row = a.get("data-signature") or a.get("data-op") or a.get("data-model")
        if "data-key" in a:
            key = (self.section, self.table, self.row, a["data-key"])
            value = a.get("data-s", a.get("data-v"))
            if value is not None:
                self.cells[key] = (float(value), "")
            if tag == "td":
                self._open, self._text = key, ""

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._open is not None:
            self.texts[self._open] = self._text.strip()
            self._open = None


def _cells(html: str) -> _Cells:
    parser = _Cells()
    parser.feed(html)
    return parser


def _value(cells: _Cells, *key: str | None) -> float:
    assert key in cells.cells, f"no cell {key}"
    return cells.cells[key][0]


def _shown_ms(cells: _Cells, *key: str | None) -> str:
    return cells.texts[key]


def _assert_self_contained(html: str) -> None:
    """Nothing a browser would fetch: no script, no link, no external address anywhere, every href
    an anchor on the page, every CSS or SVG url() a reference inside it."""
    low = html.lower()
    for tag in ("<script", "<link", "<img", "<iframe", "<object", "<embed", "@import", "@font-face"):
        assert tag not in low, tag
    assert not re.search(r"https?://", html), re.search(r".{40}https?://.{40}", html)
    assert not re.search(r"(src|href)\s*=\s*[\"']?\s*//", html)
    assert all(h.startswith("#") for h in re.findall(r'(?<![\w:-])href="([^"]*)"', html))
    assert all(u.startswith("#") for u in re.findall(r"url\(\s*['\"]?([^)'\"]*)", html))
    assert "<svg" in html and "<text" in html  # inline figures, their text kept as text


@pytest.mark.plot
@pytest.mark.untimed
@needs_matplotlib
def test_report_of_a_model_shows_the_estimates_numbers(filled: dict[str, Path], tmp_path: Path) -> None:
    from dlbricks.estimator import estimate

    db, model = filled["db"], filled["cnn"]
    before = _sha256(db)
    out = tmp_path / "cnn.html"
    _ok(CliRunner().invoke(main, ["report", str(model), "--db", str(db), "-o", str(out)]))
    assert _sha256(db) == before  # read only
    html = out.read_text()
    _assert_self_contained(html)
    with Store.open(db, create=False, readonly=True) as store:
        est = estimate(str(model), store)
        key = next(m.key for m in store.models.all() if m.name == est.model)
        from dlbricks.generators import OrtConfig, collect_system_info

        measured = store.measurements.get(key, collect_system_info(), OrtConfig().config_id, kind="model")
        in_context = {r.key for r in store.measurements.in_context(key, status="ok")}
    cells = _cells(html)
    name = est.model
    for field in ("sequential_s", "ci_low_s", "ci_high_s", "parallel_s", "lower_bound_s", "lower_bound_parallel_s",
                  "roofline_s", "floor_s"):
        assert _value(cells, name, "headline", None, field) == pytest.approx(getattr(est, field), rel=1e-12), field
    assert est.roofline_s is not None  # calibrated
    assert _value(cells, name, "headline", None, "measured_s") == pytest.approx(measured.median_s, rel=1e-12)
    assert float(_shown_ms(cells, name, "headline", None, "sequential_s")) == pytest.approx(1e3 * est.sequential_s,
                                                                                           rel=1e-3)
    # time by op type: the breakdown summed per op type, with its lower bound and roofline
    ops: dict[str, list[float]] = {}
    for c in est.breakdown:
        t = ops.setdefault(c.op_type, [0.0, 0.0, 0.0])
        t[0] += c.total_s
        t[1] += c.count * c.lower_bound_s
        t[2] += c.count * c.roofline_s
    assert len(ops) >= 5
    for op, (seconds, bound, roof) in ops.items():
        assert _value(cells, name, "ops", op, "estimate_s") == pytest.approx(seconds, rel=1e-9)
        assert _value(cells, name, "ops", op, "lower_bound_s") == pytest.approx(bound, rel=1e-9)
        assert _value(cells, name, "ops", op, "roofline_s") == pytest.approx(roof, rel=1e-9)
        assert float(_shown_ms(cells, name, "ops", op, "estimate_s")) == pytest.approx(1e3 * seconds, rel=1e-3)
    assert _value(cells, name, "ops", None, "bricks_s") == pytest.approx(est.sequential_s - est.floor_s, rel=1e-9)
    # the heaviest bricks, largest first, and how each was obtained
    rows = [sig for (section, table, sig, field) in cells.cells
            if (section, table, field) == (name, "bricks", "total_s")]
    assert rows == [c.signature for c in est.breakdown[:20]]
    for c in est.breakdown[:20]:
        assert _value(cells, name, "bricks", c.signature, "latency_s") == pytest.approx(c.latency_s, rel=1e-12)
        assert _value(cells, name, "bricks", c.signature, "share") == pytest.approx(c.share, rel=1e-12)
        source = cells.texts[(name, "bricks", c.signature, "source")]
        assert source == ("measured in context" if c.signature in in_context else "measured")
    assert any(c.signature in in_context for c in est.breakdown)  # validate timed them in the model's rounds
    # the gap to the lower bound, by op type and by brick, largest first; together the estimate's gap
    op_gaps = [(op, v[0]) for (section, table, op, field), v in cells.cells.items()
               if (section, table, field) == (name, "opgaps", "gap_s")]
    assert [g for _, g in op_gaps] == sorted((g for _, g in op_gaps), reverse=True)
    assert sum(g for _, g in op_gaps) == pytest.approx(est.sequential_s - est.lower_bound_s, rel=1e-6)
    brick_gaps = {sig: v[0] for (section, table, sig, field), v in cells.cells.items()
                  if (section, table, field) == (name, "gaps", "gap_s")}
    for c in est.breakdown:
        if c.signature in brick_gaps:
            assert brick_gaps[c.signature] == pytest.approx(c.total_s - c.count * c.lower_bound_s, rel=1e-9)
    assert html.count("<svg") == 2  # time by op type, roofline of the bricks
    assert 'id="suite"' not in html  # one model: no suite section


@pytest.mark.plot
@pytest.mark.untimed
@needs_matplotlib
def test_report_of_several_models_adds_the_suite_and_marks_predicted_bricks(filled: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    from dlbricks.estimator import estimate

    db = filled["db"]
    out = tmp_path / "suite.html"
    models = [str(filled[m]) for m in ("cnn", "mlp", "unseen")]
    refused = CliRunner().invoke(main, ["report", *models, "--db", str(db), "-o", str(out)])
    assert refused.exit_code == 2 and "have no measurement" in refused.output
    assert "--on-missing predict" in refused.output
    assert not out.exists()
    _ok(CliRunner().invoke(main, ["report", *models, "--db", str(db), "-o", str(out), "--on-missing", "predict"]))
    html = out.read_text()
    _assert_self_contained(html)
    cells = _cells(html)
    with Store.open(db, create=False, readonly=True) as store:
        ests = {m: estimate(filled[m].as_posix(), store, on_missing="predict") for m in ("cnn", "mlp", "unseen")}
    for est in ests.values():
        assert _value(cells, "suite", "suite", est.model, "estimated_s") == pytest.approx(est.sequential_s, rel=1e-12)
        assert _value(cells, est.model, "headline", None, "sequential_s") == pytest.approx(est.sequential_s,
                                                                                           rel=1e-12)
    # measured whole: the two validated models; the unseen one has no measurement
    assert ("suite", "suite", ests["unseen"].model, "measured_s") not in cells.cells
    assert cells.texts[("suite", "suite", ests["unseen"].model, "measured_s")] == "-"
    for m in ("cnn", "mlp"):
        assert _value(cells, "suite", "suite", ests[m].model, "measured_s") > 0
    unseen = ests["unseen"]
    assert unseen.predicted and unseen.predicted_share > 0.5
    for c in unseen.breakdown[:20]:
        said = cells.texts[(unseen.model, "bricks", c.signature, "source")]
        if c.source == "predicted":
            assert said.startswith(f"predicted by the {c.predictor} model, ")
            assert ("far from" in said) == c.far
            assert c.distance is not None and f"({c.distance:.1f}x the cross-validation's distance" in said
        else:
            assert said.startswith("measured")
    assert html.count("<svg") == 2 + 2 * 3  # the suite's two figures, each model's two


@pytest.mark.plot
@pytest.mark.untimed
@needs_matplotlib  # else each case stops at the missing extra first
@pytest.mark.parametrize("case", ["unknown model", "missing database", "output is the database",
                                  "output is its WAL file", "output in a missing folder", "output under a file",
                                  "output is a folder"])
def test_bad_input_is_one_line_and_leaves_the_database_alone(filled: dict[str, Path], tmp_path: Path,
                                                             case: str) -> None:
    db = tmp_path / "copy.db"
    shutil.copyfile(filled["db"], db)
    before = _sha256(db)
    model, out, given_db = str(filled["cnn"]), tmp_path / "r.html", str(db)
    if case == "unknown model":
        model = "no_such_model_anywhere"
    elif case == "missing database":
        given_db = str(tmp_path / "absent.db")
    elif case == "output is the database":
        out = db
    elif case == "output is its WAL file":
        out = Path(f"{db}-wal")
    elif case == "output in a missing folder":
        out = tmp_path / "absent" / "r.html"
    elif case == "output under a file":
        out = filled["cnn"] / "r.html"
    elif case == "output is a folder":
        out = tmp_path
    result = CliRunner().invoke(main, ["report", model, "--db", given_db, "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and result.output.startswith("Error: "), result.output
    assert "Traceback" not in result.output
    assert _sha256(db) == before
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "absent.db").exists()


@pytest.mark.parametrize("command", [["report", "m.onnx", "--db", "x.db", "-o", "r.html"],
                                     ["evaluate", "--suite", "squeezenet1_1", "--db", "x.db", "--report", "r.html"],
                                     ["evaluate", "--suite", "squeezenet1_1", "--db", "x.db", "--plot", "figures"]])
def test_without_matplotlib_drawing_is_one_line_naming_the_extra(command: list[str], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the plot extra, one line naming it, before anything is measured or written."""
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "pip install 'dlbricks[plot]'" in result.output, result.output
    assert sorted(os.listdir(tmp_path)) == []


@pytest.mark.plot
@pytest.mark.untimed
@needs_matplotlib
def test_evaluate_writes_the_report_and_the_log_axes_picture(filled: dict[str, Path], tmp_path: Path) -> None:
    """evaluate --report: the suite table is the evaluation's (its rows, their intervals, the swing of
    their rounds) and each model has its section; --plot: the suite picture on log axes."""
    db = tmp_path / "e.db"
    _ok(CliRunner().invoke(main, ["calibrate", "--db", str(db), "--budget", "quick"]))  # evaluate keeps these peaks
    out, figures = tmp_path / "e.html", tmp_path / "figures"
    result = CliRunner().invoke(main, ["evaluate", "--suite", "mobilenet_v1_0.25", "--db", str(db), "--budget",
                                       "quick", "--target-ci", "0", "--quiet", "--report", str(out),
                                       "--plot", str(figures)])
    _ok(result)
    assert f"wrote {out}" in result.output
    html = out.read_text()
    _assert_self_contained(html)
    row = next(line.split() for line in result.output.splitlines() if line.startswith("mobilenet_v1_0.25"))
    cells = _cells(html)
    assert f"{_value(cells, 'suite', 'suite', 'mobilenet_v1_0.25', 'measured_s') * 1e3:.3f}" == row[3]  # as printed
    assert f"{_value(cells, 'suite', 'suite', 'mobilenet_v1_0.25', 'estimated_s') * 1e3:.3f}" == row[4]
    assert "swing during the run: whole runs over their rounds spread" in html
    row_interval = f"{row[6].replace('-', ' – ')} ms"  # the printed interval, as the model's section says it
    assert f"the run&#x27;s interval, {row_interval}" in html
    assert 'data-model="mobilenet_v1_0.25"' in html and html.count("<svg") == 4
    pngs = sorted(p.name for p in figures.iterdir())
    assert pngs == ["estimated_vs_measured.png", "time_by_op.png"]
    assert all((figures / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_datasette_metadata_describes_the_schema_and_its_queries_run(filled: dict[str, Path]) -> None:
    """The shipped metadata: every table it describes is one of the schema's, every table of the
    schema is described, and every canned query runs on a filled database (real SQLite), the
    three of the issue returning rows."""
    from dlbricks.benchmarks_db._migrations import SCHEMA_VERSION, schema_at
    from dlbricks.datasette import METADATA_PATH, metadata

    assert METADATA_PATH.is_file()
    meta = metadata(filled["db"])
    database = meta["databases"][filled["db"].stem]
    schema = set(schema_at(SCHEMA_VERSION)) | {"brick_timings"}
    assert set(database["tables"]) == schema
    for table, described in database["tables"].items():
        assert described["description"]
        columns = schema_at(SCHEMA_VERSION).get(table)
        assert columns is None or set(described.get("columns", {})) <= columns, table
    assert metadata()["databases"].keys() == {"dlbricks"}
    con = sqlite3.connect(f"file:{filled['db']}?mode=ro", uri=True)
    try:
        results = {}
        for name, query in database["queries"].items():
            assert query["title"] and query["description"]
            params = {"model": "mlp"} if ":model" in query["sql"] else {}
            results[name] = con.execute(query["sql"], params).fetchall()
    finally:
        con.close()
    for name in ("slowest_bricks", "models_by_error", "bricks_by_op_type", "model_breakdown", "noisiest_bricks"):
        assert results[name], name
    assert {r[0] for r in results["models_by_error"]} == {"cnn", "mlp"}  # the two validated models
    assert results["failed_bricks"] == []


@pytest.mark.browser
@pytest.mark.plot
@pytest.mark.untimed
@needs_matplotlib
def test_the_report_loads_in_chromium_without_console_errors_or_requests(filled: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    """A real headless Chromium loads the page from file:// with every host name resolving to
    nothing: it requests nothing but the page itself and logs no error or warning; the screenshots
    are written (DLBRICKS_SCREENSHOTS names a folder to keep them). A page that does reach out is
    caught the same way (the check checks)."""
    executable = _chromium.find_chromium()
    if executable is None:
        if os.environ.get("DLBRICKS_REQUIRE_BROWSER") == "1":
            pytest.fail("no Chromium on PATH (the report lane installs it: apt-get install chromium)")
        pytest.skip("no Chromium on PATH: run by the CI report lane")
    shots = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    pages = {"report-model": [str(filled["cnn"])], "report-suite": [str(filled["cnn"]), str(filled["mlp"])]}
    for name, models in pages.items():
        out = tmp_path / f"{name}.html"
        _ok(CliRunner().invoke(main, ["report", *models, "--db", str(filled["db"]), "-o", str(out)]))
        page = _chromium.load(out.resolve().as_uri(), executable)
        assert page.console == [] and page.exceptions == []
        assert page.requests == [out.resolve().as_uri()]
        assert page.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and page.height > 1500
        _chromium.write_screenshot(page, shots / f"{name}.png")
    bad = tmp_path / "reaches-out.html"
    bad.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"><link rel="stylesheet" '
                   'href="https://fonts.example.com/x.css"></head><body><img src="http://example.com/x.png">'
                   '<script>console.error("from the page")</script></body></html>')
    caught = _chromium.load(bad.resolve().as_uri(), executable, full_page=False)
    assert "https://fonts.example.com/x.css" in caught.requests and "http://example.com/x.png" in caught.requests
    assert any("from the page" in line for line in caught.console)
    assert any("ERR_NAME_NOT_RESOLVED" in line for line in caught.console)

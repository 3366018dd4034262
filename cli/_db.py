"""The ``bench`` command and the ``db`` group: thin click layers over :mod:`dlbricks.benchmarks_db`.

``dlbricks.cli.main`` attaches :data:`bench` and :data:`db`; :data:`cli` groups both on their own.
Library errors become one-line messages with exit code 2;
an interrupted ``bench`` exits with code 130 after saying how to resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import click

from dlbricks import DlbricksError, InvalidArgumentError, decompose
from dlbricks.benchmarks_db import BenchOptions, Store, populate
from dlbricks.benchmarks_db.export import FORMATS, check_output, remove_stale_scratch, scratch_path
from dlbricks.benchmarks_db.jobs import CONTEXT_RULES, BenchProgress, BenchReport
from dlbricks.benchmarks_db.ray import RayExecutor, import_ray
from dlbricks.benchmarks_db.records import ClaimStatus
from dlbricks.benchmarks_db.schedule import DOMINANT_SHARE
from dlbricks.benchmarks_db.sql import EXPORT_QUERIES
from dlbricks.benchmarks_db.store import DEFAULT_PATH
from dlbricks.decomposition import GRANULARITIES
from dlbricks.errors import DatabaseError, TempDirError
from dlbricks.generators import Budget, collect_system_info, get_backend

from ._util import (
    EXIT_INTERRUPTED,
    backend_config,
    backend_option,
    checked_names,
    checked_system_id,
    chosen_backend,
    failed_run_hint,
    finite_floats,
    format_table,
    handle_errors,
    iter_models,
    model_format,
    model_help,
    model_options,
    parse_input_shapes,
)

__all__ = ["EXIT_INTERRUPTED", "bench", "cli", "db"]

#: ``--sweep`` keys that are the command's own options: each point's configuration is built from them
#: by the backend (:func:`~dlbricks.cli._util.backend_config`), whatever its fields are called.
OPTION_KEYS = {"threads": "threads", "opt-level": "opt_level", "opt_level": "opt_level", "device": "device"}
#: Shorter ``--sweep`` names of onnxruntime's fields (any field name works too), used where the
#: backend's configuration has no field of the name given.
CONFIG_ALIASES = {"inter-threads": "inter_op_num_threads", "mode": "execution_mode", "spinning": "allow_spinning"}
BUDGET_NAMES = ("quick", "default", "thorough")
#: Where ``bench`` measures: in this process's worker, or on a Ray cluster's nodes.
EXECUTORS = ("local", "ray")
#: The most moments ``--moments`` takes: each is a full measurement of every dominant brick.
MAX_MOMENTS = 20

_db_option = click.option("--db", "db_path", default=DEFAULT_PATH, show_default=True, metavar="FILE",
                          help="The brick database (SQLite).")


def _fusion_runtime(backend: str, granularity: str) -> dict[str, str]:
    """``decompose``'s ``runtime`` for fused bricks of ``backend``: the runtime whose kernels its fused
    bricks are (its ``fusion_runtime``), none for layer bricks or for onnxruntime's own groups."""
    runtime = getattr(get_backend(backend), "fusion_runtime", None) if granularity == "fused" else None
    return {"runtime": runtime} if runtime else {}


def _budget(name: str, min_time: float | None, max_time: float | None, timeout: float | None) -> Any:
    presets = {"quick": Budget.quick, "default": Budget,
               "thorough": lambda: Budget(warmup_time=0.2, min_time=1.0, min_runs=20, max_time=10.0,
                                          rel_ci=0.01)}
    budget = presets[name]()
    changes = {k: v for k, v in (("min_time", min_time), ("max_time", max_time), ("timeout", timeout))
               if v is not None}
    if "min_time" in changes and "max_time" not in changes and changes["min_time"] > budget.max_time:
        changes["max_time"] = changes["min_time"]
    return dataclasses.replace(budget, **changes)


def _configs(backend: str, options: Mapping[str, Any], sweeps: Sequence[str]) -> list[dict[str, Any]]:
    """One configuration dict per point of the ``--sweep`` grid: the backend's configuration of the
    command's options (``threads``, ``opt_level``, ``device``; None: not given) and of the point's
    option keys (:data:`OPTION_KEYS`), with the point's other keys set as fields."""
    axes: dict[str, list[str]] = {}
    for text in sweeps:
        name, sep, values = text.partition("=")
        choices = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name.strip() or not choices:
            raise InvalidArgumentError(f"--sweep {text!r} is not KEY=V1,V2,...; e.g. --sweep "
                                       f"opt-level=disable,all or --sweep threads=1,2.")
        axes[name.strip()] = choices
    points = [dict(zip(axes, combo, strict=True)) for combo in itertools.product(*axes.values())]
    runtime = get_backend(backend)
    configs = []
    for point in points:
        given = {**options, **{OPTION_KEYS[k]: _option_value(k, v) for k, v in point.items() if k in OPTION_KEYS}}
        base = backend_config(backend, **given).to_dict()
        fields = {_field_name(k, base): v for k, v in point.items() if k not in OPTION_KEYS}
        cfg = config_overrides(base, fields)
        _check_threads(runtime.config_from_dict(cfg).threads)
        configs.append(cfg)
    return configs


def _option_value(key: str, text: str) -> Any:
    """A ``--sweep`` value of an option key: ``threads`` an int, the others as given."""
    if key != "threads":
        return text
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(f"Cannot set threads to {text!r}: expected a int.") from None


def _field_name(key: str, base: Mapping[str, Any]) -> str:
    """The configuration field a ``--sweep`` key names: itself (``-`` as ``_``) where ``base`` has it,
    else its onnxruntime alias (:data:`CONFIG_ALIASES`)."""
    name = key.replace("-", "_")
    return name if name in base else CONFIG_ALIASES.get(key, name)


def _check_threads(threads: int) -> None:
    """Refuse thread counts that no estimate can use (below 1) or that this machine lacks."""
    cores = os.cpu_count() or 1
    if not 1 <= threads <= cores:
        raise InvalidArgumentError(f"--threads must be between 1 and this machine's {cores} logical "
                                   f"cores. Got {threads} instead.")


def config_overrides(base: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, Any]:
    """``base`` (a config's ``to_dict()``) with string ``overrides`` parsed to each field's type."""
    out = dict(base)
    for name, text in overrides.items():
        if name not in base:
            raise InvalidArgumentError(f"The backend configuration has no field {name!r}; fields: "
                                       f"{', '.join(sorted(base))}.")
        current = base[name]
        try:
            if isinstance(current, bool):
                lowered = text.strip().lower()
                if lowered not in ("1", "0", "true", "false", "on", "off", "yes", "no"):
                    raise ValueError(text)
                out[name] = lowered in ("1", "true", "on", "yes")
            elif isinstance(current, int):
                out[name] = int(text)
            elif isinstance(current, float):
                out[name] = float(text)
            else:
                out[name] = text
        except ValueError as e:
            raise InvalidArgumentError(f"Cannot set {name} to {text!r}: expected a "
                                       f"{type(current).__name__}.") from e
    return out


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class _Progress:
    """One progress line per item on stderr (rewritten in place on a terminal)."""

    def __init__(self) -> None:
        self.stream = sys.stderr
        self.tty = self.stream.isatty()
        self.pending = False
        self.measured = 0

    def __call__(self, p: BenchProgress) -> None:
        if p.outcome is ClaimStatus.MEASURED:
            result = "measured elsewhere"
        elif p.outcome is ClaimStatus.HELD:
            result = "busy elsewhere"
        else:
            self.measured += p.status != "lost"
            result = _fmt_time(p.median_s) if p.status == "ok" else p.status
        where = f" @ {p.node}" if p.node else ""
        if p.setup_s is not None and p.timed_s is not None:
            where += f" (setup {1e3 * p.setup_s:.0f} ms, timed {1e3 * p.timed_s:.0f} ms)"
        line = (f"[{p.done}/{p.total}] {p.kind} {p.key[:12]} {p.label[:24]:<24} {result:>18}{where} | "
                f"{p.done} done, {p.left} left, ETA {_fmt_eta(p.eta_s)}")
        if self.tty:
            self.stream.write("\r\x1b[K" + line)
            self.pending = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.pending:
            self.stream.write("\n")
            self.pending = False


class _StopFlag:
    """First Ctrl-C: stop after the current item. Second: raise KeyboardInterrupt at once."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self) -> bool:
        return self.requested

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        click.echo("\nStopping after the current brick (press Ctrl-C again to abort it).", err=True)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self._handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def _resume_hint(db_path: str, measured: int) -> str:
    return (f"Interrupted: {measured} new measurement(s) are saved in {db_path}. Run the same command "
            f"again to resume; finished bricks are not measured again.")


def _summary(report: BenchReport, db_path: str) -> str:
    again = (f"; {report.in_context} brick(s) measured again in a model's own context (their stored "
             f"measurement was taken in another model's)" if report.in_context else "")
    if report.todo == 0:
        return (f"Nothing to measure: the {report.bricks} bricks are measured for system "
                f"{report.system} and the {len(report.configs)} configuration(s){again}. Database: {db_path}")
    where = (f"on {report.nodes} Ray node(s), system(s) {report.system}," if report.systems
             else f"on system {report.system}")
    return (f"Measured {report.measured} item(s) ({report.failed} failed) {where} "
            f"for {len(report.configs)} configuration(s) in {report.elapsed_s:.1f} s; "
            f"{report.already} found already measured, {report.held} left to other processes"
            + (f"; {report.remeasured} further measurement(s) "
               + ("(allocation and moments)" if report.target_ci else "of dominant bricks")
               if report.remeasured else "")
            + (f"; bricks {report.wall_s:.1f} s (setup {report.setup_s:.1f} s, timed {report.timed_s:.1f} s)"
               if report.wall_s else "")
            + (f"; estimates to +-{100 * report.target_ci:g}% (widest +-{100 * (report.worst_ci or 0):.2f}%)"
               if report.target_ci else "")
            + again
            + (f"; {report.retried} measured again after a lost node" if report.retried else "")
            + (f"; {report.lost} left unmeasured (lost too often: run again)" if report.lost else "")
            + f". Database: {db_path}")


@click.command("bench", help=f"""Benchmark the bricks of models and store the results in a database.

    {model_help(stored=False)} Bricks already measured for this system and configuration are skipped, so a
    re-run resumes an interrupted one and several processes can fill one database. Ctrl-C stops after the
    current brick (exit code 130).
    """)
@model_options
@_db_option
@click.option("--granularity", type=click.Choice(GRANULARITIES), default="layer", show_default=True)
@backend_option
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Threads one run computes with (default 1; at most this machine's logical cores).")
@click.option("--opt-level", type=click.Choice(("disable", "basic", "extended", "all")), default=None,
              help="onnxruntime's graph optimization level (default disable).")
@click.option("--device", type=click.Choice(("cpu", "cuda")), default=None, help="Default cpu.")
@click.option("--budget", "budget_name", type=click.Choice(BUDGET_NAMES), default="default",
              show_default=True, help="Time budget per brick.")
@click.option("--min-time", type=float, default=None, help="Seconds of timed runs at least.")
@click.option("--max-time", type=float, default=None, help="Seconds of timed runs at most.")
@click.option("--timeout", type=float, default=None, help="Seconds before a brick is killed.")
@click.option("--sweep", multiple=True, metavar="KEY=V1,V2",
              help="Measure every value of a configuration field (repeatable: grid), e.g. "
                   "opt-level=disable,all or threads=1,2.")
@click.option("--retry-failed", is_flag=True, help="Measure again bricks that failed or timed out.")
@click.option("--moments", type=click.IntRange(min=1, max=MAX_MOMENTS), default=1, show_default=True,
              help=f"Measure each brick that holds {DOMINANT_SHARE:.0%} or more of its model's time "
                   "this many times, at different moments, and store them pooled.")
@click.option("--target-ci", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              metavar="FRACTION",
              help="Relative 95% half-width wanted of each model's estimate (e.g. 0.01): each new brick gets a "
                   "short pilot, then the timed runs an allocation gives it by its weight in its models and "
                   "its noise. Default: every brick under --budget.")
@click.option("--whole-model", is_flag=True, help="Also time each whole model (for validation).")
@click.option("--keep-samples", is_flag=True, help="Store the raw samples of each measurement.")
@click.option("--contexts", type=click.Choice(CONTEXT_RULES), default="measure", show_default=True,
              help="measure: a model's brick stored from another model whose context differs (the brick "
                   "before it, its reuse distance) is measured again in this model's context, for this "
                   "model's estimates; reuse: every stored brick stands for every model.")
@click.option("--system-id", envvar="DLBRICKS_SYSTEM_ID", default=None, metavar="ID",
              help="Record under this id instead of the machine's fingerprint (for tests, or to "
                   "label a machine); env DLBRICKS_SYSTEM_ID.")
@click.option("--dry-run", is_flag=True, help="Store models and bricks; print what is left to measure.")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="Where bricks are measured: here, or on every node of a Ray cluster (needs the "
                   "'distributed' extra), each node under its own system, this process writing the database.")
@click.option("--address", default=None, metavar="ADDR",
              help="With --executor ray: the cluster (as ray.init takes it, e.g. auto or host:6379); "
                   "default: RAY_ADDRESS or a cluster started on this machine.")
@click.option("--each-node", is_flag=True,
              help="With --executor ray: measure every brick on every distinct kind of node.")
@click.pass_context
@handle_errors
def bench(ctx: click.Context, models: tuple[str, ...], zoo: str | None, batch_size: int | None,
          input_shape: tuple[str, ...], db_path: str, granularity: str,
          threads: int | None, opt_level: str | None, device: str | None, budget_name: str,
          min_time: float | None, max_time: float | None, timeout: float | None,
          sweep: tuple[str, ...], retry_failed: bool, moments: int, target_ci: float | None, whole_model: bool,
          keep_samples: bool, contexts: str, system_id: str | None, dry_run: bool, executor: str,
          address: str | None, each_node: bool) -> None:
    if batch_size is not None and batch_size <= 0:
        raise InvalidArgumentError(f"--batch-size must be a positive int. Got {batch_size} instead.")
    system_id = checked_system_id(system_id)
    if executor != "ray" and (address is not None or each_node):
        raise InvalidArgumentError("--address and --each-node are options of --executor ray.")
    if executor == "ray":
        import_ray()  # before the database is touched
    shapes = parse_input_shapes(input_shape)
    budget = _budget(budget_name, min_time, max_time, timeout)
    if target_ci is not None:  # whole models (--whole-model) to the half-width asked of estimates
        budget = dataclasses.replace(budget, rel_ci=min(budget.rel_ci, 2 * target_ci))
    options = {"threads": threads, "opt_level": opt_level, "device": device}
    backend = chosen_backend({m: model_format(m) for m in models})
    configs = _configs(backend, options, sweep)
    Store.preflight(db_path)  # a bad --db fails before any model is loaded
    decompositions, graphs = [], []
    for graph in iter_models(models, zoo, batch_size, shapes):  # every model (and its name) checked before the db
        decompositions.append(decompose(graph, granularity=granularity, **_fusion_runtime(backend, granularity)))
        graphs.append(graph)
    loaded = chosen_backend({g.name: model_format(g) for g in graphs})  # known once loaded
    if loaded != backend:
        backend = loaded
        configs = _configs(backend, options, sweep)
    with Store.open(db_path) as store:
        for dec, graph in zip(decompositions, graphs, strict=True):
            stored = store.models.stored_name(dec.model_key)
            store.models.add(dec, source=graph.source)
            if stored is not None and stored != dec.model:
                click.echo(f"{dec.model}: the same model (same content and inputs) as '{stored}' in {db_path}: "
                           f"kept under that name", err=True)
        if dry_run:
            _print_plan(store, decompositions, configs, backend, system_id)
            return
        stop, progress = _StopFlag(), _Progress()
        runner = _ray_executor(address, each_node, progress) if executor == "ray" else None
        with stop.installed():
            try:
                options = BenchOptions(backend=backend, budget=budget, target_ci=target_ci, moments=moments,
                                       whole_models=graphs if whole_model else (), store_models=False,
                                       retry_failed=retry_failed, keep_samples=keep_samples,
                                       contexts="reuse" if executor == "ray" else contexts)
                report = populate(store, decompositions, configs, options, system_id=system_id, executor=runner,
                                  progress=progress, should_stop=stop)
            except KeyboardInterrupt:
                progress.finish()
                click.echo(_resume_hint(db_path, progress.measured), err=True)
                ctx.exit(EXIT_INTERRUPTED)
            except DlbricksError:
                if not stop.requested:
                    raise
                # Ctrl-C from a terminal reaches the worker too: its death is the interruption
                progress.finish()
                click.echo(_resume_hint(db_path, progress.measured), err=True)
                ctx.exit(EXIT_INTERRUPTED)
        progress.finish()
        click.echo(_summary(report, db_path))
        if whole_model:
            click.echo(_cost_line(store, report, decompositions))
        if report.measured and report.failed == report.measured:
            first = _first_failure(store, report, decompositions)
            raise DlbricksError(f"every measurement of this run failed, the first with: {first} "
                                f"({failed_run_hint(first, backend)})")
        if report.todo == 0 and not retry_failed:
            failed = _failed_count(store, report, decompositions)
            if failed:
                click.echo(f"{failed} brick measurement(s) failed or timed out earlier; run again with "
                           f"--retry-failed to measure them again.", err=True)
        if report.interrupted:
            click.echo(_resume_hint(db_path, report.measured), err=True)
            ctx.exit(EXIT_INTERRUPTED)


def _ray_executor(address: str | None, each_node: bool, progress: _Progress) -> Any:
    """A :class:`RayExecutor` whose node events are lines on stderr between progress lines."""
    def log(line: str) -> None:
        progress.finish()
        click.echo(line, err=True)

    return RayExecutor(address=address, each_node=each_node, log=log)


def _cost_line(store: Store, report: BenchReport, decompositions: Sequence[Any]) -> str:
    """What measuring the models' unique bricks cost against measuring the models whole (wall time of
    every stored measurement, each configuration), and one run of each (DLBricks' compute ratio)."""
    signatures = list(dict.fromkeys(s for d in decompositions for s in d.bricks))
    keys = {d.model_key for d in decompositions}
    bricks = [r for c in report.configs for r in store.measurements.bricks(system=report.system, config_id=c,
                                                                            signatures=signatures)]
    whole = [r for c in report.configs for r in store.measurements.models(system=report.system, config_id=c)
             if r.key in keys]
    bricks_s, whole_s = sum(r.wall_time_s for r in bricks), sum(r.wall_time_s for r in whole)
    bricks_run, whole_run = (sum(r.median_s or 0.0 for r in rows if r.ok) for rows in (bricks, whole))
    return (f"benchmarking time: unique bricks {bricks_s:.1f} s, whole models {whole_s:.1f} s: wall speedup "
            f"{whole_s / bricks_s if bricks_s else 0:.2f}x; one run of every model {1e3 * whole_run:.1f} ms, of "
            f"every unique brick {1e3 * bricks_run:.1f} ms: {whole_run / bricks_run if bricks_run else 0:.2f}x "
            "(DLBricks' compute ratio)")


def _first_failure(store: Store, report: BenchReport, decompositions: Sequence[Any]) -> str:
    """The error of the first failed brick measurement of the report's bricks and systems."""
    signatures = list(dict.fromkeys(s for d in decompositions for s in d.bricks))
    for system in report.systems or (report.system,):
        for row in store.measurements.bricks(system=system, signatures=signatures):
            if row.status != "ok" and row.error:
                return row.error
    return "no reason recorded"


def _failed_count(store: Store, report: BenchReport, decompositions: Sequence[Any]) -> int:
    """How many of the bricks' measurements under the report's configurations failed or timed out."""
    signatures = list(dict.fromkeys(s for d in decompositions for s in d.bricks))
    return sum(len(store.measurements.unmeasured(system, c, signatures, retry_failed=True))
               - len(store.measurements.unmeasured(system, c, signatures))
               for system in (report.systems or (report.system,)) for c in report.configs)


def _print_plan(store: Store, decompositions: Sequence[Any], configs: Sequence[dict[str, Any]],
                backend: str, system_id: str | None) -> None:
    backend_obj = get_backend(backend)
    system = system_id or collect_system_info().fingerprint
    signatures = list(dict.fromkeys(s for d in decompositions for s in d.bricks))
    rows = []
    for cfg_dict in configs:
        cfg = backend_obj.config_from_dict(cfg_dict)
        left = len(store.measurements.unmeasured(system, cfg.config_id, signatures))
        rows.append([cfg.config_id, _options_text(cfg_dict, backend), str(len(signatures)), str(left)])
    click.echo(format_table(["config", "options", "bricks", "to measure"], rows, right={2, 3}))


def _options_text(options: dict[str, Any], runtime: str) -> str:
    """The options that differ from the runtime's defaults, as ``k=v``."""
    try:
        defaults = get_backend(runtime).default_config().to_dict()
    except Exception:  # noqa: BLE001 - a runtime not installed here: show everything
        defaults = {}
    diff = {k: v for k, v in options.items() if defaults.get(k, object()) != v and v not in ({}, None)}
    return " ".join(f"{k}={v}" for k, v in diff.items()) or "(defaults)"


# ------------------------------------------------------------------------------------- db
@click.group("db")
def db() -> None:
    """Inspect, merge and export brick databases."""


@db.command("stats")
@_db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@handle_errors
def stats_cmd(db_path: str, as_json: bool) -> None:
    """Systems, backends, counts, and per-model coverage of a database."""
    with Store.open(db_path, create=False, readonly=True) as store:
        stats = store.stats()
    if as_json:
        click.echo(json.dumps(dataclasses.asdict(stats), indent=2, default=str))
        return
    click.echo(f"Database {stats.path} (schema version {stats.schema_version})")
    click.echo(f"bricks: {stats.bricks}  models: {stats.models}  measurements: {stats.measurements} "
               f"({stats.measurements_ok} ok)  model measurements: {stats.model_measurements}  "
               f"live claims: {stats.live_claims}\n")
    peaks = {p.system: p for p in stats.peaks}

    def peak(system: str, index: int) -> str:
        return f"{peaks[system][index] / 1e9:.1f}" if system in peaks else "-"

    click.echo(format_table(
        ["system", "cpu", "cores", "memory GiB", "os", "gpu", "peak GFLOP/s", "peak GB/s"],
        [[s.fingerprint, s.cpu, str(s.cores), f"{(s.memory_bytes or 0) / 2**30:.0f}", s.os or "-",
          s.gpu or "-", peak(s.fingerprint, 0), peak(s.fingerprint, 1)] for s in stats.systems],
        right={2, 3, 6, 7}))
    click.echo("")
    click.echo(format_table(
        ["config", "runtime", "version", "device", "options"],
        [[b.config_id, b.runtime, b.version or "-", b.device or "-",
          _options_text(dict(b.options), b.runtime)]
         for b in stats.backends]))
    click.echo("")
    click.echo(format_table(
        ["model", "granularity", "system", "config", "measured", "bricks", "coverage", "failed"],
        [[c.name, c.granularity, c.system or "-", c.config_id or "-", str(c.measured),
          str(c.unique_bricks), f"{100 * c.fraction:.0f}%", str(c.failed)] for c in stats.coverage],
        right={4, 5, 6, 7}))


@db.command("ops")
@_db_option
@click.option("--model", default=None, help="Summarize one model's occurrences (name or key).")
@click.option("--system", default=None, help="System fingerprint (needed if several).")
@click.option("--config", "config_id", default=None, help="Backend config id (needed if several).")
@handle_errors
def ops_cmd(db_path: str, model: str | None, system: str | None, config_id: str | None) -> None:
    """Time per op type: bricks, occurrences, measured, total median time."""
    for option, value in (("--model", model), ("--system", system), ("--config", config_id)):
        if value is not None:  # shown in the messages as given
            checked_names([value], option, f"give one that 'dlbricks db stats --db {db_path}' lists")
    with Store.open(db_path, create=False, readonly=True) as store:
        rows = store.measurements.op_summary(system=system, config_id=config_id, model=model)
    total = sum(r.total_median_s for r in rows) or 1.0
    click.echo(format_table(
        ["op", "bricks", "occurrences", "measured", "failed", "total median", "share"],
        [[r.op_type, str(r.bricks), str(r.occurrences), str(r.measured), str(r.failed),
          _fmt_time(r.total_median_s), f"{100 * r.total_median_s / total:.1f}%"] for r in rows],
        right={1, 2, 3, 4, 5, 6}))


@db.command("merge")
@click.argument("sources", nargs=-1, required=True, metavar="DB...")
@click.option("-o", "--out", "out", required=True, metavar="FILE", help="The merged database.")
@click.option("--rule", type=click.Choice(("best", "newest", "keep")), default="best", show_default=True,
              help="Which of two measurements of a brick on one system and configuration wins: best "
                   "(ok over failed, then more samples, then newer), newest, or keep (first seen).")
@handle_errors
def merge_cmd(sources: tuple[str, ...], out: str, rule: str) -> None:
    """Merge databases (e.g. from several machines) into OUT, each brick stored once.

    OUT may be an existing dlbricks database (the sources are added to it) or a new file, which
    appears only once the merge is complete.
    """
    check_output(out, sources, overwrite=True, into_database=True)  # merged into, never replaced; never a source
    for source in sources:  # check them all, in depth, before writing anything
        Store.open(source, create=False, readonly=True).close()
        Store.require_mergeable(source)
    Store.preflight(out)
    stale = remove_stale_scratch(out)
    if stale:
        click.echo(f"Removed {len(stale)} scratch file(s) of an earlier merge into {out} that was killed: "
                   f"{', '.join(stale)}", err=True)
    new = not os.path.lexists(out)
    target = scratch_path(out) if new else out
    try:
        with Store.open(target) as store:
            for source in sources:
                r = store.merge_from(source, rule=rule, check=False)
                click.echo(f"{source}: +{r.systems} systems, +{r.backends} backends, +{r.bricks} bricks, "
                           f"+{r.models} models; measurements {r.measurements_added} added, "
                           f"{r.measurements_replaced} replaced, {r.measurements_kept} kept; model "
                           f"measurements {r.model_measurements_added} added, "
                           f"{r.model_measurements_replaced} replaced, {r.model_measurements_kept} kept")
            stats = store.stats()
        if new:
            os.replace(target, out)
    except (DatabaseError, TempDirError) as e:
        if new and target in str(e):  # the scratch file is this command's own: name the file asked for
            raise type(e)(str(e).replace(target, out)) from e
        raise
    finally:
        if new:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target + suffix)
    click.echo(f"{out}: {len(stats.systems)} systems, {stats.bricks} bricks, {stats.measurements} "
               f"measurements")


@db.command("export")
@_db_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="csv", show_default=True)
@click.option("--table", type=click.Choice(sorted(EXPORT_QUERIES)), default="measurements",
              show_default=True, help="measurements: each with its op type, CPU and runtime.")
@click.option("--out", default="-", show_default=True, metavar="FILE", help="Output file ('-': stdout).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@handle_errors
def export_cmd(db_path: str, fmt: str, table: str, out: str, force: bool) -> None:
    """Export a table as CSV or JSON.

    FILE is written whole or not at all (a temporary file renamed into place); it is never the
    database itself, and an existing FILE is replaced only with --force.
    """
    if out != "-":
        check_output(out, [db_path], overwrite=force)
    with Store.open(db_path, create=False, readonly=True) as store:
        if out == "-":
            store.export(fmt, sys.stdout, table=table)
        else:
            count = store.export(fmt, out, table=table, overwrite=force)
            click.echo(f"Wrote {count} rows to {out}", err=True)


@db.command("check")
@_db_option
@handle_errors
def check_cmd(db_path: str) -> None:
    """Check a database in depth: integrity, schema version, tables and columns, foreign keys,
    bricks that decode, values of measurements.

    Reads only. Exit code 0 when the file is sound, 2 when it is not; the last line then says
    which command repairs what was found.
    """
    report = Store.check(db_path)
    if report.ok:
        click.echo(f"{db_path}: ok (schema version {report.schema_version}, {report.bricks} bricks decode, "
                   f"integrity, columns, foreign keys and values ok)")
        return
    for line in report.problems[:20]:
        click.echo(f"  {line}", err=True)
    raise DatabaseError(report.advice)


@db.command("upgrade")
@_db_option
@handle_errors
def upgrade_cmd(db_path: str) -> None:
    """Bring a database written by an older dlbricks to the current schema (in place).

    Also repairs what 'db check' says it repairs: a schema version lost in a dump and restore is
    written back, measurements with impossible values are marked failed ('bench --retry-failed'
    measures them again).
    """
    report = Store.upgrade(db_path)
    parts = [f"{db_path}: schema version {report.to_version}"
             + (f" (was {report.from_version})" if report.from_version != report.to_version else "")]
    if report.version_restored:
        parts.append("wrote back the schema version that a dump and restore lost")
    if report.marked_failed:
        parts.append(f"marked {report.marked_failed} measurement(s) with impossible values failed: run 'dlbricks "
                     f"bench MODEL --db {db_path} --retry-failed' to measure them again")
    click.echo("; ".join(parts))


@click.group("dlbricks-db", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Fill and query dlbricks brick databases (the 'bench' and 'db' commands of dlbricks)."""


cli.add_command(bench)
cli.add_command(db)
finite_floats(cli)


"""The estimator's commands: estimate, plan, validate, calibrate, evaluate (the main job), report, compare.

Thin click layers over :mod:`dlbricks.estimator`; ``dlbricks.cli.main`` attaches :data:`COMMANDS`.
"""

from __future__ import annotations

import json
import math
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from dlbricks import InvalidArgumentError, MissingBricksError
from dlbricks.benchmarks_db import Store
from dlbricks.benchmarks_db.rounds import Reuse
from dlbricks.estimator import (
    Estimate,
    Evaluation,
    calibrate_peaks,
    estimate,
    evaluate,
    model_report,
    plan,
    validate,
    write_report,
)
from dlbricks.estimator.across import RuntimeComparison, compare_bricks, compare_ops, compare_runtimes
from dlbricks.estimator.api import (
    ROUND_DESIGNS,
    TRUSTED_SWING,
    backend_name,
    capture_failure,
    device_of,
    graph_config,
    open_store,
    peaks_key,
    threads_of,
)
from dlbricks.estimator.calibrate import merge_peaks
from dlbricks.estimator.estimation import ON_MISSING
from dlbricks.estimator.evaluation import DEFAULT_TARGET_CI, EVALUATE_BUDGET, GRANULARITIES, suite_models
from dlbricks.estimator.plot import plot_evaluation, require_matplotlib
from dlbricks.estimator.report import check_report_path
from dlbricks.estimator.sweep import SweepPoint, SweepShape, estimate_sweep, validate_sweep
from dlbricks.generators import Budget, OrtConfig, collect_system_info, get_backend

from ._util import (
    BackendName,
    backend_config,
    backend_formats,
    backend_option,
    checked_names,
    checked_system_id,
    chosen_backend,
    format_table,
    handle_errors,
    is_model_path,
    iter_models,
    model_format,
    model_help,
    parse_input_shapes,
    parse_shape_sweep,
)

__all__ = ["COMMANDS"]

_OPT_LEVELS = ("disable", "basic", "extended", "all")


def _config_options(fn: Any) -> Any:
    fn = click.option("--device", type=click.Choice(("cpu", "cuda")), default=None,
                      help="Default cpu; cuda: onnxruntime's CUDAExecutionProvider (the 'gpu' extra), MXNet's gpu "
                           "context.")(fn)
    fn = click.option("--threads", type=click.IntRange(min=1), default=None,
                      help="Threads one run computes with (onnxruntime's intra_op_num_threads, MXNet's OpenMP "
                           "threads, OpenVINO's INFERENCE_NUM_THREADS). Default 1.")(fn)
    fn = click.option("--opt-level", type=click.Choice(_OPT_LEVELS), default=None,
                      help="onnxruntime's graph optimization level. Default disable.")(fn)
    return click.option("--db", "db", default="dlbricks.db", show_default=True,
                        type=click.Path(dir_okay=False), help="The brick database.")(fn)


_system_id_option = click.option(
    "--system-id", envvar="DLBRICKS_SYSTEM_ID", default=None, metavar="ID",
    help="Read (and record) the measurements of this system id, as 'bench --system-id' stored them, instead "
         "of this machine's fingerprint; env DLBRICKS_SYSTEM_ID.")


def _checked_system_id(system_id: str | None) -> str | None:
    """``system_id`` as given, refused where it is blank, holds a control character or is too long."""
    return checked_system_id(system_id)


_granularity_option = click.option(
    "--granularity", type=click.Choice(("layer", "fused")), default="layer", show_default=True,
    help="fused: one brick per kernel onnxruntime runs at --opt-level.")

_BUDGETS = {"quick": Budget.quick, "default": lambda: EVALUATE_BUDGET,
            "thorough": lambda: Budget(warmup_time=0.2, min_time=1.0, min_runs=20, max_time=10.0, rel_ci=0.01)}
_target_ci_option = click.option(
    "--target-ci", type=click.FloatRange(0, 1, max_open=True), default=DEFAULT_TARGET_CI, show_default=True,
    metavar="FRACTION",
    help="Relative 95% half-width wanted of each model's estimate: bricks get a short pilot, then the timed "
         "runs an allocation gives them by weight and noise; whole models are measured to the same "
         "half-width. 0: every brick under --budget instead.")
_rounds_option = click.option(
    "--rounds", "round_design", type=click.Choice(tuple(ROUND_DESIGNS)), default=None,
    help="How a model and its bricks are timed together: chained (one call of each brick a round on bricks "
         "chained as in the model, which measures them; onnxruntime on a CPU, bursts elsewhere) or bursts (a "
         "millisecond or two of each brick a round, on its cold copies). Default: chained for layer and fused "
         "bricks where the backend chains bricks on a CPU, else bursts.")
_budget_option = click.option("--budget", "budget_name", type=click.Choice(tuple(_BUDGETS)), default="default",
                              show_default=True, help="Stopping rule for bricks and whole models.")


def _backend(targets: Sequence[Any], db: str) -> str:
    """The backend of a run over ``targets``: --backend (or --framework), checked to run their format,
    else the runtime of their format; a name not telling its format is looked up in the database."""
    own = {}
    for target in targets:
        fmt = model_format(target)
        if fmt is None and isinstance(target, str) and os.path.isfile(db):
            fmt = _stored_format(target, db)
        own[getattr(target, "name", str(target))] = fmt
    return chosen_backend(own)


def _run_config(targets: Sequence[Any], db: str, threads: int | None, opt_level: str | None,
                device: str | None) -> Any:
    """The configuration of a run over ``targets``: its backend's (:func:`_backend`), built by the
    backend from the command's options (None: not given)."""
    return backend_config(_backend(targets, db), threads=threads, opt_level=opt_level, device=device)


def _stored_format(name: str, db: str) -> str | None:
    """The format of the model stored under ``name`` (None if there is none)."""
    with Store.open(db, create=False, readonly=True) as store:
        try:
            source = store.models.get(name).source
        except InvalidArgumentError:
            return None
    return source.format if source is not None else None


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.3f}"


def _print_estimate(est: Estimate, top: int) -> None:
    click.echo(f"model {est.model}: {est.layers} layers, {est.unique_bricks} unique bricks, "
               f"granularity {est.granularity}, configuration {est.config_id}")
    click.echo(f"  sequential estimate  {_ms(est.sequential_s)} ms  "
               f"(95% CI {_ms(est.ci_low_s)} - {_ms(est.ci_high_s)} ms)")
    if est.references:
        click.echo(f"  the interval holds how far brick sums landed from whole runs for the {est.references} stored "
                   f"model{'s' if est.references != 1 else ''} nearest in latency: x{math.exp(est.composition_error):.3f} at 95%")
    else:
        click.echo("  the interval holds the bricks' own uncertainty only: no stored model measured whole to tell "
                   "how far brick sums land ('dlbricks validate' or 'dlbricks evaluate' store some)")
    if est.swing is not None:
        click.echo(f"  machine swing: the bricks' runs spread {est.swing:.3f}x while they were timed (90th percentile "
                   "over median, weighted by share); 'dlbricks validate' times the model with its bricks")
    click.echo(f"  parallel estimate    {_ms(est.parallel_s)} ms (critical path)")
    if est.graph_s is not None:
        click.echo(f"  in a CUDA graph      {_ms(est.graph_s)} ms (its kernels back to back, the floor once)")
    click.echo(f"  lower bound          {_ms(est.lower_bound_s)} ms sequential, "
               f"{_ms(est.lower_bound_parallel_s)} ms parallel")
    click.echo(f"  roofline             {_ms(est.roofline_s)} ms"
               + ("" if est.roofline_s is not None else " (run 'dlbricks calibrate' first)"))
    click.echo(f"  coverage {100 * est.coverage:.1f}% of occurrences measured; "
               f"{len(est.predicted)} bricks predicted ({100 * est.predicted_share:.1f}% of the time)")
    if est.warning:
        click.echo(f"  warning: {est.warning}")
    rows = [[c.signature[:12], c.op_type, str(c.count), f"{1e6 * c.latency_s:.1f}",
             _ms(c.total_s), f"{100 * c.share:.1f}", c.source + (" (far)" if c.far else "")]
            for c in est.breakdown[:top]]
    click.echo(format_table(["signature", "op", "count", "us each", "ms total", "share %", "source"], rows,
                            right={2, 3, 4, 5}))


def _shape_options(fn: Any) -> Any:
    fn = click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=D,D,..",
                      help="Concrete shape of a model input (repeatable), e.g. data=1,3,224,224.")(fn)
    return click.option("--batch-size", type=click.IntRange(min=1), default=None,
                        help="Value of the symbolic batch dimension.")(fn)


def _sweep_options(fn: Any) -> Any:
    """``--input-shape`` and ``--batch-size`` that may sweep one dimension (see ``parse_shape_sweep``)."""
    fn = click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=D,D,..",
                      help="Concrete shape of a model input (repeatable), e.g. data=1,3,224,224; braces sweep one "
                           "dimension, e.g. input_ids=1,{64,128,256,512} (braces in several options move "
                           "together).")(fn)
    return click.option("--batch-size", "batch_size", default=None, metavar="N[,N,..]",
                        help="Value of the symbolic batch dimension; a comma-separated list sweeps it, "
                             "e.g. 1,2,4,8.")(fn)


def _sweep_shapes(batch_size: str | None, input_shape: tuple[str, ...]) -> list[SweepShape] | None:
    """The points of a sweep given in the options; None where they give one shape (or none)."""
    points = parse_shape_sweep(batch_size, input_shape)
    if len(points) < 2:
        return None
    return [SweepShape(batch, tuple(shapes.items())) for batch, shapes in points]


def _print_sweep(points: Sequence[SweepPoint]) -> None:
    est = points[0].estimate
    click.echo(f"model {est.model}: {len(points)} shapes, granularity {est.granularity}, "
               f"configuration {est.config_id}")
    rows = [[p.shape.label, str(p.estimate.layers), str(p.estimate.unique_bricks), str(p.shared_bricks),
             str(p.measured_bricks), _ms(p.estimate.sequential_s), _ms(p.estimate.lower_bound_s),
             _ms(p.estimate.roofline_s), f"{100 * p.estimate.coverage:.1f}",
             f"{100 * p.estimate.predicted_share:.1f}"] for p in points]
    click.echo(format_table(["shape", "layers", "unique", "shared", "measured", "estimated ms", "lower bound ms",
                             "roofline ms", "coverage %", "predicted %"], rows, right=set(range(1, 10))))
    click.echo("shared: unique bricks an earlier shape also has (measured once); measured: bricks measured "
               "for this shape")
    for p in points:
        if p.estimate.warning:
            click.echo(f"  warning ({p.shape.label}): {p.estimate.warning}")


def _model_arg(model: str, batch_size: int | None, shapes: dict[str, tuple[int, ...]]) -> Any:
    """A model file (or a zoo model given shapes) loaded with the shapes given; any other name as it is
    (a model stored in the database, or a zoo model, resolved by the library)."""
    if not is_model_path(model) and batch_size is None and not shapes:
        return checked_names([model], "The model name")[0]
    return next(iter_models([model], None, batch_size, shapes))


T = TypeVar("T")


def _estimate_store(db: str, on_missing: str) -> Store:
    """The database opened for an estimate: read-only, or writable (created if need be) to measure."""
    measure = on_missing == "measure"
    if measure:
        Store.preflight(db)
    return Store.open(db, create=measure, readonly=not measure)


def _filled_here(db: str, system_id: str | None = None) -> bool:
    """Whether the database holds this machine (its fingerprint, or ``system_id`` where given): it
    was filled here."""
    if not os.path.exists(db):
        return False
    here = system_id or collect_system_info().fingerprint
    with Store.open(db, create=False, readonly=True) as store:
        return any(s.fingerprint == here for s in store.systems.all())


def _on_missing_auto(run: Callable[[str], T], on_missing: str, db: str, model: str,
                     system_id: str | None = None) -> T:
    """``run(on_missing)``; with "auto", read only first, and where bricks are missing from a database
    filled on this machine (or under ``system_id``), say so and ``run("measure")``; elsewhere the
    refusal stands."""
    if on_missing != "auto":
        return run(on_missing)
    try:
        return run("error")
    except MissingBricksError as missing:
        if not _filled_here(db, system_id):
            raise
        click.echo(f"{missing.missing} bricks of {model} are not in {db} for this machine: measuring them now "
                   "(--on-missing predict predicts them instead, --on-missing error refuses).", err=True)
    return run("measure")


@click.command("estimate", help=f"""Estimate MODEL's latency from the brick database.

    {model_help()} Bricks the database lacks are measured now where the database was filled on this
    machine (--on-missing auto, the default: this machine is the target), else refused; --on-missing
    predict predicts them from measured bricks. Reads the database only when it lacks nothing.
    The 95% interval holds the bricks' own uncertainty and how far brick sums landed from whole runs
    for the stored models nearest in latency (those 'validate' or 'evaluate' measured whole).
    With a sweep (--batch-size 1,2,4,8 or --input-shape input_ids=1,{{64,128,256}}), the model is
    estimated at each shape and printed as one table; bricks that shapes share are measured once.
    """)
@click.argument("model")
@_config_options
@_sweep_options
@_granularity_option
@click.option("--on-missing", type=click.Choice(("auto", *ON_MISSING)), default="auto", show_default=True,
              help="Bricks without a measurement: measure them where the database was filled on this machine "
                   "(auto), refuse, predict, or measure now.")
@click.option("--budget", "budget_name", type=click.Choice(tuple(_BUDGETS)), default=None,
              help="Stopping rule for bricks measured by --on-missing measure. Default: the harness's own.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True, help="Breakdown rows to print.")
@backend_option
@_system_id_option
@handle_errors
def estimate_cmd(model: str, db: str, threads: int | None, opt_level: str | None, device: str | None,
                 batch_size: str | None, input_shape: tuple[str, ...], granularity: str, on_missing: str,
                 budget_name: str | None, as_json: bool, top: int, system_id: str | None) -> None:
    budget = None if budget_name is None else _BUDGETS[budget_name]()
    system_id = _checked_system_id(system_id)
    sweep = _sweep_shapes(batch_size, input_shape)
    if sweep is not None:
        config = _run_config([model], db, threads, opt_level, device)

        def run_sweep(rule: str) -> list[SweepPoint]:
            with _estimate_store(db, rule) as store:
                return estimate_sweep(model, store, sweep, config=config, granularity=granularity,
                                      on_missing=rule, budget=budget, system=system_id)

        points = _on_missing_auto(run_sweep, on_missing, db, model, system_id)
        if as_json:
            click.echo(json.dumps([p.to_dict() for p in points], indent=2))
        else:
            _print_sweep(points)
        return
    target = _model_arg(model, *parse_shape_sweep(batch_size, input_shape)[0])
    config = _run_config([target], db, threads, opt_level, device)

    def run(rule: str) -> Estimate:
        with _estimate_store(db, rule) as store:
            return estimate(target, store, config=config,
                            granularity=granularity, on_missing=rule, budget=budget, system=system_id)

    est = _on_missing_auto(run, on_missing, db, model, system_id)
    if as_json:
        click.echo(json.dumps(est.to_dict(), indent=2))
    else:
        _print_estimate(est, top)


@click.command("plan", help=f"""List MODEL's bricks that the database lacks: their predicted share and the time
    to measure them.

    {model_help()} Reads the database only; 'dlbricks estimate MODEL --on-missing measure' then measures
    just those.
    """)
@click.argument("model")
@_config_options
@_shape_options
@_granularity_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True, help="Missing bricks to list.")
@backend_option
@handle_errors
def plan_cmd(model: str, db: str, threads: int | None, opt_level: str | None, device: str | None,
             batch_size: int | None, input_shape: tuple[str, ...], granularity: str, as_json: bool, top: int) -> None:
    target = _model_arg(model, batch_size, parse_input_shapes(input_shape))
    config = _run_config([target], db, threads, opt_level, device)
    with Store.open(db, create=False, readonly=True) as store:
        result = plan(target, store, config=config, granularity=granularity)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    again = sum(m.why == "context" for m in result.missing)
    context = (f", {again} measured in another model's context to measure again in this one's (bench's rule)"
               if again else "")
    click.echo(f"model {result.model}: {len(result.missing) - again} of {result.unique_bricks} unique bricks "
               f"missing{context}, {100 * result.predicted_share:.1f}% of the estimate predicted; measuring them "
               f"takes about {result.measure_s:.0f} s ('dlbricks estimate {model} --on-missing measure')")
    rows = [[m.signature[:12], m.op_type, str(m.count), "-" if m.predicted_s is None else f"{1e6 * m.predicted_s:.1f}",
             f"{100 * m.share:.1f}", f"{m.measure_s:.2f}", "far" if m.far else "", m.why]
            for m in result.missing[:top]]
    click.echo(format_table(["signature", "op", "count", "us each", "share %", "measure s", "", "why"], rows,
                            right={2, 3, 4, 5}))


def _cuda_graph_option(fn: Any) -> Any:
    return click.option("--cuda-graph", is_flag=True,
                        help="CUDA: also run each model captured in a CUDA graph (onnxruntime's enable_cuda_graph) "
                             "and set it beside the estimate of its kernels back to back; a model onnxruntime "
                             "cannot capture is named with the reason.")(fn)


def _graph_line(model: str, estimated_s: float | None, measured_s: float | None, failure: str | None) -> str:
    """One model's CUDA-graph figure: measured beside estimated, or why there is none."""
    if failure is not None:
        return f"{model} could not be captured in a CUDA graph: {failure}"
    if estimated_s is None:
        return (f"{model} in a CUDA graph: measured {_ms(measured_s)} ms; no estimate: a brick has no device time "
                "(predicted, or its queue probe failed)")
    return (f"{model} in a CUDA graph: measured {_ms(measured_s)} ms, estimated {_ms(estimated_s)} ms (its kernels "
            f"back to back, the floor once): {100 * (estimated_s / measured_s - 1):+.1f}%")


@click.command("validate", help=f"""Measure MODELs whole, store the runs, and compare with their estimates.

    {model_help()} A sweep (--batch-size 1,2,4,8 or --input-shape input_ids=1,{{64,128,256}}) validates
    each model at each shape.
    """)
@click.argument("models", nargs=-1, required=True)
@_config_options
@_sweep_options
@click.option("--per-brick", is_flag=True,
              help="Also show each brick's time beside its layers' in-model time (the runtime's profiler).")
@click.option("--top", type=click.IntRange(min=1), default=15, show_default=True,
              help="Bricks to show with --per-brick.")
@click.option("--paired/--unpaired", default=True, show_default=True,
              help="Paired: time the whole model and its bricks together in interleaved rounds (as evaluate does), "
                   "so that both meet the same moments of the machine. Unpaired: measure the model whole and "
                   "compare with the bricks as stored, whenever they were measured.")
@_granularity_option
@backend_option
@_budget_option
@_rounds_option
@_cuda_graph_option
@handle_errors
def validate_cmd(models: tuple[str, ...], db: str, threads: int | None, opt_level: str | None, device: str | None,
                 batch_size: str | None, input_shape: tuple[str, ...], per_brick: bool,
                 top: int, paired: bool, granularity: str, budget_name: str, round_design: str | None,
                 cuda_graph: bool) -> None:
    rows, validations = [], []
    sweep = _sweep_shapes(batch_size, input_shape)
    Store.preflight(db)
    if sweep is not None:
        if per_brick or cuda_graph:
            raise click.UsageError("--per-brick and --cuda-graph take one shape; leave them out of a sweep.")
        config = _run_config(list(models), db, threads, opt_level, device)
        with Store.open(db) as store:
            for model in models:
                for p in validate_sweep(model, store, sweep, config=config, granularity=granularity,
                                        budget=_BUDGETS[budget_name]()):
                    v = p.validation
                    rows.append([v.estimate.model, p.shape.label, _ms(v.measured.median_s),
                                 _ms(v.estimate.sequential_s), f"{100 * v.error:+.1f}", _ms(v.estimate.lower_bound_s),
                                 _ms(v.estimate.roofline_s), "yes" if v.bounds_hold else "NO"])
        click.echo(format_table(["model", "shape", "measured ms", "estimated ms", "error %", "lower bound ms",
                                 "roofline ms", "bounds hold"], rows, right={2, 3, 4, 5, 6}))
        return
    batch, shapes = parse_shape_sweep(batch_size, input_shape)[0]
    targets = [_model_arg(model, batch, shapes) for model in models]
    config = _run_config(targets, db, threads, opt_level, device)
    if cuda_graph:
        graph_config(config)  # refused in one line before the database is opened
    with Store.open(db) as store:
        for model in targets:
            v = validate(model, store, config=config, granularity=granularity,
                         budget=_BUDGETS[budget_name](), per_brick=per_brick, paired=paired,
                         rounds=ROUND_DESIGNS.get(round_design), cuda_graph=cuda_graph)
            validations.append(v)
            rows.append([v.estimate.model, _ms(v.measured.median_s), _ms(v.estimate.sequential_s),
                         f"{100 * v.error:+.1f}", f"{_ms(v.estimate.ci_low_s)}-{_ms(v.estimate.ci_high_s)}",
                         "yes" if v.covered else "NO", _ms(v.estimate.lower_bound_s), _ms(v.estimate.roofline_s),
                         "yes" if v.bounds_hold else "NO"])
    click.echo(format_table(["model", "measured ms", "estimated ms", "error %", "95% interval ms", "inside",
                             "lower bound ms", "roofline ms", "bounds hold"], rows, right={1, 2, 3, 4, 6, 7}))
    _print_swing(validations)
    for v in validations:
        if v.rounds_error is not None:
            click.echo(f"{v.estimate.model}: its rounds with its bricks failed ({v.rounds_error}); measured whole "
                       "apart, its bricks as stored")
    for v in validations:
        if v.graph is not None:
            click.echo(_graph_line(v.estimate.model, v.estimate.graph_s, v.graph.median_s, capture_failure(v.graph)))
    alone = [v.estimate.model for v in validations if not v.estimate.references]
    if alone:
        click.echo(f"the interval of {', '.join(alone)} holds the bricks and the machine's swing only: no other model "
                   f"in {db} is measured whole to tell how far brick sums land (validate or evaluate others)")
    for v in validations:
        if v.in_model is not None and v.profile is not None:
            _print_per_brick(v, top)


def _print_per_brick(v: Any, top: int) -> None:
    """Each brick's own time beside the in-model time of its occurrences (profiler, per run)."""
    in_model: dict[str, float] = {}
    for occ in v.decomposition.occurrences:
        in_model[occ.signature] = in_model.get(occ.signature, 0.0) + v.in_model[occ.index]
    total_in = sum(in_model.values())
    profile = v.profile
    per_kernel_us = 1e6 * (profile.total_s - v.measured.median_s) / max(profile.kernels, 1)
    click.echo(f"\n{v.estimate.model}: bricks {_ms(v.estimate.sequential_s - v.estimate.floor_s)} ms "
               f"vs their layers' kernels in the model {_ms(total_in)} ms (profiler)")
    if profile.reorders_s:
        click.echo(f"layout reorders: in the model {_ms(profile.reorders_s)} ms, "
                   f"in the estimate {_ms(v.estimate.floor_s)} ms (floor included)")
    click.echo(f"the profiled run's {profile.kernels} kernels sum to {_ms(profile.total_s)} ms, "
               f"{per_kernel_us:+.1f} us per kernel against the unprofiled whole model: compare bricks of a "
               "few such microseconds with care")
    rows = [[c.signature[:12], c.op_type, str(c.count), _ms(c.total_s), _ms(in_model.get(c.signature)),
             f"{c.total_s / in_model[c.signature]:.2f}" if in_model.get(c.signature) else "-"]
            for c in v.estimate.breakdown[:top]]
    click.echo(format_table(["signature", "op", "count", "bricks ms", "in-model ms", "ratio"], rows,
                            right={2, 3, 4, 5}))
    if profile.unmapped:
        click.echo(f"{len(profile.unmapped)} of the profiled kernels map to no layer (first: {profile.unmapped[0]}): "
                   "their time is in the kernels' sum only, in no brick's in-model time")


@click.command("calibrate")
@_config_options
@click.option("--budget", "budget_name", type=click.Choice(tuple(_BUDGETS)), default="default", show_default=True,
              help="Stopping rule for each calibration kernel (default: calibrate's own, 0.3-2 s each; quick for "
                   "a smoke run, whose peaks read low).")
@backend_option
@handle_errors
def calibrate_cmd(db: str, threads: int | None, opt_level: str | None, device: str | None, budget_name: str) -> None:
    """Measure this machine's peak FLOP/s and memory bandwidth with a runtime (--backend, default
    onnxruntime) and store them (roofline)."""
    config = backend_config(chosen_backend({}), threads=threads, opt_level=opt_level, device=device)
    Store.preflight(db)  # before the seconds of measuring
    cal = calibrate_peaks(config, budget=None if budget_name == "default" else _BUDGETS[budget_name]())
    with open_store(db) as store:
        system = collect_system_info()
        flops, bandwidth, details = merge_peaks(store.systems.peaks(system), peaks_key(config), cal)
        store.systems.record_peaks(system, flops, bandwidth, details)
    said = (f"peak {cal.peaks.flops_per_s / 1e9:.1f} GFLOP/s (MatMul, convolution), "
            f"{cal.peaks.bytes_per_s / 1e9:.1f} GB/s (Add, matrix-vector)")
    if device_of(config) != "cpu":
        click.echo(f"{said} on {device_of(config)}; stored in {db} as {peaks_key(config)}, apart from the CPU's peaks")
        return
    click.echo(f"{said} with {backend_name(config)}, {threads_of(config)} thread(s); stored in {db} (the CPU's peaks "
               "over every runtime calibrated: "
               f"{flops / 1e9:.1f} GFLOP/s, {bandwidth / 1e9:.1f} GB/s)")


def _print_evaluation(ev: Evaluation) -> None:
    both = bool(ev.layer_rows)
    rows = [[r.model, str(r.layers), str(r.unique_bricks), _ms(r.measured_s), _ms(r.estimated_s),
             f"{100 * r.error:+.1f}", f"{_ms(r.ci_low_s)}-{_ms(r.ci_high_s)}", _ms(r.parallel_s), _ms(r.lower_bound_s),
             _ms(r.roofline_s), "yes" if r.bounds_hold else "NO"]
            + ([_ms(r.layer_estimated_s), f"{100 * (r.layer_error or 0.0):+.1f}"] if both else [])
            for r in ev.rows]
    header = ["model", "layers", "unique", "measured ms", "estimated ms", "error %", "95% interval ms", "parallel ms",
              "lower bound ms", "roofline ms", "bounds"] + (["layer est. ms", "layer error %"] if both else [])
    if any(r.algorithm_gap_s is not None for r in ev.rows):
        header.append("algorithm gap ms")
        for row, r in zip(rows, ev.rows, strict=True):
            row.append(_ms(r.algorithm_gap_s))
    click.echo(format_table(header, rows, right=set(range(1, len(header))) - {10}))
    s = ev.system
    click.echo("")
    runtime = _runtime_text(ev.config)
    where = (f"{threads_of(ev.config)} thread(s)" if device_of(ev.config) == "cpu"
             else f"on {s.gpu_name} (driver {s.gpu_driver})")
    click.echo(f"machine: {s.cpu_model}, {s.physical_cores} cores, Python {platform.python_version()}; "
               f"{runtime}; {where}, {ev.granularity} granularity")
    click.echo(f"suite: {len(ev.rows)} models{'' if ev.batch_size == 1 else f' at batch {ev.batch_size}'}, "
               f"{ev.layers} layers, {ev.unique_bricks} unique bricks "
               f"({ev.layers / max(ev.unique_bricks, 1):.2f} layers per brick)")
    rule = (f" (each estimate to +-{100 * ev.target_ci:g}%, whole medians to the same)" if ev.target_ci
            else " (same stopping rule)")
    click.echo(_time_line(ev, rule))
    if ev.lock_waited_s >= 1.0:
        click.echo(f"waited {ev.lock_waited_s:.0f} s for another dlbricks process timing on this machine (in the "
                   "elapsed time only)")
    if ev.target_ci and not ev.bricks_in_rounds:
        click.echo(f"precision: +-{100 * ev.target_ci:g}% asked of each estimate's bricks; widest reached "
                   f"+-{100 * (ev.worst_ci or 0):.2f}%")
    _print_swing(ev.rows)
    click.echo(f"intervals: measured latency inside the estimate's 95% interval for {ev.covered}/{len(ev.rows)} "
               f"models; median half-width +-{100 * ev.median_half_width:.1f}% (the swing and the suite's other "
               "models' errors)")
    click.echo(f"latency of one run: all models {1e3 * ev.model_latency_s:.1f} ms, all unique bricks "
               f"{1e3 * ev.unique_brick_latency_s:.1f} ms: {ev.time_dedup_ratio:.2f}x (DLBricks' compute ratio)")
    click.echo(f"error: mean |error| {100 * ev.mean_abs_error:.2f}%, max |error| "
               f"{100 * ev.max_abs_error:.2f}%; within +-5%: "
               f"{sum(abs(r.error) <= 0.05 for r in ev.rows)}/{len(ev.rows)}")
    if both:
        errors = [abs(r.layer_error or 0.0) for r in ev.layer_rows]
        click.echo(f"layer bricks at the same level ({ev.layer_unique_bricks} unique, measured in the same run, "
                   f"not in the benchmarking time): mean |error| {100 * sum(errors) / len(errors):.2f}%, max "
                   f"|error| {100 * max(errors):.2f}%; within +-5%: {sum(e <= 0.05 for e in errors)}/{len(errors)}")
    _print_graphs(ev)
    click.echo(f"elapsed: {ev.elapsed_s:.0f} s")


def _print_graphs(ev: Evaluation) -> None:
    """With ``--cuda-graph``: each model in its CUDA graph, and the error over those captured."""
    asked = [r for r in ev.rows if r.graph_measured_s is not None or r.graph_failure is not None]
    if not asked:
        return
    for r in asked:
        click.echo(_graph_line(r.model, r.graph_estimated_s, r.graph_measured_s, r.graph_failure))
    errors = [abs(r.graph_error or 0.0) for r in ev.graph_rows]
    if errors:
        click.echo(f"CUDA graphs: mean |error| {100 * sum(errors) / len(errors):.2f}%, max |error| "
                   f"{100 * max(errors):.2f}%; within +-5%: {sum(e <= 0.05 for e in errors)}/{len(errors)} of the "
                   f"models captured ({len(ev.graph_rows)} of {len(asked)})")


def _runtime_text(config: Any) -> str:
    """The runtime of ``config`` with its version (as its backend describes it) and, for onnxruntime,
    its optimization level."""
    name = backend_name(config)
    text = f"{name} {get_backend(name).describe(config).get('version', '?')}"
    return text + (f", optimizations {config.graph_optimization_level}" if isinstance(config, OrtConfig) else "")


def _time_line(ev: Evaluation, rule: str) -> str:
    """Where the benchmarking time went: the unique bricks' side, the whole models', the speedup."""
    bricks = (f"benchmarking time: unique bricks {ev.brick_time_s:.1f} s (setup {ev.brick_setup_s:.1f} s, timed runs "
              f"{ev.brick_timed_s:.1f} s), whole models ")
    if not ev.whole_time_s:
        return bricks + "measured by an earlier run of this database: no speedup figure"
    if ev.bricks_in_rounds and ev.rounds_s:
        return (bricks + f"{ev.whole_time_s:.1f} s (setup {ev.whole_setup_s:.1f} s, timed runs "
                f"{ev.whole_time_s - ev.whole_setup_s:.1f} s): wall speedup {ev.speedup:.2f}x, each side in the same "
                f"{ev.rounds_s:.1f} s of chained rounds, each model with its bricks (the whole model's untimed runs "
                "between them, which restore its caches, in neither)"
                + (f"; {ev.taken_bricks} bricks of later models taken from earlier models' rounds through anchors "
                   "timed again" if ev.taken_bricks else ""))
    return (bricks + f"{ev.whole_time_s:.1f} s: wall speedup {ev.speedup:.2f}x{rule}"
            + (f"; then {ev.rounds_s:.1f} s of rounds, each model with its bricks (what the table reads; in "
               "neither figure)" if ev.rounds_s else ""))


def _print_swing(rows: Sequence[Any]) -> None:
    """One line on how much the machine swung during the rows' rounds, and one naming the models
    whose figure the swing leaves untrustworthy (:data:`~dlbricks.estimator.TRUSTED_SWING`)."""
    paired = [r for r in rows if r.swing is not None and r.pairing is not None]
    if not paired:
        click.echo("machine swing: not measured (whole models measured apart from their bricks)")
        return
    swings = sorted(r.swing for r in paired)
    left = sorted(r.pairing for r in paired)
    click.echo(f"machine swing: whole runs over their rounds spread {swings[0]:.2f}-{swings[-1]:.2f}x (p90/p10, "
               f"median {swings[len(swings) // 2]:.2f}x); it left +-{100 * left[0]:.1f}..{100 * left[-1]:.1f}% "
               f"in the estimates against their measurements")
    untrusted = [r for r in paired if r.pairing > TRUSTED_SWING]
    if untrusted:
        names = ", ".join(f"{_name(r)} +-{100 * r.pairing:.1f}%" for r in untrusted)
        click.echo(f"the machine swung too much to trust these to +-{100 * TRUSTED_SWING:g}%: {names}")


def _name(row: Any) -> str:
    return getattr(row, "model", None) or row.estimate.model


@click.command("evaluate")
@click.option("--suite", default="default", show_default=True,
              help="default, full (every zoo model), or a comma-separated list of zoo models.")
@_config_options
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write PNG figures there: estimated against measured on log axes, with intervals and bounds, "
                   "and time by op type (needs the 'plot' extra).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="Write the HTML report of the suite and of each model there (see 'dlbricks "
                                   "report'; needs the 'plot' extra).")
@click.option("--quiet", is_flag=True, help="No progress lines.")
@click.option("--granularity", type=click.Choice(GRANULARITIES), default="layer", show_default=True,
              help="Bricks to estimate with: layers, the groups the runtime fuses at --opt-level, or both "
                   "(fused bricks, and layer bricks at the same level beside them).")
@backend_option
@_budget_option
@_target_ci_option
@click.option("--sweep", "algorithm_sweep", is_flag=True,
              help="CUDA: measure convolutions and matrix products again under each cuDNN algorithm search and "
                   "with TF32 off; the lower bound takes the fastest, and each model shows the gap.")
@_rounds_option
@_cuda_graph_option
@click.option("--batch-size", type=click.IntRange(min=1), default=1, show_default=True,
              help="Build every model of the suite at this batch size (a database per batch size keeps names apart).")
@click.option("--no-reuse", "no_reuse", is_flag=True,
              help="Chained rounds: time every brick of every model in its own rounds, instead of taking the bricks "
                   "an earlier model's rounds timed from there through anchors timed again.")
@handle_errors
def evaluate_cmd(suite: str, db: str, threads: int | None, opt_level: str | None, device: str | None,
                 plot_dir: Path | None, report_path: Path | None, quiet: bool, granularity: str, budget_name: str,
                 target_ci: float | None, algorithm_sweep: bool, round_design: str | None, cuda_graph: bool,
                 batch_size: int, no_reuse: bool) -> None:
    """The main job: benchmark the suite's unique bricks, estimate every model, validate.

    Prints, per model, layers, unique bricks, measured and estimated latency, error, parallel
    estimate, lower bound and roofline; for the suite, the benchmarking time of bricks vs whole
    models and the error figures.
    """
    backend = chosen_backend({})
    config = backend_config(backend, threads=threads, opt_level=opt_level, device=device)
    if cuda_graph:
        graph_config(config)  # refused in one line before the database is opened
    formats = backend_formats(backend)
    models = suite_models(suite, "onnx" if "onnx" in formats else min(formats))
    checked_names(models, "The --suite model name", "give zoo model names, as 'dlbricks zoo list' lists them")
    say = (lambda line: None) if quiet else (lambda line: click.echo(line, err=True))
    if plot_dir is not None or report_path is not None:  # before the minutes of measuring
        require_matplotlib()
        if report_path is not None:
            check_report_path(report_path, db)
    Store.preflight(db)
    with open_store(db) as store:
        ev = evaluate(models, store, config=config, budget=_BUDGETS[budget_name](),
                      granularity=granularity, say=say, target_ci=target_ci or None,
                      algorithm_sweep=algorithm_sweep, rounds=ROUND_DESIGNS.get(round_design),
                      cuda_graph=cuda_graph, batch_size=batch_size, reuse=None if no_reuse else Reuse())
        _print_evaluation(ev)
        if report_path is not None:
            reports = [model_report(r.model, store, config=config, system=ev.system,
                                    granularity="layer" if granularity == "layer" else "fused") for r in ev.rows]
            click.echo(f"wrote {write_report(report_path, reports, ev, title='dlbricks evaluate', database=db)}")
    if plot_dir is not None:
        for path in plot_evaluation(ev, plot_dir, dict(ev.op_times)):
            click.echo(f"wrote {path}")


@click.command("report", help=f"""Write one HTML page of where MODELs' time goes, to open offline and share.

    {model_help()} Per model: the estimate with its interval, lower bound and roofline beside the
    measured latency where the database has one; time by op type; the heaviest bricks and how each
    was obtained; a roofline chart of its bricks; the gap to the lower bound by brick and op type.
    Several models add the suite: estimated against measured on log axes. Reads the database only;
    needs the 'plot' extra (matplotlib).
    """)
@click.argument("models", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="The HTML file to write, e.g. report.html.")
@_config_options
@_shape_options
@_granularity_option
@click.option("--on-missing", type=click.Choice(("error", "predict")), default="error", show_default=True,
              help="Bricks without a measurement: refuse, or predict them (the report marks them).")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True,
              help="Bricks listed per model in the tables of heaviest bricks and of gaps.")
@backend_option
@_system_id_option
@handle_errors
def report_cmd(models: tuple[str, ...], output: Path, db: str, threads: int | None, opt_level: str | None,
               device: str | None, batch_size: int | None, input_shape: tuple[str, ...], granularity: str,
               on_missing: str, top: int, system_id: str | None) -> None:
    require_matplotlib()
    check_report_path(output, db)
    system_id = _checked_system_id(system_id)
    if not os.path.isfile(db):
        raise InvalidArgumentError(f"no database at {db!r}: give the file that 'dlbricks bench' filled (--db).")
    targets = [_model_arg(m, batch_size, parse_input_shapes(input_shape)) for m in models]
    config = _run_config(targets, db, threads, opt_level, device)
    with Store.open(db, create=False, readonly=True) as store:
        reports = [model_report(t, store, config=config, system=system_id, granularity=granularity,
                                on_missing=on_missing) for t in targets]
    click.echo(f"wrote {write_report(output, reports, top=top, database=db)}")


@click.command("compare", help=f"""Compare runtimes brick by brick, and bound MODELs with each brick at its fastest
    runtime (Benanza's comparison).

    {model_help()} Each runtime (--backend, repeatable; default: every runtime the database holds) at
    the configuration that 'dlbricks bench --backend NAME --threads N' measures, on layer bricks. Per
    model: each runtime's estimate, its own lower bound and its measured latency where one is stored
    ('validate', or 'bench --whole-model'), beside the lower bound across runtimes (each brick at its
    fastest runtime, plus the smallest floor). Then, over all the models: per op type, each runtime's
    time in its lower bound, the ratio of the next runtime's to the fastest's and which is faster;
    and the bricks on which the fastest runtime saves most. A model that some runtime lacks bricks of
    is named and left out. Reads the database only.
    """)
@click.argument("models", nargs=-1)
@click.option("--suite", default=None, help="Instead of MODELs: default, full (every zoo model), or a comma-separated "
                                            "list of zoo models.")
@click.option("--db", "db", default="dlbricks.db", show_default=True, type=click.Path(dir_okay=False),
              help="The brick database.")
@click.option("--backend", "backends", type=BackendName(), multiple=True,
              help="A runtime to compare (repeatable, at least two). Default: every runtime in the database.")
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="Threads of every runtime's configuration. Default 1.")
@_shape_options
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True,
              help="Bricks to list, those on which the fastest runtime saves most.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_system_id_option
@handle_errors
def compare_cmd(models: tuple[str, ...], suite: str | None, db: str, backends: tuple[str, ...], threads: int | None,
                batch_size: int | None, input_shape: tuple[str, ...], top: int, as_json: bool,
                system_id: str | None) -> None:
    system_id = _checked_system_id(system_id)
    if bool(models) == bool(suite):
        raise click.UsageError("give MODELs or --suite (one of the two).")
    names = list(models) if models else suite_models(suite or "default")
    checked_names(names, "The model name" if models else "The --suite model name")
    if not os.path.isfile(db):
        raise InvalidArgumentError(f"no database at {db!r}: give the file that 'dlbricks bench' filled (--db).")
    targets = [_model_arg(m, batch_size, parse_input_shapes(input_shape)) for m in names]
    with Store.open(db, create=False, readonly=True) as store:
        runtimes = list(dict.fromkeys(backends)) or sorted({b.runtime for b in store.systems.backends()})
        configs = [backend_config(name, threads=threads) for name in runtimes]
        compared, left_out = [], []
        for name, target in zip(names, targets, strict=True):
            try:
                compared.append(compare_runtimes(target, store, configs, system=system_id))
            except MissingBricksError as e:
                if len(targets) == 1:
                    raise
                left_out.append(f"{name}: {str(e).rstrip('.')}")
    if not compared:
        raise MissingBricksError(f"no model has its bricks measured in every runtime: {left_out[0]}", 0)
    if as_json:
        click.echo(json.dumps({"models": [c.to_dict() for c in compared], "left_out": left_out}, indent=2))
        return
    _print_comparison(compared, top)
    for line in left_out:
        click.echo(f"left out: {line}")


def _print_comparison(compared: Sequence[RuntimeComparison], top: int) -> None:
    """Per model each runtime's bounds beside the bound across runtimes; per op type and per brick,
    where one runtime beats the others, over all the models."""
    names = compared[0].names
    rows = []
    for c in compared:
        rows += [[c.model, r.runtime, _ms(r.estimate_s), _ms(r.lower_bound_s), _ms(r.lower_bound_parallel_s),
                  _ms(r.measured_s), "-" if r.measured_s is None else ("yes" if r.lower_bound_s <= r.measured_s
                                                                         else "NO")] for r in c.runtimes]
        holds = c.bound_holds
        rows.append([c.model, "fastest of each", "-", _ms(c.lower_bound_s), _ms(c.lower_bound_parallel_s), "-",
                     "-" if holds is None else ("yes" if holds else "NO")])
    click.echo(format_table(["model", "runtime", "estimate ms", "lower bound ms", "parallel ms", "measured ms",
                             "bound holds"], rows, right={2, 3, 4, 5}))
    judged = [c for c in compared if c.bound_holds is not None]
    click.echo(f"lower bound across {', '.join(names)}: each brick at its fastest runtime plus the smallest floor; "
               + (f"at or below every runtime's measured latency for {sum(bool(c.bound_holds) for c in judged)}/"
                  f"{len(judged)} models measured whole" if judged else "no model measured whole to hold it against")
               + "\n")
    bricks = compare_bricks(c.bricks for c in compared)
    ops = compare_ops(bricks)
    n = len(names)
    click.echo(format_table(
        ["op", "bricks", "occurrences", *(f"{name} ms" for name in names), "ratio", "faster", "won"],
        [[o.op_type, str(o.bricks), str(o.occurrences), *(_ms(t) for t in o.total_s), _ratio(o.ratio),
          names[o.best], "/".join(str(w) for w in o.wins)] for o in ops],
        right={1, 2, *range(3, n + 4), n + 5}))
    click.echo(f"ms: each runtime's lower bound of the op's occurrences (fastest runs, floor-corrected) per run, "
               f"summed over {len(compared)} model(s); ratio: the next runtime's time over the faster's (inf: the "
               "faster spends no time of its own on it, e.g. fused into the kernel before it); won: bricks on which "
               f"each runtime is the faster, {'/'.join(names)}\n")
    click.echo(format_table(
        ["signature", "op", "count", *(f"{name} us" for name in names), "ratio", "faster", "saves ms"],
        [[b.signature[:12], b.op_type, str(b.count), *(f"{1e6 * t:.1f}" for t in b.fastest_s), _ratio(b.ratio),
          names[b.best], _ms(b.difference_s)] for b in bricks[:top]],
        right={2, *range(3, n + 4), n + 5}))
    click.echo(f"the {min(top, len(bricks))} of {len(bricks)} bricks on which the faster runtime saves most per run "
               "(us: one occurrence; saves: over its occurrences)")


def _ratio(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.2f}x"


COMMANDS = (estimate_cmd, plan_cmd, validate_cmd, calibrate_cmd, evaluate_cmd, report_cmd, compare_cmd)

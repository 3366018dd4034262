"""Models as users export them: bench and validate each ONNX file of a corpus through the command line.

Usage (a corpus built by ``benchmarks/export_corpus.py``)::

    python benchmarks/bench_export_corpus.py --corpus DIR [--db-dir DIR] [--opt-level disable|all]
        [--only a,b,c] [--budget quick|default|thorough] [--db-per-model] [--per-brick] [--unpaired]
        [--rounds bursts|chained]

For each model of ``DIR/corpus.json`` the command line runs exactly as a user types it, each command a
subprocess (at ``--opt-level all`` both with ``--opt-level all --granularity fused``)::

    dlbricks bench    FILE --db DB --budget B [--opt-level all --granularity fused]
    dlbricks validate FILE --db DB --budget B [--opt-level all --granularity fused] [--per-brick] [--unpaired]

``validate`` times each model with its bricks in interleaved rounds, so that both meet the same state
of a machine whose speed swings; ``--unpaired`` (``validate --unpaired``) measures it whole apart;
``--rounds chained`` passes that design of rounds on (``validate --rounds chained``).

One database per opt-level for the whole corpus (``DB-DIR/corpus-OPT.db``, as a user fills one; it is
calibrated first, for the roofline), or one per model with ``--db-per-model``. ``validate``'s output is
kept beside the database (``NAME-OPT.validate.txt``). One row per model: name, exporter, kind, measured,
estimated ms, error, whether the bounds hold (roofline <= lower bound <= measured) and the wall seconds of
its two commands; then the mean |error| and the models within +-5%. A model whose command fails gets its
last line of output instead of figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from mxnet_corpus import dlbricks_command, parse_validate  # the same command line, the same validate table


@dataclass
class Row:
    """One model's figures (times in ms); ``failed`` says why a model has none."""

    name: str
    exporter: str
    kind: str
    measured_ms: float | None = None
    estimate_ms: float | None = None
    error: float | None = None  # estimate / measured - 1
    lower_bound_ms: float | None = None
    roofline_ms: float | None = None
    bounds_hold: bool | None = None
    wall_s: float = 0.0  # bench + validate
    failed: str | None = None


def _run(args: list[str]) -> tuple[str, float]:
    """Run ``args``; its output (stdout and stderr) and wall seconds.

    Raises
    ------
    RuntimeError
        With the command and its last line of output where it fails.
    """
    start = time.perf_counter()
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode:
        lines = [line for line in done.stdout.strip().splitlines() if line.strip()]
        raise RuntimeError(f"{Path(args[0]).name} {args[1]} exited {done.returncode}: "
                           f"{lines[-1] if lines else ''}")
    return done.stdout, time.perf_counter() - start


def opt_flags(opt_level: str) -> list[str]:
    """The flags of an optimization level: at ``all`` one brick per kernel onnxruntime runs."""
    return [] if opt_level == "disable" else ["--opt-level", opt_level, "--granularity", "fused"]


def measure_model(entry: dict[str, object], corpus: Path, db: Path, opt_level: str, budget: str,
                  per_brick: bool, keep: Path, exe: list[str], paired: bool = True, rounds: str | None = None) -> Row:
    """Bench then validate one model of the corpus through the command line, as a user types them."""
    row = Row(name=str(entry["name"]), exporter=str(entry["exporter"]), kind=str(entry["kind"]))
    path = corpus / str(entry["file"])
    flags = ["--db", str(db), "--budget", budget, *opt_flags(opt_level)]
    try:
        _, bench_s = _run([*exe, "bench", str(path), *flags])
        text, validate_s = _run([*exe, "validate", str(path), *flags, *(["--per-brick"] if per_brick else []),
                                 *([] if paired else ["--unpaired"]), *(["--rounds", rounds] if rounds else [])])
    except RuntimeError as e:
        row.failed = str(e)
        return row
    (keep / f"{row.name}-{opt_level}.validate.txt").write_text(text)
    row.wall_s = bench_s + validate_s
    try:
        for key, value in parse_validate(text).items():
            setattr(row, key, value)
    except (StopIteration, ValueError) as e:
        row.failed = f"cannot read validate's table: {type(e).__name__} {e}"
    return row


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[Row]) -> None:
    """The rows, then the mean |error| and the models within +-5%."""
    head = ["model", "exporter", "kind", "measured ms", "estimate ms", "error %", "bounds", "wall s"]
    table = [head]
    for r in rows:
        if r.failed:
            continue
        table.append([r.name, r.exporter, r.kind, _fmt(r.measured_ms, ".3f"), _fmt(r.estimate_ms, ".3f"),
                      _fmt(None if r.error is None else 100 * r.error, "+.1f"),
                      "-" if r.bounds_hold is None else ("yes" if r.bounds_hold else "NO"), f"{r.wall_s:.0f}"])
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    for line in table:
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))))
    for r in rows:
        if r.failed:
            print(f"failed {r.name}: {r.failed}")
    done = [r for r in rows if r.error is not None]
    if done:
        mean = sum(abs(r.error) for r in done) / len(done)  # type: ignore[arg-type]
        within = sum(1 for r in done if abs(r.error) <= 0.05)  # type: ignore[arg-type]
        hold = sum(1 for r in done if r.bounds_hold)
        print(f"\n{len(done)} models: mean |error| {100 * mean:.1f}%, {within} within +-5%, bounds hold on {hold}")


def main(argv: list[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="folder with corpus.json")
    parser.add_argument("--db-dir", type=Path, default=None, help="folder of the databases (default: the corpus)")
    parser.add_argument("--opt-level", choices=("disable", "all"), default="disable")
    parser.add_argument("--only", default=None, help="comma-separated names of corpus models")
    parser.add_argument("--budget", choices=("quick", "default", "thorough"), default="default")
    parser.add_argument("--db-per-model", action="store_true", help="one database per model")
    parser.add_argument("--per-brick", action="store_true", help="validate with --per-brick (kept in its output)")
    parser.add_argument("--unpaired", action="store_true", help="validate with --unpaired (the whole model measured "
                        "apart from its bricks)")
    parser.add_argument("--rounds", choices=("bursts", "chained"), default=None, help="validate's --rounds")
    args = parser.parse_args(argv)
    entries = json.loads((args.corpus / "corpus.json").read_text())
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in {e["name"] for e in entries}]
        if unknown:
            parser.error(f"not in the corpus: {unknown}")
        entries = [e for e in entries if e["name"] in names]
    folder = args.db_dir or args.corpus
    folder.mkdir(parents=True, exist_ok=True)
    exe = dlbricks_command()
    rows = []
    for entry in entries:
        db = folder / (f"{entry['name']}-{args.opt_level}.db" if args.db_per_model else f"corpus-{args.opt_level}.db")
        if not db.exists():  # peaks for the roofline
            _run([*exe, "calibrate", "--db", str(db), *(["--opt-level", args.opt_level])])
        rows.append(measure_model(entry, args.corpus, db, args.opt_level, args.budget, args.per_brick, folder, exe,
                                  not args.unpaired, args.rounds))
        r = rows[-1]
        print(f"{r.name}: " + (r.failed or f"{r.measured_ms} ms measured, {r.estimate_ms} ms estimated, "
                                f"bounds {'hold' if r.bounds_hold else 'FAIL'}, {r.wall_s:.0f} s"), flush=True)
    print()
    print_table(rows)
    return rows


if __name__ == "__main__":
    main()

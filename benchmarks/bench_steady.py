"""The main job several times in a row, each into a fresh database: does its error depend on the hour?

Usage::

    python benchmarks/bench_steady.py [--runs 5] [--opt-level disable|all] [--granularity layer|fused]
        [--suite default|full|a,b,c] [--rounds bursts|chained] [--out DIR]

Each run is ``dlbricks evaluate`` as a user types it (a subprocess, the default budget and precision
target), into ``DIR/steady-K.db``; its output is kept beside it (``steady-K.txt``). Printed: each
model's error in every run, whether the measured latency fell inside the printed 95% interval (``*``
marks a miss), and its range over the runs; each run's mean |error|, models within +-5%, the machine's
swing as the run printed it, its elapsed time and its wall speedup; then the intervals' coverage over
all model-runs and their median half-width.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mxnet_corpus import dlbricks_command

#: A row of evaluate's table: model, layers, unique, measured, estimated, error %, the 95% interval.
ROW = re.compile(r"^(\S+)\s+\d+\s+\d+\s+([\d.]+)\s+([\d.]+)\s+([+-][\d.]+)\s+([\d.]+)-([\d.]+)\s")
#: The benchmarking speedup in evaluate's time line.
SPEEDUP = re.compile(r"wall speedup ([\d.]+)x")


def run_once(k: int, out: Path, extra: list[str]) -> tuple[dict[str, float], dict[str, tuple[bool, float]], str]:
    """One ``dlbricks evaluate`` into a fresh database: each model's error, whether its measurement
    lies in its printed interval and the interval's relative half-width, and the output."""
    db = out / f"steady-{k}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    done = subprocess.run([*dlbricks_command(), "evaluate", "--db", str(db), "--quiet", *extra],
                          capture_output=True, text=True, check=False)
    (out / f"steady-{k}.txt").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"run {k} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}")
    rows = [m for m in map(ROW.match, done.stdout.splitlines()) if m]
    # from the measured and estimated columns (three decimals), not the error column's one: -5.01%
    # printed as -5.0 is outside +-5%, as evaluate's own count says
    errors = {m.group(1): float(m.group(3)) / float(m.group(2)) - 1 for m in rows}
    inside = {}
    for m in rows:
        measured, estimated, low, high = (float(m.group(i)) for i in (2, 3, 5, 6))
        inside[m.group(1)] = (low <= measured <= high, (high - low) / (2 * estimated))
    return errors, inside, done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--opt-level", default="disable")
    parser.add_argument("--granularity", default="layer")
    parser.add_argument("--suite", default="default")
    parser.add_argument("--rounds", default=None, help="evaluate's --rounds (default: evaluate's own).")
    parser.add_argument("--out", type=Path, default=None, help="Where the databases and outputs go (a temp dir).")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="steady-"))
    out.mkdir(parents=True, exist_ok=True)
    extra = ["--suite", args.suite, "--opt-level", args.opt_level, "--granularity", args.granularity,
             *(["--rounds", args.rounds] if args.rounds else [])]
    runs: list[dict[str, float]] = []
    summaries: list[str] = []
    inside: dict[tuple[int, str], tuple[bool, float]] = {}
    for k in range(args.runs):
        start = time.monotonic()
        errors, covered, text = run_once(k, out, extra)
        runs.append(errors)
        inside.update({(k, name): value for name, value in covered.items()})
        swing = next((line for line in text.splitlines() if line.startswith("machine swing:")), "")
        speedup = SPEEDUP.search(text)
        mean = statistics.fmean(abs(e) for e in errors.values())
        within = sum(abs(e) <= 0.05 for e in errors.values())
        summaries.append(f"run {k + 1}: mean |error| {100 * mean:.2f}%, within +-5% {within}/{len(errors)}, "
                         f"{time.monotonic() - start:.0f} s, wall speedup {speedup.group(1) if speedup else '-'}x; "
                         f"{swing}")
        print(summaries[-1], flush=True)
    models = list(runs[0])
    print()
    print(f"{'model':<22}" + "".join(f"  run {k + 1:>2}" for k in range(len(runs))) + "   range")
    for name in models:
        cells = []
        for k, errors in enumerate(runs):
            miss = "*" if not inside.get((k, name), (True, 0.0))[0] else " "
            cells.append(f"{100 * errors[name]:+7.1f}{miss}")
        values = [100 * errors[name] for errors in runs]
        print(f"{name:<22}" + " ".join(cells) + f"  {max(values) - min(values):5.1f}")
    print()
    for line in summaries:
        print(line)
    worst_range = max(max(100 * e[n] for e in runs) - min(100 * e[n] for e in runs) for n in models)
    print(f"every run: mean |error| at most {max(statistics.fmean(abs(x) for x in e.values()) for e in runs) * 100:.2f}%,"
          f" at least {min(sum(abs(x) <= 0.05 for x in e.values()) for e in runs)}/{len(models)} within +-5%; "
          f"widest range of one model over the runs {worst_range:.1f} points")
    if inside:
        covered = sum(ok for ok, _ in inside.values())
        widths = sorted(w for _, w in inside.values())
        print(f"intervals: measured inside the printed 95% interval in {covered}/{len(inside)} model-runs "
              f"({100 * covered / len(inside):.0f}%); median half-width +-{100 * statistics.median(widths):.1f}% "
              "(* above: a miss)")
    print(f"databases and outputs: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""kill -9 at random moments during ``dlbricks bench``, again and again, on one database file.

After each kill the file must pass ``PRAGMA integrity_check``, keep every measurement committed
before the kill (none lost) and hold at most one measurement per brick, system and configuration
(none duplicated); a last run must then finish the job. Prints one line per kill and a summary;
exits 1 if anything was lost, duplicated or damaged.

    python benchmarks/kill9_soak.py [--kills 20] [--model squeezenet1_1] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = "SELECT signature, system, config_id, created_at FROM measurements"
DUPLICATES = ("SELECT COUNT(*) FROM (SELECT 1 FROM measurements GROUP BY signature, system, config_id "
              "HAVING COUNT(*) > 1)")


def _query(db: Path, sql: str) -> list[tuple[object, ...]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return []
    finally:
        conn.close()


def _scalar(db: Path, sql: str, default: object) -> object:
    rows = _query(db, sql)
    return rows[0][0] if rows else default


def _bench(db: Path, model: str) -> list[str]:
    return [sys.executable, "-m", "dlbricks", "bench", model, "--db", str(db), "--budget", "quick"]


def soak(kills: int, model: str, seed: int, folder: Path) -> int:
    """Run the soak; return the number of kills after which something was wrong."""
    rng = random.Random(seed)
    fills = 1
    db = folder / f"soak{fills}.db"
    bad = 0
    i = 0
    while i < kills:
        before = set(_query(db, ROWS))
        proc = subprocess.Popen(_bench(db, model), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        delay = rng.uniform(0.3, 3.0)
        time.sleep(delay)
        if proc.poll() is not None:  # the job was done before the kill: count none, start a new database
            fills += 1
            db = folder / f"soak{fills}.db"
            continue
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker, at once
        proc.wait()
        i += 1
        after = set(_query(db, ROWS))
        lost = len(before - after)
        duplicated = _scalar(db, DUPLICATES, 0)
        integrity = _scalar(db, "PRAGMA integrity_check", "ok")
        ok = lost == 0 and duplicated == 0 and integrity == "ok"
        bad += not ok
        print(f"kill {i:2d} at {delay:4.2f} s into run on database {fills}: {len(after)} rows "
              f"(+{len(after - before)}), lost {lost}, duplicated {duplicated}, integrity {integrity}"
              + ("" if ok else "  <-- FAILED"), flush=True)
    final = subprocess.run(_bench(db, model), capture_output=True, text=True)
    bricks = _scalar(db, "SELECT COUNT(*) FROM bricks", 0)
    rows = _query(db, ROWS)
    complete = final.returncode == 0 and len(rows) == bricks and _scalar(db, DUPLICATES, 0) == 0
    print(f"{kills} kills mid-run over {fills} database(s): {bad} with rows lost, duplicated or damaged; the last run "
          f"{'finished' if complete else 'did NOT finish'} the job ({len(rows)} measurements of {bricks} bricks)")
    return bad + (not complete)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--model", default="squeezenet1_1", help="a zoo model or an ONNX file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlbricks-soak-") as folder:
        sys.exit(1 if soak(args.kills, args.model, args.seed, Path(folder)) else 0)


if __name__ == "__main__":
    main()

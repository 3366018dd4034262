"""The next model is cheap: what measuring a model's new bricks costs, with the other models' bricks
already in the database, against measuring the model whole to the same precision.

Reads a database that ``dlbricks evaluate --db DB`` filled (1 thread, optimizations off, layer
bricks; ``--suite full`` for ``--others full``). For each model of the default suite, its *new* bricks
are those that no other model uses: what a database holding the others' bricks would still have to
measure. The others are every other zoo model (``--others full``, the default: the zoo is decomposed,
not measured) or the other models of the default suite (``--others default``). In chained rounds
(the main job's default) the next model's rounds also time again the anchors of the bricks it takes
from the others' rounds (:func:`dlbricks.benchmarks_db.rounds.anchored_groups`, as they would be
chosen from this database, the model's own rounds aside): its cost is every brick it would time
(new, anchors, and bricks from moments too small to anchor), each at the wall time stored with its
measurement in the model's context (its calls and its floor model's over the rounds, and its share
of the bricks' preparation: :func:`dlbricks.generators.rounds.rounds_measurements`), or measured
apart where it has none (the pilot, further runs and moments summed:
:func:`dlbricks.generators.measurement.combine`). With ``--new-only``, the new bricks alone (the
figure before anchors). The model whole is then measured
here, in a fresh worker, under the main job's budget for whole models at the same target
(``rel_ci = 2 T``), and its wall time (session, warm-up, sampling) is the baseline. The script
prints, per model, the new bricks, both times and their ratio, then the median ratio over the suite
(DLBricks reports 4.4x).

Usage: ``python benchmarks/bench_next_model.py --db DB [--target-ci 0.01]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

from dlbricks import decompose, load_model
from dlbricks.benchmarks_db import Store
from dlbricks.benchmarks_db.rounds import Reuse, anchored_groups
from dlbricks.estimator.evaluation import DEFAULT_SUITE, EVALUATE_BUDGET
from dlbricks.generators import OrtConfig
from dlbricks.generators.runner import Runner
from dlbricks.model_zoo import build, list_models


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a database filled by dlbricks evaluate --target-ci")
    parser.add_argument("--target-ci", type=float, default=0.01)
    parser.add_argument("--others", choices=("full", "default"), default="full",
                        help="whose bricks the database already holds: every other zoo model, or the suite's")
    parser.add_argument("--new-only", action="store_true",
                        help="count the new bricks alone, not the anchors that chained rounds time again")
    args = parser.parse_args()
    config = OrtConfig()
    store = Store.open(args.db, create=False, readonly=True)
    system = _system(store)
    models = {name: load_model(build(name), name=name) for name in DEFAULT_SUITE}
    decs = {name: decompose(g, "layer") for name, g in models.items()}
    users: dict[str, set[str]] = {}
    others = [m.name for m in list_models()] if args.others == "full" else list(DEFAULT_SUITE)
    for name in others:
        dec = decs[name] if name in decs else decompose(load_model(build(name), name=name), "layer")
        for sig in dec.bricks:
            users.setdefault(sig, set()).add(name)
    budget = replace(EVALUATE_BUDGET, rel_ci=2 * args.target_ci)
    print(f"{'model':<20} {'new bricks':>10} {'timed':>6} {'bricks s':>9} {'whole s':>8} {'ratio':>7}")
    ratios = []
    with Runner(config=config, budget=budget) as runner:
        for name, dec in decs.items():
            new = [sig for sig in dec.bricks if users[sig] == {name}]
            rows = store.measurements.bricks(system=system, config_id=config.config_id, signatures=new)
            if len(rows) < len(new):
                print(f"{args.db}: {len(new) - len(rows)} new brick(s) of {name} are not measured; "
                      "fill it with dlbricks evaluate --target-ci first", file=sys.stderr)
                return 2
            timed = set(new) if args.new_only else _timed_again(store, dec, system, config)
            bricks_s = _wall_s(store, dec, system, config, timed)
            whole = runner.measure(models[name])
            ratio = whole.wall_time_s / bricks_s if bricks_s else float("inf")
            ratios.append(ratio)
            print(f"{name:<20} {len(new):>10} {len(timed):>6} {bricks_s:>9.2f} {whole.wall_time_s:>8.2f} "
                  f"{ratio:>6.2f}x")
    what = "its new bricks" if args.new_only else "the bricks its rounds time: new ones and anchors"
    print(f"median over {len(ratios)} models, others: {args.others}: {statistics.median(ratios):.2f}x "
          f"(whole model to +-{100 * args.target_ci:g}% / {what})")
    return 0


def _timed_again(store: Store, dec, system: str, config: OrtConfig) -> set[str]:
    """The bricks of ``dec`` that its chained rounds would time with the others' bricks stored: all
    but those taken through anchors from the rounds of the other models in the database."""
    taken = {k for g in anchored_groups(store, dec, system, config.config_id, Reuse(), again=True)
             for k in set(g.keys) - set(g.feeders)}
    return set(dec.bricks) - taken


def _wall_s(store: Store, dec, system: str, config: OrtConfig, keys: set[str]) -> float:
    """The stored wall time of ``keys``: each brick's measurement in ``dec``'s context where it has one,
    else its own."""
    own = {r.key: r.wall_time_s for r in store.measurements.in_context(dec.model_key, system=system,
                                                                       config_id=config.config_id, status="ok")}
    rows = {r.key: r.wall_time_s for r in store.measurements.bricks(system=system, config_id=config.config_id,
                                                                     signatures=sorted(keys - set(own)))}
    return sum(own.get(k, rows.get(k, 0.0)) for k in keys)


def _system(store: Store) -> str:
    """The database's one system (the machine that filled it)."""
    systems = store.systems.all()
    if len(systems) != 1:
        raise SystemExit(f"expected one system in the database, found {len(systems)}")
    return systems[0].fingerprint


if __name__ == "__main__":
    sys.exit(main())

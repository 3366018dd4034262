"""PNG figures of an evaluation (the ``plot`` extra: matplotlib)."""

from __future__ import annotations

from pathlib import Path

from dlbricks._errors import InvalidArgumentError

from ._evaluate import Evaluation

__all__ = ["plot_evaluation"]


def _pyplot():  # type: ignore[no-untyped-def]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise InvalidArgumentError(
            "plots need matplotlib: pip install 'dlbricks[plot]'") from e
    return plt


def plot_evaluation(ev: Evaluation, out_dir: str | Path,
                    op_times: dict[str, float] | None = None) -> list[Path]:
    """Write ``estimated_vs_measured.png`` (and ``time_by_op.png`` given per-op times in seconds)."""
    plt = _pyplot()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgumentError(f"--plot {out}: cannot create the folder ({e.strerror}).") from e
    paths = []
    fig, ax = plt.subplots(figsize=(6, 6))
    measured = [1e3 * r.measured_s for r in ev.rows]
    estimated = [1e3 * r.estimated_s for r in ev.rows]
    ax.scatter(measured, estimated)
    for r, x, y in zip(ev.rows, measured, estimated, strict=True):
        ax.annotate(r.model, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    top = max(measured + estimated) * 1.1 if measured else 1.0
    ax.plot([0, top], [0, top], "k--", linewidth=0.8, label="exact")
    ax.plot([0, top], [0, 1.05 * top], "g:", linewidth=0.8, label="+-5%")
    ax.plot([0, top], [0, 0.95 * top], "g:", linewidth=0.8)
    ax.set_xlabel("measured latency (ms)")
    ax.set_ylabel("estimated latency (ms)")
    from ._api import threads_of

    ax.set_title(f"{ev.system.cpu_model}, {threads_of(ev.config)} thread(s), {ev.granularity}", fontsize=9)
    ax.legend()
    fig.tight_layout()
    paths.append(out / "estimated_vs_measured.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    if op_times:
        fig, ax = plt.subplots(figsize=(7, 4))
        items = sorted(op_times.items(), key=lambda kv: -kv[1])[:15]
        ax.barh([k for k, _ in items][::-1], [1e3 * v for _, v in items][::-1])
        ax.set_xlabel("time in the suite's estimates (ms)")
        ax.set_title("time by op type", fontsize=9)
        fig.tight_layout()
        paths.append(out / "time_by_op.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths

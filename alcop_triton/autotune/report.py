"""PNG plots for ``alcop-tune report`` (matplotlib, Agg backend: no display needed).

matplotlib is an optional dependency (``pip install 'alcop_triton[plots]'``): it is imported only when a
plot is drawn, and its absence is an ImportError that says how to install it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

from .replay import Comparison

_STYLE = {"analytical+xgb": ("tab:red", "-"), "xgb": ("tab:blue", "--"), "analytical": ("tab:green", "-."),
          "random": ("tab:gray", ":"), "grid": ("tab:brown", ":")}


PLOTS_EXTRA = "pip install 'alcop_triton[plots]'"


def require_matplotlib() -> None:
    """Raise ImportError, saying how to install it, if matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"the plots of `alcop-tune report` need matplotlib, which is not installed "
                          f"({exc}); install it with {PLOTS_EXTRA}") from None


def _plt() -> Any:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(comp: Comparison, out: str | os.PathLike[str], budgets: Sequence[int] = (10, 50)) -> list[Path]:
    """Mean best-in-k curves (one PNG) and one small panel per task (a second PNG)."""
    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ks = list(range(1, comp.k_max + 1))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for t in comp.curves:
        if comp.curves[t]:
            color, ls = _STYLE.get(t, (None, "-"))
            ax.plot(ks, comp.mean_curve(t), ls, color=color, label=t, lw=2)
    for k in budgets:
        if k <= comp.k_max:
            ax.axvline(k, color="k", lw=0.5, alpha=0.4)
    ax.set(xlabel="trials k", ylabel="best-in-k / exhaustive best", ylim=(0, 1.02),
           title=f"Tuner search efficiency (mean of {len(comp.space_sizes)} workloads, {comp.seeds} seeds)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    mean_path = out / "tuning_curves.png"
    fig.savefig(mean_path, dpi=120)
    plt.close(fig)

    tasks = sorted(comp.space_sizes)
    cols = min(4, max(1, len(tasks)))
    rows = math.ceil(len(tasks) / cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False, sharey=True)
    for ax, task in zip(axes.flat, tasks):
        for t in comp.curves:
            if task in comp.curves[t]:
                color, ls = _STYLE.get(t, (None, "-"))
                ax.plot(ks, comp.curves[t][task], ls, color=color, label=t)
        ax.set_title(task.split("/", 1)[-1], fontsize=7)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    per_path = out / "tuning_curves_per_workload.png"
    fig.savefig(per_path, dpi=110)
    plt.close(fig)
    return [mean_path, per_path]


def plot_speedups(rows: Sequence[dict[str, Any]], out: str | os.PathLike[str]) -> Path:
    """Per-workload speedup of alcop over torch and over the tutorial configs (bench JSON rows)."""
    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    labels = [r["workload"] for r in rows]
    series = [(k, name) for k, name in (("speedup_vs_torch", "vs torch"), ("speedup_vs_tutorial", "vs tutorial"))
              if any(r.get(k) for r in rows)]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows) + 2), 4.5))
    width = 0.8 / max(1, len(series))
    for j, (key, name) in enumerate(series):
        ax.bar([i + j * width for i in range(len(rows))], [r.get(key) or 0.0 for r in rows], width, label=name)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(rows))])
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="speedup of alcop (x)", title="Per-shape speedup of tuned alcop kernels")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "speedups.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

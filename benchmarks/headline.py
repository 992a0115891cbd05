"""The headline run: every GPU number of docs/results.md's first sections, in one resumable command.

    python benchmarks/headline.py benchmarks/results/headline [--budget-s 540] [--results-page docs/results.md]
    python benchmarks/headline.py OUT --dry-run
    python benchmarks/headline.py OUT --figure-only     # OUT/headline.png from OUT/suite/report.json

Runs, each in a process of its own, into ``OUT``:

1. ``overhead``: ``benchmarks/overhead.py`` (``OUT/overhead/``);
2. ``e2e``: ``benchmarks/e2e.py``, one (model, task) pair per process, inference of every model and the
   training step of every model that has one (``OUT/e2e/``, the pairs merged; ``--no-compile`` leaves out
   its torch.compile modes);
3. ``ablation``: the pipelining ablation (``benchmarks/ablation_h100.sh``, one grid per MMA path:
   wgmma and, with ``DISABLE_MMA_V3=1``, mma.sync), its report over both paths
   (``report_pipeline.py``) and the model evaluation on the wgmma grid (``eval_model.py``), in
   ``OUT/ablation/`` and ``OUT/model/``; not in a dry run (the grids need a GPU);
4. ``suite``: ``benchmarks/suite.py`` over the alcop, heldout, models, conv2d, conv2d_bwd, conv3d and
   conv3d_bwd sets, with Inductor on the alcop and heldout sets (``OUT/suite/``; resumable by workload).

A stage whose results are complete in ``OUT`` is skipped, so the same command, repeated, finishes
the run within calls of limited length: ``--budget-s`` bounds one call, a stage is started only when
the time it is expected to take (its longest duration in this run, or another e2e model's, else a default) fits in what
is left or it is the call's first (then stopped when the budget is spent), and the suite gets what
is left as its own budget. ``OUT/headline.json`` holds the run id,
date, device and versions, and each stage's status, durations and the commit each call measured; a call on another device or with
other versions refuses to resume. When every stage is complete, the figure ``OUT/headline.png`` is
drawn from the suite's report (alcop against torch per workload, both timers; device, date and timers
in its caption) and, where ``OUT`` is ``benchmarks/results/headline``, docs/results.md is regenerated
(``benchmarks/report_results.py``). The figure needs matplotlib (``pip install alcop_triton[plots]``),
imported only here. ``--dry-run`` runs every stage's own dry run on CPU (the interpreter): it tests the
driver and measures nothing (no figure, the results page left alone unless ``--results-page`` names a file).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUITE_SETS = "alcop,heldout,models,conv2d,conv2d_bwd,conv3d,conv3d_bwd"
INDUCTOR_SETS = "alcop,heldout"
E2E_PAIRS = (("bert", "infer"), ("gpt2", "infer"), ("llama", "infer"), ("resnet50", "infer"),
             ("gpt2", "train"), ("llama", "train"), ("resnet50", "train"))
ABLATION_MMAS = ("wgmma", "mma_sync")
ABLATION_GRID = "alcop_space"
# Seconds a stage is expected to take when this run has not timed it yet.
DEFAULT_S = {"overhead": 120.0, "e2e": 240.0, "ablation": 330.0, "model": 240.0}
MARGIN_S = 20.0   # process start-up, the figure and the results page
FIGURE = "headline.png"


def read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def suite_complete(out: Path) -> bool:
    r = read_json(out / "suite" / "report.json")
    return bool(r and r.get("progress") is not None and not r["progress"].get("left"))


def e2e_missing(out: Path, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (model, task) pairs of ``pairs`` that ``OUT/e2e/e2e.json`` lacks (a result without a task: inference)."""
    r = read_json(out / "e2e" / "e2e.json")
    have = {(x["model"], x.get("task", "infer")) for x in r["results"]} if r else set()
    return [p for p in pairs if p not in have]


def run_meta(dry_run: bool) -> dict[str, Any]:
    import torch
    import triton

    sys.path.insert(0, str(ROOT))
    import alcop_triton

    device = (f"CPU ({platform.machine()}), interpreter: not a measurement" if dry_run
              else torch.cuda.get_device_name())
    return {"device": device, "torch": torch.__version__, "triton": triton.__version__,
            "alcop": alcop_triton.__version__, "cuda": None if dry_run else torch.version.cuda,
            "python": platform.python_version()}


def source_commit() -> str | None:
    """The commit a stage measures: ``ALCOP_COMMIT`` (a copy of the tree without ``.git``), else git's HEAD."""
    if os.environ.get("ALCOP_COMMIT"):
        return os.environ["ALCOP_COMMIT"]
    r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def start_or_resume(out: Path, meta: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    """``OUT/headline.json``: a new run, or the one ``OUT`` holds if it is on this device and versions."""
    path = out / "headline.json"
    run = read_json(path)
    if run is not None:
        fixed = {k: meta[k] for k in ("device", "torch", "triton", "alcop")}
        if {k: run[k] for k in fixed} != fixed or run["dry_run"] != dry_run:
            raise SystemExit(f"headline: {out} holds run {run['run_id']} on {run['device']} (torch {run['torch']}, "
                             f"Triton {run['triton']}, dry run {run['dry_run']}); this call is {fixed}, dry run "
                             f"{dry_run}: use another OUT")
        run["calls"] += 1
    else:
        now = _dt.datetime.now(_dt.timezone.utc)
        run = {"run_id": now.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6], "date": now.date().isoformat(),
               **meta, "dry_run": dry_run, "calls": 1, "stages": {}}
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=1))
    return run


def stage_commands(out: Path, run: dict[str, Any], dry_run: bool, no_compile: bool = False
                   ) -> list[tuple[str, list[str], Callable[[], bool]]]:
    """(stage, script arguments, is it complete?) in the order they run: the short stages first, so a
    call that the suite would fill still gives them; the suite's budget is added when it starts."""
    py = [sys.executable]
    dry = ["--dry-run"] if dry_run else []
    stages: list[tuple[str, list[str], Callable[[], bool]]] = [
        ("overhead", py + [str(HERE / "overhead.py"), "--out", str(out / "overhead")] + dry,
         lambda: (out / "overhead" / "overhead.json").is_file())]

    def e2e_done(model: str, task: str) -> Callable[[], bool]:
        return lambda: not e2e_missing(out, [(model, task)])

    for m, t in E2E_PAIRS:
        stages.append((f"e2e:{m}" + ("" if t == "infer" else f":{t}"),
                       py + [str(HERE / "e2e.py"), "--out", str(out / "e2e"), "--models", m, "--task", t] + dry
                       + (["--no-compile"] if no_compile else []), e2e_done(m, t)))
    if not dry_run:  # the grids need a GPU: a dry run has no CPU stand-in for them
        stages += ablation_stages(out)
    stages.append(("suite", py + [str(HERE / "suite.py"), "--out", str(out / "suite"), "--sets", SUITE_SETS,
                                  "--inductor-sets", INDUCTOR_SETS, "--run-id", run["run_id"]] + dry,
                   lambda: suite_complete(out)))
    return stages


def ablation_stages(out: Path) -> list[tuple[str, list[str], Callable[[], bool]]]:
    """The pipelining ablation (``ablation_h100.sh``: the ``ABLATION_GRID`` grid on the ALCOP dense + bmm
    suite, one stage per MMA path), then its report over both paths and the model evaluation on the
    wgmma grid (``eval_model.py``: random, analytical, XGBoost and both, held out by workload)."""
    ab, py = out / "ablation", [sys.executable]
    grids = [ab / f"h100_{mma}_{ABLATION_GRID}.jsonl" for mma in ABLATION_MMAS]
    stages: list[tuple[str, list[str], Callable[[], bool]]] = [
        # the grid's own budget keeps it inside one call (a full grid took 258-269 s on the H100)
        (f"ablation:{mma}", ["env", f"MMA={mma}", f"GRID={ABLATION_GRID}", "BUDGET_S=480", "bash",
                             str(HERE / "ablation_h100.sh"), str(ab)],
         (lambda mma=mma: (ab / f"pipeline_{mma}.json").is_file())) for mma in ABLATION_MMAS]
    stages.append(("ablation_report", py + [str(HERE / "report_pipeline.py"), *map(str, grids), "--out",
                                           str(ab / "pipeline_variants")],
                   lambda: (ab / "pipeline_variants.json").is_file()))
    stages.append(("model", py + [str(HERE / "eval_model.py"), "--data", str(grids[0]), "--out",
                                  str(out / "model" / "model_eval"), "--nthread", "8"],
                   lambda: (out / "model" / "model_eval.json").is_file()))
    return stages


def run_stages(out: Path, run: dict[str, Any], stages: Sequence[tuple[str, list[str], Callable[[], bool]]],
               budget_s: float, execute: Callable[[list[str], float], int],
               clock: Callable[[], float] = time.monotonic) -> bool:
    """Run each incomplete stage that fits in the budget; True when every stage is complete."""
    t0, ran = clock(), False
    for name, cmd, complete in stages:
        if complete():
            continue
        left = budget_s - MARGIN_S - (clock() - t0)
        info = run["stages"].setdefault(name, {"calls": []})
        kind = name.split(":")[0]   # e2e:<model>: another model's duration is the estimate until this one ran
        same = [d for n, i in run["stages"].items() if n.split(":")[0] == kind for d in i["calls"]]
        expect = max(info["calls"] or same, default=DEFAULT_S.get(kind, 0.0))
        if name == "suite":
            if left < 60:
                break
            cmd = cmd + ["--budget-s", f"{left:.0f}"]
        elif expect > left and ran:   # the first stage of a call always starts, so every call makes progress
            break
        ran = True
        s0 = clock()
        rc = execute(cmd, max(left, 1.0))
        info["calls"].append(round(clock() - s0, 1))
        info["last_rc"] = rc
        info.setdefault("commits", []).append(source_commit())   # a resumed run may span commits: say which
        (out / "headline.json").write_text(json.dumps(run, indent=1))
        if rc != 0 or not complete():
            break   # a failed stage stops the call; an incomplete suite has used its budget
    return all(complete() for _, _, complete in stages)


def execute(cmd: list[str], timeout_s: float) -> int:
    print("headline: " + " ".join(cmd), flush=True)
    try:
        return subprocess.run(cmd, cwd=ROOT, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        print(f"headline: stopped after {timeout_s:.0f} s", flush=True)
        return 124


def _pyplot() -> Any:
    """matplotlib's pyplot on a file backend; a clear message where it is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("headline: the figure needs matplotlib: pip install 'alcop_triton[plots]' "
                         "(or pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_data(report: dict[str, Any]) -> list[tuple[str, str, list[tuple[str, float]]]]:
    """(set, timer, [(workload, torch ms / alcop ms)] sorted by ratio) of a suite report, for the figure."""
    out = []
    for set_, s in report["summary"].items():
        for timer in ("eager", "graph"):
            ratios = (s["timers"].get(timer, {}).get("alcop") or {}).get("ratios") or {}
            if ratios:
                out.append((set_, timer, sorted(ratios.items(), key=lambda kv: kv[1])))
    return out


def caption(report: dict[str, Any]) -> str:
    run = report["run"]
    return (f"alcop_triton against torch (cuBLAS/cuDNN), torch ms / alcop ms per workload; {run['device']}, "
            f"torch {run['torch']}, Triton {run['triton']}, {run['date']}, run {run['run_id']}.\n"
            f"eager: {report['timers']['eager']}.\ngraph: {report['timers']['graph']}.")


def write_figure(out: Path) -> Path:
    """``out/headline.png`` from ``out/suite/report.json``: one panel per set, a point per workload and timer."""
    report = json.loads((out / "suite" / "report.json").read_text())
    series = figure_data(report)
    if not series:
        raise SystemExit(f"headline: {out / 'suite' / 'report.json'} holds no alcop ratios to plot")
    plt = _pyplot()
    from matplotlib import ticker

    sets = list(dict.fromkeys(set_ for set_, _, _ in series))
    fig, axes = plt.subplots(1, len(sets), figsize=(5.5 * len(sets), 4.2), squeeze=False)
    for ax, set_ in zip(axes[0], sets):
        for _, timer, pts in (x for x in series if x[0] == set_):
            geo = statistics.geometric_mean(v for _, v in pts)
            ax.plot(range(len(pts)), [v for _, v in pts], "o" if timer == "eager" else "s", ms=3.5,
                    label=f"{timer} (geomean {geo:.3f}x)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        ax.set_title(f"{set_} ({report['summary'][set_]['workloads']} workloads)")
        ax.set_xlabel("workloads, each timer sorted by ratio")
        ax.set_ylabel("torch ms / alcop ms (> 1: alcop faster)")
        ax.legend(fontsize=8)
    fig.text(0.01, 0.01, caption(report), fontsize=7, va="bottom", wrap=True)
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    path = out / FIGURE
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="run directory (suite/, overhead/, e2e/, headline.json)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop cleanly before this many seconds")
    ap.add_argument("--results-page", default=None, help="results page to regenerate when complete (default: "
                    "docs/results.md when OUT is benchmarks/results/headline, not in a dry run)")
    ap.add_argument("--dry-run", action="store_true", help="every stage's CPU dry run: tests the driver")
    ap.add_argument("--no-compile", action="store_true", help="e2e without its torch.compile modes (long compiles)")
    ap.add_argument("--figure-only", action="store_true", help="draw OUT/headline.png from OUT's suite report, run nothing")
    a = ap.parse_args(argv)
    out = Path(a.out).resolve()
    if a.figure_only:
        print(f"headline: wrote {write_figure(out)}")
        return 0
    if not a.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("headline: no CUDA device (use --dry-run to test the driver on CPU)", file=sys.stderr)
            return 2
    run = start_or_resume(out, run_meta(a.dry_run), a.dry_run)
    done = run_stages(out, run, stage_commands(out, run, a.dry_run, a.no_compile), a.budget_s, execute)
    if not done:
        left = [n for n, _, c in stage_commands(out, run, a.dry_run, a.no_compile) if not c()]
        print(f"headline: run {run['run_id']} incomplete ({', '.join(left)} left); run the same command again")
        return 0
    if not a.dry_run:
        print(f"headline: wrote {write_figure(out)}")
    committed = out == (HERE / "results" / "headline").resolve()
    page = a.results_page or (str(ROOT / "docs" / "results.md") if committed and not a.dry_run else None)
    if page:
        rc = subprocess.run([sys.executable, str(HERE / "report_results.py"), "--out", page,
                             "--headline", str(out)], cwd=ROOT).returncode
        if rc:
            return rc
    print(f"headline: run {run['run_id']} complete in {out}" + (f"; {page} regenerated" if page else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The tuner's early-stop rule and its seeds, replayed on recorded measurements (no GPU needed).

    python benchmarks/early_stop_replay.py OUT [--data benchmarks/data/h100_wgmma_dense_bmm.jsonl]
        [--patience 16] [--min-trials 32] [--trials 50] [--seeding]

For every recorded (GPU, workload) of the GEMM ops, ``analytical+xgb`` tunes the recorded configs
(``ReplayMeasurer`` answers with the recorded median times) once with the full budget and once with
``EarlyStop``; with ``--seeding`` a third run adds the seeds a tuning run gets from dispatch
(``Dispatcher.seeds``), leave-one-out: dispatch consults the shipped tables without the workload
under test, as for a shape never measured. Seeds that the recording lacks cannot be replayed and are
skipped (the space is what was recorded). The table gives the trials each run measured, its best time
as a fraction of the recording's best, and the CPU seconds of its model phase (proposals and fits,
``time.process_time``). Writes OUT/early_stop_replay.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNS = ("full", "early_stop", "seeded")


def main(argv: list[str] | None = None) -> int:
    from alcop_triton.autotune.replay import ReplayMeasurer, _spec_for, load_tasks
    from alcop_triton.autotune.space import ConfigSpace
    from alcop_triton.autotune.tuner import EarlyStop, make_tuner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", nargs="+", default=[str(ROOT / "benchmarks" / "data" / "h100_wgmma_dense_bmm.jsonl")])
    ap.add_argument("--patience", type=int, default=EarlyStop().patience)
    ap.add_argument("--min-trials", type=int, default=EarlyStop().min_trials)
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--seeding", action="store_true", help="also replay runs seeded by dispatch (leave-one-out)")
    ap.add_argument("--limit", type=int, default=0, help="first N workloads only")
    a = ap.parse_args(argv)
    rule = EarlyStop(patience=a.patience, min_trials=a.min_trials)
    tasks = [t for t in load_tasks(a.data) if t.workload.op in ("matmul", "bmm", "linear")]
    tasks = tasks[: a.limit] if a.limit else tasks
    runs = RUNS if a.seeding else RUNS[:2]
    shipped = _shipped() if a.seeding else []
    # Dispatch reads the user's database too: an empty one, so only the shipped tables count.
    empty_db = Path(tempfile.mkdtemp()) / "empty.sqlite"
    rows = []
    for task in tasks:
        m = ReplayMeasurer(task.workload, task.records)
        space = ConfigSpace.from_configs(task.workload, m.configs, _spec_for(task))
        best = m.best_time_ms()
        row: dict[str, Any] = {"task": task.key, "configs": len(space)}
        for name in runs:
            seeds = _seeds(task, space, shipped, empty_db) if name == "seeded" else []
            t0 = time.process_time()
            kw = {"seed_configs": seeds} if seeds else {}  # (the keyword is absent from older tuners)
            tuner = make_tuner("analytical+xgb", space, seed=0, **kw)
            r = tuner.tune(m, a.trials, batch_size=8, early_stop=None if name == "full" else rule)
            row[name] = {"trials": len(r.trials), "model_cpu_s": time.process_time() - t0,
                         "best_fraction": best / r.best.result.time_ms if r.best and best else 0.0,
                         "seeds_in_space": len(seeds), "best_is_seed": bool(getattr(r, "best_is_seed", False))}
        rows.append(row)
    summary: dict[str, Any] = {"workloads": len(rows)}
    for name in runs:
        got = [r[name] for r in rows]
        summary[name] = {"trials": statistics.mean(g["trials"] for g in got),
                         "best_fraction": statistics.mean(g["best_fraction"] for g in got),
                         "min_best_fraction": min(g["best_fraction"] for g in got),
                         "model_cpu_s": statistics.mean(g["model_cpu_s"] for g in got)}
        if name != "full":
            summary[name]["worst_ratio_to_full"] = min(r[name]["best_fraction"] / r["full"]["best_fraction"]
                                                       for r in rows)
    report = {"date": datetime.date.today().isoformat(), "data": [Path(d).name for d in a.data], "trials": a.trials,
              "rule": {"patience": rule.patience, "min_gain": rule.min_gain, "min_trials": rule.min_trials},
              "seeding": a.seeding, "python": platform.python_version(), "processor": platform.processor() or "-",
              "timer": "none for best fractions (replay of recorded median times); time.process_time for model_cpu_s",
              "summary": summary, "rows": rows}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "early_stop_replay.json").write_text(json.dumps(report, indent=1) + "\n")
    (a.out / "early_stop_replay.md").write_text(markdown(report, runs))
    print(markdown(report, runs).split("\n| workload")[0])
    return 0


def _shipped() -> list[Any]:
    from alcop_triton.autotune.dispatch import default_tables

    return default_tables()


def _seeds(task: Any, space: Any, shipped: list[Any], empty_db: Path) -> list[Any]:
    """Dispatch's seeds for the task's workload from the shipped tables without it, those in the space,
    at most two batches of 8 (what ``session.tune`` passes)."""
    from alcop_triton.autotune.database import Database
    from alcop_triton.autotune.dispatch import Dispatcher
    from alcop_triton.autotune.session import SEED_BATCHES

    others = [r for r in shipped if r.workload != task.workload]
    d = Dispatcher(Database(empty_db), defaults=others)
    return [c for c in d.seeds(task.workload, space.spec) if c in space][: SEED_BATCHES * 8]


def markdown(report: dict[str, Any], runs: tuple[str, ...]) -> str:
    s, rule = report["summary"], report["rule"]
    titles = {"full": "full budget", "early_stop": "early stop", "seeded": "seeded + early stop"}
    lines = ["# Early stop and seeding, replayed on recorded H100 measurements", "",
             f"Generated by `python benchmarks/early_stop_replay.py{' --seeding' if report['seeding'] else ''}` on "
             f"{report['date']} from {', '.join(report['data'])}: `analytical+xgb`, budget {report['trials']}, batch 8, "
             f"seed 0; rule patience {rule['patience']}, min_gain {rule['min_gain']}, min_trials {rule['min_trials']}. "
             "Best fraction = the recording's best time / the run's best time (recorded medians; no timing in this "
             "run). Model CPU s = `time.process_time` of the whole replayed run (proposals, fits; the replayed "
             f"measurements cost nothing), Python {report['python']}."
             + (" Seeded: dispatch's seeds from the shipped tables without the workload under test (leave-one-out), "
                "those the recording holds." if report["seeding"] else ""), ""]
    lines.append(f"Mean over {s['workloads']} workloads: " + "; ".join(
        f"{titles[n]} {s[n]['trials']:.1f} trials, best fraction {s[n]['best_fraction']:.4f} (min "
        f"{s[n]['min_best_fraction']:.4f}), model {s[n]['model_cpu_s']:.2f} CPU s"
        + (f", worst ratio to the full budget {s[n]['worst_ratio_to_full']:.4f}" if n != "full" else "")
        for n in runs) + ".")
    lines += ["", "| workload | configs | " + " | ".join(f"trials ({titles[n]}) | best fraction ({titles[n]})"
                                                       for n in runs)
              + (" | seeds replayed | best is a seed |" if "seeded" in runs else " |"),
              "|---|---|" + "---|---|" * len(runs) + ("---|---|" if "seeded" in runs else "")]
    for r in report["rows"]:
        cells = " | ".join(f"{r[n]['trials']} | {r[n]['best_fraction']:.4f}" for n in runs)
        extra = (f" | {r['seeded']['seeds_in_space']} | {'yes' if r['seeded']['best_is_seed'] else 'no'} |"
                 if "seeded" in runs else " |")
        lines.append(f"| {r['task']} | {r['configs']} | {cells}{extra}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())

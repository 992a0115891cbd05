"""How tuning scales over the GPUs of one host: wall time and trials per second on 1, 2 and 4 GPUs, same workloads.

    python benchmarks/scaling.py OUT --gpus 1      # then --gpus 2, --gpus 4 (each a run of its own)
    python benchmarks/scaling.py OUT --report      # README.md from the runs in OUT (also written after each run)

Each run tunes the same workloads (``--suite`` sections, default the ALCOP suite's dense and bmm GEMMs in
float16, and/or ``--shapes``) with ``alcop_triton.autotune.workers.tune_workloads`` on a ``LocalGpuPool`` of
the first N visible GPUs: ``--trials`` trials per workload, early stop off (every run measures the same number
of trials), seeded from the shipped tables as ``alcop-tune tune`` is. Every run starts cold: a fresh tuning
database, and fresh Triton and alcop kernel caches (``TRITON_CACHE_DIR``, ``ALCOP_CACHE_DIR``), so no run
reuses another's compiles.

Timer: ``time.perf_counter`` in this process. ``start_s``: making the pool and calibrating its workers
(processes spawned, torch imported, the calibration kernel); ``tune_s``: the tuning itself, from the first
workload to the last; trials per second = trials / ``tune_s`` (``wall_s`` = both is reported beside it).
Quality: per workload, the 1-GPU run's best time over this run's (>= 1: as good or better), geomean and worst.

Writes OUT/runs/gpus<N>.json and OUT/README.md (device, versions, date, timer, commands, the table).
``--device cpu --gpus N`` is a dry run with N interpreter workers (interpreter-sized shapes only).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from alcop_triton.records import Workload, geomean  # noqa: E402


def _workloads(a: argparse.Namespace) -> list[Workload]:
    from alcop_triton.cli import parse_shape, suite_workloads

    out: list[Workload] = []
    if a.sections:
        out += suite_workloads(a.suite, a.dtype, a.sections.split(","))
    out += [Workload("matmul", parse_shape(s), a.dtype, "nt") for s in a.shapes or []]
    if a.limit:
        out = out[: a.limit]
    if not out:
        raise SystemExit("scaling.py: no workloads (give --sections or --shapes)")
    return list(dict.fromkeys(out))


def run(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    from alcop_triton.autotune import workers
    from alcop_triton.autotune.database import Database, versions

    workloads = _workloads(a)
    run_dir = out / "runs" / f"gpus{a.gpus}"
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tuning.sqlite", "tuning.sqlite-wal", "tuning.sqlite-shm"):
        (run_dir / name).unlink(missing_ok=True)
    # Cold caches of its own, set before the workers are spawned (they take this environment).
    os.environ["TRITON_CACHE_DIR"] = str(run_dir / f"triton_cache_{os.getpid()}")
    os.environ["ALCOP_CACHE_DIR"] = str(run_dir / f"alcop_cache_{os.getpid()}")
    if a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    options = workers.MeasureOptions(device=a.device, compile_threads=a.batch, timeout_s=a.timeout)
    db = Database(run_dir / "tuning.sqlite")
    t0 = time.perf_counter()
    with workers.LocalGpuPool(a.gpus, device=a.device) as pool:
        cal = workers.calibrate(pool, options)
        t1 = time.perf_counter()
        results = workers.tune_workloads(workloads, pool, db, options=options, calibration=cal, tuner=a.tuner,
                                         n_trials=a.trials, batch_size=a.batch, seed=a.seed, early_stop=None)
        t2 = time.perf_counter()
    trials = sum(len(r.trials) for _, r in results)
    rec = {"gpus": a.gpus, "group": cal.group, "workers": cal.to_dict(), "versions": versions(),
           "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "timer": "time.perf_counter in the driver process", "command": "python " + " ".join(sys.argv),
           "tuner": a.tuner, "trials_per_workload": a.trials, "batch": a.batch, "workloads": len(workloads),
           "start_s": t1 - t0, "tune_s": t2 - t1, "wall_s": t2 - t0, "trials": trials,
           "trials_per_s": trials / (t2 - t1),
           "best_ms": {w.key(): (r.best.result.time_ms if r.best else None) for w, r in results}}
    (out / "runs" / f"gpus{a.gpus}.json").write_text(json.dumps(rec, indent=1) + "\n")
    return rec


def report(out: Path) -> str:
    runs = sorted((json.loads(p.read_text()) for p in (out / "runs").glob("gpus*.json")), key=lambda r: r["gpus"])
    if not runs:
        raise SystemExit(f"scaling.py: no runs in {out / 'runs'}")
    base = next((r for r in runs if r["gpus"] == 1), None)
    first = runs[0]
    devices = sorted({w["measured_on"]["name"] for r in runs for w in r["workers"]["workers"]})
    lines = [f"# Tuning throughput on 1..{runs[-1]['gpus']} GPUs of one host", "",
             f"Device: {', '.join(devices)}; driver "
             f"{', '.join(sorted({w['measured_on']['driver'] or '-' for r in runs for w in r['workers']['workers']}))}. "
             f"alcop {first['versions']['alcop']}, triton {first['versions']['triton']}, "
             f"torch {first['versions']['torch']}. Dates: {', '.join(sorted({r['date'][:10] for r in runs}))}.", "",
             f"Workloads: {first['workloads']}, {first['trials_per_workload']} trials each with {first['tuner']} "
             f"(batch {first['batch']}, early stop off), every run cold (fresh database and kernel caches).", "",
             "Timer: time.perf_counter in the driver. start = pool spawn + calibration; tune = first workload to "
             "last; trials/s = trials / tune. Quality: the 1-GPU run's best time / this run's, per workload "
             "(>= 1: as good or better).", "",
             "| GPUs | workers ranked together | start s | tune s | wall s | trials | trials/s | speedup (trials/s) "
             "| quality geomean | quality worst |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        speed = f"{r['trials_per_s'] / base['trials_per_s']:.2f}x" if base else "-"
        q = [base["best_ms"][k] / v for k, v in r["best_ms"].items()
             if base and v and base["best_ms"].get(k)] if base else []
        lines.append(f"| {r['gpus']} | {len(r['group'])} | {r['start_s']:.1f} | {r['tune_s']:.1f} | {r['wall_s']:.1f} "
                     f"| {r['trials']} | {r['trials_per_s']:.2f} | {speed} | "
                     f"{geomean(q):.3f} | {min(q):.3f} |" if q else
                     f"| {r['gpus']} | {len(r['group'])} | {r['start_s']:.1f} | {r['tune_s']:.1f} | {r['wall_s']:.1f} "
                     f"| {r['trials']} | {r['trials_per_s']:.2f} | {speed} | - | - |")
    lines += ["", "Workers (calibration kernel: devices.CALIBRATION_GEMM, a 4096^3 float16 torch.matmul):", ""]
    for r in runs:
        for w in r["workers"]["workers"]:
            cal = w["calibration_ms"]
            lines.append(f"- {r['gpus']} GPU run, {w['worker']}: {w['measured_on']['name']} {w['measured_on']['uuid']}, "
                         f"SM {w['measured_on']['sm_clock_mhz']} MHz, calibration "
                         f"{'-' if cal is None or not math.isfinite(cal) else f'{cal:.4f} ms'}"
                         + (f"; left out: {w['off']}" if w["off"] else ""))
    lines += ["", "Commands:", ""] + [f"    {r['command']}" for r in runs]
    text = "\n".join(lines) + "\n"
    (out / "README.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--gpus", type=int, help="GPUs of this run (the first N visible)")
    ap.add_argument("--report", action="store_true", help="only write OUT/README.md from the runs there")
    ap.add_argument("--suite", default=str(ROOT / "tests" / "data" / "alcop_suite.json"))
    ap.add_argument("--sections", default="dense,bmm", help="suite sections (comma-separated); '' for none")
    ap.add_argument("--shapes", nargs="*", help="more matmul shapes MxNxK (layout nt)")
    ap.add_argument("--limit", type=int, default=8, help="the first N workloads (0: all)")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tuner", default="analytical+xgb")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    if not a.report:
        if not a.gpus or a.gpus < 1:
            ap.error("--gpus N (>= 1) is needed for a run")
        rec = run(a, out)
        print(f"[scaling] {a.gpus} GPU(s): {rec['trials']} trials in {rec['tune_s']:.1f} s "
              f"({rec['trials_per_s']:.2f}/s), start {rec['start_s']:.1f} s", flush=True)
    print(report(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``build_table.py`` on every GPU of a host: the shipped table's workloads spread over one worker per GPU.

    python benchmarks/build_table_gpus.py OUT_DIR --gpus all [--dtypes float16,bfloat16] [--sets ...] \
        [--top-k 8] [--budget-s 540]
    python benchmarks/build_table.py OUT_DIR --install     # then, as for one GPU: into alcop_triton/data/

Same plan, candidates, checks, timer and output as ``build_table.py`` (its docstring): per workload the
candidates are chosen here, then a worker (``alcop_triton.autotune.workers.LocalGpuPool``: one process per
GPU, pinned with ``CUDA_VISIBLE_DEVICES``) compiles them in processes of its own (``collect_grid.precompile``,
the host's cores shared out over its GPUs), checks and times each, and times torch on the same inputs; its
lines come back here and are appended to ``OUT_DIR/default_<gpu>.jsonl`` as each workload ends. Each worker
measures whole workloads, so no workload's candidates are ranked across GPUs. Before any workload the
workers are calibrated (``workers.calibrate``): a GPU more than 3 % off the others' median (or another GPU
model) is reported and measures nothing. Every line names the GPU that measured it (``measured_on``: UUID,
name, SM clock, driver) besides the table's ``gpu``/``device``/versions/date.

Resumable as ``build_table.py`` is: a rerun skips the workloads the file completes; no workload is started
after ``--budget-s`` if it would end past it, judged by the slowest so far.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import build_table  # noqa: E402
from alcop_triton.records import KernelConfig, Workload  # noqa: E402


def measure_in_worker(called: Workload, w: Workload, configs: list[KernelConfig], done: set[str],
                      compile_processes: int) -> list[dict[str, Any]]:
    """In a GPU worker: compile, check and time ``configs`` on ``w`` and torch beside them (``build_table``'s
    ``measure_workload``); the output lines, each naming this GPU."""
    import torch
    import triton

    import alcop_triton
    from alcop_triton.autotune import workers
    from alcop_triton.model.hardware import detect
    from collect_grid import precompile

    spec = detect()
    identity = workers.describe_worker(workers.MeasureOptions(), calibrate=False).identity
    meta = {"gpu": spec.name, "device": torch.cuda.get_device_name(),
            "cc": ".".join(map(str, torch.cuda.get_device_capability())), "mma": spec.mma,
            "triton": triton.__version__, "torch": torch.__version__.split("+")[0], "alcop": alcop_triton.__version__,
            "date": datetime.date.today().isoformat(), "measured_on": identity.to_dict()}
    todo = [(w, c) for c in configs if build_table._pair_key(w, c) not in done]
    if todo:
        precompile(todo, compile_processes)
    lines: list[dict[str, Any]] = []
    build_table.measure_workload(called, w, configs, done, meta, lines.append)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--gpus", default="all", help="'all' or the first N visible GPUs")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--sets", default=",".join(build_table.SETS), help=f"comma-separated, from {build_table.SETS}")
    ap.add_argument("--suite", default=str(ROOT / "tests" / "data" / "alcop_suite.json"))
    ap.add_argument("--heldout", default=str(ROOT / "benchmarks" / "workloads" / "heldout.json"))
    ap.add_argument("--ops", default=None, help="comma-separated: only these ops of the sets")
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="start no workload that would end past this, judged by the slowest so far")
    ap.add_argument("--new-candidates", action="store_true",
                    help="also workloads the file completes: measure their candidates it lacks (nothing twice)")
    a = ap.parse_args(argv)
    t_start = time.time()

    from alcop_triton.autotune import workers
    from alcop_triton.autotune.database import read_jsonl, versions
    from alcop_triton.autotune.dispatch import default_tables

    with workers.LocalGpuPool(workers.parse_gpus(a.gpus)) as pool:
        cal = workers.calibrate(pool, workers.MeasureOptions())
        for line in cal.describe():
            print(f"[table] {line}", flush=True)
        spec = cal.reference.spec
        out_dir = Path(a.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"default_{spec.name.lower()}.jsonl"
        plan, skipped = build_table.workload_list(a.sets.split(","), a.dtypes.split(","), Path(a.suite),
                                                  Path(a.heldout), a.ops.split(",") if a.ops else None)
        if skipped:
            print(f"[table] {len(skipped)} workloads left out as held out")
        done = build_table.done_keys(path)
        known = default_tables() + (read_jsonl(path) if path.exists() else [])
        todo = build_table.pending(plan, done, a.new_candidates)
        compile_processes = max(1, (os.cpu_count() or 2) // len(pool.labels) - 2)
        print(f"[table] {len(plan)} workloads, {len(todo)} left, on {len(cal.group)} GPU(s); writing {path}", flush=True)
        free = list(cal.group)
        running: dict[concurrent.futures.Future[Any], tuple[str, Workload, float]] = {}
        slowest, measured = 0.0, 0
        with path.open("a") as f:
            while todo or running:
                while todo and free and time.time() - t_start + slowest <= a.budget_s:
                    called, w = todo.pop(0)
                    worker = free.pop(0)
                    configs = build_table.candidates(w, spec, a.top_k, known)
                    fut = pool.submit(measure_in_worker, called, w, configs, done, compile_processes, worker=worker)
                    running[fut] = (worker, w, time.time())
                if not running:
                    print(f"[table] budget of {a.budget_s:.0f}s reached; rerun to continue", flush=True)
                    break
                finished, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in finished:
                    worker, w, t0 = running.pop(fut)
                    free.append(worker)
                    slowest = max(slowest, time.time() - t0)
                    for rec in fut.result():  # a worker's own failure ends the build loudly; the file keeps the rest
                        f.write(json.dumps(rec) + "\n")
                    f.flush()
                    measured += 1
                    print(f"[table] {measured} workloads ({w.key()} on {worker}), {time.time() - t_start:.0f}s",
                          flush=True)
    meta = {"device": cal.reference.identity.name, "gpus": len(cal.group),
            "date": datetime.date.today().isoformat(), **versions()}
    summary = build_table.summarize(path, meta)
    build_table.write_summary(out_dir, summary)
    print(f"[table] {len(summary['rows'])} workloads measured, geomean {summary['geomean_speedup']:.3f}x torch",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where a tuning process's start goes: imports, and the helper processes' start and end.

    python benchmarks/probes/tune_start.py OUT_DIR [--workers 14] [--reps 3]

Rows (wall seconds, ``time.perf_counter``; medians of ``--reps`` tries, each import in a fresh interpreter):

* ``import <module>``: a fresh ``python -c "import <module>"`` process, start to exit, for ``torch``,
  ``triton``, ``torch, triton`` and ``alcop_triton.cli`` (what ``alcop-tune`` imports before its command
  runs, torch and triton included); ``python -c pass`` is the interpreter alone.
* ``measurer ready`` / ``measurer close``: a ``ProcessMeasurer`` for a GEMM from ``start()`` until its child
  has imported and made its inputs, and its ``close()``.
* ``compile pool ready (N workers)`` / ``compile pool close``: a ``CompilePool`` from ``start()`` until every
  worker has answered (it answers after its warm-up: imports, device context), and its ``close()``; then
  the same pool started together with a measurer, as ``session.tune`` starts them.

Writes OUT_DIR/tune_start.json and OUT_DIR/tune_start.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import probe_io  # noqa: E402

TIMER = "wall seconds, time.perf_counter, median of the tries"


def _median(fn: Callable[[], float], reps: int) -> tuple[float, list[float]]:
    times = [fn() for _ in range(reps)]
    return statistics.median(times), times


def _import_s(module: str) -> float:
    t0 = time.perf_counter()
    code = "pass" if module == "" else f"import {module}"
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - t0


def _helpers(workers: int, measurer: bool, pool: bool) -> dict[str, float]:
    from alcop_triton.autotune.measure import ProcessMeasurer
    from alcop_triton.autotune.precompile import CompilePool
    from alcop_triton.records import Workload

    w = Workload("matmul", (2304, 1792, 2816), "float16", "nt")
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    m = ProcessMeasurer(w, "cuda").start() if measurer else None
    p = CompilePool(w, "cuda", workers=workers).start() if pool else None
    if p is not None:
        p._started()  # the workers are made in a background thread where they fork from a server
        assert p._pool is not None
        # A worker answers only after its warm-up (imports, device context): ready when every pid has answered.
        pids: set[int] = set()
        while len(pids) < workers:
            pids |= {f.result() for f in [p._pool.submit(os.getpid) for _ in range(workers)]}
            time.sleep(0.02)
        out["pool_ready"] = time.perf_counter() - t0
    if m is not None:
        m._started()
        m._await_ready()
        out["measurer_ready"] = time.perf_counter() - t0
    if m is not None:
        t1 = time.perf_counter()
        m.close()
        out["measurer_close"] = time.perf_counter() - t1
    if p is not None:
        t1 = time.perf_counter()
        p.close()
        out["pool_close"] = time.perf_counter() - t1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--workers", type=int, default=None, help="compile workers (default: precompile.default_workers())")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    from alcop_triton.autotune.precompile import default_workers

    workers = args.workers or default_workers()
    rows: list[dict[str, Any]] = []
    for module in ("", "torch", "triton", "torch, triton", "alcop_triton.cli"):
        med, times = _median(lambda: _import_s(module), args.reps)
        rows.append({"what": f"import {module}" if module else "python -c pass", "s": med, "tries": times})
    cases = (("measurer alone", True, False), (f"compile pool alone ({workers} workers)", False, True),
             (f"measurer and compile pool ({workers} workers)", True, True))
    for label, measurer, pool in cases:
        tries = [_helpers(workers, measurer, pool) for _ in range(args.reps)]
        for key in tries[0]:
            rows.append({"what": f"{label}: {key.replace('_', ' ')}", "s": statistics.median(t[key] for t in tries),
                         "tries": [t[key] for t in tries]})
    meta = probe_io.run_meta(TIMER) | {"cpus": os.cpu_count(), "workers": workers}
    lines = [f"# Where a tuning process's start goes ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['cpus']} CPU cores, {meta['date']}. "
             f"Timer: {TIMER}. Script: `benchmarks/probes/tune_start.py` (its docstring names the rows).", "",
             "| what | s | tries |", "|---|---|---|"]
    lines += [f"| {r['what']} | {r['s']:.2f} | {', '.join(f'{t:.2f}' for t in r['tries'])} |" for r in rows]
    probe_io.write(str(args.out), "tune_start", meta, rows, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

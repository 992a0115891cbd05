"""Inductor max-autotune compile time, as the suite used to schedule it and as it schedules it now.

    python benchmarks/probes/inductor_compile.py OUT [--budget-s 170]

For three suite GEMMs (fp16, ``nt``), each way runs in a process of its own with empty Inductor
and Triton caches, so every compile is a cold start:

* ``before``: the suite's former setup: ``torch.compile(mode="max-autotune-no-cudagraphs")`` with
  Triton GEMM templates only, Inductor's compile worker pool started lazily by the first compile
  and shut down 60 s after each compile (Inductor's defaults).
* ``warm``: ``suite.inductor_setup``: the same search, the worker pool started and waited for
  once (its start-up time reported apart), never shut down; a code object per workload.
* ``warm+pretune``: as ``warm``, after one graph holding the three GEMMs was compiled first
  (``suite.pretune_inductor``; its time reported apart and shared out).

Per GEMM: the first call's wall time (compile + autotune), how many GEMMs had their template choices
precompiled during it (0: all timings came from the autotune cache), the config Inductor chose (read
from the generated code) and that kernel's time under a CUDA graph
(``triton.testing.do_bench_cudagraph``, median). The chosen kernels of the three ways should take
the same time within noise. ``--budget-s`` bounds the whole probe: ``before`` runs last with what is
left, and a way that runs out of time is reported as such. Writes ``OUT/inductor_compile.json`` and
``OUT/inductor_compile.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parents[2])]   # benchmarks/ (suite) and the repository (alcop_triton)
import suite  # noqa: E402  (benchmarks/suite.py)

SHAPES = (("matmul", (1024, 768, 768)), ("matmul", (4096, 64, 4096)), ("bmm", (12, 512, 512, 64)))
WAYS = ("warm", "warm+pretune", "before")
TIMER = "kernel under a CUDA graph, triton.testing.do_bench_cudagraph (median)"
CONFIG_RE = re.compile(r"(BLOCK_[MNK])\s*:\s*tl\.constexpr\s*=\s*(\d+)|(num_stages|num_warps)=(\d+)")


def chosen_config(sources: list[str]) -> str:
    """BLOCK_M/N/K, num_stages and num_warps of the template kernel in Inductor's generated code."""
    found: dict[str, str] = {}
    for src in sources:
        for m in CONFIG_RE.finditer(src):
            key, val = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            found.setdefault(key, val)
    return ", ".join(f"{k}={found[k]}" for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps")
                     if k in found) or "no template kernel found"


def cases() -> list[suite.Case]:
    return [suite.Case("probe", op, shape, "nt", "suite shape") for op, shape in SHAPES]


def worker(way: str, out: Path) -> None:
    """One way, in this process: compile and time every shape, writing results as they come."""
    import torch
    import triton.testing
    from torch._inductor.utils import run_and_get_code

    res: dict[str, Any] = {"way": way, "shapes": []}
    if way == "before":
        import torch._inductor.config as ic

        ic.max_autotune_gemm_backends = "TRITON"
        ic.max_autotune_conv_backends = "TRITON"
    else:
        t0 = time.perf_counter()
        res["settings"] = dict(suite.inductor_setup(os.environ["TORCHINDUCTOR_CACHE_DIR"], warm_pool=True))
        res["setup_s"] = time.perf_counter() - t0
    if way == "warm+pretune":
        res["pretune_s"] = suite.pretune_inductor(cases(), "cuda")
    out.write_text(json.dumps(res))
    for case in cases():
        a, b = suite.make_inputs(case, "cuda")
        op = suite.torch_fn(case)
        if way == "before":
            def product(*args: Any) -> Any:
                return op(*args)
            fn = torch.compile(product, mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=True)
        else:
            fn = suite.inductor_compile(op)
        before = suite.precompile_count()
        t0 = time.perf_counter()
        result, sources = run_and_get_code(fn, a, b)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        err = suite.rel_error(result, suite.reference(case, (a, b)))
        ms = float(triton.testing.do_bench_cudagraph(lambda: fn(a, b), rep=100, return_mode="median"))
        res["shapes"].append({"id": case.id, "first_call_s": first, "gemms_precompiled": suite.precompile_count() - before,
                              "config": chosen_config(sources), "graph_ms": ms, "max_rel_err": err})
        out.write_text(json.dumps(res))


def run_way(way: str, seconds: float) -> dict[str, Any]:
    """The way in a fresh process with empty caches, stopped after ``seconds``."""
    tmp = Path(tempfile.mkdtemp(prefix="inductor_probe_"))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"), "TRITON_CACHE_DIR": str(tmp / "triton")}
    part = tmp / "result.json"
    t0 = time.perf_counter()
    # A session of its own, so that a way stopped at the budget takes its compile workers with it.
    proc = subprocess.Popen([sys.executable, str(HERE), "--worker", way, str(part)], env=env, start_new_session=True)
    try:
        rc = proc.wait(timeout=max(seconds, 1))
        status = "done" if rc == 0 else f"failed (exit {rc})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = f"stopped after {seconds:.0f} s (budget)"
    res = json.loads(part.read_text()) if part.is_file() else {"way": way, "shapes": []}
    res.update(status=status, process_s=time.perf_counter() - t0)
    return res


def markdown(meta: dict[str, Any], ways: list[dict[str, Any]]) -> str:
    out = [f"# Inductor max-autotune compile time ({meta['device']})", "",
           f"Produced by `benchmarks/probes/inductor_compile.py`; torch {meta['torch']}, Triton {meta['triton']}; "
           f"{meta['cpus']} CPU cores; date {meta['date']}. Compile time: wall clock of the first call (compile + "
           f"autotune), cold caches. Kernel time: {meta['timer']}.", "",
           "| way | status | process s | pool start s | pretune graph s | GEMM | first call s | GEMMs precompiled | "
           "chosen config | kernel ms | max rel err |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in ways:
        head = (f"| {w['way']} | {w['status']} | {w['process_s']:.1f} | {_s(w.get('setup_s'))} | "
                f"{_s(w.get('pretune_s'))} |")
        if not w["shapes"]:
            out.append(head + " - | - | - | - | - | - |")
        for s in w["shapes"]:
            out.append(f"{head} {s['id']} | {s['first_call_s']:.1f} | {s['gemms_precompiled']} | {s['config']} | "
                       f"{s['graph_ms']:.4f} | {s['max_rel_err']:.1e} |")
            head = "| | | | | |"
    base = {s["id"]: s["graph_ms"] for w in ways if w["way"] == "before" for s in w["shapes"]}
    for w in ways:
        ratios = [f"{s['id']}: {s['graph_ms'] / base[s['id']]:.3f}" for s in w["shapes"] if s["id"] in base]
        if w["way"] != "before" and ratios:
            out += ["", f"Kernel time of `{w['way']}` over `before`'s (same timer): " + "; ".join(ratios) + "."]
    return "\n".join(out) + "\n"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="output directory (inductor_compile.json, inductor_compile.md)")
    ap.add_argument("--budget-s", type=float, default=170.0, help="wall-clock bound of the whole probe")
    ap.add_argument("--worker", nargs=2, metavar=("WAY", "JSON"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker(a.worker[0], Path(a.worker[1]))
        return 0
    if not a.out:
        ap.error("OUT is required")
    import torch
    import triton

    if not torch.cuda.is_available():
        print("inductor_compile: no CUDA device", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    ways = []
    for way in WAYS:
        left = a.budget_s - (time.perf_counter() - t0)
        # the new ways get a fair part each; ``before`` (possibly the slowest) gets what is left
        ways.append(run_way(way, left if way == "before" else min(left, a.budget_s / 3.5)))
        print(json.dumps(ways[-1]), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cpus": os.cpu_count(), "date": _dt.date.today().isoformat(), "timer": TIMER, "shapes": [c.id for c in cases()]}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "inductor_compile.json").write_text(json.dumps({"meta": meta, "ways": ways}, indent=1))
    (out / "inductor_compile.md").write_text(markdown(meta, ways))
    print((out / "inductor_compile.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GEMMs inside ``torch.compile``: per GEMM shape of a workload set (default: the LLM and vision set
``benchmarks/workloads/models.json``), the product compiled three ways and timed alike:

* ``default``: ``torch.compile(f)``;
* ``max_autotune``: ``torch.compile(f, mode="max-autotune-no-cudagraphs")`` (Inductor's Triton GEMM search);
* ``alcop``: ``alcop_triton.compile(f)`` (default mode; alcop's op where the records show it faster,
  ``docs/compile.md``).

``f(a, b)`` is ``torch.matmul(a, b)`` for a matmul case and ``linear`` for an ``nt`` one (``F.linear(a,
b.t())``: what ``nn.Linear`` calls), each traced from a code object of its own so no compiled graph is
shared. Reported per variant: the ``GRAPH`` timer (``triton.testing.do_bench_cudagraph``, median), the
first call's seconds (trace, compile and, for max-autotune, its search; Inductor's caches in a fresh
directory per run), whether alcop's op is in the generated code, and the error against float32 torch.

    python benchmarks/compile_gemm.py --out results/compile_gemm_h200     # on a GPU
    python benchmarks/compile_gemm.py --set smoke --limit 2 --backend aot_eager --device cpu --out /tmp/x
        # the plumbing on a CPU (Triton's interpreter; nothing measured)

Writes ``compile_gemm.json`` (run metadata, one row per case and variant) and ``compile_gemm.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import suite  # noqa: E402
import timing  # noqa: E402

VARIANTS = ("default", "max_autotune", "alcop")


def product_fn(case: suite.Case) -> Callable[..., Any]:
    """The traced function of a case, from a code object of its own (Dynamo caches per code object)."""
    import torch
    import torch.nn.functional as F

    linear = case.op == "matmul" and case.layout == "nt"

    def product(a: Any, b: Any) -> Any:
        return F.linear(a, b.t()) if linear else torch.matmul(a, b)
    name = f"compiled_{case.op}_{'x'.join(map(str, case.shape))}_{case.layout}"
    code = product.__code__.replace(co_name=name)
    return types.FunctionType(code, product.__globals__, name, product.__defaults__, product.__closure__)


def compiled(variant: str, fn: Callable[..., Any], backend: str) -> Callable[..., Any]:
    import torch

    import alcop_triton

    if backend != "inductor":
        kwargs: dict[str, Any] = {"backend": backend}
    elif variant == "max_autotune":
        kwargs = {"mode": "max-autotune-no-cudagraphs"}
    else:
        kwargs = {}
    if variant == "alcop":
        return alcop_triton.compile(fn, fullgraph=True, dynamic=False, **kwargs)
    return torch.compile(fn, fullgraph=True, dynamic=False, **kwargs)


def measure(case: suite.Case, variant: str, device: str, backend: str) -> dict[str, Any]:
    import torch

    row: dict[str, Any] = {"case": case.id, "reason": case.reason, "variant": variant}
    a, b = suite.make_inputs(case, device)
    fn = compiled(variant, product_fn(case), backend)
    try:
        t0 = time.perf_counter()
        if backend == "inductor":
            from torch._inductor.utils import run_and_get_code
            out, code = run_and_get_code(fn, a, b)
            row["alcop_in_graph"] = suite.alcop_calls(code) > 0
        else:
            out = fn(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        row["compile_s"] = round(time.perf_counter() - t0, 3)
        ref = torch.matmul(a.float(), b.float())
        row["rel_error"] = float((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
        if device == "cuda":
            row["ms"] = timing.graph_ms(lambda: fn(a, b))
            row["tflops"] = case.flops() / row["ms"] / 1e9
    except Exception as exc:  # one case's failure is a row of the report, not the end of the run
        row["error"] = suite.error_text(exc)
    return row


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_case.setdefault(r["case"], {})[r["variant"]] = r
    lines = [f"# GEMMs inside torch.compile: {meta['device']}", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, alcop {meta['alcop']}; {meta['date']}; "
             f"timer: {timing.GRAPH}; compile seconds: first call, fresh Inductor cache.", "",
             f"Command: `{meta.get('command', 'python benchmarks/compile_gemm.py')}`", "",
             "| case | default ms | max-autotune ms | alcop ms | speed-up vs default | speed-up vs max-autotune "
             "| compile s (default / max-autotune / alcop) | alcop in graph |",
             "|---|---|---|---|---|---|---|---|"]
    ratios: dict[str, list[float]] = {"default": [], "max_autotune": []}
    for case, v in by_case.items():
        ms = {k: v.get(k, {}).get("ms") for k in VARIANTS}
        cs = " / ".join(str(v.get(k, {}).get("compile_s", "-")) for k in VARIANTS)
        cells = []
        for base in ("default", "max_autotune"):
            if ms[base] and ms["alcop"]:
                ratios[base].append(ms[base] / ms["alcop"])
                cells.append(f"{ms[base] / ms['alcop']:.3f}x")
            else:
                cells.append("-")
        shown = [f"{m:.4f}" if m else v.get(k, {}).get("error", "-")[:40] for k, m in ms.items()]
        lines.append(f"| {case} | {' | '.join(shown)} | {' | '.join(cells)} | {cs} | "
                     f"{v.get('alcop', {}).get('alcop_in_graph', '-')} |")
    for base, xs in ratios.items():
        if xs:
            geo = math.exp(sum(map(math.log, xs)) / len(xs))
            lines.append(f"\nSpeed of compile+alcop over {base.replace('_', '-')} (time ratio, geomean over "
                         f"{len(xs)} shapes): {geo:.3f}x")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="directory for compile_gemm.json and compile_gemm.md")
    p.add_argument("--set", default="models", help="workload set of benchmarks/workloads (GEMMs only are run)")
    p.add_argument("--limit", type=int, default=None, help="the first N GEMM cases only")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--backend", default="inductor", help="torch.compile backend (aot_eager: CPU plumbing check)")
    a = p.parse_args(argv)
    if a.device == "cpu" and a.backend == "inductor":
        p.error("--device cpu runs alcop's kernels in Triton's interpreter, which Inductor cannot compile: "
                "pass --backend aot_eager")
    if a.backend == "inductor":  # Inductor's and Triton's caches fresh: compile seconds include the search
        cache = tempfile.mkdtemp(prefix="compile_gemm_inductor_")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    import torch

    cases = [c for c in suite.load_set(a.set) if c.gemm][:a.limit]
    meta = suite.run_meta(a.device) | {"date": time.strftime("%Y-%m-%d"), "timer": timing.GRAPH,
                                       "backend": a.backend, "set": a.set,
                                       "command": "python benchmarks/compile_gemm.py " + " ".join(sys.argv[1:])}
    rows = []
    for case in cases:
        for variant in VARIANTS:
            torch._dynamo.reset()
            rows.append(measure(case, variant, a.device, a.backend))
            print(json.dumps(rows[-1]), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "compile_gemm.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (a.out / "compile_gemm.md").write_text(markdown(meta, rows))
    print(f"wrote {a.out / 'compile_gemm.json'} and {a.out / 'compile_gemm.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Programmatic dependent launch: does a GEMM launched to overlap its predecessor's tail run faster?

    python benchmarks/probes/pdl.py OUT_DIR [--shapes all|weak]

Hopper can start a kernel's programs while the kernel before it on the stream is still finishing
(``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``, Triton's ``launch_pdl``); the started
programs must wait (``griddepcontrol.wait``, Triton's ``gdc_wait``) before touching memory the
predecessor may write. For each ALCOP suite GEMM, the kernel of the config the dispatcher picks is
timed as generated, and again from the same source with ``gdc_wait()`` as its first statement and
launched with ``launch_pdl=True`` ("wait"; the kernel as generated since the library launches this way on
Hopper), with ``gdc_launch_dependents()`` after the wait as well ("wait+trigger": the next kernel may start as
soon as every program of this one has started), or before the epilogue ("wait+late trigger"). Both
timers: the suite's graph timer, and eager calls after an L2 flush (each call's predecessor is the
flush). Outputs are checked against the generated kernel's. Writes ``OUT_DIR/pdl.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "benchmarks"))

from probe_io import cold_calls, publish, run_meta, table_head  # noqa: E402

EAGER_ROUNDS = 200
TIMER = ("graph: triton.testing.do_bench_cudagraph on one set of inputs (the suite's graph timer); eager: CUDA "
         f"events around one launch after an L2 flush, host synchronised first, variants in turns (probe_io.cold_calls, "
         f"median of {EAGER_ROUNDS})")
WEAK = {(4096, 64, 4096), (4096, 64, 512), (50176, 128, 64), (1024, 2304, 768), (12544, 256, 1024),
        (3136, 512, 2048), (512, 3072, 1024), (12544, 256, 128), (3136, 512, 1024), (512, 2304, 768)}
"""(M, N, K) of the suite GEMMs furthest below cuBLAS in ``results/callpath_final_h100/suite`` (graph)."""


VARIANTS: dict[str, str | None] = {"wait": None, "wait+trigger": "start", "wait+late trigger": "epilogue"}
"""Each variant's ``gdc_launch_dependents()``: none, first after the wait, or before the epilogue (a persistent
kernel's epilogue is inside its tile loop, where the first call would trigger as early as at the start: none)."""
EPILOGUE_MARKS = ("# epilogue, fused into the store", "# split-K: the partial tile goes to")


def pdl_source(src: str, trigger: str | None) -> str:
    """``src`` (a generated kernel module) with ``gdc_wait()`` first in the kernel's body (unless it has it),
    and ``gdc_launch_dependents()`` where ``trigger`` says."""
    lines = src.splitlines()
    at = next(i for i, s in enumerate(lines) if s.startswith("def "))
    body = [] if any(s.strip() == "gdc_wait()" for s in lines) else ["    gdc_wait()  # nothing above reads or writes global memory"]
    if trigger == "start":
        body.append("    gdc_launch_dependents()")
    elif trigger == "epilogue" and not any(s.strip().startswith("# persistent:") for s in lines):
        mark = next(i for i, s in enumerate(lines) if s.strip().startswith(EPILOGUE_MARKS))
        indent = lines[mark][:len(lines[mark]) - len(lines[mark].lstrip())]
        lines.insert(mark, indent + "gdc_launch_dependents()  # the next kernel may start during this epilogue")
    imports = ["from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait"]
    first_import = next(i for i, s in enumerate(lines) if s.startswith("import triton"))
    out = lines[:first_import] + imports + lines[first_import:at + 1] + body + lines[at + 1:]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--shapes", choices=("all", "weak"), default="all")
    a = ap.parse_args(argv)

    import torch
    from triton.testing import do_bench_cudagraph

    import alcop_triton as at
    from alcop_triton.choose_config import choose_config
    from alcop_triton.runtime import load_kernel
    from kernels.runner import make_runner
    from suite import load_set

    dev = torch.device("cuda")
    rows: list[dict[str, Any]] = []
    for case in load_set("alcop"):
        if a.shapes == "weak" and tuple(case.shape) not in WEAK:
            continue
        wl = at.Workload(case.op, tuple(case.shape), "float16", "nt")
        cfg = choose_config(dev, lambda wl=wl: wl)
        runner = make_runner(wl, cfg, "cuda")
        inputs = runner.inputs(0)
        launch, out = runner.bind(inputs)
        assert launch is not None
        src = Path(launch.jit.fn.__code__.co_filename).read_text()
        name = launch.jit.fn.__name__
        want = runner.run(inputs).clone()
        x0, x1 = inputs
        row: dict[str, Any] = {"workload": case.id, "config": str(cfg)}
        variants = {"generated": launch}
        for tag, trigger in VARIANTS.items():
            fn, _ = load_kernel(pdl_source(src, trigger), name)
            variants[tag] = (lambda fn=fn: fn[launch.grid](*launch.args, **(launch.kwargs | {"launch_pdl": True})))
        for tag, call in variants.items():
            out.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            row[f"{tag}_equal"] = bool(torch.equal(out, want))
            row[f"{tag}_graph_us"] = 1e3 * do_bench_cudagraph(call)
        variants["torch"] = (lambda: torch.bmm(x0, x1)) if case.op == "bmm" else (lambda: torch.matmul(x0, x1))
        row["torch_graph_us"] = 1e3 * do_bench_cudagraph(variants["torch"])
        row |= {f"{r['row']}_eager_us": r["events_us"] for r in cold_calls(variants, EAGER_ROUNDS)}
        rows.append(row)
        print(row, flush=True)
    meta = run_meta(TIMER)
    lines = table_head("Programmatic dependent launch of the dispatched GEMM kernels", meta,
                       "fp16, B stored N x K, ALCOP dense + bmm suite; µs; 'equal': output bit-equal to the "
                       "generated kernel's.",
                       ["workload", "cuBLAS graph", "generated", *VARIANTS, "cuBLAS eager", "generated eager",
                        *(f"{t} eager" for t in VARIANTS), "equal"])
    tags = ("generated", *VARIANTS)
    for r in rows:
        eq = all(r[f"{t}_equal"] for t in VARIANTS)
        lines.append(f"| {r['workload']} | {r['torch_graph_us']:.2f} | "
                     + " | ".join(f"{r[f'{t}_graph_us']:.2f}" for t in tags) + f" | {r['torch_eager_us']:.2f} | "
                     + " | ".join(f"{r[f'{t}_eager_us']:.2f}" for t in tags) + f" | {'yes' if eq else 'NO'} |")

    def gm(key: str, timer: str) -> float:
        import math
        return math.exp(sum(math.log(r[f"torch_{timer}_us"] / r[f"{key}_{timer}_us"]) for r in rows) / len(rows))
    lines += ["", "Geomean cuBLAS / alcop: " + ", ".join(
        f"{t} {timer} {gm(t, timer):.3f}x" for timer in ("graph", "eager") for t in tags)]
    return publish(a.out_dir, "pdl", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main())

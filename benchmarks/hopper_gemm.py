"""Ablation of ALCOP's three pipeline levels on Hopper: the generated Gluon sm90 GEMM kernels against cuBLAS
(torch.matmul) and alcop's Triton lowering (alcop_triton.matmul), under CUDA graphs.

    python benchmarks/hopper_gemm.py --out DIR [--shapes MxNxK[:LAYOUT],...|heldout] [--dtypes float16,bfloat16]
                                     [--level-sets 1,1+2,1+2+3] [--timeout SECONDS] [--dry-run]

Shapes default to the GEMMs of benchmarks/workloads/models.json with M >= 512 (their layouts) in each
dtype, plus 8192^3 bf16 ("nn"). Per level set a few configs (``LEVEL_SETS``), each planned for the shape
(``alcop_triton.hopper.plan``: clamps and their reasons are recorded); every kernel is checked against
float64 first (a wrong one is reported and not timed), then timed with ``triton.testing.do_bench_cudagraph``
(median). Writes DIR/hopper_gemm.{json,md} naming device, versions, date, timer and command.

Every group of cases (the baselines of a dtype; one requested config in one dtype over the shapes) runs in
a child process, one result line per case: a case with no result within ``--timeout`` seconds (default 60;
a kernel whose barriers deadlock spins forever) has its process killed, a case whose process dies is
recorded with the exit code and the end of its stderr; either way the case is a failed row (never chosen,
never timed) and the group carries on in a fresh process.

``--dry-run`` (no GPU): generate every planned kernel and compile it for sm90 on the CPU (wgmma, TMA,
shared memory), nothing timed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import queue
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from alcop_triton.hopper import HopperConfig, plan  # noqa: E402

LEVEL_SETS: dict[str, list[HopperConfig]] = {
    # level 1 alone: the TMA ring, each wgmma waited for at once, one consumer, a program per tile
    "1": [HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=0, stages=4),
          HopperConfig(block_m=64, block_n=256, warp_specialize=False, persistent=False, wgmma_depth=0, stages=4)],
    # + level 2: wgmma groups left in flight (1, and 2 where the ring allows), copies in line or by a loader warp
    "1+2": [HopperConfig(warp_specialize=False, persistent=False, wgmma_depth=1, stages=4),
            HopperConfig(warp_specialize=True, persistent=False, wgmma_depth=1, stages=4),
            HopperConfig(warp_specialize=True, persistent=False, wgmma_depth=2, stages=4)],
    # + level 3: persistent, two consumers in ping-pong (or cooperative on a wider tile), subtiled epilogue;
    # a deeper ring where the shared memory has room for it
    "1+2+3": [HopperConfig(consumers=2, policy="pingpong", stages=4, wgmma_depth=1, epilogue_subtile=2),
              HopperConfig(consumers=2, policy="pingpong", stages=6, wgmma_depth=1, epilogue_subtile=2),
              HopperConfig(block_n=256, consumers=2, policy="cooperative", stages=3, wgmma_depth=1,
                           epilogue_subtile=2),
              HopperConfig(block_n=256, consumers=2, policy="cooperative", stages=4, wgmma_depth=1,
                           epilogue_subtile=4),
              HopperConfig(block_m=256, consumers=2, policy="cooperative", stages=4, wgmma_depth=1,
                           epilogue_subtile=2)],
}
BIG = "8192x8192x8192:nn"


def default_shapes() -> list[str]:
    data = json.loads((ROOT / "benchmarks" / "workloads" / "models.json").read_text())
    return [f"{'x'.join(map(str, w['shape']))}:{w['layout']}" for w in data["workloads"]
            if w["op"] == "matmul" and w["shape"][0] >= 512]


def heldout_shapes() -> list[str]:
    """The held-out GEMMs (``benchmarks/workloads/heldout.json``: in no table, fixed before any result)."""
    data = json.loads((ROOT / "benchmarks" / "workloads" / "heldout.json").read_text())
    return [f"{'x'.join(map(str, w['shape']))}:{w['layout']}" for w in data["workloads"] if w["op"] == "matmul"]


def parse_shape(text: str) -> tuple[int, int, int, str]:
    dims, _, layout = text.partition(":")
    m, n, k = (int(v) for v in dims.split("x"))
    layout = layout or "nt"
    if layout not in ("nn", "nt", "tn", "tt") or min(m, n, k) < 1:
        raise SystemExit(f"--shapes: {text!r}: MxNxK with positive sizes, optionally :nn/:nt/:tn/:tt")
    return m, n, k, layout


def cases(shapes: list[str], dtypes: list[str], big: bool) -> list[tuple[int, int, int, str, str]]:
    out = [(*parse_shape(s), d) for s in shapes for d in dtypes]
    if big and "bfloat16" in dtypes:
        out.append((*parse_shape(BIG), "bfloat16"))
    return out


def operands(m: int, n: int, k: int, layout: str, dtype: str) -> tuple[Any, Any]:
    import torch
    g = torch.Generator(device="cuda").manual_seed(m * 31 + n * 7 + k)
    dt = getattr(torch, dtype)
    scale = k ** -0.25
    a = (torch.randn(k, m, device="cuda", generator=g) * scale).to(dt).t() if layout[0] == "t" else \
        (torch.randn(m, k, device="cuda", generator=g) * scale).to(dt)
    b = (torch.randn(n, k, device="cuda", generator=g) * scale).to(dt).t() if layout[1] == "t" else \
        (torch.randn(k, n, device="cuda", generator=g) * scale).to(dt)
    return a, b


ROW = "@@hopper_gemm_row "
"""A worker's result lines start with this (anything else it prints is passed through)."""
STARTUP_S = 90.0
"""Allowance for a worker's start (torch, the CUDA context) on top of its first case's timeout."""


# ------------------------------------------------------------------------------------------ the worker
def _dry_case(m: int, n: int, k: int, layout: str, spec: dict[str, Any], seen: dict[Any, Any]) -> dict[str, Any]:
    from alcop_triton.hopper.sm90_check import compile_sm90
    p = plan(m, n, k, HopperConfig.from_dict(spec["config"]))
    key = (p.config, spec["dtype"], layout)
    if key not in seen:
        seen[key] = compile_sm90(p.config, spec["dtype"], layout)
    got = seen[key]
    return {"config": p.config.tag(), "notes": list(p.notes), "kernel": got["name"], "wgmma": got["wgmma"],
            "tma": got["tma"], "shared": got["shared"]}


def _baseline_case(m: int, n: int, k: int, layout: str, dtype: str) -> dict[str, Any]:
    import torch

    import alcop_triton as at
    a, b = operands(m, n, k, layout, dtype)
    ref = a.double() @ b.double()
    torch_ms = _bench(lambda: torch.matmul(a, b))
    alcop_err = _rel_err(at.matmul(a, b), ref)
    alcop_ms = _bench(lambda: at.matmul(a, b))
    return {"torch_ms": torch_ms, "alcop_triton_ms": alcop_ms, "alcop_triton_rel_err": alcop_err,
            "alcop_triton_vs_torch": torch_ms / alcop_ms, "dispatched": _dispatched(a, b)}


def _dispatched(a: Any, b: Any) -> str:
    """The config ``alcop_triton.matmul(a, b)`` ran and where dispatch found it (the row's explanation)."""
    from alcop_triton.autotune.dispatch import dispatcher
    from alcop_triton.choose_config import device_index, gpu_spec
    from alcop_triton.kernels.matmul import aligned_workload, workload_of

    d = dispatcher().decide(aligned_workload(workload_of(a, b)), gpu_spec(device_index(a.device)))
    return f"{d.config} ({d.source})"


def _config_case(m: int, n: int, k: int, layout: str, spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    from alcop_triton.hopper.launch import matmul as hopper_matmul
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    p = plan(m, n, k, HopperConfig.from_dict(spec["config"]), sms=sms)
    row: dict[str, Any] = {"config": p.config.tag(), "notes": list(p.notes)}
    a, b = operands(m, n, k, layout, spec["dtype"])
    try:
        out = torch.full((m, n), float("nan"), dtype=a.dtype, device="cuda")
        hopper_matmul(a, b, config=p.config, out=out)
        torch.cuda.synchronize()
        row["rel_err"] = e = _rel_err(out, a.double() @ b.double())
        if not e <= 1e-2:  # NaN included
            row["error"] = f"relative error {e:.3g} > 1e-2: not timed"
        else:
            ms = _bench(lambda: hopper_matmul(a, b, config=p.config, out=out))
            row.update(ms=ms, tflops=2.0 * m * n * k / ms / 1e9)
    except Exception as exc:  # a config that fails to compile or launch is recorded, not chosen
        row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return row


def _bench(fn: Any) -> float:
    import triton
    return float(triton.testing.do_bench_cudagraph(fn, rep=100))


def _rel_err(out: Any, ref: Any) -> float:
    return float(((out.double() - ref).norm() / ref.norm()).item())


def worker() -> int:
    """One group's cases (a JSON spec on stdin), each result one ``ROW`` line on stdout as soon as it is known."""
    spec = json.loads(sys.stdin.read())
    seen: dict[Any, Any] = {}
    for m, n, k, layout in spec["cases"]:
        if spec["kind"] == "dry":
            res = _dry_case(m, n, k, layout, spec, seen)
        elif spec["kind"] == "baseline":
            res = _baseline_case(m, n, k, layout, spec["dtype"])
        else:
            res = _config_case(m, n, k, layout, spec)
        print(ROW + json.dumps({"case": [m, n, k, layout], **res}), flush=True)
    return 0


# ------------------------------------------------------------------------------------------ the parent
def _valid(rec: Any, case: list[Any]) -> bool:
    """A worker's line, validated before use: an object naming the case expected next, JSON values only."""
    return isinstance(rec, dict) and rec.get("case") == case and all(isinstance(k, str) for k in rec)


def run_group(spec: dict[str, Any], timeout: float, cmd: list[str] | None = None) -> list[dict[str, Any]]:
    """The results of ``spec``'s cases, in order, each computed in a child process: a case with no result
    within ``timeout`` seconds (a kernel that hangs) gets its child killed, a case whose child dies (a
    crash, an illegal address) is recorded as such; either way the case gets an ``error`` (never chosen,
    never timed) and the rest of the group carries on in a fresh child."""
    cmd = cmd or [sys.executable, str(Path(__file__).resolve()), "--worker"]
    todo = [list(c) for c in spec["cases"]]
    results: list[dict[str, Any]] = []
    while todo:
        with tempfile.TemporaryFile(mode="w+") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                    cwd=ROOT, start_new_session=True)
            lines: queue.Queue[str | None] = queue.Queue()

            def pump(stream: Any = proc.stdout) -> None:
                for line in stream:
                    lines.put(line)
                lines.put(None)

            threading.Thread(target=pump, daemon=True).start()
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(dict(spec, cases=todo)))
            proc.stdin.close()
            wait = timeout + STARTUP_S
            try:
                while todo:
                    try:
                        line = lines.get(timeout=wait)
                    except queue.Empty:
                        results.append({"case": todo.pop(0), "error": f"timed out: no result within {timeout:g} s "
                                        "(a kernel that hangs?); its process was killed"})
                        break
                    if line is None:
                        proc.wait()
                        err.seek(0)
                        tail = " | ".join(err.read().strip().splitlines()[-3:])[-400:]
                        results.append({"case": todo.pop(0), "error": f"crashed: its process exited with code "
                                        f"{proc.returncode}: {tail}"})
                        break
                    if not line.startswith(ROW):
                        print(line, end="", flush=True)
                        continue
                    try:
                        rec = json.loads(line[len(ROW):])
                    except json.JSONDecodeError:
                        rec = None
                    if not _valid(rec, todo[0]):
                        results.append({"case": todo.pop(0), "error": f"malformed worker record: {line[:200]!r}"})
                        break
                    results.append(rec)
                    todo.pop(0)
                    wait = timeout
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return results


def _groups(todo: list[tuple[int, int, int, str, str]], sets: list[str], kind: str) -> list[dict[str, Any]]:
    """Baselines per dtype, then one group per (level set, requested config, dtype), each over its shapes."""
    out: list[dict[str, Any]] = []
    dtypes = sorted({d for *_, d in todo})
    if kind == "gpu":
        out += [{"kind": "baseline", "dtype": d, "cases": [[m, n, k, lay] for m, n, k, lay, dd in todo if dd == d]}
                for d in dtypes]
    for level in sets:
        for req in LEVEL_SETS[level]:
            out += [{"kind": "dry" if kind == "dry" else "config", "level": level, "config": req.to_dict(), "dtype": d,
                     "cases": [[m, n, k, lay] for m, n, k, lay, dd in todo if dd == d]} for d in dtypes]
    return out


def run_all(todo: list[tuple[int, int, int, str, str]], sets: list[str], timeout: float, dry: bool
            ) -> list[dict[str, Any]]:
    """Every (shape, dtype, level set, config) row, each group of cases run apart (``run_group``)."""
    base: dict[tuple[Any, ...], dict[str, Any]] = {}
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for g in _groups(todo, sets, "dry" if dry else "gpu"):
        for rec in run_group(g, timeout):
            case = tuple(rec.pop("case"))
            if g["kind"] == "baseline":
                base[case + (g["dtype"], )] = rec
            else:
                found[case + (g["dtype"], g["level"], HopperConfig.from_dict(g["config"]).tag())] = rec
    rows = []
    for m, n, k, layout, dtype in todo:
        b = base.get((m, n, k, layout, dtype), {})
        if not sets and not dry:  # the baselines alone: cuBLAS and the lowering alcop dispatches
            row = {"shape": [m, n, k], "layout": layout, "dtype": dtype, "levels": "none", "requested": "",
                   "config": "as dispatched", "notes": [], **b}
            if "dispatched" in row:
                row["config"] = f"as dispatched: {row['dispatched']}"
                row["ms"], row["vs_torch"] = row["alcop_triton_ms"], row["alcop_triton_vs_torch"]
                row["tflops"] = 2 * m * n * k / row["ms"] * 1e-9
            print(f"{m}x{n}x{k}:{layout} {dtype} alcop_triton.matmul: "
                  + (f"{row['alcop_triton_vs_torch']:.3f}x torch" if "alcop_triton_vs_torch" in row
                     else row.get("error", "not timed")), flush=True)
            rows.append(row)
        for level in sets:
            for req in LEVEL_SETS[level]:
                rec = found[(m, n, k, layout, dtype, level, req.tag())]
                row = {"shape": [m, n, k], "layout": layout, "dtype": dtype, "levels": level, "requested": req.tag(),
                       "config": plan(m, n, k, req).config.tag(), "notes": [], **b, **rec}
                if "error" in b and "error" not in row:
                    row["error"] = f"baseline: {b['error']}"
                if "ms" in row and "torch_ms" in row:
                    row["vs_torch"] = row["torch_ms"] / row["ms"]
                if dry:
                    row.setdefault("wgmma", False)
                    row.setdefault("tma", False)
                    row.setdefault("shared", 0)
                    row.setdefault("kernel", "")
                    note = row.get("error") or f"wgmma={row['wgmma']} tma={row['tma']} shared={row['shared']}"
                else:
                    note = (f"{row['ms']:.4f} ms, {row['vs_torch']:.3f}x torch" if "vs_torch" in row
                            else row.get("error", "not timed"))
                print(f"{m}x{n}x{k}:{layout} {dtype} [{level}] {row['config']}: {note}", flush=True)
                rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]], sets: list[str]) -> list[dict[str, Any]]:
    """Per (dtype, level set): geomean and min over shapes of the best config's ratio to torch, and the
    gain of each level set over the one before it."""
    out = []
    for dtype in sorted({r["dtype"] for r in rows}):
        # alcop_triton.matmul as an untuned call dispatches it (the same value on each row of a shape)
        disp = {(tuple(r["shape"]), r["layout"]): r["alcop_triton_vs_torch"] for r in rows
                if r["dtype"] == dtype and "alcop_triton_vs_torch" in r}
        if disp:
            out.append({"dtype": dtype, "levels": "dispatched", "shapes": len(disp),
                        "geomean_vs_torch": math.exp(sum(map(math.log, disp.values())) / len(disp)),
                        "min_vs_torch": min(disp.values()), "gain_over_previous_set": None})
        prev: dict[tuple[Any, ...], float] | None = None
        for level in sets:
            best: dict[tuple[Any, ...], float] = {}
            for r in rows:
                if r["dtype"] == dtype and r["levels"] == level and "vs_torch" in r:
                    key = (tuple(r["shape"]), r["layout"])
                    best[key] = max(best.get(key, 0.0), r["vs_torch"])
            if not best:
                continue
            geo = math.exp(sum(map(math.log, best.values())) / len(best))
            gain = None
            if prev:
                common = [s for s in best if s in prev]
                if common:
                    gain = math.exp(sum(math.log(best[s] / prev[s]) for s in common) / len(common))
            out.append({"dtype": dtype, "levels": level, "shapes": len(best), "geomean_vs_torch": geo,
                        "min_vs_torch": min(best.values()), "gain_over_previous_set": gain})
            prev = best
    return out


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}x"


def write_report(rows: list[dict[str, Any]], sets: list[str], a: argparse.Namespace, argv: list[str] | None) -> None:
    """DIR/hopper_gemm.{json,md}: the rows so far, their summary, device, versions, date, timer and command."""
    import torch
    import triton

    from alcop_triton.version import __version__
    meta = {"device": "none (dry run: compiled for sm90 on the CPU)" if a.dry_run else torch.cuda.get_device_name(),
            "torch": torch.__version__, "triton": triton.__version__, "alcop_triton": __version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "timer": "none (dry run)" if a.dry_run else
            "kernel under a CUDA graph, triton.testing.do_bench_cudagraph (median), every implementation",
            "command": "python benchmarks/hopper_gemm.py " + " ".join(map(shlex.quote, argv if argv is not None
                                                                             else sys.argv[1:]))}
    summ = [] if a.dry_run else summary(rows, sets)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "hopper_gemm.json").write_text(json.dumps({"meta": meta, "summary": summ, "rows": rows}, indent=1) + "\n")
    lines = [f"# Hopper GEMM ablation: {meta['device']}", "",
             f"{meta['timer']}; torch {meta['torch']}, triton {meta['triton']}, alcop_triton {meta['alcop_triton']}, "
             f"{meta['date']}.", "", f"Command: `{meta['command']}`", ""]
    if summ:
        lines += ["| dtype | levels | shapes | geomean vs torch (best config) | min | gain over previous set |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {s['dtype']} | {s['levels']} | {s['shapes']} | {s['geomean_vs_torch']:.3f}x | "
                  f"{s['min_vs_torch']:.3f}x | {_ratio(s['gain_over_previous_set'])} |" for s in summ]
        lines += ["", "| shape | layout | dtype | levels | config | ms | TF/s | vs torch | alcop triton vs torch | note |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {'x'.join(map(str, r['shape']))} | {r['layout']} | {r['dtype']} | {r['levels']} | {r['config']} | "
                  + (f"{r['ms']:.4f} | {r['tflops']:.0f} | {r['vs_torch']:.3f}x" if "ms" in r else "| | ")
                  + f" | {_ratio(r.get('alcop_triton_vs_torch'))} | {r.get('error', '; '.join(r['notes']))} |"
                  for r in rows]
    else:
        lines += ["| shape | layout | dtype | levels | kernel | wgmma | TMA | shared B |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {'x'.join(map(str, r['shape']))} | {r['layout']} | {r['dtype']} | {r['levels']} | "
                  f"{r['kernel'] or r.get('error', '')} | {r['wgmma']} | {r['tma']} | {r['shared']} |" for r in rows]
    (out / "hopper_gemm.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for hopper_gemm.json and hopper_gemm.md")
    ap.add_argument("--shapes", default=None, help="MxNxK[:LAYOUT],... (default: models.json GEMMs with M >= 512), "
                                                   "or 'heldout': the held-out set's GEMMs")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--level-sets", default=",".join(LEVEL_SETS),
                    help="comma-separated, from " + ", ".join(LEVEL_SETS) + "; 'none': only cuBLAS and "
                         "alcop_triton.matmul as dispatched")
    ap.add_argument("--no-big", action="store_true", help=f"leave out {BIG} bf16")
    ap.add_argument("--dry-run", action="store_true", help="generate and compile for sm90 on the CPU only")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds one case (compile, float64 check, timing) may take before its process is killed "
                         "and the case recorded as failed (default 60)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        return worker()
    if not a.out:
        ap.error("--out DIR is required")
    if not a.timeout > 0:
        raise SystemExit(f"--timeout={a.timeout}: must be a positive number of seconds")
    sets = [] if a.level_sets == "none" else a.level_sets.split(",")
    bad = [s for s in sets if s not in LEVEL_SETS]
    dtypes = a.dtypes.split(",")
    if bad or any(d not in ("float16", "bfloat16") for d in dtypes):
        raise SystemExit(f"--level-sets from {list(LEVEL_SETS)}, --dtypes from float16,bfloat16; got {sets}, {dtypes}")
    shapes = heldout_shapes() if a.shapes == "heldout" else a.shapes.split(",") if a.shapes else default_shapes()
    todo = cases(shapes, dtypes, not a.no_big and a.shapes is None)
    rows: list[dict[str, Any]] = []
    # one dtype at a time, the report rewritten after each: a run stopped part way keeps what it measured
    for dtype in dtypes:
        rows += run_all([c for c in todo if c[4] == dtype], sets, a.timeout, a.dry_run)
        write_report(rows, sets, a, argv)
    failed = [r for r in rows if "error" in r or (a.dry_run and not (r["wgmma"] and r["tma"]))]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

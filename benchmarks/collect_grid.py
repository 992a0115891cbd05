"""Measure a config grid per workload on the current GPU; every record goes to a JSONL file.

    python benchmarks/collect_grid.py --suite tests/data/alcop_suite.json --ops dense,bmm \
        --grid full --out benchmarks/data/h100_wgmma.jsonl --budget-s 420

Each (shape, config) is first compiled in a pool of worker processes (bound to the shape's own
tensors, never launched; pairs sharing a kernel hit Triton's on-disk cache), then, config-major, in
this process: checked against torch on the same random inputs (output poisoned with NaN first) and
timed: 3 warm-up launches, then ``--reps`` launches each after an L2 flush, median of CUDA-event
times (``timing.EAGER_KERNEL``). torch (cuBLAS/cuDNN) is timed the same way per shape, three times, keeping the best.
Records follow docs/ARCHITECTURE.md; failures are recorded with their kind, never dropped.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

COMPILE_JOB = 8  # (workload, config) pairs per compile job

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import timing  # noqa: E402  (benchmarks/timing.py, beside this script)

GRIDS: dict[str, dict[str, Any]] = {
    # The exhaustive grid the models and tuners are evaluated against.
    "full": dict(block_m=(64, 128), block_n=(64, 128, 256), block_k=(32, 64), num_warps=(4, 8),
                 smem_stages=(1, 2, 3, 4, 5, 6, 8), reg=((1, 1), (2, 1), (2, 2)), async_copy=("pointer",)),
    # The ablation study on the Ampere-style path: same knobs, fewer tiles.
    "variants": dict(block_m=(64, 128), block_n=(64, 128), block_k=(32, 64), num_warps=(4, 8),
                     smem_stages=(1, 2, 3, 4, 6, 8), reg=((1, 1), (2, 1), (2, 2)), async_copy=("pointer",)),
    # TMA vs cp.async on the best tiles.
    "tma": dict(block_m=(128,), block_n=(128, 256), block_k=(64,), num_warps=(8,),
                smem_stages=(2, 3, 4), reg=((1, 1), (2, 1)), async_copy=("pointer", "tma")),
    # The ablation on Hopper: the tile knobs the tuner's space offers (BLOCK_K up to 128,
    # 256-wide tiles, TMA or cp.async), every variant over the same grid. Register prefetch is
    # measured on cp.async only: it stages the same sub-tiles whichever engine filled shared memory.
    # Persistent programs are measured without register prefetch (its prologue would sit inside the
    # flattened tile loop).
    # Persistent programs on convolutions (memory-bound layers with many output tiles), on the tiles
    # the conv grid found best.
    "conv_persistent": dict(block_m=(64, 128), block_n=(64, 128), block_k=(32, 64), num_warps=(4,),
                            smem_stages=(1, 2, 3, 4, 6), reg=((1, 1),), async_copy=("pointer",),
                            persistent=(False, True)),
    "ablation": dict(block_m=(64, 128), block_n=(64, 128, 256), block_k=(32, 64, 128), num_warps=(4, 8),
                     smem_stages=(1, 2, 3, 4, 5, 6, 8), reg=((1, 1), (2, 1)), async_copy=("pointer", "tma"),
                     persistent=(False, True), tma_with_reg=False),
    # The ablation grid with the ALCOP artifact's K tiles (tile_K = 16 * chunk, chunk in {2, 4} for
    # dense and {1, 2, 4, 8} for bmm), stated before its run: the ablation's acceptance read on the
    # paper's own search space rather than on the tuner's wider one.
    "alcop_space": dict(block_m=(64, 128), block_n=(64, 128, 256), block_k=(16, 32, 64, 128), num_warps=(4, 8),
                        smem_stages=(1, 2, 3, 4, 5, 6, 8), reg=((1, 1), (2, 1)), async_copy=("pointer", "tma"),
                        persistent=(False, True), tma_with_reg=False,
                        block_k_for={"matmul": (32, 64), "bmm": (16, 32, 64, 128)}),
}


def grid_configs(name: str) -> list[Any]:
    from alcop_triton.records import KernelConfig
    g = GRIDS[name]
    out = []
    for bm, bn, bk, w, s, (r, x), a, p in itertools.product(g["block_m"], g["block_n"], g["block_k"], g["num_warps"],
                                                            g["smem_stages"], g["reg"], g["async_copy"],
                                                            g.get("persistent", (False,))):
        if r > 1 and ((a == "tma" and not g.get("tma_with_reg", True)) or p):
            continue
        out.append(KernelConfig(bm, bn, bk, 8, w, s, r, x, a, p))
    return out


def workloads(suite: dict[str, Any], ops: list[str], conv_layers: int) -> list[Any]:
    from alcop_triton.records import Workload
    out = []
    if "dense" in ops:
        out += [Workload("matmul", tuple(s), "float16", "nt") for s in suite["dense"]["shapes_MNK"]]
    if "bmm" in ops:
        out += [Workload("bmm", tuple(s), "float16", "nt") for s in suite["bmm"]["shapes_BMNK"]]
    if "conv2d" in ops:
        out += [Workload("conv2d", tuple(s), "float16", "nhwc") for s in suite["conv2d"]["shapes"][:conv_layers]]
    return out


def useful(w: Any, c: Any, spec: Any, grid: str) -> bool:
    """The grid's per-op K tiles, the tuner space's shape rules (no tile beyond the problem, no
    stages beyond the trip count), and no config whose stages ``plan_pipeline`` would clamp to fit
    shared memory: it would run as a shallower config that the grid already holds."""
    from alcop_triton.analysis.plan import stage_room
    from alcop_triton.autotune.space import shape_reason
    if c.block_k not in GRIDS[grid].get("block_k_for", {}).get(w.op, (c.block_k,)):
        return False
    per_stage = (c.block_m * c.block_k + c.block_k * c.block_n) * w.elem_bytes
    room = stage_room(spec.smem_per_block, c.block_m, c.block_n, w.elem_bytes, c.persistent and c.smem_stages > 1)
    return shape_reason(w, c, spec) is None and per_stage * c.smem_stages <= room


_SHAPES: dict[str, tuple[Any, ...]] = {}  # per compile worker: workload -> its inputs on the meta device


def _compile_worker(pairs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Compile (workload, config) pairs, bound to uninitialised CUDA tensors of the workload's own
    shapes and strides (so Triton specialises exactly as for the timed call: a batch of 16 is not
    a batch of 2, and the timing process never compiles) but never launched."""
    import torch

    from alcop_triton.kernels.runner import make_runner
    from alcop_triton.records import KernelConfig, Workload
    errs = []
    for wd, cd in pairs:
        w, c = Workload.from_dict(json.loads(wd)), KernelConfig.from_dict(cd)
        try:
            r = make_runner(w, c, "meta")
            if wd not in _SHAPES:
                _SHAPES[wd] = r.inputs(0)
            x = tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda") for t in _SHAPES[wd])
            launch, _ = r.bind(x)
            if launch is not None:
                launch.compile()
        except Exception as e:  # recorded by the main process when it meets the pair again
            errs.append(f"{w} {c}: {type(e).__name__}: {str(e)[:200]}")
    return errs


def precompile(order: list[tuple[Any, Any]], workers: int) -> None:
    """Compile every (workload, config) of ``order`` in ``workers`` processes (compilation is
    CPU-bound; pairs that share a kernel hit Triton's on-disk cache), before any timing, so no other
    process puts CUDA work (allocations, module loads) on the GPU while it times: H100 runs that
    overlapped the two had up to 3% of their times over 2x slow against a cross-run median, runs
    that compiled first at most 1.6%."""
    import multiprocessing as mp
    t0 = time.time()
    jobs = [[(json.dumps(w.to_dict()), c.to_dict()) for w, c in order[i:i + COMPILE_JOB]]
            for i in range(0, len(order), COMPILE_JOB)]
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
        n_err = sum(len(e) for e in ex.map(_compile_worker, jobs))
    print(f"[collect] compiled {len(order)} (workload, config) pairs in {time.time() - t0:.0f}s, {n_err} failed "
          "(recorded when timed)", flush=True)


class Timer:
    """``timing.EAGER_KERNEL``: median of ``reps`` launches, each after an L2 flush, 3 warm-up launches."""

    def __init__(self, reps: int) -> None:
        self.reps = reps
        self.flush = timing.l2_flush_buffer()

    def __call__(self, fn: Any) -> float:
        return timing.eager_ms({"fn": fn}, self.reps, flush=self.flush, host_included=False, warmup=3)["fn"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="tests/data/alcop_suite.json")
    ap.add_argument("--ops", default="dense,bmm")
    ap.add_argument("--grid", default="full", choices=sorted(GRIDS))
    ap.add_argument("--conv-layers", type=int, default=6)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--mma", default="wgmma", help="label only; set DISABLE_MMA_V3=1 for mma_sync")
    ap.add_argument("--limit-shapes", type=int, default=0, help="first N workloads only (smoke runs)")
    a = ap.parse_args(argv)
    t_start = time.time()

    import torch
    import triton

    import alcop_triton
    from alcop_triton.kernels.runner import make_runner
    from alcop_triton.model.hardware import detect

    spec = detect()
    meta = {"gpu": spec.name, "device": torch.cuda.get_device_name(), "cc": ".".join(map(str, torch.cuda.get_device_capability())),
            "mma": a.mma, "triton": triton.__version__, "torch": torch.__version__.split("+")[0],
            "alcop": alcop_triton.__version__, "date": datetime.date.today().isoformat()}
    suite = json.loads(Path(a.suite).read_text())
    wls = workloads(suite, a.ops.split(","), a.conv_layers)
    wls = wls[: a.limit_shapes] if a.limit_shapes else wls
    cfgs = grid_configs(a.grid)
    # Config-major, workload-minor: a cut-off by the budget leaves every workload measured on the
    # same leading part of the grid, and each config's kernels are built once and then reused by
    # every workload (per-process caches of bounded size never thrash).
    order = [(w, c) for c in cfgs for w in wls if useful(w, c, spec, a.grid)]

    precompile(order, a.workers)
    timer = Timer(a.reps)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n_rec = 0
    with out.open("a") as f:
        def write(rec: dict[str, Any]) -> None:
            nonlocal n_rec
            f.write(json.dumps(rec | meta) + "\n")
            n_rec += 1
        refs: dict[Any, Any] = {}
        for w in wls:  # torch baseline per shape
            r = make_runner(w, cfgs[0], "cuda")
            x = r.inputs(0)
            refs[w] = (x, r.reference(x) if w.op.startswith("conv") else (x[0] @ x[1]))
            fn = (lambda x=x: torch.nn.functional.conv2d(x[0], x[1], None, w.conv_params()["stride"], w.conv_params()["pad"])) \
                if w.op.startswith("conv") else (lambda x=x: torch.matmul(x[0], x[1]))
            # the best of three timings: a single one came out 2-12x slow about once per run on the
            # H100, and every ratio against torch in the reports leans on this number
            write({"workload": w.to_dict(), "config": None, "impl": "torch", "time_ms": min(timer(fn) for _ in range(3)),
                   "error": None})
        for w, c in order:
            if time.time() - t_start > a.budget_s:
                print(f"[collect] budget of {a.budget_s:.0f}s reached; stopping", flush=True)
                break
            rec: dict[str, Any] = {"workload": w.to_dict(), "config": c.to_dict(), "impl": "alcop", "time_ms": None,
                                   "error": None}
            try:
                r = make_runner(w, c, "cuda")
                x, ref = refs[w]
                launch, o = r.bind(x)
                o.fill_(float("nan"))
                launch()
                torch.cuda.synchronize()
                err = ((o.float() - ref.float()).norm() / ref.float().norm()).item()
                if not err <= 1e-2:
                    rec.update(error="wrong_answer", message=f"relative error {err:.3g}")
                else:
                    rec["time_ms"] = timer(launch)
            except Exception as e:
                msg = f"{type(e).__name__}: {str(e)[:300]}"
                kind = "out_of_resources" if "out of resource" in msg.lower() or "OutOfResources" in msg else \
                    "compile" if "Compil" in msg or "PTXAS" in msg.upper() else "runtime"
                rec.update(error=kind, message=msg)
                if kind == "runtime":
                    traceback.print_exc()
            write(rec)
            if n_rec % 500 == 0:
                f.flush()
                print(f"[collect] {n_rec} records, {time.time() - t_start:.0f}s", flush=True)
    print(f"[collect] wrote {n_rec} records to {out} in {time.time() - t_start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

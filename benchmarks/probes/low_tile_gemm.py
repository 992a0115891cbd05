"""GEMMs with few output tiles: which configs win with inputs in L2 (warm) and with inputs from DRAM (cold).

    python benchmarks/probes/low_tile_gemm.py OUT_DIR

The held-out, decode and suite GEMMs furthest below cuBLAS under CUDA graphs are small in M or N
(64x4096x4096: 64 output tiles of 64x64 on 132 SMs) or short in K. The analytical model calls them
DRAM-bound and scores most tilings alike; the suite's graph timer replays one set of inputs, which
then sits in L2. For each shape this times dispatch's config and variants of it (half the tile in M or
N, split-K 2 and 4, by TMA) and cuBLAS, each with two timers:
``triton.testing.do_bench_cudagraph`` of one call on one set of inputs (warm: the suite's graph timer)
and of one graph running the call on enough input copies to exceed L2, per call (cold: what the tuner's
``autotune.measure.time_gpu`` times). Every config's output is checked against torch first.
Writes ``OUT_DIR/low_tile_gemm.{json,md}``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SHAPES = ((64, 4096, 4096), (4096, 64, 4096), (8, 4096, 4096), (64, 11008, 4096), (16, 4096, 14336),
          (3136, 1536, 384), (6304, 768, 3072))
L2_BYTES = 50 << 20
COLD_BYTES = 3 * L2_BYTES  # input copies per cold timing: three L2s' worth


def variants(cfg: Any) -> list[Any]:
    """``cfg`` itself first, then it and half its tile in M or N, by TMA, not persistent, with split-K 1,
    2 and 4 (deduplicated)."""
    out: list[Any] = [cfg]
    bases = [cfg]
    if cfg.block_m >= 32:
        bases.append(dataclasses.replace(cfg, block_m=cfg.block_m // 2))
    if cfg.block_n >= 32:
        bases.append(dataclasses.replace(cfg, block_n=cfg.block_n // 2))
    for base in bases:
        for split in (1, 2, 4):
            c = dataclasses.replace(base, split_k=split, async_copy="tma", persistent=False)
            if c not in out:
                out.append(c)
    return out


def main(out_dir: str) -> int:
    import torch
    import triton
    from triton.testing import do_bench_cudagraph

    import alcop_triton as at
    from alcop_triton.autotune.dispatch import dispatcher
    from alcop_triton.autotune.space import shape_reason
    from alcop_triton.choose_config import fit_stages, gpu_spec
    from alcop_triton.records import Workload

    spec = gpu_spec(0)
    rows = []
    for m, n, k in SHAPES:
        w = Workload("matmul", (m, n, k), "float16", "nt")
        decision = dispatcher().decide(w, spec)
        per_set = (m * k + n * k + m * n) * 2
        copies = max(2, math.ceil(COLD_BYTES / per_set))
        g = torch.Generator(device="cuda").manual_seed(0)
        sets = [(torch.randn(m, k, device="cuda", dtype=torch.float16, generator=g),
                 torch.randn(n, k, device="cuda", dtype=torch.float16, generator=g).t()) for _ in range(copies)]
        a0, b0 = sets[0]
        want = a0.double() @ b0.double()

        def timers(fn: Callable[[Any, Any], Any]) -> dict[str, float]:
            def cold() -> None:
                for a, b in sets:
                    fn(a, b)
            return {"warm_us": 1e3 * do_bench_cudagraph(lambda: fn(a0, b0)),
                    "cold_us": 1e3 * do_bench_cudagraph(cold) / copies}

        row: dict[str, Any] = {"shape": [m, n, k], "dispatch": {"config": repr(decision.config),
                                                                "source": decision.source},
                               "torch": timers(torch.matmul), "configs": []}
        for cfg in variants(fit_stages(decision.config, w)):
            if shape_reason(w, cfg, spec) is not None:
                continue
            entry: dict[str, Any] = {"config": repr(cfg), "dispatch": not row["configs"]}
            try:
                with at.use_config(cfg):
                    out = at.matmul(a0, b0)
                    err = ((out.double() - want).norm() / want.norm()).item()
                    entry["rel_err"] = err
                    if err > 1e-2:
                        entry["error"] = "wrong result"
                    else:
                        entry.update(timers(at.matmul))
            except Exception as exc:  # a config that fails is a result
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
            row["configs"].append(entry)
            print(m, n, k, entry, flush=True)
        rows.append(row)
    timer_names = {"warm_us": "triton.testing.do_bench_cudagraph, one call on one set of inputs",
                   "cold_us": "triton.testing.do_bench_cudagraph of the call on input copies "
                              f"totalling {COLD_BYTES >> 20} MB, per call"}
    meta: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "alcop": at.__version__, "date": datetime.date.today().isoformat(),
            "timers": timer_names}
    out_p = Path(out_dir)
    out_p.mkdir(parents=True, exist_ok=True)
    (out_p / "low_tile_gemm.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# GEMMs with few output tiles, warm and cold ({meta['device']})", "",
             f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timers: warm = "
             f"{timer_names['warm_us']}; cold = {timer_names['cold_us']}. fp16, B stored N x K.", "",
             "| M x N x K | cuBLAS warm / cold µs | dispatch's config | its warm / cold µs | best warm: config, warm / cold µs "
             "| best cold: config, warm / cold µs |", "|---|---|---|---|---|---|"]
    for r in rows:
        ok = [c for c in r["configs"] if "warm_us" in c]
        mine = next((c for c in ok if c["dispatch"]), None)
        bw = min(ok, key=lambda c: c["warm_us"]) if ok else None
        bc = min(ok, key=lambda c: c["cold_us"]) if ok else None
        t = r["torch"]

        def times(c: dict[str, Any] | None) -> str:
            return "-" if c is None else f"{c['warm_us']:.1f} / {c['cold_us']:.1f}"

        def cell(c: dict[str, Any] | None) -> str:
            return "-" if c is None else f"`{c['config']}` {times(c)}"
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {t['warm_us']:.1f} / {t['cold_us']:.1f} | "
                     f"`{r['dispatch']['config']}` ({r['dispatch']['source']}) | "
                     f"{times(mine)} | {cell(bw)} | {cell(bc)} |")
    (out_p / "low_tile_gemm.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

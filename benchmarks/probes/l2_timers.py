"""Do recorded picks match what the suite's graph timer rewards? Configs timed with L2 cold and warm.

    python benchmarks/probes/l2_timers.py OUT_DIR [--top 12] [--records FILE.jsonl[.gz] ...] [--shapes MxNxK ...]

The shipped H100 table is measured with the tuner's timer (``autotune.measure.time_gpu``: CUDA graphs
over rotating copies of the inputs, so every call reads them from memory); the suite's graph timer
(``triton.testing.do_bench_cudagraph`` on one set of inputs) replays one call back to back, so operands
that fit in L2 stay there. For the ALCOP suite GEMMs furthest below cuBLAS under the suite's timer,
the table's ``--top`` fastest alcop configs (by the table's own times) are timed both ways in this
process, and cuBLAS (``torch.matmul``) too: where the best warm config is another than the table's pick,
the gap is the timer's; where none is near cuBLAS warm, it is the kernels'. Writes
``OUT_DIR/l2_timers.{json,md}``.

``--records`` takes the configs from tuning databases exported as JSON lines (``alcop-tune export --all
--format jsonl``, gzipped or not) instead of the shipped table: each shape's ``--top`` configs by their
fastest time in any of the files. ``--shapes`` replaces the default shapes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import int_tuple, publish, run_meta, table_head  # noqa: E402

SHAPES = ((4096, 64, 4096), (50176, 128, 64), (12544, 256, 1024), (4096, 64, 512), (12544, 256, 128),
          (1024, 2304, 768), (512, 2304, 768), (3136, 512, 1024), (512, 3072, 1024), (3136, 512, 2048))
"""(M, N, K), B stored N x K: the ten suite GEMMs furthest below cuBLAS in
``results/callpath_final_h100/suite`` (graph timer)."""
TIE = 0.03
"""Configs whose cold times are within this fraction of the cold pick's count as tied for ``tie best``."""
TIMER = ("cold: autotune.measure.time_gpu (CUDA graph over rotating input copies, the table's timer); warm: "
         "triton.testing.do_bench_cudagraph on one set of inputs (the suite's graph timer)")


def record_configs(paths: list[Path], shape: tuple[int, int, int], top: int) -> list[tuple[float, dict[str, Any]]]:
    """The ``top`` fastest fp16 alcop configs of matmul ``shape`` (layout nt) in the JSON-lines record files
    ``paths``: (ms, config), a config measured more than once at its fastest time."""
    best: dict[str, tuple[float, dict[str, Any]]] = {}
    for path in paths:
        with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
            for line in f:
                r = json.loads(line)
                w = r["workload"]
                if (r["impl"] == "alcop" and r.get("time_ms") and w["op"] == "matmul" and w["dtype"] == "float16"
                        and w["layout"] == "nt" and tuple(w["shape"]) == shape):
                    key = json.dumps(r["config"], sort_keys=True)
                    if key not in best or r["time_ms"] < best[key][0]:
                        best[key] = (r["time_ms"], r["config"])
    return sorted(best.values(), key=lambda x: x[0])[:top]


def _shown(path: Path) -> str:
    """A record file as the report names it: relative to the repository inside it, else its file name."""
    full = path.resolve()
    return str(full.relative_to(ROOT)) if full.is_relative_to(ROOT) else path.name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--records", type=Path, nargs="+", default=[ROOT / "alcop_triton" / "data" / "default_h100.jsonl"],
                    help="JSON-lines record files (.gz too) to take configs from (default: the shipped H100 table)")
    ap.add_argument("--shapes", type=int_tuple((3,), "MxNxK"), nargs="+", default=list(SHAPES), help="MxNxK, B stored N x K")
    a = ap.parse_args(argv)

    import torch
    from triton.testing import do_bench_cudagraph

    import alcop_triton as at
    from alcop_triton.autotune.measure import _launcher, check_output, time_gpu
    from kernels.runner import make_runner

    rows: list[dict[str, Any]] = []
    for m, n, k in a.shapes:
        wl = at.Workload("matmul", (m, n, k), "float16", "nt")
        inputs = None
        cands = []
        for recorded_ms, cfg in record_configs(a.records, (m, n, k), a.top):
            config = at.KernelConfig.from_dict(cfg)
            try:
                runner = make_runner(wl, config, "cuda")
                inputs = runner.inputs(0) if inputs is None else inputs
                err = check_output(runner.run(inputs), runner.reference(inputs), runner.rtol)
                if err:
                    cands.append({"config": str(config), "recorded_ms": recorded_ms, "error": err})
                    continue
                cold, timer = time_gpu(runner, 0)
                warm = do_bench_cudagraph(_launcher(runner, inputs))
                cands.append({"config": str(config), "recorded_ms": recorded_ms, "cold_ms": cold, "cold_timer": timer,
                              "warm_ms": warm})
            except Exception as exc:  # compile error, out of resources: the result
                cands.append({"config": str(config), "recorded_ms": recorded_ms, "error": f"{type(exc).__name__}"})
        if inputs is None:
            continue
        a_, b_ = inputs[0], inputs[1]
        torch_warm = do_bench_cudagraph(lambda: torch.matmul(a_, b_))
        ok = [c for c in cands if "warm_ms" in c]
        row = {"shape": [m, n, k], "torch_warm_ms": torch_warm, "candidates": cands}
        if ok:
            pick = min(ok, key=lambda c: c["cold_ms"])
            best = min(ok, key=lambda c: c["warm_ms"])
            tied = min((c for c in ok if c["cold_ms"] <= (1 + TIE) * pick["cold_ms"]), key=lambda c: c["warm_ms"])
            row |= {"cold_pick": pick["config"], "cold_pick_warm_ms": pick["warm_ms"], "warm_best": best["config"],
                    "warm_best_ms": best["warm_ms"], "tie_best": tied["config"], "tie_best_warm_ms": tied["warm_ms"]}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "candidates"}), flush=True)
    meta = run_meta(TIMER) | {"top": a.top, "records": [_shown(p) for p in a.records]}
    lines = table_head("The records' pick under a cold and a warm L2", meta,
                       f"fp16, B stored N x K; the {a.top} fastest recorded configs per shape ({', '.join(meta['records'])}); "
                       f"µs. Tie best: the fastest warm of the configs within {TIE:.0%} of the cold pick cold.",
                       ["shape", "cuBLAS warm", "cold pick, warm", "tie best, warm", "best warm", "cuBLAS / cold pick",
                        "cuBLAS / tie best", "cuBLAS / best warm", "cold pick", "best warm config"])
    for r in rows:
        if "warm_best_ms" not in r:
            continue
        t = r["torch_warm_ms"]
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {1e3 * t:.1f} | {1e3 * r['cold_pick_warm_ms']:.1f} | "
                     f"{1e3 * r['tie_best_warm_ms']:.1f} | {1e3 * r['warm_best_ms']:.1f} | {t / r['cold_pick_warm_ms']:.3f}x | "
                     f"{t / r['tie_best_warm_ms']:.3f}x | {t / r['warm_best_ms']:.3f}x | "
                     f"{r['cold_pick']} | {r['warm_best']} |")
    return publish(a.out_dir, "l2_timers", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main())

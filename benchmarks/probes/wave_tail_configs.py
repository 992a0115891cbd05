"""Which tile should a wave tail's second launch use? alcop's kernels with other tail configs, timed.

    python benchmarks/probes/wave_tail_configs.py OUT_DIR [--shapes MxNxK ...] [--heads M,N,K,W,S ...]
        [--tails M,N,K,W,S[,SPLIT] ...]

``records.TAIL_CONFIG`` (64 x 64 x 64, 4 warps, 4 stages) came from the hand-written kernel of
``wave_tail.py``, which tried three tail tiles at one depth. Here alcop's generated kernels: for each
short-last-wave shape and head config, the wave tail with each tail (``TAILS``, or ``--tails``) as its second launch
(``Schedule.tail_schedule(cfg)``, set on the head's kernel before its first call) and the head config as
one launch. fp16, B stored N x K; each result checked against torch (normwise relative error <= 1e-2,
output filled with NaN first). Timer: ``triton.testing.do_bench_cudagraph`` (median). Writes
``OUT_DIR/wave_tail_configs.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_io import GRAPH_TIMER, int_tuple, publish, run_meta, table_head  # noqa: E402

SHAPES = ((1970, 2304, 768), (896, 2560, 2560), (1024, 2304, 768))
HEADS = ((128, 128, 64, 4, 4), (128, 128, 64, 4, 5), (64, 256, 64, 4, 3))
TAILS = ((64, 64, 64, 4, 4, 1), (64, 64, 64, 4, 3, 1), (64, 32, 64, 4, 4, 1), (64, 64, 64, 4, 4, 2),
         (64, 64, 64, 4, 4, 4), (64, 64, 64, 4, 4, 8), (64, 128, 64, 4, 4, 4), (128, 128, 64, 4, 4, 4),
         (128, 128, 64, 4, 4, 8))
"""(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, stages), TMA copies: the head's configs; the tail's add a split-K
factor (the tail's programs each reduce one slice of K; the last to arrive adds the slices in order). A tail
starts at a head's row boundary, so a tail's BLOCK_M divides the head's."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--shapes", nargs="+", type=int_tuple((3,), "MxNxK"), default=list(SHAPES))
    ap.add_argument("--heads", nargs="+", type=int_tuple((5,), "BLOCK_M,BLOCK_N,BLOCK_K,warps,stages"),
                    default=list(HEADS))
    ap.add_argument("--tails", nargs="+", type=int_tuple((5, 6), "BLOCK_M,BLOCK_N,BLOCK_K,warps,stages[,split]"),
                    default=list(TAILS))
    opts = ap.parse_args(argv)
    import torch
    from triton.testing import do_bench_cudagraph

    import alcop_triton as at
    from alcop_triton.build import CompiledKernel
    from alcop_triton.kernels import matmul as km

    def cfg(c: tuple[int, ...], tail: bool = False) -> at.KernelConfig:
        return at.KernelConfig(c[0], c[1], c[2], group_m=8, num_warps=c[3], smem_stages=c[4], async_copy="tma",
                               wave_tail=tail, split_k=c[5] if len(c) > 5 else 1)

    rows: list[dict[str, Any]] = []
    for m, n, k in opts.shapes:
        g = torch.Generator(device="cpu").manual_seed(0)
        a = (torch.randn(m, k, generator=g) / k ** 0.25).half().cuda()
        bt = (torch.randn(n, k, generator=g) / k ** 0.25).half().cuda()
        want = a.float() @ bt.float().T
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        row: dict[str, Any] = {"shape": [m, n, k], "torch_us": 1e3 * do_bench_cudagraph(lambda: a @ bt.T), "runs": []}

        def timed(launch: Any) -> float | str:
            c.fill_(float("nan"))
            launch()
            err = ((c.float() - want).norm() / want.norm()).item()
            return 1e3 * do_bench_cudagraph(launch) if err <= 1e-2 else f"wrong ({err:.1e})"

        for head in opts.heads:
            one, _ = km.compiled("float16", 0, km.Epilogue(), cfg(head)).bind(a, bt.T, c)
            row["runs"].append({"head": head, "tail": None, "us": timed(one)})
            for tail in opts.tails:
                if head[0] % tail[0]:
                    row["runs"].append({"head": head, "tail": tail, "us": "n/a"})
                    continue
                inputs, out = km.matmul_te("float16", False)
                kern = at.build(at.Schedule.from_config(out, cfg(head, True)), inputs + [out])
                kern._tail = CompiledKernel(kern.schedule.tail_schedule(cfg(tail)), inputs + [out])
                launch, _ = kern.bind(a, bt.T, c)
                row["runs"].append({"head": head, "tail": tail, "split": launch.then is not None,
                                    "us": timed(launch)})
            print({"shape": row["shape"], "head": head,
                   "us": [r["us"] if isinstance(r["us"], str) else round(r["us"], 1)
                          for r in row["runs"] if r["head"] == head]}, flush=True)
        rows.append(row)
    meta = run_meta(GRAPH_TIMER)
    lines = table_head("The wave tail's second launch: its tile", meta,
                       "fp16, B stored N x K; µs. Columns: the head config as one launch, then with each tail "
                       "(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, split-K); n/a: the tail's rows do not divide the head's.",
                       ["shape", "cuBLAS", "head", "one launch"] + [str(t) for t in opts.tails])
    for r in rows:
        for head in opts.heads:
            runs = [x for x in r["runs"] if x["head"] == head]
            cells = [f"{x['us']:.1f}" if isinstance(x["us"], float) else str(x["us"]) for x in runs]
            lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['torch_us']:.1f} | {head} | " + " | ".join(cells) + " |")
    return publish(opts.out_dir, "wave_tail_configs", meta, rows, lines)


if __name__ == "__main__":
    sys.exit(main())

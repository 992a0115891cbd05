"""Where the conv weight gradient's time goes, and what a row-run TMA main loop would gain.

    python benchmarks/probes/wgrad_parts.py OUT_DIR

For a few of the suite's 3x3, pad-1, stride-1 layers (channels-last fp16, batch 64): cuDNN's weight
gradient (``aten.convolution_backward``, weight only), alcop's as its backward runs it
(``autograd.conv_grads``), and the weight-gradient DSL kernel at its split rule's config
(``kernels.conv_grad.weight_grad_config``), then that kernel's generated source edited step by step to
time its parts (the edited kernels compute wrong values; only ``generated`` is checked):

* ``generated``: the source as built, launched from its file;
* ``no_reduce``: the split-K partials stored, the last-arrival reduction removed;
* ``no_x_mask``: also X's padding mask removed (reads from a buffer padded on both sides);
* ``no_decode``: also the reduction index not split into (n, oh, ow): each chunk reads 64 consecutive
  rows of dY and of X (the same number of bytes, without the divisions).

And a hand-written main loop of another form (``_wgrad_rows`` below): each reduction chunk is a run of
BLOCK_K output positions of one output row, dY's and X's tiles copied by TMA from 4-D descriptors
(positions past the row end zero-filled in dY, so what X holds there multiplies zero; X's padding
zero-filled), split-K partials in float32 summed by ``torch.sum``: checked against cuDNN, timed with the
sum. Timer: ``triton.testing.do_bench_cudagraph`` (one call, one set of inputs). Writes
``OUT_DIR/wgrad_parts.{json,md}``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = ((64, 56, 56, 64, 64), (64, 28, 28, 128, 128), (64, 14, 14, 256, 256), (64, 28, 28, 512, 512),
          (64, 224, 224, 64, 64))
"""(N, H, W, C, CO) of 3x3, pad-1, stride-1 layers from the suite."""

ROW_CONFIGS = ((64, 64, 4, 4), (128, 64, 4, 4), (64, 128, 4, 4), (128, 128, 8, 4), (128, 128, 4, 3), (128, 256, 8, 3))
"""(BLOCK_M over CO, BLOCK_N over C, warps, stages) of ``_wgrad_rows``; BLOCK_K is the row run."""


@triton.jit
def _wgrad_rows(dy_desc, x_desc, ws, N, OH, OW, CO, NCOL, C: tl.constexpr, KW: tl.constexpr, PAD: tl.constexpr,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr, STAGES: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_s = tl.program_id(2)
    tap = pid_n // (C // BN)
    c0 = (pid_n % (C // BN)) * BN
    kh = tap // KW
    kw = tap % KW
    co0 = pid_m * BM
    runs = tl.cdiv(OW, BK)
    chunks = N * OH * runs
    per = tl.cdiv(chunks, SPLIT)
    start = pid_s * per
    stop = tl.minimum(start + per, chunks)
    acc = tl.zeros((BM, BN), tl.float32)
    for i in tl.range(start, stop, num_stages=STAGES):
        ow0 = (i % runs) * BK
        t = i // runs
        oh = t % OH
        n = t // OH
        a = dy_desc.load([n, oh, ow0, co0]).reshape(BK, BM)
        b = x_desc.load([n, oh + kh - PAD, ow0 + kw - PAD, c0]).reshape(BK, BN)
        acc = tl.dot(a.T, b, acc)
    offs_m = co0 + tl.arange(0, BM)
    offs_n = tap * C + c0 + tl.arange(0, BN)
    tl.store(ws + pid_s * CO * NCOL + offs_m[:, None] * NCOL + offs_n[None, :], acc, mask=offs_m[:, None] < CO)


def _edits(src: str) -> dict[str, str]:
    """The generated source and its cumulative edits (module docstring)."""
    out = {"generated": src}
    cut = src.index("    tl.debug_barrier()\n")
    src = src[:cut]
    out["no_reduce"] = src
    src, n = re.subn(r"(tile_b = tl\.load\(.*?), mask=.*?, other=0\.0\)", r"\1, mask=mask_k[:, None], other=0.0)", src)
    assert n == 1, "tile_b's load not found"
    out["no_x_mask"] = src
    src, n = re.subn(r"\n(\s+)row = offs_k % \d+\n\s+roh = .*\n\s+rn = .*\n",
                     r"\n\1row = offs_k\n\1roh = offs_k * 0\n\1rn = offs_k * 0\n", src)
    assert n == 1, "the reduction index's decode not found"
    out["no_decode"] = src
    return out


def _load(src: str, name: str, tmp: Path) -> Any:
    path = tmp / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"wgrad_{name}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(out_dir: str) -> int:
    from probe_io import checked_time, fastest, fmt_us, publish, run_meta, table_head
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from alcop_triton.ops.conv import conv_grads
    from alcop_triton.build import build
    from alcop_triton.fastpath import launch_kernel
    from alcop_triton.kernels.conv_grad import conv_weight_grad_te, weight_grad_config, weight_grad_static
    from alcop_triton.schedule import Schedule

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tmp = Path(tempfile.mkdtemp())
    rows = []
    cl = torch.channels_last
    for nb, h, w, c, co in LAYERS:
        torch.manual_seed(0)
        x = torch.randn(nb, c, h, w, device="cuda", dtype=torch.float16).to(memory_format=cl)
        wt = (torch.randn(co, c, 3, 3, device="cuda", dtype=torch.float16) / (3 * c ** 0.5)).to(memory_format=cl)
        dy = torch.randn(nb, co, h, w, device="cuda", dtype=torch.float16).to(memory_format=cl)
        want = torch.ops.aten.convolution_backward(dy, x, wt, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                   [False, True, False])[1].float()
        row: dict[str, Any] = {"layer": f"{nb}x{h}x{w}, {c} -> {co}", "flop": 2 * nb * h * w * co * c * 9}
        row["cudnn_us"] = checked_time(lambda: torch.ops.aten.convolution_backward(
            dy, x, wt, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])[1], want)
        row["alcop_us"] = checked_time(lambda: conv_grads(x, wt, dy, (1, 1), (1, 1), (1, 1), 1, False, True)[1], want)

        # the DSL kernel at its rule's config, then its source edited
        inputs, out_te = conv_weight_grad_te(2, "float16", (1, 1), (1, 1), (1, 1), 1)
        cfg = weight_grad_config((1, co, 9 * c, nb * h * w), sms)
        row["config"] = str(cfg)
        kern = build(Schedule.from_config(out_te, cfg, m_axes=("co",), n_axes=("kh", "kw", "c")), inputs + [out_te],
                     static=weight_grad_static(2, True))
        out = torch.empty(1, co, c, 3, 3, device="cuda", dtype=torch.float16)
        launch_kernel(kern, [dy, x, wt, out])
        # X inside a buffer padded by a few rows on both sides: the unmasked edits read up to 2 rows past it
        pad = 4 * w * c
        xbuf = torch.zeros(x.numel() + 2 * pad, device="cuda", dtype=torch.float16)
        xp = xbuf[pad:pad + x.numel()].view(nb, h, w, c).permute(0, 3, 1, 2)
        xp.copy_(x)
        bound, _ = kern.bind(dy, xp, wt, out)
        variants: dict[str, Any] = {}
        for name, src in _edits(kern.source).items():
            jit_name = re.search(r"@triton\.jit\ndef (\w+)\(", src)
            assert jit_name is not None, "no kernel in the generated source"
            fn = getattr(_load(src, f"{name}_{h}_{c}", tmp), jit_name.group(1))

            def run(fn: Any = fn) -> Any:
                fn[bound.grid](*bound.args, **bound.kwargs)
                return out[0]
            variants[name] = checked_time(run, want if name == "generated" else None)
        row["dsl_parts_us"] = variants

        # the row-run TMA main loop
        dy4, x4 = dy.permute(0, 2, 3, 1), x.permute(0, 2, 3, 1)
        row["rows_tma"] = []
        for bm, bn, warps, stages in ROW_CONFIGS:
            if bm > co or bn > c:
                continue
            bk = min(64, max(16, triton.next_power_of_2(w)))
            tiles = -(-co // bm) * 9 * (c // bn)
            chunks = nb * h * -(-w // bk)
            for split in (1, 4, 16, 64):
                if split > 1 and (tiles * split // 2 >= 4 * sms or chunks // split < 8):
                    continue
                ws = torch.empty(split, co, 9 * c, device="cuda", dtype=torch.float32)
                dyd = TensorDescriptor.from_tensor(dy4, [1, 1, bk, bm])
                xd = TensorDescriptor.from_tensor(x4, [1, 1, bk, bn])

                def rows_run(bm: int = bm, bn: int = bn, bk: int = bk, split: int = split, warps: int = warps,
                             stages: int = stages, ws: Any = ws, dyd: Any = dyd, xd: Any = xd) -> Any:
                    _wgrad_rows[(-(-co // bm), 9 * (c // bn), split)](
                        dyd, xd, ws, nb, h, w, co, 9 * c, C=c, KW=3, PAD=1, BM=bm, BN=bn, BK=bk, SPLIT=split,
                        STAGES=stages, num_warps=warps)
                    return ws.sum(0).view(co, 3, 3, c).permute(0, 3, 1, 2)
                row["rows_tma"].append({"config": f"m{bm} n{bn} k{bk} w{warps} s{stages} split{split}",
                                        "us": checked_time(rows_run, want)})
        rows.append(row)
        print(json.dumps(row), flush=True)

    meta = run_meta()
    lines = table_head("Conv2d weight gradient by parts", meta,
                       "µs, fp16, channels-last, 3x3, pad 1, stride 1; variants in the probe's docstring.",
                       ["layer", "cuDNN", "alcop (as backward runs it)", "DSL generated", "no_reduce", "no_x_mask",
                        "no_decode", "rows TMA best (config)"])
    for r in rows:
        p = r["dsl_parts_us"]
        best = fastest(r["rows_tma"])
        lines.append(f"| {r['layer']} | {fmt_us(r['cudnn_us'])} | {fmt_us(r['alcop_us'])} | {fmt_us(p['generated'])} | "
                     f"{fmt_us(p['no_reduce'])} | {fmt_us(p['no_x_mask'])} | {fmt_us(p['no_decode'])} | "
                     f"{fmt_us(best['us']) if best else 'err'} ({best['config'] if best else '-'}) |")
    lines += ["", "Row-run TMA loop, every config (µs):", ""]
    for r in rows:
        lines.append(f"- {r['layer']} (DSL config {r['config']}): "
                     + ", ".join(f"{d['config']} {fmt_us(d['us'])}" for d in r["rows_tma"]))
    return publish(out_dir, "wgrad_parts", meta, rows, lines)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

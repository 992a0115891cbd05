"""Where a convolution's backward spends its GPU time: cuDNN's and alcop's kernels, one by one.

    python benchmarks/probes/conv_bwd_parts.py OUT_DIR

Per layer (ALCOP conv2d suite layers of each kind: stride 1 and 2, small and large; batch 64, fp16,
channels-last): ``aten.convolution_backward`` (input and weight gradients) and ``autograd.conv_grads`` (what
a backward through alcop's convolution runs), each called 20 times after a warm-up under
``torch.profiler``; the table lists every CUDA kernel with its mean time per call. Writes
``OUT_DIR/conv_bwd_parts.{json,md}``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

LAYERS = ((64, (7, 7), 512, 512, 3, 1, 1), (64, (7, 7), 512, 512, 3, 2, 1), (64, (14, 14), 256, 512, 3, 2, 1),
          (64, (56, 56), 64, 64, 3, 1, 1), (64, (28, 28), 128, 128, 3, 2, 1), (64, (112, 112), 64, 128, 3, 1, 1))
"""(N, input extents, C, C_out, window, stride, pad), as the suite names them."""

CALLS = 20


def main(out_dir: str) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from probe_io import run_meta, table_head, write

    from alcop_triton.ops.conv import conv_grads
    torch.manual_seed(0)
    meta = run_meta("torch.profiler, CUDA kernel time, mean of 20 calls after a warm-up")
    rows: list[dict[str, Any]] = []
    lines = table_head("A convolution's backward, kernel by kernel", meta, "µs per call, fp16, channels-last.",
                       ["layer (N, spatial, C, C_out, k, stride, pad)", "implementation", "kernel", "µs"])
    for n, sp, c, co, k, stride, pad in LAYERS:
        x = torch.randn(n, c, *sp, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
        w = (torch.randn(co, c, k, k, device="cuda", dtype=torch.float16) / (3 * k)).contiguous(
            memory_format=torch.channels_last)
        out = [(s + 2 * pad - k) // stride + 1 for s in sp]
        dy = torch.randn(n, co, *out, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
        calls = {
            "torch": lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [stride] * 2, [pad] * 2, [1, 1],
                                                                 False, [0, 0], 1, [True, True, False]),
            "alcop": lambda: conv_grads(x, w, dy, (stride,) * 2, (pad,) * 2, (1, 1), 1)}
        for name, fn in calls.items():
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(CALLS):
                    fn()
                torch.cuda.synchronize()
            kernels: dict[str, float] = {}
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    kernels[e.name] = kernels.get(e.name, 0.0) + e.device_time / CALLS
            layer = [n, *sp, c, co, k, stride, pad]
            rows.append({"layer": layer, "impl": name, "kernels": kernels})
            for kname, us in sorted(kernels.items(), key=lambda kv: -kv[1]):
                lines.append(f"| {'x'.join(map(str, layer))} | {name} | `{kname[:90]}` | {us:.1f} |")
            lines.append(f"| {'x'.join(map(str, layer))} | {name} | **total** | **{sum(kernels.values()):.1f}** |")
        write(out_dir, "conv_bwd_parts", meta, rows, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

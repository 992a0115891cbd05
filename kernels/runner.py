"""Runners: one workload + one config as something the tuner can check and time.

``make_runner(workload, config, device)`` is the tuner's only door into the kernels
(docs/ARCHITECTURE.md). Inputs follow the workload's layout: GEMM operands stored as the layout
letters say ('t': transposed storage, e.g. the ALCOP suite's B stored N x K), convolutions in
NHWC (channels_last) or NCHW.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from alcop_triton.build import Launch
from alcop_triton.errors import UnsupportedError
from alcop_triton.records import KernelConfig, Workload

from . import conv as conv_mod
from . import matmul as mm

TOLERANCE = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}


def _torch_dtype(name: str) -> Any:
    import torch
    return getattr(torch, name)


@dataclass
class Runner:
    workload: Workload
    config: KernelConfig
    device: str
    rtol: float
    _make: Callable[[int], tuple[Any, ...]]
    _run: Callable[[tuple[Any, ...]], tuple[Launch | None, Any]]
    _ref: Callable[[tuple[Any, ...]], Any]

    def __post_init__(self) -> None:
        self._bound: dict[int, tuple[tuple[Any, ...], Any, Any]] = {}

    def inputs(self, seed: int) -> tuple[Any, ...]:
        """Fresh random inputs (scaled so fp16 sums stay far from overflow)."""
        return self._make(seed)

    def bind(self, inputs: tuple[Any, ...]) -> tuple[Launch | None, Any]:
        """(launch, out): checks and specialisation happen here once; ``launch()`` only enqueues."""
        hit = self._bound.get(id(inputs))
        if hit is None or hit[0] is not inputs:
            launch, out = self._run(inputs)
            hit = (inputs, launch, out)
            self._bound = {id(inputs): hit} | {k: v for k, v in list(self._bound.items())[-7:]}
        return hit[1], hit[2]

    def run(self, inputs: tuple[Any, ...]) -> Any:
        """Launch our kernel on ``inputs`` and return its output tensor."""
        launch, out = self.bind(inputs)
        if launch is not None:
            launch()
        return out

    def reference(self, inputs: tuple[Any, ...]) -> Any:
        """torch in float64 (float32 on devices without float64 matmul), cast to the output dtype."""
        return self._ref(inputs)


def make_runner(workload: Workload, config: KernelConfig, device: str) -> Runner:
    import torch
    dt = _torch_dtype(workload.dtype)
    ref_dt = torch.float64
    gen = lambda seed: torch.Generator(device="cpu").manual_seed(seed)  # noqa: E731 - same data on any device

    if workload.op in ("matmul", "linear", "bmm"):
        bsz, m, n, k = workload.gemm_dims()
        lay = workload.layout if len(workload.layout) == 2 else "nn"
        batched = workload.op == "bmm"

        def operand(rows: int, cols: int, trans: str, g: Any) -> Any:
            shape = (rows, cols) if trans == "n" else (cols, rows)
            full = ((bsz,) + shape) if batched else shape
            x = (torch.randn(full, generator=g) / k ** 0.25).to(dt).to(device)
            return x if trans == "n" else x.transpose(-1, -2)

        def make(seed: int) -> tuple[Any, ...]:
            g = gen(seed)
            return operand(m, k, lay[0], g), operand(k, n, lay[1], g)

        def run(x: tuple[Any, ...]) -> tuple[Any, Any]:
            return mm.compiled(workload.dtype, batched, mm.Epilogue(), config).bind(*x)

        def ref(x: tuple[Any, ...]) -> Any:
            return (x[0].to(ref_dt) @ x[1].to(ref_dt)).to(dt)

        return Runner(workload, config, device, TOLERANCE[workload.dtype], make, run, ref)

    if workload.op in ("conv1d", "conv2d", "conv3d"):
        p = workload.conv_params()
        nd = int(workload.op[4])
        sp = {1: (p["w"],), 2: (p["h"], p["w"]), 3: (p["d"], p["h"], p["w"])}[nd]
        ks = {1: (p["kw"],), 2: (p["kh"], p["kw"]), 3: (p["kd"], p["kh"], p["kw"])}[nd]
        cl = workload.layout in ("nhwc", "ndhwc", "nwc")
        stride, pad, dil, groups = (p["stride"],) * nd, (p["pad"],) * nd, (p["dilation"],) * nd, p["groups"]
        fmt = {2: torch.channels_last, 3: torch.channels_last_3d}.get(nd) if cl else None
        params = conv_mod.ConvParams(nd, stride, pad, pad, dil, groups, cl and nd > 1)

        def make(seed: int) -> tuple[Any, ...]:
            g = gen(seed)
            fan = p["ci"] // groups * (p["kd"] * p["kh"] * p["kw"])
            x = torch.randn((p["n"], p["ci"], *sp), generator=g).to(dt)
            w = (torch.randn((p["co"], p["ci"] // groups, *ks), generator=g) / fan ** 0.5).to(dt)
            if fmt is not None:
                x, w = x.to(memory_format=fmt), w.to(memory_format=fmt)
            return x.to(device), w.to(device)

        def run(x: tuple[Any, ...]) -> tuple[Any, Any]:
            osz = conv_mod.output_size(x[0], x[1], stride, pad, pad, dil)
            out = conv_mod.empty_output(x[0], (p["n"], p["co"], *osz))
            launch, _ = conv_mod.compiled(workload.dtype, params, config).bind(
                x[0], x[1], out.unflatten(1, (groups, p["co"] // groups)))
            return launch, out

        def ref(x: tuple[Any, ...]) -> Any:
            f = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[nd]
            rd = ref_dt if x[0].device.type == "cpu" else torch.float32
            return f(x[0].to(rd), x[1].to(rd), None, stride, pad, dil, groups).to(dt)

        return Runner(workload, config, device, TOLERANCE[workload.dtype], make, run, ref)
    raise UnsupportedError(f"make_runner: op {workload.op!r} has no runner")

"""A GEMM on the warp-specialized sm90 kernel (``async_copy="ws"``): host side of ``alcop_triton.hopper``'s
generated Gluon kernels, behind the same ``bind`` / ``label`` interface as ``build.CompiledKernel``.

``matmul.compiled`` returns this for a "ws" config of a single GEMM (no batch dims); it runs an epilogue
``act(acc + bias) + residual`` itself (any part optional, every activation of the implicit-GEMM kernel).
The kernel is ALCOP's three levels on Hopper (``docs/hopper.md``):
a TMA ring of ``smem_stages`` fed by a loader warp, ``reg_stages - 1`` wgmma groups in flight per
consumer warpgroup, persistent programs whose two consumers take alternate tiles (``pingpong``) or split
one. Where it cannot run (no sm90 GPU, Triton's interpreter, operands TMA cannot describe, an epilogue it
does not apply) the config runs as its "tma" twin (``KernelConfig.tma_twin``: the same tiles and ring in
the implicit-GEMM kernel), so a table's record stays usable on any device.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from alcop_triton.build import Launch, Runs, tma_aligned
from alcop_triton.records import WS_DTYPES, KernelConfig, ScheduleError

WS_CC = (9, 0)
"""Compute capability from which the kernel runs (TMA, wgmma, warp specialization: Hopper)."""


@dataclass(frozen=True)
class WarpSpecializedGemm(Runs):
    """The warp-specialized kernel of one (dtype, epilogue, config): ``bind``, ``label`` and calls as
    ``CompiledKernel``'s over (A, B, [bias,] [C]): 2-d A (M x K) and B (K x N) in any of the four stored
    layouts, C a fresh or given row-major (M x N) output. Hashable: equal only to kernels that launch alike
    (``fastpath.launch_kernel`` keys its prebound launches by it)."""

    dtype: str
    epilogue: Any  # kernels.matmul.Epilogue
    config: KernelConfig

    def __post_init__(self) -> None:
        if self.config.async_copy != "ws":
            raise ScheduleError(f"WarpSpecializedGemm: config {self.config} has async_copy="
                                f"{self.config.async_copy!r}, not 'ws'")
        self.config.hopper()  # refuses what the kernel cannot be

    def label(self) -> str:
        return f"warp-specialized sm90 GEMM ({self.config})"

    def applies(self) -> bool:
        """Whether the kernel computes this epilogue itself: ``act(acc + bias) + residual`` with any of the
        activations, but no scale of the product or of the residual (``addmm``'s alpha and beta)."""
        from alcop_triton.hopper.emit import ACTIVATIONS
        ep = self.epilogue
        return (self.dtype in WS_DTYPES and ep.alpha == 1.0 and (not ep.residual or ep.beta == 1.0)
                and ep.activation in ACTIVATIONS)

    def variant(self, m: int, n: int, k: int, layout: str = "nt", sms: int = 132) -> Any:
        """The generated kernel (``hopper.emit.KernelSource``: ``.name``, ``.source`` with its header) that a
        call of an (m x k) @ (k x n) product stored as ``layout`` runs on a GPU of ``sms`` SMs."""
        from alcop_triton.hopper.launch import source
        from alcop_triton.hopper.plan import plan
        ep = self.epilogue
        return source(plan(m, n, k, self.config.hopper(), sms=sms), self.dtype, layout, ep.bias, ep.activation,
                      ep.residual)

    def explain(self, m: int, n: int, k: int, sms: int = 132) -> str:
        """Each of the three levels on this shape: its depth and why (clamps named), as ``CompiledKernel.explain``
        says it of a Triton kernel's buffers."""
        from alcop_triton.hopper.plan import explain, plan
        return explain(plan(m, n, k, self.config.hopper(), sms=sms))

    def twin(self) -> Any:
        from . import matmul
        return matmul.compiled(self.dtype, 0, self.epilogue, self.config.tma_twin())

    def runs_here(self, tensors: Sequence[Any]) -> bool:
        """Whether the kernel runs on ``tensors`` (A, B, [bias,] [residual,] C): an sm90+ CUDA device, 2-d
        operands each stored row- or column-major, C and a residual row-major and contiguous (the residual is
        read by pointers at ``row * N + col``), and TMA's rules on A, B and C (``build.tma_aligned``)."""
        import torch

        from alcop_triton.hopper.launch import stored_layout
        a, b, c = tensors[0], tensors[1], tensors[-1]
        if not self.applies() or a.device.type != "cuda" or torch.cuda.get_device_capability(a.device) < WS_CC:
            return False
        if a.dim() != 2 or b.dim() != 2 or c.dim() != 2 or c.stride(1) != 1 and c.shape[1] > 1:
            return False
        if a.shape[1] == 0 or stored_layout(a) is None or stored_layout(b) is None:
            return False
        if self.epilogue.residual and not tensors[-2].is_contiguous():
            return False
        return tma_aligned([a, b, c])

    def bind(self, *tensors: Any) -> tuple[Any, Any]:
        """(launch, out) as ``CompiledKernel.bind``; the "tma" twin's where the kernel cannot run here."""
        import torch

        from alcop_triton.hopper.launch import descriptor_dims, grid, kernel, launch_args, stored_layout
        n_in = 2 + int(self.epilogue.bias) + int(self.epilogue.residual)
        if len(tensors) not in (n_in, n_in + 1):
            raise TypeError(f"{self.label()}: expected {n_in} inputs and optionally the output, got {len(tensors)} tensors")
        a, b = tensors[0], tensors[1]
        if len(tensors) == n_in:
            if not self.applies() or a.dim() != 2 or b.dim() != 2:
                return self.twin().bind(*tensors)
            tensors = (*tensors, torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device))
        out = tensors[-1]
        if out.numel() == 0 or not self.runs_here(tensors):
            return self.twin().bind(*tensors)
        m, k = a.shape
        n = b.shape[1]
        layout = f"{stored_layout(a)}{stored_layout(b)}"  # both known: runs_here checked them
        sms = _sms(a.device.index if a.device.index is not None else torch.cuda.current_device())
        ks = self.variant(m, n, k, layout, sms)
        ep = self.epilogue
        args, options = launch_args(ks, a, b, out, tensors[2] if ep.bias else None, tensors[-2] if ep.residual else None)
        fn = kernel(ks)
        launch_grid = grid(ks.plan.config, m, n, sms)
        with torch.cuda.device(a.device):
            run = fn[launch_grid]
        return Launch(fn, run, launch_grid, args, options, len(tensors), a.device,
                      descriptor_dims(layout, ks.plan.config, int(ep.bias) + int(ep.residual))), out


@lru_cache(maxsize=16)
def _sms(index: int) -> int:
    import torch
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


def ws_configs(dtype: str) -> list[KernelConfig]:
    """The warp-specialized configs a table measures for a GEMM in ``dtype``: the level-3 set of the Hopper
    ablation (``benchmarks/hopper_gemm.py``, all three levels; each won some of its shapes on the H200):
    ping-pong over 128 x 128 tiles with a ring of 4 or 6, cooperative 128 x 256 with 3 or 4 stages, cooperative
    256 x 128; one wgmma group in flight (a second costs a ring slot and lost everywhere):
    ``docs/decisions.md#d41``."""
    if dtype not in WS_DTYPES:
        return []

    def ws(bm: int, bn: int, stages: int, pingpong: bool, sub: int) -> KernelConfig:
        return KernelConfig(bm, bn, 64, group_m=8, num_warps=8, smem_stages=stages, reg_stages=2, async_copy="ws",
                            persistent=True, pingpong=pingpong, epilogue_subtile=sub)
    return [ws(128, 128, 4, True, 2), ws(128, 128, 6, True, 2), ws(128, 256, 3, False, 2),
            ws(128, 256, 4, False, 4), ws(256, 128, 4, False, 2)]

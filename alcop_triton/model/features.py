"""Features of one (workload, config) for the learned cost model.

Knob features (op one-hot, log2 tiles, stages per level, warps, async mechanism, persistence, split-K) plus the
analytical model's terms. Time terms enter as shares of the threadblock time or as efficiencies
(FLOP rate / peak), never as raw seconds, so that trees learned on one workload transfer to
workloads of other sizes: the ranking objective only ever compares configs of one workload.
Terms of an invalid config are NaN (XGBoost's missing value) and ``valid`` is 0.

The warp-specialized kernel's features (``_WS``: whether the config runs it, its wgmma groups in flight,
consumer warpgroups, ping-pong, epilogue slices) come last and are 0 for every other config, so the
features of the others are what version 3 gave them. A model saved with another version is refused on
``load`` (``xgb_model``: retrain rather than reuse); no trained model ships with the package.
"""

from __future__ import annotations

import math

import numpy as np

from ..records import OPS, KernelConfig, Workload, ceil_div
from .analytical import Estimate, bottleneck_estimate, estimate, runs_as, ws_plan
from .hardware import GPUSpec

FEATURE_VERSION = 4

_KNOBS = ["log2_block_m", "log2_block_n", "log2_block_k", "log2_group_m", "log2_num_warps", "smem_stages",
          "reg_stages", "reg_split", "tma", "persistent", "log2_split_k", "elem_bytes", "is_fp32"]
_SHAPE = ["log2_batch", "log2_m", "log2_n", "log2_k", "log2_total_blocks", "trip_count", "pad_waste",
          "tile_intensity", "log2_stage_bytes", "log2_smem_stage_total"]
_MODEL = ["valid", "wgmma", "blocks_per_sm", "warps_per_sm", "regs_per_thread", "smem_kb", "waves",
          "wave_efficiency", "util", "pred_efficiency", "bottleneck_efficiency", "load_use_ratio",
          "reg_load_use_ratio", "smem_load_bound", "reg_load_bound", "share_main", "share_init",
          "share_epilogue", "share_floor_compute", "share_floor_smem", "share_floor_llc", "share_floor_dram",
          "plm_over_floor", "dram_scale", "share_split_reduction"]
_WS = ["ws", "ws_wgmma_depth", "ws_consumers", "ws_pingpong", "log2_ws_epilogue_subtile"]
FEATURE_NAMES: list[str] = [f"op_{op}" for op in OPS] + _KNOBS + _SHAPE + _MODEL + _WS


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else float("nan")


def featurize(workload: Workload, config: KernelConfig, spec: GPUSpec, est: Estimate | None = None) -> np.ndarray:
    """Feature vector (float64, ordered as ``FEATURE_NAMES``); pass ``est`` to reuse an estimate."""
    e = est if est is not None else estimate(workload, config, spec)
    c = runs_as(workload, config, spec)  # a "ws" config where its kernel does not run: its "tma" twin
    batch, m, n, k = workload.gemm_dims()
    eb = workload.elem_bytes
    tiles = batch * ceil_div(m, c.block_m) * ceil_div(n, c.block_n) * c.split_k
    padded = tiles // c.split_k * c.block_m * c.block_n * ceil_div(k, c.block_k) * c.block_k
    stage = (c.block_m + c.block_n) * c.block_k * eb
    b = e.breakdown
    nan = float("nan")
    f: dict[str, float] = {f"op_{op}": float(workload.op == op) for op in OPS}
    f.update(log2_block_m=_log2(c.block_m), log2_block_n=_log2(c.block_n), log2_block_k=_log2(c.block_k),
             log2_group_m=_log2(c.group_m), log2_num_warps=_log2(c.num_warps), smem_stages=c.smem_stages,
             reg_stages=c.reg_stages, reg_split=c.reg_split, tma=float(c.async_copy != "pointer"),
             persistent=float(c.persistent), log2_split_k=math.log2(c.split_k),
             elem_bytes=eb, is_fp32=float(workload.dtype == "float32"))
    f.update(log2_batch=_log2(batch), log2_m=_log2(m), log2_n=_log2(n), log2_k=_log2(k),
             log2_total_blocks=_log2(tiles), trip_count=ceil_div(ceil_div(k, c.block_k), c.split_k),
             pad_waste=1.0 - batch * m * n * k / padded,
             tile_intensity=c.block_m * c.block_n / (c.block_m + c.block_n),
             log2_stage_bytes=_log2(stage), log2_smem_stage_total=_log2(stage * c.smem_stages))
    f.update(valid=float(e.valid), wgmma=b.get("wgmma", nan), blocks_per_sm=b.get("blocks_per_sm", nan),
             warps_per_sm=b.get("blocks_per_sm", nan) * c.num_warps, regs_per_thread=b.get("regs_per_thread", nan),
             smem_kb=b.get("smem_bytes", nan) / 1024)
    if e.valid:
        res_path = "wgmma" if b["wgmma"] else "mma_sync"
        peak = spec.tc_flops(workload.dtype, res_path)
        tb = b["t_threadblk"]
        floors = max(b["floor_compute"], b["floor_smem_bw"], b["floor_llc_bw"], b["floor_dram_bw"])
        f.update(waves=b["waves"], wave_efficiency=b["waves"] / b["n_batches"], util=b["util"],
                 pred_efficiency=workload.flops / (e.time_s * peak),
                 bottleneck_efficiency=workload.flops / (bottleneck_estimate(workload, c, spec) * peak),
                 load_use_ratio=b["t_smem_load"] / b["t_smem_use"], reg_load_use_ratio=b["t_reg_load"] / b["t_compute"],
                 smem_load_bound=b["smem_load_bound"], reg_load_bound=b["reg_load_bound"],
                 share_main=b["t_main_loop"] / tb, share_init=b["t_init"] / tb, share_epilogue=b["t_epilogue"] / tb,
                 share_floor_compute=b["floor_compute"] / tb, share_floor_smem=b["floor_smem_bw"] / tb,
                 share_floor_llc=b["floor_llc_bw"] / tb, share_floor_dram=b["floor_dram_bw"] / tb,
                 plm_over_floor=b["t_plm"] / floors, dram_scale=b["dram_scale"],
                 share_split_reduction=b["t_split_reduction"] / e.time_s)
    f.update(dict.fromkeys(_WS, 0.0))
    if c.async_copy == "ws":  # as the kernel runs it on this workload (hopper.plan)
        h = ws_plan(workload, c, spec)
        f.update(ws=1.0, ws_wgmma_depth=h.wgmma_depth, ws_consumers=h.consumers,
                 ws_pingpong=float(h.policy == "pingpong"), log2_ws_epilogue_subtile=math.log2(h.epilogue_subtile))
    return np.array([f.get(name, nan) for name in FEATURE_NAMES], dtype=np.float64)


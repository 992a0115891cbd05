"""ALCOP's analytical performance model (paper section 4, thesis Table 5.1) for Triton kernels.

Term by term (names as in Table 5.1, all in seconds)::

    T_kernel      = sum over threadblock batches of T_threadblk (+ launch)
    T_threadblk   = T_init + T_main_loop + T_epilogue
    T_init        = T_smem_load + T_reg_load
    T_main_loop   = PLM(T_smem_load, T_smem_use, N_smem_loop, N_smem_pipe, N_threadblk_per_SM)
    T_smem_use    = max(PLM(T_reg_load, T_compute, N_reg_loop, N_reg_pipe, N_mma_issuers), T_issue)
                    + T_iteration_overhead
    T_compute     = FLOPs_one_reg_loop / (Throughput_SM x Util(warps per block, blocks per SM))
    T_smem_load   = max(T_LLC_load, T_DRAM_load)
    T_LLC_load    = LAT_LLC x s + Bytes_one_smem_loop x N_threadblk_per_batch / BW_LLC
    T_DRAM_load   = LAT_DRAM x s + Bytes_batch_workset_per_loop / BW_DRAM
    T_epilogue    = LAT_DRAM_write + Bytes_output_tile x N_threadblk_per_batch / BW_L2 (+ layout conversion)

Where this model departs from the table, and why:

* The PLM is a latency model: it decides whether loads are hidden. It does not know that the
  blocks of one SM share its tensor cores and shared-memory port, nor that a DRAM-bound loop
  cannot run faster than the bandwidth however many stages it has (its load-bound branch divides
  the bandwidth term by N_pipe). So T_main_loop is the maximum of the PLM and the throughput
  floors of the loop: compute and shared-memory traffic of the SM's blocks, and the L2 and DRAM
  bandwidth of the batch. With one block per SM and hidden loads the floors equal the PLM.
* Batches: full batches run with the occupancy-limited blocks per SM, the last partial batch
  with fewer (blocks spread evenly), so wave quantisation shows up as a cheaper last wave rather
  than a whole extra batch.
* Stores go to the write-back L2 (the epilogue pays L2 bandwidth); the DRAM traffic of the whole
  kernel (modelled reads + output) is a floor on T_kernel instead of a per-batch cost.
* With an explicit register pipeline (reg_stages > 1) the shared-level N_pipe is the register
  prefetch distance, as alcop_triton's codegen realises it (see ``_threadblock``).
* Persistent programs (``config.persistent``) with a pipelined shared level flatten the tile loop
  into the pipeline: every batch after the first hides its T_init and the store's write latency.
* The loop trip count bounds the useful pipeline depth (N_pipe <= N_loop), and on the wgmma path
  the in-flight async MMA holds one stage (N_pipe = num_stages - 1).
* Split-K (``config.split_k`` = S): S times the blocks, each looping over 1/S of the chunks (the
  slices are an extra batch axis, slowest in launch order, reading disjoint K ranges); the partial
  tiles cost 2 x S x 4 bytes per output element of L2 traffic (written, read back by the last block
  of each tile), and the last arrival's serial reduction (an atomic round trip, then S partial tiles
  read by one SM) is exposed once.
* Wave tail (``config.wave_tail``): the rows of tiles within whole waves are estimated as a kernel of
  their own, the remaining rows as the tail's kernel (``TAIL_CONFIG``'s, or with ``tail_split`` this
  tile split along K), less the share of it that runs on the SMs the first kernel's last wave leaves idle.
* The warp-specialized kernel (``async_copy="ws"``, ``alcop_triton.hopper``) is estimated as its
  ``hopper.plan`` runs it on the workload (the ring cut to a tile's chunks, ping-pong made cooperative
  below two tiles per SM, ...), with the same terms and these differences: the loader warp issues
  the TMA copies in its own instruction stream, so no issue time lands on the consumers (T_issue = 0)
  and the shared level's N_pipe is ``stages - wgmma_depth`` (a slot is refilled once the wgmma that
  read it has retired); the register level's PLM is the wgmma's (``wgmma_depth + 1`` groups, its
  latency hidden behind the groups in flight or the other warpgroup of a cooperative tile);
  resources are ``HopperConfig``'s (its shared memory, ``maxnreg`` registers, the loader's warpgroup
  among the threads), and a persistent grid is one program per SM. Ping-pong's two consumers are two
  tiles at once on the SM, sharing its tensor cores (so N_threadblk_per_SM = 2), and every round of
  tiles after a program's first hides its epilogue behind the other consumer's main loop, as a
  persistent program hides the next tile's T_init (the loader runs ahead into it). The epilogue
  stores the tile from registers through one shared-memory pass (no fp32 layout conversion); its
  column slices (``epilogue_subtile``) change shared memory, not time. Where the kernel does not run
  (a batched or float32 GEMM, no wgmma) a "ws" config runs as, and is estimated as, its "tma" twin.

``resources`` does Triton's resource accounting (shared memory as Triton allocates it, a
register estimate, threads) and the occupancy simulation that sets N_threadblk_per_SM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ..hopper.config import HopperConfig
from ..hopper.plan import plan
from ..records import (TAIL_CONFIG, WS_DTYPES, KernelConfig, Workload, ceil_div, tail_split_factor,
                       wave_tail_rows)
from .hardware import GPUSpec

# Triton streams k=16 slices of MMA operands through registers when no explicit register
# pipeline is requested (its prefetch pass double-buffers them), so two slices are live.
_MMA_K = 16
_BASE_REGS = 24           # indices, loop counters, program ids, descriptors: seen in Triton matmul SASS
_SMEM_LAT_CYCLES = 33     # shared-memory load-to-use latency on Ampere/Hopper
_RESERVED_SMEM_PER_BLOCK = 1024  # the driver reserves 1 KB of shared memory per resident block (sm80+)
_L2_FIT_FRACTION = 0.75   # inputs + output up to this share of L2 are read from DRAM once


@dataclass(frozen=True)
class Resources:
    """Per-block resource use of a config and the occupancy it allows.

    ``valid`` is False when the config cannot run (or would spill): ``reason`` then names the
    resource, the amount required and the limit.
    """

    smem_bytes: int
    regs_per_thread: int
    threads: int
    blocks_per_sm: int
    valid: bool
    reason: str = ""
    limited_by: str = ""
    mma_path: str = "mma_sync"


@dataclass(frozen=True)
class Estimate:
    """A predicted kernel time with every model term in ``breakdown`` (seconds unless named)."""

    time_s: float
    valid: bool
    reason: str = ""
    breakdown: dict[str, float] = field(default_factory=dict)


def pipeline_latency(t_load: float, t_use: float, n_loop: int, n_pipe: float, n_mplx: int) -> float:
    """ALCOP's Pipeline Latency Model, verbatim.

    A load is hidden when the computation that can overlap it (the other N_pipe - 1 stages of
    this worker and all stages of the N_mplx - 1 other workers) takes at least as long.
    """
    if t_load <= (n_pipe * n_mplx - 1) * t_use:
        return t_use * n_loop
    return (t_load + t_use) * n_loop / n_pipe


def mma_path(config: KernelConfig | _TileKnobs, spec: GPUSpec) -> str:
    """The MMA instruction family Triton emits for this tile.

    Triton uses wgmma (MMAv3) only when whole warpgroups exist (num_warps % 4 == 0) and the tile
    has 64-row multiples for the m64 instructions; otherwise it falls back to mma.sync (MMAv2).
    """
    if spec.mma == "wgmma" and config.num_warps % 4 == 0 and config.block_m % 64 == 0:
        return "wgmma"
    return "mma_sync"


def _warp_grid(config: KernelConfig | _TileKnobs, path: str) -> tuple[int, int]:
    """Warps (or warpgroups for wgmma) along M and N, as Triton's warpsPerTile V2/V3 assign them."""
    bm, bn, w = config.block_m, config.block_n, config.num_warps
    if path == "wgmma":
        wg = w // 4
        wg_m = max(1, min(wg, bm // 64))   # V3 fills M first, 64 rows per warpgroup
        return wg_m, wg // wg_m
    wm, wn = 1, 1
    while wm * wn < w:                      # V2: split the longer side, M in 16s and N in 8s
        if bm // 16 // wm >= bn // (8 * wn) and wm < bm // 16:
            wm *= 2
        else:
            wn *= 2
    return wm, wn


def _operand_smem_reads(config: KernelConfig | _TileKnobs, path: str, k: int, eb: int) -> float:
    """Bytes the MMAs read from shared memory for a k-slice of one block.

    wgmma: each warpgroup reads its A rows once and B once per m64 instruction. mma.sync: each
    warp ldmatrix-loads its own A rows and B columns, so A is read once per warp column.
    """
    bm, bn = config.block_m, config.block_n
    gm, gn = _warp_grid(config, path)
    if path == "wgmma":
        return k * (bm * gn + (bm / 64) * bn) * eb
    return k * (bm * gn + bn * gm) * eb


def resources(workload: Workload, config: KernelConfig, spec: GPUSpec) -> Resources:
    """Shared memory, registers and threads of one block, and the blocks per SM they allow.

    Shared memory is Triton's allocation: one (A tile + B tile) buffer per stage, and at least one
    even with ``num_stages=1`` because ``tl.dot`` operands are staged through shared memory; the
    epilogue's layout-conversion scratch reuses the freed pipeline buffers, so it only counts when
    larger (except in a flattened persistent loop, where it adds); TMA adds one 8-byte mbarrier per stage. Registers are an estimate: fp32 accumulators,
    MMA operand fragments (mma.sync), the register pipeline's prefetched sub-tiles, 64-bit addresses
    for pointer loads,
    and a fixed base. More than ``spec.max_regs_per_thread`` would spill and is treated as invalid.
    """
    c = runs_as(workload, config, spec)
    if c.async_copy == "ws":
        return _ws_resources(ws_plan(workload, c, spec), spec)
    return _resources(workload.elem_bytes, _TileKnobs(c.block_m, c.block_n, c.block_k, c.num_warps, c.smem_stages,
                                                      c.reg_stages, c.reg_split, c.async_copy, c.persistent), spec)


def ws_kernel_runs(workload: Workload, spec: GPUSpec) -> bool:
    """Whether a "ws" config of ``workload`` runs the warp-specialized kernel on ``spec``: a single GEMM
    (``kernels.matmul.compiled``) in half precision on a GPU with wgmma; elsewhere its "tma" twin runs."""
    return (workload.op in ("matmul", "linear") and workload.gemm_dims()[0] == 1
            and workload.dtype in WS_DTYPES and spec.mma == "wgmma")


def runs_as(workload: Workload, config: KernelConfig, spec: GPUSpec) -> KernelConfig:
    """The config that runs: ``config``, or a "ws" config's "tma" twin where its kernel does not run."""
    if config.async_copy == "ws" and not ws_kernel_runs(workload, spec):
        return config.tma_twin()
    return config


def ws_plan(workload: Workload, config: KernelConfig, spec: GPUSpec) -> HopperConfig:
    """The ``HopperConfig`` a "ws" config runs with on ``workload`` (``hopper.plan``'s clamps applied)."""
    _, m, n, k = workload.gemm_dims()
    return _planned(m, n, k, config.hopper(), spec.num_sms)


@lru_cache(maxsize=4096)
def _planned(m: int, n: int, k: int, h: HopperConfig, sms: int) -> HopperConfig:
    return plan(m, n, k, h, sms=sms).config


@lru_cache(maxsize=4096)
def _ws_resources(h: HopperConfig, spec: GPUSpec) -> Resources:
    """The warp-specialized kernel's program: ``HopperConfig``'s shared memory; the registers its launch
    asks for (``maxnreg``, the same for every thread) over all its warps, the loader's warpgroup included."""
    assert h.maxnreg is not None  # the kernel always has a loader warp (KernelConfig.hopper)
    return _fit(h.smem_bytes, h.maxnreg, 32 * h.total_warps, "wgmma", spec)


class _TileKnobs(NamedTuple):
    """The knobs a block's resources depend on (all but ``group_m`` and ``split_k``): ``_resources``'s key."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    smem_stages: int
    reg_stages: int
    reg_split: int
    async_copy: str
    persistent: bool

    @property
    def sub_k(self) -> int:
        return self.block_k // self.reg_split


@lru_cache(maxsize=1 << 17)
def _resources(eb: int, c: _TileKnobs, spec: GPUSpec) -> Resources:
    """``resources`` of one element size: the workload's shape does not enter, so a space's build, its
    estimates and the cost model's features share one evaluation per tile (configs that differ in
    ``group_m`` or ``split_k`` only share it too)."""
    path = mma_path(c, spec)
    threads = 32 * c.num_warps
    stage = (c.block_m * c.block_k + c.block_k * c.block_n) * eb
    pipeline = stage * max(1, c.smem_stages) + (8 * c.smem_stages if c.async_copy != "pointer" else 0)
    scratch = c.block_m * c.block_n * eb
    # A flattened persistent loop keeps the pipeline buffers live through the epilogue (the next
    # tile's copies are in flight), so the scratch comes on top (measured: 64x64x128 at 7 stages
    # needs 229376 + 8192 bytes).
    smem = pipeline + scratch if c.persistent and c.smem_stages > 1 else max(pipeline, scratch)

    acc = c.block_m * c.block_n / threads
    gm, gn = _warp_grid(c, path)
    if path == "wgmma":
        frag = 0.0   # operands are read from shared memory by the tensor cores
    else:
        warp_m, warp_n = max(16, c.block_m // gm), max(8, c.block_n // gn)
        frag = (warp_m + warp_n) * _MMA_K * eb / 4 / 32 * 2
    # The explicit register pipeline holds R-1 prefetched (A, B) sub-tiles spread over the threads.
    prefetch = (c.block_m + c.block_n) * c.sub_k * eb / 4 / threads * (c.reg_stages - 1)
    addr = 2 * stage / 16 / threads if c.async_copy == "pointer" else 4
    regs = int(8 * math.ceil((acc + frag + prefetch + addr + _BASE_REGS) / 8))
    return _fit(smem, regs, threads, path, spec)


def _fit(smem: int, regs: int, threads: int, path: str, spec: GPUSpec) -> Resources:
    """A block of ``smem`` bytes, ``regs`` registers per thread and ``threads`` threads on ``spec``: whether
    it fits, and how many fit on one SM."""
    warps = threads // 32

    def out(blocks: int, valid: bool, reason: str = "", limited_by: str = "") -> Resources:
        return Resources(smem_bytes=smem, regs_per_thread=regs, threads=threads, blocks_per_sm=blocks,
                         valid=valid, reason=reason, limited_by=limited_by, mma_path=path)

    if smem > spec.smem_per_block:
        return out(0, False, f"shared memory: required {smem} bytes, limit {spec.smem_per_block} bytes per block "
                             f"(lower block sizes or num_stages)", "smem")
    if regs > spec.max_regs_per_thread:
        return out(0, False, f"registers: required ~{regs} per thread, limit {spec.max_regs_per_thread} "
                             f"(would spill; raise num_warps or shrink the tile)", "regs")
    warp_regs = 256 * math.ceil(regs * 32 / 256)   # registers are allocated per warp in 256s
    limits = {
        "smem": spec.smem_per_sm // (smem + _RESERVED_SMEM_PER_BLOCK),
        "regs": (spec.regs_per_sm // warp_regs) // warps,
        "threads": spec.max_threads_per_sm // threads,
        "blocks": spec.max_blocks_per_sm,
    }
    limited_by = min(limits, key=lambda k: limits[k])
    blocks = limits[limited_by]
    if blocks < 1:
        need = {"regs": f"{warp_regs * warps} registers, limit {spec.regs_per_sm} per SM",
                "threads": f"{threads} threads, limit {spec.max_threads_per_sm} per SM",
                "smem": f"{smem + _RESERVED_SMEM_PER_BLOCK} bytes of shared memory, limit {spec.smem_per_sm} per SM"}
        return out(0, False, f"{limited_by}: block needs {need.get(limited_by, limited_by)}", limited_by)
    return out(blocks, True, "", limited_by)


@lru_cache(maxsize=65536)
def _batch_tiles(n_blocks: int, tiles_m: int, tiles_n: int, group_m: int) -> tuple[int, int]:
    """Distinct (batch, row-tile) and (batch, col-tile) pairs touched by program ids 0..n-1.

    Program ids follow Triton's grouped ordering (GROUP_M row tiles swept column by column), with
    the GEMM batch as the slowest axis; the first batch stands for all of them.
    """
    per = tiles_m * tiles_n
    pid = np.arange(n_blocks, dtype=np.int64)
    b, p = pid // per, pid % per
    in_group = group_m * tiles_n
    first_m = (p // in_group) * group_m
    size_m = np.minimum(tiles_m - first_m, group_m)
    pm = first_m + p % size_m
    pn = (p % in_group) // size_m
    return len(np.unique(b * tiles_m + pm)), len(np.unique(b * tiles_n + pn))


@dataclass(frozen=True)
class _Ctx:
    """Per (workload, config) quantities shared by every batch of the kernel."""

    wl: Workload
    c: KernelConfig
    spec: GPUSpec
    res: Resources
    path: str
    batch: int
    m: int
    n: int
    k: int
    tiles_m: int
    tiles_n: int
    n_loop: int           # chunks per block: one split-K slice of ceil(K / BLOCK_K)
    a_dram_ratio: float   # DRAM bytes of A per byte of A tile loads (< 1 for convolutions)
    dram_scale: float     # share of per-batch working-set traffic that really comes from DRAM
    tiles_per_sm: int     # output tiles an SM works on at once (N_threadblk_per_SM)
    ws: HopperConfig | None = None  # the warp-specialized kernel as planned for the workload, or None


def _a_dram_ratio(wl: Workload) -> float:
    """im2col reads each input element up to KH*KW times; L2 absorbs the repeats, DRAM sees the input once."""
    if not wl.op.startswith("conv"):
        return 1.0
    p = wl.conv_params()
    _, m, _, k = wl.gemm_dims()
    input_elems = p["n"] * p["d"] * p["h"] * p["w"] * (p["ci"] // p["groups"])
    return min(1.0, input_elems / (m * k))


def _threadblock(ctx: _Ctx, b_sm: int, n_act: int) -> dict[str, float]:
    """All Table 5.1 terms for one batch with ``b_sm`` blocks per SM and ``n_act`` blocks in total."""
    c, spec, wl, eb = ctx.c, ctx.spec, ctx.wl, ctx.wl.elem_bytes
    clk = spec.clock_hz
    smem_bw = spec.smem_bw_per_sm
    lat_scale = spec.latency_scale

    # Register level: one reg loop is a sub-tile of sub_k along the reduction.
    flops_reg = 2.0 * c.block_m * c.block_n * c.sub_k
    ws = ctx.ws
    if ctx.path == "wgmma":
        # A warpgroup drives all four sub-partitions' tensor cores; a second issuer per SM
        # (another warpgroup or block) fills the gaps between one stream's wgmma waits. In the
        # warp-specialized kernel the issuers of one tile are its warpgroups (two when cooperative).
        n_mplx = ws.tile_warpgroups if ws is not None else c.num_warps // 4
        util = 1.0 if n_mplx * b_sm >= 2 else spec.single_issuer_util
    else:
        # mma.sync runs on the issuing warp's sub-partition: all four need a warp, and two per
        # sub-partition hide the MMA's dependent-issue latency.
        n_mplx = c.num_warps
        per_sub = c.num_warps * b_sm / 4
        util = min(1.0, per_sub) * (1.0 if per_sub >= 2 else spec.single_issuer_util)
    tput_sm = spec.tc_flops(wl.dtype, ctx.path) * spec.compute_eff / spec.num_sms
    t_compute = flops_reg / (tput_sm * util)
    # The MMAs of a sub-tile stream k=16 slices, fetching the next slice's operands while the
    # current one multiplies, so only the first slice's fetch is exposed latency; the rest is
    # bandwidth, charged in the shared-memory floor below.
    reg_bytes = _operand_smem_reads(c, ctx.path, _MMA_K, eb)
    t_reg_load = _SMEM_LAT_CYCLES / clk + reg_bytes / smem_bw
    # The warp-specialized kernel's register level is its wgmma groups in flight (ALCOP's level 2 on Hopper).
    reg_pipe = ws.wgmma_depth + 1 if ws is not None else c.reg_stages
    t_reg_loop = pipeline_latency(t_reg_load, t_compute, c.reg_split, reg_pipe, n_mplx)

    # Load issue: pointer loads spend address arithmetic + one cp.async per 16 bytes per thread,
    # spread over the block's schedulers; TMA issues one descriptor copy per operand per stage.
    stage_bytes = (c.block_m + c.block_n) * c.block_k * eb
    conv = spec.conv_index_factor if wl.op.startswith("conv") else 1.0
    a_share = c.block_m / (c.block_m + c.block_n)
    if ws is not None:
        t_issue = 0.0  # the loader warp issues the copies in its own instruction stream
    elif c.async_copy == "pointer":
        warp_instr = stage_bytes / 16 / 32
        t_issue = warp_instr * spec.ptr_issue_cycles * (1 - a_share + a_share * conv) / min(4, c.num_warps) / clk
    else:
        t_issue = spec.tma_issue_cycles * (1 - a_share + a_share * conv) / clk
    # Each sub-tile's dot ends in its own wait when the register level splits the chunk.
    t_overhead = spec.iter_overhead_cycles * c.reg_split / clk
    # Load issue runs on the load/store pipe while the tensor cores work (wgmma is asynchronous;
    # mma.sync warps interleave with the issuing warps), so it overlaps the MMAs; the barrier or
    # mbarrier wait that closes an iteration does not.
    t_smem_use = max(t_reg_loop, t_issue) + t_overhead

    # Shared level: loads of one stage for every block of the batch.
    t_llc = spec.lat_l2_read * lat_scale + stage_bytes * n_act / spec.l2_bw
    u_m, u_n = _batch_tiles(n_act, ctx.tiles_m, ctx.tiles_n, c.group_m)
    ws_iter = (u_m * min(c.block_m, ctx.m) * ctx.a_dram_ratio + u_n * min(c.block_n, ctx.n)) * c.block_k * eb
    dram_iter = ws_iter * ctx.dram_scale
    t_dram = spec.lat_dram_read * lat_scale + dram_iter / spec.dram_bw
    t_smem_load = max(t_llc, t_dram)

    n_loop = ctx.n_loop
    # Triton keeps one wgmma group in flight (warpgroup.wait(1)); its stage buffer cannot be
    # refilled until it retires, so on that path one of the S buffers always belongs to the
    # tensor cores (measured: num_stages=2 is nearly as slow as 1 with wgmma, not with mma.sync).
    if ws is not None:
        # The loader refills a slot once the wgmma that read it has retired: with wgmma_depth groups in
        # flight it keeps stages - 1 - depth chunks ahead of the one in use.
        n_pipe: float = max(1, min(ws.stages - ws.wgmma_depth, n_loop))
    elif c.reg_stages > 1:
        # alcop_triton's register level (rewrite/prefetch_reg.py) loads sub-tiles from global
        # memory into registers R-1 sub-tiles ahead, as loop-carried values: Triton's cp.async
        # pipeline no longer applies (measured: num_stages stops mattering), and the load-ahead
        # distance is sub-tiles = (R-1)/REG_SPLIT chunks.
        n_pipe = max(1.0, min(1.0 + (c.reg_stages - 1) / c.reg_split, n_loop))
    else:
        n_pipe = max(1, min(c.smem_stages - (1 if ctx.path == "wgmma" else 0), n_loop))
    t_plm = pipeline_latency(t_smem_load, t_smem_use, n_loop, n_pipe, b_sm)
    smem_traffic = stage_bytes + _operand_smem_reads(c, ctx.path, c.block_k, eb)
    floors = {
        "floor_compute": b_sm * t_smem_use * n_loop,
        "floor_smem_bw": b_sm * smem_traffic / smem_bw * n_loop,
        "floor_llc_bw": stage_bytes * n_act / spec.l2_bw * n_loop,
        "floor_dram_bw": dram_iter / spec.dram_bw * n_loop,
    }
    t_main = max(t_plm, *floors.values())

    t_init = t_smem_load + t_reg_load
    out_tile = c.block_m * c.block_n * eb
    # Accumulators leave through a shared-memory layout conversion, then stores land in the
    # write-back L2, which drains to DRAM while later batches run: the batch pays L2 bandwidth,
    # and DRAM write bandwidth is charged once for the whole kernel (see ``estimate``).
    # The warp-specialized kernel converts in registers and passes the tile through shared memory once,
    # to its TMA store.
    staged = out_tile if ws is not None else c.block_m * c.block_n * 4 + out_tile
    t_epilogue = spec.lat_dram_write + out_tile * n_act / spec.l2_bw + b_sm * staged / smem_bw
    return {
        "t_threadblk": t_init + t_main + t_epilogue, "t_init": t_init, "t_main_loop": t_main,
        "t_plm": t_plm, "t_epilogue": t_epilogue, "t_smem_load": t_smem_load, "t_smem_use": t_smem_use,
        "t_reg_load": t_reg_load, "t_reg_loop": t_reg_loop, "t_compute": t_compute, "t_issue": t_issue,
        "t_llc": t_llc, "t_dram": t_dram, "util": util, "blocks_per_sm_active": float(b_sm),
        "blocks_in_batch": float(n_act), "dram_bytes_per_loop": dram_iter,
        "smem_load_bound": float(t_smem_load > (n_pipe * b_sm - 1) * t_smem_use),
        "reg_load_bound": float(t_reg_load > (reg_pipe * n_mplx - 1) * t_compute),
        **floors,
    }


def _context(workload: Workload, config: KernelConfig, spec: GPUSpec, res: Resources) -> _Ctx:
    batch, m, n, k = workload.gemm_dims()
    c, eb = config, workload.elem_bytes
    ws = ws_plan(workload, c, spec) if c.async_copy == "ws" else None
    tiles_per_sm = res.blocks_per_sm
    if ws is not None:
        # a persistent grid is one program per SM; ping-pong's program works on two tiles at once
        tiles_per_sm = (1 if ws.persistent else res.blocks_per_sm) * ws.consumer_partitions
    tiles_m, tiles_n = ceil_div(m, c.block_m), ceil_div(n, c.block_n)
    a_ratio = _a_dram_ratio(workload)
    # Inputs and output that fit in L2 come from DRAM once; otherwise every batch refetches its
    # working set. Compare the sum of per-batch working sets with the compulsory traffic.
    compulsory_in = batch * (m * k * a_ratio + k * n) * eb
    fits = compulsory_in + batch * m * n * eb <= _L2_FIT_FRACTION * spec.l2_bytes
    per_batch = spec.num_sms * tiles_per_sm
    total = batch * tiles_m * tiles_n * c.split_k
    n_loop = ceil_div(ceil_div(k, c.block_k), c.split_k)
    k_slice = min(k, n_loop * c.block_k)
    dram_scale = 1.0
    if fits:
        n_full, rem = divmod(total, per_batch)
        loads = 0.0
        for n_act, count in ((per_batch, n_full), (rem, 1 if rem else 0)):
            if count:
                u_m, u_n = _batch_tiles(n_act, tiles_m, tiles_n, c.group_m)
                loads += count * (u_m * min(c.block_m, m) * a_ratio + u_n * min(c.block_n, n)) * k_slice * eb
        dram_scale = min(1.0, compulsory_in / loads) if loads > 0 else 1.0
    return _Ctx(wl=workload, c=c, spec=spec, res=res, path=res.mma_path, batch=batch, m=m, n=n, k=k,
                tiles_m=tiles_m, tiles_n=tiles_n, n_loop=n_loop, a_dram_ratio=a_ratio,
                dram_scale=dram_scale, tiles_per_sm=tiles_per_sm, ws=ws)


def estimate(workload: Workload, config: KernelConfig, spec: GPUSpec) -> Estimate:
    """Predicted time of ``config`` on ``workload`` with every term of the model in ``breakdown``.

    Invalid configs (out of shared memory, registers, ...) give ``valid=False``, ``time_s=inf`` and
    the reason; tiles larger than the problem are valid (they are masked, and pay for the padding).
    """
    config = runs_as(workload, config, spec)
    res = resources(workload, config, spec)
    base = {"smem_bytes": float(res.smem_bytes), "regs_per_thread": float(res.regs_per_thread),
            "threads": float(res.threads), "blocks_per_sm": float(res.blocks_per_sm),
            "wgmma": float(res.mma_path == "wgmma"), "ws": float(config.async_copy == "ws")}
    if not res.valid:
        return Estimate(math.inf, False, res.reason, base)
    if config.wave_tail:
        return _wave_tail(workload, config, spec, res.blocks_per_sm)
    ctx = _context(workload, config, spec, res)
    total = ctx.batch * ctx.tiles_m * ctx.tiles_n * config.split_k
    per_batch = spec.num_sms * ctx.tiles_per_sm
    n_full, rem = divmod(total, per_batch)
    full = _threadblock(ctx, ctx.tiles_per_sm, per_batch) if n_full else None
    last = _threadblock(ctx, ceil_div(rem, spec.num_sms), rem) if rem else None
    t_batches = n_full * (full["t_threadblk"] if full else 0.0) + (last["t_threadblk"] if last else 0.0)
    n_batches = n_full + (1 if rem else 0)
    shown = full if full is not None else last
    assert shown is not None  # total >= 1 because Workload rejects empty GEMM dims
    hidden = 0.0
    ws = ctx.ws
    persistent, stages = (ws.persistent, ws.stages) if ws is not None else (config.persistent, config.smem_stages)
    if persistent and stages > 1 and n_batches > 1:
        # Persistent programs with the tile loop flattened into the pipeline (or a loader warp running
        # ahead into the next tile): each tile after a program's first has its first chunks copied during
        # the previous tile's epilogue, so its load latency (T_init) and the store's write latency leave
        # the critical path; in ping-pong the whole epilogue overlaps the other consumer's main loop.
        overlapped = spec.lat_dram_write
        if ws is not None and ws.policy == "pingpong":
            overlapped = min(shown["t_epilogue"], shown["t_main_loop"])
        hidden = (n_batches - 1) * (shown["t_init"] + overlapped)
        t_batches -= hidden
    # Kernel-wide DRAM floor: the modelled reads of every batch plus the output written once.
    dram_reads = sum(count * tb["dram_bytes_per_loop"] * ctx.n_loop
                     for count, tb in ((n_full, full), (1, last)) if tb is not None)
    t_dram_kernel = (dram_reads + ctx.batch * ctx.m * ctx.n * workload.elem_bytes) / spec.dram_bw
    t_split = _split_reduction(ctx, total)
    time = max(t_batches, t_dram_kernel) + t_split + spec.launch_s
    return Estimate(time, True, "", {
        **base, **shown,
        "n_batches": float(n_batches), "n_full_batches": float(n_full), "t_hidden_by_persistence": hidden,
        "t_last_batch": last["t_threadblk"] if last else 0.0, "waves": total / per_batch,
        "total_blocks": float(total), "n_loop": float(ctx.n_loop), "dram_scale": ctx.dram_scale,
        "t_launch": spec.launch_s, "t_dram_kernel": t_dram_kernel, "t_split_reduction": t_split, "time_s": time,
        "tiles_per_sm": float(ctx.tiles_per_sm),
    })


def _wave_tail(workload: Workload, config: KernelConfig, spec: GPUSpec, blocks_per_sm: int) -> Estimate:
    """A wave-tail config (``Schedule.wave_tail``): the rows of tiles within whole waves as one kernel, the
    rest as the tail's kernel (``TAIL_CONFIG``'s, or with ``tail_split`` this tile split along K, as
    ``CompiledKernel._head`` picks it), which starts on the SMs that the first kernel's last wave leaves
    idle (from its start where that wave is partial) and otherwise after it."""
    batch, m, n, k = workload.gemm_dims()
    plain = config.replace(wave_tail=False, tail_split=False)
    tiles_m, tiles_n = ceil_div(m, config.block_m), ceil_div(n, config.block_n)
    rows = wave_tail_rows(tiles_m, tiles_n, spec.num_sms)  # as CompiledKernel._head splits the launch
    if batch != 1 or workload.op not in ("matmul", "linear") or rows == 0:
        return estimate(workload, plain, spec)  # launched as one kernel (CompiledKernel._head)
    head = estimate(Workload(workload.op, (rows * config.block_m, n, k), workload.dtype, workload.layout), plain, spec)
    split = tail_split_factor((tiles_m - rows) * tiles_n, ceil_div(k, config.block_k), spec.num_sms,
                              config.smem_stages) if config.tail_split else 1
    tail = estimate(Workload(workload.op, (m - rows * config.block_m, n, k), workload.dtype, workload.layout),
                    plain.replace(split_k=split) if split > 1 else TAIL_CONFIG, spec)
    if not tail.valid:
        return tail
    # The head's last batch of programs leaves (1 - active share) of the GPU to the tail while it runs.
    per_batch = spec.num_sms * blocks_per_sm
    active = (rows * tiles_n) % per_batch or per_batch
    overlap = head.breakdown.get("t_threadblk", 0.0) * (1 - active / per_batch)
    t_tail = max(0.0, tail.time_s - spec.launch_s - overlap)
    time = head.time_s + t_tail
    return Estimate(time, True, "", {**head.breakdown, "t_wave_tail": t_tail, "time_s": time})


def _split_reduction(ctx: _Ctx, total_blocks: int) -> float:
    """Split-K's extra time: float32 partial tiles through L2 (every block writes one, the last block of
    each tile reads all S back), plus the exposed tail of the last arrival (atomic, then S tiles on one SM)."""
    s = ctx.c.split_k
    if s == 1:
        return 0.0
    spec, tile_f32 = ctx.spec, ctx.c.block_m * ctx.c.block_n * 4
    traffic = 2 * total_blocks * tile_f32 / spec.l2_bw
    tail = 2 * spec.lat_l2_read * spec.latency_scale + s * tile_f32 / (spec.l2_bw / spec.num_sms)
    return traffic + tail


def bottleneck_estimate(workload: Workload, config: KernelConfig, spec: GPUSpec) -> float:
    """The paper's baseline: max(compute, shared-memory load, DRAM load) at full utilisation.

    Compute is the workload's FLOPs at the GPU's tensor-core rate; shared-memory load is every
    block's tile traffic at L2 bandwidth; DRAM load is the compulsory traffic. It shares the
    resource check with ``estimate`` (inf when invalid) so comparisons are about the time model.
    """
    res = resources(workload, config, spec)
    if not res.valid:
        return math.inf
    batch, m, n, k = workload.gemm_dims()
    c, eb = config, workload.elem_bytes
    tiles = batch * ceil_div(m, c.block_m) * ceil_div(n, c.block_n)
    t_compute = workload.flops / spec.tc_flops(workload.dtype, res.mma_path)
    t_smem = tiles * (c.block_m + c.block_n) * ceil_div(k, c.block_k) * c.block_k * eb / spec.l2_bw
    t_dram = workload.min_bytes / spec.dram_bw
    return max(t_compute, t_smem, t_dram)

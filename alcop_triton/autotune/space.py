"""Config spaces: the knobs per op, static pruning, analytical top-k, and the ablation variants.

A ``ConfigSpace`` is an ordered, de-duplicated tuple of valid ``KernelConfig``s for one workload
on one GPU, plus a count of what was pruned and why (users asked to see pruned configs, not to
have them vanish: triton-ascend#633). Order is the grid-search order (lexicographic in the knobs).

Pruning, cheapest first:
1. shape rules: a tile never exceeds the problem's next power of two (bigger tiles only add
   masked work and duplicate a smaller config), stages beyond the reduction trip count pipeline
   nothing (a persistent kernel's flattened loop runs every chunk of a program's tiles),
   ``reg_split > 1`` without register prefetch only splits the dot, TMA needs sm90, persistence
   needs more tiles than SMs, split-K is for problems with fewer tiles than SMs and slices of at
   least two chunks, a wave tail is for one-batch GEMMs by TMA on sm90 with more tiles than SMs, the
   warp-specialized kernel (``async_copy="ws"``) is for a single half-precision GEMM on sm90 with wgmma
   (``WS_CONFIG_RULES``: its own rules, as ``KernelConfig`` checks them; ``_ws_rules``: where it runs,
   and none of its configs that ``hopper.plan`` would run as another);
2. the variant filter (the paper's ablation: none / double_buffer / smem_multistage / full);
3. the model's resource accounting: ``model.analytical.resources(...).valid`` (shared memory,
   registers, threads), so out-of-resource configs are never compiled;
4. optionally the analytical model's ``top_k`` (an int, or a fraction <= 1 as in Triton).
At least one config always survives: if the model rejects everything, the config with the
smallest shared-memory footprint is kept and compilation gets the last word.

The product is enumerated in two families (``_families``): every other copy mechanism with the
warp-specialized knobs at their defaults, and the "ws" configs over the values their kernel can take
(``WS_FAMILY``). A combination outside both is one ``KernelConfig`` refuses for its warp-specialized
knobs alone (``pingpong`` without "ws", a "ws" config of 2 warps) or a ws tile outside ``WS_TILES``: it
is neither enumerated nor counted in ``pruned``. So the two knobs of that kernel add its few hundred
configs to a space instead of multiplying it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import numpy as np

from ..errors import ScheduleError, TuningError
from ..hopper.config import COMPILER_SLACK, ELEM_BYTES, MAX_ACC_REGS, SMEM_LIMIT, WARPGROUP
from ..records import MAX_SPLIT_K, TAIL_BLOCK, WS_DTYPES, KernelConfig, Workload

VARIANTS: tuple[str, ...] = ("none", "double_buffer", "smem_multistage", "full")
"""Ablation variants (ALCOP Figure 10): no pipelining, 2-stage shared only, multi-stage shared only,
multi-stage multi-level (shared + register)."""

KNOB_NAMES: tuple[str, ...] = ("block_m", "block_n", "block_k", "group_m", "num_warps", "smem_stages",
                               "reg_stages", "reg_split", "async_copy", "persistent", "split_k", "wave_tail",
                               "tail_split", "pingpong", "epilogue_subtile")
_knob_values = operator.attrgetter(*KNOB_NAMES)
_LOCKS = threading.Lock()  # guards the creation of each space's own lock (``ConfigSpace.details``)


class Candidate(NamedTuple):
    """Knob values before they are made a ``KernelConfig`` (fields as ``KNOB_NAMES``): what ``shape_reason``
    and ``variant_ok`` read. One combination (ints, a str, a bool), or numpy columns of a whole product of
    knob values (``_survivors``), which the same rules prune elementwise."""

    block_m: Any
    block_n: Any
    block_k: Any
    group_m: Any
    num_warps: Any
    smem_stages: Any
    reg_stages: Any
    reg_split: Any
    async_copy: Any
    persistent: Any
    split_k: Any
    wave_tail: Any
    tail_split: Any
    pingpong: Any
    epilogue_subtile: Any


@dataclass(frozen=True)
class Knobs:
    """Candidate values per knob; the space is their product, filtered."""

    block_m: tuple[int, ...] = (16, 32, 64, 128, 256)
    block_n: tuple[int, ...] = (16, 32, 64, 128, 256)
    block_k: tuple[int, ...] = (16, 32, 64, 128)
    group_m: tuple[int, ...] = (1, 8)
    num_warps: tuple[int, ...] = (2, 4, 8)
    smem_stages: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    reg_stages: tuple[int, ...] = (1, 2, 3)
    reg_split: tuple[int, ...] = (1, 2, 4)
    async_copy: tuple[str, ...] = ("pointer", "tma", "box", "ws")
    persistent: tuple[bool, ...] = (False, True)
    split_k: tuple[int, ...] = (1, 2, 4, 8)
    wave_tail: tuple[bool, ...] = (False, True)
    tail_split: tuple[bool, ...] = (False, True)
    pingpong: tuple[bool, ...] = (False, True)
    epilogue_subtile: tuple[int, ...] = (1, 2, 4)

    def values(self) -> list[tuple[Any, ...]]:
        return [getattr(self, k) for k in KNOB_NAMES]


DISPATCH_KNOBS = Knobs(block_m=(16, 32, 64, 128), block_n=(32, 64, 128, 256), block_k=(32, 64, 128), group_m=(8,),
                       num_warps=(4, 8), smem_stages=(3, 4, 5), reg_stages=(1,), reg_split=(1,),
                       async_copy=("pointer", "tma", "box"), wave_tail=(False,), tail_split=(False,),
                       pingpong=(False,), epilogue_subtile=(1,))
"""The model's own shortlist when a call finds no measurement of its shape: the knobs that decide most
of the time on the GPUs measured so far (the register level never won there), small enough that
ranking it stays well under a second on a first call. Wave tails and the warp-specialized kernel
(``async_copy="ws"``) come from measurements only (tuning, the table, its seeds
``kernels.matmul_ws.ws_configs``): the model's estimate of a wave tail's overlap is new and not yet
checked against many shapes, and its estimate of a loader warp, wgmma groups in flight and ping-pong
(``model.analytical``) is a sketch of what the kernel does, not yet fitted to its measurements."""

SMALL_PROBLEM_KNOBS = Knobs(block_m=(16, 32), block_n=(16, 32, 64), block_k=(16, 32, 64), group_m=(8,),
                            num_warps=(2, 4), smem_stages=(1, 2, 3), reg_stages=(1,), reg_split=(1,),
                            async_copy=("pointer", "tma", "box"), persistent=(False,), split_k=(1,),
                            wave_tail=(False,), tail_split=(False,), pingpong=(False,), epilogue_subtile=(1,))
"""The shortlist of problems no ``DISPATCH_KNOBS`` config fits: a dim below its smallest tile, a
reduction of one or two chunks."""


def dispatch_knobs(op: str, small: bool = False) -> Knobs:
    """``DISPATCH_KNOBS`` (or ``SMALL_PROBLEM_KNOBS``) restricted to what ``op`` can run. Convolutions
    keep pointer copies: the model knows nothing of a TMA window's box (its waste where output rows are
    narrower than the tile), so TMA convolutions come from measurements (the table, tuning) only."""
    knobs = SMALL_PROBLEM_KNOBS if small else DISPATCH_KNOBS
    return dataclasses.replace(knobs, async_copy=("pointer",)) if op in CONV_OPS else knobs


CONV_OPS = ("conv1d", "conv2d", "conv3d")
"""Convolutions run as implicit GEMM with the GEMMs' knobs; TMA copies windows of a stride-1,
channels-last input (``analysis.window_blocks``; ``shape_reason`` prunes the other layers' TMA configs)."""


def variant_ok(config: KernelConfig | Candidate, variant: str) -> Any:
    """Whether ``config`` belongs to an ablation variant (elementwise where its knobs are numpy columns)."""
    if variant == "none":
        return (config.smem_stages == 1) & (config.reg_stages == 1)
    if variant == "double_buffer":
        return (config.smem_stages == 2) & (config.reg_stages == 1)
    if variant == "smem_multistage":
        return config.reg_stages == 1
    if variant == "full":
        return True
    raise ScheduleError(f"variant {variant!r} is unknown; expected one of {VARIANTS}")


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _cc_tuple(cc: Any) -> tuple[int, int]:
    if isinstance(cc, str):
        major, _, minor = cc.partition(".")
        return int(major), int(minor or 0)
    return int(cc[0]), int(cc[1])


def _cdiv(a: Any, b: Any) -> Any:
    # Ceiling division of ints or of numpy int columns alike.
    return -(-a // b)


Rule = tuple[str, Callable[[Any], Any]]

WS = "ws"
WS_TILES: tuple[int, ...] = (128, 256)
WS_BLOCK_K: tuple[int, ...] = (64,)
"""The warp-specialized kernel's tiles in the space: 128 or 256 rows and columns, chunks of 64, the tiles its
H200 measurements cover (``benchmarks/results/hopper_gemm/``, ``docs/hopper.md``: every "ws" config there
is 128 x 128, 128 x 256 or 256 x 128 with block_k 64). Its wgmmas are 64 rows per consumer warpgroup (a
cooperative pair splits 128), so a smaller tile gives each warpgroup one short wgmma per chunk, which
nothing measured says pays; 64 half-precision columns are one 128-byte swizzled TMA row. 256 x 256 is
enumerated, and pruned: its accumulator needs more than 128 registers per thread."""
WS_FAMILY: dict[str, tuple[Any, ...]] = dict(block_m=WS_TILES, block_n=WS_TILES, block_k=WS_BLOCK_K,
                                             num_warps=(4, 8), reg_split=(1,), split_k=(1,), wave_tail=(False,))
"""The values a "ws" config's knobs are enumerated over (``_families``): its tiles, and what
``KernelConfig.hopper`` allows (one or two consumer warpgroups; no register sub-tiles, split-K or wave
tail). The shape rules (``WS_CONFIG_RULES``, ``_ws_rules``) say the same of one config."""


def _none_of(column: Any, values: tuple[Any, ...]) -> Any:
    """``column`` is none of ``values`` (elementwise on numpy columns)."""
    return functools.reduce(operator.and_, (column != v for v in values))


def _is_ws(c: Any) -> Any:
    return c.async_copy == WS


def _ws_tile_warpgroups(c: Any) -> Any:
    """``HopperConfig.tile_warpgroups``: two when 8 warps share one tile (cooperative), else one."""
    return 1 + ((c.num_warps == 2 * WARPGROUP) & np.logical_not(c.pingpong))


def ws_smem_bytes(c: Any) -> Any:
    """``HopperConfig.smem_bytes`` of a "ws" config's knobs (ints or numpy columns): the TMA ring, the
    epilogue buffer of each consumer partition (two in ping-pong), the ring's and the turns' mbarriers
    and the compiler's slack."""
    slices = np.maximum(c.epilogue_subtile, 1)
    ring = c.smem_stages * (c.block_m + c.block_n) * c.block_k * ELEM_BYTES
    epilogue = (1 + c.pingpong) * c.block_m * (c.block_n // slices) * ELEM_BYTES
    return ring + epilogue + 8 * (2 * c.smem_stages + 2 * c.pingpong) + COMPILER_SLACK


def ws_acc_regs(c: Any) -> Any:
    """``HopperConfig.acc_regs`` of a "ws" config's knobs: fp32 accumulator registers per consumer thread."""
    return c.block_m * c.block_n // (32 * WARPGROUP * _ws_tile_warpgroups(c))


WS_CONFIG_RULES: tuple[Rule, ...] = (
    ("pingpong or epilogue_subtile without the warp-specialized kernel",
     lambda c: np.logical_not(_is_ws(c)) & (c.pingpong | (c.epilogue_subtile != 1))),
    ("ws: one or two consumer warpgroups (4 or 8 warps), no register sub-tiles, split-K or wave tail",
     lambda c: _is_ws(c) & (_none_of(c.num_warps, (4, 8)) | (c.reg_split != 1) | (c.split_k != 1) | c.wave_tail)),
    ("ws tile: block_m 64 to 256, block_n and block_k at most 256 and 128",
     lambda c: _is_ws(c) & ((c.block_m < 64) | (c.block_m > 256) | (c.block_n > 256) | (c.block_k > 128))),
    ("ws: more wgmma groups in flight than ring stages - 1", lambda c: _is_ws(c) & (c.reg_stages > c.smem_stages)),
    ("ws: epilogue slices narrower than 16 columns",
     lambda c: _is_ws(c) & (c.block_n // np.maximum(c.epilogue_subtile, 1) < 16)),
    ("ws ping-pong without two consumers (8 warps) and persistent programs",
     lambda c: _is_ws(c) & c.pingpong & ((c.num_warps != 2 * WARPGROUP) | np.logical_not(c.persistent))),
    ("ws: block_m not a multiple of 64 rows per warpgroup of the tile",
     lambda c: _is_ws(c) & (c.block_m % (64 * _ws_tile_warpgroups(c)) != 0)),
    (f"ws: more than {MAX_ACC_REGS} accumulator registers per thread",
     lambda c: _is_ws(c) & (ws_acc_regs(c) > MAX_ACC_REGS)),
    (f"ws: shared memory over {SMEM_LIMIT} bytes", lambda c: _is_ws(c) & (ws_smem_bytes(c) > SMEM_LIMIT)))
"""``KernelConfig``'s own checks of the warp-specialized knobs (``KernelConfig.hopper``, ``HopperConfig``'s
rules and arithmetic) as column expressions: a combination of valid knob values that passes them all makes a
"ws" config, one that fails any is refused (``tests/autotune/test_autotune_space.py`` checks both ways)."""


SCALAR_LOADS_MAX = 80
"""Most operand elements per thread and reduction chunk (``BLOCK_K * (BLOCK_M + BLOCK_N) / threads``) for a
GEMM whose rows 16-byte loads cannot read (``_shape_rules``): the largest measured to run well (16x64x128
with 4 warps on 257x263x271, 1.19x cuBLAS, ``docs/decisions.md#d04``); 128 and 192 did not."""


@functools.lru_cache(maxsize=64)
def _shape_rules(workload: Workload, spec: Any | None) -> tuple[Rule, ...]:
    """``shape_reason``'s rules in order: (reason, test). A test reads a config's knobs as attributes and uses
    only operators that work on ints and on numpy columns alike, so the same rule prunes one config
    (``shape_reason``) or a whole product of knob values at once (``ConfigSpace.build``)."""
    batch, m, n, k = workload.gemm_dims()
    top_m, top_n, top_k = (max(16, _next_pow2(d)) for d in (m, n, k))
    conv = workload.op in CONV_OPS

    def tiles(c: Any) -> Any:
        return batch * _cdiv(m, c.block_m) * _cdiv(n, c.block_n)

    def trips(c: Any) -> Any:  # chunks of one program (one split-K slice)
        return _cdiv(_cdiv(k, c.block_k), c.split_k)

    def tail_split(c: Any) -> Any:  # records.tail_split_factor of the tail a wave-tail config leaves
        tn = _cdiv(n, c.block_n)
        rows = tiles(c) // sms * sms // tn
        tail_tiles = np.maximum(tiles(c) - rows * tn, 1)
        split = np.minimum(np.minimum(sms // tail_tiles, _cdiv(k, c.block_k) // np.maximum(c.smem_stages, 1)),
                           MAX_SPLIT_K)
        return np.where(split >= 2, split, 1)

    rules: list[Rule] = [
        ("tile larger than the problem", lambda c: (c.block_m > top_m) | (c.block_n > top_n) | (c.block_k > top_k))]
    if spec is not None:
        sms = spec.num_sms
        rules += [
            ("split-K with enough tiles to fill the GPU", lambda c: (c.split_k > 1) & (tiles(c) >= sms)),
            # half the split would already fill the GPU: the extra slices only add partial-sum traffic
            ("split-K beyond filling the GPU", lambda c: (c.split_k > 1) & (tiles(c) * (c.split_k // 2) >= sms))]
    rules += [
        ("split-K slices shorter than two chunks", lambda c: (c.split_k > 1) & (trips(c) < 2)),
        # The register prologue would sit inside the flattened tile loop; on the GPU the register
        # level loses to shared-only pipelining anyway (docs/decisions.md#d05).
        ("register prefetch in a persistent tile loop",
         lambda c: c.persistent & (c.reg_stages > 1) & np.logical_not(_is_ws(c)))]
    if batch != 1 or workload.op not in ("matmul", "linear") or spec is None or _cc_tuple(spec.cc) < (9, 0):
        # the tail launch overlaps the first by programmatic dependent launch (sm90) and splits rows of one batch
        rules.append(("wave tail outside one-batch GEMMs on sm90", lambda c: c.wave_tail))
    else:
        rules += [("wave tail without TMA", lambda c: c.wave_tail & (c.async_copy != "tma")),
                  # the register level does not pay on sm90 (docs/decisions.md#d05): twins of
                  # shared-only configs keep the space, and the model's time ranking it, near its old size
                  ("wave tail with register prefetch", lambda c: c.wave_tail & ((c.reg_stages > 1) | (c.reg_split > 1))),
                  # whole waves of one tile per SM, or less than one (records.wave_tail_rows is 0):
                  # launched as its plain twin
                  ("wave tail without a short last wave",
                   lambda c: c.wave_tail & ((tiles(c) <= sms) | (tiles(c) % sms == 0))),
                  # records.tail_split_factor below 2: the tail runs TAIL_CONFIG's tiles, as the plain twin's
                  ("tail split where no split of two fits",
                   lambda c: c.tail_split & (tail_split(c) < 2))]
    if conv:
        # Measured on the H100: persistent convolutions lose on every layer of the conv grid
        # (docs/decisions.md#d06), by 20-70x where the model ranked them first (a
        # conv3d 3x3x3 layer: 62 ms against 0.9 ms with one program per tile).
        rules.append(("persistent convolution", lambda c: c.persistent))
    def flattened(c: Any) -> Any:
        # a persistent Triton program's flattened loop runs every chunk of its tiles; the warp-specialized
        # kernel's ring is cut to one tile's chunks (hopper.plan)
        return c.persistent & np.logical_not(_is_ws(c))

    if spec is not None:
        rules += [
            ("persistent with no more tiles than SMs", lambda c: c.persistent & (tiles(c) <= sms)),
            ("more smem stages than reduction steps", lambda c: (c.smem_stages > 1) & (
                c.smem_stages > trips(c) * (1 + flattened(c) * (_cdiv(tiles(c), sms) - 1))))]
    else:  # without a GPU the tiles per program are unknown: a persistent config keeps its stages
        rules.append(("more smem stages than reduction steps",
                      lambda c: (c.smem_stages > 1) & (c.smem_stages > trips(c)) & np.logical_not(flattened(c))))
    rules += [
        ("reg_split without register prefetch", lambda c: (c.reg_split > 1) & (c.reg_stages == 1)),
        ("more register stages than sub-tiles",
         lambda c: (c.reg_stages > 1) & (c.reg_stages > c.reg_split * _cdiv(k, c.block_k))),
        ("more warps than the tile can feed", lambda c: c.num_warps > np.maximum(2, c.block_m * c.block_n // 256))]
    if spec is not None and _cc_tuple(spec.cc) < (9, 0):
        rules.append(("tma needs sm90", lambda c: c.async_copy != "pointer"))
    if not conv and any(r % (16 // workload.elem_bytes) for r in workload.operand_rows()):
        # Rows that 16-byte loads cannot read, used as they are (kernels.matmul.aligned_operands copies
        # them only for a long reduction): every element is a load of its own, with its own pointer and
        # predicate in registers, so a tile that aligned shapes run well can spill here, and dispatch's
        # nearest shapes are aligned ones: 4099x257x263 ran at 0.15x cuBLAS on a 128x128x64 tile with 4
        # warps (128 loads per thread per chunk) and 1.06x on 64x128x64 with 8 (48;
        # docs/decisions.md#d04); 1000^3, before its rows were known aligned, spilled
        # at 192 (docs/gemm_shapes.md). TMA configs stay: they run as their pointer twins (build falls
        # back), and their measurements on the neighbours are what dispatch scores them by.
        rules.append(("more element loads per thread than registers hold",
                      lambda c: c.block_k * (c.block_m + c.block_n) > SCALAR_LOADS_MAX * 32 * c.num_warps))
    if conv:
        p = workload.conv_params()
        channels = p["ci"] // p["groups"]
        # else the plan copies with pointers: the same kernel as the pointer config, measured twice
        reason = "TMA convolution windows need stride 1, channels last and channels a multiple of BLOCK_K"
        if p["stride"] != 1 or workload.layout != "nhwc":
            rules.append((reason, lambda c: c.async_copy == "tma"))
        else:
            rules.append((reason, lambda c: (c.async_copy == "tma") & (channels % c.block_k != 0)))
    rules += _box_rules(workload)
    rules += [*WS_CONFIG_RULES, *_ws_rules(workload, spec)]
    return tuple(rules)


def _ws_rules(workload: Workload, spec: Any | None) -> list[Rule]:
    """Where the warp-specialized kernel (``async_copy="ws"``, ``kernels/matmul_ws.py``) runs, and which of
    its configs the space offers. It runs a single GEMM (``records.check_record``: op "matmul") in half
    precision on an sm90 GPU with wgmma whose operands and output TMA can describe (rows of whole 16-byte
    vectors); elsewhere a "ws" config runs as its "tma" twin, a config the space holds already. Of its
    configs: ``WS_TILES`` x ``WS_BLOCK_K`` tiles, and none that ``hopper.plan`` would run as another
    (ping-pong below two tiles per SM runs cooperative; the ring is cut to a tile's chunks: see
    ``flattened`` in ``_shape_rules``)."""
    batch, m, n, k = workload.gemm_dims()
    vec = 16 // workload.elem_bytes
    if (workload.op != "matmul" or batch != 1 or workload.dtype not in WS_DTYPES or spec is None
            or _cc_tuple(spec.cc) < (9, 0) or getattr(spec, "mma", "") != "wgmma"):
        return [("the warp-specialized kernel is a single half-precision GEMM's on an sm90 GPU with wgmma", _is_ws)]
    rules: list[Rule] = [
        (f"ws tile outside {'/'.join(map(str, WS_TILES))} x {'/'.join(map(str, WS_TILES))} x "
         f"{'/'.join(map(str, WS_BLOCK_K))}",
         lambda c: _is_ws(c) & (_none_of(c.block_m, WS_TILES) | _none_of(c.block_n, WS_TILES)
                                | _none_of(c.block_k, WS_BLOCK_K)))]
    if any(r % vec for r in (*workload.operand_rows(), n)):
        rules.append(("ws operands or output whose rows TMA cannot describe", _is_ws))
    sms = spec.num_sms
    rules.append(("ws ping-pong with fewer than two tiles per SM (it runs cooperative)",
                  lambda c: _is_ws(c) & c.pingpong & (_cdiv(m, c.block_m) * _cdiv(n, c.block_n) < 2 * sms)))
    return rules


def _box_rules(workload: Workload) -> list[Rule]:
    """Where the box kernel (``async_copy="box"``, ``kernels/conv_window.py``) runs: a dilation-1, ungrouped
    channels-last conv2d/conv3d in half precision of stride 1 (a conv2d: or a stride dividing H and W; an
    unpadded 1x1 one: any stride), a tile of 64 rows per warpgroup, its ring of
    shared-memory stages the only pipelining knob (``conv_window.why_not``, for columns of knob values)."""
    box = "box"
    q = workload.conv_params() if workload.op in ("conv2d", "conv3d") else None
    # other strides: an unpadded 1x1 convolution's strided view, a 2-d one's phase view where they divide H and W
    pointwise = q is not None and (q["kd"], q["kh"], q["kw"], q["pad"]) == (1, 1, 1, 0)
    phased = q is not None and workload.op == "conv2d" and q["h"] % q["stride"] == 0 and q["w"] % q["stride"] == 0
    if (q is None or workload.layout not in ("nhwc", "ndhwc") or q["groups"] != 1
            or (not pointwise and (q["dilation"] != 1 or (q["stride"] != 1 and not phased)))
            or workload.dtype not in ("float16", "bfloat16")):
        return [("the box kernel is a stride-1, ungrouped, channels-last half-precision convolution's",
                 lambda c: c.async_copy == box)]
    ci = q["ci"]
    return [("box tile: block_m = 16 x num_warps (one warpgroup per 64 rows), 4 or 8 warps",
             lambda c: (c.async_copy == box)
             & ((c.block_m != 16 * c.num_warps) | ((c.num_warps != 4) & (c.num_warps != 8)))),
            ("box chunks: input channels a multiple of block_k, block_k >= 16",
             lambda c: (c.async_copy == box) & ((ci % c.block_k != 0) | (c.block_k < 16))),
            ("box kernel: a ring of shared-memory stages only (no register prefetch, split-K, wave tail; group_m 8)",
             lambda c: (c.async_copy == box) & ((c.smem_stages < 2) | (c.reg_stages > 1) | (c.reg_split > 1)
                                                 | (c.split_k > 1) | c.wave_tail | (c.group_m != 8)))]


def shape_reason(workload: Workload, c: KernelConfig | Candidate, spec: Any | None) -> str | None:
    """Why a config is pointless or impossible for this shape/GPU before any model runs, or None."""
    for reason, test in _shape_rules(workload, spec):
        if test(c):
            return reason
    return None


@dataclass(frozen=True)
class ConfigSpace:
    """Valid configs of one workload, in grid order, and what was pruned."""

    workload: Workload
    configs: tuple[KernelConfig, ...]
    spec: Any = None
    pruned: dict[str, int] = field(default_factory=dict, compare=False)
    _index: dict[KernelConfig, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.configs:
            raise TuningError(f"config space of {self.workload.key()} is empty")
        object.__setattr__(self, "_index", {c: i for i, c in enumerate(self.configs)})

    def __len__(self) -> int:
        return len(self.configs)

    def __iter__(self) -> Iterator[KernelConfig]:
        return iter(self.configs)

    def __contains__(self, c: object) -> bool:
        return c in self._index

    def index(self, c: KernelConfig) -> int:
        return self._index[c]

    def knob_values(self) -> dict[str, tuple[Any, ...]]:
        """Values each knob takes in this space (sorted), what neighbours move along."""
        return {k: tuple(sorted({getattr(c, k) for c in self.configs})) for k in KNOB_NAMES}

    def summary(self) -> str:
        pruned = ", ".join(f"{n} {why}" for why, n in sorted(self.pruned.items(), key=lambda kv: -kv[1]))
        return f"{len(self)} configs for {self.workload.key()}" + (f" (pruned: {pruned})" if pruned else "")

    def restrict(self, configs: Iterable[KernelConfig], why: str) -> "ConfigSpace":
        """A sub-space (order kept); what is dropped is counted under ``why``. Keeps >= 1."""
        keep = set(configs)
        sub = tuple(c for c in self.configs if c in keep) or self.configs[:1]
        pruned = dict(self.pruned)
        if len(self) - len(sub):
            pruned[why] = pruned.get(why, 0) + len(self) - len(sub)
        out = ConfigSpace(self.workload, sub, self.spec, pruned)
        details = self.__dict__.get("_details")
        if details is not None:
            object.__setattr__(out, "_details", [details[self._index[c]] for c in sub])
        return out

    @classmethod
    def from_configs(cls, workload: Workload, configs: Iterable[KernelConfig], spec: Any = None) -> "ConfigSpace":
        """A space of exactly these configs (e.g. everything a replay dataset measured), sorted."""
        return cls(workload, tuple(sorted(set(configs))), spec)

    @classmethod
    def build(cls, workload: Workload, spec: Any, *, knobs: Knobs | None = None, variant: str = "full",
              prune: bool = True, top_k: int | float | None = None) -> "ConfigSpace":
        """Enumerate ``knobs`` (default: ``Knobs()``) and prune (see the module docstring).

        Args:
            workload: the op instance.
            spec: GPUSpec the resource model checks against (``model.hardware.get_spec/detect``).
            variant: ablation filter, one of VARIANTS.
            prune: apply the model's resource check (shape rules always apply).
            top_k: keep only the analytically fastest configs: an int, or a fraction <= 1.0.
        """
        if variant not in VARIANTS:
            raise ScheduleError(f"variant {variant!r} is unknown; expected one of {VARIANTS}")
        knobs = knobs or Knobs()
        pruned: Counter[str] = Counter()
        candidates = _survivors(workload, spec, knobs, variant, pruned)
        if not candidates:
            raise TuningError(f"no config of {knobs} fits {workload.key()} (variant {variant!r}); widen the knobs")
        configs = candidates
        if prune:
            from ..model import analytical

            valid: list[KernelConfig] = []
            smallest: tuple[float, KernelConfig] = (math.inf, candidates[0])
            for c in candidates:
                res = analytical.resources(workload, c, spec)
                if res.valid:
                    valid.append(c)
                else:
                    pruned[f"model: {_reason_class(res.reason)}"] += 1
                if res.smem_bytes < smallest[0]:
                    smallest = (res.smem_bytes, c)
            # Like Triton's early_config_prune contract: never return nothing.
            configs = valid or [smallest[1]]
        space = cls(workload, tuple(configs), spec, dict(pruned))
        if top_k is not None:
            space = space.top_k(top_k)
        return space

    def details(self) -> list[Any]:
        """The analytical model's ``Estimate`` of each config (every term of the model), in space order.

        Cached: the analytical tuner, top-k pruning, early stop and the learned model's features all read
        them. Thread-safe (the learned cost model computes them in a background thread while the tuning
        run measures its seeds): a second caller waits for the first instead of computing them again.
        """
        with _LOCKS:
            lock = self.__dict__.get("_details_lock")
            if lock is None:
                lock = threading.Lock()
                object.__setattr__(self, "_details_lock", lock)
        with lock:
            cached = self.__dict__.get("_details")
            if cached is None:
                if self.spec is None:
                    raise TuningError(f"{self.summary()}: no GPU spec, so the analytical model cannot rank it")
                from ..model import analytical

                cached = [analytical.estimate(self.workload, c, self.spec) for c in self.configs]
                object.__setattr__(self, "_details", cached)
            return cached

    def estimates(self) -> list[float]:
        """Analytical time (s) per config, in space order; inf where the model calls it invalid (cached)."""
        cached = self.__dict__.get("_estimates")
        if cached is None:
            cached = [float(e.time_s) if e.valid and math.isfinite(e.time_s) and e.time_s > 0 else math.inf
                      for e in self.details()]
            object.__setattr__(self, "_estimates", cached)
        return list(cached)

    def ranked(self) -> list[KernelConfig]:
        """Configs by analytical estimate, fastest first (ties in grid order)."""
        cached = self.__dict__.get("_ranked")
        if cached is None:
            est = self.estimates()
            cached = [self.configs[i] for i in sorted(range(len(self)), key=lambda i: (est[i], i))]
            object.__setattr__(self, "_ranked", cached)
        return list(cached)

    def top_k(self, k: int | float) -> "ConfigSpace":
        """The ``k`` analytically fastest configs (``k <= 1.0`` as a float: that fraction)."""
        if isinstance(k, float) and k <= 1.0:
            k = max(1, round(k * len(self)))
        if not isinstance(k, int) or k < 1:
            raise ScheduleError(f"top_k={k!r}: must be an int >= 1 or a fraction in (0, 1]")
        return self.restrict(self.ranked()[:k], "analytical top_k")

    def _by_knobs(self) -> dict[tuple[Any, ...], KernelConfig]:
        """The space's configs by their knob values: neighbours are looked up without building (and
        validating) a KernelConfig for a move that leaves the space, which is most moves."""
        by_knobs = self.__dict__.get("_by_knobs_map")
        if by_knobs is None:
            by_knobs = {_knob_values(x): x for x in self.configs}
            object.__setattr__(self, "_by_knobs_map", by_knobs)
        return by_knobs

    def _moved(self, here: tuple[Any, ...], knob: str, value: Any) -> KernelConfig | None:
        pos = KNOB_NAMES.index(knob)
        return self._by_knobs().get(here[:pos] + (value,) + here[pos + 1:])

    def mutate(self, c: KernelConfig, rng: Any, values: dict[str, tuple[Any, ...]] | None = None,
               tries: int = 8) -> KernelConfig:
        """A neighbour of ``c`` inside the space: one knob moved to an adjacent value.

        Used by simulated annealing. Returns ``c`` itself when no neighbour is found in ``tries``.
        """
        values = values or self.knob_values()
        movable = [k for k in KNOB_NAMES if len(values[k]) > 1]
        here = _knob_values(c)
        for _ in range(tries if movable else 0):
            knob = movable[int(rng.integers(len(movable)))]
            vals = values[knob]
            i = vals.index(getattr(c, knob)) if getattr(c, knob) in vals else 0
            j = i + (1 if rng.random() < 0.5 else -1)
            if not 0 <= j < len(vals):
                j = i - (j - i)
            n = self._moved(here, knob, vals[j])
            if n is not None:
                return n
        return c

    def neighbours(self, c: KernelConfig, values: dict[str, tuple[Any, ...]] | None = None) -> list[KernelConfig]:
        """Every config of the space with one knob of ``c`` moved to an adjacent value (knobs in
        ``KNOB_NAMES`` order, the lower value first)."""
        values = values or self.knob_values()
        here = _knob_values(c)
        out = []
        for knob in KNOB_NAMES:
            vals = values[knob]
            if getattr(c, knob) not in vals:
                continue
            i = vals.index(getattr(c, knob))
            for j in (i - 1, i + 1):
                n = self._moved(here, knob, vals[j]) if 0 <= j < len(vals) else None
                if n is not None:
                    out.append(n)
        return out


_WS_PROBE = dict(block_m=128, block_n=128, block_k=64, num_warps=8, smem_stages=4, reg_stages=2, async_copy=WS,
                 persistent=True)
"""A "ws" config that admits every value of its own knobs (``pingpong``, ``epilogue_subtile``)."""


def _invalid_values(knobs: Knobs) -> frozenset[tuple[str, type, Any]]:
    """(knob, type, value) of every value ``KernelConfig`` refuses on its own.

    ``KernelConfig``'s rules each read one knob, except four combinations (``reg_split`` against
    ``block_k``, ``split_k`` with ``persistent``, ``wave_tail`` with either or a short ``block_m``,
    ``tail_split`` without ``wave_tail``) that
    ``_survivors`` checks itself, and the warp-specialized kernel's (``WS_CONFIG_RULES``, which are shape
    rules): so a combination is refused exactly when one of these values is in it or one of those holds.
    Each value is tried beside ``block_k=512``, which admits every ``reg_split``, and the defaults, which
    admit the rest; "ws" and the values of its own knobs beside ``_WS_PROBE``. The type is part of the key
    so that ``True`` and ``1`` stay apart.
    """
    bad: set[tuple[str, type, Any]] = set()
    for name, values in zip(KNOB_NAMES, knobs.values()):
        for v in values:
            ws = name in ("pingpong", "epilogue_subtile") or (name == "async_copy" and v == WS)
            # a tail split is a wave tail's: tried beside one (``_survivors`` checks the pair itself)
            probe = {"block_k": 512, "wave_tail": True} if name == "tail_split" else {"block_k": 512}
            try:
                KernelConfig(**({**_WS_PROBE, name: v} if ws else {**probe, name: v}))
            except ScheduleError:
                bad.add((name, type(v), v))
    return frozenset(bad)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _keep(values: tuple[Any, ...], allowed: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(v for v in values if any(_same(v, a) for a in allowed))


def _families(knobs: Knobs) -> list[Knobs]:
    """The parts of ``knobs``' product ``_survivors`` enumerates (see the module docstring): every copy
    mechanism but "ws" with ``pingpong=False, epilogue_subtile=1`` (``KernelConfig`` refuses the other
    values there), then the "ws" configs over ``WS_FAMILY``. Empty families are left out."""
    base = dataclasses.replace(knobs, async_copy=tuple(a for a in knobs.async_copy if a != WS),
                               pingpong=_keep(knobs.pingpong, (False,)),
                               epilogue_subtile=_keep(knobs.epilogue_subtile, (1,)))
    families = [base]
    if WS in knobs.async_copy:
        families.append(dataclasses.replace(knobs, async_copy=(WS,), **{
            name: _keep(getattr(knobs, name), allowed) for name, allowed in WS_FAMILY.items()}))
    return [f for f in families if all(f.values())]


def _survivors(workload: Workload, spec: Any, knobs: Knobs, variant: str, pruned: Counter[str]) -> list[KernelConfig]:
    """Every combination of ``knobs``' families (``_families``) that makes a valid config passing the shape
    rules and the variant, in grid order (that of ``knobs``' whole product), each refused one counted in
    ``pruned`` under its first failing rule: the tile rule, split-K on a full grid, ``KernelConfig``'s own
    checks (``_invalid_values``, its three combination rules and the warp-specialized kernel's,
    ``WS_CONFIG_RULES``), then the other shape rules and the variant, as making each config first and
    asking ``shape_reason`` gives.

    The rules run on numpy columns of each family's whole product (a large GEMM's space is 2,073,600
    combinations and the "ws" family's 4,608), and only survivors are made ``KernelConfig``s, whose checks
    then cannot fail."""
    bad = _invalid_values(knobs)
    rules = _shape_rules(workload, spec)
    first = ("tile larger than the problem", "split-K with enough tiles to fill the GPU")
    ws_checks = [r for r in rules if r in WS_CONFIG_RULES]
    later = [r for r in rules if r[0] not in first and r not in WS_CONFIG_RULES]
    # The warp-specialized rules hold only of "ws" configs (or of its knobs off their defaults): the other
    # family, millions of combinations for a large GEMM, skips them.
    ws_only = {reason for reason, _ in (*WS_CONFIG_RULES, *_ws_rules(workload, spec))}
    full = knobs.values()
    kept: list[np.ndarray] = []  # per family: indices into ``full`` of each survivor's values (knobs x survivors)
    for family in _families(knobs):
        values = family.values()
        skip = set() if WS in family.async_copy else ws_only
        grid = np.indices([len(v) for v in values]).reshape(len(values), -1)  # itertools.product's order
        c = Candidate(*(np.asarray(v)[i] for v, i in zip(values, grid)))
        invalid = (c.persistent & (c.split_k > 1)) | (c.block_k // c.reg_split < 16) | (
            c.wave_tail & (c.persistent | (c.split_k > 1) | (c.block_m < TAIL_BLOCK))) | (
            c.tail_split & np.logical_not(c.wave_tail))
        for name, column, vals in zip(KNOB_NAMES, c, values):
            refused = [v for v in vals if (name, type(v), v) in bad]
            if refused:
                invalid = invalid | np.isin(column, refused)
        ordered = [r for r in rules if r[0] in first] + [("invalid knob combination", lambda _: invalid)] \
            + ws_checks + later + [(f"outside variant {variant!r}", lambda c: np.logical_not(variant_ok(c, variant)))]
        alive = np.ones(grid.shape[1], dtype=bool)
        for reason, test in (r for r in ordered if r[0] not in skip):
            hit = alive & test(c)
            count = int(np.count_nonzero(hit))
            if count:
                pruned[reason] += count
                alive &= ~hit
        # the family's value indices, as indices into the whole product's values
        to_full = [np.array([next(j for j, u in enumerate(fv) if _same(u, v)) for v in vs], dtype=np.int64)
                   for vs, fv in zip(values, full)]
        kept.append(np.stack([m[i[alive]] for m, i in zip(to_full, grid)]))
    if not kept:
        return []
    rows = np.concatenate(kept, axis=1)
    rows = rows[:, np.lexsort(rows[::-1])]  # the whole product's order: the first knob varies slowest
    columns = [np.array(vals + (None,), dtype=object)[:-1][idx].tolist() for vals, idx in zip(full, rows)]
    return [KernelConfig(**dict(zip(KNOB_NAMES, row))) for row in zip(*columns)]


def _reason_class(reason: str) -> str:
    """Group model reasons by their first clause so the pruning summary stays short."""
    head = (reason or "invalid").split(":")[0].split(",")[0].strip()
    return head[:60] or "invalid"


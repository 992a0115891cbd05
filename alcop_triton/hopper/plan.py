"""Each pipeline level's depth for one GEMM on sm90, and why (the Hopper counterpart of ``analysis.explain``).

``plan(m, n, k, request)`` starts from a requested ``HopperConfig`` and clamps what cannot pay or cannot
run on that workload, saying so level by level:

* level 1 (global -> shared): a ring deeper than the reduction's chunks holds chunks that never exist, so
  ``stages`` is cut to the chunk count;
* level 2 (shared -> tensor core): a slot is released only once the wgmma that read it has retired, so at
  most ``stages - 1`` groups stay in flight (and the producer then runs ``stages - 1 - depth`` chunks
  ahead); with one chunk per tile there is nothing to overlap;
* level 3 (across tiles): persistence pays only with more tiles than SMs (a program then owns several
  tiles); ping-pong needs a second tile per program for its other consumer, so below two tiles per SM it
  becomes cooperative (two warpgroups on one tile, split along M) where the tile allows, else one consumer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ScheduleError
from .config import HopperConfig

H100_SMS = 132
"""SMs of an H100 / H200 SXM, the default for planning without a GPU (the launch uses the device's count)."""


@dataclass(frozen=True)
class Level:
    title: str
    depth: int
    what: str
    why: str

    def text(self) -> str:
        return f"{self.what}, depth {self.depth}: {self.why}"


@dataclass(frozen=True)
class HopperPlan:
    config: HopperConfig
    levels: tuple[Level, Level, Level]
    notes: tuple[str, ...] = ()


def _level1(c: HopperConfig) -> Level:
    producer = ("a loader warp of its own (warp_specialize), waiting on each slot's 'empty' barrier"
                if c.warp_specialize else "copies issued ahead in the consumer's own stream")
    return Level("level 1", c.stages, "global -> shared, TMA ring",
                 f"{c.stages} slot(s) of A and B chunks, {producer}; each slot's 'ready' barrier completes with its "
                 "copies' bytes")


def _level2(c: HopperConfig) -> Level:
    ahead = c.stages - 1 - c.wgmma_depth if c.warp_specialize else c.stages - c.wgmma_depth
    return Level("level 2", c.wgmma_depth, "shared -> tensor core, async wgmma groups in flight",
                 f"{c.wgmma_depth} group(s) left in flight after each issue; a slot is released only once the wgmma "
                 f"that read it has retired, so the producer keeps {ahead} chunk(s) in flight beside them")


def _level3(c: HopperConfig) -> Level:
    if c.policy == "pingpong":
        how = "two consumer warpgroups take alternate tiles (ping-pong): one's epilogue overlaps the other's main loop"
    elif c.consumers == 2:
        how = "two consumer warpgroups share each tile, split along M (cooperative)"
    else:
        how = "one consumer warpgroup per tile"
    sched = "persistent (one program per SM, looping over tiles)" if c.persistent else "one program per tile"
    sub = f"epilogue in {c.epilogue_subtile} column slice(s)"
    depth = c.consumer_partitions if c.persistent else 1
    return Level("level 3", depth, "across tiles", f"{sched}; {how}; {sub}")


def describe(config: HopperConfig) -> HopperPlan:
    """A config's levels as given (no workload: nothing clamped)."""
    return HopperPlan(config, (_level1(config), _level2(config), _level3(config)))


def plan(m: int, n: int, k: int, request: HopperConfig | None = None, *, sms: int = H100_SMS) -> HopperPlan:
    """The config to run an (m x k) @ (k x n) GEMM with, from ``request`` (default ``HopperConfig()``): each
    level's depth clamped where it cannot pay or cannot run, with the reason in ``notes``."""
    for name, v in (("m", m), ("n", n), ("k", k), ("sms", sms)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ScheduleError(f"hopper plan: {name}={v!r}: must be a positive int")
    c = request if request is not None else HopperConfig()
    notes: list[str] = []
    chunks = -(-k // c.block_k)
    tiles = -(-m // c.block_m) * -(-n // c.block_n)
    changes: dict[str, object] = {}

    stages = c.stages
    if chunks < stages:
        stages = max(1, chunks)
        notes.append(f"level 1: {c.stages} stages requested but K={k} has {chunks} chunk(s) of {c.block_k}: "
                     f"stages={stages} (a deeper ring holds chunks that never exist)")
    depth = min(c.wgmma_depth, stages - 1)
    if depth != c.wgmma_depth:
        notes.append(f"level 2: wgmma_depth {c.wgmma_depth} > stages - 1 = {stages - 1}: depth {depth} (a slot is "
                     "released only once the wgmma that read it has retired)")
    elif chunks == 1 and depth:
        depth = 0
        notes.append("level 2: one chunk per tile, no second wgmma to overlap: depth 0")
    elif depth and depth == stages - 1 and c.warp_specialize:
        notes.append(f"level 2: depth {depth} = stages - 1 leaves the loader no slot to copy ahead into while "
                     "the wgmma groups run; consider more stages")
    changes.update(stages=stages, wgmma_depth=depth)

    persistent, policy, consumers = c.persistent, c.policy, c.consumers
    if persistent and tiles <= sms:
        persistent = False
        notes.append(f"level 3: {tiles} tile(s) <= {sms} SMs: one tile per program, persistence buys nothing")
    if policy == "pingpong" and tiles < 2 * sms:
        coop_ok = c.block_m % 128 == 0 and c.block_m * c.block_n // 256 <= 128
        policy = "cooperative"
        consumers = 2 if coop_ok else 1
        notes.append(f"level 3: {tiles} tile(s) < 2 x {sms} SMs: ping-pong's second consumer would have no tile of "
                     f"its own; {'cooperative (both warpgroups on one tile)' if coop_ok else 'one consumer'} instead")
    changes.update(persistent=persistent, policy=policy, consumers=consumers)
    try:
        final = c.replace(**changes)
    except ScheduleError as exc:  # a clamp combination the record refuses: keep the request's level 3
        notes.append(f"level 3: kept as requested ({exc})")
        final = c.replace(stages=stages, wgmma_depth=depth)
    d = describe(final)
    return HopperPlan(final, d.levels, tuple(notes))


def explain(p: HopperPlan) -> str:
    """The plan as text: one line per level, then the clamps and their reasons."""
    return "\n".join([*(f"{lv.title}: {lv.text()}" for lv in p.levels), *(f"note: {n}" for n in p.notes)])

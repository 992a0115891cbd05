"""The frozen, validated record of one Hopper (sm90) GEMM kernel: ALCOP's three pipeline levels as knobs.

Level 1, global -> shared: a ring of ``stages`` TMA buffers with one "ready" mbarrier each (and one "empty"
mbarrier each when a loader warp feeds the ring), filled by a producer: a loader partition of one warp
(``warp_specialize``) or copies issued ahead in the consumer's own instruction stream.
Level 2, shared -> tensor core: ``wgmma_depth`` asynchronous ``warpgroup_mma`` groups left in flight per
consumer; a ring slot is handed back only once the wgmma that read it has retired.
Level 3, inner-pipeline fusion across tiles: ``persistent`` programs loop over output tiles; two consumer
warpgroups either take alternate tiles (``"pingpong"``: one's epilogue overlaps the other's main loop) or
split one tile along M (``"cooperative"``); the epilogue stores the C tile in ``epilogue_subtile`` column
slices through shared memory.

Validated on construction: only these ints, bools and enum strings reach generated source.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import ScheduleError

POLICIES: tuple[str, ...] = ("pingpong", "cooperative")
SMEM_LIMIT = 232448
"""Shared memory one sm90 program may have: 227 KiB (cudaFuncAttributeMaxDynamicSharedMemorySize on H100/H200)."""
WARPGROUP = 4
"""Warps of one warpgroup, the unit that issues a wgmma (64 rows of the accumulator per instruction)."""
MAX_ACC_REGS = 128
"""fp32 accumulator registers per consumer thread at most: CUTLASS's largest sm90 tiles (128 x 256 over two
warpgroups, 128 x 128 over one) sit there; more leaves too few registers of the 240 a consumer gets for
addresses and the epilogue's conversions, and the accumulator spills."""
ELEM_BYTES = 2
"""fp16 and bf16 operands and output."""
COMPILER_SLACK = 512
"""Shared memory Triton adds beyond the kernel's own buffers (measured on sm90 compiles: 116 to 248 B of
alignment and partition bookkeeping); the budget check counts it so a config it passes also compiles."""


def _pow2(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and (x & (x - 1)) == 0


def _int_in(name: str, v: Any, lo: int, hi: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ScheduleError(f"HopperConfig.{name}={v!r}: must be an int in [{lo}, {hi}]")


@dataclass(frozen=True, order=True)
class HopperConfig:
    """Schedule parameters of one generated sm90 GEMM kernel.

    Attributes:
        block_m, block_n, block_k: output tile rows and columns, reduction chunk (powers of two).
        stages: level 1, TMA ring buffers (1 = no overlap of copies with wgmma).
        wgmma_depth: level 2, wgmma groups left in flight per consumer after each issue (0 = wait for each).
        consumers: consumer warpgroups, 1 or 2.
        policy: with two consumers, "pingpong" (alternate tiles, each warpgroup a whole tile) or
            "cooperative" (one tile, split along M between them).
        warp_specialize: a loader warp of its own feeds the ring (else the consumers issue the copies ahead).
        persistent: level 3, one program per SM looping over output tiles (else one program per tile).
        epilogue_subtile: column slices the C tile is stored in (1 = the whole tile at once).
        group_m: tiles along M visited together, for L2 reuse of B's columns.
    """

    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    stages: int = 4
    wgmma_depth: int = 1
    consumers: int = 1
    policy: str = "cooperative"
    warp_specialize: bool = True
    persistent: bool = True
    epilogue_subtile: int = 1
    group_m: int = 8

    def __post_init__(self) -> None:
        self.validate()

    # ----------------------------------------------------------------- rules
    def validate(self) -> None:
        """Every rule, each error naming the argument, the value and the rule (``ScheduleError``, a ValueError)."""
        for name, lo, hi in (("block_m", 64, 256), ("block_n", 16, 256), ("block_k", 16, 128)):
            v = getattr(self, name)
            if not _pow2(v) or not lo <= v <= hi:
                raise ScheduleError(f"HopperConfig.{name}={v!r}: must be a power of two in [{lo}, {hi}] "
                                    "(wgmma: 64 rows per warpgroup, at most 256 columns; TMA boxes of <= 256)")
        _int_in("stages", self.stages, 1, 8)
        _int_in("wgmma_depth", self.wgmma_depth, 0, 7)
        if self.wgmma_depth > self.stages - 1:
            raise ScheduleError(
                f"HopperConfig.wgmma_depth={self.wgmma_depth} with stages={self.stages}: at most stages - 1 wgmma "
                "groups may be in flight, since a ring slot is released only once the wgmma that read it has "
                "retired and the producer needs one free slot to copy into")
        if self.consumers not in (1, 2) or isinstance(self.consumers, bool):
            raise ScheduleError(f"HopperConfig.consumers={self.consumers!r}: must be 1 or 2 consumer warpgroups")
        if self.policy not in POLICIES:
            raise ScheduleError(f"HopperConfig.policy={self.policy!r}: must be one of {POLICIES}")
        for name in ("warp_specialize", "persistent"):
            if not isinstance(getattr(self, name), bool):
                raise ScheduleError(f"HopperConfig.{name}={getattr(self, name)!r}: must be True or False")
        if self.epilogue_subtile not in (1, 2, 4) or isinstance(self.epilogue_subtile, bool):
            raise ScheduleError(f"HopperConfig.epilogue_subtile={self.epilogue_subtile!r}: must be 1, 2 or 4")
        if self.block_n // self.epilogue_subtile < 16:
            raise ScheduleError(f"HopperConfig.epilogue_subtile={self.epilogue_subtile} with block_n={self.block_n}: "
                                "slices of fewer than 16 columns (a TMA store box is at least 32 bytes wide here)")
        _int_in("group_m", self.group_m, 1, 64)
        if self.policy == "pingpong":
            if self.consumers != 2:
                raise ScheduleError(f"HopperConfig.policy='pingpong' with consumers={self.consumers}: ping-pong "
                                    "alternates tiles between two consumer warpgroups (consumers=2)")
            if not self.persistent:
                raise ScheduleError("HopperConfig.policy='pingpong' with persistent=False: ping-pong overlaps one "
                                    "tile's epilogue with the next tile's main loop, so a program must own several "
                                    "tiles (persistent=True)")
            if not self.warp_specialize:
                raise ScheduleError("HopperConfig.policy='pingpong' with warp_specialize=False: the two consumers "
                                    "run as partitions of their own, fed by a loader warp (warp_specialize=True)")
        if self.block_m % self.rows_per_warpgroup_unit != 0:
            raise ScheduleError(
                f"HopperConfig.block_m={self.block_m} with consumers={self.consumers}, policy={self.policy!r}: a "
                f"tile's rows are split over {self.tile_warpgroups} warpgroup(s) of 64-row wgmmas, so block_m must "
                f"be a multiple of {self.rows_per_warpgroup_unit}")
        if self.acc_regs > MAX_ACC_REGS:
            raise ScheduleError(
                f"HopperConfig block_m={self.block_m}, block_n={self.block_n} over {self.tile_warpgroups} "
                f"warpgroup(s): {self.acc_regs} fp32 accumulator registers per thread > {MAX_ACC_REGS} (the "
                "accumulator would spill); use a smaller tile or the cooperative policy")
        if self.smem_bytes > SMEM_LIMIT:
            raise ScheduleError(
                f"HopperConfig stages={self.stages} (ring {self.ring_bytes} B) + epilogue {self.epilogue_bytes} B "
                f"+ barriers and compiler slack = {self.smem_bytes} B of shared memory > {SMEM_LIMIT} B (227 KiB, an sm90 program's "
                "limit); use fewer stages, a smaller block_k or a larger epilogue_subtile")

    # -------------------------------------------------------------- derived
    @property
    def tile_warpgroups(self) -> int:
        """Warpgroups that share one output tile: two when cooperative with two consumers, else one."""
        return 2 if self.consumers == 2 and self.policy == "cooperative" else 1

    @property
    def rows_per_warpgroup_unit(self) -> int:
        return 64 * self.tile_warpgroups

    @property
    def consumer_warps(self) -> int:
        """Warps of one consumer partition (the partition that owns a tile's accumulator)."""
        return WARPGROUP * self.tile_warpgroups

    @property
    def consumer_partitions(self) -> int:
        """Partitions that each own an accumulator and an epilogue buffer: two in ping-pong, else one."""
        return 2 if self.policy == "pingpong" else 1

    @property
    def acc_regs(self) -> int:
        return self.block_m * self.block_n // (32 * self.consumer_warps)

    @property
    def ring_bytes(self) -> int:
        return self.stages * (self.block_m + self.block_n) * self.block_k * ELEM_BYTES

    @property
    def epilogue_bytes(self) -> int:
        return self.consumer_partitions * self.block_m * (self.block_n // self.epilogue_subtile) * ELEM_BYTES

    @property
    def smem_bytes(self) -> int:
        """Shared memory the kernel allocates: ring, epilogue buffers, 8-byte mbarriers (ready + empty per slot,
        two ping-pong turn barriers), and the compiler's slack."""
        return self.ring_bytes + self.epilogue_bytes + self.barrier_bytes + COMPILER_SLACK

    @property
    def barrier_bytes(self) -> int:
        return 8 * (2 * self.stages + (2 if self.policy == "pingpong" else 0))

    @property
    def num_warps(self) -> int:
        """The launch's ``num_warps``: the default partition's warps (the first consumer)."""
        return self.consumer_warps

    @property
    def total_warps(self) -> int:
        """Warps the program runs: consumers, plus the loader's warpgroup (one warp, registers by warpgroup)."""
        return self.consumer_warps * self.consumer_partitions + (WARPGROUP if self.warp_specialize else 0)

    LOADER_REGS = 24
    CONSUMER_REGS = 240

    @property
    def maxnreg(self) -> int | None:
        """Registers per thread the launch asks for with a loader warp: the loader's warpgroup gets 24 (the
        least a warp may have) and each consumer warp 240, whose sum over the program must fit the SM's
        65536; None without warp specialization (the compiler's own choice)."""
        if not self.warp_specialize:
            return None
        pool = self.CONSUMER_REGS * self.consumer_warps * self.consumer_partitions + self.LOADER_REGS * WARPGROUP
        return min(256, pool // self.total_warps // 8 * 8)

    def tag(self) -> str:
        """A stable identifier of the config, used in kernel names."""
        pol = {"pingpong": "pp", "cooperative": "co"}[self.policy]
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}_s{self.stages}d{self.wgmma_depth}_c{self.consumers}{pol}"
                f"{'_ws' if self.warp_specialize else ''}{'_pers' if self.persistent else ''}"
                f"_e{self.epilogue_subtile}_g{self.group_m}")

    def replace(self, **changes: Any) -> "HopperConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HopperConfig":
        """A record read from a file: unknown keys refused, every value validated."""
        names = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(d) - names)
        if extra:
            raise ScheduleError(f"HopperConfig.from_dict: unknown keys {extra}; known keys are {sorted(names)}")
        return cls(**d)

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
   least two chunks;
2. the variant filter (the paper's ablation: none / double_buffer / smem_multistage / full);
3. the model's resource accounting: ``model.analytical.resources(...).valid`` (shared memory,
   registers, threads), so out-of-resource configs are never compiled;
4. optionally the analytical model's ``top_k`` (an int, or a fraction <= 1 as in Triton).
At least one config always survives: if the model rejects everything, the config with the
smallest shared-memory footprint is kept and compilation gets the last word.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import operator
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, NamedTuple

from ..errors import ScheduleError, TuningError
from ..records import KernelConfig, Workload

VARIANTS: tuple[str, ...] = ("none", "double_buffer", "smem_multistage", "full")
"""Ablation variants (ALCOP Figure 10): no pipelining, 2-stage shared only, multi-stage shared only,
multi-stage multi-level (shared + register)."""

KNOB_NAMES: tuple[str, ...] = ("block_m", "block_n", "block_k", "group_m", "num_warps", "smem_stages",
                               "reg_stages", "reg_split", "async_copy", "persistent", "split_k")
_knob_values = operator.attrgetter(*KNOB_NAMES)
_LOCKS = threading.Lock()  # guards the creation of each space's own lock (``ConfigSpace.details``)


class Candidate(NamedTuple):
    """One combination of knob values before it is made a ``KernelConfig`` (fields as ``KNOB_NAMES``):
    what ``shape_reason`` and ``variant_ok`` read. Most combinations of a space fail those rules, and
    a tuple is much cheaper to make than a validated ``KernelConfig``."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    smem_stages: int
    reg_stages: int
    reg_split: int
    async_copy: str
    persistent: bool
    split_k: int


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
    async_copy: tuple[str, ...] = ("pointer", "tma")
    persistent: tuple[bool, ...] = (False, True)
    split_k: tuple[int, ...] = (1, 2, 4, 8)

    def values(self) -> list[tuple[Any, ...]]:
        return [getattr(self, k) for k in KNOB_NAMES]


DISPATCH_KNOBS = Knobs(block_m=(16, 32, 64, 128), block_n=(32, 64, 128, 256), block_k=(32, 64, 128), group_m=(8,),
                       num_warps=(4, 8), smem_stages=(3, 4, 5), reg_stages=(1,), reg_split=(1,))
"""The model's own shortlist when a call finds no measurement of its shape: the knobs that decide most
of the time on the GPUs measured so far (the register level never won there), small enough that
ranking it stays well under a second on a first call."""

SMALL_PROBLEM_KNOBS = Knobs(block_m=(16, 32), block_n=(16, 32, 64), block_k=(16, 32, 64), group_m=(8,),
                            num_warps=(2, 4), smem_stages=(1, 2, 3), reg_stages=(1,), reg_split=(1,),
                            persistent=(False,), split_k=(1,))
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


def variant_ok(config: KernelConfig | Candidate, variant: str) -> bool:
    """Whether ``config`` belongs to an ablation variant."""
    if variant == "none":
        return config.smem_stages == 1 and config.reg_stages == 1
    if variant == "double_buffer":
        return config.smem_stages == 2 and config.reg_stages == 1
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


@functools.lru_cache(maxsize=64)
def _tile_limits(workload: Workload) -> tuple[int, int, int, int, int, int, int]:
    """The workload's GEMM dims and the largest useful tile per dim: ``shape_reason`` runs once per
    candidate (hundreds of thousands per space), these once per workload."""
    batch, m, n, k = workload.gemm_dims()
    return batch, m, n, k, max(16, _next_pow2(m)), max(16, _next_pow2(n)), max(16, _next_pow2(k))


def shape_reason(workload: Workload, c: KernelConfig | Candidate, spec: Any | None) -> str | None:
    """Why a config is pointless or impossible for this shape/GPU before any model runs, or None."""
    batch, m, n, k, top_m, top_n, top_k = _tile_limits(workload)
    if c.block_m > top_m or c.block_n > top_n or c.block_k > top_k:
        return "tile larger than the problem"
    trips = math.ceil(math.ceil(k / c.block_k) / c.split_k)  # chunks of one program (one split-K slice)
    if c.split_k > 1:
        tiles = batch * math.ceil(m / c.block_m) * math.ceil(n / c.block_n)
        if spec is not None and tiles >= spec.num_sms:
            return "split-K with enough tiles to fill the GPU"
        if spec is not None and tiles * (c.split_k // 2) >= spec.num_sms:
            # half the split would already fill the GPU: the extra slices only add partial-sum traffic
            return "split-K beyond filling the GPU"
        if trips < 2:
            return "split-K slices shorter than two chunks"
    if c.persistent and c.reg_stages > 1:
        # The register prologue would sit inside the flattened tile loop; on the GPU the register
        # level loses to shared-only pipelining anyway (benchmarks/results/pipeline_variants.md).
        return "register prefetch in a persistent tile loop"
    if c.persistent and workload.op.startswith("conv"):
        # Measured on the H100: persistent convolutions lose on every layer of the conv grid
        # (benchmarks/results/conv_variants.md), by 20-70x where the model ranked them first (a
        # conv3d 3x3x3 layer: 62 ms against 0.9 ms with one program per tile).
        return "persistent convolution"
    if c.persistent and spec is not None:
        tiles = batch * math.ceil(m / c.block_m) * math.ceil(n / c.block_n)
        if tiles <= spec.num_sms:
            return "persistent with no more tiles than SMs"
        trips *= math.ceil(tiles / spec.num_sms)  # the flattened loop runs every chunk of a program's tiles
    if c.smem_stages > 1 and c.smem_stages > trips and not (c.persistent and spec is None):
        return "more smem stages than reduction steps"
    if c.reg_split > 1 and c.reg_stages == 1:
        return "reg_split without register prefetch"
    if c.reg_stages > 1 and c.reg_stages > c.reg_split * math.ceil(k / c.block_k):
        return "more register stages than sub-tiles"
    if c.num_warps > max(2, c.block_m * c.block_n // 256):
        return "more warps than the tile can feed"
    if c.async_copy == "tma" and spec is not None and _cc_tuple(spec.cc) < (9, 0):
        return "tma needs sm90"
    if c.async_copy == "tma" and workload.op in CONV_OPS:
        p = workload.conv_params()
        if p["stride"] != 1 or workload.layout != "nhwc" or (p["ci"] // p["groups"]) % c.block_k:
            # else the plan copies with pointers: the same kernel as the pointer config, measured twice
            return "TMA convolution windows need stride 1, channels last and channels a multiple of BLOCK_K"
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
        candidates: list[KernelConfig] = []
        bad = _invalid_values(knobs)
        batch, m, n, k = workload.gemm_dims()
        splits = [s for s in knobs.split_k if s > 1]
        # The tile rule on its own knobs first: on small problems it removes most of the product, which
        # then is never built config by config (the count covers every combination it removes).
        axes = knobs.values()[:-1]
        fits = [tuple(v for v in axes[i] if v <= max(16, _next_pow2(dim))) for i, dim in enumerate((m, n, k))]
        whole = math.prod(len(v) for v in axes) * len(knobs.split_k)
        kept = math.prod(len(v) for v in fits + axes[3:]) * len(knobs.split_k)
        if whole > kept:
            pruned["tile larger than the problem"] += whole - kept
        for values in itertools.product(*fits, *axes[3:]):
            kw = dict(zip(KNOB_NAMES, values))
            tiles = batch * math.ceil(m / kw["block_m"]) * math.ceil(n / kw["block_n"])
            if 1 in knobs.split_k:
                candidates += _one(workload, kw | {"split_k": 1}, spec, variant, pruned, bad)
            if spec is not None and tiles >= spec.num_sms:
                # split-K only for few tiles: counted in bulk, since most of a large grid's combinations land here
                pruned["split-K with enough tiles to fill the GPU"] += len(splits)
                continue
            for sk in splits:
                candidates += _one(workload, kw | {"split_k": sk}, spec, variant, pruned, bad)
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

    def mutate(self, c: KernelConfig, rng: Any, values: dict[str, tuple[Any, ...]] | None = None,
               tries: int = 8) -> KernelConfig:
        """A neighbour of ``c`` inside the space: one knob moved to an adjacent value.

        Used by simulated annealing. Returns ``c`` itself when no neighbour is found in ``tries``.
        """
        values = values or self.knob_values()
        movable = [k for k in KNOB_NAMES if len(values[k]) > 1]
        by_knobs = self.__dict__.get("_by_knobs")
        if by_knobs is None:
            # Neighbours are looked up by their knob values: no KernelConfig is built (and validated)
            # for a move that leaves the space, which is most moves of simulated annealing.
            by_knobs = {_knob_values(x): x for x in self.configs}
            object.__setattr__(self, "_by_knobs", by_knobs)
        here = _knob_values(c)
        for _ in range(tries if movable else 0):
            knob = movable[int(rng.integers(len(movable)))]
            vals = values[knob]
            i = vals.index(getattr(c, knob)) if getattr(c, knob) in vals else 0
            j = i + (1 if rng.random() < 0.5 else -1)
            if not 0 <= j < len(vals):
                j = i - (j - i)
            pos = KNOB_NAMES.index(knob)
            n = by_knobs.get(here[:pos] + (vals[j],) + here[pos + 1:])
            if n is not None:
                return n
        return c


def _invalid_values(knobs: Knobs) -> frozenset[tuple[str, type, Any]]:
    """(knob, type, value) of every value ``KernelConfig`` refuses on its own.

    ``KernelConfig``'s rules each read one knob, except two combinations (``reg_split`` against
    ``block_k``, ``split_k`` with ``persistent``) that ``_one`` checks itself: so a combination is refused
    exactly when one of these values is in it or one of those two holds. Each value is tried beside
    ``block_k=512``, which admits every ``reg_split``, and the defaults, which admit the rest. The type is
    part of the key so that ``True`` and ``1`` stay apart.
    """
    bad: set[tuple[str, type, Any]] = set()
    for name, values in zip(KNOB_NAMES, knobs.values()):
        for v in values:
            try:
                KernelConfig(**{"block_k": 512, name: v})
            except ScheduleError:
                bad.add((name, type(v), v))
    return frozenset(bad)


def _one(workload: Workload, kw: dict[str, Any], spec: Any, variant: str, pruned: Counter[str],
         bad: frozenset[tuple[str, type, Any]]) -> list[KernelConfig]:
    """``[config]`` if the knob values make a valid config that passes the shape rules and the variant, else []
    (with the reason counted in ``pruned``). ``bad``: ``_invalid_values`` of the knobs.

    The rules run on a ``Candidate`` and only a survivor is made a ``KernelConfig``, whose checks then
    cannot fail: the outcome and the reason counted are those of making the config first.
    """
    if (kw["persistent"] and kw["split_k"] > 1) or kw["block_k"] // kw["reg_split"] < 16 \
            or (bad and any((name, type(v), v) in bad for name, v in kw.items())):
        # KernelConfig would refuse these; skipping them here keeps large grids fast to enumerate
        pruned["invalid knob combination"] += 1
        return []
    c = Candidate(**kw)
    why = shape_reason(workload, c, spec)
    if why is None and not variant_ok(c, variant):
        why = f"outside variant {variant!r}"
    if why is not None:
        pruned[why] += 1
        return []
    return [KernelConfig(**kw)]


def _reason_class(reason: str) -> str:
    """Group model reasons by their first clause so the pruning summary stays short."""
    head = (reason or "invalid").split(":")[0].split(",")[0].strip()
    return head[:60] or "invalid"


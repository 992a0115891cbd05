"""``best_config(workload, gpu_spec)``: the config a kernel call uses, without tuning at call time.

Lookup order (the first that answers wins; the answer is cached in memory, so a repeated call is
a dict lookup):

1. the user's tuning database (``$ALCOP_DB``): fastest config measured for exactly this workload;
2. the shipped default tables (``alcop_triton/data/default_*.jsonl``, measured by the maintainers
   on real GPUs, same record format): same query;
3. with ``ALCOP_AUTOTUNE=1`` only: tune now with a small budget, store, use the winner;
4. the nearest tuned shapes (log-space distance of the GEMM dims, same op/dtype/GPU) in either
   source, see ``transfer``: their fastest configs and the model's own shortlist for *this* shape
   (split-K included) are scored by the analytical model for this shape, each corrected by how far
   the model was off where the config was measured;
5. with nothing measured on this GPU: the same scoring over the shipped tables of other GPUs of the
   same MMA path, each measurement's error read against the model of the GPU it was measured on
   (an H200 without a table transfers the H100's through the calibrated model);
6. the analytical model's top-1 over its shortlist (``space.DISPATCH_KNOBS``).

A convolution's gradient (``records.CONV_GRAD_OPS``) stops after 2: it is measured, never tuned or
transferred, and patch mode sends it to alcop only where records hold alcop's time and torch's.

A configuration that failed on this GPU in any recorded run is never returned (``rank_configs``).
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import statistics
import threading
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from .. import generation, settings
from ..errors import DatabaseError, ScheduleError, TuningError
from ..records import CONV_GRAD_OPS, GRADIENT_CONFIG, WS_DTYPES, KernelConfig, Workload, tail_capable
from .database import (GpuKey, TuningRecord, best_of, current_version_group, gpu_key, mma_of, rank_configs, read_jsonl,
                       select)
from .store import TuningStore, open_database

AUTOTUNE_TRIALS = 16
"""Budget of call-time tuning under ``ALCOP_AUTOTUNE=1``: small, since the caller is waiting."""
NEIGHBOURS = 4
"""Measured shapes consulted for an untuned one (nearest first in log (batch, M, N, K))."""
NEIGHBOUR_TOP = 6
"""Fastest configs taken from each neighbour."""
MODEL_TOP = 8
"""The model's own candidates for the untuned shape (configs no neighbour measured, e.g. split-K)."""
UNMEASURED_PENALTY = 1.25
"""A candidate measured on no neighbour must beat the measured ones by this factor: the model's error
for it is unknown, while a measured config's error is read off its neighbour."""

PATCH_MIN_GAIN = (0.03, 0.005)
"""What alcop's recorded time must save against torch's, (fraction of torch's time, ms), for patch mode
to send a workload to alcop: the larger of the two. The fraction is the timer's run-to-run spread (a
smaller gain may not be one). The 5 µs: an alcop call costs the host more than a torch call when the
CPU's caches are cold, as in a model's forward pass (ResNet-50 at batch 64 on an H100 host: about 13 µs
more per convolution, ``docs/decisions.md#d01``), and a host-bound model pays it on every
call; a kernel that saves less does not pay for its call there. Direct calls always run alcop."""

TRAINING_MIN_GAIN_MS = 0.05
"""What the parts of a convolution that trains (its forward and the gradients it needs) must save together, by
their records, for patch mode to send it to alcop (``ops.conv.training_to_torch``): such a call runs alcop's
autograd Function, whose forward, backward formula and gradient calls cost the host several times an
inference call's 13 µs (``PATCH_MIN_GAIN``). On an H200, e2e.py's ResNet-50 bf16 step with its two strided
1x1 downsamples sent to alcop for their weight gradients (7 and 8 µs each) and its stem (288 µs) ran 148 µs
less of kernels a pass, yet its passes were slower than eager's (fastest pass 0.905x and 0.876x in two runs),
on a host that step keeps busy (``docs/decisions.md#d53``). 50 µs: four such calls' host cost, an estimate
until measured per route."""

GRAPH_MIN_GAIN = (0.15, 0.005)
"""``PATCH_MIN_GAIN`` for a product inside a graph ``torch.compile`` builds (``ops.traced``), where the
records overstated torch's time and alcop's epilogue may save nothing (a SwiGLU's SiLU: Inductor fuses it
into the kernel that multiplies the gate by the up projection, which reads both products anyway). On an
H200 (``docs/decisions.md#d48``) the Llama block's gate and up projections (4096 x 11008 x 4096, fp16)
recorded cuBLAS at 0.560 ms and alcop at 0.517 ms (an 8% gain); inside the compiled block cuBLAS ran them
at 0.489 ms and alcop at 0.511 ms, so the graph was slower with alcop's op. Torch's record was 14% above
what the graph ran: a gain must exceed that."""

TORCH_UNLESS_MEASURED: frozenset[str] = frozenset({"float32"})
"""Dtypes whose workloads patch mode leaves to torch until records measure alcop's config against it.
float32 has no shipped table, and alcop's float32 kernels measured slower than cuBLAS on every shape of
``docs/decisions.md#d02`` but one: 0.20-0.82x IEEE (Triton's fused multiply-add dot), 0.60-1.00x
with TF32. Direct calls run alcop's kernel all the same."""


@dataclass(frozen=True)
class Decision:
    """A dispatched config and where it came from ("db", "default", "tuned", "nearest", "transfer", "analytical").

    ``alcop_ms`` and ``torch_ms``: the measured times of this config and of torch on this workload,
    where records hold them (None: not measured). ``unmeasured_to_torch``: without both times, patch
    mode leaves the workload to torch (``TORCH_UNLESS_MEASURED``).
    """

    config: KernelConfig
    source: str
    detail: str = ""
    alcop_ms: float | None = field(default=None, compare=False)
    torch_ms: float | None = field(default=None, compare=False)
    unmeasured_to_torch: bool = field(default=False, compare=False)

    @property
    def torch_preferred(self) -> bool:
        """Both times measured and alcop's config does not beat torch's by ``PATCH_MIN_GAIN`` (unknown:
        alcop is used, unless ``unmeasured_to_torch``). Patch mode leaves such workloads to torch."""
        return self.torch_preferred_by(PATCH_MIN_GAIN)

    def torch_preferred_by(self, min_gain: tuple[float, float]) -> bool:
        """``torch_preferred`` with ``min_gain`` (fraction of torch's time, ms) in place of ``PATCH_MIN_GAIN``."""
        if self.alcop_ms is None or self.torch_ms is None:
            return self.unmeasured_to_torch
        return self.torch_ms - self.alcop_ms < max(min_gain[0] * self.torch_ms, min_gain[1])


def torch_time(records: Sequence[TuningRecord], workload: Workload, gpu: Any) -> float | None:
    """Median torch time recorded with ``workload``'s records on ``gpu`` (None if none has one)."""
    times = [r.torch_ms for r in select(records, workload, gpu) if r.torch_ms is not None]
    return statistics.median(times) if times else None


def default_tables() -> list[TuningRecord]:
    """Records of every shipped ``alcop_triton/data/default_*.jsonl`` (none if absent)."""
    root = importlib.resources.files("alcop_triton").joinpath("data")
    out: list[TuningRecord] = []
    if not root.is_dir():
        return out
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.startswith("default_") and entry.name.endswith(".jsonl"):
            with importlib.resources.as_file(entry) as path:
                out += read_jsonl(path)
    return out


def shape_distance(a: Workload, b: Workload) -> float:
    """Euclidean distance between the log GEMM dims (batch, M, N, K) of two workloads."""
    return math.sqrt(sum((math.log(x) - math.log(y)) ** 2 for x, y in zip(a.gemm_dims(), b.gemm_dims())))


@functools.lru_cache(maxsize=256)
def model_shortlist(workload: Workload, spec: Any) -> list[KernelConfig]:
    """The analytical model's ranking of ``space.dispatch_knobs`` for ``workload`` (fastest first; cached,
    do not modify the list); the small-problem shortlist where none of those fits."""
    from .space import ConfigSpace, dispatch_knobs

    try:
        return ConfigSpace.build(workload, spec, knobs=dispatch_knobs(workload.op)).ranked()
    except TuningError:
        return ConfigSpace.build(workload, spec, knobs=dispatch_knobs(workload.op, small=True)).ranked()


def ws_seeds(workload: Workload, spec: Any) -> list[KernelConfig]:
    """The warp-specialized kernel's measured configs (``kernels.matmul_ws.ws_configs``) for a half-precision
    single GEMM (op "matmul") on a GPU with wgmma, each as ``hopper.plan`` runs it on ``workload`` (ping-pong
    made cooperative below two tiles per SM, persistence dropped with no more tiles than SMs, the ring cut
    to the reduction's chunks): the config the space holds for what the kernel runs there. Else none."""
    if workload.op != "matmul" or workload.dtype not in WS_DTYPES or getattr(spec, "mma", "") != "wgmma":
        return []
    from ..kernels.matmul_ws import ws_configs
    from ..model.analytical import ws_plan

    out: list[KernelConfig] = []
    for c in ws_configs(workload.dtype):
        h = ws_plan(workload, c, spec)
        try:
            out.append(c.replace(smem_stages=h.stages, reg_stages=h.wgmma_depth + 1, num_warps=4 * h.consumers,
                                 persistent=h.persistent, pingpong=h.policy == "pingpong"))
        except ScheduleError:  # a plan whose level 3 a KernelConfig cannot say: the request as it is
            out.append(c)
    return list(dict.fromkeys(out))


OWN_GPU_FIRST = True
"""A config measured near ``workload`` on the GPU being answered takes its correction from those measurements
alone; another GPU's measurements of it count only where this GPU has none. Pooled, another GPU's many
records of a config outvoted this GPU's own (an H100-measured pointer copy beat the H200's own TMA winner on
64x4096x4096). ``docs/decisions.md#d45``; False restores the pooled correction (``transfer_replay.py``
reports both)."""


def transfer_ranking(workload: Workload, records: Sequence[TuningRecord], spec: Any
                     ) -> tuple[list[KernelConfig], str] | None:
    """The candidates ``transfer`` scores for an unmeasured ``workload``, best scored first, and where they
    came from (tuning starts from them: ``Dispatcher.seeds``).

    Candidates: the ``NEIGHBOUR_TOP`` fastest configs of each of the ``NEIGHBOURS`` nearest measured
    shapes (same op and dtype; same layout preferred), and the model's ``MODEL_TOP`` for this shape.
    Each is scored by the analytical estimate for this shape times its correction: how far the model
    was off for that config where it was measured (every measurement of it on a neighbour counts, not
    only the fastest), *relative to the model's typical error on that neighbour* (the median over the
    neighbour's measured configs). The model's error has a per-shape part (it over-estimates small
    problems, under-estimates others) that says nothing about which config wins; left in, a config
    measured only on a small neighbour would inherit that neighbour's optimism and beat the winner
    of a large one. Nearer shapes weigh more. A config measured on no neighbour takes the relative
    correction 1 times ``UNMEASURED_PENALTY``. Configs the shape rules reject (tiles beyond the
    problem, stages beyond the trip count, split-K where tiles fill the GPU) or that failed in any run
    are never chosen (nor listed). None when nothing was measured.
    """
    from ..model import analytical
    from .space import shape_reason

    by_wl: dict[tuple[str, Workload], list[TuningRecord]] = {}
    failed: set[KernelConfig] = set()
    for r in records:
        if r.workload.op == workload.op and r.workload.dtype == workload.dtype:
            by_wl.setdefault((r.gpu, r.workload), []).append(r)
            if not r.ok:
                failed.add(r.config)
    order = sorted(by_wl, key=lambda gw: (shape_distance(gw[1], workload) + 0.5 * (gw[1].layout != workload.layout),
                                          gw[0] != getattr(spec, "name", ""), gw[1].key(), gw[0]))
    errors: dict[KernelConfig, list[tuple[float, float, bool]]] = {}  # config -> (weight, log rel. error, on this GPU)
    candidates: list[KernelConfig] = []
    used: list[str] = []
    for gpu, w in order:
        ranked = rank_configs(current_version_group(by_wl[(gpu, w)]))
        measured_on = _spec_of(gpu, spec)
        if not ranked or measured_on is None:
            continue
        logs: dict[KernelConfig, float] = {}
        for rc in ranked:
            e = analytical.estimate(w, rc.config, measured_on)
            if e.valid and math.isfinite(e.time_s) and e.time_s > 0:
                logs[rc.config] = math.log(rc.time_ms * 1e-3 / e.time_s)
        if not logs:
            continue
        used.append(w.key() + ("" if gpu == getattr(spec, "name", gpu) else f" on {gpu}"))
        weight, bias = 1.0 / (1.0 + shape_distance(w, workload)), statistics.median(logs.values())
        here = gpu == getattr(spec, "name", "")
        for c, x in logs.items():
            errors.setdefault(c, []).append((weight, x - bias, here))
        candidates += [rc.config for rc in ranked[:NEIGHBOUR_TOP] if rc.config not in candidates]
        if len(used) == NEIGHBOURS:
            break
    if not used:
        return None

    def correction(pairs: list[tuple[float, float, bool]]) -> float:
        if OWN_GPU_FIRST:
            own = [p for p in pairs if p[2]]
            pairs = own or pairs
        return math.exp(sum(wt * x for wt, x, _ in pairs) / sum(wt for wt, _, _ in pairs))

    candidates += [c for c in model_shortlist(workload, spec)[:MODEL_TOP] if c not in candidates]
    scored: list[tuple[float, int]] = []
    for i, c in enumerate(candidates):
        if c in failed or shape_reason(workload, c, spec) is not None:
            continue
        e = analytical.estimate(workload, c, spec)
        if not e.valid or not math.isfinite(e.time_s):
            continue
        scored.append((e.time_s * (correction(errors[c]) if c in errors else UNMEASURED_PENALTY), i))
    if not scored:
        return None
    best_first = [candidates[i] for _, i in sorted(scored)]
    how = "measured near" if best_first[0] in errors else "model shortlist"
    return best_first, f"{how}; scored over {len(candidates)} candidates from {', '.join(used)}"


def transfer(workload: Workload, records: Sequence[TuningRecord], spec: Any) -> tuple[KernelConfig, str] | None:
    """A config for an unmeasured ``workload`` from measurements of nearby shapes (on this GPU, or on
    others: each record's error is taken against the model of the GPU it was measured on): the best
    scored of ``transfer_ranking``, and how it was found. None when nothing was measured."""
    ranked = transfer_ranking(workload, records, spec)
    return None if ranked is None else (ranked[0][0], ranked[1])


def _spec_of(gpu: str, spec: Any) -> Any:
    """The model spec of the GPU a record was measured on (same MMA path as ``spec``); None if unknown."""
    if gpu == getattr(spec, "name", None):
        return spec
    from ..errors import UnsupportedError
    from ..model import hardware

    try:
        return hardware.get_spec(gpu, mma=getattr(spec, "mma", None))
    except (UnsupportedError, ValueError):
        return None


class Dispatcher:
    """best_config with its caches; one per database (``dispatch.best_config`` uses a shared one).

    Args:
        db: the user's database; None = ``open_database()`` (``$ALCOP_DB`` or the default path). A
            missing file is not created by lookups, and a server's is read through its local mirror.
        use_defaults: consult the shipped default tables.
        defaults: records to consult in their place (leave-one-out evaluations: the tables without
            the workload under test); None: the shipped tables.
    """

    def __init__(self, db: TuningStore | None = None, *, use_defaults: bool = True,
                 defaults: Sequence[TuningRecord] | None = None) -> None:
        self.db = db if db is not None else open_database()
        self.use_defaults = use_defaults
        self._cache: dict[tuple[Workload, GpuKey, str], Decision] = {}
        self._given = None if defaults is None else list(defaults)
        self._defaults: list[TuningRecord] | None = self._given
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget cached decisions (e.g. after another process tuned)."""
        with self._lock:
            self._cache.clear()
            self._defaults = self._given

    def best_config(self, workload: Workload, gpu_spec: Any) -> KernelConfig:
        hit = self._cache.get((workload, gpu_key(gpu_spec), mma_of(gpu_spec)))
        if hit is not None:
            return hit.config
        return self.decide(workload, gpu_spec).config

    def decide(self, workload: Workload, gpu_spec: Any) -> Decision:
        """Like best_config, but says where the config came from (cached too)."""
        key = (workload, gpu_key(gpu_spec), mma_of(gpu_spec))
        hit = self._cache.get(key)
        if hit is None:
            started = generation.current()
            hit = self._decide(workload, gpu_spec)
            with self._lock:
                # A bump while deciding (a server database's background refresh brought records) made this
                # answer stale: it is returned once but not remembered, so the next call decides again.
                if generation.current() == started:
                    self._cache[key] = hit
        return hit

    def torch_ms(self, workload: Workload, gpu_spec: Any) -> float | None:
        """torch's recorded time on ``workload``: the user's database's, else the shipped tables'
        (None: not measured), as ``decide`` reads it for its own workload."""
        mine = torch_time(self._db_records(workload=workload, gpu=gpu_spec), workload, gpu_spec)
        return mine if mine is not None else torch_time(self._default_records(), workload, gpu_spec)

    def _db_records(self, **query: Any) -> list[TuningRecord]:
        try:
            # Never the network: a server database answers from its local mirror.
            return self.db.cached_records(**query)
        except DatabaseError as exc:
            # A broken user database must not break kernel calls: fall back to shipped data.
            warnings.warn(f"tuning database unusable, ignored: {exc}", stacklevel=4)
            return []

    def _default_records(self) -> list[TuningRecord]:
        if not self.use_defaults:
            return []
        if self._defaults is None:
            try:
                self._defaults = default_tables()
            except OSError as exc:  # an unreadable installed file; its bad lines are skipped by read_jsonl
                warnings.warn(f"shipped default tuning tables unreadable, ignored: {exc}", stacklevel=4)
                self._defaults = []
        return self._defaults

    def _decide(self, workload: Workload, spec: Any, autotune: bool = True) -> Decision:
        # The spec (not just its GpuKey) is passed down so records of another MMA path are ignored.
        # A dtype of TORCH_UNLESS_MEASURED stays with torch until records hold both times, whichever way the
        # config was found: a record of alcop's time alone (torch's run failed, or was not asked for) or a
        # call-time tuning does not measure alcop against torch.
        unmeasured = workload.dtype in TORCH_UNLESS_MEASURED or workload.op in CONV_GRAD_OPS
        mine = self._db_records(workload=workload, gpu=spec)
        found = best_of(mine, workload, spec)
        if found is not None:
            return Decision(found.config, "db", f"{found.time_ms:.4g} ms over {found.count} run(s)", found.time_ms,
                            torch_time(mine, workload, spec), unmeasured_to_torch=unmeasured)
        shipped = self._default_records()
        found = best_of(shipped, workload, spec)
        if found is not None:
            return Decision(found.config, "default", f"{found.time_ms:.4g} ms", found.time_ms,
                            torch_time(shipped, workload, spec), unmeasured_to_torch=unmeasured)
        if workload.op in CONV_GRAD_OPS:
            # A gradient is measured, never tuned nor transferred (its kernels plan their tiles): unmeasured,
            # patch mode leaves it to torch, as it left every convolution that trains before gradients
            # were measured (docs/decisions.md#d53).
            return Decision(GRADIENT_CONFIG, "unmeasured", "no record of this gradient", unmeasured_to_torch=True)
        if autotune and settings.autotune():
            tuned = self._tune(workload, spec)
            if tuned is not None:
                return replace(tuned, unmeasured_to_torch=unmeasured)
        near = self._nearest(workload, spec)
        if near is not None:
            return Decision(near[1][0], near[0], near[2], unmeasured_to_torch=unmeasured)
        return Decision(model_shortlist(workload, spec)[0], "analytical", "model top-1", unmeasured_to_torch=unmeasured)

    def _nearest(self, workload: Workload, spec: Any) -> tuple[str, list[KernelConfig], str] | None:
        """("nearest" or "transfer", ``transfer_ranking``'s candidates, its detail); None if nothing was measured.

        One ranking over this GPU's records and the shipped records of other GPUs of the same MMA path (their
        errors read against their own model); at equal distance a shape measured on this GPU comes first.
        Not this GPU's records alone where it has some: a table that covers a few workloads (the H200's,
        today) answered the others worse than the other GPU's dense table did (``docs/decisions.md#d40``).
        "nearest" where this GPU has records of the op and dtype, "transfer" where it has none."""
        own = select(self._db_records(gpu=spec, op=workload.op, dtype=workload.dtype) + self._default_records(),
                     gpu=spec)
        mma = mma_of(spec)
        foreign = [r for r in self._default_records() if r.gpu_key != gpu_key(spec) and (not mma or r.mma in ("", mma))]
        picked = transfer_ranking(workload, own + foreign, spec)
        if picked is None:
            return None
        mine = any(r.workload.op == workload.op and r.workload.dtype == workload.dtype for r in own)
        return ("nearest" if mine else "transfer"), picked[0], picked[1]

    def seeds(self, workload: Workload, spec: Any) -> list[KernelConfig]:
        """What dispatch knows about ``workload``, best first: the config an untuned call runs (never
        tuning for it, whatever ``ALCOP_AUTOTUNE`` says), then the warp-specialized kernel's measured
        configs (``ws_seeds``), then the other candidates ``transfer_ranking`` scores from the nearest
        measured shapes, then the model's shortlist. A tuning run measures these first (``Tuner``'s
        ``seed_configs``), so what it finds is never slower than the untuned call.

        The warp-specialized configs come second, not after the neighbours' candidates: a run measures
        only the first ``session.SEED_BATCHES`` batches of seeds (16 configs at the default batch of 8),
        and the untuned call and its neighbours' candidates are 20 to 30; so each run measures both
        lowerings of a single GEMM before its tuner's own proposals."""
        first = self._decide(workload, spec, autotune=False).config
        near = self._nearest(workload, spec)
        shortlist = model_shortlist(workload, spec)[:MODEL_TOP]
        known = [first, *ws_seeds(workload, spec), *(near[1] if near is not None else [])]
        # Each measured config's wave-tail twins right after it, its tail of small tiles and its tail split
        # along K (where one can exist: the space drops the twins whose tiles fill whole waves, and the split
        # twin where no split of two fits): they differ only in how its last wave runs, which the
        # measurements of other shapes say nothing of.
        from .space import shape_reason
        twins = [[c] + [t for t in (c.replace(wave_tail=True), c.replace(wave_tail=True, tail_split=True))
                        if shape_reason(workload, t, spec) is None] if tail_capable(c) else [c] for c in known]
        return list(dict.fromkeys([c for pair in twins for c in pair] + shortlist))

    def _tune(self, workload: Workload, spec: Any) -> Decision | None:
        from . import session

        target = session.resolve_target(None)
        if (target.key, target.mma) != (gpu_key(spec), mma_of(spec)):
            # Measuring on another device (or MMA path) than the one asked about would store wrong data.
            return None
        result = session.tune(workload, session.Target(target.device, spec, target.key, target.device_name,
                                                         target.mma), self.db, n_trials=AUTOTUNE_TRIALS)
        best = result.best
        return Decision(best.config, "tuned", f"{best.result.time_ms:.4g} ms") if best is not None else None


_shared: dict[str | None, Dispatcher] = {}


def _forget_decisions() -> None:
    for d in list(_shared.values()):
        d.clear()


generation.on_bump(_forget_decisions)  # e.g. the database gained a record: decide again


def dispatcher() -> Dispatcher:
    """The process-wide Dispatcher of the current ``$ALCOP_DB`` (one per value, created on first use)."""
    env = settings.db_location()
    d = _shared.get(env)
    if d is None:
        d = _shared.setdefault(env, Dispatcher())
    return d


def best_config(workload: Workload, gpu_spec: Any = None) -> KernelConfig:
    """The config to run ``workload`` with on ``gpu_spec`` (None: the current CUDA device).

    Never tunes unless ``ALCOP_AUTOTUNE=1``; see the module docstring for the lookup order.
    """
    if gpu_spec is None:
        from ..model import hardware

        gpu_spec = hardware.detect()
    return dispatcher().best_config(workload, gpu_spec)

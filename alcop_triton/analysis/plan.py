"""Pipeline planning: the depth each loop gets, from the candidates' verdicts, rule 3 and the clamps.

Rule 3 (sync scope): Triton commits one loop's async copies in shared groups and waits on them
together, so the shared buffers of one loop share a depth; so do the register buffers, which the
prefetch code rotates together. A conflict resolves to the deepest request (more latency hidden; the
shared-memory check below then accounts for it), or raises in strict mode.
Clamps: a depth beyond the reduction's trip count buys nothing and costs shared memory; a depth whose
buffers do not fit the target GPU's shared memory cannot run. Both clamp with a reported reason, or
raise ``PipelineError`` in strict mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OutOfResources, PipelineError
from ..loop_ir import For, Kernel
from .pipelinable import Candidate

ELEM_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


@dataclass(frozen=True)
class PipelinePlan:
    smem_stages: int
    reg_stages: int
    async_copy: tuple[tuple[str, str], ...]     # (operand role, 'pointer' | 'tma')
    candidates: tuple[Candidate, ...]
    notes: tuple[str, ...]

    def mechanism(self, role: str) -> str:
        return dict(self.async_copy).get(role, "pointer")


def smem_per_stage(k: Kernel) -> int:
    """Shared memory of one pipeline stage: an A and a B chunk (Triton stages whole chunks)."""
    c = k.constexprs
    return (c["BLOCK_M"] * c["BLOCK_K"] + c["BLOCK_K"] * c["BLOCK_N"]) * ELEM_BYTES[k.dot_dtype]


def stage_room(smem_limit: int, block_m: int, block_n: int, out_bytes: int, flattened: bool) -> int:
    """Shared memory the pipeline stages may use. Flattened into a persistent tile loop, the stages
    stay live through the epilogue (the next tile's copies are in flight), so the epilogue's output
    tile needs its own scratch on top (measured: 64x64x128 at 7 stages needs 7 x 32768 + 8192 B)."""
    return smem_limit - (block_m * block_n * out_bytes if flattened else 0)


def _resolve(cands: list[Candidate], scope: str, strict: bool, notes: list[str]) -> int:
    ok = [c for c in cands if c.scope == scope and c.pipelinable]
    for c in cands:
        if c.scope == scope and not c.pipelinable and c.requested > 1:
            notes.append(f"{c.buffer}: requested {c.requested} stages but it cannot be pipelined; it stays "
                         "synchronous (see its rule verdicts)")
    if not ok:
        return 1
    depth = max(c.requested for c in ok)
    shallower = [c for c in ok if c.requested != depth]
    if shallower:
        msg = (f"rule 3 (sync scope): {', '.join(f'{c.buffer}={c.requested}' for c in ok)} share loop "
               f"{ok[0].loop}'s synchronization; all use {depth} stages (deepest wins)")
        if strict:
            raise PipelineError(msg + "; strict mode: give them the same depth")
        notes.append(msg)
    return depth


def plan_pipeline(k: Kernel, cands: tuple[Candidate, ...], *, async_copy: str = "pointer",
                  trip_count: int | None = None, smem_limit: int | None = None, strict: bool = False) -> PipelinePlan:
    """Decide the shared and register depths and the copy mechanism of each operand."""
    notes: list[str] = []
    clist = list(cands)
    s_stages = _resolve(clist, "shared", strict, notes)
    r_stages = _resolve(clist, "register", strict, notes)
    split = k.constexprs["REG_SPLIT"]

    def clamp(what: str, want: int, limit: int, why: str) -> int:
        if want <= limit:
            return want
        msg = f"{what}: {want} stages clamped to {limit}: {why}"
        if strict:
            raise PipelineError(msg + " (strict mode)")
        notes.append(msg)
        return limit

    persistent = any(isinstance(n, For) and n.role == "tiles" for n in k.body)
    if trip_count is not None:
        runs = (f"the flattened tile and reduction loop runs {trip_count} chunk(s) per program" if persistent
                else f"the reduction loop runs {trip_count} chunk(s) of BLOCK_K={k.constexprs['BLOCK_K']}")
        s_stages = clamp("shared level", s_stages, max(1, trip_count), runs)
        r_stages = clamp("register level", r_stages, max(1, trip_count * split),
                         f"there are {trip_count * split} sub-tile(s) to prefetch")
    if smem_limit is not None:
        per = smem_per_stage(k)
        if per > smem_limit:
            raise OutOfResources("shared memory", per, smem_limit,
                                 "One stage of the A and B chunks does not fit; reduce BLOCK_M/BLOCK_N/BLOCK_K.")
        flattened = persistent and s_stages > 1
        room = stage_room(smem_limit, k.constexprs["BLOCK_M"], k.constexprs["BLOCK_N"],
                          ELEM_BYTES.get(k.out.dtype, 4), flattened)
        why = f"the GPU's {smem_limit} B of shared memory per block"
        if flattened:
            why += f" less the epilogue's {smem_limit - room} B (flattened persistent loop)"
        s_stages = clamp("shared level", s_stages, max(1, room // per), f"{s_stages} x {per} B per stage exceeds {why}")
    if persistent:
        notes.append("persistent: programs loop over output tiles; " + (
            "the tile loop is flattened with the reduction loop, so the shared level's copies run ahead across "
            "tile boundaries (the next tile's first chunks load during this tile's epilogue)" if s_stages > 1 else
            "one shared stage, so nothing is copied ahead and the tile loop is not flattened"))
    mech = []
    for c in clist:
        if c.scope != "shared":
            continue
        if async_copy == "tma" and not c.tma_ok:
            notes.append(f"{c.buffer}: TMA requested but {c.tma_reason}; copied with pointers (cp.async)")
        mech.append((c.role, "tma" if async_copy == "tma" and c.tma_ok else "pointer"))
    return PipelinePlan(s_stages, r_stages, tuple(mech), cands, tuple(notes))

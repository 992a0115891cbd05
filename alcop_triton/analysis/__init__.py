"""Pipelining analysis: which buffers can be pipelined (ALCOP's three rules) and at what depth."""

from __future__ import annotations

from .pipelinable import Candidate, find_pipeline_candidates
from .plan import PipelinePlan, plan_pipeline, smem_per_stage


def explain(plan: PipelinePlan) -> str:
    """A table of every staged buffer: level, stages (requested -> planned), loop, and why."""
    rows = [f"{'buffer':<18} {'level':<9} {'stages':<8} {'loop':<5} pipelined  why"]
    for c in plan.candidates:
        got = (plan.smem_stages if c.scope == "shared" else plan.reg_stages) if c.pipelinable else 1
        mech = f" via {plan.mechanism(c.role)}" if c.scope == "shared" else ""
        rows.append(f"{c.buffer:<18} {c.scope:<9} {f'{c.requested}->{got}':<8} {c.loop or '-':<5} "
                    f"{'yes' if c.pipelinable and got > 1 else 'no':<10} {c.reasons[0]}{mech}")
        rows.extend(f"{'':<52} {r}" for r in c.reasons[1:])
    if not plan.candidates:
        rows.append("(no staged buffers: no cache_read, so every load is plain and nothing is pipelined)")
    rows.extend(f"note: {n}" for n in plan.notes)
    return "\n".join(rows)


__all__ = ["Candidate", "PipelinePlan", "explain", "find_pipeline_candidates", "plan_pipeline", "smem_per_stage"]

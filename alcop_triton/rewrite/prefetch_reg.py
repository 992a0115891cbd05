"""PrefetchRegisters: the register level as explicit prefetch code (paper section 3, Fig. 7).

The reduction chunk is split into REG_SPLIT sub-tiles. With R register stages the sub-tile t + R - 1
is loaded into registers before the dot on sub-tile t:
  * prologue: sub-tiles 0 .. R-2 are loaded before the chunk loop;
  * index shifting: inside chunk k0, step ks loads linear sub-tile ks + R - 1, which belongs to chunk
    k0 + (ks + R - 1) // REG_SPLIT: the loads of the last steps reach into the next chunk, so the
    inner pipeline is fused across chunk iterations (inner-pipeline fusion) instead of draining;
  * modulo wrap: R register buffers per operand are used round-robin; at the end of a chunk they are
    renamed (free in SSA) so the loop carries them in a fixed order.
With R = 1 the sub-tiles are loaded right before their dot (no prefetch), unrolled.
"""

from __future__ import annotations

import dataclasses

from ..analysis.plan import PipelinePlan
from ..loop_ir import Copy, Dot, For, KIndices, KRef, Kernel, Node, Rotate, Transformer


class PrefetchRegisters(Transformer):
    def __init__(self, plan: PipelinePlan, split: int) -> None:
        self.plan, self.split = plan, split

    def visit_body(self, body: tuple[Node, ...]) -> tuple[Node, ...]:
        out: list[Node] = []
        for n in body:
            if isinstance(n, For) and n.role == "chunk" and any(isinstance(c, For) and c.role == "sub" for c in n.body):
                out.extend(self._rewrite_chunk(n))
            else:
                r = self.visit(n)
                out.extend(r if isinstance(r, tuple) else (r,) if r is not None else ())
        return tuple(out)

    def _rewrite_chunk(self, chunk: For) -> tuple[Node, ...]:
        sub = next(c for c in chunk.body if isinstance(c, For) and c.role == "sub")
        head = tuple(c for c in chunk.body if c is not sub)
        copies = [c for c in sub.body if isinstance(c, Copy)]
        dot = next(c for c in sub.body if isinstance(c, Dot))
        split, r = self.split, self.plan.reg_stages
        if r == 1:
            steps: list[Node] = []
            for ks in range(split):
                at = KRef(chunk.var, 0, ks)
                sfx = f"_{ks}" if split > 1 else ""
                steps.append(KIndices(at, "SUB_K", sfx))
                steps += [dataclasses.replace(c, at=at, suffix=sfx, target=f"tile_{c.role}{sfx}") for c in copies]
                steps.append(dataclasses.replace(dot, a=f"tile_a{sfx}", b=f"tile_b{sfx}"))
            return (dataclasses.replace(chunk, body=head + tuple(steps)),)

        dist = r - 1

        def load(t: int, slot: int, loop: str | None, note: str) -> list[Node]:
            at = KRef(loop, t // split, t % split)
            sfx = f"_p{slot}"
            return [KIndices(at, "SUB_K", sfx)] + [
                dataclasses.replace(c, at=at, suffix=sfx, target=f"tile_{c.role}{sfx}", note=note) for c in copies]

        prologue: list[Node] = []
        for t in range(dist):
            prologue += load(t, t, None, f"prefetch prologue: sub-tile {t} of chunk 0")
        live, free = list(range(dist)), [dist]
        steps = []
        for ks in range(split):
            t = ks + dist
            slot = free.pop(0)
            live.append(slot)
            ahead = t // split
            note = (f"prefetch: sub-tile {t % split} of chunk k0 + {ahead} while computing sub-tile {ks} "
                    "(inner-pipeline fusion)" if ahead else
                    f"prefetch: sub-tile {t} loaded {dist} step(s) before its dot")
            steps += load(t, slot, chunk.var, note)
            cur = live[ks]
            steps.append(dataclasses.replace(dot, a=f"tile_a_p{cur}", b=f"tile_b_p{cur}",
                                             note=f"compute on sub-tile {ks} (buffer {cur} of {r})"))
            free.append(cur)
        carried = live[split:split + dist]
        if carried != list(range(dist)):
            roles = [c.role for c in copies]
            steps.append(Rotate(tuple(f"tile_{x}_p{i}" for x in roles for i in range(dist)),
                                tuple(f"tile_{x}_p{s}" for x in roles for s in carried)))
        return tuple(prologue) + (dataclasses.replace(chunk, body=head + tuple(steps)),)

    def __call__(self, k: Kernel) -> Kernel:
        return k.replace(body=self.visit_body(k.body))

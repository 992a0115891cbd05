"""SelectAsyncCopy: choose each operand's copy mechanism (cp.async pointers or TMA descriptors)."""

from __future__ import annotations

import dataclasses

from .. import te
from ..analysis.pipelinable import box_blocks, plain_tile, window_blocks
from ..analysis.plan import PipelinePlan
from ..loop_ir import Copy, Descriptor, Kernel, Node, Operand, TileIndices, Transformer, find


class SelectAsyncCopy(Transformer):
    """Mark the copies of TMA operands and declare their descriptors, which the launcher builds; with
    TMA operands the epilogue stores by TMA too where the output is a plain tile. An A operand that
    is a window of its tensor (a convolution's input) makes the M tile a box of output positions,
    which the tile indices follow."""

    def __init__(self, plan: PipelinePlan) -> None:
        self.plan = plan
        self.box: tuple[str, ...] = ()

    def visit_Copy(self, node: Copy) -> Node:
        mech = self.plan.mechanism(node.role)
        return node if node.mechanism == mech else dataclasses.replace(node, mechanism=mech)

    def visit_TileIndices(self, node: TileIndices) -> Node:
        return dataclasses.replace(node, box=self.box) if node.dim == "m" and self.box else node

    def __call__(self, k: Kernel) -> Kernel:
        descs = tuple(_operand_descriptor(k, k.operand(role)) for role, m in self.plan.async_copy if m == "tma")
        if len(k.axes["m"]) > 1 and any(d.role == "a" for d in descs) and not plain_tile(k, k.operand("a"))[0]:
            self.box = box_blocks(k.axes["m"])  # the box window_blocks copied A's tiles in
        out = _store_descriptor(k) if descs else None
        return k.replace(body=self.visit_body(k.body), descriptors=descs + ((out,) if out else ()))


def _operand_descriptor(k: Kernel, o: Operand) -> Descriptor:
    """A chunk split into register sub-tiles is copied one sub-tile (SUB_K) at a time. An operand that
    is no plain 2-D tile is a window of its tensor (``window_blocks``): dims of one entry first, then
    the tile's dims in storage order, the unit-stride one last."""
    split = k.constexprs["REG_SPLIT"] > 1 or bool(find(k.body, lambda x: isinstance(x, Copy) and x.role == o.role
                                                        and x.scope == "register"))
    if plain_tile(k, o)[0]:
        return _descriptor(o.role, o.tensor.name, list(o.dims), o.contiguous, "SUB_K" if split else "BLOCK_K")
    blocks, why = window_blocks(k, o)
    assert blocks is not None and o.contiguous is not None, why  # the plan chose TMA only where feasible
    dims = ([d for d, b in enumerate(blocks) if b == "1"]
            + [d for d, b in enumerate(blocks) if b != "1" and d != o.contiguous] + [o.contiguous])
    return Descriptor(o.role, o.tensor.name, tuple(dims), tuple(blocks[d] for d in dims))


def _store_descriptor(k: Kernel) -> Descriptor | None:
    """The output's descriptor when each of its dims is one batch, row or column axis, the rows and the
    columns one axis each, and one of those two dims has unit stride; otherwise pointers store it."""
    out = k.out
    if not isinstance(out.op, te.ComputeOp) or len(k.axes["m"]) != 1 or len(k.axes["n"]) != 1:
        return None
    kind = {a: d for d, axs in k.axes.items() for a in axs}
    kinds = [kind.get(ax.name, "") for ax in out.op.axes]
    unit = k.unit_stride.get(out.name)
    if sorted(x for x in kinds if x != "b") != ["m", "n"] or any(x not in ("b", "m", "n") for x in kinds) \
            or unit is None or kinds[unit] == "b":
        return None
    return _descriptor("out", out.name, kinds, unit)


def _descriptor(role: str, tensor: str, kinds: list[str], unit: int | None, k_block: str = "") -> Descriptor:
    """Over a tensor whose dims follow ``kinds`` ('b', 'm', 'n', 'k'): batch dims first (one entry per
    copy), then the tile's two dims with the unit-stride one last, as TMA requires."""
    block = {"b": "1", "m": "BLOCK_M", "n": "BLOCK_N", "k": k_block}
    tile = sorted((d for d, x in enumerate(kinds) if x != "b"), key=lambda d: d == unit)
    dims = tuple([d for d, x in enumerate(kinds) if x == "b"] + tile)
    return Descriptor(role, tensor, dims, tuple(block[kinds[d]] for d in dims))

"""Patch mode keeps Python's and torch's semantics: ``tensor @ obj`` reaches ``obj.__rmatmul__``, a
subclass's ``__torch_function__`` still sees its calls, torch's deprecated positional forms work, an
asyncio task's ``patched()`` block routes while another task's is open, and a thread that ends with
patch mode on leaves it (the wrappers go back)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import torch
from conftest import OpRecorder, randn

from alcop_triton import patch

pytestmark = pytest.mark.interpreter


def _routed_to_alcop(fn: Any) -> bool:
    with OpRecorder() as rec:
        fn()
    return any(op.startswith("alcop.") for op in rec.ops)


class RightOperand:
    def __rmatmul__(self, other: Any) -> str:
        return "rmatmul"


def test_rmatmul_of_a_non_tensor_operand_is_called() -> None:
    a, b = randn(2, 3), randn(3, 2)
    want = a @ b
    with patch.patched():
        assert (a @ RightOperand()) == "rmatmul"
        with pytest.raises(TypeError):
            a @ object()  # neither side: Python's TypeError, as without patch mode
        assert torch.allclose(a @ b, want, atol=1e-5)


class Intercepting(torch.Tensor):
    seen: list[Any] = []

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        cls.seen.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_subclass_torch_function_still_intercepts(fallbacks: list) -> None:
    a, b = randn(4, 3).as_subclass(Intercepting), randn(3, 2)
    with patch.patched():
        for call in (lambda: a @ b, lambda: torch.matmul(a, b), lambda: a.mm(b), lambda: torch.nn.functional.linear(a, b.t())):
            Intercepting.seen.clear()
            y = call()
            assert Intercepting.seen and type(y) is Intercepting


def test_a_torch_function_mode_still_routes_plain_tensors() -> None:
    with patch.patched(), torch.device("cpu"):  # torch.device's block is a torch function mode
        assert _routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2)))


def test_deprecated_positional_forms_compute_as_torch() -> None:
    inp, m1, m2 = randn(4, 3), randn(4, 5, seed=1), randn(5, 3, seed=2)
    b_inp, b1, b2 = randn(2, 4, 3), randn(2, 4, 5, seed=1), randn(2, 5, 3, seed=2)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = [torch.addmm(0.5, inp, 2, m1, m2), torch.addmm(0.5, inp, m1, m2), inp.addmm(0.5, m1, m2),
                torch.baddbmm(0.5, b_inp, 2, b1, b2)]
        with patch.patched():
            got = [torch.addmm(0.5, inp, 2, m1, m2), torch.addmm(0.5, inp, m1, m2), inp.addmm(0.5, m1, m2),
                   torch.baddbmm(0.5, b_inp, 2, b1, b2)]
    for g, w in zip(got, want):
        assert torch.allclose(g, w, atol=1e-5)


def test_patched_blocks_follow_asyncio_tasks() -> None:
    async def block(opened: asyncio.Event, other_opened: asyncio.Event) -> list[bool]:
        seen = []
        with patch.patched():
            opened.set()
            await other_opened.wait()  # both tasks' blocks open
            seen.append(_routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2))))
            await asyncio.sleep(0)
            seen.append(_routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2))))
        return seen

    async def outside(done: asyncio.Event) -> bool:
        await done.wait()
        return _routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2)))

    async def main() -> tuple[list[bool], list[bool], bool]:
        e1, e2, done = asyncio.Event(), asyncio.Event(), asyncio.Event()
        t3 = asyncio.create_task(outside(done))
        r1, r2 = await asyncio.gather(block(e1, e2), block(e2, e1))
        done.set()
        return r1, r2, await t3

    r1, r2, r3 = asyncio.run(main())
    assert r1 == [True, True] and r2 == [True, True] and r3 is False
    assert not patch.is_enabled()


def _originals() -> list[Any]:
    return [getattr(owner, name) for owner, name, _ in patch.ROUTES]


def test_a_thread_that_ends_with_patch_mode_on_leaves_it() -> None:
    torch.mm(randn(2, 2), randn(2, 2))  # any wrappers from earlier tests put back
    originals = _originals()
    routed: list[bool] = []

    def worker() -> None:
        patch.enable()
        routed.append(_routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2))))

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert routed == [True]
    # this thread never enabled patch mode: torch's op, and the wrappers go back on that call
    assert not _routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2)))
    assert _originals() == originals and patch._live == 0


def test_patched_is_a_block_and_a_decorator_and_leaves_nothing_live() -> None:
    torch.mm(randn(2, 2), randn(2, 2))  # any wrappers from earlier tests put back
    assert patch._live == 0

    @patch.patched()
    def routed_inside() -> tuple[bool, int]:
        return _routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2))), patch._live

    assert routed_inside() == (True, 1) and routed_inside() == (True, 1)  # the same object entered twice
    with patch.patched():
        with patch.patched():  # nested: one activation for the context
            assert patch._live == 1 and patch._patch.get().blocks == 2
        assert _routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2)))
    assert patch._live == 0 and not _routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2)))
    with pytest.raises(ValueError):  # an exception leaves the block, and patch mode with it
        with patch.patched():
            raise ValueError("inside")
    assert patch._live == 0 and patch._patch.get().blocks == 0


def test_a_task_started_inside_enable_inherits_it_and_disable_stays_local() -> None:
    async def child() -> bool:
        return _routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2)))

    async def main() -> tuple[bool, bool]:
        patch.enable()
        task = asyncio.create_task(child())  # a copy of this context: patch mode on
        patch.disable()
        return await task, _routed_to_alcop(lambda: torch.mm(randn(3, 4), randn(4, 2)))

    inherited, here = asyncio.run(main())
    assert inherited and not here

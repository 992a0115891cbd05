"""``runtime.prebind`` on CUDA, with Triton's compiled kernel and driver replaced by recorders: the
argument order of the two launch routes, the shared scratch buffers and the launch hooks. (On a GPU the same launches run for
real in tests/gpu.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from triton import knobs

from alcop_triton import runtime


class _Stream:
    def get_current_stream(self, index: int) -> int:
        return 777


class _LauncherObject:
    """Triton's launcher object: ``launch`` is its compiled C function; calling the object allocates
    scratch first. Here the C function is ``print`` (a builtin, as a compiled launcher is)."""
    launch_cooperative_grid = 0
    launch_pdl = 0
    num_ctas = 1

    def __init__(self, scratch: int, profile_scratch: int) -> None:
        self.launch = print
        self.global_scratch_size, self.profile_scratch_size = scratch, profile_scratch
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> None:
        self.calls.append(args)


class _Compiled:
    function, packed_metadata = 5, (4, 1, 0)
    metadata = SimpleNamespace(tensordesc_meta=None)  # descriptors not lowered to tensor maps: plain arguments

    def __init__(self, launcher: _LauncherObject) -> None:
        self.run = launcher

    def launch_metadata(self, grid: Any, stream: Any, *args: Any) -> str:
        return "META"


class _Param:
    def __init__(self, name: str) -> None:
        self.name = name


class _Jit:
    params = [_Param("a"), _Param("b"), _Param("n"), _Param("BLOCK")]

    def __init__(self, compiled: _Compiled) -> None:
        self.compiled = compiled

    def warmup(self, *args: Any, **kwargs: Any) -> _Compiled:
        return self.compiled


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.runtime.driver import driver
    monkeypatch.setattr(driver, "_active", _Stream(), raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)  # absent from CPU builds


def _launch(scratch: int = 0, profile_scratch: int = 0) -> tuple[Any, _LauncherObject, torch.Tensor, torch.Tensor]:
    obj = _LauncherObject(scratch, profile_scratch)
    a, b = torch.zeros(4), torch.zeros(4)
    run = runtime.prebind(None, _Jit(_Compiled(obj)), torch.device("cuda", 0), (3,), [a, b, 7], {"BLOCK": 16}, 2)
    return run, obj, a, b


def test_kernel_without_scratch_calls_the_c_launcher_with_addresses(fake_cuda: None,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run, obj, a, b = _launch()
    run(a, b)
    # grid, stream, function, cooperative, pdl, no scratch buffers, metadata, launch metadata and hooks
    # (empty chains: none), the tensors' addresses, then the other arguments and the constexprs.
    assert capsys.readouterr().out.split() == ["3", "1", "1", "777", "5", "0", "0", "None", "None", "(4,", "1,", "0)",
                                               "None", "None", "None", str(a.data_ptr()), str(b.data_ptr()), "7", "16"]
    assert obj.calls == []


@pytest.fixture
def fake_scratch(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """CUDA allocations become CPU tensors; the list's one flag says whether a capture is under way."""
    capturing = [False]
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda n, dtype, device: empty(n, dtype=dtype))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(runtime, "_SCRATCH", {})
    monkeypatch.setattr(runtime, "_RETIRED", [])
    return capturing


def test_kernel_with_scratch_gets_its_streams_buffer(fake_cuda: None, fake_scratch: list[bool],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run, obj, a, b = _launch(scratch=128)
    run(a, b)
    run(a, b)
    buf = runtime._SCRATCH[(0, 777)]
    assert buf.numel() == 3 * 128   # grid x scratch per program
    out = capsys.readouterr().out.splitlines()
    assert out[0] == out[1] and out[0].split()[7] == str(buf.data_ptr()) and obj.calls == []


def test_scratch_grows_keeps_old_buffers_and_is_not_kept_from_a_capture(fake_scratch: list[bool]) -> None:
    small = runtime.scratch_address(0, 1, 64)
    assert runtime.scratch_address(0, 1, 32) == small          # large enough: shared
    assert runtime.scratch_address(0, 2, 32) != small          # another stream: its own
    big = runtime.scratch_address(0, 1, 256)
    assert big != small and runtime._RETIRED[0].data_ptr() == small   # a graph may still use the old one
    fake_scratch[0] = True
    during = runtime.scratch_address(0, 3, 64)
    assert isinstance(during, torch.Tensor) and (0, 3) not in runtime._SCRATCH


def test_profiler_scratch_goes_through_the_launcher_object(fake_cuda: None) -> None:
    run, obj, a, b = _launch(profile_scratch=64)
    run(a, b)
    assert obj.calls == [(3, 1, 1, 777, 5, (4, 1, 0), None, None, None, a, b, 7, 16)]


def test_a_registered_launch_hook_gets_the_metadata(fake_cuda: None) -> None:
    seen: list[Any] = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        run, obj, a, b = _launch(profile_scratch=64)
        run(a, b)
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    assert obj.calls[0][6] == "META" and obj.calls[0][7] is knobs.runtime.launch_enter_hook


def test_descriptors_are_encoded_once_per_set_of_addresses_and_follow_the_addresses(fake_cuda: None, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from triton.backends.nvidia import driver as nv
    encoded: list[Any] = []

    def encode(desc: Any, meta: Any) -> list[Any]:
        encoded.append(desc)
        return [f"map@{desc.base.data_ptr()}", *desc.shape, *desc.strides]
    monkeypatch.setattr(nv, "make_tensordesc_arg", encode)
    obj = _LauncherObject(0, 0)

    def wrap(c_launch: Any) -> Any:  # Triton's tensor-descriptor wrapper closes over the compiled launcher
        def inner(*args: Any) -> None:
            raise AssertionError(f"{c_launch} called through the wrapper, which encodes at every launch")
        return inner
    obj.launch = wrap(print)  # type: ignore[assignment]
    a, b = torch.zeros(3, 8), torch.zeros(8, 4).t()   # B's unit-stride dim is dim 0: listed last
    jit = _Jit(_Compiled(obj))
    jit.params = [_Param("a"), _Param("b"), _Param("b_desc"), _Param("n"), _Param("BLOCK")]
    run = runtime.prebind(None, jit, torch.device("cuda", 0), (3,), [a, b, "DESC", 7],
                          {"BLOCK": 16}, 2, [(1, (1, 0), (8, 2))])
    assert run is not None and encoded == []        # the compiled launcher was found behind the wrapper
    run(a, b)
    run(a, b)
    b2 = torch.zeros(8, 4).t()
    run(a, b2)
    out = capsys.readouterr().out.splitlines()
    # addresses, then B's descriptor over dims (1, 0) (the tensor map, shape, strides), then the rest
    assert out[0].split()[-9:] == [str(a.data_ptr()), str(b.data_ptr()), f"map@{b.data_ptr()}", "8", "4", "4", "1",
                                   "7", "16"]
    assert out[0] == out[1] and out[2].split()[-7] == f"map@{b2.data_ptr()}"
    assert [d.base.data_ptr() for d in encoded] == [b.data_ptr(), b2.data_ptr()] and encoded[0].block_shape == [8, 2]
    # the tensor a bound view was taken of (as the fast path's replays pass it): the view's geometry is kept
    base = torch.zeros(8, 4)
    run(a, base)
    assert (encoded[-1].base.data_ptr(), encoded[-1].shape, encoded[-1].strides) == (base.data_ptr(), [8, 4], [4, 1])


def test_tma_descriptor_gives_one_element_dims_a_legal_stride() -> None:
    x = torch.zeros(1, 5, 8, dtype=torch.float16)[:, :, :8]
    d = runtime.tma_descriptor(x.as_strided((1, 5, 8), (1, 8, 1)), (0, 1, 2), (1, 4, 8))
    assert d.shape == [1, 5, 8] and d.strides == [8, 8, 1] and d.block_shape == [1, 4, 8]

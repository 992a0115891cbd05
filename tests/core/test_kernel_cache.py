"""The kernel cache runs only what it verified: no bytecode it did not write (it writes none), no link
followed out of its directory, no file of the user's renamed, and where it cannot write, kernels are built
in a temporary directory with one warning instead of an OSError."""

from __future__ import annotations

import builtins
import importlib._bootstrap_external as bootstrap
import importlib.util
import os
import warnings
from pathlib import Path

import pytest
import torch

import alcop_triton as at
from alcop_triton import runtime, te

pytestmark = pytest.mark.interpreter

M, N, K = te.var("M"), te.var("N"), te.var("K")
CFG = at.KernelConfig(block_m=16, block_n=16, block_k=16, smem_stages=1)
FLAG = "ALCOP_PLANTED_BYTECODE_RAN"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ALCOP_CACHE_DIR", str(root))
    monkeypatch.setattr(runtime, "_LOADED", {})
    monkeypatch.setattr(runtime, "_FALLBACK", [], raising=False)
    return root


def _build() -> at.Kernel:
    A = te.placeholder((M, K), "float32", "A")
    B = te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return at.build(at.Schedule.from_config(C, CFG), [A, B, C])


def _check(kern: at.Kernel) -> None:
    a, b = torch.randn(3, 5, dtype=torch.float32), torch.randn(5, 2, dtype=torch.float32)
    torch.testing.assert_close(kern(a, b), a @ b)


def _new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process would have: only the disk cache."""
    monkeypatch.setattr(runtime, "_LOADED", {})


def _kernel_file(cache: Path) -> Path:
    files = list((cache / "kernels").glob("*/*.py"))
    assert len(files) == 1
    return files[0]


def _plant_pyc(py: Path, code_text: str) -> Path:
    """A ``__pycache__`` entry that importlib would take for ``py``'s: its header names the source's mtime and size."""
    st = py.stat()
    pyc = Path(importlib.util.cache_from_source(str(py)))
    pyc.parent.mkdir(exist_ok=True)
    data = bootstrap._code_to_timestamp_pyc(compile(code_text, str(py), "exec"), int(st.st_mtime), st.st_size)
    pyc.write_bytes(bytes(data))
    os.utime(py, (st.st_atime, st.st_mtime))
    return pyc


def test_planted_bytecode_beside_a_kernel_never_runs(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(_build())
    py = _kernel_file(cache)
    _plant_pyc(py, f"import builtins\nbuiltins.{FLAG} = 1\n" + py.read_text())
    _new_process(monkeypatch)
    try:
        _check(_build())
        assert not hasattr(builtins, FLAG)
    finally:
        if hasattr(builtins, FLAG):
            delattr(builtins, FLAG)
    assert not list(cache.rglob("*.pyc")) or all(p.stat().st_size for p in cache.rglob("*.pyc"))


def test_damaged_bytecode_beside_a_kernel_breaks_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(_build())
    py = _kernel_file(cache)
    pyc = _plant_pyc(py, "pass\n")
    pyc.write_bytes(pyc.read_bytes()[:16] + b"\x00garbage, not marshal data")
    for _ in range(2):
        _new_process(monkeypatch)
        _check(_build())


def test_no_bytecode_is_written(cache: Path) -> None:
    _check(_build())
    assert not list(cache.rglob("__pycache__"))


@pytest.mark.parametrize("link", ["kernels", "digest"])
def test_a_linked_directory_is_not_written_through(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   link: str) -> None:
    _check(_build())
    py = _kernel_file(cache)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = py.parent if link == "digest" else py.parent.parent
    os.replace(target, tmp_path / "moved")
    os.symlink(outside, target)
    _new_process(monkeypatch)
    _check(_build())
    assert list(outside.iterdir()) == []  # nothing written out of the cache
    assert py.is_file() and not any(q.is_symlink() for q in (py, py.parent, py.parent.parent))


def test_a_linked_kernel_file_is_not_read_from_outside(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    _check(_build())
    py = _kernel_file(cache)
    outside = tmp_path / "outside.py"
    outside.write_text(py.read_text())
    before = outside.read_bytes()
    py.unlink()
    os.symlink(outside, py)
    _new_process(monkeypatch)
    _check(_build())
    assert not py.is_symlink() and py.read_bytes() == before  # the cache's own verified copy
    assert outside.read_bytes() == before


@pytest.mark.parametrize("where", ["file", "under_a_file"])
def test_a_cache_dir_that_is_a_file_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    user_file = tmp_path / "notes.txt"
    user_file.write_text("the user's notes\n")
    monkeypatch.setenv("ALCOP_CACHE_DIR", str(user_file if where == "file" else user_file / "cache"))
    monkeypatch.setattr(runtime, "_LOADED", {})
    monkeypatch.setattr(runtime, "_FALLBACK", [], raising=False)
    with pytest.warns(runtime.KernelCacheUnusable, match="not usable") as caught:
        _check(_build())
        _new_process(monkeypatch)
        _check(_build())
    assert len([w for w in caught if w.category is runtime.KernelCacheUnusable]) == 1
    assert user_file.read_text() == "the user's notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_cache_that_cannot_be_written_falls_back_with_one_warning(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = runtime._write_at

    def read_only(dir_fd: int, name: str, text: str) -> None:
        if runtime._FALLBACK and os.path.samestat(os.fstat(dir_fd), os.stat(runtime._FALLBACK[0] / "kernels" /
                                                                            text_digest(text))):
            return real(dir_fd, name, text)
        raise OSError(30, "Read-only file system")

    def text_digest(text: str) -> str:
        import hashlib
        return hashlib.sha256(text.encode()).hexdigest()[:20]
    monkeypatch.setattr(runtime, "_write_at", read_only)
    with pytest.warns(runtime.KernelCacheUnusable, match="Read-only") as caught:
        _check(_build())
        _new_process(monkeypatch)
        _check(_build())
    assert len([w for w in caught if w.category is runtime.KernelCacheUnusable]) == 1
    assert not list(cache.rglob("*.py"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_a_read_only_cache_directory_falls_back(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache.mkdir(parents=True)
    cache.chmod(0o500)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _check(_build())
        assert [w.category for w in caught if w.category is runtime.KernelCacheUnusable] == [runtime.KernelCacheUnusable]
    finally:
        cache.chmod(0o700)

"""Hostile names and damaged cache entries: nothing a user or a file supplies runs as code, reaches a
path unchecked, or aliases two generated names; an unreadable cached kernel is a miss."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import alcop_triton as at
from alcop_triton import codegen, runtime, te
from alcop_triton.errors import ScheduleError
from kernels import matmul as kmatmul

M, N, K = te.var("M"), te.var("N"), te.var("K")
CFG = at.KernelConfig(block_m=16, block_n=16, block_k=16, smem_stages=1)
PAYLOAD = "x(): pass\n__import__('os').system('touch F')\ndef y"


def _mm(axis_names: list[str] | None = None, k_name: str = "k") -> tuple[te.Tensor, te.Tensor, te.Tensor]:
    A = te.placeholder((M, K), "float32", "A")
    B = te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, k_name)
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C", axis_names=axis_names)
    return A, B, C


def test_build_name_with_code_is_refused_and_never_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    A, B, C = _mm()
    for name in (PAYLOAD, "a/b", "../../etc/x", "x.y", "", "class"):
        with pytest.raises(ValueError, match=r"build\(name=\.\.\.\): kernel name .* must be a Python identifier"):
            at.build(at.Schedule.from_config(C, CFG), [A, B, C], name=name)
    assert not (tmp_path / "F").exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("names, k_name", [(["ｊ", "j"], "k"), (["i", "j"], "ｉ"), (["i", "j"], "ｊ"), (["Ｍ", "j"], "k")])
def test_names_that_fold_together_under_nfkc_are_refused(names: list[str], k_name: str) -> None:
    with pytest.raises(ValueError, match="both named .* NFKC"):
        _mm(names, k_name)


@pytest.mark.parametrize("name", ["ａcc", "ｔl", "ｐid", "ｏffs_m", "ＢLOCK_K", "ﬂoat"])
@pytest.mark.parametrize("role", ["var", "placeholder", "axis", "reduce_axis", "compute", "kernel"])
def test_fullwidth_spellings_of_generated_names_are_refused(name: str, role: str) -> None:
    A, B, C = _mm()
    build = {"var": lambda: te.var(name), "placeholder": lambda: te.placeholder((M,), "float32", name),
             "axis": lambda: _mm([name, "j"]), "reduce_axis": lambda: te.reduce_axis(K, name),
             "compute": lambda: te.compute((M,), lambda i: A[i, 0], name),
             "kernel": lambda: at.build(at.Schedule.from_config(C, CFG), [A, B, C], name=name)}[role]
    with pytest.raises(ScheduleError, match="NFKC-normalised.*(reserved|prefixes)"):
        build()


@pytest.mark.interpreter
def test_a_foldable_name_is_used_in_its_normal_form() -> None:
    A, B, C = _mm(["ｉ", "j"])  # fullwidth i: Python reads it as i, and so does the generator
    kern = at.build(at.Schedule.from_config(C, CFG), [A, B, C], name="ｍy_kernel")
    assert "def my_kernel(" in kern.source and "ｉ" not in kern.source
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    torch.testing.assert_close(kern(a, b), a @ b)


def test_inf_and_nan_constants_are_emitted_as_calls() -> None:
    assert [codegen.literal(v) for v in (float("inf"), float("-inf"), float("nan"), 2.5, 3)] == \
        ["float('inf')", "float('-inf')", "float('nan')", "2.5", "3"]
    for v in (float("inf"), float("nan")):
        src = kmatmul.compiled("float32", False, kmatmul.Epilogue(alpha=v), CFG).source
        assert f"float('{v}')" in src
        compile(src, "<kernel>", "exec")


@pytest.mark.interpreter
def test_dsl_kernel_with_an_inf_constant_runs() -> None:
    kern = kmatmul.compiled("float32", False, kmatmul.Epilogue(residual=True, beta=float("inf")), CFG)
    a, b, r = torch.randn(4, 8), torch.randn(8, 5), torch.tensor([[1.0, -1.0, 0.0, 2.0, -3.0]]).expand(4, 5)
    y = kern(a, b, r.contiguous())
    torch.testing.assert_close(y, a @ b + r * float("inf"), equal_nan=True)


# ----------------------------------------------------------------------------- kernel cache

@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ALCOP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(runtime, "_LOADED", {})
    return tmp_path


def _kernel_path(cache: Path) -> tuple[str, Path]:
    A, B, C = _mm()
    src = at.build(at.Schedule.from_config(C, CFG), [A, B, C]).source
    files = list((cache / "kernels").glob("*/*.py"))
    assert len(files) == 1
    return src, files[0]


def _damage(path: Path, how: str) -> None:
    if how == "invalid_utf8":
        path.write_bytes(b"\xff\xfe\x00 not utf-8 \x80\x81")
    elif how == "directory_at_file":
        path.unlink()
        (path / "inner").mkdir(parents=True)
    elif how == "file_at_directory":
        for p in path.parent.iterdir():
            p.unlink()
        path.parent.rmdir()
        path.parent.write_text("a file where the kernel's directory belongs")
    elif how == "file_at_kernels_dir":
        kernels = path.parent.parent
        os.replace(kernels, kernels.with_name("elsewhere"))
        kernels.write_text("x")


@pytest.mark.interpreter
@pytest.mark.parametrize("how", ["invalid_utf8", "directory_at_file", "file_at_directory", "file_at_kernels_dir"])
def test_an_unreadable_cache_entry_is_a_miss_and_is_rewritten(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                                               how: str) -> None:
    src, path = _kernel_path(fresh_cache)
    _damage(path, how)
    monkeypatch.setattr(runtime, "_LOADED", {})  # a new process: only the disk cache is left
    for _ in range(2):  # the second call finds the rewritten file
        A, B, C = _mm()
        kern = at.build(at.Schedule.from_config(C, CFG), [A, B, C])
        assert path.read_text(encoding="utf-8") == src == kern.source
        a, b = torch.randn(3, 5), torch.randn(5, 2)
        torch.testing.assert_close(kern(a, b), a @ b)
        monkeypatch.setattr(runtime, "_LOADED", {})
    # What stood in the way was renamed aside, not deleted; no temporary file is left behind.
    if how != "invalid_utf8":
        assert any(".broken-" in p.name for p in fresh_cache.rglob("*"))
    assert not [p for p in fresh_cache.rglob("*.tmp")]


def test_a_long_kernel_name_gets_a_short_file_name(fresh_cache: Path) -> None:
    A, B, C = _mm()
    kern = at.build(at.Schedule.from_config(C, CFG), [A, B, C], name="k" * 300)
    path = Path(kern._shown().path)
    assert path.name == "kernel.py" and f"def {'k' * 300}(" in path.read_text()


@pytest.mark.parametrize("name", ["mylib::x(): pass\n__import__('os')", "my/lib::mm", "mylib::a b", "nonamespace",
                                  "a::b::c", "mylib::class", 3])
def test_dsl_op_names_are_checked(name: object) -> None:
    with pytest.raises(ValueError, match=r"expected 'namespace::op_name'"):
        at.op(name)  # type: ignore[arg-type]


def test_dsl_op_name_is_nfkc_normalised() -> None:
    from alcop_triton.dsl_op import _op_name
    assert _op_name("ｍylib::ｍm") == "mylib::mm"

"""Shared test setup for the whole suite.

* Without CUDA, ``TRITON_INTERPRET=1`` is set here, before anything imports triton, so kernels run
  in Triton's CPU interpreter (importing torch does not import triton).
* ``ALCOP_CACHE_DIR`` points at a fresh temporary directory for the session, so generated kernels
  never touch (or are served from) the user's cache.
* ``@pytest.mark.gpu`` tests are skipped without a usable CUDA device.
* ``--update-golden`` rewrites the golden kernel sources in tests/golden/ instead of comparing.
* The ``kit`` fixture holds the small helpers the core tests share (reference math, tolerances,
  NaN-poisoned outputs, cached kernels).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any, Iterator

import pytest

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # a source checkout works without PYTHONPATH=.
    sys.path.insert(0, str(_REPO))

import torch  # noqa: E402  (does not import triton)

HAS_CUDA: bool = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

# A per-session cache directory, set at import time too: collection may already build kernels.
_SESSION_CACHE = tempfile.mkdtemp(prefix="alcop_test_cache_")
os.environ["ALCOP_CACHE_DIR"] = _SESSION_CACHE


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite tests/golden/*.golden from the current code generator instead of comparing")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "interpreter: launches kernels on CPU tensors (needs TRITON_INTERPRET=1)")
    config.addinivalue_line("markers", "slow: long interpreter cases")


def pytest_report_header(config: pytest.Config) -> list[str]:
    import numpy
    interp = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    lines = [f"alcop: torch {torch.__version__}, numpy {numpy.__version__}, cuda={HAS_CUDA}, "
             f"TRITON_INTERPRET={int(interp)}, ALCOP_CACHE_DIR per session"]
    if interp and tuple(int(x) for x in numpy.__version__.split(".")[:2]) >= (2, 4):
        # triton-lang/triton#9171: Triton <= 3.6's interpreter does int(array of shape (1,)), an error since numpy 2.4
        lines.append("alcop: WARNING numpy >= 2.4 breaks Triton 3.6's interpreter (triton#9171); use numpy < 2.4")
    return lines


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_SESSION_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # On a CUDA host run the suite twice: plain (gpu + build-only tests) and with TRITON_INTERPRET=1 (CPU
    # kernels). Triton decides at import whether tl's helpers (tl.cdiv, ...) are interpretable, so CPU
    # launches cannot work in a process that imported triton without TRITON_INTERPRET=1.
    interp = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    gpu_reason = ("no CUDA device" if not HAS_CUDA else
                  "TRITON_INTERPRET=1: Triton kernels run only on CPU tensors" if interp else None)
    for item in items:
        if gpu_reason and "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"gpu test: {gpu_reason}"))
        if not interp and "interpreter" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="CPU kernel launch: rerun with TRITON_INTERPRET=1"))


@pytest.fixture(scope="session", autouse=True)
def _alcop_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every session writes its kernels into its own temporary cache directory."""
    d = tmp_path_factory.mktemp("alcop_cache")
    old = os.environ.get("ALCOP_CACHE_DIR")
    os.environ["ALCOP_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("ALCOP_CACHE_DIR", None)
    else:
        os.environ["ALCOP_CACHE_DIR"] = old


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture(autouse=True)
def _torchs_own_functions_after() -> Iterator[None]:
    """Patch mode's wrappers outlive its last block until a routed call (``patch._put_back``): each test
    leaves torch's own functions in place for the next."""
    yield
    patch = sys.modules.get("alcop_triton.patch")
    if patch is not None:
        patch._put_back()


@pytest.fixture(autouse=True)
def _no_tf32() -> Iterator[None]:
    # fp32 tolerances (1e-5) and golden sources assume IEEE fp32 dots; build reads this flag.
    from alcop_triton.settings import tf32  # after TRITON_INTERPRET is set above: the package imports triton
    with tf32(False):
        yield


@pytest.fixture
def torch_measured_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every workload's records say torch runs it faster (the config choice says so,
    as the dispatcher's ``Decision.torch_preferred`` does on a GPU): patch mode leaves every call to torch."""
    from alcop_triton import choose_config, fastpath
    real = choose_config.choose_config

    def measured_slower(*args: Any, **kwargs: Any) -> Any:
        fastpath.note_torch_preferred()
        return real(*args, **kwargs)
    monkeypatch.setattr(choose_config, "choose_config", measured_slower)


@pytest.fixture
def grids(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The launch grids of the generated kernels called in the test, in call order."""
    import importlib
    build_mod = importlib.import_module("alcop_triton.build")  # the module (alcop_triton.build is the function)
    seen: list[tuple[int, ...]] = []
    real = build_mod.for_device

    class Recorder:
        def __init__(self, fn: Any) -> None:
            self.fn = fn

        def __getitem__(self, grid: tuple[int, ...]) -> Any:
            seen.append(tuple(grid))
            return self.fn[grid]

    monkeypatch.setattr(build_mod, "for_device", lambda fn, device_type: Recorder(real(fn, device_type)))
    return seen


class Kit:
    """Helpers shared by tests/core, tests/analysis, tests/rewrite, tests/golden and tests/gpu."""

    TOL: dict[str, float] = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}

    @staticmethod
    def tdtype(name: str) -> torch.dtype:
        return getattr(torch, name)

    @staticmethod
    def seed(*parts: object) -> int:
        """A seed per case, the same in every run (``hash`` of a str is salted per process)."""
        return zlib.crc32("/".join(map(str, parts)).encode())

    @staticmethod
    def rand(shape: tuple[int, ...], dtype: str, gen: torch.Generator, device: str = "cpu") -> torch.Tensor:
        """Fresh random values, scaled so 16-bit sums stay well inside their range."""
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(Kit.tdtype(dtype)).to(device)

    @staticmethod
    def poisoned(shape: tuple[int, ...], dtype: str, device: str = "cpu") -> torch.Tensor:
        """An output buffer full of NaN: any element the kernel forgets to write fails the check."""
        return torch.full(shape, float("nan"), dtype=Kit.tdtype(dtype), device=device)

    @staticmethod
    def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
        """Norm-wise relative error against a float64 reference (NaN anywhere -> NaN)."""
        o, r = out.double(), ref.double()
        denom = max(r.norm().item(), 1e-30)
        return ((o - r).norm() / denom).item()

    @classmethod
    def assert_close(cls, out: torch.Tensor, ref: torch.Tensor, dtype: str, what: str = "") -> None:
        assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
        assert not torch.isnan(out).any(), f"{what}: output has NaN (an element was never written)"
        err = cls.rel_err(out, ref)
        assert err <= cls.TOL[dtype], f"{what}: relative error {err:.3g} > {cls.TOL[dtype]} ({dtype})"

    @staticmethod
    def apart(module: str, expr: str) -> Any:
        """``expr`` (JSON-able) evaluated in a new Python process with ``module`` imported as ``t`` and the
        repository on its path: for compiling Gluon kernels away from the interpreter this process runs."""
        import json
        import os
        import subprocess
        import sys
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = f"import json; import {module} as t; print(json.dumps({expr}))"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
        done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    @staticmethod
    def compile_sm90(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[bool, bool, int]:
        """A Gluon kernel's launch (positional ``args``: tensors, TMA descriptors, integers; ``kwargs``: its
        constexprs and ``num_warps``) compiled by Triton for an H100 (sm90) without a GPU: (its PTX has
        wgmma, its PTX has TMA copies, its shared memory in bytes). Run it in a process of its own: the
        interpreter, once it has run kernels, patches triton.language."""
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.experimental.gluon._runtime import GluonASTSource
        short = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.int32: "i32"}
        sig: dict[str, str] = {}
        for arg, value in zip(fn.arg_names, args):  # what JITFunction.run would specialise on
            if isinstance(value, torch.Tensor):
                sig[arg] = "*" + short[value.dtype]
            elif hasattr(value, "block_shape"):
                block = ", ".join(map(str, value.block_shape))
                sig[arg] = f"tensordesc<{short[value.base.dtype]}[{block}],{value.layout!r}>"
            else:
                sig[arg] = "i32"
        constexprs = {k: v for k, v in kwargs.items() if k in fn.arg_names}  # num_warps is a parameter too
        sig |= {k: "constexpr" for k in constexprs}
        src = GluonASTSource(fn, sig, {(fn.arg_names.index(k),): v for k, v in constexprs.items()})
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": kwargs["num_warps"]})
        ptx = compiled.asm["ptx"]
        return "wgmma.mma_async" in ptx, "cp.async.bulk.tensor" in ptx, int(compiled.metadata.shared)

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def matmul(dtype: str, cfg: Any, batched: bool = False, ep: Any = None) -> Any:
        """A built (cached) matmul/bmm kernel of the operator library, for ``cfg``."""
        import alcop_triton as at
        from alcop_triton.kernels import matmul as km
        inputs, out = km.matmul_te(dtype, batched, ep if ep is not None else km.Epilogue())
        return at.build(at.Schedule.from_config(out, cfg), inputs + [out])


@pytest.fixture(scope="session")
def kit() -> type[Kit]:
    return Kit

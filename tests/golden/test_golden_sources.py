"""Golden generated sources: the exact Triton text for a few representative kernels.

A diff here means the generated code changed. If the change is intended, refresh with
``pytest tests/golden --update-golden`` and review the diff of tests/golden/*.golden like code.
The header's version numbers are compared as placeholders (a release bump is not a codegen change);
that the header names the installed versions is checked separately.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Callable

import pytest
import torch
import triton

import alcop_triton as at
from alcop_triton import KernelConfig, Schedule
from alcop_triton.kernels import conv as kc
from alcop_triton.kernels import matmul as km

GOLDEN = Path(__file__).resolve().parent
_VERSIONS = re.compile(r"^(versions:\s+alcop_triton )\S+(, triton )\S+$", re.MULTILINE)


def _versionless(source: str, what: str) -> str:
    """``source`` with the header's version numbers replaced by a placeholder."""
    out, n = _VERSIONS.subn(r"\1<version>\2<version>", source)
    assert n == 1, f"{what}: expected one 'versions:  alcop_triton X, triton Y' header line, found {n}"
    return out


def _matmul(dtype: str, cfg: KernelConfig, batched: bool = False) -> str:
    inputs, out = km.matmul_te(dtype, batched)
    return at.build(Schedule.from_config(out, cfg), inputs + [out]).source  # default variant: no call needed


def _conv_nhwc_bias_relu(channels: int, block_k: int, async_copy: str = "pointer") -> str:
    # The library's conv kernel (channels and window compiled in); its channels_last variant exists once
    # it has seen channels_last input and weights (as after model.to(memory_format=channels_last)).
    p = kc.ConvParams(2, (1, 1), (1, 1), (1, 1), (1, 1), 1, True, True, "relu")
    k = kc.compiled("float16", p, KernelConfig(64, 64, block_k, group_m=8, smem_stages=2, async_copy=async_copy))
    g = torch.Generator().manual_seed(0)
    cl = torch.channels_last
    x = torch.randn(1, channels, 3, 3, generator=g).half().to(memory_format=cl)
    w = torch.randn(8, channels, 3, 3, generator=g).half().to(memory_format=cl)
    y = torch.empty(1, 8, 3, 3, dtype=torch.float16).to(memory_format=cl)
    k(x, w, torch.zeros(8, dtype=torch.float16), y.unflatten(1, (1, 8)))
    return k.source


CASES: dict[str, Callable[[], str]] = {
    "matmul_f16_no_pipeline": lambda: _matmul("float16", KernelConfig(64, 64, 32, group_m=8, smem_stages=1)),
    "matmul_f16_multilevel_r2x2": lambda: _matmul(
        "float16", KernelConfig(64, 64, 32, group_m=8, smem_stages=3, reg_stages=2, reg_split=2)),
    "matmul_f16_tma": lambda: _matmul("float16", KernelConfig(64, 64, 64, group_m=8, smem_stages=3, async_copy="tma")),
    "bmm_f32_s3": lambda: _matmul("float32", KernelConfig(64, 64, 32, group_m=8, smem_stages=3), batched=True),
    # persistent: tile loop flattened with the reduction loop (it carries num_stages), descriptors hoisted before it
    "matmul_f16_persistent_tma": lambda: _matmul(
        "float16", KernelConfig(64, 64, 64, group_m=8, smem_stages=3, async_copy="tma", persistent=True)),
    # K = 8 channels x 9 taps = 72: 3 chunks of 32 that straddle window taps, so every index is a vector
    "conv2d_nhwc_bias_relu_f16": lambda: _conv_nhwc_bias_relu(8, 32),
    # 32 channels in chunks of 16: each chunk is one window tap, whose rh, rw are scalars per chunk
    "conv2d_nhwc_channel_chunks_f16": lambda: _conv_nhwc_bias_relu(32, 16),
    # the same by TMA: the M tile a box of output positions, each A tile a window of X (zero-filled padding)
    "conv2d_nhwc_window_tma_f16": lambda: _conv_nhwc_bias_relu(32, 16, "tma"),
}


# the conv case calls its kernel on CPU tensors (to specialise it for channels_last)
NEEDS_CALL = {"conv2d_nhwc_bias_relu_f16", "conv2d_nhwc_channel_chunks_f16", "conv2d_nhwc_window_tma_f16"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.interpreter) if n in NEEDS_CALL else n
                                  for n in CASES])
def test_generated_source_matches_golden(name: str, update_golden: bool) -> None:
    source = CASES[name]()
    path = GOLDEN / f"{name}.py.golden"
    if update_golden:
        path.write_text(source)
        return
    assert path.exists(), f"{path.name} is missing; run pytest tests/golden --update-golden"
    assert f"versions:  alcop_triton {at.__version__}, triton {triton.__version__}\n" in source
    want, source = _versionless(path.read_text(), f"golden/{path.name}"), _versionless(source, "generated")
    if source != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), source.splitlines(True),
                                            f"golden/{path.name}", "generated", n=2))
        pytest.fail(f"generated source differs from {path.name} (intended? --update-golden):\n{diff[:6000]}")


@pytest.mark.parametrize("name", list(CASES))
def test_golden_files_are_valid_python(name: str) -> None:
    # a golden file that does not even parse would make the comparison above meaningless
    text = (GOLDEN / f"{name}.py.golden").read_text()
    compile(text, name, "exec")
    assert text.count("@triton.jit") == 1

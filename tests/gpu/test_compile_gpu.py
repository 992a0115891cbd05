"""On a CUDA GPU: ``alcop_triton.compile`` with Inductor. Where the records show alcop faster, the code
Inductor generates calls alcop's op (and Inductor still fuses the pointwise ops around it), outputs
and gradients match eager torch, and ``mode="reduce-overhead"`` captures the graph, alcop's launches
included, into a CUDA graph (the op allocates on the current stream from torch's allocator and never
synchronises the host: capturable after Inductor's warm-up run)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import alcop_triton as at
from alcop_triton import choose_config, fastpath
from alcop_triton.autotune import dispatch
from alcop_triton.autotune.database import Database, TuningRecord
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.records import Workload

pytestmark = pytest.mark.gpu  # tests/conftest.py skips these without CUDA or under TRITON_INTERPRET=1

ROWS, DIM, HIDDEN = 64, 256, 512


@pytest.fixture
def alcop_measured_faster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Records in a fresh database say alcop's dispatched config beats torch on the MLP's products."""
    monkeypatch.setenv("ALCOP_DB", str(tmp_path / "tuning.sqlite"))
    monkeypatch.setattr(dispatch, "default_tables", lambda: [])
    fastpath.invalidate()
    spec = choose_config.gpu_spec(torch.cuda.current_device())
    db = Database(tmp_path / "tuning.sqlite")
    for m, n, k in ((ROWS, HIDDEN, DIM), (ROWS, DIM, HIDDEN)):
        w = Workload("matmul", (m, n, k), "float16", "nt")
        cfg = dispatch.dispatcher().decide(w, spec).config
        db.add(dataclasses.replace(TuningRecord.from_result(w, MeasureResult(cfg, 0.001, None), spec), torch_ms=1.0))
    fastpath.invalidate()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = nn.Linear(DIM, HIDDEN), nn.Linear(HIDDEN, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def test_inductor_calls_alcops_op_where_the_records_say_so(alcop_measured_faster: None) -> None:
    model = Mlp().cuda().half()
    x = torch.randn(ROWS, DIM, device="cuda", dtype=torch.float16)
    for m, n, k in ((ROWS, HIDDEN, DIM), (ROWS, DIM, HIDDEN)):  # what the graph's builder will ask
        w = Workload("matmul", (m, n, k), "float16", "nt")
        assert not choose_config.prefers_torch(x.device, lambda: w), dispatch.dispatcher().decide(
            w, choose_config.gpu_spec(torch.cuda.current_device()))
    with torch.no_grad():
        got, code = run_and_get_code(at.compile(model), x)
        want = model(x)
    text = "\n".join(code)
    assert "torch.ops.alcop.linear" in text, text[-3000:]
    # the GELU and the residual add run in alcop's epilogues (ops/traced_epilogues.py)
    calls = [line for line in text.splitlines() if "= torch.ops.alcop.linear.default(" in line]
    args = [line.split(".default(", 1)[1].rstrip().rstrip(")").split(", ") for line in calls]
    assert any(a[-1] in ("'gelu'", "activation='gelu'") for a in args), calls   # up: its GELU as activation
    assert any(len(a) >= 4 and a[3] != "None" for a in args), calls              # down: the residual operand
    assert _rel(got, want) < 2e-2


def test_without_records_for_alcop_inductor_keeps_torchs_products(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # float32 without records: patch mode's rule (dispatch.TORCH_UNLESS_MEASURED) leaves it to torch
    monkeypatch.setenv("ALCOP_DB", str(tmp_path / "empty.sqlite"))
    fastpath.invalidate()
    torch._dynamo.reset()
    model = Mlp().cuda()
    x = torch.randn(ROWS, DIM, device="cuda")
    with torch.no_grad():
        _, code = run_and_get_code(at.compile(model), x)
    # Inductor's comments name the source files it traced (patch mode's wrappers among them): the ops count
    assert "torch.ops.alcop" not in "\n".join(code)


def test_training_step_through_inductor(alcop_measured_faster: None) -> None:
    model, ref = Mlp().cuda().half(), Mlp().cuda().half()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(ROWS, DIM, device="cuda", dtype=torch.float16)
    compiled = at.compile(model)
    compiled(x).float().pow(2).mean().backward()
    ref(x).float().pow(2).mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.grad is not None and _rel(p.grad, q.grad) < 3e-2


def test_reduce_overhead_captures_alcops_launches(alcop_measured_faster: None) -> None:
    model = Mlp().cuda().half()
    compiled = at.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        for step in range(4):  # Inductor's warm-up run, the capture, then replays
            x = torch.randn(ROWS, DIM, device="cuda", dtype=torch.float16)
            got = compiled(x).clone()
            assert _rel(got, model(x)) < 2e-2, step
    stats = fastpath.stats()
    assert stats.hits > 0  # alcop's op ran its stored launches (what the capture recorded)

"""Seeded fuzz run (CI-sized): drop-in ops against torch, hostile names against the generator.

The generators are those of ``scripts/fuzz.py``'s long run (``fuzz_cases``); a failure prints the
case, which replays with ``run_op_case(case)``.
"""

from __future__ import annotations

import builtins

import pytest
import torch
from fuzz_cases import (EMPTY_DTYPE_REASON, HOSTILE_NAMES, OVERLAP_REASON, PAYLOAD, ROLES, NameCase, OpCase, OutSpec, TensorSpec,
                        kind_cases, name_cases, op_cases, run_kind_case, run_name_case, run_op_case)
from hypothesis import HealthCheck, Phase, given, settings

from alcop_triton import ops

pytestmark = pytest.mark.interpreter

CI = settings(max_examples=40, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))


@CI
@given(case=op_cases())
def test_ops_match_torch(case: OpCase) -> None:
    o = run_op_case(case)
    assert o.kind in ("ok", "raised_alike", "documented"), f"{o.kind}: {o.case}: {o.detail}"


@settings(CI, max_examples=30)
@given(case=kind_cases())
def test_tensor_kinds_match_torch(case: OpCase) -> None:
    """Flags, freed storage, sparse and zero tensors, intercepting subclasses: torch's result or exception
    type, at a call site that has a candidate for the plain tensors."""
    o = run_kind_case(case)
    assert o.kind in ("ok", "raised_alike", "documented"), f"{o.kind}: {o.case}: {o.detail}"


@settings(CI, max_examples=25)
@given(case=name_cases())
def test_hostile_names_are_refused_or_harmless(case: NameCase) -> None:
    o = run_name_case(case)
    assert o.kind in ("ok", "raised_alike"), f"{o.kind}: {o.case}: {o.detail}"


@pytest.mark.parametrize("role", ROLES)
def test_every_listed_hostile_name_in_every_role(role: str) -> None:
    bad = [o for o in (run_name_case(NameCase(role, n)) for n in HOSTILE_NAMES) if o.kind not in ("ok", "raised_alike")]
    assert not bad, [(o.case, o.detail) for o in bad]
    assert not hasattr(builtins, "ALCOP_FUZZ_PAYLOAD_RAN")
    assert run_name_case(NameCase(role, PAYLOAD)).kind == "raised_alike"


def test_documented_difference_overlapping_out_of_bmm() -> None:
    """The one documented difference: torch's bmm writes through an out= with overlapping elements."""
    a, b = torch.randn(3, 2, 4), torch.randn(3, 4, 5)
    torch.bmm(a, b, out=torch.empty(1, 2, 5).expand(3, 2, 5))  # torch: no error
    with pytest.raises(RuntimeError, match="single memory location"):
        ops.bmm(a, b, out=torch.empty(1, 2, 5).expand(3, 2, 5))
    case = OpCase("bmm", "float32", (TensorSpec((3, 2, 4), "contiguous", 1), TensorSpec((3, 4, 5), "contiguous", 2)),
                  (("out", OutSpec("overlap")),))
    o = run_op_case(case)
    assert (o.kind, o.reason) == ("documented", OVERLAP_REASON)


def test_judge_catches_a_wrong_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness is not vacuous: a result off by one ulp-scale error in fp32 is reported."""
    real = ops.mm
    monkeypatch.setattr(ops, "mm", lambda a, b, **kw: real(a, b, **kw) * (1 + 1e-3))
    case = OpCase("mm", "float32", (TensorSpec((4, 8), "contiguous", 1), TensorSpec((8, 3), "transposed", 2)), ())
    assert run_op_case(case).kind == "wrong"


def test_documented_difference_empty_conv_input_with_mixed_dtypes() -> None:
    """torch returns an empty result for an empty input without checking dtypes; alcop checks."""
    x, w = torch.randn(0, 6, 9), torch.randn(3, 2, 3, dtype=torch.float16)
    assert torch.nn.functional.conv1d(x, w, groups=3).shape == (0, 3, 7)
    with pytest.raises(RuntimeError, match="same dtype"):
        ops.conv1d(x, w, groups=3)
    case = OpCase("conv1d", "float16", (TensorSpec((0, 6, 9), "contiguous", 1, "float32"),
                                        TensorSpec((3, 2, 3), "contiguous", 2), None), (("groups", 3),))
    o = run_op_case(case)
    assert (o.kind, o.reason) == ("documented", EMPTY_DTYPE_REASON)

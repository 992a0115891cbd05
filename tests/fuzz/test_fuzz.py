"""Seeded fuzz run (CI-sized): drop-in ops against torch, hostile names against the generator.

The generators are those of ``scripts/fuzz.py``'s long run (``fuzz_cases``); a failure prints the
case, which replays with ``run_op_case(case)``.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
from pathlib import Path

import pytest
import torch
from fuzz_cases import (EMPTY_DTYPE_REASON, HOSTILE_NAMES, OVERLAP_REASON, PAYLOAD, RECORD_SHAPES, ROLES, NameCase, OpCase,
                        OutSpec, TensorSpec, bad_records, kind_cases, name_cases, op_cases, run_kind_case, run_name_case,
                        run_op_case, valid_record)
from hypothesis import HealthCheck, Phase, given, settings

from alcop_triton import cli, ops
from alcop_triton.autotune.database import Database, RecordSkipped, parse_line
from alcop_triton.autotune.dispatch import Dispatcher
from alcop_triton.errors import DatabaseError
from alcop_triton.model.hardware import get_spec

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


@pytest.mark.parametrize("op", RECORD_SHAPES)
def test_records_with_any_field_out_of_range_are_skipped(op: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Validation is total: each bad record raises DatabaseError alone (no ZeroDivisionError, no record
    dispatched to fail later); import keeps the valid lines, a read skips the bad rows with one warning,
    ``show`` works and dispatch picks the valid record."""
    cases = bad_records(op)
    for c in cases:
        with pytest.raises(DatabaseError):
            parse_line(c.line())
    valid = [json.dumps(valid_record(op, BLOCK_M=16 << i, num_warps=4)) for i in range(3)]
    if op.startswith("conv"):
        valid.append(json.dumps(valid_record(op, ASYNC_COPY="box", BLOCK_M=64, num_warps=4)))
    for line in valid:
        assert parse_line(line) is not None
    src = tmp_path / "in.jsonl"
    src.write_text("".join(c.line() + "\n" for c in cases) + "".join(line + "\n" for line in valid))
    db_path = tmp_path / "t.sqlite"
    assert cli.main(["--db", str(db_path), "import", str(src)]) == 1
    out = capsys.readouterr()
    assert f"{len(valid)} record(s) imported" in out.out and f"{len(cases)} line(s) rejected" in out.out
    assert "Traceback" not in out.err
    db = Database(db_path)
    conn = sqlite3.connect(db_path)
    conn.executemany("INSERT INTO measurements (gpu, cc, op, shape, dtype, layout, alcop, triton, torch, record) "
                     "VALUES ('H100', '9.0', ?, ?, 'float16', ?, '0', '3', '2', ?)",
                     [(op, "x".join(map(str, RECORD_SHAPES[op])), "nhwc" if op.startswith("conv") else "nt", c.line())
                      for c in cases])
    conn.commit()
    conn.close()
    with pytest.warns(RecordSkipped) as caught:
        assert len(db.records()) == len(valid)
    assert len([w for w in caught if w.category is RecordSkipped]) == 1
    assert f"{len(cases)} tuning record(s) skipped" in str(caught[0].message)
    with pytest.warns(RecordSkipped):
        assert cli.main(["--db", str(db_path), "show"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    workload = parse_line(valid[0]).workload  # type: ignore[union-attr]
    with pytest.warns(RecordSkipped):
        decision = Dispatcher(db, use_defaults=False).decide(workload, get_spec("H100"))
    assert decision.source == "db" and decision.config in {parse_line(v).config for v in valid}  # type: ignore[union-attr]

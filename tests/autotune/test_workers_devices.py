"""The device a measurement names (``GpuIdentity``): validated totally, carried from a worker's result into
the record, round-tripped through JSON lines and the database, and refused when tampered with."""

from __future__ import annotations

import json
import math

import pytest

from alcop_triton.autotune.database import Database, TuningRecord, parse_line
from alcop_triton.autotune.devices import CPU_NAME, GpuIdentity, calibration_ms, identify
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.errors import DatabaseError
from alcop_triton.records import KernelConfig, Workload

W = Workload("matmul", (256, 256, 256), "float16", "nt")
H200 = GpuIdentity("GPU-6f1e2a3b-0000-1111-2222-333344445555", "NVIDIA H200", 1980, "550.54.15")


def _record(on):
    r = MeasureResult(KernelConfig(), 0.05, timer="cuda_graph", measured_on=on)
    return TuningRecord.from_result(W, r, ("H200", "9.0"), device="NVIDIA H200", mma="wgmma")


def test_identity_round_trips_through_records(tmp_path):
    rec = _record(H200)
    assert rec.measured_on == H200
    line = rec.to_json()
    assert json.loads(line)["measured_on"] == H200.to_dict()
    assert parse_line(line).measured_on == H200
    db = Database(tmp_path / "t.sqlite")
    db.add(rec)
    assert db.records(W)[0].measured_on == H200
    # A record without it (every record made before pools, the shipped tables) stays valid.
    plain = _record(None)
    assert "measured_on" not in plain.to_dict() and parse_line(plain.to_json()).measured_on is None
    # The pipe between a measurement process and its parent carries it too.
    r = MeasureResult(KernelConfig(), 0.05, timer="cuda_graph", measured_on=H200)
    assert MeasureResult.from_dict(r.to_dict()).measured_on == H200


@pytest.mark.parametrize("bad, rule", [
    ([1, 2], "JSON object"),
    ({"uuid": "GPU-1"}, "needs 'uuid' and 'name'"),
    ({"uuid": "GPU-1", "name": "H200", "pci": "0"}, "unknown"),
    ({"uuid": "", "name": "H200"}, "empty"),
    ({"uuid": "GPU-1\nx", "name": "H200"}, "control characters"),
    ({"uuid": "GPU-1", "name": "H200", "driver": 550}, "expected a string"),
    ({"uuid": "GPU-1", "name": "H200", "sm_clock_mhz": "1980"}, "integer"),
    ({"uuid": "GPU-1", "name": "H200", "sm_clock_mhz": True}, "integer"),
    ({"uuid": "GPU-1", "name": "H200", "sm_clock_mhz": 1980.0}, "integer"),
    ({"uuid": "GPU-1", "name": "H200", "sm_clock_mhz": -5}, "integer"),
    ({"uuid": "x" * 201, "name": "H200"}, "at most 200"),
])
def test_tampered_identity_is_refused(bad, rule):
    d = _record(H200).to_dict()
    d["measured_on"] = bad
    with pytest.raises(DatabaseError, match=rule):
        parse_line(json.dumps(d))


def test_cpu_identity_and_calibration():
    me = identify("cpu", "cpu3")
    assert me == GpuIdentity("cpu-cpu3", CPU_NAME) and me.sm_clock_mhz == 0
    ms = calibration_ms("cpu")
    assert math.isfinite(ms) and ms > 0  # a time (its value is the machine's)

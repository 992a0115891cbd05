"""benchmarks/probes/host_desc_probe.py in the interpreter: every spelling computes the product, and the
report compares the best host-side and device-side spelling per shape."""

from __future__ import annotations

import json

from . import load_script

hd = load_script("probes/host_desc_probe.py", "host_desc_probe")


def test_every_spelling_is_checked_and_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(hd, "variants", lambda: [(32, 64, 32, 2, 4)])
    assert hd.main(["--dir", str(tmp_path), "--shapes", "64x128x64"]) == 0
    recs = [json.loads(line) for line in (tmp_path / "host_desc_probe.jsonl").read_text().splitlines()]
    assert {(r["host"], r["split_store"]) for r in recs} == {(h, s) for h in (False, True) for s in (False, True)}
    assert all("error" not in r and r["err"] < 1e-2 and r["ms"] > 0 for r in recs)
    md = hd.report(tmp_path / "host_desc_probe.jsonl")
    assert "| 64x128x64 |" in md and "host vs device" in md and "Geomean: host-side over device-side" in md

"""benchmarks/tune_speed.py on CPU: its shapes are unseen, and a dry run in the interpreter (a tiny shape,
two trials) writes the report with the time split, the trials run and the comparison with torch."""

from __future__ import annotations

import json

from . import ROOT, load_script


def _load():
    return load_script("tune_speed.py", "bench_tune_speed")


ts = _load()


def test_default_shapes_are_unseen_and_seen_ones_are_refused():
    shapes = [ts.parse_shape(s) for s in ts.SHAPES]
    assert len(shapes) == 5 and ts.unseen_problems(shapes) == []
    heldout = json.loads((ROOT / "benchmarks" / "workloads" / "heldout.json").read_text())
    known = next(tuple(w["shape"]) for w in heldout["workloads"] if w["op"] == "matmul")
    assert ts.unseen_problems([known]) == ["x".join(map(str, known))]


def test_dry_run_in_the_interpreter(tmp_path):
    out = tmp_path / "out"
    assert ts.main([str(out), "--shapes", "48x40x64", "--trials", "2", "--tune-arg=--batch=2"]) == 0
    report = json.loads((out / "tune_speed.json").read_text())
    (run,) = report["runs"]
    assert run["shape"] == "48x40x64" and run["wall_s"] > 0
    split = run["tune"]["seconds"]
    assert set(split) == {"start", "space", "model", "compile", "measure", "other", "total"}
    assert split["start"] > 0 and split["measure"] > 0 and split["total"] <= run["wall_s"] + 1.0
    assert run["tune"]["trials_run"] == 2 and run["tune"]["best"] is not None
    cmp = run["compare"]
    assert cmp["alcop_ms"] > 0 and cmp["torch_ms"] > 0 and "perf_counter" in cmp["timer"]
    assert cmp["max_rel_error"] <= 1e-2
    md = (out / "tune_speed.md").read_text()
    assert "cpu (triton interpreter)" in md and "| 1 | 48x40x64 |" in md and report["environment"]["torch"] in md
    # Seeding is on by default and the report says so (the tiny shape's seeds: dispatch's small-problem picks).
    assert report["seeding"] is True and run["seeding"] is True and "Seeding on" in md
    assert 0 <= run["tune"]["seed_trials"] <= 2

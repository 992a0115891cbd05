"""benchmarks/probes/probe_io.py: the helpers every probe's report is made with."""

from __future__ import annotations

from . import load_script

pio = load_script("probes/probe_io.py", "probe_io")


def test_fastest_skips_failures_and_table_head_names_device_and_timer() -> None:
    entries = [{"config": "a", "us": 3.0}, {"config": "b", "us": "wrong result (1e-1)"}, {"config": "c", "us": 2.5}]
    assert pio.fastest(entries) == {"config": "c", "us": 2.5}
    assert pio.fastest([{"us": "OutOfResources: shared memory"}]) is None and pio.fastest([]) is None
    meta = {"device": "GPU X", "torch": "2.0", "triton": "3.0", "date": "2026-01-01", "timer": "graph"}
    head = pio.table_head("Title", meta, "µs.", ["layer", "time"])
    assert head[0] == "# Title (GPU X)" and "Timer: graph. µs." in head[2] and head[-1] == "|---|---|"

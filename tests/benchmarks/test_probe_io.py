"""benchmarks/probes/probe_io.py: the helpers every probe's report is made with."""

from __future__ import annotations

import argparse

import pytest

from . import load_script

pio = load_script("probes/probe_io.py", "probe_io")


def test_fastest_skips_failures_and_table_head_names_device_and_timer() -> None:
    entries = [{"config": "a", "us": 3.0}, {"config": "b", "us": "wrong result (1e-1)"}, {"config": "c", "us": 2.5}]
    assert pio.fastest(entries) == {"config": "c", "us": 2.5}
    assert pio.fastest([{"us": "OutOfResources: shared memory"}]) is None and pio.fastest([]) is None
    meta = {"device": "GPU X", "torch": "2.0", "triton": "3.0", "date": "2026-01-01", "timer": "graph"}
    head = pio.table_head("Title", meta, "µs.", ["layer", "time"])
    assert head[0] == "# Title (GPU X)" and "Timer: graph. µs." in head[2] and head[-1] == "|---|---|"


def test_int_tuple_parses_shapes_and_configs_and_refuses_the_rest() -> None:
    shape = pio.int_tuple((3,), "MxNxK")
    assert shape("1970x2304X768") == (1970, 2304, 768)
    for bad in ("1970x2304", "0x1x1", "ax1x1", "1x-2x3"):
        with pytest.raises(argparse.ArgumentTypeError, match="MxNxK, positive integers"):
            shape(bad)
    tail = pio.int_tuple((5, 6), "tail")
    assert tail("64,64,64,4,8,2") == (64, 64, 64, 4, 8, 2)
    for bad in ("64,64,64,4", "64,64,64,4,0", "64,64,a,4,4", "64,64,64,4,4,2,1"):
        with pytest.raises(argparse.ArgumentTypeError, match="positive integers"):
            tail(bad)


"""benchmarks/probes/wave_tail_configs.py's command line: shapes, heads and tails as integer tuples (the timing
itself needs a GPU)."""

from __future__ import annotations

import argparse

import pytest

from . import load_script

wt = load_script("probes/wave_tail_configs.py", "wave_tail_configs")


def test_ints_parse_and_refuse() -> None:
    assert wt._ints("896x2560X2560", "x", (3,), "MxNxK") == (896, 2560, 2560)
    assert wt._ints("64,64,64,4,8,2", ",", (5, 6), "tail") == (64, 64, 64, 4, 8, 2)
    for bad in ("64,64,64,4", "64,64,64,4,0", "64,64,a,4,4", "64,64,64,4,4,2,1"):
        with pytest.raises(argparse.ArgumentTypeError, match="positive integers"):
            wt._ints(bad, ",", (5, 6), "tail")


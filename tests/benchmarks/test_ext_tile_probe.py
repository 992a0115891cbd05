"""benchmarks/probes/ext_tile.py in the interpreter: the two-accumulator tile computes the product, with and
without its extra columns, on sizes that leave partial tiles."""

from __future__ import annotations

import pytest
import torch

from . import load_script

et = load_script("probes/ext_tile.py", "ext_tile")


@pytest.mark.interpreter
@pytest.mark.parametrize("cfg", [(32, 32, 16, 32, 4, 2), (32, 32, 0, 32, 4, 2)], ids=["ext_16", "plain"])
def test_ext_tile_matches_torch(cfg: tuple[int, ...]) -> None:
    m, n, k = 70, 100, 96
    g = torch.Generator().manual_seed(sum(cfg))
    a, b = torch.randn(m, k, generator=g).half(), torch.randn(n, k, generator=g).half()
    c = torch.full((m, n), float("nan")).half()
    et.launcher(a, b, c, cfg)()
    want = a.double() @ b.double().T
    assert ((c.double() - want).norm() / want.norm()).item() < 1e-2
    assert et.tiles((m, n, k), cfg) == 3 * -(-n // (cfg[1] + cfg[2]))

"""Workloads captured from a torch model run once on the meta device."""

from __future__ import annotations

import argparse
import textwrap

import pytest

from alcop_triton import cli
from alcop_triton.autotune.capture import capture, capture_factory, load_factory
from alcop_triton.errors import ScheduleError
from alcop_triton.records import Workload

FACTORY = textwrap.dedent('''
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(768, 3 * 768)
            self.conv = nn.Conv2d(3, 64, 7, stride=2, padding=3)

        def forward(self, x, img):
            q, k, v = self.qkv(x).split(768, dim=-1)
            q = q.reshape(2, 128, 12, 64).transpose(1, 2)
            k = k.reshape(2, 128, 12, 64).transpose(1, 2)
            scores = q @ k.transpose(-1, -2)
            return torch.bmm(scores.flatten(0, 1), scores.flatten(0, 1)), self.conv(img)

    def make():
        return Block(), (torch.randn(2, 128, 768), torch.randn(8, 3, 224, 224))

    def not_a_pair():
        return Block()
''')


@pytest.fixture
def factory_module(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_models"


def test_capture_meta(factory_module):
    ws = capture_factory(f"{factory_module}:make", dtype="float16")
    assert ws == [
        Workload("linear", (256, 2304, 768), "float16", "nt"),
        Workload("bmm", (24, 128, 128, 64), "float16", "nt"),
        Workload("bmm", (24, 128, 128, 128), "float16", "nn"),
        Workload("conv2d", (8, 224, 224, 3, 64, 7, 7, 2, 3), "float16", "nchw"),
    ]


def test_capture_keeps_model_dtype_and_dedupes():
    import torch

    lin = torch.nn.Linear(64, 32)
    ws = capture(lambda x: lin(lin.weight.new_ones(x.shape) @ torch.eye(64)) + lin(x), torch.randn(16, 64),
                 device="cpu")
    assert ws == [Workload("matmul", (16, 64, 64), "float32", "nn"), Workload("linear", (16, 32, 64), "float32", "nt")]


def test_bad_factories(factory_module):
    with pytest.raises(ScheduleError, match="module:callable"):
        load_factory("no_colon")
    with pytest.raises(ScheduleError, match=r"\(model, example_inputs\)"):
        capture_factory(f"{factory_module}:not_a_pair")


def test_cli_model_option(factory_module):
    args = argparse.Namespace(op=None, shapes=[], suite=None, suite_ops=None, model=f"{factory_module}:make",
                              capture_device="meta", dtype="bfloat16", layout=None)
    ws = cli._workloads(args)
    assert len(ws) == 4 and {w.dtype for w in ws} == {"bfloat16"}

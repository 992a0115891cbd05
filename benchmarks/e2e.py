"""End to end: fp16 inference and one bf16 training step of four models, eager against alcop's patch mode and torch.compile.

    python benchmarks/e2e.py --out OUT [--models bert,gpt2,llama,resnet50] [--task infer,train]
                             [--modes eager,patched,compile,compile_max,compile_alcop] [--no-compile]
                             [--train-max-autotune] [--reps 20] [--warmup 3] [--profile N] [--dry-run]
                             [--alcop-options '{"max_autotune_pointwise": true}']

Compile times to plan calls by (H200, 16 CPU cores, cold caches): compile_max took 76 s for the Llama layers,
118 s for BERT, and did not finish GPT-2 in the 86 s a call had left; the other modes compile in 9-15 s.

Each (model, task) pair runs in a process of its own; calls into the same OUT on the same device and
versions (and the same ``--reps`` and ``--warmup``) add their pairs to one report, a pair measured again
replacing the earlier one. So one GPU run may be split into calls of limited length, one pair each
(``--models gpt2 --task train``); a pair's modes are always measured in one process, never merged from two.

Models (random weights, built from ``torch.nn`` only, no downloads):

* ``bert``: a BERT-base encoder, 12 layers, hidden 768, 12 heads, FFN 3072, GELU, post-LayerNorm;
  16 sequences x 512 tokens (inference only);
* ``gpt2``: GPT-2 small, token and position embeddings, 12 pre-LayerNorm decoder blocks (hidden 768,
  12 heads, causal), final LayerNorm and the tied 50257-word LM head; 8 sequences x 1024 tokens;
* ``llama``: two Llama-7B-sized decoder layers (hidden 4096, 32 heads, no biases, RMSNorm, rotary position
  embedding, causal, SwiGLU FFN 11008) on hidden states; 2 sequences x 2048 tokens;
* ``resnet50``: torchvision's ResNet-50 where torchvision is installed, otherwise the same network
  (bottleneck blocks 3-4-6-3, stride on the 3x3 convolution) from ``torch.nn``; batch 64, 224x224,
  channels_last; BatchNorm in eval mode for inference, in training mode for training.

Attention is written with ``torch.matmul`` and ``softmax`` (not a fused attention kernel), so patch
mode routes its batched products too.

Tasks: ``infer``: one forward pass, fp16 weights and inputs, under ``torch.inference_mode``. ``train``: one
training step, forward + loss + backward, gradients set to None before each step and no optimizer step
(the optimizer's update is the same pointwise work in every mode); GPT-2 and the Llama layers with
bfloat16 weights and activations (loss: cross-entropy against random next tokens for GPT-2, mean squared
error against a random target for the Llama layers, computed in float32); ResNet-50 with automatic mixed
precision, float32 weights and ``torch.autocast("cuda", torch.bfloat16)`` around forward and loss
(cross-entropy against random labels). BERT has no training step here.

Modes: ``eager``; ``patched`` (the eager model under ``alcop_triton.patched()``); ``compile``
(``torch.compile(model)``, default mode); ``compile_max`` (``torch.compile(model,
mode="max-autotune-no-cudagraphs")``: Inductor's GEMM autotuning without CUDA graphs, so that every compiled
mode is timed the same way, kernels launched from the host, under the same timer as eager; a CUDA graph
would hide the host cost only this mode pays for); ``compile_alcop``: the model compiled with alcop's
routing on, through ``alcop_triton.compile(model)`` where the package has it, otherwise
``torch.compile(model)`` called under ``patched()``; the result says which (``compiled_by``), with the
torch.compile options ``--alcop-options`` gave it. Training
leaves ``compile_max`` out unless ``--train-max-autotune`` (its compile is long).

Timer: CUDA events around one pass (inference) or step (training), the host synchronised before each (host
cost included); the modes take turns pass by pass (``docs/decisions.md#d30``); median, with min, quartiles
and max, of ``--reps`` passes after ``--warmup``. Ratios: eager ms / mode ms, compile ms / mode ms and
compile_max ms / mode ms, within one process. First call: wall time of a mode's first call (its compile,
for the compile modes; alcop's kernel builds); each compile mode compiles with Inductor's and Triton's
caches pointed at fresh directories (no compile reuses another's), the compile modes before ``patched``
(so ``compile_alcop`` pays for building alcop's kernels, ``patched`` finds them built). Error: max |out -
eager| / max |eager| of the model's output and, for training, the largest over parameters of max |grad -
eager grad| / max |eager grad|; tolerance per compute dtype, about ten units in the last place (fp16
1e-2, bf16 8e-2). ``--profile N``: after the timed passes, N more passes of each mode under ``torch.profiler``; the report lists
each mode's largest kernels per pass (a diagnosis of where a mode gains or loses, not a timing). After the
timed passes, a compile mode's pass is counted for calls of alcop's ops (``alcop_calls_run``) against the
calls in the code Inductor wrote for it: where they differ, the report says the timed graph was another. Writes
``OUT/e2e.json`` and ``OUT/e2e.md``. ``--dry-run`` runs tiny versions of the
models and the training step on CPU (Triton's interpreter, wall clock, no compile modes) to test the
script; it measures nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suite  # noqa: E402  (benchmarks/suite.py: shared harness helpers)
import timing  # noqa: E402  (benchmarks/timing.py, beside this script)

MODES = ("eager", "patched", "compile", "compile_max", "compile_alcop")
COMPILE_KWARGS: dict[str, dict[str, Any]] = {"compile": {}, "compile_max": {"mode": "max-autotune-no-cudagraphs"},
                                             "compile_alcop": {}}
TASKS = ("infer", "train")
MODELS = {"infer": ("bert", "gpt2", "llama", "resnet50"), "train": ("gpt2", "llama", "resnet50")}
# About ten units in the last place of each compute dtype (2^-11 and 2^-8 times ten): outputs and gradients
# of a mode that computes the same products in another order stay well inside it.
TOLERANCE = {"float16": 1e-2, "bfloat16": 8e-2}
# The modes take turns pass by pass (``run_model``'s rounds: one per timed pass): the hosts are shared,
# and a drift in their load during one mode's passes would read as that mode's speed (seen on an H100
# host: eager ResNet-50 at 5.74 and 6.94 ms in two runs a minute apart; within one probe, eager ResNet-50
# timed twice with other modes between: 8.4 and 7.8 ms medians; in one process on a drifting host,
# patched / eager ResNet-50 at 1.045x, 0.969x, 1.115x and 0.899x in turns of two and six passes, 0.982x
# and 0.980x pass by pass: docs/decisions.md#d30).
TIMER = (f"{timing.PASS} (benchmarks/timing.py), "
         "median of the timed passes after warm-up; the modes take turns pass by pass, in an order that "
         "changes each round so that each mode follows every other equally often (a Williams design), each "
         "turn beginning with one untimed pass (switching modes is not timed as a pass of either: patch mode's "
         "wrappers go into place, or back, on a turn's first pass)")


class SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        s = torch.matmul(q, k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        if self.causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        y = torch.matmul(F.softmax(s.float(), dim=-1).to(x.dtype), v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """A transformer layer: post-LayerNorm (BERT) or pre-LayerNorm (GPT-2)."""

    def __init__(self, d: int, heads: int, ffn: int, pre_norm: bool, causal: bool) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.attn = SelfAttention(d, heads, causal)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class BertEncoder(nn.Module):
    def __init__(self, layers: int = 12, d: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(Block(d, heads, ffn, pre_norm=False, causal=False) for _ in range(layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class GPT2(nn.Module):
    def __init__(self, layers: int = 12, d: int = 768, heads: int = 12, vocab: int = 50257, ctx: int = 1024) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(*(Block(d, heads, 4 * d, pre_norm=True, causal=True) for _ in range(layers)))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.blocks(self.wte(tokens) + self.wpe(pos))
        return F.linear(self.ln_f(x), self.wte.weight)   # the LM head shares the token embedding


class RMSNorm(nn.Module):
    """Llama's norm: x / sqrt(mean(x^2) + eps) * weight, the mean taken in float32."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (the half-split layout of Hugging Face's Llama)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, d // self.heads).transpose(1, 2) for p in (self.q, self.k, self.v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        s = torch.matmul(q, k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        y = torch.matmul(F.softmax(s.float(), dim=-1).to(x.dtype), v)
        return self.o(y.transpose(1, 2).reshape(b, t, d))


class LlamaLayer(nn.Module):
    """A Llama decoder layer: pre-RMSNorm attention and SwiGLU FFN, residual around each."""

    def __init__(self, d: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.attn = LlamaAttention(d, heads)
        self.gate, self.up = nn.Linear(d, ffn, bias=False), nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LlamaBlock(nn.Module):
    """``layers`` Llama decoder layers (Llama-7B's sizes by default) on hidden states, rotary tables as buffers."""

    def __init__(self, layers: int = 2, d: int = 4096, heads: int = 32, ffn: int = 11008, ctx: int = 2048,
                 theta: float = 10000.0) -> None:
        super().__init__()
        self.layers = nn.ModuleList(LlamaLayer(d, heads, ffn) for _ in range(layers))
        hd = d // heads
        freq = theta ** -(torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angle = torch.outer(torch.arange(ctx, dtype=torch.float64), freq).repeat(1, 2)
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + self.down(x))


class ResNet50(nn.Module):
    """torchvision's resnet50 layout (stride on the 3x3 convolution, "ResNet v1.5")."""

    def __init__(self, base: int = 64, blocks: Sequence[int] = (3, 4, 6, 3), classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], base
        for i, n in enumerate(blocks):
            width = base * 2 ** i
            for j in range(n):
                layers.append(Bottleneck(cin, width, 2 if j == 0 and i > 0 else 1))
                cin = width * Bottleneck.expansion
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1), 1))


def _network(name: str, tiny: bool, g: torch.Generator) -> tuple[nn.Module, torch.Tensor, str]:
    """The float32 model with random weights, scaled by fan-in so 16-bit activations stay in range, its
    float32 (or token) input, and where its code comes from."""
    if name == "bert":
        model: nn.Module = BertEncoder(layers=1, d=64, heads=2, ffn=128) if tiny else BertEncoder()
        x = torch.randn((2, 16, 64) if tiny else (16, 512, 768), generator=g)
        src = "torch.nn (this file)"
    elif name == "gpt2":
        model = GPT2(layers=1, d=64, heads=2, vocab=101, ctx=32) if tiny else GPT2()
        x = torch.randint(0, 101 if tiny else 50257, (2, 16) if tiny else (8, 1024), generator=g)
        src = "torch.nn (this file)"
    elif name == "llama":
        model = LlamaBlock(layers=1, d=64, heads=2, ffn=176, ctx=32) if tiny else LlamaBlock()
        x = torch.randn((2, 16, 64) if tiny else (2, 2048, 4096), generator=g)
        src = "torch.nn (this file)"
    elif name == "resnet50":
        try:
            if tiny:
                raise ImportError
            import torchvision

            model, src = torchvision.models.resnet50(weights=None), f"torchvision {torchvision.__version__}"
        except ImportError:
            model = ResNet50(base=8, blocks=(1, 1, 1, 1), classes=10) if tiny else ResNet50()
            src = "torch.nn (this file)"
        x = torch.randn((2, 3, 32, 32) if tiny else (64, 3, 224, 224), generator=g)
    else:
        raise ValueError(f"--models: unknown model {name!r}; known: {', '.join(MODELS['infer'])}")
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() > 1:
                p.copy_(noise / math.sqrt(p[0].numel()))
            else:   # norm scales near 1, biases near 0
                p.copy_((1.0 if pname.endswith("weight") else 0.0) + 0.1 * noise)
    return model, x, src


def build(name: str, device: str, tiny: bool) -> tuple[nn.Module, torch.Tensor, str]:
    """The model in fp16 eval mode on ``device``, its input, and where its code comes from."""
    model, x, src = _network(name, tiny, torch.Generator().manual_seed(0))
    model = model.to(device=device, dtype=torch.float16).eval()
    x = x.to(device)
    if x.is_floating_point():
        x = x.half()
    if name == "resnet50":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x, src


@dataclass(frozen=True)
class TrainCase:
    """A training step's parts: ``model`` in training mode, its input and target, the loss (float32), the
    dtype the products compute in and, for automatic mixed precision, the autocast dtype (weights float32)."""

    model: nn.Module
    x: torch.Tensor
    target: torch.Tensor
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    dtype: torch.dtype
    autocast: torch.dtype | None
    source: str


def _next_token_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, -2).float(), target.flatten())


def _mse_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out.float(), target)


def _class_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float(), target)


def build_train(name: str, device: str, tiny: bool) -> TrainCase:
    """The training step of ``name`` (see the module docstring): GPT-2 and the Llama layers in bfloat16,
    ResNet-50 in float32 under bfloat16 autocast."""
    if name not in MODELS["train"]:
        raise ValueError(f"--models: {name!r} has no training step; training models: {', '.join(MODELS['train'])}")
    g = torch.Generator().manual_seed(0)
    model, x, src = _network(name, tiny, g)
    if name == "gpt2":
        wte = model.get_submodule("wte")
        assert isinstance(wte, nn.Embedding)
        vocab = wte.num_embeddings
        target = torch.randint(0, vocab, tuple(x.shape), generator=g)
        return TrainCase(model.to(device=device, dtype=torch.bfloat16).train(), x.to(device), target.to(device),
                         _next_token_loss, torch.bfloat16, None, src)
    if name == "llama":
        target = torch.randn(tuple(x.shape), generator=g)
        return TrainCase(model.to(device=device, dtype=torch.bfloat16).train(), x.to(device, torch.bfloat16),
                         target.to(device), _mse_loss, torch.bfloat16, None, src)
    fc = model.get_submodule("fc")
    assert isinstance(fc, nn.Linear)
    classes = fc.out_features
    target = torch.randint(0, classes, (x.shape[0],), generator=g)
    model = model.to(device=device, memory_format=torch.channels_last).train()
    return TrainCase(model, x.to(device).contiguous(memory_format=torch.channels_last), target.to(device),
                     _class_loss, torch.bfloat16, torch.bfloat16, src)


FLOOR_FRACTION = 1e-6
"""Of a training input's elements, the share (at least one) the noise floor moves by one unit (``nudged``)."""
FLOOR_FACTOR = 2.0
"""A training mode is within tolerance where its errors are at most the dtype's tolerance or this many times
the floor's: what eager itself shows when ``FLOOR_FRACTION`` of its input moves by one unit. ResNet-50's bf16
step from random weights and labels is chaotic: one unit on 51 of the stem's 51 million bf16 outputs moved the
logits by 0.073 and some batch-norm gradients by 1.7 times their largest value (docs/decisions.md#d54)."""


def nudged(x: torch.Tensor, dtype: torch.dtype, fraction: float = FLOOR_FRACTION, seed: int = 0) -> torch.Tensor:
    """A copy of ``x`` with ``fraction`` of its elements (at least one, chosen by ``seed``) one unit of ``dtype``
    (the dtype it computes in: under autocast, autocast's) up or down: the smallest change to the input that
    the computation can see."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    flat = x.detach().clone()  # dense in x's memory format: its elements are one run of storage
    view = flat.as_strided((flat.numel(),), (1,))
    n = max(1, int(view.numel() * fraction))
    idx = torch.randperm(view.numel(), generator=g)[:n].to(x.device)
    v = view[idx].to(torch.float64)
    bits = round(-math.log2(torch.finfo(dtype).eps))  # mantissa bits: one unit is 2**(exponent - bits)
    unit = torch.exp2(torch.floor(torch.log2(v.abs().clamp_min(torch.finfo(dtype).tiny))) - bits)
    sign = torch.randint(0, 2, (n,), generator=g).to(x.device, torch.float64) * 2 - 1
    view[idx] = (v.to(dtype).to(torch.float64) + sign * unit).to(dtype).to(x.dtype)
    return flat


def train_step(case: TrainCase) -> Callable[[nn.Module], torch.Tensor]:
    """One training step of ``case`` through a module (the model, or a compiled wrapper of it): gradients
    set to None, forward and loss (under autocast for AMP), backward; no optimizer step. Returns the
    model's output, detached."""
    params = [p for p in case.model.parameters() if p.requires_grad]
    device_type = case.x.device.type

    def step(m: nn.Module) -> torch.Tensor:
        for p in params:
            p.grad = None
        with (torch.autocast(device_type, dtype=case.autocast) if case.autocast is not None
              else contextlib.nullcontext()):
            out = m(case.x)
            loss = case.loss(out, case.target)
        loss.backward()
        return out.detach()
    return step


def time_passes(fn: Callable[[], Any], reps: int, warmup: int, device: str) -> list[float]:
    """ms of each of ``reps`` passes (see TIMER) after ``warmup`` untimed ones; wall clock on CPU."""
    for _ in range(warmup):
        fn()
    if device == "cuda":
        return timing.event_times_ms({"pass": fn}, reps, warmup=0)["pass"]
    return timing.wall_times_ms(fn, reps)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    scale = ref.float().abs().max().item()
    diff = (out.float() - ref.float()).abs().max().item()
    return diff / scale if scale else (0.0 if diff == 0 else math.inf)


def grad_rel_err(grads: Sequence[torch.Tensor | None], ref: Sequence[torch.Tensor | None]) -> float:
    """The largest over parameters of max |grad - ref| / max |ref| (inf where one of the two is missing)."""
    worst = 0.0
    for gr, r in zip(grads, ref):
        if gr is None or r is None:
            if gr is not r:
                return math.inf
            continue
        worst = max(worst, rel_err(gr, r))
    return worst


def spread(ts: Sequence[float]) -> dict[str, float]:
    """Median, min, quartiles and max of a mode's pass times (ms)."""
    q1, _, q3 = statistics.quantiles(ts, n=4, method="inclusive") if len(ts) > 1 else (ts[0], ts[0], ts[0])
    return {"ms": statistics.median(ts), "ms_min": min(ts), "ms_q1": q1, "ms_q3": q3, "ms_max": max(ts)}


INTERVAL = 0.95
"""The confidence of the interval around each mode's ratio to eager (``paired_interval``)."""


def paired_interval(ref: Sequence[float], other: Sequence[float], per_round: int = 1,
                    confidence: float = INTERVAL) -> tuple[float, float, float] | None:
    """(median, low, high) of ``other``'s speedup over ``ref`` taken round by round: each round's ratio of
    ``ref``'s time to ``other``'s (a round's turns follow one another, so its two times share the host's state
    then: a host that drifts over a run moves both), the median of those ratios, and the distribution-free
    interval around that median at ``confidence`` (the sign test's: order statistics of the ratios, counted
    off a binomial(n, 1/2)). ``per_round``: each mode's passes per round (a round's median is its time).
    None where the rounds are too few for that confidence (fewer than six at 95%).

    A host-bound model's passes spread by tens of percent with the host (``docs/decisions.md#d30``); an
    interval on both sides of 1 says the run shows no difference between the two modes either way
    (``docs/decisions.md#d55``)."""
    def rounds(ts: Sequence[float]) -> list[float]:
        return [statistics.median(ts[i:i + per_round]) for i in range(0, len(ts) - per_round + 1, per_round)]
    ratios = sorted(a / b for a, b in zip(rounds(ref), rounds(other)))
    n = len(ratios)
    tail, k = 0.0, 0
    while True:  # k ratios off each end while P(binomial(n, 1/2) < k + 1) stays within (1 - confidence) / 2
        tail += math.comb(n, k) / 2 ** n if n else 1.0
        if tail > (1 - confidence) / 2:
            break
        k += 1
    if k == 0:
        return None
    return statistics.median(ratios), ratios[k - 1], ratios[n - k]


def compiled(mode: str, model: nn.Module, alcop: Any) -> tuple[Callable[..., Any], bool, str]:
    """(what ``mode`` calls in place of ``model``, whether it calls it under ``alcop.patched()``, how it was
    compiled). ``alcop``: the package (its ``compile`` is used for compile_alcop where it has one)."""
    if mode in ("eager", "patched"):
        return model, mode == "patched", "not compiled"
    kwargs = COMPILE_KWARGS[mode]
    args = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    if mode == "compile_alcop" and hasattr(alcop, "compile"):
        return alcop.compile(model, **kwargs), False, f"alcop_triton.compile(model{args})"
    if mode == "compile_alcop":
        return torch.compile(model, **kwargs), True, f"torch.compile(model{args}) called under patched()"
    return torch.compile(model, **kwargs), False, f"torch.compile(model{args})"


def _mode_call(mode: str, model: nn.Module, run: Callable[[Any], Any], alcop: Any) -> tuple[Callable[[], Any], str]:
    """One pass of ``run`` (inference: the module applied to the input; training: a step) through ``mode``'s
    module, as a call of its own (the modes are timed in turns, after all are built: each needs its own
    closure), and how that module was compiled."""
    m, under_patch, how = compiled(mode, model, alcop)
    if not under_patch:
        return (lambda: run(m)), how

    def under_patch_mode() -> Any:
        with alcop.patched():
            return run(m)
    return under_patch_mode, how


def cold_caches(mode: str, device: str, root: str) -> ContextManager[Any]:
    """Around a compile mode's first call on a GPU: Inductor's and Triton's caches in fresh directories under
    ``root`` and Inductor's in-memory caches cleared, so its compile time is a cold compile's and owes
    nothing to an earlier mode's."""
    if device != "cuda" or not mode.startswith("compile"):
        return contextlib.nullcontext()
    from torch._inductor import utils

    fresh = getattr(utils, "fresh_cache", None) or getattr(utils, "fresh_inductor_cache")
    return fresh(dir=root, delete=False)


def turn_order(modes: Sequence[str], round_: int) -> list[str]:
    """The order the modes take their turns in round ``round_``: the rows of a Williams design, so that over
    its rounds (as many as modes, twice as many for an odd count, the second half mirrored) each mode
    follows every other equally often. In one fixed order compile_alcop followed compile_max in every round
    and its passes of the Llama block ran 4% slower than compile's, with the same kernels; with the two
    compiled modes in either order and no compile_max they were equal (``docs/decisions.md#d52``)."""
    n = len(modes)
    if n < 2:
        return list(modes)
    first, low, high = [0], 1, n - 1   # 0, 1, n - 1, 2, n - 2, ...: each difference once
    while len(first) < n:
        if len(first) % 2:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
    rows = n if n % 2 == 0 else 2 * n
    i = round_ % rows
    row = [modes[(j + i) % n] for j in first]
    return row[::-1] if i >= n else row


def build_order(modes: Sequence[str]) -> list[str]:
    """eager first (the reference), the compile modes, patched last (see the module docstring)."""
    return sorted(modes, key=lambda m: (m != "eager", m == "patched", MODES.index(m)))


def run_model(name: str, device: str, modes: Sequence[str], reps: int, warmup: int, tiny: bool,
              timer: Callable[..., list[float]] = time_passes, rounds: int | None = None,
              task: str = "infer", profile: int = 0) -> dict[str, Any]:
    import alcop_triton as at

    if "eager" not in modes:
        raise ValueError(f"modes: {list(modes)} lacks 'eager', the reference of every ratio and error")
    if task == "infer":
        model, x, src = build(name, device, tiny)
        run: Callable[[Any], Any] = lambda m: m(x)  # noqa: E731
        dtype, amp, inp = x.dtype if x.is_floating_point() else torch.float16, None, list(x.shape)
        grad_ctx: Callable[[], ContextManager[Any]] = torch.inference_mode
    elif task == "train":
        case = build_train(name, device, tiny)
        model, src, dtype, amp, inp = case.model, case.source, case.dtype, case.autocast, list(case.x.shape)
        run = train_step(case)
        grad_ctx = contextlib.nullcontext
    else:
        raise ValueError(f"--task: unknown task {task!r}; known: {', '.join(TASKS)}")
    dname = str(dtype).removeprefix("torch.")
    tol = TOLERANCE[dname]
    res: dict[str, Any] = {"model": name, "task": task, "source": src, "input": inp, "dtype": dname,
                           "autocast": str(amp).removeprefix("torch.") if amp is not None else None,
                           "tolerance": tol, "modes": {m: {} for m in modes}}
    params = [p for p in model.parameters() if p.requires_grad]
    fns: dict[str, Callable[[], Any]] = {}
    ref_out: torch.Tensor | None = None
    ref_grads: list[torch.Tensor | None] = []
    torch._dynamo.reset()
    cache_root = tempfile.mkdtemp(prefix="alcop_e2e_inductor_")
    with grad_ctx():
        for mode in build_order(modes):
            r: dict[str, Any] = res["modes"][mode]
            try:
                fn, r["compiled_by"] = _mode_call(mode, model, run, at)
                t0 = time.perf_counter()
                with cold_caches(mode, device, cache_root):
                    if device == "cuda" and mode.startswith("compile"):
                        from torch._inductor.utils import run_and_get_code
                        out, code = run_and_get_code(fn)  # first call: compiles; the code Inductor wrote
                        r["alcop_calls_in_code"] = suite.alcop_calls(code)
                    else:
                        out = fn()   # first call: builds kernels (alcop)
                if device == "cuda":
                    torch.cuda.synchronize()
                r["first_call_s"] = time.perf_counter() - t0
                if mode == "eager":
                    ref_out = out
                    ref_grads = [p.grad.clone() if p.grad is not None else None for p in params]
                assert ref_out is not None
                r["max_rel_err"] = rel_err(out, ref_out)
                if task == "train":
                    r["grad_max_rel_err"] = grad_rel_err([p.grad for p in params], ref_grads)
                if mode == "eager" and task == "train" and case.x.is_floating_point():
                    # the noise floor: eager's same step with its input nudged (after eager's own errors)
                    floor_case = dataclasses.replace(case, x=nudged(case.x, case.autocast or case.x.dtype))
                    floor_out = train_step(floor_case)(model)
                    res["floor"] = {"max_rel_err": rel_err(floor_out, ref_out),
                                    "grad_max_rel_err": grad_rel_err([p.grad for p in params], ref_grads)}
                fns[mode] = fn
            except Exception as exc:   # a mode that fails is a result
                r["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                if mode == "eager":
                    raise
        del ref_out, ref_grads
        # The modes take turns, a share of the passes each per round: by default one (see TIMER).
        rounds = rounds or reps
        times: dict[str, list[float]] = {mode: [] for mode in modes if mode in fns}
        for i in range(rounds):
            for mode in turn_order(list(times), i):
                try:
                    times[mode] += timer(fns[mode], -(-reps // rounds), warmup if i == 0 else 1, device)
                except Exception as exc:   # a later pass that fails (a recompile, say): the mode's result
                    res["modes"][mode]["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                    del times[mode]
        if profile:  # after the timed passes, which it does not touch
            for mode in times:
                res["modes"][mode]["profile"] = profile_passes(fns[mode], profile, device)
        for mode in times:  # after the timed passes: whether the graph timed is the one whose code was counted
            if "alcop_calls_in_code" in res["modes"][mode]:
                res["modes"][mode]["alcop_calls_run"] = at.compiling.op_calls(fns[mode])
    per_round = -(-reps // rounds)
    for mode, ts in times.items():
        res["modes"][mode].update(spread(ts), passes_ms=ts)
        interval = paired_interval(times["eager"], ts, per_round) if mode != "eager" and "eager" in times else None
        if interval is not None:
            res["modes"][mode]["vs_eager_interval"] = list(interval[1:])
    ms = {m: res["modes"].get(m, {}).get("ms") for m in ("eager", "compile", "compile_max")}
    for mode, r in res["modes"].items():
        if "ms" not in r:
            continue
        for base, key in (("eager", "speedup_vs_eager"), ("compile", "speedup_vs_compile"),
                          ("compile_max", "speedup_vs_compile_max")):
            if ms[base]:
                r[key] = ms[base] / r["ms"]
        if mode.startswith("compile") and "first_call_s" in res["modes"].get("compile", {}):
            r["first_call_vs_compile"] = r["first_call_s"] / res["modes"]["compile"]["first_call_s"]
        floor = res.get("floor", {})
        r["within_tolerance"] = (r["max_rel_err"] <= max(tol, FLOOR_FACTOR * floor.get("max_rel_err", 0.0))
                                 and r.get("grad_max_rel_err", 0.0)
                                 <= max(tol, FLOOR_FACTOR * floor.get("grad_max_rel_err", 0.0)))
    for mode, r in res["modes"].items():
        print(f"{name} {task} {mode}: {json.dumps(r)}", flush=True)
    return res


PROFILE_TOP = 12
"""Kernels (or, on CPU, operators) listed per mode by ``--profile``: the largest by self time per pass."""


def profile_passes(fn: Callable[[], Any], passes: int, device: str) -> dict[str, Any]:
    """Where one pass's time goes: ``passes`` passes under ``torch.profiler``, after one untimed pass; the
    device time per pass in all, and the ``PROFILE_TOP`` kernels (CPU: operators) by self time, each with
    its calls and microseconds per pass. A diagnosis of the modes, not their timing: the profiler adds host
    time, so its totals are not the timer's."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]) as prof:
        for _ in range(passes):
            fn()
        if cuda:
            torch.cuda.synchronize()

    def self_us(e: Any) -> float:
        return float(e.self_device_time_total if cuda else e.self_cpu_time_total)
    events = [e for e in prof.key_averages() if self_us(e) > 0]
    events.sort(key=self_us, reverse=True)
    return {"passes": passes, "what": "kernels (device time)" if cuda else "operators (CPU time)",
            "total_us": sum(self_us(e) for e in events) / passes,
            "top": [{"name": e.key[:120], "calls": e.count / passes, "us": self_us(e) / passes}
                    for e in events[:PROFILE_TOP]]}


TASK_TITLES = {"infer": "inference, one forward pass", "train": "training, one step (forward + loss + backward)"}


def _f(v: Any, fmt: str, suffix: str = "") -> str:
    return format(v, fmt) + suffix if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def markdown(meta: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    out = [f"# End to end: inference and training ({meta['device']})", "",
           f"Produced by `benchmarks/e2e.py`; torch {meta['torch']}, Triton {meta['triton']}, alcop_triton "
           f"{meta['alcop']}; date {meta['date']}; random weights; {meta['reps']} timed passes after "
           f"{meta['warmup']} warm-up passes.", "", f"Timer: {meta['timer']}.", "",
           "Modes: eager; patched = eager under `alcop_triton.patched()`; compile = `torch.compile(model)` (default "
           "mode); compile_max = `torch.compile(model, mode=\"max-autotune-no-cudagraphs\")`; compile_alcop = compiled "
           "with alcop's routing (how: below). Ratios = the other mode's median ms / this mode's, one process. "
           "First call = wall time of the mode's first call (compile modes: a cold compile). Error = max |out - "
           "eager| / max |eager|; grad error = the largest over parameters of max |grad - eager grad| / max |eager "
           "grad|; tolerance per dtype in brackets. Floor (training with a floating input): the errors of eager's "
           f"own step with {FLOOR_FRACTION:g} of its input (at least one element) one unit of its compute dtype off; "
           f"a mode is within tolerance where each error is at most the tolerance or {FLOOR_FACTOR:g} times its "
           f"floor. In brackets after a ratio to eager (runs that kept their passes): the {INTERVAL:.0%} interval "
           "of the median of the mode's round-by-round ratios to eager (sign test); one on both sides of 1 shows no "
           "difference either way.", ""]
    for task in TASKS:
        rows = [r for r in results if r.get("task", "infer") == task]
        if not rows:
            continue
        out += [f"## {TASK_TITLES[task]}", "",
                "| model | input | dtype | mode | ms median | min / q1 / q3 / max | vs eager | vs compile | "
                "vs compile_max | first call s | error | grad error |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for res in rows:
            inp = "x".join(map(str, res["input"]))
            dtype = res.get("dtype", "float16") + (f" (autocast {res['autocast']})" if res.get("autocast") else "")
            tol = res.get("tolerance", TOLERANCE.get(res.get("dtype", "float16")))
            floor = res.get("floor")
            floor_out = f"; floor {floor['max_rel_err']:.2e}" if floor else ""
            floor_grad = f" (floor {floor['grad_max_rel_err']:.2e})" if floor else ""
            for mode, r in res["modes"].items():
                head = f"| {res['model']} | {inp} | {dtype} | {mode} |"
                if "error" in r:
                    out.append(f"{head} error: {r['error']} | | | | | | | |")
                    continue
                if "ms" not in r:
                    continue
                flag = "" if r.get("within_tolerance", True) else " **over tolerance**"
                sp = " / ".join(_f(r.get(k), ".2f") for k in ("ms_min", "ms_q1", "ms_q3", "ms_max"))
                ci = r.get("vs_eager_interval")
                around = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
                out.append(f"{head} {r['ms']:.2f} | {sp} | **{_f(r.get('speedup_vs_eager'), '.3f', 'x')}**{around} | "
                           f"{_f(r.get('speedup_vs_compile'), '.3f', 'x')} | "
                           f"{_f(r.get('speedup_vs_compile_max'), '.3f', 'x')} | {_f(r.get('first_call_s'), '.1f')} | "
                           f"{_f(r['max_rel_err'], '.2e')} ({tol:g}{floor_out}){flag} | "
                           f"{_f(r.get('grad_max_rel_err'), '.2e')}{floor_grad} |")
        out.append("")
    profiled = [(r, name, m["profile"]) for r in results for name, m in r["modes"].items() if "profile" in m]
    if profiled:
        out += ["## Where a pass's time goes (`--profile`)", "",
                "Per mode, after its timed passes: torch.profiler over the passes named, per pass; the profiler adds "
                "host time, so these totals are not the timer's.", ""]
        for r, name, p in profiled:
            out += [f"**{r['model']} {r.get('task', 'infer')} {name}**: {p['total_us']:.0f} µs of {p['what']} per "
                    f"pass ({p['passes']} passes)", "", "| kernel | calls | µs | share |", "|---|---|---|---|"]
            out += [f"| `{t['name'].replace('|', '/')}` | {t['calls']:g} | {t['us']:.1f} | "
                    f"{t['us'] / p['total_us']:.1%} |" for t in p["top"]]
            out.append("")
    calls = [f"{r['model']} {r.get('task', 'infer')} {name}: {m['alcop_calls_in_code']}"
             + (f" (a timed pass ran {m['alcop_calls_run']})" if "alcop_calls_run" in m else "") for r in results
             for name, m in r["modes"].items() if "alcop_calls_in_code" in m]
    if calls:
        out += ["Calls of alcop's ops in the code Inductor wrote: " + "; ".join(calls) + ".", ""]
    other = [f"{r['model']} {r.get('task', 'infer')} {name}" for r in results for name, m in r["modes"].items()
             if m.get("alcop_calls_run", m.get("alcop_calls_in_code")) != m.get("alcop_calls_in_code")]
    if other:
        out += ["**Timed another graph than the one compiled first** (alcop's calls per pass differ from its code's): "
                + ", ".join(other) + ".", ""]
    plain = [f"{r['model']} {r.get('task', 'infer')}" for r in results for name, m in r["modes"].items()
             if name == "compile_alcop" and m.get("alcop_calls_in_code") == 0]
    if plain:  # the records left every product to torch inside the graph (docs/decisions.md#d48)
        out += ["compile_alcop with no alcop op in its code (plain compile's graph, the records leaving every "
                "product to torch): " + ", ".join(plain) + ".", ""]
    how = sorted({f"{r['model']} {r.get('task', 'infer')}: {m['compiled_by']}" for r in results
                  for name, m in r["modes"].items() if name == "compile_alcop" and "compiled_by" in m})
    if how:
        out += ["compile_alcop compiled by: " + "; ".join(how) + ".", ""]
    out += ["Model code: " + "; ".join(sorted({f"{r['model']} from {r['source']}" for r in results})) + "."]
    return "\n".join(out) + "\n"


def merge(path: Path, meta: dict[str, Any], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This call's (model, task) pairs plus the other pairs of an earlier call into the same directory, when
    that call ran on the same device and versions (so one pair per call stays within a time limit).
    A result without a task is an inference result (the report's first form)."""
    if not path.is_file():
        return results
    old = json.loads(path.read_text())
    # a report holds one timer's numbers: a rerun whose timer reads otherwise replaces it
    differ = [k for k in ("device", "torch", "triton", "alcop", "reps", "warmup", "timer")
              if old["meta"].get(k) != meta.get(k)]
    same = not differ
    if differ and old["results"]:
        # said, not silent: a rerun with other settings replaces the whole report
        changes = ", ".join(f"{k} {old['meta'].get(k)!r} -> {meta.get(k)!r}" for k in differ)
        print(f"[e2e] {path}: its {len(old['results'])} results were run with other settings ({changes}); not kept",
              file=sys.stderr)

    def key(r: dict[str, Any]) -> tuple[str, str]:
        return r["model"], r.get("task", "infer")
    mine = {key(r) for r in results}
    kept = [r for r in old["results"] if key(r) not in mine] if same else []
    return kept + results


def pairs(models: Sequence[str], tasks: Sequence[str]) -> list[tuple[str, str]]:
    """The (model, task) pairs a call runs: each task's models among ``models``, in the order given."""
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"--task: unknown task {t!r}; known: {', '.join(TASKS)}")
    for m in models:
        if m not in MODELS["infer"]:
            raise ValueError(f"--models: unknown model {m!r}; known: {', '.join(MODELS['infer'])}")
    return [(m, t) for t in tasks for m in models if m in MODELS[t]]


def task_modes(task: str, modes: Sequence[str], no_compile: bool, dry_run: bool, train_max: bool) -> list[str]:
    """The modes a pair runs, in ``MODES`` order: eager always; the compile modes unless ``no_compile`` or a
    dry run; compile_max in training only with ``train_max``."""
    for m in modes:
        if m not in MODES:
            raise ValueError(f"--modes: unknown mode {m!r}; known: {', '.join(MODES)}")
    keep = set(modes) | {"eager"}
    if no_compile or dry_run:
        keep = {m for m in keep if not m.startswith("compile")}
    if task == "train" and not train_max:
        keep.discard("compile_max")
    return [m for m in MODES if m in keep]


def alcop_kwargs(options: str | None) -> dict[str, Any]:
    """compile_alcop's torch.compile arguments: ``options`` (``--alcop-options``), a JSON object, or none."""
    if options is None:
        return {}
    try:
        parsed = json.loads(options)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--alcop-options: {options!r} is not JSON ({exc.msg})") from None
    if not isinstance(parsed, dict) or not all(isinstance(k, str) for k in parsed):
        raise ValueError(f"--alcop-options: {options!r} must be a JSON object of option names, as torch.compile's "
                         "options are")
    return {"options": parsed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (e2e.json, e2e.md)")
    ap.add_argument("--models", default=",".join(MODELS["infer"]))
    ap.add_argument("--task", default=",".join(TASKS), help="infer, train or both (BERT has no training step)")
    ap.add_argument("--modes", default=",".join(MODES), help="modes to run (eager always runs: the reference)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile modes (their compile is long)")
    ap.add_argument("--train-max-autotune", action="store_true", help="run compile_max in training too (long compile)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after timing, profile N passes of each mode: its largest kernels per pass (a diagnosis)")
    ap.add_argument("--dry-run", action="store_true", help="tiny models on CPU, no compile modes: tests the script")
    ap.add_argument("--alcop-options", default=None, metavar="JSON",
                    help="torch.compile options for compile_alcop, a JSON object (e.g. '{\"max_autotune_pointwise\": "
                         "true}'); named in the result's compiled_by")
    a = ap.parse_args(argv)
    try:
        COMPILE_KWARGS["compile_alcop"] = alcop_kwargs(a.alcop_options)
        todo = pairs([m for m in a.models.split(",") if m], [t for t in a.task.split(",") if t])
        modes = {t: task_modes(t, [m for m in a.modes.split(",") if m], a.no_compile, a.dry_run,
                               a.train_max_autotune) for t in TASKS}
    except ValueError as exc:
        print(f"e2e: {exc}", file=sys.stderr)
        return 2
    if not todo:
        print(f"e2e: no model of --models {a.models} has a task of --task {a.task}", file=sys.stderr)
        return 2
    if len(todo) > 1 and not a.dry_run:
        # Each (model, task) in a process of its own, as a user runs one: a model measured after others in
        # one process inherits their allocator pool and caches (seen: eager ResNet-50 at 7.18 ms after BERT
        # and GPT-2 in one process, 5.35 ms with the same timer in a fresh process on the same machine,
        # docs/decisions.md#d31). The calls add their pairs to one report (``merge``).
        argv = sys.argv[1:] if argv is None else argv
        drop = ("--models", "--task")
        rest = [x for i, x in enumerate(argv) if x not in drop and not x.startswith(tuple(d + "=" for d in drop))
                and (i == 0 or argv[i - 1] not in drop)]
        for m, t in todo:
            rc = subprocess.run([sys.executable, __file__, *rest, "--models", m, "--task", t]).returncode
            if rc:
                return rc
        return 0
    os.environ["ALCOP_DB"] = os.path.join(tempfile.mkdtemp(prefix="alcop_e2e_"), "tuning.sqlite")
    os.environ.pop("ALCOP_AUTOTUNE", None)
    import triton

    import alcop_triton

    device = "cpu" if a.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("e2e: no CUDA device (use --dry-run on CPU)", file=sys.stderr)
        return 2
    reps, warmup = (2, 1) if a.dry_run else (a.reps, a.warmup)
    meta = {"device": torch.cuda.get_device_name() if device == "cuda"
            else f"CPU ({platform.machine()}), interpreter, tiny models: not a measurement",
            "torch": torch.__version__, "triton": triton.__version__, "alcop": alcop_triton.__version__,
            "cuda": torch.version.cuda if device == "cuda" else None,
            "date": _dt.date.today().isoformat(), "reps": reps, "warmup": warmup,
            "timer": TIMER if device == "cuda" else "wall clock around one pass (dry run)"}
    results = [run_model(m, device, modes[t], reps, warmup, a.dry_run, task=t, profile=a.profile) for m, t in todo]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = merge(out / "e2e.json", meta, results)
    (out / "e2e.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (out / "e2e.md").write_text(markdown(meta, results))
    print((out / "e2e.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Measure the shipped config tables: per workload a small model-ranked candidate set, timed on this GPU.

    python benchmarks/build_table.py OUT_DIR [--dtypes float16,bfloat16] [--sets suite,e2e,...] \
        [--top-k 8] [--budget-s 540]
    python benchmarks/build_table.py OUT_DIR --install     # no GPU: OUT_DIR's tables into alcop_triton/data/

Workloads are keyed as the drop-ins and patch mode key their calls (``kernels.matmul.workload_of``,
``kernels.conv.workload_of``: op, shape, dtype and operand layout), so dispatch finds them. ``--sets``
(comma-separated; measured in the order given, every set in the first dtype before the next dtype):

* ``suite``: the ALCOP suite's dense and bmm shapes (``tests/data/alcop_suite.json``, B stored N x K);
* ``e2e``: what ``benchmarks/e2e.py`` runs under patch mode: the BERT-base encoder at 16 x 512
  tokens and GPT-2 small at 8 x 1024 (their linears, LM head, and attention's two products, which
  ``torch.matmul`` on the permuted heads runs as ``nn`` bmm), and ResNet-50 at batch 64, 224x224,
  channels_last (every distinct convolution, 1x1 ones included, as ``conv2d``, and the classifier), and
  the Llama-7B-sized block at 2 x 2048 (its projections, SwiGLU and attention's two products);
* ``conv2d``, ``conv3d``: the ALCOP suite's convolution layers, channels-last (as ``benchmarks/suite.py``);
* ``resnet50``: ResNet-50's convolutions and classifier at batch 32 and 1;
* ``models``: ``benchmarks/suite.py``'s set of LLM and vision GEMMs (``benchmarks/workloads/models.json``);
* ``bert``, ``gpt2``, ``llama``, ``decode``, ``vit``, ``odd``: the GEMMs of BERT-base/large at 8 x 512,
  GPT-2 small at 8 x 1024 and decode, Llama-7B/70B (prefill and decode, M = 1, 8, 16, 64),
  Llama-3-8B-sized decode, ViT-B/L at batch 32, and odd sizes;
* ``train``: backward products ("nn" and "tn" layouts) of BERT-base / GPT-2 linears, of the Llama
  block's linears at 4,096 rows (e2e.py's training step) and of the conv weight gradients that run as
  GEMMs over im2col rows;
* ``conv_grad``: the input and weight gradients of e2e.py's ResNet-50 convolutions at batch 64
  (``records.CONV_GRAD_OPS``): alcop's (``ops.conv.conv_grads``, what a backward through alcop's
  convolution runs, one gradient at a time) and torch's (``aten.convolution_backward``, cuDNN's), each
  checked against float32 and timed with the tuner's timer. A gradient has no config to tune: its record
  holds ``GRADIENT_CONFIG`` and its time, and patch mode routes a convolution that trains by them.

Any shape listed in ``benchmarks/workloads/heldout.json`` is left out, in every dtype and layout, so
the held-out evaluation stays unseen. A GEMM whose operand rows 16-byte loads cannot read is measured
as the drop-ins run it (``kernels.matmul.aligned_workload``: K zero-padded, operands K-contiguous), and
so is a channels-last 1x1 stride-1 convolution: as the GEMM it runs (``kernels.conv.gemm_workload``).

Candidates per workload: the analytical model's ``--top-k`` over its shortlist (split-K included), the
model's best config of every split factor it offers, and what dispatch picks today from the
measured neighbours; for a single GEMM on wgmma, the warp-specialized kernel's configs (``--candidates ws``:
only those); for a GEMM with B stored N x K on wgmma, each 8-warp tile also with 4 warps (Triton's
two-warpgroup tiles run such GEMMs slowly, docs/decisions.md#d32); each also with the other copy
mechanism (pointer or TMA) where both apply. They are compiled first in worker processes, then each is checked against torch's
call in higher precision (output poisoned with NaN, normwise relative error <= 1e-2 against products in
float64, convolutions in float32 with TF32 off) and timed with the tuner's timer (``autotune.measure.time_gpu``:
CUDA graphs over rotating input copies, so L2 is cold; eager ``do_bench`` above ``SMALL_KERNEL_MS``).
torch (``torch.matmul``, ``F.conv2d`` / ``F.conv3d`` with torch's default cuDNN settings) is timed the
same way on the same inputs, before the candidates and after them, the faster of the two recorded with
``"impl": "torch"`` (``TORCH_TIMINGS_AROUND_CANDIDATES``): the shipped table then holds
torch's time beside alcop's, and patch mode leaves a workload to torch where torch's is smaller.

Output: ``OUT_DIR/default_<gpu>.jsonl`` (the ``alcop_triton/data/default_*.jsonl`` record format,
device, versions, date and timer in every line), and ``OUT_DIR/build_table.{json,md}`` (best alcop
against torch per workload). Resumable: a rerun skips what the file already holds, so calls of at
most ``--budget-s`` seconds add up to the whole table; the most valuable workloads come first, so a
partial table is already useful.

``--install`` (no GPU needed) merges ``OUT_DIR/default_*.jsonl`` into the shipped
``alcop_triton/data/default_*.jsonl`` of the same name: measurements only (every line a valid GPU
measurement naming its device, versions and date, and its timer where it has a time; torch lines
kept, they become the records' ``torch_ms``), nothing held out; the new file's workloads replace the
shipped lines of the same workload, the other shipped lines stay if they meet the same rule.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from alcop_triton.records import CONV_GRAD_OPS, GRADIENT_CONFIG, GRADIENTS, KernelConfig, Workload, geomean  # noqa: E402

Shape = tuple[str, tuple[int, ...], str]
"""(op, shape, layout) of one workload, dtype aside."""

DECODE_M = (1, 8, 16, 64)
PREFILL_TOKENS = 2048


def _linear_set(tokens: Iterable[int], nk: Iterable[tuple[int, int]]) -> list[Shape]:
    """Linear layers on ``tokens`` rows: weights stored N x K, as nn.Linear keeps them (layout "nt")."""
    return [("matmul", (m, n, k), "nt") for m in tokens for n, k in nk]


def _linear_backward_set(rows: int, nk: Iterable[tuple[int, int]]) -> list[Shape]:
    """The two products of a linear layer's backward on ``rows`` rows (``autograd``'s formulas, weight N x K):
    dX = dY W, layout "nn", and dW = dY^T X, layout "tn" (dY^T a transposed view)."""
    return [s for n, k in nk for s in (("matmul", (rows, k, n), "nn"), ("matmul", (n, k, rows), "tn"))]


def _conv_out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def conv2d_layer(n: int, size: int, ci: int, co: int, k: int, stride: int, pad: int) -> Shape:
    """A square conv2d on a channels-last input as the conv drop-in keys it (``kernels.conv.workload_of``):
    (N, H, W, CI, CO, KH, KW, stride, pad, dilation 1, 1 group), layout "nhwc"; a 1x1 convolution too."""
    return ("conv2d", (n, size, size, ci, co, k, k, stride, pad, 1, 1), "nhwc")


def transformer_layers(batch: int, seq: int, d: int, heads: int, ffn: int, vocab: int = 0) -> list[Shape]:
    """The products of one ``benchmarks/e2e.py`` transformer layer (and its LM head) under patch mode.

    Linears run on batch x seq rows. Attention's scores and P V are ``torch.matmul`` on the heads
    permuted out of the fused QKV output: the kernel reads them in place with both batch dims (batch,
    heads), keyed as one batch of batch x heads: the scores Q K^T as "nt" (K^T a transposed view), P V
    as "nn". (Patch mode never sends these to torch on the table's torch time: torch's bmm was timed
    on contiguous operands, while torch.matmul copies these first.)"""
    rows, dh, bh = batch * seq, d // heads, batch * heads
    out: list[Shape] = [("matmul", (rows, 3 * d, d), "nt"), ("bmm", (bh, seq, seq, dh), "nt"),
                        ("bmm", (bh, seq, dh, seq), "nn"), ("matmul", (rows, d, d), "nt"),
                        ("matmul", (rows, ffn, d), "nt"), ("matmul", (rows, d, ffn), "nt")]
    if vocab:
        out.append(("matmul", (rows, vocab, d), "nt"))
    return out


def llama_layers(batch: int, seq: int, d: int, heads: int, ffn: int) -> list[Shape]:
    """The products of one ``benchmarks/e2e.py`` Llama decoder layer under patch mode: the q, k, v and o
    projections (d x d, no bias), SwiGLU's gate and up (ffn x d) and down (d x ffn) on batch x seq rows,
    and attention's scores and P V as in ``transformer_layers``."""
    rows, dh, bh = batch * seq, d // heads, batch * heads
    return [("matmul", (rows, d, d), "nt"), ("matmul", (rows, ffn, d), "nt"), ("matmul", (rows, d, ffn), "nt"),
            ("bmm", (bh, seq, seq, dh), "nt"), ("bmm", (bh, seq, dh, seq), "nn")]


def resnet50_layers(batch: int, size: int = 224, base: int = 64, blocks: tuple[int, ...] = (3, 4, 6, 3),
                    classes: int = 1000) -> list[Shape]:
    """Every distinct convolution of torchvision's resnet50 (v1.5: stride on the 3x3; ``e2e.ResNet50``)
    on a channels-last batch, in network order (7x7 stem, each stage's 1x1 / 3x3 / 1x1 and its strided
    1x1 downsample), then the classifier."""
    out = [conv2d_layer(batch, size, 3, base, 7, 2, 3)]
    s, cin = _conv_out(_conv_out(size, 7, 2, 3), 3, 2, 1), base  # the stem's stride and its 3x3/2 max-pool
    for i, n in enumerate(blocks):
        width = base * 2 ** i
        cout = 4 * width
        for j in range(n):
            stride = 2 if j == 0 and i > 0 else 1
            so = _conv_out(s, 3, stride, 1)
            out += [conv2d_layer(batch, s, cin, width, 1, 1, 0), conv2d_layer(batch, s, width, width, 3, stride, 1),
                    conv2d_layer(batch, so, width, cout, 1, 1, 0)]
            if stride != 1 or cin != cout:
                out.append(conv2d_layer(batch, s, cin, cout, 1, stride, 0))
            s, cin = so, cout
    out.append(("matmul", (batch, classes, cin), "nt"))
    return list(dict.fromkeys(out))


# benchmarks/e2e.py's models and inputs (its module docstring).
E2E_BERT = dict(batch=16, seq=512, d=768, heads=12, ffn=3072)
E2E_GPT2 = dict(batch=8, seq=1024, d=768, heads=12, ffn=3072, vocab=50257)
E2E_RESNET_BATCH = 64
E2E_LLAMA = dict(batch=2, seq=2048, d=4096, heads=32, ffn=11008)

# (N, K) of each model's linear layers.
_BERT_BASE = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]
_BERT_LARGE = [(3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096)]
_LLAMA7B = [(12288, 4096), (4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096)]
_LLAMA70B = [(10240, 8192), (8192, 8192), (28672, 8192), (8192, 28672)]

WORKLOAD_SETS: dict[str, list[Shape]] = {
    # What benchmarks/e2e.py runs under patch mode.
    "e2e": transformer_layers(**E2E_BERT) + transformer_layers(**E2E_GPT2) + resnet50_layers(E2E_RESNET_BATCH)
    + llama_layers(**E2E_LLAMA),
    # ResNet-50 at the other batch sizes.
    "resnet50": resnet50_layers(32) + resnet50_layers(1),
    # BERT-base/large at batch 8 x 512 tokens, their attention bmm (batch x heads, seq, seq, head dim).
    "bert": _linear_set([4096], _BERT_BASE + _BERT_LARGE)
    + [("bmm", (96, 512, 512, 64), "nt"), ("bmm", (96, 512, 64, 512), "nt"), ("bmm", (128, 512, 512, 64), "nt")],
    # GPT-2 small at batch 8 x 1024 tokens, its LM head, and decode at batch 8.
    "gpt2": _linear_set([8192, 8], _BERT_BASE) + _linear_set([1024, 8], [(50257, 768)])
    + [("bmm", (96, 1024, 1024, 64), "nt"), ("bmm", (96, 1024, 64, 1024), "nt")],
    # Llama-7B and 70B: prefill of 2048 tokens, decode at batch M; attention with head dim 128.
    "llama": _linear_set((PREFILL_TOKENS,) + DECODE_M, _LLAMA7B + _LLAMA70B)
    + [("bmm", (32, 2048, 2048, 128), "nt"), ("bmm", (32, 2048, 128, 2048), "nt"),
       ("bmm", (64, 2048, 2048, 128), "nt")],
    # Decode GEMMs of 7B-8B models (MLP widths 11008 and 14336).
    "decode": [("matmul", (m, n, k), "nt") for m in DECODE_M for n in (4096, 11008, 14336)
               for k in (4096, 11008, 14336)],
    # ViT-B/16 and ViT-L/16 at batch 32 (197 tokens each).
    "vit": _linear_set([32 * 197], _BERT_BASE + _BERT_LARGE),
    # Odd sizes (no dim a multiple of 8): measured as the drop-ins run them, K padded (aligned_workload).
    "odd": [("matmul", s, "nt") for s in [(333, 777, 1111), (999, 999, 999), (1531, 1531, 1531), (2049, 2049, 2049),
                                          (4095, 4095, 4095), (511, 3001, 767), (3007, 1003, 509), (259, 5003, 2051)]]
    + [("bmm", (12, 511, 511, 65), "nt"), ("bmm", (7, 1001, 999, 257), "nt")],
    # Training: the backward products of BERT-base's / GPT-2's linears on e2e.py's 8,192 rows and of the
    # LM head, of e2e.py's Llama block's linears on its 4,096 rows, and the weight gradients that run as a
    # GEMM over im2col rows ("tn": CO, K * C, N * O) of the suite's convolutions with 7x7 outputs at batch 64.
    "train": _linear_backward_set(8192, _BERT_BASE + [(50257, 768)])
    + _linear_backward_set(E2E_LLAMA["batch"] * E2E_LLAMA["seq"], [(4096, 4096), (11008, 4096), (4096, 11008)])
    + [("matmul", (512, 4608, 3136), "tn"), ("matmul", (512, 2304, 3136), "tn"), ("matmul", (512, 4608, 1024), "tn")],
}
# The gradients of e2e.py's ResNet-50 convolutions (its training step), measured for patch mode's routing.
WORKLOAD_SETS["conv_grad"] = [(f"{op}_{g}_grad", shape, layout)
                              for op, shape, layout in resnet50_layers(E2E_RESNET_BATCH) if op == "conv2d"
                              for g in GRADIENTS]
SUITE_SETS = ("suite", "conv2d", "conv3d")
OPS = {"matmul", "bmm", "conv2d", "conv3d", "conv2d_input_grad", "conv2d_weight_grad"}
"""The ops the sets hold (``--ops`` narrows a run to some of them)."""
"""Sets read from the ALCOP suite file."""
MODELS = ROOT / "benchmarks" / "workloads" / "models.json"
"""``benchmarks/suite.py``'s ``models`` set (each workload with its layout)."""
SETS: tuple[str, ...] = ("suite", "e2e", "conv2d", "conv3d", "resnet50", "models", "bert", "gpt2", "llama", "decode",
                         "vit", "odd", "train", "conv_grad")
"""Every set, most valuable first (the default order of ``--sets``)."""


def suite_set(name: str, suite: dict[str, Any]) -> list[Shape]:
    """A set of the ALCOP suite: its dense and bmm shapes (B stored N x K), or its channels-last conv layers
    (the suite's (..., stride, pad) with dilation 1 and one group appended, as the conv drop-in keys them)."""
    if name == "suite":
        return ([("matmul", tuple(x), "nt") for x in suite["dense"]["shapes_MNK"]]
                + [("bmm", tuple(x), "nt") for x in suite["bmm"]["shapes_BMNK"]])
    return [(name, tuple(x) + (1, 1), "nhwc") for x in suite[name]["shapes"]]


def _heldout_keys(path: Path) -> set[tuple[str, tuple[int, ...]]]:
    """(op, GEMM dims) of every shape in the held-out file, whatever its dtype or layout; empty if absent."""
    if not path.exists():
        return set()
    out: set[tuple[str, tuple[int, ...]]] = set()

    def visit(x: Any) -> None:
        if isinstance(x, dict):
            if "op" in x and "shape" in x:
                try:
                    w = Workload(x["op"], tuple(x["shape"]))
                except (ValueError, TypeError):
                    return
                out.add((w.op, w.gemm_dims()))
                return
            for v in x.values():
                visit(v)
        elif isinstance(x, list):
            for v in x:
                visit(v)
    visit(json.loads(path.read_text()))
    return out


def workload_list(sets: Iterable[str], dtypes: Iterable[str], suite_path: Path, heldout_path: Path,
                  ops: Iterable[str] | None = None) -> tuple[list[tuple[Workload, Workload]], list[Workload]]:
    """``([(as called, as measured)], left out as held out)``, de-duplicated; every set in the first
    dtype, in the order given, then the next dtype; only the ``ops`` named, if any (to measure one
    kernel family again after it changed)."""
    from alcop_triton.kernels.conv import gemm_workload
    from alcop_triton.kernels.matmul import aligned_workload
    shapes: list[Shape] = []
    for s in sets:
        if s in SUITE_SETS:
            shapes += suite_set(s, json.loads(suite_path.read_text()))
        elif s == "models":
            shapes += [(x["op"], tuple(x["shape"]), x["layout"]) for x in json.loads(MODELS.read_text())["workloads"]]
        elif s in WORKLOAD_SETS:
            shapes += WORKLOAD_SETS[s]
        else:
            raise ValueError(f"--sets: {s!r} is not one of {SETS}")
    if ops is not None:
        wanted = set(ops)
        if not wanted <= OPS:
            raise ValueError(f"--ops: {sorted(wanted - OPS)} not among {sorted(OPS)}")
        shapes = [x for x in shapes if x[0] in wanted]
    held = _heldout_keys(heldout_path)
    out: list[tuple[Workload, Workload]] = []
    skipped: list[Workload] = []
    seen: set[Workload] = set()
    for dtype in dtypes:
        for op, shape, layout in shapes:
            w = Workload(op, shape, dtype, layout)
            if w in seen:
                continue
            seen.add(w)
            if (w.op, w.gemm_dims()) in held:
                skipped.append(w)
                continue
            out.append((w, aligned_workload(gemm_workload(w))))
    return out, skipped


def candidates(w: Workload, spec: Any, top_k: int, known: list[Any]) -> list[KernelConfig]:
    """The model's top-k, its best config per split factor, and dispatch's transfer pick, for an nt GEMM on
    wgmma each 8-warp tile also with 4 warps, each also with the other copy mechanism where the op and the
    GPU offer both: which of pointer and TMA copies wins for a tile is measured, not left to the model's
    coarse ranking of the two; a convolution the box kernel runs also with the box kernel's tiles; where the
    tiles leave a short last wave, each also as a wave tail. No duplicates."""
    from alcop_triton.autotune.dispatch import model_shortlist, transfer
    from alcop_triton.kernels.conv_window import window_configs
    from alcop_triton.autotune.space import Knobs, shape_reason
    from alcop_triton.records import tail_capable
    ranked = model_shortlist(w, spec)
    out = list(ranked[:top_k])
    for split in sorted({c.split_k for c in ranked}):
        best = next(c for c in ranked if c.split_k == split)
        if best not in out:
            out.append(best)
    picked = transfer(w, known, spec)
    if picked is not None and picked[0] not in out:
        out.append(picked[0])
    if w.op in ("matmul", "bmm") and w.layout[1:2] == "t" and getattr(spec, "mma", "") == "wgmma":
        # B stored N x K: Triton runs two-warpgroup tiles 1.17-1.38x slower than with B stored K x N, one
        # warpgroup alike (docs/decisions.md#d32), which the model does not know: each 8-warp tile is
        # also measured with 4 warps where its accumulator fits them (128 fp32 registers per thread).
        for c in list(out):
            if c.async_copy == "ws":  # its warps are warpgroup roles (HopperConfig), not a tile's spread
                continue
            four = c.replace(num_warps=4)
            if c.num_warps == 8 and c.block_m * c.block_n <= 128 * 128 and four not in out \
                    and shape_reason(w, four, spec) is None:
                out.append(four)
    for c in list(out):
        # the warp-specialized kernel's configs are ws_candidates' (its knobs are not the other mechanisms')
        for mech in (m for m in Knobs().async_copy if m != "ws" and c.async_copy != "ws"):
            twin = c.replace(async_copy=mech)
            if twin not in out and shape_reason(w, twin, spec) is None:
                out.append(twin)
    # A convolution the box kernel runs: also its own tiles (the model does not rank boxes)
    out += [c for c in window_configs(w) if c not in out and shape_reason(w, c, spec) is None]
    # Where the tiles leave a short last wave, each config also as a wave tail, of small tiles and split
    # along K (the space's rules say where each can run): the model's estimate of the overlap is new, so
    # it is measured, not ranked.
    for c in list(out):
        if tail_capable(c):
            for twin in (c.replace(wave_tail=True), c.replace(wave_tail=True, tail_split=True)):
                if twin not in out and shape_reason(w, twin, spec) is None:
                    out.append(twin)
    return out + [c for c in ws_candidates(w, spec) if c not in out]


def ws_candidates(w: Workload, spec: Any) -> list[KernelConfig]:
    """A single GEMM on wgmma: the warp-specialized kernel's configs (``kernels.matmul_ws.ws_configs``) as its
    planner runs them on ``w`` (``dispatch.ws_seeds``), so a record names what ran. The model does not rank
    them (it was fitted without them), so they are measured (``docs/decisions.md#d42``)."""
    from alcop_triton.autotune.dispatch import ws_seeds
    from alcop_triton.autotune.space import shape_reason
    return [c for c in ws_seeds(w, spec) if shape_reason(w, c, spec) is None]


def _pair_key(w: Workload, config: KernelConfig | None) -> str:
    return w.key() + "|" + (json.dumps(config.to_dict(), sort_keys=True) if config is not None else "torch")


def done_keys(path: Path) -> set[str]:
    """(workload, config) pairs already in the output file; torch timings under config 'torch'."""
    keys: set[str] = set()
    if not path.exists():
        return keys
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
            w = Workload.from_dict(d["workload"])
            c = KernelConfig.from_dict(d["config"]) if d.get("config") is not None else None
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a killed run: measured again
        keys.add(_pair_key(w, c))
    return keys


def pending(plan: list[tuple[Workload, Workload]], done: set[str],
            new_candidates: bool = False) -> list[tuple[Workload, Workload]]:
    """Workloads not complete in the output file (complete: torch timed on both shapes, written last);
    with ``new_candidates`` every workload, for the candidates the file lacks (after the space grew)."""
    if new_candidates:
        return list(plan)
    return [(called, w) for called, w in plan if _pair_key(called, None) not in done or _pair_key(w, None) not in done]


def record(w: Workload, config: KernelConfig | None, time_ms: float | None, error: str | None, meta: dict[str, Any],
           timer: str = "", message: str = "", called_as: Workload | None = None) -> dict[str, Any]:
    """One output line: the default-table format (impl 'alcop' with a config, or 'torch' without)."""
    d: dict[str, Any] = {"workload": w.to_dict(), "config": config.to_dict() if config is not None else None,
                         "impl": "alcop" if config is not None else "torch", "time_ms": time_ms, "error": error}
    d |= meta
    if timer:
        d["timer"] = timer
    if message:
        d["message"] = message[:2000]
    if called_as is not None and called_as != w:
        d["called_as"] = called_as.to_dict()  # the user's shape; ``workload`` is what the kernel ran (K padded)
    return d


def summarize(path: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Best alcop time against torch's per measured workload, from everything in the file."""
    best: dict[str, float] = {}
    torch_ms: dict[str, float] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        if d.get("time_ms") is None:
            continue
        key = Workload.from_dict(d["workload"]).key()
        slot = torch_ms if d.get("impl") == "torch" else best
        slot[key] = min(slot.get(key, math.inf), float(d["time_ms"]))
    rows: list[dict[str, Any]] = [{"workload": k, "alcop_ms": best[k], "torch_ms": torch_ms[k],
                                   "speedup": torch_ms[k] / best[k]} for k in best if k in torch_ms]
    return {"meta": meta, "rows": rows, "geomean_speedup": geomean([r["speedup"] for r in rows]),
            "below_0.9": sum(r["speedup"] < 0.9 for r in rows)}


def write_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    (out_dir / "build_table.json").write_text(json.dumps(summary, indent=1) + "\n")
    m = summary["meta"]
    lines = [f"# Shipped-table measurements: {m.get('device', '?')}", "",
             f"triton {m.get('triton')}, torch {m.get('torch')}, alcop {m.get('alcop')}, {m.get('date')}; "
             "timer: autotune.measure.time_gpu (CUDA graphs over rotating input copies below its threshold, "
             "do_bench above), both for alcop's best candidate and for torch (torch.matmul, F.conv2d, F.conv3d; "
             "a gradient: aten.convolution_backward).",
             "", f"{len(summary['rows'])} workloads, geomean speedup over torch {summary['geomean_speedup']:.3f}x, "
             f"{summary['below_0.9']} below 0.9x (patch mode leaves those below 1x to torch).", "",
             "| workload | alcop ms | torch ms | speedup |", "|---|---|---|---|"]
    for r in sorted(summary["rows"], key=lambda r: r["speedup"]):
        lines.append(f"| {r['workload']} | {r['alcop_ms']:.4f} | {r['torch_ms']:.4f} | {r['speedup']:.2f}x |")
    (out_dir / "build_table.md").write_text("\n".join(lines) + "\n")


def torch_call(w: Workload) -> Callable[..., Any]:
    """What torch runs on a runner's inputs of ``w`` ((a, b), or (x, weight) of a convolution)."""
    import torch
    import torch.nn.functional as F

    if w.op in ("matmul", "linear", "bmm"):
        return torch.matmul
    p = w.conv_params()
    conv = {"conv1d": F.conv1d, "conv2d": F.conv2d, "conv3d": F.conv3d}[w.op]
    return lambda x, weight: conv(x, weight, None, p["stride"], p["pad"], p["dilation"], p["groups"])


def reference(w: Workload, inputs: tuple[Any, ...]) -> Any:
    """torch's call (``torch_call``) on the inputs in higher precision, as float32: products in float64,
    convolutions in float32 with cuDNN's TF32 off. Not rounded to the workload's dtype: a bf16 output
    is judged against the exact result, not against another rounding of it."""
    import torch

    from alcop_triton.settings import tf32

    dt = torch.float64 if w.op in ("matmul", "linear", "bmm") else torch.float32
    with tf32(False):
        return torch_call(w)(*(t.to(dt) for t in inputs)).float()


class _Preset:
    """``runner`` with the inputs of seed 0 already made (random inputs of the largest convolutions take
    seconds to draw); the timer's other seeds are drawn fresh, everything else is the runner's."""

    def __init__(self, runner: Any, inputs: tuple[Any, ...]) -> None:
        self._r, self._x = runner, inputs

    def inputs(self, seed: int) -> tuple[Any, ...]:
        return self._x if seed == 0 else self._r.inputs(seed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._r, name)


class _TorchRunner:
    """torch's call on a workload's inputs (``torch_call``), with the runner interface ``measure.time_gpu`` times."""

    def __init__(self, w: Workload) -> None:
        from alcop_triton.kernels.runner import make_runner
        self._r = make_runner(w, KernelConfig(), "cuda")
        self._fn = torch_call(w)
        self.workload = w

    def inputs(self, seed: int) -> tuple[Any, ...]:
        return self._r.inputs(seed)

    def run(self, inputs: tuple[Any, ...]) -> Any:
        return self._fn(*inputs)


TORCH_TIMINGS_AROUND_CANDIDATES = True
"""torch's time on a workload is the faster of two timings, one before its candidates and one after.
Alcop's best is the fastest of up to eight candidates each timed once, so a single torch timing caught on a
slow moment biases the records toward alcop, and patch mode routes by them: a table run recorded fp16
4096x11008x4096 nt's torch at 0.616 ms, its bf16 twin's at 0.562, and in the Llama block cuBLAS then ran it
faster than alcop's recorded best (docs/compile.md, status)."""


def measure_workload(called: Workload, w: Workload, configs: list[KernelConfig], done: set[str], meta: dict[str, Any],
                     write: Any) -> None:
    """Time every not yet recorded candidate on ``w``, then torch (GPU only), torch also before the candidates
    (``TORCH_TIMINGS_AROUND_CANDIDATES``). torch's record comes last: it marks the workload complete for a
    resumed run."""
    import torch

    from alcop_triton.autotune.measure import time_gpu
    from alcop_triton.kernels.runner import make_runner
    todo = [c for c in configs if _pair_key(w, c) not in done]
    x: tuple[Any, ...] = ()
    # torch on the padded shape the kernel ran, and on the user's
    twins = [tw for tw in dict.fromkeys((w, called)) if _pair_key(tw, None) not in done]

    def torch_time(tw: Workload) -> tuple[float, str]:
        runner: Any = _TorchRunner(tw)
        return time_gpu(_Preset(runner, x) if x and tw == w else runner, 0)
    if todo:
        x = make_runner(w, todo[0], "cuda").inputs(0)
        ref = reference(w, x)
    # with no candidate left (a pass that timed them, torch's lines removed), the two timings are back to back
    before = {tw: torch_time(tw) for tw in twins} if TORCH_TIMINGS_AROUND_CANDIDATES else {}
    for c in todo:
        try:
            r = make_runner(w, c, "cuda")
            launch, out = r.bind(x)
            out.fill_(float("nan"))
            if launch is not None:
                launch()
            torch.cuda.synchronize()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            if not err <= 1e-2:
                write(record(w, c, None, "wrong_answer", meta, message=f"relative error {err:.3g}", called_as=called))
                continue
            ms, timer = time_gpu(_Preset(r, x), 0)
            write(record(w, c, ms, None, meta, timer, called_as=called))
        except Exception as e:  # recorded, never dropped: a failed config is never dispatched
            msg = f"{type(e).__name__}: {str(e)[:300]}"
            kind = "out_of_resources" if "out of resource" in msg.lower() or "OutOfResources" in msg else \
                "compile" if "Compil" in msg or "PTXAS" in msg.upper() else "runtime"
            write(record(w, c, None, kind, meta, message=msg, called_as=called))
    for tw in twins:
        ms, timer = min(torch_time(tw), before.get(tw, (math.inf, "")))
        write(record(tw, None, ms, None, meta, timer))


class _GradientRunner:
    """One gradient of a convolution workload (``records.CONV_GRAD_OPS``) by alcop or torch, with the runner
    interface ``measure.time_gpu`` times: inputs (x, weight, dy) in the workload's layout, as a model's
    backward gets them (a channels-last network keeps its weights and gradients channels last)."""

    def __init__(self, w: Workload, impl: str, device: str = "cuda") -> None:
        self.workload, self.impl, self.device = w, impl, device
        p = w.conv_params()
        self.nd = w.spatial_rank
        pick = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}[self.nd]
        self.spatial = tuple(p[k] for k in pick)
        self.kernel = tuple(p["k" + k] for k in pick)
        self.out = tuple(p["o" + k] for k in pick)
        self.p = p

    def inputs(self, seed: int) -> tuple[Any, ...]:
        import torch
        p, g = self.p, torch.Generator(device="cpu").manual_seed(seed)
        dt = getattr(torch, self.workload.dtype)
        fan_in = p["ci"] // p["groups"] * math.prod(self.kernel)
        fmt = {2: torch.channels_last, 3: torch.channels_last_3d}.get(self.nd, torch.contiguous_format)
        fmt = fmt if self.workload.layout == "nhwc" else torch.contiguous_format

        def make(*shape: int, scale: float = 1.0) -> Any:
            t = (torch.randn(shape, generator=g) * scale).to(dt).to(self.device)
            return t.contiguous(memory_format=fmt) if t.dim() > 3 else t
        return (make(p["n"], p["ci"], *self.spatial), make(p["co"], p["ci"] // p["groups"], *self.kernel,
                                                           scale=fan_in ** -0.5), make(p["n"], p["co"], *self.out))

    def run(self, inputs: tuple[Any, ...], impl: str | None = None, dtype: Any = None) -> Any:
        from alcop_triton.ops.conv import conv_grads, torch_conv_grads
        p, nd = self.p, self.nd
        x, weight, dy = inputs if dtype is None else (t.to(dtype) for t in inputs)
        which = self.workload.gradient
        args = ((p["stride"],) * nd, (p["pad"],) * nd, (p["dilation"],) * nd, p["groups"], which == "input",
                which == "weight")
        if (impl or self.impl) == "torch":
            dx, dw = torch_conv_grads(x, weight, dy, *args)
        else:
            dx, dw = conv_grads(x, weight, dy, args[0], args[1], args[2], args[3], args[4], args[5])
        return dx if which == "input" else dw

    def reference(self, inputs: tuple[Any, ...]) -> Any:
        """torch's gradient in float32 with cuDNN's TF32 off."""
        import torch

        from alcop_triton.settings import tf32
        with tf32(False):
            return self.run(inputs, "torch", torch.float32)


def measure_gradient(w: Workload, done: set[str], meta: dict[str, Any], write: Any, device: str = "cuda",
                     timer: Callable[[Any, int], tuple[float, str]] | None = None) -> None:
    """Time alcop's and torch's ``w`` (a convolution's gradient) unless the file holds them: alcop's checked
    against float32 first (normwise relative error <= 1e-2), torch's the faster of a timing before and one
    after alcop's (``TORCH_TIMINGS_AROUND_CANDIDATES``), written last (it marks the workload complete).
    ``timer``: ``measure.time_gpu`` unless given (tests time on CPU)."""
    if timer is None:
        from alcop_triton.autotune.measure import time_gpu as timer
    assert timer is not None
    mine, theirs = _GradientRunner(w, "alcop", device), _GradientRunner(w, "torch", device)
    want_torch = _pair_key(w, None) not in done
    before = timer(theirs, 0) if want_torch else (math.inf, "")
    if _pair_key(w, GRADIENT_CONFIG) not in done:
        try:
            x = mine.inputs(0)
            ref = mine.reference(x)
            err = ((mine.run(x).float() - ref).norm() / ref.norm()).item()
            if not err <= 1e-2:
                write(record(w, GRADIENT_CONFIG, None, "wrong_answer", meta, message=f"relative error {err:.3g}"))
            else:
                ms, how = timer(mine, 0)
                write(record(w, GRADIENT_CONFIG, ms, None, meta, how))
        except Exception as e:  # recorded, never dropped: a gradient that fails is never routed to alcop
            write(record(w, GRADIENT_CONFIG, None, "runtime", meta, message=f"{type(e).__name__}: {str(e)[:300]}"))
    if want_torch:
        ms, how = min(timer(theirs, 0), before)
        write(record(w, None, ms, None, meta, how))


def run_chunks(todo: list[Any], chunk: int, budget_s: float, t_start: float,
               prepare: Callable[[list[Any]], list[Any]], measure: Callable[[Any], None],
               clock: Callable[[], float] = time.time) -> int:
    """``measure`` every item of ``prepare(part)`` for consecutive parts of ``chunk`` items of ``todo``.

    Starts no part (its preparation and a workload) and no workload that would end past ``budget_s``
    seconds after ``t_start`` if it took as long as the slowest so far; returns how many were measured."""
    slowest = {"prepare": 0.0, "measure": 0.0}
    measured = 0

    def over_budget(*steps: str) -> bool:
        if clock() - t_start + sum(slowest[s] for s in steps) <= budget_s:
            return False
        print(f"[table] budget of {budget_s:.0f}s reached after {clock() - t_start:.0f}s; rerun to continue",
              flush=True)
        return True

    for i in range(0, len(todo), chunk):
        if over_budget("prepare", "measure"):
            break
        t0 = clock()
        items = prepare(todo[i:i + chunk])
        slowest["prepare"] = max(slowest["prepare"], clock() - t0)
        for item in items:
            if over_budget("measure"):
                return measured
            t0 = clock()
            measure(item)
            slowest["measure"] = max(slowest["measure"], clock() - t0)
            measured += 1
        print(f"[table] {measured}/{len(todo)} workloads, {clock() - t_start:.0f}s", flush=True)
    return measured


# ----------------------------------------------------------------------------- installing a table

MEASUREMENT_FIELDS = ("gpu", "cc", "device", "triton", "torch", "alcop", "date")
"""What every shipped line names: the GPU it was measured on, the versions and the date."""


def line_problem(line: str, held: set[tuple[str, tuple[int, ...]]]) -> str | None:
    """Why a JSON line may not be shipped, or None for a GPU measurement that may: a valid alcop record
    (``database.parse_line``) or a torch timing, naming ``MEASUREMENT_FIELDS``, its timer where it has a
    time, and no held-out shape."""
    from alcop_triton.autotune.database import parse_line
    from alcop_triton.errors import DatabaseError
    try:
        rec = parse_line(line)
    except DatabaseError as exc:
        return str(exc)
    d = json.loads(line)
    if rec is None:
        t = d.get("time_ms")
        if d.get("impl") != "torch" or d.get("config") is not None:
            return f"impl={d.get('impl')!r}: only alcop records and torch timings are shipped"
        if d.get("error") is not None or isinstance(t, bool) or not isinstance(t, (int, float)) \
                or not math.isfinite(t) or t <= 0:
            return f"a torch line needs a finite time > 0 and no error, got time_ms={t!r}, error={d.get('error')!r}"
    missing = [k for k in MEASUREMENT_FIELDS if not isinstance(d.get(k), str) or not d[k]]
    if missing:
        return f"names no {', '.join(missing)}"
    if d.get("time_ms") is not None and not d.get("timer"):
        return "a time without the timer that took it"
    for key in ("workload", "called_as"):
        if key in d:
            try:
                w = Workload.from_dict(d[key])
            except (KeyError, TypeError, ValueError) as exc:
                return f"{key}: {exc}"
            if (w.op, w.gemm_dims()) in held:
                return f"{w.key()} is held out"
    return None


def _measured_on(line: str) -> tuple[Workload, str, str]:
    d = json.loads(line)
    return Workload.from_dict(d["workload"]), str(d["gpu"]), str(d["cc"])


def _shippable(path: Path, held: set[tuple[str, tuple[int, ...]]]) -> tuple[list[str], list[str]]:
    """(lines that may be shipped, reasons for the others) of a JSONL file."""
    ok: list[str] = []
    bad: list[str] = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            why = line_problem(line, held)
            if why is None:
                ok.append(line)
            else:
                bad.append(f"line {i}: {why}")
    return ok, bad


def install(out_dir: Path, data_dir: Path, heldout_path: Path) -> dict[str, dict[str, Any]]:
    """Merge every ``out_dir/default_*.jsonl`` into ``data_dir``'s file of the same name (see the module
    docstring); returns per file how many lines were installed, kept, replaced and refused, and why."""
    from alcop_triton.autotune.database import atomic_write_text
    held = _heldout_keys(heldout_path)
    report: dict[str, dict[str, Any]] = {}
    for src in sorted(out_dir.glob("default_*.jsonl")):
        dst = data_dir / src.name
        new, refused = _shippable(src, held)
        old, dropped = _shippable(dst, held) if dst.exists() else ([], [])
        measured = {_measured_on(line) for line in new}
        kept = [line for line in old if _measured_on(line) not in measured]
        lines = list(dict.fromkeys(kept + new))
        if lines:
            atomic_write_text(dst, "".join(line + "\n" for line in lines))
        report[src.name] = {"installed": len(new), "kept": len(kept), "replaced": len(old) - len(kept),
                            "refused": refused, "dropped": dropped, "lines": len(lines)}
    return report


def _print_install(report: dict[str, dict[str, Any]], data_dir: Path) -> None:
    if not report:
        print("[table] --install: no default_*.jsonl in the output directory")
    for name, r in report.items():
        print(f"[table] {data_dir / name}: {r['lines']} lines ({r['installed']} measured now, {r['kept']} kept, "
              f"{r['replaced']} replaced by new measurements)")
        for what in ("refused", "dropped"):
            if r[what]:
                why = Counter(s.split(": ", 1)[1] for s in r[what])
                print(f"[table]   {len(r[what])} {what} ({'new' if what == 'refused' else 'shipped'} lines): "
                      + "; ".join(f"{n} x {reason}" for reason, n in why.most_common(5)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, from {SETS}")
    ap.add_argument("--suite", default=str(ROOT / "tests" / "data" / "alcop_suite.json"))
    ap.add_argument("--heldout", default=str(ROOT / "benchmarks" / "workloads" / "heldout.json"))
    ap.add_argument("--ops", default=None, help=f"comma-separated, from {sorted(OPS)}: only these ops of the sets")
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="start no chunk or workload that would end past this, judged by the slowest so far")
    ap.add_argument("--chunk", type=int, default=16, help="workloads compiled together before timing")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--new-candidates", action="store_true",
                    help="also workloads the file completes: measure their candidates it lacks (nothing twice)")
    ap.add_argument("--candidates", choices=("all", "ws"), default="all",
                    help="'ws': only the warp-specialized kernel's configs (with --new-candidates: add them to a table)")
    ap.add_argument("--install", action="store_true",
                    help="no measuring: merge OUT_DIR/default_*.jsonl into the shipped tables (--data-dir)")
    ap.add_argument("--data-dir", default=str(ROOT / "alcop_triton" / "data"))
    a = ap.parse_args(argv)
    t_start = time.time()
    if a.install:
        report = install(Path(a.out_dir), Path(a.data_dir), Path(a.heldout))
        _print_install(report, Path(a.data_dir))
        return 0 if report else 1

    import torch
    import triton

    import alcop_triton
    from alcop_triton.autotune import devices
    from alcop_triton.autotune.database import read_jsonl
    from alcop_triton.autotune.dispatch import default_tables
    from alcop_triton.model.hardware import detect
    from collect_grid import precompile

    spec = detect()
    meta = {"gpu": spec.name, "device": torch.cuda.get_device_name(),
            "cc": ".".join(map(str, torch.cuda.get_device_capability())), "mma": spec.mma,
            "triton": triton.__version__, "torch": torch.__version__.split("+")[0], "alcop": alcop_triton.__version__,
            "date": datetime.date.today().isoformat(),
            "measured_on": devices.identify("cuda").to_dict()}  # the GPU itself: UUID, name, SM clock, driver
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"default_{spec.name.lower()}.jsonl"
    plan, skipped = workload_list(a.sets.split(","), a.dtypes.split(","), Path(a.suite), Path(a.heldout),
                                  a.ops.split(",") if a.ops else None)
    if skipped:
        print(f"[table] {len(skipped)} workloads left out as held out: {', '.join(w.key() for w in skipped)}")
    done = done_keys(path)
    known = default_tables() + (read_jsonl(path) if path.exists() else [])
    todo = pending(plan, done, a.new_candidates)
    print(f"[table] {len(plan)} workloads, {len(todo)} left; writing {path}", flush=True)
    with path.open("a") as f:
        def write(rec: dict[str, Any]) -> None:
            f.write(json.dumps(rec) + "\n")
            f.flush()

        def prepare(part: list[tuple[Workload, Workload]]) -> list[tuple[Workload, Workload, list[KernelConfig]]]:
            out = [(called, w, [GRADIENT_CONFIG] if w.op in CONV_GRAD_OPS else
                    ws_candidates(w, spec) if a.candidates == "ws" else candidates(w, spec, a.top_k, known))
                   for called, w in part]
            precompile([(w, c) for _, w, cands in out if w.op not in CONV_GRAD_OPS
                        for c in cands if _pair_key(w, c) not in done], a.workers)
            return out

        def measure(item: tuple[Workload, Workload, list[KernelConfig]]) -> None:
            if item[1].op in CONV_GRAD_OPS:
                measure_gradient(item[1], done, meta, write)
            else:
                measure_workload(item[0], item[1], item[2], done, meta, write)

        run_chunks(todo, a.chunk, a.budget_s, t_start, prepare, measure)
    summary = summarize(path, meta)
    write_summary(out_dir, summary)
    print(f"[table] {len(summary['rows'])} workloads measured, geomean {summary['geomean_speedup']:.3f}x torch",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

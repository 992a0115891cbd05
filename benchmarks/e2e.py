"""End to end: fp16 inference of three models, eager against alcop's patch mode and torch.compile.

    python benchmarks/e2e.py --out OUT [--models bert,gpt2,resnet50] [--no-compile] [--dry-run]

Each model runs in a process of its own (several ``--models`` start one process each); calls into the
same OUT on the same device and versions add their models to the report.

Models (random weights, built from ``torch.nn`` only, no downloads):

* ``bert``: a BERT-base encoder, 12 layers, hidden 768, 12 heads, FFN 3072, GELU, post-LayerNorm;
  16 sequences x 512 tokens;
* ``gpt2``: GPT-2 small, token and position embeddings, 12 pre-LayerNorm decoder blocks (hidden 768,
  12 heads, causal), final LayerNorm and the tied 50257-word LM head; 8 sequences x 1024 tokens;
* ``resnet50``: torchvision's ResNet-50 where torchvision is installed, otherwise the same network
  (bottleneck blocks 3-4-6-3, stride on the 3x3 convolution) from ``torch.nn``; batch 64, 224x224,
  channels_last, BatchNorm in eval mode.

Attention is written with ``torch.matmul`` and ``softmax`` (not a fused attention kernel), so patch
mode routes its batched products too.

Modes: ``eager``; ``patched`` (the eager model under ``alcop_triton.patched()``); ``compile``
(``torch.compile(model)``, default mode); ``compile_alcop`` (the compiled model called under
``patched()``: alcop's ops become nodes of the compiled graph). Timer: CUDA events around one
forward pass, the host synchronised before each (host cost included), median of ``--reps`` passes
after ``--warmup``. Compile time (the first call of a compiled mode) is recorded, not timed.
Error: max |out - eager| / max |eager| (fp16 tolerance 1e-2). Writes ``OUT/e2e.json`` and
``OUT/e2e.md``. ``--dry-run`` runs tiny versions of the models on CPU (Triton's interpreter, wall
clock, no compile modes) to test the script; it measures nothing.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import timing  # noqa: E402  (benchmarks/timing.py, beside this script)

MODES = ("eager", "patched", "compile", "compile_alcop")
TOLERANCE = 1e-2
# The modes take turns pass by pass (``run_model``'s rounds: one per timed pass): the hosts are shared,
# and a drift in their load during one mode's passes would read as that mode's speed (seen on an H100
# host: eager ResNet-50 at 5.74 and 6.94 ms in two runs a minute apart; within one probe, eager ResNet-50
# timed twice with other modes between: 8.4 and 7.8 ms medians; in one process on a drifting host,
# patched / eager ResNet-50 at 1.045x, 0.969x, 1.115x and 0.899x in turns of two and six passes, 0.982x
# and 0.980x pass by pass: docs/decisions.md#d30).
TIMER = (f"{timing.PASS} (benchmarks/timing.py), "
         "median of the timed passes after warm-up; the modes take turns pass by pass, each turn "
         "beginning with one untimed pass (switching modes is not timed as a pass of either: patch mode's "
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


def build(name: str, device: str, tiny: bool) -> tuple[nn.Module, torch.Tensor, str]:
    """The model in fp16 eval mode on ``device``, its input, and where its code comes from."""
    g = torch.Generator().manual_seed(0)
    if name == "bert":
        model: nn.Module = BertEncoder(layers=1, d=64, heads=2, ffn=128) if tiny else BertEncoder()
        x = torch.randn((2, 16, 64) if tiny else (16, 512, 768), generator=g)
        src = "torch.nn (this file)"
    elif name == "gpt2":
        model = GPT2(layers=1, d=64, heads=2, vocab=101, ctx=32) if tiny else GPT2()
        x = torch.randint(0, 101 if tiny else 50257, (2, 16) if tiny else (8, 1024), generator=g)
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
        raise ValueError(f"--models: unknown model {name!r}; known: bert, gpt2, resnet50")
    with torch.no_grad():   # random weights, scaled by fan-in so fp16 activations stay in range
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() > 1:
                p.copy_(noise / math.sqrt(p[0].numel()))
            else:   # norm scales near 1, biases near 0
                p.copy_((1.0 if pname.endswith("weight") else 0.0) + 0.1 * noise)
    model = model.to(device=device, dtype=torch.float16).eval()
    x = x.to(device)
    if x.is_floating_point():
        x = x.half()
    if name == "resnet50":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return model, x, src


def time_passes(fn: Callable[[], Any], reps: int, warmup: int, device: str) -> list[float]:
    """ms of each of ``reps`` forward passes (see TIMER) after ``warmup`` untimed ones; wall clock on CPU."""
    for _ in range(warmup):
        fn()
    if device == "cuda":
        return timing.event_times_ms({"pass": fn}, reps, warmup=0)["pass"]
    return timing.wall_times_ms(fn, reps)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    scale = ref.float().abs().max().item()
    return (out.float() - ref.float()).abs().max().item() / scale if scale else math.inf


def _mode_call(mode: str, model: nn.Module, x: torch.Tensor, patched: Callable[[], Any]) -> Callable[[], Any]:
    """One forward pass of ``model`` in ``mode``, as a call of its own (the modes are timed in turns, after
    all are built: each needs its own closure)."""
    run: Callable[[], Any] = torch.compile(model) if mode.startswith("compile") else model
    if mode not in ("patched", "compile_alcop"):
        return lambda: run(x)

    def under_patch_mode() -> Any:
        with patched():
            return run(x)
    return under_patch_mode


def run_model(name: str, device: str, modes: Sequence[str], reps: int, warmup: int, tiny: bool,
              timer: Callable[..., list[float]] = time_passes, rounds: int | None = None) -> dict[str, Any]:
    import alcop_triton as at

    model, x, src = build(name, device, tiny)
    res: dict[str, Any] = {"model": name, "source": src, "input": list(x.shape), "modes": {}}
    fns: dict[str, Callable[[], Any]] = {}
    with torch.inference_mode():
        ref = model(x)
        for mode in modes:
            r: dict[str, Any] = {}
            res["modes"][mode] = r
            try:
                torch._dynamo.reset()
                fn = _mode_call(mode, model, x, at.patched)
                t0 = time.perf_counter()
                out = fn()   # first call: compiles (compile modes), builds kernels (alcop)
                if device == "cuda":
                    torch.cuda.synchronize()
                r["first_call_s"] = time.perf_counter() - t0
                r["max_rel_err"] = rel_err(out, ref)
                fns[mode] = fn
            except Exception as exc:   # a mode that fails is a result
                r["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        # The modes take turns, a share of the passes each per round: by default one (see TIMER).
        rounds = rounds or reps
        times: dict[str, list[float]] = {mode: [] for mode in fns}
        for i in range(rounds):
            for mode, fn in fns.items():
                times[mode] += timer(fn, -(-reps // rounds), warmup if i == 0 else 1, device)
    for mode, ts in times.items():
        res["modes"][mode]["ms"] = statistics.median(ts)
    for mode, r in res["modes"].items():
        print(f"{name} {mode}: {json.dumps(r)}", flush=True)
    eager = res["modes"].get("eager", {}).get("ms")
    for mode, r in res["modes"].items():
        if "ms" in r and eager:
            r["speedup_vs_eager"] = eager / r["ms"]
            r["within_tolerance"] = r["max_rel_err"] <= TOLERANCE
    return res


def markdown(meta: dict[str, Any], results: Sequence[dict[str, Any]]) -> str:
    out = [f"# End-to-end inference ({meta['device']})", "",
           f"Produced by `benchmarks/e2e.py`; torch {meta['torch']}, Triton {meta['triton']}, alcop_triton "
           f"{meta['alcop']}; date {meta['date']}; fp16, random weights; {meta['reps']} timed passes after "
           f"{meta['warmup']} warm-up passes.", "", f"Timer: {meta['timer']}.", "",
           "Modes: eager; patched = eager under `alcop_triton.patched()`; compile = `torch.compile(model)` (default "
           "mode); compile_alcop = the compiled model called under `patched()`. Speedup = eager ms / mode ms. "
           f"Error = max |out - eager| / max |eager| (tolerance {TOLERANCE}).", "",
           "| model | input | mode | ms | speedup vs eager | max rel error | first call s |", "|---|---|---|---|---|---|---|"]
    for res in results:
        for mode, r in res["modes"].items():
            inp = "x".join(map(str, res["input"]))
            if "error" in r:
                out.append(f"| {res['model']} | {inp} | {mode} | error: {r['error']} | | | |")
                continue
            sp = f"**{r['speedup_vs_eager']:.2f}x**" if "speedup_vs_eager" in r else "-"
            flag = "" if r.get("within_tolerance", True) else " (over tolerance)"
            out.append(f"| {res['model']} | {inp} | {mode} | {r['ms']:.2f} | {sp} | {r['max_rel_err']:.2e}{flag} | "
                       f"{r['first_call_s']:.1f} |")
    out += ["", "Model code: " + "; ".join(f"{r['model']} from {r['source']}" for r in results) + "."]
    return "\n".join(out) + "\n"


def merge(path: Path, meta: dict[str, Any], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """This call's models plus the other models of an earlier call into the same directory, when
    that call ran on the same device and versions (so one model per call stays within a time limit)."""
    if not path.is_file():
        return results
    old = json.loads(path.read_text())
    same = all(old["meta"].get(k) == meta[k] for k in ("device", "torch", "triton", "alcop", "reps", "warmup"))
    mine = {r["model"] for r in results}
    kept = [r for r in old["results"] if r["model"] not in mine] if same else []
    return kept + results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (e2e.json, e2e.md)")
    ap.add_argument("--models", default="bert,gpt2,resnet50")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile modes (their compile is long)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="tiny models on CPU, no compile modes: tests the script")
    a = ap.parse_args(argv)
    models = [m for m in a.models.split(",") if m]
    if len(models) > 1 and not a.dry_run:
        # Each model in a process of its own, as a user runs one: a model measured after others in one
        # process inherits their allocator pool and caches (seen: eager ResNet-50 at 7.18 ms after BERT
        # and GPT-2 in one process, 5.35 ms with the same timer in a fresh process on the same machine,
        # docs/decisions.md#d31). The calls add their models to one report (``merge``).
        argv = sys.argv[1:] if argv is None else argv
        rest = [x for i, x in enumerate(argv) if x != "--models" and not x.startswith("--models=")
                and (i == 0 or argv[i - 1] != "--models")]
        for m in models:
            rc = subprocess.run([sys.executable, __file__, *rest, "--models", m]).returncode
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
    modes = [m for m in MODES if not (a.no_compile or a.dry_run) or not m.startswith("compile")]
    reps, warmup = (2, 1) if a.dry_run else (a.reps, a.warmup)
    meta = {"device": torch.cuda.get_device_name() if device == "cuda"
            else f"CPU ({platform.machine()}), interpreter, tiny models: not a measurement",
            "torch": torch.__version__, "triton": triton.__version__, "alcop": alcop_triton.__version__,
            "date": _dt.date.today().isoformat(), "reps": reps, "warmup": warmup,
            "timer": TIMER if device == "cuda" else "wall clock around one forward pass (dry run)"}
    results = [run_model(m, device, modes, reps, warmup, a.dry_run) for m in models]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    results = merge(out / "e2e.json", meta, results)
    (out / "e2e.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (out / "e2e.md").write_text(markdown(meta, results))
    print((out / "e2e.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

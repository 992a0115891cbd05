"""Measure the shipped config tables: per GEMM workload a small model-ranked candidate set, timed on this GPU.

    python benchmarks/build_table.py OUT_DIR [--dtypes float16,bfloat16] [--sets suite,bert,...] \
        [--top-k 8] [--budget-s 540]

Workloads: the ALCOP dense + bmm suite, the GEMMs of BERT, GPT-2, Llama-7B/70B (prefill and decode,
M = 1, 8, 16, 64), Llama-3-8B-sized decode, ViT and ResNet-50, and odd sizes, in each dtype; any shape listed in
``benchmarks/workloads/heldout.json`` is left out, so the held-out evaluation stays unseen. A workload
whose operand rows 16-byte loads cannot read is measured as the drop-ins run it
(``kernels.matmul.aligned_workload``: K zero-padded, operands K-contiguous).

Candidates per workload: the analytical model's ``--top-k`` over its shortlist (split-K included), the
model's best config of every split factor it offers, and what dispatch picks today from the
measured neighbours. They are compiled first in worker processes, then each is checked against torch
(output poisoned with NaN, relative error <= 1e-2 against fp32) and timed with the tuner's timer
(``autotune.measure.time_gpu``: CUDA graphs over rotating input copies, so L2 is cold; eager
``do_bench`` above ``SMALL_KERNEL_MS``). torch.matmul is timed the same way on the same workload and
recorded with ``"impl": "torch"``.

Output: ``OUT_DIR/default_<gpu>.jsonl`` (the ``alcop_triton/data/default_*.jsonl`` record format,
device, versions, date and timer in every line), and ``OUT_DIR/build_table.{json,md}`` (best alcop
against torch per workload). Resumable: a rerun skips what the file already holds, so calls of at
most ``--budget-s`` seconds add up to the whole table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from alcop_triton.records import KernelConfig, Workload, geomean  # noqa: E402

DECODE_M = (1, 8, 16, 64)
PREFILL_TOKENS = 2048


def _linear_set(tokens: Iterable[int], nk: Iterable[tuple[int, int]]) -> list[tuple[int, ...]]:
    return [(m, n, k) for m in tokens for n, k in nk]


# (N, K) of each model's linear layers (weights stored N x K, as nn.Linear keeps them: layout "nt").
_BERT_BASE = [(2304, 768), (768, 768), (3072, 768), (768, 3072)]
_BERT_LARGE = [(3072, 1024), (1024, 1024), (4096, 1024), (1024, 4096)]
_LLAMA7B = [(12288, 4096), (4096, 4096), (11008, 4096), (4096, 11008), (32000, 4096)]
_LLAMA70B = [(10240, 8192), (8192, 8192), (28672, 8192), (8192, 28672)]

WORKLOAD_SETS: dict[str, list[tuple[str, tuple[int, ...]]]] = {
    # BERT-base/large at batch 8 x 512 tokens, their attention bmm (batch x heads, seq, seq, head dim).
    "bert": [("matmul", s) for s in _linear_set([4096], _BERT_BASE + _BERT_LARGE)]
    + [("bmm", (96, 512, 512, 64)), ("bmm", (96, 512, 64, 512)), ("bmm", (128, 512, 512, 64))],
    # GPT-2 small at batch 8 x 1024 tokens, its LM head, and decode at batch 8.
    "gpt2": [("matmul", s) for s in _linear_set([8192, 8], _BERT_BASE) + [(1024, 50257, 768), (8, 50257, 768)]]
    + [("bmm", (96, 1024, 1024, 64)), ("bmm", (96, 1024, 64, 1024))],
    # Llama-7B and 70B: prefill of 2048 tokens, decode at batch M; attention with head dim 128.
    "llama": [("matmul", s) for s in _linear_set((PREFILL_TOKENS,) + DECODE_M, _LLAMA7B + _LLAMA70B)]
    + [("bmm", (32, 2048, 2048, 128)), ("bmm", (32, 2048, 128, 2048)), ("bmm", (64, 2048, 2048, 128))],
    # Decode GEMMs of 7B-8B models (MLP widths 11008 and 14336).
    "decode": [("matmul", (m, n, k)) for m in DECODE_M for n in (4096, 11008, 14336) for k in (4096, 11008, 14336)],
    # ViT-B/16 and ViT-L/16 at batch 32 (197 tokens each).
    "vit": [("matmul", s) for s in _linear_set([32 * 197], _BERT_BASE + _BERT_LARGE)],
    # ResNet-50 at batch 32: the 1x1 convolutions as GEMMs (NHWC rows) and the classifier.
    "resnet50": [("matmul", s) for s in [(100352, 64, 64), (100352, 256, 64), (100352, 64, 256), (25088, 128, 512),
                                         (25088, 512, 128), (6272, 256, 1024), (6272, 1024, 256), (1568, 512, 2048),
                                         (1568, 2048, 512), (32, 1000, 2048)]],
    # Odd sizes (no dim a multiple of 8): measured as the drop-ins run them, K padded (aligned_workload).
    "odd": [("matmul", s) for s in [(333, 777, 1111), (999, 999, 999), (1531, 1531, 1531), (2049, 2049, 2049),
                                    (4095, 4095, 4095), (511, 3001, 767), (3007, 1003, 509), (259, 5003, 2051)]]
    + [("bmm", (12, 511, 511, 65)), ("bmm", (7, 1001, 999, 257))],
}
SETS: tuple[str, ...] = ("suite",) + tuple(WORKLOAD_SETS)


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


def workload_list(sets: Iterable[str], dtypes: Iterable[str], suite_path: Path, heldout_path: Path
                  ) -> tuple[list[tuple[Workload, Workload]], list[Workload]]:
    """``([(as called, as measured)], left out as held out)``, de-duplicated, in set order."""
    from alcop_triton.kernels.matmul import aligned_workload
    shapes: list[tuple[str, tuple[int, ...]]] = []
    for s in sets:
        if s == "suite":
            suite = json.loads(suite_path.read_text())
            shapes += [("matmul", tuple(x)) for x in suite["dense"]["shapes_MNK"]]
            shapes += [("bmm", tuple(x)) for x in suite["bmm"]["shapes_BMNK"]]
        elif s in WORKLOAD_SETS:
            shapes += WORKLOAD_SETS[s]
        else:
            raise ValueError(f"--sets: {s!r} is not one of {SETS}")
    held = _heldout_keys(heldout_path)
    out: list[tuple[Workload, Workload]] = []
    skipped: list[Workload] = []
    seen: set[Workload] = set()
    for dtype in dtypes:
        for op, shape in shapes:
            w = Workload(op, shape, dtype, "nt")
            if w in seen:
                continue
            seen.add(w)
            if (w.op, w.gemm_dims()) in held:
                skipped.append(w)
                continue
            out.append((w, aligned_workload(w)))
    return out, skipped


def candidates(w: Workload, spec: Any, top_k: int, known: list[Any]) -> list[KernelConfig]:
    """The model's top-k, its best config per split factor, and dispatch's transfer pick; no duplicates."""
    from alcop_triton.autotune.dispatch import model_shortlist, transfer
    ranked = model_shortlist(w, spec)
    out = list(ranked[:top_k])
    for split in sorted({c.split_k for c in ranked}):
        best = next(c for c in ranked if c.split_k == split)
        if best not in out:
            out.append(best)
    picked = transfer(w, known, spec)
    if picked is not None and picked[0] not in out:
        out.append(picked[0])
    return out


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


def pending(plan: list[tuple[Workload, Workload]], done: set[str]) -> list[tuple[Workload, Workload]]:
    """Workloads not complete in the output file (complete: torch timed on both shapes, written last)."""
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
    rows = [{"workload": k, "alcop_ms": best[k], "torch_ms": torch_ms[k], "speedup": torch_ms[k] / best[k]}
            for k in best if k in torch_ms]
    return {"meta": meta, "rows": rows, "geomean_speedup": geomean([r["speedup"] for r in rows]),
            "below_0.9": sum(r["speedup"] < 0.9 for r in rows)}


def write_summary(out_dir: Path, summary: dict[str, Any]) -> None:
    (out_dir / "build_table.json").write_text(json.dumps(summary, indent=1) + "\n")
    m = summary["meta"]
    lines = [f"# Shipped-table measurements: {m.get('device', '?')}", "",
             f"triton {m.get('triton')}, torch {m.get('torch')}, alcop {m.get('alcop')}, {m.get('date')}; "
             "timer: autotune.measure.time_gpu (CUDA graphs over rotating input copies below its threshold, "
             "do_bench above), both for alcop's best candidate and for torch.matmul.", "",
             f"{len(summary['rows'])} workloads, geomean speedup over torch {summary['geomean_speedup']:.3f}x, "
             f"{summary['below_0.9']} below 0.9x.", "",
             "| workload | alcop ms | torch ms | speedup |", "|---|---|---|---|"]
    for r in sorted(summary["rows"], key=lambda r: r["speedup"]):
        lines.append(f"| {r['workload']} | {r['alcop_ms']:.4f} | {r['torch_ms']:.4f} | {r['speedup']:.2f}x |")
    (out_dir / "build_table.md").write_text("\n".join(lines) + "\n")


class _TorchRunner:
    """torch.matmul on a workload's inputs, with the runner interface ``measure.time_gpu`` times."""

    def __init__(self, w: Workload) -> None:
        from alcop_triton.kernels.runner import make_runner
        self._r = make_runner(w, KernelConfig(), "cuda")
        self.workload = w  # the timer's rotating input sets are shared with alcop's runs of this workload

    def inputs(self, seed: int) -> tuple[Any, ...]:
        return self._r.inputs(seed)

    def run(self, inputs: tuple[Any, ...]) -> Any:
        import torch
        return torch.matmul(inputs[0], inputs[1])


def measure_workload(called: Workload, w: Workload, configs: list[KernelConfig], done: set[str], meta: dict[str, Any],
                     write: Any) -> None:
    """Time every not yet recorded candidate on ``w``, then torch (GPU only). torch's record comes last:
    it marks the workload complete for a resumed run."""
    import torch

    from alcop_triton.autotune.measure import time_gpu
    from alcop_triton.kernels.runner import make_runner
    ref_runner = make_runner(w, configs[0], "cuda")
    x = ref_runner.inputs(0)
    ref = x[0].float() @ x[1].float()
    for c in configs:
        if _pair_key(w, c) in done:
            continue
        try:
            r = make_runner(w, c, "cuda")
            launch, out = r.bind(x)
            out.fill_(float("nan"))
            launch()
            torch.cuda.synchronize()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            if not err <= 1e-2:
                write(record(w, c, None, "wrong_answer", meta, message=f"relative error {err:.3g}", called_as=called))
                continue
            ms, timer = time_gpu(r, 0)
            write(record(w, c, ms, None, meta, timer, called_as=called))
        except Exception as e:  # recorded, never dropped: a failed config is never dispatched
            msg = f"{type(e).__name__}: {str(e)[:300]}"
            kind = "out_of_resources" if "out of resource" in msg.lower() or "OutOfResources" in msg else \
                "compile" if "Compil" in msg or "PTXAS" in msg.upper() else "runtime"
            write(record(w, c, None, kind, meta, message=msg, called_as=called))
    for tw in dict.fromkeys((w, called)):  # torch on the padded shape the kernel ran, and on the user's
        if _pair_key(tw, None) not in done:
            ms, timer = time_gpu(_TorchRunner(tw), 0)
            write(record(tw, None, ms, None, meta, timer))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--dtypes", default="float16,bfloat16")
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, from {SETS}")
    ap.add_argument("--suite", default=str(ROOT / "tests" / "data" / "alcop_suite.json"))
    ap.add_argument("--heldout", default=str(ROOT / "benchmarks" / "workloads" / "heldout.json"))
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop starting new workloads after this")
    ap.add_argument("--chunk", type=int, default=40, help="workloads compiled together before timing")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    a = ap.parse_args(argv)
    t_start = time.time()

    import torch
    import triton

    import alcop_triton
    from alcop_triton.autotune.database import read_jsonl
    from alcop_triton.autotune.dispatch import default_tables
    from alcop_triton.model.hardware import detect
    from collect_grid import precompile

    spec = detect()
    meta = {"gpu": spec.name, "device": torch.cuda.get_device_name(),
            "cc": ".".join(map(str, torch.cuda.get_device_capability())), "mma": spec.mma,
            "triton": triton.__version__, "torch": torch.__version__.split("+")[0], "alcop": alcop_triton.__version__,
            "date": datetime.date.today().isoformat()}
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"default_{spec.name.lower()}.jsonl"
    plan, skipped = workload_list(a.sets.split(","), a.dtypes.split(","), Path(a.suite), Path(a.heldout))
    if skipped:
        print(f"[table] {len(skipped)} workloads left out as held out: {', '.join(w.key() for w in skipped)}")
    done = done_keys(path)
    known = default_tables() + (read_jsonl(path) if path.exists() else [])
    todo = pending(plan, done)
    print(f"[table] {len(plan)} workloads, {len(todo)} left; writing {path}", flush=True)
    with path.open("a") as f:
        def write(rec: dict[str, Any]) -> None:
            f.write(json.dumps(rec) + "\n")
            f.flush()
        for i in range(0, len(todo), a.chunk):
            if time.time() - t_start > a.budget_s:
                print(f"[table] budget of {a.budget_s:.0f}s reached; rerun to continue", flush=True)
                break
            chunk = [(called, w, candidates(w, spec, a.top_k, known)) for called, w in todo[i:i + a.chunk]]
            precompile([(w, c) for _, w, cands in chunk for c in cands if _pair_key(w, c) not in done], a.workers)
            for called, w, cands in chunk:
                measure_workload(called, w, cands, done, meta, write)
            print(f"[table] {min(i + a.chunk, len(todo))}/{len(todo)} workloads, {time.time() - t_start:.0f}s",
                  flush=True)
    summary = summarize(path, meta)
    write_summary(out_dir, summary)
    print(f"[table] {len(summary['rows'])} workloads measured, geomean {summary['geomean_speedup']:.3f}x torch",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

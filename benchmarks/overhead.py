"""Host time per call: a bare Triton launch, the torch op and the alcop op, as users call them.

    python benchmarks/overhead.py --out OUT [--calls 3000] [--dry-run]

Method: small fp16 inputs (64x64 products, a 1x16x8x8 convolution), so the GPU work is a few µs
and the host is the bottleneck. After ``--warmup`` calls, each of ``--calls`` calls is timed alone
with ``time.perf_counter_ns`` around the call; the launches are asynchronous, so that interval is
the host's work (argument checks, dispatch, allocation, launch). Every 64 calls the host
synchronises with the GPU outside the timed intervals, so the launch queue never fills (a full
queue would make a launch wait for the GPU and count kernel time as host time). Reported: the
median, 10th and 90th percentile in µs. No CUDA graph.

Rows, for matmul (also on float32 operands, ``matmul_fp32``), bmm, linear (+bias+gelu), conv2d and an
``@alcop_triton.op`` DSL kernel
(gelu(x w^T + b)): ``triton`` (a bare launch of Triton's tutorial matmul kernel with one fixed
config: the launcher's own cost; matmul and bmm only), ``torch`` (the torch op; for linear and the
DSL kernel ``F.gelu(F.linear(x, w, b))``), ``alcop`` (the drop-in called directly) and
``alcop_patched`` (the torch spelling under ``alcop_triton.patched()``, entered once around the
timed calls as around a model's forward; what entering and leaving the block costs is reported on
its own), each with inputs that do not and that do require grad (forward only: what building the
autograd record costs). The implementations of one op are timed in interleaved rounds. Patched minus
direct subtracts the direct call of what patch mode runs: alcop's drop-in, or torch's op where patch
mode leaves the call to torch (``route``: a float32 workload without records, a convolution that will
train), which the fast path's counters tell over a repeated call before the timing: the difference of
the two medians, and paired by round (the median over the rounds of each round's difference of medians,
the two run back to back there, so a drift of the host between rounds falls out).
Writes ``OUT/overhead.json`` and ``OUT/overhead.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

SYNC_EVERY = 64
ROUNDS = 20   # interleaved rounds per (op, grad): see ``measure``
OPS = ("matmul", "matmul_fp32", "bmm", "linear_gelu", "conv2d", "dsl_linear_gelu")
IMPLS = ("triton", "torch", "alcop", "alcop_unfused", "alcop_patched")
TIMER = ("host µs per call: time.perf_counter_ns around each call, GPU synchronised every 64 calls outside the "
         f"timed intervals, the implementations interleaved in {ROUNDS} rounds, median (10th-90th percentile) of the "
         "calls after warm-up; no CUDA graph")


def host_times_us(fn: Callable[[], Any], calls: int, warmup: int, sync: Callable[[], None],
                  clock: Callable[[], int] = time.perf_counter_ns, sync_every: int = SYNC_EVERY) -> list[float]:
    """Per-call host time in µs of ``calls`` calls after ``warmup`` (see the module docstring)."""
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for i in range(calls):
        if i and i % sync_every == 0:
            sync()
        t0 = clock()
        fn()
        out.append((clock() - t0) / 1e3)
    sync()
    return out


def stats(us: Sequence[float]) -> dict[str, float]:
    s = sorted(us)
    n = len(s)
    return {"median_us": statistics.median(s), "p10_us": s[n // 10], "p90_us": s[(9 * n) // 10], "calls": n}


def _dsl_op() -> Any:
    import alcop_triton as at
    from alcop_triton import te

    @at.op("alcop_bench::linear_gelu", dims={"x": "M K", "w": "N K", "b": "N"})
    def linear_gelu(x: te.Tensor, w: te.Tensor, b: te.Tensor) -> te.Tensor:
        M, K = x.shape
        N = w.shape[0]
        k = te.reduce_axis(K, "k")
        y = te.compute((M, N), lambda i, j: te.sum(x[i, k] * w[j, k], axis=k), "y")
        return te.compute((M, N), lambda i, j: te.gelu(y[i, j] + b[j]), "act")

    return linear_gelu


def cases(device: str, grad: bool, size: int = 64) -> dict[str, dict[str, Callable[[], Any] | None]]:
    """For each op: the zero-argument call of each implementation (None where it does not apply)."""
    import torch
    import torch.nn.functional as F
    import triton

    import alcop_triton as at

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import tutorial_matmul as tut

    def t(*shape: int) -> Any:
        return torch.randn(*shape, device=device, dtype=torch.float16).requires_grad_(grad)

    a, b = t(size, size), t(size, size)
    # float32 operands: their signature also holds torch's TF32 switch, read on every call
    a32, b32 = (torch.randn(size, size, device=device).requires_grad_(grad) for _ in range(2))
    ab, bb = t(4, size, size), t(4, size, size)
    x, w, bias = t(size, size), t(size, size), t(size)
    img, filt = t(1, 16, 8, 8).contiguous(memory_format=torch.channels_last), t(16, 16, 3, 3)
    dsl = _dsl_op()
    cfg = tut.get_autotune_config()[-1]
    launch = tut.matmul_kernel.fn

    def bare(a3: Any, b3: Any) -> Callable[[], Any]:
        z = a3.shape[0] if a3.dim() == 3 else 1
        c = torch.empty((z, size, size), device=device, dtype=torch.float16)
        a_, b_ = a3.detach().reshape(z, size, size), b3.detach().reshape(z, size, size)
        grid = (triton.cdiv(size, cfg.kwargs["BLOCK_SIZE_M"]) * triton.cdiv(size, cfg.kwargs["BLOCK_SIZE_N"]), z)
        args = (a_, b_, c, size, size, size, *a_.stride(), *b_.stride(), *c.stride())
        return lambda: launch[grid](*args, **cfg.all_kwargs())

    torch_calls = {"matmul": lambda: torch.matmul(a, b), "matmul_fp32": lambda: torch.matmul(a32, b32), "bmm": lambda: torch.bmm(ab, bb),
                   "linear_gelu": lambda: F.gelu(F.linear(x, w, bias)), "conv2d": lambda: F.conv2d(img, filt, None, 1, 1),
                   "dsl_linear_gelu": lambda: F.gelu(F.linear(x, w, bias))}
    alcop_calls = {"matmul": lambda: at.matmul(a, b), "matmul_fp32": lambda: at.matmul(a32, b32), "bmm": lambda: at.bmm(ab, bb),
                   "linear_gelu": lambda: at.linear(x, w, bias, activation="gelu"),
                   "conv2d": lambda: at.conv2d(img, filt, None, 1, 1), "dsl_linear_gelu": lambda: dsl(x, w, bias)}
    out: dict[str, dict[str, Callable[[], Any] | None]] = {}
    for op in OPS:
        out[op] = {"triton": bare(a, b) if op == "matmul" else bare(ab, bb) if op == "bmm" else None,
                   "torch": torch_calls[op], "alcop": alcop_calls[op],
                   # patch mode cannot fuse torch's separate gelu: its direct equivalent is this spelling
                   "alcop_unfused": (lambda: F.gelu(at.linear(x, w, bias))) if op == "linear_gelu" else None,
                   # the DSL op is not a torch function patch mode could route
                   # ``measure`` enters patch mode around these calls
                   "alcop_patched": None if op == "dsl_linear_gelu" else torch_calls[op]}
    return out


def measure(device: str, calls: int, warmup: int, rounds: int = ROUNDS,
            timer: Callable[..., list[float]] = host_times_us) -> list[dict[str, Any]]:
    """Each (op, grad)'s implementations timed in ``rounds`` interleaved rounds of ``calls / rounds``
    calls, so a drift of the host's speed during the run falls on all of them alike. The patched
    spelling runs with the mode entered once around its timed calls, as around a model's forward."""
    import torch

    import alcop_triton as at

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    per_round = max(1, calls // rounds)
    rows = []
    for grad in (False, True):
        for op, impls in cases(device, grad).items():
            times: dict[str, list[float]] = {i: [] for i, fn in impls.items() if fn is not None}
            rounds_med: dict[str, list[float]] = {i: [] for i in times}  # each round's median, for paired differences
            errors: dict[str, str] = {}
            routes: dict[str, str] = {}
            for r in range(rounds):
                for impl in times:
                    if impl in errors:
                        continue
                    fn = impls[impl]
                    assert fn is not None  # ``times`` holds only the implementations that apply
                    if impl == "alcop_patched" and r == 0 and impl not in routes:
                        routes[impl] = patched_route(fn)
                    block = at.patched() if impl == "alcop_patched" else contextlib.nullcontext()
                    try:
                        with block:
                            got = timer(fn, per_round, warmup if r == 0 else min(warmup, SYNC_EVERY), sync)
                        times[impl] += got
                        rounds_med[impl].append(statistics.median(got))
                    except Exception as exc:   # a failing implementation is a result
                        errors[impl] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            for impl in impls:
                row: dict[str, Any] = {"op": op, "impl": impl, "requires_grad": grad}
                if impl in errors:
                    row["error"] = errors[impl]
                elif impl in times:
                    row.update(stats(times[impl]))
                    row["round_medians_us"] = rounds_med[impl]
                    if impl in routes:
                        row["route"] = routes[impl]
                else:
                    row["error"] = "not applicable"
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def patched_route(fn: Callable[[], Any]) -> str:
    """Where patch mode sends ``fn``'s call: "alcop" where the fast path ran alcop's kernels (a hit or a
    first call), "torch" where it went to torch's function (a workload the records leave to torch counts
    a call sent to torch; a convolution that will train goes there before the fast path, counting none)."""
    import alcop_triton as at
    from alcop_triton import fastpath

    with at.patched():
        fn()  # a signature's first call runs alcop's kernels whatever the records say; its repeats follow them
        before = fastpath.stats()
        fn()
        after = fastpath.stats()
    ran = (after.hits + after.misses + after.dispatched + after.bypassed + after.uncacheable
           - before.hits - before.misses - before.dispatched - before.bypassed - before.uncacheable)
    return "alcop" if ran and after.to_torch == before.to_torch else "torch"


def block_cost_us(calls: int, warmup: int) -> dict[str, float]:
    """Host µs of entering and leaving ``with alcop_triton.patched():`` once (no call inside): paid
    once per block, e.g. per model forward, not per call."""
    import alcop_triton as at

    def block() -> None:
        with at.patched():
            pass
    return stats(host_times_us(block, calls, warmup, lambda: None))


def summarize(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (op, grad): each implementation's median, alcop / torch, and patched minus direct (µs): minus
    the direct call of what patch mode runs (``patched_route``: alcop's, or torch's)."""
    by: dict[tuple[str, bool], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["op"], r["requires_grad"]), {})[r["impl"]] = r
    out = []
    for (op, grad), impls in by.items():
        med = {i: impls[i]["median_us"] for i in IMPLS if "median_us" in impls.get(i, {})}
        route = impls.get("alcop_patched", {}).get("route", "alcop")
        direct_impl = "torch" if route == "torch" else "alcop_unfused" if "alcop_unfused" in med else "alcop"
        direct = med.get(direct_impl)
        out.append({"op": op, "requires_grad": grad, **{f"{i}_us": med.get(i) for i in IMPLS},
                    "alcop_over_torch": med["alcop"] / med["torch"] if {"alcop", "torch"} <= med.keys() else None,
                    "patched_route": route if "alcop_patched" in med else None,
                    "patched_minus_direct_us": med["alcop_patched"] - direct
                    if "alcop_patched" in med and direct is not None else None,
                    "patched_minus_direct_paired_us": _paired(impls.get("alcop_patched", {}), impls.get(direct_impl, {}))})
    return out


def _paired(patched: dict[str, Any], direct: dict[str, Any]) -> float | None:
    """The median over rounds of patched minus direct, each round's medians: the two run back to back in
    a round, so a drift of the host's speed between rounds falls out (None where a row lacks rounds)."""
    a, b = patched.get("round_medians_us"), direct.get("round_medians_us")
    if not a or not b or len(a) != len(b):
        return None
    return statistics.median(x - y for x, y in zip(a, b))


def patched_minus_direct(s: dict[str, Any], key: str = "patched_minus_direct_us") -> str:
    """A summary row's patched - direct µs (``key``: of the medians, or paired by round), marked where the
    direct call is torch's (older reports have no route)."""
    v = s.get(key)
    if v is None:
        return "-"
    return f"{v:.1f}" + (" (torch)" if s.get("patched_route") == "torch" else "")


def markdown(meta: dict[str, Any], rows: Sequence[dict[str, Any]], summary: Sequence[dict[str, Any]]) -> str:
    def us(v: float | None) -> str:
        return f"{v:.1f}" if v is not None else "-"

    out = [f"# Host time per call ({meta['device']})", "",
           f"Produced by `benchmarks/overhead.py`; torch {meta['torch']}, Triton {meta['triton']}, alcop_triton "
           f"{meta['alcop']}; date {meta['date']}; {meta['calls']} timed calls after {meta['warmup']} warm-up calls.", "",
           f"Timer: {TIMER}.", "",
           "triton = a bare launch of Triton's tutorial matmul kernel, one fixed config (matmul and bmm only); "
           "torch = the torch op (linear and the DSL kernel: `F.gelu(F.linear(x, w, b))`); alcop = the drop-in "
           "called directly (`at.linear(..., activation='gelu')`, the `@alcop_triton.op` kernel); alcop_unfused = "
           "`F.gelu(at.linear(x, w, b))`, the direct call that patch mode's linear_gelu equals (patch mode "
           "cannot fuse torch's separate gelu), so patched - direct subtracts it there; alcop_patched = "
           "the torch spelling under `alcop_triton.patched()`, the block entered once around the timed calls "
           f"(entering and leaving it costs {meta['patched_block_us']['median_us']:.1f} µs, once per block); "
           "where patch mode leaves the call to torch (marked torch: a float32 workload without records, a "
           "convolution that will train) patched - direct subtracts torch's call. paired = the median over the "
           "rounds of patched minus direct, each round's medians (the two run back to back in a round). "
           "Sizes: 64x64 fp16 products (bmm: 4 of them), conv2d 1x16x8x8 with 16 3x3 filters.", "",
           "| op | requires_grad | triton µs | torch µs | alcop µs | alcop patched µs | alcop / torch | "
           "patched - direct µs | paired µs |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        ratio = f"**{s['alcop_over_torch']:.2f}x**" if s["alcop_over_torch"] is not None else "-"
        out.append(f"| {s['op']} | {s['requires_grad']} | {us(s['triton_us'])} | {us(s['torch_us'])} | "
                   f"{us(s['alcop_us'])} | {us(s['alcop_patched_us'])} | {ratio} | {patched_minus_direct(s)} | "
                   f"{patched_minus_direct(s, 'patched_minus_direct_paired_us')} |")
    errs = [r for r in rows if r.get("error") and r["error"] != "not applicable"]
    if errs:
        out += ["", "Errors:", ""] + [f"- {r['op']} {r['impl']} (requires_grad={r['requires_grad']}): {r['error']}"
                                      for r in errs]
    out += ["", "Spread (10th-90th percentile, µs):", "", "| op | requires_grad | impl | median | p10-p90 |",
            "|---|---|---|---|---|"]
    out += [f"| {r['op']} | {r['requires_grad']} | {r['impl']} | {r['median_us']:.1f} | {r['p10_us']:.1f}-{r['p90_us']:.1f} |"
            for r in rows if "median_us" in r]
    return "\n".join(out) + "\n"


def meta_of(device: str, calls: int, warmup: int) -> dict[str, Any]:
    import torch
    import triton

    import alcop_triton

    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({platform.machine()}), interpreter: not a measurement"
    return {"device": name, "torch": torch.__version__, "triton": triton.__version__, "alcop": alcop_triton.__version__,
            "date": _dt.date.today().isoformat(), "calls": calls, "warmup": warmup, "timer": TIMER}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (overhead.json, overhead.md)")
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, 5 calls: tests the script, measures nothing")
    a = ap.parse_args(argv)
    # A fresh tuning database, as for a new user; no call-time tuning.
    os.environ["ALCOP_DB"] = os.path.join(tempfile.mkdtemp(prefix="alcop_overhead_"), "tuning.sqlite")
    os.environ.pop("ALCOP_AUTOTUNE", None)
    import torch

    device = "cpu" if a.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("overhead: no CUDA device (use --dry-run on CPU)", file=sys.stderr)
        return 2
    calls, warmup = (5, 1) if a.dry_run else (a.calls, a.warmup)
    meta = meta_of(device, calls, warmup)
    rows = measure(device, calls, warmup)
    meta["patched_block_us"] = block_cost_us(calls, warmup)
    summary = summarize(rows)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(json.dumps({"meta": meta, "rows": rows, "summary": summary}, indent=1))
    (out / "overhead.md").write_text(markdown(meta, rows, summary))
    print((out / "overhead.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The README's main job: a tuning session, the tuned kernel, and a check against torch.

    python -m alcop_triton.demo [--trials N] [--shape MxNxK] [--db PATH]

Without a GPU it tunes a small matmul in Triton's CPU interpreter (CPU timings, stored under the
database's ``interpreter`` key); with a GPU it tunes an ALCOP-suite shape on the device and
benchmarks the tuned kernel against torch. Either way it prints the generated kernel and the
relative error of the tuned kernel against a float64 torch reference on fresh inputs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=None, help="tuning budget (default: 6 on CPU, 50 on GPU)")
    ap.add_argument("--shape", default=None, help="MxNxK (default: 48x40x72 on CPU, 1024x768x3072 on GPU)")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--tuner", default="analytical+xgb")
    ap.add_argument("--db", default=None, help="tuning database (default: a fresh temporary one)")
    a = ap.parse_args(argv)

    import torch
    gpu = torch.cuda.is_available()
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import alcop_triton as at
    from alcop_triton.autotune import session
    from alcop_triton.autotune.database import Database
    from alcop_triton.autotune.dispatch import Dispatcher
    from alcop_triton.kernels import matmul as mm

    shape = tuple(int(x) for x in (a.shape or ("1024x768x3072" if gpu else "48x40x72")).split("x"))
    trials = a.trials or (50 if gpu else 6)
    w = at.Workload("matmul", shape, a.dtype, "nt")
    db = Database(a.db or os.path.join(tempfile.mkdtemp(prefix="alcop_demo_"), "tuning.sqlite"))
    target = session.resolve_target("cuda" if gpu else "cpu")
    print(f"== tuning {w.key()} on {target.device_name}: {a.tuner}, {trials} trials; records -> {db.path}")
    t0 = time.time()
    res = session.tune(w, target, db, tuner=a.tuner, n_trials=trials, batch_size=min(8, trials))
    ok = [t for t in res.trials if t.result.ok]
    print(f"   {len(res.trials)} trials ({len(res.trials) - len(ok)} failed) in {time.time() - t0:.1f}s")
    if res.best is None:
        print("no config passed its check; see the database for the recorded failures", file=sys.stderr)
        return 1
    best = res.best.config
    unit = "CPU ms (interpreter)" if not gpu else "ms"
    print(f"   best: {best}  {res.best.result.time_ms:.4f} {unit}")

    # The dispatcher now answers this shape from the database, as a later process would.
    decision = Dispatcher(db).decide(w, target.key if not gpu else target.spec)
    print(f"== dispatch for {w.key()}: {decision.config} (from {decision.source})")

    dev = "cuda" if gpu else "cpu"
    dt = getattr(torch, a.dtype)
    m, n, k = shape
    x = torch.randn(m, k, device=dev).to(dt)
    y = torch.randn(n, k, device=dev).to(dt).t()          # B stored N x K, as in the ALCOP suite
    out = torch.full((m, n), float("nan"), device=dev, dtype=dt)
    kern = mm.compiled(a.dtype, False, mm.Epilogue(), decision.config)
    kern(x, y, out)
    ref = x.double() @ y.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    print("== generated kernel:\n" + kern.source)
    print(f"== check vs torch (float64 reference, fresh random inputs): relative error {err:.2e} "
          f"({'OK' if err <= 1e-2 else 'FAILED'}, tolerance 1e-2 for {a.dtype})")
    if gpu:
        import triton.testing as tt
        tf = lambda ms: 2 * m * n * k / ms / 1e9  # noqa: E731

        def report(what: str, ours: float, theirs: float) -> None:
            print(f"== {what}: alcop {ours:.4f} ms ({tf(ours):.0f} TFLOP/s), torch {theirs:.4f} ms "
                  f"({tf(theirs):.0f} TFLOP/s), speedup {theirs / ours:.2f}x")
        # The kernel: the tuned config's launch bound once (kern(...) would bind on every call), against
        # torch.matmul, each replayed from a CUDA graph.
        launch, _ = kern.bind(x, y, out)
        report("kernel time (triton.testing.do_bench_cudagraph, median)", tt.do_bench_cudagraph(launch),
               tt.do_bench_cudagraph(lambda: torch.matmul(x, y)))
        # As users call it: the drop-in, whose dispatch reads this database from here on, as eager calls.
        os.environ["ALCOP_DB"] = str(db.path)
        at.matmul(x, y)  # a signature's first call decides and binds; later calls replay it
        report("eager calls, at.matmul vs torch.matmul (triton.testing.do_bench, median, L2 flushed)",
               tt.do_bench(lambda: at.matmul(x, y), return_mode="median"),
               tt.do_bench(lambda: torch.matmul(x, y), return_mode="median"))
    return 0 if err <= 1e-2 else 1


def small_mlp() -> tuple[Any, tuple[Any, ...]]:
    """A model factory for ``alcop-tune tune --model alcop_triton.demo:small_mlp``: a two-layer MLP and an
    example input, small enough to tune in the interpreter. Your own factory has the same form."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    return model, (torch.randn(4, 32),)


if __name__ == "__main__":
    raise SystemExit(main())

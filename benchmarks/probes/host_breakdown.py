"""Where the host time of one small eager matmul goes: each layer of the call path timed alone.

    python benchmarks/probes/host_breakdown.py OUT_DIR

A 64x64 fp16 product (the GPU work is a few µs, so the host is the bottleneck). Each row is a loop
of calls timed with ``time.perf_counter_ns`` (min over 7 repeats of 2,000 calls, the GPU synchronised
between repeats; launches are asynchronous, so the loop measures host work): torch.matmul, the
drop-in ``alcop_triton.matmul`` (a fast-path hit), and the parts of a hit: the signature, the output
allocation, the prebound launch, Triton's launcher object, and its compiled C ``launch`` given
tensors or raw addresses. Writes ``OUT_DIR/host_breakdown.{json,md}``.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

REPEATS, CALLS = 7, 2000


def per_call_us(fn: Callable[[], Any], sync: Callable[[], None], repeats: int = REPEATS, calls: int = CALLS,
                warmup: int = 200) -> float:
    """Host µs per call: the min over ``repeats`` loops of ``calls`` calls, ``sync`` between loops."""
    for _ in range(warmup):
        fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter_ns() - t0) / calls / 1e3)
        sync()
    return best


def stored_matmul(a: Any, b: Any) -> tuple[Any, Callable[..., None], tuple[Any, ...]]:
    """``alcop_triton.matmul(a, b)``'s stored fast-path entry, its prebound launch and that launch's
    arguments (``a``, ``b`` and an output of the entry's), after a first call that stores them."""
    import alcop_triton as at
    from alcop_triton import fastpath as fp

    at.matmul(a, b)
    entry = fp._entries[fp.signature("matmul", (a, b), ())]
    assert isinstance(entry, fp.Entry), entry
    run, pick = entry.launches[0]
    return entry, run, pick((a, b, entry.run((a, b))))


def main(out_dir: str) -> int:
    import torch
    import triton
    from triton import knobs

    import alcop_triton as at
    from alcop_triton import fastpath as fp

    dev = torch.device("cuda")
    a = torch.randn(64, 64, dtype=torch.float16, device=dev)
    b = torch.randn(64, 64, dtype=torch.float16, device=dev)
    entry, run, args = stored_matmul(a, b)
    out = args[-1]
    # The prebound launch's grid and non-tensor arguments, read from its closure; the compiled kernel
    # from the jitted function's cache (this process compiled one).
    def closure(f: Any) -> dict[str, Any]:
        return dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__ or ())))
    free = closure(run)
    tail, stream_of = free["tail"], free["stream_of"]
    g0, g1, g2 = free["g0"], free["g1"], free["g2"]
    from alcop_triton import runtime
    compiled = next(k for fn, _ in runtime._LOADED.values() for cache in fn.device_caches.values()
                    for k in cache[0].values())
    launcher, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    raw = launcher.launch
    hooks = knobs.runtime  # passed as Triton passes them (empty hook chains included)
    idx = torch.cuda.current_device()
    ptrs = tuple(t.data_ptr() for t in args)

    def raw_tensors() -> None:
        raw(g0, g1, g2, stream_of(idx), function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
            metadata, None, hooks.launch_enter_hook, hooks.launch_exit_hook, *args, *tail)

    def raw_ints() -> None:
        raw(g0, g1, g2, stream_of(idx), function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
            metadata, None, hooks.launch_enter_hook, hooks.launch_exit_hook, *ptrs, *tail)

    shape, stride = tuple(out.shape), out.stride()
    # The raw C launch passes no scratch buffers: only valid for kernels that need none.
    raw_ok = not (launcher.global_scratch_size or launcher.profile_scratch_size)
    rows = {
        "torch.matmul": lambda: torch.matmul(a, b),
        "torch.mm": lambda: torch.mm(a, b),
        "alcop_triton.matmul": lambda: at.matmul(a, b),
        "fastpath.signature": lambda: fp.signature("matmul", (a, b), ()),
        "torch.empty_strided": lambda: torch.empty_strided(shape, stride, dtype=torch.float16, device=dev),
        "Entry (alloc + launch)": lambda: entry.run((a, b)),
        "prebound launch": lambda: run(*args),
        "CudaLauncher.__call__": lambda: launcher(g0, g1, g2, stream_of(idx), function, metadata, None,
                                                 hooks.launch_enter_hook, hooks.launch_exit_hook, *args, *tail),
        **({"C launch, tensors": raw_tensors, "C launch, addresses": raw_ints} if raw_ok else {}),
        "stream getter": lambda: stream_of(idx),
        "torch.cuda.current_device": torch.cuda.current_device,
        "tensor.data_ptr() x3": lambda: (a.data_ptr(), b.data_ptr(), out.data_ptr()),
    }
    a_g = a.clone().requires_grad_()
    rows["torch.matmul, requires_grad"] = lambda: torch.matmul(a_g, b)
    rows["alcop_triton.matmul, requires_grad"] = lambda: at.matmul(a_g, b)
    with at.patched():
        rows_patched = {"torch.matmul under patched()": lambda: torch.matmul(a, b)}
        res_patched = {k: per_call_us(f, torch.cuda.synchronize) for k, f in rows_patched.items()}
    res = {k: per_call_us(f, torch.cuda.synchronize) for k, f in rows.items()} | res_patched
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from overhead import host_times_us, stats
    # The same calls with overhead.py's timer (each call timed alone, median): the two timers side by side.
    median = {k: stats(host_times_us(f, 3000, 200, torch.cuda.synchronize))["median_us"]
              for k, f in rows.items() if k.startswith(("torch.matmul", "alcop_triton.matmul"))}
    import threading
    print("threads:", [t.name for t in threading.enumerate()])
    meta_d = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "date": datetime.date.today().isoformat(),
              "timer": f"host µs per call: min over {REPEATS} loops of {CALLS} calls (perf_counter_ns), "
                       "GPU synchronised between loops; no CUDA graph"}
    out_p = Path(out_dir)
    out_p.mkdir(parents=True, exist_ok=True)
    (out_p / "host_breakdown.json").write_text(json.dumps({"meta": meta_d, "us": res, "median_us": median}, indent=1)
                                              + "\n")
    lines = [f"# Host time per call, 64x64 fp16 matmul ({meta_d['device']})", "",
             f"torch {meta_d['torch']}, Triton {meta_d['triton']}, {meta_d['date']}. Timer: {meta_d['timer']}.", "",
             "| what | µs per call (loop) | median of calls timed alone (overhead.py's timer) |", "|---|---|---|"] + [
                 f"| {k} | {v:.2f} | {median[k]:.2f} |" if k in median else f"| {k} | {v:.2f} | |" for k, v in res.items()]
    (out_p / "host_breakdown.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

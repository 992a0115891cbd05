"""Where ResNet-50's time goes under patch mode: host and GPU time of a pass, and of each convolution.

    python benchmarks/probes/resnet_patch.py OUT_DIR

The model and input of ``benchmarks/e2e.py`` (batch 64, fp16, channels_last, inference). For the whole
forward pass in four modes (eager; under ``alcop_triton.patched()``; eager with every function patch mode
routes wrapped in a Python function that only calls torch's, the least a wrapper costs; patched with
every convolution's call site stored as a call to torch, the routed wrapper's own cost):

* ``events ms``: e2e.py's timer (CUDA events around one pass, host synchronised before it);
* ``host ms``: ``perf_counter`` around the pass alone (launches are asynchronous: the host's work);
* ``graph ms``: the pass captured in a CUDA graph (``triton.testing.do_bench_cudagraph``): GPU time;
* the fast path's counters over one pass (hits, calls sent to torch, misses, uncacheable, dispatched).

For each distinct convolution (its input shape, weight and parameters, captured from an eager pass):
where patch mode sends it (alcop's kernel or torch), host µs per call eager and patched (a loop of
calls, ``perf_counter_ns``, the GPU synchronised between loops), and graph µs of the call eager and
patched. Writes ``OUT_DIR/resnet_patch.{json,md}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_breakdown import per_call_us  # noqa: E402

PASSES, ROUNDS, CALLS, LOOPS = 40, 5, 200, 5


def host_us(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    """Min over LOOPS loops of CALLS calls of the host µs per call."""
    return per_call_us(fn, sync, LOOPS, CALLS, warmup=20)


def main(out_dir: str) -> int:
    import torch
    import torch.nn.functional as F
    import triton
    from triton.testing import do_bench_cudagraph

    import alcop_triton as at
    from alcop_triton import fastpath as fp
    from alcop_triton import patch
    from e2e import build

    model, x, src = build("resnet50", "cuda", tiny=False)
    sync = torch.cuda.synchronize
    convs: dict[tuple[Any, ...], tuple[torch.nn.Conv2d, torch.Tensor, int]] = {}
    conv_sites: dict[int, tuple[Any, Any, bool]] = {}  # patch mode's to-torch entry of every convolution's call site

    def grab(mod: torch.nn.Conv2d, args: tuple[Any, ...]) -> None:
        inp = args[0]
        key = (tuple(inp.shape), tuple(mod.weight.shape), mod.stride, mod.padding)
        n = convs[key][2] + 1 if key in convs else 1
        convs[key] = (mod, inp.clone(), n)
        conv_sites[id(mod.weight)] = (inp.shape, inp.dtype, False)

    def patched_pass() -> Any:
        with at.patched():
            return model(x)

    def eager_pass() -> Any:
        return model(x)

    res: dict[str, Any] = {"model": src, "input": list(x.shape), "whole": {}, "convs": []}
    with torch.inference_mode():
        hooks = [m.register_forward_pre_hook(grab) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        eager_pass()
        for h in hooks:
            h.remove()
        for _ in range(3):
            patched_pass()
        sync()
        counts = []
        for _ in range(3):
            fp.reset_stats()
            patched_pass()
            counts.append(fp.stats())
        res["stats_per_pass"] = [dataclasses.asdict(s) for s in counts]
        # Two more modes that split patch mode's host cost: every routed function wrapped in a Python
        # function that only calls torch's (the least any wrapper costs), and patch mode with every
        # convolution's site stored as a call to torch (the routed wrapper's own cost, no alcop kernel).
        @contextlib.contextmanager
        def python_wrappers() -> Iterator[None]:
            saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patch.ROUTES]
            for owner, name, original in saved:
                setattr(owner, name, (lambda f: lambda *a, **k: f(*a, **k))(original))
            try:
                yield
            finally:
                for owner, name, original in saved:
                    setattr(owner, name, original)

        @contextlib.contextmanager
        def convs_to_torch() -> Iterator[None]:
            sites = patch._to_torch.setdefault(at.ops.conv2d, {})
            saved = dict(sites)
            sites.update(conv_sites)
            try:
                yield
            finally:
                sites.clear()
                sites.update(saved)

        modes: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "eager": (eager_pass, contextlib.nullcontext), "patched": (patched_pass, contextlib.nullcontext),
            "python_wrappers": (eager_pass, python_wrappers),
            "patched_all_convs_to_torch": (patched_pass, convs_to_torch)}
        events: dict[str, list[float]] = {m: [] for m in modes}
        host: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(ROUNDS):  # the modes take turns, PASSES // ROUNDS passes each per round
            for name, (fn, ctx) in modes.items():
                with ctx():
                    for _ in range(PASSES // ROUNDS):
                        sync()
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        t0 = time.perf_counter()
                        s.record()
                        fn()
                        e.record()
                        host[name].append((time.perf_counter() - t0) * 1e3)
                        e.synchronize()
                        events[name].append(s.elapsed_time(e))
        # e2e.py's order: eager and patched passes alternate one by one (patch mode entered and left
        # around every patched pass).
        alternating: dict[str, list[float]] = {"eager": [], "patched": []}
        for _ in range(PASSES):
            for name, fn in (("eager", eager_pass), ("patched", patched_pass)):
                sync()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                alternating[name].append(s.elapsed_time(e))
        res["alternating_events_ms"] = {k: statistics.median(v) for k, v in alternating.items()}
        for name, (fn, ctx) in modes.items():
            with ctx():
                graph = do_bench_cudagraph(fn)
            res["whole"][name] = {"events_ms": statistics.median(events[name]),
                                  "host_ms": statistics.median(host[name]), "graph_ms": graph}
        for (ishape, wshape, stride, pad), (mod, inp, n) in convs.items():
            w, b = mod.weight, mod.bias

            def eager_call() -> Any:
                return F.conv2d(inp, w, b, mod.stride, mod.padding, mod.dilation, mod.groups)

            def patched_call() -> Any:
                with at.patched():
                    return F.conv2d(inp, w, b, mod.stride, mod.padding, mod.dilation, mod.groups)

            with at.patched():
                patched_call()
                fp.reset_stats()
                F.conv2d(inp, w, b, mod.stride, mod.padding, mod.dilation, mod.groups)
                route = "torch" if fp.stats().to_torch else "alcop"
                loop_patched = host_us(lambda: F.conv2d(inp, w, b, mod.stride, mod.padding, mod.dilation,
                                                        mod.groups), sync)
            res["convs"].append({
                "input": list(ishape), "weight": list(wshape), "stride": list(stride), "padding": list(pad),
                "count": n, "route": route,
                "host_us_eager": host_us(eager_call, sync), "host_us_patched": loop_patched,
                "graph_us_eager": 1e3 * do_bench_cudagraph(eager_call),
                "graph_us_patched": 1e3 * do_bench_cudagraph(patched_call)})
    res["meta"] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "python": sys.version.split()[0],
                   "alcop": at.__version__, "date": datetime.date.today().isoformat(),
                   "timers": {"events_ms": "CUDA events around one pass, host synchronised first, median of "
                                           f"{PASSES}, the modes in turns ({ROUNDS} rounds)", "host_ms": "perf_counter around the pass, median of "
                                                               f"{PASSES}",
                              "graph": "triton.testing.do_bench_cudagraph",
                              "host_us": f"min over {LOOPS} loops of {CALLS} calls, perf_counter_ns, "
                                         "GPU synchronised between loops; patched: inside one patched() block"}}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "resnet_patch.json").write_text(json.dumps(res, indent=1) + "\n")
    lines = [f"# ResNet-50 under patch mode ({res['meta']['device']})", "",
             f"{src}, input {res['input']}; torch {torch.__version__}, Triton {triton.__version__}, "
             f"{res['meta']['date']}. Timers: " + "; ".join(f"{k}: {v}" for k, v in res["meta"]["timers"].items()),
             "", "| mode | events ms | host ms | graph ms |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['events_ms']:.2f} | {v['host_ms']:.2f} | {v['graph_ms']:.2f} |"
              for k, v in res["whole"].items()]
    lines += ["", "Passes alternating one by one (e2e.py's order), events ms: "
              + ", ".join(f"{k} {v:.2f}" for k, v in res["alternating_events_ms"].items()),
              "", f"Fast path counters per patched pass: {res['stats_per_pass']}", "",
              "| input | weight | stride | count | route | host µs eager | patched | graph µs eager | patched |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c['input']} | {c['weight']} | {c['stride']} | {c['count']} | {c['route']} | "
              f"{c['host_us_eager']:.1f} | {c['host_us_patched']:.1f} | {c['graph_us_eager']:.1f} | "
              f"{c['graph_us_patched']:.1f} |" for c in res["convs"]]
    (out / "resnet_patch.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))

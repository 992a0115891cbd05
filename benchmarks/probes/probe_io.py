"""What every probe writes: the run's metadata and its rows as ``NAME.json``, its table as ``NAME.md``."""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any, Callable

GRAPH_TIMER = "triton.testing.do_bench_cudagraph, one call on one set of inputs"


def int_tuple(lengths: tuple[int, ...], what: str) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: ints joined by 'x' or commas (``alcop-tune``'s shapes), as many as one of ``lengths``,
    each positive; ``what`` names the form in the error."""
    def parse(text: str) -> tuple[int, ...]:
        from alcop_triton.cli import parse_shape
        try:
            dims = parse_shape(text)
        except argparse.ArgumentTypeError:
            dims = ()
        if len(dims) not in lengths or min(dims) <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what}, positive integers")
        return dims
    return parse


def run_meta(timer: str | None = GRAPH_TIMER) -> dict[str, Any]:
    """Device, versions and date of this run (and its timer, where it times)."""
    import torch
    import triton

    import alcop_triton as at
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "alcop": at.__version__, "date": datetime.date.today().isoformat()}
    return meta | ({"timer": timer} if timer else {})


def write(out_dir: str, name: str, meta: dict[str, Any], rows: list[dict[str, Any]], lines: list[str]) -> None:
    """``OUT_DIR/NAME.json`` (meta and rows) and ``OUT_DIR/NAME.md`` (``lines``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")


def publish(out_dir: str, name: str, meta: dict[str, Any], rows: list[dict[str, Any]], lines: list[str]) -> int:
    """``write`` the report and print its table; 0, a probe's exit status."""
    write(out_dir, name, meta, rows, lines)
    print("\n".join(lines))
    return 0


def table_head(title: str, meta: dict[str, Any], note: str, columns: list[str]) -> list[str]:
    """A report's first lines: its title with the device, the versions, date and timer (and ``note``), and
    the head of its table with ``columns``."""
    return [f"# {title} ({meta['device']})", "",
            f"torch {meta['torch']}, Triton {meta['triton']}, {meta['date']}. Timer: {meta.get('timer', '-')}. {note}",
            "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def fastest(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The entry (a dict with ``"us"``) of least time among those that ran (``checked_time`` a float), or None."""
    return min((d for d in entries if isinstance(d["us"], float)), key=lambda d: d["us"], default=None)


def fmt_us(v: Any) -> str:
    """A ``checked_time`` result in a table: µs to one decimal, or "err" for a failure."""
    return f"{v:.1f}" if isinstance(v, float) else "err"


def checked_time(fn: Callable[[], Any], want: Any | None) -> float | str:
    """µs of ``fn`` under ``do_bench_cudagraph`` once its result is within 1e-2 (normwise) of ``want``
    (None: not checked); a failure (wrong result, compile error, out of resources) is the result."""
    from triton.testing import do_bench_cudagraph
    try:
        got = fn()
        if want is not None:
            err = ((got.float() - want).norm() / want.norm()).item()
            if err > 1e-2:
                return f"wrong result ({err:.2e})"
        return 1e3 * do_bench_cudagraph(fn)
    except Exception as exc:  # compile failure, out of resources: a result
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]


def cold_calls(calls: dict[str, Callable[[], Any]], rounds: int) -> list[dict[str, Any]]:
    """Each call timed as the suite's eager timer times one: after an L2 flush and a synchronisation,
    ``host_us`` = ``time.perf_counter_ns`` around the call, ``events_us`` = CUDA events before and after
    it (host cost included); the calls take turns (the order turning each round), median of ``rounds``."""
    import statistics
    import time

    import torch
    flush = torch.empty(2 * torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size // 4 + 1,
                        dtype=torch.int32, device="cuda")
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    order = list(calls.items())
    host: dict[str, list[float]] = {k: [] for k in calls}
    events: dict[str, list[Any]] = {k: [] for k in calls}
    for r in range(rounds):
        for name, fn in order[r % len(order):] + order[:r % len(order)]:
            flush.zero_()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            t0 = time.perf_counter_ns()
            fn()
            t1 = time.perf_counter_ns()
            e.record()
            host[name].append((t1 - t0) / 1e3)
            events[name].append((s, e))
    torch.cuda.synchronize()
    return [{"row": k, "host_us": statistics.median(host[k]),
             "events_us": 1e3 * statistics.median(s.elapsed_time(e) for s, e in events[k])} for k in calls]


PASS_TIMER = ("events ms: CUDA events around one pass, host synchronised first; host ms: perf_counter around the "
              "pass; medians, the modes taking turns pass by pass")
"""The timer of the probes that time a model's forward pass (``timed_pass``), as their reports name it."""


def timed_pass(fn: Callable[[], Any]) -> tuple[float, float]:
    """(host ms, events ms) of one call of ``fn``, a forward pass: the host synchronised first, CUDA events
    around the call (host cost included), ``time.perf_counter`` around the host's part."""
    import time

    import torch
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    fn()
    end.record()
    host = (time.perf_counter() - t0) * 1e3
    end.synchronize()
    return host, start.elapsed_time(end)


def conv_operands() -> tuple[Any, Any]:
    """The cold-call probes' convolution: an 8x64x28x28 fp16 channels-last input and 64 3x3 filters."""
    import torch
    img = torch.randn(8, 64, 28, 28, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    filt = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    return img, filt

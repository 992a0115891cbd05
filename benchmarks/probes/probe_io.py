"""What every probe writes: the run's metadata and its rows as ``NAME.json``, its table as ``NAME.md``."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any, Callable

GRAPH_TIMER = "triton.testing.do_bench_cudagraph, one call on one set of inputs"


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

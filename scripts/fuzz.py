"""Long fuzz run: the CI fuzz suite's generators (``tests/fuzz/fuzz_cases.py``), thousands of cases.

    TRITON_INTERPRET=1 nice python scripts/fuzz.py --cases 5000 --out benchmarks/results/fuzz

Runs on CPU (Triton's interpreter). Cases are drawn in chunks, each from its own hypothesis seed;
after every chunk the chunk's tally is appended to ``<out>/chunks.jsonl`` and the summary
(``<out>/fuzz_summary.json`` and ``.md``) is rewritten, so a run that is stopped still leaves its
summary, and the same command resumes with the next chunk. Every case is judged against torch:
results against torch's float64 result, exceptions by type; hostile names must be refused with a
ValueError or build a correct kernel inside the cache directory.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "fuzz")]
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("ALCOP_CACHE_DIR", tempfile.mkdtemp(prefix="alcop_fuzz_cache_"))

import torch  # noqa: E402
import triton  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import alcop_triton  # noqa: E402
import fuzz_cases as fc  # noqa: E402

NAME_SHARE = 0.1
"""Fraction of cases that are hostile names; the rest are op calls."""


def run_chunk(index: int, size: int, base_seed: int) -> dict[str, Any]:
    tally = fc.Tally()
    per_op: dict[str, int] = {}

    @seed(base_seed + index)
    @settings(max_examples=size, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=st.integers(0, 99).flatmap(lambda i: fc.name_cases() if i < NAME_SHARE * 100 else fc.op_cases()))
    def one(case: Any) -> None:
        o = fc.run_name_case(case) if isinstance(case, fc.NameCase) else fc.run_op_case(case)
        key = "name" if isinstance(case, fc.NameCase) else f"{case.op}/{case.dtype}"
        per_op[key] = per_op.get(key, 0) + 1
        tally.add(o)

    t0 = time.time()
    one()
    return {"chunk": index, "seed": base_seed + index, "seconds": round(time.time() - t0, 1),
            "counts": tally.counts, "per_op": per_op,
            "problems": [o.__dict__ for o in tally.problems]}


def summarise(chunks: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    counts: dict[str, int] = {}
    per_op: dict[str, int] = {}
    problems: list[dict[str, str]] = []
    for c in chunks:
        for k, v in c["counts"].items():
            counts[k] = counts.get(k, 0) + v
        for k, v in c["per_op"].items():
            per_op[k] = per_op.get(k, 0) + v
        problems += c["problems"]
    reasons: dict[str, int] = {}
    for p in problems:
        if p["kind"] == "documented":
            reasons[p["reason"]] = reasons.get(p["reason"], 0) + 1
    return {
        "what": "alcop_triton drop-in ops and DSL names fuzzed against torch (Triton interpreter, CPU)",
        "date": dt.date.today().isoformat(), "machine": platform.machine(), "python": platform.python_version(),
        "torch": torch.__version__, "triton": triton.__version__, "alcop_triton": alcop_triton.__version__,
        "command": "python scripts/fuzz.py " + " ".join(sys.argv[1:]),
        "chunks": len(chunks), "seconds": round(sum(c["seconds"] for c in chunks), 1),
        "cases": sum(counts.values()),
        "ok": counts.get("ok", 0), "raised_like_torch": counts.get("raised_alike", 0),
        "wrong_results": counts.get("wrong", 0), "crashes": counts.get("crash", 0),
        "exception_type_mismatches": counts.get("type_mismatch", 0),
        "documented_differences": reasons, "cases_per_op": dict(sorted(per_op.items())),
        "failures": [p for p in problems if p["kind"] != "documented"][:200],
        "documented_examples": [p for p in problems if p["kind"] == "documented"][:10],
    }


def markdown(s: dict[str, Any]) -> str:
    lines = [f"# Fuzz run: {s['cases']} cases", "",
             f"{s['what']}. {s['date']}, torch {s['torch']}, Triton {s['triton']}, alcop_triton {s['alcop_triton']}, "
             f"Python {s['python']} on {s['machine']}; {s['chunks']} chunk(s), {s['seconds']} s of CPU-interpreter "
             f"time (wall clock, `time.time`).", "", f"Command: `{s['command']}`", "",
             "| outcome | cases |", "|---|---|",
             f"| result matches torch's float64 result | {s['ok']} |",
             f"| raised, with torch's exception type (or a ValueError for a refused name) | {s['raised_like_torch']} |",
             f"| wrong result | {s['wrong_results']} |", f"| crash (alcop raised, torch returned) | {s['crashes']} |",
             f"| exception type differs from torch's | {s['exception_type_mismatches']} |",
             f"| documented difference | {sum(s['documented_differences'].values())} |", "",
             "Cases per op and dtype: " + ", ".join(f"{k} {v}" for k, v in s["cases_per_op"].items()) + ".", "",
             "Results are judged against torch's result in float64 (fp32 error <= 1e-5, fp16 <= 1e-2, relative to the "
             "largest magnitude; NaN and inf positions exactly). addmm/baddbmm are judged against "
             "`beta * input + alpha * (A @ B)` with the term of a zero factor left out, as torch's addmm and its CUDA "
             "path compute it; torch's CPU baddbmm lets NaN through alpha = 0, and its CPU addmm returns NaN for "
             "alpha = inf where alpha * (A @ B) is +-inf; alcop does not copy either "
             "(`tests/ops/test_parity_scalars_and_args.py`).", ""]
    if s["documented_differences"]:
        lines += ["## Documented differences", ""]
        lines += [f"* {n} case(s): {r} (tested in `tests/fuzz/test_fuzz.py`)" for r, n in
                  s["documented_differences"].items()]
        lines.append("")
    if s["failures"]:
        lines += ["## Failures", ""] + [f"* {p['kind']}: `{p['case']}`: {p['detail']}" for p in s["failures"]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=5000, help="cases in all (rounded up to whole chunks)")
    p.add_argument("--chunk", type=int, default=250, help="cases per chunk (one hypothesis seed each)")
    p.add_argument("--seed", type=int, default=20260, help="seed of the first chunk")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fuzz"), help="output directory")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = out / "chunks.jsonl"
    chunks = [json.loads(line) for line in state.read_text().splitlines() if line.strip()] if state.exists() else []
    done = {c["chunk"] for c in chunks}
    def write() -> dict[str, Any]:
        s = summarise(chunks, args)
        (out / "fuzz_summary.json").write_text(json.dumps(s, indent=1) + "\n")
        (out / "fuzz_summary.md").write_text(markdown(s))
        return s

    for i in range(-(-args.cases // args.chunk)):
        if i in done:
            continue
        c = run_chunk(i, args.chunk, args.seed)
        chunks.append(c)
        with state.open("a") as f:
            f.write(json.dumps(c) + "\n")
        s = write()
        print(f"chunk {i}: {c['counts']} ({c['seconds']} s); total {s['cases']} cases, "
              f"{s['wrong_results']} wrong, {s['crashes']} crashes, {s['exception_type_mismatches']} type "
              "mismatches", flush=True)
    write()  # also when every chunk was already done: the summary follows this script's format
    return 0


if __name__ == "__main__":
    sys.exit(main())

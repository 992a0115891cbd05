"""How long `alcop-tune tune` takes on shapes it has never seen, and how fast what it finds runs.

    python benchmarks/tune_speed.py OUT [--shapes 2304x1792x2816 ...] [--trials 50] [--tune-arg=--no-seed]

Each shape is tuned by `alcop-tune tune matmul SHAPE --layout nt --trials N` in a fresh process, with
a fresh tuning database in OUT; the wall time of that process (its start and imports included) is
timed from here with ``time.perf_counter``, and the command's own time split (start, space, model,
compile, measure, other) is read from its ``--json`` output. Then, in this process, the tuned config
and ``torch.matmul`` (cuBLAS) run on the same inputs and are timed with the same timer: on a GPU
``triton.testing.do_bench_cudagraph`` (median of the kernel under a CUDA graph); in the Triton
interpreter (a CPU dry run) the median of ``time.perf_counter`` over a few calls. The tuned output is
checked against torch first.

Triton's on-disk cache is a fresh directory in OUT (``TRITON_CACHE_DIR``) unless ``--keep-cache``:
the first shape then compiles every candidate it measures, and later shapes reuse the kernels of
configs an earlier shape compiled (same source and specialisation), so the first shape and the rest
are reported apart. Writes OUT/tune_speed.json and OUT/tune_speed.md.

    python benchmarks/tune_speed.py OUT --synthetic SECONDS [--tune-arg=--no-seed] [--label TEXT]

No GPU: times the tuning process's own phases (space, model) in this process, ``session.tune`` with
a synthetic measurer standing in for the GPU (the analytical time of each config times a fixed
per-config error, returned after waiting SECONDS per config as a measurement would; no compile
workers). What the tuner picks says nothing about real kernels; the split says where the tuning
process spends its time while measurements run. Writes OUT/tune_speed_synthetic.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import timing  # noqa: E402  (benchmarks/timing.py, beside this script)

LAYOUT = "nt"  # B stored N x K: what F.linear and nn.Linear's weight give torch.matmul
DTYPE = "float16"

# Unseen shapes (M x N x K): none is in the shipped table or in benchmarks/workloads/heldout.json
# (``unseen_problems`` checks it before anything runs). Realistic layer sizes at token counts that
# are not powers of two.
SHAPES: dict[str, str] = {
    "2304x1792x2816": "the shape of the earlier measurement of tuning time (all dims multiples of 256, none a power of two)",
    "1970x2304x768": "ViT-B/16 QKV projection: 10 images x 197 tokens (odd M), hidden 768 -> 3 x 768",
    "2816x768x3072": "BERT-base FFN down-projection: 11 sequences x 256 tokens, 3072 -> 768 (long K, narrow N)",
    "1536x5632x2048": "TinyLlama MLP up-projection: 3 x 512 tokens, hidden 2048 -> intermediate 5632 (wide N)",
    "896x2560x2560": "Phi-2 attention output projection: 7 x 128 tokens, 2560 -> 2560 (few output tiles)",
}


def parse_shape(text: str) -> tuple[int, int, int]:
    dims = tuple(int(d) for d in text.lower().split("x"))
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected M x N x K, e.g. 2304x1792x2816")
    return dims  # type: ignore[return-value]


def seen_shapes() -> set[tuple[str, tuple[int, ...]]]:
    """(op, shape) of every matmul workload in the shipped table and in the held-out set."""
    from alcop_triton.records import open_jsonl

    seen: set[tuple[str, tuple[int, ...]]] = set()
    for path in sorted((ROOT / "alcop_triton" / "data").glob("default_*.jsonl")):
        with open_jsonl(path) as f:
            for line in f:
                if line.strip():
                    w = json.loads(line)["workload"]
                    seen.add((w["op"], tuple(w["shape"])))
    heldout = json.loads((ROOT / "benchmarks" / "workloads" / "heldout.json").read_text())
    seen |= {(w["op"], tuple(w["shape"])) for w in heldout["workloads"]}
    return seen


def unseen_problems(shapes: list[tuple[int, int, int]]) -> list[str]:
    """Shapes that the shipped table or the held-out set already hold (what the run must not tune)."""
    seen = seen_shapes()
    return ["x".join(map(str, s)) for s in shapes if ("matmul", s) in seen or ("linear", s) in seen]


def tune_command(shape: tuple[int, int, int], trials: int, db: Path, out_json: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "alcop_triton", "tune", "matmul", "x".join(map(str, shape)), "--dtype", DTYPE,
            "--layout", LAYOUT, "--trials", str(trials), "--db", str(db), "--json", str(out_json), *extra]


def run_tune(shape: tuple[int, int, int], trials: int, out: Path, env: dict[str, str],
             extra: list[str]) -> dict[str, Any]:
    """One `alcop-tune tune` in a fresh process: its wall time from here and its own --json summary."""
    name = "x".join(map(str, shape))
    out_json = out / f"tune_{name}.json"
    log = out / f"tune_{name}.log"
    cmd = tune_command(shape, trials, out / "tune.sqlite", out_json, extra)
    t0 = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}; see {log}")
    summary = json.loads(out_json.read_text())
    entry = summary["workloads"][0]
    return {"shape": name, "reason": SHAPES.get(name, "given on the command line"), "wall_s": wall,
            "command": " ".join(cmd[1:]), "tune": entry, "device": summary["device"], "versions": summary["versions"],
            # Older commands wrote no "seeding": they had none.
            "seeding": bool(summary.get("seeding", False))}


GRAPH_TIMER = timing.GRAPH
EAGER_TIMER = timing.DO_BENCH


def median_time_ms(fn: Callable[[], Any], device: str, timer: str = GRAPH_TIMER, reps: int = 3) -> tuple[float, str]:
    """(median ms, timer name) of ``fn``: on a GPU with ``timer`` (the kernel under a CUDA graph, or
    ``EAGER_TIMER``), wall time in the interpreter."""
    if device.startswith("cuda"):
        return (timing.graph_ms(fn) if timer == GRAPH_TIMER else timing.do_bench_ms(fn)), timer
    return timing.wall_ms(fn, reps), f"time.perf_counter (median of {reps} calls, Triton interpreter)"


def compare_with_torch(shape: tuple[int, int, int], config: dict[str, Any], device: str) -> dict[str, Any]:
    """The tuned config and torch.matmul on the same inputs, same timer, same process; output checked first."""
    import torch

    from alcop_triton.kernels.runner import make_runner
    from alcop_triton.records import KernelConfig, Workload

    w = Workload("matmul", shape, DTYPE, LAYOUT)
    runner = make_runner(w, KernelConfig.from_dict(config), device)
    a, b = runner.inputs(0)
    launch, out = runner.bind((a, b))
    assert launch is not None
    out.fill_(float("nan"))
    launch()
    ref = runner.reference((a, b))
    err = float((out.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-6))
    if not err <= runner.rtol:
        raise RuntimeError(f"{w.key()}: tuned config {config} is wrong: normwise error {err:.3g} > {runner.rtol}")
    try:
        ours, timer = median_time_ms(launch, device)
    except RuntimeError:
        # Some launches cannot be captured (host-side TMA descriptors): both are then timed eagerly.
        torch.cuda.synchronize()
        ours, timer = median_time_ms(launch, device, EAGER_TIMER)
    theirs, _ = median_time_ms(lambda: torch.matmul(a, b), device, timer)
    return {"alcop_ms": ours, "torch_ms": theirs, "speedup_vs_torch": theirs / ours, "timer": timer,
            "max_rel_error": err}


def environment(device: str) -> dict[str, Any]:
    import torch
    import triton

    import alcop_triton

    return {"device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu (triton interpreter)",
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "triton": triton.__version__, "alcop_triton": alcop_triton.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def markdown(report: dict[str, Any]) -> str:
    env, rows = report["environment"], report["runs"]
    phases = ("start", "space", "model", "compile", "measure", "other")
    lines = [
        "# Tuning time of `alcop-tune tune` on unseen shapes",
        "",
        f"Generated by `python benchmarks/tune_speed.py` on {env['device']} ({env['cpu_count']} CPU cores), "
        f"torch {env['torch']}, Triton {env['triton']}, alcop_triton {env['alcop_triton']}, {env['date']}.",
        "",
        f"Each shape: `alcop-tune tune matmul SHAPE --dtype {DTYPE} --layout {LAYOUT} --trials {report['trials']}"
        f"{''.join(' ' + x for x in report['tune_args'])}` in a fresh process (fresh tuning database). "
        + ("Seeding on: the first batches measure dispatch's configs for the shape (the config an untuned call "
           "runs, the best of the nearest shipped shapes); **seeds** = trials that measured one, **best** = whether "
           "the best config is one of them or the tuner's own. " if report["seeding"] else
           "Seeding off (`--no-seed`): the tuner's own proposals only. ")
        + "**wall** = that process's wall time measured by the caller with "
        "`time.perf_counter` (process start and imports included); the split is the command's own "
        "(`--json`, wall clock per phase). "
        + ("Triton's cache started empty: the first shape compiles every candidate it measures, later shapes reuse "
           "the kernels of configs compiled before. " if report["fresh_cache"] else "Triton's cache was kept. ")
        + "**alcop / torch**: the tuned config and `torch.matmul` on the same inputs, one process, one timer per "
          f"row: {'; '.join(sorted({r['compare']['timer'] for r in rows})) or '-'}.",
        "",
        "| # | shape (M x N x K) | wall s | " + " | ".join(phases) + " | trials run / budget | early stop | seeds | best "
        "| alcop ms | torch ms | torch / alcop |",
        "|---|---|---|" + "---|" * len(phases) + "---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        t, c = r["tune"], r["compare"]
        split = t["seconds"]
        lines.append(f"| {i} | {r['shape']} | {r['wall_s']:.1f} | " + " | ".join(f"{split.get(p, 0.0):.1f}" for p in phases)
                     + f" | {t['trials_run']} / {t['budget']} | {'yes' if t['early_stopped'] else 'no'} | "
                       f"{t.get('seed_trials', 0)} | {'seed' if t.get('best_is_seed') else 'tuner'} | "
                       f"{c['alcop_ms']:.4f} | {c['torch_ms']:.4f} | {c['speedup_vs_torch']:.3f}x |")
    s = report["summary"]
    lines += [
        "",
        f"First shape (cold compile cache): {s['first_wall_s']:.1f} s wall. Later shapes: mean {s['rest_mean_wall_s']:.1f} s, "
        f"max {s['rest_max_wall_s']:.1f} s. Mean torch / alcop over all shapes: {s['mean_speedup_vs_torch']:.3f}x "
        f"(geomean {s['geomean_speedup_vs_torch']:.3f}x).",
        "",
        "Shapes and why they were chosen:",
        "",
        *(f"- {r['shape']}: {r['reason']}" for r in rows),
        "",
    ]
    return "\n".join(lines)


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    speed = [r["compare"]["speedup_vs_torch"] for r in rows]
    rest = [r["wall_s"] for r in rows[1:]] or [rows[0]["wall_s"]]
    return {"first_wall_s": rows[0]["wall_s"], "rest_mean_wall_s": statistics.mean(rest), "rest_max_wall_s": max(rest),
            "mean_speedup_vs_torch": statistics.mean(speed), "geomean_speedup_vs_torch": statistics.geometric_mean(speed)}


class SyntheticMeasurer:
    """``--synthetic``'s stand-in for the GPU: the analytical time of each config times a log-normal
    error (sigma 0.2, seeded by the config's name, so every run sees the same times), register prefetch
    30 % slower, after waiting ``trial_s`` per config (the tuning process waits for a real measurement
    as long, its interpreter released)."""

    def __init__(self, workload: Any, spec: Any, trial_s: float) -> None:
        self.workload, self.spec, self.trial_s = workload, spec, trial_s

    def measure(self, configs: Any, on_result: Any = None) -> list[Any]:
        import math
        import zlib

        import numpy as np

        from alcop_triton.autotune.measure import MeasureResult
        from alcop_triton.model.analytical import estimate

        out = []
        for c in configs:
            time.sleep(self.trial_s)
            error = math.exp(0.2 * np.random.default_rng(zlib.crc32(str(c).encode())).standard_normal())
            t_ms = estimate(self.workload, c, self.spec).time_s * 1e3 * error * (1.3 if c.reg_stages > 1 else 1.0)
            out.append(MeasureResult(c, t_ms, None, "", "synthetic"))
            if on_result is not None:
                on_result(out[-1])
        return out


def run_synthetic(shapes: list[tuple[int, int, int]], trials: int, trial_s: float, seeding: bool) -> list[dict[str, Any]]:
    """``session.tune`` of each shape with ``SyntheticMeasurer``: its time split and CPU time."""
    import inspect
    import tempfile

    from alcop_triton.autotune import session
    from alcop_triton.autotune.database import Database, GpuKey
    from alcop_triton.autotune.tuner import EarlyStop
    from alcop_triton.model.hardware import get_spec
    from alcop_triton.records import Workload

    spec = get_spec("H100")
    target = session.Target("cuda", spec, GpuKey("H100", "9.0"), "synthetic (no GPU)", spec.mma)
    # Code from before seeding existed takes no such keyword (and seeds nothing).
    kw = {"seeding": seeding} if "seeding" in inspect.signature(session.tune).parameters else {}
    rows = []
    for shape in shapes:
        w = Workload("matmul", shape, DTYPE, LAYOUT)
        db = Database(Path(tempfile.mkdtemp()) / "tune.sqlite")
        cpu0 = time.process_time()
        r = session.tune(w, target, db, n_trials=trials, batch_size=8, measurer=SyntheticMeasurer(w, spec, trial_s),
                         early_stop=EarlyStop(), compile_workers=0, **kw)
        rows.append({"shape": "x".join(map(str, shape)), "seconds": r.timings, "cpu_s": time.process_time() - cpu0,
                     "trials_run": len(r.trials), "seed_trials": getattr(r, "seed_trials", 0),
                     "best_synthetic_ms": r.best.result.time_ms if r.best is not None else None,
                     "seeding": bool(kw.get("seeding", False))})
        print(f"[tune_speed] {rows[-1]['shape']}: space {r.timings['space']:.2f} s, model {r.timings['model']:.2f} s, "
              f"{len(r.trials)} trials", flush=True)
    return rows


def synthetic_markdown(report: dict[str, Any]) -> str:
    env, rows = report["environment"], report["runs"]
    lines = ["# Tuning process phases with a synthetic measurer (no GPU)", "",
             f"Generated by `python benchmarks/tune_speed.py OUT --synthetic {report['trial_s']:g}"
             f"{''.join(' ' + x for x in report['tune_args'])}` on {env['device']} ({env['cpu_count']} CPU cores), "
             f"Python {env['python']}, torch {env['torch']}, Triton {env['triton']}, {env['date']}"
             + (f"; code: {report['label']}" if report["label"] else "") + ".", "",
             f"`session.tune` of each shape in one process: `analytical+xgb`, budget {report['trials']}, batch 8, early "
             f"stop on, seeding {'on' if report['seeding'] else 'off'}, no compile workers; the measurer returns the "
             f"analytical time times a fixed per-config error after waiting {report['trial_s']:g} s per config (a GPU "
             "measurement's wall time, during which the tuning process waits). Seconds are wall clock per phase "
             "(`time.perf_counter`, the command's own split); CPU s = `time.process_time` of the call (every thread).",
             "**best** = the best synthetic time found (ms): which configs the tuner reached under the same made-up "
             "times, nothing about real kernels.",
             "", "| shape (M x N x K) | space s | model s | measure s | other s | total s | CPU s | trials | seeds | best |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["seconds"]
        lines.append(f"| {r['shape']} | {t['space']:.2f} | {t['model']:.2f} | {t['measure']:.2f} | {t['other']:.2f} | "
                     f"{t['total']:.2f} | {r['cpu_s']:.2f} | {r['trials_run']} | {r['seed_trials']} | "
                     f"{r['best_synthetic_ms']:.4f} |")
    mean = {k: statistics.mean(r["seconds"][k] for r in rows) for k in ("space", "model")}
    lines += ["", f"Mean: space {mean['space']:.2f} s, model {mean['model']:.2f} s, CPU "
                  f"{statistics.mean(r['cpu_s'] for r in rows):.2f} s.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="output directory")
    ap.add_argument("--shapes", nargs="+", type=parse_shape, help="M x N x K shapes (default: the five in SHAPES)")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--device", help="cuda or cpu (default: cuda if available, else the interpreter)")
    ap.add_argument("--keep-cache", action="store_true", help="use the current Triton cache instead of a fresh one")
    ap.add_argument("--tune-arg", action="append", default=[], help="extra argument for `alcop-tune tune` (repeatable)")
    ap.add_argument("--synthetic", type=float, metavar="SECONDS",
                    help="no GPU: time the tuning process's phases with a synthetic measurer waiting SECONDS per config")
    ap.add_argument("--label", default="", help="--synthetic: what code was timed (shown in the report)")
    a = ap.parse_args(argv)
    shapes = a.shapes or [parse_shape(s) for s in SHAPES]
    seen = unseen_problems(shapes)
    if seen:
        raise SystemExit(f"shapes already in the shipped table or the held-out set: {', '.join(seen)}")
    import torch

    if a.synthetic is not None:
        rows = run_synthetic(shapes, a.trials, a.synthetic, "--no-seed" not in a.tune_arg)
        env = dict(environment("cpu"), device=f"CPU ({platform.machine()}, no GPU)")
        report = {"environment": env, "trials": a.trials, "trial_s": a.synthetic, "label": a.label,
                  "tune_args": list(a.tune_arg), "seeding": all(r["seeding"] for r in rows), "runs": rows}
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "tune_speed_synthetic.json").write_text(json.dumps(report, indent=1) + "\n")
        (a.out / "tune_speed_synthetic.md").write_text(synthetic_markdown(report))
        print(f"wrote {a.out / 'tune_speed_synthetic.json'} and {a.out / 'tune_speed_synthetic.md'}")
        return 0

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if not a.keep_cache:
        cache = out / f"triton_cache_{os.getpid()}"
        env["TRITON_CACHE_DIR"] = str(cache)
        os.environ["TRITON_CACHE_DIR"] = str(cache)  # this process's comparison compiles into it too
    extra = list(a.tune_arg) + (["--device", device] if a.device else [])
    rows = []
    for shape in shapes:
        row = run_tune(shape, a.trials, out, env, extra)
        best = row["tune"]["best"]
        if best is None:
            raise RuntimeError(f"{row['shape']}: no valid config was found; see {out}/tune_{row['shape']}.log")
        row["compare"] = compare_with_torch(shape, best["config"], device)
        rows.append(row)
        print(f"[tune_speed] {row['shape']}: {row['wall_s']:.1f} s wall, {row['tune']['trials_run']} trials, "
              f"torch/alcop {row['compare']['speedup_vs_torch']:.3f}x", flush=True)
    report = {"environment": environment(device), "trials": a.trials, "fresh_cache": not a.keep_cache,
              "seeding": all(r["seeding"] for r in rows), "tune_args": extra,
              "wall_timer": "time.perf_counter around the subprocess (process start included)", "runs": rows,
              "summary": summarise(rows)}
    (out / "tune_speed.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "tune_speed.md").write_text(markdown(report))
    print(f"wrote {out / 'tune_speed.json'} and {out / 'tune_speed.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

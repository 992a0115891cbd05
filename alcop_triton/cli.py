"""alcop-tune: tune, benchmark and inspect ALCOP kernel configs from the command line.

Commands:
    tune            tune an op's shapes, a suite file or a torch model's GEMM/conv shapes
    bench           alcop (tuned) vs torch vs Triton tutorial 03's configs: table + CSV/JSON
    show            database contents: best config per workload (or every record)
    export          best configs as ``triton.Config(...)`` lines, JSON or JSONL
    import          add JSONL records (another machine's export, benchmarks/data) to the database
    copy            copy records between two databases (SQLite files or postgresql:// URLs)
    compare-tuners  best-in-k curves of the five tuners, offline, by replaying measurements
    report          PNG plots: tuning curves, per-shape speedups (needs the ``plots`` extra)
    calibrate       measure this GPU's constants for the performance model

The database is ``--db`` or ``$ALCOP_DB``: a SQLite file or a ``postgresql://`` URL (default: a file in the
user data dir). Without CUDA, kernels run
in the Triton interpreter (``TRITON_INTERPRET=1`` is set before triton is imported) and CPU
timings are stored under the GPU key ``interpreter``, where ``bench`` on the same machine finds them.

Each command is a ``cmd_*`` function and its parser a ``_add_*`` function; its arguments are checked
(``cli_args``: types while parsing, then the command's ``check``) before it starts any work, and a
user error ends in one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from . import cli_args as ca
from .cli_args import UsageError, parse_shape
from .errors import AlcopError, LoweringError
from .records import DTYPES, OPS, KernelConfig, Workload

__all__ = ["EXIT_INTERRUPTED", "EXIT_USAGE", "build_parser", "main", "parse_shape", "suite_workloads"]

EXIT_INTERRUPTED = 130
EXIT_USAGE = 2


def _conv_op(op: str) -> bool:
    return op.startswith("conv")


def suite_workloads(path: str | os.PathLike[str], dtype: str, ops: Sequence[str] | None = None) -> list[Workload]:
    """Workloads of an ALCOP suite file (the format of ``tests/data/alcop_suite.json``).

    Sections: ``dense`` (matmul, B stored N x K: layout 'nt'), ``bmm`` (B stored N x K), ``conv2d``
    and ``conv3d`` (channels-last inputs: 'nhwc'). A file of another form is a ``UsageError`` naming
    the file and what is wrong.
    """
    with open(path, encoding="utf-8") as f:
        try:
            suite = json.load(f)
        except ValueError as exc:
            raise UsageError(f"suite file {path}: not JSON ({exc})") from None
    if not isinstance(suite, dict):
        raise UsageError(f"suite file {path}: expected a JSON object of sections {', '.join(ca.SUITE_SECTIONS)}")
    sections = {"dense": ("matmul", "shapes_MNK", "nt"), "bmm": ("bmm", "shapes_BMNK", "nt"),
                "conv2d": ("conv2d", "shapes", "nhwc"), "conv3d": ("conv3d", "shapes", "nhwc")}
    out: list[Workload] = []
    for name, (op, key, layout) in sections.items():
        if name in suite and (not ops or name in ops or op in ops):
            shapes = suite[name].get(key) if isinstance(suite[name], dict) else None
            if not isinstance(shapes, list) or not all(isinstance(s, list) for s in shapes):
                raise UsageError(f"suite file {path}: section {name!r} needs {key!r}: a list of shapes (lists of ints)")
            for s in shapes:
                try:
                    out.append(Workload(op, tuple(s), dtype, layout))
                except (TypeError, ValueError) as exc:
                    raise UsageError(f"suite file {path}: section {name!r}: {exc}") from None
    return list(dict.fromkeys(out))


def _workloads(args: argparse.Namespace) -> list[Workload]:
    """Workloads named on the command line: op + shapes, --suite, and/or --model."""
    out: list[Workload] = []
    if args.op is not None:
        if args.op not in OPS:
            raise UsageError(f"op {args.op!r} is unknown; expected one of {', '.join(OPS)}")
        if not args.shapes:
            raise UsageError(f"{args.op}: give at least one shape, e.g. 1024x768x3072")
        layout = args.layout or ("nhwc" if _conv_op(args.op) else "nn")
        for s in args.shapes:
            try:
                out.append(Workload(args.op, s, args.dtype, layout))
            except ValueError as exc:
                raise UsageError(f"shape {'x'.join(map(str, s))}: {exc}") from None
    elif args.shapes:
        raise UsageError(f"shape {'x'.join(map(str, args.shapes[0]))} given without an op; name one of {', '.join(OPS)}")
    if args.suite:
        out += suite_workloads(args.suite, args.dtype, args.suite_ops)
    if args.model:
        from .autotune.capture import capture_factory

        out += capture_factory(args.model, device=args.capture_device, dtype=args.dtype)
    if not out:
        raise UsageError("nothing to do: name an op and shapes, --suite FILE or --model module:callable")
    return list(dict.fromkeys(out))


def _check_workload_args(args: argparse.Namespace) -> None:
    """tune's and bench's workload options, device and GPU; sets ``args.workloads``."""
    ca.check_layout(args.op, args.layout)
    ca.check_device(args.device)
    ca.check_gpu(args.gpu)
    ca.check_model(args.model)
    args.workloads = _workloads(args)


def _db(args: argparse.Namespace) -> Any:
    from .autotune.store import open_database

    return open_database(args.db)


def _prepare_device(device: str | None) -> str:
    """cuda if torch sees one (or asked for), else the CPU interpreter, set up before triton loads."""
    if device is None or device == "cpu":
        import torch

        if device is None and torch.cuda.is_available():
            return "cuda"
        # Must precede the first triton import of this process and of its measurement children.
        os.environ["TRITON_INTERPRET"] = "1"
        return "cpu"
    return device


def _tflops(w: Workload, ms: float | None) -> str:
    return f"{w.flops / (ms * 1e-3) / 1e12:.1f}" if ms else "-"


def _print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    print(fmt.format(*header))
    print(fmt.format(*("-" * w for w in widths)))
    for r in rows:
        print(fmt.format(*map(str, r)))


# ----------------------------------------------------------------------------------------------

def _tune_summary(w: Workload, result: Any, budget: int, split: dict[str, float]) -> dict[str, Any]:
    """One workload's entry of ``tune --json``: best config, trials run, early stop and the time split."""
    b = result.best
    return {"workload": w.to_dict(), "tuner": result.tuner, "budget": budget, "trials_run": len(result.trials),
            "failed": sum(1 for t in result.trials if not t.result.ok), "early_stopped": result.early_stopped,
            "interrupted": result.interrupted, "seed_trials": result.seed_trials, "best_is_seed": result.best_is_seed,
            "best": None if b is None else {"config": b.config.to_dict(), "time_ms": b.result.time_ms,
                                            "timer": b.result.timer},
            "seconds": split}


def cmd_tune(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .autotune.timing import format_split, process_start_time

    started = process_start_time()
    start_s = max(0.0, args.main_time - started) if started is not None else 0.0
    workloads = args.workloads
    if args.gpus is not None or args.scheduler is not None:
        return _cmd_tune_pool(args, workloads)
    device = _prepare_device(args.device)
    from .autotune import session
    from .autotune.tuner import EarlyStop

    target = session.resolve_target(device, args.gpu)
    db = _db(args)
    print(f"tuning {len(workloads)} workload(s) on {target.device_name} ({target.key.name}, cc {target.key.cc}) "
          f"with {args.tuner}, {args.trials} trials each; records -> {db.path}")
    if target.device == "cpu":
        print("note: no CUDA device; measuring in the Triton interpreter (slow; times are CPU times)")
    early_stop = EarlyStop(patience=args.patience) if args.early_stop else None
    summary: list[list[str]] = []
    entries: list[dict[str, Any]] = []

    def write_json() -> None:
        # Rewritten (atomically) after every workload: a run stopped from outside keeps the summary of
        # the workloads it finished, as the database keeps their records. "complete": every workload ran.
        from .autotune.database import atomic_write_text, versions

        atomic_write_text(args.json, json.dumps({
            "command": "alcop-tune tune", "device": target.device_name, "gpu": target.key.name,
            "versions": versions(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "timer": "wall clock (time.perf_counter / time.time); process start from /proc",
            "seeding": args.seeding,
            "early_stop": None if early_stop is None else {"patience": early_stop.patience,
                                                           "min_gain": early_stop.min_gain,
                                                           "min_trials": early_stop.min_trials},
            "complete": len(entries) == len(workloads) and not entries[-1]["interrupted"],
            "workloads": entries}, indent=1) + "\n")
    t_mark = args.main_time
    for w in workloads:
        bar = tqdm(total=args.trials, desc=w.key(), unit="trial", leave=True, dynamic_ncols=True)
        best = {"ms": None}

        def on_trial(t: Any, bar: Any = bar, best: dict[str, Any] = best, w: Workload = w) -> None:
            if t.result.ok and (best["ms"] is None or t.result.time_ms < best["ms"]):
                best["ms"] = t.result.time_ms
            bar.update(1)
            bar.set_postfix_str(f"best {_tflops(w, best['ms'])} TFLOP/s" if best["ms"] else "no valid config yet")

        try:
            result = session.tune(w, target, db, tuner=args.tuner, n_trials=args.trials, batch_size=args.batch,
                                  seed=args.seed, variant=args.variant, top_k=args.top_k, timeout_s=args.timeout,
                                  on_trial=on_trial, early_stop=early_stop, compile_workers=args.compile_workers,
                                  seeding=args.seeding)
        finally:
            bar.close()
        # This workload's wall time: the first also carries the process start and the command's setup.
        now = time.time()
        split = dict(result.timings)
        split["start"] = start_s if not entries else 0.0
        split["other"] = split.get("other", 0.0) + max(0.0, now - t_mark - split.get("total", 0.0))
        split["total"] = now - t_mark + split["start"]
        t_mark = now
        entries.append(_tune_summary(w, result, args.trials, split))
        if args.json:
            write_json()
        b = result.best
        failed = sum(1 for t in result.trials if not t.result.ok)
        stopped = f" (early stop: {len(result.trials)} of {args.trials} trials)" if result.early_stopped else ""
        seeded = (f"; {result.seed_trials} seed config(s) measured, the best "
                  + ("is one of them" if result.best_is_seed else "is the tuner's")) if result.seed_trials else ""
        print(f"{w.key()}: {format_split(split)}{stopped}{seeded}")
        summary.append([w.key(), str(b.config) if b else "(none valid)",
                        f"{b.result.time_ms:.4f}" if b else "-", _tflops(w, b.result.time_ms if b else None),
                        f"{len(result.trials)}/{failed}"])
        if result.interrupted:
            print(f"interrupted during {w.key()} after {len(result.trials)} trial(s); every measured record "
                  f"is in {db.path}", file=sys.stderr)
            break
    _print_table(summary, ["workload", "best config", "ms", "TFLOP/s", "trials/failed"])
    if args.json and entries:
        print(f"wrote {args.json}")
    return EXIT_INTERRUPTED if entries and entries[-1]["interrupted"] else 0


def _cmd_tune_pool(args: argparse.Namespace, workloads: list[Workload]) -> int:
    """``tune --gpus`` / ``--scheduler``: the workloads over a pool of measurement workers (``autotune.workers``)."""
    from .autotune import workers
    from .autotune.database import atomic_write_text, versions
    from .autotune.tuner import EarlyStop

    if args.gpus is not None and args.scheduler is not None:
        raise AlcopError(f"--gpus {args.gpus!r} and --scheduler {args.scheduler!r}: give one (this host's GPUs, "
                         "or a Dask cluster's workers)")
    if args.device is not None and args.device.startswith("cuda:"):
        raise AlcopError(f"--device {args.device!r} with --gpus/--scheduler: the pool pins one worker per GPU; "
                         "choose GPUs with CUDA_VISIBLE_DEVICES")
    kind = "cpu" if _prepare_device(args.device) == "cpu" else "cuda"
    options = workers.MeasureOptions(device=kind, timeout_s=args.timeout, compile_threads=args.batch,
                                     compile_workers=args.compile_workers)
    pool: Any
    if args.scheduler is not None:
        from .autotune.dask_pool import DaskPool

        pool = DaskPool(args.scheduler, device=kind)
    else:
        pool = workers.LocalGpuPool(workers.parse_gpus(args.gpus), device=kind)
    entries: list[dict[str, Any]] = []
    early_stop = EarlyStop(patience=args.patience) if args.early_stop else None
    t0 = time.time()
    with pool:
        cal = workers.calibrate(pool, options)
        print(f"{len(cal.group)} of {len(pool.labels)} worker(s) rank their timings together:")
        for line in cal.describe():
            print(f"  {line}")

        def done(w: Workload, result: Any) -> None:
            entries.append(_tune_summary(w, result, args.trials, dict(result.timings)))
            b = result.best
            print(f"{w.key()}: {len(result.trials)} trials, best "
                  + (f"{b.config} {b.result.time_ms:.4f} ms ({_tflops(w, b.result.time_ms)} TFLOP/s) on "
                     f"{b.result.measured_on.uuid if b.result.measured_on else '?'}" if b else "(none valid)"),
                  flush=True)
            if args.json:
                atomic_write_text(args.json, json.dumps({
                    "command": "alcop-tune tune", "workers": cal.to_dict(), "versions": versions(),
                    "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "seconds": time.time() - t0,
                    "trials": sum(e["trials_run"] for e in entries),
                    "complete": len(entries) == len(workloads), "workloads": entries}, indent=1) + "\n")

        db = _db(args)
        print(f"tuning {len(workloads)} workload(s) with {args.tuner}, {args.trials} trials each; records -> "
              f"{db.location}", flush=True)
        results = workers.tune_workloads(workloads, pool, db, options=options, calibration=cal, gpu=args.gpu,
                                         on_done=done, tuner=args.tuner, n_trials=args.trials, batch_size=args.batch,
                                         seed=args.seed, variant=args.variant, top_k=args.top_k,
                                         timeout_s=args.timeout, early_stop=early_stop, seeding=args.seeding)
    trials = sum(len(r.trials) for _, r in results)
    print(f"{trials} trials in {time.time() - t0:.1f} s ({trials / max(time.time() - t0, 1e-9):.2f} trials/s)")
    return EXIT_INTERRUPTED if any(r.interrupted for _, r in results) else 0


def cmd_bench(args: argparse.Namespace) -> int:
    device = _prepare_device(args.device)
    from .autotune import bench, session

    target = session.resolve_target(device, args.gpu)
    rows = bench.run(args.workloads, target, _db(args), tutorial=not args.no_tutorial, timeout_s=args.timeout)
    print(bench.format_table(rows))
    if args.csv:
        bench.write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    if args.json:
        bench.write_json(rows, args.json, target)
        print(f"wrote {args.json}")
    return 0


def _selected_records(args: argparse.Namespace) -> list[Any]:
    db = _db(args)
    if not db.exists():
        raise UsageError(f"no tuning database at {db.location}; run `alcop-tune tune ...` or pass --db")
    records = db.records(op=args.op)
    if args.gpu:
        records = [r for r in records if r.gpu.lower() == args.gpu.lower()]
    return records


class Group(NamedTuple):
    """Records of one workload on one GPU and MMA path, and its fastest configs."""

    gpu: Any  # GpuKey
    mma: str
    workload: Workload
    ranked: list[Any]  # RankedConfig, fastest first
    records: int
    failed: int

    @property
    def label(self) -> str:
        return f"{self.gpu.name}/{self.mma}" if self.mma else self.gpu.name


def _groups(records: list[Any], top: int) -> list[Group]:
    from .autotune.database import current_version_group, rank_configs

    groups: dict[tuple[Any, str, Workload], list[Any]] = {}
    for r in records:
        groups.setdefault((r.gpu_key, r.mma, r.workload), []).append(r)
    return [Group(g, mma, w, rank_configs(current_version_group(rs))[:top], len(rs), sum(not r.ok for r in rs))
            for (g, mma, w), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2].key()))]


def cmd_show(args: argparse.Namespace) -> int:
    records = _selected_records(args)
    if args.all:
        rows = [[r.gpu + (f"/{r.mma}" if r.mma else ""), r.workload.key(), str(r.config),
                 f"{r.time_ms:.4f}" if r.ok else "-", r.error or "", r.timer, r.date] for r in records]
        _print_table(rows, ["gpu", "workload", "config", "ms", "error", "timer", "date"])
        return 0
    rows = []
    for g in _groups(records, args.top):
        if not g.ranked:
            rows.append([g.label, g.workload.key(), "(no valid config)", "-", "-", f"{g.records}/{g.failed}"])
        for i, rc in enumerate(g.ranked):
            first = i == 0
            rows.append([g.label if first else "", g.workload.key() if first else "", str(rc.config),
                         f"{rc.time_ms:.4f}", _tflops(g.workload, rc.time_ms), f"{g.records}/{g.failed}" if first else ""])
    if not rows:
        print("no records match")
        return 0
    _print_table(rows, ["gpu", "workload", "config", "ms", "TFLOP/s", "records/failed"])
    return 0


def _triton_config_line(c: KernelConfig) -> str:
    d = c.to_dict()
    meta = {k: v for k, v in d.items() if k not in ("num_warps", "num_stages")}
    return f"triton.Config({meta!r}, num_warps={c.num_warps}, num_stages={c.smem_stages})"


def cmd_export(args: argparse.Namespace) -> int:
    from .autotune.database import atomic_write_text

    records = _selected_records(args)
    groups = _groups(records, args.top)
    if args.format == "jsonl":
        if args.all:
            lines = [r.to_json() for r in records]
        else:
            # The fastest run of each chosen config, as a record: a shippable default table.
            chosen = {(g.gpu, g.mma, g.workload): {rc.config for rc in g.ranked} for g in groups}
            keep: dict[tuple[Any, str, Workload, KernelConfig], Any] = {}
            for r in records:
                key = (r.gpu_key, r.mma, r.workload, r.config)
                if r.ok and r.config in chosen.get(key[:3], ()):
                    if key not in keep or r.time_ms < keep[key].time_ms:
                        keep[key] = r
            lines = [r.to_json() for r in keep.values()]
        text = "".join(line + "\n" for line in lines)
    elif args.format == "json":
        text = json.dumps([{"gpu": g.gpu.name, "cc": g.gpu.cc, "mma": g.mma, "workload": g.workload.to_dict(),
                            "configs": [{"config": rc.config.to_dict(), "time_ms": rc.time_ms, "runs": rc.count}
                                        for rc in g.ranked]} for g in groups if g.ranked], indent=1) + "\n"
    else:
        lines = ["# Generated by `alcop-tune export --format triton`: best configs per workload.",
                 "import triton", "", "configs = ["]
        for g in groups:
            for rc in g.ranked:
                # Strings from the database are written with repr: no text of theirs can end the comment.
                lines.append(f"    # {g.label!r} (cc {g.gpu.cc!r}) {g.workload.key()!r}: {rc.time_ms:.4f} ms")
                lines.append(f"    {_triton_config_line(rc.config)},")
        text = "\n".join(lines + ["]", ""])
    if args.output:
        atomic_write_text(args.output, text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Every valid line of every file is imported; rejected lines are listed with their line numbers."""
    from .autotune.database import scan_jsonl

    db = _db(args)
    total, rejected_total = 0, 0
    for p in args.files:
        try:
            records, rejected = scan_jsonl(p)
        except OSError as exc:
            print(f"{p}: cannot read: {exc}", file=sys.stderr)
            rejected_total += 1
            continue
        n = db.add(records)
        total += n
        rejected_total += len(rejected)
        for where, why in rejected:
            print(f"{p}: {where}: rejected: {why}", file=sys.stderr)
        print(f"{p}: {n} record(s) imported" + (f", {len(rejected)} line(s) rejected" if rejected else ""))
    print(f"{total} record(s) added to {db.location}")
    return 1 if rejected_total else 0


def cmd_copy(args: argparse.Namespace) -> int:
    """Every valid record of SRC that DST lacks, added to DST in one transaction (SRC is only read)."""
    from .autotune.store import copy_records, open_database

    src, dst = open_database(args.src), open_database(args.dst)
    if not src.exists():
        raise AlcopError(f"no tuning database at {src.location}")
    copied, present = copy_records(src, dst)
    print(f"{copied} record(s) copied from {src.location} to {dst.location}"
          + (f", {present} already there" if present else ""))
    return 0


def _data_files(paths: Sequence[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted([*p.glob("*.jsonl"), *p.glob("*.jsonl.gz")]) if p.is_dir() else [p]
    if not files:
        raise UsageError(f"no JSONL measurement files (*.jsonl, *.jsonl.gz) in {', '.join(paths)}")
    return files


def _load_tasks(paths: Sequence[str]) -> list[Any]:
    """Replay tasks of the records in these files and directories, with a progress bar over the files.

    A file in which no line is a tuning record (a probe's own rows kept beside the measurement files) is
    skipped with one line saying so; a records file with some bad lines warns about those lines."""
    from tqdm import tqdm

    from .autotune.database import scan_jsonl, warn_skipped
    from .autotune.replay import group_tasks

    records: list[Any] = []
    files = _data_files(paths)
    with tqdm(files, desc="read", unit="file", dynamic_ncols=True, leave=False) as bar:
        for f in bar:
            found, rejected = scan_jsonl(f)
            if rejected and not found:
                where, why = rejected[0]
                bar.write(f"{f}: skipped, not a file of tuning records ({where}: {why})", file=sys.stderr)
                continue
            warn_skipped(str(f), rejected)
            records += found
    tasks = group_tasks(records)
    if not tasks:
        raise UsageError(f"no tuning records in {', '.join(paths)}")
    return tasks


def _replay(tasks: Sequence[Any], tuners: Sequence[str], *, k_max: int, seeds: int, batch: int, jobs: int) -> Any:
    """``compare_tuners`` with a progress bar over the tasks (a full data directory takes minutes)."""
    from tqdm import tqdm

    from .autotune.replay import compare_tuners

    with tqdm(total=len(tasks), desc="replay", unit="workload", dynamic_ncols=True) as bar:
        def tick(_: str) -> None:
            bar.update(1)

        return compare_tuners(tasks, tuners, k_max=k_max, seeds=seeds, batch_size=batch, jobs=jobs, progress=tick)


def _check_compare(args: argparse.Namespace) -> None:
    too_far = [k for k in args.budgets if k > args.k_max]
    if too_far:
        raise UsageError(f"--budgets {','.join(map(str, too_far))}: larger than --k-max {args.k_max}")


def cmd_compare(args: argparse.Namespace) -> int:
    tasks = _load_tasks(args.data)
    if args.workload:
        tasks = [t for t in tasks if any(s in t.key for s in args.workload)]
    if not tasks:
        raise UsageError(f"--workload {' '.join(args.workload)}: no (GPU, workload) in the data matches")
    comp = _replay(tasks, args.tuners, k_max=args.k_max, seeds=args.seeds, batch=args.batch, jobs=args.jobs)
    print(comp.table(args.budgets, per_task=args.per_task))
    if args.json:
        comp.save(args.json)
        print(f"wrote {args.json}")
    return 0


def _read_json(path: str, what: str) -> Any:
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except ValueError as exc:
            raise UsageError(f"{path}: not JSON ({exc}); expected {what}") from None


def _check_report(args: argparse.Namespace) -> None:
    if not (args.curves or args.data or args.bench):
        raise UsageError("nothing to plot: give --curves FILE, --data FILE|DIR ... or --bench FILE")
    ca.check_plots()  # before a replay of minutes, not after it


def _bench_rows(path: str) -> list[dict[str, Any]]:
    doc = _read_json(path, "the JSON `alcop-tune bench --json` writes")
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("workload"), str) for r in rows):
        raise UsageError(f"{path}: expected the JSON `alcop-tune bench --json` writes (an object whose 'rows' "
                         f"are objects with a 'workload')")
    return rows


def cmd_report(args: argparse.Namespace) -> int:
    from .autotune import report
    from .autotune.replay import Comparison
    from .autotune.tuner import TUNERS

    rows = _bench_rows(args.bench) if args.bench else None
    out = Path(args.out)
    written: list[Path] = []
    comp = None
    if args.curves:
        _read_json(args.curves, "the curves `alcop-tune compare-tuners --json` saves")
        try:
            comp = Comparison.load(args.curves)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{args.curves}: not the curves `alcop-tune compare-tuners --json` saves "
                             f"({type(exc).__name__}: {exc})") from None
    elif args.data:
        comp = _replay(_load_tasks(args.data), TUNERS, k_max=args.k_max, seeds=args.seeds, batch=8,
                       jobs=min(8, os.cpu_count() or 1))
    if comp is not None:
        written += report.plot_curves(comp, out)
        (out / "tuning_curves.txt").write_text(comp.table((10, 50), per_task=True) + "\n")
        written.append(out / "tuning_curves.txt")
    if rows is not None:
        written.append(report.plot_speedups(rows, out))
    for p in written:
        print(f"wrote {p}")
    return 0


def _check_calibrate(args: argparse.Namespace) -> None:
    ca.require_cuda("calibrate")


def cmd_calibrate(args: argparse.Namespace) -> int:
    from .model import calibrate

    return calibrate.run(quick=args.quick, dry_run=args.dry_run)


# ----------------------------------------------------------------------------------------------
# Parsers: one function per command. ``check`` runs after parsing and before ``func`` (cli_args).

def _no_check(args: argparse.Namespace) -> None:
    pass


def _command(sub: Any, name: str, func: Callable[[argparse.Namespace], int],
             check: Callable[[argparse.Namespace], None] = _no_check, **kw: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, **kw)
    p.set_defaults(func=func, check=check)
    return p


def _add_workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", nargs="?", choices=OPS, help=f"operator: {', '.join(OPS)}")
    p.add_argument("shapes", nargs="*", type=parse_shape, metavar="SHAPE",
                   help="e.g. 1024x768x3072 (M x N x K); bmm: B x M x N x K; conv2d: N x H x W x CI x CO x KH x KW "
                        "x stride x pad")
    p.add_argument("--dtype", default="float16", choices=DTYPES)
    p.add_argument("--layout", help=f"operand layout of the op given with shapes: {', '.join(ca.GEMM_LAYOUTS)} for "
                                    f"GEMMs (default nn), {', '.join(ca.CONV_LAYOUTS)} for conv (default nhwc)")
    p.add_argument("--suite", type=ca.input_file, help="suite JSON file (e.g. tests/data/alcop_suite.json)")
    p.add_argument("--suite-ops", type=ca.comma_list(tuple(dict.fromkeys(ca.SUITE_SECTIONS + OPS))),
                   help="comma-separated suite sections: dense,bmm,conv2d,conv3d")
    p.add_argument("--model", type=ca.model_factory,
                   help="torch model factory 'module:callable' returning (model, example_inputs)")
    p.add_argument("--capture-device", default="meta", choices=("meta", "cpu"),
                   help="device the model runs on while its shapes are captured")
    p.add_argument("--device", type=ca.device_name,
                   help="cuda, cuda:N or cpu (default: cuda if available, else the interpreter)")
    p.add_argument("--gpu", help="GPU model for the performance model (default: detected; H100 in the interpreter)")
    p.add_argument("--timeout", type=ca.positive_float, default=120.0,
                   help="seconds without progress before a config is recorded as timed out")


def _add_tune(sub: Any, common: argparse.ArgumentParser) -> None:
    from .autotune.space import VARIANTS
    from .autotune.tuner import TUNERS

    p = _command(sub, "tune", cmd_tune, _check_workload_args, parents=[common],
                 help="tune workloads and store every measurement")
    _add_workload_args(p)
    p.add_argument("--trials", type=ca.positive_int, default=50, help="measurement budget per workload")
    p.add_argument("--tuner", default="analytical+xgb", choices=TUNERS)
    p.add_argument("--batch", type=ca.positive_int, default=8,
                   help="configs compiled in parallel and measured per round")
    p.add_argument("--seed", type=ca.non_negative_int, default=0)
    p.add_argument("--variant", default="full", choices=VARIANTS, help="ablation: restrict pipelining knobs")
    p.add_argument("--top-k", type=ca.positive_int, help="keep only the analytical model's top K configs")
    p.add_argument("--early-stop", action=argparse.BooleanOptionalAction, default=True,
                   help="end a workload before --trials (after at least 32 trials) when the best time has not "
                        "improved by more than 1%% over the last --patience trials and no config of the next batch "
                        "is predicted faster than the best measured one, by the analytical model scaled with its "
                        "most favourable error on this workload (default: on)")
    p.add_argument("--patience", type=ca.positive_int, default=16,
                   help="trials without progress before early stop is considered")
    p.add_argument("--no-seed", dest="seeding", action="store_false",
                   help="do not measure dispatch's configs first (by default the first batches are the config an "
                        "untuned call would run and the best configs of the nearest measured shapes, then the "
                        "tuner's own proposals; --seed is the random seed)")
    p.add_argument("--compile-workers", type=ca.non_negative_int, default=None,
                   help="processes compiling each batch ahead of its measurement (default: every spare core on a "
                        "GPU; 0: off)")
    p.add_argument("--json", type=ca.output_file, help="write the best configs, trials run and the time split per "
                   "workload as JSON (rewritten after each workload)")
    p.add_argument("--gpus", metavar="all|N", type=ca.gpus,
                   help="measure on every GPU of this host ('all') or the first N: one worker process per GPU, "
                        "each batch spread over them, several workloads tuned side by side (with --device cpu: "
                        "N interpreter workers); docs/distributed_tuning.md")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="measure on the workers of this Dask scheduler (tcp://HOST:8786; needs "
                        "alcop_triton[distributed]); docs/distributed_tuning.md")


def _add_bench(sub: Any, common: argparse.ArgumentParser) -> None:
    p = _command(sub, "bench", cmd_bench, _check_workload_args, parents=[common],
                 help="alcop vs torch vs Triton tutorial 03 configs")
    _add_workload_args(p)
    p.add_argument("--csv", type=ca.output_file, help="write rows as CSV")
    p.add_argument("--json", type=ca.output_file, help="write rows as JSON (input of `report --bench`)")
    p.add_argument("--no-tutorial", action="store_true", help="skip the 16 tutorial-03 configs")


def _add_show_export(sub: Any, common: argparse.ArgumentParser) -> None:
    for name, helptext, func in (("show", "database contents", cmd_show),
                                 ("export", "best configs as triton.Config lines, JSON or JSONL", cmd_export)):
        p = _command(sub, name, func, parents=[common], help=helptext)
        p.add_argument("--gpu", help="only this GPU (e.g. H100)")
        p.add_argument("--op", choices=OPS, help="only this op")
        p.add_argument("--top", type=ca.positive_int, default=1, help="configs per workload")
        p.add_argument("--all", action="store_true", help="every record, not only the best")
        if name == "export":
            p.add_argument("--format", default="triton", choices=("triton", "json", "jsonl"))
            p.add_argument("-o", "--output", type=ca.output_file, help="file to write (atomically); default stdout")


def _add_import(sub: Any, common: argparse.ArgumentParser) -> None:
    p = _command(sub, "import", cmd_import, parents=[common], help="add JSONL records to the database")
    p.add_argument("files", nargs="+", help="JSONL files (.jsonl or .jsonl.gz); a file that cannot be read is "
                                            "reported and the others are imported")


def _add_copy(sub: Any) -> None:
    p = _command(sub, "copy", cmd_copy,
                 help="copy records between two databases (SQLite files or postgresql:// URLs)")
    p.add_argument("src", help="database to read: a SQLite file or a postgresql:// URL")
    p.add_argument("dst", help="database to add to (created if absent; records it holds already are skipped)")


def _add_compare(sub: Any) -> None:
    from .autotune.tuner import TUNERS

    p = _command(sub, "compare-tuners", cmd_compare, _check_compare,
                 help="best-in-k curves of the tuners, replayed offline")
    p.add_argument("data", nargs="+", type=ca.input_path,
                   help="JSONL files or directories of them (e.g. benchmarks/data)")
    p.add_argument("--tuners", type=ca.comma_list(TUNERS), default=list(TUNERS),
                   help=f"comma-separated subset of {','.join(TUNERS)}")
    p.add_argument("--k-max", type=ca.positive_int, default=50)
    p.add_argument("--seeds", type=ca.positive_int, default=5, help="seeds averaged for the randomised tuners")
    p.add_argument("--batch", type=ca.positive_int, default=8)
    p.add_argument("--budgets", type=ca.int_list, default=[10, 50], help="k values in the table (each <= --k-max)")
    p.add_argument("--workload", action="append", help="only tasks whose key contains this (repeatable)")
    p.add_argument("--per-task", action="store_true", help="also print numbers per workload")
    p.add_argument("--json", type=ca.output_file, help="save the curves (input of `report --curves`)")
    p.add_argument("--jobs", type=ca.positive_int, default=min(8, os.cpu_count() or 1),
                   help="workloads replayed in parallel")


def _add_report(sub: Any) -> None:
    p = _command(sub, "report", cmd_report, _check_report,
                 help="PNG plots of tuning curves and speedups (pip install 'alcop_triton[plots]')")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--curves", type=ca.input_file, help="JSON saved by `compare-tuners --json`")
    source.add_argument("--data", nargs="+", type=ca.input_path, help="or: replay these JSONL files/directories now")
    p.add_argument("--k-max", type=ca.positive_int, default=50, help="with --data")
    p.add_argument("--seeds", type=ca.positive_int, default=5, help="with --data")
    p.add_argument("--bench", type=ca.input_file, help="JSON saved by `bench --json`")
    p.add_argument("--out", type=ca.output_dir, default="alcop_report", help="output directory")


def _add_calibrate(sub: Any) -> None:
    p = _command(sub, "calibrate", cmd_calibrate, _check_calibrate,
                 help="measure this GPU's constants for the performance model (needs a CUDA GPU)",
                 description="Measure the current GPU (bandwidths, tensor-core rates, latencies) and store a "
                             "calibrated spec, which the performance model prefers from then on.")
    p.add_argument("--quick", action="store_true", help="smaller buffers and matrices (a few seconds)")
    p.add_argument("--dry-run", action="store_true", help="measure and print, but do not write the spec file")


def build_parser() -> argparse.ArgumentParser:
    parser = ca.Parser(prog="alcop-tune", description=(__doc__ or "").split("\n\n")[0],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    db_help = "tuning database: a SQLite file or a postgresql:// URL (default: $ALCOP_DB or the user data dir)"
    parser.add_argument("--db", help=db_help)
    # Also accepted after the command (`alcop-tune show --db x`); SUPPRESS keeps the global value.
    common = ca.Parser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, help=db_help)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_tune(sub, common)
    _add_bench(sub, common)
    _add_show_export(sub, common)
    _add_import(sub, common)
    _add_copy(sub)
    _add_compare(sub)
    _add_report(sub)
    _add_calibrate(sub)
    return parser


def _error_line(prog: str, exc: BaseException) -> str:
    return f"{prog}: error: " + " ".join(str(exc).split("\n"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; user errors (a bad argument or file, a refused database, a missing device or
    dependency) end in one line on stderr and exit status 2, internal errors keep their traceback."""
    main_time = time.time()  # the end of the process's start (interpreter, imports): tune's time split
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = "alcop-tune"
    try:
        args = build_parser().parse_args(argv)
        prog = f"alcop-tune {args.command}"
        args.main_time = main_time
        args.check(args)
        if args.db:
            # Children and dispatch in this process see the same database.
            from .autotune.db_postgres import is_postgres_url

            os.environ["ALCOP_DB"] = args.db if is_postgres_url(args.db) else str(Path(args.db).expanduser())
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted; measured records are kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except LoweringError:
        raise  # alcop's own failure: its traceback is the report
    except BrokenPipeError:
        # The reader went away (`alcop-tune export | head`): stop quietly, and point stdout at devnull
        # so that the interpreter's final flush does not fail a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except UsageError as exc:
        print(_error_line(exc.prog or prog, exc), file=sys.stderr)
        return EXIT_USAGE
    except (AlcopError, ValueError, OSError) as exc:
        # alcop's user errors, and what the system or a value read from the user's files refused;
        # their messages name the argument, file or value (other exception types are bugs).
        print(_error_line(prog, exc), file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())

"""Write docs/results.md from the latest results of each maintained harness (no number in it is typed by hand).

    python benchmarks/report_results.py [--results benchmarks/results] [--out docs/results.md] [--check]

Every section names its source file, device, versions, date, timer and the command that wrote it; ratios
are only ever formed inside one report between numbers of one timer in one run (the reports compute them).
A harness whose results are missing is listed with the command that produces them. ``--check`` exits 1
when the page differs from what the results give (a test runs the same comparison).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from overhead import patched_minus_direct  # noqa: E402  (the host-time report's own cell)

Report = dict[str, Any]


def _x(v: Any) -> str:
    return f"{v:.3f}x" if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def shown(path: Path) -> str:
    """A report's path as the page names it: relative to the repository where it lies inside."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def _meta_line(m: Report) -> str:
    return (f"{m['device']}, torch {m['torch']}, Triton {m['triton']}, alcop_triton {m['alcop']}, {m['date']}. "
            f"Timer: {m['timer']}.")


def suite_section(r: Report) -> list[str]:
    run = r["run"]
    out = [f"{run['device']}, torch {run['torch']}, Triton {run['triton']}, alcop_triton {run['alcop']}, "
           f"CUDA {run['cuda']}, {run['date']}, run `{run['run_id']}`. Timers: **eager** = {r['timers']['eager']}; "
           f"**graph** = {r['timers']['graph']}. Ratio = torch ms / implementation ms, geomean over the set's "
           "workloads (minimum in brackets); torch is cuBLAS/cuDNN in the same run with the same timer.", ""]
    if r.get("progress") and r["progress"].get("left"):
        out += [f"The run is incomplete: {r['progress']['left']} workloads not measured.", ""]
    impls = [i for i in ("alcop", "triton_tutorial", "inductor")
             if any(s["timers"].get(t, {}).get(i, {}).get("n") for s in r["summary"].values() for t in s["timers"])]
    names = {"alcop": "alcop", "triton_tutorial": "Triton tutorial", "inductor": "Inductor max-autotune"}
    out += ["| set | workloads | timer | " + " | ".join(names[i] for i in impls) + " | faster than torch (alcop) |",
            "|---|---|---|" + "---|" * (len(impls) + 1)]
    for set_, s in r["summary"].items():
        for timer in ("eager", "graph"):
            t = s["timers"].get(timer, {})
            cells = []
            for impl in impls:
                e = t.get(impl)
                cells.append(f"{_x(e['geomean'])} (min {_x(e['min'])})" if e and e["n"] else "-")
            alcop = t.get("alcop") or {}
            faster = (f"{sum(v > 1.0 for v in alcop['ratios'].values())} / {alcop['n']}"
                      if alcop.get("ratios") else "-")
            out.append(f"| {set_} | {s['workloads']} | {timer} | " + " | ".join(cells) + f" | {faster} |")
    both = r.get("forward_backward") or {}
    if both:
        out += ["", "A layer's forward and backward together, (torch's forward + backward ms) / alcop's:", ""]
        out += [f"- {set_} + {set_}_bwd, {timer}: {_x(e['geomean'])} (min {_x(e['min'])}), faster than torch on "
                f"{e['faster']} / {e['n']}" for set_, timers in both.items() for timer in ("eager", "graph")
                for impl, e in timers.get(timer, {}).items() if impl == "alcop"]
    return out + [""]


def overhead_section(r: Report) -> list[str]:
    out = [_meta_line(r["meta"]), "",
           "| op | requires_grad | bare Triton launch µs | torch µs | alcop µs | alcop / torch | patched - direct µs |",
           "|---|---|---|---|---|---|---|"]

    def us(v: Any) -> str:
        return f"{v:.1f}" if v is not None else "-"
    for s in r["summary"]:
        out.append(f"| {s['op']} | {s['requires_grad']} | {us(s['triton_us'])} | {us(s['torch_us'])} | "
                   f"{us(s['alcop_us'])} | {_x(s['alcop_over_torch'])} | {patched_minus_direct(s)} |")
    return out + [""]


def e2e_section(r: Report) -> list[str]:
    """Per (model, task), each mode's median ms with its range, its ratios to eager, compile and compile_max
    (within the pair's process), its first call and its errors against eager (a result without a task, a
    dtype or the later columns is a fp16 inference result of the report's first form)."""
    def f(v: Any, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "-"
    out = [_meta_line(r["meta"]), "",
           "| model | task | input | dtype | mode | ms | min - max | vs eager | vs compile | vs compile_max | "
           "first call s | max rel error | grad max rel error |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for res in r["results"]:
        inp = "x".join(map(str, res["input"]))
        dtype = res.get("dtype", "float16") + (f" (autocast {res['autocast']})" if res.get("autocast") else "")
        head = f"| {res['model']} | {res.get('task', 'infer')} | {inp} | {dtype} |"
        for mode, x in res["modes"].items():
            if "ms" in x:
                rng = f"{f(x.get('ms_min'), '.2f')} - {f(x.get('ms_max'), '.2f')}" if "ms_min" in x else "-"
                ci = x.get("vs_eager_interval")  # e2e.paired_interval's, in runs that kept their passes
                around = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
                out.append(f"{head} {mode} | {x['ms']:.2f} | {rng} | {_x(x.get('speedup_vs_eager'))}{around} | "
                           f"{_x(x.get('speedup_vs_compile'))} | {_x(x.get('speedup_vs_compile_max'))} | "
                           f"{f(x.get('first_call_s'), '.1f')} | {x['max_rel_err']:.1e} | "
                           f"{f(x.get('grad_max_rel_err'), '.1e')} |")
            else:
                out.append(f"{head} {mode} | error | | | | | | | |")
    calls = [f"{res['model']} {res.get('task', 'infer')} {mode}: {x['alcop_calls_in_code']}"
             + (f" (a timed pass ran {x['alcop_calls_run']})" if "alcop_calls_run" in x else "")
             for res in r["results"] for mode, x in res["modes"].items() if "alcop_calls_in_code" in x]
    if calls:
        out += ["", "Calls of alcop's ops in the code Inductor wrote: " + "; ".join(calls) + "."]
    unchecked = [f"{res['model']} {res.get('task', 'infer')}" for res in r["results"]
                 for mode, x in res["modes"].items() if mode == "compile_alcop" and x.get("alcop_calls_in_code")
                 and "alcop_calls_run" not in x]
    if unchecked:  # e2e.py counts what a timed pass ran since the recompile bug (docs/compile.md, status)
        out += ["", "compile_alcop rows not checked against the graph they timed (runs before e2e.py counted "
                "alcop's calls in a timed pass; such runs timed plain compile's graph, docs/compile.md): "
                + ", ".join(unchecked) + "."]
    return out + [""]


def compile_gemm_section(r: Report) -> list[str]:
    """Per GEMM, alcop inside torch.compile against Inductor's default and max-autotune, and compile seconds."""
    m = r["meta"]
    by: dict[str, dict[str, Any]] = {}
    for row in r["rows"]:
        by.setdefault(row["case"], {})[row["variant"]] = row
    out = [f"{m['device']}, torch {m['torch']}, Triton {m['triton']}, {m['date']}. Timer: {m['timer']}; "
           "compile seconds: the first call, Inductor's caches fresh.", "",
           "| case | alcop vs default | alcop vs max-autotune | compile s (default / max-autotune / alcop) | "
           "alcop in graph |", "|---|---|---|---|---|"]
    for case, v in by.items():
        ms = {k: v.get(k, {}).get("ms") for k in ("default", "max_autotune", "alcop")}
        ratio = [_x(ms[b] / ms["alcop"]) if ms[b] and ms["alcop"] else "-" for b in ("default", "max_autotune")]
        secs = " / ".join(str(v.get(k, {}).get("compile_s", "-")) for k in ("default", "max_autotune", "alcop"))
        out.append(f"| {case} | {ratio[0]} | {ratio[1]} | {secs} | {v.get('alcop', {}).get('alcop_in_graph', '-')} |")
    return out + [""]


def pipeline_section(r: Report) -> list[str]:
    first = next(iter(r.values()))["meta"]
    out = [f"{first['device']}, Triton {first['triton']}, torch {first['torch']}, {first['date']}. "
           f"Timer: {first['timer']}. Each kind is its best config over the grid on a shape; *A over B* = geomean "
           "over shapes of B's best time / A's.", "",
           "| grid | MMA | smem stages only over one stage | register prefetch only over one stage | "
           "both levels over smem only | best over one stage | best over double buffering | best vs torch |",
           "|---|---|---|---|---|---|---|---|"]
    for name, res in r.items():
        m, s = res["meta"], res["summary"]
        sp = s["speedups"]
        out.append(f"| {name} | {m['mma']} | {_x(sp['smem_only_over_one_stage']['geomean'])} | "
                   f"{_x(sp['reg_only_over_one_stage']['geomean'])} | {_x(sp['smem_and_reg_over_smem_only']['geomean'])} | "
                   f"{_x(sp['best_over_one_stage']['geomean'])} | {_x(sp['best_over_double_buffer']['geomean'])} | "
                   f"{_x(s['best_vs_torch'])} ({s['best_vs_torch_shapes']} shapes) |")
    return out + [""]


def model_section(r: Report) -> list[str]:
    s = r["summary"]
    out = [f"GPU {r['gpu']}, data {', '.join(r['data'])} ({r['n_workloads']} workloads, {r['n_records']} records), "
           "held out by workload. Timer: none of its own (the grid's recorded times). Best-in-top-k = best measured "
           "time / best measured time among the model's k top-ranked configs (mean over workloads); pairwise = "
           "share of config pairs ordered as measured. Random choice is the exact expected value.", "",
           "| model | top-1 | top-10 | pairwise |", "|---|---|---|---|"]
    labels = {"random": ("random choice", None), "analytical": ("analytical alone", "analytical_pairwise"),
              "xgb": ("XGBoost alone", "xgb_pairwise"),
              "analytical_xgb": ("analytical + XGBoost", "analytical_xgb_pairwise")}
    for key, (label, pw) in labels.items():
        if key in s:
            pairwise = 0.5 if key == "random" else s.get(pw) if pw else None
            out.append(f"| {label} | {s[key]['top1']:.3f} | {s[key]['top10']:.3f} | "
                       + (f"{pairwise:.3f} |" if isinstance(pairwise, float) else "- |"))
    return out + [""]


def tune_speed_section(r: Report) -> list[str]:
    env = r["environment"]
    out = [f"{env['device']}, torch {env['torch']}, Triton {env['triton']}, alcop_triton {env['alcop_triton']}, "
           f"{env['date']}; {r['trials']} trials per shape. Timers: wall = {r['wall_timer']}; torch / alcop = "
           f"{r['runs'][0]['compare']['timer']}.", "", "| shape | wall s | torch / alcop |", "|---|---|---|"]
    for run in r["runs"]:
        out.append(f"| {run['shape']} | {run['wall_s']:.1f} | {_x(run['compare']['speedup_vs_torch'])} |")
    s = r["summary"]
    out += ["", f"Geomean torch / alcop {_x(s['geomean_speedup_vs_torch'])}; wall s per shape: first "
            f"{s['first_wall_s']:.1f}, the rest {s['rest_mean_wall_s']:.1f} mean, {s['rest_max_wall_s']:.1f} max.", ""]
    return out


def odd_sizes_section(r: Report) -> list[str]:
    m = r["meta"]
    ratios = [row["ratio_vs_torch"] for row in r["rows"]]
    eager = [row["eager_vs_torch"] for row in r["rows"]]
    out = [f"{m['device']}, torch {m['torch']}, Triton {m['triton']}, alcop_triton {m['alcop']}, {m['date']}. "
           f"Timers: graph = {m['timer']}; eager = {m['eager_timer']}.", "",
           "| shape | layout | config | graph: torch / alcop | eager: torch / alcop |", "|---|---|---|---|---|"]
    for row in r["rows"]:
        out.append(f"| {'x'.join(map(str, row['shape']))} | {row['layout']} | {row['config']} | "
                   f"{_x(row['ratio_vs_torch'])} | {_x(row['eager_vs_torch'])} |")
    out += ["", f"Geomean over {len(ratios)} shapes: graph {_x(_geomean(ratios))}, eager {_x(_geomean(eager))}.", ""]
    return out


def transfer_eval_section(r: Report) -> list[str]:
    out = [f"GPU {r['gpu']}, grid {Path(r['grid']).name} (the headline run's wgmma grid). Timer: none of its own (the "
           "grid's recorded times). Of best = best measured time / the transferred pick's time.", "",
           "| neighbours' configs kept | workloads | of best (geomean) | of best (min) | vs torch (geomean) | "
           "picks never measured |", "|---|---|---|---|---|---|"]
    for res in r["results"]:
        keep = "all" if res["keep"] is None else str(res["keep"])
        out.append(f"| {keep} | {res['workloads']} | {res['of_best_geomean']:.3f} | {res['of_best_min']:.3f} | "
                   f"{_x(res['vs_torch_geomean'])} | {res['unmeasured_picks']} |")
    return out + [""]


def transfer_vs_tuning_section(r: Report) -> list[str]:
    env, s = r["environment"], r["summary"]
    out = [f"{env['device']}, torch {env['torch']}, Triton {env['triton']}, alcop_triton {env['alcop_triton']}, "
           f"{env['date']}; {r['trials']} tuning trials per shape. Timer: {r['timer']}.", "",
           "| shape | untuned: torch / alcop | tuned: torch / alcop | untuned / tuned speed |", "|---|---|---|---|"]
    for run in r["runs"]:
        out.append(f"| {run['shape']} | {_x(run['untuned_compare']['speedup_vs_torch'])} | "
                   f"{_x(run['tuned_compare']['speedup_vs_torch'])} | {run['untuned_vs_tuned']:.3f} |")
    out += ["", f"Geomean: untuned {_x(s['untuned_vs_torch'])} torch, tuned {_x(s['tuned_vs_torch'])} torch; the "
            f"untuned config reaches {s['untuned_vs_tuned']:.3f} of the tuned speed (min {s['untuned_vs_tuned_min']:.3f}).", ""]
    return out


def transfer_replay_section(r: Report) -> list[str]:
    data = "; ".join(f"{Path(d['path']).name} ({', '.join(d['devices'])}, {', '.join(d['dates'])})" for d in r["data"].values())
    out = [f"Replayed {r['date']} from {data}; no GPU. Timer: the tables' `autotune.measure.time_gpu` (each record "
           "names it), the grid's own. Dispatch holds one GPU's records only and answers on the other GPU's spec; "
           "the other GPU's measurements score the answer: of best = its best measured time / the time of the "
           "fastest of the ranking's top k (k measured on first use; k = 1 is the untuned call). Cells: geomean "
           "(workloads covered, of them < 0.9); a top k with a config the target never measured is not covered. "
           "The reference is the best of the configs measured on the target, not 50 tuning trials. "
           "shipped: the source holds the workload too; unseen: its records of the workload hidden.", "",
           "| case | mode | ranker | " + " | ".join(f"k = {k}" for k in r["k"]) + " |", "|---|---|---|" + "---|" * len(r["k"])]
    for res in r["results"]:
        for ranker in dict.fromkeys(key.split("@")[0] for key in res["summary"]):
            cells = []
            for k in r["k"]:
                s = res["summary"][f"{ranker}@{k}"]
                cells.append(f"{s['geomean']:.3f} ({s['covered']}/{res['workloads']}, {s['below_0.9']})"
                             if s["geomean"] is not None else "-")
            out.append(f"| {res['case']} | {res['mode']} | {ranker} | " + " | ".join(cells) + " |")
    pools = r.get("pools") or []
    if pools:
        names = list(pools[0]["summary"])
        out += ["", "A GPU with both tables (each of its table's workloads with its own records of it hidden; of best "
                "at k = 1 over the workloads every pool's pick was measured on):", "",
                "| target | mode | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for p in pools:
            out.append(f"| {p['target']} | {p['mode']} | " + " | ".join(
                f"{p['summary'][n]['geomean']:.3f} ({p['common']}, {p['summary'][n]['below_0.9']})" for n in names) + " |")
    return out + [""]


def table_headroom_section(r: Report) -> list[str]:
    rows = r["rows"]
    first = rows[0]
    out = [f"{first['device']}, {first['date']}. Timer: the tuner's `{first['timer']}` "
           "(`alcop_triton.autotune.measure.time_gpu`). Headroom = the shipped configs' best / the tuned best, "
           "both timed in one tuning run (1.000: tuning found nothing faster).", "",
           "| workload | trials | headroom |", "|---|---|---|"]
    for row in rows:
        out.append(f"| {row['workload']} | {row['trials']} | {row['headroom']:.3f} |")
    out += ["", f"Geomean headroom over {len(rows)} workloads: {_geomean([row['headroom'] for row in rows]):.3f}.", ""]
    return out


def early_stop_section(r: Report) -> list[str]:
    s = r["summary"]
    rule = r["rule"]
    out = [f"{r['date']}, {s['workloads']} workloads of `{', '.join(Path(d).name for d in r['data'])}`, "
           f"{r['trials']} trials; rule: patience {rule['patience']}, min gain {rule['min_gain']}, min trials "
           f"{rule['min_trials']}. Timer: {r['timer']}.", "",
           "| run | trials (mean) | best found / grid best (mean) | (min) | model CPU s (mean) |", "|---|---|---|---|---|"]
    for name in ("full", "early_stop", "seeded"):
        if name in s:
            e = s[name]
            out.append(f"| {name} | {e['trials']:.1f} | {e['best_fraction']:.4f} | {e['min_best_fraction']:.4f} | "
                       f"{e['model_cpu_s']:.2f} |")
    return out + [""]


def build_table_section(r: Report) -> list[str]:
    m = r["meta"]
    ops = sorted({row["workload"].split(":")[0] + " " + row["workload"].split(":")[2] for row in r["rows"]})
    return [f"{m['device']} ({m['mma']}), torch {m['torch']}, Triton {m['triton']}, alcop_triton {m['alcop']}, "
            f"{m['date']}. Timer: the tuner's `alcop_triton.autotune.measure.time_gpu` for alcop's candidates and "
            "for torch. This run measured the entries it adds to the shipped table "
            f"(`alcop_triton/data/default_{m['gpu'].lower()}.jsonl`): {len(r['rows'])} workloads ({', '.join(ops)}), "
            f"alcop's best against torch {_x(r['geomean_speedup'])} geomean, {r['below_0.9']} below 0.9x.", ""]


def hopper_gemm_section(r: Report) -> list[str]:
    m = r["meta"]
    out = [f"{m['device']}, torch {m['torch']}, Triton {m['triton']}, alcop_triton {m['alcop_triton']}, {m['date']}. "
           f"Timer: {m['timer']}. Per shape the best config of each level set against torch (cuBLAS):", "",
           "| dtype | levels | shapes | geomean vs torch | min | gain over the previous set |", "|---|---|---|---|---|---|"]
    out += [f"| {s['dtype']} | {s['levels']} | {s['shapes']} | {_x(s['geomean_vs_torch'])} | {_x(s['min_vs_torch'])} | "
            f"{_x(s['gain_over_previous_set']) if s['gain_over_previous_set'] else ''} |" for s in r["summary"]]
    big = [row for row in r["rows"] if row["shape"] == [8192, 8192, 8192] and "vs_torch" in row]
    if big:
        best = max(big, key=lambda row: row["vs_torch"])
        out += ["", f"8192³ bf16: {_x(best['vs_torch'])} torch ({best['config']}, {best['tflops']:.0f} TF/s)."]
    return out + [""]


def hopper_heldout_section(r: Report) -> list[str]:
    """The held-out run of ``hopper_gemm.py``: its ablation table, then ``alcop_triton.matmul`` as dispatched
    (one row per shape) against cuBLAS."""
    out = hopper_gemm_section(r)
    dispatched: dict[tuple[Any, ...], float] = {}
    for row in r["rows"]:
        if row.get("alcop_triton_vs_torch"):
            dispatched[(tuple(row["shape"]), row["layout"], row["dtype"])] = row["alcop_triton_vs_torch"]
    for dtype in sorted({k[2] for k in dispatched}):
        vals = {k: v for k, v in dispatched.items() if k[2] == dtype}
        low = sorted((v, k) for k, v in vals.items() if v < 0.85)
        out += [f"`alcop_triton.matmul` as dispatched, {dtype}, {len(vals)} shapes: {_x(_geomean(list(vals.values())))} "
                f"cuBLAS geomean, min {_x(min(vals.values()))}; below 0.85x: "
                + (", ".join(f"{'x'.join(map(str, k[0]))} {_x(v)}" for v, k in low) or "none") + ".", ""]
    return out


def fuzz_section(r: Report) -> list[str]:
    return [f"{r['what']}; {r['date']}, torch {r['torch']}, Triton {r['triton']}, alcop_triton {r['alcop_triton']}, "
            f"`{r['command']}`. Timer: none (correctness only). {r['cases']} cases: {r['ok']} matched torch, "
            f"{r['raised_like_torch']} raised as torch does, {r['wrong_results']} wrong results.", ""]


def fuzz_fastpath_section(r: Report) -> list[str]:
    out = [f"{r['what']}; {r['device']}, torch {r['torch']}, Triton {r['triton']}, alcop_triton {r['alcop_triton']}, "
           f"{r['date'][:10]}; native hit built: {r['native']}. Timer: none (correctness only)"
           + ("; the run stopped at its time budget." if r.get("stopped_by_budget") else "."), "",
           "| cases | calls | matched torch | wrong | crashes | exception type differs | fast-path hits (call site, native) |",
           "|---|---|---|---|---|---|---|",
           f"| {r['cases']} | {r['calls']} | {r['ok']} | {r['wrong']} | {r['crashes']} | {r['exception_mismatches']} | "
           f"{r['hits']} ({r['site_hits']}, {r['native_runs']}) |", ""]
    if r.get("failures"):
        out += ["Failures:", ""]
        out += [f"- `{f['case']}`: {f['kind']}" for f in r["failures"]]
        out.append("")
    return out


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


@dataclass(frozen=True)
class Harness:
    title: str
    report: str          # the JSON under the results directory that the section reads
    command: str         # the command that writes it there
    render: Callable[[Report], list[str]]
    note: str = ""       # which part of that command, where it runs several harnesses


HEADLINE = "python benchmarks/headline.py benchmarks/results/headline"
HARNESSES: tuple[Harness, ...] = (
    Harness("Drop-ins against torch (suite)", "headline/suite/report.json",
            HEADLINE, note="the stage `suite`: benchmarks/suite.py", render=suite_section),
    Harness("Host time per call", "headline/overhead/overhead.json",
            HEADLINE, note="the stage `overhead`: benchmarks/overhead.py", render=overhead_section),
    Harness("End to end, fp16 inference and bf16 training", "headline/e2e/e2e.json",
            HEADLINE, note="the stage `e2e`: benchmarks/e2e.py", render=e2e_section),
    Harness("Convolutions forward and backward on the H200 (suite)", "conv_h200/report.json",
            "python benchmarks/suite.py --out benchmarks/results/conv_h200 --sets conv2d,conv2d_bwd --impls torch,alcop "
            "--inductor-sets ''", render=suite_section),
    Harness("Pipelining ablation, ALCOP dense + bmm", "headline/ablation/pipeline_variants.json",
            HEADLINE, note="the stage `ablation`: benchmarks/ablation_h100.sh, benchmarks/report_pipeline.py",
            render=pipeline_section),
    Harness("Performance models, held out by workload", "headline/model/model_eval.json",
            HEADLINE, note="the stage `model`: benchmarks/eval_model.py", render=model_section),
    Harness("Tuning unseen shapes", "tune_speed/tune_speed.json",
            "python benchmarks/tune_speed.py benchmarks/results/tune_speed --trials 50", render=tune_speed_section),
    Harness("Odd and unaligned sizes", "odd_sizes/odd_sizes.json",
            "python benchmarks/odd_sizes.py benchmarks/results/odd_sizes", render=odd_sizes_section),
    Harness("Untuned shapes: configs transferred from neighbours", "transfer_eval/transfer_eval.json",
            "python benchmarks/transfer_eval.py benchmarks/results/headline/ablation/h100_wgmma_alcop_space.jsonl.gz "
            "--out benchmarks/results/transfer_eval/transfer_eval", render=transfer_eval_section),
    Harness("A GPU without measurements: transfer against tuning", "transfer_vs_tuning/transfer_vs_tuning.json",
            "python benchmarks/transfer_vs_tuning.py benchmarks/results/transfer_vs_tuning", render=transfer_vs_tuning_section),
    Harness("A GPU without a table: transfer across GPUs, replayed", "transfer_replay/transfer_replay.json",
            "python benchmarks/transfer_replay.py --out benchmarks/results/transfer_replay",
            render=transfer_replay_section),
    Harness("Headroom of the shipped table", "table_headroom/table_headroom.json",
            "python benchmarks/table_headroom.py OUT/tuned.jsonl --out benchmarks/results/table_headroom",
            render=table_headroom_section),
    Harness("The tuner's early stop, replayed", "early_stop_replay/early_stop_replay.json",
            "python benchmarks/early_stop_replay.py benchmarks/results/early_stop_replay --seeding", render=early_stop_section),
    Harness("Building the shipped table", "build_table/build_table.json",
            "python benchmarks/build_table.py benchmarks/results/build_table", render=build_table_section),
    Harness("Building the shipped table: the H200's", "table_h200/build_table.json",
            "python benchmarks/build_table.py benchmarks/results/table_h200 --sets train,e2e --dtypes bfloat16, then "
            "--sets e2e --dtypes float16 (each resumed once), then --sets e2e,train --ops matmul --new-candidates "
            "--candidates ws, then --sets train --dtypes float16 --ops matmul --new-candidates, then (the split-K "
            "wrong answers dropped, D43) --sets e2e,train --ops matmul,conv2d --new-candidates (twice), then --sets "
            "decode,llama,models,suite --ops matmul (fp16, then bf16), then --sets models,llama --ops matmul --new-candidates, "
            "then --sets e2e,train (their torch lines dropped first: torch timed again), each into a copy of the shipped "
            "table, then --install (passes: "
            "table_h200/README.md)", render=build_table_section),
    Harness("ALCOP's three levels on Hopper: the generated warp-specialized GEMM", "hopper_gemm/hopper_gemm.json",
            "python benchmarks/hopper_gemm.py --out benchmarks/results/hopper_gemm", render=hopper_gemm_section),
    Harness("Held-out GEMMs on Hopper: alcop as dispatched", "hopper_gemm_heldout/hopper_gemm.json",
            "python benchmarks/hopper_gemm.py --out benchmarks/results/hopper_gemm_heldout --shapes heldout "
            "--level-sets none", render=hopper_heldout_section),
    Harness("Held-out GEMMs on Hopper: the warp-specialized kernel, fp16", "hopper_gemm_heldout/ws_float16/hopper_gemm.json",
            "python benchmarks/hopper_gemm.py --out benchmarks/results/hopper_gemm_heldout/ws_float16 --shapes heldout "
            "--dtypes float16 --level-sets 1+2+3", render=hopper_gemm_section),
    Harness("Held-out GEMMs on Hopper: the warp-specialized kernel, bf16", "hopper_gemm_heldout/ws_bfloat16/hopper_gemm.json",
            "python benchmarks/hopper_gemm.py --out benchmarks/results/hopper_gemm_heldout/ws_bfloat16 --shapes heldout "
            "--dtypes bfloat16 --level-sets 1+2+3", render=hopper_gemm_section),
    Harness("GEMMs inside torch.compile", "compile_gemm/compile_gemm.json",
            "python benchmarks/compile_gemm.py --out benchmarks/results/compile_gemm --limit 4",
            render=compile_gemm_section),
    Harness("The fast path fuzzed on a GPU, with mutations between calls", "fuzz_fastpath/fuzz_fastpath.json",
            "python scripts/fuzz_fastpath.py --device cuda --cases 3000 --jobs 12 --out benchmarks/results/fuzz_fastpath",
            render=fuzz_fastpath_section),
    Harness("Drop-ins fuzzed against torch", "fuzz/fuzz_summary.json",
            "TRITON_INTERPRET=1 python scripts/fuzz.py --cases 5000 --out benchmarks/results/fuzz", render=fuzz_section),
)


def render(results: Path, headline: Path | None = None) -> str:
    """The page's text from the reports under ``results`` (the headline run's from ``headline``, by default
    ``results/headline``)."""
    out = ["# Results", "",
           "<!-- Generated by `python benchmarks/report_results.py` from benchmarks/results; do not edit by hand. -->",
           "", "The latest results of each maintained harness. Every number names its device and timer; ratios "
           "compare numbers of one timer within one run. Each folder's README.md gives the commit that was measured. "
           "Past runs live in git history; the measurements behind the package's constants are in "
           "[decisions.md](decisions.md).", "",
           "![alcop against torch per workload](../benchmarks/results/headline/headline.png)", ""]
    for h in HARNESSES:
        path = results / h.report
        if headline is not None and h.report.startswith("headline/"):
            path = headline / h.report.split("/", 1)[1]
        note = f" ({h.note})" if h.note else ""
        md = path.with_suffix(".md") if path.suffix == ".json" else path
        out += [f"## {h.title}", "", f"Source: `{shown(md)}`; command: `{h.command}`{note}.", ""]
        if not path.is_file():
            out += ["Not measured yet: the command above writes it.", ""]
            continue
        out += h.render(json.loads(path.read_text()))
    return "\n".join(out).rstrip() + "\n"


README_BEGIN, README_END = "<!-- headline:begin -->", "<!-- headline:end -->"


def readme_block(results: Path, headline: Path | None = None) -> str:
    """The README's short headline table: the suite's geomeans and the host time of a repeated call, from the
    headline run's reports (the same files as the results page's first sections)."""
    head = headline if headline is not None else results / "headline"
    out = [README_BEGIN]
    suite = head / "suite" / "report.json"
    if suite.is_file():
        r = json.loads(suite.read_text())
        run = r["run"]
        out += [f"{run['device']}, torch {run['torch']}, Triton {run['triton']}, {run['date']}; configs as "
                "dispatched (the GPU's shipped table, else transfer), nothing tuned in the run. Ratio = torch time / alcop time, "
                "geomean (> 1: alcop faster). **eager**: " + r["timers"]["eager"] + "; **graph**: "
                + r["timers"]["graph"] + ".", "",
                "| workloads | timer | alcop vs torch | faster than torch |", "|---|---|---|---|"]
        names = {"alcop": "ALCOP suite GEMMs", "heldout": "held-out GEMMs", "conv2d": "ALCOP suite conv2d",
                 "models": "model GEMMs"}
        for set_, s in r["summary"].items():
            for timer in ("eager", "graph"):
                a = s["timers"].get(timer, {}).get("alcop")
                if not a or not a.get("n"):
                    continue
                out.append(f"| {names.get(set_, set_)} ({s['workloads']}) | {timer} | **{_x(a['geomean'])}** "
                           f"(min {_x(a['min'])}) | {a['faster']} / {a['n']} |")
        out.append("")
    over = head / "overhead" / "overhead.json"
    if over.is_file():
        r = json.loads(over.read_text())
        rows = [s for s in r["summary"] if not s["requires_grad"] and s["alcop_us"] is not None
                and s["torch_us"] is not None]
        if rows:
            m = r["meta"]
            out += [f"Host time of a repeated call ({m['device']}, {m['date']}; time.perf_counter_ns around each "
                    "call, median, `benchmarks/overhead.py`): "
                    + ", ".join(f"{s['op']} {s['alcop_us']:.1f} µs against torch's {s['torch_us']:.1f}" for s in rows)
                    + ".", ""]
    e2e = head / "e2e" / "e2e.json"
    if e2e.is_file():
        r = json.loads(e2e.read_text())
        parts: dict[str, list[str]] = {"infer": [], "train": []}
        for res in r["results"]:
            patched, eager = res["modes"].get("patched", {}), res["modes"].get("eager", {})
            x = patched.get("speedup_vs_eager")
            if x is not None:
                text = f"{res['model']} {_x(x)}"
                ci = patched.get("vs_eager_interval")
                if ci:  # the median's 95% interval over the run's rounds (e2e.paired_interval)
                    text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
                # a host-bound pair's passes swing with the host (docs/decisions.md#d30): where the fastest
                # passes say otherwise than the medians, both are shown (which one holds is the run's to say)
                if not ci and eager.get("ms_min") and patched.get("ms_min"):  # an interval says it better
                    fastest = eager["ms_min"] / patched["ms_min"]
                    if abs(math.log(fastest / x)) > math.log(1.03):
                        text += f" (fastest passes {_x(fastest)})"
                parts.setdefault(res.get("task", "infer"), []).append(text)
        m = r["meta"]
        if parts["infer"] or parts["train"]:
            out += [f"End to end under `patched()` against eager ({m['device']}, {m['date']}; CUDA events around a "
                    "pass, host included, modes alternated, median; in brackets, where the run kept its passes, the "
                    "95% interval of the round-by-round ratio, `benchmarks/e2e.py`): fp16 inference "
                    + ", ".join(parts["infer"]) + "; one bf16 training step " + ", ".join(parts["train"]) + ".", ""]
    conv = results / "conv_h200" / "report.json"
    if conv.is_file():   # training convolutions: a layer's forward and both gradients
        r = json.loads(conv.read_text())
        both = [(timer, a) for timer in ("eager", "graph")
                if (a := r.get("forward_backward", {}).get("conv2d", {}).get(timer, {}).get("alcop")) and a.get("n")]
        if both:
            run = r["run"]
            out += [f"Convolutions forward + backward against cuDNN ({run['device']}, {run['date']}; "
                    "`benchmarks/results/conv_h200`), the suite's conv2d layers: "
                    + ", ".join(f"{timer} {_x(a['geomean'])} (min {_x(a['min'])})" for timer, a in both)
                    + ". Patch mode trains a convolution on alcop only where its records (forward or gradients) show alcop faster.", ""]
    hop = results / "hopper_gemm" / "hopper_gemm.json"
    if hop.is_file():
        r = json.loads(hop.read_text())
        m = r["meta"]
        per: dict[str, list[str]] = {}
        for s in r["summary"]:
            per.setdefault(s["dtype"], []).append(_x(s["geomean_vs_torch"]))
        out += [f"ALCOP's levels on Hopper, the generated warp-specialized GEMM ({m['device']}, {m['date'][:10]}; graph "
                "timer, `benchmarks/hopper_gemm.py`), best config against cuBLAS over the LLM/model GEMMs, level 1 -> "
                "1+2 -> 1+2+3: " + "; ".join(f"{d} {' -> '.join(v)}" for d, v in per.items())
                + ". Dispatch runs it where the table measured it fastest ([docs/hopper.md](docs/hopper.md)).", ""]
    out.append(README_END)
    return "\n".join(out)


def with_readme_block(text: str, block: str) -> str:
    """``text`` with the part between the headline markers replaced by ``block`` (unchanged without markers)."""
    if README_BEGIN not in text or README_END not in text:
        return text
    head, rest = text.split(README_BEGIN, 1)
    return head + block + rest.split(README_END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default=str(ROOT / "README.md"),
                    help="README whose headline block (between its markers) is rewritten too")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--headline", default=None, help="the headline run's directory (default: RESULTS/headline)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results.md"))
    ap.add_argument("--check", action="store_true", help="exit 1 if the page differs from the results")
    a = ap.parse_args(argv)
    results, headline = Path(a.results), Path(a.headline) if a.headline else None
    page, out = render(results, headline), Path(a.out)
    readme = Path(a.readme)
    readme_text = readme.read_text() if readme.is_file() else ""
    new_readme = with_readme_block(readme_text, readme_block(results, headline))
    if a.check:
        return int(not out.is_file() or out.read_text() != page or new_readme != readme_text)
    out.write_text(page)
    if new_readme != readme_text:
        readme.write_text(new_readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())

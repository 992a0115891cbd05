"""Write README.md's "Measured" section from the committed reports (nothing in it is typed by hand).

    python benchmarks/readme_measured.py [--readme README.md] [--results benchmarks/results]
                                         [--gpu-results OUT] [--check]

Replaces the text between ``<!-- measured:begin -->`` and ``<!-- measured:end -->``. Every number
is printed with its timer, device and report path; ratios are only ever formed inside one report
between numbers of one timer in one run (the reports compute them). A report that is not committed
yet is named with the command that produces it. ``--gpu-results OUT`` takes the suite, host-time and
end-to-end reports from a run of ``benchmarks/headline.py OUT`` instead (its run id cited beside
them); the other reports still come from ``--results``. ``--check`` exits 1 if the section is out
of date.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from overhead import patched_minus_direct  # noqa: E402  (the host-time report's own cell)

BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"

# Where each GPU report lives under --results, and the command that writes it there.
SUITE = ("suite_h100/report.json", "python benchmarks/suite.py --out benchmarks/results/suite_h100")
OVERHEAD = ("overhead_h100/overhead.json", "python benchmarks/overhead.py --out benchmarks/results/overhead_h100")
E2E = ("e2e_h100/e2e.json", "python benchmarks/e2e.py --out benchmarks/results/e2e_h100")
PIPELINE = ("pipeline_variants.json", "python benchmarks/report_pipeline.py <grids> --out benchmarks/results/pipeline_variants")
CONV = ("conv_variants.json", "python benchmarks/report_pipeline.py <conv grids> --out benchmarks/results/conv_variants")
MODEL_EVALS = ("model_eval.json", "model_eval_alcop_space.json", "model_eval_ablation.json")
# The same three reports in a run directory of benchmarks/headline.py; the committed one, when there
# is one, is the default source of the GPU reports.
HEADLINE = {"suite": "suite/report.json", "overhead": "overhead/overhead.json", "e2e": "e2e/e2e.json"}
HEADLINE_DIR = "headline_h100"
# Suite runs after the headline run, alcop against torch only (``suite.py --impls torch,alcop``): what
# later changes measured, each its own run; shown after the headline's reports, never mixed into them.
LATER_SUITES = ("dispatch_h100/report.json", "h200_dispatch/report.json", "conv_h100/report.json",
                "callpath_h100/suite/report.json", "turns_h100/suite/report.json", "tma_h100/suite/report.json",
                "tma_h100/suite_repeat/report.json", "tma_h100/h200_suite/report.json",
                "fastpath_h100/suite/report.json", "resnet_patch_h100/4_one_call/suite/report.json",
                "suite_tuned_h100/suite_tuned/report.json", "table_h100_nt_w4/suite/report.json",
                "conv_tma_h100/suite_final/report.json", "conv_tma_h100/suite_bwd_split64/report.json",
                "host_cold_h100/5_final/suite/report.json", "callpath_final_h100/suite/report.json",
                "wgrad_h100/suite_bwd_before/report.json", "wgrad_h100/suite_bwd_after/report.json",
                "wgrad_h100/suite_bwd_phases/report.json", "wgrad_h100/suite_conv_final/report.json",
                "wgrad_h100/suite_bwd_table/report.json", "wgrad_h100/suite_conv3d_bwd/report.json",
                "pdl_h100/suite/report.json", "pdl_h100/conv_suite/report.json", "pdl_h100/h200_suite/report.json",
                "pdl_h100/suite_repeat/report.json", "native_hit_h100/4_final/suite/report.json",
                "native_hit_h100/5_repeat/suite/report.json", "conv_window_h100/suite_box/report.json",
                "conv_window_h100/suite_final/report.json", "conv_boxes_h100/suite/report.json",
                "conv_boxes_h100/suite_bwd/report.json", "conv_boxes_h100/suite_final/report.json",
                "conv_boxes_h100/suite_resnet50_bwd/report.json")
# Host-time and end-to-end runs after the headline run (patch mode changed since): each its own run.
LATER_OVERHEAD = ("callpath_h100/overhead/overhead.json", "turns_h100/overhead/overhead.json",
                  "tma_h100/overhead/overhead.json", "fastpath_h100/overhead/overhead.json",
                  "resnet_patch_h100/4_one_call/overhead/overhead.json", "host_cold_h100/5_final/overhead/overhead.json",
                  "callpath_final_h100/overhead/overhead.json", "callpath_final_h100/overhead_routes/overhead.json",
                  "patch_sites_h100/overhead/overhead.json", "pdl_h100/overhead/overhead.json",
                  "patch_linger_h100/overhead_first/overhead.json", "patch_linger_h100/overhead_second/overhead.json",
                  "patch_linger_h100/overhead/overhead.json", "native_hit_h100/4_final/overhead/overhead.json",
                  "native_hit_h100/5_repeat/overhead/overhead.json")
LATER_E2E = ("patch_h100/e2e/e2e.json", "callpath_h100/e2e/e2e.json", "turns_h100/e2e/e2e.json",
             "tma_h100/e2e/e2e.json", "fastpath_h100/e2e/e2e.json", "resnet_patch_h100/3_after_margin/e2e/e2e.json",
             "resnet_patch_h100/4_one_call/e2e/e2e.json", "resnet_patch_h100/6_e2e_process_per_model/e2e/e2e.json",
             "resnet_patch_h100/7_alternating/e2e/e2e.json", "host_cold_h100/5_final/e2e/e2e.json",
             "callpath_final_h100/e2e/e2e.json", "patch_sites_h100/e2e/e2e.json", "pdl_h100/e2e/e2e.json",
             "patch_linger_h100/e2e/e2e.json", "patch_linger_h100/resnet_only_1/e2e.json",
             "patch_linger_h100/resnet_only_2/e2e.json", "patch_linger_h100/e2e_by_pass/e2e.json",
             "patch_linger_h100/final/e2e/e2e.json", "patch_linger_h100/after_params/e2e/e2e.json",
             "patch_linger_h100/last/e2e/e2e.json", "native_hit_h100/4_final/e2e/e2e.json",
             "native_hit_h100/5_repeat/e2e/e2e.json")
HEADLINE_ABLATION, HEADLINE_MODEL = "ablation/pipeline_variants.json", "model/model_eval.json"


def shown(path: Path) -> str:
    """A report's path as the README names it: relative to the repository where it lies inside."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def _x(v: Any) -> str:
    return f"{v:.3f}x" if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def suite_section(r: dict[str, Any], path: str, run_id: str | None = None) -> list[str]:
    run = r["run"]
    out = [f"### Drop-ins against every peer, one run ({path.replace('.json', '.md')})", "",
           f"{run['device']}, torch {run['torch']}, Triton {run['triton']}, alcop_triton {run['alcop']}, {run['date']}, "
           f"run `{run['run_id']}`. Timers: **eager** = {r['timers']['eager']}; **graph** = {r['timers']['graph']}. "
           "Ratio = torch ms / implementation ms, geomean over the set's workloads (minimum in brackets); "
           "torch is cuBLAS/cuDNN in the same run with the same timer.", ""]
    if r.get("progress") and r["progress"].get("left"):
        out += [f"The run is incomplete: {r['progress']['left']} workloads not measured.", ""]
    out += ["| set | workloads | timer | alcop | Triton tutorial | Inductor max-autotune |", "|---|---|---|---|---|---|"]
    for set_, s in r["summary"].items():
        for timer in ("eager", "graph"):
            t = s["timers"].get(timer, {})

            def cell(impl: str) -> str:
                e = t.get(impl)
                if not e or not e["n"]:
                    return "-"
                return f"{_x(e['geomean'])} (min {_x(e['min'])}, {e['n']} workloads)"
            out.append(f"| {set_} | {s['workloads']} | {timer} | {cell('alcop')} | {cell('triton_tutorial')} | "
                       f"{cell('inductor')} |")
    comp = [f"{set_} {c['mean']:.1f} s mean, {c['max']:.1f} s max over {c['n']} workloads"
            for set_, s in r["summary"].items() if (c := s.get("inductor_compile_s"))]
    if comp:
        out += ["", "Inductor compile + autotune time per workload (first call, plus its share of a pretuning graph; "
                "settings in the report's rows): " + "; ".join(comp) + "."]
    return out + [""]


def later_section(reports: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """The later suite runs: one row per (run, set, timer), alcop against torch."""
    out = ["### Since the headline run: alcop against torch only, one run per report", "",
           "Each report is its own run (device, versions, date, run id and commit in its run.json and README); "
           "ratios compare alcop with torch within that run and timer only.", "",
           "| report | run | device | set | workloads | timer | alcop vs torch |", "|---|---|---|---|---|---|---|"]
    for path, r in reports:
        run = r["run"]
        for set_, s in r["summary"].items():
            for timer in ("graph", "eager"):
                e = s["timers"].get(timer, {}).get("alcop")
                if e and e["n"]:
                    out.append(f"| {path} | `{run['run_id']}` | {run['device']} | {set_} | {s['workloads']} | {timer} | "
                               f"{_x(e['geomean'])} (min {_x(e['min'])}) |")
    return out + [""]


def _meta_line(m: dict[str, Any], run_id: str | None = None) -> str:
    """Device, versions, date, run and timer of a report's ``meta``."""
    return (f"{m['device']}, torch {m['torch']}, Triton {m['triton']}, alcop_triton {m['alcop']}, {m['date']}"
            + (f", run `{run_id}`" if run_id else "") + f". Timer: {m['timer']}.")


def overhead_section(r: dict[str, Any], path: str, run_id: str | None = None) -> list[str]:
    m = r["meta"]
    out = [f"### Host time per call ({path.replace('.json', '.md')})", "",
           _meta_line(m, run_id), "",
           "| op | requires_grad | bare Triton launch µs | torch µs | alcop µs | alcop / torch | patched - direct µs |",
           "|---|---|---|---|---|---|---|"]

    def us(v: Any) -> str:
        return f"{v:.1f}" if v is not None else "-"
    for s in r["summary"]:
        out.append(f"| {s['op']} | {s['requires_grad']} | {us(s['triton_us'])} | {us(s['torch_us'])} | "
                   f"{us(s['alcop_us'])} | {_x(s['alcop_over_torch'])} | {patched_minus_direct(s)} |")
    return out + [""]


def e2e_section(r: dict[str, Any], path: str, run_id: str | None = None) -> list[str]:
    m = r["meta"]
    out = [f"### End to end, fp16 inference ({path.replace('.json', '.md')})", "",
           _meta_line(m, run_id), "", "| model | input | mode | ms | vs eager | max rel error |", "|---|---|---|---|---|---|"]
    for res in r["results"]:
        for mode, x in res["modes"].items():
            inp = "x".join(map(str, res["input"]))
            if "ms" in x:
                out.append(f"| {res['model']} | {inp} | {mode} | {x['ms']:.2f} | {_x(x.get('speedup_vs_eager'))} | "
                           f"{x['max_rel_err']:.1e} |")
            else:
                out.append(f"| {res['model']} | {inp} | {mode} | error | | |")
    return out + [""]


def pipeline_section(r: dict[str, Any], path: str, title: str) -> list[str]:
    first = next(iter(r.values()))["meta"]
    out = [f"### {title} ({path.replace('.json', '.md')})", "",
           f"{first['device']}, Triton {first['triton']}, torch {first['torch']}. Timer: {first['timer']}. "
           "Each kind is its best config over the run's grid on a shape; *A over B* = geomean over shapes of B's "
           "best time / A's; one row per run (each a separate measurement).", "",
           "| run | MMA | date | smem stages only over one stage | register prefetch only over one stage | "
           "both levels over smem only | best over one stage | best over double buffering | best kind per shape "
           "(one stage / smem only / reg only / both / persistent) | best vs torch |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for name, res in r.items():
        m, s = res["meta"], res["summary"]
        sp = s["speedups"]
        counts = " / ".join(str(v) for v in s["best_kind_counts"].values())
        excl = (f"; {_x(s['best_vs_torch_all_shapes'])} with the {len(s['suspect_torch'])} suspect torch time(s) "
                "the report lists" if s["suspect_torch"] else "")
        out.append(f"| {name} | {m['mma']} | {m['date']} | {_x(sp['smem_only_over_one_stage']['geomean'])} | "
                   f"{_x(sp['reg_only_over_one_stage']['geomean'])} | {_x(sp['smem_and_reg_over_smem_only']['geomean'])} | "
                   f"{_x(sp['best_over_one_stage']['geomean'])} | {_x(sp['best_over_double_buffer']['geomean'])} | "
                   f"{counts} | {_x(s['best_vs_torch'])} ({s['best_vs_torch_shapes']} shapes{excl}) |")
    return out + [""]


def model_section(reports: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out = ["### Performance model, held out by workload (" + ", ".join(f"`{p.replace('.json', '.md')}`"
                                                                   for p, _ in reports) + ")", "",
           "Best-in-top-k = best measured time / best measured time among the model's k top-ranked configs (mean "
           "over workloads); pairwise = share of config pairs ordered as measured (pairs within 1% skipped). "
           "Random choice is the exact expected value. Measured data: each report's files (H100, wgmma).", "",
           "| data | model | top-1 | top-10 | pairwise |", "|---|---|---|---|---|"]
    labels = {"random": ("random choice", None), "analytical": ("analytical alone", "analytical_pairwise"),
              "xgb": ("XGBoost alone", "xgb_pairwise"), "analytical_xgb": ("analytical + XGBoost", "analytical_xgb_pairwise")}
    for path, r in reports:
        s = r["summary"]
        data = ", ".join(Path(d).name for d in r.get("data", [])) or path
        for key, (label, pw) in labels.items():
            if key not in s:
                continue
            pairwise = 0.5 if key == "random" else s.get(pw) if pw else None
            out.append(f"| {data} ({r['n_workloads']} workloads) | {label} | {s[key]['top1']:.3f} | {s[key]['top10']:.3f} | "
                       + (f"{pairwise:.3f} |" if isinstance(pairwise, float) else "- |"))
    return out + [""]


def section(results: Path, gpu_results: Path | None = None) -> str:
    """The section's text: GPU reports from ``gpu_results`` (a headline run) or else ``results``."""
    out = ["Generated by `python benchmarks/readme_measured.py` from the committed reports named in each heading; "
           "every number carries its timer and device there, and ratios compare numbers of one timer within one run.", ""]

    def load(rel: str, base: Path = results) -> dict[str, Any] | None:
        p = base / rel
        return json.loads(p.read_text()) if p.is_file() else None

    run_id = None
    if gpu_results is not None:
        head = load("headline.json", gpu_results)
        if head is None:
            raise ValueError(f"--gpu-results: {gpu_results} holds no headline.json (a run of benchmarks/headline.py)")
        run_id = head["run_id"]
        e2e = load(HEADLINE["e2e"], gpu_results) or {}
        compiled = any(m.startswith("compile") for r in e2e.get("results", []) for m in r.get("modes", {}))
        whole = load(HEADLINE_ABLATION, gpu_results) is not None
        out += [f"The suite, host-time{', end-to-end, pipelining-ablation and model' if whole else ' and end-to-end'} "
                f"reports below are one run of `python benchmarks/headline.py "
                f"{shown(gpu_results)}{'' if compiled or not e2e else ' --no-compile'}`: run `{run_id}`, {head['device']}, torch {head['torch']}, Triton "
                f"{head['triton']}, alcop_triton {head['alcop']}, started {head['date']}, resumed over {head['calls']} "
                f"calls (`{shown(gpu_results / 'headline.json')}` names the commit each stage measured).", ""]
    renders: list[Callable[..., list[str]]] = [suite_section, overhead_section, e2e_section]
    for (rel, cmd), key, render in zip((SUITE, OVERHEAD, E2E), HEADLINE, renders):
        base = results if gpu_results is None else gpu_results
        rel = rel if gpu_results is None else HEADLINE[key]
        r = load(rel, base)
        if r is None and gpu_results is None:
            out += [f"- `{shown(base / rel).replace('.json', '.md')}`: not committed yet; `{cmd}` on the GPU writes it.", ""]
        elif r is None:
            out += [f"- `{shown(base / rel).replace('.json', '.md')}`: missing; `python benchmarks/headline.py "
                    f"{shown(gpu_results)}` on the GPU writes it.", ""]  # type: ignore[arg-type]
        else:
            out += render(r, f"`{shown(base / rel)}`", run_id)
    # The ablation and the model evaluation from the headline run where it holds them (then nothing from
    # other runs is shown), else from the committed reports of earlier runs.
    ablation = None if gpu_results is None else load(HEADLINE_ABLATION, gpu_results)
    if ablation is not None and gpu_results is not None:
        out += pipeline_section(ablation, f"`{shown(gpu_results / HEADLINE_ABLATION)}`",
                                "Pipelining ablation, ALCOP dense + bmm suite")
        model = load(HEADLINE_MODEL, gpu_results)
        evals = [(shown(gpu_results / HEADLINE_MODEL), model)] if model is not None else []
    else:
        for (rel, _), title in ((PIPELINE, "Pipelining ablation, ALCOP dense + bmm suite"),
                                (CONV, "Pipelining ablation, conv2d (ResNet layers, partial grids)")):
            r = load(rel)
            if r is not None:
                out += pipeline_section(r, f"`{shown(results / rel)}`", title)
        evals = [(shown(results / p), r) for p in MODEL_EVALS if (r := load(p)) is not None]
    if evals:
        out += model_section(evals)
    later = [(f"`{shown(results / rel).replace('.json', '.md')}`", r) for rel in LATER_SUITES if (r := load(rel)) is not None]
    if later:
        out += later_section(later)
    runs = [(rel, render, r) for rels, render in ((LATER_OVERHEAD, overhead_section), (LATER_E2E, e2e_section))
            for rel in rels if (r := load(rel)) is not None]
    if runs:
        out += ["Host time and end to end measured again after the headline run, each report its own run:", ""]
    for rel, render, r in runs:
        out += render(r, f"`{shown(results / rel)}`")
    return "\n".join(out).rstrip() + "\n"


def rewrite(readme: str, body: str) -> str:
    if readme.count(BEGIN) != 1 or readme.count(END) != 1 or readme.index(BEGIN) > readme.index(END):
        raise ValueError(f"README must hold one {BEGIN} ... {END} block")
    head, rest = readme.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{body}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--gpu-results", default=None, help="a run directory of benchmarks/headline.py for the GPU "
                    f"reports (default: RESULTS/{HEADLINE_DIR} if it holds one, else the reports named in this file)")
    ap.add_argument("--check", action="store_true", help="exit 1 if the section differs from the reports")
    a = ap.parse_args(argv)
    path = Path(a.readme)
    old = path.read_text()
    committed = Path(a.results) / HEADLINE_DIR
    gpu = Path(a.gpu_results) if a.gpu_results else committed if (committed / "headline.json").is_file() else None
    new = rewrite(old, section(Path(a.results), gpu))
    if a.check:
        return int(new != old)
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""benchmarks/headline.py on CPU with scripted stages and clock: completed stages are skipped, the
budget stops a call before a stage that would not fit, a failed stage stops the call, durations and
the run's identity are kept across calls."""

from __future__ import annotations

import json

import pytest

from . import load_script


def _load():
    return load_script("headline.py", "headline")


hl = _load()
META = {"device": "GPU A", "torch": "2.11", "triton": "3.6.0", "alcop": "0.1.0", "cuda": "13.0", "python": "3.12"}


class Stages:
    """Three stages whose completion the scripted ``execute`` sets; every clock read advances 10 s
    and a stage takes ``cost[name]`` s."""

    def __init__(self, cost: dict[str, float], fail: frozenset[str] = frozenset()) -> None:
        self.now, self.cost, self.fail = 0.0, cost, fail
        self.complete: set[str] = set()
        self.ran: list[list[str]] = []

    def clock(self) -> float:
        self.now += 10
        return self.now

    def stages(self):
        return [(n, [n], lambda n=n: n in self.complete) for n in ("suite", "overhead", "e2e:bert")]

    def execute(self, cmd: list[str], timeout_s: float) -> int:
        self.ran.append(cmd)
        self.now += self.cost[cmd[0]]
        if cmd[0] in self.fail:
            return 1
        self.complete.add(cmd[0])
        return 0


def test_stages_skip_complete_and_stop_at_the_budget(tmp_path):
    run = hl.start_or_resume(tmp_path, META, False)
    st = Stages({"suite": 100, "overhead": 50, "e2e:bert": 200})
    assert not hl.run_stages(tmp_path, run, st.stages(), 450, st.execute, st.clock)
    # suite gets what is left of the budget as its own; overhead fits its default (120 s);
    # e2e's default (240 s) no longer does
    assert st.ran[0][:2] == ["suite", "--budget-s"] and [c[0] for c in st.ran] == ["suite", "overhead"]
    saved = json.loads((tmp_path / "headline.json").read_text())
    assert saved["stages"]["overhead"]["calls"] == [60.0] and saved["stages"]["suite"]["last_rc"] == 0
    st.ran.clear()
    # e2e's expected 240 s do not fit in 200 s either, but a call's first stage always starts
    assert hl.run_stages(tmp_path, run, st.stages(), 200, st.execute, st.clock)
    assert [c[0] for c in st.ran] == ["e2e:bert"]


def test_a_failed_stage_stops_the_call(tmp_path):
    run = hl.start_or_resume(tmp_path, META, False)
    st = Stages({"suite": 10, "overhead": 10, "e2e:bert": 10}, fail=frozenset({"overhead"}))
    assert not hl.run_stages(tmp_path, run, st.stages(), 1000, st.execute, st.clock)
    assert [c[0] for c in st.ran] == ["suite", "overhead"] and run["stages"]["overhead"]["last_rc"] == 1


def test_resume_keeps_the_run_and_refuses_another_device(tmp_path):
    run = hl.start_or_resume(tmp_path, META, False)
    again = hl.start_or_resume(tmp_path, META, False)
    assert again["run_id"] == run["run_id"] and again["calls"] == 2
    with pytest.raises(SystemExit, match="use another OUT"):
        hl.start_or_resume(tmp_path, {**META, "device": "GPU B"}, False)
    with pytest.raises(SystemExit, match="use another OUT"):
        hl.start_or_resume(tmp_path, META, True)


def test_stage_commands_cover_every_gpu_report(tmp_path):
    run = hl.start_or_resume(tmp_path, META, False)
    stages = hl.stage_commands(tmp_path, run, False)
    # the short stages first: a call the suite fills still gives them
    assert [n for n, _, _ in stages] == ["overhead", "e2e:bert", "e2e:gpt2", "e2e:llama", "e2e:resnet50",
                                         "e2e:gpt2:train", "e2e:llama:train", "e2e:resnet50:train", "ablation:wgmma",
                                         "ablation:mma_sync", "ablation_report", "model", "suite"]
    # the grids need a GPU: a dry run leaves them out
    assert not any(n.startswith(("ablation", "model")) for n, _, _ in hl.stage_commands(tmp_path, run, True))
    grid = dict((n, cmd) for n, cmd, _ in stages)
    assert "MMA=mma_sync" in grid["ablation:mma_sync"] and grid["ablation:mma_sync"][-2].endswith("ablation_h100.sh")
    assert grid["model"][grid["model"].index("--data") + 1].endswith("ablation/h100_wgmma_alcop_space.jsonl")
    assert all("--no-compile" not in cmd for _, cmd, _ in stages)
    assert all("--no-compile" in cmd for n, cmd, _ in hl.stage_commands(tmp_path, run, False, no_compile=True)
               if n.startswith("e2e"))
    suite = stages[-1][1]
    assert suite[suite.index("--sets") + 1] == hl.SUITE_SETS and suite[suite.index("--inductor-sets") + 1] == "alcop,heldout"
    assert suite[suite.index("--run-id") + 1] == run["run_id"]
    assert not any(c() for _, _, c in stages)
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "report.json").write_text(json.dumps({"progress": {"left": 3}}))
    assert not stages[-1][2]()
    (tmp_path / "suite" / "report.json").write_text(json.dumps({"progress": {"left": 0}}))
    (tmp_path / "e2e").mkdir()
    (tmp_path / "e2e" / "e2e.json").write_text(json.dumps({"results": [{"model": "gpt2"}]}))
    assert stages[-1][2]() and [n for n, _, c in stages if c()] == ["e2e:gpt2", "suite"]
    grid = dict((n, cmd) for n, cmd, _ in stages)
    assert grid["e2e:llama:train"][-4:] == ["--models", "llama", "--task", "train"]
    (tmp_path / "e2e" / "e2e.json").write_text(json.dumps({"results": [{"model": "gpt2"},
                                                                       {"model": "llama", "task": "train"}]}))
    assert [n for n, _, c in stages if c()] == ["e2e:gpt2", "e2e:llama:train", "suite"]
    (tmp_path / "e2e" / "e2e.json").write_text(json.dumps({"results": [{"model": "gpt2"}]}))
    (tmp_path / "ablation").mkdir()
    (tmp_path / "ablation" / "pipeline_wgmma.json").write_text("{}")
    assert [n for n, _, c in stages if c()] == ["e2e:gpt2", "ablation:wgmma", "suite"]

"""alcop-tune refuses every wrong argument up front: one line on stderr, exit status 2, no traceback.

The cases the command line was seen to get wrong run as ``python -m alcop_triton`` in a child process
that sees no CUDA device (``CUDA_VISIBLE_DEVICES=""``), as a user's shell would run them; the audit of
every other argument runs ``cli.main`` in this process (same code path, a second each instead of five).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from alcop_triton import cli
from alcop_triton.autotune.database import GpuKey, TuningRecord
from alcop_triton.autotune.measure import MeasureResult
from alcop_triton.records import KernelConfig, Workload

REPO = Path(__file__).resolve().parent.parent


def _run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1",
                "ALCOP_DB": str(tmp_path / "t.sqlite"), **env}
    return subprocess.run([sys.executable, "-m", "alcop_triton", *args], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=full_env)


def _one_error_line(res: subprocess.CompletedProcess[str] | tuple[int, str], *needles: str) -> str:
    rc, err = (res.returncode, res.stderr) if isinstance(res, subprocess.CompletedProcess) else res
    # The lines a terminal shows: a progress bar redraws itself after '\r' and one that is done erases itself.
    lines = [shown for line in err.split("\n") if (shown := line.rsplit("\r", 1)[-1]).strip()]
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("alcop-tune"), err
    for n in needles:
        assert n in lines[0], err
    return lines[0]


@pytest.fixture
def factory_dir(tmp_path: Path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    (d / "cli_models.py").write_text("def make():\n    raise AssertionError('never called')\n")
    return d


CHILD_CASES = {
    "layout": (["tune", "matmul", "64x64x64", "--layout", "zz"], ("--layout", "'zz'", "nn, nt, tn, tt")),
    "trials": (["tune", "matmul", "64x64x64", "--trials", "0"], ("--trials", ">= 1")),
    "device cuda without CUDA": (["bench", "matmul", "64x64x64", "--device", "cuda"], ("--device cuda", "no CUDA")),
    "missing module": (["tune", "--model", "no_such_module_xyz:make"], ("no module named 'no_such_module_xyz'",)),
    "missing attribute": (["tune", "--model", "cli_models:nope"], ("cli_models has no attribute 'nope'",)),
    "calibrate without a GPU": (["calibrate"], ("alcop-tune calibrate", "no CUDA device")),
}


@pytest.mark.parametrize("case", CHILD_CASES)
def test_user_errors_end_in_one_line(case: str, tmp_path: Path, factory_dir: Path) -> None:
    args, needles = CHILD_CASES[case]
    res = _run(args, tmp_path, PYTHONPATH=str(factory_dir))
    _one_error_line(res, *needles)
    assert not (tmp_path / "t.sqlite").exists()  # refused before any work


def test_report_without_matplotlib_says_how_to_install_it(tmp_path: Path) -> None:
    # A matplotlib that fails to import, as an uninstalled one does; checked before any replay.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "matplotlib.py").write_text("raise ModuleNotFoundError(\"No module named 'matplotlib'\")\n")
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"rows": []}))
    res = _run(["report", "--bench", str(bench), "--out", str(tmp_path / "out")], tmp_path, PYTHONPATH=str(shadow))
    _one_error_line(res, "matplotlib", "alcop_triton[plots]")
    assert not (tmp_path / "out").exists()


def test_calibrate_help_names_the_command(tmp_path: Path) -> None:
    res = _run(["calibrate", "--help"], tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("usage: alcop-tune calibrate")
    assert "alcop_triton.model.calibrate" not in res.stdout


def _records_file(path: Path) -> Path:
    w = Workload("matmul", (256, 256, 256), "float16", "nn")
    recs = [TuningRecord.from_result(w, MeasureResult(KernelConfig(block_m=bm), 0.01 * i), GpuKey("H100", "9.0"))
            for i, bm in enumerate((32, 64, 128), 1)]
    path.write_text("".join(r.to_json() + "\n" for r in recs))
    return path


IN_PROCESS_CASES = {
    "op": ["tune", "softmax", "64x64x64"],
    "shape text": ["tune", "matmul", "64xAx64"],
    "shape length": ["bench", "matmul", "64x64"],
    "negative dim": ["tune", "matmul", "64x-1x64"],
    "empty GEMM dim": ["tune", "matmul", "64x0x64"],
    "shape without an op": ["tune", "64x64x64"],
    "conv layout": ["tune", "conv2d", "1x8x8x16x16x3x3x1x1", "--layout", "nt"],
    "layout without an op": ["tune", "--suite", "SUITE", "--layout", "nt"],
    "dtype": ["tune", "matmul", "64x64x64", "--dtype", "float64"],
    "device text": ["tune", "matmul", "64x64x64", "--device", "gpu"],
    "unknown --gpu": ["tune", "matmul", "64x64x64", "--gpu", "Z80"],
    "timeout": ["bench", "matmul", "64x64x64", "--timeout", "0"],
    "timeout nan": ["tune", "matmul", "64x64x64", "--timeout", "nan"],
    "batch": ["tune", "matmul", "64x64x64", "--batch", "0"],
    "seed": ["tune", "matmul", "64x64x64", "--seed", "-1"],
    "top-k": ["tune", "matmul", "64x64x64", "--top-k", "0"],
    "patience": ["tune", "matmul", "64x64x64", "--patience", "x"],
    "compile workers": ["tune", "matmul", "64x64x64", "--compile-workers", "-2"],
    "tuner": ["tune", "matmul", "64x64x64", "--tuner", "magic"],
    "variant": ["tune", "matmul", "64x64x64", "--variant", "nope"],
    "model form": ["tune", "--model", "justamodule"],
    "capture device": ["tune", "--model", "m:f", "--capture-device", "cuda"],
    "suite missing": ["tune", "--suite", "nowhere.json"],
    "suite not JSON": ["tune", "--suite", "NOTJSON"],
    "suite form": ["tune", "--suite", "BADSUITE"],
    "suite ops": ["tune", "--suite", "SUITE", "--suite-ops", "dense,softmax"],
    "json is a directory": ["tune", "matmul", "64x64x64", "--json", "DIR"],
    "csv under a file": ["bench", "matmul", "64x64x64", "--csv", "NOTJSON/out.csv"],
    "show top": ["show", "--top", "0"],
    "show op": ["show", "--op", "softmax"],
    "export format": ["export", "--format", "yaml"],
    "import nothing": ["import"],
    "compare data missing": ["compare-tuners", "nowhere"],
    "compare no records": ["compare-tuners", "DIR"],
    "compare tuners": ["compare-tuners", "DATA", "--tuners", "grid,magic"],
    "compare budgets": ["compare-tuners", "DATA", "--budgets", "10,x"],
    "compare budget past k-max": ["compare-tuners", "DATA", "--k-max", "5", "--budgets", "10"],
    "compare k-max": ["compare-tuners", "DATA", "--k-max", "0"],
    "compare seeds": ["compare-tuners", "DATA", "--seeds", "0"],
    "compare jobs": ["compare-tuners", "DATA", "--jobs", "0"],
    "compare workload": ["compare-tuners", "DATA", "--workload", "conv3d"],
    "report nothing": ["report"],
    "report two sources": ["report", "--curves", "NOTJSON", "--data", "DATA"],
    "report curves not JSON": ["report", "--curves", "NOTJSON"],
    "report curves form": ["report", "--curves", "BADSUITE"],
    "report bench form": ["report", "--bench", "BADSUITE"],
    "report out is a file": ["report", "--bench", "NOTJSON", "--out", "NOTJSON"],
    "report k-max": ["report", "--data", "DATA", "--k-max", "-1"],
    "command": ["frobnicate"],
    "no command": [],
}


@pytest.mark.parametrize("case", IN_PROCESS_CASES)
def test_every_argument_is_checked(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALCOP_DB", str(tmp_path / "t.sqlite"))
    files = {"SUITE": tmp_path / "suite.json", "NOTJSON": tmp_path / "notes.txt", "BADSUITE": tmp_path / "bad.json",
             "DIR": tmp_path / "empty", "DATA": _records_file(tmp_path / "h100.jsonl")}
    files["SUITE"].write_text(json.dumps({"dense": {"shapes_MNK": [[64, 64, 64]]}}))
    files["NOTJSON"].write_text("not json\n")
    files["BADSUITE"].write_text(json.dumps({"dense": [1, 2], "rows": 3}))
    files["DIR"].mkdir()
    argv = [str(files[a]) if a in files else a.replace("NOTJSON", str(files["NOTJSON"])) for a in IN_PROCESS_CASES[case]]
    capsys.readouterr()
    rc = cli.main(argv)
    err = capsys.readouterr().err
    _one_error_line((rc, err))
    assert not (tmp_path / "t.sqlite").exists()


def test_a_file_of_other_rows_is_skipped_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A data directory may hold a probe's own rows next to the measurement files (benchmarks/data did):
    replay skips that file, saying so once, and replays the rest."""
    data = tmp_path / "data"
    data.mkdir()
    _records_file(data / "h100.jsonl")
    (data / "probe.jsonl").write_text("".join(json.dumps({"M": 64, "ms": 0.1 * i}) + "\n" for i in range(50)))
    assert cli.main(["compare-tuners", str(data), "--k-max", "3", "--budgets", "1,3", "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    skipped = [line for line in err.splitlines() if "probe.jsonl" in line]
    assert len(skipped) == 1 and "not a file of tuning records" in skipped[0]
    assert "RecordSkipped" not in err and "replay" in err  # the replay's progress bar


def test_internal_errors_keep_their_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only user errors are turned into one line: a bug in a command is raised as it is."""
    def broken(args: object) -> int:
        raise KeyError("a bug")

    monkeypatch.setattr(cli, "cmd_show", broken)
    with pytest.raises(KeyError, match="a bug"):
        cli.main(["--db", str(tmp_path / "t.sqlite"), "show"])


def test_a_reader_that_stops_early_gets_no_error(tmp_path: Path) -> None:
    """`alcop-tune show --all | head -1`: the closed pipe ends the command without a message."""
    from alcop_triton.autotune.database import Database

    db = Database(tmp_path / "t.sqlite")
    db.add([TuningRecord.from_result(Workload("matmul", (m, 256, 256), "float16", "nn"),
                                     MeasureResult(KernelConfig(block_m=bm, num_warps=nw, smem_stages=st), 0.01),
                                     GpuKey("H100", "9.0"))
            for m in range(64, 704, 64) for bm in (16, 32, 64, 128, 256) for nw in (2, 4, 8) for st in range(1, 9)])
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    with subprocess.Popen([sys.executable, "-m", "alcop_triton", "--db", str(db.path), "show", "--all"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("gpu")
        proc.stdout.close()  # more than a pipe's buffer is still to come
        err = proc.stderr.read()
        assert proc.wait(timeout=120) == 1
    assert err == "", err

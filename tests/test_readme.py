"""The README's promises, checked as a newcomer would meet them.

* every ```python block runs as pasted, on its own, in a fresh interpreter (Triton's CPU interpreter
  without CUDA), so no block leans on a name defined in another;
* every line of a ```bash block is a valid shell command: bash parses it, its program exists, and an
  ``alcop-tune`` line is accepted by the CLI's own argument parser (so no option is misspelled);
* the page stays a product page: at most 300 lines, and every relative link points at a file that exists.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
TEXT = README.read_text()

FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def _blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(TEXT) if kind == lang]


PYTHON_BLOCKS = _blocks("python")
SHELL_LINES = [line for body in _blocks("bash") for line in body.splitlines()
               if line.strip() and not line.lstrip().startswith("#")]
# Programs a README shell line may start with; each must exist where the tests run (alcop-tune is the
# package's entry point, so the editable install puts it next to this interpreter).
PROGRAMS = {"bash", "pip", "python", "python3", "alcop-tune", "git", "cd", "export"}


def test_readme_is_a_product_page() -> None:
    assert len(TEXT.splitlines()) <= 300
    assert PYTHON_BLOCKS and SHELL_LINES


@pytest.mark.parametrize("link", sorted(set(re.findall(r"\]\(((?!https?:|#)[^)#]+)", TEXT))))
def test_relative_links_exist(link: str) -> None:
    assert (REPO / link).exists(), f"README.md links to {link}, which does not exist"


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_runs_as_pasted(index: int, tmp_path: Path) -> None:
    env = dict(os.environ)
    env.setdefault("TRITON_INTERPRET", "0" if _has_cuda() else "1")
    env["ALCOP_DB"] = str(tmp_path / "tuning.sqlite")      # never the user's database
    proc = subprocess.run([sys.executable, "-c", PYTHON_BLOCKS[index]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"README python block {index} failed:\n{PYTHON_BLOCKS[index]}\n{proc.stderr[-3000:]}"


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _command_words(line: str) -> list[str]:
    # A trailing comment is documentation, not part of the command.
    return shlex.split(line, comments=True)


@pytest.mark.parametrize("line", SHELL_LINES)
def test_shell_line_is_a_valid_command(line: str) -> None:
    parsed = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True)
    assert parsed.returncode == 0, f"bash cannot parse {line!r}: {parsed.stderr}"
    for part in re.split(r"&&|\|\||;|\|", line.split(" #")[0]):
        words = _command_words(part)
        if not words:
            continue
        program = words[0]
        assert program in PROGRAMS, f"{line!r} runs {program!r}, which the README's reader may not have"
        if program not in ("cd", "export"):
            exe = Path(sys.executable).parent / program
            assert shutil.which(program) or exe.exists(), f"{program!r} is not installed"
        if program == "alcop-tune":
            from alcop_triton import cli
            try:
                cli.build_parser().parse_args(words[1:])
            except SystemExit as e:   # argparse's way of rejecting arguments
                pytest.fail(f"alcop-tune rejects the README's {line!r} (exit {e.code})")
        if program == "bash" and len(words) > 1:
            assert (REPO / words[1]).is_file(), f"{line!r} runs a script that does not exist"

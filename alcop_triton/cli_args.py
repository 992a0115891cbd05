"""What ``alcop-tune`` accepts: argument types and the checks that run before any command's work.

Every value typed on the command line is checked here, while the arguments are parsed or right after,
before a command imports its measurement, replay or plotting modules or starts a process: a wrong value
costs a second and one line on stderr, never a traceback and never a half-run command. The parser's own
errors are raised as ``UsageError`` (not printed with a usage block and ``sys.exit``), so that ``cli.main``
reports every user error the same way: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from .errors import AlcopError
from .records import OPS

GEMM_LAYOUTS: tuple[str, ...] = ("nn", "nt", "tn", "tt")
"""A GEMM's operand storage, A then B: 'n' row-major as in the math, 't' transposed."""
CONV_LAYOUTS: tuple[str, ...] = ("nhwc", "nchw")
"""A convolution's input storage: channels last or channels first (the records' two conv layouts)."""
SUITE_SECTIONS: tuple[str, ...] = ("dense", "bmm", "conv2d", "conv3d")
"""Sections of a suite file (``tests/data/alcop_suite.json``); ``--suite-ops`` also takes the op names."""


class UsageError(AlcopError, ValueError):
    """A command-line argument, or a file it names, is wrong; reported as one line with exit status 2.

    ``prog`` is the command the message belongs to ("alcop-tune tune"); None: the command that ran.
    """

    def __init__(self, message: str, prog: str | None = None) -> None:
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are ``UsageError``s (one line), not a usage block and an exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)", prog=self.prog)


# ------------------------------------------------------------------------------------------------
# Types: called by argparse on each value, so a bad one is refused while the arguments are parsed.

def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""
    def parse(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{value}: must be an integer >= {low}")
        return value

    parse.__name__ = f"int >= {low}"
    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def gpus(text: str) -> str:
    """``--gpus``: 'all' or a number of GPUs >= 1 (kept as text: the pool resolves 'all' on the host)."""
    if text.strip().lower() == "all":
        return "all"
    return str(positive_int(text))


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text}: must be a finite number > 0")
    return value


def parse_shape(text: str) -> tuple[int, ...]:
    """'1024x768x3072' (or with commas) to a tuple of non-negative ints (a conv's padding may be 0);
    which lengths and values an op takes is the Workload's rule, checked once the op is known."""
    try:
        dims = tuple(int(d) for d in text.replace(",", "x").lower().split("x") if d)
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected ints joined by 'x', e.g. 1024x768x3072") from None
    if not dims:
        raise argparse.ArgumentTypeError(f"shape {text!r} is empty")
    if min(dims) < 0:
        raise argparse.ArgumentTypeError(f"shape {text!r}: dims must be >= 0")
    return dims


def comma_list(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each one of ``allowed``, at least one."""
    def parse(text: str) -> list[str]:
        names = [s.strip() for s in text.split(",") if s.strip()]
        bad = [s for s in names if s not in allowed]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated names from {','.join(allowed)}")
        return list(dict.fromkeys(names))

    parse.__name__ = "name list"
    return parse


def int_list(text: str) -> list[int]:
    """An argparse type: comma-separated integers >= 1, e.g. '10,50'."""
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers, e.g. 10,50") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers >= 1, e.g. 10,50")
    return values


def device_name(text: str) -> str:
    """An argparse type: 'cpu', 'cuda' or 'cuda:N' (whether that device exists is ``check_device``'s)."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"{text!r}: expected cpu, cuda or cuda:N")
    return text


def model_factory(text: str) -> str:
    """An argparse type: 'module:callable' (resolved by ``check_model`` once parsing is done)."""
    module, sep, attr = text.partition(":")
    if not sep or not module.strip() or not attr.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected 'module:callable', e.g. 'mypkg.models:make_bert'")
    return text


def input_file(text: str) -> str:
    """An argparse type: an existing, readable file."""
    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file" if not path.exists() else f"{text}: not a file")
    return str(path)


def input_path(text: str) -> str:
    """An argparse type: an existing file or directory."""
    if not Path(text).expanduser().exists():
        raise argparse.ArgumentTypeError(f"{text}: no such file or directory")
    return str(Path(text).expanduser())


def output_file(text: str) -> str:
    """An argparse type: a file that can be written (its directory is created as needed): not a
    directory, and no existing component of its directory is a file."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a directory; expected a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a directory")
            break
    return str(path)


def output_dir(text: str) -> str:
    """An argparse type: a directory to write into (created as needed), not an existing file."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a file; expected a directory")
    return str(path)


# ------------------------------------------------------------------------------------------------
# Checks across arguments and against this machine, run after parsing and before the command.

def check_layout(op: str | None, layout: str | None) -> None:
    """``--layout`` names operand storage of the op given on the command line, and fits that op."""
    if layout is None:
        return
    if op is None:
        raise UsageError(f"--layout {layout}: applies to an op named with shapes (suite files and --model "
                         f"carry their own layouts)")
    allowed = CONV_LAYOUTS if op.startswith("conv") else GEMM_LAYOUTS
    if layout not in allowed:
        raise UsageError(f"--layout {layout!r} for {op}: expected one of {', '.join(allowed)}")


def check_device(device: str | None) -> None:
    """A cuda device exists where one is asked for (cpu, and no --device, always do)."""
    if device is None or device == "cpu":
        return
    import torch  # imported already by the package; the check costs nothing more

    if not torch.cuda.is_available():
        raise UsageError(f"--device {device}: torch sees no CUDA device here; leave --device out (or pass cpu) "
                         f"to measure in the Triton interpreter")
    index = torch.device(device).index
    if index is not None and index >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s), "
                         f"numbered from 0")


def require_cuda(command: str) -> None:
    """``command`` measures a GPU: refuse it on a machine where torch sees none."""
    import torch

    if not torch.cuda.is_available():
        raise UsageError(f"no CUDA device: {command} measures the GPU it runs on, and torch sees none here")


def check_gpu(name: str | None) -> None:
    """``--gpu`` names a GPU the performance model has a spec for (a preset or a calibration)."""
    if name is None:
        return
    from .errors import UnsupportedError
    from .model import hardware

    try:
        hardware.get_spec(name)
    except UnsupportedError:
        raise UsageError(f"--gpu {name!r}: no spec for this GPU; known: {', '.join(hardware.preset_names())} "
                         f"(on the GPU itself, `alcop-tune calibrate` measures one)") from None
    except ValueError as exc:  # e.g. a damaged calibration file; its message says which and what to do
        raise UsageError(f"--gpu {name!r}: {exc}") from None


def check_model(spec: str | None) -> None:
    """``--model module:callable``: the module imports and has the callable.

    Only the named module missing is a usage error; an import error raised by the module's own code
    (a dependency it lacks) is the model's to report, with its traceback.
    """
    if spec is None:
        return
    module, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise
        raise UsageError(f"--model {spec}: no module named {exc.name!r} (is it on PYTHONPATH?)") from None
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            where = ".".join([module, *attr.split(".")[:i]])
            raise UsageError(f"--model {spec}: {where} has no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise UsageError(f"--model {spec}: {attr} is not callable")


def check_plots() -> None:
    """matplotlib is installed (the ``plots`` extra): checked before a report replays any data."""
    from .autotune import report

    try:
        report.require_matplotlib()
    except ImportError as exc:
        raise UsageError(str(exc)) from None

"""docs/architecture.md names the functions of a call's path; each must exist (imported, not guessed)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
NAME = re.compile(r"`(alcop_triton(?:\.\w+)+)`")


def _resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)  # AttributeError names what the document got wrong
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_document_names_a_call_path() -> None:
    names = set(NAME.findall(DOC.read_text()))
    # the first and the repeated call, top to bottom
    assert {"alcop_triton.ops.gemm.matmul", "alcop_triton.ops.route.call", "alcop_triton.fastpath.launch_kernel",
            "alcop_triton.ops.route._site_hit"} <= names


def test_every_named_function_exists() -> None:
    missing = []
    for dotted in sorted(set(NAME.findall(DOC.read_text()))):
        try:
            _resolve(dotted)
        except (ImportError, AttributeError) as e:
            missing.append(f"{dotted}: {e}")
    assert missing == []


def test_a_wrong_name_is_caught() -> None:
    for wrong in ("alcop_triton.ops.gemm.no_such_function", "alcop_triton.no_such_module.call"):
        try:
            _resolve(wrong)
        except (ImportError, AttributeError):
            continue
        raise AssertionError(f"{wrong} resolved")

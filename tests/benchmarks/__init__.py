"""Tests of the scripts under ``benchmarks/`` (scripts, not a package: each is loaded from its file)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(rel: str, name: str) -> ModuleType:
    """``benchmarks/<rel>`` as the module ``name``: registered in ``sys.modules`` (dataclasses look their
    module up there), with ``benchmarks/`` importable (scripts import each other)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / rel)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod

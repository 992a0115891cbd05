"""Exception hierarchy.

User errors subclass the builtin type torch would raise for the same mistake (``ValueError``,
``TypeError``, ``RuntimeError``), so ``except`` clauses written for torch keep working.
Messages say what was wrong, which object, the value seen, the rule, and how to fix it.
"""

from __future__ import annotations


class AlcopError(Exception):
    """Base class of every error raised by alcop_triton."""


class ScheduleError(AlcopError, ValueError):
    """A schedule step or tensor expression is invalid; raised eagerly, at the step."""


class UnsupportedError(AlcopError, NotImplementedError):
    """Valid input that alcop_triton does not handle (yet); names the op or node."""


class OutOfResources(AlcopError, RuntimeError):
    """A config needs more of a hardware resource than the GPU has."""

    def __init__(self, name: str, required: int, limit: int, hint: str = "") -> None:
        self.name, self.required, self.limit, self.hint = name, required, limit, hint
        msg = f"out of resource: {name}, required {required}, hardware limit {limit}."
        super().__init__(msg + (f" {hint}" if hint else ""))

    def __reduce__(self):  # picklable across the measurement worker boundary
        return (OutOfResources, (self.name, self.required, self.limit, self.hint))


class PipelineError(AlcopError, ValueError):
    """A requested pipeline depth cannot be realised and strict mode forbids clamping."""


class LoweringError(AlcopError, RuntimeError):
    """Internal failure in a lowering pass; carries the pass name. Please report it."""


class CodegenError(LoweringError):
    """Generated Triton source failed to compile as Python."""


class TuningError(AlcopError, RuntimeError):
    """No valid config survived pruning or measurement."""


class DatabaseError(AlcopError, RuntimeError):
    """A tuning record is corrupt, tampered with or of an unknown schema."""

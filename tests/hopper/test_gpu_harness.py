"""The GPU tests' harness on the CPU: a case that never ends fails its test within the timeout (as a
deadlocked kernel would), and a case that raises fails it with the child's traceback."""

from __future__ import annotations

import pytest

import tests.hopper.test_matmul_gpu as gpu


def test_a_case_that_hangs_fails_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "TIMEOUT_S", 5)
    with pytest.raises(pytest.fail.Exception, match="no result within 5 s, killed"):
        gpu._apart("SHAPES.append(__import__('time').sleep(60))")


def test_a_case_that_raises_fails_with_its_traceback() -> None:
    with pytest.raises(AssertionError, match="KeyError: 'no such config'"):
        gpu._apart("CONFIGS['no such config']")

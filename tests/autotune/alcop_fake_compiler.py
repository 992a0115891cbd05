"""A compile function for the compile-pool tests (imported in spawned workers).

Each compile leaves a file named after the config in ``$ALCOP_TEST_COMPILED``. block_n=16 raises
(a compile error); block_k=128 kills its worker process (a compiler crash).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


def compile_config(workload, config, device):
    if config.block_k == 128:
        os.kill(os.getpid(), signal.SIGKILL)
    if config.block_n == 16:
        raise RuntimeError("ptxas error")
    (Path(os.environ["ALCOP_TEST_COMPILED"]) / str(config)).touch()

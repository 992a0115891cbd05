"""A compile function for the compile-pool tests (imported in spawned workers).

Each compile leaves a file named after the config in ``$ALCOP_TEST_COMPILED``. block_n=16 raises
(a compile error); block_k=128 kills its worker process (a compiler crash); smem_stages=7 takes
``$ALCOP_TEST_SLOW_S`` seconds (a slow compile).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def compile_config(workload, config, device):
    if config.block_k == 128:
        os.kill(os.getpid(), signal.SIGKILL)
    if config.block_n == 16:
        raise RuntimeError("ptxas error")
    if config.smem_stages == 7:
        time.sleep(float(os.environ.get("ALCOP_TEST_SLOW_S", "0")))
    (Path(os.environ["ALCOP_TEST_COMPILED"]) / str(config)).touch()

"""A runner factory with scripted failures, for the measurement tests (imported in spawned children).

Behaviour by config: block_n=16 -> ScheduleError at build (invalid_config); block_n=32 ->
OutOfResources at build; block_k=128 -> the process dies while building (compile crash);
block_m=16 -> run raises (runtime); block_m=32 -> run hangs (timeout); block_m=64 with
block_n=128 -> the process dies while running; block_m=128 -> wrong answer; anything else computes
a correct matmul on CPU. With ALCOP_FAKE_RUNNER_EXIT_MARKER set, the importing process writes
that file when its interpreter shuts down normally.
"""

from __future__ import annotations

import atexit
import os
import signal
import time

import torch

from alcop_triton.errors import OutOfResources, ScheduleError


if os.environ.get("ALCOP_FAKE_RUNNER_EXIT_MARKER"):
    atexit.register(lambda path=os.environ["ALCOP_FAKE_RUNNER_EXIT_MARKER"]: open(path, "w").close())


class FakeRunner:
    rtol = 1e-3

    def __init__(self, workload, config):
        self.workload, self.config = workload, config

    def inputs(self, seed):
        g = torch.Generator().manual_seed(seed)
        _, m, n, k = self.workload.gemm_dims()
        return torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)

    def reference(self, inputs):
        a, b = inputs
        return a.double() @ b.double()

    def run(self, inputs):
        c = self.config
        if c.block_m == 16:
            raise RuntimeError("illegal instruction in kernel")
        if c.block_m == 32:
            time.sleep(3600)
        if c.block_m == 64 and c.block_n == 128:
            os.kill(os.getpid(), signal.SIGKILL)
        a, b = inputs
        out = a @ b
        if c.block_m == 128:
            out[0, 0] += 1.0
        return out


def make_runner(workload, config, device):
    if config.block_n == 16:
        raise ScheduleError("block_n=16 cannot be scheduled")
    if config.block_n == 32:
        raise OutOfResources("shared memory", 300000, 232448)
    if config.block_k == 128:
        os.kill(os.getpid(), signal.SIGKILL)
    return FakeRunner(workload, config)

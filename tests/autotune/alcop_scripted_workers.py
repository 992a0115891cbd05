"""Worker-side doubles for the pool tests (imported in spawned worker processes).

``measurer``: a measurer whose times are a fixed function of the config (the same in every worker), so
a run's decisions can be compared exactly between pools of different sizes; every config with
block_m == 16 fails its check. It appends each config it measures, with this worker's label, to
``$ALCOP_TEST_MEASURED``. ``calibration``: a calibration time per worker read from
``$ALCOP_TEST_CALIBRATION`` ("label=ms,label=ms"; 1.0 for a worker it does not name).
"""

from __future__ import annotations

import os

from alcop_triton.autotune import workers
from alcop_triton.autotune.measure import ErrorKind, MeasureResult


class ScriptedMeasurer:
    def __init__(self, workload, options):
        self.workload, self.seed = workload, 0

    def measure(self, configs, on_result=None):
        out = []
        for c in configs:
            with open(os.environ["ALCOP_TEST_MEASURED"], "a") as f:
                f.write(f"{workers._WORKER_LABEL} {c}\n")
            r = (MeasureResult(c, None, ErrorKind.WRONG_ANSWER, "mismatch") if c.block_m == 16
                 else MeasureResult(c, 0.01 * c.block_k / 16 + 0.001 * c.smem_stages + 1e-4 * c.num_warps
                                    + 1e-5 * c.block_n / 16, None, "", "cuda_graph"))
            if on_result is not None:
                on_result(r)
            out.append(r)
        return out


def measurer(workload, options):
    return ScriptedMeasurer(workload, options)


def calibration(device):
    table = dict(kv.split("=") for kv in os.environ.get("ALCOP_TEST_CALIBRATION", "").split(",") if kv)
    return float(table.get(workers._WORKER_LABEL, 1.0))

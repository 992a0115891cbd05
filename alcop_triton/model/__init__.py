"""Performance models for tiled, pipelined Triton GEMM-like kernels (ALCOP section 4).

* ``hardware``: ``GPUSpec`` presets (A100, H100, H200), ``get_spec``, ``detect``, calibration files.
* ``analytical``: Table 5.1 (``estimate``, ``resources``) and the bottleneck baseline.
* ``fit``: fit the model's efficiency constants to measurements.
* ``features`` / ``xgb_model``: the XGBoost cost model pretrained on the analytical model
  (imports xgboost lazily).
* ``predict_times``: score Triton-style config dicts for one operator.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..records import KernelConfig, Workload
from .analytical import Estimate, Resources, bottleneck_estimate, estimate, pipeline_latency, resources
from .data import Measurement, load_jsonl
from .fit import fit_constants
from .hardware import GPUSpec, detect, get_spec

__all__ = ["GPUSpec", "get_spec", "detect", "Resources", "Estimate", "resources", "estimate",
           "bottleneck_estimate", "pipeline_latency", "fit_constants", "Measurement", "load_jsonl",
           "predict_times"]


def predict_times(op: str, shape: Sequence[int], dtype: str, configs: Sequence[Mapping[str, Any]],
                  gpu: str | GPUSpec = "H100", *, layout: str = "nn") -> list[float]:
    """Predicted seconds of each config on one operator, by the analytical model.

    ``op``/``shape``: "matmul"/"linear" (M, N, K), "bmm" (B, M, N, K), "conv2d" (N, H, W, CI, CO,
    KH, KW, stride, pad) and the other forms ``Workload`` accepts. ``configs`` are dicts in Triton's
    parameterization (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M or GROUP_SIZE_M, num_warps, num_stages,
    REG_STAGES, REG_SPLIT, ASYNC_COPY); absent knobs take KernelConfig's defaults. ``gpu`` is a
    name ("H100", "NVIDIA H100 80GB HBM3", ...) or a ``GPUSpec``.

    Returns one float per config, ``inf`` for a well-formed config that cannot run on the GPU (out
    of shared memory, registers). A malformed dict (unknown key, wrong type, invalid value) raises
    ValueError naming its index.
    """
    try:
        workload = Workload(op=op, shape=tuple(shape), dtype=dtype, layout=layout)
    except (TypeError, ValueError) as e:
        raise ValueError(f"predict_times: bad workload {op!r} {tuple(shape)!r} {dtype!r}: {e}") from e
    spec = get_spec(gpu)
    parsed: list[KernelConfig] = []
    for i, d in enumerate(configs):
        if not isinstance(d, Mapping):
            raise ValueError(f"predict_times: configs[{i}] is a {type(d).__name__}, expected a dict of Triton config keys")
        try:
            parsed.append(KernelConfig.from_dict(d))
        except (TypeError, ValueError) as e:
            raise ValueError(f"predict_times: configs[{i}] = {dict(d)!r}: {e}") from e
    return [estimate(workload, c, spec).time_s for c in parsed]

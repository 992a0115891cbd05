"""GPU descriptions for the performance models: presets, detection and calibrated overrides.

A ``GPUSpec`` carries two kinds of numbers:

* hardware facts (SM count, shared memory, registers, L2 size) and measured rates (DRAM and L2
  bandwidth, tensor-core throughput on both MMA paths, memory latencies); the presets hold what
  was measured on this project's machines or the datasheet where nothing was measured, and
  ``alcop-tune calibrate`` replaces them with measurements of the local GPU;
* a few efficiency constants of the analytical model (``compute_eff``, ``iter_overhead_cycles``,
  ...) that describe how Triton-generated code uses that hardware. They have sensible defaults
  for Triton 3.6 and are fitted to measurements by ``alcop_triton.model.fit.fit_constants``.

All rates are in SI units (bytes/s, FLOP/s, seconds) so terms can be added without conversions.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import settings
from ..settings import cache_dir
from ..errors import UnsupportedError

MMA_PATHS: tuple[str, ...] = ("wgmma", "mma_sync")
SPEC_FILE_VERSION = 1


@dataclass(frozen=True)
class GPUSpec:
    """One GPU as the performance models see it.

    Throughputs ``tc_*`` are attainable dense rates of the whole GPU (what a well-tuned library
    GEMM reaches), per input precision and MMA path: ``wgmma`` (Hopper warpgroup MMA, operands
    from shared memory) and ``mma_sync`` (Ampere-style per-warp MMA from registers, what Triton
    emits on Hopper with ``DISABLE_MMA_V3=1`` or when a tile cannot use wgmma). float32 inputs
    are modelled as TF32, Triton's default ``input_precision`` for ``tl.dot``.
    """

    name: str
    cc: tuple[int, int]
    num_sms: int
    smem_per_sm: int            # bytes of shared memory per SM (including the 1 KB per block the driver reserves)
    smem_per_block: int         # largest opt-in dynamic shared memory of one block (Triton's "hardware limit")
    l2_bytes: int
    dram_bw: float              # bytes/s, read + write counted (what a device-to-device copy shows)
    l2_bw: float                # bytes/s, aggregate L2 read bandwidth of all SMs
    clock_hz: float             # sustained SM clock under tensor-core load
    tc_fp16_wgmma: float        # FLOP/s, fp16/bf16 inputs, fp32 accumulate
    tc_tf32_wgmma: float
    tc_fp16_mma: float
    tc_tf32_mma: float
    lat_dram_read: float        # seconds, unloaded round trip of a load that misses L2
    lat_l2_read: float          # seconds, unloaded round trip of a load that hits L2
    lat_dram_write: float       # seconds, until a store leaves the SM and drains (epilogue model)
    regs_per_sm: int = 65536
    max_regs_per_thread: int = 255
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    smem_bytes_per_clk: int = 128   # shared-memory bandwidth of one SM (32 banks x 4 bytes)
    mma: str = "wgmma"              # which MMA path Triton will emit for eligible tiles
    # Efficiency constants of the analytical model (model.fit.fit_constants refits them). Defaults:
    # fitted to ~7000 plain Triton 3.6 fp16 matmul timings on an H100 (15 shapes, all tiles/stages);
    # those timings were not kept: `python -m alcop_triton.model.fit` re-derives such a set from the
    # committed measurements (benchmarks/data/h100_wgmma_fit.jsonl.gz) and refits it
    # (docs/decisions.md#d14).
    compute_eff: float = 0.97           # steady-state fraction of tc_* a Triton main loop reaches
    single_issuer_util: float = 0.95    # tensor-core utilisation with one MMA issuer per SM sub-partition
    iter_overhead_cycles: float = 45.0  # per main-loop iteration: barrier/mbarrier wait, loop control
    ptr_issue_cycles: float = 8.0       # per warp-wide 16-byte cp.async: address arithmetic + issue
    tma_issue_cycles: float = 10.0      # per main-loop iteration with TMA: one thread issues the copies + expect-tx
    latency_scale: float = 1.5          # loaded memory latency / unloaded latency
    conv_index_factor: float = 2.5      # im2col address arithmetic multiplies pointer-load issue cost
    launch_s: float = 5e-6              # launch + first-wave ramp, paid once per kernel
    source: str = "preset"

    def __post_init__(self) -> None:
        if self.mma not in MMA_PATHS:
            raise ValueError(f"GPUSpec.mma={self.mma!r}: must be one of {MMA_PATHS}")
        if self.mma == "wgmma" and self.cc < (9, 0):
            raise ValueError(f"GPUSpec {self.name!r} (cc {self.cc}) has no wgmma; use mma='mma_sync'")

    @property
    def smem_bw_per_sm(self) -> float:
        """Shared-memory bytes/s of one SM."""
        return self.smem_bytes_per_clk * self.clock_hz

    def tc_flops(self, dtype: str, path: str) -> float:
        """Attainable tensor-core FLOP/s of the whole GPU for an input dtype on an MMA path."""
        tf32 = dtype == "float32"
        if path == "wgmma":
            return self.tc_tf32_wgmma if tf32 else self.tc_fp16_wgmma
        return self.tc_tf32_mma if tf32 else self.tc_fp16_mma

    def with_mma(self, mma: str) -> "GPUSpec":
        """The same GPU with Triton restricted to (or allowed) an MMA path.

        ``"mma_sync"`` models Hopper with ``DISABLE_MMA_V3=1``; ``"wgmma"`` needs cc >= 9.0.
        """
        return dataclasses.replace(self, mma=mma)

    def replace(self, **changes: Any) -> "GPUSpec":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["cc"] = list(self.cc)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GPUSpec":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - fields
        if unknown:
            raise ValueError(f"GPUSpec.from_dict: unknown fields {sorted(unknown)}")
        kw = dict(d)
        kw["cc"] = tuple(kw["cc"])
        return cls(**kw)


KB, MB = 1024, 1024 * 1024

# Presets. Sources: datasheets for sizes; rates measured on this project's machines where noted
# (KINDS.md: H100 d2d copy ~3.0 TB/s, bf16 8192^3 ~798 TFLOP/s; H200 ~4.3 TB/s, ~790 TFLOP/s, 60 MB
# L2 as seen); mma_sync throughput on Hopper scaled from Triton's 335 vs 585 TFLOP/s (4096^3 fp16
# with DISABLE_MMA_V3=1 vs default). Latencies are typical microbenchmark values (~260 cycles L2 hit,
# ~550-650 ns DRAM) until `calibrate` measures them. Hopper's L2 rate is what a 128x256x64 Triton
# main loop was seen to sustain from L2 here (>= 8.6 TB/s), rounded up.
_PRESETS: dict[str, GPUSpec] = {
    "a100": GPUSpec(
        name="A100", cc=(8, 0), num_sms=108, smem_per_sm=164 * KB, smem_per_block=163 * KB,
        l2_bytes=40 * MB, dram_bw=1.40e12, l2_bw=3.8e12, clock_hz=1.41e9,
        tc_fp16_wgmma=0.0, tc_tf32_wgmma=0.0, tc_fp16_mma=280e12, tc_tf32_mma=140e12,
        lat_dram_read=480e-9, lat_l2_read=200e-9, lat_dram_write=480e-9, mma="mma_sync"),
    "h100": GPUSpec(
        name="H100", cc=(9, 0), num_sms=132, smem_per_sm=228 * KB, smem_per_block=227 * KB,
        l2_bytes=50 * MB, dram_bw=3.0e12, l2_bw=10.0e12, clock_hz=1.755e9,
        tc_fp16_wgmma=800e12, tc_tf32_wgmma=400e12, tc_fp16_mma=458e12, tc_tf32_mma=229e12,
        lat_dram_read=600e-9, lat_l2_read=150e-9, lat_dram_write=600e-9),
    "h200": GPUSpec(
        name="H200", cc=(9, 0), num_sms=132, smem_per_sm=228 * KB, smem_per_block=227 * KB,
        l2_bytes=60 * MB, dram_bw=4.3e12, l2_bw=10.0e12, clock_hz=1.755e9,
        tc_fp16_wgmma=790e12, tc_tf32_wgmma=395e12, tc_fp16_mma=452e12, tc_tf32_mma=226e12,
        lat_dram_read=600e-9, lat_l2_read=150e-9, lat_dram_write=600e-9),
}


def preset_names() -> list[str]:
    """Names of the built-in presets (upper case, as ``GPUSpec.name``)."""
    return [s.name for s in _PRESETS.values()]


def _key(name: str) -> str:
    """Normalise a user or driver GPU name to a preset key ("NVIDIA H100 80GB HBM3" -> "h100").

    Whole tokens only, so "GH200" does not pass for an H200.
    """
    low = name.strip().lower()
    if low in _PRESETS:
        return low
    tokens = re.split(r"[^a-z0-9]+", low)
    for key in _PRESETS:
        if key in tokens:
            return key
    return re.sub(r"[^a-z0-9]+", "_", low).strip("_")


def calibration_path(name: str) -> Path:
    """Where ``calibrate`` stores, and ``get_spec`` looks for, the measured spec of a GPU."""
    return cache_dir() / "gpu_specs" / f"{_key(name)}.json"  # the kernels' cache dir (ALCOP_CACHE_DIR)


def _load_calibrated(name: str) -> GPUSpec | None:
    path = calibration_path(name)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
        if doc.get("version") != SPEC_FILE_VERSION:
            return None  # written by another version: ignore rather than misread
        return GPUSpec.from_dict(doc["spec"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"calibration file {path} is unreadable ({e}); delete it or rerun "
                         f"`alcop-tune calibrate`") from e


def save_calibrated(spec: GPUSpec, measurements: dict[str, Any]) -> Path:
    """Write a calibrated spec atomically (temp file + os.replace) so readers never see half a file."""
    path = calibration_path(spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".json.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"version": SPEC_FILE_VERSION, "spec": spec.to_dict(),
                               "measurements": measurements}, indent=2, sort_keys=True))
    os.replace(tmp, path)
    return path


def get_spec(name: str | GPUSpec, *, mma: str | None = None, use_calibration: bool = True) -> GPUSpec:
    """The spec of a GPU by name ("H100", "h100", "NVIDIA H100 80GB HBM3" all work).

    A calibration file written by ``alcop-tune calibrate`` for this GPU is
    preferred over the preset unless ``use_calibration`` is False. ``mma`` overrides the MMA path
    ("wgmma" or "mma_sync"). A ``GPUSpec`` passes through (with ``mma`` applied).
    """
    if isinstance(name, GPUSpec):
        spec = name
    else:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"get_spec: GPU name must be a non-empty string, got {name!r}")
        found = _load_calibrated(name) if use_calibration else None
        if found is None:
            key = _key(name)
            if key not in _PRESETS:
                raise UnsupportedError(
                    f"GPU {name!r} has no preset (known: {preset_names()}); run "
                    f"`alcop-tune calibrate` on it to measure one")
            found = _PRESETS[key]
        spec = found
    return spec.with_mma(mma) if mma is not None else spec


def spec_from_properties(props: Any, base: GPUSpec | None) -> GPUSpec:
    """Overlay what the driver reports (torch.cuda device properties) on a preset.

    The driver is right about sizes (an H100 PCIe has 114 SMs, an H200 shows 60 MB of L2) while
    rates come from the preset until measured. Without a preset, rates start at zero and must be
    calibrated.
    """
    sizes = dict(
        name=base.name if base is not None else props.name,
        cc=(props.major, props.minor),
        num_sms=props.multi_processor_count,
        l2_bytes=props.L2_cache_size,
        smem_per_sm=getattr(props, "shared_memory_per_multiprocessor", 0) or (base.smem_per_sm if base else 0),
        smem_per_block=getattr(props, "shared_memory_per_block_optin", 0) or (base.smem_per_block if base else 0),
        regs_per_sm=getattr(props, "regs_per_multiprocessor", 0) or 65536,
        max_threads_per_sm=getattr(props, "max_threads_per_multi_processor", 0) or 2048,
    )
    if base is not None:
        return base.replace(**sizes)
    return GPUSpec(**sizes, dram_bw=0.0, l2_bw=0.0, clock_hz=1.5e9, tc_fp16_wgmma=0.0, tc_tf32_wgmma=0.0,
                   tc_fp16_mma=0.0, tc_tf32_mma=0.0, lat_dram_read=0.0, lat_l2_read=0.0, lat_dram_write=0.0,
                   mma="wgmma" if (props.major, props.minor) >= (9, 0) else "mma_sync", source="uncalibrated")


def default_mma(cc: tuple[int, int]) -> str:
    """The MMA path Triton uses in this process: wgmma on sm90 unless ``DISABLE_MMA_V3=1``."""
    if cc < (9, 0) or settings.mma_v3_disabled():
        return "mma_sync"
    return "wgmma"


def detect(device: int | None = None) -> GPUSpec:
    """The spec of the current CUDA device: calibration file, else preset matched by name with the
    sizes the driver reports. Honours ``DISABLE_MMA_V3`` for the MMA path, as Triton does."""
    import torch

    if not torch.cuda.is_available():
        raise UnsupportedError("detect(): no CUDA device; pass a GPU name to get_spec() instead")
    props = torch.cuda.get_device_properties(torch.cuda.current_device() if device is None else device)
    cc = (props.major, props.minor)
    calibrated = _load_calibrated(props.name)
    if calibrated is not None:
        return calibrated.with_mma(default_mma(cc))
    key = _key(props.name)
    if key not in _PRESETS:
        raise UnsupportedError(f"detect(): GPU {props.name!r} has no preset; run "
                               f"`alcop-tune calibrate` once to measure it")
    return spec_from_properties(props, _PRESETS[key]).with_mma(default_mma(cc))

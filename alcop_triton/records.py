"""Frozen, validated records shared by every layer: a kernel config and a workload.

``KernelConfig`` is the one schedule-parameter record: codegen, the performance models, the tuner
and the database all speak it. It is validated on construction, so a value read from a database
or typed by a user cannot reach code generation unchecked.
"""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
from dataclasses import dataclass
from typing import IO, Any, Literal, Mapping

from .errors import ScheduleError

AsyncCopy = Literal["pointer", "tma", "box"]
ASYNC_COPIES: tuple[str, ...] = ("pointer", "tma", "box")
"""How operand tiles reach shared memory: ``cp.async`` pointer copies, TMA copies (tensor descriptors,
sm90), or, for a stride-1 channels-last convolution, the box kernel (``kernels/conv_window.py``): each A
tile one TMA box of the input window, in a Gluon kernel that owns its ring of stages."""

OPS: tuple[str, ...] = ("matmul", "bmm", "conv1d", "conv2d", "conv3d", "linear")
CONV_OPS: tuple[str, ...] = ("conv1d", "conv2d", "conv3d")
GEMM_LAYOUTS: tuple[str, ...] = ("nn", "nt", "tn", "tt")
"""A GEMM's operand storage, A then B: 'n' as in the math (A: M x K, B: K x N), 't' transposed."""
CONV_LAYOUTS: tuple[str, ...] = ("nhwc", "nchw")
"""A convolution's input storage: channels last or channels first (any spatial rank)."""
DTYPES: tuple[str, ...] = ("float16", "bfloat16", "float32")
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}


MAX_SPLIT_K = 64
TAIL_BLOCK = 64
"""The wave tail's square tile (``TAIL_CONFIG``): the smallest that Hopper's warpgroup MMA runs on one
warpgroup. Measured on the H100 (``docs/decisions.md#d17``): with a hand-written kernel it
spread a short last wave over the SMs best of 64 x 64, 64 x 128 and 128 x 64; with alcop's kernels no
other of seven tail configs was better by more than 4% on any shape (``tail_configs/``)."""
"""Largest split-K factor a config may have. The tuning space offers up to 8 (``Knobs.split_k``), where a
GEMM's float32 partial tiles start to cost more traffic than the split saves; a convolution's weight
gradient (nine 64 x 64 tiles over a reduction of 3.2M rows for a 224-wide layer) goes further
(``kernels.conv_grad.weight_grad_config``)."""


def _pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


@dataclass(frozen=True, order=True)
class KernelConfig:
    """Schedule parameters of one tiled, pipelined reduction kernel.

    Attributes:
        block_m, block_n, block_k: tile of the output rows, output columns and reduction chunk.
        group_m: programs along M grouped together for L2 reuse (1 = plain row-major order).
        num_warps: warps per program.
        smem_stages: shared-memory pipeline depth (Triton's ``num_stages`` on the reduction loop);
            1 = no pipelining, 2 = double buffering.
        reg_stages: register-level pipeline depth; 1 = no explicit prefetch, R >= 2 = sub-tiles are
            loaded R - 1 steps ahead of the dot that uses them.
        reg_split: sub-tiles per reduction chunk at the register level (block_k // reg_split >= 16).
        async_copy: "pointer" (cp.async on sm80+), "tma" (tensor descriptors; TMA on sm90), or "box" (a
            convolution's box kernel, ``kernels/conv_window.py``: its tile a block of output positions whose
            window is one TMA box per tap; sm90, else it runs as its "tma" twin).
        persistent: one program per resident slot on the GPU (not per output tile), each looping over
            output tiles; with smem_stages > 1 the tile loop is flattened with the reduction loop, so
            the next tile's first copies are in flight during this tile's epilogue.
        split_k: programs per output tile, each reducing one contiguous slice of the K chunks (split-K);
            partial tiles meet in a float32 workspace and the last program of a tile to arrive adds them
            in a fixed order (deterministic; in two levels past 8 slices) and applies the epilogue. 1 = off.
            Not with ``persistent``.
        wave_tail: the rows of tiles past the last whole wave (one tile per SM) run as a second launch of
            ``TAIL_CONFIG``'s smaller tiles, which starts while the first launch's last wave still runs
            (programmatic dependent launch on Hopper), so that a short last wave does not leave most SMs
            idle. A GEMM of one batch only; not with ``persistent`` or ``split_k``; ``block_m`` >= 64.
    """

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    group_m: int = 8
    num_warps: int = 4
    smem_stages: int = 3
    reg_stages: int = 1
    reg_split: int = 1
    async_copy: str = "pointer"
    persistent: bool = False
    split_k: int = 1
    wave_tail: bool = False

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or not _pow2(v) or not 16 <= v <= 512:
                raise ScheduleError(f"KernelConfig.{name}={v!r}: must be a power of two in [16, 512] (tl.dot needs >= 16)")
        if not isinstance(self.group_m, int) or not 1 <= self.group_m <= 64:
            raise ScheduleError(f"KernelConfig.group_m={self.group_m!r}: must be an int in [1, 64]")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise ScheduleError(f"KernelConfig.num_warps={self.num_warps!r}: must be one of 1, 2, 4, 8, 16")
        if not isinstance(self.smem_stages, int) or not 1 <= self.smem_stages <= 8:
            raise ScheduleError(f"KernelConfig.smem_stages={self.smem_stages!r}: must be an int in [1, 8]")
        if not isinstance(self.reg_stages, int) or not 1 <= self.reg_stages <= 4:
            raise ScheduleError(f"KernelConfig.reg_stages={self.reg_stages!r}: must be an int in [1, 4]")
        if self.reg_split not in (1, 2, 4, 8):
            raise ScheduleError(f"KernelConfig.reg_split={self.reg_split!r}: must be one of 1, 2, 4, 8")
        if self.block_k // self.reg_split < 16:
            raise ScheduleError(
                f"KernelConfig.reg_split={self.reg_split} with block_k={self.block_k}: sub-tiles of "
                f"{self.block_k // self.reg_split} < 16 along K; lower reg_split or raise block_k")
        if self.async_copy not in ASYNC_COPIES:
            raise ScheduleError(f"KernelConfig.async_copy={self.async_copy!r}: must be one of {ASYNC_COPIES}")
        if not isinstance(self.persistent, bool):
            raise ScheduleError(f"KernelConfig.persistent={self.persistent!r}: must be True or False")
        if not isinstance(self.split_k, int) or isinstance(self.split_k, bool) or not 1 <= self.split_k <= MAX_SPLIT_K:
            raise ScheduleError(f"KernelConfig.split_k={self.split_k!r}: must be an int in [1, {MAX_SPLIT_K}]")
        if self.split_k > 1 and self.persistent:
            raise ScheduleError(f"KernelConfig.split_k={self.split_k} with persistent=True: split-K programs are one "
                                "per (tile, slice); use one or the other")
        if not isinstance(self.wave_tail, bool):
            raise ScheduleError(f"KernelConfig.wave_tail={self.wave_tail!r}: must be True or False")
        if self.wave_tail and not tail_capable(self):
            raise ScheduleError(f"KernelConfig.wave_tail=True with persistent={self.persistent}, split_k={self.split_k}, "
                                f"block_m={self.block_m}: a wave tail needs one program per whole tile (neither "
                                f"persistent nor split-K) and block_m >= {TAIL_BLOCK} (the tail's rows start at a "
                                "multiple of its tile)")

    @property
    def sub_k(self) -> int:
        """Reduction extent of one register-level sub-tile."""
        return self.block_k // self.reg_split

    def replace(self, **changes: Any) -> "KernelConfig":
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        tma = "" if self.async_copy == "pointer" else f"_{self.async_copy}"
        pers = "_persistent" if self.persistent else ""
        split = f"_split{self.split_k}" if self.split_k > 1 else ""
        tail = "_tail" if self.wave_tail else ""
        return (f"m{self.block_m}n{self.block_n}k{self.block_k}_g{self.group_m}_w{self.num_warps}"
                f"_s{self.smem_stages}_r{self.reg_stages}x{self.reg_split}{tma}{pers}{split}{tail}")

    # Triton's usual parameterization, plus our own knobs; what the DB, the CLI and predict_times use.
    # PERSISTENT, SPLIT_K and WAVE_TAIL appear only when set, so records written before the knobs existed read
    # back equal.
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k,
                             "GROUP_M": self.group_m, "num_warps": self.num_warps, "num_stages": self.smem_stages,
                             "REG_STAGES": self.reg_stages, "REG_SPLIT": self.reg_split, "ASYNC_COPY": self.async_copy}
        if self.persistent:
            d["PERSISTENT"] = True
        if self.split_k > 1:
            d["SPLIT_K"] = self.split_k
        if self.wave_tail:
            d["WAVE_TAIL"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "KernelConfig":
        """Parse Triton-style keys (BLOCK_M, num_stages, ...); absent knobs take their defaults.

        Unknown keys and wrongly typed values raise ScheduleError: a config is never half-read.
        """
        keys = {"BLOCK_M": "block_m", "BLOCK_N": "block_n", "BLOCK_K": "block_k", "GROUP_M": "group_m",
                "GROUP_SIZE_M": "group_m", "num_warps": "num_warps", "num_stages": "smem_stages",
                "REG_STAGES": "reg_stages", "REG_SPLIT": "reg_split", "ASYNC_COPY": "async_copy",
                "PERSISTENT": "persistent", "SPLIT_K": "split_k", "WAVE_TAIL": "wave_tail"}
        fields = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for k, v in d.items():
            name = keys.get(k, k if k in fields else None)
            if name is None:
                raise ScheduleError(f"config key {k!r} is unknown; expected one of {sorted(keys)}")
            want = {"async_copy": str, "persistent": bool, "wave_tail": bool}.get(name, int)
            if (isinstance(v, bool) and want is not bool) or not isinstance(v, want):
                raise ScheduleError(f"config {k}={v!r}: expected {want.__name__}")
            kwargs[name] = v
        return cls(**kwargs)


def check_record(workload: "Workload", config: KernelConfig) -> None:
    """Refuse a stored (workload, config) pair that no call could look up or run (ScheduleError naming the
    field, value and rule). ``Workload`` and ``KernelConfig`` range-check each field on its own; these are
    the rules of a tuning record on top: the layout its op's calls are keyed by, and a config the op's
    kernels run, so that a record either runs or is skipped, never dispatched to fail."""
    layouts = CONV_LAYOUTS if workload.op in CONV_OPS else GEMM_LAYOUTS
    if workload.layout not in layouts:
        raise ScheduleError(f"Workload.layout={workload.layout!r} for op {workload.op!r}: must be one of {layouts}")
    if config.async_copy == "box" and workload.op not in CONV_OPS:
        raise ScheduleError(f"KernelConfig.async_copy='box' for op {workload.op!r}: the box kernel is a "
                            f"convolution's (ops {CONV_OPS}); a GEMM copies with 'pointer' or 'tma'")


def tail_capable(c: KernelConfig) -> bool:
    """Whether ``c`` has a ``wave_tail`` twin (one program per whole tile, tiles of at least 64 rows)."""
    return not c.persistent and c.split_k == 1 and c.block_m >= TAIL_BLOCK


def wave_tail_rows(tiles_m: int, tiles_n: int, sms: int) -> int:
    """Rows of tiles a wave tail's first launch covers: those within the most whole waves of one tile per SM
    (programs that share an SM share its throughput, so an SM's time is its count of tiles); 0 where the
    tiles fill whole waves exactly or less than one, and the config runs as one launch."""
    tiles = tiles_m * tiles_n
    return 0 if tiles % sms == 0 else tiles // sms * sms // tiles_n


TAIL_CONFIG = KernelConfig(TAIL_BLOCK, TAIL_BLOCK, 64, group_m=8, num_warps=4, smem_stages=4, async_copy="tma")
"""The second launch of a ``wave_tail`` config: its tile, warps, stages and copies (a copy falls back to
pointers where TMA cannot read an operand, as for any config)."""


@dataclass(frozen=True)
class Workload:
    """One operator instance: what a tuning record is keyed by (with the GPU and versions).

    ``shape`` is (M, N, K) for matmul/linear, (B, M, N, K) for bmm, and for convolutions
    (N, H, W, CI, CO, KH, KW, stride, pad) (the ALCOP suite's form), optionally followed by
    dilation and groups; conv1d/conv3d use the same fields with their own spatial ranks folded
    into H (conv1d: W = 1, KW = 1) or given as (N, D, H, W, CI, CO, KD, KH, KW, stride, pad).
    ``layout`` names operand storage: for GEMMs two letters, A then B, 'n' = row-major as in the
    math (A: M x K, B: K x N), 't' = transposed (B stored N x K is 'nt'); 'nhwc'/'nchw' for conv.
    """

    op: str
    shape: tuple[int, ...]
    dtype: str = "float16"
    layout: str = "nn"

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"Workload.op={self.op!r}: must be one of {OPS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"Workload.dtype={self.dtype!r}: must be one of {DTYPES}")
        shape = tuple(int(s) for s in self.shape)
        object.__setattr__(self, "shape", shape)
        want = {"matmul": (3,), "linear": (3,), "bmm": (4,), "conv1d": (9, 11), "conv2d": (9, 11),
                "conv3d": (11, 13)}[self.op]
        if len(shape) not in want or any(s < 0 for s in shape):
            raise ValueError(f"Workload.shape={shape} for op {self.op!r}: expected {want} non-negative ints")
        if self.op in CONV_OPS:
            self._check_conv()
        if min(self.gemm_dims()) <= 0:
            raise ValueError(f"Workload.shape={shape} for op {self.op!r}: GEMM view {self.gemm_dims()} has an empty dim")

    def _check_conv(self) -> None:
        """Every convolution field in range before any is divided by: extents, channels, stride, dilation
        and groups >= 1 (torch refuses an input with an empty spatial dim), groups dividing both channel
        counts."""
        p = self.conv_fields()
        for name in ("n", "d", "h", "w", "ci", "co", "kd", "kh", "kw", "stride", "dilation", "groups"):
            if p[name] < 1:
                raise ValueError(f"Workload.shape={self.shape} for op {self.op!r}: {name}={p[name]} must be >= 1")
        for name in ("ci", "co"):
            if p[name] % p["groups"]:
                raise ValueError(f"Workload.shape={self.shape} for op {self.op!r}: {name}={p[name]} is not a "
                                 f"multiple of groups={p['groups']}")

    def conv_fields(self) -> dict[str, int]:
        """A convolution's fields as stored (no output extents: nothing is divided)."""
        if self.op == "conv3d":
            n, d, h, w, ci, co, kd, kh, kw, stride, pad, *rest = self.shape
        else:
            n, h, w, ci, co, kh, kw, stride, pad, *rest = self.shape
            d, kd = 1, 1
        dil, groups = (rest + [1, 1])[:2]
        return dict(n=n, d=d, h=h, w=w, ci=ci, co=co, kd=kd, kh=kh, kw=kw, stride=stride, pad=pad,
                    dilation=dil, groups=groups)

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def conv_params(self) -> dict[str, int]:
        """Convolution parameters with the output extents computed as torch does."""
        p = self.conv_fields()
        pad, dil, stride = p["pad"], p["dilation"], p["stride"]
        out = lambda x, k: (x + 2 * pad - dil * (k - 1) - 1) // stride + 1  # noqa: E731
        od = out(p["d"], p["kd"]) if self.op == "conv3d" else 1
        return dict(p, od=od, oh=out(p["h"], p["kh"]), ow=out(p["w"], p["kw"]))

    def operand_rows(self) -> tuple[int, int]:
        """A GEMM's (matmul, linear, bmm) elements per unit-stride row of A and of B as stored ('n': A's rows
        run along K and B's along N; 't': the other way). 16-byte vector loads (cp.async, TMA) read an
        operand only when its rows are whole vectors."""
        _, m, n, k = self.gemm_dims()
        lay = self.layout if len(self.layout) == 2 else "nn"
        return (k if lay[0] == "n" else m), (n if lay[1] == "n" else k)

    def gemm_dims(self) -> tuple[int, int, int, int]:
        """(batch, M, N, K) of the GEMM this workload runs (implicit GEMM for convolutions)."""
        if self.op in ("matmul", "linear"):
            m, n, k = self.shape
            return 1, m, n, k
        if self.op == "bmm":
            b, m, n, k = self.shape
            return b, m, n, k
        p = self.conv_params()
        g = p["groups"]
        return g, p["n"] * p["od"] * p["oh"] * p["ow"], p["co"] // g, p["ci"] // g * p["kd"] * p["kh"] * p["kw"]

    @property
    def flops(self) -> int:
        b, m, n, k = self.gemm_dims()
        return 2 * b * m * n * k

    @property
    def min_bytes(self) -> int:
        """Each input read once and the output written once (the roofline's memory floor)."""
        b, m, n, k = self.gemm_dims()
        return b * (m * k + k * n + m * n) * self.elem_bytes

    def key(self) -> str:
        return f"{self.op}:{'x'.join(map(str, self.shape))}:{self.dtype}:{self.layout}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "shape": list(self.shape), "dtype": self.dtype, "layout": self.layout}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Workload":
        return cls(op=d["op"], shape=tuple(d["shape"]), dtype=d.get("dtype", "float16"), layout=d.get("layout", "nn"))


def dtype_name(dtype: Any) -> str:
    """A torch dtype as the records spell it: ``torch.float16`` -> ``"float16"``."""
    return str(dtype).replace("torch.", "")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def open_jsonl(path: str | os.PathLike[str]) -> IO[str]:
    """A measurement file for reading as text; large grids are stored gzip-compressed (``.jsonl.gz``)."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")

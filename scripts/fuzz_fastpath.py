"""Fuzz the fast path's hit (the call-site check and the stored call, natively compiled) against torch.

    python scripts/fuzz_fastpath.py --device cuda --cases 3000 --jobs 12 --out benchmarks/results/fuzz_fastpath
    python scripts/fuzz_fastpath.py --device cpu --cases 40 --out /tmp/ffp    # Triton's interpreter, tiny sizes

Each case warms one call site (the same op and non-tensor parameters, three calls: a first call that stores
its entry, a hit by signature that gives the site a candidate, a hit found by the site's check), then changes
something between calls and calls again, then calls the warmed tensors once more. The changes: a fresh
tensor of the warmed signature, another view of the same storage (transposed strides, a slice, a storage
offset that keeps or breaks 16-byte alignment), another dtype or a mixed one, ``out=`` of another layout,
another CUDA stream (behind a sleeping kernel that writes the inputs), a CUDA graph captured and replayed after
the inputs changed in place, ``resize_`` of an input, ``requires_grad`` switched on (gradients checked too)
and off, the input's storage freed (``untyped_storage().resize_(0)``) and reallocated, torch's negative bit
(``torch._neg_view``, ``z.conj().imag``), the other memory format of a convolution's input or weight.

Every call is judged against torch: a result against torch's float64 result (the largest error relative to
the largest magnitude, per dtype: ``TOLERANCE``, or twice torch's own error under the same settings
where that is larger: cuDNN's float32 convolutions use TF32 by default), a NaN-poisoned ``out=`` must be filled and returned, an
exception must be an instance of torch's exception's type (where torch raises for freed storage, an
``AlcopError`` also passes). On a GPU the hit must run natively (``fastpath.native()`` built, the site check
its ``site_hit``); the hits, the site hits and the native runs are counted.

Cases run in child processes, one process group per chunk: a case that kills its process (an abort, a sticky
CUDA error such as an illegal address) or hangs (``--case-timeout``) is counted as a crash and the chunk goes on
in a new child from the next case. Each case is drawn from its own seed (``--seed`` and its index), so a failure
replays alone (``--first I --cases 1``). Writes ``<out>/cases.jsonl`` (one line per case), ``<out>/fuzz_fastpath.json``
and ``.md`` (the summary, rewritten after each chunk and when ``--budget-s`` runs out).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import os
import platform
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 4e-2}
"""Largest error allowed, relative to the largest magnitude of the float64 result (at least 1)."""

GEMM_OPS = ("matmul", "mm", "bmm", "addmm", "baddbmm", "linear")
OPS = GEMM_OPS + ("conv2d",)
OUT_OPS = ("matmul", "mm", "bmm", "addmm", "baddbmm")
ACTIVATIONS = (None, "relu", "gelu", "silu", "tanh", "sigmoid")
MUTATIONS = ("fresh", "offset_aligned", "offset_misaligned", "transpose_view", "slice_view", "dtype", "mixed_dtype",
             "out_layout", "stream", "graph", "resize", "requires_grad", "free_storage", "neg_view", "conj_imag",
             "memory_format")
CUDA_ONLY = ("stream", "graph")
OPEN_ISSUE_MUTATIONS = ("free_storage", "neg_view", "conj_imag")
"""Mutations whose handling the torch layer's non-dense-tensor work decides (freed storage, the negative bit):
judged as 'torch's result or torch's exception type', whichever the implementation gives."""

SIZES = {"cuda": {"mn": (1, 3, 7, 16, 33, 64, 100, 129, 256), "k": (8, 16, 40, 64, 129, 256, 600),
                  "batch": (1, 2, 3), "hw": (5, 8, 14, 17), "ch": (3, 8, 16, 32)},
         "cpu": {"mn": (1, 2, 3, 5, 8), "k": (3, 4, 8, 17), "batch": (1, 2), "hw": (3, 5, 6), "ch": (1, 2, 4)}}
"""Small-to-medium sizes on a GPU (odd ones among them; K = 600 takes the K-padding copy for unaligned rows),
tiny ones in the interpreter. A fixed pool bounds the kernel variants a run compiles."""

LIBRARY_FAILURES = ("CUBLAS_STATUS_INVALID_VALUE", "CUBLAS_STATUS_NOT_SUPPORTED", "CUDNN_STATUS_NOT_SUPPORTED")
"""torch's vendor libraries refusing a call torch's own checks accepted (cuBLASLt's heuristic on an out= of
another layout with one row, say): where alcop computes instead, its result is judged against float64."""

STICKY = ("illegal memory access", "unspecified launch failure", "device-side assert", "misaligned address",
          "CUBLAS_STATUS_EXECUTION_FAILED", "illegal instruction", "an illegal address")
"""Messages of CUDA errors after which the process's context is unusable: the child stops, the case is a crash.
Another "CUDA error" (cuBLAS refusing an argument, say) is sticky only if the context fails a probe after it."""


# ----------------------------------------------------------------------------- case specs (no torch needed)

def make_spec(seed: int, index: int, device: str) -> dict[str, Any]:
    """Case ``index`` of a run: op, dtype, operand shapes and layouts, parameters and the mutations (JSON-able)."""
    r = random.Random(f"{seed}:{index}")
    sz = SIZES[device]
    op = r.choice(OPS)
    dtype = r.choice(("float32", "float16", "bfloat16"))
    m, n, k, b = r.choice(sz["mn"]), r.choice(sz["mn"]), r.choice(sz["k"]), r.choice(sz["batch"])
    params: dict[str, Any] = {}
    lay2 = ("contiguous", "contiguous", "transposed", "strided", "offset")
    if op == "mm":
        shapes = [[m, k], [k, n]]
    elif op == "matmul":
        shapes = [r.choice(([m, k], [b, m, k], [k])), r.choice(([k, n], [b, k, n], [k]))]
        if len(shapes[0]) == 3 and len(shapes[1]) == 3:
            shapes[1][0] = r.choice((b, 1))
    elif op == "bmm":
        shapes = [[b, m, k], [b, k, n]]
    elif op == "addmm":
        shapes = [r.choice(([m, n], [n], [1, n], [m, 1])), [m, k], [k, n]]
    elif op == "baddbmm":
        shapes = [r.choice(([b, m, n], [m, n], [n])), [b, m, k], [b, k, n]]
    elif op == "linear":
        lead = r.choice(([], [b], [2, b]))
        shapes = [lead + [m, k], [n, k], [n] if r.random() < 0.7 else None]
        params["activation"] = r.choice(ACTIVATIONS) if shapes[2] is not None else None
    else:
        groups = r.choice((1, 1, 1, 2))
        cin, cout = r.choice(sz["ch"]) * groups, r.choice(sz["ch"]) * groups
        h, w = r.choice(sz["hw"]), r.choice(sz["hw"])
        if device == "cuda":  # each (kernel size, stride, padding, dilation, groups) compiles a variant: a few
            kh = kw = r.choice((1, 3, 3))
            params.update(stride=r.choice((1, 1, 2)), padding=kh // 2, dilation=1, groups=groups)
        else:
            kh, kw = r.choice((1, 3, 3, 5)), r.choice((1, 3, 3))
            params.update(stride=r.choice((1, 1, 2)), padding=r.choice((0, 1, 1, 2)), dilation=r.choice((1, 1, 2)),
                          groups=groups)
        pad, dil = params["padding"], params["dilation"]
        h, w = max(h, dil * (kh - 1) + 1 - 2 * pad), max(w, dil * (kw - 1) + 1 - 2 * pad)
        shapes = [[r.choice(sz["batch"]), cin, h, w], [cout, cin // groups, kh, kw], [cout] if r.random() < 0.6 else None]
        lay2 = ("contiguous", "contiguous", "channels_last", "channels_last", "strided", "offset")
    if op in ("addmm", "baddbmm"):
        params["beta"] = r.choice((1, 1, 0, 0.5, -2))
        params["alpha"] = r.choice((1, 1, 0.5, 3))
    layouts = [None if s is None else r.choice(lay2 if len(s) >= 2 else ("contiguous", "strided", "offset"))
               for s in shapes]
    if op == "conv2d":
        layouts = [lay if lay != "transposed" else "contiguous" for lay in layouts]
        if shapes[2] is not None:
            layouts[2] = r.choice(("contiguous", "strided", "offset"))
    out = op in OUT_OPS and r.random() < 0.25
    choices = [mu for mu in MUTATIONS if device == "cuda" or mu not in CUDA_ONLY]
    if op != "conv2d":
        choices.remove("memory_format")
    if dtype != "float32":
        choices.remove("conj_imag")
    if not out:
        choices.remove("out_layout")
    mutations = [r.choice(choices)] + ([r.choice(choices)] if r.random() < 0.2 else [])
    return {"index": index, "op": op, "dtype": dtype, "shapes": shapes, "layouts": layouts, "params": params,
            "out": out, "mutations": mutations, "seed": r.randrange(2 ** 31)}


def describe(spec: dict[str, Any]) -> str:
    ops_ = ", ".join("None" if s is None else f"{s}{'' if lay == 'contiguous' else ' ' + lay}"
                     for s, lay in zip(spec["shapes"], spec["layouts"]))
    par = "".join(f", {k}={v!r}" for k, v in spec["params"].items())
    return (f"#{spec['index']} {spec['op']}[{spec['dtype']}]({ops_}{par}{', out=' if spec['out'] else ''})"
            f" then {'+'.join(spec['mutations'])}")


# ----------------------------------------------------------------------------- running a case (child side)

class CaseRunner:
    """Runs cases in this process: tensors on ``device``, alcop and torch on equal inputs, every call judged."""

    def __init__(self, device: str) -> None:
        import torch
        import torch.nn.functional as F

        import alcop_triton as at
        from alcop_triton import errors, fastpath
        from alcop_triton.ops import route
        self.torch, self.F, self.at, self.fastpath, self.route = torch, F, at, fastpath, route
        self.AlcopError = errors.AlcopError
        self.device = torch.device(device)
        self.dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
        acts: dict[Any, Callable[[Any], Any]] = {None: lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu,
                                                 "tanh": torch.tanh, "sigmoid": torch.sigmoid}
        self.acts = acts
        self.site_hits = self.native_runs = 0
        self.native = fastpath.native()
        if self.native is not None:
            self._count_site_hits()

    # -- the call site's check, counted
    def _count_site_hits(self) -> None:
        """Install the native site check now (as the first candidate would) behind a counter of its hits
        and of the stored calls it returns that run natively (``functools.partial`` of the module's ``run``)."""
        import functools
        native_check, native_run, route = self.native.site_hit, self.native.run, self.route

        def counted(site: Any, tensors: Any) -> Any:
            entry = native_check(site, tensors)
            if entry is not None:
                self.site_hits += 1
                if isinstance(entry, functools.partial) and entry.func is native_run:
                    self.native_runs += 1
            return entry
        route._site_hit, route._site_hit_built = counted, True

    # -- the two implementations
    def alcop(self, spec: dict[str, Any], ts: list[Any], out: Any = None) -> Any:
        at, op, p = self.at, spec["op"], spec["params"]
        kw = {} if out is None else {"out": out}
        if op in ("matmul", "mm", "bmm"):
            return getattr(at, op)(ts[0], ts[1], **kw)
        if op in ("addmm", "baddbmm"):
            return getattr(at, op)(ts[0], ts[1], ts[2], beta=p["beta"], alpha=p["alpha"], **kw)
        if op == "linear":
            return at.linear(ts[0], ts[1], ts[2], activation=p["activation"])
        return at.conv2d(ts[0], ts[1], ts[2], p["stride"], p["padding"], p["dilation"], p["groups"])

    def reference(self, spec: dict[str, Any], ts: list[Any], out: Any = None) -> Any:
        torch, F, op, p = self.torch, self.F, spec["op"], spec["params"]
        kw = {} if out is None else {"out": out}
        if op in ("matmul", "mm", "bmm"):
            return getattr(torch, op)(ts[0], ts[1], **kw)
        if op in ("addmm", "baddbmm"):
            return getattr(torch, op)(ts[0], ts[1], ts[2], beta=p["beta"], alpha=p["alpha"], **kw)
        if op == "linear":
            return self.acts[p["activation"]](F.linear(ts[0], ts[1], ts[2]))
        return F.conv2d(ts[0], ts[1], ts[2], p["stride"], p["padding"], p["dilation"], p["groups"])

    # -- tensors
    def randn(self, shape: Any, dtype: Any, gen: Any) -> Any:
        return self.torch.randn(shape, generator=gen, device=self.device, dtype=self.torch.float32).to(dtype)

    def operand(self, shape: list[int] | None, layout: str | None, dtype: Any, gen: Any) -> Any:
        """A tensor of ``shape`` in ``layout``: a view into a buffer with room to spare (other views of the same
        storage are made from it), random values everywhere."""
        torch = self.torch
        if shape is None:
            return None
        shape = list(shape)
        if layout == "transposed" and len(shape) >= 2:
            base = self.randn(shape[:-2] + [shape[-1], shape[-2]], dtype, gen)
            return base.transpose(-1, -2)
        if layout == "strided":
            return self.randn(shape[:-1] + [2 * shape[-1] + 1], dtype, gen)[..., 1::2]
        if layout == "channels_last" and len(shape) == 4:
            return self.randn(shape, dtype, gen).contiguous(memory_format=torch.channels_last)
        if layout == "offset":  # a storage offset of 8 elements: 16-byte aligned in fp16/bf16, 32 in fp32
            n = 1
            for s in shape:
                n *= s
            return self.randn([n + 16], dtype, gen)[8:8 + n].view(shape)
        return self.randn(shape, dtype, gen)

    def restrided(self, t: Any, how: str, gen: Any) -> Any:
        """Another view of ``t``'s shape over a new buffer of its own, filled: transposed strides, a slice
        (padded rows), or ``t``'s strides at an element offset (``offset_aligned``: 16 bytes further on,
        ``offset_misaligned``: one element further on)."""
        torch = self.torch
        shape = list(t.shape)
        if how == "transpose_view" and t.dim() >= 2:
            strides = list(torch.empty(shape[:-2] + [shape[-1], shape[-2]], device="meta").transpose(-1, -2).stride())
            offset = 0
        elif how == "slice_view":
            strides = list(torch.empty(shape[:-1] + [shape[-1] + 3], device="meta").stride())
            offset = 0
        else:
            strides = list(t.stride())
            offset = (16 // t.element_size()) if how == "offset_aligned" else 1
            offset += t.storage_offset()
        span = 1 + sum((s - 1) * abs(st) for s, st in zip(shape, strides)) if t.numel() else 0
        buf = self.randn([offset + span + 8], t.dtype, gen)
        return buf.as_strided(shape, strides, offset)

    # -- judging one call
    def judge(self, spec: dict[str, Any], ts: list[Any], label: str, out_layout: str | None = None,
              runner: Callable[[Callable[[], Any]], Any] | None = None, torch_ts: list[Any] | None = None,
              freed: bool = False, grads: bool = False) -> dict[str, Any]:
        """One call of alcop and of torch on ``ts`` (torch on ``torch_ts`` where given: equal copies), judged.
        ``runner(fn)`` runs alcop's call (on another stream, in a graph) and returns its result and the inputs
        the result must match."""
        out_a = out_t = None
        shape_probe = None
        if out_layout is not None:
            try:
                # on meta tensors: the shape without reading any memory (an operand's may be freed)
                shape_probe = self.reference(spec, [None if t is None else self.torch.empty_strided(
                    t.shape, t.stride(), dtype=t.dtype, device="meta") for t in ts]).shape
            except Exception:  # noqa: BLE001 - the call itself will raise; judged below
                shape_probe = (1,)
            out_a = self.poisoned(list(shape_probe), out_layout, ts[-1].dtype if spec["op"] != "conv2d" else ts[0].dtype)
            out_t = out_a.clone()
        tt = torch_ts if torch_ts is not None else ts
        ya = yt = ea = et = None
        inputs = ts
        if freed:
            # torch's kernels may read freed storage (CUDA's at address 0, an illegal access that poisons the
            # context; some CPU ops, mm and addmm among them, crash the process), so torch is not run: the
            # call must be refused, as most of torch's CPU ops refuse it.
            et = RuntimeError("freed storage")
        else:
            try:
                yt = self.reference(spec, tt, out_t)
            except Exception as exc:  # noqa: BLE001
                et = exc
        try:
            if runner is None:
                ya = self.alcop(spec, ts, out_a)
            else:
                ya, inputs = runner(lambda: self.alcop(spec, ts, out_a))
            if self.device.type == "cuda":
                self.torch.cuda.synchronize()  # a fault of alcop's launch surfaces here, attributed to alcop
        except Exception as exc:  # noqa: BLE001
            ea = exc
        for exc in (ea, et):  # a CUDA error that left the context unusable: this process can judge no more
            if exc is not None and self.sticky(exc):
                return {"call": label, "kind": "crash", "detail": f"{type(exc).__name__}: {str(exc)[:300]}",
                        "sticky": True}
        if et is not None and ea is None and any(m in str(et) for m in LIBRARY_FAILURES):
            # torch's checks took the call and its vendor library then failed on it: alcop's result is
            # judged against float64 instead (torch's float64 reference takes another library path)
            if out_a is not None and ya is not out_a:
                return {"call": label, "kind": "wrong", "detail": "out= given but another tensor returned"}
            bad = self.compare(spec, ya, self.float64(spec, inputs), ya.dtype)
            return {"call": label, "kind": "wrong", "detail": bad} if bad else \
                {"call": label, "kind": "torch_library_failed", "detail": f"torch: {str(et)[:120]}"}
        if et is not None:
            if ea is None:
                return {"call": label, "kind": "type_mismatch",
                        "detail": f"torch raised {type(et).__name__}: {str(et)[:200]}; alcop returned"}
            if isinstance(ea, type(et)) or (freed and isinstance(ea, self.AlcopError)):
                return {"call": label, "kind": "raised_alike", "detail": type(et).__name__}
            return {"call": label, "kind": "type_mismatch",
                    "detail": f"alcop {type(ea).__name__}: {str(ea)[:200]} | torch {type(et).__name__}: {str(et)[:200]}"}
        if ea is not None:
            return {"call": label, "kind": "raised", "detail": f"alcop {type(ea).__name__}: {str(ea)[:300]}"}
        if out_a is not None and ya is not out_a:
            return {"call": label, "kind": "wrong", "detail": "out= given but another tensor returned"}
        ref = self.float64(spec, inputs)
        # No stricter than torch's own result under the same settings (cuDNN's float32 convolutions use
        # TF32 by default: torch's error is then above float32's tolerance, and alcop's may be as large).
        floor = 2 * self.error(yt, ref) if yt is not None and inputs is ts and tt is ts else 0.0
        bad = self.compare(spec, ya, ref, yt.dtype, floor)
        if bad:
            return {"call": label, "kind": "wrong", "detail": bad}
        if grads:
            bad = self.compare_grads(spec, ts, ya)
            if bad:
                return {"call": label, "kind": "wrong", "detail": "gradient: " + bad}
        return {"call": label, "kind": "ok"}

    def sticky(self, exc: BaseException) -> bool:
        """Whether ``exc`` left this process's CUDA context unusable (then no later call can be judged)."""
        text = str(exc)
        if any(m in text for m in STICKY):
            return True
        if "CUDA error" not in text or self.device.type != "cuda":
            return False
        try:  # another CUDA error: sticky if the context fails a small round trip now
            self.torch.cuda.synchronize()
            return float(self.torch.ones(1, device=self.device).add_(1).item()) != 2.0
        except Exception:  # noqa: BLE001
            return True

    def poisoned(self, shape: list[int], layout: str, dtype: Any) -> Any:
        torch = self.torch
        if layout == "transposed" and len(shape) >= 2:
            t = torch.empty(shape[:-2] + [shape[-1], shape[-2]], device=self.device, dtype=dtype).transpose(-1, -2)
        elif layout == "offset":
            n = 1
            for s in shape:
                n *= s
            t = torch.empty([n + 8], device=self.device, dtype=dtype)[8:].view(shape)
        else:
            t = torch.empty(shape, device=self.device, dtype=dtype)
        return t.fill_(float("nan"))

    def float64(self, spec: dict[str, Any], ts: list[Any]) -> Any:
        """torch's result in float64 (``.double()`` resolves a negative bit), on the same device."""
        d = [None if t is None else t.detach().double() for t in ts]
        return self.reference(spec, d)

    def error(self, y: Any, ref: Any) -> float:
        """Largest error of ``y`` against ``ref``, relative to the largest magnitude of ``ref`` (at least 1)."""
        if not isinstance(y, self.torch.Tensor) or tuple(y.shape) != tuple(ref.shape) or ref.numel() == 0:
            return 0.0
        scale = max(1.0, float(ref.abs().max()))
        err = float((y.detach().double() - ref).abs().max()) / scale
        return err if err == err else 0.0  # NaN: no floor

    def compare(self, spec: dict[str, Any], y: Any, ref: Any, want_dtype: Any, floor: float = 0.0) -> str:
        torch = self.torch
        if not isinstance(y, torch.Tensor):
            return f"returned {type(y).__name__}"
        if tuple(y.shape) != tuple(ref.shape):
            return f"shape {tuple(y.shape)}, expected {tuple(ref.shape)}"
        if y.dtype != want_dtype:
            return f"dtype {y.dtype}, expected {want_dtype}"
        yd = y.detach().double()
        if yd.isnan().any():
            return f"NaN at {int(yd.isnan().sum())} position(s) (an unwritten out= element or a wrong read)"
        if ref.numel() == 0:
            return ""
        scale = max(1.0, float(ref.abs().max()))
        err = self.error(yd, ref)
        tol = max(TOLERANCE[str(y.dtype).replace("torch.", "")], floor)
        return "" if err <= tol else f"error {err:.3g} (relative to max |ref| {scale:.3g}) > {tol}"

    def compare_grads(self, spec: dict[str, Any], ts: list[Any], ya: Any) -> str:
        torch = self.torch
        need = [t for t in ts if t is not None and t.requires_grad]
        if not need or ya.numel() == 0:
            return ""
        go = torch.randn(ya.shape, device=self.device, generator=self.gen).to(ya.dtype)
        got = torch.autograd.grad(ya, need, go, allow_unused=True)
        d = [None if t is None else t.detach().double().requires_grad_(t.requires_grad) for t in ts]
        wrt = [x for x in d if x is not None and x.requires_grad]
        ref = torch.autograd.grad(self.reference(spec, d), wrt, go.double(), allow_unused=True)
        for t, g, r in zip(need, got, ref):  # an input that does not reach the result (beta = 0): a zero gradient
            g = torch.zeros_like(t) if g is None else g
            r = torch.zeros(t.shape, dtype=torch.float64, device=self.device) if r is None else r
            bad = self.compare(spec, g, r, t.dtype)
            if bad:
                return bad
        return ""

    # -- one case
    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        t0 = time.time()
        hits0, site0, native0 = self.fastpath.stats().hits, self.site_hits, self.native_runs
        self.gen = gen = torch.Generator(device=self.device).manual_seed(spec["seed"])
        dtype = self.dtypes[spec["dtype"]]
        ts = [self.operand(s, lay, dtype, gen) for s, lay in zip(spec["shapes"], spec["layouts"])]
        out_layout = "contiguous" if spec["out"] else None
        calls: list[dict[str, Any]] = []
        try:
            for i in range(3):
                calls.append(self.judge(spec, ts, f"warm{i}", out_layout))
            for mu in spec["mutations"]:
                calls += getattr(self, "mutate_" + mu)(spec, ts, out_layout, gen)
                if any(c.get("sticky") for c in calls):
                    break
            else:
                calls.append(self.judge(spec, ts, "warmed again", out_layout))
            if self.device.type == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - the harness's own step failed (or an asynchronous CUDA error)
            sticky = self.sticky(exc)
            calls.append({"call": "harness", "kind": "crash", "sticky": sticky,
                          "detail": f"{type(exc).__name__}: {str(exc)[:300]}"})
        order = ("crash", "wrong", "type_mismatch", "raised", "ok")
        kinds = [c["kind"] if c["kind"] not in ("raised_alike", "torch_library_failed") else "ok" for c in calls]
        kind = next(k for k in order if k in kinds)
        line = {"index": spec["index"], "kind": kind, "op": spec["op"], "dtype": spec["dtype"],
                "mutations": spec["mutations"], "calls": len(calls),
                "raised_alike": sum(c["kind"] == "raised_alike" for c in calls),
                "torch_library_failed": sum(c["kind"] == "torch_library_failed" for c in calls),
                "hits": self.fastpath.stats().hits - hits0, "site_hits": self.site_hits - site0,
                "native_runs": self.native_runs - native0, "seconds": round(time.time() - t0, 3)}
        if kind != "ok":
            line["case"] = describe(spec)
            line["problems"] = [c for c in calls if c["kind"] not in ("ok", "raised_alike", "torch_library_failed")]
        if any(c.get("sticky") for c in calls):
            line["sticky"] = True
        return line

    # -- the mutations: each returns its calls' judgements; tensors it changed in place are restored
    def mutate_fresh(self, spec: dict[str, Any], ts: list[Any], out: str | None, gen: Any) -> list[dict[str, Any]]:
        dtype = self.dtypes[spec["dtype"]]
        new = [self.operand(s, lay, dtype, gen) for s, lay in zip(spec["shapes"], spec["layouts"])]
        return [self.judge(spec, new, "fresh tensors, same signature", out)]

    def _one_view(self, how: str, spec: dict[str, Any], ts: list[Any], out: str | None,
                  gen: Any) -> list[dict[str, Any]]:
        i = random.Random(spec["seed"] + len(how)).choice([j for j, t in enumerate(ts) if t is not None])
        new = list(ts)
        new[i] = self.restrided(ts[i], how, gen)
        return [self.judge(spec, new, f"{how} of operand {i}", out), self.judge(spec, new, f"{how} again", out)]

    def mutate_offset_aligned(self, *a: Any) -> list[dict[str, Any]]:
        return self._one_view("offset_aligned", *a)

    def mutate_offset_misaligned(self, *a: Any) -> list[dict[str, Any]]:
        return self._one_view("offset_misaligned", *a)

    def mutate_transpose_view(self, *a: Any) -> list[dict[str, Any]]:
        return self._one_view("transpose_view", *a)

    def mutate_slice_view(self, *a: Any) -> list[dict[str, Any]]:
        return self._one_view("slice_view", *a)

    def mutate_dtype(self, spec: dict[str, Any], ts: list[Any], out: str | None, gen: Any) -> list[dict[str, Any]]:
        other = random.Random(spec["seed"]).choice([d for d in self.dtypes if d != spec["dtype"]])
        new = [None if t is None else t.to(self.dtypes[other]) for t in ts]
        return [self.judge(spec, new, f"all operands {other}", out), self.judge(spec, new, f"{other} again", out)]

    def mutate_mixed_dtype(self, spec: dict[str, Any], ts: list[Any], out: str | None,
                           gen: Any) -> list[dict[str, Any]]:
        r = random.Random(spec["seed"])
        i = r.choice([j for j, t in enumerate(ts) if t is not None])
        other = r.choice([d for d in self.dtypes if d != spec["dtype"]])
        new = list(ts)
        new[i] = ts[i].to(self.dtypes[other])
        return [self.judge(spec, new, f"operand {i} {other}", out)]

    def mutate_out_layout(self, spec: dict[str, Any], ts: list[Any], out: str | None,
                          gen: Any) -> list[dict[str, Any]]:
        return [self.judge(spec, ts, f"out= {lay}", lay) for lay in ("transposed", "offset", "contiguous")]

    def mutate_stream(self, spec: dict[str, Any], ts: list[Any], out: str | None, gen: Any) -> list[dict[str, Any]]:
        """On a side stream, a sleeping kernel then new values written into the inputs, then the call: a launch
        on any other stream would read the old values."""
        torch = self.torch
        side = torch.cuda.Stream()
        fresh = [None if t is None else self.randn(list(t.shape), t.dtype, gen) for t in ts]

        def on_side(fn: Callable[[], Any]) -> Any:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(200_000)
                for t, f in zip(ts, fresh):
                    if t is not None:
                        t.copy_(f)
                y = fn()
            torch.cuda.current_stream().wait_stream(side)
            if isinstance(y, torch.Tensor):
                y.record_stream(torch.cuda.current_stream())  # read there next
            return y, ts
        # torch's call runs after the side stream's writes, on copies of the new values
        return [self.judge(spec, ts, "another stream", out, runner=on_side, torch_ts=fresh)]

    def mutate_graph(self, spec: dict[str, Any], ts: list[Any], out: str | None, gen: Any) -> list[dict[str, Any]]:
        """Capture the warmed call in a CUDA graph (warmed on the capture's stream first), write new values into
        the inputs in place and replay: the replay must compute on the new values."""
        torch = self.torch

        def captured(fn: Callable[[], Any]) -> Any:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fn()  # a warm call on a side stream, as torch's graph docs advise
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                y = fn()
            for t in ts:
                if t is not None:
                    t.copy_(self.randn(list(t.shape), t.dtype, gen))
            graph.replay()
            torch.cuda.synchronize()
            self.keep = graph  # its memory pool holds y: kept until the next graph
            return y, ts
        return [self.judge(spec, ts, "graph replay on new values", out, runner=captured)]

    def mutate_resize(self, spec: dict[str, Any], ts: list[Any], out: str | None, gen: Any) -> list[dict[str, Any]]:
        """``resize_`` of the first operand in place (to a larger first dimension, then to its transpose's shape),
        then back to its shape: the call site must see the new sizes."""
        t = ts[0]
        if t.dim() == 0:
            return []
        shape, strides = list(t.shape), t.stride()
        calls = []
        for new_shape in ([shape[0] + 2] + shape[1:], shape[::-1]):
            t.resize_(new_shape)
            t.copy_(self.randn(new_shape, t.dtype, gen))
            calls.append(self.judge(spec, ts, f"operand 0 resize_ to {new_shape}", out))
        t.resize_(shape)
        t.as_strided_(shape, strides, t.storage_offset())  # the warmed geometry (resize_ only grew the storage)
        t.copy_(self.randn(shape, t.dtype, gen))
        calls.append(self.judge(spec, ts, "operand 0 resize_ back", out))
        return calls

    def mutate_requires_grad(self, spec: dict[str, Any], ts: list[Any], out: str | None,
                             gen: Any) -> list[dict[str, Any]]:
        r = random.Random(spec["seed"])
        flip = [j for j, t in enumerate(ts) if t is not None and (j == 0 or r.random() < 0.5)]
        for j in flip:
            ts[j].requires_grad_(True)
        try:
            calls = [self.judge(spec, ts, f"requires_grad on operands {flip}", out, grads=out is None)]
            calls.append(self.judge(spec, ts, "requires_grad again", out, grads=out is None))
        finally:
            for j in flip:
                ts[j].requires_grad_(False)
        calls.append(self.judge(spec, ts, "requires_grad off again", out))
        return calls

    def mutate_free_storage(self, spec: dict[str, Any], ts: list[Any], out: str | None,
                            gen: Any) -> list[dict[str, Any]]:
        """Free an operand's storage (as FSDP does to parameters): torch's exception type, or alcop's own error;
        then give the storage new memory and values: the result must follow them."""
        i = random.Random(spec["seed"]).choice([j for j, t in enumerate(ts) if t is not None])
        t = ts[i]
        storage = t.untyped_storage()
        nbytes = storage.nbytes()
        if nbytes == 0:
            return []
        storage.resize_(0)
        try:
            calls = [self.judge(spec, ts, f"operand {i} storage freed", out, freed=True)]
        finally:
            storage.resize_(nbytes)
        t.copy_(self.randn(list(t.shape), t.dtype, gen))
        calls.append(self.judge(spec, ts, f"operand {i} storage reallocated", out))
        return calls

    def mutate_neg_view(self, spec: dict[str, Any], ts: list[Any], out: str | None,
                        gen: Any) -> list[dict[str, Any]]:
        i = random.Random(spec["seed"]).choice([j for j, t in enumerate(ts) if t is not None])
        new = list(ts)
        new[i] = self.torch._neg_view(ts[i])
        return [self.judge(spec, new, f"operand {i} with the negative bit", out),
                self.judge(spec, new, "negative bit again", out)]

    def mutate_conj_imag(self, spec: dict[str, Any], ts: list[Any], out: str | None,
                         gen: Any) -> list[dict[str, Any]]:
        """``z.conj().imag``: a float32 view with the negative bit and a stride of 2 (the public way to one)."""
        torch = self.torch
        i = random.Random(spec["seed"]).choice([j for j, t in enumerate(ts) if t is not None])
        z = torch.complex(self.randn(list(ts[i].shape), torch.float32, gen), ts[i].float())
        new = list(ts)
        new[i] = z.conj().imag
        return [self.judge(spec, new, f"operand {i} as z.conj().imag", out),
                self.judge(spec, new, "z.conj().imag again", out)]

    def mutate_memory_format(self, spec: dict[str, Any], ts: list[Any], out: str | None,
                             gen: Any) -> list[dict[str, Any]]:
        torch = self.torch
        calls = []
        for i in (0, 1):
            new = list(ts)
            fmt = torch.contiguous_format if ts[i].is_contiguous(memory_format=torch.channels_last) and \
                not ts[i].is_contiguous() else torch.channels_last
            new[i] = ts[i].contiguous(memory_format=fmt)
            name = "channels_last" if fmt is torch.channels_last else "contiguous"
            calls += [self.judge(spec, new, f"operand {i} {name}", out), self.judge(spec, new, f"{name} again", out)]
        return calls


# ----------------------------------------------------------------------------- the child process

def child(args: argparse.Namespace) -> int:
    """Run cases ``args.first`` .. ``args.last - 1`` here, one JSON line each to ``args.log``; stop before a case
    when ``args.deadline`` has passed; exit 3 after a sticky CUDA error (the parent goes on in a new child)."""
    import warnings

    import torch
    import triton

    import alcop_triton
    warnings.simplefilter("ignore")  # fallbacks and torch's deprecations: judged by results, not by warnings
    runner = CaseRunner(args.device)
    log = open(args.log, "a", buffering=1)
    if args.device == "cuda" and runner.native is None:
        log.write(json.dumps({"fatal": "fastpath.native() is not built: the native hit cannot be fuzzed"}) + "\n")
        return 2
    if args.first == args.chunk_first:  # the chunk's first child says where it ran
        dev = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
        log.write(json.dumps({"info": {"device": dev, "torch": torch.__version__, "triton": triton.__version__,
                                       "cuda": torch.version.cuda, "alcop_triton": alcop_triton.__version__,
                                       "python": platform.python_version(), "native": runner.native is not None,
                                       "native_site_check": runner.native is not None}}) + "\n")
    for index in range(args.first, args.last):
        if time.time() > args.deadline:
            break
        if index == args.abort_at:  # --abort-at: the harness's own check that a killed child is counted
            os.abort()
        line = runner.run(make_spec(args.seed, index, args.device))
        log.write(json.dumps(line) + "\n")
        if line.get("sticky"):  # out at once: a broken CUDA context can abort or hang the interpreter's teardown
            log.close()
            os._exit(3)
    return 0


# ----------------------------------------------------------------------------- the parent

def run_chunk(args: argparse.Namespace, first: int, last: int, deadline: float, log: Path) -> None:
    """Run cases ``first`` .. ``last - 1`` in children (each in its own process group); a child that dies or
    hangs has its case counted as a crash and the next child starts after it."""
    start = first
    while start < last and time.time() < deadline:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--device", args.device, "--seed",
               str(args.seed), "--first", str(start), "--last", str(last), "--chunk-first", str(first),
               "--deadline", str(deadline), "--log", str(log), "--abort-at", str(args.abort_at)]
        err_path = log.with_suffix(".stderr")
        with open(err_path, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
            last_size, last_change, why = log.stat().st_size if log.exists() else 0, time.time(), ""
            while proc.poll() is None:
                time.sleep(0.2)
                size = log.stat().st_size if log.exists() else 0
                if size != last_size:
                    last_size, last_change = size, time.time()
                elif time.time() - last_change > args.case_timeout:
                    why = f"no case finished in {args.case_timeout} s (hang)"
                elif time.time() > deadline + args.case_timeout:
                    why = "ran past the budget"
                if why:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
        rc = proc.returncode
        rows = read_lines(log)
        if any("fatal" in r for r in rows):
            raise SystemExit(f"fuzz_fastpath: {[r['fatal'] for r in rows if 'fatal' in r][0]}")
        done = {r["index"]: r for r in rows if "index" in r}
        missing = next((i for i in range(start, last) if i not in done), None)
        if rc == 0 or missing is None:
            return
        if done.get(missing - 1, {}).get("sticky"):  # the child stopped after a CUDA error, its case already logged
            start = missing
            continue
        tail = err_path.read_text(errors="replace")[-600:] if err_path.exists() else ""
        how = why or (f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}")
        spec = make_spec(args.seed, missing, args.device)
        with log.open("a") as f:
            f.write(json.dumps({"index": missing, "kind": "crash", "op": spec["op"], "dtype": spec["dtype"],
                                "mutations": spec["mutations"], "calls": 0, "raised_alike": 0, "hits": 0,
                                "site_hits": 0, "native_runs": 0, "seconds": 0.0, "case": describe(spec),
                                "problems": [{"call": "process", "kind": "crash",
                                              "detail": f"child process {how}; stderr: {tail}"}]}) + "\n")
        start = missing + 1


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for text in path.read_text().splitlines():
        try:
            rows.append(json.loads(text))
        except json.JSONDecodeError:  # a line cut by a killed child
            continue
    return rows


def summarise(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float, stopped: bool) -> dict[str, Any]:
    info = next((r["info"] for r in rows if "info" in r), {})
    cases = [r for r in rows if "index" in r]
    kinds: dict[str, int] = {}
    per_mutation: dict[str, int] = {}
    per_op: dict[str, int] = {}
    for c in cases:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
        for mu in c["mutations"]:
            per_mutation[mu] = per_mutation.get(mu, 0) + 1
        key = f"{c['op']}/{c['dtype']}"
        per_op[key] = per_op.get(key, 0) + 1
    failures = sorted((c for c in cases if c["kind"] != "ok"), key=lambda c: c["index"])
    return {
        "what": "the fast path's hit (call-site check and stored call, native where built) fuzzed against torch, "
                "with mutations between calls",
        "date": dt.datetime.now().isoformat(timespec="seconds"), "device": info.get("device", args.device),
        "device_kind": args.device, "torch": info.get("torch"), "triton": info.get("triton"), "cuda": info.get("cuda"),
        "alcop_triton": info.get("alcop_triton"), "python": info.get("python"), "native": info.get("native"),
        "command": "python scripts/fuzz_fastpath.py " + " ".join(sys.argv[1:]) if __name__ == "__main__" else
        "fuzz_fastpath.main(" + repr(args.argv) + ")",
        "seed": args.seed, "seconds": round(seconds, 1), "stopped_by_budget": stopped,
        "cases": len(cases), "calls": sum(c["calls"] for c in cases),
        "ok": kinds.get("ok", 0), "calls_raised_like_torch": sum(c["raised_alike"] for c in cases),
        "calls_torch_library_failed": sum(c.get("torch_library_failed", 0) for c in cases),
        "wrong": kinds.get("wrong", 0), "crashes": kinds.get("crash", 0),
        "exception_mismatches": kinds.get("type_mismatch", 0),
        "raised_where_torch_computed": kinds.get("raised", 0),
        "hits": sum(c["hits"] for c in cases), "site_hits": sum(c["site_hits"] for c in cases),
        "native_runs": sum(c["native_runs"] for c in cases),
        "tolerance": TOLERANCE, "cases_per_mutation": dict(sorted(per_mutation.items())),
        "cases_per_op": dict(sorted(per_op.items())), "failures": failures[:200],
    }


def markdown(s: dict[str, Any]) -> str:
    lines = [f"# Fast-path fuzz: {s['cases']} cases on {s['device']}", "",
             f"{s['what']}. {s['date']}; torch {s['torch']}, Triton {s['triton']}, CUDA {s['cuda']}, alcop_triton "
             f"{s['alcop_triton']}, Python {s['python']}; native hit built: {s['native']}. {s['seconds']} s wall clock"
             f"{' (stopped by --budget-s)' if s['stopped_by_budget'] else ''}.", "",
             f"Command: `{s['command']}`", "",
             "| outcome | cases |", "|---|---|",
             f"| every call matched torch (result, or exception type) | {s['ok']} |",
             f"| wrong result | {s['wrong']} |",
             f"| crash (the process died or hung, or a CUDA error) | {s['crashes']} |",
             f"| exception type differs from torch's (or alcop returned where torch raised) | "
             f"{s['exception_mismatches']} |",
             f"| alcop raised where torch computed | {s['raised_where_torch_computed']} |", "",
             f"{s['calls']} calls, {s['calls_raised_like_torch']} of them raised as torch did; in "
             f"{s['calls_torch_library_failed']} torch's vendor library failed on a call its checks accepted "
             "(alcop computed; judged against float64). Fast-path hits: "
             f"{s['hits']}; found by the call site's native check: {s['site_hits']}, of which {s['native_runs']} "
             "ran natively (allocation and launch in C).", "",
             "Cases per mutation: " + ", ".join(f"{k} {v}" for k, v in s["cases_per_mutation"].items()) + ".", "",
             "Cases per op and dtype: " + ", ".join(f"{k} {v}" for k, v in s["cases_per_op"].items()) + ".", "",
             "Results are judged against torch's float64 result: the largest error relative to the largest magnitude "
             "(at least 1) within " + ", ".join(f"{k} {v}" for k, v in s["tolerance"].items()) +
             " (or twice torch's own error under the same settings, where larger: cuDNN's float32 convolutions "
             "use TF32 by default)" +
             "; a NaN-poisoned out= must be written everywhere and returned; an exception must be an instance of "
             "torch's exception's type.", ""]
    if s["failures"]:
        lines += ["## Failures", ""]
        for f in s["failures"][:60]:
            lines.append(f"* {f['kind']}: `{f['case']}`")
            lines += [f"  * {p['call']}: {p['kind']}: {p['detail'][:300]}" for p in f.get("problems", [])[:3]]
        lines.append("")
    return "\n".join(lines)


def readme(s: dict[str, Any]) -> str:
    return "\n".join([
        "# The fast path's hit fuzzed against torch, with mutations between calls", "",
        f"`{s['command']}` on {s['device']} (torch {s['torch']}, Triton {s['triton']}, CUDA {s['cuda']}), "
        f"{s['date'][:10]}: {s['cases']} cases, {s['wrong']} wrong, {s['crashes']} crashes, "
        f"{s['exception_mismatches']} exception mismatches, {s['raised_where_torch_computed']} raised where torch "
        f"computed; {s['hits']} fast-path hits, {s['site_hits']} found by the native call-site check, "
        f"{s['native_runs']} run natively.", "",
        "What each case does and how it is judged: the docstring of `scripts/fuzz_fastpath.py`. Files: "
        "`fuzz_fastpath.md` (the summary), `fuzz_fastpath.json` (the same, with every failure), `cases.jsonl` "
        "(one line per case; a case replays alone with `--first INDEX --cases 1` and the same `--seed`).", ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=2500, help="cases in all")
    p.add_argument("--first", type=int, default=0, help="index of the first case (a failure replays alone)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda, or cpu (Triton's interpreter, tiny sizes, no stream or graph mutations)")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fuzz_fastpath"), help="output directory")
    p.add_argument("--seed", type=int, default=45, help="the run's seed (each case's is derived from it and its index)")
    p.add_argument("--chunk", type=int, default=0, help="cases per child process (default: 500 on cuda, 50 on cpu; "
                   "with --jobs, cases / jobs / 4 at most)")
    p.add_argument("--jobs", type=int, default=1, help="chunks run at once, each in its own child process (one GPU "
                   "takes several: a case spends most of its time compiling on the CPU; docs/decisions.md#d38)")
    p.add_argument("--budget-s", type=float, default=0, help="stop starting cases after this many seconds (0: none)")
    p.add_argument("--case-timeout", type=float, default=0, help="a child that finishes no case in this long is "
                   "killed, its case a crash (default: 180 s on cuda, 300 s on cpu)")
    p.add_argument("--abort-at", type=int, default=-1, help=argparse.SUPPRESS)  # the harness's self-test
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--last", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--chunk-first", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=0, help=argparse.SUPPRESS)
    p.add_argument("--log", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.argv = argv
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    if args.child:
        return child(args)
    # The children share the kernel caches (alcop's and Triton's, on disk): a child that replaces a crashed one,
    # and a second run, compile nothing again.
    if args.jobs < 1:
        p.error(f"argument --jobs: {args.jobs} is not a positive number of chunks")
    chunk = args.chunk or (500 if args.device == "cuda" else 50)
    if args.jobs > 1 and not args.chunk:  # small chunks: the jobs finish together, a crash restarts little
        chunk = max(1, min(chunk, -(-args.cases // (args.jobs * 4))))
    args.case_timeout = args.case_timeout or (180.0 if args.device == "cuda" else 300.0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "cases.jsonl"
    log.unlink(missing_ok=True)
    parts = out / "chunks"  # one log per chunk (the jobs write side by side), merged into cases.jsonl
    if parts.exists():
        for old in parts.iterdir():
            old.unlink()
    parts.mkdir(exist_ok=True)
    t0 = time.time()
    deadline = t0 + args.budget_s if args.budget_s > 0 else float("inf")
    lock = threading.Lock()

    def write(stopped: bool) -> dict[str, Any]:
        with lock:
            rows = [r for f in sorted(parts.glob("*.jsonl")) for r in read_lines(f)]
            info = [r for r in rows if "info" in r][:1]
            cases = sorted((r for r in rows if "index" in r), key=lambda r: r["index"])
            log.write_text("".join(json.dumps(r) + "\n" for r in info + cases))
            s = summarise(info + cases, args, time.time() - t0, stopped)
            (out / "fuzz_fastpath.json").write_text(json.dumps(s, indent=1) + "\n")
            (out / "fuzz_fastpath.md").write_text(markdown(s))
            (out / "README.md").write_text(readme(s))
            return s

    end = args.first + args.cases

    def one_chunk(first: int) -> None:
        if time.time() >= deadline:
            return
        last = min(end, first + chunk)
        run_chunk(args, first, last, deadline, parts / f"{first:07d}.jsonl")
        s = write(False)
        print(f"cases {first}..{last - 1}: total {s['cases']} cases, {s['wrong']} wrong, "
              f"{s['crashes']} crashes, {s['exception_mismatches']} exception mismatches, "
              f"{s['raised_where_torch_computed']} raised where torch computed; {s['hits']} hits "
              f"({s['site_hits']} at call sites, {s['native_runs']} native runs), {s['seconds']} s", flush=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for done in [pool.submit(one_chunk, first) for first in range(args.first, end, chunk)]:
            done.result()
    s = write(time.time() >= deadline)
    for f in parts.iterdir():  # merged: cases.jsonl holds every line
        f.unlink()
    parts.rmdir()
    bad = s["wrong"] + s["crashes"] + s["exception_mismatches"] + s["raised_where_torch_computed"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""benchmarks/probes/inductor_compile.py's CPU parts: reading the chosen config from Inductor's
generated code and the report (kernel times compared within one timer, stopped ways shown)."""

from __future__ import annotations


from . import load_script


def _load():
    return load_script("probes/inductor_compile.py", "inductor_compile")


ic = _load()

GENERATED = '''
@triton_heuristics.template(
    num_stages=4,
    num_warps=8,
    triton_meta={'signature': {'arg_A': '*fp16'}},
)
@triton.jit
def triton_tem_fused_mm_0(arg_A, arg_B, out_ptr0):
    GROUP_M : tl.constexpr = 8
    BLOCK_M : tl.constexpr = 128
    BLOCK_N : tl.constexpr = 256
    BLOCK_K : tl.constexpr = 64
'''


def test_chosen_config_from_generated_code():
    assert ic.chosen_config(["def call(args): pass", GENERATED]) == \
        "BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=4, num_warps=8"
    assert ic.chosen_config(["extern_kernels.mm(a, b)"]) == "no template kernel found"


def test_report_compares_kernel_times_with_before():
    meta = {"device": "GPU X", "torch": "2.11", "triton": "3.6.0", "cpus": 16, "date": "2026-01-01", "timer": ic.TIMER}
    shape = {"id": "matmul 8x8x8 nt", "first_call_s": 4.0, "gemms_precompiled": 0, "config": "BLOCK_M=64",
             "graph_ms": 0.011, "max_rel_err": 1e-4}
    ways = [{"way": "warm", "status": "done", "process_s": 20.0, "setup_s": 6.0, "shapes": [shape]},
            {"way": "before", "status": "done", "process_s": 80.0, "shapes": [{**shape, "first_call_s": 40.0,
                                                                               "gemms_precompiled": 1, "graph_ms": 0.010}]},
            {"way": "warm+pretune", "status": "stopped after 48 s (budget)", "process_s": 48.0, "shapes": []}]
    md = ic.markdown(meta, ways)
    assert "GPU X" in md and ic.TIMER in md and "16 CPU cores" in md
    assert "| warm | done | 20.0 | 6.0 | - | matmul 8x8x8 nt | 4.0 | 0 | BLOCK_M=64 | 0.0110 | 1.0e-04 |" in md
    assert "| warm+pretune | stopped after 48 s (budget) | 48.0 | - | - | - | - | - | - | - | - |" in md
    assert "Kernel time of `warm` over `before`'s (same timer): matmul 8x8x8 nt: 1.100." in md
    assert [c.id for c in ic.cases()] == ["matmul 1024x768x768 nt", "matmul 4096x64x4096 nt", "bmm 12x512x512x64 nt"]

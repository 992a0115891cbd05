from __future__ import annotations

import json

import pytest

from alcop_triton.errors import UnsupportedError
from alcop_triton.model import hardware
from alcop_triton.model.hardware import GPUSpec, calibration_path, default_mma, get_spec, save_calibrated


@pytest.mark.parametrize("name", ["H100", "h100", "NVIDIA H100 80GB HBM3", " h100 "])
def test_get_spec_names(name):
    s = get_spec(name)
    assert s.name == "H100" and s.num_sms == 132 and s.smem_per_block == 227 * 1024
    assert s.smem_per_sm == 228 * 1024 and s.l2_bytes == 50 * 1024 * 1024 and s.mma == "wgmma"


def test_presets():
    a100, h200 = get_spec("NVIDIA A100-SXM4-40GB"), get_spec("NVIDIA H200")
    assert a100.cc == (8, 0) and a100.num_sms == 108 and a100.mma == "mma_sync"
    assert h200.num_sms == 132 and h200.l2_bytes == 60 * 1024 * 1024 and h200.dram_bw > get_spec("H100").dram_bw


def test_unknown_and_lookalike_names():
    with pytest.raises(UnsupportedError, match="calibrate"):
        get_spec("GH200 480GB")      # whole tokens only: not an H200
    with pytest.raises(ValueError):
        get_spec("")


def test_mma_paths():
    h = get_spec("H100")
    ms = h.with_mma("mma_sync")
    assert ms.mma == "mma_sync" and get_spec("H100", mma="mma_sync") == ms
    assert ms.tc_flops("float16", "mma_sync") < h.tc_flops("float16", "wgmma")
    assert h.tc_flops("float32", "wgmma") == h.tc_tf32_wgmma
    with pytest.raises(ValueError, match="wgmma"):
        get_spec("A100").with_mma("wgmma")
    with pytest.raises(ValueError):
        h.with_mma("tcgen05")


def test_default_mma_env(monkeypatch):
    assert default_mma((9, 0)) == "wgmma" and default_mma((8, 0)) == "mma_sync"
    monkeypatch.setenv("DISABLE_MMA_V3", "1")
    assert default_mma((9, 0)) == "mma_sync"


def test_calibration_file_preferred_and_atomic(isolated_cache):
    base = get_spec("H100")
    cal = base.replace(dram_bw=2.5e12, source="calibrated on test")
    path = save_calibrated(cal, {"dram_bw": 2.5e12})
    assert path == calibration_path("NVIDIA H100 80GB HBM3") and path.parent.parent == isolated_cache
    assert not list(path.parent.glob("*.tmp*"))
    assert get_spec("h100").dram_bw == 2.5e12
    assert get_spec("h100", use_calibration=False).dram_bw == base.dram_bw
    assert json.loads(path.read_text())["measurements"] == {"dram_bw": 2.5e12}
    path.write_text("{not json")
    with pytest.raises(ValueError, match="unreadable"):
        get_spec("H100")


def test_spec_dict_roundtrip():
    s = get_spec("H200")
    assert GPUSpec.from_dict(s.to_dict()) == s
    with pytest.raises(ValueError, match="unknown"):
        GPUSpec.from_dict({**s.to_dict(), "bogus": 1})


def test_detect_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        assert hardware.detect().num_sms > 0
    else:
        with pytest.raises(UnsupportedError, match="no CUDA"):
            hardware.detect()


def test_spec_from_properties_overrides_sizes():
    class Props:
        name, major, minor = "NVIDIA H100 PCIe", 9, 0
        multi_processor_count, L2_cache_size = 114, 50 * 1024 * 1024
        shared_memory_per_multiprocessor, shared_memory_per_block_optin = 233472, 232448
        regs_per_multiprocessor, max_threads_per_multi_processor = 65536, 2048

    s = hardware.spec_from_properties(Props(), get_spec("H100"))
    assert s.num_sms == 114 and s.name == "H100"
    blank = hardware.spec_from_properties(Props(), None)
    assert blank.source == "uncalibrated" and blank.name == "NVIDIA H100 PCIe"


def test_calibrate_cli_needs_no_gpu_to_load():
    import subprocess
    import sys

    from alcop_triton.model import calibrate

    assert callable(calibrate.calibrate)
    out = subprocess.run([sys.executable, "-m", "alcop_triton.model.calibrate", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "--quick" in out and "--dry-run" in out

"""Dispatch: DB hit, shipped table, nearest shape re-ranked, analytical fallback, the decision cache."""

from __future__ import annotations

import warnings

import pytest

from alcop_triton.autotune import dispatch as dmod
from alcop_triton.autotune.database import Database, TuningRecord
from alcop_triton.autotune.dispatch import Dispatcher, model_shortlist, transfer
from alcop_triton.autotune.measure import ErrorKind, MeasureResult
from alcop_triton.autotune.space import ConfigSpace, shape_reason
from alcop_triton.model import analytical
from alcop_triton.model.hardware import get_spec
from alcop_triton.records import KernelConfig, Workload

SPEC = get_spec("H100")
W = Workload("matmul", (1024, 768, 3072), "float16", "nt")


def rec(w, c, ms, error=None):
    return TuningRecord.from_result(w, MeasureResult(c, ms, error), SPEC)


@pytest.fixture
def no_defaults(monkeypatch):
    monkeypatch.setattr(dmod, "default_tables", lambda: [])


def test_db_hit_and_cache(tmp_path, no_defaults, monkeypatch):
    db = Database(tmp_path / "t.sqlite")
    fast, faster_but_wrong = KernelConfig(block_m=128, block_n=128), KernelConfig(block_m=64, block_n=64)
    db.add([rec(W, fast, 0.02), rec(W, faster_but_wrong, 0.01), rec(W, faster_but_wrong, None, ErrorKind.WRONG_ANSWER)])
    d = Dispatcher(db)
    assert d.best_config(W, SPEC) == fast
    assert d.decide(W, SPEC).source == "db"
    queries = []
    real = db.records
    monkeypatch.setattr(db, "records", lambda **q: queries.append(q) or real(**q))
    for _ in range(3):
        assert d.best_config(W, SPEC) == fast
    assert queries == []  # a decided workload is served from memory: no database query per call
    d.clear()
    assert d.best_config(W, SPEC) == fast and queries  # forgotten: asked again


def test_shipped_table_used_when_db_has_nothing(tmp_path, monkeypatch):
    shipped = KernelConfig(block_m=256, block_n=128, num_warps=8)
    monkeypatch.setattr(dmod, "default_tables", lambda: [rec(W, shipped, 0.03)])
    d = Dispatcher(Database(tmp_path / "absent.sqlite"))
    assert d.decide(W, SPEC) == dmod.Decision(shipped, "default", "0.03 ms")
    assert not (tmp_path / "absent.sqlite").exists()  # lookups never create the user's database


def test_db_beats_shipped_table(tmp_path, monkeypatch):
    mine = KernelConfig(block_m=32)
    monkeypatch.setattr(dmod, "default_tables", lambda: [rec(W, KernelConfig(block_m=256), 0.001)])
    db = Database(tmp_path / "t.sqlite")
    db.add(rec(W, mine, 0.5))
    assert Dispatcher(db).best_config(W, SPEC) == mine


def test_nearest_shapes_scored_with_the_models_error_where_measured(tmp_path, no_defaults):
    db = Database(tmp_path / "t.sqlite")
    tuned = Workload("matmul", (1024, 768, 2048), "float16", "nt")
    space = ConfigSpace.build(tuned, SPEC, top_k=6)
    # The model's last pick measured fastest (10x faster than its estimate): the correction carries it over.
    winner = space.ranked()[-1]
    for c in space.configs:
        est = analytical.estimate(tuned, c, SPEC).time_s * 1e3
        db.add(rec(tuned, c, est * (0.1 if c == winner else 1.0)))
    unseen = Workload("matmul", (1000, 800, 3000), "float16", "nt")
    dec = Dispatcher(db).decide(unseen, SPEC)
    assert dec.source == "nearest" and tuned.key() in dec.detail and "measured near" in dec.detail
    assert dec.config == winner


def test_a_neighbours_overall_model_error_does_not_carry_over(no_defaults):
    # The model is 3x pessimistic about every config of the small neighbour (a per-shape error) and
    # exact on the large one. The small neighbour's fastest config must not inherit that 3x: against
    # its own neighbour's configs it is no better than the model said, while the large neighbour's
    # winner beat the model there by 2x.
    small, large = Workload("matmul", (512, 4096, 1024), "float16", "nt"), Workload("matmul", (4096, 4096, 4096), "float16", "nt")
    target = Workload("matmul", (2048, 12288, 4096), "float16", "nt")
    small_cfgs = [KernelConfig(128, 128, 64, num_warps=8, smem_stages=s) for s in (3, 4, 5)]
    large_cfgs = [KernelConfig(128, 256, 64, num_warps=8, smem_stages=s, async_copy="tma") for s in (3, 4)]
    winner = large_cfgs[0]

    def ms(w, c, factor):
        return analytical.estimate(w, c, SPEC).time_s * 1e3 * factor
    records = [rec(small, c, ms(small, c, 1 / 3)) for c in small_cfgs]
    records += [rec(large, c, ms(large, c, 0.5 if c == winner else 1.0)) for c in large_cfgs]
    config, detail = transfer(target, records, SPEC)
    assert config == winner and "measured near" in detail


def test_transfer_never_picks_tiles_beyond_the_problem_or_failed_configs(no_defaults):
    big = Workload("matmul", (4096, 4096, 4096), "float16", "nt")
    huge, failed = KernelConfig(128, 256, 64, num_warps=8, smem_stages=4), KernelConfig(16, 64, 128, smem_stages=4)
    records = [rec(big, huge, 0.2), rec(big, failed, 5.0), rec(big, failed, None, ErrorKind.RUNTIME)]
    decode = Workload("matmul", (16, 4096, 4096), "float16", "nt")
    config, detail = transfer(decode, records, SPEC)
    assert shape_reason(decode, config, SPEC) is None and config.block_m == 16
    assert config != failed and "model shortlist" in detail
    assert transfer(decode, [], SPEC) is None


def test_analytical_fallback_and_autotune_off(tmp_path, no_defaults, monkeypatch):
    monkeypatch.delenv("ALCOP_AUTOTUNE", raising=False)
    small = Workload("matmul", (128, 64, 512), "float16", "nt")
    dec = Dispatcher(Database(tmp_path / "t.sqlite")).decide(small, SPEC)
    assert dec.source == "analytical"
    assert dec.config == model_shortlist(small, SPEC)[0]


def test_autotune_on_tunes_and_stores(tmp_path, no_defaults, monkeypatch):
    from alcop_triton.autotune import session

    calls = []

    def fake_tune(workload, target, db, **kw):
        calls.append(workload)
        db.add(rec(workload, KernelConfig(block_m=16), 0.5))
        from alcop_triton.autotune.tuner import Trial, TuneResult

        return TuneResult(workload, "analytical+xgb", [Trial(0, MeasureResult(KernelConfig(block_m=16), 0.5), 1.0)])

    monkeypatch.setenv("ALCOP_AUTOTUNE", "1")
    monkeypatch.setattr(session, "tune", fake_tune)
    monkeypatch.setattr(session, "resolve_target", lambda device=None, gpu=None: session.Target(
        "cpu", SPEC, dmod.gpu_key(SPEC), "fake", "wgmma"))
    db = Database(tmp_path / "t.sqlite")
    d = Dispatcher(db)
    assert d.decide(W, SPEC).source == "tuned"
    assert calls == [W] and db.best(W, SPEC).config == KernelConfig(block_m=16)
    d.clear()
    assert d.decide(W, SPEC).source == "db"  # stored: the next process does not tune again


def test_broken_db_falls_back(tmp_path, no_defaults):
    path = tmp_path / "t.sqlite"
    path.write_bytes(b"garbage" * 200)
    with pytest.warns(UserWarning, match="unusable"):
        dec = Dispatcher(Database(path)).decide(W, SPEC)
    assert dec.source == "analytical"


def test_module_level_best_config_uses_env_db(tmp_path, no_defaults, monkeypatch):
    db = Database(tmp_path / "env.sqlite")
    db.add(rec(W, KernelConfig(block_m=32, block_n=32), 0.1))
    monkeypatch.setenv("ALCOP_DB", str(db.path))
    assert dmod.best_config(W, SPEC) == KernelConfig(block_m=32, block_n=32)


def test_default_tables_read_package_data(tmp_path):
    """The shipped H100 and H200 tables are package data, parse whole, and dispatch serves them with no database."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a malformed line would warn (RecordSkipped) and be dropped
        recs = dmod.default_tables()
    assert recs, "no shipped table: alcop_triton/data/default_*.jsonl is missing or empty"
    assert {r.gpu for r in recs} == {"H100", "H200"} and all(r.ok or r.error for r in recs)
    shipped = next(r for r in recs if r.ok)
    dec = Dispatcher(Database(tmp_path / "absent.sqlite")).decide(shipped.workload, SPEC)
    assert dec.source == "default"


@pytest.mark.parametrize("alcop_ms, torch_ms, prefer", [
    (0.03, 0.02, True), (0.02, 0.03, False), (0.02, None, False),
    (0.027, 0.03, True),    # 3 µs saved: less than an alcop call costs the host over torch's
    (0.95, 1.0, False),     # 5 %: beyond the timer's spread
    (0.985, 1.0, True)])    # 1.5 %: within it
def test_decision_prefers_torch_unless_alcop_saves_enough(tmp_path, no_defaults, alcop_ms, torch_ms, prefer):
    import dataclasses
    db = Database(tmp_path / "t.sqlite")
    db.add(dataclasses.replace(rec(W, KernelConfig(), alcop_ms), torch_ms=torch_ms))
    d = Dispatcher(db).decide(W, SPEC)
    assert (d.alcop_ms, d.torch_ms, d.torch_preferred) == (alcop_ms, torch_ms, prefer)


def test_a_pointwise_convolution_weighs_its_gemm_against_cudnns_convolution(tmp_path, no_defaults):
    # ResNet-50's 14x14 1024 -> 512 layer at batch 64 (shipped H100 table): alcop's GEMM beats cuBLAS
    # on the product, not cuDNN on the convolution; patch mode compares what torch would run.
    import dataclasses
    from alcop_triton.choose_config import decide
    gemm = Workload("matmul", (12544, 512, 1024), "float16", "nt")
    conv = Workload("conv2d", (64, 14, 14, 1024, 512, 1, 1, 1, 0, 1, 1), "float16", "nhwc")
    db = Database(tmp_path / "t.sqlite")
    db.add(dataclasses.replace(rec(gemm, KernelConfig(), 0.0246), torch_ms=0.0620))
    d = Dispatcher(db)
    assert d.torch_ms(conv, SPEC) is None
    assert decide(gemm, SPEC, conv, d) == (KernelConfig(), False)  # no cuDNN record: cuBLAS's time decides
    db.add(dataclasses.replace(rec(conv, KernelConfig(block_m=64), 0.0330), torch_ms=0.0256))
    d = Dispatcher(db)
    assert d.torch_ms(conv, SPEC) == 0.0256
    assert decide(gemm, SPEC, conv, d) == (KernelConfig(), True)
    assert decide(gemm, SPEC, None, d) == (KernelConfig(), False)


def test_an_unmeasured_float32_workload_is_left_to_torch_in_patch_mode(tmp_path, no_defaults):
    # float32 kernels measured slower than cuBLAS almost everywhere (TORCH_UNLESS_MEASURED): without records
    # patch mode keeps torch's; half precision without records still runs alcop; records decide either way.
    import dataclasses
    w32 = Workload("matmul", (1000, 1000, 1000), "float32", "nn")
    w16 = dataclasses.replace(w32, dtype="float16")
    db = Database(tmp_path / "t.sqlite")
    assert Dispatcher(db).decide(w32, SPEC).torch_preferred
    assert not Dispatcher(db).decide(w16, SPEC).torch_preferred
    db.add(dataclasses.replace(rec(w32, KernelConfig(), 0.02), torch_ms=0.03))
    assert not Dispatcher(db).decide(w32, SPEC).torch_preferred


def test_float32_stays_with_torch_until_a_record_holds_torchs_time_too(tmp_path, no_defaults, monkeypatch):
    # alcop's time alone (torch's run failed or was not asked for), in the database, the shipped table or
    # from call-time tuning, does not measure alcop against torch: float32 stays with torch; float16 does not
    import dataclasses
    w32 = Workload("matmul", (1000, 1000, 1000), "float32", "nn")
    w16 = dataclasses.replace(w32, dtype="float16")
    db = Database(tmp_path / "t.sqlite")
    db.add(rec(w32, KernelConfig(), 0.02))
    db.add(rec(w16, KernelConfig(), 0.02))
    d32, d16 = Dispatcher(db).decide(w32, SPEC), Dispatcher(db).decide(w16, SPEC)
    assert (d32.source, d32.torch_ms, d32.torch_preferred) == ("db", None, True)
    assert (d16.source, d16.torch_preferred) == ("db", False)
    shipped = [rec(dataclasses.replace(w32, shape=(2000, 1000, 1000)), KernelConfig(), 0.04)]
    monkeypatch.setattr(dmod, "default_tables", lambda: shipped)
    d = Dispatcher(Database(tmp_path / "absent.sqlite")).decide(shipped[0].workload, SPEC)
    assert d.source == "default" and d.torch_preferred
    monkeypatch.setattr(dmod.settings, "autotune", lambda: True)
    monkeypatch.setattr(Dispatcher, "_tune", lambda self, w, spec: dmod.Decision(KernelConfig(), "tuned", "0.01 ms"))
    for w, left_to_torch in ((w32, True), (w16, False)):
        d = Dispatcher(Database(tmp_path / "empty.sqlite")).decide(w, SPEC)
        assert d.source == "tuned" and d.torch_preferred is left_to_torch


def test_a_gpu_without_measurements_transfers_another_gpus_through_its_model(tmp_path, monkeypatch):
    h200 = get_spec("H200")
    tuned = Workload("matmul", (2048, 2048, 2048), "float16", "nt")
    space = ConfigSpace.build(tuned, SPEC, top_k=6)
    winner = space.ranked()[-1]  # the H100 measured the model's last pick 10x faster than estimated
    h100_records = [rec(tuned, c, analytical.estimate(tuned, c, SPEC).time_s * 1e3 * (0.1 if c == winner else 1.0))
                    for c in space.configs]
    monkeypatch.setattr(dmod, "default_tables", lambda: h100_records)
    dec = Dispatcher(Database(tmp_path / "absent.sqlite")).decide(tuned, h200)
    assert dec.source == "transfer" and dec.config == winner and "on H100" in dec.detail
    # the H100 itself still finds its own measurement first
    assert Dispatcher(Database(tmp_path / "absent.sqlite")).decide(tuned, SPEC).source == "default"


class _FakeCuda:
    """The device a CUDA tensor reports: the config choice consults the dispatcher for it."""

    type = "cuda"
    index = 0


def test_unmeasured_float32_goes_to_torch_also_where_torchs_recorded_times_do_not_apply(tmp_path, no_defaults,
                                                                                     monkeypatch):
    # A matmul reading permuted operands in place (two batch dims) is not what the records timed torch on, so
    # recorded torch times do not send it to torch (torch_comparable False); float32 without records goes to
    # torch all the same, since no recorded time sends it there. float16 keeps alcop.
    import contextlib
    import dataclasses

    import torch

    from alcop_triton import choose_config as cc
    from alcop_triton import fastpath

    monkeypatch.setenv("ALCOP_DB", str(tmp_path / "absent.sqlite"))
    monkeypatch.setattr(cc, "gpu_spec", lambda index: SPEC)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(cc, "_CONFIGS", {})
    noted: list[Workload] = []
    w32 = Workload("bmm", (24, 96, 80, 48), "float32", "nn")
    w16 = dataclasses.replace(w32, dtype="float16")
    for w in (w32, w16):
        monkeypatch.setattr(fastpath, "note_torch_preferred", lambda w=w: noted.append(w))
        for comparable in (True, False):
            cc.choose_config(_FakeCuda(), lambda w=w: w, torch_comparable=comparable)  # type: ignore[arg-type]
    assert noted == [w32, w32]


def test_this_gpus_measurements_of_a_config_outweigh_another_gpus(monkeypatch, no_defaults):
    # The H200 measured two copies of one tile on a neighbour: TMA faster. The H100 measured the pointer
    # copy far ahead of the model on three nearer shapes. Pooled, the H100's many records outvoted the
    # H200's own (docs/decisions.md#d45); this GPU's measurements of a config now decide its correction.
    h200 = get_spec("H200")
    target = Workload("matmul", (64, 4096, 4096), "float16", "nt")
    pointer = KernelConfig(64, 64, 128, num_warps=4, smem_stages=5)
    tma = pointer.replace(async_copy="tma")
    others = [KernelConfig(64, 128, 64, num_warps=4, smem_stages=4), KernelConfig(32, 64, 128, num_warps=4, smem_stages=4)]

    def ms(w, c, spec, factor):
        return analytical.estimate(w, c, spec).time_s * 1e3 * factor
    own_near = Workload("matmul", (64, 8192, 8192), "float16", "nt")
    records = [TuningRecord.from_result(own_near, MeasureResult(c, ms(own_near, c, h200, f)), h200)
               for c, f in ((tma, 0.6), (pointer, 0.9), *((c, 1.0) for c in others))]
    for shape in ((64, 4096, 4224), (64, 4224, 4096), (64, 4096, 3968)):
        w = Workload("matmul", shape, "float16", "nt")
        records += [rec(w, c, ms(w, c, SPEC, f)) for c, f in ((pointer, 0.3), (tma, 1.0), *((c, 1.0) for c in others))]
    config, _ = transfer(target, records, h200)
    assert config == tma
    monkeypatch.setattr(dmod, "OWN_GPU_FIRST", False)  # pooled: the H100's pointer records win
    assert transfer(target, records, h200)[0] == pointer

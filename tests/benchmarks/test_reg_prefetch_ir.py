"""benchmarks/probes/reg_prefetch_ir.py: counting, path stripping and the checked reading, on small IR text."""

from __future__ import annotations


from . import load_script


def _load():
    return load_script("probes/reg_prefetch_ir.py", "reg_prefetch_ir")


ir = _load()


def test_counts_and_paths():
    ttgir = ('%a = ttg.async_copy_global_to_local %p\n%b = tt.load %q loc("/some/dir/k.py":3:1)\n'
             "%c = ttg.local_alloc %b\n%d = ttng.warp_group_dot %a, %c\n")
    ptx = "cp.async.cg.shared.global [x]\ncp.async.ca.shared.global [y]\nld.global.v4.b32 r\nwgmma.mma_async.sync\n"
    c = ir.count({"ttgir": ttgir, "ptx": ptx})
    assert c["ttgir"]["async copy global->shared"] == 1 and c["ttgir"]["global load (tt.load)"] == 1
    assert c["ttgir"]["register->shared store"] == 1 and c["ttgir"]["wgmma (warp_group_dot)"] == 1
    assert c["ptx"]["cp.async"] == 2 and c["ptx"]["ld.global"] == 1 and c["ptx"]["wgmma.mma_async"] == 1
    assert 'loc("k.py":3:1)' in ir.strip_paths(ttgir) and "/some/dir" not in ir.strip_paths(ttgir)


def _counts(tt_load: int, alloc: int, st_shared: int) -> dict:
    ttgir = {k: 0 for k in ir.TTGIR_OPS}
    ttgir.update({"global load (tt.load)": tt_load, "register->shared store": alloc, "async copy global->shared": 6})
    ptx = {k: 0 for k in ir.PTX_OPS}
    ptx.update({"st.shared": st_shared, "cp.async": 48 - 12 * tt_load, "ld.global": 4 * tt_load})
    return {"ttgir": ttgir, "ptx": ptx}


def test_reading_states_only_what_the_counts_show():
    base, reg = list(ir.VARIANTS)
    shows = {m: {base: _counts(0, 0, 0), reg: _counts(4, 2, 24)} for m in ("wgmma", "mma_sync")}
    lines = ir.reading(shows)
    assert len(lines) == 4 and "synchronous global load (4 tt.load" in lines[0]
    same = {m: {base: _counts(0, 0, 0), reg: _counts(0, 0, 0)} for m in ("wgmma", "mma_sync")}
    assert ir.reading(same) == []

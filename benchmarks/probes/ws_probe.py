"""Probe: does Triton's Hopper warp specialization (tl.range(..., warp_specialize=True)) pay
on TMA matmuls of the ALCOP suite? Standalone kernels (not alcop codegen), so the answer
decides whether the knob is worth adding. Writes JSON lines to $OUT/ws_probe.jsonl."""
import json, os, sys, time, itertools
import torch, triton, triton.language as tl


def alloc(size, align, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


triton.set_allocator(alloc)


@triton.jit
def mm(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
       S: tl.constexpr, WS: tl.constexpr, PERSIST: tl.constexpr, FLAT: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(B, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    npm = tl.cdiv(M, BM)
    npn = tl.cdiv(N, BN)
    ntiles = npm * npn
    if PERSIST:
        start = tl.program_id(0)
        step = tl.num_programs(0)
    else:
        start = tl.program_id(0)
        step = ntiles
    for t in tl.range(start, ntiles, step, flatten=FLAT, warp_specialize=WS and PERSIST,
                      num_stages=S if FLAT else 1):
        group = t // (8 * npn)
        first = group * 8
        gsz = tl.minimum(npm - first, 8)
        pm = first + (t % (8 * npn)) % gsz
        pn = (t % (8 * npn)) // gsz
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in tl.range(0, tl.cdiv(K, BK), num_stages=1 if FLAT else S,
                           warp_specialize=WS and not PERSIST):
            a = a_desc.load([pm * BM, k0 * BK])
            b = b_desc.load([k0 * BK, pn * BN])
            acc = tl.dot(a, b, acc)
        c_desc.store([pm * BM, pn * BN], acc.to(tl.float16))


def main():
    out = os.environ.get("OUT", ".")
    shapes = [(4096, 4096, 4096), (2048, 2048, 2048), (1024, 3072, 768), (1024, 768, 3072),
              (3136, 512, 2048), (12544, 1024, 512), (512, 768, 3072), (200704, 256, 256)]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    f = open(os.path.join(out, "ws_probe.jsonl"), "w")
    for (M, N, K) in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        ref = a @ b
        t_ref = triton.testing.do_bench_cudagraph(lambda: a @ b)
        for BM, BN, BK, S, W, ws, pers in itertools.product((128,), (128, 256), (64,), (3, 4), (4, 8), (False, True), (False, True)):
            c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
            tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
            grid = (min(tiles, sms),) if pers else (tiles,)
            rec = dict(M=M, N=N, K=K, BM=BM, BN=BN, BK=BK, S=S, W=W, ws=ws, persistent=pers, torch_ms=t_ref)
            try:
                fn = lambda: mm[grid](a, b, c, M, N, K, BM, BN, BK, S, ws, pers, pers, num_warps=W)
                fn(); torch.cuda.synchronize()
                err = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
                rec["err"] = err
                rec["ms"] = triton.testing.do_bench_cudagraph(fn) if err < 1e-2 else None
            except Exception as e:  # compile failure / out of resources: record it
                rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            f.write(json.dumps(rec) + "\n"); f.flush()
            print(rec, flush=True)


if __name__ == "__main__":
    main()

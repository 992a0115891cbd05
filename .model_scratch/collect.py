# Scratch: measure a plain Triton matmul over a config space on the current GPU (not committed).
import itertools, json, os, random, sys, time, multiprocessing as mp
import torch, triton, triton.language as tl

@triton.jit(do_not_specialize=['GROUP_M'])
def mm(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M):
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    size_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % size_m)
    pid_n = (pid % width) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    pa = a + rm[:, None] * K + rk[None, :]
    pb = b + rk[:, None] * N + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(pa, mask=rm[:, None] < M, other=0.0), tl.load(pb, mask=rn[None, :] < N, other=0.0))
        pa += BLOCK_K
        pb += BLOCK_K * N
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

WLS = [((4096,4096,4096),"float16"),((1024,64,2048),"float16"),((2048,2048,2048),"float16"),((4096,64,4096),"float16"),
       ((512,768,3072),"float16"),((1024,3072,768),"float16"),((3136,2048,512),"float16"),((8192,8192,1024),"float16"),
       ((256,256,8192),"float16"),((16384,1024,1024),"float16"),((50176,256,128),"float16"),
       ((1024,1024,1024),"float16"),((128,4096,4096),"float16"),((2048,512,8192),"float16"),((6144,6144,6144),"float16")]
SPACE = [dict(BLOCK_M=bm,BLOCK_N=bn,BLOCK_K=bk,num_warps=w,num_stages=s)
         for bm,bn,bk,w,s in itertools.product([32,64,128,256],[32,64,128,256],[32,64,128],[4,8],[1,2,3,4,5])]
def eb(dt): return 4 if dt=="float32" else 2
def fits(c, dt): return (c["BLOCK_M"]+c["BLOCK_N"])*c["BLOCK_K"]*eb(dt)*max(1,c["num_stages"]) <= 232448

def run(shape, dt, cfg, a, b, c):
    M,N,K = shape
    grid = (triton.cdiv(M,cfg["BLOCK_M"])*triton.cdiv(N,cfg["BLOCK_N"]),)
    kw = {k:v for k,v in cfg.items() if k != 'GROUP_M'}
    return lambda: mm[grid](a,b,c,M,N,K,GROUP_M=cfg['GROUP_M'],**kw)

def compile_worker(args):
    idx, items = args
    torch.cuda.set_device(0)
    bufs = {}
    t0 = time.time()
    for n_done, (dt, cfg) in enumerate(items):
        if idx == 0 and n_done % 5 == 0: print('w0', n_done, len(items), f'{time.time()-t0:.0f}s', flush=True)
        if dt not in bufs:
            d = getattr(torch, dt); bufs[dt] = [torch.zeros(256*256, device="cuda", dtype=d) for _ in range(3)]
        a,b,c = bufs[dt]
        try:
            mm.warmup(a,b,c,256,256,256,GROUP_M=8,**cfg, grid=(1,))
        except Exception as e:
            pass
    print('chunk', idx, 'done', flush=True)
    return idx

def main(out):
    torch.backends.cuda.matmul.allow_tf32 = True
    rng = random.Random(0)
    plan = []
    for shape, dt in WLS:
        cands = [c for c in SPACE if fits(c, dt)]
        full = [dict(c, GROUP_M=8) for c in cands] + [dict(c, GROUP_M=rng.choice([1, 4, 16])) for c in rng.sample(cands, 60)]
        plan.append((shape, dt, full))
    uniq = sorted({(dt, json.dumps(c, sort_keys=True)) for _,dt,cs in plan for c in cs})
    uniq = sorted({(dt, json.dumps({k: v for k, v in json.loads(c).items() if k != 'GROUP_M'}, sort_keys=True)) for dt, c in uniq})
    items = [(dt, json.loads(c)) for dt,c in uniq]
    t0=time.time()
    chunks = [(i, items[i::16]) for i in range(16)]
    ctx = mp.get_context("spawn")
    with ctx.Pool(16) as pool:
        list(pool.imap_unordered(compile_worker, chunks))
    print(f"compiled {len(items)} in {time.time()-t0:.0f}s", flush=True)
    name = torch.cuda.get_device_name()
    f = open(out, "w")
    for shape, dt, cs in plan:
        t1=time.time()
        M,N,K = shape; d = getattr(torch, dt)
        a = torch.randn(M,K,device="cuda",dtype=d); b = torch.randn(K,N,device="cuda",dtype=d); c = torch.empty(M,N,device="cuda",dtype=d)
        ref = None
        best = 1e9
        for cfg in cs:
            rec = {"workload":{"op":"matmul","shape":list(shape),"dtype":dt,"layout":"nn"},
                   "config":{**cfg,"REG_STAGES":1,"REG_SPLIT":1,"ASYNC_COPY":"pointer"},
                   "time_ms":None,"error":None,"gpu":"H100","device":name,"cc":"9.0",
                   "mma":"mma_sync" if cfg["num_warps"]%4 or cfg["BLOCK_M"]%64 else "wgmma","triton":triton.__version__,"torch":torch.__version__}
            try:
                fn = run(shape, dt, cfg, a, b, c)
                fn(); torch.cuda.synchronize()
                ms = triton.testing.do_bench(fn, warmup=3, rep=8, return_mode="median")
                rec["time_ms"] = ms; best=min(best,ms)
            except Exception as e:
                msg = str(e)
                rec["error"] = "out_of_resources" if "out of resource" in msg.lower() else "compile"
                rec["msg"] = msg[:200]
            f.write(json.dumps(rec)+"\n")
        f.flush()
        print(shape, dt, f"{time.time()-t1:.0f}s best {best*1e3:.1f}us {2*M*N*K/best/1e9:.0f}TF", flush=True)

if __name__ == "__main__":
    main(sys.argv[1])

import torch, triton, triton.language as tl
from alcop_triton.model.calibrate import _time_ms
@triton.jit
def chase(nxt, out, steps):
    i = tl.load(nxt)
    for _ in tl.range(steps, num_stages=1):
        i = tl.load(nxt + i, volatile=True)
    tl.store(out, i)
for mb in (4, 512):
    n = (mb << 20) // 8
    perm = torch.randperm(n, device="cuda"); nxt = torch.empty(n, dtype=torch.int64, device="cuda"); nxt[perm] = torch.roll(perm, -1)
    out = torch.empty(1, dtype=torch.int64, device="cuda")
    ts = [_time_ms(lambda: chase[(1,)](nxt, out, s, num_warps=1, num_stages=1), 3) for s in (2000, 10000)]
    print("volatile", mb, (ts[1]-ts[0])*1e-3/8000*1e9, "ns")

"""alcop_triton generated kernel alcop_c

op:        C[i, j] = sum((A[i, k] * B[j, k]), axis=[k])
output:    C(M, N) float16 = C[i, j]
inputs:    A(M, K) float16, B(N, K) float16
sizes:     runtime M, K, N; unit strides A: dim 1, B: dim 1, C: dim 1
axes:      batch (), rows (M) ('i',), columns (N) ('j',), reduction (K) ('k',)
config:    m128n128k64_g8_w4_s3_r2x2  (BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3, REG_STAGES=2, REG_SPLIT=2, ASYNC_COPY=pointer)
target:    H100
schedule:  CacheRead(A, shared, A_shared); CacheRead(A_shared, register, A_reg); CacheRead(B, shared, B_shared); CacheRead(B_shared, register, B_reg); Tile(128, 128, 64, 32); Pipeline(A_shared, 3); Pipeline(A_reg, 2); Pipeline(B_shared, 3); Pipeline(B_reg, 2); Group(8); Warps(4); AsyncCopyStep(pointer)
passes:    lower; find_pipeline_candidates; plan_pipeline; SelectAsyncCopy(a=pointer, b=pointer); PrefetchRegisters(reg_stages=2, reg_split=2); InjectSharedPipeline(num_stages=3)
pipeline:
  buffer             level     stages   loop  pipelined  why
  A_shared           shared    3->3     k0    yes        rule 1 (async copy): direct load of input A, 16 contiguous bytes per thread (A is contiguous along k (K, 32 elements per run)) via pointer
                                                       rule 2 (sequential loop): loads in loop k0 and is used in the same iteration
  B_shared           shared    3->3     k0    yes        rule 1 (async copy): direct load of input B, 16 contiguous bytes per thread (B is contiguous along k (K, 32 elements per run)) via pointer
                                                       rule 2 (sequential loop): loads in loop k0 and is used in the same iteration
  A_reg              register  2->2     ks    yes        rule 1 (async copy): a register buffer fed by shared buffer A_shared (multi-level chain; the register level is explicit prefetch code)
                                                       rule 2 (sequential loop): loads in loop ks and is used in the same iteration
  B_reg              register  2->2     ks    yes        rule 1 (async copy): a register buffer fed by shared buffer B_shared (multi-level chain; the register level is explicit prefetch code)
                                                       rule 2 (sequential loop): loads in loop ks and is used in the same iteration
versions:  alcop_triton 0.1.0, triton 3.6.0
"""
import triton
import triton.language as tl


@triton.jit
def alcop_c(A, B, C, M, K, N, stride_A_0, stride_B_0, stride_C_0, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SUB_K: tl.constexpr, REG_SPLIT: tl.constexpr, GROUP_M: tl.constexpr):
    # program ids; GROUP_M rows of tiles run together so their B columns stay in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    # output rows: i
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    i = offs_m
    # output columns: j
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    j = offs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    offs_k_p0 = 0 + tl.arange(0, SUB_K)
    mask_k_p0 = offs_k_p0 < K
    k_p0 = offs_k_p0
    # A_reg -> tile_a_p0: BLOCK_M x SUB_K tile of A into registers; prefetch prologue: sub-tile 0 of chunk 0
    tile_a_p0 = tl.load(A + i[:, None] * stride_A_0 + k_p0[None, :], mask=mask_m[:, None] & mask_k_p0[None, :], other=0.0)
    # B_reg -> tile_b_p0: SUB_K x BLOCK_N tile of B into registers; prefetch prologue: sub-tile 0 of chunk 0
    tile_b_p0 = tl.load(B + j[None, :] * stride_B_0 + k_p0[:, None], mask=mask_k_p0[:, None] & mask_n[None, :], other=0.0)
    # pipeline: 3 shared-memory stages (async copies issued 2 chunk(s) ahead)
    for k0 in tl.range(0, tl.cdiv(K, BLOCK_K), num_stages=3):
        # A_shared: BLOCK_M x BLOCK_K chunk of A in shared memory, async-copied (cp.async) by the pipeliner; its register sub-tiles load it below
        # B_shared: BLOCK_K x BLOCK_N chunk of B in shared memory, async-copied (cp.async) by the pipeliner; its register sub-tiles load it below
        offs_k_p1 = k0 * BLOCK_K + SUB_K + tl.arange(0, SUB_K)
        mask_k_p1 = offs_k_p1 < K
        k_p1 = offs_k_p1
        # A_reg -> tile_a_p1: BLOCK_M x SUB_K tile of A into registers; prefetch: sub-tile 1 loaded 1 step(s) before its dot
        tile_a_p1 = tl.load(A + i[:, None] * stride_A_0 + k_p1[None, :], mask=mask_m[:, None] & mask_k_p1[None, :], other=0.0)
        # B_reg -> tile_b_p1: SUB_K x BLOCK_N tile of B into registers; prefetch: sub-tile 1 loaded 1 step(s) before its dot
        tile_b_p1 = tl.load(B + j[None, :] * stride_B_0 + k_p1[:, None], mask=mask_k_p1[:, None] & mask_n[None, :], other=0.0)
        # compute on sub-tile 0 (buffer 0 of 2)
        acc = tl.dot(tile_a_p0, tile_b_p0, acc)
        offs_k_p0 = (k0 + 1) * BLOCK_K + tl.arange(0, SUB_K)
        mask_k_p0 = offs_k_p0 < K
        k_p0 = offs_k_p0
        # A_reg -> tile_a_p0: BLOCK_M x SUB_K tile of A into registers; prefetch: sub-tile 0 of chunk k0 + 1 while computing sub-tile 1 (inner-pipeline fusion)
        tile_a_p0 = tl.load(A + i[:, None] * stride_A_0 + k_p0[None, :], mask=mask_m[:, None] & mask_k_p0[None, :], other=0.0)
        # B_reg -> tile_b_p0: SUB_K x BLOCK_N tile of B into registers; prefetch: sub-tile 0 of chunk k0 + 1 while computing sub-tile 1 (inner-pipeline fusion)
        tile_b_p0 = tl.load(B + j[None, :] * stride_B_0 + k_p0[:, None], mask=mask_k_p0[:, None] & mask_n[None, :], other=0.0)
        # compute on sub-tile 1 (buffer 1 of 2)
        acc = tl.dot(tile_a_p1, tile_b_p1, acc)
    # epilogue, fused into the store: C = acc[i, j]
    out = acc
    tl.store(C + i[:, None] * stride_C_0 + j[None, :], out.to(C.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])

"""Prints the GPU models' relative errors and the alcop ops they ran (a report, not a test)."""
import sys
sys.path.insert(0, "tests/gpu"); sys.path.insert(0, "tests/ops")
import torch
from conftest import OpRecorder
import test_models_gpu as T
from alcop_triton import patch
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
for case in sorted(T.CASES):
    for dtype in (torch.float32, torch.bfloat16):
        model, x = T._model_and_input(case, dtype)
        want, wg = T._run(model, x)
        patch.enable()
        with OpRecorder() as rec:
            got, gg = T._run(model, x)
        patch.disable()
        alcop = sorted({o for o in rec.ops if o.startswith("alcop")})
        torchmm = sorted({o for o in rec.ops if o in ("aten.mm", "aten.bmm", "aten.addmm", "aten.convolution", "aten.convolution_backward")})
        print(case, dtype, "fwd %.2e" % T.rel(got, want), "grads max %.2e" % max(T.rel(a, b) for a, b in zip(gg, wg)), alcop, "torch:", torchmm)

#!/usr/bin/env bash
# One device session (run through the device tool from the repo root; results under $OUT):
# GPU tests, an unseen-shape tuning run (issue 6: <= 60 s wall, 50 trials), the tuned config used by a
# new process, and the conv2d grid with static channel/window specialisation.
set -u
export PYTHONUNBUFFERED=1 ALCOP_CACHE_DIR=/tmp/alc TRITON_CACHE_DIR=/tmp/tc ALCOP_DB=$OUT/tune.sqlite
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout ${GPU_TEST_S:-240} python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tail -25 | tee $OUT/gpu_tests.txt
SHAPE=${SHAPE:-1536x1280x2304}
start=$(date +%s.%N)
timeout 170 python3 -m alcop_triton.cli tune matmul $SHAPE --dtype float16 --layout nt --trials 50 2>&1 | tail -6
echo "tune wall: $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" | tee $OUT/tune_wall.txt
python3 - "$SHAPE" <<'PY' 2>&1 | tee $OUT/dispatch_check.txt
# A new process: the drop-in finds the tuned config in $ALCOP_DB without tuning.
import sys, time, torch, triton
import alcop_triton as at
from alcop_triton.autotune.dispatch import Dispatcher
from alcop_triton.kernels import matmul as mm
from alcop_triton.model.hardware import detect
m, n, k = map(int, sys.argv[1].split("x"))
w = at.Workload("matmul", (m, n, k), "float16", "nt")
t0 = time.perf_counter(); d = Dispatcher().decide(w, detect()); t1 = time.perf_counter()
print(f"dispatch: {d.config} from {d.source} in {1e3 * (t1 - t0):.2f} ms (first lookup)")
a = torch.randn(m, k, device="cuda", dtype=torch.float16); b = torch.randn(n, k, device="cuda", dtype=torch.float16).t()
out = mm.gemm(a, b)
err = ((out.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()).item()
ms = triton.testing.do_bench(lambda: mm.gemm(a, b, config=d.config), return_mode="median")
ms_t = triton.testing.do_bench(lambda: torch.matmul(a, b), return_mode="median")
print(f"rel err {err:.2e}; alcop {ms:.4f} ms vs torch {ms_t:.4f} ms")
PY
timeout ${CONV_S:-150} python3 benchmarks/collect_grid.py --ops conv2d --grid variants --out $OUT/h100_wgmma_conv2d_static.jsonl \
  --budget-s ${CONV_BUDGET_S:-120} --reps 8 2>&1 | tail -3

#!/usr/bin/env bash
# GPU validation in one run, from the repo root: the GPU tests, an unseen-shape tuning run (target: 50
# trials in <= 60 s wall), the tuned config used by a new process, and the conv2d grid with static
# channel/window specialisation. Results go to the output directory given as the first argument.
#   bash benchmarks/gpu_validate.sh OUT_DIR
# An offline machine that lacks pure-Python dependencies: put their wheels in WHEELS (default .whl/);
# they are installed into a private directory on PYTHONPATH, not into the machine's Python.
set -u
out=${1:?usage: bash benchmarks/gpu_validate.sh OUT_DIR}
mkdir -p "$out"
work=$(mktemp -d)  # fresh kernel caches and the private site directory
trap 'rm -rf "$work"' EXIT
export PYTHONUNBUFFERED=1 ALCOP_CACHE_DIR=$work/alcop TRITON_CACHE_DIR=$work/triton ALCOP_DB=$out/tune.sqlite
wheels=${WHEELS:-.whl}
if ls "$wheels"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$wheels"/*.whl \
    && export PYTHONPATH=$work/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout ${GPU_TEST_S:-240} python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tail -25 | tee "$out/gpu_tests.txt"
SHAPE=${SHAPE:-1536x1280x2304}
start=$(date +%s.%N)
timeout 170 python3 -m alcop_triton.cli tune matmul $SHAPE --dtype float16 --layout nt --trials 50 2>&1 | tail -6
echo "tune wall: $(python3 -c "print(round($(date +%s.%N) - $start, 1))") s" | tee "$out/tune_wall.txt"
python3 - "$SHAPE" <<'PY' 2>&1 | tee "$out/dispatch_check.txt"
# A new process: the drop-in finds the tuned config in ALCOP_DB without tuning.
import sys, time, torch, triton
import alcop_triton as at
from alcop_triton.autotune.dispatch import Dispatcher
from alcop_triton.model.hardware import detect
m, n, k = map(int, sys.argv[1].split("x"))
w = at.Workload("matmul", (m, n, k), "float16", "nt")
t0 = time.perf_counter(); d = Dispatcher().decide(w, detect()); t1 = time.perf_counter()
print(f"dispatch: {d.config} from {d.source} in {1e3 * (t1 - t0):.2f} ms (first lookup)")
a = torch.randn(m, k, device="cuda", dtype=torch.float16); b = torch.randn(n, k, device="cuda", dtype=torch.float16).t()
out = at.matmul(a, b)
err = ((out.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()).item()
ms = triton.testing.do_bench(lambda: at.matmul(a, b), return_mode="median")
ms_t = triton.testing.do_bench(lambda: torch.matmul(a, b), return_mode="median")
print(f"rel err {err:.2e}; alcop {ms:.4f} ms vs torch {ms_t:.4f} ms")
PY
timeout ${CONV_S:-150} python3 benchmarks/collect_grid.py --ops conv2d --grid variants --out "$out/h100_wgmma_conv2d_static.jsonl" \
  --budget-s ${CONV_BUDGET_S:-120} --reps 8 2>&1 | tail -3

#!/usr/bin/env bash
# Two `dask cuda worker` processes on one multi-GPU machine, standing in for two hosts: the first half of
# the GPUs is "host A", the second half "host B", each a `dask cuda worker` of its own (one worker process
# per GPU, pinned by dask-cuda) on one `dask scheduler`; then `alcop-tune tune --scheduler` tunes across
# them, as it would across two machines. Needs alcop_triton[distributed-gpu] (dask, distributed, dask-cuda).
#
#   benchmarks/dask_two_hosts.sh OUT_DIR [alcop-tune tune arguments]
#   (default arguments: matmul 4096x4096x4096 2048x8192x1024 8192x2048x4096 1024x1024x8192 --layout nt --trials 50)
#
# Writes OUT_DIR/tuning.sqlite (every record names its GPU: measured_on), OUT_DIR/tune.json (the workers'
# calibration, per-workload results), OUT_DIR/{scheduler,host_a,host_b,tune}.log and OUT_DIR/README.md.
# The scheduler and workers started here are stopped on exit.
set -euo pipefail
OUT=${1:?usage: benchmarks/dask_two_hosts.sh OUT_DIR [alcop-tune tune arguments]}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PORT=${ALCOP_DASK_PORT:-8786}
ADDR=tcp://127.0.0.1:$PORT
# A measurement worker starts its own measurement and compile processes: Dask's must not be daemonic.
export DASK_DISTRIBUTED__WORKER__DAEMON=False
NGPU=$(nvidia-smi -L | wc -l)
if [ "$NGPU" -lt 2 ]; then echo "need at least 2 GPUs, found $NGPU" >&2; exit 2; fi
HALF=$((NGPU / 2))
A_GPUS=$(seq -s, 0 $((HALF - 1)))
B_GPUS=$(seq -s, "$HALF" $((NGPU - 1)))

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

dask scheduler --port "$PORT" --no-dashboard >"$OUT/scheduler.log" 2>&1 &
PIDS+=($!)
CUDA_VISIBLE_DEVICES=$A_GPUS dask cuda worker "$ADDR" --nthreads 1 --no-dashboard --name host_a \
    --local-directory "$OUT/host_a" >"$OUT/host_a.log" 2>&1 &
PIDS+=($!)
CUDA_VISIBLE_DEVICES=$B_GPUS dask cuda worker "$ADDR" --nthreads 1 --no-dashboard --name host_b \
    --local-directory "$OUT/host_b" >"$OUT/host_b.log" 2>&1 &
PIDS+=($!)
# Every GPU's worker joined before the run starts (otherwise the pool is the workers there so far).
python - "$ADDR" "$NGPU" <<'PY'
import sys
from distributed import Client
with Client(sys.argv[1], timeout=120) as c:
    c.wait_for_workers(int(sys.argv[2]), timeout=300)
    print(f"{len(c.scheduler_info()['workers'])} dask workers joined", flush=True)
PY

if [ $# -eq 0 ]; then
    set -- matmul 4096x4096x4096 2048x8192x1024 8192x2048x4096 1024x1024x8192 --layout nt --trials 50
fi
START=$(date +%s)
alcop-tune --db "$OUT/tuning.sqlite" tune "$@" --scheduler "$ADDR" --json "$OUT/tune.json" 2>&1 | tee "$OUT/tune.log"
END=$(date +%s)
{
    echo "# alcop-tune tune --scheduler on two dask cuda workers standing in for two hosts"
    echo
    echo "Date: $(date -u +%Y-%m-%dT%H:%M:%SZ). Host: $(hostname). GPUs: $NGPU ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c | tr -s ' ' | paste -sd';'))."
    echo "host_a: CUDA_VISIBLE_DEVICES=$A_GPUS; host_b: CUDA_VISIBLE_DEVICES=$B_GPUS."
    echo "Versions: $(python -c 'import alcop_triton, triton, torch, dask, distributed, dask_cuda; print(f"alcop {alcop_triton.__version__}, triton {triton.__version__}, torch {torch.__version__}, dask {dask.__version__}, distributed {distributed.__version__}, dask-cuda {dask_cuda.__version__}")')."
    echo "Timer: wall clock of the alcop-tune command, $((END - START)) s (date +%s); trials/s as alcop-tune prints it (time.time)."
    echo
    echo "Command: alcop-tune --db $OUT/tuning.sqlite tune $* --scheduler $ADDR --json $OUT/tune.json"
    echo
    echo '```'
    cat "$OUT/tune.log"
    echo '```'
} >"$OUT/README.md"
echo "wrote $OUT/README.md"

#!/usr/bin/env bash
# The pipelining ablation in one run on one GPU, from the repo root: every pipelining variant over one
# grid of collect_grid.py (GRID, default "alcop_space") on the ALCOP dense + bmm shapes, then the report.
# Results (JSONL, log, report) go to the output directory given as the first argument.
#   MMA=wgmma    bash benchmarks/ablation_h100.sh OUT_DIR     # Hopper's default path
#   MMA=mma_sync bash benchmarks/ablation_h100.sh OUT_DIR     # DISABLE_MMA_V3=1: Ampere-style mma.sync
#   GRID=ablation MMA=wgmma bash benchmarks/ablation_h100.sh OUT_DIR   # the tuner's wider grid (BLOCK_K 128 on dense)
set -u -o pipefail
out=${1:?usage: bash benchmarks/ablation_h100.sh OUT_DIR}
mkdir -p "$out"
MMA=${MMA:-wgmma}
GRID=${GRID:-alcop_space}
cache=$(mktemp -d)  # fresh kernel caches: every config is compiled in this run
trap 'rm -rf "$cache"' EXIT
export PYTHONUNBUFFERED=1 ALCOP_CACHE_DIR=$cache/alcop TRITON_CACHE_DIR=$cache/triton PYTHONPATH=$PWD
[ "$MMA" = mma_sync ] && export DISABLE_MMA_V3=1
nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
python3 benchmarks/collect_grid.py --ops dense,bmm --grid "$GRID" --mma "$MMA" --reps "${REPS:-10}" \
  --budget-s "${BUDGET_S:-560}" --out "$out/h100_${MMA}_${GRID}.jsonl" 2>&1 | tee "$out/collect_${MMA}.log"
python3 benchmarks/report_pipeline.py "$out/h100_${MMA}_${GRID}.jsonl" --out "$out/pipeline_${MMA}" 2>&1 | tail -3

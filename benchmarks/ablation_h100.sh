#!/usr/bin/env bash
# Issue 3's ablation in one run on one GPU (through the device tool, from the repo root; results under $OUT):
# every pipelining variant over one grid of collect_grid.py (GRID, default "alcop_space") on the ALCOP
# dense + bmm shapes, then the report.
#   MMA=wgmma    bash benchmarks/ablation_h100.sh     # Hopper's default path
#   MMA=mma_sync bash benchmarks/ablation_h100.sh     # DISABLE_MMA_V3=1: Ampere-style mma.sync
#   GRID=ablation MMA=wgmma bash benchmarks/ablation_h100.sh      # the tuner's wider grid (BLOCK_K 128 on dense)
set -u -o pipefail
MMA=${MMA:-wgmma}
GRID=${GRID:-alcop_space}
export PYTHONUNBUFFERED=1 ALCOP_CACHE_DIR=/tmp/alc_$MMA TRITON_CACHE_DIR=/tmp/tc_$MMA PYTHONPATH=$PWD
[ "$MMA" = mma_sync ] && export DISABLE_MMA_V3=1
nvidia-smi -L; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
python3 benchmarks/collect_grid.py --ops dense,bmm --grid "$GRID" --mma "$MMA" --reps ${REPS:-10} \
  --budget-s ${BUDGET_S:-560} --out "$OUT/h100_${MMA}_${GRID}.jsonl" 2>&1 | tee "$OUT/collect_${MMA}.log"
python3 benchmarks/report_pipeline.py "$OUT/h100_${MMA}_${GRID}.jsonl" --out "$OUT/pipeline_${MMA}" 2>&1 | tail -3

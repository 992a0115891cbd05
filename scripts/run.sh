#!/usr/bin/env bash
# The README's two commands: `bash scripts/run.sh demo` (main job) and `bash scripts/run.sh test`.
# Installs what is missing first: a CPU torch only where no torch is installed (a GPU machine keeps its
# own torch, which pins its Triton), numpy < 2.4 only for Triton's CPU interpreter (2.4 breaks it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
what=${1:-demo}
shift || true

pipi() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }
"$PY" -c "import torch" 2>/dev/null || pipi torch==2.13.0
"$PY" -c "import triton" 2>/dev/null || pipi "triton==3.6.0"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  export TRITON_INTERPRET=1
  "$PY" -c "import numpy, sys; sys.exit(0 if tuple(map(int, numpy.__version__.split('.')[:2])) < (2, 4) else 1)" \
    || pipi "numpy<2.4"
fi
pipi -e ".[test]"

case "$what" in
  demo) exec "$PY" -m alcop_triton.demo "$@" ;;
  test) exec "$PY" -m pytest -q "$@" ;;
  *) echo "usage: scripts/run.sh demo|test [args]" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The README's two commands: `bash scripts/run.sh demo` (main job) and `bash scripts/run.sh test`.
# Installs what is missing first, with the Python in $PYTHON (default python3):
#   - torch only where none is installed, and then exactly torch==2.13.0; a GPU machine keeps its own
#     torch (which pins its Triton). The installed torch is then held by a pip constraint, so no
#     dependency can replace it with another build;
#   - without CUDA, numpy < 2.4 (numpy 2.4 breaks Triton 3.6's CPU interpreter);
#   - the package with its test extra (`pip install -e ".[test]"`), which brings Triton.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
what=${1:-demo}
shift || true
case "$what" in
  demo | test) ;;
  *) echo "usage: scripts/run.sh demo|test [args]" >&2; exit 2 ;;
esac

say() { echo "scripts/run.sh: $*" >&2; }
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  say "$PY is missing or older than Python 3.11; install Python >= 3.11 or set PYTHON=/path/to/python3"
  exit 1
fi
if ! "$PY" -m pip --version >/dev/null 2>&1; then
  say "$PY has no pip; make a virtualenv ('$PY -m venv .venv && . .venv/bin/activate') and run this again"
  exit 1
fi

constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT

# pipi WHY ARGS...: pip install ARGS under the constraints; on failure say what failed and what to do.
pipi() {
  local why=$1
  shift
  if ! "$PY" -m pip install -q --disable-pip-version-check -c "$constraints" "$@"; then
    say "installing $* ($why) failed; pip's error is above."
    say "check the network (or proxy) and free disk space, then run this again;"
    say "or install it yourself with '$PY -m pip install $*' and run this again."
    exit 1
  fi
}

# The installed version of a distribution, or nothing: read from its metadata, so no import (and no
# traceback) when it is absent.
installed() {
  "$PY" -c 'import sys, importlib.metadata as m
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass' "$1"
}

torch_version=$(installed torch)
if [ -z "$torch_version" ]; then
  say "no torch installed: installing torch 2.13.0"
  pipi "PyTorch" torch==2.13.0
  torch_version=$(installed torch)
fi
echo "torch==$torch_version" >"$constraints"

extra=()
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  export TRITON_INTERPRET=1  # no CUDA device: Triton runs the kernels in its CPU interpreter
  extra=("numpy<2.4")
fi
say "installing alcop_triton and its dependencies (torch $torch_version kept)"
pipi "alcop_triton with its test extra" -e ".[test]" ${extra[@]+"${extra[@]}"}

case "$what" in
  demo) exec "$PY" -m alcop_triton.demo "$@" ;;
  test) exec "$PY" -m pytest -q "$@" ;;
esac

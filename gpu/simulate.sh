#!/usr/bin/env bash
# Simulate a device run of the kit on this machine: the committed tree unpacked into a clean temporary folder (what
# a device call receives, without .git), a wheel bundle for THIS interpreter's Python version in its .gpu-kit/wheels,
# and the launcher run there with --device cpu (the dry run). PYTHON must be an interpreter with the GPU image's
# packages (torch, transformers, accelerate, ...) and without pydantic, as there.
#   usage: PYTHON=/path/to/python bash gpu/simulate.sh [extra flags for the kit]
set -euo pipefail
python=${PYTHON:?set PYTHON to an interpreter with the image packages and no pydantic}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if "$python" -c "import pydantic" 2>/dev/null; then
  echo "simulate: $python can import pydantic; the image cannot, so the simulation would prove nothing" >&2
  exit 2
fi
version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
work=$(mktemp -d "${TMPDIR:-/tmp}/relaxbench-sim.XXXXXX")
git -C "$root" archive HEAD | tar -x -C "$work"
make -s -C "$work" gpu-kit-bundle PYTHON="$python" GPU_KIT_PYTHON_VERSION="$version"
echo "simulate: tree and Python $version bundle in $work"
set +e
# one torch thread: the CPU dry run's models are tiny, and a shared CPU runs them far slower with more
(cd "$work" && env -u PYTHONPATH PYTHON="$python" RELAXBENCH_CACHE="$work/cache" OMP_NUM_THREADS=1 \
  bash gpu/run-kit.sh "$work/out" \
  --device cpu "$@")
status=$?
set -e
echo "simulate: launcher exit status $status; files:"
ls -la "$work/out"
exit $status

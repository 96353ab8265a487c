#!/usr/bin/env bash
# The GPU kit's launcher on a lent machine whose own Python already holds torch and transformers (docs/gpu-kit.md):
# installs the carried wheels (.gpu-kit/wheels: pydantic and its few needs, which that image lacks) into a
# temporary folder with --no-deps, puts that folder and this source tree on PYTHONPATH, and runs
# `relaxbench bench gpu --out OUT [FLAGS]`, keeping its output in OUT/log.txt. The exit status is the kit's:
# 0 all held targets PASS, 1 a MISS, 2 bad input or a broken bundle.
#   usage: bash gpu/run-kit.sh OUT [flags of relaxbench bench gpu, e.g. --device cpu, --steps ..., --plan]
#   PYTHON (default python3) and GPU_KIT_WHEELS (default .gpu-kit/wheels) override the interpreter and the wheels.
set -uo pipefail
if [ $# -lt 1 ] || [ -z "$1" ]; then
  echo "usage: bash gpu/run-kit.sh OUT [flags of relaxbench bench gpu]" >&2
  exit 2
fi
out=$1
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
wheels=${GPU_KIT_WHEELS:-$root/.gpu-kit/wheels}
if ! ls "$wheels"/*.whl >/dev/null 2>&1; then
  echo "run-kit: no wheels in $wheels (make gpu-kit-bundle makes them)" >&2
  exit 2
fi
mkdir -p "$out" || exit 2
site=$(mktemp -d "${TMPDIR:-/tmp}/relaxbench-site.XXXXXX") || exit 2
if ! "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$site" "$wheels"/*.whl; then
  echo "run-kit: installing $wheels/*.whl with $python failed" >&2
  exit 2
fi
export PYTHONPATH="$root:$site${PYTHONPATH:+:$PYTHONPATH}"
export RELAXBENCH_CACHE=${RELAXBENCH_CACHE:-${TMPDIR:-/tmp}/relaxbench-cache}
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{
  echo "run-kit: $("$python" --version 2>&1) at $(command -v "$python"); wheels from $wheels"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/run-kit: GPU /'
  fi
  "$python" -m relaxbench bench gpu --out "$out" "$@"
} 2>&1 | tee "$out/log.txt"
exit "${PIPESTATUS[0]}"

#!/usr/bin/env bash
# The GPU check (python -m firepool.bench gpu-check; docs/gpu.md): NVML discovery, a zero-VRAM
# standby beside an active job on one card, promotion -> first instruction, and a CUDA job
# under the memory-limit variables. JSON to --json PATH, else $OUT/gpu_check.json, else
# results/gpu_check.json; exit 1 if a step that ran failed. No NVIDIA card (or --fake): fake
# mode, where the steps that need a real card are reported skipped, never passed.
#
#   bash tools/gpu_check.sh [--fake|--real] [--json PATH] [--steps a,b] [...]
#   PYTHON=.venv/bin/python bash tools/gpu_check.sh --prepare-wheels [PYTHON_VERSION]
#
# A lent device machine has python3 (with PyTorch) but not all of firepool's dependencies, and
# reaches no registry, and firepool's virtual environment (PyTorch included) is far over the
# 64 MiB that may travel with the tree. So the wheels travel instead: `--prepare-wheels`,
# run here, downloads firepool's import-time dependencies for the device's Python (3.12 by
# default, the one the device's image has) into .gpu-wheels/, pinned to the versions installed
# here; the device command carries .gpu-wheels, and this script, finding a dependency missing,
# installs them offline into .gpu-site/ (pip --no-index --target) and puts that on PYTHONPATH.
# Jobs do not see .gpu-site: they run on the device's own packages (its PyTorch), or on the
# CUDA driver through ctypes when PyTorch is not there.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
wheels="$repo/.gpu-wheels"
site="$repo/.gpu-site"
# What the broker, its local pods and the check import (pyproject's dependencies less the
# database drivers and scipy, which this path never imports; tests/bench keeps the two lists
# in step).
requirements=(pydantic fastapi uvicorn httptools httpx httpcore sniffio sqlalchemy alembic
              typer rich prometheus-client numpy pyyaml)
imports="import pydantic, fastapi, uvicorn, httptools, httpx, httpcore, sniffio, sqlalchemy"
imports+=", alembic, typer, rich, prometheus_client, numpy, yaml"

pick_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"
  elif [[ -x "$repo/.venv/bin/python" ]]; then echo "$repo/.venv/bin/python"
  else echo python3
  fi
}
python="$(pick_python)"

if [[ "${1:-}" == "--prepare-wheels" ]]; then
  version="${2:-3.12}"
  constraints="$(mktemp)"
  trap 'rm -f "$constraints"' EXIT
  # Pin every distribution to what is installed (and tested) here.
  "$python" -m pip list --format=freeze --exclude-editable | grep -v '^firepool=' >"$constraints"
  rm -rf "$wheels"
  "$python" -m pip download -q --only-binary=:all: --python-version "$version" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -c "$constraints" -d "$wheels" "${requirements[@]}"
  echo "gpu_check: $(ls "$wheels" | wc -l) wheels for Python $version in $wheels," \
       "$(du -sh "$wheels" | cut -f1) (the tree that travels may hold 64 MiB)"
  exit 0
fi

pythonpath="$repo/src"
if ! PYTHONPATH="$pythonpath" "$python" -c "$imports" 2>/dev/null; then
  if compgen -G "$wheels/*.whl" >/dev/null; then
    chosen=("$wheels"/*.whl)
    # The interpreter's own numpy stays: its compiled packages (scipy, PyTorch) were built
    # against it, and .gpu-site comes first on the path.
    if "$python" -c "import numpy" 2>/dev/null; then
      chosen=($(printf '%s\n' "${chosen[@]}" | grep -v '/numpy-'))
    fi
    stamp="$(printf '%s\n' "${chosen[@]##*/}" | cksum)"
    if [[ ! -f "$site/.complete" || "$(cat "$site/.complete")" != "$stamp" ]]; then
      rm -rf "$site"
      echo "gpu_check: installing ${#chosen[@]} carried wheels into $site" >&2
      "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$site" "${chosen[@]}"
      echo "$stamp" >"$site/.complete"
    fi
    pythonpath="$pythonpath:$site"
  else
    echo "gpu_check: $python lacks firepool's dependencies and there is no $wheels;" \
         "build it here with 'bash tools/gpu_check.sh --prepare-wheels' and carry" \
         "[\".gpu-wheels\"] (the JSON will name the missing import)" >&2
  fi
fi
export PYTHONPATH="$pythonpath${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec "$python" -m firepool.bench gpu-check "$@"

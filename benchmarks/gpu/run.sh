#!/usr/bin/env bash
# padless on a GPU, in one go: build padless here, then run benchmarks/gpu/gpu_bench.py (six
# guarded sections, about 7 minutes on an H100), which prints one table and writes one JSON
# ($OUT/gpu_bench.json when OUT is set, else benchmarks/results/gpu_bench.json).
#
#   bash benchmarks/gpu/run.sh            # on a CUDA machine: build, then measure
#   bash benchmarks/gpu/run.sh --dry-run  # CPU, tiny model, no build (uses ${PYTHON:-python})
#
# Other arguments go to gpu_bench.py (e.g. --only train packed).
set -uo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
export PYTHONUNBUFFERED=1

dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done

if [ "$dry" = 0 ]; then
    echo "building padless: $PY -m pip install --no-build-isolation --no-deps -e ." >&2
    t0=$SECONDS
    log="${OUT:-/tmp}/padless_build.log"
    if ! "$PY" -m pip install --no-build-isolation --no-deps -e . >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "run.sh: building padless failed (pip install --no-build-isolation --no-deps -e ." \
             "needs scikit-build-core, nanobind, cmake, ninja and a C++ compiler; log: $log)" >&2
        exit 2
    fi
    if ! "$PY" -c "import padless._core" 2>>"$log"; then
        echo "run.sh: padless built but padless._core does not import (log: $log)" >&2
        exit 2
    fi
    echo "built in $((SECONDS - t0)) s" >&2
fi
exec "$PY" benchmarks/gpu/gpu_bench.py "$@"

#!/usr/bin/env bash
# The GPU checks in one call, for a session that is lent a device machine (one H100/H200,
# Python 3.12, torch 2.11, Triton 3.6; no network there). About 8 minutes with 16 cores.
#
# Before the call, on the development machine, from the repository root (the machine has every
# package framejit needs except `bytecode`, which travels as a wheel):
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 -d .whl bytecode==0.19.1
#
# Then two device runs on the same warm machine, carry [".whl"], timeout_s 590 each:
#   bash tools/gpu_check.sh tests     the whole suite on 3.12, then the `cuda`-marked tests
#   bash tools/gpu_check.sh bench     kernels.py, models.py, cudagraphs.py
# Each step writes its log under $OUT (at most 8 files come back): build.log, suite.log,
# cuda.log, kernels.log, models.log, cudagraphs.log.
set -u
WHAT=${1:-tests}
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/build.log" 2>&1
python3 -c "import sys, torch, triton; print(sys.version, torch.__version__, triton.__version__)" \
    >> "$OUT/build.log" 2>&1
# the C extensions (frame hook, C++ guards) against this machine's Python and torch
timeout 120 python3 setup.py -q build_ext --inplace >> "$OUT/build.log" 2>&1 \
    || echo "build_ext failed (see build.log)"

step() {  # step NAME SECONDS COMMAND...: run, keep the log, print its last lines
    local name=$1 seconds=$2
    shift 2
    timeout "$seconds" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name (exit $?)"
    tail -n 12 "$OUT/$name.log"
}

if [ "$WHAT" = tests ]; then
    # the whole suite on Python 3.12 (the Triton tests run in the CPU interpreter here too)
    step suite 330 python3 -m pytest -q -p no:cacheprovider tests
    # the CUDA-marked tests: real Triton kernels on the GPU, real CUDA graph capture
    step cuda 150 python3 -m pytest -q -p no:cacheprovider -m cuda tests
else
    step kernels 120 python3 tools/bench/kernels.py
    step models 240 python3 tools/bench/models.py
    step cudagraphs 150 python3 tools/bench/cudagraphs.py
fi

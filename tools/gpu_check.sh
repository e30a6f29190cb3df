#!/usr/bin/env bash
# The GPU checks, for a session that is lent a device machine (one H100/H200, 16 cores,
# Python 3.12, torch 2.11, Triton 3.6, pytest-xdist and pytest-timeout; no network there).
#
# Before the call, on the development machine, from the repository root (the machine has every
# package framejit needs except `bytecode`, and the tests' `expecttest` (torch's OpInfo
# database, for layout_probe.py and the op sweep), which travel as wheels):
#
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux_2_28_x86_64 -d .whl bytecode==0.19.1 \
#       expecttest==0.3.0
#
# Then one device run, carry [".whl"], timeout_s 590:
#   bash tools/gpu_check.sh all      tests, then benchmarks (about 9 minutes)
# or two on the same warm machine (the second within its idle time):
#   bash tools/gpu_check.sh tests    the suite on 3.12 (CPU paths, 7 workers) beside the GPU
#                                    battery (FRAMEJIT_TEST_DEVICE=cuda, 8 workers)
#   bash tools/gpu_check.sh bench    cudagraphs.py, models.py --kernels --host-profile,
#                                    kernels.py (WIDE=1: again with the wide autotune)
#   bash tools/gpu_check.sh rerun    the GPU battery, cudagraphs.py, models.py --kernels
#   bash tools/gpu_check.sh recheck  models (GPT-2 b=1, ResNet), cudagraphs.py, the graph-tree
#                                    tests on CUDA, GPT-2 b=8: a short second run
#   bash tools/gpu_check.sh models   models.py, GPT-2 b=1 and ResNet only, with --kernels
#   bash tools/gpu_check.sh verify   the GPU battery, kernels.py --no-compile, models.py
#                                    --kernels, optimizer.py (ADAM=1: Adam's step too):
#                                    sessions 22-25's GPU-unmeasured changes
# The GPU battery is tests/backend/triton and tests/cudagraphs with real Triton kernels and real
# CUDA graphs (see their conftest.py), the `cuda`-marked tests included.
# Each step writes its log under $OUT (at most 8 files come back, so `all` writes exactly 8):
# suite.log, suite_failures.log, cuda.log, cuda_failures.log, layouts.log, kernels.log (the
# WIDE=1 run appended), cudagraphs.log, models.log; the machine and any build failure go to
# stdout. Seconds per step: SUITE_S, GPU_S, LAYOUTS_S, and the bench steps' below.
set -u
WHAT=${1:-all}
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ ! -d /tmp/site/bytecode ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
# the machine, on stdout (the call's output), not in a file: at most 8 files come back
date
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import sys, torch, triton, numpy; print(sys.version, torch.__version__, \
triton.__version__, numpy.__version__, torch.cuda.get_device_name())"
nproc
# the C extensions (frame hook, C++ guards) against this machine's Python and torch, unless
# the ones there load (a warm machine keeps them; cp312 builds made against torch 2.11 elsewhere
# can be carried: `carry` their paths)
BUILD_LOG=/tmp/gpu_check_build.log
if ! python3 -c "import framejit.frontend._eval_frame, framejit.guards._tensor_check" \
    >> "$BUILD_LOG" 2>&1
then
    timeout 150 python3 setup.py -q build_ext --inplace >> "$BUILD_LOG" 2>&1 \
        || { echo "build_ext failed:"; tail -n 20 "$BUILD_LOG"; }
fi

step() {  # step NAME SECONDS COMMAND...: run, keep the log, print its last lines
    local name=$1 seconds=$2
    shift 2
    timeout -s INT -k 15 "$seconds" "$@" > "$OUT/$name.log" 2>&1
    echo "== $name (exit $?)"
    tail -n 14 "$OUT/$name.log"
}

if [ "$WHAT" = tests ] || [ "$WHAT" = all ]; then
    # the whole suite (the Triton tests in the CPU interpreter) beside the GPU battery; SIGINT at
    # the limit makes pytest print what failed so far
    # (the `cuda`-marked tests run in the battery, outside the interpreter); each failure's
    # traceback is written to *_failures.log as it happens
    FRAMEJIT_TEST_FAILURES="$OUT/suite_failures.log" step suite "${SUITE_S:-240}" \
        python3 -m pytest -q -p no:cacheprovider -n 7 --timeout 150 -rfE --tb=short \
        -m "not cuda" tests &
    # the ops whose fake layout is not CUDA eager's (frontend/layouts.py covers the CPU's)
    step layouts "${LAYOUTS_S:-120}" python3 tools/layout_probe.py --device cuda &
    FRAMEJIT_TEST_DEVICE=cuda FRAMEJIT_TEST_FAILURES="$OUT/cuda_failures.log" step cuda \
        "${GPU_S:-240}" python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 150 -rfE \
        --tb=short tests/backend/triton tests/cudagraphs
    wait
fi
if [ "$WHAT" = models ]; then
    # GPT-2 b=1 and ResNet-18: framejit (direct launches, then through Triton only) vs eager vs
    # torch.compile; the host-bound cases the direct launches are for
    # (--kernels: device time per call next to the wall time, and the costliest kernels)
    step models "${MODELS_S:-170}" python3 tools/bench/models.py --repeats 10 --gpt2-batches 1 \
        --kernels --host-profile
fi
if [ "$WHAT" = recheck ]; then
    # a short second look after fixes (about 4 minutes): the end-to-end models, the graph
    # trees' bench, then the graph-tree tests on real CUDA graphs (one process: a device-side
    # assert elsewhere cannot poison them)
    step models "${MODELS_S:-125}" python3 tools/bench/models.py --repeats 10 --gpt2-batches 1
    step cudagraphs "${CUDAGRAPHS_S:-55}" python3 tools/bench/cudagraphs.py --repeats 10
    FRAMEJIT_TEST_DEVICE=cuda FRAMEJIT_TEST_FAILURES="$OUT/cuda_failures.log" step cuda \
        "${GPU_S:-45}" python3 -m pytest -q -p no:cacheprovider --timeout 40 -rfE --tb=short \
        tests/cudagraphs tests/backend/triton/test_ops_random.py
    step models_b8 "${MODELS_B8_S:-45}" python3 tools/bench/models.py --repeats 10 \
        --models gpt2 --gpt2-batches 8
fi
if [ "$WHAT" = rerun ]; then
    # a second machine after fixes (about 5 minutes): the GPU battery alone (8 workers), then
    # the graph trees' bench and the end-to-end models
    FRAMEJIT_TEST_DEVICE=cuda FRAMEJIT_TEST_FAILURES="$OUT/cuda_failures.log" step cuda \
        "${GPU_S:-200}" python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 150 -rfE \
        --tb=short tests/backend/triton tests/cudagraphs
    step cudagraphs "${CUDAGRAPHS_S:-60}" python3 tools/bench/cudagraphs.py --repeats 10
    step models "${MODELS_S:-130}" python3 tools/bench/models.py --repeats 10 --kernels
fi
if [ "$WHAT" = verify ]; then
    # what session 22 built without a GPU (about 7 minutes): the GPU battery (fj_exp's ulp
    # scan on the device, CPU scalars beside CUDA data, fp fusion passed to launches), the
    # kernel fractions without torch.compile's (float32 softmax with fj_exp), then the models
    # with their costliest kernels (GPT-2 b=8's padded LM head, the vector-loaded head merge)
    FRAMEJIT_TEST_DEVICE=cuda FRAMEJIT_TEST_FAILURES="$OUT/cuda_failures.log" step cuda \
        "${GPU_S:-200}" python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 150 -rfE \
        --tb=short tests/backend/triton tests/cudagraphs
    step kernels "${KERNELS_S:-70}" python3 tools/bench/kernels.py --repeats 10 --no-compile
    step models "${MODELS_S:-150}" python3 tools/bench/models.py --repeats 10 --kernels
    # (session 24: the captured SGD step against eager's and torch.compile's, to decide
    # whether config.capture_optimizer_steps should be on for the Triton backend)
    step optimizer "${OPTIMIZER_S:-45}" python3 tools/bench/optimizer.py --repeats 20
    if [ -n "${ADAM:-}" ]; then  # (session 25: the captured Adam step, the same question)
        step optimizer_adam "${OPTIMIZER_S:-45}" python3 tools/bench/optimizer.py --repeats 20 \
            --optimizer adam
    fi
fi
if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
    # (the graph trees and the end-to-end models first: a call cut at the session's device time
    # loses the kernel fractions, the least new of the three)
    step cudagraphs "${CUDAGRAPHS_S:-90}" python3 tools/bench/cudagraphs.py --repeats 10
    # (ResNet is compiled twice: with and without channels-last convolutions; each case prints
    # host vs device ms per call, and where framejit's host time goes)
    step models "${MODELS_S:-200}" python3 tools/bench/models.py --repeats 10 --kernels \
        --host-profile
    # (torch.compile's fractions too: its compiles take most of the step)
    step kernels "${KERNELS_S:-150}" python3 tools/bench/kernels.py --repeats 10
    if [ -n "${WIDE:-}" ]; then  # the wide autotune: configs or code, for the reductions
        FRAMEJIT_MAX_AUTOTUNE=1 step kernels_wide "${KERNELS_WIDE_S:-80}" python3 \
            tools/bench/kernels.py --repeats 10 --no-compile
        { echo "== FRAMEJIT_MAX_AUTOTUNE=1"; cat "$OUT/kernels_wide.log"; } >> "$OUT/kernels.log"
        rm -f "$OUT/kernels_wide.log"
    fi
fi

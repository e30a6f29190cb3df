"""The same tree logic on real CUDA graphs (`torch.cuda.CUDAGraph`, one pool per device).
Skipped without a CUDA device."""

from __future__ import annotations

import copy
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from framejit.cudagraphs import OverwrittenOutputError

import framejit
from framejit import cudagraphs

pytestmark = pytest.mark.cuda


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 32) for _ in range(4)]
    return torch.nn.Sequential(*layers).cuda()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_cuda_inference_replays(backend: str) -> None:
    model = mlp()
    fast = framejit.jit(model, backend=backend, mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(2, 32, device="cuda")
            torch.testing.assert_close(fast(x).clone(), model(x))
    manager = cudagraphs.managers()[torch.device("cuda", torch.cuda.current_device())]
    assert manager.nodes == 1
    assert (manager.warm_ups, manager.replays, manager.eager_runs) == (1, 3, 0)
    assert isinstance(manager.recorder, cudagraphs.CUDARecorder)


def test_cuda_overwritten_output_raises() -> None:
    fast = framejit.jit(mlp(), mode="reduce-overhead")
    with torch.no_grad():
        fast(torch.randn(2, 32, device="cuda"))
        first = fast(torch.randn(2, 32, device="cuda"))
        fast(torch.randn(2, 32, device="cuda"))
    with pytest.raises(OverwrittenOutputError, match="clone"):
        first.sum()


def test_cuda_training_matches_eager() -> None:
    model = mlp()
    reference = copy.deepcopy(model)
    fast = framejit.jit(model, mode="reduce-overhead", backend="aot_eager")
    for _ in range(4):
        x = torch.randn(8, 32, device="cuda")
        fast(x).square().mean().backward()
        reference(x).square().mean().backward()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None
    manager = cudagraphs.managers()[torch.device("cuda", torch.cuda.current_device())]
    assert manager.nodes == 2
    # the backward is captured on autograd's device thread; both replay from the third step
    assert (manager.replays, manager.eager_runs, manager.refusals) == (4, 0, [])


def test_cuda_reset_frees_the_pool() -> None:
    fast = framejit.jit(mlp(), mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):
            fast(torch.randn(2, 32, device="cuda"))
    framejit.reset()
    assert not cudagraphs.managers()


FAILED_CAPTURE = """
import torch, pytest
from framejit import cudagraphs
from framejit.cudagraphs.recorder import CaptureError
device = torch.device("cuda", torch.cuda.current_device())
recorder = cudagraphs.CUDARecorder(device)
x = torch.ones(4, device="cuda")
with pytest.raises(CaptureError, match="capture failed"):
    recorder.record(lambda x: (x.nonzero(),), [x])  # syncs: invalidates the capture
assert torch.cuda.current_stream() == torch.cuda.default_stream()
torch.manual_seed(0)
first = torch.rand(1000, device="cuda")
assert float(first.min()) >= 0 and float(first.max()) < 1
graph, (y,) = recorder.record(lambda x: (x + torch.rand_like(x),), [x])
before = y.clone()
recorder.replay(graph)
assert not torch.equal(before, y) and bool(((y >= 1) & (y < 2)).all())
recorder.close()
print("clean")
"""


@pytest.mark.xfail(
    reason="torch 2.11 on an H100 (2026-11-27): after the clean-up the pool was still being "
    "recorded to and the CUDA generator still in capture mode",
    strict=False,
)
def test_a_failed_capture_leaves_random_ops_and_later_captures_working() -> None:
    """A capture an op invalidates makes torch's `capture_end` raise before the CUDA generator
    leaves capture mode: every later random op then fails with "Offset increment outside graph
    capture" (the first GPU run). The recorder tries to clean up after it (the warm-up's
    SyncWatch keeps the tree from trying such a capture at all). In a process of its own: when
    the clean-up fails, nothing after it in the process can use CUDA's random numbers."""
    root = pathlib.Path(__file__).resolve().parents[2]
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-c", FAILED_CAPTURE],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=path),
    )
    assert run.returncode == 0 and "clean" in run.stdout, run.stderr[-3000:]


def test_recording_holds_no_cublas_workspace() -> None:
    """A capture on the recorder's stream makes cuBLAS allocate a workspace for it (32 MiB on
    an H100): the recorder lets it go after the capture, as torch's trees do."""
    model = mlp()
    fast = framejit.jit(model, mode="reduce-overhead")
    x = torch.randn(2, 32, device="cuda")
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with torch.no_grad():
        for _ in range(5):
            fast(x)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    assert grown < 2**20, f"{grown} bytes more allocated after warm-up, recording and replays"

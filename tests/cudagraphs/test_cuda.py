"""The same tree logic on real CUDA graphs (`torch.cuda.CUDAGraph`, one pool per device).
Skipped without a CUDA device."""

from __future__ import annotations

import copy

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


def test_cuda_reset_frees_the_pool() -> None:
    fast = framejit.jit(mlp(), mode="reduce-overhead")
    with torch.no_grad():
        for _ in range(3):
            fast(torch.randn(2, 32, device="cuda"))
    framejit.reset()
    assert not cudagraphs.managers()

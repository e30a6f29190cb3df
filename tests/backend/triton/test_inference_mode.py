"""`torch.inference_mode` and the Triton backend: a model called under inference mode, and a
function that is one inference-mode block, run generated kernels and give eager's inference
tensors (the AOT stage works on normal aliases of inference tensors, backend/aot/compile.py).
The same cases through aot_eager are in tests/test_context_managers.py."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from framejit.backend.triton import cache

import framejit

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numpy") is None, reason="Triton's interpreter needs numpy"
)


def same(got: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(got, expected)
    assert got.is_inference() == expected.is_inference()
    assert got.requires_grad == expected.requires_grad


def test_a_model_called_under_inference_mode_runs_kernels() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    jitted = framejit.jit(model, backend="triton")
    x = torch.randn(3, 4)
    with torch.inference_mode():
        made_inside = x.clone()
        for inp in (x, made_inside):  # a normal tensor, then an inference tensor: two graphs
            before = sum(cache.STATS.values())
            same(jitted(inp), model(inp))
            assert sum(cache.STATS.values()) > before  # kernels were built or loaded
    out = jitted(x)  # with grad after: another graph, with a backward
    same(out, model(x))
    out.sum().backward()
    assert model[0].weight.grad is not None


def test_a_function_that_is_one_inference_block_runs_kernels() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return torch.nn.functional.gelu(x @ w).sum(0)

    x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
    before = sum(cache.STATS.values())
    jitted = framejit.jit(fn, backend="triton")
    for _ in range(2):
        same(jitted(x, w), fn(x, w))
    assert sum(cache.STATS.values()) > before

"""torch.func transforms through the Triton backend: the AOT stage traces the transform into
plain aten ops, which lower to generated kernels (tests/test_functorch.py has the rest)."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from framejit.backend.triton import cache
from torch.func import grad, vmap
from triton_helpers import require_interpreter

import framejit

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numpy") is None, reason="Triton's interpreter needs numpy"
)


def per_row(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return vmap(lambda r: torch.nn.functional.gelu(r * w).sum())(x)


def grad_of_a_loss(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return grad(lambda v: (x * v).tanh().pow(2).sum())(w)


@pytest.mark.parametrize("fn", [per_row, grad_of_a_loss], ids=lambda f: f.__name__)
def test_transforms_run_generated_kernels(fn) -> None:
    require_interpreter()  # the gradient's kernels may loop
    before = sum(cache.STATS.values())
    jitted = framejit.jit(fn, backend="triton")
    for _ in range(2):
        x, w = torch.randn(6, 5), torch.randn(5)
        torch.testing.assert_close(jitted(x, w), fn(x, w))
    assert sum(cache.STATS.values()) > before

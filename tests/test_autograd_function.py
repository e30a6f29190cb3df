"""Custom `torch.autograd.Function`s inside compiled code: `MyFn.apply(...)` is one graph op,
and the compiled backward is the user's `backward` (not autograd's derivative of the forward).
Outputs and gradients are compared with eager; Functions with effects besides their tensors
break the graph and run as in eager."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch.autograd.function import once_differentiable

import framejit

BACKENDS = ["eager", "aot_eager", "triton"]


class StraightThroughRound(torch.autograd.Function):
    """round() forward, identity-within-range backward: autograd's derivative would be 0."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.scale = scale
        return torch.round(x * scale) / scale

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() < ctx.scale).to(grad.dtype), None


def _clamp_grad(g: torch.Tensor) -> torch.Tensor:
    return g.clamp(-0.5, 0.5)


class ScaleAndArgmax(torch.autograd.Function):
    """Two outputs, one not differentiable; a helper function in the backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> tuple:
        y = x * w
        idx = y.argmax(dim=-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, w)
        return y, idx

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, gy: torch.Tensor, gidx: Any) -> tuple:
        x, w = ctx.saved_tensors
        gx = _clamp_grad(gy * w) if ctx.needs_input_grad[0] else None
        gw = (gy * x).sum(0) if ctx.needs_input_grad[1] else None
        return gx, gw


class GradReverse(torch.autograd.Function):
    """New style: forward without ctx, setup_context."""

    @staticmethod
    def forward(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return x.view_as(x) * 1.0

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: torch.Tensor) -> None:
        ctx.alpha = inputs[1]

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        return -ctx.alpha * g, None


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)
        self.w = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = StraightThroughRound.apply(torch.tanh(self.fc1(x)), 4.0)
        h, idx = ScaleAndArgmax.apply(h, self.w)
        h = GradReverse.apply(h, 0.3)
        return self.fc2(h).sum(-1) + idx.float()


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_functions_use_their_own_backward(backend: str) -> None:
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    explained = framejit.explain(model, torch.randn(4, 6))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    fast = framejit.jit(model, backend=backend, fullgraph=True)
    for _ in range(2):
        x = torch.randn(4, 6, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        out, expected = fast(x), reference(x2)
        torch.testing.assert_close(out, expected)
        weights = torch.arange(4.0)
        (out * weights).sum().backward()
        (expected * weights).sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
            p.grad = q.grad = None
    assert x.grad.abs().sum() > 0  # round's own derivative would give zeros


def test_custom_function_under_no_grad() -> None:
    fast = framejit.jit(lambda x: StraightThroughRound.apply(x, 2.0) + 1, fullgraph=True)
    with torch.no_grad():
        x = torch.randn(5)
        torch.testing.assert_close(fast(x), torch.round(x * 2) / 2 + 1)


calls = []


class Counting(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        calls.append(1)  # an effect besides the tensors
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


class InPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


class Printing(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        print("forward")
        return x + 1

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


@pytest.mark.parametrize(
    ("cls", "reason"),
    [(Counting, "uses the global `calls`"), (InPlace, "in place"), (Printing, "uses `print`")],
)
def test_functions_with_effects_run_as_python(cls: Any, reason: str, capsys: Any) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return cls.apply(x.clone()) * 3

    explained = framejit.explain(fn, torch.randn(3))
    assert explained.graph_break_count == 1
    assert reason in str(explained.break_reasons[0])
    calls.clear()
    fast = framejit.jit(fn, backend="aot_eager")
    for _ in range(3):
        x = torch.randn(3, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        out, expected = fast(x), fn(x2)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)
    if cls is Counting:
        assert len(calls) == 6  # every call ran the forward: 3 compiled, 3 eager
    if cls is Printing:
        assert capsys.readouterr().out.count("forward") >= 3


LAYER = torch.nn.Linear(3, 3)


class UsesAGlobalLayer(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return LAYER(x) * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


def test_a_function_that_reads_a_global_module_runs_as_python() -> None:
    """The AOT stage would bake the layer's weights into the graph: a later update of them
    must be seen, so the call is a break."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return UsesAGlobalLayer.apply(x) + 1

    explained = framejit.explain(fn, torch.randn(2, 3))
    assert "reads the global `LAYER`, a Linear" in str(explained.break_reasons[0])
    fast = framejit.jit(fn, backend="aot_eager")
    x = torch.randn(2, 3)
    torch.testing.assert_close(fast(x), fn(x))
    with torch.no_grad():
        LAYER.weight.add_(1.0)
    torch.testing.assert_close(fast(x), fn(x))

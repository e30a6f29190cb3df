"""Training graphs that return `y` and an output computed from it (backend/aot/split.py).

In eager, `z = f(y)` has `y` in its autograd history: a hook or `retain_grad()` put on `y`
after the call sees `z`'s gradient, and `torch.autograd.grad(z, y)` works. The AOT stage cuts
such a graph after `y` so that this holds for compiled graphs too. Every test compares with
eager on the same inputs, through `aot_eager` and through `triton` (Triton's interpreter on the
CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from framejit.backend.aot import aot_compile
from framejit.backend.registry import eager
from torch import nn
from triton_helpers import require_interpreter

import framejit

BACKENDS = ["aot_eager", "triton"]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    framejit.reset()


def _backend(name: str) -> str:
    if name == "triton":
        require_interpreter()
    return name


class CAM(nn.Module):
    """GradCAM's shape: the features and the logits computed from them."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.features(x)
        return f, self.head(f)


def _after_the_call(model: nn.Module, x: torch.Tensor, hook: Callable[..., Any]) -> list[Any]:
    """retain_grad and a hook put on the features after the call, then a backward from one
    class's logits: what the features and the parameters got."""
    features, logits = model(x)
    features.retain_grad()
    seen: list[torch.Tensor] = []
    features.register_hook(lambda g: (seen.append(g.clone()), hook(g))[1])
    logits[:, 1].sum().backward()
    return [features.grad, *seen, *(p.grad for p in model.parameters())]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("hook", ["observe", "zero"])
def test_a_hook_put_on_an_output_after_the_call_sees_the_outputs_computed_from_it(
    backend: str, hook: str
) -> None:
    torch.manual_seed(0)
    model, x = CAM(), torch.randn(5, 4)
    change = (lambda g: None) if hook == "observe" else torch.zeros_like
    want = _after_the_call(model, x, change)
    model.zero_grad(set_to_none=True)
    got = _after_the_call(framejit.jit(model, backend=_backend(backend)), x, change)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g is not None
        torch.testing.assert_close(g, w)
    if hook == "zero":  # the hook's zeros reached the features' layer, as in eager
        assert not model.features[0].weight.grad.any()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dynamic", [False, True])
def test_autograd_grad_of_an_output_by_an_output_it_was_computed_from(
    backend: str, dynamic: bool
) -> None:
    def f(w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x @ w
        return y, (y.sin() * y).sum()

    jitted = framejit.jit(f, backend=_backend(backend), dynamic=dynamic)
    for n in (3, 5):
        w, x = torch.randn(4, 3, requires_grad=True), torch.randn(n, 4)
        y, z = jitted(w, x)
        (got,) = torch.autograd.grad(z, y)
        y_eager, z_eager = f(w, x)
        (want,) = torch.autograd.grad(z_eager, y_eager)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(z, z_eager)


@pytest.mark.parametrize("backend", BACKENDS)
def test_maml_inner_step_differentiated_by_its_adapted_weights(backend: str) -> None:
    # w2 = w - lr * g is returned, and the query loss computed from it: autograd.grad of the
    # loss by w2 (then by w, through w2) as in eager
    def inner(w: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor, xq: torch.Tensor):
        support = F.mse_loss(xs @ w, ys)
        (g,) = torch.autograd.grad(support, w, create_graph=True)
        w2 = w - 0.1 * g
        return w2, F.mse_loss(xq @ w2, ys)

    torch.manual_seed(0)
    xs, ys, xq = torch.randn(6, 3), torch.randn(6, 2), torch.randn(6, 3)
    results = []
    for fn in (inner, framejit.jit(inner, backend=_backend(backend))):
        w = torch.randn(3, 2, generator=torch.Generator().manual_seed(1), requires_grad=True)
        w2, query = fn(w, xs, ys, xq)
        (by_w2,) = torch.autograd.grad(query, w2, retain_graph=True)
        (by_w,) = torch.autograd.grad(query, w)
        results.append((query, by_w2, by_w))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want)


def _aten_graphs(fn: Callable[..., Any], *inputs: Any) -> tuple[int, Any]:
    """How many aten graphs the stage hands its inner compiler for `fn`'s graph, and the
    outputs of a call."""
    count = 0

    def inner(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        nonlocal count
        count += gm.meta.get("aot_kind", "inference") != "backward"
        return eager(gm, example_inputs)

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        return aot_compile(gm, example_inputs, inner)

    out = framejit.jit(fn, backend=backend)(*inputs)
    return count, out


def _chained(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = (x @ w).relu()
    return y, y.sum(1).exp()


def test_only_graphs_that_will_be_differentiated_are_cut() -> None:
    x, w = torch.randn(4, 3), torch.randn(3, 3, requires_grad=True)
    assert _aten_graphs(_chained, x, w)[0] == 2  # cut after y
    with torch.no_grad():
        assert _aten_graphs(_chained, x, w)[0] == 1
    framejit.reset()
    assert _aten_graphs(_chained, x, w.detach())[0] == 1


def test_a_graph_that_writes_in_place_is_not_cut() -> None:
    def f(x: torch.Tensor, w: torch.Tensor, buf: torch.Tensor) -> Any:
        y = x @ w
        buf.add_(1)
        return y, y * buf

    x, w, buf = torch.randn(2, 3), torch.randn(3, 3, requires_grad=True), torch.zeros(3)
    want_buf = buf.clone()
    want = f(x, w, want_buf)
    count, got = _aten_graphs(f, x, w, buf)
    assert count == 1
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(buf, want_buf)


def test_random_numbers_are_drawn_in_eagers_order_across_the_cut() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.dropout(x @ w, 0.5)
        return y, F.dropout(y, 0.5) * 2

    x, w = torch.randn(8, 8), torch.randn(8, 8, requires_grad=True)
    torch.manual_seed(3)
    want = f(x, w)
    want_state = torch.get_rng_state()
    torch.manual_seed(3)
    count, got = _aten_graphs(f, x, w)
    assert count == 2
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    assert torch.equal(torch.get_rng_state(), want_state)


def test_outputs_read_together_make_one_cut() -> None:
    # a layer returning its key and value caches with the attention computed from both: one
    # cut before the attention, not one per cache; a hook on each cache sees eager's gradient
    def layer(x: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor):
        k, v = x @ wk, x @ wv
        out = torch.softmax(x @ k.t(), -1) @ v
        return k, v, out

    x = torch.randn(4, 4)
    wk, wv = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    count, got = _aten_graphs(layer, x, wk, wv)
    assert count == 2
    want = layer(x, wk, wv)
    for outs in (got, want):
        for t in outs[:2]:
            t.retain_grad()
        outs[2].sum().backward()
    for g, w in zip(got[:2], want[:2]):
        torch.testing.assert_close(g.grad, w.grad)


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_cut_between_a_tuple_and_its_items_or_after_a_size(dynamic: bool) -> None:
    # the cut lands after `chunk` (its items are taken before it) and after `y.shape[0]`
    # (a size crossing the cut, symbolic under dynamic=True)
    def f(x: torch.Tensor, w: torch.Tensor):
        y = x @ w
        a, b = y.chunk(2, dim=1)
        n = y.shape[0]
        return y, a * b.sum() / n, y.reshape(n, -1).mean()

    count = 0

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        def inner(aten: torch.fx.GraphModule, inputs: list[Any]) -> Any:
            nonlocal count
            count += aten.meta.get("aot_kind") == "forward"
            return eager(aten, inputs)

        return aot_compile(gm, example_inputs, inner)

    jitted = framejit.jit(f, backend=backend, dynamic=dynamic)
    for rows in (4, 6):
        x, w = torch.randn(rows, 3), torch.randn(3, 4, requires_grad=True)
        got, want = jitted(x, w), f(x, w)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
        (by_y,) = torch.autograd.grad(got[1].sum() + got[2], got[0])
        (want_by_y,) = torch.autograd.grad(want[1].sum() + want[2], want[0])
        torch.testing.assert_close(by_y, want_by_y)
    assert count == (2 if dynamic else 4)  # two parts per compile

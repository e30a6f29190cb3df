"""`with` blocks over context managers whose class writes `__enter__`/`__exit__` in Python
(`contextlib.nullcontext`, a user's class): both are inlined, so the block is no graph break.
Compared with eager on real tensors, including a break inside the block and an exception."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

import framejit
from framejit.testing import CompileCounter

FLAGS = {"scale": 1.0}
exits: list[Any] = []


class Scaled:
    """Sets a flag the block reads, restores it on exit, records how it exited."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.saved = None

    def __enter__(self) -> float:
        self.saved = FLAGS["scale"]
        FLAGS["scale"] = self.scale
        return self.scale * 2

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        FLAGS["scale"] = self.saved
        exits.append(exc_type)
        return False


def body(x: torch.Tensor) -> torch.Tensor:
    return x * FLAGS["scale"]


@framejit.disable
def outside(t: torch.Tensor) -> torch.Tensor:
    return t + 100


def one_graph(x: torch.Tensor, amp: bool = False) -> torch.Tensor:
    ctx = torch.autocast("cpu") if amp else contextlib.nullcontext()
    with ctx:
        y = x.sin()
    with Scaled(3.0) as doubled:
        y = body(y) + doubled
        with Scaled(5.0):
            y = body(y)
    return y + body(x)


def with_a_break(x: torch.Tensor) -> torch.Tensor:
    with Scaled(2.0) as doubled:
        y = body(x) * doubled
        y = outside(y)  # a graph break inside the block
        y = body(y)
    return y


def test_python_context_managers_are_no_graph_break() -> None:
    x = torch.randn(4)
    explained = framejit.explain(one_graph, x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    exits.clear()
    expected = one_graph(x)
    assert exits == [None, None] and FLAGS["scale"] == 1.0
    counter = CompileCounter()
    fast = framejit.jit(one_graph, backend=counter)
    for _ in range(2):
        exits.clear()
        torch.testing.assert_close(fast(x), expected)
        assert exits == [None, None]  # both exits ran (replayed after the graph)
        assert FLAGS["scale"] == 1.0
    assert counter.frame_count == 1


def test_a_break_inside_the_block_keeps_the_context() -> None:
    x = torch.randn(4)
    exits.clear()
    expected = with_a_break(x)
    fast = framejit.jit(with_a_break, backend="eager")
    for _ in range(2):
        exits.clear()
        torch.testing.assert_close(fast(x), expected)
        assert exits == [None]
        assert FLAGS["scale"] == 1.0


def test_an_exception_in_the_block_reaches_exit() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with Scaled(2.0):
            return x.view(7)  # wrong size: raises in the graph

    fast = framejit.jit(fn, backend="eager")
    exits.clear()
    with pytest.raises(RuntimeError):
        fast(torch.randn(4))
    assert exits[-1] is RuntimeError and FLAGS["scale"] == 1.0


# --- torch.inference_mode ------------------------------------------------------------------------


def _same_inference(got: Any, expected: Any) -> None:
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(g, e)
            assert g.is_inference() == e.is_inference()
            assert g.requires_grad == e.requires_grad
        else:
            assert g == e


def inference_in_the_middle(x: torch.Tensor, w: torch.Tensor) -> Any:
    y = x @ w
    with torch.inference_mode():
        z = (y * 2).relu()
        flag = z.is_inference()
    return y + 1, z, flag


def inference_whole_function(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return torch.nn.functional.gelu(x @ w).sum(0)


def inference_mode_false(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode(mode=False):
        return (x @ w).sin()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])  # triton: tests/backend/triton
@pytest.mark.parametrize(
    "fn", [inference_in_the_middle, inference_whole_function, inference_mode_false]
)
def test_inference_mode_blocks_are_captured(fn: Any, backend: str) -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter if backend == "eager" else backend)
    for _ in range(2):
        _same_inference(jitted(x, w), fn(x, w))
    explained = framejit.explain(fn, x, w)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    if backend == "eager":
        assert counter.frame_count == 1


def inference_with_a_break(x: torch.Tensor) -> Any:
    with torch.inference_mode():
        y = x.sin() * 2
        print("", end="")  # a graph break inside the block
        z = y + 1
    return z, z.is_inference(), torch.is_inference_mode_enabled(), x + 1


def test_a_break_inside_an_inference_mode_block_keeps_the_mode() -> None:
    x = torch.randn(5)
    jitted = framejit.jit(inference_with_a_break, backend="aot_eager")
    for _ in range(2):
        _same_inference(jitted(x), inference_with_a_break(x))
    assert not torch.is_inference_mode_enabled()
    assert torch.is_grad_enabled()  # the mode from before the block, not the block's


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))


def check_model_under_inference_mode(backend: str) -> None:
    """`with torch.inference_mode(): model(x)`, for normal and inference-tensor inputs, then
    the same module with grad; and mutations of an inference tensor passed in are kept."""
    model = _mlp()
    jitted = framejit.jit(model, backend=backend)
    x = torch.randn(3, 4)
    with torch.inference_mode():
        made_inside = x.clone()
        for inp in (x, made_inside):
            _same_inference(jitted(inp), model(inp))
    out = jitted(x)  # with grad after: another graph, with a backward
    _same_inference(out, model(x))
    out.sum().backward()
    assert model[0].weight.grad is not None

    def bump(t: torch.Tensor) -> torch.Tensor:
        t.add_(1)
        return t * 2

    with torch.inference_mode():
        a, b = torch.zeros(3), torch.zeros(3)
        _same_inference(framejit.jit(bump, backend=backend)(a), bump(b))
    torch.testing.assert_close(a, b)


def test_a_model_called_under_inference_mode_is_compiled_by_the_aot_stage(monkeypatch) -> None:
    from framejit.backend.aot import compile as aot

    said: list[str] = []
    monkeypatch.setattr(aot.log, "info", lambda msg, *args: said.append(msg % args))
    check_model_under_inference_mode("aot_eager")
    assert not [m for m in said if "running the captured graph as it is" in m], said


class Decorated(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @torch.no_grad()
    def frozen(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * 2

    @torch.inference_mode()
    def inferred(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * 3

    def forward(self, x: torch.Tensor) -> Any:
        return self.frozen(x) + 1, self.inferred(x), self.lin(x)


def test_methods_decorated_with_grad_and_inference_modes_are_inlined() -> None:
    model = Decorated()
    x = torch.randn(2, 4)
    explained = framejit.explain(model, x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    _same_inference(framejit.jit(model, backend="aot_eager")(x), model(x))

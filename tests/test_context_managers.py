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

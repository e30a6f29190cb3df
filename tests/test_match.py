"""`match` statements are captured: sequence, mapping, class and literal patterns, guards,
alternatives and captures, compared with eager over two calls; a subject the translator cannot
classify is a graph break, never a wrong branch."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import framejit
from framejit.testing import CompileCounter


@dataclasses.dataclass
class Cfg:
    kind: str
    scale: float


class Point:
    __match_args__ = ("x", "y")

    def __init__(self, x: float, y: float) -> None:
        self.x, self.y = x, y


class NoArgs:
    pass


def dispatch(x: torch.Tensor, value: Any) -> torch.Tensor:
    match value:
        case [a, b]:
            return x + a + b
        case [first, *rest] if len(rest) > 1:
            return x * first + len(rest)
        case {"k": v, **rest}:
            return x * v + len(rest)
        case Point(px, y=py):
            return x + px * py
        case Cfg(kind="relu", scale=s):
            return torch.relu(x) * s
        case Cfg(kind=k):
            return x - len(k)
        case True:
            return x.neg()
        case int(n) | float(n):
            return x - n
        case str() as s:
            return x + len(s)
        case None:
            return x * 0
        case _:
            return x.abs()


VALUES = [
    [1, 2],
    (3, 4),
    [5, 6, 7, 8],
    {"k": 2, "z": 1},
    {"q": 1},
    Point(2, 3),
    Cfg("relu", 2.0),
    Cfg("gelu", 1.0),
    True,
    5,
    2.5,
    "abc",
    None,
    NoArgs(),
    [1],
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__ + repr(v)[:12])
def test_match_takes_eagers_branch_in_one_graph(value: Any) -> None:
    counter = CompileCounter()
    jitted = framejit.jit(dispatch, backend=counter, fullgraph=True)
    for _ in range(2):
        x = torch.randn(4)
        torch.testing.assert_close(jitted(x, value), dispatch(x, value))
    assert counter.frame_count == 1


def test_a_changed_subject_takes_another_branch() -> None:
    jitted = framejit.jit(dispatch, backend="eager")
    x = torch.randn(4)
    for value in [[1, 2], {"k": 3}, Point(1, 1), [1, 2], 7, Cfg("relu", 1.5)]:
        torch.testing.assert_close(jitted(x, value), dispatch(x, value))


def test_match_on_a_tensor_shape() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        match x.shape:
            case (n,):
                return x * n
            case (b, n) if b == n:
                return x @ x
            case (b, _):
                return x.sum(0)
            case _:
                return x.flatten()

    jitted = framejit.jit(fn, backend="eager")
    for shape in [(3,), (2, 2), (2, 5), (2, 3, 4)]:
        x = torch.randn(shape)
        torch.testing.assert_close(jitted(x), fn(x))


def test_a_bad_match_args_raises_as_eager_does() -> None:
    class Bad:
        __match_args__ = ("a",)

    def fn(x: torch.Tensor, v: Any) -> torch.Tensor:
        match v:
            case Bad(a, b):
                return x + a + b
        return x

    jitted = framejit.jit(fn, backend="eager")
    with pytest.raises(TypeError):
        fn(torch.ones(2), Bad())
    with pytest.raises(TypeError):
        jitted(torch.ones(2), Bad())

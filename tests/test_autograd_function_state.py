"""State a custom `torch.autograd.Function` reads besides its arguments, and its non-tensor
arguments. The AOT stage keeps the values the forward and backward read while tracing, so a
class attribute, a module attribute or a closure cell read by the forward is guarded (a change
recompiles), one read by the backward (read when the backward runs, after every guard) makes the
call a graph break, and so do mutable values and mutable (dict, list) arguments. Every test
changes the state between calls and compares values and gradients with eager."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

import framejit

BACKENDS = ["eager", "aot_eager", "triton"]


def _matches_eager(fn: Callable, backend: str, change: Callable[[int], None]) -> None:
    """Call `fn` compiled and eager three times, calling `change(i)` before each round."""
    fast = framejit.jit(fn, backend=backend)
    for i in range(3):
        change(i)
        x = torch.tensor([0.3, 0.7, -1.2], requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        out, expected = fast(x), fn(x2)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)


def _break_reason(fn: Callable) -> str:
    explained = framejit.explain(fn, torch.ones(3))
    assert explained.graph_break_count == 1, explained
    return str(explained.break_reasons[0])


def _captured(fn: Callable) -> None:
    explained = framejit.explain(fn, torch.ones(3))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained


class FakeQuant(torch.autograd.Function):
    LEVELS = 4.0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x * FakeQuant.LEVELS) / FakeQuant.LEVELS

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * FakeQuant.LEVELS  # read when the backward runs


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_class_attribute_the_backward_reads_breaks_the_graph(backend: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return FakeQuant.apply(x) * 2

    assert "reads `FakeQuant.LEVELS` in the backward" in _break_reason(fn)

    def change(i: int) -> None:
        FakeQuant.LEVELS = [4.0, 2.0, 8.0][i]

    try:
        _matches_eager(fn, backend, change)
    finally:
        FakeQuant.LEVELS = 4.0


def test_a_class_attribute_changed_between_forward_and_backward() -> None:
    fast = framejit.jit(lambda x: FakeQuant.apply(x), backend="aot_eager")
    try:
        grads = []
        for f in (fast, FakeQuant.apply):
            FakeQuant.LEVELS = 4.0
            x = torch.ones(2, requires_grad=True)
            out = f(x)
            FakeQuant.LEVELS = 3.0
            out.sum().backward()
            grads.append(x.grad)
        torch.testing.assert_close(grads[0], grads[1])
    finally:
        FakeQuant.LEVELS = 4.0


class ForwardSettings(torch.autograd.Function):
    SCALE = 3.0
    DTYPE = torch.float64

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return (x * ForwardSettings.SCALE).to(ForwardSettings.DTYPE).float()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_class_attributes_the_forward_reads_are_guarded(backend: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return ForwardSettings.apply(x) + 1

    _captured(fn)
    guards = "\n".join(map(str, framejit.explain(fn, torch.ones(3)).guards))
    assert "G['ForwardSettings'].SCALE == 3.0" in guards

    def change(i: int) -> None:
        ForwardSettings.SCALE = [3.0, 5.0, 3.0][i]
        ForwardSettings.DTYPE = [torch.float64, torch.float64, torch.float16][i]

    try:
        _matches_eager(fn, backend, change)
    finally:
        ForwardSettings.SCALE, ForwardSettings.DTYPE = 3.0, torch.float64


class MutableSetting(torch.autograd.Function):
    SCALES = [2.0]  # a list: changed in place, no guard can pin what the graph read

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * MutableSetting.SCALES[0]

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_mutable_class_attribute_breaks_the_graph(backend: str) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return MutableSetting.apply(x)

    assert "reads `MutableSetting.SCALES`, a list" in _break_reason(fn)

    def change(i: int) -> None:
        MutableSetting.SCALES[0] = [2.0, 7.0, -1.0][i]

    _matches_eager(fn, backend, change)


def _closure_function(scale: list) -> type:
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * scale[0]

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * scale[0]

    return Scale


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mutable_closure_cell_breaks_the_graph(backend: str) -> None:
    scale = [2.0]
    Scale = _closure_function(scale)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return Scale.apply(x)

    assert "reads `scale`, a list" in _break_reason(fn)

    def change(i: int) -> None:
        scale[0] = [2.0, 7.0, 0.5][i]

    _matches_eager(fn, backend, change)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_closure_constant_is_guarded_in_the_forward_and_breaks_in_the_backward(
    backend: str,
) -> None:
    k = 2.0

    class Forward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * k

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * 3

    class Backward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * k

    def set_k(i: int) -> None:
        nonlocal k
        k = [2.0, 5.0, 2.0][i]

    def forward_reads(x: torch.Tensor) -> torch.Tensor:
        return Forward.apply(x)

    def backward_reads(x: torch.Tensor) -> torch.Tensor:
        return Backward.apply(x)

    _captured(forward_reads)
    assert "reads `k` in the backward" in _break_reason(backward_reads)
    _matches_eager(forward_reads, backend, set_k)
    _matches_eager(backward_reads, backend, set_k)


SETTINGS = types.ModuleType("settings")  # a module of the user's: its attributes may change
SETTINGS.factor = 2.0


class ModuleSetting(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * SETTINGS.factor

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


def test_a_module_attribute_the_forward_reads_is_guarded() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return ModuleSetting.apply(x)

    _captured(fn)

    def change(i: int) -> None:
        SETTINGS.factor = [2.0, 4.0, 2.0][i]

    _matches_eager(fn, "aot_eager", change)


seen: list = []


class WithHelper(torch.autograd.Function):
    @staticmethod
    def _record(x: torch.Tensor) -> torch.Tensor:
        seen.append(1)  # an effect, in a helper reached through the class
        return x

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return WithHelper._record(x) * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


def test_a_helper_reached_through_the_class_is_scanned() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return WithHelper.apply(x)

    assert "uses the global `seen`" in _break_reason(fn)
    seen.clear()
    _matches_eager(fn, "aot_eager", lambda i: None)
    assert len(seen) == 6  # every call ran the helper: 3 compiled, 3 eager


class Record(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, stats: Any) -> torch.Tensor:
        ctx.stats = stats
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        ctx.stats["seen_backward"] = True
        return g * ctx.stats.get("scale", 2.0), None


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_dict_argument_is_the_callers_object(backend: str) -> None:
    def fn(x: torch.Tensor, stats: dict) -> torch.Tensor:
        return Record.apply(x, stats).sum()

    explained = framejit.explain(fn, torch.ones(2), {"scale": 1.0})
    assert explained.graph_break_count == 1
    assert "an argument of type" in str(explained.break_reasons[0])
    fast = framejit.jit(fn, backend=backend)
    for scale in (1.0, 3.0):
        results = []
        for f in (fast, fn):
            stats = {"scale": scale}
            x = torch.ones(2, requires_grad=True)
            loss = f(x, stats)
            stats["scale"] = scale * 6  # changed between forward and backward
            loss.backward()
            results.append((x.grad, stats))
        torch.testing.assert_close(results[0][0], results[1][0])
        assert results[0][1] == results[1][1] == {"scale": scale * 6, "seen_backward": True}


class ListArgument(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, log: Any) -> torch.Tensor:
        return x * len(log)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple:
        return g, None


def test_list_arguments_break_and_immutable_ones_are_captured() -> None:
    def with_list(x: torch.Tensor) -> torch.Tensor:
        return ListArgument.apply(x, [1, 2])

    def with_tuple(x: torch.Tensor) -> torch.Tensor:
        return ListArgument.apply(x, (1, 2, torch.float32, None))

    assert "an argument of type" in _break_reason(with_list)
    _captured(with_tuple)
    _matches_eager(with_list, "aot_eager", lambda i: None)
    _matches_eager(with_tuple, "aot_eager", lambda i: None)


class ClassMethods(torch.autograd.Function):
    K = 2.0

    @classmethod
    def forward(cls, ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * cls.K  # a class attribute, read through the class argument

    @classmethod
    def backward(cls, ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 3


class WritesItsClass(torch.autograd.Function):
    @classmethod
    def forward(cls, ctx: Any, x: torch.Tensor) -> torch.Tensor:
        cls.last_shape = x.shape  # not ctx: the first argument of a classmethod is the class
        return x * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2


def test_classmethod_forward_reads_are_guarded_and_writes_to_the_class_break() -> None:
    def reads(x: torch.Tensor) -> torch.Tensor:
        return ClassMethods.apply(x)

    def writes(x: torch.Tensor) -> torch.Tensor:
        return WritesItsClass.apply(x)

    _captured(reads)
    assert "sets the attribute `last_shape`" in _break_reason(writes)

    def change(i: int) -> None:
        ClassMethods.K = [2.0, 5.0, 2.0][i]

    try:
        _matches_eager(reads, "aot_eager", change)
    finally:
        ClassMethods.K = 2.0
    _matches_eager(writes, "aot_eager", lambda i: None)
    assert WritesItsClass.last_shape == (3,)

"""torch functions reached in every way a program reaches them, and torch's own
`__torch_function__` checks: none of them may cost a graph break, and results match eager.

`F.layer_norm` is a Python function; reached through a global alias, a closure or a module
attribute it is still one graph op (not inlined into torch's code). `has_torch_function(...)`
(at the top of most of torch.nn.functional and in nn.MultiheadAttention) folds to False for
plain tensors; an argument that is not a tensor (it may define `__torch_function__`) breaks.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import framejit
from framejit.testing import CompileCounter

ALIAS = F.layer_norm


def _closure() -> Any:
    norm = F.layer_norm

    def fn(x: torch.Tensor) -> torch.Tensor:
        return norm(x, (4,)) * 2

    return fn


def _global_alias(x: torch.Tensor) -> torch.Tensor:
    return ALIAS(x, (4,)) + 1


class Holder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = F.silu
        self.norm = F.layer_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(x), (4,))


def _has_torch_function(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if torch.overrides.has_torch_function((x, y)):
        return x - y
    if torch.overrides.has_torch_function_unary(x):
        return x * y
    return x + y


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    "make", [_closure, lambda: _global_alias, Holder, lambda: _has_torch_function]
)
def test_no_break_and_eager_results(backend: str, make: Any) -> None:
    fn = make()
    x = torch.randn(3, 4)
    args = (x, torch.randn(3, 4)) if fn is _has_torch_function else (x,)
    jitted = framejit.jit(fn, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(jitted(*args), fn(*args))
    framejit.reset()
    counter = CompileCounter()
    framejit.jit(fn, backend=counter)(*args)
    assert counter.frame_count == 1
    assert framejit.explain(fn, *args).graph_break_count == 0


class Traced:
    """Not a tensor, but it takes part in torch's dispatch."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return "dispatched"


def test_an_object_with_torch_function_breaks_and_dispatches() -> None:
    def fn(x: torch.Tensor, other: Any) -> Any:
        y = x * 2
        if torch.overrides.has_torch_function((x, other)):
            return y, "has"
        return y, "plain"

    x, other = torch.randn(3), Traced(torch.randn(3))
    got = framejit.jit(fn, backend="eager")(x, other)
    want = fn(x, other)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] == "has"


@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_encoder_layer_is_one_graph(batch_first: bool) -> None:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=batch_first)
    x = torch.randn(2, 5, 8)
    old_torch = tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 13)
    for training in (False, True):
        layer.train(training)
        framejit.reset()
        torch.testing.assert_close(framejit.jit(layer, backend="aot_eager")(x), layer(x))
        if old_torch and not training:
            # torch 2.11/2.12's eval fast-path check reads the dispatch-mode stack through a C
            # function framejit does not fold (a break per check; results are the same)
            continue
        explained = framejit.explain(layer, x)
        assert explained.graph_count == 1 and explained.graph_break_count == 0


@torch.library.custom_op("framejit_test::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha + y


@scale_add.register_fake
def _scale_add_fake(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.empty_like(x)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize(
    "fn",
    [
        lambda x, y: torch.ops.aten.add(x, y) * 2,
        lambda x, y: torch.ops.aten.add.Tensor(x, y, alpha=3),
        lambda x, y: torch.ops.aten._safe_softmax.default(x, 1) + y,
        lambda x, y: torch.ops.framejit_test.scale_add(x, y, 0.5).relu(),
        lambda x, y: scale_add(x, y, 2.0) + 1,
    ],
    ids=["packet", "overload", "aten-only-op", "custom-op", "custom-op-function"],
)
def test_torch_ops_and_custom_ops_are_graph_ops(backend: str, fn: Any) -> None:
    """torch.ops.<namespace>.<op>[.<overload>] is one graph node, torch.library custom ops
    included (their fake implementation gives the output's metadata)."""
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    jitted = framejit.jit(fn, backend=backend)
    for _ in range(2):
        torch.testing.assert_close(jitted(x, y), fn(x, y))
    explained = framejit.explain(fn, x, y)
    assert explained.graph_count == 1 and explained.graph_break_count == 0


@torch.library.custom_op("framejit_test::scaled", mutates_args=())
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@scaled.register_fake
def _scaled_fake(x: torch.Tensor) -> torch.Tensor:
    x.data_ptr()  # as the cuDNN RNN kernels' weight-layout check reads it
    return torch.empty_like(x)


def test_a_fake_tensors_own_warning_is_not_replayed() -> None:
    """A fake implementation that reads a FakeTensor's data pointer warns that this is
    deprecated while tracing (nn.LSTM on CUDA did); eager's real tensors never give it."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return scaled(x) + 1

    x = torch.randn(3)
    jitted = framejit.jit(fn, backend="eager")
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = jitted(x)
        torch.testing.assert_close(got, fn(x))
        with warnings.catch_warnings(record=True) as eager_caught:
            warnings.simplefilter("always")
            fn(x)
        assert [str(w.message) for w in caught] == [str(w.message) for w in eager_caught] == []


def alternating(t: torch.Tensor) -> torch.Tensor:
    return (-2.0) ** t + (-1) ** torch.arange(3)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_negative_number_raised_to_a_tensor(backend: str) -> None:
    # torch.fx writes `operator.pow(-2.0, t)` as `-2.0 ** t`, which is `-(2.0 ** t)`
    t = torch.tensor([0.0, 0.5, 2.0])
    got = framejit.jit(alternating, backend=backend)(t)
    torch.testing.assert_close(got, alternating(t), equal_nan=True)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_tensor_new_of_a_size_is_a_shape_not_data(backend) -> None:
    # torch.distributions' samplers: `param.new(shape).exponential_()` (Laplace, Cauchy, ...)
    def fill(x):
        return x.new(x.shape).fill_(7.0), x.new(torch.Size([2, 1])).fill_(1.0), x.new((2.0, 5.0))

    def laplace(loc):
        torch.manual_seed(3)
        return torch.distributions.Laplace(loc, 1.0).sample((2,))

    x = torch.ones(3)
    for fn in (fill, laplace):
        got, want = framejit.jit(fn, backend=backend)(x), fn(x)
        for g, w in zip(
            got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)
        ):
            assert g.shape == w.shape and g.dtype == w.dtype
            torch.testing.assert_close(g, w)


def _python_types_as_dtypes(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    # transformers' StaticCache: torch.tensor(0, dtype=int)
    return (
        x + torch.tensor(0, dtype=int),
        torch.zeros(3, dtype=float),
        torch.ones(2, dtype=bool),
        x.to(complex),
        x.new_zeros(2, dtype=int),
    )


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_python_types_as_dtypes_are_captured(backend: str) -> None:
    counter = CompileCounter()
    x = torch.ones(2)
    want = _python_types_as_dtypes(x)
    got = framejit.jit(_python_types_as_dtypes, backend=counter, fullgraph=True)(x)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)
    assert counter.frame_count == 1
    got = framejit.jit(_python_types_as_dtypes, backend=backend, fullgraph=True)(x)
    assert [g.dtype for g in got] == [w.dtype for w in want]


def _returns_what_it_was_given(x: torch.Tensor, buf: torch.Tensor) -> tuple[Any, ...]:
    r = torch.add(x, 1, out=buf)
    (b,) = torch.broadcast_tensors(x)
    c = x.contiguous()
    return r is buf, b is x, c is x, r * 2


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_an_op_returning_a_tensor_it_was_given_returns_that_object(backend: str) -> None:
    # eager returns `out` itself from an out= op, and its input from broadcast_tensors of one
    # tensor or contiguous() of a contiguous one
    x = torch.randn(3)
    want = _returns_what_it_was_given(x, torch.empty(3))
    buf = torch.empty(3)
    got = framejit.jit(_returns_what_it_was_given, backend=backend, fullgraph=True)(x, buf)
    assert got[:3] == want[:3] == (True, True, True)
    assert torch.equal(got[3], want[3]) and torch.equal(buf, x + 1)

"""Guards: a compiled entry runs only while every fact it relied on still holds.

The soundness tests compile a function once, change one thing the trace depended on, and check
that the next call does not run the stale entry: its result equals eager PyTorch on the same
inputs and (where the change makes a different program) a new graph is compiled. Then the guard
compiler itself: generated source, `why_failed`, shared sub-expressions, exceptions.

Every test runs with TENSOR_MATCH compiled to Python expressions, and again with the C++ check
where it was built for this Python and torch (`config.cpp_guards`).
"""

from __future__ import annotations

import copy
import re
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from framejit.frontend.sources import (
    AttrSource,
    FreeVarSource,
    GlobalSource,
    ItemSource,
    LocalSource,
)
from framejit.guards import GlobalState, Guard, GuardKind, TensorMeta, compile_guards
from framejit.guards import guard as guard_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F

import framejit
from framejit.testing import CompileCounter

CPP_BUILT = guard_module._tensor_check is not None


@pytest.fixture(autouse=True, params=["python", "cpp"] if CPP_BUILT else ["python"])
def tensor_guard_language(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(framejit.config, "cpp_guards", request.param == "cpp")
    assert guard_module.cpp_tensor_guards() is (request.param == "cpp")
    return request.param


def jit_counted(fn: Any, dynamic: bool | None = False) -> tuple[Any, CompileCounter]:
    """Static shapes by default: these tests count one compile per distinct input metadata
    (automatic dynamic shapes are tested in test_dynamic.py)."""
    counter = CompileCounter()
    return framejit.jit(fn, backend=counter, dynamic=dynamic), counter


def assert_same(got: Any, want: Any) -> None:
    """Exactly eager's result: same type, dtype, shape, requires_grad and values (NaN == NaN)."""
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert got.shape == want.shape, (got.shape, want.shape)
        assert got.requires_grad == want.requires_grad
        torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=0, equal_nan=True)
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == want


# --- reuse ---------------------------------------------------------------------------------------


def test_unchanged_inputs_reuse_the_entry() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, n: int) -> torch.Tensor:
        return (x @ w).relu() * n

    jitted, counter = jit_counted(fn)
    w = torch.randn(4, 5)
    for _ in range(20):
        x = torch.randn(3, 4)  # a new tensor object each time, same metadata
        assert_same(jitted(x, w, 2), fn(x, w, 2))
    assert counter.frame_count == 1
    assert len(jitted.cache.entries) == 1


def test_reset_drops_compiled_entries() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    jitted(x)
    jitted(x)
    assert counter.frame_count == 1
    framejit.reset()
    assert_same(jitted(x), fn(x))
    assert counter.frame_count == 2


# --- tensor metadata ------------------------------------------------------------------------------


def test_shape_change_recompiles() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sum(0) * x.shape[0]

    jitted, counter = jit_counted(fn)
    a, b = torch.randn(3, 2), torch.randn(5, 2)
    assert_same(jitted(a), fn(a))
    assert_same(jitted(b), fn(b))
    assert counter.frame_count == 2
    assert_same(jitted(a), fn(a))  # the first entry is still there
    assert counter.frame_count == 2


def test_rank_change_recompiles() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + x.dim()

    jitted, counter = jit_counted(fn)
    for x in (torch.tensor(1.5), torch.ones(1), torch.ones(1, 1)):
        assert_same(jitted(x), fn(x))
    assert counter.frame_count == 3


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int32, torch.bool])
def test_dtype_change_recompiles(dtype: torch.dtype) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sum(0)

    jitted, counter = jit_counted(fn)
    a = torch.randn(3, 4)
    assert_same(jitted(a), fn(a))
    b = (a > 0).to(dtype)
    assert_same(jitted(b), fn(b))
    assert counter.frame_count == 2


def test_stride_change_via_transpose_recompiles() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.is_contiguous() else x * 3

    jitted, counter = jit_counted(fn)
    a = torch.randn(3, 3)
    assert_same(jitted(a), fn(a))
    t = a.t()  # same shape and dtype, other strides
    assert_same(jitted(t), fn(t))
    assert counter.frame_count == 2
    c = t.contiguous()  # back to the first strides: the first entry runs again
    assert_same(jitted(c), fn(c))
    assert counter.frame_count == 2


def test_strides_read_into_python_follow_the_input() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sum() * x.stride(0)

    jitted, counter = jit_counted(fn)
    base = torch.randn(4, 6)
    for x in (base, base[:, ::2], base[::2], base.t()):
        assert_same(jitted(x), fn(x))
    assert counter.frame_count == 4


def test_view_of_non_contiguous_input_fails_like_eager() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.view(-1) + 1

    jitted, _ = jit_counted(fn)
    a = torch.randn(3, 4)
    assert_same(jitted(a), fn(a))
    with pytest.raises(RuntimeError, match="view"):
        fn(a.t())
    with pytest.raises(RuntimeError, match="view"):
        jitted(a.t())


def test_requires_grad_change_recompiles_and_gradients_flow() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x * x).sum(0)

    jitted, counter = jit_counted(fn)
    a = torch.randn(3, 2)
    out = jitted(a)
    assert not out.requires_grad
    b = a.clone().requires_grad_(True)
    out = jitted(b)
    assert out.requires_grad
    assert counter.frame_count == 2
    out.sum().backward()
    torch.testing.assert_close(b.grad, 2 * a)


def test_storage_offset_read_into_python_is_guarded() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + x.storage_offset()

    jitted, _ = jit_counted(fn)
    base = torch.zeros(10)
    assert_same(jitted(base[1:4]), fn(base[1:4]))
    assert_same(jitted(base[2:5]), fn(base[2:5]))  # same shape and strides, other offset


def test_is_leaf_read_into_python_is_guarded() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.is_leaf else x * 3

    jitted, _ = jit_counted(fn)
    leaf = torch.ones(2, requires_grad=True)
    assert_same(jitted(leaf), fn(leaf))
    non_leaf = leaf * 1  # requires_grad=True, same metadata, not a leaf
    assert_same(jitted(non_leaf), fn(non_leaf))


@settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([(2,), (3,), (2, 3)]),
            st.sampled_from([torch.float32, torch.float64]),
            st.booleans(),  # requires_grad
            st.booleans(),  # transpose (2-d only)
        ),
        min_size=1,
        max_size=8,
    )
)
def test_any_sequence_of_tensor_metadata_matches_eager(calls: list[tuple[Any, ...]]) -> None:
    framejit.reset()

    def fn(x: torch.Tensor) -> torch.Tensor:
        scale = x.shape[-1] + (10 if x.is_contiguous() else 0)
        return (x * scale).sum(-1) + x.ndim

    jitted, counter = jit_counted(fn)
    seen = set()
    for shape, dtype, requires_grad, transpose in calls:
        x = torch.arange(6, dtype=dtype)[: int(torch.tensor(shape).prod())].reshape(shape)
        if transpose and x.dim() == 2:
            x = x.t()
        x = x.detach().requires_grad_(requires_grad)
        assert_same(jitted(x), fn(x))
        seen.add((tuple(x.shape), x.stride(), dtype, requires_grad))
    assert counter.frame_count == len(seen)


# --- globals --------------------------------------------------------------------------------------

SCALE = 2.0
OFFSET = torch.ones(3)
ACTIVATION: Callable[[torch.Tensor], torch.Tensor] = torch.relu


def read_global_constant(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE


def read_global_tensor(x: torch.Tensor) -> torch.Tensor:
    return x + OFFSET


def call_global_function(x: torch.Tensor) -> torch.Tensor:
    return ACTIVATION(x) + 1


def test_global_constant_change_recompiles(monkeypatch: pytest.MonkeyPatch) -> None:
    jitted, counter = jit_counted(read_global_constant)
    x = torch.randn(3)
    assert_same(jitted(x), x * 2.0)
    monkeypatch.setitem(globals(), "SCALE", 5.0)
    assert_same(jitted(x), x * 5.0)
    assert counter.frame_count == 2
    monkeypatch.setitem(globals(), "SCALE", 5)  # same value, other type
    assert_same(jitted(x), read_global_constant(x))


def test_global_tensor_replaced_uses_the_new_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    jitted, counter = jit_counted(read_global_tensor)
    x = torch.randn(3)
    assert_same(jitted(x), x + 1)
    monkeypatch.setitem(globals(), "OFFSET", torch.full((3,), 10.0))
    assert_same(jitted(x), x + 10)  # read again on each call: same metadata, new values
    monkeypatch.setitem(globals(), "OFFSET", torch.full((3,), 10.0, dtype=torch.float64))
    assert_same(jitted(x), read_global_tensor(x))
    monkeypatch.setitem(globals(), "OFFSET", torch.ones(2, 3))
    assert_same(jitted(x), read_global_tensor(x))
    assert counter.frame_count == 3


def test_global_function_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    jitted, _ = jit_counted(call_global_function)
    x = torch.randn(4)
    assert_same(jitted(x), call_global_function(x))

    def shifted(t: torch.Tensor) -> torch.Tensor:
        return t - 100

    for replacement in (torch.tanh, torch.sigmoid, shifted):
        monkeypatch.setitem(globals(), "ACTIVATION", replacement)
        assert_same(jitted(x), call_global_function(x))


# --- closures -------------------------------------------------------------------------------------


def test_closure_cell_rebound_by_outer_function() -> None:
    k = 1.0

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + k

    def bump() -> None:
        nonlocal k
        k += 1.5

    jitted, counter = jit_counted(fn)
    x = torch.zeros(2)
    for _ in range(3):
        assert_same(jitted(x), fn(x))
        bump()
    assert counter.frame_count == 3
    k = 1.0  # back to the first value: no new compile
    assert_same(jitted(x), x + 1.0)
    assert counter.frame_count == 3


def test_closure_over_tensor_rebound() -> None:
    bias = torch.ones(3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * bias

    jitted, _ = jit_counted(fn)
    x = torch.randn(3)
    assert_same(jitted(x), fn(x))
    bias = torch.full((3,), -2.0)
    assert_same(jitted(x), fn(x))
    bias = torch.full((1,), 3.0, dtype=torch.float64)
    assert_same(jitted(x), fn(x))


def test_closure_of_a_function_argument() -> None:
    def make(k: float) -> Callable[[torch.Tensor], torch.Tensor]:
        def scaled(x: torch.Tensor) -> torch.Tensor:
            return x * k

        return scaled

    def fn(x: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return f(x) + 1

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    assert_same(jitted(x, make(2.0)), fn(x, make(2.0)))
    # Same code object, other closure contents: must not reuse the first entry.
    assert_same(jitted(x, make(3.0)), fn(x, make(3.0)))
    assert counter.frame_count == 2


def test_defaults_of_a_function_argument() -> None:
    def scaled(x: torch.Tensor, k: float = 2.0) -> torch.Tensor:
        return x * k

    def fn(x: torch.Tensor, f: Callable[..., torch.Tensor]) -> torch.Tensor:
        return f(x)

    jitted, _ = jit_counted(fn)
    x = torch.randn(3)
    assert_same(jitted(x, scaled), x * 2.0)
    scaled.__defaults__ = (5.0,)
    assert_same(jitted(x, scaled), x * 5.0)


def test_function_argument_replaced_by_another_function() -> None:
    def fn(x: torch.Tensor, f: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return f(x) * 2

    def plus_one(t: torch.Tensor) -> torch.Tensor:
        return t + 1

    def minus_one(t: torch.Tensor) -> torch.Tensor:
        return t - 1

    jitted, counter = jit_counted(fn)
    x = torch.randn(5)
    for f in (torch.sin, torch.cos, plus_one, minus_one):
        assert_same(jitted(x, f), fn(x, f))
    assert counter.frame_count == 4
    for f in (torch.sin, torch.cos, plus_one, minus_one):  # all four entries are reused
        assert_same(jitted(x, f), fn(x, f))
    assert counter.frame_count == 4


# --- Python values --------------------------------------------------------------------------------


def test_int_bool_and_str_argument_values() -> None:
    def fn(x: torch.Tensor, n: int, flag: bool, mode: str) -> torch.Tensor:
        y = x * n
        if flag:
            y = y + 1
        if mode == "square":
            y = y * y
        return y

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    calls = [
        (2, True, "square"),
        (3, True, "square"),
        (3, False, "square"),
        (3, False, "id"),
        (2, True, "square"),
    ]
    for args in calls:
        assert_same(jitted(x, *args), fn(x, *args))
    assert counter.frame_count == 4


def test_bool_and_int_of_equal_value_are_distinguished() -> None:
    def fn(x: torch.Tensor, n: Any) -> torch.Tensor:
        return x + 1 if type(n) is bool else x - 1

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    for n in (1, True, 1.0, 1):
        assert_same(jitted(x, n), fn(x, n))
    assert counter.frame_count == 3


def test_int_then_float_argument() -> None:
    def fn(x: torch.Tensor, s: Any) -> torch.Tensor:
        return x + s

    jitted, _ = jit_counted(fn)
    x = torch.arange(3)
    assert_same(jitted(x, 2), fn(x, 2))
    assert_same(jitted(x, 2.5), fn(x, 2.5))  # int tensor + float -> float


def test_nan_argument_reuses_its_entry() -> None:
    def fn(x: torch.Tensor, s: float) -> torch.Tensor:
        return x + s

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    assert_same(jitted(x, float("nan")), fn(x, float("nan")))
    assert_same(jitted(x, float("nan")), fn(x, float("nan")))
    assert counter.frame_count == 1
    assert_same(jitted(x, 1.0), fn(x, 1.0))
    assert counter.frame_count == 2


def test_negative_zero_is_not_zero() -> None:
    def fn(x: torch.Tensor, s: float) -> torch.Tensor:
        return x / s

    jitted, _ = jit_counted(fn)
    x = torch.ones(2)
    assert_same(jitted(x, 0.0), fn(x, 0.0))  # +inf
    assert_same(jitted(x, -0.0), fn(x, -0.0))  # -inf


def test_list_length_change() -> None:
    def fn(xs: list[torch.Tensor]) -> torch.Tensor:
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out * len(xs)

    jitted, counter = jit_counted(fn)
    a = torch.randn(3)
    for n in (2, 3, 1, 2):
        xs = [a + i for i in range(n)]
        assert_same(jitted(xs), fn(xs))
    assert counter.frame_count == 3


def test_tuple_becomes_list() -> None:
    def fn(xs: Any) -> Any:
        return xs[0] + xs[1] if isinstance(xs, tuple) else xs[0] - xs[1]

    jitted, _ = jit_counted(fn)
    a, b = torch.randn(3), torch.randn(3)
    assert_same(jitted((a, b)), fn((a, b)))
    assert_same(jitted([a, b]), fn([a, b]))


def _placeholders(gm: torch.fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes if n.op == "placeholder"]


def test_list_length_and_one_item_read_without_the_rest() -> None:
    """`len(xs)` guards the length only and `xs[i]` reads item i only: the other items of a
    long list are neither graph inputs nor guarded (a deep recursion over a list of 1800
    tensors made them all inputs of every compile)."""

    def fn(h: torch.Tensor, xs: list[torch.Tensor], i: int) -> Any:
        if i == len(xs):
            return h
        return torch.tanh(h + xs[i] * xs[-1]), len(xs)

    jitted, counter = jit_counted(fn)
    h = torch.randn(3)
    xs = [torch.randn(3) for _ in range(300)]
    assert_same(jitted(h, xs, 4), fn(h, xs, 4))
    assert counter.frame_count == 1
    assert len(_placeholders(counter.graphs[0])) == 3  # h, xs[4], xs[-1]
    other = list(xs)
    other[7] = torch.randn(5, 2, dtype=torch.float64)  # an item the trace never read
    assert_same(jitted(h, other, 4), fn(h, other, 4))
    assert counter.frame_count == 1
    other[4] = torch.randn(2, 3)  # the item it read
    assert_same(jitted(h, other, 4), fn(h, other, 4))
    assert counter.frame_count == 2
    shorter = xs[:-1]  # the length it read
    assert_same(jitted(h, shorter, 4), fn(h, shorter, 4))
    assert counter.frame_count == 3
    assert_same(jitted(h, xs[:4], 4), fn(h, xs[:4], 4))


def test_list_items_read_one_at_a_time_keep_list_semantics() -> None:
    def fn(xs: list[torch.Tensor], k: int) -> Any:
        n = len(xs)
        first = xs[k]
        xs.append(first * 2)  # appended while the items are unread
        try:
            far = xs[n + 5]
        except IndexError:
            far = None
        return first + xs[-1], n, len(xs), far, xs[-k - 1]

    jitted, counter = jit_counted(fn)
    for n, k in ((4, 0), (4, 2), (6, -1)):
        xs = [torch.full((2,), float(i)) for i in range(n)]
        mine = list(xs)
        assert_same(jitted(mine, k), fn(xs, k))
        assert_same(mine, xs)  # the append was replayed on the real list


def test_inputs_no_node_uses_are_not_graph_inputs() -> None:
    """A tensor whose static sizes alone were read, or returned as it is, is guarded but not
    passed to the graph; an identity test between inputs still sees it."""

    def fn(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Any:
        out = x * 2 if y.shape[0] == 3 else x - 1
        if x is z:
            out = out + 1
        return out, z

    jitted, counter = jit_counted(fn)
    x, y, z = torch.randn(4), torch.randn(3), torch.randn(2)
    assert_same(jitted(x, y, z), fn(x, y, z))
    assert _placeholders(counter.graphs[0]) == ["l__x"]
    assert_same(jitted(x, y, z), fn(x, y, z))
    assert counter.frame_count == 1
    y2 = torch.randn(5)  # y's size was relied on: a new entry
    assert_same(jitted(x, y2, z), fn(x, y2, z))
    assert counter.frame_count == 2
    assert_same(jitted(x, y, x), fn(x, y, x))  # z is x now
    assert counter.frame_count == 3


def test_dict_keys_change() -> None:
    def fn(x: torch.Tensor, d: dict[str, Any]) -> torch.Tensor:
        out = x
        for key, value in d.items():
            out = out * value if key.startswith("m") else out + value
        return out

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    t = torch.randn(3)
    dicts = [{"a": t}, {"a": t, "m": 2}, {"m": 2, "a": t}, {"b": t}, {"a": t}]
    for d in dicts:
        assert_same(jitted(x, d), fn(x, d))
    assert counter.frame_count == 4


def test_dict_value_change() -> None:
    def fn(x: torch.Tensor, cfg: dict[str, Any]) -> torch.Tensor:
        return x * cfg["scale"] + cfg["shift"]

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    cfg = {"scale": 2, "shift": 1.0}
    assert_same(jitted(x, cfg), fn(x, cfg))
    cfg["scale"] = 7  # mutated in place between calls
    assert_same(jitted(x, cfg), fn(x, cfg))
    assert counter.frame_count == 2


def test_same_tensor_passed_twice() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * 3 if x is y else x + y

    jitted, _ = jit_counted(fn)
    a, b = torch.ones(2), torch.ones(2)
    assert_same(jitted(a, b), fn(a, b))
    assert_same(jitted(a, a), fn(a, a))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_inputs_that_become_views_of_one_base(backend: str) -> None:
    # Traced with unrelated x and y, the graph (functionalized by the AOT stage) does not see
    # that writing x changes y. Called later with two views of one storage, it must not replay:
    # a STORAGE_GROUPS guard sends the call to a new compile that knows they share memory.
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return y * 2

    def calls() -> list[tuple[torch.Tensor, torch.Tensor]]:
        same, overlapping = torch.arange(4.0), torch.arange(5.0)
        return [
            (torch.arange(4.0), torch.arange(4.0) + 10),
            (same, same.view(2, 2).view(-1)),  # two objects over one storage
            (overlapping[:4], overlapping[1:]),  # overlapping windows
            (torch.arange(4.0), torch.arange(4.0) + 10),  # distinct again
        ]

    jitted = framejit.jit(fn, backend=backend, dynamic=False)
    for (x, y), (ex, ey) in zip(calls(), calls()):
        assert_same(jitted(x, y), fn(ex, ey))
        assert_same(x, ex)


def test_a_module_buffer_written_in_place_and_a_view_of_it_passed_in() -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("seen", torch.zeros(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.add_(1)
            return x * 2

    eager_mod, mod = Counter(), Counter()
    jitted = framejit.jit(mod, backend="aot_eager", dynamic=False)
    assert_same(jitted(torch.ones(4)), eager_mod(torch.ones(4)))
    assert_same(jitted(mod.seen.view(-1)), eager_mod(eager_mod.seen.view(-1)))
    assert_same(mod.seen, eager_mod.seen)


def test_storage_groups_guard() -> None:
    x, y = LocalSource("x"), LocalSource("y")
    distinct = Guard(None, GuardKind.STORAGE_GROUPS, ((x, y), (0, 1)), "test")
    assert str(distinct) == "storage_groups(L['x'], L['y']) == (0, 1)"
    check = compile_guards([distinct], ["x", "y"]).check
    base = torch.zeros(6)
    assert check(_noop, torch.zeros(2), torch.zeros(2)) is True
    assert check(_noop, base[:3], base[3:]) is False  # views of one storage, even apart
    assert check(_noop, base, base) is False
    shared = Guard(None, GuardKind.STORAGE_GROUPS, ((x, y), (0, 0)), "test")
    check = compile_guards([shared], ["x", "y"]).check
    assert check(_noop, base[:3], base[3:]) is True
    assert check(_noop, torch.zeros(2), torch.zeros(2)) is False


# --- objects and modules -------------------------------------------------------------------------


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0
        self.linear = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale


def test_module_attribute_change() -> None:
    torch.manual_seed(0)
    mod = Scaled()
    jitted, counter = jit_counted(mod)
    x = torch.randn(2, 4)
    assert_same(jitted(x), mod(x))
    mod.scale = 3.0
    assert_same(jitted(x), mod(x))
    assert counter.frame_count == 2


def test_class_level_default_shadowed_by_instance_attribute() -> None:
    class WithDefault(nn.Module):
        scale = 2.0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.scale

    mod = WithDefault()
    jitted, _ = jit_counted(mod)
    x = torch.ones(2)
    assert_same(jitted(x), mod(x))
    mod.scale = 3.0
    assert_same(jitted(x), mod(x))


def test_class_attribute_changed_on_the_class() -> None:
    class Config:
        k = 2.0

    def fn(x: torch.Tensor, cfg: Config) -> torch.Tensor:
        return x * cfg.k

    jitted, _ = jit_counted(fn)
    cfg = Config()
    x = torch.ones(2)
    assert_same(jitted(x, cfg), fn(x, cfg))
    Config.k = 5.0
    assert_same(jitted(x, cfg), fn(x, cfg))


def test_method_replaced_on_the_class() -> None:
    class Helper(nn.Module):
        def step(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.step(x) * 2

    def other_step(self: Any, x: torch.Tensor) -> torch.Tensor:
        return x - 1

    mod = Helper()
    jitted, _ = jit_counted(mod)
    x = torch.ones(2)
    assert_same(jitted(x), mod(x))
    Helper.step = other_step  # type: ignore[method-assign]
    assert_same(jitted(x), mod(x))


def test_user_object_instance_attribute_change() -> None:
    class Holder:
        def __init__(self) -> None:
            self.k = 2
            self.t = torch.ones(3)

    def fn(x: torch.Tensor, h: Holder) -> torch.Tensor:
        return x * h.k + h.t

    jitted, _ = jit_counted(fn)
    h = Holder()
    x = torch.randn(3)
    assert_same(jitted(x, h), fn(x, h))
    h.k = 4
    assert_same(jitted(x, h), fn(x, h))
    h.t = torch.full((3,), 9.0)
    assert_same(jitted(x, h), fn(x, h))
    h.t = torch.ones(1, 3)
    assert_same(jitted(x, h), fn(x, h))


def test_parameter_replaced_with_same_shape_uses_new_values() -> None:
    torch.manual_seed(0)
    mod = nn.Linear(3, 2)
    jitted, counter = jit_counted(mod)
    x = torch.randn(4, 3)
    assert_same(jitted(x), mod(x))
    mod.weight = nn.Parameter(torch.randn(2, 3))
    assert_same(jitted(x), mod(x))
    assert counter.frame_count == 1  # same metadata: the entry reads the parameter each call


def test_parameter_replaced_with_other_shape_recompiles() -> None:
    torch.manual_seed(0)
    mod = nn.Linear(3, 2)
    jitted, counter = jit_counted(mod)
    x = torch.randn(4, 3)
    assert_same(jitted(x), mod(x))
    mod.weight = nn.Parameter(torch.randn(5, 3))
    mod.bias = nn.Parameter(torch.randn(5))
    out = jitted(x)
    assert out.shape == (4, 5)
    assert_same(out, mod(x))
    assert counter.frame_count == 2


def test_buffer_replaced() -> None:
    class WithBuffer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("shift", torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.shift

    mod = WithBuffer()
    jitted, _ = jit_counted(mod)
    x = torch.randn(3)
    assert_same(jitted(x), mod(x))
    mod.shift = torch.full((3,), 7.0)
    assert_same(jitted(x), mod(x))
    mod.shift = torch.ones(2, 3)
    assert_same(jitted(x), mod(x))


def test_parameters_frozen_after_compiling() -> None:
    torch.manual_seed(0)
    mod = nn.Linear(3, 2)
    jitted, counter = jit_counted(mod)
    x = torch.randn(4, 3)
    assert jitted(x).requires_grad
    for p in mod.parameters():
        p.requires_grad_(False)
    assert_same(jitted(x), mod(x))
    assert counter.frame_count == 2


@pytest.mark.parametrize("convert", ["half", "double"])
def test_module_dtype_conversion_keeps_parameter_objects(convert: str) -> None:
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    jitted, counter = jit_counted(mod)
    x = torch.randn(5, 3)
    assert_same(jitted(x), mod(x))
    params = list(mod.parameters())
    getattr(mod, convert)()
    assert all(p is q for p, q in zip(params, mod.parameters()))  # same objects, new dtype
    x2 = x.to(params[0].dtype)
    out = jitted(x2)
    assert out.dtype == params[0].dtype
    assert_same(out, mod(x2))
    assert counter.frame_count == 2


def test_dropout_train_and_eval() -> None:
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5))
    jitted, counter = jit_counted(mod)
    x = torch.randn(16, 3)
    torch.manual_seed(1)
    got = jitted(x)
    torch.manual_seed(1)
    assert_same(got, mod(x))
    assert (got == 0).any()  # dropout was active
    mod.eval()
    assert_same(jitted(x), mod(x))
    assert counter.frame_count == 2
    mod.train()
    torch.manual_seed(2)
    got = jitted(x)
    torch.manual_seed(2)
    assert_same(got, mod(x))
    assert counter.frame_count == 2  # the training entry is reused


def test_batchnorm_train_and_eval() -> None:
    torch.manual_seed(0)
    mod = nn.BatchNorm1d(3)
    reference = copy.deepcopy(mod)
    jitted, counter = jit_counted(mod)
    x = torch.randn(8, 3) * 3 + 1
    for _ in range(2):
        assert_same(jitted(x), reference(x))
    torch.testing.assert_close(mod.running_mean, reference.running_mean)
    torch.testing.assert_close(mod.running_var, reference.running_var)
    assert int(mod.num_batches_tracked) == int(reference.num_batches_tracked) == 2
    mod.eval()
    reference.eval()
    assert_same(jitted(x), reference(x))  # uses the running statistics
    assert counter.frame_count == 2


def test_submodule_swapped() -> None:
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    jitted, counter = jit_counted(mod)
    x = torch.randn(4, 3)
    assert_same(jitted(x), mod(x))
    mod[1] = nn.Tanh()
    assert_same(jitted(x), mod(x))
    mod[0] = nn.Linear(3, 3)
    assert_same(jitted(x), mod(x))
    assert counter.frame_count == 3


def test_forward_hook_registered_on_a_submodule_after_compiling() -> None:
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    jitted, _ = jit_counted(mod)
    x = torch.randn(4, 3)
    assert_same(jitted(x), mod(x))
    calls: list[str] = []

    def hook(m: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
        calls.append(type(m).__name__)
        return out * 10

    handle = mod[0].register_forward_hook(hook)
    got = jitted(x)
    assert calls == ["Linear"]
    assert_same(got, mod(x))
    handle.remove()
    assert_same(jitted(x), mod(x))
    assert calls == ["Linear", "Linear"]


def test_forward_pre_hook_on_a_global_module_after_compiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(2, 2)
    monkeypatch.setitem(globals(), "LAYER", layer)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return LAYER(x) * 2  # noqa: F821 - set above through globals()

    jitted, _ = jit_counted(fn)
    x = torch.randn(3, 2)
    assert_same(jitted(x), fn(x))
    layer.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    assert_same(jitted(x), fn(x))


def test_global_module_hook_registered_after_compiling() -> None:
    torch.manual_seed(0)
    mod = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    jitted, _ = jit_counted(mod)
    x = torch.randn(3, 2)
    jitted(x)
    calls: list[str] = []
    handle = nn.modules.module.register_module_forward_hook(
        lambda m, args, out: calls.append(type(m).__name__)
    )
    try:
        got = jitted(x)
        compiled_calls = [c for c in calls if c in ("Linear", "ReLU")]
        calls.clear()
        want = mod(x)
        eager_calls = [c for c in calls if c in ("Linear", "ReLU")]
    finally:
        handle.remove()
    assert_same(got, want)
    assert compiled_calls == eager_calls == ["Linear", "ReLU"]


# --- global state --------------------------------------------------------------------------------


def test_grad_mode() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x * w).sum(0)

    jitted, counter = jit_counted(fn)
    x = torch.randn(3, 2)
    w = torch.randn(2, requires_grad=True)
    assert_same(jitted(x, w), fn(x, w))
    with torch.no_grad():
        got, want = jitted(x, w), fn(x, w)
    assert not want.requires_grad
    assert_same(got, want)
    assert counter.frame_count == 2
    assert jitted(x, w).requires_grad  # back to the first entry
    assert counter.frame_count == 2


def test_grad_mode_read_in_the_function() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if torch.is_grad_enabled() else x * 3

    jitted, _ = jit_counted(fn)
    x = torch.randn(3)
    assert_same(jitted(x), fn(x))
    with torch.no_grad():
        assert_same(jitted(x), fn(x))
    with torch.enable_grad():
        assert_same(jitted(x), fn(x))


def test_autocast_cpu() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).relu()

    jitted, _ = jit_counted(fn)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    assert_same(jitted(x, w), fn(x, w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = jitted(x, w), fn(x, w)
    assert want.dtype == torch.bfloat16
    assert got.dtype == want.dtype
    assert_same(got, want)
    got = jitted(x, w)
    assert got.dtype == torch.float32


def test_autocast_read_in_the_function() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if torch.is_autocast_enabled("cpu") else x * 3

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    assert_same(jitted(x), fn(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert_same(jitted(x), fn(x))
    assert counter.frame_count == 2


def test_autocast_dtype_change() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x @ w
        return y.float() if y.dtype == torch.bfloat16 else y * 2

    jitted, _ = jit_counted(fn)
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert_same(jitted(x, w), fn(x, w))
    with torch.autocast("cpu", dtype=torch.float16):
        assert_same(jitted(x, w), fn(x, w))


def test_default_dtype() -> None:
    def fn() -> torch.Tensor:
        return torch.ones(3) * 2

    jitted, counter = jit_counted(fn)
    assert_same(jitted(), fn())
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got, want = jitted(), fn()
    finally:
        torch.set_default_dtype(old)
    assert want.dtype == torch.float64
    assert_same(got, want)
    assert counter.frame_count == 2
    assert jitted().dtype == torch.float32


def test_deterministic_algorithms_flag() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if torch.are_deterministic_algorithms_enabled() else x * 3

    jitted, counter = jit_counted(fn)
    x = torch.randn(3)
    assert_same(jitted(x), fn(x))
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(not old)
    try:
        got, want = jitted(x), fn(x)
    finally:
        torch.use_deterministic_algorithms(old)
    assert_same(got, want)
    assert counter.frame_count == 2


# --- recompile limit and the recompiles log ----------------------------------------------------


def test_recompile_limit_warns_once_then_runs_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framejit.config, "recompile_limit", 3)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.cos() * x.shape[0]

    jitted, counter = jit_counted(fn)
    for n in (1, 2, 3):
        x = torch.randn(n)
        assert_same(jitted(x), fn(x))
    assert counter.frame_count == 3
    x4 = torch.randn(4)
    with pytest.warns(UserWarning, match=r"recompile_limit=3") as record:
        got = jitted(x4)
    assert_same(got, fn(x4))
    assert len(record) == 1
    assert record[0].filename == __file__  # points at the caller, not at framejit
    message = str(record[0].message)
    assert "fn" in message and "eagerly" in message
    assert "Reasons:" in message and "size=" in message and "shape=(" in message  # the guard
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        for n in (5, 6, 4, 1, 2):
            x = torch.randn(n)
            assert_same(jitted(x), fn(x))
    assert counter.frame_count == 3


def test_recompile_limit_warning_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    # under `-W error` the warning would be an exception out of the user's call: logged instead
    monkeypatch.setattr(framejit.config, "recompile_limit", 2)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * x.shape[0]

    jitted, _ = jit_counted(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (1, 2, 3, 4):
            x = torch.randn(n)
            assert_same(jitted(x), fn(x))


def test_recompiles_log_names_the_failing_guard(capsys: pytest.CaptureFixture[str]) -> None:
    def fn(x: torch.Tensor, n: int) -> torch.Tensor:
        return x * n

    jitted, _ = jit_counted(fn)
    framejit.set_logs(recompiles=True)
    x = torch.randn(3)
    jitted(x, 2)
    assert "recompiling" not in capsys.readouterr().err
    jitted(x, 3)
    err = capsys.readouterr().err
    assert "[framejit:recompiles]" in err
    assert re.search(r"recompiling \S*\bfn:", err)
    assert "L['n'] == 2" in err  # the guard that failed
    assert "actual: 3" in err
    assert f"{__file__}:" in err  # where the guard came from
    jitted(torch.randn(4), 3)
    err = capsys.readouterr().err
    assert "check_tensor(L['x']" in err and "shape=(4,)" in err


# --- compile_guards unit tests -----------------------------------------------------------------


def _noop() -> None:
    pass


def test_compile_guards_keeps_source_and_checks(tensor_guard_language: str) -> None:
    guards = [
        Guard(LocalSource("n"), GuardKind.CONSTANT_MATCH, 3, "f.py:5 in f"),
        Guard(
            LocalSource("x"), GuardKind.TENSOR_MATCH, TensorMeta.of(torch.ones(2)), "f.py:3 in f"
        ),
        Guard(LocalSource("xs"), GuardKind.LENGTH_CHECK, 2, "f.py:6 in f"),
    ]
    compiled = compile_guards(guards, ("x", "n", "xs"), name="guard_f")
    source = compiled.source
    assert source.startswith("def guard_f(F, L_x, L_n, L_xs):")
    assert "L_n == 3" in source
    if tensor_guard_language == "python":
        assert "L_x.shape == (2,)" in source and "L_x.stride() == (1,)" in source
    else:  # one call of the C++ check with the tensor and its spec
        assert re.search(r"___check\(L_x, ___Spec_0x[0-9a-f]+\)", source)
    assert "len(L_xs) == 2" in source
    assert "# f.py:5 in f" in source
    compile(source, "<check>", "exec")  # the kept text is the code that runs
    ones = torch.ones(2)
    assert compiled.check(_noop, ones, 3, [1, 2]) is True
    assert compiled.check(_noop, ones, 4, [1, 2]) is False
    assert compiled.check(_noop, ones, 3.0, [1, 2]) is False
    assert compiled.check(_noop, torch.ones(3), 3, [1, 2]) is False
    assert compiled.check(_noop, ones.double(), 3, [1, 2]) is False
    assert compiled.check(_noop, ones.requires_grad_(), 3, [1, 2]) is False
    assert compiled.check(_noop, torch.ones(2), 3, [1]) is False


def test_guards_are_ordered_cheapest_first() -> None:
    guards = [
        Guard(LocalSource("x"), GuardKind.TENSOR_MATCH, TensorMeta.of(torch.ones(2))),
        Guard(LocalSource("xs"), GuardKind.LENGTH_CHECK, 1),
        Guard(LocalSource("n"), GuardKind.CONSTANT_MATCH, 3),
        Guard(None, GuardKind.GLOBAL_STATE, GlobalState.current()),
    ]
    compiled = compile_guards(guards, ("x", "n", "xs"))
    kinds = [g.kind for g in compiled.guards]
    assert kinds == [
        GuardKind.GLOBAL_STATE,
        GuardKind.CONSTANT_MATCH,
        GuardKind.LENGTH_CHECK,
        GuardKind.TENSOR_MATCH,
    ]
    src = compiled.source.split("\n", 1)[1]  # the body, after the signature
    tensor_check = re.search(r"\bL_x\b", src)
    assert tensor_check
    assert (
        src.index("state_check" if "state_check" in src else "is_grad_enabled")
        < src.index("L_n == 3")
        < src.index("len(L_xs)")
        < (tensor_check.start())
    )


def test_why_failed_names_the_first_failing_guard_with_the_actual_value() -> None:
    guards = [
        Guard(LocalSource("n"), GuardKind.CONSTANT_MATCH, 3, "f.py:5 in f"),
        Guard(
            LocalSource("x"), GuardKind.TENSOR_MATCH, TensorMeta.of(torch.ones(2)), "f.py:3 in f"
        ),
    ]
    compiled = compile_guards(guards, ("x", "n"))
    assert compiled.why_failed(_noop, torch.ones(2), 3) is None
    why = compiled.why_failed(_noop, torch.ones(2), 7)
    assert why is not None
    assert "L['n'] == 3" in why and "f.py:5 in f" in why and "actual: 7" in why
    # Both fail: the first in check order (the constant) is named, not the tensor.
    why = compiled.why_failed(_noop, torch.ones(5), 7)
    assert "L['n']" in why and "TENSOR_MATCH" not in why
    why = compiled.why_failed(_noop, torch.ones(5, dtype=torch.float64), 3)
    assert "check_tensor(L['x']" in why and "f.py:3 in f" in why
    assert "dtype=torch.float64" in why and "shape=(5,)" in why


def test_shared_sub_expressions_are_loaded_once() -> None:
    lin = nn.Linear(2, 3)
    mod = LocalSource("m")
    params = AttrSource(mod, "_parameters")
    guards = [
        Guard(mod, GuardKind.MODULE_MATCH, (lin, True)),
        Guard(ItemSource(params, "weight"), GuardKind.TENSOR_MATCH, TensorMeta.of(lin.weight)),
        Guard(ItemSource(params, "bias"), GuardKind.TENSOR_MATCH, TensorMeta.of(lin.bias)),
    ]
    compiled = compile_guards(guards, ("m",))
    source = compiled.source
    if "module_check" in source:  # C++: the module and its tensors are one call (groups below)
        assert "L_m._parameters" not in source
        source = compile_guards(guards[1:], ("m",)).source
        assert source.count("L_m._parameters") == 1  # loaded once, into a temporary
    else:
        assert source.count("L_m._parameters") == 1  # loaded once, into a temporary
        lines = [line.strip() for line in source.splitlines()]
        temp_line = next(line for line in lines if line.endswith("= L_m._parameters"))
        temp = temp_line.split(" = ")[0]
        assert f"{temp}['weight']" in source and f"{temp}['bias']" in source
        # The temporary is bound only after the guard on its base has passed.
        assert source.index("L_m is") < source.index(temp_line)
    assert compiled.check(_noop, lin) is True
    lin.eval()
    assert compiled.check(_noop, lin) is False
    lin.train()
    lin.bias = nn.Parameter(torch.zeros(4))
    assert compiled.check(_noop, lin) is False
    assert "L['m']._parameters['bias']" in compiled.why_failed(_noop, lin)


def test_exceptions_inside_checks_count_as_failure() -> None:
    class Flaky:
        broken = False

        @property
        def value(self) -> int:
            if self.broken:
                raise RuntimeError("cannot read value")
            return 1

    obj = Flaky()
    guards = [
        Guard(AttrSource(LocalSource("o"), "value"), GuardKind.CONSTANT_MATCH, 1, "f.py:2 in f"),
        Guard(ItemSource(LocalSource("d"), "k"), GuardKind.CONSTANT_MATCH, 2, "f.py:3 in f"),
    ]
    compiled = compile_guards(guards, ("o", "d"))
    assert compiled.check(_noop, obj, {"k": 2}) is True
    assert compiled.check(_noop, obj, {}) is False  # KeyError
    assert compiled.check(_noop, obj, None) is False  # TypeError
    why = compiled.why_failed(_noop, obj, {})
    assert "L['d']['k']" in why and "KeyError" in why
    obj.broken = True
    assert compiled.check(_noop, obj, {"k": 2}) is False
    why = compiled.why_failed(_noop, obj, {"k": 2})
    assert "L['o'].value" in why and "RuntimeError" in why and "cannot read value" in why


def test_global_and_free_variable_sources() -> None:
    k = 4

    def fn() -> int:
        return k + SCALE_FOR_GUARD_TEST  # noqa: F821 - only its globals and closure are used

    guards = [
        Guard(GlobalSource("SCALE_FOR_GUARD_TEST"), GuardKind.CONSTANT_MATCH, 1.5),
        Guard(FreeVarSource("k", 0), GuardKind.CONSTANT_MATCH, 4),
    ]
    compiled = compile_guards(guards, ())
    assert "G = F.__globals__" in compiled.source
    assert "F.__closure__[0].cell_contents" in compiled.source
    globals()["SCALE_FOR_GUARD_TEST"] = 1.5
    try:
        assert compiled.check(fn) is True
        globals()["SCALE_FOR_GUARD_TEST"] = 2.5
        assert compiled.check(fn) is False
        assert "actual: 2.5" in compiled.why_failed(fn)
        globals()["SCALE_FOR_GUARD_TEST"] = 1.5
        k = 5
        assert compiled.check(fn) is False
        assert "actual: 5" in compiled.why_failed(fn)
        del globals()["SCALE_FOR_GUARD_TEST"]
        assert compiled.check(fn) is False  # a missing global is a failure, not an error
    finally:
        globals().pop("SCALE_FOR_GUARD_TEST", None)


def test_global_state_guard() -> None:
    compiled = compile_guards([Guard(None, GuardKind.GLOBAL_STATE, GlobalState.current())], ())
    assert compiled.check(_noop) is True
    with torch.no_grad():
        assert compiled.check(_noop) is False
        assert "global_state(grad_enabled=True" in compiled.why_failed(_noop)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled.check(_noop) is False
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert compiled.check(_noop) is False
    finally:
        torch.set_default_dtype(old)
    assert compiled.check(_noop) is True


# --- objects reached twice, names shadowed later ---------------------------------------------


class Counter2:
    def __init__(self) -> None:
        self.v = 0

    def scale(self) -> int:
        return 2


def bumps_two_objects(x: torch.Tensor, a: Counter2, b: Counter2) -> torch.Tensor:
    a.v = a.v + 1
    b.v = b.v + 10
    return x * a.v


def appends_to_two_lists(x: torch.Tensor, a: list[Any], b: list[Any]) -> tuple[int, int]:
    a.append(x.sum())
    b.append(len(a))
    return len(a), len(b)


SHARED: list[Any] = []


def appends_to_a_global_and_an_argument(x: torch.Tensor, items: list[Any]) -> int:
    SHARED.append(x.sum())
    items.append(1)
    return len(SHARED) + len(items)


def test_objects_the_trace_changes_must_stay_distinct_objects() -> None:
    # Compiled for two distinct objects, then called with one object twice: the entry that
    # tracked them separately would lose a write. A NO_ALIASING guard sends the call to a new
    # compile (which sees one object).
    x = torch.ones(1)
    jitted, counter = jit_counted(bumps_two_objects)
    jitted(x, Counter2(), Counter2())
    o, e = Counter2(), Counter2()
    torch.testing.assert_close(jitted(x, o, o), bumps_two_objects(x, e, e))
    assert o.v == e.v == 11
    assert counter.frame_count == 2
    a, b = Counter2(), Counter2()  # distinct again: the first entry
    torch.testing.assert_close(jitted(x, a, b), x)
    assert (a.v, b.v) == (1, 10) and counter.frame_count == 2

    jitted, _ = jit_counted(appends_to_two_lists)
    jitted(x, [], [])
    got, expected = [], []
    assert jitted(x, got, got) == appends_to_two_lists(x, expected, expected) == (2, 2)
    assert len(got) == 2 and got[1] == expected[1] == 1

    jitted, _ = jit_counted(appends_to_a_global_and_an_argument)
    SHARED.clear()
    jitted(x, [])
    SHARED.clear()
    assert jitted(x, SHARED) == 4 and len(SHARED) == 2


def calls_scale(x: torch.Tensor, c: Counter2) -> torch.Tensor:
    return x * c.scale()


class Linearish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def calls_module(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m(x) + 1


def test_an_instance_attribute_that_shadows_a_method_is_seen() -> None:
    x = torch.ones(1)
    jitted, counter = jit_counted(calls_scale)
    c = Counter2()
    torch.testing.assert_close(jitted(x, c), x * 2)
    c.scale = lambda: 99  # type: ignore[method-assign]
    torch.testing.assert_close(jitted(x, c), calls_scale(x, c))
    assert counter.frame_count == 2

    # the patch accelerate and PEFT apply to a submodule: `module.forward = ...`
    jitted, counter = jit_counted(calls_module)
    m, x = Linearish(), torch.ones(1, 2)
    jitted(m, x)
    m.lin.forward = types.MethodType(lambda self, x: x * 0, m.lin)
    torch.testing.assert_close(jitted(m, x), calls_module(m, x))
    torch.testing.assert_close(jitted(m, x), torch.ones(1, 2))
    assert counter.frame_count == 2


def uses_len(x: torch.Tensor) -> torch.Tensor:
    return x * (len(x) + abs(-1))


def test_a_global_that_later_shadows_a_builtin_is_seen() -> None:
    jitted, counter = jit_counted(uses_len)
    x = torch.ones(3)
    torch.testing.assert_close(jitted(x), x * 4)
    globals()["len"] = lambda v: 100
    try:
        torch.testing.assert_close(jitted(x), uses_len(x))
        torch.testing.assert_close(jitted(x), x * 101)
    finally:
        del globals()["len"]
    torch.testing.assert_close(jitted(x), x * 4)
    assert counter.frame_count == 2


# --- a module's structure, changed between calls ----------------------------------------------


def test_a_container_that_grows_or_shrinks_is_seen() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    jitted = framejit.jit(model, backend="eager")
    x = torch.randn(2, 3)
    torch.testing.assert_close(jitted(x), model(x))
    model.append(nn.Linear(3, 3))
    torch.testing.assert_close(jitted(x), model(x))
    del model[0]
    torch.testing.assert_close(jitted(x), model(x))

    layers = nn.ModuleList([nn.Linear(3, 3)])

    def through(x: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            x = layer(x)
        return x * len(layers)

    jitted_fn = framejit.jit(through, backend="eager")
    torch.testing.assert_close(jitted_fn(x), through(x))
    layers.append(nn.Linear(3, 3))
    torch.testing.assert_close(jitted_fn(x), through(x))


class OptionalShift(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("shift", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.shift is None else x + self.shift


def test_a_none_buffer_set_later_is_seen() -> None:
    model = OptionalShift()
    jitted = framejit.jit(model, backend="eager")
    x = torch.zeros(3)
    torch.testing.assert_close(jitted(x), x)
    model.shift = torch.ones(3)
    torch.testing.assert_close(jitted(x), model(x))
    torch.testing.assert_close(jitted(x), torch.ones(3))


class Tripled(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


def test_a_modules_class_or_forward_replaced_is_seen() -> None:
    x = torch.ones(1, 2)
    inner = nn.Sequential(nn.Linear(2, 2))
    jitted = framejit.jit(inner, backend="eager")
    jitted(x)
    inner[0].__class__ = Tripled  # a submodule's class
    torch.testing.assert_close(jitted(x), x * 3)

    top = nn.Linear(2, 2)
    jitted = framejit.jit(top, backend="eager")
    jitted(x)
    top.__class__ = Tripled  # the compiled module's own class
    torch.testing.assert_close(jitted(x), x * 3)
    top.forward = lambda x: x * 5  # its forward, on the instance
    torch.testing.assert_close(jitted(x), x * 5)


def makes_a_layer(x: torch.Tensor) -> torch.Tensor:
    return nn.Linear(4, 2)(x)


def test_a_module_built_in_the_function_draws_the_same_random_numbers() -> None:
    # The trace builds it once to see what it holds; that build must not use the RNG.
    x = torch.randn(3, 4)
    jitted = framejit.jit(makes_a_layer, backend="eager")
    for seed in range(2):
        torch.manual_seed(seed)
        expected, after = makes_a_layer(x), torch.rand(2)
        torch.manual_seed(seed)
        got, after_jit = jitted(x), torch.rand(2)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(after_jit, after)


# --- patched torch functions and class attributes ----------------------------------------------


def attends(q: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, q, q).sum() + F.gelu(q).sum()


def test_a_patched_torch_function_is_seen() -> None:
    # libraries replace attention or activations in torch's namespace between calls
    q = torch.randn(1, 2, 4, 8)
    jitted, counter = jit_counted(attends)
    torch.testing.assert_close(jitted(q), attends(q))
    sdpa, gelu = torch.nn.functional.scaled_dot_product_attention, F.gelu
    calls: list[str] = []

    def my_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        calls.append("mine")
        return v * 0

    try:
        torch.nn.functional.scaled_dot_product_attention = my_attention
        torch.testing.assert_close(jitted(q), attends(q))
        F.gelu = lambda t: t * 100
        torch.testing.assert_close(jitted(q), attends(q))
    finally:
        torch.nn.functional.scaled_dot_product_attention, F.gelu = sdpa, gelu
    assert calls == ["mine", "mine", "mine", "mine"]
    torch.testing.assert_close(jitted(q), attends(q))
    assert counter.frame_count == 3


class WithProperty:
    @property
    def scale(self) -> int:
        return 2


def reads_property(x: torch.Tensor, obj: WithProperty) -> torch.Tensor:
    return x * obj.scale


def test_a_replaced_property_is_seen() -> None:
    x, obj = torch.ones(2), WithProperty()
    jitted, _ = jit_counted(reads_property)
    torch.testing.assert_close(jitted(x, obj), x * 2)
    original = WithProperty.scale
    WithProperty.scale = property(lambda self: 9)  # type: ignore[assignment]
    try:
        torch.testing.assert_close(jitted(x, obj), x * 9)
    finally:
        WithProperty.scale = original  # type: ignore[method-assign]


# --- attributes that appear later, the function itself changed, function modes -------------


class Bare:
    pass


class Caching(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if hasattr(self, "cache") else x * 3


def test_an_attribute_found_missing_then_set_is_seen() -> None:
    x = torch.ones(2)
    obj = Bare()

    def reads(t: torch.Tensor) -> torch.Tensor:
        first = t * 2 if hasattr(obj, "tag") else t * 3
        try:
            k = obj.k
        except AttributeError:
            k = 1
        return first + getattr(obj, "scale", 10) * k

    jitted, _ = jit_counted(reads)
    torch.testing.assert_close(jitted(x), reads(x))
    obj.tag = True
    torch.testing.assert_close(jitted(x), reads(x))
    obj.k = 5
    torch.testing.assert_close(jitted(x), reads(x))
    obj.scale = 7
    torch.testing.assert_close(jitted(x), reads(x))

    model = Caching()
    compiled = framejit.jit(model, backend="eager")
    torch.testing.assert_close(compiled(x), x * 3)
    model.cache = torch.zeros(1)  # a buffer-like attribute set after the first call
    torch.testing.assert_close(compiled(x), x * 2)


def scaled(t: torch.Tensor, s: int = 2) -> torch.Tensor:
    return t * s


def tripled(t: torch.Tensor, s: int = 2) -> torch.Tensor:
    return t * 3


class WithStatic:
    @staticmethod
    def factor() -> int:
        return 2


def uses_static(t: torch.Tensor) -> torch.Tensor:
    return t * WithStatic.factor()


def test_the_functions_own_defaults_code_and_static_methods_are_followed() -> None:
    x = torch.ones(2)
    fn = types.FunctionType(scaled.__code__, scaled.__globals__, "scaled", scaled.__defaults__)
    jitted = framejit.jit(fn, backend="eager")
    torch.testing.assert_close(jitted(x, s=2), x * 2)
    torch.testing.assert_close(jitted(x, s=3), x * 3)
    fn.__defaults__ = (9,)
    torch.testing.assert_close(jitted(x), x * 9)
    fn.__code__ = tripled.__code__
    torch.testing.assert_close(jitted(x), x * 3)

    jitted = framejit.jit(uses_static, backend="eager")
    torch.testing.assert_close(jitted(x), x * 2)
    original = WithStatic.__dict__["factor"]
    WithStatic.factor = staticmethod(lambda: 10)  # type: ignore[method-assign]
    try:
        torch.testing.assert_close(jitted(x), x * 10)
    finally:
        WithStatic.factor = original  # type: ignore[method-assign]


def makes_a_tensor(t: torch.Tensor) -> tuple[str, torch.Size]:
    made = torch.empty(2)
    return made.device.type, t.shape


def test_a_torch_function_mode_entered_later_is_seen() -> None:
    # `with torch.device("meta"):` changes what factory calls make
    x = torch.ones(2)
    jitted = framejit.jit(makes_a_tensor, backend="eager")
    assert jitted(x)[0] == "cpu"
    with torch.device("meta"):
        assert jitted(x)[0] == makes_a_tensor(x)[0] == "meta"
    assert jitted(x)[0] == "cpu"


def test_grad_fn_and_version_are_read_as_they_are_now() -> None:
    def branch(t: torch.Tensor) -> torch.Tensor:
        return t * 2 if t.grad_fn is None else t * 3

    def version(t: torch.Tensor) -> torch.Tensor:
        t.add_(1)
        return t * t._version

    jitted = framejit.jit(branch, backend="eager")
    leaf = torch.ones(2, requires_grad=True)
    torch.testing.assert_close(jitted(leaf), leaf * 2)
    made = leaf * 1  # requires grad too, but has a grad_fn
    torch.testing.assert_close(jitted(made), made * 3)

    jitted = framejit.jit(version, backend="eager")
    for _ in range(2):
        x, y = torch.zeros(2), torch.zeros(2)
        x.add_(5)
        y.add_(5)
        torch.testing.assert_close(jitted(x), version(y))


_SENTINEL = object()


class _HasK:
    K = 2


def _is_sentinel(x: torch.Tensor, a: object) -> torch.Tensor:
    return x * (1 if a is _SENTINEL else 2)


def _is_same(x: torch.Tensor, a: object, b: object) -> torch.Tensor:
    return x * (1 if a is b else 2)


def _class_constant(x: torch.Tensor, obj: _HasK) -> torch.Tensor:
    return x * type(obj).K


def _tensor_attribute(x: torch.Tensor) -> torch.Tensor:
    return x * getattr(x, "scale", 1) + (2 if hasattr(x, "tag") else 3)


def test_identity_class_attributes_and_tensor_attributes_are_guarded() -> None:
    """Three answers were fixed at the first call with no guard: `a is SENTINEL` / `a is b`
    between objects from outside, `type(obj).K`, and `hasattr(x, name)` / `getattr(x, name,
    default)` of a Python attribute set on a tensor (always False)."""
    x = torch.ones(2)
    fn = framejit.jit(_is_sentinel, backend="eager")
    for a in (_SENTINEL, object(), _SENTINEL):
        torch.testing.assert_close(fn(x, a), _is_sentinel(x, a))
    fn = framejit.jit(_is_same, backend="eager")
    c, d = _HasK(), _HasK()
    for a, b in ((c, d), (c, c), (d, c)):
        torch.testing.assert_close(fn(x, a, b), _is_same(x, a, b))
    fn = framejit.jit(_class_constant, backend="eager")
    obj = _HasK()
    torch.testing.assert_close(fn(x, obj), _class_constant(x, obj))
    _HasK.K = 3
    try:
        torch.testing.assert_close(fn(x, obj), _class_constant(x, obj))
    finally:
        _HasK.K = 2
    fn = framejit.jit(_tensor_attribute, backend="eager")
    t = torch.ones(2)
    torch.testing.assert_close(fn(t), _tensor_attribute(t))
    t.scale, t.tag = 5, "t"
    torch.testing.assert_close(fn(t), _tensor_attribute(t))
    u = torch.ones(2)
    u.scale = 7
    torch.testing.assert_close(framejit.jit(_tensor_attribute)(u), _tensor_attribute(u))

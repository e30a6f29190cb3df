"""Calls eager raises for raise eager's error under the Triton backend, with its type and
message: reductions without an identity (max, min, argmax, inf norms) over no elements, also
when the size is symbolic (the wrapper checks it at call time), and ops called with a dtype
eager has no kernel for (they are not lowered: the aten op runs, and raises)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from framejit.backend import lookup_backend
from framejit.backend.triton import compile_graph, stages
from framejit.backend.triton.symbolic import Specializing
from torch.fx.experimental.proxy_tensor import make_fx
from triton_helpers import aten_stages, check, kernel_device, on_fake_cuda, require_interpreter

import framejit


def _eager_error(fn: Callable[..., Any], *args: Any) -> Exception:
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - eager's error is the reference
        return e
    raise AssertionError("eager did not raise")


def check_raises(fn: Callable[..., Any], *args: Any) -> None:
    """`fn` through the triton backend raises eager's exception type and message."""
    require_interpreter()
    expected = _eager_error(fn, *args)
    framejit.reset()
    with torch.no_grad(), pytest.raises(type(expected), match=re.escape(str(expected))):
        framejit.jit(fn, backend="triton")(*args)


EMPTY = {
    "max": (lambda x: x.max(), torch.zeros(0, 3)),
    "min": (lambda x: x.min(), torch.zeros(0)),
    "int_max": (lambda x: x.max(), torch.zeros(0, dtype=torch.long)),
    "bool_min": (lambda x: x.min(), torch.zeros(2, 0, dtype=torch.bool)),
    "max_dim": (lambda x: x.max(1), torch.zeros(3, 0)),
    "min_dim_values": (lambda x: x.min(-1).values + 1, torch.zeros(3, 0)),
    "max_dim_keepdim": (lambda x: x.max(0, keepdim=True), torch.zeros(0, 2)),
    "amax": (lambda x: x.amax(1), torch.zeros(3, 0)),
    "argmax": (lambda x: x.argmax(), torch.zeros(0)),
    "aminmax": (lambda x: torch.aminmax(x), torch.zeros(0)),
    "inf_norm": (lambda x: torch.linalg.vector_norm(x, float("inf"), dim=1), torch.zeros(3, 0)),
    "negative_norm": (lambda x: torch.linalg.vector_norm(x, -1.0), torch.zeros(0, 3)),
}


@pytest.mark.parametrize("name", sorted(EMPTY))
def test_reductions_without_identity_over_no_elements_raise(name: str) -> None:
    check_raises(*EMPTY[name])


def test_reductions_without_identity_over_empty_kept_dims_run() -> None:
    # the reduced dims have elements, only the result is empty: eager gives empty results
    x = torch.zeros(0, 3)
    check(lambda x: (*x.max(1), x.min(1).values, x.amax(1), x.argmax(1)), x)


def _arange_max(x):
    return torch.arange(x.shape[0] - 2).max() + x.sum()


def _expand_min(x):
    return x[:1].expand(x.shape[0] - 2, 3).min(0)


def _inf_norm(x):
    return torch.linalg.vector_norm(x[:1].expand(x.shape[0] - 2, 3), float("inf"), dim=0)


@pytest.mark.parametrize("fn", [_arange_max, _expand_min, _inf_norm])
def test_symbolic_size_checked_at_call_time(fn) -> None:
    """A reduced size that may be 0 (`s0 - 2`): one module for every size, whose wrapper
    raises eager's error where it is 0."""
    require_interpreter()
    gm = make_fx(fn, tracing_mode="symbolic")(torch.randn(5, 3))
    source = stages(gm).source
    assert re.search(r"if -2 \+ s\d+ == 0:", source), source
    call = compile_graph(gm, [torch.randn(5, 3)])
    assert not isinstance(call, Specializing)
    for n in (3, 6):
        x = torch.randn(n, 3)
        expected = fn(x)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for g, e in zip(call(x), expected):
            torch.testing.assert_close(g, e)
    x = torch.randn(2, 3)
    expected = _eager_error(fn, x)
    with pytest.raises(type(expected), match=re.escape(str(expected))):
        call(x)


@pytest.mark.parametrize("fn", [_arange_max, _expand_min])
def test_symbolic_size_through_jit(fn) -> None:
    require_interpreter()
    framejit.reset()
    compiled = framejit.jit(fn, backend="triton", dynamic=True)
    for n in (3, 4, 5):
        torch.testing.assert_close(compiled(torch.ones(n, 3)), fn(torch.ones(n, 3)))
    expected = _eager_error(fn, torch.ones(2, 3))
    with pytest.raises(type(expected), match=re.escape(str(expected))):
        compiled(torch.ones(2, 3))


B = torch.tensor([[True, False, True], [False, False, True]])
INTS = torch.tensor([[1, 2, 3], [4, 0, 6]])
F32 = torch.tensor([[1.5, -2.0, 0.0], [3.0, 0.5, -1.0]])

REJECTED = {
    "bool_argmax": (lambda x: x.argmax(1), B),
    "bool_argmin": (lambda x: x.argmin(), B),
    "bool_argmax_keepdim": (lambda x: x.argmax(0, keepdim=True), B),
    "int_std": (lambda x: x.std(), INTS),
    "int_var": (lambda x: x.var(0), INTS),
    "int8_var": (lambda x: x.var(), INTS.to(torch.int8)),
    "bool_std": (lambda x: x.std(1), B),
    "int_var_mean": (lambda x: torch.var_mean(x), INTS),
    "bool_abs": (lambda x: x.abs(), B),
    "bool_floor": (lambda x: x.floor(), B),
    "bool_round": (lambda x: x.round(), B),
    "bool_relu": (lambda x: torch.relu(x), B),
    "bool_clamp_min": (lambda x: x.clamp(min=True), B),
    "bool_fmod": (lambda x: torch.fmod(x, x), B),
    "bool_remainder": (lambda x: x % True, B),
    "bool_floor_divide": (lambda x: torch.div(x, x, rounding_mode="floor"), B),
    "bool_trunc_divide": (lambda x: torch.div(x, x, rounding_mode="trunc"), B),
    "bool_lshift": (lambda x: x << x, B),
    "bool_minus_int": (lambda x: x - 1, B),
    "int_minus_bool": (lambda x: x - (x > 2), INTS),
    "float_minus_true": (lambda x: x - True, F32),
    "rsub_bool": (lambda x: 1 - x, B),
    "bool_arange": (lambda x: torch.arange(3, dtype=torch.bool) & x, B),
    "int_softmax": (lambda x: torch.softmax(x, 1), INTS),
    "int_layer_norm": (lambda x: F.layer_norm(x, (3,)), INTS),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_dtypes_eager_rejects_raise(name: str) -> None:
    check_raises(*REJECTED[name])


ACCEPTED = {
    "bool_max_dim": lambda x: tuple(x.max(1)),
    "bool_amin": lambda x: x.amin(0),
    "bool_remainder_int": lambda x: x % 2,
    "bool_floor_divide_int": lambda x: torch.div(x, 2, rounding_mode="floor"),
    "bool_clamp_ints": lambda x: x.clamp(0, 1),
    "bool_sign": lambda x: x.sign(),
    "bool_plus_bool": lambda x: x + x,
    "bool_true_divide": lambda x: x / 2,
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_nearby_dtype_calls_eager_accepts_still_run(name: str) -> None:
    check(ACCEPTED[name], B)


INT_DIVISIONS = {
    "floor_divide": lambda a, b: a // b,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "remainder": lambda a, b: a % b,
    "fmod": lambda a, b: torch.fmod(a, b),
}


@pytest.mark.interpreter_only  # CUDA's kernels give a value for a zero divisor, and no error
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
@pytest.mark.parametrize("name", sorted(INT_DIVISIONS))
def test_integer_division_by_zero_raises_as_eager_on_the_cpu(name: str, dtype: torch.dtype) -> None:
    """Eager's CPU kernels raise for an integer zero divisor; so do the kernels: the first
    call (no zero) runs them, the second (a zero in a broadcast divisor) must raise there."""
    require_interpreter()
    fn = INT_DIVISIONS[name]
    a = torch.tensor([[7, -7, 9], [5, -3, 0]], dtype=dtype)
    good, bad = torch.tensor([2, -3, 4], dtype=dtype), torch.tensor([2, 0, 4], dtype=dtype)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, bad)
    compiled = lookup_backend("triton")(torch.fx.symbolic_trace(fn), [a, good])
    assert torch.equal(compiled(a, good)[0], fn(a, good))
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as raised:
        compiled(a, bad)
    assert "framejit Triton kernel" in str(raised.value)  # raised by the kernels' check
    assert torch.equal(compiled(a, good)[0], fn(a, good))  # and nothing is left flagged
    check_raises(fn, a, bad)


def test_a_divisor_that_cannot_be_zero_is_not_checked() -> None:
    a, b = torch.tensor([7, -7, 9]), torch.tensor([2, 1, 3])
    assert "err_ptr" not in aten_stages(lambda x: x // 3 + x % -2, a).source
    # on the CPU a divisor that may be zero is checked (eager raises); not on CUDA, whose
    # eager gives a value and raises nothing
    checked = aten_stages(lambda x, y: x // y, a, b).source
    assert ("err_ptr" in checked) == (kernel_device() == "cpu")
    assert "err_ptr" not in aten_stages(lambda x, y: x // y, *on_fake_cuda(a, b)).source


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_integer_division_by_zero_gives_eagers_values_on_cuda(dtype: torch.dtype) -> None:
    """CUDA's kernels divide by zero as the GPU's integer division does (no error, a value
    eager takes from `a / b` and `a % b` in C++); the kernels' `//` and `%` are the same
    instructions, and the floor and remainder fix-ups are c10's."""
    if kernel_device() != "cuda":
        pytest.skip("CUDA's integer division by zero (the CPU's raises: the test above)")
    a = torch.tensor([[7, -7, 9, 0, -8, 127], [5, -3, 0, 1, -1, 100]], dtype=dtype)
    b = torch.tensor([0, 0, 0, 0, -1, 0], dtype=dtype)
    for name, fn in INT_DIVISIONS.items():
        want = fn(a, b)
        got = lookup_backend("triton")(torch.fx.symbolic_trace(fn), [a, b])(a, b)[0]
        assert torch.equal(got, want), (name, got.tolist(), want.tolist())


@pytest.mark.parametrize("backend", ["aot_eager", "triton"])
def test_heaviside_of_two_dtypes_raises_as_in_eager(backend: str) -> None:
    # the AOT stage's decomposition of heaviside computed a result for operands eager refuses
    require_interpreter()
    a, b = torch.tensor([-1.0, 0.0, 2.0]), torch.full((3,), 0.5, dtype=torch.float16)
    want = _eager_error(torch.heaviside, a, b)
    with pytest.raises(type(want), match="different dtypes"):
        framejit.jit(lambda x, y: torch.heaviside(x, y) * 2, backend=backend)(a, b)
    x, y = torch.tensor([-1.0, 0.0, 2.0]), torch.full((3,), 0.5)
    torch.testing.assert_close(
        framejit.jit(torch.heaviside, backend=backend)(x, y), torch.heaviside(x, y)
    )


FILLS = {
    "full_uint8": (
        lambda x: torch.full((2,), 300, dtype=torch.uint8) + x,
        torch.ones(1, dtype=torch.uint8),
    ),
    "new_full_int8": (lambda x: x.new_full((3,), -129), torch.ones(1, dtype=torch.int8)),
    "full_int32": (lambda x: torch.full((2,), 2**40, dtype=torch.int32), torch.ones(1)),
    "full_nan_int": (lambda x: torch.full((2,), float("nan"), dtype=torch.int32), torch.ones(1)),
    "full_half": (lambda x: torch.full((2,), 70000.0, dtype=torch.half) * x, torch.ones(2)),
    "full_bfloat16": (lambda x: torch.full((2,), 3.4e38, dtype=torch.bfloat16), torch.ones(1)),
    "scalar_tensor_uint8": (
        lambda x: torch.scalar_tensor(300, dtype=torch.uint8) + x,
        torch.ones(1, dtype=torch.uint8),
    ),
}


@pytest.mark.parametrize("name", sorted(FILLS))
def test_fill_value_that_overflows_the_dtype_raises(name: str) -> None:
    check_raises(*FILLS[name])


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.full((), 70000.0, dtype=torch.half) + x,  # one CPU element: not checked
        lambda x: torch.full((1, 1), 3.4e38, dtype=torch.bfloat16) + x,
        lambda x: torch.full((2,), -1, dtype=torch.uint8) + x,  # wraps, as in eager
        lambda x: torch.full((2,), -2.5, dtype=torch.int64) + x,
        lambda x: torch.full((2,), 65504.0, dtype=torch.half) + x,
    ],
)
def test_fill_values_eager_accepts_still_run(fn: Callable[..., Any]) -> None:
    require_interpreter()
    x = torch.zeros(1, dtype=torch.uint8)
    torch.testing.assert_close(framejit.jit(fn, backend="triton")(x), fn(x), rtol=0, atol=0)


POWERS = {
    "half_huge": (lambda x: x**2**40, torch.tensor([-2.5, 0.0, 0.5, 1.5], dtype=torch.half)),
    "half_70000": (lambda x: x**70000.0, torch.ones(3, dtype=torch.half)),
    "bfloat16_1e300": (lambda x: torch.pow(x, 1e300), torch.ones(3, dtype=torch.bfloat16)),
}


@pytest.mark.parametrize("name", sorted(POWERS))
def test_an_exponent_the_tensors_dtype_cannot_hold_raises(name: str) -> None:
    check_raises(*POWERS[name])

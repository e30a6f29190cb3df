"""A Python number that eager converts to the result's dtype with an overflow check (clamp,
where, masked_fill, fill_, lerp, alpha=, ...) raises under every backend as in eager, on a
first call (a constant of the graph) and once the number is a symbolic graph input (automatic
dynamic): frontend/scalar_ranges.py. So does masked_fill's value given as a 0-d tensor."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import framejit
from framejit.testing import CompileCounter

BACKENDS = ["eager", "aot_eager", "triton"]


def f32():
    return torch.tensor([1.0, -2.0, 3.0])


def f16():
    return torch.tensor([1.0, -2.0, 3.0], dtype=torch.float16)


def i8():
    return torch.tensor([1, 2, 3], dtype=torch.int8)


# name: (fn, input, a number that overflows, two that fit)
CASES = {
    "int8_fill": (lambda x, s: x.clone().fill_(s), i8, 300, (5, 7)),
    "int8_where": (lambda x, s: torch.where(x > 1, x, s), i8, 300, (5, 7)),
    "f32_clamp_max": (lambda x, s: torch.clamp(x, max=s), f32, 3.5e38, (0.5, 0.7)),
    "f32_clamp_min": (lambda x, s: x.clamp(min=s), f32, 3.5e38, (0.5, 0.7)),
    "f32_masked_fill": (lambda x, s: x.masked_fill(x > 0, s), f32, 3.5e38, (0.5, 0.7)),
    "f32_add_alpha": (lambda x, s: torch.add(x, x, alpha=s), f32, 1e39, (0.5, 0.7)),
    "f16_masked_fill": (lambda x, s: x.masked_fill(x > 0, s), f16, -1e9, (-10.0, -20.0)),
    "f16_threshold": (lambda x, s: F.threshold(x, 0.5, s), f16, 7e4, (1.0, 2.0)),
    "f32_lerp": (lambda x, s: torch.lerp(x, x * 2, s), f32, 1e39, (0.5, 0.7)),
}


def _outcome(fn, *args):
    try:
        return fn(*args)
    except RuntimeError as exc:
        return exc


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("warm", [False, True], ids=["first_call", "symbolic"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_number_that_does_not_fit_raises_as_in_eager(backend, warm, case):
    fn, make, big, fitting = CASES[case]
    framejit.reset()
    jitted = framejit.jit(fn, backend=backend)
    if warm:  # two values that fit: the number becomes a graph input
        for s in fitting:
            torch.testing.assert_close(jitted(make(), s), fn(make(), s))
    expected = _outcome(fn, make(), big)
    assert isinstance(expected, RuntimeError) and "overflow" in str(expected)
    actual = _outcome(jitted, make(), big)
    assert isinstance(actual, RuntimeError) and str(actual) == str(expected)
    # and values that fit still compute as eager afterwards
    for s in fitting:
        torch.testing.assert_close(jitted(make(), s), fn(make(), s))


def test_the_arithmetic_operands_are_not_checked_as_in_eager():
    """`x * 1e39` gives inf in eager (its other operand is not converted with a check)."""
    fn = lambda x, s: x * s  # noqa: E731
    for backend in BACKENDS:
        framejit.reset()
        torch.testing.assert_close(framejit.jit(fn, backend=backend)(f32(), 1e39), fn(f32(), 1e39))


# masked_fill's value as a 0-d tensor: eager reads it with `.item()` and converts it with the
# same check. name: (fn, the value, whether eager raises)
VALUE_TENSORS = {
    "f32_argument_overflows": (lambda x, v: x.masked_fill(x > 0, v), torch.tensor(-1e9), True),
    "f32_argument_fits": (lambda x, v: x.masked_fill(x > 0, v), torch.tensor(-10.0), False),
    "int_argument_overflows": (lambda x, v: x.masked_fill(x > 0, v), torch.tensor(10**6), True),
    "computed_overflows": (lambda x, v: x.masked_fill(x > 0, v * 1e9), torch.tensor(-1.0), True),
    "constant_overflows": (
        lambda x, v: x.masked_fill(x > 0, torch.tensor(-1e9)),
        torch.tensor(0.0),
        True,
    ),
    "in_place": (lambda x, v: x.clone().masked_fill_(x > 0, v), torch.tensor(-1e9), True),
    "function": (lambda x, v: torch.masked_fill(x, x > 0, v), torch.tensor(-1e9), True),
    "keyword": (lambda x, v: x.masked_fill(x > 0, value=v), torch.tensor(-1e9), True),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(VALUE_TENSORS))
def test_a_0d_tensor_value_that_does_not_fit_raises_as_in_eager(backend, case):
    fn, value, raises = VALUE_TENSORS[case]
    framejit.reset()
    expected = _outcome(fn, f16(), value)
    assert isinstance(expected, RuntimeError) == raises
    actual = _outcome(framejit.jit(fn, backend=backend), f16(), value)
    if raises:
        assert isinstance(actual, RuntimeError) and str(actual) == str(expected)
    else:
        torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, v: x.masked_fill(x > 0, v),  # a value of the same dtype
        lambda x, v: x.masked_fill(x > 0, torch.tensor(torch.finfo(torch.float16).min)),
    ],
    ids=["same_dtype", "constant_that_fits"],
)
def test_a_0d_tensor_value_that_must_fit_compiles(fn):
    """A value of self's dtype (or a narrower one) always fits, and a constant is checked by
    its value: masked_fill stays in the graph."""
    framejit.reset()
    counter = CompileCounter()
    jitted = framejit.jit(fn, backend=counter)
    value = torch.tensor(-3.0, dtype=torch.float16)
    for _ in range(2):
        torch.testing.assert_close(jitted(f16(), value), fn(f16(), value))
    assert counter.frame_count == 1
    assert "masked_fill" in counter.graphs[0].code

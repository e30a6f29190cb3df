"""Pointwise ops across dtypes (int32/int64/bool/float16/bfloat16): arithmetic with torch's
promotion, integer floor division and remainder of negative numbers, shifts, bitwise and
logical ops, where/clamp with scalars, and casts between every pair of dtypes."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import check, check_lowered, require_interpreter

import framejit

torch.manual_seed(0)

INTS = [torch.int32, torch.int64]
ALL = [torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.bool]


def sample(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-20, 20, shape, dtype=dtype)
    return (torch.randn(*shape) * 5).to(dtype)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_arithmetic(dtype: torch.dtype) -> None:
    a = sample(5, 6, dtype=dtype)
    b = torch.randint(1, 7, (5, 6), dtype=dtype) * torch.where(torch.rand(5, 6) > 0.5, 1, -1).to(
        dtype
    )
    check_lowered(
        lambda a, b: (
            a // b,
            torch.div(a, b, rounding_mode="trunc"),
            torch.div(a, b, rounding_mode="floor"),
            a % b,
            torch.fmod(a, b),
            torch.remainder(a, 3),
            a * b - a,
            -a,
            torch.abs(a),
            torch.maximum(a, b),
            a / b,
        ),
        a,
        b,
    )


@pytest.mark.parametrize("dtype", INTS)
def test_bitwise_and_shifts(dtype: torch.dtype) -> None:
    a = sample(4, 5, dtype=dtype)
    s = torch.randint(0, 5, (4, 5), dtype=dtype)
    check_lowered(lambda a, s: (a & s, a | 3, a ^ s, ~a, a << s, a.abs() >> s), a, s)


def test_bool_logic() -> None:
    a, b = sample(6, 3, dtype=torch.bool), sample(6, 3, dtype=torch.bool)
    check_lowered(
        lambda a, b: (
            a & b,
            a | b,
            a ^ b,
            ~a,
            torch.logical_and(a, b),
            torch.logical_or(a, ~b),
            torch.logical_xor(a, b),
            torch.logical_not(a),
            a == b,
            torch.where(a, b, False),
        ),
        a,
        b,
    )


def test_logical_on_numbers() -> None:
    x, y = torch.randn(4, 4), torch.randint(-1, 2, (4, 4))
    check_lowered(lambda x, y: (torch.logical_and(x, y), torch.logical_not(y), x.bool()), x, y)


@pytest.mark.parametrize("dtype", ALL)
def test_where_and_clamp(dtype: torch.dtype) -> None:
    x, y = sample(4, 6, dtype=dtype), sample(6, dtype=dtype)
    if dtype == torch.bool:
        check_lowered(lambda x, y: torch.where(x, y, x), x, y)
        return
    check_lowered(
        lambda x, y: (torch.where(x > y, x, y), torch.where(x > 0, x, 2), x.clamp(-3, 3)), x, y
    )


def _no_fallback(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if "kernels failed" in r.getMessage()]


def test_where_of_two_literals_keeps_its_dtype(caplog: pytest.LogCaptureFixture) -> None:
    """`torch.where(c, 0, 1)` is int64, but `tl.where` of two literals is int32: its min was
    taken with int64's extreme as identity (the kernels failed at their first run), and a
    product past int32 wrapped around (a wrong answer). A float64 one was float32."""
    x = torch.randn(3, 5)
    x[1] = 1.0  # a row of one value only, so the min of that row is 0
    with caplog.at_level(logging.WARNING, logger="framejit.backend"):
        check(lambda x: torch.where(x > 0, 0, 1).amin(-1), x)
        check(lambda x: torch.where(x > 0, 1 << 20, 0) * (1 << 20) + x.long(), x)
        tenth = torch.full((5,), 0.1, dtype=torch.float64)  # float32's 0.1 is 1.5e-9 off
        check(lambda x, t: (torch.full_like(t, 0.1).where(x > 0, 0.3) - t) * 1e10, x, tenth)
    _no_fallback(caplog)


@pytest.mark.parametrize("src", ALL)
def test_casts(src: torch.dtype) -> None:
    x = sample(3, 7, dtype=src)
    if src.is_floating_point:
        x = x.clamp(-100, 100)  # float -> int of out-of-range values is undefined

    def fn(x):
        return tuple(x.to(d) for d in ALL) + (x.to(torch.int8), x.to(torch.uint8).to(torch.int32))

    if src.is_floating_point:  # uint8 of negative floats is undefined
        check_lowered(lambda x: tuple(x.to(d) for d in ALL) + (x.to(torch.int8),), x)
    else:
        check_lowered(fn, x)


def test_mixed_promotion() -> None:
    i, f, h, b = (
        sample(3, 4, dtype=torch.int32),
        sample(3, 4, dtype=torch.float32),
        sample(3, 4, dtype=torch.float16),
        sample(3, 4, dtype=torch.bool),
    )
    check_lowered(
        lambda i, f, h, b: (i + f, i * h, h + f, b + i, b * 2.5, i + 2**33, h * 3, i.float() / 7),
        i,
        f,
        h,
        b,
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_math(dtype: torch.dtype) -> None:
    x = sample(5, 11, dtype=dtype)
    check_lowered(
        lambda x: (x.sigmoid(), F.silu(x), x.abs().sqrt(), torch.tanh(x) * x, x.relu() + 1), x
    )


def test_gelu_backward() -> None:
    from framejit.backend.triton.ops import LOWERINGS

    assert "aten.gelu_backward" in LOWERINGS
    for approximate in ("none", "tanh"):
        x = torch.randn(4, 9, requires_grad=True)
        expected = torch.autograd.grad(F.gelu(x, approximate=approximate).sum() * 3, x)[0]
        import framejit

        x2 = x.detach().clone().requires_grad_()
        out = framejit.jit(
            lambda x, a=approximate: F.gelu(x, approximate=a).sum() * 3, backend="triton"
        )(x2)
        (got,) = torch.autograd.grad(out, x2)
        torch.testing.assert_close(got, expected)


def test_batch_norm_inference() -> None:
    bn = torch.nn.BatchNorm2d(3).eval()
    bn.running_mean.normal_()
    bn.running_var.uniform_(0.5, 2)
    bn.weight.data.normal_()
    bn.bias.data.normal_()
    x = torch.randn(2, 3, 5, 4)
    check_lowered(
        lambda x, m, v, w, b: F.relu(F.batch_norm(x, m, v, w, b, False, 0.1, 1e-5)),
        x,
        bn.running_mean,
        bn.running_var,
        bn.weight.detach(),
        bn.bias.detach(),
    )
    check_lowered(
        lambda x, m, v: F.batch_norm(x, m, v), x[:, :, 0], bn.running_mean, bn.running_var
    )


def test_batch_norm_with_update_bfloat16(caplog: pytest.LogCaptureFixture) -> None:
    """`_batch_norm_with_update` in bfloat16: torch's meta function says its running
    statistics are float32, its CPU kernel gives bfloat16; the kernels that read them were
    written for float32 and failed at their first run."""

    def fn(x, w, b, m, v):
        return torch.ops.aten._batch_norm_with_update(x, w, b, m, v, 0.1, 1e-5)[:3]

    require_interpreter()
    x = torch.randn(3, 2, 4).bfloat16()
    w, b, m = (torch.randn(2).bfloat16() for _ in range(3))
    v = torch.rand(2).bfloat16() + 0.5
    eager_stats, stats = (m.clone(), v.clone()), (m.clone(), v.clone())
    with caplog.at_level(logging.WARNING, logger="framejit.backend"):
        expected = fn(x, w, b, *eager_stats)
        got = framejit.jit(fn, backend="triton")(x, w, b, *stats)
    _no_fallback(caplog)
    for g, e in zip((*got, *stats), (*expected, *eager_stats)):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e, atol=2e-2, rtol=2e-2)


def test_scalar_and_zero_size_ints() -> None:
    check(lambda x: (x * 2, x // 3, x.sum()), torch.zeros(0, 3, dtype=torch.int64))
    check(lambda x: (x + 1, x.argmax()), torch.tensor(5))

"""NaN and infinities through the Triton kernels, as eager treats them.

Triton's own max/min return the operand that is not NaN; torch's propagate NaN. Float floor
division, fmod and remainder follow eager's formulas (an infinite dividend gives NaN, a finite
one over an infinite divisor is itself), hypot is infinite when either side is (even with a
NaN) and does not overflow, atan2 of two infinities is a diagonal. Found by
`tools/op_sweep.py --mode extremal` (NaN, inf and -inf written into every float input).

Special values (NaN, infinities, signed zeros, denormals) are compared bit for bit: the sign
of a zero result and a NaN where eager gives one (atan2(nan, 0), fmod by a denormal). So are
float fmod, remainder and floor division everywhere: eager's fmod is exact (C's), and x -
trunc(x / y) * y is not once the quotient rounds (remainder(1.0, 0.1) is 0.09999999, not 0).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from triton_helpers import aten_stages, check, kernel_device, on_fake_cuda

INF, NAN = float("inf"), float("nan")
A = torch.tensor([INF, -INF, INF, 5.0, -5.0, NAN, 0.0, 3.0, INF, -0.0, 1e30, -7.5])
B = torch.tensor([INF, INF, 2.0, INF, -INF, 1.0, INF, 0.0, NAN, 2.0, 1e30, 2.0])

CASES: dict[str, Any] = {
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "clamp": lambda a, b: a.clamp(-1, 1) + b.clamp(min=0.5),
    "clamp_tensor": lambda a, b: a.clamp(min=b),
    "hardtanh_relu6": lambda a, b: F.hardtanh(a) + F.relu6(b),
    "hardsigmoid": lambda a, b: F.hardsigmoid(a),
    "sign_relu": lambda a, b: torch.sign(a) * torch.relu(b.abs()),
    "amax_amin": lambda a, b: torch.stack([a, b]).amax(0) - torch.stack([a, b]).amin(0),
    "max_min_all": lambda a, b: a.max() + b.min(),
    "softmax": lambda a, b: torch.stack([a, b]).softmax(0),
    "logsumexp": lambda a, b: torch.stack([a, b]).logsumexp(0),
    "floor_divide": torch.floor_divide,
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "fmod": torch.fmod,
    "remainder": torch.remainder,
    "hypot": torch.hypot,
    "atan2": torch.atan2,
}


@pytest.mark.parametrize("name", list(CASES))
def test_nonfinite_values_match_eager(name: str) -> None:
    fn = CASES[name]
    check(lambda a, b: fn(a, b), A, B)


def test_max_reduction_over_a_long_row_sees_a_late_nan() -> None:
    """The looped reduction (rows longer than one block) propagates NaN too."""
    x = torch.randn(3, 5000)
    x[1, 4321] = NAN
    x[2, 17] = NAN
    check(lambda x: (x.amax(1), x.amin(1)), x)


@pytest.mark.interpreter_only  # on a GPU eager's kernel (which framejit runs) device-asserts
def test_binary_cross_entropy_checks_its_input() -> None:
    """Kept whole by the AOT stage: its decomposition dropped eager's range check."""
    import framejit

    p, t = torch.tensor([0.2, 1.5]), torch.tensor([0.0, 1.0])
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        framejit.jit(lambda p, t: F.binary_cross_entropy(p, t), backend="triton")(p, t)


# Every pair of these, padded to 192 elements: eager's CPU kernels then take their
# vectorized loops for every element, as for most tensors. (Their scalar loops, for tails and
# tiny tensors, differ in two places: fmod by a denormal is C's exact fmod there, not NaN,
# and gelu(inf) is inf, not NaN.)
SPECIAL = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0, 0.5, -0.5, 2.5, -7.0])
PAD = torch.ones(192 - len(SPECIAL) ** 2)
SX = torch.cat([SPECIAL.repeat_interleave(len(SPECIAL)), PAD])
SY = torch.cat([SPECIAL.repeat(len(SPECIAL)), PAD])

SPECIAL_CASES: dict[str, Any] = {
    "atan2": torch.atan2,
    "pow": torch.pow,
    "pow_odd_negative": lambda a, b: torch.pow(a, -7.0),
    "pow_fractional": lambda a, b: torch.pow(a, 2.5),
    "pow_zero": lambda a, b: torch.pow(a, 0.0),
    "fmax": torch.fmax,
    "fmin": torch.fmin,
    "fmod": torch.fmod,
    "remainder": torch.remainder,
    "neg": lambda a, b: (-a, torch.neg(a * 0.0)),  # -(0.0) is -0.0 (Triton 3.6's -x is 0 - x)
    "atan": lambda a, b: torch.atan(a),
    "tanh": lambda a, b: torch.tanh(a),
    "asinh": lambda a, b: torch.asinh(a),
    "asin_acos": lambda a, b: (torch.asin(a), torch.acos(a)),
    "round": lambda a, b: torch.round(a * 0.25),
    "relu": lambda a, b: torch.relu(a),
    "gelu": lambda a, b: F.gelu(a),
    "gelu_tanh": lambda a, b: F.gelu(a, approximate="tanh"),
}


def _same_bits(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Equal bit patterns (so -0.0 differs from 0.0), any NaN equal to any NaN."""
    return (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())


@pytest.mark.parametrize("name", list(SPECIAL_CASES))
def test_special_values_match_eager_bit_for_bit(name: str) -> None:
    fn = SPECIAL_CASES[name]
    sx, sy = SX.to(kernel_device()), SY.to(kernel_device())
    got = check(lambda a, b: fn(a, b), sx, sy)
    want = fn(sx, sy)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        special = ~w.isfinite() | (w.abs() < torch.finfo(w.dtype).tiny)
        same = _same_bits(g, w)
        if name == "gelu":  # the sign of gelu(-0.0) differs between eager's own CPU kernels
            same |= (g == 0) & (w == 0)
        if name == "gelu_tanh":  # eager's 1 + tanh(u) cancels to 0 below x = -5 (the value
            # is -2e-15 at -7), which the kernel's x * sigmoid(2u) does not
            same |= (w == 0) & (g.abs() < 1e-12) & (g.signbit() == w.signbit())
        bad = special & ~same
        assert not bad.any(), [
            (sx[k].item(), sy[k].item(), w[k].item(), g[k].item())
            for k in bad.nonzero().flatten()[:8]
        ]


def test_round_half_to_even_is_exact() -> None:
    """floor(x + 0.5) rounds up 0.49999997 and 2**23 + 1 (the sum rounds); torch does not."""
    x = torch.tensor([0.49999997, -0.49999997, 8388609.0, -8388609.0, 2.5, -2.5, 3.5, -0.3])
    got = check(torch.round, x)
    assert _same_bits(got, torch.round(x)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_gelu_at_infinity_per_dtype(dtype: torch.dtype) -> None:
    """Eager's erf gelu(inf) depends on its kernel (NaN in the AVX-512 CPU kernels for float32
    and bfloat16, inf with AVX2 and on CUDA): the lowering asks eager once per device and
    dtype."""
    x = torch.tensor([INF, -INF, NAN, 0.0, -0.0, 1.0, -1.0, 2.5]).repeat(8).to(dtype)
    got = check(F.gelu, x)
    want = F.gelu(x)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())


def _bits_equal(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """Equal bit patterns in any float dtype, any NaN equal to any NaN."""
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    return (got.view(bits) == want.view(bits)) | (got.isnan() & want.isnan())


def _fmod_operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """192 pairs (eager's vectorized loop): quotients up to 2**60 (2**160 in float64, long
    division's many rounds), both signs, and the awkward ones. No bfloat16 denormals: the
    interpreter's bfloat16 conversion flushes them."""
    g = torch.Generator(kernel_device()).manual_seed(0)
    top = 160 if dtype == torch.float64 else 40

    def values(lo: float, hi: float) -> torch.Tensor:
        exponent = torch.rand(160, generator=g, dtype=torch.float64) * (hi - lo) + lo
        sign = torch.randint(0, 2, (160,), generator=g) * 2 - 1
        return sign * (1 + torch.rand(160, generator=g, dtype=torch.float64)) * 2**exponent

    special_x = [1.0, 1.0, -1.0, 1e30, -1e30, 5.0, -5.0, 0.0, -0.0, 3.0, INF, -INF, NAN, 7.5]
    special_y = [0.1, -0.1, 0.1, 3.3, 3.3, 0.5, -2.0, 3.0, -3.0, 0.0, 2.0, 2.0, 1.0, INF]
    special_x += [65504.0, 1e10, 0.3, -0.3, 4.0, 6.0, 1e-3, 2.5, -2.5, 1e20, 9.0, 9.0]
    special_y += [1e-4, 7.0, 0.1, 0.1, -INF, -4.0, 1e-3, 0.5, 0.5, 1e-20, 3.0, -3.0]
    special_x += [8388609.0, 16777217.0, 33554431.0, -1e15, 12.0, -12.0]
    special_y += [0.7, 0.3, 1.1, 0.37, 0.1, -0.1]
    x = torch.cat([values(-20, top), torch.tensor(special_x, dtype=torch.float64)])
    y = torch.cat([values(-20, 10), torch.tensor(special_y, dtype=torch.float64)])
    return x.to(dtype), y.to(dtype)


@pytest.fixture
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The kernels themselves give the results: failing at run time, they would hand over to
    the aten graph (eager's own results) with a warning."""
    warned: list[Any] = []
    log = logging.getLogger("framejit.backend")
    monkeypatch.setattr(log, "warning", lambda *args, **kwargs: warned.append(args))
    yield
    assert not warned, warned


FMOD_FAMILY: dict[str, Any] = {
    "fmod": torch.fmod,
    "remainder": torch.remainder,
    "floor_divide": torch.floor_divide,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("name", list(FMOD_FAMILY))
def test_fmod_family_is_exact_bit_for_bit(name: str, dtype: torch.dtype, no_fallback: None) -> None:
    """Large quotients (fmod(1e30, 3.3)), inexact ones (1.0 by 0.1), both signs and the special
    values give eager's bits: an exact fmod, and float16/bfloat16 floor division rounding each
    step as eager's vectorized loop does."""
    fn = FMOD_FAMILY[name]
    x, y = _fmod_operands(dtype)
    got = check(lambda a, b: fn(a, b), x, y)
    want = fn(x, y)
    bad = ~_bits_equal(got, want)
    assert not bad.any(), [
        (x[k].item(), y[k].item(), want[k].item(), got[k].item()) for k in bad.nonzero()[:8, 0]
    ]


def _cuda_floor_divide(a: float, b: float, dtype: torch.dtype, by_number: bool) -> float:
    """CUDA's floor division of `dtype` values a and b, written out (c10's div_floor_floating,
    or for a Python number b the DivFloorFunctor's `* (1 / b)`): fmod and the steps from it in
    float32 (float64 for float64), the floor rounded to `dtype`, and `+ 1` in `dtype`."""
    import numpy

    acc = numpy.float64 if dtype == torch.float64 else numpy.float32

    def rounded(v: Any) -> float:
        return torch.tensor(float(v), dtype=torch.float64).to(dtype).item()

    a, b = acc(a), acc(b)
    with numpy.errstate(all="ignore"):
        if b == 0:
            return rounded(a / b)
        inverse = acc(1) / b
        mod = numpy.fmod(a, b)
        div = (a - mod) * inverse if by_number else (a - mod) / b
        if mod != 0 and (b < 0) != (mod < 0):
            div = div - acc(1)
        if div == 0:
            return math.copysign(0.0, a * inverse if by_number else a / b)
        floored = rounded(numpy.floor(div))
        if div - acc(floored) > 0.5:
            floored = rounded(acc(floored) + acc(1))
        return floored


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_floor_division_on_cuda_is_cudas(dtype: torch.dtype, monkeypatch, no_fallback) -> None:
    """On CUDA the lowering follows CUDA's floor division, which differs from the CPU's
    vectorized loop for float16 and bfloat16: float32 steps, not each rounded to the dtype
    (bfloat16 -12.4375 // -0.0084228515625 is 1472 there, 1480 on the CPU), and by a Python
    number, a multiplication by its reciprocal, rounded before the `- 1` that may follow (a GPU
    contracted the two into one fma: float32 -2196462080 // 0.1 was -21964621824, eager's
    -21964619776). In the interpreter (the lowering made to follow CUDA) compared with CUDA's
    kernel written out; on a GPU with eager, and the written-out kernel with eager's."""
    from framejit.backend.triton.ops import division

    import framejit

    x, y = _fmod_operands(dtype)
    source = aten_stages(lambda a: a // 0.1, *on_fake_cuda(x)).source
    assert "fj_mul_rn(" in source  # the product is not fused into the next step
    monkeypatch.setattr(division, "eager_is_cuda", lambda device: True)
    x = torch.cat([x, torch.tensor([-12.4375, 7.0, -0.0], dtype=dtype, device=x.device)])
    y = torch.cat([y, torch.tensor([-0.0084228515625, 0.0, 3.0], dtype=dtype, device=y.device)])

    def by_numbers(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a // 0.1, a // -3.3

    with torch.no_grad():
        got = (framejit.jit(torch.floor_divide, backend="triton")(x, y),)
        got += framejit.jit(by_numbers, backend="triton")(x)
    written = [_cuda_floor_divide(a, b, dtype, False) for a, b in zip(x.tolist(), y.tolist())]
    written = torch.tensor(written, dtype=dtype, device=x.device)
    if kernel_device() == "cuda":
        want = (torch.floor_divide(x, y), *by_numbers(x))
        assert _bits_equal(written, want[0]).all()
    else:
        want = (written,) + tuple(
            torch.tensor([_cuda_floor_divide(a, b, dtype, True) for a in x.tolist()], dtype=dtype)
            for b in (0.1, -3.3)
        )
    for g, w in zip(got, want):
        bad = ~_bits_equal(g, w)
        assert not bad.any(), [
            (x[k].item(), w[k].item(), g[k].item()) for k in bad.nonzero()[:8, 0]
        ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_fmod_family_by_a_python_number(dtype: torch.dtype, no_fallback: None) -> None:
    """remainder(1.0, 0.1) is 0.09999999 and 1.0 // 0.1 is 9 in float32 (the number is cast to
    a float16 result's dtype for fmod and remainder, used as it is for floor division)."""
    x = torch.linspace(-40, 40, 255, dtype=torch.float64).to(dtype)
    x = torch.cat([x, torch.tensor([1.0, 1e30], dtype=dtype)])

    def fn(a: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.remainder(a, 0.1), torch.floor_divide(a, 0.1), torch.fmod(a, -3.3)

    got = check(fn, x)
    for g, w in zip(got, fn(x)):
        assert _bits_equal(g, w).all()
    if dtype == torch.float32:
        assert got[0][-2].item() == pytest.approx(0.09999999) and got[1][-2].item() == 9.0


# A Python number or a constant tensor where an op takes a tensor: the kernel's operand is a
# literal (`-1.0`), which has no `.to()` and which the interpreter's bool ops reject.
CONSTANT_OPERANDS: dict[str, Any] = {
    "copysign_number": lambda a: torch.copysign(a, -1.0),
    "copysign_full": lambda a: a * 3 + torch.copysign(a, torch.full_like(a, -1.0)),
    "copysign_zero": lambda a: torch.copysign(a, torch.full_like(a, -0.0)),
    "pow_number_base": lambda a: torch.pow(2.0, a),
    "pow_negative_base": lambda a: torch.pow(-2.0, a),
    "atan2_ones": lambda a: torch.atan2(a, torch.ones_like(a)),
    "atan2_of_a_constant": lambda a: torch.atan2(torch.full_like(a, -0.0), a),
    "fmod_full": lambda a: torch.fmod(torch.full_like(a, 7.5), a),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(CONSTANT_OPERANDS))
def test_constant_operands_run_in_the_kernels(
    name: str, dtype: torch.dtype, no_fallback: None
) -> None:
    fn = CONSTANT_OPERANDS[name]
    x = SX.to(kernel_device(), dtype)
    got, want = check(fn, x), fn(x)
    special = ~want.isfinite() | (want == 0)
    bad = special & ~_bits_equal(got, want)
    assert not bad.any(), [
        (x[k].item(), want[k].item(), got[k].item()) for k in bad.nonzero()[:8, 0]
    ]


# Eager keeps the input where it equals a number bound (clamp(-0.0, min=0.0) is -0.0), and
# its vectorized maximum/minimum (every element of a tensor this long) give the second operand
# on a tie; dropout multiplies by its mask (a dropped -x is -0.0, a dropped inf NaN).
SIGNED_ZERO_CASES: dict[str, Any] = {
    "clamp_min": lambda a, b: a.clamp(min=0.0),
    "clamp_max": lambda a, b: a.clamp(max=-0.0),
    "clamp_both": lambda a, b: (a.clamp(-0.0, 0.0), a.clamp(0.0, -0.0), a.clamp(2.0, -1.0)),
    "relu6_hardtanh": lambda a, b: (F.relu6(a), F.hardtanh(a), F.hardtanh(a, 0.0, 0.0)),
    "maximum_minimum": lambda a, b: (torch.maximum(a, b), torch.minimum(a, b), torch.max(b, a)),
    "maximum_of_zeros": lambda a, b: torch.maximum(a, torch.zeros_like(a)),
    "clamp_tensor": lambda a, b: (a.clamp(min=b), a.clamp(max=b), a.clamp(b, b.abs())),
    "dropout_all": lambda a, b: F.dropout(a, 1.0, True),
}


@pytest.mark.parametrize("name", list(SIGNED_ZERO_CASES))
def test_signed_zeros_and_ties_match_eager_bit_for_bit(name: str, no_fallback: None) -> None:
    fn = SIGNED_ZERO_CASES[name]
    sx, sy = SX.to(kernel_device()), SY.to(kernel_device())
    got, want = check(fn, sx, sy), fn(sx, sy)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        bad = ~_bits_equal(g, w)
        assert not bad.any(), [
            (sx[k].item(), sy[k].item(), w[k].item(), g[k].item()) for k in bad.nonzero()[:8, 0]
        ]


def _ordered(name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """maximum/minimum with -0.0 below 0.0 whichever operand it is (CUDA's fmaxf/fminf)."""
    a, b = torch.broadcast_tensors(a, torch.as_tensor(b, dtype=a.dtype))
    tie = torch.where(a.signbit(), b, a) if name == "max" else torch.where(a.signbit(), a, b)
    return torch.where(a == b, tie, torch.maximum(a, b) if name == "max" else torch.minimum(a, b))


def _ignoring_nan(name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(a.isnan(), b, torch.where(b.isnan(), a, _ordered(name, a, b)))


# op -> its result where eager orders -0.0 below 0.0 (CUDA)
ORDERED_ZERO_CASES: dict[str, tuple[Any, Any]] = {
    "relu": (lambda a, b: torch.relu(a), lambda a, b: _ordered("max", a, 0.0)),
    "clamp_min": (lambda a, b: a.clamp(min=0.0), lambda a, b: _ordered("max", a, 0.0)),
    "clamp_max": (lambda a, b: a.clamp(max=-0.0), lambda a, b: _ordered("min", a, -0.0)),
    "clamp_tensor": (lambda a, b: a.clamp(min=b), lambda a, b: _ordered("max", a, b)),
    "maximum": (torch.maximum, lambda a, b: _ordered("max", a, b)),
    "minimum": (torch.minimum, lambda a, b: _ordered("min", a, b)),
    "fmax": (torch.fmax, lambda a, b: _ignoring_nan("max", a, b)),
    "fmin": (torch.fmin, lambda a, b: _ignoring_nan("min", a, b)),
}


@pytest.mark.interpreter_only
@pytest.mark.parametrize("name", list(ORDERED_ZERO_CASES))
def test_where_eager_orders_zeros_the_kernels_do(name: str, monkeypatch, no_fallback) -> None:
    """On a device whose eager orders -0.0 below 0.0 (CUDA; probed by eager_orders_zeros),
    maximum, minimum, clamp, relu, fmax and fmin give that order's zero (here the probe is
    made to say so, and the result compared with that order, bit for bit)."""
    from framejit.backend.triton.ops import pointwise, transcendental

    import framejit

    for module in (pointwise, transcendental):
        monkeypatch.setattr(module, "eager_orders_zeros", lambda device: True)
    fn, ordered = ORDERED_ZERO_CASES[name]
    sx, sy = SX.clone(), SY.clone()
    with torch.no_grad():
        got = framejit.jit(lambda a, b: fn(a, b), backend="triton", fullgraph=True)(sx, sy)
    want = ordered(sx, sy)
    bad = ~_bits_equal(got, want)
    assert not bad.any(), [
        (sx[k].item(), sy[k].item(), want[k].item(), got[k].item()) for k in bad.nonzero()[:8, 0]
    ]


def test_eager_orders_zeros_on_the_cpu_as_its_vectorized_loops_do() -> None:
    """A fact of the CPU's eager, on the CPU whatever the tests' device (CUDA's fmaxf gives
    0.0 for maximum(0.0, -0.0): the next test)."""
    from framejit.backend.triton.ops.table import eager_orders_zeros

    assert not eager_orders_zeros("cpu")  # maximum(0.0, -0.0) is the second operand here
    zeros, negative_zeros = torch.zeros(64, device="cpu"), torch.full((64,), -0.0, device="cpu")
    assert torch.maximum(zeros, negative_zeros).signbit().all()


def test_eager_orders_zeros_on_cuda() -> None:
    if kernel_device() != "cuda":
        pytest.skip("CUDA's eager (the CPU's: the test above)")
    from framejit.backend.triton.ops.table import eager_orders_zeros

    assert eager_orders_zeros("cuda:0")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_true_division_by_a_cpu_scalar_on_cuda_is_a_product(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch, no_fallback: None
) -> None:
    """CUDA's eager divides by a CPU scalar (a Python number, a 0-dim CPU tensor) as
    `x * (1 / b)`, the reciprocal in float32 (float64 for float64): up to an ulp from the
    quotient (float32 7.0 / 3.0 is 2.3333335, the product 2.3333333). The lowering for a CUDA
    tensor does so, the product never fused into a following add. In the interpreter (the
    lowering made to follow CUDA) against that product written out; on a GPU against eager."""
    from framejit.backend.triton.ops import division

    import framejit

    x = torch.tensor([7.0, -1e-3, 3.3, 1e30, -0.0, 0.1, 100.0], dtype=dtype, device=kernel_device())
    s = torch.tensor(3.0, dtype=torch.float64, device="cpu")
    source = aten_stages(lambda a: a / 3.0 + 1.0, *on_fake_cuda(x)).source
    assert "fj_mul_rn(" in source and "fj_div_rn(" not in source.split("def call")[0][-600:]
    monkeypatch.setattr(division, "eager_is_cuda", lambda device: True)

    def fn(a: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return a / 3.0, a / s, a / 0.0

    with torch.no_grad():
        got = framejit.jit(fn, backend="triton")(x, s)
    held = torch.float64 if dtype == torch.float64 else torch.float32
    inv = [1.0 / torch.tensor(v, dtype=held) for v in (3.0, 3.0, 0.0)]
    if kernel_device() == "cuda":
        want = fn(x, s)
    else:
        want = tuple((x.to(held) * i).to(dtype) for i in inv)
    for g, w in zip(got, want):
        bad = ~_bits_equal(g, w)
        assert not bad.any(), [(x[k].item(), w[k].item(), g[k].item()) for k in bad.nonzero()[:, 0]]


# x - mean is exactly 0.0 in channel 0 (every value equal) and in places of channel 1; the
# weights are negative or -0.0, so the normalized product is -0.0 there. Eager adds a bias of
# 0.0 where there is none (x * alpha + beta), which makes it +0.0.
NORM_X = torch.tensor([[[2.0, 2.0, 2.0, 2.0], [1.0, 3.0, 2.0, 2.0]]]).repeat(2, 1, 1)
NORM_W = torch.tensor([-1.5, -0.0])
NORMS_WITHOUT_BIAS: dict[str, Any] = {
    "batch_norm_training": lambda x, w: F.batch_norm(x, None, None, w, None, training=True),
    "batch_norm_eval": lambda x, w: F.batch_norm(
        x, torch.full_like(w, 2.0), torch.ones_like(w), w, None, training=False
    ),
    "group_norm": lambda x, w: F.group_norm(x, 2, w, None),
    "instance_norm": lambda x, w: F.instance_norm(x, weight=w, bias=None),
    "layer_norm": lambda x, w: F.layer_norm(x.transpose(1, 2), (2,), w, None),
}


@pytest.mark.parametrize("name", list(NORMS_WITHOUT_BIAS))
def test_norms_without_a_bias_give_eagers_zero(name: str, no_fallback: None) -> None:
    fn = NORMS_WITHOUT_BIAS[name]
    x, w = NORM_X.to(kernel_device()), NORM_W.to(kernel_device())
    got, want = check(fn, x, w), fn(x, w)
    assert (want == 0).any()  # the case is there
    assert _bits_equal(got, want).all(), (want.flatten().tolist(), got.flatten().tolist())

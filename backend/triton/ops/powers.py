"""`pow`: of two tensors and of a tensor and a number, in every float dtype and for integers.

Float32, float16 and bfloat16 data compute in float64 and round once; float64 raises whole
bases to whole exponents below 2**POW_SQUARINGS by repeated squaring (exact for integer
results) and uses exp/log otherwise; the exponents eager special-cases take eager's formula.
A CUDA tensor's `pow` by a number follows CUDA's kernel (`eager_is_cuda`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from framejit.backend.triton.ir import Expr
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue
from framejit.backend.triton.ops.rounding import compare, rounded
from framejit.backend.triton.ops.table import (
    BOOL,
    const,
    convert,
    eager_is_cuda,
    elementwise,
    lowering,
    meta,
    op,
)


@lowering("pow", dtype="promote", rejects=BOOL)
def _pow(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any):
    out = meta(node)
    if not out.dtype.is_floating_point:
        raise NotLowered("integer pow")
    if not isinstance(b, TensorValue):
        if isinstance(a, TensorValue) and not _exponent_fits(a.dtype, b):
            raise NotLowered(f"an exponent {b!r} {a.dtype} cannot hold (eager raises)")
        scalar = _cuda_pow_scalar if eager_is_cuda(str(out.device)) else _pow_scalar
        return elementwise(ctx, out.shape, out.dtype, [a], lambda x: scalar(x, b, out.dtype))
    return elementwise(ctx, out.shape, out.dtype, [a, b], _pow_tensor)


def _exponent_fits(dtype: torch.dtype, exponent: Any) -> bool:
    """Whether eager accepts number `exponent` for a `dtype` tensor: it converts it to the
    tensor's dtype with an overflow check (`half ** 70000.0`, `bfloat16 ** 1e300` raise). A
    symbolic exponent is left to the graph's own checks."""
    if type(exponent) not in (bool, int, float):
        return True
    try:
        torch.ones(2, dtype=dtype) ** exponent
    except RuntimeError:
        return False
    return True


# Whole exponents below this (in magnitude) of whole bases are computed by repeated squaring
# in float64: six squarings reach every one, and the products stay exact for every exactly
# representable integer result (each partial product is a smaller power of the same integer).
POW_SQUARINGS = 6
_POW_WHOLE_LIMIT = 2.0**POW_SQUARINGS
_F64_TINY = 2.2250738585072014e-308  # the least normal float64


def _pow_tensor(x: Expr, y: Expr) -> Expr:
    """C's pow, which eager follows: |x| ** y (`_pow_magnitude`), the sign of x (its sign
    bit: (-0.0) ** -1 = -inf) for an odd whole y, NaN for a negative finite x and a
    fractional y, and 1 for y == 0, x == 1 and (-1) ** +-inf, even with a NaN."""
    dt = x.dtype
    ax = op("abs", x)
    magnitude = _pow_magnitude(ax, y)
    whole = compare("eq", op("floor", y), y)
    half = op("mul", y, const(0.5, dt))
    odd = op("and", whole, compare("ne", op("floor", half), half))
    signed = op(
        "where", op("and", op("signbit", x, dtype=torch.bool), odd), op("neg", magnitude), magnitude
    )
    negative = op("and", compare("lt", x, const(0.0, dt)), compare("lt", ax, const(math.inf, dt)))
    result = op(
        "where",
        op("and", negative, op("not", whole, dtype=torch.bool)),
        const(math.nan, dt),
        signed,
    )
    one = op(
        "or",
        op("or", compare("eq", y, const(0.0, dt)), compare("eq", x, const(1.0, dt))),
        op(
            "and",
            compare("eq", ax, const(1.0, dt)),
            compare("eq", op("abs", y), const(math.inf, dt)),
        ),
    )
    return op("where", one, const(1.0, dt), result)


def _exp_log(ax: Expr, y: Expr) -> Expr:
    """exp(y * log(ax)): also the zero and infinite cases (0 ** -1 = inf, inf ** -1 = 0,
    0.5 ** inf = 0); NaN where the product is 0 * inf, which the callers' `one` covers."""
    return op("exp", op("mul", y, op("log", ax)))


def _pow_magnitude(ax: Expr, y: Expr) -> Expr:
    """|x| ** y for ax = |x| >= 0 (or NaN), in ax's dtype.

    Why not exp(y * log|x|) in the data's dtype: its error grows with |y * log|x||, tens of
    ulps in float32 (7 ** 3 came out 342.99997). Float32 data (float16/bfloat16 compute in
    float32) is raised in float64 and rounded once: float64's exp and log are accurate (a
    GPU's libdevice, numpy in the interpreter), and the product's error, about
    |y log x| * 2**-53 < 2**-45 relative, is far below float32's ulp, so the result is the
    correctly rounded one but in rare near-ties. Float64 data has no wider type: a whole
    |x| to a whole exponent below 2**POW_SQUARINGS in magnitude takes repeated squaring
    (`_pow_whole`), exact for integer results (and one rounding for their reciprocals:
    7 ** -3 is 1 / 343); the others exp/log, within about |y log x| / 2 ulps (for a
    fractional x, squaring is no better: each squaring doubles the error so far, x ** 40 came
    out 21 ulps off)."""
    if ax.dtype != torch.float64:
        return convert(_exp_log(convert(ax, torch.float64), convert(y, torch.float64)), ax.dtype)
    n = op("abs", y)
    use = op(
        "and", compare("eq", op("floor", y), y), compare("lt", n, const(_POW_WHOLE_LIMIT, ax.dtype))
    )
    use = op("and", use, op("or", _exact_base(ax), compare("le", n, const(4.0, ax.dtype))))
    n = op("where", use, n, const(0.0, ax.dtype))  # other lanes: any whole n < the limit
    bits = []
    for _ in range(POW_SQUARINGS):
        half = op("floor", op("mul", n, const(0.5, ax.dtype)))
        bits.append(compare("ne", op("add", half, half), n))
        n = half
    return _pow_whole(ax, bits, compare("lt", y, const(0.0, ax.dtype)), use, y)


def _power_of_two(v: Expr) -> Expr:
    """v == 2**k (float64 v >= 1: exp2 of a whole k and log2 of a power of two are exact)."""
    return compare("eq", op("exp2", op("floor", op("log2", v))), v)


def _exact_base(ax: Expr) -> Expr:
    """Whether |x| is whole (7) or the reciprocal of a power of two (0.5; not 0.1, whose
    1/x rounds to 10): its whole powers are exact where representable, by squaring
    (`_pow_whole` squares |x| or 1/|x|, whichever is whole)."""
    inverse = op("truediv", const(1.0, ax.dtype), ax)
    return op("or", compare("eq", op("floor", ax), ax), _power_of_two(inverse))


def _pow_whole(
    ax: Expr, bits: list[Expr | bool], negative: Expr | bool, use: Expr | bool, y: Expr
) -> Expr:
    """ax ** n (float64) by square-and-multiply over n's `bits` (least significant first;
    each a bool expression per element, or a Python bool for a scalar n), then its reciprocal
    for a `negative` n (or (1/ax) ** n, where 1/ax is the whole one of the two); exp/log
    where `use` is false and where the power is not a normal finite number (subnormal, zero
    or infinite: the squares lose bits or overflow on the way, while exp/log rounds such a
    result once; x = 0, inf and NaN land here too, and exp/log gives C's answers for them)."""
    dt = ax.dtype
    # 0.5 ** -3 as 2 ** 3: the squares of a whole number stay exact
    inverse = op("truediv", const(1.0, dt), ax)
    flip = op("and", compare("ne", op("floor", ax), ax), _power_of_two(inverse))
    negative = op(
        "ne", flip, const(negative, torch.bool) if isinstance(negative, bool) else negative
    )
    power: Expr | None = None
    square = op("where", flip, inverse, ax)
    for k, bit in enumerate(bits):
        if bit is not False:
            taken = square if power is None else op("mul", power, square)
            if bit is True:
                power = taken
            else:
                power = op("where", bit, taken, const(1.0, dt) if power is None else power)
        if k + 1 < len(bits):
            square = op("mul", square, square)
    if power is None:  # n == 0
        power = const(1.0, dt)
    power = op("where", negative, op("truediv", const(1.0, dt), power), power)
    normal = op(
        "and", compare("ge", power, const(_F64_TINY, dt)), compare("lt", power, const(math.inf, dt))
    )
    good = normal if use is True else op("and", use, normal)
    return op("where", good, power, _exp_log(ax, y))


# Eager's own formulas for these scalar exponents (its pow_tensor_scalar_optimized_kernel and
# the sqrt/rsqrt/reciprocal shortcuts before it), kept so that results round as eager's do:
# x ** -2 is 1 / (x * x), which is 0 for x = 1e20 in float32, not the subnormal 1e-40.
_POW_AS_EAGER: dict[float, Callable[[Expr], Expr]] = {
    1.0: lambda x: x,
    2.0: lambda x: op("mul", x, x),
    3.0: lambda x: op("mul", op("mul", x, x), x),
    -2.0: lambda x: op("truediv", const(1.0, x.dtype), op("mul", x, x)),
    -1.0: lambda x: op("truediv", const(1.0, x.dtype), x),
    0.5: lambda x: op("sqrt", x),
    -0.5: lambda x: op("rsqrt", x),
}


def _pow_scalar(x: Expr, exponent: Any, out_dtype: torch.dtype) -> Expr:
    """x ** e for a number e: eager's formula for the exponents it special-cases
    (`_POW_AS_EAGER`; not for float16 results, which eager computes with C's pow in float32:
    (-inf) ** 0.5 is inf there, NaN from sqrt), else C's pow as in `_pow_tensor` (float32
    data raised in float64 and rounded once; float64 data by square-and-multiply for whole
    |e| < 2**POW_SQUARINGS of a whole |x|), with e's parity and sign known here."""
    dt = x.dtype
    e = float(exponent)
    if e == 0:  # 1 for every x, NaN and inf too
        return const(1.0, dt)
    if e in _POW_AS_EAGER and out_dtype != torch.float16:
        return _POW_AS_EAGER[e](x)
    if dt != torch.float64:
        # eager takes the exponent in float32 (bfloat16 for bfloat16 data): x ** (1/3) raises
        # float32 data to 0.33333334
        held = torch.bfloat16 if out_dtype == torch.bfloat16 else torch.float32
        e = float(torch.tensor(e, dtype=held))
        return convert(_pow_scalar_c(convert(x, torch.float64), e), dt)
    return _pow_scalar_c(x, e)


def _cuda_pow_scalar(x: Expr, exponent: Any, out_dtype: torch.dtype) -> Expr:
    """x ** e for a number e as CUDA's kernels compute it (pow_tensor_scalar_kernel): sqrt,
    rsqrt and 1 / x for 0.5, -0.5 and -1 in every float dtype (float16 too, where the CPU
    takes C's pow: (-inf) ** 0.5 is NaN here); then the exponent rounded to the data's dtype
    (1/3 is float16's 0.33325 for float16 data), x * x, x * x * x and 1 / (x * x) for 2, 3
    and -2 with each product rounded to the data's dtype, and C's pow (powf for float16 and
    bfloat16 data) for the others."""
    dt = x.dtype
    e = float(exponent)
    if e == 0:
        return const(1.0, dt)
    if e in (0.5, -0.5, -1.0, 1.0):
        return _POW_AS_EAGER[e](x)
    e = float(torch.tensor(e, dtype=out_dtype))
    square = rounded(op("mul", x, x), out_dtype)
    if e == 2:
        return square
    if e == 3:
        return op("mul", square, x)
    if e == -2:
        return op("truediv", const(1.0, dt), square)
    if e == 0:  # a tiny exponent that rounds to 0: pow(x, 0) is 1, NaN too
        return const(1.0, dt)
    if dt != torch.float64:
        return convert(_pow_scalar_c(convert(x, torch.float64), e), dt)
    return _pow_scalar_c(x, e)


def _pow_scalar_c(x: Expr, e: float) -> Expr:
    """C's pow of float64 `x` and a nonzero number `e` (see `_pow_scalar`)."""
    dt = x.dtype
    if math.isnan(e):  # NaN, but 1 ** nan is 1
        return op("where", compare("eq", x, const(1.0, dt)), const(1.0, dt), const(math.nan, dt))
    if math.isinf(e):  # |x| decides: 0 or inf, and 1 for x = +-1 (exp/log: 0 * inf is NaN)
        ax = op("abs", x)
        one = compare("eq", ax, const(1.0, dt))
        return op("where", one, const(1.0, dt), _exp_log(ax, const(e, dt)))
    if not e.is_integer():  # NaN for a negative x, but (-inf) ** e is inf ** e
        finite = op("where", compare("eq", x, const(-math.inf, dt)), const(math.inf, dt), x)
        return _exp_log(finite, const(e, dt))
    ax = op("abs", x)
    if abs(e) < _POW_WHOLE_LIMIT:
        n = int(abs(e))
        bits: list[Expr | bool] = [bool((n >> k) & 1) for k in range(n.bit_length())]
        use = _exact_base(ax) if n > 4 else True
        magnitude = _pow_whole(ax, bits, e < 0, use, const(e, dt))
    else:
        magnitude = _exp_log(ax, const(e, dt))
    if e % 2 == 0:
        return magnitude
    # the sign bit: (-0.0) ** -7 is -inf
    return op("where", op("signbit", x, dtype=torch.bool), op("neg", magnitude), magnitude)

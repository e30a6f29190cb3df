"""More float math, built from Triton's core `tl` functions (libdevice does not run in the
interpreter): exp2/log2/log10/expm1, tan, hyperbolic and inverse trigonometric functions,
atan2, hypot, copysign, fmax/fmin, isinf.

`atan` is a helper kernel function (helpers.py's `fj_atan`: two range reductions and a short
series, float32-accurate, then a Newton step for float64); the others are expressions of it
and of exp/log/sqrt. Inputs of other dtypes are converted to the result's float compute dtype
first, as torch promotes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from framejit.backend.triton.ir import Expr
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue
from framejit.backend.triton.ops.table import (
    const,
    convert,
    eager_orders_zeros,
    elementwise,
    lowering,
    meta,
    op,
    ordered_zeros,
)

LN2 = math.log(2.0)
# Past this, x * x overflows float32: asinh/acosh use log(2|x|) instead.
LARGE = 1e18


def _c(x: Expr, value: float) -> Expr:
    return const(value, x.dtype)


def _where_large(x: Expr, large: Expr, small: Expr) -> Expr:
    return op("where", op("gt", op("abs", x), _c(x, LARGE), dtype=torch.bool), large, small)


def _asinh(x: Expr) -> Expr:
    a = op("abs", x)
    hyp = op("sqrt", op("add", _c(x, 1.0), op("mul", a, a)))
    small = op("log1p", op("add", a, op("truediv", op("mul", a, a), op("add", _c(x, 1.0), hyp))))
    magnitude = _where_large(x, op("add", op("log", a), _c(x, LN2)), small)
    # the sign bit, so asinh(-0.0) is -0.0
    return op("where", op("signbit", x, dtype=torch.bool), op("neg", magnitude), magnitude)


def _acosh(x: Expr) -> Expr:
    t = op("sub", x, _c(x, 1.0))
    small = op("log1p", op("add", t, op("sqrt", op("mul", t, op("add", t, _c(x, 2.0))))))
    return _where_large(x, op("add", op("log", x), _c(x, LN2)), small)


def _atanh(x: Expr) -> Expr:
    """0.5 * log1p(2|x| / (1 - |x|)) with x's sign: log1p's argument stays >= 0 for |x| < 1, so
    no precision is lost near -1 (as it was, computed on x itself)."""
    a = op("abs", x)
    magnitude = op(
        "mul", _c(x, 0.5), op("log1p", op("truediv", op("add", a, a), op("sub", _c(x, 1.0), a)))
    )
    return op("where", op("signbit", x, dtype=torch.bool), op("neg", magnitude), magnitude)


def _half_root(x: Expr) -> Expr:
    """sqrt(1 - x*x), accurately near |x| = 1."""
    return op("sqrt", op("mul", op("sub", _c(x, 1.0), x), op("add", _c(x, 1.0), x)))


# exp overflows float64 past log(DBL_MAX) = 709.78; sinh and cosh only past 710.48.
EXP_HALF_FROM = 709.0


def _wide(fn: Callable[[Expr], Expr], x: Expr) -> Expr:
    """`fn` computed in float64 for float32 data (and float16/bfloat16, which compute in
    float32), rounded once: for the ops whose float32 formula overflows before the result
    does (exp(x) of 89 is inf, sinh(89) is not), and float64's exp is accurate."""
    if x.dtype == torch.float64:
        return fn(x)
    return convert(fn(convert(x, torch.float64)), x.dtype)


def _exp_half_squared(a: Expr) -> Expr:
    """exp(a) / 2 for a large a >= 0 whose exp(a) overflows though exp(a) / 2 does not:
    (exp(a/2) / 2) * exp(a/2), halving exact."""
    h = op("exp", op("mul", a, _c(a, 0.5)))
    return op("mul", op("mul", h, _c(a, 0.5)), h)


def _sinh(x: Expr) -> Expr:
    """(expm1(x) - expm1(-x)) / 2: no cancellation near 0; past `EXP_HALF_FROM` (float64 data
    only: float32 values never overflow there) exp(|x|)/2 with x's sign."""
    small = op("mul", _c(x, 0.5), op("sub", op("expm1", x), op("expm1", op("neg", x))))
    big = _exp_half_squared(op("abs", x))
    big = op("where", op("lt", x, _c(x, 0), dtype=torch.bool), op("neg", big), big)
    return op("where", op("gt", op("abs", x), _c(x, EXP_HALF_FROM), dtype=torch.bool), big, small)


def _cosh(x: Expr) -> Expr:
    """(exp(x) + exp(-x)) / 2, and exp(|x|)/2 past `EXP_HALF_FROM` (see `_sinh`)."""
    small = op("mul", _c(x, 0.5), op("add", op("exp", x), op("exp", op("neg", x))))
    a = op("abs", x)
    return op(
        "where", op("gt", a, _c(x, EXP_HALF_FROM), dtype=torch.bool), _exp_half_squared(a), small
    )


UNARY: dict[str, Callable[[Expr], Expr]] = {
    "exp2": lambda x: op("exp2", x),
    "log2": lambda x: op("log2", x),
    "log10": lambda x: op("mul", op("log", x), _c(x, 1 / math.log(10.0))),
    "expm1": lambda x: op("expm1", x),
    "tan": lambda x: op("truediv", op("sin", x), op("cos", x)),
    "sinh": lambda x: _wide(_sinh, x),
    "cosh": lambda x: _wide(_cosh, x),
    "asinh": _asinh,
    "acosh": _acosh,
    "atanh": _atanh,
    "atan": lambda x: op("atan", x),
    "asin": lambda x: op("atan2", x, _half_root(x)),
    "acos": lambda x: op("atan2", _half_root(x), x),
}


def _register_unary() -> None:
    for name, fn in UNARY.items():

        def lower(ctx: Lowering, node: torch.fx.Node, x: TensorValue, *rest: Any, _fn=fn, **kw):
            if rest or kw:
                raise NotLowered("extra arguments")
            out = meta(node)
            return elementwise(ctx, out.shape, out.dtype, [x], _fn)

        lowering(name, dtype="promote")(lower)


_register_unary()


def _isnan(x: Expr) -> Expr:
    return op("ne", x, x, dtype=torch.bool)


def _hypot(x: Expr, y: Expr) -> Expr:
    """sqrt(x² + y²) without overflow (scaled by the larger magnitude), and infinite when
    either is, even with a NaN (C's hypot, which eager follows)."""
    a, b = op("abs", x), op("abs", y)
    big, small = op("maximum", a, b), op("minimum", a, b)
    q = op("truediv", small, op("where", op("eq", big, _c(x, 0), dtype=torch.bool), _c(x, 1), big))
    r = op("mul", big, op("sqrt", op("add", _c(x, 1), op("mul", q, q))))
    inf = _c(x, math.inf)
    either = op("or", op("eq", a, inf, dtype=torch.bool), op("eq", b, inf, dtype=torch.bool))
    return op("where", either, inf, r)


BINARY: dict[str, Callable[[Expr, Expr], Expr]] = {
    "atan2": lambda y, x: op("atan2", y, x),
    "hypot": lambda x, y: _hypot(x, y),
    "copysign": lambda x, y: op(
        "where", op("signbit", y, dtype=torch.bool), op("neg", op("abs", x)), op("abs", x)
    ),
    # NaN only where both are NaN; of equal values (0.0 and -0.0) the first, as eager
    "fmax": lambda x, y: op("where", op("or", op("lt", x, y, dtype=torch.bool), _isnan(x)), y, x),
    "fmin": lambda x, y: op("where", op("or", op("lt", y, x, dtype=torch.bool), _isnan(x)), y, x),
}


def _fmax_ordered(name: str) -> Callable[[Expr, Expr], Expr]:
    """fmax/fmin where eager orders -0.0 below 0.0 (CUDA): NaN only where both are NaN."""

    def fn(x: Expr, y: Expr) -> Expr:
        both = ordered_zeros(name, x, y)
        return op("where", _isnan(x), y, op("where", _isnan(y), x, both))

    return fn


_FMAX = {"fmax": _fmax_ordered("maximum"), "fmin": _fmax_ordered("minimum")}


def _register_binary() -> None:
    for name, fn in BINARY.items():

        def lower(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any, _fn=fn, _name=name):
            out = meta(node)
            if not out.dtype.is_floating_point:
                raise NotLowered("integer operands")
            if _name in _FMAX and eager_orders_zeros(str(out.device)):
                _fn = _FMAX[_name]
            return elementwise(ctx, out.shape, out.dtype, [a, b], _fn)

        lowering(name, dtype="promote")(lower)


_register_binary()


@lowering("isinf", dtype="compare")
def _isinf(ctx: Lowering, node: torch.fx.Node, x: TensorValue) -> TensorValue:
    out = meta(node)
    if not x.dtype.is_floating_point:
        return ctx.pointwise(out.shape, torch.bool, lambda index: const(False, torch.bool))
    return elementwise(
        ctx,
        out.shape,
        torch.bool,
        [x],
        lambda v: op("eq", op("abs", v), _c(v, math.inf), dtype=torch.bool),
        torch.float32 if x.dtype != torch.float64 else torch.float64,
    )

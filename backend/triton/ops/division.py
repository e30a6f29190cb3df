"""Division lowerings: `div` (true, trunc and floor rounding), `fmod` and `remainder`, for
floats and integers.

Integer division and remainder follow torch (floor rounding) although the kernels' `//` and `%`
truncate, and a zero divisor is checked where eager raises (the CPU); float fmod, remainder and
floor division are exact, as eager's (the kernels' `fj_fmod`). Where CUDA's eager computes
floor division otherwise than the CPU's (float16/bfloat16 steps in float32, a number divisor as
a multiplication by its reciprocal), a CUDA tensor's lowering follows CUDA's (`eager_is_cuda`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from framejit.backend.aot.core_ops import op_name
from framejit.backend.triton.bounds import ZERO_DIVISOR
from framejit.backend.triton.ir import BoundsCheck, Expr, compute_dtype
from framejit.backend.triton.lower import Lowering, TensorValue
from framejit.backend.triton.ops.rounding import compare, eager_cast, eager_gives_nan, rounded
from framejit.backend.triton.ops.table import (
    BOOL,
    aten,
    const,
    convert,
    eager_is_cuda,
    elementwise,
    lowering,
    meta,
    op,
)


@lowering("div", dtype="promote", rejects=BOOL)  # bool: rounding modes only
def _div(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any, *, rounding_mode: Any = None):
    out = meta(node)
    if rounding_mode is None:
        cpu_scalar = not isinstance(b, TensorValue) or node.args[1] in ctx.host_nodes
        if cpu_scalar and out.dtype.is_floating_point and eager_is_cuda(str(out.device)):
            return _cuda_true_division_by_cpu_scalar(ctx, out, a, b)
        return elementwise(ctx, out.shape, out.dtype, [a, b], lambda x, y: op("truediv", x, y))
    if not out.dtype.is_floating_point:
        divide = _int_truncdiv if rounding_mode == "trunc" else _int_floordiv
        return _int_division(ctx, node, a, b, divide)
    if rounding_mode == "trunc":
        return elementwise(
            ctx, out.shape, out.dtype, [a, b], lambda x, y: op("trunc", op("truediv", x, y))
        )
    if eager_is_cuda(str(out.device)):
        return _cuda_floor_division(ctx, out, a, b)
    # Eager divides by a divisor that is one number (a Python number, a one-element tensor)
    # in float32, as it is, rounding once; else it casts both operands to the result's dtype
    # and rounds each step to it (float16, bfloat16).
    one_number = not isinstance(b, TensorValue) or all(n == 1 for n in b.shape)
    steps = compute_dtype(out.dtype) if one_number else out.dtype

    def floordiv(x: Expr, y: Expr) -> Expr:
        y = y if one_number else rounded(y, out.dtype)
        return _float_floordiv(rounded(x, out.dtype), y, steps)

    values = [eager_cast(a, out.dtype), b if one_number else eager_cast(b, out.dtype)]
    return elementwise(ctx, out.shape, out.dtype, values, floordiv)


@lowering("fmod", "remainder", dtype="promote", rejects=BOOL)
def _fmod(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any):
    out = meta(node)
    floor = node.target.overloadpacket is aten.remainder
    if not out.dtype.is_floating_point:
        remainder = _int_remainder if floor else _int_truncmod
        return _int_division(ctx, node, a, b, remainder)
    body = _float_remainder if floor else _float_fmod
    # eager's vectorized CPU loop (Sleef) gives NaN where x / y overflows (a denormal y); C's
    # fmod (CUDA's kernels, the CPU's scalar loop) gives the exact remainder
    info = torch.finfo(out.dtype)
    nan_on_overflow = eager_gives_nan(
        torch.fmod, str(out.device), out.dtype, info.max / 2, info.smallest_normal / 2
    )
    return _in_result_dtype(ctx, out, a, b, lambda x, y: body(x, y, nan_on_overflow))


def _in_result_dtype(ctx: Lowering, out: Any, a: Any, b: Any, fn: Any) -> Any:
    """`fn(x, y)` over a and b as eager's kernel takes them for `out`'s dtype: a number cast
    to it, a tensor's value rounded to its precision."""
    values = [eager_cast(a, out.dtype), eager_cast(b, out.dtype)]
    return elementwise(
        ctx,
        out.shape,
        out.dtype,
        values,
        lambda x, y: fn(rounded(x, out.dtype), rounded(y, out.dtype)),
    )


def _float_fmod(x: Expr, y: Expr, nan_on_overflow: bool = True) -> Expr:
    """torch.fmod as eager computes it: C's fmod, exactly (the kernels' `fj_fmod`: long
    division, not x - trunc(x / y) * y, which rounds once the quotient passes 2**24:
    fmod(1.0, 0.1) is 0.09999999, not 0), and, with `nan_on_overflow`, NaN where x / y
    overflows (a denormal y; eager's vectorized CPU loop, Sleef's fmod, gives NaN there, its
    scalar loop and CUDA's kernels C's fmod; asked of eager in `_fmod`)."""
    if not nan_on_overflow:
        return op("fmod", x, y)
    overflow = compare("eq", op("abs", op("truediv", x, y)), const(math.inf, x.dtype))
    return op("where", overflow, const(math.nan, x.dtype), op("fmod", x, y))


def _float_remainder(x: Expr, y: Expr, nan_on_overflow: bool = True) -> Expr:
    """torch.remainder as eager computes it: fmod, moved by y when the signs differ (exact:
    the sum has the magnitude of y at most, on y's grid)."""
    r = _float_fmod(x, y, nan_on_overflow)
    zero = const(0, x.dtype)
    moved = op(
        "and", compare("ne", r, zero), compare("ne", compare("lt", y, zero), compare("lt", r, zero))
    )
    return op("where", moved, op("add", r, y), r)


def _float_floordiv(x: Expr, y: Expr, dtype: torch.dtype) -> Expr:
    """Floor division as eager's vectorized CPU loop computes it (div_floor_floating_vec):
    (x - fmod(x, y)) / y, less 1 where fmod has the other sign than y, rounded to the nearest
    whole number; x / y where that overflows (fmod is NaN there), or for a zero y, and a zero
    quotient's sign. Each step rounds to `dtype`'s precision (float16 and bfloat16 where eager
    computes in Vectorized<Half>; its scalar loop rounds once)."""

    def step(e: Expr) -> Expr:
        return rounded(e, dtype)

    zero, one, inf = (const(v, x.dtype) for v in (0, 1, math.inf))
    quotient = step(op("truediv", x, y))
    mod = _float_fmod(x, y)
    overflow = op("and", compare("eq", op("abs", quotient), inf), compare("ne", op("abs", x), inf))
    div = step(op("truediv", op("where", overflow, x, step(op("sub", x, mod))), y))
    shift = op(
        "and",
        compare("ne", mod, zero),
        compare("ne", compare("lt", y, zero), compare("lt", mod, zero)),
    )
    div = op("where", shift, step(op("sub", div, one)), div)
    floored = op("floor", div)
    up = compare("gt", op("sub", div, floored), const(0.5, x.dtype))
    floored = op("where", up, step(op("add", floored, one)), floored)
    signed_zero = op("mul", quotient, zero)  # 0 with the quotient's sign (it is finite here)
    result = op("where", compare("eq", div, zero), signed_zero, floored)
    return op("where", compare("eq", y, zero), quotient, result)


def _cuda_true_division_by_cpu_scalar(ctx: Lowering, out: Any, a: Any, b: Any) -> Any:
    """`a / b` as CUDA's kernel computes it when `b` is a CPU scalar (a Python number, a 0-dim
    CPU tensor: div_true_kernel_cuda's `is_cpu_scalar` branch): `a * (1 / b)`, the reciprocal
    of b cast to the op's math dtype (float32; float64 for float64) and rounded there, the
    product rounded once (`mul_rn`: never contracted into a following add). Up to an ulp from
    the quotient, as in eager; x / 0 still gives x * inf."""
    held = torch.float64 if out.dtype == torch.float64 else torch.float32
    if not isinstance(b, TensorValue):
        inverse = (torch.tensor(1.0, dtype=held) / torch.tensor(float(b), dtype=held)).item()
        return elementwise(
            ctx, out.shape, out.dtype, [a], lambda x: op("mul_rn", x, const(inverse, x.dtype))
        )

    def fn(x: Expr, y: Expr) -> Expr:
        return op("mul_rn", x, op("truediv", const(1.0, y.dtype), y))

    return elementwise(ctx, out.shape, out.dtype, [a, b], fn)


def _cuda_floor_division(ctx: Lowering, out: Any, a: Any, b: Any) -> Any:
    """Float floor division as CUDA's kernel computes it (div_floor_kernel_cuda): by a Python
    number (eager's CPU scalar), with the number and its reciprocal in float32 (float64 for
    float64 data), `x * (1 / b)` where the CPU divides; by a tensor, c10's
    div_floor_floating of the data's dtype (`_cuda_float_floordiv`)."""
    if isinstance(b, TensorValue):
        return _in_result_dtype(ctx, out, a, b, lambda x, y: _cuda_float_floordiv(x, y, out.dtype))
    held = torch.float64 if out.dtype == torch.float64 else torch.float32
    number = torch.tensor(float(b), dtype=held)
    if number == 0:  # eager's true division then: x * (1 / 0)
        return elementwise(ctx, out.shape, out.dtype, [a, b], lambda x, y: op("truediv", x, y))
    inverse = (torch.tensor(1.0, dtype=held) / number).item()
    return elementwise(
        ctx,
        out.shape,
        out.dtype,
        [eager_cast(a, out.dtype)],
        lambda x: _cuda_float_floordiv(
            rounded(x, out.dtype),
            const(number.item(), x.dtype),
            out.dtype,
            const(inverse, x.dtype),
        ),
    )


def _cuda_float_floordiv(x: Expr, y: Expr, dtype: torch.dtype, inverse: Expr | None = None) -> Expr:
    """c10's div_floor_floating of `dtype` values x and y (or, with `inverse`, CUDA's
    DivFloorFunctor: `* inverse` for `/ y`), computed in x's compute dtype. For float16 and
    bfloat16 only the result variable has `dtype`: the fmod is float's (std::fmod of the
    converted operands) and the steps from it are float arithmetic, while the floor is rounded
    to `dtype` on assignment and the correction `floordiv += 1` adds in it (bfloat16
    -12.4375 // -0.0084228515625 is 1472 there, 1480 in the CPU's vectorized loop)."""
    zero, one, half = (const(v, x.dtype) for v in (0, 1, 0.5))
    mod = op("fmod", x, y)
    if inverse is None:
        div, quotient = op("truediv", op("sub", x, mod), y), op("truediv", x, y)
    else:  # `div - 1` below must not fuse with the product (a GPU would: eager's does not)
        div, quotient = op("mul_rn", op("sub", x, mod), inverse), op("mul", x, inverse)
    shift = op(
        "and",
        compare("ne", mod, zero),
        compare("ne", compare("lt", y, zero), compare("lt", mod, zero)),
    )
    div = op("where", shift, op("sub", div, one), div)
    floored = rounded(op("floor", div), dtype)
    up = compare("gt", op("sub", div, floored), half)
    floored = op("where", up, rounded(op("add", floored, one), dtype), floored)
    signed_zero = op("mul", quotient, zero)  # 0 with the quotient's sign (it is finite here)
    result = op("where", compare("eq", div, zero), signed_zero, floored)
    if inverse is not None:  # y is a nonzero number
        return result
    return op("where", compare("eq", y, zero), op("truediv", x, y), result)


def _opposite_signs(x: Expr, y: Expr) -> Expr:
    zero = const(0, x.dtype)
    return op("ne", op("lt", x, zero, dtype=torch.bool), op("lt", y, zero, dtype=torch.bool))


def _int_division(
    ctx: Lowering, node: torch.fx.Node, a: Any, b: Any, divide: Callable[[Expr, Expr], Expr]
) -> Any:
    """An integer division (`divide` of a by b). Eager's CPU kernels raise for a zero divisor
    (RuntimeError "ZeroDivisionError"; CUDA's give a value and no error): on the CPU each lane
    whose divisor may be zero checks it, and the wrapper raises as eager does (bounds.py: the
    check is a `BoundsCheck` of `divisor == 0` against size 1, named ZERO_DIVISOR)."""
    from framejit.backend.triton.ops.indexing import value_range

    out = meta(node)
    name = op_name(node.target)

    def fn(x: Expr, y: Expr) -> Expr:
        quotient = divide(x, y)
        if out.device.type != "cpu":  # (a CPU scalar computed beside CUDA data checks too)
            return quotient
        bounds = value_range(y, ctx.graph)
        if bounds is not None and (bounds[0] > 0 or bounds[1] < 0):
            return quotient  # never zero
        zero = convert(op("eq", y, const(0, y.dtype), dtype=torch.bool), torch.int64)
        check = BoundsCheck(zero, 1, f"{ZERO_DIVISOR}{name}", 0)
        return op("where", check, quotient, const(0, quotient.dtype))

    return elementwise(ctx, out.shape, out.dtype, [a, b], fn)


def _int_floordiv(x: Expr, y: Expr) -> Expr:
    """Floor division of integers from the kernels' truncating `//`."""
    q = op("floordiv", x, y)
    inexact = op("ne", op("mod", x, y), const(0, x.dtype), dtype=torch.bool)
    return op(
        "where", op("and", inexact, _opposite_signs(x, y)), op("sub", q, const(1, q.dtype)), q
    )


def _int_truncdiv(x: Expr, y: Expr) -> Expr:
    return op("floordiv", x, y)  # the kernels' `//` truncates, as torch's trunc rounding


def _int_truncmod(x: Expr, y: Expr) -> Expr:
    return op("mod", x, y)  # the kernels' `%` takes the dividend's sign, as torch.fmod


def _int_remainder(x: Expr, y: Expr) -> Expr:
    """The remainder with the divisor's sign (torch.remainder) from the truncating `%`."""
    r = op("mod", x, y)
    nonzero = op("ne", r, const(0, r.dtype), dtype=torch.bool)
    return op("where", op("and", nonzero, _opposite_signs(r, y)), op("add", r, y), r)

"""Pointwise lowerings: arithmetic, math functions, comparisons, logical and bitwise ops,
`where`/`clamp`, activations, casts and copies, and tensor creation (`full`, `arange`).

Each is a `Pointwise` node whose body applies the op to its operands loaded at the same
element (broadcasting by index: a size-1 dimension reads index 0). Integer division and
remainder follow torch (floor rounding) although the kernels' `//` and `%` truncate; float
fmod, remainder and floor division are exact, as eager's (the kernels' `fj_fmod`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from framejit.backend.aot.core_ops import op_name
from framejit.backend.triton.bounds import ZERO_DIVISOR
from framejit.backend.triton.ir import BoundsCheck, Const, Expr, IndexValue, Ix, Op, compute_dtype
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue
from framejit.backend.triton.ops.table import (
    BOOL,
    FLOATING,
    INTEGRAL,
    aten,
    const,
    convert,
    eager_is_cuda,
    eager_orders_zeros,
    elementwise,
    lowering,
    meta,
    meta_of,
    op,
    operand,
    ordered_zeros,
)


def _unary(kernel_op: str) -> Callable[[Expr], Expr]:
    return lambda x: op(kernel_op, x)


def _binary(kernel_op: str) -> Callable[[Expr, Expr], Expr]:
    return lambda a, b: op(kernel_op, a, b)


def _tanh(x: Expr) -> Expr:
    return op("tanh", x)


def _gelu(x: Expr, approximate: str, nan_at_inf: bool = False) -> Expr:
    dt = x.dtype
    if approximate == "tanh":
        inner = op(
            "mul",
            const(math.sqrt(2 / math.pi), dt),
            op("add", x, op("mul", const(0.044715, dt), op("mul", x, op("mul", x, x)))),
        )
        # 0.5 * x * (1 + tanh(u)) written as x * sigmoid(2u): the same function, without the
        # cancellation of 1 + tanh(u) for a negative u (eager's form loses every digit there)
        return op("mul", x, op("sigmoid", op("mul", const(2.0, dt), inner)))
    erf = op("erf", op("mul", x, const(1 / math.sqrt(2), dt)))
    y = op("mul", op("mul", const(0.5, dt), x), op("add", const(1.0, dt), erf))
    if not nan_at_inf:
        return y
    # eager's vectorized float32 (and bfloat16) erf gelu is NaN at +inf, as at -inf
    return op("where", op("eq", x, const(math.inf, dt), dtype=torch.bool), const(math.nan, dt), y)


_UNARY_FLOAT = {
    "exp": _unary("exp"),
    "log": _unary("log"),
    "sqrt": _unary("sqrt"),
    "rsqrt": _unary("rsqrt"),
    "sigmoid": _unary("sigmoid"),
    "tanh": _tanh,
    "erf": _unary("erf"),
    "sin": _unary("sin"),
    "cos": _unary("cos"),
    "log1p": _unary("log1p"),
    "reciprocal": lambda x: op("truediv", const(1.0, x.dtype), x),
}

_UNARY_SAME = {
    "neg": _unary("neg"),
    "abs": _unary("abs"),
    "sign": lambda x: op(
        "sub",
        convert(op("gt", x, const(0, x.dtype), dtype=torch.bool), x.dtype),
        convert(op("lt", x, const(0, x.dtype), dtype=torch.bool), x.dtype),
    ),
}

_ROUNDING = {
    "floor": _unary("floor"),
    "ceil": _unary("ceil"),
    "trunc": _unary("trunc"),
    "round": _unary("round"),
}


# The dtypes whose calls eager rejects (it has no kernel for them; `table.py`'s `rejects=`):
# such calls run as the aten op, which raises eager's error.
_REJECTS = {
    "neg": BOOL,
    "abs": BOOL,
    "relu": BOOL,
    "floor": BOOL,
    "ceil": BOOL,
    "trunc": BOOL,
    "round": BOOL,
    "bitwise_and": FLOATING,
    "bitwise_or": FLOATING,
    "bitwise_xor": FLOATING,
    "__lshift__": FLOATING | BOOL,
    "__rshift__": FLOATING | BOOL,
}


def _register_unary(table: dict[str, Callable[[Expr], Expr]], rounding: bool = False) -> None:
    for name, fn in table.items():

        def lower(ctx: Lowering, node: torch.fx.Node, x: TensorValue, *rest: Any, _fn=fn, **kw):
            if rest or kw:
                raise NotLowered("extra arguments")
            out = meta(node)
            if rounding and not out.dtype.is_floating_point:
                return elementwise(ctx, out.shape, out.dtype, [x], lambda v: v)
            return elementwise(ctx, out.shape, out.dtype, [x], _fn)

        lowering(name, dtype="promote", rejects=_REJECTS.get(name, frozenset()))(lower)


_register_unary(_UNARY_FLOAT)


@lowering("logit", dtype="promote", rejects=BOOL)
def _logit(ctx: Lowering, node: torch.fx.Node, x: TensorValue, eps: float | None = None):
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] with the bounds in the tensor's
    dtype, as eager's CPU kernel clamps (1 - 1e-6 is 1.0 in float16: logit(1.0) is inf).
    CUDA's kernel computes in float32 for float16 and bfloat16 (its acc_type), the bounds too
    (eps in float32, 1 - eps rounded there), and rounds the result once: a finite logit."""
    out = meta(node)
    if not out.dtype.is_floating_point:
        raise NotLowered(f"logit in {out.dtype}")
    if eps is not None and not isinstance(eps, float):
        raise NotLowered("a symbolic eps")
    cuda = eager_is_cuda(str(out.device))
    if eps is None or not eps >= 0:  # eager's kernels do not clamp for a negative or NaN eps
        lo = hi = None
    elif cuda:
        acc = torch.tensor(eps, dtype=compute_dtype(out.dtype))
        lo, hi = acc.item(), (1 - acc).item()
    else:
        lo, hi = _in_dtype(eps, out.dtype), _in_dtype(1 - eps, out.dtype)

    def fn(v: Expr) -> Expr:
        if lo is not None:
            nan = op("ne", v, v, dtype=torch.bool)  # NaN stays NaN through the clamp
            clamped = op("minimum", op("maximum", v, const(lo, v.dtype)), const(hi, v.dtype))
            v = op("where", nan, v, clamped)
        ratio = op("truediv", v, op("sub", const(1.0, v.dtype), v))
        if out.dtype != v.dtype and not cuda:  # the CPU's half kernels round each step to it
            ratio = convert(convert(ratio, out.dtype), v.dtype)
        return op("log", ratio)

    return elementwise(ctx, out.shape, out.dtype, [x], fn)


@lowering("relu", dtype="promote", rejects=BOOL)
def _relu(ctx: Lowering, node: torch.fx.Node, x: TensorValue):
    """x < 0 ? 0 : x, as eager's CPU loop: -0.0 and NaN pass through. CUDA's relu is
    clamp_min(x, 0), which orders -0.0 below 0.0 (`eager_orders_zeros`)."""
    out = meta(node)
    ordered = out.dtype.is_floating_point and eager_orders_zeros(str(out.device))

    def fn(v: Expr) -> Expr:
        zero = const(0, v.dtype)
        if ordered:
            return ordered_zeros("maximum", v, zero)
        return op("where", op("lt", v, zero, dtype=torch.bool), zero, v)

    return elementwise(ctx, out.shape, out.dtype, [x], fn)


_register_unary(_UNARY_SAME)
_register_unary(_ROUNDING, rounding=True)


@lowering("isnan", dtype="compare")
def _isnan(ctx: Lowering, node: torch.fx.Node, x: TensorValue) -> TensorValue:
    dt = compute_dtype(x.dtype)
    return elementwise(
        ctx, x.shape, torch.bool, [x], lambda v: op("ne", v, v, dtype=torch.bool), dt
    )


_BINARY = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "maximum": "maximum",
    "minimum": "minimum",
    "bitwise_and": "and",
    "bitwise_or": "or",
    "bitwise_xor": "xor",
    "__lshift__": "lshift",
    "__rshift__": "rshift",
}


def _register_binary() -> None:
    for name, kernel_op in _BINARY.items():

        def lower(
            ctx: Lowering, node: torch.fx.Node, a: Any, b: Any, *, alpha: Any = 1, _k=kernel_op
        ):
            out = meta(node)
            k = _k
            if _k == "sub" and any(_is_bool(v) for v in (a, b)):
                raise NotLowered("subtraction with a bool (eager raises)")
            if out.dtype == torch.bool and _k in ("add", "mul"):
                if not alpha:
                    raise NotLowered("bool addition with alpha 0")
                k = "or" if _k == "add" else "and"  # bool + bool is or, bool * bool is and

            ordered = (
                k in ("maximum", "minimum")
                and out.dtype.is_floating_point
                and eager_orders_zeros(str(out.device))
            )

            def fn(x: Expr, y: Expr) -> Expr:
                if alpha != 1 and out.dtype != torch.bool:
                    y = op("mul", y, const(alpha, y.dtype))
                return ordered_zeros(k, x, y) if ordered else op(k, x, y)

            return elementwise(ctx, out.shape, out.dtype, [a, b], fn)

        lowering(name, dtype="promote", rejects=_REJECTS.get(name, frozenset()))(lower)


def _is_bool(value: Any) -> bool:
    """A bool operand: a bool tensor, or a Python bool (eager wraps it as a bool tensor)."""
    if isinstance(value, TensorValue):
        return value.dtype == torch.bool
    return isinstance(value, bool)


_register_binary()


@lowering("div", dtype="promote", rejects=BOOL)  # bool: rounding modes only
def _div(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any, *, rounding_mode: Any = None):
    out = meta(node)
    if rounding_mode is None:
        return elementwise(ctx, out.shape, out.dtype, [a, b], _binary("truediv"))
    if not out.dtype.is_floating_point:
        divide = _binary("floordiv") if rounding_mode == "trunc" else _int_floordiv
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
        y = y if one_number else _rounded(y, out.dtype)
        return _float_floordiv(_rounded(x, out.dtype), y, steps)

    values = [_eager_cast(a, out.dtype), b if one_number else _eager_cast(b, out.dtype)]
    return elementwise(ctx, out.shape, out.dtype, values, floordiv)


@lowering("fmod", "remainder", dtype="promote", rejects=BOOL)
def _fmod(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any):
    out = meta(node)
    floor = node.target.overloadpacket is aten.remainder
    if not out.dtype.is_floating_point:
        remainder = _int_remainder if floor else _binary("mod")
        return _int_division(ctx, node, a, b, remainder)
    body = _float_remainder if floor else _float_fmod
    # eager's vectorized CPU loop (Sleef) gives NaN where x / y overflows (a denormal y); C's
    # fmod (CUDA's kernels, the CPU's scalar loop) gives the exact remainder
    info = torch.finfo(out.dtype)
    nan_on_overflow = _eager_gives_nan(
        torch.fmod, str(out.device), out.dtype, info.max / 2, info.smallest_normal / 2
    )
    values = [_eager_cast(a, out.dtype), _eager_cast(b, out.dtype)]
    return elementwise(
        ctx,
        out.shape,
        out.dtype,
        values,
        lambda x, y: body(_rounded(x, out.dtype), _rounded(y, out.dtype), nan_on_overflow),
    )


@functools.cache
def _eager_gives_nan(fn: Any, device: str, dtype: torch.dtype, *values: float) -> bool:
    """Whether eager's `fn` gives NaN for these operand values on this device and dtype, where
    that depends on the kernel eager picks (vectorized or scalar CPU loops, CUDA): asked once,
    on vectors long enough for the vectorized path."""
    args = [torch.full((64,), v, dtype=dtype, device=device) for v in values]
    return bool(fn(*args).isnan().any())


def _eager_cast(value: Any, dtype: torch.dtype) -> Any:
    """A Python number as eager's kernel gets it for a float16/bfloat16 result: cast to that
    dtype (0.1 is float16's 0.1). Tensor operands are cast in the body (`_rounded`)."""
    if dtype == compute_dtype(dtype) or isinstance(value, (bool, TensorValue)):
        return value
    if isinstance(value, (int, float)):
        return torch.tensor(value).to(dtype).item()
    return value


def _rounded(e: Expr, dtype: torch.dtype) -> Expr:
    """`e` (of the compute dtype) rounded to `dtype`'s precision, as eager's cast to the
    result dtype or its float16/bfloat16 arithmetic rounds; itself when exact already."""
    if e.dtype == dtype or _exact_in(e, dtype):
        return e
    return convert(convert(e, dtype), e.dtype)


def _exact_in(e: Expr, dtype: torch.dtype) -> bool:
    """`e` is a conversion of a `dtype` value (or a constant already rounded to it)."""
    if isinstance(e, Const):
        return e.value == _eager_cast(e.value, dtype)
    return isinstance(e, Op) and e.name == "convert" and e.args[0].dtype == dtype


def _is(name: str, x: Expr, y: Expr) -> Expr:
    return op(name, x, y, dtype=torch.bool)


def _float_fmod(x: Expr, y: Expr, nan_on_overflow: bool = True) -> Expr:
    """torch.fmod as eager computes it: C's fmod, exactly (the kernels' `fj_fmod`: long
    division, not x - trunc(x / y) * y, which rounds once the quotient passes 2**24:
    fmod(1.0, 0.1) is 0.09999999, not 0), and, with `nan_on_overflow`, NaN where x / y
    overflows (a denormal y; eager's vectorized CPU loop, Sleef's fmod, gives NaN there, its
    scalar loop and CUDA's kernels C's fmod; asked of eager in `_fmod`)."""
    if not nan_on_overflow:
        return op("fmod", x, y)
    overflow = _is("eq", op("abs", op("truediv", x, y)), const(math.inf, x.dtype))
    return op("where", overflow, const(math.nan, x.dtype), op("fmod", x, y))


def _float_remainder(x: Expr, y: Expr, nan_on_overflow: bool = True) -> Expr:
    """torch.remainder as eager computes it: fmod, moved by y when the signs differ (exact:
    the sum has the magnitude of y at most, on y's grid)."""
    r = _float_fmod(x, y, nan_on_overflow)
    zero = const(0, x.dtype)
    moved = op("and", _is("ne", r, zero), _is("ne", _is("lt", y, zero), _is("lt", r, zero)))
    return op("where", moved, op("add", r, y), r)


def _float_floordiv(x: Expr, y: Expr, dtype: torch.dtype) -> Expr:
    """Floor division as eager's vectorized CPU loop computes it (div_floor_floating_vec):
    (x - fmod(x, y)) / y, less 1 where fmod has the other sign than y, rounded to the nearest
    whole number; x / y where that overflows (fmod is NaN there), or for a zero y, and a zero
    quotient's sign. Each step rounds to `dtype`'s precision (float16 and bfloat16 where eager
    computes in Vectorized<Half>; its scalar loop rounds once)."""

    def rounded(e: Expr) -> Expr:
        return _rounded(e, dtype)

    zero, one, inf = (const(v, x.dtype) for v in (0, 1, math.inf))
    quotient = rounded(op("truediv", x, y))
    mod = _float_fmod(x, y)
    overflow = op("and", _is("eq", op("abs", quotient), inf), _is("ne", op("abs", x), inf))
    div = rounded(op("truediv", op("where", overflow, x, rounded(op("sub", x, mod))), y))
    shift = op("and", _is("ne", mod, zero), _is("ne", _is("lt", y, zero), _is("lt", mod, zero)))
    div = op("where", shift, rounded(op("sub", div, one)), div)
    floored = op("floor", div)
    up = _is("gt", op("sub", div, floored), const(0.5, x.dtype))
    floored = op("where", up, rounded(op("add", floored, one)), floored)
    signed_zero = op("mul", quotient, zero)  # 0 with the quotient's sign (it is finite here)
    result = op("where", _is("eq", div, zero), signed_zero, floored)
    return op("where", _is("eq", y, zero), quotient, result)


def _cuda_floor_division(ctx: Lowering, out: Any, a: Any, b: Any) -> Any:
    """Float floor division as CUDA's kernel computes it (div_floor_kernel_cuda): by a Python
    number (eager's CPU scalar), with the number and its reciprocal in float32 (float64 for
    float64 data), `x * (1 / b)` where the CPU divides; by a tensor, c10's
    div_floor_floating of the data's dtype (`_cuda_float_floordiv`)."""
    if isinstance(b, TensorValue):
        values = [_eager_cast(a, out.dtype), _eager_cast(b, out.dtype)]
        return elementwise(
            ctx,
            out.shape,
            out.dtype,
            values,
            lambda x, y: _cuda_float_floordiv(
                _rounded(x, out.dtype), _rounded(y, out.dtype), out.dtype
            ),
        )
    held = torch.float64 if out.dtype == torch.float64 else torch.float32
    number = torch.tensor(float(b), dtype=held)
    if number == 0:  # eager's true division then: x * (1 / 0)
        return elementwise(ctx, out.shape, out.dtype, [a, b], _binary("truediv"))
    inverse = (torch.tensor(1.0, dtype=held) / number).item()
    return elementwise(
        ctx,
        out.shape,
        out.dtype,
        [_eager_cast(a, out.dtype)],
        lambda x: _cuda_float_floordiv(
            _rounded(x, out.dtype),
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
    shift = op("and", _is("ne", mod, zero), _is("ne", _is("lt", y, zero), _is("lt", mod, zero)))
    div = op("where", shift, op("sub", div, one), div)
    floored = _rounded(op("floor", div), dtype)
    up = _is("gt", op("sub", div, floored), half)
    floored = op("where", up, _rounded(op("add", floored, one), dtype), floored)
    signed_zero = op("mul", quotient, zero)  # 0 with the quotient's sign (it is finite here)
    result = op("where", _is("eq", div, zero), signed_zero, floored)
    if inverse is not None:  # y is a nonzero number
        return result
    return op("where", _is("eq", y, zero), op("truediv", x, y), result)


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
        if ctx.graph.device != "cpu":
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


def _int_remainder(x: Expr, y: Expr) -> Expr:
    """The remainder with the divisor's sign (torch.remainder) from the truncating `%`."""
    r = op("mod", x, y)
    nonzero = op("ne", r, const(0, r.dtype), dtype=torch.bool)
    return op("where", op("and", nonzero, _opposite_signs(r, y)), op("add", r, y), r)


@lowering("pow", dtype="promote", rejects=BOOL)
def _pow(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any):
    out = meta(node)
    if not out.dtype.is_floating_point:
        raise NotLowered("integer pow")
    if not isinstance(b, TensorValue):
        scalar = _cuda_pow_scalar if eager_is_cuda(str(out.device)) else _pow_scalar
        return elementwise(ctx, out.shape, out.dtype, [a], lambda x: scalar(x, b, out.dtype))
    return elementwise(ctx, out.shape, out.dtype, [a, b], _pow_tensor)


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
    whole = _is("eq", op("floor", y), y)
    half = op("mul", y, const(0.5, dt))
    odd = op("and", whole, _is("ne", op("floor", half), half))
    signed = op(
        "where", op("and", op("signbit", x, dtype=torch.bool), odd), op("neg", magnitude), magnitude
    )
    negative = op("and", _is("lt", x, const(0.0, dt)), _is("lt", ax, const(math.inf, dt)))
    result = op(
        "where",
        op("and", negative, op("not", whole, dtype=torch.bool)),
        const(math.nan, dt),
        signed,
    )
    one = op(
        "or",
        op("or", _is("eq", y, const(0.0, dt)), _is("eq", x, const(1.0, dt))),
        op("and", _is("eq", ax, const(1.0, dt)), _is("eq", op("abs", y), const(math.inf, dt))),
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
    use = op("and", _is("eq", op("floor", y), y), _is("lt", n, const(_POW_WHOLE_LIMIT, ax.dtype)))
    use = op("and", use, op("or", _exact_base(ax), _is("le", n, const(4.0, ax.dtype))))
    n = op("where", use, n, const(0.0, ax.dtype))  # other lanes: any whole n < the limit
    bits = []
    for _ in range(POW_SQUARINGS):
        half = op("floor", op("mul", n, const(0.5, ax.dtype)))
        bits.append(_is("ne", op("add", half, half), n))
        n = half
    return _pow_whole(ax, bits, _is("lt", y, const(0.0, ax.dtype)), use, y)


def _power_of_two(v: Expr) -> Expr:
    """v == 2**k (float64 v >= 1: exp2 of a whole k and log2 of a power of two are exact)."""
    return _is("eq", op("exp2", op("floor", op("log2", v))), v)


def _exact_base(ax: Expr) -> Expr:
    """Whether |x| is whole (7) or the reciprocal of a power of two (0.5; not 0.1, whose
    1/x rounds to 10): its whole powers are exact where representable, by squaring
    (`_pow_whole` squares |x| or 1/|x|, whichever is whole)."""
    inverse = op("truediv", const(1.0, ax.dtype), ax)
    return op("or", _is("eq", op("floor", ax), ax), _power_of_two(inverse))


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
    flip = op("and", _is("ne", op("floor", ax), ax), _power_of_two(inverse))
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
        "and", _is("ge", power, const(_F64_TINY, dt)), _is("lt", power, const(math.inf, dt))
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
    square = _rounded(op("mul", x, x), out_dtype)
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
    if math.isinf(e):  # |x| decides: 0 or inf, and 1 for x = +-1 (exp/log: 0 * inf is NaN)
        ax = op("abs", x)
        one = _is("eq", ax, const(1.0, dt))
        return op("where", one, const(1.0, dt), _exp_log(ax, const(e, dt)))
    if not e.is_integer():  # NaN for a negative x, but (-inf) ** e is inf ** e
        finite = op("where", _is("eq", x, const(-math.inf, dt)), const(math.inf, dt), x)
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


_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


def _register_compare() -> None:
    for name, kernel_op in _COMPARE.items():

        def lower(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any, _k=kernel_op):
            dt = compute_dtype(torch.result_type(meta_of(a), meta_of(b)))
            return elementwise(
                ctx,
                meta(node).shape,
                torch.bool,
                [a, b],
                lambda x, y: op(_k, x, y, dtype=torch.bool),
                dt,
            )

        lowering(name, dtype="compare")(lower)


_register_compare()


@lowering("logical_and", "logical_or", "logical_xor", dtype="logical")
def _logical(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any):
    kernel_op = {"logical_and": "and", "logical_or": "or", "logical_xor": "xor"}[
        node.target.overloadpacket.__name__
    ]
    out = meta(node)
    return elementwise(ctx, out.shape, out.dtype, [a, b], _binary(kernel_op), torch.bool)


@lowering("logical_not", dtype="logical")
def _logical_not(ctx: Lowering, node: torch.fx.Node, a: TensorValue):
    out = meta(node)
    return elementwise(
        ctx, out.shape, out.dtype, [a], lambda x: op("not", x, dtype=torch.bool), torch.bool
    )


@lowering("bitwise_not", dtype="same", rejects=FLOATING)
def _bitwise_not(ctx: Lowering, node: torch.fx.Node, a: TensorValue):
    out = meta(node)
    if out.dtype == torch.bool:
        return elementwise(ctx, out.shape, out.dtype, [a], lambda x: op("not", x), torch.bool)
    return elementwise(ctx, out.shape, out.dtype, [a], _unary("invert"))


@lowering("where", dtype="promote")
def _where(ctx: Lowering, node: torch.fx.Node, cond: TensorValue, a: Any, b: Any):
    out = meta(node)
    dt = compute_dtype(out.dtype)

    def body(index: tuple[Ix, ...]) -> Expr:
        c = operand(cond, index, out.shape, torch.bool)
        return op("where", c, operand(a, index, out.shape, dt), operand(b, index, out.shape, dt))

    return ctx.pointwise(out.shape, out.dtype, body)


def _in_dtype(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, float):
        return torch.tensor(value, dtype=dtype).item()
    return value


@lowering("clamp", "hardtanh", dtype="promote", rejects=BOOL)
def _clamp(ctx: Lowering, node: torch.fx.Node, x: TensorValue, lo: Any = None, hi: Any = None):
    out = meta(node)
    if node.target.overloadpacket is aten.hardtanh:
        lo, hi = (-1.0 if lo is None else lo), (1.0 if hi is None else hi)
    if out.dtype in (torch.float16, torch.bfloat16):
        # eager's kernels take a number bound in the tensor's dtype (`logit(x, eps=1e-6)` of
        # float16 clamps to 1 - 1e-6, which is 1.0 there)
        lo, hi = (_in_dtype(v, out.dtype) for v in (lo, hi))
    values = [x] + [v for v in (lo, hi) if v is not None]
    ordered = out.dtype.is_floating_point and eager_orders_zeros(str(out.device))

    def bounded(name: str, v: Expr, bound: Expr, scalar: bool) -> Expr:
        # a value equal to the bound (-0.0 and 0.0) stays itself for a number bound, and
        # becomes a tensor bound, as in eager's CPU loops (maximum/minimum give their second
        # operand); CUDA's order -0.0 below 0.0
        if ordered:
            return ordered_zeros(name, v, bound)
        return op(name, bound, v) if scalar else op(name, v, bound)

    def fn(v: Expr, *bounds: Expr) -> Expr:
        k = 0
        if lo is not None:
            v, k = bounded("maximum", v, bounds[0], not isinstance(lo, TensorValue)), 1
        if hi is not None:
            v = bounded("minimum", v, bounds[k], not isinstance(hi, TensorValue))
        return v

    return elementwise(ctx, out.shape, out.dtype, values, fn)


@lowering("leaky_relu", dtype="promote", rejects=INTEGRAL)
def _leaky_relu(ctx: Lowering, node: torch.fx.Node, x: TensorValue, slope: float = 0.01):
    out = meta(node)

    def fn(v: Expr) -> Expr:
        positive = op("gt", v, const(0.0, v.dtype), dtype=torch.bool)
        return op("where", positive, v, op("mul", v, const(slope, v.dtype)))

    return elementwise(ctx, out.shape, out.dtype, [x], fn)


@lowering("elu", dtype="promote", rejects=INTEGRAL)
def _elu(ctx: Lowering, node: torch.fx.Node, x: TensorValue, alpha=1.0, scale=1.0, input_scale=1.0):
    out = meta(node)

    def fn(v: Expr) -> Expr:
        dt = v.dtype
        negative = op(
            "mul", const(alpha * scale, dt), op("expm1", op("mul", v, const(input_scale, dt)))
        )
        positive = op("gt", v, const(0.0, dt), dtype=torch.bool)
        return op("where", positive, op("mul", v, const(scale, dt)), negative)

    return elementwise(ctx, out.shape, out.dtype, [x], fn)


@lowering("gelu_backward", dtype="promote", rejects=INTEGRAL)
def _gelu_backward(
    ctx: Lowering, node: torch.fx.Node, grad: TensorValue, x: TensorValue, *, approximate="none"
):
    out = meta(node)

    def fn(g: Expr, v: Expr) -> Expr:
        dt = v.dtype
        if approximate == "tanh":
            k, c = math.sqrt(2 / math.pi), 0.044715
            inner = op("mul", const(k, dt), op("add", v, op("mul", const(c, dt), _cube(v))))
            dinner = op(
                "mul", const(k, dt), op("add", const(1.0, dt), _times(3 * c, op("mul", v, v)))
            )
            # with s = sigmoid(2u): 0.5 * (1 + tanh(u)) = s and 1 - tanh(u)**2 = 4 s (1 - s),
            # 1 - s = sigmoid(-2u): no cancellation where tanh(u) is near -1 or 1
            twice = op("mul", const(2.0, dt), inner)
            left = op("sigmoid", twice)
            rest = op("sigmoid", op("neg", twice))
            sech2 = op("mul", const(4.0, dt), op("mul", left, rest))
            right = op("mul", op("mul", op("mul", const(0.5, dt), v), sech2), dinner)
            return op("mul", g, op("add", left, right))
        cdf = op(
            "mul",
            const(0.5, dt),
            op("add", const(1.0, dt), op("erf", op("mul", v, const(1 / math.sqrt(2), dt)))),
        )
        pdf = op(
            "mul",
            const(1 / math.sqrt(2 * math.pi), dt),
            op("exp", op("mul", const(-0.5, dt), op("mul", v, v))),
        )
        return op("mul", g, op("add", cdf, op("mul", v, pdf)))

    return elementwise(ctx, out.shape, out.dtype, [grad, x], fn)


def _cube(v: Expr) -> Expr:
    return op("mul", v, op("mul", v, v))


def _times(k: float, v: Expr) -> Expr:
    return op("mul", const(k, v.dtype), v)


@lowering("_native_batch_norm_legit_no_training", dtype="promote", rejects=INTEGRAL)
def _batch_norm_inference(
    ctx: Lowering,
    node: torch.fx.Node,
    x: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
    running_mean: TensorValue,
    running_var: TensorValue,
    momentum: float,
    eps: float,
):
    """Batch norm with running statistics: a per-channel affine map (channels are dim 1)."""
    out, mean_meta, rstd_meta = meta(node)
    if len(x.shape) < 2:
        raise NotLowered("batch norm of a tensor without a channel dimension")
    dt = compute_dtype(out.dtype)
    channels = [running_mean, running_var] + [v for v in (weight, bias) if v is not None]

    def body(index: tuple[Ix, ...]) -> Expr:
        mean, var, *affine = (convert(v.load((index[1],)), dt) for v in channels)
        y = op(
            "mul",
            op("sub", convert(x.load(index), dt), mean),
            op("rsqrt", op("add", var, const(eps, dt))),
        )
        if weight is not None:
            y = op("mul", y, affine[0])
        if bias is not None:
            y = op("add", y, affine[-1])
        return y

    result = ctx.pointwise(out.shape, out.dtype, body)
    empty = [
        ctx.pointwise(m.shape, m.dtype, lambda index, d=m.dtype: const(0, compute_dtype(d)))
        for m in (mean_meta, rstd_meta)
    ]
    return (result, *empty)


@lowering("gelu", dtype="promote", rejects=INTEGRAL)
def _gelu_lowering(ctx: Lowering, node: torch.fx.Node, x: TensorValue, *, approximate="none"):
    out = meta(node)
    # eager's erf gelu at +inf: NaN in the AVX-512 CPU kernels for float32 and bfloat16, inf
    # with AVX2 and on CUDA
    nan_at_inf = approximate == "none" and _eager_gives_nan(
        torch.nn.functional.gelu, str(out.device), out.dtype, math.inf
    )
    return elementwise(ctx, out.shape, out.dtype, [x], lambda v: _gelu(v, approximate, nan_at_inf))


# ---------------------------------------------------------------------------------------------
# Copies, casts and creation


@lowering("_to_copy", "clone", "lift_fresh_copy", dtype="given")
def _copy(ctx: Lowering, node: torch.fx.Node, x: TensorValue, **kwargs: Any):
    out = meta(node)
    if str(out.device) != ctx.graph.device and x.base.buffer:
        raise NotLowered("copy to another device")
    return elementwise(ctx, out.shape, out.dtype, [x], lambda v: v, compute_dtype(x.dtype))


@lowering("copy", dtype="given")
def _copy_into(ctx: Lowering, node: torch.fx.Node, dst: TensorValue, src: TensorValue, *rest):
    out = meta(node)
    return elementwise(ctx, out.shape, out.dtype, [src], lambda v: v, compute_dtype(src.dtype))


@lowering("full", "full_like", "scalar_tensor", "empty", dtype="given")
def _full(ctx: Lowering, node: torch.fx.Node, *args: Any, **kwargs: Any):
    """A constant fill; `empty` is filled with zeros (its contents are undefined), except under
    `torch.use_deterministic_algorithms(True)`, where torch defines them (NaN, or the dtype's
    largest value, while `torch.utils.deterministic.fill_uninitialized_memory` is on): then
    `empty` stays torch's op, which reads that setting at each call. The deterministic flag
    itself may be read here: the frame's GLOBAL_STATE guard pins it."""
    out = meta(node)
    packet = node.target.overloadpacket
    if packet is aten.empty and torch.are_deterministic_algorithms_enabled():
        raise NotLowered("deterministic algorithms: torch fills empty tensors")
    value = {aten.full: lambda: args[1], aten.full_like: lambda: args[1]}.get(
        packet, lambda: args[0] if packet is aten.scalar_tensor else 0
    )()
    dt = compute_dtype(out.dtype)
    return ctx.pointwise(out.shape, out.dtype, lambda index: const(value, dt))


@lowering("arange", dtype="given")
def _arange(ctx: Lowering, node: torch.fx.Node, *args: Any, **kwargs: Any):
    out = meta(node)
    if out.dtype == torch.bool:
        raise NotLowered("arange of bools (eager raises)")
    start, step = 0, 1
    if len(args) >= 2:
        start = args[0]
    if len(args) >= 3:
        step = args[2]
    dt = compute_dtype(out.dtype)

    def body(index: tuple[Ix, ...]) -> Expr:
        i = index[0] if index else Ix()
        value = IndexValue(i, torch.int64)
        if start == 0 and step == 1:
            return convert(value, dt)
        return op("add", op("mul", convert(value, dt), const(step, dt)), const(start, dt))

    return ctx.pointwise(out.shape, out.dtype, body)

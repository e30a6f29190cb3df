"""Python numbers that eager converts to a tensor's dtype with an overflow check.

Eager converts the Python number given to `clamp`, `where`, `masked_fill`, `fill_`, `lerp`,
`leaky_relu`, an `alpha=` and the like to the result's dtype and raises "value cannot be
converted to type ... without overflow" when it does not fit (`x.half().masked_fill(m, -1e9)`,
`int8.fill_(300)`). The decompositions the AOT stage traces and the Triton kernels do not
check, so they would compute with an infinity or a wrapped integer instead. The arithmetic
operators' other operand (`x * 1e39`) is not checked by eager either (it gives inf), and is
not checked here.

`check_scalars` runs after the op's FakeTensor run: a concrete number that does not fit makes
the op a graph break (it runs as Python, and raises as eager does); a symbolic number (an int
or float argument that is a graph input) gets a range guard instead, so a later value that
does not fit recompiles and takes that break.

`masked_fill` also takes its value as a 0-d tensor, and eager reads that with `.item()` and
converts the number with the same check (`x.half().masked_fill(m, torch.tensor(-1e9))`
raises), where `torch.where`, `clamp` and `lerp` given a 0-d tensor promote it like any
operand and check nothing. (Other ops that take a number read a 0-d tensor with `.item()`
while parsing their arguments, which the FakeTensor run refuses: they are breaks already.)
The tensor's value is data the graph does not see, so `value_tensor_overflows` decides by
what it knows: a constant of the graph (`torch.tensor(-1e9)` written in the code, which the
FakeTensor keeps as its `constant`) is checked as a number; any other value is checked by its
dtype: one whose every value fits the result's dtype (the same dtype, a narrower one: the
common case) compiles, a wider one makes the op a graph break, so eager converts the real
value. A guard on the value instead would read tensor data on every call.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

# functions and methods that check every number they are given
_CHECKED_FUNCTIONS: tuple[Any, ...] = (
    torch.clamp,
    torch.clip,
    torch.clamp_min,
    torch.clamp_max,
    torch.where,
    torch.masked_fill,
    torch.index_fill,
    torch.lerp,
    torch.full_like,
    torch.addcmul,
    torch.addcdiv,
    F.leaky_relu,
    F.hardtanh,
    F.threshold,
)
_CHECKED_METHODS = frozenset(
    {
        "clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_max", "clamp_min_",
        "clamp_max_", "masked_fill", "masked_fill_", "index_fill", "index_fill_", "fill_",
        "lerp", "lerp_", "addcmul", "addcmul_", "addcdiv", "addcdiv_",
    }
)  # fmt: skip
# functions and methods whose `value`, a 0-d tensor, eager converts with the same check
_VALUE_TENSOR_FUNCTIONS: tuple[Any, ...] = (
    torch.masked_fill,
    torch.Tensor.masked_fill,
    torch.Tensor.masked_fill_,
)
_VALUE_TENSOR_METHODS = frozenset({"masked_fill", "masked_fill_"})
# functions and methods that check only their `alpha=`
_ALPHA_FUNCTIONS: tuple[Any, ...] = (torch.add, torch.sub, torch.subtract)
_ALPHA_METHODS = frozenset({"add", "add_", "sub", "sub_", "subtract", "subtract_"})


def checked_numbers(kind: str, target: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    """The arguments (of `args`/`kwargs`, in any representation) eager converts with a check."""
    if kind == "call_method":
        if target in _CHECKED_METHODS:
            return [*args[1:], *kwargs.values()]
        return [kwargs["alpha"]] if target in _ALPHA_METHODS and "alpha" in kwargs else []
    if any(target is f for f in _CHECKED_FUNCTIONS):
        return [*args, *kwargs.values()]
    if any(target is f for f in _ALPHA_FUNCTIONS) and "alpha" in kwargs:
        return [kwargs["alpha"]]
    return []


def result_dtype(result: Any) -> torch.dtype | None:
    values = result if isinstance(result, (tuple, list)) else [result]
    return next((v.dtype for v in values if isinstance(v, torch.Tensor)), None)


def overflows(value: Any, dtype: torch.dtype) -> bool:
    """Whether eager's checked conversion of Python number `value` to `dtype` fails."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if dtype == torch.bool or dtype.is_complex:
        return False
    if dtype.is_floating_point:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return abs(float(value)) > torch.finfo(dtype).max
    if isinstance(value, float) and not math.isfinite(value):
        return True
    info = torch.iinfo(dtype)
    return not info.min <= value <= info.max


def range_check(dtype: torch.dtype) -> str | None:
    """The guard text (over `___fjs0`, the number) that a number fits `dtype` as eager's
    checked conversion asks; None where every number fits (float64, bool, complex)."""
    if dtype == torch.bool or dtype.is_complex or dtype == torch.float64:
        return None
    if dtype.is_floating_point:
        bound = float(torch.finfo(dtype).max)
        return f"(abs(___fjs0) <= {bound!r} or abs(___fjs0) == float('inf'))"
    info = torch.iinfo(dtype)
    return f"({info.min} <= ___fjs0 <= {info.max})"


def float_input_bounds(expr: Any, hints: dict[Any, Any], dtype: torch.dtype) -> dict | None:
    """For `expr`, arithmetic (+, -, *, abs, whole powers) on float graph inputs (sympy symbols,
    `hints` their SymFloats) given to an op of floating `dtype`: a guard text per input,
    `abs(___fjs0) <= B`, with B a power of ten so large that no inputs within it take `expr`
    beyond `dtype`'s largest finite value (what eager's checked conversion asks), and that the
    current values are within. None where there is no such B (or `expr` is something else)."""
    limit = float(torch.finfo(dtype).max)
    values = []
    for symbol, hint in hints.items():
        if type(hint) is not torch.SymFloat or hint.node.expr != symbol:
            return None
        values.append(abs(hint.node.hint))
    need = max(values, default=0.0)
    for power in range(38, -39, -1):
        bound = 10.0**power
        if bound < need:
            return None
        size = _largest_abs(expr, bound)
        if size is not None and size <= limit:
            return {symbol: f"abs(___fjs0) <= {bound!r}" for symbol in hints}
        if size is None:
            return None
    return None


def _largest_abs(expr: Any, bound: float) -> float | None:
    """An upper bound of abs(`expr`) over its symbols within [-bound, bound]; None for an
    expression other than sums, products, abs, whole powers and quotients by a number of
    symbols and numbers."""
    import sympy

    if expr.is_Symbol:
        return bound
    if expr.is_Number:
        return abs(float(expr))
    parts = [_largest_abs(arg, bound) for arg in expr.args]
    if any(p is None for p in parts):
        return None
    try:
        if expr.is_Add:
            return math.fsum(parts)
        if expr.is_Mul:
            return math.prod(parts)
        if isinstance(expr, sympy.Abs):
            return parts[0]
        if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
            return parts[0] ** int(expr.exp)
        divisor = expr.args[-1] if type(expr).__name__ == "FloatTrueDiv" else None
        if divisor is not None and divisor.is_Number and divisor != 0:  # `lr / 10`
            return parts[0] / abs(float(divisor))
    except OverflowError:
        return math.inf
    return None


def checked_value_tensor(
    kind: str, target: Any, args: list[Any], kwargs: dict[str, Any]
) -> torch.Tensor | None:
    """`masked_fill`'s value when it is a 0-d tensor (of the fake arguments `args`/`kwargs`),
    which eager reads with `.item()` and converts with a check."""
    if kind == "call_method":
        if target not in _VALUE_TENSOR_METHODS:
            return None
    elif not any(target is f for f in _VALUE_TENSOR_FUNCTIONS):
        return None
    value = args[2] if len(args) > 2 else kwargs.get("value")  # (self, mask, value)
    return value if isinstance(value, torch.Tensor) and value.dim() == 0 else None


def value_tensor_overflows(value: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether eager's checked conversion of 0-d FakeTensor `value`'s number to `dtype` may
    fail: by its value where the graph knows it (a constant), else by its dtype."""
    constant = getattr(value, "constant", None)
    if constant is not None and not constant.is_complex():
        return overflows(constant.item(), dtype)
    return not _holds(dtype, value.dtype)


def _holds(dtype: torch.dtype, other: torch.dtype) -> bool:
    """Whether every value of `other` passes eager's checked conversion to `dtype`. (It
    answers False for a few that do pass, such as int8 to uint8: eager lets -1 wrap to 255.)"""
    if dtype == torch.bool or other == torch.bool or other == dtype:
        return True
    if other.is_complex:
        return dtype.is_complex and _holds(dtype.to_real(), other.to_real())
    if dtype.is_complex:
        dtype = dtype.to_real()
    if dtype.is_floating_point:
        largest = torch.finfo(other).max if other.is_floating_point else torch.iinfo(other).max
        return largest <= torch.finfo(dtype).max
    if other.is_floating_point:  # inf and nan do not convert to an integer
        return False
    inner, outer = torch.iinfo(other), torch.iinfo(dtype)
    return outer.min <= inner.min and inner.max <= outer.max

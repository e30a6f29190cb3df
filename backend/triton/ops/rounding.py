"""Eager's rounding of numbers and of float16/bfloat16 steps, shared by the pointwise,
division and power lowerings: a Python number cast as eager's kernel gets it, an expression
rounded to a dtype's precision where eager's arithmetic rounds, and whether eager's kernel on
a device gives NaN for some values (which depends on the kernel it picks)."""

from __future__ import annotations

import functools
from typing import Any

import torch
from framejit.backend.triton.ir import Const, Expr, Op, compute_dtype
from framejit.backend.triton.lower import TensorValue
from framejit.backend.triton.ops.table import convert, op


@functools.cache
def eager_gives_nan(fn: Any, device: str, dtype: torch.dtype, *values: float) -> bool:
    """Whether eager's `fn` gives NaN for these operand values on this device and dtype, where
    that depends on the kernel eager picks (vectorized or scalar CPU loops, CUDA): asked once,
    on vectors long enough for the vectorized path."""
    args = [torch.full((64,), v, dtype=dtype, device=device) for v in values]
    return bool(fn(*args).isnan().any())


def eager_cast(value: Any, dtype: torch.dtype) -> Any:
    """A Python number as eager's kernel gets it for a float16/bfloat16 result: cast to that
    dtype (0.1 is float16's 0.1). Tensor operands are cast in the body (`rounded`)."""
    if dtype == compute_dtype(dtype) or isinstance(value, (bool, TensorValue)):
        return value
    if isinstance(value, (int, float)):
        return torch.tensor(value).to(dtype).item()
    return value


def rounded(e: Expr, dtype: torch.dtype) -> Expr:
    """`e` (of the compute dtype) rounded to `dtype`'s precision, as eager's cast to the
    result dtype or its float16/bfloat16 arithmetic rounds; itself when exact already."""
    if e.dtype == dtype or exact_in(e, dtype):
        return e
    return convert(convert(e, dtype), e.dtype)


def exact_in(e: Expr, dtype: torch.dtype) -> bool:
    """`e` is a conversion of a `dtype` value (or a constant already rounded to it)."""
    if isinstance(e, Const):
        return e.value == eager_cast(e.value, dtype)
    return isinstance(e, Op) and e.name == "convert" and e.args[0].dtype == dtype


def compare(name: str, x: Expr, y: Expr) -> Expr:
    return op(name, x, y, dtype=torch.bool)

"""The op table: for each core aten op, its lowering and its dtype rule, and the helpers that
every lowering uses to build value expressions.

`LOWERINGS["aten.add"]` is an `OpRule(lower, dtype_rule)`. `lower(ctx, node, *args, **kwargs)`
gets the fx node (for its FakeTensor `meta["val"]`) and the arguments with tensors replaced by
`TensorValue`s; it returns a `TensorValue` (or a tuple of them) and may raise `NotLowered` for
a call it does not handle, which then runs as an extern. Dtype rules:

- `promote`: operands are converted to the result's compute dtype (float16/bfloat16 compute
  in float32), the result is stored in the result's dtype;
- `compare`: operands are converted to the compute dtype of their promoted type; result bool;
- `logical`: operands are converted to bool; result bool;
- `same`: the result has the input's dtype (views, copies, reductions like amax);
- `given`: the result dtype is an argument or fixed by the op (`_to_copy`, `full`, `arange`,
  `sum(dtype=)`, `argmax` -> int64).

A lowering registered with `rejects=` (a set of dtypes) is not used for a call that eager
rejects: one whose computing dtype, the result's for `promote` ops and the first tensor
argument's for the others, is in the set (`abs` of bools, `argmax` of bools, `var` of
integers). That call runs as the aten op itself, which raises eager's error.

Ops listed in `EXTERN_OPS` deliberately have no lowering (matmul-like work goes to torch's
kernels); `tests/backend/triton/test_ops_table.py` checks that every op of `CORE_OPS` is in
exactly one of the two.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from framejit.backend.triton.ir import (
    Const,
    Expr,
    IndexValue,
    Ix,
    Op,
    Size,
    Unknown,
    compute_dtype,
    is_static,
    provably_le,
    provably_lt,
    size_value,
)
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue, meta_value
from framejit.backend.triton.sizes import is_float_symbol

aten = torch.ops.aten


@dataclass(frozen=True)
class OpRule:
    lower: Callable[..., Any]
    dtype: str


LOWERINGS: dict[str, OpRule] = {}

# Core ops that run as externs on purpose (torch's kernels, or work that is not a loop over
# its output: sorting, scans, scatters), not for want of a lowering.
EXTERN_OPS = frozenset(
    f"aten.{name}"
    for name in [
        "addmm",
        "addmv",
        "bmm",
        "mm",
        "convolution",
        "convolution_backward",
        "_cdist_forward",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "binary_cross_entropy",  # an extern for its check of the input's range
        "binary_cross_entropy_backward",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_cudnn_attention_backward",
        "avg_pool2d_backward",
        "max_pool2d_with_indices_backward",
        "native_layer_norm_backward",
        "embedding_dense_backward",
        "sort",
        "topk",
        "cumsum",
        "cumprod",
        "scatter",
        "scatter_add",
        "index_put",
        "_assert_async",
        "empty_strided",
        "rand",
        "randn",
        "bernoulli",
        "median",  # a selection (sort-like), not a loop over the output
        "erfinv",  # no core Triton math for it (libdevice does not run in the interpreter)
        "erfc",  # likewise: 1 - erf(x) cancels to 0 from x = 4 (float32)
        "linspace",  # eager's casts of the ends to integer/bfloat16 dtypes (kept whole)
        "logspace",
        "heaviside",  # eager's refusal of two dtypes (kept whole; rare in models)
        "huber_loss",  # eager's result dtype (the input's), kept whole
        "huber_loss_backward",
        "soft_margin_loss",
        "soft_margin_loss_backward",
    ]
)


# Dtype sets for `lowering(rejects=...)`.
BOOL = frozenset({torch.bool})
INTEGRAL = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})
FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})


def lowering(
    *names: str, dtype: str, rejects: frozenset[torch.dtype] = frozenset()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        lower = _rejecting(fn, dtype, rejects) if rejects else fn
        for name in names:
            key = f"aten.{name}"
            assert key not in LOWERINGS, f"{key} lowered twice"
            LOWERINGS[key] = OpRule(lower, dtype)
        return fn

    return register


def _rejecting(
    fn: Callable[..., Any], rule: str, rejects: frozenset[torch.dtype]
) -> Callable[..., Any]:
    """`fn`, declining the calls eager rejects (see the module docstring)."""

    def lower(ctx: Lowering, node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
        if rule == "promote":
            out = meta(node)
            computing = (out[0] if isinstance(out, tuple) else out).dtype
        else:
            first = next((a for a in args if isinstance(a, TensorValue)), None)
            computing = first.dtype if first is not None else None
        if computing in rejects:
            raise NotLowered(f"eager rejects {computing} here (the aten op raises)")
        return fn(ctx, node, *args, **kwargs)

    return lower


def op(name: str, *args: Expr, dtype: torch.dtype | None = None) -> Op:
    """Kernel op `name` on `args`; its dtype is the first value operand's unless given."""
    return Op(name, args, dtype or args[1 if name == "where" else 0].dtype)


def eager_is_cuda(device: str) -> bool:
    """Whether eager's kernels for `device` are CUDA's, which the lowerings then follow where
    they compute otherwise than the CPU's: float16/bfloat16 floor division (steps in float32),
    logit (clamped in float32), pow by a number (sqrt for 0.5 in float16 too, the exponent in
    the data's dtype). Tests patch it to run those lowerings in the CPU interpreter."""
    return device.startswith("cuda")


@functools.cache
def eager_orders_zeros(device: str) -> bool:
    """Whether eager's maximum and minimum on `device` order -0.0 below 0.0 whichever operand
    each is (CUDA's kernels: clamp, relu, fmax and fmin too), rather than give the second of
    two equal operands (the CPU's vectorized loops, which the lowerings follow otherwise).
    Asked once per device, on vectors long enough for the vectorized path."""
    neg, pos = (torch.full((64,), v, device=device) for v in (-0.0, 0.0))
    return not (
        torch.maximum(neg, pos).signbit().any()
        or torch.maximum(pos, neg).signbit().any()
        or not torch.minimum(neg, pos).signbit().all()
        or not torch.minimum(pos, neg).signbit().all()
    )


def ordered_zeros(name: str, a: Expr, b: Expr) -> Expr:
    """`maximum`/`minimum` of floats with -0.0 below 0.0 (see `eager_orders_zeros`); NaN
    wins, as in `op(name, a, b)`."""
    negative_a = op("signbit", a, dtype=torch.bool)
    tie = op("where", negative_a, b, a) if name == "maximum" else op("where", negative_a, a, b)
    return op("where", op("eq", a, b, dtype=torch.bool), tie, op(name, a, b))


def convert(expr: Expr, dtype: torch.dtype) -> Expr:
    if expr.dtype == dtype:
        return expr
    if isinstance(expr, Const):
        return Const(_py_value(expr.value, dtype), dtype)
    return Op("convert", (expr,), dtype)


# where a float argument the graph takes may appear: computed in float32 (float16 and
# bfloat16 ops compute in float32), as eager computes with a Python float scalar there
_FLOAT_ARGUMENT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def const(value: Any, dtype: torch.dtype) -> Const:
    return Const(_py_value(value, dtype), dtype)


def _py_value(value: Any, dtype: torch.dtype) -> bool | int | float:
    if dtype == torch.bool:
        return bool(value)
    if not isinstance(value, (bool, int, float)):  # a symbolic size: stays an expression
        if is_float_symbol(value) and dtype not in _FLOAT_ARGUMENT_DTYPES:
            raise NotLowered(f"a float argument in a {dtype} op (kernels take it as float32)")
        return value
    if dtype.is_floating_point:
        return float(value)
    bits = 8 * dtype.itemsize
    value = int(value)
    if dtype == torch.uint8:
        return value % 256
    return (value + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)  # wraps, as torch's scalars do


def meta(node: torch.fx.Node) -> Any:
    """The node's value: a `Meta` (shape, strides, dtype, device; sizes may be symbolic) for a
    tensor, a tuple of them for several."""
    return meta_value(node.meta["val"])


def meta_of(value: Any) -> Any:
    """What `torch.result_type` needs to know of an argument: a 0-dim or n-dim tensor stand-in."""
    if isinstance(value, TensorValue):
        return torch.empty(value.shape, dtype=value.dtype, device="meta")
    return value


def broadcast_index(value: TensorValue, index: tuple[Ix, ...], shape: Sequence[int]) -> tuple:
    """The index into `value` of element `index` of its broadcast to `shape`."""
    lead = len(shape) - len(value.shape)
    return tuple(Ix() if n == 1 else index[lead + k] for k, n in enumerate(value.shape))


def operand(value: Any, index: tuple[Ix, ...], shape: Sequence[int], dtype: torch.dtype) -> Expr:
    if isinstance(value, TensorValue):
        return convert(value.load(broadcast_index(value, index, shape)), dtype)
    return const(value, dtype)


def elementwise(
    ctx: Lowering,
    shape: Sequence[int],
    out_dtype: torch.dtype,
    values: Sequence[Any],
    fn: Callable[..., Expr],
    operand_dtype: torch.dtype | None = None,
) -> TensorValue:
    """A pointwise node computing `fn(*operands)`; operands converted to `operand_dtype`
    (default: the compute dtype of `out_dtype`)."""
    dtype = operand_dtype or compute_dtype(out_dtype)

    def body(index: tuple[Ix, ...]) -> Expr:
        return fn(*(operand(v, index, shape, dtype) for v in values))

    return ctx.pointwise(shape, out_dtype, body)


def slice_bound(ctx: Lowering, bound: Size, n: Size) -> Size:
    """A slice's start or end in a dim of size `n`, as Python's slices take it: a negative one
    counts from the end, `sys.maxsize` is the end, and the result is clamped to `[0, n]`.
    Symbolic sizes: each comparison that the sizes' algebra or the ShapeEnv decides is folded;
    the others stay in the bound, a derived size the wrapper computes per call
    (`d0 = min(s0 // 2, s1)`)."""
    if is_static(bound, n):
        return min(max(bound + n if bound < 0 else bound, 0), n)
    if bound == sys.maxsize:
        return n
    import sympy
    from torch.utils._sympy.functions import Max, Min, Where

    less = ctx.graph.sizes.less
    negative = less(bound, 0)
    if negative is None:  # both ways, picked per call
        wrapped, kept = Max(bound + n, 0), Min(bound, n)
        return size_value(Where(sympy.Lt(bound, 0), wrapped, kept))
    if negative:
        bound = bound + n
        below = less(bound, 0)
        return 0 if below else bound if below is False else size_value(Max(bound, 0))
    above = less(n, bound)
    return n if above else bound if above is False else size_value(Min(bound, n))


def in_range(ix: Ix, lo: Size, hi: Size) -> Expr | None:
    """The condition `lo <= ix < hi` as a bool expression; None when it always holds (by the
    index's range), `Const(False)` when it never does. Symbolic sizes: a bound is tested
    unless it provably holds."""
    try:
        ilo, ihi = ix.bounds()
    except Unknown:
        ilo, ihi = None, None
    low_holds = ilo is not None and provably_le(lo, ilo)
    high_holds = ihi is not None and provably_lt(ihi, hi)
    if low_holds and high_holds:
        return None
    if ihi is not None and (provably_lt(ihi, lo) or provably_le(hi, ilo)):
        return Const(False, torch.bool)
    value = IndexValue(ix, torch.int64)
    parts = []
    if not low_holds:
        parts.append(op("ge", value, const(lo, torch.int64), dtype=torch.bool))
    if not high_holds:
        parts.append(op("lt", value, const(hi, torch.int64), dtype=torch.bool))
    return parts[0] if len(parts) == 1 else op("and", *parts)


def all_of(conds: Sequence[Expr | None]) -> Expr | None:
    found = [c for c in conds if c is not None]
    if not found:
        return None
    result = found[0]
    for c in found[1:]:
        result = op("and", result, c)
    return result


def masked(cond: Expr | None, value: Expr, other: Any) -> Expr:
    """`value` where `cond` holds (its loads masked by `cond`), else `other`."""
    if cond is None:
        return value
    if isinstance(cond, Const) and not cond.value:
        return const(other, value.dtype)
    return Op("masked", (cond, value, const(other, value.dtype)), value.dtype)

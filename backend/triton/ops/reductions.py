"""Reductions: sum, mean, amax/amin, max/min (with indices), argmax/argmin, prod, any,
var (any correction; std is its square root), vector 2-norm; and softmax, log_softmax and
layer_norm as reductions plus pointwise nodes, which the scheduler fuses into one kernel.

`reduce(ctx, x, dims, keepdim, kind, dtype)` makes one `Reduction` node over any set of
dims; the kept dims are the node's shape, the reduced ones its ranges (row-major, so an
arg-reduction's index over several dims is the flat index torch returns for `dim=None`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from framejit.backend.triton.ir import (
    EmptyCheck,
    Expr,
    Ix,
    compute_dtype,
    contiguous_strides,
    is_static,
    linear,
    provably_lt,
    unflatten,
)
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue
from framejit.backend.triton.ops.table import (
    BOOL,
    INTEGRAL,
    aten,
    const,
    convert,
    elementwise,
    lowering,
    meta,
    op,
)


def _binary(kernel_op: str) -> Callable[[Expr, Expr], Expr]:
    return lambda a, b: op(kernel_op, a, b)


def _unary(kernel_op: str) -> Callable[[Expr], Expr]:
    return lambda x: op(kernel_op, x)


def _dims(x: TensorValue, dims: Any) -> list[int]:
    rank = len(x.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % rank for d in dims}) if rank else []


def reduce(
    ctx: Lowering,
    x: TensorValue,
    dims: list[int],
    keepdim: bool,
    reduce_type: str,
    out_dtype: torch.dtype,
    pre: Callable[[Expr], Expr] | None = None,
    value_dtype: torch.dtype | None = None,
) -> TensorValue:
    """Reduce `x` over `dims`; with `keepdim`, a view of the result with 1s at `dims`. The
    reduced values are `x`'s converted to `value_dtype` (default: the result's compute dtype),
    then mapped by `pre`."""
    kept = [n for k, n in enumerate(x.shape) if k not in dims]
    ranges = [x.shape[d] for d in dims]
    dt = value_dtype or compute_dtype(out_dtype)

    def body(index: tuple[Ix, ...], rindex: tuple[Ix, ...]) -> Expr:
        it, rit = iter(index), iter(rindex)
        source = [next(rit) if k in dims else next(it) for k in range(len(x.shape))]
        value = convert(x.load(source), dt)
        return pre(value) if pre else value

    result = ctx.reduction(kept, ranges, out_dtype, reduce_type, body)
    if not keepdim:
        return result
    shape = [1 if k in dims else n for k, n in enumerate(x.shape)]
    return result.view(
        shape,
        lambda index: result.load([i for k, i in enumerate(index) if k not in dims]),
        aten.view.default,
        (shape,),
    )


def _numel(x: TensorValue, dims: list[int]) -> int:
    return math.prod(x.shape[d] for d in dims)


def _require_elements(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims: list[int]) -> None:
    """Eager raises for a reduction without an identity (max, min, argmax, an inf norm) over
    no elements. A size known to be 0: the call runs as the aten op, which raises; a symbolic
    size that may be 0: the wrapper checks it before any launch (`EmptyCheck`)."""
    n = _numel(x, dims)
    if is_static(n):
        if n == 0:
            raise NotLowered(f"{node.target} over no elements (eager raises)")
        return
    if provably_lt(0, n):
        return
    rest = [*node.args[1:], *node.kwargs.values()]
    if any(isinstance(a, torch.fx.Node) for a in rest):
        raise NotLowered(f"{node.target} over a size that may be 0, with tensor arguments")
    ctx.graph.empty_checks.append(
        EmptyCheck(
            n, node.target, x.shape, x.dtype, tuple(node.args[1:]), tuple(node.kwargs.items())
        )
    )


@lowering("sum", dtype="given")
def _sum(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims=None, keepdim=False, **kw):
    return reduce(ctx, x, _dims(x, dims), keepdim, "sum", meta(node).dtype)


@lowering("mean", dtype="given")
def _mean(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims=None, keepdim=False, **kw):
    out = meta(node)
    if not out.dtype.is_floating_point:  # eager raises: mean needs a floating dtype
        raise NotLowered(f"mean in {out.dtype}")
    dims = _dims(x, dims)
    # the sum in float32 for a half type, as eager keeps it: rounded to float16 it overflows
    total = reduce(ctx, x, dims, keepdim, "sum", compute_dtype(out.dtype))
    n = _numel(x, dims)
    return elementwise(ctx, out.shape, out.dtype, [total, n], _binary("truediv"))


@lowering("amax", "amin", dtype="same")
def _amax(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims=(), keepdim=False):
    kind = "max" if node.target.overloadpacket is aten.amax else "min"
    _require_elements(ctx, node, x, _dims(x, dims))
    return reduce(ctx, x, _dims(x, dims), keepdim, kind, meta(node).dtype)


@lowering("max", "min", dtype="same")
def _max(ctx: Lowering, node: torch.fx.Node, x: TensorValue, *args: Any, **kw: Any):
    kind = "max" if node.target.overloadpacket is aten.max else "min"
    if args and isinstance(args[0], TensorValue):  # max.other: elementwise
        out = meta(node)
        name = "maximum" if kind == "max" else "minimum"
        return elementwise(ctx, out.shape, out.dtype, [x, args[0]], _binary(name))
    if args or kw:  # max.dim: (values, indices)
        dim = args[0] if args else kw["dim"]
        keepdim = args[1] if len(args) > 1 else kw.get("keepdim", False)
        dims = _dims(x, dim)
        _require_elements(ctx, node, x, dims)
        values = reduce(ctx, x, dims, keepdim, kind, x.dtype)
        return values, _arg_reduce(ctx, x, dims, keepdim, f"arg{kind}")
    _require_elements(ctx, node, x, _dims(x, None))
    return reduce(ctx, x, _dims(x, None), False, kind, meta(node).dtype)


def _arg_reduce(
    ctx: Lowering, x: TensorValue, dims: list[int], keepdim: bool, kind: str
) -> TensorValue:
    return reduce(ctx, x, dims, keepdim, kind, torch.int64, value_dtype=compute_dtype(x.dtype))


@lowering("argmax", "argmin", dtype="given", rejects=BOOL)
def _argmax(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim=None, keepdim=False):
    """The first index of the extreme value; over all dims (`dim=None`) a flat index."""
    kind = node.target.overloadpacket.__name__
    _require_elements(ctx, node, x, _dims(x, dim))
    if dim is None and keepdim:
        result = _arg_reduce(ctx, x, _dims(x, None), False, kind)
        shape = [1] * len(x.shape)
        return result.view(shape, lambda index: result.load(()), aten.view.default, (shape,))
    return _arg_reduce(ctx, x, _dims(x, dim), keepdim, kind)


@lowering("prod", dtype="given")
def _prod(ctx: Lowering, node: torch.fx.Node, x: TensorValue, *args: Any, dtype=None):
    dim, keepdim = (args[0], args[1] if len(args) > 1 else False) if args else (None, False)
    return reduce(ctx, x, _dims(x, dim), keepdim, "prod", meta(node).dtype)


@lowering("any", dtype="given")
def _any(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims=None, keepdim=False):
    # bool, except for a uint8 input, where torch keeps uint8 (0 or 1)
    return reduce(
        ctx,
        x,
        _dims(x, dims),
        keepdim,
        "max",
        meta(node).dtype,
        pre=lambda v: convert(convert(v, torch.bool), meta(node).dtype),
    )


def _variance(
    ctx: Lowering,
    x: TensorValue,
    dims: list[int],
    keepdim: bool,
    correction: float,
    dtype: torch.dtype,
) -> tuple[TensorValue, TensorValue]:
    """(variance, mean) of `x` over `dims`, the mean kept with dims (for broadcasting). The
    sums, the mean and the squares stay in float32 for a half type, as eager keeps them (a sum
    of squares rounded to float16 overflows); the results are `dtype`."""
    n = _numel(x, dims)
    acc = compute_dtype(dtype)
    kept = [1 if k in dims else s for k, s in enumerate(x.shape)]
    mean = elementwise(
        ctx, kept, acc, [reduce(ctx, x, dims, True, "sum", acc), n], _binary("truediv")
    )
    centered = elementwise(ctx, x.shape, acc, [x, mean], _binary("sub"))
    squares = reduce(ctx, centered, dims, keepdim, "sum", acc, pre=lambda v: op("mul", v, v))
    denominator = max(n - correction, 0)
    var = elementwise(ctx, squares.shape, dtype, [squares, denominator], _binary("truediv"))
    if acc != dtype:
        mean = elementwise(ctx, kept, dtype, [mean], lambda v: v)
    return var, mean


@lowering("var", "var_mean", dtype="given", rejects=INTEGRAL)
def _var(
    ctx: Lowering,
    node: torch.fx.Node,
    x: TensorValue,
    dims=None,
    *rest,
    correction=None,
    keepdim=False,
):
    """var, or (var, mean) for var_mean (not in the core set, but the AOT stage keeps it)."""
    if isinstance(dims, bool):  # var(x, unbiased)
        dims, rest = None, (dims,)
    if rest:  # var.dim(x, dims, unbiased, keepdim)
        correction = 1 if rest[0] else 0
        keepdim = rest[1] if len(rest) > 1 else keepdim
    correction = 1 if correction is None else correction
    out = meta(node)
    if node.target.overloadpacket is aten.var_mean:
        out = out[0]
    dims = _dims(x, dims)
    var, mean = _variance(ctx, x, dims, keepdim, correction, out.dtype)
    if node.target.overloadpacket is not aten.var_mean:
        return var
    if not keepdim:
        shape = [n for k, n in enumerate(x.shape) if k not in dims]
        kept = mean

        def loader(index: tuple[Ix, ...]) -> Expr:
            it = iter(index)
            return kept.load([Ix() if k in dims else next(it) for k in range(len(x.shape))])

        mean = mean.view(shape, loader, aten.view.default, (shape,))
    return var, mean


@lowering("linalg_vector_norm", dtype="given", rejects=INTEGRAL)
def _vector_norm(
    ctx: Lowering, node: torch.fx.Node, x: TensorValue, ord=2, dim=None, keepdim=False, **kw
):
    """The p-norm: 2, 1, inf, -inf, 0 (count of nonzeros) or any other p."""
    out = meta(node)
    dims = _dims(x, dim)
    p = float(ord)
    if p < 0 or p == math.inf:  # a max, a min or a sum of inverse powers: no identity
        _require_elements(ctx, node, x, dims)

    def magnitude(v: Expr) -> Expr:
        return op("abs", v)

    # a sum of powers is kept in the dtype eager accumulates in (float32 for float16 and
    # bfloat16): the norm is rounded once, and a sum that only float32 can hold (8.5 ** 6 in
    # float16) does not overflow on its way to the root
    acc = compute_dtype(out.dtype)
    if p == 2:
        total = reduce(ctx, x, dims, keepdim, "sum", acc, pre=lambda v: op("mul", v, v))
        return elementwise(ctx, out.shape, out.dtype, [total], _unary("sqrt"))
    if p == 1:
        return reduce(ctx, x, dims, keepdim, "sum", out.dtype, pre=magnitude)
    if math.isinf(p):
        kind = "max" if p > 0 else "min"
        return reduce(ctx, x, dims, keepdim, kind, out.dtype, pre=magnitude)
    if p == 0:
        return reduce(
            ctx,
            x,
            dims,
            keepdim,
            "sum",
            out.dtype,
            pre=lambda v: convert(op("ne", v, const(0.0, v.dtype), dtype=torch.bool), v.dtype),
        )

    def power(v: Expr) -> Expr:  # |v| ** p, 0 for v == 0
        return op("exp", op("mul", op("log", op("abs", v)), const(p, v.dtype)))

    total = reduce(ctx, x, dims, keepdim, "sum", acc, pre=power)
    return elementwise(
        ctx,
        out.shape,
        out.dtype,
        [total],
        lambda t: op("exp", op("mul", op("log", t), const(1 / p, t.dtype))),
    )


# ---------------------------------------------------------------------------------------------
# Decompositions: softmax, log_softmax, layer_norm (reductions + pointwise; the scheduler fuses)


@lowering("_softmax", "_log_softmax", dtype="given", rejects=INTEGRAL)
def _softmax(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int, half_to_float: bool):
    out = meta(node)
    dims = _dims(x, dim)
    dt = compute_dtype(out.dtype)
    peak = reduce(ctx, x, dims, True, "max", dt)
    shifted = elementwise(ctx, x.shape, dt, [x, peak], _binary("sub"))
    total = reduce(ctx, shifted, dims, True, "sum", dt, pre=_unary("exp"))
    if node.target.overloadpacket is aten._log_softmax:
        return elementwise(
            ctx, x.shape, out.dtype, [shifted, total], lambda s, t: op("sub", s, op("log", t))
        )
    return elementwise(
        ctx, x.shape, out.dtype, [shifted, total], lambda s, t: op("truediv", op("exp", s), t)
    )


@lowering("native_layer_norm", dtype="given", rejects=INTEGRAL)
def _layer_norm(
    ctx: Lowering,
    node: torch.fx.Node,
    x: TensorValue,
    shape: Sequence[int],
    weight: TensorValue | None,
    bias: TensorValue | None,
    eps: float,
):
    out, mean_meta, rstd_meta = meta(node)
    dims = list(range(len(x.shape) - len(shape), len(x.shape)))
    dt = compute_dtype(out.dtype)
    var, mean = _variance(ctx, x, dims, True, 0, dt)
    rstd = elementwise(
        ctx, var.shape, rstd_meta.dtype, [var, eps], lambda v, e: op("rsqrt", op("add", v, e))
    )
    values = [x, mean, rstd] + [v for v in (weight, bias) if v is not None]

    # the CPU kernel adds a bias of 0.0 where there is none (a -0.0 product comes out +0.0);
    # CUDA's leaves the product as it is
    zero_bias = bias is None and out.device.type == "cpu"

    def fn(v: Expr, m: Expr, r: Expr, *affine: Expr) -> Expr:
        y = op("mul", op("sub", v, m), r)
        if weight is not None:
            y = op("mul", y, affine[0])
        if bias is not None:
            y = op("add", y, affine[-1])
        return op("add", y, const(0.0, dt)) if zero_bias else y

    result = elementwise(ctx, x.shape, out.dtype, values, fn, dt)
    mean_out = mean
    if mean_meta.dtype != dt:
        mean_out = elementwise(ctx, mean.shape, mean_meta.dtype, [mean], lambda v: v, dt)
    return result, mean_out, rstd


def _same(value: Expr) -> Expr:
    return value


def _kept_view(value: TensorValue, dims: list[int], rank: int) -> TensorValue:
    """A keepdim-shaped reduction result seen without its reduced dims."""
    shape = [n for k, n in enumerate(value.shape) if k not in dims]

    def loader(index: tuple[Ix, ...]) -> Expr:
        it = iter(index)
        return value.load([Ix() if k in dims else next(it) for k in range(rank)])

    return value.view(shape, loader, aten.view.default, (shape,))


def _normalize_channels(
    ctx: Lowering,
    x: TensorValue,
    mean: TensorValue,
    rstd: TensorValue,
    weight: TensorValue | None,
    bias: TensorValue | None,
    out_dtype: torch.dtype,
) -> TensorValue:
    """(x - mean) * rstd * weight + bias with per-channel (dim 1) statistics and affine."""
    dt = compute_dtype(out_dtype)
    stats = [mean, rstd] + [v for v in (weight, bias) if v is not None]

    def body(index: tuple[Ix, ...]) -> Expr:
        m, r, *affine = (convert(v.load((index[1],)), dt) for v in stats)
        y = op("mul", op("sub", convert(x.load(index), dt), m), r)
        if weight is not None:
            y = op("mul", y, affine[0])
        # eager adds a bias of 0.0 where there is none, so a -0.0 product comes out +0.0
        return op("add", y, affine[-1] if bias is not None else const(0.0, dt))

    return ctx.pointwise(x.shape, out_dtype, body)


@lowering(
    "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional",
    dtype="given",
    rejects=INTEGRAL,
)
def _batch_norm(ctx: Lowering, node: torch.fx.Node, x: TensorValue, weight, bias, *rest: Any):
    """Batch norm: statistics over every dim but the channels (dim 1) when training (also the
    updated running statistics, for the functional form), else the running ones."""
    if len(rest) == 3:  # no_stats: (training, momentum, eps)
        running_mean = running_var = None
        training, momentum, eps = rest
    else:
        running_mean, running_var, training, momentum, eps = rest
    outs = meta(node)
    if len(x.shape) < 2:
        raise NotLowered("batch norm of a tensor without a channel dimension")
    dt = compute_dtype(outs[0].dtype)
    dims = [d for d in range(len(x.shape)) if d != 1]
    if not training:
        if running_mean is None:
            raise NotLowered("batch norm without statistics in eval mode")
        mean, var = running_mean, running_var
    else:
        var, mean = _variance(ctx, x, dims, False, 0, dt)
        mean = _kept_view(mean, dims, len(x.shape))
    rstd = elementwise(
        ctx, [x.shape[1]], dt, [var, eps], lambda v, e: op("rsqrt", op("add", v, e)), dt
    )
    result = _normalize_channels(ctx, x, mean, rstd, weight, bias, outs[0].dtype)
    if not training:
        empty = [
            ctx.pointwise(m.shape, m.dtype, lambda index, d=m.dtype: convert_const(0, d))
            for m in outs[1:3]
        ]
        saved = tuple(empty)
    else:  # saved statistics in the dtype the op gives (the input's, for low precision on CPU)
        saved = tuple(
            v if v.dtype == m.dtype else elementwise(ctx, list(v.shape), m.dtype, [v], _same, dt)
            for v, m in zip((mean, rstd), outs[1:3])
        )
    if node.target.overloadpacket is not aten._native_batch_norm_legit_functional:
        return (result, *saved)
    if not training:
        return (result, *saved, running_mean, running_var)
    n = _numel(x, dims)
    unbiased = n / (n - 1) if n > 1 else math.inf
    new_mean = elementwise(
        ctx,
        [x.shape[1]],
        outs[3].dtype,
        [running_mean, mean],
        lambda r, m: op("add", op("mul", r, _k(1 - momentum, r)), op("mul", m, _k(momentum, m))),
        dt,
    )
    new_var = elementwise(
        ctx,
        [x.shape[1]],
        outs[4].dtype,
        [running_var, var],
        lambda r, v: op(
            "add", op("mul", r, _k(1 - momentum, r)), op("mul", v, _k(momentum * unbiased, v))
        ),
        dt,
    )
    return (result, *saved, new_mean, new_var)


def _k(value: float, like: Expr) -> Expr:
    return const(value, like.dtype)


def convert_const(value: Any, dtype: torch.dtype) -> Expr:
    return const(value, compute_dtype(dtype))


@lowering("native_group_norm", dtype="given", rejects=INTEGRAL)
def _group_norm(
    ctx: Lowering, node: torch.fx.Node, x: TensorValue, weight, bias, N, C, HxW, group, eps
):
    """Statistics over each (sample, group of channels), then a per-channel affine map."""
    out, mean_meta, rstd_meta = meta(node)
    if C % group:
        raise NotLowered("channels not divisible by groups")
    per_group = C // group
    grouped_shape = (N, group, per_group * HxW)
    strides = contiguous_strides(grouped_shape)

    def grouped(index: tuple[Ix, ...]) -> Expr:
        return x.load(unflatten(linear(index, strides), x.shape))

    xg = x.view(grouped_shape, grouped, aten.view.default, (list(grouped_shape),))
    dt = compute_dtype(out.dtype)
    var, mean = _variance(ctx, xg, [2], True, 0, dt)
    rstd = elementwise(ctx, var.shape, dt, [var, eps], lambda v, e: op("rsqrt", op("add", v, e)))
    affine = [v for v in (weight, bias) if v is not None]

    def body(index: tuple[Ix, ...]) -> Expr:
        at = (index[0], index[1].floordiv(per_group) if group > 1 else Ix(), Ix())
        y = op("sub", convert(x.load(index), dt), convert(mean.load(at), dt))
        y = op("mul", y, convert(rstd.load(at), dt))
        ws = [convert(v.load((index[1],)), dt) for v in affine]
        if weight is not None:
            y = op("mul", y, ws[0])
        # eager adds a bias of 0.0 where there is none, so a -0.0 product comes out +0.0
        return op("add", y, ws[-1] if bias is not None else const(0.0, dt))

    result = ctx.pointwise(x.shape, out.dtype, body)
    stats = []
    for value, m in ((mean, mean_meta), (rstd, rstd_meta)):
        flat = _kept_view(value, [2], 3)
        if m.dtype != dt:
            flat = elementwise(ctx, flat.shape, m.dtype, [flat], lambda v: v, dt)
        stats.append(flat)
    return (result, *stats)

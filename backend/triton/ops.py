"""The op table: for each core aten op, its lowering and its dtype rule, in one place.

`LOWERINGS["aten.add"]` is an `OpRule(lower, dtype_rule)`. `lower(ctx, node, *args, **kwargs)`
gets the fx node (for its FakeTensor `meta["val"]`) and the arguments with tensors replaced by
`TensorValue`s; it returns a `TensorValue` (or a tuple of them) and may raise `NotLowered` for
a call it does not handle, which then runs as an extern. Dtype rules:

- `promote`: operands are converted to the result's compute dtype (float16/bfloat16 compute
  in float32), the result is stored in the result's dtype;
- `compare`: operands are converted to the compute dtype of their promoted type; result bool;
- `logical`: operands are converted to bool; result bool;
- `same`: the result has the input's dtype (views, copies, reductions like amax);
- `given`: the result dtype is an argument (`_to_copy`, `full`, `arange`, `sum(dtype=)`).

Ops listed in `EXTERN_OPS` deliberately have no lowering (matmul-like work goes to torch's
kernels); `tests/backend/triton/test_ops_table.py` checks that every op of `CORE_OPS` is in
exactly one of the two.
"""

from __future__ import annotations

import math
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
    compute_dtype,
    contiguous_strides,
    linear,
    unflatten,
)
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue

aten = torch.ops.aten


@dataclass(frozen=True)
class OpRule:
    lower: Callable[..., Any]
    dtype: str


LOWERINGS: dict[str, OpRule] = {}

# Core ops that run as externs on purpose (torch's kernels), not for want of a lowering.
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
        "avg_pool2d",
        "avg_pool2d_backward",
        "max_pool2d_with_indices",
        "max_pool2d_with_indices_backward",
        "native_layer_norm_backward",
        "embedding_dense_backward",
        "gelu_backward",
        "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training",
        "argmax",
        "argmin",
        "sort",
        "topk",
        "cumsum",
        "cumprod",
        "prod",
        "gather",
        "scatter",
        "scatter_add",
        "index",
        "index_put",
        "index_select",
        "embedding",
        "cat",
        "constant_pad_nd",
        "repeat",
        "flip",
        "diagonal",
        "slice_scatter",
        "split_with_sizes",
        "rand",
        "randn",
        "bernoulli",
        "native_dropout",
        "_assert_async",
        "empty_strided",
    ]
)


def lowering(*names: str, dtype: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in names:
            key = f"aten.{name}"
            assert key not in LOWERINGS, f"{key} lowered twice"
            LOWERINGS[key] = OpRule(fn, dtype)
        return fn

    return register


# ---------------------------------------------------------------------------------------------
# Expression helpers


def op(name: str, *args: Expr, dtype: torch.dtype | None = None) -> Op:
    """Kernel op `name` on `args`; its dtype is the first value operand's unless given."""
    return Op(name, args, dtype or args[1 if name == "where" else 0].dtype)


def convert(expr: Expr, dtype: torch.dtype) -> Expr:
    if expr.dtype == dtype:
        return expr
    if isinstance(expr, Const):
        return Const(_py_value(expr.value, dtype), dtype)
    return Op("convert", (expr,), dtype)


def const(value: Any, dtype: torch.dtype) -> Const:
    return Const(_py_value(value, dtype), dtype)


def _py_value(value: Any, dtype: torch.dtype) -> bool | int | float:
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    return int(value)


def _meta(node: torch.fx.Node) -> torch.Tensor:
    return node.meta["val"]


def _meta_of(value: Any) -> Any:
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


# ---------------------------------------------------------------------------------------------
# Pointwise math


def _unary(kernel_op: str) -> Callable[[Expr], Expr]:
    return lambda x: op(kernel_op, x)


def _binary(kernel_op: str) -> Callable[[Expr, Expr], Expr]:
    return lambda a, b: op(kernel_op, a, b)


def _tanh(x: Expr) -> Expr:
    return op("tanh", x)


def _gelu(x: Expr, approximate: str) -> Expr:
    dt = x.dtype
    if approximate == "tanh":
        inner = op(
            "mul",
            const(math.sqrt(2 / math.pi), dt),
            op("add", x, op("mul", const(0.044715, dt), op("mul", x, op("mul", x, x)))),
        )
        return op("mul", op("mul", const(0.5, dt), x), op("add", const(1.0, dt), _tanh(inner)))
    erf = op("erf", op("mul", x, const(1 / math.sqrt(2), dt)))
    return op("mul", op("mul", const(0.5, dt), x), op("add", const(1.0, dt), erf))


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
    "relu": lambda x: op("maximum", x, const(0, x.dtype)),
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


def _register_unary(table: dict[str, Callable[[Expr], Expr]], rounding: bool = False) -> None:
    for name, fn in table.items():

        def lower(ctx: Lowering, node: torch.fx.Node, x: TensorValue, *rest: Any, _fn=fn, **kw):
            if rest or kw:
                raise NotLowered("extra arguments")
            out = _meta(node)
            if rounding and not out.dtype.is_floating_point:
                return elementwise(ctx, out.shape, out.dtype, [x], lambda v: v)
            return elementwise(ctx, out.shape, out.dtype, [x], _fn)

        lowering(name, dtype="promote")(lower)


_register_unary(_UNARY_FLOAT)
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
            out = _meta(node)
            if out.dtype == torch.bool and _k in ("add", "sub", "mul"):
                raise NotLowered("arithmetic on bool")

            def fn(x: Expr, y: Expr) -> Expr:
                if alpha != 1:
                    y = op("mul", y, const(alpha, y.dtype))
                return op(_k, x, y)

            return elementwise(ctx, out.shape, out.dtype, [a, b], fn)

        lowering(name, dtype="promote")(lower)


_register_binary()


@lowering("div", dtype="promote")
def _div(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any, *, rounding_mode: Any = None):
    out = _meta(node)
    if rounding_mode is None:
        return elementwise(ctx, out.shape, out.dtype, [a, b], _binary("truediv"))
    if not out.dtype.is_floating_point:
        raise NotLowered("integer division with rounding")
    rounding = "trunc" if rounding_mode == "trunc" else "floor"
    return elementwise(
        ctx, out.shape, out.dtype, [a, b], lambda x, y: op(rounding, op("truediv", x, y))
    )


@lowering("fmod", "remainder", dtype="promote")
def _fmod(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any):
    out = _meta(node)
    floor = node.target.overloadpacket is aten.remainder
    if not out.dtype.is_floating_point:
        if floor:
            raise NotLowered("integer remainder")
        return elementwise(ctx, out.shape, out.dtype, [a, b], _binary("mod"))
    rounding = "floor" if floor else "trunc"

    def fn(x: Expr, y: Expr) -> Expr:
        return op("sub", x, op("mul", op(rounding, op("truediv", x, y)), y))

    return elementwise(ctx, out.shape, out.dtype, [a, b], fn)


@lowering("pow", dtype="promote")
def _pow(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any):
    out = _meta(node)
    if not out.dtype.is_floating_point:
        raise NotLowered("integer pow")
    if not isinstance(b, TensorValue):
        return elementwise(ctx, out.shape, out.dtype, [a], lambda x: _pow_scalar(x, b))

    def fn(x: Expr, y: Expr) -> Expr:
        magnitude = op("exp", op("mul", y, op("log", op("abs", x))))
        whole = op("eq", op("floor", y), y, dtype=torch.bool)
        half = op("mul", y, const(0.5, y.dtype))
        odd = op("and", whole, op("ne", op("floor", half), half, dtype=torch.bool))
        negative = op("lt", x, const(0.0, x.dtype), dtype=torch.bool)
        signed = op("where", op("and", negative, odd), op("neg", magnitude), magnitude)
        nan = op("and", negative, op("not", whole, dtype=torch.bool))
        zero = op("eq", x, const(0.0, x.dtype), dtype=torch.bool)
        # 0 ** y: 1 for y == 0, 0 for y > 0, inf for y < 0 (exp(y * log 0) gives these too).
        result = op("where", nan, const(math.nan, x.dtype), signed)
        return op(
            "where",
            op("and", zero, op("eq", y, const(0.0, y.dtype), dtype=torch.bool)),
            const(1.0, x.dtype),
            result,
        )

    return elementwise(ctx, out.shape, out.dtype, [a, b], fn)


def _pow_scalar(x: Expr, exponent: Any) -> Expr:
    dt = x.dtype
    e = float(exponent)
    if e == 0:
        return op("add", op("mul", x, const(0.0, dt)), const(1.0, dt))
    if e == 0.5:
        return op("sqrt", x)
    if e == -0.5:
        return op("rsqrt", x)
    if e.is_integer() and abs(e) <= 4:
        result = x
        for _ in range(int(abs(e)) - 1):
            result = op("mul", result, x)
        return op("truediv", const(1.0, dt), result) if e < 0 else result
    magnitude = op("exp", op("mul", op("log", op("abs", x)), const(e, dt)))
    if not e.is_integer():
        return op("exp", op("mul", op("log", x), const(e, dt)))
    if e % 2 == 0:
        return magnitude
    return op(
        "where", op("lt", x, const(0.0, dt), dtype=torch.bool), op("neg", magnitude), magnitude
    )


_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}


def _register_compare() -> None:
    for name, kernel_op in _COMPARE.items():

        def lower(ctx: Lowering, node: torch.fx.Node, a: Any, b: Any, _k=kernel_op):
            dt = compute_dtype(torch.result_type(_meta_of(a), _meta_of(b)))
            return elementwise(
                ctx,
                _meta(node).shape,
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
    out = _meta(node)
    return elementwise(ctx, out.shape, out.dtype, [a, b], _binary(kernel_op), torch.bool)


@lowering("logical_not", dtype="logical")
def _logical_not(ctx: Lowering, node: torch.fx.Node, a: TensorValue):
    out = _meta(node)
    return elementwise(
        ctx, out.shape, out.dtype, [a], lambda x: op("not", x, dtype=torch.bool), torch.bool
    )


@lowering("bitwise_not", dtype="same")
def _bitwise_not(ctx: Lowering, node: torch.fx.Node, a: TensorValue):
    out = _meta(node)
    if out.dtype == torch.bool:
        return elementwise(ctx, out.shape, out.dtype, [a], lambda x: op("not", x), torch.bool)
    return elementwise(ctx, out.shape, out.dtype, [a], _unary("invert"))


@lowering("where", dtype="promote")
def _where(ctx: Lowering, node: torch.fx.Node, cond: TensorValue, a: Any, b: Any):
    out = _meta(node)
    dt = compute_dtype(out.dtype)

    def body(index: tuple[Ix, ...]) -> Expr:
        c = operand(cond, index, out.shape, torch.bool)
        return op("where", c, operand(a, index, out.shape, dt), operand(b, index, out.shape, dt))

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("clamp", "hardtanh", dtype="promote")
def _clamp(ctx: Lowering, node: torch.fx.Node, x: TensorValue, lo: Any = None, hi: Any = None):
    out = _meta(node)
    if node.target.overloadpacket is aten.hardtanh:
        lo, hi = (-1.0 if lo is None else lo), (1.0 if hi is None else hi)
    values = [x] + [v for v in (lo, hi) if v is not None]

    def fn(v: Expr, *bounds: Expr) -> Expr:
        k = 0
        if lo is not None:
            v, k = op("maximum", v, bounds[0]), 1
        if hi is not None:
            v = op("minimum", v, bounds[k])
        return v

    return elementwise(ctx, out.shape, out.dtype, values, fn)


@lowering("leaky_relu", dtype="promote")
def _leaky_relu(ctx: Lowering, node: torch.fx.Node, x: TensorValue, slope: float = 0.01):
    out = _meta(node)

    def fn(v: Expr) -> Expr:
        positive = op("gt", v, const(0.0, v.dtype), dtype=torch.bool)
        return op("where", positive, v, op("mul", v, const(slope, v.dtype)))

    return elementwise(ctx, out.shape, out.dtype, [x], fn)


@lowering("elu", dtype="promote")
def _elu(ctx: Lowering, node: torch.fx.Node, x: TensorValue, alpha=1.0, scale=1.0, input_scale=1.0):
    out = _meta(node)

    def fn(v: Expr) -> Expr:
        dt = v.dtype
        negative = op(
            "mul", const(alpha * scale, dt), op("expm1", op("mul", v, const(input_scale, dt)))
        )
        positive = op("gt", v, const(0.0, dt), dtype=torch.bool)
        return op("where", positive, op("mul", v, const(scale, dt)), negative)

    return elementwise(ctx, out.shape, out.dtype, [x], fn)


@lowering("gelu", dtype="promote")
def _gelu_lowering(ctx: Lowering, node: torch.fx.Node, x: TensorValue, *, approximate="none"):
    out = _meta(node)
    return elementwise(ctx, out.shape, out.dtype, [x], lambda v: _gelu(v, approximate))


# ---------------------------------------------------------------------------------------------
# Copies, casts and creation


@lowering("_to_copy", "clone", "lift_fresh_copy", dtype="given")
def _copy(ctx: Lowering, node: torch.fx.Node, x: TensorValue, **kwargs: Any):
    out = _meta(node)
    if str(out.device) != ctx.graph.device and x.base.buffer:
        raise NotLowered("copy to another device")
    return elementwise(ctx, out.shape, out.dtype, [x], lambda v: v, compute_dtype(x.dtype))


@lowering("copy", dtype="given")
def _copy_into(ctx: Lowering, node: torch.fx.Node, dst: TensorValue, src: TensorValue, *rest):
    out = _meta(node)
    return elementwise(ctx, out.shape, out.dtype, [src], lambda v: v, compute_dtype(src.dtype))


@lowering("full", "full_like", "scalar_tensor", "empty", dtype="given")
def _full(ctx: Lowering, node: torch.fx.Node, *args: Any, **kwargs: Any):
    out = _meta(node)
    packet = node.target.overloadpacket
    value = {aten.full: lambda: args[1], aten.full_like: lambda: args[1]}.get(
        packet, lambda: args[0] if packet is aten.scalar_tensor else 0
    )()
    dt = compute_dtype(out.dtype)
    return ctx.pointwise(out.shape, out.dtype, lambda index: const(value, dt))


@lowering("arange", dtype="given")
def _arange(ctx: Lowering, node: torch.fx.Node, *args: Any, **kwargs: Any):
    out = _meta(node)
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


# ---------------------------------------------------------------------------------------------
# Views: index arithmetic, no copy


@lowering("view", "_unsafe_view", "reshape", dtype="same")
def _view(ctx: Lowering, node: torch.fx.Node, x: TensorValue, shape: Sequence[int]):
    out = tuple(_meta(node).shape)
    strides = contiguous_strides(out)

    def loader(index: tuple[Ix, ...]) -> Expr:
        return x.load(unflatten(linear(index, strides), x.shape))

    return x.view(out, loader, node.target, (list(shape),))


@lowering("alias", dtype="same")
def _alias(ctx: Lowering, node: torch.fx.Node, x: TensorValue):
    return x.view(x.shape, x.loader, node.target, ())


@lowering("permute", dtype="same")
def _permute(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims: Sequence[int]):
    rank = len(x.shape)
    dims = [d % rank for d in dims] if rank else []

    def loader(index: tuple[Ix, ...]) -> Expr:
        source = [Ix()] * rank
        for k, d in enumerate(dims):
            source[d] = index[k]
        return x.load(source)

    return x.view(_meta(node).shape, loader, node.target, (list(dims),))


@lowering("expand", dtype="same")
def _expand(ctx: Lowering, node: torch.fx.Node, x: TensorValue, shape: Sequence[int], **kw):
    out = tuple(_meta(node).shape)
    return x.view(
        out, lambda index: x.load(broadcast_index(x, index, out)), node.target, (list(shape),)
    )


@lowering("unsqueeze", dtype="same")
def _unsqueeze(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int):
    dim = dim % (len(x.shape) + 1)
    return x.view(
        _meta(node).shape,
        lambda index: x.load(index[:dim] + index[dim + 1 :]),
        node.target,
        (dim,),
    )


@lowering("squeeze", dtype="same")
def _squeeze(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims: Any = None):
    rank = len(x.shape)
    if dims is None:
        dims = range(rank)
    elif isinstance(dims, int):
        dims = [dims]
    gone = {d % rank for d in dims if x.shape[d % rank] == 1} if rank else set()

    def loader(index: tuple[Ix, ...]) -> Expr:
        it = iter(index)
        return x.load([Ix() if k in gone else next(it) for k in range(rank)])

    args = () if node.args[1:] == () else (node.args[1],)
    return x.view(_meta(node).shape, loader, node.target, args)


@lowering("slice", dtype="same")
def _slice(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim=0, start=None, end=None, step=1):
    rank = len(x.shape)
    dim = dim % rank
    start = 0 if start is None else start
    if start < 0:
        start += x.shape[dim]
    start = min(max(start, 0), x.shape[dim])

    def loader(index: tuple[Ix, ...]) -> Expr:
        source = list(index)
        source[dim] = index[dim] * step + start
        return x.load(source)

    return x.view(_meta(node).shape, loader, node.target, tuple(node.args[1:]))


@lowering("select", dtype="same")
def _select(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int, index: int):
    dim = dim % len(x.shape)
    index = index % x.shape[dim]

    def loader(idx: tuple[Ix, ...]) -> Expr:
        return x.load(idx[:dim] + (Ix((), index),) + idx[dim:])

    return x.view(_meta(node).shape, loader, node.target, (node.args[1], node.args[2]))


# ---------------------------------------------------------------------------------------------
# Reductions


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
) -> TensorValue:
    """Reduce `x` over `dims`; with `keepdim`, a view of the result with 1s at `dims`."""
    kept = [n for k, n in enumerate(x.shape) if k not in dims]
    ranges = [x.shape[d] for d in dims]
    dt = compute_dtype(out_dtype)

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


@lowering("sum", dtype="given")
def _sum(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims=None, keepdim=False, **kw):
    return reduce(ctx, x, _dims(x, dims), keepdim, "sum", _meta(node).dtype)


@lowering("mean", dtype="given")
def _mean(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims=None, keepdim=False, **kw):
    out = _meta(node)
    dims = _dims(x, dims)
    total = reduce(ctx, x, dims, keepdim, "sum", out.dtype)
    n = _numel(x, dims)
    return elementwise(ctx, out.shape, out.dtype, [total, n], _binary("truediv"))


@lowering("amax", "amin", dtype="same")
def _amax(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims=(), keepdim=False):
    kind = "max" if node.target.overloadpacket is aten.amax else "min"
    return reduce(ctx, x, _dims(x, dims), keepdim, kind, _meta(node).dtype)


@lowering("max", "min", dtype="same")
def _max(ctx: Lowering, node: torch.fx.Node, x: TensorValue, *args: Any):
    if args:
        if isinstance(args[0], TensorValue):  # max.other: elementwise
            out = _meta(node)
            name = "maximum" if node.target.overloadpacket is aten.max else "minimum"
            return elementwise(ctx, out.shape, out.dtype, [x, args[0]], _binary(name))
        raise NotLowered("max/min over a dim returns indices")
    kind = "max" if node.target.overloadpacket is aten.max else "min"
    return reduce(ctx, x, _dims(x, None), False, kind, _meta(node).dtype)


@lowering("any", dtype="given")
def _any(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims=None, keepdim=False):
    return reduce(
        ctx,
        x,
        _dims(x, dims),
        keepdim,
        "max",
        torch.bool,
        pre=lambda v: convert(v, torch.bool),
    )


def _variance(
    ctx: Lowering,
    x: TensorValue,
    dims: list[int],
    keepdim: bool,
    correction: float,
    dtype: torch.dtype,
) -> tuple[TensorValue, TensorValue]:
    """(variance, mean) of `x` over `dims`, the mean kept with dims (for broadcasting)."""
    n = _numel(x, dims)
    mean = elementwise(
        ctx,
        [1 if k in dims else s for k, s in enumerate(x.shape)],
        dtype,
        [reduce(ctx, x, dims, True, "sum", dtype), n],
        _binary("truediv"),
    )
    centered = elementwise(ctx, x.shape, dtype, [x, mean], _binary("sub"))
    squares = reduce(ctx, centered, dims, keepdim, "sum", dtype, pre=lambda v: op("mul", v, v))
    denominator = max(n - correction, 0)
    var = elementwise(ctx, squares.shape, dtype, [squares, denominator], _binary("truediv"))
    return var, mean


@lowering("var", dtype="given")
def _var(
    ctx: Lowering,
    node: torch.fx.Node,
    x: TensorValue,
    dims=None,
    *rest,
    correction=None,
    keepdim=False,
):
    if rest:  # var.dim(x, dims, unbiased, keepdim)
        correction = 1 if rest[0] else 0
        keepdim = rest[1] if len(rest) > 1 else keepdim
    correction = 1 if correction is None else correction
    out = _meta(node)
    return _variance(ctx, x, _dims(x, dims), keepdim, correction, out.dtype)[0]


@lowering("linalg_vector_norm", dtype="given")
def _vector_norm(
    ctx: Lowering, node: torch.fx.Node, x: TensorValue, ord=2, dim=None, keepdim=False, **kw
):
    if ord != 2:
        raise NotLowered(f"ord={ord}")
    out = _meta(node)
    total = reduce(ctx, x, _dims(x, dim), keepdim, "sum", out.dtype, pre=lambda v: op("mul", v, v))
    return elementwise(ctx, out.shape, out.dtype, [total], _unary("sqrt"))


# ---------------------------------------------------------------------------------------------
# Decompositions: softmax, log_softmax, layer_norm (reductions + pointwise; the scheduler fuses)


@lowering("_softmax", "_log_softmax", dtype="given")
def _softmax(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int, half_to_float: bool):
    out = _meta(node)
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


@lowering("native_layer_norm", dtype="given")
def _layer_norm(
    ctx: Lowering,
    node: torch.fx.Node,
    x: TensorValue,
    shape: Sequence[int],
    weight: TensorValue | None,
    bias: TensorValue | None,
    eps: float,
):
    out, mean_meta, rstd_meta = _meta(node)
    dims = list(range(len(x.shape) - len(shape), len(x.shape)))
    dt = compute_dtype(out.dtype)
    var, mean = _variance(ctx, x, dims, True, 0, dt)
    rstd = elementwise(
        ctx, var.shape, rstd_meta.dtype, [var, eps], lambda v, e: op("rsqrt", op("add", v, e))
    )
    values = [x, mean, rstd] + [v for v in (weight, bias) if v is not None]

    def fn(v: Expr, m: Expr, r: Expr, *affine: Expr) -> Expr:
        y = op("mul", op("sub", v, m), r)
        if weight is not None:
            y = op("mul", y, affine[0])
        if bias is not None:
            y = op("add", y, affine[-1])
        return y

    result = elementwise(ctx, x.shape, out.dtype, values, fn, dt)
    mean_out = mean
    if mean_meta.dtype != dt:
        mean_out = elementwise(ctx, mean.shape, mean_meta.dtype, [mean], lambda v: v, dt)
    return result, mean_out, rstd

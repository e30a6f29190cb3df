"""Pointwise lowerings: arithmetic, math functions, comparisons, logical and bitwise ops,
`where`/`clamp`, activations, casts and copies, and tensor creation (`full`, `arange`).

Each is a `Pointwise` node whose body applies the op to its operands loaded at the same
element (broadcasting by index: a size-1 dimension reads index 0). Division and `pow` have
modules of their own (division.py, powers.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from framejit.backend.triton.ir import Expr, IndexValue, Ix, compute_dtype
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue
from framejit.backend.triton.ops.rounding import eager_gives_nan
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
        # eager adds a bias of 0.0 where there is none, so a -0.0 product comes out +0.0
        return op("add", y, affine[-1] if bias is not None else const(0.0, dt))

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
    nan_at_inf = approximate == "none" and eager_gives_nan(
        torch.nn.functional.gelu, str(out.device), out.dtype, math.inf
    )
    return elementwise(ctx, out.shape, out.dtype, [x], lambda v: _gelu(v, approximate, nan_at_inf))


# ---------------------------------------------------------------------------------------------
# Copies, casts and creation


@lowering("_to_copy", "clone", "lift_fresh_copy", dtype="given")
def _copy(ctx: Lowering, node: torch.fx.Node, x: TensorValue, **kwargs: Any):
    out = meta(node)
    if str(out.device) != ctx.graph.device and x.base.buffer and node not in ctx.host_nodes:
        raise NotLowered("copy to another device")
    return elementwise(ctx, out.shape, out.dtype, [x], lambda v: v, compute_dtype(x.dtype))


@lowering("copy", dtype="given")
def _copy_into(ctx: Lowering, node: torch.fx.Node, dst: TensorValue, src: TensorValue, *rest):
    out = meta(node)
    return elementwise(ctx, out.shape, out.dtype, [src], lambda v: v, compute_dtype(src.dtype))


def _fits(value: Any, out: Any, scalar: bool) -> bool:
    """Whether eager's fill accepts the constant `value` for `out` (300 for uint8 and NaN for an
    integer type overflow; so do 70000.0 for float16 and 1e300 for float32, except in a CPU
    tensor of one element, which torch fills without the check: torch raises where not)."""
    if type(value) not in (bool, int, float):
        return True  # a symbolic value: torch's op would check it at each call
    one = scalar or (
        out.device.type == "cpu"
        and all(type(n) is int for n in out.shape)
        and math.prod(out.shape) == 1
    )
    try:
        torch.full(() if one else (2,), value, dtype=out.dtype)
    except RuntimeError:
        return False
    return True


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
    if not _fits(value, out, packet is aten.scalar_tensor):
        raise NotLowered(f"{value!r} overflows {out.dtype} (eager raises)")
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

"""Indexing lowerings: ops whose output element reads one input element chosen by index
arithmetic, piecewise (cat, constant_pad_nd, slice_scatter), reordered (flip, repeat) or read
from memory (gather, index, index_select, embedding: `Indirect` indices).

Invariants:

- Every piece of a piecewise op is read under `masked(cond, ...)`, so no lane ever loads
  outside the piece it belongs to; the pieces are joined with `where`.
- Indices read from memory are wrapped (`idx + n` for a negative `idx`) where torch allows
  negative indices (`x[idx]`), then checked: the read goes through
  `masked(in_bounds(idx, n), ...)` (`BoundsCheck`), so an out-of-range index never reaches an
  address; the kernel records it and the wrapper raises (`bounds.IndexOutOfBounds`). An
  index whose values are provably in range (`value_range`: an `arange`, an `argmax` over at
  most `n` elements, a clamp, constants) gets no check and costs nothing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from framejit.backend.triton.ir import (
    BoundsCheck,
    Const,
    Expr,
    IndexValue,
    Indirect,
    InputBuffer,
    Ix,
    Load,
    LoopGraph,
    Op,
    Pointwise,
    Reduction,
    Unknown,
    compute_dtype,
    is_static,
    more_than_one,
    provably_le,
    provably_lt,
)
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue
from framejit.backend.triton.ops.table import (
    all_of,
    broadcast_index,
    const,
    convert,
    in_range,
    lowering,
    masked,
    meta,
    op,
    slice_bound,
)

# ---------------------------------------------------------------------------------------------
# Piecewise and reordering copies


@lowering("cat", dtype="promote")
def _cat(ctx: Lowering, node: torch.fx.Node, tensors: Sequence[TensorValue], dim: int = 0):
    out = meta(node)
    rank = len(out.shape)
    dim = dim % rank
    # torch skips 1-d empty tensors in a cat of higher-rank tensors (legacy behaviour)
    pieces = [t for t in tensors if not (len(t.shape) == 1 and t.shape[0] == 0 and rank != 1)]
    dt = compute_dtype(out.dtype)

    def body(index: tuple[Ix, ...]) -> Expr:
        parts: list[tuple[Expr | None, Expr]] = []
        start = 0
        for t in pieces:
            size = t.shape[dim]
            if size == 0:
                continue
            cond = in_range(index[dim], start, start + size)
            source = list(index)
            source[dim] = index[dim] + (-start)
            parts.append((cond, masked(cond, convert(t.load(source), dt), 0)))
            start += size
        if not parts:
            return const(0, dt)
        result = parts[-1][1]
        for cond, value in reversed(parts[:-1]):
            result = value if cond is None else op("where", cond, value, result)
        return result

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("constant_pad_nd", dtype="same")
def _pad(ctx: Lowering, node: torch.fx.Node, x: TensorValue, pad: Sequence[int], value=0):
    out = meta(node)
    rank = len(x.shape)
    dt = compute_dtype(out.dtype)
    lefts = {rank - 1 - k // 2: pad[k] for k in range(0, len(pad), 2)}

    def body(index: tuple[Ix, ...]) -> Expr:
        source = list(index)
        conds = []
        for d, left in lefts.items():
            source[d] = index[d] + (-left)
            conds.append(in_range(source[d], 0, x.shape[d]))
        return masked(all_of(conds), convert(x.load(source), dt), value)

    return ctx.pointwise(out.shape, out.dtype, body)


aten = torch.ops.aten

# The largest pooling window unrolled into a kernel's body (a larger one stays torch's kernel).
MAX_POOL_TAPS = 49


def _sizes(value: Any, n: int, default: Sequence[int] | None = None) -> tuple[int, ...]:
    """A pooling parameter as `n` ints (one given for all dims, or one per dim)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values and default is not None:
        values = list(default)
    if len(values) == 1:
        values = values * n
    if len(values) != n or not all(isinstance(v, int) for v in values):
        raise NotLowered(f"pooling parameter {value!r}")
    return tuple(values)


def _window(
    x: TensorValue, kind: str, n: int, kernel_size: Any, stride: Any, padding: Any
) -> tuple[tuple[int, ...], ...]:
    """An n-d pool's (kernel, stride, padding, input extent) sizes, or NotLowered where the
    pool stays torch's kernel (a large window, integers, an extent of symbolic size)."""
    kernel = _sizes(kernel_size, n)
    steps, pads = _sizes(stride, n, default=kernel), _sizes(padding, n)
    if math.prod(kernel) > MAX_POOL_TAPS:
        taps = math.prod(kernel)
        raise NotLowered(f"a pooling window of {taps} elements (more than {MAX_POOL_TAPS})")
    if not x.dtype.is_floating_point:
        raise NotLowered(f"{kind} pooling of {x.dtype}")
    extent = tuple(x.shape[-n:])
    if not all(is_static(k) for k in extent):
        raise NotLowered(f"{kind} pooling over an input of symbolic size")
    return kernel, steps, pads, extent


def _flat(index: Sequence[Ix], extent: Sequence[int]) -> IndexValue:
    """The position of `index` in a row-major volume of `extent` (a max pool's indices)."""
    flat = Ix()
    for i, size in zip(index, extent):
        flat = flat * size + i
    return IndexValue(flat, torch.int64)


@lowering("max_pool2d_with_indices", "max_pool3d_with_indices", dtype="same")
def _max_pool(
    ctx: Lowering,
    node: torch.fx.Node,
    x: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = 0,
    dilation: Sequence[int] = 1,
    ceil_mode: bool = False,
):
    """A 2-d or 3-d max pool as a loop over its output, each element a scan of its window
    (unrolled), in eager's order and with eager's rule (an element is taken if it is the
    window's first in the input, greater than the best so far, or NaN), so the values and the
    indices (flat in the input's plane or volume, int64) are eager's, ties and NaNs included.
    A kernel that only needs the values (inference) never computes the indices: they are a
    separate loop that is dropped when unused. `ceil_mode` needs nothing here: the output's
    size says how many windows there are, and taps outside the input are skipped."""
    values_meta, indices_meta = meta(node)
    n = 3 if node.target.overloadpacket is aten.max_pool3d_with_indices else 2
    kernel, steps, pads, extent = _window(x, "max", n, kernel_size, stride, padding)
    dilations = _sizes(dilation, n)
    dt = compute_dtype(x.dtype)

    def taps(index: tuple[Ix, ...]) -> list[tuple[Expr | None, Expr, Expr]]:
        """(in the input, value or -inf, flat index) of each tap that may be in the input."""
        lead, out = index[:-n], index[-n:]
        found = []
        for offsets in itertools.product(*(range(k) for k in kernel)):
            at = [
                o * st + (a * d - p) for o, st, a, d, p in zip(out, steps, offsets, dilations, pads)
            ]
            inside = all_of([in_range(i, 0, size) for i, size in zip(at, extent)])
            if isinstance(inside, Const) and not inside.value:
                continue
            value = masked(inside, convert(x.load((*lead, *at)), dt), -math.inf)
            found.append((inside, value, _flat(at, extent)))
        if not found:
            raise NotLowered("a pooling window entirely outside its input")
        return found

    return _max_pool_outputs(ctx, values_meta, indices_meta, x.dtype, taps)


# A pool's taps at one output element: (in the input (None: always), value, flat index).
Taps = Callable[[tuple[Ix, ...]], list[tuple[Expr | None, Expr, Expr]]]


def _max_pool_outputs(
    ctx: Lowering, values_meta: Any, indices_meta: Any, dtype: torch.dtype, taps: Taps
) -> tuple[TensorValue, TensorValue]:
    """A max pool's values and indices, two loops over the output: values and indices are
    eager's, by eager's rule (start at the window's first tap in the input, its index even if
    every value is -inf; take a tap greater than the best so far, or NaN). Each tap's value is
    -inf outside the input. Expression trees grow as taps**2, not 2**taps: each step reads the
    previous best once in the values' chain and once in the indices' condition."""

    def largest(index: tuple[Ix, ...]) -> Expr:
        # NaN wins and stays; of equal values (0.0 and -0.0) the earlier (`maximum` gives its
        # second operand for equal ones)
        best: Expr | None = None
        for _, value, _ in taps(index):
            best = value if best is None else op("maximum", value, best)
        assert best is not None
        return convert(best, dtype)

    def where_largest(index: tuple[Ix, ...]) -> Expr:
        found = taps(index)
        where = found[-1][2]
        for inside, _, flat in reversed(found[:-1]):
            where = flat if inside is None else op("where", inside, flat, where)
        best = found[0][1]
        for inside, value, flat in found[1:]:
            take = op(
                "or",
                op("gt", value, best, dtype=torch.bool),
                op("ne", value, value, dtype=torch.bool),
                dtype=torch.bool,
            )
            if inside is not None:
                take = op("and", inside, take, dtype=torch.bool)
            where = op("where", take, flat, where)
            best = op("maximum", value, best)
        return where

    values = ctx.pointwise(values_meta.shape, values_meta.dtype, largest)
    indices = ctx.pointwise(indices_meta.shape, torch.int64, where_largest)
    return values, indices


def _adaptive_spans(n: int, out: int) -> tuple[int, int]:
    """(fewest, most) input elements in the windows of an adaptive pool from `n` to `out`:
    window i covers [i*n // out, ceil((i+1)*n / out))."""
    sizes = [-(-(i + 1) * n // out) - i * n // out for i in range(out)]
    return min(sizes), max(sizes)


def _adaptive_span(o: Ix, n: int, out: int) -> tuple[Ix, Ix]:
    """Where window `o` of an adaptive pool from `n` to `out` starts and ends (exclusive)."""
    return (o * n).floordiv(out), (o * n + (n + out - 1)).floordiv(out)


def _before(ix: Ix, end: Ix) -> Expr:
    return op("lt", IndexValue(ix, torch.int64), IndexValue(end, torch.int64), dtype=torch.bool)


def _adaptive_taps(x: TensorValue, out_shape: Sequence[int], fill: float, dt: torch.dtype) -> Taps:
    """The taps of an adaptive 2-d pool: per dim, window i starts at i*n // out and ends at
    ceil((i+1)*n / out); a tap past the fewest elements any window has is tested against its
    window's end. A tap outside its window reads nothing and gives `fill`."""
    height, width = x.shape[-2], x.shape[-1]
    out_h, out_w = out_shape[-2], out_shape[-1]
    if not all(is_static(n) for n in (height, width, out_h, out_w)):
        raise NotLowered("adaptive pooling with symbolic sizes")
    (few_h, most_h), (few_w, most_w) = _adaptive_spans(height, out_h), _adaptive_spans(width, out_w)
    if most_h * most_w > MAX_POOL_TAPS:
        raise NotLowered(f"an adaptive pool window of up to {most_h * most_w} elements")

    def taps(index: tuple[Ix, ...]) -> list[tuple[Expr | None, Expr, Expr]]:
        *lead, oh, ow = index
        (h0, h1), (w0, w1) = _adaptive_span(oh, height, out_h), _adaptive_span(ow, width, out_w)
        found = []
        for a in range(most_h):
            for b in range(most_w):
                ih, iw = h0 + a, w0 + b
                inside = all_of(
                    [
                        _before(ih, h1) if a >= few_h else None,
                        _before(iw, w1) if b >= few_w else None,
                    ]
                )
                value = masked(inside, convert(x.load((*lead, ih, iw)), dt), fill)
                found.append((inside, value, _flat((ih, iw), (height, width))))
        return found

    return taps


@lowering("adaptive_max_pool2d", dtype="same")
def _adaptive_max_pool2d(
    ctx: Lowering, node: torch.fx.Node, x: TensorValue, output_size: Sequence[int]
):
    """An adaptive 2-d max pool: `_max_pool_outputs` over each output element's window."""
    values_meta, indices_meta = meta(node)
    if not x.dtype.is_floating_point:
        raise NotLowered(f"max pooling of {x.dtype}")
    taps = _adaptive_taps(x, values_meta.shape, -math.inf, compute_dtype(x.dtype))
    return _max_pool_outputs(ctx, values_meta, indices_meta, x.dtype, taps)


@lowering("_adaptive_avg_pool2d", dtype="same")
def _adaptive_avg_pool2d(
    ctx: Lowering, node: torch.fx.Node, x: TensorValue, output_size: Sequence[int]
):
    """An adaptive 2-d average pool: each output element the sum of its window (row-major,
    from +0.0) divided by the window's height, then by its width, as eager divides."""
    out = meta(node)
    if not x.dtype.is_floating_point:
        raise NotLowered(f"average pooling of {x.dtype}")
    dt = compute_dtype(x.dtype)
    taps = _adaptive_taps(x, out.shape, 0.0, dt)
    height, width = x.shape[-2], x.shape[-1]
    out_h, out_w = out.shape[-2], out.shape[-1]

    def body(index: tuple[Ix, ...]) -> Expr:
        *_, oh, ow = index
        total: Expr = const(0, dt)
        for _, value, _ in taps(index):
            total = op("add", total, value)
        sizes = []
        for o, n, m in ((oh, height, out_h), (ow, width, out_w)):
            start, end = _adaptive_span(o, n, m)
            sizes.append(convert(IndexValue(end + start * -1, torch.int64), dt))
        return convert(op("truediv", op("truediv", total, sizes[0]), sizes[1]), x.dtype)

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("avg_pool2d", "avg_pool3d", dtype="same")
def _avg_pool(
    ctx: Lowering,
    node: torch.fx.Node,
    x: TensorValue,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: Sequence[int] = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
):
    """A 2-d or 3-d average pool as a loop over the output, each element the sum of its
    window in row-major order (as eager adds it, in float32 for half types) divided by eager's
    count: `divisor_override`, else the window's taps inside the padded input
    (`count_include_pad`), else those inside the input. The counts are sums of the taps'
    conditions, so windows cut by the edges or by `ceil_mode` need no case of their own."""
    out = meta(node)
    n = 3 if node.target.overloadpacket is aten.avg_pool3d else 2
    if n == 3 and out.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
        raise NotLowered(f"avg_pool3d of {x.dtype} on the CPU (eager's kernel raises)")
    kernel, steps, pads, extent = _window(x, "average", n, kernel_size, stride, padding)
    dt = compute_dtype(x.dtype)

    def body(index: tuple[Ix, ...]) -> Expr:
        lead, outs = index[:-n], index[-n:]
        total: Expr = const(0, dt)  # eager's sum starts at 0 (so a sum of -0.0s is 0.0)
        count: Expr | None = None
        for offsets in itertools.product(*(range(k) for k in kernel)):
            at = [o * st + (a - p) for o, st, a, p in zip(outs, steps, offsets, pads)]
            inside = all_of([in_range(i, 0, size) for i, size in zip(at, extent)])
            counted = inside
            if count_include_pad:
                counted = all_of(
                    [in_range(i, -p, size + p) for i, size, p in zip(at, extent, pads)]
                )
            if not (isinstance(inside, Const) and not inside.value):
                value = masked(inside, convert(x.load((*lead, *at)), dt), 0)
                total = op("add", total, value)
            if divisor_override is None and not (isinstance(counted, Const) and not counted.value):
                one = (
                    const(1, dt)
                    if counted is None
                    else op("where", counted, const(1, dt), const(0, dt))
                )
                count = one if count is None else op("add", count, one)
        divisor = const(divisor_override, dt) if divisor_override is not None else count
        assert divisor is not None
        return convert(op("truediv", total, divisor), x.dtype)

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("flip", dtype="same")
def _flip(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims: Sequence[int]):
    rank = len(x.shape)
    flipped = {d % rank for d in dims} if rank else set()

    def body(index: tuple[Ix, ...]) -> Expr:
        source = [
            Ix.of(x.shape[d] - 1) + i * -1 if d in flipped and more_than_one(x.shape[d]) else i
            for d, i in enumerate(index)
        ]
        return x.load(source)

    return ctx.pointwise(x.shape, x.dtype, body)


@lowering("repeat", dtype="same")
def _repeat(ctx: Lowering, node: torch.fx.Node, x: TensorValue, repeats: Sequence[int]):
    out = meta(node)
    lead = len(repeats) - len(x.shape)

    def body(index: tuple[Ix, ...]) -> Expr:
        source = [
            index[lead + k].mod(n) if more_than_one(n) else Ix() for k, n in enumerate(x.shape)
        ]
        return x.load(source)

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("slice_scatter", dtype="same")
def _slice_scatter(
    ctx: Lowering,
    node: torch.fx.Node,
    base: TensorValue,
    src: TensorValue,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
):
    out = meta(node)
    dim = dim % len(base.shape)
    n = base.shape[dim]
    start = slice_bound(ctx, 0 if start is None else start, n)
    end = slice_bound(ctx, n if end is None else end, n)
    dt = compute_dtype(out.dtype)

    def body(index: tuple[Ix, ...]) -> Expr:
        offset = index[dim] + (-start)
        cond = in_range(index[dim], start, end)
        if step != 1:
            on_step = op("eq", IndexValue(offset.mod(step), torch.int64), const(0, torch.int64))
            cond = all_of([cond, on_step])
        source = list(index)
        source[dim] = offset.floordiv(step)
        taken = masked(cond, convert(src.load(source), dt), 0)
        if cond is None:
            return taken
        return op("where", cond, taken, convert(base.load(index), dt))

    return ctx.pointwise(out.shape, out.dtype, body)


# ---------------------------------------------------------------------------------------------
# Indirect reads: the index comes from memory


class _Reads:
    """The indirect indices of one output element: each index's `Ix`, and the conditions
    (`BoundsCheck`s) under which the element's read is made."""

    def __init__(self, ctx: Lowering, node: torch.fx.Node) -> None:
        self.graph = ctx.graph
        self.op = str(node.target).removesuffix(".default")
        self.checks: list[Expr] = []

    def index(
        self, index: TensorValue, at: Sequence[Ix], size: int, dim: int, wrap: bool = False
    ) -> Ix:
        value = convert(index.load(tuple(at)), torch.int64)
        if wrap:
            negative = op("lt", value, const(0, torch.int64), dtype=torch.bool)
            value = op("where", negative, op("add", value, const(size, torch.int64)), value)
        if not _in_range(value_range(value, self.graph), size):
            self.checks.append(BoundsCheck(value, size, self.op, dim, wrap))
        # a size-1 dim reads index 0 only: no loop variable, but the value is still checked
        return Ix.of(Indirect(value, size)) if more_than_one(size) else Ix()

    def load(self, x: TensorValue, source: Sequence[Ix]) -> Expr:
        """`x[source]`, read only where every index is in range (else 0)."""
        return masked(all_of(self.checks), x.load(source), 0)


def _in_range(bounds: tuple[int, int] | None, size: int) -> bool:
    if bounds is None:
        return False
    try:
        return provably_le(0, bounds[0]) and provably_lt(bounds[1], size)
    except Unknown:
        return False


def value_range(expr: Expr, graph: LoopGraph, depth: int = 0) -> tuple[int, int] | None:
    """Inclusive bounds of an integer expression's values where they are evident from its
    form (None: unknown). Reads of other buffers follow their bodies (a few levels deep);
    graph inputs are unknown.

    The bounds are exact-integer arithmetic on the arguments' bounds, so they hold only while
    they fit the expression's dtype: a range that does not fit (`int8(126) + 2` wraps to
    -128, a convert truncates) is unknown, never a range the wrapped values violate."""
    if expr.dtype.is_floating_point or expr.dtype.is_complex or depth > 8:
        return None
    bounds = _expr_range(expr, graph, depth)
    return bounds if bounds is not None and _fits(bounds, expr.dtype) else None


def _fits(bounds: tuple[int, int], dtype: torch.dtype) -> bool:
    if dtype == torch.bool:
        return bounds[0] >= 0 and bounds[1] <= 1
    try:
        info = torch.iinfo(dtype)
    except TypeError:  # not an integer dtype
        return False
    return info.min <= bounds[0] and bounds[1] <= info.max


def _expr_range(expr: Expr, graph: LoopGraph, depth: int) -> tuple[int, int] | None:
    if isinstance(expr, Const):
        if not isinstance(expr.value, (bool, int)):  # a symbolic size
            return None
        return (int(expr.value), int(expr.value))
    if isinstance(expr, BoundsCheck):
        return (0, 1)
    if isinstance(expr, IndexValue):
        if expr.index.indirects():
            return None
        try:
            lo, hi = expr.index.bounds()
        except Unknown:
            return None
        return (lo, hi) if is_static(lo, hi) else None
    if isinstance(expr, Load):
        return _buffer_range(expr.buffer, graph, depth + 1)
    if isinstance(expr, Op):
        args = [value_range(a, graph, depth) for a in expr.args]
        return _op_range(expr, args)
    return None


def _buffer_range(name: str, graph: LoopGraph, depth: int) -> tuple[int, int] | None:
    try:
        node = graph.node(name)
    except KeyError:
        return None
    if isinstance(node, InputBuffer):
        return None
    if isinstance(node, Pointwise):
        return value_range(node.body, graph, depth)
    if isinstance(node, Reduction):
        if node.reduce_type in ("argmax", "argmin") and is_static(*node.ranges):
            return (0, max(math.prod(node.ranges) - 1, 0))
        if node.reduce_type in ("max", "min"):
            return value_range(node.body, graph, depth)
    return None


def _op_range(expr: Op, args: list[tuple[int, int] | None]) -> tuple[int, int] | None:
    name = expr.name
    if name in _COMPARISONS and args[0] is not None and args[1] is not None:
        (alo, ahi), (blo, bhi) = args
        always, never = _COMPARISONS[name](alo, ahi, blo, bhi)
        return (1, 1) if always else (0, 0) if never else (0, 1)
    if expr.dtype == torch.bool and name != "where":
        return (0, 1)
    if name == "where":
        cond, a, b = args
        if cond == (1, 1):
            return a
        if cond == (0, 0):
            return b
        return _union(a, b)
    if name == "masked":
        return _union(args[1], args[2])
    if any(a is None for a in args):
        return None
    if name == "convert":  # an int-to-int convert keeps the values that fit (checked above)
        return None if expr.args[0].dtype.is_floating_point else args[0]
    if name in ("add", "sub", "maximum", "minimum", "neg"):
        (alo, ahi), (blo, bhi) = args[0], args[-1]
        return {
            "add": (alo + blo, ahi + bhi),
            "sub": (alo - bhi, ahi - blo),
            "maximum": (max(alo, blo), max(ahi, bhi)),
            "minimum": (min(alo, blo), min(ahi, bhi)),
            "neg": (-ahi, -alo),
        }[name]
    if name == "mul":
        products = [a * b for a in args[0] for b in args[1]]
        return (min(products), max(products))
    return None


# (always true, never true) of a comparison of values in [alo, ahi] and [blo, bhi]
_COMPARISONS = {
    "lt": lambda alo, ahi, blo, bhi: (ahi < blo, alo >= bhi),
    "le": lambda alo, ahi, blo, bhi: (ahi <= blo, alo > bhi),
    "gt": lambda alo, ahi, blo, bhi: (alo > bhi, ahi <= blo),
    "ge": lambda alo, ahi, blo, bhi: (alo >= bhi, ahi < blo),
}


def _union(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    if a is None or b is None:
        return None
    return (min(a[0], b[0]), max(a[1], b[1]))


@lowering("gather", dtype="same")
def _gather(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue, **kw):
    out = meta(node)
    rank = len(x.shape)
    dim = dim % rank if rank else 0

    def body(idx: tuple[Ix, ...]) -> Expr:
        reads = _Reads(ctx, node)
        if not rank:  # a 0-d source takes index 0 only
            reads.index(index, idx, 1, 0)
            return reads.load(x, ())
        source = list(idx)
        source[dim] = reads.index(index, idx, x.shape[dim], dim)
        return reads.load(x, source)

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("index_select", dtype="same")
def _index_select(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue):
    out = meta(node)
    if not x.shape:
        raise NotLowered("index_select of a 0-d tensor")
    dim = dim % len(x.shape)

    def body(idx: tuple[Ix, ...]) -> Expr:
        reads = _Reads(ctx, node)
        source = list(idx)
        at = idx[dim : dim + 1][: len(index.shape)]
        source[dim] = reads.index(index, at, x.shape[dim], dim)
        return reads.load(x, source)

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("embedding", dtype="same")
def _embedding(
    ctx: Lowering, node: torch.fx.Node, weight: TensorValue, indices: TensorValue, *rest
):
    out = meta(node)

    def body(idx: tuple[Ix, ...]) -> Expr:
        reads = _Reads(ctx, node)
        row = reads.index(indices, idx[:-1], weight.shape[0], 0)
        return reads.load(weight, (row, idx[-1]))

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("index", dtype="same")
def _index(ctx: Lowering, node: torch.fx.Node, x: TensorValue, indices: Sequence[Any]):
    """`x[i, :, j]` with index tensors: they broadcast together to `B`; the result has `B` in
    place of the indexed dims when those are adjacent, else `B` first (numpy's rule)."""
    out = meta(node)
    positions = [k for k, t in enumerate(indices) if t is not None]
    tensors = [indices[k] for k in positions]
    if not tensors or any(t.dtype in (torch.bool, torch.uint8) for t in tensors):
        raise NotLowered("boolean mask indices (the result's shape depends on the data)")
    bshape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    rank, nb = len(x.shape), len(bshape)
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    first = positions[0] if adjacent else 0
    rest = [d for d in range(rank) if d not in positions]

    def body(idx: tuple[Ix, ...]) -> Expr:
        bidx = idx[first : first + nb]
        others = iter(idx[:first] + idx[first + nb :])
        source: list[Ix] = [Ix()] * rank
        for d in rest:
            source[d] = next(others)
        reads = _Reads(ctx, node)
        for d, t in zip(positions, tensors):
            at = broadcast_index(t, bidx, bshape)
            source[d] = reads.index(t, at, x.shape[d], d, wrap=True)
        return reads.load(x, source)

    expected = tuple(x.shape[d] for d in rest)
    expected = expected[:first] + bshape + expected[first:]
    if expected != tuple(out.shape):
        raise NotLowered(f"unexpected result shape {list(out.shape)}")
    return ctx.pointwise(out.shape, out.dtype, body)

"""Indexing lowerings: ops whose output element reads one input element chosen by index
arithmetic, piecewise (cat, constant_pad_nd, slice_scatter), reordered (flip, repeat) or read
from memory (gather, index, index_select, embedding: `Indirect` indices).

Invariants:

- Every piece of a piecewise op is read under `masked(cond, ...)`, so no lane ever loads
  outside the piece it belongs to; the pieces are joined with `where`.
- Indices read from memory are wrapped (`idx + n` for a negative `idx`) where torch allows
  negative indices (`x[idx]`). Out-of-range indices are not checked: eager raises, a kernel
  reads whatever is there (as torch's own CUDA kernels do without device asserts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from framejit.backend.triton.ir import Expr, IndexValue, Indirect, Ix, compute_dtype
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


@lowering("flip", dtype="same")
def _flip(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dims: Sequence[int]):
    rank = len(x.shape)
    flipped = {d % rank for d in dims} if rank else set()

    def body(index: tuple[Ix, ...]) -> Expr:
        source = [
            Ix.of(x.shape[d] - 1) + i * -1 if d in flipped and x.shape[d] > 1 else i
            for d, i in enumerate(index)
        ]
        return x.load(source)

    return ctx.pointwise(x.shape, x.dtype, body)


@lowering("repeat", dtype="same")
def _repeat(ctx: Lowering, node: torch.fx.Node, x: TensorValue, repeats: Sequence[int]):
    out = meta(node)
    lead = len(repeats) - len(x.shape)

    def body(index: tuple[Ix, ...]) -> Expr:
        return x.load([index[lead + k].mod(n) if n > 1 else Ix() for k, n in enumerate(x.shape)])

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
    start = 0 if start is None else (start + n if start < 0 else start)
    end = n if end is None else (end + n if end < 0 else end)
    start, end = min(max(start, 0), n), min(max(end, 0), n)
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


def _indirect(index: TensorValue, at: Sequence[Ix], size: int, wrap: bool = False) -> Ix:
    value = convert(index.load(tuple(at)), torch.int64)
    if wrap:
        negative = op("lt", value, const(0, torch.int64), dtype=torch.bool)
        value = op("where", negative, op("add", value, const(size, torch.int64)), value)
    return Ix.of(Indirect(value, size)) if size > 1 else Ix()


@lowering("gather", dtype="same")
def _gather(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue, **kw):
    out = meta(node)
    rank = len(x.shape)
    dim = dim % rank if rank else 0

    def body(idx: tuple[Ix, ...]) -> Expr:
        if not rank:
            return x.load(())
        source = list(idx)
        source[dim] = _indirect(index, idx, x.shape[dim])
        return x.load(source)

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("index_select", dtype="same")
def _index_select(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int, index: TensorValue):
    out = meta(node)
    if not x.shape:
        raise NotLowered("index_select of a 0-d tensor")
    dim = dim % len(x.shape)

    def body(idx: tuple[Ix, ...]) -> Expr:
        source = list(idx)
        source[dim] = _indirect(index, idx[dim : dim + 1][: len(index.shape)], x.shape[dim])
        return x.load(source)

    return ctx.pointwise(out.shape, out.dtype, body)


@lowering("embedding", dtype="same")
def _embedding(
    ctx: Lowering, node: torch.fx.Node, weight: TensorValue, indices: TensorValue, *rest
):
    out = meta(node)

    def body(idx: tuple[Ix, ...]) -> Expr:
        return weight.load((_indirect(indices, idx[:-1], weight.shape[0]), idx[-1]))

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
        for d, t in zip(positions, tensors):
            source[d] = _indirect(t, broadcast_index(t, bidx, bshape), x.shape[d], wrap=True)
        return x.load(source)

    expected = tuple(x.shape[d] for d in rest)
    expected = expected[:first] + bshape + expected[first:]
    if expected != tuple(out.shape):
        raise NotLowered(f"unexpected result shape {list(out.shape)}")
    return ctx.pointwise(out.shape, out.dtype, body)

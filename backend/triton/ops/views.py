"""Views as index arithmetic: no copy, no node; the consumer's loader maps its index to the
viewed buffer's. Each view also records itself (`TensorValue.view`) so the wrapper can replay
it on the real tensor when an extern or a graph output needs one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.fx
from framejit.backend.triton.ir import Expr, Ix, contiguous_strides, is_static, linear, unflatten
from framejit.backend.triton.lower import Lowering, NotLowered, TensorValue
from framejit.backend.triton.ops.table import aten, broadcast_index, lowering, meta, slice_bound


@lowering("view", "_unsafe_view", "reshape", dtype="same")
def _view(ctx: Lowering, node: torch.fx.Node, x: TensorValue, shape: Sequence[int]):
    if isinstance(shape, torch.dtype):  # `x.view(torch.int32)`: a reinterpretation of the bits
        raise NotLowered("a view as another dtype")
    out = tuple(meta(node).shape)
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

    return x.view(meta(node).shape, loader, node.target, (list(dims),))


@lowering("expand", dtype="same")
def _expand(ctx: Lowering, node: torch.fx.Node, x: TensorValue, shape: Sequence[int], **kw):
    out = tuple(meta(node).shape)
    return x.view(
        out, lambda index: x.load(broadcast_index(x, index, out)), node.target, (list(shape),)
    )


@lowering("unsqueeze", dtype="same")
def _unsqueeze(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int):
    dim = dim % (len(x.shape) + 1)
    return x.view(
        meta(node).shape,
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
    return x.view(meta(node).shape, loader, node.target, args)


@lowering("slice", dtype="same")
def _slice(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim=0, start=None, end=None, step=1):
    dim = dim % len(x.shape)
    start = slice_bound(ctx, 0 if start is None else start, x.shape[dim])

    def loader(index: tuple[Ix, ...]) -> Expr:
        source = list(index)
        source[dim] = index[dim] * step + start
        return x.load(source)

    # the output's length is the node's (torch's own arithmetic, under the frame's guards)
    return x.view(meta(node).shape, loader, node.target, (dim, start, end, step))


@lowering("select", dtype="same")
def _select(ctx: Lowering, node: torch.fx.Node, x: TensorValue, dim: int, index: int):
    dim = dim % len(x.shape)
    n = x.shape[dim]
    if is_static(index, n):
        index = index % n
    elif ctx.graph.sizes.less(index, 0) is not False:  # eager raises for one out of range
        index = slice_bound(ctx, index, n)

    def loader(idx: tuple[Ix, ...]) -> Expr:
        return x.load(idx[:dim] + (Ix((), index),) + idx[dim:])

    return x.view(meta(node).shape, loader, node.target, (dim, index))


@lowering("diagonal", dtype="same")
def _diagonal(ctx: Lowering, node: torch.fx.Node, x: TensorValue, offset=0, dim1=0, dim2=1):
    rank = len(x.shape)
    dim1, dim2 = dim1 % rank, dim2 % rank
    rest = [d for d in range(rank) if d not in (dim1, dim2)]

    def loader(index: tuple[Ix, ...]) -> Expr:
        source = [Ix()] * rank
        for d, i in zip(rest, index):
            source[d] = i
        source[dim1] = index[-1] + max(-offset, 0)
        source[dim2] = index[-1] + max(offset, 0)
        return x.load(source)

    return x.view(meta(node).shape, loader, node.target, tuple(node.args[1:]))


@lowering("split_with_sizes", dtype="same")
def _split_with_sizes(
    ctx: Lowering, node: torch.fx.Node, x: TensorValue, sizes: Sequence[int], dim: int = 0
):
    dim = dim % len(x.shape)
    pieces = []
    start = 0
    for piece in meta(node):

        def loader(index: tuple[Ix, ...], start: int = start) -> Expr:
            source = list(index)
            source[dim] = index[dim] + start
            return x.load(source)

        end = start + piece.shape[dim]
        pieces.append(x.view(piece.shape, loader, aten.slice.Tensor, (dim, start, end)))
        start = end
    return tuple(pieces)

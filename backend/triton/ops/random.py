"""Dropout with Triton's Philox generator.

Each random node gets its own seed (`ctx.new_seed()`: a kernel argument the wrapper draws
from torch's CPU generator on every call, at the node's place in the program: after the random
externs before it, which so get eager's numbers; see codegen's `SeedDraws`), and element `k`
of the node (its row-major position) uses Philox counter `k`. So a random value is a pure
function of (seed, position): recomputing it in several fused consumers (dropout's output and
its mask) gives the same number, and `torch.manual_seed` makes a run repeatable. The stream
is not eager's: the same seed gives other numbers than eager's dropout would, with the same
distribution.

`rand`, `randn` and `bernoulli` stay externs: a program that seeds torch and draws numbers
gets exactly eager's numbers (the AOT stage keeps random ops whole for the same reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from framejit.backend.triton.ir import (
    Expr,
    IndexValue,
    Ix,
    compute_dtype,
    contiguous_strides,
    linear,
)
from framejit.backend.triton.lower import Lowering, TensorValue
from framejit.backend.triton.ops.table import const, convert, lowering, meta, op


def _uniform(ctx: Lowering, shape: Sequence[int], kind: str = "rand") -> Any:
    """`index -> Expr` of a fresh Philox stream over `shape` (uniform [0, 1) or normal)."""
    seed = ctx.new_seed()
    wide = torch.int64 if max(1, *shape) and _numel(shape) >= 2**31 else torch.int32
    strides = contiguous_strides(tuple(shape))

    def sample(index: tuple[Ix, ...]) -> Expr:
        offset = IndexValue(linear(index, strides), wide)
        return op(kind, seed, offset, dtype=torch.float32)

    return sample


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@lowering("native_dropout", dtype="given")
def _dropout(ctx: Lowering, node: torch.fx.Node, x: TensorValue, p: float, train: Any):
    """(x * keep / (1 - p), keep), each element kept with probability 1 - p."""
    out, mask_meta = meta(node)
    dt = compute_dtype(out.dtype)
    if train is False or p == 0:
        copy = ctx.pointwise(out.shape, out.dtype, lambda index: convert(x.load(index), dt))
        ones = ctx.pointwise(mask_meta.shape, torch.bool, lambda index: const(True, torch.bool))
        return copy, ones
    sample = _uniform(ctx, out.shape)
    scale = 1.0 / (1.0 - p) if p < 1 else 0.0

    def keep(index: tuple[Ix, ...]) -> Expr:
        return op("ge", sample(index), const(p, torch.float32), dtype=torch.bool)

    def body(index: tuple[Ix, ...]) -> Expr:
        # x * (scale or 0), as eager multiplies by its mask: a dropped -x is -0.0, inf NaN
        factor = op("where", keep(index), const(scale, dt), const(0.0, dt))
        return op("mul", convert(x.load(index), dt), factor)

    result = ctx.pointwise(out.shape, out.dtype, body)
    mask = ctx.pointwise(mask_meta.shape, torch.bool, keep)
    return result, mask

"""The op table, one module per family of lowerings (see `table.py` for the contract):

    table.py       OpRule, LOWERINGS, EXTERN_OPS, and the expression helpers
    pointwise.py   math, comparisons, logical/bitwise, where/clamp, activations, casts, creation
    division.py    div (true, trunc, floor), fmod, remainder: floats exact, integers floored
    powers.py      pow of tensors and numbers, in every dtype as eager rounds it
    rounding.py    eager's rounding of numbers and float16/bfloat16 steps (shared helpers)
    transcendental.py  exp2/log2/log10, tan, hyperbolic and inverse trig, atan2, hypot, fmax, ...
    views.py       view/permute/expand/slice/select/(un)squeeze/diagonal/split: index arithmetic
    indexing.py    cat, pad, flip, repeat, slice_scatter; gather, index, index_select, embedding
    reductions.py  sum/mean/amax/argmax/prod/any/var/norm; softmax, log_softmax, layer_norm
    random.py      dropout, rand, randn, bernoulli with Triton's Philox generator

Importing this package registers every lowering.
"""

from framejit.backend.triton.ops import (  # noqa: F401
    division,
    indexing,
    pointwise,
    powers,
    random,
    reductions,
    transcendental,
    views,
)
from framejit.backend.triton.ops.table import EXTERN_OPS, LOWERINGS, OpRule

__all__ = ["EXTERN_OPS", "LOWERINGS", "OpRule"]

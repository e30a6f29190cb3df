"""The core aten op set the AOT stage decomposes to, and the decomposition table that gets there.

Everything after the AOT stage (the `aot_eager` runner today, lowering to loop IR next) sees
only the ops listed in `CORE_OPS`, plus `operator.getitem` on ops that return several tensors.
The set is torch's Core ATen IR as reached by `torch._decomp.core_aten_decompositions()`,
restricted to what framejit's captured graphs actually produce (about 110 ops). The corpus run
through the AOT stage (`tests/backend/test_corpus_aot.py`) and the training models
(`tests/backend/test_core_ops.py`) fail on any op outside the list, so growing the set is a
deliberate edit here (and, once lowering exists, a lowering to write). `outside_core(gm)` lists
the ops of a graph that are not in the set.

Invariants:

- `decomposition_table()` is built once and cached; it never decomposes random ops
  (`native_dropout`, `rand`, `bernoulli`): the stage keeps them whole so they consume the
  random generator the way eager does, and the partitioner never recomputes them. Nor does it
  decompose an op whose decomposition disagrees with the op's own autograd formula
  (`_KEPT_WHOLE`): the joint graph is traced with the decompositions applied below autograd.
- Names are `aten.<overload packet>`; overloads of a packet are all in the set.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any

import torch
import torch.fx
from torch._decomp import core_aten_decompositions

aten = torch.ops.aten

# fmt: off
_CORE_OP_NAMES = (
    "abs", "add", "addmm", "addmv", "alias", "amax", "any", "arange", "argmax", "argmin",
    "avg_pool2d", "avg_pool2d_backward", "bernoulli", "bitwise_and", "bitwise_not",
    "bitwise_or", "bitwise_xor", "bmm", "cat", "ceil", "clamp", "clone", "constant_pad_nd",
    "convolution", "convolution_backward", "copy", "cos", "cumprod", "cumsum", "diagonal",
    "div", "elu", "embedding", "embedding_dense_backward", "empty", "empty_strided", "eq",
    "erf", "exp", "expand", "flip", "floor", "fmod", "full", "full_like", "gather", "ge",
    "gelu", "gelu_backward", "gt", "hardtanh", "index", "index_put", "index_select", "isnan",
    "le", "leaky_relu", "lift_fresh_copy", "linalg_vector_norm", "log", "log1p", "logical_and",
    "logical_not", "lt", "max", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
    "maximum", "mean", "min", "minimum", "mm", "mul", "native_dropout", "native_layer_norm",
    "native_layer_norm_backward", "ne", "neg", "permute", "pow", "prod", "rand", "randn",
    "reciprocal", "relu", "remainder", "repeat", "round", "rsqrt", "scalar_tensor", "scatter",
    "scatter_add", "select", "sigmoid", "sign", "sin", "slice", "slice_scatter", "sort",
    "split_with_sizes", "sqrt", "squeeze", "sub", "sum", "tanh", "topk", "trunc", "unsqueeze",
    "var", "view", "where", "__lshift__", "__rshift__", "_assert_async", "_cdist_forward",
    "_log_softmax", "_softmax", "_to_copy", "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit_no_training", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    # math that core_aten_decompositions leaves whole (the Triton backend lowers them)
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "copysign", "cosh", "erfc",
    "erfinv", "exp2", "expm1", "fmax", "fmin", "hypot", "isinf", "log10", "log2", "sinh", "tan",
    "median", "native_group_norm", "var_mean",
    "binary_cross_entropy", "binary_cross_entropy_backward", "linspace", "logspace", "logit",
    "heaviside", "huber_loss", "huber_loss_backward", "soft_margin_loss",
    "soft_margin_loss_backward",
    # attention kernels of CUDA (torch's, run as externs; no decomposition exists for them)
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
)
# fmt: on

CORE_OPS: frozenset[str] = frozenset(f"aten.{name}" for name in _CORE_OP_NAMES)

# Ops whose result depends on the random generator: kept whole, never recomputed.
RANDOM_OPS: frozenset[str] = frozenset(
    f"aten.{name}"
    for name in [
        "native_dropout",
        "rand",
        "rand_like",
        "randn",
        "randn_like",
        "randint",
        "randint_like",
        "bernoulli",
        "normal",
        "uniform",
        "exponential",
        "multinomial",
        "randperm",
    ]
)


def op_name(target: Any) -> str:
    """`aten.add` for `aten.add.Tensor`; `operator.getitem` for getitem; else the repr."""
    if target is operator.getitem:
        return "operator.getitem"
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return f"{packet._qualified_op_name.replace('::', '.')}"
    return repr(target)


@functools.cache
def decomposition_table() -> dict[Any, Any]:
    table = dict(core_aten_decompositions())
    for op in list(table):
        if op_name(op) in RANDOM_OPS or op_name(op) in _KEPT_WHOLE:
            del table[op]
    table[getattr(torch.ops.aten.random, "from")] = _random_from_to
    table[aten.special_log_ndtr.default] = _log_ndtr
    for op in (aten.addcmul.default, aten.addcmul_.default):
        if op in table:
            table[op] = functools.partial(_addcmul_of_integers, table[op])
    return table


@functools.cache
def eager_kernel_table() -> dict[Any, Any]:
    """What the stage decomposes for a runner that keeps torch's ops (`trace.EAGER_KERNELS`):
    `random.from`, which fx cannot print, and batch norm's backward ops, which take the
    running statistics as arguments even in train mode, where they do not read them: whole,
    they would seem to read what the graph writes, and a double backward through the graph
    (a gradient penalty) would be refused."""
    table = {
        op: fn
        for op, fn in decomposition_table().items()
        if "batch_norm" in op_name(op) and "backward" in op_name(op)
    }
    table[getattr(torch.ops.aten.random, "from")] = _random_from_to
    return table


def _log_ndtr(x: torch.Tensor) -> torch.Tensor:
    """`special.log_ndtr` with eager's formulas: log(erfcx(-t) / 2) - t^2 below x = -1, else
    log1p(-erfc(t) / 2), t = x / sqrt(2), in float32 for half types. torch's reference takes
    the erfcx form up to x = 1, 10 float32 ulps from eager's value at 0.27."""
    if not x.dtype.is_floating_point:
        x = x.to(torch.get_default_dtype())
    half = x.dtype in (torch.float16, torch.bfloat16)
    v = x.float() if half else x
    t = v * 0.707106781186547524400844362104849039
    below = torch.log(torch.special.erfcx(-t) / 2) - t * t
    result = torch.where(v < -1.0, below, torch.log1p(-torch.erfc(t) / 2))
    return result.to(x.dtype) if half else result


def _addcmul_of_integers(
    decomposition: Any, x: torch.Tensor, a: Any, b: Any, *, value: Any = 1
) -> Any:
    """`addcmul` with a float `value` on integer tensors: eager converts the value to the
    tensors' dtype (toward zero; `value=0.5` adds nothing), torch's reference refuses a float.
    Only where the result is integral: an integer `x` with a floating `a` or `b` computes in
    floating point, the value as it is. A value out of the dtype's range is left to the op
    itself, which raises eager's error."""
    tensors = [t for t in (x, a, b) if isinstance(t, torch.Tensor)]
    integral = x.dtype != torch.bool and not any(
        t.dtype.is_floating_point or t.dtype.is_complex for t in tensors
    )
    if integral and isinstance(value, float):
        info = torch.iinfo(x.dtype)
        if not (math.isfinite(value) and info.min <= value <= info.max):
            return NotImplemented
        value = math.trunc(value)
    return decomposition(x, a, b, value=value)


_FLOAT_DIGITS = {torch.float16: 11, torch.bfloat16: 8, torch.float32: 24, torch.float64: 53}


def _random_from_to(x: torch.Tensor, low: int, high: int | None = None, **kw: Any) -> Any:
    """`x.random_(low, high)` (aten's overload is named `from`, a Python keyword: fx cannot
    print a graph that calls it) as `random(x, high - low) + low`: the CPU and CUDA kernels
    draw `value % range + low` from the same generator either way, so the numbers are the same
    while the range fits what `random_(high - low)` accepts for the dtype."""
    if high is None or kw:
        return NotImplemented
    span = high - low
    if x.dtype.is_floating_point:  # integers a float holds exactly: 2 ** its digits
        digits = _FLOAT_DIGITS.get(x.dtype)
        fits = digits is not None and span - 1 <= 2**digits
    elif x.dtype == torch.bool:
        fits = False
    else:
        fits = span - 1 <= torch.iinfo(x.dtype).max
    if not fits or span <= 0:
        return NotImplemented
    return torch.ops.aten.random.to(x, span) + low


# Ops the core table decomposes that the stage keeps whole. The CPU flash attention's
# decomposition (meant for inference export) returns the attention matrix where the op returns
# its logsumexp; autograd's formula for the op reads that output, so a training graph traced
# through the decomposition got wrong gradients for q, k and v.
# binary_cross_entropy's decomposition drops the op's check that the input lies in [0, 1]
# (eager raises; the decomposition returned NaN).
_KEPT_WHOLE = frozenset(
    {
        "aten._scaled_dot_product_flash_attention_for_cpu",
        "aten.binary_cross_entropy",
        "aten.binary_cross_entropy_backward",
        # eager casts start and end to an integer (or bfloat16) dtype before stepping; torch's
        # reference does not (linspace(4.3, -3, 50, dtype=int64) differed)
        "aten.linspace",
        "aten.logspace",
        # eager clamps to [eps, 1 - eps] in the tensor's dtype (1 - 1e-6 is 1.0 in float16:
        # logit(1.0) is inf); the decomposition clamps in float32
        "aten.logit",
        # eager refuses operands of two dtypes; the decomposition computes a result
        "aten.heaviside",
        # eager's result takes the input's dtype (a bfloat16 input with a float32 target
        # gives bfloat16); the decompositions promote to float32
        "aten.huber_loss",
        "aten.huber_loss_backward",  # (eager's refuses a float32 target for bfloat16)
        "aten.soft_margin_loss",
        "aten.soft_margin_loss_backward",
    }
)


def outside_core(gm: torch.fx.GraphModule) -> list[str]:
    """Names of the ops in `gm` that are not in the core set (empty when the graph is clean).
    Size arithmetic (nodes whose value is a SymInt/SymFloat/SymBool: `aten.sym_size`,
    `operator.mul`, `torch.sym_float`, ...) is not a tensor op and always allowed, and so are
    the random ops, which the stage keeps whole by design (`RANDOM_OPS`: `multinomial`)."""
    found = (
        {
            op_name(n.target)
            for n in gm.graph.nodes
            if n.op == "call_function" and not _is_size_value(n.meta.get("val"))
        }
        - CORE_OPS
        - RANDOM_OPS
        - {"operator.getitem"}
    )
    return sorted(found)


def _is_size_value(value: object) -> bool:
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))

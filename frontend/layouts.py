"""Eager's memory layout for the ops whose fake kernels give another.

The frontend runs every op on FakeTensors, and the layout (strides) of a fake result decides
what the traced program does next: whether `.view` succeeds, which branch `x.is_contiguous()`
takes, and which strides the compiled graph's outputs get. For most ops the fake layout is
eager's. For a few it is not, given an input that is not contiguous: torch's meta and fake
kernels lay out a channels_last input's `F.pad` contiguously where the CPU kernel keeps
channels_last, `torch.roll` the other way round, and `F.logsigmoid` on the CPU makes a
contiguous result where the fake one keeps channels_last (CUDA's keeps it too). Each such
disagreement was found by `tools/layout_probe.py` (which runs torch's op database on
channels_last and transposed inputs and compares eager's strides with the fake ones) or, for
roll and logsigmoid, whose database samples do not show it, by hand.

For an op of that list given a non-contiguous input, `eager_layout` runs the op once for real
on zeros laid out as the fake inputs (on their device, without autograd) and gives the fake
result eager's strides. What must hold:

- Only ops named here are run, and only in that case: they have no side effects and draw no
  random numbers; their result is a new tensor, never an input or a view of one.
- A run that fails, or sizes that are symbolic, leave the fake result as it is; a run that
  fails for the layout itself (a view or stride error, whatever the values) raises
  `LayoutError`, which the frontend makes a graph break, so eager raises its error.
- The corrected fake keeps the result's autograd history (a copy into a tensor of eager's
  strides), so a training graph sees it as the op's output.

An `out=` tensor that the op resizes (it had no elements, or other sizes) takes the layout of
the op's result in eager (`torch.add(x_channels_last, 1, out=torch.empty(0))` is
channels_last: the kernel restrides what it resizes), where the fake kernels and torch's
references resize it contiguously (a memory format at most). `lay_out_resized` gives the fake
`out` the strides of the op's fake result without `out=`, corrected as above: what a
functional call gives in eager, and what eager's out= kernels give a tensor they resize. It
costs one more fake run, only where an `out=` tensor was resized; an `out=` tensor of the
right size keeps its own strides, as in eager.
"""

from __future__ import annotations

import operator
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.utils._pytree import tree_flatten, tree_map

# functions and Tensor methods whose fake layout differs from eager's for some non-contiguous
# input on torch 2.11 to 2.13 (the CPU probe; the real run covers each device's own kernel)
_FUNCTIONS: frozenset[Any] = frozenset(
    {
        F.pad,
        torch._C._nn.pad,
        torch.constant_pad_nd,
        torch._C._nn.log_sigmoid,
        torch.roll,
        torch.channel_shuffle,
        torch.native_channel_shuffle,
        F.channel_shuffle,
        F.interpolate,  # CUDA keeps a channels_last input's layout; the fakes do not
        F.upsample_bilinear,
        F.max_unpool1d,
        F.max_unpool2d,
        F.max_unpool3d,
        F.batch_norm,
        torch.batch_norm,
        torch.native_batch_norm,
        torch.copysign,
        torch.div,
        torch.divide,
        torch.floor_divide,
        torch.xlogy,
        torch.special.xlogy,
        torch.special.xlog1py,
        operator.floordiv,
        # given operands of different layouts (a channels_last one and a contiguous one)
        torch.heaviside,
        torch.logaddexp,
        torch.logaddexp2,
        torch.logical_and,
        torch.logical_or,
        torch.logical_xor,
        F.huber_loss,
        F.binary_cross_entropy,
        F.nll_loss,
    }
)
_METHODS = frozenset(
    {
        "roll",
        "copysign",
        "div",
        "divide",
        "floor_divide",
        "xlogy",
        "__floordiv__",
        "__rfloordiv__",
        "heaviside",
        "logaddexp",
        "logaddexp2",
        "logical_and",
        "logical_or",
        "logical_xor",
    }
)


class LayoutError(Exception):
    """Eager's kernel fails on inputs of this layout, whatever their values (CUDA's
    `channel_shuffle` views a transposed input): the op must run eagerly, to raise it."""


def needs_eager_layout(kind: str, target: Any) -> bool:
    if kind == "call_method":
        return target in _METHODS
    try:
        return target in _FUNCTIONS
    except TypeError:  # an unhashable callable
        return False


def eager_layout(
    kind: str, target: Any, args: list[Any], kwargs: dict[str, Any], result: Any
) -> Any:
    """`result` (the op's fake result) with eager's strides, where they differ; called under
    the frontend's FakeTensorMode, with the fake arguments the op was given, for an op that
    `needs_eager_layout`."""
    leaves = tree_flatten((args, kwargs))[0]
    tensors = [a for a in leaves if isinstance(a, torch.Tensor)]
    if not tensors or all(_contiguous(t) for t in tensors):
        return result
    if any(_symbolic(t) for t in [*tensors, *tree_flatten(result)[0]]):
        return result
    real = _real_run(kind, target, args, kwargs)
    if real is None:
        return result
    fakes, spec = tree_flatten(result)
    reals, real_spec = tree_flatten(real)
    if real_spec != spec:
        return result
    fixed = [_restrided(f, r) for f, r in zip(fakes, reals)]
    if all(a is b for a, b in zip(fixed, fakes)):
        return result
    return spec.unflatten(fixed)


def out_sizes(kwargs: dict[str, Any]) -> list[tuple[torch.Tensor, torch.Size]]:
    """The `out=` tensors of a call (one, or a tuple of them), each with its sizes before the
    op runs: `lay_out_resized` tells from them which the op resized."""
    out = kwargs.get("out")
    tensors = out if isinstance(out, (tuple, list)) else [out]
    return [(t, t.shape) for t in tensors if isinstance(t, torch.Tensor)]


def lay_out_resized(
    target: Any,
    args: list[Any],
    kwargs: dict[str, Any],
    before: list[tuple[torch.Tensor, torch.Size]],
) -> None:
    """Give each fake `out=` tensor that function `target` resized eager's strides, in place
    (see the module docstring): called under the frontend's FakeTensorMode after the op's fake
    run, with `before` from `out_sizes`."""
    resized = [k for k, (t, sizes) in enumerate(before) if t.shape != sizes]
    if not resized:
        return
    functional = {k: v for k, v in kwargs.items() if k != "out"}
    try:
        result = target(*args, **functional)
    except Exception:  # noqa: BLE001 - no functional form: the fake layout stays
        return
    if needs_eager_layout("call_function", target):
        result = eager_layout("call_function", target, args, functional, result)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    if len(results) != len(before):
        return
    for k in resized:
        out, value = before[k][0], results[k]
        if not isinstance(value, torch.Tensor) or value.shape != out.shape:
            continue
        if long_strides(value) == long_strides(out):
            continue
        if is_non_overlapping_and_dense_or_false(value):
            out.as_strided_(out.shape, value.stride())


def _contiguous(t: torch.Tensor) -> bool:
    return t.dim() < 2 or t.is_contiguous()


def _symbolic(value: Any) -> bool:
    if not isinstance(value, torch.Tensor):
        return False
    return any(not isinstance(s, int) for s in (*value.shape, *value.stride()))


def _real_run(kind: str, target: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The op run on zeros laid out as its fake inputs, outside the fake mode; None when that
    fails, `LayoutError` raised when it fails for the layout itself."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def zeros(value: Any) -> Any:
        return _zeros_as(value) if isinstance(value, torch.Tensor) else value

    try:
        with unset_fake_temporarily(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real_args = tree_map(zeros, list(args))
            real_kwargs = tree_map(zeros, dict(kwargs))
            if kind == "call_method":
                return getattr(real_args[0], target)(*real_args[1:], **real_kwargs)
            return target(*real_args, **real_kwargs)
    except Exception as exc:  # noqa: BLE001 - the fake layout stays; the op runs as traced
        if isinstance(exc, RuntimeError) and any(w in str(exc) for w in ("stride", "view")):
            raise LayoutError(f"{type(exc).__name__}: {str(exc)[:200]}") from None
        return None


def _zeros_as(value: torch.Tensor) -> torch.Tensor:
    """Zeros with `value`'s sizes, strides, dtype and device (a fresh storage, offset 0)."""
    out = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device)
    return out.zero_()


def _restrided(fake: Any, real: Any) -> Any:
    if not (isinstance(fake, torch.Tensor) and isinstance(real, torch.Tensor)):
        return fake
    if fake.shape != real.shape or long_strides(fake) == long_strides(real):
        return fake
    if not is_non_overlapping_and_dense_or_false(real):
        return fake
    out = torch.empty_strided(fake.shape, real.stride(), dtype=fake.dtype, device=fake.device)
    if fake.requires_grad and torch.is_grad_enabled():
        return out.copy_(fake)  # keeps the history: the copy's gradient is the op's
    return out


def long_strides(t: torch.Tensor) -> tuple[int, ...]:
    """The strides of the dimensions longer than 1 (a size-1 dimension's stride means nothing)."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)

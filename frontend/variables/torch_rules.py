"""Which torch callables become graph ops, which fold to constants, and which are refused.

A callable from torch's operator namespaces (torch, torch.nn.functional, torch.special,
torch.linalg, torch.fft, Tensor methods used as functions) becomes one `call_function` node.
Functions that read global state answer from the state the GLOBAL_STATE guard pins; functions
that change global state or leave the graph (seeding, saving, synchronizing) are refused.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.variables.base import (
    ConstantVariable,
    VariableTracker,
    all_constant,
    constant_fold,
)
from framejit.frontend.variables.tensor import TensorVariable

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator

GRAPH_MODULES = frozenset(
    {
        "torch",
        "torch.functional",
        "torch.nn.functional",
        "torch._C._nn",
        "torch._C._special",
        "torch._C._linalg",
        "torch._C._fft",
        "torch.special",
        "torch.linalg",
        "torch.fft",
        "torch._C._VariableFunctions",
        "torch.nn.modules.utils",
    }
)

# Pure functions of constants: folded when every argument is a constant.
FOLDABLE = {
    torch.Size,
    torch.device,
    torch.finfo,
    torch.iinfo,
    torch.promote_types,
    torch.result_type,
    torch.can_cast,
    torch.get_default_dtype,
    torch.is_grad_enabled,
    torch.is_inference_mode_enabled,
    torch.are_deterministic_algorithms_enabled,
    torch.is_autocast_enabled,
    torch.get_autocast_dtype if hasattr(torch, "get_autocast_dtype") else torch.get_default_dtype,
    # process state that a trace never runs under (torch.jit tracing or scripting, an export,
    # a CUDA stream capture): the answer when the frame is compiled, as torch gives it
    torch.jit.is_tracing,
    torch.jit.is_scripting,
    torch._C._get_tracing_state,
    getattr(torch.compiler, "is_exporting", torch.jit.is_scripting),
    torch.cuda.is_current_stream_capturing,
}

# Refused: they change global state, leave the process, or need real data.
REFUSED = {
    torch.manual_seed,
    torch.seed,
    torch.initial_seed,
    torch.get_rng_state,
    torch.set_rng_state,
    torch.set_grad_enabled,
    torch.no_grad,
    torch.enable_grad,
    torch.inference_mode,
    torch.set_default_dtype,
    torch.use_deterministic_algorithms,
    torch.save,
    torch.load,
    torch.from_numpy,
    torch.set_printoptions,
    torch.autocast,
    torch.compile,
}


# "Is this code being compiled?" Libraries ask it to take their traceable path (skip a
# data-dependent check, a warning or a registry update): while framejit traces, the answer is
# yes. Code that runs for real (at a break, or eagerly) gets torch's own answer.
COMPILING_QUERIES = {
    torch.compiler.is_compiling,
    getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling),
}


def _member(fn: Any, table: Any) -> bool:
    try:
        return fn in table
    except TypeError:  # unhashable: not a function of ours
        return False


def is_graph_function(fn: Any) -> bool:
    """True for callables that should become graph ops when called with tensors."""
    if not callable(fn) or _member(fn, REFUSED) or _member(fn, FOLDABLE):
        return False
    if isinstance(fn, type):
        return False
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True  # torch.ops.aten.add, torch.ops.mylib.op.default (custom ops too)
    owner = getattr(fn, "__objclass__", None)
    if owner in (torch._C.TensorBase, torch.Tensor):
        return True
    return getattr(fn, "__module__", None) in GRAPH_MODULES and callable(fn)


def is_torch_callable(fn: Any) -> bool:
    return (
        _member(fn, COMPILING_QUERIES)
        or _member(fn, FOLDABLE)
        or _member(fn, REFUSED)
        or is_graph_function(fn)
    )


def _fold_on_fakes(fn: Any, args: list[VariableTracker]) -> Any:
    return fn(*[a.fake if isinstance(a, TensorVariable) else a.as_constant() for a in args])


# Tensor queries that answer from metadata.
METADATA_FUNCTIONS = {
    torch.is_tensor: lambda args: isinstance(args[0], TensorVariable),
    torch.numel: lambda args: _fold_on_fakes(torch.numel, args),
    torch.is_floating_point: lambda args: _fold_on_fakes(torch.is_floating_point, args),
    torch.is_complex: lambda args: _fold_on_fakes(torch.is_complex, args),
}


def call_torch_function(
    tx: Translator, fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    if _member(fn, REFUSED):
        raise Unsupported("unsupported_call", f"torch.{getattr(fn, '__name__', name)}")
    if _member(fn, COMPILING_QUERIES) and not args and not kwargs:
        return ConstantVariable(True)
    if fn is torch.numel and len(args) == 1 and isinstance(args[0], TensorVariable):
        return tx.output.tensor_numel(args[0])  # symbolic under dynamic shapes
    query = METADATA_FUNCTIONS.get(fn) if _member(fn, METADATA_FUNCTIONS) else None
    if query is not None and not kwargs:
        return ConstantVariable(query(args))
    if _member(fn, FOLDABLE) or not is_graph_function(fn):
        if all_constant(args, kwargs):
            return tx.wrap_constant_result(constant_fold(fn, args, kwargs))
        raise Unsupported("unsupported_call", name)
    if isinstance(fn, types.FunctionType) and not all(map(_graph_arg, [*args, *kwargs.values()])):
        # a Python function of torch's given what a graph op cannot hold: a callback into user
        # code (`F.triplet_margin_with_distance_loss(..., distance_function=module)`) or an
        # options object. Inlined, so the callback is traced too.
        from framejit.frontend.variables.functions import UserFunctionVariable

        return tx.inline_user_function(UserFunctionVariable(fn), args, kwargs)
    return tx.output.call_op("call_function", fn, args, kwargs)


def _graph_arg(vt: VariableTracker) -> bool:
    """Can a graph node take `vt` as an argument?"""
    from framejit.frontend.output_graph import _to_fake

    try:
        _to_fake(vt)
    except Unsupported:
        return False
    return True

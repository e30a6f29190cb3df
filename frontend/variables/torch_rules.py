"""Which torch callables become graph ops, which fold to constants, and which are refused.

A callable from torch's operator namespaces (torch, torch.nn.functional, torch.special,
torch.linalg, torch.fft, Tensor methods used as functions) becomes one `call_function` node.

Process state: a graph runs with no side effect on it, so
- a function that changes it (a setter: `torch.set_num_threads`, `set_flush_denormal`, ...) or
  leaves the graph (seeding, saving, synchronizing) is refused: a graph break, so it runs at
  run time, in program order (`changes_global_state` names them by rule, not only by list);
- a function that reads it (a getter: `torch.get_num_threads()`) folds to the value it returns
  while tracing, pinned either by the GLOBAL_STATE guard (grad and inference mode, default dtype,
  determinism, autocast) or by a STATE_READ guard that calls it again with the same arguments.
"""

from __future__ import annotations

import inspect
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
from framejit.frontend.variables.symbolic import SymNodeVariable
from framejit.frontend.variables.tensor import TensorVariable
from framejit.guards import GuardKind
from framejit.guards.guard import AUTOCAST_DEVICES

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

# Functions of their arguments alone that build or answer from constants.
_OF_CONSTANTS = {
    torch.Size,
    torch.device,
    torch.finfo,
    torch.iinfo,
    torch.promote_types,
    torch.result_type,
    torch.can_cast,
}

# Folded when every argument is a constant: pure functions, and getters of process state.
FOLDABLE = {
    *_OF_CONSTANTS,
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
    torch._C._len_torch_dispatch_stack,  # 0 (call_torch_function)
    # the name of the out-of-tree device type (torch.optim asks which devices have fused and
    # foreach kernels); renamed once at most, pinned by a STATE_READ guard
    torch._C._get_privateuse1_backend_name,
}

# Refused: they change global state, leave the process, or need real data. (Setters found by
# name are refused too: changes_global_state.)
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

# torch functions that change process or thread state under a name the prefixes below miss.
STATE_SETTERS = {
    torch.set_default_tensor_type,
    torch._enable_functionalization,
    torch._disable_functionalization,
    getattr(torch, "_register_device_module", torch.set_default_tensor_type),
}
# What a torch function that changes process state is called: set_num_threads, set_flush_denormal,
# set_autocast_dtype, clear_autocast_cache, use_deterministic_algorithms, init_num_threads,
# manual_seed, seed... Such a call traced into a graph would run once, at trace time (or once per
# graph run in some backends, not at all in others), where eager runs it in program order.
_SETTER_PREFIXES = ("set_", "clear_", "use_", "enable_", "disable_", "init_", "reset_", "seed")
_SETTER_NAMES = frozenset({"manual_seed", "seed"})


def method_owner(fn: Any) -> Any:
    """`fn.__objclass__`, the class a method descriptor (`torch.Tensor.add`, `list.append`)
    belongs to; None for anything else. Read without calling a `__getattr__` of the object's
    class: a user's wrapper that delegates every missing attribute (`getattr(self.module,
    name)`) would run its code, or recurse without end before its own `__init__` has run."""
    if inspect.getattr_static(fn, "__objclass__", None) is None:
        return None
    return getattr(fn, "__objclass__", None)


def changes_global_state(fn: Any) -> bool:
    """Is `fn` a function of torch's namespaces that changes process state (refused)? Tensor
    methods and operator overloads act on tensors (`x.set_(y)`), not on the process."""
    if _member(fn, STATE_SETTERS):
        return True
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return False
    if method_owner(fn) is not None or isinstance(fn, type):
        return False
    if getattr(fn, "__module__", None) not in GRAPH_MODULES:
        return False
    name = getattr(fn, "__name__", "")
    return name in _SETTER_NAMES or name.startswith(_SETTER_PREFIXES)


# Functions of their arguments alone: folded on constants with no guard.
PURE = {
    *_OF_CONSTANTS,
    torch.broadcast_shapes,
    torch.typename,
    torch.is_tensor,
    torch.is_storage,
    torch.compiled_with_cxx11_abi,
    torch.jit.is_scripting,  # False wherever Python runs
}
# Modules of pure helpers (`torch.nn.modules.utils._pair`), and name prefixes of torch's pure
# ones (symbolic-int helpers, checks that raise or return None)
_PURE_MODULES = frozenset({"torch.nn.modules.utils"})
_PURE_PREFIXES = ("sym_", "_sym_", "_check", "_assert")

# Getters whose answer the GLOBAL_STATE guard pins (guards/guard.py GlobalState): no extra guard.
# (Their value may change while the frame runs, through the contexts the translator models:
# grad mode, autocast; the GLOBAL_STATE guard pins it where the frame starts, which fixes it.)
PINNED_GETTERS = {
    torch.is_grad_enabled,
    torch.is_inference_mode_enabled,
    torch.get_default_dtype,
    torch.are_deterministic_algorithms_enabled,
    torch.is_autocast_cache_enabled,
    getattr(torch, "is_autocast_cpu_enabled", torch.is_autocast_enabled),
}
# Autocast dtypes pinned: cpu and cuda (GlobalState.autocast_cpu_dtype / autocast_cuda_dtype).
_PINNED_AUTOCAST_DTYPES = {
    fn
    for fn in (
        getattr(torch, "get_autocast_cpu_dtype", None),
        getattr(torch, "get_autocast_gpu_dtype", None),
    )
    if fn is not None
}


# "Is this code being compiled?" Libraries ask it to take their traceable path (skip a
# data-dependent check, a warning or a registry update): while framejit traces, the answer is
# yes. Code that runs for real (at a break, or eagerly) gets torch's own answer.
COMPILING_QUERIES = {
    torch.compiler.is_compiling,
    getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling),
}


# Code whose answer to "is this being compiled?" is eager's (False): TransformerEncoder's fast
# path in eval mode, given a padding mask, returns zeros at padded positions, its compiling
# path the layers' values there.
_EAGER_PATH_CODES = frozenset({torch.nn.TransformerEncoder.forward.__code__})


def _member(fn: Any, table: Any) -> bool:
    try:
        return fn in table
    except TypeError:  # unhashable: not a function of ours
        return False


def is_graph_function(fn: Any) -> bool:
    """True for callables that should become graph ops when called with tensors."""
    if not callable(fn) or _member(fn, REFUSED) or _member(fn, FOLDABLE):
        return False
    if changes_global_state(fn):
        return False
    if isinstance(fn, type):
        return False
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True  # torch.ops.aten.add, torch.ops.mylib.op.default (custom ops too)
    owner = method_owner(fn)
    if owner in (torch._C.TensorBase, torch.Tensor):
        return True
    return getattr(fn, "__module__", None) in GRAPH_MODULES and callable(fn)


def is_torch_callable(fn: Any) -> bool:
    return (
        _member(fn, COMPILING_QUERIES)
        or _member(fn, FOLDABLE)
        or _member(fn, REFUSED)
        or changes_global_state(fn)
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
    if _member(fn, REFUSED) or changes_global_state(fn):
        raise Unsupported("unsupported_call", f"torch.{getattr(fn, '__name__', name)}")
    if _member(fn, COMPILING_QUERIES) and not args and not kwargs:
        # torch's own code where the "compiling" path computes something else than eager's
        # takes eager's path (which then breaks the graph where it cannot be traced)
        return ConstantVariable(tx.code not in _EAGER_PATH_CODES)
    if fn is torch._C._len_torch_dispatch_stack and not args and not kwargs:
        # compiled code never runs under a dispatch mode (the GLOBAL_STATE guard fails under
        # one, guards.user_mode_active): nn.MultiheadAttention asks before its fast path
        return ConstantVariable(0)
    if fn is torch.numel and len(args) == 1 and isinstance(args[0], TensorVariable):
        return tx.output.tensor_numel(args[0])  # symbolic under dynamic shapes
    query = METADATA_FUNCTIONS.get(fn) if _member(fn, METADATA_FUNCTIONS) else None
    if query is not None and not kwargs:
        return ConstantVariable(query(args))
    if _member(fn, FOLDABLE) or not is_graph_function(fn):
        if all_constant(args, kwargs):
            result = tx.wrap_constant_result(constant_fold(fn, args, kwargs))
            _guard_state_read(tx, fn, args, kwargs, result)
            return result
        raise Unsupported("unsupported_call", name)
    made = tensor_from_symbolic_data(tx, fn, args, kwargs)
    if made is not None:
        return made
    if isinstance(fn, types.FunctionType) and not all(map(_graph_arg, [*args, *kwargs.values()])):
        # a Python function of torch's given what a graph op cannot hold: a callback into user
        # code (`F.triplet_margin_with_distance_loss(..., distance_function=module)`) or an
        # options object. Inlined, so the callback is traced too.
        from framejit.frontend.variables.functions import UserFunctionVariable

        return tx.inline_user_function(UserFunctionVariable(fn), args, kwargs)
    result = tx.output.call_op("call_function", fn, args, kwargs)
    if not (isinstance(result, ConstantVariable) and result.value is None):
        # (None: an op the graph keeps for its effect on its arguments, not a read)
        _guard_state_read(tx, fn, args, kwargs, result)
    return result


# --- getters of process state ------------------------------------------------------------------


def _reads_unpinned_state(
    fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> bool:
    """Can `fn`'s answer on constant arguments change while no guard but GLOBAL_STATE holds?
    Everything but the pure functions and the getters GLOBAL_STATE pins: a torch function that
    returns a constant without being given a tensor answers from process state. (Operators and
    Tensor methods are no getters: a guard must not call them.)"""
    if _member(fn, PURE) or _member(fn, PINNED_GETTERS) or _member(fn, COMPILING_QUERIES):
        return False
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return False
    if method_owner(fn) is not None:
        return False
    if getattr(fn, "__module__", None) in _PURE_MODULES:
        return False
    if getattr(fn, "__name__", "").startswith(_PURE_PREFIXES):
        return False
    if _member(fn, _PINNED_AUTOCAST_DTYPES):
        return False
    given = [*args, *kwargs.values()]
    device = given[0].value if len(given) == 1 and isinstance(given[0], ConstantVariable) else None
    if fn is torch.is_autocast_enabled:  # pinned for the device types of AUTOCAST_DEVICES
        return bool(given) and device not in AUTOCAST_DEVICES
    if fn is getattr(torch, "get_autocast_dtype", None):  # pinned for cpu and cuda
        return device not in ("cpu", "cuda")
    return True


def _guard_state_read(
    tx: Translator,
    fn: Any,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
    result: VariableTracker,
) -> None:
    """A torch call given no tensor that folded to a constant read process state
    (`torch.get_float32_matmul_precision()`, `torch.is_anomaly_enabled()`): pin the value with a
    STATE_READ guard that makes the same call, unless it is pure or GLOBAL_STATE pins it.
    (Setters are refused, so the state the trace read is the state at the frame's start.)"""
    if isinstance(result, (TensorVariable, SymNodeVariable)) or not result.is_constant():
        return
    if any(v.has_tensors() for v in [*args, *kwargs.values()]) or not _reads_unpinned_state(
        fn, args, kwargs
    ):
        return
    if not all_constant(args, kwargs):
        raise Unsupported(
            "unsupported_call",
            f"torch.{getattr(fn, '__name__', fn)} with arguments a guard cannot repeat",
            "it reads process state",
        )
    read = (
        fn,
        tuple(a.as_constant() for a in args),
        tuple((k, v.as_constant()) for k, v in kwargs.items()),
        result.as_constant(),
    )
    tx.output.add_guard(None, GuardKind.STATE_READ, read, tx.location_text())


# --- torch.tensor of symbolic numbers ----------------------------------------------------------

# Factories that copy Python data into a new tensor, and where their data argument is.
_DATA_FACTORIES: dict[Any, tuple[int, str]] = {
    torch.tensor: (0, "data"),
    torch.as_tensor: (0, "data"),
    torch.asarray: (0, "obj"),
    torch.Tensor.new_tensor: (1, "data"),
}


def tensor_from_symbolic_data(
    tx: Translator, fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker | None:
    """`torch.tensor(n)` (as_tensor, asarray, `x.new_tensor([n, 1])`) where `n` is a symbolic
    number (an int argument automatic dynamic shapes made a SymInt): built from `torch.full`
    nodes that carry the number, stacked and reshaped to the data's shape, with the dtype and
    device the factory itself gives. (make_fx bakes `torch.tensor(SymInt)` into the graph as a
    constant, truncated to 32 bits, so the AOT stage would return the traced value for every
    later one.) None when the call is not such a call: the caller traces it as it is."""
    where = _DATA_FACTORIES.get(fn) if _member(fn, _DATA_FACTORIES) else None
    if where is None:
        return None
    index, keyword = where
    rest = dict(kwargs)
    if len(args) > index:
        data, positional = args[index], list(args[:index]) + list(args[index + 1 :])
    elif keyword in rest:
        data, positional = rest.pop(keyword), list(args)
    else:
        return None
    leaves: list[VariableTracker] = []
    example = _example_data(data, leaves)
    if example is _NOT_DATA or not any(isinstance(v, SymNodeVariable) for v in leaves):
        return None
    options = [*positional[index:], *rest.values()]
    if any(isinstance(v, SymNodeVariable) or not v.is_constant() for v in options):
        return None
    const_rest = {k: v.as_constant() for k, v in rest.items()}
    if const_rest.get("requires_grad") or const_rest.get("pin_memory"):
        # a leaf that requires grad, pinned memory (rare): the numbers pinned by guards
        values = ConstantVariable(_specialized(data))
        made = [*positional[:index], values, *positional[index:]]
        return tx.output.call_op("call_function", fn, made, rest)
    # What the factory itself makes of data of these types: dtype, device, shape.
    fake_args = [a.fake if isinstance(a, TensorVariable) else a.as_constant() for a in positional]
    fake_args.insert(index, example)
    try:
        with tx.output.fake_mode:
            like = fn(*fake_args, **const_rest)
    except Exception:  # the call fails eagerly too: traced as it is, it raises where eager does
        return None
    if not isinstance(like, torch.Tensor):
        return None
    options_vt = {"dtype": ConstantVariable(like.dtype), "device": ConstantVariable(like.device)}
    out = tx.output
    scalars = [
        out.call_op("call_function", torch.full, [ConstantVariable(()), leaf], options_vt)
        for leaf in leaves
    ]
    if like.dim() == 0:
        return scalars[0]
    from framejit.frontend.variables.containers import ListVariable

    stacked = out.call_op("call_function", torch.stack, [ListVariable(scalars)], {})
    if like.dim() == 1:
        return stacked
    return out.call_op("call_method", "reshape", [stacked, ConstantVariable(tuple(like.shape))], {})


_NOT_DATA = object()


def _specialized(vt: VariableTracker) -> Any:
    """Data of _example_data's kind with every number a plain one (symbolic ones pinned)."""
    from framejit.frontend.variables.containers import ListVariable

    if isinstance(vt, (SymNodeVariable, ConstantVariable)):
        return vt.as_constant()
    items = [_specialized(item) for item in vt.items]  # type: ignore[attr-defined]
    return items if type(vt) is ListVariable else tuple(items)


def _example_data(vt: VariableTracker, leaves: list[VariableTracker]) -> Any:
    """The data with each symbolic number replaced by a number of its type (what the factory
    infers the dtype from), collecting the leaves in order; _NOT_DATA for anything but nested
    lists and tuples of numbers (a tensor among them: traced as it is)."""
    from framejit.frontend.variables.containers import ListVariable, TupleVariable

    if isinstance(vt, SymNodeVariable):
        leaves.append(vt)
        return vt.python_type()()
    if isinstance(vt, ConstantVariable) and type(vt.value) in (int, float, bool):
        leaves.append(vt)
        return vt.value
    if type(vt) in (ListVariable, TupleVariable):
        items = [_example_data(item, leaves) for item in vt.items]
        if any(item is _NOT_DATA for item in items):
            return _NOT_DATA
        return items if type(vt) is ListVariable else tuple(items)
    return _NOT_DATA


def _graph_arg(vt: VariableTracker) -> bool:
    """Can a graph node take `vt` as an argument?"""
    from framejit.frontend.output_graph import _to_fake

    try:
        _to_fake(vt)
    except Unsupported:
        return False
    return True

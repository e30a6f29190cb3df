"""Wrapping real Python values as VariableTrackers, installing the guards that make it sound.

`wrap_source(tx, source)` reads the value the source reaches in the real frame and wraps it,
guarding every fact the returned VT exposes as a constant: a tensor's metadata (TENSOR_MATCH), a
number's value (CONSTANT_MATCH), a container's type and length, a module's identity and training
flag, a function's code. `wrap_value(tx, value, None)` wraps values with no source: constants from
trusted library modules, and values the translator made itself; it installs no guards.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import os
import re
import sys
import types
import weakref
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend import optimizers
from framejit.frontend.errors import Unsupported
from framejit.frontend.side_effects import REPLAYED_FUNCTIONS, ReplayedCallVariable
from framejit.frontend.sources import (
    AttrSource,
    ItemSource,
    Source,
    TypeSource,
    resumed_range,
)
from framejit.frontend.variables.base import (
    ConstantVariable,
    ExternalCallableVariable,
    LazyNumberVariable,
    VariableTracker,
    is_numpy_scalar,
    is_type_annotation,
)
from framejit.frontend.variables.builtins import is_builtin
from framejit.frontend.variables.containers import (
    DictVariable,
    ItemReader,
    ListVariable,
    NamedTupleVariable,
    SetVariable,
    TupleVariable,
)
from framejit.frontend.variables.contexts import (
    AUTOCAST_CLASSES,
    AutocastVariable,
    GradModeExit,
    WithExitVariable,
)
from framejit.frontend.variables.functions import (
    PartialVariable,
    TorchFunctionVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from framejit.frontend.variables.generators import (
    DrainedItems,
    RangeIteratorVariable,
    wrap_drained,
)
from framejit.frontend.variables.objects import (
    ClassVariable,
    EnvironVariable,
    NNModuleVariable,
    PythonModuleVariable,
    UserObjectVariable,
)
from framejit.frontend.variables.symbolic import SymNodeVariable
from framejit.frontend.variables.tensor import TensorVariable
from framejit.frontend.variables.torch_rules import is_torch_callable
from framejit.guards import GuardKind, TensorMeta

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator

CONSTANT_TYPES = (
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(None),
    range,
    slice,
    type(Ellipsis),
    type(NotImplemented),
)
TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


def _plain_parameter_class(cls: type) -> bool:
    """A subclass of nn.Parameter that changes nothing torch sees (`class QParam(nn.Parameter):`
    with extra methods or attributes, as quantization libraries write): a parameter to the
    graph, its exact class kept for isinstance and guarded."""
    if not issubclass(cls, torch.nn.Parameter):
        return False
    base = torch.nn.Parameter
    return all(
        getattr(cls, name, None) is getattr(base, name, None)
        for name in ("__torch_function__", "__torch_dispatch__", "__getattribute__", "__getattr__")
    ) and "__getattr__" not in vars(cls)


class BuiltinVariable(ExternalCallableVariable):
    """A Python builtin (or a `math`/`operator` function): variables/builtins.py calls it."""

    label = "Builtin"

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.fn

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        from framejit.frontend.variables.builtins import call_builtin

        return call_builtin(tx, self.fn, args, kwargs)


def wrap_source(tx: Translator, source: Source) -> VariableTracker:
    out = tx.output
    cached = out.cached_wrap(source)
    if cached is not None:
        return cached
    try:
        value = out.read_source(source)
    except Exception as exc:
        raise Unsupported(
            "exception", f"reading {source}", f"{type(exc).__name__}: {exc}"
        ) from None
    mutable = _is_mutable_object(value)
    if mutable:
        _, seen = out.objects_by_id.get(id(value), (None, None))
        if seen is not None and seen.source is not None:  # one object, reached twice
            _guard(tx, source, GuardKind.DUPLICATE_INPUT, seen.source)
            out.remember_wrap(source, seen)
            return seen
    vt = _wrap_guarded(tx, value, source)
    out.remember_wrap(source, vt)
    if mutable:
        out.objects_by_id[id(value)] = (value, vt)
    return vt


def _is_mutable_object(value: Any) -> bool:
    """Objects whose writes the translator records (their identity matters)."""
    t = type(value)
    if t in (list, dict, collections.OrderedDict) or isinstance(value, torch.nn.Module):
        return True
    return (
        not isinstance(value, (type, types.ModuleType, types.FunctionType, torch.Tensor))
        and t not in CONSTANT_TYPES
        and hasattr(value, "__dict__")
    )


def _value_guard(value: Any) -> tuple[GuardKind, Any]:
    return GuardKind.CONSTANT_MATCH, value


def _guard(tx: Translator, source: Source, kind: GuardKind, expected: Any) -> None:
    tx.output.add_guard(source, kind, expected, tx.location_text())


def _functorch_view(value: torch.Tensor) -> bool:
    return torch._C._functorch.is_functorch_wrapped_tensor(value) and value._is_view()


def _wrap_guarded(tx: Translator, value: Any, source: Source) -> VariableTracker:
    t = type(value)
    if t in TENSOR_TYPES and value.is_nested:  # no sizes to guard or trace (runs as Python)
        raise Unsupported("unsupported_object", "a nested tensor")
    if t in TENSOR_TYPES and value.layout not in (torch.strided, torch.sparse_coo):
        # compressed sparse layouts have no strides to guard, and no FakeTensors
        raise Unsupported("unsupported_object", f"a tensor of layout {value.layout}")
    if t in TENSOR_TYPES and value.is_quantized:  # no FakeTensors of quantized tensors
        raise Unsupported("unsupported_object", "a quantized tensor")
    if t in TENSOR_TYPES and _functorch_view(value):  # no FakeTensors of those either
        raise Unsupported("unsupported_object", "a view made inside torch.func (jvp's inputs)")
    if t in TENSOR_TYPES or _plain_parameter_class(t):
        dims = tx.output.input_dims(source, value)  # symbolic dimensions (dynamic shapes)
        _guard(tx, source, GuardKind.TENSOR_MATCH, TensorMeta.of(value, tuple(sorted(dims))))
        return tx.output.add_input(source, value, dims)
    if isinstance(value, torch.Tensor):
        raise Unsupported("unsupported_object", f"tensor subclass {t.__qualname__}")
    if t is float and tx.output.dynamic.float_is_lazy(source, value):
        _guard(tx, source, GuardKind.TYPE_MATCH, float)
        return LazyNumberVariable(value, source, lambda: _guard(tx, source, *_value_guard(value)))
    if t is int and tx.output.int_is_dynamic(source, value):  # dynamic shapes: a graph input
        _guard(tx, source, GuardKind.TYPE_MATCH, int)
        return tx.output.add_sym_input(source, value)
    if t is range and resumed_range(source):
        # a broken `for` loop's iterator, handed over as the range it had left: lazy, so
        # its start and stop follow automatic dynamic like any int argument
        _guard(tx, source, GuardKind.TYPE_MATCH, range)
        start, stop = (wrap_source(tx, AttrSource(source, a)) for a in ("start", "stop"))
        return RangeIteratorVariable(
            start, stop, wrap_source(tx, AttrSource(source, "step")).as_constant()
        )
    if t in CONSTANT_TYPES or is_numpy_scalar(value) or is_type_annotation(value):
        _guard(tx, source, GuardKind.CONSTANT_MATCH, value)
        return ConstantVariable(value, source)
    if t in (torch.dtype, torch.layout, torch.memory_format) or isinstance(value, enum.Enum):
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return ConstantVariable(value, source)
    if value is os.environ:
        return EnvironVariable()
    if t in (types.CodeType, re.Pattern, re.Match):
        # immutable: `fn.__code__.co_varnames`, a library's compiled `_NAME_RE` and what it
        # matched are constants of the trace
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return ConstantVariable(value, source)
    if value is sys.version_info or value is sys.implementation.version:
        # `sys.version_info >= (3, 11)`: fixed for the process
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return ConstantVariable(value, source)
    if t in (torch.device, torch.Size):
        _guard(tx, source, GuardKind.CONSTANT_MATCH, value)
        return ConstantVariable(value, source)
    if t is list:
        _guard(tx, source, GuardKind.TYPE_MATCH, t)

        def length() -> int:
            _guard(tx, source, GuardKind.LENGTH_CHECK, len(value))
            return len(value)

        def item(i: int) -> VariableTracker:
            return wrap_source(tx, ItemSource(source, i))

        return ListVariable([], source, ItemReader(length, item))
    if t is tuple or (isinstance(value, tuple) and hasattr(t, "_fields")):
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        _guard(tx, source, GuardKind.LENGTH_CHECK, len(value))
        items = [wrap_source(tx, ItemSource(source, i)) for i in range(len(value))]
        if t is tuple:
            return TupleVariable(items, source)
        if t is list:
            return ListVariable(items, source)
        return NamedTupleVariable(t, items, source)
    if t in (set, frozenset) and all(type(v) in CONSTANT_TYPES for v in value):
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        _guard(tx, source, GuardKind.DICT_KEYS, tuple(value))  # its items, in iteration order
        return SetVariable(value if t is frozenset else set(value), source)
    if optimizers.wraps_as_tensor_keyed(value, source):  # an optimizer's `state`
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        return optimizers.TensorKeyedDictVariable(value, source)
    if t is dict or t is collections.OrderedDict:
        if not all(_literal_key(k) for k in value):
            raise Unsupported("unsupported_object", "dict with non-str/int keys")
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        _guard(tx, source, GuardKind.DICT_KEYS, tuple(value))
        return DictVariable(
            {k: wrap_source(tx, ItemSource(source, k)) for k in value}, source, cls=t
        )
    if t is collections.defaultdict and all(isinstance(k, (str, int)) for k in value):
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        _guard(tx, source, GuardKind.DICT_KEYS, tuple(value))
        factory = wrap_source(tx, AttrSource(source, "default_factory"))
        items = {k: wrap_source(tx, ItemSource(source, k)) for k in value}
        return DictVariable(items, source, cls=t, default_factory=factory)
    if t is GradModeExit:
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        _guard(tx, AttrSource(source, "prior"), GuardKind.CONSTANT_MATCH, value.prior)
        return WithExitVariable.resumed(value.prior, source)
    if t is functools.partial:
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        return PartialVariable(
            wrap_source(tx, AttrSource(source, "func")),
            wrap_source(tx, AttrSource(source, "args")).unpack(tx),
            dict(wrap_source(tx, AttrSource(source, "keywords")).items),
            source,
        )
    if isinstance(value, torch.nn.Module):
        if "_modules" not in value.__dict__:  # `self` in an __init__ before nn.Module's own
            raise Unsupported("unsupported_object", f"{t.__qualname__} before nn.Module.__init__")
        # by identity, or by class once instances of one layer class share this code's entry
        shared = tx.output.dynamic.module_is_shared(source, value)
        module = None if shared else weakref.ref(value)
        _guard(tx, source, GuardKind.MODULE_MATCH, (module, value.training, type(value)))
        vt = NNModuleVariable(value, source)
        vt.shared = shared
        return vt
    if t is types.FunctionType and is_builtin(value):  # `dataclasses.fields` and the like
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return wrap_value(tx, value, source)
    if t is types.FunctionType and is_torch_callable(value):
        # a torch function reached through a global alias, a closure or an attribute
        # (`act = F.layer_norm`): the same graph op as `F.layer_norm` itself, not inlined
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return wrap_value(tx, value, source)
    if t is types.FunctionType:
        # Same code is enough: closure contents and defaults are read (and guarded) lazily.
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        _guard(tx, AttrSource(source, "__code__"), GuardKind.ID_MATCH, value.__code__)
        if value.__globals__ is not tx.output.fn.__globals__:
            _guard(tx, AttrSource(source, "__globals__"), GuardKind.ID_MATCH, value.__globals__)
        return UserFunctionVariable(value, source)
    if t is types.MethodType:
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        fn = wrap_source(tx, AttrSource(source, "__func__"))
        obj = wrap_source(tx, AttrSource(source, "__self__"))
        return UserMethodVariable(fn, obj, source)
    if isinstance(value, types.ModuleType):
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return PythonModuleVariable(value, source)
    if isinstance(value, type):
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return ClassVariable(value, source)
    if _replayed(value):
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return ReplayedCallVariable(value, source)
    if t is types.BuiltinMethodType and type(getattr(value, "__self__", None)) in (list, dict):
        # `losses.append` loaded before a break (`losses.append(loss.item())`) and handed to
        # the resume function: the method of the tracked container
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        _guard(tx, AttrSource(source, "__name__"), GuardKind.CONSTANT_MATCH, value.__name__)
        return wrap_source(tx, AttrSource(source, "__self__")).getattr(tx, value.__name__)
    if t in AUTOCAST_CLASSES:
        # an autocast made outside the frame (`@torch.autocast(...)` keeps one in the
        # decorator's closure): the same context as one made here, by what it was made with
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        settings = []
        for attr in ("device", "fast_dtype", "_enabled", "_cache_enabled"):
            setting = getattr(value, attr)
            _guard(tx, AttrSource(source, attr), GuardKind.CONSTANT_MATCH, setting)
            settings.append(setting)
        return AutocastVariable(tuple(settings))
    if t is DrainedItems:
        drained = wrap_drained(tx, value, source)
        if drained is not None:
            return drained
    if _bound_to_an_object(value):
        # `crit.append` of a list subclass, `obj.__eq__`: a C method bound to an instance is a
        # new object at every attribute read, so it cannot be guarded by identity (the guard
        # would never hold again); it is the method of that name of its object's class
        _guard(tx, source, GuardKind.TYPE_MATCH, t)
        _guard(tx, AttrSource(source, "__name__"), GuardKind.CONSTANT_MATCH, value.__name__)
        owner = TypeSource(AttrSource(source, "__self__"))
        _guard(tx, owner, GuardKind.ID_MATCH, type(value.__self__))
        return OpaqueCallableVariable(value, source)
    if is_torch_callable(value) or is_builtin(value):
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return wrap_value(tx, value, source)
    if any(value is f for f in _HAS_TORCH_FUNCTION):
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return HasTorchFunctionVariable(value, source)
    if isinstance(value, _C_CALLABLES):
        _guard(tx, source, GuardKind.ID_MATCH, value)
        return OpaqueCallableVariable(value, source)
    _guard(tx, source, GuardKind.TYPE_MATCH, t)
    return UserObjectVariable(value, source)


def _bound_to_an_object(value: Any) -> bool:
    """A C method bound to an instance (not to a module or a class, which are the same object
    every time they are read) that is what its instance's attribute of that name gives."""
    if type(value) not in (types.BuiltinMethodType, types.MethodWrapperType):
        return False
    owner = getattr(value, "__self__", None)
    if owner is None or isinstance(owner, types.ModuleType | type):
        return False
    try:
        return getattr(owner, value.__name__) == value
    except Exception:  # noqa: BLE001 - an attribute that raises: not this case
        return False


_C_CALLABLES = (
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
)


# torch's `__torch_function__` dispatch checks, at the top of most torch.nn.functional code
_HAS_TORCH_FUNCTION = (
    torch._C._has_torch_function,
    torch._C._has_torch_function_unary,
    torch._C._has_torch_function_variadic,
)


class HasTorchFunctionVariable(ExternalCallableVariable):
    """`has_torch_function(...)`: False when every argument is a plain tensor (the only kind
    the translator traces: subclasses are refused when they are wrapped), a constant or a
    sequence of those; anything else may define `__torch_function__`: a graph break."""

    label = "HasTorchFunction"

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        def plain(v: VariableTracker) -> bool:
            if isinstance(v, (TensorVariable, ConstantVariable, SymNodeVariable)):
                return True
            if isinstance(v, (TupleVariable, ListVariable)):
                return all(plain(i) for i in v.unpack(tx))
            return False

        if kwargs or not all(plain(a) for a in args):
            name = getattr(self.fn, "__name__", "has_torch_function")
            raise Unsupported("unsupported_call", f"{name}()", "an argument may not be a tensor")
        return ConstantVariable(False)


class OpaqueCallableVariable(ExternalCallableVariable):
    """A C function the translator does not understand: calling it is a graph break (the call
    runs for real), but loading and passing it around is fine."""

    label = "Opaque"

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        from framejit.frontend.variables.objects import unbound_base_call

        result = unbound_base_call(tx, self.fn, args, kwargs)  # `list.__len__(self)`
        if result is not None:
            return result
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        raise Unsupported("unsupported_call", f"{name}()", "a C function")


def _replayed(value: Any) -> bool:
    try:
        return value in REPLAYED_FUNCTIONS
    except TypeError:
        return False


def _literal_key(key: Any) -> bool:
    """A dict key the guards can check: str or int (a str or int enum too, printed as a named
    constant), a tuple of str, int and None (`d[(1, "a")]`), or an object compared by identity
    that the guards name as a constant: a class or a `typing` construct (tables of validators
    keyed by `list`, `Union`, `Literal`), a `torch.dtype` (`{torch.float16: 1e-3}` tables) or an
    enum member."""
    if type(key) is tuple:
        return all(_literal_key(k) if type(k) is tuple else type(k) in _KEY_TYPES for k in key)
    return isinstance(key, (str, int, type, torch.dtype, enum.Enum)) or is_type_annotation(key)


_KEY_TYPES = (str, int, bool, type(None))


def _constant_item(value: Any) -> bool:
    """A constant, or a tuple of them at any depth (`LOAD_CONST ((1, "a"), "k")`)."""
    if type(value) is tuple:
        return all(_constant_item(v) for v in value)
    return type(value) in CONSTANT_TYPES


def wrap_value(tx: Translator, value: Any, source: Source | None) -> VariableTracker:
    """Wrap without installing guards (the caller already guarded, or the value is fixed)."""
    t = type(value)
    if (
        t in CONSTANT_TYPES
        or t in (torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format)
        or isinstance(value, enum.Enum)
        or is_numpy_scalar(value)
        or is_type_annotation(value)
    ):
        return ConstantVariable(value, source)
    if t in (torch.finfo, torch.iinfo, types.CodeType, re.Pattern, re.Match):
        return ConstantVariable(value, source)
    if value is os.environ:
        return EnvironVariable()
    if isinstance(value, type):
        return ClassVariable(value, source)
    if isinstance(value, types.ModuleType) or value is torch._C._VariableFunctions:
        # `_C._VariableFunctions.rsub(...)` (torch/_tensor.py): a namespace of torch's functions
        return PythonModuleVariable(value, source)
    if _replayed(value):
        return ReplayedCallVariable(value, source)
    if is_torch_callable(value):
        return TorchFunctionVariable(value, source)
    if is_builtin(value):
        return BuiltinVariable(value, source)
    if t is types.FunctionType:
        return UserFunctionVariable(value, source)
    if any(value is f for f in _HAS_TORCH_FUNCTION):
        return HasTorchFunctionVariable(value, source)
    if isinstance(value, _C_CALLABLES):
        return OpaqueCallableVariable(value, source)
    if t in (tuple, list) and all(_constant_item(v) for v in value):
        return (
            ConstantVariable(value, source)
            if t is tuple
            else ListVariable([ConstantVariable(v) for v in value], source)
        )
    if t in (set, frozenset) and all(type(v) in CONSTANT_TYPES for v in value):
        if source is not None:
            return _wrap_guarded(tx, value, source)
        return SetVariable(value if t is frozenset else set(value), readonly=True)
    if t is tuple and source is None and all(isinstance(v, type) for v in value):
        # a library's tuple of classes (`_Number = (numbers.Number, ...)` for isinstance)
        return TupleVariable([ClassVariable(v) for v in value])
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and source is None:
        raise Unsupported("unsupported_object", f"{t.__qualname__} object without a source")
    if source is not None:
        return _wrap_guarded(tx, value, source)
    raise Unsupported(
        "unsupported_object", f"{t.__qualname__} object", "reached without a way to load it again"
    )

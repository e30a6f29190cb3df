"""Objects from outside the frame: nn.Modules, user objects, classes and Python modules.

Attributes are read lazily from the real object through Sources, so only what the traced code
touches gets guarded. Module calls inline `forward` (after checking that no hooks would run);
parameters, buffers and submodules are found the way nn.Module.__getattr__ finds them.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import enum
import functools
import inspect
import logging
import operator
import os
import sys
import types
import weakref
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.side_effects import LOGGER_METHODS, ReplayedCallVariable
from framejit.frontend.sources import (
    AttrSource,
    ConstSource,
    DictItemSource,
    EnvSource,
    GenericAttrSource,
    ItemSource,
    MethodCallSource,
    Source,
    TypeSource,
    buffer_source,
    param_source,
    submodule_source,
)
from framejit.frontend.variables.base import (
    EXCEPTION_CONSTANT_TYPES,
    ConstantVariable,
    ExceptionVariable,
    VariableTracker,
    all_constant,
    constant_fold,
    note_mutation,
    note_undoable,
)
from framejit.frontend.variables.contexts import (
    AUTOCAST_CLASSES,
    GRAD_MODE_CLASSES,
    AutocastVariable,
    ContextExit,
    GradModeVariable,
    InferenceModeVariable,
    autocast_arguments,
)
from framejit.frontend.variables.functions import UserFunctionVariable, UserMethodVariable
from framejit.guards import GuardKind

from framejit import logs

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator

Args = list[VariableTracker]
Kwargs = dict[str, VariableTracker]
_IMMUTABLETYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: a C type whose attributes cannot change


def _class_attr(cls: type, name: str) -> tuple[type, Any] | None:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None


# Types whose own `__getattribute__` slot is the generic lookup (instance dict, then class).
_GENERIC_GETATTRIBUTE = (
    object.__getattribute__,
    torch.nn.Module.__getattribute__,
    types.SimpleNamespace.__getattribute__,
    # builtin bases of user classes; their slot is the generic lookup too
    dict.__getattribute__,
    collections.OrderedDict.__getattribute__,
    collections.defaultdict.__getattribute__,
    list.__getattribute__,
    tuple.__getattribute__,
    set.__getattribute__,
)


def _has_custom_getattribute(cls: type) -> bool:
    return cls.__getattribute__ not in _GENERIC_GETATTRIBUTE


def _python_getattribute(cls: type) -> bool:
    """Is every `__getattribute__` along the class's MRO either written in Python or the
    generic lookup? (A config's attribute aliases; the translator inlines them.)"""
    return all(
        isinstance(k.__dict__["__getattribute__"], types.FunctionType)
        or k.__dict__["__getattribute__"] in _GENERIC_GETATTRIBUTE
        for k in cls.__mro__
        if "__getattribute__" in k.__dict__
    )


def jit_original(tx: Translator, vt: VariableTracker) -> VariableTracker | None:
    """A `framejit.jit` function or module called from compiled code: the function or module
    it wraps, traced into the caller's graph (the wrapper's own code only dispatches)."""
    from framejit.api import JitFunction, JitModule

    obj = getattr(vt, "obj", None)
    if vt.source is None or not isinstance(obj, (JitFunction, JitModule)):
        return None
    tx.output.add_guard(vt.source, GuardKind.TYPE_MATCH, type(obj), tx.location_text())
    return tx.wrap_source(
        AttrSource(vt.source, "_orig_mod" if isinstance(obj, JitModule) else "_fn")
    )


class UserObjectVariable(VariableTracker):
    def __init__(self, obj: Any, source: Source | None) -> None:
        self.obj = obj
        self.source = source

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.obj).__name__})"

    def python_type(self) -> type:
        return type(self.obj)

    def _need_source(self, what: str) -> Source:
        if self.source is None:
            raise Unsupported("unsupported_attr", what, "object has no source")
        return self.source

    def truth(self, tx: Translator) -> bool:
        """`if obj:`: its class's `__bool__`, else its `__len__`, when written in Python
        (inlined, through the attribute read that guards it); true when it has neither."""
        for name in ("__bool__", "__len__"):
            found = _class_attr(type(self.obj), name)
            if found is None:
                continue
            if isinstance(found[1], types.FunctionType) and self.source is not None:
                return self.getattr(tx, name).call(tx, [], {}).truth(tx)
            break
        else:
            return True
        return super().truth(tx)

    def _attr_source(self, name: str) -> AttrSource:
        """Where `generic_getattr` reads `name` from (past a custom __getattribute__)."""
        base = self._need_source(name)
        if _has_custom_getattribute(type(self.obj)):
            return GenericAttrSource(base, name)
        return AttrSource(base, name)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        cls = type(self.obj)
        found = _class_attr(cls, name)
        if (
            found is None
            and cls.__setattr__ is object.__setattr__
            and not isinstance(getattr(self.obj, "__dict__", None), dict)
        ):
            # no instance dict and no slot (`object()`): eager raises here
            error = AttributeError(f"'{cls.__name__}' object has no attribute '{name}'")
            raise Unsupported.raised(f"setting {cls.__name__}.{name}", error)
        custom = cls.__setattr__ not in (object.__setattr__, torch.nn.Module.__setattr__)
        if (
            not custom
            and found is not None
            and self.source is not None
            and not isinstance(self.obj, torch.nn.Module)  # its __setattr__ registers first
        ):
            attr = found[1]
            if isinstance(attr, property) and isinstance(attr.fset, types.FunctionType):
                # a property's setter written in Python: inlined, its own writes recorded
                if not _trusted_class(found[0]):
                    tx.output.add_guard(
                        AttrSource(TypeSource(self.source), name),
                        GuardKind.ID_MATCH,
                        attr,
                        tx.location_text(),
                    )
                tx.call_function_value(attr.fset, [self, value], {})
                return
            setter = _python_method_of(type(attr), "__set__")
            if isinstance(setter, types.FunctionType) and not (
                type(attr).__module__ or ""
            ).startswith("framejit."):
                # a data descriptor written in Python (a validating field): its __set__
                descriptor = tx.wrap_source(ConstSource(attr, f"{found[0].__qualname__}.{name}"))
                UserFunctionVariable(setter).call(tx, [descriptor, self, value], {})
                return
            if type(attr) is types.MemberDescriptorType:
                # a `__slots__` slot: written by the replay's setattr like any attribute
                tx.output.side_effects.store_attr(self, name, value)
                return
        if custom or (found is not None and hasattr(type(found[1]), "__set__")):
            raise Unsupported(
                "side_effect",
                f"setting {cls.__name__}.{name}",
                "a custom __setattr__ or a data descriptor",
            )
        # recorded for the replay only: a rewound instruction forgets the record (rollback)
        tx.output.side_effects.store_attr(self, name, value)
        if self.source is not None:  # `obj.__dict__` read in the trace: the same dict
            view = tx.output.cached_wrap(self._attr_source("__dict__"))
            items = getattr(view, "items", None)
            if isinstance(items, dict):
                previous = items.get(name)
                items[name] = value
                note_undoable(
                    lambda: items.pop(name) if previous is None else items.update({name: previous})
                )

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        written = tx.output.side_effects.load_attr(self, name)
        if written is not None:
            return written
        if name == "__dict__" and self.source is not None:
            # the instance dict, with the attributes the trace wrote so far (kept in step
            # with later writes by setattr)
            view = tx.wrap_source(self._attr_source("__dict__"))
            entry = tx.output.side_effects.attrs.get(id(self))
            items = getattr(view, "items", None)
            if entry is not None and isinstance(items, dict):
                before = dict(items)
                items.update(entry[1])
                note_undoable(lambda: (items.clear(), items.update(before)))
            return view
        cls = type(self.obj)
        if isinstance(self.obj, logging.Logger) and name in LOGGER_METHODS:
            # A logger from logging.getLogger() in the frame has no source: the bound method
            # (of a process-wide logger) is a constant of the replay.
            method_source = AttrSource(self.source, name) if self.source is not None else None
            return ReplayedCallVariable(getattr(self.obj, name), method_source)
        if _has_custom_getattribute(cls):
            return self._custom_getattribute(tx, name)
        return self.generic_getattr(tx, name)

    def _custom_getattribute(self, tx: Translator, name: str) -> VariableTracker:
        """A class's own `__getattribute__` written in Python (configs that map attribute
        aliases) is inlined like any method; its `super().__getattribute__(key)` and
        `object.__getattribute__(self, key)` reach `generic_getattr`."""
        cls = type(self.obj)
        found = _class_attr(cls, "__getattribute__")
        if found is None or not isinstance(found[1], types.FunctionType):
            raise Unsupported(
                "unsupported_attr", f"{cls.__name__}.{name}", "custom __getattribute__ in C"
            )
        hook = self._class_function(tx, found[0], "__getattribute__", found[1])
        return UserMethodVariable(hook, self).call(tx, [ConstantVariable(name)], {})

    def _class_function(
        self, tx: Translator, owner: type, name: str, fn: types.FunctionType
    ) -> VariableTracker:
        """`fn`, found as `name` on the object's class: guarded by identity when the class is
        a user's (it can be patched), a fixed value when a trusted library defines it."""
        if self.source is None or _trusted_class(owner):
            return UserFunctionVariable(fn)
        return tx.wrap_source(AttrSource(TypeSource(self.source), name))

    def dict_view(self, tx: Translator, what: str) -> VariableTracker:
        """The items of a dict subclass from outside the frame, read (and guarded) with dict's
        own lookups: for dict's methods reached past the class's overrides. Only reads."""

        cls = type(self.obj)
        if not issubclass(cls, dict) or any(
            isinstance(_python_method_of(cls, n), types.FunctionType)
            for n in ("__iter__", "keys", "__len__")
        ):
            raise Unsupported("unsupported_call", what, "a dict subclass that changes iteration")
        source = self._need_source(what)
        keys = list(self.obj)  # the order the DICT_KEYS guard checks (OrderedDict too)
        if not all(isinstance(k, (str, int)) for k in keys):
            raise Unsupported("unsupported_object", "dict with non-str/int keys")
        tx.output.add_guard(source, GuardKind.DICT_KEYS, tuple(keys), tx.location_text())
        items = {k: tx.wrap_source(DictItemSource(source, k)) for k in keys}
        return _ReadOnlyDict(items, what)

    def list_items(self, tx: Translator, what: str) -> list[VariableTracker]:
        """The items of a list subclass from outside the frame (`LogitsProcessorList`), read
        (and guarded) with list's own lookups, length guarded. Only reads; a subclass that
        overrides iteration, length or indexing in Python is not read this way."""
        cls = type(self.obj)
        if not issubclass(cls, list) or any(
            isinstance(_python_method_of(cls, n), types.FunctionType)
            for n in ("__iter__", "__len__", "__getitem__")
        ):
            raise Unsupported("unsupported_object", f"{what} of {cls.__name__}")
        source = self._need_source(what)
        n = list.__len__(self.obj)
        tx.output.add_guard(source, GuardKind.LENGTH_CHECK, n, tx.location_text())
        return [tx.wrap_source(ItemSource(source, i)) for i in range(n)]

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        if isinstance(self.obj, list):
            return self.list_items(tx, "iterating over")
        it = self.python_iter(tx)
        if it is not None:
            return it.unpack(tx)
        return super().unpack(tx)

    def python_iter(self, tx: Translator) -> VariableTracker | None:
        """`iter(obj)` of an object from outside whose class iterates in Python (an iterator
        class, a Python `__iter__`, the `__getitem__` protocol); None for others."""
        if self.source is None or isinstance(self.obj, (torch.nn.Module, list, dict, tuple)):
            return None
        if type(self.obj).__module__.startswith("torch."):  # a DataLoader stays a break
            return None
        return python_iter(tx, self, type(self.obj))

    def _written_to_instance_dict(self, tx: Translator, name: str) -> VariableTracker | None:
        """What the trace stored under `name` through `obj.__dict__[name] = v` (a caching
        descriptor's write), which the real dict gets only when the writes are replayed."""
        if self.source is None:
            return None
        view = tx.output.cached_wrap(self._attr_source("__dict__"))
        items = getattr(view, "items", None)
        if id(view) not in tx.output.side_effects.containers or not isinstance(items, dict):
            return None
        return items.get(name)

    def _python_descriptor(
        self, tx: Translator, owner: type, name: str, attr: Any
    ) -> VariableTracker | None:
        """`obj.name` where the class attribute is a descriptor whose `__get__` is written in
        Python (torch.distributions' lazy_property, a user's cached attribute): its
        `__get__(descriptor, obj, cls)` inlined, as Python calls it, so what it does (count,
        cache into the instance dict) happens in the trace, in order, once per call; reading
        it through a source would run it for real while tracing and again in the guards.
        None for any other attribute."""
        if self.source is None:
            return None
        getter = _python_method_of(type(attr), "__get__")
        if not isinstance(getter, types.FunctionType):
            return None
        if (type(attr).__module__ or "").startswith("framejit."):
            return None  # a jit function as a method: its bound form is followed as it is
        if type(attr) is functools.cached_property and isinstance(
            getattr(self.obj, "__dict__", None), dict
        ):
            # what its __get__ does, without the lock Python 3.11's takes: the value computed
            # and stored in the instance dict, where the next read finds it
            value = tx.call_function_value(attr.func, [self], {})
            view = self.getattr(tx, "__dict__")
            tx.setitem(view, ConstantVariable(attr.attrname or name), value)
            return value
        descriptor = tx.wrap_source(ConstSource(attr, f"{owner.__qualname__}.{name}"))
        cls = tx.wrap_value(type(self.obj), TypeSource(self.source))
        return UserFunctionVariable(getter).call(tx, [descriptor, self, cls], {})

    def generic_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """`object.__getattribute__(obj, name)`: data descriptors, the instance dict, then
        the class."""
        cls = type(self.obj)
        found = _class_attr(cls, name)
        if found is not None:
            owner, attr = found
            if isinstance(attr, property):
                if attr.fget is None:
                    raise Unsupported("unsupported_attr", f"{cls.__name__}.{name}")
                if self.source is not None and not _trusted_class(owner):
                    # a user class's property can be replaced (`P.s = property(...)`)
                    tx.output.add_guard(
                        AttrSource(TypeSource(self.source), name),
                        GuardKind.ID_MATCH,
                        attr,
                        tx.location_text(),
                    )
                return tx.call_function_value(attr.fget, [self], {})
            if hasattr(type(attr), "__set__") and not isinstance(attr, types.FunctionType):
                inlined = self._python_descriptor(tx, owner, name, attr)
                if inlined is not None:
                    return inlined
                # another data descriptor (slots, C getters): read it as a value
                return tx.wrap_source(self._attr_source(name))
        written = self._written_to_instance_dict(tx, name)
        if written is not None:
            return written
        # None: an object with no instance dict (a C type's: numpy.ndarray, torch.Generator),
        # which nothing can shadow a class attribute in
        instance_dict = getattr(self.obj, "__dict__", None)
        if instance_dict is not None and name in instance_dict:
            return tx.wrap_source(self._attr_source(name))
        pending = pending_class_attr(tx, cls, name)
        if pending is not None:  # `Cls.count += 1` earlier in the trace
            return pending
        if found is not None:
            owner, attr = found
            if isinstance(instance_dict, dict) and self.source is not None:
                # an instance attribute of that name set later (`obj.method = patched`,
                # `module.forward = ...`) would shadow what the class gives
                tx.output.require_absent(self._attr_source("__dict__"), name, tx.location_text())
            cls_source = TypeSource(self.source) if self.source is not None else None
            attr_source = AttrSource(cls_source, name) if cls_source is not None else None
            # What a library class defines is fixed; a user class can be patched: guard it.
            guarded = attr_source is not None and not _trusted_class(owner)
            if isinstance(attr, staticmethod):
                if guarded:
                    return tx.wrap_source(attr_source)
                return tx.wrap_value(attr.__func__, None)
            if isinstance(attr, classmethod):
                fn = (
                    tx.wrap_source(AttrSource(attr_source, "__func__"))
                    if guarded
                    else (tx.wrap_value(attr.__func__, None))
                )
                return UserMethodVariable(fn, tx.wrap_value(cls, cls_source))
            if owner in _DICT_BASES and name in _DICT_READS:
                return _DictReadMethod(self, name)
            if isinstance(attr, types.MethodDescriptorType) and cls.__flags__ & _IMMUTABLETYPE:
                # A method of a C type (`file.write`): fixed by the type, a new bound object at
                # every lookup, so it is not guarded by identity.
                return tx.wrap_value(getattr(self.obj, name), self._attr_source(name))
            if isinstance(attr, types.FunctionType):
                fn = (
                    tx.wrap_source(attr_source)
                    if guarded
                    else UserFunctionVariable(attr, attr_source)
                )
                return UserMethodVariable(fn, self)
            inlined = self._python_descriptor(tx, owner, name, attr)
            if inlined is not None:
                return inlined
            return tx.wrap_source(self._attr_source(name))
        switch = read_switch(tx, self.obj, name)
        if switch is not None:
            return switch
        if hasattr(cls, "__getattr__"):
            raise Unsupported("unsupported_attr", f"{cls.__name__}.{name}", "custom __getattr__")
        from framejit.frontend.translator import guard_missing_attribute

        guard_missing_attribute(tx, self, name)  # a traced `except AttributeError` relies on it
        raise Unsupported("exception", f"{cls.__name__}.{name}", "AttributeError")

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        original = jit_original(tx, self)
        if original is not None:
            return original.call(tx, args, kwargs)
        if type(self.obj) in GETTERS:  # an itemgetter/attrgetter made outside: fixed keys
            if self.source is not None:
                tx.output.add_guard(self.source, GuardKind.ID_MATCH, self.obj, tx.location_text())
            return GetterVariable(self.obj, self.source).call(tx, args, kwargs)
        if type(self.obj) is operator.methodcaller:
            from framejit.frontend.variables.stdlib import methodcaller_from_outside

            caller = methodcaller_from_outside(tx, self.obj, self.source)
            if caller is not None:
                return caller.call(tx, args, kwargs)
        if isinstance(self.obj, ContextExit):
            raise Unsupported(
                "unsupported_context",
                "leaving a `with` block entered for real",
                "the context's exit runs as Python",
            )
        cached = self._cached_constant(tx, args, kwargs)
        if cached is not None:
            return cached
        if type(self.obj) is weakref.ref and self.source is not None and not (args or kwargs):
            # `ref()` of a weak reference from outside the frame (an LR scheduler's wrapper of
            # `opt.step`): its referent, read (and guarded) through the call
            return tx.wrap_source(MethodCallSource(self.source, "__call__"))
        call = _class_attr(type(self.obj), "__call__")
        if call is None or not isinstance(call[1], types.FunctionType):
            raise Unsupported("unsupported_call", f"calling a {type(self.obj).__name__}")
        # guarded by identity for a user's class: `Cls.__call__ = other` between calls
        fn = self._class_function(tx, call[0], "__call__", call[1])
        return UserMethodVariable(fn, self).call(tx, args, kwargs)

    def _cached_constant(
        self, tx: Translator, args: Args, kwargs: Kwargs
    ) -> VariableTracker | None:
        """A call of a `functools.lru_cache`/`cache` function, a constant of the trace:
        - of no arguments, once it has run (`is_torch_distributed_available()`): its one
          cached value, read without running the function;
        - of constant arguments (`is_torch_greater_or_equal("2.3")`), when the function passes
          the purity scan: called now, so the cache holds the value as it would after the first
          eager call, and every later eager call would answer from it too. The function itself
          (`__wrapped__`) runs first: a value the trace cannot hold (a tensor) leaves the cache
          and its counters untouched, for the break to make the one call eager makes.
        Otherwise the call stays a break."""
        from framejit.frontend.purity import scan
        from framejit.frontend.variables.builder import CONSTANT_TYPES

        wrapper = self.obj
        if not isinstance(wrapper, functools._lru_cache_wrapper) or self.source is None:
            return None
        if args or kwargs:
            values = [*args, *kwargs.values()]
            wrapped = getattr(wrapper, "__wrapped__", None)
            if not all(v.is_constant() and type(v.as_constant()) in CONSTANT_TYPES for v in values):
                return None
            if not isinstance(wrapped, types.FunctionType) or scan(wrapped) is not None:
                return None
            consts = [a.as_constant() for a in args]
            kwconsts = {k: v.as_constant() for k, v in kwargs.items()}
            try:
                if type(wrapped(*consts, **kwconsts)) not in CONSTANT_TYPES:
                    return None
                value = wrapper(*consts, **kwconsts)
            except Exception:  # noqa: BLE001 - the call then raises for real, at the break
                return None
        elif wrapper.cache_info().currsize == 0:
            return None
        else:
            value = wrapper()  # a cache hit: the stored value
        if type(value) not in CONSTANT_TYPES:
            return None
        tx.output.add_guard(self.source, GuardKind.ID_MATCH, wrapper, tx.location_text())
        return ConstantVariable(value)

    def call_method(self, tx: Translator, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        found = _class_attr(type(self.obj), name)
        if (
            name in ("__getitem__", "__len__", "__contains__", "__iter__", "__next__")
            and found is not None
            and isinstance(found[1], types.FunctionType)
        ):
            return UserMethodVariable(UserFunctionVariable(found[1]), self).call(tx, args, kwargs)
        if found is not None and found[0] in _DICT_BASES and name in _DICT_READS:
            return _DictReadMethod(self, name).call(tx, args, kwargs)
        if found is not None and found[0] is list and name in _LIST_READS and not kwargs:
            from framejit.frontend.variables.containers import ListVariable

            items = ListVariable(self.list_items(tx, f"list.{name}"))
            return items.call_method(tx, name, args, kwargs)
        return self.getattr(tx, name).call(tx, args, kwargs)


# list methods that only read: answered from `UserObjectVariable.list_items` for a list
# subclass from outside the frame.
_LIST_READS = frozenset({"__len__", "__getitem__", "__contains__", "index", "count", "copy"})

# Containers whose __iter__/__len__/__getitem__ are answered from `_modules`.
_MODULE_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


class NNModuleVariable(UserObjectVariable):
    # guarded by class, not identity (DynamicInputs.module_is_shared): until `pin`, nothing
    # of this instance but what its sources read may reach the compiled code
    shared = False

    def pin(self, tx: Translator, why: str) -> None:
        """Guard this module by identity where the trace is about to rely on which instance
        it is (its id, a callee constant, state read without a source)."""
        if self.shared and self.source is not None:
            self.shared = False
            mod = self.obj
            tx.output.add_guard(
                self.source,
                GuardKind.MODULE_MATCH,
                (weakref.ref(mod), mod.training, type(mod)),
                f"{tx.location_text()} ({why})",
            )
            logs.artifact("guards", lambda: f"{self.source}: guarded by identity: {why}")

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        swapped = tx.output.reparametrized.get((id(self.obj), name))
        if swapped is not None:  # inside torch.func.functional_call
            return swapped
        written = tx.output.side_effects.load_attr(self, name)
        if written is not None:
            return written
        mod = self.obj
        d = mod.__dict__
        src = self.source
        if name in d.get("_parameters", {}):
            return tx.wrap_source(param_source(self._need_source(name), name))
        # (a None buffer or submodule is read through its source too: guarded, so setting it
        # to a tensor or a module later compiles again)
        if name in d.get("_buffers", {}):
            if d["_buffers"][name] is None and src is None:  # a module built in the frame
                return ConstantVariable(None)
            return tx.wrap_source(buffer_source(self._need_source(name), name))
        if name in d.get("_modules", {}):
            if d["_modules"][name] is None and src is None:
                return ConstantVariable(None)
            return tx.wrap_source(submodule_source(self._need_source(name), name))
        del src
        if name in (*_TREE_METHODS, "train", "eval") and _plain_tree_method(mod, name):
            return _ModuleMethodVariable(self, name)
        if name in _REGISTERING_METHODS and self.source is not None:
            # the trace reads a module's entries from its real dicts: a `hasattr(self, name)`
            # or `self.name` after the call, in the same call, would not see the new one
            raise Unsupported("unsupported_call", f"{type(mod).__name__}.{name} in a traced call")
        return super().getattr(tx, name)

    def module_keys(self, tx: Translator) -> list[str]:
        """The names in `_modules`, guarded: a container's length, order and items
        (`Sequential.append`, `del layers[0]`, a second parametrization) are part of what the
        trace unrolled."""
        src = self._need_source("reading a module container")
        keys = list(self.obj._modules)
        tx.output.add_guard(
            AttrSource(src, "_modules"), GuardKind.DICT_KEYS, tuple(keys), tx.location_text()
        )
        return keys

    def _children(self, tx: Translator) -> list[VariableTracker]:
        src = self._need_source("iterating a module container")
        return [tx.wrap_source(submodule_source(src, k)) for k in self.module_keys(tx)]

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        if isinstance(self.obj, (torch.nn.Sequential, torch.nn.ModuleList)):
            return self._children(tx)
        if isinstance(self.obj, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k in self.module_keys(tx)]
        if isinstance(self.obj, torch.nn.ParameterList):
            # its __iter__ is a generator over self[i]: the same items, by index
            n = self.call_method(tx, "__len__", [], {})
            if n.is_constant():
                return [
                    self.call_method(tx, "__getitem__", [ConstantVariable(i)], {})
                    for i in range(n.as_constant())
                ]
        raise Unsupported("unsupported_object", f"iterating over {type(self.obj).__name__}")

    def call_method(self, tx: Translator, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        mod = self.obj
        if isinstance(mod, _MODULE_CONTAINERS):
            if name == "__len__":
                return ConstantVariable(len(self.module_keys(tx)))
            if name == "__getitem__" and len(args) == 1 and args[0].is_constant():
                key = args[0].as_constant()
                keys = self.module_keys(tx)
                if isinstance(mod, torch.nn.ModuleDict):
                    return tx.wrap_source(submodule_source(self._need_source("[]"), key))
                if isinstance(key, int):
                    return tx.wrap_source(submodule_source(self._need_source("[]"), keys[key]))
                if isinstance(key, slice):
                    return ModuleSliceVariable(self, key, self._children(tx)[key])
            if isinstance(mod, torch.nn.ModuleDict) and name in ("keys", "values", "items"):
                from framejit.frontend.variables.containers import TupleVariable

                names = self.module_keys(tx)
                keys = [ConstantVariable(k) for k in names]
                if name == "keys":
                    return TupleVariable(keys)
                src = self._need_source(name)
                values = [tx.wrap_source(submodule_source(src, k)) for k in names]
                if name == "values":
                    return TupleVariable(values)
                return TupleVariable([TupleVariable([k, v]) for k, v in zip(keys, values)])
        if name in _TREE_METHODS and _plain_tree_method(mod, name):
            return self._tree_method(tx, name, args, kwargs)
        if name in ("train", "eval") and _plain_tree_method(mod, name):
            return self._set_training(tx, name, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def _tree_method(
        self, tx: Translator, name: str, args: Args, kwargs: Kwargs
    ) -> VariableTracker:
        """`parameters()`, `named_modules()` and the like: the module tree is read while
        tracing (as `for layer in self.layers` reads it), each item reached through its source."""
        from framejit.frontend.variables.containers import IteratorVariable, TupleVariable

        if not all_constant(args, kwargs):
            raise Unsupported("unsupported_call", f"Module.{name} with non-constant arguments")
        self.pin(tx, f"Module.{name}() walks this instance's tree")
        if tx.output.reparametrized:
            raise Unsupported(
                "unsupported_call", f"Module.{name}", "inside torch.func.functional_call"
            )
        src = self._need_source(name)
        guard_tree_walk(tx, self.obj, src, _WALKED_DICTS[name])
        try:
            found = list(
                getattr(self.obj, name)(
                    *[a.as_constant() for a in args],
                    **{k: v.as_constant() for k, v in kwargs.items()},
                )
            )
        except (TypeError, ValueError) as exc:
            raise Unsupported.raised(f"Module.{name}(...)", exc) from None
        paths = _tree_paths(self.obj, src)
        items: list[VariableTracker] = []
        for item in found:
            named = isinstance(item, tuple)
            value = item[1] if named else item
            source = paths.get(id(value))
            if source is None:
                raise Unsupported("unsupported_call", f"Module.{name}", "an item outside the tree")
            vt = tx.wrap_source(source)
            items.append(TupleVariable([ConstantVariable(item[0]), vt]) if named else vt)
        return IteratorVariable(items)

    def _set_training(
        self, tx: Translator, name: str, args: Args, kwargs: Kwargs
    ) -> VariableTracker:
        """`model.train(mode)` / `model.eval()`: a write of `training` on every submodule."""
        if not all_constant(args, kwargs) or (name == "eval" and (args or kwargs)):
            raise Unsupported("unsupported_call", f"Module.{name} with these arguments")
        mode = True
        if name == "train":
            values = [a.as_constant() for a in [*args, *kwargs.values()]]
            if len(values) > 1 or set(kwargs) - {"mode"}:
                raise Unsupported("exception", "Module.train(...)", "TypeError")
            mode = values[0] if values else True
            if not isinstance(mode, bool):
                raise Unsupported("exception", "Module.train(...)", "ValueError")
        else:
            mode = False
        src = self._need_source(name)
        self.pin(tx, f"Module.{name}() walks this instance's tree")
        guard_tree_walk(tx, self.obj, src, ())
        for module_source in _tree_paths(self.obj, src, modules_only=True).values():
            module = tx.wrap_source(module_source)
            if not isinstance(module, NNModuleVariable):
                raise Unsupported("unsupported_call", f"Module.{name}", "a submodule not tracked")
            module.setattr(tx, "training", ConstantVariable(mode))
        return self

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        original = jit_original(tx, self)
        if original is not None:
            return original.call(tx, args, kwargs)
        return tx.call_module(self, args, kwargs)


class ModuleSliceVariable(VariableTracker):
    """`seq[1:]` / `layers[:-1]` of an nn.Sequential or nn.ModuleList: eager makes a new
    container of the same class holding the same submodules. Iterated, indexed and measured
    like one; a Sequential slice is called as Sequential.forward does (each child in turn). When
    it escapes the graph it is rebuilt by slicing the real container again."""

    def __init__(self, container: NNModuleVariable, key: slice, children: list[Any]) -> None:
        self.container = container
        self.key = key
        self.children = children

    def __repr__(self) -> str:
        return f"ModuleSlice({type(self.container.obj).__name__}[{self.key}])"

    def python_type(self) -> type:
        return type(self.container.obj)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        return list(self.children)

    def truth(self, tx: Translator) -> bool:
        return True  # a module, whatever its length (nn.Module defines no __len__ truth)

    def call_method(self, tx: Translator, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        if name == "__len__" and not args:
            return ConstantVariable(len(self.children))
        if name == "__getitem__" and len(args) == 1 and args[0].is_constant():
            key = args[0].as_constant()
            if isinstance(key, int):
                return self.children[key]
            if isinstance(key, slice):
                r = range(len(self.container.obj))[self.key][key]
                stop = r.stop if r.stop >= 0 else None  # range(3, -1, -1) is [3::-1]
                whole = slice(r.start, stop, r.step) if r else slice(0, 0)
                return ModuleSliceVariable(self.container, whole, self.children[key])
        raise Unsupported("unsupported_call", f"{type(self.container.obj).__name__} slice.{name}")

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        cls = type(self.container.obj)
        plain = issubclass(cls, torch.nn.Sequential) and cls.forward is torch.nn.Sequential.forward
        if not plain:
            raise Unsupported("unsupported_call", f"calling a slice of a {cls.__name__}")
        if len(args) != 1 or kwargs:
            raise Unsupported("exception", "Sequential slice called", "TypeError: one input")
        value = args[0]
        for child in self.children:
            value = child.call(tx, [value], {})
        return value

    def reconstruct(self, cg: Any) -> None:
        cg.reconstruct(self.container)
        cg.load_const(self.key)
        cg.subscr()


class FreshModuleVariable(NNModuleVariable):
    """A stateless torch.nn module built in the frame with constant arguments
    (`loss_fct = nn.CrossEntropyLoss(ignore_index=-100)`): made for real while tracing, its
    settings are constants of the trace; rebuilt by calling the class again when it escapes."""

    def __init__(self, obj: torch.nn.Module, build: functools.partial) -> None:
        super().__init__(obj, None)
        self.build = build

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        d = self.obj.__dict__
        if name in d and not name.startswith("_"):
            if not _plain_constant(d[name]):
                raise Unsupported("unsupported_attr", f"{type(self.obj).__name__}.{name}")
            return ConstantVariable(d[name])
        return super().getattr(tx, name)

    def reconstruct(self, cg: Any) -> None:
        cg.call_const(self.build, lambda: None, 0)


def _plain_constant(value: Any) -> bool:
    if type(value) in (tuple, list):
        return all(_plain_constant(v) for v in value)
    return type(value) in (bool, int, float, str, type(None))


def fresh_torch_module(cls: type, args: Args, kwargs: Kwargs) -> FreshModuleVariable | None:
    """`cls(*args)` for a torch.nn module class whose instance holds no tensors and no
    submodules (losses, activations, pooling): None where that does not hold."""
    if not (
        issubclass(cls, torch.nn.Module)
        and cls.__module__.startswith("torch.nn.modules.")
        and all_constant(args, kwargs)
    ):
        return None
    build = functools.partial(
        cls, *[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()}
    )
    try:
        # built while tracing to see what it holds: a module with parameters initializes them
        # from the RNG, which the program's own build (at the break) must find untouched
        with torch.random.fork_rng(devices=[]):
            module = build()
    except Exception as exc:  # eager raises the same: at the break, for real
        raise Unsupported("exception", f"creating a {cls.__qualname__}", repr(exc)) from None
    settings = {k: v for k, v in module.__dict__.items() if not k.startswith("_")}
    if (
        any(p is not None for p in module._parameters.values())
        or any(b is not None for b in module._buffers.values())
        or module._modules
        or not all(_plain_constant(v) for v in settings.values())
    ):
        return None
    return FreshModuleVariable(module, build)


class _ModuleMethodVariable(VariableTracker):
    """`model.parameters` / `model.train` and the like, bound, before the call."""

    def __init__(self, module: NNModuleVariable, name: str) -> None:
        self.module = module
        self.name = name
        self.source = AttrSource(module.source, name) if module.source is not None else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    def python_type(self) -> type:
        return types.MethodType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        return self.module.call_method(tx, self.name, args, kwargs)


# Methods of nn.Module that walk the tree of submodules, parameters and buffers.
# they add to a module's `_parameters`, `_buffers` or `_modules`
_REGISTERING_METHODS = frozenset(
    {"register_buffer", "register_parameter", "add_module", "register_module"}
)

_TREE_METHODS = (
    "parameters",
    "named_parameters",
    "buffers",
    "named_buffers",
    "children",
    "named_children",
    "modules",
    "named_modules",
)


def _plain_tree_method(mod: torch.nn.Module, name: str) -> bool:
    """`name` is nn.Module's own method, on a tree whose classes do not override it."""
    for module in mod.modules():
        found = _class_attr(type(module), name)
        if found is None or found[0] is not torch.nn.Module:
            return False
        if (
            name in ("train", "eval")
            and _class_attr(type(module), "train")[0] is not torch.nn.Module
        ):
            return False
    return True


# the tensor dicts each tree method lists, besides the tree of `_modules` it walks
_WALKED_DICTS: dict[str, tuple[str, ...]] = {
    "parameters": ("_parameters",),
    "named_parameters": ("_parameters",),
    "buffers": ("_buffers",),
    "named_buffers": ("_buffers",),
    "children": (),
    "named_children": (),
    "modules": (),
    "named_modules": (),
}


def guard_tree_walk(
    tx: Translator, mod: torch.nn.Module, src: Source, dicts: tuple[str, ...]
) -> None:
    """Guard what a walk of `mod`'s tree found (`parameters()`, `modules()`, `train()`), so that
    a submodule, parameter or buffer added, removed, set to None or tied to another later is a
    recompile, not a stale list: each module's `_modules` and `dicts` keys, each entry (a None,
    a submodule by identity, a tensor's metadata, an entry that is another's object), and that
    the tensors found distinct are still distinct (a later tie would shorten the list). Two
    tensors can become one object unseen by their own guards only where their metadata match,
    so distinctness is checked within such groups (each source is a lookup on every call)."""
    seen: set[int] = set()
    distinct: dict[int, tuple[Any, Source]] = {}
    stack = [(mod, src)]
    while stack:
        module, source = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        for attr in ("_modules", *dicts):
            entries = getattr(module, attr)
            where = AttrSource(source, attr)
            tx.output.add_guard(where, GuardKind.DICT_KEYS, tuple(entries), tx.location_text())
            for key, value in entries.items():
                item = ItemSource(where, key)
                if value is None:
                    tx.output.add_guard(item, GuardKind.CONSTANT_MATCH, None, tx.location_text())
                    continue
                vt = tx.wrap_source(item)
                if attr == "_modules":
                    if isinstance(vt, NNModuleVariable):
                        vt.pin(tx, "a module tree walk reaches it")
                    stack.append((value, item))
                else:
                    strides = value.stride() if value.layout == torch.strided else None
                    meta = (type(value), value.dtype, value.device, value.shape, strides)
                    distinct.setdefault(id(value), ((*meta, value.requires_grad), item))
    groups: dict[Any, list[Source]] = {}
    for meta, item in distinct.values():
        groups.setdefault(meta, []).append(item)
    for sources in groups.values():
        if len(sources) > 1:
            tx.output.add_guard(None, GuardKind.NO_ALIASING, sources, tx.location_text())


def _tree_paths(mod: torch.nn.Module, src: Source, modules_only: bool = False) -> dict[int, Source]:
    """id -> Source of every submodule (and parameter and buffer) under `mod`, first path wins."""
    paths: dict[int, Source] = {}
    stack = [(mod, src)]
    while stack:
        module, source = stack.pop(0)
        if id(module) in paths:
            continue
        paths[id(module)] = source
        if not modules_only:
            for key, value in module._parameters.items():
                if value is not None:
                    paths.setdefault(id(value), param_source(source, key))
            for key, value in module._buffers.items():
                if value is not None:
                    paths.setdefault(id(value), buffer_source(source, key))
        for key, child in module._modules.items():
            if child is not None:
                stack.append((child, submodule_source(source, key)))
    return paths


# class attributes a traced `Cls.name = value` may replace: plain values, not methods or
# descriptors (an instance's lookup of those binds or calls them)
_PLAIN_CLASS_VALUES = (int, float, bool, str, bytes, type(None), tuple, list, dict, set)


class ClassVariable(VariableTracker):
    def __init__(self, cls: type, source: Source | None = None) -> None:
        self.cls = cls
        self.source = source

    def __repr__(self) -> str:
        return f"Class({self.cls.__qualname__})"

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        if isinstance(self.cls, enum.EnumMeta):  # `for c in Color`, `list(Color)`: its members
            return [ConstantVariable(member) for member in self.cls]
        return super().unpack(tx)

    def reconstruct(self, cg: Any) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
        else:
            cg.load_const(self.cls)

    def python_type(self) -> type:
        return type(self.cls)

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.cls

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        """`Cls.count += 1` on a user class from outside the frame: replayed after the graph
        (`setattr(Cls, ...)`); reads in the trace, through the class or its instances, see it."""
        if (
            self.source is None
            or type(self.cls) is not type
            or self.cls.__flags__ & _IMMUTABLETYPE
            or _trusted_class(self.cls)
            or name.startswith("__")
        ):
            return super().setattr(tx, name, value)
        found = _class_attr(self.cls, name)
        if found is not None and not isinstance(found[1], _PLAIN_CLASS_VALUES):
            raise Unsupported(
                "side_effect", f"setting {self.cls.__name__}.{name}", "replacing a class's method"
            )
        tx.output.side_effects.store_attr(self, name, value)

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        pending = pending_class_attr(tx, self.cls, name)
        if pending is not None:
            return pending
        meta = type(self.cls)
        if meta is not type:
            # a property of the metaclass (`GroupMember.WORLD` in torch.distributed) comes
            # before the class's own attributes, as in Python's lookup
            on_meta = _class_attr(meta, name)
            if on_meta is not None and isinstance(on_meta[1], property):
                getter = on_meta[1].fget
                if getter is None:
                    raise Unsupported("exception", f"{self.cls.__name__}.{name}", "AttributeError")
                return tx.wrap_value(getter, None).call(tx, [self], {})
        found = _class_attr(self.cls, name)
        if found is None:
            if name in ("__name__", "__qualname__", "__module__"):
                return ConstantVariable(getattr(self.cls, name))
            if name in ("__mro__", "__bases__"):  # fixed for the class: tuples of classes
                from framejit.frontend.variables.containers import TupleVariable

                return TupleVariable(
                    [ClassVariable(c) for c in getattr(self.cls, name)]  # type: ignore[misc]
                )
            raise Unsupported("exception", f"{self.cls.__name__}.{name}", "AttributeError")
        attr = found[1]
        if (
            isinstance(attr, (staticmethod, classmethod))
            and self.source is not None
            and not _trusted_class(found[0])
        ):
            # `Cls.method = staticmethod(...)` between calls: read (and guarded) by its source
            return tx.wrap_source(AttrSource(self.source, name))
        if isinstance(attr, staticmethod):
            return tx.wrap_value(attr.__func__, None)
        if isinstance(attr, classmethod):
            return UserMethodVariable(tx.wrap_value(attr.__func__, None), self)
        if self.source is not None and not self.cls.__flags__ & _IMMUTABLETYPE:
            return tx.wrap_source(AttrSource(self.source, name))
        # a builtin type's attribute is fixed (and `dict.fromkeys` is a new bound object at
        # every lookup: an identity guard on it would never hold)
        try:
            return tx.wrap_value(getattr(self.cls, name), None)
        except Unsupported as exc:
            if exc.code != "unsupported_object" or self.cls.__flags__ & _IMMUTABLETYPE:
                raise
        # a mutable class attribute (a table of validators, `__annotations__`) of a class
        # reached without a source: read through the class as a constant, and guarded
        owner = found[0]
        return tx.wrap_source(AttrSource(ConstSource(owner, owner.__qualname__), name))

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        from framejit.frontend.variables.builtins import call_builtin_class
        from framejit.frontend.variables.containers import (
            DataclassVariable,
            DequeVariable,
            DictVariable,
            NamedTupleVariable,
        )
        from framejit.frontend.variables.functions import PartialVariable

        cls = self.cls
        if cls in GETTERS and not kwargs and args and all(a.is_constant() for a in args):
            try:
                getter = cls(*[a.as_constant() for a in args])
            except TypeError as exc:
                raise Unsupported.raised(f"{cls.__name__}(...)", exc) from None
            return GetterVariable(getter)
        if cls is types.MethodType and len(args) == 2 and not kwargs and _is_callable(args[0]):
            # `MethodType(fn, obj)` (contextlib's ExitStack binds a context's __exit__ so)
            return UserMethodVariable(args[0], args[1])
        if cls is operator.methodcaller:
            from framejit.frontend.variables.stdlib import make_methodcaller

            return make_methodcaller(tx, args, kwargs)
        if cls is collections.defaultdict and (not args or args[0].python_type() is not dict):
            contents = call_builtin_class(tx, dict, args[1:], kwargs)
            factory = args[0] if args else ConstantVariable(None)
            return DictVariable(contents.items, cls=cls, default_factory=factory)
        handled = call_builtin_class(tx, cls, args, kwargs)
        if handled is not None:
            return handled
        if issubclass(cls, Exception) and not kwargs and _plain_exception_class(cls):
            # `KeyError(key)`, or a library's `class ConfigError(ValueError): pass`, to be raised
            return ExceptionVariable(cls, list(args))
        if (
            cls in (torch.finfo, torch.iinfo, torch.device)
            and (args or kwargs)
            and all_constant(args, kwargs)
        ):
            # `torch.finfo(x.dtype).min`: a pure function of the (guarded) dtype; a device made
            # from constants (`torch.device("cpu")`, `torch.device("cuda", 0)`) is a constant
            try:
                return ConstantVariable(constant_fold(cls, args, kwargs))
            except (TypeError, ValueError, RuntimeError) as exc:
                raise Unsupported.raised(f"torch.{cls.__name__}(...)", exc) from None
        if cls is torch.autograd.profiler.record_function:
            from framejit.frontend import optimizers

            return optimizers.record_function(tx, args, kwargs)
        if cls in GRAD_MODE_CLASSES:
            mode = GRAD_MODE_CLASSES[cls]
            if mode is None:
                if len(args) != 1 or not args[0].is_constant():
                    raise Unsupported("unsupported_call", "torch.set_grad_enabled(non-constant)")
                mode = bool(args[0].as_constant())
            return GradModeVariable.create(tx, cls, mode)
        if (
            isinstance(cls, enum.EnumMeta)
            and len(args) == 1
            and not kwargs
            and args[0].is_constant()
        ):
            try:
                return ConstantVariable(cls(args[0].as_constant()))
            except ValueError as exc:
                raise Unsupported.raised(f"{cls.__name__}(...)", exc) from None
        if cls is torch.inference_mode:
            mode = args[0] if args else kwargs.get("mode", ConstantVariable(True))
            if len(args) > 1 or set(kwargs) - {"mode"} or not mode.is_constant():
                raise Unsupported("unsupported_call", "torch.inference_mode(non-constant mode)")
            return InferenceModeVariable(bool(mode.as_constant()))
        if cls in AUTOCAST_CLASSES:
            autocast_args = autocast_arguments(args, kwargs)
            if autocast_args is None:
                raise Unsupported("unsupported_call", "torch.autocast with non-constant arguments")
            return AutocastVariable(autocast_args)
        if cls is functools.partial and args:
            inner = args[0]
            if type(inner) is PartialVariable and inner.python_type() is functools.partial:
                # a partial of a partial is flattened, as functools.partial does
                return PartialVariable(
                    inner.fn, [*inner.args, *args[1:]], {**inner.kwargs, **kwargs}
                )
            return PartialVariable(inner, args[1:], kwargs)
        if cls is collections.OrderedDict:
            return DictVariable(call_builtin_class(tx, dict, args, kwargs).items, cls=cls)
        if cls is collections.Counter and all_constant(args, kwargs):
            counts = constant_fold(cls, args, kwargs)  # `Counter("abca")`, `Counter(words)`
            return DictVariable({k: ConstantVariable(v) for k, v in counts.items()}, cls=cls)
        if cls is collections.deque and len(args) <= 2 and set(kwargs) <= {"iterable", "maxlen"}:
            bound = dict(zip(("iterable", "maxlen"), args)) | kwargs
            maxlen = bound.get("maxlen", ConstantVariable(None))
            if maxlen.is_constant():
                iterable = bound.get("iterable")
                items = iterable.unpack(tx) if iterable is not None else []
                return DequeVariable(items, maxlen.as_constant())
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            bound = _bind_signature(cls, args, kwargs, tx)
            return NamedTupleVariable(cls, [bound[f] for f in cls._fields])
        if dataclasses.is_dataclass(cls) and "__init__" in cls.__dict__ and _plain_dataclass(cls):
            bound = _bind_signature(cls, args, kwargs, tx, factories=True)
            return DataclassVariable(cls, dict(bound))
        if _plain_class(cls):
            if inspect.isabstract(cls):
                try:
                    object.__new__(cls)  # raises eager's TypeError, and makes nothing else
                except TypeError as exc:
                    raise Unsupported.raised(f"creating a {cls.__qualname__}", exc) from None
            obj = NewObjectVariable(cls)
            init = _class_attr(cls, "__init__")
            if init is not None and isinstance(init[1], types.FunctionType):
                result = UserMethodVariable(UserFunctionVariable(init[1]), obj).call(
                    tx, args, kwargs
                )
                if not (result.is_constant() and result.as_constant() is None):
                    error = TypeError(
                        f"__init__() should return None, not '{result.python_type().__name__}'"
                    )
                    raise Unsupported.raised(f"creating a {cls.__qualname__}", error)
            elif init is not None and init[0] in _ITEM_BASES:
                _BoundBaseMethod(obj, "__init__").call(tx, args, kwargs)
            elif args or kwargs:
                raise Unsupported("exception", f"{cls.__qualname__}() takes no arguments")
            return obj
        if cls in _MAPPING_VIEWS and len(args) == 1 and not kwargs:
            # `Mapping.keys(self)` of a Mapping written in Python: `KeysView(self)`
            return MappingViewVariable(cls, args[0])
        fresh = fresh_torch_module(cls, args, kwargs)
        if fresh is not None:
            return fresh
        raise Unsupported("unsupported_call", f"creating a {cls.__qualname__} object")


# what a class statement puts in a class's __dict__ without the user writing it
_CLASS_BOOKKEEPING = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__firstlineno__",
        "__static_attributes__",
        "__annotations__",
    }
)


def _plain_exception_class(cls: type) -> bool:
    """A builtin exception class, or one whose Python subclasses add only constants (no
    `__init__`, `__str__` or other methods, no properties): making one, raising it and reading
    its `args` or class constants is then all Python's own."""
    for base in cls.__mro__:
        if base.__module__ == "builtins":
            continue
        for name, value in vars(base).items():
            if name in _CLASS_BOOKKEEPING:
                continue
            if type(value) not in EXCEPTION_CONSTANT_TYPES:
                return False
    return True


GETTERS = (operator.itemgetter, operator.attrgetter)


class GetterVariable(VariableTracker):
    """`operator.itemgetter(...)` / `operator.attrgetter(...)` with constant keys: calling it
    reads the items or attributes the way the traced code would."""

    def __init__(self, getter: Any, source: Source | None = None) -> None:
        self.getter = getter
        self.source = source

    def __repr__(self) -> str:
        return f"Getter({self.getter!r})"

    def python_type(self) -> type:
        return type(self.getter)

    def reconstruct(self, cg: Any) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
        else:
            cg.load_const(self.getter)  # immutable

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        from framejit.frontend.variables.containers import TupleVariable

        if len(args) != 1 or kwargs:
            raise Unsupported("exception", f"{type(self.getter).__name__}(...)", "one argument")
        cls, keys = self.getter.__reduce__()
        obj = args[0]
        values: list[VariableTracker] = []
        for key in keys:
            if cls is operator.itemgetter:
                values.append(tx.getitem(obj, ConstantVariable(key)))
                continue
            value = obj
            for part in key.split("."):
                value = value.getattr(tx, part)
            values.append(value)
        return values[0] if len(values) == 1 else TupleVariable(values)


class LoggerVariable(UserObjectVariable):
    """A logger `logging.getLogger(name)` returned in the frame (looked up while tracing:
    loggers are process-wide, one per name); its logging calls are replayed."""

    def __init__(self, logger: logging.Logger, name: str | None) -> None:
        super().__init__(logger, None)
        self.name = name

    def reconstruct(self, cg: Any) -> None:
        cg.call_const(logging.getLogger, lambda: cg.load_const(self.name), 1)


_DICT_BASES = (dict, collections.OrderedDict)
# builtin containers a user class made in the frame may extend: their items are tracked
_ITEM_BASES = (*_DICT_BASES, list)


def _items_base(cls: type) -> type | None:
    """The builtin dict or list type a user class extends (its items live there), or None."""
    for klass in cls.__mro__:
        if klass in _ITEM_BASES:
            return klass
    return None


def _python_setattr(cls: type) -> types.FunctionType | None:
    """The class's own `__setattr__` when it is written in Python."""
    found = _class_attr(cls, "__setattr__")
    if found is not None and isinstance(found[1], types.FunctionType):
        return found[1]
    return None


def _is_callable(vt: VariableTracker) -> bool:
    try:
        t = vt.python_type()
    except Unsupported:
        return False
    return any("__call__" in k.__dict__ for k in t.__mro__)


# classes of `collections` written in Python whose methods the translator inlines like a user's
_PYTHON_COLLECTIONS = (collections.ChainMap,)


def _plain_class(cls: type) -> bool:
    """A Python class whose instances the translator can build and track: ordinary objects with
    a __dict__, optionally extending dict, OrderedDict or list (their items are tracked too), with a
    `__setattr__` written in Python or none (no custom __new__ or __getattribute__, no slots, no
    metaclass that overrides `__call__`, no `__del__`, not a torch subclass)."""
    meta = type(cls)
    if meta is not type and (not issubclass(meta, type) or meta.__call__ is not type.__call__):
        return False
    base = _items_base(cls)
    if cls.__new__ is not (base.__new__ if base is not None else object.__new__):
        return False
    if issubclass(cls, torch.nn.Module):
        return False
    if getattr(cls, "__del__", None) is not None:
        return False  # a traced object is never built: its __del__ would never run
    if cls.__setattr__ is not object.__setattr__ and _python_setattr(cls) is None:
        return False
    if _has_custom_getattribute(cls) and not _python_getattribute(cls):
        return False
    builtins_ok = (object, *_ITEM_BASES)
    return all(
        not k.__dict__.get("__slots__", ())  # empty slots (collections.abc bases) are fine
        and (k.__module__ != "builtins" or k in builtins_ok)
        and (k.__module__ != "collections" or k in (*builtins_ok, *_PYTHON_COLLECTIONS))
        for k in cls.__mro__
    )


class NewObjectVariable(VariableTracker):
    """An instance of a plain user class created inside the traced frame (and, for a subclass
    of dict, OrderedDict or list, its items: `base_items`, a DictVariable or ListVariable that
    the base class's own methods act on, past the class's overrides)."""

    def __init__(self, cls: type) -> None:
        from framejit.frontend.variables.containers import DictVariable, ListVariable

        self.cls = cls
        self.attrs: dict[str, VariableTracker] = {}
        base = _items_base(cls)
        self.base_items: DictVariable | ListVariable | None = None
        if base is list:
            self.base_items = ListVariable([])
        elif base is not None:
            self.base_items = DictVariable({}, cls=base)

    def __repr__(self) -> str:
        return f"New({self.cls.__qualname__})"

    def python_type(self) -> type:
        return self.cls

    def has_tensors(self) -> bool:
        if self.base_items is not None and self.base_items.has_tensors():
            return True
        return any(v.has_tensors() for v in self.attrs.values())

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if _has_custom_getattribute(self.cls):
            # the class's own `__getattribute__`, inlined (`_plain_class` checked that it is
            # written in Python); its `super().__getattribute__(key)` reaches generic_getattr
            hook = _class_attr(self.cls, "__getattribute__")[1]
            return UserMethodVariable(UserFunctionVariable(hook), self).call(
                tx, [ConstantVariable(name)], {}
            )
        fallback = _class_attr(self.cls, "__getattr__")
        if fallback is None or not isinstance(fallback[1], types.FunctionType):
            return self.generic_getattr(tx, name)
        try:
            return self.generic_getattr(tx, name)
        except Unsupported as exc:
            if exc.python_exception() is not AttributeError:
                raise
        # not found the usual way: the class's `__getattr__`, inlined, as Python calls it
        return UserMethodVariable(UserFunctionVariable(fallback[1]), self).call(
            tx, [ConstantVariable(name)], {}
        )

    def generic_getattr(self, tx: Translator, name: str) -> VariableTracker:
        """`object.__getattribute__(obj, name)`: properties, the instance dict, then the
        class."""
        found = _class_attr(self.cls, name)
        if found is not None and isinstance(found[1], property):
            if found[1].fget is None:
                raise Unsupported("unsupported_attr", f"{self.cls.__name__}.{name}")
            return tx.call_function_value(found[1].fget, [self], {})
        if name in self.attrs:
            return self.attrs[name]
        pending = pending_class_attr(tx, self.cls, name)
        if pending is not None:  # `Cls.count += 1` earlier in the trace
            return pending
        if name == "__dict__":
            return self._attrs_view()
        if name == "__class__":
            return ClassVariable(self.cls)
        if found is None:
            raise Unsupported("exception", f"{self.cls.__name__}.{name}", "AttributeError")
        owner, attr = found
        if owner in _ITEM_BASES and self.base_items is not None:
            return self.base_items.getattr(tx, name)  # a dict or list method on the items
        if isinstance(attr, staticmethod):
            return tx.wrap_value(attr.__func__, None)
        if isinstance(attr, classmethod):
            return UserMethodVariable(tx.wrap_value(attr.__func__, None), ClassVariable(self.cls))
        if isinstance(attr, types.FunctionType):
            return UserMethodVariable(UserFunctionVariable(attr), self)
        owner_source = ConstSource(owner, owner.__qualname__)
        getter = _python_method_of(type(attr), "__get__")
        if isinstance(getter, types.FunctionType) and not hasattr(type(attr), "__set__"):
            # a descriptor written in Python (torch.distributions' lazy_property): its
            # __get__(descriptor, obj, cls), inlined, on the descriptor object itself
            descriptor = tx.wrap_source(ConstSource(attr, f"{owner.__qualname__}.{name}"))
            return UserFunctionVariable(getter).call(
                tx, [descriptor, self, ClassVariable(self.cls)], {}
            )
        if not _trusted_class(owner):
            # a user class's attribute can change between calls (`Cls.scale = 3`): read
            # through the class and guarded, as `Cls.scale` itself is
            return tx.wrap_source(AttrSource(owner_source, name))
        try:
            return tx.wrap_value(attr, None)
        except Unsupported:  # a class attribute such as a dict of constraints: read and guarded
            return tx.wrap_source(AttrSource(owner_source, name))

    def mapping_items(self) -> dict[Any, VariableTracker] | None:
        """The items `dict(obj)` and `{**obj}` copy: for a dict subclass that keeps dict's own
        iteration, its raw items (CPython copies those without calling the class's
        `__getitem__`); None otherwise."""
        if self.base_items is None or not isinstance(self.base_items.items, dict):
            return None
        found = _class_attr(self.cls, "__iter__")
        if found is None or found[0] not in _DICT_BASES:
            return None
        return self.base_items.items

    def _attrs_view(self) -> VariableTracker:
        """`obj.__dict__`: a dict VT that shares (not copies) the tracked attributes."""
        from framejit.frontend.variables.containers import DictVariable

        view = DictVariable({})
        view.items = self.attrs
        view._born = self._born  # type: ignore[attr-defined]  # changes to it change this object
        return view

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        hook = _python_setattr(self.cls)
        if hook is not None:  # the class's own __setattr__, inlined like any method
            UserMethodVariable(UserFunctionVariable(hook), self).call(
                tx, [ConstantVariable(name), value], {}
            )
            return
        self.generic_setattr(tx, name, value)

    def generic_setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        """`object.__setattr__(obj, name, value)`."""
        found = _class_attr(self.cls, name)
        if found is not None and hasattr(type(found[1]), "__set__"):
            raise Unsupported(
                "unsupported_attr", f"setting {self.cls.__name__}.{name}", "a data descriptor"
            )
        if not self.cls.__dictoffset__:  # `__slots__ = ()` all the way up: no instance dict
            raise Unsupported("exception", f"setting {self.cls.__name__}.{name}", "AttributeError")
        note_mutation(self)
        self.attrs[name] = value

    def delattr(self, tx: Translator, name: str) -> None:
        """`del obj.name` (contextlib's `__enter__` does it): plain instance attributes only."""
        found = _class_attr(self.cls, name)
        if _class_attr(self.cls, "__delattr__")[0] is not object or (
            found is not None and hasattr(type(found[1]), "__delete__")
        ):
            raise Unsupported("side_effect", f"deleting {self.cls.__name__}.{name}")
        if name not in self.attrs:
            raise Unsupported("exception", f"deleting {self.cls.__name__}.{name}", "AttributeError")
        note_mutation(self)
        del self.attrs[name]

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        call = _class_attr(self.cls, "__call__")
        if call is None or not isinstance(call[1], types.FunctionType):
            raise Unsupported("unsupported_call", f"calling a {self.cls.__name__}")
        return UserMethodVariable(UserFunctionVariable(call[1]), self).call(tx, args, kwargs)

    def call_method(self, tx: Translator, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        if _has_custom_getattribute(self.cls) and not name.startswith("__"):
            return self.getattr(tx, name).call(tx, args, kwargs)  # a lookup the class can change
        found = _class_attr(self.cls, name)
        if found is not None and isinstance(found[1], types.FunctionType):
            return UserMethodVariable(UserFunctionVariable(found[1]), self).call(tx, args, kwargs)
        if self.base_items is not None and (found is None or found[0] in (object, *_ITEM_BASES)):
            if name in (_LIST_WRITES if isinstance(self.base_items.items, list) else _DICT_WRITES):
                note_mutation(self)
            return self.base_items.call_method(tx, name, args, kwargs)
        return self.getattr(tx, name).call(tx, args, kwargs)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        found = _class_attr(self.cls, "__iter__")
        if self.base_items is not None and found is not None and found[0] in _ITEM_BASES:
            return self.base_items.unpack(tx)
        if found is not None and found[1] is collections.abc.Sequence.__iter__:
            # Sequence's own __iter__ reads self[0], self[1], ... until IndexError, which a
            # Sequence raises at len(self)
            n = self.call_method(tx, "__len__", [], {})
            if not n.is_constant():
                raise Unsupported("unsupported_object", f"iterating over {self.cls.__name__}")
            return [
                self.call_method(tx, "__getitem__", [ConstantVariable(i)], {})
                for i in range(n.as_constant())
            ]
        it = self.python_iter(tx)
        if it is not None:
            return it.unpack(tx)
        return super().unpack(tx)

    def python_iter(self, tx: Translator) -> VariableTracker | None:
        """`iter(obj)` for a class whose `__iter__` is written in Python (often a generator):
        its result, not yet consumed; for one that keeps its dict or list base's `__iter__`,
        that base's live iterator over the items; None for other classes."""
        found = _class_attr(self.cls, "__iter__")
        if self.base_items is not None and found is not None and found[0] in _ITEM_BASES:
            from framejit.frontend.variables.containers import container_iterator

            return container_iterator(tx, self.base_items)
        return python_iter(tx, self, self.cls)

    def truth(self, tx: Translator) -> bool:
        for name in ("__bool__", "__len__"):
            found = _class_attr(self.cls, name)
            if found is None:
                continue
            if self.base_items is not None and found[0] in _ITEM_BASES:
                return self.base_items.truth(tx)
            if isinstance(found[1], types.FunctionType):
                result = UserMethodVariable(UserFunctionVariable(found[1]), self).call(tx, [], {})
                return result.truth(tx)
            break
        else:
            return True
        return super().truth(tx)

    def reconstruct(self, cg: Any) -> None:
        from framejit.frontend.variables.containers import DictVariable, ListVariable

        # made first, then filled: an attribute may lead back to the object itself (two objects
        # that refer to each other, a transform and its inverse)
        cg.call_const(cls_new, lambda: cg.load_const(self.cls), 1)
        name = cg.remember(self)

        def emit() -> None:
            cg.load_fast(name)
            DictVariable(self.attrs).reconstruct(cg)
            items = self.base_items.items if self.base_items is not None else None
            if isinstance(items, dict):
                DictVariable(items).reconstruct(cg)
            elif items is not None:
                ListVariable(items).reconstruct(cg)

        cg.call_const(fill_object, emit, 2 if self.base_items is None else 3)


def base_operand(vt: VariableTracker, names: tuple[str, ...]) -> VariableTracker:
    """For a comparison or `in`: the items of a dict or list subclass made in the frame whose
    class leaves the methods `names` (`__eq__`, `__lt__` and its mirror `__gt__`,
    `__contains__`) to its builtin base, which reads the items alone; `vt` itself otherwise."""
    if not isinstance(vt, NewObjectVariable) or vt.base_items is None:
        return vt
    for name in names:
        found = _class_attr(vt.cls, name)
        if found is None or found[0] not in _ITEM_BASES:
            return vt
    return vt.base_items


def unbound_base_call(tx: Translator, fn: Any, args: Args, kwargs: Kwargs) -> Any:
    """`list.__len__(self)`, `dict.__setitem__(self, key, value)`: the method of the builtin
    base an object made in the frame extends, called through that base class: what
    `super().name(...)` does. None for any other call."""
    owner = getattr(fn, "__objclass__", None)
    if owner not in _ITEM_BASES or not args or not isinstance(args[0], NewObjectVariable):
        return None
    obj = args[0]
    if obj.base_items is None or _items_base(obj.cls) is not owner:
        return None
    return _BoundBaseMethod(obj, fn.__name__).call(tx, args[1:], kwargs)


def python_iter(tx: Translator, obj: VariableTracker, cls: type) -> VariableTracker | None:
    """`iter(obj)` where `cls`, obj's class, iterates in Python: its `__iter__`'s result, not
    yet consumed (a generator, or an iterator object whose `__next__` is written in Python,
    such as the object itself); or, with no `__iter__`, the old sequence protocol of a Python
    `__getitem__` (obj[0], obj[1], ... up to IndexError). None for other classes."""
    from framejit.frontend.variables.generators import GetItemIterator, user_iterator

    found = _class_attr(cls, "__iter__")
    if found is None:
        return GetItemIterator(obj) if python_function(cls, "__getitem__") else None
    if not isinstance(found[1], types.FunctionType):
        return None
    if found[1] is collections.abc.Sequence.__iter__:  # unpack() reads it item by item
        return None
    it = obj.call_method(tx, "__iter__", [], {})
    if isinstance(it, (NewObjectVariable, UserObjectVariable)):
        user = user_iterator(it)
        if user is None:  # an iterator object whose __next__ is not Python's own code
            raise Unsupported("unsupported_object", f"iterating over {cls.__name__}")
        return user
    return it


def getitem_iter(obj: Any, start: int) -> Any:
    """The rest of `iter(obj)` for an object iterated by its `__getitem__`, from `start` (what
    a graph break hands the code after it)."""
    i = start
    while True:
        try:
            yield obj[i]
        except (IndexError, StopIteration):
            return
        i += 1


def cls_new(cls: type) -> Any:
    return cls.__new__(cls)


def fill_object(
    obj: Any, attrs: dict[str, Any], items: dict[Any, Any] | list[Any] | None = None
) -> Any:
    """Give `obj` (made by `cls_new`) the state the traced code gave it; returns it. Items go
    in through the builtin base's own methods, not the class's overrides."""
    if isinstance(items, list):
        list.extend(obj, items)
    elif items is not None:
        base = _items_base(type(obj))
        for key, value in items.items():
            base.__setitem__(obj, key, value)  # type: ignore[union-attr]
    if attrs or hasattr(obj, "__dict__"):  # `object()` (a sentinel) has no __dict__
        obj.__dict__.update(attrs)
    return obj


def _plain_dataclass(cls: type) -> bool:
    """Constructing it only stores its fields (no __post_init__ logic to trace)."""
    return not hasattr(cls, "__post_init__")


def _bind_signature(
    cls: type, args: Args, kwargs: Kwargs, tx: Translator, factories: bool = False
) -> dict[str, Any]:
    """The constructor's parameters bound to `args` and `kwargs`, defaults filled in. With
    `factories` (a dataclass), a field's `default_factory` is called, in the trace, as the
    generated `__init__` calls it (`field(default_factory=list)`: a new list per object)."""
    try:
        sig = inspect.signature(cls)
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise Unsupported.raised(f"{cls.__name__}(...)", exc) from None
    made = (
        {f.name: f.default_factory for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        if factories
        else {}
    )
    out: dict[str, Any] = {}
    for name, param in sig.parameters.items():
        if name in bound.arguments:
            out[name] = bound.arguments[name]
        elif made.get(name, dataclasses.MISSING) is not dataclasses.MISSING:
            out[name] = tx.call_function_value(made[name], [], {})
        elif param.default is not inspect.Parameter.empty:
            out[name] = tx.wrap_value(param.default, None)
    return out


TRUSTED_MODULE_ROOTS = frozenset(
    {
        "torch",
        "math",
        "operator",
        "functools",
        "itertools",
        "collections",
        "typing",
        "dataclasses",
        "enum",
        "numbers",
        "builtins",
        "cmath",
    }
)


_MAPPING_VIEWS = (collections.abc.KeysView, collections.abc.ValuesView, collections.abc.ItemsView)


class MappingViewVariable(VariableTracker):
    """`KeysView(mapping)` (or values/items) of a mapping whose class is written in Python:
    what `Mapping.keys()` returns. Iterating it walks the mapping's own iteration, as the
    view's `__iter__` does; `len` and `in` ask the mapping."""

    def __init__(self, cls: type, mapping: VariableTracker) -> None:
        self.cls = cls
        self.mapping = mapping

    def __repr__(self) -> str:
        return f"{self.cls.__name__}({self.mapping!r})"

    def python_type(self) -> type:
        return self.cls

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        from framejit.frontend.variables.containers import TupleVariable

        keys = self.mapping.unpack(tx)
        if self.cls is collections.abc.KeysView:
            return keys
        values = [tx.getitem(self.mapping, k) for k in keys]
        if self.cls is collections.abc.ValuesView:
            return values
        return [TupleVariable([k, v]) for k, v in zip(keys, values)]

    def call_method(self, tx: Translator, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        if name == "__len__" and not args and not kwargs:
            return self.mapping.call_method(tx, "__len__", [], {})
        if name == "__contains__" and len(args) == 1 and self.cls is collections.abc.KeysView:
            return self.mapping.call_method(tx, "__contains__", args, {})
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg: Any) -> None:
        cg.call_const(self.cls, lambda: cg.reconstruct(self.mapping), 1)


def pending_class_attr(tx: Translator, cls: type, name: str) -> VariableTracker | None:
    """What the trace has written to `name` on `cls` or the class of the MRO it resolves to
    (`Cls.count += 1`), which the real class gets only when the writes are replayed."""
    for klass in cls.__mro__:
        written = tx.output.side_effects.class_attr(klass, name)
        if written is not None:
            return written
        if name in vars(klass):
            return None
    return None


def _trusted_class(cls: type) -> bool:
    return str(getattr(cls, "__module__", "")).split(".")[0] in TRUSTED_MODULE_ROOTS


def is_trusted_module(mod: types.ModuleType) -> bool:
    """Library modules whose attributes framejit treats as fixed (no guards)."""
    return mod is torch._C._VariableFunctions or trusted_module_name(mod.__name__)


def trusted_module_name(name: str) -> bool:
    """A module name of torch, a trusted library or the standard library."""
    root = name.split(".")[0]
    return root in TRUSTED_MODULE_ROOTS or root in sys.stdlib_module_names


def _patchable_torch_function(mod: types.ModuleType, value: Any) -> bool:
    """A function of torch's namespace (`torch.nn.functional.gelu`), as libraries patch them."""
    name = getattr(mod, "__name__", "")
    return (
        (name == "torch" or name.startswith("torch."))
        and callable(value)
        and not isinstance(value, (type, types.ModuleType))
    )


class PythonModuleVariable(VariableTracker):
    def __init__(self, mod: types.ModuleType, source: Source | None = None) -> None:
        self.mod = mod
        self.source = source

    def __repr__(self) -> str:
        return f"PyModule({self.name})"

    @property
    def name(self) -> str:
        return getattr(self.mod, "__name__", "torch._C._VariableFunctions")

    def reconstruct(self, cg: Any) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
        else:
            cg.load_const(self.mod)

    def python_type(self) -> type:
        return types.ModuleType

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.mod

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        switch = read_switch(tx, self.mod, name)
        if switch is not None:
            return switch
        try:
            value = getattr(self.mod, name)
        except AttributeError:
            raise Unsupported("exception", f"{self.name}.{name}", "AttributeError") from None
        if self.source is not None and isinstance(value, types.ModuleType):
            # a submodule (`torch.nn.functional`) keeps a source, so the functions read from
            # it can be guarded; the module itself is fixed
            return PythonModuleVariable(value, AttrSource(self.source, name))
        if self.source is not None and _patchable_torch_function(self.mod, value):
            # `F.scaled_dot_product_attention = my_attention` between calls is seen: a
            # function of torch's namespace read through a source is guarded by identity
            return tx.wrap_source(AttrSource(self.source, name))
        if self.source is None and module_state(value):
            # an object a library keeps in its module (`constraints.real`): read through a
            # source, so the compiled code can load it again
            return tx.wrap_source(AttrSource(ConstSource(self.mod, f"module {self.name}"), name))
        if is_trusted_module(self.mod) or self.source is None:
            try:
                return tx.wrap_value(value, None)
            except Unsupported as exc:
                if exc.code != "unsupported_object" or self.source is None:
                    raise
                # a library's mutable value (`random.seed`, a method of the module's hidden
                # instance; torch's table of defaults): read through its source, and guarded
        return tx.wrap_source(AttrSource(self.source, name))


def _switch_attribute(obj: Any, name: str) -> bool:
    """An attribute of torch's switch namespaces (`torch.backends.cudnn.benchmark`,
    `torch.backends.mkldnn.enabled`, `torch.backends.cuda.matmul.allow_tf32`): a getter of process
    state behind a data descriptor of the module's class, or behind the `__getattr__` of an
    object that is not a module, which a setter changes at run time. Such a read is pinned by a
    STATE_READ guard, never folded."""
    cls = type(obj)
    if name.startswith("__") or not str(cls.__module__).startswith("torch.backends"):
        return False
    found = _class_attr(cls, name)
    if found is not None:
        attr = found[1]
        return hasattr(type(attr), "__set__") and not isinstance(attr, types.MemberDescriptorType)
    return (
        not isinstance(obj, types.ModuleType)
        and name not in getattr(obj, "__dict__", {})
        and hasattr(cls, "__getattr__")
    )


def read_switch(tx: Translator, obj: Any, name: str) -> VariableTracker | None:
    """The value of a `_switch_attribute` now, pinned by a guard that reads it again; None
    for any other attribute, and for a switch that is not a scalar (read as any other)."""
    if not _switch_attribute(obj, name):
        return None
    try:
        value = getattr(obj, name)
    except AttributeError:
        raise Unsupported("exception", f"{type(obj).__name__}.{name}", "AttributeError") from None
    if type(value) not in (bool, int, float, str, type(None)):
        return None
    read = (getattr, (obj, name), (), value)
    tx.output.add_guard(None, GuardKind.STATE_READ, read, tx.location_text())
    return ConstantVariable(value)


def module_state(value: Any) -> bool:
    """An instance of a Python class that a library keeps as module state (`constraints.real`,
    torch.distributed's `_world`): its attributes may change at run time, and the compiled
    code must be able to load it again, so it is read through a Source."""
    return (
        hasattr(value, "__dict__")
        and not callable(value)
        and not isinstance(value, (types.ModuleType, type))
    )


class SuperVariable(VariableTracker):
    """`super()` / `super(cls, obj)`: attribute lookups start after `cls` in obj's MRO."""

    def __init__(self, cls: type, obj: VariableTracker) -> None:
        self.cls = cls
        self.obj = obj

    def __repr__(self) -> str:
        return f"Super({self.cls.__qualname__}, {self.obj!r})"

    def python_type(self) -> type:
        return super

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        owner = self.obj.python_type()
        if isinstance(self.obj, ClassVariable):
            owner = self.obj.cls
        mro = owner.__mro__
        start = mro.index(self.cls) + 1 if self.cls in mro else len(mro)
        for klass in mro[start:]:
            if name not in klass.__dict__:
                continue
            attr = klass.__dict__[name]
            if attr is object.__getattribute__ and isinstance(
                self.obj, (UserObjectVariable, NewObjectVariable)
            ):
                return GenericGetattrVariable(self.obj)
            if isinstance(self.obj, NewObjectVariable):
                if attr is object.__setattr__:
                    return _BoundBaseMethod(self.obj, "__setattr__")
                if klass in _ITEM_BASES and self.obj.base_items is not None:
                    return _BoundBaseMethod(self.obj, name)
            if isinstance(attr, property) and attr.fget is not None:
                return tx.call_function_value(attr.fget, [self.obj], {})
            if isinstance(attr, staticmethod):
                return tx.wrap_value(attr.__func__, None)
            if isinstance(attr, classmethod):
                cls_vt = self.obj if isinstance(self.obj, ClassVariable) else ClassVariable(owner)
                return UserMethodVariable(tx.wrap_value(attr.__func__, None), cls_vt)
            if isinstance(attr, types.FunctionType):
                return UserMethodVariable(UserFunctionVariable(attr), self.obj)
            if attr is object.__init__:
                return _NoArgsNoop("object.__init__")
            if (
                klass in _DICT_BASES
                and name in _DICT_READS
                and isinstance(self.obj, UserObjectVariable)
            ):
                return _DictReadMethod(self.obj, name)
            if isinstance(attr, _C_METHOD_TYPES):
                # a builtin base's method (`super().get(key)` of a dict subclass): unbound here,
                # and what it reads is not tracked on an object from outside the frame
                raise Unsupported(
                    "unsupported_call",
                    f"super().{name} of {klass.__name__} on {self.obj.type_name()}",
                )
            return tx.wrap_value(attr, None)
        raise Unsupported("exception", f"super().{name}", "AttributeError")


class GenericGetattrVariable(VariableTracker):
    """`super().__getattribute__` bound to an object (the generic lookup, past a class's own
    `__getattribute__`): calling it with a constant name reads that attribute."""

    def __init__(self, obj: UserObjectVariable | NewObjectVariable) -> None:
        self.obj = obj

    def __repr__(self) -> str:
        return f"GenericGetattr({self.obj!r})"

    def python_type(self) -> type:
        return types.MethodWrapperType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        if len(args) != 1 or kwargs or not args[0].is_constant():
            raise Unsupported("unsupported_call", "__getattribute__ with a non-constant name")
        name = args[0].as_constant()
        if not isinstance(name, str):
            raise Unsupported("exception", "__getattribute__", "attribute name must be a str")
        return self.obj.generic_getattr(tx, name)


_C_METHOD_TYPES = (
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.ClassMethodDescriptorType,
    types.BuiltinFunctionType,
)


class _NoArgsNoop(VariableTracker):
    """`super().__init__()` reaching `object.__init__`: nothing to do."""

    def __init__(self, what: str) -> None:
        self.what = what

    def python_type(self) -> type:
        return types.MethodWrapperType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        if args or kwargs:
            raise Unsupported("exception", f"{self.what}() takes no arguments", "TypeError")
        return ConstantVariable(None)


class _BoundBaseMethod(VariableTracker):
    """`super().name` on a new object where `name` is defined by `object`, dict, OrderedDict or
    list: the builtin behaviour on the tracked attributes and items, past the class's
    overrides."""

    def __init__(self, obj: NewObjectVariable, name: str) -> None:
        self.obj = obj
        self.name = name

    def __repr__(self) -> str:
        return f"BaseMethod({self.obj!r}.{self.name})"

    def python_type(self) -> type:
        return types.MethodWrapperType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        from framejit.frontend.variables.builtins import call_builtin_class

        obj, name = self.obj, self.name
        if name == "__setattr__":
            if len(args) != 2 or kwargs or not args[0].is_constant():
                raise Unsupported("unsupported_call", "__setattr__ with a non-constant name")
            obj.generic_setattr(tx, args[0].as_constant(), args[1])
            return ConstantVariable(None)
        items = obj.base_items
        assert items is not None
        is_list = isinstance(items.items, list)
        if name == "__init__":
            base = list if is_list else dict
            built = call_builtin_class(tx, base, args, kwargs)
            if built is None:
                what = f"{obj.cls.__name__}.__init__ of {base.__name__}"
                raise Unsupported("unsupported_call", what)
            if is_list:  # list.__init__ empties the list, then extends it
                note_mutation(obj)
                items.replace_items(tx, built.items)
            elif built.items:
                note_mutation(obj)
                items.items.update(built.items)
            return ConstantVariable(None)
        if name in (_LIST_WRITES if is_list else _DICT_WRITES):
            note_mutation(obj)
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return items.getitem(tx, args[0])
        if name == "__iter__" and not args and not kwargs:
            from framejit.frontend.variables.containers import container_iterator

            it = container_iterator(tx, items)
            if it is not None:
                return it
        return items.call_method(tx, name, args, kwargs)


# methods of the builtin bases that change the items
_DICT_WRITES = frozenset({"__setitem__", "__delitem__", "update", "pop", "setdefault", "clear"})
_LIST_WRITES = frozenset(
    {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"}
    | {"__setitem__", "__delitem__", "__iadd__", "__imul__"}
)

# dict methods that only read: answered from `UserObjectVariable.dict_view`
_DICT_READS = frozenset(
    {"get", "keys", "values", "items", "__getitem__", "__contains__", "__len__", "copy"}
)


def python_function(cls: type, name: str) -> types.FunctionType | None:
    """The function written in Python that `cls`'s lookup of `name` finds (None if the name
    resolves to anything else: a C slot, a descriptor, nothing)."""
    found = _class_attr(cls, name)
    return found[1] if found is not None and isinstance(found[1], types.FunctionType) else None


def _python_method_of(cls: type, name: str) -> Any:
    found = _class_attr(cls, name)
    return found[1] if found is not None else None


class _ReadOnlyDict(VariableTracker):
    """What `dict_view` returns: dict reads only (writes to an outside object go through its
    class, which the translator does not follow here)."""

    def __init__(self, items: dict[Any, VariableTracker], what: str) -> None:
        from framejit.frontend.variables.containers import DictVariable

        self.view = DictVariable(items)
        self.what = what

    def python_type(self) -> type:
        return dict

    def call_method(self, tx: Translator, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        if name not in _DICT_READS:
            raise Unsupported("side_effect", f"{self.what}: dict.{name} on an object from outside")
        if name == "copy":
            from framejit.frontend.variables.containers import DictVariable

            return DictVariable(self.view.items)
        return self.view.call_method(tx, name, args, kwargs)


class _DictReadMethod(VariableTracker):
    """`obj.keys` / `super().get` ... of a dict subclass from outside the frame."""

    def __init__(self, obj: UserObjectVariable, name: str) -> None:
        self.obj = obj
        self.name = name

    def __repr__(self) -> str:
        return f"DictRead({self.obj!r}.{self.name})"

    def python_type(self) -> type:
        return types.BuiltinMethodType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        what = f"{self.obj.type_name()}.{self.name}()"
        return self.obj.dict_view(tx, what).call_method(tx, self.name, args, kwargs)


class EnvironVariable(VariableTracker):
    """`os.environ`: reads of single variables (`get`, `[]`, `in`), each guarded on its value,
    so a changed environment recompiles. Writes are not captured."""

    def __repr__(self) -> str:
        return "Environ"

    def python_type(self) -> type:
        return type(os.environ)

    def reconstruct(self, cg: Any) -> None:
        cg.load_const(os.environ)  # the process's one mapping

    def _read(self, tx: Translator, key: VariableTracker) -> VariableTracker:
        if not key.is_constant() or not isinstance(key.as_constant(), str):
            raise Unsupported("unsupported_call", "os.environ with a non-constant key")
        return tx.wrap_source(EnvSource(key.as_constant()))

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("get", "__getitem__", "__contains__"):
            return _EnvironMethod(self, name)
        raise Unsupported("unsupported_attr", f"os.environ.{name}")

    def call_method(self, tx: Translator, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        if kwargs or not args:
            raise Unsupported("unsupported_call", f"os.environ.{name}")
        value = self._read(tx, args[0])
        missing = value.is_constant() and value.as_constant() is None
        if name == "get" and len(args) <= 2:
            if missing:
                return args[1] if len(args) == 2 else ConstantVariable(None)
            return value
        if name == "__getitem__" and len(args) == 1:
            if missing:
                raise Unsupported("exception", f"os.environ[{args[0].as_constant()!r}]", "KeyError")
            return value
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(not missing)
        raise Unsupported("unsupported_call", f"os.environ.{name}")


class _EnvironMethod(VariableTracker):
    def __init__(self, env: EnvironVariable, name: str) -> None:
        self.env = env
        self.name = name

    def python_type(self) -> type:
        return types.BuiltinMethodType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        return self.env.call_method(tx, self.name, args, kwargs)

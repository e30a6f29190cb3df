"""Callables: user functions (inlined), nested functions made in the frame, bound methods,
torch functions (graph ops) and methods of constants and containers.

Calling a user function never runs it: the translator inlines its bytecode with the arguments'
VariableTrackers bound to its parameters (`Translator.inline_call`).
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import AttrSource, Source
from framejit.frontend.variables.base import (
    CellVariable,
    ConstantVariable,
    ExternalCallableVariable,
    VariableTracker,
    all_constant,
    constant_fold,
    missing_attribute,
    note_mutation,
    note_undoable,
)

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator

Args = list[VariableTracker]
Kwargs = dict[str, VariableTracker]


class UserFunctionVariable(VariableTracker):
    """A Python function that exists outside the frame (global, attribute, closure, argument)."""

    def __init__(self, fn: types.FunctionType, source: Source | None = None) -> None:
        self.fn = fn
        self.source = source

    def __repr__(self) -> str:
        return f"UserFunction({self.fn.__qualname__})"

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
        else:
            cg.load_const(self.fn)

    def python_type(self) -> type:
        return types.FunctionType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        return tx.inline_user_function(self, args, kwargs)

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantVariable(getattr(self.fn, name))
        if name == "__code__" and self.source is None:
            return ConstantVariable(self.fn.__code__)
        if name == "__get__":  # `fn.__get__(obj, cls)`: the method bound to obj
            return _FunctionGet(self)
        if self.source is not None and hasattr(self.fn, name):
            return tx.wrap_source(AttrSource(self.source, name))
        if self.source is not None and name not in _FUNCTION_SLOTS:
            # an attribute a program may set on the function later (`f.calls = ...`)
            raise missing_attribute(tx, self.source, name, "function")
        raise Unsupported("unsupported_attr", f"function.{name}")


_FUNCTION_SLOTS = frozenset(dir(types.FunctionType))


class _FunctionGet(VariableTracker):
    """`fn.__get__` of a Python function: calling it with an object binds the function to it
    (what an LR scheduler's wrapper of `opt.step` does); `fn.__get__(None, cls)` is `fn`."""

    def __init__(self, fn: UserFunctionVariable) -> None:
        self.fn = fn

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        if kwargs or not 1 <= len(args) <= 2:
            raise Unsupported("unsupported_call", "function.__get__ with these arguments")
        obj = args[0]
        if obj.is_constant() and obj.as_constant() is None:
            return self.fn
        return UserMethodVariable(self.fn, obj)


class NestedFunctionVariable(VariableTracker):
    """A function created by MAKE_FUNCTION inside the traced code."""

    def __init__(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        qualname: str,
        defaults: list[VariableTracker],
        kwdefaults: dict[str, VariableTracker],
        closure: list[CellVariable],
    ) -> None:
        self.code = code
        self.f_globals = f_globals
        self.qualname = qualname
        self.defaults = defaults
        self.kwdefaults = kwdefaults
        self.closure = closure
        self.attrs: dict[str, VariableTracker] = {}  # set on it in the frame (`f.__wrapped__`)

    def __repr__(self) -> str:
        return f"NestedFunction({self.qualname})"

    def reconstruct(self, cg: CodeGen) -> None:
        """A real function object again (a break passes it on, or the frame returns it), closing
        over the real cells: the frame's own (codegen stores their traced contents first),
        its enclosing function's, or a new cell standing for one of a returned inlined call."""
        from framejit.frontend.variables.containers import DictVariable, TupleVariable

        def closure() -> None:
            for cell in self.closure:
                cg.load_cell(cell)
            cg.build(tuple, len(self.closure))

        def make() -> None:
            cg.call_const(
                _make_function,
                lambda: (
                    cg.load_const(self.code),
                    cg.load_const(self.f_globals),
                    cg.reconstruct(TupleVariable(self.defaults)),
                    cg.reconstruct(DictVariable(self.kwdefaults)),
                    closure(),
                ),
                5,
            )

        if not self.attrs:
            make()
            return
        names, values = tuple(self.attrs), TupleVariable(list(self.attrs.values()))
        cg.call_const(
            _with_attributes, lambda: (make(), cg.load_const(names), cg.reconstruct(values)), 3
        )

    def python_type(self) -> type:
        return types.FunctionType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        return tx.inline_nested_function(self, args, kwargs)

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(self.code.co_name if name == "__name__" else self.qualname)
        if name == "__code__":
            return ConstantVariable(self.code)
        if name in self.attrs:
            return self.attrs[name]
        raise Unsupported("unsupported_attr", f"function.{name}")

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        """An attribute of the function's own `__dict__` (`wrapper.__wrapped__ = fn`)."""
        if name in _FUNCTION_SLOTS and name != "__wrapped__":
            super().setattr(tx, name, value)
        note_mutation(self)
        old = dict(self.attrs)
        note_undoable(lambda: setattr(self, "attrs", old))
        self.attrs[name] = value


class UserMethodVariable(VariableTracker):
    """`obj.method` for a Python function found on obj's class: calling binds obj first."""

    def __init__(self, fn: VariableTracker, obj: VariableTracker, source: Source | None = None):
        self.fn = fn
        self.obj = obj
        self.source = source

    def __repr__(self) -> str:
        return f"UserMethod({self.fn!r} of {self.obj!r})"

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
            return
        cg.call_const(
            types.MethodType, lambda: (cg.reconstruct(self.fn), cg.reconstruct(self.obj)), 2
        )

    def python_type(self) -> type:
        return types.MethodType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        return self.fn.call(tx, [self.obj, *args], kwargs)

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name == "__self__":
            return self.obj
        if name == "__func__":
            return self.fn
        return self.fn.getattr(tx, name)


class BoundMethodVariable(VariableTracker):
    """A method of a VT that implements it itself (`lst.append`, `d.items`)."""

    def __init__(self, obj: VariableTracker, name: str) -> None:
        self.obj = obj
        self.name = name

    def __repr__(self) -> str:
        return f"BoundMethod({self.obj!r}.{self.name})"

    def reconstruct(self, cg: CodeGen) -> None:
        cg.reconstruct(self.obj)
        cg.load_attr(self.name)

    def python_type(self) -> type:
        return types.BuiltinMethodType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        return self.obj.call_method(tx, self.name, args, kwargs)


class TensorMethodVariable(BoundMethodVariable):
    """`tensor.method` before it is called."""


class ConstantMethodVariable(VariableTracker):
    """A method of a constant (`"a,b".split`, `(2, 3).index`): folded when called."""

    def __init__(self, value: Any, name: str) -> None:
        self.value = value
        self.name = name

    def python_type(self) -> type:
        return types.BuiltinMethodType

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        args = [_constant_items(tx, a) for a in args]  # "".join(generator of constants)
        if not all_constant(args, kwargs):
            kinds = ", ".join(a.type_name() for a in args if not a.is_constant())
            raise Unsupported(
                "unsupported_call", f"{type(self.value).__name__}.{self.name}", f"on {kinds}"
            )
        result = constant_fold(getattr(self.value, self.name), args, kwargs)
        return tx.wrap_constant_result(result)


class TorchFunctionVariable(ExternalCallableVariable):
    """A function from torch's namespaces: becomes a call_function node in the graph."""

    label = "TorchFunction"

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.fn

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        from framejit.frontend.variables.torch_rules import call_torch_function

        return call_torch_function(tx, self.fn, args, kwargs)

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.fn, name))
        if isinstance(self.fn, torch._ops.OpOverloadPacket) and name in self.fn.overloads():
            # torch.ops.aten.add.Tensor: an overload is a fixed attribute of its packet
            source = AttrSource(self.source, name) if self.source is not None else None
            return TorchFunctionVariable(getattr(self.fn, name), source)
        raise Unsupported("unsupported_attr", f"{self.fn}.{name}")


def is_tensor_method_descriptor(fn: Any) -> bool:
    """`torch.Tensor.add` and friends, used as plain functions."""
    owner = getattr(fn, "__objclass__", None)
    return owner is not None and owner in (torch._C.TensorBase, torch.Tensor)


class PartialVariable(VariableTracker):
    """`functools.partial(fn, *args, **kwargs)`: calling it calls `fn` with the merged args."""

    def __init__(
        self, fn: VariableTracker, args: Args, kwargs: Kwargs, source: Source | None = None
    ) -> None:
        self.fn = fn
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.source = source

    def __repr__(self) -> str:
        return f"partial({self.fn!r})"

    def reconstruct(self, cg: CodeGen) -> None:
        from framejit.frontend.variables.containers import DictVariable, TupleVariable

        if self.source is not None:
            self.source.emit_load(cg)
            return
        cg.call_const(
            _make_partial,
            lambda: (
                cg.reconstruct(self.fn),
                cg.reconstruct(TupleVariable(self.args)),
                cg.reconstruct(DictVariable(self.kwargs)),
            ),
            3,
        )

    def python_type(self) -> type:
        import functools

        return functools.partial

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        return self.fn.call(tx, [*self.args, *args], {**self.kwargs, **kwargs})

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        from framejit.frontend.variables.containers import DictVariable, TupleVariable

        if name == "func":
            return self.fn
        if name == "args":
            return TupleVariable(self.args)
        if name == "keywords":
            return DictVariable(self.kwargs)
        raise Unsupported("unsupported_attr", f"functools.partial.{name}")


def _make_partial(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import functools

    return functools.partial(fn, *args, **kwargs)


def _constant_items(tx: Translator, vt: VariableTracker) -> VariableTracker:
    """An iterator or container of constants, as one constant list (else `vt` itself)."""
    from framejit.frontend.variables.containers import IteratorVariable, ListVariable
    from framejit.frontend.variables.generators import LazyIteratorVariable
    from framejit.frontend.variables.objects import base_operand

    vt = base_operand(vt, ("__iter__",))  # ",".join(names) of a list subclass: its items
    if isinstance(vt, LazyIteratorVariable):  # "".join(generator): drained, as join does
        vt = ListVariable(vt.unpack(tx))
    if isinstance(vt, IteratorVariable) and all(i.is_constant() for i in vt.items[vt.index :]):
        return ConstantVariable([i.as_constant() for i in vt.unpack(tx)])
    return vt


def _with_attributes(fn: Any, names: tuple[str, ...], values: tuple[Any, ...]) -> Any:
    """A function rebuilt after the graph, given the attributes the frame set on it."""
    for name, value in zip(names, values):
        setattr(fn, name, value)
    return fn


def _make_function(
    code: types.CodeType,
    f_globals: dict[str, Any],
    defaults: tuple[Any, ...],
    kwdefaults: dict[str, Any],
    closure: tuple[Any, ...],
) -> types.FunctionType:
    fn = types.FunctionType(code, f_globals, code.co_name, defaults or None, closure or None)
    fn.__kwdefaults__ = kwdefaults or None
    fn.__qualname__ = code.co_qualname
    return fn

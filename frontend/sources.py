"""Sources: where a value the translator saw came from, as a small tree of frozen dataclasses.

Every Source prints itself (`str(source)`) as the Python expression a user would write to reach
the value (`L['model']._modules['fc']._parameters['weight']`). The same tree is rendered two more
ways: as an expression inside a compiled guard function (`guard_expr`), where arguments are the
guard's parameters, globals come from `G` and free variables from the function `F`; and as
bytecode that loads the value inside a transformed code object (`emit_load`).

Invariant: a Source is pure; evaluating it has no side effects beyond attribute and item reads
that the user's own code performed while it was traced.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar


def guard_param(name: str) -> str:
    """The guard function's parameter for the frame argument `name` (any string: tools such as
    pytest name locals `@py_assert1`)."""
    return f"L_{name}" if name.isidentifier() else f"L_x{name.encode().hex()}"


def _ident(text: str) -> str:
    return re.sub(r"\W+", "_", text).strip("_") or "v"


_S = TypeVar("_S", bound=type)


def source_class(cls: _S) -> _S:
    """A frozen dataclass whose hash is computed once per object. Sources are dict keys on every
    hot path of a compile (wrapped values, inputs, guards) and nest deep (a parameter of a
    submodule of a submodule is 15 sources): the generated hash and `==` walk the whole tree
    each time (2 µs for such a parameter). `==` compares hashes first where both are cached."""
    cls = dataclass(frozen=True)(cls)
    fields_hash: Callable[[Any], int] = cls.__hash__  # type: ignore[assignment]
    fields_eq: Callable[[Any, Any], Any] = cls.__eq__

    def __hash__(self: Any) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = fields_hash(self)
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self: Any, other: Any) -> Any:
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        mine, theirs = self.__dict__.get("_hash"), other.__dict__.get("_hash")
        if mine is not None and theirs is not None and mine != theirs:
            return False
        return fields_eq(self, other)

    def __getstate__(self: Any) -> dict[str, Any]:  # string hashes differ between processes
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    cls.__hash__ = __hash__  # type: ignore[method-assign]
    cls.__eq__ = __eq__  # type: ignore[method-assign]
    cls.__getstate__ = __getstate__  # type: ignore[attr-defined]
    return cls


class Source:
    """Base of the Source tree; sources built on another one have a `base` field."""

    def guard_expr(self) -> str:
        raise NotImplementedError(type(self).__name__)

    def emit_load(self, cg: Any) -> None:
        raise NotImplementedError(type(self).__name__)

    def short_name(self) -> str:
        """An identifier for fx placeholder names (`l_self_modules_fc_parameters_weight`)."""
        return _ident(str(self).replace("L[", "l_").replace("G[", "g_"))

    def root(self) -> Source:
        src: Source = self
        while getattr(src, "base", None) is not None:
            src = src.base  # type: ignore[attr-defined]
        return src

    def chain(self) -> list[Source]:
        """This source and every source it is built on, innermost first."""
        out: list[Source] = []
        src: Source | None = self
        while src is not None:
            out.append(src)
            src = getattr(src, "base", None)
        return out[::-1]


@source_class
class LocalSource(Source):
    """An argument of the frame being compiled."""

    name: str
    is_cell: bool = False

    def __str__(self) -> str:
        return f"L[{self.name!r}]"

    def guard_expr(self) -> str:
        return guard_param(self.name)

    def emit_load(self, cg: Any) -> None:
        cg.load_local(self.name, self.is_cell)


RANGE_SUFFIX = "_range"


def resumed_range(source: Source) -> bool:
    """Is `source` the argument in which a resume function gets what a broken `for` loop over
    a range had left (a `range`; breaks.resume_code)?"""
    return (
        type(source) is LocalSource
        and source.name.startswith("___stack")
        and source.name.endswith(RANGE_SUFFIX)
    )


@source_class
class FreeVarSource(Source):
    """A free variable of the frame being compiled (a cell of its closure)."""

    name: str
    index: int

    def __str__(self) -> str:
        return f"C[{self.name!r}]"

    def guard_expr(self) -> str:
        return f"F.__closure__[{self.index}].cell_contents"

    def emit_load(self, cg: Any) -> None:
        cg.load_deref(self.name)


@source_class
class GlobalSource(Source):
    name: str

    def __str__(self) -> str:
        return f"G[{self.name!r}]"

    def guard_expr(self) -> str:
        return f"G[{self.name!r}]"

    def emit_load(self, cg: Any) -> None:
        cg.load_global(self.name)


class ConstSource(Source):
    """A fixed object the trace holds itself (the globals dict of a module whose function was
    reached without a source): its identity is part of the compiled code, like a constant."""

    __slots__ = ("value", "label")

    def __init__(self, value: Any, label: str) -> None:
        self.value = value
        self.label = label

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstSource) and other.value is self.value

    def __hash__(self) -> int:
        return hash((ConstSource, id(self.value)))

    def __repr__(self) -> str:
        return f"ConstSource({self.label})"

    def __str__(self) -> str:
        return f"<{self.label}>"

    def guard_expr(self) -> str:
        raise AssertionError("ConstSource is rendered by the guard compiler as a constant")

    def emit_load(self, cg: Any) -> None:
        cg.load_const(self.value)


@source_class
class EnvSource(Source):
    """`os.environ.get(key)`: an environment variable the traced code read (None if unset)."""

    key: str

    def __str__(self) -> str:
        return f"os.environ.get({self.key!r})"

    def guard_expr(self) -> str:
        return f"__import__('os').environ.get({self.key!r})"

    def emit_load(self, cg: Any) -> None:
        import os

        cg.call_const(os.environ.get, lambda: cg.load_const(self.key), 1)


@source_class
class AttrSource(Source):
    base: Source
    attr: str

    def __str__(self) -> str:
        return f"{self.base}.{self.attr}"

    def guard_expr(self) -> str:
        return f"{self.base.guard_expr()}.{self.attr}"

    def emit_load(self, cg: Any) -> None:
        self.base.emit_load(cg)
        self.emit_step(cg)

    def emit_step(self, cg: Any) -> None:
        """With the base's value on the stack, replace it by this source's value."""
        cg.load_attr(self.attr)


@source_class
class GenericAttrSource(AttrSource):
    """`object.__getattribute__(base, attr)`: an attribute read past the class's own
    `__getattribute__` (which the translator inlined; its `super().__getattribute__` lands here)."""

    def __str__(self) -> str:
        return f"object.__getattribute__({self.base}, {self.attr!r})"

    def guard_expr(self) -> str:
        return f"object.__getattribute__({self.base.guard_expr()}, {self.attr!r})"

    def emit_step(self, cg: Any) -> None:
        cg.call_on_top(_Reader(object.__getattribute__, self.attr))


class _Reader:
    """A constant of transformed code: `read(obj, key)` with a fixed key, past the class's own
    lookups (`object.__getattribute__`, `dict.__getitem__`)."""

    __slots__ = ("read", "key")

    def __init__(self, read: Any, key: Any) -> None:
        self.read = read
        self.key = key

    def __call__(self, obj: Any) -> Any:
        return self.read(obj, self.key)

    def __repr__(self) -> str:
        return f"{self.read.__qualname__}(_, {self.key!r})"


@source_class
class ItemSource(Source):
    """`base[key]` for a constant key (int, str, or another hashable constant)."""

    base: Source
    key: Any

    def __str__(self) -> str:
        return f"{self.base}[{self.key!r}]"

    def guard_expr(self) -> str:
        return f"{self.base.guard_expr()}[{self.key!r}]"

    def emit_load(self, cg: Any) -> None:
        self.base.emit_load(cg)
        self.emit_step(cg)

    def emit_step(self, cg: Any) -> None:
        cg.load_const(self.key)
        cg.subscr()


@source_class
class DynamicItemSource(Source):
    """`base[index]` where the index is the value of another source (an int argument that
    dynamic shapes made symbolic): `xs[t]` in a step function called with t = 2, 3, ... reads
    the item at each call's `t`, guarded there."""

    base: Source
    index: Source

    def __str__(self) -> str:
        return f"{self.base}[{self.index}]"

    def guard_expr(self) -> str:
        return f"{self.base.guard_expr()}[{self.index.guard_expr()}]"

    def read(self, read: Any) -> Any:
        """The value, given how to read another source (OutputGraph.read_source)."""
        return read(self.base)[read(self.index)]

    def emit_load(self, cg: Any) -> None:
        self.base.emit_load(cg)
        self.emit_step(cg)

    def emit_step(self, cg: Any) -> None:
        self.index.emit_load(cg)
        cg.subscr()


@source_class
class OffsetSource(Source):
    """`index + offset`: an int source plus a constant (`xs[t + 1]`, an inlined recursion's
    `xs[i + k]`), the index of a `DynamicItemSource`."""

    index: Source
    offset: int

    def __str__(self) -> str:
        return f"({self.index} {'+' if self.offset >= 0 else '-'} {abs(self.offset)})"

    def guard_expr(self) -> str:
        return f"({self.index.guard_expr()} + {self.offset!r})"

    def read(self, read: Any) -> Any:
        return read(self.index) + self.offset

    def emit_load(self, cg: Any) -> None:
        cg.call_const(
            operator.add, lambda: (self.index.emit_load(cg), cg.load_const(self.offset)), 2
        )


@source_class
class DictItemSource(ItemSource):
    """`dict.__getitem__(base, key)`: an item of a dict subclass read past the class's own
    `__getitem__`."""

    def __str__(self) -> str:
        return f"dict.__getitem__({self.base}, {self.key!r})"

    def guard_expr(self) -> str:
        return f"dict.__getitem__({self.base.guard_expr()}, {self.key!r})"

    def emit_step(self, cg: Any) -> None:
        cg.call_on_top(_Reader(dict.__getitem__, self.key))


@source_class
class TypeSource(Source):
    """`type(base)`: where methods and class attributes of an object are found."""

    base: Source

    def __str__(self) -> str:
        return f"type({self.base})"

    def guard_expr(self) -> str:
        return f"type({self.base.guard_expr()})"

    def emit_load(self, cg: Any) -> None:
        cg.call_const(type, lambda: self.base.emit_load(cg), 1)

    def emit_step(self, cg: Any) -> None:
        cg.call_on_top(type)


@source_class
class IdSource(Source):
    """`id(base)`: what `id()` of an object from outside the frame read (pinned by a guard)."""

    base: Source

    def __str__(self) -> str:
        return f"id({self.base})"

    def guard_expr(self) -> str:
        return f"id({self.base.guard_expr()})"

    def emit_load(self, cg: Any) -> None:
        cg.call_const(id, lambda: self.base.emit_load(cg), 1)


@source_class
class MethodCallSource(Source):
    """`base.name()`: a metadata query (storage_offset) that a guard must pin."""

    base: Source
    name: str

    def __str__(self) -> str:
        return f"{self.base}.{self.name}()"

    def guard_expr(self) -> str:
        return f"{self.base.guard_expr()}.{self.name}()"

    def emit_load(self, cg: Any) -> None:
        self.base.emit_load(cg)
        self.emit_step(cg)

    def emit_step(self, cg: Any) -> None:
        cg.call_method_on_top(self.name)


def param_source(module: Source, name: str) -> Source:
    return ItemSource(AttrSource(module, "_parameters"), name)


def buffer_source(module: Source, name: str) -> Source:
    return ItemSource(AttrSource(module, "_buffers"), name)


def is_module_state(source: Source) -> bool:
    """A module's parameter or buffer (`...._parameters['w']`, `...._buffers['b']`): inputs
    whose storage stays put from call to call (CUDA graph trees treat them as static)."""
    return (
        isinstance(source, ItemSource)
        and isinstance(source.base, AttrSource)
        and source.base.attr in ("_parameters", "_buffers")
    )


def submodule_source(module: Source, name: str) -> Source:
    return ItemSource(AttrSource(module, "_modules"), name)


def closure_cell_source(fn: Source, index: int) -> Source:
    return AttrSource(ItemSource(AttrSource(fn, "__closure__"), index), "cell_contents")


def default_source(fn: Source, index: int) -> Source:
    return ItemSource(AttrSource(fn, "__defaults__"), index)


def kwdefault_source(fn: Source, name: str) -> Source:
    return ItemSource(AttrSource(fn, "__kwdefaults__"), name)

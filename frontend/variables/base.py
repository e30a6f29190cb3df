"""The base of the VariableTracker family, and the values that need no graph: constants.

A VariableTracker (VT) is the translator's symbolic stand-in for one Python value. Most are
immutable; the few that model mutable Python objects created inside the traced frame (lists,
dicts, iterators, cells) mutate in place, and those coming from outside the frame (they have a
Source) refuse mutation, because replaying it is the side-effect work of a later milestone.

Every VT can say what Python type it stands for, and either knows its Source (so codegen can load
it again after the graph runs) or knows how to rebuild itself (`reconstruct`).
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
import sys
import types
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import AttrSource, Source

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator


class VariableTracker:
    source: Source | None = None

    def __new__(klass, /, *args: Any, **kwargs: Any) -> VariableTracker:
        self = object.__new__(klass)
        _born[0] += 1
        self._born = _born[0]  # type: ignore[attr-defined]
        return self

    def python_type(self) -> type:
        raise Unsupported("unsupported_object", type(self).__name__)

    def type_name(self) -> str:
        try:
            return self.python_type().__name__
        except Unsupported:
            return type(self).__name__

    # Constants -----------------------------------------------------------------------------
    def is_constant(self) -> bool:
        return False

    def as_constant(self) -> Any:
        raise Unsupported("unsupported_object", f"{self.type_name()} used as a constant")

    # Protocols -----------------------------------------------------------------------------
    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        raise Unsupported("unsupported_attr", f"{self.type_name()}.{name}")

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        raise Unsupported("unsupported_call", f"calling {self.type_name()}")

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        return self.getattr(tx, name).call(tx, args, kwargs)

    def setattr(self, tx: Translator, name: str, value: VariableTracker) -> None:
        raise Unsupported(
            "side_effect",
            f"setting {self.type_name()}.{name}",
            "objects from outside the frame are not mutated while tracing",
        )

    def delattr(self, tx: Translator, name: str) -> None:
        raise Unsupported("side_effect", f"deleting {self.type_name()}.{name}")

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        """The items this value yields when iterated or star-unpacked."""
        raise Unsupported("unsupported_object", f"iterating over {self.type_name()}")

    def truth(self, tx: Translator) -> bool:
        try:
            t = self.python_type()
        except Unsupported:
            t = None
        if t in _ALWAYS_TRUE:  # no __bool__ or __len__: every such object is true
            return True
        raise Unsupported("unsupported_control_flow", f"truth value of {self.type_name()}")

    def has_tensors(self) -> bool:
        return False

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
            return
        raise Unsupported("reconstruct", f"returning a {self.type_name()} made inside the frame")


_mutations = [0]
_born = [0]  # serial number of the last VariableTracker made
_floor = [0]  # VTs born after this were made by the instruction being traced now


def note_mutation(vt: VariableTracker | None = None) -> None:
    """A VT made in the frame changed in place. A graph break can only rewind an instruction
    that made no such change (the break restores the stack and locals, not object contents).
    A change to a VT that the current instruction made itself (an inlined callee's own list or
    `**kwargs` dict) is not one: rewinding the instruction drops that VT with it."""
    if vt is not None:
        note_change(vt)
        if vt.source is None and getattr(vt, "_born", 0) > _floor[0]:
            return
    _mutations[0] += 1


def mutation_count() -> int:
    return _mutations[0]


_changes = [0]  # serial number of the last change to any VT (note_change)


def note_change(vt: VariableTracker) -> None:
    """`vt`'s object changed now: a recorded call made before this point that can see it (a
    logging call with it as an argument) must not be replayed after the graph, where it would
    see the later state (side_effects.SideEffects.replay_out_of_order)."""
    _changes[0] += 1
    vt._changed_at = _changes[0]  # type: ignore[attr-defined]


def change_count() -> int:
    return _changes[0]


def begin_instruction() -> None:
    """The root translator starts an instruction it may rewind at a break."""
    _floor[0] = _born[0]


_undo: list[Any] = []  # callables that restore an in-place change the translator can rewind


def note_undoable(restore: Any) -> None:
    """An in-place change that a graph break can rewind by calling `restore()`."""
    _undo.append(restore)


def undo_mark() -> int:
    return len(_undo)


def undo_to(mark: int) -> None:
    while len(_undo) > mark:
        _undo.pop()()


def forget_undo(mark: int) -> None:
    """Drop the restore callables past `mark` without calling them: their changes can no
    longer be rewound (they hold the trace's values, and through them the frame's arguments)."""
    del _undo[mark:]


class ConstantVariable(VariableTracker):
    """A Python value whose identity does not matter and that never changes."""

    __slots__ = ("source", "value")

    def __init__(self, value: Any, source: Source | None = None) -> None:
        if type(value) in _SYM_OR_SIZE:  # a symbolic size made constant: pin it with a guard
            from framejit.frontend.variables.symbolic import has_sym_type, specialize

            if has_sym_type(value):
                value = specialize(value)
        self.value = value
        self.source = source

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"

    def python_type(self) -> type:
        return type(self.value)

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.value

    def truth(self, tx: Translator) -> bool:
        return bool(self.value)

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        from framejit.frontend.variables.functions import ConstantMethodVariable

        try:
            attr = getattr(self.value, name)
        except AttributeError as exc:
            raise Unsupported("unsupported_attr", f"{self.type_name()}.{name}", str(exc)) from None
        if callable(attr) and not isinstance(attr, type):
            return ConstantMethodVariable(self.value, name)
        if name in _FROZEN_MAPPINGS.get(type(self.value), ()):
            return FrozenMappingVariable(attr)
        return ConstantVariable(attr)

    def unpack(self, tx: Translator) -> list[VariableTracker]:
        try:
            items = list(self.value)
        except TypeError:
            return super().unpack(tx)
        return [ConstantVariable(v) for v in items]

    def reconstruct(self, cg: CodeGen) -> None:
        if type(self.value) in (set, list, dict):  # mutable: a fresh copy for every call
            copy = {set: frozenset, list: tuple, dict: lambda d: tuple(d.items())}[type(self.value)]
            cg.call_const(type(self.value), lambda: cg.load_const(copy(self.value)), 1)
            return
        cg.load_const(self.value)


_SYM_OR_SIZE = (torch.SymInt, torch.SymFloat, torch.SymBool, torch.Size, tuple)


class FrozenMappingVariable(ConstantVariable):
    """A read-only mapping that nothing can change: a proxy of a dict that only its owner holds
    and never writes (`inspect.Signature.parameters`, `re.Pattern.groupindex`). Its `keys()`,
    `values()` and `items()` are live views of that dict, so they never change either and are
    constants of the trace (`"mask" in set(sig.parameters.keys())`). A view of any other
    mapping stays live: a dict of the trace has DictViewVariable, and a proxy of a class dict
    is not one of these."""

    __slots__ = ()

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in _MAPPING_VIEWS:
            return FrozenViewMethodVariable(self.value, name)
        return super().getattr(tx, name)


class FrozenViewMethodVariable(VariableTracker):
    """`keys`, `values` or `items` of a FrozenMappingVariable: calling it gives the view, as a
    constant."""

    def __init__(self, mapping: Any, name: str) -> None:
        self.mapping = mapping
        self.name = name

    def python_type(self) -> type:
        return types.BuiltinMethodType

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        if args or kwargs:
            raise Unsupported("unsupported_call", f"{type(self.mapping).__name__}.{self.name}")
        return ConstantVariable(getattr(self.mapping, self.name)())


# The attributes of immutable objects that are frozen mappings (see FrozenMappingVariable).
_FROZEN_MAPPINGS: dict[type, tuple[str, ...]] = {
    inspect.Signature: ("parameters",),
    re.Pattern: ("groupindex",),
}
_MAPPING_VIEWS = ("keys", "values", "items")


class _NumberOnDemand(VariableTracker):
    """A number whose value the trace computes only when it is used (`as_constant`)."""

    def is_constant(self) -> bool:
        return True

    def truth(self, tx: Translator) -> bool:
        return bool(self.as_constant())

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        return ConstantVariable(self.as_constant()).getattr(tx, name)

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        return ConstantVariable(self.as_constant()).call_method(tx, name, args, kwargs)


class LazyNumberVariable(_NumberOnDemand):
    """A float argument guarded only where the trace relies on its value (automatic dynamic,
    frontend/dynamic.py). Every use goes through `as_constant()`, which installs the value guard
    (again each time: a graph break's rollback may drop an earlier one; duplicates are merged);
    passing it through (returning it, storing it) reloads it from its Source, which is right
    for any value, so that needs no guard."""

    def __init__(self, value: Any, source: Source, guard: Any) -> None:
        self.value_unguarded = value
        self.source = source
        self._guard = guard

    def __repr__(self) -> str:
        return f"LazyNumber({self.source})"

    def python_type(self) -> type:
        return type(self.value_unguarded)

    def as_constant(self) -> Any:
        self._guard()
        return self.value_unguarded

    def reconstruct(self, cg: CodeGen) -> None:
        self.source.emit_load(cg)


class DeferredNumberVariable(_NumberOnDemand):
    """`a + b`, `a - b`, `a * b`, `a / k` (a number k other than 0), `-a`, `round(a, n)` or `abs(a)`
    of floats read without a guard (`LazyNumberVariable`) and constant numbers, at least one
    unguarded: computed by the code after the graph (`operator.add(a, b)` there), not while tracing,
    so a running total or a rounded loss of values read at breaks (`total += loss.item()`,
    `round(loss.item(), 4)`) costs no guard on them. A use of the value (a condition, a format, an
    op that needs a constant) computes it while tracing, guarding every float it is made of. None of
    these raise on finite or infinite floats (round of inf or NaN with no digits does: not deferred,
    see `deferred_number`), so computing them later changes nothing Python would see."""

    MAX_DEPTH = 64  # deeper expressions are computed while tracing (and guarded)

    def __init__(self, op: Any, operands: list[VariableTracker]) -> None:
        self.op = op
        self.operands = operands
        self.depth = 1 + max(getattr(v, "depth", 0) for v in operands)

    def __repr__(self) -> str:
        return f"Deferred({getattr(self.op, '__name__', self.op)}, {self.operands!r})"

    def unguarded(self) -> Any:
        return self.op(*[_unguarded(v) for v in self.operands])

    def python_type(self) -> type:
        return type(self.unguarded())

    def as_constant(self) -> Any:
        return self.op(*[v.as_constant() for v in self.operands])

    def reconstruct(self, cg: CodeGen) -> None:
        def operands() -> None:
            for v in self.operands:
                cg.reconstruct(v)

        cg.call_const(self.op, operands, len(self.operands))


def _unguarded(v: VariableTracker) -> Any:
    if isinstance(v, LazyNumberVariable):
        return v.value_unguarded
    if isinstance(v, DeferredNumberVariable):
        return v.unguarded()
    return v.as_constant()


_DEFERRED_OPS = {
    operator.add: operator.add,
    operator.iadd: operator.add,
    operator.sub: operator.sub,
    operator.isub: operator.sub,
    operator.mul: operator.mul,
    operator.imul: operator.mul,
    operator.truediv: operator.truediv,
    operator.itruediv: operator.truediv,
    round: round,
    abs: abs,
    operator.neg: operator.neg,
}


def deferred_number(op: Any, *operands: VariableTracker) -> VariableTracker | None:
    """`op(*operands)` as a DeferredNumberVariable where it may be one (see there). None
    otherwise."""
    plain = _DEFERRED_OPS.get(op)
    if plain is None or len(operands) != (1 if plain in (abs, operator.neg) else 2):
        return None
    lazy = (LazyNumberVariable, DeferredNumberVariable)
    if plain in (round, abs, operator.neg):  # of an unguarded float, not of a constant
        if not isinstance(operands[0], lazy):
            return None
    elif not any(isinstance(v, lazy) for v in operands):
        return None
    for v in operands:
        if isinstance(v, lazy):
            if type(_unguarded(v)) is not float:
                return None
            if isinstance(v, DeferredNumberVariable) and v.depth >= v.MAX_DEPTH:
                return None
        elif not (type(v) is ConstantVariable and type(v.value) in (int, float)):
            return None
    if plain is round and type(_unguarded(operands[1])) is not int:
        return None  # round(x, None) gives an int, and raises for inf and NaN
    if plain is operator.truediv and (
        isinstance(operands[1], lazy) or operands[1].as_constant() == 0
    ):
        return None  # a divisor that is or may be 0 raises: computed while tracing
    return DeferredNumberVariable(plain, list(operands))


class ExternalCallableVariable(VariableTracker):
    """A callable that exists outside the frame and never changes (a torch function, a builtin,
    a C function, a logging function): subclasses say what calling it means; it is rebuilt from
    its Source, or as a constant of the code."""

    label = "Callable"

    def __init__(self, fn: Any, source: Source | None = None) -> None:
        self.fn = fn
        self.source = source

    def __repr__(self) -> str:
        return f"{self.label}({getattr(self.fn, '__qualname__', self.fn)})"

    def python_type(self) -> type:
        return type(self.fn)

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
        else:
            cg.load_const(self.fn)


class NullVariable(VariableTracker):
    """The NULL that CALL expects below a plain callable (pushed by PUSH_NULL, LOAD_GLOBAL...)."""

    def __repr__(self) -> str:
        return "NULL"

    def reconstruct(self, cg: CodeGen) -> None:
        cg.push_null()


NULL = NullVariable()


class CellVariable(VariableTracker):
    """A cell of a frame being traced (a local captured by an inner function)."""

    def __init__(self, contents: VariableTracker | None = None, name: str = "") -> None:
        self.contents = contents
        self.name = name

    def __repr__(self) -> str:
        return f"Cell({self.name}={self.contents!r})"


def constant_fold(fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]) -> Any:
    """Call `fn` on the constant values of `args`; the caller checked they are constants."""
    return fn(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})


def all_constant(
    args: list[VariableTracker], kwargs: dict[str, VariableTracker] | None = None
) -> bool:
    return all(a.is_constant() for a in args) and all(
        v.is_constant() for v in (kwargs or {}).values()
    )


BINARY_OPS: dict[str, Any] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "@": operator.matmul,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "@=": operator.imatmul,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
}

COMPARE_OPS: dict[str, Any] = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
}


EXCEPTION_CONSTANT_TYPES = (int, float, str, bool, type(None), bytes)


def missing_attribute(tx: Translator, source: Source, name: str, owner: str) -> Unsupported:
    """`obj.name` of an object from outside that has no such attribute (`hasattr`, a
    `getattr` default): its absence from the object's instance dict is guarded, so setting it
    later compiles again; the AttributeError Python raises, for the caller to raise."""
    tx.output.require_absent(AttrSource(source, "__dict__"), name, tx.location_text())
    return Unsupported("exception", f"{owner}.{name}", "AttributeError")


class ExceptionVariable(VariableTracker):
    """An exception the traced code raised and an `except` clause of an inlined frame caught
    (or one it built: `KeyError(key)`)."""

    def __init__(
        self,
        exc_type: type[BaseException],
        args: list[VariableTracker] | None,
        cause: VariableTracker | None = None,
    ) -> None:
        self.exc_type = exc_type
        self.args = args  # None: raised by an operation the translator models; not known
        self.cause = cause  # `raise err from cause`: an ExceptionVariable or a None constant
        # raised in the trace: the real one has a traceback (and __context__), which a new
        # object made after the graph would lack
        self.raised = False

    def __repr__(self) -> str:
        return f"Exception({self.exc_type.__name__})"

    def python_type(self) -> type:
        return self.exc_type

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        from framejit.frontend.variables.containers import TupleVariable

        if name == "args" and self.args is not None:
            return TupleVariable(list(self.args))
        if name == "__cause__":
            return self.cause if self.cause is not None else ConstantVariable(None)
        if name == "__suppress_context__":
            return ConstantVariable(self.cause is not None)
        if name == "__traceback__":  # ExitStack.__exit__ reads it (Python 3.13)
            if not self.raised:
                return ConstantVariable(None)
            from framejit.frontend.variables.stdlib import TracebackVariable

            return TracebackVariable()
        for base in self.exc_type.__mro__:  # a constant of a user exception class (`code = 3`)
            if base.__module__ != "builtins" and name in vars(base):
                value = vars(base)[name]
                if not name.startswith("__") and type(value) in EXCEPTION_CONSTANT_TYPES:
                    return ConstantVariable(value)
                break
        raise Unsupported("unsupported_attr", f"{self.exc_type.__name__}.{name}")

    def has_tensors(self) -> bool:
        return any(a.has_tensors() for a in self.args or ())

    def reconstruct(self, cg: CodeGen) -> None:
        if self.args is None or self.cause is not None or self.raised:
            raise Unsupported("reconstruct", f"a caught {self.exc_type.__name__}")

        def emit() -> None:
            for a in self.args:
                cg.reconstruct(a)

        cg.call_const(self.exc_type, emit, len(self.args))


_ALWAYS_TRUE = (
    types.FunctionType,
    types.MethodType,
    types.BuiltinFunctionType,
    types.MethodWrapperType,
    types.ModuleType,
    functools.partial,
)


def is_type_annotation(value: Any) -> bool:
    """A typing construct (`int | None`, `list[int]`, `Optional[str]`, `Literal["a"]`): an
    immutable value that validators of dataclass fields inspect with `typing.get_origin`."""
    t = type(value)
    if t in (types.UnionType, types.GenericAlias):
        return True
    return t.__module__ == "typing" and not isinstance(value, type) and t.__hash__ is not None


def is_numpy_scalar(value: Any) -> bool:
    """A numpy number or bool scalar (`np.float32(2.0)`): an immutable constant, which torch
    ops take as a Python number."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, (np.number, np.bool_))

"""Standard-library callables and objects the translator models instead of tracing their C code:
`globals()`, two-argument `iter(fn, sentinel)`, `operator.methodcaller`, `id()` of objects from
outside the frame, and the dispatch of `functools.singledispatch` functions.

What must hold:
- A read of `globals()` is a read of a global: the same guard as `NAME` would leave (a name
  missing from the module is guarded absent), never a copy of the dict; a store by name is a
  STORE_GLOBAL, replayed after the graph.
- `iter(fn, sentinel)` calls `fn` only when its consumer asks for an item, and stops at the
  first result equal to the sentinel, as CPython's callable iterator does; once it stopped it
  stays exhausted.
- `id(x)` is a constant of the trace only for a real object reached through a Source, pinned by
  a guard on that id; an object the trace makes (a graph intermediate) has no id yet: a break.
- A singledispatch call inlines the implementation `dispatch(cls)` returns at trace time; a
  STATE_READ guard asks `dispatch(cls)` again, so a later `register` compiles again.
"""

from __future__ import annotations

import functools
import inspect
import operator
import re
import sys
import types
from typing import TYPE_CHECKING, Any

from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import ConstSource, IdSource
from framejit.frontend.variables.base import (
    ConstantVariable,
    VariableTracker,
    constant_fold,
    note_undoable,
)
from framejit.frontend.variables.builder import CONSTANT_TYPES
from framejit.frontend.variables.builtins import builtin
from framejit.frontend.variables.containers import DictVariable, TupleVariable
from framejit.frontend.variables.generators import LazyIteratorVariable
from framejit.frontend.variables.tensor import TensorVariable
from framejit.guards import GuardKind

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator

Args = list[VariableTracker]
Kwargs = dict[str, VariableTracker]


# --- globals() -----------------------------------------------------------------------------------


class GlobalsVariable(VariableTracker):
    """`globals()`: the module dict of the frame that called it, read name by name through the
    translator's global loads (guarded as `NAME` is). A store by name is a store of the global;
    other writes (`update`, `del`, `pop`) are breaks."""

    def __init__(self, f_globals: dict[str, Any]) -> None:
        self.f_globals = f_globals

    def __repr__(self) -> str:
        return f"Globals({self.f_globals.get('__name__', '?')})"

    def python_type(self) -> type:
        return dict

    def truth(self, tx: Translator) -> bool:
        return True  # a module dict always holds `__name__`

    def reconstruct(self, cg: CodeGen) -> None:
        cg.load_const(self.f_globals)  # the same dict object, as `globals()` returns

    def _lookup(self, tx: Translator, key: VariableTracker) -> VariableTracker | None:
        """The value of the global `key`, or None when the module has no such name (guarded
        absent, so a later definition compiles again)."""
        if not key.is_constant():
            raise Unsupported("unsupported_call", "globals()[...] with a non-constant key")
        name = key.as_constant()
        if tx.f_globals is not self.f_globals:
            raise Unsupported("unsupported_call", "globals() of another frame's module")
        written = tx.output.side_effects.globals.get(name) if isinstance(name, str) else None
        if written is not None and self.f_globals is tx.output.fn.__globals__:
            return written
        if isinstance(name, str) and name in self.f_globals:
            return tx.load_global(name)
        if not isinstance(name, str):
            try:
                present = name in self.f_globals
            except TypeError as exc:  # an unhashable key
                raise Unsupported.raised("globals()[...]", exc) from None
            if present:
                raise Unsupported("unsupported_call", "globals() with a non-string key")
            return None
        module = str(self.f_globals.get("__name__", "?"))
        tx.output.require_absent(
            ConstSource(self.f_globals, f"globals of {module}"), name, tx.location_text()
        )
        return None

    def getitem(self, tx: Translator, key: VariableTracker) -> VariableTracker:
        found = self._lookup(tx, key)
        if found is None:
            raise Unsupported.raised("globals()[...]", KeyError(key.as_constant()))
        return found

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        from framejit.frontend.variables.functions import BoundMethodVariable

        if name in ("get", "__getitem__", "__contains__"):
            return BoundMethodVariable(self, name)
        raise Unsupported("unsupported_attr", f"globals().{name}", "only reads by name")

    def call_method(self, tx: Translator, name: str, args: Args, kwargs: Kwargs) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(tx, args[0])
        if name == "get" and 1 <= len(args) <= 2 and not kwargs:
            found = self._lookup(tx, args[0])
            if found is None:
                return args[1] if len(args) == 2 else ConstantVariable(None)
            return found
        if name == "__contains__" and len(args) == 1 and not kwargs:
            return ConstantVariable(self._lookup(tx, args[0]) is not None)
        if name == "__setitem__" and len(args) == 2 and not kwargs:
            key = args[0]
            if (
                key.is_constant()
                and type(key.as_constant()) is str
                and tx.f_globals is self.f_globals
            ):
                # `globals()["x"] = v` is `global x; x = v`: replayed as STORE_GLOBAL, and read
                # back by the rest of the trace (a break for another module's globals)
                tx.store_global(key.as_constant(), args[1])
                return ConstantVariable(None)
        raise Unsupported("unsupported_call", f"globals().{name}", "only reads and stores by name")


@builtin(globals)
def _globals(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if args or kwargs:
        return None
    return GlobalsVariable(tx.f_globals)


# --- iter(fn, sentinel) ---------------------------------------------------------------------------


def _exhausted_callable_iterator() -> Any:
    """A callable iterator that has stopped (what a traced one that reached its sentinel is
    after the graph): its callable raised StopIteration once, which exhausts it for good."""

    def stop() -> None:
        raise StopIteration

    it = iter(stop, None)
    next(it, None)
    return it


class CallIteratorVariable(LazyIteratorVariable):
    """`iter(fn, sentinel)`: each item is `fn()`, traced when the consumer asks for it, until a
    result equals the sentinel (identity first, then `==`, as CPython compares)."""

    def __init__(self, fn: VariableTracker, sentinel: VariableTracker) -> None:
        self.fn = fn
        self.sentinel = sentinel
        self.done = False

    def __repr__(self) -> str:
        return f"CallIterator({self.fn!r}, {self.sentinel!r})"

    def reachable(self) -> list[VariableTracker]:
        return [self.fn, self.sentinel]

    def python_type(self) -> type:
        return type(iter(int, 0))

    def next_item(self, tx: Translator) -> VariableTracker | None:
        if self.done:
            return None
        value = self.fn.call(tx, [], {})
        if isinstance(value, TensorVariable) and not isinstance(self.sentinel, TensorVariable):
            raise Unsupported(
                "data_dependent", "iter(fn, sentinel) where fn returns a tensor", "tensor == x"
            )
        stop = tx.is_op(value, self.sentinel) or tx.compare_op(
            operator.eq, value, self.sentinel
        ).truth(tx)
        if not stop:
            return value
        self.done = True
        note_undoable(lambda: setattr(self, "done", False))
        return None

    def reconstruct(self, cg: CodeGen) -> None:
        if self.done:
            cg.call_const(_exhausted_callable_iterator, lambda: None, 0)
            return

        def emit() -> None:
            cg.reconstruct(self.fn)
            cg.reconstruct(self.sentinel)

        cg.call_const(iter, emit, 2)


def _not_callable_error() -> TypeError:
    """Eager's TypeError for `iter(obj, sentinel)` of an object that cannot be called (its
    message differs between Python versions)."""
    try:
        iter(0, 0)  # type: ignore[call-overload]
    except TypeError as exc:
        return exc
    raise AssertionError("iter(0, 0) did not raise")


def call_iterator(tx: Translator, fn: VariableTracker, sentinel: VariableTracker) -> Any:
    """`iter(fn, sentinel)`; eager's TypeError for a `fn` that cannot be called."""
    try:
        t = fn.python_type()
    except Unsupported:
        t = None
    if t is not None and not any("__call__" in k.__dict__ for k in t.__mro__):
        raise Unsupported.raised("iter(fn, sentinel)", _not_callable_error())
    return CallIteratorVariable(fn, sentinel)


# --- operator.methodcaller ------------------------------------------------------------------------


def _methodcaller(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return operator.methodcaller(name, *args, **kwargs)


class MethodCallerVariable(VariableTracker):
    """`operator.methodcaller(name, *args, **kwargs)`: calling it on `obj` is the traced
    `obj.name(*args, **kwargs)`."""

    def __init__(self, name: str, args: Args, kwargs: Kwargs, source: Any = None) -> None:
        self.name = name
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.source = source

    def __repr__(self) -> str:
        return f"MethodCaller({self.name!r})"

    def python_type(self) -> type:
        return operator.methodcaller

    def reachable(self) -> list[VariableTracker]:
        return [*self.args, *self.kwargs.values()]

    def call(self, tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
        if len(args) != 1 or kwargs:
            error = TypeError("methodcaller expected 1 argument")
            raise Unsupported.raised("methodcaller(...)", error)
        return args[0].getattr(tx, self.name).call(tx, list(self.args), dict(self.kwargs))

    def reconstruct(self, cg: CodeGen) -> None:
        if self.source is not None:
            self.source.emit_load(cg)
            return

        def emit() -> None:
            cg.load_const(self.name)
            cg.reconstruct(TupleVariable(self.args))
            cg.reconstruct(DictVariable(dict(self.kwargs)))

        cg.call_const(_methodcaller, emit, 3)


def make_methodcaller(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker:
    if not args or not args[0].is_constant() or not isinstance(args[0].as_constant(), str):
        error = TypeError("methodcaller needs at least one argument, the method name")
        raise Unsupported.raised("operator.methodcaller(...)", error)
    return MethodCallerVariable(args[0].as_constant(), args[1:], kwargs)


def methodcaller_from_outside(tx: Translator, obj: Any, source: Any) -> VariableTracker | None:
    """A methodcaller made outside the frame whose arguments are constants: pinned by identity
    (it is immutable), then modelled as one made in the frame."""
    reduced = obj.__reduce__()
    if reduced[0] is not operator.methodcaller:  # keyword arguments: a partial in the reduce
        return None
    name, *args = reduced[1]
    if not all(type(a) in CONSTANT_TYPES for a in args):
        return None
    if source is not None:
        tx.output.add_guard(source, GuardKind.ID_MATCH, obj, tx.location_text())
    return MethodCallerVariable(name, [ConstantVariable(a) for a in args], {}, source)


# --- id() -----------------------------------------------------------------------------------------


def id_of(tx: Translator, x: VariableTracker) -> VariableTracker | None:
    """`id(x)` of an object reached through a Source (an argument, a global, a module's
    parameter): the real object's id, pinned by a guard on `id(<source>)` (a different object
    there compiles again). Anything the trace made itself has no id yet: None."""
    from framejit.frontend.translator import realize

    x = realize(tx, x)
    source = getattr(x, "source", None)
    if source is None:
        return None
    try:
        value = tx.output.read_source(source)
    except Exception:  # noqa: BLE001 - a source the output cannot read back: not modelled
        return None
    ident = id(value)
    tx.output.add_guard(IdSource(source), GuardKind.CONSTANT_MATCH, ident, tx.location_text())
    return ConstantVariable(ident)


# --- functools.singledispatch ---------------------------------------------------------------------


def _dispatch_code() -> Any:
    @functools.singledispatch
    def probe(arg: Any) -> None:
        return None

    return probe.dispatch.__code__


SINGLEDISPATCH_DISPATCH_CODE = _dispatch_code()


def singledispatch_dispatch(tx: Translator, dispatch: Any, args: Args, kwargs: Kwargs) -> Any:
    """`dispatch(cls)` of a singledispatch function, for a class the trace knows: called for
    real (a lookup in the function's registry and cache) and its answer pinned by a STATE_READ
    guard that asks again, so a later `register` for that class compiles again."""
    from framejit.frontend.variables.objects import ClassVariable

    if len(args) != 1 or kwargs:
        return None
    cls_vt = args[0]
    if isinstance(cls_vt, ClassVariable):
        cls = cls_vt.cls
    elif cls_vt.is_constant() and isinstance(cls_vt.as_constant(), type):
        cls = cls_vt.as_constant()
    else:
        return None
    impl = dispatch(cls)
    tx.output.add_guard(
        None, GuardKind.STATE_READ, (dispatch, (cls,), (), impl), tx.location_text()
    )
    return tx.wrap_value(impl, None)


# --- re on constant strings -----------------------------------------------------------------------

# Arguments a folded `re` call may take: patterns, strings, counts, positions and flags.
_RE_ARGUMENTS = (str, bytes, int, re.RegexFlag, re.Pattern)


def _re_fold(fn: Any) -> Any:
    """The handler of `re.<fn>`: called for real while tracing when every argument is a
    constant string, number or flag, or a Pattern (`sub` with a function as the replacement
    runs Python code: not folded). The call reads and fills re's own cache as eager's does,
    and its result (str, lists and tuples of them, None, a Pattern or a Match: all immutable)
    is a constant of the trace. A pattern that does not compile raises `re.error` there, as
    in eager. `re.DEBUG` prints the parsed pattern: not folded."""

    signature = inspect.signature(fn)

    def fold(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        values = [*args, *kwargs.values()]
        if not all(v.is_constant() and type(v.as_constant()) in _RE_ARGUMENTS for v in values):
            return None
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None  # a wrong call: a break, where it raises for real
        flags = bound.arguments.get("flags", ConstantVariable(0)).as_constant()
        if type(flags) not in (int, re.RegexFlag) or flags & re.DEBUG:
            return None
        try:
            value = constant_fold(fn, args, kwargs)
        except Exception as exc:  # re.error, TypeError: the real call raises them too
            raise Unsupported.raised(f"re.{fn.__name__}(...)", exc) from None
        return tx.wrap_constant_result(value)

    return fold


for _fn in (re.compile, re.match, re.fullmatch, re.search, re.sub, re.subn, re.split, re.findall):
    builtin(_fn)(_re_fold(_fn))


# --- the exception being handled: sys.exc_info(), sys.exception() and a traceback -----------------


class TracebackVariable(VariableTracker):
    """The traceback of an exception the trace raised and a `with` block's exit received: it
    exists only when the code runs, so anything but passing it on or `tb is None` is a break."""

    def __repr__(self) -> str:
        return "Traceback()"

    def python_type(self) -> type:
        return types.TracebackType

    def reconstruct(self, cg: CodeGen) -> None:
        raise Unsupported("reconstruct", "the traceback of an exception raised while tracing")


def exception_being_handled() -> bool:
    """Whether the calling thread handles an exception (a STATE_READ guard calls it: the trace
    read `sys.exc_info()` of the frame's caller)."""
    return sys.exc_info()[1] is not None


def _handled_exception(tx: Translator) -> VariableTracker | None:
    """The exception the traced code handles now (the innermost `except` clause or `with`
    exit entered while tracing), else None when the caller handles none either (guarded)."""
    t: Any = tx
    while t is not None:
        if getattr(t, "handled", None):
            return t.handled[-1]
        if getattr(t, "handled_unknown", False):
            raise Unsupported(
                "unsupported_call", "sys.exc_info()", "after leaving a clause entered for real"
            )
        t = t.parent
    handling = exception_being_handled()
    tx.output.add_guard(
        None,
        GuardKind.STATE_READ,
        (exception_being_handled, (), (), handling),
        tx.location_text(),
    )
    if handling:
        raise Unsupported(
            "unsupported_call", "sys.exc_info()", "the caller is handling an exception"
        )
    return None


@builtin(sys.exc_info)
def _exc_info(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if args or kwargs:
        return None
    exc = _handled_exception(tx)
    if exc is None:
        return TupleVariable([ConstantVariable(None)] * 3)
    return TupleVariable([tx.wrap_value(exc.python_type(), None), exc, TracebackVariable()])


if hasattr(sys, "exception"):  # Python 3.11 has only sys.exc_info()

    @builtin(sys.exception)
    def _exception(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if args or kwargs:
            return None
        exc = _handled_exception(tx)
        return ConstantVariable(None) if exc is None else exc

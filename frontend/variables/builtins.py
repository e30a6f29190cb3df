"""Python builtins (and `math`/`operator` functions) called inside traced code.

Each builtin the translator understands has one entry in BUILTINS: a function
`(tx, args, kwargs) -> VariableTracker | None`; None means "not with these arguments", and the
caller then folds a call whose arguments are all constants or refuses it. Pure functions of
constants (`math.sqrt(64)`, `max(2, 3)`) fold without an entry.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import heapq
import inspect
import itertools
import math
import operator
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import TypeSource
from framejit.frontend.variables.base import (
    ConstantVariable,
    ExceptionVariable,
    VariableTracker,
    all_constant,
    constant_fold,
    deferred_number,
    is_numpy_scalar,
)
from framejit.frontend.variables.containers import (
    DictVariable,
    IteratorVariable,
    ListVariable,
    SetVariable,
    TupleVariable,
    container_iterator,
)
from framejit.frontend.variables.generators import (
    LazyEnumerate,
    LazyFilter,
    LazyIteratorVariable,
    LazyMap,
    LazyZip,
    pull,
    user_iterator,
)
from framejit.frontend.variables.symbolic import SizeVariable, SymNodeVariable
from framejit.frontend.variables.tensor import TensorVariable

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator

Args = list[VariableTracker]
Kwargs = dict[str, VariableTracker]
Handler = Callable[["Translator", Args, Kwargs], "VariableTracker | None"]

# Builtins that are pure on constants and may be folded.
PURE = {
    abs,
    all,
    any,
    bool,
    chr,
    divmod,
    float,
    format,
    frozenset,
    int,
    isinstance,
    issubclass,
    len,
    max,
    min,
    ord,
    pow,
    range,
    repr,
    round,
    set,
    slice,
    sorted,
    str,
    sum,
    tuple,
    list,
    hash,
    complex,
    bin,
    hex,
    oct,
    callable,
    type,
    dict,
    reversed,
    enumerate,
    zip,
}
PURE |= {v for v in vars(math).values() if callable(v)}
PURE.add(sys.getrecursionlimit)  # process settings a trace reads as constants
PURE |= {v for k, v in vars(operator).items() if callable(v) and not k.startswith("_")}

BUILTINS: dict[Any, Handler] = {}


def builtin(*fns: Any) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for fn in fns:
            if fn in BUILTINS:
                raise AssertionError(f"builtin {fn} registered twice")
            BUILTINS[fn] = handler
        return handler

    return register


def is_builtin(fn: Any) -> bool:
    try:
        return fn in BUILTINS or fn in PURE or numpy_pure(fn)
    except TypeError:  # unhashable values are never builtins
        return False


def numpy_pure(fn: Any) -> bool:
    """A numpy ufunc (`np.sqrt`) or scalar type (`np.float32`): folded on constants."""
    np = sys.modules.get("numpy")
    if np is None:
        return False
    if isinstance(fn, np.ufunc):
        return True
    return isinstance(fn, type) and issubclass(fn, (np.number, np.bool_))


def call_builtin(tx: Translator, fn: Any, args: Args, kwargs: Kwargs) -> VariableTracker:
    symbolic = _SYMBOLIC_VERSIONS.get(fn) if _hashable(fn) else None
    if (
        symbolic is not None
        and not kwargs
        and any(isinstance(a, SymNodeVariable) for a in args)
        and all(isinstance(a, SymNodeVariable) or a.is_constant() for a in args)
        and (len(args) == 1 or fn in (max, min))
    ):
        return _symbolic_call(tx, symbolic, args)
    if fn in (round, abs) and not kwargs:  # of a float read at a break: computed later
        deferred = deferred_number(fn, *args)
        if deferred is not None:
            return deferred
    handler = BUILTINS.get(fn) if is_builtin(fn) else None
    if handler is not None:
        result = handler(tx, args, kwargs)
        if result is not None:
            return result
    if is_builtin(fn) and (fn in PURE or numpy_pure(fn)) and all_constant(args, kwargs):
        try:
            value = constant_fold(fn, args, kwargs)
        except Exception as exc:
            raise Unsupported.raised(f"{_name(fn)}(...)", exc) from None
        if numpy_pure(fn) and not is_numpy_scalar(value):
            raise Unsupported("unsupported_call", f"numpy.{_name(fn)}", "a numpy array result")
        return tx.wrap_constant_result(value)
    raise Unsupported(
        "unsupported_builtin", f"{_name(fn)}()", ", ".join(a.type_name() for a in args)
    )


def _hashable(fn: Any) -> bool:
    try:
        hash(fn)
    except TypeError:
        return False
    return True


# Builtins and math functions on symbolic sizes that stay symbolic (torch's symbolic versions);
# the rest specialize their arguments (variables/symbolic.py).
_SYMBOLIC_VERSIONS: dict[Any, Any] = {
    max: torch.sym_max,
    min: torch.sym_min,
    abs: operator.abs,
    float: torch.sym_float,
    math.sqrt: getattr(torch, "_sym_sqrt", None),
    math.floor: getattr(math, "floor", None),
    math.ceil: getattr(math, "ceil", None),
}
_SYMBOLIC_VERSIONS = {k: v for k, v in _SYMBOLIC_VERSIONS.items() if v is not None}


def _symbolic_call(tx: Translator, fn: Any, args: Args) -> VariableTracker:
    if fn in (torch.sym_max, torch.sym_min) and len(args) > 2:
        result = args[0]
        for other in args[1:]:
            result = _symbolic_call(tx, fn, [result, other])
        return result
    if fn in (torch.sym_max, torch.sym_min) and len(args) == 1:
        return call_builtin(tx, max if fn is torch.sym_max else min, args[0].unpack(tx), {})
    return tx.output.sym_op(fn, list(args))


def call_builtin_class(
    tx: Translator, cls: type, args: Args, kwargs: Kwargs
) -> VariableTracker | None:
    """Constructing builtin types (`list(...)`, `dict(...)`, `torch.Size(...)`)."""
    if is_builtin(cls):
        return call_builtin(tx, cls, args, kwargs)
    return None


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", repr(fn))


@builtin(len)
def _len(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 1 or kwargs:
        return None
    (x,) = args
    if isinstance(x, TensorVariable):
        if x.fake.dim() == 0:
            raise Unsupported("exception", "len() of a 0-d tensor", "TypeError")
        return tx.output.tensor_size(x, 0)
    if isinstance(x, (TupleVariable, ListVariable)):
        return ConstantVariable(x.length())
    if isinstance(x, DictVariable):
        return ConstantVariable(len(x.items))
    if x.is_constant():
        return ConstantVariable(len(x.as_constant()))
    return x.call_method(tx, "__len__", [], {})


@builtin(isinstance)
def _isinstance(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 2 or not args[1].is_constant():
        return None
    obj, classes = args
    cls = classes.as_constant()
    if isinstance(cls, tuple) and any(_custom_instancecheck(c) is not None for c in cls):
        return None  # a tuple with such a class: run for real
    custom = _custom_instancecheck(cls)
    if custom is not None:
        if not isinstance(custom, types.FunctionType):
            return None  # a metaclass's check written in C: run for real
        # a user metaclass's `__instancecheck__` (`isinstance(x, Is2D)`), inlined
        result = tx.call_function_value(custom, [tx.wrap_value(cls, None), obj], {})
        return ConstantVariable(result.truth(tx))
    t = obj.python_type()
    try:
        return ConstantVariable(issubclass(t, cls))
    except TypeError as exc:
        raise Unsupported.raised("isinstance()", exc) from None


def _custom_instancecheck(cls: Any) -> Any:
    """The `__instancecheck__` of a user metaclass of class `cls`, when it has one that is
    not the subclass test (`type`'s, or a trusted library's such as ABCMeta's): else None."""
    from framejit.frontend.variables.objects import trusted_module_name

    if not isinstance(cls, type):
        return None
    meta = type(cls)
    check = getattr(meta, "__instancecheck__", None)
    if meta is type or check is type.__instancecheck__:
        return None
    if trusted_module_name(str(getattr(meta, "__module__", ""))):  # ABCMeta, typing's
        return None
    return check


@builtin(type)
def _type(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 1 or kwargs:
        return None
    source = getattr(args[0], "source", None)
    if source is not None and not isinstance(args[0], TensorVariable):
        # the class of an object from outside, read through it: `type(self).K` is guarded
        # on the class attribute as `self.__class__.K` is (a class is patched at run time)
        return tx.wrap_source(TypeSource(source))
    return tx.wrap_value(args[0].python_type(), None)


@builtin(callable)
def _callable(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 1:
        return None
    t = args[0].python_type()
    return ConstantVariable(any("__call__" in k.__dict__ for k in t.__mro__))


@builtin(vars)
def _vars(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if kwargs or len(args) > 1:
        return None
    if not args:  # vars(): the frame's locals(), framejit's own names left out
        return tx.locals_dict()
    return args[0].getattr(tx, "__dict__")


@builtin(locals)
def _locals(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if args or kwargs:
        return None
    return tx.locals_dict()


@builtin(getattr)
def _getattr(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if not (2 <= len(args) <= 3) or not args[1].is_constant():
        return None
    obj, name = args[0], args[1].as_constant()
    if len(args) == 3 and not tx.has_attr(obj, name):
        return args[2]
    return obj.getattr(tx, name)


@builtin(object.__getattribute__)
def _object_getattribute(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    from framejit.frontend.variables.objects import (
        GenericGetattrVariable,
        NewObjectVariable,
        UserObjectVariable,
    )

    if len(args) != 2 or kwargs or not isinstance(args[0], (UserObjectVariable, NewObjectVariable)):
        return None
    return GenericGetattrVariable(args[0]).call(tx, args[1:], {})


def _dataclass_type(vt: VariableTracker) -> type | None:
    """The class `fields(x)`/`is_dataclass(x)` look at: x itself when it is a class, else x's."""
    from framejit.frontend.variables.objects import ClassVariable

    if isinstance(vt, ClassVariable):
        return vt.cls
    try:
        t = vt.as_constant() if isinstance(vt, ConstantVariable) else vt.python_type()
    except Unsupported:
        return None
    if isinstance(vt, ConstantVariable) and not isinstance(t, type):
        t = type(t)
    return t if isinstance(t, type) else None


@builtin(dataclasses.fields)
def _dataclass_fields(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    """`fields(obj)`: fixed by obj's class (a dataclass's Field objects are read, not changed)."""
    if len(args) != 1 or kwargs:
        return None
    cls = _dataclass_type(args[0])
    if cls is None or not dataclasses.is_dataclass(cls):
        raise Unsupported("exception", "dataclasses.fields() of a non-dataclass", "TypeError")
    return TupleVariable([ConstantVariable(f) for f in dataclasses.fields(cls)])


@builtin(dataclasses.is_dataclass)
def _is_dataclass(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 1 or kwargs:
        return None
    cls = _dataclass_type(args[0])
    if cls is None:
        return None
    return ConstantVariable(dataclasses.is_dataclass(cls))


@builtin(id)
def _id(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    """`id(f)` of a function, class, module or nn.Module: their identity is pinned by a guard
    (or they are constants of the trace)."""
    from framejit.frontend.variables.functions import UserFunctionVariable
    from framejit.frontend.variables.objects import (
        ClassVariable,
        NNModuleVariable,
        PythonModuleVariable,
    )
    from framejit.guards import GuardKind

    if len(args) != 1 or kwargs:
        return None
    (x,) = args
    if type(x) is UserFunctionVariable:
        if x.source is not None:
            tx.output.add_guard(x.source, GuardKind.ID_MATCH, x.fn, tx.location_text())
        return ConstantVariable(id(x.fn))
    if isinstance(x, ClassVariable):
        return ConstantVariable(id(x.cls))
    if isinstance(x, PythonModuleVariable):
        return ConstantVariable(id(x.mod))
    if type(x) is NNModuleVariable:
        x.pin(tx, "id()")
        return ConstantVariable(id(x.obj))
    from framejit.frontend.variables.stdlib import id_of

    found = id_of(tx, x)
    if found is None:
        raise Unsupported(
            "unsupported_builtin",
            f"id() of a {x.type_name()} made by the traced code",
            "only objects from outside the frame (arguments, globals, module attributes) "
            "have an id while tracing",
        )
    return found


@builtin(inspect.signature)
def _signature(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    """`inspect.signature(f)` of a Python function or bound method: a constant of the trace
    (Signature objects are immutable), with f pinned by an identity guard."""
    from framejit.frontend.variables.functions import UserFunctionVariable, UserMethodVariable
    from framejit.guards import GuardKind

    if len(args) != 1 or any(k != "follow_wrapped" for k in kwargs):
        return None
    follow = kwargs.get("follow_wrapped", ConstantVariable(True))
    if not follow.is_constant():
        return None
    target, bound = args[0], False
    if isinstance(target, UserMethodVariable):
        target, bound = target.fn, True
    if type(target) is not UserFunctionVariable:
        return None
    if target.source is not None:
        tx.output.add_guard(target.source, GuardKind.ID_MATCH, target.fn, tx.location_text())
    sig = inspect.signature(target.fn, follow_wrapped=bool(follow.as_constant()))
    if bound:
        params = list(sig.parameters.values())
        if not params or params[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            return None
        sig = sig.replace(parameters=params[1:])
    return ConstantVariable(sig)


@builtin(hasattr)
def _hasattr(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 2 or not args[1].is_constant():
        return None
    return ConstantVariable(tx.has_attr(args[0], args[1].as_constant()))


def _iterable_items(tx: Translator, x: VariableTracker) -> list[VariableTracker]:
    return x.unpack(tx)


def _has_lazy(args: Args) -> bool:
    """A generator (or a lazy iterator over one), or any other iterator, among the arguments:
    zip and enumerate then take its items one at a time, as Python does (an iterator the
    function goes on using keeps the items they did not take)."""
    return any(isinstance(a, LazyIteratorVariable | IteratorVariable) for a in args)


def _pullable(tx: Translator, x: VariableTracker) -> VariableTracker:
    """An iterator over `x` whose items can be pulled one at a time (lazy ones stay lazy)."""
    if isinstance(x, (IteratorVariable, LazyIteratorVariable)):
        return x
    return IteratorVariable(x.unpack(tx))


def _iterates_in_python(x: VariableTracker) -> bool:
    from framejit.frontend.variables.objects import (
        NewObjectVariable,
        UserObjectVariable,
        python_function,
    )

    if not isinstance(x, (NewObjectVariable, UserObjectVariable)):
        return False
    cls = x.python_type()
    return any(python_function(cls, name) for name in ("__iter__", "__next__", "__getitem__"))


def _python_iterators(tx: Translator, args: Args) -> Args:
    """`args` with each object whose class iterates in Python (an iterator class, a Python
    `__iter__` or `__getitem__`) replaced by `iter(obj)`, as zip, enumerate, map and filter
    call it: a lazy iterator, so its `__next__` runs only for the items taken, in Python's
    order (it may count, or be an iterator the caller goes on reading)."""
    from framejit.frontend.variables.objects import NewObjectVariable, UserObjectVariable

    out = list(args)
    for k, a in enumerate(args):
        if isinstance(a, (NewObjectVariable, UserObjectVariable)):
            out[k] = a.python_iter(tx) or a
    return out


@builtin(list)
def _list(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if kwargs or len(args) > 1:
        return None
    return ListVariable(_iterable_items(tx, args[0]) if args else [])


@builtin(tuple)
def _tuple(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if kwargs or len(args) > 1:
        return None
    return TupleVariable(_iterable_items(tx, args[0]) if args else [])


@builtin(set)
def _set(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    made = _set_of_items(tx, args, kwargs)
    return None if made is None else SetVariable(made)


@builtin(frozenset)
def _frozenset(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    made = _set_of_items(tx, args, kwargs)
    return None if made is None else SetVariable(frozenset(made))


def _set_of_items(tx: Translator, args: Args, kwargs: Kwargs) -> set[Any] | None:
    """`set(d.keys())`, `frozenset(view)`: the constants an iterable the translator tracks
    yields (a dict view, the keys of a Mapping written in Python). Constants fold as usual."""
    if kwargs or len(args) != 1 or args[0].is_constant():
        return None
    items = _iterable_items(tx, args[0])
    if not all(i.is_constant() and not isinstance(i, SymNodeVariable) for i in items):
        return None
    try:
        return {i.as_constant() for i in items}
    except TypeError as exc:  # an unhashable item: Python's error
        raise Unsupported.raised("set(...)", exc) from None


@builtin(dict)
def _dict(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) > 1:
        return None
    items: dict[Any, VariableTracker] = {}
    if args:
        src = args[0]
        mapping = getattr(src, "mapping_items", None)
        copied = mapping() if callable(mapping) else None
        if isinstance(src, DictVariable):
            items.update(src.items)
        elif copied is not None:  # a dict subclass made in the frame
            items.update(copied)
        else:
            for pair in _iterable_items(tx, src):
                parts = pair.unpack(tx)
                if len(parts) != 2:
                    raise Unsupported(
                        "exception", "dict() of items that are not pairs", "ValueError"
                    )
                k, v = parts
                if not k.is_constant():
                    return None
                items[k.as_constant()] = v
    items.update(kwargs)
    return DictVariable(items)


def _fromkeys_of(cls: type) -> Handler:
    def fromkeys(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        """`dict.fromkeys(keys, value=None)`: every key maps to the same value."""
        if kwargs or not 1 <= len(args) <= 2:
            return None
        keys = _iterable_items(tx, args[0])
        if not all(k.is_constant() for k in keys):
            return None
        value = args[1] if len(args) == 2 else ConstantVariable(None)
        return DictVariable({k.as_constant(): value for k in keys}, cls=cls)

    return fromkeys


builtin(dict.fromkeys)(_fromkeys_of(dict))
builtin(collections.OrderedDict.fromkeys)(_fromkeys_of(collections.OrderedDict))


@builtin(enumerate)
def _enumerate(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    start = kwargs.get("start", args[1] if len(args) > 1 else ConstantVariable(0))
    if not args or not start.is_constant():
        return None
    first = start.as_constant()
    args = _python_iterators(tx, args[:1])
    if _has_lazy(args[:1]):
        return LazyEnumerate(args[0], first)
    return IteratorVariable(
        [
            TupleVariable([ConstantVariable(first + i), item])
            for i, item in enumerate(_iterable_items(tx, args[0]))
        ]
    )


@builtin(zip)
def _zip(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    strict = kwargs.get("strict", ConstantVariable(False)).as_constant()
    args = _python_iterators(tx, args)
    if _has_lazy(args):
        return LazyZip([_pullable(tx, a) for a in args], bool(strict))
    columns = [_iterable_items(tx, a) for a in args]
    if strict and len({len(c) for c in columns}) > 1:
        raise Unsupported("exception", "zip(strict=True)", "ValueError: lengths differ")
    return IteratorVariable([TupleVariable(list(row)) for row in zip(*columns)])


@builtin(reversed)
def _reversed(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 1 or kwargs:
        return None
    return IteratorVariable(_iterable_items(tx, args[0])[::-1])


@builtin(iter)
def _iter(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) == 2 and not kwargs:  # iter(fn, sentinel)
        from framejit.frontend.variables.stdlib import call_iterator

        return call_iterator(tx, args[0], args[1])
    if len(args) != 1 or kwargs:
        return None
    if isinstance(args[0], (IteratorVariable, LazyIteratorVariable)):
        return args[0]
    from framejit.frontend.variables.objects import NewObjectVariable, UserObjectVariable

    if isinstance(args[0], (NewObjectVariable, UserObjectVariable)):
        it = args[0].python_iter(tx)
        if it is not None:
            return it
    return container_iterator(tx, args[0]) or IteratorVariable(_iterable_items(tx, args[0]))


@builtin(next)
def _next(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if args and (user := user_iterator(args[0])) is not None:
        args = [user, *args[1:]]  # an iterator object: next() calls its __next__
    if not args or not isinstance(args[0], (IteratorVariable, LazyIteratorVariable)):
        return None
    item = pull(tx, args[0])
    if item is None:
        if len(args) == 2:
            return args[1]
        raise Unsupported("exception", "next() on an exhausted iterator", "StopIteration")
    return item


@builtin(map)
def _map(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) < 2 or kwargs:
        return None
    # lazy, as in Python: each item is computed when the consumer asks for it
    return LazyMap(args[0], [_pullable(tx, a) for a in _python_iterators(tx, args[1:])])


@builtin(filter)
def _filter(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 2 or kwargs:
        return None
    return LazyFilter(args[0], _pullable(tx, _python_iterators(tx, args[1:])[0]))


@builtin(sum)
def _sum(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if not args or len(args) > 2:
        return None
    items = _iterable_items(tx, args[0])
    total = kwargs.get("start", args[1] if len(args) == 2 else ConstantVariable(0))
    if all(i.is_constant() for i in items) and total.is_constant():
        return ConstantVariable(sum((i.as_constant() for i in items), total.as_constant()))
    for item in items:
        total = tx.binary_op(operator.add, total, item)
    return total


def _minmax(fn: Any) -> Handler:
    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if not args or set(kwargs) - {"key", "default"} or (len(args) > 1 and "default" in kwargs):
            return None
        items = _iterable_items(tx, args[0]) if len(args) == 1 else args
        key_fn = kwargs.get("key")
        if key_fn is not None and key_fn.is_constant() and key_fn.as_constant() is None:
            key_fn = None
        if key_fn is None and any(isinstance(i, TensorVariable) for i in items):
            raise Unsupported(
                "data_dependent",
                f"{fn.__name__}() over tensors",
                f"use torch.{fn.__name__}imum or torch.{fn.__name__}",
            )
        if all(i.is_constant() for i in items) and all_constant([], kwargs):
            return tx.wrap_constant_result(
                fn(
                    [i.as_constant() for i in items],
                    **{k: v.as_constant() for k, v in kwargs.items()},
                )
            )
        if not items:
            if "default" in kwargs:
                return kwargs["default"]
            raise Unsupported("exception", f"{fn.__name__}()", "ValueError: an empty sequence")
        # the first item whose key no later key beats, as Python picks it
        keys = [key_fn.call(tx, [i], {}) if key_fn is not None else i for i in items]
        beats = operator.gt if fn is max else operator.lt
        best = 0
        for k in range(1, len(items)):
            if tx.compare_op(beats, keys[k], keys[best]).truth(tx):
                best = k
        return items[best]

    return handler


builtin(max)(_minmax(max))
builtin(min)(_minmax(min))


def _unary(op: Any) -> Handler:
    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if len(args) != 1 or kwargs or args[0].is_constant():
            return None  # constants fold through PURE
        return tx.unary_op(op, args[0])

    return handler


def _binary(op: Any, compare: bool = False) -> Handler:
    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if len(args) != 2 or kwargs or all_constant(args):
            return None
        return (tx.compare_op if compare else tx.binary_op)(op, args[0], args[1])

    return handler


for _op in (operator.neg, operator.pos, operator.invert):
    builtin(_op)(_unary(_op))
builtin(abs, operator.abs)(_unary(operator.abs))
builtin(pow)(_binary(operator.pow))
# operator-module names of the binary operators (`and_` is `&`); user classes' dunders are
# followed for the first group (frontend/operators.py)
DUNDER_OPERATORS = (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and_",
    "or_",
    "xor",
)
BINARY_OPERATORS = (*DUNDER_OPERATORS, "lshift", "rshift")
for _opname in (*BINARY_OPERATORS, *("i" + n.rstrip("_") for n in DUNDER_OPERATORS)):
    builtin(getattr(operator, _opname))(_binary(getattr(operator, _opname)))
for _opname in ("lt", "le", "eq", "ne", "gt", "ge"):
    builtin(getattr(operator, _opname))(_binary(getattr(operator, _opname), compare=True))


@builtin(operator.getitem)
def _op_getitem(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    return tx.getitem(args[0], args[1]) if len(args) == 2 and not kwargs else None


@builtin(operator.not_)
def _op_not(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    return ConstantVariable(not args[0].truth(tx)) if len(args) == 1 else None


@builtin(operator.truth)
def _op_truth(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    return ConstantVariable(args[0].truth(tx)) if len(args) == 1 else None


@builtin(operator.is_)
def _op_is(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    return None if len(args) != 2 else ConstantVariable(tx.is_op(args[0], args[1]))


@builtin(operator.is_not)
def _op_is_not(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    return None if len(args) != 2 else ConstantVariable(not tx.is_op(args[0], args[1]))


@builtin(sorted)
def _sorted(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    """`sorted(items, key=..., reverse=...)`: the order comes from constant sort keys, so the
    items themselves may be anything (tensors too). A key is `key(item)` when a key function
    is given (traced), else the item when it is a constant, else the first element of a tuple
    item when those are distinct constants (`sorted(d.items())`: tuple order never looks past
    them)."""
    if len(args) != 1 or set(kwargs) - {"key", "reverse"}:
        return None
    reverse = kwargs.get("reverse", ConstantVariable(False))
    if not reverse.is_constant():
        return None
    items = _iterable_items(tx, args[0])
    key_fn = kwargs.get("key")
    if all(i.is_constant() for i in items) and all_constant([], kwargs):
        values = sorted(
            (i.as_constant() for i in items), **{k: v.as_constant() for k, v in kwargs.items()}
        )
        return ListVariable([ConstantVariable(v) for v in values])
    if key_fn is not None and not (key_fn.is_constant() and key_fn.as_constant() is None):
        keys = [key_fn.call(tx, [item], {}) for item in items]
    else:
        firsts = [i.items[0] for i in items if isinstance(i, TupleVariable) and i.items]
        constant = len(firsts) == len(items) and all(f.is_constant() for f in firsts)
        distinct = constant and len({repr(f.as_constant()) for f in firsts}) == len(firsts)
        keys = firsts if distinct else items
    if all(k.is_constant() for k in keys):
        values: list[Any] = [k.as_constant() for k in keys]
    elif any(isinstance(k, TensorVariable) for k in keys):
        raise Unsupported("data_dependent", "sorted() of non-constant values", "tensors")
    else:  # objects with `__lt__`: Python's own sort, each comparison traced
        values = ordered(tx, keys)
    order = sorted(range(len(items)), key=values.__getitem__, reverse=reverse.as_constant())
    return ListVariable([items[k] for k in order])


class _Ordered:
    """An item of the trace as CPython's sort, heapq and bisect code sees it: its `<` is the
    traced comparison (a user `__lt__` inlined, reflected as Python reflects it), which must
    give a constant. Running the real C algorithms over these makes exactly the comparisons,
    in the order, that the program makes; a tensor comparison, whose truth is data, is a
    break ("data_dependent") where it happens."""

    __slots__ = ("tx", "vt")

    def __init__(self, tx: Translator, vt: VariableTracker) -> None:
        self.tx = tx
        self.vt = vt

    def __lt__(self, other: _Ordered) -> bool:
        return self.tx.compare_op(operator.lt, self.vt, other.vt).truth(self.tx)


def ordered(tx: Translator, items: list[VariableTracker]) -> list[Any]:
    return [_Ordered(tx, item) for item in items]


def _heap_list(tx: Translator, heap: VariableTracker) -> list[_Ordered] | None:
    """The items of a list of the trace (heapq takes a list only, not a subclass)."""
    if type(heap) is not ListVariable:
        return None
    return ordered(tx, heap.items)


def _heap_call(fn: Any, takes_item: bool) -> Handler:
    """heappush, heappop, heapify, heapreplace, heappushpop: the C function over the list's
    items as `_Ordered`, then the list's new order written back (a mutation of the list)."""

    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if kwargs or len(args) != 1 + takes_item:
            return None
        heap = _heap_list(tx, args[0])
        if heap is None:
            return None
        try:
            result = fn(heap, *ordered(tx, args[1:]))
        except IndexError as exc:  # heappop/heapreplace of an empty heap
            raise Unsupported.raised(f"heapq.{fn.__name__}()", exc) from None
        args[0].replace_items(tx, [w.vt for w in heap])
        return ConstantVariable(None) if result is None else result.vt

    return handler


for _name_, _takes_item in (
    ("heappush", True),
    ("heappop", False),
    ("heapify", False),
    ("heapreplace", True),
    ("heappushpop", True),
    # the max-heap forms heapq's own nsmallest uses (private before Python 3.14)
    ("_heapify_max", False),
    ("_heappop_max", False),
    ("_heapreplace_max", True),
):
    if hasattr(heapq, _name_):
        builtin(getattr(heapq, _name_))(_heap_call(getattr(heapq, _name_), _takes_item))


def _bisect_call(fn: Any, search: Any, inserts: bool) -> Handler:
    """bisect_left/right and insort_left/right over a list or tuple of the trace, with
    constant `lo`/`hi` and an optional traced `key`: the C `search` over `_Ordered` items."""

    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if not 2 <= len(args) <= 4 or set(kwargs) - {"lo", "hi", "key"}:
            return None
        seq, x = args[0], args[1]
        if type(seq) not in ((ListVariable,) if inserts else (ListVariable, TupleVariable)):
            return None
        bounds = dict(zip(("lo", "hi"), args[2:])) | {
            k: kwargs[k] for k in ("lo", "hi") if k in kwargs
        }
        if not all(b.is_constant() for b in bounds.values()):
            return None
        options: dict[str, Any] = {k: b.as_constant() for k, b in bounds.items()}
        key_fn = kwargs.get("key")
        if key_fn is not None and not (key_fn.is_constant() and key_fn.as_constant() is None):
            options["key"] = lambda w: _Ordered(tx, key_fn.call(tx, [w.vt], {}))
        items = ordered(tx, seq.items)
        probe = _Ordered(tx, x)
        if inserts and "key" in options:
            probe = options["key"](probe)
        try:
            index = search(items, probe, **options)
        except (ValueError, TypeError) as exc:  # a negative lo; a bad key
            raise Unsupported.raised(f"bisect.{fn.__name__}()", exc) from None
        if not inserts:
            return ConstantVariable(index)
        seq.replace_items(tx, [*seq.items[:index], x, *seq.items[index:]])
        return ConstantVariable(None)

    return handler


for _fn_, _search_ in (
    (bisect.bisect_left, bisect.bisect_left),
    (bisect.bisect_right, bisect.bisect_right),
    (bisect.insort_left, bisect.bisect_left),
    (bisect.insort_right, bisect.bisect_right),
):
    builtin(_fn_)(_bisect_call(_fn_, _search_, inserts=_fn_ is not _search_))


def _to_python_number(kind: type) -> Handler:
    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if args and isinstance(args[0], TensorVariable):
            raise Unsupported("data_dependent", f"{kind.__name__}(tensor)")
        if len(args) == 1 and kind is bool and not args[0].is_constant():
            return ConstantVariable(args[0].truth(tx))
        return None

    return handler


builtin(int)(_to_python_number(int))
builtin(float)(_to_python_number(float))
builtin(bool)(_to_python_number(bool))


def _exception_text(fn: Any) -> Handler:
    # `str(err)` in an `except ValueError as err:` clause: the message of the exception the
    # trace raised, when its arguments are constants
    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if len(args) != 1 or kwargs or not isinstance(args[0], ExceptionVariable):
            return None
        exc = args[0]
        if exc.args is None or not all(a.is_constant() for a in exc.args):
            return None
        return ConstantVariable(fn(exc.exc_type(*[a.as_constant() for a in exc.args])))

    return handler


builtin(str)(_exception_text(str))
builtin(repr)(_exception_text(repr))


@builtin(print)
def _print(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    raise Unsupported("unsupported_call", "print()", "printing happens outside the graph")


def _any_all(fn: Any) -> Handler:
    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        if len(args) != 1 or kwargs or args[0].is_constant():
            return None  # constants fold through PURE
        # item by item, stopping where Python's any/all stop: a generator or map is left
        # where eager leaves it, and its later items are never computed
        it = _pullable(tx, _python_iterators(tx, args[:1])[0])
        while (item := pull(tx, it)) is not None:
            if isinstance(item, TensorVariable):
                raise Unsupported("data_dependent", f"{fn.__name__}() over tensors")
            if item.truth(tx) is (fn is any):
                return ConstantVariable(fn is any)
        return ConstantVariable(fn is all)

    return handler


builtin(any)(_any_all(any))
builtin(all)(_any_all(all))


@builtin(torch.Size)
def _size(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if not args:
        return ConstantVariable(torch.Size())
    if len(args) == 1 and not kwargs:
        items = _iterable_items(tx, args[0])
        if any(isinstance(i, SymNodeVariable) for i in items):  # symbolic sizes stay symbolic
            return SizeVariable(items)
        if all(i.is_constant() for i in items):
            return ConstantVariable(torch.Size([i.as_constant() for i in items]))
    return None


@builtin(super)
def _super(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    from framejit.frontend.variables.objects import SuperVariable

    if kwargs:
        return None
    if len(args) == 2 and args[0].is_constant():
        return SuperVariable(args[0].as_constant(), args[1])
    if args:
        return None
    return tx.zero_arg_super()


@builtin(setattr)
def _setattr(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 3 or kwargs or not args[1].is_constant():
        return None
    args[0].setattr(tx, args[1].as_constant(), args[2])
    return ConstantVariable(None)


@builtin(delattr)
def _delattr(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 2 or kwargs or not args[1].is_constant():
        return None
    args[0].delattr(tx, args[1].as_constant())  # as `del obj.name` does
    return ConstantVariable(None)


@builtin(functools.reduce)
def _reduce(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if not 2 <= len(args) <= 3 or kwargs:
        return None
    fn, items = args[0], _iterable_items(tx, args[1])
    if len(args) == 3:
        acc = args[2]
    elif items:
        acc, items = items[0], items[1:]
    else:
        raise Unsupported("exception", "reduce() of an empty sequence", "TypeError")
    for item in items:
        acc = fn.call(tx, [acc, item], {})
    return acc


# --- itertools: the finite, pure ones. Each takes items from its inputs only as far as Python's
# would (islice stops early, so an iterator passed in keeps the rest).


def _iterator_input(args: Args) -> bool:
    """An iterator among the inputs (a generator, `iter(xs)`): its consumer could see how far it
    was read, which the eager forms below do not keep. Containers are fine."""
    return any(isinstance(a, LazyIteratorVariable) for a in args) or any(
        isinstance(a, IteratorVariable) and not a.private for a in args
    )


@builtin(itertools.chain)
def _chain(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if kwargs or _iterator_input(args):
        return None
    return IteratorVariable([item for a in args for item in _iterable_items(tx, a)])


@builtin(itertools.islice)
def _islice(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if kwargs or not 2 <= len(args) <= 4 or _iterator_input(args[:1]):
        return None
    if not all(a.is_constant() for a in args[1:]) or _iterates_in_python(args[0]):
        return None
    bounds = slice(*[a.as_constant() for a in args[1:]])
    return IteratorVariable(_iterable_items(tx, args[0])[bounds])


@builtin(itertools.accumulate)
def _accumulate(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) not in (1, 2) or _iterator_input(args[:1]) or set(kwargs) - {"func", "initial"}:
        return None
    fn = args[1] if len(args) == 2 else kwargs.get("func")
    items = _iterable_items(tx, args[0])
    initial = kwargs.get("initial")
    if initial is not None and not (initial.is_constant() and initial.as_constant() is None):
        items = [initial, *items]
    out: list[VariableTracker] = []
    for item in items:
        if not out:
            out.append(item)
        elif fn is None or (fn.is_constant() and fn.as_constant() is None):
            out.append(tx.binary_op(operator.add, out[-1], item))
        else:
            out.append(fn.call(tx, [out[-1], item], {}))
    return IteratorVariable(out)


@builtin(itertools.zip_longest)
def _zip_longest(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if set(kwargs) - {"fillvalue"} or _iterator_input(args):
        return None
    fill = kwargs.get("fillvalue", ConstantVariable(None))
    columns = [_iterable_items(tx, a) for a in args]
    rows = itertools.zip_longest(*columns, fillvalue=fill)
    return IteratorVariable([TupleVariable(list(row)) for row in rows])


@builtin(itertools.starmap)
def _starmap(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 2 or kwargs or _iterator_input(args[1:]):
        return None
    fn, rows = args[0], _iterable_items(tx, args[1])
    return IteratorVariable([fn.call(tx, row.unpack(tx), {}) for row in rows])


@builtin(itertools.pairwise)
def _pairwise(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    if len(args) != 1 or kwargs or _iterator_input(args):
        return None
    items = _iterable_items(tx, args[0])
    return IteratorVariable([TupleVariable([a, b]) for a, b in zip(items, items[1:])])


def _index_combinatoric(fn: Any) -> Handler:
    """`itertools.product`, `permutations`, `combinations`, `combinations_with_replacement`
    over known items (a container, a range): the index tuples Python's own function gives,
    turned into tuples of the items, all at once (they are finite and need no values)."""

    def handler(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
        allowed = {"repeat"} if fn is itertools.product else {"r"}
        if set(kwargs) - allowed or not args or not all_constant([], kwargs):
            return None
        given = list(args) if fn is itertools.product else args[:1]
        rest = [] if fn is itertools.product else args[1:]
        if _iterator_input(given) or not all(a.is_constant() for a in rest):
            return None
        pools = [_iterable_items(tx, a) for a in given]
        options = [a.as_constant() for a in rest]
        keywords = {k: v.as_constant() for k, v in kwargs.items()}
        try:
            picks = list(fn(*[range(len(p)) for p in pools], *options, **keywords))
        except (TypeError, ValueError) as exc:
            raise Unsupported("exception", f"itertools.{fn.__name__}", repr(exc)) from None
        if len(picks) > 100_000:
            return None
        if fn is itertools.product:
            repeated = pools * keywords.get("repeat", 1)
            return IteratorVariable(
                [TupleVariable([repeated[n][i] for n, i in enumerate(p)]) for p in picks]
            )
        return IteratorVariable([TupleVariable([pools[0][i] for i in p]) for p in picks])

    return handler


for _fn in (
    itertools.product,
    itertools.permutations,
    itertools.combinations,
    itertools.combinations_with_replacement,
):
    builtin(_fn)(_index_combinatoric(_fn))


@builtin(tuple.__new__)
def _tuple_new(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    """`tuple.__new__(cls, items)`: a namedtuple's `_make` (and its `_replace`) build one so."""
    from framejit.frontend.variables.containers import NamedTupleVariable

    if kwargs or len(args) != 2 or not args[0].is_constant():
        return None
    cls = args[0].as_constant()
    if not (isinstance(cls, type) and issubclass(cls, tuple)):
        return None
    items = _iterable_items(tx, args[1])
    if cls is tuple:
        return TupleVariable(items)
    fields = getattr(cls, "_fields", None)
    if fields is None or cls.__new__ is tuple.__new__:
        return None  # a tuple subclass that is not a namedtuple's
    if len(items) != len(fields):
        raise Unsupported(
            "exception",
            f"{cls.__name__}._make",
            f"TypeError: expected {len(fields)} arguments, got {len(items)}",
        )
    return NamedTupleVariable(cls, list(items))


@builtin(itertools.repeat)
def _repeat(tx: Translator, args: Args, kwargs: Kwargs) -> VariableTracker | None:
    times = kwargs.get("times", args[1] if len(args) == 2 else None)
    if not args or times is None or not times.is_constant():
        return None  # an endless repeat: only Python knows when its consumer stops
    return IteratorVariable([args[0]] * max(times.as_constant(), 0))


from framejit.frontend.variables import stdlib as _stdlib  # noqa: E402, F401 (registers builtins)

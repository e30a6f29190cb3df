"""Operators on VariableTrackers: arithmetic, comparisons, `is`, subscripts.

A mixin of the Translator (`tx.binary_op(...)` and friends): tensors go to the graph, constants
fold, sequences concatenate and repeat, and a user class's Python operator methods
(`__add__`, `__radd__`, ...) are inlined the way Python would call them.
"""

from __future__ import annotations

import collections
import math
import operator
import types
from typing import Any

import torch
from framejit.frontend.dynamic import ShapeCheck
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import ConstSource
from framejit.frontend.variables.base import (
    BINARY_OPS,
    ConstantVariable,
    LazyNumberVariable,
    VariableTracker,
    deferred_number,
)
from framejit.frontend.variables.builtins import BINARY_OPERATORS, DUNDER_OPERATORS
from framejit.frontend.variables.containers import (
    BaseSequence,
    DataclassVariable,
    DictVariable,
    ListVariable,
    SetVariable,
    SliceVariable,
    TupleVariable,
)
from framejit.frontend.variables.functions import (
    UserFunctionVariable,
)
from framejit.frontend.variables.objects import (
    NewObjectVariable,
    UserObjectVariable,
    base_operand,
    python_function,
)
from framejit.frontend.variables.symbolic import SizeVariable, SymNodeVariable
from framejit.frontend.variables.tensor import TensorVariable
from framejit.guards import GuardKind

_NUMBERS = (int, float, bool)
_ORDERINGS = {operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">="}


def _plain_number(vt: VariableTracker) -> bool:
    """A constant int or float that Python's repr writes back as itself (not inf or NaN)."""
    if not isinstance(vt, ConstantVariable) or isinstance(vt, LazyNumberVariable):
        return False
    value = vt.value
    return type(value) is int or (type(value) is float and math.isfinite(value))


def _negative_number(vt: VariableTracker) -> bool:
    if not vt.is_constant():
        return False
    value = vt.as_constant()
    if isinstance(value, float):
        return math.copysign(1.0, value) < 0  # -0.0 too: `-0.0 ** t` is `-(0.0 ** t)`
    return isinstance(value, int) and not isinstance(value, bool) and value < 0


def _symbolic_operands(a: VariableTracker, b: VariableTracker) -> bool:
    """One operand a symbolic size and the other one too, or a plain number."""
    if not (isinstance(a, SymNodeVariable) or isinstance(b, SymNodeVariable)):
        return False
    other = b if isinstance(a, SymNodeVariable) else a
    return isinstance(other, SymNodeVariable) or (
        isinstance(other, ConstantVariable) and type(other.value) in _NUMBERS
    )


def _made_in_frame(vt: VariableTracker) -> bool:
    """A mutable object the frame made (a list, dict or set it built, an instance of a class
    it created): the one object its tracker stands for, tracked by no other."""
    return vt.source is None and (
        type(vt) in (ListVariable, DictVariable, SetVariable, DataclassVariable)
        or isinstance(vt, NewObjectVariable)
    )


def _tracked_tuple(value: VariableTracker, other: VariableTracker) -> VariableTracker:
    """A constant tuple (or torch.Size: a distribution's empty event shape) as a
    TupleVariable (SizeVariable) when `other` is a tracked sequence."""
    if (
        isinstance(value, ConstantVariable)
        and type(value.value) in (tuple, torch.Size)
        and isinstance(other, BaseSequence)
    ):
        items = [ConstantVariable(item) for item in value.value]
        return SizeVariable(items) if type(value.value) is torch.Size else TupleVariable(items)
    return value


class OperatorsMixin:
    # --- operators -------------------------------------------------------------------------------
    def binary_op(self, op: Any, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            if not isinstance(a, TensorVariable):
                # `n = 0; n += t`: a number has no in-place form, Python computes `n + t`
                op = _OUT_OF_PLACE.get(op, op)
                if op is operator.pow and _negative_number(a):
                    # torch.fx would write `-2.0 ** t`, which Python reads as `-(2.0 ** t)`
                    op = torch.pow
            return self.output.call_op("call_function", op, [a, b], {})
        if _symbolic_operands(a, b):
            return self._sym_op(op, [a, b])
        if isinstance(a, SetVariable) and op in _SET_INPLACE and type(a.items) is set:
            return a.mutate(self, _SET_INPLACE[op], [b], {})  # `s |= t` changes s itself
        inplace = self._inplace_container_op(op, a, b)
        if inplace is not None:
            return inplace
        deferred = deferred_number(op, a, b)  # a running total of floats read at breaks
        if deferred is not None:
            return deferred
        if a.is_constant() and b.is_constant() and not (_holds_symbols(a) or _holds_symbols(b)):
            try:
                return self.wrap_constant_result(op(a.as_constant(), b.as_constant()))
            except Exception as exc:
                raise Unsupported(
                    "exception", f"{op.__name__} on constants", f"raises {exc!r}"
                ) from None
        plain = (ListVariable, TupleVariable)
        if op in (operator.add, operator.iadd):
            # `outs = ()` then `outs += (h,)`: a constant tuple meets a tracked one; a tuple's
            # `+=` is `+`
            a, b = _tracked_tuple(a, b), _tracked_tuple(b, a)
            if isinstance(a, TupleVariable) and isinstance(b, BaseSequence):
                op = operator.add
        if (
            isinstance(a, BaseSequence)
            and isinstance(b, BaseSequence)
            and op is operator.add
            and (a.python_type() is b.python_type() or isinstance(a, TupleVariable))
        ):
            if isinstance(a, SizeVariable) or isinstance(b, SizeVariable):
                # `x.size()[:-1] + (n, d)` is a torch.Size (either way round)
                return SizeVariable(a.items + b.items)
            return (
                type(a)(a.items + b.items) if type(a) in plain else TupleVariable(a.items + b.items)
            )
        if isinstance(b, BaseSequence) and a.is_constant() and op is operator.mul:
            a, b = b, a  # `2 * seq`
        if isinstance(a, BaseSequence) and b.is_constant() and op in (operator.mul, operator.imul):
            items = a.items * b.as_constant()
            if isinstance(a, SizeVariable):  # `x.shape * 2` is a torch.Size
                return SizeVariable(items)
            return type(a)(items) if type(a) in plain else TupleVariable(items)
        result = self._user_operator(op, a, b)
        if result is not None:
            return result
        raise Unsupported("unsupported_object", f"{a.type_name()} {_symbol(op)} {b.type_name()}")

    def _inplace_container_op(
        self, op: Any, a: VariableTracker, b: VariableTracker
    ) -> VariableTracker | None:
        """`lst += other`, `lst *= n`, `d |= other`: Python changes the object itself (an alias
        or the caller's argument sees it), so these are never folded into a new constant."""
        if op not in (operator.iadd, operator.imul, operator.ior):
            return None
        if isinstance(a, ListVariable):
            if op is operator.iadd:
                a.mutate(self, "extend", [b], {})
                return a
            if op is operator.imul and type(a) is ListVariable and b.is_constant():
                count = b.as_constant()
                if isinstance(count, int) and not isinstance(count, bool):
                    a.mutate(
                        self,
                        "__setitem__",
                        [ConstantVariable(slice(None)), ListVariable(a.items * count)],
                        {},
                    )
                    return a
            raise Unsupported("unsupported_object", f"{a.type_name()} {_symbol(op)}= ...")
        if isinstance(a, DictVariable) and op is operator.ior:
            if a.cls in (dict, collections.OrderedDict) and isinstance(b, DictVariable):
                a.call_method(self, "update", [b], {})
                return a
            raise Unsupported("unsupported_object", f"{a.type_name()} |= {b.type_name()}")
        return None

    def _user_operator(
        self, op: Any, a: VariableTracker, b: VariableTracker
    ) -> VariableTracker | None:
        """`a + b` where a class of a or b defines `__add__` / `__radd__` (and so on) in Python:
        inline that method, as Python would call it."""
        names = _DUNDERS.get(op)
        if names is None:
            return None
        forward, reflected, inplace = names
        for obj, other, name in ((a, b, inplace), (a, b, forward), (b, a, reflected)):
            if name is None or not isinstance(obj, (UserObjectVariable, NewObjectVariable)):
                continue
            method = python_function(obj.python_type(), name)
            if method is not None:
                result = UserFunctionVariable(method).call(self, [obj, other], {})
                if not (result.is_constant() and result.as_constant() is NotImplemented):
                    return result
        return None

    def compare_op(self, op: Any, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            return self.output.call_op("call_function", op, [a, b], {})
        if _symbolic_operands(a, b):
            return self._sym_op(op, [a, b])
        outcome = self._compare_lazy(op, a, b)
        if outcome is not None:
            return outcome
        if a.is_constant() and b.is_constant():
            return self.wrap_constant_result(op(a.as_constant(), b.as_constant()))
        result = self._user_compare(op, a, b)
        if result is not None:
            return result
        names = _DUNDERS[op][:2] if op in _DUNDERS else None
        base_a, base_b = (v if names is None else base_operand(v, names) for v in (a, b))
        if base_a is not a or base_b is not b:  # `procs == [p]` of a list subclass: its items
            return self.compare_op(op, base_a, base_b)
        if op in (operator.eq, operator.ne) and _is_object(a) and _is_object(b):
            same = a is b or (
                getattr(a, "obj", None) is not None
                and getattr(a, "obj", None) is getattr(b, "obj", None)
            )
            return ConstantVariable(same if op is operator.eq else not same)
        fa, fb = _function_of(a), _function_of(b)
        if op in (operator.eq, operator.ne) and fa is not None and fb is not None:
            # a function's `==` is identity (`type(self).__init__ != cls.__init__` in
            # torch.distributions' expand)
            return ConstantVariable((fa is fb) == (op is operator.eq))
        raise Unsupported("unsupported_object", f"{a.type_name()} {_symbol(op)} {b.type_name()}")

    def _user_compare(
        self, op: Any, a: VariableTracker, b: VariableTracker
    ) -> VariableTracker | None:
        """`a == b`, `a < b`... where a class of a or b defines the comparison in Python: as
        for `+` (`_user_operator`: the reflected method on NotImplemented); `!=` where no class
        defines `__ne__` is the negation of `==`, as object's `__ne__` does."""
        result = self._user_operator(op, a, b)
        if result is None and op is operator.ne and not any(_defines_ne(v) for v in (a, b)):
            equal = self._user_operator(operator.eq, a, b)
            if equal is not None:
                return ConstantVariable(not equal.truth(self))
        return result

    def _compare_lazy(
        self, op: Any, a: VariableTracker, b: VariableTracker
    ) -> VariableTracker | None:
        """A float that changes between calls (`random.random() < p`, a schedule's value)
        compared with a plain number: guarded on the comparison's outcome, not on its value,
        so the next value that compares the same way reuses the graph."""
        if op not in _ORDERINGS:
            return None
        if isinstance(a, LazyNumberVariable) and _plain_number(b):
            lazy, other, text = a, b.as_constant(), "(___fjs0 {} {!r})"
        elif isinstance(b, LazyNumberVariable) and _plain_number(a):
            lazy, other, text = b, a.as_constant(), "({1!r} {0} ___fjs0)"
        else:
            return None
        result = op(*(v.value_unguarded if v is lazy else other for v in (a, b)))
        check = ShapeCheck(
            f"{text.format(_ORDERINGS[op], other)} is {bool(result)}", ((lazy.source, None),)
        )
        self.output.add_guard(None, GuardKind.SHAPE_EXPR, check, self.location_text())
        return ConstantVariable(result)

    def unary_op(self, op: Any, a: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable):
            return self.output.call_op("call_function", op, [a], {})
        if isinstance(a, SymNodeVariable) and op is not operator.not_:
            return self._sym_op(op, [a])
        deferred = deferred_number(op, a)  # `-lr` of a float read without a guard
        if deferred is not None:
            return deferred
        if a.is_constant():
            return self.wrap_constant_result(op(a.as_constant()))
        name = _UNARY_DUNDERS.get(op)
        if name is not None and isinstance(a, (UserObjectVariable, NewObjectVariable)):
            method = python_function(a.python_type(), name)  # `-vec`: the class's __neg__
            if method is not None:
                return UserFunctionVariable(method).call(self, [a], {})
        raise Unsupported("unsupported_object", f"{_symbol(op)}{a.type_name()}")

    def _sym_op(self, op: Any, args: list[VariableTracker]) -> VariableTracker:
        """Arithmetic or a comparison on symbolic sizes: a graph node (see variables/symbolic.py);
        an operation SymInts do not support specializes its operands instead."""
        try:
            return self.output.sym_op(op, args)
        except (TypeError, NotImplementedError):
            values = [a.as_constant() for a in args]
            try:
                return self.wrap_constant_result(op(*values))
            except Exception as exc:
                raise Unsupported(
                    "exception", f"{op.__name__} on constants", f"raises {exc!r}"
                ) from None

    def is_op(self, a: VariableTracker, b: VariableTracker) -> bool:
        if a is b:
            return True
        if isinstance(a, SymNodeVariable) or isinstance(b, SymNodeVariable):
            other = b if isinstance(a, SymNodeVariable) else a
            if not (isinstance(other, SymNodeVariable) or other.is_constant()):
                return False
            return a.as_constant() is b.as_constant()
        if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
            self.output.identity_sensitive = True
            return a.node is b.node
        if a.is_constant() and b.is_constant():
            return a.as_constant() is b.as_constant()
        if (
            a.is_constant()
            and a.as_constant() is None
            or b.is_constant()
            and b.as_constant() is None
        ):
            return False  # a non-constant value is never None
        for const, other in ((a, b), (b, a)):  # `obj is True`: an object is not a singleton
            if (
                const.is_constant()
                and not other.is_constant()
                and any(const.as_constant() is v for v in (True, False, Ellipsis))
            ):
                return False
        if hasattr(a, "obj") and hasattr(b, "obj"):
            for v in (a, b):  # a module shared by the instances of its class: this one now
                pin = getattr(v, "pin", None)
                if pin is not None:
                    pin(self, "an `is` comparison")
            same = a.obj is b.obj
            self._guard_identity(a, b, same)
            return same
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            return False
        if _made_in_frame(a) or _made_in_frame(b):
            return False  # two trackers, and one of them a new object: two objects
        fa, fb = _function_of(a), _function_of(b)
        if fa is not None and fb is not None:  # `type(self).forward is wrapper`
            return fa is fb
        raise Unsupported("unsupported_object", f"{a.type_name()} is {b.type_name()}")

    def _guard_identity(self, a: VariableTracker, b: VariableTracker, same: bool) -> None:
        """`a is b` between objects the trace read (`arg is _MISSING`, two arguments): the
        answer holds only while they are (or are not) one object. An object the trace holds
        without a source stands for itself."""
        sa, sb = getattr(a, "source", None), getattr(b, "source", None)
        if sa is None and sb is None:
            return  # both fixed objects of the trace
        first, other, other_source = (sa, b, sb) if sa is not None else (sb, a, sa)
        second = other_source or ConstSource(other.obj, type(other.obj).__name__)
        where = self.location_text()
        if same:
            self.output.add_guard(first, GuardKind.DUPLICATE_INPUT, second, where)
        else:
            self.output.add_guard(None, GuardKind.NO_ALIASING, [first, second], where)

    def _via_index(self, index: VariableTracker) -> VariableTracker:
        """An object whose class writes `__index__` in Python, used as a list or tensor index
        (alone or in a tuple): its int, as Python asks for it."""
        if type(index) is TupleVariable:
            items = [self._via_index(i) for i in index.items]
            if all(a is b for a, b in zip(items, index.items)):
                return index
            return TupleVariable(items)
        if not isinstance(index, (NewObjectVariable, UserObjectVariable)):
            return index
        if python_function(index.python_type(), "__index__") is None:
            return index
        result = index.call_method(self, "__index__", [], {})
        if not (result.is_constant() and type(result.as_constant()) is int) and not (
            isinstance(result, SymNodeVariable) and result.python_type() is int
        ):
            error = TypeError(f"__index__ returned non-int (type {result.type_name()})")
            raise Unsupported.raised("__index__", error)
        return result

    def getitem(self, obj: VariableTracker, index: VariableTracker) -> VariableTracker:
        if isinstance(obj, (TensorVariable, BaseSequence)):
            index = self._via_index(index)
        if isinstance(obj, TensorVariable):
            split = _symbolic_positions(obj, index)
            if split is not None:
                return self._select_symbolic(obj, *split)
            return self.output.call_op("call_function", operator.getitem, [obj, index], {})
        if isinstance(obj, (BaseSequence, DictVariable)):
            return obj.getitem(self, index)
        annotation = _type_subscript(obj, index)
        if annotation is not None:  # `Optional[Tensor]`, `List[int]`, `dict[str, Any]`
            return ConstantVariable(annotation)
        if obj.is_constant() and index.is_constant():
            try:
                return self.wrap_constant_result(obj.as_constant()[index.as_constant()])
            except Exception as exc:
                raise Unsupported("exception", "indexing a constant", f"raises {exc!r}") from None
        return obj.call_method(self, "__getitem__", [index], {})

    def setitem(self, obj: VariableTracker, index: VariableTracker, value: VariableTracker) -> None:
        if isinstance(obj, (TensorVariable, BaseSequence)):
            index = self._via_index(index)
        if isinstance(obj, TensorVariable):
            split = _symbolic_positions(obj, index)
            if split is not None:
                # the view the index selects, written through `view[...] = value`: the same
                # copy (broadcasting, leading ones of the value dropped) as the whole index
                obj, index = self._select_symbolic(obj, *split), ConstantVariable(Ellipsis)
            self.output.call_op("call_function", operator.setitem, [obj, index, value], {})
            return
        obj.call_method(self, "__setitem__", [index, value], {})

    def _select_symbolic(
        self, obj: TensorVariable, rest: VariableTracker, picks: list[tuple[int, VariableTracker]]
    ) -> VariableTracker:
        """`obj[rest]`, then `select` at each symbolic position, last dim first."""
        view = self.output.call_op("call_function", operator.getitem, [obj, rest], {})
        for dim, position in reversed(picks):
            view = self.output.call_op(
                "call_function", torch.select, [view, ConstantVariable(dim), position], {}
            )
        return view


def _symbolic_positions(
    obj: TensorVariable, index: VariableTracker
) -> tuple[VariableTracker, list[tuple[int, VariableTracker]]] | None:
    """For a basic index (ints, slices, None, `...`) with symbolic ints among its positions
    (`x[t]`, `cache[:, :, pos] = k` with `t`, `pos` automatic-dynamic ints): the index with
    those positions made full slices, and (result dim, symbolic int) for each, so that
    `select` can take them. Python's `Tensor.__getitem__` would specialize the ints (one graph
    per value); `select` keeps them symbolic, with the same results and errors. None for any
    other index."""
    items = index.items if isinstance(index, TupleVariable) else [index]
    if not any(isinstance(i, SymNodeVariable) and i.python_type() is int for i in items):
        return None
    # (SymNodeVariables are checked first: their as_constant() would specialize them)
    kinds = []
    for item in items:
        if isinstance(item, SymNodeVariable):
            if item.python_type() is not int:
                return None
            kinds.append("symbolic")
        elif isinstance(item, SliceVariable):
            kinds.append("slice")
        elif item.is_constant() and type(item.as_constant()) in (int, slice, type(None)):
            kinds.append(type(item.as_constant()).__name__)
        elif item.is_constant() and item.as_constant() is Ellipsis:
            kinds.append("...")
        else:
            return None  # advanced indexing (tensors, lists, bools): dims move
    if kinds.count("...") > 1:
        return None  # eager's error
    consuming = sum(k in ("symbolic", "slice", "int") for k in kinds)
    rest: list[VariableTracker] = []
    picks: list[tuple[int, VariableTracker]] = []
    dim = 0  # the dim of the result each item's output lands on
    for item, kind in zip(items, kinds):
        if kind == "symbolic":
            picks.append((dim, item))
            rest.append(ConstantVariable(slice(None)))
            dim += 1
            continue
        rest.append(item)
        if kind == "...":
            dim += max(obj.fake.dim() - consuming, 0)
        elif kind != "int":  # a slice or None keeps or adds a dim
            dim += 1
    return TupleVariable(rest), picks


_DUNDERS: dict[Any, tuple[str, str, str | None]] = {}
for _op in DUNDER_OPERATORS:
    _name = _op.rstrip("_")
    _DUNDERS[getattr(operator, _op)] = (f"__{_name}__", f"__r{_name}__", None)
    _DUNDERS[getattr(operator, "i" + _name)] = (
        f"__{_name}__",
        f"__r{_name}__",
        f"__i{_name}__",
    )
# comparisons: the reflected method is the mirrored comparison
for _op, _forward, _reflected in (
    (operator.eq, "__eq__", "__eq__"),
    (operator.ne, "__ne__", "__ne__"),
    (operator.lt, "__lt__", "__gt__"),
    (operator.le, "__le__", "__ge__"),
    (operator.gt, "__gt__", "__lt__"),
    (operator.ge, "__ge__", "__le__"),
):
    _DUNDERS[_op] = (_forward, _reflected, None)

# `n += t` on a number: Python computes `n + t`
_OUT_OF_PLACE = {
    getattr(operator, "i" + name.rstrip("_")): getattr(operator, name) for name in BINARY_OPERATORS
}


_GENERIC_BUILTINS = (list, dict, tuple, set, frozenset, type)
_SET_INPLACE = {
    operator.ior: "__ior__",
    operator.iand: "__iand__",
    operator.isub: "__isub__",
    operator.ixor: "__ixor__",
}


def _type_value(vt: VariableTracker) -> Any:
    """The real class, typing form or None that `vt` stands for, else a marker."""
    if vt.is_constant():
        return vt.as_constant()
    real = getattr(vt, "cls", getattr(vt, "obj", getattr(vt, "fn", _NOT_A_TYPE)))
    if isinstance(vt, BaseSequence) and type(vt.items) is list:
        return tuple(_type_value(i) for i in vt.items)
    return real


_NOT_A_TYPE = object()


def _type_subscript(obj: VariableTracker, index: VariableTracker) -> Any:
    """`Optional[X]` and other subscripted types (typing forms, builtin generics): a pure,
    cached computation on classes, done for real while tracing. None when it is not one."""
    real = _type_value(obj)
    is_form = type(real).__module__ == "typing" or isinstance(real, types.GenericAlias)
    if not (is_form or any(real is g for g in _GENERIC_BUILTINS)):
        return None
    args = _type_value(index)
    flat = args if isinstance(args, tuple) else (args,)
    ok = (type, types.GenericAlias, type(None), str, int, type(Ellipsis))
    if any(a is _NOT_A_TYPE or not (isinstance(a, ok) or type(a).__module__ == "typing")
           for a in flat):  # fmt: skip
        return None
    try:
        return real[args]
    except Exception:  # noqa: BLE001 - the real subscript runs again at the break
        return None


def _symbol(op: Any) -> str:
    for sym, fn in BINARY_OPS.items():
        if fn is op:
            return sym
    return getattr(op, "__name__", "?")


_UNARY_DUNDERS = {
    operator.neg: "__neg__",
    operator.pos: "__pos__",
    operator.invert: "__invert__",
    abs: "__abs__",
}


def _defines_ne(vt: VariableTracker) -> bool:
    """Does a class of `vt`'s, `object` left out, define `__ne__` (in Python or C)?"""
    try:
        cls = vt.python_type()
    except Unsupported:
        return False
    return any("__ne__" in klass.__dict__ for klass in cls.__mro__ if klass is not object)


def _is_object(vt: VariableTracker) -> bool:
    """An object from outside the frame whose `==` is identity (its class keeps object's)."""
    return hasattr(vt, "obj") and type(vt.obj).__eq__ is object.__eq__


def _function_of(vt: VariableTracker) -> types.FunctionType | None:
    """The function object a user-function VT stands for (its identity is fixed: guarded by
    its source, or a constant of the trace)."""
    if type(vt) is UserFunctionVariable and isinstance(vt.fn, types.FunctionType):
        return vt.fn
    return None


def _holds_symbols(vt: VariableTracker) -> bool:
    """A tuple (a shape) with symbolic sizes in it: folding it to a constant would pin them."""
    return isinstance(vt, BaseSequence) and any(isinstance(i, SymNodeVariable) for i in vt.items)

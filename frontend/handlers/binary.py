"""Operators: BINARY_OP, unary ops, comparisons, `is`, `in`, subscripts and slices."""

from __future__ import annotations

import dis
import operator
from typing import TYPE_CHECKING, Any

from framejit.frontend.errors import Unsupported
from framejit.frontend.handlers import handler
from framejit.frontend.variables.base import (
    BINARY_OPS,
    COMPARE_OPS,
    ConstantVariable,
    VariableTracker,
)
from framejit.frontend.variables.containers import (
    BaseSequence,
    DictVariable,
    SliceVariable,
    same_or_equal,
)
from framejit.frontend.variables.generators import pull
from framejit.frontend.variables.objects import base_operand
from framejit.frontend.variables.symbolic import SymNodeVariable
from framejit.frontend.variables.tensor import TensorVariable

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator

_NB_SYMBOLS = [sym for _, sym in dis._nb_ops]  # type: ignore[attr-defined]


@handler("BINARY_OP")
def binary_op(tx: Translator, inst: Any) -> None:
    b = tx.pop()
    a = tx.pop()
    tx.push(tx.binary_op(BINARY_OPS[_NB_SYMBOLS[inst.arg]], a, b))


@handler("UNARY_NEGATIVE")
def unary_negative(tx: Translator, inst: Any) -> None:
    tx.push(tx.unary_op(operator.neg, tx.pop()))


@handler("UNARY_POSITIVE", until=(3, 11))
def unary_positive(tx: Translator, inst: Any) -> None:
    tx.push(tx.unary_op(operator.pos, tx.pop()))


@handler("UNARY_INVERT")
def unary_invert(tx: Translator, inst: Any) -> None:
    tx.push(tx.unary_op(operator.invert, tx.pop()))


@handler("UNARY_NOT")
def unary_not(tx: Translator, inst: Any) -> None:
    tx.push(ConstantVariable(not tx.pop().truth(tx)))


@handler("COMPARE_OP")
def compare_op(tx: Translator, inst: Any) -> None:
    b = tx.pop()
    a = tx.pop()
    tx.push(tx.compare_op(COMPARE_OPS[inst.argval], a, b))


@handler("IS_OP")
def is_op(tx: Translator, inst: Any) -> None:
    b = tx.pop()
    a = tx.pop()
    tx.push(ConstantVariable(tx.is_op(a, b) != bool(inst.arg)))


@handler("CONTAINS_OP")
def contains_op(tx: Translator, inst: Any) -> None:
    container = base_operand(tx.pop(), ("__contains__",))  # a list subclass's `in`: list's
    item = tx.pop()
    if isinstance(container, TensorVariable) or (
        isinstance(item, TensorVariable) and not isinstance(container, BaseSequence)
    ):
        raise Unsupported("data_dependent", "`in` with a tensor")
    if isinstance(container, DictVariable):
        if not item.is_constant():
            raise Unsupported("unsupported_object", f"{item.type_name()} in dict")
        found = item.as_constant() in container.items
    elif container.is_constant() and item.is_constant():
        found = item.as_constant() in container.as_constant()
    elif isinstance(container, BaseSequence):
        found = any(same_or_equal(tx, x, item) for x in container.items)
    elif (it := _iterated_for_in(tx, container)) is not None:
        # no __contains__: Python walks the object's own iteration up to the first match
        found = False
        while (x := pull(tx, it)) is not None:
            if same_or_equal(tx, x, item):
                found = True
                break
    else:
        found = container.call_method(tx, "__contains__", [item], {}).truth(tx)
    tx.push(ConstantVariable(found != bool(inst.arg)))


def _iterated_for_in(tx: Translator, container: VariableTracker) -> VariableTracker | None:
    """`x in obj` of a user class without `__contains__` that iterates in Python (an
    `__iter__`, or the `__getitem__` protocol): `iter(obj)`, lazy; None otherwise."""
    from framejit.frontend.variables.objects import (
        NewObjectVariable,
        UserObjectVariable,
        _class_attr,
    )

    if not isinstance(container, (NewObjectVariable, UserObjectVariable)):
        return None
    if _class_attr(container.python_type(), "__contains__") is not None:
        return None
    return container.python_iter(tx)


@handler("BINARY_SUBSCR")
def binary_subscr(tx: Translator, inst: Any) -> None:
    index = tx.pop()
    obj = tx.pop()
    tx.push(tx.getitem(obj, index))


@handler("STORE_SUBSCR")
def store_subscr(tx: Translator, inst: Any) -> None:
    index = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    tx.setitem(obj, index, value)


@handler("DELETE_SUBSCR")
def delete_subscr(tx: Translator, inst: Any) -> None:
    index = tx.pop()
    obj = tx.pop()
    obj.call_method(tx, "__delitem__", [index], {})


def _slice(parts: list[Any]) -> Any:
    # a symbolic bound stays symbolic (SliceVariable), for tensors to index with
    if all(p.is_constant() and not isinstance(p, SymNodeVariable) for p in parts):
        return ConstantVariable(slice(*(p.as_constant() for p in parts)))
    return SliceVariable(parts)


@handler("BINARY_SLICE", since=(3, 12))
def binary_slice(tx: Translator, inst: Any) -> None:
    end = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    tx.push(tx.getitem(obj, _slice([start, end])))


@handler("STORE_SLICE", since=(3, 12))
def store_slice(tx: Translator, inst: Any) -> None:
    end = tx.pop()
    start = tx.pop()
    obj = tx.pop()
    value = tx.pop()
    tx.setitem(obj, _slice([start, end]), value)


@handler("BUILD_SLICE")
def build_slice(tx: Translator, inst: Any) -> None:
    tx.push(_slice(tx.popn(inst.arg)))

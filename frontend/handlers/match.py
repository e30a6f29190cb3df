"""`match` statements: MATCH_SEQUENCE, MATCH_MAPPING, MATCH_KEYS, MATCH_CLASS, GET_LEN.

The compiler turns each `case` into these tests plus ordinary jumps, unpacking and compares, so
only the tests need handlers. Each answers from what the translator knows about the subject:

- MATCH_SEQUENCE / MATCH_MAPPING read the subject type's Py_TPFLAGS_SEQUENCE / _MAPPING flag,
  exactly what CPython reads (str, bytes and bytearray are not sequences here; tensors are
  neither).
- MATCH_KEYS looks the keys up in a dict the translator tracks; a missing key is no match (and,
  as in CPython, never calls a defaultdict's factory).
- MATCH_CLASS is `isinstance` (guarded like the builtin) and then attribute reads:
  `__match_args__` for positional patterns, and the subject itself for the one positional
  pattern of bool, bytearray, bytes, dict, float, frozenset, int, list, set, str and tuple.

Anything the translator cannot answer (a subject of unknown type, a class that is not a
constant) raises Unsupported, so the `match` becomes a graph break there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framejit.frontend.errors import Unsupported
from framejit.frontend.handlers import handler
from framejit.frontend.variables.base import ConstantVariable, VariableTracker
from framejit.frontend.variables.containers import DictVariable, TupleVariable

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator

_SEQUENCE_FLAG = 1 << 5  # Py_TPFLAGS_SEQUENCE
_MAPPING_FLAG = 1 << 6  # Py_TPFLAGS_MAPPING
# Classes whose single positional sub-pattern matches the subject itself (`case int(n):`).
_SELF_MATCHING = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


def _flag(tx: Translator, flag: int) -> None:
    subject = tx.stack[-1]
    tx.push(ConstantVariable(bool(subject.python_type().__flags__ & flag)))


@handler("MATCH_SEQUENCE")
def match_sequence(tx: Translator, inst: Any) -> None:
    _flag(tx, _SEQUENCE_FLAG)


@handler("MATCH_MAPPING")
def match_mapping(tx: Translator, inst: Any) -> None:
    _flag(tx, _MAPPING_FLAG)


@handler("GET_LEN")
def get_len(tx: Translator, inst: Any) -> None:
    from framejit.frontend.variables.builtins import call_builtin

    tx.push(call_builtin(tx, len, [tx.stack[-1]], {}))


@handler("MATCH_KEYS")
def match_keys(tx: Translator, inst: Any) -> None:
    keys, subject = tx.stack[-1], tx.stack[-2]
    if not isinstance(subject, DictVariable) or not keys.is_constant():
        raise Unsupported("unsupported_object", f"matching keys of a {subject.type_name()}")
    items = subject.items
    wanted = keys.as_constant()
    if not all(k in items for k in wanted):
        tx.push(ConstantVariable(None))
        return
    tx.push(TupleVariable([items[k] for k in wanted]))


@handler("MATCH_CLASS")
def match_class(tx: Translator, inst: Any) -> None:
    from framejit.frontend.variables.builtins import call_builtin

    names, cls_vt = tx.pop(), tx.pop()
    subject = tx.pop()
    if not cls_vt.is_constant() or not isinstance(cls_vt.as_constant(), type):
        raise Unsupported("unsupported_object", "`case` on a class that is not a constant")
    cls = cls_vt.as_constant()
    matched = call_builtin(tx, isinstance, [subject, cls_vt], {})
    if not matched.truth(tx):
        tx.push(ConstantVariable(None))
        return
    count = inst.arg
    attrs: list[str] = []
    values: list[VariableTracker] = []
    if count:
        match_args = getattr(cls, "__match_args__", None)
        if match_args is None and cls in _SELF_MATCHING and count == 1:
            values.append(subject)
        elif isinstance(match_args, tuple) and len(match_args) >= count:
            attrs += list(match_args[:count])
        else:  # CPython raises TypeError here: let the instruction run for real
            raise Unsupported("exception", f"`case {cls.__qualname__}(...)`", "TypeError")
    attrs += list(names.as_constant())
    for name in attrs:
        if not tx.has_attr(subject, name):
            tx.push(ConstantVariable(None))
            return
        values.append(subject.getattr(tx, name))
    tx.push(TupleVariable(values))

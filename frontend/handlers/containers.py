"""Building and unpacking containers: BUILD_*, *_APPEND/EXTEND/UPDATE, UNPACK_*, strings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framejit.frontend.errors import Unsupported
from framejit.frontend.handlers import handler
from framejit.frontend.variables.base import ConstantVariable, VariableTracker, note_mutation
from framejit.frontend.variables.containers import (
    DictVariable,
    ListVariable,
    SetVariable,
    TupleVariable,
)

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


@handler("BUILD_TUPLE")
def build_tuple(tx: Translator, inst: Any) -> None:
    tx.push(TupleVariable(tx.popn(inst.arg)))


@handler("BUILD_LIST")
def build_list(tx: Translator, inst: Any) -> None:
    tx.push(ListVariable(tx.popn(inst.arg)))


@handler("BUILD_SET")
def build_set(tx: Translator, inst: Any) -> None:
    items = tx.popn(inst.arg)
    if not all(i.is_constant() for i in items):
        raise Unsupported("unsupported_object", "a set of non-constant values")
    tx.push(SetVariable({i.as_constant() for i in items}))


def _key(vt: VariableTracker) -> Any:
    if not vt.is_constant():
        raise Unsupported("unsupported_object", f"a dict key of type {vt.type_name()}")
    return vt.as_constant()


@handler("BUILD_MAP")
def build_map(tx: Translator, inst: Any) -> None:
    flat = tx.popn(2 * inst.arg)
    tx.push(DictVariable({_key(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}))


@handler("BUILD_CONST_KEY_MAP")
def build_const_key_map(tx: Translator, inst: Any) -> None:
    keys = tx.pop().as_constant()
    values = tx.popn(inst.arg)
    tx.push(DictVariable(dict(zip(keys, values))))


@handler("BUILD_STRING")
def build_string(tx: Translator, inst: Any) -> None:
    parts = tx.popn(inst.arg)
    tx.push(ConstantVariable("".join(_key(p) for p in parts)))


def _python_formatted(
    tx: Translator, value: VariableTracker, conversion: int, spec: str
) -> VariableTracker | None:
    """An f-string field of an object whose class writes the method Python calls in Python
    (`__format__`; `__str__` for `!s` or an empty spec; `__repr__` for `!r`): its result."""
    from framejit.frontend.variables.objects import (
        NewObjectVariable,
        UserObjectVariable,
        python_function,
    )

    if not isinstance(value, (NewObjectVariable, UserObjectVariable)):
        return None
    cls = value.python_type()

    def python(name: str) -> bool:
        return python_function(cls, name) is not None

    if conversion == 0 and python("__format__"):
        result, formatted = value.call_method(tx, "__format__", [ConstantVariable(spec)], {}), True
    elif (conversion == 1 or (conversion == 0 and not spec)) and python("__str__"):
        result, formatted = value.call_method(tx, "__str__", [], {}), False
    elif conversion == 2 and python("__repr__"):
        result, formatted = value.call_method(tx, "__repr__", [], {}), False
    else:
        return None
    if not (result.is_constant() and isinstance(result.as_constant(), str)):
        raise Unsupported("unsupported_object", f"formatting a {value.type_name()} into a string")
    if spec and not formatted:  # `{obj!s:>8}`: the string, then the spec
        return ConstantVariable(format(result.as_constant(), spec))
    return result


@handler("FORMAT_VALUE")
def format_value(tx: Translator, inst: Any) -> None:
    spec = tx.pop().as_constant() if inst.arg & 0x04 else ""
    value = tx.pop()
    text = _python_formatted(tx, value, inst.arg & 0x03, spec)
    if text is not None:
        tx.push(text)
        return
    if not value.is_constant():
        raise Unsupported(
            "data_dependent" if value.has_tensors() else "unsupported_object",
            f"formatting a {value.type_name()} into a string",
        )
    v = value.as_constant()
    conv = inst.arg & 0x03
    if conv == 1:
        v = str(v)
    elif conv == 2:
        v = repr(v)
    elif conv == 3:
        v = ascii(v)
    tx.push(ConstantVariable(format(v, spec)))


@handler("LIST_APPEND")
def list_append(tx: Translator, inst: Any) -> None:
    value = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "append", [value], {})


@handler("LIST_EXTEND")
def list_extend(tx: Translator, inst: Any) -> None:
    value = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "extend", [value], {})


@handler("SET_ADD", "SET_UPDATE")
def set_add(tx: Translator, inst: Any) -> None:
    value = tx.pop()
    target = tx.stack[-inst.arg]
    if not isinstance(target, SetVariable):
        raise Unsupported("unsupported_object", f"adding to a {target.type_name()}")
    target.mutate(tx, "add" if inst.opname == "SET_ADD" else "update", [value], {})


@handler("MAP_ADD")
def map_add(tx: Translator, inst: Any) -> None:
    value = tx.pop()
    key = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "__setitem__", [key, value], {})


@handler("DICT_UPDATE", "DICT_MERGE")
def dict_update(tx: Translator, inst: Any) -> None:
    value = tx.pop()
    target = tx.stack[-inst.arg]
    mapping = getattr(value, "mapping_items", None)
    items = value.items if isinstance(value, DictVariable) else mapping() if mapping else None
    if items is None or not isinstance(target, DictVariable):
        raise Unsupported("unsupported_object", "** with a non-dict")
    note_mutation(target)
    target.items.update(items)


@handler("LIST_TO_TUPLE", until=(3, 11))
def list_to_tuple(tx: Translator, inst: Any) -> None:
    tx.push(TupleVariable(tx.pop().unpack(tx)))


@handler("UNPACK_SEQUENCE")
def unpack_sequence(tx: Translator, inst: Any) -> None:
    items = tx.pop().unpack(tx)
    if len(items) != inst.arg:
        raise Unsupported(
            "exception", f"unpacking {len(items)} values into {inst.arg}", "ValueError"
        )
    for item in reversed(items):
        tx.push(item)


@handler("UNPACK_EX")
def unpack_ex(tx: Translator, inst: Any) -> None:
    before, after = inst.arg & 0xFF, inst.arg >> 8
    items = tx.pop().unpack(tx)
    if len(items) < before + after:
        raise Unsupported("exception", "star-unpacking too few values", "ValueError")
    middle = ListVariable(items[before : len(items) - after])
    out = [*items[:before], middle, *items[len(items) - after :]]
    for item in reversed(out):
        tx.push(item)

"""`copy.copy` and `copy.deepcopy`, modelled on the translator's values.

Both copy what the translator tracks: constants, tuples, lists, dicts, objects made in the
frame, and objects from outside the frame whose instance dict is read through guarded Sources
(a config deep-copied in a forward, as Hugging Face's `get_text_config` does). The copy is a
new object of the frame, so writes to it are the frame's own. A class that customizes copying
(`__deepcopy__`, `__copy__`, `__reduce__`, `__reduce_ex__`, `__getstate__`, `__setstate__`) or
that the translator cannot build is not modelled: the call is a graph break, as before. So is
copying a tensor or a module (`copy.deepcopy(tensor)` keeps autograd leaf-ness and storage
sharing that a graph op would not).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import AttrSource
from framejit.frontend.variables.base import (
    ConstantVariable,
    LazyNumberVariable,
    VariableTracker,
)
from framejit.frontend.variables.containers import DictVariable, ListVariable, TupleVariable
from framejit.guards import GuardKind

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator

_HOOKS = ("__deepcopy__", "__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__")
_IMMUTABLE = (int, float, bool, complex, str, bytes, type(None), type, range, slice)


def deepcopy(tx: Translator, args: list[Any], kwargs: dict[str, Any]) -> VariableTracker:
    if len(args) != 1 or kwargs:
        raise Unsupported("unsupported_call", "copy.deepcopy", "a memo argument")
    return _copy(tx, args[0], {}, deep=True)


def shallow_copy(tx: Translator, args: list[Any], kwargs: dict[str, Any]) -> VariableTracker:
    if len(args) != 1 or kwargs:
        raise Unsupported("unsupported_call", "copy.copy", "one argument")
    return _copy(tx, args[0], {}, deep=False)


def _plain_copying(cls: type) -> bool:
    """Does `copy` rebuild instances of `cls` from their `__dict__` alone?"""
    from framejit.frontend.variables.objects import _class_attr, _plain_class

    if cls in copy._deepcopy_dispatch or not _plain_class(cls):  # type: ignore[attr-defined]
        return False
    for name in _HOOKS:
        found = _class_attr(cls, name)
        if found is not None and found[0] is not object:
            return False
    return True


def _copy(tx: Translator, vt: VariableTracker, memo: dict[int, VariableTracker], deep: bool) -> Any:
    from framejit.frontend.variables.objects import NewObjectVariable, UserObjectVariable

    if id(vt) in memo:
        return memo[id(vt)]
    inner = (lambda v: _copy(tx, v, memo, deep)) if deep else (lambda v: v)
    if isinstance(vt, (ConstantVariable, LazyNumberVariable)):
        value = vt.as_constant()
        if isinstance(value, _IMMUTABLE) or type(value).__module__ == "torch":
            return vt  # copy returns the object itself (dtype, device, Size, ...)
        try:
            copied = copy.deepcopy(value) if deep else copy.copy(value)
        except Exception as exc:
            raise Unsupported("unsupported_call", "copying a constant", str(exc)) from None
        return tx.wrap_constant_result(copied)  # a list or dict as a container the frame owns
    out: VariableTracker
    if type(vt) is TupleVariable:
        items = [inner(i) for i in vt.items]
        same = all(a is b for a, b in zip(items, vt.items))
        return vt if same else TupleVariable(items)
    if type(vt) is ListVariable:
        out = memo[id(vt)] = ListVariable([])
        out.items = [inner(i) for i in vt.items]
        return out
    if type(vt) is DictVariable and vt.default_factory is None:
        out = memo[id(vt)] = DictVariable({}, cls=vt.cls)
        out.items = {k: inner(v) for k, v in vt.items.items()}
        return out
    if isinstance(vt, NewObjectVariable) and vt.base_items is None and _plain_copying(vt.cls):
        attrs = dict(vt.attrs)
    elif (
        isinstance(vt, UserObjectVariable)
        and type(vt) is UserObjectVariable
        and vt.source is not None
        and _plain_copying(type(vt.obj))
    ):
        attrs = _instance_attrs(tx, vt)
    else:
        raise Unsupported(
            "unsupported_call", f"copy.{'deepcopy' if deep else 'copy'}", f"of a {vt.type_name()}"
        )
    new = memo[id(vt)] = NewObjectVariable(vt.python_type())
    new.attrs = {k: inner(v) for k, v in attrs.items()}
    return new


def _instance_attrs(tx: Translator, vt: Any) -> dict[str, VariableTracker]:
    """The instance dict of an object from outside the frame: its keys guarded, each value read
    through its own Source (and guarded as any attribute read is)."""
    dict_source = AttrSource(vt.source, "__dict__")
    keys = tuple(vt.obj.__dict__)
    if not all(isinstance(k, str) for k in keys):
        raise Unsupported("unsupported_call", "copy.deepcopy", "an instance dict with odd keys")
    tx.output.add_guard(dict_source, GuardKind.DICT_KEYS, keys, tx.location_text())
    return {k: tx.wrap_source(AttrSource(vt.source, k)) for k in keys}

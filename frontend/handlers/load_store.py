"""Loads and stores: locals, constants, globals, closures, attributes, imports."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from framejit.frontend import versions
from framejit.frontend.errors import Unsupported
from framejit.frontend.handlers import handler
from framejit.frontend.variables.base import NULL, CellVariable
from framejit.frontend.variables.generators import real_generator_dropped

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


def _local(tx: Translator, name: str) -> Any:
    from framejit.frontend.translator import realize

    try:
        vt = tx.locals[name]
    except KeyError:
        raise Unsupported(
            "exception", f"local {name!r} referenced before assignment", "UnboundLocalError"
        ) from None
    real = realize(tx, vt)
    if real is not vt:
        tx.locals[name] = real
    return real


@handler("LOAD_FAST")
def load_fast(tx: Translator, inst: Any) -> None:
    tx.push(_local(tx, inst.argval))


@handler("LOAD_FAST_CHECK", since=(3, 12))
def load_fast_check(tx: Translator, inst: Any) -> None:
    tx.push(_local(tx, inst.argval))


@handler("LOAD_FAST_AND_CLEAR", since=(3, 12))
def load_fast_and_clear(tx: Translator, inst: Any) -> None:
    # Inlined comprehensions save the outer binding of their loop variable; an unbound local
    # is saved as NULL and restored as unbound by STORE_FAST.
    from framejit.frontend.translator import realize

    name = inst.argval
    if name in tx.code.co_cellvars and name in tx.cells:
        # a comprehension's loop variable that its lambdas capture: the slot holds the
        # function's cell, saved here and put back by STORE_FAST after the loop (the loop
        # runs on a new cell, MAKE_CELL)
        tx.push(tx.cells.pop(name))
        return
    vt = tx.locals.pop(name, None)
    tx.push(NULL if vt is None else realize(tx, vt))


@handler("STORE_FAST")
def store_fast(tx: Translator, inst: Any) -> None:
    real_generator_dropped(tx, tx.locals.get(inst.argval), inst.argval, tx.stack[-1])
    value = tx.pop()
    if value is NULL:
        tx.locals.pop(inst.argval, None)
    elif _is_cell(value) and inst.argval in tx.code.co_cellvars:
        tx.locals.pop(inst.argval, None)
        tx.cells[inst.argval] = value  # the cell LOAD_FAST_AND_CLEAR saved, back in its slot
    else:
        tx.locals[inst.argval] = value


def _is_cell(value: Any) -> bool:
    from framejit.frontend.translator import _RealCell

    return isinstance(value, (CellVariable, _RealCell))


@handler("DELETE_FAST")
def delete_fast(tx: Translator, inst: Any) -> None:
    real_generator_dropped(tx, tx.locals.get(inst.argval), inst.argval)
    tx.locals.pop(inst.argval, None)


@handler("LOAD_CONST")
def load_const(tx: Translator, inst: Any) -> None:
    tx.push(tx.wrap_value(inst.argval, None))


@handler("LOAD_GLOBAL")
def load_global(tx: Translator, inst: Any) -> None:
    if inst.arg & 1:
        tx.push(NULL)
    tx.push(tx.load_global(inst.argval))


@handler("MAKE_CELL")
def make_cell(tx: Translator, inst: Any) -> None:
    from framejit.frontend.translator import realize

    name = inst.argval
    current = tx.locals.pop(name, None)
    tx.cells[name] = CellVariable(realize(tx, current) if current is not None else None, name)


@handler("LOAD_CLOSURE")
def load_closure(tx: Translator, inst: Any) -> None:
    cell = tx.cells.get(inst.argval)
    if cell is None:
        raise Unsupported("exception", f"free variable {inst.argval!r}", "not found")
    tx.push(cell)  # a CellVariable, or a real cell of an enclosing function


@handler("LOAD_DEREF")
def load_deref(tx: Translator, inst: Any) -> None:
    tx.push(tx.load_deref(inst.argval))


@handler("STORE_DEREF")
def store_deref(tx: Translator, inst: Any) -> None:
    tx.store_deref(inst.argval, tx.pop())


@handler("LOAD_ATTR")
def load_attr(tx: Translator, inst: Any) -> None:
    obj = tx.pop()
    attr = obj.getattr(tx, inst.argval)
    if versions.load_attr_is_method(inst):
        tx.push(NULL)
    tx.push(attr)


@handler("LOAD_SUPER_ATTR", since=(3, 12))
def load_super_attr(tx: Translator, inst: Any) -> None:
    from framejit.frontend.variables.objects import SuperVariable

    obj, cls, _super = tx.pop(), tx.pop(), tx.pop()
    if not cls.is_constant():
        raise Unsupported("unsupported_call", "super() with an unknown class")
    attr = SuperVariable(cls.as_constant(), obj).getattr(tx, inst.argval)
    if inst.arg & 1:
        tx.push(NULL)
    tx.push(attr)


@handler("LOAD_METHOD", until=(3, 11))
def load_method(tx: Translator, inst: Any) -> None:
    obj = tx.pop()
    tx.push(NULL)
    tx.push(obj.getattr(tx, inst.argval))


@handler("STORE_GLOBAL")
def store_global(tx: Translator, inst: Any) -> None:
    tx.store_global(inst.argval, tx.pop())


@handler("STORE_ATTR")
def store_attr(tx: Translator, inst: Any) -> None:
    obj = tx.pop()
    value = tx.pop()
    obj.setattr(tx, inst.argval, value)


@handler("DELETE_ATTR")
def delete_attr(tx: Translator, inst: Any) -> None:
    tx.pop().delattr(tx, inst.argval)


@handler("IMPORT_NAME")
def import_name(tx: Translator, inst: Any) -> None:
    level, fromlist = tx.popn(2)
    name = inst.argval
    if not level.is_constant() or level.as_constant() != 0:
        raise Unsupported("unsupported_call", f"relative import of {name}")
    module = sys.modules.get(name)
    if module is None:
        raise Unsupported("unsupported_call", f"import {name}", "module not imported yet")
    if not fromlist.as_constant() and "." in name:
        module = sys.modules[name.split(".")[0]]  # `import a.b` binds `a`
    tx.push(tx.wrap_value(module, None))


@handler("IMPORT_FROM")
def import_from(tx: Translator, inst: Any) -> None:
    module = tx.stack[-1]
    tx.push(module.getattr(tx, inst.argval))


@handler("LOAD_ASSERTION_ERROR")
def load_assertion_error(tx: Translator, inst: Any) -> None:
    tx.push(tx.wrap_value(AssertionError, None))


@handler("LOAD_BUILD_CLASS")
def load_build_class(tx: Translator, inst: Any) -> None:
    from framejit.frontend.variables.classdef import BuildClassVariable

    tx.push(BuildClassVariable())

"""Calls: KW_NAMES, CALL, CALL_FUNCTION_EX, MAKE_FUNCTION, CALL_INTRINSIC_1."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from framejit.frontend import versions
from framejit.frontend.errors import FrameRunsAsPython, Unsupported, enters_debugger
from framejit.frontend.handlers import handler
from framejit.frontend.variables.base import NULL, CellVariable, ConstantVariable, VariableTracker
from framejit.frontend.variables.containers import DictVariable, IteratorVariable, TupleVariable
from framejit.frontend.variables.functions import NestedFunctionVariable
from framejit.frontend.variables.generators import GeneratorVariable, LazyIteratorVariable, pull

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


@handler("KW_NAMES", until=(3, 12))
def kw_names(tx: Translator, inst: Any) -> None:
    tx.kw_names = tx.code.co_consts[inst.arg]


@handler("CALL")
def call(tx: Translator, inst: Any) -> None:
    args = tx.popn(inst.arg)
    second = tx.pop()
    first = tx.pop()
    if first is NULL:
        fn = second
    else:  # (method, self) pair
        fn, args = first, [second, *args]
    kwargs: dict[str, VariableTracker] = {}
    if tx.kw_names:
        names = tx.kw_names
        tx.kw_names = ()
        kwargs = dict(zip(names, args[len(args) - len(names) :]))
        args = args[: len(args) - len(names)]
    if enters_debugger(getattr(fn, "fn", None)):
        raise FrameRunsAsPython("debugger", f"{fn.fn.__name__}()")
    tx.push(fn.call(tx, args, kwargs))


@handler("CALL_FUNCTION_EX")
def call_function_ex(tx: Translator, inst: Any) -> None:
    kwargs_vt = tx.pop() if inst.arg & 1 else DictVariable({})
    args_vt = tx.pop()
    fn = tx.pop()
    if tx.stack and tx.stack[-1] is NULL:
        tx.pop()
    if not isinstance(kwargs_vt, DictVariable):
        raise Unsupported("unsupported_call", "f(**kwargs) with a non-dict")
    args = args_vt.unpack(tx)
    kwargs = {str(k): v for k, v in kwargs_vt.items.items()}
    tx.push(fn.call(tx, args, kwargs))


@handler("MAKE_FUNCTION")
def make_function(tx: Translator, inst: Any) -> None:
    code_vt = tx.pop()
    code = code_vt.as_constant()
    flags = inst.arg
    closure: list[CellVariable] = []
    if flags & 0x08:
        closure = list(tx.pop().items)  # a TupleVariable of cells
    if flags & 0x04:
        tx.pop()  # annotations
    kwdefaults: dict[str, VariableTracker] = {}
    if flags & 0x02:
        kw = tx.pop()
        kwdefaults = {str(k): v for k, v in kw.items.items()}
    defaults: list[VariableTracker] = []
    if flags & 0x01:
        defaults = tx.pop().unpack(tx)
    tx.push(
        NestedFunctionVariable(code, tx.f_globals, code.co_qualname, defaults, kwdefaults, closure)
    )


@handler("CALL_INTRINSIC_1", since=(3, 12))
def call_intrinsic_1(tx: Translator, inst: Any) -> None:
    name = inst.argrepr
    if name == "INTRINSIC_LIST_TO_TUPLE":
        tx.push(TupleVariable(tx.pop().unpack(tx)))
    elif name == "INTRINSIC_UNARY_POSITIVE":
        tx.push(tx.unary_op(operator.pos, tx.pop()))
    else:
        raise Unsupported("unsupported_opcode", f"CALL_INTRINSIC_1 {name}")


@handler("CALL_INTRINSIC_2", since=(3, 12))
def call_intrinsic_2(tx: Translator, inst: Any) -> None:
    raise Unsupported(
        "unsupported_opcode",
        f"CALL_INTRINSIC_2 {inst.argrepr}",
        "exception groups and generic type parameters",
    )


@handler("RETURN_GENERATOR")
def return_generator(tx: Translator, inst: Any) -> None:
    if not tx.is_generator:
        raise Unsupported(
            "generator",
            "a generator function's own frame",
            "generators are compiled when a caller consumes them",
        )
    tx.push(ConstantVariable(None))  # the POP_TOP that follows discards it


@handler("YIELD_VALUE")
def yield_value(tx: Translator, inst: Any) -> None:
    if not tx.is_generator:
        raise Unsupported("generator", "yield outside an inlined generator")
    tx.yield_value = tx.pop()
    tx.push(ConstantVariable(None))  # replaced by what `send` passes in when it resumes
    tx.paused = True


@handler("GET_YIELD_FROM_ITER")
def get_yield_from_iter(tx: Translator, inst: Any) -> None:
    """`yield from xs`: the iterator it delegates to (a generator stays itself, lazily)."""
    value = tx.pop()
    if isinstance(value, (IteratorVariable, LazyIteratorVariable)):
        tx.push(value)
    else:
        tx.push(IteratorVariable(value.unpack(tx)))


@handler("SEND")
def send(tx: Translator, inst: Any) -> None:
    """Stack `iterator, sent`: the iterator's next item (it yields on), or, when it is done, its
    return value and a jump past the loop (3.11 drops the iterator here, 3.12 in END_SEND)."""
    sent, it = tx.stack[-1], tx.stack[-2]
    if isinstance(it, GeneratorVariable):
        item = it.send_item(tx, sent)
    elif sent.is_constant() and sent.as_constant() is None:
        item = pull(tx, it)
    else:
        raise Unsupported("generator", "send() through `yield from` to a non-generator")
    if item is not None:
        tx.stack[-1] = item
        return
    result = it.returned if isinstance(it, GeneratorVariable) else ConstantVariable(None)
    tx.stack[-1] = result
    if versions.PY < (3, 12):
        del tx.stack[-2]
    tx.jump_to(inst.argval)


@handler("END_SEND", since=(3, 12))
def end_send(tx: Translator, inst: Any) -> None:
    del tx.stack[-2]

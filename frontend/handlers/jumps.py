"""Jumps and loops: conditional jumps on known values, GET_ITER / FOR_ITER over known items.

A condition must be known while tracing (a constant, a shape, an `is None` test); a condition on
tensor values cannot be captured. Loops unroll: FOR_ITER walks an IteratorVariable whose items
are known.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framejit.frontend import versions
from framejit.frontend.errors import Unsupported
from framejit.frontend.handlers import handler
from framejit.frontend.variables.base import ConstantVariable, ExceptionVariable
from framejit.frontend.variables.containers import (
    IteratorVariable,
    TupleVariable,
    container_iterator,
)
from framejit.frontend.variables.generators import (
    LazyIteratorVariable,
    loop_iterator,
    user_iterator,
)
from framejit.frontend.variables.objects import (
    ClassVariable,
    NewObjectVariable,
    UserObjectVariable,
)

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


@handler("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT")
def jump(tx: Translator, inst: Any) -> None:
    tx.jump_to(inst.argval)


def _pop_jump_if(truth: bool):
    def run(tx: Translator, inst: Any) -> None:
        if tx.pop().truth(tx) is truth:
            tx.jump_to(inst.argval)

    return run


def _pop_jump_if_none(is_none: bool):
    def run(tx: Translator, inst: Any) -> None:
        value = tx.pop()
        none = value.is_constant() and value.as_constant() is None
        if none is is_none:
            tx.jump_to(inst.argval)

    return run


handler("POP_JUMP_IF_TRUE", since=(3, 12))(_pop_jump_if(True))
handler("POP_JUMP_IF_FALSE", since=(3, 12))(_pop_jump_if(False))
handler("POP_JUMP_IF_NONE", since=(3, 12))(_pop_jump_if_none(True))
handler("POP_JUMP_IF_NOT_NONE", since=(3, 12))(_pop_jump_if_none(False))
handler("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE", until=(3, 11))(_pop_jump_if(True))
handler("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE", until=(3, 11))(
    _pop_jump_if(False)
)
handler("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE", until=(3, 11))(
    _pop_jump_if_none(True)
)
handler("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE", until=(3, 11))(
    _pop_jump_if_none(False)
)


def _jump_or_pop(truth: bool):
    def run(tx: Translator, inst: Any) -> None:
        if tx.stack[-1].truth(tx) is truth:
            tx.jump_to(inst.argval)
        else:
            tx.pop()

    return run


handler("JUMP_IF_TRUE_OR_POP", until=(3, 11))(_jump_or_pop(True))
handler("JUMP_IF_FALSE_OR_POP", until=(3, 11))(_jump_or_pop(False))


@handler("GET_ITER")
def get_iter(tx: Translator, inst: Any) -> None:
    value = tx.pop()
    loop_iterator(tx, value)
    if isinstance(value, (NewObjectVariable, UserObjectVariable)):
        # a class whose __iter__ is a generator, or that is an iterator (__next__): lazy
        value = value.python_iter(tx) or value
    if isinstance(value, (IteratorVariable, LazyIteratorVariable)):
        tx.push(value)
    else:
        it = container_iterator(tx, value) or IteratorVariable(value.unpack(tx))
        it.private = True  # made here, for one loop or generator expression: no one else has it
        tx.push(it)


@handler("FOR_ITER")
def for_iter(tx: Translator, inst: Any) -> None:
    it = tx.stack[-1]
    if isinstance(it, LazyIteratorVariable):
        it.looped = True  # a `for` loop's own iterator (a graph break may drain it ahead)
        item = it.next_item(tx)
    elif (user := user_iterator(it)) is not None:
        # an iterator object a resume function got for its loop: its __next__, item by item
        tx.stack[-1] = user
        item = user.next_item(tx)
    else:
        if not isinstance(it, IteratorVariable):
            it = IteratorVariable(it.unpack(tx))
            tx.stack[-1] = it
        item = it.next()
    if item is None:
        tx.pop()
        tx.jump_to(versions.for_iter_exit_offset(inst, tx.decoded.next_offset))
    else:
        tx.push(item)


@handler("RAISE_VARARGS")
def raise_varargs(tx: Translator, inst: Any) -> None:
    # In the root frame this is a graph break: the raise runs for real after the graph (under
    # a copy of the handler that would catch it, inside a `try`); in an inlined call the call
    # runs for real, unless an `except` clause of an inlined frame catches it (the type of a
    # `raise KeyError(key)` is known).
    err = Unsupported("exception", "raise", "raising an exception runs as Python")
    if inst.arg in (1, 2):
        raised, cause = tx.stack[-inst.arg], tx.stack[-1] if inst.arg == 2 else None
        if cause is not None and not (
            isinstance(raised, ExceptionVariable)
            and (
                isinstance(cause, ExceptionVariable)
                or (cause.is_constant() and cause.as_constant() is None)
            )
        ):
            raise err  # `raise Cls from ...`, `from SomeClass`: runs as Python
        if isinstance(raised, ExceptionVariable):
            if cause is not None:  # `raise err from cause`: the caught object carries it
                raised = ExceptionVariable(raised.exc_type, raised.args, cause)
            raise _raising(raised)
        if isinstance(raised, ClassVariable) and issubclass(raised.cls, BaseException):
            err.exc_type = raised.cls
    raise err


@handler("RERAISE")
def reraise(tx: Translator, inst: Any) -> None:
    # leaving an `except` clause with an exception (one raised in its body, or one it did not
    # match): a traced one goes on to the next handler out (Translator._catch), as in CPython
    exc = tx.stack[-1]
    if not isinstance(exc, ExceptionVariable):
        raise Unsupported(
            "unsupported_opcode", "RERAISE", "an exception that leaves its handler runs as Python"
        )
    raise _raising(exc)


def _raising(exc: ExceptionVariable) -> Unsupported:
    """The signal of a traced raise of `exc`: an `except` clause of a traced frame that
    matches its type takes it, and sees `exc` as `e` (Translator._catch)."""
    err = Unsupported("exception", "raise", "raising an exception runs as Python")
    err.exc_type = exc.exc_type
    err.exc_value = exc
    return err


@handler("PUSH_EXC_INFO")
def push_exc_info(tx: Translator, inst: Any) -> None:
    # reached only when the frame's `except` clause took a known exception (Translator._catch)
    tx.handling += 1
    exc = tx.pop()
    tx.handled.append(exc)
    tx.push(ConstantVariable(None))  # the exception being handled before: none while tracing
    tx.push(exc)


@handler("CHECK_EXC_MATCH")
def check_exc_match(tx: Translator, inst: Any) -> None:
    wanted = tx.pop()
    exc = tx.stack[-1]
    if not isinstance(exc, ExceptionVariable):
        raise Unsupported("unsupported_control_flow", "an `except` clause outside a traced raise")
    parts = wanted.unpack(tx) if isinstance(wanted, TupleVariable) else [wanted]
    classes = []
    for part in parts:
        cls = part.cls if isinstance(part, ClassVariable) else None
        if cls is None and part.is_constant() and isinstance(part.as_constant(), type):
            cls = part.as_constant()
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise Unsupported("unsupported_control_flow", "`except` of a non-exception")
        classes.append(cls)
    tx.push(ConstantVariable(issubclass(exc.exc_type, tuple(classes))))


@handler("POP_EXCEPT")
def pop_except(tx: Translator, inst: Any) -> None:
    tx.handling -= 1
    if tx.handled:
        tx.handled.pop()
    else:  # a clause the trace began inside (a resume function's): what was handled before?
        tx.handled_unknown = True
    tx.pop()  # the exception handled before this one (None while tracing)

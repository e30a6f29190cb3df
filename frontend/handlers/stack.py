"""Stack shuffling and no-ops: NOP, RESUME, POP_TOP, COPY, SWAP, PUSH_NULL, RETURN_VALUE."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framejit.frontend.handlers import handler
from framejit.frontend.variables.base import NULL, ConstantVariable
from framejit.frontend.variables.generators import (
    GeneratorVariable,
    dropped,
    real_generator_dropped,
)

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


@handler("NOP", "RESUME", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS")
def nop(tx: Translator, inst: Any) -> None:
    pass


@handler("PRECALL", until=(3, 11))
def precall(tx: Translator, inst: Any) -> None:
    pass


@handler("POP_TOP")
def pop_top(tx: Translator, inst: Any) -> None:
    value = tx.pop()
    if type(value) is GeneratorVariable:  # `break` out of `for v in gen(x)`: closed here
        dropped(tx, value)
    else:
        real_generator_dropped(tx, value)


@handler("COPY")
def copy(tx: Translator, inst: Any) -> None:
    tx.push(tx.stack[-inst.arg])


@handler("SWAP")
def swap(tx: Translator, inst: Any) -> None:
    s = tx.stack
    s[-1], s[-inst.arg] = s[-inst.arg], s[-1]


@handler("PUSH_NULL")
def push_null(tx: Translator, inst: Any) -> None:
    tx.push(NULL)


@handler("RETURN_VALUE")
def return_value(tx: Translator, inst: Any) -> None:
    tx.return_value = tx.pop()


@handler("RETURN_CONST", since=(3, 12))
def return_const(tx: Translator, inst: Any) -> None:
    tx.return_value = ConstantVariable(inst.argval)


@handler("END_FOR", since=(3, 12))
def end_for(tx: Translator, inst: Any) -> None:
    tx.pop()
    tx.pop()

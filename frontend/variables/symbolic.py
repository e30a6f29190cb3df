"""Symbolic sizes in the translator: `SymNodeVariable` (an int computed from symbolic sizes) and
`SizeVariable` (a `torch.Size` with some symbolic items).

A SymNodeVariable is a node of the graph (`aten.sym_size.int(x, 0)`, `operator.mul(n, 2)`, ...)
plus its value, a `torch.SymInt`/`SymFloat`/`SymBool` over the ShapeEnv's symbols. Arithmetic and
comparisons on it stay symbolic and become graph nodes; passing it to a tensor op passes the node.

Where Python needs a plain value (`range(n)`, a list index, an argument of a function that is not
traced, a value returned to the caller or kept across a graph break) the variable *specializes*:
`as_constant()` asks the ShapeEnv for the value, which records the guard `expr == value`, so the
compiled code only ever runs for inputs where that holds. A condition (`if n > 4:`) records the
guard `n > 4` (or its negation) and nothing more. Sound by construction; the cost of a
specialization is a recompile for other sizes, visible in the `dynamic` log.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.variables.base import ConstantVariable, VariableTracker
from framejit.frontend.variables.containers import TupleVariable

from framejit import logs

if TYPE_CHECKING:
    import torch.fx
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator

SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def is_symbolic(value: Any) -> bool:
    """A SymInt/SymFloat/SymBool whose value depends on a symbol (not a known constant)."""
    return type(value) in SYM_TYPES and bool(value.node.expr.free_symbols)


def contains_symbolic(value: Any) -> bool:
    if type(value) in SYM_TYPES:
        return is_symbolic(value)
    if isinstance(value, (tuple, list)):
        return any(contains_symbolic(v) for v in value)
    return False


def specialize(value: Any) -> Any:
    """The plain Python value of a symbolic one, recording the guard that pins it."""
    t = type(value)
    if t is torch.SymInt:
        return int(value)
    if t is torch.SymFloat:
        return float(value)
    if t is torch.SymBool:
        return bool(value)
    if t in (tuple, list) or t is torch.Size:
        items = [specialize(v) for v in value]
        return torch.Size(items) if t is torch.Size else t(items)
    return value


def has_sym_type(value: Any) -> bool:
    t = type(value)
    if t in SYM_TYPES:
        return True
    if t in (tuple, list) or t is torch.Size:
        return any(has_sym_type(v) for v in value)
    return False


class SymNodeVariable(VariableTracker):
    __slots__ = ("node", "value")

    def __init__(self, node: torch.fx.Node, value: Any) -> None:
        self.node = node
        self.value = value
        self.source = None

    def __repr__(self) -> str:
        return f"Sym({self.node.name}: {self.value})"

    def python_type(self) -> type:
        return {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(self.value)]

    # Usable wherever Python wants a constant; `as_constant` pins the value with a guard.
    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        value = specialize(self.value)
        logs.artifact(
            "dynamic",
            lambda: (
                f"specialized {self.node.name} = {self.value} to {value!r} "
                "(Python needed the value)"
            ),
        )
        return value

    def truth(self, tx: Translator) -> bool:
        return bool(self.value)  # records `expr` or `not expr` as a guard

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        return ConstantVariable(self.as_constant()).getattr(tx, name)

    def reconstruct(self, cg: CodeGen) -> None:
        cg.load_const(self.as_constant())


class SizeVariable(TupleVariable):
    """`x.shape` / `x.size()` when some sizes are symbolic: a tuple whose items are
    SymNodeVariables (symbolic dimensions) and ConstantVariables (static ones)."""

    kind = torch.Size

    def python_type(self) -> type:
        return torch.Size

    def as_constant(self) -> Any:
        return torch.Size([i.as_constant() for i in self.items])

    def getitem(self, tx: Translator, index: VariableTracker) -> VariableTracker:
        result = super().getitem(tx, index)
        if type(result) is TupleVariable:  # a slice of a Size is a Size
            return SizeVariable(result.items)
        return result

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "numel" and not args and not kwargs:
            total: VariableTracker = ConstantVariable(1)
            for item in self.items:
                total = tx.binary_op(operator.mul, total, item)
            return total
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg: CodeGen) -> None:
        def items() -> None:
            for item in self.items:
                cg.reconstruct(item)  # a symbolic item is a graph output
            cg.build(tuple, len(self.items))

        cg.call_const(torch.Size, items, 1)

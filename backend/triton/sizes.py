"""Sizes in the loop IR: ints, or sympy expressions of a graph's size symbols (`s0`, `s1`, ...).

A graph with symbolic sizes (dynamic shapes) keeps its sizes as sympy expressions; index
simplification then needs comparisons that hold for every value of the symbols. Each symbol is
at least 2 (torch's ShapeEnv specializes 0 and 1), which is what `provably_le` and
`provably_lt` use. A comparison that cannot be proved is reported as not holding (or as
`Unknown` where neither answer may be assumed); the index then stays unsimplified, which is
slower but never wrong.

Sizes other than sums and products (`s0 // 2`, a slice's start clamped to `[0, s0]`) are
*derived sizes*: while a graph is lowered (`SizeFacts.active()`), `size_value` replaces each
such piece with a fresh symbol `d0`, `d1`, ..., whose definition the wrapper computes in
Python at call time from the size symbols, and which kernels take as an argument like `s0`.
A derived size is not assumed to be at least 2: it is at least 0 where its definition proves
it (`d0 = s0 // 2`), else of unknown sign, and comparisons involving it say so.
"""

from __future__ import annotations

import contextvars
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

Size = Any  # int | sympy.Expr


class SymbolicUnsupported(Exception):
    """A graph with symbolic sizes uses something the symbolic path does not handle; the
    graph is then compiled per distinct size instead (symbolic.py)."""


class Unknown(Exception):
    """A comparison of symbolic sizes that sympy cannot decide."""


def is_float_symbol(value: Any) -> bool:
    """The symbol of a float argument the graph takes (automatic dynamic floats): a sympy
    symbol not known to be an integer. Kernels take it as a float32 argument."""
    return getattr(value, "is_Symbol", False) and value.is_integer is not True


def is_static(*sizes: Any) -> bool:
    return all(isinstance(n, int) for n in sizes)


def size_value(value: Any) -> Size:
    """An int, or the sympy expression of a SymInt (an int when it is a number)."""
    if isinstance(value, torch.SymInt):
        value = value.node.expr
    if isinstance(value, int):
        return value
    import sympy

    value = sympy.sympify(value)
    if value.is_Integer:
        return int(value)
    facts = _FACTS.get()
    return facts.derive(value) if facts is not None else value


def more_than_one(n: Size) -> bool:
    """Whether a dim of size `n` needs a loop variable (symbolic sizes are at least 2)."""
    return n > 1 if isinstance(n, int) else True


def _lower_bound(symbol: Any) -> int | None:
    """What a symbol is at least: 2 for a size symbol, 0 for a derived size proved
    non-negative, None for one of unknown sign."""
    if not symbol.name.startswith(DERIVED_PREFIX):
        return 2
    return 0 if symbol.is_nonnegative else None


def _sign(e: Any) -> tuple[bool, bool]:
    """(surely >= 0, surely > 0) for a polynomial in size symbols. Each symbol is at least its
    lower bound `lo` (2 for a size), so with s = t + lo (t >= 0) nonnegative coefficients in t
    prove e >= 0 everywhere, and a positive constant term then proves e > 0."""
    import sympy

    e = sympy.sympify(e)
    if e.is_number:
        return bool(e >= 0), bool(e > 0)
    symbols = sorted(e.free_symbols, key=str)
    lows = [_lower_bound(s) for s in symbols]
    if None in lows:
        return False, False
    shifted = [sympy.Symbol(f"_t{k}", nonnegative=True) for k in range(len(symbols))]
    try:
        poly = sympy.Poly(
            sympy.expand(e.subs({s: t + lo for s, t, lo in zip(symbols, shifted, lows)})),
            *shifted,
        )
    except sympy.PolynomialError:
        return False, False
    coeffs = dict(zip(poly.monoms(), poly.coeffs()))
    if any(c < 0 for c in coeffs.values()):
        return False, False
    return True, coeffs.get((0,) * len(shifted), 0) > 0


def same_size(a: Size, b: Size) -> bool:
    """Whether `a == b` for every value of the symbols (`s0*s1` and `s1*s0` are the same)."""
    if is_static(a, b):
        return a == b
    import sympy

    return sympy.expand(sympy.sympify(a) - b) == 0


def provably_lt(a: Size, b: Size) -> bool:
    """Whether `a < b` provably (for every value of the symbols)."""
    if is_static(a, b):
        return a < b
    return _sign(b - a)[1]


def provably_le(a: Size, b: Size) -> bool:
    """Whether `a <= b` provably."""
    if is_static(a, b):
        return a <= b
    return _sign(b - a)[0]


def smin(a: Size, b: Size) -> Size:
    if provably_le(a, b):
        return a
    if provably_le(b, a):
        return b
    raise Unknown


def smax(a: Size, b: Size) -> Size:
    if provably_le(a, b):
        return b
    if provably_le(b, a):
        return a
    raise Unknown


def divides(d: Size, c: Size) -> bool:
    if is_static(d, c):
        return c % d == 0
    import sympy

    return sympy.cancel(sympy.sympify(c) / d).is_integer is True


def exact_quotient(c: Size, d: Size) -> Size:
    """`c // d`, exact when symbolic (`Unknown` otherwise)."""
    if is_static(c, d):
        return c // d
    if not divides(d, c):
        raise Unknown
    import sympy

    return size_value(sympy.cancel(sympy.sympify(c) / d))


def size_divmod(c: Size, d: Size) -> tuple[Size, Size]:
    if is_static(c, d):
        return c // d, c % d
    if divides(d, c):
        return exact_quotient(c, d), 0
    if provably_le(0, c) and provably_lt(c, d):
        return 0, c
    raise Unknown


def size_text(value: Size) -> str:
    """A size as Python (and Triton) source: `768*s1 + s0`. Only sums, products and whole
    powers of symbols are written; anything else (floor, Mod, ...) is not supported."""
    if isinstance(value, int):
        return str(value)
    import sympy

    if value.is_Integer:
        return str(int(value))
    if value.is_Symbol:
        return value.name
    if value.is_Add:
        text = " + ".join(size_text(a) for a in sorted(value.args, key=str))
        return text.replace("+ -", "- ")
    if value.is_Mul:
        factors = []
        for f in value.args:
            t = size_text(f)
            factors.append(f"({t})" if f.is_Add else t)
        text = "*".join(factors)
        return text.replace("-1*", "-")
    if value.is_Pow and value.exp.is_Integer and int(value.exp) > 0:
        base = size_text(value.base)
        return "*".join([f"({base})" if value.base.is_Add else base] * int(value.exp))
    raise SymbolicUnsupported(f"size expression {value} ({sympy.srepr(value)[:60]})")


def factor_text(c: Size) -> str:
    text = size_text(c)
    return f"({text})" if not isinstance(c, int) and c.is_Add else text


# ---------------------------------------------------------------------------------------------
# Derived sizes

DERIVED_PREFIX = "d"
FLOAT_PREFIX = "f"  # derived floats: arithmetic on float arguments (`f0 = (1 - zf0)`)

# How the wrapper writes arithmetic on float arguments: as the graph's node computed it, in
# Python floats (a sympy expression may be reordered: `0.9*(1 - x)` becomes `0.9 - 0.9*x`).
_FLOAT_OPERATORS = {
    operator.add: "({0} + {1})",
    operator.sub: "({0} - {1})",
    operator.mul: "({0} * {1})",
    operator.truediv: "({0} / {1})",
    operator.pow: "({0} ** {1})",
    operator.neg: "(-{0})",
    abs: "abs({0})",
    operator.abs: "abs({0})",
}

_FACTS: contextvars.ContextVar[SizeFacts | None] = contextvars.ContextVar(
    "framejit_triton_size_facts", default=None
)

# How the wrapper writes each function a derived size may be built of (by class name: sympy's
# and torch.utils._sympy's classes of the same name mean the same here).
_PYTHON_FUNCTIONS = {
    "FloorDiv": "({0} // {1})",
    "CleanDiv": "({0} // {1})",
    "CeilDiv": "(-(-{0} // {1}))",
    "PythonMod": "({0} % {1})",
    "Mod": "({0} % {1})",
    "ModularIndexing": "(({0} // {1}) % {2})",
    "Where": "({1} if {0} else {2})",
}
_DERIVABLE = {*_PYTHON_FUNCTIONS, "Min", "Max"}


class SizeFacts:
    """What lowering knows about a graph's sizes: the derived sizes made so far (`d0 = s0 // 2`,
    in the order made, each defined over size symbols and earlier derived sizes) and the
    ShapeEnv the graph was traced with, whose guards decide comparisons the sizes' algebra
    cannot (`s0 >= 5` after the frame was traced with such a slice). Only reads it: a fact
    that was not guarded when the frame compiled is never assumed."""

    def __init__(self, shape_env: Any = None) -> None:
        self.shape_env = shape_env
        self.definitions: dict[Any, Any] = {}  # derived symbol -> its definition
        self._by_definition: dict[Any, Any] = {}
        self._float_texts: dict[Any, str] = {}  # derived float -> the Python computing it

    @contextmanager
    def active(self) -> Iterator[SizeFacts]:
        token = _FACTS.set(self)
        try:
            yield self
        finally:
            _FACTS.reset(token)

    def derive(self, value: Any) -> Any:
        """`value` with every piece other than sums, products and whole powers replaced by a
        derived symbol (the same piece, the same symbol)."""
        import sympy

        if value.is_Symbol or value.is_Number:
            return value
        if isinstance(value, sympy.Rel):
            return value.func(*(self.derive(a) for a in value.args))
        args = [self.derive(a) for a in value.args]
        if value.is_Add or value.is_Mul:
            return value.func(*args)
        if value.is_Pow and value.exp.is_Integer and int(value.exp) > 0:
            return value.func(*args)
        if type(value).__name__ not in _DERIVABLE:
            raise SymbolicUnsupported(f"size expression {value} ({sympy.srepr(value)[:60]})")
        value = value.func(*args)
        if value.is_Integer or value.is_Symbol:
            return size_value(value)
        found = self._by_definition.get(value)
        if found is None:
            name = f"{DERIVED_PREFIX}{len(self.definitions)}"
            if _nonnegative(value):
                found = sympy.Symbol(name, integer=True, nonnegative=True)
            else:
                found = sympy.Symbol(name, integer=True)
            self.definitions[found] = value
            self._by_definition[value] = found
        return found

    def derive_float(self, op: Any, args: list[Any]) -> Any:
        """A derived float symbol for `op(*args)` (a node of arithmetic on float arguments,
        sizes and numbers), which the wrapper computes in Python floats as eager does and the
        kernels take as a float32 argument like the float arguments themselves."""
        import sympy

        text = _FLOAT_OPERATORS[op].format(*(_float_operand_text(a) for a in args))
        found = self._by_definition.get(text)
        if found is None:
            found = sympy.Symbol(f"{FLOAT_PREFIX}{len(self.definitions)}", real=True)
            self.definitions[found] = op(*args)  # the symbols it is computed from
            self._by_definition[text] = found
            self._float_texts[found] = text
        return found

    def expand(self, value: Any) -> Any:
        """`value` with each derived symbol replaced by its definition, as the ShapeEnv knows
        them."""
        if isinstance(value, int):
            return value
        for symbol in reversed(list(self.definitions)):
            value = value.subs(symbol, self.definitions[symbol])
        return value

    def less(self, a: Size, b: Size) -> bool | None:
        """Whether `a < b`, where the sizes' algebra or the ShapeEnv's guards decide it, else
        None (then the wrapper must decide it at call time)."""
        if is_static(a, b):
            return a < b
        if provably_lt(a, b):
            return True
        if provably_le(b, a):
            return False
        if self.shape_env is None:
            return None
        import sympy

        try:
            found = self.shape_env._maybe_evaluate_static(sympy.Lt(self.expand(a), self.expand(b)))
        except Exception:  # a ShapeEnv of another torch, an expression it cannot read
            return None
        return bool(found) if found in (sympy.true, sympy.false) else None

    def python_text(self, symbol: Any) -> str:
        """The Python expression the wrapper computes derived `symbol` with."""
        text = self._float_texts.get(symbol)
        return text if text is not None else _python_text(self.definitions[symbol])


def derive_float(op: Any, args: list[Any]) -> Any:
    """`SizeFacts.derive_float` of the graph being lowered; None for an op the wrapper does not
    compute that way."""
    facts = _FACTS.get()
    if facts is None or op not in _FLOAT_OPERATORS:
        return None
    return facts.derive_float(op, args)


def _float_operand_text(value: Any) -> str:
    if isinstance(value, (int, float)):
        return repr(value)
    if value.is_Symbol:
        return value.name
    if value.is_Number:
        return repr(int(value)) if value.is_Integer else repr(float(value))
    return f"({size_text(value)})"  # a size expression


def _python_text(value: Any) -> str:
    import sympy

    if isinstance(value, sympy.Rel):
        return f"({_python_text(value.lhs)} {value.rel_op} {_python_text(value.rhs)})"
    if isinstance(value, (sympy.logic.boolalg.BooleanTrue, sympy.logic.boolalg.BooleanFalse)):
        return str(bool(value))
    name = type(value).__name__
    if name in ("Min", "Max"):
        return f"{name.lower()}({', '.join(_python_text(a) for a in value.args)})"
    if name in _PYTHON_FUNCTIONS:
        return _PYTHON_FUNCTIONS[name].format(*(_operand_text(a) for a in value.args))
    return factor_text(value)


def _operand_text(value: Any) -> str:
    """An operand of `//`, `%` or `if`: a sum or product in parentheses (`x % s1*s2` is
    `(x % s1)*s2` in Python)."""
    text = _python_text(value)
    if isinstance(value, int) or value.is_Atom or type(value).__name__ in ("Min", "Max"):
        return text  # a name, a number, a call
    return f"({text})"


def _nonnegative(value: Any) -> bool:
    """Whether a derived size's definition is provably >= 0."""
    name = type(value).__name__
    args = value.args
    if name in ("FloorDiv", "CleanDiv", "CeilDiv"):
        return provably_le(0, args[0]) and provably_lt(0, args[1])
    if name in ("PythonMod", "Mod", "ModularIndexing"):
        return provably_lt(0, args[-1])
    if name == "Min":
        return all(provably_le(0, a) for a in args)
    if name == "Max":
        return any(provably_le(0, a) for a in args)
    if name == "Where":
        return provably_le(0, args[1]) and provably_le(0, args[2])
    return False

"""Sizes in the loop IR: ints, or sympy expressions of a graph's size symbols (`s0`, `s1`, ...).

A graph with symbolic sizes (dynamic shapes) keeps its sizes as sympy expressions; index
simplification then needs comparisons that hold for every value of the symbols. Each symbol is
at least 2 (torch's ShapeEnv specializes 0 and 1), which is what `provably_le` and
`provably_lt` use. A comparison that cannot be proved is reported as not holding (or as
`Unknown` where neither answer may be assumed); the index then stays unsimplified, which is
slower but never wrong.
"""

from __future__ import annotations

from typing import Any

import torch

Size = Any  # int | sympy.Expr


class SymbolicUnsupported(Exception):
    """A graph with symbolic sizes uses something the symbolic path does not handle; the
    graph is then compiled per distinct size instead (symbolic.py)."""


class Unknown(Exception):
    """A comparison of symbolic sizes that sympy cannot decide."""


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
    return int(value) if value.is_Integer else value


def more_than_one(n: Size) -> bool:
    """Whether a dim of size `n` needs a loop variable (symbolic sizes are at least 2)."""
    return n > 1 if isinstance(n, int) else True


def _sign(e: Any) -> tuple[bool, bool]:
    """(surely >= 0, surely > 0) for a polynomial in size symbols. Each symbol is at least 2,
    so with s = t + 2 (t >= 0) nonnegative coefficients in t prove e >= 0 everywhere, and a
    positive constant term then proves e > 0."""
    import sympy

    e = sympy.sympify(e)
    if e.is_number:
        return bool(e >= 0), bool(e > 0)
    symbols = sorted(e.free_symbols, key=str)
    shifted = [sympy.Symbol(f"_t{k}", nonnegative=True) for k in range(len(symbols))]
    try:
        poly = sympy.Poly(
            sympy.expand(e.subs({s: t + 2 for s, t in zip(symbols, shifted)})), *shifted
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

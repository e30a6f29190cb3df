"""The loop-level IR: index arithmetic, value expressions, and the nodes of a lowered graph.

A lowered graph is a list of buffers in topological order. Each buffer is one of:

- `InputBuffer`: a graph input, with the strides it arrives with;
- `Pointwise`: `body` is a value expression over the loop variables `i0, i1, ...` of its shape;
- `Reduction`: `body` is over `i*` (the kept dims, which are the buffer's shape) and `r*` (the
  reduction ranges); `reduce_type` is `sum`, `max`, `min` or `any`;
- `Extern`: an aten op run as itself on realized tensors (matmul, convolution, anything without
  a lowering).

Beside the buffers, `EmptyCheck`s: reductions without an identity (max, min) over a symbolic
number of elements, which the wrapper checks before any launch (eager raises for none).

Invariants:

- Everything is a frozen dataclass and prints as stable text (golden tests compare it):
  `buf3: f32[4, 128] = pointwise(add(buf1[i0, i1], buf2[i1]))`.
- Index expressions (`Ix`) are integer-linear combinations of loop variables, of `//` and `%`
  atoms, and of `Indirect` atoms (an index read from memory: gather, embedding, `x[idx]`);
  simplification uses each atom's range, so the view arithmetic of a transpose prints as
  `buf0[i1, i0]`, not as a tower of divisions. `//` and `%` are only split over a sum whose
  coefficients are all non-negative; otherwise they stay whole (the kernels' `//` and `%`
  truncate, as C does, which agrees with floor division only on non-negative operands, so an
  atom whose base can be negative is only ever evaluated on masked-off lanes).
- `masked(cond, value, other)` is the only way a load may go out of range: its loads are
  masked by `cond` (cat, padding, slice_scatter read each source only where it applies).
- An index read from memory (`Indirect`) is only ever loaded through under
  `masked(in_bounds(...), ...)`, unless its range is proven (`BoundsCheck`): a bad index
  never reaches an address, and the kernel reports it for the wrapper to raise.
- A loop variable of a size-1 dimension never exists: its index is the constant 0.
- Value expressions carry their compute dtype; float16/bfloat16 values are computed in float32
  (loads upcast, stores cast back), as the kernels do.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
from framejit.backend.triton.sizes import (  # noqa: F401 (re-exported)
    Size,
    SizeFacts,
    Unknown,
    divides,
    exact_quotient,
    factor_text,
    is_static,
    more_than_one,
    provably_le,
    provably_lt,
    size_divmod,
    size_text,
    size_value,
    smax,
    smin,
)

# ---------------------------------------------------------------------------------------------
# Index arithmetic


@dataclass(frozen=True)
class Sym:
    """A loop variable ranging over `[0, size)`."""

    name: str
    size: int

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class FloorDiv:
    base: Ix
    divisor: Size

    def __str__(self) -> str:
        return f"({_paren(self.base)} // {_operand_text(self.divisor)})"


@dataclass(frozen=True)
class Mod:
    base: Ix
    modulus: Size

    def __str__(self) -> str:
        return f"({_paren(self.base)} % {_operand_text(self.modulus)})"


def _operand_text(n: Size) -> str:
    text = size_text(n)
    return text if isinstance(n, int) or n.is_Symbol else f"({text})"


@dataclass(frozen=True)
class Indirect:
    """An index read from memory: the integer value of `expr`, in `[0, size)` on every lane that
    loads through it (its `BoundsCheck` masks the others off)."""

    expr: Expr
    size: int

    def __str__(self) -> str:
        return str(self.expr)


Atom = Sym | FloorDiv | Mod | Indirect


def _paren(ix: Ix) -> str:
    text = str(ix)
    single = len(ix.terms) == 1 and ix.terms[0][1] == 1 and not ix.const
    return f"({text})" if " " in text and not single else text


def _atom_key(atom: Atom) -> str:
    return str(atom)


@dataclass(frozen=True)
class Ix:
    """`const + sum(coeff * atom)`; terms sorted by atom text, no zero coefficients."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(value: int | Atom | Ix) -> Ix:
        if isinstance(value, Ix):
            return value
        if isinstance(value, (Sym, FloorDiv, Mod, Indirect)):
            return Ix(((value, 1),), 0)
        return Ix((), size_value(value))  # a number, or a symbolic size

    @staticmethod
    def _make(coeffs: dict[Atom, int], const: int) -> Ix:
        terms = tuple(
            sorted(((a, c) for a, c in coeffs.items() if c), key=lambda t: _atom_key(t[0]))
        )
        return Ix(terms, const)

    def __add__(self, other: int | Atom | Ix) -> Ix:
        other = Ix.of(other)
        coeffs = dict(self.terms)
        for atom, c in other.terms:
            coeffs[atom] = coeffs.get(atom, 0) + c
        return Ix._make(coeffs, self.const + other.const)

    __radd__ = __add__

    def __mul__(self, k: int) -> Ix:
        return Ix._make({a: c * k for a, c in self.terms}, self.const * k)

    __rmul__ = __mul__

    @property
    def is_const(self) -> bool:
        return not self.terms

    def bounds(self) -> tuple[Size, Size]:
        """Inclusive (min, max) over the variables' ranges (`Unknown` when sizes are symbolic
        and sympy cannot order the candidates)."""
        lo = hi = self.const
        for atom, c in self.terms:
            alo, ahi = _atom_bounds(atom)
            lo += smin(c * alo, c * ahi)
            hi += smax(c * alo, c * ahi)
        return lo, hi

    def floordiv(self, d: Size) -> Ix:
        if d == 1:
            return self
        try:
            return self._floordiv(d)
        except Unknown:
            return Ix.of(FloorDiv(self, d))

    def _floordiv(self, d: Size) -> Ix:
        lo, hi = self.bounds()
        if provably_le(0, lo) and provably_lt(hi, d):
            return Ix()
        if self.is_const:
            return Ix((), exact_quotient(self.const, d))
        if not provably_le(0, lo) or not all(provably_le(0, c) for _, c in self.terms):
            return Ix.of(FloorDiv(self, d))
        whole = {a: exact_quotient(c, d) for a, c in self.terms if divides(d, c)}
        const_q, const_r = size_divmod(self.const, d)
        rest = Ix._make({a: c for a, c in self.terms if not divides(d, c)}, const_r)
        quotient = Ix._make(whole, const_q)
        if rest.is_const and rest.const == 0:
            return quotient
        if len(self.terms) == 1 and self.terms[0][1] == 1 and self.const == 0:
            inner = self.terms[0][0]
            if isinstance(inner, FloorDiv):
                return inner.base.floordiv(inner.divisor * d)
            if isinstance(inner, Mod) and divides(d, inner.modulus):
                # (x % (k d)) // d is (x // d) % k: written so, a load's address keeps
                # the lanes' contiguity that Triton's analysis sees in x (vector loads)
                return inner.base.floordiv(d).mod(exact_quotient(inner.modulus, d))
        rlo, rhi = rest.bounds()
        if provably_le(0, rlo) and provably_lt(rhi, d):
            return quotient
        if not whole:
            return Ix.of(FloorDiv(rest, d)) + quotient
        return quotient + rest.floordiv(d)

    def mod(self, m: Size) -> Ix:
        if m == 1:
            return Ix()
        try:
            return self._mod(m)
        except Unknown:
            return Ix.of(Mod(self, m))

    def _mod(self, m: Size) -> Ix:
        lo, hi = self.bounds()
        if provably_le(0, lo) and provably_lt(hi, m):
            return self
        if self.is_const:
            return Ix((), size_divmod(self.const, m)[1])
        if not provably_le(0, lo) or not all(provably_le(0, c) for _, c in self.terms):
            return Ix.of(Mod(self, m))
        if len(self.terms) == 1 and self.terms[0][1] == 1 and self.const == 0:
            inner = self.terms[0][0]
            if isinstance(inner, Mod) and divides(m, inner.modulus):
                return inner.base.mod(m)  # (x % (k m)) % m is x % m
        rest = Ix._make(
            {a: c for a, c in self.terms if not divides(m, c)}, size_divmod(self.const, m)[1]
        )
        rlo, rhi = rest.bounds()
        if provably_le(0, rlo) and provably_lt(rhi, m):
            return rest
        return Ix.of(Mod(rest, m))

    def subs(self, mapping: dict[Sym, Ix]) -> Ix:
        out = Ix((), self.const)
        for atom, c in self.terms:
            out = out + _subs_atom(atom, mapping) * c
        return out

    def syms(self) -> set[Sym]:
        """The loop variables this index depends on (through loads of `Indirect` atoms too)."""
        found: set[Sym] = set()
        for atom, _ in self.terms:
            if isinstance(atom, Sym):
                found.add(atom)
            elif isinstance(atom, Indirect):
                found |= expr_syms(atom.expr)
            else:
                found |= atom.base.syms()
        return found

    def indirects(self) -> list[Indirect]:
        found: list[Indirect] = []
        for atom, _ in self.terms:
            if isinstance(atom, Indirect):
                found.append(atom)
            elif not isinstance(atom, Sym):
                found += atom.base.indirects()
        return found

    def map_indirect(self, fn: Any) -> Ix:
        """This index with each `Indirect` atom replaced by `fn(atom) -> Ix` (no re-simplifying
        of the `//` and `%` around it)."""
        out = Ix((), self.const)
        for atom, c in self.terms:
            if isinstance(atom, Indirect):
                new = fn(atom)
            elif isinstance(atom, FloorDiv):
                new = Ix.of(FloorDiv(atom.base.map_indirect(fn), atom.divisor))
            elif isinstance(atom, Mod):
                new = Ix.of(Mod(atom.base.map_indirect(fn), atom.modulus))
            else:
                new = Ix.of(atom)
            out = out + new * c
        return out

    def __str__(self) -> str:
        parts = [
            str(a) if c == 1 else f"{factor_text(c)}*{a}"
            for a, c in sorted(self.terms, key=_term_order)
        ]
        if self.const != 0 or not parts:
            parts.append(size_text(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def _term_order(term: tuple[Atom, Size]) -> tuple[int, Any, str]:
    c = term[1]
    if isinstance(c, int):
        return (0, -abs(c), _atom_key(term[0]))
    return (1, str(c), _atom_key(term[0]))


def _atom_bounds(atom: Atom) -> tuple[Size, Size]:
    if isinstance(atom, (Sym, Indirect)):
        return 0, atom.size - 1
    lo, hi = atom.base.bounds()
    if isinstance(atom, FloorDiv):
        if is_static(lo, hi, atom.divisor):
            return lo // atom.divisor, hi // atom.divisor
        if not provably_le(0, lo):
            raise Unknown
        return 0, hi  # n // d <= n for n >= 0, d >= 1
    if is_static(lo, hi, atom.modulus):
        m = atom.modulus
        return (0, min(m - 1, hi)) if lo >= 0 else (-(m - 1), m - 1)
    if not provably_le(0, lo):
        raise Unknown
    return 0, atom.modulus - 1


def _subs_atom(atom: Atom, mapping: dict[Sym, Ix]) -> Ix:
    if isinstance(atom, Sym):
        return mapping.get(atom, Ix.of(atom))
    if isinstance(atom, Indirect):
        return Ix.of(Indirect(subs_index(atom.expr, mapping), atom.size))
    base = atom.base.subs(mapping)
    return base.floordiv(atom.divisor) if isinstance(atom, FloorDiv) else base.mod(atom.modulus)


def strip_parens(text: str) -> str:
    """`a // 8` for `(a // 8)`; `(a // 8) % 4` stays as it is."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and k < len(text) - 1:
            return text
    return text[1:-1]


def loop_vars(shape: tuple[Size, ...], prefix: str = "i") -> tuple[Ix, ...]:
    """`(i0, i1, ...)` for `shape`; a size-1 (or size-0) dimension's index is the constant 0."""
    return tuple(
        Ix.of(Sym(f"{prefix}{k}", n)) if more_than_one(n) else Ix() for k, n in enumerate(shape)
    )


def contiguous_strides(shape: tuple[Size, ...]) -> tuple[Size, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1) if isinstance(n, int) else n
    return tuple(reversed(strides))


def linear(index: tuple[Ix, ...], strides: tuple[int, ...]) -> Ix:
    out = Ix()
    for i, s in zip(index, strides):
        out = out + i * s
    return out


def unflatten(
    flat: Ix, shape: tuple[int, ...], strides: tuple[Size, ...] | None = None
) -> tuple[Ix, ...]:
    """The index into `shape` of the flat position `flat`, the dims walked row-major, or with
    `strides` (each dim's step of the flat position, a permutation's contiguous strides)."""
    out = []
    for n, s in zip(shape, contiguous_strides(shape) if strides is None else strides):
        out.append(flat.floordiv(s).mod(n) if more_than_one(n) else Ix())
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Value expressions

_SHORT = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
}


def short_dtype(dtype: torch.dtype) -> str:
    return _SHORT.get(dtype, str(dtype).replace("torch.", ""))


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a kernel computes a value of `dtype` in: low-precision floats go to float32."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


@dataclass(frozen=True)
class Load:
    buffer: str
    index: tuple[Ix, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"{self.buffer}[{', '.join(strip_parens(str(i)) for i in self.index)}]"


@dataclass(frozen=True)
class Const:
    """A constant. Equal as its text is (with its dtype): -0.0 is not 0.0 here, though the
    floats compare equal, so codegen's reuse of equal expressions cannot swap them."""

    value: bool | int | float
    dtype: torch.dtype

    def __str__(self) -> str:
        return repr(self.value)

    def _key(self) -> tuple[Any, torch.dtype]:
        return (repr(self.value) if isinstance(self.value, float) else self.value, self.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass(frozen=True)
class IndexValue:
    """An index expression used as a value (`arange`)."""

    index: Ix
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"index({self.index})"


@dataclass(frozen=True)
class ScalarArg:
    """A scalar the kernel takes as an argument, named as the wrapper names it (`seed0`)."""

    name: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Op:
    """A kernel-level operation (`add`, `exp`, `where`, `convert`, ...); see codegen's table.
    `masked(cond, value, other)`: `value` where `cond` holds (its loads masked by `cond`),
    else the constant `other`. `rand(seed, offset)`/`randn(seed, offset)`: Triton's Philox
    stream."""

    name: str
    args: tuple[Expr, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        if self.name == "convert":
            return f"convert({self.args[0]}, {short_dtype(self.dtype)})"
        return f"{self.name}({', '.join(map(str, self.args))})"


@dataclass(frozen=True)
class BoundsCheck:
    """`0 <= value < size`, as a bool, for an index read from memory. Where it fails on a live
    lane the kernel records `value` in the graph's error buffer, and the wrapper raises after
    the launch, naming `op` (an aten op), `dim` and `size`. `wrapped`: `value` had `size`
    added where it was negative (`x[idx]`), so a negative `value` was `value - size`."""

    value: Expr
    size: Size
    op: str
    dim: int
    wrapped: bool = False

    @property
    def dtype(self) -> torch.dtype:
        return torch.bool

    def __str__(self) -> str:
        return f"in_bounds({self.value}, {size_text(self.size)})"


Expr = Load | Const | IndexValue | Op | ScalarArg | BoundsCheck


def expr_loads(expr: Expr) -> list[Load]:
    """Every load `expr` makes, including the loads that compute indirect indices."""
    if isinstance(expr, Load):
        inner = [ld for i in expr.index for a in i.indirects() for ld in expr_loads(a.expr)]
        return [*inner, expr]
    if isinstance(expr, IndexValue):
        return [ld for a in expr.index.indirects() for ld in expr_loads(a.expr)]
    if isinstance(expr, Op):
        return [load for arg in expr.args for load in expr_loads(arg)]
    if isinstance(expr, BoundsCheck):
        return expr_loads(expr.value)
    return []


def expr_syms(expr: Expr) -> set[Sym]:
    if isinstance(expr, Load):
        return {s for i in expr.index for s in i.syms()}
    if isinstance(expr, IndexValue):
        return expr.index.syms()
    if isinstance(expr, Op):
        return {s for arg in expr.args for s in expr_syms(arg)}
    if isinstance(expr, BoundsCheck):
        return expr_syms(expr.value)
    return set()


def expr_scalars(expr: Expr) -> list[ScalarArg]:
    if isinstance(expr, ScalarArg):
        return [expr]
    if isinstance(expr, Op):
        return [s for arg in expr.args for s in expr_scalars(arg)]
    if isinstance(expr, BoundsCheck):
        return expr_scalars(expr.value)
    return []


def expr_size(expr: Expr) -> int:
    if isinstance(expr, BoundsCheck):
        return 1 + expr_size(expr.value)
    return 1 + sum(expr_size(a) for a in expr.args) if isinstance(expr, Op) else 1


def substitute(expr: Expr, replace_load: Any) -> Expr:
    """Rebuild `expr` with every `Load` replaced by `replace_load(load)` (the loads inside
    indirect indices first)."""

    def inner(atom: Indirect) -> Ix:
        return Ix.of(Indirect(substitute(atom.expr, replace_load), atom.size))

    if isinstance(expr, Load):
        if any(i.indirects() for i in expr.index):
            expr = Load(expr.buffer, tuple(i.map_indirect(inner) for i in expr.index), expr.dtype)
        return replace_load(expr)
    if isinstance(expr, IndexValue) and expr.index.indirects():
        return IndexValue(expr.index.map_indirect(inner), expr.dtype)
    if isinstance(expr, Op):
        return Op(expr.name, tuple(substitute(a, replace_load) for a in expr.args), expr.dtype)
    if isinstance(expr, BoundsCheck):
        return replace(expr, value=substitute(expr.value, replace_load))
    return expr


def subs_index(expr: Expr, mapping: dict[Sym, Ix]) -> Expr:
    """`expr` with loop variables renamed/replaced by `mapping` (in loads and index values)."""
    if isinstance(expr, Load):
        return Load(expr.buffer, tuple(i.subs(mapping) for i in expr.index), expr.dtype)
    if isinstance(expr, IndexValue):
        return IndexValue(expr.index.subs(mapping), expr.dtype)
    if isinstance(expr, Op):
        return Op(expr.name, tuple(subs_index(a, mapping) for a in expr.args), expr.dtype)
    if isinstance(expr, BoundsCheck):
        return replace(expr, value=subs_index(expr.value, mapping))
    return expr


# ---------------------------------------------------------------------------------------------
# Nodes


def _shape_text(dtype: torch.dtype, shape: tuple[Size, ...]) -> str:
    return f"{short_dtype(dtype)}[{', '.join(map(size_text, shape))}]"


@dataclass(frozen=True)
class InputBuffer:
    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    position: int

    def __str__(self) -> str:
        strides = ", ".join(map(size_text, self.stride))
        head = f"{self.name}: {_shape_text(self.dtype, self.shape)}"
        return f"{head} = input({self.position}, strides=[{strides}])"


@dataclass(frozen=True)
class Pointwise:
    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    body: Expr
    origin: str

    def __str__(self) -> str:
        return f"{self.name}: {_shape_text(self.dtype, self.shape)} = pointwise({self.body})"


@dataclass(frozen=True)
class Reduction:
    name: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    reduce_type: str
    ranges: tuple[int, ...]
    body: Expr
    origin: str

    def __str__(self) -> str:
        ranges = ", ".join(
            f"r{k} < {size_text(n)}" for k, n in enumerate(self.ranges) if more_than_one(n)
        )
        over = f", {ranges}" if ranges else ""
        head = f"{self.name}: {_shape_text(self.dtype, self.shape)}"
        return f"{head} = reduce_{self.reduce_type}({self.body}{over})"


@dataclass(frozen=True)
class Extern:
    """`outputs[k]` names the k-th tensor the op returns (None: not a tensor, or unused);
    `layouts[k]` is its (shape, stride, dtype). `args`/`kwargs` hold `ExternArg`s for tensors."""

    name: str
    op: Any
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    outputs: tuple[str | None, ...]
    layouts: tuple[tuple[tuple[int, ...], tuple[int, ...], torch.dtype] | None, ...]
    single: bool  # the op returns one tensor, not a tuple
    origin: str

    def __str__(self) -> str:
        args = [repr(a) if not isinstance(a, ExternArg) else str(a) for a in self.args]
        args += [f"{k}={v if isinstance(v, ExternArg) else repr(v)}" for k, v in self.kwargs]
        names = ", ".join(n or "_" for n in self.outputs)
        return f"{names} = extern({self.op}, {', '.join(args)})"


@dataclass(frozen=True)
class ExternArg:
    """A tensor argument of an extern: a realized buffer, possibly seen through view ops that
    the wrapper replays (`views`: (op, args after the tensor) pairs)."""

    buffer: str
    views: tuple[tuple[Any, tuple[Any, ...]], ...] = ()

    def __str__(self) -> str:
        text = self.buffer
        for op, args in self.views:
            text = f"{op}({', '.join([text, *map(repr, args)])})"
        return text


Node = InputBuffer | Pointwise | Reduction | Extern


@dataclass(frozen=True)
class EmptyCheck:
    """A reduction without an identity (max, min, an inf norm) over `numel` elements, a size
    known only at run time: where it is 0, the wrapper calls `op` on an empty tensor of the
    input's `shape` and `dtype` with the call's other arguments, so that eager's own error is
    raised."""

    numel: Size
    op: Any
    shape: tuple[Size, ...]
    dtype: torch.dtype
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]

    def __str__(self) -> str:
        return f"check({size_text(self.numel)} != 0, else {self.op})"


@dataclass
class LoopGraph:
    """The lowered graph: buffers in topological order, and what the graph returns."""

    nodes: list[Node] = field(default_factory=list)
    # Each output: an ExternArg (a buffer, maybe through replayed views) or a constant.
    outputs: list[Any] = field(default_factory=list)
    device: str = "cpu"
    # Random nodes draw from Philox with seeds `seed0 .. seed{seeds - 1}`, new each call.
    seeds: int = 0
    # Where each seed was made: how many nodes the graph had then. The wrapper draws a seed
    # after the random externs lowered before it and before those lowered after it, so
    # torch's generator is used in program order (see codegen's `SeedDraws`).
    seed_positions: list[int] = field(default_factory=list)
    # How many positional inputs `call` takes (unused non-tensor ones have no InputBuffer).
    arity: int = 0
    # Sizes given as numbers (symbolic graphs): (position, input name, sympy symbol).
    size_inputs: list[tuple[int, str, Any]] = field(default_factory=list)
    # 0-dim CPU tensor inputs the kernels take by value, read on the host at each call (as
    # eager's CUDA kernels take a CPU scalar): (kernel argument name, input name, dtype).
    host_scalars: list[tuple[str, str, torch.dtype]] = field(default_factory=list)
    # Reductions without an identity over a symbolic number of elements (see EmptyCheck).
    empty_checks: list[EmptyCheck] = field(default_factory=list)
    # Derived sizes (`d0 = s0 // 2`, a clamped slice start), computed by the wrapper.
    sizes: SizeFacts = field(default_factory=SizeFacts)

    def __str__(self) -> str:
        lines = [f"{d} = {self.sizes.python_text(d)}" for d in self.sizes.definitions]
        lines += [str(c) for c in self.empty_checks] + [str(n) for n in self.nodes]
        outs = [str(o) if isinstance(o, ExternArg) else repr(o) for o in self.outputs]
        lines.append(f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
        return "\n".join(lines)

    def node(self, name: str) -> Node:
        return self._by_name()[name]

    def _by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes if not isinstance(n, Extern)} | {
            out: n for n in self.nodes if isinstance(n, Extern) for out in n.outputs if out
        }

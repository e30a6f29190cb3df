"""Dynamic shapes: which input dimensions are symbolic, the ShapeEnv, and the guards on sizes.

Policy (`jit(dynamic=...)`, `config.dynamic` for whole-script mode):

- `False`: every size is a constant; TENSOR_MATCH pins each input's sizes and strides.
- `True`: every dimension of size >= 2 of a contiguous plain-tensor input (not a parameter or
  buffer) is symbolic from the first compile.
- `None` (default, *automatic*): the first compile specializes. The per-code cache remembers the
  sizes each input Source had; when a recompile finds a tensor at a remembered Source with the
  same rank but other sizes, the dimensions that changed become symbolic (and stay so for that
  Source). So a function called with batch 8 then 16 compiles twice, then serves every batch.
- `framejit.mark_dynamic(t, dim)` marks dimensions of one tensor symbolic up front (honoured
  unless `dynamic=False`).

Sizes 0 and 1 are always specialized (broadcasting and empty tensors behave differently), so a
symbolic dimension carries the guard `size >= 2`. Inputs that are not contiguous, parameters and
buffers, inference tensors and tensors with conj/neg bits stay static.

Symbolic sizes are sympy symbols of torch's `ShapeEnv`; every symbol is one input dimension,
recorded in `DynamicInputs.symbols` as `(Source, dim)`. Whatever the trace decides about sizes
(`if x.shape[0] > 4:`, a broadcast that needs two sizes equal, `int(n)` that needs the value)
the ShapeEnv records as a guard over the symbols; `shape_guards()` turns each into a
SHAPE_EXPR Guard whose text is Python over the inputs' `.size()[d]`.

The ShapeEnv costs milliseconds to create, so a frame gets one only when it may need it:
`dynamic=True`, a recompile under automatic dynamic, or a `mark_dynamic` tensor among the
arguments.
"""

from __future__ import annotations

import contextlib
import functools
import math
import operator
import re
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from framejit.frontend.sources import (
    AttrSource,
    ItemSource,
    LocalSource,
    Source,
    is_module_state,
    resumed_range,
)

from framejit import logs

MARK_ATTR = "_framejit_dynamic_dims"


def mark_dynamic(t: torch.Tensor, dim: int | list[int] | tuple[int, ...]) -> None:
    """Mark dimension(s) `dim` of `t` symbolic for the next compilation that sees `t`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_dynamic expects a tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim) if isinstance(dim, (list, tuple)) else None
    if dims is None or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise TypeError(f"mark_dynamic: dim must be an int or a list of ints, got {dim!r}")
    ndim = t.dim()
    normalized = set()
    for d in dims:
        if not -ndim <= d < ndim:
            raise ValueError(
                f"mark_dynamic: dim {d} is out of range for a tensor with {ndim} dimensions"
            )
        normalized.add(d % ndim)
    marked = set(getattr(t, MARK_ATTR, ())) | normalized
    setattr(t, MARK_ATTR, frozenset(marked))


def marked_dims(t: torch.Tensor) -> frozenset[int]:
    return getattr(t, MARK_ATTR, frozenset())


@dataclass
class ShapeHistory:
    """What automatic dynamic remembers per code object (kept in its CodeCache)."""

    sizes: dict[Source, tuple[int, ...]] = field(default_factory=dict)
    dynamic: dict[Source, frozenset[int]] = field(default_factory=dict)
    ints: dict[Source, int] = field(default_factory=dict)  # int arguments seen
    dynamic_ints: set[Source] = field(default_factory=set)
    floats: dict[Source, float] = field(default_factory=dict)  # float arguments seen
    lazy_floats: set[Source] = field(default_factory=set)
    # modules read from the frame's arguments: (class, weak reference) of the one seen last;
    # those seen as two instances of one class are guarded by class from then on
    # (`module_is_shared`)
    modules: dict[Source, tuple[type, Any]] = field(default_factory=dict)
    shared_modules: set[Source] = field(default_factory=set)


def history_of(cache: Any) -> ShapeHistory:
    """The ShapeHistory kept in a CodeCache (made on first use); a fresh one without a cache."""
    if cache is None:
        return ShapeHistory()
    if cache.shape_history is None:
        cache.shape_history = ShapeHistory()
    return cache.shape_history


class _Name(str):
    """A str that can also be called: ShapeEnv reads `source.name` as a property in some torch
    versions and calls `source.name()` in others."""

    def __call__(self) -> str:
        return str(self)


@functools.cache
def _source_class() -> type:
    import torch._guards as torch_guards

    class SizeSource(torch_guards.Source):
        """What the ShapeEnv sees as the origin of a symbol (used for its names and messages)."""

        def __init__(self, text: str) -> None:
            self.text = text

        @property
        def name(self) -> _Name:  # type: ignore[override]
            return _Name(self.text)

        def guard_source(self) -> Any:
            return torch_guards.GuardSource.LOCAL

        def __hash__(self) -> int:
            return hash(self.text)

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and other.text == self.text  # type: ignore[attr-defined]

        def __repr__(self) -> str:
            return self.text

    return SizeSource


def new_shape_env() -> Any:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # Value-dependent ops keep raising (they are graph breaks, not unbacked symbols); no duck
    # sizing: two inputs of equal size get two symbols, and only a guard can make them one.
    return ShapeEnv(
        allow_scalar_outputs=False,
        allow_dynamic_output_shape_ops=False,
        duck_shape=False,
        specialize_zero_one=True,
    )


class DynamicInputs:
    """The per-frame side of dynamic shapes: the policy, and the symbols made so far."""

    def __init__(
        self,
        dynamic: bool | None,
        cache: Any,
        frame_args: dict[str, Any],
        share_modules: bool = False,
    ) -> None:
        self.dynamic = dynamic
        self.history = history_of(cache) if dynamic is None else ShapeHistory()
        self.module_history = history_of(cache) if share_modules and cache is not None else None
        self.recompile = bool(cache is not None and cache.entries)
        # sympy symbol -> its input dimension (dim None: an int or float argument)
        self.symbols: dict[Any, tuple[Source, int | None]] = {}
        self.wanted = dynamic is True or (
            dynamic is None
            and (
                (
                    self.recompile
                    and bool(self.history.sizes or self.history.ints or self.history.floats)
                )
                or any(_has_marks(v) for v in frame_args.values())
                or any(resumed_range(LocalSource(n)) for n in frame_args)
            )
        )

    def dims_for(self, source: Source, value: torch.Tensor, shape_env: Any) -> frozenset[int]:
        """The dimensions of input `value` (read from `source`) to make symbolic."""
        if self.dynamic is False:
            return frozenset()
        shape = tuple(value.shape)
        if self.dynamic is None:
            previous = self.history.sizes.get(source)
            self.history.sizes[source] = shape
            changed = frozenset()
            if previous is not None and len(previous) == len(shape):
                changed = frozenset(d for d, (a, b) in enumerate(zip(previous, shape)) if a != b)
            dims = self.history.dynamic.get(source, frozenset()) | changed | marked_dims(value)
            if dims:
                self.history.dynamic[source] = dims
        else:
            dims = frozenset(range(len(shape))) | marked_dims(value)
        if not dims or shape_env is None or not _may_be_dynamic(source, value):
            return frozenset()
        return frozenset(d for d in dims if d < len(shape) and shape[d] >= 2)

    def module_is_shared(self, source: Source, value: Any) -> bool:
        """Whether the module `value`, read from `source` (a frame argument or a submodule of
        one), is guarded by its class rather than by identity: once a recompile of this code
        sees another instance of the same class there (the same layer class called for each of
        a model's layers, a resume function of a layer's forward), one entry serves them all.
        The graph reads the module's parameters, buffers and attributes through their sources
        and guards them (their values, the tensors' metadata) as for any object; what would
        bake one instance's identity into the compiled code pins it with an identity guard
        (NNModuleVariable.pin)."""
        history = self.module_history
        if history is None or not isinstance(source.root(), LocalSource):
            return False
        previous = history.modules.get(source)
        history.modules[source] = (type(value), weakref.ref(value))
        # (a dead one was another instance too: a model per experiment, built where the last
        # one was freed)
        if previous is not None and previous[0] is type(value) and previous[1]() is not value:
            history.shared_modules.add(source)
        return source in history.shared_modules

    def int_is_dynamic(self, source: Source, value: int, shape_env: Any) -> bool:
        """Whether int `value` (read from `source`) becomes a symbolic graph input: under
        automatic dynamic once a recompile sees it change, under `dynamic=True` always (the
        frame's own arguments only). An int read through an argument's attributes or a global
        (a step counter, `self.calls += 1`) follows automatic dynamic too. 0 and 1 stay
        specialized like sizes."""
        if self.dynamic is False:
            return False
        bound = resumed_range_bound(source)
        if not (isinstance(source, LocalSource) or bound) and (
            self.dynamic is not None or not _counter_source(source)
        ):
            return False
        if bound and source.attr == "start" and self.dynamic is None:
            # where a resumed loop goes on from: it changes at every step by design, so it is
            # symbolic from the first resume (no graph for the second step alone)
            return shape_env is not None
        if self.dynamic is None:
            previous = self.history.ints.get(source)
            self.history.ints[source] = value
            if previous is not None and previous != value:
                self.history.dynamic_ints.add(source)
            if source not in self.history.dynamic_ints:
                return False
        # a loop's range bound may be any int (`make_index`); other ints are sizes to torch
        return shape_env is not None and (value >= 2 or bound)

    def float_is_lazy(self, source: Source, value: float) -> bool:
        """Whether float argument `value` is guarded only where the trace uses its value (a
        `LazyNumberVariable`), not on entry: under automatic dynamic once a recompile sees it
        change (`loss.item()` handed to a resume function, a running total). A float the code
        only passes through (returns, stores, prints) then costs no recompile per value. An
        item of an argument counts too (`obs, reward, done = env.step(a)` across a break: the
        resume function gets the tuple), and so does an attribute or item chain from an argument
        or a global (`_float_source`)."""
        if self.dynamic is not None or not _float_source(source):
            return False
        previous = self.remember_float(source, value)
        if previous is not None and previous != value and previous == previous:
            self.history.lazy_floats.add(source)
        return source in self.history.lazy_floats

    def remember_float(self, source: Source, value: float) -> float | None:
        """Note `value` as the float `source` held in this compile (the next compile of the
        frame sees whether it changed; a change makes it symbolic); the value noted before."""
        previous = self.history.floats.get(source)
        self.history.floats[source] = value
        return previous

    def make_float(self, shape_env: Any, source: Source, value: float) -> Any:
        """A SymFloat for float argument `value` read from `source` (a graph input)."""
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        src = _source_class()(str(source))
        symbol = shape_env.create_unspecified_symbol(value, src, dynamic_dim=DimDynamic.DYNAMIC)
        self.symbols.setdefault(symbol, (source, None))
        return shape_env.create_symfloatnode(symbol, hint=value, source=src)

    def make_index(self, shape_env: Any, source: Source, value: int) -> Any:
        """A SymInt for an int that is no size (a resumed loop's range bound): any value, 0, 1
        and negative ones included, so a loop's steps share one graph from its third on."""
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        src = _source_class()(str(source))
        symbol = shape_env.create_unspecified_symbol(value, src, dynamic_dim=DimDynamic.DYNAMIC)
        self.symbols.setdefault(symbol, (source, None))
        return shape_env.create_symintnode(symbol, hint=value, source=src)

    def make_size(self, shape_env: Any, source: Source, dim: int | None, size: int) -> Any:
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        src = _source_class()(f"{source}.size()[{dim}]" if dim is not None else str(source))
        symbol = shape_env.create_symbol(size, src, dynamic_dim=DimDynamic.DYNAMIC)
        self.symbols.setdefault(symbol, (source, dim))
        return shape_env.create_symintnode(symbol, hint=size, source=src)


def _float_source(source: Source) -> bool:
    """An argument, or an item or attribute chain from an argument, a global or a closure
    variable (`L['opt'].param_groups[0]['lr']` that a scheduler changes every step,
    `G['TEMPERATURE']`), where floats that change between calls are kept. Not a module's own
    state (parameters, buffers), nor a generic attribute (a property or `__getattr__`
    result)."""
    from framejit.frontend.sources import (
        AttrSource,
        FreeVarSource,
        GenericAttrSource,
        GlobalSource,
    )

    root = source
    while isinstance(root, (ItemSource, AttrSource)) and not isinstance(root, GenericAttrSource):
        root = root.base
    if isinstance(root, (GlobalSource, FreeVarSource)):
        return True
    return isinstance(root, LocalSource) and not is_module_state(source)


def resumed_range_bound(source: Source) -> bool:
    """The start or stop of the range a resume function gets for a broken `for` loop: as much
    an argument of the frame as the loop's index was."""
    return type(source) is AttrSource and source.attr != "step" and resumed_range(source.base)


def _counter_source(source: Source) -> bool:
    """An attribute chain from an argument or a global (`L['self'].step`, `G['STEP']`), where
    a program keeps counters."""
    from framejit.frontend.sources import AttrSource, GenericAttrSource, GlobalSource

    while isinstance(source, AttrSource) and not isinstance(source, GenericAttrSource):
        source = source.base
    return isinstance(source, (LocalSource, GlobalSource))


def _has_marks(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(marked_dims(value))
    if type(value) in (list, tuple):
        return any(isinstance(v, torch.Tensor) and marked_dims(v) for v in value[:32])
    if type(value) is dict:
        return any(isinstance(v, torch.Tensor) and marked_dims(v) for v in value.values())
    return False


def _may_be_dynamic(source: Source, value: torch.Tensor) -> bool:
    return (
        type(value) is torch.Tensor
        and value.layout == torch.strided
        and not is_module_state(source)
        and not value.is_conj()
        and not value.is_neg()
        # a view of a bigger buffer (strides that do not follow from the sizes) keeps its
        # strides as they are (TensorMeta); a tensor with a zero stride (an expand) stays static
        and (value.is_contiguous() or 0 not in value.stride())
    )


def dynamic_fake(fake_mode: Any, value: torch.Tensor, sizes: list[Any]) -> torch.Tensor:
    """A FakeTensor like `value` with (some) symbolic `sizes`: contiguous, or with `value`'s own
    strides when it is not (a slice of a preallocated buffer; TensorMeta guards those strides).
    An inference tensor, as a KV cache grown under `torch.inference_mode()` is, made as one;
    requires_grad and leafness as `value`'s (the AOT stage's `_like_autograd`)."""
    from framejit.backend.aot.analysis import _like_autograd

    inference = torch.inference_mode() if value.is_inference() else contextlib.nullcontext()
    with fake_mode, inference:
        if value.is_contiguous():
            fake = torch.empty(sizes, dtype=value.dtype, device=value.device)
        else:
            fake = torch.empty_strided(
                sizes, value.stride(), dtype=value.dtype, device=value.device
            )
        return _like_autograd(fake, value)


@dataclass(frozen=True)
class ShapeCheck:
    """The `expected` of a SHAPE_EXPR guard: Python text over placeholders `___fjsN`, each the
    size of one input dimension (`sizes[N] = (Source, dim)`)."""

    text: str
    sizes: tuple[tuple[Source, int | None], ...]  # dim None: the source is an int argument

    def render(self, render_source: Any, name_module: Any = None) -> str:
        """The text with each placeholder replaced by its source as `render_source` writes it.
        `name_module(module)`: how a guard function names `torch` and `math`, which the printed
        expression calls (`torch.sym_float(...)`, `math.floor(...)`) and which a guard
        function's namespace does not hold; None keeps the names (for logs)."""
        out = self.text
        if name_module is not None:
            modules = {"torch": torch, "math": math}
            out = re.sub(
                r"(?<![\w.])(torch|math)\.", lambda m: f"{name_module(modules[m[1]])}.", out
            )
        # longest names first, so ___fjs1 never replaces the start of ___fjs12
        for n in sorted(range(len(self.sizes)), key=lambda k: -len(str(k))):
            source, dim = self.sizes[n]
            text = render_source(source) + ("" if dim is None else f".size()[{dim}]")
            out = out.replace(f"___fjs{n}", text)
        return out


def _implied_by_ranges(expr: Any, ranges: dict[Any, Any]) -> bool:
    """True when `expr` holds for every size within the symbols' ranges (which the range
    guards check), so it needs no check of its own."""
    import sympy
    from torch.utils._sympy.value_ranges import bound_sympy

    try:
        bound = bound_sympy(expr, ranges)
    except Exception:  # noqa: BLE001 - an expression the analysis does not handle: keep it
        return False
    return bool(bound.is_singleton() and bound.lower is sympy.true)


@functools.cache
def exact_printer() -> Any:
    """A printer of sympy expressions as Python that writes each float as its `repr` (torch's
    prints 17 digits: `s == 20000.299999999999` for 20000.3, a guard that fails on the value it
    was made from)."""
    from torch.utils._sympy.printers import PythonPrinter

    class ExactFloats(PythonPrinter):
        def _print_Float(self, expr: Any) -> str:
            return repr(float(expr))

    return ExactFloats()


def guard_text(expr: Any) -> tuple[str, list[Any]]:
    """`expr` as the Python text of a ShapeCheck: its free symbols (sorted by name, returned)
    written `___fjs0`, `___fjs1`, ... with their own assumptions (an integer stand-in for a
    float symbol would make `Eq(s, 20000.3)` False), floats as their `repr`."""
    import sympy

    free = sorted(expr.free_symbols, key=str)
    names = {s: sympy.Symbol(f"___fjs{k}", **s.assumptions0) for k, s in enumerate(free)}
    return exact_printer().doprint(expr.xreplace(names)), free


def shape_guard_checks(
    shape_env: Any, symbols: dict[Any, tuple[Source, int | None]]
) -> list[tuple]:
    """(ShapeCheck, origin) for every fact the trace relied on about symbolic sizes: each
    size symbol's range (>= 2, and any bound found; a float argument's symbol has none) and
    every guard the ShapeEnv recorded."""

    if shape_env is None or not symbols:
        return []
    out: list[tuple] = []

    def check(expr: Any, origin: str) -> None:
        if not expr.free_symbols:
            if not bool(expr):  # a guard recorded as False cannot hold: never reuse the graph
                out.append((ShapeCheck("False", ()), origin))
            return
        if any(s not in symbols for s in expr.free_symbols):
            raise AssertionError(f"shape guard {expr} over a symbol with no input")
        text, free = guard_text(expr)
        out.append((ShapeCheck(text, tuple(symbols[s] for s in free)), origin))

    def bound(value: Any) -> int | None:
        try:
            return int(value) if value.is_Integer else None
        except (AttributeError, TypeError, ValueError):
            return None

    for symbol in symbols:
        if not symbol.is_integer:  # a float argument's symbol: no size range
            continue
        vr = shape_env.var_to_range.get(symbol)
        low = bound(vr.lower) if vr is not None else None
        high = bound(vr.upper) if vr is not None else None
        if resumed_range_bound(symbols[symbol][0]):  # any int (make_index)
            if low is not None:
                check(symbol >= low, "symbolic index range")
        else:
            check(symbol >= max(low or 2, 2), "symbolic size range (0 and 1 are specialized)")
        if high is not None:
            check(symbol <= high, "symbolic size range")
    # the ranges the checks above guard: a float's range (narrowed to one value where the trace
    # pinned it) has no check, so nothing is implied by it
    ranges = {s: r for s, r in shape_env.var_to_range.items() if s.is_integer}
    seen: set[Any] = set()
    for guard in shape_env.guards:
        if guard.expr in seen or _implied_by_ranges(guard.expr, ranges):
            continue  # the range guards above already check it
        seen.add(guard.expr)
        where = ""
        loc = getattr(guard, "sloc", None)
        user = getattr(loc, "maybe_user_loc", None)
        if user is not None:
            where = str(user)
        check(guard.expr, where)
    if logs.enabled("dynamic"):
        logs.artifact(
            "dynamic",
            lambda: (
                "shape guards:\n"
                + "\n".join(f"  {c.render(str)}" + (f"  # {o}" if o else "") for c, o in out)
            ),
        )
    return out


# Ops that may take a float argument as a symbolic graph input (`OutputGraph._float_operand`):
# pointwise arithmetic, clamping and filling, whose result's sizes and dtype depend on the
# float's type only, and whose decompositions do not look at its value (pow does: x ** 2
# becomes x * x).
_FLOAT_OPERAND_FUNCTIONS = (
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.neg,
    torch.add,
    torch.sub,
    torch.subtract,
    torch.mul,
    torch.multiply,
    torch.div,
    torch.divide,
    torch.true_divide,
    torch.rsub,
    torch.clamp,
    torch.clip,
    torch.clamp_min,
    torch.clamp_max,
    torch.where,
    torch.lerp,
    torch.addcmul,
    torch.addcdiv,
    torch.full_like,
    torch.masked_fill,
    torch.nn.functional.leaky_relu,
    torch.nn.functional.hardtanh,
)
_FLOAT_OPERAND_METHODS = frozenset(
    {
        "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "true_divide",
        "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
        "__rtruediv__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
        "clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_max", "clamp_min_",
        "clamp_max_", "lerp", "lerp_", "addcmul", "addcmul_", "addcdiv", "addcdiv_",
        "masked_fill", "masked_fill_", "fill_",
    }
)  # fmt: skip


def takes_float_operands(kind: str, target: Any) -> bool:
    if kind == "call_method":
        return target in _FLOAT_OPERAND_METHODS
    return any(target is f for f in _FLOAT_OPERAND_FUNCTIONS)

"""The Triton source of one scheduled kernel (`KernelCode`), and the tables it writes from.

Written through a small indenting `Writer`:

- `KERNEL_OPS`: how each kernel-level op of the IR is written in Triton; some call
  `@triton.jit` helper functions (`fj_tanh`, `fj_fmod`, ...; helpers.py's `HELPERS`), in core
  `tl` math only, so the same source runs on a GPU and in Triton's CPU interpreter;
- `KernelCode(kernel, schedule, layouts).source()`: one `@triton.jit` kernel named for what it
  does (`fj_pointwise_add_relu_0`, `fj_reduce_softmax_1`), with a header comment listing the
  nodes fused into it, and tutorial-style names: `in_ptr0`, `out_ptr0`, `pid`, `offsets`,
  `mask`, `XBLOCK: tl.constexpr`; `.configs()` its candidate launch configs.

Invariants:

- Kernels compute in float32 for float16/bfloat16 data (loads upcast, stores cast back).
- Every load and store is masked unless its address is a constant; masked-off lanes never reach
  a reduction (`tl.where(mask, value, identity)`).
- A `BoundsCheck` (an index read from memory) is written as `ok = (v >= 0) & (v < n)`; the
  read it guards is masked by `ok`, and a live lane where it fails stores `1` and `v` into the
  kernel's `err_ptr` (two int64 per check, numbered across the module from `check_base`):
  plain stores of the same flag, so no atomics and nothing to pay when every index is good.
- Static shapes and strides are compile-time constants (the frontend guards them); symbolic
  sizes are kernel arguments named as the wrapper binds them (`s0`). The source is a pure
  function of the schedule (and of whether the interpreter runs it), so identical graphs give
  identical text (and cache hits).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from framejit.backend.triton import autotune
from framejit.backend.triton.helpers import HELPERS
from framejit.backend.triton.ir import (
    BoundsCheck,
    Const,
    Expr,
    FloorDiv,
    IndexValue,
    Ix,
    Load,
    Mod,
    Op,
    Reduction,
    ScalarArg,
    Sym,
    compute_dtype,
    contiguous_strides,
    expr_syms,
    is_static,
    linear,
    loop_vars,
    size_text,
    strip_parens,
    subs_index,
    unflatten,
)
from framejit.backend.triton.schedule import Kernel, Schedule
from framejit.backend.triton.sizes import Size

TL_DTYPES = {
    torch.float32: "tl.float32",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}

# Kernel-level ops of the IR: how each is written in Triton.
KERNEL_OPS = {
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "mul_rn": "fj_mul_rn({0}, {1})",  # rounded, never contracted into an fma with an add
    "truediv": "{0} / {1}",
    "mod": "{0} % {1}",
    "floordiv": "{0} // {1}",
    "neg": "-{0}",
    "exp": "tl.exp({0})",
    "log": "tl.log({0})",
    "sqrt": "tl.sqrt({0})",
    "rsqrt": "tl.rsqrt({0})",
    "abs": "tl.abs({0})",
    "sigmoid": "tl.sigmoid({0})",
    "erf": "tl.math.erf({0})",
    "sin": "tl.sin({0})",
    "cos": "tl.cos({0})",
    "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})",
    "trunc": "fj_trunc({0})",
    "round": "fj_round({0})",
    "tanh": "fj_tanh({0}, False)",
    "log1p": "fj_log1p({0})",
    "expm1": "fj_expm1({0}, False)",
    # NaN wins, as in torch (Triton's default returns the other operand)
    "maximum": "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "minimum": "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)",
    "where": "tl.where({0}, {1}, {2})",
    "eq": "{0} == {1}",
    "ne": "{0} != {1}",
    "lt": "{0} < {1}",
    "le": "{0} <= {1}",
    "gt": "{0} > {1}",
    "ge": "{0} >= {1}",
    "and": "{0} & {1}",
    "or": "{0} | {1}",
    "xor": "{0} ^ {1}",
    "not": "{0} == 0",
    "invert": "~{0}",
    "lshift": "{0} << {1}",
    "rshift": "{0} >> {1}",
    "exp2": "tl.exp2({0})",
    "log2": "tl.log2({0})",
    "atan": "fj_atan({0})",
    "atan2": "fj_atan2({0}, {1})",
    "fmod": "fj_fmod({0}, {1})",  # C's fmod, exactly
    "rand": "tl.rand({0}, {1})",
    "randn": "tl.randn({0}, {1})",
}


class Writer:
    """Lines with indentation; `with w.indent():` nests."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    def line(self, text: str = "") -> None:
        self.lines.append(("    " * self.level + text) if text else "")

    def extend(self, lines: list[str]) -> None:
        for text in lines:
            self.line(text)

    @contextmanager
    def indent(self) -> Iterator[None]:
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# -0.0 as a value computed in the kernel: Triton 3.6 makes every constant equal to 0 +0.0
NEG_ZERO = "(tl.zeros([], tl.float32) * -1.0)"


def literal(value: Any) -> str:
    if not isinstance(value, (bool, int, float)):  # a symbolic size
        text = size_text(value)
        return text if value.is_Symbol else f"({text})"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if value == 0 and math.copysign(1.0, value) < 0:
            return NEG_ZERO
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return f"({value!r})" if value < 0 else repr(value)
    return f"({value})" if value < 0 else str(value)


def _literal_number(text: str) -> bool | int | float | None:
    """The number a `literal()` text spells (None: the text is an expression)."""
    special = {
        'float("nan")': math.nan,
        'float("inf")': math.inf,
        'float("-inf")': -math.inf,
        NEG_ZERO: -0.0,
    }
    if text in special:
        return special[text]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, (bool, int, float)) else None


def _interpreter() -> bool:
    from framejit.backend.triton.cache import interpreter_active

    try:
        return interpreter_active()
    except Exception:  # Triton missing: the source is only printed
        return False


def _fold_convert(expr: Expr) -> Const | None:
    """A chain of conversions of a constant, as one constant (None: not that)."""
    if isinstance(expr, Const):
        return expr
    if isinstance(expr, Op) and expr.name == "convert":
        inner = _fold_convert(expr.args[0])
        if inner is not None:
            value = _converted(_converted(inner.value, inner.dtype), expr.dtype)
            return Const(value, expr.dtype)
    return None


def _converted(value: Any, dtype: torch.dtype) -> Any:
    """A constant as `dtype` holds it (float16 rounding, integer truncation)."""
    if not isinstance(value, (bool, int, float)):
        return value
    # a float as float64 first: torch.tensor(0.1) would round it to float32
    source = torch.float64 if isinstance(value, float) else None
    return torch.tensor(value, dtype=source).to(dtype).item()


# The float32 ops whose `KERNEL_OPS` form takes a GPU's fast exp (ex2.approx of x * log2(e),
# 44 ulps off near x = 80), in the form that takes fj_exp (2-3 ulps): in a kernel that stores a
# float32 value. A kernel storing only float16/bfloat16 (or integers) keeps the fast exp: its
# error, 2**-18 relative at most, is below the result's rounding, and a bfloat16 softmax's
# kernel would spend more time computing than reading.
_EXACT_EXP = {
    "exp": "fj_exp({0})",
    "sigmoid": "fj_sigmoid({0})",
    "expm1": "fj_expm1({0}, True)",
    "tanh": "fj_tanh({0}, True)",
}


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


class KernelCode:
    """The source and launch of one kernel."""

    def __init__(
        self, kernel: Kernel, schedule: Schedule, layouts: dict[str, Any], check_base: int = 0
    ) -> None:
        self.kernel = kernel
        self.schedule = schedule
        self.layouts = layouts
        self.members = {m.name: m for m in kernel.members}
        self.in_ptrs: dict[str, str] = {}
        self.out_ptrs = {name: f"out_ptr{k}" for k, name in enumerate(kernel.stores)}
        self.body = Writer()
        self.body.level = 1
        self.scopes: list[dict[Any, str]] = [{}]
        self.count = 0
        self.helpers: set[str] = set()
        # Runtime scalar arguments (random seeds), and the conditions of the `masked`
        # expressions being generated (they mask every load made under them).
        self.scalars: dict[str, ScalarArg] = {}
        self.guards: list[str] = []
        # Size symbols of a graph with symbolic sizes; those a kernel uses are its arguments.
        self.symbols: set[str] = schedule.symbols
        self.size_args: list[str] = []
        self.reduction = kernel.kind == "reduction"
        self.xsyms, self.rsyms = kernel.group_syms()
        self.interpreter = _interpreter()
        self.exact_exp = any(layouts[name][2] == torch.float32 for name in kernel.stores)
        # The index checks this kernel reports (slots `check_base + k` of the error buffer).
        self.check_base = check_base
        self.checks: list[BoundsCheck] = []
        # The order a pointwise kernel walks its dims in (outermost first): its output's
        # memory order, so that consecutive lanes store (and load from inputs laid out alike)
        # consecutive addresses; None: row-major (`_iteration_order`).
        self.order = None if self.reduction else _iteration_order(kernel, layouts)
        # the address that is `offsets` itself: the loop variables walked in that order
        walk = _walk_strides(kernel.xshape, self.order)
        self.flat = linear(loop_vars(kernel.xshape), walk)
        # each loop variable of a pointwise kernel as `offsets` makes it (`i2 = offsets % 768`)
        self.var_defs: dict[Sym, Ix] = {}
        numel = _numel(kernel.xshape)
        if not self.reduction and is_static(numel):
            flat = Ix.of(Sym("offsets", max(numel, 1)))
            for var, index in zip(loop_vars(kernel.xshape), unflatten(flat, kernel.xshape, walk)):
                if not var.is_const:
                    self.var_defs[var.terms[0][0]] = index

    # -- values -----------------------------------------------------------------------------

    def lookup(self, key: Any) -> str | None:
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def emit(self, text: str, key: Any = None) -> str:
        name = f"tmp{self.count}"
        self.count += 1
        self.body.line(f"{name} = {text}")
        if key is not None:
            self.scopes[-1][key] = name
        return name

    def value(self, expr: Expr) -> str:
        if isinstance(expr, Const):
            return literal(expr.value)
        found = self.lookup(expr)
        if found is not None:
            return found
        if isinstance(expr, Load):
            return self.load(expr)
        if isinstance(expr, IndexValue):
            if expr.index.is_const:
                return literal(expr.index.const)
            return self.emit(f"({self.ix_text(expr.index)}).to({TL_DTYPES[expr.dtype]})", expr)
        if isinstance(expr, ScalarArg):
            self.scalars[expr.name] = expr
            if expr.name.startswith("host"):
                # A 0-dim CPU input's value (codegen's wrapper reads it): an int of its
                # integer dtype, 0 or 1 for a bool, the float32 bits of a float (so -0.0 and
                # NaN payloads pass: Triton 3.6's interpreter turned a -0.0 argument into 0.0).
                # Under the interpreter a block like the lanes' (its bool ops fail on a 0-d
                # bool beside a block, and it cannot make an int1 block of a Python bool).
                wide = expr.dtype == torch.float64
                as_bits = expr.dtype.is_floating_point or expr.dtype == torch.bool
                carried = ("tl.int64" if wide else "tl.int32") if as_bits else TL_DTYPES[expr.dtype]
                if self.interpreter:
                    shape = ("xoffsets" if self.reduction else "offsets") + ".shape"
                    text = f"tl.full({shape}, {expr.name}, {carried})"
                else:
                    text = f"tl.cast({expr.name}, {carried})"
                if expr.dtype == torch.bool:
                    text = f"{text} != 0"
                elif expr.dtype.is_floating_point:
                    text = f"{text}.to({TL_DTYPES[expr.dtype]}, bitcast=True)"
                return self.emit(text, expr)
            return expr.name
        if isinstance(expr, BoundsCheck):
            return self.bounds_check(expr)
        assert isinstance(expr, Op)
        if expr.name == "masked":
            return self.masked(expr)
        args = [self.value(a) for a in expr.args]
        if expr.name == "signbit":  # set for -0.0 too, unlike x < 0
            number = _literal_number(args[0])
            if number is not None:  # a Python number has no .to(): its own sign bit
                return literal(math.copysign(1.0, number) < 0)
            bits = "tl.int64" if expr.args[0].dtype == torch.float64 else "tl.int32"
            return self.emit(f"{args[0]}.to({bits}, bitcast=True) < 0", expr)
        folded = _fold_convert(expr)
        if folded is not None:
            return literal(folded.value)
        if expr.name == "convert":
            if expr.dtype == torch.bool:
                return self.emit(f"{args[0]} != 0", expr)
            return self.emit(self.cast(args[0], expr.args[0].dtype, expr.dtype), expr)
        template = KERNEL_OPS[expr.name]
        if expr.name == "truediv" and expr.dtype == torch.float32:
            # correctly rounded, as eager (a GPU's `/` is div.full.f32); the interpreter runs
            # the same source, so the tests run what the GPU runs
            template = "fj_div_rn({0}, {1})"
        if expr.name in ("sqrt", "rsqrt") and expr.dtype == torch.float32:
            # subnormal inputs too (a GPU's tl.sqrt and tl.rsqrt flush them to zero)
            template = f"fj_{expr.name}({{0}})"
        if expr.name in _EXACT_EXP and expr.dtype == torch.float32 and self.exact_exp:
            template = _EXACT_EXP[expr.name]
        if expr.name in ("maximum", "minimum") and expr.dtype.is_floating_point:
            # equal operands (-0.0 and 0.0) give the second, as eager's vectorized loop does
            template = f"tl.where({{0}} == {{1}}, {{1}}, {template})"
        helper = re.match(r"(fj_\w+)\(", template)
        literals = [_literal_number(t) is not None for t in args]
        if helper or (literals and all(literals)):
            # helpers take tensors, not literals (a Python float has no .to(), and the
            # interpreter's bool ops fail on one), and so does a `tl` call or an op of
            # literals only: those become 0-d tensors (a helper's all, else the first)
            args = [
                self.tensor_literal(t, a.dtype) if is_literal and (helper or k == 0) else t
                for k, (t, a, is_literal) in enumerate(zip(args, expr.args, literals))
            ]
        if expr.name == "where":
            args[1], args[2] = self.typed_branches(args[1], args[2], expr.dtype)
        if expr.name == "neg" and expr.dtype.is_floating_point:
            # `* -1.0`: Triton 3.6 writes `-x` as `0 - x`, which makes -(0.0) +0.0
            return self.emit(f"{args[0]} * -1.0", expr)
        if helper:
            self._use_helper(helper.group(1))
        return self.emit(template.format(*args), expr)

    def tensor_literal(self, text: str, dtype: torch.dtype) -> str:
        """A literal as a tensor: its value as `dtype` holds it (as eager rounds a scalar
        operand), in the dtype the kernel computes `dtype` in. 0-d, or under the interpreter
        a block like the lanes' (its bool ops fail on a 0-d bool with a block)."""
        value = literal(_converted(_literal_number(text), dtype))
        shape = "[]"
        if self.interpreter:
            shape = ("xoffsets" if self.reduction else "offsets") + ".shape"
        tl_dtype = TL_DTYPES[compute_dtype(dtype)]
        if value == NEG_ZERO:
            return f"(tl.full({shape}, 0.0, {tl_dtype}) * -1.0)"
        return f"tl.full({shape}, {value}, {tl_dtype})"

    def masked(self, expr: Op) -> str:
        """`tl.where(cond, value, other)`, every load of `value` masked by `cond`."""
        cond_expr, body, other = expr.args
        cond = self.value(cond_expr)
        self.guards.append(cond)
        self.scopes.append({})
        try:
            value = self.value(body)
        finally:
            self.scopes.pop()
            self.guards.pop()
        value, other_value = self.typed_branches(value, self.value(other), expr.dtype)
        return self.emit(f"tl.where({cond}, {value}, {other_value})", expr)

    def typed_branches(self, value: str, other: str, dtype: torch.dtype) -> tuple[str, str]:
        """The two branches of a `tl.where` of `dtype`. When both are literals, the first
        becomes a tensor of the dtype the kernel computes `dtype` in: `tl.where` of two
        literals takes their type (int32, float32), so an int64 `where(c, 0, 1)` would then be
        reduced with int64's extremes (an error) or multiplied past int32 (a wrong answer)."""
        if _literal_number(value) is not None and _literal_number(other) is not None:
            value = self.tensor_literal(value, dtype)
        return value, other

    def bounds_check(self, check: BoundsCheck) -> str:
        """`0 <= value < size`; where it fails on a live lane (in range of the kernel, under the
        enclosing `masked` conditions), a flag and the value go to the error buffer."""
        value = self.value(check.value)
        live = self.lane_mask({s.name for s in expr_syms(check.value)})
        if not live:  # the same index on every lane: check it on the kernel's own lanes
            live = "xmask" if self.reduction else "mask"
            # made a block (a constant, or a scalar load): Triton's interpreter gives a
            # scalar bool & a block of bools a dtype no mask accepts
            base = "xoffsets" if self.reduction else "offsets"
            value = self.emit(f"tl.zeros_like({base}).to(tl.int64) + {value}")
        ok = self.emit(f"({value} >= 0) & ({value} < {literal(check.size)})", check)
        bad = self.emit(" & ".join([live, *self.guards, f"({ok} == 0)"]))
        slot = 2 * (self.check_base + len(self.checks))
        self.checks.append(check)
        self.body.line(f"tl.store(err_ptr + {slot} + 0 * {bad}, 1, {bad})")
        self.body.line(f"tl.store(err_ptr + {slot + 1} + 0 * {bad}, {value}, {bad})")
        return ok

    def cast(self, value: str, source: torch.dtype, target: torch.dtype) -> str:
        """`value.to(target)`. Integers and float64 reach half precision through float32 (as
        eager converts: c10's Half and BFloat16 are made from a float), and bfloat16 is
        rounded to nearest-even explicitly under the CPU interpreter: its own conversions
        there truncate (and mishandle integers and float64); its bfloat16 -> float32 also
        loses subnormals (1e-39 became 5.9e-39), so there that widening is done on the bits."""
        number = _literal_number(value)
        if number is not None:  # a Python number has no .to(): convert it here
            return literal(_converted(_converted(number, source), target))
        if target in (torch.float16, torch.bfloat16) and (
            not source.is_floating_point or source == torch.float64
        ):
            value = f"{value}.to(tl.float32)"
            source = torch.float32
        if target == torch.bfloat16 and self.interpreter and source == torch.float32:
            self._use_helper("fj_bfloat16_rne")
            return f"fj_bfloat16_rne({value})"
        if source == torch.bfloat16 and self.interpreter and target == torch.float32:
            self._use_helper("fj_bfloat16_to_float32")
            return f"fj_bfloat16_to_float32({value})"
        return f"{value}.to({TL_DTYPES[target]})"

    def ix_text(self, ix: Ix) -> str:
        """An index as Triton code: indirect atoms become the values they load."""
        if ix.indirects():
            ix = ix.map_indirect(lambda a: Ix.of(Sym(self.value(a.expr), a.size)))
        return str(ix)

    def _use_helper(self, name: str) -> None:
        deps, _ = HELPERS[name]
        for dep in deps:
            self._use_helper(dep)
        self.helpers.add(name)

    def member_value(self, name: str) -> str:
        found = self.lookup(("member", name))
        if found is not None:
            return found
        node = self.members[name]
        body = subs_index(self.schedule.bodies[name], self.kernel.mapping(node))
        result = self.value(body)
        self.scopes[-1][("member", name)] = result
        return result

    def member_read(self, name: str) -> str:
        """A fused member's value as a later member of the kernel reads it: what a load of
        its buffer would give. Its body may compute in another dtype (`x.long()` is x's float
        value until stored, `x.double()` x's float32 one, a float16 member float32): the
        value is converted, and a float16/bfloat16 one rounded, as an inlined node of that
        dtype is (`y = x.half(); return y, y.float() - x` is the rounding error, not 0). So a
        lowering's intermediate that eager keeps in float32 must be a float32 node (the
        norms' sums of powers: ops/reductions.py)."""
        value = self.member_value(name)
        body_dtype = self.schedule.bodies[name].dtype
        dtype = self.layouts[name][2]
        if body_dtype == dtype or (
            compute_dtype(body_dtype) == compute_dtype(dtype)
            and dtype not in (torch.float16, torch.bfloat16)
        ):
            return value
        found = self.lookup(("read", name))
        if found is not None:
            return found
        text = f"{value} != 0" if dtype == torch.bool else self.cast(value, body_dtype, dtype)
        if dtype in (torch.float16, torch.bfloat16):  # computed in float32, as a load gives it
            text = self.cast(text, dtype, torch.float32)
        return self.emit(text, ("read", name))

    def load(self, load: Load) -> str:
        if load.buffer in self.members:
            return self.member_read(load.buffer)
        _, stride, dtype = self.layouts[load.buffer]
        ptr = self.in_ptrs.setdefault(load.buffer, f"in_ptr{len(self.in_ptrs)}")
        address = linear(load.index, stride)
        own_mask = self.mask_for(address)
        mask = " & ".join(m for m in [own_mask, *self.guards] if m)
        if mask:
            other = (
                ""
                if dtype == torch.bool
                else (", other=0.0" if dtype.is_floating_point else ", other=0")
            )
            pointer = self.address(address)
            if not own_mask:  # one address, masked by a guard: a block of that address
                pointer = f"({pointer} + 0 * {self.guards[-1]})"
            text = f"tl.load({ptr} + {pointer}, {mask}{other})"
        elif self.interpreter:
            # one address for every lane, loaded as a block: Triton's interpreter mishandles
            # scalars in bool ops with blocks (a scalar `x != 0` & a block is an error there)
            base = "xoffsets" if self.reduction else "offsets"
            text = f"tl.load({ptr} + {self.address(address)} + 0 * {base})"
        else:
            text = f"tl.load({ptr} + {self.address(address)})"
        if dtype in (torch.float16, torch.bfloat16):
            return self.emit(self.cast(text, dtype, torch.float32), load)
        return self.emit(text, load)

    def mask_for(self, address: Ix) -> str:
        return self.lane_mask({s.name for s in address.syms()})

    def lane_mask(self, syms: set[str]) -> str:
        """The mask of the lanes a value over loop variables `syms` lives on ("": none)."""
        if not self.reduction:
            return "mask" if syms else ""
        has_x = any(s.name in syms for s in self.xsyms)
        has_r = any(s.name in syms for s in self.rsyms)
        return {(True, True): "mask", (True, False): "xmask", (False, True): "rmask"}.get(
            (has_x, has_r), ""
        )

    def address(self, address: Ix) -> str:
        if not self.reduction and address == self.flat and not address.is_const:
            return "offsets"
        text = self.ix_text(self.through_offsets(address))
        return f"({text})" if " " in text else text

    def through_offsets(self, address: Ix) -> Ix:
        """`address` with each `v // d` and `v % d` of a loop variable `v` whose size `d`
        divides written from `offsets` (`i2 = offsets % 768`: `i2 // 64` is
        `(offsets // 64) % 12`, `i2 % 64` is `offsets % 64`). The same values; but Triton's
        analysis then sees runs of consecutive addresses (64 here) and loads them as vectors:
        GPT-2's attention output, `[B, 12, T, 64]` transposed to `[B, T, 768]`, was read 2
        bytes per load (a 128-bit load each 8 bfloat16 elements with this)."""
        out = Ix((), address.const)
        for atom, c in address.terms:
            new = Ix.of(atom)
            if isinstance(atom, (FloorDiv, Mod)) and len(atom.base.terms) == 1:
                var, coeff = atom.base.terms[0]
                k = atom.divisor if isinstance(atom, FloorDiv) else atom.modulus
                defined = self.var_defs.get(var)
                plain = coeff == 1 and not atom.base.const and defined is not None
                if plain and isinstance(k, int) and var.size % k == 0:
                    new = defined.floordiv(k) if isinstance(atom, FloorDiv) else defined.mod(k)
            out = out + new * c
        return out

    # -- kernel -----------------------------------------------------------------------------

    def store(self, name: str, value: str, full: bool) -> None:
        shape, stride, dtype = self.layouts[name]
        node = self.members[name]
        address = linear(loop_vars(shape), stride).subs(self.kernel.mapping(node))
        expr_dtype = self.schedule.bodies[name].dtype
        if dtype != expr_dtype:
            if dtype == torch.bool:
                value = f"{value} != 0"
            else:
                value = self.cast(value, expr_dtype, dtype)
        mask = self.mask_for(address) or ("mask" if full or not self.reduction else "xmask")
        pointer = self.address(address)
        if address.is_const:
            base = "xoffsets" if self.reduction else "offsets"
            pointer = f"{pointer} + 0 * {base}"
        self.body.line(f"tl.store({self.out_ptrs[name]} + {pointer}, {value}, {mask})")

    def reduce(self, node: Reduction, persistent: bool) -> str:
        body = subs_index(self.schedule.bodies[node.name], self.kernel.mapping(node))
        if node.reduce_type in ("argmax", "argmin"):
            return self.arg_reduce(node, body, persistent)
        is_bool = node.dtype == torch.bool
        dtype = torch.int32 if is_bool else body.dtype
        # a bool reduction runs on int32 lanes, but starts from False or True, not int32's
        # extremes (`!= 0` would make those True: an empty any() would be True)
        identity = _identity(node.reduce_type, node.dtype if is_bool else dtype)
        if node.reduce_type == "prod":
            self._use_helper("fj_mul")
        combine = {
            "sum": "tl.sum({0}, 1)",
            "max": "tl.max({0}, 1)",
            "min": "tl.min({0}, 1)",
            "prod": "tl.reduce({0}, 1, fj_mul)",
        }[node.reduce_type]
        if node.reduce_type in ("max", "min") and dtype.is_floating_point:
            # a NaN anywhere makes the result NaN, as in torch (tl.max skips NaNs)
            helper = f"fj_{node.reduce_type}_nan"
            self._use_helper(helper)
            combine = f"tl.reduce({{0}}, 1, {helper})"
        suffix = " != 0" if is_bool else ""
        if persistent:
            value = self.reduce_operand(body, is_bool)
            total = combine.format(f"tl.where(mask, {value}, {identity})")
            return self.emit(f"{total}[:, None]{suffix}")
        acc = f"acc{self.count}"
        self.count += 1
        self.body.line(f"{acc} = tl.full([XBLOCK, RBLOCK], {identity}, {TL_DTYPES[dtype]})")
        with self.loop():
            value = self.reduce_operand(body, is_bool)
            masked = f"tl.where(mask, {value}, {identity})"
            nan = ", propagate_nan=tl.PropagateNan.ALL"
            update = {
                "sum": f"{acc} + {masked}",
                "max": f"tl.maximum({acc}, {masked}{nan})",
                "min": f"tl.minimum({acc}, {masked}{nan})",
                "prod": f"{acc} * {masked}",
            }[node.reduce_type]
            self.body.line(f"{acc} = {update}")
        return self.emit(f"{combine.format(acc)}[:, None]{suffix}")

    def reduce_operand(self, body: Expr, is_bool: bool) -> str:
        """A reduction's body as a tensor, bools (`is_bool`) as int32. A constant body
        (`torch.full(...).max(1)`) is a literal: a Python number has no `.to()`, and the
        combining ops (`&`, `!=`, `tl.where`) need a tensor."""
        value = self.value(body)
        if _literal_number(value) is not None:
            value = self.tensor_literal(value, body.dtype)
        return f"{value}.to(tl.int32)" if is_bool else value

    def arg_reduce(self, node: Reduction, body: Expr, persistent: bool) -> str:
        """The first index of the largest (argmax) or smallest (argmin) value along the
        reduction, NaN counting as the extreme, as torch does. Each lane keeps its best
        (value, index); the lanes are then combined: any NaN wins, else the best value, and
        among equal values the smallest index."""
        is_max = node.reduce_type == "argmax"
        dtype = torch.int32 if body.dtype == torch.bool else body.dtype
        floating = dtype.is_floating_point
        worst = _identity("max" if is_max else "min", dtype)
        better = ">" if is_max else "<"
        big = "2147483647"
        is_bool = body.dtype == torch.bool
        if persistent:
            vals = self.emit(f"tl.where(mask, {self.reduce_operand(body, is_bool)}, {worst})")
            idxs = self.emit("roffsets + tl.zeros([XBLOCK, RBLOCK], tl.int32)")
            valid = "mask"
        else:
            vals, idxs = f"accv{self.count}", f"acci{self.count}"
            self.count += 1
            self.body.line(f"{vals} = tl.full([XBLOCK, RBLOCK], {worst}, {TL_DTYPES[dtype]})")
            self.body.line(f"{idxs} = tl.full([XBLOCK, RBLOCK], {big}, tl.int32)")
            with self.loop():
                value = self.emit(self.reduce_operand(body, is_bool))
                take = f"({idxs} == {big}) | ({value} {better} {vals})"
                if floating:
                    take += f" | (({value} != {value}) & ({vals} == {vals}))"
                take = self.emit(f"mask & ({take})")
                self.body.line(f"{vals} = tl.where({take}, {value}, {vals})")
                self.body.line(f"{idxs} = tl.where({take}, roffsets, {idxs})")
            valid = self.emit(f"{idxs} != {big}")
        reduce_best = "tl.max" if is_max else "tl.min"
        if floating:
            nan = self.emit(f"({vals} != {vals}) & {valid}")
            any_nan = self.emit(f"tl.max({nan}.to(tl.int32), 1)[:, None] > 0")
            plain = self.emit(f"tl.where({nan} | ({valid} == 0), {worst}, {vals})")
            best = self.emit(f"{reduce_best}({plain}, 1)[:, None]")
            hit = self.emit(f"{valid} & tl.where({any_nan}, {nan}, {plain} == {best})")
        else:
            best = self.emit(f"{reduce_best}(tl.where({valid}, {vals}, {worst}), 1)[:, None]")
            hit = self.emit(f"{valid} & ({vals} == {best})")
        return self.emit(f"tl.min(tl.where({hit}, {idxs}, {big}), 1)[:, None].to(tl.int64)")

    @contextmanager
    def loop(self) -> Iterator[None]:
        self.body.line("for roffset in range(0, rnumel, RBLOCK):")
        with self.body.indent():
            self.body.line("roffsets = roffset + tl.arange(0, RBLOCK)[None, :]")
            self.body.line("rmask = roffsets < rnumel")
            self.body.line("mask = xmask & rmask")
            self.body.extend(_sym_lines(self.kernel.rshape, "roffsets", "r"))
            self.scopes.append({})
            try:
                yield
            finally:
                self.scopes.pop()

    def generate(self) -> list[str]:
        kernel = self.kernel
        persistent = kernel.persistent
        full_stores: list[str] = []
        for node in kernel.members:
            role = kernel.roles[node.name]
            if isinstance(node, Reduction):
                result = self.reduce(node, persistent or not self.reduction)
                self.scopes[0][("member", node.name)] = result
                if node.name in kernel.stores:
                    self.store(node.name, result, full=False)
            elif node.name in kernel.stores:
                if role == "full" and not persistent:
                    full_stores.append(node.name)
                    continue
                self.store(node.name, self.member_value(node.name), full=role == "full")
        if full_stores:
            with self.loop():
                for name in full_stores:
                    self.store(name, self.member_value(name), full=True)
        return self.body.lines

    def source(self) -> str:
        body = self.generate()
        kernel = self.kernel
        self.size_args = _symbols_in("\n".join(body), self.symbols)
        w = Writer()
        if self.scalars:  # seeds change every call: no recompiling for their values
            w.line(f"@triton.jit(do_not_specialize={list(self.scalars)!r})")
        else:
            w.line("@triton.jit")
        ptrs = list(self.in_ptrs.values()) + list(self.out_ptrs.values())
        ptrs += ["err_ptr"] if self.checks else []
        ptrs += list(self.scalars)
        ptrs += self.size_args
        if self.reduction:
            params = [*ptrs, "xnumel", "rnumel", "XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
        else:
            params = [*ptrs, "xnumel", "XBLOCK: tl.constexpr"]
        self._signature_line = len(w.lines)
        w.line(f"def {kernel.name}({', '.join(params)}):")
        with w.indent():
            w.line(f"# {kernel.kind} kernel over {_shape_text(kernel)}; fused nodes:")
            for node in kernel.inlined:
                w.line(f"#   {node}  (inlined)")
            for node in kernel.members:
                where = (
                    f"-> {self.out_ptrs[node.name]}"
                    if node.name in self.out_ptrs
                    else "(kept in registers)"
                )
                w.line(f"#   {node}  {where}")
            for buffer, ptr in self.in_ptrs.items():
                w.line(f"# {ptr}: {buffer}")
            wide = _needs_int64(kernel, self.layouts, [*self.in_ptrs, *self.out_ptrs])
            w.line("pid = tl.program_id(0)" + (".to(tl.int64)" if wide else ""))
            if self.reduction:
                w.line("xoffsets = pid * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
                w.line("xmask = xoffsets < xnumel")
                defs = _sym_lines(kernel.xshape, "xoffsets", "i")
                if kernel.persistent:
                    w.line("roffsets = tl.arange(0, RBLOCK)[None, :]")
                    w.line("rmask = roffsets < rnumel")
                    w.line("mask = xmask & rmask")
                    defs += _sym_lines(kernel.rshape, "roffsets", "r")
            else:
                w.line("offsets = pid * XBLOCK + tl.arange(0, XBLOCK)")
                w.line("mask = offsets < xnumel")
                defs = _sym_lines(kernel.xshape, "offsets", "i", self.order)
            text = "\n".join(body)
            defs = [d for d in defs if re.search(rf"\b{d.split(' =')[0]}\b", text)]
            w.extend(defs)
            extra = [n for n in _symbols_in("\n".join(defs), self.symbols) if n not in ptrs]
            if extra:  # sizes used only to split the flat offset into loop variables
                self.size_args += extra
                params[len(ptrs) : len(ptrs)] = extra
                w.lines[self._signature_line] = f"def {kernel.name}({', '.join(params)}):"
        w.lines.extend(body)
        return w.text()

    def numels(self) -> list[int]:
        """`xnumel` (and `rnumel`): the kernel's arguments after the pointers and scalars."""
        kernel = self.kernel
        numels = [_numel(kernel.xshape)]
        return numels + [_numel(kernel.rshape)] if self.reduction else numels

    def configs(self, wide: bool) -> list[autotune.Config]:
        """The launch configs to choose among (the first is the default); [] for no launch."""
        xnumel, *rest = self.numels()
        if not is_static(xnumel, *rest):  # one config that fits every size
            if not self.reduction:
                return [{"XBLOCK": 1024, "num_warps": 4}]
            if self.kernel.x_major:
                return [{"XBLOCK": 64, "RBLOCK": 16, "num_warps": 4}]
            if self.kernel.persistent:
                rblock = 1 << max(rest[0] - 1, 0).bit_length()
                return [
                    {
                        "XBLOCK": max(1, 4096 // rblock),
                        "RBLOCK": rblock,
                        "num_warps": 8 if rblock >= 2048 else 4,
                    }
                ]
            return [{"XBLOCK": 1, "RBLOCK": 1024, "num_warps": 4}]
        if xnumel == 0:
            return []
        if not self.reduction:
            return autotune.configs("pointwise", xnumel, 0, False, wide)
        kind = "reduction_x_major" if self.kernel.x_major else "reduction"
        return autotune.configs(kind, xnumel, rest[0], self.kernel.persistent, wide)


def _identity(reduce_type: str, dtype: torch.dtype) -> str:
    if reduce_type == "prod":
        return "1.0" if dtype.is_floating_point else "1"
    if reduce_type == "sum":
        return "0.0" if dtype.is_floating_point else "0"
    if dtype == torch.bool:  # any() is a max, all() a min: False and True, as 0 and 1
        return "0" if reduce_type == "max" else "1"
    if dtype.is_floating_point:
        return 'float("-inf")' if reduce_type == "max" else 'float("inf")'
    info = torch.iinfo(dtype)
    return literal(info.min if reduce_type == "max" else info.max)


def _iteration_order(kernel: Kernel, layouts: dict[str, Any]) -> tuple[int, ...] | None:
    """The order (outermost dim first) a pointwise kernel should walk its dims in: that of the
    strides of the first buffer it stores over its whole shape, when they are static and not
    row-major (a channels-last or transposed output). None: row-major. Any order computes the
    same values (each lane still gets one position); this one makes neighbouring lanes touch
    neighbouring addresses."""
    for name in kernel.stores:
        shape, stride, _ = layouts[name]
        if tuple(shape) != tuple(kernel.xshape) or not is_static(*shape, *stride):
            continue
        dims = [d for d in range(len(shape)) if shape[d] > 1]
        order = sorted(dims, key=lambda d: -stride[d])  # stable: ties keep row-major order
        if order == dims:
            return None
        return tuple(order) + tuple(d for d in range(len(shape)) if shape[d] <= 1)
    return None


def _walk_strides(shape: tuple[Size, ...], order: tuple[int, ...] | None) -> tuple[Size, ...]:
    """Per dim, how far a step along it moves the flat offset when dims are walked in `order`
    (None: row-major, the contiguous strides)."""
    if order is None:
        return contiguous_strides(shape)
    strides: list[Size] = [1] * len(shape)
    step: Size = 1
    for d in reversed(order):
        strides[d] = step
        step = step * max(shape[d], 1)
    return tuple(strides)


def _sym_lines(
    shape: tuple[int, ...], flat: str, prefix: str, order: tuple[int, ...] | None = None
) -> list[str]:
    syms = [s for s in loop_vars(shape, prefix) if not s.is_const]
    if not syms:
        return []
    numel = _numel(shape)
    position = Ix.of(Sym(flat, max(numel, 1) if is_static(numel) else numel))
    lines = []
    indices = unflatten(position, shape, _walk_strides(shape, order))
    for var, index in zip(loop_vars(shape, prefix), indices):
        if var.is_const:
            continue
        lines.append(f"{var} = {strip_parens(str(index))}")
    return lines


def _shape_text(kernel: Kernel) -> str:
    if kernel.kind == "pointwise":
        return f"{list(kernel.xshape)}"
    return f"{list(kernel.xshape)} x reduction {list(kernel.rshape)}"


def _needs_int64(kernel: Kernel, layouts: dict[str, Any], buffers: list[str]) -> bool:
    if not is_static(*kernel.xshape, *kernel.rshape):
        return True  # sizes only known at run time
    largest = _numel(kernel.xshape) * max(_numel(kernel.rshape), 1)
    for name in buffers:
        shape, stride, _ = layouts[name]
        largest = max(largest, 1 + sum((n - 1) * s for n, s in zip(shape, stride)))
    return largest >= 2**31


def _symbols_in(text: str, symbols: set[str]) -> list[str]:
    """The size symbols (`s0`) that occur in kernel source `text`."""
    return sorted(n for n in symbols if re.search(rf"\b{n}\b", text))

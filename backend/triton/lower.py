"""Lowering: a functional core-aten graph becomes a `LoopGraph` of loop-level nodes.

`lower(gm) -> Lowering` (its `.graph` is the `LoopGraph`) walks the aten graph in order.
Each op is looked up in the op table (`ops.py`, one entry per op: its lowering and its dtype
rule); ops without an entry, or whose
entry declines the particular call (`NotLowered`), become an `Extern` that runs the aten op
itself, with a `perf_hints` line. Nothing fails for want of a lowering.

Values during lowering are `TensorValue`s: a shape, a dtype and a loader `index -> Expr`.
Every non-view op creates one buffer node (`buf3 = pointwise(...)`); views create no node,
only a loader doing index arithmetic on the buffer they view, plus the list of view ops that
the wrapper replays when an extern or an output needs the real tensor (`ExternArg.views`).

Invariants:

- Buffers that must exist in memory (graph outputs, extern arguments) are listed in
  `LoopGraph`'s companion set `must_realize`; the scheduler inlines every other pointwise node.
- A node made for an fx node with a dense layout gets that node's strides, so outputs come
  back laid out as eager lays them out; nodes made inside a decomposition are contiguous.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.fx
from framejit.backend.aot.core_ops import op_name
from framejit.backend.triton.ir import (
    Const,
    Expr,
    Extern,
    ExternArg,
    InputBuffer,
    Ix,
    Load,
    LoopGraph,
    Pointwise,
    Reduction,
    ScalarArg,
    compute_dtype,
    contiguous_strides,
    is_static,
    loop_vars,
    size_value,
)
from framejit.backend.triton.sizes import (
    Size,
    SizeFacts,
    SymbolicUnsupported,
    derive_float,
    same_size,
)

SUPPORTED_DTYPES = frozenset(
    {
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
    }
)


class NotLowered(Exception):
    """Raised by a lowering that does not handle this particular call; the op runs as extern."""


@dataclass(frozen=True)
class Meta:
    """What lowerings read of a node's FakeTensor, sizes as ints or sympy expressions."""

    shape: tuple[Any, ...]
    strides: tuple[Any, ...]
    dtype: torch.dtype
    device: torch.device

    def stride(self) -> tuple[Any, ...]:
        return self.strides


def meta_value(val: Any) -> Any:
    """`val` (a node's `meta["val"]`) with tensors as `Meta` and SymInts as sympy expressions."""
    if isinstance(val, torch.Tensor):
        shape = tuple(size_value(d) for d in val.shape)
        strides = tuple(size_value(d) for d in val.stride())
        return Meta(shape, strides, val.dtype, val.device)
    if isinstance(val, (list, tuple)):
        return tuple(meta_value(v) for v in val)
    if isinstance(val, torch.SymInt):
        return size_value(val)
    return val


# Size arithmetic nodes of symbolic graphs: evaluated on the sizes' sympy expressions.
_SIZE_FUNCTIONS = {
    operator.add,
    operator.sub,
    operator.mul,
    operator.neg,
    operator.pow,
}


@dataclass(frozen=True)
class TensorValue:
    shape: tuple[int, ...]
    dtype: torch.dtype
    loader: Callable[[tuple[Ix, ...]], Expr]
    # The realized buffer this value is (possibly through replayable view ops).
    base: ExternArg

    def load(self, index: Sequence[Ix]) -> Expr:
        return self.loader(tuple(index))

    def view(
        self,
        shape: Sequence[int],
        loader: Callable[[tuple[Ix, ...]], Expr],
        op: Any,
        args: tuple[Any, ...],
        dtype: torch.dtype | None = None,
    ) -> TensorValue:
        base = ExternArg(self.base.buffer, (*self.base.views, (op, args)))
        return TensorValue(tuple(shape), dtype or self.dtype, loader, base)


@dataclass
class Lowering:
    """State of one lowering: the graph being built and what the scheduler must know."""

    graph: LoopGraph = field(default_factory=LoopGraph)
    must_realize: set[str] = field(default_factory=set)
    hints: list[str] = field(default_factory=list)
    origin: str = ""
    # the graph's 0-dim CPU values the kernels take by value (`host_scalar_nodes`)
    host_nodes: set[torch.fx.Node] = field(default_factory=set)
    # 0-dim CPU constants written into the kernels as numbers: each becomes an extern holding
    # the tensor only if something needs the tensor itself (`realize`)
    pending_constants: dict[str, torch.Tensor] = field(default_factory=dict)
    _count: int = 0

    def new_name(self) -> str:
        name = f"buf{self._count}"
        self._count += 1
        return name

    def buffer_value(self, name: str, shape: Sequence[int], dtype: torch.dtype) -> TensorValue:
        load_dtype = compute_dtype(dtype)

        def loader(index: tuple[Ix, ...]) -> Expr:
            return Load(name, index, load_dtype)

        return TensorValue(tuple(shape), dtype, loader, ExternArg(name))

    def pointwise(
        self, shape: Sequence[int], dtype: torch.dtype, fn: Callable[[tuple[Ix, ...]], Expr]
    ) -> TensorValue:
        shape = tuple(shape)
        name = self.new_name()
        body = fn(loop_vars(shape))
        self.graph.nodes.append(
            Pointwise(name, shape, contiguous_strides(shape), dtype, body, self.origin)
        )
        return self.buffer_value(name, shape, dtype)

    def reduction(
        self,
        shape: Sequence[int],
        ranges: Sequence[int],
        dtype: torch.dtype,
        reduce_type: str,
        fn: Callable[[tuple[Ix, ...], tuple[Ix, ...]], Expr],
    ) -> TensorValue:
        shape, ranges = tuple(shape), tuple(ranges)
        name = self.new_name()
        body = fn(loop_vars(shape), loop_vars(ranges, "r"))
        self.graph.nodes.append(
            Reduction(
                name,
                shape,
                contiguous_strides(shape),
                dtype,
                reduce_type,
                ranges,
                body,
                self.origin,
            )
        )
        return self.buffer_value(name, shape, dtype)

    def new_seed(self) -> ScalarArg:
        """A fresh random seed: a kernel argument the wrapper draws anew on every call."""
        seed = ScalarArg(f"seed{self.graph.seeds}", torch.int64)
        self.graph.seeds += 1
        self.graph.seed_positions.append(len(self.graph.nodes))
        return seed

    def realize(self, value: TensorValue) -> ExternArg:
        held = self.pending_constants.pop(value.base.buffer, None)
        if held is not None:
            self.graph.nodes.append(_constant_extern(value.base.buffer, held))
        self.must_realize.add(value.base.buffer)
        return value.base

    def hint(self, text: str) -> None:
        self.hints.append(text)


def lower(gm: torch.fx.GraphModule) -> Lowering:
    """Lower every node of `gm`; see the module docstring."""
    from framejit.backend.triton.ops import LOWERINGS

    ctx = Lowering()
    ctx.host_nodes = host_scalar_nodes(gm)
    ctx.graph.sizes = SizeFacts(_shape_env(gm))
    with ctx.graph.sizes.active():
        _lower_nodes(ctx, gm, LOWERINGS)
    return ctx


def _shape_env(gm: torch.fx.GraphModule) -> Any:
    """The ShapeEnv of a graph with symbolic sizes (None for a static graph)."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for v in val if isinstance(val, (list, tuple)) else [val]:
            sizes = [v] if isinstance(v, torch.SymInt) else []
            if isinstance(v, torch.Tensor):
                sizes = [d for d in (*v.shape, *v.stride()) if isinstance(d, torch.SymInt)]
            for d in sizes:
                return d.node.shape_env
    return None


def _lower_nodes(ctx: Lowering, gm: torch.fx.GraphModule, table: dict[str, Any]) -> None:
    env: dict[torch.fx.Node, Any] = {}
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.SymInt):  # a size given as a number
                env[node] = size_value(val)
                ctx.graph.size_inputs.append((position, node.name, env[node]))
                position += 1
                continue
            if isinstance(val, torch.SymFloat) and val.node.expr.is_Symbol:
                # a float argument (automatic dynamic): bound and passed to the kernels like
                # a size symbol, a float32 argument there (ops.table refuses other dtypes)
                env[node] = val.node.expr
                ctx.graph.size_inputs.append((position, node.name, env[node]))
                position += 1
                continue
            if not isinstance(val, torch.Tensor):
                if node.users:
                    raise NotLowered(f"input {node.name} is not a tensor")
                position += 1  # an unused number (a size the graph was specialized to)
                continue
            info = meta_value(val)
            buf = InputBuffer(node.name, info.shape, info.strides, val.dtype, position)
            position += 1
            ctx.graph.nodes.append(buf)
            env[node] = ctx.buffer_value(node.name, buf.shape, buf.dtype)
            if node in ctx.host_nodes:
                # its loads are a kernel argument (the buffer stays for the aten ops)
                scalar = ScalarArg(f"host{len(ctx.graph.host_scalars)}", compute_dtype(val.dtype))
                ctx.graph.host_scalars.append((scalar.name, node.name, val.dtype))
                env[node] = TensorValue((), val.dtype, lambda index, s=scalar: s, env[node].base)
            else:
                ctx.graph.device = str(val.device)
        elif node.op == "get_attr":
            env[node] = _constant(ctx, gm, node)
        elif node.op == "call_function" and _is_size_node(node):
            env[node] = _size_node(node, env)
        elif node in ctx.host_nodes and all(
            isinstance(env[n].load(()), Const) for n in node.all_input_nodes
        ):
            env[node] = _folded(ctx, node, env)
        elif node in ctx.host_nodes:
            env[node] = _lower_host(ctx, node, env, table)
        elif node.op == "call_function":
            env[node] = _lower_call(ctx, node, env, table)
        elif node.op == "output":
            outs = node.args[0]
            for out in outs if isinstance(outs, (list, tuple)) else [outs]:
                value = env.get(out, out) if isinstance(out, torch.fx.Node) else out
                ctx.graph.outputs.append(
                    ctx.realize(value) if isinstance(value, TensorValue) else value
                )
        if node.op == "placeholder" or "val" not in node.meta or node in ctx.host_nodes:
            continue
        val = node.meta["val"]
        if isinstance(val, torch.Tensor) and str(val.device) != "meta":
            ctx.graph.device = str(val.device)
    ctx.graph.arity = position


# The dtypes of the 0-dim CPU inputs kernels take by value (as the bits of a float, an int,
# 0 or 1 for a bool: codegen's `_host_value`).
_HOST_SCALAR_DTYPES = (
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.bool,
)


# Copies that give a 0-dim CPU value the same value (`torch.tensor(8.0)` in a function is a
# tensor constant and its lift_fresh_copy).
_SCALAR_COPIES = {"aten.lift_fresh_copy", "aten.clone", "aten._to_copy"}


def host_scalar_nodes(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The graph's 0-dim CPU values that kernels take by value, whatever the graph's device:
    inputs (`is_host_scalar`: passed as kernel arguments), tensor constants (written into the
    source), values computed from constants alone by a deterministic op
    (`torch.tensor(10000.0).log()`: computed while lowering, on the CPU, as eager computes
    them at each call; see `_folded`), and values computed from inputs by such an op
    (`temperature.clamp(min=0.1)`: computed in the kernels, `_lower_host`). Not one the graph
    returns (it must be a CPU tensor of its own)."""
    found: set[torch.fx.Node] = set()
    constants: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        returned = any(user.op == "output" for user in node.users)
        if node.op == "placeholder":
            ok = is_host_scalar(val)
        elif node.op == "get_attr":
            value: Any = gm
            for part in str(node.target).split("."):
                value = getattr(value, part, None)
            ok = is_host_scalar(value)
            if ok:
                constants.add(node)
        elif node.op != "call_function" or returned or not is_host_scalar(val):
            ok = False
        elif all(n in constants for n in node.all_input_nodes):
            ok = _foldable(node.target)
            if ok:
                constants.add(node)
        else:  # computed in the kernels from inputs (and constants): `_lower_host`
            ok = all(n in found for n in node.all_input_nodes) and _foldable(node.target)
        if ok:
            found.add(node)
    return found


def _lower_host(
    ctx: Lowering, node: torch.fx.Node, env: dict[torch.fx.Node, Any], table: dict[str, Any]
) -> TensorValue:
    """A 0-dim CPU value computed from host scalar inputs: a same-dtype copy is the value
    itself; any other op is lowered as it is for the CPU (the node's device: eager's CPU
    kernel computes it), into the kernels that read it. No extern: an aten op would make a CPU
    tensor the kernels cannot read on a GPU, so an op without a lowering sends the whole graph
    to aten (NotLowered)."""
    name = op_name(node.target)
    source = env[node.args[0]] if node.args and isinstance(node.args[0], torch.fx.Node) else None
    if name in _SCALAR_COPIES and source is not None and source.dtype == node.meta["val"].dtype:
        return TensorValue((), source.dtype, source.loader, source.base)
    rule = table.get(name)
    if rule is None or _unsupported_dtype(node) is not None:
        raise NotLowered(f"{name} of a CPU scalar input has no lowering here")
    ctx.origin = name.removeprefix("aten.")
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    return rule.lower(ctx, node, *args, **kwargs)


def _foldable(target: Any) -> bool:
    """An aten op whose value depends on its arguments alone: no random numbers, no memory
    left as it was (`empty`), nothing written."""
    return (
        isinstance(target, torch._ops.OpOverload)
        and torch.Tag.nondeterministic_seeded not in target.tags
        and not target._schema.is_mutable
        and not target._schema.name.startswith(("aten::empty", "aten::new_empty"))
    )


def _folded(ctx: Lowering, node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> TensorValue:
    """A 0-dim CPU value computed from constants alone: the op run now on the constants'
    values (CPU tensors of their dtypes), its result a constant like `_constant`'s."""

    def real(n: torch.fx.Node) -> torch.Tensor:
        value = env[n]
        return torch.tensor(value.load(()).value, dtype=value.dtype)

    args = torch.fx.node.map_arg(node.args, real)
    kwargs = torch.fx.node.map_arg(node.kwargs, real)
    try:
        value = node.target(*args, **kwargs)
    except Exception as e:  # eager raises it at each call (integer division by zero): so do we
        raise NotLowered(f"{op_name(node.target)} of constants raises {type(e).__name__}") from e
    return _held(ctx, value, scalar=True)


def is_host_scalar(val: Any) -> bool:
    """Whether a graph input is a 0-dim CPU tensor that the kernels take by value (`.item()`
    at each call), as eager's CUDA kernels take a CPU scalar: so that `x / torch.tensor(8.0)`
    on CUDA data (a scale made without a device, a CPU scalar buffer) runs in the fused
    kernels instead of sending the whole graph to aten. CPU graphs take them so too (the same
    path, tested in the interpreter)."""
    return (
        isinstance(val, torch.Tensor)
        and val.dim() == 0
        and val.device.type == "cpu"
        and val.dtype in _HOST_SCALAR_DTYPES
    )


def _constant(ctx: Lowering, gm: torch.fx.GraphModule, node: torch.fx.Node) -> Any:
    """A tensor held by the graph module (`_tensor_constant0`): the module keeps it among its
    CONSTANTS and the kernels read it like an input."""
    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part)
    if not isinstance(value, torch.Tensor):
        return value
    return _held(ctx, value, scalar=node in ctx.host_nodes)


def _held(ctx: Lowering, value: torch.Tensor, scalar: bool) -> TensorValue:
    """A tensor the module holds among its CONSTANTS (an alias extern); `scalar`: a 0-dim CPU
    one, whose value the kernels' source holds (its extern made only if the tensor itself is
    needed: `Lowering.realize`)."""
    name = ctx.new_name()
    if scalar:
        ctx.pending_constants[name] = value
        number = Const(value.item(), compute_dtype(value.dtype))
        return TensorValue((), value.dtype, lambda index: number, ExternArg(name))
    ctx.graph.nodes.append(_constant_extern(name, value))
    return ctx.buffer_value(name, value.shape, value.dtype)


def _constant_extern(name: str, value: torch.Tensor) -> Extern:
    layout = (tuple(value.shape), tuple(value.stride()), value.dtype)
    alias = torch.ops.aten.alias.default
    return Extern(name, alias, (value,), (), (name,), (layout,), True, "constant")


def _is_size_node(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return (
        node.target in _SIZE_FUNCTIONS
        or node.target in _SIZE_CHECKS
        or isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat))
    )


# Run-time checks of facts about sizes: the guards of the compiled frame already hold them.
_SIZE_CHECKS = {
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten.sym_constrain_range.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
}


def _size_node(node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> Any:
    """The value of a size node: `sym_size` of a lowered tensor, or arithmetic on sizes."""
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    target = node.target
    if target is torch.ops.aten.sym_size.int:
        return args[0].shape[args[1]]
    if target is torch.ops.aten.sym_numel.default:
        n = 1
        for d in args[0].shape:
            n = n * d
        return n
    if isinstance(node.meta.get("val"), torch.SymFloat):  # arithmetic on float arguments
        derived = derive_float(target, list(args))
        if derived is None:
            raise SymbolicUnsupported(f"float node {node.format_node()}")
        return derived
    if target in _SIZE_FUNCTIONS:
        return size_value(target(*args))
    if target is operator.floordiv and is_static(args[1]):
        if is_static(args[0]):
            return args[0] // args[1]
        import sympy

        quotient = sympy.cancel(args[0] / args[1])
        if quotient.is_integer:  # exact: `numel // 1`, `(2*s0) // 2`
            return size_value(quotient)
    if target in _SIZE_CHECKS:
        return None
    val = node.meta.get("val")
    if isinstance(val, torch.SymInt):  # `s0 // 2`, `min(s0, s1)`: a derived size
        return size_value(val)
    raise SymbolicUnsupported(f"size node {node.format_node()}")


def _lower_call(
    ctx: Lowering, node: torch.fx.Node, env: dict[torch.fx.Node, Any], table: dict[str, Any]
) -> Any:
    if node.target is operator.getitem:
        return env[node.args[0]][node.args[1]]
    name = op_name(node.target)
    ctx.origin = name.removeprefix("aten.")
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    rule = table.get(name)
    reason = f"{name} has no lowering"
    if rule is None and name in _extern_ops():
        reason = f"{name} runs as torch's kernel (extern by design)"
    if rule is not None:
        unsupported = _unsupported_dtype(node)
        if unsupported is None:
            count = len(ctx.graph.nodes)
            try:
                value = rule.lower(ctx, node, *args, **kwargs)
            except NotLowered as e:
                del ctx.graph.nodes[count:]
                reason = f"{name}: {e}"
            else:
                _adopt_layout(ctx, node, value, count)
                return value
        else:
            reason = f"{name}: dtype {unsupported} is not lowered"
    ctx.hint(f"{reason}; {node.name} runs as an aten call (extern)")
    return extern(ctx, node, args, kwargs)


def _extern_ops() -> frozenset[str]:
    from framejit.backend.triton.ops import EXTERN_OPS

    return EXTERN_OPS


def _unsupported_dtype(node: torch.fx.Node) -> torch.dtype | None:
    vals = [node.meta.get("val")]
    vals += [a.meta.get("val") for a in node.all_input_nodes]
    for val in vals:
        for v in val if isinstance(val, (list, tuple)) else [val]:
            if isinstance(v, torch.Tensor) and v.dtype not in SUPPORTED_DTYPES:
                return v.dtype
    return None


def _adopt_layout(ctx: Lowering, node: torch.fx.Node, value: Any, count: int) -> None:
    """Give the buffers made for `node` the strides eager would give its results."""
    val = meta_value(node.meta.get("val"))
    if isinstance(value, tuple) and isinstance(val, (list, tuple)) and len(val) == len(value):
        for v, m in zip(value, val):
            _adopt(ctx, v, m, count)
    else:
        _adopt(ctx, value, val, count)


def _adopt(ctx: Lowering, value: Any, val: Any, count: int) -> None:
    if not (isinstance(value, TensorValue) and isinstance(val, Meta)) or value.base.views:
        return
    for k in range(count, len(ctx.graph.nodes)):
        buf = ctx.graph.nodes[k]
        if (
            buf.name == value.base.buffer
            and isinstance(buf, (Pointwise, Reduction))
            and buf.shape == tuple(val.shape)
            and _dense(val)
        ):
            ctx.graph.nodes[k] = replace(buf, stride=tuple(val.stride()))


def _dense(val: Meta) -> bool:
    """Whether `val`'s strides are contiguous strides of some order of its dims (dims of size 1
    aside): from stride 1 up, each is the product of the sizes below it. Symbolic sizes and
    strides compare as expressions, so `x.t()` of an `(s0, s1)` tensor is dense as it is
    statically."""
    dims = [(n, s) for n, s in zip(val.shape, val.strides) if n != 1]
    step: Size = 1
    while dims:
        found = next((d for d in dims if same_size(d[1], step)), None)
        if found is None:
            return False
        dims.remove(found)
        step = step * found[0]
    return True


def extern(ctx: Lowering, node: torch.fx.Node, args: Any, kwargs: dict[str, Any]) -> Any:
    """Run `node`'s aten op itself on realized tensors."""

    def arg(value: Any) -> Any:
        if isinstance(value, TensorValue):
            return ctx.realize(value)
        if isinstance(value, (list, tuple)):
            return type(value)(arg(v) for v in value)
        return value

    val = meta_value(node.meta.get("val"))
    single = not isinstance(val, (list, tuple))
    vals = [val] if single else list(val)
    names: list[str | None] = []
    layouts: list[Any] = []
    values: list[Any] = []
    for v in vals:
        if isinstance(v, Meta):
            name = ctx.new_name()
            names.append(name)
            layouts.append((v.shape, v.strides, v.dtype))
            values.append(ctx.buffer_value(name, v.shape, v.dtype))
        else:
            names.append(None)
            layouts.append(None)
            values.append(v)
    ctx.graph.nodes.append(
        Extern(
            names[0] or ctx.new_name(),
            node.target,
            tuple(arg(a) for a in args),
            tuple((k, arg(v)) for k, v in kwargs.items()),
            tuple(names),
            tuple(layouts),
            single,
            op_name(node.target).removeprefix("aten."),
        )
    )
    return values[0] if single else tuple(values)

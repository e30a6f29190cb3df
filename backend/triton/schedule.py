"""Scheduling: decide which loop-IR nodes share a kernel and which buffers exist in memory.

`schedule(lowering) -> Schedule` runs two passes over the lowered graph:

1. Inlining. A pointwise node that need not exist in memory (not an output, not an extern's
   argument) is substituted into every consumer's body, so chains of pointwise ops, and
   pointwise prologues of reductions, become one expression. A node with several consumers and
   a large body is kept (materialized) instead of recomputed; that is a `perf_hints` line.
2. Grouping. The remaining nodes, in order, are packed greedily into kernels:
   - a *pointwise* kernel holds pointwise nodes of one shape;
   - a *reduction* kernel holds reductions with the same kept shape and reduction ranges, the
     pointwise nodes before them over the full shape (prologues that had to be materialized)
     and after them over the full shape or the kept shape (epilogues: softmax's division,
     var's scaling).
   A member reads another member only where that member is computed (the same element), so
   its value comes from registers; a node that reads one elsewhere, or has another shape,
   starts a new kernel, and the reason is a `perf_hints` line. An extern ends the kernel.

Invariants:

- Members keep topological order; a buffer is stored only if something outside its kernel
  reads it (another kernel, an extern, the graph's outputs). A reduction whose only readers are
  in its own kernel (softmax's max and sum) never touches memory.
- Nothing here changes results: declining a fusion only costs memory traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from framejit.backend.triton.ir import (
    BoundsCheck,
    Expr,
    Extern,
    ExternArg,
    IndexValue,
    InputBuffer,
    Ix,
    Load,
    LoopGraph,
    Op,
    Pointwise,
    Reduction,
    Sym,
    expr_loads,
    expr_size,
    loop_vars,
    subs_index,
    substitute,
)
from framejit.backend.triton.lower import Lowering

# A pointwise node read by several consumers is recomputed in each while its body is this small
# and reads at most this many buffers: each recomputation reads them all again, so a chain of
# residual adds (`x = x + f(x)` per layer, every `x` read by a layer norm and the next add) would
# otherwise make the n-th layer norm read n buffers.
INLINE_LIMIT = 64
INLINE_READS_LIMIT = 3
# Reductions over at most this many elements keep a whole row in registers (one pass).
PERSISTENT_LIMIT = 4096

Member = Pointwise | Reduction


@dataclass
class Kernel:
    """One Triton kernel: `members` in order, each with its role (`x`: over the kept shape,
    `full`: over kept + reduction shape, `reduce`: a reduction)."""

    index: int
    kind: str  # "pointwise" | "reduction"
    xshape: tuple[int, ...]
    rshape: tuple[int, ...] = ()
    members: list[Member] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)
    stores: list[str] = field(default_factory=list)
    inlined: list[Pointwise] = field(default_factory=list)
    # The reduced data is contiguous along the kept dims, not along the reduction (a sum over
    # dim 0): tiles of many rows x a few reduction steps, looped, read memory coalesced.
    x_major: bool = False

    @property
    def name(self) -> str:
        origins: list[str] = []
        ordered = sorted([*self.members, *self.inlined], key=lambda n: int(n.name[3:]))
        for node in ordered:
            origin = _nice(node.origin)
            if origin not in origins:
                origins.append(origin)
        kind = "pointwise" if self.kind == "pointwise" else "reduce"
        return f"fj_{kind}_{'_'.join(origins[:4])}_{self.index}"

    @property
    def persistent(self) -> bool:
        rnumel = _numel(self.rshape)
        return isinstance(rnumel, int) and rnumel <= PERSISTENT_LIMIT and not self.x_major

    def group_syms(self) -> tuple[list[Sym], list[Sym]]:
        return _syms(loop_vars(self.xshape)), _syms(loop_vars(self.rshape, "r"))

    def mapping(self, node: Member) -> dict[Sym, Ix]:
        """The member's own loop variables in terms of the kernel's."""
        xs, rs = self.group_syms()
        role = self.roles[node.name]
        if isinstance(node, Reduction):
            own = _syms(loop_vars(node.shape)) + _syms(loop_vars(node.ranges, "r"))
        else:
            own = _syms(loop_vars(node.shape))
        target = xs if role == "x" else xs + rs
        return {s: Ix.of(t) for s, t in zip(own, target)}

    def __str__(self) -> str:
        shape = f"x={list(self.xshape)}" + (f", r={list(self.rshape)}" if self.rshape else "")
        mode = "" if self.kind == "pointwise" else (" persistent" if self.persistent else " looped")
        mode += ", x-major" if self.x_major else ""
        lines = [f"kernel {self.name} ({self.kind}{mode}, {shape})"]
        for node in self.inlined:
            lines.append(f"  inlined {node.name} ({node.origin})")
        for node in self.members:
            stored = " stored" if node.name in self.stores else ""
            lines.append(f"  {self.roles[node.name]:6} {node}{stored}")
        return "\n".join(lines)


@dataclass
class Schedule:
    graph: LoopGraph
    steps: list[Kernel | Extern]
    bodies: dict[str, Expr]
    hints: list[str]
    # Names of the size symbols of a graph with symbolic sizes (empty for a static graph).
    symbols: set[str] = field(default_factory=set)

    def __str__(self) -> str:
        return "\n".join(str(s) if isinstance(s, Kernel) else f"extern {s}" for s in self.steps)


def _syms(index: tuple[Ix, ...]) -> list[Sym]:
    return [i.terms[0][0] for i in index if not i.is_const]  # type: ignore[misc]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _nonunit(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(n for n in shape if n != 1)


def _nice(origin: str) -> str:
    name = origin.lstrip("_").removeprefix("native_")
    return name.split(".")[0]


def schedule(lowering: Lowering) -> Schedule:
    graph = lowering.graph
    hints = list(lowering.hints)
    live = _live(graph, lowering.must_realize)
    bodies, inlined_into = _inline(graph, lowering.must_realize, live, hints)
    nodes = {n.name: n for n in graph.nodes}
    steps: list[Kernel | Extern] = []
    current: Kernel | None = None
    for node in graph.nodes:
        if (
            isinstance(node, InputBuffer)
            or node.name not in bodies
            and not isinstance(node, Extern)
            or isinstance(node, Extern)
            and node.origin == "constant"
            and node.outputs[0] not in live
        ):
            continue
        if isinstance(node, Extern):
            current = None
            steps.append(node)
            continue
        reason = _try_add(current, node, bodies) if current is not None else "no open kernel"
        if reason is None:
            assert current is not None
            current.members.append(node)
        else:
            if current is not None and _reads_any(bodies[node.name], current):
                hints.append(f"{node.name} ({node.origin}) not fused into {current.name}: {reason}")
            current = _start(len([s for s in steps if isinstance(s, Kernel)]), node)
            steps.append(current)
        for name in inlined_into.get(node.name, ()):
            if nodes[name] not in current.inlined:
                current.inlined.append(nodes[name])  # type: ignore[arg-type]
        current.inlined.sort(key=lambda n: int(n.name[3:]))
    _mark_stores(graph, steps, bodies, lowering.must_realize)
    for step in steps:
        if isinstance(step, Kernel) and step.kind == "reduction":
            step.x_major = _x_major(step, bodies, {n.name: n for n in graph.nodes})
    return Schedule(graph, steps, bodies, hints)


def _x_major(kernel: Kernel, bodies: dict[str, Expr], nodes: dict[str, object]) -> bool:
    """Whether the loads of the kernel's reductions step by 1 along a kept dim and along no
    reduction dim (then rows are the fast axis in memory)."""
    xs, rs = kernel.group_syms()
    along_x = along_r = False
    for member in kernel.members:
        if not isinstance(member, Reduction):
            continue
        mapping = kernel.mapping(member)
        for load in expr_loads(bodies[member.name]):
            node = nodes.get(load.buffer)
            stride = getattr(node, "stride", None)
            if stride is None or len(stride) != len(load.index):
                continue
            address = Ix()
            for i, st in zip(load.index, stride):
                address = address + i.subs(mapping) * st
            unit = {atom for atom, c in address.terms if c == 1 and isinstance(atom, Sym)}
            along_x |= bool(unit & set(xs))
            along_r |= bool(unit & set(rs))
    return along_x and not along_r


def _live(graph: LoopGraph, must_realize: set[str]) -> set[str]:
    """The buffers the graph's outputs and externs need, and what they read, transitively; a
    node that checks an index read from memory is needed too (a bad index raises, as in
    eager, even where the value is unused)."""
    live = {o.buffer for o in graph.outputs if isinstance(o, ExternArg)} | set(must_realize)
    for node in reversed(graph.nodes):
        if isinstance(node, Extern) and node.origin == "constant":
            continue  # a tensor constant: live only if read (not when its value was inlined)
        if isinstance(node, Extern):
            live.update(n for n in node.outputs if n)
            live.update(extern_buffers(node))
        elif isinstance(node, (Pointwise, Reduction)) and (node.name in live or _checks(node.body)):
            live.add(node.name)
            live.update(load.buffer for load in expr_loads(node.body))
    return live


def _checks(expr: Expr) -> bool:
    """Whether `expr` checks an index read from memory (a `BoundsCheck` anywhere in it)."""
    if isinstance(expr, BoundsCheck):
        return True
    if isinstance(expr, Load):
        return any(_checks(a.expr) for i in expr.index for a in i.indirects())
    if isinstance(expr, IndexValue):
        return any(_checks(a.expr) for a in expr.index.indirects())
    if isinstance(expr, Op):
        return any(_checks(arg) for arg in expr.args)
    return False


def _inline(
    graph: LoopGraph, must_realize: set[str], live: set[str], hints: list[str]
) -> tuple[dict[str, Expr], dict[str, list[str]]]:
    """Bodies of the nodes that stay, with inlinable pointwise producers substituted. A node
    nothing needs (not in `live`: a max pool's indices in inference) gets no body: it is not
    computed, and it does not count as a reader of what it reads."""
    consumers: dict[str, set[str]] = {}
    for node in graph.nodes:
        if isinstance(node, (Pointwise, Reduction)) and node.name in live:
            for load in expr_loads(node.body):
                consumers.setdefault(load.buffer, set()).add(node.name)
    bodies: dict[str, Expr] = {}
    inlined_bodies: dict[str, Expr] = {}
    inlined_into: dict[str, list[str]] = {}
    inlinable: dict[str, Pointwise] = {}
    for node in graph.nodes:
        if not isinstance(node, (Pointwise, Reduction)) or node.name not in live:
            continue
        used: list[str] = []

        def replace(load: Load, used: list[str] = used) -> Expr:
            producer = inlinable.get(load.buffer)
            if producer is None:
                return load
            used.append(producer.name)
            used.extend(inlined_into.get(producer.name, ()))
            own = _syms(loop_vars(producer.shape))
            kept = [i for i, n in zip(load.index, producer.shape) if n != 1]
            body = subs_index(inlined_bodies[producer.name], dict(zip(own, kept)))
            if producer.dtype in (torch.float16, torch.bfloat16) and body.dtype != producer.dtype:
                body = Op("convert", (body,), producer.dtype)  # rounded as eager's result is
            if body.dtype != load.dtype:  # what storing and loading it again would do
                body = Op("convert", (body,), load.dtype)
            return body

        body = substitute(node.body, replace)
        bodies[node.name] = body
        inlined_into[node.name] = list(dict.fromkeys(used))
        users = consumers.get(node.name, set())
        if not isinstance(node, Pointwise) or node.name in must_realize:
            continue
        reads = len({load.buffer for load in expr_loads(body)})
        if len(users) <= 1 or (expr_size(body) <= INLINE_LIMIT and reads <= INLINE_READS_LIMIT):
            inlinable[node.name] = node
            inlined_bodies[node.name] = bodies.pop(node.name)
        else:
            hints.append(
                f"{node.name} ({node.origin}) is materialized: {len(users)} readers and a "
                f"{expr_size(body)}-op body reading {reads} buffers (recomputing is allowed up "
                f"to {INLINE_LIMIT} ops and {INLINE_READS_LIMIT} buffers)"
            )
    return bodies, inlined_into


def _start(index: int, node: Member) -> Kernel:
    if isinstance(node, Reduction):
        kernel = Kernel(index, "reduction", node.shape, node.ranges)
        kernel.roles[node.name] = "reduce"
    else:
        kernel = Kernel(index, "pointwise", node.shape)
        kernel.roles[node.name] = "x"
    kernel.members.append(node)
    return kernel


def _role(kernel: Kernel, node: Member) -> str | None:
    x, r = _nonunit(kernel.xshape), _nonunit(kernel.rshape)
    if isinstance(node, Reduction):
        if _nonunit(node.shape) == x and _nonunit(node.ranges) == r:
            return "reduce"
        return None
    shape = _nonunit(node.shape)
    if shape == x:
        return "x"
    if kernel.kind == "reduction" and shape == x + r:
        return "full"
    return None


def _try_add(kernel: Kernel, node: Member, bodies: dict[str, Expr]) -> str | None:
    """Add `node` to `kernel` if it fits; otherwise the reason it does not."""
    if kernel.kind == "pointwise" and isinstance(node, Reduction):
        full = _nonunit(node.shape) + _nonunit(node.ranges)
        if any(_nonunit(m.shape) != full for m in kernel.members):
            return f"reduction over {list(node.ranges)} of {list(node.shape)} has another shape"
        trial = Kernel(kernel.index, "reduction", node.shape, node.ranges)
        trial.members = list(kernel.members)
        trial.roles = {m.name: "full" for m in kernel.members}
    else:
        trial = Kernel(kernel.index, kernel.kind, kernel.xshape, kernel.rshape)
        trial.members = list(kernel.members)
        trial.roles = dict(kernel.roles)
    role = _role(trial, node)
    if role is None:
        return f"shape {list(node.shape)} does not match the kernel's {_describe(trial)}"
    trial.roles[node.name] = role
    trial.members.append(node)
    reason = _reads_elsewhere(trial, node, bodies)
    if reason:
        return reason
    kernel.kind, kernel.xshape, kernel.rshape = trial.kind, trial.xshape, trial.rshape
    kernel.roles[node.name] = role
    for m in kernel.members:
        kernel.roles[m.name] = trial.roles[m.name]
    return None


def _describe(kernel: Kernel) -> str:
    if kernel.kind == "pointwise":
        return str(list(kernel.xshape))
    return f"{list(kernel.xshape)} x {list(kernel.rshape)}"


def _reads_elsewhere(kernel: Kernel, node: Member, bodies: dict[str, Expr]) -> str | None:
    members = {m.name: m for m in kernel.members}
    mapping = kernel.mapping(node)
    for load in expr_loads(bodies[node.name]):
        producer = members.get(load.buffer)
        if producer is None or producer is node:
            continue
        seen = tuple(i.subs(mapping) for i in load.index)
        own = loop_vars(producer.shape)
        where = tuple(i.subs(kernel.mapping(producer)) for i in own)
        if seen != where:
            shown = ", ".join(map(str, seen))
            return f"it reads {producer.name} at [{shown}], not where the kernel computes it"
        if kernel.roles[producer.name] == "full" and kernel.roles[node.name] == "x":
            return f"it reads full-shape {producer.name} from a kept-shape node"
    return None


def _reads_any(body: Expr, kernel: Kernel) -> bool:
    names = {m.name for m in kernel.members}
    return any(load.buffer in names for load in expr_loads(body))


def _mark_stores(
    graph: LoopGraph, steps: list[Kernel | Extern], bodies: dict[str, Expr], must: set[str]
) -> None:
    owner: dict[str, Kernel] = {}
    for step in steps:
        if isinstance(step, Kernel):
            for m in step.members:
                owner[m.name] = step
    read_outside: set[str] = set(must)
    for step in steps:
        if isinstance(step, Kernel):
            for m in step.members:
                for load in expr_loads(bodies[m.name]):
                    if owner.get(load.buffer) is not step:
                        read_outside.add(load.buffer)
        else:
            read_outside |= set(extern_buffers(step))
    for out in graph.outputs:
        if isinstance(out, ExternArg):
            read_outside.add(out.buffer)
    for step in steps:
        if isinstance(step, Kernel):
            step.stores = [m.name for m in step.members if m.name in read_outside]


def extern_buffers(node: Extern) -> list[str]:
    found: list[str] = []

    def visit(value: object) -> None:
        if isinstance(value, ExternArg):
            found.append(value.buffer)
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)

    visit(node.args)
    visit([v for _, v in node.kwargs])
    return found

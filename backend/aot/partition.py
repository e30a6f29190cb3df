"""Split a joint forward+backward graph into a forward and a backward graph by a min cut.

The joint graph (`trace.trace_joint`) takes `primals + tangents` and returns
`forward outputs + gradients`. Every value the backward needs that does not depend on a
tangent can either be saved by the forward (memory held from forward to backward) or be
recomputed by the backward from other saved values. `partition` chooses the set of saved
values of least total size such that everything the backward needs can be computed from
saved values and tangents, where only cheap ops may be recomputed:

- Flow network: each candidate node `n` becomes `n.in -> n.out` with capacity = bytes of its
  value (infinite when the value is not one tensor, e.g. the tuple of `native_batch_norm`);
  `n.out -> u.in` (infinite) for each user `u`; `source -> n.in` (infinite) for primals and
  for nodes that must not be recomputed (matmuls, convolutions, reductions, random ops, and any
  op not known to be cheap: see `_recomputable`); `n.in -> sink` (infinite) for nodes that
  depend on a tangent. A minimum source-sink cut crosses only `n.in -> n.out` edges; those
  `n` are saved.
- Cheap = pointwise (`torch.Tag.pointwise`), views, tensor factories and layer norm (its
  input is what its backward reads anyway). Random ops are never recomputed, so forward and
  backward see the same random values.
- Activation checkpointing: nodes the frontend traced inside `torch.utils.checkpoint.checkpoint`
  carry `meta["custom"]["framejit_checkpoint"]` (make_fx copies `custom` onto the aten nodes).
  Such a node may be recomputed whatever it is (a matmul too; random ops aside) and is never
  saved (`n.in -> n.out` infinite), except a value that leaves its region (used outside it:
  the next region's input), which is kept. So the cut saves what flows into each region and
  the backward recomputes one region at a time, as eager's checkpointing does.

Invariants: the forward graph's outputs are `forward outputs + saved values`; the backward
graph's inputs are `saved values + tangents` and its outputs the gradients, in the joint
graph's order. Every node the backward copies is a tangent-dependent node or recomputable
from saved values (checked: a violation raises instead of producing a wrong graph). In the
backward, a value recomputed from saved values alone is computed just before its first use
(`_recompute_late`), not at the start.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx
from framejit.backend.aot.core_ops import RANDOM_OPS, op_name

_CHEAP_FACTORIES = frozenset(
    f"aten.{name}"
    for name in [
        "full",
        "full_like",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "scalar_tensor",
        "empty",
        "empty_like",
        "empty_strided",
        "arange",
        "iota",
    ]
)


# Set by the frontend on the nodes of a checkpointed call (frontend/inlining.py, _checkpoint).
_CHECKPOINT = "framejit_checkpoint"


def _in_checkpoint(node: torch.fx.Node) -> bool:
    custom = node.meta.get("custom")
    return isinstance(custom, dict) and _CHECKPOINT in custom


def _region(node: torch.fx.Node) -> int | None:
    """The checkpoint region a node was traced in (None: none, or a random op, never
    recomputed)."""
    if node.op != "call_function" or op_name(node.target) in RANDOM_OPS:
        return None
    custom = node.meta.get("custom")
    return custom.get(_CHECKPOINT) if isinstance(custom, dict) else None


def has_checkpoint_regions(gm: torch.fx.GraphModule) -> bool:
    return any(_in_checkpoint(n) for n in gm.graph.nodes)


# Normalizations recomputed like pointwise ops: one pass over their input, which the backward
# usually keeps anyway (the layer-norm backward reads it), so recomputing the output costs no
# saved memory where saving it would cost a tensor the size of the input. Batch norm in training
# is not among them: its functional form also updates the running statistics.
_CHEAP_NORMS = frozenset({"aten.native_layer_norm"})


@dataclasses.dataclass
class Partition:
    forward: torch.fx.GraphModule  # primals -> forward outputs + saved
    backward: torch.fx.GraphModule  # saved + tangents -> gradients
    saved: list[str]  # names of the saved nodes in the joint graph
    saved_bytes: int


def _nbytes(value: Any) -> int | None:
    if isinstance(value, torch.Tensor):  # symbolic sizes count at their traced values
        return _hint(value.numel()) * value.element_size()
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return 8  # a size (dynamic shapes): saving it is cheap
    return None


def _recomputable(node: torch.fx.Node) -> bool:
    if node.op == "get_attr":  # a constant of the graph: free to read again
        return True
    if node.op != "call_function":
        return False
    name = op_name(node.target)
    if name == "operator.getitem" or _is_size_op(node):
        return True
    if name in RANDOM_OPS:
        return False
    if name in _CHEAP_FACTORIES or name in _CHEAP_NORMS:
        return True
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.pointwise in target.tags or target.is_view
    return False


def _hint(n: Any) -> int:
    """A size's value in the trace (its hint, for symbolic sizes)."""
    if isinstance(n, torch.SymInt):
        hint = n.node.hint
        return int(hint) if hint is not None else 1 << 20
    return int(n)


def _is_size_op(node: torch.fx.Node) -> bool:
    """Arithmetic on symbolic sizes, or reading one (`sym_size`, `sym_numel`, ...)."""
    value = node.meta.get("val")
    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _ancestors(outputs: Iterable[Any], stop: set[torch.fx.Node]) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    todo = [n for n in outputs if isinstance(n, torch.fx.Node)]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            todo.extend(node.all_input_nodes)
    return seen


class _FlowGraph:
    """Max flow by shortest augmenting paths (Edmonds-Karp) on a small graph."""

    def __init__(self) -> None:
        self.capacity: dict[str, dict[str, int]] = {}

    def add_edge(self, a: str, b: str, capacity: int) -> None:
        self.capacity.setdefault(a, {})
        self.capacity.setdefault(b, {})
        self.capacity[a][b] = self.capacity[a].get(b, 0) + capacity
        self.capacity[b].setdefault(a, 0)

    def source_side(self, source: str, sink: str) -> set[str]:
        """Saturate every source-sink path; the nodes still reachable from the source."""
        residual = self.capacity
        while True:
            parent: dict[str, str] = {source: source}
            queue = deque([source])
            while queue and sink not in parent:
                a = queue.popleft()
                for b, cap in residual[a].items():
                    if cap > 0 and b not in parent:
                        parent[b] = a
                        queue.append(b)
            if sink not in parent:
                return set(parent)
            path = []
            b = sink
            while b != source:
                path.append((parent[b], b))
                b = parent[b]
            flow = min(residual[a][b] for a, b in path)
            for a, b in path:
                residual[a][b] -= flow
                residual[b][a] += flow


def partition(joint: torch.fx.GraphModule, num_primals: int, num_forward_outputs: int) -> Partition:
    nodes = list(joint.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:num_primals], placeholders[num_primals:]
    outputs = list(next(n for n in nodes if n.op == "output").args[0])
    forward_outputs, gradients = outputs[:num_forward_outputs], outputs[num_forward_outputs:]

    tangent_dependent: set[torch.fx.Node] = set(tangents)
    for node in nodes:
        if node.op != "output" and any(i in tangent_dependent for i in node.all_input_nodes):
            tangent_dependent.add(node)
    needed_by_backward = _ancestors(gradients, set())
    candidates = [n for n in nodes if n in needed_by_backward and n not in tangent_dependent]

    # Checkpoint regions: the tagged forward nodes, and backward nodes that need no tangent and
    # read a region's values (they belong to its recomputation, never saved either).
    forward_nodes = _ancestors(forward_outputs, set())
    regions: dict[torch.fx.Node, int] = {}
    for node in nodes:
        if node in forward_nodes:
            region = _region(node)
        elif node not in tangent_dependent:
            region = next((regions[i] for i in node.all_input_nodes if i in regions), None)
        else:
            region = None
        if region is not None:
            regions[node] = region
    # forward outputs that are tensors of their own (not views of another value)
    returned = {n for n in forward_outputs if isinstance(n, torch.fx.Node) and not _is_view_node(n)}
    total = sum(_nbytes(n.meta.get("val")) or 0 for n in nodes)
    infinite = 2 * total + 1
    flow = _FlowGraph()
    for node in candidates:
        size = _nbytes(node.meta.get("val"))
        region = regions.get(node)
        inside = region is not None and all(
            regions.get(u) == region for u in node.users if u in forward_nodes
        )
        if inside:  # recomputed by the backward, never saved
            size = None
        elif size is not None and node in returned:
            size = 1  # the caller holds it anyway: saving it costs nothing (sigmoid's output)
        flow.add_edge(f"{node.name}.in", f"{node.name}.out", infinite if size is None else size)
        if node.op == "placeholder" or region is not None and not inside:
            # what leaves a region (the next region's input) is kept, as eager's checkpoint
            # keeps its inputs: the backward then recomputes one region at a time
            flow.add_edge("source", f"{node.name}.in", infinite)
        elif not (inside or _recomputable(node)):
            flow.add_edge("source", f"{node.name}.in", infinite)
        for user in node.users:
            if user in needed_by_backward:
                target = "sink" if user in tangent_dependent else f"{user.name}.in"
                flow.add_edge(f"{node.name}.out", target, infinite)
        if node in gradients:  # a gradient that needs no tangent (rare): still a backward value
            flow.add_edge(f"{node.name}.out", "sink", infinite)
    flow.add_edge("source", "sink", 0)
    reached = flow.source_side("source", "sink")
    saved = [n for n in candidates if f"{n.name}.in" in reached and f"{n.name}.out" not in reached]

    forward = _subgraph(joint, primals, [*forward_outputs, *saved], "forward")
    backward = _subgraph(joint, [*saved, *tangents], gradients, "backward")
    _recompute_late(backward, len(saved))
    saved_bytes = sum(_nbytes(n.meta.get("val")) or 0 for n in saved if n.op != "placeholder")
    return Partition(forward, backward, [n.name for n in saved], saved_bytes)


def _is_view_node(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target.is_view


def _recompute_late(backward: torch.fx.GraphModule, num_saved: int) -> None:
    """Compute each value the backward recomputes from saved values alone just before its
    first use, so recomputed activations (of a checkpointed region above all) live only while
    their part of the backward runs, not from the backward's start. The nodes that need a
    tangent keep their order; each pulls in what it needs, depth first."""
    graph = backward.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    demanded = set(placeholders[num_saved:])  # tangents, and what depends on them
    for node in graph.nodes:
        if any(i in demanded for i in node.all_input_nodes) or node.op == "output":
            demanded.add(node)
    done: set[torch.fx.Node] = set(placeholders)
    order: list[torch.fx.Node] = []
    for node in graph.nodes:
        if node not in demanded or node in done:
            continue
        stack = [(node, iter(node.all_input_nodes))]
        while stack:
            current, inputs = stack[-1]
            pending = next((i for i in inputs if i not in done), None)
            if pending is not None:
                stack.append((pending, iter(pending.all_input_nodes)))
                continue
            stack.pop()
            if current not in done:
                done.add(current)
                order.append(current)
    output = order[-1]
    for node in order[:-1]:
        output.prepend(node)  # in order, each right before the output: the new schedule
    graph.lint()
    backward.recompile()


def _subgraph(
    joint: torch.fx.GraphModule, inputs: list[torch.fx.Node], outputs: list[Any], name: str
) -> torch.fx.GraphModule:
    """The nodes of `joint` that compute `outputs` from `inputs`, as a new GraphModule."""
    needed = _ancestors(outputs, set(inputs))
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in joint.graph.nodes:
        if node not in needed or node in env or node.op == "output":
            continue
        if node.op == "placeholder":
            raise AssertionError(
                f"partition: {name} graph needs {node.name}, which it does not get"
            )
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output([env[o] if isinstance(o, torch.fx.Node) else o for o in outputs])
    return torch.fx.GraphModule(joint, graph, class_name=name)

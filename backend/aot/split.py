"""Training graphs cut at outputs that other outputs are computed from.

The AOT stage turns a training graph into one autograd node: every output hangs off it. When
the graph returns `y` and also `z = f(y)`, eager's `z` has `y` in its history; the node's does
not. A hook or `retain_grad()` put on `y` after the call then misses `z`'s gradient (a GradCAM
model returning `(features, logits)`), and `torch.autograd.grad(z, y)` raises. So before the
stage traces a training graph, `split_at_chained_output` cuts it in two, in the graph's own
order, before the first user of such a `y`: the first part computes `y` (and whatever else the
rest reads), the second takes them as inputs. Each part is compiled on its own (the second may
be cut again), and `z`'s node then has `y` among its inputs, as in eager. A hook on an output
fires when its node's backward receives that output's gradient, so it does not matter which
other outputs the first part also computes: the cut goes as late as it may (`_cut_index`).

What must hold:

- Only graphs that will be differentiated are cut (grad mode on, an input requiring grad),
  and only where `y` and `z` both require grad. Inference graphs keep their fusion.
- The parts run in the graph's order, so random numbers are drawn in eager's order.
- No cut where it could change what runs: a graph that writes in place (its writes are the
  stage's to order), switches grad mode, has checkpoint regions or calls a module, or whose
  cut would hand the second part something other than tensors and sizes.
- The cut costs the fusion across it; what crosses it is what the second part reads, and `y`
  is an output anyway.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from framejit.backend.aot.partition import has_checkpoint_regions


@dataclass(frozen=True)
class Split:
    first: torch.fx.GraphModule
    first_inputs: list[int]  # positions of the first part's inputs among the graph's
    second: torch.fx.GraphModule
    second_inputs: list[int]  # likewise, for the graph's own inputs the second part reads
    # each output of the graph: ("input", k), ("first", k) or ("second", k): the graph's input
    # k, or output k of a part; ("value", v): a constant
    outputs: list[tuple[str, Any]]
    crossing: int  # the first part's last `crossing` outputs are the second part's last inputs
    after: str  # the outputs the second part reads

    def example_inputs(self, example_inputs: list[Any]) -> tuple[list[Any], list[Any]]:
        """Example inputs of the two parts: the graph's own, and for the values crossing the
        cut, real tensors laid out as the frontend's values say (only their metadata is read;
        they live as long as the compile)."""
        first = [example_inputs[i] for i in self.first_inputs]
        second = [example_inputs[i] for i in self.second_inputs]
        placeholders = [n for n in self.second.graph.nodes if n.op == "placeholder"]
        for node in placeholders[len(placeholders) - self.crossing :]:
            val = node.meta["val"]
            if not isinstance(val, torch.Tensor):  # a size computed before the cut
                second.append(_hint(val))
                continue
            size = [_hint(s) for s in val.shape]
            stride = [_hint(s) for s in val.stride()]
            real = torch.empty_strided(size, stride, dtype=val.dtype, device=val.device)
            second.append(real.requires_grad_(val.requires_grad))
        return first, second

    def runner(self, first: Callable[..., Any], second: Callable[..., Any]) -> Callable[..., Any]:
        """The graph's callable: the first part, then the second, outputs in the graph's order."""
        first_inputs, second_inputs, crossing = self.first_inputs, self.second_inputs, self.crossing
        outputs = self.outputs

        def run_parts(*args: Any) -> tuple[Any, ...]:
            a = first(*[args[i] for i in first_inputs])
            carried = list(a[len(a) - crossing :]) if crossing else []
            b = second(*[args[i] for i in second_inputs], *carried)
            parts = {"input": args, "first": a, "second": b}
            return tuple(k if where == "value" else parts[where][k] for where, k in outputs)

        return run_parts


def split_at_chained_output(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Split | None:
    """`gm` cut where an output that another output is computed from reaches its users as an
    input, or None when it has none or may not be cut (see the module docstring)."""
    if not torch.is_grad_enabled() or not any(
        isinstance(v, torch.Tensor) and v.requires_grad for v in example_inputs
    ):
        return None
    out_node = gm.graph.output_node()
    returned = out_node.args[0]
    if not isinstance(returned, (tuple, list)) or len(returned) < 2:
        return None
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if any(_may_write_or_switch(n) for n in nodes) or has_checkpoint_regions(gm):
        return None
    cut = _cut_index(nodes, returned)
    return None if cut is None else _split(gm, nodes, cut)


def _requires_grad(node: Any) -> bool:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.requires_grad


def _cut_index(nodes: list[torch.fx.Node], returned: Any) -> int | None:
    """Where to cut (the first part is `nodes[:k]`): outputs that require grad and that another
    output requiring grad is computed from ("chained") must reach every one of their users
    as an input of a later part. From the first chained output on, the cut goes as late as
    that allows: before the first user of any chained output defined before it (a layer's
    key and value caches, both read by its attention, make one cut)."""
    outs = {o for o in returned if isinstance(o, torch.fx.Node) and o.op != "placeholder"}
    # the returned nodes each node is computed from
    from_outputs: dict[torch.fx.Node, frozenset[torch.fx.Node]] = {}
    for n in nodes:
        found: set[torch.fx.Node] = set()
        for a in n.all_input_nodes:
            found |= from_outputs.get(a, frozenset())
            if a in outs:
                found.add(a)
        from_outputs[n] = frozenset(found)
    chained = {
        y
        for z in outs
        if _requires_grad(z)
        for y in from_outputs.get(z, frozenset())
        if _requires_grad(y)
    }
    index = {n: i for i, n in enumerate(nodes)}
    cut = None
    for y in (n for n in nodes if n in chained):
        if cut is not None and index[y] >= cut:
            break
        first_user = min(index[u] for u in y.users if u in index)
        cut = first_user if cut is None else min(cut, first_user)
    return cut


_IN_PLACE_OPERATORS = {
    getattr(operator, name) for name in dir(operator) if name.startswith("i") and name != "index"
} | {operator.setitem, operator.delitem}


def _may_write_or_switch(node: torch.fx.Node) -> bool:
    """A node the cut could reorder or separate from its pair: an in-place write (a method or
    op named with a trailing underscore, `out=`, `x[i] = v`, `x += y`), a module call, a
    grad-mode, autocast or inference-mode switch."""
    if node.op == "call_module" or "out" in node.kwargs:
        return True
    if node.op == "call_method":
        name = str(node.target)
    elif node.op == "call_function":
        if node.target in _IN_PLACE_OPERATORS:
            return True
        if isinstance(node.target, torch._ops.OpOverload) and node.target._schema.is_mutable:
            return True  # torch.ops.aten.add_.Tensor
        name = getattr(node.target, "__name__", "") or str(node.target)
        module = getattr(node.target, "__module__", "") or ""
        if module.startswith(("torch.autograd.grad_mode", "torch.amp")) or name in (
            "_set_grad_enabled",
            "_enter_autocast",
            "_exit_autocast",
        ):
            return True
    else:
        return False
    return name.endswith("_") and not name.endswith("__")


def _split(gm: torch.fx.GraphModule, nodes: list[torch.fx.Node], k: int) -> Split | None:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    position = {n: i for i, n in enumerate(placeholders)}
    first_nodes, rest = nodes[:k], nodes[k:]
    # an item of a tuple computed before the cut (`split`, `chunk`, an op with two results) is
    # taken before it too: tensors cross the cut, tuples do not
    before = set(first_nodes)
    items = [
        n
        for n in rest
        if n.op == "call_function"
        and n.target is operator.getitem
        and n.args[0] in before
        and not isinstance(n.args[0].meta.get("val"), torch.Tensor)
    ]
    first_nodes += items
    before.update(items)
    rest = [n for n in rest if n not in before]
    second_nodes = set(rest)
    returned = list(gm.graph.output_node().args[0])

    def read_by_second(n: torch.fx.Node) -> bool:
        return any(u in second_nodes for u in n.users)

    crossing = [n for n in first_nodes if n.op != "get_attr" and read_by_second(n)]
    if not all(_has_hints(n.meta.get("val")) for n in crossing):
        return None  # a Python value computed before the cut, or a size without a value
    first_returned = [o for o in dict.fromkeys(returned) if o in before]
    crossed = set(crossing)
    first_outputs = [o for o in first_returned if o not in crossed] + crossing

    first, first_inputs = _part(gm, first_nodes, first_outputs, placeholders, position, [])
    second_returned = [o for o in dict.fromkeys(returned) if o in second_nodes]
    second, second_inputs = _part(gm, rest, second_returned, placeholders, position, crossing)
    outputs: list[tuple[str, Any]] = []
    for o in returned:
        if not isinstance(o, torch.fx.Node):
            outputs.append(("value", o))
        elif o.op == "placeholder":
            outputs.append(("input", position[o]))
        elif o in second_nodes:
            outputs.append(("second", second_returned.index(o)))
        else:
            outputs.append(("first", first_outputs.index(o)))
    after = ", ".join(o.name for o in first_returned if o in crossed)
    return Split(first, first_inputs, second, second_inputs, outputs, len(crossing), after)


def _part(
    gm: torch.fx.GraphModule,
    body: list[torch.fx.Node],
    outputs: list[torch.fx.Node],
    placeholders: list[torch.fx.Node],
    position: dict[torch.fx.Node, int],
    carried: list[torch.fx.Node],
) -> tuple[torch.fx.GraphModule, list[int]]:
    """A graph of `body`'s nodes returning `outputs`, taking the graph's placeholders it reads
    (in their order) and then `carried` (values computed by an earlier part)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    read = {a for n in body for a in n.all_input_nodes if a.op == "placeholder"}
    inputs = [p for p in placeholders if p in read]
    for p in inputs:
        env[p] = graph.placeholder(p.name)
        env[p].meta = dict(p.meta)
    for n in carried:
        env[n] = graph.placeholder(n.name)
        env[n].meta = {"val": n.meta["val"]}
    for n in body:
        for a in n.all_input_nodes:  # a constant of the module: read where it is needed
            if a not in env and a.op == "get_attr":
                env[a] = graph.node_copy(a)
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[o] for o in outputs))
    part = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    return part, [position[p] for p in inputs]


def _has_hints(val: Any) -> bool:
    """A tensor whose sizes and strides have values at this call, or such a size."""
    if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
        sizes = [val]
    elif isinstance(val, torch.Tensor):
        sizes = [*val.shape, *val.stride()]
    else:
        return False
    return all(not isinstance(s, torch.SymInt) or s.node.hint is not None for s in sizes)


def _hint(size: Any) -> int:
    """A size as an int: a symbolic one's value at this call."""
    if isinstance(size, torch.SymInt):
        return int(size.node.hint)
    return int(size)

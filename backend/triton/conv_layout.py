"""Channels-last activations around 2-d convolutions: an aten-graph pass before lowering.

cuDNN's convolutions are much faster on channels-last (NHWC) tensors than on NCHW ones for
float16 and bfloat16 (its tensor-core kernels are NHWC; an NCHW call is transposed inside), and
a convolution whose input is channels-last returns a channels-last result. So in a graph with
2-d convolutions on CUDA, `channels_last(gm)` makes each convolution's input channels-last
(`aten.clone(x, memory_format=torch.channels_last)` where it is not already), and lets that
layout flow through the ops between convolutions: the buffers of the fused kernels after a
convolution (batch norm, ReLU, residual adds) take the strides eager's own stride rules give a
channels-last input, so the next convolution's input is already channels-last and no copy is
made. Weights are left as they are (the convolution lays them out itself).

What a user sees does not change:

- Every graph output keeps the layout the unchanged graph gave it: where the pass changed an
  output's strides, it is copied back (`clone` in its original memory format).
- Values do not depend on layout, except through ops that read memory by strides
  (`as_strided` and kin): their tensor inputs are restored to the original layout first.
- A view the new layout cannot express (`view` of a channels-last tensor across H and W) gets
  its input restored first; any other op that fails on the new layout, or an output whose
  original layout is neither contiguous nor channels-last, leaves the graph unchanged.

When it runs (`config.conv_layout`, FRAMEJIT_CONV_LAYOUT): "auto" (the default) for inference
graphs (`aot_kind` "inference") with at least two 2-d convolutions, all on CUDA in float16 or
bfloat16 (one convolution would pay a copy in and a copy out for one faster call; float32's gain
is not measured); "channels_last" for any graph with a 2-d convolution, on any device (tests use
it on the CPU); "keep" never. Graphs with
symbolic sizes are left alone (recomputing their layouts could add facts about the sizes that
no guard checks).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from framejit import config

aten = torch.ops.aten

# ops that read their input's memory by its strides or storage offset, not by its shape
_STRIDED = {
    aten.as_strided.default,
    aten.as_strided_copy.default,
    aten.as_strided_scatter.default,
    aten._reshape_alias.default,
}
# views whose result the new layout may not be able to express: their input is restored first
_VIEWS = {aten.view.default, aten._unsafe_view.default}


class _Abandon(Exception):
    """The pass cannot keep the graph's meaning with the new layout: leave it unchanged."""


def wanted(gm: torch.fx.GraphModule) -> bool:
    """Whether `config.conv_layout` asks for the pass on this graph (see the module docstring)."""
    mode = config.conv_layout
    if mode == "keep":
        return False
    convs = _convolutions(gm.graph)
    if not convs:
        return False
    if mode == "channels_last":
        return True
    return (
        gm.meta.get("aot_kind") == "inference"
        and len(convs) >= 2
        and all(_val(n.args[0]).device.type == "cuda" for n in convs)
        and all(_val(n.args[0]).dtype in (torch.float16, torch.bfloat16) for n in convs)
    )


def channels_last(gm: torch.fx.GraphModule) -> torch.fx.GraphModule | None:
    """A copy of `gm` with channels-last convolution inputs, or None if the pass does not apply
    (no 2-d convolution, symbolic sizes, or an op it cannot carry the new layout through)."""
    from framejit.backend.triton.symbolic import is_symbolic

    if not _convolutions(gm.graph) or is_symbolic(gm):
        return None
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    result = graph.graph_copy(gm.graph, env)  # every node but the output
    graph.output(result)
    try:
        changed = _rewrite(graph)
    except _Abandon:
        return None
    if not changed:
        return None
    graph.lint()
    new = torch.fx.GraphModule(gm, graph)
    new.meta.update(gm.meta)
    return new


def _convolutions(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    return [
        n
        for n in graph.nodes
        if n.op == "call_function"
        and n.target is aten.convolution.default
        and isinstance(_val(n.args[0]), torch.Tensor)
        and _val(n.args[0]).dim() == 4
    ]


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _fake_mode(graph: torch.fx.Graph) -> Any:
    for n in graph.nodes:
        mode = getattr(_val(n), "fake_mode", None)
        if mode is not None:
            return mode
    raise _Abandon("no fake tensors to recompute layouts with")


def _is_channels_last(t: torch.Tensor) -> bool:
    return t.is_contiguous(memory_format=torch.channels_last)


def _format_of(t: torch.Tensor) -> torch.memory_format | None:
    """The memory format `clone` would give back `t`'s layout, or None if none would."""
    if t.is_contiguous():
        return torch.contiguous_format
    if t.dim() == 4 and _is_channels_last(t):
        return torch.channels_last
    return None


def _same_layout(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_layout(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.stride() == b.stride()
    return True


def _rewrite(graph: torch.fx.Graph) -> bool:
    """Rewrite `graph` in place; True if any convolution input was made channels-last. Each
    node's `meta["val"]` is recomputed for the new layout (the original is kept for the
    restoring copies)."""
    mode = _fake_mode(graph)
    original = {n: _val(n) for n in graph.nodes}
    moved: set[torch.fx.Node] = set()  # nodes whose value's layout differs from the original
    inserted: set[torch.fx.Node] = set()  # the copies this pass made
    copies: dict[tuple[torch.fx.Node, torch.memory_format], torch.fx.Node] = {}
    convs = set(_convolutions(graph))

    def clone(node: torch.fx.Node, before: torch.fx.Node, fmt: torch.memory_format) -> Any:
        """`node` copied to `fmt`, once: a value two convolutions read is copied for both."""
        if (node, fmt) in copies:
            return copies[node, fmt]
        with graph.inserting_before(before):
            copy = graph.call_function(aten.clone.default, (node,), {"memory_format": fmt})
        with mode:
            copy.meta["val"] = aten.clone.default(node.meta["val"], memory_format=fmt)
        inserted.add(copy)
        copies[node, fmt] = copy
        return copy

    def restore(node: torch.fx.Node, before: torch.fx.Node) -> torch.fx.Node:
        """`node`'s value in its original layout, as a new node before `before`."""
        fmt = _format_of(original[node]) if isinstance(original[node], torch.Tensor) else None
        if fmt is None:
            raise _Abandon(f"{node.name}'s original layout is not a memory format")
        return clone(node, before, fmt)

    def restore_inputs(node: torch.fx.Node) -> None:
        for arg in list(node.all_input_nodes):
            if arg in moved:
                node.replace_input_with(arg, restore(arg, node))

    for node in list(graph.nodes):
        if node.op in ("placeholder", "get_attr"):
            continue
        if node.op == "output":
            for arg in list(node.all_input_nodes):
                if arg in moved:
                    node.replace_input_with(arg, restore(arg, node))
            continue
        if node.op != "call_function":
            raise _Abandon(f"{node.op} node {node.name}")
        if node.target in _STRIDED:
            restore_inputs(node)
        if node in convs and not _is_channels_last(_val(node.args[0])):
            x = node.args[0]
            node.replace_input_with(x, clone(x, node, torch.channels_last))
        if not any(a in moved or a in inserted for a in node.all_input_nodes):
            continue
        try:
            value = _recompute(node, mode)
        except Exception:  # noqa: BLE001 - the op refuses the new layout
            if node.target not in _VIEWS:
                raise _Abandon(f"{node.target} on the new layout") from None
            restore_inputs(node)
            value = _recompute(node, mode)
        node.meta["val"] = value
        if not _same_layout(value, original[node]):
            moved.add(node)
    return bool(inserted)


def _recompute(node: torch.fx.Node, mode: Any) -> Any:
    """`node`'s fake value for its inputs' current values."""

    def value(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return a.meta["val"]
        if isinstance(a, (list, tuple)):
            return type(a)(value(x) for x in a)
        return a

    args = value(node.args)
    kwargs = {k: value(v) for k, v in node.kwargs.items()}
    if node.target is operator.getitem:
        return args[0][args[1]]
    with mode:
        return node.target(*args, **kwargs)

"""The AOT stage's entry point: `aot_compile(gm, example_inputs, inner) -> callable`.

Pipeline (each step in its own module, each graph printable with the `aot_graphs` log):

    analyze (analysis.py)      FakeTensor run: mutated inputs, output aliasing, duplicates
      │
      ├─ no differentiable output ─► trace_inference (trace.py) ─► inner(graph) ─► InferenceRunner
      │
      └─ grad mode on, some output needs grad
            ─► trace_joint (trace.py) ─► partition (partition.py, min cut)
            ─► inner(forward) now, inner(backward) on first backward ─► TrainingRunner

`inner` is a backend with the usual contract, applied to each aten graph with FakeTensor
example inputs (`aot_eager` passes one that runs the graph as Python).

Invariants:

- Training is chosen at compile time from grad mode and `requires_grad` of the inputs; both are
  guarded by the frontend (global-state and TENSOR_MATCH guards), so they hold at run time.
- When `analyze` reports a case the functional path does not model, the captured graph runs as
  it is (logged under the `backend` component at INFO with the reason); results are the same.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from framejit.backend.aot.analysis import (
    GraphInfo,
    analyze,
    graph_with_outputs,
    symbolic_inputs,
)
from framejit.backend.aot.partition import has_checkpoint_regions, partition
from framejit.backend.aot.runtime import InferenceRunner, TrainingRunner
from framejit.backend.aot.split import Split, split_at_chained_output
from framejit.backend.aot.trace import EAGER_KERNELS, trace_inference, trace_joint
from framejit.frontend.layouts import long_strides
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.fx import traceback as fx_traceback

from framejit import logs
from framejit.config import config

log = logging.getLogger(__name__)

Inner = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]

# Graphs with these run as captured: recurrent ops decompose on CPU into mkldnn kernels whose
# backward needs a workspace the traced graph cannot rebuild (and that are not core aten), and
# autocast or inference-mode regions (a block that covers the whole graph is handled apart).
# Grad-mode switches alone do not stop the stage: in a graph where nothing requires grad they
# are dropped, otherwise the joint trace runs them (a no_grad region's ops get no gradient).
_AS_CAPTURED = frozenset(
    {
        torch.lstm,
        torch.gru,
        torch.rnn_tanh,
        torch.rnn_relu,
        torch._C._set_grad_enabled,
        torch.amp.autocast_mode._enter_autocast,
        torch.autograd.grad_mode._enter_inference_mode,
    }
)


def _is_functorch_wrapped(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(
        value
    )


def aot_compile(
    gm: torch.fx.GraphModule, example_inputs: list[Any], inner: Inner, cut: bool = True
) -> Callable[..., Any]:
    """Compile captured graph `gm` through the AOT stage; see the module docstring.

    A graph the stage cannot trace (an op whose output shape depends on values once
    decomposed, for example) runs as captured: the stage never makes a graph fail. For an
    `inner` that runs aten graphs with torch's kernels (`_framejit_eager_kernels`: aot_eager),
    the graphs keep torch's ops undecomposed, so they compute what eager computes."""
    token = EAGER_KERNELS.set(bool(getattr(inner, "_framejit_eager_kernels", False)))
    try:
        return _aot_compile(gm, example_inputs, inner, cut)
    finally:
        EAGER_KERNELS.reset(token)


def _aot_compile(
    gm: torch.fx.GraphModule, example_inputs: list[Any], inner: Inner, cut: bool
) -> Callable[..., Any]:
    if any(_is_functorch_wrapped(v) for v in example_inputs):
        # called inside `torch.func.vmap`/`grad`/`jvp` (a batched or grad-tracking tensor): the
        # captured ops run through the transform as eager's do; a functional trace of them
        # cannot (their storage is the transform's) and an autograd.Function would hide them
        log.info("aot: running the captured graph as it is: it is called inside torch.func")
        return gm.forward
    if torch.is_inference_mode_enabled() or any(_is_inference(v) for v in example_inputs):
        return _compile_for_inference_mode(gm, example_inputs, inner)
    inference = _inside_one_inference_block(gm)
    if inference is not None:
        inner_gm, mode = inference
        if mode:  # no tensor records autograd in the block: compile it without a backward
            memo: dict[int, Any] = {}
            example_inputs = [
                memo.setdefault(id(v), v.detach()) if isinstance(v, torch.Tensor) else v
                for v in example_inputs
            ]
        compiled = aot_compile(inner_gm, example_inputs, inner)

        def in_inference_mode(*args: Any) -> Any:
            with torch.inference_mode(mode):
                return compiled(*args)

        return in_inference_mode
    uint8_resize = _uint8_interpolation(gm)
    if uint8_resize is not None:
        log.info(
            "aot: running the captured graph as it is: %s on uint8 rounds in fixed point, its "
            "float decomposition lands one step away on some pixels",
            uint8_resize,
        )
        return gm.forward
    special = [
        n.target for n in gm.graph.nodes if n.op == "call_function" and n.target in _AS_CAPTURED
    ]
    if special and set(special) == {torch._C._set_grad_enabled}:
        if not _any_requires_grad(gm, example_inputs):
            gm, special = _without_grad_switches(gm), []
        elif torch.is_grad_enabled() and _restores_grad_mode(gm):
            # the switches stay: the joint trace runs them, so the ops of a no_grad region are
            # traced without history and get no gradient, as in eager. (A graph called under
            # no_grad, or one that ends in another grad mode than it began, as a graph cut by
            # a break inside a `no_grad` block does, still runs as captured: the switch at its
            # end must run for real.)
            special = []
    if special:
        log.info("aot: running the captured graph as it is: it calls %s", special[0].__name__)
        return gm.forward
    split = split_at_chained_output(gm, example_inputs) if cut else None
    if split is not None:
        return _compile_parts(split, example_inputs, inner)
    try:
        return _compile(gm, example_inputs, inner)
    except Exception as exc:  # noqa: BLE001 - any tracing failure: run the graph as captured
        value_dependent = isinstance(
            exc, (DynamicOutputShapeException, DataDependentOutputException)
        )
        # an op without a derivative (heaviside, floor_divide) in a graph that requires grad:
        # eager raises only if the backward reaches it, so the graph runs as captured
        underivable = "derivative for" in str(exc) and "is not implemented" in str(exc)
        # a saved tensor written in place later (`y.mul_(y); y[0] = 0`): eager's backward
        # would raise, its forward does not; the joint trace runs the backward
        underivable |= "modified by an inplace operation" in str(exc)
        if config.raise_internal_errors and not (value_dependent or underivable):
            raise  # a bug of the stage: the tests want to see it
        log.info(
            "aot: running the captured graph as it is: tracing failed: %s: %s",
            type(exc).__name__,
            exc,
        )
        return gm.forward


def _compile_parts(split: Split, example_inputs: list[Any], inner: Inner) -> Callable[..., Any]:
    """A training graph cut where an output that another output is computed from reaches its
    users (split.py): each part through the stage, run one after the other."""
    first_inputs, second_inputs = split.example_inputs(example_inputs)
    log.info(
        "aot: %s cut in two: other outputs are computed from the outputs %s, which the second "
        "part takes as inputs",
        type(split.first).__name__,
        split.after,
    )
    # the first part has no output that another of its outputs is computed from
    first = aot_compile(split.first, first_inputs, inner, cut=False)
    second = aot_compile(split.second, second_inputs, inner)
    del first_inputs, second_inputs
    return split.runner(first, second)


def _uint8_interpolation(gm: torch.fx.GraphModule) -> str | None:
    """The name of a linear or cubic interpolation of a uint8 tensor in `gm`, if any. torch's
    uint8 kernels for these (`upsample_bilinear2d`, `upsample_bicubic2d`, ...) compute in fixed
    point; the decompositions the stage traces through (applied at the autograd key, before
    any table) compute in float and round differently. Nearest modes are exact either way."""
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        name = getattr(n.target, "__name__", "") or str(n.target)
        if "interpolate" not in name and "upsample" not in name:
            continue
        mode = n.kwargs.get("mode", n.args[3] if len(n.args) > 3 else None)
        if "nearest" in name or "nearest" in str(mode):
            continue
        if name in ("interpolate", "upsample") and mode is None:
            continue  # F.interpolate's default mode is nearest
        first = n.args[0] if n.args else None
        value = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
        if isinstance(value, torch.Tensor) and value.dtype == torch.uint8:
            return name
    return None


def _is_inference(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_inference()


def _compile_for_inference_mode(
    gm: torch.fx.GraphModule, example_inputs: list[Any], inner: Inner
) -> Callable[..., Any]:
    """A graph called under `torch.inference_mode()` (`with torch.inference_mode(): model(x)`),
    or given inference tensors. Inference tensors keep no version counter, which the stage
    reads to find mutated inputs, so the stage works on normal tensors that alias the same
    memory with the same sizes and strides, outside inference mode (and, when the call is
    under inference mode, without grad: nothing there records autograd). The compiled code
    does not care: under inference mode the outputs it allocates are inference tensors, as in
    eager."""
    memo: dict[int, Any] = {}

    def normal(value: Any) -> Any:
        if not _is_inference(value):
            return value
        if id(value) not in memo:
            alias = torch.empty(0, dtype=value.dtype, device=value.device)
            memo[id(value)] = alias.set_(
                value.untyped_storage(), value.storage_offset(), value.size(), value.stride()
            )
        return memo[id(value)]

    grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
    with torch.inference_mode(False):
        try:
            stand_ins = [normal(v) for v in example_inputs]
        except (RuntimeError, TypeError) as exc:  # a layout set_ cannot alias (sparse)
            log.info("aot: running the captured graph as it is: %s", exc)
            return gm.forward
        with torch.set_grad_enabled(grad):
            return aot_compile(gm, stand_ins, inner)


def _inside_one_inference_block(
    gm: torch.fx.GraphModule,
) -> tuple[torch.fx.GraphModule, bool] | None:
    """When the whole graph is one `with torch.inference_mode(mode):` block (its first call is
    the block's enter node and its last the exit): a copy without the two nodes, and the mode.
    The stage compiles the copy and runs it under the mode, so its outputs are inference
    tensors as in eager. Any other graph with such a block runs as captured."""
    grad_mode = torch.autograd.grad_mode
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    if len(calls) < 2:
        return None
    enter, leave = calls[0], calls[-1]
    if (
        enter.target is not grad_mode._enter_inference_mode
        or leave.target is not grad_mode._exit_inference_mode
        or leave.args != (enter,)
        or list(enter.users) != [leave]
        or not isinstance(enter.args[0], bool)
    ):
        return None
    if any(n.target in (grad_mode._enter_inference_mode, grad_mode._exit_inference_mode)
           for n in calls[1:-1]):  # fmt: skip
        return None
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    out = graph.graph_copy(gm.graph, env)
    graph.output(out)
    graph.erase_node(env[leave])
    graph.erase_node(env[enter])
    return torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__), enter.args[0]


def _any_requires_grad(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> bool:
    """May a tensor of the graph require grad (an input, or any computed value)? Yes when a
    value is unknown (a node without the frontend's `meta["val"]`)."""
    if any(isinstance(v, torch.Tensor) and v.requires_grad for v in example_inputs):
        return True
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is torch._C._set_grad_enabled:
            continue
        if "val" not in n.meta:
            return True
        value = n.meta["val"]
        values = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(v, torch.Tensor) and v.requires_grad for v in values):
            return True
    return False


def _restores_grad_mode(gm: torch.fx.GraphModule) -> bool:
    """Whether `gm`'s grad-mode switches are constants and leave grad mode enabled, as the
    graph is called (so running it changes no global state)."""
    enabled = True
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch._C._set_grad_enabled:
            if len(n.args) != 1 or not isinstance(n.args[0], bool):
                return False
            enabled = n.args[0]
    return enabled


def _without_grad_switches(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of `gm` without its grad-mode switches, for a graph in which no tensor requires
    grad: there a switch changes no value (the transformed code itself leaves grad mode as
    the function left it), and without it the graph can go through the stage."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    out = graph.graph_copy(gm.graph, env)
    graph.output(out)
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target is torch._C._set_grad_enabled and not n.users:
            graph.erase_node(n)
    copy = torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)
    return copy


def _keeping_regions(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """`gm` run node by node so the aten nodes traced from each captured node inherit its
    `meta["custom"]`, where activation-checkpoint regions are marked (partition.py)."""

    def run(*args: Any) -> Any:
        with fx_traceback.preserve_node_meta():
            return torch.fx.Interpreter(gm).run(*args)

    return run


def _compile(
    gm: torch.fx.GraphModule, example_inputs: list[Any], inner: Inner
) -> Callable[..., Any]:
    captured = gm.forward  # what runs when the stage does not compile the graph
    symbolic = symbolic_inputs(gm, example_inputs)
    if symbolic is None:
        gm = _pinning_eager_layouts(gm)
    info = analyze(gm, example_inputs, symbolic)
    if info.fallback is None and symbolic is not None:
        views = [
            o.kind
            for o in info.outputs
            if o.kind in ("input_view", "graph_view")
            and not all(isinstance(n, int) for n in (*o.size, *o.stride, o.offset))
        ]
        if views:  # rebuilt with as_strided from sizes known at compile time only
            info.fallback = f"an output is a view ({views[0]}) and its sizes are symbolic"
    if info.fallback is not None:
        log.info("aot: running the captured graph as it is: %s", info.fallback)
        return captured

    user = graph_with_outputs(gm, info.computed)
    # Symbolic int and float inputs (dynamic shapes, automatic dynamic floats) are inputs of
    # the traced graph too, after the tensors.
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    info.unique += [
        i
        for i, n in enumerate(placeholders)
        if isinstance(n.meta.get("val"), (torch.SymInt, torch.SymFloat))
    ]
    positions = {i: k for k, i in enumerate(info.unique)}
    first = {id(example_inputs[i]): positions[i] for i in info.unique}
    spread = [
        positions.get(i)
        if isinstance(v, (int, float))
        else first.get(id(v))
        if isinstance(v, torch.Tensor)
        else None
        for i, v in enumerate(example_inputs)
    ]

    # `forward`, not the module: a GraphModule's call prints its code to stderr on an error
    run = _keeping_regions(user) if has_checkpoint_regions(user) else user.forward

    # the non-tensor inputs only: `fn` lives as long as the runner (a double backward's
    # recompute), and must not keep the first call's tensors alive
    constants = [None if k is not None else v for v, k in zip(example_inputs, spread)]

    def fn(*unique: Any) -> Any:
        """The captured graph on deduplicated tensor inputs, returning the computed values."""
        return run(*[v if k is None else unique[k] for v, k in zip(constants, spread)])

    if symbolic is not None:  # the frontend's symbolic sizes, in its FakeTensorMode
        mode, all_fakes = symbolic()
        fakes = [all_fakes[i] for i in info.unique]
    else:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        fakes = [mode.from_tensor(example_inputs[i]) for i in info.unique]
    # Which unique inputs are parameters/buffers (the frontend's `static_input` placeholder
    # meta), handed on to the aten graphs for CUDA graph trees: see _mark_static_inputs.
    static = [bool(placeholders[i].meta.get("static_input")) for i in info.unique]
    mutated = [positions[i] for i in info.mutated]
    # a failed run of a graph that writes its inputs runs the captured graph as it is (runtime)
    on_error = captured if info.mutated else None
    forward_values = [*info.computed_values, *info.mutated_values]
    differentiable = [
        k
        for k, v in enumerate(forward_values)
        if isinstance(v, torch.Tensor)
        and v.requires_grad
        and (v.is_floating_point() or v.is_complex())
    ]
    if not (torch.is_grad_enabled() and differentiable):
        graph = trace_inference(fn, fakes, mutated, mode)
        fixes = _layout_fixes(info, graph, symbolic is not None)
        if fixes:
            fn = _laid_out(fn, fixes)
            graph = trace_inference(fn, fakes, mutated, mode)
        if not _view_bases_match(info, graph):
            return captured
        _log(gm, inference=graph)
        _mark_static_inputs(graph, static, "inference")
        return InferenceRunner(info, inner(graph, _example(graph)), on_error)

    with mode:
        tangents = [
            torch.empty(
                forward_values[k].shape,
                dtype=forward_values[k].dtype,
                device=forward_values[k].device,  # not the default device: the output's
            )
            for k in differentiable
        ]
    joint = trace_joint(fn, fakes, mutated, differentiable, tangents, mode)
    fixes = _layout_fixes(info, joint, symbolic is not None)
    if fixes:
        fn = _laid_out(fn, fixes)
        joint = trace_joint(fn, fakes, mutated, differentiable, tangents, mode)
    parts = partition(joint, len(fakes), len(forward_values))
    if not _view_bases_match(info, parts.forward):
        return captured
    _log(gm, joint=joint, forward=parts.forward, backward=parts.backward, saved=parts.saved)
    _mark_static_inputs(parts.forward, static, "forward")
    primal_names = [n.name for n in joint.graph.nodes if n.op == "placeholder"][: len(fakes)]
    static_names = {name for name, s in zip(primal_names, static) if s}
    _mark_static_inputs(parts.backward, [name in static_names for name in parts.saved], "backward")
    forward = inner(parts.forward, _example(parts.forward))
    wants_grad = [k for k, f in enumerate(fakes) if isinstance(f, torch.Tensor) and f.requires_grad]
    results = list(joint.graph.output_node().args[0])  # forward values, then gradients
    grads = results[len(forward_values) :]
    gradless = [k for k, grad in zip(wants_grad, grads, strict=True) if grad is None]
    if len(gradless) == len(wants_grad):
        # no input gets a gradient, yet an output requires grad: a backward formula that
        # gives none (`torch.norm(x, 0)`), not only `.detach()` (then no output would). Eager's
        # output has a grad_fn (`.backward()` on it works); with every input detached, ours
        # would have none
        gradless = []
    # A double backward (`autograd.grad(..., create_graph=True)`, then a backward through the
    # gradients: a gradient penalty, MAML's inner step) runs the captured graph again with
    # autograd, on the same inputs. A graph that draws random numbers (dropout) runs again from
    # the random states its forward started from, when `inner` draws as eager does (the same
    # aten random ops on the default generators; Triton kernels draw their own numbers). A
    # graph that writes inputs its outputs and gradients never read (BatchNorm's running
    # statistics in train mode) runs again on copies of those inputs, so they are written
    # once, as in eager.
    recompute = None
    rng_devices = _random_devices(parts.forward)
    if rng_devices is not None and (not rng_devices or _draws_as_eager(inner)):
        if not mutated:
            recompute = fn
        elif not _results_read(joint, results, mutated, len(info.computed_values), len(grads)):
            recompute = _on_copies(fn, mutated)
    return TrainingRunner(
        info,
        forward,
        lambda: inner(parts.backward, _example(parts.backward)),
        differentiable=differentiable,
        wants_grad=wants_grad,
        num_forward_outputs=len(forward_values),
        saved_bytes=parts.saved_bytes,
        recompute=recompute,
        on_error=on_error,
        gradless=gradless,
        rng_devices=rng_devices if recompute is not None else (),
    )


def _results_read(
    joint: torch.fx.GraphModule, results: list[Any], inputs: list[int], computed: int, grads: int
) -> bool:
    """Whether the joint graph's first `computed` results (the computed outputs) or its last
    `grads` (the gradients) depend on any of `inputs` (positions among its first placeholders);
    the results between are the inputs' new values."""
    placeholders = [n for n in joint.graph.nodes if n.op == "placeholder"]
    watched = {placeholders[i] for i in inputs}
    read = [*results[:computed], *results[len(results) - grads :]]
    todo = [r for r in read if isinstance(r, torch.fx.Node)]
    seen: set[torch.fx.Node] = set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        if node in watched:
            return True
        seen.add(node)
        todo.extend(_inputs_read(node))
    return False


def _inputs_read(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes `node`'s value depends on. Training-mode batch norm's normalized output and
    batch statistics (items 0 to 2) do not read the running statistics it updates (3, 4)."""
    if node.op == "call_function" and node.target is operator.getitem:
        parent, index = node.args
        if (
            isinstance(parent, torch.fx.Node)
            and parent.target is torch.ops.aten._native_batch_norm_legit_functional.default
            and parent.args[5] is True
            and isinstance(index, int)
            and index < 3
        ):
            return [a for a in parent.args[:3] if isinstance(a, torch.fx.Node)]
    return node.all_input_nodes


def _on_copies(fn: Callable[..., Any], inputs: list[int]) -> Callable[..., Any]:
    """`fn` writing copies of the inputs at `inputs` instead of the inputs themselves."""
    copied = set(inputs)

    def run(*args: Any) -> Any:
        return fn(*[a.detach().clone() if k in copied else a for k, a in enumerate(args)])

    return run


def _random_devices(graph: torch.fx.GraphModule) -> list[torch.device] | None:
    """The devices of the random ops' results in an aten graph (their default generators; none
    for a graph that draws no random numbers), or None where one is given a generator of the
    program's, or a device other than cpu and cuda: a replay of those draws would advance the
    program's generator."""
    devices: list[torch.device] = []
    for n in graph.graph.nodes:
        if not (
            isinstance(n.target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded in n.target.tags
        ):
            continue
        if n.kwargs.get("generator") is not None:
            return None
        values = n.meta.get("val")
        for value in values if isinstance(values, (tuple, list)) else [values]:
            device = getattr(value, "device", None)
            if device is None or device.type not in ("cpu", "cuda"):
                return None
            if device not in devices:
                devices.append(device)
    return devices


def _draws_as_eager(inner: Inner) -> bool:
    """`inner` runs the aten graph's random ops as torch's kernels on the default generators,
    so the captured graph run again from the same states draws the same numbers (registry's
    `eager` says so with `_framejit_eager_random`; a generator of the program's is a graph
    break in the frontend)."""
    return bool(getattr(inner, "_framejit_eager_random", False))


def _mark_static_inputs(graph: torch.fx.GraphModule, static: list[bool], kind: str) -> None:
    """Tell `inner` which inputs of an aten graph are parameters or buffers, and which graph it
    is, the way the frontend tells backends: `placeholder.meta["static_input"]`, plus
    `graph.meta["aot_kind"]` ("inference", "forward" or "backward"). CUDA graph trees
    (cudagraphs/) read both when they wrap `inner`'s result; nothing else depends on them.
    The first placeholders are the unique inputs (inference, forward) or the saved values
    (backward), in the order of `static`; the rest (tangents) are never static."""
    graph.meta["aot_kind"] = kind
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for node, is_static in zip(placeholders, static):
        node.meta["static_input"] = is_static


def _example(graph: torch.fx.GraphModule) -> list[Any]:
    return [n.meta.get("val") for n in graph.graph.nodes if n.op == "placeholder"]


def _layout_fixes(
    info: GraphInfo, graph: torch.fx.GraphModule, symbolic: bool
) -> dict[int, list[int]]:
    """The computed outputs whose traced layout is not the captured graph's, by position, with
    the dimension order (outermost first) that gives the captured one.

    The decompositions the trace runs lay some results out otherwise than the op eager runs
    (`F.logsigmoid` of a channels_last input on the CPU: the kernel's result is contiguous, the
    decomposition's keeps channels_last; `torch.roll` the other way round). The captured
    graph's values have eager's layout (the frontend corrects the ops whose fake layout is not
    eager's, `frontend/layouts.py`), and what the program does with an output (`.view`,
    `is_contiguous()`) depends on it, so an output laid out otherwise is copied into eager's
    layout at the end of the graph. Only dense outputs of static sizes."""
    if symbolic:
        return {}
    outputs = graph.graph.output_node().args[0]
    fixes: dict[int, list[int]] = {}
    for k, node in enumerate(info.computed):
        expected = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        traced = outputs[k].meta.get("val") if isinstance(outputs[k], torch.fx.Node) else None
        if not (isinstance(expected, torch.Tensor) and isinstance(traced, torch.Tensor)):
            continue
        if expected.shape != traced.shape or expected.layout != torch.strided:
            continue
        if long_strides(expected) == long_strides(traced):
            continue
        if not is_non_overlapping_and_dense_or_false(expected):
            continue
        fixes[k] = _dimension_order(expected)
    return fixes


def _pinning_eager_layouts(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm`, or a copy of it where each value whose layout the frontend set to eager's
    (`meta["eager_layout"]`, see `frontend/layouts.py`) passes through `_in_layout`: a copy
    into that layout where the FakeTensor run or the trace's decompositions choose another,
    so the ops after it (a `.view`) and the graph's outputs see what eager gives them. Run
    for real (the captured graph as it is), the values already have that layout and pass."""
    flagged = [n for n in gm.graph.nodes if n.meta.get("eager_layout")]
    if not flagged:
        return gm
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.output(graph.graph_copy(gm.graph, env))
    for original in gm.graph.nodes:
        node = env.get(original)
        if node is None:
            continue
        parent = node.args[0] if node.target is operator.getitem and node.args else None
        if not (
            node.meta.get("eager_layout")
            or (isinstance(parent, torch.fx.Node) and parent.meta.get("eager_layout"))
        ):
            continue
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor) or not is_non_overlapping_and_dense_or_false(value):
            continue
        with graph.inserting_after(node):
            pinned = graph.call_function(
                _in_layout, (node, list(value.stride()), _dimension_order(value))
            )
        node.replace_all_uses_with(pinned, delete_user_cb=lambda user, p=pinned: user is not p)
        pinned.meta.update(node.meta)
        pinned.meta.pop("eager_layout", None)  # pinned once
    return torch.fx.GraphModule(gm, graph)


def _dimension_order(t: torch.Tensor) -> list[int]:
    return sorted(range(t.dim()), key=lambda d: -t.stride(d))


def _in_layout(t: torch.Tensor, stride: list[int], order: list[int]) -> torch.Tensor:
    """`t`, or a copy of it with the dimensions laid out in `order` (outermost first) where its
    strides are not `stride` (dimensions of size 1 aside)."""
    if long_strides(t) == tuple(s for s, n in zip(stride, t.shape) if n > 1):
        return t
    return _ordered_copy(t, order)


def _ordered_copy(t: torch.Tensor, order: list[int]) -> torch.Tensor:
    """A dense copy of `t` whose dimensions are laid out in `order`, outermost first."""
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return t.permute(order).contiguous().permute(inverse)


def _laid_out(fn: Callable[..., Any], fixes: dict[int, list[int]]) -> Callable[..., Any]:
    """`fn` with its outputs at `fixes` copied into the dimension order given there."""

    def run(*args: Any) -> Any:
        outs = list(fn(*args))
        for k, order in fixes.items():
            outs[k] = _ordered_copy(outs[k], order)
        return outs

    return run


def _view_bases_match(info: GraphInfo, graph: torch.fx.GraphModule) -> bool:
    """A view rebuilt with `as_strided` needs its base laid out as eager would lay it out."""
    outputs = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    for spec in info.outputs:
        if spec.kind != "graph_view":
            continue
        traced = outputs[spec.index].meta.get("val")
        expected = info.computed_values[spec.index]
        if traced is None or traced.stride() != expected.stride() or traced.storage_offset():
            log.info("aot: running the captured graph as it is: a view's base changed layout")
            return False
    return True


def _log(gm: torch.fx.GraphModule, **graphs: Any) -> None:
    if not logs.enabled("aot_graphs"):
        return

    def text() -> str:
        parts = [f"AOT graphs of {type(gm).__name__}:"]
        for name, value in graphs.items():
            if isinstance(value, torch.fx.GraphModule):
                parts.append(f"# {name} graph\n{value.code.strip()}")
            else:
                parts.append(f"# {name}: {value}")
        return "\n\n".join(parts)

    logs.artifact("aot_graphs", text)

"""Run-time wrappers around the compiled aten graphs: the part of the AOT stage that runs per call.

`InferenceRunner` and `TrainingRunner` are what the backend hands back to the frontend; both take
the captured graph's inputs positionally and return its outputs as a tuple:

1. pick the deduplicated tensor inputs (`GraphInfo.unique`);
2. run the compiled graph: the inference graph under `no_grad`, or the forward graph inside an
   `autograd.Function` whose backward (compiled on first use) runs the backward graph;
3. epilogue: copy the new values of mutated inputs into the real inputs (in place, so aliases
   and `_version` see the write, and autograd records a copy when the new value has a grad),
   resizing an `out=` tensor of another size first, as eager does;
4. build the outputs from their `OutputSpec`s: computed values, inputs themselves, views of
   inputs or of computed bases rebuilt with `as_strided` (after the epilogue, with the view's
   conjugate and negative bits), constants.

Invariants: no per-call allocation beyond what the graph and the outputs need; nothing is
logged on the call path; the backward graph is compiled at most once per runner. With
`create_graph=True` the backward runs the captured graph again under autograd (its inputs are
kept on the autograd context for that), so the gradients can be differentiated again; for a
graph that writes its inputs or draws random numbers, the gradients' own backward raises an
error naming framejit.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from framejit.backend.aot.analysis import GraphInfo, OutputSpec


def _assemble(specs: list[OutputSpec], args: Sequence[Any], computed: Sequence[Any]) -> tuple:
    out: list[Any] = []
    for spec in specs:
        kind = spec.kind
        if kind == "graph":
            out.append(computed[spec.index])
        elif kind == "input":
            out.append(args[spec.index])
        elif kind in ("input_view", "graph_view"):
            base = args[spec.index] if kind == "input_view" else computed[spec.index]
            view = torch.as_strided(base, spec.size, spec.stride, spec.offset)
            if view.is_conj() != spec.conj:  # as_strided keeps the base's bits
                view = view.conj()
            if view.is_neg() != spec.neg:
                view = torch._neg_view(view)
            out.append(view.detach() if spec.detached else view)
        elif kind == "repeat":
            out.append(out[spec.index])
        else:
            out.append(spec.value)
    return tuple(out)


def _epilogue(mutated: list[int], args: Sequence[Any], new_values: Sequence[Any]) -> None:
    for i, value in zip(mutated, new_values):
        target = args[i]
        if target.shape != value.shape:  # an `out=` tensor of another size, resized as eager does
            _resize_output(target, value.shape)
        if target.requires_grad and (target.is_leaf or not value.requires_grad):
            # a write through `p.data` or `p.detach()`, or under no_grad (a hand-written SGD
            # step, an EMA): no autograd history. (A write with history into a leaf that
            # requires grad raised in eager, and in the analysis's run of the graph.)
            with torch.no_grad():
                target.copy_(value)
        else:
            target.copy_(value)


def _resize_output(out: torch.Tensor, size: torch.Size) -> None:
    """aten's `resize_output`: an `out=` tensor is resized to the result's size, with its
    deprecation warning when it had elements. (A graph whose traced sizes include the resize
    runs as captured; this is a graph traced with one symbolic size for the result and the
    `out=` tensor, then called with an `out=` tensor of another size.)"""
    if out.numel():
        warnings.warn(
            f"An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape {list(size)}. "
            "This behavior is deprecated, and in a future PyTorch release outputs will not be "
            "resized unless they have zero elements. You can explicitly reuse an out tensor t "
            "by resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning,
            stacklevel=2,
        )
    out.resize_(size)


class InferenceRunner:
    """Runs the functional inference graph; see the module docstring."""

    def __init__(
        self,
        info: GraphInfo,
        compiled: Callable[..., Sequence[Any]],
        on_error: Callable[..., Any] | None = None,
    ) -> None:
        self.info = info
        self.compiled = compiled
        # The captured graph as it is, run when the compiled one raises and the graph writes
        # its inputs: the functional graph writes them only after it succeeds, eager writes them
        # up to the op that raises. Running the captured graph gives eager's writes and error.
        self.on_error = on_error
        self.num_computed = len(info.computed)

    def __call__(self, *args: Any) -> tuple:
        info = self.info
        try:
            with torch.no_grad():
                results = self.compiled(*[args[i] for i in info.unique])
        except Exception:
            if self.on_error is None:
                raise
            return self.on_error(*args)
        computed = results[: self.num_computed]
        _epilogue(info.mutated, args, results[self.num_computed :])
        return _assemble(info.outputs, args, computed)


class TrainingRunner:
    """Runs forward and (lazily) backward graphs through `_CompiledFunction`."""

    def __init__(
        self,
        info: GraphInfo,
        forward: Callable[..., Sequence[Any]],
        compile_backward: Callable[[], Callable[..., Sequence[Any]]],
        *,
        differentiable: list[int],
        wants_grad: list[int],
        num_forward_outputs: int,
        saved_bytes: int = 0,
        recompute: Callable[..., Sequence[Any]] | None = None,
        on_error: Callable[..., Any] | None = None,
    ) -> None:
        self.info = info
        self.on_error = on_error  # as InferenceRunner's
        # the captured graph on the unique inputs, for a double backward (None: not possible)
        self.recompute = recompute
        self.saved_bytes = saved_bytes  # what the forward keeps for the backward (at trace sizes)
        self.forward = forward
        self.compile_backward = compile_backward
        self.backward: Callable[..., Sequence[Any]] | None = None
        self.differentiable = differentiable  # forward outputs that get a tangent
        self.wants_grad = wants_grad  # positions in the unique inputs that get a gradient
        self.num_forward_outputs = num_forward_outputs
        # forward outputs the compiled graph produces as views of its intermediates (found at
        # the first call: the graph's structure decides it, the same on every call)
        self.view_outputs: list[int] | None = None
        self.num_inputs = len(info.unique)
        self.mutated_inputs = [info.unique.index(i) for i in info.mutated]
        differentiable_set = set(differentiable)
        self.non_differentiable = [
            i for i in range(num_forward_outputs) if i not in differentiable_set
        ]
        self.detached_outputs = [
            i
            for i in self.non_differentiable
            if i < len(info.computed) and isinstance(info.computed_values[i], torch.Tensor)
        ]

    def __call__(self, *args: Any) -> tuple:
        info = self.info
        try:
            results = _CompiledFunction.apply(self, *[args[i] for i in info.unique])
        except Exception:
            if self.on_error is None:
                raise
            return self.on_error(*args)
        computed = list(results[: len(info.computed)])
        for i in self.detached_outputs:
            # A non-differentiable output the forward graph returns as the same tensor as a
            # differentiable one (`loss.detach()` next to `loss`): autograd marks both.
            if computed[i].requires_grad:
                computed[i] = computed[i].detach()
        _epilogue(info.mutated, args, results[len(info.computed) :])
        return _assemble(info.outputs, args, computed)

    def run_backward(self, saved: Sequence[torch.Tensor], grads: Sequence[Any]) -> list[Any]:
        if self.backward is None:
            self.backward = self.compile_backward()
        tangents = [grads[i].contiguous() for i in self.differentiable]
        input_grads: list[Any] = [None] * self.num_inputs
        for i, grad in zip(self.wants_grad, self.backward(*saved, *tangents)):
            input_grads[i] = grad
        return input_grads


class _CompiledFunction(torch.autograd.Function):
    """forward: the forward graph (outputs + saved values); backward: the backward graph."""

    @staticmethod
    def forward(ctx: Any, runner: TrainingRunner, *inputs: torch.Tensor) -> tuple:
        results = runner.forward(*inputs)
        outputs = results[: runner.num_forward_outputs]
        # A view of a graph intermediate returned from a Function with several outputs is one
        # autograd forbids to modify in place (`h[mask] = v` after the graph); the analysis
        # made every aliasing eager relies on explicit (views are rebuilt outside), so such
        # an output is returned as its own tensor.
        if runner.view_outputs is None:
            runner.view_outputs = [
                i for i, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o._is_view()
            ]
        if runner.view_outputs:
            outputs = list(outputs)
            for i in runner.view_outputs:
                outputs[i] = outputs[i].clone()
        outputs = tuple(outputs)
        saved = results[runner.num_forward_outputs :]
        if runner.mutated_inputs:  # the epilogue writes these: save their values, not them
            written = {inputs[i].untyped_storage().data_ptr() for i in runner.mutated_inputs}
            saved = [
                s.clone()
                if isinstance(s, torch.Tensor) and s.untyped_storage().data_ptr() in written
                else s
                for s in saved
            ]
        # Sizes saved for the backward (dynamic shapes) are ints: kept on ctx, not saved tensors.
        ctx.save_for_backward(*[s for s in saved if isinstance(s, torch.Tensor)])
        ctx.scalars = [(k, s) for k, s in enumerate(saved) if not isinstance(s, torch.Tensor)]
        ctx.runner = runner
        # the inputs themselves (one reference to their tuple), for a double backward
        ctx.inputs = inputs if runner.recompute is not None else None
        ctx.mark_non_differentiable(
            *[outputs[i] for i in runner.non_differentiable if isinstance(outputs[i], torch.Tensor)]
        )
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        create_graph = torch.is_grad_enabled()
        if create_graph and ctx.inputs is not None:
            return (None, *_differentiable_backward(ctx.runner, ctx.inputs, grads))
        saved = list(ctx.saved_tensors)
        for k, value in ctx.scalars:
            saved.insert(k, value)
        with torch.no_grad():
            input_grads = ctx.runner.run_backward(saved, grads)
        if create_graph:
            input_grads = _not_differentiable(input_grads)
        return (None, *input_grads)


def _differentiable_backward(
    runner: TrainingRunner, inputs: Sequence[Any], grads: Sequence[Any]
) -> list[Any]:
    """The gradients as autograd computes them in eager, with their own graph
    (`create_graph=True`): the captured graph runs again with autograd on the same inputs,
    and `autograd.grad` differentiates it, so a backward through the gradients works."""
    with torch.enable_grad():
        # each input through a view of its own: the graph's gradient is taken with respect
        # to these (an input that is another's ancestor, `y = x * x` before a graph break and
        # `y.sum()` after it, gets no gradient through the other), and the gradients stay
        # functions of the real inputs, so the next backward reaches their history
        inputs = [
            t.view_as(t) if isinstance(t, torch.Tensor) and t.requires_grad else t for t in inputs
        ]
        outputs = runner.recompute(*inputs)  # type: ignore[misc]
        pairs = [
            (outputs[i], grads[i])
            for i in runner.differentiable
            if grads[i] is not None and outputs[i].requires_grad
        ]
        wanted = [inputs[i] for i in runner.wants_grad]
        found = torch.autograd.grad(
            [o for o, _ in pairs],
            wanted,
            [g for _, g in pairs],
            create_graph=True,
            allow_unused=True,
        )
    input_grads: list[Any] = [None] * runner.num_inputs
    for i, grad in zip(runner.wants_grad, found):
        input_grads[i] = grad
    return input_grads


_DOUBLE_BACKWARD = (
    b"framejit: double backward through a compiled graph is not supported; the first-order "
    b"gradients are right, but differentiating them again needs the function run eagerly "
    b"(framejit.disable) or with backend='eager'"
)


def _not_differentiable(grads: list[Any]) -> list[Any]:
    """Gradients that raise a clear error if someone differentiates them again."""
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
        return grads
    error = torch._C._functions.DelayedError(_DOUBLE_BACKWARD, len(present))
    marked = error(*[grads[i].detach().requires_grad_() for i in present])
    if isinstance(marked, torch.Tensor):
        marked = (marked,)
    out = list(grads)
    for i, g in zip(present, marked):
        out[i] = g
    return out

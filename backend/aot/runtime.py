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

Gradients are per output, as in eager. An output that gets no gradient (`la.backward()` of
`la, lb = f(x)`) reaches the backward as None: the backward graph gets zeros for its tangent,
and an input that no output with a gradient depends on gets None (its `.grad` stays None,
`autograd.grad` raises that it was not used). Which inputs each output depends on, and which
outputs share history, is read once, at the first call of a graph with several differentiable
outputs, from the autograd graph of a FakeTensor run of the captured graph (`_dependencies`).
Outputs whose histories share no node that saves tensors in eager form independent groups
(two losses of two models; a GAN's `d_loss` next to `fake`): a backward through one group must
not free what another still needs, so the forward also keeps its saved tensors on the context
until every group had a backward without `retain_graph` (then frees them: with one group, as in
a plain training step, nothing is kept beyond the engine's saved tensors). A second backward
through a group without `retain_graph` raises eager's error.

Invariants: no per-call allocation beyond what the graph and the outputs need; nothing is
logged on the call path; the backward graph is compiled at most once per runner. With
`create_graph=True` the backward runs the captured graph again under autograd (its inputs are
kept on the autograd context for that), so the gradients can be differentiated again; for a
graph that writes its inputs or draws random numbers, the gradients' own backward raises an
error naming framejit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from framejit.backend.aot.analysis import GraphInfo, OutputSpec, graph_with_outputs, no_user_hooks
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode


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
            if spec.creation_meta is not None and view.requires_grad:
                # eager's refusal of an in-place write to a `split` output holds for it too
                torch._C._autograd._set_creation_meta(view, spec.creation_meta)
            out.append(view.detach() if spec.detached else view)
        elif kind == "repeat":
            out.append(out[spec.index])
        else:
            out.append(spec.value)
    return tuple(out)


def _epilogue(info: GraphInfo, args: Sequence[Any], new_values: Sequence[Any]) -> None:
    for i, value, steps in zip(info.mutated, new_values, info.version_steps):
        target = args[i]
        if target.shape != value.shape:  # an `out=` tensor of another size, resized as eager does
            _resize_output(target, value.shape)
        if steps == 0:
            # written only through `x.data`: x's version stays, so a backward that saved x
            # before the call still runs, as in eager
            target.data.copy_(value)
            continue
        if steps > 1 and not target.is_inference():  # one copy stands for several writes
            torch._C._autograd._unsafe_set_version_counter(
                (target,), (target._version + steps - 1,)
            )
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
        # the graph takes the first len(unique) arguments in order: with no others, the call's
        # arguments as they are (no duplicates, no non-tensors to drop)
        self.in_order = info.unique == list(range(len(info.unique)))

    def __call__(self, *args: Any) -> tuple:
        info = self.info
        if self.in_order and len(args) == len(info.unique):
            inputs: Any = args
        else:
            inputs = [args[i] for i in info.unique]
        try:
            if torch.is_grad_enabled():
                with torch.no_grad():
                    results = self.compiled(*inputs)
            else:  # an inference loop under no_grad: no context to enter per call
                results = self.compiled(*inputs)
        except Exception:
            if self.on_error is None:
                raise
            return self.on_error(*args)
        computed = results[: self.num_computed]
        _epilogue(info, args, results[self.num_computed :])
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
        gradless: Sequence[int] = (),
        rng_devices: Sequence[torch.device] = (),
    ) -> None:
        self.info = info
        # the devices whose default generators the graph draws from, when `recompute` replays
        # those draws: their states are kept at each forward, and a double backward runs the
        # captured graph again from them (the same dropout masks), then restores the states
        self.rng_devices = tuple(rng_devices)
        # unique inputs that require grad but never get a gradient (used only through
        # `.detach()`): passed to the autograd Function detached, so that its node has no edge
        # into their history (which a backward may already have freed, as in eager)
        self.gradless = frozenset(gradless)
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
        # what each differentiable output depends on (found at the first call, see
        # `_dependencies`; one output: every input that gets a gradient, in one group)
        self.dependencies: _Dependencies | None = None
        if len(differentiable) == 1:
            self.dependencies = _Dependencies([frozenset(wants_grad)], [0], 1)

    def __call__(self, *args: Any) -> tuple:
        info = self.info
        if self.dependencies is None:
            self.dependencies = _dependencies(info, args, self.differentiable, self.wants_grad)
        try:
            inputs = [args[i] for i in info.unique]
            if self.gradless:
                inputs = [a.detach() if k in self.gradless else a for k, a in enumerate(inputs)]
            results = _CompiledFunction.apply(self, *inputs)
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
        _epilogue(info, args, results[len(info.computed) :])
        return _assemble(info.outputs, args, computed)

    def run_backward(
        self,
        saved: Sequence[torch.Tensor],
        grads: Sequence[Any],
        outputs_like: Sequence[tuple[torch.Size, torch.dtype, torch.device]] | None,
    ) -> list[Any]:
        """The backward graph on the saved values and the outputs' gradients; an output that
        got none (None) gets zeros like it (`outputs_like`: the forward outputs' sizes, dtypes
        and devices), and an input that only such outputs depend on gets None."""
        if self.backward is None:
            self.backward = self.compile_backward()
        tangents = []
        reached: set[int] | None = None  # None: every output has a gradient
        for k, i in enumerate(self.differentiable):
            grad = grads[i]
            if grad is None:
                assert outputs_like is not None  # one differentiable output always has one
                size, dtype, device = outputs_like[k]
                tangents.append(torch.zeros(size, dtype=dtype, device=device))
                reached = set() if reached is None else reached
            else:
                tangents.append(grad.contiguous())
        if reached is not None:
            assert self.dependencies is not None
            for k, i in enumerate(self.differentiable):
                if grads[i] is not None:
                    reached |= self.dependencies.inputs[k]
        input_grads: list[Any] = [None] * self.num_inputs
        for i, grad in zip(self.wants_grad, self.backward(*saved, *tangents)):
            if reached is None or i in reached:
                input_grads[i] = grad
        return input_grads


class _CompiledFunction(torch.autograd.Function):
    """forward: the forward graph (outputs + saved values); backward: the backward graph."""

    @staticmethod
    def forward(ctx: Any, runner: TrainingRunner, *inputs: torch.Tensor) -> tuple:
        ctx.set_materialize_grads(False)  # an output without a gradient: None, see run_backward
        ctx.rng = [_rng_state(d) for d in runner.rng_devices] if runner.rng_devices else None
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
        tensors = [s for s in saved if isinstance(s, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        ctx.scalars = [(k, s) for k, s in enumerate(saved) if not isinstance(s, torch.Tensor)]
        ctx.runner = runner
        assert runner.dependencies is not None
        ctx.outputs_like = None
        if len(runner.differentiable) > 1:  # for zeros in place of a missing gradient
            ctx.outputs_like = [
                (outputs[i].shape, outputs[i].dtype, outputs[i].device)
                for i in runner.differentiable
            ]
        # Independent groups of outputs: the engine frees the saved tensors after the first
        # backward without retain_graph, so they are kept here too (detached: an output among
        # them must not point back at its own node) until each group had its backward.
        ctx.kept = None
        ctx.released = None  # groups that had a backward without retain_graph
        if runner.dependencies.num_groups > 1:
            ctx.kept = [t.detach() for t in tensors]
            ctx.released = set()
            ctx.engine_freed = False
        # the inputs themselves (one reference to their tuple), for a double backward
        ctx.inputs = inputs if runner.recompute is not None else None
        ctx.mark_non_differentiable(
            *[outputs[i] for i in runner.non_differentiable if isinstance(outputs[i], torch.Tensor)]
        )
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple:
        runner = ctx.runner
        present = [k for k, i in enumerate(runner.differentiable) if grads[i] is not None]
        kept = _kept_for(ctx, present) if ctx.released is not None else None
        if not present:
            return (None,) * (1 + runner.num_inputs)
        create_graph = torch.is_grad_enabled()
        inputs = ctx.inputs
        if not torch._C._autograd._get_current_graph_task_keep_graph() and (
            ctx.released is None or ctx.kept is None
        ):
            # the last backward this node can take: the inputs kept for a double backward go,
            # as eager frees what it saved (a loop that keeps its losses kept every batch)
            ctx.inputs = None
        if create_graph and inputs is not None:
            return (None, *_differentiable_backward(runner, inputs, grads, ctx.rng))
        saved = list(ctx.saved_tensors if kept is None else kept)
        for k, value in ctx.scalars:
            saved.insert(k, value)
        with torch.no_grad():
            input_grads = runner.run_backward(saved, grads, ctx.outputs_like)
        if create_graph:
            input_grads = _not_differentiable(input_grads)
        return (None, *input_grads)


_BACKWARD_TWICE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward."
)


def _kept_for(ctx: Any, present: list[int]) -> list[torch.Tensor] | None:
    """For a graph with independent groups of outputs: the saved tensors to use when the
    engine has freed its own (after an earlier backward without retain_graph through another
    group), else None (use `ctx.saved_tensors`, which checks their versions). Raises eager's
    error for a group that already had a backward without retain_graph, and frees the kept
    tensors once every group had one."""
    dependencies = ctx.runner.dependencies
    groups = {dependencies.group[k] for k in present}
    if groups & ctx.released:
        raise RuntimeError(_BACKWARD_TWICE)
    kept = ctx.kept if ctx.engine_freed else None
    if not torch._C._autograd._get_current_graph_task_keep_graph():
        ctx.engine_freed = True  # the engine frees the node's saved tensors after this call
        ctx.released |= groups
        if len(ctx.released) == dependencies.num_groups:
            ctx.kept = None
    return kept


def _rng_state(device: torch.device) -> torch.Tensor:
    if device.type == "cpu":
        return torch.get_rng_state()
    return torch.cuda.get_rng_state(device)


@contextlib.contextmanager
def _replaying(devices: Sequence[torch.device], states: Sequence[torch.Tensor] | None):
    """The default generators of `devices` set to `states` (the forward's), then restored: a
    double backward draws nothing from the program's random streams, as in eager."""
    if not states:
        yield
        return
    cuda = [d.index if d.index is not None else 0 for d in devices if d.type == "cuda"]
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        for device, state in zip(devices, states):
            if device.type == "cpu":
                torch.set_rng_state(state)
            else:
                torch.cuda.set_rng_state(state, device)
        yield


def _differentiable_backward(
    runner: TrainingRunner,
    inputs: Sequence[Any],
    grads: Sequence[Any],
    rng: Sequence[torch.Tensor] | None = None,
) -> list[Any]:
    """The gradients as autograd computes them in eager, with their own graph
    (`create_graph=True`): the captured graph runs again with autograd on the same inputs,
    and `autograd.grad` differentiates it, so a backward through the gradients works. A graph
    that draws random numbers runs again from the random states its forward started from."""
    with torch.enable_grad(), _replaying(runner.rng_devices, rng):
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
        wants_grad = [i for i in runner.wants_grad if i not in runner.gradless]
        wanted = [inputs[i] for i in wants_grad]
        found = torch.autograd.grad(
            [o for o, _ in pairs],
            wanted,
            [g for _, g in pairs],
            create_graph=True,
            allow_unused=True,
        )
    input_grads: list[Any] = [None] * runner.num_inputs
    for i, grad in zip(wants_grad, found):
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


@dataclasses.dataclass(frozen=True)
class _Dependencies:
    """For each differentiable forward output (in `TrainingRunner.differentiable` order): the
    unique inputs its eager autograd graph reaches (`inputs`), and its group: outputs whose
    histories share a node that saves tensors are in one group."""

    inputs: list[frozenset[int]]
    group: list[int]
    num_groups: int


def _dependencies(
    info: GraphInfo, args: Sequence[Any], differentiable: list[int], wants_grad: list[int]
) -> _Dependencies:
    """Run the captured graph once on FakeTensors with autograd (no real compute) and read
    its autograd graph: which inputs each differentiable output reaches, and which outputs
    share saved tensors. The inputs that require grad become leaves of their own. Where the
    run fails, every output depends on every input, all in one group (a backward through one
    output then gives zeros, not None, to the others' inputs)."""
    count = len(differentiable)
    everything = _Dependencies([frozenset(wants_grad)] * count, [0] * count, 1)
    gm = info.computed[0].graph.owning_module if info.computed else None
    if gm is None:
        return everything
    try:
        values, leaves = _run_on_fakes(gm, info, args)
    except Exception:  # noqa: BLE001 - a refinement, which never makes a call fail
        return everything
    owner: dict[Any, int] = {}  # autograd node -> the first output that reached it
    parent = list(range(count))  # union-find over the outputs

    def root(k: int) -> int:
        while parent[k] != k:
            k = parent[k]
        return k

    inputs: list[frozenset[int]] = []
    for k, index in enumerate(differentiable):
        reached: set[int] = set()
        seen: set[Any] = set()
        value = values[index]
        todo = [value.grad_fn] if isinstance(value, torch.Tensor) else []
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if hasattr(node, "variable"):  # AccumulateGrad: a leaf
                if id(node.variable) in leaves:
                    reached.add(leaves[id(node.variable)])
                continue
            first = owner.setdefault(node, k)
            if first != k and root(first) != root(k) and _saves_tensors(node):
                parent[root(k)] = root(first)
            todo.extend(next_node for next_node, _ in node.next_functions)
        inputs.append(frozenset(reached))
    roots = [root(k) for k in range(count)]
    labels = {r: n for n, r in enumerate(dict.fromkeys(roots))}
    return _Dependencies(inputs, [labels[r] for r in roots], len(labels))


def _run_on_fakes(
    gm: torch.fx.GraphModule, info: GraphInfo, args: Sequence[Any]
) -> tuple[list[Any], dict[int, int]]:
    """The forward values (computed values, then new values of the mutated inputs) of `gm`
    run with autograd on FakeTensor copies of `args`, and the ids of the fake leaves standing
    for the unique inputs that require grad, with their positions."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    position = {i: k for k, i in enumerate(info.unique)}
    fakes: list[Any] = []
    first: dict[int, Any] = {}  # a tensor passed twice is one fake
    leaves: dict[int, int] = {}
    for i, arg in enumerate(args):
        if not isinstance(arg, torch.Tensor):
            fakes.append(arg)
            continue
        if id(arg) not in first:
            fake = mode.from_tensor(arg.detach())
            if arg.requires_grad:
                fake.requires_grad_(True)
                leaves[id(fake)] = position[i]
                if i in info.mutated:  # autograd refuses in-place ops on such a leaf
                    with torch.enable_grad():
                        fake = fake.clone()
            first[id(arg)] = fake
        fakes.append(first[id(arg)])
    run = graph_with_outputs(gm, info.computed)
    with mode, enable_python_dispatcher(), no_user_hooks(), torch.enable_grad():
        computed = list(run(*fakes))
    return [*computed, *[fakes[i] for i in info.mutated]], leaves


_SAVED_NAMES: dict[type, list[str]] = {}


def _saves_tensors(node: Any) -> bool:
    """Does autograd node `node` hold saved tensors (which a backward without retain_graph
    frees)? A custom Function's node: its `saved_tensors`; a built-in one: its `_saved_*`
    attributes (an undefined saved tensor reads as None)."""
    if isinstance(node, torch.autograd.function.BackwardCFunction):
        return bool(node.saved_tensors)
    names = _SAVED_NAMES.get(type(node))
    if names is None:
        prefix = "_raw_saved_"
        names = [f"_saved_{a[len(prefix) :]}" for a in dir(node) if a.startswith(prefix)]
        _SAVED_NAMES[type(node)] = names
    for name in names:
        value = getattr(node, name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        if any(isinstance(v, torch.Tensor) for v in values):
            return True
    return False

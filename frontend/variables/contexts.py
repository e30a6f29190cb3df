"""Context managers the translator understands: grad mode (`no_grad`, `enable_grad`,
`set_grad_enabled`), `torch.autocast` and `torch.inference_mode`; and the exits of `with`
blocks a graph break entered for real (ContextExit).

Entering or leaving one changes grad mode in three places at once: in the graph (a
`torch._C._set_grad_enabled` node, so the captured ops run under the right mode whatever the
backend), in the tracing thread (so FakeTensors get the right `requires_grad`), and - when the
frame leaves grad mode changed, as a bare `torch.set_grad_enabled(False)` does - in the
transformed code after the graph. compile_frame restores the tracing thread's mode when it ends.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.variables.base import ConstantVariable, VariableTracker

if TYPE_CHECKING:
    from framejit.frontend.translator import Translator


def set_grad_mode(tx: Translator, mode: bool) -> None:
    out = tx.output
    if torch.is_grad_enabled() is mode:
        return
    node = out.graph.call_function(torch._C._set_grad_enabled, (mode,))
    out.created.append(node)
    torch._C._set_grad_enabled(mode)


class GradModeVariable(VariableTracker):
    """`torch.no_grad()`, `torch.enable_grad()` or `torch.set_grad_enabled(mode)`."""

    def __init__(self, cls: type, mode: bool, applied_on_creation: bool) -> None:
        self.cls = cls
        self.mode = mode
        self.prior: bool | None = None
        self.applied_on_creation = applied_on_creation

    def __repr__(self) -> str:
        return f"GradMode({self.cls.__name__}, {self.mode})"

    def python_type(self) -> type:
        return self.cls

    @staticmethod
    def create(tx: Translator, cls: type, mode: bool) -> GradModeVariable:
        vt = GradModeVariable(cls, mode, applied_on_creation=cls is torch.set_grad_enabled)
        if vt.applied_on_creation:  # set_grad_enabled(False) acts when called, `with` or not
            vt.prior = torch.is_grad_enabled()
            set_grad_mode(tx, mode)
        return vt

    def enter(self, tx: Translator) -> VariableTracker:
        if not self.applied_on_creation:
            self.prior = torch.is_grad_enabled()
            set_grad_mode(tx, self.mode)
        return ConstantVariable(None)

    def exit(self, tx: Translator) -> None:
        if self.prior is not None:
            set_grad_mode(tx, self.prior)

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        """`torch.no_grad()(fn)`: `@torch.no_grad()` on a function the frame defines."""
        from framejit.frontend.variables.functions import (
            NestedFunctionVariable,
            UserFunctionVariable,
        )

        fn = args[0] if len(args) == 1 and not kwargs else None
        code = getattr(fn, "code", None) or getattr(getattr(fn, "fn", None), "__code__", None)
        if (
            not isinstance(fn, (NestedFunctionVariable, UserFunctionVariable))
            or code is None
            or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE)
        ):
            return super().call(tx, args, kwargs)
        if self.applied_on_creation and self.prior is not None:
            set_grad_mode(tx, self.prior)  # set_grad_enabled's __call__ puts the mode back
            self.prior = None
        return GradModeDecoratedVariable(self.cls, self.mode, fn)


class GradModeDecoratedVariable(VariableTracker):
    """A function wrapped by a grad-mode context used as a decorator: each call runs it in a
    fresh context of the same kind, as torch's `context_decorator` does."""

    def __init__(self, cls: type, mode: bool, fn: VariableTracker) -> None:
        self.cls = cls
        self.mode = mode
        self.fn = fn

    def __repr__(self) -> str:
        return f"GradModeDecorated({self.cls.__name__}, {self.fn!r})"

    def python_type(self) -> type:
        return type(lambda: None)

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        ctx = GradModeVariable.create(tx, self.cls, self.mode)
        ctx.enter(tx)
        try:
            result = self.fn.call(tx, args, kwargs)
        except BaseException:
            ctx.exit(tx)  # the real grad mode as before the call (a break rewinds the graph)
            raise
        ctx.exit(tx)
        return result

    def getattr(self, tx: Translator, name: str) -> VariableTracker:
        if name in ("__name__", "__qualname__", "__code__", "__wrapped__"):
            return self.fn if name == "__wrapped__" else self.fn.getattr(tx, name)
        return super().getattr(tx, name)

    def reconstruct(self, cg: Any) -> None:
        def emit() -> None:
            cg.load_const(self.cls)
            cg.load_const(self.mode)
            cg.reconstruct(self.fn)

        cg.call_const(grad_mode_decorated, emit, 3)


def grad_mode_decorated(cls: type, mode: bool, fn: Any) -> Any:
    """What `@cls(...)` made of `fn`, rebuilt after a graph break."""
    return cls(mode)(fn) if cls is torch.set_grad_enabled else cls()(fn)


class GradModeExit:
    """What a `with` block over a grad-mode context holds as its exit after a graph break: the
    resume function's copy of the block calls it (normally or with an exception) to restore
    the mode from before the block."""

    def __init__(self, prior: bool) -> None:
        self.prior = prior

    def __call__(self, *exc_info: Any) -> None:
        torch._C._set_grad_enabled(self.prior)


class WithExitVariable(VariableTracker):
    """The `__exit__` a `with` block calls at its end: leaves the context."""

    def __init__(self, ctx: GradModeVariable, source: Any = None) -> None:
        self.ctx = ctx
        self.source = source

    def python_type(self) -> type:
        return GradModeExit

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        self.ctx.exit(tx)
        return ConstantVariable(None)

    def reconstruct(self, cg: Any) -> None:
        prior = self.ctx.prior
        cg.call_const(GradModeExit, lambda: cg.load_const(prior), 1)

    @staticmethod
    def resumed(prior: bool, source: Any) -> WithExitVariable:
        """The exit of a block a graph break interrupted, met again in the resume function."""
        ctx = GradModeVariable(torch.set_grad_enabled, torch.is_grad_enabled(), False)
        ctx.prior = prior
        return WithExitVariable(ctx, source)


GRAD_MODE_CLASSES: dict[Any, bool | None] = {
    torch.no_grad: False,
    torch.enable_grad: True,
    torch.set_grad_enabled: None,  # the mode is its argument
}


class NodeContextVariable(VariableTracker):
    """A context captured as a pair of graph nodes: entering adds an `enter_target` node,
    exiting an `exit_target` node on it, so the captured ops run under the context whatever the
    backend. Entering also enters the real context (`real_context(args)`) in the tracing thread
    (FakeTensors then get its effects); compile_frame leaves any context the trace left open."""

    label = ""
    enter_target: Callable[..., Any]
    exit_target: Callable[..., Any]
    real_context: Callable[[Any], Any]

    def __init__(self, args: Any) -> None:
        self.args = args
        self.node: Any = None
        self.real: Any = None

    def __repr__(self) -> str:
        return f"{self.label}{self.args}"

    def node_args(self) -> tuple[Any, ...]:
        return (self.args,)

    def enter(self, tx: Translator) -> VariableTracker:
        out = tx.output
        self.node = out.graph.call_function(self.enter_target, self.node_args())
        out.created.append(self.node)
        self.real = self.real_context(self.args)
        self.real.__enter__()
        out.open_contexts.append(self.real)
        return ConstantVariable(None)

    def exit(self, tx: Translator) -> None:
        out = tx.output
        self.close_in_graph(out)
        if self.real in out.open_contexts:
            out.open_contexts.remove(self.real)
            self.real.__exit__(None, None, None)

    def close_in_graph(self, output: Any) -> None:
        """The graph leaves the context: at the block's end, or at a graph break inside it (the
        transformed code then enters the real context after the graph, see
        AutocastExitVariable.reconstruct)."""
        node = output.graph.call_function(self.exit_target, (self.node,))
        output.created.append(node)

    @classmethod
    def enter_for_real(cls, args: Any) -> ContextExit:
        ctx = cls.real_context(args)
        ctx.__enter__()
        return ContextExit(ctx.__exit__)


class AutocastVariable(NodeContextVariable):
    """`torch.autocast(device_type, dtype, enabled, cache_enabled)` with constant arguments:
    `_enter_autocast` / `_exit_autocast` nodes; FakeTensors get autocast's dtypes."""

    label = "Autocast"
    enter_target = staticmethod(torch.amp.autocast_mode._enter_autocast)
    exit_target = staticmethod(torch.amp.autocast_mode._exit_autocast)

    @staticmethod
    def real_context(args: Any) -> Any:
        return torch.autocast(*args)

    def python_type(self) -> type:
        return torch.autocast

    def node_args(self) -> tuple[Any, ...]:
        return self.args


class InferenceModeVariable(NodeContextVariable):
    """`torch.inference_mode(mode)` with a constant mode: `_enter_inference_mode` /
    `_exit_inference_mode` nodes, so the captured ops make inference tensors as in eager;
    FakeTensors are inference tensors too (`x.is_inference()` folds)."""

    label = "InferenceMode"
    enter_target = staticmethod(torch.autograd.grad_mode._enter_inference_mode)
    exit_target = staticmethod(torch.autograd.grad_mode._exit_inference_mode)
    real_context = torch.inference_mode

    def python_type(self) -> type:
        return torch.inference_mode


class ContextExit:
    """The exit of a `with` block whose context was entered for real at a graph break (a
    context the translator does not model, or an autocast block re-entered after the graph).
    The resume function's copy of the block calls it, normally or with the exception; the
    translator never traces it (calling it is a graph break, so the exit runs for real)."""

    __slots__ = ("exit",)

    def __init__(self, exit: Any) -> None:
        self.exit = exit

    def __call__(self, *exc_info: Any) -> Any:
        return self.exit(*exc_info)


class AutocastExitVariable(VariableTracker):
    """The exit an autocast or inference-mode `with` block calls at its end."""

    def __init__(self, ctx: NodeContextVariable) -> None:
        self.ctx = ctx

    def python_type(self) -> type:
        return type(lambda: None)

    def call(
        self, tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        self.ctx.exit(tx)
        return ConstantVariable(None)

    def reconstruct(self, cg: Any) -> None:
        """At a graph break inside the block (the graph closed it): enter the same context for
        real and pass its exit on."""
        cg.call_const(type(self.ctx).enter_for_real, lambda: cg.load_const(self.ctx.args), 1)


AUTOCAST_CLASSES = (torch.autocast, torch.amp.autocast)


def autocast_arguments(
    args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> tuple[Any, ...] | None:
    """(device_type, dtype, enabled, cache_enabled) when all are constants, else None."""
    import inspect

    try:
        bound = inspect.signature(torch.autocast.__init__).bind(None, *args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    values = dict(bound.arguments)
    values.pop("self")
    if not all(getattr(v, "is_constant", lambda: True)() for v in values.values()):
        return None
    plain = {k: v.as_constant() if isinstance(v, VariableTracker) else v for k, v in values.items()}
    device, dtype = plain["device_type"], plain["dtype"]
    if dtype is None:
        dtype = torch.get_autocast_dtype(device)
    cache = plain["cache_enabled"]
    if cache is None:
        cache = torch.is_autocast_cache_enabled()
    return (device, dtype, bool(plain["enabled"]), bool(cache))

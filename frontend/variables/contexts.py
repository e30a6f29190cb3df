"""Context managers the translator understands: grad mode (`no_grad`, `enable_grad`,
`set_grad_enabled`).

Entering or leaving one changes grad mode in three places at once: in the graph (a
`torch._C._set_grad_enabled` node, so the captured ops run under the right mode whatever the
backend), in the tracing thread (so FakeTensors get the right `requires_grad`), and - when the
frame leaves grad mode changed, as a bare `torch.set_grad_enabled(False)` does - in the
transformed code after the graph. compile_frame restores the tracing thread's mode when it ends.
"""

from __future__ import annotations

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

"""Shared by the AOT-stage tests: compile a plain function through `aot_eager` directly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from framejit.backend import lookup_backend


def aot(fn: Callable[..., Any] | torch.fx.GraphModule, *inputs: Any) -> Callable[..., Any]:
    """`aot_eager` applied to `fn` (symbolically traced unless it already is a GraphModule)."""
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    return lookup_backend("aot_eager")(gm, list(inputs))


def clone_inputs(values: tuple[Any, ...]) -> list[Any]:
    """Independent copies (leaves keep `requires_grad`) so eager and compiled runs do not mix."""
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            c = v.detach().clone()
            c.requires_grad_(v.requires_grad)
            out.append(c)
        else:
            out.append(v)
    return out

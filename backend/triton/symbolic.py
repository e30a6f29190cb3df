"""Graphs with symbolic sizes: one compiled callable that serves every size.

The AOT stage may hand over an aten graph whose placeholders carry FakeTensors with SymInt
sizes (`s0`, `s1`, ...), with SymInt-valued nodes (`sym_size`, arithmetic) and int
placeholders. The pipeline first tries to compile it as it is: sizes are sympy expressions in
the loop IR (ir.py's `Size`), kernels take the symbols they use as arguments, and the wrapper
binds each symbol from the first input dimension (or number input) that holds it plainly, so
one module serves every size. Other size expressions (`s0 // 2`, `min`, `max`, a slice bound
clamped per call) are derived sizes (sizes.py's `SizeFacts`): the wrapper computes each from
the symbols, and kernels take it as one more argument. When that path meets something it does
not handle (a size function it cannot write, such as `s0 & 6`, a comparison it must decide
and cannot, a symbol no input holds), `compile_graph` falls back to `Specializing`, below,
with a `perf_hints` line.

`Specializing` compiles the graph per distinct size: on a call, the inputs' sizes, strides and
int arguments bind every symbol; the first call with a new binding retraces the graph with
those inputs (`make_fx` on FakeTensors: sym_size nodes become the numbers) and compiles the now
static graph as usual; later calls with the same binding go straight to that module.

Invariants:

- Every size symbol is at least 2 (torch's ShapeEnv specializes 0 and 1), which is what the
  symbolic index simplification assumes; a derived size may be 0 or 1 (an empty slice), and
  is only assumed non-negative where its definition proves it.
- Results never depend on which binding compiled first: each binding has its own module.
- After `MAX_SPECIALIZATIONS` bindings a new one runs the aten graph eagerly (a `perf_hints`
  line says so) instead of compiling without bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx

MAX_SPECIALIZATIONS = 32


def is_symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether any node's value has a symbolic size, stride or is itself a symbolic number."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for v in val if isinstance(val, (list, tuple)) else [val]:
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                return True
            if isinstance(v, torch.Tensor) and any(
                isinstance(d, torch.SymInt) for d in (*v.shape, *v.stride())
            ):
                return True
    return False


def _binding(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        (a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a for a in args
    )


class Specializing:
    """`call(*inputs)`: the module compiled for these inputs' sizes (compiling it first)."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        compile_static: Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]],
        hint: Callable[[str], None],
    ) -> None:
        self.gm = gm
        self.compile_static = compile_static
        self.hint = hint
        self.compiled: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, *args: Any) -> Any:
        key = _binding(args)
        call = self.compiled.get(key)
        if call is None:
            call = self.specialize(args, key)
        return call(*args)

    def specialize(self, args: tuple[Any, ...], key: tuple[Any, ...]) -> Callable[..., Any]:
        from torch.fx.experimental.proxy_tensor import make_fx

        if len(self.compiled) >= MAX_SPECIALIZATIONS:
            self.hint(
                f"symbolic graph: {MAX_SPECIALIZATIONS} sizes compiled already; sizes "
                f"{[k[0] if isinstance(k, tuple) else k for k in key]} run as the aten graph"
            )
            call: Callable[..., Any] = self.gm.forward
        else:
            with torch.no_grad():
                static = make_fx(self.gm, tracing_mode="fake")(*args)
            call = self.compile_static(static, list(args))
        self.compiled[key] = call
        return call

"""Backend registry: names to `(gm, example_inputs) -> callable` functions.

Built in: `eager` (runs the captured GraphModule as it is), `aot_eager` (the AOT stage, then the
aten graphs run as Python: `backend/aot/`), `triton` (the AOT stage, then fused Triton kernels:
`backend/triton/`) and `auto` (the best available for the inputs: `triton` for CUDA tensors when
Triton is importable; on CPU `aot_eager` for training graphs and `eager` for inference graphs).
Users add their own with `framejit.register_backend`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch.fx

Backend = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]

_BACKENDS: dict[str, Backend] = {}


def register_backend(name: str, fn: Backend | None = None) -> Any:
    """Register `fn` under `name`; usable as a decorator (`@register_backend("mine")`)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_backend: name must be a non-empty str, got {name!r}")

    def register(backend: Backend) -> Backend:
        if not callable(backend):
            raise TypeError(
                f"register_backend({name!r}): expected a callable (gm, example_inputs) -> "
                f"callable, got {type(backend).__name__}"
            )
        if _BACKENDS.get(name, backend) is not backend:
            # as torch.compile's registry: replacing a backend (a built-in one too) silently
            # would change what every `jit(backend=name)` compiles with
            raise ValueError(f"register_backend: a backend named {name!r} is already registered")
        _BACKENDS[name] = backend
        return backend

    return register(fn) if fn is not None else register


def list_backends() -> list[str]:
    return sorted(_BACKENDS)


def lookup_backend(backend: str | Backend) -> Backend:
    if callable(backend):
        return backend
    if not isinstance(backend, str):
        raise TypeError(
            f"backend must be a registered name or a callable (gm, example_inputs) -> callable, "
            f"got {type(backend).__name__}"
        )
    try:
        return _BACKENDS[backend]
    except KeyError:
        raise ValueError(
            f"unknown backend {backend!r}; registered backends: {', '.join(list_backends())}"
        ) from None


@register_backend("eager")
def eager(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Run the captured graph as Python: no lowering. Calls `forward` directly (no hooks)."""
    return gm.forward


# Under the AOT stage, `eager` runs random ops as torch's kernels on the default generators,
# drawing what eager draws: a double backward may replay them (backend/aot/compile.py).
eager._framejit_eager_random = True  # type: ignore[attr-defined]
# and the AOT stage keeps torch's ops undecomposed for it: decompositions would only round
# differently (in the last bits of gradients) and run more kernels
eager._framejit_eager_kernels = True  # type: ignore[attr-defined]


@register_backend("aot_eager")
def aot_eager(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The AOT stage (functional aten graphs, torch's ops kept whole; forward/backward split
    when training), with each aten graph run as Python."""
    from framejit.backend.aot import aot_compile  # imported on first use: it loads torch._decomp

    return aot_compile(gm, example_inputs, eager)


@register_backend("triton")
def triton(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The AOT stage, then each aten graph lowered to fused Triton kernels
    (`backend/triton/`). CPU tensors need `TRITON_INTERPRET=1`; without it they run as
    `aot_eager` would, with a `perf_hints` line."""
    from framejit.backend.aot import aot_compile
    from framejit.backend.triton import compile_graph

    return aot_compile(gm, example_inputs, compile_graph)


def _wants_triton(example_inputs: list[Any]) -> bool:
    """CUDA tensors among the inputs, and Triton importable."""
    if not any(isinstance(v, torch.Tensor) and v.is_cuda for v in example_inputs):
        return False
    from framejit.backend.triton import triton_available

    return triton_available()


def _training(example_inputs: list[Any]) -> bool:
    """Grad mode on and an input that requires grad: the graph will be differentiated."""
    return torch.is_grad_enabled() and any(
        isinstance(v, torch.Tensor) and v.requires_grad for v in example_inputs
    )


@register_backend("auto")
def auto(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """The best backend available for these inputs: `triton` for CUDA tensors when Triton is
    usable. Otherwise (CPU tensors): `aot_eager` for graphs that will be differentiated (its
    partition saves less for backward than eager autograd) and `eager` for inference graphs —
    on a CPU, functional aten run op by op is slower than the captured ops (the demo model ran
    at 0.60x eager through `aot_eager` while it decomposed, 1.17x through `eager`)."""
    if _wants_triton(example_inputs):
        return triton(gm, example_inputs)
    if _training(example_inputs):
        return aot_eager(gm, example_inputs)
    return eager(gm, example_inputs)


def with_cudagraphs(backend: Backend, max_autotune: bool = False) -> Backend:
    """`backend` whose compiled graphs run through CUDA graph trees (`mode="reduce-overhead"`,
    `cudagraphs/`). For the AOT backends (`aot_eager`, `triton`, `auto`) the trees wrap each aten
    graph the inner compiler returns (inference, forward, backward), so input mutations and
    autograd stay outside the recordings; any other backend's callable is wrapped whole.
    `max_autotune` (`mode="max-autotune"`): Triton kernels get the wider autotune too."""
    if getattr(backend, "_framejit_cudagraphs", False):
        return backend

    def compile_with_cudagraphs(
        gm: torch.fx.GraphModule, example_inputs: list[Any]
    ) -> Callable[..., Any]:
        if backend in (aot_eager, triton, auto):
            from framejit.backend.aot import aot_compile

            inner: Backend = eager
            if backend is triton or (backend is auto and _wants_triton(example_inputs)):
                from framejit.backend.triton import compile_graph

                inner = compile_graph
                if max_autotune:
                    inner = functools.partial(compile_graph, options={"max_autotune": True})

            def graphed_inner(aten: torch.fx.GraphModule, aten_inputs: list[Any]) -> Any:
                return _cudagraphify(inner(aten, aten_inputs), aten, aten_inputs, _describe(gm))

            return aot_compile(gm, example_inputs, graphed_inner)
        return _cudagraphify(backend(gm, example_inputs), gm, example_inputs, _describe(gm))

    compile_with_cudagraphs._framejit_cudagraphs = True  # type: ignore[attr-defined]
    compile_with_cudagraphs.__name__ = f"{getattr(backend, '__name__', 'backend')}_cudagraphs"
    return compile_with_cudagraphs


def _describe(gm: torch.fx.GraphModule) -> str:
    """The frontend names graphs `<function>_graph`: say which function made it."""
    name = type(gm).__name__
    return f"the graph of {name[: -len('_graph')]}()" if name.endswith("_graph") else name


def _cudagraphify(
    compiled: Callable[..., Any], gm: torch.fx.GraphModule, example_inputs: list[Any], name: str
) -> Callable[..., Any]:
    """Hand a compiled graph to the trees with what they need from the graph: which placeholders
    are parameters/buffers (`meta["static_input"]`) and which AOT graph it is."""
    from framejit import cudagraphs

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    static = [i for i, n in enumerate(placeholders) if n.meta.get("static_input")]
    kind = gm.meta.get("aot_kind", "inference")
    label = name if kind == "inference" else f"{name} ({kind})"
    return cudagraphs.cudagraphify(compiled, example_inputs, static, label, kind)

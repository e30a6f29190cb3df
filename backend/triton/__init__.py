"""The Triton backend: functional core-aten graphs become fused Triton kernels.

A named, linear pipeline, each step printable (golden tests compare the text):

    layout    (conv_layout.py)                channels-last convolution inputs (config.conv_layout)
    lower     (lower.py, op table in ops.py)  aten graph -> LoopGraph (pointwise/reduction/extern)
    schedule  (schedule.py)                   inline pointwise chains, group nodes into kernels
    codegen   (codegen.py, kernels.py,        one Python module: Triton kernels + `call` wrapper
               helpers.py)
    load      (cache.py)                      written under config.cache_dir, keyed by source

Indices read from memory (gather, `x[idx]`, index_select, embedding) that are not proven in
range are checked in the kernels, and `call` raises `bounds.IndexOutOfBounds` for a bad one
(bounds.py); no kernel ever loads through an out-of-range index.

Graphs with symbolic sizes compile to kernels that take the sizes as arguments, one module for
every size; what that path does not handle is compiled per distinct size (symbolic.py).

`compile_graph(gm, example_inputs)` is the `inner` backend the AOT stage calls for each aten
graph (the registry's `triton` backend is `aot_compile(gm, inputs, compile_graph)`).
`stages(gm)` returns every step's text, for debugging and tests.

CPU tensors: kernels run in Triton's interpreter when `TRITON_INTERPRET=1` is set before the
kernels are loaded (that is how CI tests them). Without it, a graph on CPU runs as its aten graph
(as `aot_eager` would), with a `perf_hints` line saying why: framejit never fails a program for
want of a device. So does a graph with meta tensors (no data to compute on; a factory under
`torch.device("meta")` must make a meta tensor).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from framejit import logs

log = logging.getLogger("framejit.backend")


@dataclass
class Stages:
    lowered: str
    scheduled: str
    source: str
    hints: list[str]


def triton_available() -> bool:
    return _triton_problem() is None


def _triton_problem() -> str | None:
    """Why Triton cannot be used here (None: it can)."""
    try:
        import triton  # noqa: F401
        from triton import language  # noqa: F401
    except Exception as e:  # a broken install fails in many ways; never fail the program
        return f"Triton cannot be imported ({type(e).__name__}: {e})"
    return None


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def interpreter_problem() -> str | None:
    """Why Triton's CPU interpreter cannot run all of our kernels here (None: it can)."""
    return _interpreter_import_problem() or interpreter_loop_problem()


def _interpreter_import_problem() -> str | None:
    """Why Triton's CPU interpreter cannot run any kernel here (None: it can)."""
    try:
        import numpy  # noqa: F401
        import triton  # noqa: F401
        import triton.runtime.interpreter  # noqa: F401
    except Exception as e:  # noqa: BLE001 - a broken install fails in many ways
        return f"Triton's interpreter cannot be imported ({type(e).__name__}: {e})"
    return None


def interpreter_loop_problem() -> str | None:
    """Why Triton's CPU interpreter cannot run our kernels that loop here (None: it can).

    Triton < 3.7's interpreter turns a loop bound given at run time into a Python int with
    int() of a one-element array, which NumPy 2.4 made an error: a reduction kernel that loops
    over its reduction (more than `schedule.PERSISTENT_LIMIT` elements, a symbolic count, or
    reduced along a kept dim) fails. Kernels without a loop (pointwise ones, reductions that
    keep a whole row in registers) run, so only a graph with a looping kernel falls back."""
    try:
        import numpy
        import triton
    except Exception:  # noqa: BLE001 - that is `_interpreter_import_problem`'s to report
        return None

    if _version(triton.__version__) < (3, 7) and _version(numpy.__version__) >= (2, 4):
        return (
            f"Triton {triton.__version__}'s CPU interpreter cannot run loops under NumPy "
            f"{numpy.__version__} (it needs numpy<2.4, or Triton >= 3.7)"
        )
    return None


def _loops(scheduled: Any) -> bool:
    """Whether a kernel of the schedule loops (a reduction that is not persistent)."""
    from framejit.backend.triton.schedule import Kernel

    return any(
        isinstance(step, Kernel) and step.kind == "reduction" and not step.persistent
        for step in scheduled.steps
    )


def _run(gm: torch.fx.GraphModule, max_autotune: bool = False) -> Any:
    from framejit.backend.triton.codegen import codegen
    from framejit.backend.triton.lower import lower
    from framejit.backend.triton.schedule import schedule

    lowering = lower(gm)
    scheduled = schedule(lowering)
    source, constants = codegen(scheduled, max_autotune)
    return lowering, scheduled, source, constants


def _laid_out(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` with channels-last convolution inputs where `config.conv_layout` asks for them and
    the pass applies (conv_layout.py); otherwise `gm`."""
    from framejit.backend.triton import conv_layout

    if not conv_layout.wanted(gm):
        return gm
    laid = conv_layout.channels_last(gm)
    if laid is None:
        return gm
    log.debug("triton: convolution inputs made channels-last\n%s", laid.code)
    return laid


def stages(gm: torch.fx.GraphModule, max_autotune: bool = False) -> Stages:
    """Each pipeline step's text for aten graph `gm` (nothing is compiled or loaded)."""
    lowering, scheduled, source, _ = _run(_laid_out(gm), max_autotune)
    return Stages(str(lowering.graph), str(scheduled), source, scheduled.hints)


def wants_max_autotune(options: dict[str, Any] | None = None) -> bool:
    """The wider autotune: `options={"max_autotune": True}`, `config.max_autotune`
    (`FRAMEJIT_MAX_AUTOTUNE=1`) or `config.mode == "max-autotune"`."""
    from framejit import config

    if options and "max_autotune" in options:
        return bool(options["max_autotune"])
    return bool(getattr(config, "max_autotune", False)) or config.mode == "max-autotune"


def graph_devices(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> set[str]:
    """The devices of the graph's tensors: inputs and every node's value (a graph without
    tensor inputs, which makes its tensors from ints, still has a device). A 0-dim CPU input or
    constant beside tensors of another device does not count: the kernels take it by value
    (lower.py's `host_scalar_nodes`)."""
    from framejit.backend.triton.lower import host_scalar_nodes, is_host_scalar

    scalars = host_scalar_nodes(gm)
    placed = [
        (n in scalars, str(n.meta["val"].device))
        for n in gm.graph.nodes
        if isinstance(n.meta.get("val"), torch.Tensor)
    ]
    placed += [
        (is_host_scalar(v), str(v.device)) for v in example_inputs if isinstance(v, torch.Tensor)
    ]
    return {device for scalar, device in placed if not scalar} or {d for _, d in placed}


def compile_graph(
    gm: torch.fx.GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None
) -> Callable[..., Any]:
    """Compile one functional aten graph to a `call(*inputs) -> tuple` running Triton kernels.
    `options`: `{"max_autotune": bool}` (default: from `framejit.config`)."""
    from framejit.backend.triton import cache
    from framejit.backend.triton.lower import NotLowered
    from framejit.backend.triton.symbolic import Specializing, _binding, is_symbolic
    from torch._subclasses.fake_tensor import FakeTensor

    devices = graph_devices(gm, example_inputs)
    if "meta" in devices:
        # Meta tensors have no data to compute on, and a factory under `torch.device("meta")`
        # must make a meta tensor (the kernels would make it on the graph's other device).
        return _fallback(gm, "the graph has meta tensors")
    problem = _triton_problem()
    if problem is not None:
        return _fallback(gm, problem)
    loop_problem = None
    if any(d == "cpu" for d in devices):
        if not cache.interpreter_active():
            return _fallback(gm, "CPU tensors need TRITON_INTERPRET=1 (Triton's CPU interpreter)")
        problem = _interpreter_import_problem()
        if problem is not None:
            return _fallback(gm, problem)
        loop_problem = interpreter_loop_problem()
    if is_symbolic(gm):
        try:  # kernels that take the sizes as arguments: one module for every size
            lowering, scheduled, source, constants = _run(gm, wants_max_autotune(options))
        except Exception as e:  # anything the symbolic path does not handle
            reason = f"{type(e).__name__}: {e}"
        else:
            if loop_problem is not None and _loops(scheduled):
                return _fallback(gm, loop_problem)
            return _load(gm, lowering, scheduled, source, constants)
        hint = f"symbolic sizes: compiled per distinct size at call time ({reason})"
        logs.artifact("perf_hints", f"triton: {hint}")
        specializing = Specializing(
            gm,
            lambda static, inputs: compile_graph(static, inputs, options),
            lambda text: logs.artifact("perf_hints", f"triton: {text}"),
        )
        real = [a for a in example_inputs if isinstance(a, torch.Tensor)]
        if real and not any(isinstance(a, FakeTensor) for a in real):
            specializing.specialize(tuple(example_inputs), _binding(tuple(example_inputs)))
        return specializing
    try:
        lowering, scheduled, source, constants = _run(_laid_out(gm), wants_max_autotune(options))
    except NotLowered as e:
        return _fallback(gm, str(e))
    if loop_problem is not None and _loops(scheduled):
        return _fallback(gm, loop_problem)
    return _load(gm, lowering, scheduled, source, constants)


def _load(
    gm: torch.fx.GraphModule, lowering: Any, scheduled: Any, source: str, constants: list[Any]
) -> Callable[..., Any]:
    from framejit.backend.triton import cache

    log.debug("triton: loop IR\n%s", lowering.graph)
    log.debug("triton: schedule\n%s", scheduled)
    for hint in scheduled.hints:
        logs.artifact("perf_hints", f"triton: {hint}")
    logs.artifact("output_code", lambda: source, language="python")
    module = cache.load(source, constants, cache.device_tag(lowering.graph.device))
    call = _quiet(module.call) if lowering.graph.device == "cpu" else module.call
    first = FirstCall(call, gm)
    if lowering.graph.seed_positions:
        first.host_values = (
            "its kernels take random seeds drawn on the host at each call (a CUDA graph would "
            "replay the recorded call's seeds: the same dropout mask every step)"
        )
    return first


class FirstCall:
    """The generated `call`, whose first run may still fail for framejit's own reasons: Triton
    compiles each kernel at its first launch (and its interpreter runs it then), so an error
    there (a Triton version that rejects what we generated, say) surfaces at the first call.
    Then the aten graph runs instead, for that call and every later one, and a `perf_hints`
    line says why. The graph is functional (inputs are written after it returns), so running
    it again is safe. An error the aten graph raises too is the program's own: it propagates,
    and the kernels are tried again next call. `IndexOutOfBounds` always propagates."""

    __slots__ = ("run", "call", "gm", "host_values")

    def __init__(self, call: Callable[..., Any], gm: torch.fx.GraphModule) -> None:
        self.call = call
        self.gm = gm
        self.run = self._first
        # why the calls cannot be recorded as CUDA graphs (cudagraphs.cudagraphify), or None
        self.host_values: str | None = None

    def __call__(self, *args: Any) -> Any:
        return self.run(*args)

    def _first(self, *args: Any) -> Any:
        from framejit.backend.triton.bounds import IndexOutOfBounds

        try:
            result = self.call(*args)
        except IndexOutOfBounds:
            raise
        except Exception as error:  # noqa: BLE001 - any failure of the kernels: try aten
            result = self.gm.forward(*args)  # raises if the error is the program's own
            first_line = next(iter(str(error).splitlines()), "")  # a bare `assert`: none
            reason = f"{type(error).__name__}: {first_line[:300]}"
            logs.artifact(
                "perf_hints",
                f"triton: the kernels failed at their first run ({reason}); "
                "the aten graph runs instead",
            )
            log.warning("framejit: Triton kernels failed (%s); running the aten graph", reason)
            self.run = self.gm.forward
            return result
        self.run = self.call
        return result


def _quiet(call: Callable[..., Any]) -> Callable[..., Any]:
    """Triton's interpreter computes masked-off lanes with numpy too (a log of the 0.0 a masked
    load returns): silence numpy's floating-point warnings, which eager would not give, and the
    deprecation warning older interpreters trigger in numpy (int() of a one-element array)."""
    import warnings

    import numpy

    def run(*args: Any) -> Any:
        with numpy.errstate(all="ignore"), warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", "Conversion of an array with ndim > 0", DeprecationWarning
            )
            return call(*args)

    return run


def _fallback(gm: torch.fx.GraphModule, reason: str) -> Callable[..., Any]:
    logs.artifact("perf_hints", f"triton: running the aten graph as it is: {reason}")
    log.info("triton: running the aten graph as it is: %s", reason)
    return gm.forward


__all__ = [
    "Stages",
    "compile_graph",
    "interpreter_loop_problem",
    "interpreter_problem",
    "stages",
    "triton_available",
    "wants_max_autotune",
]

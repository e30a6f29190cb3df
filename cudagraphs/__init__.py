"""CUDA graph trees (mode="reduce-overhead"): record once, replay while the guards hold.

Entry point: `cudagraphify(fn, example_inputs, static_indices, name, kind) -> callable`. It knows
nothing of how `fn` was made: a compiled callable taking tensors positionally, the indices of the
inputs whose memory stays put (parameters, buffers), a name for messages, and whether it is an
inference graph, a training forward or a backward. The rest:

- tree.py      `CUDAGraphTreeManager` (one per device) and its state machine: warm-up, record,
               replay; paths, steps (generations), re-record and shape limits, refusals
- outputs.py   tensors handed out over recorded memory, their liveness (weak references to
               storages), and what happens to them when a later step overwrites that memory
- recorder.py  `CUDARecorder` (torch.cuda.CUDAGraph, one pool per device) and the CPU
               `StandInRecorder` that follows CUDA graph semantics, so CI tests the tree logic

Invariants: a tensor returned by a replay never shows data of a later call (it raises
`OverwrittenOutputError` or keeps its own copy, see outputs.py); a refused graph runs exactly
as the backend made it, and the reason is in the `cudagraphs` log; `reset()` frees every pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from framejit.cudagraphs.outputs import OverwrittenOutputError, OverwrittenTensor
from framejit.cudagraphs.recorder import CaptureError, CUDARecorder, StandInRecorder
from framejit.cudagraphs.tree import CUDAGraphTreeManager, Node, TreeFunction

from framejit import logs

__all__ = [
    "CUDAGraphTreeManager",
    "CaptureError",
    "CUDARecorder",
    "Node",
    "OverwrittenOutputError",
    "OverwrittenTensor",
    "StandInRecorder",
    "TreeFunction",
    "begin_invocation",
    "cudagraphify",
    "get_manager",
    "managers",
    "mark_step_begin",
    "reset",
    "stand_in",
]

KINDS = ("inference", "forward", "backward")

_managers: dict[torch.device, CUDAGraphTreeManager] = {}
_stand_in = False


@contextlib.contextmanager
def stand_in() -> Iterator[None]:
    """Within the block, CPU tensors are graphed by the `StandInRecorder` (tests use this);
    outside it they are refused. Leaving the block resets the CPU tree."""
    global _stand_in
    previous, _stand_in = _stand_in, True
    try:
        yield
    finally:
        _stand_in = previous
        manager = _managers.pop(torch.device("cpu"), None)
        if manager is not None:
            manager.close()


def get_manager(device: torch.device) -> CUDAGraphTreeManager:
    manager = _managers.get(device)
    if manager is None:
        recorder = CUDARecorder(device) if device.type == "cuda" else StandInRecorder()
        manager = _managers[device] = CUDAGraphTreeManager(device, recorder)
    return manager


def managers() -> dict[torch.device, CUDAGraphTreeManager]:
    return dict(_managers)


def begin_invocation() -> None:
    """A call of a jitted function from outside compiled code begins (framejit/api.py): its
    first graph starts a new step unless a backward is still pending."""
    for manager in _managers.values():
        manager.begin_invocation()


def mark_step_begin() -> None:
    """Start a new step on every device: outputs of earlier steps may be overwritten from now on
    (reading one that was raises `OverwrittenOutputError`)."""
    for manager in _managers.values():
        manager.new_generation()


def reset() -> None:
    """Drop every tree and free every pool. Outputs still alive are settled first."""
    for manager in _managers.values():
        manager.close()
    _managers.clear()


def _refusal(example_inputs: Sequence[Any], static: set[int]) -> tuple[str | None, Any]:
    """(reason not to graph, device) from the example inputs (real or fake tensors)."""
    tensors = [(i, t) for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor)]
    devices = {t.device for _, t in tensors}
    if not tensors:
        return "it has no tensor inputs to tell its device", None
    if len(devices) > 1:
        names = ", ".join(sorted(str(d) for d in devices))
        return f"its inputs are on several devices ({names})", None
    (device,) = devices
    if device.type == "cpu" and not _stand_in:
        return "its inputs are CPU tensors (CUDA graphs need CUDA tensors)", None
    if device.type not in ("cpu", "cuda"):
        return f"its inputs are on {device}", None
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return None, device


def cudagraphify(
    fn: Callable[..., Any],
    example_inputs: Sequence[Any],
    static_indices: Sequence[int] = (),
    name: str = "graph",
    kind: str = "inference",
) -> Callable[..., Any]:
    """`fn` run through the CUDA graph tree of its inputs' device, or `fn` itself when it
    cannot be graphed (the reason goes to the `cudagraphs` log)."""
    if not callable(fn):
        raise TypeError(f"cudagraphify expects a callable, got {type(fn).__name__}")
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(map(repr, KINDS))}")
    static = set(static_indices)
    bad = [i for i in static if not (isinstance(i, int) and 0 <= i < len(example_inputs))]
    if bad:
        raise ValueError(
            f"static_indices must index the {len(example_inputs)} example inputs, got {bad}"
        )
    reason, device = _refusal(example_inputs, static)
    if reason is None:
        # a callable whose every call takes fresh values from the host (the Triton kernels'
        # random seeds): a replay would repeat the recorded call's values
        reason = getattr(fn, "host_values", None)
    if reason is not None:
        logs.artifact("cudagraphs", f"not graphing {name}: {reason}; it runs as it is")
        return fn
    return TreeFunction(get_manager(device), fn, sorted(static), name, kind)

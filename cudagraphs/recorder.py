"""Recorders: the one place that knows how a graph is captured and replayed.

The tree manager (tree.py) decides *what* to record and when to replay; a recorder does it:

- `CUDARecorder` captures with `torch.cuda.CUDAGraph` into one memory pool per manager
  (`torch.cuda.graph_pool_handle()`), so every recording of a device shares the pool.
- `StandInRecorder` follows the same rules on the CPU so the whole tree logic runs in CI:
  a recording's outputs live at fixed addresses, a replay overwrites them in place, and only
  the recording's own input buffers are read (inputs must be copied into them first).
  It refuses the ops a CUDA capture refuses (synchronizing ones), through a dispatch mode.

Contract (both): `record(fn, args)` returns `(graph, outputs)` with the outputs already holding
this call's results; `replay(graph)` recomputes them in the same memory; `warm_up(fn, args)` runs
`fn` eagerly (outside the pool: its outputs are ordinary tensors, never overwritten). A capture
that fails raises `CaptureError` with the reason, and the manager runs that function without
graphs from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Ops that make the host wait for the device (or read device memory on the host), which a CUDA
# stream capture does not allow. The stand-in refuses them the same way.
_SYNCING_OPS = frozenset(
    {
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::is_nonzero",
        "aten::equal",
        "aten::masked_select",
        "aten::unique_consecutive",
        "aten::_unique2",
    }
)


class CaptureError(Exception):
    """A graph could not be recorded; the message says why."""


def _flat_outputs(result: Any) -> list[Any]:
    if isinstance(result, (tuple, list)):
        return list(result)
    return [result]


class StandInRecorder:
    """CUDA-graph semantics on the CPU: see the module docstring."""

    kind = "stand-in"

    def warm_up(self, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        return fn(*args)

    def record(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, Any]:
        with _RefuseSyncingOps():
            result = fn(*args)
        outputs = _flat_outputs(result)
        graph = (fn, tuple(args), outputs)
        return graph, result

    def replay(self, graph: Any) -> None:
        fn, args, outputs = graph
        fresh = _flat_outputs(fn(*args))
        with torch.no_grad():
            for static, value in zip(outputs, fresh):
                if isinstance(static, torch.Tensor) and static is not value:
                    static.copy_(value)  # the recorded memory is overwritten in place

    def close(self) -> None:
        """Nothing to free: the stand-in holds no pool (its buffers go with their nodes)."""


class _RefuseSyncingOps(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        if name in _SYNCING_OPS:
            raise CaptureError(f"`{name}` synchronizes with the host, which a capture cannot do")
        return func(*args, **(kwargs or {}))


class CUDARecorder:
    """Real capture with `torch.cuda.CUDAGraph`, all recordings in one pool."""

    kind = "cuda"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: list[torch.cuda.CUDAGraph] = []

    def warm_up(self, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        return fn(*args)

    def record(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, Any]:
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device)
        try:
            with torch.cuda.device(self.device), torch.cuda.graph(graph, pool=self.pool):
                result = fn(*args)
        except Exception as exc:  # noqa: BLE001 - any capture failure: say why, run eagerly
            torch.cuda.synchronize(self.device)
            raise CaptureError(f"the CUDA capture failed: {type(exc).__name__}: {exc}") from exc
        self.graphs.append(graph)
        graph.replay()  # a capture runs nothing: produce this call's results
        return graph, result

    def replay(self, graph: Any) -> None:
        graph.replay()

    def close(self) -> None:
        for graph in self.graphs:
            graph.reset()
        self.graphs.clear()

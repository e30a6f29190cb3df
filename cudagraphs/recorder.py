"""Recorders: the one place that knows how a graph is captured and replayed.

The tree manager (tree.py) decides *what* to record and when to replay; a recorder does it:

- `CUDARecorder` captures with `torch.cuda.CUDAGraph` into one memory pool per manager
  (`torch.cuda.graph_pool_handle()`), so every recording of a device shares the pool.
- `StandInRecorder` follows the same rules on the CPU so the whole tree logic runs in CI:
  a recording's outputs live at fixed addresses, a replay overwrites them in place, and only
  the recording's own input buffers are read (inputs must be copied into them first).
  It refuses the ops a CUDA capture refuses (synchronizing ones), through a dispatch mode.
  It keeps a pool of released memory as an allocator would: a recording puts its outputs in
  released memory that fits, and it and its replays scribble (NaN bytes) over all the memory
  that was free when it was recorded, as a CUDA graph's intermediates may.

Contract (both): `record(fn, args)` returns `(graph, outputs)` with the outputs already holding
this call's results; `replay(graph)` recomputes them in the same memory; `warm_up(fn, args)` runs
`fn` eagerly (outside the pool: its outputs are ordinary tensors, never overwritten);
`release(storage)` gives up the caller's hold on output memory of a recording, which later
recordings may then use (a released storage is still written by its own recording's replays).
A capture that fails raises `CaptureError` with the reason, and the manager runs that function
without graphs from then on.
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

    def __init__(self) -> None:
        self.free: list[torch.UntypedStorage] = []  # released memory, as the pool's free list

    def warm_up(self, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        return fn(*args)

    def record(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, Any]:
        scratch = list(self.free)
        _scribble(scratch)
        with _RefuseSyncingOps():
            result = fn(*args)
        inputs = {a.untyped_storage()._cdata for a in args if isinstance(a, torch.Tensor)}
        placed: dict[int, torch.UntypedStorage] = {}
        moved = []
        for out in _flat_outputs(result):
            if not isinstance(out, torch.Tensor) or out.untyped_storage()._cdata in inputs:
                moved.append(out)
                continue
            storage = out.untyped_storage()
            if storage._cdata not in placed:
                placed[storage._cdata] = self._place(storage)
            target = placed[storage._cdata]
            if target is not storage:
                out = torch.empty(0, dtype=out.dtype).set_(
                    target, out.storage_offset(), out.shape, out.stride()
                )
            moved.append(out)
        graph = (fn, tuple(args), moved, scratch)
        if isinstance(result, (tuple, list)):
            return graph, type(result)(moved)
        return graph, moved[0]

    def _place(self, storage: torch.UntypedStorage) -> torch.UntypedStorage:
        """The memory an allocator would give this output: a released block that fits (its
        bytes copied there), else where it is."""
        for k, block in enumerate(self.free):
            if block.nbytes() >= storage.nbytes():
                del self.free[k]
                n = storage.nbytes()
                _bytes(block, n).copy_(_bytes(storage, n))
                return block
        return storage

    def replay(self, graph: Any) -> None:
        fn, args, outputs, scratch = graph
        _scribble(scratch)
        fresh = _flat_outputs(fn(*args))
        with torch.no_grad():
            for static, value in zip(outputs, fresh):
                if isinstance(static, torch.Tensor) and static is not value:
                    static.copy_(value)  # the recorded memory is overwritten in place

    def release(self, storage: torch.UntypedStorage) -> None:
        self.free.append(storage)

    def close(self) -> None:
        """Nothing to free: the stand-in holds no pool (its buffers go with their nodes)."""
        self.free.clear()


def _bytes(storage: torch.UntypedStorage, n: int) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (n,))


def _scribble(storages: Sequence[torch.UntypedStorage]) -> None:
    for storage in storages:
        _bytes(storage, storage.nbytes()).fill_(0xFF)  # NaN in float dtypes, -1 in integers


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

    def release(self, storage: torch.UntypedStorage) -> None:
        """Nothing to do: once the manager drops its storage, the caching allocator returns
        the memory to the pool, where later captures (and only they) may take it."""

    def close(self) -> None:
        for graph in self.graphs:
            graph.reset()
        self.graphs.clear()

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
without graphs from then on. The ops a capture refuses are also watched for during the warm-up
(`SyncWatch`), so a CUDA capture is not even tried for a function that uses one: a failed CUDA
capture leaves torch's capture state behind (see `CUDARecorder.record`), which it cleans up as
far as it can.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
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
                out = torch.empty(0, dtype=out.dtype, device=target.device).set_(
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
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (n,))


def _scribble(storages: Sequence[torch.UntypedStorage]) -> None:
    for storage in storages:
        _bytes(storage, storage.nbytes()).fill_(0xFF)  # NaN in float dtypes, -1 in integers


def syncing_reason(name: str) -> str:
    return f"`{name}` synchronizes with the host, which a capture cannot do"


class _RefuseSyncingOps(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        if name in _SYNCING_OPS:
            raise CaptureError(syncing_reason(name))
        return func(*args, **(kwargs or {}))


class SyncWatch(TorchDispatchMode):
    """Around a warm-up: notes the first op a capture would refuse (`seen`) on a tensor of the
    tree's device, changing nothing (the same op on a CPU tensor of a CUDA tree does not touch
    the capture). The tree then refuses the function before any capture is tried."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device_type = device.type
        self.seen: str | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if self.seen is None and func._schema.name in _SYNCING_OPS:
            tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
            if any(t.device.type == self.device_type for t in tensors):
                self.seen = func._schema.name
        return func(*args, **(kwargs or {}))


# Graphs whose capture failed half-way: torch may still hold pointers to them (the allocator's
# capture filter), so they are never freed.
_abandoned: list[Any] = []


class CUDARecorder:
    """Real capture with `torch.cuda.CUDAGraph`, all recordings in one pool, captured on a
    stream of the recorder's own (a capture cannot run on the default stream).

    Capture, step by step as `torch.cuda.graph` does it (torch 2.11 torch/cuda/graphs.py,
    `graph.__enter__`/`__exit__`: synchronize, enter the capture stream, `capture_begin`, run,
    `capture_end`, leave the stream), but with the failure path handled: `graph.__exit__` calls
    `capture_end` before it leaves the stream, so when `capture_end` raises (a capture that an
    op invalidated: `cudaStreamEndCapture` fails) the capture stream stays current. And torch's
    `CUDAGraph::capture_end` raises before it tells the allocator the capture ended
    (`endAllocateToPool`) and before the CUDA generator leaves capture mode
    (`capture_epilogue`), so every later random op fails with "Offset increment outside graph
    capture encountered unexpectedly" (seen on the GPU). `_clean_up` tries to undo both; on
    torch 2.11 (an H100) it did not yet (test_cuda.py's failed-capture test, an expected
    failure), which is why the tree's warm-up watch keeps such captures from being begun.
    """

    kind = "cuda"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream()
        self.graphs: list[torch.cuda.CUDAGraph] = []

    def warm_up(self, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        return fn(*args)

    def record(self, fn: Callable[..., Any], args: Sequence[Any]) -> tuple[Any, Any]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.device(self.device):
            torch.cuda.synchronize()
            with torch.cuda.stream(self.stream):
                # thread_local, as torch's own trees capture (torch 2.11
                # _inductor/cudagraph_trees.py, `_record`): a backward is captured on
                # autograd's device thread, and other threads' CUDA calls must not break it
                graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
                try:
                    result = fn(*args)
                except BaseException as exc:
                    self._end_failed(graph)
                    if not isinstance(exc, Exception):  # KeyboardInterrupt and the like
                        raise
                    raise CaptureError(
                        f"the CUDA capture failed: {type(exc).__name__}: {exc}"
                    ) from exc
                try:
                    graph.capture_end()
                except Exception as exc:  # noqa: BLE001 - the capture was invalidated
                    self._clean_up(graph)
                    raise CaptureError(
                        f"the CUDA capture failed: {type(exc).__name__}: {exc}"
                    ) from exc
            _clear_cublas_workspaces()
        self.graphs.append(graph)
        graph.replay()  # a capture runs nothing: produce this call's results
        return graph, result

    def _end_failed(self, graph: torch.cuda.CUDAGraph) -> None:
        """`fn` raised during the capture: end it. If the capture is still valid this ends it
        cleanly (the graph is dropped); if not, `capture_end` raises and `_clean_up` runs."""
        try:
            with warnings.catch_warnings():  # a capture that stopped early may be empty
                warnings.filterwarnings("ignore", "The CUDA Graph is empty")
                graph.capture_end()
        except Exception:  # noqa: BLE001 - invalidated: clean up what torch left
            self._clean_up(graph)
        else:
            self.graphs.append(graph)  # a whole capture of part of `fn`: freed by close()

    def _clean_up(self, graph: torch.cuda.CUDAGraph) -> None:
        """After a `capture_end` that raised: the stream left capture mode
        (`cudaStreamEndCapture` ends a capture even when it fails) but torch did not finish.
        1. The allocator still routes allocations to the pool through the failed graph's
           filter: `_cuda_endAllocateToPool` (torch 2.11 torch/cuda/memory.py, as `use_mem_pool`
           uses it) removes it; it raises if torch had already done so.
        2. The CUDA generator is still in capture mode: an empty capture with its own pool
           runs its prologue and epilogue, which leaves it out of capture mode.
        The failed graph is kept, never freed: torch may still point at it."""
        _abandoned.append(graph)
        torch.cuda.synchronize()
        with contextlib.suppress(Exception):  # it raises when torch had ended it already
            torch._C._cuda_endAllocateToPool(self.device.index, self.pool)
        repair = torch.cuda.CUDAGraph()
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "The CUDA Graph is empty")
                repair.capture_begin(capture_error_mode="thread_local")
                repair.capture_end()
        except Exception:  # noqa: BLE001 - nothing more to do; the reason is logged anyway
            _abandoned.append(repair)

    def replay(self, graph: Any) -> None:
        graph.replay()

    def release(self, storage: torch.UntypedStorage) -> None:
        """Nothing to do: once the manager drops its storage, the caching allocator returns
        the memory to the pool, where later captures (and only they) may take it."""

    def close(self) -> None:
        for graph in self.graphs:
            graph.reset()
        self.graphs.clear()


def _clear_cublas_workspaces() -> None:
    """Let cuBLAS's cached workspaces go after a capture, as torch's own trees do around each
    recording (torch 2.11 _inductor/cudagraph_trees.py, `clear_cublass_cache`). A capture on a
    new stream makes cuBLAS allocate a workspace (32 MiB on an H100) for that stream, in the
    pool; held, it stays allocated for good, beside the one eager matmuls use. Freed, it is
    memory the capture used and let go, like its intermediates: later recordings may take it
    and this graph's replays still write to it, which the tree's memory rules allow for
    (tree.py: whatever was free when a node was recorded may be written by its replays). The
    workspaces of other streams are allocated again at their next matmul."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()

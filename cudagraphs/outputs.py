"""Outputs handed to the user, and what happens to them when their memory is written again.

A recorded graph writes its outputs to the same memory on every replay, and the user gets
tensors over that memory (no copy). Each call hands out fresh tensors over a fresh *alias*
storage (non-owning, same address; the node keeps the owning tensors), so one call's outputs,
and every view of them, share one storage that framejit can watch with a weak reference.

Invariant: a tensor framejit returned never shows data of a later call. Before a graph of the
tree runs in a newer generation (tree.py), every output of an older generation that is still
alive is *settled*:

- poisoned, when only the Python tensor objects framejit returned hold its storage (no view,
  no autograd node, nothing in C++): their class becomes `OverwrittenTensor`, and any torch
  operation on them raises `OverwrittenOutputError` naming the function that made them and how
  to keep a value;
- preserved, otherwise (a view, or a tensor autograd saved, can be read without passing through
  Python): the storage first gets a private copy of its bytes (`_swap`: torch's
  `_swap_data_ptr_`, or framejit's C++ extension on torch versions without it), so every
  holder keeps the values it had. This costs a copy and is logged (`cudagraphs`). Where
  neither exists (torch < 2.13 without the extension), the output stays unsettled and the tree
  runs calls without graphs until it dies (tree.py);
- preserved too when the output is an argument of the call about to run (`y = f(x)`, then
  `mark_step_begin()`, then `g(y)`): the call still reads the right values.

Warm-up outputs are ordinary tensors outside the pool: they are tracked for liveness only.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from framejit import logs


def _find_swap() -> Any:
    """How to give a storage's holders a private copy: `swap(storage, copy)` exchanges the two
    storages' memory. torch 2.13 has `UntypedStorage._swap_data_ptr_`; older versions use
    framejit's C++ extension. None when neither is there."""
    if hasattr(torch.UntypedStorage, "_swap_data_ptr_"):
        return lambda storage, copy: storage._swap_data_ptr_(copy)
    from framejit.guards import guard

    extension = guard._tensor_check
    if extension is None or not hasattr(extension, "swap_storage_data"):
        return None

    def swap(storage: torch.UntypedStorage, copy: torch.UntypedStorage) -> None:
        a = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
        b = torch.empty(0, dtype=torch.uint8, device=copy.device).set_(copy)
        extension.swap_storage_data(a, b)

    return swap


_swap = _find_swap()
CAN_PRESERVE = _swap is not None


class OverwrittenOutputError(RuntimeError):
    """An output of a CUDA-graph replay was read after a later replay overwrote its memory."""


class OverwrittenTensor(torch.Tensor):
    """What a returned output becomes once its memory is overwritten: every op raises."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        for leaf in tree_leaves((args, kwargs or {})):
            if isinstance(leaf, OverwrittenTensor):
                raise OverwrittenOutputError(leaf.__dict__["_framejit_overwritten"])
        raise OverwrittenOutputError("framejit: an overwritten CUDA-graph output was used")


def overwritten_message(name: str, index: int, made: int, now: int) -> str:
    return (
        f"framejit: output {index} of {name} (returned in CUDA-graph step {made}) was "
        f"overwritten by a later replay of the CUDA graphs (step {now}), so it can no longer be "
        "read. To keep a value across calls, clone it before calling again (`y = y.clone()`), "
        "or call `framejit.mark_step_begin()` later, only once you are done with the previous "
        'outputs. (mode="reduce-overhead" returns outputs in memory that each replay reuses.)'
    )


class _StorageRef:
    """A weak reference to a storage (to its C++ StorageImpl, so views keep it alive)."""

    __slots__ = ("cdata",)

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.cdata = storage._weak_ref()

    def alive(self) -> bool:
        return not torch.UntypedStorage._expired(self.cdata)

    def get(self) -> torch.UntypedStorage | None:
        return torch.UntypedStorage._new_with_weak_ptr(self.cdata)

    def __del__(self) -> None:
        torch.UntypedStorage._free_weak_ref(self.cdata)


class OutputSet:
    """The tensors one call handed out: weak references to their storages and to themselves."""

    __slots__ = ("name", "generation", "overwritable", "storages", "tensors", "blocks")

    def __init__(
        self,
        name: str,
        generation: int,
        outputs: Sequence[Any],
        tracked: Sequence[int],
        overwritable: bool,
        blocks: Sequence[Any] = (),
        storages: Sequence[torch.UntypedStorage] | None = None,
    ) -> None:
        """`storages`: the storage of each tracked output, where the caller has them (saves
        asking each output for its storage)."""
        self.name = name
        self.generation = generation
        self.overwritable = overwritable
        by_storage: dict[int, _StorageRef] = {}
        self.tensors: list[tuple[int, int, Any]] = []  # (output index, storage cdata, weakref)
        # the tree's `Block` under each storage (recorded memory; empty for warm-up outputs)
        self.blocks: dict[int, Any] = {}
        for n, i in enumerate(tracked):
            out = outputs[i]
            storage = storages[n] if storages is not None else out.untyped_storage()
            cdata = storage._cdata
            if cdata not in by_storage:
                by_storage[cdata] = _StorageRef(storage)
                if blocks:
                    self.blocks[cdata] = blocks[n]
            self.tensors.append((i, cdata, weakref.ref(out)))
        self.storages = by_storage

    def alive(self) -> bool:
        return any(ref.alive() for ref in self.storages.values())

    def holds(self, cdata: int) -> bool:
        """Whether storage `cdata` of this set is still alive."""
        ref = self.storages.get(cdata)
        return ref is not None and ref.alive()

    def live_blocks(self) -> list[tuple[int, Any]]:
        """(storage cdata, Block) of each storage over recorded memory that is still alive."""
        return [
            (cdata, block)
            for cdata, block in self.blocks.items()
            if cdata in self.storages and self.storages[cdata].alive()
        ]

    def preserve(self, cdata: int, why: str) -> None:
        """Give the live storage `cdata` its own copy of its bytes: its holders keep their
        values while a graph writes to the memory it was in."""
        ref = self.storages.pop(cdata, None)
        self.blocks.pop(cdata, None)
        storage = ref.get() if ref is not None else None
        if storage is None:
            return
        _swap(storage, storage.clone())
        logs.artifact(
            "cudagraphs",
            f"copied an output of {self.name} (step {self.generation}) out of the graph memory: "
            f"{why} ({storage.nbytes()} bytes)",
        )

    def settle(self, now: int, keep: set[int]) -> bool:
        """Make sure no live output of this set can show data of a later call; see the module
        docstring. `keep`: storages (cdata) the call about to run reads. False when an output
        that must keep its values could not get its own copy (no swap on this torch): it stays
        in the set, and its memory must not be written yet."""
        left: dict[int, _StorageRef] = {}
        for cdata, ref in self.storages.items():
            storage = ref.get() if ref.alive() else None
            if storage is None:
                continue
            holders = [(i, t) for i, c, w in self.tensors if c == cdata and (t := w()) is not None]
            # strong references: `storage` here, and one per tensor over it
            only_ours = torch._C._storage_Use_Count(storage._cdata) == 1 + len(holders) and all(
                t._use_count() == 1 for _, t in holders
            )
            if only_ours and cdata not in keep:
                for i, t in holders:
                    t.__dict__["_framejit_overwritten"] = overwritten_message(
                        self.name, i, self.generation, now
                    )
                    t.__class__ = OverwrittenTensor
                continue
            if _swap is None:
                left[cdata] = ref
                continue
            _swap(storage, storage.clone())  # the holders keep their own copy
            why = "an argument of this call" if cdata in keep else "held by a view or autograd"
            logs.artifact(
                "cudagraphs",
                f"copied an output of {self.name} (step {self.generation}) out of the graph "
                f"memory before it is overwritten: it is {why} ({storage.nbytes()} bytes)",
            )
        self.storages = left
        if not left:
            self.tensors = []
            self.blocks = {}
        return not left

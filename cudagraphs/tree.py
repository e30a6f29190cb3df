"""The graph-tree manager: which recording runs a call, and when a new step begins.

One `CUDAGraphTreeManager` per device. Every compiled callable handed to it becomes a
`TreeFunction`; each call of one goes through `CUDAGraphTreeManager.run`, a small state machine:

    refused ──────────────────────────────► run the callable as it is
    not warmed up, or the path is warming ─► WARM-UP: run eagerly, check it mutates no input
    a recorded child of the tip matches ───► REPLAY: copy inputs into its buffers, replay
    otherwise ─────────────────────────────► RECORD a new node (bounded), then it replays

Tree and paths: a node's children are the recordings that ran right after it in a step
(forward pieces around graph breaks, then backward), so the calls of one step walk a path from
a root. `tip` is the last node of the current path. All recordings share the recorder's pool.

Invariants:

- Generations. A step (generation) begins at `mark_step_begin()`, and at the first graph of a
  new invocation (a call of a jitted function from outside compiled code; `jit` reports it
  through `begin_invocation`) unless a training forward of the step still waits for its
  backward. Callables used without `jit` start a step when a function that began a path is
  called again. Within a step the path
  only grows, so no node runs twice in one step, and later recordings may reuse memory that
  earlier nodes of the path no longer need.
- Before anything runs in a newer step, every live output of older steps is settled
  (outputs.py): poisoned (reading it raises `OverwrittenOutputError`) or given its own copy.
  A returned tensor never shows another call's data.
- A node replays only if its static inputs (parameters, buffers) are where they were when it was
  recorded, inputs it took from earlier nodes of the path are the same memory, and its other
  inputs have the recorded shapes and dtypes (they are copied into its input buffers).
  Otherwise a new node is recorded: `config.cudagraph_max_shapes` distinct input shapes and
  `config.cudagraph_rerecord_limit` more recordings per function, then it runs without graphs.
- Once a warm-up runs in a step, the rest of that step warms up too: an eager run may take
  memory that an existing recording also writes.
- Memory reuse. A node owns the memory of its outputs (`Block`s) until a later recording on
  its path finds them dead (no tensor handed out over them is alive, and the new recording
  does not read them): then the node lets go of them (`release`) and the pool's allocator may
  give them to that recording and to any recorded later. A node still replays into its
  released memory, so whatever was free when a node was recorded may be written by its
  replays. Hence, before a replay, each live output of the current step in memory released
  before that node was recorded gets its own copy (`_protect`, logged; not needed in a steady
  loop, where the same outputs are dead every step), and before a capture, every live output in
  released memory does. Older steps' outputs are settled anyway (above). Without a way to copy a
  live output (outputs.CAN_PRESERVE: torch < 2.13 without framejit's C++ extension) nothing is
  released.
- Refusals (CPU tensors without the stand-in, several devices, a mutated non-static input, an
  output that aliases an input, autograd recording through the callable, an op a capture
  refuses (seen during the warm-up, so no capture is tried), a failed capture, the limits
  above) are logged once to `cudagraphs` with the reason; that function then runs
  as it is. The replay path formats no log message and allocates only the output tensors.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from framejit.cudagraphs.outputs import CAN_PRESERVE, OutputSet
from framejit.cudagraphs.recorder import CaptureError, SyncWatch, syncing_reason

from framejit import logs
from framejit.config import config

_data_ptr = torch.Tensor.data_ptr

_ids = itertools.count()
_kept_alive: list[Any] = []  # see CUDAGraphTreeManager.close


class TreeFunction:
    """A compiled callable whose calls go through its device's tree manager."""

    def __init__(
        self,
        manager: CUDAGraphTreeManager,
        fn: Callable[..., Any],
        static_indices: Sequence[int],
        name: str,
        kind: str,
    ) -> None:
        self.manager = manager
        self.fn = fn
        self.static_indices = tuple(static_indices)
        self.name = name
        self.kind = kind  # "inference", "forward" (a backward will follow) or "backward"
        self.id = next(_ids)
        self.refused: str | None = None
        self.warmed_up = False
        self.is_root = False  # it has started a path
        self.shapes: set[tuple] = set()
        self.rerecords = 0

    def __call__(self, *args: Any) -> Any:
        if self.refused is not None or self.manager.closed:
            self.manager.eager_runs += 1
            return self.fn(*args)
        return self.manager.run(self, args)

    def refuse(self, reason: str) -> None:
        self.refused = reason
        self.manager.refusals.append(f"{self.name}: {reason}")
        logs.artifact("cudagraphs", f"not graphing {self.name}: {reason}; it runs as it is")

    def __repr__(self) -> str:
        return f"<framejit cudagraph {self.name}>"


class Block:
    """The memory of one output storage of a recording: owned by its node until released."""

    __slots__ = ("storage", "ptr", "nbytes", "device", "released")

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.storage: torch.UntypedStorage | None = storage  # None once released
        self.ptr = storage.data_ptr()
        self.nbytes = storage.nbytes()
        self.device = storage.device
        self.released: int | None = None  # the recording serial at which it was released


class Node:
    """One recording: its graph, input buffers, static addresses and output layout."""

    def __init__(self, function: TreeFunction, parent: Node | None, generation: int) -> None:
        self.function = function
        self.parent = parent
        self.children: dict[int, list[Node]] = {}
        self.depth = 0 if parent is None else parent.depth + 1
        self.generation = generation  # of its last run
        self.serial = 0  # recordings of the manager before this one
        self.graph: Any = None
        self.static_ptrs: list[tuple[int, int]] = []  # parameters/buffers: (index, address)
        self._static_check: tuple[Callable[..., Any], list[int]] | None = None
        self.path_ptrs: list[tuple[int, int]] = []  # outputs of earlier nodes, used in place
        self.copies: list[tuple[int, torch.Tensor]] = []  # (index, input buffer)
        self.constants: list[tuple[int, Any]] = []  # non-tensor arguments, baked in
        self.outputs: list[Any] = []  # the non-tensor outputs (None in a tensor's place)
        self.blocks: list[Block] = []  # the memory of its outputs
        # per output: None (a constant), j (input j itself), or (block, dtype, offset, sizes,
        # strides) of a tensor in the recorded memory
        self.layout: list[Any] = []
        # made by hand_out's first call from `layout` (see _prepare)
        self.tensor_places: tuple[Any, ...] | None = None
        self.block_specs: tuple[Any, ...] = ()
        self.all_tensors = False
        self.container: type = tuple
        self.in_memory: list[int] = []  # outputs in the recorded memory
        self.out_blocks: list[Block] = []  # the Block under each of those outputs

    def path(self) -> list[Node]:
        node: Node | None = self
        out = []
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def mismatch(self, args: Sequence[Any]) -> str | None:
        """Why this recording cannot replay `args` (None: it can)."""
        if self.static_ptrs:
            if self._static_check is None:  # recorded by now: made once
                idx = [i for i, _ in self.static_ptrs]
                pick = operator.itemgetter(*idx) if len(idx) > 1 else lambda a: (a[idx[0]],)
                self._static_check = (pick, [ptr for _, ptr in self.static_ptrs])
            pick, expected = self._static_check
            if list(map(_data_ptr, pick(args))) != expected:  # no Python frame per tensor
                for i, ptr in self.static_ptrs:
                    if args[i].data_ptr() != ptr:
                        return f"static input {i} (a parameter or buffer) moved"
        for i, ptr in self.path_ptrs:
            if not isinstance(args[i], torch.Tensor) or args[i].data_ptr() != ptr:
                return f"input {i} is no longer the output of an earlier graph of the step"
        for i, buf in self.copies:
            a = args[i]
            if not isinstance(a, torch.Tensor) or a.shape != buf.shape or a.dtype != buf.dtype:
                return f"input {i} has another shape or dtype"
        for i, value in self.constants:
            if args[i] is not value and args[i] != value:
                return f"argument {i} changed"
        return None

    def hand_out(self, args: Sequence[Any]) -> tuple[Any, Sequence[torch.UntypedStorage]]:
        """Fresh tensors over the recorded memory: one alias storage per storage, per call.
        Returns the call's result and, per output in `in_memory`, its alias storage.

        With framejit's C++ extension one call makes them all (`alias_outputs`); otherwise
        each is `prototype.new().set_(...)` over a `_construct_storage_from_data_pointer`
        alias (an empty tensor of the output's dtype and device: cheaper than
        `torch.empty(0, dtype=..., device=...)`). Either way a tensor made under inference
        mode is an inference tensor, as eager's would be."""
        if self.tensor_places is None:
            self._prepare()
        if _alias_outputs is not None:
            tensors, storages = _alias_outputs(self.block_specs, self.tensor_places)
        else:
            aliases = [
                torch._C._construct_storage_from_data_pointer(b.ptr, b.device, b.nbytes)
                for b in self.blocks
            ]
            tensors = [p.new().set_(aliases[k], o, z, s) for k, p, o, z, s in self.tensor_places]
            storages = [aliases[place[0]] for place in self.tensor_places]
        if self.all_tensors:
            out: Any = tensors
        else:
            made = iter(tensors)
            out = [
                value if place is None else args[place] if place.__class__ is int else next(made)
                for value, place in zip(self.outputs, self.layout)
            ]
        if self.container is tuple:
            return tuple(out), storages
        if self.container is list:
            return list(out), storages
        return out[0], storages

    def _prepare(self) -> None:
        """What hand_out needs, from `layout`: per output in memory (block, prototype, offset,
        sizes, strides), and per block (address, nbytes, prototype)."""
        self.tensor_places = tuple(
            (p[0], _prototype(p[1], self.blocks[p[0]].device), p[2], tuple(p[3]), tuple(p[4]))
            for p in self.layout
            if p is not None and p.__class__ is not int
        )
        self.block_specs = tuple(
            (b.ptr, b.nbytes, _prototype(torch.uint8, b.device)) for b in self.blocks
        )
        self.all_tensors = len(self.tensor_places) == len(self.layout)


def _unwritten(a: torch.Tensor, before: int | torch.Tensor) -> bool:
    """Whether `a` was not written since `before` (its version then, or a copy of it: an
    inference tensor; equal values count as unwritten, NaNs included)."""
    if isinstance(before, int):
        return a._version == before
    return bool(((a == before) | (a.isnan() & before.isnan())).all())


_PROTOTYPES: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _find_alias_outputs() -> Any:
    from framejit.guards import guard

    return getattr(guard._tensor_check, "alias_outputs", None)


_alias_outputs = _find_alias_outputs()


def _prototype(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An empty tensor of `dtype` on `device`, whose `.new()` makes the outputs' tensors."""
    key = (dtype, device)
    if key not in _PROTOTYPES:
        _PROTOTYPES[key] = torch.empty(0, dtype=dtype, device=device)
    return _PROTOTYPES[key]


class CUDAGraphTreeManager:
    """The graph tree of one device; see the module docstring."""

    def __init__(self, device: torch.device, recorder: Any) -> None:
        self.device = device
        self.recorder = recorder
        self.roots: dict[int, list[Node]] = {}
        self.tip: Node | None = None
        self.in_path = False  # something ran in the current step
        self.warming = False  # a warm-up ran in the current step
        self.generation = 1
        self.pending: list[OutputSet] = []  # forwards of this step whose backward has not run
        self.live: list[OutputSet] = []  # outputs handed out, oldest first
        self.closed = False
        self.nodes = 0
        self.all_nodes: list[Node] = []
        self.serial = 0  # recordings begun
        self.released_bytes = 0  # output memory of earlier recordings let go for reuse
        self.released_any = False
        self.said_unsettled = False
        self.new_invocation = False  # a call from outside compiled code began (jit tells us)
        self.invocations_seen = False
        # what ran, for tools/bench and tests: `nodes` recordings, and
        self.replays = 0
        self.warm_ups = 0
        self.eager_runs = 0  # calls run without graphs (refused, or an unsettled output)
        self.refusals: list[str] = []  # "name: reason" of each refused function

    # --- steps ----------------------------------------------------------------------------------
    def new_generation(self) -> None:
        self.generation += 1
        self.tip = None
        self.in_path = False
        self.warming = False
        self.pending.clear()

    def _backward_pending(self) -> bool:
        self.pending = [p for p in self.pending if p.alive()]
        return bool(self.pending)

    def _settle(self, args: Sequence[Any], before: int) -> bool:
        """Settle every live output of steps before `before` (outputs.py). False if one could
        not be (it stays live, unsettled: nothing may write to the pool yet)."""
        keep: set[int] | None = None
        live = []
        settled = True
        for outputs in self.live:
            if outputs.generation >= before:
                live.append(outputs)
            elif outputs.overwritable and outputs.alive():
                if keep is None:
                    keep = {a.untyped_storage()._cdata for a in args if isinstance(a, torch.Tensor)}
                if not outputs.settle(self.generation, keep):
                    live.append(outputs)
                    settled = False
        self.live = live
        return settled

    # --- the state machine ----------------------------------------------------------------------
    def begin_invocation(self) -> None:
        self.new_invocation = True
        self.invocations_seen = True

    def run(self, function: TreeFunction, args: Sequence[Any]) -> Any:
        # A new step: at a new invocation of jitted code, or (callables used without jit) when
        # a function that began a path is called again; never while a backward is pending.
        starts = self.new_invocation if self.invocations_seen else function.is_root
        if self.in_path and starts and not self._backward_pending():
            self.new_generation()
        self.new_invocation = False
        if not self.in_path:
            function.is_root = True
        stale = self.live and self.live[0].generation < self.generation
        if stale and not self._settle(args, self.generation):
            if not self.said_unsettled:
                self.said_unsettled = True
                logs.artifact(
                    "cudagraphs",
                    f"an output of an earlier step is still held by a view or autograd and "
                    f"this torch ({torch.__version__}) cannot give it its own copy: calls run "
                    "without graphs until it dies",
                )
            self.eager_runs += 1
            return function.fn(*args)
        self.in_path = True
        if not function.warmed_up or self.warming:
            return self._warm_up(function, args)
        parent = self.tip
        children = self.roots if parent is None else parent.children
        reasons = []
        for node in children.get(function.id, ()):
            why = node.mismatch(args)
            if why is None:
                return self._replay(node, args)
            reasons.append(why)
        return self._record(function, parent, args, reasons)

    def _hand_out(
        self,
        function: TreeFunction,
        result: Any,
        overwritable: bool,
        tracked: Sequence[int],
        node: Node | None = None,
        storages: Sequence[torch.UntypedStorage] | None = None,
    ) -> None:
        """Remember outputs `tracked` of a call (those in memory a later call may reuse);
        `storages`: their storages, where the caller has them at hand."""
        blocks = node.out_blocks if node is not None else ()
        outputs = OutputSet(
            function.name, self.generation, _flat(result), tracked, overwritable, blocks, storages
        )
        self.live.append(outputs)
        if function.kind == "forward":
            self.pending.append(outputs)
        elif function.kind == "backward" and self.pending:
            self.pending.pop()

    def _warm_up(self, function: TreeFunction, args: Sequence[Any]) -> Any:
        self.warming = True
        self.warm_ups += 1
        # inputs a replay would copy into a buffer of its own: the function must not write
        # them. Their version counters say whether it does; an inference tensor has none, so a
        # copy of it is compared instead (once per function, at its warm-up).
        watched = [
            (i, a, a.clone() if a.is_inference() else a._version)
            for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and i not in function.static_indices
        ]
        # an op a capture refuses is found here, so no capture is tried: a failed CUDA capture
        # is costly to undo (recorder.py, CUDARecorder)
        with SyncWatch(self.device) as watch:
            result = self.recorder.warm_up(function.fn, args)
        function.warmed_up = True
        if watch.seen is not None:
            function.refuse(syncing_reason(watch.seen))
            return result
        for i, a, before in watched:
            if not _unwritten(a, before):
                function.refuse(f"it writes to input {i}, which is not a parameter or buffer")
                return result
        for k, out in enumerate(_flat(result)):
            # an input handed back as it is (a forward keeping its input for the backward) is
            # not recorded through: a replay hands back the call's own input
            passed = any(out is a for a in args)
            if isinstance(out, torch.Tensor) and out.grad_fn is not None and not passed:
                function.refuse(
                    f"output {k} has a grad_fn: autograd records through it (training graphs "
                    "are graphed through the AOT stage: backends aot_eager, triton, auto)"
                )
                return result
        tracked = [
            k
            for k, out in enumerate(_flat(result))
            if isinstance(out, torch.Tensor) and not any(out is a for a in args)
        ]
        self._hand_out(function, result, False, tracked)
        return result

    def _protect(self, serial: int, why: str) -> None:
        """Copy out every live output of this step whose memory was released at or before
        recording `serial` (a recording from then on may write to it)."""
        for outputs in self.live:
            if outputs.generation != self.generation or not outputs.blocks:
                continue
            # released blocks first: few are, and a liveness check costs more than the test
            for cdata, block in list(outputs.blocks.items()):
                if block.released is not None and block.released <= serial and outputs.holds(cdata):
                    outputs.preserve(cdata, why)

    def _release_dead(self, args: Sequence[Any], serial: int) -> None:
        """Let go of the output memory of every recording whose outputs are all dead: no
        tensor handed out over it is alive and the recording about to be made does not read
        it. The pool's allocator may then give it to this recording."""
        if not CAN_PRESERVE:  # a live output in released memory could not be kept safe
            return
        live = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        for outputs in self.live:
            live.update(block.ptr for _, block in outputs.live_blocks())
        freed = 0
        for node in self.all_nodes:
            for block in node.blocks:
                if block.storage is not None and block.ptr not in live:
                    self.recorder.release(block.storage)
                    block.storage = None
                    block.released = serial
                    freed += block.nbytes
        if freed:
            self.released_any = True
            self.released_bytes += freed
            logs.artifact(
                "cudagraphs",
                f"{freed} bytes of dead outputs of earlier recordings may be reused from now on",
            )

    def _replay(self, node: Node, args: Sequence[Any]) -> Any:
        if self.released_any:
            self._protect(node.serial, f"a replay of {node.function.name} writes to its memory")
        for i, buf in node.copies:
            buf.copy_(args[i])
        self.recorder.replay(node.graph)
        self.replays += 1
        node.generation = self.generation
        self.tip = node
        result, storages = node.hand_out(args)
        self._hand_out(node.function, result, True, node.in_memory, node, storages)
        return result

    def _record(
        self, function: TreeFunction, parent: Node | None, args: Sequence[Any], reasons: list[str]
    ) -> Any:
        key = tuple(
            (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else _constant_key(a)
            for a in args
        )
        if key not in function.shapes:
            if len(function.shapes) >= config.cudagraph_max_shapes:
                function.refuse(
                    f"more than config.cudagraph_max_shapes={config.cudagraph_max_shapes} "
                    "distinct input shapes"
                )
                self.eager_runs += 1
                return function.fn(*args)
            function.shapes.add(key)
        else:
            function.rerecords += 1
            if function.rerecords > config.cudagraph_rerecord_limit:
                why = "; ".join(dict.fromkeys(reasons)) or "it ran at a new place in the tree"
                function.refuse(
                    f"recorded again more than config.cudagraph_rerecord_limit="
                    f"{config.cudagraph_rerecord_limit} times (last: {why}). Inference with "
                    "grad mode on keeps a backward pending: use torch.no_grad() or call "
                    "framejit.mark_step_begin() before each step"
                )
                self.eager_runs += 1
                return function.fn(*args)
            if logs.enabled("cudagraphs"):
                why = "; ".join(dict.fromkeys(reasons)) or "it ran at a new place in the tree"
                logs.artifact("cudagraphs", f"recording {function.name} again: {why}")
        try:
            node, (result, storages) = self._capture(function, parent, args)
        except CaptureError as exc:
            function.refuse(str(exc))
            self.eager_runs += 1
            return function.fn(*args)
        (parent.children if parent is not None else self.roots).setdefault(function.id, []).append(
            node
        )
        self.tip = node
        self.nodes += 1
        self.all_nodes.append(node)
        if logs.enabled("cudagraphs"):
            logs.artifact(
                "cudagraphs",
                f"recorded {function.name} at depth {node.depth} of the "
                f"{self.device} tree, step {self.generation}: {len(node.static_ptrs)} static "
                f"inputs, {len(node.path_ptrs)} taken in place, {len(node.copies)} copied",
            )
        self._hand_out(function, result, True, node.in_memory, node, storages)
        return result

    def _capture(
        self, function: TreeFunction, parent: Node | None, args: Sequence[Any]
    ) -> tuple[Node, tuple[Any, list[torch.UntypedStorage]]]:
        node = Node(function, parent, self.generation)
        self.serial += 1
        node.serial = self.serial
        if self.released_any:
            self._protect(node.serial, f"recording {function.name} may write to its memory")
        self._release_dead(args, node.serial)
        # earlier nodes' output memory, by address: the owning storages (the tensors handed out
        # are aliases that may later be poisoned or moved; the recording must not hold them).
        # Memory read here is live, so it was not released above.
        path_memory: dict[int, torch.UntypedStorage] = {}
        for earlier in parent.path() if parent is not None else []:
            for block in earlier.blocks:
                if block.storage is not None:
                    path_memory[block.ptr] = block.storage
        graph_args: list[Any] = []
        for i, a in enumerate(args):
            if not isinstance(a, torch.Tensor):
                node.constants.append((i, a))
                graph_args.append(a)
            elif i in function.static_indices:
                node.static_ptrs.append((i, a.data_ptr()))
                graph_args.append(a)
            elif a.untyped_storage().data_ptr() in path_memory:
                node.path_ptrs.append((i, a.data_ptr()))
                owner = path_memory[a.untyped_storage().data_ptr()]
                same = torch.empty(0, dtype=a.dtype, device=a.device)
                graph_args.append(same.set_(owner, a.storage_offset(), a.shape, a.stride()))
            else:
                buf = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                buf.copy_(a)
                node.copies.append((i, buf))
                graph_args.append(buf)
        input_memory = {
            a.untyped_storage().data_ptr(): i
            for i, a in enumerate(graph_args)
            if isinstance(a, torch.Tensor)
        }
        node.graph, result = self.recorder.record(function.fn, graph_args)
        outputs = _flat(result)
        storages: dict[int, int] = {}
        for k, out in enumerate(outputs):
            if not isinstance(out, torch.Tensor):
                node.layout.append(None)
                continue
            storage = out.untyped_storage()
            if storage.data_ptr() in input_memory:
                j = input_memory[storage.data_ptr()]
                same = graph_args[j]
                if (out.data_ptr(), out.shape, out.stride()) != (
                    same.data_ptr(),
                    same.shape,
                    same.stride(),
                ):
                    raise CaptureError(f"output {k} is a view of input {j}")
                node.layout.append(j)  # the input itself (a saved parameter, say)
                continue
            if storage.data_ptr() not in storages:
                storages[storage.data_ptr()] = len(node.blocks)
                node.blocks.append(Block(storage))
            node.layout.append(
                (
                    storages[storage.data_ptr()],
                    out.dtype,
                    out.storage_offset(),
                    out.shape,
                    out.stride(),
                )
            )
        node.outputs = [None if isinstance(o, torch.Tensor) else o for o in outputs]
        node.in_memory = [k for k, place in enumerate(node.layout) if isinstance(place, tuple)]
        node.out_blocks = [node.blocks[node.layout[k][0]] for k in node.in_memory]
        node.container = type(result) if isinstance(result, (tuple, list)) else object
        return node, node.hand_out(args)

    def close(self) -> None:
        """Settle every live output (nothing may point into the pool), drop every node."""
        self.generation += 1
        if not self._settle((), self.generation):  # outputs that could not get their own copy
            _kept_alive.extend(  # keep their memory until the process ends, not free it
                b.storage for node in self.all_nodes for b in node.blocks if b.storage is not None
            )
        self.roots.clear()
        self.all_nodes.clear()
        self.tip = None
        self.pending.clear()
        self.recorder.close()
        self.closed = True


def _flat(result: Any) -> list[Any]:
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _constant_key(value: Any) -> Any:
    """Numbers (sizes of dynamic shapes) count as part of the shape; other objects by type."""
    return value if isinstance(value, (bool, int, float)) else type(value)

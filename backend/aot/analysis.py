"""What a captured graph does to its inputs and how its outputs alias: read on FakeTensors.

Before the AOT stage can turn a Dynamo-level graph into a functional aten graph it must know
what the functional graph cannot say by itself. `analyze` runs the captured graph once on
FakeTensors (no real compute, no real memory) and returns a `GraphInfo`:

- which inputs the graph mutates in place (their version counter moved): after the functional
  graph runs, the runtime copies each new value back into the real input (the epilogue);
- which inputs are the same tensor passed twice (deduplicated: the traced graph sees each
  tensor once);
- for every output, how to produce it at run time (`OutputSpec`): a value computed by the
  graph; an input returned as-is (same object); a view of an input (rebuilt with
  `as_strided` on the real input, after the epilogue, so it is a real view with the right base);
  a view of another value the graph computes (its base becomes an extra graph output and the
  view is rebuilt from it); a Python constant, passed through;
- `requires_grad` of each graph-computed value, so the runtime knows which outputs are
  differentiable.

Invariants:

- The analysis never touches real tensors, and the user's saved-tensor hooks never see its
  FakeTensors: every input is converted with its own FakeTensorMode
  (aliasing between inputs is preserved by the converter).
- `fallback` is set, with a reason, for the cases the functional path does not model (metadata
  mutation of an input such as `x.t_()`, a mutated input overlapping another input, an
  input-alias output of another dtype, a leaf that requires grad made inside the graph, an
  in-place write eager rejects for memory overlap, such as `x.copy_(x.t())` or `x[1:] = x[:-1]`,
  and one whose result eager leaves to its loop order, writing elements it reads through
  another view, such as `x += x[:, :1]` or a write into `x.unfold(0, 2, 1)`); the caller then
  runs the captured graph as it is.
- The stage's runs on FakeTensors are quiet (`quiet`): no warnings, no log records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch
import torch.fx
from framejit.frontend.warning_filters import ignoring_warnings
from torch._dispatch.python import enable_python_dispatcher
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.multiprocessing.reductions import StorageWeakRef

OutputKind = Literal["graph", "input", "input_view", "graph_view", "repeat", "constant"]


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """How the runtime produces one output of the captured graph.

    `index` means: for "graph"/"graph_view" a position in `GraphInfo.computed` (the values the
    traced graph returns; for "graph_view" the position of the base); for "input"/"input_view"
    a position in the captured graph's inputs; for "repeat" an earlier output's position.
    `detached`: a view that does not require grad of a base that does (`loss.detach()`).
    `conj`, `neg`: the view's conjugate and negative bits (`x.conj()`, `x.mH` of a complex `x`),
    which `as_strided` does not set: the view reads its base's memory through them.
    """

    kind: OutputKind
    index: int = -1
    size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    offset: int = 0
    value: Any = None
    detached: bool = False
    conj: bool = False
    neg: bool = False
    creation_meta: Any = None  # autograd's CreationMeta of the view, where not DEFAULT


@dataclasses.dataclass
class GraphInfo:
    """The facts `analyze` found; see the module docstring."""

    unique: list[int]  # positions of the inputs the traced graph takes (tensors, first occurrence)
    mutated: list[int]  # positions (into the captured inputs) of inputs mutated in place
    outputs: list[OutputSpec]
    computed: list[torch.fx.Node]  # nodes of the captured graph the traced graph must return
    computed_values: list[torch.Tensor]  # their FakeTensors (shape, dtype, requires_grad)
    mutated_values: list[torch.Tensor]  # FakeTensors of the mutated inputs after the graph ran
    fallback: str | None = None
    # per mutated input, how far the graph moved its version counter in eager: one step per
    # in-place write through it or a view or detach of it, none for writes through `x.data`
    # (a counter of its own), which the epilogue's one copy must neither add nor miss
    version_steps: list[int] = dataclasses.field(default_factory=list)


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silences warnings (Python's, and C++ ones raised through Python) and log records while the
    stage runs the graph on FakeTensors. The user saw the graph's own warnings once, from the
    frontend's run at their line; the stage's runs repeat them, or are torch's internals talking
    about the trace (a decomposition's resize warning)."""
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with ignoring_warnings():
            yield
    finally:
        logging.disable(disabled)


def no_user_hooks() -> Any:
    """Identity saved-tensor hooks: they shadow the user's, which are meant for real tensors.
    Only when the user has some: torch.func's grad refuses to run under any hooks."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    if top is not None and top(False) is None:
        return contextlib.nullcontext()
    return torch.autograd.graph.saved_tensors_hooks(_identity, _identity)


class _Recorder(torch.fx.Interpreter):
    """Runs the graph and remembers which node produced each tensor value, and the first
    thing it does that the functional graph cannot model (`unsupported`, a reason): a new leaf
    that requires grad, or an in-place write eager rejects for its memory overlap."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.producer: dict[int, torch.fx.Node] = {}
        # Keeps every value alive while `producer` is in use: the interpreter frees values
        # after their last use, and a freed tensor's id can be reused by a later one.
        self._alive: list[torch.Tensor] = []
        self.unsupported: str | None = None
        self._inputs: set[int] = set()
        self._unfolded: set[int] = set()  # x.unfold(...) and views of it
        # the first graph value in each storage: what `y.detach()` (not a view, but y's memory)
        # is rebuilt from
        self.owner: dict[Any, torch.Tensor] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        value = super().run_node(n)
        if isinstance(value, torch.Tensor) and n.op == "placeholder":
            self._inputs.add(id(value))
        elif isinstance(value, torch.Tensor):
            self.producer.setdefault(id(value), n)
            self._alive.append(value)
            if value.layout == torch.strided and n.op != "get_attr":
                self.owner.setdefault(_storage(value), value)
            new = n.op != "get_attr" and id(value) not in self._inputs  # not `w.float()` of w
            # a view made under no_grad of a tensor that requires grad (`w.t()` of a parameter
            # at inference) is a leaf that requires grad too, but it is the input's alias, not
            # a new tensor: the output is rebuilt as that view
            # (`_is_view` first: `is_leaf` of a no_grad view written in place raises)
            if new and value.requires_grad and not value._is_view() and value.is_leaf:
                # `torch.zeros(3, requires_grad=True)`: the traced graph would make it a
                # constant, and nothing downstream would require grad
                self._unsupported(f"{n.name} makes a leaf tensor that requires grad")
        return value

    def call_function(self, target: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        name = getattr(target, "__name__", "")
        self._check_write(name, args, kwargs)
        return self._note_unfold(name, args, super().call_function(target, args, kwargs))

    def call_method(self, target: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        self._check_write(target, args, kwargs)
        return self._note_unfold(target, args, super().call_method(target, args, kwargs))

    def _note_unfold(self, name: str, args: tuple, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and (
            name == "unfold"
            or (value._is_view() and any(id(a) in self._unfolded for a in _tensors(list(args))))
        ):
            self._unfolded.add(id(value))
        return value

    def _unsupported(self, reason: str) -> None:
        if self.unsupported is None:
            self.unsupported = reason

    def _check_write(self, name: str, args: tuple, kwargs: dict[str, Any]) -> None:
        """Eager's memory-overlap checks of an in-place write (TensorIterator's): the written
        tensor must not have elements sharing memory, nor partly overlap a tensor it reads.
        The functional graph writes a fresh tensor, so it would not raise. Nor would it give
        eager's result where the write reads elements it writes through another view
        (`x += x[:, :1]`, which eager does not check: its result depends on its loop order)."""
        out = kwargs.get("out")
        if name == "setitem":
            self._check_setitem(args)
            return
        if out is not None:
            written, read = _tensors(out), _tensors((args, kwargs.get("input")))
        elif _writes_first_argument(name) and args and isinstance(args[0], torch.Tensor):
            written, read = [args[0]], _tensors((args[1:], list(kwargs.values())))
        else:
            return
        if any(id(w) in self._unfolded for w in written):
            # functionalization writes an unfold view back through unfold_backward, which
            # zero-fills what no window covers (`x.unfold(0, 2, 2).zero_()` of 7 elements)
            self._unsupported(f"{name} writes through an unfold view")
        self._check_overlap(name, written, read)

    def _check_overlap(
        self, name: str, written: list[torch.Tensor], read: list[torch.Tensor]
    ) -> None:
        for w in written:
            if w.layout != torch.strided:
                continue
            if _has_symbols(w) or any(_has_symbols(r) for r in read):
                self._check_symbolic_overlap(name, w, read)
                continue
            if _has_internal_overlap(w):
                # eager raises, or (a view it cannot judge cheaply, `x.unfold(0, 2, 1)`)
                # writes in its loop's order; functionalization refuses both
                self._unsupported(f"{name} writes a tensor whose elements share memory")
            if any(_partial_overlap(w, r) for r in read):
                self._unsupported(f"{name} writes a tensor that partly overlaps one it reads")
            if any(_shares_elements(w, r) for r in read):
                self._unsupported(f"{name} reads elements it writes through another view")

    def _check_symbolic_overlap(self, name: str, w: torch.Tensor, read: list[torch.Tensor]) -> None:
        """The same checks where sizes are symbolic: whether two views overlap can depend on
        the sizes, so any read of the written memory through another tensor runs the graph as
        captured; internal overlap (a 0 stride, `unfold` windows that overlap) is judged on the
        sizes of this call, which automatic dynamic makes symbolic only from the second."""
        if any(r is not w and _storage(r) == _storage(w) for r in read):
            self._unsupported(f"{name} reads memory it writes, with symbolic sizes")
            return
        hinted = _with_hints(w)
        if hinted is None or _has_internal_overlap(hinted):
            self._unsupported(f"{name} writes a tensor whose elements may share memory")

    def _check_setitem(self, args: tuple) -> None:
        """`x[index] = value`: with a basic index, eager copies `value` into the view
        `x[index]` (copy_'s checks); with an advanced one it calls `index_put_`, which also
        rejects a value or index that is `x` itself or overlaps it fully."""
        target, index, value = args
        if not isinstance(target, torch.Tensor):
            return
        if id(target) in self._unfolded:
            self._unsupported("setitem writes through an unfold view")
        items = index if isinstance(index, tuple) else (index,)
        if all(_basic_index(i) for i in items):
            self._check_overlap("setitem", [target[index]], _tensors(value))
            return
        read = _tensors((value, items))
        if target.layout == torch.strided and any(r is target for r in read):
            self._unsupported("setitem writes a tensor it reads")
        self._check_overlap("setitem", [target], read)


def _basic_index(item: Any) -> bool:
    """An index item Python's `x[...]` turns into a view, not advanced indexing. (A 0-dim
    integer tensor selects too, but its value is unknown here: taken as advanced, which checks
    more.)"""
    if isinstance(item, bool):
        return False
    return item is None or item is Ellipsis or isinstance(item, (int, slice, torch.SymInt))


_INPLACE_OPERATORS = frozenset(
    f"{prefix}i{op}{suffix}"
    for op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
    + ("lshift", "rshift", "matmul")
    for prefix, suffix in (("", ""), ("__", "__"))
)
# In-place methods that change no element: no overlap check applies.
_METADATA_METHODS = frozenset(
    {"requires_grad_", "detach_", "resize_", "resize_as_", "set_", "as_strided_", "t_"}
    | {"transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_", "share_memory_"}
)


def _writes_first_argument(name: str) -> bool:
    if name in _INPLACE_OPERATORS:
        return True
    return name.endswith("_") and not name.startswith("__") and name not in _METADATA_METHODS


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _partial_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """aten's `get_overlap_status(a, b) == Partial`: both dense without overlap, in the same
    storage, and their byte ranges overlap without being the same tensor (same start, end and
    strides). Anything harder eager does not check either."""
    if a is b or _has_symbols(b) or not a.numel() or not b.numel():
        return False
    if not (is_non_overlapping_and_dense_or_false(a) and is_non_overlapping_and_dense_or_false(b)):
        return False
    if _storage(a) != _storage(b):
        return False
    a_begin, b_begin = a.storage_offset() * a.itemsize, b.storage_offset() * b.itemsize
    a_end, b_end = a_begin + a.numel() * a.itemsize, b_begin + b.numel() * b.itemsize
    if (a_begin, a_end) == (b_begin, b_end):
        return a.stride() != b.stride()
    return a_begin < b_end and b_begin < a_end


# Above this many elements, two views that may share elements are assumed to: the exact test
# enumerates their elements' offsets (the graph then runs as captured, which is always right).
_EXACT_OVERLAP_LIMIT = 1 << 20


def _shares_elements(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do `a` and `b` have an element in common without being the same view (same sizes,
    strides, offset and dtype)? An in-place write of `a` that reads `b` then reads some
    elements after it wrote them, in an order only eager's loop decides."""
    if a is b or _has_symbols(b) or not a.numel() or not b.numel():
        return False
    if _storage(a) != _storage(b) or b.layout != torch.strided:
        return False
    if a.dtype == b.dtype and _layout(a) == _layout(b):
        return False
    (a_begin, a_end), (b_begin, b_end) = _byte_span(a), _byte_span(b)
    if a_end <= b_begin or b_end <= a_begin:
        return False
    if a.itemsize != b.itemsize or a.numel() + b.numel() > _EXACT_OVERLAP_LIMIT:
        return True
    with unset_fake_temporarily():
        return bool(torch.isin(_element_offsets(a), _element_offsets(b)).any())


def _has_internal_overlap(t: torch.Tensor) -> bool:
    """Do two elements of `t` share memory? aten's answer when it has one (a 0 stride: yes;
    dense: no); otherwise no if each stride, in increasing order, passes the span of the
    smaller ones (a column, a strided slice), else an exact test."""
    status = torch._debug_has_internal_overlap(t)
    if status != 2:  # 2 is aten's "too hard"
        return status == 1
    span = 0
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1):
        if stride <= span:
            break
        span += (size - 1) * stride
    else:
        return False
    if t.numel() > _EXACT_OVERLAP_LIMIT:
        return True
    with unset_fake_temporarily():
        return len(torch.unique(_element_offsets(t))) < t.numel()


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes of its storage that a non-empty strided tensor spans (from its first element
    to the end of its last)."""
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.storage_offset() * t.itemsize, (last + 1) * t.itemsize


def _element_offsets(t: torch.Tensor) -> torch.Tensor:
    """The storage offsets (in elements) of all of `t`'s elements, as a real tensor."""
    offsets = torch.tensor([t.storage_offset()])
    for size, stride in zip(t.shape, t.stride()):
        offsets = (offsets[:, None] + torch.arange(size) * stride).flatten()
    return offsets


def _storage(t: torch.Tensor) -> StorageWeakRef:
    return StorageWeakRef(t.untyped_storage())


def _real_storages(inputs: list[Any], unique: list[int]) -> dict[int, Any]:
    out: dict[int, Any] = {}
    for i in unique:
        try:
            out[i] = _storage(inputs[i])
        except (RuntimeError, NotImplementedError):
            out[i] = ("no storage", i)  # a sparse tensor: it shares memory with no other input
    return out


def _layout(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


FakeInputs = Callable[[], tuple[Any, list[Any]]]


def symbolic_inputs(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> FakeInputs | None:
    """For a graph with symbolic sizes (dynamic shapes): a function returning
    `(fake_mode, fakes)`, fresh FakeTensors for `example_inputs` with the sizes the frontend
    gave the placeholders, in the frontend's FakeTensorMode (whose ShapeEnv records what the
    stage assumes about sizes, so the frontend's guards include it). None for static graphs."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    vals = [n.meta.get("val") for n in placeholders]
    if len(vals) != len(example_inputs) or not any(_has_symbols(v) for v in vals):
        return None
    # the sizes the graph is called with (the frontend's fake itself may have been changed by
    # an in-place metadata op of the trace, `x.squeeze_(1)`)
    layouts = [
        n.meta.get("input_layout")
        or ((v.shape, v.stride()) if isinstance(v, torch.Tensor) else None)
        for n, v in zip(placeholders, vals)
    ]
    mode = next((v.fake_mode for v in vals if isinstance(v, torch.Tensor)), None)
    if mode is None:  # only int and float inputs: a mode over their ShapeEnv
        shape_env = next(
            v.node.shape_env for v in vals if isinstance(v, (torch.SymInt, torch.SymFloat))
        )
        mode = FakeTensorMode(allow_non_fake_inputs=True, shape_env=shape_env)

    def make() -> tuple[Any, list[Any]]:
        fakes: list[Any] = []
        first: dict[int, int] = {}
        for i, (real, val) in enumerate(zip(example_inputs, vals)):
            if isinstance(val, (torch.SymInt, torch.SymFloat)):  # a symbolic int or float
                fakes.append(val)
            elif not isinstance(real, torch.Tensor):
                fakes.append(real)
            elif id(real) in first:  # the same tensor twice: the same fake
                fakes.append(fakes[first[id(real)]])
            else:
                first[id(real)] = i
                size, stride = layouts[i]
                with mode:
                    fake = torch.empty_strided(size, stride, dtype=val.dtype, device=val.device)
                fakes.append(_like_autograd(fake, real))
        return mode, fakes

    return make


_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _like_autograd(fake: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """`fake` with `real`'s requires_grad, and a non-leaf when `real` is one (autograd refuses
    in-place ops on leaves that require grad, not on other tensors)."""
    if not real.requires_grad:
        return fake
    fake.requires_grad_(True)
    if real.is_leaf:
        return fake
    # a copy into a tensor of the same layout: a non-leaf, not a view, with fake's strides (a
    # clone of a non-dense tensor, a slice of a bigger buffer, would be contiguous)
    out = fake.detach().new_empty_strided(fake.shape, fake.stride())  # fake too: its mode's
    with torch.enable_grad():
        return out.copy_(fake)


def _with_hints(t: torch.Tensor) -> torch.Tensor | None:
    """A meta tensor with `t`'s sizes and strides as they are in this call (None where a size
    has no such value: one computed from data)."""

    def hint(n: Any) -> int | None:
        if not isinstance(n, torch.SymInt):
            return int(n)
        value = n.node.hint
        return None if value is None else int(value)

    sizes, strides = [hint(n) for n in t.shape], [hint(n) for n in t.stride()]
    if None in sizes or None in strides:
        return None
    with unset_fake_temporarily():
        return torch.empty_strided(sizes, strides, dtype=t.dtype, device="meta")


def _has_symbols(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return True
    if not isinstance(value, torch.Tensor):
        return False
    return any(isinstance(n, torch.SymInt) for n in (*value.shape, *value.stride()))


def _fakes(example_inputs: list[Any], symbolic: FakeInputs | None) -> tuple[Any, list[Any]]:
    if symbolic is not None:
        return symbolic()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    return mode, [mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in example_inputs]


def analyze(
    gm: torch.fx.GraphModule, example_inputs: list[Any], symbolic: FakeInputs | None = None
) -> GraphInfo:
    """Run `gm` on FakeTensor copies of `example_inputs` under the current grad mode
    (`symbolic`: the inputs' symbolic fakes, see `symbolic_inputs`)."""
    unique: list[int] = []
    first: dict[int, int] = {}
    for i, value in enumerate(example_inputs):
        if isinstance(value, torch.Tensor) and id(value) not in first:
            first[id(value)] = i
            unique.append(i)

    mode, fakes = _fakes(example_inputs, symbolic)
    versions = {i: fakes[i]._version for i in unique}
    layouts = {i: _layout(fakes[i]) for i in unique}
    recorder = _Recorder(gm)
    # python dispatcher: batch_norm's running stats count as mutations
    with mode, enable_python_dispatcher(), no_user_hooks(), quiet():
        results = recorder.run(*fakes)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    out_args = out_node.args[0]
    if not isinstance(results, (tuple, list)):
        results, out_args = (results,), (out_args,)

    info = GraphInfo(unique, [], [], [], [], [], fallback=recorder.unsupported)
    if info.fallback is not None:
        return info
    for i in unique:
        if _layout(fakes[i]) != layouts[i]:
            info.fallback = f"input {i} has its sizes or strides changed in place"
    mutations = _functional_mutations(gm, example_inputs, unique, symbolic)
    for i in unique:
        if fakes[i]._version != versions[i] and i not in mutations:
            mutations[i] = fakes[i].detach()
    for i in sorted(mutations):
        info.mutated.append(i)
        info.mutated_values.append(mutations[i])
        info.version_steps.append(fakes[i]._version - versions[i])
    storages = {i: _storage(fakes[i]) for i in unique}
    # symbolic fakes are made one per input (symbolic_inputs): `f(t, t[1:])` gets two storages
    # there, so the inputs' own storages say which share memory
    shared = _real_storages(example_inputs, unique) if symbolic is not None else storages
    for i in info.mutated:
        if any(j != i and shared[j] == shared[i] for j in unique):
            info.fallback = f"mutated input {i} shares memory with another input"

    input_of = {id(fakes[i]): i for i in unique}
    seen: dict[int, int] = {}
    computed_at: dict[int, int] = {}

    def compute(node: torch.fx.Node, value: torch.Tensor) -> int:
        if id(value) not in computed_at:
            computed_at[id(value)] = len(info.computed)
            info.computed.append(node)
            info.computed_values.append(value)
        return computed_at[id(value)]

    pending_views: list[tuple[int, torch.Tensor]] = []
    for position, (arg, value) in enumerate(zip(out_args, results)):
        if isinstance(value, _SYM_TYPES) and isinstance(arg, torch.fx.Node):
            info.outputs.append(OutputSpec("graph", compute(arg, value)))  # a symbolic size
            continue
        if not isinstance(value, torch.Tensor):
            info.outputs.append(OutputSpec("constant", value=value))
            continue
        if id(value) in seen:
            info.outputs.append(OutputSpec("repeat", seen[id(value)]))
            continue
        seen[id(value)] = position
        if id(value) in input_of:
            info.outputs.append(OutputSpec("input", input_of[id(value)]))
            continue
        if isinstance(value.grad_fn, torch.autograd.function.BackwardCFunction) and (
            value._base is not None or any(storages[i] == _storage(value) for i in unique)
        ):
            # a view made by a custom autograd Function (a gradient-reversal layer returns
            # `x.view_as(x)`): rebuilt as a plain view, it would lose the Function's backward
            info.fallback = f"output {position} is a view an autograd Function returns"
            return info
        base_input = next((i for i in unique if storages[i] == _storage(value)), None)
        if base_input is not None:
            if value.dtype != fakes[base_input].dtype:
                info.fallback = (
                    f"output {position} is a view of input {base_input} as another dtype"
                )
            detached = fakes[base_input].requires_grad and not value.requires_grad
            info.outputs.append(
                OutputSpec(
                    "input_view", base_input, *_layout(value), detached=detached, **_bits(value)
                )
            )
            continue
        base = _base_of(value, recorder)
        if base is not None and id(base) in recorder.producer and base.dtype == value.dtype:
            info.outputs.append(OutputSpec("graph_view"))  # filled in below
            pending_views.append((position, value))
            continue
        assert isinstance(arg, torch.fx.Node), f"output {position} is a tensor but not a node"
        info.outputs.append(OutputSpec("graph", compute(arg, value)))
    for position, value in pending_views:
        base = _base_of(value, recorder)
        index = compute(recorder.producer[id(base)], base)
        detached = base.requires_grad and not value.requires_grad
        info.outputs[position] = OutputSpec(
            "graph_view", index, *_layout(value), detached=detached, **_bits(value)
        )
    return info


def _base_of(value: torch.Tensor, recorder: _Recorder) -> torch.Tensor | None:
    """The graph value `value` is a view of: its `_base`, or for a tensor that shares another
    one's memory without being its view (`y.detach()`), the first value in that memory."""
    if value._base is not None:
        return value._base
    if value.layout != torch.strided:
        return None
    owner = recorder.owner.get(_storage(value))
    return owner if owner is not None and owner is not value else None


def _bits(view: torch.Tensor) -> dict[str, Any]:
    return {"conj": view.is_conj(), "neg": view.is_neg(), "creation_meta": _creation_meta(view)}


_GET_CREATION_META = getattr(torch._C._autograd, "_get_creation_meta", None)


def _creation_meta(view: torch.Tensor) -> Any:
    """How autograd made the view, where in-place writes to it are refused for it (an output
    of `split`/`chunk`/`unbind`, a view made under no_grad of a tensor that requires grad);
    None for ordinary views."""
    if _GET_CREATION_META is None or not view.requires_grad or not view._is_view():
        return None
    meta = _GET_CREATION_META(view)
    return None if meta == torch._C._autograd.CreationMeta.DEFAULT else meta


def _functional_mutations(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    unique: list[int],
    symbolic: FakeInputs | None,
) -> dict[int, torch.Tensor]:
    """Inputs that functionalization sees written (version counters miss some, e.g. the running
    stats of `native_batch_norm`), with a FakeTensor of each new value carrying its
    `requires_grad`."""
    mode, fakes = _fakes(example_inputs, symbolic)
    wrapped = list(fakes)
    for i, value in enumerate(fakes):
        if isinstance(value, torch.Tensor):
            wrapped[i] = wrapped[unique_of(fakes, i)] if i not in unique else _wrap(value)
    with mode, enable_python_dispatcher(), no_user_hooks(), quiet():
        torch._enable_functionalization(reapply_views=True)
        try:
            gm.forward(*wrapped)  # not gm(...): on an error that prints the graph to stderr
        finally:
            torch._disable_functionalization()
        found: dict[int, torch.Tensor] = {}
        for i in unique:
            torch._sync(wrapped[i])
            if torch._functionalize_has_data_mutation(wrapped[i]):
                value = torch._from_functional_tensor(wrapped[i]).detach()
                if wrapped[i].requires_grad:
                    value.requires_grad_(True)
                found[i] = value
    return found


def unique_of(values: list[Any], i: int) -> int:
    """Position of the first occurrence of `values[i]` (the same object)."""
    return next(j for j, v in enumerate(values) if v is values[i])


def _wrap(t: torch.Tensor) -> torch.Tensor:
    wrapped = torch._to_functional_tensor(t)
    torch._mirror_autograd_meta_to(t, wrapped)
    return wrapped


def graph_with_outputs(
    gm: torch.fx.GraphModule, nodes: list[torch.fx.Node]
) -> torch.fx.GraphModule:
    """A copy of `gm` whose output is the tuple of `nodes` (nodes of `gm`)."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    graph.graph_copy(gm.graph, env)
    graph.output(tuple(env[n] for n in nodes))
    return torch.fx.GraphModule(gm, graph)

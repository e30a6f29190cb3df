"""OutputGraph: the fx.Graph under construction for one frame, with its inputs and guards.

Invariants:
- Every tensor that enters the graph from outside is a placeholder read from a Source; one
  placeholder per Source, and placeholders precede every other node.
- Every node that produces a tensor carries its FakeTensor in `node.meta["val"]`, computed by
  running the op on fake inputs before the node is added; an op that fails on fakes never enters
  the graph.
- Guards accumulate here in the order the translator relied on facts.
"""

from __future__ import annotations

import functools
import logging
import math
import operator
import os
import types
import warnings
from collections import Counter
from contextlib import nullcontext
from typing import Any

import torch
import torch.fx
from framejit.frontend.dynamic import (
    DynamicInputs,
    ShapeCheck,
    dynamic_fake,
    guard_text,
    new_shape_env,
    resumed_range_bound,
    shape_guard_checks,
    takes_float_operands,
)
from framejit.frontend.errors import Unsupported
from framejit.frontend.layouts import (
    LayoutError,
    eager_layout,
    lay_out_resized,
    needs_eager_layout,
    out_sizes,
)
from framejit.frontend.scalar_ranges import (
    checked_numbers,
    checked_value_tensor,
    float_input_bounds,
    overflows,
    range_check,
    result_dtype,
    value_tensor_overflows,
)
from framejit.frontend.side_effects import SideEffects
from framejit.frontend.sources import (
    AttrSource,
    ConstSource,
    DictItemSource,
    EnvSource,
    FreeVarSource,
    GenericAttrSource,
    GlobalSource,
    ItemSource,
    LocalSource,
    MethodCallSource,
    Source,
    TypeSource,
    is_module_state,
)
from framejit.frontend.variables.base import (
    ConstantVariable,
    DeferredNumberVariable,
    LazyNumberVariable,
    VariableTracker,
    is_numpy_scalar,
)
from framejit.frontend.variables.containers import TupleVariable
from framejit.frontend.variables.rnn import SHAPED_BY_RULE, recurrent_fake
from framejit.frontend.variables.symbolic import (
    SYM_TYPES,
    SizeVariable,
    SymNodeVariable,
    contains_symbolic,
    has_sym_type,
    is_symbolic,
    specialize,
)
from framejit.frontend.variables.tensor import TensorVariable
from framejit.frontend.warning_filters import ignoring_non_leaf_grad, recording_warnings
from framejit.guards import GlobalState, Guard, GuardKind
from framejit.guards.guard import storage_groups
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)

from framejit import logs

# Where torch's fake-tensor, reference and decomposition code lives: a warning blamed there was
# said by the trace's machinery (`{str(shape)}` resize warnings of torch's references), not by
# the kernel eager runs.
_TRACE_MACHINERY = tuple(
    os.path.join("torch", part) + os.sep
    for part in ("_prims_common", "_prims", "_refs", "_decomp", "_subclasses", "fx")
)

# Warnings only a fake tensor gives (C++ code that reads a tensor's data pointer, as the cuDNN
# RNN kernels' weight-layout check does, warns that a FakeTensor's is deprecated): eager's
# real tensors never give them, whoever the warning is blamed on.
_FAKE_TENSOR_MESSAGES = ("Accessing the data pointer of FakeTensor",)

_INT64_LIMIT = 2**63


def _warning_action(text: str, category: type[Warning], module: str, lineno: int) -> str:
    """The action the warnings filters take for this warning (as `warnings.warn_explicit`
    finds it)."""
    for action, message, kind, mod, line in warnings.filters:
        if (
            _matches(message, text)
            and issubclass(category, kind)
            and _matches(mod, module)
            and (line == 0 or line == lineno)
        ):
            return action
    return warnings.defaultaction


def _matches(pattern: Any, text: str) -> bool:
    """A filter's message or module test: None matches anything, a plain string (Python's own
    default filters hold `'__main__'`) only itself, a compiled pattern by `match`."""
    if pattern is None:
        return True
    if type(pattern) is str:
        return pattern == text
    return bool(pattern.match(text))


# Python's operators that raise ZeroDivisionError for a divisor of 0
_DIVISIONS = frozenset({operator.truediv, operator.floordiv, operator.mod, divmod})
# arithmetic on float graph inputs that `_float_operand` makes graph nodes (DeferredNumberVariable)
_SYMBOLIC_FLOAT_OPS = frozenset(
    {operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, abs}
)


class OutputGraph:
    def __init__(self, fn: Any, args: dict[str, Any], dynamic: DynamicInputs | None = None) -> None:
        self.fn = fn  # the function whose frame is traced: its globals and closure
        self.frame_args = args  # name -> real value of every argument of the frame
        self.graph = torch.fx.Graph()
        # Symbolic sizes (frontend/dynamic.py): a ShapeEnv only when this frame may need one.
        self.dynamic = dynamic if dynamic is not None else DynamicInputs(False, None, {})
        self.shape_env = new_shape_env() if self.dynamic.wanted else None
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False, shape_env=self.shape_env)
        # number graph inputs given to ops that check their range: symbol -> guard texts
        self.range_checks: dict[Any, set[str]] = {}
        self.placeholders: list[tuple[Source, torch.fx.Node]] = []
        self.input_values: list[Any] = []  # real tensors, for the backend's example inputs
        self._by_source: dict[Source, TensorVariable] = {}
        self._wrapped: dict[Source, VariableTracker] = {}  # every wrapped source (all kinds)
        self.guards: list[Guard] = []
        self._absent: dict[Source, tuple[dict[str, None], str]] = {}  # see require_absent
        self.calls_modules = False  # a module's forward was inlined: guard global module hooks
        # The graph mutates tensors in place or compares tensors by identity: then distinct
        # input sources must stay distinct objects (NO_ALIASING guard).
        self.identity_sensitive = False
        self._by_id: dict[int, TensorVariable] = {}  # id(real tensor) -> its input variable
        self.created: list[torch.fx.Node] = []  # every node, in creation order (for rollback)
        self.side_effects = SideEffects()
        self.grad_at_exit = torch.is_grad_enabled()  # grad mode where the trace ended
        self.state_at_entry = GlobalState.current()
        self.open_contexts: list[Any] = []  # real autocast contexts the trace entered
        # torch.func.functional_call in progress: (id(module), attribute) -> the tensor that
        # stands for that parameter or buffer during the call (frontend/functorch.py)
        self.reparametrized: dict[tuple[int, str], VariableTracker] = {}
        # id(real mutable object) -> (the object, its variable): two sources reaching one
        # list/object share one variable, so a write through one is seen through the other.
        # The object is held so that its id cannot be reused while tracing.
        self.objects_by_id: dict[int, tuple[Any, VariableTracker]] = {}
        # Generators made while tracing (variables/generators.py), and the generator functions
        # that must run as Python in this attempt (compile_frame's retry fills it).
        self.generators: list[Any] = []
        self.eager_generators: dict[types.CodeType, str] = {}  # code -> why
        # (code, offset) of logging/warnings calls that run for real at a graph break, not
        # replayed after the graph (compile_frame's retry on ReplayOutOfOrder fills it)
        self.calls_run_in_place: set[tuple[types.CodeType, int]] = set()
        self.current_tx: Any = None  # the translator running now (Translator.run sets it)
        # an op gave warnings while tracing: they are replayed, the graph's run is quiet
        self.warns = False

    # --- reading the frame's real values ----------------------------------------------------
    def let_go(self) -> None:
        """Drop the real objects the trace reached (the frame's arguments, the variables that
        wrap them) once the frame is compiled: the trace's variables and the translator refer
        to one another in cycles, which would keep them alive until the garbage collector runs
        (a generator the program then drops would be closed late)."""
        self.frame_args.clear()
        self._wrapped.clear()
        self.objects_by_id.clear()

    def read_source(self, src: Source) -> Any:
        read = getattr(src, "read", None)  # a source that knows how to read itself
        if read is not None:
            return read(self.read_source)
        if isinstance(src, LocalSource):
            return self.frame_args[src.name]
        if isinstance(src, GlobalSource):
            return self.fn.__globals__[src.name]
        if isinstance(src, ConstSource):
            return src.value
        if isinstance(src, EnvSource):
            return os.environ.get(src.key)
        if isinstance(src, FreeVarSource):
            return self.fn.__closure__[src.index].cell_contents
        if isinstance(src, GenericAttrSource):
            return object.__getattribute__(self.read_source(src.base), src.attr)
        if isinstance(src, AttrSource):
            return getattr(self.read_source(src.base), src.attr)
        if isinstance(src, DictItemSource):
            return dict.__getitem__(self.read_source(src.base), src.key)
        if isinstance(src, ItemSource):
            return self.read_source(src.base)[src.key]
        if isinstance(src, TypeSource):
            return type(self.read_source(src.base))
        if isinstance(src, MethodCallSource):
            return getattr(self.read_source(src.base), src.name)()
        raise AssertionError(f"cannot read {src!r}")

    def cached_wrap(self, src: Source) -> VariableTracker | None:
        return self._wrapped.get(src)

    def remember_wrap(self, src: Source, vt: VariableTracker) -> None:
        self._wrapped[src] = vt

    # --- guards ---------------------------------------------------------------------------------
    def add_guard(self, source: Source | None, kind: GuardKind, expected: Any, origin: str) -> None:
        self.guards.append(Guard(source, kind, expected, origin))

    def require_absent(self, dict_source: Source, key: str, origin: str) -> None:
        """The trace looked `key` up past the dict at `dict_source` (a method found on the
        class, not in the instance dict; a builtin, not in the module's globals): a later
        entry there would shadow what it found. One KEYS_ABSENT guard per dict, at the end."""
        self._absent.setdefault(dict_source, ({}, origin))[0].setdefault(key, None)

    def absence_guards(self) -> list[Guard]:
        return [
            Guard(source, GuardKind.KEYS_ABSENT, tuple(keys), origin)
            for source, (keys, origin) in self._absent.items()
        ]

    # --- inputs ---------------------------------------------------------------------------------
    def input_dims(self, source: Source, value: torch.Tensor) -> frozenset[int]:
        """The dimensions of input `value` that will be symbolic (call before add_input)."""
        return self.dynamic.dims_for(source, value, self.shape_env)

    def add_input(
        self, source: Source, value: torch.Tensor, dims: frozenset[int] = frozenset()
    ) -> TensorVariable:
        existing = self._by_source.get(source)
        if existing is not None:
            return existing
        alias = self._by_id.get(id(value))
        if alias is not None:  # the same tensor reached through another source
            self.add_guard(source, GuardKind.DUPLICATE_INPUT, alias.source, "")
            self._by_source[source] = alias
            return alias
        node = self._new_placeholder(source)
        if dims:
            sizes = [
                self.dynamic.make_size(self.shape_env, source, d, n) if d in dims else n
                for d, n in enumerate(value.shape)
            ]
            fake = dynamic_fake(self.fake_mode, value, sizes)
            logs.artifact(
                "dynamic",
                lambda: f"{source}: dims {sorted(dims)} symbolic: {tuple(fake.shape)}",
            )
        else:
            with ignoring_non_leaf_grad():
                fake = self.fake_mode.from_tensor(value, static_shapes=True)
        node.meta["val"] = fake
        # its layout as the graph receives it: an in-place metadata op of the trace
        # (`x.squeeze_(1)`) changes the fake itself
        node.meta["input_layout"] = (tuple(fake.shape), tuple(fake.stride()))
        node.meta["source"] = str(source)
        # Parameters and buffers: their storage stays put between calls (a backend may record
        # their addresses, as CUDA graph trees do).
        node.meta["static_input"] = isinstance(value, torch.nn.Parameter) or is_module_state(source)
        vt = TensorVariable(node, fake, type(value), source)
        self.placeholders.append((source, node))
        self.input_values.append(value)
        self._by_source[source] = vt
        self._by_id[id(value)] = vt
        return vt

    def _new_placeholder(self, source: Source) -> torch.fx.Node:
        """A graph input read from `source`, after the other inputs."""
        after = self.placeholders[-1][1] if self.placeholders else None
        ctx = self.graph.inserting_after(after) if after else self.graph.inserting_before(None)
        with ctx:
            node = self.graph.placeholder(self._unique_name(source.short_name()))
        self.created.append(node)
        return node

    def int_is_dynamic(self, source: Source, value: int) -> bool:
        return self.dynamic.int_is_dynamic(source, value, self.shape_env)

    def add_sym_input(self, source: Source, value: int | float) -> VariableTracker:
        """An int argument (dynamic shapes) or a float one (automatic dynamic floats) as a
        symbolic graph input: the graph takes it."""
        existing = self._by_source.get(source)
        if existing is not None:
            return existing
        node = self._new_placeholder(source)
        if isinstance(value, float):
            sym = self.dynamic.make_float(self.shape_env, source, value)
        elif resumed_range_bound(source):
            sym = self.dynamic.make_index(self.shape_env, source, value)
        else:
            sym = self.dynamic.make_size(self.shape_env, source, None, value)
        node.meta["val"] = sym
        node.meta["source"] = str(source)
        node.meta["static_input"] = False
        what = type(value).__name__
        logs.artifact("dynamic", lambda: f"{source}: {what} argument symbolic: {sym}")
        vt = SymNodeVariable(node, sym)
        self.placeholders.append((source, node))
        self.input_values.append(value)
        self._by_source[source] = vt  # type: ignore[assignment]
        return vt

    def add_range_check(self, expr: Any, text: str) -> None:
        """A guard `text` (over `___fjs0`) on the value of `expr`, a float or int input's symbol
        or an expression over float inputs' symbols, checked at each call (`shape_guards`)."""
        self.range_checks.setdefault(expr, set()).add(text)

    def _guard_range(self, number: Any, dtype: torch.dtype) -> None:
        """Guard that symbolic `number` fits `dtype` (frontend/scalar_ranges.py), so a later
        value that does not recompiles, and takes the graph break that lets eager raise."""
        check = range_check(dtype)
        expr = number.node.expr
        if check is None:
            return
        if expr in self.dynamic.symbols:
            self.add_range_check(expr, check)
            return
        if dtype.is_floating_point:
            # float arithmetic on inputs (`-lr`, `1 - beta`, `lr * wd`): a bound on each input
            # that keeps the expression finite in `dtype` (a float's check is on abs())
            inputs = {
                s: self._by_source.get(self.dynamic.symbols.get(s, (None,))[0])
                for s in expr.free_symbols
            }
            hints = {s: getattr(v, "value", None) for s, v in inputs.items()}
            bounds = float_input_bounds(expr, hints, dtype)
            if bounds is not None:
                for symbol, text in bounds.items():
                    self.add_range_check(symbol, text)
                return
            if all(isinstance(v, SymNodeVariable) for v in inputs.values()):
                # anything else (Adam's `-lr / (1 - beta1 ** step)`): the check on the
                # expression itself, computed from the inputs at each call
                self.add_range_check(expr, check)
                return
        specialize(number)  # other integer arithmetic on inputs: pin its value

    def _float_operand(self, vt: VariableTracker) -> VariableTracker:
        """A float argument that changed between calls (a `LazyNumberVariable`, automatic
        dynamic) given to an op whose result's sizes and dtype do not depend on its value
        (`x * scale`, `x.clamp(max=m)`): a symbolic graph input, so other values reuse the
        graph. Arithmetic on such floats and constants (`alpha=-lr`, `x.mul(1 - lr)`, a
        `DeferredNumberVariable`) becomes graph nodes that compute it in Python floats, as
        eager does. Anything else as it is."""
        if isinstance(vt, DeferredNumberVariable) and vt.op in _SYMBOLIC_FLOAT_OPS:
            operands = [self._float_operand(v) for v in vt.operands]
            if not any(isinstance(v, SymNodeVariable) for v in operands):
                return vt
            if not all(
                isinstance(v, SymNodeVariable) or type(v) is ConstantVariable for v in operands
            ):
                return vt  # an operand kept as a value (an infinite float): the whole by value
            return self.sym_op(vt.op, operands)
        if not isinstance(vt, LazyNumberVariable) or type(vt.value_unguarded) is not float:
            return vt
        if not math.isfinite(vt.value_unguarded):
            return vt  # inf and nan: a value guard (kernels treat them apart)
        return self.add_sym_input(vt.source, vt.value_unguarded)

    def replay_op_warnings(self, caught: list[warnings.WarningMessage], label: str) -> None:
        """The warnings an op gave while it ran on FakeTensors, given on every call where
        eager gives them: replayed after the graph (side_effects), at the user's line when
        eager blames the op's caller, and not given by the graph's own run (`warns`). Those
        that torch's fake-tensor and decomposition machinery gives, and eager does not, are
        dropped. One that the warnings filters make an error is a graph break: the op runs
        for real and raises it."""
        from framejit.frontend.side_effects import warn_at

        tx = self.current_tx
        for w in caught:
            if str(w.message).startswith(_FAKE_TENSOR_MESSAGES):
                continue
            if w.filename == __file__ and tx is not None:  # blamed on the op's caller
                filename, lineno, module_globals = tx.code.co_filename, tx.lineno, tx.f_globals
            elif any(part in w.filename for part in _TRACE_MACHINERY):
                continue
            else:
                filename, lineno, module_globals = w.filename, w.lineno, {}
            text = str(w.message)
            module = module_globals.get("__name__", "<string>")
            if _warning_action(text, w.category, module, lineno) == "error":
                why = f"warns {w.category.__name__} ({text[:80]}), an error under the filters"
                raise Unsupported("tensor_op_failed", label, why)
            where = functools.partial(
                warn_at, filename=filename, lineno=lineno, module_globals=module_globals
            )
            args = [ConstantVariable(text), ConstantVariable(w.category), ConstantVariable(None)]
            self.side_effects.calls.append((ConstantVariable(where), args, {}, lineno))
            self.warns = True

    def aliasing_guards(self) -> list[Guard]:
        """When the graph could tell (it writes tensors in place or compares them by identity):
        distinct tensor inputs must stay distinct objects, and the inputs that shared a storage
        while tracing (views of one base) must be exactly those that share one now. A graph
        traced with unrelated `x, y` and replayed on `b, b.view(-1)` would miss that a write
        to x changes y."""
        if not self.identity_sensitive or len(self.placeholders) < 2:
            return []
        tensors = [
            (s, v)
            for (s, n), v in zip(self.placeholders, self.input_values)
            if isinstance(n.meta.get("val"), torch.Tensor)
        ]
        if len(tensors) < 2:
            return []
        why = "the graph mutates or compares its input tensors"
        sources = tuple(s for s, _ in tensors)
        groups = storage_groups([v for _, v in tensors])
        guards = [Guard(None, GuardKind.STORAGE_GROUPS, (sources, groups), why)]
        # Distinct storages are distinct objects: only the sources of a shared storage need an
        # identity check too.
        counts = Counter(groups)
        shared = tuple(s for s, g in zip(sources, groups) if counts[g] > 1)
        if shared:
            guards.append(Guard(None, GuardKind.NO_ALIASING, shared, why))
        return guards

    def object_aliasing_guards(self) -> list[Guard]:
        """Objects from outside the frame that the trace changed (an attribute written, a list
        appended to) must stay distinct from the other objects of their type it reached: it
        tracked them as separate objects, so called with one object in two places the replay
        would lose a write. (Reached as one object while tracing, they share one variable and a
        DUPLICATE_INPUT guard.)"""
        changed = [vt for vt, _ in self.side_effects.attrs.values()]
        changed += self.side_effects.containers.values()
        kinds = {vt.python_type() for vt in changed if vt.source is not None}
        guards = []
        for kind in kinds:
            sources = tuple(
                dict.fromkeys(
                    vt.source
                    for _, vt in self.objects_by_id.values()
                    if vt.source is not None and vt.python_type() is kind
                )
            )
            if len(sources) > 1:
                why = f"the trace changes a {kind.__name__} from outside the frame"
                guards.append(Guard(None, GuardKind.NO_ALIASING, sources, why))
        return guards

    def _unique_name(self, base: str) -> str:
        names = {n.name for n in self.graph.nodes}
        name, i = base, 1
        while name in names:
            name, i = f"{base}_{i}", i + 1
        return name

    # --- ops --------------------------------------------------------------------------------------
    def call_op(
        self,
        kind: str,
        target: Any,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        """Add `target(*args, **kwargs)` to the graph (kind: call_function or call_method)."""
        if self.shape_env is not None and takes_float_operands(kind, target):
            args = [self._float_operand(a) for a in args]
            kwargs = {k: self._float_operand(v) for k, v in kwargs.items()}
        fake_args = [_to_fake(a) for a in args]
        fake_kwargs = {k: _to_fake(v) for k, v in kwargs.items()}
        label = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
        # With symbolic sizes, matmul and F.interpolate run through their Python
        # decompositions, which keep sizes symbolic: torch 2.11's C++ matmul specializes them
        # (or calls numel() on them), the C++ upsample kernels pin an output size computed
        # from a scale factor. Only there: the Python decompositions of other composite ops
        # differ in small ways (eval dropout returns a new tensor instead of its input).
        python_dispatch = (
            enable_python_dispatcher()
            if self.dynamic.symbols and _wants_python_dispatch(kind, target)
            else nullcontext()
        )

        def run() -> Any:
            with recording_warnings() as said:
                try:
                    return run_op()
                finally:
                    caught[:] = said

        def run_op() -> Any:
            with self.fake_mode, _QUIET_FAKE_LOG:
                if kind == "call_method":
                    _check_in_place_result(fake_args, fake_kwargs, target)
                    return getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                if getattr(target, "__objclass__", None) in _TENSOR_CLASSES:
                    # a method called through its class (torch.Tensor.logit_(x))
                    _check_in_place_result(fake_args, fake_kwargs, target.__name__)
                elif target in _IN_PLACE_OPERATORS:  # `y *= 2.5`: the fake mul_ does not check
                    _check_in_place_result(fake_args, fake_kwargs, _IN_PLACE_OPERATORS[target])
                elif target in SHAPED_BY_RULE and self.dynamic.symbols and not fake_kwargs:
                    return recurrent_fake(target, fake_args)  # not a graph per length
                return target(*fake_args, **fake_kwargs)

        caught: list[warnings.WarningMessage] = []  # what the op said, for replay_op_warnings
        outs = out_sizes(fake_kwargs) if kind == "call_function" else []
        try:
            try:
                with python_dispatch:
                    result = run()
            except RuntimeError as exc:
                if (
                    self.dynamic.symbols
                    and _SYMBOLIC_REFUSED in str(exc)
                    and learn_python_dispatch(kind, target)
                ):
                    # a C++ kernel that reads numel() or storage_offset() (lstm's, a negative
                    # pad's) after it has pinned sizes to their values: trace the frame again
                    # with this op run through its Python decomposition from the start
                    raise NeedsPythonDispatch(label) from None
                if not (self.dynamic.symbols and _CONCRETE_ONLY in str(exc)):
                    raise
                # a C++ kernel that takes only concrete sizes (constant_pad_nd's, given a pad
                # computed from a symbolic size) refuses them at its arguments, before any
                # guard: its Python decomposition takes symbolic ones
                with enable_python_dispatcher():
                    result = run()
        except DynamicOutputShapeException:
            raise Unsupported("dynamic_shape_op", f"{label}") from None
        except DataDependentOutputException:
            raise Unsupported("data_dependent", f"{label}") from None
        except (Unsupported, NeedsPythonDispatch):
            raise
        except Exception as exc:  # the same call would fail eagerly; let eager raise it
            if "symbolic sizes" in str(exc) or _CONCRETE_ONLY in str(exc):
                # a kernel without symbolic-shape support
                raise Unsupported(
                    "symbolic_sizes", f"{label}", "dynamic=False avoids the break"
                ) from None
            if "data is not allocated" in str(exc):
                # a kernel that reads a tensor argument's values on the host (tensor_split
                # given its indices as a tensor): the op itself is fine eagerly
                raise Unsupported("data_dependent", f"{label}") from None
            raise Unsupported(
                "tensor_op_failed", f"{label}", f"{type(exc).__name__}: {str(exc)[:200]}"
            ) from None
        checked = checked_numbers(kind, target, fake_args, fake_kwargs)
        dtype = result_dtype(result) if checked else None
        for number in checked if dtype is not None else []:
            symbolic = isinstance(number, (torch.SymInt, torch.SymFloat))
            value = number.node.hint if symbolic else number
            if overflows(value, dtype):  # eager raises converting it: let eager raise
                why = f"{value!r} does not fit {dtype}"
                raise Unsupported("tensor_op_failed", f"{label}", why)
            if symbolic:  # a graph input (or arithmetic on one): a guard on its range
                self._guard_range(number, dtype)
        fill = checked_value_tensor(kind, target, fake_args, fake_kwargs)
        if fill is not None and value_tensor_overflows(fill, result_dtype(result)):
            # masked_fill's 0-d tensor value, which eager converts with the same check
            why = f"a 0-d {fill.dtype} value may not fit {result_dtype(result)}"
            raise Unsupported("data_dependent", f"{label}", why)
        if caught:
            self.replay_op_warnings(caught, label)
        relaid = False
        try:
            if needs_eager_layout(kind, target) and not outs:
                with self.fake_mode, _QUIET_FAKE_LOG:
                    laid_out = eager_layout(kind, target, fake_args, fake_kwargs, result)
                relaid, result = laid_out is not result, laid_out
            if outs:  # an out= tensor the op resized takes the layout of its result, as in eager
                with self.fake_mode, _QUIET_FAKE_LOG, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    lay_out_resized(target, fake_args, fake_kwargs, outs)
        except LayoutError as exc:  # eager's kernel fails on this layout: let eager raise
            raise Unsupported("tensor_op_failed", f"{label}", str(exc)) from None
        if result is None:
            # Ops that return None act by mutation (setitem, copy into an out= buffer...):
            # they must stay in the graph even though nothing uses their result.
            node = self.graph.create_node(
                kind,
                target,
                tuple(_to_node(a) for a in args),
                {k: _to_node(v) for k, v in kwargs.items()},
            )
            self.created.append(node)
            node.meta["val"] = None
            self.identity_sensitive = True
            return ConstantVariable(None)
        if not _contains_tensor(result) and not contains_symbolic(result):
            if has_sym_type(result):  # SymInts that are known constants
                result = specialize(result)
            if _is_plain_constant(result):
                return ConstantVariable(result)
            raise Unsupported("unsupported_call", f"{label} returning {type(result).__name__}")
        node = self.graph.create_node(
            kind,
            target,
            tuple(_to_node(a) for a in args),
            {k: _to_node(v) for k, v in kwargs.items()},
        )
        self.created.append(node)
        if relaid:  # the AOT stage keeps this layout where its decompositions choose another
            node.meta["eager_layout"] = True
        # An op that returns a tensor it was given (an in-place op its first argument, an out=
        # op its `out`, `broadcast_tensors` a tensor already of the shape, `contiguous()` of a
        # contiguous one) returns that object in eager: keep its variable (and Source), so
        # `r is buf` holds.
        from framejit.frontend.variables.containers import BaseSequence

        given = {
            id(vt.fake): vt
            for a in [*args, *kwargs.values()]
            for vt in (a.items if isinstance(a, BaseSequence) else [a])
            if isinstance(vt, TensorVariable)
        }
        if isinstance(result, torch.Tensor) and id(result) in given:
            node.meta["val"] = result
            self.identity_sensitive = True
            return given[id(result)]
        wrapped = self._wrap_result(node, result)
        if isinstance(wrapped, BaseSequence) and any(
            isinstance(v, TensorVariable) and id(v.fake) in given for v in wrapped.items
        ):
            self.identity_sensitive = True
            wrapped.items = [
                given.get(id(v.fake), v) if isinstance(v, TensorVariable) else v
                for v in wrapped.items
            ]
        return wrapped

    def _wrap_result(self, node: torch.fx.Node, value: Any) -> VariableTracker:
        from framejit.frontend.variables.containers import NamedTupleVariable, TupleVariable

        if isinstance(value, torch.Tensor):
            node.meta["val"] = value
            return TensorVariable(node, value)
        if type(value) in SYM_TYPES:
            node.meta["val"] = value
            return (
                SymNodeVariable(node, value)
                if is_symbolic(value)
                else ConstantVariable(specialize(value))
            )
        if isinstance(value, (tuple, list)):
            node.meta["val"] = value
            items: list[VariableTracker] = []
            for i, v in enumerate(value):
                if isinstance(v, (torch.Tensor, tuple, list)) or is_symbolic(v):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    self.created.append(item)
                    items.append(self._wrap_result(item, v))
                else:
                    items.append(ConstantVariable(v))
            if _is_structseq(type(value)):
                return NamedTupleVariable(type(value), items)
            if isinstance(value, torch.Size):
                return SizeVariable(items)
            if isinstance(value, list):
                from framejit.frontend.variables.containers import ListVariable

                return ListVariable(items)
            return TupleVariable(items)
        if type(value) is dict and all(isinstance(k, (str, int)) for k in value):
            # `torch.func.grad(f)(params)` with a dict of parameters: a dict of gradients
            from framejit.frontend.variables.containers import DictVariable

            node.meta["val"] = value
            entries: dict[Any, VariableTracker] = {}
            for k, v in value.items():
                item = self.graph.call_function(operator.getitem, (node, k))
                self.created.append(item)
                entries[k] = self._wrap_result(item, v)
            return DictVariable(entries)
        raise Unsupported("unsupported_call", f"an op returning {type(value).__name__}")

    # --- symbolic sizes -------------------------------------------------------------------------
    def _sym_node(self, target: Any, args: tuple[Any, ...], value: Any) -> VariableTracker:
        if not is_symbolic(value):
            return ConstantVariable(specialize(value))
        node = self.graph.call_function(target, args)
        self.created.append(node)
        node.meta["val"] = value
        return SymNodeVariable(node, value)

    def tensor_size(self, t: TensorVariable, dim: int | None = None) -> VariableTracker:
        """`t.size(dim)` / `t.size()`: constants where static, graph nodes where symbolic."""
        if dim is None:
            if not contains_symbolic(tuple(t.fake.shape)):
                return ConstantVariable(specialize(t.fake.shape))
            return SizeVariable([self.tensor_size(t, d) for d in range(t.fake.dim())])
        dim = dim % max(t.fake.dim(), 1)
        return self._sym_node(torch.ops.aten.sym_size.int, (t.node, dim), t.fake.size(dim))

    def tensor_numel(self, t: TensorVariable) -> VariableTracker:
        return self._sym_node(torch.ops.aten.sym_numel.default, (t.node,), t.fake.numel())

    def tensor_stride(self, t: TensorVariable, dim: int | None = None) -> VariableTracker:
        if dim is None:
            if not contains_symbolic(t.fake.stride()):
                return ConstantVariable(specialize(t.fake.stride()))
            return TupleVariable([self.tensor_stride(t, d) for d in range(t.fake.dim())])
        dim = dim % max(t.fake.dim(), 1)
        return self._sym_node(torch.ops.aten.sym_stride.int, (t.node, dim), t.fake.stride(dim))

    def sym_op(self, op: Any, args: list[VariableTracker]) -> VariableTracker:
        """`op(*args)` on symbolic ints (and constants): a graph node, or a constant when the
        result does not depend on a symbol."""
        op = _PURE.get(op, op)  # numbers are immutable: `n += 1` is `n + 1`
        values = [a.value if isinstance(a, SymNodeVariable) else a.as_constant() for a in args]
        # whether a divisor is 0 is decided here, with the guard that says so (`s0 - 2 == 0` or
        # its negation): without it, an entry traced where the division raised (and a handler
        # caught it) was reused for sizes where it does not
        divisor = values[1] if op in _DIVISIONS and len(values) == 2 else None
        if isinstance(divisor, (torch.SymInt, torch.SymFloat)) and bool(divisor == 0):
            try:
                op(*[specialize(v) for v in values])
            except ZeroDivisionError as exc:
                raise Unsupported.raised(f"{op.__name__} by zero", exc) from None
        value = op(*values)
        if isinstance(value, torch.SymInt) and abs(value.node.hint or 0) >= _INT64_LIMIT:
            # a Python big int (`n ** 30`): sizes are int64, the ShapeEnv's bounds say int_oo;
            # the caller computes it from the specialized operands instead
            raise TypeError("a symbolic int beyond int64")
        return self._sym_node(op, tuple(_to_node(a) for a in args), value)

    def prune_symbolic(self) -> None:
        """Drop the symbolic-size nodes nothing uses (a condition the translator decided while
        tracing), once the graph is complete: before that, a variable may still hold one and
        pass it to a later op (`done = n >= m; if not done: ...; torch.full(s, done)`)."""
        dropped = set()
        for node in reversed(self.created):  # users first: their inputs may then be unused
            if node.op == "call_function" and not node.users and _is_sym_node(node):
                dropped.add(node)
                self.graph.erase_node(node)
        if dropped:
            self.created = [n for n in self.created if n not in dropped]

    # --- rewinding (graph breaks) ---------------------------------------------------------------
    def checkpoint(self) -> tuple[int, ...]:
        return (
            len(self.created),
            len(self.guards),
            len(self._wrapped),
            len(self.placeholders),
            len(self._by_source),
            len(self.open_contexts),
            torch.is_grad_enabled(),
            self.side_effects.snapshot(),
        )

    def rollback(self, mark: tuple[int, ...]) -> None:
        """Forget every node, input, wrapped source and guard added since `mark`, and undo what
        the trace did to the real global state since then (grad mode, autocast blocks it
        entered): an instruction rewound at a break may have left a `with` block open."""
        n_created, n_guards, n_wrapped, n_inputs, n_by_source, n_contexts, grad, effects = mark
        self.side_effects.restore(effects)
        for ctx in reversed(self.open_contexts[n_contexts:]):
            ctx.__exit__(None, None, None)
        del self.open_contexts[n_contexts:]
        torch._C._set_grad_enabled(grad)
        for node in reversed(self.created[n_created:]):
            self.graph.erase_node(node)
        del self.created[n_created:]
        del self.guards[n_guards:]
        for source in list(self._wrapped)[n_wrapped:]:
            del self._wrapped[source]
        for source in list(self._by_source)[n_by_source:]:
            del self._by_source[source]
        del self.placeholders[n_inputs:]
        del self.input_values[n_inputs:]
        self._by_id = {
            id(v): self._by_source[s] for (s, _), v in zip(self.placeholders, self.input_values)
        }

    # --- finishing --------------------------------------------------------------------------------
    def shape_guards(self) -> list[Guard]:
        """SHAPE_EXPR guards: everything the trace relied on about symbolic sizes."""
        checks: list[tuple[ShapeCheck, str]] = shape_guard_checks(
            self.shape_env, self.dynamic.symbols
        )
        origin = "a number eager converts to a dtype with an overflow check"
        for expr, texts in self.range_checks.items():  # see frontend/scalar_ranges.py
            if expr in self.dynamic.symbols:
                for text in sorted(texts):
                    checks.append((ShapeCheck(text, (self.dynamic.symbols[expr],)), origin))
                continue
            value, free = guard_text(expr)  # an expression over float inputs
            value = f"({value})"
            symbols = tuple(self.dynamic.symbols[s] for s in free)
            for text in sorted(texts):
                checks.append((ShapeCheck(text.replace("___fjs0", value), symbols), origin))
        return [Guard(None, GuardKind.SHAPE_EXPR, c, origin) for c, origin in checks]

    def op_count(self) -> int:
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method"))

    def only_symbolic_ops(self) -> bool:
        """No op but symbolic-size arithmetic (none at all, or a condition on sizes the trace
        decided, such as a resumed loop's `start < stop`): with no outputs, no graph."""
        return all(
            _is_sym_node(n) for n in self.graph.nodes if n.op in ("call_function", "call_method")
        )

    def sizes_in_python(self, outputs: list[Any]) -> dict[torch.fx.Node, tuple[Any, list]] | None:
        """For a graph that would only do integer arithmetic on symbolic ints (a counter read
        from an attribute, `self.step += 1`, under automatic dynamic): each output's value as a
        Python function of the inputs it depends on, `{node: (fn, [(source, dim), ...])}`, so
        no graph is made. None when the graph does anything else."""
        import sympy
        from torch.utils._sympy.printers import PythonPrinter

        if self.shape_env is None or not outputs:
            return None
        if any(
            n.op in ("call_function", "call_method") and not _is_sym_node(n)
            for n in self.graph.nodes
        ):
            return None
        if not all(
            isinstance(o, SymNodeVariable) and type(o.value) is torch.SymInt for o in outputs
        ):
            return None
        found = {}
        for out in outputs:
            expr = self.shape_env.simplify(out.value.node.expr)
            symbols = sorted(expr.free_symbols, key=str)
            if any(sym not in self.dynamic.symbols for sym in symbols):
                return None
            args = [sympy.Symbol(f"___a{i}", integer=True) for i in range(len(symbols))]
            text = PythonPrinter().doprint(expr.xreplace(dict(zip(symbols, args))))
            params = ", ".join(str(a) for a in args)
            scope: dict[str, Any] = {}
            exec(f"def size_value({params}):\n    return int({text})\n", scope)
            found[out.node] = (scope["size_value"], [self.dynamic.symbols[sym] for sym in symbols])
        return found


_PURE = {
    operator.iadd: operator.add,
    operator.isub: operator.sub,
    operator.imul: operator.mul,
    operator.ifloordiv: operator.floordiv,
    operator.itruediv: operator.truediv,
    operator.imod: operator.mod,
    operator.ipow: operator.pow,
    operator.iand: operator.and_,
    operator.ior: operator.or_,
    operator.ixor: operator.xor,
    operator.ilshift: operator.lshift,
    operator.irshift: operator.rshift,
}


def _is_sym_node(node: torch.fx.Node) -> bool:
    """A node `_sym_node` made: a symbolic int/float/bool, never a tensor or an effect."""
    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool))


def _is_structseq(cls: type) -> bool:
    return cls.__module__ == "torch.return_types"


_CONCRETE_ONLY = "expected to contain only concrete integers"
_SYMBOLIC_REFUSED = "on tensor with symbolic sizes/strides"


class NeedsPythonDispatch(Exception):  # noqa: N818 - a signal to compile_frame, not an error
    """An op's C++ fake kernel refused symbolic sizes after pinning some: compile_frame
    traces the frame again, with the op now in `_LEARNED_PYTHON_DISPATCH`."""

    def __init__(self, label: str) -> None:
        super().__init__(label)
        self.label = label


# ops found (in this process) to need their Python decompositions under symbolic sizes
_LEARNED_PYTHON_DISPATCH: set[Any] = set()


def _dispatch_key(kind: str, target: Any) -> Any:
    try:
        hash(target)
    except TypeError:
        return None
    return (kind, target)


def learn_python_dispatch(kind: str, target: Any) -> bool:
    """Note that `target` needs the Python dispatcher; False if it had it already."""
    key = _dispatch_key(kind, target)
    if key is None or _wants_python_dispatch(kind, target):  # learned, or listed, already
        return False
    _LEARNED_PYTHON_DISPATCH.add(key)
    return True


class _QuietLogger:
    """Silences torch's fake-tensor logger while an op runs on FakeTensors: a kernel that
    fails there (a meta function without symbolic-size support) logs the error with its
    traceback before raising it, and the failure is the translator's to report (as a graph
    break), not the user's to read."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)
        self.saved: list[bool] = []

    def __enter__(self) -> None:
        self.saved.append(self.logger.disabled)
        self.logger.disabled = True

    def __exit__(self, *exc: object) -> None:
        self.logger.disabled = self.saved.pop()


_QUIET_FAKE_LOG = _QuietLogger("torch._subclasses.fake_tensor")


def _contains_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_contains_tensor(v) for v in value)
    if type(value) is dict:
        return any(_contains_tensor(v) for v in value.values())
    return False


def _is_plain_constant(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_is_plain_constant(v) for v in value)
    return isinstance(
        value, (bool, int, float, complex, str, type(None), torch.dtype, torch.device, torch.Size)
    )


_TENSOR_CLASSES = (torch.Tensor, torch._C.TensorBase)

# augmented assignments on tensors, by the in-place method each runs
_IN_PLACE_OPERATORS = {
    operator.iadd: "add_",
    operator.isub: "sub_",
    operator.imul: "mul_",
    operator.itruediv: "div_",
    operator.ifloordiv: "floor_divide_",
    operator.imod: "remainder_",
    operator.ipow: "pow_",
    operator.imatmul: "matmul_",
    operator.iand: "bitwise_and_",
    operator.ior: "bitwise_or_",
    operator.ixor: "bitwise_xor_",
    operator.ilshift: "bitwise_left_shift_",
    operator.irshift: "bitwise_right_shift_",
}
_PYTHON_DISPATCH_FUNCTIONS = (
    torch.matmul,
    operator.matmul,
    torch.nn.functional.linear,
    torch.inner,
    # F.interpolate, which computes its output size from a scale factor: the C++ kernels'
    # composite path pins a symbolic size to its value, their Python one keeps it symbolic
    torch.nn.functional.interpolate,
    torch.nn.functional.upsample,
    torch.nn.functional.upsample_nearest,
    torch.nn.functional.upsample_bilinear,
    torch.nn.functional.unfold,  # im2col's C++ meta pins the image size too
    torch.nn.functional.fold,  # and col2im's the batch size
    torch._C._nn.col2im,
    *(
        getattr(torch._C._nn, name)
        for name in dir(torch._C._nn)
        if name.startswith(("upsample_", "_upsample_")) and not name.endswith("_backward")
    ),
)
_PYTHON_DISPATCH_METHODS = frozenset({"matmul", "__matmul__", "__rmatmul__", "inner"})


def _wants_python_dispatch(kind: str, target: Any) -> bool:
    if _LEARNED_PYTHON_DISPATCH and _dispatch_key(kind, target) in _LEARNED_PYTHON_DISPATCH:
        return True
    if kind == "call_method":
        return target in _PYTHON_DISPATCH_METHODS
    return any(target is f for f in _PYTHON_DISPATCH_FUNCTIONS)


def _check_in_place_result(args: list[Any], kwargs: dict[str, Any], name: str) -> None:
    """Raise as eager does for an in-place method whose result its tensor cannot hold, which
    some fake kernels do not check: a result an integer or bool tensor cannot hold
    (`x.logit_()`, `x.ldexp_(y)` on a long tensor), or one of other sizes (`x.addr_(u, v)` on
    a 0-d x: the meta kernel resizes x to the outer product's sizes; eager's in-place ops
    keep their tensor's sizes). The out-of-place method's result, when there is one, is what
    eager would write."""
    self = args[0] if args else None
    if (
        not isinstance(self, torch.Tensor)
        or self.dtype.is_complex
        or not name.endswith("_")
        or name.startswith("_")
        or name in _RESIZING_IN_PLACE
        or (self.dtype.is_floating_point and _elementwise_fit(self, args, kwargs))
    ):
        return
    method = getattr(self, name[:-1], None)
    if not callable(method) or name[:-1] in _NOT_OUT_OF_PLACE:
        return
    try:
        with warnings.catch_warnings():  # the probe must not warn where eager would not
            warnings.simplefilter("ignore")
            out = method(*args[1:], **kwargs)
    except Exception:  # noqa: BLE001 - no out-of-place form for these arguments: no check
        return
    if not isinstance(out, torch.Tensor):
        return
    if not self.dtype.is_floating_point and not torch.can_cast(out.dtype, self.dtype):
        raise RuntimeError(f"result type {out.dtype} can't be cast to {self.dtype} in {name}")
    after, before = tuple(out.shape), tuple(self.shape)
    if len(after) != len(before) or any(a is not b and a != b for a, b in zip(after, before)):
        raise RuntimeError(f"{name}: a result of sizes {list(after)} into {list(before)}")


def _elementwise_fit(self: torch.Tensor, args: list[Any], kwargs: dict[str, Any]) -> bool:
    """Whether every tensor argument is at most `self`'s rank and each of its sizes is 1 or
    `self`'s (the same int, or the same size object): then no broadcast can give a result of
    other sizes, and the sizes probe is skipped (an optimizer's `p.add_(g, alpha=-lr)`, which
    is most in-place calls, costs no second fake op). Symbolic sizes are compared only by
    identity, so the check adds no guard."""
    for a in (*args[1:], *kwargs.values()):
        if not isinstance(a, torch.Tensor):
            continue
        if a.dim() > self.dim():
            return False
        for n, m in zip(reversed(a.shape), reversed(self.shape)):
            if n is m or (type(n) is int and type(m) is int and n in (1, m)):
                continue
            return False
    return True


# in-place methods whose name without "_" is another method (or one with side effects)
_NOT_OUT_OF_PLACE = frozenset(
    {"resize", "resize_as", "set", "type", "requires_grad", "share_memory", "data"}
)
# in-place methods that change their tensor's sizes in eager too
_RESIZING_IN_PLACE = frozenset(
    {
        "resize_",
        "resize_as_",
        "set_",
        "as_strided_",
        "t_",
        "transpose_",
        "swapdims_",
        "swapaxes_",
        "squeeze_",
        "unsqueeze_",
        "sparse_resize_",
        "sparse_resize_and_clear_",
    }
)


def _to_fake(vt: VariableTracker) -> Any:
    return _convert(vt, fake=True)


def _to_node(vt: VariableTracker) -> Any:
    return _convert(vt, fake=False)


def _convert(vt: VariableTracker, fake: bool) -> Any:
    from framejit.frontend.variables.containers import (
        DictVariable,
        ListVariable,
        SliceVariable,
        TupleVariable,
    )

    if isinstance(vt, TensorVariable):
        return vt.fake if fake else vt.node
    if isinstance(vt, SymNodeVariable):
        return vt.value if fake else vt.node
    if isinstance(vt, ConstantVariable):
        # a numpy scalar is the Python number torch's argument parser would make of it
        return vt.value.item() if is_numpy_scalar(vt.value) else vt.value
    if isinstance(vt, TupleVariable):
        return tuple(_convert(i, fake) for i in vt.items)
    if isinstance(vt, ListVariable):
        return [_convert(i, fake) for i in vt.items]
    if isinstance(vt, DictVariable):
        return {k: _convert(v, fake) for k, v in vt.items.items()}
    if isinstance(vt, SliceVariable):
        return slice(*(_convert(p, fake) for p in vt.parts))
    if vt.is_constant():
        value = vt.as_constant()
        # a Python type given as a dtype (`torch.zeros(3, dtype=float)`, `x.to(int)`): the
        # dtype torch's argument parser makes of it, which a graph can print (a type cannot)
        return _PYTHON_DTYPES.get(value, value) if isinstance(value, type) else value
    raise Unsupported("unsupported_call", f"passing a {vt.type_name()} to a tensor op")


_PYTHON_DTYPES = {
    int: torch.int64,
    float: torch.float64,
    bool: torch.bool,
    complex: torch.complex128,
}

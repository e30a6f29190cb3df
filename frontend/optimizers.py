"""torch.optim steps traced into the graph: `opt.step()` of SGD, Adam and AdamW (`zero_grad`
too, until a write), under `config.capture_optimizer_steps` (off by default: the step then runs
as Python at a break).

torch.optim is otherwise torch code run as Python (`inlining.runs_as_python`). For the
optimizers in `_TRACED_CLASSES` (their modules in `TRACED_MODULES`), with the options the tests
cover, the translator inlines `Optimizer.step`'s profiling wrapper, the class's `step`,
`_init_group` and the for-loop update (`_single_tensor_sgd`, `_single_tensor_adam`), as well
as an LR scheduler's wrapper of `opt.step` and `Optimizer.zero_grad`.
`torch.compiler.is_compiling()` is True there as for any library; the for-loop paths do not
ask, but for `_get_value`. These pieces of that code are modelled here instead of traced:

- `_use_grad_for_differentiable`'s wrapper switches grad mode to the optimizer's
  `differentiable` flag around the step and calls torch.compile's graph-break marker twice (for
  its own graph split). It is traced as the grad-mode switch alone. Options that
  change what runs are refused, so the step runs as Python at a break: `differentiable`,
  `fused`, `capturable` and `foreach=True` in any parameter group.
- `torch.autograd.profiler.record_function(name)` records a range only for a running
  profiler: while none runs (a STATE_READ guard pins that) it is a context that does nothing;
  with one running it is a break, so the range is recorded.
- `self.state[p]` (a defaultdict keyed by the parameters): `TensorKeyedDictVariable` reads the
  state of a parameter from outside the frame through `OptimizerStateSource`
  (`dict.get(L['opt'].state, <param source>)`), evaluated again at every call. A parameter
  with no state yet (the first step, where torch creates it) is a break, guarded on the
  number of parameters with state, so the next call compiles the step.
- `_get_value(step_t)`, Adam's step counter as a Python float (`.item()` in eager; the
  tensor itself under torch.compile, whose float32 tensor math would round the bias
  corrections differently): the counter read at the call as a float graph input plus the
  graph's increments (see `_get_value` below).
- `_default_to_fused_or_foreach`, torch's choice of update where `foreach` is None (foreach
  for CUDA parameters): the for-loop update, which computes the same values.
- Adam's foreach and fused updates (`_multi_tensor_adam`, `_fused_adam`), should they be
  reached: a break, unless there is nothing to update.

Invariant: anything traced here computes what eager computes on the same optimizer, bit for bit
with the `eager` and `aot_eager` backends; whatever could differ (a profiler, the options above,
a missing state, a step counter float32 cannot count exactly) runs as Python.
"""

from __future__ import annotations

import collections
import operator
from typing import TYPE_CHECKING, Any

import torch
import torch.optim.adam as _adam_module
import torch.optim.optimizer as _optimizer_module
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import AttrSource, Source, source_class
from framejit.frontend.variables.base import ConstantVariable, VariableTracker
from framejit.guards import Guard, GuardKind

from framejit.config import config

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator

# torch.optim modules whose functions are inlined: the base class and the optimizers traced.
TRACED_MODULES = frozenset(
    {"torch.optim.optimizer", "torch.optim.sgd", "torch.optim.adam", "torch.optim.adamw"}
)
_TRACED_CLASSES = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)
# Group options that take another path than the one traced (and tested): run as Python.
_REFUSED_OPTIONS = ("differentiable", "fused", "capturable", "foreach")


def traced(fn: Any) -> bool:
    """Is `fn` torch.optim code the translator inlines (despite `runs_as_python`)?
    `Optimizer.zero_grad`, which torch marks as never to be compiled, is: what it does
    (`p.grad = None`, or zeroing the gradients in place) is replayed or captured as in eager."""
    if not config.capture_optimizer_steps:
        return False
    fn = getattr(fn, "__func__", fn)
    if getattr(fn, "__code__", None) is _ZERO_GRAD_CODE:
        return True
    module = getattr(fn, "__globals__", {}).get("__name__")
    if getattr(fn, "_wrapped_by_lr_sched", False) and module == "torch.optim.lr_scheduler":
        # what an LR scheduler puts on `opt.step`: notes the call (`opt._opt_called = True`, a
        # write replayed after the graph) and calls the optimizer's step
        return True
    if module not in TRACED_MODULES:
        return False
    from framejit.frontend.inlining import marked_not_to_compile  # (imports this module)

    return not marked_not_to_compile(fn)


def _use_grad_code() -> Any:
    from torch.optim import optimizer

    @optimizer._use_grad_for_differentiable
    def probe(self: Any) -> None:  # pragma: no cover
        """Never called: only the code of the wrapper put on it is read."""

    return probe.__code__


_USE_GRAD_CODE = _use_grad_code()
# zero_grad under torch's do-not-compile wrapper: the wrapper and the function it wraps
_ZERO_GRAD = torch.optim.Optimizer.zero_grad
_ZERO_GRAD_CODE = getattr(_ZERO_GRAD, "__wrapped__", _ZERO_GRAD).__code__


def modeled(fn: Any) -> Any:
    """The model of `fn` (a handler `(tx, fn_vt, args, kwargs)`), or None."""
    if not config.capture_optimizer_steps:
        return None
    original = _under_dynamos_disable(fn)
    if original is not None:
        return lambda tx, fn_vt, args, kwargs: tx.wrap_value(original, None).call(tx, args, kwargs)
    if getattr(fn, "__code__", None) is _USE_GRAD_CODE:
        return _use_grad
    if fn is _GET_VALUE:
        return _get_value
    if fn is _DEFAULT_PATH:
        return _for_loop_path
    if fn in _MULTI_TENSOR:
        return _multi_tensor
    if fn is _ZERO_GRAD and fn.__wrapped__.__code__ is _ZERO_GRAD_CODE:
        return _zero_grad
    return None


_GET_VALUE = _optimizer_module._get_value
_DEFAULT_PATH = _optimizer_module._default_to_fused_or_foreach


def _for_loop_path(
    tx: Translator, fn_vt: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    """`_default_to_fused_or_foreach(...)`: `(False, False)`, the for-loop update, where eager
    picks foreach for CUDA parameters. The two compute the same values element by element
    (the same operations per tensor, the foreach ones over a list; step sizes negated exactly),
    and the graph's kernels fuse the loop's updates anyway. An explicit `foreach=True` is
    refused (`_REFUSED_OPTIONS`)."""
    from framejit.frontend.variables.containers import TupleVariable

    return TupleVariable([ConstantVariable(False), ConstantVariable(False)])


# Adam's foreach and fused updates (foreach is its default for CUDA parameters)
_MULTI_TENSOR = frozenset(
    f
    for f in (
        getattr(_adam_module, "_multi_tensor_adam", None),
        getattr(_adam_module, "_fused_adam", None),
    )
    if f is not None
)


def _multi_tensor(
    tx: Translator, fn_vt: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    params = args[0] if args else kwargs.get("params")
    if params is not None and _is_empty(tx, params):
        return ConstantVariable(None)  # no parameter has a gradient: it does nothing
    raise Unsupported(
        "unsupported_call",
        f"{fn_vt.fn.__qualname__}",
        "the foreach and fused updates run as Python (foreach=None and False are traced)",
    )


def _is_empty(tx: Translator, items: VariableTracker) -> bool:
    try:
        return len(items.unpack(tx)) == 0
    except Unsupported:
        return False


def _get_value(
    tx: Translator, fn_vt: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    """`_get_value(step_t)`: Adam's step counter as a Python float, which eager reads with
    `.item()` after `step_t += 1` and computes its bias corrections from in Python floats. The
    counter (a 0-dim CPU tensor of the optimizer's state, a graph input) is read at the call
    as one more float input `s`, and the value is `s + k`, a node of the graph, where the
    graph added 1 to it k times and wrote it no other way. The float32 counter holds whole
    numbers exactly up to 2**24 (float64: 2**53): a guard keeps `s` a whole number below
    that, so `s + k` is what `.item()` gives. Anything else is a break."""
    from framejit.frontend.sources import MethodCallSource
    from framejit.frontend.variables.tensor import TensorVariable

    if len(args) != 1 or kwargs:
        raise Unsupported("unsupported_call", "_get_value", "unexpected arguments")
    (x,) = args
    if not isinstance(x, TensorVariable):
        return x  # a number: eager gives it back
    fake = x.fake
    exact = {torch.float32: 2.0**24, torch.float64: 2.0**53}.get(fake.dtype)
    node = x.node
    if (
        exact is None
        or x.source is None
        or fake.dim() != 0
        or fake.device.type != "cpu"
        or fake.requires_grad
        or node.op != "placeholder"
    ):
        raise Unsupported("data_dependent", "_get_value", "a step counter read with .item()")
    increments = 0
    for user in node.users:
        if not _adds_one(user, node):
            raise Unsupported("data_dependent", "_get_value", "a step counter written otherwise")
        increments += 1
    value = tx.output.read_source(x.source).item()
    if not (value.is_integer() and value >= 0 and value + increments < exact):
        raise Unsupported("data_dependent", "_get_value", f"a step counter of {value!r}")
    source = MethodCallSource(x.source, "item")
    if tx.output.shape_env is None:  # a first compile: the value pinned, and noted, so that
        # the next compile (the counter moved) takes it symbolic (automatic dynamic)
        if tx.output.dynamic.dynamic is None:
            tx.output.dynamic.remember_float(source, value)
        tx.output.add_guard(source, GuardKind.CONSTANT_MATCH, value, tx.location_text())
        return ConstantVariable(value + increments)
    counter = tx.output.add_sym_input(source, float(value))
    limit = exact - increments
    tx.output.add_range_check(
        counter.value.node.expr, f"(___fjs0.is_integer() and 0 <= ___fjs0 < {limit!r})"
    )
    if not increments:
        return counter
    return tx.output.sym_op(operator.add, [counter, ConstantVariable(float(increments))])


def _adds_one(user: Any, node: Any) -> bool:
    """Whether fx node `user` adds 1 to `node` in place (`step_t += 1`, `step_t.add_(1)`)."""
    if user.kwargs or len(user.args) != 2 or user.args[0] is not node:
        return False
    if type(user.args[1]) not in (int, float) or user.args[1] != 1:
        return False
    if user.op == "call_function":
        return user.target in (operator.iadd, torch.Tensor.add_)
    return user.op == "call_method" and user.target == "add_"


def _under_dynamos_disable(fn: Any) -> Any:
    """Once torch.compile has run in the process, it has wrapped every optimizer class's
    `_init_group` in its own do-not-compile wrapper (its optimizer support handles that method
    itself): the function under the wrapper, for the optimizers traced here; None otherwise.
    Without this, an SGD step after any torch.compile call in the process was a break."""
    original = getattr(fn, "_torchdynamo_orig_callable", None)
    if getattr(original, "__name__", None) != "_init_group":
        return None
    if getattr(original, "__globals__", {}).get("__name__") not in TRACED_MODULES:
        return None
    return original


def _zero_grad(
    tx: Translator,
    fn_vt: Any,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
) -> VariableTracker:
    """`opt.zero_grad(set_to_none=True)`: the function under torch's do-not-compile wrapper,
    traced (`p.grad = None` for each parameter is a write replayed after the graph)."""
    inner = _ZERO_GRAD.__wrapped__
    return tx.wrap_value(inner, None).call(tx, args, kwargs)


def _use_grad(
    tx: Translator,
    fn_vt: Any,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
) -> VariableTracker:
    """`_use_grad_for_differentiable(step)(self, ...)`: grad mode set to
    `self.defaults["differentiable"]` around `step`, put back after it (also when it raises:
    a raise in traced code ends the trace, and compile_frame restores the mode)."""
    from framejit.frontend.sources import closure_cell_source
    from framejit.frontend.variables.contexts import GradModeVariable

    fn = fn_vt.fn
    if not args:
        raise Unsupported("unsupported_call", f"{fn.__qualname__}", "no optimizer given")
    opt = args[0]
    cls = type(getattr(opt, "obj", None))
    if cls not in _TRACED_CLASSES:
        why = "torch code run as Python (optimizer steps traced: SGD, Adam, AdamW)"
        raise Unsupported("unsupported_call", f"{cls.__name__}.step", why)
    for group in opt.getattr(tx, "param_groups").unpack(tx):
        for option in _REFUSED_OPTIONS:
            found = group.call_method(tx, "get", [ConstantVariable(option)], {})
            if not found.is_constant():
                raise Unsupported("unsupported_call", f"{fn.__qualname__}", f"{option}=...")
            if found.as_constant():
                raise Unsupported(
                    "unsupported_call",
                    f"{fn.__qualname__}",
                    f"an optimizer with {option}=True runs as Python",
                )
    index = fn.__code__.co_freevars.index("func")
    if fn_vt.source is not None:
        func = tx.wrap_source(closure_cell_source(fn_vt.source, index))
    else:
        func = tx.wrap_value(fn.__closure__[index].cell_contents, None)
    mode = GradModeVariable.create(tx, torch.set_grad_enabled, False)
    result = func.call(tx, args, kwargs)
    mode.exit(tx)
    return result


class _Unrecorded:
    """What `record_function(name)` is in traced code while no profiler runs."""

    def __enter__(self) -> _Unrecorded:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def record_function(
    tx: Translator, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
) -> VariableTracker:
    """`torch.autograd.profiler.record_function(...)`: a context that does nothing while no
    profiler runs (pinned by a STATE_READ guard); a break while one runs."""
    enabled = torch._C._autograd._profiler_enabled
    tx.output.add_guard(
        None, GuardKind.STATE_READ, (enabled, (), (), enabled()), tx.location_text()
    )
    if enabled():
        raise Unsupported("unsupported_call", "record_function", "a profiler is running")
    return tx.wrap_value(_Unrecorded, None).call(tx, [], {})


@source_class
class OptimizerStateSource(Source):
    """`dict.get(base, key)` where `key` is itself a Source: the state of one parameter in an
    optimizer's `state` (a defaultdict keyed by parameters). `dict.get` never adds the key
    (the defaultdict's `__missing__` would); a missing state reads None, which the guards on
    what the trace read then refuse."""

    base: Source
    key: Source

    def __str__(self) -> str:
        return f"dict.get({self.base}, {self.key})"

    def guard_expr(self) -> str:
        return f"dict.get({self.base.guard_expr()}, {self.key.guard_expr()})"

    def read(self, read: Any) -> Any:
        """The value, given how to read another source (OutputGraph.read_source)."""
        return dict.get(read(self.base), read(self.key))

    def emit_load(self, cg: CodeGen) -> None:
        self.base.emit_load(cg)
        self.emit_step(cg)

    def emit_step(self, cg: CodeGen) -> None:
        from bytecode import Instr
        from framejit.frontend import versions

        # [base] -> [NULL, dict.get, base, key] -> dict.get(base, key)
        cg.load_const(dict.get)
        cg.push_null()
        cg._emit(Instr("SWAP", 3))  # [NULL, dict.get, base]
        self.key.emit_load(cg)
        cg._emit(*versions.emit_call(2))


class TensorKeyedDictVariable(VariableTracker):
    """A dict (or defaultdict) from outside the frame whose keys are all tensors: an
    optimizer's `state`. Only `d[p]` with a tensor `p` read through a Source is modelled."""

    def __init__(self, value: dict[Any, Any], source: Source) -> None:
        self.value = value
        self.source = source

    def __repr__(self) -> str:
        return f"TensorKeyedDict({self.source})"

    def python_type(self) -> type:
        return type(self.value)

    def getitem(self, tx: Translator, key: VariableTracker) -> VariableTracker:
        from framejit.frontend.variables.tensor import TensorVariable

        real = _real_tensor(tx, key) if isinstance(key, TensorVariable) else None
        if real is None:
            raise Unsupported(
                "unsupported_object", "an item of a dict keyed by tensors, with this key"
            )
        if real not in self.value:
            # the first step creates the state (a write into the dict): runs as Python, and the
            # next call, with the state there, compiles
            why = Unsupported(
                "side_effect",
                "optimizer state created for a parameter",
                "the first step runs as Python; later steps are compiled",
            )
            guard = Guard(self.source, GuardKind.LENGTH_CHECK, len(self.value), tx.location_text())
            why.kept_guards.append(guard)
            raise why
        return tx.wrap_source(OptimizerStateSource(self.source, key.source))

    def call_method(
        self,
        tx: Translator,
        name: str,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(tx, args[0])
        raise Unsupported("unsupported_object", f"{name} of a dict keyed by tensors")


def _real_tensor(tx: Translator, key: Any) -> torch.Tensor | None:
    """The real tensor a graph input stands for (None for a tensor the graph computes)."""
    source = getattr(key, "source", None)
    if source is None:
        return None
    value = tx.output.read_source(source)
    return value if isinstance(value, torch.Tensor) else None


def wraps_as_tensor_keyed(value: Any, source: Source) -> bool:
    """A dict whose keys are all tensors, or an optimizer's empty `state` (read as
    `<optimizer>.state`: a defaultdict(dict) before the first step)."""
    if type(value) not in (dict, collections.defaultdict):
        return False
    if value:
        return all(isinstance(k, torch.Tensor) for k in value)
    return (
        type(value) is collections.defaultdict
        and value.default_factory is dict
        and isinstance(source, AttrSource)
        and source.attr == "state"
    )

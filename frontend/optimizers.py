"""torch.optim steps traced into the graph: `opt.step()` of SGD (`zero_grad` too, until a write),
under `config.capture_optimizer_steps` (off by default: the step then runs as Python at a break).

torch.optim is otherwise torch code run as Python (`inlining.runs_as_python`). For the
optimizers in `_TRACED_CLASSES` (their modules in `TRACED_MODULES`), with the options the tests
cover, the translator inlines `Optimizer.step`'s profiling wrapper, the class's `step`,
`_init_group` and the for-loop update (`_single_tensor_sgd`), as well as an LR scheduler's
wrapper of `opt.step` and `Optimizer.zero_grad`. `torch.compiler.is_compiling()` is True there
as for any library; SGD's for-loop path does not ask. Adam and AdamW stay a break
(`_ADAM_REASON`). Three pieces of that code are modelled here instead of traced:

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

Invariant: anything traced here computes what eager computes on the same optimizer, bit for
bit; whatever could differ (a profiler, the options above, a missing state, Adam's float32
bias corrections) runs as Python.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import torch
from framejit.frontend.errors import Unsupported
from framejit.frontend.sources import AttrSource, Source, source_class
from framejit.frontend.variables.base import ConstantVariable, VariableTracker
from framejit.guards import Guard, GuardKind

from framejit.config import config

if TYPE_CHECKING:
    from framejit.frontend.codegen import CodeGen
    from framejit.frontend.translator import Translator

# Adam's compiling path computes its bias corrections from the step counter as float32 tensors
# (`1 - beta1 ** step`, `lr / bias_correction1`, and the step size then as a tensor `value` of
# `addcdiv_`); eager reads the step with `.item()` and computes them in Python floats (float64).
# The parameters would differ from eager's in their last bits: it runs as Python.
_ADAM_REASON = (
    "its bias corrections would be float32 tensor math where eager computes them in Python "
    "floats: it runs as Python"
)

# torch.optim modules whose functions are inlined: the base class and the optimizers traced.
TRACED_MODULES = frozenset({"torch.optim.optimizer", "torch.optim.sgd"})
_TRACED_CLASSES = (torch.optim.SGD,)
# Why other optimizers run as Python (the break's reason names it).
_NOT_TRACED = {
    torch.optim.Adam: _ADAM_REASON,
    torch.optim.AdamW: _ADAM_REASON,
}
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
    if fn is _ZERO_GRAD and fn.__wrapped__.__code__ is _ZERO_GRAD_CODE:
        return _zero_grad
    return None


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
        why = _NOT_TRACED.get(cls, "torch code run as Python (optimizer steps traced: SGD)")
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

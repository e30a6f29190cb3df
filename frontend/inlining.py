"""Calls the translator inlines: user functions, nested functions, generators, modules.

A mixin of the Translator. Arguments are bound with the callee's own signature (defaults read
lazily, through guarded sources), the callee runs in a child Translator that shares the
OutputGraph, and module calls run forward pre-hooks, forward (or the recurrent op) and
forward hooks the way nn.Module.__call__ does.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
import os
import types
import weakref
from typing import Any

import torch
import torch.utils.checkpoint
from framejit.frontend import autograd_function, copying, functorch, optimizers
from framejit.frontend.errors import Unsupported
from framejit.frontend.side_effects import written_tensors
from framejit.frontend.sources import (
    AttrSource,
    Source,
    closure_cell_source,
    default_source,
    kwdefault_source,
)
from framejit.frontend.variables import stdlib
from framejit.frontend.variables.base import (
    CellVariable,
    VariableTracker,
    change_count,
)
from framejit.frontend.variables.containers import (
    DictVariable,
    TupleVariable,
)
from framejit.frontend.variables.functions import (
    NestedFunctionVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from framejit.frontend.variables.generators import GeneratorVariable, draws_random_numbers
from framejit.frontend.variables.objects import (
    NNModuleVariable,
    _class_attr,
)
from framejit.frontend.variables.rnn import RNN_TYPES, call_rnn
from framejit.frontend.variables.tensor import TensorVariable
from framejit.guards import GuardKind
from framejit.guards.guard import storage_key

from framejit.config import config

# torch code framejit refuses to trace: a call into it runs as Python at a break, and is not
# compiled on its own. Optimizer and scheduler steps and autograd's entry points mutate state
# framejit does not model (`.grad`, optimizer state). Functions torch marks as never to be
# compiled carry its marker attributes (on the wrapper, or, for the lazily built wrappers
# torch uses internally, on the wrapped function once it ran); they are recognised by those
# markers and by what they wrap (`__wrapped__`), never by importing anything.
_PYTHON_ONLY_TORCH = ("torch.optim", "torch.autograd")
_DO_NOT_COMPILE_MARKERS = ("_torchdynamo_disable", "__dynamo_disable")
# The lazy wrapper torch puts on its own do-not-compile functions (`torch.utils.checkpoint`,
# ...) before their first call: the function `inner` of torch/_compile.py, known by its code.
_LAZY_DISABLE_FILE = os.path.join("torch", "_compile.py")


def marked_not_to_compile(fn: Any) -> bool:
    """Does `fn` carry torch's do-not-compile markers (on a function it has run once)?"""
    return any(getattr(fn, marker, None) for marker in _DO_NOT_COMPILE_MARKERS)


def _lazy_disable_wrapper(fn: Any) -> bool:
    code = getattr(fn, "__code__", None)
    return (
        code is not None
        and code.co_name == "inner"
        and code.co_filename.endswith(_LAZY_DISABLE_FILE)
        and "fn" in code.co_freevars
    )


def no_global_module_hooks(output: Any) -> None:
    """A break while global nn.Module hooks are registered (they would run around every module
    call); else the entry notes that it calls modules, so it checks that none is registered
    later."""
    from torch.nn.modules import module as nn_module

    if (
        nn_module._global_forward_hooks
        or nn_module._global_forward_pre_hooks
        or nn_module._global_backward_hooks
        or nn_module._global_backward_pre_hooks
    ):
        raise Unsupported("module_hooks", "global nn.Module hooks are registered")
    output.calls_modules = True


def runs_as_python(fn: Any) -> bool:
    """Is `fn` (a function or bound method) torch code that a break calls as it is?"""
    fn = getattr(fn, "__func__", fn)
    for _ in range(8):  # the function, then what it wraps (functools.wraps), a few levels
        if marked_not_to_compile(fn):
            return True
        if _lazy_disable_wrapper(fn):
            return True
        module = getattr(fn, "__globals__", {}).get("__name__")
        if isinstance(module, str) and any(
            module == m or module.startswith(m + ".") for m in _PYTHON_ONLY_TORCH
        ):
            return True
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return False
    return False


_signatures: weakref.WeakKeyDictionary[types.CodeType, tuple[Any, inspect.Signature]] = (
    weakref.WeakKeyDictionary()
)


class _RealCell(VariableTracker):
    """A free variable backed by a real cell, read through its Source when loaded."""

    def __init__(self, source: Source | None, cell: Any) -> None:
        self.source = source
        self.cell = cell
        self.written: VariableTracker | None = None  # a value assigned while tracing


def real_cell(tx: Any, source: Source | None, cell: Any) -> _RealCell:
    """The one tracker of a real cell in this trace: a cell reached twice (a frame's free
    variable and the closure of a function it was passed) must see the same writes."""
    root = tx
    while root.parent is not None:
        root = root.parent
    known: dict[int, _RealCell] = root.__dict__.setdefault("_real_cells", {})
    found = known.get(id(cell))
    if found is None or found.cell is not cell:
        found = known[id(cell)] = _RealCell(source, cell)
    return found


def _dataclass_replace(tx: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """`dataclasses.replace(obj, **changes)`: a new instance from obj's init fields."""
    if len(args) != 1:
        raise Unsupported("exception", "dataclasses.replace(...)", "one positional argument")
    obj = args[0]
    cls = obj.python_type()
    if not dataclasses.is_dataclass(cls) or isinstance(cls, type) and cls is type:
        raise Unsupported("exception", "dataclasses.replace(...)", "not a dataclass instance")
    fields = getattr(cls, "__dataclass_fields__", {})
    init: dict[str, Any] = {}
    for f in fields.values():
        if f._field_type is dataclasses._FIELD_CLASSVAR:  # type: ignore[attr-defined]
            continue
        if f._field_type is dataclasses._FIELD_INITVAR:  # type: ignore[attr-defined]
            raise Unsupported("unsupported_call", "dataclasses.replace on a class with InitVar")
        if not f.init:
            if f.name in kwargs:
                raise Unsupported("exception", "dataclasses.replace(...)", "ValueError")
            continue
        init[f.name] = kwargs[f.name] if f.name in kwargs else obj.getattr(tx, f.name)
    extra = {k: v for k, v in kwargs.items() if k not in init}  # eager: TypeError from __init__
    return tx.wrap_value(cls, None).call(tx, [], {**init, **extra})


def _inference_mode_clone(tx: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """`ctx.clone()` of a `torch.inference_mode` object: what `@torch.inference_mode()` does
    on every call of the function it decorates (torch/utils/_contextlib.py), before `with`."""
    from framejit.frontend.variables.contexts import InferenceModeVariable

    this = args[0] if len(args) == 1 and not kwargs else None
    if isinstance(this, InferenceModeVariable):
        return InferenceModeVariable(this.args)
    real = getattr(this, "obj", None)
    if isinstance(real, torch.inference_mode):  # an object from outside: its mode is fixed
        return InferenceModeVariable(bool(real.mode))
    raise Unsupported("unsupported_call", "inference_mode.clone", "on this object")


def _get_logger(tx: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """`logging.getLogger(name)` with a constant name: the process-wide logger of that name,
    looked up now (what eager would get); its logging calls are recorded and replayed."""
    from framejit.frontend.variables.objects import LoggerVariable

    name_vt = args[0] if args else kwargs.get("name")
    if len(args) + len(kwargs) > 1 or (name_vt is not None and not name_vt.is_constant()):
        raise Unsupported("unsupported_call", "logging.getLogger(non-constant name)")
    name = name_vt.as_constant() if name_vt is not None else None
    if name is not None and not isinstance(name, str):
        raise Unsupported("exception", "logging.getLogger(...)", "TypeError")
    return LoggerVariable(logging.getLogger(name), name)


CHECKPOINT_TAG = "framejit_checkpoint"  # node.meta["custom"][CHECKPOINT_TAG]: region number
_checkpoint_regions = iter(range(1, 1 << 62))


def _checkpoint(tx: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """`torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=..., **kwargs)`: `fn` is
    traced inline and the graph nodes it makes are tagged with a region number
    (`node.meta["custom"][CHECKPOINT_TAG]`). The AOT stage's partitioner saves none of a
    region's values for the backward (random ops aside): the backward recomputes the region
    from what flows into it, as checkpointing does in eager. Values are those of eager: the
    forward is the same computation, and random ops are never recomputed.

    Runs as Python (a graph break) where eager would warn or raise, or where its options change
    what runs: `use_reentrant` not given (torch warns), a non-default `context_fn`, `debug`,
    `determinism_check`, keyword arguments with `use_reentrant=True` (a ValueError), and a
    reentrant call whose tensor arguments all have requires_grad=False while grad mode is on
    (torch warns, and its gradients are None).

    Eager runs `fn` a second time in the backward; the graph runs it once. So the call also
    runs as Python where that second run would show (`_recompute_effects`): `fn` writes in place
    to a tensor it did not make (a module buffer: BatchNorm's running statistics), makes a
    Python-visible change (a counter, an attribute, a list a hook appends to, a logging call),
    or draws random numbers with `preserve_rng_state=False` (its recompute draws new ones)."""
    import torch.utils.checkpoint as checkpoint_module

    label = "torch.utils.checkpoint.checkpoint"
    if not args:
        raise Unsupported("exception", f"{label}()", "TypeError: no function given")
    kwargs = dict(kwargs)

    def option(name: str, default: Any) -> Any:
        vt = kwargs.pop(name, None)
        if vt is None:
            return default
        if not vt.is_constant():
            value = getattr(vt, "fn", getattr(vt, "value", None))
            if value is not None and value is default:
                return value
            raise Unsupported("unsupported_call", f"{label}({name}=...)", "not a constant")
        return vt.as_constant()

    use_reentrant = option("use_reentrant", None)
    if use_reentrant is None:
        raise Unsupported("unsupported_call", f"{label} without use_reentrant", "torch warns")
    if option("context_fn", checkpoint_module.noop_context_fn) is not (
        checkpoint_module.noop_context_fn
    ):
        raise Unsupported("unsupported_call", f"{label}(context_fn=...)")
    if option("debug", False) or option("determinism_check", "default") != "default":
        raise Unsupported("unsupported_call", f"{label}(debug=/determinism_check=)")
    option("early_stop", True)  # how far a recompute runs: the values are the same
    # with it, random ops are saved, never recomputed (eager's recompute replays the same draws)
    preserve_rng_state = option("preserve_rng_state", True)
    fn_vt, fn_args = args[0], list(args[1:])
    if use_reentrant:
        if kwargs:
            raise Unsupported("exception", f"{label}(use_reentrant=True, **kwargs)", "ValueError")
        tensors = [a for a in fn_args if isinstance(a, TensorVariable)]
        if torch.is_grad_enabled() and not any(t.fake.requires_grad for t in tensors):
            raise Unsupported(
                "unsupported_call", f"{label}(use_reentrant=True) with no input requiring grad"
            )
    created = tx.output.created
    start = len(created)
    before = _python_effects(tx.output.side_effects)
    result = fn_vt.call(tx, fn_args, kwargs)
    why = _recompute_effects(tx.output.side_effects, before, created[start:], preserve_rng_state)
    if why is not None:
        raise Unsupported(
            "unsupported_call", label, f"the recompute in backward would repeat: {why}"
        )
    region = next(_checkpoint_regions)
    for node in created[start:]:
        custom = node.meta.setdefault("custom", {})
        custom.setdefault(CHECKPOINT_TAG, region)  # a nested region keeps its number
    return result


# Functional ops that update running statistics in place: the running-stat arguments (position,
# name), and the flag that turns the update on (position, name, default).
_RUNNING_STATS = {
    torch.nn.functional.batch_norm: (
        ((1, "running_mean"), (2, "running_var")),
        (5, "training", False),
    ),
    torch.nn.functional.instance_norm: (
        ((1, "running_mean"), (2, "running_var")),
        (5, "use_input_stats", True),
    ),
}


def _python_effects(effects: Any) -> tuple[Any, ...]:
    """What `_recompute_effects` compares: the recorded Python writes and calls so far."""
    return change_count(), len(effects.calls), dict(effects.globals), dict(effects.cells)


def _recompute_effects(
    effects: Any, before: tuple[Any, ...], nodes: list[Any], preserve_rng_state: bool
) -> str | None:
    """An effect of a checkpointed region that eager's recompute would make a second time."""
    changes, n_calls, globals_, cells = before
    if len(effects.calls) > n_calls:
        return "a logging or warnings call"
    if any(globals_.get(k) is not v for k, v in effects.globals.items()):
        return "an assignment to a global"
    if any(cells.get(k) is not v for k, v in effects.cells.items()):
        return "an assignment to a closure variable"
    changed = [obj for obj, _ in effects.attrs.values()] + list(effects.containers.values())
    if any(getattr(vt, "_changed_at", 0) > changes for vt in changed):
        return "a change to a Python object from outside it"
    region = set(nodes)
    outside: set[Any] = set()  # storages of the tensors that flow into the region
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg not in region or arg.op in ("placeholder", "get_attr"):
                outside.update(_storages(arg.meta.get("val")))
    for node in nodes:
        if not preserve_rng_state and draws_random_numbers(node):
            return f"random numbers drawn by {getattr(node.target, '__name__', node.target)}"
        written = _storages(written_tensors(node)) | _running_stats(node)
        if written & outside:
            return f"an in-place write to a tensor from outside it ({node.name})"
    return None


def _running_stats(node: Any) -> set[Any]:
    """Storages of the running statistics a batch_norm/instance_norm node updates."""
    entry = _RUNNING_STATS.get(node.target) if node.op == "call_function" else None
    if entry is None:
        return set()
    stats, (flag_at, flag, default) = entry

    def argument(at: int, name: str, default: Any = None) -> Any:
        return node.args[at] if len(node.args) > at else node.kwargs.get(name, default)

    if argument(flag_at, flag, default) is False:
        return set()
    found: set[Any] = set()
    for at, name in stats:
        arg = argument(at, name)
        found |= _storages(arg.meta.get("val") if hasattr(arg, "meta") else None)
    return found


def _storages(value: Any) -> set[Any]:
    if isinstance(value, (tuple, list)):
        return set().union(*(_storages(v) for v in value))
    key = storage_key(value)
    return {key} if key is not None else set()


# Library functions the translator models instead of inlining their code.
MODELED_FUNCTIONS: dict[Any, Any] = {
    copy.deepcopy: copying.deepcopy,
    copy.copy: copying.shallow_copy,
    dataclasses.replace: _dataclass_replace,
    logging.getLogger: _get_logger,
    torch.utils.checkpoint.checkpoint: _checkpoint,
    torch.autograd.Function.apply.__func__: autograd_function.apply,
    **{fn: functorch.transform(fn) for fn in functorch.TRANSFORMS},
    torch.func.functional_call: functorch.functional_call,
    torch.inference_mode.clone: _inference_mode_clone,
}


class InliningMixin:
    # --- calls -----------------------------------------------------------------------------------
    def call_function_value(
        self, fn: Any, args: list[VariableTracker], kwargs: dict[str, VariableTracker]
    ) -> VariableTracker:
        return self.wrap_value(fn, None).call(self, args, kwargs)

    def call_module(
        self,
        module: NNModuleVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        """`module(*args)`: forward pre-hooks, forward (or the RNN op), forward hooks, inlined
        the way nn.Module.__call__ runs them, keyword hooks (`with_kwargs=True`: they get and
        may replace the keyword arguments) and `always_call` ones included (called after a
        forward that raises too: a raise in traced code ends the trace, and the call runs as
        Python). Backward hooks and global hooks are not captured (the call then runs for real,
        at a graph break)."""
        mod = module.obj

        override = _class_attr(type(mod), "__call__")
        if override is not None and override[1] is not torch.nn.Module.__call__:
            # The class's own `__call__` (work around `super().__call__(...)`) is what eager
            # runs for `module(x)`: inlined as a method call, its super() call then reaches
            # nn.Module's call like any traced code; not Python code: a break, called for real.
            owner, fn = override
            if not isinstance(fn, types.FunctionType):
                raise Unsupported(
                    "unsupported_call", f"{type(mod).__name__}.__call__", "not a Python function"
                )
            method = module._class_function(self, owner, "__call__", fn)
            return UserMethodVariable(method, module).call(self, args, kwargs)
        if mod._backward_hooks or mod._backward_pre_hooks:
            raise Unsupported("module_hooks", f"calling {type(mod).__name__} with these hooks")
        no_global_module_hooks(self.output)
        if not (mod._forward_hooks or mod._forward_pre_hooks):
            if module.source is not None:  # the common case: one cheap guard, no hooks at all
                self.output.add_guard(
                    module.source, GuardKind.MODULE_NO_HOOKS, None, self.location_text()
                )
            return self._module_forward(module, args, kwargs)
        for attr in ("_backward_hooks", "_backward_pre_hooks"):  # pinned empty
            self._module_hooks(module, attr)
        pre_hooks = self._module_hooks(module, "_forward_pre_hooks")
        post_hooks = self._module_hooks(module, "_forward_hooks")
        # which hooks take keyword arguments (the always-called ones run as any other here)
        pre_kw = self._module_hooks(module, "_forward_pre_hooks_with_kwargs")
        post_kw = self._module_hooks(module, "_forward_hooks_with_kwargs")
        self._module_hooks(module, "_forward_hooks_always_called")
        given_kwargs = DictVariable(dict(kwargs))  # the one dict the keyword hooks get
        for key, hook in pre_hooks.items():
            if key in pre_kw:
                result = hook.call(self, [module, TupleVariable(list(args)), given_kwargs], {})
                if not (result.is_constant() and result.as_constant() is None):
                    pair = result.unpack(self) if isinstance(result, TupleVariable) else None
                    if pair is None or len(pair) != 2 or not isinstance(pair[1], DictVariable):
                        why = "not an (args, kwargs) pair"
                        raise Unsupported("module_hooks", "a keyword pre-hook's result", why)
                    args, given_kwargs = pair[0].unpack(self), pair[1]
                continue
            result = hook.call(self, [module, TupleVariable(list(args))], {})
            if not (result.is_constant() and result.as_constant() is None):
                args = result.unpack(self) if isinstance(result, TupleVariable) else [result]
        if pre_kw:  # as the hooks left it (written in place, or replaced)
            kwargs = {str(k): v for k, v in given_kwargs.items.items()}
        out = self._module_forward(module, args, kwargs)
        for key, hook in post_hooks.items():
            given = [module, TupleVariable(list(args))]
            if key in post_kw:
                given.append(given_kwargs)
            result = hook.call(self, [*given, out], {})
            if not (result.is_constant() and result.as_constant() is None):
                out = result
        return out

    def _module_hooks(self, module: NNModuleVariable, attr: str) -> dict[Any, VariableTracker]:
        """The hooks in `module.<attr>` by handle id, guarded: same keys (handles), same
        functions (or flags)."""
        hooks = getattr(module.obj, attr)
        if module.source is None:
            if hooks:
                raise Unsupported("module_hooks", "hooks on a module with no source")
            return {}
        return dict(self.wrap_source(AttrSource(module.source, attr)).items)

    def _module_forward(
        self,
        module: NNModuleVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        mod = module.obj
        if isinstance(mod, RNN_TYPES):
            return call_rnn(self, module, args, kwargs)
        if "forward" in mod.__dict__:
            forward = module.getattr(self, "forward")
            return forward.call(self, args, kwargs)
        return module.getattr(self, "forward").call(self, args, kwargs)

    def inline_user_function(
        self,
        fn_vt: UserFunctionVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        fn = fn_vt.fn
        code = fn.__code__
        src = fn_vt.source
        if getattr(fn, "_framejit_disabled", False):
            raise Unsupported("unsupported_call", f"{fn.__qualname__}", "framejit.disable")
        modeled = MODELED_FUNCTIONS.get(fn)
        if modeled is not None:
            return modeled(self, args, kwargs)
        if code is stdlib.SINGLEDISPATCH_DISPATCH_CODE:
            impl = stdlib.singledispatch_dispatch(self, fn, args, kwargs)
            if impl is not None:
                return impl
        modeled = optimizers.modeled(fn)
        if modeled is not None:
            return modeled(self, fn_vt, args, kwargs)
        if runs_as_python(fn) and not optimizers.traced(fn):
            raise Unsupported("unsupported_call", f"{fn.__qualname__}", "torch code run as Python")

        def default(i: int) -> VariableTracker:
            if src is not None:
                return self.wrap_source(default_source(src, i))
            return self.wrap_value(fn.__defaults__[i], None)

        def kwdefault(name: str) -> VariableTracker:
            if src is not None:
                return self.wrap_source(kwdefault_source(src, name))
            return self.wrap_value(fn.__kwdefaults__[name], None)

        freevars: dict[str, CellVariable | _RealCell] = {}
        for i, name in enumerate(code.co_freevars):
            cell_src = closure_cell_source(src, i) if src is not None else None
            freevars[name] = real_cell(self, cell_src, fn.__closure__[i])
        bound = self._bind(
            code,
            fn.__qualname__,
            len(fn.__defaults__ or ()),
            tuple(fn.__kwdefaults__ or ()),
            default,
            kwdefault,
            args,
            kwargs,
        )
        return self._inline(code, fn.__globals__, bound, freevars, src)

    def inline_nested_function(
        self,
        fn_vt: NestedFunctionVariable,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> VariableTracker:
        code = fn_vt.code
        freevars: dict[str, CellVariable | _RealCell] = dict(zip(code.co_freevars, fn_vt.closure))
        bound = self._bind(
            code,
            fn_vt.qualname,
            len(fn_vt.defaults),
            tuple(fn_vt.kwdefaults),
            lambda i: fn_vt.defaults[i],
            lambda n: fn_vt.kwdefaults[n],
            args,
            kwargs,
        )
        return self._inline(code, fn_vt.f_globals, bound, freevars, None)

    def _bind(
        self,
        code: types.CodeType,
        qualname: str,
        ndefaults: int,
        kwdefault_names: tuple[str, ...],
        default: Any,
        kwdefault: Any,
        args: list[VariableTracker],
        kwargs: dict[str, VariableTracker],
    ) -> dict[str, VariableTracker]:
        key = (code, ndefaults, kwdefault_names)
        cached = _signatures.get(code)
        sig = cached[1] if cached is not None and cached[0] == key else None
        if sig is None:
            dummy = types.FunctionType(
                code,
                {},
                code.co_name,
                tuple(_Default(i) for i in range(ndefaults)),
                tuple(types.CellType() for _ in code.co_freevars),
            )
            dummy.__kwdefaults__ = {n: _KwDefault(n) for n in kwdefault_names} or None
            sig = inspect.signature(dummy)
            _signatures[code] = (key, sig)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise Unsupported("exception", f"calling {qualname}", f"TypeError: {exc}") from None
        bound.apply_defaults()
        out: dict[str, VariableTracker] = {}
        # inspect renames comprehension arguments (".0" -> "implicit0"): map back by position
        real_names = dict(zip(sig.parameters, code.co_varnames))
        for name, value in bound.arguments.items():
            kind = sig.parameters[name].kind
            if isinstance(value, _Default):
                value = default(value.index)
            elif isinstance(value, _KwDefault):
                value = kwdefault(value.name)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                value = TupleVariable(list(value))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                value = DictVariable(dict(value))
            out[real_names[name]] = value
        return out

    def _inline(
        self,
        code: types.CodeType,
        f_globals: dict[str, Any],
        bound: dict[str, VariableTracker],
        freevars: dict[str, Any],
        fn_source: Source | None,
    ) -> VariableTracker:
        if code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            raise Unsupported("generator", f"calling async function {code.co_name}")
        generator = bool(code.co_flags & inspect.CO_GENERATOR)
        if self.depth + 1 > config.inline_depth_limit:
            raise Unsupported(
                "recursion_limit", f"calling {code.co_name}", f"depth {config.inline_depth_limit}"
            )
        from framejit.frontend.translator import Translator

        if generator and code in self.output.eager_generators:
            why = self.output.eager_generators[code]
            raise Unsupported("generator", f"calling generator {code.co_qualname}", why)
        child = Translator(code, f_globals, self.output, bound, freevars, parent=self)
        child.fn_source = fn_source
        if generator:  # run lazily, one item per `next` (variables/generators.py)
            child.is_generator = True
            return GeneratorVariable(child, bound)
        child.steps = self.steps
        try:
            result = child.run()
        except RecursionError:
            # deep recursion in the traced code: Python's stack ran out before the inline
            # limit (each inlined call takes several of the translator's frames); the call
            # runs for real instead, at a graph break
            raise Unsupported(
                "recursion_limit", f"calling {code.co_name}", "Python's recursion limit"
            ) from None
        self.steps = child.steps
        return result


class _Default:
    def __init__(self, index: int) -> None:
        self.index = index


class _KwDefault:
    def __init__(self, name: str) -> None:
        self.name = name

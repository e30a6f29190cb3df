"""The public entry points: jit, disable, reset, explain.

`jit(fn)` returns a JitFunction: on each call it binds the arguments the way the frame would see
them, runs the first cached entry whose guards hold, and otherwise asks the frontend to compile a
new entry (up to `config.recompile_limit`, then the code runs eagerly with one warning).
`jit(module)` returns a JitModule that stands in for the module: its state, its nn.Module
methods and its hooks are the module's own, and calling it is the module's call as eager makes
it (hooks included), with the forward run through a JitFunction.

While a TorchFunctionMode or TorchDispatchMode of the user's is active (`user_mode_active`: any
but torch's own device context), a call runs as plain Python: every entry's GLOBAL_STATE guard,
checked before any guard reads a tensor, fails, and a miss compiles nothing, so the mode sees the
program's torch calls, once each, and none of framejit's.
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.modules import module as _nn_module

from framejit.backend import lookup_backend
from framejit.backend.registry import with_cudagraphs
from framejit.config import config
from framejit.frontend.codegen import argnames_of, rebind, same_cells
from framejit.frontend.convert import compile_frame, guard_report
from framejit.frontend.hook import disabled as hook_disabled
from framejit.frontend.hook import forget_skip_marks, inside_torch_dispatch, user_mode_active
from framejit.guards import CodeCache, clear_caches

MODES = (None, "default", "reduce-overhead", "max-autotune")


def _check_options(backend: Any, mode: Any, fullgraph: Any, dynamic: Any, options: Any) -> Any:
    resolved = lookup_backend(backend)
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(map(repr, MODES))}")
    if not isinstance(fullgraph, bool):
        raise TypeError(f"fullgraph must be a bool, got {type(fullgraph).__name__}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"dynamic must be None, True or False, got {dynamic!r}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict or None, got {type(options).__name__}")
    return resolved


def jit(
    fn: Any = None,
    *,
    backend: Any = None,
    mode: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """Compile `fn` (a function, lambda, bound method or nn.Module) with framejit.

    Usable bare (`@jit`) or with options (`@jit(backend="eager")`).
    """
    backend = config.backend if backend is None else backend
    mode = mode if mode is not None else config.mode
    resolved = _check_options(backend, mode, fullgraph, dynamic, options)
    if fn is None:
        return lambda f: jit(
            f, backend=backend, mode=mode, fullgraph=fullgraph, dynamic=dynamic, options=options
        )
    if mode in ("reduce-overhead", "max-autotune"):
        # compiled graphs run through CUDA graph trees; max-autotune also tunes Triton wider
        resolved = with_cudagraphs(resolved, max_autotune=mode == "max-autotune")
    settings = _Settings(resolved, mode, fullgraph, dynamic, dict(options or {}))
    if config.disable or getattr(getattr(fn, "__func__", fn), "_framejit_disabled", False):
        return fn
    if isinstance(fn, torch.nn.Module):
        return JitModule(fn, settings)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(_jit_function(fn.__func__, settings), fn.__self__)
    if isinstance(fn, types.FunctionType):
        return _jit_function(fn, settings)
    if isinstance(fn, JitFunction):
        return fn
    call = type(fn).__dict__.get("__call__") if callable(fn) else None
    if callable(fn) and isinstance(call, types.FunctionType):
        return types.MethodType(_jit_function(call, settings), fn)
    wrapper = _op_function(fn)
    if wrapper is not None:
        return _jit_function(wrapper, settings)
    raise TypeError(
        f"framejit.jit expects a Python function, lambda, bound method, torch.nn.Module or a "
        f"torch builtin (torch.sin); "
        f"got {type(fn).__name__} {fn!r:.60}"
    )


_BUILTIN_CALLABLES = (types.BuiltinFunctionType, types.BuiltinMethodType)


def _op_function(fn: Any) -> types.FunctionType | None:
    """torch.sin, torch.ops.aten.add...: no bytecode of their own, so they are compiled as the
    one op of a Python function that calls them (None: `fn` is not such a callable)."""
    if not isinstance(
        fn, (*_BUILTIN_CALLABLES, torch._ops.OpOverloadPacket, torch._ops.OpOverload)
    ):
        return None
    target = fn

    def call_op(*args: Any, **kwargs: Any) -> Any:
        return target(*args, **kwargs)

    call_op.__name__ = call_op.__qualname__ = str(getattr(fn, "__name__", "op"))
    return call_op


@dataclass(frozen=True)
class _Settings:
    backend: Any
    mode: str | None
    fullgraph: bool
    dynamic: bool | None
    options: dict[str, Any] = field(default_factory=dict)
    # Called with each CompileResult of this function, its resume functions and callees
    # (explain() collects them).
    observer: Callable[[Any], None] | None = None


def _make_binder(fn: types.FunctionType) -> Any:
    """A function with fn's signature returning the frame's arguments in co_varnames order
    (generated, so binding runs at C speed; inspect.Signature.bind for names that are not
    identifiers, as in resume functions of code whose locals a tool renamed)."""
    code = fn.__code__
    names = argnames_of(code)
    if not all(n.isidentifier() for n in names):
        # Only generated resume functions have such names: plain positional parameters.
        count = len(names)

        def bind_positionally(*args: Any) -> tuple[Any, ...]:
            if len(args) != count:
                raise TypeError(f"{code.co_name}() takes {count} arguments ({len(args)} given)")
            return args

        return bind_positionally
    sig = inspect.signature(fn, follow_wrapped=False)  # the code's own parameters
    params = []
    for p in sig.parameters.values():
        text = p.name
        if p.kind is p.VAR_POSITIONAL:
            text = f"*{p.name}"
        elif p.kind is p.VAR_KEYWORD:
            text = f"**{p.name}"
        params.append((p.kind, text))
    parts: list[str] = []
    seen_kwonly = False
    last_posonly = None
    for kind, text in params:
        if (
            kind is inspect.Parameter.KEYWORD_ONLY
            and not seen_kwonly
            and not any(k is inspect.Parameter.VAR_POSITIONAL for k, _ in params)
        ):
            parts.append("*")
            seen_kwonly = True
        parts.append(text)
        if kind is inspect.Parameter.POSITIONAL_ONLY:
            last_posonly = len(parts)
    if last_posonly is not None:
        parts.insert(last_posonly, "/")
    src = f"def bind({', '.join(parts)}):\n    return ({''.join(n + ', ' for n in names)})\n"
    scope: dict[str, Any] = {}
    exec(src, scope)  # noqa: S102 - generated from a signature
    binder = scope["bind"]
    # named as the function, so a call with bad arguments raises eager's TypeError
    # ("f() missing 1 required positional argument: 'x'")
    binder.__name__, binder.__qualname__ = fn.__name__, fn.__qualname__
    binder.__defaults__ = fn.__defaults__
    binder.__kwdefaults__ = fn.__kwdefaults__
    return binder


def _follow_defaults(target: types.FunctionType, fn: types.FunctionType) -> None:
    """Give `target` (the binder, a compiled entry) `fn`'s defaults as they are now: the user
    may assign `fn.__defaults__` or `fn.__kwdefaults__` after `jit`."""
    if target.__defaults__ is not fn.__defaults__ or target.__kwdefaults__ is not fn.__kwdefaults__:
        target.__defaults__ = fn.__defaults__
        target.__kwdefaults__ = fn.__kwdefaults__


def _rebound(entry_fn: Any, live: types.FunctionType) -> Any:
    """An entry's function run with the cells of `live` (same code, other closure)."""
    if not isinstance(entry_fn, types.FunctionType) or entry_fn.__closure__ is None:
        return entry_fn
    return rebind(entry_fn, live, live.__closure__)


class JitFunction:
    """A compiled function: guards -> transformed code, compiling on a miss."""

    def __init__(self, fn: types.FunctionType, settings: _Settings) -> None:
        self._fn = fn
        self._settings = settings
        self._wrapped: weakref.WeakKeyDictionary[Any, JitFunction] = weakref.WeakKeyDictionary()
        self._follow_code()

    def _follow_code(self) -> None:
        """Cache, binder and fast path for the function's code as it is now (again when the
        user assigns `fn.__code__`)."""
        fn = self._fn
        code = self._code = fn.__code__
        self._cache = CodeCache(f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})")
        _live_caches.add(self._cache)
        self._bind = _make_binder(fn)
        self._nargs = code.co_argcount
        # Positional calls with exactly co_argcount arguments need no binding.
        self._simple = not (code.co_flags & 0x0C) and code.co_kwonlyargcount == 0
        functools.update_wrapper(self, fn)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(self._fn, args, kwargs)

    def with_closure(self, closure: tuple) -> Any:
        """This function's compiled code run with other cells: the same nested function made
        again (a resume function of one, called from its parent's next call). Entries are
        shared; each call runs them with these cells."""
        fn = self._fn
        if same_cells(closure, fn.__closure__):
            return self
        return functools.partial(self._call_live, rebind(fn, fn, closure))

    def _call_live(self, live: types.FunctionType, *args: Any, **kwargs: Any) -> Any:
        return self._call(live, args, kwargs)

    def _call(self, fn: types.FunctionType, args: tuple, kwargs: dict[str, Any]) -> Any:
        if fn.__code__ is not self._code:  # `fn.__code__ = other.__code__`
            self._follow_code()
        frame_args = args if (self._simple and not kwargs and len(args) == self._nargs) else None
        if frame_args is None:
            _follow_defaults(self._bind, fn)
            frame_args = self._bind(*args, **kwargs)
        entries = self._cache.entries
        for i, entry in enumerate(entries):
            if entry.guards.check(fn, *frame_args):
                if i:
                    entries.insert(0, entries.pop(i))
                target = entry.fn if fn is self._fn else _rebound(entry.fn, fn)
                if frame_args is not args:  # the call may rely on defaults
                    _follow_defaults(target, fn)
                return target(*args, **kwargs)
        return self._miss(fn, args, kwargs, frame_args)

    def _miss(
        self,
        fn: types.FunctionType,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        frame_args: tuple,
    ) -> Any:
        cache = self._cache
        if (
            cache.eager
            or self._settings.backend is None
            or user_mode_active()  # before record_miss reads the guards' tensors
            or inside_torch_dispatch()
        ):
            return fn(*args, **kwargs)
        if cache.entries and cache.record_miss(fn, frame_args, fn.__qualname__, stacklevel=4):
            return fn(*args, **kwargs)
        s = self._settings
        with hook_disabled():  # user code the backend runs while compiling is not hooked
            result = compile_frame(
                fn, frame_args, s.backend, s.fullgraph, self._wrap_resume, s.dynamic, cache
            )
        if s.observer is not None:
            s.observer(result)
        cache.add(result.entry)
        target = result.entry.fn if fn is self._fn else _rebound(result.entry.fn, fn)
        return target(*args, **kwargs)

    def _wrap_resume(self, fn: Any) -> Any:
        """What transformed code calls instead of a resume function, or of the function or
        module a graph break runs for real: a jit of it, so it is compiled on its own."""
        if getattr(fn, "_framejit_disabled", False) or _has_hooks(fn):
            return fn  # hooks must see the module itself: call it as it is
        wrapped = self._wrapped.get(fn)
        if wrapped is None:
            if isinstance(fn, torch.nn.Module):
                wrapped = JitModule(fn, self._settings)
            else:
                wrapped = JitFunction(fn, self._settings)
            self._wrapped[fn] = wrapped
        return wrapped

    @property
    def cache(self) -> CodeCache:
        return self._cache

    def __repr__(self) -> str:
        return f"<framejit.jit {self._fn.__qualname__}>"


_live_caches: weakref.WeakSet[CodeCache] = weakref.WeakSet()


class _GraphedJitFunction(JitFunction):
    """A JitFunction under mode="reduce-overhead": a call from outside any compiled code begins
    an invocation, which CUDA graph trees use to tell a new step from the next graph of the same
    call (a resume function after a graph break runs inside the outer call)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = _invocation
        if state.depth:
            return JitFunction.__call__(self, *args, **kwargs)
        from framejit import cudagraphs

        cudagraphs.begin_invocation()
        state.depth = 1
        try:
            return JitFunction.__call__(self, *args, **kwargs)
        finally:
            state.depth = 0


class _InvocationDepth(threading.local):
    depth = 0


_invocation = _InvocationDepth()


def _jit_function(fn: types.FunctionType, settings: _Settings) -> JitFunction:
    if settings.mode in ("reduce-overhead", "max-autotune"):
        return _GraphedJitFunction(fn, settings)
    return JitFunction(fn, settings)


def _call_module(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    return module(*args, **kwargs)


# Modules whose call the translator captures as one op (frontend/variables/rnn.py).
_CALLED_AS_A_WHOLE = (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)


def _global_module_hooks() -> bool:
    """Are hooks registered for every module (`register_module_forward_hook` and friends)?"""
    m = _nn_module
    return bool(
        m._global_forward_hooks
        or m._global_forward_pre_hooks
        or m._global_backward_hooks
        or m._global_backward_pre_hooks
    )


def _has_hooks(obj: Any) -> bool:
    if not isinstance(obj, torch.nn.Module):
        return False
    return bool(
        obj._forward_hooks
        or obj._forward_pre_hooks
        or obj._backward_hooks
        or obj._backward_pre_hooks
        or _global_module_hooks()
    )


# The containers nn.Module.__init__ makes (parameters, buffers, submodules, every kind of hook):
# a JitModule holds the original's own objects under these names.
_MODULE_CONTAINERS = tuple(
    name for name, value in vars(torch.nn.Module()).items() if isinstance(value, (dict, set))
)


class JitModule(torch.nn.Module):
    """An nn.Module whose forward runs through framejit; it stands in for the original.

    Invariants:
    - The wrapper keeps no module state of its own. Its nn.Module containers are the original's
      own objects (`_parameters`, `_modules`, the hook dicts: `_MODULE_CONTAINERS`); every other
      attribute read, written or deleted on it is the original's, `training` included.
    - Every nn.Module method is the original's, called on the original (`_delegate`): hooks
      registered through the wrapper are the original's hooks, `apply(fn)`, `modules()` and
      `state_dict()` see the original, and a method that returns the module itself (`to()`,
      `train()`, `apply()`) returns the wrapper.
    - A call is the original's call as eager makes it: global module hooks and the original's
      own hooks run once each and see the original, never the wrapper.
    """

    _OWN = frozenset({"_orig_mod", "_jit_forward", "_jit_call", "_settings", "_bound_to"})

    def __new__(cls, mod: torch.nn.Module, settings: _Settings) -> JitModule:
        # Python finds `fast[0]`, `len(fast)`, `for m in fast` on the class, not through
        # __getattr__: the wrapper of a Sequential, ModuleList or ModuleDict is of a subclass
        # with the original's container methods.
        special = tuple(n for n in _CONTAINER_METHODS if getattr(type(mod), n, None) is not None)
        return super().__new__(_with_methods(special) if special else cls)

    def __init__(self, mod: torch.nn.Module, settings: _Settings) -> None:
        # No nn.Module.__init__: it would make state of the wrapper's own.
        own = self.__dict__
        own["_orig_mod"] = mod
        own["_settings"] = settings
        for name in _MODULE_CONTAINERS:
            if name in mod.__dict__:
                own[name] = mod.__dict__[name]
        self._bind_forward()
        own["_jit_call"] = _jit_function(_call_module, settings)

    def _bind_forward(self) -> None:
        """Compile the original's forward as it is now; `forward` binds it again when the
        original's class or forward changed (`m.forward = ...`, `m.__class__ = Other`)."""
        mod, settings = self.__dict__["_orig_mod"], self.__dict__["_settings"]
        forward = type(mod).forward
        if type(mod) in _CALLED_AS_A_WHOLE:
            # captured through the module call itself (an aten op), not its Python forward
            jitted = types.MethodType(_jit_function(_call_module, settings), mod)
        elif "forward" in mod.__dict__ or not isinstance(forward, types.FunctionType):
            jitted = jit(
                mod.forward,
                backend=settings.backend,
                mode=settings.mode,
                fullgraph=settings.fullgraph,
                dynamic=settings.dynamic,
            )
        else:
            jitted = types.MethodType(_jit_function(forward, settings), mod)
        object.__setattr__(self, "_jit_forward", jitted)
        object.__setattr__(self, "_bound_to", (type(mod), mod.__dict__.get("forward", forward)))

    @property  # type: ignore[override]
    def training(self) -> bool:
        return self.__dict__["_orig_mod"].training

    @training.setter
    def training(self, mode: bool) -> None:
        self.__dict__["_orig_mod"].training = mode

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        mod = self._orig_mod
        if _global_module_hooks() or mod._compiled_call_impl is not None:
            # global hooks are not captured (every module call would break the graph), nor is
            # `mod.compile()`: the call is the original's own
            return mod(*args, **kwargs)
        if (
            mod._forward_hooks
            or mod._forward_pre_hooks
            or mod._backward_hooks
            or mod._backward_pre_hooks
        ):
            # the original's hooks must run: compile the call itself, hooks included
            return self._jit_call(mod, *args, **kwargs)
        return self.forward(*args, **kwargs)

    _call_impl = _wrapped_call_impl = __call__

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The original's forward, compiled (no hooks, as `mod.forward(x)` runs none)."""
        mod = self._orig_mod
        cls, forward = self._bound_to
        if type(mod) is not cls or mod.__dict__.get("forward", cls.forward) is not forward:
            self._bind_forward()
        return self._jit_forward(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        mod = self.__dict__.get("_orig_mod")
        if mod is None:  # only while the wrapper is being built
            raise AttributeError(name)
        return getattr(mod, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._OWN:
            object.__setattr__(self, name, value)
        else:  # `training` too
            setattr(self.__dict__["_orig_mod"], name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.__dict__["_orig_mod"], name)

    def __dir__(self) -> list[str]:
        return dir(self.__dict__["_orig_mod"])

    def __repr__(self) -> str:
        return f"framejit.JitModule({self._orig_mod!r})"

    # copy, deepcopy and pickle make a JitModule of a copy of the original, with caches of its own
    def __reduce_ex__(self, protocol: Any) -> Any:
        return (JitModule, (self._orig_mod, self._settings))

    def __copy__(self) -> JitModule:
        return JitModule(copy.copy(self._orig_mod), self._settings)

    def __deepcopy__(self, memo: dict[int, Any]) -> JitModule:
        return JitModule(copy.deepcopy(self._orig_mod, memo), self._settings)


def _delegate(name: str) -> Callable[..., Any]:
    """JitModule.<name>: the original's own method of that name (its class may override
    nn.Module's), called on the original; where it returns the original, the wrapper."""

    def method(self: JitModule, *args: Any, **kwargs: Any) -> Any:
        mod = self.__dict__["_orig_mod"]
        result = getattr(mod, name)(*args, **kwargs)
        return self if result is mod else result

    method.__name__ = name
    method.__qualname__ = f"JitModule.{name}"
    method.__doc__ = getattr(getattr(torch.nn.Module, name, None), "__doc__", None)
    return method


# Methods of module containers (Sequential, ModuleList, ModuleDict) that Python looks up on the
# class: a JitModule of such a module has them (JitModule.__new__).
_CONTAINER_METHODS = (
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__len__",
    "__iter__",
    "__reversed__",
    "__contains__",
    "__add__",
    "__iadd__",
    "__mul__",
    "__rmul__",
    "__imul__",
)


@functools.cache
def _with_methods(names: tuple[str, ...]) -> type[JitModule]:
    """The JitModule subclass with these container methods of the original's."""
    methods: dict[str, Any] = {name: _delegate(name) for name in names}
    methods["__qualname__"] = "JitModule"
    return type("JitModule", (JitModule,), methods)


# Every nn.Module method the wrapper does not define itself (register_*_hook, state_dict,
# load_state_dict, apply, to, train, modules, named_parameters, ...: whatever this torch has).
for _name, _value in vars(torch.nn.Module).items():
    if (
        isinstance(_value, types.FunctionType)
        and _name not in JitModule.__dict__
        and _name not in ("__getstate__", "__setstate__")  # pickling goes by __reduce_ex__
    ):
        setattr(JitModule, _name, _delegate(_name))
del _name, _value


def disable(fn: Any = None) -> Any:
    """Never compile `fn`: the translator will not inline it, and `jit(fn)` runs it as is."""
    if fn is None:
        return disable
    if not callable(fn):
        raise TypeError(f"framejit.disable expects a callable, got {type(fn).__name__}")
    target = getattr(fn, "__func__", fn)
    try:
        target._framejit_disabled = True
    except (AttributeError, TypeError):
        pass
    return fn


def reset() -> None:
    """Drop every compiled entry and cache (guards, graphs, transformed code, CUDA graphs)."""
    for cache in _live_caches:
        cache.entries.clear()
        cache.eager = False
        cache.eager_reason = ""
        cache.recompile_reasons.clear()
        cache.shape_history = None
    clear_caches()
    forget_skip_marks()  # code the frame hook marked skip is looked at again
    if "framejit.cudagraphs" in sys.modules:  # free every CUDA graph pool
        sys.modules["framejit.cudagraphs"].reset()


def mark_step_begin() -> None:
    """Start a new step for CUDA graph trees (mode="reduce-overhead"): from now on a replay may
    overwrite the outputs of earlier steps (reading one that was overwritten raises an error;
    `.clone()` what you keep). Calling a compiled function again also starts a step, unless a
    backward of the current step is still to run."""
    from framejit import cudagraphs

    cudagraphs.mark_step_begin()


def check_index_errors() -> None:
    """Raise `IndexOutOfBounds` if a Triton kernel of an earlier call read an index out of
    range and its check was deferred (on CUDA by default, `config.index_checks`): a later
    call of the same graph raises too, this raises now (it waits for the device)."""
    from framejit.backend.triton import bounds

    bounds.check_index_errors()


@dataclass
class ExplainOutput:
    graph_count: int
    graph_break_count: int
    break_reasons: list[str]
    graphs: list[torch.fx.GraphModule]
    ops_per_graph: list[int]
    guards: list[str]
    compile_seconds: float

    def __str__(self) -> str:
        lines = [
            f"graphs: {self.graph_count}, graph breaks: {self.graph_break_count}, "
            f"compile time: {self.compile_seconds * 1e3:.1f} ms"
        ]
        for i, (gm, ops) in enumerate(zip(self.graphs, self.ops_per_graph)):
            lines.append(f"graph {i}: {ops} ops")
            lines.append("  " + gm.code.strip().replace("\n", "\n  "))
        for r in self.break_reasons:
            lines.append(f"break: {r}")
        lines.append(f"guards ({len(self.guards)}):")
        lines += [f"  {g}" for g in self.guards]
        return "\n".join(lines)


def explain(fn: Any, *args: Any, **kwargs: Any) -> ExplainOutput:
    """Run `fn(*args, **kwargs)` once under a fresh, private jit and report what framejit
    captured: graphs (including those of resume functions after graph breaks), ops, graph
    breaks with their reasons, and guards. No existing cache is used or changed."""
    if isinstance(fn, JitModule):
        fn = fn._orig_mod
    if isinstance(fn, JitFunction):
        fn = fn._fn
    if isinstance(fn, torch.nn.Module):
        target, self_obj = type(fn).forward, fn
        if type(fn) in _CALLED_AS_A_WHOLE:
            target = _call_module
    elif isinstance(fn, types.MethodType):
        target, self_obj = fn.__func__, fn.__self__
    elif isinstance(fn, types.FunctionType):
        target, self_obj = fn, None
    elif _op_function(fn) is not None:
        target, self_obj = _op_function(fn), None
    else:
        raise TypeError(
            f"framejit.explain expects a function, method or nn.Module, got {type(fn).__name__}"
        )
    if isinstance(target, JitFunction):
        target = target._fn
    results: list[Any] = []
    settings = _Settings(lookup_backend("eager"), None, False, None, {}, results.append)
    jitted = JitFunction(target, settings)
    call_args = (self_obj, *args) if self_obj is not None else args
    jitted(*call_args, **kwargs)
    graphs = [g for r in results for g in r.graphs]
    reasons = [b for r in results for b in r.break_reasons]
    guards: list[str] = []
    for r in results:
        report = guard_report(r.entry.code, r.entry.guards).splitlines()[1:]
        guards += [line.strip() for line in report]
    return ExplainOutput(
        graph_count=len(graphs),
        graph_break_count=len(reasons),
        break_reasons=[r.describe() for r in reasons],
        graphs=[g.gm for g in graphs],
        ops_per_graph=[g.op_count for g in graphs],
        guards=guards,
        compile_seconds=sum(r.seconds for r in results),
    )
